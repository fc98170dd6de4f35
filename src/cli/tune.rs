//! `engram tune CONFIG --grid KEY=V1,V2 … --out DIR`: a recipe's knobs chosen on the first
//! tasks' validation split ([`engram::sweep::tune`], A-GEM's protocol), run as a sweep.

use super::{Cli, prepare};
use clap::Args;
use engram::core::config::LoadedConfig;
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use engram::sweep::tune::{self, GridAxis};
use std::path::{Path, PathBuf};

/// `engram tune`'s arguments.
#[derive(Args)]
pub struct TuneArgs {
    /// The experiment file whose knobs are tuned.
    config: PathBuf,
    /// A key and the values to try: `--grid forgetting.1.distill=0.25,0.5,1.0` (repeatable;
    /// the grid is every combination; a list value is written `[400,400]`).
    #[arg(long = "grid", value_name = "KEY=V1,V2", required = true)]
    grid: Vec<String>,
    /// Tune on the first K tasks (A-GEM's protocol: 3); the later ones take no part.
    #[arg(long, default_value_t = tune::DEFAULT_TASKS)]
    tasks: usize,
    /// Share of each task's training samples held out and evaluated on, in (0, 0.5].
    #[arg(long, default_value_t = 0.1)]
    validation: f64,
    /// The seeds each point runs with; the choice is on their mean ACC.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    seeds: Vec<u64>,
    /// Override a key of every run and of the tuned config: `--set data.dataset=mnist-10k`
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// The tune's directory: `tune.toml` (the sweep), `grid/` (its runs), `tune.json`,
    /// `tuned.toml`, and with --then-run `final/`. A rerun resumes it.
    #[arg(long)]
    out: PathBuf,
    /// Then run the tuned config on the whole stream and its test split, over the same seeds
    /// (into DIR/final).
    #[arg(long)]
    then_run: bool,
    /// Runs at a time.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Threads per run (default: the machine's cores divided by --jobs).
    #[arg(long)]
    threads: Option<usize>,
}

/// Checks the arguments that clap does not: the validation share, the seeds, the `--set`s.
fn check_args(args: &TuneArgs) -> Result<Vec<GridAxis>> {
    if !(args.validation > 0.0 && args.validation <= 0.5) {
        return Err(Error::Usage(format!(
            "--validation {}: the share held out of each task for the choice must be in (0, 0.5]",
            args.validation
        )));
    }
    if args.seeds.is_empty() {
        return Err(Error::Usage("--seeds: give at least one seed".into()));
    }
    for s in &args.sets {
        let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k).trim();
        if tune::OWNED.contains(&key) {
            return Err(Error::Usage(format!(
                "--set `{s}`: engram tune sets `{key}` itself (--tasks, --validation, --seeds)"
            )));
        }
    }
    let axes: Vec<GridAxis> = args
        .grid
        .iter()
        .map(|g| tune::parse_grid(g))
        .collect::<Result<_>>()?;
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.key == a.key)
            || args
                .sets
                .iter()
                .any(|s| s.starts_with(&format!("{}=", a.key)))
        {
            return Err(Error::Usage(format!(
                "--grid `{}`: the key is given twice (by two --grid, or by --grid and --set)",
                a.key
            )));
        }
    }
    Ok(axes)
}

