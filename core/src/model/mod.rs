//! engram's model abstraction: a sequence of boxed blocks that is itself a Burn module.
//!
//! Why not a plain Burn `Module`? Burn's `Module` trait has generic methods, so it is not
//! object-safe: a strategy or a plugin cannot hold "some model" and a mixture-of-experts
//! strategy cannot add an expert of a type the host never saw. engram's [`Model`] is a list of
//! [`DynBlock`]s, each wrapping any Burn module that implements [`Block`]. Through the rank
//! bridges in [`bridge`], the whole [`Model`] still implements Burn's [`Module`], so the
//! optimiser (`burn-optim`), burnpack records, `valid()` and `ParamGroup` see every parameter.
//!
//! What strategies get from it:
//! - **inspection**: [`Model::params`] lists every float parameter with its dotted path
//!   (`blocks.1.linear.weight`), [`ParamId`] and shape;
//! - **block-by-block execution**: [`Model::forward_range`] runs blocks `a..b` (segment
//!   checkpointing runs the model in segments);
//! - **task-aware forward**: [`Model::forward`] takes a [`ForwardCtx`] with the task id;
//! - **extension**: [`Model::push_block`], [`Model::replace_block`] add a head or an expert and
//!   route the forward through it.
//!
//! # Models are registered components
//!
//! `[model] type = "…"` names a [`Registration`](crate::registry::Registration) of kind
//! [`Kind::Model`](crate::registry::Kind::Model): a built-in of [`BUILTINS`] (one file each:
//! [`mlp`], [`cnn`], [`vit`], holding the keys, their checks, the builder and the registration
//! line) or a plugin's. Its factory ([`ModelFactory`](crate::registry::ModelFactory)) gets the
//! `[model]` keys, the data's [`InputShape`] and class count ([`ModelContext`]) and returns a
//! [`Model`]. A user's own Burn modules become blocks by implementing [`Block`] (a `forward`
//! from [`Activation`] to [`Activation`] and a kind name; [`Activation::into_image`] gives a
//! convolution its `[batch, c, h, w]`), a list of them becomes a model with [`Model::new`], and
//! [`DynBlock::new`] handles Burn's lazy initialisation. The book's chapter "Your model" walks
//! through it with `examples/own_model.rs`.

pub mod bridge;
pub mod cnn;
pub mod init;
pub mod mlp;
pub mod vit;

/// The built-in models, one line each (the registry, `engram list` and the reference page
/// are generated from it).
pub const BUILTINS: &[crate::registry::Registration] =
    &[mlp::REGISTRATION, cnn::REGISTRATION, vit::REGISTRATION];

/// The shape of one input sample, as the dataset gives it. Batches reach the model flattened,
/// `[batch, features]`, in row-major order of these dimensions; image models reshape them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputShape {
    /// Images `[channels, height, width]` (1 channel for the IDX datasets).
    Image {
        /// Colour channels.
        channels: usize,
        /// Rows of pixels.
        height: usize,
        /// Columns of pixels.
        width: usize,
    },
    /// A feature vector `[features]` (a table's row).
    Features(usize),
}

impl InputShape {
    /// Scalars per sample (`channels · height · width`, or the feature count).
    pub fn features(&self) -> usize {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => channels * height * width,
            InputShape::Features(n) => n,
        }
    }

    /// Colour channels: the image's, 1 for a feature vector (its normalisation groups).
    pub fn channels(&self) -> usize {
        match *self {
            InputShape::Image { channels, .. } => channels,
            InputShape::Features(_) => 1,
        }
    }

    /// The dimensions, `[channels, height, width]` or `[features]`.
    pub fn dims(&self) -> Vec<usize> {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => vec![channels, height, width],
            InputShape::Features(n) => vec![n],
        }
    }

    /// `(channels, side)` for square images; `None` for features or non-square images.
    pub fn square(&self) -> Option<(usize, usize)> {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } if height == width => Some((channels, height)),
            _ => None,
        }
    }
}

impl std::fmt::Display for InputShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => write!(
                f,
                "{height}×{width} images of {channels} channel{}",
                if channels == 1 { "" } else { "s" }
            ),
            InputShape::Features(n) => write!(f, "vectors of {n} features"),
        }
    }
}

/// What a model factory knows when it builds the model.
#[derive(Clone, Debug)]
pub struct ModelContext {
    /// One sample's shape, from the dataset.
    pub input: InputShape,
    /// Logit width: the number of classes of the stream.
    pub num_classes: usize,
    /// The run seed; initialise from [`ModelContext::rng`] (engram's stream) or from Burn's
    /// device RNG, which [`ModelContext::seed_device`] seeds.
    pub seed: u64,
}

