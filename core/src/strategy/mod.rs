//! The three strategy traits and the contexts the trainer hands them.
//!
//! The continual loop (see the crate docs) calls, for each task `t`:
//!
//! ```text
//! Scheduler::before_task, ForgettingStrategy::before_task
//! for each epoch, for each batch:
//!     Scheduler::controls              -> learning rate, regularisation scale, replay ratio
//!     ForgettingStrategy::prepare_batch -> e.g. replay mixes in stored samples
//!     MemoryStrategy chain::step        -> loss (task loss + Σ penalty + Σ logit_penalty), grads
//!     trainer: clip
//!     ForgettingStrategy::adjust_gradients -> e.g. A-GEM's projection on a memory gradient
//!     trainer: optimiser step
//!     ForgettingStrategy::after_update  -> e.g. EWC's proximal pull towards old solutions
//!     ForgettingStrategy::after_step    -> e.g. replay priorities from per-sample losses
//! ForgettingStrategy::after_task        -> e.g. EWC's Fisher information, buffer update
//! evaluate every task                    -> row t of the accuracy matrix
//! Scheduler::after_evaluation           -> anomaly policy
//! ```
//!
//! Every strategy can save and restore its state ([`StrategyState`]) for checkpoints.

pub mod standard;

/// engram-core's own strategy: `standard`, the plain step (the rest are the strategies crate's).
pub const BUILTINS: &[crate::component::Registration] = &[standard::REGISTRATION];

use crate::data::stream::{Batch, Part, SampleRef, Stream};
use crate::error::Result;
use crate::model::{Activation, Model};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the factory knows about the run when it builds a strategy.
#[derive(Clone, Debug, Default)]
pub struct BuildContext {
    /// Number of tasks in the stream.
    pub num_tasks: usize,
    /// Number of classes (logit width).
    pub num_classes: usize,
    /// Training batch size.
    pub batch_size: usize,
    /// The run seed.
    pub seed: u64,
}

/// A tensor in a strategy's saved state: shape and row-major `f32` values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateTensor {
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub values: Vec<f32>,
}

impl StateTensor {
    /// Copies a tensor's values (reads it back from the device).
    pub fn from_tensor<const D: usize>(t: &Tensor<D>) -> Self {
        Self {
            shape: t.dims().to_vec(),
            values: t
                .clone()
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .unwrap_or_default(),
        }
    }

    /// A tensor on `device` with these values.
    pub fn to_tensor<const D: usize>(&self, device: &Device) -> Tensor<D> {
        Tensor::from_data(
            burn::tensor::TensorData::new(self.values.clone(), self.shape.clone()),
            device,
        )
    }
}

/// What a strategy saves in a checkpoint: JSON metadata plus named tensors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StrategyState {
    /// Scalars, counters, sample lists: anything serde can write.
    pub meta: serde_json::Value,
    /// Named tensors (Fisher diagonals, anchors, …).
    pub tensors: BTreeMap<String, StateTensor>,
}

/// What the trainer knows about the task at hand.
#[derive(Clone, Debug)]
pub struct TaskInfo {
    /// Position in the stream, `0..num_tasks`.
    pub index: usize,
    /// Number of tasks in the stream.
    pub num_tasks: usize,
    /// The task's classes.
    pub classes: Vec<usize>,
    /// Training samples of the task.
    pub train_samples: usize,
    /// Whether this is the joint (all tasks at once) pseudo-task.
    pub joint: bool,
}

/// Per-step knobs set by the schedulers, read by the trainer and the forgetting strategies.
#[derive(Clone, Debug, PartialEq)]
pub struct Controls {
    /// Learning rate for this step.
    pub lr: f64,
    /// Multiplier on every regularisation strength (EWC's λ, …). 1 = as configured.
    pub reg_scale: f64,
    /// Replay ratio override (memory samples per new sample); `None` = as configured.
    pub replay_ratio: Option<f64>,
    /// Added to the replay ratio in force (the anomaly handler raises it).
    pub replay_delta: f64,
}

