//! What the loop tells its observers ([`crate::train::observer`]): the progress bar's, the
//! library user's and `metrics.jsonl`'s events, published from what the run has recorded
//! (`steps.csv`'s rows, the accuracy matrix's cells) so that the log and the record never
//! disagree, even after a rollback or a resume.

use super::*;
use crate::train::observer::{MetricsLog, ProgressBar, RunEvent, SharedObserver, shared};
use state::RunState;

/// The observers of a run in progress and how much of its record they have been told.
pub(super) struct Publisher {
    /// The progress bar (when shown) and the program's observers, in that order.
    observers: Vec<SharedObserver>,
    /// `OUT/metrics.jsonl`, opened by [`RunState::open_metrics_log`].
    log: Option<MetricsLog>,
    /// `steps.csv` rows published.
    logs: usize,
    /// Accuracy cells published (the initial model's, then the matrix's rows').
    evals: usize,
    /// When the last logged window was published, or the task's training (re)started.
    clock: Instant,
}

impl Publisher {
    /// The observers of a run: the terminal's bar when `progress`, then `extra`.
    pub(super) fn new(progress: bool, extra: &[SharedObserver]) -> Self {
        let mut observers = Vec::new();
        if progress {
            observers.push(shared(ProgressBar::default()));
        }
        observers.extend(extra.iter().cloned());
        Self {
            observers,
            log: None,
            logs: 0,
            evals: 0,
            clock: Instant::now(),
        }
    }

    /// The same observers without the log (to tell them the end once the run is gone).
    pub(super) fn observers_only(&self) -> Self {
        Self::new(false, &self.observers)
    }

    /// Hands `event` to every observer (not to the log: see [`Publisher::log_and_notify`]).
    fn notify(&self, event: &RunEvent) {
        for o in &self.observers {
            // An observer that panicked while holding its lock still hears the rest.
            let mut o = o.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            o.on_event(event);
        }
    }

    /// Writes `event` into `metrics.jsonl`, then hands it to every observer.
    ///
    /// # Errors
    /// [`Error::Io`] when the log cannot be written.
    fn log_and_notify(&mut self, event: &RunEvent) -> Result<()> {
        if let Some(log) = &mut self.log {
            log.write(event)?;
        }
        self.notify(event);
        Ok(())
    }

    /// The end of the loop (`ok`: it finished), to every observer.
    pub(super) fn end(&self, ok: bool) {
        self.notify(&RunEvent::End { ok });
    }
}

/// The evaluated cells of `r` in the order they were evaluated: the initial model's
/// (`after_task` `None`), then each row's, as `(after_task, task, accuracy, task-IL accuracy)`.
fn cells(r: &checkpoint::Results) -> Vec<(Option<usize>, usize, f64, Option<f64>)> {
    let til = |m: &[Option<f64>], j: usize| m.get(j).copied().flatten();
    let mut out: Vec<_> = r
        .baseline
        .iter()
        .enumerate()
        .map(|(j, &a)| (None, j, a, r.task_il_baseline.get(j).copied()))
        .collect();
    for (i, row) in r.matrix.iter().enumerate() {
        let til_row = r.task_il_matrix.get(i).map_or(&[][..], Vec::as_slice);
        for (j, a) in row.iter().enumerate() {
            if let Some(a) = *a {
                out.push((Some(i), j, a, til(til_row, j)));
            }
        }
    }
    out
}

