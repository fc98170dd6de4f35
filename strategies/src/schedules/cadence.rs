//! `cadence`: evaluate every task only after every k-th task (the diagonal always).

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::Scheduler;
use serde::{Deserialize, Serialize};

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
        CadenceParams::NAME
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

engram_core::component!(scheduler "cadence", "evaluate every task only every k tasks (the diagonal always)", CadenceParams, build_cadence);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cadence_evaluates_every_k_and_the_last() {
        let c = Cadence { every: 3 };
        let all: Vec<bool> = (0..7).map(|t| c.evaluate_all(t, 7).unwrap()).collect();
        assert_eq!(all, vec![false, false, true, false, false, true, true]);
    }
}
