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
mod divergence;
mod overrides;
mod params;
mod spans;
mod tasks;

pub use augment::*;
pub use divergence::*;
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
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            device: "cpu".into(),
            out: None,
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
pub const INIT_KEYS: [&str; 3] = ["init", "init_layout", "init_remap"];

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
    /// (pretrained weights; relative to the config file), or, for `type = "bert"`, a Hugging
    /// Face checkpoint directory (`config.json` + `model.safetensors`) that also gives the
    /// geometry ([`crate::model::bert::hf`]). Default: none, the seeded random initialisation
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
    /// The model's own keys, as written.
    #[serde(flatten)]
    pub params: toml::Table,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The optimiser family (burn-optim).
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
mod tests {
    use super::*;

    fn load(text: &str) -> Result<LoadedConfig> {
        LoadedConfig::from_source(Path::new("t.toml"), text.to_string())
    }

    const MIN: &str = "[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\n";

    #[test]
    fn defaults_fill_in() {
        let c = load(MIN).unwrap().config;
        assert_eq!(c.train.batch_size, 128);
        assert_eq!(c.optimizer.lr, 0.05);
        assert_eq!(c.model.kind, "mlp");
        assert_eq!(c.data.scenario, Scenario::ClassIncremental);
    }

    #[test]
    fn unknown_key_has_position_and_hint() {
        let err = load(&format!("{MIN}[train]\nepochz = 3\n")).unwrap_err();
        match err {
            Error::Config {
                line, column, hint, ..
            } => {
                assert_eq!((line, column), (6, 1));
                assert_eq!(hint.as_deref(), Some("did you mean `epochs`?"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_type_has_position() {
        let err = load(&format!("[run]\nseed = \"one\"\n{MIN}")).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    line: 2,
                    column: 8,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn strategy_params_keep_positions() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct P {
            lambda: f64,
        }
        let text = format!(
            "{MIN}[[forgetting]]\ntype = \"ewc\"\nlambda = 1.0\n[[forgetting]]\ntype = \"x\"\nlamda = 2\n"
        );
        let l = load(&text).unwrap();
        assert_eq!(l.config.forgetting[1].kind, "x");
        let p: P = l.params("forgetting", 0).parse().unwrap();
        assert_eq!(p.lambda, 1.0);
        let err = l.params("forgetting", 1).parse::<P>().unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    line: 10,
                    column: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("did you mean `lambda`"), "{err}");
        assert_eq!(l.type_position("forgetting", 1), (9, 8));
    }

    #[test]
    fn key_at_names_the_innermost_key_and_blame_names_the_override() {
        let src = "[train]\nepochs = 3\n[[forgetting]]\ntype = \"ewc\"\n[[forgetting]]\n\
                   type = \"replay\"\nsel = { a = 1 }\n";
        let at = |line, col| key_at(src, offset_of(src, line, col).unwrap());
        assert_eq!(at(2, 1).as_deref(), Some("train.epochs"));
        assert_eq!(at(2, 10).as_deref(), Some("train.epochs"));
        assert_eq!(at(4, 8).as_deref(), Some("forgetting.0.type"));
        assert_eq!(at(6, 8).as_deref(), Some("forgetting.1.type"));
        assert_eq!(at(7, 9).as_deref(), Some("forgetting.1.sel.a"));
        assert_eq!(at(7, 7).as_deref(), Some("forgetting.1.sel"));
        assert_eq!(key_at("not toml = [", 3), None);
        assert_eq!(offset_of("ab\ncd", 2, 2), Some(4));

        // Index 0 of an entry with no key there: the entry itself.
        assert_eq!(at(3, 2).as_deref(), Some("forgetting.0"));
    }

    #[test]
    fn override_errors_are_blamed_or_placed_in_the_file() {
        let original = "[train]\nepochs = 3\n[[forgetting]]\ntype = \"ewc\"\nlambda = 5.0\n\
                        [[forgetting]]\ntype = \"replay\"\n";
        let sets = vec![
            "train.batch=7".to_string(),
            "forgetting.0.lambda=-1".to_string(),
        ];
        let rewritten = apply_overrides(Path::new("c.toml"), original, &sets).unwrap();
        assert_ne!(
            rewritten.find("lambda"),
            original.find("lambda"),
            "a line was added"
        );
        // An error at the `n`-th occurrence of `word` in the rewritten text.
        let err = |word: &str, n: usize, message: &str| {
            let o = rewritten.match_indices(word).nth(n).unwrap().0;
            let (line, column) = line_col(&rewritten, o);
            Error::Config {
                file: "c.toml".into(),
                line,
                column,
                message: message.into(),
                hint: Some("h".into()),
            }
        };
        let place = |e| relocate_override_error(e, original, &rewritten, &sets);
        // A decoding error at a key an override wrote: the override is named.
        match place(err("-1", 0, "invalid type: integer `-1`, expected usize")) {
            Error::ConfigFile { message, hint, .. } => {
                assert_eq!(
                    message,
                    "--set `forgetting.0.lambda=-1`: invalid type: integer `-1`, expected usize"
                );
                assert_eq!(hint.as_deref(), Some("h"));
            }
            e => panic!("{e:?}"),
        }
        // A check at that key (which may concern others too): its place in the file, line 5.
        match place(err("lambda", 0, "lambda must be ≥ 0")) {
            Error::Config {
                line,
                column,
                message,
                ..
            } => {
                assert_eq!((line, column), (5, 1));
                assert_eq!(
                    message,
                    "lambda must be ≥ 0 (with the --set overrides applied)"
                );
            }
            e => panic!("{e:?}"),
        }
        // A decoding error in the file, past the added line: line 7 of the file, column 8.
        assert!(matches!(
            place(err("\"replay\"", 0, "unknown variant `replay`")),
            Error::Config {
                line: 7,
                column: 8,
                ..
            }
        ));
        // At a key only an override wrote: said so, without a position.
        match place(err("batch", 0, "batch must be even")) {
            Error::ConfigFile { message, .. } => assert_eq!(
                message,
                "batch must be even (at `train.batch`, which --set `train.batch=7` added)"
            ),
            e => panic!("{e:?}"),
        }
        // No overrides: unchanged.
        let e = relocate_override_error(err("lambda", 0, "m"), original, &rewritten, &[]);
        assert!(matches!(e, Error::Config { ref message, .. } if message == "m"));
    }

    #[test]
    fn bare_strings_are_words_and_paths_not_numbers() {
        for v in ["cpu", "/data/fmnist", "./data", "fashion-mnist", "a.b"] {
            assert!(is_bare_string(v), "{v}");
        }
        for v in [
            ".05",
            "-.5",
            "+1x",
            "1e400",
            "9x",
            "\"a\" # c",
            "a b",
            "[1",
            "",
            "a=b",
        ] {
            assert!(!is_bare_string(v), "{v}");
        }
    }

    #[test]
    fn hints_for_types_and_variants() {
        assert_eq!(
            hint_for("invalid type: integer `1`, expected a boolean").as_deref(),
            Some("write true or false, without quotes")
        );
        assert!(
            hint_for("invalid value: integer `-1`, expected usize")
                .unwrap()
                .contains("whole number ≥ 0")
        );
        assert!(
            hint_for("invalid type: string \"x\", expected f64")
                .unwrap()
                .contains("0.5")
        );
        assert_eq!(
            hint_for("unknown variant `adamx`, expected one of `sgd`, `adam`, `adamw`").as_deref(),
            Some("did you mean \"adam\"?")
        );
        assert_eq!(
            hint_for("unknown variant `zzz`, expected one of `sgd`, `adam`"),
            None
        );
        assert_eq!(
            hint_for("unknown field `lamda`, expected one of `lambda`, `gamma`").as_deref(),
            Some("did you mean `lambda`?")
        );
        assert_eq!(hint_for("something else"), None);
        assert!(
            hint_for("missing field `data`")
                .unwrap()
                .starts_with("add `data`")
        );
        assert!(
            hint_for("duplicate key `forgetting`")
                .unwrap()
                .contains("[[forgetting]]")
        );
        assert!(
            hint_for("invalid float, expected nothing")
                .unwrap()
                .contains("0.025")
        );
        assert!(
            hint_for("invalid exponent, expected digits")
                .unwrap()
                .contains("1e-3")
        );
        assert!(
            hint_for("invalid basic string, expected `\"`")
                .unwrap()
                .contains("closing")
        );
        assert!(
            hint_for("unexpected key or value, expected newline, `#`")
                .unwrap()
                .contains("(0.05)")
        );
        assert!(
            hint_for("string values must be quoted, expected literal string")
                .unwrap()
                .contains("after `=`")
        );
        assert!(
            hint_for("invalid type: map, expected a sequence")
                .unwrap()
                .contains("[[forgetting]]")
        );
        assert!(
            hint_for("missing comma between array elements, expected `,`")
                .unwrap()
                .contains("its `]`")
        );
    }

    #[test]
    fn overrides_edit_the_text() {
        let out = apply_overrides(
            Path::new("t.toml"),
            &format!("{MIN}[[forgetting]]\ntype = \"ewc\"\n"),
            &[
                "train.epochs=3".into(),
                "run.device=cpu".into(),
                "forgetting.0.lambda=5.5".into(),
            ],
        )
        .unwrap();
        let c = load(&out).unwrap();
        assert_eq!(c.config.train.epochs, 3);
        assert_eq!(c.config.run.device, "cpu");
        assert_eq!(
            c.config.forgetting[0].params.get("lambda"),
            Some(&toml::Value::Float(5.5))
        );
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
