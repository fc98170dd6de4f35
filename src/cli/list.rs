//! `engram list`: the registered strategies, models and datasets with their keys and defaults.

use super::Cli;
use clap::Args;
use engram::core::Result;
use engram::core::registry::Registry;

#[derive(Args)]
pub struct ListArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `engram list`: every registration (as a table, or JSON with `--json`), then the loaded
/// plugins.
pub fn list(cli: &Cli, registry: &Registry, args: &ListArgs) -> Result<()> {
    if args.json {
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
        return Ok(());
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
