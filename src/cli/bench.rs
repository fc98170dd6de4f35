//! `engram bench memory|throughput|suite`: benchmarks that print figures.

use super::{Cli, device_help};
use clap::{Args, Subcommand};
use engram::bench::BenchModel;
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use engram::strategies::amp::Precision;
use std::path::{Path, PathBuf};

/// `engram bench`'s arguments: one of its subcommands.
#[derive(Args)]
pub struct BenchArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// `engram bench`'s subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Peak memory and step time of the memory strategies (standard, checkpoint, amp,
    /// checkpoint+amp, and op-level checkpointing alone and with segments) on one model.
    Memory {
        /// The model: `vit` (8 encoder blocks of width 128) or `mlp` (16 blocks of 256).
        #[arg(long, default_value = "vit")]
        model: String,
        /// Batch size (default 256 for the ViT, 4096 for the MLP).
        #[arg(long)]
        batch: Option<usize>,
        /// Blocks (encoder blocks of the ViT, hidden blocks of the MLP).
        #[arg(long)]
        depth: Option<usize>,
        /// Width of each block.
        #[arg(long)]
        width: Option<usize>,
        /// Measured steps per strategy.
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// Write the rows as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Compute dtype of the `amp` rows: `f16` or `bf16`.
        #[arg(long, default_value = "f16")]
        dtype: String,
        #[arg(long, default_value = "cpu", help = device_help("The device", ""))]
        device: String,
    },
    /// Training samples/s of the example MLP at batch 128, here and at each of `--threads`, with
    /// the plain PyTorch loop at the same thread counts when PyTorch is importable.
    Throughput {
        /// Write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Python interpreter for the PyTorch comparison.
        #[arg(long, default_value = "python3")]
        python: String,
        /// Measured steps.
        #[arg(long, default_value_t = 200)]
        steps: usize,
        /// Batch size.
        #[arg(long, default_value_t = 128)]
        batch: usize,
        #[arg(long, default_value = "cpu", help = device_help("The device", ""))]
        device: String,
        /// Thread counts to compare, each in its own process (`RAYON_NUM_THREADS`, and
        /// `torch.set_num_threads` for PyTorch); `none` for this process only.
        #[arg(long, default_value = "1,2")]
        threads: String,
        /// Measure this process only and print its figures as one JSON line (what each
        /// `--threads` child runs).
        #[arg(long, hide = true)]
        single: bool,
    },
    /// The benchmark suite: every built-in forgetting strategy, the standard methods and the
    /// shipped recipes with the plain baselines, on five streams × 3 seeds (a sweep:
    /// `bench/suite.toml`), then one table per stream and the recipe goals. Resumable: a rerun
    /// skips finished runs.
    Suite {
        /// The short table: `bench/suite-quick.toml` (short streams, 1 seed).
        #[arg(long)]
        quick: bool,
        /// Another suite file (a sweep file with `[sweep.variants.stream]`).
        #[arg(long, conflicts_with = "quick")]
        sweep: Option<PathBuf>,
        /// The suite's directory (default: runs/<suite name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Runs at a time.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Also write the tables (Markdown) to this file, as the book's figures are.
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
}

/// `engram bench …`.
pub fn bench(cli: &Cli, registry: &Registry, args: &BenchArgs) -> Result<()> {
    match &args.command {
        BenchCommand::Memory {
            model,
            batch,
            depth,
            width,
            steps,
            json,
            dtype,
            device,
        } => {
            let (m, batch, amp) = memory_options(model, *batch, *depth, *width, *steps, dtype)?;
            memory(&m, batch, *steps, json.as_deref(), amp, device)
        }
        BenchCommand::Throughput {
            json,
            python,
            steps,
            batch,
            device,
            threads,
            single,
        } => throughput(&ThroughputArgs {
            json: json.as_deref(),
            python,
            steps: *steps,
            batch: *batch,
            device,
            threads,
            single: *single,
        }),
        BenchCommand::Suite {
            quick,
            sweep,
            out,
            jobs,
            markdown,
        } => suite(
            cli,
            registry,
            *quick,
            sweep.as_deref(),
            out.clone(),
            *jobs,
            markdown.as_deref(),
        ),
    }
}

