//! What a component is, below both the registry and the plugin loader (each uses it; neither
//! uses the other's internals through it): the six [`Kind`]s, the [`Factory`] of each, the
//! [`Registration`] a built-in list or a plugin hands over, and the [`registration!`](crate::registration)
//! macro that writes one.

use crate::config::ParamSource;
pub use crate::data::{DatasetFactory, DatasetWriter};
use crate::error::Result;
pub use crate::strategy::BuildContext;
use crate::strategy::{ForgettingStrategy, MemoryStrategy, Scheduler};
use serde::Serialize;
use std::fmt;

/// The kinds of registered component: three kinds of strategy, models, datasets and data
/// formats.
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
    /// A data format (`[data] format`): reads a directory of files into a dataset, and writes
    /// one (`engram data export`).
    Format,
}

impl Kind {
    /// Every kind, in registry order.
    pub const ALL: [Kind; 6] = [
        Kind::Forgetting,
        Kind::Memory,
        Kind::Scheduler,
        Kind::Model,
        Kind::Dataset,
        Kind::Format,
    ];

    /// The config table this kind lives in (`forgetting`, `memory`, `scheduler`, `model`,
    /// `dataset`, `format`).
    pub fn list(self) -> &'static str {
        match self {
            Kind::Forgetting => "forgetting",
            Kind::Memory => "memory",
            Kind::Scheduler => "scheduler",
            Kind::Model => "model",
            Kind::Dataset => "dataset",
            Kind::Format => "format",
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
            Kind::Format => "data format",
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

/// A data format's reader and writer.
#[derive(Clone, Copy)]
pub struct FormatFns {
    /// Reads `DatasetRequest::path` (always given for a format).
    pub read: DatasetFactory,
    /// Writes a dataset so that `read` gives it back.
    pub write: DatasetWriter,
}

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
    /// Reads and writes a data format.
    Format(FormatFns),
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
            Factory::Format(_) => Kind::Format,
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

/// A registered component's parameters, by value: what a Rust program hands the library's
/// builder (`engram::Experiment`) instead of TOML text. The builder writes them into the run's
/// config (`type = NAME` and the serialised keys), so the run is recorded, checked and resumed as
/// a config-file run is.
pub trait Component: Serialize {
    /// The kind it is registered as.
    const KIND: Kind;
    /// The registered name (`type = "…"`).
    const NAME: &'static str;
}

/// The parameters of a forgetting strategy ([`Component`] of kind [`Kind::Forgetting`]), so
/// that a builder taking one refuses another kind at compile time.
pub trait ForgettingComponent: Component {}
/// The parameters of a memory strategy.
pub trait MemoryComponent: Component {}
/// The parameters of a scheduler.
pub trait SchedulerComponent: Component {}
/// The parameters of a model.
pub trait ModelComponent: Component {}

/// Declares a built-in component once: its kind and name, its summary, its keys (the
/// parameter type, `Serialize + Default`, whose defaults `engram list` shows) and its builder
/// become the `pub const REGISTRATION` of its file and the parameter type's [`Component`]
/// implementation (with the kind's marker trait, [`ForgettingComponent`] …), so that the
/// builder's own code names the component as `Params::NAME` and no name is written twice.
///
/// ```ignore
/// engram_core::component!(forgetting "ewc", "Elastic Weight Consolidation", EwcParams, build);
/// engram_core::component!(pub const LR = scheduler "lr", "learning-rate schedule", LrParams, build_lr);
/// engram_core::component!(format "csv", "train.csv and test.csv", CsvParams, read, write);
/// ```
/// The first form names the constant `REGISTRATION`; `$build` is the kind's factory
/// ([`Factory`]), a format's being its reader and writer. `…, build, with defaults)` lists
/// the keys' defaults from the function `defaults` instead of `Params::default()` (where the
/// effective default of an unset key is worth showing). (The older form
/// `component!(Params, forgetting "name")` implements [`Component`] alone.)
#[macro_export]
macro_rules! component {
    (@kind forgetting) => { $crate::component::Kind::Forgetting };
    (@kind memory) => { $crate::component::Kind::Memory };
    (@kind scheduler) => { $crate::component::Kind::Scheduler };
    (@kind model) => { $crate::component::Kind::Model };
    (@kind dataset) => { $crate::component::Kind::Dataset };
    (@kind format) => { $crate::component::Kind::Format };
    (@marker forgetting $params:ty) => {
        impl $crate::component::ForgettingComponent for $params {}
    };
    (@marker memory $params:ty) => {
        impl $crate::component::MemoryComponent for $params {}
    };
    (@marker scheduler $params:ty) => {
        impl $crate::component::SchedulerComponent for $params {}
    };
    (@marker model $params:ty) => {
        impl $crate::component::ModelComponent for $params {}
    };
    (@marker dataset $params:ty) => {};
    (@marker format $params:ty) => {};
    (pub const $reg:ident = $kind:ident $name:literal, $summary:literal, $params:ty, $($build:path),+ $(,)?) => {
        impl $crate::component::Component for $params {
            const KIND: $crate::component::Kind = $crate::component!(@kind $kind);
            const NAME: &'static str = $name;
        }
        $crate::component!(@marker $kind $params);
        #[doc = concat!("The registration of the ", stringify!($kind), " `", $name, "`: ", $summary, ".")]
        pub const $reg: $crate::component::Registration =
            $crate::registration!($kind $name, $summary, $params, $($build),+);
    };
    (pub const $reg:ident = $kind:ident $name:literal, $summary:literal, $params:ty, $build:path, with $defaults:path) => {
        impl $crate::component::Component for $params {
            const KIND: $crate::component::Kind = $crate::component!(@kind $kind);
            const NAME: &'static str = $name;
        }
        $crate::component!(@marker $kind $params);
        #[doc = concat!("The registration of the ", stringify!($kind), " `", $name, "`: ", $summary, ".")]
        pub const $reg: $crate::component::Registration = $crate::component::Registration {
            name: $name,
            summary: $summary,
            defaults: $defaults,
            factory: $crate::registration!(@factory $kind $build),
        };
    };
    ($kind:ident $name:literal, $summary:literal, $params:ty, $build:path, with $defaults:path) => {
        $crate::component!(pub const REGISTRATION = $kind $name, $summary, $params, $build, with $defaults);
    };
    ($kind:ident $name:literal, $summary:literal, $params:ty, $($build:path),+ $(,)?) => {
        $crate::component!(pub const REGISTRATION = $kind $name, $summary, $params, $($build),+);
    };
    ($params:ty, $kind:ident $name:literal) => {
        impl $crate::component::Component for $params {
            const KIND: $crate::component::Kind = $crate::component!(@kind $kind);
            const NAME: &'static str = $name;
        }
        $crate::component!(@marker $kind $params);
    };
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
    (format $name:literal, $summary:literal, $params:ty, $read:path, $write:path) => {
        $crate::component::Registration {
            name: $name,
            summary: $summary,
            defaults: $crate::component::defaults_table::<$params>,
            factory: $crate::component::Factory::Format($crate::component::FormatFns {
                read: $read,
                write: $write,
            }),
        }
    };
    (@factory forgetting $build:path) => { $crate::component::Factory::Forgetting($build) };
    (@factory memory $build:path) => { $crate::component::Factory::Memory($build) };
    (@factory scheduler $build:path) => { $crate::component::Factory::Scheduler($build) };
    (@factory model $build:path) => { $crate::component::Factory::Model($build) };
    (@factory dataset $build:path) => { $crate::component::Factory::Dataset($build) };
    (@ $variant:ident $name:literal, $summary:literal, $params:ty, $build:path) => {
        $crate::component::Registration {
            name: $name,
            summary: $summary,
            defaults: $crate::component::defaults_table::<$params>,
            factory: $crate::component::Factory::$variant($build),
        }
    };
}
