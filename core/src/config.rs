//! The experiment file: `experiment.toml`.
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
    /// `fashion-mnist` or `mnist`.
    pub dataset: String,
    /// A directory holding the four IDX files; else `$ENGRAM_DATA/<dataset>/`, then
    /// `/usr/share/datasets/<dataset>/`. Relative to the config file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The scenario. Default `class-incremental`.
    #[serde(default = "default_scenario")]
    pub scenario: Scenario,
    /// Number of tasks. Split scenarios default to `classes / classes_per_task`; permuted to 10.
    #[serde(default)]
    pub tasks: Option<usize>,
    /// Classes per task in split scenarios. Default 2.
    #[serde(default)]
    pub classes_per_task: Option<usize>,
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

/// `[model]`: the network. `type` names a registered model
/// ([`Kind::Model`](crate::registry::Kind::Model): `mlp`, `cnn`, `vit` or a plugin's); the other
/// keys are that model's own, decoded and checked by its factory (unknown keys are positioned
/// errors there, with the nearest valid key).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    /// The registered model's name.
    #[serde(rename = "type")]
    pub kind: String,
    /// The model's own keys, as written.
    #[serde(flatten)]
    pub params: toml::Table,
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
    /// Shared libraries with more strategies (paths relative to the config file).
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

/// The 1-based line and column of byte `offset` in `src`.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The byte offset of 1-based `line:column` (in characters) in `src`, the inverse of
/// [`line_col`]; `None` past the end.
fn offset_of(src: &str, line: usize, column: usize) -> Option<usize> {
    let start: usize = src
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    let rest = src.get(start..)?;
    let col = rest
        .char_indices()
        .nth(column.checked_sub(1)?)
        .map_or(rest.len(), |(i, _)| i);
    Some(start + col)
}

/// The dotted path (`forgetting.1.update_logits`; arrays of tables by index) of the innermost
/// key whose key or value spans byte `offset` of the TOML text `src`; `None` when the text
/// does not parse or no key is there.
pub fn key_at(src: &str, offset: usize) -> Option<String> {
    // A table's own span is not reliable (a `[section]` header's table spans the header
    // only), so tables are always searched; keys and scalar values by their spans.
    fn walk(t: &DeTable<'_>, offset: usize) -> Option<Vec<String>> {
        let at =
            |s: std::ops::Range<usize>| s.contains(&offset) || (s.end == offset && s.end > s.start);
        for (k, v) in t {
            let key = k.get_ref().to_string();
            let found = match v.get_ref() {
                DeValue::Table(inner) => walk(inner, offset),
                DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                    let inner = match item.get_ref() {
                        DeValue::Table(inner) => walk(inner, offset),
                        _ => None,
                    };
                    match inner {
                        Some(mut p) => {
                            p.insert(0, i.to_string());
                            Some(p)
                        }
                        None if at(item.span()) => Some(vec![i.to_string()]),
                        None => None,
                    }
                }),
                _ => None,
            };
            if let Some(mut p) = found {
                p.insert(0, key);
                return Some(p);
            }
            if at(k.span()) || at(v.span()) {
                return Some(vec![key]);
            }
        }
        None
    }
    let doc = DeTable::parse(src).ok()?;
    walk(doc.get_ref(), offset).map(|p| p.join("."))
}

/// The key span and value span (bytes) of the key at dotted `path` (arrays of tables by
/// index; an index as the last part gives the entry's span twice) in the TOML text `src`.
fn spans_of(src: &str, path: &str) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let doc = DeTable::parse(src).ok()?;
    let parts: Vec<&str> = path.split('.').collect();
    let mut table = doc.get_ref();
    let mut i = 0;
    loop {
        let (k, v) = table.get_key_value(parts[i])?;
        let (ks, vs) = (k.span(), v.span());
        match (v.get_ref(), parts.get(i + 1)) {
            (_, None) => return Some((ks, vs)),
            (DeValue::Table(inner), Some(_)) => {
                table = inner;
                i += 1;
            }
            (DeValue::Array(items), Some(idx)) => {
                let item = items.get(idx.parse::<usize>().ok()?)?;
                if i + 2 == parts.len() {
                    return Some((item.span(), item.span()));
                }
                let DeValue::Table(inner) = item.get_ref() else {
                    return None;
                };
                table = inner;
                i += 2;
            }
            _ => return None,
        }
    }
}

