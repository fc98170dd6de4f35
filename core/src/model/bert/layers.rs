//! The blocks of a BERT encoder (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
//! Transformers for Language Understanding", §3), computing what Hugging Face `transformers`'
//! `BertModel` computes: embeddings, post-norm encoder layers, and a pooled classification head.

use crate::model::{Activation, Block, ForwardCtx, norm_f32};
use burn::module::Module;
use burn::nn::{Dropout, Embedding, LayerNorm, Linear};
use burn::tensor::{Bool, DType, Int, Tensor};

/// The score given to a padded key before the softmax: `exp(-10⁴ - max)` is exactly 0 in
/// `f32` for any real score above `-9900`, and the value is finite in `f16` (mixed precision).
pub const MASKED_SCORE: f32 = -1.0e4;

/// Token, position and token-type embeddings, summed, layer-normalised and dropped out:
/// ids `[batch, tokens]` ([`Activation::Ids`], a text batch's input; a flat float activation of
/// exact integers is read as ids too, for float data that holds them) →
/// [`Activation::Tokens`] `[batch, tokens, hidden]` with the mask `ids != pad_id`. Every token's
/// type is 0 and positions count from 0.
#[derive(Module, Debug)]
pub struct Embeddings {
    /// Word embeddings `[vocab, hidden]` (HF `embeddings.word_embeddings`).
    pub word: Embedding,
    /// Position embeddings `[max_position, hidden]` (HF `embeddings.position_embeddings`).
    pub position: Embedding,
    /// Token-type embeddings `[type_vocab, hidden]` (HF `embeddings.token_type_embeddings`).
    pub token_type: Embedding,
    /// HF `embeddings.LayerNorm`.
    pub norm: LayerNorm,
    /// Dropout after the norm.
    pub dropout: Dropout,
    /// The padding id: positions holding it are masked out of attention and mean pooling.
    #[module(skip)]
    pub pad_id: u32,
}

impl Block for Embeddings {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        // The output takes the parameters' dtype (the compute dtype under mixed precision);
        // float ids come in `f32` there ([`Model::input_dtype`](crate::model::Model::input_dtype)).
        let dt = self.word.weight.val().dtype();
        let ids: Tensor<2, Int> = match x {
            Activation::Ids(ids) => ids,
            other => other.into_flat().cast(DType::F32).int(),
        };
        let mask: Tensor<2, Bool> = ids.clone().not_equal_elem(self.pad_id as i64);
        // One read of the batch a forward pass (a device sync on a GPU) instead of one a layer.
        let padded = mask.clone().bool_not().any().into_scalar::<bool>();
        let [_, len] = ids.dims();
        let words = self.word.forward(ids);
        let pos = self
            .position
            .weight
            .val()
            .slice(0..len)
            .unsqueeze_dim::<3>(0);
        let types = self
            .token_type
            .weight
            .val()
            .slice(0..1)
            .unsqueeze_dim::<3>(0);
        let sum = words + pos + types;
        let hidden = self.dropout.forward(norm_f32(&self.norm, sum));
        let hidden = if hidden.dtype() == dt {
            hidden
        } else {
            hidden.cast(dt)
        };
        Activation::Tokens {
            hidden,
            mask,
            padded,
        }
    }
    fn token_vocab(&self) -> Option<usize> {
        Some(self.word.weight.dims()[0])
    }
    fn kind(&self) -> &'static str {
        "embeddings"
    }
}

/// BERT's multi-head self-attention with its output projection (HF `attention.self.{query,key,
/// value}` and `attention.output.dense`): `softmax(Q Kᵀ / √d_head + M) V`, heads concatenated,
/// then projected (Vaswani et al. 2017, Eq. 1); `M` is [`MASKED_SCORE`] at padded keys.
#[derive(Module, Debug)]
pub struct SelfAttention {
    /// Query projection, weight `[hidden, hidden]`.
    pub query: Linear,
    /// Key projection, weight `[hidden, hidden]`.
    pub key: Linear,
    /// Value projection, weight `[hidden, hidden]`.
    pub value: Linear,
    /// Output projection, weight `[hidden, hidden]`.
    pub output: Linear,
    /// Dropout on the attention probabilities.
    pub dropout: Dropout,
    /// Number of heads (divides the width).
    #[module(skip)]
    pub heads: usize,
}

