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
//! `[model] type = "…"` names a [`Registration`](crate::component::Registration) of kind
//! [`Kind::Model`](crate::registry::Kind::Model): a built-in of [`BUILTINS`] (one file each:
//! [`mlp`], [`cnn`], [`vit`], holding the keys, their checks, the builder and the registration
//! line) or a plugin's. Its factory ([`ModelFactory`](crate::registry::ModelFactory)) gets the
//! `[model]` keys, the data's [`InputShape`] and class count ([`ModelContext`]) and returns a
//! [`Model`]. A user's own Burn modules become blocks by implementing [`Block`] (a `forward`
//! from [`Activation`] to [`Activation`] and a kind name; [`Activation::into_image`] gives a
//! convolution its `[batch, c, h, w]`), a list of them becomes a model with [`Model::new`], and
//! [`DynBlock::new`] handles Burn's lazy initialisation. The book's chapter "Your model" walks
//! through it with `examples/own_model.rs`.

pub mod activation;
pub mod adapter;
pub mod bert;
pub mod block;
pub mod bridge;
pub mod cnn;
pub mod init;
pub mod llama;
pub mod mlp;
pub mod nodes;
pub mod params;
pub mod vit;

pub use crate::data::InputShape;
pub use activation::{Activation, ForwardCtx};
pub use block::{Block, DynBlock, ErasedBlock, norm_params};
pub use params::{ParamInfo, unflatten_grads};

/// The built-in models, one line each (the registry, `engram list` and the reference page
/// are generated from it).
pub const BUILTINS: &[crate::component::Registration] = &[
    mlp::REGISTRATION,
    cnn::REGISTRATION,
    vit::REGISTRATION,
    bert::REGISTRATION,
    llama::REGISTRATION,
];

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

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{DType, Device, Tensor};
use params::{GradVisitor, PathVisitor};

/// An engram model: blocks run in order, the last one producing logits `[batch, classes]`.
#[derive(Clone, Debug)]
pub struct Model {
    blocks: Vec<DynBlock>,
    /// Number of output classes (width of the logits).
    pub num_classes: usize,
    /// Blocks per segment that segment checkpointing uses when its `interval` is left at 0.
    segment_blocks: Option<usize>,
    /// The activation-path adapters ([`adapter::Adapters`]), when a strategy attached them;
    /// shared, so that each forward hands the blocks a handle, not a copy.
    adapters: Option<std::sync::Arc<adapter::Adapters>>,
}

impl Model {
    /// A model from its blocks; `num_classes` is the logit width of the last block. Each
    /// block's parameters are already initialised ([`DynBlock::new`]).
    pub fn new(blocks: Vec<DynBlock>, num_classes: usize) -> Self {
        Self {
            blocks,
            num_classes,
            segment_blocks: None,
            adapters: None,
        }
    }

    /// The activation-path adapters, when the model carries them.
    pub fn adapters(&self) -> Option<&adapter::Adapters> {
        self.adapters.as_deref()
    }

    /// Replaces the activation-path adapters by `f(current)` (`None` removes them).
    pub fn map_adapters(
        mut self,
        f: impl FnOnce(Option<adapter::Adapters>) -> Option<adapter::Adapters>,
    ) -> Self {
        self.adapters =
            f(self.adapters.take().map(std::sync::Arc::unwrap_or_clone)).map(std::sync::Arc::new);
        self
    }

    /// The model with its activation-path adapters merged into the weights they adapt
    /// (`W ← W + (α/r)·Σₑ Aₑ·Bₑ`, [`adapter::Adapters::merged_update`]) and removed: in
    /// evaluation (dropout off) it computes what the adapted model computes. A model without
    /// adapters is returned as it is.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] when a layer has a router (a mixture's update depends on the
    /// token and has no merged weight).
    pub fn merge_adapters(self) -> crate::Result<Model> {
        let Some(adapters) = self.adapters.clone() else {
            return Ok(self);
        };
        if adapters.config.routed {
            return Err(crate::Error::Usage(
                "the model's adapters are a routed mixture (moe-lora): each token's update depends on the router, so there is no merged weight to write; evaluate the run with engram itself (`engram eval`)".into(),
            ));
        }
        let mut updates = std::collections::HashMap::new();
        for (l, (block, local)) in adapters.targets.iter().enumerate() {
            if let Some(u) = adapters.merged_update(l) {
                let n = u.shape().num_elements();
                updates.insert(format!("blocks.{block}.{local}.weight"), u.reshape([n]));
            }
        }
        let model = self.map_adapters(|_| None);
        Ok(model.update_params(&mut |i, t| {
            let u = updates.get(&i.path)?.clone();
            Some(t.clone() + u.detach().cast(t.dtype()))
        }))
    }

