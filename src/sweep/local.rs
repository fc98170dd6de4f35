//! `engram sweep run`: the grid on this machine, `jobs` runs at a time.

use super::exec::{self, Outcome, Started, Status};
use super::grid::Manifest;
use engram_core::{Error, Result};
use std::path::Path;
use std::sync::atomic::Ordering;

/// How a local sweep ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Runs of the grid.
    pub total: usize,
    /// Runs that had a report before this sweep started (skipped).
    pub skipped: usize,
    /// Runs that finished now.
    pub finished: usize,
    /// Runs that failed now (name, the last error line).
    pub failed: Vec<(String, String)>,
    /// Runs another process was executing (their lock was held).
    pub busy: Vec<String>,
    /// Runs left unfinished by an interruption (Ctrl-C).
    pub interrupted: usize,
}

/// The default number of threads per run: the machine's cores shared among `jobs` runs (at
/// least 1), so that `jobs × threads ≤ cores`.
pub fn default_threads(jobs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / jobs.max(1)).max(1)
}

/// Runs every unfinished run of `manifest` under `dir`, at most `jobs` at a time, each with
/// `threads` threads, in grid order: finished runs are skipped, interrupted ones resumed from
/// their checkpoints, and a failed run does not stop the others. Prints one line per run as
/// it ends (`[ 3/12] done  NAME  ACC 0.7123  12.3 s`) unless `quiet`. A Ctrl-C (the trainer's
/// interruption flag) stops launching runs and waits for the running ones, which write a
/// checkpoint and stop.
///
/// # Errors
/// [`Error::Io`] when a run's lock, log or state cannot be written or its process not
/// started; [`Error::Interrupted`] after a Ctrl-C. Failed runs are not errors here: they are
/// listed in the [`Summary`].
pub fn run(
    exe: &Path,
    dir: &Path,
    manifest: &Manifest,
    jobs: usize,
    threads: usize,
    quiet: bool,
) -> Result<Summary> {
    let total = manifest.runs.len();
    let mut summary = Summary {
        total,
        ..Summary::default()
    };
    let mut queue: std::collections::VecDeque<usize> = (0..total).collect();
    let mut running: Vec<(usize, Box<Started>)> = Vec::new();
    let width = total.to_string().len();
    let interrupted = || engram_core::train::trainer::INTERRUPTED.load(Ordering::SeqCst);
    loop {
        while running.len() < jobs.max(1) && !interrupted() {
            let Some(i) = queue.pop_front() else { break };
            let run = &manifest.runs[i];
            match exec::start(exe, dir, manifest, run, threads)? {
                Outcome::Finished => summary.skipped += 1,
                Outcome::Busy => summary.busy.push(run.name.clone()),
                Outcome::Started(s) => running.push((i, s)),
            }
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        if interrupted() {
            for (_, s) in running.iter_mut() {
                s.interrupt();
            }
        }
        let mut k = 0;
        while k < running.len() {
            let Some(status) = running[k].1.poll()? else {
                k += 1;
                continue;
            };
            let (i, s) = running.swap_remove(k);
            match status {
                Status::Done => summary.finished += 1,
                Status::Failed => summary.failed.push((
                    s.run.name.clone(),
                    s.error().unwrap_or("(no output)").to_string(),
                )),
                _ => summary.interrupted += 1,
            }
            if !quiet {
                println!("{}", line(i, total, width, &s, status, dir));
            }
        }
    }
    if interrupted() {
        summary.interrupted += queue.len();
        return Err(Error::Interrupted(format!(
            "sweep stopped with {} of {total} runs unfinished (their checkpoints are kept)",
            summary.interrupted
        )));
    }
    Ok(summary)
}

/// `[ 3/12] done    NAME  ACC 0.7123  12.3 s (resumed)`.
fn line(i: usize, total: usize, width: usize, s: &Started, status: Status, dir: &Path) -> String {
    let mut l = format!(
        "[{:>width$}/{total}] {:<11} {}",
        i + 1,
        status.word(),
        s.run.name
    );
    match status {
        Status::Done => {
            if let Ok(r) = crate::report::load_report(&dir.join(&s.run.name))
                && let Some(acc) = r.metrics.acc
            {
                l.push_str(&format!("  ACC {acc:.4}"));
            }
        }
        Status::Failed => l.push_str(&format!(
            "  exit {}: {} (log: {})",
            s.exit_code().map_or("?".into(), |c| c.to_string()),
            s.error().unwrap_or("(no output)"),
            s.paths.log.display()
        )),
        _ => {}
    }
    l.push_str(&format!("  {:.1} s", s.elapsed()));
    if s.verb == "resume" {
        l.push_str(" (resumed)");
    }
    l
}
