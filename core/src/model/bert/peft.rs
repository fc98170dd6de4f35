//! LoRA adapters as Hugging Face PEFT writes and reads them (`peft` 0.21, `LoraConfig` on a
//! `transformers` `BertModel`): [`export`] writes a BERT model's adapters as a PEFT adapter
//! directory (`engram export --peft DIR`), [`load`] reads one into a model whose `lora` memory
//! strategy attached adapters (`[model] adapter = "DIR"`).
//!
//! The directory:
//! - `adapter_model.safetensors`: for each adapted layer, `base_model.model.<module>.lora_A.weight`
//!   `[r, d_in]` and `lora_B.weight` `[d_out, r]`, where `<module>` is the layer's name in
//!   `BertModel` (`encoder.layer.0.attention.self.query`). engram's adapter on a weight
//!   `W [d_in, d_out]` is `A [d_in, r]`, `B [r, d_out]` with `W + (α/r)·A·B`; PEFT's on a
//!   `torch.nn.Linear` (weight `[d_out, d_in]`) adds `(α/r)·lora_B·lora_A`, so
//!   `lora_A = Aᵀ` and `lora_B = Bᵀ`. Layers that trained in full besides the adapters (the
//!   `lora` strategy's `train`, PEFT's `modules_to_save`) are there too, as
//!   `base_model.model.<module>.<weight|bias>` in PyTorch's layout.
//! - `adapter_config.json`: `peft_type = "LORA"`, `r`, `lora_alpha` (`α`), `target_modules`
//!   (the shortest name suffixes that pick exactly the adapted layers of `BertModel`),
//!   `modules_to_save` (full module names), `lora_dropout` (the activation path's dropout, 0 on
//!   the weight path), `bias` `"none"`,
//!   `fan_in_fan_out` false, `task_type` null (the base is a plain `BertModel`),
//!   `base_model_name_or_path` (the run's `[model] init` directory, or null).
//! - `engram_head.safetensors` + `engram_head.json`: engram's classifier, which is no
//!   `BertModel` module: `weight` `[classes, hidden]` and `bias` `[classes]` (a
//!   `torch.nn.Linear`'s), and the pooling (`cls` or `mean` over tokens whose id is not
//!   `pad_token_id`) that feeds it. `bench/reference/peft_roundtrip.py` rebuilds it.

use super::{Embeddings, EncoderLayer, PoolHead};
use crate::error::{Error, Result};
use crate::model::Model;
use burn::nn::Linear;
use burn::tensor::{Tensor, TensorData};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// PEFT's adapter weights file in an adapter directory.
pub const ADAPTER_FILE: &str = "adapter_model.safetensors";
/// PEFT's adapter config file in an adapter directory.
pub const CONFIG_FILE: &str = "adapter_config.json";
/// engram's classifier weights (`weight` `[classes, hidden]`, `bias` `[classes]`).
pub const HEAD_FILE: &str = "engram_head.safetensors";
/// engram's classifier description (pooling, pad id, sizes).
pub const HEAD_CONFIG: &str = "engram_head.json";
/// The prefix PEFT gives every key of a model wrapped by `get_peft_model`.
pub const PREFIX: &str = "base_model.model.";

/// How a parameter is laid out in each of the two models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `Linear` weight: `[d_in, d_out]` in engram, `[d_out, d_in]` in PyTorch.
    LinearWeight,
    /// The same layout in both (biases, embeddings, norms' `gamma`/`weight`, `beta`/`bias`).
    Same,
}

/// One parameter of engram's BERT and its name in Hugging Face's `BertModel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamName {
    /// engram's dotted path (`blocks.1.attention.query.weight`).
    pub engram: String,
    /// `BertModel`'s `state_dict` key (`encoder.layer.0.attention.self.query.weight`).
    pub hf: String,
    /// Its layout.
    pub kind: Kind,
}

