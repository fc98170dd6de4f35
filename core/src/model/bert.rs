//! `[model] type = "bert"`: a BERT-family encoder (Devlin et al. 2019) on token ids, as
//! blocks: an [`Embeddings`] block, one [`EncoderLayer`] block per layer (so segment
//! checkpointing, the memory budget and mixed precision act on real layers) and a
//! [`PoolHead`] (`cls` or `mean` pooling, then a linear classifier to the stream's classes).
//!
//! Its last hidden state is Hugging Face `transformers`' `BertModel`'s on the same ids (post-norm
//! layers, erf GELU, token type 0, attention masked at `pad_id`); [`hf`] loads a Hugging Face
//! directory (`config.json` + `model.safetensors`).
//!
//! The data contract: a sample is `InputShape::Features(max_len)` whose values are token ids
//! (`Values::Tokens`, `uint32`), padded with `pad_id` and never normalised; the model's input
//! is `Int` ids `[batch, max_len]` ([`crate::model::Activation::Ids`]), looked up by its first
//! block. Float data of exact integer ids is read as ids too (cast to `Int` there).
//!
//! Parameter paths: `blocks.0.{word,position,token_type}.weight`, `blocks.0.norm.*`,
//! `blocks.L.attention.{query,key,value,output}.*` (layer `L` = 1..=layers: exactly the paths
//! EWC's default `attention|attn` group matches), `blocks.L.{norm1,ffn_in,ffn_out,norm2}.*`,
//! and the head's `blocks.{layers+1}.linear.*`.

pub mod hf;
pub mod layers;
pub mod peft;

pub use layers::{Embeddings, EncoderLayer, PoolHead, Pooling, SelfAttention, pool};

use crate::model::{DynBlock, InputShape, Model};
use crate::rng::Rng;
use burn::module::Param;
use burn::nn::{DropoutConfig, Embedding, LayerNormConfig, Linear};
use burn::tensor::{Device, TensorData};
use rand::Rng as _;

/// The geometry of a BERT encoder (Hugging Face `BertConfig`'s fields).
#[derive(Clone, Debug, PartialEq)]
pub struct BertShape {
    /// Encoder layers (`num_hidden_layers`).
    pub layers: usize,
    /// Width (`hidden_size`), a multiple of `heads`.
    pub hidden: usize,
    /// Attention heads (`num_attention_heads`).
    pub heads: usize,
    /// FFN width (`intermediate_size`).
    pub ffn: usize,
    /// Vocabulary size (`vocab_size`).
    pub vocab: usize,
    /// Longest sequence the position table holds (`max_position_embeddings`).
    pub max_position: usize,
    /// Token types (`type_vocab_size`).
    pub type_vocab: usize,
    /// Layer-norm ε (`layer_norm_eps`).
    pub layer_norm_eps: f64,
    /// Dropout probability in `[0, 1)` (embeddings, attention probabilities, residual
    /// branches, pooled vector), active only in training.
    pub dropout: f64,
    /// The padding id (masked out of attention and mean pooling).
    pub pad_id: u32,
    /// How the head pools the tokens.
    pub pooling: Pooling,
}

/// A linear layer with weight `[d_in, d_out]` drawn uniformly with standard deviation 0.02
/// (BERT's initialiser range) and a zero bias.
fn bert_linear(d_in: usize, d_out: usize, rng: &mut Rng, device: &Device) -> Linear {
    Linear {
        weight: Param::from_data(
            TensorData::new(draw(d_in * d_out, rng), [d_in, d_out]),
            device,
        ),
        bias: Some(Param::from_data(
            TensorData::new(vec![0f32; d_out], [d_out]),
            device,
        )),
    }
}

/// `n` values uniform in `±0.02·√3` (standard deviation 0.02).
fn draw(n: usize, rng: &mut Rng) -> Vec<f32> {
    let a = 0.02 * 3f32.sqrt();
    (0..n).map(|_| rng.random_range(-a..a)).collect()
}

