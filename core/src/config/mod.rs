//! The experiment file: `experiment.toml`. The schema is here; `spans.rs` turns offsets into
//! positions and positioned errors, `overrides.rs` applies `--set`, `checks.rs` holds the
//! semantic checks and `params.rs` decodes one component's keys ([`ParamSource`]).
//!
//! Decoding runs in two passes so that every error carries a file, line and column:
//! 1. the whole document into [`Config`], where each strategy entry keeps its `type` and its
//!    other keys as an opaque table;
//! 2. each strategy's keys into that strategy's own parameter struct ([`ParamSource::parse`]),
//!    from the same spanned document, so a bad key inside `[[forgetting]]` points at its line.
//!
//! Unknown keys, unknown strategy names and wrong types are errors with a "did you mean" hint.

use crate::error::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

mod augment;
mod checks;
mod data_stream;
mod divergence;
mod objective;
mod overrides;
mod params;
mod spans;
mod tasks;

pub use augment::*;
pub use data_stream::*;
pub use divergence::*;
pub use objective::*;
pub use overrides::*;
pub use params::*;
pub use spans::*;
pub use tasks::*;

/// `[run]`: run-wide settings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The seed of every random stream (data order, permutations, initialisation, sampling).
    pub seed: u64,
    /// `cpu` (Burn's flex backend), `vulkan` or `cuda`.
    pub device: String,
    /// Output directory; `--out` overrides it. Default `runs/<config stem>`.
    pub out: Option<PathBuf>,
    /// Flush denormal numbers to zero on the threads that train
    /// ([`crate::threads::flush_denormals`]): much faster once a task's loss saturates, and the
    /// run's results differ from an unflushed one's only where a value fell below 2⁻¹²⁶.
    /// Default `false`; x86-64 CPUs only (elsewhere the run warns and trains unflushed). Left
    /// out of the config's JSON when `false`, so that a checkpoint written before this key
    /// existed keeps its [`crate::train::trainer::config_identity`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub flush_denormals: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            device: "cpu".into(),
            out: None,
            flush_denormals: false,
        }
    }
}

/// The continual-learning scenario (van de Ven & Tolias 2019, "Three scenarios for continual
/// learning").
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Split classes into tasks; one head over all classes seen; no task id at test time.
    ClassIncremental,
    /// Split classes into tasks; the task id is known, logits are masked to the task's classes.
    TaskIncremental,
    /// Same label space, shifted inputs: one fixed pixel permutation per task (Permuted-X).
    DomainIncremental,
}

/// Which held-out samples evaluation uses.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EvalSplit {
    /// The official test split.
    #[default]
    Test,
    /// The `validation` share held out of the training split (for tuning hyperparameters).
    Validation,
}