impl ModelContext {
    /// engram's random stream for initialisation, fixed by the run seed.
    pub fn rng(&self) -> crate::rng::Rng {
        crate::rng::stream(self.seed, "init", 0, 0)
    }

    /// Seeds Burn's RNG of `device` from the run seed, for layers that initialise from it
    /// (Burn's own `Conv2dConfig::init`, `LinearConfig::init`, …).
    pub fn seed_device(&self, device: &Device) {
        device.seed(crate::rng::derive_seed(self.seed, "burn-init", 0, 0));
    }

    /// The side of square images, or a positioned error at `[model] type` saying what `model`
    /// needs (for image models).
    ///
    /// # Errors
    /// [`crate::Error::Config`] when the input is not square images.
    pub fn square_side(
        &self,
        src: &crate::config::ParamSource,
        model: &str,
    ) -> crate::Result<(usize, usize)> {
        self.input.square().ok_or_else(|| {
            src.key_error(
                "type",
                format!("{model} needs square images; this data is {}", self.input),
                Some("type = \"mlp\" reads any input as flat features".into()),
            )
        })
    }
}

use crate::model::bridge::{DynMapper, DynVisitor, FromDynMapper, FromDynVisitor};
use bridge::{ToDynMapper, ToDynVisitor};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{DType, Device, Tensor};
use std::any::Any;
use std::fmt::Debug;

/// The value that flows between blocks. Each variant names its shape.
#[derive(Clone, Debug)]
pub enum Activation {
    /// Flat features, `[batch, features]` (MLP layers, logits).
    Flat(Tensor<2>),
    /// A token sequence, `[batch, tokens, d_model]` (transformer blocks).
    Seq(Tensor<3>),
    /// Images, `[batch, channels, height, width]` (convolutions).
    Image(Tensor<4>),
}

impl Activation {
    /// The `[batch, features]` tensor; other variants are flattened per sample.
    pub fn into_flat(self) -> Tensor<2> {
        match self {
            Activation::Flat(t) => t,
            Activation::Seq(t) => t.flatten(1, 2),
            Activation::Image(t) => t.flatten(1, 3),
        }
    }

    /// Images `[batch, channels, height, width]` of `shape` `[channels, height, width]`: a flat
    /// activation `[batch, c·h·w]` (the trainer's input) is reshaped in row-major order, an
    /// image is returned as it is.
    ///
    /// # Panics
    /// On a token sequence, or when the sizes do not match (the model factory checks the data's
    /// [`InputShape`] before training, so this is a bug in the block).
    pub fn into_image(self, shape: [usize; 3]) -> Tensor<4> {
        match self {
            Activation::Image(t) => t,
            Activation::Flat(t) => {
                let [b, _] = t.dims();
                t.reshape([b, shape[0], shape[1], shape[2]])
            }
            Activation::Seq(_) => panic!("a token sequence [batch, tokens, d] is not an image"),
        }
    }

    /// The device the activation lives on.
    pub fn device(&self) -> Device {
        match self {
            Activation::Flat(t) => t.device(),
            Activation::Seq(t) => t.device(),
            Activation::Image(t) => t.device(),
        }
    }

    /// The batch size (first dimension) in samples.
    pub fn batch_size(&self) -> usize {
        match self {
            Activation::Flat(t) => t.dims()[0],
            Activation::Seq(t) => t.dims()[0],
            Activation::Image(t) => t.dims()[0],
        }
    }

    /// The same activation detached from the autodiff graph (a new leaf).
    pub fn detach(self) -> Self {
        match self {
            Activation::Flat(t) => Activation::Flat(t.detach()),
            Activation::Seq(t) => Activation::Seq(t.detach()),
            Activation::Image(t) => Activation::Image(t.detach()),
        }
    }

    /// The gradient of this activation in `grads` (it must have been marked with
    /// [`Activation::require_grad`]), as an untracked activation of the same shape.
    pub fn grad(&self, grads: &burn::tensor::Gradients) -> Option<Activation> {
        Some(match self {
            Activation::Flat(t) => Activation::Flat(t.grad(grads)?),
            Activation::Seq(t) => Activation::Seq(t.grad(grads)?),
            Activation::Image(t) => Activation::Image(t.grad(grads)?),
        })
    }

