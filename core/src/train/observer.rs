//! What a run reports while it goes: [`RunEvent`]s handed to [`Observer`]s, and the two
//! observers engram itself has: the terminal's progress bar ([`ProgressBar`], what `engram
//! run` shows) and the JSON-lines metrics log ([`MetricsLog`], `OUT/metrics.jsonl`).
//!
//! A program that trains through the library passes its own observer
//! ([`crate::train::trainer::Prepared::observers`], or `engram::Experiment::observe`): a closure
//! `FnMut(&RunEvent)` is one. Events arrive on the training thread, in order, between steps;
//! an observer that blocks holds the run up.
//!
//! `metrics.jsonl` holds one JSON object a line, appended and flushed as the run goes: a
//! `"kind": "train"` line for every logged window (`log_every` steps; the `steps.csv` row plus
//! its throughput) and a `"kind": "eval"` line for every evaluated cell of the accuracy matrix
//! (`after_task` `null` for the initial model). Every line has `step`, the run's steps so far,
//! so the lines read as one time series (TensorBoard's and W&B's `step`). A resumed run first
//! cuts the file back to what its checkpoint had recorded, then appends: no line twice. A task
//! trained again (an anomaly rollback, a restart after a divergence) is cut back the same way,
//! so the file ends as `steps.csv` and the report do.

use crate::error::{Error, Result};
use serde::Serialize;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One thing that happened in a run, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RunEvent {
    /// A task's training starts: `steps` steps over all its epochs, `done` of them already
    /// taken (a resumed run). `tasks` is the number the loop trains (1 for a joint run).
    TaskStart {
        /// The task (round), from 0.
        task: usize,
        /// Tasks the run trains.
        tasks: usize,
        /// Steps the task takes over all its epochs.
        steps: usize,
        /// Steps of it already taken.
        done: usize,
        /// Whether this is the one round of a joint run.
        joint: bool,
    },
    /// One training step finished.
    Step {
        /// Steps the run has taken, this one included.
        step: usize,
        /// The task (round).
        task: usize,
        /// The epoch within the task.
        epoch: usize,
        /// Steps the task has taken, this one included.
        step_in_task: usize,
        /// The step's total loss (cross-entropy plus penalties).
        loss: f64,
        /// The step's learning rate.
        lr: f64,
    },
    /// A logged window of `log_every` steps (a `steps.csv` row), as `metrics.jsonl` writes it.
    Train {
        /// The run's step of the window's last step (0-based, as `steps.csv`'s `global_step`).
        step: usize,
        /// The task (round).
        task: usize,
        /// The epoch within the task.
        epoch: usize,
        /// The task's step of the window's last step (0-based).
        step_in_task: usize,
        /// Mean total loss over the window.
        loss: f64,
        /// Learning rate of the window's last step.
        lr: f64,
        /// Rows trained in the window (new plus replayed).
        samples: usize,
        /// Rows trained per second of wall time since the previous window (or since the
        /// task's training started in this process), evaluation excluded.
        samples_per_s: f64,
    },
    /// A task's training ended (its `after_task` hooks and evaluation follow).
    TaskEnd {
        /// The task (round).
        task: usize,
    },
    /// One cell of the accuracy matrix: task `task` evaluated after training `after_task`.
    Eval {
        /// The run's steps so far.
        step: usize,
        /// The task trained last; `None` (`null`) for the initial model.
        after_task: Option<usize>,
        /// The task evaluated.
        task: usize,
        /// Its accuracy, a fraction in `[0, 1]`.
        accuracy: f64,
        /// The same with the logits restricted to the task's classes (class-incremental
        /// runs only).
        #[serde(skip_serializing_if = "Option::is_none")]
        task_il_accuracy: Option<f64>,
    },
    /// The loop stopped: `ok` when it finished, false when it failed or was interrupted.
    End {
        /// Whether the run finished.
        ok: bool,
    },
}

/// Receives a run's [`RunEvent`]s. A closure `FnMut(&RunEvent) + Send` is one.
pub trait Observer {
    /// Called for each event, on the training thread.
    fn on_event(&mut self, event: &RunEvent);
}

impl<F: FnMut(&RunEvent)> Observer for F {
    fn on_event(&mut self, event: &RunEvent) {
        self(event)
    }
}

/// An observer shared between the program and the run.
pub type SharedObserver = Arc<Mutex<dyn Observer + Send>>;

/// Wraps `observer` for [`crate::train::trainer::Prepared::observers`].
pub fn shared(observer: impl Observer + Send + 'static) -> SharedObserver {
    Arc::new(Mutex::new(observer))
}

/// The terminal's progress bar, one per task (`engram run` shows it on a terminal).
#[derive(Default)]
pub struct ProgressBar {
    bar: Option<indicatif::ProgressBar>,
}

