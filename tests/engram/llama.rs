//! `[model] type = "llama"` (issue #31, item 2): the decoder's next-token logits equal Hugging
//! Face's `LlamaForCausalLM` on tiny random checkpoints (tied and untied, from
//! bench/reference/llama_tiny.py), the SmolLM2 preset has SmolLM2-135M's parameter count, tied
//! embeddings stay one parameter through training, EWC's default importance group finds exactly
//! the attention projections, and a tiny Llama learns next tokens.

use engram::core::burn::module::{Module, Param};
use engram::core::burn::optim::{AdamConfig, GradientsParams};
use engram::core::burn::tensor::{Device, Int, Tensor, TensorData, activation};
use engram::core::model::llama::{self, LlamaShape, LmHead, TokenEmbedding, hf};
use engram::core::model::{Activation, DynBlock, ForwardCtx, Model};
use engram::strategies::ewc::{Ewc, EwcParams};
use std::path::PathBuf;

fn data_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// `rows` id sequences (each padded with 0 to the longest) as the float input `[batch, len]`.
fn ids_input(rows: &[Vec<i64>], device: &Device) -> Tensor<2> {
    let len = rows.iter().map(Vec::len).max().unwrap_or(0);
    let flat: Vec<f32> = rows
        .iter()
        .flat_map(|r| (0..len).map(|t| r.get(t).copied().unwrap_or(0) as f32))
        .collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), len]), device)
}

fn logits_of(model: &Model, rows: &[Vec<i64>], device: &Device) -> Tensor<3> {
    model
        .forward_tokens(
            Activation::Flat(ids_input(rows, device)),
            &ForwardCtx::evaluation(None),
        )
        .unwrap()
}

/// (ids, logits `[len][vocab]`) of each sample of `dir`/reference.json.
fn reference(dir: &str) -> Vec<(Vec<i64>, Vec<Vec<f64>>)> {
    let text = std::fs::read_to_string(data_dir(dir).join("reference.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let ids = s["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            let logits = s["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| {
                    row.as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_f64().unwrap())
                        .collect()
                })
                .collect();
            (ids, logits)
        })
        .collect()
}

/// `model`'s logits on the reference sequences, all in one right-padded batch (the causal mask
/// keeps padding out of every real position), against the reference's: (max |Δ|, max |logit|,
/// values compared).
fn compare(model: &Model, dir: &str) -> (f64, f64, usize) {
    let device = Device::flex();
    let samples = reference(dir);
    let rows: Vec<Vec<i64>> = samples.iter().map(|(ids, _)| ids.clone()).collect();
    let logits = logits_of(model, &rows, &device);
    let [b, n, v] = logits.dims();
    assert_eq!([b, n, v], [3, 12, 300]);
    let got = logits.into_data().try_to_vec::<f32>().unwrap();
    let (mut worst, mut scale, mut compared) = (0f64, 0f64, 0);
    for (s, (ids, want)) in samples.iter().enumerate() {
        assert_eq!(want.len(), ids.len());
        for (t, row) in want.iter().enumerate() {
            for (k, w) in row.iter().enumerate() {
                worst = worst.max((f64::from(got[(s * n + t) * v + k]) - w).abs());
                scale = scale.max(w.abs());
                compared += 1;
            }
        }
    }
    (worst, scale, compared)
}

/// The tied checkpoint in tests/data/llama-tiny: every tensor loads (the head is the embedding
/// table), and the logits of all 24 positions equal transformers' within 1e-3·max|logit|.
#[test]
fn tiny_tied_checkpoint_equals_transformers() {
    let (model, report) = hf::from_dir(&data_dir("llama-tiny"), &Device::flex()).unwrap();
    assert_eq!(report.loaded, 1 + 2 * 9 + 1, "{report:?}");
    assert!(report.missing.is_empty(), "{report:?}");
    assert!(report.unused.is_empty(), "{report:?}");
    assert_eq!(
        model.numel(),
        28_192,
        "transformers' count (reference.json)"
    );
    let (worst, scale, compared) = compare(&model, "llama-tiny");
    println!(
        "llama-tiny (tied): max |Δlogit| {worst:.3e}, max |logit| {scale:.3}, relative {:.3e}, {compared} values",
        worst / scale
    );
    assert_eq!(compared, (12 + 7 + 5) * 300);
    assert!(
        scale > 10.0,
        "the reference's logits are not trivial: {scale}"
    );
    assert!(
        worst <= 1e-3 * scale,
        "max |Δ| {worst} of max |logit| {scale}"
    );
}

