//! Schedulers: learning rate, regularisation warm-up, replay ratio, evaluation cadence and
//! the forgetting-anomaly handler. Each is registered under its own name and composes with
//! the others in config order (`[[scheduler]]` entries).
//!
//! Every schedule is a function of the run's [`Position`]; the only state a scheduler keeps
//! is rebuilt from the position, so a resumed run gets exactly the same controls.

use engram_core::Result;
use engram_core::burn::optim::lr_scheduler::{
    constant::ConstantLr, cosine::CosineAnnealingLrSchedulerConfig,
    linear::LinearLrSchedulerConfig, module_lr_scheduler::ModuleLrScheduler,
    step::StepLrSchedulerConfig,
};
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{AnomalyAction, Controls, Position, Scheduler};
use serde::{Deserialize, Serialize};

/// The shape of the learning-rate schedule within its horizon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// The base learning rate.
    #[default]
    Constant,
    /// Cosine annealing to `min_lr` (Loshchilov & Hutter 2017, eq. 5, no restarts).
    Cosine,
    /// Multiply by `gamma` every `step_size` steps.
    Step,
    /// Linear from the base rate to `final_lr`.
    Linear,
}

/// `[[scheduler]] type = "lr"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LrParams {
    /// `constant` (default), `cosine`, `step` or `linear` (burn-optim's schedulers).
    pub schedule: Shape,
    /// Linear warm-up from `base/warmup_steps` to the base rate over the first steps of
    /// each horizon. Default 0.
    pub warmup_steps: usize,
    /// Restart the schedule at every task (horizon = the task's steps); false: one schedule
    /// over the whole run. Default true.
    pub per_task: bool,
    /// Cosine floor. Default 0.
    pub min_lr: f64,
    /// Step schedule: steps between decays. Default 100.
    pub step_size: usize,
    /// Step schedule: decay factor. Default 0.1.
    pub gamma: f64,
    /// Linear schedule: the rate at the end of the horizon. Default 0.
    pub final_lr: f64,
    /// Per-task multipliers of the learning rate (task `t` uses entry `t`, 1 beyond the list).
    pub task_factors: Vec<f64>,
}

impl Default for LrParams {
    fn default() -> Self {
        Self {
            schedule: Shape::Constant,
            warmup_steps: 0,
            per_task: true,
            min_lr: 0.0,
            step_size: 100,
            gamma: 0.1,
            final_lr: 0.0,
            task_factors: Vec::new(),
        }
    }
}

/// Learning-rate schedules built on burn-optim's schedulers.
pub struct Lr {
    p: LrParams,
    /// `(horizon start step, base lr)` and the burn scheduler stepped up to `done` steps.
    current: Option<(usize, f64, ModuleLrScheduler, usize)>,
}

impl Lr {
    fn build(&self, base: f64, horizon: usize) -> ModuleLrScheduler {
        let iters = horizon.saturating_sub(self.p.warmup_steps).max(1);
        let built = match self.p.schedule {
            Shape::Constant => Ok(ModuleLrScheduler::new(ConstantLr::from(base))),
            Shape::Cosine => CosineAnnealingLrSchedulerConfig::new(base, iters)
                .with_min_lr(self.p.min_lr.min(base))
                .init(),
            Shape::Step => StepLrSchedulerConfig::new(base, self.p.step_size)
                .with_gamma(self.p.gamma)
                .init(),
            Shape::Linear => {
                LinearLrSchedulerConfig::new(base, self.p.final_lr.max(1e-12), iters).init()
            }
        };
        built.unwrap_or_else(|_| ModuleLrScheduler::new(ConstantLr::from(base)))
    }

    /// The learning rate at step `s` of a horizon of `horizon` steps with base rate `base`.
    pub fn lr_at(&mut self, start: usize, s: usize, horizon: usize, base: f64) -> f64 {
        let w = self.p.warmup_steps;
        if s < w {
            return base * (s + 1) as f64 / w as f64;
        }
        let k = s - w;
        let fresh = !matches!(&self.current, Some((st, b, _, done)) if *st == start && *b == base && *done <= k);
        if fresh {
            self.current = Some((start, base, self.build(base, horizon), 0));
        }
        let (_, _, sched, done) = self.current.as_mut().expect("just built");
        let mut lr = base;
        // Burn's schedulers return the rate of the step they advance over.
        while *done <= k {
            lr = sched.step().base();
            *done += 1;
        }
        lr
    }
}

