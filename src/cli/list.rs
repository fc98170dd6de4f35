//! `engram list`: the registered strategies, models and datasets with their keys and defaults.

use super::Cli;
use clap::Args;
use engram::core::Result;
use engram::core::registry::Registry;
use engram::report::{RegistryFormat, registry_text};

/// `engram list`'s arguments.
#[derive(Args)]
pub struct ListArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `engram list`: every registration (as a table, or JSON with `--json`), then the loaded
/// plugins.
pub fn list(cli: &Cli, registry: &Registry, args: &ListArgs) -> Result<()> {
    let format = if args.json {
        RegistryFormat::Json
    } else {
        RegistryFormat::List
    };
    print!("{}", registry_text(registry, format));
    if args.json {
        return Ok(());
    }
    if !cli.quiet {
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
