//! `[[forgetting]] type = "moe-lora"` and `lora` on the activation path through the real binary
//! (issue #30): a small BERT on the two-task text stream of the LoRA tests grows a pool of
//! experts per task with a router, reports the router's choices per task, counts its
//! parameters, composes with segment checkpointing, resumes a killed run to the same report, and
//! is refused without activation-path adapters.

use crate::resume::stable;
use crate::util::{run, run_quiet};
use serde_json::Value;
use std::path::Path;

fn report(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

const LORA: &str = "[[memory]]\ntype = \"lora\"\nrank = 2\npath = \"activation\"\n";
const MOE: &str =
    "[[forgetting]]\ntype = \"moe-lora\"\nexperts_per_task = 2\ntop_k = 1\nbalance = 0.05\n";

#[test]
fn moe_lora_grows_experts_per_task_reports_routing_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let full = crate::lora::config(d.path(), "");
    let (code, out) = run_quiet(&full, &d.path().join("full"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let cfg = crate::lora::config(d.path(), &format!("{LORA}{MOE}"));
    let (code, out) = run_quiet(&cfg, &d.path().join("moe"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let r = report(&d.path().join("moe"));
    if std::env::var("ENGRAM_TEST_DUMP").is_ok() {
        eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    }
    let m = &r["forgetting"]["moe-lora"];
    assert_eq!(m["experts"], 4, "{m}");
    // After task 0 its inputs can only choose its experts; after task 1 each row is a
    // distribution over the two tasks' experts.
    let routing = m["routing"].as_array().unwrap();
    assert_eq!(routing.len(), 2, "{m}");
    assert_eq!(routing[0], serde_json::json!([[1.0]]), "{m}");
    for row in routing[1].as_array().unwrap() {
        let shares: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(shares.len(), 2);
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{m}");
    }
    // Parameters: the base, and on query and value of the one encoder layer (16 → 16) four
    // rank-2 experts ((16 + 16) · 2 each) and a router column [16] per expert.
    let (fp, mp) = (
        r["memory"]["parameters"].as_u64().unwrap(),
        report(&d.path().join("full"))["memory"]["parameters"]
            .as_u64()
            .unwrap(),
    );
    assert_eq!(fp, mp + 2 * (4 * 64 + 4 * 16), "{}", r["memory"]);
    // What trains at the end: the last task's two experts and router columns, and the head.
    let head = r["memory"]["trainable_parameters"].as_u64().unwrap() - 2 * (2 * 64 + 2 * 16);
    assert_eq!(head, 16 * 2 + 2, "{}", r["memory"]);

    // Killed in task 1 (after task 0's experts froze and task 1's grew), resumed: the same.
    let cut = d.path().join("cut");
    let (code, _) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-5")]);
    assert_ne!(code, 0);
    let (code, out) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(stable(&cut), stable(&d.path().join("moe")));

    // Segment checkpointing gives the same run: the balance term's gradient reaches the
    // recomputed segments' routers.
    let ck = crate::lora::config(
        d.path(),
        &format!("{LORA}[[memory]]\ntype = \"checkpoint\"\ninterval = 1\n{MOE}"),
    );
    let (code, out) = run_quiet(&ck, &d.path().join("ck"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let c = report(&d.path().join("ck"));
    let cells = |v: &Value| -> Vec<f64> {
        v["accuracy_matrix"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|x| x.as_f64())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for (a, b) in cells(&c).iter().zip(cells(&r)) {
        assert!(
            (a - b).abs() < 1e-9,
            "checkpointed {} vs plain {}",
            c["accuracy_matrix"],
            r["accuracy_matrix"]
        );
    }
    assert_eq!(c["forgetting"]["moe-lora"]["routing"], m["routing"]);
}

/// `moe-lora` over Burn's weight-path LoRA is refused at its entry with the key to set, and
/// `lora` with dropout runs on the activation path, merges per task and exports plain weights.
#[test]
fn moe_lora_needs_activation_adapters_and_lora_dropout_runs_on_them() {
    let d = tempfile::tempdir().unwrap();
    let cfg = crate::lora::config(
        d.path(),
        &format!("[[memory]]\ntype = \"lora\"\nrank = 2\n{MOE}"),
    );
    let (code, out) = run_quiet(&cfg, &d.path().join("weight"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("path = \\\"activation\\\"") || out.contains("path = \"activation\""),
        "{out}"
    );
    let cfg = crate::lora::config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\ndropout = 0.1\nmerge = \"task\"\n",
    );
    let (code, out) = run_quiet(&cfg, &d.path().join("drop"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let r = report(&d.path().join("drop"));
    assert_eq!(r["memory"]["strategies"]["lora"]["merges"], 2);
    let keys = crate::lora::exported_keys(&d.path().join("drop"), &d.path().join("m.safetensors"));
    assert!(!keys.iter().any(|k| k.contains("adapters")), "{keys:?}");
}

/// `per-task-lora` reads the adapters on either path: on the activation path it answers each
/// task with its own expert (task-IL 1.0 on the two one-class tasks, every class-IL cell equal
/// to its task-identification cell), as on the weight path (lora.rs; o-lora's test runs both).
#[test]
fn per_task_lora_runs_on_the_activation_path() {
    let d = tempfile::tempdir().unwrap();
    let cfg = crate::lora::config(
        d.path(),
        "[[memory]]\ntype = \"lora\"\nrank = 2\npath = \"activation\"\n[[forgetting]]\ntype = \"per-task-lora\"\n",
    );
    let (code, out) = run_quiet(&cfg, &d.path().join("p"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    let p = report(&d.path().join("p"));
    assert_eq!(
        p["task_il_accuracy_matrix"][1],
        serde_json::json!([1.0, 1.0]),
        "{p}"
    );
    let (acc, tid) = (&p["accuracy_matrix"], &p["task_id_matrix"]);
    for (a_row, t_row) in acc.as_array().unwrap().iter().zip(tid.as_array().unwrap()) {
        for (a, t) in a_row
            .as_array()
            .unwrap()
            .iter()
            .zip(t_row.as_array().unwrap())
        {
            if let (Some(a), Some(t)) = (a.as_f64(), t.as_f64()) {
                assert!((a - t).abs() < 1e-12, "{a} vs {t}: {p}");
            }
        }
    }
}

/// The adapter strategies' settings are refused before anything runs: `engram validate` says
/// it at the strategy's entry (exit 2) for moe-lora over a weight-path lora, over a lora that
/// merges each task, and without lora; o-lora without merge = "task"; per-task-lora with it;
/// two strategies that own the adapters' structure, or one of them listed twice; a pool of
/// experts above `MAX_POOL`.
#[test]
fn adapter_strategy_settings_are_refused_by_validate() {
    let d = tempfile::tempdir().unwrap();
    let lora = |extra: &str| format!("[[memory]]\ntype = \"lora\"\nrank = 2\n{extra}");
    for (memory, forgetting, says) in [
        (lora(""), MOE.to_string(), "set path = "),
        (
            lora("path = \"activation\"\nmerge = \"task\"\n"),
            MOE.to_string(),
            "set merge = ",
        ),
        (String::new(), MOE.to_string(), "no [[memory]] type = "),
        (
            lora(""),
            "[[forgetting]]\ntype = \"o-lora\"\n".into(),
            "set merge = ",
        ),
        (
            lora("merge = \"task\"\n"),
            "[[forgetting]]\ntype = \"per-task-lora\"\n".into(),
            "set merge = ",
        ),
        // Two owners of the adapters' structure: one listed twice, or two of them.
        (
            lora("path = \"activation\"\n"),
            format!("{MOE}{MOE}"),
            "`moe-lora` is listed twice: each entry would own the structure of `lora`'s adapters",
        ),
        (
            lora("path = \"activation\"\n"),
            format!("{MOE}[[forgetting]]\ntype = \"per-task-lora\"\n"),
            "`per-task-lora` and `moe-lora` both own the structure of `lora`'s adapters",
        ),
        (
            lora("merge = \"task\"\n"),
            "[[forgetting]]\ntype = \"o-lora\"\n[[forgetting]]\ntype = \"o-lora\"\n".into(),
            "`o-lora` is listed twice",
        ),
        // A pool of thousands of experts (a typo) is refused before it is allocated, with the
        // largest setting that fits this stream's 2 tasks.
        (
            lora("path = \"activation\"\n"),
            "[[forgetting]]\ntype = \"moe-lora\"\nexperts_per_task = 100000\n".into(),
            "a pool of 200000 experts, above the 1024",
        ),
        (
            lora("path = \"activation\"\n"),
            "[[forgetting]]\ntype = \"moe-lora\"\nexperts_per_task = 513\n".into(),
            "experts_per_task = 512 at most",
        ),
    ] {
        let cfg = crate::lora::config(d.path(), &format!("{memory}{forgetting}"));
        let (code, out) = run(&["validate", cfg.to_str().unwrap()]);
        assert_eq!(code, 2, "{memory}{forgetting}: {out}");
        assert!(out.contains(says), "{memory}{forgetting}: {out}");
        assert!(
            out.contains(&format!("{}:", cfg.display())),
            "positioned: {out}"
        );
    }
}
