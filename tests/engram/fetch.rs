//! `engram data fetch` against an HTTP server on 127.0.0.1: files are verified before they
//! are written; a corrupt download writes nothing.

use engram::core::data::catalog::DATASETS;
use engram::core::data::format::idx::FILES;
use engram::core::data::idx::encode_idx;
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