    /// `Σ self ⊙ upstream` as a scalar `[1]`: backpropagating it sends `upstream` into the
    /// graph that produced `self` (the surrogate loss of segment recomputation).
    ///
    /// # Panics
    /// When the two activations are of different variants or shapes (a bug in the caller).
    pub fn dot(self, upstream: Activation) -> Tensor<1> {
        let up = |u: Activation| match u {
            // A constant: an untracked tensor joins any autodiff context (lifting it with
            // `autodiff()` would give it the default checkpointing strategy, which panics
            // against a device with op-level checkpointing).
            Activation::Flat(t) => t.detach().flatten::<1>(0, 1),
            Activation::Seq(t) => t.detach().flatten::<1>(0, 2),
            Activation::Image(t) => t.detach().flatten::<1>(0, 3),
        };
        let mine = match self {
            Activation::Flat(t) => t.flatten::<1>(0, 1),
            Activation::Seq(t) => t.flatten::<1>(0, 2),
            Activation::Image(t) => t.flatten::<1>(0, 3),
        };
        (mine * up(upstream)).sum()
    }

    /// The same activation marked as requiring a gradient (for segment recomputation).
    pub fn require_grad(self) -> Self {
        match self {
            Activation::Flat(t) => Activation::Flat(t.require_grad()),
            Activation::Seq(t) => Activation::Seq(t.require_grad()),
            Activation::Image(t) => Activation::Image(t.require_grad()),
        }
    }
}

/// What a block may know about the current forward pass.
#[derive(Clone, Debug, Default)]
pub struct ForwardCtx {
    /// The task the batch belongs to, where the scenario provides it (task-incremental
    /// training and evaluation); `None` in class- and domain-incremental evaluation.
    pub task: Option<usize>,
    /// This forward repeats one already run in the same step (a checkpointed segment recomputed
    /// in backward): blocks must compute exactly as before but not update state again (batch
    /// norm's running statistics, see [`cnn::batch_norm`]).
    pub replay: bool,
    /// This forward is the trainer's evaluation (a row of the accuracy matrix, `engram eval`),
    /// on the inference copy of the model. A block may classify differently there (replay's
    /// nearest-class-mean head does).
    pub evaluation: bool,
}

impl ForwardCtx {
    /// A training forward of a batch of task `task` (`None`: rows of several tasks); build it
    /// with [`Batch::forward_ctx`](crate::data::stream::Batch::forward_ctx).
    pub fn training(task: Option<usize>) -> Self {
        Self {
            task,
            replay: false,
            evaluation: false,
        }
    }

    /// An evaluation forward on the inference copy; `task` is given only where the scenario
    /// provides task identity at test time (task-incremental).
    pub fn evaluation(task: Option<usize>) -> Self {
        Self {
            task,
            replay: false,
            evaluation: true,
        }
    }

    /// The same forward repeated in backward (a recomputed checkpoint segment).
    pub fn replayed(&self) -> Self {
        Self {
            replay: true,
            ..self.clone()
        }
    }
}

/// A Burn module that can be one stage of an engram [`Model`].
///
/// Implement it for your own `#[derive(Module)]` type and wrap it with [`DynBlock::new`]. The
/// block must pick train/inference behaviour from its input as Burn's layers do (dropout and
/// batch norm are active when the input's device has autodiff).
pub trait Block: Module + 'static {
    /// Runs the block. `x` and the result may be any [`Activation`] variant; consecutive
    /// blocks must agree.
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation;

    /// A short kind name for reports and the segment planner (`"dense"`, `"head"`, …).
    fn kind(&self) -> &'static str;

    /// Whether the block normalises with statistics of the batch it is given (batch norm), so
    /// that a batch split into micro-batches (gradient accumulation) is no longer the same
    /// computation. Default `false`.
    fn batch_statistics(&self) -> bool {
        false
    }
}

/// The object-safe face of a [`Block`]. Implemented for every `Block`; not for direct use.
pub trait ErasedBlock: Send + Debug {
    /// See [`Block::forward`].
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation;
    /// See [`Block::kind`].
    fn kind(&self) -> &'static str;
    /// See [`Block::batch_statistics`].
    fn batch_statistics(&self) -> bool;
    /// Visits the parameters through an object-safe visitor.
    fn visit_dyn(&self, visitor: &mut dyn DynVisitor);
    /// Maps the parameters through an object-safe mapper.
    fn map_dyn(self: Box<Self>, mapper: &mut dyn DynMapper) -> Box<dyn ErasedBlock>;
    /// See [`Module::to_device`].
    fn to_device_dyn(self: Box<Self>, device: &Device) -> Box<dyn ErasedBlock>;
    /// See [`Module::fork`].
    fn fork_dyn(self: Box<Self>, device: &Device) -> Box<dyn ErasedBlock>;
    /// See [`Module::collect_devices`].
    fn collect_devices_dyn(&self, devices: Vec<Device>) -> Vec<Device>;
    /// See [`Module::valid`].
    fn valid_dyn(&self) -> Box<dyn ErasedBlock>;
    /// See [`Module::train`].
    fn train_dyn(self: Box<Self>) -> Box<dyn ErasedBlock>;
    /// See [`Module::materialize`].
    fn materialize_dyn(self: Box<Self>) -> Box<dyn ErasedBlock>;
    /// A boxed clone.
    fn clone_dyn(&self) -> Box<dyn ErasedBlock>;
    /// The concrete block, for downcasting by strategies that know it.
    fn as_any(&self) -> &dyn Any;
}