/// Every parameter of engram's BERT encoder with `layers` layers (the head excepted, which
/// `BertModel` has not) and its `BertModel` name: the inverse of [`super::hf::remap`] (a unit
/// test holds them together), with `LayerNorm`'s `weight`/`bias` as engram's `gamma`/`beta`.
pub fn param_names(layers: usize) -> Vec<ParamName> {
    let mut v = Vec::new();
    let mut push = |engram: String, hf: String, kind: Kind| {
        v.push(ParamName { engram, hf, kind });
    };
    for (e, h) in [
        ("word", "word_embeddings"),
        ("position", "position_embeddings"),
        ("token_type", "token_type_embeddings"),
    ] {
        push(
            format!("blocks.0.{e}.weight"),
            format!("embeddings.{h}.weight"),
            Kind::Same,
        );
    }
    push(
        "blocks.0.norm.gamma".into(),
        "embeddings.LayerNorm.weight".into(),
        Kind::Same,
    );
    push(
        "blocks.0.norm.beta".into(),
        "embeddings.LayerNorm.bias".into(),
        Kind::Same,
    );
    for (l, (e, h, linear)) in (1..=layers).flat_map(|l| LAYER.iter().map(move |m| (l, *m))) {
        let (e, h) = (
            format!("blocks.{l}.{e}"),
            format!("encoder.layer.{}.{h}", l - 1),
        );
        let (w, b, kind) = if linear {
            ("weight", "bias", Kind::LinearWeight)
        } else {
            ("gamma", "beta", Kind::Same)
        };
        push(format!("{e}.{w}"), format!("{h}.weight"), kind);
        push(format!("{e}.{b}"), format!("{h}.bias"), Kind::Same);
    }
    v
}

/// An encoder layer's modules: engram's name, `BertModel`'s, and whether it is a `Linear`
/// (else a `LayerNorm`).
const LAYER: [(&str, &str, bool); 8] = [
    ("attention.query", "attention.self.query", true),
    ("attention.key", "attention.self.key", true),
    ("attention.value", "attention.self.value", true),
    ("attention.output", "attention.output.dense", true),
    ("norm1", "attention.output.LayerNorm", false),
    ("ffn_in", "intermediate.dense", true),
    ("ffn_out", "output.dense", true),
    ("norm2", "output.LayerNorm", false),
];

/// The module path of a parameter path (without its last part).
fn module_of(path: &str) -> &str {
    path.rsplit_once('.').map_or(path, |(m, _)| m)
}

/// A BERT model's parts: its embeddings, encoder layers and head.
struct Parts<'a> {
    embeddings: &'a Embeddings,
    layers: Vec<&'a EncoderLayer>,
    head: &'a PoolHead,
}

/// `model`'s BERT parts, or `None` when it is not engram's BERT.
fn parts(model: &Model) -> Option<Parts<'_>> {
    let blocks = model.blocks();
    let (first, rest) = blocks.split_first()?;
    let (last, middle) = rest.split_last()?;
    Some(Parts {
        embeddings: first.downcast_ref::<Embeddings>()?,
        layers: middle
            .iter()
            .map(|b| b.downcast_ref::<EncoderLayer>())
            .collect::<Option<Vec<_>>>()?,
        head: last.downcast_ref::<PoolHead>()?,
    })
}

/// A layer's `Linear` modules by engram's module name within the layer.
fn linears(l: &EncoderLayer) -> [(&'static str, &Linear); 6] {
    [
        ("attention.query", &l.attention.query),
        ("attention.key", &l.attention.key),
        ("attention.value", &l.attention.value),
        ("attention.output", &l.attention.output),
        ("ffn_in", &l.ffn_in),
        ("ffn_out", &l.ffn_out),
    ]
}

/// One adapted layer of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapted {
    /// engram's module path (`blocks.1.attention.query`).
    pub module: String,
    /// The path of its factor `A` `[d_in, r]`: `<module>.weight.lora.a` on the weight path
    /// (Burn's LoRA), `adapters.layers.<l>.experts.0.a` on the activation path.
    pub a: String,
    /// The path of its factor `B` `[r, d_out]`, beside `a`'s.
    pub b: String,
    /// Dropout on the adapter's input (PEFT's `lora_dropout`): 0 on the weight path.
    pub dropout: f64,
    /// `[d_in, d_out]` of the weight.
    pub shape: [usize; 2],
    /// Rank `r`.
    pub rank: usize,
    /// The scale `α/r`.
    pub scale: f64,
}

