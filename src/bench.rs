//! `engram bench throughput`: training samples/s of the runner's MLP step.
//!
//! The step measured is the trainer's own: a batch gathered from host memory and uploaded, the
//! `standard` memory strategy's forward and backward, cross-entropy, and burn-optim's SGD with
//! momentum — the Split-FMNIST example's settings (MLP 784-400-400-10, batch 128, lr 0.05,
//! momentum 0.9) on synthetic inputs. `bench/throughput_torch.py` runs the identical loop in
//! plain PyTorch for comparison.

pub mod torch;

use engram_core::Result;
use engram_core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram_core::data::stream::{Batch, SampleRef};
use engram_core::model::mlp::{ActivationKind, build_mlp};
use engram_core::rng;
use engram_core::strategy::StepRequest;
use rand::Rng as _;
use serde::Serialize;
use std::time::Instant;

/// The result of a throughput run.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Training samples per second (samples/s), measured steps only.
    pub train_samples_per_s: f64,
    /// Seconds per step (s).
    pub step_seconds: f64,
    /// Batch size (samples).
    pub batch: usize,
    /// Steps measured (after warm-up).
    pub steps: usize,
}

/// Measures `steps` training steps at batch `batch` after `warmup` unmeasured ones.
///
/// # Errors
/// Propagates a failed step (a diverged loss).
pub fn throughput(
    device: &Device,
    batch: usize,
    steps: usize,
    warmup: usize,
) -> Result<Throughput> {
    let ad = device.clone().autodiff();
    let mut r = rng::stream(0, "bench", 0, 0);
    let mut model = build_mlp(784, &[400, 400], 10, ActivationKind::Relu, 0.0, &mut r, &ad);
    let mut optim = engram_core::train::trainer::sgd(0.9, None);
    let pool = 16;
    let xs: Vec<f32> = (0..pool * batch * 784)
        .map(|_| r.random_range(-1.0..1.0))
        .collect();
    let ys: Vec<i64> = (0..pool * batch).map(|_| r.random_range(0..10)).collect();
    let lr = 0.05;
    let refs: Vec<SampleRef> = (0..batch)
        .map(|i| SampleRef {
            task: 0,
            index: i as u32,
        })
        .collect();
    let mut start = Instant::now();
    for s in 0..warmup + steps {
        if s == warmup {
            start = Instant::now();
        }
        let k = s % pool;
        let x = xs[k * batch * 784..(k + 1) * batch * 784].to_vec();
        let y = ys[k * batch..(k + 1) * batch].to_vec();
        let b = Batch {
            x: Tensor::from_data(TensorData::new(x, [batch, 784]), &ad),
            y: Tensor::<1, Int>::from_data(TensorData::new(y, [batch]), &ad),
            weights: None,
            logit_mask: None,
            refs: refs.clone(),
            new_samples: batch,
        };
        let loss = BenchLoss;
        let out = engram_strategies::standard::plain_step(StepRequest {
            model: &model,
            batch: b,
            loss: &loss,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: s as u64,
        })?;
        model = optim.step(lr, model, out.grads);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Throughput {
        train_samples_per_s: (steps * batch) as f64 / secs,
        step_seconds: secs / steps as f64,
        batch,
        steps,
    })
}

/// Mean cross-entropy, as the trainer's loss computes it with no forgetting strategy.
struct BenchLoss;

impl engram_core::strategy::LossFn for BenchLoss {
    fn loss(
        &self,
        _model: &engram_core::model::Model,
        logits: Tensor<2>,
        batch: &Batch,
    ) -> (Tensor<1>, Tensor<1>) {
        let ce = engram_core::train::trainer::per_sample_cross_entropy(logits, batch);
        (ce.clone().mean(), ce)
    }
}

/// One row of `engram bench memory`.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    /// The memory chain (`standard`, `checkpoint`, `amp`, `checkpoint+amp`) or the forward
    /// pass (`forward_tracked`, `eval_no_graph`).
    pub name: String,
    /// Peak heap bytes of a training step above the bytes in use just before it (bytes).
    pub peak_bytes: u64,
    /// Mean seconds per step (s).
    pub step_seconds: f64,
    /// `peak_bytes` relative to `standard`.
    pub peak_ratio: f64,
    /// `step_seconds` relative to `standard`.
    pub time_ratio: f64,
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
    })
}

/// Sets every row's ratios relative to the first row of `rows`.
fn relative_to(rows: &mut [MemoryRow]) {
    let (p0, t0) = (
        rows[0].peak_bytes.max(1) as f64,
        rows[0].step_seconds.max(1e-12),
    );
    for r in rows.iter_mut() {
        r.peak_ratio = r.peak_bytes as f64 / p0;
        r.time_ratio = r.step_seconds / t0;
    }
}

/// The model a memory benchmark runs.
#[derive(Clone, Debug, PartialEq)]
pub enum BenchModel {
    /// A deep MLP: `depth` hidden blocks of `width`.
    Mlp {
        /// Hidden blocks.
        depth: usize,
        /// Their width.
        width: usize,
    },
    /// The ViT: `depth` encoder blocks of width `width` (4 heads, 7×7 patches, dropout 0.1).
    Vit {
        /// Encoder blocks.
        depth: usize,
        /// Model width.
        width: usize,
    },
}

/// The memory chains of the training-step rows, in order: the real chains as a run builds
/// them, and Burn's op-level checkpointing alone and with segments.
const STEP_ROWS: [&str; 6] = [
    "standard",
    "checkpoint",
    "amp",
    "checkpoint+amp",
    "op-level",
    "checkpoint+op-level",
];

