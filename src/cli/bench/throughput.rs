//! `engram bench throughput`: training samples/s and peak RSS of one model's step, per thread
//! count, beside its PyTorch twin.

use super::vocab::{Bench, ModelArgs, Resolved};
use crate::cli::device_help;
use clap::Args;
use engram::bench::BenchModel;
use engram::core::{Error, Result};
use serde_json::{Value, json};
use std::path::PathBuf;

/// `engram bench throughput`'s arguments.
#[derive(Args, Clone, Debug)]
pub struct ThroughputArgs {
    /// The model (the benchmarks' vocabulary).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Python interpreter for the PyTorch comparison (with `transformers` for `--model bert`).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Measured steps [default: 200; cnn and vit 50; bert 10].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Unmeasured steps before them [default: 20; bert 2].
    #[arg(long)]
    pub warmup: Option<usize>,
    #[arg(long, default_value = "cpu", help = device_help("The device", ""))]
    pub device: String,
    /// Thread counts to compare, each in its own process (`RAYON_NUM_THREADS`, and
    /// `torch.set_num_threads` for PyTorch); `none` for this process only.
    #[arg(long, default_value = "1,2")]
    pub threads: String,
    /// Rounds over the thread counts, engram and PyTorch alternated within each; the table gives
    /// each figure's median over the rounds.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Train LoRA adapters of this rank (α = 2 × rank) on every layer's query and value
    /// projections, the base frozen and the head trained: engram's `lora` (Burn's LoRA), and
    /// PEFT's `LoraConfig` in the `transformers` twin (which then needs `peft`). `--model bert`
    /// only.
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// Where engram's LoRA adapters sit with `--lora-rank`: `weight` (Burn's LoRA inside the
    /// weight, `lora`'s default) or `activation` (engram's adapter component beside the layer,
    /// `path = "activation"`).
    #[arg(long, value_parser = ["weight", "activation"])]
    pub lora_path: Option<String>,
    /// Measure this process only and print its figures as one JSON line (what each
    /// `--threads` child runs).
    #[arg(long, hide = true)]
    pub single: bool,
}

/// The thread counts of `--threads` (none for `none` or `--single`).
fn thread_counts(a: &ThroughputArgs) -> Result<Vec<usize>> {
    if a.threads == "none" || a.single {
        return Ok(Vec::new());
    }
    a.threads
        .split(',')
        .map(|t| t.trim().parse::<usize>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            Error::Usage(format!(
                "bench throughput: --threads `{}` is not a list of thread counts such as 1,2 (or `none`)",
                a.threads
            ))
        })
}

/// The measured and warm-up steps of `model` (the flags, or the model's defaults).
pub fn steps(a: &ThroughputArgs, model: &BenchModel) -> (usize, usize) {
    let bert = matches!(model, BenchModel::Bert { .. });
    let steps = a.steps.unwrap_or(match model {
        BenchModel::Mlp { .. } => 200,
        BenchModel::Bert { .. } => 10,
        _ => 50,
    });
    (steps, a.warmup.unwrap_or(if bert { 2 } else { 20 }))
}

/// The load average over 1, 5 and 15 minutes (`/proc/loadavg`), where there is one.
fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let v: Vec<f64> = s
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    v.try_into().ok()
}

/// This process's figures as a JSON object.
fn measure_here(a: &ThroughputArgs, r: &Resolved) -> Result<Value> {
    let (steps, warmup) = steps(a, &r.model);
    let device = engram::core::device::select(&a.device)?;
    let t = engram::bench::throughput_of(
        &device,
        &r.model,
        r.batch,
        steps,
        warmup,
        r.optimizer,
        a.lora_rank
            .map(|rank| (rank, a.lora_path.as_deref() == Some("activation"))),
    )?;
    Ok(json!({
        "train_samples_per_s": t.train_samples_per_s,
        "step_seconds": t.step_seconds,
        "batch": t.batch,
        "steps": t.steps,
        "threads": engram::core::threads::threads(),
        "device": a.device,
        "peak_rss_bytes": engram::bench::peak_rss_bytes(),
    }))
}

/// `engram bench throughput`: this process's figures (the MLP, or with `--threads none`), then
/// one row per thread count (a child process of this binary and the PyTorch twin, each round
/// alternated, medians).
pub fn throughput(a: &ThroughputArgs) -> Result<()> {
    let r = a.model.resolve(Bench::Throughput)?;
    let (steps, warmup) = steps(a, &r.model);
    if steps == 0 || a.rounds == 0 {
        return Err(Error::Usage(
            "bench throughput: --steps and --rounds must be at least 1".into(),
        ));
    }
    if a.lora_rank.is_some() && !matches!(r.model, BenchModel::Bert { .. }) {
        return Err(Error::Usage(
            "bench throughput: --lora-rank goes with --model bert (the PEFT twin is a transformers BERT)".into(),
        ));
    }
    if a.lora_path.is_some() && a.lora_rank.is_none() {
        return Err(Error::Usage(
            "bench throughput: --lora-path says where --lora-rank's adapters sit; give --lora-rank too (8 is PEFT's common rank)".into(),
        ));
    }
    if a.lora_rank == Some(0) {
        return Err(Error::Usage(
            "bench throughput: --lora-rank must be at least 1 (8 is Hu et al.'s and PEFT's common rank)".into(),
        ));
    }
    let counts = thread_counts(a)?;
    if a.single {
        println!("{}", measure_here(a, &r)?);
        return Ok(());
    }
    println!(
        "engram (Burn {}, device {}), {}{}, batch {}, {} {} steps after {warmup} of warm-up; load average {}",
        engram::core::BURN_VERSION,
        a.device,
        r.model.describe(),
        a.lora_rank.map_or(String::new(), |r| format!(
            ", LoRA rank {r} (alpha {}) on query and value, base frozen, on the {} path",
            2 * r,
            a.lora_path.as_deref().unwrap_or("weight")
        )),
        r.batch,
        steps,
        r.optimizer.name(),
        load_average().map_or("unknown".into(), |l| format!(
            "{:.2} {:.2} {:.2}",
            l[0], l[1], l[2]
        ))
    );
    let mut out = json!({});
    if counts.is_empty() || matches!(r.model, BenchModel::Mlp { .. }) {
        out = measure_here(a, &r)?;
        println!(
            "this process ({} threads): {:.1} samples/s ({:.2} ms/step)",
            out["threads"],
            out["train_samples_per_s"].as_f64().unwrap_or(f64::NAN),
            out["step_seconds"].as_f64().unwrap_or(f64::NAN) * 1e3
        );
    }
    out["model"] = r.model.describe().into();
    out["optimizer"] = r.optimizer.name().into();
    out["lora_rank"] = json!(a.lora_rank);
    out["lora_path"] = json!(
        a.lora_rank
            .map(|_| a.lora_path.clone().unwrap_or_else(|| "weight".into()))
    );
    out["batch"] = r.batch.into();
    out["steps"] = steps.into();
    out["load_average_before"] = json!(load_average());
    let rows = super::throughput_rows::rows(a, &r, &counts)?;
    out["load_average_after"] = json!(load_average());
    out["rows"] = rows.rows.into();
    out["torch"] = rows.torch.into();
    out["transformers"] = rows.transformers.into();
    if let Some(path) = &a.json {
        let bytes = serde_json::to_vec_pretty(&out).map_err(|e| Error::Other(e.to_string()))?;
        engram::core::fsutil::write_atomic(path, &bytes)?;
    }
    Ok(())
}