/// The model, batch and AMP dtype of `bench memory` from its flags (each number at least 1;
/// `None`: the model's default).
fn memory_options(
    model: &str,
    batch: Option<usize>,
    depth: Option<usize>,
    width: Option<usize>,
    steps: usize,
    dtype: &str,
) -> Result<(BenchModel, usize, Precision)> {
    for (flag, v) in [("--batch", batch), ("--depth", depth), ("--width", width)] {
        if v == Some(0) {
            return Err(Error::Usage(format!(
                "bench memory: {flag} must be at least 1"
            )));
        }
    }
    if steps == 0 {
        return Err(Error::Usage(
            "bench memory: --steps must be at least 1".into(),
        ));
    }
    let amp = match dtype {
        "f16" => Precision::F16,
        "bf16" => Precision::Bf16,
        other => {
            return Err(Error::Usage(format!(
                "bench memory: unknown dtype `{other}` (available: f16, bf16)"
            )));
        }
    };
    match model {
        "vit" => Ok((
            BenchModel::Vit {
                depth: depth.unwrap_or(8),
                width: width.unwrap_or(128),
            },
            batch.unwrap_or(256),
            amp,
        )),
        "mlp" => Ok((
            BenchModel::Mlp {
                depth: depth.unwrap_or(16),
                width: width.unwrap_or(256),
            },
            batch.unwrap_or(4096),
            amp,
        )),
        other => Err(Error::Usage(format!(
            "bench memory: unknown model `{other}` (available: vit, mlp)"
        ))),
    }
}

/// `engram bench memory`: measures, prints the table and writes `json`.
fn memory(
    m: &BenchModel,
    batch: usize,
    steps: usize,
    json: Option<&Path>,
    amp: Precision,
    name: &str,
) -> Result<()> {
    let device = engram::core::device::select(name)?;
    let rows = engram::bench::memory(&device, m, batch, steps.max(1), amp)?;
    if device.memory_pool_usage().is_some() {
        println!(
            "{m:?}, batch {batch}, device {name}: the pool's reserved bytes; peak = growth over the step from a cleaned-up pool"
        );
    } else {
        println!(
            "{m:?}, batch {batch}, CPU heap (counting allocator); peak = bytes above the step's start"
        );
    }
    println!(
        "{:<20} {:>12} {:>10} {:>8} {:>8}",
        "training step", "peak MiB", "step ms", "peak ×", "time ×"
    );
    for (i, r) in rows.iter().enumerate() {
        if i == 6 {
            println!("forward pass (ratios to forward_tracked):");
        }
        println!(
            "{:<20} {:>12.1} {:>10.1} {:>8.2} {:>8.2}",
            r.name,
            r.peak_bytes as f64 / 1048576.0,
            r.step_seconds * 1e3,
            r.peak_ratio,
            r.time_ratio
        );
    }
    if let Some(path) = json {
        let bytes = serde_json::to_vec_pretty(&serde_json::json!({ "rows": rows }))
            .map_err(|e| Error::Other(e.to_string()))?;
        engram::core::fsutil::write_atomic(path, &bytes)?;
    }
    Ok(())
}

/// The options of `engram bench throughput`.
struct ThroughputArgs<'a> {
    json: Option<&'a Path>,
    python: &'a str,
    steps: usize,
    batch: usize,
    device: &'a str,
    threads: &'a str,
    single: bool,
}

/// Runs this binary's `bench throughput --single` with `RAYON_NUM_THREADS=threads`.
fn engram_child(a: &ThroughputArgs, threads: usize) -> Result<serde_json::Value> {
    let exe = std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?;
    let out = std::process::Command::new(&exe)
        .args(["bench", "throughput", "--single", "--device", a.device])
        .args([
            "--batch",
            &a.batch.to_string(),
            "--steps",
            &a.steps.to_string(),
        ])
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(&exe, e))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "bench throughput: the {threads}-thread run failed ({})",
            out.status
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        Error::Other(format!(
            "bench throughput: the {threads}-thread run printed no figures: {e}"
        ))
    })
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

/// `engram bench throughput`: this process's figures, then one row per thread count (a child
/// process of this binary and the PyTorch twin, [`engram::bench::torch`]).
fn throughput(a: &ThroughputArgs) -> Result<()> {
    if a.steps == 0 || a.batch == 0 {
        return Err(Error::Usage(
            "bench throughput: --steps and --batch must be at least 1".into(),
        ));
    }
    let counts = thread_counts(a)?;
    let device = engram::core::device::select(a.device)?;
    let r = engram::bench::throughput(&device, a.batch, a.steps, 20)?;
    let here = engram::core::threads::threads();
    let mut out = serde_json::json!({
        "train_samples_per_s": r.train_samples_per_s,
        "step_seconds": r.step_seconds,
        "batch": r.batch,
        "steps": r.steps,
        "threads": here,
        "device": a.device,
    });
    if a.single {
        println!("{out}");
        return Ok(());
    }
    println!(
        "engram (Burn {}, device {}), MLP 784-400-400-10, batch {}, {} steps after 20 of warm-up",
        engram::core::BURN_VERSION,
        a.device,
        r.batch,
        r.steps
    );
    println!(
        "this process ({here} threads): {:.0} samples/s ({:.2} ms/step)",
        r.train_samples_per_s,
        r.step_seconds * 1e3
    );
    let (rows, torch_version) = thread_rows(a, &counts)?;
    out["rows"] = rows.into();
    out["torch"] = torch_version.into();
    if let Some(path) = a.json {
        let bytes = serde_json::to_vec_pretty(&out).map_err(|e| Error::Other(e.to_string()))?;
        engram::core::fsutil::write_atomic(path, &bytes)?;
    }
    Ok(())
}

