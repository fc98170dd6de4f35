//! Pretrained initialisation: `[model] init = "weights.safetensors"` loads a safetensors file
//! into the freshly built model before the stream starts (burn-store's `SafetensorsStore`).
//!
//! - `init_layout = "burn"` (default): tensors as Burn holds them, which is what `engram export`
//!   writes (a `Linear` weight is `[d_in, d_out]`).
//! - `init_layout = "pytorch"`: a PyTorch `state_dict` saved with `safetensors.torch.save_file`:
//!   `Linear` weights `[d_out, d_in]` are transposed, and normalisation layers' `weight`/`bias`
//!   are read as Burn's `gamma`/`beta` (burn-store's `PyTorchToBurnAdapter`). The layout is
//!   explicit because a square `Linear` looks the same either way.
//! - `init_remap = [["^features\\.", "blocks."], …]`: regular-expression renames of the file's
//!   tensor names, applied in order, before they are matched to the model's parameter paths
//!   (`engram export` and `burn-store` name them `blocks.0.linear.weight`, …).
//!
//! Tensors of the model that the file lacks keep their seeded initialisation (a new head, say);
//! tensors of the file that the model lacks are left unused; both are counted in the report
//! ([`InitReport`]). A shape mismatch refuses the run.

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use crate::config::InitLayout;

/// What a pretrained initialisation loaded (report.json's `init`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InitReport {
    /// The file, as resolved.
    pub file: PathBuf,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// The layout it was read in.
    pub layout: InitLayout,
    /// Tensors applied to the model.
    pub loaded: usize,
    /// The model's tensors the file lacks (kept at their seeded initialisation), by path.
    pub missing: Vec<String>,
    /// The file's tensors the model lacks (ignored), by name after `init_remap`.
    pub unused: Vec<String>,
}

pub use crate::config::INIT_KEYS as KEYS;

/// What `[model] init` names, told apart by one rule ([`InitSource::of`]) wherever `init` is
/// read (the model factories for the geometry, the trainer for the weights).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitSource {
    /// A Hugging Face checkpoint directory (it holds a `config.json`): `type = "bert"` or
    /// `"llama"` take their geometry from it and their weights from its `model.safetensors`.
    HfDir(PathBuf),
    /// A GGUF file (llama.cpp's format: the extension `.gguf`, any case, or the magic `GGUF`):
    /// `type = "llama"` takes its geometry, weights and tokenizer from it
    /// ([`crate::model::llama::gguf`]).
    Gguf(PathBuf),
    /// Anything else: a safetensors file, read by [`load`] with `init_layout` and
    /// `init_remap`.
    Safetensors(PathBuf),
}

impl InitSource {
    /// Classifies `path`: a directory with a `config.json` is [`InitSource::HfDir`]; a file
    /// named `*.gguf` or starting with the bytes `GGUF` is [`InitSource::Gguf`]; anything else
    /// (a missing path included, so that [`load`] reports it) is [`InitSource::Safetensors`].
    pub fn of(path: &Path) -> Self {
        if crate::model::bert::hf::is_hf_dir(path) {
            return Self::HfDir(path.to_path_buf());
        }
        if crate::gguf::is_gguf(path) {
            Self::Gguf(path.to_path_buf())
        } else {
            Self::Safetensors(path.to_path_buf())
        }
    }

    /// The path, whatever its kind.
    pub fn path(&self) -> &Path {
        match self {
            Self::HfDir(p) | Self::Gguf(p) | Self::Safetensors(p) => p,
        }
    }
}

/// An error of [`load`], with the `[model]` key it is about (where a config error points).
#[derive(Debug)]
pub struct InitError {
    /// `init_remap` for a pattern that is not a regular expression and for a file none of
    /// whose tensors is a parameter of the model (a remap is the fix); `init` otherwise.
    pub key: &'static str,
    /// What went wrong.
    pub error: Error,
}

/// Loads `file` into `model` (see the module docs).
///
/// # Errors
/// [`InitError`] holding [`Error::Io`] when the file cannot be read; [`Error::Other`] for a
/// file that is not safetensors, an invalid `init_remap` pattern, any shape mismatch (naming
/// the tensors), or a file none of whose tensors match the model (naming a few of each side,
/// so that the remap can be written).
pub fn load(
    model: crate::model::Model,
    file: &Path,
    layout: InitLayout,
    remap: &[[String; 2]],
) -> std::result::Result<(crate::model::Model, InitReport), InitError> {
    use sha2::Digest;
    let bytes = crate::fsutil::read_bounded(file, crate::fsutil::MAX_DATA_BYTES).map_err(|e| {
        InitError {
            key: "init",
            error: Error::io(file, e),
        }
    })?;
    let sha256 = format!("{:x}", sha2::Sha256::digest(&bytes));
    load_bytes(model, bytes, file, sha256, layout, remap)
}

/// Loads safetensors `bytes` (read from, or converted from, `file`, whose SHA-256 is `sha256`)
/// into `model`, as [`load`] does with a file: `file` names the source in messages and the
/// report. [`crate::model::llama::gguf`] converts a GGUF file into such bytes.
///
/// # Errors
/// As [`load`], except for reading the file.
pub fn load_bytes(
    model: crate::model::Model,
    bytes: Vec<u8>,
    file: &Path,
    sha256: String,
    layout: InitLayout,
    remap: &[[String; 2]],
) -> std::result::Result<(crate::model::Model, InitReport), InitError> {
    let at = |key: &'static str| move |error: Error| InitError { key, error };
    use burn::store::{KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
    let mut remapper = KeyRemapper::new();
    for [from, to] in remap {
        remapper = remapper.add_pattern(from, to.clone()).map_err(|e| {
            at("init_remap")(Error::Other(format!(
                "[model] init_remap: `{from}` is not a regular expression: {e}"
            )))
        })?;
    }
    let mut store = SafetensorsStore::from_bytes(Some(bytes))
        .allow_partial(true)
        .validate(false)
        .remap(remapper);
    if layout == InitLayout::Pytorch {
        store = store.with_from_adapter(PyTorchToBurnAdapter);
    }
    let mut model = model;
    let result = model.load_from(&mut store).map_err(|e| {
        at("init")(Error::Other(format!(
            "{}: not a safetensors file engram can read: {e}",
            file.display()
        )))
    })?;
    if !result.errors.is_empty() {
        let first: Vec<String> = result
            .errors
            .iter()
            .take(3)
            .map(|e| e.to_string())
            .collect();
        return Err(at("init")(Error::Other(format!(
            "{}: {} tensors do not fit the model ({}); check `[model]` keys against the model that wrote the file{}",
            file.display(),
            result.errors.len(),
            first.join("; "),
            if layout == InitLayout::Burn {
                ", and `init_layout = \"pytorch\"` for a PyTorch state_dict"
            } else {
                ""
            }
        ))));
    }
    if result.applied.is_empty() {
        let few = |v: Vec<&str>| v.into_iter().take(4).collect::<Vec<_>>().join(", ");
        return Err(at("init_remap")(Error::Other(format!(
            "{}: none of its tensors is a parameter of the model (file: {}; model: {}); rename them with `init_remap = [[\"^old\\\\.\", \"new.\"]]`",
            file.display(),
            few(result.unused.iter().map(String::as_str).collect()),
            few(result.missing.iter().map(|(p, _)| p.as_str()).collect()),
        ))));
    }
    let report = InitReport {
        file: file.to_path_buf(),
        sha256,
        layout,
        loaded: result.applied.len(),
        missing: result.missing.into_iter().map(|(p, _)| p).collect(),
        unused: result.unused,
    };
    Ok((model, report))
}
