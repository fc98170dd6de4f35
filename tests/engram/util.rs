//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `engram` binary built by cargo for these tests.
pub fn engram() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_engram"));
    c.env_remove("ENGRAM_DATA");
    c
}

/// Runs `engram` with `args`; returns exit code and combined output.
pub fn run(args: &[&str]) -> (i32, String) {
    output(engram().args(args).output().expect("engram binary runs"))
}

/// Exit code and stdout+stderr.
pub fn output(o: Output) -> (i32, String) {
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), s)
}

/// Where Debian's package puts Fashion-MNIST. Tests that need real data fail with a clear
/// message when it is missing (CI installs it).
pub fn fmnist_dir() -> PathBuf {
    let d = PathBuf::from("/usr/share/datasets/fashion-mnist");
    assert!(
        d.join("train-images-idx3-ubyte.gz").is_file(),
        "real data missing: `apt-get install dataset-fashion-mnist` (CI's .ci/run does this)"
    );
    d
}

/// A small real-data config: `tasks` tasks of Split-FMNIST, `n` training samples per task.
pub fn small_config(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let _ = fmnist_dir();
    let text = format!(
        "[run]\nseed = 0\n[data]\ndataset = \"fashion-mnist\"\ntasks = 2\nclasses_per_task = 2\n\
         subsample = 1000\ntest_subsample = 400\n[model]\ntype = \"mlp\"\nhidden = [64]\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[train]\nbatch_size = 64\n{extra}"
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `engram run CFG --out OUT -q`, then `extra` arguments, with the environment variables `env`;
/// exit code and stdout+stderr.
pub fn run_quiet(cfg: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = engram();
    c.args([
        "run",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ])
    .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    output(c.output().expect("engram binary runs"))
}
