//! `[model] type = "bert"` (issue #35): the encoder equals Hugging Face's `BertModel` on a tiny
//! random checkpoint, EWC's default importance group finds exactly its attention parameters,
//! and it learns.

use engram::core::burn::module::Module;
use engram::core::burn::optim::{AdamConfig, GradientsParams};
use engram::core::burn::tensor::{Bool, Device, Int, Tensor, TensorData, activation};
use engram::core::model::bert::{self, BertShape, Pooling, hf};
use engram::core::model::{Activation, ForwardCtx, Model};
use engram::strategies::ewc::{Ewc, EwcParams};
use std::path::PathBuf;

fn tiny_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/bert-tiny")
}

/// `rows` id sequences as the flat float input `[batch, len]` the model gets from the data.
fn ids_input(rows: &[Vec<i64>], device: &Device) -> Tensor<2> {
    let len = rows[0].len();
    let flat: Vec<f32> = rows.iter().flatten().map(|&i| i as f32).collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), len]), device)
}

/// The last hidden state `[batch, len, hidden]` and mask of `model` (every block but the head).
fn last_hidden(model: &Model, x: Tensor<2>) -> (Tensor<3>, Tensor<2, Bool>) {
    let n = model.num_blocks();
    match model.forward_range(0..n - 1, Activation::Flat(x), &ForwardCtx::evaluation(None)) {
        Activation::Tokens { hidden, mask, .. } => (hidden, mask),
        other => panic!("the encoder gave {other:?}"),
    }
}

