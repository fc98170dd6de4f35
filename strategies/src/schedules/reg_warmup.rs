//! `reg_warmup`: strong regularisation for the first epochs of each new task, then a linear
//! decay to the base strength.

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{Controls, Position, Scheduler};
use serde::{Deserialize, Serialize};

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
        RegWarmupParams::NAME
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

engram_core::component!(scheduler "reg_warmup", "strong regularisation for the first epochs of each new task, then decay to the base strength", RegWarmupParams, build_reg);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::tests::pos;

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
}