/// Where the run is, for schedulers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Position {
    /// Task index.
    pub task: usize,
    /// Number of tasks.
    pub num_tasks: usize,
    /// Epoch within the task, `0..epochs`.
    pub epoch: usize,
    /// Epochs per task.
    pub epochs: usize,
    /// Step within the task (over all its epochs).
    pub step_in_task: usize,
    /// Steps the task will take (over all its epochs).
    pub steps_per_task: usize,
    /// Steps since the start of the run.
    pub global_step: usize,
}

/// Access to the stream for strategies: the model, the device, the task and its data.
pub struct TaskContext<'a> {
    /// The model (mutable: a mixture-of-experts strategy adds experts here).
    pub model: &'a mut Model,
    /// The training device (autodiff enabled).
    pub device: &'a Device,
    /// The task.
    pub task: &'a TaskInfo,
    /// The stream (tasks, gather functions).
    pub stream: &'a Stream,
    /// The run seed (derive strategy streams from it with [`crate::rng::stream`]).
    pub seed: u64,
    /// Mean training loss of the task's last epoch (0 before training).
    pub final_train_loss: f64,
}

impl TaskContext<'_> {
    /// The task's training samples in stored order.
    pub fn train_refs(&self) -> Vec<SampleRef> {
        let t = self.task.index;
        self.stream.tasks[t]
            .train
            .iter()
            .map(|&i| SampleRef {
                task: t as u16,
                index: i,
            })
            .collect()
    }

    /// Gathers training samples into a batch on the training device.
    pub fn batch(&self, refs: &[SampleRef]) -> Batch {
        self.stream
            .batch(refs, Part::Train, self.task.index, self.device)
    }
}

/// What a forgetting strategy sees for each batch.
pub struct BatchContext<'a> {
    /// Where the run is.
    pub position: &'a Position,
    /// This step's knobs.
    pub controls: &'a Controls,
    /// The stream (to gather stored samples).
    pub stream: &'a Stream,
    /// The training device.
    pub device: &'a Device,
    /// The run seed.
    pub seed: u64,
}

/// What a forgetting strategy sees after each step.
pub struct StepContext<'a> {
    /// Where the run is.
    pub position: &'a Position,
    /// The batch as trained (with any replayed rows).
    pub batch: &'a Batch,
    /// Per-sample cross-entropy `[batch]`, when the memory strategy reports it.
    pub sample_losses: Option<&'a [f32]>,
    /// The step's total loss.
    pub loss: f32,
    /// The model after the optimiser step (and any `after_update`).
    pub model: &'a Model,
    /// The gradients the optimiser applied, flattened per parameter (`[numel]` each, after
    /// unscaling and clipping); `None` for a skipped step (AMP overflow).
    pub grads: Option<&'a [(crate::model::ParamInfo, Tensor<1>)]>,
}

/// A strategy's answer to an evaluation batch ([`ForgettingStrategy::infer`]).
#[derive(Clone, Debug)]
pub struct Inference {
    /// Logits `[batch, classes]`, as `Model::forward` gives them (a strategy masks the classes
    /// of the experts it did not pick with a large negative value, not `-inf`).
    pub logits: Tensor<2>,
    /// The task each input was answered as (the expert picked), `[batch]` task indices; with a
    /// granted task identity every entry is that task.
    pub tasks: Vec<usize>,
}

/// Why a forgetting strategy cannot train a language model ([`ForgettingStrategy::lm_refusal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LmRefusal {
    /// The entry's key the refusal is said at (`type` when the strategy as a whole cannot).
    pub key: &'static str,
    /// Why, in a clause (the trainer names the strategy before it).
    pub reason: String,
}

/// Why a forgetting strategy refuses the run's `[[memory]]` entries
/// ([`ForgettingStrategy::memory_refusal`]): said at the strategy's entry, before the run
/// starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryRefusal {
    /// The entry's key the refusal is said at (`type` when the strategy as a whole cannot).
    pub key: &'static str,
    /// What is wrong, in a sentence.
    pub message: String,
    /// What to change.
    pub hint: String,
}