fn vec_of(t: Tensor<2>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// The reference samples of tests/data/bert-tiny/reference.json.
fn reference() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(tiny_dir().join("reference.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    r["samples"].as_array().unwrap().clone()
}

type Compared = (
    f64,
    usize,
    Tensor<3>,
    Tensor<2, Bool>,
    Vec<serde_json::Value>,
);

/// `model`'s last hidden state on the reference ids against the reference's, over non-pad
/// positions: (max abs difference, values compared, hidden, mask, samples).
fn compare_with_reference(model: &Model) -> Compared {
    let device = Device::flex();
    let samples = reference();
    let rows: Vec<Vec<i64>> = samples
        .iter()
        .map(|s| {
            s["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect()
        })
        .collect();
    let (hidden, mask) = last_hidden(model, ids_input(&rows, &device));
    let [b, n, d] = hidden.dims();
    assert_eq!([b, n, d], [3, 10, 32]);
    let got = hidden.clone().into_data().try_to_vec::<f32>().unwrap();
    let (mut worst, mut compared) = (0f64, 0);
    for (s, sample) in samples.iter().enumerate() {
        let want = sample["last_hidden_state"].as_array().unwrap();
        for (t, row) in want.iter().enumerate() {
            if rows[s][t] == 0 {
                continue;
            }
            for (k, v) in row.as_array().unwrap().iter().enumerate() {
                let diff = (got[(s * n + t) * d + k] as f64 - v.as_f64().unwrap()).abs();
                worst = worst.max(diff);
                compared += 1;
            }
        }
    }
    (worst, compared, hidden, mask, samples)
}

/// The hidden state of the checkpoint in tests/data/bert-tiny (bench/reference/bert_tiny.py)
/// equals the reference's on every non-pad position within 1e-4, and so do both poolings.
#[test]
fn tiny_checkpoint_equals_hugging_face_bert() {
    let device = Device::flex();
    let dir = tiny_dir();
    let (model, report) = hf::from_dir(&dir, 3, Pooling::Cls, 0, &device).unwrap();
    // 5 embedding tensors + 16 per layer (2 layers); unused: position_ids and the pooler.
    assert_eq!(report.loaded, 5 + 2 * 16, "{report:?}");
    let mut missing = report.missing.clone();
    missing.sort();
    assert_eq!(missing, ["blocks.3.linear.bias", "blocks.3.linear.weight"]);
    let mut unused = report.unused.clone();
    unused.sort();
    assert_eq!(
        unused,
        [
            "embeddings.position_ids",
            "pooler.dense.bias",
            "pooler.dense.weight"
        ]
    );
    let (worst, compared, hidden, mask, samples) = compare_with_reference(&model);
    println!("bert-tiny: last hidden state max abs difference {worst:.3e} over {compared} values");
    assert_eq!(compared, (6 + 10 + 3) * 32);
    assert!(worst <= 1e-4, "max abs difference {worst}");
    for (pooling, key) in [(Pooling::Cls, "cls"), (Pooling::Mean, "mean")] {
        let pooled = vec_of(bert::pool(hidden.clone(), &mask, pooling));
        let want: Vec<f64> = samples
            .iter()
            .flat_map(|s| {
                s[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
            })
            .collect();
        let worst = pooled
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0f64, f64::max);
        println!("bert-tiny: {key} pooling max abs difference {worst:.3e}");
        assert_eq!(pooled.len(), 3 * 32);
        assert!(worst <= 1e-4, "{key}: {worst}");
    }
}

/// A checkpoint whose geometry disagrees with the model (3 layers asked of a 2-layer file, a
/// wider model) is refused by shape, not loaded silently.
#[test]
fn a_checkpoint_of_another_width_is_refused() {
    let device = Device::flex();
    let mut shape = hf::HfConfig::read(&tiny_dir())
        .unwrap()
        .shape(Pooling::Cls, 0.0);
    shape.hidden = 64;
    let mut rng = engram::core::rng::stream(0, "init", 0, 0);
    let model = bert::build_bert(&shape, 2, &mut rng, &device);
    let err = hf::load_dir(model, &tiny_dir(), 2).unwrap_err();
    assert_eq!(err.key, "init");
    assert!(
        err.error.to_string().contains("do not fit"),
        "{}",
        err.error
    );
}

fn small_shape(pooling: Pooling, dropout: f64) -> BertShape {
    BertShape {
        layers: 2,
        hidden: 32,
        heads: 4,
        ffn: 64,
        vocab: 40,
        max_position: 16,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
        dropout,
        pad_id: 0,
        pooling,
    }
}

/// A batch without padding leaves attention's scores unmasked (`padded` is `false`), and that
/// is exact: the logits and the gradient reaching the embeddings' output are the same bits as
/// with the mask applied (an all-`false` mask). A batch with a pad id is flagged.
#[test]
fn attention_without_padding_skips_the_mask_exactly() {
    let ad = Device::flex().autodiff();
    let mut rng = engram::core::rng::stream(3, "init", 0, 0);
    let model = bert::build_bert(&small_shape(Pooling::Mean, 0.0), 3, &mut rng, &ad);
    let n = model.num_blocks();
    let ctx = ForwardCtx::training(None);
    let embed =
        |rows: &[Vec<i64>]| model.forward_range(0..1, Activation::Flat(ids_input(rows, &ad)), &ctx);
    let padded_of = |a: &Activation| match a {
        Activation::Tokens { padded, .. } => *padded,
        other => panic!("the embeddings gave {other:?}"),
    };
    let (rows, _) = synthetic(4, 9);
    assert!(padded_of(&embed(&rows)), "synthetic rows end in pad ids");
    let full: Vec<Vec<i64>> = (0..4)
        .map(|i| (0..12).map(|t| 8 + (i * 7 + t * 3) % 32).collect())
        .collect();
    let tokens = embed(&full);
    assert!(!padded_of(&tokens));
    // The rest of the network from the same (detached) embeddings, the mask skipped and
    // applied; a fixed weighting of the logits as the loss.
    let run = |padded: bool| {
        let Activation::Tokens { hidden, mask, .. } = tokens.clone().detach() else {
            unreachable!()
        };
        let hidden = hidden.require_grad();
        let x = Activation::Tokens {
            hidden: hidden.clone(),
            mask,
            padded,
        };
        let logits = model.forward_range(1..n, x, &ctx).into_flat();
        let w = Tensor::<2>::from_data(
            TensorData::new(
                (0..12).map(|i| (i as f32 - 5.5) / 4.0).collect::<Vec<_>>(),
                [4, 3],
            ),
            &ad,
        );
        let grads = (logits.clone() * w).sum().backward();
        let g = hidden
            .grad(&grads)
            .expect("the embeddings' output has a gradient");
        (
            logits.into_data().try_to_vec::<f32>().unwrap(),
            g.into_data().try_to_vec::<f32>().unwrap(),
        )
    };
    let (skipped, g_skipped) = run(false);
    let (masked, g_masked) = run(true);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&skipped), bits(&masked));
    assert_eq!(bits(&g_skipped), bits(&g_masked));
    assert_eq!(g_skipped.len(), 4 * 12 * 32);
    assert!(g_skipped.iter().any(|x| *x != 0.0), "a gradient to compare");
}

/// EWC's default layered-importance group, `attention|attn`, matches exactly the four
/// projections (weight and bias) of every encoder layer's self-attention.
#[test]
fn ewc_attention_group_finds_exactly_the_attention_projections() {
    let device = Device::flex();
    let mut rng = engram::core::rng::stream(0, "init", 0, 0);
    let model = bert::build_bert(&small_shape(Pooling::Cls, 0.1), 2, &mut rng, &device);
    let ewc = Ewc::new(EwcParams::default()).unwrap();
    let paths: Vec<String> = model.params().into_iter().map(|p| p.path).collect();
    let matched: Vec<String> = paths
        .iter()
        .filter(|p| ewc.group_factor(p) == 3.0)
        .cloned()
        .collect();
    assert!(
        paths
            .iter()
            .all(|p| [1.0, 3.0].contains(&ewc.group_factor(p)))
    );
    let mut want = Vec::new();
    for layer in 1..=2 {
        for proj in ["query", "key", "value", "output"] {
            for t in ["weight", "bias"] {
                want.push(format!("blocks.{layer}.attention.{proj}.{t}"));
            }
        }
    }
    assert_eq!(matched, want);
    // 4 blocks: embeddings, 2 layers, head.
    let kinds: Vec<&str> = model.blocks().iter().map(|b| b.inner().kind()).collect();
    assert_eq!(kinds, ["embeddings", "encoder", "encoder", "head"]);
}

/// Synthetic token data: class 1 when the sequence holds token 7, else class 0; lengths 3..=12
/// of 12, padded with 0; ids in 1..40.
fn synthetic(n: usize, seed: u64) -> (Vec<Vec<i64>>, Vec<i64>) {
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut rows, mut labels) = (Vec::new(), Vec::new());
    for i in 0..n {
        let len = r.random_range(3..=12);
        let mut row: Vec<i64> = (0..12)
            .map(|t| if t < len { r.random_range(8..40) } else { 0 })
            .collect();
        let y = (i % 2) as i64;
        if y == 1 {
            row[r.random_range(0..len)] = 7;
        }
        rows.push(row);
        labels.push(y);
    }
    (rows, labels)
}

