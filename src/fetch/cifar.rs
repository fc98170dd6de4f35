//! `engram data fetch cifar10|cifar100`: the official binary archive (a `.tar.gz`), checked
//! against the MD5 its page publishes ([`CifarSpec::md5`]), each data file in it decoded as
//! CIFAR records ([`cifar::decode`]: whole records, labels in range) with the official record
//! counts, and only then written, each atomically, into the target directory, flat (as
//! [`cifar::resolve`] finds them).

use super::{download, sha256_hex};
use engram_core::data::format::cifar::{self, CifarSpec};
use engram_core::fsutil::write_atomic;
use engram_core::{Error, Result};
use flate2::read::GzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Hex MD5 of `bytes` (RFC 1321, RustCrypto's `md-5` crate): the only digest the CIFAR archives' page publishes. Used to
/// recognise the official archive, not for security (MD5 is broken against collisions); the
/// archive's content is then checked record by record.
pub fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The files of a CIFAR archive (a `.tar.gz`), by name, each checked by
/// [`cifar::decode`] (whole records, labels in
/// range) and, when `official`, against the official record counts. Entries are matched by
/// their file name only: nothing is written from an archive's paths.
///
/// # Errors
/// [`Error::Data`] naming `url` and the file for a file that is not CIFAR records, or for a
/// file the archive lacks.
fn cifar_files(
    spec: &CifarSpec,
    url: &str,
    archive: &[u8],
    official: bool,
) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let files = spec.files();
    let mut found: Vec<Option<Vec<u8>>> = vec![None; files.len()];
    let broken = |e: std::io::Error| Error::Data(format!("{url}: not a .tar.gz archive: {e}"));
    let mut tar = tar::Archive::new(GzDecoder::new(archive));
    for entry in tar.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        let path = entry.path().map_err(broken)?.into_owned();
        let Some(k) = path
            .file_name()
            .and_then(|n| files.iter().position(|f| n == *f))
        else {
            continue;
        };
        let mut bytes = Vec::new();
        entry
            .by_ref()
            .take(256 * 1024 * 1024)
            .read_to_end(&mut bytes)
            .map_err(broken)?;
        // The label byte 0 exists in both layouts; its range is CIFAR-10's classes or
        // CIFAR-100's superclasses.
        let classes = if spec.label_bytes == 1 { 10 } else { 20 };
        let (_, labels) = cifar::decode(spec, &bytes, 0, classes)
            .map_err(|m| Error::Data(format!("{url}: {}: {m}", path.display())))?;
        if official && labels.len() != spec.records[k] {
            return Err(Error::Data(format!(
                "{url}: {}: {} records, the official file has {}",
                path.display(),
                labels.len(),
                spec.records[k]
            )));
        }
        found[k] = Some(bytes);
    }
    files
        .iter()
        .zip(found)
        .map(|(f, b)| {
            b.map(|b| (*f, b)).ok_or_else(|| {
                Error::Data(format!(
                    "{url}: the archive has no {f} (looked for it in any folder)"
                ))
            })
        })
        .collect()
}

/// Downloads a CIFAR archive from `url` and writes its data files into `dir` (flat, as
/// [`cifar::resolve`] finds them), each
/// atomically, after all of them were checked.
///
/// `expected_md5` overrides the archive's pinned MD5 ([`CifarSpec::md5`], tests serve their
/// own archive); with the pin, the files must also hold the official record counts. The
/// archive's SHA-256 is printed, not checked (none is published). Returns the written paths.
///
/// # Errors
/// [`Error::Other`] when the download fails, [`Error::Data`] when the archive's MD5 differs,
/// it is not a `.tar.gz`, lacks a file or holds a malformed one; [`Error::Io`] when `dir`
/// cannot be written. Nothing is written unless every file passed.
pub fn fetch(
    spec: &CifarSpec,
    url: &str,
    dir: &Path,
    expected_md5: Option<&str>,
) -> Result<Vec<PathBuf>> {
    let archive = download(url, 256 * 1024 * 1024)?;
    let want = expected_md5.unwrap_or(spec.md5);
    let md5 = md5_hex(&archive);
    if md5 != want {
        return Err(Error::Data(format!(
            "{url}: MD5 of the archive is {md5}, expected {want}; the download is corrupt or not the official archive"
        )));
    }
    let files = cifar_files(spec, url, &archive, expected_md5.is_none())?;
    eprintln!(
        "{url}: MD5 {md5} verified; SHA-256 {}",
        sha256_hex(&archive)
    );
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut written = Vec::new();
    for (name, bytes) in files {
        let path = dir.join(name);
        write_atomic(&path, &bytes)?;
        written.push(path);
    }
    Ok(written)
}
