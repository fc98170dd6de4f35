//! The CIFAR datasets (`dataset = "cifar10"`, `"cifar100"`) on a re-encoded slice of real
//! images: 30 Fashion-MNIST images padded to 32×32, in three distinct channels, written in
//! CIFAR's binary layout; the reader gives back exactly those pixels and labels, malformed files
//! are errors naming the file, a missing dataset says how to get it.

use crate::util::{fmnist_dir, run};
use engram::core::config::ParamSource;
use engram::core::data::DatasetRequest;
use engram::core::data::dataset::Values;
use engram::core::data::format::cifar::{self, CIFAR10, CIFAR10_CLASSES, PIXELS};
use engram::core::error::Error;
use std::path::Path;

/// A Fashion-MNIST image (28×28 bytes) as CIFAR pixels `[3, 32, 32]`: padded by 2 black pixels
/// on each side; red the image, green its negative, blue its transpose (three channels that
/// differ, so that their order is checked).
fn encode(img: &[u8]) -> Vec<u8> {
    let padded = |c: usize, y: usize, x: usize| -> u8 {
        if !(2..30).contains(&y) || !(2..30).contains(&x) {
            return 0;
        }
        let (y, x) = (y - 2, x - 2);
        match c {
            0 => img[y * 28 + x],
            1 => 255 - img[y * 28 + x],
            _ => img[x * 28 + y],
        }
    };
    (0..3)
        .flat_map(|c| (0..32).flat_map(move |y| (0..32).map(move |x| padded(c, y, x))))
        .collect()
}

/// The first `n` training images of the real Fashion-MNIST, CIFAR-encoded, with their labels.
fn real_images(n: usize) -> Vec<(Vec<u8>, u8)> {
    let _ = fmnist_dir();
    let ds = engram::core::data::catalog::load("fashion-mnist", None).unwrap();
    (0..n)
        .map(|i| {
            let row = ds.train.row(i).unwrap();
            (encode(row), ds.train.labels[i] as u8)
        })
        .collect()
}

/// Writes CIFAR-10's six files into `dir`: 4 images in each training file, 10 in the test file.
fn write_cifar10(dir: &Path, images: &[(Vec<u8>, u8)]) {
    let files = CIFAR10.files();
    for (k, file) in files.iter().enumerate() {
        let part = if k < 5 {
            &images[k * 4..k * 4 + 4]
        } else {
            &images[20..30]
        };
        let bytes: Vec<u8> = part
            .iter()
            .flat_map(|(px, l)| std::iter::once(*l).chain(px.iter().copied()))
            .collect();
        std::fs::write(dir.join(file), bytes).unwrap();
    }
}

#[test]
fn cifar10_reads_the_re_encoded_images_exactly() {
    crate::util::require_fmnist!();
    let images = real_images(30);
    let d = tempfile::tempdir().unwrap();
    write_cifar10(d.path(), &images);
    let ds = cifar::load(&CIFAR10, Some(d.path()), 0, &CIFAR10_CLASSES).unwrap();
    assert_eq!(ds.input.dims(), [3, 32, 32]);
    assert_eq!((ds.classes, ds.class_names[0].as_str()), (10, "airplane"));
    assert_eq!((ds.train.len(), ds.test.len()), (20, 10));
    let want_px: Vec<u8> = images[..20].iter().flat_map(|(p, _)| p.clone()).collect();
    assert_eq!(ds.train.values, Values::U8(want_px));
    let want_labels: Vec<u32> = images[20..].iter().map(|(_, l)| u32::from(*l)).collect();
    assert_eq!(ds.test.labels, want_labels);
    assert_eq!(ds.test.row(3).unwrap(), &images[23].0[..]);
    // The image rule: per-channel statistics of the training split, computed here by hand.
    for c in 0..3 {
        let v: Vec<f64> = images[..20]
            .iter()
            .flat_map(|(p, _)| p[c * 1024..(c + 1) * 1024].iter())
            .map(|&b| f64::from(b) / 255.0)
            .collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        assert!((f64::from(ds.train.mean[c]) - mean).abs() < 1e-6, "{c}");
        assert!((f64::from(ds.train.std[c]) - std).abs() < 1e-5, "{c}");
    }
    // Red is the image, green its negative inside the 28×28 of 1024 pixels (both black
    // outside): their means add up to 784/1024.
    assert!((ds.train.mean[0] + ds.train.mean[1] - 784.0 / 1024.0).abs() < 1e-6);
    // The archive's own folder is found too.
    let nested = tempfile::tempdir().unwrap();
    let inner = nested.path().join("cifar-10-batches-bin");
    std::fs::create_dir(&inner).unwrap();
    write_cifar10(&inner, &images);
    let again = cifar::load(&CIFAR10, Some(nested.path()), 0, &CIFAR10_CLASSES).unwrap();
    assert_eq!(again.train.values, ds.train.values);
}