/// The untied checkpoint (its own `lm_head.weight`) equals transformers' just as well.
#[test]
fn tiny_untied_checkpoint_equals_transformers() {
    let (model, report) = hf::from_dir(&data_dir("llama-tiny-untied"), &Device::flex()).unwrap();
    assert_eq!(report.loaded, 1 + 2 * 9 + 1 + 1, "{report:?}");
    assert!(report.missing.is_empty() && report.unused.is_empty());
    assert_eq!(model.numel(), 37_792);
    let (worst, scale, _) = compare(&model, "llama-tiny-untied");
    println!(
        "llama-tiny-untied: max |Δlogit| {worst:.3e}, max |logit| {scale:.3}, relative {:.3e}",
        worst / scale
    );
    assert!(
        worst <= 1e-3 * scale,
        "max |Δ| {worst} of max |logit| {scale}"
    );
}

fn config(model: &str) -> engram::core::config::LoadedConfig {
    let text = format!(
        "[data]\ndataset = \"fashion-mnist\"\ntasks = 1\n\n[model]\n{model}\n\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.1\n\n[train]\nepochs = 1\nbatch_size = 4\n\n\
         [[forgetting]]\ntype = \"naive\"\n"
    );
    engram::core::config::LoadedConfig::from_source(&data_dir("c.toml"), text).unwrap()
}

fn context() -> engram::core::model::ModelContext {
    engram::core::model::ModelContext {
        input: engram::core::model::InputShape::Features(12),
        num_classes: 2,
        seed: 0,
    }
}

/// `preset = "smollm2"` builds SmolLM2-135M's geometry with tied embeddings: 134,515,008
/// parameters, transformers' count for the same config (bench/reference/llama_tiny.py prints
/// it), 32 blocks.
#[test]
fn smollm2_preset_has_smollm2s_parameter_count() {
    let cfg = config("type = \"llama\"\npreset = \"smollm2\"");
    let model = llama::build(&cfg.params("model", 0), &context(), &Device::flex()).unwrap();
    assert_eq!(model.num_blocks(), 32);
    assert_eq!(model.num_classes, 49_152);
    assert_eq!(model.numel(), 134_515_008);
    let p: llama::LlamaParams = cfg.params("model", 0).parse().unwrap();
    assert_eq!(
        p.shape(&cfg.params("model", 0)).unwrap().num_params(),
        134_515_008
    );
}

/// `init = "llama-tiny"` (a Hugging Face directory): the factory takes the geometry from its
/// config.json and `load_init` its weights, which give the reference's logits; a key that
/// disagrees with the checkpoint and a bad geometry are refused at their keys.
#[test]
fn init_dir_gives_the_geometry_and_the_weights() {
    let device = Device::flex();
    let cfg = config("type = \"llama\"\ninit = \"llama-tiny\"");
    let model = llama::build(&cfg.params("model", 0), &context(), &device).unwrap();
    assert_eq!(model.num_blocks(), 4, "embeddings, 2 layers, head");
    let (model, report) = engram::core::train::trainer::load_init(&cfg, model).unwrap();
    assert_eq!(report.unwrap().loaded, 20);
    let (worst, scale, _) = compare(&model, "llama-tiny");
    assert!(worst <= 1e-3 * scale, "{worst}");
    for (keys, want) in [
        (
            "init = \"llama-tiny\"\nkv_heads = 4",
            "kv_heads = 4 disagrees with",
        ),
        (
            "init = \"llama-tiny\"\ntied = false",
            "tied = false disagrees with",
        ),
        ("heads = 3", "hidden 64 must be a multiple of heads 3"),
        ("kv_heads = 3", "kv_heads 3 must divide heads 4"),
        ("preset = \"llama7b\"", "unknown preset `llama7b`"),
    ] {
        let cfg = config(&format!("type = \"llama\"\n{keys}"));
        let err = llama::build(&cfg.params("model", 0), &context(), &device)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{keys}: {err}");
    }
}

