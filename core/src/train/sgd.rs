//! engram's SGD: stochastic gradient descent with classical momentum and L2 weight decay, its
//! update fused into one pass over each parameter.
//!
//! The arithmetic is burn-optim's [`Sgd`](burn::optim::Sgd) with no dampening and no Nesterov
//! term (PyTorch's `torch.optim.SGD` with `momentum = μ`, `weight_decay = λ`), element by element:
//!
//! ```text
//! g ← θ·λ + g            (weight decay, when set)
//! v ← g + v·μ            (momentum; v ← g on a parameter's first step)
//! θ ← θ − v·η
//! ```
//!
//! Sutskever et al. 2013, "On the importance of initialization and momentum in deep learning",
//! eq. 1–2 in PyTorch's form (the learning rate applied to the velocity, not inside it).
//!
//! burn-optim runs this as five tensor operations per parameter (`g·1`, `v·μ`, their sum,
//! `v·η`, `θ − …`), each a pass over the parameter's memory and a new buffer. On Burn's CPU
//! backend (Flex) engram runs it as one pass that updates θ and v where they lie, split across
//! the thread pool: the same operations in the same order on every element (no fused
//! multiply-add), so the result is bit for bit burn-optim's. On any other device, or for a
//! tensor that is not a plain `f32` buffer, it runs the same formula as tensor operations.
//!
//! The state records under burn-optim's names (`momentum.velocity`), so a checkpoint written
//! with burn-optim's SGD loads here and the other way round.

use burn::backend::flex::FlexTensor;
use burn::backend::{BackendTensor, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind};
use burn::optim::{LearningRate, Optimizer, RecordState, StateSink, StateSource, join_path};
use burn::tensor::{DType, Device, Tensor};
use rayon::prelude::*;

/// SGD with classical momentum and L2 weight decay, fused on the CPU (module docs).
/// Wrap it in a [`ModuleOptimizer`](burn::optim::ModuleOptimizer) (`ModuleOptimizer::from`).
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Momentum μ (none: plain SGD).
    momentum: Option<f32>,
    /// L2 penalty λ added to the gradient as `θ·λ` (none: no weight decay).
    weight_decay: Option<f32>,
}

impl Sgd {
    /// SGD with momentum `momentum` (none at 0) and weight decay `penalty` (`None`: none).
    /// Values are rounded to `f32`, as burn-optim does.
    pub fn new(momentum: f64, penalty: Option<f32>) -> Self {
        Self {
            momentum: (momentum > 0.0).then_some(momentum as f32),
            weight_decay: penalty,
        }
    }
}

/// The state of one parameter of rank `D`: its velocity `v` (same shape as the parameter) when
/// momentum is on.
#[derive(Clone)]
pub struct SgdState<const D: usize> {
    /// The velocity, `None` without momentum.
    pub velocity: Option<Tensor<D>>,
}

/// burn-optim's record layout for its `SgdState { momentum: Option<MomentumState { velocity }> }`.
const MOMENTUM: &str = "momentum";
const VELOCITY: &str = "velocity";

impl<const D: usize> RecordState for SgdState<D> {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        if let Some(v) = &self.velocity {
            out.push_tensor(
                &join_path(prefix, MOMENTUM),
                VELOCITY,
                v.clone().into_data(),
            );
        }
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, device: &Device) -> Option<Self> {
        let path = join_path(prefix, MOMENTUM);
        let velocity = if src.has_under(&path) {
            Some(Tensor::from_data(src.take_tensor(&path, VELOCITY)?, device))
        } else {
            None
        };
        Some(Self { velocity })
    }
}

impl Optimizer for Sgd {
    type State<const D: usize> = SgdState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let velocity = state.and_then(|s| s.velocity);
        let (tensor, velocity) = match fused(self, lr as f32, tensor, grad, velocity) {
            Ok(done) => done,
            Err(back) => {
                let (tensor, grad, velocity) = *back;
                self.by_tensor_ops(lr, tensor, grad, velocity)
            }
        };
        (tensor, Some(SgdState { velocity }))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        SgdState {
            velocity: state.velocity.map(|v| v.to_device(device)),
        }
    }
}

