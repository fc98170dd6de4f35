//! `[[memory]] type = "lora"` through the real binary (issue #30): a small BERT on a two-task
//! text stream trains only its adapters and head, the report counts them, a killed run with
//! `merge = "task"` resumes to the uninterrupted run's report, and `engram export` writes the
//! merged weights under the model's own names.

use crate::resume::stable;
use crate::util::{run, run_quiet};
use serde_json::Value;
use std::path::Path;

/// The text test's corpus with 14 more documents a class, as two tasks of one class each,
/// trained with AdamW and checkpointed every 2 steps; `memory` is appended.
pub(crate) fn config(dir: &Path, memory: &str) -> std::path::PathBuf {
    let cfg = crate::text::setup(dir);
    for (class, words) in [("business", "profits rose"), ("sport", "the match ended")] {
        for i in 6..20 {
            std::fs::write(
                dir.join("corpus").join(class).join(format!("{i}.txt")),
                format!("{words} {i}"),
            )
            .unwrap();
        }
    }
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(
            "tasks = 1\nclasses_per_task = 2",
            "tasks = 2\nclasses_per_task = 1",
        )
        .replace("type = \"sgd\"\nlr = 0.1", "type = \"adamw\"\nlr = 0.01")
        .replace("batch_size = 4\n", "batch_size = 4\ncheckpoint_every = 2\n");
    let named = dir.join(format!("{}.toml", memory.len()));
    std::fs::write(&named, format!("{text}{memory}")).unwrap();
    named
}

