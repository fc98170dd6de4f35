//! A stream of datasets (`[[data.stream]]`, issue #35 item 5) through the real binary: the
//! real Fashion-MNIST then its inverted copy (another domain, written as NPY), with their
//! classes offset into one label space or sharing one by name; the task-IL view beside the
//! class-IL one; refused mismatches at their line; resuming to the same report; replay.

use crate::resume::stable;
use crate::util::{engram, fmnist_slice, output, run_quiet};
use serde_json::Value;
use std::path::Path;

use engram::core::data::dataset::{Dataset, Split};
use engram::core::data::sources::{self, Source};
use engram::core::model::mlp::{ActivationKind, build_mlp};
use engram::core::train::trainer::score_task;

/// `names.len()` classes, `per` training and 2 test samples a class, 2 byte values a sample,
/// `[class, index]`, normalised to the raw bytes (mean 0, std 1/255).
fn tiny(name: &str, names: &[&str], per: usize) -> Dataset {
    let split = |per: usize| {
        let (mut v, mut l) = (Vec::new(), Vec::new());
        for i in 0..names.len() * per {
            let c = (i % names.len()) as u8;
            v.extend_from_slice(&[c, i as u8]);
            l.push(u32::from(c));
        }
        Split::bytes(v, l, 2, 0.0, 1.0 / 255.0)
    };
    let mut d = Dataset::new(
        name,
        name.into(),
        split(per),
        split(2),
        engram::core::data::InputShape::Features(2),
        names.len(),
    );
    d.class_names = names.iter().map(|s| s.to_string()).collect();
    d
}

fn src(dataset: Dataset) -> Source {
    Source {
        dataset,
        label_space: None,
        subsample: None,
        test_subsample: None,
    }
}

/// Fashion-MNIST's first 300 training and 100 test images with every pixel inverted
/// (`255 − x`), written as NPY into `dir/inverted`, its classes named `names(i)`.
fn inverted(dir: &Path, names: impl Fn(&str) -> String) {
    let mut ds = fmnist_slice(300, 100);
    for s in [&mut ds.train, &mut ds.test] {
        let engram::core::data::dataset::Values::U8(v) = &mut s.values else {
            unreachable!("IDX is bytes")
        };
        v.iter_mut().for_each(|x| *x = 255 - *x);
    }
    ds.class_names = ds.class_names.iter().map(|n| names(n)).collect();
    engram::registry()
        .write_data(&ds, "npy", &dir.join("inverted"))
        .unwrap();
}