type Update<const D: usize> = (Tensor<D>, Option<Tensor<D>>);

impl Sgd {
    /// The update as Burn tensor operations (any device), in the fused loop's order.
    fn by_tensor_ops<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        mut grad: Tensor<D>,
        velocity: Option<Tensor<D>>,
    ) -> Update<D> {
        if let Some(penalty) = self.weight_decay {
            grad = tensor.clone().mul_scalar(penalty).add(grad);
        }
        let velocity = self.momentum.map(|m| match velocity {
            Some(v) => grad.clone().add(v.mul_scalar(m)),
            None => grad.clone(),
        });
        let delta = velocity.clone().unwrap_or(grad).mul_scalar(lr);
        (tensor - delta, velocity)
    }
}

/// The step's tensors handed back unchanged when one is not a whole Flex `f32` buffer.
type NotFlex<const D: usize> = Box<(Tensor<D>, Tensor<D>, Option<Tensor<D>>)>;

/// The Flex `f32` buffer behind `t`, or `t` back.
fn flex_f32<const D: usize>(t: Tensor<D>) -> Result<FlexTensor, Box<Tensor<D>>> {
    let d = t.into_dispatch();
    let plain = d.autodiff == DispatchAutodiffContext::Disabled;
    match d.kind {
        DispatchTensorKind::Flex(BackendTensor::Float(f))
            if plain && f.dtype() == DType::F32 && whole_buffer(&f) =>
        {
            Ok(f)
        }
        kind => Err(Box::new(Tensor::from_dispatch(DispatchTensor {
            kind,
            autodiff: d.autodiff,
        }))),
    }
}

/// Whether `f`'s elements are its whole storage, in order (so a slice of the storage is the
/// tensor).
fn whole_buffer(f: &FlexTensor) -> bool {
    let n = f.layout().shape().num_elements();
    f.layout().contiguous_offsets() == Some((0, n)) && f.bytes().len() == n * 4
}

fn to_tensor<const D: usize>(f: FlexTensor) -> Tensor<D> {
    Tensor::from_dispatch(DispatchTensor {
        kind: DispatchTensorKind::Flex(BackendTensor::Float(f)),
        autodiff: DispatchAutodiffContext::Disabled,
    })
}

/// The fused update on Flex (module docs), or the inputs back when one of them is not a whole
/// `f32` Flex buffer.
fn fused<const D: usize>(
    sgd: &Sgd,
    lr: f32,
    tensor: Tensor<D>,
    grad: Tensor<D>,
    velocity: Option<Tensor<D>>,
) -> Result<Update<D>, NotFlex<D>> {
    let back = |t: Result<FlexTensor, Box<Tensor<D>>>| t.map_or_else(|t| *t, to_tensor);
    let (p, g) = (flex_f32(tensor), flex_f32(grad));
    let v = velocity.map(flex_f32);
    let (mut p, mut g) = match (p, g) {
        (Ok(p), Ok(g)) => (p, g),
        (p, g) => return Err(Box::new((back(p), back(g), v.map(back)))),
    };
    let v = match v {
        Some(Err(v)) => return Err(Box::new((to_tensor(p), to_tensor(g), Some(*v)))),
        Some(Ok(v)) => Some(v),
        None => None,
    };
    let shape = p.layout().shape();
    if g.layout().shape() != shape || v.as_ref().is_some_and(|v| v.layout().shape() != shape) {
        // Burn's own operations report the mismatch.
        return Err(Box::new((to_tensor(p), to_tensor(g), v.map(to_tensor))));
    }
    let k = Coefficients {
        lr,
        weight_decay: sgd.weight_decay,
    };
    // `storage_mut` copies a buffer another tensor still holds (copy-on-write), so a shared
    // parameter is never written under its other holder.
    let v = match (v, sgd.momentum) {
        (Some(mut v), Some(m)) => {
            let (ps, vs) = (p.storage_mut::<f32>(), v.storage_mut::<f32>());
            split3(ps, vs, g.storage::<f32>(), |p, v, g| {
                k.with_velocity(p, v, g, m)
            });
            Some(v)
        }
        (_, Some(_)) => {
            // A parameter's first step: the velocity is the (decayed) gradient, in its buffer.
            let (ps, gs) = (p.storage_mut::<f32>(), g.storage_mut::<f32>());
            split2(ps, gs, |p, g| k.first_momentum_step(p, g));
            Some(g)
        }
        (_, None) => {
            let ps = p.storage_mut::<f32>();
            split2r(ps, g.storage::<f32>(), |p, g| k.plain(p, g));
            None
        }
    };
    Ok((to_tensor(p), v.map(to_tensor)))
}