/// Why a model's adapters cannot be PEFT's (the message says what to do).
fn usage(message: impl Into<String>) -> Error {
    Error::Usage(message.into())
}

/// The adapted layers of engram's BERT `model`, in module order, on either path: Burn's
/// weight-path LoRA or the activation-path component ([`crate::model::adapter`]) with one
/// adapter per layer (what PEFT's `LoraLayer` computes, `x·W₀ + (α/r)·drop(x)·A·B`).
///
/// # Errors
/// [`Error::Usage`] when `model` is not engram's BERT, when an embedding or the head carries an
/// adapter (PEFT's `Embedding` adapter and engram's head are not written), when the adapters
/// differ in rank or scale (PEFT's config holds one `r` and one `lora_alpha`), or when an
/// activation-path layer holds a routed mixture or several adapters (`moe-lora`: no PEFT
/// `LoraConfig` form).
pub fn adapted(model: &Model) -> Result<Vec<Adapted>> {
    let p = parts(model).ok_or_else(|| {
        usage(
            "PEFT adapters are written for BERT-family models ([model] type = \"bert\"); \
             export this model's merged weights with --safetensors",
        )
    })?;
    if let Some(ad) = model.adapters() {
        if ad.config.routed || ad.layers.iter().any(|l| l.experts.len() != 1) {
            return Err(usage(
                "the model's adapters are a routed mixture of experts (moe-lora), which no PEFT \
                 LoraConfig describes; evaluate the run with engram itself",
            ));
        }
        let names: Vec<&str> = p
            .layers
            .first()
            .map_or(Vec::new(), |l| linears(l).iter().map(|(n, _)| *n).collect());
        let mut out = Vec::new();
        for (l, ((block, local), shape)) in ad.targets.iter().zip(&ad.shapes).enumerate() {
            if *block == 0 || *block > p.layers.len() || !names.contains(&local.as_str()) {
                return Err(usage(format!(
                    "blocks.{block}.{local} carries an adapter outside the encoder layers, which \
                     PEFT's BertModel adapter does not hold; adapt Linear layers of the encoder \
                     only (targets = [\"query\", \"value\"]), or export merged weights with \
                     --safetensors"
                )));
            }
            out.push(Adapted {
                module: format!("blocks.{block}.{local}"),
                a: format!("adapters.layers.{l}.experts.0.a"),
                b: format!("adapters.layers.{l}.experts.0.b"),
                dropout: ad.config.dropout,
                shape: *shape,
                rank: ad.config.rank,
                scale: ad.config.scale,
            });
        }
        out.sort_by(|x, y| x.module.cmp(&y.module));
        return Ok(out);
    }
    let e = p.embeddings;
    if [&e.word.weight, &e.position.weight, &e.token_type.weight]
        .iter()
        .any(|w| w.adapter().is_some())
        || p.head.linear.weight.adapter().is_some()
    {
        return Err(usage(
            "an embedding or the head carries a LoRA adapter, which PEFT's BertModel adapter \
             does not hold; adapt Linear layers only (targets = [\"query\", \"value\"]), or \
             export merged weights with --safetensors",
        ));
    }
    let mut out = Vec::new();
    for (i, l) in p.layers.iter().enumerate() {
        for (name, lin) in linears(l) {
            if let Some(a) = lin.weight.adapter() {
                let [d_in, d_out] = lin.weight.shape().dims();
                let module = format!("blocks.{}.{name}", i + 1);
                out.push(Adapted {
                    a: format!("{module}.weight.lora.a"),
                    b: format!("{module}.weight.lora.b"),
                    dropout: 0.0,
                    module,
                    shape: [d_in, d_out],
                    rank: a.a.shape().dims::<2>()[1],
                    scale: a.scale,
                });
            }
        }
    }
    if let Some(x) = out
        .iter()
        .find(|x| x.rank != out[0].rank || x.scale != out[0].scale)
    {
        return Err(usage(format!(
            "{} has rank {} and scale {} where {} has {} and {}: a PEFT config holds one r and \
             one lora_alpha",
            x.module, x.rank, x.scale, out[0].module, out[0].rank, out[0].scale
        )));
    }
    Ok(out)
}