/// Acts on *what is learned*: mixes in replayed samples, adds loss terms, updates its state
/// after each step and task.
///
/// Every method has a no-op default; a strategy overrides the hooks it needs.
pub trait ForgettingStrategy: Send {
    /// The registered name.
    fn name(&self) -> &str;

    /// Called before training task `cx.task`.
    fn before_task(&mut self, _cx: &mut TaskContext<'_>) -> Result<()> {
        Ok(())
    }

    /// May add rows to (or reweight) the batch before the step.
    fn prepare_batch(&mut self, batch: Batch, _cx: &BatchContext<'_>) -> Result<Batch> {
        Ok(batch)
    }

    /// A loss term added to the task loss, as a tracked scalar `[1]` (`None`: nothing).
    fn penalty(&self, _model: &Model, _cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        None
    }

    /// A loss term on the batch's logits `[batch, classes]` (distillation-type methods:
    /// logit replay, LwF), as a tracked scalar `[1]` (`None`: nothing).
    fn logit_penalty(&self, _logits: &Tensor<2>, _batch: &Batch) -> Option<Tensor<1>> {
        None
    }

    /// May replace the step's gradients before the optimiser applies them (gradient-projection
    /// methods: A-GEM, Chaudhry et al. 2019, eq. 11; GEM; OGD). `grads` are the gradients the
    /// optimiser is about to apply — of the total loss (task loss and every penalty), unscaled
    /// (AMP) and clipped (`clip_norm`) — for the parameters of `model` (the autodiff model before
    /// the step, which a method may run a pass of its own on, e.g. a memory batch's gradient).
    /// Called in config order on every forgetting strategy, each seeing the previous one's
    /// output; not called for a skipped step (AMP overflow). The default returns `grads` as
    /// they are.
    ///
    /// # Errors
    /// A strategy's own failure, as [`crate::Error::Strategy`].
    fn adjust_gradients(
        &mut self,
        _model: &Model,
        grads: GradientsParams,
        _cx: &BatchContext<'_>,
    ) -> Result<GradientsParams> {
        Ok(grads)
    }

    /// May change the parameters after the optimiser step (proximal updates, projections).
    /// The default keeps them.
    fn after_update(&mut self, model: Model, _cx: &BatchContext<'_>) -> Result<Model> {
        Ok(model)
    }

    /// Called after each optimiser step.
    fn after_step(&mut self, _cx: &StepContext<'_>) -> Result<()> {
        Ok(())
    }

    /// Re-applies the architecture changes this strategy made to the model (for example the
    /// experts a mixture-of-experts strategy added), from its restored state, to a model freshly
    /// built from the config. Called when a checkpoint is restored (resume, rollback, `eval`,
    /// `export`) after [`ForgettingStrategy::load_state`] and before the checkpoint's weights are
    /// loaded, so that the weights find their parameters. The default keeps the model.
    ///
    /// # Errors
    /// When the state cannot describe a model (a typed [`crate::Error::Strategy`]).
    fn rebuild_model(&self, model: Model, _device: &Device) -> Result<Model> {
        Ok(model)
    }

    /// Answers an evaluation batch in place of `model.forward`: a strategy that keeps several
    /// task experts (per-task adapters) picks one for each input here. `input` is the batch's
    /// input `[batch, …]`, `model` the inference copy (no autodiff graph); `task` is the task
    /// identity the evaluation grants — `Some(t)` in a task-incremental evaluation and for the
    /// task-IL view of a class-incremental one (the strategy then answers with task `t`'s
    /// expert), `None` where the strategy must infer it. Returns `None` to leave the batch to
    /// `model.forward` (the default, and a strategy with nothing kept yet). The first
    /// forgetting strategy (in config order) that answers is used; the trainer scores
    /// [`Inference::tasks`] against the rows' own tasks (the report's task-identification
    /// matrix).
    fn infer(&self, _model: &Model, _input: Activation, _task: Option<usize>) -> Option<Inference> {
        None
    }