/// `[data]`: the dataset and how it becomes a stream of tasks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// A registered dataset (`fashion-mnist`, `mnist`, a plugin's); with `format`, only the
    /// data's display name (default: the directory's name). Required without `format`.
    #[serde(default)]
    pub dataset: String,
    /// A data format reading `path`: `idx`, `npy`, `csv`, `image-folder` or a plugin's
    /// ([`crate::data::format`]). Default: none (`dataset` names a registered dataset).
    #[serde(default)]
    pub format: Option<String>,
    /// The data's directory (or `.npz` file), relative to the config file. Required with
    /// `format`; for a registered dataset the directory holding its files, else
    /// `$ENGRAM_DATA/<dataset>/`, then `/usr/share/datasets/<dataset>/`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The normalisation's per-channel (or single) mean after scaling bytes to `[0, 1]`,
    /// replacing the dataset's own (its `dataset.toml`, or the training split's statistics).
    #[serde(default)]
    pub mean: Option<Vec<f32>>,
    /// The normalisation's standard deviations, as many as `mean`, each > 0.
    #[serde(default)]
    pub std: Option<Vec<f32>>,
    /// One sample's shape, `[channels, height, width]` or `[features]`, replacing the
    /// dataset's (a CSV row of 784 values becomes `[1, 28, 28]`); it must hold the same number
    /// of values.
    #[serde(default)]
    pub shape: Option<Vec<usize>>,
    /// `[data.options]`: the keys of the format or dataset `[data]` names, decoded by its
    /// reader into its own typed keys (unknown ones are positioned errors). No built-in takes
    /// any yet. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<toml::Table>,
    /// `[data.augment]`: random crop and flip of training batches ([`crate::data::augment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub augment: Option<Augment>,
    /// The scenario. Default `class-incremental`.
    #[serde(default = "default_scenario")]
    pub scenario: Scenario,
    /// Number of tasks. Default: `classes / classes_per_task` (a list's length); permuted: 10.
    /// With `[[data.stream]]` entries: the first `tasks` entries train (default all of them).
    #[serde(default)]
    pub tasks: Option<usize>,
    /// Classes per task in split scenarios, or one count per task ([`ClassesPerTask`]). Default 2.
    #[serde(default)]
    pub classes_per_task: Option<ClassesPerTask>,
    /// The order in which classes are dealt to tasks. Default `0..classes`.
    #[serde(default)]
    pub class_order: Option<Vec<usize>>,
    /// Keep at most this many training samples per task (drawn from the seed); for quick runs.
    #[serde(default)]
    pub subsample: Option<usize>,
    /// Keep at most this many test samples per task.
    #[serde(default)]
    pub test_subsample: Option<usize>,
    /// Share of each task's training samples held out for validation, in `[0, 0.5]`. Default 0.
    #[serde(default)]
    pub validation: f64,
    /// Evaluate on `test` (default) or on the held-out `validation` samples.
    #[serde(default)]
    pub evaluate_on: EvalSplit,
    /// Class-incremental only: mask logits of classes not yet seen. Default false.
    #[serde(default)]
    pub mask_logits: bool,
    /// `[[data.stream]]`: one task per entry, each its own dataset ([`StreamEntry`]), instead
    /// of one dataset dealt into tasks. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream: Vec<StreamEntry>,
}

fn default_scenario() -> Scenario {
    Scenario::ClassIncremental
}

/// The layout of a pretrained file's tensors (`[model] init_layout`, read by
/// [`crate::model::init`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitLayout {
    /// Burn's (`Linear` weight `[d_in, d_out]`), as `engram export` writes.
    #[default]
    Burn,
    /// PyTorch's (`Linear` weight `[d_out, d_in]`, norms' `weight`/`bias`).
    Pytorch,
}

/// The `[model]` keys of pretrained initialisation ([`crate::model::init`]), which the
/// model's factory does not get.
pub const INIT_KEYS: [&str; 4] = ["init", "init_layout", "init_remap", "adapter"];