/// A two-task stream config in `dir`: Fashion-MNIST (300 training, 100 test images), then
/// `second` (the keys of the second `[[data.stream]]` entry), and `extra` at the end.
fn config(dir: &Path, second: &str, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "[run]\nseed = 0\n[data]\nmask_logits = true\ntest_subsample = 100\n\
         [[data.stream]]\ndataset = \"fashion-mnist\"\nsubsample = 300\n\
         [[data.stream]]\n{second}\n\
         [model]\ntype = \"mlp\"\nhidden = [32]\n[optimizer]\nlr = 0.05\n\
         [train]\nbatch_size = 32\n{extra}"
    );
    let p = dir.join("s.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// [`config`]'s stream with the inverted copy (written into `dir`) as its second entry, as
/// NPY under its own class names, and nothing more.
fn inverted_stream(dir: &Path) -> std::path::PathBuf {
    inverted(dir, |n| n.to_string());
    config(
        dir,
        "dataset = \"inverted\"\nformat = \"npy\"\npath = \"inverted\"",
        "",
    )
}

fn report(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

/// Two datasets, each with its own 10 classes: task 1's classes are 10–19 of a head of 20,
/// named after their dataset; the report carries the task-IL view, the summary prints it;
/// replay runs on the stream; a run killed in task 1 resumes to the same report.
#[test]
fn two_datasets_offset_their_classes_report_task_il_and_resume() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    inverted(d.path(), |n| n.to_string());
    let replay = "[[forgetting]]\ntype = \"replay\"\ncapacity = 60\nratio = 0.5\n";
    let cfg = config(
        d.path(),
        "dataset = \"inverted\"\nformat = \"npy\"\npath = \"inverted\"",
        &format!("checkpoint_every = 5\n{replay}"),
    );
    let full = d.path().join("full");
    let mut c = engram();
    c.args([
        "run",
        cfg.to_str().unwrap(),
        "--out",
        full.to_str().unwrap(),
    ]);
    let (code, msg) = output(c.output().unwrap());
    assert_eq!(code, 0, "{msg}");
    assert!(
        msg.contains("task-IL (logits restricted to each task's classes)"),
        "{msg}"
    );
    let r = report(&full);
    let classes = |t: usize| r["tasks"][t]["classes"].clone();
    assert_eq!(classes(0), Value::from((0..10).collect::<Vec<_>>()));
    assert_eq!(classes(1), Value::from((10..20).collect::<Vec<_>>()));
    assert_eq!(r["tasks"][0]["class_names"][0], "fashion-mnist:T-shirt/top");
    assert_eq!(r["tasks"][1]["class_names"][9], "inverted:Ankle boot");
    // Task 1's test rows are its own 100 (its dataset's whole test split).
    let til = r["task_il_accuracy_matrix"].as_array().unwrap();
    assert_eq!(til.len(), 2);
    // After task 1, class-IL ≤ task-IL on each task (the task-IL argmax is over fewer classes).
    for j in 0..2 {
        let (cil, til) = (
            r["accuracy_matrix"][1][j].as_f64().unwrap(),
            til[1][j].as_f64().unwrap(),
        );
        assert!(
            cil <= til + 1e-12,
            "task {j}: class-IL {cil} above task-IL {til}"
        );
    }
    // Replay ran on the stream: its 60 samples, 784 values each (bytes, or f32 when the two
    // datasets' normalisations differ and the joined split stores normalised values).
    let stored = &r["memory"]["stored"]["replay"];
    assert_eq!(stored["samples"], 60, "{stored}");
    let bytes = stored["sample_bytes"].as_u64().unwrap();
    assert!(bytes == 784 || bytes == 784 * 4, "{stored}");

    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-12")]);
    assert_ne!(code, 0, "{msg}");
    let (code, msg) = crate::util::run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(stable(&full), stable(&cut));
}

/// A shared label space: the inverted copy's classes are Fashion-MNIST's by name, so both tasks
/// use the same 10 logits; names that differ, a shape that differs, and a `[data]` key a
/// stream replaces are bad input (exit 2) at their line.
#[test]
fn a_shared_label_space_matches_by_name_and_mismatches_are_refused_at_their_line() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    inverted(d.path(), |n| n.to_string());
    let shared =
        "dataset = \"inverted\"\nformat = \"npy\"\npath = \"inverted\"\nlabel_space = \"fmnist\"";
    let cfg = config(d.path(), shared, "");
    // The first entry opens the space too.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "subsample = 300\n",
        "subsample = 300\nlabel_space = \"fmnist\"\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = d.path().join("out");
    let (code, msg) = run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    let all = Value::from((0..10).collect::<Vec<_>>());
    assert_eq!(r["tasks"][0]["classes"], all);
    assert_eq!(r["tasks"][1]["classes"], all);
    assert_eq!(r["tasks"][1]["class_names"][0], "fmnist:T-shirt/top");

    let refused = |cfg: &Path, line: usize, what: &str| {
        let (code, msg) = run_quiet(cfg, &d.path().join("no"), &[], &[]);
        assert_eq!(code, 2, "{msg}");
        assert!(
            msg.contains(&format!("s.toml:{line}:")),
            "line {line}: {msg}"
        );
        assert!(msg.contains(what), "{what}: {msg}");
    };
    // Other class names in the same space: refused at the second entry's label_space (line 14).
    let renamed = tempfile::tempdir().unwrap();
    inverted(renamed.path(), |n| format!("{n}?"));
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "path = \"inverted\"",
        &format!("path = \"{}\"", renamed.path().join("inverted").display()),
    );
    std::fs::write(&cfg, text).unwrap();
    refused(&cfg, 14, "a shared label space matches classes by name");
    // 784 features against 1×28×28 images: refused at the second entry (its `dataset`, line 10).
    let cfg = config(
        d.path(),
        "dataset = \"inverted\"\nformat = \"npy\"\npath = \"inverted\"\nshape = [784]",
        "",
    );
    refused(&cfg, 10, "every dataset of a stream feeds the same model");
    // `[data] tasks` beside a stream keeps its first entries: not more than it has.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("mask_logits", "tasks = 3\nmask_logits");
    std::fs::write(&cfg, text).unwrap();
    refused(
        &cfg,
        4,
        "tasks = 3 keeps the first 3 [[data.stream]] entries, and the stream has 2",
    );
}

