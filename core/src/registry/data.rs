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
                cfg.config.train.lm_window(),
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

    /// The entry `[[data.stream]]` entry `index` names (its `format`, else its `dataset`), or
    /// `None` for a dataset the program provided ([`Registry::provide`]).
    ///
    /// # Errors
    /// A positioned [`Error::Config`] for an unknown name, or an entry naming no data.
    pub fn stream_entry(&self, cfg: &LoadedConfig, index: usize) -> Result<Option<&Entry>> {
        let e = &cfg.config.data.stream[index];
        match &e.format {
            Some(f) => {
                let at = cfg.entry_position("data.stream", index, "format");
                self.lookup_at(cfg, Kind::Format, at, f).map(Some)
            }
            None if e.dataset.is_empty() => Err(cfg.stream_error(
                index,
                "dataset",
                format!("[[data.stream]] entry {} names no data: give `dataset` (a registered dataset) or `format`", index + 1),
                Some(format!(
                    "for example `dataset = \"mnist\"`, or `format = \"jsonl\"` with `path = \"DIR\"`; registered: {}",
                    self.names(Kind::Dataset).join(", ")
                )),
            )),
            None if self.provided.iter().any(|p| p.name == e.dataset) => Ok(None),
            None => {
                let at = cfg.entry_position("data.stream", index, "dataset");
                self.lookup_at(cfg, Kind::Dataset, at, &e.dataset).map(Some)
            }
        }
    }

    /// Loads `[[data.stream]]` entry `index`'s data as [`Registry::load_dataset`] loads
    /// `[data]`'s: its `path` relative to the config's directory (with `format` and no `path`,
    /// `$ENGRAM_DATA/<dataset>`), then its `shape`, `mean` and `std`.
    ///
    /// # Errors
    /// As [`Registry::load_dataset`], positioned at the entry's keys (missing data at its
    /// `path`, else its `dataset`, with the hint of how to get it).
    pub fn load_stream_entry(
        &self,
        cfg: &LoadedConfig,
        index: usize,
    ) -> Result<crate::data::sources::Source> {
        let e = &cfg.config.data.stream[index];
        let path = match (&e.path, &e.format) {
            (Some(p), _) => Some(crate::fsutil::relative_to(&cfg.base_dir, p)),
            (None, Some(_)) => Some(crate::data::catalog::data_root().join(&e.dataset)),
            (None, None) => None,
        };
        let mut ds = match self.stream_entry(cfg, index)? {
            None => {
                let provided = self.provided.iter().find(|p| p.name == e.dataset);
                provided.map(|d| (**d).clone()).ok_or_else(|| {
                    Error::Usage(format!("dataset `{}` is no longer provided", e.dataset))
                })?
            }
            Some(entry) => read_entry(
                entry,
                &e.dataset,
                path.as_deref(),
                &cfg.params("data.stream", index).nested("options"),
                &cfg.base_dir,
                cfg.config.train.lm_window(),
            )
            .map_err(|err| match err {
                // Missing data is this entry's: said at its `path` (or `dataset`) line, and its
                // hint speaks of the entry's path, not of `[data] path`.
                Error::DatasetMissing {
                    name,
                    searched,
                    hint,
                } => cfg.stream_error(
                    index,
                    if e.path.is_some() { "path" } else { "dataset" },
                    format!("dataset `{name}` not found (looked in: {searched})"),
                    Some(hint.replace("`[data] path`", "the entry's data path")),
                ),
                other => other,
            })?,
        };
        crate::data::transform::apply(
            &mut ds,
            e.shape.as_deref(),
            e.mean.as_deref(),
            e.std.as_deref(),
        )
        .map_err(|r| cfg.stream_error(index, r.key, r.message, r.hint))?;
        Ok(crate::data::sources::Source {
            dataset: ds,
            label_space: e.label_space.clone(),
            subsample: e.subsample,
            test_subsample: e.test_subsample,
        })
    }

    /// The stream of tasks `cfg`'s `[data]` describes: its dataset dealt into tasks
    /// ([`crate::data::stream::Stream::build`]), or one task per `[[data.stream]]` entry
    /// ([`crate::data::sources::build`]), every draw from `[run] seed`. Under `[train] joint`
    /// the stream is marked [`crate::data::stream::Stream::joint`]: every task's classes are
    /// seen from the first step, so `mask_logits` masks none of them.
    ///
    /// # Errors
    /// As [`Registry::load_dataset`] and [`Registry::load_stream_entry`]; a positioned
    /// [`Error::Config`] for settings the data cannot fill (at `tasks` or `classes_per_task`),
    /// for stream entries whose shapes, kinds of values or tokenizers differ, and for a shared
    /// label space whose classes differ by name.
    pub fn stream(&self, cfg: &LoadedConfig) -> Result<crate::data::stream::Stream> {
        let mut stream = self.dealt_stream(cfg)?;
        stream.joint = cfg.config.train.joint;
        Ok(stream)
    }

    /// [`Registry::stream`] before it is marked joint.
    fn dealt_stream(&self, cfg: &LoadedConfig) -> Result<crate::data::stream::Stream> {
        let c = &cfg.config;
        if c.data.stream.is_empty() {
            let data_path = c
                .data
                .path
                .as_ref()
                .map(|p| crate::fsutil::relative_to(&cfg.base_dir, p));
            let ds = self.load_dataset(cfg, data_path.as_deref())?;
            let listed = c
                .data
                .classes_per_task
                .as_ref()
                .and_then(|l| l.listed_tasks());
            let key = if listed.is_some() {
                "classes_per_task"
            } else {
                "tasks"
            };
            return crate::data::stream::Stream::build(Arc::new(ds), &c.data, c.run.seed)
                .map_err(|e| cfg.error_at("data", key, e.to_string(), None));
        }
        let sources = (0..c.data.stream.len())
            .map(|i| self.load_stream_entry(cfg, i))
            .collect::<Result<Vec<_>>>()?;
        if sources[0].dataset.train.values.is_tokens() {
            same_tokenizer(cfg)?;
        }
        crate::data::sources::build(sources, &c.data, c.run.seed)
            .map_err(|r| cfg.stream_error(r.entry, r.key, r.message, r.hint))
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
            None,
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
    lm_window: Option<usize>,
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
        lm_window,
    };
    let ds = match &entry.library {
        None => f(&req)?,
        Some(lib) => crate::plugin::guarded_build(lib, entry.registration.name, || f(&req))?,
    };
    check_dataset(&ds)?;
    Ok(ds)
}

