//! Corrupt dataset files: each is a typed error naming the file, exit code 2, no panic, no
//! report; a valid tiny dataset in the same layout runs.

use crate::util::run;
use engram::core::data::idx::encode_idx;
use flate2::{Compression, write::GzEncoder};
use std::io::Write;
use std::path::Path;

const N: usize = 40;

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Writes a valid tiny dataset: `N` 28×28 images, labels `i % 10`, in both splits.
fn write_valid(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let images: Vec<u8> = (0..N * 784)
        .map(|i| ((i * 31 + i / 784 * 7) % 256) as u8)
        .collect();
    let labels: Vec<u8> = (0..N).map(|i| (i % 10) as u8).collect();
    for split in ["train", "t10k"] {
        std::fs::write(
            dir.join(format!("{split}-images-idx3-ubyte.gz")),
            gz(&encode_idx(&[N as u32, 28, 28], &images)),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{split}-labels-idx1-ubyte")),
            encode_idx(&[N as u32], &labels),
        )
        .unwrap();
    }
}

fn config(dir: &Path) -> std::path::PathBuf {
    let f = dir.join("c.toml");
    std::fs::write(
        &f,
        format!(
            "[data]\ndataset = \"fashion-mnist\"\npath = \"{}\"\n[model]\ntype = \"mlp\"\nhidden = [8]\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    f
}

#[test]
fn corrupt_idx_files_are_typed_errors() {
    let labels_ok: Vec<u8> = (0..N).map(|i| (i % 10) as u8).collect();
    let corruptions: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "bad_magic",
            "train-labels-idx1-ubyte",
            {
                let mut b = encode_idx(&[N as u32], &labels_ok);
                b[2] = 0x0d;
                b
            },
            "bad magic number",
        ),
        (
            "truncated",
            "train-labels-idx1-ubyte",
            encode_idx(&[N as u32], &labels_ok[..10]),
            "truncated",
        ),
        (
            "trailing",
            "train-labels-idx1-ubyte",
            {
                let mut b = encode_idx(&[N as u32], &labels_ok);
                b.push(0);
                b
            },
            "trailing bytes",
        ),
        (
            "count_mismatch",
            "train-labels-idx1-ubyte",
            encode_idx(&[N as u32 - 1], &labels_ok[1..]),
            "labels for",
        ),
        (
            "label_range",
            "t10k-labels-idx1-ubyte",
            encode_idx(&[N as u32], &[12u8; N]),
            "label 12 outside",
        ),
        (
            "bad_gzip",
            "train-images-idx3-ubyte.gz",
            vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3],
            "gzip",
        ),
        (
            "images_rank",
            "t10k-images-idx3-ubyte.gz",
            gz(&encode_idx(&[N as u32, 784], &vec![0u8; N * 784])),
            "images must be",
        ),
        (
            "empty_file",
            "train-labels-idx1-ubyte",
            Vec::new(),
            "truncated",
        ),
    ];
    assert!(corruptions.len() >= 5);
    for (name, file, bytes, expect) in corruptions {
        let d = tempfile::tempdir().unwrap();
        write_valid(&d.path().join("data"));
        std::fs::write(d.path().join("data").join(file), bytes).unwrap();
        let f = config(d.path());
        let out = d.path().join("out");
        let (code, msg) = run(&["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: exit {code}\n{msg}");
        assert!(!msg.contains("panicked"), "{name}:\n{msg}");
        assert!(
            msg.contains(file),
            "{name}: the message names the file:\n{msg}"
        );
        assert!(msg.contains(expect), "{name}: want `{expect}` in:\n{msg}");
        assert!(!out.exists(), "{name}: partial output left behind");
    }
}

#[test]
fn a_valid_tiny_dataset_runs() {
    let d = tempfile::tempdir().unwrap();
    write_valid(&d.path().join("data"));
    let f = config(d.path());
    let out = d.path().join("out");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["accuracy_matrix"].as_array().unwrap().len(), 5);
}

/// Writes `N` synthetic `h × w` images (labels `i % 10`) in both splits.
fn write_shape(dir: &Path, h: usize, w: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let images: Vec<u8> = (0..N * h * w).map(|i| ((i * 37) % 251) as u8).collect();
    let labels: Vec<u8> = (0..N).map(|i| (i % 10) as u8).collect();
    for split in ["train", "t10k"] {
        std::fs::write(
            dir.join(format!("{split}-images-idx3-ubyte")),
            encode_idx(&[N as u32, h as u32, w as u32], &images),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{split}-labels-idx1-ubyte")),
            encode_idx(&[N as u32], &labels),
        )
        .unwrap();
    }
}

/// No image geometry panics: square sides from 1 to 64 and non-square images (1×784 among
/// them, once read as 28×28) with every built-in model either train (exit 0) or are a
/// positioned error at the model's key (exit 2), never a panic inside a model or Burn.
#[test]
fn no_image_shape_panics_any_model() {
    let d = tempfile::tempdir().unwrap();
    let shapes = [
        (1, 1),
        (2, 2),
        (3, 3),
        (5, 5),
        (27, 27),
        (64, 64),
        (1, 784),
        (3, 5),
        (28, 27),
    ];
    let mut outcomes = Vec::new();
    for (h, w) in shapes {
        let data = d.path().join(format!("d{h}x{w}"));
        write_shape(&data, h, w);
        for model in ["mlp", "cnn", "vit"] {
            let keys = if model == "mlp" { "hidden = [8]" } else { "" };
            let f = d.path().join(format!("{model}-{h}x{w}.toml"));
            std::fs::write(
                &f,
                format!(
                    "[data]\ndataset = \"fashion-mnist\"\npath = \"{}\"\ntasks = 1\n[model]\ntype = \"{model}\"\n{keys}\n[train]\nbatch_size = 20\n",
                    data.display()
                ),
            )
            .unwrap();
            let out = d.path().join(format!("o-{model}-{h}x{w}"));
            let (code, msg) = crate::util::run_quiet(&f, &out, &[], &[]);
            assert!(!msg.contains("panicked"), "{model} on {h}×{w}: {msg}");
            assert!(
                code == 0 || code == 2,
                "{model} on {h}×{w}: exit {code}: {msg}"
            );
            if code == 2 {
                assert!(
                    msg.contains(&format!("{}:", f.display())),
                    "{model} on {h}×{w}: {msg}"
                );
            }
            outcomes.push(((model, h, w), code));
        }
    }
    let code = |m: &str, h: usize, w: usize| {
        outcomes
            .iter()
            .find(|((mm, hh, ww), _)| *mm == m && *hh == h && *ww == w)
            .map(|(_, c)| *c)
    };
    // Every shape trains with the MLP; the CNN needs a height and width of at least 4 (two
    // halvings), square or not; the ViT any square side (its patch adapts).
    for (h, w) in shapes {
        assert_eq!(code("mlp", h, w), Some(0), "mlp {h}×{w}");
        assert_eq!(
            code("cnn", h, w),
            Some(if h.min(w) >= 4 { 0 } else { 2 }),
            "cnn {h}×{w}"
        );
        assert_eq!(
            code("vit", h, w),
            Some(if h == w { 0 } else { 2 }),
            "vit {h}×{w}"
        );
    }
}