/// Task-IL beside class-IL on a hand-set linear model over a two-dataset stream: logits
/// `[10, 0, 0, 5 − 10c, 10c − 5 + 6i]` for a sample `[c, i]` (its local class and index; the
/// normalisation makes the values the raw bytes).
///
/// Task 0 (`a`, union classes 0–2), test rows `(c, i)` = (0,0) (1,1) (2,2) (0,3) (1,4) (2,5):
/// class-IL predicts 0, 4, 4, 4, 4, 4 → 1/6 right; restricted to {0, 1, 2} always 0 → 2/6.
/// Task 1 (`b`, union classes 3–4, labels 3 + c), rows (0,0) (1,1) (0,2) (1,3): logits 3 and 4
/// are (5, −5), (−5, 11), (5, 7), (−5, 23); class-IL (class 0 at 10) predicts 0, 4, 0, 4 →
/// 2/4; restricted to {3, 4}: 3, 4, 4, 4 → 3/4.
#[test]
fn task_il_restricts_logits_to_the_tasks_classes_of_the_union() {
    let device = engram::core::burn::tensor::Device::flex();
    let a = tiny("a", &["x", "y", "z"], 1);
    let b = tiny("b", &["p", "q"], 1);
    let s = sources::build(vec![src(a), src(b)], &toml::from_str("").unwrap(), 0).unwrap();
    let mut r = engram::core::rng::stream(0, "init", 0, 0);
    let model = build_mlp(2, &[], 5, ActivationKind::Relu, 0.0, &mut r, &device);
    let weight = [0.0f32, 0., 0., -10., 10., 0., 0., 0., 0., 6.];
    let bias = [10.0f32, 0., 0., 5., -5.];
    let model = model.update_params(&mut |info, _| {
        let v: &[f32] = if info.numel() == 10 { &weight } else { &bias };
        Some(engram::core::burn::tensor::Tensor::from_data(
            engram::core::burn::tensor::TensorData::new(v.to_vec(), [v.len()]),
            &device,
        ))
    });
    let score = |t| score_task(&model, &s, t, 1, 100, &device);
    let (t0, t1) = (score(0), score(1));
    assert!((t0.class_il - 1.0 / 6.0).abs() < 1e-12, "{t0:?}");
    assert!((t0.task_il - 2.0 / 6.0).abs() < 1e-12, "{t0:?}");
    assert_eq!((t1.class_il, t1.task_il), (0.5, 0.75));
    // With mask_logits, before task 1 is trained (seen = 0) its classes 3 and 4 are masked in
    // both views: 0, not the share of its first class that a tie of two masked logits gives.
    let masked = sources::build(
        vec![
            src(tiny("a", &["x", "y", "z"], 1)),
            src(tiny("b", &["p", "q"], 1)),
        ],
        &toml::from_str("mask_logits = true").unwrap(),
        0,
    )
    .unwrap();
    let early = score_task(&model, &masked, 1, 0, 100, &device);
    assert_eq!((early.class_il, early.task_il), (0.0, 0.0));
    // Task 0 under the mask (classes 0–2 only): the class-IL view now predicts 0 everywhere.
    let t0 = score_task(&model, &masked, 0, 0, 100, &device);
    assert!((t0.class_il - 2.0 / 6.0).abs() < 1e-12, "{t0:?}");
}

/// `[train] joint` sees every task's classes from the first step, so `mask_logits` masks none
/// of them (it masked all but task 0's, which left a joint run of this stream at task 0's
/// share). On the hand-set model of the test above, a joint stream scores task 1 with
/// `seen = 0` (the joint run's one round) as with no mask: class-IL 2/4, task-IL 3/4; task 0's
/// class-IL is back to 1/6 (class 4 of task 1 is allowed again).
#[test]
fn a_joint_stream_masks_no_task_s_classes() {
    let device = engram::core::burn::tensor::Device::flex();
    let mut r = engram::core::rng::stream(0, "init", 0, 0);
    let model = build_mlp(2, &[], 5, ActivationKind::Relu, 0.0, &mut r, &device);
    let weight = [0.0f32, 0., 0., -10., 10., 0., 0., 0., 0., 6.];
    let bias = [10.0f32, 0., 0., 5., -5.];
    let model = model.update_params(&mut |info, _| {
        let v: &[f32] = if info.numel() == 10 { &weight } else { &bias };
        Some(engram::core::burn::tensor::Tensor::from_data(
            engram::core::burn::tensor::TensorData::new(v.to_vec(), [v.len()]),
            &device,
        ))
    });
    let mut joint = sources::build(
        vec![
            src(tiny("a", &["x", "y", "z"], 1)),
            src(tiny("b", &["p", "q"], 1)),
        ],
        &toml::from_str("mask_logits = true").unwrap(),
        0,
    )
    .unwrap();
    joint.joint = true;
    assert_eq!(joint.allowed_classes(0, 0), Some(vec![0, 1, 2, 3, 4]));
    let t1 = score_task(&model, &joint, 1, 0, 100, &device);
    assert_eq!((t1.class_il, t1.task_il), (0.5, 0.75));
    let t0 = score_task(&model, &joint, 0, 0, 100, &device);
    assert!((t0.class_il - 1.0 / 6.0).abs() < 1e-12, "{t0:?}");
    assert!((t0.task_il - 2.0 / 6.0).abs() < 1e-12, "{t0:?}");
}

