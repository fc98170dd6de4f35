//! A model's parameters by path: [`ParamInfo`], the visitors that list values and gradients
//! with their dotted paths, and [`unflatten_grads`], their inverse.

use super::Model;
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

/// Visits float parameters with their dotted path; `f` gets the value flattened.
pub(super) struct PathVisitor<'a, T> {
    path: Vec<String>,
    f: Box<PathFn<'a, T>>,
    pub(super) out: Vec<T>,
}

impl<'a, T> PathVisitor<'a, T> {
    pub(super) fn new(f: impl FnMut(&str, ParamId, &[usize], Tensor<1>) -> Option<T> + 'a) -> Self {
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

pub(super) struct GradVisitor<'a> {
    pub(super) path: Vec<String>,
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
