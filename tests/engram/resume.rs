//! Killed runs resume to the same result: SIGKILL-equivalent aborts at exact points through
//! the `ENGRAM_FAILPOINT` variable (mid-task, mid-checkpoint-write), a corrupted checkpoint
//! falls back to the previous one, a real Ctrl-C (SIGINT) checkpoints and exits 130, and the
//! final report equals an uninterrupted run's.

use crate::util::{engram, output, run, run_quiet, small_config};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A run's report.json without its machine-dependent keys (timings, throughput, memory).
pub(crate) fn stable(dir: &Path) -> Value {
    let mut r: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    for k in ["timings", "throughput", "memory"] {
        r.as_object_mut().unwrap().remove(k);
    }
    r
}

const EXTRA: &str = "checkpoint_every = 5\n[[forgetting]]\ntype = \"ema\"\ndecay = 0.9\n[[forgetting]]\ntype = \"replay\"\ncapacity = 60\nratio = 0.5\n\
                     priority = true\ndistill = 0.5\nupdate_logits = true\nclassifier = \"ncm\"\n[[forgetting]]\ntype = \"ewc\"\nlambda = 50.0\nfisher_samples = 100\n";

fn run_failing(cfg: &Path, out: &Path, failpoint: &str, resume: bool) -> (i32, String) {
    if !resume {
        return run_quiet(cfg, out, &[], &[("ENGRAM_FAILPOINT", failpoint)]);
    }
    let mut c = engram();
    c.args(["resume", out.to_str().unwrap(), "-q"]);
    output(c.env("ENGRAM_FAILPOINT", failpoint).output().unwrap())
}

/// An uninterrupted reference run (`full`) and the same config killed at `failpoint` (`cut`),
/// with `extra` appended to the small real-data config.
fn reference_and_killed(d: &Path, extra: &str, failpoint: &str) -> (PathBuf, PathBuf, PathBuf) {
    let cfg = small_config(d, "r.toml", extra);
    let full = d.join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let cut = d.join("cut");
    let (code, msg) = run_failing(&cfg, &cut, failpoint, false);
    assert_ne!(code, 0, "{msg}");
    assert!(msg.contains(&format!("failpoint `{failpoint}`")), "{msg}");
    (cfg, full, cut)
}

#[test]
fn killed_mid_task_and_mid_checkpoint_resumes_to_the_same_report() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "r.toml", EXTRA);
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");

    let cut = d.path().join("cut");
    // Killed right after step 8 of task 0 (checkpoint at step 5 exists).
    let (code, msg) = run_failing(&cfg, &cut, "step-8", false);
    assert_ne!(code, 0, "{msg}");
    assert!(msg.contains("failpoint `step-8`"), "{msg}");
    assert!(!cut.join("report.json").exists());
    // Resumed, then killed inside the next checkpoint write: the half-written one is ignored.
    let (code, msg) = run_failing(&cfg, &cut, "checkpoint-write", true);
    assert_ne!(code, 0, "{msg}");
    let tmp: Vec<_> = std::fs::read_dir(cut.join("checkpoints"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert_eq!(tmp.len(), 1, "a half-written checkpoint is left as .tmp");
    // Resumed again, killed in task 1.
    let (code, _) = run_failing(&cfg, &cut, "step-20", true);
    assert_ne!(code, 0);
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&full), stable(&cut));
}

#[test]
fn a_corrupted_checkpoint_falls_back_to_the_previous_one() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let (_, full, cut) = reference_and_killed(d.path(), EXTRA, "step-23");
    let mut cks: Vec<_> = std::fs::read_dir(cut.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    cks.sort();
    assert_eq!(cks.len(), 2);
    // Truncate the newest checkpoint's model file.
    let newest = cks.last().unwrap();
    let model = newest.join("model.bpk");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("skipping a checkpoint this run cannot use") && msg.contains("checksum"),
        "{msg}"
    );
    assert_eq!(stable(&full), stable(&cut));
}

