//! `engram bench memory`: peak memory and step time of the memory strategies on one model.

use super::BenchLoss;
use super::model::{BenchModel, Inputs};
use engram_core::Result;
use engram_core::burn::tensor::Device;
use engram_core::model::Model;
use engram_core::rng;
use engram_core::strategy::StepRequest;
use serde::Serialize;
use std::time::Instant;

/// One row of `engram bench memory`.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    /// The memory chain (`standard`, `checkpoint`, `amp`, `checkpoint+amp`, `op-level`,
    /// `checkpoint+op-level`) or the forward pass (`forward_tracked`, `eval_no_graph`).
    pub name: String,
    /// Peak bytes of a training step above the bytes in use just before it (bytes).
    pub peak_bytes: u64,
    /// Mean seconds per step (s).
    pub step_seconds: f64,
    /// `peak_bytes` relative to `standard` (to `forward_tracked` for the forward rows).
    pub peak_ratio: f64,
    /// `step_seconds` relative to `standard` (to `forward_tracked` for the forward rows).
    pub time_ratio: f64,
    /// Parameters (count) of the row's model that train (all but a `lora` row's frozen base).
    pub trainable_params: usize,
    /// Bytes of the optimiser's state after the row's steps, as its record serialises it
    /// (AdamW: two moments per trainable parameter); 0 without `--optimizer`.
    pub optimizer_state_bytes: u64,
    /// Bytes the row's model's parameters take as the device holds them
    /// ([`Model::param_bytes`]: `f32`, or a QLoRA row's packed base), adapters included.
    pub parameter_bytes: u64,
    /// The training step's whole footprint (bytes): the model's parameters (`parameter_bytes`:
    /// the frozen base and adapters included), the optimiser's state and the step's own peak
    /// (`peak_bytes`: activations, gradients, the update's temporaries).
    pub training_peak_bytes: u64,
}

/// The training-step rows `--rows` can name, in the order they run: the real chains as a run
/// builds them, and Burn's op-level checkpointing alone and with segments.
pub const STEP_ROWS: [&str; 6] = [
    "standard",
    "checkpoint",
    "amp",
    "checkpoint+amp",
    "op-level",
    "checkpoint+op-level",
];

/// The LoRA rows (rank `MemoryOptions::lora_rank` on the model's query and value projections,
/// Hu et al. 2021's setting), alone and with segment checkpointing and AMP, and QLoRA's
/// (the same adapters over a base held in 4-bit blocks of 32, [`super::bench_qlora`]) alone and
/// with checkpointing: the adapters' memory against full fine-tuning's (`standard`). They need
/// a model with `query` and `value` layers (`--model bert` or `llama`).
pub const LORA_ROWS: [&str; 5] = [
    "lora",
    "lora+checkpoint",
    "lora+checkpoint+amp",
    "qlora",
    "qlora+checkpoint",
];

/// The pseudo-row that stands for the two forward-pass rows (`forward_tracked`,
/// `eval_no_graph`).
pub const FORWARD_ROWS: &str = "forward";

/// What `engram bench memory` measures.
#[derive(Clone, Debug)]
pub struct MemoryOptions {
    /// Step rows from [`STEP_ROWS`] (and [`FORWARD_ROWS`]), in any order; `standard` is always
    /// measured first (every ratio's reference) and the rows run in [`STEP_ROWS`]' order.
    pub rows: Vec<String>,
    /// Blocks per checkpoint segment (`None`: about √blocks, as before).
    pub every: Option<usize>,
    /// Compute dtype of the `…amp` rows.
    pub amp: engram_strategies::amp::Precision,
    /// Measured steps per row (at least 1).
    pub steps: usize,
    /// Unmeasured steps before them.
    pub warmup: usize,
    /// The optimiser each measured step also updates with (`None`: forward and backward only).
    pub optimizer: Option<super::BenchOptimizer>,
    /// The LoRA rows' rank.
    pub lora_rank: usize,
}

/// What `engram bench memory` found.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    /// The rows: the step rows, then the forward rows when asked for.
    pub rows: Vec<MemoryRow>,
    /// Blocks per checkpoint segment of the `checkpoint…` rows.
    pub every: usize,
    /// The model's blocks.
    pub blocks: usize,
    /// The model's parameters.
    pub params: usize,
    /// Values per scale of the `qlora` rows' 4-bit base ([`super::bench_qlora`]), when measured.
    pub qlora_block: Option<usize>,
}

