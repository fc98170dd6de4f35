//! Exporting a run's model.

use super::*;

pub use crate::config::InitLayout as ExportLayout;

/// Writes `model`'s parameters to a safetensors file (burn-store), atomically: tensors are
/// named by their dotted paths (`blocks.0.linear.weight`). A model with adapters (a `lora`
/// run's) is merged first (Burn's `materialize`: `W₀ + (α/r)·A·B` in each adapted weight), so
/// the file has the model's own names and shapes and `[model] init` reads it back.
///
/// `layout` is the tensors' layout, the one `[model] init_layout` reads back:
/// - [`ExportLayout::Burn`]: as Burn holds them, a `Linear` weight `[d_in, d_out]`;
/// - [`ExportLayout::Pytorch`]: PyTorch's, through burn-store's `BurnToPyTorchAdapter`: every
///   `Linear` weight transposed to `[d_out, d_in]` (as `torch.nn.Linear.weight`), and
///   normalisation layers' `gamma`/`beta` named `weight`/`bias`; the names are otherwise the
///   same dotted paths, so a PyTorch module may need its own `state_dict` keys mapped.
///
/// # Errors
/// [`Error::Io`] when the file cannot be written; [`Error::Other`] when encoding fails.
pub fn export_safetensors(model: &Model, path: &Path, layout: ExportLayout) -> Result<()> {
    use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".engram-export-")
        .suffix(".safetensors")
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir, e))?;
    let mut store = SafetensorsStore::from_file(tmp.path()).overwrite(true);
    if layout == ExportLayout::Pytorch {
        store = store.with_to_adapter(BurnToPyTorchAdapter);
    }
    model
        .clone()
        .merge_adapters()?
        .materialize()
        .dequantized()
        .save_into(&mut store)
        .map_err(|e| Error::Other(format!("safetensors export: {e}")))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}
