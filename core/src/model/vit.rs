//! A small vision transformer (Dosovitskiy et al. 2021, "An Image is Worth 16×16 Words"),
//! built as blocks: a patch embedding, `depth` pre-norm encoder blocks (multi-head
//! self-attention and an MLP, each with a residual connection) and a classification head.
//!
//! The attention parameters live under `blocks.N.attention.*` (query, key, value, output), so
//! EWC's default layered-importance group (`attention|attn`) finds them by path.

use super::mlp::init_linear;
use super::{Activation, Block, DynBlock, ForwardCtx, Model, norm_f32};
use crate::rng::Rng;
use burn::module::{Module, Param};
use burn::nn::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::{Device, Tensor, TensorData};
use rand::Rng as _;

/// The default patch side for `side × side` images: the divisor of `side` nearest `side / 4`
/// (ties to the larger), so that the image is cut into about 4×4 patches: 7 for 28, 9 for 27,
/// 8 for 32, and 1 for a prime side (every pixel a token).
pub fn default_patch(side: usize) -> usize {
    let target = side as f64 / 4.0;
    (1..=side.max(1))
        .filter(|d| side.max(1).is_multiple_of(*d))
        .min_by(|a, b| {
            let (da, db) = ((*a as f64 - target).abs(), (*b as f64 - target).abs());
            da.total_cmp(&db).then(b.cmp(a))
        })
        .unwrap_or(1)
}

/// Cuts `[batch, c·side·side]` images (CHW) into `patch × patch` patches of all `c` channels
/// and embeds each: `[batch, c·side²]` → `[batch, tokens, dim]`, plus a learned position
/// embedding.
#[derive(Module, Debug)]
pub struct PatchEmbed {
    /// Patch values to model width, weight `[c·patch², dim]`.
    pub proj: Linear,
    /// Position embedding `[tokens, dim]`.
    pub position: Param<Tensor<2>>,
    /// Image side in pixels.
    #[module(skip)]
    pub side: usize,
    /// Patch side in pixels.
    #[module(skip)]
    pub patch: usize,
    /// Colour channels.
    #[module(skip)]
    pub channels: usize,
}

impl Block for PatchEmbed {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = x.into_flat();
        let b = x.dims()[0];
        let (s, p, c) = (self.side, self.patch, self.channels);
        let g = s / p;
        // [b, c·s·s] → [b, c, g, p, g, p] → [b, g, g, c, p, p] → [b, g·g, c·p·p]
        let patches = x
            .reshape([b, c, g, p, g, p])
            .permute([0, 2, 4, 1, 3, 5])
            .reshape([b, g * g, c * p * p]);
        let tokens = ctx.linear(&self.proj, "proj", patches);
        Activation::Seq(tokens + self.position.val().unsqueeze_dim(0))
    }
    fn kind(&self) -> &'static str {
        "patch_embed"
    }
}

/// A pre-norm transformer encoder block: `x + attn(LN(x))`, then `x + MLP(LN(x))`;
/// `[batch, tokens, dim]` in and out.
#[derive(Module, Debug)]
pub struct EncoderBlock {
    /// Norm before attention.
    pub norm1: LayerNorm,
    /// Multi-head self-attention (`attention.query/key/value/output`).
    pub attention: MultiHeadAttention,
    /// Norm before the MLP.
    pub norm2: LayerNorm,
    /// MLP expansion, weight `[dim, hidden]`.
    pub fc1: Linear,
    /// MLP projection, weight `[hidden, dim]`.
    pub fc2: Linear,
    /// Dropout after each residual branch.
    pub dropout: Dropout,
}

impl Block for EncoderBlock {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let Activation::Seq(x) = x else {
            panic!(
                "an encoder block takes tokens [batch, tokens, dim]; put a patch embedding first"
            );
        };
        let a = self
            .attention
            .forward(MhaInput::self_attn(norm_f32(&self.norm1, x.clone())))
            .context;
        let x = x + self.dropout.forward(a);
        let h = super::nodes::gelu(ctx.linear(&self.fc1, "fc1", norm_f32(&self.norm2, x.clone())));
        let x = x + self.dropout.forward(ctx.linear(&self.fc2, "fc2", h));
        Activation::Seq(x)
    }
    fn kind(&self) -> &'static str {
        "encoder"
    }
}

/// Layer norm, mean over tokens, linear to logits: `[batch, tokens, dim]` → `[batch, classes]`.
#[derive(Module, Debug)]
pub struct TokenHead {
    /// Final norm.
    pub norm: LayerNorm,
    /// Classifier, weight `[dim, classes]`.
    pub linear: Linear,
}

impl Block for TokenHead {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let Activation::Seq(x) = x else {
            panic!("the token head takes tokens [batch, tokens, dim]");
        };
        let pooled = norm_f32(&self.norm, x).mean_dim(1).squeeze_dim::<2>(1);
        Activation::Flat(ctx.linear(&self.linear, "linear", pooled))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}

/// Shape of a [`build_vit`] model.
#[derive(Clone, Debug, PartialEq)]
pub struct VitShape {
    /// Image side in pixels (28 for the MNIST family).
    pub side: usize,
    /// Colour channels (1 for the MNIST family).
    pub channels: usize,
    /// Patch side in pixels; must divide `side`.
    pub patch: usize,
    /// Model width.
    pub dim: usize,
    /// Encoder blocks.
    pub depth: usize,
    /// Attention heads; must divide `dim`.
    pub heads: usize,
    /// MLP hidden width as a multiple of `dim`.
    pub mlp_ratio: usize,
    /// Dropout probability in `[0, 1)` (attention weights and residual branches).
    pub dropout: f64,
}

