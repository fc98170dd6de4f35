//! The state of a run in progress, and the loop over its tasks as a few named steps.
//!
//! [`RunState::run`] reads as the loop of the crate docs: the initial model's row (for forward
//! transfer), then for each task [`RunState::begin_task`], [`RunState::train_task`] (its
//! epochs of [`RunState::step`]), [`RunState::end_task`], [`RunState::evaluate_row`] and
//! [`RunState::roll_back_if_asked`] (which may send the loop back to the task's start; so does
//! a divergence, through [`RunState::restart_after`]), and
//! at the end the report. Each step is a method in its own file (`task.rs`, `step.rs`,
//! `evaluate.rs`, `rollback.rs`); everything they share is a field here.

use super::*;

/// A run in progress: what was prepared, the model and its optimiser, and the progress so far.
pub(super) struct RunState<'a> {
    /// The run's components (config, stream, strategies).
    pub(super) p: &'a mut Prepared,
    /// Where the run writes.
    pub(super) opts: &'a RunOptions,
    /// The progress so far; the caller's, so that a failure is recorded with the progress it
    /// reached.
    pub(super) pr: &'a mut Progress,
    /// The model being trained.
    pub(super) model: Model,
    /// Its optimiser.
    pub(super) optim: ModuleOptimizer,
    /// The effective config (a copy: the strategies in `p` are borrowed mutably beside it).
    pub(super) c: crate::config::Config,
    /// The device without autodiff (evaluation, memory figures).
    pub(super) inner: Device,
    /// The device with autodiff (training).
    pub(super) ad: Device,
    /// When this process started the run.
    pub(super) t0: Instant,
    /// Wall time of earlier processes of this run, s (a resumed run adds its own).
    pub(super) earlier_s: f64,
    /// The leak alarm.
    pub(super) leaks: memory::LeakDetector,
    /// Whether a scheduler may roll a task back: only then is the task's start kept in memory.
    pub(super) rollback_policy: bool,
    /// The run's observers and `metrics.jsonl` (`publish.rs`).
    pub(super) publisher: publish::Publisher,
}

impl<'a> RunState<'a> {
    /// The state of run `p` writing into `opts.out`, at progress `pr` with `model` and
    /// `optim` on the autodiff device `ad`; `t0` is when this process started the run.
    pub(super) fn new(
        p: &'a mut Prepared,
        opts: &'a RunOptions,
        pr: &'a mut Progress,
        (model, optim): (Model, ModuleOptimizer),
        ad: &Device,
        t0: Instant,
    ) -> Self {
        let mut c = p.cfg.config.clone();
        // A restart after a divergence turned clipping on for the rest of the run.
        if let Some(clip) = pr.retry.clip_norm {
            c.train.clip_norm = Some(clip);
        }
        let inner = p.device.clone();
        if pr.record.memory.source.is_empty() {
            pr.record.memory.source = if inner.memory_pool_usage().is_some() {
                "device-pool".into()
            } else {
                "heap".into()
            };
        }
        let rollback_policy = p.schedulers.iter().any(|s| s.may_roll_back());
        Self {
            publisher: publish::Publisher::new(opts.progress, &p.observers),
            earlier_s: pr.record.timings.total_s,
            leaks: memory::LeakDetector::new(c.train.leak_factor),
            rollback_policy,
            c,
            inner,
            ad: ad.clone(),
            p,
            opts,
            pr,
            model,
            optim,
            t0,
        }
    }

    /// The continual loop from `pr` on, then `steps.csv` and the report (see [`run`]).
    ///
    /// # Errors
    /// As [`run`]; the progress reached stays in `pr`.
    pub(super) fn run(self) -> Result<Report> {
        let end = self.publisher.observers_only();
        let result = self.run_loop();
        end.end(result.is_ok());
        result
    }