impl RunState<'_> {
    /// Opens `OUT/metrics.jsonl`, cut back to what the run has recorded so far (empty for a
    /// new run), and counts that as published.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read or written.
    pub(super) fn open_metrics_log(&mut self) -> Result<()> {
        let (logs, evals) = (self.pr.record.logs.len(), cells(&self.pr.results).len());
        let publisher = &mut self.publisher;
        publisher.log = None;
        publisher.log = Some(MetricsLog::open(&self.opts.out, logs, evals)?);
        (publisher.logs, publisher.evals) = (logs, evals);
        Ok(())
    }

    /// Hands `event` to every observer.
    pub(super) fn notify(&self, event: RunEvent) {
        self.publisher.notify(&event);
    }

    /// The start of task `info`'s training (`steps` steps, `pr.at.step_in_task` taken).
    pub(super) fn notify_task_start(&mut self, info: &TaskInfo, steps: usize) {
        self.publisher.clock = Instant::now();
        self.notify(RunEvent::TaskStart {
            task: info.index,
            tasks: self.rounds(),
            steps,
            done: self.pr.at.step_in_task,
            joint: info.joint,
        });
    }

    /// After a step counted ([`state::RunState::step`]) with `loss` and `lr`: the step, then
    /// the logged windows not yet published.
    ///
    /// # Errors
    /// [`Error::Io`] when `metrics.jsonl` cannot be written.
    pub(super) fn publish_step(&mut self, loss: f64, lr: f64) -> Result<()> {
        self.notify(RunEvent::Step {
            step: self.pr.at.global_step,
            task: self.pr.at.round,
            epoch: self.pr.at.epoch,
            step_in_task: self.pr.at.step_in_task,
            loss,
            lr,
        });
        self.publish_logs()
    }

    /// The `steps.csv` rows not yet published, each as a `train` line and event; when the run
    /// went back (a rollback or a restart restored an earlier state), the log is cut back to
    /// it first.
    ///
    /// # Errors
    /// [`Error::Io`] when `metrics.jsonl` cannot be written.
    pub(super) fn publish_logs(&mut self) -> Result<()> {
        let n = self.pr.record.logs.len();
        if self.publisher.logs > n || self.publisher.evals > cells(&self.pr.results).len() {
            self.open_metrics_log()?;
        }
        while self.publisher.logs < n {
            let l = &self.pr.record.logs[self.publisher.logs];
            let secs = self.publisher.clock.elapsed().as_secs_f64();
            let event = RunEvent::Train {
                step: l.global_step,
                task: l.task,
                epoch: l.epoch,
                step_in_task: l.step,
                loss: l.loss,
                lr: l.lr,
                samples: l.samples,
                samples_per_s: if secs > 0.0 {
                    l.samples as f64 / secs
                } else {
                    0.0
                },
            };
            self.publisher.log_and_notify(&event)?;
            self.publisher.logs += 1;
            self.publisher.clock = Instant::now();
        }
        Ok(())
    }

    /// The accuracy cells not yet published (after the initial model's row or a row of the
    /// matrix), each as an `eval` line and event, after any logged window still unpublished.
    ///
    /// # Errors
    /// [`Error::Io`] when `metrics.jsonl` cannot be written.
    pub(super) fn publish_evals(&mut self) -> Result<()> {
        self.publish_logs()?;
        let all = cells(&self.pr.results);
        for &(after_task, task, accuracy, task_il_accuracy) in &all[self.publisher.evals..] {
            let event = RunEvent::Eval {
                step: self.pr.at.global_step,
                after_task,
                task,
                accuracy,
                task_il_accuracy,
            };
            self.publisher.log_and_notify(&event)?;
        }
        self.publisher.evals = all.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_come_in_evaluation_order_and_skip_unevaluated_ones() {
        let r = checkpoint::Results {
            baseline: vec![0.1, 0.2],
            task_il_baseline: vec![0.5, 0.6],
            matrix: vec![vec![Some(0.9), None], vec![Some(0.4), Some(0.8)]],
            task_il_matrix: vec![vec![Some(0.95), None], vec![Some(0.7), Some(0.85)]],
            ..checkpoint::Results::default()
        };
        assert_eq!(
            cells(&r),
            [
                (None, 0, 0.1, Some(0.5)),
                (None, 1, 0.2, Some(0.6)),
                (Some(0), 0, 0.9, Some(0.95)),
                (Some(1), 0, 0.4, Some(0.7)),
                (Some(1), 1, 0.8, Some(0.85)),
            ]
        );
    }
}
