//! One training step of the loop ([`state::RunState::step`]: controls, batch, forward and
//! backward, update, hooks, bookkeeping), and what it computes with: cross-entropy per sample,
//! the loss the memory strategies backpropagate, global-norm clipping.

use super::*;

/// Cross-entropy of `logits` `[batch, classes]` against `batch.y`, per sample `[batch]`,
/// after adding the batch's logit mask.
pub fn per_sample_cross_entropy(logits: Tensor<2>, batch: &Batch) -> Tensor<1> {
    let logits = match &batch.logit_mask {
        Some(m) => logits + m.clone(),
        None => logits,
    };
    let logp = activation::log_softmax(logits, 1);
    let n = batch.y.dims()[0];
    logp.gather(1, batch.y.clone().reshape([n, 1]))
        .reshape([n])
        .neg()
}

/// Per-row loss of `logits` for `objective`, `[batch]`: cross-entropy of the batch's labels
/// ([`per_sample_cross_entropy`]) or, for a language model, each window's mean next-token NLL
/// ([`crate::train::lm::window_nll`]: `logits` are the per-token logits flattened,
/// `[batch, len · vocab]`, `vocab` = `model.num_classes`, against the window's own ids).
pub fn per_row_loss(
    objective: crate::config::Objective,
    model: &Model,
    logits: Tensor<2>,
    batch: &Batch,
) -> Tensor<1> {
    match (objective, &batch.x) {
        (crate::config::Objective::Lm, crate::data::input::Input::Ids(ids)) => {
            crate::train::lm::window_nll(logits, ids.clone(), model.num_classes)
        }
        _ => per_sample_cross_entropy(logits, batch),
    }
}

/// The loss of a training step: the task loss plus every strategy's penalty.
///
/// `task loss = mean_i L_i` when the batch has no weights, else `Σ_i w_i·L_i` (a strategy
/// that sets weights chooses their normalisation; replay's `every`/`weight` mode uses
/// `1/n_new` for new rows and `weight/n_memory` for memory rows), `L_i` the row's
/// [`per_row_loss`]: cross-entropy, or a window's mean next-token NLL under
/// `[train] objective = "lm"` (then the unweighted task loss is the token mean of the batch,
/// every window having as many predictions).
pub struct TrainLoss<'a> {
    /// The forgetting strategies (their penalties are added).
    pub forgetting: &'a [Box<dyn ForgettingStrategy>],
    /// The batch context the penalties see.
    pub cx: &'a BatchContext<'a>,
    /// What the run trains (`[train] objective`).
    pub objective: crate::config::Objective,
}

impl LossFn for TrainLoss<'_> {
    fn loss(&self, model: &Model, logits: Tensor<2>, batch: &Batch) -> (Tensor<1>, Tensor<1>) {
        let mut extra: Option<Tensor<1>> = None;
        for f in self.forgetting {
            if let Some(p) = f.logit_penalty(&logits, batch) {
                extra = Some(match extra {
                    Some(e) => e + p,
                    None => p,
                });
            }
        }
        let ce = per_row_loss(self.objective, model, logits, batch);
        let mut total = match &batch.weights {
            Some(w) => (ce.clone() * w.clone()).sum(),
            None => ce.clone().mean(),
        };
        for f in self.forgetting {
            if let Some(p) = f.penalty(model, self.cx) {
                total = total + p;
            }
        }
        if let Some(e) = extra {
            total = total + e;
        }
        (total, ce)
    }
}

/// Global L2 norm of all gradients (Pascanu et al. 2013): `sqrt(Σ_p ‖g_p‖²)`.
pub fn global_grad_norm(model: &Model, grads: &GradientsParams) -> f64 {
    model
        .flat_grads(grads)
        .into_iter()
        .map(|(_, g)| f64::from(g.powf_scalar(2.0).sum().into_scalar::<f32>()))
        .sum::<f64>()
        .sqrt()
}

/// Scales gradients by `min(1, max_norm / ‖g‖)` when the global norm exceeds `max_norm`.
/// Returns the norm before clipping.
pub fn clip_global_norm(
    model: &Model,
    grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, f64) {
    let norm = global_grad_norm(model, &grads);
    if norm <= max_norm || norm == 0.0 {
        return (grads, norm);
    }
    let scale = (max_norm / norm) as f32;
    let flat = model
        .flat_grads(&grads)
        .into_iter()
        .map(|(p, g)| (p.id, g.mul_scalar(scale)))
        .collect();
    (crate::model::unflatten_grads(model, flat), norm)
}