/// `engram export RUN --safetensors FILE` (exit 0 asserted) and the tensor names it wrote.
pub(crate) fn exported_keys(run_dir: &Path, file: &Path) -> Vec<String> {
    let (code, out) = run(&[
        "export",
        run_dir.to_str().unwrap(),
        "--safetensors",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let bytes = std::fs::read(file).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    header.as_object().unwrap().keys().cloned().collect()
}

fn report(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

#[test]
fn lora_trains_the_adapters_only_resumes_and_exports_merged_weights() {
    let d = tempfile::tempdir().unwrap();
    let full_cfg = config(d.path(), "");
    let lora_cfg = config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\nalpha = 4.0\nmerge = \"task\"\n",
    );
    let (code, out) = run_quiet(&full_cfg, &d.path().join("full"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run_quiet(&lora_cfg, &d.path().join("lora"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let (f, l) = (
        report(&d.path().join("full")),
        report(&d.path().join("lora")),
    );
    let (fm, lm) = (&f["memory"], &l["memory"]);
    // Full fine-tuning trains everything; LoRA the adapters (one layer's query and value,
    // 16 × 16 each: (16 + 16) · 2 apiece) and the head.
    assert_eq!(fm["trainable_parameters"], fm["parameters"]);
    let s = &lm["strategies"]["lora"];
    assert_eq!(s["adapter_parameters"], 128);
    assert_eq!(
        s["adapted"],
        serde_json::json!([
            "blocks.1.attention.query.weight",
            "blocks.1.attention.value.weight"
        ])
    );
    assert_eq!(s["merges"], 2, "merged at the end of both tasks");
    let (lp, lt) = (
        lm["parameters"].as_u64().unwrap(),
        lm["trainable_parameters"].as_u64().unwrap(),
    );
    let fp = fm["parameters"].as_u64().unwrap();
    assert_eq!(lt, s["trainable_parameters"].as_u64().unwrap());
    assert_eq!(lp - lt, s["frozen_parameters"].as_u64().unwrap());
    assert_eq!(lp, fm["parameters"].as_u64().unwrap() + 128);
    // AdamW keeps two moments per trainable parameter: LoRA's state is the smaller by about
    // the ratio of trainable parameters.
    let (fs, ls) = (
        fm["optimizer_state_bytes"].as_u64().unwrap(),
        lm["optimizer_state_bytes"].as_u64().unwrap(),
    );
    assert!(fs >= 8 * fm["parameters"].as_u64().unwrap(), "{fs}");
    assert!(ls >= 8 * lt && ls < fs / 4, "{ls} vs {fs}");
    // `engram compare` shows what trained beside the parameters once a run trained only part.
    let (code, table) = run(&[
        "compare",
        d.path().join("full").to_str().unwrap(),
        d.path().join("lora").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].ends_with("params k  trainable k"), "{table}");
    let last = |l: &str| l.split_whitespace().last().unwrap().parse::<f64>().unwrap();
    assert!((last(lines[1]) - fp as f64 / 1e3).abs() < 0.051, "{table}");
    assert!((last(lines[2]) - lt as f64 / 1e3).abs() < 0.051, "{table}");

    // Killed in task 1 (after task 0's merge), resumed: the same report.
    let cut = d.path().join("cut");
    let (code, _) = run_quiet(&lora_cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-5")]);
    assert_ne!(code, 0);
    let (code, out) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(stable(&cut), stable(&d.path().join("lora")));

    // The export is merged: the model's own names, no adapter factors.
    let keys = exported_keys(&d.path().join("lora"), &d.path().join("m.safetensors"));
    assert!(
        keys.iter().any(|k| k.contains("attention.query")),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.contains("lora")), "{keys:?}");
}

/// A target that names no layer of the model, a `train` name that names no parameter, and a
/// layer named by both `targets` and `train` (its base would train in full under its
/// adapters) are refused before anything is written (exit 2), at the entry's line.
#[test]
fn lora_targets_that_name_no_layer_are_refused() {
    let d = tempfile::tempdir().unwrap();
    for (lora, says) in [
        ("targets = [\"q_proj\"]\n", ["q_proj", "query"]),
        // `train` takes any layer with parameters (a norm too), and its list says so.
        ("train = [\"nosuch\"]\n", ["nosuch", "norm1"]),
        (
            "targets = [\"query\"]\ntrain = [\"query\"]\n",
            ["[\"query\"] names layers that targets adapts", "frozen"],
        ),
    ] {
        let cfg = config(d.path(), &format!("[[memory]]\ntype = \"lora\"\n{lora}"));
        let out = d.path().join("out");
        let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
        assert_eq!(code, 2, "{lora}: {msg}");
        assert!(
            says.iter().all(|w| msg.contains(w)) && msg.contains(".toml:"),
            "{lora}: {msg}"
        );
        assert!(!out.join("report.json").exists(), "{lora}");
    }
}

/// The forgetting strategies keep working when only adapters train: EWC (its Fisher over the
/// parameters with gradients, the adapters and the head), replay, DER++, ER-ACE and LwF each
/// finish a LoRA run, and EWC anchors only trainable parameters (its penalty moves nothing
/// frozen: the report's trainable count is LoRA's).
#[test]
fn forgetting_strategies_run_on_adapters() {
    let d = tempfile::tempdir().unwrap();
    for (i, forgetting) in [
        "[[forgetting]]\ntype = \"ewc\"\nlambda = 100.0\n",
        "[[forgetting]]\ntype = \"replay\"\ncapacity = 20\n",
        "[[forgetting]]\ntype = \"derpp\"\ncapacity = 20\n",
        "[[forgetting]]\ntype = \"er-ace\"\ncapacity = 20\n",
        "[[forgetting]]\ntype = \"lwf\"\n",
    ]
    .iter()
    .enumerate()
    {
        let dir = d.path().join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = config(
            &dir,
            &format!("[[memory]]\ntype = \"lora\"\nrank = 2\n{forgetting}"),
        );
        let (code, out) = run_quiet(&cfg, &dir.join("out"), &[], &[]);
        assert_eq!(code, 0, "{forgetting}: {out}");
        let r = report(&dir.join("out"));
        let m = &r["memory"];
        assert_eq!(
            m["trainable_parameters"], m["strategies"]["lora"]["trainable_parameters"],
            "{forgetting}"
        );
        assert!(r["metrics"]["acc"].as_f64().is_some(), "{forgetting}: {r}");
    }
}

/// Over a quantized base (`quantize = "int8"`, one scale a weight): weight averaging (`ema`,
/// which averages the trainable parameters only) and GDumb, which reads every parameter and
/// writes back the ones it changes, run (the packed base reads as its dequantized values and
/// is never written); the report counts the packed weights; and the f32 adapters export as
/// PEFT's.
#[test]
fn strategies_that_rewrite_weights_and_peft_export_run_over_a_quantized_base() {
    let d = tempfile::tempdir().unwrap();
    for (i, forgetting) in [
        "[[forgetting]]\ntype = \"ema\"\n",
        "[[forgetting]]\ntype = \"gdumb\"\ncapacity = 20\nepochs = 1\n",
    ]
    .iter()
    .enumerate()
    {
        let dir = d.path().join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = config(
            &dir,
            &format!(
                "[[memory]]\ntype = \"lora\"\nrank = 2\nquantize = \"int8\"\nblock = 0\n{forgetting}"
            ),
        );
        let out = dir.join("out");
        let (code, log) = run_quiet(&cfg, &out, &[], &[]);
        assert_eq!(code, 0, "{forgetting}: {log}");
        let r = report(&out);
        assert!(
            r["memory"]["strategies"]["lora"]["quantized_parameters"].as_u64() > Some(0),
            "{forgetting}: {}",
            r["memory"]
        );
        assert!(r["metrics"]["acc"].as_f64().is_some(), "{forgetting}: {r}");
        if i == 0 {
            // The average is the trainable parameters' only (adapters and head, f32): the
            // frozen base is neither averaged nor dequantized.
            // Its state is 4 bytes a trainable value plus its meta JSON (`{"horizon":0.25,
            // "updates":N}`); averaging the base too would be 4 bytes a parameter.
            let m = &r["memory"];
            let state = m["strategy_state_bytes"]["ema"].as_u64().unwrap();
            let trainable = m["trainable_parameters"].as_u64().unwrap();
            assert!(
                (4 * trainable..4 * trainable + 64).contains(&state),
                "{state} bytes for {trainable} trainable values: {m}"
            );
            let peft = dir.join("peft");
            let (code, log) = run(&[
                "export",
                out.to_str().unwrap(),
                "--peft",
                peft.to_str().unwrap(),
            ]);
            assert_eq!(code, 0, "{log}");
            assert!(peft.join("adapter_model.safetensors").is_file());
        }
    }
}

/// `o-lora` runs on `lora` with `merge = "task"` (one orthogonalised adapter a task), and
/// without the merge it stops before the second task with an error that says what to set.
#[test]
fn o_lora_runs_with_merged_adapters_and_refuses_without() {
    let d = tempfile::tempdir().unwrap();
    // On either adapter path (Burn's weight path, engram's activation path).
    for path in ["", "path = \"activation\"\n"] {
        let cfg = config(
            d.path(),
            &format!(
                "[[memory]]\ntype = \"lora\"\nrank = 2\nmerge = \"task\"\n{path}[[forgetting]]\ntype = \"o-lora\"\n"
            ),
        );
        let out_dir = d.path().join(format!("ok{}", path.len()));
        let (code, out) = run_quiet(&cfg, &out_dir, &[], &[]);
        assert_eq!(code, 0, "{out}");
        let ok = report(&out_dir);
        assert_eq!(ok["memory"]["strategies"]["lora"]["merges"], 2);
        // What o-lora keeps is in the memory report: each task's A [16, 2] of the two adapted
        // weights, 4 bytes a value, no metadata.
        assert_eq!(
            ok["memory"]["strategy_state_bytes"]["o-lora"],
            2 * 2 * 16 * 2 * 4,
            "{path}: {ok}"
        );
    }
    let cfg = config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\n[[forgetting]]\ntype = \"o-lora\"\n",
    );
    let (code, out) = run_quiet(&cfg, &d.path().join("no-merge"), &[], &[]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("merge = \\\"task\\\"") || out.contains("merge = \"task\""),
        "{out}"
    );
}

/// `lora` composes with the other memory strategies in a real run: segment checkpointing (its
/// first segment, the frozen embedding reading token ids, has nothing to backpropagate) gives
/// the plain LoRA run's accuracy matrix, and `accumulate` and `amp` finish.
#[test]
fn lora_composes_with_checkpoint_accumulate_and_amp() {
    let d = tempfile::tempdir().unwrap();
    let lora = "[[memory]]\ntype = \"lora\"\nrank = 2\n";
    let mut matrices = Vec::new();
    for (i, extra) in [
        "",
        "[[memory]]\ntype = \"checkpoint\"\ninterval = 1\n",
        "[[memory]]\ntype = \"accumulate\"\nsteps = 2\n",
        "[[memory]]\ntype = \"amp\"\ndtype = \"bf16\"\n",
    ]
    .iter()
    .enumerate()
    {
        let dir = d.path().join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = config(&dir, &format!("{lora}{extra}"));
        let (code, out) = run_quiet(&cfg, &dir.join("out"), &[], &[]);
        assert_eq!(code, 0, "{extra}: {out}");
        matrices.push(report(&dir.join("out"))["accuracy_matrix"].clone());
    }
    assert_eq!(matrices[1], matrices[0], "checkpointed = plain");
}

/// Each name must match: a misspelt second target or a `train` name that matches nothing is
/// refused at its line (it would silently leave its layers out), and so is a rank above a
/// targeted weight's smaller side.
#[test]
fn every_lora_name_must_match_and_rank_fit() {
    let d = tempfile::tempdir().unwrap();
    for (memory, want) in [
        (
            "targets = [\"query\", \"vaule\"]",
            "[\"vaule\"] name no rank-2 parameter",
        ),
        ("train = [\"nope\"]", "train [\"nope\"] name no parameter"),
        ("rank = 100000", "rank 100000 is above"),
    ] {
        let cfg = config(
            d.path(),
            &format!("[[memory]]\ntype = \"lora\"\n{memory}\n"),
        );
        let (code, out) = run_quiet(&cfg, &d.path().join("out"), &[], &[]);
        assert_eq!(code, 2, "{memory}: {out}");
        assert!(
            out.contains(want) && out.contains(".toml:"),
            "{memory}: {out}"
        );
    }
}

/// `per-task-lora` on two tasks of one class each: every cell of the class-incremental matrix
/// equals the task-identification cell (a task of one class is right exactly when its task is
/// inferred right), the task-IL view is 1 wherever a task was trained, a run killed in task 1
/// resumes to the same report (the experts and prototypes are in the checkpoint), `engram
/// eval` answers through the experts as the run did, and `merge = "task"` is refused.
#[test]
fn per_task_lora_routes_by_prototype_resumes_and_evaluates() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\n[[forgetting]]\ntype = \"per-task-lora\"\n",
    );
    let out = d.path().join("ptl");
    let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    let acc = r["accuracy_matrix"].as_array().unwrap();
    let tid = r["task_id_matrix"].as_array().unwrap();
    assert_eq!(tid.len(), acc.len());
    let mut cells = 0;
    for (a_row, t_row) in acc.iter().zip(tid) {
        for (a, t) in a_row
            .as_array()
            .unwrap()
            .iter()
            .zip(t_row.as_array().unwrap())
        {
            if let (Some(a), Some(t)) = (a.as_f64(), t.as_f64()) {
                assert!((a - t).abs() < 1e-12, "{a} vs {t}: {r}");
                cells += 1;
            }
        }
    }
    assert!(cells >= 3, "{r}");
    // Its state in the memory report: the trainable parameters three times (as the first task
    // found them, and each task's expert) plus the classes and prototypes as JSON.
    let trainable = r["memory"]["trainable_parameters"].as_u64().unwrap();
    let bytes = r["memory"]["strategy_state_bytes"]["per-task-lora"]
        .as_u64()
        .unwrap();
    assert!(
        bytes > 12 * trainable && bytes < 12 * trainable + 4096,
        "{bytes} for {trainable} trainable"
    );
    let last = &r["task_il_accuracy_matrix"][1];
    assert_eq!(last, &serde_json::json!([1.0, 1.0]), "{r}");
    // The run's summary prints the last row of the task-identification matrix.
    let typed: engram::core::train::report::Report =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let cells: Vec<String> = tid[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{:.1}", v.as_f64().unwrap() * 100.0))
        .collect();
    let table = engram::summary::run_table(&typed);
    assert!(
        table.contains(&format!("after the last task): {}\n", cells.join(" "))),
        "{table}"
    );

    let cut = d.path().join("cut");
    let (code, _) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-5")]);
    assert_ne!(code, 0);
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&cut), stable(&out));

    let (code, msg) = run(&["eval", out.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{msg}");
    let line = msg.lines().find(|l| l.starts_with('{')).unwrap();
    let e: Value = serde_json::from_str(line).unwrap();
    assert_eq!(e["accuracy"], acc[1], "{msg}");
    // The model alone is not the run's answer (the experts are in the strategy's state):
    // exporting it either way is refused, and nothing is written.
    for (flag, target) in [("--peft", "adapters"), ("--safetensors", "m.safetensors")] {
        let t = d.path().join(target);
        let (code, msg) = run(&["export", out.to_str().unwrap(), flag, t.to_str().unwrap()]);
        assert_eq!(code, 2, "{flag}: {msg}");
        assert!(
            msg.contains("not exported: per-task-lora keeps one expert"),
            "{msg}"
        );
        assert!(!t.exists(), "{flag}");
    }

    let cfg = config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\nmerge = \"task\"\n[[forgetting]]\ntype = \"per-task-lora\"\n",
    );
    let (code, msg) = run_quiet(&cfg, &d.path().join("merged"), &[], &[]);
    assert_ne!(code, 0, "{msg}");
    // Without lora at all: a config error at the entry (exit 2), before any step.
    let cfg = config(d.path(), "[[forgetting]]\ntype = \"per-task-lora\"\n");
    let (code, msg2) = run_quiet(&cfg, &d.path().join("bare"), &[], &[]);
    assert_eq!(code, 2, "{msg2}");
    assert!(
        msg2.contains(".toml:") && msg2.contains("[[memory]] type = \"lora\""),
        "{msg2}"
    );
    assert!(
        msg.contains("merge = \\\"none\\\"") || msg.contains("merge = \"none\""),
        "{msg}"
    );
}
