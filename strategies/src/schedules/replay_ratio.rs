//! `replay_ratio`: the replay ratio rising linearly from the second task to the last.

use engram_core::Result;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{Controls, Position, Scheduler};
use serde::{Deserialize, Serialize};

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
pub const REGISTRATION: engram_core::registry::Registration = engram_core::registration!(scheduler "replay_ratio", "replay ratio rising linearly from the second task to the last", ReplayRatioParams, build_ratio);
engram_core::component!(ReplayRatioParams, scheduler "replay_ratio");

#[cfg(test)]
mod tests {
    use super::*;

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
}