impl Observer for ProgressBar {
    fn on_event(&mut self, event: &RunEvent) {
        match *event {
            RunEvent::TaskStart {
                task,
                tasks,
                steps,
                done,
                joint,
            } => {
                if let Some(old) = self.bar.take() {
                    old.finish_and_clear();
                }
                let bar = indicatif::ProgressBar::new(steps as u64);
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{prefix:>10} [{bar:30}] {pos}/{len} steps {per_sec} {msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(if joint {
                    "joint".to_string()
                } else {
                    format!("task {}/{}", task + 1, tasks)
                });
                bar.set_position(done as u64);
                self.bar = Some(bar);
            }
            RunEvent::Step {
                step_in_task, loss, ..
            } => {
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                    if step_in_task.is_multiple_of(20) {
                        bar.set_message(format!("loss {loss:.4}"));
                    }
                }
            }
            RunEvent::TaskEnd { .. } | RunEvent::End { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
            }
            _ => {}
        }
    }
}

/// `OUT/metrics.jsonl` (see the module docs), open for appending.
pub struct MetricsLog {
    path: PathBuf,
    file: std::fs::File,
}

/// The file name of the metrics log in a run directory.
pub const METRICS_LOG: &str = "metrics.jsonl";

impl MetricsLog {
    /// Opens `out/metrics.jsonl` for appending after cutting it back to its first `train`
    /// train lines and first `evals` `"eval"` lines (what the run's state has recorded;
    /// `0, 0` for a new run, which starts the file empty). Lines of other kinds or that do not
    /// parse are dropped.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read or written.
    pub fn open(out: &Path, train: usize, evals: usize) -> Result<Self> {
        let path = out.join(METRICS_LOG);
        Self::cut(&path, train, evals)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Self { path, file })
    }

    /// Cuts the file at `path` back to its first `train` train lines and `evals` eval lines.
    fn cut(path: &Path, train: usize, evals: usize) -> Result<()> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(path, e)),
        };
        let (mut t, mut v) = (0, 0);
        let mut kept = String::new();
        for line in text.lines() {
            let kind = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|j| j["kind"].as_str().map(str::to_string));
            let keep = match kind.as_deref() {
                Some("train") => {
                    t += 1;
                    t <= train
                }
                Some("eval") => {
                    v += 1;
                    v <= evals
                }
                _ => false,
            };
            if keep {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        if kept.len() != text.len() {
            crate::fsutil::write_atomic(path, kept.as_bytes())?;
        }
        Ok(())
    }

    /// Appends `event` as one line and flushes it, when it is a `train` or `eval` event.
    ///
    /// # Errors
    /// [`Error::Io`] when the line cannot be written.
    pub fn write(&mut self, event: &RunEvent) -> Result<()> {
        if !matches!(event, RunEvent::Train { .. } | RunEvent::Eval { .. }) {
            return Ok(());
        }
        let mut line = serde_json::to_string(event).map_err(|e| Error::Other(e.to_string()))?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| Error::io(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(after_task: Option<usize>, task: usize) -> RunEvent {
        RunEvent::Eval {
            step: 7,
            after_task,
            task,
            accuracy: 0.5,
            task_il_accuracy: None,
        }
    }

    fn train(step: usize) -> RunEvent {
        RunEvent::Train {
            step,
            task: 0,
            epoch: 0,
            step_in_task: step,
            loss: 1.25,
            lr: 0.05,
            samples: 640,
            samples_per_s: 3200.0,
        }
    }

    #[test]
    fn lines_have_the_documented_shape_and_a_reopened_log_keeps_only_what_was_recorded() {
        let d = tempfile::tempdir().unwrap();
        let mut log = MetricsLog::open(d.path(), 0, 0).unwrap();
        for e in [eval(None, 0), train(9), train(19), eval(Some(0), 0)] {
            log.write(&e).unwrap();
        }
        log.write(&RunEvent::TaskEnd { task: 0 }).unwrap();
        let text = std::fs::read_to_string(d.path().join(METRICS_LOG)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"kind":"eval","step":7,"after_task":null,"task":0,"accuracy":0.5}"#
        );
        assert_eq!(
            lines[1],
            r#"{"kind":"train","step":9,"task":0,"epoch":0,"step_in_task":9,"loss":1.25,"lr":0.05,"samples":640,"samples_per_s":3200.0}"#
        );
        assert_eq!(lines.len(), 4, "{text}");
        drop(log);
        // A checkpoint that had recorded one logged window and the initial model's cell.
        let mut log = MetricsLog::open(d.path(), 1, 1).unwrap();
        log.write(&train(19)).unwrap();
        let text = std::fs::read_to_string(d.path().join(METRICS_LOG)).unwrap();
        let steps: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].clone())
            .collect();
        assert_eq!(steps, [7, 9, 19]);
        // A new run starts the file empty.
        drop(MetricsLog::open(d.path(), 0, 0).unwrap());
        assert_eq!(
            std::fs::read_to_string(d.path().join(METRICS_LOG)).unwrap(),
            ""
        );
    }

    #[test]
    fn a_closure_is_an_observer() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let obs = shared(move |e: &RunEvent| s.lock().unwrap().push(e.clone()));
        obs.lock().unwrap().on_event(&RunEvent::TaskEnd { task: 3 });
        assert_eq!(*seen.lock().unwrap(), [RunEvent::TaskEnd { task: 3 }]);
    }
}
