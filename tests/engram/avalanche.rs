//! What an Avalanche or Mammoth user reaches for first, on real Fashion-MNIST: uneven tasks
//! (`classes_per_task = [6, 1, 1, 1, 1]`, "B50-Inc10" style), average incremental accuracy,
//! the JSON-lines metrics log and progress events for a program that trains through the
//! library.

use crate::util::{run, run_quiet};
use engram::core::train::observer::RunEvent;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};

fn report(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

/// A small Split-FMNIST config of scenario `scenario` with `extra` [data] lines.
fn config(dir: &Path, name: &str, scenario: &str, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "[run]\nseed = 0\n[data]\ndataset = \"fashion-mnist\"\nscenario = \"{scenario}\"\n\
         subsample = 300\ntest_subsample = 100\n{extra}\n[model]\ntype = \"mlp\"\nhidden = [32]\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[train]\nbatch_size = 64\n\
         log_every = 2\n"
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn an_uneven_first_task_deals_its_classes_in_both_split_scenarios() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    for scenario in ["class-incremental", "task-incremental"] {
        let cfg = config(
            d.path(),
            &format!("{scenario}.toml"),
            scenario,
            "classes_per_task = [6, 1, 1, 1, 1]",
        );
        let out = d.path().join(scenario);
        let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
        assert_eq!(code, 0, "{msg}");
        // A task of one class has no chance level: no at-chance warning for tasks 1-4.
        assert!(!msg.contains("no better than chance"), "{msg}");
        let r = report(&out);
        let classes: Vec<Value> = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["classes"].clone())
            .collect();
        assert_eq!(
            classes,
            [
                serde_json::json!([0, 1, 2, 3, 4, 5]),
                serde_json::json!([6]),
                serde_json::json!([7]),
                serde_json::json!([8]),
                serde_json::json!([9]),
            ],
            "{scenario}"
        );
        // subsample caps each task's training rows; a one-class task has 100 test rows.
        let n = |k: &str| -> Vec<u64> {
            let tasks = r["tasks"].as_array().unwrap();
            tasks.iter().map(|t| t[k].as_u64().unwrap()).collect()
        };
        assert_eq!(n("train_samples"), [300; 5], "{scenario}");
        assert_eq!(n("eval_samples"), [100; 5], "{scenario}");
        let m = r["accuracy_matrix"].as_array().unwrap();
        assert_eq!(m.len(), 5, "{scenario}");
        if scenario == "task-incremental" {
            // Logits masked to the task's own classes: a one-class task is always right.
            assert!((1..5).all(|j| m[4][j] == 1.0), "{m:?}");
        }
    }
}

#[test]
fn uneven_tasks_that_do_not_fit_are_positioned_errors() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (
            "tasks = 5\nclasses_per_task = [6, 1, 1]",
            ":8:1: tasks = 5 but classes_per_task = [6, 1, 1] lists 3 tasks",
            "remove `tasks`",
        ),
        (
            "classes_per_task = [6, 0, 1]",
            ":8:1: classes_per_task = [6, 0, 1] gives a task no class",
            "list 1 or more classes for every task",
        ),
        (
            "classes_per_task = \"six\"",
            ":8:20: invalid type: string \"six\", expected a whole number of classes per task (2) or a list",
            "",
        ),
    ];
    for (i, (extra, message, hint)) in cases.iter().enumerate() {
        let cfg = config(d.path(), &format!("e{i}.toml"), "class-incremental", extra);
        let (code, msg) = run(&["validate", cfg.to_str().unwrap()]);
        assert_eq!(code, 2, "{extra}: {msg}");
        assert!(msg.contains(message), "{extra}: {msg}");
        assert!(msg.contains(hint), "{extra}: {msg}");
    }
    // More classes than the data has: found when the data is dealt, at the list.
    crate::util::require_fmnist!();
    let cfg = config(
        d.path(),
        "sum.toml",
        "class-incremental",
        "classes_per_task = [6, 5]",
    );
    let (code, msg) = run_quiet(&cfg, &d.path().join("sum"), &[], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(":8:1: data: classes_per_task = [6, 5] deals 11 classes but the dataset and class_order give 10"),
        "{msg}"
    );
}

/// `metrics.jsonl` without its wall-clock figure (`samples_per_s`).
fn jsonl(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(o) = v.as_object_mut() {
                assert!(
                    o.remove("samples_per_s")
                        .is_none_or(|s| s.as_f64().unwrap() > 0.0)
                );
            }
            v
        })
        .collect()
}

#[test]
fn metrics_jsonl_follows_the_run_and_a_resumed_run_writes_no_line_twice() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = config(
        d.path(),
        "j.toml",
        "class-incremental",
        "tasks = 2\nclasses_per_task = 2",
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("log_every = 2\n", "log_every = 2\ncheckpoint_every = 3\n");
    std::fs::write(&cfg, text).unwrap();
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let lines = jsonl(&full);
    let r = report(&full);
    // 300 rows a task in batches of 64: 5 steps, logged after steps 2, 4 and the epoch's end.
    let steps = std::fs::read_to_string(full.join("steps.csv")).unwrap();
    let train: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "train").collect();
    assert_eq!(train.len(), steps.lines().count() - 1);
    let global: Vec<u64> = train.iter().map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(global, [1, 3, 4, 6, 8, 9]);
    // An eval line per cell: the initial model's 2, then 2 after each task, with the matrix's
    // values.
    let evals: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "eval").collect();
    assert_eq!(evals.len(), 6);
    assert_eq!(evals[0]["after_task"], Value::Null);
    assert_eq!(evals[0]["accuracy"], r["initial_accuracy"][0]);
    assert_eq!(evals[5]["after_task"], 1);
    assert_eq!(evals[5]["step"], 10);
    assert_eq!(evals[5]["accuracy"], r["accuracy_matrix"][1][1]);
    assert_eq!(
        evals[5]["task_il_accuracy"],
        r["task_il_accuracy_matrix"][1][1]
    );
    // Lines in time order: an eval line after the last train line of its task.
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.join(" "),
        "eval eval train train train eval eval train train train eval eval"
    );

    // Killed after 8 steps: the file has 4 train and 4 eval lines, the checkpoint at step 6
    // had recorded 3 train lines and the 4 cells. Resumed: the same lines, none twice.
    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-8")]);
    assert_ne!(code, 0, "{msg}");
    assert_eq!(jsonl(&cut), &lines[..8], "{:?}", jsonl(&cut));
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(jsonl(&cut), lines);
}