/// The shortest dotted suffixes (PEFT's `target_modules` match a module whose name is the
/// suffix or ends with `.suffix`) that together pick exactly `chosen` among `all` module names;
/// a suffix does not start with a layer number.
fn suffixes(chosen: &[String], all: &[String]) -> Vec<String> {
    let matches = |name: &str, t: &str| name == t || name.ends_with(&format!(".{t}"));
    let mut out: Vec<String> = Vec::new();
    for c in chosen {
        let parts: Vec<&str> = c.split('.').collect();
        let t = (1..=parts.len())
            .map(|n| parts[parts.len() - n..].join("."))
            // `layer.1.output.dense` rather than `1.output.dense`, for the reader.
            .filter(|t| !t.starts_with(|ch: char| ch.is_ascii_digit()))
            .find(|t| all.iter().all(|m| !matches(m, t) || chosen.contains(m)))
            .unwrap_or_else(|| c.clone());
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// What [`export`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    /// The adapted layers' `BertModel` names.
    pub modules: Vec<String>,
    /// `modules_to_save`: the layers that trained in full besides the adapters.
    pub modules_to_save: Vec<String>,
    /// Rank `r`.
    pub rank: usize,
    /// `lora_alpha` (`α = scale · r`).
    pub alpha: f64,
}

/// The `[numel]` float values of each parameter of `model`, by path.
fn values(model: &Model) -> Result<HashMap<String, Vec<f32>>> {
    model
        .param_values()
        .into_iter()
        .map(|(i, t)| {
            let v = t
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .map_err(|e| Error::Other(format!("{}: {e:?}", i.path)))?;
            Ok((i.path, v))
        })
        .collect()
}

/// `v` `[rows, cols]` (row-major) transposed to `[cols, rows]`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// A tensor to write: name, shape, values (row-major `f32`).
type Named = (String, Vec<usize>, Vec<f32>);

/// A safetensors file's tensors by name: shape and values (row-major, as `f32`).
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// The bytes of a safetensors file holding `tensors` as `F32` (the `safetensors` crate's
/// writer, with PyTorch's `format = "pt"` metadata as PEFT writes it).
pub fn safetensors_bytes(tensors: &[Named]) -> Vec<u8> {
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, shape, v)| {
            (
                n.clone(),
                shape.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = raw.iter().filter_map(|(n, shape, b)| {
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
            .ok()
            .map(|v| (n.clone(), v))
    });
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(meta)).unwrap_or_default()
}

/// The tensors of a safetensors file (`F32` or `BF16`, read as `f32`), by name: shape and
/// values (the `safetensors` crate's reader, which checks the header, offsets and sizes).
///
/// # Errors
/// A message naming `path` when it cannot be read, is not safetensors, holds another dtype,
/// or holds a NaN or infinite value (named by tensor and flat index: a factor that is not
/// finite makes every logit NaN, which no learning rate recovers from).
pub fn read_safetensors(path: &Path) -> std::result::Result<Tensors, String> {
    let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a safetensors file ({e})", path.display()))?;
    let mut out = BTreeMap::new();
    for (name, view) in file.tensors() {
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            safetensors::Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            safetensors::Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
                .collect(),
            other => {
                return Err(format!(
                    "{}: {name} is {other:?}; engram reads F32 or BF16 adapters",
                    path.display()
                ));
            }
        };
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "{}: {name} holds {} at flat index {i}; an adapter's values must be finite",
                path.display(),
                values[i]
            ));
        }
        out.insert(name, (view.shape().to_vec(), values));
    }
    Ok(out)
}

