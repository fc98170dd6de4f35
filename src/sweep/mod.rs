//! Sweeps: one TOML file that names base configs and the keys to vary, expanded into a grid of
//! runs with stable names, run here N at a time ([`local`]) or as one Slurm job array
//! ([`slurm`]), and aggregated into one table ([`aggregate`]).
//!
//! Why a grid of *processes*: every run of a grid is an ordinary `engram run` (or `engram
//! resume`) in a child process, writing its own run directory under the sweep's directory.
//! Burn keeps process-global state (the autodiff graph, the RNG), so runs in one process could
//! not run side by side; a child process also makes a failed or killed run cost that run only,
//! and lets a Slurm array task run exactly the same command as a local sweep. Resuming a sweep
//! is therefore resuming its runs: a run with `report.json` is finished and skipped, one with
//! checkpoints is resumed, any other is started.
//!
//! The sweep's directory (`DIR`):
//!
//! ```text
//! DIR/grid.json            the expanded grid (written once; a later sweep must agree with it)
//! DIR/sweep.toml           a copy of the sweep file
//! DIR/<cell>/seed-<N>/     one run directory per run (report.json, checkpoints, ...)
//! DIR/state/<run>.json     what happened to each run (done, failed, interrupted; exit code)
//! DIR/state/<run>.lock     held (flock) by the process executing the run
//! DIR/logs/<run>.log       the run's standard output and error
//! DIR/slurm/               the job-array script, job ids and Slurm's own output files
//! DIR/sweep.json, sweep.csv, plots/   written by `engram sweep report`
//! ```

//!
//! The modules, each reading only those before it (no circle): [`resources`] (the Slurm
//! resources of `[sweep.slurm]` and their check) → [`grid`] (the parsed [`Sweep`], its
//! expansion into runs and the grid manifest) → [`file`] (the sweep file, parsed into a
//! [`Sweep`]) → [`exec`] (one run as a child process, its state and lock) → [`local`] and
//! [`slurm`] (running the grid here, or as a job array) → [`aggregate`] (the table of a
//! sweep's runs) → [`suite`] (the benchmark suite's tables from `sweep.json`).

pub mod aggregate;
pub mod exec;
pub mod file;
pub mod grid;
pub mod local;
pub mod resources;
pub mod slurm;
pub mod suite;
pub mod tune;

pub use grid::{GridRun, Manifest, Sweep};
