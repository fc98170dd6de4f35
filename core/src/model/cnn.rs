//! A small convolutional network with batch normalisation, built as blocks.
//!
//! `channels = [16, 32]` on 28×28 images is three blocks: two [`ConvBlock`]s (3×3 convolution
//! with padding 1, batch norm, ReLU, 2×2 max pooling: `[batch, c, h, w]` →
//! `[batch, c', ⌊h/2⌋, ⌊w/2⌋]`) and the MLP's [`HeadBlock`] on the flattened features
//! (`[batch, 32·7·7]` → `[batch, classes]`).
//!
//! Batch norm (Ioffe & Szegedy 2015) is the block that makes recomputation delicate: its training
//! forward normalises with the batch's statistics *and* updates the running statistics. A
//! checkpointed step runs a segment twice (once without a graph, once in backward), so the block
//! takes [`ForwardCtx::replay`]: a replayed forward normalises exactly as the first one did but
//! leaves the running statistics alone, so they move once per step, as in a plain step. The mode
//! (batch or running statistics) follows Burn's rule: training statistics on an autodiff device
//! with the layer's training flag on ([`Model::eval_mode`] turns it off, `valid()` leaves the
//! autodiff device). Normalisation runs in `f32` under mixed precision.

use super::mlp::{HeadBlock, init_linear};
use super::{Activation, Block, DynBlock, ForwardCtx, Model};
use crate::rng::Rng;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::tensor::{DType, Device, Tensor, activation};

/// Convolution, batch norm, ReLU, 2×2 max pooling: `[batch, c_in, h, w]` →
/// `[batch, c_out, h/2, w/2]`. A flat input `[batch, h·w]` is read as one channel of
/// `side × side`.
#[derive(Module, Debug)]
pub struct ConvBlock {
    /// 3×3, padding 1, weight `[c_out, c_in, 3, 3]`.
    pub conv: Conv2d,
    /// Batch norm over `c_out` channels (parameters kept in `f32` under mixed precision).
    pub norm: BatchNorm,
    /// 2×2, stride 2.
    pub pool: MaxPool2d,
    /// Side of the square image a flat input is reshaped to.
    #[module(skip)]
    pub side: usize,
}

/// Batch norm of `x` `[batch, c, h, w]` with `bn`'s parameters, in `f32`: batch statistics in
/// training mode (updating the running statistics unless `replay`), running statistics
/// otherwise. The same arithmetic as Burn's `BatchNorm::forward` (momentum update of the running
/// mean and variance), with the update made optional.
pub fn batch_norm(bn: &BatchNorm, x: Tensor<4>, replay: bool) -> Tensor<4> {
    let dt = x.dtype();
    let x = if dt == DType::F32 {
        x
    } else {
        x.cast(DType::F32)
    };
    let device = x.device();
    let out = if device.is_autodiff() && bn.training.is_enabled() {
        let r =
            burn::tensor::module::batch_norm_train(x, bn.gamma.val(), bn.beta.val(), bn.epsilon);
        if !replay {
            let m = bn.momentum;
            let mean = bn.running_mean.value_sync().to_device(&device);
            let var = bn.running_var.value_sync().to_device(&device);
            bn.running_mean.update(
                mean.mul_scalar(1.0 - m)
                    .add(r.mean.detach().mul_scalar(m))
                    .detach(),
            );
            bn.running_var.update(
                var.mul_scalar(1.0 - m)
                    .add(r.variance.detach().mul_scalar(m))
                    .detach(),
            );
        }
        r.output
    } else {
        burn::tensor::module::batch_norm(
            x,
            bn.gamma.val(),
            bn.beta.val(),
            bn.running_mean.value().to_device(&device),
            bn.running_var.value().to_device(&device),
            bn.epsilon,
        )
    };
    if dt == DType::F32 { out } else { out.cast(dt) }
}

impl Block for ConvBlock {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = match x {
            Activation::Image(t) => t,
            Activation::Flat(t) => {
                let [b, _] = t.dims();
                t.reshape([b, 1, self.side, self.side])
            }
            Activation::Seq(_) => panic!("a conv block takes images [batch, c, h, w]"),
        };
        let y = batch_norm(&self.norm, self.conv.forward(x), ctx.replay);
        Activation::Image(self.pool.forward(activation::relu(y)))
    }
    fn kind(&self) -> &'static str {
        "conv"
    }
    fn batch_statistics(&self) -> bool {
        true
    }
}