impl Scheduler for Lr {
    fn name(&self) -> &str {
        "lr"
    }

    fn controls(&mut self, pos: &Position, c: &mut Controls) {
        let factor = self.p.task_factors.get(pos.task).copied().unwrap_or(1.0);
        let (start, s, horizon) = if self.p.per_task {
            (
                pos.global_step - pos.step_in_task,
                pos.step_in_task,
                pos.steps_per_task,
            )
        } else {
            (0, pos.global_step, pos.steps_per_task * pos.num_tasks)
        };
        c.lr = self.lr_at(start, s, horizon, c.lr) * factor;
    }
}

fn build_lr(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: LrParams = src.parse()?;
    if p.task_factors.iter().any(|f| !(*f > 0.0 && f.is_finite())) {
        return Err(src.key_error(
            "task_factors",
            "lr: task_factors must be positive".into(),
            None,
        ));
    }
    for (key, v, ok) in [
        ("gamma", p.gamma, p.gamma > 0.0),
        ("min_lr", p.min_lr, p.min_lr >= 0.0),
        ("final_lr", p.final_lr, p.final_lr >= 0.0),
    ] {
        if !ok {
            return Err(src.key_error(
                key,
                format!(
                    "lr: {key} = {v} must be {}",
                    if key == "gamma" { "> 0" } else { "≥ 0" }
                ),
                None,
            ));
        }
    }
    if p.step_size == 0 {
        return Err(src.key_error(
            "step_size",
            "lr: step_size must be at least 1 (steps between two multiplications by gamma)".into(),
            None,
        ));
    }
    Ok(Box::new(Lr { p, current: None }))
}

/// The registration of `lr`.
pub const LR: engram_core::registry::Registration = engram_core::registration!(scheduler "lr", "learning-rate schedule (constant, cosine, step, linear; warm-up; per task or per run)", LrParams, build_lr);
engram_core::component!(LrParams, scheduler "lr");

/// `[[scheduler]] type = "reg_warmup"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegWarmupParams {
    /// Multiplier on regularisation strength at the start of each task (after the first).
    /// Default 10.
    pub strength: f64,
    /// Epochs of a task held at `strength` (fractional epochs allowed). Default 1.
    pub epochs: f64,
    /// Epochs of linear decay from `strength` to 1 afterwards. Default 1.
    pub decay_epochs: f64,
}

impl Default for RegWarmupParams {
    fn default() -> Self {
        Self {
            strength: 10.0,
            epochs: 1.0,
            decay_epochs: 1.0,
        }
    }
}

/// Regularisation warm-up (the seed): strong regularisation for the first epochs of a new
/// task, when the new task's gradients are largest, then a linear decay to the base strength.
pub struct RegWarmup {
    p: RegWarmupParams,
}

impl RegWarmup {
    /// The multiplier at fractional epoch `e` of a task: `strength` for `e < epochs`, then
    /// linear to 1 over `decay_epochs`, then 1.
    pub fn factor(&self, e: f64) -> f64 {
        let (k, d, s) = (self.p.epochs, self.p.decay_epochs, self.p.strength);
        if e < k {
            s
        } else if d > 0.0 && e < k + d {
            s + (1.0 - s) * (e - k) / d
        } else {
            1.0
        }
    }
}

impl Scheduler for RegWarmup {
    fn name(&self) -> &str {
        "reg_warmup"
    }

    fn controls(&mut self, pos: &Position, c: &mut Controls) {
        if pos.task == 0 {
            return;
        }
        let per_epoch = (pos.steps_per_task / pos.epochs.max(1)).max(1);
        let e = pos.step_in_task as f64 / per_epoch as f64;
        c.reg_scale *= self.factor(e);
    }
}

fn build_reg(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: RegWarmupParams = src.parse()?;
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !positive(p.strength) || p.epochs < 0.0 || p.decay_epochs < 0.0 {
        return Err(src.key_error(
            "strength",
            "reg_warmup: strength must be > 0, epochs ≥ 0".into(),
            None,
        ));
    }
    Ok(Box::new(RegWarmup { p }))
}