fn tiny_shape(tied: bool) -> LlamaShape {
    LlamaShape {
        layers: 2,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 64,
        vocab: 24,
        rope_base: 1e5,
        rms_eps: 1e-5,
        tied,
    }
}

/// EWC's default layered-importance group, `attention|attn`, matches exactly the four
/// projections of every decoder layer, and nothing else (norms, FFN, embeddings, head).
#[test]
fn ewc_attention_group_finds_exactly_the_attention_projections() {
    let mut rng = engram::core::rng::stream(0, "init", 0, 0);
    let model = llama::build_llama(&tiny_shape(false), &mut rng, &Device::flex());
    let ewc = Ewc::new(EwcParams::default()).unwrap();
    let matched: Vec<String> = model
        .params()
        .into_iter()
        .map(|p| p.path)
        .filter(|p| ewc.group_factor(p) == 3.0)
        .collect();
    let mut want = Vec::new();
    for layer in 1..=2 {
        for proj in ["query", "key", "value", "output"] {
            want.push(format!("blocks.{layer}.attention.{proj}.weight"));
        }
    }
    assert_eq!(matched, want);
    let kinds: Vec<&str> = model.blocks().iter().map(|b| b.inner().kind()).collect();
    assert_eq!(kinds, ["embeddings", "decoder", "decoder", "head"]);
}

/// Sequences of a deterministic next-token rule: `x_{t+1} = (3·x_t + 1) mod 24`, from varied
/// starts, length 10.
fn rule_rows(n: usize) -> Vec<Vec<i64>> {
    (0..n)
        .map(|i| {
            let mut x = ((i * 7) % 24) as i64;
            (0..10)
                .map(|_| {
                    let v = x;
                    x = (3 * x + 1) % 24;
                    v
                })
                .collect()
        })
        .collect()
}

/// Mean next-token cross-entropy of `logits` `[batch, len, vocab]` on `rows`: position `t`
/// predicts token `t + 1`.
fn next_token_loss(logits: Tensor<3>, rows: &[Vec<i64>]) -> Tensor<1> {
    let [b, n, v] = logits.dims();
    let device = logits.device();
    let targets: Vec<i64> = rows.iter().flat_map(|r| r[1..].to_vec()).collect();
    let y = Tensor::<2, Int>::from_data(TensorData::new(targets, [b * (n - 1), 1]), &device);
    let lp = activation::log_softmax(logits.slice([0..b, 0..n - 1, 0..v]), 2);
    lp.reshape([b * (n - 1), v])
        .gather(1, y)
        .reshape([b * (n - 1)])
        .neg()
        .mean()
}

