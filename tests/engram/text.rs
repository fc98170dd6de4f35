//! Text through the real binary (issue #35): a `text-folder` corpus tokenized by the committed
//! tiny WordPiece tokenizer (`tests/data/tokenizer-tiny/`), trained on by a small `bert`; bad
//! documents as bad input (exit 2) naming the file.

use crate::util::run_quiet;
use std::path::Path;

fn tokenizer() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-tiny/tokenizer.json")
}

/// A corpus of 2 classes × 6 documents under `dir/corpus`, the tokenizer beside the config
/// (named relatively, as a user would), and the config; returns the config's path.
pub(crate) fn setup(dir: &Path) -> std::path::PathBuf {
    for (class, words) in [
        ("business", "shares fell as the bank reported profits"),
        ("sport", "the striker scored and the team won"),
    ] {
        let folder = dir.join("corpus").join(class);
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..6 {
            std::fs::write(folder.join(format!("{i}.txt")), format!("{words} {i}")).unwrap();
        }
    }
    std::fs::copy(tokenizer(), dir.join("tok.json")).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "[run]\nseed = 0\n[data]\nformat = \"text-folder\"\npath = \"corpus\"\n\
         scenario = \"class-incremental\"\ntasks = 1\nclasses_per_task = 2\n\
         [data.options]\ntokenizer = \"tok.json\"\nmax_len = 12\ntest_fraction = 0.5\n\
         [model]\ntype = \"bert\"\nlayers = 1\nhidden = 16\nheads = 2\nffn = 32\nvocab = 200\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.1\n[train]\nepochs = 1\nbatch_size = 4\n",
    )
    .unwrap();
    cfg
}

#[test]
fn a_bert_trains_on_a_text_folder_and_bad_documents_are_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path());
    // A Latin-1 byte: read lossily, with a warning that counts it.
    std::fs::write(
        d.path().join("corpus/business/latin1.txt"),
        b"caf\xe9 shares",
    )
    .unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 document(s) are not valid UTF-8"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/report.json")).unwrap())
            .unwrap();
    assert_eq!(
        report["tasks"][0]["class_names"],
        serde_json::json!(["business", "sport"])
    );
    // An empty document: exit 2, the file named.
    std::fs::write(d.path().join("corpus/sport/empty.txt"), "\n  \n").unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out2"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("sport/empty.txt") && out.contains("empty"),
        "{out}"
    );
    // An unknown [data.options] key: refused with its line.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::remove_file(d.path().join("corpus/sport/empty.txt")).unwrap();
    std::fs::write(
        &cfg,
        text.replace("max_len = 12", "max_len = 12\nmaxlen = 3"),
    )
    .unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out3"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("run.toml:12:") && out.contains("maxlen"),
        "{out}"
    );
}

/// The corpus of [`setup`] dealt into 2 tasks of one class each (3 training and 3 test
/// documents a class at `test_fraction` 0.5), with `forgetting` added; returns the config.
fn two_tasks(dir: &Path, forgetting: &str) -> std::path::PathBuf {
    let cfg = setup(dir);
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "tasks = 1\nclasses_per_task = 2",
        "tasks = 2\nclasses_per_task = 1",
    );
    std::fs::write(&cfg, format!("{text}{forgetting}")).unwrap();
    cfg
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

