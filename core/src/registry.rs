//! The registry of named strategy factories.
//!
//! Built-in strategies submit a [`Registration`] through [`inventory`] (see
//! [`register_strategy!`](crate::register_strategy)); [`Registry::builtin`] collects them into an
//! explicit, ordered table that the runner, `engram list` and `engram validate` read. Each entry
//! has a name, a one-line summary, its parameters with their defaults, and a factory that decodes
//! the parameters (rejecting unknown keys) and builds the strategy.

use crate::config::{LoadedConfig, ParamSource, did_you_mean};
use crate::error::{Error, Result};
use crate::plugin::{Guarded, Plugin, PluginError, PluginInfo};
use crate::strategy::{ForgettingStrategy, MemoryStrategy, Scheduler};
use serde::Serialize;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// What the factory knows about the run when it builds a strategy.
#[derive(Clone, Debug, Default)]
pub struct BuildContext {
    /// Number of tasks in the stream.
    pub num_tasks: usize,
    /// Number of classes (logit width).
    pub num_classes: usize,
    /// Training batch size.
    pub batch_size: usize,
    /// The run seed.
    pub seed: u64,
    /// The model kind (`mlp`, …), for defaults that depend on it.
    pub model_kind: String,
}

/// The three kinds of strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StrategyKind {
    /// A [`ForgettingStrategy`] (`[[forgetting]]`).
    Forgetting,
    /// A [`MemoryStrategy`] (`[[memory]]`).
    Memory,
    /// A [`Scheduler`] (`[scheduler]`).
    Scheduler,
}

impl StrategyKind {
    /// The config list this kind lives in.
    pub fn list(self) -> &'static str {
        match self {
            StrategyKind::Forgetting => "forgetting",
            StrategyKind::Memory => "memory",
            StrategyKind::Scheduler => "scheduler",
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.list())
    }
}

/// A factory: decodes parameters and builds the strategy.
#[derive(Clone, Copy)]
pub enum Factory {
    /// Builds a forgetting strategy.
    Forgetting(fn(&ParamSource, &BuildContext) -> Result<Box<dyn ForgettingStrategy>>),
    /// Builds a memory strategy.
    Memory(fn(&ParamSource, &BuildContext) -> Result<Box<dyn MemoryStrategy>>),
    /// Builds a scheduler.
    Scheduler(fn(&ParamSource, &BuildContext) -> Result<Box<dyn Scheduler>>),
}

impl Factory {
    /// The kind of strategy it builds.
    pub fn kind(&self) -> StrategyKind {
        match self {
            Factory::Forgetting(_) => StrategyKind::Forgetting,
            Factory::Memory(_) => StrategyKind::Memory,
            Factory::Scheduler(_) => StrategyKind::Scheduler,
        }
    }
}

/// One registered strategy (submitted through `inventory` by built-ins).
#[derive(Clone, Copy)]
pub struct Registration {
    /// The name used as `type = "…"`.
    pub name: &'static str,
    /// One line saying what it does.
    pub summary: &'static str,
    /// Its parameters with their default values, as a TOML table.
    pub defaults: fn() -> toml::Table,
    /// The factory.
    pub factory: Factory,
}

inventory::collect!(Registration);

/// Where a registered strategy comes from.
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

/// The table of strategies available to a run, ordered by kind then name.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<Entry>,
    plugins: Vec<PluginInfo>,
}

impl Registry {
    /// Every built-in strategy submitted through `inventory`.
    ///
    /// # Panics
    /// Never in a correct build; a duplicate built-in name is a programming error and is
    /// reported by the `registry_has_unique_builtins` test.
    pub fn builtin() -> Self {
        let mut r = Self::default();
        for reg in inventory::iter::<Registration> {
            // Duplicates among built-ins are caught by tests; keep the first.
            let _ = r.add(*reg, Origin::Builtin);
        }
        r
    }