/// The CNN of the module docs: `channels.len()` conv blocks on `side × side` single-channel
/// images, then a linear head. Convolutions are initialised by Burn's default (Kaiming uniform)
/// from the device's RNG, which the trainer seeds from the run seed; the head from `rng`.
///
/// Each block halves the side, rounding down as 2×2 max pooling does (27 → 13 → 6).
///
/// # Panics
/// When `side < 2^channels.len()` (the `cnn` factory, [`build`], refuses it first).
pub fn build_cnn(
    side: usize,
    channels: &[usize],
    classes: usize,
    rng: &mut Rng,
    device: &Device,
) -> Model {
    let mut blocks = Vec::new();
    let (mut c_in, mut s) = (1, side);
    for &c in channels {
        blocks.push(DynBlock::new(ConvBlock {
            conv: Conv2dConfig::new([c_in, c], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            norm: BatchNormConfig::new(c).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            side: s,
        }));
        c_in = c;
        assert!(
            s >= 2,
            "image side {side} too small for {} conv blocks",
            channels.len()
        );
        s /= 2;
    }
    blocks.push(DynBlock::new(HeadBlock {
        linear: init_linear(c_in * s * s, classes, rng, device),
    }));
    // Burn's conv layers initialise lazily; `DynBlock::new` has drawn them (measured before it
    // did: a checkpointed step's graph-free clone initialised them untracked, and only the head
    // got gradients).
    Model::new(blocks, classes).with_segment_blocks(2)
}

/// `[model] type = "cnn"`: its keys, with their defaults.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CnnParams {
    /// Output channels of each conv block (3×3 conv, batch norm, ReLU, 2×2 max pool): 1 or 2
    /// blocks of 1 to 1024 channels. Default `[16, 32]`.
    pub channels: Vec<usize>,
}

impl Default for CnnParams {
    fn default() -> Self {
        Self {
            channels: vec![16, 32],
        }
    }
}

/// The `cnn` factory: square single-channel images `[1, side, side]` with
/// `side ≥ 2^channels.len()`.
///
/// # Errors
/// Positioned [`crate::Error::Config`] for unknown keys, a bad `channels` list, images that
/// are not square or have more than one channel, or a side too small for the blocks.
pub fn build(
    src: &crate::config::ParamSource,
    cx: &super::ModelContext,
    device: &Device,
) -> crate::Result<Model> {
    let p: CnnParams = src.parse()?;
    if p.channels.is_empty()
        || p.channels.len() > 2
        || p.channels.iter().any(|&c| c == 0 || c > 1024)
    {
        return Err(src.key_error(
            "channels",
            format!(
                "cnn: channels = {:?}: this CNN has 1 or 2 conv blocks (each halves the image side, rounding down) of 1 to 1024 channels",
                p.channels
            ),
            Some("for example channels = [16, 32]".into()),
        ));
    }
    let (channels, side) = cx.square_side(src, "cnn")?;
    if channels != 1 {
        return Err(src.key_error(
            "type",
            format!("cnn takes single-channel images; this data is {}", cx.input),
            None,
        ));
    }
    let blocks = p.channels.len() as u32;
    if side < 1 << blocks {
        return Err(src.key_error(
            "channels",
            format!(
                "cnn: {blocks} conv blocks halve the side {blocks} times, and {side}×{side} images are too small for that (at least {0}×{0})",
                1usize << blocks
            ),
            Some("use fewer channels entries".into()),
        ));
    }
    cx.seed_device(device);
    Ok(build_cnn(
        side,
        &p.channels,
        cx.num_classes,
        &mut cx.rng(),
        device,
    ))
}

/// The registration of `cnn`.
pub const REGISTRATION: crate::registry::Registration = crate::registration!(model "cnn", "small convolutional network: conv blocks (3×3 conv, batch norm, ReLU, 2×2 max pool) and a linear head", CnnParams, build);
