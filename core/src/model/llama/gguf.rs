//! `[model] type = "llama"` with `init = "model.gguf"`: a Llama decoder from a GGUF file
//! (llama.cpp's format, read by [`crate::gguf`]): the geometry from its metadata
//! ([`shape_of`]), the weights dequantised to `f32` under their GGUF names
//! ([`to_safetensors`]) and its tokenizer ([`GgufFile::tokenizer`], usable wherever a
//! `tokenizer.json` is: [`crate::data::tokenizer::TextTokenizer::load`] takes a `.gguf`).
//!
//! What `transformers`' `from_pretrained(dir, gguf_file=…)` does, and what
//! `bench/reference/llama_gguf.py` checks:
//!
//! | GGUF metadata (`A` = `general.architecture`, only `llama`) | [`LlamaShape`] |
//! |---|---|
//! | `A.block_count` | `layers` |
//! | `A.embedding_length` | `hidden` |
//! | `A.feed_forward_length` | `ffn` |
//! | `A.attention.head_count` | `heads` |
//! | `A.attention.head_count_kv` (default `head_count`) | `kv_heads` |
//! | `A.rope.freq_base` (default 10,000) | `rope_base` |
//! | `A.attention.layer_norm_rms_epsilon` | `rms_eps` |
//! | the length of `tokenizer.ggml.tokens` (else `A.vocab_size`, else `token_embd`'s rows) | `vocab` |
//! | no `output.weight` tensor | `tied` |
//!
//! `A.context_length` must be present (it bounds nothing here: rotary positions have no
//! table); `A.rope.dimension_count`, when present, must be the head width; a
//! `A.rope.scaling.type` other than `none` and a `rope_freqs.weight` tensor (Llama 3's
//! frequency factors) are refused (only plain RoPE is built).
//!
//! Tensor names, GGUF → Hugging Face (then [`super::hf::remap`] to the model's paths):
//! `token_embd` → `model.embed_tokens`, `blk.N.attn_q/attn_k/attn_v/attn_output` →
//! `model.layers.N.self_attn.q_proj/k_proj/v_proj/o_proj`, `blk.N.ffn_gate/ffn_up/ffn_down` →
//! `…mlp.gate_proj/up_proj/down_proj`, `blk.N.attn_norm` → `…input_layernorm`,
//! `blk.N.ffn_norm` → `…post_attention_layernorm`, `output_norm` → `model.norm`, `output` →
//! `lm_head` (absent: tied). The q/k weights are un-permuted from GGUF's adjacent-pair layout
//! to the rotate-half one ([`unpermute`]; the permutation is documented in
//! [`super::layers`]). Any other tensor of the file is left unread and listed as unused.

use super::LlamaShape;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::model::Model;
use crate::model::init::{InitError, InitLayout, InitReport};
use std::path::Path;

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    crate::data::format::bad(path, "gguf", reason)
}

