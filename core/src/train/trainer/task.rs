//! One task of the loop: begin it (the optimiser reset and every `before_task` hook), train
//! its epochs, end it (the weights at its end and every `after_task` hook).

use super::*;
use crate::train::observer::RunEvent;
use state::RunState;

/// One task as the loop runs it.
pub(super) struct Task {
    /// What the strategies are told about it.
    pub(super) info: TaskInfo,
    /// The run at the task's start, kept when a scheduler may roll the task back (and the
    /// start was not already behind, as when resuming mid-task).
    pub(super) start: Option<Checkpoint>,
}

/// The training phase of one task in progress: its clock and its memory meter (its progress
/// is told to the run's observers, the terminal's bar among them: `publish.rs`).
pub(super) struct TrainPhase {
    /// Training time not yet added to the timings starts here.
    pub(super) clock: Instant,
    /// The phase's memory peak.
    pub(super) meter: PhaseMeter,
    /// Steps the task takes over all its epochs.
    pub(super) steps_per_task: usize,
}

impl RunState<'_> {
    /// What the strategies are told about task `round`: its classes and training rows (those
    /// of every task in a joint run).
    fn task_info(&self, round: usize) -> TaskInfo {
        let (stream, joint) = (&self.p.stream, self.c.train.joint);
        TaskInfo {
            index: round,
            num_tasks: stream.len(),
            classes: if joint {
                stream
                    .tasks
                    .iter()
                    .flat_map(|t| t.classes.clone())
                    .collect()
            } else {
                stream.tasks[round].classes.clone()
            },
            train_samples: if joint {
                stream.tasks.iter().map(|t| t.train.len()).sum()
            } else {
                stream.tasks[round].train.len()
            },
            joint,
        }
    }

    /// Begins task `pr.at.round`: keeps its start for a rollback, then (unless a resumed run
    /// already did) resets the optimiser when configured and runs the schedulers' and the
    /// forgetting strategies' `before_task` hooks.
    ///
    /// # Errors
    /// A strategy's error; a strategy whose state cannot be captured.
    pub(super) fn begin_task(&mut self) -> Result<Task> {
        let info = self.task_info(self.pr.at.round);
        // The state at the start of the task, for an anomaly rollback.
        let start = if self.pr.at.before_task_done || !self.rollback_policy {
            None
        } else {
            Some(snapshot(self.p, &self.model, &self.optim, self.pr)?)
        };
        if !self.pr.at.before_task_done {
            if self.c.optimizer.reset_per_task && info.index > 0 {
                self.optim = build_optimizer(&self.p.cfg);
            }
            for s in self.p.schedulers.iter_mut() {
                s.before_task(&info);
            }
            let p = &mut *self.p;
            let mut tcx = TaskContext {
                model: &mut self.model,
                device: &self.ad,
                task: &info,
                stream: &p.stream,
                seed: self.c.run.seed,
                final_train_loss: 0.0,
            };
            each_forgetting(&mut p.forgetting, (), |f, ()| f.before_task(&mut tcx))?;
            for m in p.memory.iter_mut() {
                m.before_task(&info);
            }
            self.pr.at.before_task_done = true;
            self.pr.record.task_train = PhaseMemory::default();
            self.pr.record.task_step_peak = 0;
        }
        self.leaks.start_task(info.index);
        Ok(Task { info, start })
    }

    /// Trains the task `info` from `pr.at` on: its remaining epochs, each its remaining
    /// batches, one [`RunState::step`] each; then adds the phase's time and memory to the
    /// record.
    ///
    /// # Errors
    /// As [`RunState::step`].
    pub(super) fn train_task(&mut self, info: &TaskInfo) -> Result<()> {
        let (epochs, batch_size, seed) = (
            self.c.train.epochs,
            self.c.train.batch_size,
            self.c.run.seed,
        );
        let steps_per_task = info.train_samples.div_ceil(batch_size) * epochs;
        self.notify_task_start(info, steps_per_task);
        let clock = Instant::now();
        let mut phase = TrainPhase {
            clock,
            meter: PhaseMeter::start(),
            steps_per_task,
        };
        while self.pr.at.epoch < epochs {
            let epoch = self.pr.at.epoch;
            let order = if info.joint {
                self.p.stream.joint_order(epoch, seed)
            } else {
                self.p.stream.epoch_order(info.index, epoch, seed)
            };
            for chunk in order.chunks(batch_size).skip(self.pr.at.chunk) {
                self.step(&mut phase, info, chunk)?;
            }
            self.end_epoch();
            self.publish_logs()?;
        }
        self.end_train_phase(phase);
        Ok(())
    }

    /// Closes an epoch: the logging window's last row, the epoch's mean loss, the next epoch.
    fn end_epoch(&mut self) {
        let pr = &mut *self.pr;
        if pr.losses.window.steps > 0 {
            pr.flush_window(
                pr.at.step_in_task - 1,
                pr.at.global_step - 1,
                pr.losses.last_lr,
            );
        }
        pr.losses.last_epoch_loss = pr.losses.epoch_loss.mean();
        pr.losses.epoch_loss = checkpoint::LossSum::default();
        pr.at.epoch += 1;
        pr.at.chunk = 0;
    }

    /// Adds the finished training phase to the record: its time, its memory peak and its
    /// steps' own peak, the task's final loss.
    fn end_train_phase(&mut self, phase: TrainPhase) {
        let rec = &mut self.pr.record;
        let train_s = phase.clock.elapsed().as_secs_f64();
        rec.timings.train_s += train_s;
        rec.timings.per_task_train_s.push(train_s);
        phase.meter.finish(&self.inner, &mut rec.task_train);
        rec.memory
            .per_task_train_peak_bytes
            .push(rec.task_train.peak_bytes);
        rec.memory.train.peak_bytes = rec.memory.train.peak_bytes.max(rec.task_train.peak_bytes);
        rec.memory.per_task_step_peak_bytes.push(rec.task_step_peak);
        rec.memory.step_peak_bytes = rec.memory.step_peak_bytes.max(rec.task_step_peak);
        rec.memory.train.end_bytes = rec.task_train.end_bytes;
        rec.counters.final_loss.push(self.pr.losses.last_epoch_loss);
        self.notify(RunEvent::TaskEnd {
            task: self.pr.at.round,
        });
    }

    /// Ends the task `info`: the forgetting strategies' weights at its end
    /// (`task_end_weights`), then their `after_task` hooks (Fisher passes, buffer updates).
    ///
    /// # Errors
    /// A strategy's error.
    pub(super) fn end_task(&mut self, info: &TaskInfo) -> Result<()> {
        let ta = Instant::now();
        let meter = PhaseMeter::start();
        let model = self.take_model();
        let p = &mut *self.p;
        let mut model =
            each_forgetting(&mut p.forgetting, model, |f, m| f.task_end_weights(m, info))?;
        for s in p.memory.iter_mut() {
            model = s.task_end_model(model, info)?;
        }
        let mut tcx = TaskContext {
            model: &mut model,
            device: &self.ad,
            task: info,
            stream: &p.stream,
            seed: self.c.run.seed,
            final_train_loss: self.pr.losses.last_epoch_loss,
        };
        each_forgetting(&mut p.forgetting, (), |f, ()| f.after_task(&mut tcx))?;
        self.model = model;
        meter.finish(&self.inner, &mut self.pr.record.memory.after_task);
        self.pr.record.timings.after_task_s += ta.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Records what a training step of task `task` added to memory (`added` bytes above the
/// bytes in use before it, [`memory::PeakWindow`]) into the task's step peak, then each memory
/// strategy's warnings ([`MemoryStrategy::take_warnings`]): on standard error and as `memory`
/// events.
pub(super) fn note_step_memory(
    record: &mut checkpoint::Record,
    strategies: &mut [Box<dyn MemoryStrategy>],
    added: u64,
    task: usize,
) {
    record.task_step_peak = record.task_step_peak.max(added);
    for s in strategies.iter_mut() {
        for message in s.take_warnings() {
            eprintln!("warning: {}: {message}", s.name());
            record.events.push(Event {
                task,
                kind: EventKind::Memory,
                message: format!("{}: {message}", s.name()),
            });
        }
    }
}