    /// The auxiliary loss the forwards since the last call left (the routers' load-balancing
    /// terms of the activation-path adapters, [`adapter::Adapters::take_balance`]), a tracked
    /// scalar `[1]`, taken once; `None` when there is none. A strategy that adds a mixture's
    /// balance term to the loss takes it here after the forward, and a step that recomputes
    /// part of the forward in backward (segment checkpointing) backpropagates each recomputed
    /// part's with it.
    pub fn take_aux_loss(&self) -> Option<Tensor<1>> {
        self.adapters.as_ref()?.take_balance()
    }

    /// The context each block of a forward sees: `ctx` with this model's adapters.
    fn block_ctx(&self, ctx: &ForwardCtx) -> ForwardCtx {
        let mut c = ctx.clone();
        c.adapters = self.adapters.clone();
        c
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

    /// How many token ids the model's first block looks up ([`Block::token_vocab`]: BERT's and
    /// Llama's embeddings), `None` for a model that takes no token ids.
    pub fn token_vocab(&self) -> Option<usize> {
        self.blocks.first().and_then(|b| b.inner().token_vocab())
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

    /// Runs every block of a language model (a [`llama`] decoder): token ids `[batch, len]`
    /// to per-token logits `[batch, len, num_classes]` (`num_classes` is the vocabulary).
    ///
    /// # Errors
    /// [`crate::Error::Other`] when the last block gives no token sequence (a classifier, whose
    /// logits [`Model::forward`] returns).
    pub fn forward_tokens(&self, x: Activation, ctx: &ForwardCtx) -> crate::Result<Tensor<3>> {
        match self.forward_range(0..self.blocks.len(), x, ctx) {
            Activation::Seq(t) | Activation::Tokens { hidden: t, .. } => Ok(t),
            other => Err(crate::Error::Other(format!(
                "forward_tokens: the model's last block gives {}, not per-token logits [batch, len, vocab]",
                match other {
                    Activation::Flat(_) => "flat logits [batch, classes]",
                    Activation::Image(_) => "images",
                    _ => "token ids",
                }
            ))),
        }
    }

    /// Makes every parameter that appears in several blocks under one [`ParamId`] (tied
    /// weights: a Llama's output head and its embedding table) one tensor again, the value of
    /// its first occurrence in module order.
    ///
    /// Burn has no tied parameters: a mapper (an optimiser step, a device move, a load) maps
    /// each occurrence separately, and burn-optim updates only the first one (it removes the
    /// gradient when it uses it). Called after every such map, this keeps the occurrences one
    /// parameter: the graph then sums both uses' gradients into it, and [`Model::params`] lists
    /// it once. A model without shared ids is returned as it is.
    fn retie(self) -> Self {
        Self {
            blocks: params::retie(self.blocks),
            ..self
        }
    }

    /// Runs blocks `range` only (segment execution).
    pub fn forward_range(
        &self,
        range: std::ops::Range<usize>,
        mut x: Activation,
        ctx: &ForwardCtx,
    ) -> Activation {
        crate::threads::keep_awake();
        let mut ctx = self.block_ctx(ctx);
        for i in range {
            ctx.block = i;
            x = self.blocks[i].0.forward(x, &ctx);
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
        crate::threads::keep_awake();
        let mut ctx = self.block_ctx(ctx);
        for i in range {
            x.device()
                .seed(crate::rng::derive_seed(rng_seed, "block", i as u64, 0));
            ctx.block = i;
            x = self.blocks[i].0.forward(x, &ctx);
        }
        x
    }

    /// Every float parameter with its path, id and shape, in module order; a parameter held by
    /// several blocks (tied weights, one [`ParamId`]) is listed once, at its first path.
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
        let mut v = PathVisitor::new(flat_value);
        self.visit(&mut v);
        v.out
    }

    /// The parameters that require gradients (the ones an optimiser updates: all of them
    /// unless a strategy froze some, [`Model::trainable_numel`]), each value flattened to
    /// `[numel]` and untracked, in module order. A frozen parameter is not read (a packed
    /// QLoRA base is not dequantized). Per-task adapters keep a task's expert this way; weight
    /// averaging averages these.
    pub fn trainable_values(&self) -> Vec<(ParamInfo, Tensor<1>)> {
        let mut v = PathVisitor::new(|path, id, shape, t| {
            flat_value(path, id, shape, t).map(|(i, t)| (i, t.inner()))
        })
        .trainable_only();
        self.visit(&mut v);
        v.out
    }

    /// The gradient of every parameter present in `grads`, flattened to `[numel]`.
    pub fn flat_grads(&self, grads: &GradientsParams) -> Vec<(ParamInfo, Tensor<1>)> {
        let mut v = GradVisitor {
            path: Vec::new(),
            seen: Default::default(),
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
    /// except those its blocks declare full-precision ([`Block::full_precision`]: by default the
    /// parameters of Burn's normalisation layers, found by type), which stay `f32` (their blocks
    /// upcast the input, see [`norm_f32`]), and quantized ones (QLoRA's base), which stay packed. `None` (or `f32`) returns the model as it is.
    /// Build a fresh view for every graph: a view's casts belong to the graph that uses them.
    pub fn compute_view(&self, dtype: Option<DType>) -> Model {
        let Some(dtype) = dtype.filter(|d| *d != DType::F32) else {
            return self.clone();
        };
        struct Caster {
            keep: std::collections::HashSet<ParamId>,
            dtype: DType,
        }
        impl ModuleMapper for Caster {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                // A quantized base (QLoRA) stays packed: adding its adapter, whose factors
                // are cast here, dequantizes it to their dtype.
                if self.keep.contains(&param.id) || matches!(param.val().dtype(), DType::QFloat(_))
                {
                    return param;
                }
                let (id, tensor, mapper) = param.consume();
                Param::from_mapped_value(id, tensor.cast(self.dtype), mapper)
            }
        }
        let keep = self
            .blocks
            .iter()
            .flat_map(|b| b.0.full_precision())
            .collect();
        self.clone().map(&mut Caster { keep, dtype })
    }

    /// The model with every quantized parameter (QLoRA's packed base) dequantized to `f32`, the
    /// others as they are: what a file for other tools holds (safetensors has no Burn block
    /// scheme). Call it after `materialize`, which merges adapters but leaves a packed base.
    pub fn dequantized(self) -> Model {
        struct Dense;
        impl ModuleMapper for Dense {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                if !matches!(param.val().dtype(), DType::QFloat(_)) {
                    return param;
                }
                let (id, tensor, mapper) = param.consume();
                Param::from_mapped_value(id, tensor.dequantize(), mapper)
            }
        }
        self.map(&mut Dense)
    }

    /// The dtype a step gives the model's input in when it computes in `compute` (mixed
    /// precision): `compute` itself, except for a model whose first block reads token ids
    /// (BERT's [`bert::Embeddings`], Llama's [`llama::TokenEmbedding`]), whose input stays `f32`
    /// (`None`): `f16` holds integers
    /// exactly only up to 2048 and `bf16` up to 256, below any real vocabulary. Token data's
    /// `Int` ids ([`crate::data::input::Input::Ids`]) are never cast, whatever this says.
    pub fn input_dtype(&self, compute: Option<DType>) -> Option<DType> {
        let ids = self.blocks.first().is_some_and(|b| {
            b.downcast_ref::<bert::Embeddings>().is_some()
                || b.downcast_ref::<llama::TokenEmbedding>().is_some()
        });
        if ids { None } else { compute }
    }

    /// Replaces parameter values outside autodiff: `f(info, value)` gets each float
    /// parameter's value flattened to `[numel]` (untracked) and returns the new value, or
    /// `None` to keep it. Ids, gradient requirements and checkpointing strategies are kept, as
    /// burn-optim keeps them. For proximal updates and projections after an optimiser step.
    /// A quantized parameter (QLoRA's frozen, packed base) is left as it is, unvisited.
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
                // A quantized parameter is QLoRA's frozen, packed base: nothing updates it, and
                // writing values into it would unpack it.
                if matches!(param.val().dtype(), DType::QFloat(_)) {
                    return param;
                }
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

    /// Number of scalar parameters that require gradients, the ones an optimiser updates (on an
    /// autodiff device): all of them unless a strategy froze some (`lora` freezes the base). A
    /// parameter held by several blocks (tied weights) counts once.
    pub fn trainable_numel(&self) -> usize {
        struct Count(std::collections::HashSet<ParamId>, usize);
        impl ModuleVisitor for Count {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if param.is_require_grad() && self.0.insert(param.id) {
                    self.1 += param.lazy_shape().num_elements();
                }
            }
        }
        let mut c = Count(Default::default(), 0);
        self.visit(&mut c);
        c.1
    }

    /// Bytes the parameters take as the device holds them (a tied one once, adapters
    /// included): `numel ×` the dtype's size for a float parameter, and for a quantized one
    /// (QLoRA's packed base) the bytes of Burn's own data of it (`Tensor::to_data`): its values
    /// as the backend stores them plus one scale a block. On the CPU's flex backend that is one
    /// byte a value whatever the bit width (burn-flex keeps quantized values unpacked as `i8`),
    /// on CubeCL devices values packed into `u32` words. `4 × numel` for a model in `f32`.
    pub fn param_bytes(&self) -> u64 {
        struct Bytes(std::collections::HashSet<ParamId>, u64);
        impl ModuleVisitor for Bytes {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if !self.0.insert(param.id) {
                    return;
                }
                let t = param.val();
                self.1 += match t.dtype() {
                    burn::tensor::DType::QFloat(_) => t.to_data().bytes().len() as u64,
                    d => (param.lazy_shape().num_elements() * d.size()) as u64,
                };
            }
        }
        let mut c = Bytes(Default::default(), 0);
        self.visit(&mut c);
        c.1
    }
}

