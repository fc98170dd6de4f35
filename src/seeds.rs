//! Several seeds of one experiment (`engram run --seeds 0,1,2`, [`Experiment::run_seeds`]):
//! one run each in `OUT/seed-N/`, then `OUT/aggregate.json` with the mean ± std of every
//! metric over the seeds that finished and the list of those that failed.
//!
//! Every seed's manifest (`seed-N/run.json`, `seed-N/config.toml`) is written before any seed
//! trains, so that [`resume`] (`engram resume OUT`) can finish a killed multi-seed run, seeds
//! not yet started included. One diverging seed does not discard the others' runs; an
//! interruption (Ctrl-C) stops the whole run with its checkpoints kept.
//!
//! [`Experiment::run_seeds`]: crate::Experiment::run_seeds

use engram_core::config::LoadedConfig;
use engram_core::registry::Registry;
use engram_core::train::report::Report;
use engram_core::train::trainer::{self, Prepared, RunOptions};
use engram_core::{Error, Result};
use std::path::{Path, PathBuf};

/// What a front end hears while [`run`] or [`resume`] works through the seeds (the CLI prints
/// each event; a program may ignore them: `()` implements every method as nothing).
pub trait Observer {
    /// Seed `prepared.cfg.config.run.seed` is about to train into `dir`.
    fn starting(&mut self, _prepared: &Prepared, _dir: &Path) {}
    /// A seed's run finished with `report`.
    fn finished(&mut self, _report: &Report) {}
    /// Seed `seed` failed with `error`; the other seeds go on.
    fn failed(&mut self, _seed: u64, _error: &Error) {}
}

impl Observer for () {}

/// What the seeds of a run came to.
#[derive(Default)]
pub struct Outcome {
    /// The reports of the seeds that finished, in seed order.
    pub reports: Vec<Report>,
    /// The seeds that failed, with their errors, in seed order.
    pub failures: Vec<(u64, Error)>,
    /// `aggregate.json` as written (mean ± std over `reports`, the failures listed); `None`
    /// for a single-seed run, which has no aggregate.
    pub aggregate: Option<serde_json::Value>,
}

impl Outcome {
    /// The error of a run some of whose seeds failed (naming the first failed seed and how
    /// many others finished); `None` when every seed finished.
    pub fn error(&self) -> Option<Error> {
        self.failures
            .first()
            .map(|(seed, e)| failed(*seed, e, self.reports.len()))
    }
}

/// The error of a `--seeds` run whose seed `seed` failed with `e` while `done` seeds finished.
fn failed(seed: u64, e: &Error, done: usize) -> Error {
    if done == 0 {
        Error::Other(format!(
            "every seed failed (seed {seed}: {e}); the aggregate lists the failures"
        ))
    } else {
        Error::Other(format!(
            "seed {seed} failed ({e}); the aggregate covers the {done} other seed(s) and lists the failure"
        ))
    }
}

/// The run directory of seed `seed` inside the multi-seed output directory `out`.
pub fn seed_dir(out: &Path, seed: u64) -> PathBuf {
    out.join(format!("seed-{seed}"))
}

/// The configs of `config` (with `sets` applied) for each of `seeds` (`run.seed` set), checked
/// before anything is written.
///
/// # Errors
/// [`Error::ConfigFile`] when `seeds` repeats a seed; any error of [`LoadedConfig::load`].
pub fn configs(config: &Path, sets: &[String], seeds: &[u64]) -> Result<Vec<LoadedConfig>> {
    check_distinct(config, seeds)?;
    seeds
        .iter()
        .map(|s| {
            let mut sets = sets.to_vec();
            sets.push(format!("run.seed={s}"));
            LoadedConfig::load(config, &sets)
        })
        .collect()
}

/// Checks that `seeds` lists each seed once (`file`: the config the error names).
///
/// # Errors
/// [`Error::ConfigFile`] naming `file` when a seed repeats.
pub fn check_distinct(file: &Path, seeds: &[u64]) -> Result<()> {
    let mut distinct = seeds.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != seeds.len() {
        return Err(Error::ConfigFile {
            file: file.to_path_buf(),
            message: format!("--seeds {seeds:?} repeats a seed"),
            hint: Some("list each seed once, e.g. --seeds 0,1,2".into()),
        });
    }
    Ok(())
}

/// A run of one or several seeds, ready to start (see [`run`]).
pub struct Plan<'a> {
    /// One config per seed (several: a multi-seed run into `target/seed-N/`; one: a plain run
    /// into `target`).
    pub configs: Vec<LoadedConfig>,
    /// The first config, already prepared (its data and strategies built) to check it before
    /// anything was written; `None` to prepare it here.
    pub first: Option<Prepared>,
    /// The directory the run writes.
    pub target: PathBuf,
    /// Whether the trainer shows a progress bar.
    pub progress: bool,
    /// Builds a seed's run from its config, right before it trains ([`trainer::prepare`] with
    /// the registry, or a front end's version that places errors for its user).
    pub prepare: &'a mut dyn FnMut(LoadedConfig) -> Result<Prepared>,
}

