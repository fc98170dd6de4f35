//! A diverging run: what its error says ([`explain`]: what AMP did, which part of the loss was
//! not finite, the strategies of the run, what to change), and what the run does next
//! ([`RunState::restart_after`]: with `[train] on_divergence = "restart"`, the default, the
//! task is trained again from its start with the learning rate halved and `clip_norm = 1.0`).

use super::*;
use crate::config::{MAX_RESTARTS, OnDivergence};
use state::RunState;

/// What a divergence of one step is explained with: the step's model, batch and context, and
/// the run's strategies and effective controls.
pub(super) struct StepScene<'a> {
    /// The model the step started from (`[batch, features] → [batch, classes]`).
    pub model: &'a Model,
    /// The batch as the step trained it (with any replayed rows).
    pub batch: &'a Batch,
    /// The step's batch context (its controls: the learning rate, the regularisation scale).
    pub cx: &'a BatchContext<'a>,
    /// The seed of the step's dropout.
    pub rng_seed: u64,
    /// The memory strategies, in chain order.
    pub memory: &'a [Box<dyn MemoryStrategy>],
    /// The forgetting strategies, in config order.
    pub forgetting: &'a [Box<dyn ForgettingStrategy>],
    /// The step's global-norm clipping threshold (the config's, or a restart's).
    pub clip_norm: Option<f64>,
    /// What the run trains (`[train] objective`): which task loss the parts recompute.
    pub objective: crate::config::Objective,
}

impl<'a> StepScene<'a> {
    /// The scene of a step of run `p` on `batch` from `model`, with its context `cx`, dropout
    /// seed `rng_seed` and clipping threshold `clip_norm`.
    pub(super) fn new(
        model: &'a Model,
        batch: &'a Batch,
        cx: &'a BatchContext<'a>,
        rng_seed: u64,
        p: &'a Prepared,
        clip_norm: Option<f64>,
    ) -> Self {
        Self {
            model,
            batch,
            cx,
            rng_seed,
            memory: &p.memory,
            forgetting: &p.forgetting,
            clip_norm,
            objective: p.cfg.config.train.objective,
        }
    }
}

/// `e` with what explains it when it is [`Error::Diverged`]: the notes of the memory
/// strategies ([`MemoryStrategy::divergence_note`], for example AMP's skipped steps and loss
/// scale), the loss's parts on the step's batch recomputed in `f32` (which one is not finite),
/// the strategies of the run; then the advice: the learning rate and `clip_norm` to try, and
/// each forgetting strategy's [`ForgettingStrategy::divergence_hint`]. Any other error is
/// returned as it is. Costs one forward pass, on the error's path only.
pub(super) fn explain(e: Error, scene: &StepScene<'_>) -> Error {
    let Error::Diverged {
        strategy,
        value,
        at,
        mut notes,
        mut advice,
    } = e
    else {
        return e;
    };
    notes.extend(scene.memory.iter().filter_map(|m| m.divergence_note()));
    notes.push(loss_parts(scene));
    notes.push(stack(scene.memory, scene.forgetting));
    let lr = scene.cx.controls.lr;
    let general = match scene.clip_norm {
        None => format!(
            "lower the learning rate (it is {}; try {}) or add [train] clip_norm = 1.0",
            short(lr),
            short(lr / 2.0)
        ),
        Some(c) => format!(
            "lower the learning rate (it is {}; try {}) or [train] clip_norm (it is {})",
            short(lr),
            short(lr / 2.0),
            short(c)
        ),
    };
    advice.insert(0, general);
    advice.extend(scene.forgetting.iter().filter_map(|s| s.divergence_hint()));
    Error::Diverged {
        strategy,
        value,
        at,
        notes,
        advice,
    }
}

/// The loss's parts on the step's batch, recomputed in `f32` with the step's dropout seed: the
/// cross-entropy (mean, or weighted as the batch says) and each forgetting strategy's logit
/// penalty and penalty, with the ones that are not finite named.
fn loss_parts(s: &StepScene<'_>) -> String {
    let n = s.model.num_blocks();
    let logits = s
        .model
        .forward_range_seeded(0..n, s.batch.input(), &s.batch.forward_ctx(), s.rng_seed)
        .into_flat();
    let ce = per_row_loss(s.objective, s.model, logits.clone(), s.batch);
    let ce = match &s.batch.weights {
        Some(w) => (ce * w.clone()).sum(),
        None => ce.mean(),
    };
    let read = |t: Tensor<1>| t.into_scalar::<f32>();
    let mut parts = vec![("the cross-entropy".to_string(), read(ce))];
    for f in s.forgetting {
        if let Some(p) = f.logit_penalty(&logits, s.batch) {
            parts.push((format!("`{}`'s logit penalty", f.name()), read(p)));
        }
        if let Some(p) = f.penalty(s.model, s.cx) {
            parts.push((format!("`{}`'s penalty", f.name()), read(p)));
        }
    }
    let listed = parts
        .iter()
        .map(|(name, v)| format!("{name} {}", short(f64::from(*v))))
        .collect::<Vec<_>>()
        .join(", ");
    let bad: Vec<&str> = parts
        .iter()
        .filter(|(_, v)| !v.is_finite())
        .map(|(name, _)| name.as_str())
        .collect();
    let verdict = if bad.is_empty() {
        "every part is finite in f32, so the step's reduced precision overflowed".to_string()
    } else {
        format!("not finite: {}", bad.join(", "))
    };
    format!("The loss's parts on that batch, recomputed in f32: {listed} ({verdict})")
}

