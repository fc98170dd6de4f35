//! The blocks of a Llama decoder (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation
//! Language Models", §2.2), computing what Hugging Face `transformers`' `LlamaForCausalLM`
//! computes: token embeddings, pre-norm decoder layers (RMSNorm, rotary positions, grouped-query
//! causal self-attention, SwiGLU feed-forward) and a final RMSNorm with the output head.
//!
//! # Rotary positions: the rotate-half layout
//!
//! [`rope`] rotates each head's vector by *halves*: component `i` is paired with component
//! `i + d/2` (`transformers`' `rotate_half`, Su et al. 2021, "RoFormer", Eq. 34 with the
//! dimensions reordered). The q/k projection weights here are in that layout, the layout of a
//! Hugging Face checkpoint. GGUF files (llama.cpp) rotate *adjacent* pairs `(2i, 2i+1)` instead,
//! and store the q/k weights permuted to match: llama.cpp's `convert_hf_to_gguf.py` writes
//!
//! ```text
//! permute(w, n_head):  # w: [n_head · d, d_in], PyTorch layout [out, in]
//!     w.reshape(n_head, 2, d / 2, d_in).swapaxes(1, 2).reshape(w.shape)
//! ```
//!
//! (with `n_head` = the query heads for `q_proj` and the key/value heads for `k_proj`): output
//! row `h·d + 2j + s` of the GGUF tensor is row `h·d + s·d/2 + j` of the Hugging Face one
//! (`s` ∈ {0, 1}, `j` < d/2). A GGUF loader inverts it before loading into this layout:
//! `w.reshape(n_head, d / 2, 2, d_in).swapaxes(1, 2).reshape(w.shape)`, i.e. HF row
//! `h·d + s·d/2 + j` = GGUF row `h·d + 2j + s`. Only the output rows of `q_proj` and `k_proj`
//! move; `v_proj`, `o_proj` and everything else are the same in both files.

use crate::model::{Activation, Block, ForwardCtx};
use burn::module::{Module, Param};
use burn::nn::{Embedding, Linear, RmsNorm};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Device, Int, Tensor, TensorData, activation};

/// Runs an RMSNorm in `f32` whatever the dtype of `x` (mixed precision keeps normalisation in
/// full precision): `x` `[.., d]` is upcast, normalised with the layer's `f32` gain and cast
/// back. RMSNorm: `y = x / √(mean(x²) + ε) · g` (Zhang & Sennrich 2019, Eq. 4).
pub fn rms_f32<const D: usize>(norm: &RmsNorm, x: Tensor<D>) -> Tensor<D> {
    let dt = x.dtype();
    if dt == DType::F32 {
        return norm.forward(x);
    }
    norm.forward(x.cast(DType::F32)).cast(dt)
}

/// The rotary tables `(cos, sin)`, each `[len, head_dim]`, for positions `0..len`: angle
/// `θ_{p,i} = p · base^(−2i/d)` for `i < d/2`, repeated for the second half (`transformers`'
/// `LlamaRotaryEmbedding` with `rope_type = "default"`, `cat(freqs, freqs)`). Computed in `f64`
/// and rounded to `f32`.
pub fn rope_tables(len: usize, head_dim: usize, base: f64, device: &Device) -> [Tensor<2>; 2] {
    let half = head_dim / 2;
    let inv: Vec<f64> = (0..half)
        .map(|i| 1.0 / base.powf((2 * i) as f64 / head_dim as f64))
        .collect();
    let (mut cos, mut sin) = (
        Vec::with_capacity(len * head_dim),
        Vec::with_capacity(len * head_dim),
    );
    for p in 0..len {
        for k in 0..head_dim {
            let a = p as f64 * inv[k % half];
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let t = |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [len, head_dim]), device);
    [t(cos), t(sin)]
}

