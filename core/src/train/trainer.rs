//! The continual trainer: the loop of the crate docs, calling every strategy hook.

use super::checkpoint::{self, Checkpoint, Progress};
use super::memory::{self, PhaseMemory, PhaseMeter};
use super::metrics;
use super::report::{
    Event, MACHINE_DEPENDENT_KEYS, Report, SCHEMA_VERSION, TaskSummary, Throughput, Versions,
    steps_csv,
};
use crate::config::{LoadedConfig, OptimizerKind, Scenario};
use crate::data::stream::{Batch, Part, SampleRef, Stream};
use crate::error::{Error, Result};
use crate::fsutil::write_atomic;
use crate::model::{Activation, ForwardCtx, Model};
use crate::registry::{BuildContext, Registry};
use crate::rng;
use crate::strategy::{
    AnomalyAction, BatchContext, Controls, ForgettingStrategy, LossFn, MemoryStrategy, Next,
    Position, Scheduler, StepContext, StepRequest, TaskContext, TaskInfo,
};
use burn::module::Module;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig, decay::WeightDecayConfig,
    momentum::MomentumConfig,
};
use burn::tensor::{Device, Tensor, activation};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How to run, beyond the config.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The output directory.
    pub out: PathBuf,
    /// Show progress bars (on a terminal).
    pub progress: bool,
}

/// Everything a run needs, built and checked before anything is written.
pub struct Prepared {
    /// The config.
    pub cfg: LoadedConfig,
    /// The device (without autodiff).
    pub device: Device,
    /// The stream of tasks.
    pub stream: Stream,
    /// Forgetting strategies, in config order.
    pub forgetting: Vec<Box<dyn ForgettingStrategy>>,
    /// Memory strategies, in chain order.
    pub memory: Vec<Box<dyn MemoryStrategy>>,
    /// Schedulers, in config order.
    pub schedulers: Vec<Box<dyn Scheduler>>,
    /// Seconds spent preparing.
    pub setup_s: f64,
    /// The plugins loaded for this run (recorded in `run.json` and reloaded by [`resume`]).
    pub plugins: Vec<crate::plugin::PluginInfo>,
    /// The registry the run was prepared with (its model factory builds [`Prepared::build_model`]).
    pub registry: Registry,
}