/// 60 Adam steps on a tiny tied Llama take the next-token loss of the rule's sequences from
/// about ln 24 to under a third of it, and the head stays the embedding table.
#[test]
fn a_tiny_llama_learns_next_tokens() {
    let ad = Device::flex().autodiff();
    let mut rng = engram::core::rng::stream(4, "init", 0, 0);
    let mut model = llama::build_llama(&tiny_shape(true), &mut rng, &ad);
    let rows = rule_rows(24);
    let eval = |m: &Model| {
        let inner = m.valid();
        next_token_loss(logits_of(&inner, &rows, &Device::flex()), &rows).into_scalar::<f32>()
    };
    let before = eval(&model);
    let mut optim = AdamConfig::new().init();
    for step in 0..60 {
        let batch = &rows[(step % 3) * 8..(step % 3) * 8 + 8];
        let loss = next_token_loss(logits_of(&model, batch, &ad), batch);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    let after = eval(&model);
    println!("tiny llama, 60 steps: next-token loss {before:.4} -> {after:.4}");
    assert!((before - 24f32.ln()).abs() < 0.1, "{before}");
    assert!(after < before / 3.0, "{before} -> {after}");
    assert_eq!(head_weight(&model), embed_weight(&model), "the tie held");
}

fn embed_weight(m: &Model) -> Vec<f32> {
    let e = m.blocks()[0].downcast_ref::<TokenEmbedding>().unwrap();
    e.embed
        .weight
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()
}

fn head_weight(m: &Model) -> Vec<f32> {
    let h = m.blocks().last().unwrap().downcast_ref::<LmHead>().unwrap();
    h.lm_head.val().into_data().try_to_vec::<f32>().unwrap()
}

/// The tied parameter's gradient is the sum of its two uses: it equals the embedding gradient
/// plus the head gradient of the same model with the head untied (a separate parameter of
/// equal value), and the tied model lists one parameter fewer.
#[test]
fn the_tied_gradient_sums_embedding_and_head() {
    let ad = Device::flex().autodiff();
    let mut rng = engram::core::rng::stream(5, "init", 0, 0);
    let tied = llama::build_llama(&tiny_shape(true), &mut rng, &ad);
    let mut untied = tied.clone();
    let last = untied.num_blocks() - 1;
    assert!(untied.replace_block(last, |b| {
        let h = b.downcast_ref::<LmHead>().unwrap();
        DynBlock::new(LmHead {
            norm: h.norm.clone(),
            lm_head: Param::from_tensor(h.lm_head.val().detach().require_grad()),
        })
    }));
    assert_eq!(untied.params().len(), tied.params().len() + 1);
    let rows = rule_rows(4);
    let grads = |m: &Model| -> Vec<(String, Vec<f32>)> {
        let loss = next_token_loss(logits_of(m, &rows, &ad), &rows);
        m.grads_of(loss)
            .into_iter()
            .map(|(p, g)| (p.path, g.into_data().try_to_vec::<f32>().unwrap()))
            .collect()
    };
    let (gt, gu) = (grads(&tied), grads(&untied));
    let find =
        |g: &[(String, Vec<f32>)], path: &str| g.iter().find(|(p, _)| p == path).unwrap().1.clone();
    let tied_g = find(&gt, "blocks.0.embed.weight");
    let sum: Vec<f32> = find(&gu, "blocks.0.embed.weight")
        .iter()
        .zip(find(&gu, "blocks.3.lm_head"))
        .map(|(a, b)| a + b)
        .collect();
    let head_only = find(&gu, "blocks.3.lm_head");
    let worst = tied_g
        .iter()
        .zip(&sum)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = sum.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(worst <= 1e-5 * scale.max(1.0), "{worst} of {scale}");
    let off = tied_g
        .iter()
        .zip(&head_only)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        off > 1e-4,
        "the embedding's own gradient is part of the sum"
    );
    // The device moves and the graph-free copy keep the tie.
    let inner = tied.valid();
    assert_eq!(head_weight(&inner), embed_weight(&inner));
    assert_eq!(inner.params().len(), tied.params().len());
}

/// Under mixed precision (`compute_view(f16)`) the RMSNorm gains stay `f32` (Burn's `RmsNorm`
/// type, found by `Block::full_precision`'s default), everything else, the tied table included,
/// is `f16`, the ids reach the embeddings in `f32`, and the f16 logits of the tied checkpoint
/// stay within 2 % of the largest reference logit.
#[test]
fn amp_keeps_the_rms_norms_f32() {
    use engram::core::burn::tensor::DType;
    let device = Device::flex();
    let (model, _) = hf::from_dir(&data_dir("llama-tiny"), &device).unwrap();
    assert_eq!(model.input_dtype(Some(DType::F16)), None);
    let view = model.compute_view(Some(DType::F16));
    let mut norms = 0;
    for (info, value) in view.param_values() {
        let is_norm = info.path.contains("norm");
        norms += usize::from(is_norm);
        let want = if is_norm { DType::F32 } else { DType::F16 };
        assert_eq!(value.dtype(), want, "{}", info.path);
    }
    assert_eq!(norms, 2 * 2 + 1);
    let samples = reference("llama-tiny");
    let (ids, want) = &samples[0];
    let logits = logits_of(&view, std::slice::from_ref(ids), &device);
    assert_eq!(logits.dtype(), DType::F16);
    let got = logits
        .cast(DType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let want: Vec<f64> = want.iter().flatten().copied().collect();
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (f64::from(*g) - w).abs())
        .fold(0f64, f64::max);
    println!("llama-tiny in f16: max |Δlogit| {worst:.3e} of max |logit| {scale:.3}");
    assert_eq!(got.len(), want.len());
    assert!(worst <= 0.02 * scale, "{worst} of {scale}");
}

