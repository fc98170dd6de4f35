//! A model's parameters by path: [`ParamInfo`], the visitors that list values and gradients
//! with their dotted paths, and [`unflatten_grads`], their inverse.

use super::{DynBlock, Model};
use burn::module::ModuleMapper;
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

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

type PathFn<'a, T> = dyn FnMut(&str, ParamId, &[usize], Tensor<1>) -> Option<T> + 'a;

/// Visits float parameters with their dotted path; `f` gets the value flattened (a quantized
/// one dequantized to `f32`).
/// A parameter held by several blocks (tied weights: one id) is visited once, at its first
/// path.
pub(super) struct PathVisitor<'a, T> {
    path: Vec<String>,
    seen: std::collections::HashSet<ParamId>,
    f: Box<PathFn<'a, T>>,
    /// Visit only the parameters that require gradients (a frozen one is not read at all: a
    /// packed base is not dequantized).
    trainable_only: bool,
    pub(super) out: Vec<T>,
}

impl<'a, T> PathVisitor<'a, T> {
    pub(super) fn new(f: impl FnMut(&str, ParamId, &[usize], Tensor<1>) -> Option<T> + 'a) -> Self {
        Self {
            path: Vec::new(),
            seen: Default::default(),
            f: Box::new(f),
            trainable_only: false,
            out: Vec::new(),
        }
    }

    /// The same visitor over the parameters that require gradients only.
    pub(super) fn trainable_only(mut self) -> Self {
        self.trainable_only = true;
        self
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
        if !self.seen.insert(param.id) || (self.trainable_only && !param.is_require_grad()) {
            return;
        }
        // A quantized parameter (QLoRA's packed base) is read as its dequantized values.
        let value = param.val();
        let value = match value.dtype() {
            burn::tensor::DType::QFloat(_) => value.dequantize(),
            _ => value,
        };
        let shape = value.dims().to_vec();
        let n = shape.iter().product::<usize>();
        let path = self.path.join(".");
        if let Some(item) = (self.f)(&path, param.id, &shape, value.reshape([n])) {
            self.out.push(item);
        }
    }
}

/// Like [`PathVisitor`], a tied parameter's gradient is listed once.
pub(super) struct GradVisitor<'a> {
    pub(super) path: Vec<String>,
    pub(super) seen: std::collections::HashSet<ParamId>,
    pub(super) grads: &'a GradientsParams,
    pub(super) out: Vec<(ParamInfo, Tensor<1>)>,
}

impl ModuleVisitor for GradVisitor<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
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

/// `blocks` with every parameter that appears under one [`ParamId`] in several places (tied
/// weights) made one tensor again, the value of its first occurrence in module order (see
/// `Model::retie`); returned as they are when no id repeats.
pub(super) fn retie(blocks: Vec<DynBlock>) -> Vec<DynBlock> {
    struct Ids(std::collections::HashSet<ParamId>, bool);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.1 |= !self.0.insert(param.id);
        }
    }
    let mut ids = Ids(Default::default(), false);
    blocks.visit(&mut ids);
    if !ids.1 {
        return blocks;
    }
    struct Retie(std::collections::HashMap<ParamId, Box<dyn std::any::Any>>);
    impl ModuleMapper for Retie {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            match self.0.get(&param.id) {
                Some(first) => first
                    .downcast_ref::<Param<Tensor<D>>>()
                    .cloned()
                    .unwrap_or(param),
                None => {
                    self.0.insert(param.id, Box::new(param.clone()));
                    param
                }
            }
        }
    }
    blocks.map(&mut Retie(Default::default()))
}
