//! `engram export --peft` and `[model] adapter` (issue #30): a tiny BERT (tests/data/bert-tiny)
//! trained with LoRA on query/value and its attention output norms in full, exported as a
//! Hugging Face PEFT adapter directory whose keys, shapes and config are the ones PEFT itself
//! writes (tests/data/peft-keys.json, from bench/reference/peft_roundtrip.py), whose factors
//! are engram's transposed (the same weight update), and which `[model] adapter` loads back to
//! the same logits; and an adapter PEFT itself saved (tests/data/peft-tiny-adapter) loads to
//! PEFT's outputs. With `ENGRAM_PEFT_PYTHON` (a Python with torch, transformers and peft)
//! PEFT itself loads the export and its logits are compared (≤ 1e-4); `ENGRAM_PEFT_BASE=DIR`
//! runs the same on another BERT directory (MiniLM).

use crate::util::{run, run_quiet};
use engram::core::burn::tensor::{Device, Tensor, TensorData};
use engram::core::model::bert::peft;
use engram::core::model::{Activation, ForwardCtx, Model};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The BERT directory the run starts from: `ENGRAM_PEFT_BASE`, else the tiny one.
fn base() -> PathBuf {
    std::env::var_os("ENGRAM_PEFT_BASE").map_or_else(|| data("bert-tiny"), PathBuf::from)
}

/// A two-class corpus, and a config training `base()` with LoRA (rank 2, α 4, the attention
/// output norms in full) and mean pooling for one epoch; `model_extra` and `lora_extra` are
/// appended to the `[model]` and `[[memory]]` sections (a `pooling` in `model_extra` replaces
/// the mean).
fn config(dir: &Path, name: &str, model_extra: &str, lora_extra: &str) -> PathBuf {
    for (class, words) in [
        ("business", "shares fell as the bank reported"),
        ("sport", "the team won the match"),
    ] {
        let folder = dir.join("corpus").join(class);
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..8 {
            std::fs::write(folder.join(format!("{i}.txt")), format!("{words} {i}")).unwrap();
        }
    }
    let cfg = dir.join(name);
    std::fs::write(
        &cfg,
        format!(
            "[run]\nseed = 0\n[data]\nformat = \"text-folder\"\npath = \"corpus\"\n\
             scenario = \"class-incremental\"\ntasks = 1\nclasses_per_task = 2\n\
             [data.options]\ntokenizer = \"{tok}\"\nmax_len = 12\ntest_fraction = 0.5\n\
             [model]\ntype = \"bert\"\ninit = \"{init}\"\n{pooling}{model_extra}\
             [optimizer]\ntype = \"adamw\"\nlr = 0.01\n[train]\nepochs = 1\nbatch_size = 4\n\
             [[memory]]\ntype = \"lora\"\nrank = 2\nalpha = 4.0\ntrain = [\"norm1\"]\n{lora_extra}",
            tok = base().join("tokenizer.json").display(),
            init = base().display(),
            pooling = if model_extra.contains("pooling") {
                ""
            } else {
                "pooling = \"mean\"\n"
            },
        ),
    )
    .unwrap();
    cfg
}

