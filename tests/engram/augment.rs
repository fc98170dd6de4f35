//! `[data.augment]` in real runs on a slice of Fashion-MNIST: training batches are augmented
//! (the training loss moves), evaluation is not (at a learning rate too small to move a weight,
//! the accuracy matrix is the unaugmented run's), the same seed gives the same run, and data
//! that is not an image is refused.

use crate::util::{run, small_config};
use serde_json::Value;
use std::path::Path;

/// Runs `cfg` into `out`; its report and its `steps.csv` losses.
fn run_it(cfg: &Path, out: &Path) -> (Value, Vec<String>) {
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    let r = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let steps = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    let mut lines = steps.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "loss")
        .expect("a loss column");
    let losses = lines
        .map(|l| l.split(',').nth(col).unwrap().to_string())
        .collect();
    (r, losses)
}

#[test]
fn augmentation_changes_training_only_and_repeats_with_the_seed() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    // lr 1e-30: no weight moves (each update is below an f32 ulp of its weight), so evaluation
    // sees the initial model whatever the training batches were.
    let still = "[data.augment]\ncrop_padding = 2\nflip = true\n";
    let plain = small_config(d.path(), "plain.toml", "");
    let aug = small_config(d.path(), "aug.toml", still);
    let tiny = |p: &Path| {
        let t = std::fs::read_to_string(p)
            .unwrap()
            .replace("lr = 0.05", "lr = 1e-30");
        std::fs::write(p, t).unwrap();
    };
    tiny(&plain);
    tiny(&aug);
    let (r_plain, l_plain) = run_it(&plain, &d.path().join("plain"));
    let (r_aug, l_aug) = run_it(&aug, &d.path().join("aug"));
    assert_eq!(r_aug["accuracy_matrix"], r_plain["accuracy_matrix"]);
    assert_eq!(l_plain.len(), l_aug.len());
    assert_ne!(l_plain, l_aug, "the training batches were augmented");
    // At the real learning rate: the same seed, the same run; another seed, another.
    let real = small_config(d.path(), "real.toml", still);
    let (a, la) = run_it(&real, &d.path().join("a"));
    let (b, lb) = run_it(&real, &d.path().join("b"));
    assert_eq!(a["accuracy_matrix"], b["accuracy_matrix"]);
    assert_eq!(la, lb);
    let unaug = small_config(d.path(), "unaug.toml", "");
    let (u, _) = run_it(&unaug, &d.path().join("u"));
    assert_ne!(a["accuracy_matrix"], u["accuracy_matrix"]);
}

#[test]
fn augmentation_of_feature_vectors_is_refused() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    // Fashion-MNIST's rows read as vectors of 784 features.
    let cfg = small_config(d.path(), "f.toml", "[data.augment]\nflip = true\n");
    let t = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[data]\n", "[data]\nshape = [784]\n");
    std::fs::write(&cfg, t).unwrap();
    let out = d.path().join("out");
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("[data.augment] crops and flips images")
            && msg.contains("vectors of 784 features"),
        "{msg}"
    );
    assert!(!out.join("report.json").exists());
}