/// Every strategy that stores or selects samples runs on token data with a tiny BERT: the run
/// finishes with a 2 × 2 accuracy matrix of accuracies, and report.json's `memory.stored`
/// counts each stored sample's input as `max_len × 4` bytes of `uint32` ids (12 ids: 48 bytes)
/// plus the stored logits (`2 classes × 4` bytes a sample for DER++ and logit replay).
#[test]
fn every_sample_storing_strategy_runs_on_token_ids_and_counts_their_bytes() {
    // (strategy's name in the report, its [[forgetting]] entry, stored f32 logits per sample)
    let cases = [
        (
            "replay",
            "type = \"replay\"\ncapacity = 4\nmin_per_task = 1\n",
            2,
        ),
        (
            "replay",
            "type = \"replay\"\ncapacity = 4\nmin_per_task = 1\nselection = \"class_balanced\"\n",
            2,
        ),
        (
            "replay",
            "type = \"replay\"\ncapacity = 4\nmin_per_task = 1\nselection = \"herding\"\n",
            2,
        ),
        ("derpp", "type = \"derpp\"\ncapacity = 4\n", 2),
        ("gdumb", "type = \"gdumb\"\ncapacity = 4\nepochs = 1\n", 0),
        (
            "agem",
            "type = \"agem\"\ncapacity = 4\nmemory_batch = 2\n",
            0,
        ),
        ("er-ace", "type = \"er-ace\"\ncapacity = 4\n", 0),
        // A memory budget's probes split and time batches of replayed ids.
        (
            "replay",
            "type = \"replay\"\ncapacity = 4\nmin_per_task = 1\n[[memory]]\ntype = \"budget\"\nbudget = \"64 MiB\"\n",
            2,
        ),
        // Replayed token ids through segment checkpointing and mixed precision: the ids stay
        // Int ids (AMP casts float inputs only).
        (
            "derpp",
            "type = \"derpp\"\ncapacity = 4\n[[memory]]\ntype = \"checkpoint\"\n[[memory]]\ntype = \"amp\"\n",
            2,
        ),
    ];
    for (k, (name, entry, logits)) in cases.into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let cfg = two_tasks(d.path(), &format!("[[forgetting]]\n{entry}"));
        let out = d.path().join("out");
        let (code, text) = run_quiet(&cfg, &out, &[], &[]);
        assert_eq!(code, 0, "case {k} ({entry}): {text}");
        let r = report(&out);
        let m = r["accuracy_matrix"].as_array().unwrap();
        assert_eq!(m.len(), 2, "case {k}");
        for (i, row) in m.iter().enumerate() {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), 2, "case {k}");
            for a in &row[..=i] {
                let a = a.as_f64().unwrap();
                assert!((0.0..=1.0).contains(&a), "case {k}: accuracy {a}");
            }
        }
        assert_eq!(
            r["normalization"],
            "not at all: token ids (uint32) reach the model as Int ids, as the tokenizer gave them"
        );
        let s = &r["memory"]["stored"][name];
        // 6 training documents seen, a memory of 4.
        assert_eq!(s["samples"], 4, "case {k}: {s}");
        assert_eq!(s["sample_bytes"], 48, "case {k}: {s}");
        assert_eq!(s["input_bytes"], 4 * 12 * 4, "case {k}: {s}");
        assert_eq!(s["logit_bytes"], 4 * logits * 4, "case {k}: {s}");
        assert_eq!(
            s["total_bytes"],
            4 * 12 * 4 + 4 * logits * 4,
            "case {k}: {s}"
        );
        assert_eq!(s["dtype"], "token ids (uint32)", "case {k}: {s}");
    }
}

/// A permutation of token ids is another text, not a new domain: the domain-incremental
/// scenario is refused for token data at its line, before anything is written.
#[test]
fn a_domain_incremental_stream_of_token_ids_is_refused_at_its_line() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path());
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "scenario = \"class-incremental\"\ntasks = 1\nclasses_per_task = 2",
        "scenario = \"domain-incremental\"\ntasks = 2",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = d.path().join("out");
    let (code, text) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("run.toml:6:") && text.contains("token ids"),
        "{text}"
    );
    assert!(!out.exists());
}