impl<B: Block> ErasedBlock for B {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        Block::forward(self, x, ctx)
    }
    fn kind(&self) -> &'static str {
        Block::kind(self)
    }
    fn batch_statistics(&self) -> bool {
        Block::batch_statistics(self)
    }
    fn visit_dyn(&self, visitor: &mut dyn DynVisitor) {
        self.visit(&mut ToDynVisitor { inner: visitor });
    }
    fn map_dyn(self: Box<Self>, mapper: &mut dyn DynMapper) -> Box<dyn ErasedBlock> {
        Box::new((*self).map(&mut ToDynMapper { inner: mapper }))
    }
    fn to_device_dyn(self: Box<Self>, device: &Device) -> Box<dyn ErasedBlock> {
        Box::new((*self).to_device(device))
    }
    fn fork_dyn(self: Box<Self>, device: &Device) -> Box<dyn ErasedBlock> {
        Box::new((*self).fork(device))
    }
    fn collect_devices_dyn(&self, devices: Vec<Device>) -> Vec<Device> {
        self.collect_devices(devices)
    }
    fn valid_dyn(&self) -> Box<dyn ErasedBlock> {
        Box::new(self.valid())
    }
    fn train_dyn(self: Box<Self>) -> Box<dyn ErasedBlock> {
        Box::new((*self).train())
    }
    fn materialize_dyn(self: Box<Self>) -> Box<dyn ErasedBlock> {
        Box::new((*self).materialize())
    }
    fn clone_dyn(&self) -> Box<dyn ErasedBlock> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A boxed [`Block`] that is a Burn [`Module`].
#[derive(Debug)]
pub struct DynBlock(Box<dyn ErasedBlock>);

impl DynBlock {
    /// Wraps a block, initialising its parameters now.
    ///
    /// Burn's layers (`LinearConfig::init`, `Conv2dConfig::init`) create parameters lazily, and
    /// a lazy parameter is shared by every clone of the module until its first use: a clone
    /// taken without gradients (a checkpointed step's graph-free pass, an evaluation copy) would
    /// initialise it untracked for the real model too, and the Fisher pass or the optimiser
    /// would then find no gradient for it ("Tensor::backward requires a tracked autodiff
    /// tensor"). Reading every parameter here closes that trap for every block, built-in or
    /// not.
    pub fn new<B: Block>(block: B) -> Self {
        struct Touch;
        impl ModuleVisitor for Touch {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let _ = param.val();
            }
        }
        block.visit(&mut Touch);
        Self(Box::new(block))
    }

    /// The wrapped block as a trait object.
    pub fn inner(&self) -> &dyn ErasedBlock {
        self.0.as_ref()
    }

    /// The concrete block, when it is a `B`.
    pub fn downcast_ref<B: Block>(&self) -> Option<&B> {
        self.0.as_any().downcast_ref::<B>()
    }
}

impl Clone for DynBlock {
    fn clone(&self) -> Self {
        Self(self.0.clone_dyn())
    }
}

impl Module for DynBlock {
    fn collect_devices(&self, devices: Vec<Device>) -> Vec<Device> {
        self.0.collect_devices_dyn(devices)
    }
    fn fork(self, device: &Device) -> Self {
        Self(self.0.fork_dyn(device))
    }
    fn to_device(self, device: &Device) -> Self {
        Self(self.0.to_device_dyn(device))
    }
    fn train(self) -> Self {
        Self(self.0.train_dyn())
    }
    fn valid(&self) -> Self {
        Self(self.0.valid_dyn())
    }
    fn materialize(self) -> Self {
        Self(self.0.materialize_dyn())
    }
    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        self.0.visit_dyn(&mut FromDynVisitor { visitor });
    }
    fn map<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        Self(self.0.map_dyn(&mut FromDynMapper { mapper }))
    }
}

/// One float parameter of a [`Model`].
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    /// Dotted path, for example `blocks.0.linear.weight`.
    pub path: String,
    /// Burn's stable parameter id (kept by burnpack records).
    pub id: ParamId,
    /// The parameter's shape.
    pub shape: Vec<usize>,
}