fn embedding(rows: usize, d: usize, rng: &mut Rng, device: &Device) -> Embedding {
    Embedding {
        weight: Param::from_data(TensorData::new(draw(rows * d, rng), [rows, d]), device),
    }
}

/// Builds a BERT encoder with a `classes`-way head, every weight drawn from `rng` (standard
/// deviation 0.02, biases 0, norms 1 and 0, as BERT initialises).
pub fn build_bert(shape: &BertShape, classes: usize, rng: &mut Rng, device: &Device) -> Model {
    let d = shape.hidden;
    let norm = || {
        LayerNormConfig::new(d)
            .with_epsilon(shape.layer_norm_eps)
            .init(device)
    };
    let dropout = || DropoutConfig::new(shape.dropout).init();
    let mut blocks = vec![DynBlock::new(Embeddings {
        word: embedding(shape.vocab, d, rng, device),
        position: embedding(shape.max_position, d, rng, device),
        token_type: embedding(shape.type_vocab, d, rng, device),
        norm: norm(),
        dropout: dropout(),
        pad_id: shape.pad_id,
    })];
    for _ in 0..shape.layers {
        blocks.push(DynBlock::new(EncoderLayer {
            attention: SelfAttention {
                query: bert_linear(d, d, rng, device),
                key: bert_linear(d, d, rng, device),
                value: bert_linear(d, d, rng, device),
                output: bert_linear(d, d, rng, device),
                dropout: dropout(),
                heads: shape.heads,
            },
            norm1: norm(),
            ffn_in: bert_linear(d, shape.ffn, rng, device),
            ffn_out: bert_linear(shape.ffn, d, rng, device),
            norm2: norm(),
            dropout: dropout(),
        }));
    }
    blocks.push(DynBlock::new(PoolHead {
        dropout: dropout(),
        linear: bert_linear(d, classes, rng, device),
        pooling: shape.pooling,
    }));
    Model::new(blocks, classes).with_segment_blocks(1)
}

/// `[model] type = "bert"`: its keys. A `preset` gives the geometry; a key given beside it
/// overrides that field.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BertParams {
    /// `"minilm"` (6 layers, hidden 384, 12 heads, FFN 1536), `"base"` (12, 768, 12, 3072),
    /// `"large"` (24, 1024, 16, 4096), all with vocabulary 30,522; unset: the keys alone
    /// (defaults: 2 layers, hidden 128, 2 heads, FFN 512, vocabulary 30,522).
    pub preset: Option<String>,
    /// Encoder layers (at most 256).
    pub layers: Option<usize>,
    /// Width, a multiple of `heads` (at most 8192).
    pub hidden: Option<usize>,
    /// Attention heads.
    pub heads: Option<usize>,
    /// FFN width.
    pub ffn: Option<usize>,
    /// Vocabulary size (token ids must be below it).
    pub vocab: Option<usize>,
    /// Position table length; the data's `max_len` must not exceed it. Default 512.
    pub max_position: Option<usize>,
    /// Token types. Default 2.
    pub type_vocab: Option<usize>,
    /// Layer-norm ε. Default 1e-12.
    pub layer_norm_eps: Option<f64>,
    /// `"cls"` (default) or `"mean"` (over non-pad tokens).
    pub pooling: Pooling,
    /// The padding id. Default 0 (BERT's `[PAD]`), or a checkpoint's `pad_token_id`.
    pub pad_id: Option<u32>,
    /// Dropout probability in `[0, 1)`, active in training only. Default 0.1.
    pub dropout: f64,
}

impl Default for BertParams {
    fn default() -> Self {
        Self {
            preset: None,
            layers: None,
            hidden: None,
            heads: None,
            ffn: None,
            vocab: None,
            max_position: None,
            type_vocab: None,
            layer_norm_eps: None,
            pooling: Pooling::Cls,
            pad_id: None,
            dropout: 0.1,
        }
    }
}

/// The presets' `(layers, hidden, heads, ffn)`, by name.
pub const PRESETS: [(&str, [usize; 4]); 3] = [
    ("minilm", [6, 384, 12, 1536]),
    ("base", [12, 768, 12, 3072]),
    ("large", [24, 1024, 16, 4096]),
];

