//! `engram bench memory`: the memory strategies' peak memory and step time on one model.

use super::vocab::{Bench, ModelArgs};
use crate::cli::device_help;
use clap::Args;
use engram::bench::memory::{FORWARD_ROWS, LORA_ROWS, STEP_ROWS, claim};
use engram::bench::{BenchModel, MemoryOptions};
use engram::core::{Error, Result};
use engram::strategies::amp::Precision;
use std::path::PathBuf;

/// `engram bench memory`'s arguments.
#[derive(Args, Clone, Debug)]
pub struct MemoryArgs {
    /// The model (the benchmarks' vocabulary).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The rows, comma-separated: `standard`, `checkpoint`, `amp`, `both` (= `checkpoint+amp`),
    /// `op-level`, `checkpoint+op-level`, `forward` (a forward pass with and without its graph),
    /// LoRA's `lora`, `lora+checkpoint`, `lora+checkpoint+amp` (adapters on the query and value
    /// projections: `--model bert` or `llama`) and QLoRA's `qlora`, `qlora+checkpoint` (the
    /// same over a base held in 4-bit blocks of 32). `standard` is always measured (every
    /// ratio's reference) [default: all but LoRA's; bert: standard, checkpoint, amp, both;
    /// llama: standard, checkpoint, lora, lora+checkpoint, qlora, qlora+checkpoint].
    #[arg(long)]
    pub rows: Option<String>,
    /// The LoRA rows' rank `r` (α = 2r).
    #[arg(long, default_value_t = 8)]
    pub lora_rank: usize,
    /// Blocks per checkpoint segment (the checkpoint strategy's `interval`) [default: about
    /// √blocks].
    #[arg(long, visible_alias = "interval")]
    pub every: Option<usize>,
    /// Measured steps per row [default: 5; bert: 2].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Unmeasured steps before each row's [default: 2; bert: 1].
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Write the rows as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Compute dtype of the `amp` rows: `f16` or `bf16`.
    #[arg(long, default_value = "f16")]
    pub dtype: String,
    #[arg(long, default_value = "cpu", help = device_help("The device", ""))]
    pub device: String,
}

/// The rows of `--rows` (names of [`STEP_ROWS`] and [`FORWARD_ROWS`]; `both` is
/// `checkpoint+amp`), or the model's defaults.
fn rows(spec: Option<&str>, model: &BenchModel) -> Result<Vec<String>> {
    let tokens = matches!(model, BenchModel::Bert { .. } | BenchModel::Llama { .. });
    let Some(spec) = spec else {
        return Ok(match model {
            BenchModel::Bert { .. } => STEP_ROWS[..4].iter().map(|s| s.to_string()).collect(),
            BenchModel::Llama { .. } => STEP_ROWS[..2]
                .iter()
                .chain(&LORA_ROWS[..2])
                .chain(&LORA_ROWS[3..])
                .map(|s| s.to_string())
                .collect(),
            _ => STEP_ROWS
                .iter()
                .chain(&[FORWARD_ROWS])
                .map(|s| s.to_string())
                .collect(),
        });
    };
    spec.split(',')
        .map(|r| match r.trim() {
            "both" => Ok("checkpoint+amp".to_string()),
            r if LORA_ROWS.contains(&r) && !tokens => Err(Error::Usage(format!(
                "bench memory: the row `{r}` adapts attention's query and value projections: it needs --model bert or llama"
            ))),
            r if STEP_ROWS.contains(&r) || LORA_ROWS.contains(&r) || r == FORWARD_ROWS => {
                Ok(r.to_string())
            }
            other => Err(Error::Usage(format!(
                "bench memory: unknown row `{other}` in --rows (available: standard, checkpoint, amp, both, op-level, checkpoint+op-level, forward, {})", LORA_ROWS.join(", ")
            ))),
        })
        .collect()
}

