//! `lr`: learning-rate schedules (constant, cosine, step, linear) built on burn-optim's
//! schedulers, with warm-up, per task or over the whole run, and per-task factors.

use engram_core::Result;
use engram_core::burn::optim::lr_scheduler::{
    constant::ConstantLr, cosine::CosineAnnealingLrSchedulerConfig,
    linear::LinearLrSchedulerConfig, module_lr_scheduler::ModuleLrScheduler,
    step::StepLrSchedulerConfig,
};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{Controls, Position, Scheduler};
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
        LrParams::NAME
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

engram_core::component!(scheduler "lr", "learning-rate schedule (constant, cosine, step, linear; warm-up; per task or per run)", LrParams, build_lr);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::tests::pos;

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
}
