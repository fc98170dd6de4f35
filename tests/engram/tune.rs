//! `engram tune` through the real binary on real Fashion-MNIST: the grid runs on the first
//! tasks' validation split only, the choice is the best mean ACC recomputed here from the
//! runs' reports, and the tuned config is the original with the chosen value.

use crate::util::{engram, output, require_fmnist};
use std::path::Path;

/// A 3-task Split-FMNIST config, small enough for a test (300 training samples a task).
fn config(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("small.toml");
    std::fs::write(
        &p,
        "[run]\nseed = 0\n[data]\ndataset = \"fashion-mnist\"\ntasks = 3\nclasses_per_task = 2\n\
         subsample = 300\ntest_subsample = 200\n[model]\ntype = \"mlp\"\nhidden = [32]\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[train]\nbatch_size = 64\n",
    )
    .unwrap();
    p
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn tune_chooses_on_the_first_tasks_validation_split_then_runs_the_choice() {
    let _ = require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let out = d.path().join("tune");
    let o = engram()
        .args([
            "tune",
            cfg.to_str().unwrap(),
            "--grid",
            "optimizer.lr=0.005,0.05",
        ])
        .args([
            "--tasks",
            "2",
            "--seeds",
            "0,1",
            "--then-run",
            "--jobs",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let (code, text) = output(o);
    assert_eq!(code, 0, "{text}");
    // Each grid run saw the first 2 tasks, evaluated on the validation split.
    let mut means = Vec::new();
    for lr in ["0.005", "0.05"] {
        let mut accs = Vec::new();
        for seed in [0, 1] {
            let r = json(&out.join(format!("grid/lr-{lr}/seed-{seed}/report.json")));
            assert_eq!(r["accuracy_matrix"].as_array().unwrap().len(), 2);
            let c =
                std::fs::read_to_string(out.join(format!("grid/lr-{lr}/seed-{seed}/config.toml")))
                    .unwrap();
            assert!(
                c.contains("evaluate_on = \"validation\"") && c.contains("validation = 0.1"),
                "{c}"
            );
            accs.push(r["metrics"]["acc"].as_f64().unwrap());
        }
        means.push((accs[0] + accs[1]) / 2.0);
    }
    let best = if means[1] > means[0] { 1 } else { 0 };
    let t = json(&out.join("tune.json"));
    assert_eq!(t["chosen"], best);
    for (k, m) in means.iter().enumerate() {
        let got = t["points"][k]["acc_mean"].as_f64().unwrap();
        assert!((got - m).abs() < 1e-12, "{got} vs {m}");
    }
    // The tuned config: the original stream (3 tasks, test split) with the chosen rate.
    let tuned = std::fs::read_to_string(out.join("tuned.toml")).unwrap();
    let v: toml::Table = toml::from_str(&tuned).unwrap();
    let lr = [0.005, 0.05][best];
    assert_eq!(v["optimizer"]["lr"].as_float(), Some(lr), "{tuned}");
    assert_eq!(v["data"]["tasks"].as_integer(), Some(3));
    assert!(v["data"].get("evaluate_on").is_none() && v["data"].get("validation").is_none());
    assert!(
        text.contains(&format!("chosen: optimizer.lr={lr}")),
        "{text}"
    );
    // --then-run: the whole stream, over the same seeds.
    for seed in [0, 1] {
        let r = json(&out.join(format!("final/tuned/seed-{seed}/report.json")));
        assert_eq!(r["accuracy_matrix"].as_array().unwrap().len(), 3);
    }
    // A rerun resumes: every run is skipped, the same choice.
    let o = engram()
        .args([
            "tune",
            cfg.to_str().unwrap(),
            "--grid",
            "optimizer.lr=0.005,0.05",
        ])
        .args(["--tasks", "2", "--seeds", "0,1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let (code, text) = output(o);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("(0 now, 4 before)"), "{text}");
}

#[test]
fn tune_refuses_its_own_keys_and_too_many_tasks() {
    let _ = require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let out = d.path().join("t");
    let cases: [(&[&str], &str); 4] = [
        (&["--grid", "data.tasks=1,2"], "engram tune sets it itself"),
        (
            &["--grid", "optimizer.lr=0.1", "--set", "data.validation=0.2"],
            "sets `data.validation` itself",
        ),
        (
            &["--grid", "optimizer.lr=0.1", "--tasks", "4"],
            "the stream has 3 tasks",
        ),
        (
            &["--grid", "optimizer.lr=0.1", "--validation", "0.7"],
            "--validation 0.7",
        ),
    ];
    for (args, want) in cases {
        let o = engram()
            .args([
                "tune",
                cfg.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .args(args)
            .output()
            .unwrap();
        let (code, text) = output(o);
        assert_eq!(code, 2, "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: {text}");
    }
    assert!(!out.exists());
}

#[test]
fn the_held_out_table_is_generated_and_in_the_book() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = crate::util::generated_figure("heldout");
    // One row per config: naive, plain replay, the shipped recipe, the re-tuned recipe.
    let main = table
        .split_once("| config |")
        .unwrap()
        .1
        .split("\n\n")
        .next()
        .unwrap();
    let rows = main
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .count();
    assert_eq!(rows, 4, "{table}");
    // The grid's own table: 4 distill × 3 horizon values, one chosen.
    let grid = table.split_once("| distill | horizon |").unwrap().1;
    assert_eq!(
        grid.lines().filter(|l| l.starts_with("| ")).count(),
        12,
        "{table}"
    );
    assert_eq!(grid.matches("(chosen)").count(), 1, "{table}");
    assert!(table.contains("chose\n`forgetting.1.distill="), "{table}");
    for chapter in ["suite.md", "tuning.md"] {
        let md = std::fs::read_to_string(root.join("book/src").join(chapter)).unwrap();
        assert!(md.contains("{{#include figures/heldout.md}}"), "{chapter}");
    }
    let script = std::fs::read_to_string(root.join("bench/heldout.sh")).unwrap();
    assert!(script.contains("> book/src/figures/heldout.md.tmp"));
}