/// A config.json asking for what engram's Llama does not compute is refused by name, not
/// loaded into a model that would compute something else: another activation, biases, RoPE
/// scaling, a head width other than hidden / heads, key/value heads that do not divide the
/// query heads; a file that is not a config at all says so.
#[test]
fn unsupported_configs_are_refused() {
    let base: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir("llama-tiny").join("config.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (key, value, want) in [
        ("hidden_act", serde_json::json!("gelu"), "hidden_act `gelu`"),
        ("attention_bias", serde_json::json!(true), "attention_bias"),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "linear", "factor": 2.0}),
            "rope_scaling",
        ),
        (
            "rope_parameters",
            serde_json::json!({"rope_type": "llama3", "rope_theta": 1e5}),
            "rope_type `llama3`",
        ),
        ("head_dim", serde_json::json!(16), "the geometry"),
        ("num_key_value_heads", serde_json::json!(3), "the geometry"),
        (
            "vocab_size",
            serde_json::json!("many"),
            "not a Llama config.json",
        ),
    ] {
        let mut c = base.clone();
        c[key] = value;
        std::fs::write(dir.path().join("config.json"), c.to_string()).unwrap();
        let err = hf::HfConfig::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(want), "{key}: {err}");
    }
    let ok = hf::HfConfig::read(&data_dir("llama-tiny")).unwrap();
    assert_eq!(ok.rope_base(), 1e5);
    assert_eq!(
        ok.shape(),
        LlamaShape {
            vocab: 300,
            ..tiny_shape(true)
        }
    );
}

// --- `init = FILE.gguf` (bench/reference/llama_gguf.py) ---

/// tests/data/gguf/llama-tiny.gguf: llama-tiny written as one F32 GGUF the way llama.cpp's
/// convert_hf_to_gguf.py writes it (q/k rows permuted for adjacent-pair rotation).
fn tiny_gguf() -> PathBuf {
    data_dir("gguf").join("llama-tiny.gguf")
}

/// The un-permutation on one head of width 4: HF row `s·2 + j` is GGUF row `2j + s`, so the
/// GGUF rows `[r0, r1, r2, r3]` come out as `[r0, r2, r1, r3]`; per head for two heads; rows
/// that are not whole heads of an even width are refused.
#[test]
fn gguf_unpermute_by_hand() {
    let w: Vec<f32> = (0..8).map(|v| v as f32).collect(); // [4 rows, 2 cols]
    assert_eq!(
        llama::gguf::unpermute(&w, 4, 2, 1).unwrap(),
        [0., 1., 4., 5., 2., 3., 6., 7.]
    );
    let w: Vec<f32> = (0..8).map(|v| v as f32).collect(); // [8 rows, 1 col], 2 heads of 4
    assert_eq!(
        llama::gguf::unpermute(&w, 8, 1, 2).unwrap(),
        [0., 2., 1., 3., 4., 6., 5., 7.]
    );
    assert!(llama::gguf::unpermute(&w, 8, 1, 3).is_none());
    assert!(
        llama::gguf::unpermute(&w, 8, 1, 8).is_none(),
        "width 1 is odd"
    );
}

/// The tiny GGUF loads (geometry from its metadata, 20 tensors, the head tied to the
/// embeddings) and its next-token logits equal transformers' on the HF checkpoint it was
/// converted from (the q/k un-permutation is right), bit for bit the HF directory's model's.
#[test]
fn tiny_gguf_equals_transformers() {
    let device = Device::flex();
    let f = engram::core::gguf::GgufFile::open(&tiny_gguf()).unwrap();
    assert_eq!(
        llama::gguf::shape_of(&f).unwrap(),
        LlamaShape {
            vocab: 300,
            // the file's f32 ε, as transformers reads it
            rms_eps: f64::from(1e-5f32),
            ..tiny_shape(true)
        }
    );
    let (model, report) = llama::gguf::from_file(&tiny_gguf(), &device).unwrap();
    assert_eq!(report.loaded, 20, "{report:?}");
    assert!(
        report.missing.is_empty() && report.unused.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.file, tiny_gguf());
    assert_eq!(report.sha256.len(), 64);
    assert_eq!(model.numel(), 28_192);
    let (worst, scale, compared) = compare(&model, "llama-tiny");
    println!(
        "llama-tiny.gguf: max |Δlogit| {worst:.3e}, max |logit| {scale:.3}, relative {:.3e}, {compared} values",
        worst / scale
    );
    assert!(scale > 10.0);
    assert!(worst <= 1e-3 * scale, "max |Δ| {worst} of {scale}");
    let (hf_model, _) = hf::from_dir(&data_dir("llama-tiny"), &device).unwrap();
    let rows: Vec<Vec<i64>> = reference("llama-tiny")
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let a = logits_of(&model, &rows, &device).into_data();
    let b = logits_of(&hf_model, &rows, &device).into_data();
    assert_eq!(a, b, "the GGUF's weights are the HF directory's");
}