fn cross_entropy(logits: Tensor<2>, y: &[i64]) -> Tensor<1> {
    let b = y.len();
    let device = logits.device();
    let y = Tensor::<1, Int>::from_data(TensorData::new(y.to_vec(), [b]), &device);
    activation::log_softmax(logits, 1)
        .gather(1, y.reshape([b, 1]))
        .reshape([b])
        .neg()
        .mean()
}

/// One epoch of Adam on a tiny BERT (dropout on) lowers the evaluation loss of the data it saw.
#[test]
fn a_tiny_bert_learns_in_one_epoch() {
    let ad = Device::flex().autodiff();
    ad.seed(1);
    let mut rng = engram::core::rng::stream(1, "init", 0, 0);
    let mut model = bert::build_bert(&small_shape(Pooling::Mean, 0.1), 2, &mut rng, &ad);
    let (rows, labels) = synthetic(384, 5);
    let eval_loss = |m: &Model| {
        let inner = m.valid();
        let dev = Device::flex();
        let logits = inner.forward(
            Activation::Flat(ids_input(&rows, &dev)),
            &ForwardCtx::evaluation(None),
        );
        cross_entropy(logits, &labels).into_scalar::<f32>()
    };
    let before = eval_loss(&model);
    let mut optim = AdamConfig::new().init();
    for (xs, ys) in rows.chunks(16).zip(labels.chunks(16)) {
        let logits = model.forward(
            Activation::Flat(ids_input(xs, &ad)),
            &ForwardCtx::training(None),
        );
        let loss = cross_entropy(logits, ys);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(3e-3, model, grads);
    }
    let after = eval_loss(&model);
    println!("tiny bert, one epoch: loss {before:.4} -> {after:.4}");
    assert!((0.6..0.8).contains(&before), "{before}");
    assert!(after < 0.8 * before, "{before} -> {after}");
}

