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

/// A config that reads `data` in `format` (`[data] path` absolute), 1 task of 2 classes.
fn format_config(dir: &Path, format: &str, data: &Path) -> std::path::PathBuf {
    let f = dir.join(format!("{format}.toml"));
    std::fs::write(
        &f,
        format!(
            "[data]\nformat = \"{format}\"\npath = \"{}\"\ntasks = 1\n\
             classes_per_task = 2\n[model]\ntype = \"mlp\"\nhidden = [8]\n",
            data.display()
        ),
    )
    .unwrap();
    f
}

/// `engram validate CFG`, with the time it took.
fn validate(cfg: &Path) -> (i32, String, std::time::Duration) {
    let start = std::time::Instant::now();
    let (code, msg) = run(&["validate", cfg.to_str().unwrap()]);
    (code, msg, start.elapsed())
}

/// Writes `name.npy` in `dir`: a C-order array of `shape` with dtype `descr` and raw `data`.
fn write_npy(dir: &Path, name: &str, descr: &str, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.as_bytes());
    b.extend(data);
    std::fs::write(dir.join(format!("{name}.npy")), b).unwrap();
}

/// Four NPY arrays of 4 samples × 2 byte features, labels `train_y` (`<i8`) and `[0, 1, 0, 1]`.
fn npy_with_labels(dir: &Path, train_y: &[i64]) {
    std::fs::create_dir_all(dir).unwrap();
    for x in ["train_x", "test_x"] {
        write_npy(dir, x, "|u1", &[4, 2], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }
    let bytes = |ys: &[i64]| ys.iter().flat_map(|y| y.to_le_bytes()).collect::<Vec<u8>>();
    write_npy(dir, "train_y", "<i8", &[4], &bytes(train_y));
    write_npy(dir, "test_y", "<i8", &[4], &bytes(&[0, 1, 0, 1]));
}

#[test]
fn issue32_huge_label_refused_cheaply() {
    let d = tempfile::tempdir().unwrap();
    // CSV: a label of a billion (4 GB of per-class tables before), of 200 million in a small
    // file, and one past u64 (read as a class name before).
    for (i, label) in ["1000000000", "200000000", "99999999999999999999999"]
        .iter()
        .enumerate()
    {
        let data = d.path().join(format!("csv{i}"));
        std::fs::create_dir_all(&data).unwrap();
        let rows = format!("label,a,b\n0,1,2\n1,3,4\n{label},5,6\n");
        std::fs::write(data.join("train.csv"), &rows).unwrap();
        std::fs::write(data.join("test.csv"), "label,a,b\n0,1,2\n1,3,4\n").unwrap();
        let (code, msg, took) = validate(&format_config(d.path(), "csv", &data));
        assert_eq!(code, 2, "{msg}");
        assert!(msg.contains("train.csv") && msg.contains("row 3"), "{msg}");
        assert!(msg.contains("at most 65536 classes"), "{msg}");
        assert!(!msg.contains("memory allocation"), "{msg}");
        assert!(took.as_secs() < 20, "{label}: {took:?}");
    }
    // NPY: labels near the integer limits, each refused by name.
    for (i, label) in [3_000_000_000i64, i64::MAX, i64::from(u32::MAX), 1 << 31, -1]
        .into_iter()
        .enumerate()
    {
        let data = d.path().join(format!("npy{i}"));
        npy_with_labels(&data, &[0, 1, label, 1]);
        let (code, msg, took) = validate(&format_config(d.path(), "npy", &data));
        assert_eq!(code, 2, "{label}: {msg}");
        assert!(
            msg.contains("train_y.npy") && msg.contains("sample 2"),
            "{msg}"
        );
        let want = if label < 0 {
            "is negative"
        } else {
            "at most 65536 classes"
        };
        assert!(msg.contains(want), "{label}: {msg}");
        assert!(took.as_secs() < 20, "{label}: {took:?}");
    }
}

#[cfg(unix)]
#[test]
fn issue32_image_folder_entries_that_are_not_files_are_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let ds = engram::core::data::Dataset::new(
        "tiny",
        d.path().to_path_buf(),
        engram::core::data::dataset::Split::bytes(vec![7; 4 * 16], vec![0, 1, 0, 1], 16, 0.5, 0.3),
        engram::core::data::dataset::Split::bytes(vec![9; 2 * 16], vec![0, 1], 16, 0.5, 0.3),
        engram::core::data::InputShape::Image {
            channels: 1,
            height: 4,
            width: 4,
        },
        2,
    );
    let seed = d.path().join("seed");
    engram::registry()
        .write_data(&ds, "image-folder", &seed)
        .unwrap();
    let class0 = seed.join("train").join(
        std::fs::read_dir(seed.join("train"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name(),
    );
    // A FIFO named x.png hung the reader forever; a link to itself was exit 1 with a bare OS
    // error.
    let fifo = class0.join("x.png");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, msg, took) = validate(&format_config(d.path(), "image-folder", &seed));
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(&fifo.display().to_string()), "{msg}");
    assert!(msg.contains("not a regular file"), "{msg}");
    assert!(took.as_secs() < 20, "{took:?}");
    std::fs::remove_file(&fifo).unwrap();
    let me = class0.join("me.png");
    std::os::unix::fs::symlink(&me, &me).unwrap();
    let (code, msg, _) = validate(&format_config(d.path(), "image-folder", &seed));
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(&me.display().to_string()), "{msg}");
    assert!(msg.contains("not a regular file"), "{msg}");
}

