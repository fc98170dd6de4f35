//! The registry's data side: datasets a program provides, the `[data]` entry a config names,
//! reading it (a format or a registered dataset, then `[data]`'s transforms) and writing one
//! in a format (`engram data export`).

use super::{Entry, Factory, Kind, Registry, check_dataset};
use crate::config::{LoadedConfig, did_you_mean};
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

impl Registry {
    /// Makes `dataset`, held in memory by the program, the data of every config whose `[data]
    /// dataset` is its name (and has no `format`): the library's way to train on data that is
    /// no file. A run on it resumes through a registry that provides the same dataset again
    /// ([`crate::train::trainer::resume`]); the `engram` binary cannot resume it (it does not
    /// have the data). A dataset provided under a name already provided replaces it.
    ///
    /// # Errors
    /// [`Error::Data`] when the dataset breaks its contract ([`check_dataset`]).
    pub fn provide(&mut self, dataset: crate::data::Dataset) -> Result<()> {
        check_dataset(&dataset)?;
        self.provided.retain(|d| d.name != dataset.name);
        self.provided.push(Arc::new(dataset));
        Ok(())
    }

    /// The provided dataset `[data]` names, when it names one.
    pub(super) fn provided_for(
        &self,
        d: &crate::config::DataConfig,
    ) -> Option<&Arc<crate::data::Dataset>> {
        if d.format.is_some() {
            return None;
        }
        self.provided.iter().find(|p| p.name == d.dataset)
    }

    /// The entry `[data]` names: its `format` when it has one, else its `dataset`.
    ///
    /// # Errors
    /// A positioned [`Error::Config`] for an unknown name, a format without `path`, or neither
    /// `dataset` nor `format`.
    pub fn data_entry(&self, cfg: &LoadedConfig) -> Result<&Entry> {
        let d = &cfg.config.data;
        match &d.format {
            Some(f) => {
                if d.path.is_none() {
                    return Err(cfg.error_at(
                        "data",
                        "format",
                        format!("`format = \"{f}\"` reads the directory `path` names, and there is no `path`"),
                        Some("add `path = \"DIR\"` (relative to this file) to [data]".into()),
                    ));
                }
                self.lookup_at(cfg, Kind::Format, cfg.position("data", "format"), f)
            }
            None if d.dataset.is_empty() => Err(cfg.error_at(
                "data",
                "dataset",
                "[data] names no data: give `dataset` (a registered dataset) or `format` with `path`".into(),
                Some(format!(
                    "for example `dataset = \"fashion-mnist\"`, or `format = \"npy\"` and `path = \"DIR\"`; registered: {}",
                    self.names(Kind::Dataset).join(", ")
                )),
            )),
            None => self.lookup_at(cfg, Kind::Dataset, cfg.position("data", "dataset"), &d.dataset),
        }
    }

    /// Loads the data of `cfg`'s `[data]` (its `format` reading `path`, or its registered
    /// `dataset`), `path` being `[data] path` resolved against the config's directory, and
    /// applies `[data] shape`, `mean` and `std` ([`crate::data::transform`]).
    ///
    /// # Errors
    /// A positioned [`Error::Config`] for an unknown dataset or format and for a `shape`,
    /// `mean` or `std` that does not fit the data; the factory's errors
    /// ([`Error::DatasetMissing`], [`Error::Idx`], [`Error::DataFile`], …), or [`Error::Plugin`]
    /// when a plugin's factory panicked.
    pub fn load_dataset(
        &self,
        cfg: &LoadedConfig,
        path: Option<&Path>,
    ) -> Result<crate::data::Dataset> {
        let d = &cfg.config.data;
        let mut ds = match self.provided_for(d) {
            Some(ds) => (**ds).clone(),
            None => read_entry(
                self.data_entry(cfg)?,
                &d.dataset,
                path,
                &cfg.params("data.options", 0),
                &cfg.base_dir,
            )?,
        };
        crate::data::transform::apply(
            &mut ds,
            d.shape.as_deref(),
            d.mean.as_deref(),
            d.std.as_deref(),
        )
        .map_err(|r| cfg.error_at("data", r.key, r.message, r.hint))?;
        Ok(ds)
    }

    /// Reads a dataset outside a config (`engram data export`): the registered dataset `name`
    /// (from `path` when given), or with `format` the data at `path` (`name` being its display
    /// name, may be empty).
    ///
    /// # Errors
    /// [`Error::Usage`] for an unknown dataset or format (with the nearest name); the factory's
    /// errors.
    pub fn read_data(
        &self,
        name: &str,
        format: Option<&str>,
        path: Option<&Path>,
    ) -> Result<crate::data::Dataset> {
        let (kind, wanted) = match format {
            Some(f) => (Kind::Format, f),
            None => (Kind::Dataset, name),
        };
        let entry = self
            .get(kind, wanted)
            .ok_or_else(|| self.unknown(kind, wanted))?;
        read_entry(
            entry,
            name,
            path,
            &crate::config::ParamSource::from_toml(""),
            Path::new(""),
        )
    }

    /// Writes `ds` in the registered format `format` into the new directory `out`, atomically
    /// ([`crate::data::format::export`]).
    ///
    /// # Errors
    /// [`Error::Usage`] for an unknown format or an existing `out`; the writer's errors.
    pub fn write_data(
        &self,
        ds: &crate::data::Dataset,
        format: &str,
        out: &Path,
    ) -> Result<std::path::PathBuf> {
        let entry = self
            .get(Kind::Format, format)
            .ok_or_else(|| self.unknown(Kind::Format, format))?;
        let Factory::Format(fns) = entry.registration.factory else {
            unreachable!("a format entry")
        };
        match &entry.library {
            None => crate::data::format::export(ds, out, fns.write),
            Some(lib) => crate::plugin::guarded_build(lib, entry.registration.name, || {
                crate::data::format::export(ds, out, fns.write)
            }),
        }
    }

    pub(super) fn unknown(&self, kind: Kind, name: &str) -> Error {
        let names = self.names(kind);
        let near = did_you_mean(name, names.iter().copied())
            .map(|s| format!("did you mean `{s}`? "))
            .unwrap_or_default();
        Error::Usage(format!(
            "unknown {} `{name}`\n  hint: {near}registered: {}",
            kind.noun(),
            names.join(", ")
        ))
    }
}

/// Runs a dataset or format entry's reader (a plugin's with its panics caught) and checks
/// what it returned ([`check_dataset`]).
fn read_entry(
    entry: &Entry,
    name: &str,
    path: Option<&Path>,
    options: &crate::config::ParamSource,
    base_dir: &Path,
) -> Result<crate::data::Dataset> {
    let f = match entry.registration.factory {
        Factory::Dataset(f) => f,
        Factory::Format(fns) => fns.read,
        _ => unreachable!("a dataset or format entry"),
    };
    let req = crate::data::DatasetRequest {
        name,
        path,
        options,
        base_dir,
    };
    let ds = match &entry.library {
        None => f(&req)?,
        Some(lib) => crate::plugin::guarded_build(lib, entry.registration.name, || f(&req))?,
    };
    check_dataset(&ds)?;
    Ok(ds)
}
