//! engram plugin: `resnet-mini`, a small residual CNN (He et al. 2016, "Deep Residual Learning
//! for Image Recognition", the basic block of §3 and Fig. 2), registered as a model of its own.
//!
//! It is the book's chapter "Your model" in code: ordinary Burn modules (`Conv2dConfig::init`,
//! `BatchNormConfig::init`, `LinearConfig::init`) become engram blocks by implementing
//! [`Block`], a list of blocks becomes a [`Model`], and one registration line makes
//! `[model] type = "resnet-mini"` available to any config that loads the library.
//!
//! The network, for `widths = [16, 32]` on `[1, 28, 28]` images:
//!
//! ```text
//! stem      3×3 conv 1→16, batch norm, ReLU                 [b, 16, 28, 28]
//! stage 1   basic block 16→16                                [b, 16, 28, 28]
//! stage 2   basic block 16→32, stride 2 (1×1 projection)     [b, 32, 14, 14]
//! head      global average pool, linear 32→classes           [b, classes]
//! ```
//!
//! A basic block is `relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))`. Each block is one engram
//! block, so segment checkpointing cuts the network at block boundaries. Batch norm goes
//! through [`engram_core::model::cnn::batch_norm`], which honours [`ForwardCtx::replay`]: a
//! checkpointed segment recomputed in backward normalises as the first pass did without moving
//! the running statistics a second time.

// ANCHOR: blocks
use engram_core::Result;
use engram_core::burn;
use engram_core::burn::module::Module;
use engram_core::burn::nn::conv::{Conv2d, Conv2dConfig};
use engram_core::burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use engram_core::burn::tensor::{Device, Tensor, activation::relu};
use engram_core::config::ParamSource;
use engram_core::model::cnn::batch_norm;
use engram_core::model::{
    Activation, Block, DynBlock, ForwardCtx, InputShape, Model, ModelContext,
};
use engram_core::plugin::Registrar;
use serde::{Deserialize, Serialize};

/// A 3×3 convolution with padding 1 and the given stride, `[b, c_in, h, w]` →
/// `[b, c_out, ⌈h/stride⌉, ⌈w/stride⌉]`, initialised by Burn (Kaiming uniform).
fn conv3(c_in: usize, c_out: usize, stride: usize, device: &Device) -> Conv2d {
    Conv2dConfig::new([c_in, c_out], [3, 3])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .init(device)
}

/// The stem: 3×3 conv, batch norm, ReLU. Takes the trainer's flat `[b, c·h·w]` input.
#[derive(Module, Debug)]
pub struct Stem {
    conv: Conv2d,
    norm: BatchNorm,
    /// `[channels, height, width]` of one input sample.
    #[module(skip)]
    input: [usize; 3],
}

impl Block for Stem {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = x.into_image(self.input);
        let y = batch_norm(&self.norm, self.conv.forward(x), ctx.replay);
        Activation::Image(relu(y))
    }
    fn kind(&self) -> &'static str {
        "stem"
    }
    fn batch_statistics(&self) -> bool {
        true
    }
}

/// A basic residual block: two 3×3 convolutions with batch norm, plus the shortcut (the
/// identity, or a strided 1×1 projection when the shape changes).
#[derive(Module, Debug)]
pub struct Residual {
    conv1: Conv2d,
    norm1: BatchNorm,
    conv2: Conv2d,
    norm2: BatchNorm,
    /// 1×1 projection of the shortcut, when the block changes the width or the resolution.
    project: Option<Conv2d>,
}

impl Block for Residual {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let Activation::Image(x) = x else {
            panic!("a residual block takes images [batch, c, h, w]")
        };
        let y = relu(batch_norm(
            &self.norm1,
            self.conv1.forward(x.clone()),
            ctx.replay,
        ));
        let y = batch_norm(&self.norm2, self.conv2.forward(y), ctx.replay);
        let shortcut: Tensor<4> = match &self.project {
            Some(p) => p.forward(x),
            None => x,
        };
        Activation::Image(relu(y + shortcut))
    }
    fn kind(&self) -> &'static str {
        "residual"
    }
    fn batch_statistics(&self) -> bool {
        true
    }
}

/// Global average pooling and a linear layer: `[b, c, h, w]` → `[b, classes]`.
#[derive(Module, Debug)]
pub struct Head {
    linear: Linear,
}

impl Block for Head {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        let Activation::Image(x) = x else {
            panic!("the head takes images [batch, c, h, w]")
        };
        let [b, c, _, _] = x.dims();
        let pooled = x.mean_dim(3).mean_dim(2).reshape([b, c]);
        Activation::Flat(self.linear.forward(pooled))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}
// ANCHOR_END: blocks

// ANCHOR: factory
/// `[model] type = "resnet-mini"`: its keys, with their defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResnetParams {
    /// Channels of each stage (one basic block each; every stage after the first halves the
    /// resolution): 1 to 4 stages of 1 to 512 channels. Default `[16, 32]`.
    pub widths: Vec<usize>,
    /// Momentum of batch norm's running statistics, in `(0, 1]`: `running ← (1 − m)·running +
    /// m·batch` (Ioffe & Szegedy 2015; Burn's and PyTorch's default 0.1). Evaluation uses the
    /// running statistics, and with 0.1 they trail a network that changes fast: on tasks of a
    /// few dozen steps, a deep stack of batch norms is then evaluated with the statistics of
    /// weights it no longer has (measured on 2-task Split-FMNIST slices of 28 steps a task: task
    /// 0 at 0.525 with 0.1, 0.915 with 0.5). Raise it for short tasks.
    pub bn_momentum: f64,
}

