//! # engram
//!
//! Train one model on a sequence of tasks when accelerator memory is tight and catastrophic
//! forgetting is the enemy. This facade re-exports [`engram_core`] and links the built-in
//! strategies of [`engram_strategies`]; the `engram` binary is its command-line front end.
//!
//! ```no_run
//! use engram::core::config::LoadedConfig;
//! use engram::core::train::trainer::{prepare, run, RunOptions};
//!
//! let cfg = LoadedConfig::load("examples/split-fmnist.toml".as_ref(), &[]).unwrap();
//! let prepared = prepare(cfg, &engram::registry()).unwrap();
//! let report = run(prepared, &RunOptions { out: "runs/x".into(), progress: false }).unwrap();
//! println!("ACC {:?}", report.metrics.acc);
//! ```

pub mod bench;
pub mod experiment;
pub mod fetch;
pub mod outdir;
pub mod outpath;
pub mod report;
pub mod seeds;
pub mod summary;
pub mod sweep;

pub use engram_core as core;
pub use engram_strategies as strategies;
pub use experiment::Experiment;

/// The registry of every built-in component: engram-core's models and datasets plus the strategies crate's [`BUILTINS`](engram_strategies::BUILTINS).
pub fn registry() -> engram_core::registry::Registry {
    engram_core::registry::Registry::builtin().with(engram_strategies::BUILTINS)
}
