//! # engram-core
//!
//! The core of engram, a framework for training one model on a sequence of tasks when
//! accelerator memory is tight and catastrophic forgetting is the enemy.
//!
//! ## Layers
//!
//! Each layer uses only the layers above it:
//!
//! ```text
//! error, fsutil, rng, alloc, device      leaves: the error enum, atomic writes, seeded streams,
//!                                        the counting allocator, device selection
//! config/   mod (schema) · spans · overrides · checks · params
//!                                        the experiment file, positions in every error
//! model/    mod (Block, Model, InputShape) · bridge · mlp · cnn · vit
//! data/     idx · dataset · stream       datasets (Dataset, its shape and classes) and scenarios
//! strategy/ mod (the three traits and their contexts) · standard (the plain step)
//! component Kind (forgetting, memory, scheduler, model, dataset), Factory, Registration
//! plugin    the ABI declaration, the loader's checks, Guarded (panics contained)
//! registry  Registry: built-in lists and plugins' registrations, lookups with positions
//! train/    manifest (run.json) · checkpoint · memory · metrics · report
//!           trainer/ prepare · step · evaluate · mod (the loop) · resume · rundir · export
//! ```
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