/// The registration of `reg_warmup`.
pub const REG_WARMUP: engram_core::registry::Registration = engram_core::registration!(scheduler "reg_warmup", "strong regularisation for the first epochs of each new task, then decay to the base strength", RegWarmupParams, build_reg);
engram_core::component!(RegWarmupParams, scheduler "reg_warmup");

/// `[[scheduler]] type = "replay_ratio"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayRatioParams {
    /// Ratio on the second task. Default 0.2.
    pub start: f64,
    /// Ratio on the last task (linear in between). Default 0.5.
    pub end: f64,
}

impl Default for ReplayRatioParams {
    fn default() -> Self {
        Self {
            start: 0.2,
            end: 0.5,
        }
    }
}

/// Replay ratio growing linearly over the stream (more old tasks, more memory rows).
pub struct ReplayRatio {
    p: ReplayRatioParams,
}

impl ReplayRatio {
    /// The ratio for task `t` of `n`.
    pub fn ratio(&self, t: usize, n: usize) -> f64 {
        if n <= 2 {
            return self.p.start;
        }
        let f = (t.saturating_sub(1)) as f64 / (n - 2) as f64;
        self.p.start + (self.p.end - self.p.start) * f.clamp(0.0, 1.0)
    }
}

impl Scheduler for ReplayRatio {
    fn name(&self) -> &str {
        "replay_ratio"
    }
    fn controls(&mut self, pos: &Position, c: &mut Controls) {
        c.replay_ratio = Some(self.ratio(pos.task, pos.num_tasks));
    }
}

fn build_ratio(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: ReplayRatioParams = src.parse()?;
    if p.start < 0.0 || p.end < 0.0 {
        return Err(src.key_error("start", "replay_ratio: ratios must be ≥ 0".into(), None));
    }
    Ok(Box::new(ReplayRatio { p }))
}

/// The registration of `replay_ratio`.
pub const REPLAY_RATIO: engram_core::registry::Registration = engram_core::registration!(scheduler "replay_ratio", "replay ratio rising linearly from the second task to the last", ReplayRatioParams, build_ratio);
engram_core::component!(ReplayRatioParams, scheduler "replay_ratio");

/// `[[scheduler]] type = "cadence"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CadenceParams {
    /// Evaluate every task after every `every`-th task (and after the last). Default 3.
    pub every: usize,
}

impl Default for CadenceParams {
    fn default() -> Self {
        Self { every: 3 }
    }
}

/// Validation cadence (the seed): the full row of the accuracy matrix every k tasks; the
/// diagonal cell is always evaluated. Skipped cells are `null` in report.json.
pub struct Cadence {
    every: usize,
}

impl Scheduler for Cadence {
    fn name(&self) -> &str {
        "cadence"
    }
    fn evaluate_all(&self, task: usize, num_tasks: usize) -> Option<bool> {
        Some((task + 1).is_multiple_of(self.every) || task + 1 == num_tasks)
    }
}

fn build_cadence(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: CadenceParams = src.parse()?;
    if p.every == 0 {
        return Err(src.key_error("every", "cadence: every must be ≥ 1".into(), None));
    }
    Ok(Box::new(Cadence { every: p.every }))
}

/// The registration of `cadence`.
pub const CADENCE: engram_core::registry::Registration = engram_core::registration!(scheduler "cadence", "evaluate every task only every k tasks (the diagonal always)", CadenceParams, build_cadence);
engram_core::component!(CadenceParams, scheduler "cadence");

/// `[[scheduler]] type = "anomaly"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnomalyParams {
    /// Trigger when an old task's accuracy falls more than this (a fraction) below its best.
    /// Default 0.05.
    pub threshold: f64,
    /// Regularisation strength multiplier per retry. Default 2.
    pub lambda_factor: f64,
    /// Added to the replay ratio per retry. Default 0.1.
    pub replay_step: f64,
    /// Learning-rate multiplier per retry. Default 0.7 (30 % lower).
    pub lr_factor: f64,
    /// Retries per task. Default 2.
    pub max_retries: usize,
}

impl Default for AnomalyParams {
    fn default() -> Self {
        Self {
            threshold: 0.05,
            lambda_factor: 2.0,
            replay_step: 0.1,
            lr_factor: 0.7,
            max_retries: 2,
        }
    }
}