    /// Why the checkpoint's model alone is not what this strategy's run answers with, when it
    /// is not: a strategy that keeps experts in its state and answers through
    /// [`ForgettingStrategy::infer`] (per-task adapters) says so here, and `engram export`
    /// refuses to write the model as if it were the run's result. `None` (the default): the
    /// model is the result.
    fn model_is_partial(&self) -> Option<String> {
        None
    }

    /// The weights task `task` ends with: called on every forgetting strategy, in config
    /// order, after the task's last step and before any [`ForgettingStrategy::after_task`];
    /// the model returned is what the `after_task` hooks see, what is evaluated and what the
    /// task-end checkpoint holds, and the next task trains on from it. Weight averaging (the
    /// built-in `ema`) returns its average here. The default keeps the model.
    fn task_end_weights(&mut self, model: Model, _task: &TaskInfo) -> Result<Model> {
        Ok(model)
    }

    /// What the strategy reports at the run's end, for `report.json`'s `forgetting` map
    /// (by name): figures a user reads beside the accuracy matrix (`moe-lora`'s router
    /// choices per task). `None` (the default): nothing.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }

    /// Called after training task `cx.task`, before evaluation.
    fn after_task(&mut self, _cx: &mut TaskContext<'_>) -> Result<()> {
        Ok(())
    }

    /// Why this strategy cannot train a language model (`[train] objective = "lm"`: windows of
    /// text, next-token loss, no classes), or `None` when it can. A strategy that reads class
    /// logits, labels or pooled features (distillation, logit replay, nearest-class-mean,
    /// projections on a class-loss gradient, a Fisher of the class likelihood) cannot: the
    /// default refuses, so that a strategy says it works on windows before a run lets it.
    /// The trainer refuses a refusing strategy before the run starts, at the entry's `key`.
    fn lm_refusal(&self) -> Option<LmRefusal> {
        Some(LmRefusal {
            key: "type",
            reason: "it works on class logits or labels, which next-token training on windows of text does not have".into(),
        })
    }

    /// Why this strategy cannot run beside the config's `[[memory]]` entries (`memory`, in
    /// config order: each its `type` and its own keys), or `None` (the default) when it can.
    /// A strategy that builds on another's work says so here — `o-lora` needs `lora` with
    /// `merge = "task"`, `per-task-lora` with `merge = "none"`, `moe-lora` on the activation
    /// path — so that `engram validate` and the start of `run` refuse the config at the
    /// strategy's entry instead of a task into the run.
    fn memory_refusal(&self, _memory: &[crate::config::StrategyEntry]) -> Option<MemoryRefusal> {
        None
    }

    /// What this strategy owns for the whole run, that no other `[[forgetting]]` entry may own
    /// too, or `None` (the default). The adapter strategies own the structure of `lora`'s
    /// adapters (`moe-lora` grows a pool of experts in them, `per-task-lora` keeps one a task,
    /// `o-lora` merges and orthogonalises them): two of them, or one listed twice, would each
    /// rebuild the same adapters. `engram validate` and the start of `run` refuse the second
    /// owner at its entry.
    fn owns(&self) -> Option<&'static str> {
        None
    }

    /// Advice for a run that diverged (an infinite or NaN loss) while this strategy acted on
    /// it: one sentence naming the keys of this strategy to change, or `None` (the default)
    /// when the strategy cannot have caused it. The trainer adds every strategy's hint to
    /// [`crate::Error::Diverged`], after the general advice (learning rate, `clip_norm`).
    fn divergence_hint(&self) -> Option<String> {
        None
    }

    /// The samples this strategy keeps of past tasks and their size
    /// ([`StoredSamples::of`]), for report.json's `memory.stored`; `None` (the default) for a
    /// strategy that stores no samples.
    fn stored_samples(&self, _stream: &Stream) -> Option<StoredSamples> {
        None
    }

    /// The state to checkpoint.
    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState::default())
    }

    /// Restores a state saved by [`ForgettingStrategy::state`].
    fn load_state(&mut self, _state: StrategyState, _device: &Device) -> Result<()> {
        Ok(())
    }
}

