//! The multilayer perceptron, built as a sequence of blocks.
//!
//! `784-400-400-10` is three blocks: two [`DenseBlock`]s (linear, activation, optional
//! dropout) and one [`HeadBlock`] (linear to logits). Weights are drawn from engram's own
//! random stream, not Burn's, so initialisation is fixed by the run seed.

use super::{Activation, Block, DynBlock, ForwardCtx, Model};
use crate::rng::Rng;
use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::{Device, Tensor, TensorData, activation};
use rand::Rng as _;
use serde::{Deserialize, Serialize};

/// Element-wise non-linearity of a dense block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ActivationKind {
    /// max(0, x)
    #[default]
    Relu,
    /// Gaussian error linear unit (Hendrycks & Gimpel 2016).
    Gelu,
    /// tanh(x)
    Tanh,
}

impl ActivationKind {
    /// Applies the non-linearity to any tensor.
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            ActivationKind::Relu => activation::relu(x),
            ActivationKind::Gelu => activation::gelu(x),
            ActivationKind::Tanh => activation::tanh(x),
        }
    }
}

/// A linear layer `[in, out]` drawn like PyTorch's default: weight and bias uniform in
/// `±1/√in` (He et al. 2015 with `a = √5`, as `torch.nn.Linear` does).
pub fn init_linear(d_in: usize, d_out: usize, rng: &mut Rng, device: &Device) -> Linear {
    let bound = 1.0 / (d_in as f32).sqrt();
    let w: Vec<f32> = (0..d_in * d_out)
        .map(|_| rng.random_range(-bound..bound))
        .collect();
    let b: Vec<f32> = (0..d_out)
        .map(|_| rng.random_range(-bound..bound))
        .collect();
    Linear {
        weight: Param::from_data(TensorData::new(w, [d_in, d_out]), device),
        bias: Some(Param::from_data(TensorData::new(b, [d_out]), device)),
    }
}

/// Linear → activation → dropout, `[batch, d_in]` to `[batch, d_out]`.
#[derive(Module, Debug)]
pub struct DenseBlock {
    /// The affine map; weight `[d_in, d_out]`.
    pub linear: Linear,
    /// Dropout after the activation (inactive when `prob = 0` or in evaluation).
    pub dropout: Dropout,
    /// The non-linearity.
    #[module(skip)]
    pub activation: ActivationKind,
}

impl Block for DenseBlock {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        let x = x.into_flat();
        let y = self.activation.apply(self.linear.forward(x));
        Activation::Flat(self.dropout.forward(y))
    }
    fn kind(&self) -> &'static str {
        "dense"
    }
}

/// The classifier: linear `[batch, d_in]` to logits `[batch, classes]`.
#[derive(Module, Debug)]
pub struct HeadBlock {
    /// The affine map; weight `[d_in, classes]`.
    pub linear: Linear,
}

impl Block for HeadBlock {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        Activation::Flat(self.linear.forward(x.into_flat()))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}

/// Builds an MLP `d_in → hidden[0] → … → classes`.
///
/// # Arguments
/// * `d_in` - input features (784 for 28×28 images).
/// * `hidden` - widths of the hidden layers, one [`DenseBlock`] each.
/// * `classes` - logit width.
/// * `dropout` - dropout probability after each hidden activation, in `[0, 1)`.
pub fn build_mlp(
    d_in: usize,
    hidden: &[usize],
    classes: usize,
    activation: ActivationKind,
    dropout: f64,
    rng: &mut Rng,
    device: &Device,
) -> Model {
    let mut blocks = Vec::new();
    let mut width = d_in;
    for &h in hidden {
        blocks.push(DynBlock::new(DenseBlock {
            linear: init_linear(width, h, rng, device),
            dropout: DropoutConfig::new(dropout).init(),
            activation,
        }));
        width = h;
    }
    blocks.push(DynBlock::new(HeadBlock {
        linear: init_linear(width, classes, rng, device),
    }));
    Model::new(blocks, classes)
}
