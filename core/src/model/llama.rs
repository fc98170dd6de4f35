//! `[model] type = "llama"`: a Llama-architecture decoder (Touvron et al. 2023) on token ids,
//! as blocks: a [`TokenEmbedding`] block, one [`DecoderLayer`] block per layer (so segment
//! checkpointing, the memory budget, mixed precision and layered importance act on real layers)
//! and an [`LmHead`] (final RMSNorm and the output projection, tied to the embeddings or not).
//!
//! Its next-token logits are Hugging Face `transformers`' `LlamaForCausalLM`'s on the same ids
//! (pre-norm RMSNorm, rotary positions in the rotate-half layout, grouped-query causal attention,
//! SwiGLU); [`hf`] loads a Hugging Face directory (`config.json` + `model.safetensors`), [`gguf`]
//! a GGUF file (llama.cpp's format: geometry, weights and tokenizer in one file, its q/k layout
//! undone as [`layers`] documents).
//!
//! The data contract: a sample is `InputShape::Features(len)` whose values are token ids stored
//! as exact `f32` integers (right padding is harmless: the mask is causal); the model's input is
//! `[batch, len]`. Its output is per-token logits `[batch, len, vocab]`
//! ([`Model::forward_tokens`](crate::model::Model::forward_tokens)); [`Model::num_classes`] is
//! the vocabulary.
//!
//! Parameter paths: `blocks.0.embed.weight`, `blocks.L.attention.{query,key,value,output}.weight`
//! (layer `L` = 1..=layers: exactly the paths EWC's default `attention|attn` group matches),
//! `blocks.L.{norm1,norm2}.gamma`, `blocks.L.ffn.{gate,up,down}.weight`, and the head's
//! `blocks.{layers+1}.norm.gamma` and `blocks.{layers+1}.lm_head` (with tied embeddings the same
//! parameter as `blocks.0.embed.weight`, listed once by [`Model::params`]).
//!
//! [`Model::num_classes`]: crate::model::Model::num_classes
//! [`Model::params`]: crate::model::Model::params

pub mod gguf;
pub mod hf;
pub mod layers;

pub use layers::{Attention, DecoderLayer, FeedForward, LmHead, TokenEmbedding};

use crate::model::init::InitSource;
use crate::model::{DynBlock, InputShape, Model};
use crate::rng::Rng;
use burn::module::Param;
use burn::nn::{Embedding, Linear, RmsNormConfig};
use burn::tensor::{Device, TensorData};
use rand::Rng as _;

/// The geometry of a Llama decoder (Hugging Face `LlamaConfig`'s fields).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaShape {
    /// Decoder layers (`num_hidden_layers`).
    pub layers: usize,
    /// Width (`hidden_size`), a multiple of `heads`.
    pub hidden: usize,
    /// Query heads (`num_attention_heads`); the head width is `hidden / heads`, even.
    pub heads: usize,
    /// Key/value heads (`num_key_value_heads`), dividing `heads`.
    pub kv_heads: usize,
    /// FFN width (`intermediate_size`).
    pub ffn: usize,
    /// Vocabulary size (`vocab_size`).
    pub vocab: usize,
    /// RoPE base θ (`rope_theta`).
    pub rope_base: f64,
    /// RMSNorm ε (`rms_norm_eps`).
    pub rms_eps: f64,
    /// Whether the output head is the embedding table (`tie_word_embeddings`).
    pub tied: bool,
}

impl LlamaShape {
    /// The width of one head, `hidden / heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// The number of scalar parameters (a tied table counted once), as `transformers` counts
    /// `LlamaForCausalLM`'s: `V·d (+ V·d untied) + d + L·(2d + d·(h + 2k)·d_h + h·d_h·d + 3·d·f)`.
    pub fn num_params(&self) -> usize {
        let (d, f, dh) = (self.hidden, self.ffn, self.head_dim());
        let attn = d * (self.heads + 2 * self.kv_heads) * dh + self.heads * dh * d;
        let layer = 2 * d + attn + 3 * d * f;
        let table = self.vocab * d;
        table * if self.tied { 1 } else { 2 } + d + self.layers * layer
    }
}

/// `n` values uniform in `±0.02·√3` (standard deviation 0.02, `transformers`'
/// `initializer_range`).
fn draw(n: usize, rng: &mut Rng) -> Vec<f32> {
    let a = 0.02 * 3f32.sqrt();
    (0..n).map(|_| rng.random_range(-a..a)).collect()
}

