//! Hugging Face Llama checkpoints: a directory with `config.json` (a `LlamaConfig`) and
//! `model.safetensors` (a `LlamaForCausalLM` state dict: `model.embed_tokens.weight`,
//! `model.layers.{i}.…`, `model.norm.weight`, and `lm_head.weight` unless the embeddings are
//! tied). [`HfConfig::read`] reads the geometry, [`load_dir`] loads the weights into a model
//! built by [`super::build_llama`] through [`crate::model::init::load`] (PyTorch layout: `Linear`
//! weights `[out, in]` transposed, `RmsNorm` `weight` read as `gamma`) with the renames of
//! [`remap`]. The q/k weights are read as they are: a Hugging Face file is already in the
//! rotate-half layout of [`super::layers::rope`].

use super::LlamaShape;
use crate::error::Error;
use crate::model::Model;
use crate::model::init::{InitError, InitLayout, InitReport};
use std::path::Path;

pub use crate::model::bert::hf::is_hf_dir;

/// The fields of a Hugging Face `config.json` that fix a Llama decoder's geometry.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct HfConfig {
    /// Width.
    pub hidden_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (default: `num_attention_heads`).
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head width; only `hidden_size / num_attention_heads` is supported (default that).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// FFN width.
    pub intermediate_size: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// RMSNorm ε (default 1e-6, `LlamaConfig`'s).
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base as transformers < 5 writes it.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// RoPE parameters as transformers ≥ 5 writes them (`rope_theta`, `rope_type`).
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// RoPE scaling (transformers < 5); only `null` is supported.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    /// Tied output head (default true, as `transformers`' configs default).
    #[serde(default = "default_tied")]
    pub tie_word_embeddings: bool,
    /// The FFN activation; only `"silu"` is supported (default `"silu"`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Biases on the attention projections; only `false` is supported.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the FFN projections; only `false` is supported.
    #[serde(default)]
    pub mlp_bias: bool,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_tied() -> bool {
    true
}
fn default_act() -> String {
    "silu".into()
}

impl HfConfig {
    /// Reads `dir/config.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read; [`Error::Other`] when it is not JSON with the fields
    /// above, or asks for what engram's Llama does not compute (an activation other than
    /// `silu`, biases, RoPE scaling or a `rope_type` other than `default`, a head width other than
    /// `hidden_size / num_attention_heads`).
    pub fn read(dir: &Path) -> crate::Result<Self> {
        let path = dir.join("config.json");
        let bytes = crate::fsutil::read_bounded(&path, 1 << 20).map_err(|e| Error::io(&path, e))?;
        let c: HfConfig = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Other(format!("{}: not a Llama config.json: {e}", path.display()))
        })?;
        let unsupported = |what: String| {
            Err(Error::Other(format!(
                "{}: {what} is not supported by engram's Llama",
                path.display()
            )))
        };
        if c.hidden_act != "silu" {
            return unsupported(format!("hidden_act `{}`", c.hidden_act));
        }
        if c.attention_bias || c.mlp_bias {
            return unsupported("attention_bias / mlp_bias = true".into());
        }
        if c.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return unsupported("rope_scaling".into());
        }
        let rope_type = c
            .rope_parameters
            .as_ref()
            .and_then(|p| p.get("rope_type"))
            .and_then(|t| t.as_str());
        if rope_type.is_some_and(|t| t != "default") {
            return unsupported(format!("rope_type `{}`", rope_type.unwrap_or_default()));
        }
        let (d, h) = (c.hidden_size, c.num_attention_heads);
        let kv = c.num_key_value_heads.unwrap_or(h);
        let geometry_ok = h > 0
            && kv > 0
            && d.is_multiple_of(h)
            && (d / h).is_multiple_of(2)
            && h.is_multiple_of(kv)
            && c.head_dim.is_none_or(|hd| hd * h == d)
            && [c.num_hidden_layers, c.intermediate_size, c.vocab_size]
                .iter()
                .all(|v| *v > 0);
        if !geometry_ok {
            return unsupported(format!(
                "the geometry (hidden_size {d}, {h} heads, {kv} key/value heads, head_dim {:?}, \
                 {} layers, FFN {}, vocabulary {})",
                c.head_dim, c.num_hidden_layers, c.intermediate_size, c.vocab_size
            ));
        }
        if !(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0 && c.rope_base() > 1.0) {
            return unsupported(format!(
                "rms_norm_eps {} with rope_theta {}",
                c.rms_norm_eps,
                c.rope_base()
            ));
        }
        Ok(c)
    }

    /// The RoPE base: `rope_parameters.rope_theta`, else `rope_theta`, else 10,000
    /// (`LlamaConfig`'s default).
    pub fn rope_base(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|p| p.get("rope_theta"))
            .and_then(|t| t.as_f64())
            .or(self.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// The geometry.
    pub fn shape(&self) -> LlamaShape {
        LlamaShape {
            layers: self.num_hidden_layers,
            hidden: self.hidden_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            ffn: self.intermediate_size,
            vocab: self.vocab_size,
            rope_base: self.rope_base(),
            rms_eps: self.rms_norm_eps,
            tied: self.tie_word_embeddings,
        }
    }
}

