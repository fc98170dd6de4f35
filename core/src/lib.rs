//! # engram-core
//!
//! The core of engram, a framework for training one model on a sequence of tasks when
//! accelerator memory is tight and catastrophic forgetting is the enemy.
//!
//! ## Layers
//!
//! Each layer uses only itself and the layers above it (checked by a test, `layers.rs`, that
//! reads every `crate::…` path of `core/src`):
//!
//! ```text
//! error, fsutil, rng, alloc, device, threads
//!                                        leaves: the error enum, atomic writes, seeded streams,
//!                                        the counting allocator (HeapStats), device selection
//! config/   mod (schema, InitLayout) · spans · overrides · checks · params
//!                                        the experiment file, positions in every error
//! data/     shape (InputShape) · dataset · idx · format/ · stream · transform
//!                                        datasets (Dataset, its shape and classes), readers,
//!                                        `[data]`'s shape and normalisation, scenarios
//! gguf/     read · dequant · tokenizer    llama.cpp's model files (data's layer: a tokenizer
//!                                        for text data, weights for the llama model)
//! model/    mod (Model, ModelContext) · activation · block · params · bridge · init
//!           · mlp · cnn · vit · bert · llama  an object-safe model of blocks that is a Burn module
//! strategy/ mod (the three traits, their contexts, BuildContext) · standard (the plain step)
//! component Kind, Factory, Registration, `component!` (a built-in's one declaration)
//! plugin    the ABI declaration, the loader's checks, Guarded (panics contained)
//! registry  Registry: built-in lists and plugins' registrations, lookups with positions;
//!           registry/data: reading `[data]` (a format or dataset, `[data.options]`, transforms)
//! train/    manifest (run.json) · checkpoint · memory · metrics · report
//!           trainer/ prepare · step · evaluate · mod (the loop) · resume · rundir · export
//! ```
//!
//! One cycle is inherent and allowed: a component and its kinds. `component`'s factories name
//! what they build (`Model`, `Dataset`, the strategy traits), and every built-in model,
//! dataset, format and strategy declares its own registration in its file (one declaration a
//! component), so `data/`, `model/` and `strategy/` name `component` (its `Registration` and
//! macros) and nothing else below them.
//!
//! - [`strategy`]: the three traits — [`ForgettingStrategy`](strategy::ForgettingStrategy)
//!   (what is learned), [`MemoryStrategy`](strategy::MemoryStrategy) (how a step fits in
//!   memory), [`Scheduler`](strategy::Scheduler) (when and how strongly) — and the contexts
//!   the trainer hands them;
//! - [`registry`]: named components of five kinds — the three strategy kinds, models and
//!   datasets — from explicit `BUILTINS` lists and [`plugin`]s (shared libraries loaded at run
//!   time, checked before any of their code runs);
//! - [`config`]: the TOML experiment file, decoded with positions for every error;
//! - [`data`]: datasets (IDX built-ins, registered) and continual-learning scenarios;
//! - [`model`]: an object-safe model made of blocks that is still a Burn module; `mlp`, `cnn`
//!   and `vit` are registered models, and any Burn module becomes a block;
//! - [`train`]: the continual trainer, metrics, memory accounting, checkpoints and report.
//!
//! ## The continual loop
//!
//! ```text
//! for task t in stream:
//!     schedulers/forgetting: before_task
//!     for epoch, for batch:
//!         batch   <- forgetting strategies may mix in replayed samples
//!         loss    <- task loss + Σ strategy penalties
//!         grads   <- memory strategies run forward/backward
//!         clip, optimizer step (trainer)
//!     forgetting: after_task (Fisher, buffer update)
//!     evaluate every task without an autodiff graph -> row t of the accuracy matrix
//!     schedulers: anomaly check
//! ```

pub mod alloc;
pub mod component;
pub mod config;
pub mod data;
pub mod device;
pub mod error;
pub mod fsutil;
pub mod gguf;
#[cfg(test)]
mod layers;
pub mod model;
pub mod plugin;
pub mod registry;
pub mod rng;
pub mod strategy;
pub mod threads;
pub mod train;

pub use burn;
pub use error::{Error, Result};

/// The Burn version engram is built against, as a literal (for `concat!`).
#[doc(hidden)]
#[macro_export]
macro_rules! burn_version {
    () => {
        "0.22.1"
    };
}

/// The Burn version engram is built against.
pub const BURN_VERSION: &str = burn_version!();
