//! Datasets and scenarios: IDX files, the datasets engram knows, and task streams.
//!
//! Datasets are registered components ([`Kind::Dataset`](crate::registry::Kind::Dataset)):
//! `[data] dataset = "…"` names a built-in of [`BUILTINS`] or a plugin's, whose factory
//! ([`DatasetFactory`](crate::registry::DatasetFactory)) gets a [`DatasetRequest`] and returns a
//! [`Dataset`] that carries its input shape, class count and class names.

pub mod dataset;
pub mod idx;
pub mod stream;

pub use dataset::Dataset;

use std::path::Path;

/// The built-in datasets, one line each (the registry, `engram list` and the reference page
/// are generated from it).
pub const BUILTINS: &[crate::registry::Registration] = &[
    dataset::FASHION_MNIST_REGISTRATION,
    dataset::MNIST_REGISTRATION,
];

/// What a dataset factory is asked to load.
#[derive(Clone, Copy, Debug)]
pub struct DatasetRequest<'a> {
    /// The registered name (`[data] dataset`).
    pub name: &'a str,
    /// `[data] path`, resolved against the config's directory; `None` when not given (the
    /// factory then looks in its default places).
    pub path: Option<&'a Path>,
}
