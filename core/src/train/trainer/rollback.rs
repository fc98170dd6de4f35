//! The anomaly rollback: after a row of the accuracy matrix a scheduler may judge the task
//! harmful ([`Scheduler::after_evaluation`]); the run then goes back to the task's start
//! (model, optimiser, every strategy's state, the progress) and trains it again with adjusted
//! controls, until the scheduler's retries are spent.

use super::*;
use state::RunState;

/// A scheduler's request to roll the task back: who asked, why, and how to adjust the
/// controls of the retry.
struct Request {
    /// The scheduler that asked.
    by: String,
    /// Its reason.
    reason: String,
    /// Factor on the learning rate of the retry.
    lr_factor: f64,
    /// Factor on the regularisation scale.
    reg_factor: f64,
    /// Added to the replay ratio.
    replay_step: f64,
    /// Retries allowed for the task.
    max_retries: usize,
}

impl RunState<'_> {
    /// Asks every scheduler about the row just evaluated; the first that asks for a rollback
    /// is followed when the task's `start` was kept and retries are left: the run is back at
    /// the task's start (returns `true`: train it again). With the retries spent, an
    /// `anomaly` event is recorded and the run goes on (returns `false`).
    ///
    /// # Errors
    /// As [`Prepared::restore`].
    pub(super) fn roll_back_if_asked(&mut self, start: Option<Checkpoint>) -> Result<bool> {
        let round = self.pr.at.round;
        let mut asked = None;
        for s in self.p.schedulers.iter_mut() {
            if let AnomalyAction::Rollback {
                reason,
                reg_factor,
                replay_step,
                lr_factor,
                max_retries,
            } = s.after_evaluation(round, &self.pr.results.matrix)
            {
                asked = asked.or(Some(Request {
                    by: s.name().to_string(),
                    reason,
                    lr_factor,
                    reg_factor,
                    replay_step,
                    max_retries,
                }));
            }
        }
        let Some(request) = asked else {
            return Ok(false);
        };
        match start {
            Some(ck) if self.pr.retry.retries < request.max_retries => {
                self.roll_back(ck, request)?;
                Ok(true)
            }
            _ => {
                self.pr.record.events.push(Event {
                    task: round,
                    kind: EventKind::Anomaly,
                    message: format!(
                        "{}: {}; retries exhausted, continuing",
                        request.by, request.reason
                    ),
                });
                Ok(false)
            }
        }
    }

    /// Restores the task's start `ck` with the controls adjusted as `request` says, keeping
    /// what the run has spent and recorded since: the events (plus a `rollback` event), the
    /// timings, the steps and samples counted.
    fn roll_back(&mut self, ck: Checkpoint, request: Request) -> Result<()> {
        let round = self.pr.at.round;
        let retries = self.pr.retry.retries + 1;
        let was = self.pr.retry.adjust;
        let adjust = checkpoint::Adjust {
            lr_factor: was.lr_factor * request.lr_factor,
            reg_factor: was.reg_factor * request.reg_factor,
            replay_delta: was.replay_delta + request.replay_step,
        };
        let mut events = self.pr.record.events.clone();
        events.push(Event {
            task: round,
            kind: EventKind::Rollback,
            message: format!(
                "{}: {}; restored the start of task {round} and retrying (retry {retries} of {}) with learning rate ×{:.3}, regularisation ×{:.3}, replay ratio +{:.2}",
                request.by,
                request.reason,
                request.max_retries,
                adjust.lr_factor,
                adjust.reg_factor,
                adjust.replay_delta
            ),
        });
        let (model, optim, mut restored) = self.p.restore(ck, &self.ad, &self.opts.out)?;
        self.model = model;
        self.optim = optim;
        restored.record.events = events;
        restored.retry = checkpoint::Retry {
            adjust,
            retries,
            ..self.pr.retry.clone()
        };
        restored.record.timings = self.pr.record.timings.clone();
        restored.record.counters.steps = self.pr.record.counters.steps;
        restored.record.counters.samples = self.pr.record.counters.samples;
        *self.pr = restored;
        Ok(())
    }
}
