//! `engram bench throughput|memory`: training samples/s of the runner's step, and the peak
//! memory of the memory strategies.
//!
//! The step measured is the trainer's own: a batch gathered from host memory and uploaded, the
//! `standard` memory strategy's forward and backward, cross-entropy, and the optimiser (engram's
//! SGD with momentum 0.9, or burn-optim's AdamW). The default is the Split-FMNIST example's settings (MLP
//! 784-400-400-10, batch 128, lr 0.05) on synthetic inputs; `bench/throughput_torch.py` runs the
//! identical loop in plain PyTorch for comparison, and `bench/throughput_bert_torch.py` the BERT
//! loop in Hugging Face `transformers` ([`torch`]).

pub mod memory;
pub mod model;
pub mod torch;

pub use memory::{LORA_ROWS, MemoryOptions, MemoryReport, MemoryRow, STEP_ROWS, memory};
pub use model::{BenchModel, Inputs, bert_preset};

use engram_core::burn::optim::AdamWConfig;
use engram_core::burn::tensor::{Device, Tensor};
use engram_core::data::stream::Batch;
use engram_core::rng;
use engram_core::strategy::StepRequest;
use engram_core::{Error, Result};
use serde::Serialize;
use std::time::Instant;

/// The optimiser a throughput run steps with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchOptimizer {
    /// SGD with classical momentum 0.9 (no dampening, no weight decay).
    Sgd,
    /// AdamW (β 0.9 / 0.999, ε 1e-8 as burn-optim and PyTorch default), weight decay 0.01.
    Adamw,
}

impl BenchOptimizer {
    /// `sgd` or `adamw`.
    ///
    /// # Errors
    /// [`Error::Usage`] for any other name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "sgd" => Ok(Self::Sgd),
            "adamw" => Ok(Self::Adamw),
            other => Err(Error::Usage(format!(
                "bench: unknown optimizer `{other}` (available: sgd, adamw)"
            ))),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sgd => "sgd",
            Self::Adamw => "adamw",
        }
    }

    /// The learning rate the benchmark uses for `model` (the PyTorch twins get the same): SGD
    /// 0.05 for the image models and 0.01 for BERT, AdamW 1e-3 and 1e-4.
    pub fn lr(self, model: &BenchModel) -> f64 {
        let bert = matches!(model, BenchModel::Bert { .. });
        match (self, bert) {
            (Self::Sgd, false) => 0.05,
            (Self::Sgd, true) => 0.01,
            (Self::Adamw, false) => 1e-3,
            (Self::Adamw, true) => 1e-4,
        }
    }

    fn build(self) -> engram_core::burn::optim::ModuleOptimizer {
        match self {
            Self::Sgd => engram_core::train::trainer::sgd(0.9, None),
            Self::Adamw => AdamWConfig::new().with_weight_decay(0.01).init(),
        }
    }
}

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

/// Measures `steps` training steps of the example MLP (784-400-400-10) at batch `batch` after
/// `warmup` unmeasured ones, with SGD (momentum 0.9, lr 0.05).
///
/// # Errors
/// Propagates a failed step (a diverged loss).
pub fn throughput(
    device: &Device,
    batch: usize,
    steps: usize,
    warmup: usize,
) -> Result<Throughput> {
    let mlp = BenchModel::Mlp {
        depth: 2,
        width: 400,
    };
    throughput_of(
        device,
        &mlp,
        batch,
        steps,
        warmup,
        BenchOptimizer::Sgd,
        None,
    )
}

/// The benchmarks' LoRA: rank `rank`, α = 2·rank (PEFT's common setting), on the query and
/// value projections (`lora`'s default targets), the head trained; on the activation path
/// when `activation`, else Burn's weight-path adapter.
pub fn bench_lora(rank: usize, activation: bool) -> engram_strategies::lora::Lora {
    use engram_strategies::lora::{AdapterPath, Lora, LoraParams};
    Lora::new(LoraParams {
        rank,
        alpha: 2.0 * rank as f64,
        path: if activation {
            AdapterPath::Activation
        } else {
            AdapterPath::Weight
        },
        ..LoraParams::default()
    })
}

/// The benchmarks' QLoRA for `model`: [`bench_lora`] on the weight path over a base whose
/// frozen projection weights Burn holds as 4-bit integers, one `f32` scale a block of 32
/// values (`lora`'s `quantize = "int4"`, `block = 32`; a model whose projections are not
/// multiples of 32, a tiny test model's, gets the largest block below that divides them all).
pub fn bench_qlora(
    rank: usize,
    model: &engram_core::model::Model,
) -> engram_strategies::lora::Lora {
    use engram_strategies::lora::{Lora, Quantize};
    let outs: Vec<usize> = engram_core::model::adapter::linear_layers(model)
        .iter()
        .map(|l| l.shape[1])
        .collect();
    let mut p = bench_lora(rank, false).params().clone();
    p.quantize = Quantize::Int4;
    p.block = (1..=32)
        .rev()
        .find(|b| outs.iter().all(|d| d % b == 0))
        .unwrap_or(1);
    Lora::new(p)
}

