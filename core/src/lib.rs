//! # engram-core
//!
//! The core of engram, a framework for training one model on a sequence of tasks when
//! accelerator memory is tight and catastrophic forgetting is the enemy.
//!
//! - [`strategy`]: the three traits — [`ForgettingStrategy`](strategy::ForgettingStrategy)
//!   (what is learned), [`MemoryStrategy`](strategy::MemoryStrategy) (how a step fits in
//!   memory), [`Scheduler`](strategy::Scheduler) (when and how strongly) — and the contexts
//!   the trainer hands them;
//! - [`registry`]: named strategy factories, filled through `inventory` (built-ins) and
//!   [`plugin`] (shared libraries loaded at run time, checked before any of their code runs);
//! - [`config`]: the TOML experiment file, decoded with positions for every error;
//! - [`data`]: IDX datasets and continual-learning scenarios;
//! - [`model`]: an object-safe model made of blocks that is still a Burn module;
//! - [`train`]: the continual trainer, metrics, memory accounting and report.
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
