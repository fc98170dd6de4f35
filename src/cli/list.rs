//! `engram list`: the registered strategies, models and datasets with their keys and defaults.

use super::Cli;
use clap::Args;
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use engram::report::{RegistryFormat, registry_text_of};

/// `engram list`'s arguments.
#[derive(Args)]
pub struct ListArgs {
    /// Show only the entries of this name (a strategy, scheduler, model or dataset, as a
    /// config's `type =` names it), with its keys and defaults.
    name: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `engram list [NAME]`: every registration, or those named NAME (as a table, or JSON with
/// `--json`), then the loaded plugins.
///
/// # Errors
/// [`Error::Usage`] (exit 2) when nothing is registered under NAME, with the names that
/// contain it (or every name).
pub fn list(cli: &Cli, registry: &Registry, args: &ListArgs) -> Result<()> {
    if let Some(name) = &args.name
        && !registry
            .entries()
            .iter()
            .any(|e| e.registration.name == name.as_str())
    {
        let names: Vec<&str> = registry
            .entries()
            .iter()
            .map(|e| e.registration.name)
            .collect();
        let close: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.contains(name.as_str()) || name.contains(n))
            .collect();
        let offer = if close.is_empty() { &names } else { &close };
        return Err(Error::Usage(format!(
            "nothing is registered as `{name}`; {}: {}",
            if close.is_empty() {
                "the names are"
            } else {
                "did you mean"
            },
            offer.join(", ")
        )));
    }
    let format = if args.json {
        RegistryFormat::Json
    } else {
        RegistryFormat::List
    };
    print!(
        "{}",
        registry_text_of(registry, format, args.name.as_deref())
    );
    if args.json {
        return Ok(());
    }
    if !cli.quiet && args.name.is_none() {
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
