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
//! and `accumulate` above it). When it plans, it runs **probe steps** on that step's batch,
//! one per candidate, in order of expected speed, and keeps the first whose measured peak
//! (bytes above the bytes in use before the step — so the budget bounds what a step adds, its
//! activations and gradients, not the process's total: the counting allocator on the CPU, the
//! device pool on CubeCL devices; [`PeakWindow`], the definition of `report.json`'s
//! `memory.step_peak_bytes`) fits the budget:
//!
//! 1. micro-batches `m = 1, 2, 4, …` (gradient accumulation over `m` slices of the batch: the
//!    effective batch is unchanged, and the gradient is exact for models without batch
//!    statistics; with batch norm each slice is normalised with its own, and a warning says
//!    so), and for each
//! 2. the plain step, then hybrid checkpointing with segments of `⌈n/2⌉`, `⌈√n⌉` and 1 block(s)
//!    (`n` blocks).
//!
//! The step changes during a run, so the budget plans again (the budget holds for the whole
//! run, not only its first step):
//!
//! - at the first step;
//! - at each task's start (a forgetting penalty such as EWC's appears after the first task,
//!   replay's rows join the batch);
//! - when the batch has more rows than the plan was probed at (replay's first rows);
//! - after a step of the plan in force added more than the budget (every planned step is
//!   measured): that step is said (a warning on standard error and a `memory` event in
//!   `report.json`), and the next plans past it, among the slower candidates.
//!
//! Accumulation costs little time (the same samples, in smaller GEMMs), recomputation costs a
//! forward pass, so fewer splits come first. A checkpointed probe that takes more than the
//! plain step (small models: the peak is the gradients, not the activations), and under `amp`
//! a mixed-precision step that takes more than the `f32` one (measured once), are warnings
//! too. Each planning (its reason, task, rows, probes and choice) and every step over the
//! budget go into `report.json` (`memory.strategies.budget`: `plans`, `over_budget`; `plan`
//! and `probes` are the last plan and all probes); a change of plan goes to stderr. A budget no
//! candidate meets is an error that names the smallest footprint found. Probe steps'
//! gradients are discarded except the chosen one's, which is this step's result (probes
//! change no state: the step is pure); the discarded probes count in the train phase's peak,
//! not in the step's (`memory.per_task_step_peak_bytes`).

use crate::accumulate::Accumulate;
use crate::checkpoint::Checkpoint;
use crate::standard::Standard;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest, StrategyState, TaskInfo,
};
use engram_core::train::memory::PeakWindow;
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

/// `b` bytes in MiB.
fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// One plan a budget made: when, why, what it probed and what it chose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// The task in progress.
    pub task: usize,
    /// The batch's rows (new plus replayed) the plan was probed at.
    pub rows: usize,
    /// Why it planned: the first step, a task's start, a batch that grew, a step over the
    /// budget.
    pub reason: String,
    /// The chosen plan.
    pub plan: Plan,
    /// The chosen probe's peak above the bytes in use before it, bytes.
    pub peak_bytes: u64,
    /// Every probe of this planning, in order: the plan and its peak, bytes.
    pub probes: Vec<(Plan, u64)>,
}

/// A planned step that added more than the budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverBudget {
    /// The task in progress.
    pub task: usize,
    /// The batch's rows.
    pub rows: usize,
    /// The plan it ran with.
    pub plan: Plan,
    /// What it added above the bytes in use before it, bytes.
    pub peak_bytes: u64,
}

/// The budget strategy (see the module docs).
#[derive(Debug)]
pub struct Budget {
    budget: u64,
    plan: Option<Plan>,
    /// The rows the current plan was probed at.
    rows: usize,
    /// The task in progress.
    task: usize,
    /// Why the next step plans again, and the plan to search past (one that went over).
    replan: Option<(String, Option<Plan>)>,
    plans: Vec<PlanRecord>,
    /// The probes of a planning that found no plan (the run stops there).
    unmet: Vec<(Plan, u64)>,
    over: Vec<OverBudget>,
    warnings: Vec<String>,
    /// Whether a costly plan (checkpointing above the plain step) or AMP above the f32 step
    /// was already said.
    said_costly: bool,
    said_amp: bool,
}