impl ParamInfo {
    /// Number of scalar elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An engram model: blocks run in order, the last one producing logits `[batch, classes]`.
#[derive(Clone, Debug)]
pub struct Model {
    blocks: Vec<DynBlock>,
    /// Number of output classes (width of the logits).
    pub num_classes: usize,
    /// Blocks per segment that segment checkpointing uses when its `interval` is left at 0.
    segment_blocks: Option<usize>,
}

impl Model {
    /// A model from its blocks; `num_classes` is the logit width of the last block. Each
    /// block's parameters are already initialised ([`DynBlock::new`]).
    pub fn new(blocks: Vec<DynBlock>, num_classes: usize) -> Self {
        Self {
            blocks,
            num_classes,
            segment_blocks: None,
        }
    }

    /// The same model with a default segment length of `blocks` blocks for segment
    /// checkpointing (`[[memory]] type = "checkpoint"` with `interval = 0`): the number of
    /// consecutive blocks whose activations are cheap to recompute together (the CNN: 2, a
    /// conv block and the next; the ViT: 3). Unset, segment checkpointing uses about √blocks
    /// (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", §4).
    pub fn with_segment_blocks(mut self, blocks: usize) -> Self {
        self.segment_blocks = Some(blocks.max(1));
        self
    }

    /// The default segment length in blocks, when the model sets one
    /// ([`Model::with_segment_blocks`]).
    pub fn segment_blocks(&self) -> Option<usize> {
        self.segment_blocks
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Whether any block normalises with batch statistics ([`Block::batch_statistics`]).
    pub fn uses_batch_statistics(&self) -> bool {
        self.blocks.iter().any(|b| b.inner().batch_statistics())
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[DynBlock] {
        &self.blocks
    }

    /// Appends a block (for example a new head).
    pub fn push_block(&mut self, block: DynBlock) {
        self.blocks.push(block);
    }

    /// Replaces block `index` by `f(old)`; returns `false` when there is no such block.
    /// A mixture-of-experts strategy wraps the old head with its router this way.
    pub fn replace_block(&mut self, index: usize, f: impl FnOnce(DynBlock) -> DynBlock) -> bool {
        if index >= self.blocks.len() {
            return false;
        }
        let old = self.blocks.remove(index);
        self.blocks.insert(index, f(old));
        true
    }

    /// Runs every block: `x` `[batch, ...]` to logits `[batch, num_classes]`.
    pub fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Tensor<2> {
        self.forward_range(0..self.blocks.len(), x, ctx).into_flat()
    }

    /// Runs blocks `range` only (segment execution).
    pub fn forward_range(
        &self,
        range: std::ops::Range<usize>,
        mut x: Activation,
        ctx: &ForwardCtx,
    ) -> Activation {
        for block in &self.blocks[range] {
            x = block.0.forward(x, ctx);
        }
        x
    }

    /// Runs blocks `range`, reseeding Burn's RNG before block `i` from `(rng_seed, i)`: the
    /// dropout masks of a block then depend only on the step's seed and the block, not on
    /// how the blocks are grouped, so a checkpointed recomputation draws the same masks as
    /// the first pass and as a plain step.
    pub fn forward_range_seeded(
        &self,
        range: std::ops::Range<usize>,
        mut x: Activation,
        ctx: &ForwardCtx,
        rng_seed: u64,
    ) -> Activation {
        for i in range {
            x.device()
                .seed(crate::rng::derive_seed(rng_seed, "block", i as u64, 0));
            x = self.blocks[i].0.forward(x, ctx);
        }
        x
    }

    /// Every float parameter with its path, id and shape, in module order.
    pub fn params(&self) -> Vec<ParamInfo> {
        let mut v = PathVisitor::new(|path, id, shape, _t| {
            Some(ParamInfo {
                path: path.to_string(),
                id,
                shape: shape.to_vec(),
            })
        });
        self.visit(&mut v);
        v.out
    }

    /// Every float parameter's current value flattened to `[numel]`, still tracked by autodiff
    /// when the model is (use it for penalties such as EWC's).
    pub fn param_values(&self) -> Vec<(ParamInfo, Tensor<1>)> {
        let mut v = PathVisitor::new(|path, id, shape, t| {
            let n = shape.iter().product::<usize>();
            Some((
                ParamInfo {
                    path: path.to_string(),
                    id,
                    shape: shape.to_vec(),
                },
                t.reshape([n]),
            ))
        });
        self.visit(&mut v);
        v.out
    }

    /// The gradient of every parameter present in `grads`, flattened to `[numel]`.
    pub fn flat_grads(&self, grads: &GradientsParams) -> Vec<(ParamInfo, Tensor<1>)> {
        let mut v = GradVisitor {
            path: Vec::new(),
            grads,
            out: Vec::new(),
        };
        self.visit(&mut v);
        v.out
    }

    /// The same model with every training flag off (dropout inactive, batch-norm statistics
    /// frozen) but parameters still tracked: for passes that need gradients in evaluation mode,
    /// such as Fisher information.
    pub fn eval_mode(&self) -> Model {
        self.sync_running_state();
        struct FlagsOff;
        impl ModuleMapper for FlagsOff {
            fn map_flag(&mut self, flag: Param<burn::module::Flag>) -> Param<burn::module::Flag> {
                flag.with_value(false)
            }
        }
        self.clone().map(&mut FlagsOff)
    }

    /// Folds every pending update of Burn's running statistics (batch norm's running mean and
    /// variance, `RunningState`) into the value that records, `eval_mode` copies and
    /// `RunningState::value` read.
    ///
    /// `RunningState::update` only queues the new value (per thread) until the next update or
    /// a sync; a checkpoint written in between would save the statistics one step old, and the
    /// resumed run would drift from the uninterrupted one (measured before this existed: the
    /// CNN with EWC resumed to a task-1 loss of 0.21250 instead of 0.21296). The trainer calls
    /// this before each checkpoint; [`Model::eval_mode`] calls it itself.
    pub fn sync_running_state(&self) {
        // `Module::valid` syncs each `RunningState` (they are shared with this model's
        // clones); the copy is dropped.
        drop(self.valid());
    }

    /// The model as a mixed-precision step computes with it: every float parameter cast to
    /// `dtype` (a tracked cast, so gradients reach the `f32` master parameter under the same id),
    /// except normalisation parameters (a path containing `norm`), which stay `f32` (their blocks
    /// upcast the input, see [`norm_f32`]). `None` (or `f32`) returns the model as it is.
    /// Build a fresh view for every graph: a view's casts belong to the graph that uses them.
    pub fn compute_view(&self, dtype: Option<DType>) -> Model {
        let Some(dtype) = dtype.filter(|d| *d != DType::F32) else {
            return self.clone();
        };
        struct Caster {
            path: Vec<String>,
            dtype: DType,
        }
        impl ModuleMapper for Caster {
            fn enter_module(&mut self, name: &str, _container_type: &str) {
                self.path.push(name.to_string());
            }
            fn exit_module(&mut self, _name: &str, _container_type: &str) {
                self.path.pop();
            }
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                if self.path.iter().any(|p| p.contains("norm")) {
                    return param;
                }
                let (id, tensor, mapper) = param.consume();
                Param::from_mapped_value(id, tensor.cast(self.dtype), mapper)
            }
        }
        self.clone().map(&mut Caster {
            path: Vec::new(),
            dtype,
        })
    }

    /// Replaces parameter values outside autodiff: `f(info, value)` gets each float
    /// parameter's value flattened to `[numel]` (untracked) and returns the new value, or
    /// `None` to keep it. Ids, gradient requirements and checkpointing strategies are kept, as
    /// burn-optim keeps them. For proximal updates and projections after an optimiser step.
    pub fn update_params(
        self,
        f: &mut dyn FnMut(&ParamInfo, Tensor<1>) -> Option<Tensor<1>>,
    ) -> Model {
        struct Updater<'a> {
            path: Vec<String>,
            f: &'a mut dyn FnMut(&ParamInfo, Tensor<1>) -> Option<Tensor<1>>,
        }
        impl ModuleMapper for Updater<'_> {
            fn enter_module(&mut self, name: &str, _container_type: &str) {
                self.path.push(name.to_string());
            }
            fn exit_module(&mut self, _name: &str, _container_type: &str) {
                self.path.pop();
            }
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                let (id, tensor, mapper) = param.consume();
                let shape: [usize; D] = tensor.dims();
                let info = ParamInfo {
                    path: self.path.join("."),
                    id,
                    shape: shape.to_vec(),
                };
                let require_grad = tensor.is_require_grad();
                let strategy = tensor.gradient_checkpointing_strategy();
                let is_autodiff = tensor.is_autodiff();
                let flat = tensor.clone().inner().reshape([info.numel()]);
                let tensor = match (self.f)(&info, flat) {
                    Some(new) => {
                        let mut t: Tensor<D> = new.reshape(shape);
                        if is_autodiff {
                            t = Tensor::from_inner(t);
                            if let Some(s) = strategy {
                                t = t.with_gradient_checkpointing_strategy(s);
                            }
                            if require_grad {
                                t = t.require_grad();
                            }
                        }
                        t
                    }
                    None => tensor,
                };
                Param::from_mapped_value(id, tensor, mapper)
            }
        }
        self.map(&mut Updater {
            path: Vec::new(),
            f,
        })
    }

    /// Gradients of scalar `loss` `[1]` with respect to every parameter, flattened to
    /// `[numel]` each, in module order (parameters without a gradient are skipped).
    pub fn grads_of(&self, loss: Tensor<1>) -> Vec<(ParamInfo, Tensor<1>)> {
        let grads = GradientsParams::from_grads(loss.backward(), self);
        self.flat_grads(&grads)
    }

    /// Total number of scalar parameters.
    pub fn numel(&self) -> usize {
        self.params().iter().map(ParamInfo::numel).sum()
    }
}