/// `[model]`: the network. `type` names a registered model
/// ([`Kind::Model`](crate::registry::Kind::Model): `mlp`, `cnn`, `vit` or a plugin's); the other
/// keys are that model's own, decoded and checked by its factory (unknown keys are positioned
/// errors there, with the nearest valid key).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    /// The registered model's name.
    #[serde(rename = "type")]
    pub kind: String,
    /// A safetensors file whose tensors initialise the model before the stream starts
    /// (pretrained weights; relative to the config file), or, for `type = "bert"` and
    /// `"llama"`, a Hugging Face checkpoint directory (`config.json` + `model.safetensors`)
    /// that also gives the geometry ([`crate::model::bert::hf`], [`crate::model::llama::hf`]),
    /// or, for `type = "llama"`, a GGUF file that also gives the geometry
    /// ([`crate::model::llama::gguf`]); which one is told by
    /// [`crate::model::init::InitSource::of`]. Default: none, the seeded random initialisation
    /// ([`crate::model::init`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
    /// The tensor layout of `init`: `burn` (default, what `engram export` writes) or
    /// `pytorch` (a `state_dict`: `Linear` weights `[d_out, d_in]`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub init_layout: InitLayout,
    /// Renames of `init`'s tensor names, `[[regex, replacement], …]`, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_remap: Vec<[String; 2]>,
    /// A Hugging Face PEFT LoRA adapter directory (`adapter_config.json` +
    /// `adapter_model.safetensors`, as `engram export --peft` and PEFT's `save_pretrained`
    /// write them; relative to the config file) loaded into the adapters that
    /// `[[memory]] type = "lora"` attaches, after `init` ([`crate::model::bert::peft::load`]);
    /// BERT-family models only. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<PathBuf>,
    /// The model's own keys, as written.
    #[serde(flatten)]
    pub params: toml::Table,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The optimiser family: SGD is engram's ([`crate::train::sgd::Sgd`]), Adam and AdamW burn-optim's.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Stochastic gradient descent with optional momentum.
    Sgd,
    /// Adam (Kingma & Ba 2015), L2 weight decay.
    Adam,
    /// AdamW (Loshchilov & Hutter 2019), decoupled weight decay.
    Adamw,
}

/// `[optimizer]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerConfig {
    /// `sgd` (default), `adam` or `adamw`.
    #[serde(rename = "type")]
    pub kind: OptimizerKind,
    /// Learning rate. Default 0.05.
    pub lr: f64,
    /// SGD momentum (0 = none). Default 0.9.
    pub momentum: f64,
    /// Weight decay. Default 0.
    pub weight_decay: f64,
    /// Start each task with fresh optimiser state (momentum, Adam moments), as Avalanche does
    /// at each experience. Default true. Without it, momentum built on the last task's
    /// gradients is applied to the first steps of the next task, where the loss on new classes
    /// is large; with SGD lr 0.05 / momentum 0.9 on Split-FMNIST that can diverge.
    pub reset_per_task: bool,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Sgd,
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 0.0,
            reset_per_task: true,
        }
    }
}

/// `[train]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Epochs per task. Default 1.
    pub epochs: usize,
    /// Training batch size in samples. Default 128.
    pub batch_size: usize,
    /// Evaluation batch size in samples. Default 1000.
    pub eval_batch_size: usize,
    /// Train on all tasks at once (the joint upper bound). Default false.
    pub joint: bool,
    /// Global gradient-norm clipping threshold (off when absent).
    pub clip_norm: Option<f64>,
    /// Log one row to steps.csv every this many steps. Default 10.
    pub log_every: usize,
    /// Also write a checkpoint every this many steps (checkpoints are always written after
    /// each task). Default: off.
    pub checkpoint_every: Option<usize>,
    /// The leak alarm: `warn` (default: an event in report.json and a warning), `stop` (end
    /// the run with an error) or `off`.
    pub on_leak: OnLeak,
    /// The leak alarm's threshold: usage above this multiple of the task's baseline. Default 1.5.
    pub leak_factor: f64,
    /// `restart` (default) or `stop`: what a run does when its training loss becomes infinite
    /// or NaN ([`OnDivergence`]). Left out of the config as written when it is the default, so
    /// that configs and checkpoints keep the identity they had before the key existed.
    #[serde(skip_serializing_if = "OnDivergence::is_default")]
    pub on_divergence: OnDivergence,
    /// `classify` (default) or `lm` ([`Objective`]). Left out of the config as written when
    /// it is the default.
    #[serde(skip_serializing_if = "Objective::is_default")]
    pub objective: Objective,
    /// Tokens per window of a language-model run (`objective = "lm"`, at least 2; default
    /// [`DEFAULT_WINDOW`]); refused with the default objective.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
}

impl TrainConfig {
    /// The window length of a language-model run (`objective = "lm"`: `window`, default
    /// [`DEFAULT_WINDOW`]); `None` for a classification run.
    pub fn lm_window(&self) -> Option<usize> {
        (self.objective == Objective::Lm).then(|| self.window.unwrap_or(DEFAULT_WINDOW))
    }
}