    /// [`RunState::run`] before its observers hear the end.
    fn run_loop(mut self) -> Result<Report> {
        self.open_metrics_log()?;
        // b_j: the initial model on every task (for forward transfer).
        if self.pr.results.baseline.is_empty() && self.pr.results.perplexity_baseline.is_empty() {
            self.evaluate_baseline();
            self.save()?;
        }
        self.publish_evals()?;
        self.warn_batch_statistics();
        while self.pr.at.round < self.rounds() {
            let task = self.begin_task()?;
            if let Err(e) = self.train_task(&task.info) {
                // A divergence trains the task again from its start, or ends the run.
                self.restart_after(e)?;
                continue;
            }
            self.end_task(&task.info)?;
            self.evaluate_row(task.info.index);
            self.publish_evals()?;
            if self.roll_back_if_asked(task.start)? {
                continue;
            }
            self.next_task()?;
        }
        self.finish()
    }

    /// Tasks the loop trains: every task of the stream, or one round over all of them
    /// (`joint`).
    pub(super) fn rounds(&self) -> usize {
        if self.c.train.joint {
            1
        } else {
            self.p.stream.len()
        }
    }

    /// Writes a checkpoint of the run as it is now, at its global step.
    ///
    /// # Errors
    /// As [`checkpoint::save`], and a strategy whose state cannot be captured.
    pub(super) fn save(&mut self) -> Result<()> {
        let mut ck = snapshot(self.p, &self.model, &self.optim, self.pr)?;
        // The memory report's state figures, as this checkpoint holds them (the last one is
        // the run's end): no second serialisation when the report is written.
        let (states, optim) = (record::state_bytes(&ck), ck.optimizer.len() as u64);
        for mem in [&mut self.pr.record.memory, &mut ck.progress.record.memory] {
            mem.strategy_state_bytes = states.clone();
            mem.optimizer_state_bytes = optim;
        }
        ck.progress.record.timings.total_s = self.earlier_s + self.t0.elapsed().as_secs_f64();
        checkpoint::save(&self.opts.out, self.pr.at.global_step, &ck)?;
        Ok(())
    }

    /// The model, taken out to be passed through a hook that consumes and returns it; an
    /// empty model stands in until it is put back.
    pub(super) fn take_model(&mut self) -> Model {
        std::mem::replace(&mut self.model, Model::new(Vec::new(), 0))
    }

    /// Accumulation is exact only without batch statistics: said once per run, where the user
    /// looks (standard error and the report's events).
    fn warn_batch_statistics(&mut self) {
        if self.pr.at.global_step != 0 || !self.model.uses_batch_statistics() {
            return;
        }
        for m in self.p.memory.iter().filter(|m| m.splits_batch()) {
            let message = format!(
                "`{}` splits each batch into micro-batches, and this model normalises with batch statistics (batch norm): each micro-batch is normalised with its own statistics, so the step is not the plain step's (the book's memory chapter, \"Accumulation and batch norm\")",
                m.name()
            );
            eprintln!("warning: {message}");
            self.pr.record.events.push(Event {
                task: 0,
                kind: EventKind::BatchStatistics,
                message,
            });
        }
    }

    /// Moves on to the next task, at its start, and checkpoints there.
    ///
    /// # Errors
    /// As [`RunState::save`].
    fn next_task(&mut self) -> Result<()> {
        self.pr.retry.retries = 0;
        self.pr.at = checkpoint::Cursor {
            round: self.pr.at.round + 1,
            global_step: self.pr.at.global_step,
            ..checkpoint::Cursor::default()
        };
        self.save()
    }

    /// Writes `steps.csv` and the report of the finished run.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be written.
    fn finish(self) -> Result<Report> {
        let out = &self.opts.out;
        write_atomic(
            &out.join("steps.csv"),
            steps_csv(&self.pr.record.logs).as_bytes(),
        )?;
        let report = record::build_report(
            self.p,
            self.pr,
            &self.inner,
            record::ModelSize::of(&self.model),
            self.earlier_s + self.t0.elapsed().as_secs_f64() + self.p.setup_s,
        );
        report.write(out)?;
        Ok(report)
    }
}
