//! `engram validate CONFIG`: a config checked as a run would check it, without running it.

use super::{Cli, describe, prepare};
use clap::Args;
use engram::core::Result;
use engram::core::config::LoadedConfig;
use engram::core::registry::Registry;
use std::path::PathBuf;

/// `engram validate`'s arguments.
#[derive(Args)]
pub struct ValidateArgs {
    /// The experiment file.
    config: PathBuf,
    /// Override a key: `--set train.epochs=3` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

/// `engram validate`: loads the config and builds its data and strategies.
pub fn validate(cli: &Cli, registry: &Registry, args: &ValidateArgs) -> Result<()> {
    let cfg = LoadedConfig::load(&args.config, &args.sets)?;
    let p = prepare(cfg, registry, &args.sets)?;
    describe(cli, &p);
    if !cli.quiet {
        println!(
            "{}: ok ({} tasks, {} forgetting, {} memory, {} scheduler strategies; data from {})",
            args.config.display(),
            p.stream.len(),
            p.forgetting.len(),
            p.memory.len(),
            p.schedulers.len(),
            p.stream.dataset.dir.display()
        );
    }
    Ok(())
}