/// Runs `f(step)` `warmup + steps` times; the row holds the highest peak above the bytes in use
/// at the start of a measured call, and the mean seconds per measured call.
///
/// On the CPU the peak is the counting allocator's heap peak. A CubeCL device pool reports
/// current bytes only, so there each call starts from a cleaned-up pool (`memory_cleanup` after
/// a `sync`) and the peak is the growth of its *reserved* bytes over the call: the pages the step
/// needed at once, an upper estimate at the pool's page granularity.
fn measure(
    device: &Device,
    name: &str,
    warmup: usize,
    steps: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<MemoryRow> {
    use engram_core::train::memory::{heap, reset_heap_peak};
    let pool = |d: &Device| {
        let _ = d.sync();
        d.memory_pool_usage().map(|u| u.bytes_reserved)
    };
    let (mut peak, mut secs) = (0u64, 0.0);
    for s in 0..warmup + steps {
        let before = if pool(device).is_some() {
            device.memory_cleanup();
            pool(device).unwrap_or(0)
        } else {
            reset_heap_peak();
            heap().map_or(0, |h| h.current)
        };
        let t = Instant::now();
        f(s)?;
        let after = pool(device);
        let dt = t.elapsed().as_secs_f64();
        if s >= warmup {
            let top = after.unwrap_or_else(|| heap().map_or(0, |h| h.peak));
            peak = peak.max(top.saturating_sub(before));
            secs += dt;
        }
    }
    Ok(MemoryRow {
        name: name.into(),
        peak_bytes: peak,
        step_seconds: secs / steps.max(1) as f64,
        peak_ratio: 1.0,
        time_ratio: 1.0,
        trainable_params: 0,
        optimizer_state_bytes: 0,
        parameter_bytes: 0,
        training_peak_bytes: 0,
    })
}

/// Sets every row's ratios relative to the first row of `rows`.
fn relative_to(rows: &mut [MemoryRow]) {
    if rows.is_empty() {
        return;
    }
    let (p0, t0) = (
        rows[0].peak_bytes.max(1) as f64,
        rows[0].step_seconds.max(1e-12),
    );
    for r in rows.iter_mut() {
        r.peak_ratio = r.peak_bytes as f64 / p0;
        r.time_ratio = r.step_seconds / t0;
    }
}

/// The memory chain of the row `name` of [`STEP_ROWS`], as a run builds it (accumulation →
/// precision → execution): AMP in `amp` for the `…amp` rows, segments of `interval` blocks for
/// the `checkpoint…` rows, the standard step otherwise.
fn chain(
    name: &str,
    amp: engram_strategies::amp::Precision,
    interval: usize,
) -> Vec<Box<dyn engram_core::strategy::MemoryStrategy>> {
    use engram_strategies::amp::{Amp, AmpParams};
    let name = name
        .trim_start_matches('q')
        .trim_start_matches("lora")
        .trim_start_matches('+');
    let mut chain: Vec<Box<dyn engram_core::strategy::MemoryStrategy>> = Vec::new();
    if name.ends_with("amp") {
        chain.push(Box::new(Amp::new(AmpParams {
            dtype: amp,
            ..AmpParams::default()
        })));
    }
    if name.starts_with("checkpoint") {
        chain.push(Box::new(engram_strategies::checkpoint::Checkpoint::new(
            interval,
        )));
    } else {
        chain.push(Box::new(engram_strategies::standard::Standard));
    }
    chain
}

/// Peak memory and step time of the rows of `opt` on `model` at batch `batch` with synthetic
/// input ([`Inputs`]), measured in one process with the counting allocator (CPU) or the device
/// pool's reserved bytes (CubeCL devices, see `measure`); ratios to `standard`. The rows:
/// `standard`, `checkpoint` (segments of `opt.every` blocks, default about √blocks), `amp`
/// (compute in `opt.amp`, dynamic loss scaling), `checkpoint+amp`, and Burn's op-level
/// checkpointing alone (`op-level`) and with segments (`checkpoint+op-level`, on a second copy of
/// the model built on a device with the Balanced strategy). With [`FORWARD_ROWS`], two more
/// compare a forward pass with its autodiff graph (`forward_tracked`) and evaluation on the
/// inference copy without a graph (`eval_no_graph`); their ratios are to `forward_tracked`.
///
/// # Errors
/// Propagates a failed step, and a BERT checkpoint that does not load.
pub fn memory(
    device: &Device,
    model: &BenchModel,
    batch: usize,
    opt: &MemoryOptions,
) -> Result<MemoryReport> {
    let ad = device.clone().autodiff();
    let mut r = rng::stream(0, "bench-memory", 0, 0);
    ad.seed(1);
    let r_op = r.clone();
    let net = model.build(&mut r, &ad)?;
    let inputs = Inputs::draw(model, batch, &mut r);
    let blocks = net.num_blocks();
    let every = opt.every.unwrap_or_else(|| {
        engram_strategies::checkpoint::Checkpoint::new(0).segments(blocks)[0].len()
    });
    let wanted = |n: &str| n == "standard" || opt.rows.iter().any(|r| r == n);
    // Burn's op-level checkpointing is a property of the autodiff device: its rows use the same
    // model and weights built on a device with the Balanced strategy.
    let bal = ad.clone().gradient_checkpointing();
    let op_net = if STEP_ROWS[4..].iter().any(|n| wanted(n)) {
        bal.seed(1);
        Some(model.build(&mut r_op.clone(), &bal)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let lora_net = if LORA_ROWS[..3].iter().any(|n| wanted(n)) {
        Some(super::bench_lora(opt.lora_rank, false).adapt(net.clone())?)
    } else {
        None
    };
    let qlora = LORA_ROWS[3..]
        .iter()
        .any(|n| wanted(n))
        .then(|| super::bench_qlora(opt.lora_rank, &net));
    let qlora_block = qlora.as_ref().map(|q| q.params().block);
    let qlora_net = qlora.map(|q| q.adapt(net.clone())).transpose()?;
    for name in STEP_ROWS.into_iter().chain(LORA_ROWS).filter(|n| wanted(n)) {
        let (m, dev) = match (&op_net, &lora_net, &qlora_net) {
            (Some(op), _, _) if name.ends_with("op-level") => (op, &bal),
            (_, Some(l), _) if name.starts_with("lora") => (l, &ad),
            (_, _, Some(q)) if name.starts_with("qlora") => (q, &ad),
            _ => (&net, &ad),
        };
        let lr = opt.optimizer.map_or(0.0, |o| o.lr(model));
        rows.push(step_row(
            device,
            dev,
            name,
            m,
            &inputs,
            (batch, every, lr),
            opt,
        )?);
    }
    drop(op_net);
    let steps = rows.len();
    relative_to(&mut rows);
    if wanted(FORWARD_ROWS) {
        forward_rows(device, &ad, &net, &inputs, opt.steps, &mut rows)?;
        relative_to(&mut rows[steps..]);
    }
    Ok(MemoryReport {
        rows,
        every,
        blocks,
        params: net.numel(),
        qlora_block,
    })
}

/// The row `name`: `opt.warmup + opt.steps` steps of `model` through the row's memory chain
/// (and `opt.optimizer`'s update at rate `lr` when set, on a copy of `model` that the row
/// keeps), batches of `batch` rows, checkpoint segments of `every` blocks; measured by
/// `measure`, with the row's trainable parameters, optimiser state and training peak.
fn step_row(
    device: &Device,
    dev: &Device,
    name: &str,
    model: &Model,
    inputs: &Inputs,
    (batch, every, lr): (usize, usize, f64),
    opt: &MemoryOptions,
) -> Result<MemoryRow> {
    use engram_core::strategy::Next;
    let mut chain = chain(name, opt.amp, every);
    let mut optim = opt.optimizer.map(|o| o.build());
    let mut m = Some(model.clone());
    let mut row = measure(device, name, opt.warmup, opt.steps, |s| {
        let current = m.take().unwrap_or_else(|| model.clone());
        let out = Next::new(&mut chain).run(StepRequest {
            model: &current,
            batch: inputs.batch(dev, 0, batch),
            loss: &BenchLoss,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: s as u64,
        })?;
        m = Some(match optim.as_mut() {
            Some(o) if !out.skipped => o.step(lr, current, out.grads),
            _ => {
                drop(out);
                current
            }
        });
        Ok(())
    })?;
    row.trainable_params = model.trainable_numel();
    row.optimizer_state_bytes = optim
        .as_ref()
        .and_then(|o| o.into_bytes().ok())
        .map_or(0, |b| b.len() as u64);
    row.parameter_bytes = model.param_bytes();
    row.training_peak_bytes = row.parameter_bytes + row.optimizer_state_bytes + row.peak_bytes;
    Ok(row)
}

/// Evaluation's rows: a forward pass of `inputs` on the inference copy of `net` (no autodiff
/// graph, on `device`) against the same forward on `ad` with its graph kept alive (what
/// evaluating on the training model would hold).
fn forward_rows(
    device: &Device,
    ad: &Device,
    net: &Model,
    inputs: &Inputs,
    steps: usize,
    rows: &mut Vec<MemoryRow>,
) -> Result<()> {
    use engram_core::burn::module::Module as _;
    use engram_core::model::{Activation, ForwardCtx};
    let batch = inputs.len();
    let valid = net.valid();
    for name in ["forward_tracked", "eval_no_graph"] {
        rows.push(measure(device, name, 1, steps, |_| {
            let on = if name == "eval_no_graph" { device } else { ad };
            let x = Activation::Flat(inputs.tensor(inputs.xs.clone(), batch, on));
            let logits = if name == "eval_no_graph" {
                valid.forward(x, &ForwardCtx::default())
            } else {
                net.forward(x, &ForwardCtx::default())
            };
            let _ = logits.sum().into_scalar::<f32>();
            Ok(())
        })?);
    }
    Ok(())
}

/// The seed write-up's claims for BERT-large (on a GPU), by row: `(row, peak ratio, time
/// ratio)` to `standard`. Segment checkpointing: −42 % memory at +15 % time; checkpointing with
/// mixed precision: memory to a third.
pub const CLAIMS: [(&str, Option<f64>, Option<f64>); 2] = [
    ("checkpoint", Some(0.58), Some(1.15)),
    ("checkpoint+amp", Some(1.0 / 3.0), None),
];

/// The write-up's claim for row `name`, as the tables print it (`0.58× at 1.15×`,
/// `0.33×`); `None` where it makes none.
pub fn claim(name: &str) -> Option<String> {
    let (_, peak, time) = CLAIMS.iter().find(|(n, ..)| *n == name)?;
    let peak = peak.map_or("–".into(), |p| format!("{p:.2}×"));
    Some(match time {
        Some(t) => format!("{peak} at {t:.2}×"),
        None => peak,
    })
}
