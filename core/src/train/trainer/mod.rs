//! The continual trainer: the loop of the crate docs, calling every strategy hook.
//!
//! A run is a [`state::RunState`] going through a few named steps, one file each:
//! `task.rs` begins a task (its `before_task` hooks), trains its epochs and ends it (its
//! `after_task` hooks); `step.rs` is one training step (and its loss and clipping);
//! `evaluate.rs` one row of the accuracy matrix (and its cells); `rollback.rs` what an anomaly
//! scheduler's rollback restores; `divergence.rs` what a diverging step's error says and the
//! restart after it (`[train] on_divergence`). `state.rs` holds the run's state and the loop over those
//! steps; `record.rs` the report of a finished or failed run.
//!
//! Around the loop: `prepare.rs` checks the config and builds every component; `resume.rs`
//! checkpoints, restoring and resuming; `rundir.rs` what `eval`/`export` read of a run's
//! directory; `export.rs` the safetensors export. This file starts a run.

mod divergence;
mod evaluate;
mod export;
mod objective;
mod prepare;
mod publish;
mod record;
mod resume;
mod rollback;
mod rundir;
mod state;
mod step;
mod task;

pub use evaluate::*;
pub use export::*;
pub use objective::*;
pub use prepare::*;
pub use resume::*;
pub use rundir::*;
pub use step::*;

use super::checkpoint::{self, Checkpoint, Progress};
use super::memory::{self, PhaseMemory, PhaseMeter};
use super::metrics;
use super::report::{
    Event, EventKind, MACHINE_DEPENDENT_KEYS, Report, SCHEMA_VERSION, TaskSummary, Throughput,
    Versions, steps_csv,
};
use crate::config::{LoadedConfig, OptimizerKind, Scenario};
use crate::data::stream::{Batch, Part, SampleRef, Stream};
use crate::error::{Error, Result};
use crate::fsutil::write_atomic;
use crate::model::{ForwardCtx, Model};
use crate::registry::{BuildContext, Registry};
use crate::rng;
use crate::strategy::{
    AnomalyAction, BatchContext, Controls, ForgettingStrategy, LossFn, MemoryStrategy, Next,
    Position, Scheduler, StepContext, StepRequest, TaskContext, TaskInfo,
};
use burn::module::Module;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, decay::WeightDecayConfig,
};
use burn::tensor::{Device, Tensor, activation};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `e` as an error of strategy `name`; an error that already names that strategy is kept as
/// it is (the name once, not twice), and so is a positioned [`Error::Config`]: a hook that
/// finds its entry's keys cannot apply to the run (replay's `classifier = "ncm"` on a head it
/// cannot wrap) reports bad input at the key's line, exit 2.
fn strategy_err(name: &str, e: Error) -> Error {
    match e {
        e @ Error::Config { .. } => e,
        e @ Error::Strategy { .. } if matches!(&e, Error::Strategy { strategy, .. } if strategy == name) => {
            e
        }
        e => Error::Strategy {
            strategy: name.to_string(),
            message: e.to_string(),
        },
    }
}

/// Runs one hook of every forgetting strategy, in config order, threading `acc` through (the
/// batch, the model, or nothing); an error is the strategy's, named once ([`strategy_err`]).
/// The one place the loop calls a forgetting strategy's hooks (a plugin's are guarded inside
/// [`crate::plugin::Guarded`]).
fn each_forgetting<T>(
    list: &mut [Box<dyn ForgettingStrategy>],
    acc: T,
    mut hook: impl FnMut(&mut dyn ForgettingStrategy, T) -> Result<T>,
) -> Result<T> {
    list.iter_mut().try_fold(acc, |acc, s| {
        let r = hook(s.as_mut(), acc);
        r.map_err(|e| strategy_err(s.name(), e))
    })
}

/// Set by the binary's Ctrl-C handler; the trainer checkpoints and stops at the next step.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
    let start = if resume.is_some() {
        Start::Resume
    } else {
        Start::New
    };
    crate::plugin::catch_faults(|| run_inner(p, opts, start, resume))
}

