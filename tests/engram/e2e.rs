//! End to end on a slice of the real Fashion-MNIST: the report, its metrics against the
//! matrix, determinism, multi-seed aggregation, the joint and permuted scenarios.

use crate::util::{run, small_config};
use serde_json::Value;
use std::path::Path;

fn report(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

fn matrix(r: &Value) -> Vec<Vec<f64>> {
    matrix_at(r, "accuracy_matrix")
}

/// The matrix under `key` (`accuracy_matrix`, `task_il_accuracy_matrix`).
fn matrix_at(r: &Value, key: &str) -> Vec<Vec<f64>> {
    r[key]
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

/// The report without the keys that measure the machine.
fn stable(mut r: Value) -> Value {
    for k in r["machine_dependent_keys"].as_array().unwrap().clone() {
        r.as_object_mut().unwrap().remove(k.as_str().unwrap());
    }
    r
}

#[test]
fn two_real_tasks_report_and_metrics() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "split.toml", "");
    let out = d.path().join("out");
    let (code, msg) = run(&["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("accuracy matrix"),
        "summary table printed:\n{msg}"
    );
    let r = report(&out);
    let m = matrix(&r);
    assert_eq!(m.len(), 2);
    assert!(m[0][0] > 0.9 && m[1][1] > 0.8, "learned each task: {m:?}");
    // Class-incremental naive: the new task overwrites the old one.
    assert!(m[1][0] < m[0][0], "forgetting happened: {m:?}");
    // The metrics are the formulas applied to this matrix.
    let b: Vec<f64> = r["random_init_accuracy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let x = &r["metrics"];
    let close = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
    assert!(close(&x["acc"], (m[1][0] + m[1][1]) / 2.0));
    assert!(close(&x["bwt"], m[1][0] - m[0][0]));
    assert!(close(&x["forgetting"], m[0][0] - m[1][0]));
    assert!(close(&x["fwt"], m[0][1] - b[1]));
    assert!(close(&x["retention"], m[1][0] / m[0][0]));
    // The task-IL view: the same cells with the logits restricted to the task's classes. A
    // row the class-IL head gets right (its prediction is among the task's classes) stays
    // right, so no cell is below its class-IL one; the old task, lost to the new classes in
    // the class-IL view (naive), is still told apart within its own pair.
    let t = matrix_at(&r, "task_il_accuracy_matrix");
    assert_eq!((t.len(), t[0].len()), (2, 2));
    for i in 0..2 {
        for j in 0..2 {
            assert!(t[i][j] >= m[i][j] && t[i][j] <= 1.0, "{t:?} vs {m:?}");
        }
    }
    assert!(t[1][0] > m[1][0] + 0.2, "{t:?} vs {m:?}");
    let y = &r["task_il_metrics"];
    assert!(close(&y["acc"], (t[1][0] + t[1][1]) / 2.0));
    assert!(close(&y["bwt"], t[1][0] - t[0][0]));
    assert!(
        msg.contains("task-IL (logits restricted to each task's classes): ACC "),
        "{msg}"
    );
    // Both tasks were learned: retention needs no note.
    assert!(r["retention_note"].is_null(), "{r}");
    // The documented keys exist.
    assert_eq!(r["schema_version"], 1);
    assert!(r["memory"]["peak_bytes"].as_u64().unwrap() > 0);
    assert!(r["throughput"]["train_samples_per_s"].as_f64().unwrap() > 0.0);
    assert!(r["timings"]["total_s"].as_f64().unwrap() > 0.0);
    assert_eq!(r["tasks"][0]["train_samples"], 1000);
    // CSVs: one row per cell; steps logged every 10 steps.
    let csv = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4);
    assert!(csv.starts_with("trained_task,evaluated_task,accuracy,samples\n0,0,"));
    let steps = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    assert!(steps.starts_with("task,epoch,step,global_step,loss,lr,samples\n"));
    // 2 tasks × ceil(1000/64) = 16 steps: a window of 10 and the remaining 6 per task.
    assert_eq!(steps.lines().count(), 1 + 4, "{steps}");
    assert!(steps.contains("\n0,0,15,15,"), "{steps}");
    assert!(out.join("config.toml").is_file());
    // A healthy run learns each task: no at-chance warning.
    assert!(!msg.contains("no better than chance"), "{msg}");
    assert_eq!(r["events"], serde_json::json!([]));

    // A model that does not learn (learning rate 1e-9) is flagged for every task, on stderr and
    // in the report's events, instead of finishing silently.
    let dead = d.path().join("dead");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        dead.to_str().unwrap(),
        "-q",
        "--set",
        "optimizer.lr=1e-9",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&dead);
    let m = matrix(&r);
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    for (t, e) in events.iter().enumerate() {
        assert_eq!(e["kind"], "at-chance");
        assert_eq!(e["task"], t);
        let says = format!("task {t} scores {:.3} right after training on it", m[t][t]);
        assert!(e["message"].as_str().unwrap().starts_with(&says), "{e}");
        assert!(msg.contains(&format!("warning: {says}")), "{msg}");
        assert!(m[t][t] <= 0.52, "{m:?}");
    }
}

