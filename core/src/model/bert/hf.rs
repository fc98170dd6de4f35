//! Hugging Face BERT checkpoints: a directory with `config.json` (a `BertConfig`) and
//! `model.safetensors` (a PyTorch `state_dict` of `BertModel`, with or without the `bert.`
//! prefix). [`HfConfig::read`] reads the geometry, [`load_dir`] loads the weights into a model
//! built by [`super::build_bert`] through [`crate::model::init::load`] (PyTorch layout:
//! `Linear` weights `[out, in]` transposed, `LayerNorm` `weight`/`bias` read as `gamma`/`beta`)
//! with the renames of [`remap`]. `embeddings.position_ids` and the pooler are left unused;
//! the classification head keeps its seeded initialisation.

use super::{BertShape, Pooling};
use crate::error::Error;
use crate::model::Model;
use crate::model::init::{InitError, InitLayout, InitReport};
use std::path::Path;

/// The fields of a Hugging Face `config.json` that fix a BERT encoder's geometry.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct HfConfig {
    /// Width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// FFN width.
    pub intermediate_size: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Position table length (default 512).
    #[serde(default = "default_max_position")]
    pub max_position_embeddings: usize,
    /// Token types (default 2).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Layer-norm ε (default 1e-12).
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// The FFN activation; only `"gelu"` (erf form) is supported (default `"gelu"`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// The padding id (default 0).
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

fn default_max_position() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}

/// Whether `dir` is a Hugging Face checkpoint directory (it holds a `config.json`).
pub fn is_hf_dir(dir: &Path) -> bool {
    dir.is_dir() && dir.join("config.json").is_file()
}

impl HfConfig {
    /// Reads `dir/config.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read, [`Error::Other`] when it is not JSON with the
    /// fields above, or its `hidden_act` is not `"gelu"`.
    pub fn read(dir: &Path) -> crate::Result<Self> {
        let path = dir.join("config.json");
        let bytes = crate::fsutil::read_bounded(&path, 1 << 20).map_err(|e| Error::io(&path, e))?;
        let c: HfConfig = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Other(format!("{}: not a BERT config.json: {e}", path.display()))
        })?;
        if c.hidden_act != "gelu" {
            return Err(Error::Other(format!(
                "{}: hidden_act `{}` is not supported; engram's BERT computes \"gelu\" (erf form)",
                path.display(),
                c.hidden_act
            )));
        }
        Ok(c)
    }

    /// The geometry, with engram's own `pooling`, `dropout` and the config's pad id (0 when
    /// it has none).
    pub fn shape(&self, pooling: Pooling, dropout: f64) -> BertShape {
        BertShape {
            layers: self.num_hidden_layers,
            hidden: self.hidden_size,
            heads: self.num_attention_heads,
            ffn: self.intermediate_size,
            vocab: self.vocab_size,
            max_position: self.max_position_embeddings,
            type_vocab: self.type_vocab_size,
            layer_norm_eps: self.layer_norm_eps,
            dropout,
            pad_id: self.pad_token_id.unwrap_or(0),
            pooling,
        }
    }
}

/// The renames, applied in order, from a Hugging Face `BertModel` state dict's names to the
/// parameter paths of [`super::build_bert`]'s model with `layers` encoder layers (encoder
/// layer `i` is block `i + 1`).
pub fn remap(layers: usize) -> Vec<[String; 2]> {
    let mut r: Vec<[String; 2]> = vec![
        [r"^bert\.".into(), String::new()],
        [
            r"^embeddings\.word_embeddings\.".into(),
            "blocks.0.word.".into(),
        ],
        [
            r"^embeddings\.position_embeddings\.".into(),
            "blocks.0.position.".into(),
        ],
        [
            r"^embeddings\.token_type_embeddings\.".into(),
            "blocks.0.token_type.".into(),
        ],
        [r"^embeddings\.LayerNorm\.".into(), "blocks.0.norm.".into()],
    ];
    for i in 0..layers {
        r.push([
            format!(r"^encoder\.layer\.{i}\."),
            format!("blocks.{}.", i + 1),
        ]);
    }
    for (from, to) in [
        (r"attention\.self\.(query|key|value)", "attention.${2}"),
        (r"attention\.output\.dense", "attention.output"),
        (r"attention\.output\.LayerNorm", "norm1"),
        (r"intermediate\.dense", "ffn_in"),
        (r"output\.dense", "ffn_out"),
        (r"output\.LayerNorm", "norm2"),
    ] {
        r.push([
            format!(r"^(blocks\.\d+)\.{from}\."),
            format!("${{1}}.{to}."),
        ]);
    }
    r
}

/// Loads `dir/model.safetensors` into `model` (built with `layers` encoder layers from the
/// directory's [`HfConfig`]).
///
/// # Errors
/// [`InitError`] as [`crate::model::init::load`]: an unreadable file, a tensor whose shape does
/// not fit (a geometry that disagrees with the checkpoint), or no tensor matching.
pub fn load_dir(
    model: Model,
    dir: &Path,
    layers: usize,
) -> std::result::Result<(Model, InitReport), InitError> {
    crate::model::init::load(
        model,
        &dir.join("model.safetensors"),
        InitLayout::Pytorch,
        &remap(layers),
    )
}

/// A BERT encoder with a `classes`-way head from a Hugging Face directory: geometry from its
/// `config.json`, weights from its `model.safetensors`, the head drawn from `seed`.
///
/// # Errors
/// [`HfConfig::read`]'s and [`load_dir`]'s (as [`Error::Other`] naming the key).
pub fn from_dir(
    dir: &Path,
    classes: usize,
    pooling: Pooling,
    seed: u64,
    device: &burn::tensor::Device,
) -> crate::Result<(Model, InitReport)> {
    let cfg = HfConfig::read(dir)?;
    let shape = cfg.shape(pooling, 0.1);
    let mut rng = crate::rng::stream(seed, "init", 0, 0);
    let model = super::build_bert(&shape, classes, &mut rng, device);
    load_dir(model, dir, shape.layers).map_err(|e| e.error)
}