/// Resolves a path from the config against `base_dir` ([`LoadedConfig::base_dir`]); an
/// absolute path is kept.
pub fn relative_to(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// Checks and builds everything a run needs: device, data, stream, strategies.
///
/// # Errors
/// Any input error ([`Error::Config`], [`Error::DatasetMissing`], [`Error::Idx`],
/// [`Error::Device`], …) before a single file is written.
pub fn prepare(cfg: LoadedConfig, registry: &Registry) -> Result<Prepared> {
    let start = Instant::now();
    let c = &cfg.config;
    // Plugins named in the config (relative to the config file) join the caller's registry.
    let mut registry = registry.clone();
    for path in &c.plugins {
        registry.load_plugin(&relative_to(&cfg.base_dir, path))?;
    }
    let registry = &registry;
    let device = crate::device::select(&c.run.device)
        .map_err(|e| cfg.error_at("run", "device", e.to_string(), None))?;
    // Names are looked up before the data is read, so that a misspelt name says so at once.
    registry.check_names(&cfg)?;
    let data_path = c.data.path.as_ref().map(|p| relative_to(&cfg.base_dir, p));
    let ds = registry.load_dataset(&cfg, data_path.as_deref())?;
    let stream = Stream::build(Arc::new(ds), &c.data, c.run.seed)
        .map_err(|e| cfg.error_at("data", "tasks", e.to_string(), None))?;
    // The model's factory checks its keys against the data's geometry now, before anything is
    // written (the model itself is built again, on the run's device, by `build_model`).
    drop(registry.build_model(&cfg, &model_context(&cfg, &stream), &device)?);
    let bcx = BuildContext {
        num_tasks: stream.len(),
        num_classes: stream.num_classes,
        batch_size: c.train.batch_size,
        seed: c.run.seed,
    };
    let forgetting = registry.build_forgetting(&cfg, &bcx)?;
    let memory = registry.build_memory(&cfg, &bcx)?;
    let schedulers = registry.build_schedulers(&cfg, &bcx)?;
    Ok(Prepared {
        plugins: registry.plugins().to_vec(),
        registry: registry.clone(),
        cfg,
        device,
        stream,
        forgetting,
        memory,
        schedulers,
        setup_s: start.elapsed().as_secs_f64(),
    })
}

/// What the model factory is told about the run: the data's input shape, the stream's class
/// count and the run seed.
pub fn model_context(cfg: &LoadedConfig, stream: &Stream) -> crate::model::ModelContext {
    crate::model::ModelContext {
        input: stream.dataset.input,
        num_classes: stream.num_classes,
        seed: cfg.config.run.seed,
    }
}

impl Prepared {
    /// Builds the configured model on `device`, initialised from the run seed (the same
    /// weights every time).
    ///
    /// # Errors
    /// The model factory's errors (checked once by [`prepare`], so a second call fails only
    /// if a plugin's factory does).
    pub fn build_model(&self, device: &Device) -> Result<Model> {
        self.registry
            .build_model(&self.cfg, &model_context(&self.cfg, &self.stream), device)
    }
}

/// The configured optimiser (burn-optim).
pub fn build_optimizer(cfg: &LoadedConfig) -> ModuleOptimizer {
    let o = &cfg.config.optimizer;
    let wd = (o.weight_decay > 0.0).then_some(WeightDecayConfig {
        penalty: o.weight_decay as f32,
    });
    match o.kind {
        OptimizerKind::Sgd => SgdConfig::new()
            .with_momentum((o.momentum > 0.0).then_some(MomentumConfig {
                momentum: o.momentum,
                dampening: 0.0,
                nesterov: false,
            }))
            .with_weight_decay(wd)
            .init(),
        OptimizerKind::Adam => AdamConfig::new().with_weight_decay(wd).init(),
        OptimizerKind::Adamw => AdamWConfig::new()
            .with_weight_decay(o.weight_decay as f32)
            .init(),
    }
}

/// Warns (on standard error and as an `at-chance` event of the report) when task `t`, just
/// trained, scores no better than chance on its own evaluation rows: `row[t] ≤ 1/classes +
/// 0.02`, `classes` the task's class count. A model that collapsed to predicting one class
/// keeps a finite loss, so the divergence check does not stop it; without this the run would
/// finish silently with a dead model.
fn check_learned(t: usize, classes: usize, row: &[Option<f64>], events: &mut Vec<Event>) {
    let chance = 1.0 / classes.max(1) as f64;
    let Some(acc) = row.get(t).copied().flatten() else {
        return;
    };
    if acc > chance + 0.02 {
        return;
    }
    let message = format!(
        "task {t} scores {acc:.3} right after training on it, no better than chance ({chance:.3}): \
         the model did not learn it — it collapsed to one class, the learning rate is far off, \
         or the task has too few steps for the strategies to let it in (the book's \
         troubleshooting chapter, \"A task is at chance right after training\")"
    );
    eprintln!("warning: {message}");
    events.push(Event {
        task: t,
        kind: "at-chance".into(),
        message,
    });
}

/// Cross-entropy of `logits` `[batch, classes]` against `batch.y`, per sample `[batch]`,
/// after adding the batch's logit mask.
pub fn per_sample_cross_entropy(logits: Tensor<2>, batch: &Batch) -> Tensor<1> {
    let logits = match &batch.logit_mask {
        Some(m) => logits + m.clone(),
        None => logits,
    };
    let logp = activation::log_softmax(logits, 1);
    let n = batch.y.dims()[0];
    logp.gather(1, batch.y.clone().reshape([n, 1]))
        .reshape([n])
        .neg()
}

/// The loss of a training step: cross-entropy plus every strategy's penalty.
///
/// `task loss = mean_i CE_i` when the batch has no weights, else `Σ_i w_i·CE_i` (a strategy
/// that sets weights chooses their normalisation; replay's `every`/`weight` mode uses
/// `1/n_new` for new rows and `weight/n_memory` for memory rows).
pub struct TrainLoss<'a> {
    /// The forgetting strategies (their penalties are added).
    pub forgetting: &'a [Box<dyn ForgettingStrategy>],
    /// The batch context the penalties see.
    pub cx: &'a BatchContext<'a>,
}

impl LossFn for TrainLoss<'_> {
    fn loss(&self, model: &Model, logits: Tensor<2>, batch: &Batch) -> (Tensor<1>, Tensor<1>) {
        let mut extra: Option<Tensor<1>> = None;
        for f in self.forgetting {
            if let Some(p) = f.logit_penalty(&logits, batch) {
                extra = Some(match extra {
                    Some(e) => e + p,
                    None => p,
                });
            }
        }
        let ce = per_sample_cross_entropy(logits, batch);
        let mut total = match &batch.weights {
            Some(w) => (ce.clone() * w.clone()).sum(),
            None => ce.clone().mean(),
        };
        for f in self.forgetting {
            if let Some(p) = f.penalty(model, self.cx) {
                total = total + p;
            }
        }
        if let Some(e) = extra {
            total = total + e;
        }
        (total, ce)
    }
}

/// Global L2 norm of all gradients (Pascanu et al. 2013): `sqrt(Σ_p ‖g_p‖²)`.
pub fn global_grad_norm(model: &Model, grads: &GradientsParams) -> f64 {
    model
        .flat_grads(grads)
        .into_iter()
        .map(|(_, g)| f64::from(g.powf_scalar(2.0).sum().into_scalar::<f32>()))
        .sum::<f64>()
        .sqrt()
}

/// Scales gradients by `min(1, max_norm / ‖g‖)` when the global norm exceeds `max_norm`.
/// Returns the norm before clipping.
pub fn clip_global_norm(
    model: &Model,
    grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, f64) {
    let norm = global_grad_norm(model, &grads);
    if norm <= max_norm || norm == 0.0 {
        return (grads, norm);
    }
    let scale = (max_norm / norm) as f32;
    let flat = model
        .flat_grads(&grads)
        .into_iter()
        .map(|(p, g)| (p.id, g.mul_scalar(scale)))
        .collect();
    (crate::model::unflatten_grads(model, flat), norm)
}

