//! `engram sweep validate|run|submit|status|report|task`: grids of runs (the library's
//! [`engram::sweep`]).

use super::{Cli, prepare};
use clap::{Args, Subcommand};
use engram::core::config::LoadedConfig;
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use engram::sweep::exec::{self, Status};
use engram::sweep::{aggregate, local, slurm};
use std::path::{Path, PathBuf};

/// `engram sweep`'s arguments: one of its subcommands.
#[derive(Args)]
pub struct SweepArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: SweepCommand,
}

/// `engram sweep`'s subcommands.
#[derive(Subcommand)]
pub enum SweepCommand {
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

impl SweepCommand {
    /// Whether the command trains (`run`, `task`).
    pub fn trains(&self) -> bool {
        matches!(self, SweepCommand::Run { .. } | SweepCommand::Task { .. })
    }
}

/// `engram sweep …`.
pub fn sweep(cli: &Cli, registry: &Registry, args: &SweepArgs) -> Result<()> {
    match &args.command {
        SweepCommand::Validate { sweep } => validate(cli, registry, sweep),
        SweepCommand::Run {
            sweep,
            out,
            jobs,
            threads,
        } => run(cli, registry, sweep, out.clone(), *jobs, *threads),
        SweepCommand::Submit { sweep, out, print } => {
            submit(cli, registry, sweep, out.clone(), *print)
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
        SweepCommand::Task { dir, index } => task(dir, *index),
    }
}

/// This binary, which the sweep's runs execute.
fn current_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| Error::Other(format!("current_exe: {e}")))
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

/// The sweep's directory: `--out`, else the file's `[sweep] out`, else `runs/<sweep name>`.
pub fn sweep_out(sweep: &engram::sweep::Sweep, out: Option<PathBuf>) -> PathBuf {
    out.or_else(|| sweep.out.clone())
        .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name))
}

/// `engram sweep validate FILE`: the grid, one run a line, and every run's config checked.
fn validate(cli: &Cli, registry: &Registry, file: &Path) -> Result<()> {
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

/// `engram sweep run FILE [--out DIR] --jobs N [--threads T]` (also what `bench suite` runs).
pub fn run(
    cli: &Cli,
    registry: &Registry,
    file: &Path,
    out: Option<PathBuf>,
    jobs: usize,
    threads: Option<usize>,
) -> Result<()> {
    if jobs == 0 || threads == Some(0) {
        return Err(Error::Usage(
            "sweep run: --jobs and --threads must be at least 1".into(),
        ));
    }
    let sweep = validated_sweep(registry, file, cli.quiet)?;
    let dir = sweep_out(&sweep, out);
    let manifest = sweep.manifest(&cli.plugins);
    manifest.install(&dir, &sweep.source)?;
    let threads = threads.unwrap_or_else(|| local::default_threads(jobs));
    if !cli.quiet {
        eprintln!(
            "engram: sweep {} ({} runs, {jobs} at a time, {threads} thread{} each) -> {}",
            sweep.name,
            manifest.runs.len(),
            if threads == 1 { "" } else { "s" },
            dir.display()
        );
    }
    let mut summary = local::run(&current_exe()?, &dir, &manifest, jobs, threads, cli.quiet)
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
    let done = |r| exec::status(&dir, r) == Status::Done;
    // Runs another process was executing may have finished meanwhile.
    summary
        .busy
        .retain(|name| manifest.runs.iter().any(|r| &r.name == name && !done(r)));
    println!(
        "sweep {}: {} of {} runs done ({} now, {} before), {} failed{}; table in {}",
        sweep.name,
        manifest.runs.iter().filter(|r| done(r)).count(),
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

/// `engram sweep submit FILE [--out DIR] [--print]`: the unfinished runs as one Slurm job
/// array.
fn submit(
    cli: &Cli,
    registry: &Registry,
    file: &Path,
    out: Option<PathBuf>,
    print: bool,
) -> Result<()> {
    let sweep = validated_sweep(registry, file, cli.quiet)?;
    let dir = std::path::absolute(sweep_out(&sweep, out))
        .map_err(|e| Error::Other(format!("--out: {e}")))?;
    let manifest = sweep.manifest(&cli.plugins);
    let todo: Vec<usize> = if dir.join(engram::sweep::grid::MANIFEST).is_file() {
        (0..manifest.runs.len())
            .filter(|&i| exec::status(&dir, &manifest.runs[i]) != Status::Done)
            .collect()
    } else {
        (0..manifest.runs.len()).collect()
    };
    let engram_bin = slurm::engram_binary(&manifest);
    let script = slurm::script(&manifest, &dir, &engram_bin, &todo);
    if print && !todo.is_empty() {
        print!("{script}");
        return Ok(());
    }
    if print {
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

/// `engram sweep task DIR --index I`: one run of the grid in the foreground.
fn task(dir: &Path, index: usize) -> Result<()> {
    let status = slurm::task(&current_exe()?, dir, index)?;
    let m = engram::sweep::Manifest::read(dir)?;
    let name = &m.runs[index].name;
    let paths = exec::RunPaths::of(dir, &m.runs[index]);
    match status {
        Status::Running => {
            let st = exec::read_state(&paths);
            println!(
                "run {index} ({name}): already being executed by another process (pid {} on {}); this task did nothing",
                st.pid, st.host
            )
        }
        other => println!("run {index} ({name}): {}", other.word()),
    }
    match status {
        Status::Done | Status::Running => Ok(()),
        Status::Interrupted => Err(Error::Interrupted(format!(
            "run {name} stopped before its report; its checkpoints are kept"
        ))),
        _ => Err(Error::Other(format!(
            "run {name} failed; its log is {}",
            paths.log.display()
        ))),
    }
}