/// The untied tiny GGUF (its own `output.weight`): the geometry says untied, the head loads
/// from `output`, and the logits equal transformers' on llama-tiny-untied.
#[test]
fn tiny_untied_gguf_equals_transformers() {
    let file = data_dir("gguf").join("llama-tiny-untied.gguf");
    let (model, report) = llama::gguf::from_file(&file, &Device::flex()).unwrap();
    assert_eq!(report.loaded, 21, "{report:?}");
    assert!(
        report.missing.is_empty() && report.unused.is_empty(),
        "{report:?}"
    );
    assert_eq!(model.numel(), 37_792);
    let (worst, scale, _) = compare(&model, "llama-tiny-untied");
    println!(
        "llama-tiny-untied.gguf: max |Δlogit| {worst:.3e}, max |logit| {scale:.3}, relative {:.3e}",
        worst / scale
    );
    assert!(worst <= 1e-3 * scale, "max |Δ| {worst} of {scale}");
}

/// The tiny GGUF's tokenizer, read as `[data.options] tokenizer` reads a tokenizer.json, gives
/// transformers' ids (tests/data/gguf/llama-tiny.json) and pads with the eos id.
#[test]
fn tiny_gguf_tokenizer_equals_transformers() {
    let tok = engram::core::data::tokenizer::TextTokenizer::load(&tiny_gguf(), 32).unwrap();
    assert_eq!(tok.vocab_size(), 300);
    assert_eq!(tok.pad_id(), 2, "no padding_token_id: the eos id");
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir("gguf").join("llama-tiny.json")).unwrap(),
    )
    .unwrap();
    for t in r["texts"].as_array().unwrap() {
        let want: Vec<u32> = t["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let mut got = Vec::new();
        let n = tok
            .encode_into(t["text"].as_str().unwrap(), &mut got)
            .unwrap();
        assert_eq!(&got[..n], &want[..], "{}", t["text"]);
    }
}

/// `init = "gguf/llama-tiny.gguf"` in a config: the factory takes the geometry from the file's
/// metadata, `load_init` its weights (the reference's logits); a key that disagrees with the
/// file is refused at its key, and another model type is refused at `init`.
#[test]
fn init_gguf_gives_the_geometry_and_the_weights() {
    let device = Device::flex();
    let cfg = config("type = \"llama\"\ninit = \"gguf/llama-tiny.gguf\"");
    let model = llama::build(&cfg.params("model", 0), &context(), &device).unwrap();
    assert_eq!(model.num_blocks(), 4);
    assert_eq!(model.num_classes, 300);
    let (model, report) = engram::core::train::trainer::load_init(&cfg, model).unwrap();
    assert_eq!(report.unwrap().loaded, 20);
    let (worst, scale, _) = compare(&model, "llama-tiny");
    assert!(worst <= 1e-3 * scale, "{worst}");
    let cfg =
        config("type = \"llama\"\ninit = \"gguf/llama-tiny.gguf\"\nrms_eps = 1e-5\nlayers = 2");
    llama::build(&cfg.params("model", 0), &context(), &device)
        .expect("keys that agree with the file (ε compared as the file's f32)");
    let cfg = config("type = \"llama\"\ninit = \"gguf/llama-tiny.gguf\"\nvocab = 301");
    let err = llama::build(&cfg.params("model", 0), &context(), &device)
        .unwrap_err()
        .to_string();
    assert!(err.contains("vocab = 301 disagrees with"), "{err}");
    assert!(err.contains("llama-tiny.gguf: 300"), "{err}");
    let cfg = config("type = \"mlp\"\ninit = \"gguf/llama-tiny.gguf\"");
    let model = engram::core::model::mlp::build_mlp(
        12,
        &[4],
        2,
        engram::core::model::mlp::ActivationKind::Relu,
        0.0,
        &mut engram::core::rng::stream(0, "init", 0, 0),
        &device,
    );
    let err = engram::core::train::trainer::load_init(&cfg, model)
        .unwrap_err()
        .to_string();
    assert!(err.contains("only type = \"llama\" reads"), "{err}");
}

