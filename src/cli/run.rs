//! `engram run CONFIG`: one run, or one per seed with `--seeds` ([`engram::seeds`]), into an
//! output directory taken by [`engram::outdir::claim`].

use super::{Cli, describe, device_help, prepare, print_aggregate, resume_hint};
use clap::Args;
use engram::core::config::LoadedConfig;
use engram::core::registry::Registry;
use engram::core::train::report::Report;
use engram::core::train::trainer::Prepared;
use engram::core::{Error, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// `engram run`'s arguments.
#[derive(Args)]
pub struct RunArgs {
    /// The experiment file.
    config: PathBuf,
    /// Output directory (default: `[run] out`, else `runs/<config name>`).
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, help = device_help("Device", ", overriding `[run] device`"))]
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

fn default_out(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from("runs").join(stem)
}

/// Prints each seed's start and table as `engram run` does.
struct Printer<'a> {
    cli: &'a Cli,
    config: &'a Path,
}

impl engram::seeds::Observer for Printer<'_> {
    fn starting(&mut self, p: &Prepared, dir: &Path) {
        describe(self.cli, p);
        if !self.cli.quiet {
            let n = p.stream.len();
            eprintln!(
                "engram: {} ({n} task{}, seed {}, data from {}) -> {}",
                self.config.display(),
                if n == 1 { "" } else { "s" },
                p.cfg.config.run.seed,
                p.stream.dataset.dir.display(),
                dir.display()
            );
        }
    }

    fn finished(&mut self, report: &Report) {
        if !self.cli.quiet {
            print!("{}", engram::summary::run_table(report));
        }
    }

    fn failed(&mut self, seed: u64, error: &Error) {
        eprintln!("error: seed {seed}: {error}");
    }
}

/// `engram run`: checks every seed's config (and prepares the first) before anything is
/// written, claims the output directory, trains, aggregates a `--seeds` run, and puts a run
/// that replaces another in place once it finished.
pub fn run(cli: &Cli, registry: &Registry, args: &RunArgs) -> Result<()> {
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
    // Every seed's config is checked, and the first seed's data and strategies are built,
    // before any output is written; each later seed is prepared right before it runs.
    let configs = if args.seeds.is_empty() {
        let mut sets = sets.clone();
        if let Some(s) = args.seed {
            sets.push(format!("run.seed={s}"));
        }
        vec![LoadedConfig::load(&args.config, &sets)?]
    } else {
        engram::seeds::configs(&args.config, &sets, &args.seeds)?
    };
    let multi = configs.len() > 1;
    let first = prepare(configs[0].clone(), registry, &sets)?;
    // The output directory is taken (locked) before anything is written; a directory that
    // holds a run gets this one beside it, in OUT/attempts/<time>/, until it finishes.
    let claim = engram::outdir::claim(&out, args.overwrite)?;
    let target = claim.target.clone();
    if claim.replaces.is_some() && !cli.quiet {
        replacing_note(&out, &args.config, &target);
    }
    let plan = engram::seeds::Plan {
        configs,
        first: Some(first),
        target: target.clone(),
        progress: !cli.quiet && std::io::stderr().is_terminal(),
        prepare: &mut |cfg| prepare(cfg, registry, &sets),
    };
    let printer = &mut Printer {
        cli,
        config: &args.config,
    };
    let outcome = match engram::seeds::run(plan, printer) {
        Ok(o) => o,
        Err(e @ Error::Interrupted(_)) => return Err(resume_hint(e, &target)),
        Err(e) => {
            if !multi {
                kept_note(&claim);
            }
            return Err(e);
        }
    };
    if let Some(agg) = &outcome.aggregate {
        print_aggregate(agg, outcome.reports.len());
    }
    match (&claim.replaces, outcome.failures.is_empty()) {
        (Some(dest), true) => engram::outdir::promote(&target, dest)?,
        (Some(_), false) => kept_note(&claim),
        _ => {}
    }
    if !multi
        && cli.quiet
        && let Some(r) = outcome.reports.first()
    {
        println!("{}", engram::summary::final_line(r));
    }
    outcome.error().map_or(Ok(()), Err)
}

/// Says, before training, that `out` holds a run that this one (working in `target`) replaces
/// when it finishes, naming the other config when it is another file (two configs of one stem),
/// so that replacing it is never a surprise.
fn replacing_note(out: &Path, config: &Path, target: &Path) {
    let held = engram::core::train::manifest::RunManifest::read(out).map(|m| m.config);
    let mine = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    match held {
        Some(other) if other != mine => eprintln!(
            "engram: {} holds a run of another config, {}; this one ({}) works in {} and \
             replaces it when it finishes (choose another --out to keep both)",
            out.display(),
            other.display(),
            config.display(),
            target.display()
        ),
        _ => eprintln!(
            "engram: {} holds a run; this one works in {} and replaces it when it finishes",
            out.display(),
            target.display()
        ),
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
