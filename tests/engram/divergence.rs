//! A diverging run on real data: with `[train] on_divergence = "restart"` (the default) it trains
//! the task again from its start with half the learning rate and `clip_norm = 1.0`, records a
//! `divergence` event and finishes; with `"stop"` it ends with the divergence error; and a
//! diverging AMP run's error says what AMP did (its skipped steps and loss scale).

use crate::util::{run_quiet, small_config};
use std::path::Path;

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// An MLP 784-400-400-4 at lr 0.5 without clipping ([`LR`], [`DEEP`]): its loss is NaN at
/// step 13 of task 0 (on AVX2 kernels).
fn diverging(dir: &Path) -> std::path::PathBuf {
    small_config(dir, "c.toml", "")
}

const LR: &str = "optimizer.lr=0.5";
const DEEP: &str = "model.hidden=[400, 400]";

#[test]
fn a_diverging_run_restarts_the_task_at_half_the_learning_rate_and_finishes() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = diverging(d.path());
    let out = d.path().join("restart");
    let (code, msg) = run_quiet(&cfg, &out, &["--set", LR, "--set", DEEP], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("warning: strategy `standard`: the loss is NaN at task 0, epoch 0, step "),
        "{msg}"
    );
    let r = json(&out.join("report.json"));
    assert_eq!(r["status"], "finished", "{r}");
    let events: Vec<_> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "divergence")
        .collect();
    assert_eq!(events.len(), 1, "{r}");
    assert_eq!(events[0]["task"], 0);
    let m = events[0]["message"].as_str().unwrap();
    assert!(m.contains("the loss is NaN at task 0"), "{m}");
    assert!(
        m.ends_with(
            "Restored the start of task 0 and training it again (restart 1 of at most 3, \
             on_divergence = \"restart\") with the learning rate ×0.5 (0.25) and clip_norm = 1 \
             for the rest of the run"
        ),
        "{m}"
    );
    // Every logged step of the run trained at the halved rate, 0.5 × 0.5.
    let steps = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    let lrs: Vec<&str> = steps
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(5).unwrap())
        .collect();
    assert!(
        !lrs.is_empty() && lrs.iter().all(|lr| *lr == "0.25"),
        "{steps}"
    );
    // Both tasks learnt: each is above 0.9 right after training on it (two classes each).
    let matrix = r["accuracy_matrix"].as_array().unwrap();
    for (t, row) in matrix.iter().enumerate() {
        let a = row[t].as_f64().unwrap();
        assert!(a > 0.9, "task {t}: {a} ({r})");
    }
    // The run's record counts the steps of the attempt that diverged too (those before the
    // diverging one), and the 16 steps of each finished task.
    let diverged_at = number_after(m, "the loss is NaN at task 0, epoch 0, step ");
    assert_eq!(
        r["training"]["steps"].as_f64(),
        Some(diverged_at + 32.0),
        "{r}"
    );
}

#[test]
fn on_divergence_stop_keeps_the_error() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = diverging(d.path());
    let out = d.path().join("stop");
    let stop = "train.on_divergence=\"stop\"";
    let (code, msg) = run_quiet(
        &cfg,
        &out,
        &["--set", LR, "--set", DEEP, "--set", stop],
        &[],
    );
    assert_eq!(code, 1, "{msg}");
    let step = number_after(
        &msg,
        "error: strategy `standard`: the loss is NaN at task 0, epoch 0, step ",
    );
    assert!(
        msg.contains(
            " of the task: training diverged. The loss's parts on that batch, recomputed in f32: the \
             cross-entropy NaN (not finite: the cross-entropy). The run's strategies: memory \
             standard; forgetting none (lower the learning rate (it is 0.5; try 0.25) or add \
             [train] clip_norm = 1.0)"
        ),
        "{msg}"
    );
    assert!(!msg.contains("Restored the start"), "{msg}");
    let r = json(&out.join("report.json"));
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["failure"]["global_step"].as_f64(), Some(step), "{r}");
    assert!(
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["kind"] != "divergence"),
        "{r}"
    );
}

