//! `budget`: fit a training step into a memory budget by choosing the checkpoint interval and
//! the micro-batch size.
//!
//! ```toml
//! [[memory]]
//! type = "budget"
//! budget = "1.5 GiB"
//! ```
//!
//! An execution-layer strategy (it replaces `standard`/`checkpoint`, and composes with `amp`
//! and `accumulate` above it). At its first step it runs **probe steps** on that step's batch,
//! one per candidate, in order of expected speed, and keeps the first whose measured peak
//! (bytes above the bytes in use before the step — so the budget bounds what a step adds, its
//! activations and gradients, not the process's total: the counting allocator on the CPU, the
//! device pool on CubeCL devices) fits the budget:
//!
//! 1. micro-batches `m = 1, 2, 4, …` (gradient accumulation over `m` slices of the batch: the
//!    effective batch is unchanged, and the gradient is exact for models without batch
//!    statistics; with batch norm each slice is normalised with its own, and a warning says
//!    so), and for each
//! 2. the plain step, then hybrid checkpointing with segments of `⌈n/2⌉`, `⌈√n⌉` and 1 block(s)
//!    (`n` blocks).
//!
//! Accumulation costs little time (the same samples, in smaller GEMMs), recomputation costs a
//! forward pass, so fewer splits come first. The choice and every probe's peak go to stderr and
//! into `report.json` (`memory.strategies.budget`); a budget no candidate meets is an error
//! that names the smallest footprint found. Probe steps' gradients are discarded except the
//! chosen one's, which is this step's result (probes change no state: the step is pure).

use crate::accumulate::Accumulate;
use crate::checkpoint::Checkpoint;
use crate::standard::Standard;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest, StrategyState,
};
use engram_core::train::memory::{heap, reset_heap_peak};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// `[[memory]] type = "budget"` parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetParams {
    /// Peak bytes a training step may add above the bytes in use before it (parameters,
    /// optimiser state and the data set are not counted: it bounds the step's activations and
    /// gradients, the part checkpointing and micro-batches change), as a number of bytes or a
    /// number with a unit
    /// (`B`, `KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB`), e.g. `"1.5 GiB"`.
    pub budget: String,
}

/// Parses `"1.5 GiB"`, `"800MB"`, `"1048576"` into bytes.
///
/// # Errors
/// A message naming the accepted units.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (for example \"1.5 GiB\")"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}` (use B, KiB, MiB, GiB, KB, MB or GB)"
            ));
        }
    };
    if !(n.is_finite() && n > 0.0) {
        return Err(format!("`{s}` must be a positive size"));
    }
    Ok((n * mult).round() as u64)
}

/// One way to run a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Micro-batches per step (1: none).
    pub micro_batches: usize,
    /// Blocks per checkpoint segment (`None`: the plain step).
    pub interval: Option<usize>,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.interval {
            None => write!(f, "plain step")?,
            Some(k) => write!(f, "checkpoint segments of {k} block(s)")?,
        }
        write!(f, ", {} micro-batch(es)", self.micro_batches)
    }
}

/// The candidates for a model of `blocks` blocks at batch `batch`, fastest first.
pub fn candidates(blocks: usize, batch: usize) -> Vec<Plan> {
    let mut intervals = vec![None];
    for k in [
        blocks.div_ceil(2),
        (blocks as f64).sqrt().ceil() as usize,
        1,
    ] {
        if k < blocks && !intervals.contains(&Some(k)) {
            intervals.push(Some(k));
        }
    }
    let mut out = Vec::new();
    let mut m = 1;
    while m <= batch.max(1) {
        for &interval in &intervals {
            out.push(Plan {
                micro_batches: m,
                interval,
            });
        }
        m *= 2;
    }
    out
}

/// Runs one step of `req` with `plan`.
fn run_plan(plan: Plan, req: StepRequest<'_>) -> Result<StepOutcome> {
    let mut exec: Vec<Box<dyn MemoryStrategy>> = vec![match plan.interval {
        None => Box::new(Standard),
        Some(k) => Box::new(Checkpoint::new(k)),
    }];
    if plan.micro_batches > 1 {
        Accumulate::new(plan.micro_batches).step(req, Next::new(&mut exec))
    } else {
        Next::new(&mut exec).run(req)
    }
}

/// The budget strategy (see the module docs).
#[derive(Debug)]
pub struct Budget {
    budget: u64,
    plan: Option<Plan>,
    probes: Vec<(Plan, u64)>,
}

impl Budget {
    /// A strategy for `budget` bytes.
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            plan: None,
            probes: Vec::new(),
        }
    }

    /// The chosen plan, after the first step.
    pub fn plan(&self) -> Option<Plan> {
        self.plan
    }

    /// Every probe run so far: the plan and its peak bytes.
    pub fn probes(&self) -> &[(Plan, u64)] {
        &self.probes
    }
}