/// The forgetting-anomaly handler (the seed): when an old task's accuracy drops more than
/// `threshold` below its best, ask the trainer to restore the task's starting checkpoint and
/// retry it with stronger regularisation, more replay and a lower learning rate.
pub struct Anomaly {
    p: AnomalyParams,
}

impl Anomaly {
    /// The worst drop `(task, best, now)` in the last row of `matrix`, if above threshold.
    pub fn worst_drop(
        &self,
        task: usize,
        matrix: &[Vec<Option<f64>>],
    ) -> Option<(usize, f64, f64)> {
        let last = matrix.get(task)?;
        (0..task)
            .filter_map(|j| {
                let now = last.get(j).copied().flatten()?;
                let best = matrix[..task]
                    .iter()
                    .filter_map(|r| r.get(j).copied().flatten())
                    .fold(f64::NAN, f64::max);
                (best.is_finite() && best - now > self.p.threshold).then_some((j, best, now))
            })
            .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)))
    }
}

impl Scheduler for Anomaly {
    fn name(&self) -> &str {
        "anomaly"
    }

    fn may_roll_back(&self) -> bool {
        true
    }

    fn after_evaluation(&mut self, task: usize, matrix: &[Vec<Option<f64>>]) -> AnomalyAction {
        match self.worst_drop(task, matrix) {
            Some((j, best, now)) => AnomalyAction::Rollback {
                reason: format!(
                    "task {j} fell from {:.1} % to {:.1} % after task {task} (threshold {:.1} points)",
                    best * 100.0,
                    now * 100.0,
                    self.p.threshold * 100.0
                ),
                reg_factor: self.p.lambda_factor,
                replay_step: self.p.replay_step,
                lr_factor: self.p.lr_factor,
                max_retries: self.p.max_retries,
            },
            None => AnomalyAction::Continue,
        }
    }
}

fn build_anomaly(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: AnomalyParams = src.parse()?;
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !positive(p.lr_factor) || !positive(p.lambda_factor) {
        return Err(src.key_error(
            "lr_factor",
            "anomaly: lr_factor and lambda_factor must be finite and > 0".into(),
            None,
        ));
    }
    if p.replay_step < 0.0 {
        return Err(src.key_error(
            "replay_step",
            format!(
                "anomaly: replay_step {} must be ≥ 0 (a retry adds it to the replay ratio)",
                p.replay_step
            ),
            None,
        ));
    }
    // NaN would compare false with every drop and silently turn the detector off.
    if !(p.threshold >= 0.0 && p.threshold.is_finite()) {
        return Err(src.key_error(
            "threshold",
            format!(
                "anomaly: threshold {} must be a finite share of accuracy ≥ 0 (0.05 = 5 points)",
                p.threshold
            ),
            None,
        ));
    }
    Ok(Box::new(Anomaly { p }))
}