#[test]
fn average_incremental_accuracy_is_in_the_report_summary_and_compare() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = config(
        d.path(),
        "a.toml",
        "class-incremental",
        "tasks = 3\nclasses_per_task = 2",
    );
    let out = d.path().join("a");
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    let m: Vec<Vec<f64>> = serde_json::from_value(r["accuracy_matrix"].clone()).unwrap();
    // mean_k (1/(k+1)) Σ_{j≤k} R[k][j] (Rebuffi et al. 2017).
    let want = (m[0][0] + (m[1][0] + m[1][1]) / 2.0 + (m[2][0] + m[2][1] + m[2][2]) / 3.0) / 3.0;
    let aia = r["metrics"]["aia"].as_f64().unwrap();
    assert!((aia - want).abs() < 1e-12, "{aia} vs {want}");
    assert!(msg.contains(&format!("AIA {aia:.4}")), "{msg}");
    let (code, table) = run(&["compare", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{table}");
    let header: Vec<&str> = table.lines().next().unwrap().split("  ").collect();
    assert!(header.iter().any(|h| h.trim() == "AIA"), "{table}");
    assert!(table.contains(&format!("{aia:.4}")), "{table}");
}

#[test]
fn a_library_run_tells_its_observer_every_step_and_cell() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let report = engram::Experiment::new()
        .dataset_named("fashion-mnist")
        .data(|d| {
            d.classes_per_task = Some(vec![4, 2].into());
            d.subsample = Some(200);
            d.test_subsample = Some(50);
        })
        .train(|t| t.batch_size = 50)
        .observe(move |e: &RunEvent| seen.lock().unwrap().push(e.clone()))
        .run(&d.path().join("lib"))
        .unwrap();
    let events = events.lock().unwrap();
    let count = |f: fn(&RunEvent) -> bool| events.iter().filter(|e| f(e)).count();
    assert_eq!(count(|e| matches!(e, RunEvent::TaskStart { .. })), 2);
    assert_eq!(count(|e| matches!(e, RunEvent::TaskEnd { .. })), 2);
    // 200 rows a task in batches of 50.
    assert_eq!(count(|e| matches!(e, RunEvent::Step { .. })), 8);
    assert_eq!(report.training.steps, 8);
    // The initial model's 2 cells, then 2 after each task.
    assert_eq!(count(|e| matches!(e, RunEvent::Eval { .. })), 6);
    // The initial model's cells come first, then the first task starts.
    assert!(matches!(
        events[0],
        RunEvent::Eval {
            after_task: None,
            ..
        }
    ));
    let first_start = events
        .iter()
        .find(|e| matches!(e, RunEvent::TaskStart { .. }));
    assert_eq!(
        first_start,
        Some(&RunEvent::TaskStart {
            task: 0,
            tasks: 2,
            steps: 4,
            done: 0,
            joint: false
        })
    );
    assert_eq!(events.last(), Some(&RunEvent::End { ok: true }));
    let last_eval = events
        .iter()
        .rev()
        .find_map(|e| match e {
            RunEvent::Eval {
                after_task: Some(1),
                task: 1,
                accuracy,
                ..
            } => Some(*accuracy),
            _ => None,
        })
        .unwrap();
    assert_eq!(Some(last_eval), report.accuracy_matrix[1][1]);
    let loss = events.iter().find_map(|e| match e {
        RunEvent::Step { step: 1, loss, .. } => Some(*loss),
        _ => None,
    });
    assert!(loss.is_some_and(|l| l.is_finite() && l > 0.0), "{loss:?}");
}

#[test]
fn a_device_index_is_parsed_and_a_missing_device_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "dev.toml", "class-incremental", "");
    let out = d.path().join("dev");
    for (device, says) in [
        ("cpu:1", "`cpu` is one device and takes no index"),
        ("cuda:x", "`x` in `cuda:x` is not a device index"),
        ("gpu:0", "unknown device `gpu:0`"),
        #[cfg(not(feature = "cuda"))]
        (
            "cuda:1",
            "device `cuda:1`: this binary was built without CUDA",
        ),
        #[cfg(not(feature = "vulkan"))]
        (
            "vulkan:2",
            "device `vulkan:2`: this binary was built without Vulkan",
        ),
    ] {
        let (code, msg) = run_quiet(&cfg, &out, &["--device", device], &[]);
        assert_eq!(code, 2, "{device}: {msg}");
        assert!(msg.contains(says), "{device}: {msg}");
        assert!(!out.join("report.json").exists());
    }
}
