//! engram's own autodiff nodes on the CPU: the softmax over the last dimension and GELU.
//!
//! Burn's autodiff composes the softmax from its primitives ([`activation::softmax`] under
//! autodiff is the backend trait's default: a detached row maximum, a subtraction, `exp`, a row
//! sum and a division, Burn 0.22.1 `ActivationOps::softmax`), five nodes whose forward and
//! backward are each a pass over the whole `[batch, heads, tokens, tokens]` attention tensor,
//! about a tenth of a MiniLM training step on one thread (`bench/profile/README.md`, stop 59).
//! Its GELU node keeps the input `x` and its backward computes `erf(x/√2)` again from it
//! (Burn's `gelu_backward`), libm's `erff` on every element of the `[batch, tokens, 4·hidden]`
//! feed-forward activations a second time.
//!
//! On Flex with f32 under autodiff, [`softmax_last`] and [`gelu`] are one node each over a
//! vendored kernel that computes the same operations on each element in the same order, so their
//! outputs and gradients are Burn's bits (`vendor::softmax_train_is_the_composition_bit_for_bit`,
//! `vendor::gelu_node_is_burn_s_bit_for_bit`): no accuracy moves, only time and memory.
//! - The softmax (`burn_flex::ops::softmax_train`) runs a block of rows at a time; its backward
//!   keeps `exp(x − max)` and the row sums, one tensor of `x`'s size fewer than the composition.
//! - GELU (`burn_flex::ops::gelu::forward_train`) computes `1 + erf(x/√2)` once for the output
//!   and the slope `GELU′(x)`, keeps the slope where Burn's node keeps `x` (the same size), and
//!   its backward is `grad · slope`. Under Burn's op-level checkpointing (the `Balanced`
//!   strategy) Burn's GELU runs instead: it keeps nothing and recomputes.
//!
//! Everywhere else (another backend or dtype, no autodiff) they are [`activation::softmax`] and
//! [`activation::gelu`]. engram's own models go through them: BERT's attention and feed-forward
//! layers, the ViT's and MLP's GELU, the mixture-of-LoRA router's gates and probabilities.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::flex::ops::{gelu as flex_gelu, softmax_train};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
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
    through::<SoftmaxLast, D>(x, |x| activation::softmax(x, D - 1))
}

/// `GELU(x) = ½·x·(1 + erf(x/√2))` elementwise (Hendrycks & Gimpel 2016, eq. 1; any shape):
/// [`activation::gelu`]'s values and gradients, computed as one autodiff node when `x` is an f32
/// Flex tensor under autodiff (module docs).
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    through::<Gelu, D>(x, activation::gelu)
}

type AdTensor = <Autodiff<Flex> as burn::backend::BackendTypes>::FloatTensorPrimitive;

/// A node of engram's own over a Flex kernel.
trait FlexNode {
    /// Whether the node also runs under Burn's op-level checkpointing (the `Balanced`
    /// strategy), else Burn's composition does there.
    const UNDER_OP_CHECKPOINTING: bool;
    /// Whether the node takes this f32 tensor (else Burn's composition runs).
    fn takes(t: &AdTensor) -> bool;
    /// The node's output, recorded on the graph with checkpointing strategy `C`.
    fn apply<C: CheckpointStrategy>(t: AdTensor) -> AdTensor;
}

/// `N`'s node when `x` is an f32 Flex tensor under autodiff that `N` takes, else `composed(x)`.
fn through<N: FlexNode, const D: usize>(
    x: Tensor<D>,
    composed: impl FnOnce(Tensor<D>) -> Tensor<D>,
) -> Tensor<D> {
    let DispatchTensor { kind, autodiff } = x.into_dispatch();
    let back = |kind, autodiff| Tensor::<D>::from_dispatch(DispatchTensor { kind, autodiff });
    let DispatchAutodiffContext::Enabled(ckp) = autodiff else {
        return composed(back(kind, autodiff));
    };
    let DispatchTensorKind::Autodiff(inner) = kind else {
        return composed(back(kind, autodiff));
    };
    match *inner {
        DispatchTensorKind::Flex(BackendTensor::Autodiff(t))
            if t.dtype() == DType::F32
                && N::takes(&t)
                && (N::UNDER_OP_CHECKPOINTING
                    || ckp != GradientCheckpointingStrategy::Balanced) =>
        {
            let out = match ckp {
                GradientCheckpointingStrategy::Balanced => N::apply::<BalancedCheckpointing>(t),
                GradientCheckpointingStrategy::Disabled => N::apply::<NoCheckpointing>(t),
            };
            back(
                DispatchTensorKind::Autodiff(Box::new(DispatchTensorKind::Flex(
                    BackendTensor::Autodiff(out),
                ))),
                autodiff,
            )
        }
        inner => composed(back(
            DispatchTensorKind::Autodiff(Box::new(inner)),
            autodiff,
        )),
    }
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

impl FlexNode for SoftmaxLast {
    const UNDER_OP_CHECKPOINTING: bool = true;

    fn takes(t: &AdTensor) -> bool {
        let shape = t.shape();
        shape[shape.num_dims() - 1] > 0
    }

    fn apply<C: CheckpointStrategy>(t: AdTensor) -> AdTensor {
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
}

/// The GELU node: the output and the slope from one pass, the backward `grad · slope`.
#[derive(Debug)]
struct Gelu;

impl Backward<Flex, 1> for Gelu {
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let slope = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| {
            Flex::float_mul(grad, slope)
        });
    }
}

impl FlexNode for Gelu {
    /// Burn's GELU node is memory-bound there: it keeps nothing and recomputes its input from
    /// the input's parents, where this node would keep the slope.
    const UNDER_OP_CHECKPOINTING: bool = false;

    fn takes(_: &AdTensor) -> bool {
        true
    }

    fn apply<C: CheckpointStrategy>(t: AdTensor) -> AdTensor {
        let prep = Gelu.prepare::<C>([t.node()]).compute_bound().stateful();
        let x = Autodiff::<Flex, C>::inner(t);
        match prep {
            OpsKind::Tracked(prep) => {
                let fwd = flex_gelu::forward_train(&x);
                prep.finish(fwd.slope, fwd.output)
            }
            // Nothing asks for a gradient: Burn's (and the vendored) forward alone.
            OpsKind::UnTracked(prep) => prep.finish(Flex::gelu(x)),
        }
    }
}
