//! The `engram` command line.
//!
//! Exit codes: `0` success, `2` bad input (config, data, plugin, device), `1` any other
//! failure. A panic is caught, reported as an internal error and exits with `1`.

mod alloc;

use clap::{Args, Parser, Subcommand};
use engram::core::config::LoadedConfig;
use engram::core::data::dataset;
use engram::core::registry::Registry;
use engram::core::train::trainer::{self, RunOptions};
use engram::core::{Error, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "engram",
    version,
    about = "Continual learning under a memory budget, on Burn"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More output (-v: the strategy chain and data directory; -vv: the effective config).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors and the final line.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Load strategies, models or datasets from a plugin shared library (repeatable; `run`, `validate`, `list`,
    /// `resume`, `eval`, `export`). Its code runs in this process: load only what you trust.
    #[arg(long = "plugin", value_name = "PATH", global = true)]
    plugins: Vec<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment: train on the stream, evaluate, write report.json.
    Run(RunArgs),
    /// Evaluate a checkpoint's model on every task of its stream.
    Eval {
        /// A run's output directory (newest checkpoint) or OUT/checkpoints/step-N.
        checkpoint: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also print the confusion matrix over every task's evaluation rows (row: true
        /// class, column: predicted class, in samples) and each class's recall.
        #[arg(long)]
        confusion: bool,
        /// Evaluate on this device (cpu, cuda, vulkan or cubecl-cpu; the last three need their build features) instead of the run's.
        #[arg(long)]
        device: Option<String>,
    },
    /// Write a checkpoint's weights for other tools.
    Export {
        /// A run's output directory (newest checkpoint) or OUT/checkpoints/step-N.
        checkpoint: PathBuf,
        /// The safetensors file to write.
        #[arg(long)]
        safetensors: PathBuf,
        /// Load the checkpoint on this device (cpu, cuda, vulkan or cubecl-cpu; the last three need their build features) instead of the run's.
        #[arg(long)]
        device: Option<String>,
    },
    /// Continue a killed or interrupted run from its newest valid checkpoint (a `--seeds`
    /// directory: every unfinished seed, then the aggregate).
    Resume {
        /// The run's output directory.
        out: PathBuf,
        /// Continue on this device (cpu, cuda, vulkan or cubecl-cpu; the last three need their build features) instead of the one the run started
        /// on; the result is the same run.
        #[arg(long)]
        device: Option<String>,
    },
    /// Check a config (syntax, keys, strategies, dataset) without running it.
    Validate {
        /// The experiment file.
        config: PathBuf,
        /// Override a key: `--set train.epochs=3` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// List the registered strategies, models and datasets with their keys and defaults.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Dataset tools.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Benchmarks that print figures.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Render a run's plots (PNG and SVG): accuracy matrix, per-task accuracy, memory, loss
    /// and learning rate.
    Report {
        /// The run's output directory (holds report.json and steps.csv).
        dir: PathBuf,
        /// Where to write the plots (default: DIR/plots).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print several runs side by side (ACC, BWT, forgetting, FWT, retention, time, memory).
    Compare {
        /// Run output directories; a directory of `--seeds` runs shows mean ± std.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Also draw the comparison figure (ACC and retention per run) into this directory
        /// as compare.png and compare.svg.
        #[arg(long, value_name = "DIR")]
        plots: Option<PathBuf>,
    },
    /// Grids of runs: a sweep file's configs × axes × seeds, run here N at a time or as a
    /// Slurm job array, then aggregated.
    Sweep {
        #[command(subcommand)]
        command: SweepCommand,
    },
}

#[derive(Subcommand)]
enum SweepCommand {
    /// Print the grid and check every run's config (keys, strategies, data) before anything
    /// starts.
    Validate {
        /// The sweep file.
        sweep: PathBuf,
    },
    /// Run the grid on this machine, N runs at a time; finished runs are skipped, interrupted
    /// ones resumed from their checkpoints, and a failed run does not stop the others.
    Run {
        /// The sweep file.
        sweep: PathBuf,
        /// The sweep's directory (default: `[sweep] out`, else `runs/<sweep name>`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Runs at a time.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Threads per run (default: the machine's cores divided by --jobs, at least 1).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Write the grid's unfinished runs as one Slurm job-array script and submit it with
    /// sbatch (or print it with --print).
    Submit {
        /// The sweep file.
        sweep: PathBuf,
        /// The sweep's directory, on a file system the cluster's nodes share (default:
        /// `[sweep] out`, else `runs/<sweep name>`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the script instead of submitting it (writes nothing).
        #[arg(long)]
        print: bool,
    },
    /// Say which runs of a sweep's directory are done, running, failed, interrupted or
    /// pending (with Slurm's view of its array tasks where squeue or sacct answer).
    Status {
        /// The sweep's directory.
        dir: PathBuf,
    },
    /// Collect every finished run into one table grouped by the swept axes (mean ± std over
    /// seeds): DIR/sweep.json, DIR/sweep.csv and DIR/plots/compare.{png,svg}.
    Report {
        /// The sweep's directory.
        dir: PathBuf,
    },
    /// Execute one run of a sweep's grid in the foreground: what each Slurm array task runs.
    Task {
        /// The sweep's directory (holds grid.json).
        dir: PathBuf,
        /// The run's position in the grid (the array task id).
        #[arg(long)]
        index: usize,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The experiment file.
    config: PathBuf,
    /// Output directory (default: `[run] out`, else `runs/<config name>`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device: cpu, cuda, vulkan or cubecl-cpu (overrides `[run] device`; the last three need their build features).
    #[arg(long)]
    device: Option<String>,
    /// Seed (overrides `[run] seed`).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Several seeds, comma-separated: one run each plus mean ± std.
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
    /// Override a key: `--set train.epochs=3` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Replace an unfinished run in the output directory instead of refusing.
    #[arg(long)]
    overwrite: bool,
}

#[derive(Subcommand)]
enum DataCommand {
    /// Download a dataset's official files and verify them.
    Fetch {
        /// `fashion-mnist` or `mnist`.
        name: String,
        /// Target directory (default `$ENGRAM_DATA/<name>`, `./data/<name>` when unset).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Base URL to download from (default: the official mirror).
        #[arg(long)]
        url: Option<String>,
    },
    /// Write a dataset in a data format (to convert or inspect data): `idx`, `npy`, `csv`,
    /// `image-folder` or a plugin's. The new directory also gets `dataset.toml` (class names,
    /// shape, normalisation), so that `[data] format = F` with `path = DIR` reads back the same
    /// dataset and a run on it gives the same accuracy matrix.
    Export {
        /// A registered dataset (`fashion-mnist`, `mnist`, a plugin's), or with `--from` the
        /// display name of the data at `--path`.
        name: String,
        /// The format to write.
        #[arg(long)]
        format: String,
        /// The directory to create, with its parents (it must not exist; written atomically).
        #[arg(long)]
        out: PathBuf,
        /// Where the dataset's files are (default: where a run looks for them).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Read `--path` in this format instead of a registered dataset (to convert, for
        /// example, CSV to NPY).
        #[arg(long, value_name = "FORMAT")]
        from: Option<String>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
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
        /// The device (`cpu`, `cuda`, `vulkan`, `cubecl-cpu`).
        #[arg(long, default_value = "cpu")]
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
        /// The device (`cpu`, `cuda`, `vulkan`, `cubecl-cpu`).
        #[arg(long, default_value = "cpu")]
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

fn main() -> ExitCode {
    engram::core::device::pin_default_device();
    alloc::tune_malloc();
    std::panic::set_hook(Box::new(|info| {
        // A panic inside a plugin is caught and reported as a typed error naming the plugin.
        if engram::core::plugin::note_plugin_panic(info) {
            return;
        }
        eprintln!(
            "error: internal error: {info}\n  this is a bug in engram; please report it with the command that caused it"
        );
    }));
    let cli = Cli::parse();
    // Ctrl-C during `run` or `resume`: the trainer writes a checkpoint at the next step and
    // stops; a second Ctrl-C exits at once. Any other command exits at once.
    let training = matches!(
        cli.command,
        Command::Run(_)
            | Command::Resume { .. }
            | Command::Sweep {
                command: SweepCommand::Run { .. } | SweepCommand::Task { .. }
            }
    );
    // SIGTERM and SIGHUP (kill, scancel, a closed terminal) are handled as Ctrl-C. A second
    // signal within a second of the first is the same interruption delivered twice (to the
    // process and its group, or by Slurm and by a sweep forwarding it), not a second Ctrl-C.
    let first = std::sync::OnceLock::<std::time::Instant>::new();
    let _ = ctrlc::set_handler(move || {
        use std::sync::atomic::Ordering;
        if !training {
            std::process::exit(130);
        }
        let t0 = *first.get_or_init(std::time::Instant::now);
        if trainer::INTERRUPTED.swap(true, Ordering::SeqCst) {
            if t0.elapsed() < std::time::Duration::from_secs(1) {
                return;
            }
            eprintln!(
                "\nengram: quit without a new checkpoint; `engram resume OUT_DIR` continues from the last one"
            );
            std::process::exit(130);
        }
        eprintln!(
            "\nengram: interrupted; writing a checkpoint at the next step (Ctrl-C again to quit now)"
        );
    });
    // On a thread of engram's pool, so that Burn's parallel ops and the step's serial ones share
    // its threads instead of oversubscribing the cores (engram_core::threads).
    let result = engram::core::threads::install(|| std::panic::catch_unwind(|| dispatch(&cli)));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
        Err(_) => ExitCode::from(1),
    }
}

fn dispatch(cli: &Cli) -> Result<()> {
    let mut registry = engram::registry();
    registry.load_plugins(&cli.plugins)?;
    match &cli.command {
        Command::Run(args) => run(cli, &registry, args),
        Command::Eval {
            checkpoint,
            json,
            confusion,
            device,
        } => {
            let (p, model, progress) =
                trainer::load_checkpoint_model(checkpoint, &registry, device.as_deref())?;
            let seen = progress.round.saturating_sub(1);
            let valid = engram::core::burn::module::Module::valid(&model);
            let acc: Vec<f64> = (0..p.stream.len())
                .map(|t| {
                    trainer::evaluate_task(
                        &valid,
                        &p.stream,
                        t,
                        seen,
                        p.cfg.config.train.eval_batch_size,
                        &p.device,
                    )
                })
                .collect();
            let matrix = confusion.then(|| {
                trainer::confusion_matrix(
                    &valid,
                    &p.stream,
                    seen,
                    p.cfg.config.train.eval_batch_size,
                    &p.device,
                )
            });
            if *json {
                let mut v = serde_json::json!({
                    "tasks_trained": progress.round,
                    "step_in_task": progress.step_in_task,
                    "accuracy": acc,
                });
                if let Some(m) = &matrix {
                    v["confusion"] = serde_json::json!(m);
                    v["class_names"] = serde_json::json!(p.stream.dataset.class_names);
                }
                println!("{v}");
            } else {
                if progress.step_in_task > 0 {
                    println!(
                        "after {} finished task(s) and {} step(s) of task {}:",
                        progress.round, progress.step_in_task, progress.round
                    );
                } else {
                    println!("after {} trained task(s):", progress.round);
                }
                for (t, a) in acc.iter().enumerate() {
                    println!("  T{t}  {:5.1} %", a * 100.0);
                }
                let mean = |a: &[f64]| a.iter().sum::<f64>() / a.len().max(1) as f64 * 100.0;
                let trained = progress.round.min(acc.len());
                if trained == acc.len() || trained == 0 {
                    println!("  mean {:5.1} %", mean(&acc));
                } else {
                    // Mid-stream: the untrained tasks score (near) zero in a class-incremental
                    // stream, so the mean over all tasks is not the run's ACC.
                    println!(
                        "  mean {:5.1} % over the {trained} finished task(s), {:5.1} % over all {}",
                        mean(&acc[..trained]),
                        mean(&acc),
                        acc.len()
                    );
                }
                if let Some(m) = &matrix {
                    print!(
                        "{}",
                        engram::summary::confusion_table(m, &p.stream.dataset.class_names)
                    );
                }
            }
            Ok(())
        }
        Command::Export {
            checkpoint,
            safetensors,
            device,
        } => {
            // The run's own files are not an export target.
            if let (Some(name), Some(dir)) = (
                safetensors.file_name().and_then(|n| n.to_str()),
                safetensors.parent().and_then(|p| {
                    std::fs::canonicalize(if p.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        p
                    })
                    .ok()
                }),
            ) && engram::outdir::RUN_FILES.contains(&name)
                && std::fs::canonicalize(checkpoint).is_ok_and(|c| c.ancestors().any(|a| a == dir))
            {
                return Err(Error::Usage(format!(
                    "--safetensors {}: that is a file of the run itself; write the export elsewhere",
                    safetensors.display()
                )));
            }
            if safetensors.is_dir() {
                return Err(Error::Usage(format!(
                    "--safetensors {}: that is a directory; name the file to write, e.g. {}",
                    safetensors.display(),
                    safetensors.join("model.safetensors").display()
                )));
            }
            if let Some(parent) = safetensors.parent()
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                let why = if parent.exists() {
                    "is not a directory"
                } else {
                    "does not exist; create it first"
                };
                return Err(Error::Usage(format!(
                    "--safetensors {}: {} {why}",
                    safetensors.display(),
                    parent.display()
                )));
            }
            let (_, model, _) =
                trainer::load_checkpoint_model(checkpoint, &registry, device.as_deref())?;
            trainer::export_safetensors(&model, safetensors)?;
            if !cli.quiet {
                println!("{}", safetensors.display());
            }
            Ok(())
        }
        Command::Resume { out, device } => resume(cli, &registry, out, device.as_deref()),
        Command::Validate { config, sets } => {
            let cfg = LoadedConfig::load(config, sets)?;
            let p = prepare(cfg, &registry, sets)?;
            if !cli.quiet {
                println!(
                    "{}: ok ({} tasks, {} forgetting, {} memory, {} scheduler strategies; data from {})",
                    config.display(),
                    p.stream.len(),
                    p.forgetting.len(),
                    p.memory.len(),
                    p.schedulers.len(),
                    p.stream.dataset.dir.display()
                );
            }
            Ok(())
        }
        Command::List { json } => {
            list(&registry, *json);
            if !*json && !cli.quiet {
                for p in registry.plugins() {
                    println!(
                        "plugin {} ({}): build {}\n  sha256 {}",
                        p.path.display(),
                        p.name,
                        p.build_id,
                        p.sha256
                    );
                }
            }
            Ok(())
        }
        Command::Data {
            command: DataCommand::Fetch { name, dir, url },
        } => {
            let spec = dataset::spec(name)?;
            let dir = dir
                .clone()
                .unwrap_or_else(|| dataset::data_root().join(name));
            let url = url.clone().unwrap_or_else(|| spec.base_url.to_string());
            let files = engram::fetch::fetch(spec, &url, &dir, None)?;
            if !cli.quiet {
                for f in files {
                    println!("{}", f.display());
                }
            }
            Ok(())
        }
        Command::Data {
            command:
                DataCommand::Export {
                    name,
                    format,
                    out,
                    path,
                    from,
                },
        } => {
            let ds = registry.read_data(name, from.as_deref(), path.as_deref())?;
            let dir = registry.write_data(&ds, format, out)?;
            if !cli.quiet {
                println!(
                    "{}: {} train and {} test samples of {} in {} classes, written as {format}",
                    dir.display(),
                    ds.train.len(),
                    ds.test.len(),
                    ds.input,
                    ds.classes
                );
            }
            Ok(())
        }
        Command::Bench {
            command:
                BenchCommand::Memory {
                    model,
                    batch,
                    depth,
                    width,
                    steps,
                    json,
                    dtype,
                    device,
                },
        } => {
            use engram::bench::BenchModel;
            for (flag, v) in [
                ("--batch", *batch),
                ("--depth", *depth),
                ("--width", *width),
            ] {
                if v == Some(0) {
                    return Err(Error::Usage(format!(
                        "bench memory: {flag} must be at least 1"
                    )));
                }
            }
            if *steps == 0 {
                return Err(Error::Usage(
                    "bench memory: --steps must be at least 1".into(),
                ));
            }
            let amp = match dtype.as_str() {
                "f16" => engram::strategies::amp::Precision::F16,
                "bf16" => engram::strategies::amp::Precision::Bf16,
                other => {
                    return Err(Error::Usage(format!(
                        "bench memory: unknown dtype `{other}` (available: f16, bf16)"
                    )));
                }
            };
            let (m, batch) = match model.as_str() {
                "vit" => (
                    BenchModel::Vit {
                        depth: depth.unwrap_or(8),
                        width: width.unwrap_or(128),
                    },
                    batch.unwrap_or(256),
                ),
                "mlp" => (
                    BenchModel::Mlp {
                        depth: depth.unwrap_or(16),
                        width: width.unwrap_or(256),
                    },
                    batch.unwrap_or(4096),
                ),
                other => {
                    return Err(Error::Usage(format!(
                        "bench memory: unknown model `{other}` (available: vit, mlp)"
                    )));
                }
            };
            let name = device;
            let device = engram::core::device::select(name)?;
            let rows = engram::bench::memory(&device, &m, batch, (*steps).max(1), amp)?;
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
        Command::Bench {
            command:
                BenchCommand::Throughput {
                    json,
                    python,
                    steps,
                    batch,
                    device,
                    threads,
                    single,
                },
        } => bench_throughput(&ThroughputArgs {
            json: json.as_deref(),
            python,
            steps: *steps,
            batch: *batch,
            device,
            threads,
            single: *single,
        }),
        Command::Bench {
            command:
                BenchCommand::Suite {
                    quick,
                    sweep: file,
                    out,
                    jobs,
                    markdown,
                },
        } => bench_suite(
            cli,
            &registry,
            *quick,
            file.as_deref(),
            out.as_deref(),
            *jobs,
            markdown.as_deref(),
        ),
        Command::Report { dir, out } => {
            let files = engram::report::render_dir(dir, out.as_deref())?;
            if !cli.quiet {
                for f in files {
                    println!("{}", f.display());
                }
            }
            Ok(())
        }
        Command::Compare { dirs, plots } => {
            let (table, warnings) = engram::report::compare(dirs)?;
            print!("{table}");
            for w in warnings {
                eprintln!("{w}");
            }
            if let Some(out) = plots {
                let rows = dirs
                    .iter()
                    .map(|d| engram::report::run_row(d))
                    .collect::<Result<Vec<_>>>()?;
                std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
                for f in engram::report::render_rows(&rows, out)? {
                    if !cli.quiet {
                        println!("{}", f.display());
                    }
                }
            }
            Ok(())
        }
        Command::Sweep { command } => sweep(cli, &registry, command),
    }
}

/// Parses a sweep file and checks every run's config as `engram validate` does (each error
/// placed at the axis value that caused it, or in the base config); returns the sweep. A grid
/// of over 50 runs says so first on standard error, unless `quiet`.
fn validated_sweep(registry: &Registry, file: &Path, quiet: bool) -> Result<engram::sweep::Sweep> {
    let sweep = engram::sweep::Sweep::load(file)?;
    for (config, offset) in &sweep.configs {
        if !config.is_file() {
            return Err(sweep.error_at(
                *offset,
                format!("config {} does not exist", config.display()),
                Some("paths in a sweep file are relative to the sweep file's directory".into()),
            ));
        }
    }
    let grid = sweep.grid();
    if grid.len() > 50 && !quiet {
        eprintln!("engram: checking the {} runs of the grid…", grid.len());
    }
    let mut errors: Vec<Error> = Vec::new();
    let mut prepared_cells = std::collections::HashSet::new();
    for run in grid {
        // Every run's config is decoded; the data and strategies are built once per cell (its
        // seeds differ only in `run.seed`).
        let checked = LoadedConfig::load(&run.config, &run.sets).and_then(|cfg| {
            if prepared_cells.insert(run.cell.clone()) {
                prepare(cfg, registry, &run.sets).map(drop)
            } else {
                Ok(())
            }
        });
        if let Err(e) = checked {
            let e = sweep.place_error(&run, e);
            if !errors.iter().any(|o| o.to_string() == e.to_string()) {
                errors.push(e);
            }
        }
    }
    // Every distinct error in grid order; the last is the command's error.
    match errors.pop() {
        Some(last) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            Err(last)
        }
        None => Ok(sweep),
    }
}

fn sweep_out(sweep: &engram::sweep::Sweep, out: &Option<PathBuf>) -> PathBuf {
    out.clone()
        .or_else(|| sweep.out.clone())
        .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name))
}

/// `engram bench suite`: runs the suite's sweep here (`jobs` at a time), then prints its tables
/// and writes them to DIR/suite.md (and `markdown`). The suite file defaults to
/// `bench/suite.toml` (`bench/suite-quick.toml` with `quick`) under the current directory.
fn bench_suite(
    cli: &Cli,
    registry: &Registry,
    quick: bool,
    file: Option<&Path>,
    out: Option<&Path>,
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
    let dir = sweep_out(&sweep, &out.map(Path::to_path_buf));
    let written = || {
        std::fs::metadata(dir.join("sweep.json"))
            .and_then(|m| m.modified())
            .ok()
    };
    let before = written();
    let ran = sweep_run_cmd(cli, registry, &file, Some(dir.clone()), jobs, None);
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

/// `engram sweep run FILE --out DIR --jobs N [--threads T]`, as the sweep command runs it.
fn sweep_run_cmd(
    cli: &Cli,
    registry: &Registry,
    file: &Path,
    out: Option<PathBuf>,
    jobs: usize,
    threads: Option<usize>,
) -> Result<()> {
    sweep(
        cli,
        registry,
        &SweepCommand::Run {
            sweep: file.to_path_buf(),
            out,
            jobs,
            threads,
        },
    )
}

fn sweep(cli: &Cli, registry: &Registry, command: &SweepCommand) -> Result<()> {
    use engram::sweep::{aggregate, exec::Status, local, slurm};
    let exe = std::env::current_exe().map_err(|e| Error::Other(format!("current_exe: {e}")))?;
    match command {
        SweepCommand::Validate { sweep: file } => {
            let sweep = validated_sweep(registry, file, cli.quiet)?;
            let grid = sweep.grid();
            if !cli.quiet {
                for (i, r) in grid.iter().enumerate() {
                    println!("{i:>4}  {}  {}", r.name, r.sets.join(" "));
                }
            }
            println!(
                "{}: ok ({} runs in {} cells; every run's config checked)",
                file.display(),
                grid.len(),
                grid.iter()
                    .map(|r| &r.cell)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            );
            Ok(())
        }
        SweepCommand::Run {
            sweep: file,
            out,
            jobs,
            threads,
        } => {
            if *jobs == 0 || *threads == Some(0) {
                return Err(Error::Usage(
                    "sweep run: --jobs and --threads must be at least 1".into(),
                ));
            }
            let sweep = validated_sweep(registry, file, cli.quiet)?;
            let dir = sweep_out(&sweep, out);
            let manifest = sweep.manifest(&cli.plugins);
            manifest.install(&dir, &sweep.source)?;
            let threads = threads.unwrap_or_else(|| local::default_threads(*jobs));
            if !cli.quiet {
                eprintln!(
                    "engram: sweep {} ({} runs, {jobs} at a time, {threads} thread{} each) -> {}",
                    sweep.name,
                    manifest.runs.len(),
                    if threads == 1 { "" } else { "s" },
                    dir.display()
                );
            }
            let mut summary = local::run(&exe, &dir, &manifest, *jobs, threads, cli.quiet)
                .map_err(|e| match e {
                    Error::Interrupted(m) => Error::Interrupted(format!(
                        "{m}; continue with `engram sweep run {} --out {}`",
                        file.display(),
                        dir.display()
                    )),
                    other => other,
                })?;
            let (table, _) = aggregate::report(&dir)?;
            if !cli.quiet {
                print!("{table}");
            }
            // Runs another process was executing may have finished meanwhile.
            summary.busy.retain(|name| {
                manifest.runs.iter().any(|r| {
                    &r.name == name && engram::sweep::exec::status(&dir, r) != Status::Done
                })
            });
            let done = manifest
                .runs
                .iter()
                .filter(|r| engram::sweep::exec::status(&dir, r) == Status::Done)
                .count();
            println!(
                "sweep {}: {done} of {} runs done ({} now, {} before), {} failed{}; table in {}",
                sweep.name,
                summary.total,
                summary.finished,
                summary.skipped,
                summary.failed.len(),
                if summary.busy.is_empty() {
                    String::new()
                } else {
                    format!(", {} running in another process", summary.busy.len())
                },
                dir.join("sweep.csv").display()
            );
            match summary.failed.first() {
                Some((name, e)) => Err(Error::Other(format!(
                    "{} of {} runs failed (first: {name}: {e}); `engram sweep status {}` lists them, and a rerun retries them",
                    summary.failed.len(),
                    summary.total,
                    dir.display()
                ))),
                None => Ok(()),
            }
        }
        SweepCommand::Submit {
            sweep: file,
            out,
            print,
        } => {
            let sweep = validated_sweep(registry, file, cli.quiet)?;
            let dir = std::path::absolute(sweep_out(&sweep, out))
                .map_err(|e| Error::Other(format!("--out: {e}")))?;
            let manifest = sweep.manifest(&cli.plugins);
            let todo: Vec<usize> = if dir.join(engram::sweep::grid::MANIFEST).is_file() {
                (0..manifest.runs.len())
                    .filter(|&i| {
                        engram::sweep::exec::status(&dir, &manifest.runs[i]) != Status::Done
                    })
                    .collect()
            } else {
                (0..manifest.runs.len()).collect()
            };
            let engram_bin = slurm::engram_binary(&manifest);
            let script = slurm::script(&manifest, &dir, &engram_bin, &todo);
            if *print && !todo.is_empty() {
                print!("{script}");
                return Ok(());
            }
            if *print {
                println!(
                    "# sweep {}: every run in {} is done; nothing to submit",
                    sweep.name,
                    dir.display()
                );
                return Ok(());
            }
            manifest.install(&dir, &sweep.source)?;
            if todo.is_empty() {
                println!(
                    "sweep {}: every run is done; nothing to submit ({})",
                    sweep.name,
                    dir.display()
                );
                return Ok(());
            }
            let sub = slurm::submit(&dir, &script, &todo)?;
            println!(
                "submitted job array {} ({} of {} runs) for sweep {}; `engram sweep status {}` follows it",
                sub.job_id,
                todo.len(),
                manifest.runs.len(),
                sweep.name,
                dir.display()
            );
            Ok(())
        }
        SweepCommand::Status { dir } => {
            print!("{}", aggregate::status(dir)?);
            Ok(())
        }
        SweepCommand::Report { dir } => {
            let (table, files) = aggregate::report(dir)?;
            print!("{table}");
            if !cli.quiet {
                for f in files {
                    println!("{}", f.display());
                }
            }
            Ok(())
        }
        SweepCommand::Task { dir, index } => {
            let status = slurm::task(&exe, dir, *index)?;
            let m = engram::sweep::Manifest::read(dir)?;
            let name = &m.runs[*index].name;
            match status {
                Status::Running => println!(
                    "run {index} ({name}): already being executed by another process ({}); this task did nothing",
                    {
                        let st = engram::sweep::exec::read_state(
                            &engram::sweep::exec::RunPaths::of(dir, &m.runs[*index]),
                        );
                        format!("pid {} on {}", st.pid, st.host)
                    }
                ),
                other => println!("run {index} ({name}): {}", other.word()),
            }
            match status {
                Status::Done | Status::Running => Ok(()),
                Status::Interrupted => Err(Error::Interrupted(format!(
                    "run {name} stopped before its report; its checkpoints are kept"
                ))),
                _ => Err(Error::Other(format!(
                    "run {name} failed; its log is {}",
                    engram::sweep::exec::RunPaths::of(dir, &m.runs[*index])
                        .log
                        .display()
                ))),
            }
        }
    }
}

fn default_out(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from("runs").join(stem)
}

/// [`trainer::prepare`], with an error in a strategy's keys placed for the user by
/// [`engram::core::config::relocate_override_error`]: blamed on the `--set` override that
/// wrote a wrongly typed value, or positioned in the file as the user wrote it.
fn prepare(cfg: LoadedConfig, registry: &Registry, sets: &[String]) -> Result<trainer::Prepared> {
    let (file, rewritten) = (cfg.file.clone(), cfg.source.clone());
    trainer::prepare(cfg, registry).map_err(|e| {
        // The file as the user wrote it, read again only to place an error.
        let original = std::fs::read_to_string(&file).unwrap_or_else(|_| rewritten.to_string());
        engram::core::config::relocate_override_error(e, &original, &rewritten, sets)
    })
}

fn run(cli: &Cli, registry: &Registry, args: &RunArgs) -> Result<()> {
    let mut sets = args.sets.clone();
    if let Some(d) = &args.device {
        // A device this build or machine lacks is the flag's fault, not the config file's.
        engram::core::device::select(d)?;
        sets.push(format!("run.device=\"{d}\""));
    }
    let base = LoadedConfig::load(&args.config, &sets)?;
    let out = args
        .out
        .clone()
        .or_else(|| base.config.run.out.clone())
        .unwrap_or_else(|| default_out(&args.config));
    let seeds: Vec<Option<u64>> = if args.seeds.is_empty() {
        vec![args.seed]
    } else {
        args.seeds.iter().copied().map(Some).collect()
    };
    let mut distinct = args.seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != args.seeds.len() {
        return Err(Error::ConfigFile {
            file: args.config.clone(),
            message: format!("--seeds {:?} repeats a seed", args.seeds),
            hint: Some("list each seed once, e.g. --seeds 0,1,2".into()),
        });
    }
    let multi = seeds.len() > 1;
    // Every seed's config is checked, and the first seed's data and strategies are built,
    // before any output is written; each later seed is prepared right before it runs.
    let configs = seeds
        .iter()
        .map(|s| {
            let mut sets = sets.clone();
            if let Some(s) = s {
                sets.push(format!("run.seed={s}"));
            }
            LoadedConfig::load(&args.config, &sets)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut first = Some(prepare(configs[0].clone(), registry, &sets)?);
    // The output directory is taken (locked) before anything is written; a directory that
    // holds a run gets this one beside it, in OUT/attempts/<time>/, until it finishes.
    let claim = engram::outdir::claim(&out, args.overwrite)?;
    let target = claim.target.clone();
    if claim.replaces.is_some() && !cli.quiet {
        // A run of another config file in the same directory (two configs of one stem) is
        // named, so that replacing it is never a surprise.
        let held = engram::core::train::manifest::RunManifest::read(&out).map(|m| m.config);
        let mine = std::path::absolute(&args.config).unwrap_or_else(|_| args.config.clone());
        match held {
            Some(other) if other != mine => eprintln!(
                "engram: {} holds a run of another config, {}; this one ({}) works in {} and \
                 replaces it when it finishes (choose another --out to keep both)",
                out.display(),
                other.display(),
                args.config.display(),
                target.display()
            ),
            _ => eprintln!(
                "engram: {} holds a run; this one works in {} and replaces it when it finishes",
                out.display(),
                target.display()
            ),
        }
    }
    let dirs: Vec<PathBuf> = configs
        .iter()
        .map(|c| {
            if multi {
                target.join(format!("seed-{}", c.config.run.seed))
            } else {
                target.clone()
            }
        })
        .collect();
    if multi {
        // Every seed's config is written before any trains, so that `engram resume OUT` can
        // finish a killed multi-seed run, seeds not yet started included.
        let plugins = first
            .as_ref()
            .map(|p| p.plugins.clone())
            .unwrap_or_default();
        for (cfg, dir) in configs.iter().zip(&dirs) {
            engram::core::train::manifest::RunManifest::write(dir, cfg, &plugins)?;
        }
    }
    let progress = !cli.quiet && std::io::stderr().is_terminal();
    let mut reports = Vec::new();
    let mut failures: Vec<(u64, Error)> = Vec::new();
    for (cfg, dir) in configs.into_iter().zip(dirs) {
        let seed = cfg.config.run.seed;
        let p = match first.take() {
            Some(p) => p,
            None => prepare(cfg, registry, &sets)?,
        };
        if cli.verbose > 0 {
            let names = |v: Vec<&str>| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join(", ")
                }
            };
            eprintln!(
                "engram: forgetting: {}; memory chain: {}; schedulers: {}; data: {}",
                names(p.forgetting.iter().map(|s| s.name()).collect()),
                names(p.memory.iter().map(|s| s.name()).collect()),
                names(p.schedulers.iter().map(|s| s.name()).collect()),
                p.stream.dataset.dir.display()
            );
            if cli.verbose > 1 {
                eprintln!("{}", p.cfg.source);
            }
        }
        if !cli.quiet {
            let n = p.stream.len();
            eprintln!(
                "engram: {} ({n} task{}, seed {seed}, data from {}) -> {}",
                args.config.display(),
                if n == 1 { "" } else { "s" },
                p.stream.dataset.dir.display(),
                dir.display()
            );
        }
        match trainer::run(p, &RunOptions { out: dir, progress }) {
            Ok(report) => {
                if !cli.quiet {
                    print!("{}", engram::summary::run_table(&report));
                }
                reports.push(report);
            }
            Err(e @ Error::Interrupted(_)) => return Err(resume_hint(e, &target)),
            // One diverging seed does not discard the others' runs.
            Err(e) if multi => {
                eprintln!("error: seed {seed}: {e}");
                failures.push((seed, e));
            }
            Err(e) => {
                kept_note(&claim);
                return Err(e);
            }
        }
    }
    if multi {
        write_aggregate(&target, &reports, &failures)?;
    }
    match (&claim.replaces, failures.is_empty()) {
        (Some(dest), true) => engram::outdir::promote(&target, dest)?,
        (Some(_), false) => kept_note(&claim),
        _ => {}
    }
    if !multi
        && cli.quiet
        && let Some(r) = reports.first()
    {
        println!("ACC {:.4}", r.metrics.acc.unwrap_or(f64::NAN));
    }
    match failures.into_iter().next() {
        Some((seed, e)) => Err(seeds_failed(seed, &e, reports.len())),
        None => Ok(()),
    }
}

/// The error of a `--seeds` run some of whose seeds failed (`done` seeds finished).
fn seeds_failed(seed: u64, e: &Error, done: usize) -> Error {
    if done == 0 {
        Error::Other(format!(
            "every seed failed (seed {seed}: {e}); the aggregate lists the failures"
        ))
    } else {
        Error::Other(format!(
            "seed {seed} failed ({e}); the aggregate covers the {done} other seed(s) and lists the failure"
        ))
    }
}

/// Tells the user that a new run that did not finish left the run it was to replace as it
/// was, and where its own record is.
fn kept_note(claim: &engram::outdir::Claim) {
    if let Some(dest) = &claim.replaces {
        eprintln!(
            "engram: the run in {} is unchanged; this attempt's record (report.json with status \"failed\", steps.csv) is in {}",
            dest.display(),
            claim.target.display()
        );
    }
}

/// Writes `out/aggregate.json` (mean ± std over `reports`, the failed seeds listed) and prints
/// its table.
fn write_aggregate(
    out: &Path,
    reports: &[engram::core::train::report::Report],
    failures: &[(u64, Error)],
) -> Result<()> {
    let metrics: Vec<_> = reports.iter().map(|r| r.metrics.clone()).collect();
    let task_il: Vec<_> = reports
        .iter()
        .filter_map(|r| r.task_il_metrics.clone())
        .collect();
    let agg = serde_json::json!({
        "seeds": reports.iter().map(|r| r.seed).collect::<Vec<_>>(),
        "metrics": engram::summary::aggregate(&metrics, &task_il),
        "runs": reports.iter().map(|r| format!("seed-{}", r.seed)).collect::<Vec<_>>(),
        "failed": failures.iter().map(|(s, e)| serde_json::json!({"seed": s, "error": e.to_string()})).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec_pretty(&agg).map_err(|e| Error::Other(e.to_string()))?;
    engram::core::fsutil::write_atomic(&out.join("aggregate.json"), &bytes)?;
    let n = reports.len();
    println!("mean ± std over {n} seed{}:", if n == 1 { "" } else { "s" });
    print!("{}", engram::summary::aggregate_table(&agg["metrics"]));
    Ok(())
}

/// The `seed-N` run directories of a multi-seed output directory, by seed.
fn seed_dirs(out: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let seed = name.strip_prefix("seed-")?.parse().ok()?;
                    e.path()
                        .join("config.toml")
                        .is_file()
                        .then(|| (seed, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `engram resume OUT`: one run, or every seed of a `--seeds` run (finished seeds are read,
/// the others resumed or started), then the aggregate again.
fn resume(cli: &Cli, registry: &Registry, out: &Path, device: Option<&str>) -> Result<()> {
    // Refused before the lock file is written (issue #32): an entry of the wrong kind.
    trainer::check_resumable(out)?;
    // One writer at a time, as for `run`: an attempt (OUT/attempts/<time>) is written under its
    // output directory's lock, which the run that started it may still hold.
    let parent = engram::outdir::replaces(out);
    let _lock = match (&parent, out.is_dir()) {
        (Some(dest), _) => Some(engram::outdir::take(dest)?),
        (None, true) => Some(engram::outdir::take(out)?),
        (None, false) => None,
    };
    if out.is_dir() && parent.is_none() {
        engram::outdir::finish_swap(out)?;
    }
    resume_locked(cli, registry, out, device)?;
    // A finished attempt replaces the run it was started beside, if that run is still there.
    if let Some(dest) = parent {
        if engram::outdir::still_replaces(out, &dest) {
            engram::outdir::promote(out, &dest)?;
            if !cli.quiet {
                eprintln!(
                    "engram: the finished attempt replaced the run in {}",
                    dest.display()
                );
            }
        } else {
            eprintln!(
                "engram: the run in {} changed since this attempt started; the finished attempt stays in {}",
                dest.display(),
                out.display()
            );
        }
    }
    Ok(())
}

fn resume_locked(cli: &Cli, registry: &Registry, out: &Path, device: Option<&str>) -> Result<()> {
    let progress = !cli.quiet && std::io::stderr().is_terminal();
    let seeds = seed_dirs(out);
    if out.join("config.toml").is_file() || seeds.is_empty() {
        let report =
            trainer::resume(out, registry, progress, device).map_err(|e| resume_hint(e, out))?;
        if cli.quiet {
            println!("ACC {:.4}", report.metrics.acc.unwrap_or(f64::NAN));
        } else {
            print!("{}", engram::summary::run_table(&report));
        }
        return Ok(());
    }
    let (mut reports, mut failures) = (Vec::new(), Vec::new());
    for (seed, dir) in seeds {
        let r = if engram::core::train::report::finished_run(&dir) {
            engram::report::load_report(&dir)
        } else {
            trainer::resume(&dir, registry, progress, device)
        };
        match r {
            Ok(r) => reports.push(r),
            Err(e @ Error::Interrupted(_)) => return Err(resume_hint(e, out)),
            Err(e) => {
                eprintln!("error: seed {seed}: {e}");
                failures.push((seed, e));
            }
        }
    }
    write_aggregate(out, &reports, &failures)?;
    match failures.into_iter().next() {
        Some((seed, e)) => Err(seeds_failed(seed, &e, reports.len())),
        None => Ok(()),
    }
}

/// Adds to an interruption how to continue: `engram resume OUT` for the directory the user
/// gave. For a `--seeds` run that is the whole directory (every unfinished seed, then the
/// aggregate), not the interrupted seed's, which would not write the aggregate.
fn resume_hint(e: Error, out: &Path) -> Error {
    match e {
        Error::Interrupted(m) => Error::Interrupted(format!(
            "{m}; continue with `engram resume {}`",
            out.display()
        )),
        other => other,
    }
}

fn list(registry: &Registry, json: bool) {
    if json {
        let v: Vec<_> = registry
            .entries()
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.registration.name,
                    "kind": e.registration.factory.kind(),
                    "summary": e.registration.summary,
                    "defaults": (e.registration.defaults)(),
                    "origin": e.origin.to_string(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let mut kind = None;
    for e in registry.entries() {
        let k = e.registration.factory.kind();
        if kind != Some(k) {
            println!("[{}]", k.list());
            kind = Some(k);
        }
        println!(
            "  {:<12} {}  ({})",
            e.registration.name, e.registration.summary, e.origin
        );
        for (key, value) in (e.registration.defaults)() {
            println!("      {key} = {value}");
        }
    }
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

/// The PyTorch twin, embedded so that an installed or bundled binary carries it.
const TORCH_TWIN: &str = include_str!("../bench/throughput_torch.py");

/// Runs the PyTorch twin with `threads` intra-op threads; `None` when PyTorch cannot run.
fn torch_twin(a: &ThroughputArgs, threads: usize) -> Option<serde_json::Value> {
    use std::io::Write as _;
    let device = if a.device == "cuda" { "cuda" } else { "cpu" };
    let mut child = std::process::Command::new(a.python)
        .arg("-")
        .args([
            "--batch",
            &a.batch.to_string(),
            "--steps",
            &a.steps.to_string(),
        ])
        .args(["--threads", &threads.to_string(), "--device", device])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(TORCH_TWIN.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
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

fn bench_throughput(a: &ThroughputArgs) -> Result<()> {
    if a.steps == 0 || a.batch == 0 {
        return Err(Error::Usage(
            "bench throughput: --steps and --batch must be at least 1".into(),
        ));
    }
    let counts: Vec<usize> = if a.threads == "none" || a.single {
        Vec::new()
    } else {
        a.threads
            .split(',')
            .map(|t| t.trim().parse::<usize>().ok().filter(|&n| n > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                Error::Usage(format!(
                    "bench throughput: --threads `{}` is not a list of thread counts such as 1,2 (or `none`)",
                    a.threads
                ))
            })?
    };
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
    let mut rows = Vec::new();
    let mut torch_version = None;
    if !counts.is_empty() {
        println!(
            "{:>7} {:>18} {:>18} {:>15}",
            "threads", "engram samples/s", "PyTorch samples/s", "engram/PyTorch"
        );
    }
    for &n in &counts {
        let e = engram_child(a, n)?["train_samples_per_s"]
            .as_f64()
            .unwrap_or(f64::NAN);
        let t = torch_twin(a, n);
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
    out["rows"] = rows.into();
    out["torch"] = torch_version.into();
    if let Some(path) = a.json {
        let bytes = serde_json::to_vec_pretty(&out).map_err(|e| Error::Other(e.to_string()))?;
        engram::core::fsutil::write_atomic(path, &bytes)?;
    }
    Ok(())
}