/// A bias-free linear layer with weight `[d_in, d_out]` drawn with standard deviation 0.02.
fn linear(d_in: usize, d_out: usize, rng: &mut Rng, device: &Device) -> Linear {
    Linear {
        weight: Param::from_data(
            TensorData::new(draw(d_in * d_out, rng), [d_in, d_out]),
            device,
        ),
        bias: None,
    }
}

/// Builds a Llama decoder, every weight drawn from `rng` (standard deviation 0.02, norms 1, as
/// `transformers` initialises); with `shape.tied` the head shares the embedding parameter.
/// The model's `num_classes` is the vocabulary; its default segment is one block.
pub fn build_llama(shape: &LlamaShape, rng: &mut Rng, device: &Device) -> Model {
    let (d, dh) = (shape.hidden, shape.head_dim());
    let norm = || {
        RmsNormConfig::new(d)
            .with_epsilon(shape.rms_eps)
            .init(device)
    };
    let embed = Embedding {
        weight: Param::from_data(
            TensorData::new(draw(shape.vocab * d, rng), [shape.vocab, d]),
            device,
        ),
    };
    let tied = embed.weight.clone();
    let mut blocks = vec![DynBlock::new(TokenEmbedding { embed })];
    for _ in 0..shape.layers {
        blocks.push(DynBlock::new(DecoderLayer {
            norm1: norm(),
            attention: Attention {
                query: linear(d, shape.heads * dh, rng, device),
                key: linear(d, shape.kv_heads * dh, rng, device),
                value: linear(d, shape.kv_heads * dh, rng, device),
                output: linear(shape.heads * dh, d, rng, device),
                heads: shape.heads,
                kv_heads: shape.kv_heads,
                rope_base: shape.rope_base,
            },
            norm2: norm(),
            ffn: FeedForward {
                gate: linear(d, shape.ffn, rng, device),
                up: linear(d, shape.ffn, rng, device),
                down: linear(shape.ffn, d, rng, device),
            },
        }));
    }
    let lm_head = if shape.tied {
        tied
    } else {
        Param::from_data(
            TensorData::new(draw(shape.vocab * d, rng), [shape.vocab, d]),
            device,
        )
    };
    blocks.push(DynBlock::new(LmHead {
        norm: norm(),
        lm_head,
    }));
    Model::new(blocks, shape.vocab).with_segment_blocks(1)
}

/// `[model] type = "llama"`: its keys. A `preset` gives the geometry; a key given beside it
/// overrides that field.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlamaParams {
    /// `"smollm2"` (SmolLM2-135M: 30 layers, hidden 576, 9 heads, 3 key/value heads, FFN 1536,
    /// vocabulary 49,152, RoPE base 1e5, RMSNorm ε 1e-5, tied: 134,515,008 parameters); unset:
    /// the keys alone (defaults: 2 layers, hidden 64, 4 heads, 2 key/value heads, FFN 128,
    /// vocabulary 49,152, base 1e5, ε 1e-5, tied).
    pub preset: Option<String>,
    /// Decoder layers (at most 256).
    pub layers: Option<usize>,
    /// Width, a multiple of `heads` with an even head width (at most 16,384).
    pub hidden: Option<usize>,
    /// Query heads.
    pub heads: Option<usize>,
    /// Key/value heads, dividing `heads`.
    pub kv_heads: Option<usize>,
    /// FFN width.
    pub ffn: Option<usize>,
    /// Vocabulary size (token ids must be below it).
    pub vocab: Option<usize>,
    /// RoPE base θ (> 1).
    pub rope_base: Option<f64>,
    /// RMSNorm ε in (0, 1).
    pub rms_eps: Option<f64>,
    /// Output head tied to the embedding table.
    pub tied: Option<bool>,
}

/// The geometry without a preset: `[layers, hidden, heads, kv_heads, ffn, vocab]`.
pub const DEFAULT_GEOMETRY: [usize; 6] = [2, 64, 4, 2, 128, 49_152];

/// A named geometry: `(name, [layers, hidden, heads, kv_heads, ffn, vocab])`, base 1e5, ε 1e-5,
/// tied.
pub const PRESETS: [(&str, [usize; 6]); 1] = [("smollm2", [30, 576, 9, 3, 1536, 49_152])];

