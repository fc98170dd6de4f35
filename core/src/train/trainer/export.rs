//! Exporting a run's model.

use super::*;

/// Writes `model`'s parameters to a safetensors file (burn-store), atomically: tensors are
/// named by their dotted paths (`blocks.0.linear.weight`, shape `[d_in, d_out]`).
///
/// # Errors
/// [`Error::Io`] when the file cannot be written; [`Error::Other`] when encoding fails.
pub fn export_safetensors(model: &Model, path: &Path) -> Result<()> {
    use burn::store::{ModuleSnapshot, SafetensorsStore};
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
    model
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
