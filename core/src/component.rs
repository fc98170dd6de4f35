//! What a component is, below both the registry and the plugin loader (each uses it; neither
//! uses the other's internals through it): the five [`Kind`]s, the [`Factory`] of each, the
//! [`Registration`] a built-in list or a plugin hands over, and the [`registration!`](crate::registration)
//! macro that writes one.

use crate::config::ParamSource;
use crate::error::Result;
use crate::strategy::{ForgettingStrategy, MemoryStrategy, Scheduler};
use serde::Serialize;
use std::fmt;

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
}

/// The kinds of registered component: three kinds of strategy, models and datasets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A [`ForgettingStrategy`] (`[[forgetting]]`).
    Forgetting,
    /// A [`MemoryStrategy`] (`[[memory]]`).
    Memory,
    /// A [`Scheduler`] (`[[scheduler]]`).
    Scheduler,
    /// A model (`[model] type`).
    Model,
    /// A dataset (`[data] dataset`).
    Dataset,
}

impl Kind {
    /// Every kind, in registry order.
    pub const ALL: [Kind; 5] = [
        Kind::Forgetting,
        Kind::Memory,
        Kind::Scheduler,
        Kind::Model,
        Kind::Dataset,
    ];

    /// The config table this kind lives in (`forgetting`, `memory`, `scheduler`, `model`,
    /// `dataset`).
    pub fn list(self) -> &'static str {
        match self {
            Kind::Forgetting => "forgetting",
            Kind::Memory => "memory",
            Kind::Scheduler => "scheduler",
            Kind::Model => "model",
            Kind::Dataset => "dataset",
        }
    }

    /// What a component of this kind is called in messages (`forgetting strategy`, `model`).
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Forgetting => "forgetting strategy",
            Kind::Memory => "memory strategy",
            Kind::Scheduler => "scheduler",
            Kind::Model => "model",
            Kind::Dataset => "dataset",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.list())
    }
}

/// Builds a model: decodes the `[model]` keys from `src` (all but `type`), checks them against
/// the data's geometry in `cx` (positioned errors through [`ParamSource::key_error`], never a
/// panic) and initialises the model on the device from `cx.seed`.
pub type ModelFactory = fn(
    &ParamSource,
    &crate::model::ModelContext,
    &burn::tensor::Device,
) -> Result<crate::model::Model>;

/// Loads a dataset from what `[data]` says ([`crate::data::DatasetRequest`]).
pub type DatasetFactory = fn(&crate::data::DatasetRequest<'_>) -> Result<crate::data::Dataset>;

/// A factory: decodes parameters and builds the component.
#[derive(Clone, Copy)]
pub enum Factory {
    /// Builds a forgetting strategy.
    Forgetting(fn(&ParamSource, &BuildContext) -> Result<Box<dyn ForgettingStrategy>>),
    /// Builds a memory strategy.
    Memory(fn(&ParamSource, &BuildContext) -> Result<Box<dyn MemoryStrategy>>),
    /// Builds a scheduler.
    Scheduler(fn(&ParamSource, &BuildContext) -> Result<Box<dyn Scheduler>>),
    /// Builds a model.
    Model(ModelFactory),
    /// Loads a dataset.
    Dataset(DatasetFactory),
}

impl Factory {
    /// The kind of component it builds.
    pub fn kind(&self) -> Kind {
        match self {
            Factory::Forgetting(_) => Kind::Forgetting,
            Factory::Memory(_) => Kind::Memory,
            Factory::Scheduler(_) => Kind::Scheduler,
            Factory::Model(_) => Kind::Model,
            Factory::Dataset(_) => Kind::Dataset,
        }
    }
}

/// One registered component: a built-in's line in a `BUILTINS` list, or a plugin's
/// `Registrar::add` (in [`crate::plugin`]).
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

/// Serialises a parameter struct's defaults into a TOML table (for [`Registration::defaults`]).
pub fn defaults_table<T: Serialize + Default>() -> toml::Table {
    toml::Table::try_from(T::default()).unwrap_or_default()
}

/// A [`Registration`] value: a line of a `BUILTINS` list, or a plugin's
/// `Registrar::add` (in [`crate::plugin`]).
///
/// ```ignore
/// pub const NAIVE: Registration =
///     engram_core::registration!(forgetting "naive", "train on each task as it comes", NaiveParams, build);
/// r.add(engram_core::registration!(forgetting "si", "synaptic intelligence", SiParams, build_si));
/// r.add(engram_core::registration!(model "resnet-mini", "a small residual CNN", ResParams, build));
/// ```
/// `$params: Serialize + Default` gives the defaults shown by `engram list`; `$build` is the
/// kind's factory ([`Factory`]).
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
    (model $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registration!(@ Model $name, $summary, $params, $build)
    };
    (dataset $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::registration!(@ Dataset $name, $summary, $params, $build)
    };
    (@ $variant:ident $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::component::Registration {
            name: $name,
            summary: $summary,
            defaults: $crate::component::defaults_table::<$params>,
            factory: $crate::component::Factory::$variant($build),
        }
    };
}
