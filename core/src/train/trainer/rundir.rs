//! A run's directory as the other commands read it: its config, its checkpoints, a
//! checkpoint's model, and the plugins it recorded.

use super::*;

/// The effective config a run wrote into `out` (`config.toml`), attributed to the file it came
/// from (`run.json`) so that relative paths in it resolve as they did.
///
/// # Errors
/// [`Error::Checkpoint`] when `out` holds no run; config errors as [`LoadedConfig::from_source`].
pub fn run_config(out: &Path) -> Result<LoadedConfig> {
    let cfg_path = out.join("config.toml");
    let text = crate::fsutil::read_text(&cfg_path).map_err(|e| Error::Checkpoint {
        path: out.to_path_buf(),
        message: format!("no run here ({}: {e})", cfg_path.display()),
    })?;
    let meta = crate::train::manifest::RunManifest::read(out);
    // The copy must be the config the checkpoints were made with.
    if let Some(m) = &meta
        && crate::fsutil::sha256_hex(text.as_bytes()) != m.config_sha256
    {
        return Err(Error::Checkpoint {
            path: out.to_path_buf(),
            message: format!(
                "{} changed since the run started (its SHA-256 is recorded in run.json): \
                 the checkpoints were made with the original; restore it, or start a new run \
                 with the new config",
                cfg_path.display()
            ),
        });
    }
    // Errors name the file that was read, the run's copy; relative paths (plugins, data)
    // resolve against the original config's directory.
    let mut loaded = LoadedConfig::from_source(&cfg_path, text)?;
    if let Some(parent) = meta.as_ref().and_then(|m| m.config.parent()) {
        loaded.base_dir = parent.to_path_buf();
    }
    Ok(loaded)
}

/// Locates a checkpoint: `path` is a checkpoint directory (`OUT/checkpoints/step-N`: returns
/// the run directory and that checkpoint, read and verified) or a run's output directory
/// holding checkpoints (returns it and `None`: the caller picks the newest usable one).
///
/// # Errors
/// [`Error::Checkpoint`] for a checkpoint that does not verify or lies outside its run, and
/// for a directory without checkpoints (a `--seeds` directory is named as such).
pub fn find_checkpoint(path: &Path) -> Result<(PathBuf, Option<(PathBuf, Checkpoint)>)> {
    if path.join("manifest.json").is_file() {
        let ck = checkpoint::load_dir(path)?;
        let out = path
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        if !out.join("config.toml").is_file() {
            return Err(Error::Checkpoint {
                path: path.to_path_buf(),
                message: "a checkpoint outside its run directory: its stream and model are rebuilt from the run's config.toml (OUT/config.toml for OUT/checkpoints/step-N)".into(),
            });
        }
        return Ok((out, Some((path.to_path_buf(), ck))));
    }
    if checkpoint::newest_first(path).is_empty() {
        return Err(Error::Checkpoint {
            path: path.to_path_buf(),
            message: if path.join("seed-0").is_dir() || path.join("aggregate.json").is_file() {
                "a --seeds directory: give one seed's run, OUT_DIR/seed-N".into()
            } else {
                "no checkpoint here (give OUT_DIR or OUT_DIR/checkpoints/step-N)".into()
            },
        });
    }
    Ok((path.to_path_buf(), None))
}

/// Rebuilds a run's stream and loads a checkpoint's model: for `engram eval` and `export`.
/// Returns the prepared run, the model, and where the checkpoint stands in the run.
///
/// # Errors
/// As [`find_checkpoint`], [`prepare`], and [`Error::Checkpoint`] for a model that does not
/// match the run's config.
pub fn load_checkpoint_model(
    path: &Path,
    registry: &Registry,
    device: Option<&str>,
) -> Result<(Prepared, Model, checkpoint::Cursor)> {
    let (out, named) = find_checkpoint(path)?;
    let registry = with_recorded_plugins(&out, registry)?;
    let mut p = prepare(on_device(run_config(&out)?, device)?, &registry)?;
    // A checkpoint named by its path: that one, under the contract; a run directory: the
    // newest checkpoint that belongs to it and decodes, as for resume.
    let (dir, ck) = match named {
        Some((dir, ck)) => {
            check_belongs(&p, &ck, &dir)?;
            (dir, ck)
        }
        None => usable_checkpoint(&mut p, &out)?.ok_or_else(|| Error::Checkpoint {
            path: out.clone(),
            message: "no checkpoint here".into(),
        })?,
    };
    let model = p.build_model(&p.device)?;
    let model = restore_model(
        &mut p.forgetting,
        model,
        ck.forgetting,
        &ck.model,
        &p.device,
        &dir,
    )?;
    Ok((p, model, ck.progress.at))
}