#[test]
fn same_seed_same_report_and_seeds_aggregate() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "det.toml", "");
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for o in [&a, &b] {
        let (code, msg) = run(&[
            "run",
            f.to_str().unwrap(),
            "--out",
            o.to_str().unwrap(),
            "-q",
        ]);
        assert_eq!(code, 0, "{msg}");
    }
    assert_eq!(stable(report(&a)), stable(report(&b)));
    // Another seed changes the run.
    let c = d.path().join("c");
    let (code, _) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        c.to_str().unwrap(),
        "--seed",
        "5",
        "-q",
    ]);
    assert_eq!(code, 0);
    assert_ne!(matrix(&report(&a)), matrix(&report(&c)));
    // Several seeds: one run each plus mean ± std.
    let s = d.path().join("seeds");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        s.to_str().unwrap(),
        "--seeds",
        "0,5",
    ]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("mean ± std over 2 seeds"), "{msg}");
    let agg: Value =
        serde_json::from_slice(&std::fs::read(s.join("aggregate.json")).unwrap()).unwrap();
    let acc0 = report(&s.join("seed-0"))["metrics"]["acc"]
        .as_f64()
        .unwrap();
    let acc5 = report(&s.join("seed-5"))["metrics"]["acc"]
        .as_f64()
        .unwrap();
    assert_eq!(acc0, report(&a)["metrics"]["acc"].as_f64().unwrap());
    let mean = agg["metrics"]["acc"]["mean"].as_f64().unwrap();
    assert!((mean - (acc0 + acc5) / 2.0).abs() < 1e-12);
    let sd = agg["metrics"]["acc"]["std"].as_f64().unwrap();
    assert!((sd - (acc0 - acc5).abs() / 2f64.sqrt()).abs() < 1e-12);
}

#[test]
fn joint_and_permuted_and_task_incremental() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "joint.toml", "joint = true\n");
    let o = d.path().join("joint");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&o);
    let m = matrix(&r);
    assert_eq!(
        (m.len(), m[0].len()),
        (1, 2),
        "joint: one row over both tasks"
    );
    assert!(m[0].iter().all(|&a| a > 0.8), "{m:?}");
    assert!(r["metrics"]["bwt"].is_null());

    let f = small_config(d.path(), "perm.toml", "");
    let o = d.path().join("perm");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "-q",
        "--set",
        "data.scenario=\"domain-incremental\"",
        "--set",
        "data.classes_per_task=10",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&o);
    assert_eq!(r["scenario"], "domain-incremental");
    assert_eq!(r["tasks"][1]["classes"].as_array().unwrap().len(), 10);
    assert!(matrix(&r)[1][1] > 0.5);

    let f = small_config(d.path(), "til.toml", "");
    let o = d.path().join("til");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "-q",
        "--set",
        "data.scenario=\"task-incremental\"",
    ]);
    assert_eq!(code, 0, "{msg}");
    // With the task id known, the old task survives much better than class-incrementally.
    let m = matrix(&report(&o));
    assert!(m[1][0] > 0.6, "task-incremental keeps task 0: {m:?}");
}

#[test]
fn list_shows_builtins_with_origin() {
    let (code, msg) = run(&["list", "--json"]);
    assert_eq!(code, 0, "{msg}");
    let v: Value = serde_json::from_str(&msg).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let builtins = engram::strategies::BUILTINS
        .iter()
        .chain(engram::core::strategy::BUILTINS)
        .chain(engram::core::model::BUILTINS)
        .chain(engram::core::data::BUILTINS);
    for r in builtins {
        assert!(names.contains(&r.name), "{} missing from {names:?}", r.name);
    }
    for n in ["mlp", "cnn", "vit", "fashion-mnist"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|e| e["origin"] == "built-in")
    );
    let (code, text) = run(&["list"]);
    assert_eq!(code, 0);
    assert!(
        text.contains("[forgetting]") && text.contains("naive"),
        "{text}"
    );
}