/// What the leak alarm does.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnLeak {
    /// Warn and record an event.
    #[default]
    Warn,
    /// Stop the run with an error.
    Stop,
    /// No alarm.
    Off,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 1,
            batch_size: 128,
            eval_batch_size: 1000,
            joint: false,
            clip_norm: None,
            log_every: 10,
            checkpoint_every: None,
            on_leak: OnLeak::Warn,
            leak_factor: 1.5,
            on_divergence: OnDivergence::Restart,
            objective: Objective::Classify,
            window: None,
        }
    }
}

/// One `[[forgetting]]`, `[[memory]]` or `[[scheduler]]` entry: its `type` and its own keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StrategyEntry {
    /// The registered strategy name.
    #[serde(rename = "type")]
    pub kind: String,
    /// The strategy's own keys (decoded by the strategy, see [`ParamSource`]).
    #[serde(flatten)]
    pub params: toml::Table,
}

impl<'de> Deserialize<'de> for StrategyEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        match table.remove("type") {
            Some(toml::Value::String(kind)) => Ok(Self {
                kind,
                params: table,
            }),
            Some(other) => Err(serde::de::Error::custom(format!(
                "`type` must be a string naming a strategy, found {}",
                other.type_str()
            ))),
            None => Err(serde::de::Error::custom(
                "missing `type = \"…\"` naming the strategy",
            )),
        }
    }
}

/// One entry or a list of entries (`[scheduler]` or `[[scheduler]]`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
enum OneOrMany {
    One(StrategyEntry),
    Many(Vec<StrategyEntry>),
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<StrategyEntry>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(e) => vec![e],
        OneOrMany::Many(v) => v,
    })
}

/// The whole experiment file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[run]`.
    #[serde(default)]
    pub run: RunConfig,
    /// `[data]` (required).
    pub data: DataConfig,
    /// `[model]` (required).
    pub model: ModelConfig,
    /// `[optimizer]`.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// `[train]`.
    #[serde(default)]
    pub train: TrainConfig,
    /// `[[forgetting]]` entries, applied in order. Default: none (naive fine-tuning).
    #[serde(default)]
    pub forgetting: Vec<StrategyEntry>,
    /// `[[memory]]` entries, composed in the documented order. Default: `standard`.
    #[serde(default)]
    pub memory: Vec<StrategyEntry>,
    /// `[scheduler]` or `[[scheduler]]` entries. Default: `constant`.
    #[serde(default, deserialize_with = "one_or_many")]
    pub scheduler: Vec<StrategyEntry>,
    /// Shared libraries with more strategies, models or datasets: a path with a directory is
    /// relative to the config file; a bare name (`synaptic-intelligence`,
    /// `libsynaptic_intelligence.so`) is searched for in `$ENGRAM_PLUGIN_PATH`, beside the
    /// running program and in its `../lib`, then beside the config
    /// ([`crate::plugin::search`]).
    #[serde(default)]
    pub plugins: Vec<PathBuf>,
}

/// A config file as loaded: the decoded [`Config`] and the text it came from, so strategy
/// parameters can be decoded later with positions.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    /// The decoded config.
    pub config: Config,
    /// The file the text was read from (named in every message about it).
    pub file: PathBuf,
    /// The directory relative paths in it (`plugins`, `[data] path`) resolve against: the
    /// file's own directory, or the original config's for a run's saved copy
    /// (`OUT/config.toml`).
    pub base_dir: PathBuf,
    /// The TOML text (after `--set` overrides).
    pub source: Arc<str>,
}