fn peak_above(before: u64) -> u64 {
    heap().map_or(0, |h| h.peak.saturating_sub(before))
}

impl MemoryStrategy for Budget {
    fn name(&self) -> &str {
        BudgetParams::NAME
    }

    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Execution
    }

    fn step(&mut self, req: StepRequest<'_>, _next: Next<'_>) -> Result<StepOutcome> {
        if let Some(plan) = self.plan {
            return run_plan(plan, req);
        }
        let plans = candidates(req.model.num_blocks(), req.batch.len());
        for plan in plans {
            let probe = StepRequest {
                model: req.model,
                batch: req.batch.clone(),
                loss: req.loss,
                loss_scale: req.loss_scale,
                compute_dtype: req.compute_dtype,
                rng_seed: req.rng_seed,
            };
            let before = heap().map_or(0, |h| h.current);
            reset_heap_peak();
            let out = run_plan(plan, probe)?;
            let peak = peak_above(before);
            self.probes.push((plan, peak));
            if peak <= self.budget {
                self.plan = Some(plan);
                eprintln!(
                    "engram: memory budget {:.1} MiB: {plan} (probe peak {:.1} MiB)",
                    self.budget as f64 / 1048576.0,
                    peak as f64 / 1048576.0
                );
                if plan.micro_batches > 1 && req.model.uses_batch_statistics() {
                    eprintln!(
                        "warning: budget: {} micro-batches, and this model normalises with batch statistics (batch norm): each micro-batch is normalised with its own statistics, so the step is not the plain step's",
                        plan.micro_batches
                    );
                }
                return Ok(out);
            }
        }
        let (best, smallest) = self
            .probes
            .iter()
            .min_by_key(|(_, p)| *p)
            .copied()
            .unwrap_or((
                Plan {
                    micro_batches: 1,
                    interval: None,
                },
                0,
            ));
        Err(Error::MemoryBudget(format!(
            "no plan fits the budget of {} bytes ({:.1} MiB) that a training step may add: the smallest footprint found is {} bytes ({:.1} MiB), with {best}\n  hint: raise `budget`, lower `batch_size` or use a smaller model (then run with --overwrite: the failed run's directory is kept)",
            self.budget,
            self.budget as f64 / 1048576.0,
            smallest,
            smallest as f64 / 1048576.0
        )))
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({ "plan": self.plan }),
            tensors: Default::default(),
        })
    }

    fn load_state(&mut self, state: StrategyState) -> Result<()> {
        self.plan = serde_json::from_value(state.meta["plan"].clone()).unwrap_or(None);
        Ok(())
    }

    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "budget_bytes": self.budget,
            "plan": self.plan,
            "chosen": self.plan.map(|p| p.to_string()),
            "probes": self.probes.iter().map(|(p, b)| serde_json::json!({"plan": p, "peak_bytes": b})).collect::<Vec<_>>(),
        }))
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let p: BudgetParams = src.parse()?;
    if p.budget.is_empty() {
        return Err(src.key_error(
            "budget",
            "budget: set `budget`, for example \"1.5 GiB\"".into(),
            None,
        ));
    }
    let bytes = parse_bytes(&p.budget).map_err(|m| src.key_error("budget", m, None))?;
    Ok(Box::new(Budget::new(bytes)))
}

engram_core::component!(memory "budget", "fit a step into a memory budget: choose the checkpoint interval and micro-batch size by probe steps", BudgetParams, build);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("1.5 GiB").unwrap(), 1_610_612_736);
        assert_eq!(parse_bytes("800MB").unwrap(), 800_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("2 kib").unwrap(), 2048);
        assert!(parse_bytes("1.5 TiB").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("0 MiB").is_err());
    }

    #[test]
    fn candidates_come_fastest_first() {
        let c = candidates(9, 4);
        let show: Vec<String> = c
            .iter()
            .map(|p| format!("{:?}/{}", p.interval, p.micro_batches))
            .collect();
        assert_eq!(
            show,
            [
                "None/1",
                "Some(5)/1",
                "Some(3)/1",
                "Some(1)/1",
                "None/2",
                "Some(5)/2",
                "Some(3)/2",
                "Some(1)/2",
                "None/4",
                "Some(5)/4",
                "Some(3)/4",
                "Some(1)/4"
            ]
        );
    }

    #[test]
    fn budget_must_be_a_size() {
        let cx = BuildContext::default();
        let e = build(&ParamSource::from_toml("budget = \"big\""), &cx)
            .err()
            .unwrap();
        assert!(e.to_string().contains("is not a size"), "{e}");
        let e = build(&ParamSource::from_toml(""), &cx).err().unwrap();
        assert!(e.to_string().contains("set `budget`"), "{e}");
    }
}
