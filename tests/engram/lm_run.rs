//! `engram run` with `[train] objective = "lm"` (issue #31, item 3): continual next-token
//! fine-tuning of the tiny random Llama (tests/data/gguf/llama-tiny.gguf, its own tokenizer) on
//! two text domains — paragraphs of Jane Austen's *Pride and Prejudice* (1813, public domain)
//! and hand-written workshop notes — and the perplexity matrix it reports.
//!
//! Every figure is checked against an independent path: the first step's loss against
//! `lm::next_token_loss` on the same windows, the matrix's cells against `engram perplexity` on
//! the GGUF (the initial row) and on the run's checkpoint (the last row).

use crate::util::{engram, output, run, run_quiet};
use engram::core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram::core::data::tokenizer::TextTokenizer;
use engram::core::model::{Activation, ForwardCtx, llama};
use engram::core::train::lm;
use std::path::{Path, PathBuf};

const WINDOW: usize = 16;

/// Paragraphs of *Pride and Prejudice*, chapter 1 (public domain).
const AUSTEN_TRAIN: &[&str] = &[
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters.",
    "My dear Mr. Bennet, said his lady to him one day, have you heard that Netherfield Park is let at last?",
    "Mr. Bennet replied that he had not. But it is, returned she; for Mrs. Long has just been here, and she told me all about it.",
];
const AUSTEN_TEST: &[&str] = &[
    "Mr. Bennet made no answer. Do you not want to know who has taken it? cried his wife impatiently.",
    "You want to tell me, and I have no objection to hearing it. This was invitation enough.",
];
/// Notes from a workshop: another domain, with digits.
const NOTES_TRAIN: &[&str] = &[
    "Lathe 3 was serviced on 12 May: new belt, 4 bolts tightened, spindle oiled.",
    "Order 250 hex nuts (M8) and 120 washers before Friday; the bin by the door is empty.",
    "The drill press needs a 13 mm chuck key. Ask Sam, who keeps the spare in the blue box.",
    "Sweep the floor at 17:30 and switch off the compressor at the wall.",
];
const NOTES_TEST: &[&str] = &[
    "Saw blade 2 is dull after 40 cuts; replace it with the 60 tooth blade on shelf 5.",
    "Check the fire extinguisher on 1 June and write the date on the tag.",
];

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/llama-tiny.gguf")
}

/// `dir/name/{train,test}.jsonl` of the given documents.
fn domain(dir: &Path, name: &str, train: &[&str], test: &[&str]) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    for (file, docs) in [("train.jsonl", train), ("test.jsonl", test)] {
        let lines: String = docs
            .iter()
            .map(|t| format!("{}\n", serde_json::json!({"text": t, "label": name})))
            .collect();
        std::fs::write(d.join(file), lines).unwrap();
    }
    // The test documents as `engram perplexity --text` reads them: one a line.
    std::fs::write(dir.join(format!("{name}-test.txt")), test.join("\n")).unwrap();
}

