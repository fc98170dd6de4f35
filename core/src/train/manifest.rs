//! The run manifest, `OUT/run.json`, and the config copy beside it, `OUT/config.toml`: what a
//! run directory is, written in this one place and read by `resume`, `eval`, `export` and the
//! output-directory guard.
//!
//! ```json
//! {"config": "/abs/path/experiment.toml", "config_sha256": "…", "engram": "0.1.0",
//!  "plugins": [{"path": "…", "name": "…", "build_id": "…", "sha256": "…"}]}
//! ```

use crate::config::LoadedConfig;
use crate::error::{Error, Result};
use crate::fsutil::{sha256_hex, write_atomic};
use crate::plugin::PluginInfo;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The manifest's file name in a run directory.
pub const FILE: &str = "run.json";

/// `run.json`: where the run's config came from, its fingerprint and the plugins it loaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    /// The config file the run started from, absolute (relative paths inside it, such as
    /// `[data] path` and `plugins`, resolve against its directory on resume).
    pub config: PathBuf,
    /// SHA-256 (hex) of `config.toml`, the effective config (overrides applied): resume
    /// refuses a copy that changed.
    pub config_sha256: String,
    /// The engram version that wrote it.
    pub engram: String,
    /// The plugins the run loaded, each with its SHA-256 (a changed library is refused).
    #[serde(default)]
    pub plugins: Vec<PluginInfo>,
}

impl RunManifest {
    /// The manifest of a run of `cfg` with `plugins` loaded.
    pub fn new(cfg: &LoadedConfig, plugins: &[PluginInfo]) -> Self {
        Self {
            config: std::path::absolute(&cfg.file).unwrap_or_else(|_| cfg.file.clone()),
            config_sha256: sha256_hex(cfg.source.as_bytes()),
            engram: env!("CARGO_PKG_VERSION").to_string(),
            plugins: plugins.to_vec(),
        }
    }

    /// Writes `dir/config.toml` (the effective config of `cfg`) and then `dir/run.json`, each
    /// atomically, creating `dir`.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be written.
    pub fn write(dir: &Path, cfg: &LoadedConfig, plugins: &[PluginInfo]) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        write_atomic(&dir.join("config.toml"), cfg.source.as_bytes())?;
        let m = Self::new(cfg, plugins);
        let json = serde_json::to_vec(&m).map_err(|e| Error::Other(format!("run.json: {e}")))?;
        write_atomic(&dir.join(FILE), &json)?;
        Ok(m)
    }

    /// The manifest of the run in `dir`: `None` when there is no `run.json` or it is not a
    /// manifest (a user's file of that name).
    pub fn read(dir: &Path) -> Option<Self> {
        let bytes =
            crate::fsutil::read_bounded(&dir.join(FILE), crate::fsutil::MAX_TEXT_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back_and_refuses_a_foreign_file() {
        let d = tempfile::tempdir().unwrap();
        let cfg = LoadedConfig::from_source(
            &d.path().join("x.toml"),
            "[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\n".into(),
        )
        .unwrap();
        let m = RunManifest::write(&d.path().join("out"), &cfg, &[]).unwrap();
        assert_eq!(RunManifest::read(&d.path().join("out")), Some(m.clone()));
        assert_eq!(m.config_sha256, sha256_hex(cfg.source.as_bytes()));
        assert!(m.config.is_absolute());
        std::fs::write(d.path().join("out/run.json"), "{\"name\": \"mine\"}").unwrap();
        assert_eq!(RunManifest::read(&d.path().join("out")), None);
    }
}