impl SelfAttention {
    /// `x` `[batch, tokens, hidden]`, `mask` `[batch, tokens]` (`true` at real tokens) →
    /// `[batch, tokens, hidden]` (before the residual and the norm). With `padded` `false` (no
    /// `false` in `mask`) the scores are not masked: the same values, one pass over
    /// `[batch, heads, tokens, tokens]` fewer each way (what `transformers` does when its
    /// attention mask is all ones).
    /// Its linear layers go through [`ForwardCtx::linear`] as `attention.{query,key,value,
    /// output}` (the block's activation-path adapters).
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &Tensor<2, Bool>,
        padded: bool,
        c: &ForwardCtx,
    ) -> Tensor<3> {
        let [b, n, d] = x.dims();
        let h = self.heads;
        let dh = d / h;
        let split = |t: Tensor<3>| t.reshape([b, n, h, dh]).swap_dims(1, 2);
        let q = split(c.linear(&self.query, "attention.query", x.clone()));
        let k = split(c.linear(&self.key, "attention.key", x.clone()));
        let v = split(c.linear(&self.value, "attention.value", x));
        let scores = q.matmul(k.swap_dims(2, 3)) / (dh as f64).sqrt();
        let scores = if padded {
            let pad = mask
                .clone()
                .bool_not()
                .reshape([b, 1, 1, n])
                .expand([b, h, n, n]);
            scores.mask_fill(pad, MASKED_SCORE)
        } else {
            scores
        };
        let probs = self
            .dropout
            .forward(crate::model::nodes::softmax_last(scores));
        let ctx = probs.matmul(v).swap_dims(1, 2).reshape([b, n, d]);
        c.linear(&self.output, "attention.output", ctx)
    }
}

/// One post-norm encoder layer (HF `BertLayer`): `x ← LN₁(x + drop(attn(x)))`, then
/// `x ← LN₂(x + drop(W₂ GELU(W₁ x)))` with GELU in its erf form; [`Activation::Tokens`]
/// `[batch, tokens, hidden]` in and out, the mask passed on.
#[derive(Module, Debug)]
pub struct EncoderLayer {
    /// Self-attention (parameters under `attention.*`, what EWC's `attention|attn` group finds).
    pub attention: SelfAttention,
    /// Norm after the attention residual (HF `attention.output.LayerNorm`).
    pub norm1: LayerNorm,
    /// FFN expansion, weight `[hidden, ffn]` (HF `intermediate.dense`).
    pub ffn_in: Linear,
    /// FFN projection, weight `[ffn, hidden]` (HF `output.dense`).
    pub ffn_out: Linear,
    /// Norm after the FFN residual (HF `output.LayerNorm`).
    pub norm2: LayerNorm,
    /// Dropout on each residual branch.
    pub dropout: Dropout,
}

impl Block for EncoderLayer {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let Activation::Tokens {
            hidden: x,
            mask,
            padded,
        } = x
        else {
            panic!("a BERT encoder layer takes Activation::Tokens; put the embeddings block first");
        };
        let masked = ForwardCtx {
            token_mask: Some(mask.clone()),
            ..ctx.clone()
        };
        let ctx = &masked;
        let a = self
            .dropout
            .forward(self.attention.forward(x.clone(), &mask, padded, ctx));
        let x = norm_f32(&self.norm1, x + a);
        let f = ctx.linear(
            &self.ffn_out,
            "ffn_out",
            crate::model::nodes::gelu(ctx.linear(&self.ffn_in, "ffn_in", x.clone())),
        );
        let x = norm_f32(&self.norm2, x + self.dropout.forward(f));
        Activation::Tokens {
            hidden: x,
            mask,
            padded,
        }
    }
    fn kind(&self) -> &'static str {
        "encoder"
    }
}

/// How the head reduces the tokens to one vector per sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The first token's (`[CLS]`) last hidden state.
    Cls,
    /// The mean of the last hidden states over real (non-pad) tokens (sentence-transformers'
    /// mean pooling: `Σ mᵢ hᵢ / max(Σ mᵢ, 10⁻⁹)`).
    Mean,
}

/// `hidden` `[batch, tokens, d]` pooled to `[batch, d]` by `pooling`, with `mask`
/// `[batch, tokens]` (`true` at real tokens).
pub fn pool(hidden: Tensor<3>, mask: &Tensor<2, Bool>, pooling: Pooling) -> Tensor<2> {
    let [b, n, d] = hidden.dims();
    match pooling {
        Pooling::Cls => hidden.slice([0..b, 0..1, 0..d]).reshape([b, d]),
        Pooling::Mean => {
            let m: Tensor<2> = mask.clone().float().cast(hidden.dtype());
            let count = m.clone().sum_dim(1).clamp_min(1e-9);
            let summed = (hidden * m.reshape([b, n, 1])).sum_dim(1).reshape([b, d]);
            summed / count
        }
    }
}

/// Pooling then a linear classifier: [`Activation::Tokens`] `[batch, tokens, hidden]` →
/// logits `[batch, classes]`.
#[derive(Module, Debug)]
pub struct PoolHead {
    /// Dropout on the pooled vector.
    pub dropout: Dropout,
    /// Classifier, weight `[hidden, classes]`.
    pub linear: Linear,
    /// `cls` or `mean`.
    #[module(skip)]
    pub pooling: Pooling,
}

impl Block for PoolHead {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let Activation::Tokens { hidden, mask, .. } = x else {
            panic!("the BERT head takes Activation::Tokens [batch, tokens, hidden]");
        };
        let pooled = self.dropout.forward(pool(hidden, &mask, self.pooling));
        Activation::Flat(ctx.linear(&self.linear, "linear", pooled))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}