/// Whether `message` is a decoding error of serde (a wrong type, an unknown key or variant, a
/// missing key): about the key or value at its position and nothing else.
fn is_decode_error(message: &str) -> bool {
    [
        "invalid type:",
        "invalid value:",
        "invalid length",
        "unknown variant",
        "unknown field",
        "missing field",
        "data did not match any variant",
    ]
    .iter()
    .any(|p| message.starts_with(p))
}

/// Places an error found in `rewritten` — the config text `original` with the `--set`
/// overrides `sets` applied — for the user, who never saw `rewritten`:
/// - a decoding error (wrong type, unknown key or variant) at a key that an override wrote, or
///   inside a section an override created, names that override (as [`Error::ConfigFile`]:
///   ``--set `forgetting.1.update_logits=1`: invalid type: integer `1`, expected a boolean``);
/// - any other error at a key the file has gets that key's line and column in the file
///   (overrides that add lines move everything after them), noting that the overrides were
///   applied — a check over several keys reports at one of them, which need not be the one an
///   override changed, so no override is blamed;
/// - an error at a key only an override wrote says so, without a position;
/// - the rest keep their position in the rewritten text, and say so.
///
/// Errors other than [`Error::Config`], and any error when `sets` is empty, are unchanged.
pub fn relocate_override_error(
    err: Error,
    original: &str,
    rewritten: &str,
    sets: &[String],
) -> Error {
    let Error::Config {
        file,
        line,
        column,
        message,
        hint,
    } = err
    else {
        return err;
    };
    let config = |line, column, message| Error::Config {
        file: file.clone(),
        line,
        column,
        message,
        hint: hint.clone(),
    };
    if sets.is_empty() {
        return config(line, column, message);
    }
    let set_key = |s: &str| {
        s.split_once('=')
            .map(|(k, _)| k.split('.').map(str::trim).collect::<Vec<_>>().join("."))
    };
    let off = offset_of(rewritten, line, column);
    let key = off.and_then(|o| key_at(rewritten, o));
    if let (Some(off), Some(key)) = (off, &key) {
        if is_decode_error(&message) {
            let culprit = sets.iter().rev().find(|s| {
                set_key(s).is_some_and(|k| k == *key || k.starts_with(&format!("{key}.")))
            });
            if let Some(set) = culprit {
                return Error::ConfigFile {
                    file,
                    message: format!("--set `{set}`: {message}"),
                    hint,
                };
            }
        }
        if let (Some((k1, v1)), Some((k0, v0))) =
            (spans_of(rewritten, key), spans_of(original, key))
        {
            let at = if off >= v1.start {
                v0.start + (off - v1.start).min(v0.len())
            } else {
                k0.start + off.saturating_sub(k1.start).min(k0.len())
            };
            let (line, column) = line_col(original, at);
            return config(
                line,
                column,
                format!("{message} (with the --set overrides applied)"),
            );
        }
        // A key the file does not have: an override added it, and its position means nothing
        // to the user.
        if let Some(set) = sets
            .iter()
            .rev()
            .find(|s| set_key(s).is_some_and(|k| k == *key))
        {
            return Error::ConfigFile {
                file,
                message: format!("{message} (at `{key}`, which --set `{set}` added)"),
                hint,
            };
        }
    }
    config(
        line,
        column,
        format!("{message} (position in the config with --set applied)"),
    )
}