/// `engram bench memory`: measures, prints the table (with the write-up's claims beside the
/// rows it makes one for) and writes `--json`.
pub fn memory(a: &MemoryArgs) -> Result<()> {
    let r = a.model.resolve(Bench::Memory)?;
    let bert = matches!(r.model, BenchModel::Bert { .. } | BenchModel::Llama { .. });
    let steps = a.steps.unwrap_or(if bert { 2 } else { 5 });
    for (flag, v) in [
        ("--steps", Some(steps)),
        ("--every", a.every),
        ("--lora-rank", Some(a.lora_rank)),
    ] {
        if v == Some(0) {
            return Err(Error::Usage(format!(
                "bench memory: {flag} must be at least 1"
            )));
        }
    }
    let amp = match a.dtype.as_str() {
        "f16" => Precision::F16,
        "bf16" => Precision::Bf16,
        other => {
            return Err(Error::Usage(format!(
                "bench memory: unknown dtype `{other}` (available: f16, bf16)"
            )));
        }
    };
    let opt = MemoryOptions {
        rows: rows(a.rows.as_deref(), &r.model)?,
        every: a.every,
        amp,
        steps,
        warmup: a.warmup.unwrap_or(if bert { 1 } else { 2 }),
        optimizer: r.optimizer_given.then_some(r.optimizer),
        lora_rank: a.lora_rank,
    };
    // A --json that cannot be written is said before minutes of measuring, not after.
    if let Some(path) = &a.json {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(Error::Usage(format!(
                "bench memory: --json {}: no directory {} to write it in",
                path.display(),
                dir.display()
            )));
        }
    }
    let device = engram::core::device::select(&a.device)?;
    // A LoRA rank the model cannot take is a usage error (the adapters are attached before
    // any row is measured).
    let report = engram::bench::memory(&device, &r.model, r.batch, &opt).map_err(|e| match e {
        Error::Strategy { message, .. } => Error::Usage(format!(
            "bench memory: --lora-rank {}: {message}",
            a.lora_rank
        )),
        e => e,
    })?;
    let what = if device.memory_pool_usage().is_some() {
        "the pool's reserved bytes; peak = growth over the step from a cleaned-up pool"
    } else {
        "CPU heap (counting allocator); peak = bytes above the step's start"
    };
    println!(
        "{}, batch {}, device {}: {what}",
        r.model.describe(),
        r.batch,
        a.device
    );
    println!(
        "{} parameters ({:.1} MiB in f32); checkpoint segments of {} block(s) of {}; {} measured step(s) a row after {} warm-up",
        if report.params >= 1_000_000 {
            format!("{:.1}M", report.params as f64 / 1e6)
        } else {
            report.params.to_string()
        },
        report.params as f64 * 4.0 / 1048576.0,
        report.every,
        report.blocks,
        opt.steps,
        opt.warmup
    );
    if let Some(b) = report.qlora_block {
        println!(
            "qlora rows: the frozen projections in 4-bit integers, one f32 scale a block of {b} values"
        );
    }
    print_rows(&report, &opt);
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "model": r.model.describe(),
            "batch": r.batch,
            "device": a.device,
            "dtype": a.dtype,
            "steps": opt.steps,
            "warmup": opt.warmup,
            "optimizer": opt.optimizer.map(|o| o.name()),
            "lora_rank": a.lora_rank,
            "every": report.every,
            "blocks": report.blocks,
            "params": report.params,
            "qlora_block": report.qlora_block,
            "rows": report.rows,
            "claims": engram::bench::memory::CLAIMS.iter().map(|(n, p, t)| serde_json::json!({"row": n, "peak_ratio": p, "time_ratio": t})).collect::<Vec<_>>(),
        });
        let bytes = serde_json::to_vec_pretty(&v).map_err(|e| Error::Other(e.to_string()))?;
        engram::core::fsutil::write_atomic(path, &bytes)?;
    }
    Ok(())
}

/// Prints `report`'s rows (with the optimiser's columns when `opt.optimizer` is set) beside the
/// write-up's claims, and LoRA + checkpointing's training footprint against full fine-tuning.
fn print_rows(report: &engram::bench::MemoryReport, opt: &MemoryOptions) {
    let with_optim = opt.optimizer.is_some();
    if let Some(o) = opt.optimizer {
        println!(
            "each step includes {}'s update; training peak = parameters as held (f32, the frozen base included; a qlora row's base packed) + optimiser state + the step's peak",
            o.name()
        );
    }
    println!(
        "{:<20} {:>12} {:>10} {:>8} {:>8}{}   write-up (BERT-large, GPU)",
        "training step",
        "peak MiB",
        "step ms",
        "peak ×",
        "time ×",
        if with_optim {
            format!(
                " {:>12} {:>11} {:>13} {:>8}",
                "trainable", "optim MiB", "training MiB", "train ×"
            )
        } else {
            String::new()
        }
    );
    let full = report
        .rows
        .first()
        .map_or(1.0, |r| r.training_peak_bytes.max(1) as f64);
    for row in &report.rows {
        if row.name == "forward_tracked" {
            println!("forward pass (ratios to forward_tracked):");
        }
        let extra = if with_optim && row.name != "forward_tracked" && row.name != "eval_no_graph" {
            format!(
                " {:>12} {:>11.1} {:>13.1} {:>8.2}",
                row.trainable_params,
                row.optimizer_state_bytes as f64 / 1048576.0,
                row.training_peak_bytes as f64 / 1048576.0,
                row.training_peak_bytes as f64 / full
            )
        } else {
            String::new()
        };
        println!(
            "{:<20} {:>12.1} {:>10.1} {:>8.2} {:>8.2}{extra}   {}",
            row.name,
            row.peak_bytes as f64 / 1048576.0,
            row.step_seconds * 1e3,
            row.peak_ratio,
            row.time_ratio,
            claim(&row.name).unwrap_or_default()
        );
    }
    // The write-up's headline on the whole training footprint: LoRA + checkpointing against
    // full fine-tuning (`standard`), with the optimiser's state.
    if with_optim && let Some(l) = report.rows.iter().find(|r| r.name == "lora+checkpoint") {
        println!(
            "lora+checkpoint: training peak {:.2}× full fine-tuning's (write-up: memory to 1/3)",
            l.training_peak_bytes as f64 / full
        );
    }
}