    /// Adds a built-in entry.
    ///
    /// # Errors
    /// [`Error::Other`] when a strategy of the same kind and name exists; the message names
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
                    kind,
                    name: registration.name.to_string(),
                    other: e.origin.to_string(),
                }),
                Origin::Builtin => Error::Other(format!(
                    "duplicate {kind} strategy `{}`: registered by {} and again by {origin}",
                    registration.name, e.origin
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

    /// Loads the plugin at `path` (see [`crate::plugin::load`]) and adds its strategies. A
    /// library already in this registry is skipped. Nothing is added when any of its names is
    /// taken.
    ///
    /// # Errors
    /// [`Error::Plugin`] with the [`PluginError`] of the failed check, or
    /// [`PluginError::Duplicate`] naming both sources.
    pub fn load_plugin(&mut self, path: &Path) -> Result<()> {
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

    /// The plugins loaded into this registry, in load order.
    pub fn plugins(&self) -> &[PluginInfo] {
        &self.plugins
    }

    /// Every entry, ordered by kind then name.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry named `name` of `kind`.
    pub fn get(&self, kind: StrategyKind, name: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.registration.factory.kind() == kind && e.registration.name == name)
    }

    /// Names registered for `kind`.
    pub fn names(&self, kind: StrategyKind) -> Vec<&'static str> {
        self.entries
            .iter()
            .filter(|e| e.registration.factory.kind() == kind)
            .map(|e| e.registration.name)
            .collect()
    }

    fn lookup(
        &self,
        cfg: &LoadedConfig,
        kind: StrategyKind,
        index: usize,
        name: &str,
    ) -> Result<&Entry> {
        self.get(kind, name).ok_or_else(|| {
            let names = self.names(kind);
            let (line, column) = cfg.type_position(kind.list(), index);
            let mut hint = match did_you_mean(name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`? "),
                None => String::new(),
            };
            hint.push_str(&format!(
                "registered {kind} strategies: {}; a plugin's strategies need its library \
                 (`plugins = [\"lib.so\"]` or `--plugin PATH`)",
                names.join(", ")
            ));
            Error::Config {
                file: cfg.file.clone(),
                line,
                column,
                message: format!("unknown {kind} strategy `{name}`"),
                hint: Some(hint),
            }
        })
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
            let entry = self.lookup(cfg, StrategyKind::Forgetting, i, &e.kind)?;
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
            let entry = self.lookup(cfg, StrategyKind::Memory, i, &e.kind)?;
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
            let entry = self.get(StrategyKind::Memory, "standard").ok_or_else(|| {
                Error::Other("the built-in memory strategy `standard` is not linked".into())
            })?;
            if let Factory::Memory(f) = entry.registration.factory {
                out.push(f(&ParamSource::from_toml(""), cx)?);
            }
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
            let entry = self.lookup(cfg, StrategyKind::Scheduler, i, &e.kind)?;
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

/// Serialises a parameter struct's defaults into a TOML table (for [`Registration::defaults`]).
pub fn defaults_table<T: Serialize + Default>() -> toml::Table {
    toml::Table::try_from(T::default()).unwrap_or_default()
}

/// Registers a built-in strategy.
///
/// ```ignore
/// engram_core::register_strategy!(forgetting "naive", "train on each task as it comes", NaiveParams, build_naive);
/// ```
/// where `build_naive(&ParamSource, &BuildContext) -> Result<Box<dyn ForgettingStrategy>>` and
/// `NaiveParams: Serialize + Default` gives the defaults shown by `engram list`.
#[macro_export]
macro_rules! register_strategy {
    (forgetting $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::register_strategy!(@ Forgetting $name, $summary, $params, $build);
    };
    (memory $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::register_strategy!(@ Memory $name, $summary, $params, $build);
    };
    (scheduler $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::register_strategy!(@ Scheduler $name, $summary, $params, $build);
    };
    (@ $variant:ident $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::inventory::submit! {
            $crate::registration!(@ $variant $name, $summary, $params, $build)
        }
    };
}

/// A [`Registration`] value, for a plugin's register function
/// ([`Registrar::add`](crate::plugin::Registrar::add)); same arguments as
/// [`register_strategy!`](crate::register_strategy).
///
/// ```ignore
/// r.add(engram_core::registration!(forgetting "si", "synaptic intelligence", SiParams, build_si));
/// ```
#[macro_export]
macro_rules! registration {
    (forgetting $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registration!(@ Forgetting $name, $summary, $params, $build)
    };
    (memory $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registration!(@ Memory $name, $summary, $params, $build)
    };
    (scheduler $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registration!(@ Scheduler $name, $summary, $params, $build)
    };
    (@ $variant:ident $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registry::Registration {
            name: $name,
            summary: $summary,
            defaults: $crate::registry::defaults_table::<$params>,
            factory: $crate::registry::Factory::$variant($build),
        }
    };
}
