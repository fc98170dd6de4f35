//! `engram compare DIR...`: several runs side by side (the table, and with `--plots` the
//! comparison figure).

use super::Cli;
use clap::Args;
use engram::core::Result;
use engram::core::registry::Registry;
use std::path::PathBuf;

/// `engram compare`'s arguments.
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

/// `engram compare`: prints the table (its warnings on standard error) and, with `--plots`,
/// draws the comparison figure into a directory taken by [`engram::outpath::ensure_dir`].
pub fn compare(cli: &Cli, _registry: &Registry, args: &CompareArgs) -> Result<()> {
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
