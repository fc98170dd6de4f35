//! The registry of named components: the three strategy kinds, models and datasets.
//!
//! Every component is a [`Registration`]: a name (its `type = "…"` in the config), a one-line
//! summary, its keys with their defaults, and a factory that decodes the keys (rejecting
//! unknown ones, with positions) and builds it. Built-ins are listed explicitly, one line each:
//! [`crate::model::BUILTINS`], [`crate::data::BUILTINS`] and the strategies crate's `BUILTINS`;
//! a plugin hands its registrations over through [`crate::plugin::Registrar::add`]. The
//! [`Registry`] orders them by kind then name for the runner, `engram list`, `engram validate`
//! and the generated reference pages.

pub use crate::component::{
    BuildContext, DatasetFactory, Factory, Kind, ModelFactory, Registration, defaults_table,
};
use crate::config::{LoadedConfig, did_you_mean};
pub use crate::data::dataset::check_dataset;
use crate::error::{Error, Result};
use crate::plugin::{Guarded, Plugin, PluginError, PluginInfo};
use crate::strategy::{ForgettingStrategy, MemoryStrategy, Scheduler};
use serde::Serialize;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

mod data;

/// Where a registered component comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "path")]
pub enum Origin {
    /// Compiled into engram.
    Builtin,
    /// Loaded from this shared library.
    Plugin(std::path::PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin => f.write_str("built-in"),
            Origin::Plugin(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A registry entry.
#[derive(Clone)]
pub struct Entry {
    /// The registration.
    pub registration: Registration,
    /// Where it came from.
    pub origin: Origin,
    /// The plugin library it lives in (kept alive by the entry and every strategy it builds).
    pub library: Option<Arc<crate::plugin::Library>>,
}

impl Entry {
    /// Builds the strategy with `f` (the entry's factory); a plugin's factory runs with panics
    /// caught and its strategy is wrapped in [`Guarded`].
    fn build<T: ?Sized>(
        &self,
        f: impl FnOnce() -> Result<Box<T>>,
        wrap: impl FnOnce(Box<T>, Arc<crate::plugin::Library>, &str) -> Box<T>,
    ) -> Result<Box<T>> {
        match &self.library {
            None => f(),
            Some(lib) => {
                let s = crate::plugin::guarded_build(lib, self.registration.name, f)?;
                Ok(wrap(s, lib.clone(), self.registration.name))
            }
        }
    }
}

/// The table of components available to a run, ordered by kind then name.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<Entry>,
    plugins: Vec<PluginInfo>,
    /// Paths a run recorded for a plugin that this registry already holds from another path
    /// (the same SHA-256, given with `--plugin` after the library moved): loading one of them
    /// is a no-op ([`Registry::stand_in_for`]).
    stand_ins: Vec<std::path::PathBuf>,
    /// Datasets a program holds in memory ([`Registry::provide`]), by name.
    provided: Vec<Arc<crate::data::Dataset>>,
}

/// `p` made absolute with `.` and `..` removed lexically (the file may be gone, so
/// `canonicalize` cannot be used).
fn lexical(p: &Path) -> std::path::PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Registry {
    /// engram-core's built-ins: the plain step of [`crate::strategy::BUILTINS`], the models of
    /// [`crate::model::BUILTINS`] and the datasets of [`crate::data::BUILTINS`] (the other
    /// strategies are in the strategies crate; the `engram` facade's `registry()` adds them
    /// with [`Registry::with`]).
    pub fn builtin() -> Self {
        Self::default()
            .with(crate::strategy::BUILTINS)
            .with(crate::model::BUILTINS)
            .with(crate::data::BUILTINS)
    }

    /// This registry with the built-ins of `list` added (an in-process crate's components).
    ///
    /// # Panics
    /// When a name is registered twice for one kind: a programming error in the lists, caught
    /// by the test that builds the full registry.
    pub fn with(mut self, list: &[Registration]) -> Self {
        for reg in list {
            if let Err(e) = self.add(*reg, Origin::Builtin) {
                panic!("{e}");
            }
        }
        self
    }

    /// Adds a built-in entry.
    ///
    /// # Errors
    /// [`Error::Other`] when a component of the same kind and name exists; the message names
    /// both sources.
    pub fn add(&mut self, registration: Registration, origin: Origin) -> Result<()> {
        self.insert(registration, origin, None)
    }

    fn insert(
        &mut self,
        registration: Registration,
        origin: Origin,
        library: Option<Arc<crate::plugin::Library>>,
    ) -> Result<()> {
        let kind = registration.factory.kind();
        if let Some(e) = self.entries.iter().find(|e| {
            e.registration.name == registration.name && e.registration.factory.kind() == kind
        }) {
            return Err(match origin {
                Origin::Plugin(path) => Error::Plugin(PluginError::Duplicate {
                    path,
                    kind: kind.noun(),
                    name: registration.name.to_string(),
                    other: e.origin.to_string(),
                }),
                Origin::Builtin => Error::Other(format!(
                    "duplicate {} `{}`: registered by {} and again by {origin}",
                    kind.noun(),
                    registration.name,
                    e.origin
                )),
            });
        }
        self.entries.push(Entry {
            registration,
            origin,
            library,
        });
        self.entries.sort_by(|a, b| {
            (a.registration.factory.kind(), a.registration.name)
                .cmp(&(b.registration.factory.kind(), b.registration.name))
        });
        Ok(())
    }

    /// Loads the plugin at `path` (see [`crate::plugin::load`]) and adds its components. A
    /// library already in this registry is skipped. Nothing is added when any of its names is
    /// taken.
    ///
    /// # Errors
    /// [`Error::Plugin`] with the [`PluginError`] of the failed check, or
    /// [`PluginError::Duplicate`] naming both sources.
    pub fn load_plugin(&mut self, path: &Path) -> Result<()> {
        if self.stand_ins.contains(&lexical(path)) {
            return Ok(());
        }
        let plugin: Plugin = crate::plugin::load(path)?;
        if self.plugins.iter().any(|p| p.path == plugin.info.path) {
            return Ok(());
        }
        let mut next = self.clone();
        for reg in &plugin.registrations {
            next.insert(
                *reg,
                Origin::Plugin(plugin.info.path.clone()),
                Some(plugin.library.clone()),
            )?;
        }
        next.plugins.push(plugin.info);
        *self = next;
        Ok(())
    }

    /// Loads every plugin of `paths`, in order (see [`Registry::load_plugin`]).
    ///
    /// # Errors
    /// The first plugin error.
    pub fn load_plugins<P: AsRef<Path>>(&mut self, paths: &[P]) -> Result<()> {
        paths.iter().try_for_each(|p| self.load_plugin(p.as_ref()))
    }

    /// Records that the plugin a run loaded from `recorded` is already here under another path
    /// (the caller checked that the SHA-256 is the same): a config's `plugins` entry naming
    /// `recorded` is then satisfied without the file, so a run whose library moved resumes,
    /// evaluates and exports with `--plugin NEW_PATH`.
    pub fn stand_in_for(&mut self, recorded: &Path) {
        self.stand_ins.push(lexical(recorded));
    }

    /// The plugins loaded into this registry, in load order.
    pub fn plugins(&self) -> &[PluginInfo] {
        &self.plugins
    }

    /// Every entry, ordered by kind then name.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry named `name` of `kind`.
    pub fn get(&self, kind: Kind, name: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.registration.factory.kind() == kind && e.registration.name == name)
    }

    /// Names registered for `kind`.
    pub fn names(&self, kind: Kind) -> Vec<&'static str> {
        self.entries
            .iter()
            .filter(|e| e.registration.factory.kind() == kind)
            .map(|e| e.registration.name)
            .collect()
    }