/// Accuracy of `model` on task `t`'s evaluation rows, without an autodiff graph.
///
/// `seen` is the last trained task (for unseen-class masks). Returns the fraction correct
/// (0 for a task without evaluation rows).
pub fn evaluate_task(
    model: &Model,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> f64 {
    let pairs = predict_task(model, stream, t, seen, batch, device);
    let correct = pairs.iter().filter(|(y, p)| y == p).count();
    correct as f64 / pairs.len().max(1) as f64
}

/// `(true class, predicted class)` for each of task `t`'s evaluation rows, in row order, as
/// [`evaluate_task`] scores them (same masks, no autodiff graph).
pub fn predict_task(
    model: &Model,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<(usize, usize)> {
    let (rows, part) = stream.eval_rows(t);
    let ctx = ForwardCtx::evaluation((stream.scenario == Scenario::TaskIncremental).then_some(t));
    let refs: Vec<SampleRef> = rows
        .iter()
        .map(|&i| SampleRef {
            task: t as u16,
            index: i,
        })
        .collect();
    let mut out = Vec::with_capacity(refs.len());
    for chunk in refs.chunks(batch.max(1)) {
        let b = stream.batch(chunk, part, seen, device);
        let mut logits = model.forward(Activation::Flat(b.x.clone()), &ctx);
        if let Some(m) = &b.logit_mask {
            logits = logits + m.clone();
        }
        let to_vec = |t: Tensor<1, burn::tensor::Int>| -> Vec<i64> {
            t.into_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .unwrap_or_default()
        };
        let pred = to_vec(logits.argmax(1).reshape([chunk.len()]));
        let y = to_vec(b.y);
        out.extend(
            y.into_iter()
                .zip(pred)
                .map(|(y, p)| (y as usize, p as usize)),
        );
    }
    out
}

/// The confusion matrix `[classes][classes]` (row: true class, column: predicted class, in
/// samples) of `model` over the evaluation rows of every task of `stream`, scored as
/// [`evaluate_task`] does with `seen` the last trained task.
pub fn confusion_matrix(
    model: &Model,
    stream: &Stream,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<Vec<u64>> {
    let c = stream.num_classes;
    let mut m = vec![vec![0u64; c]; c];
    for t in 0..stream.len() {
        for (y, p) in predict_task(model, stream, t, seen, batch, device) {
            if y < c && p < c {
                m[y][p] += 1;
            }
        }
    }
    m
}

/// `e` as an error of strategy `name`; an error that already names that strategy is kept as
/// it is (the name once, not twice).
fn strategy_err(name: &str, e: Error) -> Error {
    match e {
        e @ Error::Strategy { .. } if matches!(&e, Error::Strategy { strategy, .. } if strategy == name) => {
            e
        }
        e => Error::Strategy {
            strategy: name.to_string(),
            message: e.to_string(),
        },
    }
}

/// Set by the binary's Ctrl-C handler; the trainer checkpoints and stops at the next step.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn states<T: ?Sized>(
    list: &[Box<T>],
    name: impl Fn(&T) -> String,
    state: impl Fn(&T) -> Result<crate::strategy::StrategyState>,
) -> Result<Vec<(String, crate::strategy::StrategyState)>> {
    list.iter().map(|s| Ok((name(s), state(s)?))).collect()
}

/// Captures everything needed to continue from `progress`.
fn snapshot(
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
fn on_device(mut cfg: LoadedConfig, device: Option<&str>) -> Result<LoadedConfig> {
    if let Some(d) = device {
        crate::device::select(d)?;
        cfg.config.run.device = d.to_string();
    }
    Ok(cfg)
}

/// The checkpoint contract, the same for `resume`, `eval` and `export`: checkpoint `ck` (at
/// `path`) belongs to the run prepared as `p` when it was written under the same effective
/// config (SHA-256 of `config.toml`; checkpoints of older versions carry none) and saved the
/// state of the same strategies, in the same order.
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
fn usable_checkpoint(p: &mut Prepared, out: &Path) -> Result<Option<(PathBuf, Checkpoint)>> {
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
                eprintln!("warning: skipping a damaged checkpoint: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// The strategies of a run, borrowed apart from its stream.
struct Strategies<'a> {
    forgetting: &'a mut [Box<dyn ForgettingStrategy>],
    memory: &'a mut [Box<dyn MemoryStrategy>],
    schedulers: &'a mut [Box<dyn Scheduler>],
}

/// Restores model, optimiser and strategy states from `ck` into a freshly prepared run.
fn restore(
    p: Strategies<'_>,
    model: Model,
    optim: ModuleOptimizer,
    ck: Checkpoint,
    device: &Device,
    path: &Path,
) -> Result<(Model, ModuleOptimizer, Progress)> {
    let bad = |m: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message: m,
    };
    let optim = optim
        .from_bytes(burn::tensor::Bytes::from_bytes_vec(ck.optimizer))
        .map_err(|e| bad(format!("optimizer: {e}")))?;
    // The strategy lists were compared by `check_belongs` when the checkpoint was chosen; a
    // rollback restores a snapshot of this very run.
    let model = restore_model(p.forgetting, model, ck.forgetting, &ck.model, device, path)?;
    for (s, (_, st)) in p.memory.iter_mut().zip(ck.memory) {
        let name = s.name().to_string();
        s.load_state(st).map_err(|e| strategy_err(&name, e))?;
    }
    for (s, (_, st)) in p.schedulers.iter_mut().zip(ck.schedulers) {
        let name = s.name().to_string();
        s.load_state(st).map_err(|e| strategy_err(&name, e))?;
    }
    Ok((model, optim, ck.progress))
}

/// Loads the forgetting strategies' saved states, lets them re-apply their architecture changes
/// to `model` ([`ForgettingStrategy::rebuild_model`]), then loads the checkpoint's weights.
fn restore_model(
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

/// Runs a prepared experiment and writes its outputs into `opts.out`; with `resume`, continues
/// from that checkpoint (see [`super::checkpoint`]).
///
/// Checkpoints are written after every task, every `checkpoint_every` steps when set, and when
/// [`INTERRUPTED`] is set (Ctrl-C), after which the run stops with [`Error::Interrupted`].
///
/// # Errors
/// [`Error::Io`] when the out dir cannot be written; [`Error::Strategy`] when a strategy fails;
/// [`Error::Checkpoint`] when `resume` does not match the config; [`Error::Interrupted`].
pub fn run(mut p: Prepared, opts: &RunOptions) -> Result<Report> {
    run_from(&mut p, opts, None)
}

/// [`run`], continuing from checkpoint `resume` (its directory and contents) when given.
///
/// A plugin strategy that panics stops the run with [`crate::plugin::PluginError::Panicked`]
/// (see [`crate::plugin::catch_faults`]); the checkpoints written so far stay as they are.
///
/// # Errors
/// As [`run`].
pub fn run_from(
    p: &mut Prepared,
    opts: &RunOptions,
    resume: Option<(PathBuf, Checkpoint)>,
) -> Result<Report> {
    crate::plugin::catch_faults(|| run_inner(p, opts, resume))
}

fn run_inner(
    p: &mut Prepared,
    opts: &RunOptions,
    resume: Option<(PathBuf, Checkpoint)>,
) -> Result<Report> {
    let t0 = Instant::now();
    let c = p.cfg.config.clone();
    let seed = c.run.seed;
    std::fs::create_dir_all(&opts.out).map_err(|e| Error::io(&opts.out, e))?;
    if resume.is_none() {
        super::manifest::RunManifest::write(&opts.out, &p.cfg, &p.plugins)?;
    }

    let inner = p.device.clone();
    let ad = inner.clone().autodiff();
    let ad = if p.memory.iter().any(|m| m.op_level_checkpointing()) {
        ad.gradient_checkpointing()
    } else {
        ad
    };
    ad.seed(rng::derive_seed(seed, "burn-init", 0, 0));
    let model = p.build_model(&ad)?;
    let optim = build_optimizer(&p.cfg);
    let (model, optim, mut pr) = match resume {
        Some((path, ck)) => restore(
            Strategies {
                forgetting: &mut p.forgetting,
                memory: &mut p.memory,
                schedulers: &mut p.schedulers,
            },
            model,
            optim,
            ck,
            &ad,
            &path,
        )?,
        None => (model, optim, Progress::default()),
    };
    let parameters = model.numel() as u64;
    // Plugin faults are turned into errors here already, so that they are recorded too.
    let result =
        crate::plugin::catch_faults(|| train_loop(p, opts, model, optim, &mut pr, &inner, &ad, t0));
    if let Err(e) = &result
        && !matches!(e, Error::Interrupted(_))
    {
        // A failed or diverged run keeps its record: the steps so far, where it stopped and
        // why, and the matrix so far. Best effort: the run's own error is what is returned.
        let _ = write_failure(p, opts, &mut pr, e, parameters, t0, &inner);
    }
    result
}

/// Writes the record of a run that stopped with `e`: `steps.csv` (the logged steps and the
/// steps since the last log row) and a `report.json` with `status = "failed"`, the error and
/// position, the accuracy matrix so far and no metrics.
fn write_failure(
    p: &Prepared,
    opts: &RunOptions,
    pr: &mut Progress,
    e: &Error,
    parameters: u64,
    t0: Instant,
    inner: &Device,
) -> Result<()> {
    pr.flush_window(pr.step_in_task, pr.global_step, pr.last_lr);
    write_atomic(&opts.out.join("steps.csv"), steps_csv(&pr.logs).as_bytes())?;
    let earlier_s = pr.timings.total_s;
    let mut report = build_report(
        p,
        pr,
        inner,
        parameters,
        earlier_s + t0.elapsed().as_secs_f64() + p.setup_s,
    );
    report.metrics = metrics::Metrics::default();
    report.status = super::report::RunStatus::Failed;
    report.failure = Some(super::report::Failure {
        error: e.to_string(),
        task: pr.round,
        epoch: pr.epoch,
        step_in_task: pr.step_in_task,
        global_step: pr.global_step,
    });
    report.write(&opts.out)
}

/// The continual loop from `pr` on (see [`run`]); `pr` is the caller's, so that a failure can
/// be recorded with the progress it reached.
#[allow(clippy::too_many_arguments)]
fn train_loop(
    p: &mut Prepared,
    opts: &RunOptions,
    mut model: Model,
    mut optim: ModuleOptimizer,
    pr: &mut Progress,
    inner: &Device,
    ad: &Device,
    t0: Instant,
) -> Result<Report> {
    let c = p.cfg.config.clone();
    let seed = c.run.seed;
    let inner = inner.clone();
    let ad = ad.clone();
    let p = &mut *p;
    let stream = &p.stream;
    let n_tasks = stream.len();
    let eval_bs = c.train.eval_batch_size;
    let setup_s = p.setup_s;
    if pr.memory.source.is_empty() {
        pr.memory.source = if inner.memory_pool_usage().is_some() {
            "device-pool".into()
        } else {
            "heap".into()
        };
    }
    // Wall time of earlier processes of this run (a resumed run adds its own).
    let earlier_s = pr.timings.total_s;
    let save =
        |p: &Prepared, model: &Model, optim: &ModuleOptimizer, pr: &Progress| -> Result<()> {
            let mut ck = snapshot(p, model, optim, pr)?;
            ck.progress.timings.total_s = earlier_s + t0.elapsed().as_secs_f64();
            checkpoint::save(&opts.out, pr.global_step, &ck)?;
            Ok(())
        };

    // b_j: the initial model on every task (for forward transfer).
    if pr.baseline.is_empty() {
        let te = Instant::now();
        let valid = model.valid();
        pr.baseline = (0..n_tasks)
            .map(|j| {
                pr.eval_samples += stream.eval_rows(j).0.len();
                evaluate_task(&valid, stream, j, 0, eval_bs, &inner)
            })
            .collect();
        pr.timings.eval_s += te.elapsed().as_secs_f64();
        save(p, &model, &optim, pr)?;
    }

    let joint = c.train.joint;
    let rounds = if joint { 1 } else { n_tasks };
    let mut leaks = memory::LeakDetector::new(c.train.leak_factor);
    // Accumulation is exact only without batch statistics: said once per run, where the user
    // looks (stderr and the report's events).
    if pr.global_step == 0 && model.uses_batch_statistics() {
        for m in p.memory.iter().filter(|m| m.splits_batch()) {
            let message = format!(
                "`{}` splits each batch into micro-batches, and this model normalises with batch statistics (batch norm): each micro-batch is normalised with its own statistics, so the step is not the plain step's (the book's memory chapter, \"Accumulation and batch norm\")",
                m.name()
            );
            eprintln!("warning: {message}");
            pr.events.push(Event {
                task: 0,
                kind: "batch-statistics".into(),
                message,
            });
        }
    }
    // Only a run with a rollback policy pays for the in-memory task-start snapshot.
    let anomaly_policy = p.schedulers.iter().any(|s| s.may_roll_back());

    while pr.round < rounds {
        let round = pr.round;
        let info = TaskInfo {
            index: round,
            num_tasks: n_tasks,
            classes: if joint {
                stream
                    .tasks
                    .iter()
                    .flat_map(|t| t.classes.clone())
                    .collect()
            } else {
                stream.tasks[round].classes.clone()
            },
            train_samples: if joint {
                stream.tasks.iter().map(|t| t.train.len()).sum()
            } else {
                stream.tasks[round].train.len()
            },
            joint,
        };
        // The state at the start of the task, for an anomaly rollback.
        let task_start = if pr.before_task_done || !anomaly_policy {
            None
        } else {
            Some(snapshot(p, &model, &optim, pr)?)
        };
        if !pr.before_task_done {
            if c.optimizer.reset_per_task && round > 0 {
                optim = build_optimizer(&p.cfg);
            }
            for s in p.schedulers.iter_mut() {
                s.before_task(&info);
            }
            let mut tcx = TaskContext {
                model: &mut model,
                device: &ad,
                task: &info,
                stream,
                seed,
                final_train_loss: 0.0,
            };
            for f in p.forgetting.iter_mut() {
                let name = f.name().to_string();
                f.before_task(&mut tcx)
                    .map_err(|e| strategy_err(&name, e))?;
            }
            pr.before_task_done = true;
            pr.task_train = PhaseMemory::default();
        }

        leaks.start_task();
        let steps_per_epoch = info.train_samples.div_ceil(c.train.batch_size);
        let steps_per_task = steps_per_epoch * c.train.epochs;
        let bar = progress_bar(opts.progress, steps_per_task as u64, round, rounds, joint);
        bar.set_position(pr.step_in_task as u64);
        let mut tt = Instant::now();
        let mut meter = PhaseMeter::start();
        while pr.epoch < c.train.epochs {
            let epoch = pr.epoch;
            let order = if joint {
                stream.joint_order(epoch, seed)
            } else {
                stream.epoch_order(round, epoch, seed)
            };
            for chunk in order.chunks(c.train.batch_size).skip(pr.chunk) {
                let position = Position {
                    task: round,
                    num_tasks: n_tasks,
                    epoch,
                    epochs: c.train.epochs,
                    step_in_task: pr.step_in_task,
                    steps_per_task,
                    global_step: pr.global_step,
                };
                let mut controls = Controls {
                    lr: c.optimizer.lr,
                    reg_scale: 1.0,
                    replay_ratio: None,
                    replay_delta: 0.0,
                };
                for s in p.schedulers.iter_mut() {
                    s.controls(&position, &mut controls);
                }
                controls.lr *= pr.adjust.0;
                controls.reg_scale *= pr.adjust.1;
                controls.replay_delta += pr.adjust.2;
                let bcx = BatchContext {
                    position: &position,
                    controls: &controls,
                    stream,
                    device: &ad,
                    seed,
                };
                let mut batch = stream.batch(chunk, Part::Train, round, &ad);
                for f in p.forgetting.iter_mut() {
                    let name = f.name().to_string();
                    batch = f
                        .prepare_batch(batch, &bcx)
                        .map_err(|e| strategy_err(&name, e))?;
                }
                // Burn's RNG (dropout) is reseeded from the position: resumable and exact.
                let rng_seed = rng::derive_seed(seed, "burn", round as u64, pr.global_step as u64);
                ad.seed(rng_seed);
                let loss_fn = TrainLoss {
                    forgetting: &p.forgetting,
                    cx: &bcx,
                };
                let rows = batch.len();
                let outcome = Next::new(&mut p.memory)
                    .run(StepRequest {
                        model: &model,
                        batch: batch.clone(),
                        loss: &loss_fn,
                        loss_scale: 1.0,
                        compute_dtype: None,
                        rng_seed,
                    })
                    .map_err(|e| match e {
                        Error::Strategy { strategy, message } => Error::Strategy {
                            strategy,
                            message: format!(
                                "{message} (task {round}, epoch {epoch}, step {} of the task)",
                                pr.step_in_task
                            ),
                        },
                        other => other,
                    })?;
                meter.sample(&inner);
                let mut applied = None;
                if outcome.skipped {
                    pr.counters.skipped_steps += 1;
                } else {
                    let mut grads = outcome.grads;
                    if let Some(max) = c.train.clip_norm {
                        grads = clip_global_norm(&model, grads, max).0;
                    }
                    applied = Some(model.flat_grads(&grads));
                    model = optim.step(controls.lr, model, grads);
                    for f in p.forgetting.iter_mut() {
                        let name = f.name().to_string();
                        model = f
                            .after_update(model, &bcx)
                            .map_err(|e| strategy_err(&name, e))?;
                    }
                }
                let scx = StepContext {
                    position: &position,
                    batch: &batch,
                    sample_losses: outcome.sample_losses.as_deref(),
                    loss: outcome.loss,
                    model: &model,
                    grads: applied.as_deref(),
                };
                for f in p.forgetting.iter_mut() {
                    let name = f.name().to_string();
                    f.after_step(&scx).map_err(|e| strategy_err(&name, e))?;
                }
                if c.train.on_leak != crate::config::OnLeak::Off
                    && let Some(bytes) = memory::device_bytes(&inner)
                    && let Some(summary) = leaks.observe(pr.step_in_task, bytes)
                {
                    if c.train.on_leak == crate::config::OnLeak::Stop {
                        bar.finish_and_clear();
                        return Err(Error::Other(format!(
                            "leak alarm (on_leak = \"stop\") at task {round}: {summary}"
                        )));
                    }
                    eprintln!("warning: leak alarm at task {round}: {summary}");
                    pr.events.push(Event {
                        task: round,
                        kind: "leak".into(),
                        message: summary,
                    });
                }
                pr.last_lr = controls.lr;
                pr.counters.steps += 1;
                pr.counters.samples += rows;
                let loss = f64::from(outcome.loss);
                pr.epoch_loss = (pr.epoch_loss.0 + loss, pr.epoch_loss.1 + 1);
                pr.window = (pr.window.0 + loss, pr.window.1 + 1, pr.window.2 + rows);
                if pr.window.1 == c.train.log_every.max(1) {
                    pr.flush_window(pr.step_in_task, pr.global_step, controls.lr);
                }
                pr.step_in_task += 1;
                pr.global_step += 1;
                pr.chunk += 1;
                bar.inc(1);
                if pr.step_in_task.is_multiple_of(20) {
                    bar.set_message(format!("loss {:.4}", outcome.loss));
                }
                checkpoint::failpoint(&format!("step-{}", pr.global_step));
                let interrupted = INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
                let periodic = c
                    .train
                    .checkpoint_every
                    .is_some_and(|k| k > 0 && pr.global_step.is_multiple_of(k));
                if interrupted || periodic {
                    let train_s = tt.elapsed().as_secs_f64();
                    pr.timings.train_s += train_s;
                    tt = Instant::now();
                    save(p, &model, &optim, pr)?;
                    if interrupted {
                        bar.finish_and_clear();
                        return Err(Error::Interrupted(format!(
                            "stopped {} at task {round}, step {} after writing a checkpoint",
                            opts.out.display(),
                            pr.step_in_task
                        )));
                    }
                }
            }
            if pr.window.1 > 0 {
                pr.flush_window(pr.step_in_task - 1, pr.global_step - 1, pr.last_lr);
            }
            pr.last_epoch_loss = pr.epoch_loss.0 / pr.epoch_loss.1.max(1) as f64;
            pr.epoch_loss = (0.0, 0);
            pr.epoch += 1;
            pr.chunk = 0;
        }
        let train_s = tt.elapsed().as_secs_f64();
        pr.timings.train_s += train_s;
        pr.timings.per_task_train_s.push(train_s);
        meter.finish(&inner, &mut pr.task_train);
        pr.memory
            .per_task_train_peak_bytes
            .push(pr.task_train.peak_bytes);
        pr.memory.train.peak_bytes = pr.memory.train.peak_bytes.max(pr.task_train.peak_bytes);
        pr.memory.train.end_bytes = pr.task_train.end_bytes;
        pr.counters.final_loss.push(pr.last_epoch_loss);
        bar.finish_and_clear();

        let ta = Instant::now();
        let meter = PhaseMeter::start();
        for f in p.forgetting.iter_mut() {
            let name = f.name().to_string();
            model = f
                .task_end_weights(model, &info)
                .map_err(|e| strategy_err(&name, e))?;
        }
        {
            let mut tcx = TaskContext {
                model: &mut model,
                device: &ad,
                task: &info,
                stream,
                seed,
                final_train_loss: pr.last_epoch_loss,
            };
            for f in p.forgetting.iter_mut() {
                let name = f.name().to_string();
                f.after_task(&mut tcx).map_err(|e| strategy_err(&name, e))?;
            }
        }
        meter.finish(&inner, &mut pr.memory.after_task);
        pr.timings.after_task_s += ta.elapsed().as_secs_f64();

        // Evaluate: every task, or the diagonal only when a scheduler's cadence says so.
        let te = Instant::now();
        let meter = PhaseMeter::start();
        let all = p
            .schedulers
            .iter()
            .filter_map(|s| s.evaluate_all(round, rounds))
            .all(|b| b)
            || round + 1 == rounds;
        let valid = model.valid();
        let mut eval_samples = 0;
        let row: Vec<Option<f64>> = (0..n_tasks)
            .map(|j| {
                (joint || all || j == round).then(|| {
                    eval_samples += stream.eval_rows(j).0.len();
                    evaluate_task(&valid, stream, j, round, eval_bs, &inner)
                })
            })
            .collect();
        drop(valid);
        pr.eval_samples += eval_samples;
        meter.finish(&inner, &mut pr.memory.eval);
        pr.timings.eval_s += te.elapsed().as_secs_f64();
        if !joint {
            check_learned(
                round,
                stream.tasks[round].classes.len(),
                &row,
                &mut pr.events,
            );
        }
        pr.matrix.push(row);
        let mut rollback = None;
        for s in p.schedulers.iter_mut() {
            if let action @ AnomalyAction::Rollback { .. } = s.after_evaluation(round, &pr.matrix) {
                rollback = rollback.or(Some((s.name().to_string(), action)));
            }
        }
        if let Some((
            by,
            AnomalyAction::Rollback {
                reason,
                reg_factor,
                replay_step,
                lr_factor,
                max_retries,
            },
        )) = rollback
        {
            match task_start {
                Some(ck) if pr.retries < max_retries => {
                    let mut events = pr.events.clone();
                    let retries = pr.retries + 1;
                    let adjust = (
                        pr.adjust.0 * lr_factor,
                        pr.adjust.1 * reg_factor,
                        pr.adjust.2 + replay_step,
                    );
                    events.push(Event {
                        task: round,
                        kind: "rollback".into(),
                        message: format!(
                            "{by}: {reason}; restored the start of task {round} and retrying (retry {retries} of {max_retries}) with learning rate ×{:.3}, regularisation ×{:.3}, replay ratio +{:.2}",
                            adjust.0, adjust.1, adjust.2
                        ),
                    });
                    let model0 = p.build_model(&ad)?;
                    let optim0 = build_optimizer(&p.cfg);
                    let (m, o, mut restored) = restore(
                        Strategies {
                            forgetting: &mut p.forgetting,
                            memory: &mut p.memory,
                            schedulers: &mut p.schedulers,
                        },
                        model0,
                        optim0,
                        ck,
                        &ad,
                        &opts.out,
                    )?;
                    model = m;
                    optim = o;
                    restored.events = events;
                    restored.retries = retries;
                    restored.adjust = adjust;
                    restored.timings = pr.timings.clone();
                    restored.counters.steps = pr.counters.steps;
                    restored.counters.samples = pr.counters.samples;
                    *pr = restored;
                    continue;
                }
                _ => pr.events.push(Event {
                    task: round,
                    kind: "anomaly".into(),
                    message: format!("{by}: {reason}; retries exhausted, continuing"),
                }),
            }
        }
        pr.retries = 0;
        pr.round += 1;
        pr.epoch = 0;
        pr.chunk = 0;
        pr.step_in_task = 0;
        pr.before_task_done = false;
        save(p, &model, &optim, pr)?;
    }

    write_atomic(&opts.out.join("steps.csv"), steps_csv(&pr.logs).as_bytes())?;
    let report = build_report(
        p,
        pr,
        &inner,
        model.numel() as u64,
        earlier_s + t0.elapsed().as_secs_f64() + setup_s,
    );
    report.write(&opts.out)?;
    Ok(report)
}

/// The report of a run at `pr`: the matrix and metrics so far, the memory and time figures
/// (`total_s` seconds of wall time over every process of the run), `parameters` of the model.
fn build_report(
    p: &Prepared,
    pr: &Progress,
    inner: &Device,
    parameters: u64,
    total_s: f64,
) -> Report {
    let c = &p.cfg.config;
    let stream = &p.stream;
    let m = metrics::compute(&pr.matrix, &pr.baseline);
    let mut mem = pr.memory.clone();
    mem.peak_bytes = mem
        .train
        .peak_bytes
        .max(mem.eval.peak_bytes)
        .max(mem.after_task.peak_bytes);
    mem.end_bytes = memory::device_bytes(inner).unwrap_or(0);
    mem.parameters = parameters;
    mem.strategies = p
        .memory
        .iter()
        .filter_map(|s| Some((s.name().to_string(), s.report()?)))
        .collect();
    let mut timings = pr.timings.clone();
    timings.setup_s += p.setup_s;
    timings.total_s = total_s;
    Report {
        schema_version: SCHEMA_VERSION,
        versions: Versions::current(),
        status: super::report::RunStatus::Finished,
        failure: None,
        seed: c.run.seed,
        device: c.run.device.clone(),
        config: serde_json::to_value(c).unwrap_or_default(),
        scenario: serde_json::to_value(stream.scenario)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        joint: c.train.joint,
        tasks: stream
            .tasks
            .iter()
            .map(|t| TaskSummary {
                index: t.index,
                classes: t.classes.clone(),
                train_samples: t.train.len(),
                eval_samples: stream.eval_rows(t.index).0.len(),
            })
            .collect(),
        accuracy_matrix: pr.matrix.clone(),
        random_init_accuracy: pr.baseline.clone(),
        metrics: m,
        metric_cells: super::report::metric_cells(&pr.matrix),
        throughput: Throughput {
            train_samples_per_s: pr.counters.samples as f64 / timings.train_s.max(1e-9),
            eval_samples_per_s: pr.eval_samples as f64 / timings.eval_s.max(1e-9),
        },
        training: pr.counters.clone(),
        events: pr.events.clone(),
        memory: mem,
        timings,
        machine_dependent_keys: MACHINE_DEPENDENT_KEYS
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

/// The effective config a run wrote into `out` (`config.toml`), attributed to the file it came
/// from (`run.json`) so that relative paths in it resolve as they did.
///
/// # Errors
/// [`Error::Checkpoint`] when `out` holds no run; config errors as [`LoadedConfig::from_source`].
pub fn run_config(out: &Path) -> Result<LoadedConfig> {
    let cfg_path = out.join("config.toml");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::Checkpoint {
        path: out.to_path_buf(),
        message: format!("no run here ({}: {e})", cfg_path.display()),
    })?;
    let meta = super::manifest::RunManifest::read(out);
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
///
/// # Errors
/// As [`find_checkpoint`], [`prepare`], and [`Error::Checkpoint`] for a model that does not
/// match the run's config.
pub fn load_checkpoint_model(
    path: &Path,
    registry: &Registry,
    device: Option<&str>,
) -> Result<(Prepared, Model, Progress)> {
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
    Ok((p, model, ck.progress))
}

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

/// Continues the run in `out` from its newest valid checkpoint (or from the start when it has
/// none): reloads `out/config.toml`, rebuilds everything and calls [`run_from`].
///
/// # Errors
/// [`Error::Checkpoint`] when `out` holds no run; otherwise as [`prepare`] and [`run`].
pub fn resume(
    out: &Path,
    registry: &Registry,
    progress: bool,
    device: Option<&str>,
) -> Result<Report> {
    let registry = with_recorded_plugins(out, registry)?;
    let mut p = prepare(on_device(run_config(out)?, device)?, &registry)?;
    let latest = usable_checkpoint(&mut p, out)?;
    match &latest {
        Some((path, ck))
            if ck.progress.round >= p.stream.len()
                || (p.cfg.config.train.joint && ck.progress.round >= 1) =>
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
            ck.progress.round,
            ck.progress.step_in_task
        ),
        None => eprintln!(
            "engram: no checkpoint yet; starting {} from the beginning",
            out.display()
        ),
    }
    run_from(
        &mut p,
        &RunOptions {
            out: out.to_path_buf(),
            progress,
        },
        latest,
    )
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
    let recorded = super::manifest::RunManifest::read(out).map_or_else(Vec::new, |m| m.plugins);
    for info in recorded {
        // The same library given again (`--plugin`, perhaps from another path) is enough.
        if registry.plugins().iter().any(|p| p.sha256 == info.sha256) {
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

fn progress_bar(
    show: bool,
    len: u64,
    round: usize,
    rounds: usize,
    joint: bool,
) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let label = if joint {
        "joint".to_string()
    } else {
        format!("task {}/{}", round + 1, rounds)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>10} [{bar:30}] {pos}/{len} steps {per_sec} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(label);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::mlp::{ActivationKind, build_mlp};
    use burn::tensor::TensorData;

    #[test]
    fn global_norm_clipping_scales_all_gradients_together() {
        let ad = Device::flex().autodiff();
        let mut r = rng::stream(0, "init", 0, 0);
        let m = build_mlp(3, &[2], 2, ActivationKind::Relu, 0.0, &mut r, &ad);
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, -2.0, 3.0], [1, 3]), &ad);
        let out = m.forward(Activation::Flat(x), &ForwardCtx::default());
        let grads = GradientsParams::from_grads(out.powf_scalar(2.0).sum().backward(), &m);
        let norm = global_grad_norm(&m, &grads);
        let by_hand: f64 = m
            .flat_grads(&grads)
            .iter()
            .flat_map(|(_, g)| g.clone().into_data().try_to_vec::<f32>().unwrap())
            .map(|v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        assert!((norm - by_hand).abs() < 1e-5 * by_hand.max(1.0));
        let (clipped, before) = clip_global_norm(&m, grads, norm / 4.0);
        assert!((before - norm).abs() < 1e-9);
        assert!((global_grad_norm(&m, &clipped) - norm / 4.0).abs() < 1e-4 * norm);
    }
}