impl LoadedConfig {
    /// Reads and decodes a config file, applying `--set` overrides first.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when unreadable or not UTF-8, [`Error::Config`] with
    /// line and column for syntax errors, unknown keys and wrong types.
    pub fn load(file: &Path, sets: &[String]) -> Result<Self> {
        let text = crate::fsutil::read_text(file).map_err(|e| {
            let not_text = e.kind() == std::io::ErrorKind::InvalidData;
            Error::ConfigFile {
                file: file.to_path_buf(),
                message: if not_text {
                    e.to_string()
                } else {
                    format!("cannot read the config: {e}")
                },
                hint: Some(if not_text {
                    "a config is a TOML text file; see examples/split-fmnist.toml".into()
                } else {
                    "check the path; examples/ holds runnable configs".into()
                }),
            }
        })?;
        let rewritten = apply_overrides(file, &text, sets)?;
        Self::from_source(file, rewritten.clone())
            .map_err(|e| relocate_override_error(e, &text, &rewritten, sets))
    }

    /// Decodes TOML text that came from `file`.
    ///
    /// # Errors
    /// As [`LoadedConfig::load`].
    pub fn from_source(file: &Path, text: String) -> Result<Self> {
        let config = {
            let doc = DeTable::parse(&text).map_err(|e| toml_error(file, &text, &e))?;
            let root_empty = doc.get_ref().is_empty();
            Config::deserialize(toml::de::Deserializer::from(doc)).map_err(|e| {
                let mut err = toml_error_with_choices(file, &text, &e, |patched| {
                    let doc = DeTable::parse(patched).ok()?;
                    Config::deserialize(toml::de::Deserializer::from(doc))
                        .err()
                        .map(|e| e.message().trim().to_string())
                });
                if root_empty && let Error::Config { hint, .. } = &mut err {
                    *hint = Some(
                        "the file is empty: a config needs at least [data] and [model]; \
                         start from examples/split-fmnist.toml"
                            .into(),
                    );
                }
                err
            })?
        };
        let loaded = Self {
            config,
            file: file.to_path_buf(),
            base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
            source: Arc::from(text),
        };
        loaded.check()?;
        let mut loaded = loaded;
        if let Some(k) = loaded.config.data.tasks
            && !loaded.config.data.stream.is_empty()
        {
            loaded.config.data.stream.truncate(k);
        }
        Ok(loaded)
    }

    /// The position of `key` under table `section` (for semantic errors found after decoding).
    pub fn position(&self, section: &str, key: &str) -> (usize, usize) {
        let Ok(doc) = DeTable::parse(&self.source) else {
            return (1, 1);
        };
        let Some(sec) = doc.get_ref().get(section) else {
            return (1, 1);
        };
        if let DeValue::Table(t) = sec.get_ref()
            && let Some((k, _)) = t.get_key_value(key)
        {
            return line_col(&self.source, k.span().start);
        }
        line_col(&self.source, sec.span().start)
    }

    /// A positioned [`Error::Config`] about `section.key`.
    pub fn error_at(
        &self,
        section: &str,
        key: &str,
        message: String,
        hint: Option<String>,
    ) -> Error {
        let (line, column) = self.position(section, key);
        Error::Config {
            file: self.file.clone(),
            line,
            column,
            message,
            hint,
        }
    }

    /// The source of entry `index` of strategy list `list` (`forgetting`, `memory`,
    /// `scheduler`), for decoding its parameters.
    pub fn params(&self, list: &'static str, index: usize) -> ParamSource {
        ParamSource {
            file: self.file.clone(),
            base_dir: self.base_dir.clone(),
            source: self.source.clone(),
            list,
            index,
            inner: None,
        }
    }

    /// The position of the `type` value of entry `index` of `list`.
    pub fn type_position(&self, list: &str, index: usize) -> (usize, usize) {
        entry_span(&self.source, list, index)
            .map(|(_, type_span)| line_col(&self.source, type_span.unwrap_or(0)))
            .unwrap_or((1, 1))
    }
}

#[cfg(test)]
pub(crate) mod tests;
