//! Checkpoints of a run: what a snapshot holds, which checkpoint belongs to the run and is
//! usable, restoring the model and the strategies, and `resume`.

use super::*;

pub(crate) fn states<T: ?Sized>(
    list: &[Box<T>],
    name: impl Fn(&T) -> String,
    state: impl Fn(&T) -> Result<crate::strategy::StrategyState>,
) -> Result<Vec<(String, crate::strategy::StrategyState)>> {
    list.iter().map(|s| Ok((name(s), state(s)?))).collect()
}

/// Captures everything needed to continue from `progress`.
pub(crate) fn snapshot(
    p: &Prepared,
    model: &Model,
    optim: &ModuleOptimizer,
    progress: &Progress,
) -> Result<Checkpoint> {
    let rec = |e: burn::store::RecordError| Error::Other(format!("checkpoint: {e}"));
    model.sync_running_state();
    Ok(Checkpoint {
        model: model
            .clone()
            .into_record()
            .into_bytes()
            .map_err(rec)?
            .to_vec(),
        optimizer: optim.into_bytes().map_err(rec)?.to_vec(),
        progress: progress.clone(),
        forgetting: states(&p.forgetting, |s| s.name().to_string(), |s| s.state())?,
        memory: states(&p.memory, |s| s.name().to_string(), |s| s.state())?,
        schedulers: states(&p.schedulers, |s| s.name().to_string(), |s| s.state())?,
        config_sha256: config_identity(&p.cfg.config),
    })
}

/// What ties a checkpoint to its run: the hex SHA-256 of the effective config as JSON, with the
/// keys that do not change what is trained left out (`[run] device`, `[run] out`), so that a
/// run trained on one device resumes or evaluates on another.
pub fn config_identity(c: &crate::config::Config) -> String {
    let mut c = c.clone();
    c.run.device = String::new();
    c.run.out = None;
    crate::fsutil::sha256_hex(&serde_json::to_vec(&c).unwrap_or_default())
}

/// `cfg` with `[run] device` replaced by `device` when given (`--device` of `resume`, `eval`,
/// `export`); the device is not part of a checkpoint's [`config_identity`].
///
/// # Errors
/// [`Error::Device`] for an unknown device or one this build or machine lacks.
pub(crate) fn on_device(mut cfg: LoadedConfig, device: Option<&str>) -> Result<LoadedConfig> {
    if let Some(d) = device {
        crate::device::select(d)?;
        cfg.config.run.device = d.to_string();
    }
    Ok(cfg)
}

/// The checkpoint contract, the same for `resume`, `eval` and `export`: checkpoint `ck` (at
/// `path`) belongs to the run prepared as `p` when it was written under the same effective
/// config (SHA-256 of `config.toml`; checkpoints of older versions carry none), on the same
/// data ([`crate::data::Dataset::fingerprint`]) and saved the state of the same strategies, in
/// the same order.
///
/// # Errors
/// [`Error::Checkpoint`] naming both configs' hashes or both strategy lists.
pub fn check_belongs(p: &Prepared, ck: &Checkpoint, path: &Path) -> Result<()> {
    let bad = |m: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message: m,
    };
    let have = config_identity(&p.cfg.config);
    if !ck.config_sha256.is_empty() && ck.config_sha256 != have {
        return Err(bad(format!(
            "was written under another config (SHA-256 {}…) than this run's {} ({}…): copied in from another run? use it in the run directory it came from",
            &ck.config_sha256[..12.min(ck.config_sha256.len())],
            p.cfg.file.display(),
            &have[..12]
        )));
    }
    let data = &ck.progress.origin.data_sha256;
    if !data.is_empty() && *data != p.data_sha256 {
        return Err(bad(format!(
            "was written on other data (SHA-256 {}…) than {} now reads ({}…): the dataset's files, its dataset.toml or [data] mean/std/shape changed since the run started; restore them, or start a new run",
            &data[..12.min(data.len())],
            p.cfg.file.display(),
            &p.data_sha256[..12]
        )));
    }
    let check =
        |want: Vec<String>, got: &[(String, crate::strategy::StrategyState)], what: &str| {
            let names: Vec<String> = got.iter().map(|(n, _)| n.clone()).collect();
            if names != want {
                return Err(bad(format!(
                    "holds the state of {what} strategies {names:?}, but {} lists {want:?}",
                    p.cfg.file.display()
                )));
            }
            Ok(())
        };
    check(
        p.forgetting.iter().map(|s| s.name().to_string()).collect(),
        &ck.forgetting,
        "forgetting",
    )?;
    check(
        p.memory.iter().map(|s| s.name().to_string()).collect(),
        &ck.memory,
        "memory",
    )?;
    check(
        p.schedulers.iter().map(|s| s.name().to_string()).collect(),
        &ck.schedulers,
        "scheduler",
    )
}

