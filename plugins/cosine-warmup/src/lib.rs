//! # cosine-warmup: an engram plugin
//!
//! A [`Scheduler`] that sets the learning rate of every step: a linear warm-up over the first
//! `warmup_steps` steps, then a cosine decay to `min_factor` × the configured rate
//! (Loshchilov & Hutter, *SGDR*, ICLR 2017, eq. 5, without restarts; warm-up as in Goyal et al.
//! 2017). With `per_task = true` (the default) the schedule restarts at every task, so each
//! task starts gently: a large step at the start of a new task is what moves the weights most
//! away from the old tasks.
//!
//! ```toml
//! plugins = ["../target/release/libcosine_warmup.so"]
//! [[scheduler]]
//! type = "cosine-warmup"
//! warmup_steps = 50
//! min_factor = 0.1
//! ```
//!
//! For step `s` of `T` (per task or over the run), warm-up `w`, configured rate `η`:
//! `η_s = η · (s + 1) / w` for `s < w`, else
//! `η_s = η · (m + (1 − m) · ½ (1 + cos(π (s − w) / max(1, T − w))))`.

use engram_core::Result;
use engram_core::config::ParamSource;
use engram_core::plugin::Registrar;
use engram_core::registry::BuildContext;
use engram_core::strategy::{Controls, Position, Scheduler};
use serde::{Deserialize, Serialize};

/// `[[scheduler]] type = "cosine-warmup"` parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CosineWarmupParams {
    /// Steps of linear warm-up (0: none).
    pub warmup_steps: usize,
    /// The final learning rate as a fraction of the configured one, in [0, 1].
    pub min_factor: f64,
    /// Restart the schedule at every task (`false`: one schedule over the whole run).
    pub per_task: bool,
}

impl Default for CosineWarmupParams {
    fn default() -> Self {
        Self {
            warmup_steps: 50,
            min_factor: 0.1,
            per_task: true,
        }
    }
}

/// The schedule (stateless: the factor is a function of the position).
pub struct CosineWarmup {
    p: CosineWarmupParams,
}

impl CosineWarmup {
    /// The learning-rate factor at step `s` of `total` (see the crate docs).
    pub fn factor(&self, s: usize, total: usize) -> f64 {
        let w = self.p.warmup_steps;
        if s < w {
            return (s + 1) as f64 / w as f64;
        }
        let span = total.saturating_sub(w).max(1) as f64;
        let progress = ((s - w) as f64 / span).min(1.0);
        let m = self.p.min_factor;
        m + (1.0 - m) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

impl Scheduler for CosineWarmup {
    fn name(&self) -> &str {
        "cosine-warmup"
    }

    fn controls(&mut self, pos: &Position, controls: &mut Controls) {
        let (s, total) = if self.p.per_task {
            (pos.step_in_task, pos.steps_per_task)
        } else {
            (pos.global_step, pos.steps_per_task * pos.num_tasks)
        };
        controls.lr *= self.factor(s, total);
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: CosineWarmupParams = src.parse()?;
    if !(0.0..=1.0).contains(&p.min_factor) {
        return Err(src.key_error(
            "min_factor",
            format!("`min_factor` must be in [0, 1] (got {})", p.min_factor),
            None,
        ));
    }
    Ok(Box::new(CosineWarmup { p }))
}

fn register(r: &mut Registrar) -> Result<()> {
    r.add(engram_core::registration!(
        scheduler "cosine-warmup",
        "linear warm-up then cosine decay of the learning rate, per task or over the run (plugin)",
        CosineWarmupParams,
        build
    ));
    Ok(())
}

engram_core::declare_plugin!(register);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_by_hand() {
        let s = CosineWarmup {
            p: CosineWarmupParams {
                warmup_steps: 4,
                min_factor: 0.2,
                per_task: true,
            },
        };
        assert!((s.factor(0, 14) - 0.25).abs() < 1e-12);
        assert!((s.factor(3, 14) - 1.0).abs() < 1e-12);
        assert!((s.factor(4, 14) - 1.0).abs() < 1e-12);
        // Halfway through the decay (5 of 10 steps): 0.2 + 0.8 · 0.5 = 0.6.
        assert!((s.factor(9, 14) - 0.6).abs() < 1e-12);
        assert!((s.factor(14, 14) - 0.2).abs() < 1e-12);
        let mut sched = CosineWarmup { p: s.p.clone() };
        let mut c = Controls {
            lr: 0.1,
            reg_scale: 1.0,
            replay_ratio: None,
            replay_delta: 0.0,
        };
        let pos = Position {
            step_in_task: 9,
            steps_per_task: 14,
            ..Position::default()
        };
        sched.controls(&pos, &mut c);
        assert!((c.lr - 0.06).abs() < 1e-12);
    }

    #[test]
    fn min_factor_is_checked() {
        let e = build(
            &ParamSource::from_toml("min_factor = 2.0"),
            &BuildContext::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("min_factor"), "{e}");
    }
}
