//! `engram report DIR` and `engram compare DIR...`: a run's plots, several runs side by side.

use super::Cli;
use clap::Args;
use engram::core::Result;
use std::path::PathBuf;

#[derive(Args)]
pub struct ReportArgs {
    /// The run's output directory (holds report.json and steps.csv).
    dir: PathBuf,
    /// Where to write the plots (default: DIR/plots).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
pub struct CompareArgs {
    /// Run output directories; a directory of `--seeds` runs shows mean ± std.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Also draw the comparison figure (ACC and retention per run) into this directory
    /// as compare.png and compare.svg.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

/// `engram report`: renders the run's plots and prints their paths.
pub fn report(cli: &Cli, args: &ReportArgs) -> Result<()> {
    let files = engram::report::render_dir(&args.dir, args.out.as_deref())?;
    if !cli.quiet {
        for f in files {
            println!("{}", f.display());
        }
    }
    Ok(())
}

/// `engram compare`: prints the table (its warnings on standard error) and, with `--plots`,
/// draws the comparison figure into a directory taken by [`engram::outpath::ensure_dir`].
pub fn compare(cli: &Cli, args: &CompareArgs) -> Result<()> {
    let (table, warnings) = engram::report::compare(&args.dirs)?;
    print!("{table}");
    for w in warnings {
        eprintln!("{w}");
    }
    if let Some(out) = &args.plots {
        let rows = args
            .dirs
            .iter()
            .map(|d| engram::report::run_row(d))
            .collect::<Result<Vec<_>>>()?;
        engram::outpath::ensure_dir(out, "--plots")?;
        for f in engram::report::render_rows(&rows, out)? {
            if !cli.quiet {
                println!("{}", f.display());
            }
        }
    }
    Ok(())
}