/// The registration of `anomaly`.
pub const ANOMALY: engram_core::registry::Registration = engram_core::registration!(scheduler "anomaly", "catch forgetting as it happens: roll back the task and retry it with stronger protection", AnomalyParams, build_anomaly);
engram_core::component!(AnomalyParams, scheduler "anomaly");

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(task: usize, step: usize, per_task: usize, epochs: usize) -> Position {
        Position {
            task,
            num_tasks: 5,
            epoch: step / (per_task / epochs),
            epochs,
            step_in_task: step,
            steps_per_task: per_task,
            global_step: task * per_task + step,
        }
    }

    #[test]
    fn reg_warmup_holds_then_decays() {
        let w = RegWarmup {
            p: RegWarmupParams {
                strength: 10.0,
                epochs: 1.0,
                decay_epochs: 2.0,
            },
        };
        assert_eq!(w.factor(0.0), 10.0);
        assert_eq!(w.factor(0.99), 10.0);
        assert!((w.factor(2.0) - 5.5).abs() < 1e-12);
        assert_eq!(w.factor(3.0), 1.0);
        // Through controls: task 0 untouched; 4 epochs of 10 steps each.
        let mut s = RegWarmup { p: w.p.clone() };
        let mut c = Controls {
            lr: 0.1,
            reg_scale: 1.0,
            replay_ratio: None,
            replay_delta: 0.0,
        };
        s.controls(&pos(0, 0, 40, 4), &mut c);
        assert_eq!(c.reg_scale, 1.0);
        let mut c = Controls {
            lr: 0.1,
            reg_scale: 2.0,
            replay_ratio: None,
            replay_delta: 0.0,
        };
        s.controls(&pos(1, 20, 40, 4), &mut c);
        assert!((c.reg_scale - 2.0 * 5.5).abs() < 1e-12);
    }

    #[test]
    fn cadence_evaluates_every_k_and_the_last() {
        let c = Cadence { every: 3 };
        let all: Vec<bool> = (0..7).map(|t| c.evaluate_all(t, 7).unwrap()).collect();
        assert_eq!(all, vec![false, false, true, false, false, true, true]);
    }

    #[test]
    fn lr_schedules_follow_burn_and_restart_per_task() {
        let mut lr = Lr {
            p: LrParams {
                schedule: Shape::Cosine,
                warmup_steps: 2,
                ..LrParams::default()
            },
            current: None,
        };
        // Warm-up: base·1/2, base·2/2; then cosine from the base over 10 − 2 steps.
        assert!((lr.lr_at(0, 0, 10, 0.1) - 0.05).abs() < 1e-12);
        assert!((lr.lr_at(0, 1, 10, 0.1) - 0.1).abs() < 1e-12);
        let first = lr.lr_at(0, 2, 10, 0.1);
        assert!((first - 0.1).abs() < 1e-9, "{first}");
        let mid = lr.lr_at(0, 6, 10, 0.1);
        assert!((mid - 0.05).abs() < 1e-9, "cosine half-way: {mid}");
        // Asking again out of order (a resume) rebuilds and fast-forwards to the same value.
        let again = lr.lr_at(0, 6, 10, 0.1);
        assert_eq!(again, mid);
        // A new task restarts.
        assert!((lr.lr_at(10, 2, 10, 0.1) - 0.1).abs() < 1e-9);
        let mut step = Lr {
            p: LrParams {
                schedule: Shape::Step,
                step_size: 3,
                gamma: 0.5,
                task_factors: vec![1.0, 4.0],
                ..LrParams::default()
            },
            current: None,
        };
        let lrs: Vec<f64> = (0..7).map(|s| step.lr_at(0, s, 10, 0.2)).collect();
        assert_eq!(lrs, vec![0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.05]);
        let mut c = Controls {
            lr: 0.2,
            reg_scale: 1.0,
            replay_ratio: None,
            replay_delta: 0.0,
        };
        step.controls(&pos(1, 0, 10, 1), &mut c);
        assert!((c.lr - 0.8).abs() < 1e-12);
    }

    #[test]
    fn replay_ratio_rises_linearly() {
        let r = ReplayRatio {
            p: ReplayRatioParams {
                start: 0.2,
                end: 0.5,
            },
        };
        let v: Vec<f64> = (1..5).map(|t| r.ratio(t, 5)).collect();
        assert!(
            (v[0] - 0.2).abs() < 1e-12 && (v[3] - 0.5).abs() < 1e-12 && (v[1] - 0.3).abs() < 1e-12
        );
    }

    #[test]
    fn anomaly_detects_drops_against_the_best() {
        let a = Anomaly {
            p: AnomalyParams::default(),
        };
        let m = vec![
            vec![Some(0.90), None],
            vec![Some(0.95), Some(0.9)],
            vec![Some(0.88), Some(0.89), Some(0.9)],
        ];
        // Task 0: best 0.95, now 0.88 → 7 points > 5.
        assert_eq!(a.worst_drop(2, &m), Some((0, 0.95, 0.88)));
        assert!(matches!(
            a.after_evaluation_probe(&m),
            AnomalyAction::Rollback { .. }
        ));
        let ok = vec![vec![Some(0.9)], vec![Some(0.88), Some(0.9)]];
        assert_eq!(a.worst_drop(1, &ok), None);
    }

    impl Anomaly {
        fn after_evaluation_probe(&self, m: &[Vec<Option<f64>>]) -> AnomalyAction {
            let mut s = Anomaly { p: self.p.clone() };
            s.after_evaluation(2, m)
        }
    }
}