#[test]
fn issue32_npy_path_that_is_a_device_is_refused_with_its_path() {
    let d = tempfile::tempdir().unwrap();
    let (code, msg, _) = validate(&format_config(d.path(), "npy", Path::new("/dev/null")));
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("/dev/null: npy: not a regular file or a directory"),
        "{msg}"
    );
}

#[cfg(unix)]
#[test]
fn issue32_a_missing_idx_file_or_a_link_loop_is_named() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    write_valid(&data);
    std::fs::remove_file(data.join("t10k-labels-idx1-ubyte")).unwrap();
    let (code, msg, _) = validate(&format_config(d.path(), "idx", &data));
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&data.join("t10k-labels-idx1-ubyte").display().to_string()),
        "{msg}"
    );
    let me = data.join("t10k-labels-idx1-ubyte");
    std::os::unix::fs::symlink(&me, &me).unwrap();
    let (code, msg, _) = validate(&format_config(d.path(), "idx", &data));
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains(&me.display().to_string()) && msg.contains("not a regular file"),
        "{msg}"
    );
}

#[test]
fn issue32_a_one_class_dataset_says_what_to_change() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("one");
    std::fs::create_dir_all(&data).unwrap();
    for f in ["train.csv", "test.csv"] {
        std::fs::write(data.join(f), "label,a,b\n0,1,2\n0,3,4\n").unwrap();
    }
    let (code, msg, _) = validate(&format_config(d.path(), "csv", &data));
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("classes_per_task = 2 with 1 class: set [data] classes_per_task to 1..=1"),
        "{msg}"
    );
}

/// Issue #32, second hostile pass: a 13-byte NPY file whose version-2 header claims 4 GiB made
/// the reader allocate that much (an abort under a 2 GiB address-space limit); the length is
/// checked before anything is read.
#[test]
fn issue32_an_npy_header_length_of_gigabytes_is_refused_before_reading() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("npy");
    std::fs::create_dir_all(&data).unwrap();
    for a in ["train_x", "train_y", "test_x", "test_y"] {
        std::fs::write(
            data.join(format!("{a}.npy")),
            b"\x93NUMPY\x02\x00\xf0\xff\xff\xff{",
        )
        .unwrap();
    }
    let (code, msg, _) = validate(&format_config(d.path(), "npy", &data));
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("npy: its header claims 4294967280 bytes (NPY headers are at most 65536)"),
        "{msg}"
    );
}

/// Issue #32, second hostile pass: `data export --out` a dangling symbolic link said only "Not
/// a directory"; it is refused by name as `run --out` is.
#[test]
fn issue32_data_export_to_a_dangling_link_says_so() {
    let d = tempfile::tempdir().unwrap();
    let link = d.path().join("olink");
    std::os::unix::fs::symlink("/nonexistent/target", &link).unwrap();
    let (code, msg) = crate::util::run(&[
        "data",
        "export",
        "fashion-mnist",
        "--format",
        "npy",
        "--out",
        link.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("is a symbolic link to /nonexistent/target, which does not exist"),
        "{msg}"
    );
}