impl Budget {
    /// A strategy for `budget` bytes.
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            plan: None,
            rows: 0,
            task: 0,
            replan: None,
            plans: Vec::new(),
            unmet: Vec::new(),
            over: Vec::new(),
            warnings: Vec::new(),
            said_costly: false,
            said_amp: false,
        }
    }

    /// The plan in force, after the first step.
    pub fn plan(&self) -> Option<Plan> {
        self.plan
    }

    /// Every planning so far, in order.
    pub fn plans(&self) -> &[PlanRecord] {
        &self.plans
    }

    /// Every probe run so far, a planning that found no plan's last: the plan and its peak
    /// bytes.
    pub fn probes(&self) -> Vec<(Plan, u64)> {
        self.plans
            .iter()
            .flat_map(|p| p.probes.clone())
            .chain(self.unmet.iter().copied())
            .collect()
    }

    /// The plan in force when it holds for a step of `rows` rows (it was made for this task
    /// at no fewer rows, and no step of it went over the budget), else why the step must plan
    /// (again) and the plan to search past.
    fn plan_for(&mut self, rows: usize) -> std::result::Result<Plan, (String, Option<Plan>)> {
        let Some(plan) = self.plan else {
            return Err(("the first step".into(), None));
        };
        if let Some(r) = self.replan.take() {
            return Err(r);
        }
        if rows > self.rows {
            return Err((
                format!("the batch grew from {} to {rows} rows", self.rows),
                None,
            ));
        }
        Ok(plan)
    }

    /// Runs the plan in force on `req`, measuring what it adds; a step over the budget is
    /// recorded, said, and makes the next step plan again past this plan.
    fn run_planned(&mut self, plan: Plan, req: StepRequest<'_>) -> Result<StepOutcome> {
        let device = req.batch.y.device();
        let rows = req.batch.len();
        let window = PeakWindow::open(&device);
        let out = run_plan(plan, req)?;
        let added = window.close(&device);
        if added > self.budget {
            self.over.push(OverBudget {
                task: self.task,
                rows,
                plan,
                peak_bytes: added,
            });
            self.warnings.push(format!(
                "a step of task {} ({rows} rows) added {:.2} MiB with {plan}, over the budget of {:.2} MiB (the plan was probed at {} rows): the next step plans again",
                self.task,
                mib(added),
                mib(self.budget),
                self.rows
            ));
            self.replan = Some((
                format!("a step added {:.2} MiB, over the budget", mib(added)),
                Some(plan),
            ));
        }
        Ok(out)
    }

    /// Plans for `req` (`reason`): probes the candidates after `past` (all of them when
    /// `None`), fastest first, and runs the first that fits as this step.
    ///
    /// # Errors
    /// [`Error::MemoryBudget`] when none fits; a probe step's error.
    fn plan_step(
        &mut self,
        req: StepRequest<'_>,
        reason: String,
        past: Option<Plan>,
    ) -> Result<StepOutcome> {
        let device = req.batch.y.device();
        let rows = req.batch.len();
        let mut plans = candidates(req.model.num_blocks(), rows);
        if let Some(p) = past.and_then(|p| plans.iter().position(|c| *c == p)) {
            plans.drain(..=p);
        }
        if req.compute_dtype.is_some() && !self.said_amp {
            self.compare_with_f32(&req);
        }
        let mut probes = Vec::new();
        for plan in plans {
            let probe = StepRequest {
                model: req.model,
                batch: req.batch.clone(),
                loss: req.loss,
                loss_scale: req.loss_scale,
                compute_dtype: req.compute_dtype,
                rng_seed: req.rng_seed,
            };
            let window = PeakWindow::open(&device);
            let out = run_plan(plan, probe)?;
            if window.added(&device) <= self.budget {
                let peak = window.close(&device);
                probes.push((plan, peak));
                self.say_costly(&probes);
                self.adopt(PlanRecord {
                    task: self.task,
                    rows,
                    reason,
                    plan,
                    peak_bytes: peak,
                    probes,
                });
                if plan.micro_batches > 1 && req.model.uses_batch_statistics() {
                    eprintln!(
                        "warning: budget: {} micro-batches, and this model normalises with batch statistics (batch norm): each micro-batch is normalised with its own statistics, so the step is not the plain step's",
                        plan.micro_batches
                    );
                }
                return Ok(out);
            }
            probes.push((plan, window.close_apart(&device)));
            self.say_costly(&probes);
        }
        let e = self.none_fits(&probes, rows);
        self.unmet = probes;
        Err(e)
    }

    /// Keeps `record`'s plan for the steps that follow; says it on standard error when the
    /// plan changes.
    fn adopt(&mut self, record: PlanRecord) {
        if self.plan != Some(record.plan) {
            eprintln!(
                "engram: memory budget {:.1} MiB ({}, task {}, {} rows): {} (probe peak {:.2} MiB)",
                mib(self.budget),
                record.reason,
                record.task,
                record.rows,
                record.plan,
                mib(record.peak_bytes)
            );
        }
        self.plan = Some(record.plan);
        self.rows = record.rows;
        self.plans.push(record);
    }

    /// A warning, once a run, when a checkpointed probe took more than the plain probe of
    /// the same micro-batches: at this size recomputation costs memory instead of saving it.
    fn say_costly(&mut self, probes: &[(Plan, u64)]) {
        let Some(&(plan, peak)) = probes.last() else {
            return;
        };
        let plain = probes
            .iter()
            .find(|(p, _)| p.interval.is_none() && p.micro_batches == plan.micro_batches);
        if let (Some(&(_, base)), Some(_)) = (plain, plan.interval)
            && peak > base
            && !self.said_costly
        {
            self.said_costly = true;
            self.warnings.push(format!(
                "{plan} took {:.2} MiB, {:.2}× the plain step's {:.2} MiB: at this size recomputation costs memory instead of saving it (the step's peak is the parameters' gradients, not the activations)",
                mib(peak),
                peak as f64 / base.max(1) as f64,
                mib(base)
            ));
        }
    }

    /// Under mixed precision (a `compute_dtype` from `amp` above), once a run: the plain step
    /// in `f32` and in the compute dtype, measured on `req`'s batch; a warning when the mixed
    /// one takes more (at small sizes the casts' copies outweigh the halved activations).
    fn compare_with_f32(&mut self, req: &StepRequest<'_>) {
        self.said_amp = true;
        let device = req.batch.y.device();
        let plain = Plan {
            micro_batches: 1,
            interval: None,
        };
        let measure = |dtype, scale| {
            let window = PeakWindow::open(&device);
            let out = run_plan(
                plain,
                StepRequest {
                    model: req.model,
                    batch: req.batch.clone(),
                    loss: req.loss,
                    loss_scale: scale,
                    compute_dtype: dtype,
                    rng_seed: req.rng_seed,
                },
            );
            let peak = window.close_apart(&device);
            out.ok().map(|_| peak)
        };
        let (Some(f32_peak), Some(mixed)) = (
            measure(None, 1.0),
            measure(req.compute_dtype, req.loss_scale),
        ) else {
            return;
        };
        if mixed > f32_peak {
            self.warnings.push(format!(
                "mixed precision ({:?}) took {:.2} MiB for the plain step against {:.2} MiB in f32 ({:.2}×): at this size its casts cost more memory than its halved activations save",
                req.compute_dtype.unwrap_or(engram_core::burn::tensor::DType::F32),
                mib(mixed),
                mib(f32_peak),
                mixed as f64 / f32_peak.max(1) as f64
            ));
        }
    }

    /// The error when no candidate of `probes` fits a batch of `rows` rows, with the warnings
    /// not yet said (a run that stops here has no later step to say them) as notes.
    fn none_fits(&mut self, probes: &[(Plan, u64)], rows: usize) -> Error {
        let notes: String = std::mem::take(&mut self.warnings)
            .iter()
            .map(|w| format!("\n  note: {w}"))
            .collect();
        let (best, smallest) = probes.iter().min_by_key(|(_, p)| *p).copied().unwrap_or((
            Plan {
                micro_batches: 1,
                interval: None,
            },
            0,
        ));
        Error::MemoryBudget(format!(
            "no plan fits the budget of {} bytes ({:.1} MiB) that a training step may add: the smallest footprint found is {} bytes ({:.1} MiB), with {best} (task {}, a batch of {rows} rows){notes}\n  hint: raise `budget`, lower `batch_size` or use a smaller model (then run with --overwrite: the failed run's directory is kept)",
            self.budget,
            mib(self.budget),
            smallest,
            mib(smallest),
            self.task,
        ))
    }
}