/// Token id rows `[3, 12]`, padded with 0, within bert-tiny's vocabulary of 99.
fn probe_ids() -> Vec<Vec<i64>> {
    vec![
        vec![2, 40, 41, 42, 43, 44, 3, 0, 0, 0, 0, 0],
        vec![2, 50, 61, 72, 83, 94, 15, 26, 37, 48, 59, 3],
        vec![2, 7, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
}

/// `model`'s logits `[rows, classes]` on `ids`, evaluation mode.
fn logits(model: &Model, ids: &[Vec<i64>]) -> Vec<f32> {
    let flat: Vec<f32> = ids.iter().flatten().map(|&i| i as f32).collect();
    let x = Tensor::<2>::from_data(
        TensorData::new(flat, [ids.len(), ids[0].len()]),
        &Device::flex(),
    );
    model
        .forward(Activation::Flat(x), &ForwardCtx::evaluation(None))
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

/// The checkpoint's model.
fn checkpoint_model(out: &Path) -> Model {
    engram::core::train::trainer::load_checkpoint_model(out, &engram::registry(), None)
        .unwrap()
        .1
}

fn params(model: &Model) -> HashMap<String, Vec<f32>> {
    model
        .param_values()
        .into_iter()
        .map(|(i, t)| {
            (
                i.path,
                t.into_data().convert::<f32>().try_into_vec().unwrap(),
            )
        })
        .collect()
}

#[test]
fn peft_export_has_peft_keys_and_loads_back_to_the_same_logits() {
    round_trip("pooling = \"mean\"\n", "");
    round_trip("pooling = \"cls\"\n", "");
    // engram's activation-path adapters (with PEFT's lora_dropout) export to the same keys.
    round_trip(
        "pooling = \"mean\"\n",
        "path = \"activation\"\ndropout = 0.1\n",
    );
}

/// The export's keys, config and factors, `[model] adapter`'s exact round trip and, with
/// `ENGRAM_PEFT_PYTHON`, PEFT's logits, for a run whose `[model]` has `pooling` and whose
/// `lora` entry has `lora_extra`.
fn round_trip(pooling: &str, lora_extra: &str) {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "run.toml", pooling, lora_extra);
    let out = d.path().join("out");
    let (code, log) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let dir = d.path().join("adapter");
    let (code, log) = run(&[
        "export",
        out.to_str().unwrap(),
        "--peft",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");

    // Keys, shapes and config: PEFT's own (bert-tiny only: the fixture is its geometry).
    let tensors = peft::read_safetensors(&dir.join(peft::ADAPTER_FILE)).unwrap();
    let written: Value =
        serde_json::from_slice(&std::fs::read(dir.join(peft::CONFIG_FILE)).unwrap()).unwrap();
    if std::env::var_os("ENGRAM_PEFT_BASE").is_none() {
        let fixture: Value =
            serde_json::from_slice(&std::fs::read(data("peft-keys.json")).unwrap()).unwrap();
        let keys: serde_json::Map<String, Value> = tensors
            .iter()
            .map(|(k, (shape, _))| (k.clone(), serde_json::json!(shape)))
            .collect();
        assert_eq!(Value::Object(keys), fixture["keys"]);
        for (field, want) in fixture["config"].as_object().unwrap() {
            let got = &written[field];
            if field == "lora_dropout" && !lora_extra.is_empty() {
                assert_eq!(got.as_f64(), Some(0.1), "{field}");
                continue;
            }
            match (got.as_f64(), want.as_f64()) {
                (Some(g), Some(w)) => assert_eq!(g, w, "{field}"),
                _ => assert_eq!(got, want, "{field}"),
            }
        }
        assert_eq!(
            written["base_model_name_or_path"]
                .as_str()
                .map(PathBuf::from),
            Some(std::fs::canonicalize(base()).unwrap())
        );
    }

    // The head, beside it: its pooling, and PyTorch's Linear layout.
    let head: Value =
        serde_json::from_slice(&std::fs::read(dir.join(peft::HEAD_CONFIG)).unwrap()).unwrap();
    assert!(
        pooling.contains(head["pooling"].as_str().unwrap()),
        "{head}"
    );
    assert_eq!(
        (head["classes"].as_u64(), head["pad_token_id"].as_u64()),
        (Some(2), Some(0))
    );
    let head_tensors = peft::read_safetensors(&dir.join(peft::HEAD_FILE)).unwrap();
    assert_eq!(
        head_tensors["weight"].0,
        [2, head["hidden"].as_u64().unwrap() as usize]
    );

    // The factors are engram's transposed: PEFT's update (α/r)·lora_B·lora_A [d_out, d_in] is
    // engram's (α/r)·A·B [d_in, d_out] transposed, and it is not zero (B trained).
    let model = checkpoint_model(&out);
    let p = params(&model);
    let scale = 4.0 / 2.0;
    let adapted = peft::adapted(&model).unwrap();
    let q = adapted
        .iter()
        .find(|x| x.module == "blocks.1.attention.query")
        .unwrap();
    assert_eq!(
        q.a.starts_with("adapters."),
        !lora_extra.is_empty(),
        "{}",
        q.a
    );
    let (a, b) = (&p[&q.a], &p[&q.b]);
    let key =
        |f: &str| format!("base_model.model.encoder.layer.0.attention.self.query.lora_{f}.weight");
    let (sa, la) = &tensors[&key("A")];
    let (sb, lb) = &tensors[&key("B")];
    let (r, d_in, d_out) = (sa[0], sa[1], sb[0]);
    assert_eq!((r, sb[1]), (2, 2));
    let mut worst = 0f32;
    let mut largest = 0f32;
    for i in 0..d_in {
        for o in 0..d_out {
            let engram: f32 = (0..r).map(|k| a[i * r + k] * b[k * d_out + o]).sum::<f32>() * scale;
            let peft: f32 = (0..r)
                .map(|k| lb[o * r + k] * la[k * d_in + i])
                .sum::<f32>()
                * scale;
            worst = worst.max((engram - peft).abs());
            largest = largest.max(engram.abs());
        }
    }
    assert!(worst <= 1e-7 && largest > 1e-4, "{worst} {largest}");
    // The saved norms are the trained ones.
    let (_, norm) = &tensors["base_model.model.encoder.layer.1.attention.output.LayerNorm.weight"];
    assert_eq!(norm, &p["blocks.2.norm1.gamma"]);

    // `[model] adapter` loads it back into a fresh run's adapters: the same logits, exactly.
    let ids = probe_ids();
    let want = logits(&model, &ids);
    let back = config(
        d.path(),
        "back.toml",
        &format!("{pooling}adapter = \"{}\"\n", dir.display()),
        lora_extra,
    );
    let loaded = engram::core::config::LoadedConfig::load(&back, &[]).unwrap();
    let prepared = engram::core::train::trainer::prepare(loaded, &engram::registry()).unwrap();
    let (fresh, _) = prepared.build_initial_model(&prepared.device).unwrap();
    assert_eq!(logits(&fresh, &ids), want);

    // PEFT itself on the export, when a Python with peft is named.
    let probe = d.path().join("probe.json");
    std::fs::write(
        &probe,
        serde_json::json!({ "ids": ids, "logits": want.chunks(2).collect::<Vec<_>>() }).to_string(),
    )
    .unwrap();
    let Some(python) = std::env::var_os("ENGRAM_PEFT_PYTHON") else {
        eprintln!("ENGRAM_PEFT_PYTHON unset: PEFT's logits on the export are not compared");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/reference/peft_roundtrip.py");
    let o = std::process::Command::new(python)
        .arg(script)
        .args(["compare", dir.to_str().unwrap(), probe.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    println!("{text}");
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Bad requests are usage or config errors (exit 2) that say what to do: both targets, a
/// layout with --peft, a run without adapters, a non-empty directory, adapters merged into the
/// base or on an embedding (no directory left behind); an adapter whose rank, layers,
/// scaling (rsLoRA) or directory do not match the run, or whose head was trained on another
/// pooling or lost its engram_head.json, at `[model] adapter`'s line. A run that loads an
/// adapter names it in its summary.
#[test]
fn peft_export_and_adapter_refuse_bad_requests() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "run.toml", "", "");
    let out = d.path().join("out");
    let (code, log) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let o = out.to_str().unwrap();
    let dir = d.path().join("adapter");
    let a = dir.to_str().unwrap();
    let st = d.path().join("m.safetensors");
    let s = st.to_str().unwrap();
    for (args, says) in [
        (
            vec!["export", o, "--peft", a, "--safetensors", s],
            "cannot be used with",
        ),
        (
            vec!["export", o, "--peft", a, "--layout", "pytorch"],
            "--safetensors",
        ),
        (vec!["export", o], "--safetensors"),
    ] {
        let (code, log) = run(&args);
        assert_eq!(code, 2, "{args:?}: {log}");
        assert!(log.contains(says), "{args:?}: {log}");
    }
    assert!(!dir.exists());
    let (code, log) = run(&["export", o, "--peft", a]);
    assert_eq!(code, 0, "{log}");
    let (code, log) = run(&["export", o, "--peft", a]);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("not empty") && log.contains("--overwrite"),
        "{log}"
    );
    let (code, log) = run(&["export", o, "--peft", a, "--overwrite"]);
    assert_eq!(code, 0, "{log}");
    // A run that loads it names it in its summary's `initial` row, beside the base.
    let c = config(d.path(), "loads.toml", &format!("adapter = \"{a}\"\n"), "");
    let loads = d.path().join("loads");
    let (code, summary) = run(&["run", c.to_str().unwrap(), "--out", loads.to_str().unwrap()]);
    assert_eq!(code, 0, "{summary}");
    assert!(
        summary.contains(&format!("model.safetensors with the adapter {a})")),
        "{summary}"
    );

    // A run without adapters: nothing to write, and no directory left behind.
    let plain = d.path().join("plain.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let cut = text.find("[[memory]]").unwrap();
    std::fs::write(&plain, &text[..cut]).unwrap();
    let plain_out = d.path().join("plain");
    let (code, log) = run_quiet(&plain, &plain_out, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let none = d.path().join("none");
    let (code, log) = run(&[
        "export",
        plain_out.to_str().unwrap(),
        "--peft",
        none.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("no LoRA adapters") && log.contains("--safetensors"),
        "{log}"
    );
    assert!(!none.exists());

    // Adapters PEFT's BertModel adapter cannot hold, or on a base that moved: refused.
    for (name, lora, says) in [
        ("merged.toml", "merge = \"task\"\n", "merge = \"task\""),
        (
            "embedding.toml",
            "targets = [\"word\"]\n",
            "an embedding or the head",
        ),
    ] {
        let c = config(d.path(), name, "", lora);
        let run_out = d.path().join(name.trim_end_matches(".toml"));
        let (code, log) = run_quiet(&c, &run_out, &[], &[]);
        assert_eq!(code, 0, "{log}");
        let (code, log) = run(&[
            "export",
            run_out.to_str().unwrap(),
            "--peft",
            none.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{name}: {log}");
        assert!(
            log.contains(says) && log.contains("--safetensors"),
            "{name}: {log}"
        );
        assert!(!none.exists(), "{name}");
    }

    // `[model] adapter` that does not fit the run: positioned at its line (line 14).
    let adapter = format!("adapter = \"{a}\"\n");
    for (name, model, lora, says) in [
        ("rank.toml", adapter.as_str(), "rank = 4\n", &["r = 2"][..]),
        (
            "targets.toml",
            adapter.as_str(),
            "targets = [\"query\"]\n",
            &["does not adapt"],
        ),
        // The hint gives the file's layers in engram's names, which `targets` takes.
        (
            "more.toml",
            adapter.as_str(),
            "targets = [\"query\", \"value\", \"key\"]\n",
            &[
                "no lora_A",
                "targets = [\"blocks.1.attention.query\", \"blocks.1.attention.value\", \"blocks.2.",
            ],
        ),
        (
            "missing.toml",
            "adapter = \"nowhere\"\n",
            "",
            &["no such directory"],
        ),
    ] {
        // `rank = 4` after `rank = 2` would be a duplicate key: replace it instead.
        let c = config(
            d.path(),
            name,
            model,
            if lora.starts_with("rank") { "" } else { lora },
        );
        if lora.starts_with("rank") {
            let t = std::fs::read_to_string(&c)
                .unwrap()
                .replace("rank = 2", "rank = 4");
            std::fs::write(&c, t).unwrap();
        }
        let (code, log) = run(&["validate", c.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {log}");
        assert!(
            log.contains(&format!("{name}:17:")) && says.iter().all(|s| log.contains(s)),
            "{name}: {log}"
        );
    }
    // A copy of the export's `files` (edited by `edit`) named `name` is refused at the
    // adapter's line with a message containing `says`.
    let refused_copy = |name: &str, files: &[&str], edit: &dyn Fn(&Path), says: &str| {
        let copy = d.path().join(name);
        std::fs::create_dir(&copy).unwrap();
        for f in files {
            std::fs::copy(dir.join(f), copy.join(f)).unwrap();
        }
        edit(&copy);
        let toml = format!("{name}.toml");
        let adapter = format!("adapter = \"{}\"\n", copy.display());
        let c = config(d.path(), &toml, &adapter, "");
        let (code, log) = run(&["validate", c.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {log}");
        assert!(
            log.contains(&format!("{toml}:17:")) && log.contains(says),
            "{name}: {log}"
        );
    };
    // An rsLoRA adapter scales by α/√r, which engram's adapter does not.
    let rslora = |copy: &Path| {
        let file = copy.join(peft::CONFIG_FILE);
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.replace("\"use_rslora\": false", "\"use_rslora\": true");
        std::fs::write(file, text).unwrap();
    };
    refused_copy(
        "rs",
        &[peft::ADAPTER_FILE, peft::CONFIG_FILE],
        &rslora,
        "use_rslora true: engram loads plain LoRA adapters (peft_type \"LORA\", no DoRA or rsLoRA",
    );
    // engram's head read from other pooled features than it was trained on would give another
    // model's logits: a head trained with mean pooling under `pooling = "cls"`, and a head
    // whose engram_head.json is gone (its pooling unknown), are refused.
    let c = config(
        d.path(),
        "cls.toml",
        &format!("{adapter}pooling = \"cls\"\n"),
        "",
    );
    let (code, log) = run(&["validate", c.to_str().unwrap()]);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("cls.toml:16:") && log.contains("pooling \"mean\""),
        "{log}"
    );
    let files = [peft::ADAPTER_FILE, peft::CONFIG_FILE, peft::HEAD_FILE];
    refused_copy("blind", &files, &|_| {}, "pooling is unknown");
}

/// Theirs reach engram: the random adapter PEFT saved for bert-tiny
/// (tests/data/peft-tiny-adapter, factors and saved norms all moved from the base), loaded by
/// `[model] adapter` into a run's `lora` adapters, gives PEFT's mean-pooled last hidden state
/// (tests/data/peft-keys.json's `reference`, from bench/reference/peft_roundtrip.py) within
/// 1e-5.
#[test]
fn an_adapter_peft_saved_loads_to_peft_outputs() {
    use engram::core::model::bert::{Pooling, pool};
    if std::env::var_os("ENGRAM_PEFT_BASE").is_some() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let adapter = data("peft-tiny-adapter");
    let cfg = config(
        d.path(),
        "theirs.toml",
        &format!("adapter = \"{}\"\n", adapter.display()),
        "",
    );
    let fixture: Value =
        serde_json::from_slice(&std::fs::read(data("peft-keys.json")).unwrap()).unwrap();
    let r = &fixture["reference"];
    let ids: Vec<Vec<i64>> = serde_json::from_value(r["ids"].clone()).unwrap();
    assert_eq!(ids, probe_ids());
    let want: Vec<f64> = r["mean"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
        .collect();
    // The fresh run's model from `cfg`: its mean-pooled encoder output's largest difference
    // from PEFT's.
    let worst_of = |cfg: &Path| {
        let loaded = engram::core::config::LoadedConfig::load(cfg, &[]).unwrap();
        let prepared = engram::core::train::trainer::prepare(loaded, &engram::registry()).unwrap();
        let (model, _) = prepared.build_initial_model(&prepared.device).unwrap();
        let flat: Vec<f32> = ids.iter().flatten().map(|&i| i as f32).collect();
        let x = Tensor::<2>::from_data(TensorData::new(flat, [3, 12]), &Device::flex());
        let n = model.num_blocks();
        let Activation::Tokens { hidden, mask, .. } =
            model.forward_range(0..n - 1, Activation::Flat(x), &ForwardCtx::evaluation(None))
        else {
            panic!("the encoder gives tokens");
        };
        let got = pool(hidden, &mask, Pooling::Mean)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap();
        assert_eq!(got.len(), want.len());
        got.iter()
            .zip(&want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0f64, f64::max)
    };
    let worst = worst_of(&cfg);
    // Without the adapter the vectors differ: the check can fail.
    let off = worst_of(&config(d.path(), "base.toml", "", ""));
    println!(
        "PEFT's own adapter in engram: max abs pooled difference {worst:.3e} (without it {off:.3e})"
    );
    assert!(worst <= 1e-5 && off > 1e-2, "{worst} {off}");
}