/// The scalars of one step.
#[derive(Clone, Copy)]
struct Coefficients {
    lr: f32,
    weight_decay: Option<f32>,
}

impl Coefficients {
    #[inline(always)]
    fn decayed(&self, p: f32, g: f32) -> f32 {
        match self.weight_decay {
            Some(l) => p * l + g,
            None => g,
        }
    }

    fn with_velocity(&self, p: &mut [f32], v: &mut [f32], g: &[f32], m: f32) {
        for ((p, v), &g) in p.iter_mut().zip(v.iter_mut()).zip(g) {
            *v = self.decayed(*p, g) + *v * m;
            *p -= *v * self.lr;
        }
    }

    fn first_momentum_step(&self, p: &mut [f32], g: &mut [f32]) {
        for (p, g) in p.iter_mut().zip(g.iter_mut()) {
            *g = self.decayed(*p, *g);
            *p -= *g * self.lr;
        }
    }

    fn plain(&self, p: &mut [f32], g: &[f32]) {
        for (p, &g) in p.iter_mut().zip(g) {
            *p -= self.decayed(*p, g) * self.lr;
        }
    }
}

/// Fewest elements worth splitting across the pool: PyTorch's `at::internal::GRAIN_SIZE`, as in
/// the vendored Flex's elementwise kernels.
const GRAIN: usize = 32 * 1024;

/// Chunk length for `len` elements: about four a thread, or the whole slice when it is short or
/// the pool has one thread.
fn chunk_len(len: usize) -> usize {
    let threads = rayon::current_num_threads();
    if len < GRAIN || threads == 1 {
        return len.max(1);
    }
    len.div_ceil(threads * 4).max(GRAIN / 4)
}

/// Runs `f` over matching chunks of `a` and `b` (equal lengths), split across the pool.
fn split2(a: &mut [f32], b: &mut [f32], f: impl Fn(&mut [f32], &mut [f32]) + Sync) {
    let n = chunk_len(a.len());
    a.par_chunks_mut(n)
        .zip(b.par_chunks_mut(n))
        .for_each(|(a, b)| f(a, b));
}

/// As [`split2`], `b` read-only.
fn split2r(a: &mut [f32], b: &[f32], f: impl Fn(&mut [f32], &[f32]) + Sync) {
    let n = chunk_len(a.len());
    a.par_chunks_mut(n)
        .zip(b.par_chunks(n))
        .for_each(|(a, b)| f(a, b));
}

