//! `engram report DIR`: a run's plots.

use super::Cli;
use clap::Args;
use engram::core::Result;
use engram::core::registry::Registry;
use std::path::PathBuf;

/// `engram report`'s arguments.
#[derive(Args)]
pub struct ReportArgs {
    /// The run's output directory (holds report.json and steps.csv).
    dir: PathBuf,
    /// Where to write the plots (default: DIR/plots).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `engram report`: renders the run's plots and prints their paths.
pub fn report(cli: &Cli, _registry: &Registry, args: &ReportArgs) -> Result<()> {
    let files = engram::report::render_dir(&args.dir, args.out.as_deref())?;
    if !cli.quiet {
        for f in files {
            println!("{}", f.display());
        }
    }
    Ok(())
}