#[test]
fn cifar100_takes_the_fine_or_the_coarse_label() {
    crate::util::require_fmnist!();
    let images = real_images(15);
    let d = tempfile::tempdir().unwrap();
    // Coarse = 2·label, fine = 10·label + i mod 10.
    let record = |i: usize, (px, l): &(Vec<u8>, u8)| -> Vec<u8> {
        let mut r = vec![2 * l, 10 * l + (i % 10) as u8];
        r.extend(px);
        r
    };
    let bytes = |range: std::ops::Range<usize>| -> Vec<u8> {
        range.flat_map(|i| record(i, &images[i])).collect()
    };
    std::fs::write(d.path().join("train.bin"), bytes(0..10)).unwrap();
    std::fs::write(d.path().join("test.bin"), bytes(10..15)).unwrap();
    let read = |options: &str| {
        let src = ParamSource::from_toml(options);
        cifar::read_cifar100(&DatasetRequest {
            name: "cifar100",
            path: Some(d.path()),
            options: &src,
            base_dir: Path::new(""),
            lm_window: None,
        })
    };
    let fine = read("").unwrap();
    assert_eq!(fine.classes, 100);
    let want: Vec<u32> = (0..10)
        .map(|i| u32::from(10 * images[i].1) + (i % 10) as u32)
        .collect();
    assert_eq!(fine.train.labels, want);
    assert_eq!(
        fine.class_names[want[0] as usize],
        cifar::CIFAR100_FINE[want[0] as usize]
    );
    assert_eq!(fine.test.row(4).unwrap(), &images[14].0[..]);
    let coarse = read("label = \"coarse\"").unwrap();
    assert_eq!(coarse.classes, 20);
    let want: Vec<u32> = (10..15).map(|i| u32::from(2 * images[i].1)).collect();
    assert_eq!(coarse.test.labels, want);
    assert_eq!(coarse.class_names[0], "aquatic_mammals");
    assert!(matches!(
        read("label = \"both\""),
        Err(Error::Config { .. })
    ));
}

#[test]
fn malformed_cifar_files_are_errors_naming_the_file() {
    crate::util::require_fmnist!();
    let images = real_images(30);
    let d = tempfile::tempdir().unwrap();
    let load = || cifar::load(&CIFAR10, Some(d.path()), 0, &CIFAR10_CLASSES);
    write_cifar10(d.path(), &images);
    // The third file loses the end of its last record.
    let third = d.path().join("data_batch_3.bin");
    let bytes = std::fs::read(&third).unwrap();
    std::fs::write(&third, &bytes[..bytes.len() - 100]).unwrap();
    match load() {
        Err(Error::DataFile { path, reason, .. }) => {
            assert_eq!(path, third);
            assert!(
                reason.contains("12192 bytes are not whole records of 3073")
                    && reason.contains("truncated to 2973 bytes"),
                "{reason}"
            );
        }
        other => panic!("{:?}", other.map(|d| d.name)),
    }
    // A label outside the 10 classes in the test file.
    write_cifar10(d.path(), &images);
    let test = d.path().join("test_batch.bin");
    let mut bytes = std::fs::read(&test).unwrap();
    bytes[2 * (PIXELS + 1)] = 200;
    std::fs::write(&test, bytes).unwrap();
    let e = load().unwrap_err().to_string();
    assert!(
        e.contains("test_batch.bin") && e.contains("record 2: label 200 is outside the 10 classes"),
        "{e}"
    );
    // A missing file: which ones, and how to get them.
    std::fs::remove_file(d.path().join("data_batch_5.bin")).unwrap();
    let e = load().unwrap_err().to_string();
    assert!(e.contains("data_batch_5.bin"), "{e}");
    // No data anywhere: the run stops with exit 2 and says how to fetch it.
    let cfg = d.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[data]\ndataset = \"cifar100\"\n[model]\ntype = \"mlp\"\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("engram data fetch cifar100")
            && msg.contains("https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz"),
        "{msg}"
    );
}

/// A run on the re-encoded CIFAR-10 slice through the registry (`[data] dataset = "cifar10"`
/// with `path`), a CNN reading `[3, 32, 32]`, with augmentation.
#[test]
fn a_run_reads_cifar10_by_name() {
    crate::util::require_fmnist!();
    let images = real_images(30);
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("cifar");
    std::fs::create_dir(&data).unwrap();
    write_cifar10(&data, &images);
    let cfg = d.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[data]\ndataset = \"cifar10\"\npath = \"cifar\"\ntasks = 1\nclasses_per_task = 10\n\
         [data.augment]\ncrop_padding = 4\nflip = true\n[model]\ntype = \"cnn\"\n\
         [train]\nbatch_size = 8\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let (code, msg) = run(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["accuracy_matrix"].as_array().unwrap().len(), 1, "{r}");
}