/// Builds a ViT for `classes` classes. Linear layers and the position embedding are drawn from
/// `rng`; the attention layers from Burn's RNG, which the caller seeds (the trainer seeds it
/// from the run seed before building).
pub fn build_vit(shape: &VitShape, classes: usize, rng: &mut Rng, device: &Device) -> Model {
    let tokens = (shape.side / shape.patch).pow(2);
    let d = shape.dim;
    let pos: Vec<f32> = (0..tokens * d)
        .map(|_| rng.random_range(-0.02..0.02))
        .collect();
    let mut blocks = vec![DynBlock::new(PatchEmbed {
        proj: init_linear(shape.channels * shape.patch * shape.patch, d, rng, device),
        position: Param::from_data(TensorData::new(pos, [tokens, d]), device),
        side: shape.side,
        patch: shape.patch,
        channels: shape.channels,
    })];
    for _ in 0..shape.depth {
        blocks.push(DynBlock::new(EncoderBlock {
            norm1: LayerNormConfig::new(d).init(device),
            attention: MultiHeadAttentionConfig::new(d, shape.heads)
                .with_dropout(shape.dropout)
                .init(device),
            norm2: LayerNormConfig::new(d).init(device),
            fc1: init_linear(d, d * shape.mlp_ratio, rng, device),
            fc2: init_linear(d * shape.mlp_ratio, d, rng, device),
            dropout: DropoutConfig::new(shape.dropout).init(),
        }));
    }
    blocks.push(DynBlock::new(TokenHead {
        norm: LayerNormConfig::new(d).init(device),
        linear: init_linear(d, classes, rng, device),
    }));
    // Every lazily initialised parameter is drawn by `DynBlock::new`, under the caller's seed.
    Model::new(blocks, classes).with_segment_blocks(3)
}

/// `[model] type = "vit"`: its keys, with their defaults.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VitParams {
    /// Model width (a multiple of `heads`, at most 4096). Default 64.
    pub dim: usize,
    /// Encoder blocks (at most 256). Default 4.
    pub depth: usize,
    /// Attention heads (must divide `dim`). Default 4.
    pub heads: usize,
    /// Patch side in pixels; must divide the image side. Default (unset): the divisor of the
    /// side nearest a quarter of it, [`default_patch`] (7 for 28×28, 9 for 27×27, 8 for
    /// 32×32).
    pub patch: Option<usize>,
    /// Dropout probability in `[0, 1)` (attention weights and residual branches). Default 0.
    pub dropout: f64,
}

impl Default for VitParams {
    fn default() -> Self {
        Self {
            dim: 64,
            depth: 4,
            heads: 4,
            patch: None,
            dropout: 0.0,
        }
    }
}

/// The `vit` factory: square images `[channels, side, side]` of any channel count.
///
/// # Errors
/// Positioned [`crate::Error::Config`] for unknown keys, `dim` not a multiple of `heads`, a
/// `patch` of 0 or one that does not divide the side (the hint lists the divisors), images that
/// are not square, and dropout outside `[0, 1)`.
pub fn build(
    src: &crate::config::ParamSource,
    cx: &super::ModelContext,
    device: &Device,
) -> crate::Result<Model> {
    let p: VitParams = src.parse()?;
    if p.dim == 0 || p.heads == 0 || !p.dim.is_multiple_of(p.heads) || p.depth > 256 || p.dim > 4096
    {
        return Err(src.key_error(
            "dim",
            format!(
                "vit: dim {} must be a positive multiple of heads {} (at most 4096), depth ≤ 256",
                p.dim, p.heads
            ),
            None,
        ));
    }
    super::mlp::check_dropout(src, p.dropout)?;
    let (channels, side) = cx.square_side(src, <VitParams as crate::component::Component>::NAME)?;
    let patch = match p.patch {
        None => default_patch(side),
        Some(q) if q > 0 && q <= side && side.is_multiple_of(q) => q,
        Some(q) => {
            let divisors: Vec<String> = (1..=side)
                .filter(|d| side.is_multiple_of(*d))
                .map(|d| d.to_string())
                .collect();
            return Err(src.key_error(
                "patch",
                format!("vit: patch {q} does not divide the image side {side}"),
                Some(format!(
                    "use one of {}, or leave patch out to get {}",
                    divisors.join(", "),
                    default_patch(side)
                )),
            ));
        }
    };
    cx.seed_device(device);
    Ok(build_vit(
        &VitShape {
            side,
            channels,
            patch,
            dim: p.dim,
            depth: p.depth,
            heads: p.heads,
            mlp_ratio: 2,
            dropout: p.dropout,
        },
        cx.num_classes,
        &mut cx.rng(),
        device,
    ))
}

crate::component!(model "vit", "vision transformer: patch embedding, pre-norm encoder blocks (multi-head attention and MLP), token-mean head; `patch` (unset by default) is the patch side, else the divisor of the image side nearest a quarter of it", VitParams, build);

#[cfg(test)]
mod tests {
    #[test]
    fn default_patch_cuts_about_four_by_four() {
        let cases = [
            (28, 7),
            (27, 9),
            (32, 8),
            (16, 4),
            (7, 1),
            (1, 1),
            (64, 16),
            (12, 3),
        ];
        for (side, patch) in cases {
            assert_eq!(super::default_patch(side), patch, "side {side}");
        }
    }
}
