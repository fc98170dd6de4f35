//! `engram export CHECKPOINT --safetensors FILE [--layout burn|pytorch]`: a checkpoint's
//! weights for other tools, written under [`engram::outpath`]'s rule, in Burn's layout
//! (`Linear` weights `[d_in, d_out]`) or PyTorch's (`[d_out, d_in]`);
//! `engram export CHECKPOINT --peft DIR`: a BERT run's LoRA adapters as a Hugging Face PEFT
//! adapter directory ([`engram::core::model::bert::peft`]).

use super::{Cli, device_help};
use clap::{ArgGroup, Args, ValueEnum};
use engram::core::registry::Registry;
use engram::core::train::trainer;
use engram::core::{Error, Result};
use engram::outpath::Existing;
use std::path::{Path, PathBuf};

/// `engram export`'s arguments: exactly one of `--safetensors` and `--peft`.
#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["safetensors", "peft"])))]
pub struct ExportArgs {
    /// A run's output directory (newest checkpoint) or OUT/checkpoints/step-N.
    checkpoint: PathBuf,
    /// The safetensors file to write (it must not exist, unless --overwrite): the model's
    /// weights, adapters merged.
    #[arg(long)]
    safetensors: Option<PathBuf>,
    /// The directory to write a BERT run's LoRA adapters into, as Hugging Face PEFT saves them
    /// (adapter_model.safetensors, adapter_config.json) with engram's head beside them
    /// (engram_head.safetensors, engram_head.json); it must be absent or empty, unless
    /// --overwrite.
    #[arg(long)]
    peft: Option<PathBuf>,
    #[arg(long, help = device_help("Load the checkpoint on this device", " instead of the run's"))]
    device: Option<String>,
    /// Replace an existing regular file at --safetensors (never a symbolic link, FIFO,
    /// device or directory), or write into a non-empty --peft directory.
    #[arg(long)]
    overwrite: bool,
    /// The tensors' layout: `burn` (Linear weights [in, out], what `[model] init` reads by
    /// default) or `pytorch` (Linear weights [out, in] as torch.nn.Linear holds them, norms'
    /// weight/bias; `[model] init_layout = "pytorch"` reads it back).
    /// Only with --safetensors. Default `burn`.
    #[arg(long, value_enum, conflicts_with = "peft")]
    layout: Option<Layout>,
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
    let Some(path) = &args.safetensors else {
        return match &args.peft {
            Some(dir) => export_peft(cli, registry, args, dir),
            None => Err(Error::Usage("give --safetensors FILE or --peft DIR".into())),
        };
    };
    precheck(&args.checkpoint, path)?;
    let (p, model, _) =
        trainer::load_checkpoint_model(&args.checkpoint, registry, args.device.as_deref())?;
    refuse_partial(&p, &args.checkpoint)?;
    engram::outpath::write_file_with(
        path,
        "--safetensors",
        Existing::Overwrite(args.overwrite),
        |tmp| trainer::export_safetensors(&model, tmp, args.layout.unwrap_or(Layout::Burn).into()),
    )?;
    if !cli.quiet {
        println!("{}", path.display());
    }
    Ok(())
}

/// Refuses (exit 2) a run whose model alone is not its result: a forgetting strategy keeps
/// what answers in its own state ([`engram::core::strategy::ForgettingStrategy::model_is_partial`]).
fn refuse_partial(p: &trainer::Prepared, checkpoint: &Path) -> Result<()> {
    match p.forgetting.iter().find_map(|s| s.model_is_partial()) {
        Some(why) => Err(Error::Usage(format!(
            "{}: not exported: {why}",
            checkpoint.display()
        ))),
        None => Ok(()),
    }
}

/// Refuses, before the checkpoint is loaded, a `--peft` directory that is the run's own (the
/// checkpoint lies under it), is not a directory, or is not empty (unless `--overwrite`).
fn precheck_dir(checkpoint: &Path, dir: &Path, overwrite: bool) -> Result<()> {
    engram::outpath::check_dir(dir, "--peft")?;
    if let (Ok(d), Ok(c)) = (
        std::fs::canonicalize(dir),
        std::fs::canonicalize(checkpoint),
    ) && c.ancestors().any(|a| a == d)
    {
        return Err(Error::Usage(format!(
            "--peft {}: the checkpoint lies in that directory; write the adapter elsewhere",
            dir.display()
        )));
    }
    if !overwrite && std::fs::read_dir(dir).is_ok_and(|mut rd| rd.next().is_some()) {
        return Err(Error::Usage(format!(
            "--peft {}: the directory is not empty; choose another, or pass --overwrite to \
             replace the adapter files in it",
            dir.display()
        )));
    }
    Ok(())
}

/// `engram export --peft DIR`: the checkpoint's LoRA adapters as a PEFT adapter directory,
/// beside the model the run started from (which tells what else trained); a directory this
/// command created is removed again when the model's adapters cannot be written.
fn export_peft(cli: &Cli, registry: &Registry, args: &ExportArgs, dir: &Path) -> Result<()> {
    use engram::core::model::bert::peft;
    use engram::core::model::init::InitSource;
    precheck_dir(&args.checkpoint, dir, args.overwrite)?;
    let (mut p, model, _) =
        trainer::load_checkpoint_model(&args.checkpoint, registry, args.device.as_deref())?;
    refuse_partial(&p, &args.checkpoint)?;
    // Refused before anything is created: not BERT, or no adapters.
    if peft::adapted(&model)?.is_empty() {
        return Err(Error::Usage(format!(
            "{}: the run has no LoRA adapters (no [[memory]] type = \"lora\"); export its \
             weights with --safetensors instead",
            args.checkpoint.display()
        )));
    }
    // The weights the run started from, without a loaded `[model] adapter`: what differs from
    // them besides the adapters trained in full (a loaded adapter's modules_to_save included).
    p.cfg.config.model.adapter = None;
    let (initial, _) = p.build_initial_model(&p.device)?;
    let base = p.cfg.config.model.init.as_ref().and_then(|f| {
        match InitSource::of(&engram::core::fsutil::relative_to(&p.cfg.base_dir, f)) {
            InitSource::HfDir(d) => Some(std::fs::canonicalize(&d).unwrap_or(d)),
            _ => None,
        }
    });
    let created = !dir.exists();
    engram::outpath::ensure_dir(dir, "--peft")?;
    let done = peft::export(&model, &initial, base.as_deref(), dir);
    if done.is_err() && created {
        let _ = std::fs::remove_dir(dir);
    }
    done?;
    if !cli.quiet {
        println!("{}", dir.display());
        if base.is_none() {
            eprintln!(
                "note: the run had no Hugging Face [model] init directory, so \
                 base_model_name_or_path is null: PEFT users need the same base weights"
            );
        }
    }
    Ok(())
}