#[test]
fn resume_without_a_run_is_a_typed_error() {
    let d = tempfile::tempdir().unwrap();
    let (code, msg) = run(&["resume", d.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("no run here"), "{msg}");
    assert!(!msg.contains("panicked"));
}

#[test]
fn eval_and_export_read_checkpoints() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "e.toml", "");
    let out = d.path().join("out");
    let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    // The newest checkpoint's model gives the report's last row.
    let (code, msg) = run(&["eval", out.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{msg}");
    let v: Value = serde_json::from_str(msg.trim()).unwrap();
    let r: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(v["accuracy"], r["accuracy_matrix"][1]);
    assert_eq!(v["tasks_trained"], 2);
    // The confusion matrix: 10 × 10, every evaluation row counted once, each task's
    // diagonal giving that task's accuracy in the report.
    let (code, msg) = run(&["eval", out.to_str().unwrap(), "--json", "--confusion"]);
    assert_eq!(code, 0, "{msg}");
    let v: Value = serde_json::from_str(msg.trim()).unwrap();
    let m: Vec<Vec<u64>> = serde_json::from_value(v["confusion"].clone()).unwrap();
    assert_eq!((m.len(), m[0].len()), (10, 10));
    for (t, task) in r["tasks"].as_array().unwrap().iter().enumerate() {
        let classes: Vec<usize> = serde_json::from_value(task["classes"].clone()).unwrap();
        let rows: u64 = classes.iter().map(|&c| m[c].iter().sum::<u64>()).sum();
        assert_eq!(rows, task["eval_samples"].as_u64().unwrap());
        let right: u64 = classes.iter().map(|&c| m[c][c]).sum();
        let acc = r["accuracy_matrix"][1][t].as_f64().unwrap();
        assert!((right as f64 / rows as f64 - acc).abs() < 1e-12, "task {t}");
    }
    let total: u64 = m.iter().flatten().sum();
    assert_eq!(total, 800, "two tasks of 400 test rows");
    let (code, text) = run(&["eval", out.to_str().unwrap(), "--confusion"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("recall"), "{text}");
    // Safetensors: a JSON header naming every parameter with its shape.
    let st = d.path().join("m.safetensors");
    let (code, msg) = run(&[
        "export",
        out.to_str().unwrap(),
        "--safetensors",
        st.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    let bytes = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(
        header["blocks.0.linear.weight"]["shape"],
        serde_json::json!([784, 64])
    );
    assert_eq!(
        header["blocks.1.linear.bias"]["shape"],
        serde_json::json!([10])
    );
    let (code, msg) = run(&["eval", d.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("no checkpoint here"), "{msg}");
    // A --seeds directory is named as such.
    std::fs::create_dir(d.path().join("seed-0")).unwrap();
    let (code, msg) = run(&["eval", d.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("OUT_DIR/seed-N"), "{msg}");
    // A damaged newest checkpoint is passed over with a warning, not silently.
    let mut steps: Vec<_> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    steps.sort();
    assert!(steps.len() >= 2, "{steps:?}");
    std::fs::write(steps.last().unwrap().join("model.bpk"), b"garbage").unwrap();
    let (code, msg) = run(&["eval", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("warning: skipping a checkpoint this run cannot use"),
        "{msg}"
    );
    // The run's copy of its config must be the one the checkpoints were made with (its
    // SHA-256 is in run.json); without that record, an error in it names the copy.
    let cfg_copy = out.join("config.toml");
    let mut text = std::fs::read_to_string(&cfg_copy).unwrap();
    text.push_str("garbage [\n");
    std::fs::write(&cfg_copy, text).unwrap();
    let (code, msg) = run(&["eval", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("changed since the run started"), "{msg}");
    let (code, msg) = run(&["resume", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("changed since the run started"), "{msg}");
    let run_json = out.join("run.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&run_json).unwrap()).unwrap();
    meta.as_object_mut().unwrap().remove("config_sha256");
    std::fs::write(&run_json, meta.to_string()).unwrap();
    let (code, msg) = run(&["eval", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(&format!("{}:", cfg_copy.display())), "{msg}");
}

/// A `--seeds` run killed during its first seed resumes as a whole: `engram resume OUT`
/// finishes that seed from its checkpoint, runs the seed never started, and writes the same
/// aggregate as an uninterrupted run.
#[test]
fn a_killed_multi_seed_run_resumes_every_seed() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "m.toml", "checkpoint_every = 5\n");
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &["--seeds", "0,1"], &[]);
    assert_eq!(code, 0, "{msg}");
    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(
        &cfg,
        &cut,
        &["--seeds", "0,1"],
        &[("ENGRAM_FAILPOINT", "step-12")],
    );
    assert_ne!(code, 0, "{msg}");
    assert!(
        !cut.join("seed-1/checkpoints").exists(),
        "seed 1 never started"
    );
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    let agg = |dir: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join("aggregate.json")).unwrap()).unwrap()
    };
    assert_eq!(agg(&cut)["seeds"], serde_json::json!([0, 1]));
    assert_eq!(agg(&cut)["metrics"], agg(&full)["metrics"]);
    for s in ["seed-0", "seed-1"] {
        assert_eq!(stable(&cut.join(s)), stable(&full.join(s)), "{s}");
    }
}

/// Ctrl-C (a real SIGINT) stops a run at the next step after writing a checkpoint, exits
/// 130 (128 + SIGINT) with the resume command, and `engram resume` finishes it to the same
/// report as an uninterrupted run.
#[test]
fn ctrl_c_writes_a_checkpoint_exits_130_and_resumes_to_the_same_report() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "epochs = 30\ncheckpoint_every = 1000\n");
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");

    let cut = d.path().join("cut");
    let child = engram()
        .args(["run", cfg.to_str().unwrap(), "--out", cut.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Signal once training has started (run.json is written before the first step).
    let started = std::time::Instant::now();
    while !cut.join("run.json").exists() {
        assert!(started.elapsed().as_secs() < 60, "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let (code, msg) = output(child.wait_with_output().unwrap());
    assert_eq!(code, 130, "{msg}");
    assert!(msg.contains("interrupted; writing a checkpoint"), "{msg}");
    assert!(
        msg.contains(&format!("engram resume {}", cut.display())),
        "{msg}"
    );
    assert!(!cut.join("report.json").exists(), "stopped before the end");
    let checkpoints = std::fs::read_dir(cut.join("checkpoints")).unwrap().count();
    assert!(checkpoints >= 1, "a checkpoint was written on Ctrl-C");
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&full), stable(&cut));
}

/// The checkpoint contract: a newest checkpoint that verifies (its manifest matches) but does
/// not decode into the run's strategies is passed over with a warning for the older one, and
/// the resumed report still equals the uninterrupted one; checkpoints copied in from a run with
/// another config are refused by resume and eval alike, naming both configs.
#[test]
fn checkpoints_that_do_not_decode_or_belong_elsewhere_are_not_used() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let (cfg, full, cut) = reference_and_killed(d.path(), EXTRA, "step-12");
    let newest = cut.join("checkpoints/step-00000010");
    // Replace the replay strategy's metadata by `null` and re-sign the manifest: the files
    // verify, the state does not decode.
    let state_path = newest.join("state.json");
    let mut state: Value = serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
    let replay = state["forgetting"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| s["name"] == "replay")
        .unwrap();
    replay["meta"] = Value::Null;
    let bytes = serde_json::to_vec(&state).unwrap();
    std::fs::write(&state_path, &bytes).unwrap();
    let manifest_path = newest.join("manifest.json");
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["files"]["state.json"] = engram::core::fsutil::sha256_hex(&bytes).into();
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();

    let (code, msg) = run(&["eval", cut.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("warning: skipping a checkpoint this run cannot use")
            && msg.contains("step-00000010"),
        "{msg}"
    );
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("step-00000010") && msg.contains("replay"),
        "{msg}"
    );
    assert_eq!(stable(&full), stable(&cut));

    // Checkpoints of a run with another memory size, copied into this one's directory.
    let other_cfg = small_config(
        d.path(),
        "o.toml",
        &EXTRA.replace("capacity = 60", "capacity = 80"),
    );
    let other = d.path().join("other");
    let (code, _) = run_failing(&other_cfg, &other, "step-12", false);
    assert_ne!(code, 0);
    let mixed = d.path().join("mixed");
    let (code, _) = run_failing(&cfg, &mixed, "step-7", false);
    assert_ne!(code, 0);
    std::fs::remove_dir_all(mixed.join("checkpoints")).unwrap();
    std::fs::rename(other.join("checkpoints"), mixed.join("checkpoints")).unwrap();
    for args in [
        &["resume"][..],
        &["eval"][..],
        &["export", "--safetensors", "/dev/null"][..],
    ] {
        let mut a = vec![args[0], mixed.to_str().unwrap()];
        a.extend(&args[1..]);
        let (code, msg) = run(&a);
        assert_eq!(code, 2, "{args:?}: {msg}");
        assert!(
            msg.contains("was written under another config"),
            "{args:?}: {msg}"
        );
    }
}

/// The device is not part of what a checkpoint belongs to: `resume`, `eval` and `export` take
/// `--device`, a device this build lacks is exit 2 naming it, and the resumed report equals
/// the uninterrupted one.
#[test]
fn resume_eval_and_export_take_a_device() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let (_, full, cut) = reference_and_killed(d.path(), "checkpoint_every = 5\n", "step-8");
    let c = cut.to_str().unwrap();
    for args in [
        &["resume", c, "--device", "tpu"][..],
        &["eval", c, "--device", "tpu"][..],
        &["export", c, "--safetensors", "/dev/null", "--device", "tpu"][..],
    ] {
        let (code, msg) = run(args);
        assert_eq!(code, 2, "{args:?}: {msg}");
        assert!(
            msg.contains("device `tpu`: unknown device"),
            "{args:?}: {msg}"
        );
    }
    let (code, msg) = run(&["eval", c, "--device", "cpu", "--json"]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = run(&["resume", c, "--device", "cpu", "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&full), stable(&cut));
}

/// Batch norm's running statistics reach the checkpoint with their latest update: Burn's
/// `RunningState` queues an update until the next one, and a checkpoint that saved the queued
/// value one step old made the CNN's resumed run drift (task-1 loss 0.21250 instead of 0.21296)
/// and EWC's Fisher pass read statistics a step old.
#[test]
fn a_batch_norm_model_with_ewc_resumes_to_the_same_report() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let extra = "checkpoint_every = 3\n[[forgetting]]\ntype = \"ewc\"\nfisher_samples = 50\n";
    let cfg = small_config(d.path(), "bn.toml", extra);
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "type = \"mlp\"\nhidden = [64]",
        "type = \"cnn\"\nchannels = [4, 8]",
    );
    std::fs::write(&cfg, text).unwrap();
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let cut = d.path().join("cut");
    let (code, msg) = run_failing(&cfg, &cut, "step-5", false);
    assert_ne!(code, 0, "{msg}");
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&full), stable(&cut));
}

/// A small table of four well-separated classes in two features (`train.csv`, `test.csv`):
/// class `k` around `(4·(k mod 2), 4·(k div 2))`, deterministic offsets.
fn write_blobs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let table = |n: usize, shift: usize| {
        let mut s = String::from("x,y,label\n");
        for i in 0..n {
            let k = i % 4;
            let (dx, dy) = (
                ((i * 7 + shift) % 11) as f64 / 10.0,
                ((i * 3 + shift) % 13) as f64 / 12.0,
            );
            let (cx, cy) = ((k % 2) as f64 * 4.0, (k / 2) as f64 * 4.0);
            s.push_str(&format!("{},{},c{k}\n", cx + dx - 0.5, cy + dy - 0.5));
        }
        s
    };
    std::fs::write(dir.join("train.csv"), table(160, 0)).unwrap();
    std::fs::write(dir.join("test.csv"), table(40, 5)).unwrap();
}

/// A config over the table in `data` (a path as written in the config), two tasks of two
/// classes.
fn blobs_config(data: &str) -> String {
    format!(
        "[run]\nseed = 0\n[data]\ndataset = \"blobs\"\nformat = \"csv\"\npath = \"{data}\"\ntasks = 2\n\
         classes_per_task = 2\n[model]\ntype = \"mlp\"\nhidden = [16]\n[optimizer]\ntype = \"sgd\"\n\
         lr = 0.05\nmomentum = 0.9\n[train]\nbatch_size = 16\nepochs = 2\n"
    )
}

/// Every file under `dir` (relative name → bytes) but the lock file, which resume takes
/// first: for "nothing changed" checks.
fn files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p != dir.join(".lock") {
                all.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    all
}

/// Issue #32, defect 7: a run whose config names its data by a relative path, restarted
/// from scratch (no checkpoints, no report) from another working directory, still finds its
/// data, and so do `eval` and a second restart: resuming keeps `run.json` naming the
/// original config, against whose directory the path resolves (it was rewritten to name
/// `OUT/config.toml`, and the data was then looked for in `OUT/mydata`).
#[test]
fn issue32_relative_data_path_survives_restart() {
    let d = tempfile::tempdir().unwrap();
    let x = d.path().join("x");
    write_blobs(&x.join("mydata"));
    std::fs::write(x.join("exp.toml"), blobs_config("mydata")).unwrap();
    let cwd = d.path().join("elsewhere");
    std::fs::create_dir_all(&cwd).unwrap();
    let in_cwd = |args: &[&str]| output(engram().current_dir(&cwd).args(args).output().unwrap());
    let out = d.path().join("out7");
    let (code, msg) = in_cwd(&["run", "../x/exp.toml", "--out", "../out7", "-q"]);
    assert_eq!(code, 0, "{msg}");
    let first = stable(&out);
    let run_json = std::fs::read(out.join("run.json")).unwrap();
    for restart in 1..=2 {
        std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
        std::fs::remove_file(out.join("report.json")).unwrap();
        let (code, msg) = in_cwd(&["resume", "../out7", "-q"]);
        assert_eq!(code, 0, "restart {restart}: {msg}");
        assert_eq!(
            std::fs::read(out.join("run.json")).unwrap(),
            run_json,
            "restart {restart}: run.json still names the original config"
        );
        assert_eq!(stable(&out), first, "restart {restart}: the same run again");
    }
    // eval reads the newest checkpoint: its accuracies are the matrix's last row.
    let (code, msg) = in_cwd(&["eval", "../out7", "--json"]);
    assert_eq!(code, 0, "{msg}");
    let line = msg.lines().find(|l| l.starts_with('{')).unwrap();
    let v: Value = serde_json::from_str(line).unwrap();
    let last = &first["accuracy_matrix"][1];
    assert_eq!(v["tasks_trained"], 2, "{v}");
    for t in 0..2 {
        let (got, want) = (
            v["accuracy"][t].as_f64().unwrap(),
            last[t].as_f64().unwrap(),
        );
        assert!(
            (got - want).abs() < 1e-9,
            "task {t}: eval {got}, report {want}"
        );
    }
}

/// A finished run of the blobs table in `d/out` (data at an absolute path).
fn finished_blobs_run(d: &Path) -> PathBuf {
    let data = d.join("blobs");
    write_blobs(&data);
    let cfg = d.join("b.toml");
    std::fs::write(&cfg, blobs_config(data.to_str().unwrap())).unwrap();
    let out = d.join("out");
    let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    out
}

/// Issue #32, defect 8: a resume that cannot work (here `OUT/checkpoints` is a regular file)
/// is refused as bad input (exit 2) naming the entry, before it writes anything: `run.json`,
/// the report and every other file of the run are as they were (it used to rewrite
/// `run.json` and then fail with exit 1 and a raw "File exists").
#[test]
fn issue32_failed_resume_leaves_the_run_unchanged() {
    let d = tempfile::tempdir().unwrap();
    let out = finished_blobs_run(d.path());
    std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
    std::fs::write(out.join("checkpoints"), "not a directory").unwrap();
    let before = files(&out);
    let (code, msg) = run(&["resume", out.to_str().unwrap(), "-q"]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("checkpoints") && msg.contains("is a file") && !msg.contains("File exists"),
        "{msg}"
    );
    assert_eq!(files(&out), before, "nothing of the run changed");
}

/// Issue #32: `OUT/.lock` or `OUT/report.json` a directory is bad input on resume (exit 2,
/// naming the entry), not exit 1 with a raw OS error; the run is left as it was.
#[test]
fn issue32_lock_or_report_a_directory_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let out = finished_blobs_run(d.path());
    for name in [".lock", "report.json"] {
        let path = out.join(name);
        let saved = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir(&path).unwrap();
        let before = files(&out);
        let (code, msg) = run(&["resume", out.to_str().unwrap(), "-q"]);
        assert_eq!(code, 2, "{name}: {msg}");
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("is a directory"),
            "{name}: {msg}"
        );
        assert_eq!(files(&out), before, "{name}: nothing of the run changed");
        std::fs::remove_dir(&path).unwrap();
        if let Some(bytes) = saved {
            std::fs::write(&path, bytes).unwrap();
        }
    }
}
