//! `replay_ratio`: the replay ratio rising linearly from the second task to the last.

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{Controls, Position, Scheduler};
use serde::{Deserialize, Serialize};

/// The largest ratio, memory rows per new row: the `replay` strategy's own bound on `ratio`.
pub const MAX_RATIO: f64 = 10.0;

/// `[[scheduler]] type = "replay_ratio"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayRatioParams {
    /// Ratio on the second task, in `[0, 10]` ([`MAX_RATIO`]). Default 0.2.
    pub start: f64,
    /// Ratio on the last task (linear in between), in `[0, 10]`. Default 0.5.
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
        ReplayRatioParams::NAME
    }
    fn controls(&mut self, pos: &Position, c: &mut Controls) {
        c.replay_ratio = Some(self.ratio(pos.task, pos.num_tasks));
    }
}

fn build_ratio(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let p: ReplayRatioParams = src.parse()?;
    // A ratio sizes every step's memory rows (`round(ratio × batch)`): 1e308 would ask for
    // more rows than memory holds.
    for (key, v) in [("start", p.start), ("end", p.end)] {
        if !(0.0..=MAX_RATIO).contains(&v) {
            return Err(src.key_error(
                key,
                format!("replay_ratio: {key} = {v} must be in [0, {MAX_RATIO}] (memory rows per new row)"),
                Some("the replay strategy's `ratio` takes the same range; 0.2 to 1.0 is usual".into()),
            ));
        }
    }
    Ok(Box::new(ReplayRatio { p }))
}

engram_core::component!(scheduler "replay_ratio", "replay ratio rising linearly from the second task to the last", ReplayRatioParams, build_ratio);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue32_replay_ratio_out_of_range_is_refused_at_validation() {
        let cx = BuildContext::default();
        for bad in [
            "start = 1e308",
            "end = 1e308",
            "start = -0.1",
            "end = nan",
            "start = 10.5",
        ] {
            let e = build_ratio(&ParamSource::from_toml(bad), &cx)
                .err()
                .unwrap();
            // NaN is refused by the check every key gets (finite values), before the range.
            let s = e.to_string();
            assert!(
                s.contains("must be in [0, 10]") || s.contains("is not a finite number"),
                "{bad}: {e}"
            );
            assert!(!e.to_string().contains("00000000"), "{bad}: {e}");
        }
        for good in ["start = 0.0\nend = 10.0", "start = 1.0\nend = 0.0"] {
            assert!(
                build_ratio(&ParamSource::from_toml(good), &cx).is_ok(),
                "{good}"
            );
        }
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
}