/// Suggests the closest of `candidates` to `word` (Jaro–Winkler ≥ 0.8, ignoring case: `RELU`
/// finds `relu`).
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&word, &c.to_lowercase()), c))
        .filter(|(s, _)| *s >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A fix for a decoding error's `message`: the nearest valid key of an unknown field (or the
/// list of valid keys), the nearest value of an unknown variant, and how to write a value of
/// the expected type.
fn hint_for(message: &str) -> Option<String> {
    let quoted: Vec<&str> = message.split('`').skip(3).step_by(2).collect();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next()?;
        return did_you_mean(field, quoted.iter().copied())
            .map(|s| format!("did you mean `{s}`?"))
            .or_else(|| Some(format!("valid keys: {}", quoted.join(", "))));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let word = rest.split('`').next()?;
        return did_you_mean(word, quoted.iter().copied())
            .map(|s| format!("did you mean \"{s}\"?"));
    }
    if message.contains("untagged enum OneOrMany") {
        return Some(
            "a strategy entry is a table with `type = \"…\"` ([[scheduler]] in the file); \
             --set changes the keys of the entries the file has (scheduler.0.k=v) but cannot \
             add one: add it to the file"
                .into(),
        );
    }
    if !(message.starts_with("invalid type:") || message.starts_with("invalid value:")) {
        return None;
    }
    let expected = message.rsplit("expected ").next()?;
    let hint = match expected {
        "a boolean" => "write true or false, without quotes",
        "usize" | "u64" | "u32" | "u16" | "u8" => {
            "write a whole number ≥ 0, without quotes, e.g. 3"
        }
        "i64" | "i32" => "write a whole number, without quotes, e.g. 3",
        "f64" | "f32" => "write a number, without quotes, e.g. 0.5",
        "a string" => "put the value in double quotes, e.g. \"cpu\"",
        e if e.starts_with("a sequence") => {
            "write a list in brackets, e.g. [400, 400]; --set changes the keys of the \
             [[forgetting]], [[memory]] and [[scheduler]] entries the file has \
             (forgetting.0.lambda=100) but cannot add one: add it to the file"
        }
        _ => return None,
    };
    Some(hint.into())
}

fn toml_error(file: &Path, src: &str, err: &toml::de::Error) -> Error {
    let message = err.message().trim().to_string();
    let hint = hint_for(&message);
    positioned(file, src, err.span().map_or(0, |s| s.start), message, hint)
}

/// An [`Error::Config`] at byte `offset` of `src`, the text of `file` (line and column
/// 1-based, as [`line_col`] counts them).
pub fn positioned(
    file: &Path,
    src: &str,
    offset: usize,
    message: String,
    hint: Option<String>,
) -> Error {
    let (line, column) = line_col(src, offset);
    Error::Config {
        file: file.to_path_buf(),
        line,
        column,
        message,
        hint,
    }
}