impl LlamaParams {
    /// The geometry these keys describe.
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] for an unknown preset or a geometry
    /// [`check_shape`] refuses.
    pub fn shape(&self, src: &crate::config::ParamSource) -> crate::Result<LlamaShape> {
        let base = super::preset_geometry(
            src,
            <LlamaParams as crate::component::Component>::NAME,
            &PRESETS,
            self.preset.as_deref(),
            DEFAULT_GEOMETRY,
        )?;
        let shape = LlamaShape {
            layers: self.layers.unwrap_or(base[0]),
            hidden: self.hidden.unwrap_or(base[1]),
            heads: self.heads.unwrap_or(base[2]),
            kv_heads: self.kv_heads.unwrap_or(base[3]),
            ffn: self.ffn.unwrap_or(base[4]),
            vocab: self.vocab.unwrap_or(base[5]),
            rope_base: self.rope_base.unwrap_or(1e5),
            rms_eps: self.rms_eps.unwrap_or(1e-5),
            tied: self.tied.unwrap_or(true),
        };
        check_shape(&shape, src)?;
        Ok(shape)
    }

    /// The geometry of the Hugging Face checkpoint in `dir` (its `config.json`); every key
    /// given here must agree with it.
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] at `init` for an unreadable or unsupported
    /// `config.json`, and at the key that disagrees with it.
    pub fn shape_from_dir(
        &self,
        src: &crate::config::ParamSource,
        dir: &std::path::Path,
    ) -> crate::Result<LlamaShape> {
        let c = hf::HfConfig::read(dir).map_err(|e| src.key_error("init", e.to_string(), None))?;
        self.agree(src, c.shape(), &dir.join("config.json"))
    }

    /// The geometry of the GGUF file `file` ([`gguf::shape_of`]: its metadata and tensor
    /// table); every key given here must agree with it.
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] at `init` for a file that cannot be read or is
    /// not a llama GGUF, and at the key that disagrees with it.
    pub fn shape_from_gguf(
        &self,
        src: &crate::config::ParamSource,
        file: &std::path::Path,
    ) -> crate::Result<LlamaShape> {
        let shape = crate::gguf::GgufFile::open(file)
            .and_then(|f| gguf::shape_of(&f))
            .map_err(|e| src.key_error("init", e.to_string(), None))?;
        self.agree(src, shape, file)
    }

    /// `shape` (a pretrained start's, read from `from`) when every key given here agrees with
    /// it and [`check_shape`] accepts it.
    fn agree(
        &self,
        src: &crate::config::ParamSource,
        shape: LlamaShape,
        from: &std::path::Path,
    ) -> crate::Result<LlamaShape> {
        let disagree = |key: &str, given: String, has: String| {
            Err(src.key_error(
                key,
                format!(
                    "llama: {key} = {given} disagrees with {}: {has}",
                    from.display()
                ),
                Some("leave it out: the checkpoint fixes the geometry".into()),
            ))
        };
        if let Some(name) = &self.preset {
            return disagree(
                "preset",
                format!("{name:?}"),
                "a geometry of its own".into(),
            );
        }
        for (key, given, has) in [
            ("layers", self.layers, shape.layers),
            ("hidden", self.hidden, shape.hidden),
            ("heads", self.heads, shape.heads),
            ("kv_heads", self.kv_heads, shape.kv_heads),
            ("ffn", self.ffn, shape.ffn),
            ("vocab", self.vocab, shape.vocab),
        ] {
            if let Some(v) = given.filter(|v| *v != has) {
                return disagree(key, v.to_string(), has.to_string());
            }
        }
        // Compared in f32: a GGUF file stores them as f32 (its ε 1e-5 is 9.99999975e-6).
        for (key, given, has) in [
            ("rope_base", self.rope_base, shape.rope_base),
            ("rms_eps", self.rms_eps, shape.rms_eps),
        ] {
            if let Some(v) = given.filter(|v| *v as f32 != has as f32) {
                return disagree(key, v.to_string(), has.to_string());
            }
        }
        if let Some(t) = self.tied.filter(|t| *t != shape.tied) {
            return disagree("tied", t.to_string(), shape.tied.to_string());
        }
        check_shape(&shape, src)?;
        Ok(shape)
    }
}