/// `[model] init` is told apart by one rule: a directory with a config.json is a Hugging Face
/// checkpoint, a `*.gguf` name or a file starting with `GGUF` a GGUF file, anything else
/// (a missing path included) a safetensors file.
#[test]
fn init_source_is_one_rule() {
    use engram::core::model::init::InitSource;
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("weights.bin");
    std::fs::copy(tiny_gguf(), &renamed).unwrap();
    let other = dir.path().join("weights.safetensors");
    std::fs::write(&other, b"not gguf").unwrap();
    for (path, want) in [
        (
            data_dir("llama-tiny"),
            InitSource::HfDir(data_dir("llama-tiny")),
        ),
        (tiny_gguf(), InitSource::Gguf(tiny_gguf())),
        (renamed.clone(), InitSource::Gguf(renamed.clone())),
        (
            dir.path().join("absent.GGUF"),
            InitSource::Gguf(dir.path().join("absent.GGUF")),
        ),
        (other.clone(), InitSource::Safetensors(other.clone())),
        (
            dir.path().join("absent"),
            InitSource::Safetensors(dir.path().join("absent")),
        ),
        (
            dir.path().to_path_buf(),
            InitSource::Safetensors(dir.path().to_path_buf()),
        ),
    ] {
        assert_eq!(InitSource::of(&path), want, "{}", path.display());
    }
}

/// `bytes` with the first occurrence of `find` (followed by `skip` bytes) patched to `with`.
fn patch(bytes: &[u8], find: &[u8], skip: usize, with: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(find.len())
        .position(|w| w == find)
        .unwrap_or_else(|| panic!("{:?} not in the file", String::from_utf8_lossy(find)))
        + find.len()
        + skip;
    let mut out = bytes.to_vec();
    out[at..at + with.len()].copy_from_slice(with);
    out
}

/// Bad GGUF starts are typed errors at `[model] init` naming the file and the defect, never a
/// panic: another architecture, a missing tensor, a tensor whose shape is not the metadata's
/// geometry, a ggml type engram does not dequantise.
#[test]
fn bad_gguf_starts_are_refused_at_init() {
    let good = std::fs::read(tiny_gguf()).unwrap();
    let u32le = |v: u32| v.to_le_bytes().to_vec();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "arch",
            patch(&good, b"general.architecture", 4 + 8, b"gemma"),
            "general.architecture is `gemma`",
        ),
        (
            "missing",
            patch(&good, b"blk.1.ffn_u", 0, b"q"),
            "no tensor `blk.1.ffn_up.weight`",
        ),
        (
            "shape",
            patch(&good, b"llama.feed_forward_length", 4, &u32le(48)),
            "tensor `blk.0.ffn_gate.weight` is [64, 32]; the metadata's geometry needs [48, 32]",
        ),
        (
            // output_norm.weight: rank 1 (u32), dims [32] (u64), then its type: F32 -> BF16
            "quant",
            patch(&good, b"output_norm.weight", 4 + 8, &u32le(30)),
            "unsupported ggml type BF16",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    for (name, bytes, want) in cases {
        let file = dir.path().join(format!("{name}.gguf"));
        std::fs::write(&file, bytes).unwrap();
        let text = format!(
            "[data]\ndataset = \"fashion-mnist\"\ntasks = 1\n\n[model]\ntype = \"llama\"\ninit = \"{}\"\n\n\
             [optimizer]\ntype = \"sgd\"\nlr = 0.1\n\n[train]\nepochs = 1\nbatch_size = 4\n\n\
             [[forgetting]]\ntype = \"naive\"\n",
            file.display()
        );
        let cfg = engram::core::config::LoadedConfig::from_source(&dir.path().join("c.toml"), text)
            .unwrap();
        let err = llama::build(&cfg.params("model", 0), &context(), &device)
            .and_then(|m| engram::core::train::trainer::load_init(&cfg, m).map(|_| ()))
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(want), "{name}: {msg}");
        assert!(msg.contains(&format!("{name}.gguf")), "{name}: {msg}");
        assert!(
            matches!(err, engram::core::Error::Config { line: 7, .. }),
            "{name}: positioned at `init` (line 7): {msg}"
        );
    }
}