/// What a sample-storing strategy (replay, DER++, GDumb, A-GEM, ER-ACE) keeps, in bytes
/// (report.json's `memory.stored`, one entry per strategy).
///
/// engram's memories hold [`SampleRef`]s into the dataset, not copies; `input_bytes` is what
/// the stored samples' inputs take in the dataset's own type — what a copy of the buffer
/// holds, the figure a deployment that does not keep the stream must budget: `samples ×
/// features × value bytes` (a token sequence of `max_len` ids: `max_len × 4` bytes, an 8-bit
/// 28×28 image: 784). `logit_bytes` are the `f32` logits stored beside the samples (DER++,
/// logit replay: `4 ×` classes per sample), held as they are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredSamples {
    /// Samples stored.
    pub samples: usize,
    /// Bytes one stored sample's input takes: `features × value bytes` (`max_len × 4` for
    /// token ids).
    pub sample_bytes: u64,
    /// `samples × sample_bytes`, bytes.
    pub input_bytes: u64,
    /// Bytes of the `f32` logits stored with the samples (0 when none are).
    pub logit_bytes: u64,
    /// `input_bytes + logit_bytes`, bytes.
    pub total_bytes: u64,
    /// What the inputs are, with their element type: `token ids (uint32)`, `pixel bytes
    /// (uint8)`, `floats (float32)` ([`crate::data::dataset::Values::kind`]).
    pub dtype: String,
}

impl StoredSamples {
    /// `samples` samples of `stream`'s training split with `logits` stored `f32` logits in all.
    pub fn of(stream: &Stream, samples: usize, logits: usize) -> Self {
        let split = &stream.dataset.train;
        let sample_bytes = split.sample_bytes() as u64;
        let input_bytes = samples as u64 * sample_bytes;
        let logit_bytes = 4 * logits as u64;
        Self {
            samples,
            sample_bytes,
            input_bytes,
            logit_bytes,
            total_bytes: input_bytes + logit_bytes,
            dtype: split.values.kind(),
        }
    }
}

/// Where a memory strategy sits in the chain around one training step. The chain runs in this
/// order, outermost first: parameters decide what trains (adapters over a frozen base),
/// accumulation splits the batch, precision casts and scales the loss, execution runs forward
/// and backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemoryLayer {
    /// What trains (outermost): `lora` attaches low-rank adapters and freezes the base when the
    /// model is built ([`MemoryStrategy::adapt_model`]); its step passes the request on.
    Parameters = 0,
    /// Gradient accumulation.
    Accumulation = 1,
    /// Mixed precision and loss scaling.
    Precision = 2,
    /// Runs forward and backward (innermost): `standard`, `checkpoint`.
    Execution = 3,
}

/// The loss of a step: task loss plus every forgetting strategy's penalty.
pub trait LossFn {
    /// Total loss `[1]` and per-sample loss `[batch]` for `logits` `[batch, classes]`: the
    /// model's last activation flattened per sample (`Activation::into_flat`), so that for a
    /// language model (`[train] objective = "lm"`) they are its per-token logits
    /// `[batch, len · vocab]`, which the trainer's loss reads back as `[batch, len, vocab]`.
    fn loss(&self, model: &Model, logits: Tensor<2>, batch: &Batch) -> (Tensor<1>, Tensor<1>);
}

/// One step as it travels down the memory chain.
pub struct StepRequest<'a> {
    /// The model on the autodiff device.
    pub model: &'a Model,
    /// The batch.
    pub batch: Batch,
    /// The loss.
    pub loss: &'a dyn LossFn,
    /// Multiply the loss by this before backward (AMP loss scaling); gradients come back
    /// scaled by it.
    pub loss_scale: f32,
    /// Compute dtype for the forward pass (`None`: the parameters' own, f32).
    pub compute_dtype: Option<burn::tensor::DType>,
    /// The seed Burn's RNG was set to for this step. An executor that runs the forward pass
    /// more than once (checkpointing) reseeds from it per segment so that dropout draws the
    /// same masks each time.
    pub rng_seed: u64,
}