/// `[model] type = "bert"` with `init = "bert-tiny"` (a Hugging Face directory, relative to
/// the config): the factory takes the geometry from its config.json and `load_init` its
/// weights, which give the reference's hidden state; a key that disagrees with the checkpoint
/// and a directory given to another model type are refused at their keys.
#[test]
fn init_dir_gives_the_geometry_and_the_weights() {
    use engram::core::config::LoadedConfig;
    use engram::core::model::{InputShape, ModelContext};
    let config = |model: &str| {
        let text = format!(
            "[data]\ndataset = \"fashion-mnist\"\ntasks = 1\n\n[model]\n{model}\n\n\
             [optimizer]\ntype = \"sgd\"\nlr = 0.1\n\n[train]\nepochs = 1\nbatch_size = 4\n\n\
             [[forgetting]]\ntype = \"naive\"\n"
        );
        LoadedConfig::from_source(&tiny_dir().with_file_name("c.toml"), text).unwrap()
    };
    let cx = ModelContext {
        input: InputShape::Features(10),
        num_classes: 3,
        seed: 0,
    };
    let device = Device::flex();
    let cfg = config("type = \"bert\"\ninit = \"bert-tiny\"\npooling = \"mean\"");
    let model = bert::build(&cfg.params("model", 0), &cx, &device).unwrap();
    assert_eq!(model.num_blocks(), 4, "embeddings, 2 layers, head");
    let (model, report) = engram::core::train::trainer::load_init(&cfg, model).unwrap();
    assert_eq!(report.unwrap().loaded, 37);
    let (worst, compared, ..) = compare_with_reference(&model);
    assert_eq!(compared, 19 * 32);
    assert!(worst <= 1e-4, "{worst}");

    let cfg = config("type = \"bert\"\ninit = \"bert-tiny\"\nhidden = 64");
    let err = bert::build(&cfg.params("model", 0), &cx, &device)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hidden = 64 disagrees with") && err.contains("32"),
        "{err}"
    );
    let cfg = config("type = \"bert\"\ninit = \"bert-tiny\"\npreset = \"base\"");
    let err = bert::build(&cfg.params("model", 0), &cx, &device)
        .unwrap_err()
        .to_string();
    assert!(err.contains("preset = \"base\" disagrees"), "{err}");

    let cfg = config("type = \"mlp\"\ninit = \"bert-tiny\"");
    let mlp = engram::core::model::mlp::build(&cfg.params("model", 0), &cx, &device).unwrap();
    let err = engram::core::train::trainer::load_init(&cfg, mlp)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("only type = \"bert\" and type = \"llama\" read"),
        "{err}"
    );
}

/// Under mixed precision (`compute_view(f16)`) every layer norm of the encoder stays `f32`
/// (Burn's `LayerNorm` type, found by `Block::full_precision`'s default) and everything else is
/// `f16`; the f16 forward of the tiny checkpoint stays within 0.05 of the f32 reference.
#[test]
fn amp_keeps_the_layer_norms_f32() {
    use engram::core::burn::tensor::DType;
    let device = Device::flex();
    let (model, _) = hf::from_dir(&tiny_dir(), 3, Pooling::Cls, 0, &device).unwrap();
    let view = model.compute_view(Some(DType::F16));
    let mut norms = 0;
    for (info, value) in view.param_values() {
        let is_norm = info.path.contains("norm");
        norms += usize::from(is_norm);
        let want = if is_norm { DType::F32 } else { DType::F16 };
        assert_eq!(value.dtype(), want, "{}", info.path);
    }
    assert_eq!(norms, 2 * (1 + 2 * 2), "gamma and beta of 5 layer norms");
    let samples = reference();
    let rows: Vec<Vec<i64>> = samples
        .iter()
        .map(|s| {
            s["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect()
        })
        .collect();
    let (hidden, _) = last_hidden(&view, ids_input(&rows, &device).cast(DType::F16));
    assert_eq!(hidden.dtype(), DType::F16);
    let got = hidden
        .cast(DType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let want: Vec<f64> = samples
        .iter()
        .flat_map(|s| s["last_hidden_state"].as_array().unwrap().clone())
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let worst = rows
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, id)| **id != 0)
        .flat_map(|(t, _)| (0..32).map(move |k| t * 32 + k))
        .map(|i| (got[i] as f64 - want[i]).abs())
        .fold(0f64, f64::max);
    println!("bert-tiny in f16: max abs difference {worst:.3e}");
    assert!(worst < 0.05, "{worst}");
}