/// The two domains and a config of the tiny Llama over them, `train_extra` appended to
/// `[train]` and `extra` after it.
fn setup(dir: &Path, train_extra: &str, extra: &str) -> PathBuf {
    domain(dir, "austen", AUSTEN_TRAIN, AUSTEN_TEST);
    domain(dir, "notes", NOTES_TRAIN, NOTES_TEST);
    let g = tiny().display().to_string();
    let entry = |name: &str| {
        format!(
            "[[data.stream]]\ndataset = \"{name}\"\npath = \"{name}\"\nformat = \"jsonl\"\noptions = {{ tokenizer = \"{g}\" }}\n"
        )
    };
    let text = format!(
        "[run]\nseed = 0\n{}{}[model]\ntype = \"llama\"\ninit = \"{g}\"\n[optimizer]\ntype = \"adamw\"\nlr = 0.01\n\
         [train]\nobjective = \"lm\"\nwindow = {WINDOW}\nbatch_size = 4\neval_batch_size = 3\nlog_every = 1\n{train_extra}{extra}",
        entry("austen"),
        entry("notes"),
    );
    let p = dir.join("lm.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

fn matrix(r: &serde_json::Value) -> Vec<Vec<f64>> {
    r["language_model"]["perplexity_matrix"]
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
        .collect()
}

/// `engram perplexity MODEL --text FILE --window 16 --json`: its perplexity.
fn cli_perplexity(model: &Path, text: &Path, dir: &Path) -> f64 {
    let json = dir.join("ppl.json");
    let (code, log) = run(&[
        "perplexity",
        model.to_str().unwrap(),
        "--text",
        text.to_str().unwrap(),
        "--window",
        &WINDOW.to_string(),
        "--json",
        json.to_str().unwrap(),
        "--overwrite",
    ]);
    assert_eq!(code, 0, "{log}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["perplexity"].as_f64().unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-12)
}

/// The first step trains on every window of Austen's training paragraphs at once (batch 64 >
/// the windows, so their order does not matter): its logged loss equals
/// `lm::next_token_loss` of the GGUF model on those windows, cut by hand from the tokenizer's
/// ids (each paragraph, then eos, concatenated, windows of 16, the rest dropped).
#[test]
fn first_step_loss_is_the_next_token_loss_of_its_windows() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path(), "", "");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("batch_size = 4", "batch_size = 64");
    std::fs::write(&cfg, text).unwrap();
    let out = d.path().join("out");
    let (code, log) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let steps = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    let first: Vec<&str> = steps.lines().nth(1).unwrap().split(',').collect();
    // task,epoch,step,global_step,loss,lr,samples
    assert_eq!(&first[..4], ["0", "0", "0", "0"], "{steps}");
    let logged: f64 = first[4].parse().unwrap();

    let tok = TextTokenizer::load_decoder(&tiny(), 1 << 20).unwrap();
    let eos = tok.eos_id();
    assert!(eos.is_some(), "the tiny GGUF names an eos id");
    let docs: Vec<Vec<u32>> = AUSTEN_TRAIN
        .iter()
        .map(|t| tok.encode_ids(t).unwrap())
        .collect();
    let mut stream: Vec<u32> = Vec::new();
    for d in &docs {
        stream.extend(d);
        stream.push(eos.unwrap());
    }
    let windows: Vec<&[u32]> = stream.chunks_exact(WINDOW).collect();
    assert!(windows.len() >= 4, "{} windows", windows.len());
    assert_eq!(first[6], windows.len().to_string(), "samples of the step");
    let device = Device::flex();
    let (model, _) = llama::gguf::from_file(&tiny(), &device).unwrap();
    let n = windows.len();
    let flat: Vec<i64> = windows
        .iter()
        .flat_map(|w| w.iter().map(|&v| i64::from(v)))
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(flat, [n, WINDOW]), &device);
    let logits = model
        .forward_tokens(Activation::Ids(ids.clone()), &ForwardCtx::training(Some(0)))
        .unwrap();
    let want = f64::from(
        lm::next_token_loss(logits, ids, &vec![WINDOW; n])
            .unwrap()
            .into_scalar::<f32>(),
    );
    assert!(close(logged, want, 1e-5), "logged {logged}, by hand {want}");
}