/// Measures `steps` training steps of `model` at batch `batch` after `warmup` unmeasured ones,
/// stepping `optimizer` at [`BenchOptimizer::lr`], on 16 batches of synthetic inputs drawn once
/// (cycled). `lora` = `(rank, activation)` trains LoRA adapters of that rank (α = 2·rank) on
/// the query and value projections instead of every weight: Burn's weight-path adapter, or
/// engram's activation-path component when `activation`.
///
/// # Errors
/// Propagates a failed step (a diverged loss), a BERT checkpoint that does not load, and a
/// model without query/value layers under `lora`.
pub fn throughput_of(
    device: &Device,
    model: &BenchModel,
    batch: usize,
    steps: usize,
    warmup: usize,
    optimizer: BenchOptimizer,
    lora: Option<(usize, bool)>,
) -> Result<Throughput> {
    let ad = device.clone().autodiff();
    let mut r = rng::stream(0, "bench", 0, 0);
    ad.seed(1);
    let mut net = model.build(&mut r, &ad)?;
    if let Some((rank, activation)) = lora {
        net = bench_lora(rank, activation).adapt(net)?;
    }
    let mut optim = optimizer.build();
    let inputs = Inputs::draw(model, 16 * batch, &mut r);
    let lr = optimizer.lr(model);
    let mut start = Instant::now();
    for s in 0..warmup + steps {
        if s == warmup {
            let _ = device.sync();
            start = Instant::now();
        }
        let out = engram_strategies::standard::plain_step(StepRequest {
            model: &net,
            batch: inputs.batch(&ad, s, batch),
            loss: &BenchLoss,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: s as u64,
        })?;
        net = optim.step(lr, net, out.grads);
    }
    let _ = device.sync();
    let secs = start.elapsed().as_secs_f64();
    Ok(Throughput {
        train_samples_per_s: (steps * batch) as f64 / secs,
        step_seconds: secs / steps as f64,
        batch,
        steps,
    })
}

/// Mean time (nanoseconds) for a cache line to go from one thread to another and back, over
/// about `window` of back-and-forth between two threads that spin on one atomic; `None` with
/// fewer than two CPUs available, or when the two threads did not both get a core within
/// `4 × window` (a busy machine).
///
/// Each round trip is two cache-line transfers between the cores the two threads run on, so it
/// says how far apart they are: two cores of one chiplet answer in tens of nanoseconds, cores on
/// distant chiplets or sockets in hundreds. On a 2-vCPU cloud VM the host sometimes places the
/// two vCPUs far apart for seconds at a time, and every parallel region of a 2-thread training
/// step then pays that distance for each line its threads share (`bench/profile/README.md`:
/// the MLP's 2-thread step fell to its 1-thread speed there). `engram bench throughput` prints
/// it beside each multi-thread round so that a slow round can be told from a slow step. Takes
/// `window` plus a thread's start, at most `4 × window`.
pub fn core_round_trip_ns(window: std::time::Duration) -> Option<f64> {
    use std::hint::spin_loop;
    use std::sync::atomic::{AtomicU32, Ordering::*};
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    /// The value that tells the other thread to stop.
    const STOP: u32 = u32::MAX;
    /// Untimed trips first (the other thread starting, both cores waking).
    const WARMUP: u32 = 1024;
    // Trip `i` sets the line to `2i + 1` here and the other thread answers with `2i + 2`.
    let line = AtomicU32::new(0);
    // A thread the OS has not scheduled answers after a time slice, or never on a busy machine:
    // past this the probe gives up.
    let deadline = Instant::now() + window * 4;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut want = 1;
            loop {
                match line.load(Acquire) {
                    STOP => return,
                    // A compare-exchange, so that an answer never overwrites STOP.
                    v if v == want => {
                        if line
                            .compare_exchange(want, want + 1, AcqRel, Acquire)
                            .is_ok()
                        {
                            want += 2;
                        }
                    }
                    _ => spin_loop(),
                }
            }
        });
        let mut start = Instant::now();
        let mut trip = 0u32;
        let timed = 'trips: loop {
            if trip == WARMUP {
                start = Instant::now();
            }
            line.store(2 * trip + 1, Release);
            let mut spins = 0u32;
            while line.load(Acquire) != 2 * trip + 2 {
                spin_loop();
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && Instant::now() > deadline {
                    break 'trips 0;
                }
            }
            trip += 1;
            // The clock only every 256 trips: reading it costs about as much as a trip.
            if trip.is_multiple_of(256) {
                if trip > WARMUP && (start.elapsed() >= window || trip >= STOP / 4) {
                    break trip - WARMUP;
                }
                if Instant::now() > deadline {
                    break 0;
                }
            }
        };
        let ns = start.elapsed().as_secs_f64() * 1e9 / f64::from(timed);
        line.store(STOP, Release);
        (timed > 0).then_some(ns)
    })
}

/// This process's peak resident set size in bytes (`VmHWM` of `/proc/self/status`), where the
/// system has one (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The trainer's loss with no forgetting strategy: mean cross-entropy, or for a batch of token
/// ids (a language model's windows) the mean next-token NLL (`objective = "lm"`).
struct BenchLoss;

impl engram_core::strategy::LossFn for BenchLoss {
    fn loss(
        &self,
        model: &engram_core::model::Model,
        logits: Tensor<2>,
        batch: &Batch,
    ) -> (Tensor<1>, Tensor<1>) {
        use engram_core::config::Objective;
        let objective = if batch.x.is_ids() {
            Objective::Lm
        } else {
            Objective::Classify
        };
        let ce = engram_core::train::trainer::per_row_loss(objective, model, logits, batch);
        (ce.clone().mean(), ce)
    }
}