/// Where a run starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// A new run: `run.json` and `config.toml` are written into the output directory.
    New,
    /// A run directory's own run, continued from its checkpoint or, without one, from the
    /// beginning: the directory's `run.json` and `config.toml` are kept as they are (written
    /// only when it has no `run.json`), so that relative paths go on resolving against the
    /// original config's directory.
    Resume,
}

fn run_inner(
    p: &mut Prepared,
    opts: &RunOptions,
    start: Start,
    checkpoint: Option<(PathBuf, Checkpoint)>,
) -> Result<Report> {
    let t0 = Instant::now();
    std::fs::create_dir_all(&opts.out).map_err(|e| Error::io(&opts.out, e))?;
    let own_manifest =
        start == Start::Resume && crate::train::manifest::RunManifest::read(&opts.out).is_some();
    if checkpoint.is_none() && !own_manifest {
        crate::train::manifest::RunManifest::write(&opts.out, &p.cfg, &p.plugins)?;
    }
    let inner = p.device.clone();
    let ad = inner.clone().autodiff();
    let ad = if p.memory.iter().any(|m| m.op_level_checkpointing()) {
        ad.gradient_checkpointing()
    } else {
        ad
    };
    ad.seed(rng::derive_seed(p.cfg.config.run.seed, "burn-init", 0, 0));
    let _flushing = p.cfg.config.run.flush_denormals.then(|| {
        if !crate::threads::CAN_FLUSH_DENORMALS {
            eprintln!(
                "warning: [run] flush_denormals: engram cannot flush denormals on {} CPUs; the run trains without it",
                std::env::consts::ARCH
            );
        }
        crate::threads::flush_denormals()
    });
    let (model, optim, mut pr) = match checkpoint {
        Some((path, ck)) => p.restore(ck, &ad, &path)?,
        None => fresh_start(p, &ad)?,
    };
    let size = record::ModelSize::of(&model);
    // Plugin faults are turned into errors here already, so that they are recorded too.
    let result = crate::plugin::catch_faults(|| {
        state::RunState::new(p, opts, &mut pr, (model, optim), &ad, t0).run()
    });
    if let Err(e) = &result
        && !matches!(e, Error::Interrupted(_))
    {
        // A failed or diverged run keeps its record: the steps so far, where it stopped and
        // why, and the matrix so far. Best effort: the run's own error is what is returned.
        let _ = record::write_failure(p, opts, &mut pr, e, size, t0, &inner);
    }
    result
}

/// The model, optimiser and progress a new run starts with: the configured model on `ad`
/// (`[model] init` loaded into it when set), a fresh optimiser, and the data's fingerprint.
fn fresh_start(p: &Prepared, ad: &Device) -> Result<(Model, ModuleOptimizer, Progress)> {
    let (model, init) = p.build_initial_model(ad)?;
    let optim = build_optimizer(&p.cfg);
    let pr = Progress {
        origin: checkpoint::Origin {
            init,
            data_sha256: p.data_sha256.clone(),
        },
        ..Progress::default()
    };
    Ok((model, optim, pr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Activation;
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

    /// `[run] flush_denormals` is off by default and then absent from the config's JSON, so that a
    /// checkpoint written before the key existed keeps its identity; on, it is part of it.
    #[test]
    fn flush_denormals_is_off_by_default_and_only_on_in_the_identity() {
        use crate::config::tests::{MIN, load};
        let off = load(MIN).unwrap().config;
        assert!(!off.run.flush_denormals);
        let json = serde_json::to_string(&off).unwrap();
        assert!(!json.contains("flush_denormals"), "{json}");
        let on = load(&format!("[run]\nflush_denormals = true\n{MIN}"))
            .unwrap()
            .config;
        assert!(on.run.flush_denormals);
        assert!(
            serde_json::to_string(&on)
                .unwrap()
                .contains("\"flush_denormals\":true")
        );
        assert_ne!(config_identity(&on), config_identity(&off));
        let explicit_off = load(&format!("[run]\nflush_denormals = false\n{MIN}"))
            .unwrap()
            .config;
        assert_eq!(config_identity(&explicit_off), config_identity(&off));
    }
}