/// Token ids above 2048 (which `f16` cannot hold exactly: 2049 becomes 2048) reach the
/// embeddings intact under mixed precision: the model asks for its input in `f32`
/// (`Model::input_dtype`), and the f16 forward stays near the f32 one.
#[test]
fn amp_keeps_token_ids_exact() {
    use engram::core::burn::tensor::DType;
    let device = Device::flex();
    let mut shape = small_shape(Pooling::Mean, 0.0);
    shape.vocab = 3000;
    let mut rng = engram::core::rng::stream(2, "init", 0, 0);
    let model = bert::build_bert(&shape, 2, &mut rng, &device);
    assert_eq!(model.input_dtype(Some(DType::F16)), None);
    let rows = vec![vec![2049, 2051, 2999, 0], vec![2050, 2052, 0, 0]];
    let x = ids_input(&rows, &device);
    let rounded = vec_of(x.clone().cast(DType::F16).cast(DType::F32));
    assert_eq!(rounded[0], 2048.0, "f16 cannot hold 2049");
    let (full, _) = last_hidden(&model, x.clone());
    let view = model.compute_view(Some(DType::F16));
    let x = match model.input_dtype(Some(DType::F16)) {
        Some(dt) => x.cast(dt),
        None => x,
    };
    let (half, _) = last_hidden(&view, x);
    assert_eq!(half.dtype(), DType::F16);
    let a = full.into_data().try_to_vec::<f32>().unwrap();
    let b = half
        .cast(DType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let worst = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max);
    println!("ids > 2048 under f16: max abs difference {worst:.3e}");
    assert!(worst < 0.05, "{worst}");
}

// ---- `engram embed` and the equality with transformers (bench/reference/*.py) ----------------

/// A JSON array of numbers (or of arrays of numbers, flattened) as `f64`s.
fn floats(v: &serde_json::Value) -> Vec<f64> {
    match v {
        serde_json::Value::Array(a) => a.iter().flat_map(floats).collect(),
        other => vec![other.as_f64().unwrap()],
    }
}

/// The largest `|a - b|`, after asserting equal lengths.
fn max_abs(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f64, f64::max)
}