/// The strategies of the run: the memory chain and the forgetting strategies.
fn stack(memory: &[Box<dyn MemoryStrategy>], forgetting: &[Box<dyn ForgettingStrategy>]) -> String {
    let chain: Vec<&str> = memory.iter().map(|m| m.name()).collect();
    let forget: Vec<&str> = forgetting.iter().map(|f| f.name()).collect();
    format!(
        "The run's strategies: memory {}; forgetting {}",
        chain.join(" → "),
        if forget.is_empty() {
            "none".to_string()
        } else {
            forget.join(", ")
        }
    )
}

/// `v` for a message: up to 4 significant digits, `NaN` and `inf` as such.
fn short(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    if (1e-3..1e5).contains(&v.abs()) {
        let decimals = (3 - v.abs().log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if !s.contains('.') {
            return s;
        }
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{v:.3e}")
}

/// `e` with one more note (a divergence) or as it is (any other error).
fn with_note(e: Error, note: String) -> Error {
    match e {
        Error::Diverged {
            strategy,
            value,
            at,
            mut notes,
            advice,
        } => {
            notes.push(note);
            Error::Diverged {
                strategy,
                value,
                at,
                notes,
                advice,
            }
        }
        e => e,
    }
}

impl RunState<'_> {
    /// After task `pr.at.round` stopped with `e`: with `on_divergence = "restart"` and a
    /// divergence, while fewer than [`MAX_RESTARTS`] restarts were made, restores the task's
    /// start (its checkpoint, which pruning keeps) with the learning rate halved and
    /// `clip_norm` at most 1.0 for the rest of the run, keeps what the run spent and recorded
    /// (events, timings, counted steps), records a `divergence` event, warns, and returns
    /// `Ok` (train the task again).
    ///
    /// # Errors
    /// `e` itself when it is no divergence or `on_divergence = "stop"`; `e` with a note
    /// when the restarts are spent or the task's start cannot be read; an error restoring it.
    pub(super) fn restart_after(&mut self, e: Error) -> Result<()> {
        if !matches!(e, Error::Diverged { .. }) || self.c.train.on_divergence == OnDivergence::Stop
        {
            return Err(e);
        }
        let (round, restarts) = (self.pr.at.round, self.pr.retry.restarts);
        let was = self.pr.retry.clone();
        if restarts >= MAX_RESTARTS {
            return Err(with_note(
                e,
                format!(
                    "This was after {restarts} restarts of on_divergence = \"restart\" (the most it makes), the last at learning rate ×{} with clip_norm = {}",
                    short(was.adjust.lr_factor),
                    self.c.train.clip_norm.map_or("off".into(), short)
                ),
            ));
        }
        let start = self
            .pr
            .at
            .global_step
            .saturating_sub(self.pr.at.step_in_task);
        let path = checkpoint::dir(&self.opts.out).join(format!("step-{start:08}"));
        let ck = match checkpoint::load_dir(&path) {
            Ok(ck) if ck.progress.at.round == round && ck.progress.at.step_in_task == 0 => ck,
            other => {
                let why = match other {
                    Err(e) => e.to_string(),
                    Ok(_) => "it is not at the task's start".into(),
                };
                let note =
                    format!("The run could not restart from the start of task {round}: {why}");
                return Err(with_note(e, note));
            }
        };
        let adjust = checkpoint::Adjust {
            lr_factor: was.adjust.lr_factor * 0.5,
            ..was.adjust
        };
        let clip = self.c.train.clip_norm.map_or(1.0, |c| c.min(1.0));
        let message = format!(
            "{e}. Restored the start of task {round} and training it again (restart {} of at most {MAX_RESTARTS}, on_divergence = \"restart\") with the learning rate ×{} ({}) and clip_norm = {} for the rest of the run",
            restarts + 1,
            short(adjust.lr_factor),
            short(self.c.optimizer.lr * adjust.lr_factor),
            short(clip)
        );
        eprintln!("warning: {message}");
        let mut events = self.pr.record.events.clone();
        events.push(Event {
            task: round,
            kind: EventKind::Divergence,
            message,
        });
        let (model, optim, mut restored) = self.p.restore(ck, &self.ad, &path)?;
        self.model = model;
        self.optim = optim;
        self.c.train.clip_norm = Some(clip);
        restored.record.events = events;
        restored.retry = checkpoint::Retry {
            adjust,
            retries: was.retries,
            restarts: restarts + 1,
            clip_norm: Some(clip),
        };
        let counters = &self.pr.record.counters;
        restored.record.timings = self.pr.record.timings.clone();
        restored.record.counters.steps = counters.steps;
        restored.record.counters.samples = counters.samples;
        restored.record.counters.skipped_steps = counters.skipped_steps;
        *self.pr = restored;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn numbers_are_short() {
        assert_eq!(short(0.05), "0.05");
        assert_eq!(short(0.025), "0.025");
        assert_eq!(short(65536.0), "65536");
        assert_eq!(short(1.0), "1");
        assert_eq!(short(1e30), "1.000e30");
        assert_eq!(short(f64::NAN), "NaN");
        assert_eq!(short(f64::INFINITY), "inf");
        assert_eq!(short(0.0001234), "1.234e-4");
        assert_eq!(short(93285.8281), "93286");
        assert_eq!(short(12.3456), "12.35");
    }
}