/// The renames, applied in order, from a Hugging Face `LlamaForCausalLM` state dict's names to
/// the parameter paths of [`super::build_llama`]'s model with `layers` decoder layers (decoder
/// layer `i` is block `i + 1`, the head block `layers + 1`).
pub fn remap(layers: usize) -> Vec<[String; 2]> {
    let head = layers + 1;
    let mut r: Vec<[String; 2]> = vec![
        [r"^model\.embed_tokens\.".into(), "blocks.0.embed.".into()],
        [r"^model\.norm\.".into(), format!("blocks.{head}.norm.")],
        [
            r"^lm_head\.weight$".into(),
            format!("blocks.{head}.lm_head"),
        ],
    ];
    for i in 0..layers {
        r.push([
            format!(r"^model\.layers\.{i}\."),
            format!("blocks.{}.", i + 1),
        ]);
    }
    for (from, to) in [
        (r"self_attn\.q_proj", "attention.query"),
        (r"self_attn\.k_proj", "attention.key"),
        (r"self_attn\.v_proj", "attention.value"),
        (r"self_attn\.o_proj", "attention.output"),
        (r"input_layernorm", "norm1"),
        (r"post_attention_layernorm", "norm2"),
        (r"mlp\.gate_proj", "ffn.gate"),
        (r"mlp\.up_proj", "ffn.up"),
        (r"mlp\.down_proj", "ffn.down"),
    ] {
        r.push([
            format!(r"^(blocks\.\d+)\.{from}\."),
            format!("${{1}}.{to}."),
        ]);
    }
    r
}

/// Loads `dir/model.safetensors` into `model` (built from the directory's [`HfConfig`] with
/// `layers` decoder layers). With tied embeddings the head's `lm_head` is the embedding
/// parameter itself, so it is not reported missing.
///
/// # Errors
/// [`InitError`] as [`crate::model::init::load`]: an unreadable file, a tensor whose shape does
/// not fit (a geometry that disagrees with the checkpoint), or no tensor matching.
pub fn load_dir(
    model: Model,
    dir: &Path,
    layers: usize,
) -> std::result::Result<(Model, InitReport), InitError> {
    let (model, mut report) = crate::model::init::load(
        model,
        &dir.join("model.safetensors"),
        InitLayout::Pytorch,
        &remap(layers),
    )?;
    let params = model.params();
    report
        .missing
        .retain(|path| params.iter().any(|p| &p.path == path));
    Ok((model, report))
}

/// A Llama decoder from a Hugging Face directory: geometry from its `config.json`, weights from
/// its `model.safetensors`.
///
/// # Errors
/// [`HfConfig::read`]'s and [`load_dir`]'s (as [`Error::Other`] naming the key).
pub fn from_dir(dir: &Path, device: &burn::tensor::Device) -> crate::Result<(Model, InitReport)> {
    let cfg = HfConfig::read(dir)?;
    let shape = cfg.shape();
    let mut rng = crate::rng::stream(0, "init", 0, 0);
    let model = super::build_llama(&shape, &mut rng, device);
    load_dir(model, dir, shape.layers).map_err(|e| e.error)
}
