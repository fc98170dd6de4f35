//! `[[data.stream]]`: a stream whose tasks are different datasets (Avalanche's
//! `benchmark_from_datasets`), one task per entry, in order. Each entry names its data with the
//! keys `[data]` uses for one dataset (`dataset`, `format`, `path`, `shape`, `mean`, `std`,
//! `[data.stream.options]`), read by the same readers; [`crate::data::sources`] puts the
//! entries' classes into one label space and their samples into one dataset.
//!
//! The checks here are those of the config alone (keys that a stream replaces, a scenario that
//! does not deal datasets, a cap of 0); what needs the data (shapes, class names of a shared
//! label space, tokenizers) is checked when the data is read, at the entry's line.

use super::*;

/// One `[[data.stream]]` entry: one task's dataset.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    /// A registered dataset (`mnist`, `fashion-mnist`, a plugin's); with `format`, only the
    /// data's display name. Required without `format`.
    #[serde(default)]
    pub dataset: String,
    /// A data format reading `path` (`idx`, `npy`, `csv`, `image-folder`, `text-folder`,
    /// `jsonl`, a plugin's). Default: none (`dataset` names a registered dataset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The data's directory, relative to the config file. With `format` and no `path`:
    /// `$ENGRAM_DATA/<dataset>` (`./data/<dataset>` when `ENGRAM_DATA` is unset), where
    /// `engram data fetch` writes; for a registered dataset its own search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The normalisation's mean, as `[data] mean`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<Vec<f32>>,
    /// The normalisation's standard deviations, as `[data] std`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<Vec<f32>>,
    /// One sample's shape, as `[data] shape`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<usize>>,
    /// `[data.stream.options]`: the format's or dataset's own keys, as `[data.options]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<toml::Table>,
    /// The label space the entry's classes belong to: entries naming the same space share its
    /// logits, classes matched by name (two releases of a spam corpus, both `ham`/`spam`).
    /// Default: the entry's own classes, after those of the entries before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_space: Option<String>,
    /// Keep at most this many training samples of this task (drawn from the seed). Default:
    /// `[data] subsample`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsample: Option<usize>,
    /// Keep at most this many test (and validation) samples of this task. Default:
    /// `[data] test_subsample`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_subsample: Option<usize>,
}

/// The `[data]` keys that name one dataset or deal it into tasks, which `[[data.stream]]`
/// replaces (each entry names its data; each entry is a task). `tasks` stays: with entries it
/// keeps the first `tasks` of them (`engram tune`'s first tasks).
const REPLACED: [&str; 9] = [
    "dataset",
    "format",
    "path",
    "mean",
    "std",
    "shape",
    "options",
    "classes_per_task",
    "class_order",
];

impl LoadedConfig {
    /// The position of key `key` of entry `index` of the array of tables `list` (a dotted path,
    /// `data.stream`), or of the entry when the key is absent.
    pub fn entry_position(&self, list: &'static str, index: usize, key: &str) -> (usize, usize) {
        match self.params(list, index).key_error(key, String::new(), None) {
            Error::Config { line, column, .. } => (line, column),
            _ => (1, 1),
        }
    }

    /// A positioned [`Error::Config`] at key `key` of `[[data.stream]]` entry `index`.
    pub fn stream_error(
        &self,
        index: usize,
        key: &str,
        message: String,
        hint: Option<String>,
    ) -> Error {
        self.params("data.stream", index)
            .key_error(key, message, hint)
    }