/// Trains every seed of `plan` in turn and, for several seeds, writes `target/aggregate.json`.
///
/// # Errors
/// An interruption ([`Error::Interrupted`], checkpoints kept) at once; a failure to prepare a
/// later seed or to write a manifest or the aggregate. A failed seed of a multi-seed run is not
/// an error here: it is in [`Outcome::failures`] (and [`Outcome::error`]); the single seed of a
/// one-seed run that fails is.
pub fn run(plan: Plan, observer: &mut dyn Observer) -> Result<Outcome> {
    let Plan {
        configs,
        mut first,
        target,
        progress,
        prepare,
    } = plan;
    let multi = configs.len() > 1;
    let dirs: Vec<PathBuf> = configs
        .iter()
        .map(|c| {
            if multi {
                seed_dir(&target, c.config.run.seed)
            } else {
                target.clone()
            }
        })
        .collect();
    if multi {
        let plugins = first
            .as_ref()
            .map(|p| p.plugins.clone())
            .unwrap_or_default();
        for (cfg, dir) in configs.iter().zip(&dirs) {
            engram_core::train::manifest::RunManifest::write(dir, cfg, &plugins)?;
        }
    }
    let mut outcome = Outcome::default();
    for (cfg, dir) in configs.into_iter().zip(dirs) {
        let seed = cfg.config.run.seed;
        let p = match first.take() {
            Some(p) => p,
            None => prepare(cfg)?,
        };
        observer.starting(&p, &dir);
        match trainer::run(p, &RunOptions { out: dir, progress }) {
            Ok(report) => {
                observer.finished(&report);
                outcome.reports.push(report);
            }
            Err(e @ Error::Interrupted(_)) => return Err(e),
            Err(e) if multi => {
                observer.failed(seed, &e);
                outcome.failures.push((seed, e));
            }
            Err(e) => return Err(e),
        }
    }
    if multi {
        outcome.aggregate = Some(write_aggregate(
            &target,
            &outcome.reports,
            &outcome.failures,
        )?);
    }
    Ok(outcome)
}

/// The `seed-N` run directories of a multi-seed output directory (those with a
/// `config.toml`), by seed; empty for any other directory.
pub fn seed_dirs(out: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let seed = name.strip_prefix("seed-")?.parse().ok()?;
                    e.path()
                        .join("config.toml")
                        .is_file()
                        .then(|| (seed, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Finishes the multi-seed run in `out`: a finished seed's report is read, every other seed is
/// resumed from its checkpoints (or started, when it has none) on `device` (default: the
/// run's), then `out/aggregate.json` is written again.
///
/// # Errors
/// An interruption at once; a failure to write the aggregate. Failed seeds are in
/// [`Outcome::failures`].
pub fn resume(
    out: &Path,
    registry: &Registry,
    progress: bool,
    device: Option<&str>,
    observer: &mut dyn Observer,
) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    for (seed, dir) in seed_dirs(out) {
        let r = if engram_core::train::report::finished_run(&dir) {
            crate::report::load_report(&dir)
        } else {
            trainer::resume(&dir, registry, progress, device)
        };
        match r {
            Ok(r) => outcome.reports.push(r),
            Err(e @ Error::Interrupted(_)) => return Err(e),
            Err(e) => {
                observer.failed(seed, &e);
                outcome.failures.push((seed, e));
            }
        }
    }
    outcome.aggregate = Some(write_aggregate(out, &outcome.reports, &outcome.failures)?);
    Ok(outcome)
}

/// Writes `out/aggregate.json` (atomically): the seeds, the mean ± std of every metric over
/// `reports` ([`crate::summary::aggregate`]), the run directories and the failed seeds with
/// their errors; returns what it wrote.
///
/// # Errors
/// [`Error::Io`] when the file cannot be written.
pub fn write_aggregate(
    out: &Path,
    reports: &[Report],
    failures: &[(u64, Error)],
) -> Result<serde_json::Value> {
    let metrics: Vec<_> = reports.iter().map(|r| r.metrics.clone()).collect();
    let task_il: Vec<_> = reports
        .iter()
        .filter_map(|r| r.task_il_metrics.clone())
        .collect();
    let agg = serde_json::json!({
        "seeds": reports.iter().map(|r| r.seed).collect::<Vec<_>>(),
        "metrics": crate::summary::aggregate(&metrics, &task_il),
        "runs": reports.iter().map(|r| format!("seed-{}", r.seed)).collect::<Vec<_>>(),
        "failed": failures.iter().map(|(s, e)| serde_json::json!({"seed": s, "error": e.to_string()})).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec_pretty(&agg).map_err(|e| Error::Other(e.to_string()))?;
    engram_core::fsutil::write_atomic(&out.join("aggregate.json"), &bytes)?;
    Ok(agg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_seed_names_itself_and_the_others() {
        let mut o = Outcome::default();
        assert!(o.error().is_none());
        o.failures.push((3, Error::Other("diverged".into())));
        assert_eq!(
            o.error().unwrap().to_string(),
            "every seed failed (seed 3: diverged); the aggregate lists the failures"
        );
        assert_eq!(seed_dir(Path::new("o"), 7), Path::new("o/seed-7"));
    }

    #[test]
    fn seed_directories_need_their_config() {
        let d = tempfile::tempdir().unwrap();
        for s in ["seed-2", "seed-10", "seed-x", "other"] {
            std::fs::create_dir(d.path().join(s)).unwrap();
            std::fs::write(d.path().join(s).join("config.toml"), "").unwrap();
        }
        std::fs::create_dir(d.path().join("seed-5")).unwrap();
        let seeds: Vec<u64> = seed_dirs(d.path()).into_iter().map(|(s, _)| s).collect();
        assert_eq!(seeds, [2, 10]);
    }
}
