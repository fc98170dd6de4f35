//! Object-safe bridges over Burn's generic module visitors and mappers.
//!
//! Burn's [`ModuleVisitor`] and [`ModuleMapper`] have const-generic methods
//! (`visit_float::<D>`), so a `Box<dyn …>` of a Burn module cannot be visited. engram erases the
//! rank on the way into a boxed block ([`ToDynVisitor`], [`ToDynMapper`]) and restores it on the
//! way out ([`FromDynVisitor`], [`FromDynMapper`]) by dispatching on the runtime rank, so that a
//! [`Model`](super::Model) made of boxed blocks is still a full Burn [`Module`]: the optimiser,
//! burnpack records, `valid()` and parameter groups all see every parameter with its real rank.
//!
//! Ranks 1 to 6 are supported, which covers every layer Burn ships (conv kernels are rank 4).

use burn::module::{Flag, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Bool, Int, Tensor};
use std::any::Any;

/// Object-safe visitor: one call per parameter with its rank erased.
pub trait DynVisitor {
    /// A float parameter `&Param<Tensor<rank>>`, as `&dyn Any`.
    fn visit_float(&mut self, rank: usize, param: &dyn Any);
    /// An int parameter `&Param<Tensor<rank, Int>>`, as `&dyn Any`.
    fn visit_int(&mut self, rank: usize, param: &dyn Any);
    /// A bool parameter `&Param<Tensor<rank, Bool>>`, as `&dyn Any`.
    fn visit_bool(&mut self, rank: usize, param: &dyn Any);
    /// A module-owned training flag.
    fn visit_flag(&mut self, flag: &Param<Flag>);
    /// Entering a sub-module named `name`.
    fn enter_module(&mut self, name: &str, container_type: &str);
    /// Leaving a sub-module named `name`.
    fn exit_module(&mut self, name: &str, container_type: &str);
}

/// Object-safe mapper: one call per parameter with its rank erased.
pub trait DynMapper {
    /// A float parameter `Param<Tensor<rank>>`, boxed; must return the same type.
    fn map_float(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send>;
    /// An int parameter `Param<Tensor<rank, Int>>`, boxed; must return the same type.
    fn map_int(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send>;
    /// A bool parameter `Param<Tensor<rank, Bool>>`, boxed; must return the same type.
    fn map_bool(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send>;
    /// A module-owned training flag.
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag>;
    /// Entering a sub-module named `name`.
    fn enter_module(&mut self, name: &str, container_type: &str);
    /// Leaving a sub-module named `name`.
    fn exit_module(&mut self, name: &str, container_type: &str);
}

macro_rules! dispatch_rank {
    ($rank:expr, $d:ident => $body:expr) => {
        match $rank {
            1 => {
                const $d: usize = 1;
                $body
            }
            2 => {
                const $d: usize = 2;
                $body
            }
            3 => {
                const $d: usize = 3;
                $body
            }
            4 => {
                const $d: usize = 4;
                $body
            }
            5 => {
                const $d: usize = 5;
                $body
            }
            6 => {
                const $d: usize = 6;
                $body
            }
            other => unreachable!("engram blocks support parameter ranks 1..=6, found {other}"),
        }
    };
}

/// Turns the generic calls of a concrete Burn module into [`DynVisitor`] calls.
pub(crate) struct ToDynVisitor<'a> {
    pub(crate) inner: &'a mut dyn DynVisitor,
}

impl ModuleVisitor for ToDynVisitor<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.inner.visit_float(D, param);
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        self.inner.visit_int(D, param);
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        self.inner.visit_bool(D, param);
    }
    fn visit_flag(&mut self, flag: &Param<Flag>) {
        self.inner.visit_flag(flag);
    }
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.inner.enter_module(name, container_type);
    }
    fn exit_module(&mut self, name: &str, container_type: &str) {
        self.inner.exit_module(name, container_type);
    }
}

/// Turns the generic calls of a concrete Burn module into [`DynMapper`] calls.
pub(crate) struct ToDynMapper<'a> {
    pub(crate) inner: &'a mut dyn DynMapper,
}

fn unbox<T: 'static>(value: Box<dyn Any + Send>) -> T {
    *value
        .downcast::<T>()
        .unwrap_or_else(|_| unreachable!("a DynMapper returned a parameter of another type"))
}

impl ModuleMapper for ToDynMapper<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        unbox(self.inner.map_float(D, Box::new(param)))
    }
    fn map_int<const D: usize>(&mut self, param: Param<Tensor<D, Int>>) -> Param<Tensor<D, Int>> {
        unbox(self.inner.map_int(D, Box::new(param)))
    }
    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<D, Bool>>,
    ) -> Param<Tensor<D, Bool>> {
        unbox(self.inner.map_bool(D, Box::new(param)))
    }
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        self.inner.map_flag(flag)
    }
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.inner.enter_module(name, container_type);
    }
    fn exit_module(&mut self, name: &str, container_type: &str) {
        self.inner.exit_module(name, container_type);
    }
}

/// Restores the rank and forwards to a concrete [`ModuleVisitor`].
pub(crate) struct FromDynVisitor<'a, V> {
    pub(crate) visitor: &'a mut V,
}

fn cast<T: 'static>(param: &dyn Any) -> &T {
    param
        .downcast_ref::<T>()
        .unwrap_or_else(|| unreachable!("a parameter's rank disagrees with its type"))
}

impl<V: ModuleVisitor> DynVisitor for FromDynVisitor<'_, V> {
    fn visit_float(&mut self, rank: usize, param: &dyn Any) {
        dispatch_rank!(rank, D => self.visitor.visit_float(cast::<Param<Tensor<D>>>(param)))
    }
    fn visit_int(&mut self, rank: usize, param: &dyn Any) {
        dispatch_rank!(rank, D => self.visitor.visit_int(cast::<Param<Tensor<D, Int>>>(param)))
    }
    fn visit_bool(&mut self, rank: usize, param: &dyn Any) {
        dispatch_rank!(rank, D => self.visitor.visit_bool(cast::<Param<Tensor<D, Bool>>>(param)))
    }
    fn visit_flag(&mut self, flag: &Param<Flag>) {
        self.visitor.visit_flag(flag);
    }
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.visitor.enter_module(name, container_type);
    }
    fn exit_module(&mut self, name: &str, container_type: &str) {
        self.visitor.exit_module(name, container_type);
    }
}

/// Restores the rank and forwards to a concrete [`ModuleMapper`].
pub(crate) struct FromDynMapper<'a, M> {
    pub(crate) mapper: &'a mut M,
}

impl<M: ModuleMapper> DynMapper for FromDynMapper<'_, M> {
    fn map_float(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send> {
        dispatch_rank!(rank, D => Box::new(self.mapper.map_float(unbox::<Param<Tensor<D>>>(param))))
    }
    fn map_int(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send> {
        dispatch_rank!(rank, D => Box::new(self.mapper.map_int(unbox::<Param<Tensor<D, Int>>>(param))))
    }
    fn map_bool(&mut self, rank: usize, param: Box<dyn Any + Send>) -> Box<dyn Any + Send> {
        dispatch_rank!(rank, D => Box::new(self.mapper.map_bool(unbox::<Param<Tensor<D, Bool>>>(param))))
    }
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        self.mapper.map_flag(flag)
    }
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.mapper.enter_module(name, container_type);
    }
    fn exit_module(&mut self, name: &str, container_type: &str) {
        self.mapper.exit_module(name, container_type);
    }
}
