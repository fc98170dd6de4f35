//! `anomaly`: the forgetting-anomaly handler, which rolls a task back and retries it with
//! stronger protection when an old task's accuracy falls.

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{AnomalyAction, Scheduler};
use serde::{Deserialize, Serialize};

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
        AnomalyParams::NAME
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
    // A retry adds replay_step to the replay ratio, which sizes each step's memory rows.
    if !(0.0..=super::replay_ratio::MAX_RATIO).contains(&p.replay_step) {
        return Err(src.key_error(
            "replay_step",
            format!(
                "anomaly: replay_step {} must be in [0, {}] (a retry adds it to the replay ratio)",
                p.replay_step,
                super::replay_ratio::MAX_RATIO
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

engram_core::component!(scheduler "anomaly", "catch forgetting as it happens: roll back the task and retry it with stronger protection", AnomalyParams, build_anomaly);

#[cfg(test)]
mod tests {
    use super::*;

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