/// The report's perplexity matrix: its initial row equals `engram perplexity` of the GGUF on
/// each domain's test paragraphs, its last row `engram perplexity` of the run's final
/// checkpoint on them, and `engram eval` of the run the last row; BWT and forgetting on
/// log-perplexity follow the stated definitions;
/// the accuracy matrix holds no value; the summary prints the matrix.
#[test]
fn perplexity_matrix_equals_engram_perplexity_on_the_same_models_and_texts() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path(), "", "");
    let out = d.path().join("out");
    let o = engram()
        .args(["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let (code, log) = output(o);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("perplexity matrix"), "{log}");
    assert!(log.contains("nats/token on log-perplexity"), "{log}");
    let r = report(&out);
    let lm = &r["language_model"];
    assert_eq!(lm["metric"], "perplexity");
    assert_eq!(lm["lower_is_better"], true);
    assert_eq!(lm["window"], WINDOW);
    assert!(
        lm["definition"]
            .as_str()
            .unwrap()
            .contains("positive = forgetting")
    );
    let p = matrix(&r);
    assert_eq!(p.len(), 2);
    for (j, name) in ["austen", "notes"].iter().enumerate() {
        let text = d.path().join(format!("{name}-test.txt"));
        let initial = lm["initial_perplexity"][j].as_f64().unwrap();
        let from_gguf = cli_perplexity(&tiny(), &text, d.path());
        assert!(
            close(initial, from_gguf, 1e-5),
            "{name}: {initial} vs {from_gguf}"
        );
        let from_run = cli_perplexity(&out, &text, d.path());
        assert!(
            close(p[1][j], from_run, 1e-5),
            "{name}: {} vs {from_run}",
            p[1][j]
        );
        // Training moved the model: the figures are not the initial ones.
        assert!(
            !close(p[1][j], initial, 1e-3),
            "{name}: {} vs {initial}",
            p[1][j]
        );
    }
    // `engram eval` of the run: the last row again.
    let (code, log) = run(&["eval", out.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{log}");
    let v: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
    for (j, want) in p[1].iter().enumerate() {
        let got = v["perplexity"][j].as_f64().unwrap();
        assert!(close(got, *want, 1e-6), "eval T{j}: {got} vs {want}");
    }
    // T = 2: BWT and forgetting read the one old task, on ln P.
    let bwt = p[1][0].ln() - p[0][0].ln();
    let m = &lm["metrics"];
    assert!(close(m["bwt_log_ppl"].as_f64().unwrap(), bwt, 1e-9), "{m}");
    assert!(
        close(m["forgetting_log_ppl"].as_f64().unwrap(), bwt, 1e-9),
        "{m}"
    );
    let mean = (p[1][0] + p[1][1]) / 2.0;
    assert!(close(m["mean_ppl"].as_f64().unwrap(), mean, 1e-9), "{m}");
    // No accuracy pretends to be one.
    for row in r["accuracy_matrix"].as_array().unwrap() {
        assert!(
            row.as_array()
                .unwrap()
                .iter()
                .all(serde_json::Value::is_null),
            "{row}"
        );
    }
    assert!(r["metrics"]["acc"].is_null(), "{}", r["metrics"]);
    assert!(r.get("task_il_accuracy_matrix").is_none());
}

/// The memory chain runs the same loss: segment checkpointing and gradient accumulation give
/// the plain run's perplexity matrix (1e-4 relative).
#[test]
fn checkpointing_and_accumulation_give_the_plain_matrix() {
    let d = tempfile::tempdir().unwrap();
    let plain = setup(d.path(), "", "");
    let out_plain = d.path().join("plain");
    let (code, log) = run_quiet(&plain, &out_plain, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let chained = setup(
        d.path(),
        "",
        "[[memory]]\ntype = \"accumulate\"\nsteps = 2\n[[memory]]\ntype = \"checkpoint\"\ninterval = 1\n",
    );
    let out_chain = d.path().join("chain");
    let (code, log) = run_quiet(&chained, &out_chain, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let (a, b) = (matrix(&report(&out_plain)), matrix(&report(&out_chain)));
    for (ra, rb) in a.iter().zip(&b) {
        for (x, y) in ra.iter().zip(rb) {
            assert!(close(*y, *x, 1e-4), "plain {a:?}, chained {b:?}");
        }
    }
}

/// Replay of windows (distill = 0) killed in the second task, resumed: the same matrix as
/// the run that was never killed.
#[test]
fn a_killed_replay_run_resumes_to_the_same_matrix() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(
        d.path(),
        "checkpoint_every = 1\n",
        "[[forgetting]]\ntype = \"replay\"\ncapacity = 20\nratio = 0.5\ndistill = 0.0\n",
    );
    let full = d.path().join("full");
    let (code, log) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let steps = std::fs::read_to_string(full.join("steps.csv")).unwrap();
    let last_step = steps.lines().count() - 2;
    let cut = d.path().join("cut");
    let point = format!("step-{last_step}");
    let (code, log) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", &point)]);
    assert_ne!(code, 0, "{log}");
    assert!(log.contains(&format!("failpoint `{point}`")), "{log}");
    let (code, log) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{log}");
    let (a, b) = (report(&full), report(&cut));
    assert_eq!(a["language_model"], b["language_model"]);
    assert!(a["memory"]["stored"]["replay"]["samples"].as_u64().unwrap() > 0);
}

/// Bad input is a positioned error (exit 2, `lm.toml:LINE:COL`, a hint), never a panic: an
/// unknown objective, a window of 1, a window without the objective, a strategy that needs
/// class logits (named), replay's logit distillation, stratified selection and priorities, a
/// model that is not a decoder.
#[test]
fn bad_objective_settings_are_positioned_errors() {
    let d = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(setup(d.path(), "", "")).unwrap();
    let line_of = |text: &str, needle: &str| {
        1 + text
            .lines()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} in {text}"))
    };
    let lwf = "[[forgetting]]\ntype = \"lwf\"\n";
    let replay = "[[forgetting]]\ntype = \"replay\"\ncapacity = 20\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            base.replace("objective = \"lm\"", "objective = \"language\""),
            "objective =",
            "unknown variant `language`",
        ),
        (
            base.replace("window = 16", "window = 1"),
            "window =",
            "window 1: a window holds 2 to",
        ),
        (
            base.replace("objective = \"lm\"\n", ""),
            "window =",
            "needs `objective = \"lm\"`",
        ),
        (
            format!("{base}{lwf}"),
            "type = \"lwf\"",
            "`lwf` cannot train a language model",
        ),
        // `distill` is not written (its default is 0.5): said at the entry.
        (
            format!("{base}{replay}"),
            "[[forgetting]]",
            "set `distill = 0`",
        ),
        // Replay's per-sample class scores: stratified selection and priorities.
        (
            format!("{base}{replay}distill = 0.0\nselection = \"stratified\"\n"),
            "selection =",
            "use `reservoir`",
        ),
        (
            format!("{base}{replay}distill = 0.0\npriority = true\n"),
            "priority =",
            "set `priority = false`",
        ),
        (
            base.replace("type = \"llama\"", "type = \"mlp\"\nhidden = [8]")
                .replace(&format!("init = \"{}\"\n", tiny().display()), ""),
            "type = \"mlp\"",
            "trains a decoder",
        ),
    ];
    for (i, (text, at, want)) in cases.iter().enumerate() {
        let cfg = d.path().join("bad.toml");
        std::fs::write(&cfg, text).unwrap();
        let (code, log) = run_quiet(&cfg, &d.path().join(format!("o{i}")), &[], &[]);
        assert_eq!(code, 2, "case {i}: {log}");
        assert!(log.contains(want), "case {i}: {log}");
        // A hint, or serde's list of the values there are.
        assert!(
            log.contains("hint") || log.contains("expected `classify` or `lm`"),
            "case {i}: {log}"
        );
        let line = line_of(text, at);
        assert!(
            log.contains(&format!("bad.toml:{line}:")),
            "case {i}: want line {line}: {log}"
        );
        assert!(!log.contains("panicked"), "case {i}: {log}");
    }
}