/// The geometry a GGUF file's metadata and tensor table describe (the table in the module
/// docs).
///
/// # Errors
/// [`Error::DataFile`] naming the file for an architecture other than `llama`, a missing or
/// mistyped metadata key, RoPE scaling or frequency factors, a `rope.dimension_count` that is not the head width,
/// or no token list, `vocab_size` or `token_embd.weight` to give the vocabulary.
pub fn shape_of(f: &GgufFile) -> Result<LlamaShape> {
    let path = f.path();
    let arch = f.require_str("general.architecture")?;
    if arch != "llama" {
        return Err(bad(
            path,
            format!(
                "general.architecture is `{arch}`: engram builds only the `llama` architecture from GGUF"
            ),
        ));
    }
    let int = |key: &str| -> Result<usize> {
        usize::try_from(f.require_u64(&format!("llama.{key}"))?)
            .map_err(|_| bad(path, format!("metadata `llama.{key}` is too large")))
    };
    let float = |key: &str, default: Option<f64>| -> Result<f64> {
        let full = format!("llama.{key}");
        match f.metadata(&full) {
            Some(v) => v.as_f32().map(f64::from).ok_or_else(|| {
                bad(
                    path,
                    format!("metadata `{full}` is {v:?}, not a floating-point number"),
                )
            }),
            None => default.ok_or_else(|| bad(path, format!("no metadata `{full}`"))),
        }
    };
    let heads = int("attention.head_count")?;
    let kv_heads = match f.metadata("llama.attention.head_count_kv") {
        Some(_) => int("attention.head_count_kv")?,
        None => heads,
    };
    int("context_length")?;
    if let Some(v) = f.metadata("llama.rope.scaling.type")
        && v.as_str() != Some("none")
    {
        return Err(bad(
            path,
            format!("llama.rope.scaling.type is {v:?}: engram builds only plain RoPE"),
        ));
    }
    if f.tensor_info("rope_freqs.weight").is_some() {
        return Err(bad(
            path,
            "tensor `rope_freqs.weight` (Llama 3's RoPE frequency factors): engram builds only plain RoPE",
        ));
    }
    let vocab = match f
        .metadata("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
    {
        Some(tokens) => tokens.len(),
        None if f.metadata("llama.vocab_size").is_some() => int("vocab_size")?,
        None => match f.tensor_info("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => t.shape()[0],
            _ => {
                return Err(bad(
                    path,
                    "no vocabulary size: neither tokenizer.ggml.tokens, llama.vocab_size nor a 2-D token_embd.weight",
                ));
            }
        },
    };
    let shape = LlamaShape {
        layers: int("block_count")?,
        hidden: int("embedding_length")?,
        heads,
        kv_heads,
        ffn: int("feed_forward_length")?,
        vocab,
        // transformers reads these f32 values as Python floats: the same f64.
        rope_base: float("rope.freq_base", Some(10_000.0))?,
        rms_eps: float("attention.layer_norm_rms_epsilon", None)?,
        tied: f.tensor_info("output.weight").is_none(),
    };
    if f.metadata("llama.rope.dimension_count").is_some() {
        let dims = int("rope.dimension_count")?;
        if heads == 0 || dims != shape.head_dim() {
            return Err(bad(
                path,
                format!(
                    "llama.rope.dimension_count {dims} is not the head width {} / {heads}: partial rotary is not built",
                    shape.hidden
                ),
            ));
        }
    }
    Ok(shape)
}

/// The Hugging Face name of GGUF tensor `name` and whether it is a q/k projection (with its
/// head count in `shape`), or `None` for a tensor a Llama decoder does not have.
pub fn hf_name(name: &str, shape: &LlamaShape) -> Option<(String, Option<usize>)> {
    let fixed = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(n) = fixed {
        return Some((n.to_string(), None));
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    if layer >= shape.layers || layer.to_string().len() != rest.find('.')? {
        return None;
    }
    let (hf, heads) = match part {
        "attn_q.weight" => ("self_attn.q_proj.weight", Some(shape.heads)),
        "attn_k.weight" => ("self_attn.k_proj.weight", Some(shape.kv_heads)),
        "attn_v.weight" => ("self_attn.v_proj.weight", None),
        "attn_output.weight" => ("self_attn.o_proj.weight", None),
        "ffn_gate.weight" => ("mlp.gate_proj.weight", None),
        "ffn_up.weight" => ("mlp.up_proj.weight", None),
        "ffn_down.weight" => ("mlp.down_proj.weight", None),
        "attn_norm.weight" => ("input_layernorm.weight", None),
        "ffn_norm.weight" => ("post_attention_layernorm.weight", None),
        _ => return None,
    };
    Some((format!("model.layers.{layer}.{hf}"), heads))
}

/// The shape, row-major and PyTorch layout (`[out, in]`), that the Hugging Face tensor of GGUF
/// tensor `name` has in a model of geometry `shape`.
fn expected(name: &str, s: &LlamaShape) -> Vec<usize> {
    let (d, dh) = (s.hidden, s.head_dim());
    let part = name.rsplit_once('.').map_or(name, |(a, _)| a);
    let part = part.rsplit('.').next().unwrap_or(part);
    match part {
        "token_embd" | "output" => vec![s.vocab, d],
        "attn_q" => vec![s.heads * dh, d],
        "attn_k" | "attn_v" => vec![s.kv_heads * dh, d],
        "attn_output" => vec![d, s.heads * dh],
        "ffn_gate" | "ffn_up" => vec![s.ffn, d],
        "ffn_down" => vec![d, s.ffn],
        _ => vec![d],
    }
}

/// Undoes llama.cpp's q/k permutation (see [`super::layers`]): `w` is `[n_head · d, cols]`
/// row-major as the GGUF file holds it; the result is the Hugging Face (rotate-half) layout,
/// whose row `h·d + s·d/2 + j` is GGUF row `h·d + 2j + s`. `None` when the rows are not
/// `n_head` heads of an even width.
pub fn unpermute(w: &[f32], rows: usize, cols: usize, n_head: usize) -> Option<Vec<f32>> {
    if n_head == 0 || !rows.is_multiple_of(n_head) || w.len() != rows * cols {
        return None;
    }
    let d = rows / n_head;
    if !d.is_multiple_of(2) {
        return None;
    }
    let half = d / 2;
    let mut out = Vec::with_capacity(w.len());
    for r in 0..rows {
        let (h, within) = (r / d, r % d);
        let (s, j) = (within / half, within % half);
        let src = h * d + 2 * j + s;
        out.extend_from_slice(&w[src * cols..(src + 1) * cols]);
    }
    Some(out)
}

/// The decoder's tensors of `f` as a safetensors file in memory: Hugging Face names, PyTorch
/// layout, `f32` (dequantised), q/k un-permuted; with the GGUF names of the tensors left out
/// (not a Llama decoder's).
///
/// # Errors
/// [`Error::DataFile`] naming the file and tensor for a missing tensor, a shape that is not
/// the one the metadata's geometry needs, or a ggml type engram does not dequantise (F32, F16,
/// Q4_0, Q4_1 and Q8_0 are read); [`Error::Io`] when reading fails.
pub fn to_safetensors(f: &GgufFile, shape: &LlamaShape) -> Result<(Vec<u8>, Vec<String>)> {
    let path = f.path();
    let mut wanted = vec!["token_embd.weight".to_string(), "output_norm.weight".into()];
    for i in 0..shape.layers {
        for part in [
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ] {
            wanted.push(format!("blk.{i}.{part}.weight"));
        }
    }
    if !shape.tied {
        wanted.push("output.weight".into());
    }
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for name in &wanted {
        let info = f.tensor_info(name).ok_or_else(|| {
            bad(
                path,
                format!(
                    "no tensor `{name}`: a llama GGUF of {} layers has token_embd, output_norm and blk.N.{{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}}.weight",
                    shape.layers
                ),
            )
        })?;
        let want = expected(name, shape);
        if info.shape() != want {
            return Err(bad(
                path,
                format!(
                    "tensor `{name}` is {:?}; the metadata's geometry needs {want:?}",
                    info.shape()
                ),
            ));
        }
        let (hf, _) = hf_name(name, shape).expect("every wanted name maps");
        let bytes = want.iter().product::<usize>() * 4;
        header.insert(
            hf,
            serde_json::json!({"dtype": "F32", "shape": want, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut head = serde_json::to_vec(&header).map_err(|e| Error::Other(e.to_string()))?;
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + head.len() + offset);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    // The header's keys are sorted; the offsets follow `wanted`, and so does the data.
    for name in &wanted {
        let (dims, values) = f.tensor_f32(name)?;
        let (_, heads) = hf_name(name, shape).expect("every wanted name maps");
        let values = match heads {
            Some(n) => unpermute(&values, dims[0], dims[1], n).ok_or_else(|| {
                bad(
                    path,
                    format!(
                        "tensor `{name}`: {} rows are not {n} heads of an even width",
                        dims[0]
                    ),
                )
            })?,
            None => values,
        };
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let unused = f
        .tensors()
        .iter()
        .filter(|t| !wanted.contains(&t.name))
        .map(|t| t.name.clone())
        .collect();
    Ok((out, unused))
}

/// Loads the GGUF file `path` into `model` (built by [`super::build_llama`] from the file's
/// [`shape_of`]) through [`crate::model::init::load_bytes`] with [`super::hf::remap`]; the
/// report names the GGUF file and its SHA-256, and lists the file's tensors a decoder does
/// not have as unused. With tied embeddings the head is the embedding parameter itself, so
/// it is not reported missing.
///
/// # Errors
/// [`InitError`] at `init`: the file cannot be opened or is not a llama GGUF ([`shape_of`],
/// [`to_safetensors`]), or its tensors do not fit `model`.
pub fn load_file(model: Model, path: &Path) -> std::result::Result<(Model, InitReport), InitError> {
    let at = |error: Error| InitError { key: "init", error };
    let f = GgufFile::open(path).map_err(at)?;
    let shape = shape_of(&f).map_err(at)?;
    let (bytes, unused) = to_safetensors(&f, &shape).map_err(at)?;
    let sha256 = sha256_of(path).map_err(at)?;
    let (model, mut report) = crate::model::init::load_bytes(
        model,
        bytes,
        path,
        sha256,
        InitLayout::Pytorch,
        &super::hf::remap(shape.layers),
    )?;
    let params = model.params();
    report
        .missing
        .retain(|p| params.iter().any(|q| &q.path == p));
    report.unused.extend(unused);
    Ok((model, report))
}

/// The SHA-256 of a file, hex, read in pieces.
fn sha256_of(path: &Path) -> Result<String> {
    use sha2::Digest;
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(format!("{:x}", hash.finalize()))
}

/// A Llama decoder from a GGUF file: geometry from [`shape_of`], weights from [`load_file`].
///
/// # Errors
/// [`shape_of`]'s and [`load_file`]'s.
pub fn from_file(path: &Path, device: &burn::tensor::Device) -> Result<(Model, InitReport)> {
    let shape = shape_of(&GgufFile::open(path)?)?;
    let mut rng = crate::rng::stream(0, "init", 0, 0);
    let model = super::build_llama(&shape, &mut rng, device);
    load_file(model, path).map_err(|e| e.error)
}
