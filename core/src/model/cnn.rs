//! A small convolutional network with batch normalisation, built as blocks.
//!
//! `channels = [16, 32]` on 28×28 images is three blocks: two [`ConvBlock`]s (3×3 convolution
//! with padding 1, ReLU, batch norm, 2×2 max pooling: `[batch, c, h, w]` →
//! `[batch, c', ⌊h/2⌋, ⌊w/2⌋]`) and the MLP's [`HeadBlock`] on the flattened features
//! (`[batch, 32·7·7]` → `[batch, classes]`). Images may have any channel count and size.
//!
//! Batch norm comes *after* the ReLU (Mishkin et al. 2016 measured that order as slightly
//! better). Here it is chosen for stability under class-incremental fine-tuning (SGD lr 0.05,
//! momentum 0.9, 4,000 samples a task of Split-FMNIST, seeds 0–2): with batch norm before the
//! ReLU, the loss spike at each new task drove whole layers to zero outputs and the lowest
//! per-task accuracy right after training was 0.72, 0.50, 0.50 on 28×28 gray and 0.48, 0.49,
//! 0.48 on 3×32×32 colour; with the ReLU first it was 0.93, 0.90, 0.96 and 0.96, 0.90, 0.21
//! (the last a task whose first steps diverged, a mean loss of 488 over its first 10 steps,
//! which `[train] clip_norm` or the `anomaly` scheduler are for).
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

/// Convolution, ReLU, batch norm, 2×2 max pooling: `[batch, c_in, h, w]` →
/// `[batch, c_out, h/2, w/2]`. A flat input `[batch, c·h·w]` (the trainer's) is read as the
/// images `image` says.
#[derive(Module, Debug)]
pub struct ConvBlock {
    /// 3×3, padding 1, weight `[c_out, c_in, 3, 3]`.
    pub conv: Conv2d,
    /// Batch norm over `c_out` channels (parameters kept in `f32` under mixed precision).
    pub norm: BatchNorm,
    /// 2×2, stride 2.
    pub pool: MaxPool2d,
    /// `[channels, height, width]` of the images a flat input is reshaped to.
    #[module(skip)]
    pub image: [usize; 3],
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
        let x = x.into_image(self.image);
        let y = batch_norm(
            &self.norm,
            activation::relu(self.conv.forward(x)),
            ctx.replay,
        );
        Activation::Image(self.pool.forward(y))
    }
    fn kind(&self) -> &'static str {
        "conv"
    }
    fn batch_statistics(&self) -> bool {
        true
    }
}

/// Global average pooling: images `[batch, c, h, w]` → features `[batch, c]` (the mean over
/// each channel's `h·w` positions; Lin et al. 2014, "Network in Network").
#[derive(Module, Debug)]
pub struct GlobalAvgPool;

impl Block for GlobalAvgPool {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        let t = match x {
            Activation::Image(t) => t,
            other => return other,
        };
        let [b, c, _, _] = t.dims();
        Activation::Flat(t.mean_dim(3).mean_dim(2).reshape([b, c]))
    }
    fn kind(&self) -> &'static str {
        "pool"
    }
}

/// What the CNN's head reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CnnHead {
    /// The last block's feature maps flattened, `[batch, c·h·w]` (LeNet's head).
    #[default]
    Flatten,
    /// Their global average, `[batch, c]` ([`GlobalAvgPool`]; the head no longer depends on
    /// the image size).
    Average,
}

/// The CNN of the module docs: `channels.len()` conv blocks on images `[c, h, w]` (`image`),
/// then a linear head. Convolutions are initialised by Burn's default (Kaiming uniform)
/// from the device's RNG, which the trainer seeds from the run seed; the head from `rng`.
///
/// Each block halves the height and width, rounding down as 2×2 max pooling does (27 → 13 → 6).
///
/// # Panics
/// When the height or width is below `2^channels.len()` (the `cnn` factory, [`build`],
/// refuses it first).
pub fn build_cnn(
    image: [usize; 3],
    channels: &[usize],
    head: CnnHead,
    classes: usize,
    rng: &mut Rng,
    device: &Device,
) -> Model {
    let mut blocks = Vec::new();
    let [mut c_in, mut h, mut w] = image;
    for &c in channels {
        blocks.push(DynBlock::new(ConvBlock {
            conv: Conv2dConfig::new([c_in, c], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            norm: BatchNormConfig::new(c).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            image: [c_in, h, w],
        }));
        c_in = c;
        assert!(
            h >= 2 && w >= 2,
            "images {image:?} too small for {} conv blocks",
            channels.len()
        );
        (h, w) = (h / 2, w / 2);
    }
    let d_head = match head {
        CnnHead::Flatten => c_in * h * w,
        CnnHead::Average => {
            blocks.push(DynBlock::new(GlobalAvgPool));
            c_in
        }
    };
    blocks.push(DynBlock::new(HeadBlock {
        linear: init_linear(d_head, classes, rng, device),
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
    /// Output channels of each conv block (3×3 conv, ReLU, batch norm, 2×2 max pool): 1 or 2
    /// blocks of 1 to 1024 channels. Default `[16, 32]`.
    pub channels: Vec<usize>,
    /// What the linear head reads: `flatten` (default; every position, `c·h·w` features) or
    /// `average` (global average pooling of the last feature maps, `c` features).
    pub head: CnnHead,
}

impl Default for CnnParams {
    fn default() -> Self {
        Self {
            channels: vec![16, 32],
            head: CnnHead::default(),
        }
    }
}

/// The `cnn` factory: images `[channels, height, width]` of any channel count, with height and
/// width at least `2^channels.len()`.
///
/// # Errors
/// Positioned [`crate::Error::Config`] for unknown keys, a bad `channels` list, input that is
/// not images, or images too small for the blocks.
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
    let crate::model::InputShape::Image {
        channels,
        height,
        width,
    } = cx.input
    else {
        return Err(src.key_error(
            "type",
            format!("cnn needs images; this data is {}", cx.input),
            Some("type = \"mlp\" reads any input as flat features; `[data] shape = [c, h, w]` makes feature rows images".into()),
        ));
    };
    let blocks = p.channels.len() as u32;
    if height.min(width) < 1 << blocks {
        return Err(src.key_error(
            "channels",
            format!(
                "cnn: {blocks} conv blocks halve the height and width {blocks} times, and {height}×{width} images are too small for that (at least {0}×{0})",
                1usize << blocks
            ),
            Some("use fewer channels entries".into()),
        ));
    }
    cx.seed_device(device);
    Ok(build_cnn(
        [channels, height, width],
        &p.channels,
        p.head,
        cx.num_classes,
        &mut cx.rng(),
        device,
    ))
}

crate::component!(model "cnn", "small convolutional network: conv blocks (3×3 conv, ReLU, batch norm, 2×2 max pool) and a linear head, on images of any size and channel count", CnnParams, build);
