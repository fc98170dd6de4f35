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

pub mod dataset;
pub mod format;
pub mod idx;
pub mod shape;
pub mod stream;
pub mod transform;

pub use dataset::Dataset;
pub use shape::InputShape;

use std::path::Path;

/// The built-in datasets and data formats, one line each (the registry, `engram list` and
/// the reference page are generated from it).
pub const BUILTINS: &[crate::component::Registration] = &[
    dataset::FASHION_MNIST_REGISTRATION,
    dataset::MNIST_REGISTRATION,
    format::idx::REGISTRATION,
    format::npy::REGISTRATION,
    format::csv::REGISTRATION,
    format::image_folder::REGISTRATION,
];

/// What a dataset factory is asked to load.
#[derive(Clone, Copy, Debug)]
pub struct DatasetRequest<'a> {
    /// The registered name (`[data] dataset`); for a format, the display name `[data] dataset`
    /// gives, empty when it gives none.
    pub name: &'a str,
    /// `[data] path`, resolved against the config's directory; `None` when not given (the
    /// factory then looks in its default places; a format requires it).
    pub path: Option<&'a Path>,
}

/// Loads a dataset from what `[data]` says ([`DatasetRequest`]).
pub type DatasetFactory = fn(&DatasetRequest<'_>) -> crate::error::Result<Dataset>;

/// Writes a dataset into a new directory in a format (`engram data export`): the directory
/// does not exist yet and is the writer's alone (the caller renames it into place).
pub type DatasetWriter = fn(&Dataset, &Path) -> crate::error::Result<()>;
