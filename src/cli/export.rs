//! `engram export CHECKPOINT --safetensors FILE`: a checkpoint's weights for other tools,
//! written under [`engram::outpath`]'s rule.

use super::{Cli, device_help};
use clap::Args;
use engram::core::registry::Registry;
use engram::core::train::trainer;
use engram::core::{Error, Result};
use engram::outpath::Existing;
use std::path::{Path, PathBuf};

/// `engram export`'s arguments.
#[derive(Args)]
pub struct ExportArgs {
    /// A run's output directory (newest checkpoint) or OUT/checkpoints/step-N.
    checkpoint: PathBuf,
    /// The safetensors file to write (it must not exist, unless --overwrite).
    #[arg(long)]
    safetensors: PathBuf,
    #[arg(long, help = device_help("Load the checkpoint on this device", " instead of the run's"))]
    device: Option<String>,
    /// Replace an existing regular file at --safetensors (never a symbolic link, FIFO,
    /// device or directory).
    #[arg(long)]
    overwrite: bool,
}

/// Refuses, before the checkpoint is loaded, a target that is one of the run's own files, a
/// directory, or lies in a directory that does not exist.
fn precheck(checkpoint: &Path, safetensors: &Path) -> Result<()> {
    // The run's own files are not an export target.
    if let (Some(name), Some(dir)) = (
        safetensors.file_name().and_then(|n| n.to_str()),
        safetensors.parent().and_then(|p| {
            std::fs::canonicalize(if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            })
            .ok()
        }),
    ) && engram::outdir::RUN_FILES.contains(&name)
        && std::fs::canonicalize(checkpoint).is_ok_and(|c| c.ancestors().any(|a| a == dir))
    {
        return Err(Error::Usage(format!(
            "--safetensors {}: that is a file of the run itself; write the export elsewhere",
            safetensors.display()
        )));
    }
    if safetensors.is_dir() {
        return Err(Error::Usage(format!(
            "--safetensors {}: that is a directory; name the file to write, e.g. {}",
            safetensors.display(),
            safetensors.join("model.safetensors").display()
        )));
    }
    if let Some(parent) = safetensors.parent()
        && !parent.as_os_str().is_empty()
        && !parent.is_dir()
    {
        let why = if parent.exists() {
            "is not a directory"
        } else {
            "does not exist; create it first"
        };
        return Err(Error::Usage(format!(
            "--safetensors {}: {} {why}",
            safetensors.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// `engram export`: loads the checkpoint's model and writes its tensors atomically; an
/// existing file is replaced only with `--overwrite` and only when it is a regular file.
pub fn export(cli: &Cli, registry: &Registry, args: &ExportArgs) -> Result<()> {
    let path = &args.safetensors;
    precheck(&args.checkpoint, path)?;
    let (_, model, _) =
        trainer::load_checkpoint_model(&args.checkpoint, registry, args.device.as_deref())?;
    engram::outpath::write_file_with(
        path,
        "--safetensors",
        Existing::Overwrite(args.overwrite),
        |tmp| trainer::export_safetensors(&model, tmp),
    )?;
    if !cli.quiet {
        println!("{}", path.display());
    }
    Ok(())
}