/// As [`split2`], over three slices, `c` read-only.
fn split3(
    a: &mut [f32],
    b: &mut [f32],
    c: &[f32],
    f: impl Fn(&mut [f32], &mut [f32], &[f32]) + Sync,
) {
    let n = chunk_len(a.len());
    a.par_chunks_mut(n)
        .zip(b.par_chunks_mut(n))
        .zip(c.par_chunks(n))
        .for_each(|((a, b), c)| f(a, b, c));
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig, decay::WeightDecayConfig};
    use burn::tensor::{Distribution, TensorData};

    fn bits<const D: usize>(t: &Tensor<D>) -> Vec<u32> {
        t.to_data()
            .try_to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    fn on_three_threads<R: Send>(f: impl FnOnce() -> R + Send) -> R {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(f)
    }

    fn burn_sgd(momentum: f64, penalty: Option<f32>) -> burn::optim::Sgd {
        SgdConfig::new()
            .with_momentum((momentum > 0.0).then_some(MomentumConfig {
                momentum,
                dampening: 0.0,
                nesterov: false,
            }))
            .with_weight_decay(penalty.map(|penalty| WeightDecayConfig { penalty }))
            .build()
    }

    /// Two steps by hand: θ = [1, −2], g = [0.5, 0.25] both times, η = 0.1, μ = 0.9.
    /// Step 1: v = g, θ = [0.95, −2.025]. Step 2: v = g + 0.9·v = [0.95, 0.475],
    /// θ = [0.855, −2.0725]. With λ = 0.1 the first gradient is θ·λ + g = [0.6, 0.05].
    #[test]
    fn two_steps_match_the_hand_computed_update() {
        let d = Device::flex();
        let t = |v: [f32; 2]| Tensor::<1>::from_data(TensorData::from(v), &d);
        let close = |a: &Tensor<1>, want: [f32; 2]| {
            let got = a.to_data().try_to_vec::<f32>().unwrap();
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
            }
        };
        let sgd = Sgd::new(0.9, None);
        let (p, s) = sgd.step(0.1, t([1.0, -2.0]), t([0.5, 0.25]), None);
        close(&p, [0.95, -2.025]);
        close(s.as_ref().unwrap().velocity.as_ref().unwrap(), [0.5, 0.25]);
        let (p, s) = sgd.step(0.1, p, t([0.5, 0.25]), s);
        close(&p, [0.855, -2.0725]);
        close(s.unwrap().velocity.as_ref().unwrap(), [0.95, 0.475]);

        let decayed = Sgd::new(0.9, Some(0.1));
        let (p, s) = decayed.step(0.1, t([1.0, -2.0]), t([0.5, 0.25]), None);
        close(&p, [0.94, -2.005]);
        close(s.unwrap().velocity.as_ref().unwrap(), [0.6, 0.05]);

        let plain = Sgd::new(0.0, None);
        let (p, s) = plain.step(0.1, t([1.0, -2.0]), t([0.5, 0.25]), None);
        close(&p, [0.95, -2.025]);
        assert!(s.unwrap().velocity.is_none());
    }

    /// Bit for bit burn-optim's SGD over five steps of random gradients, with and without
    /// momentum and weight decay, on a tensor long enough to be split across three threads
    /// (odd length: a short last chunk); and the fused path really runs (the parameter is
    /// updated in its own buffer).
    #[test]
    fn fused_steps_equal_burn_optims_sgd_bit_for_bit() {
        let d = Device::flex();
        for (momentum, penalty) in [
            (0.9, None),
            (0.9, Some(5e-4)),
            (0.0, None),
            (0.0, Some(0.01)),
        ] {
            on_three_threads(|| {
                let ours = Sgd::new(momentum, penalty);
                let theirs = burn_sgd(momentum, penalty);
                let start = Tensor::<2>::random([301, 333], Distribution::Default, &d);
                let (mut p, mut q) = (start.clone(), start);
                let (mut s, mut r) = (None, None);
                for step in 0..5 {
                    let g = Tensor::<2>::random([301, 333], Distribution::Normal(0.0, 1.0), &d);
                    let buffer = p.clone().into_dispatch();
                    let before = match &buffer.kind {
                        DispatchTensorKind::Flex(BackendTensor::Float(f)) => f.bytes().as_ptr(),
                        _ => unreachable!("a Flex tensor"),
                    };
                    p = Tensor::from_dispatch(buffer);
                    (p, s) = ours.step(0.05, p, g.clone(), s);
                    (q, r) = burn::optim::Optimizer::step(&theirs, 0.05, q, g, r);
                    assert_eq!(
                        bits(&p),
                        bits(&q),
                        "μ {momentum}, λ {penalty:?}, step {step}"
                    );
                    let after = match p.clone().into_dispatch().kind {
                        DispatchTensorKind::Flex(BackendTensor::Float(f)) => f.bytes().as_ptr(),
                        _ => unreachable!("a Flex tensor"),
                    };
                    if step > 0 {
                        // (Step 0's parameter shares its buffer with `q`: copied, not written.)
                        assert_eq!(before, after, "updated in place");
                    }
                }
            });
        }
    }

    /// A parameter another tensor still holds is not written under it (copy-on-write), and a
    /// tensor that is no whole buffer (a transposed view) takes the tensor-operation path to the
    /// same bits.
    #[test]
    fn shared_and_strided_parameters_are_stepped_without_aliasing() {
        let d = Device::flex();
        let sgd = Sgd::new(0.9, Some(1e-3));
        let p = Tensor::<2>::random([64, 48], Distribution::Default, &d);
        let g = Tensor::<2>::random([64, 48], Distribution::Default, &d);
        let kept = bits(&p);
        let (stepped, s) = sgd.step(0.1, p.clone(), g.clone(), None);
        assert_eq!(bits(&p), kept, "the other holder's values are untouched");
        assert_ne!(bits(&stepped), kept);
        let (twice, _) = sgd.step(0.1, stepped.clone(), g.clone(), s.clone());

        // A [64, 48] view of a [64, 50] buffer: not a whole buffer, so not fused.
        let view = |t: &Tensor<2>| {
            let wide = Tensor::cat(vec![t.clone(), t.clone().slice([0..64, 0..2])], 1);
            wide.slice([0..64, 0..48])
        };
        assert!(fused(&sgd, 0.1, view(&p), g.clone(), None).is_err());
        let (strided, s2) = sgd.step(0.1, view(&p), g.clone(), None);
        assert_eq!(bits(&strided), bits(&stepped));
        let v = s2.unwrap().velocity.unwrap();
        let velocity = Some(view(&v));
        let (strided_twice, _) = sgd.step(0.1, stepped, g, Some(SgdState { velocity }));
        assert_eq!(bits(&strided_twice), bits(&twice));
    }

    /// The state records under burn-optim's names: a record written by either optimiser loads
    /// into the other, and the next step is the same bits.
    #[test]
    fn records_load_across_burn_optims_sgd_and_ours() {
        let d = Device::flex().autodiff();
        let model: Linear = LinearConfig::new(40, 30).init(&d);
        let grads = |m: &Linear, scale: f32| {
            let mut g = GradientsParams::new();
            let w = m.weight.val().inner().ones_like().mul_scalar(scale);
            g.register(m.weight.id, w);
            let b = m.bias.as_ref().unwrap();
            g.register(b.id, b.val().inner().ones_like().mul_scalar(-scale));
            g
        };
        let burn_optim = || ModuleOptimizer::from(burn_sgd(0.9, Some(1e-2)));
        let ours = || ModuleOptimizer::from(Sgd::new(0.9, Some(1e-2)));
        let (mut a, mut b) = (burn_optim(), ours());
        let (mut ma, mut mb) = (model.clone(), model);
        for scale in [1.0, 0.25] {
            ma = a.step(0.1, ma.clone(), grads(&ma, scale));
            mb = b.step(0.1, mb.clone(), grads(&mb, scale));
        }
        let mut a_in_ours = ours().from_bytes(a.into_bytes().unwrap()).unwrap();
        let mut b_in_burn = burn_optim().from_bytes(b.into_bytes().unwrap()).unwrap();
        let next = |o: &mut ModuleOptimizer, m: &Linear| o.step(0.1, m.clone(), grads(m, -0.5));
        let (wa, wb) = (next(&mut a_in_ours, &ma), next(&mut b_in_burn, &mb));
        let (wa2, wb2) = (next(&mut a, &ma), next(&mut b, &mb));
        let w = |m: &Linear| bits(&m.weight.val());
        assert_eq!(w(&wa), w(&wa2), "burn-optim's record in ours");
        assert_eq!(w(&wb), w(&wb2), "our record in burn-optim's");
        assert_eq!(w(&wa), w(&wb));
        assert_ne!(w(&wa), w(&ma), "the velocity moved the weights");
    }
}