/// Rotary position embedding in the rotate-half layout (see the module docs): `x`
/// `[batch, heads, len, d]`, `cos`/`sin` `[len, d]` → `x ⊙ cos + rotate_half(x) ⊙ sin` with
/// `rotate_half([x₁, x₂]) = [−x₂, x₁]` (halves of the last axis).
pub fn rope(x: Tensor<4>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<4> {
    let [b, h, n, d] = x.dims();
    let half = d / 2;
    let x1 = x.clone().slice([0..b, 0..h, 0..n, 0..half]);
    let x2 = x.clone().slice([0..b, 0..h, 0..n, half..d]);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    let dt = x.dtype();
    let c = cos.clone().cast(dt).unsqueeze::<4>();
    let s = sin.clone().cast(dt).unsqueeze::<4>();
    x * c + rotated * s
}

/// Token embeddings: ids `[batch, len]` (a flat float activation of exact integers, the data's
/// token ids) → [`Activation::Seq`] `[batch, len, hidden]` (HF `model.embed_tokens`). No
/// positions are added here: they enter as rotations in every attention.
#[derive(Module, Debug)]
pub struct TokenEmbedding {
    /// The table `[vocab, hidden]`; with tied embeddings the output head holds the same
    /// parameter (same [`burn::module::ParamId`]).
    pub embed: Embedding,
}

impl Block for TokenEmbedding {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        // Token data's ids come as `Int` ([`Activation::Ids`]), looked up as they are. Float
        // ids come in `f32` under mixed precision
        // ([`Model::input_dtype`](crate::model::Model::input_dtype)); ids are exact in `f32`
        // below 2²⁴, the largest vocabulary the factory accepts.
        let ids: Tensor<2, Int> = match x {
            Activation::Ids(ids) => ids,
            other => other.into_flat().cast(DType::F32).int(),
        };
        Activation::Seq(self.embed.forward(ids))
    }
    fn token_vocab(&self) -> Option<usize> {
        Some(self.embed.weight.dims()[0])
    }
    fn kind(&self) -> &'static str {
        "embeddings"
    }
}

/// Grouped-query causal self-attention with rotary positions (Ainslie et al. 2023, "GQA";
/// Vaswani et al. 2017, Eq. 1): `heads` query heads share `kv_heads` key/value heads (query head
/// `j` reads key/value head `j / (heads / kv_heads)`, `transformers`' `repeat_kv`), scores
/// `q kᵀ / √d` with every later key masked, heads concatenated and projected. No biases.
#[derive(Module, Debug)]
pub struct Attention {
    /// Query projection, weight `[hidden, heads·d]` (HF `self_attn.q_proj`).
    pub query: Linear,
    /// Key projection, weight `[hidden, kv_heads·d]` (HF `self_attn.k_proj`).
    pub key: Linear,
    /// Value projection, weight `[hidden, kv_heads·d]` (HF `self_attn.v_proj`).
    pub value: Linear,
    /// Output projection, weight `[heads·d, hidden]` (HF `self_attn.o_proj`).
    pub output: Linear,
    /// Query heads.
    #[module(skip)]
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    #[module(skip)]
    pub kv_heads: usize,
    /// RoPE base θ (`rope_theta`).
    #[module(skip)]
    pub rope_base: f64,
}

impl Attention {
    /// `x` `[batch, len, hidden]` → `[batch, len, hidden]` (before the residual); the
    /// projections go through [`ForwardCtx::linear`] as `attention.{query,key,value,output}`.
    pub fn forward(&self, x: Tensor<3>, c: &ForwardCtx) -> Tensor<3> {
        let [b, n, _] = x.dims();
        let (h, kvh) = (self.heads, self.kv_heads);
        let q = c.linear(&self.query, "attention.query", x.clone());
        let dh = q.dims()[2] / h;
        let split = |t: Tensor<3>, heads: usize| t.reshape([b, n, heads, dh]).swap_dims(1, 2);
        let [cos, sin] = rope_tables(n, dh, self.rope_base, &x.device());
        let q = rope(split(q, h), &cos, &sin);
        let k = rope(
            split(c.linear(&self.key, "attention.key", x.clone()), kvh),
            &cos,
            &sin,
        );
        let v = split(c.linear(&self.value, "attention.value", x), kvh);
        let repeat = |t: Tensor<4>| {
            if kvh == h {
                return t;
            }
            t.unsqueeze_dim::<5>(2)
                .expand([b, kvh, h / kvh, n, dh])
                .reshape([b, h, n, dh])
        };
        let options = AttentionModuleOptions {
            is_causal: true,
            ..Default::default()
        };
        let ctx = burn::tensor::module::attention(q, repeat(k), repeat(v), None, None, options);
        c.linear(
            &self.output,
            "attention.output",
            ctx.swap_dims(1, 2).reshape([b, n, h * dh]),
        )
    }
}