    /// The entry of `kind` named `name`, which the config gives at `(line, column)`.
    ///
    /// # Errors
    /// A positioned [`Error::Config`] for an unknown name, with the nearest registered name
    /// and the list of them.
    pub fn lookup_at(
        &self,
        cfg: &LoadedConfig,
        kind: Kind,
        (line, column): (usize, usize),
        name: &str,
    ) -> Result<&Entry> {
        self.get(kind, name).ok_or_else(|| {
            let names = self.names(kind);
            let mut hint = match did_you_mean(name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`? "),
                None => String::new(),
            };
            let plural = match kind {
                Kind::Forgetting | Kind::Memory => format!("{} strategies", kind.list()),
                other => format!("{}s", other.noun()),
            };
            hint.push_str(&format!(
                "registered {plural}: {}; a plugin's components need its library \
                 (`plugins = [\"lib.so\"]` or `--plugin PATH`)",
                names.join(", ")
            ));
            if kind == Kind::Dataset {
                hint.push_str(
                    "; a dataset a program held in memory (`Experiment::dataset`, `Registry::provide`) is resumed by that program (`Experiment::resume`)",
                );
            }
            Error::Config {
                file: cfg.file.clone(),
                line,
                column,
                message: format!("unknown {} `{name}`", kind.noun()),
                hint: Some(hint),
            }
        })
    }

    fn lookup(&self, cfg: &LoadedConfig, kind: Kind, index: usize, name: &str) -> Result<&Entry> {
        self.lookup_at(cfg, kind, cfg.type_position(kind.list(), index), name)
    }

    /// Looks up every component `cfg` names (model, dataset, each strategy), without building
    /// any: the fast check a run does before it reads its data.
    ///
    /// # Errors
    /// The first unknown name, as a positioned [`Error::Config`].
    pub fn check_names(&self, cfg: &LoadedConfig) -> Result<()> {
        self.model_entry(cfg)?;
        let c = &cfg.config;
        if !c.data.stream.is_empty() {
            for i in 0..c.data.stream.len() {
                self.stream_entry(cfg, i)?;
            }
        } else if self.provided_for(&c.data).is_none() {
            self.data_entry(cfg)?;
        }
        let lists = [
            (
                Kind::Forgetting,
                c.forgetting.iter().map(|e| &e.kind).collect::<Vec<_>>(),
            ),
            (Kind::Memory, c.memory.iter().map(|e| &e.kind).collect()),
            (
                Kind::Scheduler,
                c.scheduler.iter().map(|e| &e.kind).collect(),
            ),
        ];
        for (kind, names) in lists {
            for (i, name) in names.into_iter().enumerate() {
                self.lookup(cfg, kind, i, name)?;
            }
        }
        Ok(())
    }