/// What a step did, reported up the chain to the trainer.
pub struct StepOutcome {
    /// Total loss (unscaled).
    pub loss: f32,
    /// Per-sample cross-entropy `[batch]`, when known.
    pub sample_losses: Option<Vec<f32>>,
    /// Gradients of the total loss, unscaled once they leave the precision layer.
    pub grads: GradientsParams,
    /// Whether the optimiser step must be skipped (inf/NaN gradients).
    pub skipped: bool,
    /// The loss scale in force, if a precision strategy scales.
    pub loss_scale: Option<f32>,
}

/// The rest of the memory chain below a strategy.
pub struct Next<'a> {
    chain: &'a mut [Box<dyn MemoryStrategy>],
}

impl<'a> Next<'a> {
    /// The chain `chain`, outermost first.
    pub fn new(chain: &'a mut [Box<dyn MemoryStrategy>]) -> Self {
        Self { chain }
    }

    /// The same rest of the chain, borrowed again, for a strategy that runs it several times
    /// (gradient accumulation).
    pub fn reborrow(&mut self) -> Next<'_> {
        Next {
            chain: &mut *self.chain,
        }
    }

    /// Runs the next strategy of the chain.
    ///
    /// # Errors
    /// [`crate::Error::Strategy`] when the chain has no execution strategy left.
    pub fn run(self, req: StepRequest<'_>) -> Result<StepOutcome> {
        match self.chain.split_first_mut() {
            Some((first, rest)) => first.step(req, Next { chain: rest }),
            None => Err(crate::Error::Strategy {
                strategy: "memory".into(),
                message: "the memory chain has no execution strategy".into(),
            }),
        }
    }
}

/// Acts on *how a step is executed* so that it fits in memory. Strategies compose like
/// middleware around one training step (see [`MemoryLayer`] for the order); the trainer owns
/// clipping and the optimiser step.
pub trait MemoryStrategy: Send {
    /// The registered name.
    fn name(&self) -> &str;
    /// Where in the chain it sits.
    fn layer(&self) -> MemoryLayer;
    /// Runs one step, calling `next` zero or more times (an execution strategy never does).
    fn step(&mut self, req: StepRequest<'_>, next: Next<'_>) -> Result<StepOutcome>;

    /// Changes the model a run trains once it is built (with its `[model] init` loaded) and
    /// before a checkpoint's weights are loaded into it: parameter-efficient fine-tuning
    /// (`lora`) attaches its adapters and freezes the base here, so that the frozen base holds
    /// no gradient and no optimiser state. Called for a fresh run, a resume, a rollback, `eval`
    /// and `export` alike, so that a checkpoint's weights find their parameters. Default: the
    /// model as it is.
    ///
    /// # Errors
    /// A model this strategy cannot adapt (a target that names no parameter), as
    /// [`crate::Error::Strategy`]; the trainer reports it before anything is written.
    fn adapt_model(&self, model: Model) -> Result<Model> {
        Ok(model)
    }

    /// The model task `task` ends with, after the forgetting strategies'
    /// [`ForgettingStrategy::task_end_weights`] and before their `after_task` hooks: `lora`
    /// with `merge = "task"` merges its adapters into the base here and attaches fresh ones.
    /// The model returned must have the parameters [`MemoryStrategy::adapt_model`] gives, so
    /// that a checkpoint taken after it loads into a rebuilt model. Default: the model.
    ///
    /// # Errors
    /// The strategy's own failure, as [`crate::Error::Strategy`].
    fn task_end_model(&mut self, model: Model, _task: &TaskInfo) -> Result<Model> {
        Ok(model)
    }

    /// Called before the first step of each task (not again when a run resumes inside it):
    /// the step may change there (a new head's classes, replay's first rows, a forgetting
    /// penalty that appears after the first task), so a strategy that planned for the step
    /// (a memory budget) plans again. Default: nothing.
    fn before_task(&mut self, _task: &TaskInfo) {}