/// A replay memory of text holds the documents' own ids: after the first task, each stored
/// sample gathers to a batch row of `Int` ids equal to the tiny tokenizer's encoding of one
/// of that task's documents (`shares fell as the bank reported profits {i}`), and its size is
/// 12 ids × 4 bytes a sample.
#[test]
fn a_replay_memory_of_text_holds_the_documents_ids() {
    use engram::core::data::stream::Part;
    use engram::core::strategy::{ForgettingStrategy, TaskContext, TaskInfo};
    use engram::strategies::replay::{Replay, ReplayParams};
    let d = tempfile::tempdir().unwrap();
    let path = two_tasks(d.path(), "");
    let cfg = engram::core::config::LoadedConfig::load(&path, &[]).unwrap();
    let p = engram::core::train::trainer::prepare(cfg, &engram::registry()).unwrap();
    let ad = p.device.clone().autodiff();
    let mut model = p.build_model(&ad).unwrap();
    let mut replay = Replay::new(
        ReplayParams {
            capacity: 4,
            min_per_task: 1,
            ..ReplayParams::default()
        },
        2,
        None,
    )
    .unwrap();
    let task = TaskInfo {
        index: 0,
        num_tasks: 2,
        classes: p.stream.tasks[0].classes.clone(),
        train_samples: p.stream.tasks[0].train.len(),
        joint: false,
    };
    let mut cx = TaskContext {
        model: &mut model,
        device: &ad,
        task: &task,
        stream: &p.stream,
        seed: 0,
        final_train_loss: 0.0,
    };
    replay.after_task(&mut cx).unwrap();
    let refs: Vec<_> = replay.buffers().iter().flatten().map(|s| s.r).collect();
    // Task 0 (business) has 3 training documents, all within the memory of 4.
    assert_eq!(refs.len(), 3);
    let tok = engram::core::data::tokenizer::TextTokenizer::load(&tokenizer(), 12).unwrap();
    let texts: Vec<String> = (0..6)
        .map(|i| format!("shares fell as the bank reported profits {i}"))
        .collect();
    let encoded = tok.encode(&texts).unwrap();
    let documents: Vec<&[u32]> = encoded.chunks(12).collect();
    let b = p.stream.batch(&refs, Part::Train, 0, &p.device);
    assert!(b.x.is_ids());
    assert_eq!(b.x.dims(), [3, 12]);
    let rows = b.x.to_i64();
    for (row, r) in rows.chunks(12).zip(&refs) {
        let row: Vec<u32> = row.iter().map(|&i| i as u32).collect();
        assert_eq!(
            Some(row.as_slice()),
            p.stream.dataset.train.token_row(r.index as usize)
        );
        assert!(
            documents.contains(&row.as_slice()),
            "{row:?} is no business document's ids"
        );
        // [CLS] first, then the text's ids, [SEP] and padding.
        assert_eq!(row[0], 2);
    }
    let mut rows: Vec<u32> = refs.iter().map(|r| r.index).collect();
    rows.sort_unstable();
    rows.dedup();
    assert_eq!(rows.len(), 3, "three different documents");
    let s = replay.stored_samples(&p.stream).unwrap();
    assert_eq!((s.samples, s.sample_bytes, s.input_bytes), (3, 48, 3 * 48));
    assert_eq!(s.dtype, "token ids (uint32)");
}

/// A model that does not fit the data is refused before anything runs, at its `[model]` line,
/// exit 2, never a panic: token ids past the embedding's table (the tiny tokenizer's ids reach
/// 100 and more; a BERT of 20 ids), and a decoder language model, whose outputs are its
/// vocabulary's next-token logits, not the data's 2 classes.
#[test]
fn a_model_that_does_not_fit_the_data_is_refused_at_its_line() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    let vocab_line = text.lines().position(|l| l == "vocab = 200").unwrap() + 1;
    std::fs::write(&cfg, text.replace("vocab = 200", "vocab = 20")).unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("run.toml:{vocab_line}:"))
            && out.contains("outside the model's vocabulary of 20 ids")
            && !out.contains("panicked"),
        "{out}"
    );
    assert!(!d.path().join("out/report.json").exists());
    std::fs::write(
        &cfg,
        text.replace(
            "type = \"bert\"\nlayers = 1\nhidden = 16\nheads = 2\nffn = 32\nvocab = 200",
            "type = \"llama\"\nlayers = 1\nhidden = 16\nheads = 2\nkv_heads = 1\nffn = 32\nvocab = 200",
        ),
    )
    .unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out2"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        // One line further: the llama config has kv_heads above vocab.
        out.contains(&format!("run.toml:{}:", vocab_line + 1))
            && out.contains("the model gives 200 outputs a sample, the data has 2 classes"),
        "{out}"
    );
}

