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
            "trailing byte(s)",
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

/// Writes `N` synthetic feature vectors of `features` bytes (labels `i % 10`) as NPY.
fn write_features(dir: &Path, features: usize) {
    use engram::core::data::{Dataset, dataset::Split};
    let split = || {
        let x: Vec<u8> = (0..N * features).map(|i| ((i * 37) % 251) as u8).collect();
        Split::bytes(
            x,
            (0..N).map(|i| (i % 10) as u32).collect(),
            features,
            0.5,
            0.3,
        )
    };
    let ds = Dataset::new(
        "features",
        dir.to_path_buf(),
        split(),
        split(),
        engram::core::model::InputShape::Features(features),
        10,
    );
    engram::registry().write_data(&ds, "npy", dir).unwrap();
}

/// Writes `N` synthetic samples of shape `dims` (`[h, w]`, `[c, h, w]` or `[features]`;
/// labels `i % 10`) in both splits.
fn write_shape(dir: &Path, dims: &[usize]) {
    std::fs::create_dir_all(dir).unwrap();
    let size: usize = dims.iter().product();
    let images: Vec<u8> = (0..N * size).map(|i| ((i * 37) % 251) as u8).collect();
    let labels: Vec<u8> = (0..N).map(|i| (i % 10) as u8).collect();
    let mut header = vec![N as u32];
    header.extend(dims.iter().map(|&d| d as u32));
    for split in ["train", "t10k"] {
        std::fs::write(
            dir.join(format!("{split}-images-idx3-ubyte")),
            encode_idx(&header, &images),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{split}-labels-idx1-ubyte")),
            encode_idx(&[N as u32], &labels),
        )
        .unwrap();
    }
}

/// No input geometry panics: square sides from 1 to 64 and non-square images (1×784 among
/// them, once read as 28×28), in 1 and 3 channels, and 1-D feature vectors, with every built-in
/// model either train (exit 0) or are a positioned error at the model's key (exit 2), never a
/// panic inside a model or Burn.
#[test]
fn no_image_shape_panics_any_model() {
    let d = tempfile::tempdir().unwrap();
    // (channels, height, width); channels 0 is a feature vector of `width` values.
    let shapes = [
        (1, 1, 1),
        (1, 2, 2),
        (1, 3, 3),
        (1, 5, 5),
        (1, 27, 27),
        (1, 64, 64),
        (1, 1, 784),
        (1, 3, 5),
        (1, 28, 27),
        (3, 1, 1),
        (3, 5, 5),
        (3, 32, 32),
        (3, 7, 9),
        (0, 1, 1),
        (0, 1, 40),
    ];
    let mut outcomes = Vec::new();
    for (c, h, w) in shapes {
        let data = d.path().join(format!("d{c}x{h}x{w}"));
        // IDX holds images; a feature vector is written as NPY (`[n, features]`).
        let format = match c {
            0 => {
                write_features(&data, w);
                "format = \"npy\"\n"
            }
            1 => {
                write_shape(&data, &[h, w]);
                ""
            }
            _ => {
                write_shape(&data, &[c, h, w]);
                ""
            }
        };
        for model in ["mlp", "cnn", "vit"] {
            let keys = if model == "mlp" { "hidden = [8]" } else { "" };
            let f = d.path().join(format!("{model}-{c}x{h}x{w}.toml"));
            std::fs::write(
                &f,
                format!(
                    "[data]\ndataset = \"fashion-mnist\"\n{format}path = \"{}\"\ntasks = 1\n[model]\ntype = \"{model}\"\n{keys}\n[train]\nbatch_size = 20\n",
                    data.display()
                ),
            )
            .unwrap();
            let out = d.path().join(format!("o-{model}-{c}x{h}x{w}"));
            let (code, msg) = crate::util::run_quiet(&f, &out, &[], &[]);
            assert!(!msg.contains("panicked"), "{model} on {c}×{h}×{w}: {msg}");
            assert!(
                code == 0 || code == 2,
                "{model} on {c}×{h}×{w}: exit {code}: {msg}"
            );
            if code == 2 {
                assert!(
                    msg.contains(&format!("{}:", f.display())),
                    "{model} on {c}×{h}×{w}: {msg}"
                );
            }
            outcomes.push(((model, c, h, w), code));
        }
    }
    let code = |m: &str, c: usize, h: usize, w: usize| {
        outcomes
            .iter()
            .find(|(k, _)| *k == (m, c, h, w))
            .map(|(_, code)| *code)
    };
    // Every shape trains with the MLP; the CNN needs an image with a height and width of at
    // least 4 (two halvings), square or not; the ViT a square image of any side (its patch
    // adapts); neither takes a feature vector.
    for (c, h, w) in shapes {
        let image = c > 0;
        assert_eq!(code("mlp", c, h, w), Some(0), "mlp {c}×{h}×{w}");
        assert_eq!(
            code("cnn", c, h, w),
            Some(if image && h.min(w) >= 4 { 0 } else { 2 }),
            "cnn {c}×{h}×{w}"
        );
        assert_eq!(
            code("vit", c, h, w),
            Some(if image && h == w { 0 } else { 2 }),
            "vit {c}×{h}×{w}"
        );
    }
}