impl Module for Model {
    fn collect_devices(&self, devices: Vec<Device>) -> Vec<Device> {
        let devices = self.blocks.collect_devices(devices);
        match &self.adapters {
            Some(a) => a.collect_devices(devices),
            None => devices,
        }
    }
    fn fork(self, device: &Device) -> Self {
        Self {
            blocks: self.blocks.fork(device),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters: self
                .adapters
                .map(|a| std::sync::Arc::new(std::sync::Arc::unwrap_or_clone(a).fork(device))),
        }
        .retie()
    }
    fn to_device(self, device: &Device) -> Self {
        Self {
            blocks: self.blocks.to_device(device),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters: self
                .adapters
                .map(|a| std::sync::Arc::new(std::sync::Arc::unwrap_or_clone(a).to_device(device))),
        }
        .retie()
    }
    fn train(self) -> Self {
        Self {
            blocks: self.blocks.train(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters: self
                .adapters
                .map(|a| std::sync::Arc::new(std::sync::Arc::unwrap_or_clone(a).train())),
        }
        .retie()
    }
    fn valid(&self) -> Self {
        Self {
            blocks: self.blocks.valid(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters: self
                .adapters
                .as_ref()
                .map(|a| std::sync::Arc::new(a.valid())),
        }
        .retie()
    }
    fn materialize(self) -> Self {
        Self {
            blocks: self.blocks.materialize(),
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters: self
                .adapters
                .map(|a| std::sync::Arc::new(std::sync::Arc::unwrap_or_clone(a).materialize())),
        }
        .retie()
    }
    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        visitor.enter_module("blocks", "Model");
        self.blocks.visit(visitor);
        visitor.exit_module("blocks", "Model");
        if let Some(a) = &self.adapters {
            visitor.enter_module("adapters", "Model");
            a.visit(visitor);
            visitor.exit_module("adapters", "Model");
        }
    }
    fn map<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        mapper.enter_module("blocks", "Model");
        let blocks = self.blocks.map(mapper);
        mapper.exit_module("blocks", "Model");
        let adapters = self.adapters.map(|a| {
            mapper.enter_module("adapters", "Model");
            let a = std::sync::Arc::unwrap_or_clone(a).map(mapper);
            mapper.exit_module("adapters", "Model");
            std::sync::Arc::new(a)
        });
        Self {
            blocks,
            num_classes: self.num_classes,
            segment_blocks: self.segment_blocks,
            adapters,
        }
        .retie()
    }
}