/// Prints and returns one row per thread count (engram's and PyTorch's samples/s), and the
/// PyTorch version when it ran.
fn thread_rows(
    a: &ThroughputArgs,
    counts: &[usize],
) -> Result<(Vec<serde_json::Value>, Option<String>)> {
    let mut rows = Vec::new();
    let mut torch_version = None;
    if !counts.is_empty() {
        println!(
            "{:>7} {:>18} {:>18} {:>15}",
            "threads", "engram samples/s", "PyTorch samples/s", "engram/PyTorch"
        );
    }
    for &n in counts {
        let e = engram_child(a, n)?["train_samples_per_s"]
            .as_f64()
            .unwrap_or(f64::NAN);
        let t = engram::bench::torch::run(a.python, a.batch, a.steps, n, a.device);
        let ts = t.as_ref().and_then(|t| t["train_samples_per_s"].as_f64());
        if let Some(t) = &t {
            torch_version = t["torch"].as_str().map(str::to_string);
        }
        let ratio = ts.map(|ts| e / ts);
        println!(
            "{n:>7} {e:>18.0} {:>18} {:>15}",
            ts.map_or("-".into(), |v| format!("{v:.0}")),
            ratio.map_or("-".into(), |v| format!("{v:.2}x"))
        );
        rows.push(serde_json::json!({
            "threads": n,
            "engram_samples_per_s": e,
            "torch_samples_per_s": ts,
            "ratio_vs_torch": ratio,
        }));
    }
    match &torch_version {
        Some(v) => println!("PyTorch {v}: the plain loop of bench/throughput_torch.py"),
        None if !counts.is_empty() => println!(
            "PyTorch comparison skipped: `{} - < bench/throughput_torch.py` did not run (is torch importable?)",
            a.python
        ),
        None => {}
    }
    Ok((rows, torch_version))
}

/// `engram bench suite`: runs the suite's sweep here (`jobs` at a time), then prints its tables
/// and writes them to DIR/suite.md (and `markdown`). The suite file defaults to
/// `bench/suite.toml` (`bench/suite-quick.toml` with `quick`) under the current directory.
fn suite(
    cli: &Cli,
    registry: &Registry,
    quick: bool,
    file: Option<&Path>,
    out: Option<PathBuf>,
    jobs: usize,
    markdown: Option<&Path>,
) -> Result<()> {
    let file = file.map_or_else(
        || {
            PathBuf::from(if quick {
                "bench/suite-quick.toml"
            } else {
                "bench/suite.toml"
            })
        },
        Path::to_path_buf,
    );
    if !file.is_file() {
        return Err(Error::Usage(format!(
            "bench suite: no suite file at {} (run it from engram's repository root, or give --sweep FILE)",
            file.display()
        )));
    }
    // Parsed here for its axes and directory; `sweep run` below checks every run's config.
    let sweep = engram::sweep::Sweep::load(&file)?;
    if !sweep
        .axes
        .iter()
        .any(|a| a.key == engram::sweep::suite::STREAM)
    {
        return Err(Error::Usage(format!(
            "bench suite: {} has no [sweep.variants.{}] (the suite's streams)",
            file.display(),
            engram::sweep::suite::STREAM
        )));
    }
    let dir = super::sweep::sweep_out(&sweep, out);
    let written = || {
        std::fs::metadata(dir.join("sweep.json"))
            .and_then(|m| m.modified())
            .ok()
    };
    let before = written();
    let ran = super::sweep::run(cli, registry, &file, Some(dir.clone()), jobs, None);
    if ran.is_err() && written() == before {
        // Refused before any run (a config that does not check): that error, and no tables of
        // an earlier sweep.json in the directory.
        return ran;
    }
    let bytes =
        std::fs::read(dir.join("sweep.json")).map_err(|e| Error::io(dir.join("sweep.json"), e))?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::Other(format!("sweep.json: {e}")))?;
    let md = engram::sweep::suite::markdown(&json);
    print!("\n{md}");
    engram::core::fsutil::write_atomic(&dir.join("suite.md"), md.as_bytes())?;
    if let Some(m) = markdown {
        engram::core::fsutil::write_atomic(m, md.as_bytes())?;
    }
    ran
}
