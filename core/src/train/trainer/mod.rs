//! The continual trainer: the loop of the crate docs, calling every strategy hook.
//!
//! `prepare.rs` checks the config and builds every component; this file holds the loop (tasks,
//! epochs, steps, evaluation rows, the report); `step.rs` the step's loss and clipping;
//! `evaluate.rs` the accuracy-matrix cells; `resume.rs` checkpoints and resuming; `rundir.rs`
//! what `eval`/`export` read of a run's directory; `export.rs` the safetensors export.

mod evaluate;
mod export;
mod prepare;
mod resume;
mod rundir;
mod step;

pub use evaluate::*;
pub use export::*;
pub use prepare::*;
pub use resume::*;
pub use rundir::*;
pub use step::*;

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
        crate::train::manifest::RunManifest::write(&opts.out, &p.cfg, &p.plugins)?;
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
        None => {
            let mut pr = Progress {
                data_sha256: p.data_sha256.clone(),
                ..Progress::default()
            };
            let model = match load_init(&p.cfg, model)? {
                (m, Some(r)) => {
                    pr.init = Some(r);
                    m
                }
                (m, None) => m,
            };
            (model, optim, pr)
        }
    };
    let parameters = model.numel() as u64;
    // Plugin faults are turned into errors here already, so that they are recorded too.
    let result =
        crate::plugin::catch_faults(|| train_loop(p, opts, model, optim, &mut pr, &inner, &ad, t0))
            .map_err(|e| match e {
                // The strategies that shape the update say which of their keys to change.
                Error::Diverged {
                    strategy,
                    value,
                    at,
                    mut hints,
                } => {
                    hints.extend(p.forgetting.iter().filter_map(|s| s.divergence_hint()));
                    Error::Diverged {
                        strategy,
                        value,
                        at,
                        hints,
                    }
                }
                e => e,
            });
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
    report.task_il_metrics = None;
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
        let scores: Vec<TaskScore> = (0..n_tasks)
            .map(|j| {
                pr.eval_samples += stream.eval_rows(j).0.len();
                score_task(&valid, stream, j, 0, eval_bs, &inner)
            })
            .collect();
        pr.baseline = scores.iter().map(|s| s.class_il).collect();
        if stream.scenario == Scenario::ClassIncremental {
            pr.task_il_baseline = scores.iter().map(|s| s.task_il).collect();
        }
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
            each_forgetting(&mut p.forgetting, (), |f, ()| f.before_task(&mut tcx))?;
            pr.before_task_done = true;
            pr.task_train = PhaseMemory::default();
        }

        leaks.start_task(round);
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
                batch = each_forgetting(&mut p.forgetting, batch, |f, b| f.prepare_batch(b, &bcx))?;
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
                        Error::Diverged {
                            strategy,
                            value,
                            hints,
                            ..
                        } => Error::Diverged {
                            strategy,
                            value,
                            at: format!(
                                " at task {round}, epoch {epoch}, step {} of the task",
                                pr.step_in_task
                            ),
                            hints,
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
                    grads = each_forgetting(&mut p.forgetting, grads, |f, g| {
                        f.adjust_gradients(&model, g, &bcx)
                    })?;
                    applied = Some(model.flat_grads(&grads));
                    model = optim.step(controls.lr, model, grads);
                    model =
                        each_forgetting(&mut p.forgetting, model, |f, m| f.after_update(m, &bcx))?;
                }
                let scx = StepContext {
                    position: &position,
                    batch: &batch,
                    sample_losses: outcome.sample_losses.as_deref(),
                    loss: outcome.loss,
                    model: &model,
                    grads: applied.as_deref(),
                };
                each_forgetting(&mut p.forgetting, (), |f, ()| f.after_step(&scx))?;
                if c.train.on_leak != crate::config::OnLeak::Off
                    && let Some(bytes) = memory::device_bytes(&inner)
                    && let Some(summary) = leaks.observe(pr.step_in_task, bytes)
                {
                    // Recorded either way: a stopped run's report.json has the event too.
                    pr.events.push(Event {
                        task: round,
                        kind: "leak".into(),
                        message: summary.clone(),
                    });
                    if c.train.on_leak == crate::config::OnLeak::Stop {
                        bar.finish_and_clear();
                        return Err(Error::Other(format!(
                            "leak alarm (on_leak = \"stop\") at task {round}: {summary}"
                        )));
                    }
                    eprintln!("warning: leak alarm at task {round}: {summary}");
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
        model = each_forgetting(&mut p.forgetting, model, |f, m| {
            f.task_end_weights(m, &info)
        })?;
        {
            let mut tcx = TaskContext {
                model: &mut model,
                device: &ad,
                task: &info,
                stream,
                seed,
                final_train_loss: pr.last_epoch_loss,
            };
            each_forgetting(&mut p.forgetting, (), |f, ()| f.after_task(&mut tcx))?;
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
        let scores: Vec<Option<TaskScore>> = (0..n_tasks)
            .map(|j| {
                (joint || all || j == round).then(|| {
                    eval_samples += stream.eval_rows(j).0.len();
                    score_task(&valid, stream, j, round, eval_bs, &inner)
                })
            })
            .collect();
        drop(valid);
        let row: Vec<Option<f64>> = scores.iter().map(|s| s.map(|s| s.class_il)).collect();
        if stream.scenario == Scenario::ClassIncremental {
            pr.task_il_matrix
                .push(scores.iter().map(|s| s.map(|s| s.task_il)).collect());
        }
        pr.eval_samples += eval_samples;
        meter.finish(&inner, &mut pr.memory.eval);
        pr.timings.eval_s += te.elapsed().as_secs_f64();
        if !joint {
            check_learned(
                round,
                stream.tasks[round].classes.len(),
                &row,
                (stream.scenario == Scenario::ClassIncremental)
                    .then(|| pr.task_il_matrix.last().map(Vec::as_slice))
                    .flatten(),
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

/// [`Report::retention_note`]: the old tasks (all but the last row's) with an `at-chance` event,
/// when retention is defined.
fn retention_note(pr: &Progress, retention: Option<f64>) -> Option<String> {
    let last = pr.matrix.len().checked_sub(1)?;
    retention?;
    let mut low: Vec<usize> = pr
        .events
        .iter()
        .filter(|e| e.kind == "at-chance" && e.task < last)
        .map(|e| e.task)
        .collect();
    low.sort_unstable();
    low.dedup();
    if low.is_empty() {
        return None;
    }
    let list = low
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "task(s) {list} scored no better than chance right after training on them: retention \
         divides by those diagonals, so it is not a share kept (it can read above 1); \
         read BWT, forgetting and the task-IL view instead"
    ))
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
    let m_retention = m.retention;
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
                class_names: t
                    .classes
                    .iter()
                    .map(|&c| stream.dataset.class_names[c].clone())
                    .collect(),
                train_samples: t.train.len(),
                eval_samples: stream.eval_rows(t.index).0.len(),
            })
            .collect(),
        accuracy_matrix: pr.matrix.clone(),
        initial_accuracy: pr.baseline.clone(),
        random_init_accuracy: pr.init.is_none().then(|| pr.baseline.clone()),
        init: pr.init.clone(),
        metrics: m,
        task_il_accuracy_matrix: (stream.scenario == Scenario::ClassIncremental)
            .then(|| pr.task_il_matrix.clone()),
        task_il_metrics: (stream.scenario == Scenario::ClassIncremental)
            .then(|| metrics::compute(&pr.task_il_matrix, &pr.task_il_baseline)),
        retention_note: retention_note(pr, m_retention),
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
