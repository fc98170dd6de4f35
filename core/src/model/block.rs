//! A stage of a model: the [`Block`] a user implements for any Burn module, its object-safe
//! face ([`ErasedBlock`]) and the boxed [`DynBlock`] that is itself a Burn [`Module`].

use super::bridge::{
    DynMapper, DynVisitor, FromDynMapper, FromDynVisitor, ToDynMapper, ToDynVisitor,
};
use super::{Activation, ForwardCtx};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::{Device, Tensor};
use std::any::Any;
use std::fmt::Debug;

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

    /// The parameters that stay `f32` when a mixed-precision step computes in `f16`/`bf16`
    /// ([`Model::compute_view`](super::Model::compute_view)); the block's forward must then run
    /// them in `f32` (as [`norm_f32`](super::norm_f32) and [`cnn::batch_norm`](super::cnn::batch_norm)
    /// do). Default: every parameter of a normalisation layer inside the block, found by its
    /// type ([`norm_params`]: Burn's `BatchNorm`, `LayerNorm`, `RmsNorm`, `GroupNorm`,
    /// `InstanceNorm`), whatever its field is called. Running statistics are no parameters and
    /// are never cast. Override it for a normalisation of your own.
    fn full_precision(&self) -> Vec<ParamId> {
        norm_params(self)
    }

    /// The number of token ids the block looks up, for a block that embeds token ids (BERT's
    /// and Llama's embeddings: the rows of the table `[vocab, hidden]`); an id at or above it
    /// would index past the table. Default `None`: the block takes no token ids. The trainer
    /// checks a token dataset's ids against the first block's before a run starts.
    fn token_vocab(&self) -> Option<usize> {
        None
    }
}

/// The container types (as Burn's `Module` derive names them to a visitor, `Struct:NAME`)
/// whose parameters [`norm_params`] keeps in `f32`: Burn's normalisation layers.
pub const NORM_TYPES: [&str; 5] = [
    "Struct:BatchNorm",
    "Struct:LayerNorm",
    "Struct:RmsNorm",
    "Struct:GroupNorm",
    "Struct:InstanceNorm",
];

/// The ids of every float parameter of `module` that belongs directly to one of Burn's
/// normalisation layers ([`NORM_TYPES`]), found by the type of the module holding it (never by
/// its path), in module order: [`Block::full_precision`]'s default.
pub fn norm_params<M: Module>(module: &M) -> Vec<ParamId> {
    struct Norms {
        containers: Vec<String>,
        out: Vec<ParamId>,
    }
    impl ModuleVisitor for Norms {
        fn enter_module(&mut self, _name: &str, container_type: &str) {
            self.containers.push(container_type.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.containers.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self
                .containers
                .last()
                .is_some_and(|c| NORM_TYPES.contains(&c.as_str()))
            {
                self.out.push(param.id);
            }
        }
    }
    let mut v = Norms {
        containers: Vec::new(),
        out: Vec::new(),
    };
    module.visit(&mut v);
    v.out
}

/// The object-safe face of a [`Block`]. Implemented for every `Block`; not for direct use.
pub trait ErasedBlock: Send + Debug {
    /// See [`Block::forward`].
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation;
    /// See [`Block::kind`].
    fn kind(&self) -> &'static str;
    /// See [`Block::batch_statistics`].
    fn batch_statistics(&self) -> bool;
    /// See [`Block::full_precision`].
    fn full_precision(&self) -> Vec<ParamId>;
    /// See [`Block::token_vocab`].
    fn token_vocab(&self) -> Option<usize>;
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
    fn full_precision(&self) -> Vec<ParamId> {
        Block::full_precision(self)
    }
    fn token_vocab(&self) -> Option<usize> {
        Block::token_vocab(self)
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
pub struct DynBlock(pub(super) Box<dyn ErasedBlock>);

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