/// Through the binary: a joint run of the two-dataset stream (all 20 classes dealt) with
/// `mask_logits` adds a mask of zeros only, so it reports exactly what the same run without
/// `mask_logits` reports, and the inverted task is learned (not masked to 0).
#[test]
fn a_joint_run_under_mask_logits_equals_the_unmasked_joint_run() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    inverted(d.path(), |n| n.to_string());
    let second = "dataset = \"inverted\"\nformat = \"npy\"\npath = \"inverted\"";
    let masked = config(d.path(), second, "joint = true\n");
    let (code, msg) = run_quiet(&masked, &d.path().join("masked"), &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let plain = d.path().join("plain.toml");
    std::fs::write(
        &plain,
        std::fs::read_to_string(&masked)
            .unwrap()
            .replace("mask_logits = true\n", ""),
    )
    .unwrap();
    let (code, msg) = run_quiet(&plain, &d.path().join("plain"), &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let (m, p) = (
        report(&d.path().join("masked")),
        report(&d.path().join("plain")),
    );
    let row = |r: &Value| r["accuracy_matrix"][0].clone();
    assert_eq!(row(&m), row(&p));
    assert_eq!(m["task_il_accuracy_matrix"], p["task_il_accuracy_matrix"]);
    let inverted_acc = row(&m)[1].as_f64().unwrap();
    assert!(inverted_acc > 0.3, "task 1 masked out: {}", row(&m));
}

/// `--set` reaches a stream entry by its index, as it does a strategy's: the second entry's
/// `subsample` capped to 100 gives task 1 its 100 training rows (of the inverted copy's 300);
/// an index past the file's two entries is bad input (exit 2) naming the key.
#[test]
fn set_reaches_a_stream_entry_by_index() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = inverted_stream(d.path());
    let out = d.path().join("out");
    let (code, msg) = run_quiet(&cfg, &out, &["--set", "data.stream.1.subsample=100"], &[]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    assert_eq!(r["tasks"][0]["train_samples"], 300);
    assert_eq!(r["tasks"][1]["train_samples"], 100);
    assert_eq!(r["config"]["data"]["stream"][1]["subsample"], 100);
    let (code, msg) = run_quiet(
        &cfg,
        &d.path().join("no"),
        &["--set", "data.stream.2.subsample=100"],
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("--set `data.stream.2.subsample`: there is no entry 2 in `data.stream`"),
        "{msg}"
    );
}

/// An entry whose data is missing is said at the entry's own line, with how to get it, and
/// its hint speaks of the entry's path (not `[data] path`, which the stream does not use).
#[test]
fn a_missing_entry_is_said_at_its_line_with_the_fetch_command() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("no-data");
    std::fs::create_dir(&empty).unwrap();
    let cfg = config(d.path(), "dataset = \"bbc-news\"\nformat = \"jsonl\"", "");
    let (code, msg) = run_quiet(
        &cfg,
        &d.path().join("out"),
        &[],
        &[("ENGRAM_DATA", empty.to_str().unwrap())],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("s.toml:10:")
            && msg.contains("dataset `bbc-news` not found")
            && msg.contains("engram data fetch bbc-news")
            && !msg.contains("[data] path"),
        "{msg}"
    );
}

/// `engram tune` on a stream of datasets: `--tasks 1` keeps the first `[[data.stream]]` entry
/// (through `data.tasks`), each grid run trains and scores that entry's dataset alone, and
/// the tuned config keeps both entries.
#[test]
fn tune_runs_the_first_entries_of_a_stream() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = inverted_stream(d.path());
    let out = d.path().join("tune");
    let (code, msg) = output(
        engram()
            .args(["tune", cfg.to_str().unwrap()])
            .args(["--grid", "optimizer.lr=0.01,0.05", "--tasks", "1"])
            .args(["--seeds", "0", "--jobs", "1", "-q", "--out"])
            .arg(&out)
            .output()
            .unwrap(),
    );
    assert_eq!(code, 0, "{msg}");
    for lr in ["0.01", "0.05"] {
        let r = report(&out.join(format!("grid/lr-{lr}/seed-0")));
        assert_eq!(r["accuracy_matrix"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["tasks"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["tasks"][0]["class_names"][0], "fashion-mnist:T-shirt/top");
    }
    let tuned = std::fs::read_to_string(out.join("tuned.toml")).unwrap();
    assert_eq!(tuned.matches("[[data.stream]]").count(), 2, "{tuned}");
}
