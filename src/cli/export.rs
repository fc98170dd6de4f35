//! `engram export CHECKPOINT --safetensors FILE [--layout burn|pytorch]`: a checkpoint's
//! weights for other tools, written under [`engram::outpath`]'s rule, in Burn's layout
//! (`Linear` weights `[d_in, d_out]`) or PyTorch's (`[d_out, d_in]`).

use super::{Cli, device_help};
use clap::{Args, ValueEnum};
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
    /// The tensors' layout: `burn` (Linear weights [in, out], what `[model] init` reads by
    /// default) or `pytorch` (Linear weights [out, in] as torch.nn.Linear holds them, norms'
    /// weight/bias; `[model] init_layout = "pytorch"` reads it back).
    #[arg(long, value_enum, default_value_t = Layout::Burn)]
    layout: Layout,
}

/// `--layout`: the layout of the exported tensors
/// ([`trainer::ExportLayout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Layout {
    /// Burn's: a `Linear` weight is `[d_in, d_out]`.
    Burn,
    /// PyTorch's: a `Linear` weight is `[d_out, d_in]`, norms' `gamma`/`beta` are
    /// `weight`/`bias`.
    Pytorch,
}

impl From<Layout> for trainer::ExportLayout {
    fn from(l: Layout) -> Self {
        match l {
            Layout::Burn => trainer::ExportLayout::Burn,
            Layout::Pytorch => trainer::ExportLayout::Pytorch,
        }
    }
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

/// `engram export`: loads the checkpoint's model and writes its tensors atomically in
/// `--layout`'s layout; an existing file is replaced only with `--overwrite` and only when it
/// is a regular file.
pub fn export(cli: &Cli, registry: &Registry, args: &ExportArgs) -> Result<()> {
    let path = &args.safetensors;
    precheck(&args.checkpoint, path)?;
    let (_, model, _) =
        trainer::load_checkpoint_model(&args.checkpoint, registry, args.device.as_deref())?;
    engram::outpath::write_file_with(
        path,
        "--safetensors",
        Existing::Overwrite(args.overwrite),
        |tmp| trainer::export_safetensors(&model, tmp, args.layout.into()),
    )?;
    if !cli.quiet {
        println!("{}", path.display());
    }
    Ok(())
}
