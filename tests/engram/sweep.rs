//! Sweeps through the real binary on small real data: a grid runs two at a time to the same
//! reports as single `engram run`s, aggregates to hand-computed means, resumes after every run
//! was killed, keeps going past a failed run, places errors in the sweep file, refuses a
//! directory that is not its own, and writes a job-array script whose task command runs a run.

use crate::util::{engram, output, run, small_config};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn stable(dir: &Path) -> Value {
    let mut r: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    for k in ["timings", "throughput", "memory"] {
        r.as_object_mut().unwrap().remove(k);
    }
    r
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A 4-run sweep (2 learning rates × 2 seeds) over a 2-task config that checkpoints every 5
/// steps.
fn sweep_file(d: &Path, lrs: &str) -> PathBuf {
    small_config(d, "base.toml", "checkpoint_every = 5\n");
    let p = d.join("sweep.toml");
    std::fs::write(
        &p,
        format!("[sweep]\nbase = \"base.toml\"\nseeds = [0, 1]\n\"optimizer.lr\" = {lrs}\n"),
    )
    .unwrap();
    p
}

fn sweep(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = engram();
    c.arg("sweep").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    output(c.output().unwrap())
}

const NAMES: [&str; 4] = [
    "lr-0.05/seed-0",
    "lr-0.05/seed-1",
    "lr-0.02/seed-0",
    "lr-0.02/seed-1",
];

#[test]
fn a_sweep_runs_its_grid_as_single_runs_aggregates_and_resumes_after_a_kill() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let sw = sweep_file(d.path(), "[0.05, 0.02]");
    let s = sw.to_str().unwrap();

    let (code, msg) = sweep(&["validate", s], &[]);
    assert_eq!(code, 0, "{msg}");
    for n in NAMES {
        assert!(msg.contains(n), "{msg}");
    }
    assert!(msg.contains("ok (4 runs in 2 cells"), "{msg}");

    let a = d.path().join("a");
    let (code, msg) = sweep(
        &["run", s, "--jobs", "2", "--out", a.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("4 of 4 runs done (4 now, 0 before), 0 failed"),
        "{msg}"
    );
    // One progress line per run.
    assert_eq!(
        msg.lines().filter(|l| l.contains("] done")).count(),
        4,
        "{msg}"
    );

    // A run of the grid is exactly `engram run` with the run's overrides.
    let single = d.path().join("single");
    let (code, msg) = run(&[
        "run",
        d.path().join("base.toml").to_str().unwrap(),
        "--out",
        single.to_str().unwrap(),
        "--set",
        "optimizer.lr=0.02",
        "--seed",
        "1",
        "-q",
    ]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&single), stable(&a.join("lr-0.02/seed-1")));

    // The aggregate: each cell's ACC is the mean and sample sd of its seeds' reports.
    let agg = json(&a.join("sweep.json"));
    let acc = |n: &str| {
        json(&a.join(n).join("report.json"))["metrics"]["acc"]
            .as_f64()
            .unwrap()
    };
    let (x, y) = (acc(NAMES[2]), acc(NAMES[3]));
    let cell = &agg["cells"][1];
    assert_eq!(cell["cell"], "lr-0.02");
    assert_eq!(cell["axes"]["optimizer.lr"], 0.02);
    let mean = cell["metrics"]["acc"]["mean"].as_f64().unwrap();
    let sd = cell["metrics"]["acc"]["std"].as_f64().unwrap();
    assert!((mean - (x + y) / 2.0).abs() < 1e-12, "{mean} vs {x} {y}");
    assert!(
        (sd - (x - y).abs() / 2f64.sqrt()).abs() < 1e-12,
        "{sd} vs {x} {y}"
    );
    let csv = std::fs::read_to_string(a.join("sweep.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("cell,optimizer.lr,seeds,acc_mean,acc_std,bwt_mean")
    );
    assert!(
        lines
            .nth(1)
            .unwrap()
            .starts_with(&format!("lr-0.02,0.02,2,{mean},{sd},"))
    );
    assert!(a.join("plots/compare.png").is_file());

    // A rerun skips every finished run.
    let (code, msg) = sweep(&["run", s, "--out", a.to_str().unwrap(), "-q"], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("(0 now, 4 before)"), "{msg}");

    // Every run killed at step 8 (a checkpoint at step 5 exists): each is interrupted, the
    // sweep carries on with the others, and a rerun resumes all four to the same reports.
    let b = d.path().join("b");
    let (code, msg) = sweep(
        &["run", s, "--jobs", "2", "--out", b.to_str().unwrap()],
        &[("ENGRAM_FAILPOINT", "step-8")],
    );
    assert_eq!(code, 0, "{msg}");
    assert_eq!(
        msg.lines().filter(|l| l.contains("] interrupted")).count(),
        4,
        "{msg}"
    );
    let (code, msg) = sweep(&["status", b.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("4 runs: 4 interrupted"), "{msg}");
    let (code, msg) = sweep(
        &["run", s, "--jobs", "2", "--out", b.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{msg}");
    assert_eq!(
        msg.lines().filter(|l| l.contains("(resumed)")).count(),
        4,
        "{msg}"
    );
    for n in NAMES {
        assert_eq!(stable(&a.join(n)), stable(&b.join(n)), "{n}");
    }
    let (code, msg) = sweep(&["status", b.to_str().unwrap()], &[]);
    assert!(code == 0 && msg.contains("4 runs: 4 done"), "{msg}");

    // The Slurm task command runs one run of the grid, the same as the local runner.
    let c = d.path().join("c");
    let (code, msg) = sweep(&["submit", s, "--out", c.to_str().unwrap(), "--print"], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("#SBATCH --array=0-3\n"), "{msg}");
    assert!(msg.contains("#SBATCH --requeue\n"), "{msg}");
    assert!(msg.contains(" sweep task "), "{msg}");
    assert!(!c.exists(), "--print writes nothing");
    let cs = c.to_str().unwrap();
    std::fs::create_dir_all(&c).unwrap();
    // A grid manifest is written by `sweep run` on an empty directory: stop it at once with
    // a failpoint on every run, then execute index 2 as an array task would.
    let (code, msg) = sweep(
        &["run", s, "--out", cs, "-q"],
        &[("ENGRAM_FAILPOINT", "step-1")],
    );
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = sweep(&["task", cs, "--index", "2"], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("run 2 (lr-0.02/seed-0): done"), "{msg}");
    assert_eq!(stable(&a.join(NAMES[2])), stable(&c.join(NAMES[2])));
    let (code, msg) = sweep(&["submit", s, "--out", cs, "--print"], &[]);
    assert!(
        code == 0 && msg.contains("#SBATCH --array=0-1,3\n"),
        "{msg}"
    );
    // A finished sweep has nothing to submit, and says so instead of an empty --array.
    let (code, msg) = sweep(&["submit", s, "--out", a.to_str().unwrap(), "--print"], &[]);
    assert!(
        code == 0 && msg.contains("nothing to submit") && !msg.contains("#SBATCH"),
        "{msg}"
    );
    let (code, msg) = sweep(&["task", cs, "--index", "4"], &[]);
    assert!(
        code == 2 && msg.contains("outside the grid of 4 runs"),
        "{msg}"
    );
}

#[test]
fn a_failed_run_does_not_stop_the_sweep_and_is_reported() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    // lr = 1e30 diverges at once.
    let sw = sweep_file(d.path(), "[0.05, 1e30]");
    let out = d.path().join("o");
    let (code, msg) = sweep(
        &["run", sw.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1, "{msg}");
    assert!(
        msg.contains("2 of 4 runs done (2 now, 0 before), 2 failed"),
        "{msg}"
    );
    assert!(
        msg.contains("2 of 4 runs failed (first: lr-1e+30/seed-0"),
        "{msg}"
    );
    let (code, msg) = sweep(&["status", out.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("4 runs: 2 done, 2 failed"), "{msg}");
    assert!(
        msg.contains("lr-1e+30/seed-1") && msg.contains("exit 1"),
        "{msg}"
    );
    let agg = json(&out.join("sweep.json"));
    assert_eq!(agg["cells"][1]["unfinished"][0]["status"], "failed");
    assert!(agg["cells"][1]["metrics"]["acc"].is_null());
}

#[test]
fn sweep_errors_are_placed_and_foreign_directories_are_left_alone() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let sw = sweep_file(d.path(), "[0.05]");
    // An axis naming a key the config does not have: placed at the axis in the sweep file.
    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[sweep]\nbase = \"base.toml\"\n\"train.epoch\" = [1, 2]\n",
    )
    .unwrap();
    let (code, msg) = sweep(&["validate", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&format!("{}:3:18: run `epoch-1/seed-0`", bad.display())),
        "{msg}"
    );
    assert!(msg.contains("epoch"), "{msg}");
    // A value of the wrong type, also placed at that value.
    std::fs::write(
        &bad,
        "[sweep]\nbase = \"base.toml\"\n\"train.epochs\" = [1, \"two\"]\n",
    )
    .unwrap();
    let (code, msg) = sweep(&["validate", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(&format!("{}:3:22:", bad.display())), "{msg}");
    // A directory of the user's: nothing written, nothing removed.
    let mine = d.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep").unwrap();
    let (code, msg) = sweep(
        &["run", sw.to_str().unwrap(), "--out", mine.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("not an engram sweep's directory"), "{msg}");
    let left: Vec<_> = std::fs::read_dir(&mine).unwrap().flatten().collect();
    assert_eq!(left.len(), 1);
    // A changed grid is refused in the old sweep's directory.
    let out = d.path().join("o");
    let (code, msg) = sweep(
        &[
            "run",
            sw.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        &[("ENGRAM_FAILPOINT", "step-1")],
    );
    assert_eq!(code, 0, "{msg}");
    std::fs::write(
        &sw,
        "[sweep]\nbase = \"base.toml\"\nseeds = [0, 1]\nset = { \"train.epochs\" = 2 }\n\"optimizer.lr\" = [0.05]\n",
    )
    .unwrap();
    let (code, msg) = sweep(
        &["run", sw.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("defines run `lr-0.05/seed-0` differently"),
        "{msg}"
    );
    // Another sweep (another name) is refused in this sweep's directory.
    let other = d.path().join("other.toml");
    std::fs::write(
        &other,
        "[sweep]\nbase = \"base.toml\"\n\"optimizer.lr\" = [0.05]\n",
    )
    .unwrap();
    let (code, msg) = sweep(
        &[
            "run",
            other.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("holds the sweep `sweep`"), "{msg}");
    // The base config edited after the sweep started: refused, so that a cell never mixes
    // runs of two versions of it.
    std::fs::write(
        &sw,
        "[sweep]\nbase = \"base.toml\"\nseeds = [0, 1, 2]\n\"optimizer.lr\" = [0.05]\n",
    )
    .unwrap();
    let base = d.path().join("base.toml");
    let text = std::fs::read_to_string(&base).unwrap();
    std::fs::write(&base, text.replace("hidden = [64]", "hidden = [32]")).unwrap();
    let (code, msg) = sweep(
        &["run", sw.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("changed since this sweep's runs"), "{msg}");
    // A missing base config is placed at its line in the sweep file.
    std::fs::write(&bad, "[sweep]\nbase = \"nope.toml\"\n").unwrap();
    let (code, msg) = sweep(&["validate", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&format!("{}:2:8: config", bad.display())),
        "{msg}"
    );
}

/// `engram bench suite --sweep FILE` on a tiny suite: the roles' configs (naive, plain replay,
/// the recipe) × two streams (variants) × one seed, run as a sweep; the per-stream tables and
/// the goals come out on stdout and in DIR/suite.md, each goal computed from the runs' own
/// report.json; a sweep file without streams is a usage error.
#[test]
fn bench_suite_runs_configs_by_streams_and_prints_each_stream_s_table() {
    crate::util::require_fmnist!();
    const NAIVE: &str = "naive";
    const PLAIN_REPLAY: &str = "replay-plain";
    const RECIPE: &str = "replay-distill";
    let d = tempfile::tempdir().unwrap();
    let replay = "[[forgetting]]\ntype = \"replay\"\ncapacity = 100\nratio = 1.0\n";
    small_config(d.path(), &format!("{NAIVE}.toml"), "");
    small_config(d.path(), &format!("{PLAIN_REPLAY}.toml"), replay);
    small_config(
        d.path(),
        &format!("{RECIPE}.toml"),
        &format!("{replay}distill = 0.5\n"),
    );
    let suite = d.path().join("suite.toml");
    std::fs::write(
        &suite,
        format!(
            "[sweep]\nconfigs = [\"{NAIVE}.toml\", \"{PLAIN_REPLAY}.toml\", \"{RECIPE}.toml\"]\nseeds = [0]\n\
             [sweep.suite]\nnaive = \"{NAIVE}\"\nplain = \"{PLAIN_REPLAY}\"\nrecipes = [\"{RECIPE}\"]\n\
             [sweep.variants.stream]\nplain = {{}}\nsmall = {{ \"data.subsample\" = 300 }}\n"
        ),
    )
    .unwrap();
    let out = d.path().join("o");
    let (code, msg) = run(&[
        "bench",
        "suite",
        "--sweep",
        suite.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--jobs",
        "2",
        "-q",
    ]);
    assert_eq!(code, 0, "{msg}");
    for want in ["### plain\n", "### small\n", "### Goals on every stream"] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    let md = std::fs::read_to_string(out.join("suite.md")).unwrap();
    assert!(msg.contains(&md), "the printed tables are suite.md");
    // The goal line of `small` holds the recipe's and plain replay's own ACC.
    let acc = |config: &str| -> f64 {
        let r: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join(format!("{config}_stream-small/seed-0/report.json"))).unwrap(),
        )
        .unwrap();
        r["metrics"]["acc"].as_f64().unwrap()
    };
    let line = md
        .lines()
        .find(|l| l.starts_with("| small |"))
        .expect("a goal line for the stream `small`");
    assert!(
        line.contains(&format!(
            "| `{RECIPE}` | {:.4} | {:.4} |",
            acc(RECIPE),
            acc(PLAIN_REPLAY)
        )),
        "{line}"
    );
    // Without [sweep.variants.stream]: a usage error before anything runs.
    let plain = d.path().join("plain.toml");
    std::fs::write(&plain, format!("[sweep]\nbase = \"{NAIVE}.toml\"\n")).unwrap();
    let (code, msg) = run(&["bench", "suite", "--sweep", plain.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("has no [sweep.variants.stream]"), "{msg}");
}

/// Issue #32, defect 1: `[sweep] out = ""` (and `--out ""`) named the current directory, and
/// `sweep run` replaced the user's own `sweep.toml` and `sweep.csv` there with exit 0. Both
/// `validate` and `run` refuse it as bad input, and nothing in the directory changes.
#[test]
fn issue32_sweep_out_empty_refused() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    small_config(d.path(), "base.toml", "");
    std::fs::write(d.path().join("sweep.toml"), "mine\n").unwrap();
    std::fs::write(d.path().join("sweep.csv"), "mine,too\n").unwrap();
    let s = d.path().join("s.toml");
    std::fs::write(
        &s,
        "[sweep]\nbase = \"base.toml\"\nout = \"\"\n\"optimizer.lr\" = [0.05]\n",
    )
    .unwrap();
    let in_dir = |args: &[&str]| {
        let mut c = engram();
        c.current_dir(d.path()).arg("sweep").args(args);
        output(c.output().unwrap())
    };
    for cmd in ["validate", "run"] {
        let (code, msg) = in_dir(&[cmd, "s.toml"]);
        assert_eq!(code, 2, "{cmd}: {msg}");
        assert!(
            msg.contains(&format!("{}:3:7: `out` is empty", s.display()))
                || msg.contains("s.toml:3:7: `out` is empty"),
            "{cmd}: {msg}"
        );
    }
    // `--out ""` on the command line, with a sweep file that names no `out` (refused as a
    // missing value by the argument parser; `Manifest::install` refuses an empty path too).
    std::fs::write(
        &s,
        "[sweep]\nbase = \"base.toml\"\n\"optimizer.lr\" = [0.05]\n",
    )
    .unwrap();
    let (code, msg) = in_dir(&["run", "s.toml", "--out", "", "-q"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("--out"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(d.path().join("sweep.toml")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("sweep.csv")).unwrap(),
        "mine,too\n"
    );
    for made in ["grid.json", "state", "logs"] {
        assert!(!d.path().join(made).exists(), "{made} was written");
    }
}

/// Issue #32, defect 6: a `base` that is `/dev/zero` was read without a bound (4 GB) and then
/// called missing; a directory was called missing too. Both are refused at once, placed at
/// the `base` value, by what they are.
#[test]
fn issue32_sweep_base_not_a_regular_file_refused() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s.toml");
    std::fs::create_dir_all(d.path().join("adir")).unwrap();
    for (base, want) in [
        (
            "/dev/zero",
            "config /dev/zero is not a regular file (a device or a FIFO)",
        ),
        ("adir", "adir is a directory, not a config file"),
    ] {
        std::fs::write(
            &s,
            format!("[sweep]\nbase = \"{base}\"\n\"optimizer.lr\" = [0.05]\n"),
        )
        .unwrap();
        for cmd in ["validate", "run"] {
            let started = std::time::Instant::now();
            let (code, msg) = sweep(&[cmd, s.to_str().unwrap()], &[]);
            assert_eq!(code, 2, "{base} {cmd}: {msg}");
            assert!(
                msg.contains(&format!("{}:2:8: ", s.display())) && msg.contains(want),
                "{base} {cmd}: {msg}"
            );
            assert!(!msg.contains("does not exist"), "{msg}");
            assert!(started.elapsed().as_secs() < 30, "{base}: read unbounded?");
        }
    }
}