    /// The `[model]` entry of `cfg`.
    ///
    /// # Errors
    /// A positioned [`Error::Config`] at `[model] type` for an unknown model.
    pub fn model_entry(&self, cfg: &LoadedConfig) -> Result<&Entry> {
        self.lookup_at(
            cfg,
            Kind::Model,
            cfg.position("model", "type"),
            &cfg.config.model.kind,
        )
    }

    /// Builds the `[model]` of `cfg` on `device` with the registered factory (a plugin's runs
    /// with its panics caught).
    ///
    /// # Errors
    /// A positioned [`Error::Config`] for an unknown model, unknown keys or values the model
    /// refuses for this data (its geometry), or [`Error::Plugin`] when a plugin's factory
    /// panicked.
    pub fn build_model(
        &self,
        cfg: &LoadedConfig,
        cx: &crate::model::ModelContext,
        device: &burn::tensor::Device,
    ) -> Result<crate::model::Model> {
        let entry = self.model_entry(cfg)?;
        let Factory::Model(f) = entry.registration.factory else {
            unreachable!("model_entry returns a model")
        };
        let src = cfg.params("model", 0);
        match &entry.library {
            None => f(&src, cx, device),
            Some(lib) => {
                crate::plugin::guarded_build(lib, entry.registration.name, || f(&src, cx, device))
            }
        }
    }

    /// Builds every `[[forgetting]]` entry of `cfg`.
    ///
    /// # Errors
    /// Positioned [`Error::Config`] for unknown names and bad parameters.
    pub fn build_forgetting(
        &self,
        cfg: &LoadedConfig,
        cx: &BuildContext,
    ) -> Result<Vec<Box<dyn ForgettingStrategy>>> {
        let mut out = Vec::new();
        for (i, e) in cfg.config.forgetting.iter().enumerate() {
            let entry = self.lookup(cfg, Kind::Forgetting, i, &e.kind)?;
            if let Factory::Forgetting(f) = entry.registration.factory {
                out.push(entry.build(
                    || f(&cfg.params("forgetting", i), cx),
                    |s, lib, name| Box::new(Guarded::new(s, lib, name)),
                )?);
            }
        }
        Ok(out)
    }

    /// Builds every `[[memory]]` entry of `cfg`, sorted into chain order, with `standard`
    /// appended when no execution strategy is configured.
    ///
    /// # Errors
    /// Positioned [`Error::Config`] for unknown names and bad parameters, and for two
    /// strategies of the same layer.
    pub fn build_memory(
        &self,
        cfg: &LoadedConfig,
        cx: &BuildContext,
    ) -> Result<Vec<Box<dyn MemoryStrategy>>> {
        let mut out: Vec<Box<dyn MemoryStrategy>> = Vec::new();
        for (i, e) in cfg.config.memory.iter().enumerate() {
            let entry = self.lookup(cfg, Kind::Memory, i, &e.kind)?;
            if let Factory::Memory(f) = entry.registration.factory {
                let s = entry.build(
                    || f(&cfg.params("memory", i), cx),
                    |s, lib, name| Box::new(Guarded::new(s, lib, name)),
                )?;
                if let Some(other) = out.iter().find(|o| o.layer() == s.layer()) {
                    let (line, column) = cfg.type_position("memory", i);
                    return Err(Error::Config {
                        file: cfg.file.clone(),
                        line,
                        column,
                        message: format!(
                            "`{}` and `{}` both act at the {:?} layer of a step",
                            other.name(),
                            s.name(),
                            s.layer()
                        ),
                        hint: Some("keep one strategy per layer".into()),
                    });
                }
                out.push(s);
            }
        }
        if !out
            .iter()
            .any(|s| s.layer() == crate::strategy::MemoryLayer::Execution)
        {
            out.push(Box::new(crate::strategy::standard::Standard));
        }
        out.sort_by_key(|s| s.layer());
        Ok(out)
    }

    /// Builds every scheduler entry of `cfg` (`constant` when none is configured).
    ///
    /// # Errors
    /// Positioned [`Error::Config`] for unknown names and bad parameters.
    pub fn build_schedulers(
        &self,
        cfg: &LoadedConfig,
        cx: &BuildContext,
    ) -> Result<Vec<Box<dyn Scheduler>>> {
        let mut out = Vec::new();
        for (i, e) in cfg.config.scheduler.iter().enumerate() {
            let entry = self.lookup(cfg, Kind::Scheduler, i, &e.kind)?;
            if let Factory::Scheduler(f) = entry.registration.factory {
                out.push(entry.build(
                    || f(&cfg.params("scheduler", i), cx),
                    |s, lib, name| Box::new(Guarded::new(s, lib, name)),
                )?);
            }
        }
        Ok(out)
    }
}