/// Runs `engram embed DIR --text TEXTS --out OUT extra…` on `texts` (one per line); returns
/// the written JSON after checking its fields.
fn embed(dir: &std::path::Path, texts: &[&str], extra: &[&str]) -> serde_json::Value {
    let tmp = tempfile::tempdir().unwrap();
    let (file, out) = (tmp.path().join("texts.txt"), tmp.path().join("e.json"));
    std::fs::write(&file, texts.join("\n") + "\n").unwrap();
    let mut args = vec!["embed", dir.to_str().unwrap(), "--text"];
    args.extend([file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    args.extend(extra);
    let (code, log) = crate::util::run(&args);
    assert_eq!(code, 0, "{log}");
    let blank = texts.iter().filter(|t| t.trim().is_empty()).count();
    assert_eq!(
        log.contains(&format!("{blank} blank line(s)")),
        blank > 0,
        "an empty text is embedded, with a warning: {log}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["texts"].as_u64(), Some(texts.len() as u64));
    let dim = v["dim"].as_u64().unwrap() as usize;
    assert_eq!(floats(&v["embeddings"]).len(), texts.len() * dim);
    v
}

/// The texts of a reference's `texts`.
fn texts_of(r: &serde_json::Value) -> Vec<&str> {
    r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

/// `engram embed` on the tiny checkpoint (and its tokenizer.json) gives transformers' pooled
/// outputs (bench/reference/bert_tiny.py's `embed`) within 1e-4: cls by default (no
/// 1_Pooling/config.json), mean when 1_Pooling asks for it, and mean L2-normalised with
/// `--pooling mean --normalize`; max_len defaults to the position table's 16 (two texts are
/// truncated), and the ids are Hugging Face tokenizers'.
#[test]
fn embed_equals_transformers_on_the_tiny_checkpoint() {
    let text = std::fs::read_to_string(tiny_dir().join("reference.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let r = &r["embed"];
    let texts = texts_of(r);
    let tok =
        engram::core::data::tokenizer::TextTokenizer::load(&tiny_dir().join("tokenizer.json"), 16)
            .unwrap();
    let ids: Vec<f64> = tok
        .encode(&texts)
        .unwrap()
        .iter()
        .map(|&i| i as f64)
        .collect();
    assert_eq!(ids, floats(&r["ids"]));

    let v = embed(&tiny_dir(), &texts, &[]);
    assert_eq!(
        (v["pooling"].as_str(), v["max_len"].as_u64()),
        (Some("cls"), Some(16))
    );
    assert_eq!(
        (v["dim"].as_u64(), v["normalize"].as_bool()),
        (Some(32), Some(false))
    );
    let cls = max_abs(&floats(&v["embeddings"]), &floats(&r["cls"]));
    let v = embed(&tiny_dir(), &texts, &["--pooling", "mean", "--normalize"]);
    let normalized = max_abs(&floats(&v["embeddings"]), &floats(&r["mean_normalized"]));
    // A copy with sentence-transformers' 1_Pooling/config.json asking for mean pooling.
    let copy = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny_dir().join(f), copy.path().join(f)).unwrap();
    }
    std::fs::create_dir(copy.path().join("1_Pooling")).unwrap();
    std::fs::write(
        copy.path().join("1_Pooling/config.json"),
        r#"{"pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true}"#,
    )
    .unwrap();
    let v = embed(copy.path(), &texts, &["--max-len", "16"]);
    assert_eq!(v["pooling"].as_str(), Some("mean"));
    let mean = max_abs(&floats(&v["embeddings"]), &floats(&r["mean"]));
    println!(
        "embed, bert-tiny: max abs cls {cls:.3e}, mean {mean:.3e}, normalised {normalized:.3e}"
    );
    for worst in [cls, mean, normalized] {
        assert!(worst <= 1e-4, "{cls} {mean} {normalized}");
    }
}

/// Bad input to `engram embed` is exit code 2 with a message naming the file (and the line),
/// never a panic: a missing directory, one without model.safetensors, a run directory, an
/// empty texts file, a missing one, a line that is not UTF-8, a --max-len over the position
/// table, a pooling engram does not compute, an existing --out without --overwrite.
#[test]
fn embed_refuses_bad_input_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    std::fs::write(p("ok.txt"), "one text\n").unwrap();
    std::fs::write(p("empty.txt"), "").unwrap();
    std::fs::write(p("latin1.txt"), b"fine\ncaf\xe9 au lait\n").unwrap();
    std::fs::write(p("exists.json"), "{}").unwrap();
    let no_weights = tmp.path().join("no-weights");
    std::fs::create_dir(&no_weights).unwrap();
    std::fs::copy(
        tiny_dir().join("config.json"),
        no_weights.join("config.json"),
    )
    .unwrap();
    let max_pool = tmp.path().join("max-pool");
    std::fs::create_dir_all(max_pool.join("1_Pooling")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny_dir().join(f), max_pool.join(f)).unwrap();
    }
    std::fs::write(
        max_pool.join("1_Pooling/config.json"),
        r#"{"pooling_mode_max_tokens": true}"#,
    )
    .unwrap();
    let run_dir = tmp.path().join("a-run");
    std::fs::create_dir_all(run_dir.join("checkpoints")).unwrap();
    let tiny = tiny_dir().to_str().unwrap().to_string();
    let out = p("out.json");
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            vec![p("missing-dir"), p("ok.txt")],
            vec![p("missing-dir"), "does not exist".into()],
        ),
        (
            vec![no_weights.to_str().unwrap().into(), p("ok.txt")],
            vec!["no-weights".into(), "no model.safetensors".into()],
        ),
        (
            vec![tiny.clone(), p("empty.txt")],
            vec![p("empty.txt"), "empty".into()],
        ),
        (
            vec![tiny.clone(), p("latin1.txt")],
            vec![
                p("latin1.txt"),
                "line 2 is not UTF-8".into(),
                "column 4".into(),
            ],
        ),
        (vec![tiny.clone(), p("missing.txt")], vec![p("missing.txt")]),
        (
            vec![run_dir.to_str().unwrap().into(), p("ok.txt")],
            vec!["a-run".into(), "an engram run".into()],
        ),
        (
            vec![max_pool.to_str().unwrap().into(), p("ok.txt")],
            vec!["1_Pooling/config.json".into(), "--pooling".into()],
        ),
    ];
    for (args, want) in cases {
        let (code, log) = crate::util::run(&["embed", &args[0], "--text", &args[1], "--out", &out]);
        assert_eq!(code, 2, "{args:?}: {log}");
        assert!(!log.contains("panicked"), "{log}");
        for w in want {
            assert!(log.contains(&w), "{args:?}: `{w}` not in {log}");
        }
    }
    let (code, log) = crate::util::run(&[
        "embed",
        &tiny,
        "--text",
        &p("ok.txt"),
        "--out",
        &out,
        "--max-len",
        "17",
    ]);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("--max-len 17") && log.contains("16"), "{log}");
    let (code, log) = crate::util::run(&[
        "embed",
        &tiny,
        "--text",
        &p("ok.txt"),
        "--out",
        &p("exists.json"),
    ]);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("exists.json") && log.contains("--overwrite"),
        "{log}"
    );
    assert!(!tmp.path().join("out.json").exists());
}