/// The geometry a model type's `preset` key names in its table `presets` (name, sizes), or
/// `default` when the key is absent: the one lookup of the built-in models with presets
/// (`bert`: layers, hidden, heads, FFN; `llama`: the same with key/value heads and vocabulary).
///
/// # Errors
/// A positioned [`crate::Error::Config`] at `preset` for a name not in the table, listing them.
pub fn preset_geometry<const N: usize>(
    src: &crate::config::ParamSource,
    model: &str,
    presets: &[(&str, [usize; N])],
    name: Option<&str>,
    default: [usize; N],
) -> crate::Result<[usize; N]> {
    let Some(name) = name else {
        return Ok(default);
    };
    match presets.iter().find(|(n, _)| *n == name) {
        Some((_, g)) => Ok(*g),
        None => {
            let names: Vec<String> = presets.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            Err(src.key_error(
                "preset",
                format!("{model}: unknown preset `{name}`"),
                Some(format!("use {}, or leave it out", names.join(", "))),
            ))
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

/// A visited parameter as `(ParamInfo, value)`, the value as the visitor gives it (`[numel]`).
fn flat_value(
    path: &str,
    id: ParamId,
    shape: &[usize],
    t: Tensor<1>,
) -> Option<(ParamInfo, Tensor<1>)> {
    Some((
        ParamInfo {
            path: path.to_string(),
            id,
            shape: shape.to_vec(),
        },
        t,
    ))
}

#[cfg(test)]
mod adapter_tests;

#[cfg(test)]
mod model_tests;