/// Writes the PEFT adapter directory of `model`'s adapters into the existing directory `dir`
/// (see the module docs), each file atomically. `initial` is the model the run started from
/// (its `[model] init` loaded, adapters attached), built the same way: a layer whose weights
/// differ from it, not an adapter and not the head, trained in full and goes into
/// `modules_to_save`. `base` is the `BertModel` directory the adapters apply to
/// (`base_model_name_or_path`), when the run had one.
///
/// # Errors
/// [`adapted`]'s; [`Error::Usage`] when the model has no adapters or has them on the
/// activation path ([`crate::model::adapter`]: not written as PEFT's yet), or when an adapted
/// layer's base weight differs from `initial`'s (`merge = "task"` folded adapters into it, so
/// PEFT's base would be the wrong one); [`Error::Io`] when a file cannot be written.
pub fn export(model: &Model, initial: &Model, base: Option<&Path>, dir: &Path) -> Result<Exported> {
    let adapted = adapted(model)?;
    let Some(first) = adapted.first() else {
        return Err(usage(
            "this checkpoint's model carries no LoRA adapters (its run had no [[memory]] \
             type = \"lora\"); export its weights with --safetensors instead",
        ));
    };
    let p = parts(model).ok_or_else(|| usage("not a BERT model"))?;
    let layers = p.layers.len();
    let names = param_names(layers);
    let (now, then) = (values(model)?, values(initial)?);
    let adapted_modules: BTreeSet<&str> = adapted.iter().map(|a| a.module.as_str()).collect();
    let hf_module = |engram_module: &str| {
        names
            .iter()
            .find(|n| module_of(&n.engram) == engram_module)
            .map(|n| module_of(&n.hf).to_string())
    };
    // Layers that changed besides the adapters: PEFT's modules_to_save.
    let mut to_save: Vec<String> = Vec::new();
    for n in &names {
        if now.get(&n.engram) == then.get(&n.engram) {
            continue;
        }
        let m = module_of(&n.engram);
        if adapted_modules.contains(m) {
            return Err(usage(format!(
                "{} differs from the run's starting weights although it is adapted (merge = \
                 \"task\" folds adapters into the base), so PEFT's base model would be the \
                 wrong one; export the merged weights with --safetensors",
                n.engram
            )));
        }
        if !to_save.iter().any(|s| s == m) {
            to_save.push(m.to_string());
        }
    }
    let mut tensors: Vec<Named> = Vec::new();
    let mut modules = Vec::new();
    for a in &adapted {
        let hf = hf_module(&a.module)
            .ok_or_else(|| usage(format!("{}: no BertModel name", a.module)))?;
        let get = |f: &str| {
            let path = if f == "a" { &a.a } else { &a.b };
            now.get(path)
                .ok_or_else(|| Error::Other(format!("{}: no factor {path}", a.module)))
        };
        let [d_in, d_out] = a.shape;
        let r = a.rank;
        tensors.push((
            format!("{PREFIX}{hf}.lora_A.weight"),
            vec![r, d_in],
            transpose(get("a")?, d_in, r),
        ));
        tensors.push((
            format!("{PREFIX}{hf}.lora_B.weight"),
            vec![d_out, r],
            transpose(get("b")?, r, d_out),
        ));
        modules.push(hf);
    }
    let mut modules_to_save = Vec::new();
    for m in &to_save {
        for n in names.iter().filter(|n| module_of(&n.engram) == m) {
            let v = &now[&n.engram];
            let shape = model
                .params()
                .into_iter()
                .find(|i| i.path == n.engram)
                .map(|i| i.shape)
                .unwrap_or_default();
            let (shape, v) = match (n.kind, shape.as_slice()) {
                (Kind::LinearWeight, [i, o]) => (vec![*o, *i], transpose(v, *i, *o)),
                _ => (shape, v.clone()),
            };
            tensors.push((format!("{PREFIX}{}", n.hf), shape, v));
        }
        modules_to_save.extend(hf_module(m));
    }
    // Every Linear module of BertModel, the pooler's included, for the suffixes.
    let mut linear_modules: Vec<String> = names
        .iter()
        .filter(|n| n.kind == Kind::LinearWeight)
        .map(|n| module_of(&n.hf).to_string())
        .collect();
    linear_modules.push("pooler.dense".into());
    let alpha = first.scale * first.rank as f64;
    let config = adapter_config(
        first.rank,
        alpha,
        first.dropout,
        suffixes(&modules, &linear_modules),
        &modules_to_save,
        base,
    );
    let (head_tensors, head_config) = head_export(&p, &now);
    let json = |v: &serde_json::Value| {
        let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
        s.push('\n');
        s
    };
    crate::fsutil::write_atomic(&dir.join(ADAPTER_FILE), &safetensors_bytes(&tensors))?;
    crate::fsutil::write_atomic(&dir.join(CONFIG_FILE), json(&config).as_bytes())?;
    crate::fsutil::write_atomic(&dir.join(HEAD_FILE), &safetensors_bytes(&head_tensors))?;
    crate::fsutil::write_atomic(&dir.join(HEAD_CONFIG), json(&head_config).as_bytes())?;
    Ok(Exported {
        modules,
        modules_to_save,
        rank: first.rank,
        alpha,
    })
}