/// Applies `--set key.path=value` overrides to TOML text, keeping its formatting.
///
/// # Errors
/// [`Error::ConfigFile`] for an override without `=`, a value that is not TOML, or a path that
/// crosses a non-table.
pub fn apply_overrides(file: &Path, src: &str, sets: &[String]) -> Result<String> {
    if sets.is_empty() {
        return Ok(src.to_string());
    }
    let bad = |m: String, hint: &str| Error::ConfigFile {
        file: file.to_path_buf(),
        message: m,
        hint: Some(hint.to_string()),
    };
    let mut doc: toml_edit::DocumentMut = src
        .parse()
        .map_err(|e: toml_edit::TomlError| bad(e.to_string(), "fix the file first"))?;
    for set in sets {
        let (key, value) = set.split_once('=').ok_or_else(|| {
            bad(
                format!("--set `{set}` has no `=`"),
                "write --set train.epochs=3",
            )
        })?;
        let v = value.trim();
        let value: toml_edit::Value = match v.parse() {
            Ok(value) => value,
            // A bare word or path is taken as a string: --set run.device=cpu. Anything else
            // that is not TOML (`.05`, `1e400`, a comment) is an error rather than a string
            // that a type check would then reject with a misleading hint.
            Err(_) if is_bare_string(v) => toml_edit::Value::from(v),
            Err(_) => {
                return Err(bad(
                    format!("--set `{set}`: `{v}` is not a TOML value"),
                    "a number needs a digit before its point (0.05) and must fit in 64 bits; a \
                     string can be quoted (\"cpu\"); no comments",
                ));
            }
        };
        if key.trim().is_empty() || key.split('.').any(|p| p.trim().is_empty()) {
            return Err(bad(
                format!("--set `{set}` has an empty key"),
                "write --set section.key=value, e.g. --set train.epochs=3",
            ));
        }
        let parts: Vec<&str> = key.trim().split('.').map(str::trim).collect();
        let (last, path) = parts.split_last().expect("split yields one part");
        let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
        let mut i = 0;
        while i < path.len() {
            let p = path[i];
            let item = table
                .entry(p)
                .or_insert(toml_edit::Item::Table(toml_edit::Table::new()));
            if item.is_array_of_tables() {
                if i + 1 == path.len() && last.parse::<usize>().is_ok() {
                    return Err(bad(
                        format!("--set `{set}`: an entry of `{p}` cannot be replaced whole"),
                        "set its keys one by one, e.g. forgetting.0.lambda=100",
                    ));
                }
                // Arrays of tables are addressed by index: `forgetting.0.lambda`.
                let idx = path
                    .get(i + 1)
                    .and_then(|s| s.parse::<usize>().ok())
                    .ok_or_else(|| {
                        bad(
                            format!("--set `{key}`: `{p}` is a list; add an index"),
                            "write for example forgetting.0.lambda=100",
                        )
                    })?;
                table = item
                    .as_array_of_tables_mut()
                    .and_then(|a| a.get_mut(idx))
                    .ok_or_else(|| {
                        bad(
                            format!("--set `{key}`: there is no entry {idx} in `{p}`"),
                            "entries are numbered from 0",
                        )
                    })?;
                i += 2;
            } else {
                table = item.as_table_like_mut().ok_or_else(|| {
                    bad(
                        format!("--set `{key}`: `{p}` is not a table"),
                        "check the key path",
                    )
                })?;
                i += 1;
            }
        }
        match table.get(last) {
            Some(item) if item.is_table() || item.is_array_of_tables() => {
                let whole = if path.is_empty() {
                    last.to_string()
                } else {
                    format!("{}.{last}", path.join("."))
                };
                return Err(bad(
                    format!(
                        "--set `{set}`: `{whole}` is a section of the file; replacing it whole \
                         would drop the keys it has"
                    ),
                    &format!("set its keys one by one: --set {whole}.KEY=VALUE"),
                ));
            }
            _ => {
                table.insert(last, toml_edit::Item::Value(value));
            }
        }
    }
    Ok(doc.to_string())
}

/// Whether an override's value that is not TOML may be taken as a string: a bare word or
/// path (`cpu`, `/data/fmnist`, `./data`) — no spaces, quotes, brackets or `#`, and not
/// shaped like a number (a digit first, or a sign or point before one).
fn is_bare_string(v: &str) -> bool {
    let unsigned = v.strip_prefix(['+', '-']).unwrap_or(v);
    let numeric = unsigned
        .strip_prefix('.')
        .unwrap_or(unsigned)
        .starts_with(|c: char| c.is_ascii_digit());
    !v.is_empty()
        && !numeric
        && !v.chars().any(|c| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '[' | ']' | '{' | '}' | '#' | '=')
        })
}