/// BERT's WordPiece vocabulary size (the presets').
pub const BERT_VOCAB: usize = 30_522;

impl BertParams {
    /// The geometry these keys describe.
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] for an unknown preset, a zero size, `heads` not
    /// dividing `hidden`, more than 256 layers or a width over 8192, `type_vocab` 0, a
    /// non-positive `layer_norm_eps`, dropout outside `[0, 1)`, or a `pad_id` outside the
    /// vocabulary.
    pub fn shape(&self, src: &crate::config::ParamSource) -> crate::Result<BertShape> {
        let base = super::preset_geometry(
            src,
            <BertParams as crate::component::Component>::NAME,
            &PRESETS,
            self.preset.as_deref(),
            [2, 128, 2, 512],
        )?;
        let shape = BertShape {
            layers: self.layers.unwrap_or(base[0]),
            hidden: self.hidden.unwrap_or(base[1]),
            heads: self.heads.unwrap_or(base[2]),
            ffn: self.ffn.unwrap_or(base[3]),
            vocab: self.vocab.unwrap_or(BERT_VOCAB),
            max_position: self.max_position.unwrap_or(512),
            type_vocab: self.type_vocab.unwrap_or(2),
            layer_norm_eps: self.layer_norm_eps.unwrap_or(1e-12),
            dropout: self.dropout,
            pad_id: self.pad_id.unwrap_or(0),
            pooling: self.pooling,
        };
        check_shape(&shape, src)?;
        Ok(shape)
    }

    /// The geometry of the Hugging Face checkpoint in `dir` (its `config.json`), with these
    /// keys' `pooling`, `dropout` and `pad_id`; every geometry key given here must agree with
    /// it.
    ///
    /// # Errors
    /// A positioned [`crate::Error::Config`] at `init` for an unreadable or unsupported
    /// `config.json`, and at the key (or `preset`) that disagrees with it.
    pub fn shape_from_dir(
        &self,
        src: &crate::config::ParamSource,
        dir: &std::path::Path,
    ) -> crate::Result<BertShape> {
        let c = hf::HfConfig::read(dir).map_err(|e| src.key_error("init", e.to_string(), None))?;
        let mut shape = c.shape(self.pooling, self.dropout);
        if let Some(pad) = self.pad_id {
            shape.pad_id = pad;
        }
        let geometry = [shape.layers, shape.hidden, shape.heads, shape.ffn];
        let preset = PRESETS
            .iter()
            .find(|(n, _)| Some(*n) == self.preset.as_deref());
        let disagree = |key: &str, given: String, has: String| {
            Err(src.key_error(
                key,
                format!(
                    "bert: {key} = {given} disagrees with {}: {has}",
                    dir.join("config.json").display()
                ),
                Some("leave it out: the checkpoint fixes the geometry".into()),
            ))
        };
        if let Some(name) = &self.preset
            && preset.is_none_or(|(_, g)| *g != geometry)
        {
            return disagree("preset", format!("{name:?}"), format!("{geometry:?}"));
        }
        for (key, given, has) in [
            ("layers", self.layers, shape.layers),
            ("hidden", self.hidden, shape.hidden),
            ("heads", self.heads, shape.heads),
            ("ffn", self.ffn, shape.ffn),
            ("vocab", self.vocab, shape.vocab),
            ("max_position", self.max_position, shape.max_position),
            ("type_vocab", self.type_vocab, shape.type_vocab),
        ] {
            if let Some(v) = given.filter(|v| *v != has) {
                return disagree(key, v.to_string(), has.to_string());
            }
        }
        if let Some(e) = self.layer_norm_eps.filter(|e| *e != shape.layer_norm_eps) {
            return disagree(
                "layer_norm_eps",
                e.to_string(),
                shape.layer_norm_eps.to_string(),
            );
        }
        check_shape(&shape, src)?;
        Ok(shape)
    }
}