/// The real SmolLM2-135M-Instruct Q4_1 GGUF (`ENGRAM_SMOLLM2=…/SmolLM2-135M-Instruct.Q4_1.gguf`,
/// from `engram data fetch smollm2`): its own tokenizer gives transformers' ids for three texts
/// (digits included), and the next-token logits at every position equal transformers'
/// `AutoModelForCausalLM.from_pretrained(dir, gguf_file=…)` (tests/data/gguf/smollm2-logits.json
/// from bench/reference/llama_gguf.py: the 10 largest and the first 16 of each position) within
/// 1e-3·max|logit|, with the same argmax. Skipped (passes) when unset.
#[test]
fn smollm2_gguf_equals_transformers() {
    let Some(path) = std::env::var_os("ENGRAM_SMOLLM2") else {
        eprintln!("ENGRAM_SMOLLM2 unset: SmolLM2 logits check skipped");
        return;
    };
    let path = PathBuf::from(path);
    let device = Device::flex();
    let t0 = std::time::Instant::now();
    let (model, report) = llama::gguf::from_file(&path, &device).unwrap();
    let load_s = t0.elapsed().as_secs_f64();
    assert_eq!(report.loaded, 1 + 30 * 9 + 1, "{report:?}");
    assert!(
        report.missing.is_empty() && report.unused.is_empty(),
        "{report:?}"
    );
    assert_eq!(model.numel(), 134_515_008);
    let tok = engram::core::gguf::GgufFile::open(&path)
        .unwrap()
        .tokenizer()
        .unwrap();
    let text_tok = engram::core::data::tokenizer::TextTokenizer::load(&path, 64).unwrap();
    assert_eq!(text_tok.vocab_size(), 49_152);
    assert_eq!(Some(text_tok.pad_id()), tok.pad_id.or(tok.eos_id));
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir("gguf").join("smollm2-logits.json")).unwrap(),
    )
    .unwrap();
    let as_vec = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (mut worst, mut scale, mut compared) = (0f64, 0f64, 0usize);
    let t1 = std::time::Instant::now();
    for s in r["samples"].as_array().unwrap() {
        let ids: Vec<i64> = s["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let enc = tok
            .tokenizer
            .encode(s["text"].as_str().unwrap(), true)
            .unwrap();
        let mine: Vec<i64> = enc.get_ids().iter().map(|&i| i64::from(i)).collect();
        assert_eq!(mine, ids, "{}", s["text"]);
        let logits = logits_of(&model, std::slice::from_ref(&ids), &device);
        let [_, n, v] = logits.dims();
        assert_eq!(v, 49_152);
        let got = logits.into_data().try_to_vec::<f32>().unwrap();
        for t in 0..n {
            let row = &got[t * v..(t + 1) * v];
            let top_ids = s["top_ids"][t].as_array().unwrap();
            let top = as_vec(&s["top_logits"][t]);
            for (id, want) in top_ids.iter().zip(&top) {
                let id = id.as_u64().unwrap() as usize;
                worst = worst.max((f64::from(row[id]) - want).abs());
                compared += 1;
            }
            for (k, want) in as_vec(&s["first_logits"][t]).iter().enumerate() {
                worst = worst.max((f64::from(row[k]) - want).abs());
                compared += 1;
            }
            let max_abs = s["max_abs_logit"][t].as_f64().unwrap();
            scale = scale.max(max_abs);
            let argmax = (0..v).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
            let gap = top[0] - top[1];
            if gap > 1e-3 * max_abs {
                assert_eq!(argmax as u64, top_ids[0].as_u64().unwrap(), "position {t}");
            }
        }
    }
    println!(
        "SmolLM2 Q4_1 GGUF vs transformers: max |Δlogit| {worst:.3e}, max |logit| {scale:.3}, relative {:.3e}, {compared} values; load {load_s:.1} s, forward {:.1} s",
        worst / scale,
        t1.elapsed().as_secs_f64()
    );
    assert!(
        worst <= 1e-3 * scale,
        "max |Δ| {worst} of max |logit| {scale}"
    );
}