/// The newest checkpoint under `out` that verifies, belongs to the run ([`check_belongs`]) and
/// decodes into its model and strategies; each newer one that does not is passed over with a
/// warning on standard error. `None` when the run has no checkpoint.
///
/// # Errors
/// The newest checkpoint's error when every checkpoint fails (a run whose checkpoints all come
/// from another config must not silently start over).
pub(crate) fn usable_checkpoint(
    p: &mut Prepared,
    out: &Path,
) -> Result<Option<(PathBuf, Checkpoint)>> {
    let candidates = checkpoint::newest_first(out);
    let mut first_error = None;
    for dir in candidates {
        let tried = checkpoint::load_dir(&dir).and_then(|ck| {
            check_belongs(p, &ck, &dir)?;
            // Decoding is tried on a throw-away model: the run restores it again for real.
            let model = p.build_model(&p.device)?;
            restore_model(
                &mut p.forgetting,
                model,
                ck.forgetting.clone(),
                &ck.model,
                &p.device,
                &dir,
            )?;
            Ok(ck)
        });
        match tried {
            Ok(ck) => return Ok(Some((dir, ck))),
            Err(e) => {
                // Named by its directory, whichever part failed.
                let e = match e {
                    e @ Error::Checkpoint { .. } => e,
                    other => Error::Checkpoint {
                        path: dir.clone(),
                        message: format!("does not decode: {other}"),
                    },
                };
                // Damaged, or whole but of another config or model: the error says which.
                eprintln!("warning: skipping a checkpoint this run cannot use: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

impl Prepared {
    /// The run as checkpoint `ck` (read from `path`) saved it: a freshly built model and
    /// optimiser on `device` with the checkpoint's weights and optimiser state, every
    /// strategy's state restored, and the checkpoint's progress. The one restore of the
    /// trainer: for a resumed run and for an anomaly rollback to a task's start alike.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for a model or optimiser record that does not decode or fit; a
    /// strategy's error loading its state.
    pub(crate) fn restore(
        &mut self,
        ck: Checkpoint,
        device: &Device,
        path: &Path,
    ) -> Result<(Model, ModuleOptimizer, Progress)> {
        let model = self.build_model(device)?;
        let optim = build_optimizer(&self.cfg);
        let bad = |m: String| Error::Checkpoint {
            path: path.to_path_buf(),
            message: m,
        };
        let optim = optim
            .from_bytes(burn::tensor::Bytes::from_bytes_vec(ck.optimizer))
            .map_err(|e| bad(format!("optimizer: {e}")))?;
        // The strategy lists were compared by `check_belongs` when the checkpoint was chosen; a
        // rollback restores a snapshot of this very run.
        let model = restore_model(
            &mut self.forgetting,
            model,
            ck.forgetting,
            &ck.model,
            device,
            path,
        )?;
        for (s, (_, st)) in self.memory.iter_mut().zip(ck.memory) {
            let name = s.name().to_string();
            s.load_state(st).map_err(|e| strategy_err(&name, e))?;
        }
        for (s, (_, st)) in self.schedulers.iter_mut().zip(ck.schedulers) {
            let name = s.name().to_string();
            s.load_state(st).map_err(|e| strategy_err(&name, e))?;
        }
        Ok((model, optim, ck.progress))
    }
}

/// Loads the forgetting strategies' saved states, lets them re-apply their architecture changes
/// to `model` ([`ForgettingStrategy::rebuild_model`]), then loads the checkpoint's weights.
pub(crate) fn restore_model(
    forgetting: &mut [Box<dyn ForgettingStrategy>],
    model: Model,
    states: Vec<(String, crate::strategy::StrategyState)>,
    weights: &[u8],
    device: &Device,
    path: &Path,
) -> Result<Model> {
    let bad = |m: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message: m,
    };
    let mut model = model;
    for (s, (_, st)) in forgetting.iter_mut().zip(states) {
        let name = s.name().to_string();
        s.load_state(st, device)
            .map_err(|e| strategy_err(&name, e))?;
        model = s
            .rebuild_model(model, device)
            .map_err(|e| strategy_err(&name, e))?;
    }
    let record = burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(
        weights.to_vec(),
    ))
    .map_err(|e| bad(format!("model: {e}")))?;
    model
        .try_load_record(record)
        .map_err(|e| bad(format!("model does not match the config: {e}")))
}

/// Continues the run in `out` from its newest valid checkpoint (or from the start when it has
/// none): reloads `out/config.toml`, rebuilds everything and continues as [`run_from`] does.
/// The run directory's `run.json` and `config.toml` are kept as they are (written anew only
/// for a directory without a manifest), so that relative paths in the config go on
/// resolving against the original config's directory for `eval`, `export` and a later
/// resume.
///
/// # Errors
/// [`Error::Checkpoint`] when `out` holds no run; [`Error::Usage`] for an entry of the run
/// directory of the wrong kind ([`check_resumable`]), before anything is written; otherwise
/// as [`prepare`] and [`run`].
pub fn resume(
    out: &Path,
    registry: &Registry,
    progress: bool,
    device: Option<&str>,
) -> Result<Report> {
    resume_observed(out, registry, progress, device, &[])
}

/// [`resume`], telling `observers` the run's progress ([`crate::train::observer`]).
///
/// # Errors
/// As [`resume`].
pub fn resume_observed(
    out: &Path,
    registry: &Registry,
    progress: bool,
    device: Option<&str>,
    observers: &[crate::train::observer::SharedObserver],
) -> Result<Report> {
    check_resumable(out)?;
    let registry = with_recorded_plugins(out, registry)?;
    let mut p = prepare(on_device(run_config(out)?, device)?, &registry)?;
    p.observers = observers.to_vec();
    let latest = usable_checkpoint(&mut p, out)?;
    match &latest {
        Some((path, ck))
            if ck.progress.at.round >= p.stream.len()
                || (p.cfg.config.train.joint && ck.progress.at.round >= 1) =>
        {
            eprintln!(
                "engram: {} is complete; rewriting its report from {}",
                out.display(),
                path.display()
            )
        }
        Some((path, ck)) => eprintln!(
            "engram: resuming from {} (task {}, step {} of the task)",
            path.display(),
            ck.progress.at.round,
            ck.progress.at.step_in_task
        ),
        None => eprintln!(
            "engram: no checkpoint yet; starting {} from the beginning",
            out.display()
        ),
    }
    let opts = RunOptions {
        out: out.to_path_buf(),
        progress,
    };
    crate::plugin::catch_faults(|| run_inner(&mut p, &opts, Start::Resume, latest))
}

/// Checks that the entries of run directory `out` that resuming writes are of the kind it
/// writes, so that a resume refuses before it writes anything rather than failing half-way:
/// `checkpoints` a directory; `report.json`, `metrics.csv`, `steps.csv`, `metrics.jsonl` and
/// the lock file `.lock` regular files. Each may be absent. The binary calls it before taking the lock.
///
/// # Errors
/// [`Error::Usage`] naming the entry and what it should be.
pub fn check_resumable(out: &Path) -> Result<()> {
    let wrong = |name: &str, is: &str, want: &str| {
        Error::Usage(format!(
            "cannot resume {}: {} is {is}, where the run keeps its {want}; move it out of the way (or restore the run's own) and resume again",
            out.display(),
            out.join(name).display()
        ))
    };
    let kind = |name: &str| std::fs::metadata(out.join(name)).ok().map(|m| m.is_dir());
    if kind("checkpoints") == Some(false) {
        return Err(wrong("checkpoints", "a file", "checkpoints directory"));
    }
    for (name, want) in [
        (".lock", "lock file"),
        ("report.json", "report"),
        ("metrics.csv", "metrics table"),
        ("steps.csv", "logged steps"),
        ("metrics.jsonl", "metrics log"),
    ] {
        if kind(name) == Some(true) {
            return Err(wrong(name, "a directory", want));
        }
    }
    Ok(())
}

/// `registry` plus the plugins recorded in `out/run.json`, each checked to be the very file
/// the run started with (SHA-256). A recorded plugin whose file moved is found when the same
/// library (same SHA-256) is already in `registry` (given with `--plugin`).
///
/// # Errors
/// [`crate::plugin::PluginError::Changed`] for a library that changed,
/// [`crate::plugin::PluginError::Missing`] for one that is gone, any load error.
pub fn with_recorded_plugins(out: &Path, registry: &Registry) -> Result<Registry> {
    let mut registry = registry.clone();
    let recorded =
        crate::train::manifest::RunManifest::read(out).map_or_else(Vec::new, |m| m.plugins);
    for info in recorded {
        // The same library given again (`--plugin`, perhaps from another path) is enough.
        if let Some(here) = registry.plugins().iter().find(|p| p.sha256 == info.sha256) {
            if here.path != info.path {
                registry.stand_in_for(&info.path);
            }
            continue;
        }
        let found = crate::plugin::file_sha256(&info.path)?;
        if found != info.sha256 {
            return Err(crate::plugin::PluginError::Changed {
                path: info.path,
                recorded: info.sha256,
                found,
            }
            .into());
        }
        registry.load_plugin(&info.path)?;
    }
    Ok(registry)
}