/// QLoRA on the decoder (`lora` with `quantize = "int4"`, blocks of 16): the report counts the
/// packed base (its projection weights quantized, the parameters' bytes well under `4 ×` their
/// count), segment checkpointing and AMP run over it, and a run killed in its second task
/// resumes to the same perplexity matrix.
#[test]
fn a_qlora_run_reports_its_packed_base_and_resumes_to_the_same_matrix() {
    let d = tempfile::tempdir().unwrap();
    let qlora = "[[memory]]\ntype = \"lora\"\nrank = 4\nquantize = \"int4\"\nblock = 16\n";
    let cfg = setup(d.path(), "checkpoint_every = 1\n", qlora);
    let full = d.path().join("full");
    let (code, log) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{log}");
    let r = report(&full);
    let lora = &r["memory"]["strategies"]["lora"];
    // Two layers' q, k, v, o, gate, up and down of the tiny model (hidden 32, 2 key/value
    // heads of 8, FFN 64): 2 · (32·32 + 2·32·16 + 32·32 + 2·32·64 + 64·32) = 18,432.
    assert_eq!(lora["quantized_parameters"], 18_432, "{lora}");
    let params = r["memory"]["parameters"].as_u64().unwrap();
    let bytes = lora["parameter_bytes"].as_u64().unwrap();
    // The quantized weights at one byte a value (+ a 4-byte scale per 16), the rest in f32.
    assert_eq!(
        bytes,
        (params - 18_432) * 4 + 18_432 + 18_432 / 16 * 4,
        "{lora}"
    );
    let m = matrix(&r);
    assert!(
        m.iter().flatten().all(|p| p.is_finite() && *p > 1.0),
        "{m:?}"
    );
    // `run -q`'s one line is the mean perplexity of the last row (no accuracy to print).
    let mean = (m[1][0] + m[1][1]) / 2.0;
    assert!(
        log.trim_end()
            .ends_with(&format!("mean perplexity {mean:.4}")),
        "{log}"
    );
    // Killed in the second task and resumed: the same matrix.
    let steps = std::fs::read_to_string(full.join("steps.csv")).unwrap();
    let point = format!("step-{}", steps.lines().count() - 2);
    let cut = d.path().join("cut");
    let (code, log) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", &point)]);
    assert_ne!(code, 0, "{log}");
    let (code, log) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(r["language_model"], report(&cut)["language_model"]);
    // Checkpointing gives the plain matrix; AMP computes over the packed base.
    for (name, extra, tol) in [
        (
            "ckpt",
            "[[memory]]\ntype = \"checkpoint\"\ninterval = 1\n",
            1e-4,
        ),
        ("amp", "[[memory]]\ntype = \"amp\"\n", f64::INFINITY),
    ] {
        let cfg = setup(d.path(), "", &format!("{qlora}{extra}"));
        let out = d.path().join(name);
        let (code, log) = run_quiet(&cfg, &out, &[], &[]);
        assert_eq!(code, 0, "{name}: {log}");
        let got = matrix(&report(&out));
        for (ra, rb) in m.iter().zip(&got) {
            for (x, y) in ra.iter().zip(rb) {
                assert!(
                    y.is_finite() && close(*y, *x, tol),
                    "{name}: {m:?} vs {got:?}"
                );
            }
        }
    }
}
