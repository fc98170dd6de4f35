//! Nothing a user owns is lost: the output directory contract. A directory that is not an
//! engram run is refused untouched; a new run replaces a run only when it finishes (a failing
//! one leaves it byte for byte and keeps its own record in `attempts/`); a diverged run records
//! its steps and where it stopped; a second writer is refused while the first holds the lock.

use crate::util::{engram, output, run, small_config};
use serde_json::Value;
use std::path::Path;

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn run_to(cfg: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = engram();
    c.args(["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    output(c.output().unwrap())
}

fn attempts(out: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(out.join("attempts"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_directory_that_is_not_a_run_is_refused_and_left_untouched() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let mine = d.path().join("mine");
    std::fs::create_dir_all(mine.join("plots")).unwrap();
    for f in ["notes.txt", "plots/f.png", "metrics.csv", "config.toml"] {
        std::fs::write(mine.join(f), "keep").unwrap();
    }
    let (code, msg) = run_to(&cfg, &mine, &["-q"], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("holds files that engram did not write"),
        "{msg}"
    );
    let (code, msg) = run_to(&cfg, &mine, &["-q", "--overwrite"], &[]);
    assert_eq!(code, 2, "{msg}");
    for f in ["notes.txt", "plots/f.png", "metrics.csv", "config.toml"] {
        assert_eq!(
            std::fs::read_to_string(mine.join(f)).unwrap(),
            "keep",
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&mine).unwrap().count(),
        4,
        "nothing added"
    );
    // `[run] out = ""` is not the current directory.
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--set", "run.out=\"\"", "-q"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("empty path"), "{msg}");
}

#[test]
fn a_run_is_replaced_only_by_a_run_that_finishes() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "checkpoint_every = 3\n");
    let out = d.path().join("out");
    let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
    assert_eq!(code, 0, "{msg}");
    let first = std::fs::read(out.join("report.json")).unwrap();
    let steps = std::fs::read(out.join("steps.csv")).unwrap();

    // A failing run, with and without --overwrite: the finished run is kept byte for byte,
    // and each attempt keeps its own record.
    for extra in [&["--overwrite"][..], &[][..]] {
        let mut args = vec!["-q", "--set", "optimizer.lr=1e30"];
        args.extend(extra);
        let (code, msg) = run_to(&cfg, &out, &args, &[]);
        assert_eq!(code, 1, "{msg}");
        assert!(msg.contains("is unchanged; this attempt's record"), "{msg}");
    }
    assert_eq!(std::fs::read(out.join("report.json")).unwrap(), first);
    assert_eq!(std::fs::read(out.join("steps.csv")).unwrap(), steps);
    let tried = attempts(&out);
    assert_eq!(tried.len(), 2, "{tried:?}");
    for a in &tried {
        let r = json(&a.join("report.json"));
        assert_eq!(r["status"], "failed");
        assert!(a.join("steps.csv").is_file());
    }
    // `report` and `compare` read an attempt.
    let (code, msg) = run(&["compare", out.to_str().unwrap(), tried[0].to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("(failed at task 0"), "{msg}");
    let (code, msg) = run(&["report", tried[0].to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");

    // A run that finishes replaces it: its report and checkpoints, no trace of the old one;
    // the failed attempts stay as records.
    let (code, msg) = run_to(
        &cfg,
        &out,
        &[
            "-q",
            "--set",
            "train.checkpoint_every=4",
            "--set",
            "optimizer.lr=0.02",
        ],
        &[],
    );
    assert_eq!(code, 0, "{msg}");
    let r = json(&out.join("report.json"));
    assert_eq!(r["config"]["optimizer"]["lr"], 0.02);
    let cks: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // The newest two checkpoints of the new run (every 4 steps); the old run's step 30 is gone.
    assert!(cks.contains(&"step-00000028".to_string()), "{cks:?}");
    assert!(!cks.contains(&"step-00000030".to_string()), "{cks:?}");
    assert_eq!(attempts(&out).len(), 2);
    assert!(
        std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".replaced")),
    );

    // An unfinished run is refused without --overwrite (it could be resumed), and replaced
    // by a run that finishes with it.
    let cut = d.path().join("cut");
    let (code, _) = run_to(&cfg, &cut, &["-q"], &[("ENGRAM_FAILPOINT", "step-5")]);
    assert_ne!(code, 0);
    let (code, msg) = run_to(&cfg, &cut, &["-q"], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("holds an unfinished run") && msg.contains("engram resume"),
        "{msg}"
    );
    let (code, msg) = run_to(&cfg, &cut, &["-q", "--overwrite"], &[]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(json(&cut.join("report.json"))["status"], "finished");
    assert!(attempts(&cut).is_empty());
}

#[test]
fn an_interrupted_attempt_resumes_and_then_replaces_the_run() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "checkpoint_every = 3\n");
    let out = d.path().join("out");
    let (code, msg) = run_to(&cfg, &out, &["-q", "--set", "optimizer.lr=0.02"], &[]);
    assert_eq!(code, 0, "{msg}");
    let (code, _) = run_to(&cfg, &out, &["-q"], &[("ENGRAM_FAILPOINT", "step-7")]);
    assert_ne!(code, 0);
    assert_eq!(
        json(&out.join("report.json"))["config"]["optimizer"]["lr"],
        0.02
    );
    let tried = attempts(&out);
    assert_eq!(tried.len(), 1);
    let (code, msg) = run(&["resume", tried[0].to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(
        json(&out.join("report.json"))["config"]["optimizer"]["lr"],
        0.05
    );
    assert!(attempts(&out).is_empty());
    // The same report as a run that was never interrupted.
    let plain = d.path().join("plain");
    let (code, msg) = run_to(&cfg, &plain, &["-q"], &[]);
    assert_eq!(code, 0, "{msg}");
    let stable = |p: &Path| {
        let mut r = json(&p.join("report.json"));
        for k in ["timings", "throughput", "memory"] {
            r.as_object_mut().unwrap().remove(k);
        }
        r
    };
    assert_eq!(stable(&out), stable(&plain));
}

#[test]
fn a_diverged_run_keeps_its_steps_and_where_it_stopped() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    // lr = 1e30 diverges at the first step.
    let cfg = small_config(d.path(), "c.toml", "log_every = 2\n");
    let out = d.path().join("div");
    let (code, msg) = run_to(&cfg, &out, &["-q", "--set", "optimizer.lr=1e30"], &[]);
    assert_eq!(code, 1, "{msg}");
    let r = json(&out.join("report.json"));
    assert_eq!(r["status"], "failed");
    let f = &r["failure"];
    assert!(f["error"].as_str().unwrap().contains("NaN"), "{r}");
    assert_eq!(
        (f["task"].as_u64(), f["epoch"].as_u64()),
        (Some(0), Some(0))
    );
    let steps = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    assert!(
        steps.starts_with("task,epoch,step,global_step,loss,lr,samples\n"),
        "{steps}"
    );
    // The matrix so far (no task finished) and no metrics.
    assert_eq!(r["accuracy_matrix"], serde_json::json!([]));
    assert!(r["metrics"]["acc"].is_null());
    // `engram report` reads it.
    let (code, msg) = run(&["report", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
}

/// A divergence that the EWC penalty causes names EWC's keys (λ, the stiffness cap, the
/// proximal update) after the general advice, where it happened, and the loss's part that is
/// not finite (the penalty); naive's does not (`on_divergence = "stop"`: the message as it
/// ends the run).
#[test]
fn a_divergence_names_the_strategy_keys_that_cause_it() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(
        d.path(),
        "c.toml",
        "on_divergence = \"stop\"\n[[forgetting]]\ntype = \"ewc\"\nlambda = 1e9\nupdate = \"gradient\"\nstiffness_cap = 0\n",
    );
    let (code, msg) = run_to(&cfg, &d.path().join("ewc"), &["-q"], &[]);
    assert_eq!(code, 1, "{msg}");
    assert!(msg.contains(" at task 1, epoch 0, step "), "{msg}");
    assert!(
        msg.contains(
            "`ewc`'s penalty inf (not finite: `ewc`'s penalty). The run's strategies: memory standard; forgetting ewc (lower the learning rate (it is 0.05; try 0.025) or add [train] clip_norm = 1.0; ewc pulls the weights toward the earlier tasks with λ = 1000000000: lower `lambda`, set `stiffness_cap = 1`"
        ),
        "{msg}"
    );
    let (code, msg) = run_to(
        &cfg,
        &d.path().join("lr"),
        &[
            "-q",
            "--set",
            "optimizer.lr=1e30",
            "--set",
            "forgetting.0.lambda=0",
        ],
        &[],
    );
    assert_eq!(code, 1, "{msg}");
    assert!(
        msg.contains("at task 0, epoch 0, step ")
            && msg.ends_with(
                "of the task: training diverged. The loss's parts on that batch, recomputed in f32: the cross-entropy NaN (not finite: the cross-entropy). The run's strategies: memory standard; forgetting ewc (lower the learning rate (it is 1.000e30; try 5.000e29) or add [train] clip_norm = 1.0)\n"
            ),
        "{msg}"
    );
}

#[test]
fn a_second_writer_is_refused_while_the_lock_is_held() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let out = d.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let lock = engram::outdir::take(&out).unwrap();
    let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&format!(
            "being written by another engram process (pid {})",
            std::process::id()
        )),
        "{msg}"
    );
    let (code, msg) = run(&["resume", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    // The lock dies with its holder: the next run takes it.
    drop(lock);
    let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
    assert_eq!(code, 0, "{msg}");
}

/// Found by a newcomer pass: a file merely named `run.json` does not make a directory a run;
/// an interrupted attempt is resumed under its output directory's lock (not beside a live
/// writer), and replaces the run only if it is still the one it was started beside.
#[test]
fn attempts_replace_only_their_own_run_under_its_lock() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "checkpoint_every = 3\n");
    // A user's directory with a run.json of their own.
    let user = d.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("run.json"), "{\"name\":\"mine\"}").unwrap();
    std::fs::write(user.join("report.json"), "{\"mine\":1}").unwrap();
    let (code, msg) = run_to(&cfg, &user, &["-q"], &[]);
    assert_eq!(code, 2, "{msg}");
    assert_eq!(
        std::fs::read_to_string(user.join("report.json")).unwrap(),
        "{\"mine\":1}"
    );

    // A finished run, then an attempt killed mid-run.
    let out = d.path().join("out");
    let (code, msg) = run_to(&cfg, &out, &["-q", "--set", "optimizer.lr=0.02"], &[]);
    assert_eq!(code, 0, "{msg}");
    let (code, _) = run_to(&cfg, &out, &["-q"], &[("ENGRAM_FAILPOINT", "step-7")]);
    assert_ne!(code, 0);
    let attempt = attempts(&out).pop().unwrap();
    // While another process writes OUT, the attempt cannot be resumed.
    let lock = engram::outdir::take(&out).unwrap();
    let (code, msg) = run(&["resume", attempt.to_str().unwrap(), "-q"]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("being written by another engram process"),
        "{msg}"
    );
    drop(lock);
    // A newer run finishes in OUT meanwhile: the older attempt, resumed, does not replace it.
    let (code, msg) = run_to(&cfg, &out, &["-q", "--set", "optimizer.lr=0.03"], &[]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = run(&["resume", attempt.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("changed since this attempt started"), "{msg}");
    assert_eq!(
        json(&out.join("report.json"))["config"]["optimizer"]["lr"],
        0.03
    );
    assert_eq!(json(&attempt.join("report.json"))["status"], "finished");
}

/// Issue #32, defect 2: `export --safetensors FILE` replaced whatever was there (a user's
/// file, a symbolic link's target, a FIFO, `/dev/full` turned into a regular file, exit 0). It
/// refuses an existing target by name (exit 2, the file unchanged); `--overwrite` replaces a
/// regular file only, never a link or a FIFO.
#[test]
fn issue32_export_refuses_existing_file() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let out = d.path().join("run");
    let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
    assert_eq!(code, 0, "{msg}");
    let export = |target: &Path, extra: &[&str]| {
        let mut a = vec![
            "export",
            out.to_str().unwrap(),
            "--safetensors",
            target.to_str().unwrap(),
        ];
        a.extend(extra);
        run(&a)
    };
    let mine = d.path().join("mine.safetensors");
    std::fs::write(&mine, "the user's own file").unwrap();
    let (code, msg) = export(&mine, &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&format!("--safetensors {}: already exists", mine.display()))
            && msg.contains("--overwrite"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "the user's own file"
    );
    // A symbolic link is not followed, with or without --overwrite: its target is kept.
    let link = d.path().join("link.safetensors");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    for extra in [&[][..], &["--overwrite"][..]] {
        let (code, msg) = export(&link, extra);
        assert_eq!(code, 2, "{msg}");
        assert!(msg.contains("symbolic link"), "{msg}");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(&mine).unwrap(),
            "the user's own file"
        );
    }
    // A FIFO (as a device) is never replaced by a regular file.
    let fifo = d.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (code, msg) = export(&fifo, &["--overwrite"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("a FIFO"), "{msg}");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // --overwrite replaces a regular file, atomically: no temporary file is left beside it.
    let (code, msg) = export(&mine, &["--overwrite"]);
    assert_eq!(code, 0, "{msg}");
    let bytes = std::fs::read(&mine).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let meta: Value = serde_json::from_slice(&bytes[8..8 + header]).unwrap();
    assert!(meta.get("blocks.0.linear.weight").is_some(), "{meta}");
    let fresh = d.path().join("fresh.safetensors");
    let (code, msg) = export(&fresh, &[]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(std::fs::read(&fresh).unwrap().len(), bytes.len());
    let mut left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    left.sort();
    assert!(left.is_empty(), "{left:?}");
}

/// Issue #32, defect 11: a user's path that cannot be used was exit 1 with a raw OS error
/// ("File exists" for a dangling or looping symbolic link, "Not a directory" under a file). It
/// is bad input: exit 2 with a message naming the path, and nothing written.
#[test]
fn issue32_bad_output_paths_are_exit_2_naming_the_path() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let dangling = d.path().join("dangling");
    std::os::unix::fs::symlink(d.path().join("absent"), &dangling).unwrap();
    let looping = d.path().join("loop");
    std::os::unix::fs::symlink(&looping, &looping).unwrap();
    for (out, why) in [
        (file.join("out"), "is not a directory"),
        (dangling.clone(), "which does not exist"),
        (looping.clone(), "loops"),
    ] {
        let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
        assert_eq!(code, 2, "{}: {msg}", out.display());
        assert!(
            msg.contains(&format!("--out {}", out.display())) && msg.contains(why),
            "{msg}"
        );
    }
    assert!(!d.path().join("absent").exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    // A directory where nothing can be created (`/proc` takes no new entries, even as root):
    // every writer says so naming its flag, exit 2, instead of a raw OS error with exit 1.
    let (code, msg) = run_to(&cfg, Path::new("/proc/engram-out"), &["-q"], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("--out /proc/engram-out: cannot be created"),
        "{msg}"
    );
    let (code, msg) = run(&[
        "data",
        "export",
        "fashion-mnist",
        "--format",
        "csv",
        "--out",
        "/proc/engram-x",
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("--out /proc/engram-x: cannot create"), "{msg}");
    // `compare --plots FILE`: the table is printed, the figure refused by name.
    let out = d.path().join("run");
    let (code, msg) = run_to(&cfg, &out, &["-q"], &[]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = run(&[
        "compare",
        out.to_str().unwrap(),
        "--plots",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&format!("--plots {}: is a file", file.display())),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    let (code, msg) = run(&[
        "export",
        out.to_str().unwrap(),
        "--safetensors",
        "/proc/engram.safetensors",
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("--safetensors /proc/engram.safetensors: cannot be created"),
        "{msg}"
    );
}