/// `engram data stream` writes the rows a run trains on in the run's order: each epoch a
/// permutation of the task's training rows, with their ids `[max_len]`; and the first step's
/// loss the run logs (`log_every = 1`, no dropout) is the starting model's mean cross-entropy
/// on the first `batch_size` rows written, where the next chunk's rows give another loss.
/// A joint config and an existing `--out` are refused.
#[test]
fn data_stream_writes_the_rows_a_run_takes_in_its_order() {
    use engram::core::burn::tensor::{Tensor, TensorData};
    use engram::core::model::{Activation, ForwardCtx};
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path());
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "epochs = 1\nbatch_size = 4\n",
        "epochs = 2\nbatch_size = 2\nlog_every = 1\n",
    );
    std::fs::write(
        &cfg,
        text.replace("vocab = 200\n", "vocab = 200\ndropout = 0.0\n"),
    )
    .unwrap();
    let out = d.path().join("stream.json");
    let args = |extra: &[&str]| {
        let mut a = vec!["data", "stream", cfg.to_str().unwrap(), "--out"];
        a.push(out.to_str().unwrap());
        a.extend_from_slice(extra);
        crate::util::run(&a)
    };
    let (code, msg) = args(&[]);
    assert_eq!(code, 0, "{msg}");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        (s["epochs"].as_u64(), s["batch_size"].as_u64()),
        (Some(2), Some(2))
    );
    let task = &s["tasks"][0];
    // No mask_logits: no class is masked.
    assert_eq!(task["allowed"], serde_json::Value::Null);
    assert_eq!(task["eval"]["split"], "test");
    let rows: Vec<u64> = serde_json::from_value(task["train"]["rows"].clone()).unwrap();
    let ids: Vec<Vec<i64>> = serde_json::from_value(task["train"]["ids"].clone()).unwrap();
    let labels: Vec<i64> = serde_json::from_value(task["train"]["labels"].clone()).unwrap();
    // 6 training documents (half of 12 at test_fraction 0.5), two epochs of them.
    assert_eq!((rows.len(), ids.len(), labels.len()), (12, 12, 12));
    assert!(ids.iter().all(|r| r.len() == 12));
    let (mut e0, mut e1) = (rows[..6].to_vec(), rows[6..].to_vec());
    assert_ne!(e0, e1, "each epoch draws its own order");
    e0.sort_unstable();
    e1.sort_unstable();
    assert_eq!(e0, e1);
    e0.dedup();
    assert_eq!(e0.len(), 6);

    // The run's first logged loss is the mean cross-entropy on rows 0..2 of the file.
    let (code, msg) = run_quiet(&cfg, &d.path().join("run"), &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let steps = std::fs::read_to_string(d.path().join("run/steps.csv")).unwrap();
    let first: f64 = steps
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .nth(4)
        .unwrap()
        .parse()
        .unwrap();
    let loaded = engram::core::config::LoadedConfig::load(&cfg, &[]).unwrap();
    let p = engram::core::train::trainer::prepare(loaded, &engram::registry()).unwrap();
    let (model, _) = p.build_initial_model(&p.device).unwrap();
    let loss = |at: usize| {
        let flat: Vec<f32> = ids[at..at + 2]
            .iter()
            .flatten()
            .map(|&i| i as f32)
            .collect();
        let x = Tensor::<2>::from_data(TensorData::new(flat, [2, 12]), &p.device);
        let z = model
            .forward(Activation::Flat(x), &ForwardCtx::evaluation(None))
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap();
        (0..2)
            .map(|i| {
                let row: Vec<f64> = z[i * 2..i * 2 + 2].iter().map(|&v| f64::from(v)).collect();
                let m = row[0].max(row[1]);
                let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                lse - row[labels[at + i] as usize]
            })
            .sum::<f64>()
            / 2.0
    };
    assert!(
        (loss(0) - first).abs() < 2e-6,
        "{} vs the run's {first}",
        loss(0)
    );
    assert!(
        (loss(2) - first).abs() > 1e-4,
        "the next chunk gives {}",
        loss(2)
    );

    // Refusals: an existing --out, a joint run.
    let (code, msg) = args(&[]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("already exists"), "{msg}");
    let (code, msg) = args(&["--overwrite", "--set", "train.joint=true"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("joint"), "{msg}");
}