/// The number after `prefix` in `msg`.
fn number_after(msg: &str, prefix: &str) -> f64 {
    let at = msg
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {msg}"))
        + prefix.len();
    let digits: String = msg[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().unwrap()
}

/// The newcomer's AMP run (f16, lr 0.5, no clipping): its error names AMP, the steps it
/// skipped and how it lowered the loss scale, 65536 halved once per skipped step.
#[test]
fn a_diverging_amp_run_says_what_amp_did() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(
        d.path(),
        "amp.toml",
        "[[forgetting]]\ntype = \"naive\"\n[[memory]]\ntype = \"amp\"\n",
    );
    let args = [
        "--set",
        LR,
        "--set",
        DEEP,
        "--set",
        "data.tasks=3",
        "--set",
        "data.subsample=1200",
        "--set",
        "train.batch_size=128",
    ];
    let stop = [&args[..], &["--set", "train.on_divergence=\"stop\""]].concat();
    let (code, msg) = run_quiet(&cfg, &d.path().join("stop"), &stop, &[]);
    assert_eq!(code, 1, "{msg}");
    let skipped = number_after(&msg, "`amp` (f16) skipped ");
    let steps = number_after(&msg, &format!("`amp` (f16) skipped {skipped} of "));
    let scale = number_after(&msg, "lowered the loss scale from 65536 to ");
    assert!(skipped >= 1.0 && steps > skipped, "{msg}");
    assert_eq!(scale, 65536.0 / 2f64.powf(skipped), "{msg}");
    assert!(
        msg.contains(&format!(
            "skipped {skipped} of {steps} steps (their gradients overflowed)"
        )),
        "{msg}"
    );
    assert!(
        msg.contains("The run's strategies: memory amp → standard; forgetting naive"),
        "{msg}"
    );
    // The default restarts: the warning says what AMP did, and the report holds AMP's figures.
    let out = d.path().join("restart");
    let (code, msg) = run_quiet(&cfg, &out, &args, &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("warning: ") && msg.contains("lowered the loss scale from 65536"),
        "{msg}"
    );
    let r = json(&out.join("report.json"));
    let amp = &r["memory"]["strategies"]["amp"];
    let history = amp["loss_scale_history"].as_array().unwrap();
    assert_eq!(
        amp["skipped_steps"].as_u64().unwrap() as usize,
        history.len(),
        "{amp}"
    );
    assert_eq!(
        amp["final_loss_scale"].as_f64().unwrap(),
        65536.0 / 2f64.powi(history.len() as i32),
        "{amp}"
    );
}

/// A run killed after its restart resumes with the restart's halved learning rate and clipping
/// (they are in the checkpoint) and ends with the uninterrupted run's matrix and events.
#[test]
fn a_restarted_run_resumes_to_the_same_report() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "checkpoint_every = 5\n");
    let args = ["--set", LR, "--set", DEEP];
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &args, &[]);
    assert_eq!(code, 0, "{msg}");
    // The first attempt diverges before global step 20; the retry is killed right after it.
    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(&cfg, &cut, &args, &[("ENGRAM_FAILPOINT", "step-20")]);
    assert_ne!(code, 0, "{msg}");
    assert!(msg.contains("Restored the start of task 0"), "{msg}");
    let newest = std::fs::read_to_string(cut.join("checkpoints/step-00000015/state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&newest).unwrap();
    assert_eq!(state["progress"]["divergence_restarts"], 1, "{state}");
    assert_eq!(state["progress"]["divergence_clip_norm"], 1.0, "{state}");
    assert_eq!(state["progress"]["adjust"][0], 0.5, "{state}");
    let (code, msg) = crate::util::run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    let (a, b) = (
        json(&full.join("report.json")),
        json(&cut.join("report.json")),
    );
    assert_eq!(a["accuracy_matrix"], b["accuracy_matrix"]);
    assert_eq!(a["events"], b["events"]);
    assert_eq!(
        std::fs::read(full.join("steps.csv")).unwrap(),
        std::fs::read(cut.join("steps.csv")).unwrap()
    );
}