/// The SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer", Eq. 6):
/// `down(SiLU(gate(x)) ⊙ up(x))`, no biases.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// Gate, weight `[hidden, ffn]` (HF `mlp.gate_proj`).
    pub gate: Linear,
    /// Up projection, weight `[hidden, ffn]` (HF `mlp.up_proj`).
    pub up: Linear,
    /// Down projection, weight `[ffn, hidden]` (HF `mlp.down_proj`).
    pub down: Linear,
}

impl FeedForward {
    /// `x` `[batch, len, hidden]` → `[batch, len, hidden]`; the projections go through
    /// [`ForwardCtx::linear`] as `ffn.{gate,up,down}`.
    pub fn forward(&self, x: Tensor<3>, c: &ForwardCtx) -> Tensor<3> {
        let g = activation::silu(c.linear(&self.gate, "ffn.gate", x.clone()));
        c.linear(&self.down, "ffn.down", g * c.linear(&self.up, "ffn.up", x))
    }
}

/// One pre-norm decoder layer (HF `LlamaDecoderLayer`): `x ← x + attn(RMS₁(x))`, then
/// `x ← x + FFN(RMS₂(x))`; [`Activation::Seq`] `[batch, len, hidden]` in and out.
#[derive(Module, Debug)]
pub struct DecoderLayer {
    /// Norm before attention (HF `input_layernorm`).
    pub norm1: RmsNorm,
    /// Self-attention (parameters under `attention.*`, what EWC's `attention|attn` group finds).
    pub attention: Attention,
    /// Norm before the feed-forward (HF `post_attention_layernorm`).
    pub norm2: RmsNorm,
    /// SwiGLU feed-forward (HF `mlp`).
    pub ffn: FeedForward,
}

/// The hidden states of a sequence activation (`Seq`, or `Tokens` whose mask is dropped: a
/// causal decoder needs no padding mask for right-padded rows).
fn hidden_of(x: Activation, who: &str) -> Tensor<3> {
    match x {
        Activation::Seq(t) | Activation::Tokens { hidden: t, .. } => t,
        other => panic!(
            "{who} takes a token sequence [batch, len, hidden]; got {other:?}: put the embeddings block first"
        ),
    }
}

impl Block for DecoderLayer {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = hidden_of(x, "a Llama decoder layer");
        let x = x.clone() + self.attention.forward(rms_f32(&self.norm1, x), ctx);
        let x = x.clone() + self.ffn.forward(rms_f32(&self.norm2, x), ctx);
        Activation::Seq(x)
    }
    fn kind(&self) -> &'static str {
        "decoder"
    }
}

/// The final RMSNorm and the output head: [`Activation::Seq`] `[batch, len, hidden]` → per-token
/// logits [`Activation::Seq`] `[batch, len, vocab]`, `logits = RMS(x) Wᵀ`.
#[derive(Module, Debug)]
pub struct LmHead {
    /// HF `model.norm`.
    pub norm: RmsNorm,
    /// The output weight `[vocab, hidden]` (HF `lm_head.weight`, PyTorch layout); with tied
    /// embeddings it is the embedding table itself (same parameter id as `blocks.0.embed.weight`).
    pub lm_head: Param<Tensor<2>>,
}

impl Block for LmHead {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        let x = rms_f32(&self.norm, hidden_of(x, "the Llama head"));
        let w = self.lm_head.val();
        let w = if w.dtype() == x.dtype() {
            w
        } else {
            w.cast(x.dtype())
        };
        let [b, n, d] = x.dims();
        let vocab = w.dims()[0];
        let logits = x.reshape([b * n, d]).matmul(w.transpose());
        Activation::Seq(logits.reshape([b, n, vocab]))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}
