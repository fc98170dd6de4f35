//! Datasets and scenarios: the datasets engram knows, the data formats users have, and task
//! streams.
//!
//! Datasets are registered components ([`Kind::Dataset`](crate::registry::Kind::Dataset)):
//! `[data] dataset = "…"` names a built-in of [`BUILTINS`] or a plugin's, whose factory
//! ([`DatasetFactory`](crate::registry::DatasetFactory)) gets a [`DatasetRequest`] and returns a
//! [`Dataset`] that carries its input shape, class count and class names. `[data] format = "…"`
//! with `path` names a data format instead ([`Kind::Format`](crate::registry::Kind::Format),
//! [`format`]): any directory of IDX, NPY, CSV or image files, `dataset` then being only its
//! display name.

pub mod augment;
pub mod catalog;
pub mod dataset;
pub mod format;
pub mod idx;
pub mod input;
pub mod shape;
pub mod sources;
pub mod stream;
pub mod tokenizer;
pub mod transform;
pub mod windows;

pub use dataset::Dataset;
pub use shape::InputShape;

use std::path::Path;

/// The data formats, one line each.
const FORMATS: [crate::component::Registration; 6] = [
    format::idx::REGISTRATION,
    format::npy::REGISTRATION,
    format::csv::REGISTRATION,
    format::image_folder::REGISTRATION,
    format::text_folder::REGISTRATION,
    format::jsonl::REGISTRATION,
];

/// The CIFAR datasets ([`format::cifar`]).
const CIFAR: [crate::component::Registration; 2] = [
    format::cifar::CIFAR10_REGISTRATION,
    format::cifar::CIFAR100_REGISTRATION,
];

/// The built-in datasets and data formats: one registration for each IDX dataset of
/// [`catalog::DATASETS`] (their one list), then the [`CIFAR`] datasets, then [`FORMATS`] (the
/// registry, `engram list` and the reference page are generated from it).
pub const BUILTINS: &[crate::component::Registration] = &{
    const IDX: usize = catalog::DATASETS.len();
    const DATASETS: usize = IDX + CIFAR.len();
    let mut out = [FORMATS[0]; DATASETS + FORMATS.len()];
    let mut i = 0;
    while i < IDX {
        out[i] = catalog::DATASETS[i].registration();
        i += 1;
    }
    while i < DATASETS {
        out[i] = CIFAR[i - IDX];
        i += 1;
    }
    while i < out.len() {
        out[i] = FORMATS[i - DATASETS];
        i += 1;
    }
    out
};

/// What a dataset factory is asked to load.
#[derive(Clone, Copy, Debug)]
pub struct DatasetRequest<'a> {
    /// The registered name (`[data] dataset`); for a format, the display name `[data] dataset`
    /// gives, empty when it gives none.
    pub name: &'a str,
    /// `[data] path`, resolved against the config's directory; `None` when not given (the
    /// factory then looks in its default places; a format requires it).
    pub path: Option<&'a Path>,
    /// `[data.options]`: the keys of this format or dataset, decoded with
    /// [`DatasetRequest::options`] (empty when the config gives none, and outside a config).
    pub options: &'a crate::config::ParamSource,
    /// The directory relative paths in `[data.options]` (a text format's `tokenizer`) resolve
    /// against, as `path` was: the config's directory; empty outside a config (the working
    /// directory).
    pub base_dir: &'a Path,
    /// A language-model run's window (`[train] objective = "lm"`, [`crate::config::TrainConfig::lm_window`]):
    /// a text format then gives windows of this many tokens of its documents, each followed by
    /// the tokenizer's end-of-sequence id ([`crate::data::windows::chunk_windows`]), instead of one
    /// padded row per document; `None` for a classification run and outside a config. Other
    /// readers ignore it (the trainer refuses data that is not windows of this length).
    pub lm_window: Option<usize>,
}

impl DatasetRequest<'_> {
    /// Decodes `[data.options]` into the reader's typed keys `T` (a struct with
    /// `#[serde(deny_unknown_fields)]` and defaults).
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] for an unknown key or a wrong type.
    pub fn options<T: serde::de::DeserializeOwned>(&self) -> crate::error::Result<T> {
        self.options.parse()
    }

    /// A path from `[data.options]` resolved against [`DatasetRequest::base_dir`] (an absolute
    /// path is taken as it is).
    pub fn resolve(&self, p: &Path) -> std::path::PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

/// Loads a dataset from what `[data]` says ([`DatasetRequest`]).
pub type DatasetFactory = fn(&DatasetRequest<'_>) -> crate::error::Result<Dataset>;

/// Writes a dataset into a new directory in a format (`engram data export`): the directory
/// does not exist yet and is the writer's alone (the caller renames it into place).
pub type DatasetWriter = fn(&Dataset, &Path) -> crate::error::Result<()>;
