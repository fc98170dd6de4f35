//! `engram resume OUT`: continue a killed or interrupted run (every seed of a `--seeds` run,
//! [`engram::seeds::resume`]), under the output directory's lock.

use super::{Cli, device_help, print_aggregate, resume_hint};
use clap::Args;
use engram::core::registry::Registry;
use engram::core::train::trainer;
use engram::core::{Error, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// `engram resume`'s arguments.
#[derive(Args)]
pub struct ResumeArgs {
    /// The run's output directory.
    out: PathBuf,
    #[arg(long, help = device_help(
        "Continue on this device",
        " instead of the one the run started on; the result is the same run"
    ))]
    device: Option<String>,
}

/// `engram resume OUT`: one run, or every seed of a `--seeds` run (finished seeds are read,
/// the others resumed or started), then the aggregate again. An attempt (`OUT/attempts/<time>`)
/// that finishes replaces the run it was started beside, if that run is still there.
pub fn resume(cli: &Cli, registry: &Registry, args: &ResumeArgs) -> Result<()> {
    let (out, device) = (args.out.as_path(), args.device.as_deref());
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
    let Some(dest) = parent else {
        return Ok(());
    };
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
    Ok(())
}

/// Prints a failed seed's error as `engram resume` goes on with the others.
struct Printer;

impl engram::seeds::Observer for Printer {
    fn failed(&mut self, seed: u64, error: &Error) {
        eprintln!("error: seed {seed}: {error}");
    }
}

fn resume_locked(cli: &Cli, registry: &Registry, out: &Path, device: Option<&str>) -> Result<()> {
    let progress = !cli.quiet && std::io::stderr().is_terminal();
    if out.join("config.toml").is_file() || engram::seeds::seed_dirs(out).is_empty() {
        let report =
            trainer::resume(out, registry, progress, device).map_err(|e| resume_hint(e, out))?;
        if cli.quiet {
            println!("{}", engram::summary::final_line(&report));
        } else {
            print!("{}", engram::summary::run_table(&report));
        }
        return Ok(());
    }
    let outcome = engram::seeds::resume(out, registry, progress, device, &mut Printer)
        .map_err(|e| resume_hint(e, out))?;
    if let Some(agg) = &outcome.aggregate {
        print_aggregate(agg, outcome.reports.len());
    }
    outcome.error().map_or(Ok(()), Err)
}
