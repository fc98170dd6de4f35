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
            ActivationKind::Gelu => super::nodes::gelu(x),
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
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = x.into_flat();
        let y = self.activation.apply(ctx.linear(&self.linear, "linear", x));
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
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        Activation::Flat(ctx.linear(&self.linear, "linear", x.into_flat()))
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

/// `[model] type = "mlp"`: its keys, with their defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MlpParams {
    /// Hidden widths, one [`DenseBlock`] each (1 to 65536 units, at most 1024 layers).
    /// Default `[400, 400]`.
    pub hidden: Vec<usize>,
    /// `relu` (default), `gelu` or `tanh`.
    pub activation: ActivationKind,
    /// Dropout probability after each hidden activation, in `[0, 1)`. Default 0.
    pub dropout: f64,
}

impl Default for MlpParams {
    fn default() -> Self {
        Self {
            hidden: vec![400, 400],
            activation: ActivationKind::Relu,
            dropout: 0.0,
        }
    }
}

/// Checks that `dropout` (the key `key` of `src`) lies in `[0, 1)`.
///
/// # Errors
/// A positioned [`crate::Error::Config`] at the key.
pub fn check_dropout(src: &crate::config::ParamSource, dropout: f64) -> crate::Result<()> {
    if (0.0..1.0).contains(&dropout) {
        return Ok(());
    }
    Err(src.key_error(
        "dropout",
        format!("dropout {dropout} is outside [0, 1)"),
        None,
    ))
}

/// The `mlp` factory: any input, read as `[batch, features]`.
///
/// # Errors
/// Positioned [`crate::Error::Config`] for unknown keys, widths outside 1..=65536 or more than
/// 1024 layers, and dropout outside `[0, 1)`.
pub fn build(
    src: &crate::config::ParamSource,
    cx: &super::ModelContext,
    device: &Device,
) -> crate::Result<Model> {
    let p: MlpParams = src.parse()?;
    if p.hidden.len() > 1024 || p.hidden.iter().any(|&h| h == 0 || h > 65536) {
        return Err(src.key_error(
            "hidden",
            "hidden widths must be 1 to 65536, at most 1024 layers".into(),
            None,
        ));
    }
    check_dropout(src, p.dropout)?;
    Ok(build_mlp(
        cx.input.features(),
        &p.hidden,
        cx.num_classes,
        p.activation,
        p.dropout,
        &mut cx.rng(),
        device,
    ))
}

crate::component!(model "mlp", "multilayer perceptron on flat features: dense blocks (linear, activation, dropout) and a linear head", MlpParams, build);
