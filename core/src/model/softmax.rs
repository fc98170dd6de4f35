//! The softmax over the last dimension, as one autodiff node on the CPU.
//!
//! Burn's autodiff has no softmax of its own: [`activation::softmax`] under autodiff is the
//! backend trait's default composition (a detached row maximum, a subtraction, `exp`, a row sum
//! and a division: Burn 0.22.1 `ActivationOps::softmax`), five nodes whose forward and backward
//! are each a pass over the whole `[batch, heads, tokens, tokens]` attention tensor, about a
//! tenth of a MiniLM training step on one thread (`bench/profile/README.md`, stop 59). On Flex
//! with f32, [`softmax_last`] is one node instead: the vendored kernel
//! (`burn_flex::ops::softmax_train`) computes the same operations on each element in the same
//! order, a block of rows at a time, so its output and gradient are the composition's bits
//! (`vendor::softmax_train_is_the_composition_bit_for_bit` checks it): no accuracy moves, only
//! time and memory. Its backward keeps `exp(x − max)` and the row sums, one tensor of `x`'s size
//! fewer than the composition keeps.
//! Everywhere else (another backend or dtype, no autodiff) it is [`activation::softmax`].
//! engram's own softmaxes go through it: BERT's attention and the mixture-of-LoRA router's
//! gates and probabilities.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::flex::ops::softmax_train;
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::{
    Autodiff, AutodiffBackend, BackendTensor, DispatchAutodiffContext, DispatchTensor,
    DispatchTensorKind, GradientCheckpointingStrategy, TensorMetadata,
};
use burn::tensor::{DType, Tensor, activation};

/// `softmax(x)` over the last dimension of `x` (`[.., n]` → `[.., n]`, each row summing to 1):
/// [`activation::softmax`]'s values and gradients, computed as one autodiff node when `x` is an
/// f32 Flex tensor under autodiff (module docs).
///
/// # Panics
/// As [`activation::softmax`]: when the last dimension is empty.
pub fn softmax_last<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let d = x.into_dispatch();
    let DispatchTensor { kind, autodiff } = d;
    match (kind, autodiff) {
        (DispatchTensorKind::Autodiff(inner), DispatchAutodiffContext::Enabled(ckp)) => {
            match *inner {
                DispatchTensorKind::Flex(BackendTensor::Autodiff(t))
                    if t.dtype() == DType::F32 && last_dim(&t) > 0 =>
                {
                    let out = match ckp {
                        GradientCheckpointingStrategy::Balanced => node::<BalancedCheckpointing>(t),
                        GradientCheckpointingStrategy::Disabled => node::<NoCheckpointing>(t),
                    };
                    Tensor::from_dispatch(DispatchTensor {
                        kind: DispatchTensorKind::Autodiff(Box::new(DispatchTensorKind::Flex(
                            BackendTensor::Autodiff(out),
                        ))),
                        autodiff: DispatchAutodiffContext::Enabled(ckp),
                    })
                }
                inner => composed(DispatchTensor {
                    kind: DispatchTensorKind::Autodiff(Box::new(inner)),
                    autodiff: DispatchAutodiffContext::Enabled(ckp),
                }),
            }
        }
        (kind, autodiff) => composed(DispatchTensor { kind, autodiff }),
    }
}

/// Burn's softmax over the last dimension.
fn composed<const D: usize>(d: DispatchTensor) -> Tensor<D> {
    activation::softmax(Tensor::<D>::from_dispatch(d), D - 1)
}

type AdTensor = <Autodiff<Flex> as burn::backend::BackendTypes>::FloatTensorPrimitive;

fn last_dim(t: &AdTensor) -> usize {
    let shape = t.shape();
    shape[shape.num_dims() - 1]
}

/// The softmax node: forward by the fused kernel, the backward keeping `exp(x − max)` and the
/// row sums.
#[derive(Debug)]
struct SoftmaxLast;

impl Backward<Flex, 1> for SoftmaxLast {
    type State = (FlexTensor, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (exp, sum) = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| {
            softmax_train::backward(&grad, &exp, &sum)
        });
    }
}

fn node<C: CheckpointStrategy>(t: AdTensor) -> AdTensor {
    let prep = SoftmaxLast
        .prepare::<C>([t.node()])
        .compute_bound()
        .stateful();
    let fwd = softmax_train::forward(&Autodiff::<Flex, C>::inner(t));
    match prep {
        OpsKind::Tracked(prep) => prep.finish((fwd.exp, fwd.sum), fwd.output),
        OpsKind::UnTracked(prep) => prep.finish(fwd.output),
    }
}