impl Module for Model {
    fn collect_devices(&self, devices: Vec<Device>) -> Vec<Device> {
        self.blocks.collect_devices(devices)
    }
    fn fork(self, device: &Device) -> Self {
        Self {
            blocks: self.blocks.fork(device),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
    fn to_device(self, device: &Device) -> Self {
        Self {
            blocks: self.blocks.to_device(device),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
    fn train(self) -> Self {
        Self {
            blocks: self.blocks.train(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
    fn valid(&self) -> Self {
        Self {
            blocks: self.blocks.valid(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
    fn materialize(self) -> Self {
        Self {
            blocks: self.blocks.materialize(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        visitor.enter_module("blocks", "Model");
        self.blocks.visit(visitor);
        visitor.exit_module("blocks", "Model");
    }
    fn map<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        mapper.enter_module("blocks", "Model");
        let blocks = self.blocks.map(mapper);
        mapper.exit_module("blocks", "Model");
        Self {
            blocks,
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
        }
    }
}

type PathFn<'a, T> = dyn FnMut(&str, ParamId, &[usize], Tensor<1>) -> Option<T> + 'a;

/// Visits float parameters with their dotted path; `f` gets the value flattened.
struct PathVisitor<'a, T> {
    path: Vec<String>,
    f: Box<PathFn<'a, T>>,
    out: Vec<T>,
}

impl<'a, T> PathVisitor<'a, T> {
    fn new(f: impl FnMut(&str, ParamId, &[usize], Tensor<1>) -> Option<T> + 'a) -> Self {
        Self {
            path: Vec::new(),
            f: Box::new(f),
            out: Vec::new(),
        }
    }
}

impl<T> ModuleVisitor for PathVisitor<'_, T> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let shape = value.dims().to_vec();
        let n = shape.iter().product::<usize>();
        let path = self.path.join(".");
        if let Some(item) = (self.f)(&path, param.id, &shape, value.reshape([n])) {
            self.out.push(item);
        }
    }
}

struct GradVisitor<'a> {
    path: Vec<String>,
    grads: &'a GradientsParams,
    out: Vec<(ParamInfo, Tensor<1>)>,
}

impl ModuleVisitor for GradVisitor<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let shape = g.dims().to_vec();
            let n = shape.iter().product::<usize>();
            self.out.push((
                ParamInfo {
                    path: self.path.join("."),
                    id: param.id,
                    shape,
                },
                g.reshape([n]),
            ));
        }
    }
}

/// Runs a normalisation layer in `f32` whatever the compute dtype of `x` (mixed precision keeps
/// normalisation in full precision): `x` `[.., dim]` is upcast, normalised with the layer's
/// `f32` parameters and cast back to its dtype.
pub fn norm_f32<const D: usize>(norm: &burn::nn::LayerNorm, x: Tensor<D>) -> Tensor<D> {
    let dt = x.dtype();
    if dt == DType::F32 {
        return norm.forward(x);
    }
    norm.forward(x.cast(DType::F32)).cast(dt)
}

/// Rebuilds a [`GradientsParams`] from flat gradients keyed by [`ParamId`], restoring each
/// parameter's shape from `model` (the inverse of [`Model::flat_grads`]).
pub fn unflatten_grads(model: &Model, flat: Vec<(ParamId, Tensor<1>)>) -> GradientsParams {
    struct V {
        flat: std::collections::HashMap<ParamId, Tensor<1>>,
        out: GradientsParams,
    }
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.flat.remove(&param.id) {
                let shape: [usize; D] = param.lazy_shape().dims::<D>();
                self.out.register::<D>(param.id, g.reshape(shape));
            }
        }
    }
    let mut v = V {
        flat: flat.into_iter().collect(),
        out: GradientsParams::new(),
    };
    model.visit(&mut v);
    v.out
}

#[cfg(test)]
mod tests {
    use super::mlp::{ActivationKind, build_mlp};
    use super::*;
    use burn::module::ModuleMapper;
    use burn::tensor::{Int, TensorData, activation};

    fn tiny() -> (Model, Tensor<2>, Tensor<1, Int>) {
        let ad = Device::flex().autodiff();
        let mut r = crate::rng::stream(0, "init", 0, 0);
        let m = build_mlp(6, &[5, 4], 3, ActivationKind::Tanh, 0.0, &mut r, &ad);
        let xv: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0).collect();
        let x = Tensor::<2>::from_data(TensorData::new(xv, [4, 6]), &ad);
        let y = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 1], [4]), &ad);
        (m, x, y)
    }

    fn loss(m: &Model, x: &Tensor<2>, y: &Tensor<1, Int>) -> Tensor<1> {
        let logits = m.forward(Activation::Flat(x.clone()), &ForwardCtx::default());
        let lp = activation::log_softmax(logits, 1);
        lp.gather(1, y.clone().reshape([4, 1]))
            .reshape([4])
            .neg()
            .mean()
    }

    /// Adds `delta` to element `k` of parameter `id`.
    struct Bump {
        id: ParamId,
        k: usize,
        delta: f32,
    }

    impl ModuleMapper for Bump {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if p.id != self.id {
                return p;
            }
            let (k, d) = (self.k, self.delta);
            p.map(|t| {
                let shape = t.dims();
                let mut v = t.clone().into_data().try_to_vec::<f32>().unwrap();
                v[k] += d;
                Tensor::from_data(TensorData::new(v, shape.to_vec()), &t.device())
            })
        }
    }

    #[test]
    fn paths_ids_and_shapes() {
        let (m, _, _) = tiny();
        let p = m.params();
        let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "blocks.0.linear.weight",
                "blocks.0.linear.bias",
                "blocks.1.linear.weight",
                "blocks.1.linear.bias",
                "blocks.2.linear.weight",
                "blocks.2.linear.bias"
            ]
        );
        assert_eq!(p[0].shape, vec![6, 5]);
        assert_eq!(m.numel(), 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
        assert_eq!(m.blocks()[2].inner().kind(), "head");
    }

    #[test]
    fn gradients_through_boxed_blocks_match_finite_differences() {
        let (m, x, y) = tiny();
        let grads = GradientsParams::from_grads(loss(&m, &x, &y).backward(), &m);
        let valid = m.valid();
        let (xi, yi) = (x.inner(), y.inner());
        let mut checked = 0;
        for (p, g) in m.flat_grads(&grads) {
            let g = g.into_data().try_to_vec::<f32>().unwrap();
            assert_eq!(g.len(), p.numel());
            for k in [0, p.numel() / 2, p.numel() - 1] {
                let eps = 1e-2f32;
                let f = |delta: f32| {
                    let mm = valid.clone().map(&mut Bump { id: p.id, k, delta });
                    f64::from(loss(&mm, &xi, &yi).into_scalar::<f32>())
                };
                let fd = (f(eps) - f(-eps)) / (2.0 * f64::from(eps));
                let err = (fd - f64::from(g[k])).abs();
                assert!(
                    err < 1e-3,
                    "{} [{k}]: autodiff {} vs finite difference {fd}",
                    p.path,
                    g[k]
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 18);
    }

    #[test]
    fn unflatten_restores_shapes() {
        let (m, x, y) = tiny();
        let grads = GradientsParams::from_grads(loss(&m, &x, &y).backward(), &m);
        let flat = m.flat_grads(&grads);
        let want: Vec<Vec<f32>> = flat
            .iter()
            .map(|(_, g)| g.clone().into_data().try_to_vec::<f32>().unwrap())
            .collect();
        let back = unflatten_grads(&m, flat.into_iter().map(|(p, g)| (p.id, g)).collect());
        let got: Vec<Vec<f32>> = m
            .flat_grads(&back)
            .into_iter()
            .map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn replace_and_push_blocks_route_the_forward() {
        let (mut m, x, _) = tiny();
        let n = m.num_blocks();
        assert!(!m.replace_block(n, |b| b));
        let old = m.forward(Activation::Flat(x.clone()), &ForwardCtx::default());
        // Swap the head for a copy of itself: same output, same number of parameters.
        assert!(m.replace_block(n - 1, |b| b.clone()));
        let same = m.forward(Activation::Flat(x.clone()), &ForwardCtx::default());
        assert_eq!(
            old.into_data().try_to_vec::<f32>().unwrap(),
            same.into_data().try_to_vec::<f32>().unwrap()
        );
        assert!(
            m.blocks()[n - 1]
                .downcast_ref::<super::mlp::HeadBlock>()
                .is_some()
        );
    }
}