impl state::RunState<'_> {
    /// One training step on the rows `chunk` of task `info`, then its bookkeeping: the step
    /// counters, the running losses and `steps.csv`, the leak alarm, the progress bar, and a
    /// checkpoint when one is due or the run was interrupted.
    ///
    /// # Errors
    /// A strategy's error or divergence (located at the step), the leak alarm with
    /// `on_leak = "stop"`, [`Error::Interrupted`] after the checkpoint of an interrupted run.
    pub(super) fn step(
        &mut self,
        phase: &mut task::TrainPhase,
        info: &TaskInfo,
        chunk: &[SampleRef],
    ) -> Result<()> {
        let position = Position {
            task: info.index,
            num_tasks: self.p.stream.len(),
            epoch: self.pr.at.epoch,
            epochs: self.c.train.epochs,
            step_in_task: self.pr.at.step_in_task,
            steps_per_task: phase.steps_per_task,
            global_step: self.pr.at.global_step,
        };
        let controls = self.controls(&position);
        let (rows, loss) = self.train_batch(&mut phase.meter, &position, &controls, chunk)?;
        self.watch_leaks(info.index)?;
        self.count_step(rows, f64::from(loss), controls.lr);
        self.publish_step(f64::from(loss), controls.lr)?;
        self.checkpoint_if_due(phase, info.index)
    }

    /// The controls of the step at `position`: the configured learning rate, then each
    /// scheduler's say, then the anomaly rollbacks' adjustments.
    fn controls(&mut self, position: &Position) -> Controls {
        let mut controls = Controls {
            lr: self.c.optimizer.lr,
            reg_scale: 1.0,
            replay_ratio: None,
            replay_delta: 0.0,
        };
        for s in self.p.schedulers.iter_mut() {
            s.controls(position, &mut controls);
        }
        let adjust = self.pr.retry.adjust;
        controls.lr *= adjust.lr_factor;
        controls.reg_scale *= adjust.reg_factor;
        controls.replay_delta += adjust.replay_delta;
        controls
    }

    /// The step proper: the batch of `chunk` as the forgetting strategies prepare it, the
    /// memory strategies' forward and backward pass of [`TrainLoss`], clipping, the strategies'
    /// gradient adjustments, the optimiser update and the `after_update` and `after_step`
    /// hooks. Returns the rows trained (new plus replayed) and the step's loss.
    fn train_batch(
        &mut self,
        meter: &mut PhaseMeter,
        position: &Position,
        controls: &Controls,
        chunk: &[SampleRef],
    ) -> Result<(usize, f32)> {
        let (seed, task) = (self.c.run.seed, position.task);
        let p = &mut *self.p;
        let bcx = BatchContext {
            position,
            controls,
            stream: &p.stream,
            device: &self.ad,
            seed,
        };
        let mut batch = p.stream.batch(chunk, Part::Train, task, &self.ad);
        batch = each_forgetting(&mut p.forgetting, batch, |f, b| f.prepare_batch(b, &bcx))?;
        // Augmented after the strategies added their rows: replayed samples are augmented when
        // drawn, their buffers keep the originals.
        if let Some(a) = &self.c.data.augment {
            batch = crate::data::augment::augment_batch(
                a,
                batch,
                &p.stream,
                seed,
                task,
                position.global_step,
            );
        }
        // Burn's RNG (dropout) is reseeded from the position: resumable and exact.
        let rng_seed = rng::derive_seed(seed, "burn", task as u64, position.global_step as u64);
        self.ad.seed(rng_seed);
        let loss_fn = TrainLoss {
            forgetting: &p.forgetting,
            cx: &bcx,
            objective: self.c.train.objective,
        };
        let rows = batch.len();
        let window = memory::PeakWindow::open(&self.inner);
        let outcome = Next::new(&mut p.memory)
            .run(StepRequest {
                model: &self.model,
                batch: batch.clone(),
                loss: &loss_fn,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed,
            })
            .map_err(|e| located(e, position))
            .map_err(|e| {
                let clip = self.c.train.clip_norm;
                let scene =
                    divergence::StepScene::new(&self.model, &batch, &bcx, rng_seed, p, clip);
                divergence::explain(e, &scene)
            })?;
        let added = window.close(&self.inner);
        task::note_step_memory(&mut self.pr.record, &mut p.memory, added, task);
        meter.sample(&self.inner);
        let mut applied = None;
        if outcome.skipped {
            self.pr.record.counters.skipped_steps += 1;
        } else {
            let mut grads = outcome.grads;
            if let Some(max) = self.c.train.clip_norm {
                grads = clip_global_norm(&self.model, grads, max).0;
            }
            let model = &self.model;
            grads = each_forgetting(&mut p.forgetting, grads, |f, g| {
                f.adjust_gradients(model, g, &bcx)
            })?;
            applied = Some(self.model.flat_grads(&grads));
            let model = std::mem::replace(&mut self.model, Model::new(Vec::new(), 0));
            let model = self.optim.step(controls.lr, model, grads);
            self.model = each_forgetting(&mut p.forgetting, model, |f, m| f.after_update(m, &bcx))?;
        }
        let scx = StepContext {
            position,
            batch: &batch,
            sample_losses: outcome.sample_losses.as_deref(),
            loss: outcome.loss,
            model: &self.model,
            grads: applied.as_deref(),
        };
        each_forgetting(&mut p.forgetting, (), |f, ()| f.after_step(&scx))?;
        Ok((rows, outcome.loss))
    }

    /// The leak alarm after a step of task `round`: an event when device memory grew past
    /// its threshold (recorded either way: a stopped run's report has it too), then a warning
    /// or, with `on_leak = "stop"`, the end of the run.
    ///
    /// # Errors
    /// [`Error::Other`] naming the leak when `on_leak = "stop"`.
    fn watch_leaks(&mut self, round: usize) -> Result<()> {
        use crate::config::OnLeak;
        let on_leak = self.c.train.on_leak;
        if on_leak == OnLeak::Off {
            return Ok(());
        }
        let Some(bytes) = memory::device_bytes(&self.inner) else {
            return Ok(());
        };
        let Some(summary) = self.leaks.observe(self.pr.at.step_in_task, bytes) else {
            return Ok(());
        };
        self.pr.record.events.push(Event {
            task: round,
            kind: EventKind::Leak,
            message: summary.clone(),
        });
        if on_leak == OnLeak::Stop {
            return Err(Error::Other(format!(
                "leak alarm (on_leak = \"stop\") at task {round}: {summary}"
            )));
        }
        eprintln!("warning: leak alarm at task {round}: {summary}");
        Ok(())
    }

    /// Counts a step of `rows` rows with `loss` at learning rate `lr`: the counters, the
    /// epoch's and the logging window's losses (a `steps.csv` row every `log_every` steps),
    /// and the cursor moves on by one batch.
    fn count_step(&mut self, rows: usize, loss: f64, lr: f64) {
        let pr = &mut *self.pr;
        pr.losses.last_lr = lr;
        pr.record.counters.steps += 1;
        pr.record.counters.samples += rows;
        // A step that AMP skipped may have an infinite or NaN loss: it enters neither mean, so
        // that they (and the checkpoint's JSON, which has no NaN) stay finite.
        if loss.is_finite() {
            pr.losses.epoch_loss.add(loss);
            pr.losses.window.add(loss, rows);
        }
        if pr.losses.window.steps == self.c.train.log_every.max(1) {
            pr.flush_window(pr.at.step_in_task, pr.at.global_step, lr);
        }
        pr.at.step_in_task += 1;
        pr.at.global_step += 1;
        pr.at.chunk += 1;
    }

    /// After a step of task `round`: the `step-N` failpoint, then a checkpoint every
    /// `checkpoint_every` steps, and when the run was interrupted (Ctrl-C), after which it
    /// stops.
    ///
    /// # Errors
    /// As [`state::RunState::save`]; [`Error::Interrupted`] after the checkpoint of an
    /// interrupted run.
    fn checkpoint_if_due(&mut self, phase: &mut task::TrainPhase, round: usize) -> Result<()> {
        checkpoint::failpoint(&format!("step-{}", self.pr.at.global_step));
        let interrupted = INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
        let periodic = self
            .c
            .train
            .checkpoint_every
            .is_some_and(|k| k > 0 && self.pr.at.global_step.is_multiple_of(k));
        if !(interrupted || periodic) {
            return Ok(());
        }
        self.pr.record.timings.train_s += phase.clock.elapsed().as_secs_f64();
        phase.clock = Instant::now();
        self.save()?;
        if interrupted {
            return Err(Error::Interrupted(format!(
                "stopped {} at task {round}, step {} after writing a checkpoint",
                self.opts.out.display(),
                self.pr.at.step_in_task
            )));
        }
        Ok(())
    }
}

/// A strategy's error or divergence of the step at `position`, with where it happened.
fn located(e: Error, position: &Position) -> Error {
    let (round, epoch, step) = (position.task, position.epoch, position.step_in_task);
    match e {
        Error::Strategy { strategy, message } => Error::Strategy {
            strategy,
            message: format!("{message} (task {round}, epoch {epoch}, step {step} of the task)"),
        },
        Error::Diverged {
            strategy,
            value,
            notes,
            advice,
            ..
        } => Error::Diverged {
            strategy,
            value,
            at: format!(" at task {round}, epoch {epoch}, step {step} of the task"),
            notes,
            advice,
        },
        other => other,
    }
}