/// Refuses a geometry that cannot be built (see [`BertParams::shape`]).
fn check_shape(s: &BertShape, src: &crate::config::ParamSource) -> crate::Result<()> {
    let bad = |key: &str, msg: String| Err(src.key_error(key, format!("bert: {msg}"), None));
    if s.hidden == 0 || s.heads == 0 || !s.hidden.is_multiple_of(s.heads) || s.hidden > 8192 {
        return bad(
            if s.heads == 0 { "heads" } else { "hidden" },
            format!(
                "hidden {} must be a positive multiple of heads {} (at most 8192)",
                s.hidden, s.heads
            ),
        );
    }
    for (key, v, max) in [
        ("layers", s.layers, 256),
        ("ffn", s.ffn, 65_536),
        ("vocab", s.vocab, 1 << 24),
        ("max_position", s.max_position, 1 << 16),
        ("type_vocab", s.type_vocab, 1 << 16),
    ] {
        if v == 0 || v > max {
            return bad(key, format!("{key} {v} must be in 1..={max}"));
        }
    }
    if !(s.layer_norm_eps > 0.0 && s.layer_norm_eps < 1.0) {
        return bad(
            "layer_norm_eps",
            format!("layer_norm_eps {} must be in (0, 1)", s.layer_norm_eps),
        );
    }
    crate::model::mlp::check_dropout(src, s.dropout)?;
    if s.pad_id as usize >= s.vocab {
        return bad(
            "pad_id",
            format!(
                "pad_id {} is outside the vocabulary of {}",
                s.pad_id, s.vocab
            ),
        );
    }
    Ok(())
}

/// How `model`'s head pools token hidden states: a BERT head's own pooling ([`PoolHead`]), mean
/// pooling for any other model (what [`crate::model::Activation::into_features`] is given for
/// token activations: herding's features, class means).
pub fn pooling_of(model: &Model) -> Pooling {
    model
        .blocks()
        .last()
        .and_then(|b| b.downcast_ref::<PoolHead>())
        .map_or(Pooling::Mean, |h| h.pooling)
}

/// The `bert` factory: token ids `InputShape::Features(max_len)` with `max_len ≤ max_position`.
/// When `[model] init` is a Hugging Face directory
/// ([`InitSource::HfDir`](crate::model::init::InitSource::HfDir)), the geometry is its
/// `config.json`'s ([`BertParams::shape_from_dir`]) and the trainer loads its weights
/// ([`hf::load_dir`]).
///
/// # Errors
/// [`BertParams::shape`]'s, and a positioned error at `type` for images or at `max_position`
/// for a sequence longer than the position table.
pub fn build(
    src: &crate::config::ParamSource,
    cx: &crate::model::ModelContext,
    device: &Device,
) -> crate::Result<Model> {
    let p: BertParams = src.parse()?;
    let shape = match src
        .model_init()
        .map(|path| crate::model::init::InitSource::of(&path))
    {
        Some(crate::model::init::InitSource::HfDir(dir)) => p.shape_from_dir(src, &dir)?,
        // A GGUF file or a safetensors file: the keys give the geometry (load_init refuses a
        // GGUF file for BERT at `init`).
        _ => p.shape(src)?,
    };
    let InputShape::Features(len) = cx.input else {
        return Err(src.key_error(
            "type",
            format!("bert reads token ids [max_len]; this data is {}", cx.input),
            Some("use a text dataset (token ids), or type = \"cnn\" / \"vit\" for images".into()),
        ));
    };
    if len > shape.max_position {
        return Err(src.key_error(
            "max_position",
            format!(
                "bert: the data's sequences have {len} tokens and the position table {}",
                shape.max_position
            ),
            Some("raise max_position, or shorten the data's max_len".into()),
        ));
    }
    cx.seed_device(device);
    Ok(build_bert(&shape, cx.num_classes, &mut cx.rng(), device))
}

crate::component!(model "bert", "BERT-family encoder on token ids: embeddings, post-norm encoder layers (one block each), `cls` or `mean` pooling and a linear head; `preset` = minilm, base or large", BertParams, build);