/// Claims `dir` for the tune: new, empty, or a tune's own (it holds `tune.toml`).
fn claim(dir: &Path) -> Result<()> {
    engram::outpath::check_dir(dir, "--out")?;
    if let Ok(mut rd) = std::fs::read_dir(dir)
        && rd.next().is_some()
        && !dir.join("tune.toml").is_file()
    {
        return Err(Error::Usage(format!(
            "--out {}: holds files and is not an engram tune's directory (no tune.toml); choose an empty or new directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| engram::outpath::cannot_create("--out", dir, e))
}

/// `engram tune …`.
pub fn tune(cli: &Cli, registry: &Registry, args: &TuneArgs) -> Result<()> {
    let axes = check_args(args)?;
    // The full stream, prepared once: its tasks' classes give the first K tasks' overrides.
    let cfg = LoadedConfig::load(&args.config, &args.sets)?;
    let scenario = cfg.config.data.scenario;
    let entries = !cfg.config.data.stream.is_empty();
    let prepared = prepare(cfg.clone(), registry, &args.sets)?;
    let classes: Vec<Vec<usize>> = prepared
        .stream
        .tasks
        .iter()
        .map(|t| t.classes.clone())
        .collect();
    drop(prepared);
    let mut fixed = tune::first_tasks_sets(scenario, &classes, args.tasks, entries)?;
    if args.tasks == classes.len() && !cli.quiet {
        eprintln!(
            "warning: --tasks {} is the whole stream: no task is left out of the tuning",
            args.tasks
        );
    }
    fixed.push(format!("data.validation={}", args.validation));
    fixed.push("data.evaluate_on=validation".into());
    fixed.extend(args.sets.iter().cloned());
    claim(&args.out)?;
    let base = std::path::absolute(&args.config).map_err(|e| Error::io(&args.config, e))?;
    let sweep_file = args.out.join("tune.toml");
    let text = tune::sweep_text(&base, &args.seeds, &fixed, &axes);
    engram::core::fsutil::write_atomic(&sweep_file, text.as_bytes())?;
    let grid_dir = args.out.join("grid");
    if !cli.quiet {
        eprintln!(
            "engram: tuning {} on its first {} of {} tasks ({} of each task's training samples held out and evaluated on), seeds {:?}",
            args.config.display(),
            args.tasks,
            classes.len(),
            args.validation,
            args.seeds
        );
    }
    let swept = super::sweep::run(
        cli,
        registry,
        &sweep_file,
        Some(grid_dir.clone()),
        args.jobs,
        args.threads,
    );
    match swept {
        // Failed runs are reported by the sweep; their points are not chosen.
        Err(Error::Other(m)) => eprintln!("warning: {m}"),
        Err(Error::Interrupted(m)) => {
            return Err(Error::Interrupted(format!(
                "{m}; or rerun the same `engram tune` command: it resumes the grid"
            )));
        }
        other => other?,
    }
    let (_, cells, _) = engram::sweep::aggregate::cells(&grid_dir)?;
    let results = tune::results(&tune::points(&axes), &cells)?;
    let chosen = tune::choose(&results);
    println!(
        "tune: mean ACC on the validation split of the first {} tasks, over {} seed{} (* = chosen; ties go to the first):",
        args.tasks,
        args.seeds.len(),
        if args.seeds.len() == 1 { "" } else { "s" }
    );
    print!("{}", tune::table(&axes, &results, chosen));
    write_json(args, &results, chosen)?;
    let Some(best) = chosen else {
        return Err(Error::Other(format!(
            "no point of the grid finished all its seeds; see `engram sweep status {}`",
            grid_dir.display()
        )));
    };
    let tuned = write_tuned(&cfg, args, &results[best].sets)?;
    println!(
        "chosen: {}; config: {}",
        results[best].sets.join(" "),
        tuned.display()
    );
    if args.then_run {
        then_run(cli, registry, args, &tuned)?;
    }
    Ok(())
}

/// Writes `DIR/tune.json`: the protocol and every point's result.
fn write_json(args: &TuneArgs, results: &[tune::PointResult], chosen: Option<usize>) -> Result<()> {
    let json = serde_json::json!({
        "kind": "engram-tune",
        "config": std::path::absolute(&args.config).unwrap_or_else(|_| args.config.clone()),
        "tasks": args.tasks,
        "validation": args.validation,
        "seeds": args.seeds,
        "sets": args.sets,
        "grid": args.grid,
        "points": results,
        "chosen": chosen,
    });
    let bytes = serde_json::to_vec_pretty(&json).map_err(|e| Error::Other(e.to_string()))?;
    engram::core::fsutil::write_atomic(&args.out.join("tune.json"), &bytes)
}

/// Writes `DIR/tuned.toml` (the config, the `--set`s and the chosen values) and checks that it
/// loads; returns its path.
fn write_tuned(cfg: &LoadedConfig, args: &TuneArgs, chosen: &[String]) -> Result<PathBuf> {
    let mut sets = args.sets.clone();
    sets.extend(chosen.iter().cloned());
    let seeds: Vec<String> = args.seeds.iter().map(u64::to_string).collect();
    let header = format!(
        "# Tuned by `engram tune` from {}: {} chosen by the best mean ACC on the validation split\n\
         # ({} of each task's training samples) of the first {} tasks over seeds {}, among the\n\
         # points of {}/tune.json.{}\n",
        args.config.display(),
        chosen.join(" "),
        args.validation,
        args.tasks,
        seeds.join(", "),
        args.out.display(),
        if args.sets.is_empty() {
            String::new()
        } else {
            format!(" Also set: {}.", args.sets.join(" "))
        }
    );
    let text = tune::tuned_text(cfg, &sets, &header)?;
    let path = args.out.join("tuned.toml");
    LoadedConfig::from_source(&path, text.clone())?;
    engram::core::fsutil::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// `--then-run`: the tuned config on the whole stream and its test split, as a sweep of its
/// seeds into `DIR/final` (resumable like the grid).
fn then_run(cli: &Cli, registry: &Registry, args: &TuneArgs, tuned: &Path) -> Result<()> {
    let base = std::path::absolute(tuned).map_err(|e| Error::io(tuned, e))?;
    let seeds: Vec<String> = args.seeds.iter().map(u64::to_string).collect();
    let text = format!(
        "# Written by `engram tune --then-run`: the tuned config on the whole stream, test split.\n[sweep]\nname = \"final\"\nbase = {}\nseeds = [{}]\n",
        toml_edit::Value::from(base.to_string_lossy().as_ref()),
        seeds.join(", ")
    );
    let file = args.out.join("final.toml");
    engram::core::fsutil::write_atomic(&file, text.as_bytes())?;
    super::sweep::run(
        cli,
        registry,
        &file,
        Some(args.out.join("final")),
        args.jobs,
        args.threads,
    )
}