    /// Warnings raised since the last call, each one sentence (a step that went over a memory
    /// budget, a plan that took more memory than the plain step): the trainer asks after
    /// every step, prints each on standard error and records it in `report.json` as a
    /// `memory` event. Default: none.
    fn take_warnings(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// Whether this layer computes a step over slices of the batch (gradient accumulation),
    /// so that a model with batch statistics ([`crate::model::Model::uses_batch_statistics`])
    /// normalises each micro-batch with its own statistics and the step is no longer the plain
    /// one; the trainer warns. Default `false`.
    fn splits_batch(&self) -> bool {
        false
    }

    /// Whether the run's autodiff device should use Burn's op-level checkpointing
    /// (`Device::gradient_checkpointing`, the `Balanced` strategy: Burn recomputes cheap
    /// operations in backward instead of keeping their outputs). It is a property of the device,
    /// because every tensor of one graph must share a checkpointing strategy, so the trainer
    /// builds its device from this answer. Default `false`.
    fn op_level_checkpointing(&self) -> bool {
        false
    }

    /// What the strategy decided or measured, for `report.json` (`memory.strategies.<name>`):
    /// for example the plan a memory budget chose, or AMP's final loss scale. Default: nothing.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }

    /// What this strategy did that bears on a divergence, asked when the loss became
    /// infinite or NaN: one sentence (no final period) that the trainer adds to
    /// [`crate::Error::Diverged`]'s notes, for example AMP's skipped steps and how it lowered
    /// its loss scale. Default `None` (nothing to say).
    fn divergence_note(&self) -> Option<String> {
        None
    }

    /// The state to checkpoint (for example the loss scale).
    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState::default())
    }
    /// Restores a state saved by [`MemoryStrategy::state`].
    fn load_state(&mut self, _state: StrategyState) -> Result<()> {
        Ok(())
    }
}

/// What the trainer should do after an evaluation.
#[derive(Clone, Debug, PartialEq)]
pub enum AnomalyAction {
    /// Carry on.
    Continue,
    /// Restore the last good checkpoint and retry the task with these control multipliers.
    Rollback {
        /// Why.
        reason: String,
        /// Multiplier for regularisation strength.
        reg_factor: f64,
        /// Added to the replay ratio.
        replay_step: f64,
        /// Multiplier for the learning rate.
        lr_factor: f64,
        /// Retries allowed per task.
        max_retries: usize,
    },
}

/// Acts on *when and how strongly*: learning rate, regularisation strength, replay ratio,
/// evaluation cadence and the forgetting-anomaly policy.
pub trait Scheduler: Send {
    /// The registered name.
    fn name(&self) -> &str;
    /// Called before each task.
    fn before_task(&mut self, _task: &TaskInfo) {}
    /// Adjusts this step's controls (schedulers are applied in config order).
    fn controls(&mut self, _position: &Position, _controls: &mut Controls) {}
    /// Whether to evaluate every task after task `task` (`None`: no opinion; the default is
    /// every task). The diagonal cell is evaluated regardless.
    fn evaluate_all(&self, _task: usize, _num_tasks: usize) -> Option<bool> {
        None
    }
    /// Inspects the accuracy matrix so far (rows `0..=task`, `None` = not evaluated).
    fn after_evaluation(&mut self, _task: usize, _matrix: &[Vec<Option<f64>>]) -> AnomalyAction {
        AnomalyAction::Continue
    }
    /// Whether [`Scheduler::after_evaluation`] may answer [`AnomalyAction::Rollback`]: the
    /// trainer then keeps an in-memory snapshot of every task's start (model, optimiser and
    /// strategy states) to roll back to. Default `false` (no snapshot is paid for).
    fn may_roll_back(&self) -> bool {
        false
    }
    /// The state to checkpoint.
    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState::default())
    }
    /// Restores a state saved by [`Scheduler::state`].
    fn load_state(&mut self, _state: StrategyState) -> Result<()> {
        Ok(())
    }
}