/// PEFT's `adapter_config.json` for plain LoRA of rank `rank`, `lora_alpha` `alpha` and
/// `lora_dropout` `dropout` on
/// `target_modules`, with `modules_to_save` (none when empty) over the `BertModel` at `base`.
fn adapter_config(
    rank: usize,
    alpha: f64,
    dropout: f64,
    target_modules: Vec<String>,
    modules_to_save: &[String],
    base: Option<&Path>,
) -> serde_json::Value {
    serde_json::json!({
        "peft_type": "LORA",
        "task_type": null,
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": target_modules,
        "lora_dropout": dropout,
        "bias": "none",
        "fan_in_fan_out": false,
        "modules_to_save": if modules_to_save.is_empty() { None } else { Some(&modules_to_save) },
        "base_model_name_or_path": base.map(|b| b.display().to_string()),
        "inference_mode": true,
        "init_lora_weights": true,
        "use_rslora": false,
        "use_dora": false,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": null,
    })
}

/// engram's head for the export: its tensors in torch.nn.Linear's layout (weight `[classes,
/// hidden]`, bias `[classes]`) from the model's values `now`, and `engram_head.json` (pooling,
/// pad id, sizes).
fn head_export(p: &Parts<'_>, now: &HashMap<String, Vec<f32>>) -> (Vec<Named>, serde_json::Value) {
    let [hidden, classes] = p.head.linear.weight.shape().dims();
    let head_path = format!("blocks.{}.linear", p.layers.len() + 1);
    let mut head_tensors = vec![(
        "weight".to_string(),
        vec![classes, hidden],
        transpose(&now[&format!("{head_path}.weight")], hidden, classes),
    )];
    if let Some(b) = now.get(&format!("{head_path}.bias")) {
        head_tensors.push(("bias".into(), vec![classes], b.clone()));
    }
    let head_config = serde_json::json!({
        "pooling": p.head.pooling,
        "pad_token_id": p.embeddings.pad_id,
        "hidden": hidden,
        "classes": classes,
        "weights": HEAD_FILE,
        "about": "engram's classifier: pool BertModel's last hidden state (cls: the first token's; mean: over tokens whose id is not pad_token_id), then logits = pooled @ weight.T + bias",
    });
    (head_tensors, head_config)
}

#[path = "peft_load.rs"]
mod load;
pub use load::{LoadError, load};

#[cfg(test)]
#[path = "peft_tests.rs"]
mod tests;