impl MemoryStrategy for Budget {
    fn name(&self) -> &str {
        BudgetParams::NAME
    }

    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Execution
    }

    fn before_task(&mut self, task: &TaskInfo) {
        self.task = task.index;
        if self.plan.is_some() {
            self.replan = Some((format!("task {} starts", task.index), None));
        }
    }

    fn step(&mut self, req: StepRequest<'_>, _next: Next<'_>) -> Result<StepOutcome> {
        match self.plan_for(req.batch.len()) {
            Ok(plan) => self.run_planned(plan, req),
            Err((reason, past)) => self.plan_step(req, reason, past),
        }
    }

    fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({
                "plan": self.plan,
                "rows": self.rows,
                "task": self.task,
                "plans": self.plans,
                "over_budget": self.over,
            }),
            tensors: Default::default(),
        })
    }

    fn load_state(&mut self, state: StrategyState) -> Result<()> {
        let m = &state.meta;
        let field = |k: &str| m.get(k).cloned().unwrap_or(serde_json::Value::Null);
        self.plan = serde_json::from_value(field("plan")).unwrap_or(None);
        // A checkpoint of an older version has no rows: the plan holds for any batch.
        self.rows = serde_json::from_value(field("rows")).unwrap_or(usize::MAX);
        self.task = serde_json::from_value(field("task")).unwrap_or(0);
        self.plans = serde_json::from_value(field("plans")).unwrap_or_default();
        self.over = serde_json::from_value(field("over_budget")).unwrap_or_default();
        self.replan = None;
        Ok(())
    }

    fn report(&self) -> Option<serde_json::Value> {
        let probe = |(p, b): &(Plan, u64)| serde_json::json!({"plan": p, "peak_bytes": b});
        Some(serde_json::json!({
            "budget_bytes": self.budget,
            "plan": self.plan,
            "chosen": self.plan.map(|p| p.to_string()),
            "probes": self.probes().iter().map(probe).collect::<Vec<_>>(),
            "plans": self.plans.iter().map(|r| serde_json::json!({
                "task": r.task,
                "rows": r.rows,
                "reason": r.reason,
                "plan": r.plan,
                "chosen": r.plan.to_string(),
                "peak_bytes": r.peak_bytes,
                "probes": r.probes.iter().map(probe).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "over_budget": self.over,
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

    /// A batch of `n` rows of 6 features and 3 classes on `d`.
    fn batch(n: usize, d: &engram_core::burn::tensor::Device) -> engram_core::data::stream::Batch {
        use engram_core::burn::tensor::{Int, Tensor, TensorData};
        let x: Vec<f32> = (0..n * 6).map(|i| (i % 7) as f32 / 7.0).collect();
        let y: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
        engram_core::data::stream::Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [n, 6]),
                d,
            )),
            y: Tensor::<1, Int>::from_data(TensorData::new(y, [n]), d),
            weights: None,
            logit_mask: None,
            refs: (0..n as u32)
                .map(|i| engram_core::data::stream::SampleRef { task: 0, index: i })
                .collect(),
            new_samples: n,
        }
    }

    /// The budget plans again at the first step, when the batch grows (not when it shrinks)
    /// and at a task's start; a planned step over the budget is said once as a warning, makes
    /// the next step plan past it (here: nothing fits 1 byte, an error naming the task and the
    /// rows); the state carries the plan, its rows and the plans made.
    #[test]
    fn plans_again_when_the_step_changes_and_says_a_step_over_the_budget() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = engram_core::burn::tensor::Device::flex().autodiff();
        let mut g = engram_core::rng::stream(1, "init", 0, 0);
        let m = engram_core::model::mlp::build_mlp(
            6,
            &[32, 32, 32],
            3,
            engram_core::model::mlp::ActivationKind::Tanh,
            0.0,
            &mut g,
            &d,
        );
        let loss = crate::test_util::CeL2(1e-3);
        let mut b = Budget::new(1 << 30);
        let step = |b: &mut Budget, n: usize| {
            let req = StepRequest {
                model: &m,
                batch: batch(n, &d),
                loss: &loss,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed: 0,
            };
            b.step(req, Next::new(&mut Vec::new()))
        };
        for n in [8, 8, 4, 12] {
            step(&mut b, n).unwrap();
        }
        b.before_task(&TaskInfo {
            index: 1,
            num_tasks: 2,
            classes: vec![1, 2],
            train_samples: 12,
            joint: false,
        });
        step(&mut b, 12).unwrap();
        step(&mut b, 12).unwrap();
        let made: Vec<(usize, usize, &str)> = b
            .plans()
            .iter()
            .map(|p| (p.task, p.rows, p.reason.as_str()))
            .collect();
        assert_eq!(
            made,
            [
                (0, 8, "the first step"),
                (0, 12, "the batch grew from 8 to 12 rows"),
                (1, 12, "task 1 starts")
            ]
        );
        let plain = Plan {
            micro_batches: 1,
            interval: None,
        };
        assert!(
            b.plans()
                .iter()
                .all(|p| p.plan == plain && p.probes.len() == 1)
        );
        assert!(b.take_warnings().is_empty());
        // The state carries the plan, its rows, the task and the plans made.
        let mut resumed = Budget::new(1 << 30);
        resumed.load_state(b.state().unwrap()).unwrap();
        assert_eq!(
            (resumed.plan(), resumed.rows, resumed.task, resumed.plans()),
            (Some(plain), 12, 1, b.plans())
        );

        // The same plan against 1 byte: the step is taken and said, once.
        b.budget = 1;
        step(&mut b, 12).unwrap();
        let said = b.take_warnings();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("a step of task 1 (12 rows) added ")
                && said[0].contains("with plain step, 1 micro-batch(es), over the budget"),
            "{}",
            said[0]
        );
        assert_eq!(b.over.len(), 1);
        assert!(b.over[0].peak_bytes > 1);
        assert!(b.take_warnings().is_empty());
        // The next step plans past the plain step; none of the slower plans fits either.
        let e = step(&mut b, 12).err().unwrap().to_string();
        assert!(
            e.contains("no plan fits the budget of 1 bytes")
                && e.contains("(task 1, a batch of 12 rows)"),
            "{e}"
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