impl LoadedConfig {
    /// Reads and decodes a config file, applying `--set` overrides first.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when unreadable or not UTF-8, [`Error::Config`] with
    /// line and column for syntax errors, unknown keys and wrong types.
    pub fn load(file: &Path, sets: &[String]) -> Result<Self> {
        let bytes = std::fs::read(file).map_err(|e| Error::ConfigFile {
            file: file.to_path_buf(),
            message: format!("cannot read the config: {e}"),
            hint: Some("check the path; examples/ holds runnable configs".into()),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| Error::ConfigFile {
            file: file.to_path_buf(),
            message: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            hint: Some("a config is a TOML text file; see examples/split-fmnist.toml".into()),
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
                let mut err = toml_error(file, &text, &e);
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

    /// Semantic checks that serde cannot express.
    fn check(&self) -> Result<()> {
        let c = &self.config;
        if !(0.0..=0.5).contains(&c.data.validation) {
            return Err(self.error_at(
                "data",
                "validation",
                format!("validation share {} is outside [0, 0.5]", c.data.validation),
                None,
            ));
        }
        if c.data.evaluate_on == EvalSplit::Validation && c.data.validation <= 0.0 {
            return Err(self.error_at(
                "data",
                "evaluate_on",
                "evaluate_on = \"validation\" needs a validation share > 0".into(),
                Some("add `validation = 0.1` to [data]".into()),
            ));
        }
        if c.train.batch_size == 0 || c.train.eval_batch_size == 0 || c.train.epochs == 0 {
            return Err(self.error_at(
                "train",
                if c.train.epochs == 0 {
                    "epochs"
                } else {
                    "batch_size"
                },
                "epochs, batch_size and eval_batch_size must be at least 1".into(),
                None,
            ));
        }
        if !(c.optimizer.lr > 0.0 && c.optimizer.lr.is_finite()) {
            return Err(self.error_at(
                "optimizer",
                "lr",
                format!("learning rate {} must be positive", c.optimizer.lr),
                None,
            ));
        }
        if let Some(v) = c.train.clip_norm
            && !(v > 0.0 && v.is_finite())
        {
            return Err(self.error_at(
                "train",
                "clip_norm",
                format!("clip_norm {v} must be a positive, finite number"),
                Some("remove it to train without clipping".into()),
            ));
        }
        if !(c.train.leak_factor >= 1.0 && c.train.leak_factor.is_finite()) {
            return Err(self.error_at(
                "train",
                "leak_factor",
                format!("leak_factor {} must be at least 1", c.train.leak_factor),
                None,
            ));
        }
        if c.train.checkpoint_every == Some(0) {
            return Err(self.error_at(
                "train",
                "checkpoint_every",
                "checkpoint_every must be ≥ 1".into(),
                None,
            ));
        }
        if c.data.test_subsample == Some(0) || c.data.subsample == Some(0) {
            return Err(self.error_at(
                "data",
                if c.data.subsample == Some(0) {
                    "subsample"
                } else {
                    "test_subsample"
                },
                "a subsample of 0 samples leaves nothing to train or evaluate".into(),
                None,
            ));
        }
        // `momentum` is SGD's; Adam and AdamW would ignore it without a word.
        if c.optimizer.kind != OptimizerKind::Sgd
            && toml::from_str::<toml::Table>(&self.source)
                .ok()
                .and_then(|t| t.get("optimizer")?.get("momentum").cloned())
                .is_some()
        {
            return Err(self.error_at(
                "optimizer",
                "momentum",
                format!(
                    "momentum is an SGD key; `{}` does not use it",
                    serde_json::to_value(c.optimizer.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
                Some("remove it, or use type = \"sgd\"".into()),
            ));
        }
        let decay_ok = c.optimizer.weight_decay >= 0.0 && c.optimizer.weight_decay.is_finite();
        if !(decay_ok && (0.0..1.0).contains(&c.optimizer.momentum)) {
            return Err(self.error_at(
                "optimizer",
                if c.optimizer.weight_decay < 0.0 {
                    "weight_decay"
                } else {
                    "momentum"
                },
                format!(
                    "weight_decay must be ≥ 0 and momentum in [0, 1) (got {} and {})",
                    c.optimizer.weight_decay, c.optimizer.momentum
                ),
                None,
            ));
        }
        Ok(())
    }

    /// The source of entry `index` of strategy list `list` (`forgetting`, `memory`,
    /// `scheduler`), for decoding its parameters.
    pub fn params(&self, list: &'static str, index: usize) -> ParamSource {
        ParamSource {
            file: self.file.clone(),
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

/// Finds entry `index` of `list` in the document: the entry table's span start and the `type`
/// value's span start.
fn entry_span(src: &str, list: &str, index: usize) -> Option<(usize, Option<usize>)> {
    let doc = DeTable::parse(src).ok()?;
    let v = doc.get_ref().get(list)?;
    let entry = match v.get_ref() {
        DeValue::Array(a) => a.get(index)?.clone(),
        DeValue::Table(_) if index == 0 => v.clone(),
        _ => return None,
    };
    let ty = match entry.get_ref() {
        DeValue::Table(t) => t.get("type").map(|t| t.span().start),
        _ => None,
    };
    Some((entry.span().start, ty))
}

/// Where a strategy's parameters come from: entry `index` of `list` in a config's text.
/// Decoding through it keeps positions for errors.
#[derive(Clone, Debug)]
pub struct ParamSource {
    file: PathBuf,
    source: Arc<str>,
    list: &'static str,
    index: usize,
}

impl ParamSource {
    /// Parameters given as a TOML table body with no file behind them (tests, plugins).
    pub fn from_toml(text: &str) -> Self {
        Self {
            file: PathBuf::from("<inline>"),
            source: Arc::from(format!("[[inline]]\n{text}\n")),
            list: "inline",
            index: 0,
        }
    }

    /// Decodes this entry's keys (all but `type`) into `T`.
    ///
    /// # Errors
    /// [`Error::Config`] with the key's line and column for unknown keys and wrong types.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        let src: &str = &self.source;
        let doc = DeTable::parse(src).map_err(|e| toml_error(&self.file, src, &e))?;
        let entry: Option<Spanned<DeValue<'_>>> =
            doc.get_ref()
                .get(self.list)
                .and_then(|v| match v.get_ref() {
                    DeValue::Array(a) => a.get(self.index).cloned(),
                    DeValue::Table(_) if self.index == 0 => Some(v.clone()),
                    _ => None,
                });
        let entry = entry.unwrap_or_else(|| Spanned::new(0..0, DeValue::Table(DeTable::new())));
        let span = entry.span();
        let table = match entry.into_inner() {
            DeValue::Table(t) => t,
            _ => DeTable::new(),
        };
        let table: DeTable<'_> = table
            .into_iter()
            .filter(|(k, _)| k.get_ref().as_ref() != "type")
            .collect();
        // No strategy key takes NaN or an infinity (`nan`, `inf`, `1e400`): one check for every
        // strategy, built-in or plugin, so that a non-finite value can never switch a comparison
        // off silently (a NaN threshold is never exceeded).
        fn non_finite<'a>(v: &'a DeValue<'_>) -> Option<&'a str> {
            match v {
                DeValue::Float(f) => {
                    let raw = f.as_str();
                    (!raw
                        .replace('_', "")
                        .parse::<f64>()
                        .is_ok_and(f64::is_finite))
                    .then_some(raw)
                }
                DeValue::Array(a) => a.iter().find_map(|x| non_finite(x.get_ref())),
                DeValue::Table(t) => t.values().find_map(|x| non_finite(x.get_ref())),
                _ => None,
            }
        }
        for (k, v) in &table {
            if let Some(raw) = non_finite(v.get_ref()) {
                let key = k.get_ref().as_ref();
                return Err(self.key_error(
                    key,
                    format!("`{key}`: {raw} is not a finite number"),
                    Some("every strategy key takes finite values".into()),
                ));
            }
        }
        let value = Spanned::new(span, DeValue::Table(table));
        T::deserialize(ValueDeserializer::from(value)).map_err(|e| toml_error(&self.file, src, &e))
    }

    /// A positioned [`Error::Config`] about key `key` of this entry (at the entry when the key
    /// is absent), for checks that serde cannot express.
    pub fn key_error(&self, key: &str, message: String, hint: Option<String>) -> Error {
        let src: &str = &self.source;
        let offset = DeTable::parse(src).ok().and_then(|doc| {
            let v = doc.get_ref().get(self.list)?;
            let entry = match v.get_ref() {
                DeValue::Array(a) => a.get(self.index)?.clone(),
                _ => v.clone(),
            };
            let start = entry.span().start;
            match entry.get_ref() {
                DeValue::Table(t) => {
                    Some(t.get_key_value(key).map_or(start, |(k, _)| k.span().start))
                }
                _ => Some(start),
            }
        });
        positioned(&self.file, src, offset.unwrap_or(0), message, hint)
    }

    /// The strategy list this entry belongs to.
    pub fn list(&self) -> &str {
        self.list
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