/// Refuses `[[data.stream]]` entries of text whose tokenizers (`[data.stream.options]
/// tokenizer`) are different files: one model reads every task's token ids, so the same id
/// must mean the same token in each.
///
/// # Errors
/// A positioned [`Error::Config`] at the first entry whose tokenizer differs from the first
/// entry's, in bytes.
fn same_tokenizer(cfg: &LoadedConfig) -> Result<()> {
    let tokenizer = |i: usize| {
        let e = &cfg.config.data.stream[i];
        let p = e.options.as_ref()?.get("tokenizer")?.as_str()?;
        Some(crate::fsutil::relative_to(&cfg.base_dir, Path::new(p)))
    };
    let Some(first) = tokenizer(0) else {
        return Ok(());
    };
    let read = |p: &Path| std::fs::read(p).ok();
    let first_bytes = read(&first);
    for i in 1..cfg.config.data.stream.len() {
        let Some(mine) = tokenizer(i) else { continue };
        if mine != first && read(&mine) != first_bytes {
            return Err(cfg
                .params("data.stream", i)
                .nested("options")
                .key_error(
                    "tokenizer",
                    format!(
                        "tokenizer {} differs from the first entry's ({}); one model reads every task's token ids",
                        mine.display(),
                        first.display()
                    ),
                    Some("give every [[data.stream]] entry the same tokenizer.json".into()),
                ));
        }
    }
    Ok(())
}