impl Default for ResnetParams {
    fn default() -> Self {
        Self {
            widths: vec![16, 32],
            bn_momentum: 0.1,
        }
    }
}

/// The factory: images of any size and channel count (`[c, h, w]`, the pooling adapts).
///
/// # Errors
/// Positioned config errors for unknown keys, a bad `widths` list, or data that is not images.
pub fn build(src: &ParamSource, cx: &ModelContext, device: &Device) -> Result<Model> {
    let p: ResnetParams = src.parse()?;
    if p.widths.is_empty() || p.widths.len() > 4 || p.widths.iter().any(|&w| w == 0 || w > 512) {
        return Err(src.key_error(
            "widths",
            "resnet-mini: 1 to 4 stages of 1 to 512 channels".into(),
            Some("for example widths = [16, 32]".into()),
        ));
    }
    if !(p.bn_momentum > 0.0 && p.bn_momentum <= 1.0) {
        return Err(src.key_error(
            "bn_momentum",
            format!("bn_momentum {} is outside (0, 1]", p.bn_momentum),
            None,
        ));
    }
    let InputShape::Image {
        channels,
        height,
        width,
    } = cx.input
    else {
        return Err(src.key_error(
            "type",
            format!("resnet-mini takes images; this data is {}", cx.input),
            Some("type = \"mlp\" reads any input as flat features".into()),
        ));
    };
    // Burn's layers draw their initial weights from the device's RNG: seed it from the run.
    let m = p.bn_momentum;
    cx.seed_device(device);
    let mut blocks = vec![DynBlock::new(Stem {
        conv: conv3(channels, p.widths[0], 1, device),
        norm: BatchNormConfig::new(p.widths[0])
            .with_momentum(m)
            .init(device),
        input: [channels, height, width],
    })];
    let mut c_in = p.widths[0];
    for (i, &c) in p.widths.iter().enumerate() {
        let stride = if i == 0 { 1 } else { 2 };
        blocks.push(DynBlock::new(Residual {
            conv1: conv3(c_in, c, stride, device),
            norm1: BatchNormConfig::new(c).with_momentum(m).init(device),
            conv2: conv3(c, c, 1, device),
            norm2: BatchNormConfig::new(c).with_momentum(m).init(device),
            project: (stride != 1 || c != c_in).then(|| {
                Conv2dConfig::new([c_in, c], [1, 1])
                    .with_stride([stride, stride])
                    .init(device)
            }),
        }));
        c_in = c;
    }
    blocks.push(DynBlock::new(Head {
        linear: LinearConfig::new(c_in, cx.num_classes).init(device),
    }));
    // `DynBlock::new` has already drawn Burn's lazily initialised parameters; one block per
    // checkpoint segment is the natural cut of a residual network.
    Ok(Model::new(blocks, cx.num_classes).with_segment_blocks(1))
}
// ANCHOR_END: factory

// ANCHOR: register
fn register(r: &mut Registrar) -> Result<()> {
    r.add(engram_core::registration!(
        model "resnet-mini",
        "small residual CNN: a conv stem, one basic block per stage, global average pooling (plugin; He et al. 2016)",
        ResnetParams,
        build
    ));
    Ok(())
}

engram_core::declare_plugin!(register);
// ANCHOR_END: register

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::burn::optim::GradientsParams;

    fn cx(input: InputShape) -> ModelContext {
        ModelContext {
            input,
            num_classes: 3,
            seed: 0,
        }
    }

    #[test]
    fn shapes_follow_the_data_and_every_parameter_gets_a_gradient() {
        let device = Device::flex().autodiff();
        for (input, widths) in [
            (
                InputShape::Image {
                    channels: 1,
                    height: 28,
                    width: 28,
                },
                "[4, 8]",
            ),
            (
                InputShape::Image {
                    channels: 3,
                    height: 9,
                    width: 7,
                },
                "[4, 8, 8]",
            ),
        ] {
            let src = ParamSource::from_toml(&format!("widths = {widths}"));
            let m = build(&src, &cx(input), &device).unwrap();
            let x = Tensor::<2>::ones([2, input.features()], &device);
            let logits = m.forward(Activation::Flat(x), &ForwardCtx::default());
            assert_eq!(logits.dims(), [2, 3]);
            let grads = GradientsParams::from_grads(logits.sum().backward(), &m);
            let with_grad = m.flat_grads(&grads).len();
            // Batch norm's running statistics are state, not parameters: no gradient.
            let trained = m
                .params()
                .iter()
                .filter(|p| !p.path.contains(".running_"))
                .count();
            assert_eq!(with_grad, trained, "{input}: a parameter without gradient");
        }
    }

    #[test]
    fn bad_keys_and_flat_data_are_positioned_errors() {
        let device = Device::flex();
        let img = InputShape::Image {
            channels: 1,
            height: 8,
            width: 8,
        };
        for (keys, input, want) in [
            ("width = [4]", img, "unknown field `width`"),
            ("widths = []", img, "1 to 4 stages"),
            ("", InputShape::Features(10), "takes images"),
        ] {
            let e = build(&ParamSource::from_toml(keys), &cx(input), &device).unwrap_err();
            assert!(e.to_string().contains(want), "{keys}: {e}");
        }
    }
}
