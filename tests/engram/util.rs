//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `engram` binary built by cargo for these tests. It sees `$ENGRAM_DATA` only when that
/// is where the tests found Fashion-MNIST ([`fmnist`]), as an absolute path, so that the
/// binary finds the data the tests found and nothing else of the caller's environment.
pub fn engram() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_engram"));
    match data_root_in_use() {
        Some(root) => c.env("ENGRAM_DATA", root),
        None => c.env_remove("ENGRAM_DATA"),
    };
    c
}

/// `$ENGRAM_DATA` (`./data` when unset), made absolute, when Fashion-MNIST was found under it.
fn data_root_in_use() -> Option<PathBuf> {
    let dir = fmnist()?;
    let root = std::path::absolute(engram::core::data::catalog::data_root()).ok()?;
    std::path::absolute(&dir)
        .ok()
        .is_some_and(|d| d.starts_with(&root))
        .then_some(root)
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

/// How to get the real data, for the messages of tests that need it.
const GET_DATA: &str = "`engram data fetch fashion-mnist` (into $ENGRAM_DATA/fashion-mnist, \
     ./data/fashion-mnist by default) or `apt-get install dataset-fashion-mnist` (CI's .ci/run \
     does this)";

/// Fashion-MNIST's directory, looked up as the binary looks it up
/// ([`engram::core::data::catalog::resolve`]: `$ENGRAM_DATA/fashion-mnist`, `./data` when
/// unset, then Debian's `/usr/share/datasets/fashion-mnist`); `None` when it is nowhere.
pub fn fmnist() -> Option<PathBuf> {
    engram::core::data::catalog::resolve("fashion-mnist", None).ok()
}

/// Fashion-MNIST's directory for a test that needs it, or `None` after a message on stderr
/// saying that the test is skipped and how to get the data: the test then returns
/// ([`require_fmnist!`]). In CI the data is installed.
pub fn fmnist_or_skip(test: &str) -> Option<PathBuf> {
    let d = fmnist();
    if d.is_none() {
        eprintln!("skipped {test}: Fashion-MNIST not found; get it with {GET_DATA}");
    }
    d
}

/// Fashion-MNIST's directory, or returns from the calling test (skipped, with a message on
/// stderr naming `engram data fetch`) when the data is nowhere.
macro_rules! require_fmnist {
    () => {
        match $crate::util::fmnist_or_skip(module_path!()) {
            Some(d) => d,
            None => return,
        }
    };
}
pub(crate) use require_fmnist;

/// Fashion-MNIST's directory ([`fmnist`]); panics with how to get it when it is nowhere (a
/// test that may be skipped instead starts with [`require_fmnist!`]).
pub fn fmnist_dir() -> PathBuf {
    fmnist().unwrap_or_else(|| panic!("real data missing: get it with {GET_DATA}"))
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

/// The first `n_train` / `n_test` samples of the real Fashion-MNIST.
pub fn fmnist_slice(n_train: usize, n_test: usize) -> engram::core::data::Dataset {
    let _ = fmnist_dir();
    let mut ds = engram::core::data::catalog::load("fashion-mnist", None).unwrap();
    let cut = |s: &mut engram::core::data::dataset::Split, n: usize| {
        let engram::core::data::dataset::Values::U8(v) = &mut s.values else {
            unreachable!("IDX is bytes")
        };
        v.truncate(n * s.features);
        s.labels.truncate(n);
    };
    cut(&mut ds.train, n_train);
    cut(&mut ds.test, n_test);
    ds
}

/// `book/src/figures/{name}.md`, after checking that it starts with the header of
/// `bench/{name}.sh`, the script that generates it (a golden file whose tests check its
/// structure, not the run behind it).
///
/// # Panics
/// When the file is missing or its header names no such script (the text in the message).
pub fn generated_figure(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = std::fs::read_to_string(root.join(format!("book/src/figures/{name}.md"))).unwrap();
    let header = format!("<!-- Generated by `bash bench/{name}.sh`; do not edit by hand. -->");
    assert!(fig.starts_with(&header), "{fig}");
    fig
}

/// The cells of a Markdown table's body rows in `fig` (every `| ` line but the header, which
/// starts with `header`, and the `|---` rule), trimmed.
pub fn table_rows<'a>(fig: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    fig.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with(header))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect()
}