/// Refuses a geometry that cannot be built: a zero size, `hidden` not a multiple of `heads`
/// or an odd head width (rotary pairs), `kv_heads` not dividing `heads`, more than 256 layers,
/// a width over 16,384, an FFN over 65,536, a vocabulary over 2²⁴, a RoPE base not above 1, or
/// an ε outside (0, 1).
///
/// # Errors
/// A positioned [`crate::Error::Config`] at the offending key.
pub fn check_shape(s: &LlamaShape, src: &crate::config::ParamSource) -> crate::Result<()> {
    let bad = |key: &str, msg: String| Err(src.key_error(key, format!("llama: {msg}"), None));
    for (key, v, max) in [
        ("layers", s.layers, 256),
        ("hidden", s.hidden, 16_384),
        ("heads", s.heads, 1024),
        ("kv_heads", s.kv_heads, 1024),
        ("ffn", s.ffn, 65_536),
        ("vocab", s.vocab, 1 << 24),
    ] {
        if v == 0 || v > max {
            return bad(key, format!("{key} {v} must be in 1..={max}"));
        }
    }
    if !s.hidden.is_multiple_of(s.heads) || !s.head_dim().is_multiple_of(2) {
        return bad(
            "hidden",
            format!(
                "hidden {} must be a multiple of heads {} with an even head width",
                s.hidden, s.heads
            ),
        );
    }
    if !s.heads.is_multiple_of(s.kv_heads) {
        return bad(
            "kv_heads",
            format!("kv_heads {} must divide heads {}", s.kv_heads, s.heads),
        );
    }
    if !(s.rope_base > 1.0 && s.rope_base.is_finite()) {
        return bad(
            "rope_base",
            format!("rope_base {} must be above 1", s.rope_base),
        );
    }
    if !(s.rms_eps > 0.0 && s.rms_eps < 1.0) {
        return bad(
            "rms_eps",
            format!("rms_eps {} must be in (0, 1)", s.rms_eps),
        );
    }
    Ok(())
}

/// The `llama` factory: token ids `InputShape::Features(len)`. `[model] init` is told apart by
/// [`InitSource::of`]: for a Hugging Face directory the geometry is its `config.json`'s
/// ([`LlamaParams::shape_from_dir`]) and the trainer loads its weights ([`hf::load_dir`]); for a
/// GGUF file the geometry is its metadata's ([`LlamaParams::shape_from_gguf`]) and the trainer
/// loads its weights ([`gguf::load_file`]); otherwise the keys give the geometry.
///
/// # Errors
/// [`LlamaParams::shape`]'s, and a positioned error at `type` for images.
pub fn build(
    src: &crate::config::ParamSource,
    cx: &crate::model::ModelContext,
    device: &Device,
) -> crate::Result<Model> {
    let p: LlamaParams = src.parse()?;
    let shape = match src.model_init().map(|path| InitSource::of(&path)) {
        Some(InitSource::HfDir(dir)) => p.shape_from_dir(src, &dir)?,
        Some(InitSource::Gguf(file)) => p.shape_from_gguf(src, &file)?,
        _ => p.shape(src)?,
    };
    let InputShape::Features(_) = cx.input else {
        return Err(src.key_error(
            "type",
            format!("llama reads token ids [len]; this data is {}", cx.input),
            Some("use a text dataset (token ids), or type = \"cnn\" / \"vit\" for images".into()),
        ));
    };
    cx.seed_device(device);
    Ok(build_llama(&shape, &mut cx.rng(), device))
}

/// The keys' effective defaults for `engram list` and the reference page: the geometry without
/// a preset (every key is optional so that a `preset` or an `init` directory can fix it).
fn defaults() -> toml::Table {
    let mut t = toml::Table::new();
    let [layers, hidden, heads, kv_heads, ffn, vocab] = DEFAULT_GEOMETRY;
    for (key, v) in [
        ("layers", layers),
        ("hidden", hidden),
        ("heads", heads),
        ("kv_heads", kv_heads),
        ("ffn", ffn),
        ("vocab", vocab),
    ] {
        t.insert(key.into(), toml::Value::Integer(v as i64));
    }
    t.insert("rope_base".into(), toml::Value::Float(1e5));
    t.insert("rms_eps".into(), toml::Value::Float(1e-5));
    t.insert("tied".into(), toml::Value::Boolean(true));
    t
}

crate::component!(model "llama", "Llama-architecture decoder on token ids: embeddings, pre-norm decoder layers (RMSNorm, rotary positions, grouped-query causal attention, SwiGLU; one block each) and a tied or untied output head giving per-token logits; `preset` = smollm2", LlamaParams, build, with defaults);