/// The real all-MiniLM-L6-v2 equals transformers' BertModel (bench/reference/minilm.py's
/// tests/data/minilm-reference.json) within 1e-4: its tokenizer's ids at max_len 128, the last
/// hidden state (the first 16 dimensions of every non-pad token, every token's row norm, and
/// every value when the reference was written with `--full`), and through `engram embed` the
/// mean-pooled embeddings, plain and L2-normalised. Needs the model:
/// `ENGRAM_MINILM=DIR` (config.json, model.safetensors, tokenizer.json, 1_Pooling);
/// `ENGRAM_MINILM_REFERENCE=FILE` checks another reference file.
#[test]
fn minilm_equals_transformers() {
    let Some(dir) = std::env::var_os("ENGRAM_MINILM").map(PathBuf::from) else {
        eprintln!("ENGRAM_MINILM unset: MiniLM's equality with transformers is not checked");
        return;
    };
    let file = std::env::var_os("ENGRAM_MINILM_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| tiny_dir().with_file_name("minilm-reference.json"));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let texts = texts_of(&r);
    let tok = engram::core::data::tokenizer::TextTokenizer::load(&dir.join("tokenizer.json"), 128)
        .unwrap();
    let ids: Vec<i64> = tok
        .encode(&texts)
        .unwrap()
        .iter()
        .map(|&i| i64::from(i))
        .collect();
    assert_eq!(
        ids.iter().map(|&i| i as f64).collect::<Vec<_>>(),
        floats(&r["ids"])
    );
    let device = Device::flex();
    let (model, report) = hf::from_dir(&dir, 2, Pooling::Mean, 0, &device).unwrap();
    assert_eq!(report.loaded, 5 + 6 * 16);
    let rows: Vec<Vec<i64>> = ids.chunks(128).map(<[i64]>::to_vec).collect();
    let (hidden, _) = last_hidden(&model, ids_input(&rows, &device));
    let got = hidden.into_data().try_to_vec::<f32>().unwrap();
    let (mut slice, mut norms, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for (s, n) in floats(&r["lengths"]).iter().enumerate() {
        for t in 0..*n as usize {
            let row: Vec<f64> = got[(s * 128 + t) * 384..][..384]
                .iter()
                .map(|&v| v as f64)
                .collect();
            slice.extend_from_slice(&row[..16]);
            norms.push(row.iter().map(|v| v * v).sum::<f64>().sqrt());
            full.extend(row);
        }
    }
    let slice = max_abs(&slice, &floats(&r["hidden_slice"]));
    let norms = max_abs(&norms, &floats(&r["row_norms"]));
    let full = (!r["last_hidden_state"].is_null())
        .then(|| max_abs(&full, &floats(&r["last_hidden_state"])));
    let v = embed(&dir, &texts, &["--max-len", "128"]);
    assert_eq!(
        (v["pooling"].as_str(), v["dim"].as_u64()),
        (Some("mean"), Some(384))
    );
    let mean = max_abs(&floats(&v["embeddings"]), &floats(&r["mean"]));
    let v = embed(&dir, &texts, &["--normalize"]);
    let want: Vec<f64> = floats(&r["mean"])
        .chunks(384)
        .zip(floats(&r["mean_norms"]))
        .flat_map(|(m, n)| m.iter().map(move |x| x / n).collect::<Vec<_>>())
        .collect();
    let normalized = max_abs(&floats(&v["embeddings"]), &want);
    println!(
        "MiniLM vs transformers: max abs hidden slice {slice:.3e}, row norms {norms:.3e}, \
         every value {full:?}, embed mean {mean:.3e}, normalised {normalized:.3e}"
    );
    for worst in [slice, norms, mean, normalized, full.unwrap_or(0.0)] {
        assert!(worst <= 1e-4, "{worst}");
    }
}

/// Replay's `classifier = "ncm"` on BERT (it was silently ignored: only an MLP's head was
/// wrapped): the class means replace the pooled head, over the sentence vectors the head's own
/// pooling gives. With each of three sentences its own class, its mean is its own normalised
/// vector `f` (‖f‖ = 1), so each is predicted as itself with logit `2 f·μ − ‖μ‖² = 2 − 1 = 1`
/// (the others below 1); training still goes through the linear head, unchanged.
#[test]
fn ncm_classifies_bert_by_the_means_of_its_pooled_vectors() {
    use engram::strategies::ncm::{self, NcmHead};
    let device = Device::flex();
    let mut rng = engram::core::rng::stream(0, "init", 0, 0);
    for pooling in [Pooling::Cls, Pooling::Mean] {
        let model = bert::build_bert(&small_shape(pooling, 0.0), 3, &mut rng, &device);
        let x = ids_input(
            &[vec![2, 5, 7, 0], vec![3, 9, 11, 12], vec![4, 4, 6, 0]],
            &device,
        );
        let (hidden, mask) = last_hidden(&model, x.clone());
        let features = vec_of(bert::pool(hidden, &mask, pooling));
        let means = ncm::class_means(&features, features.len() / 3, &[0, 1, 2], 3);
        let linear = vec_of(model.forward(Activation::Flat(x.clone()), &ForwardCtx::default()));
        assert!(ncm::supports(&model));
        let wrapped = ncm::with_means(model, means);
        let head = wrapped.blocks().last().unwrap();
        assert!(head.downcast_ref::<NcmHead>().is_some(), "{pooling:?}");
        assert_eq!(ncm::pooling_of(&wrapped), pooling);
        let eval =
            vec_of(wrapped.forward(Activation::Flat(x.clone()), &ForwardCtx::evaluation(None)));
        for (i, row) in eval.chunks(3).enumerate() {
            assert!((row[i] - 1.0).abs() < 1e-5, "{pooling:?} row {i}: {row:?}");
            for (c, &v) in row.iter().enumerate() {
                assert!(c == i || v < row[i], "{pooling:?} row {i}: {row:?}");
            }
        }
        let train = vec_of(wrapped.forward(Activation::Flat(x), &ForwardCtx::default()));
        assert_eq!(train, linear, "{pooling:?}");
    }
}