    /// `[[data.stream]]`'s checks: with entries, no `[data]` key they replace, a split
    /// scenario, and no cap of 0.
    pub(super) fn check_stream(&self) -> Result<()> {
        let d = &self.config.data;
        if d.stream.is_empty() {
            return Ok(());
        }
        let table: toml::Table = toml::from_str(&self.source).unwrap_or_default();
        let data = table.get("data").and_then(toml::Value::as_table);
        if let Some(key) = REPLACED
            .iter()
            .find(|k| data.is_some_and(|t| t.contains_key(**k)))
        {
            let hint = if matches!(*key, "classes_per_task" | "class_order") {
                "remove it: the stream has one task per [[data.stream]] entry, with that entry's classes".into()
            } else {
                format!(
                    "move `{key}` into the [[data.stream]] entries that need it, or remove the entries to deal one dataset"
                )
            };
            return Err(self.error_at(
                "data",
                key,
                format!("`{key}` names one dataset or deals it into tasks; with [[data.stream]] each entry is one task's dataset"),
                Some(hint),
            ));
        }
        if d.scenario == Scenario::DomainIncremental {
            return Err(self.error_at(
                "data",
                "scenario",
                "a domain-incremental scenario permutes one dataset's pixels into tasks; [[data.stream]] gives each task its own dataset".into(),
                Some("use scenario = \"class-incremental\" (the default) or \"task-incremental\"; entries that share a label space (`label_space`) are a domain shift".into()),
            ));
        }
        if let Some(k) = d.tasks
            && k > d.stream.len()
        {
            return Err(self.error_at(
                "data",
                "tasks",
                format!(
                    "tasks = {k} keeps the first {k} [[data.stream]] entries, and the stream has {}",
                    d.stream.len()
                ),
                Some(format!(
                    "set tasks to 1 … {} or remove it (every entry is a task)",
                    d.stream.len()
                )),
            ));
        }
        if d.stream.len() > u16::MAX as usize {
            return Err(self.stream_error(
                u16::MAX as usize,
                "dataset",
                format!(
                    "{} [[data.stream]] entries; a stream holds at most {} tasks",
                    d.stream.len(),
                    u16::MAX
                ),
                None,
            ));
        }
        for (i, e) in d.stream.iter().enumerate() {
            for (key, cap) in [
                ("subsample", e.subsample),
                ("test_subsample", e.test_subsample),
            ] {
                if cap == Some(0) {
                    return Err(self.stream_error(
                        i,
                        key,
                        "a subsample of 0 samples leaves nothing to train or evaluate".into(),
                        None,
                    ));
                }
            }
            if e.label_space
                .as_deref()
                .is_some_and(|s| s.trim().is_empty())
            {
                return Err(self.stream_error(
                    i,
                    "label_space",
                    "an empty label_space names no space".into(),
                    Some("name the space the entries share, e.g. label_space = \"spam\", or remove it".into()),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config's error for a stream of two entries with `data` in `[data]` and `entry` in
    /// the second entry: `(line, message)`.
    fn refused(data: &str, entry: &str) -> (usize, String) {
        let text = format!(
            "[data]\n{data}\n[[data.stream]]\ndataset = \"mnist\"\n[[data.stream]]\ndataset = \"fashion-mnist\"\n{entry}\n[model]\ntype = \"mlp\"\n"
        );
        match LoadedConfig::from_source(Path::new("s.toml"), text) {
            Err(Error::Config { line, message, .. }) => (line, message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stream_refuses_the_keys_it_replaces_and_what_cannot_be_a_task() {
        let (line, m) = refused("dataset = \"mnist\"", "");
        assert_eq!(line, 2);
        assert!(m.starts_with("`dataset` names one dataset"), "{m}");
        let (line, m) = refused("scenario = \"domain-incremental\"", "");
        assert_eq!(line, 2);
        assert!(m.contains("gives each task its own dataset"), "{m}");
        // Line 7 is the second entry's first own key.
        let (line, m) = refused("", "subsample = 0");
        assert_eq!((line, m.contains("a subsample of 0")), (7, true), "{m}");
        let (line, m) = refused("", "label_space = \" \"");
        assert_eq!((line, m.contains("names no space")), (7, true), "{m}");
        let (line, m) = refused("tasks = 3", "");
        assert_eq!(line, 2);
        assert!(
            m.contains("tasks = 3 keeps the first 3 [[data.stream]] entries, and the stream has 2"),
            "{m}"
        );
        let (line, m) = refused("classes_per_task = 2", "");
        assert_eq!(line, 2);
        assert!(m.starts_with("`classes_per_task` names one dataset"), "{m}");
        // Without entries, the same [data] keys are the one dataset's.
        let ok = "[data]\ndataset = \"mnist\"\n[model]\ntype = \"mlp\"\n";
        assert!(LoadedConfig::from_source(Path::new("s.toml"), ok.into()).is_ok());
    }

    /// `tasks = k` beside entries keeps the first `k` of them, in order.
    #[test]
    fn tasks_keeps_the_first_entries_of_a_stream() {
        let text = "[data]\ntasks = 2\n[[data.stream]]\ndataset = \"mnist\"\n[[data.stream]]\ndataset = \"fashion-mnist\"\n[[data.stream]]\ndataset = \"kmnist\"\n[model]\ntype = \"mlp\"\n";
        let c = LoadedConfig::from_source(Path::new("s.toml"), text.into()).unwrap();
        let names: Vec<&str> = c
            .config
            .data
            .stream
            .iter()
            .map(|e| e.dataset.as_str())
            .collect();
        assert_eq!(names, ["mnist", "fashion-mnist"]);
    }
}
