//! Tests of the model: paths, gradients through boxed blocks, mixed precision's dtypes.
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

/// A block whose batch norm is a field named `bn` (no `norm` in its path).
#[derive(burn::module::Module, Debug)]
struct BnBlock {
    linear: burn::nn::Linear,
    bn: burn::nn::BatchNorm,
}

/// The same block with the batch norm under the name `norm`.
#[derive(burn::module::Module, Debug)]
struct NormBlock {
    linear: burn::nn::Linear,
    norm: burn::nn::BatchNorm,
}

fn linear_bn(linear: &burn::nn::Linear, bn: &burn::nn::BatchNorm, x: Activation) -> Activation {
    let y = linear.forward(x.into_flat());
    let [b, c] = y.dims();
    let y = super::cnn::batch_norm(bn, y.reshape([b, c, 1, 1]), false);
    Activation::Flat(y.reshape([b, c]))
}

impl Block for BnBlock {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        linear_bn(&self.linear, &self.bn, x)
    }
    fn kind(&self) -> &'static str {
        "bn"
    }
}

impl Block for NormBlock {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        linear_bn(&self.linear, &self.norm, x)
    }
    fn kind(&self) -> &'static str {
        "norm"
    }
}

/// Each float parameter's path and dtype.
fn dtypes(m: &Model) -> Vec<(String, DType)> {
    struct Dt(Vec<String>, Vec<(String, DType)>);
    impl ModuleVisitor for Dt {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.0.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.0.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.1.push((self.0.join("."), param.val().dtype()));
        }
    }
    let mut d = Dt(Vec::new(), Vec::new());
    m.visit(&mut d);
    d.1
}

/// AMP keeps a block's normalisation in `f32` by the layer's type, not its field's name: a
/// `BatchNorm` named `bn` stays `f32` and computes exactly what the one named `norm` does.
#[test]
fn amp_keeps_batch_norm_f32_whatever_its_name() {
    let ad = Device::flex().autodiff();
    ad.seed(3);
    let linear = burn::nn::LinearConfig::new(6, 4).init(&ad);
    let bn = burn::nn::BatchNormConfig::new(4).init(&ad);
    let with_bn = Model::new(
        vec![DynBlock::new(BnBlock {
            linear: linear.clone(),
            bn: bn.clone(),
        })],
        4,
    );
    let with_norm = Model::new(vec![DynBlock::new(NormBlock { linear, norm: bn })], 4);
    let (a, b) = (
        with_bn.compute_view(Some(DType::F16)),
        with_norm.compute_view(Some(DType::F16)),
    );
    assert_eq!(
        dtypes(&a),
        [
            ("blocks.0.linear.weight".to_string(), DType::F16),
            ("blocks.0.linear.bias".to_string(), DType::F16),
            ("blocks.0.bn.gamma".to_string(), DType::F32),
            ("blocks.0.bn.beta".to_string(), DType::F32),
            ("blocks.0.bn.running_mean".to_string(), DType::F32),
            ("blocks.0.bn.running_var".to_string(), DType::F32),
        ]
    );
    let dt: Vec<DType> = dtypes(&b).into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        dt,
        [
            DType::F16,
            DType::F16,
            DType::F32,
            DType::F32,
            DType::F32,
            DType::F32
        ]
    );
    let xv: Vec<f32> = (0..24).map(|i| ((i * 5 % 13) as f32 - 6.0) / 4.0).collect();
    let x = Tensor::<2>::from_data(TensorData::new(xv, [4, 6]), &ad).cast(DType::F16);
    let run = |m: &Model| {
        m.forward(Activation::Flat(x.clone()), &ForwardCtx::training(None))
            .cast(DType::F32)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    };
    let (ya, yb) = (run(&a), run(&b));
    assert_eq!(ya.len(), 16);
    assert_eq!(ya, yb);
    assert!(ya.iter().all(|v| v.is_finite()));
}