/// Builds the benchmark's `model` on `ad` from the random stream `r`.
fn build_model(model: &BenchModel, r: &mut rng::Rng, ad: &Device) -> engram_core::model::Model {
    match *model {
        BenchModel::Mlp { depth, width } => build_mlp(
            784,
            &vec![width; depth],
            10,
            ActivationKind::Relu,
            0.0,
            r,
            ad,
        ),
        BenchModel::Vit { depth, width } => engram_core::model::vit::build_vit(
            &engram_core::model::vit::VitShape {
                side: 28,
                channels: 1,
                patch: 7,
                dim: width,
                depth,
                heads: 4,
                mlp_ratio: 2,
                dropout: 0.1,
            },
            10,
            r,
            ad,
        ),
    }
}

/// One synthetic batch of 28×28 inputs and labels, drawn once and rebuilt on any device.
struct Inputs {
    xs: Vec<f32>,
    ys: Vec<i64>,
    refs: Vec<SampleRef>,
}

impl Inputs {
    fn draw(batch: usize, r: &mut rng::Rng) -> Self {
        let xs = (0..batch * 784)
            .map(|_| r.random_range(-1.0..1.0))
            .collect();
        let ys = (0..batch).map(|_| r.random_range(0..10)).collect();
        let refs = (0..batch)
            .map(|i| SampleRef {
                task: 0,
                index: i as u32,
            })
            .collect();
        Self { xs, ys, refs }
    }

    fn batch(&self, device: &Device) -> Batch {
        let n = self.ys.len();
        Batch {
            x: Tensor::from_data(TensorData::new(self.xs.clone(), [n, 784]), device),
            y: Tensor::<1, Int>::from_data(TensorData::new(self.ys.clone(), [n]), device),
            weights: None,
            logit_mask: None,
            refs: self.refs.clone(),
            new_samples: n,
        }
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

/// Peak memory and step time of `standard`, `checkpoint` (segments of about √blocks), `amp`
/// (compute in `amp`, dynamic loss scaling), `checkpoint+amp`, and Burn's op-level
/// checkpointing alone (`op-level`) and with segments (`checkpoint+op-level`) on `model` at batch
/// `batch`
/// with synthetic 28×28 input, measured in one process with the counting allocator (CPU) or the
/// device pool's reserved bytes (CubeCL devices, see `measure`); ratios to `standard`. Each row: 2 warm-up steps, then `steps` measured. Two more rows
/// compare a forward pass with its autodiff graph (`forward_tracked`) and evaluation on the
/// inference copy without a graph (`eval_no_graph`); their ratios are to `forward_tracked`.
///
/// # Errors
/// Propagates a failed step.
pub fn memory(
    device: &Device,
    model: &BenchModel,
    batch: usize,
    steps: usize,
    amp: engram_strategies::amp::Precision,
) -> Result<Vec<MemoryRow>> {
    use engram_core::strategy::Next;
    let ad = device.clone().autodiff();
    let mut r = rng::stream(0, "bench-memory", 0, 0);
    ad.seed(1);
    let r_op = r.clone();
    let net = build_model(model, &mut r, &ad);
    let inputs = Inputs::draw(batch, &mut r);
    let interval =
        engram_strategies::checkpoint::Checkpoint::new(0).segments(net.num_blocks())[0].len();
    // Burn's op-level checkpointing is a property of the autodiff device: its rows use the same
    // model and weights built on a device with the Balanced strategy.
    let bal = ad.clone().gradient_checkpointing();
    bal.seed(1);
    let op_net = build_model(model, &mut r_op.clone(), &bal);
    let mut rows = Vec::new();
    for name in STEP_ROWS {
        let (m, dev) = if name.ends_with("op-level") {
            (&op_net, &bal)
        } else {
            (&net, &ad)
        };
        let mut chain = chain(name, amp, interval);
        rows.push(measure(device, name, 2, steps, |s| {
            let out = Next::new(&mut chain).run(StepRequest {
                model: m,
                batch: inputs.batch(dev),
                loss: &BenchLoss,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed: s as u64,
            })?;
            drop(out);
            Ok(())
        })?);
    }
    drop(op_net);
    forward_rows(device, &ad, &net, &inputs.xs, steps, &mut rows)?;
    relative_to(&mut rows[..6]);
    relative_to(&mut rows[6..]);
    Ok(rows)
}

/// Evaluation's rows: a forward pass of `xs` on the inference copy of `net` (no autodiff graph,
/// on `device`) against the same forward on `ad` with its graph kept alive (what evaluating on
/// the training model would hold).
fn forward_rows(
    device: &Device,
    ad: &Device,
    net: &engram_core::model::Model,
    xs: &[f32],
    steps: usize,
    rows: &mut Vec<MemoryRow>,
) -> Result<()> {
    use engram_core::burn::module::Module as _;
    use engram_core::model::{Activation, ForwardCtx};
    let batch = xs.len() / 784;
    let valid = net.valid();
    for name in ["forward_tracked", "eval_no_graph"] {
        rows.push(measure(device, name, 1, steps, |_| {
            let logits = if name == "eval_no_graph" {
                let x = Tensor::<2>::from_data(TensorData::new(xs.to_vec(), [batch, 784]), device);
                valid.forward(Activation::Flat(x), &ForwardCtx::default())
            } else {
                let x = Tensor::<2>::from_data(TensorData::new(xs.to_vec(), [batch, 784]), ad);
                net.forward(Activation::Flat(x), &ForwardCtx::default())
            };
            let _ = logits.sum().into_scalar::<f32>();
            Ok(())
        })?);
    }
    Ok(())
}