/// Retention is a ratio to the diagonals: when an old task was at chance right after training
/// on it (the replay recipe on 3 short tasks: task 1's new classes are not picked yet), the
/// ratio reads above 1 and the report and the summary say it is not a share kept.
#[test]
fn retention_explains_itself_when_an_old_task_was_never_learned() {
    // The replay recipe with a fixed per-step decay of 0.95 (about 20 steps) on tasks of 13
    // steps: weight averaging over the whole task holds the new classes' logits down, and
    // task 1 is at chance in the class-IL view right after training.
    let d = tempfile::tempdir().unwrap();
    let recipe = std::fs::read_to_string("examples/split-fmnist-replay.toml").unwrap();
    assert!(recipe.contains("\nhorizon = 0.25\n"));
    let fixed = d.path().join("fixed-decay.toml");
    std::fs::write(
        &fixed,
        recipe.replace("\nhorizon = 0.25\n", "\ndecay = 0.95\n"),
    )
    .unwrap();
    let short = [
        "--set",
        "data.subsample=1600",
        "--set",
        "data.tasks=3",
        "--set",
        "data.test_subsample=400",
    ];
    let out = d.path().join("out");
    let mut args = vec![
        "run",
        fixed.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(short);
    let (code, msg) = run(&args);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    assert!(r["metrics"]["retention"].as_f64().unwrap() > 1.0, "{r}");
    let note = r["retention_note"].as_str().expect("a retention note");
    assert!(note.starts_with("task(s) 1"), "{note}");
    assert!(
        note.contains("scored no better than chance right after training on them"),
        "{note}"
    );
    assert!(msg.contains("  retention: task(s) 1"), "{msg}");

    // The shipped recipe's horizon is a quarter of each task (3 of its 13 steps): task 1 is
    // learned (0.7475 on seed 0 here, against 0.3825 with the fixed decay) and retention is a
    // share again.
    let shipped = d.path().join("shipped");
    let mut args = vec![
        "run",
        "examples/split-fmnist-replay.toml",
        "--out",
        shipped.to_str().unwrap(),
    ];
    args.extend(short);
    let (code, msg) = run(&args);
    assert_eq!(code, 0, "{msg}");
    let r = report(&shipped);
    let m = &r["accuracy_matrix"];
    assert!(m[1][1].as_f64().unwrap() > 0.6, "{m}");
    assert!(r["retention_note"].is_null(), "{r}");
}

/// The library's multi-seed run ([`engram::seeds`], what `engram run --seeds` calls, and
/// [`engram::Experiment::run_seeds`]) writes the command's layout: `seed-N/` runs and the same
/// `aggregate.json`.
#[test]
fn the_library_runs_seeds_as_the_command_does() {
    crate::util::require_fmnist!();
    use engram::core::train::trainer;
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "s.toml", "");
    let cli = d.path().join("cli");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        cli.to_str().unwrap(),
        "--seeds",
        "0,5",
        "-q",
    ]);
    assert_eq!(code, 0, "{msg}");
    let lib = d.path().join("lib");
    let registry = engram::registry();
    let configs = engram::seeds::configs(&f, &[], &[0, 5]).unwrap();
    let outcome = engram::seeds::run(
        engram::seeds::Plan {
            configs,
            first: None,
            target: lib.clone(),
            progress: false,
            prepare: &mut |c| trainer::prepare(c, &registry),
        },
        &mut (),
    )
    .unwrap();
    assert!(outcome.error().is_none());
    let agg = |dir: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join("aggregate.json")).unwrap()).unwrap()
    };
    let (a, b) = (agg(&cli), agg(&lib));
    assert_eq!(outcome.aggregate.as_ref(), Some(&b));
    for key in ["seeds", "runs", "failed"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    assert_eq!(a["metrics"]["acc"], b["metrics"]["acc"]);
    assert_eq!(b["seeds"], serde_json::json!([0, 5]));
    for s in ["seed-0", "seed-5"] {
        assert_eq!(matrix(&report(&cli.join(s))), matrix(&report(&lib.join(s))));
        assert!(lib.join(s).join("config.toml").is_file());
    }
    // A repeated seed is refused before anything is written.
    let e = engram::seeds::configs(&f, &[], &[1, 1]).err().unwrap();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("repeats a seed"), "{e}");
}

/// [`engram::Experiment::run_seeds`]: a program's typed experiment over several seeds.
#[test]
fn an_experiment_runs_several_seeds() {
    crate::util::require_fmnist!();
    use engram::core::model::mlp::MlpParams;
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("exp");
    let outcome = engram::Experiment::new()
        .dataset_named("fashion-mnist")
        .data(|d| {
            d.tasks = Some(2);
            d.classes_per_task = Some(2.into());
            d.subsample = Some(600);
            d.test_subsample = Some(200);
        })
        .model(MlpParams {
            hidden: vec![16],
            ..MlpParams::default()
        })
        .run_seeds(&out, &[1, 2])
        .unwrap();
    assert!(outcome.error().is_none());
    assert_eq!(outcome.reports.len(), 2);
    let agg = outcome.aggregate.unwrap();
    assert_eq!(agg["seeds"], serde_json::json!([1, 2]));
    let acc: Vec<f64> = outcome
        .reports
        .iter()
        .map(|r| r.metrics.acc.unwrap())
        .collect();
    let mean = agg["metrics"]["acc"]["mean"].as_f64().unwrap();
    assert!((mean - (acc[0] + acc[1]) / 2.0).abs() < 1e-12, "{agg}");
    for s in ["seed-1", "seed-2"] {
        assert!(out.join(s).join("report.json").is_file(), "{s}");
    }
    assert!(out.join("aggregate.json").is_file());
}
