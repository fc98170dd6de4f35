//! Atomic file writes: write a temporary file in the destination's directory, flush it to
//! disk, then rename it over the destination. A reader sees the old file or the new one,
//! never a partial one, even if the process is killed mid-write. Also the hex SHA-256 that
//! checkpoints, plugins and run records are checked by, and the bounded reads every reader of a
//! user's file goes through: a device, a FIFO or a directory given as a file (`/dev/zero`) and
//! a file over its kind's limit are refused before they are read.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically (temp file + fsync + rename).
///
/// # Errors
/// [`Error::Io`] naming `path` when the directory is missing or not writable.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".engram-tmp-")
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir, e))?;
    tmp.write_all(bytes).map_err(|e| Error::io(path, e))?;
    // tempfile creates files readable by the owner only; outputs are ordinary files.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    tmp.as_file().sync_all().map_err(|e| Error::io(path, e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// The largest text file engram reads (a config, a sweep file, `dataset.toml`, a report, a run
/// manifest), bytes (64 MiB).
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// The largest data file engram reads (a dataset file, weights, a checkpoint's tensors),
/// bytes (64 GiB).
pub const MAX_DATA_BYTES: u64 = 64 << 30;

/// The size of `path` in bytes when it is a regular file of at most `limit` bytes.
///
/// # Errors
/// The OS error when it cannot be read; [`std::io::ErrorKind::InvalidInput`] when it is not a
/// regular file (a device such as `/dev/zero`, a FIFO, a directory);
/// [`std::io::ErrorKind::FileTooLarge`] when it is larger than `limit`.
pub fn check_regular(path: &Path, limit: u64) -> std::io::Result<u64> {
    use std::io::{Error as IoError, ErrorKind};
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        // A symbolic link that leads nowhere (dangling, or a loop such as `me.png -> me.png`)
        // is there but names no file: bad input, not a failure of the disk.
        Err(e) if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
            return Err(IoError::new(
                ErrorKind::InvalidInput,
                format!(
                    "not a regular file: a symbolic link that leads to no file (dangling, or a \
                     loop): {e}"
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Err(IoError::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, a FIFO or a directory): engram reads files only",
        ));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len(), limit));
    }
    Ok(meta.len())
}

fn too_large(n: u64, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("{n} bytes, over the {limit}-byte limit for this kind of file"),
    )
}

/// Opens `path` for reading after [`check_regular`]: a device, a FIFO (whose opening would wait
/// for a writer), a directory, a symbolic link that leads nowhere and a file over `limit` bytes
/// are refused before it is opened. For readers that stream a file instead of reading it
/// whole.
///
/// # Errors
/// As [`check_regular`], and the OS error of the open.
pub fn open_bounded(path: &Path, limit: u64) -> std::io::Result<std::fs::File> {
    check_regular(path, limit)?;
    std::fs::File::open(path)
}

/// Whether something is at `path`, a symbolic link that leads nowhere included (which
/// [`Path::exists`] calls absent): for readers that look for a file by name, so that what is
/// there but is not a readable file is refused by name ([`check_regular`]) instead of being
/// reported missing.
pub fn is_present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Reads `path` whole, bounded by `limit` bytes ([`check_regular`] first; a file that grows
/// past the limit while it is read is refused too).
///
/// # Errors
/// As [`check_regular`].
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let len = check_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// [`read_bounded`] at [`MAX_TEXT_BYTES`], as UTF-8.
///
/// # Errors
/// As [`read_bounded`]; [`std::io::ErrorKind::InvalidData`] when the text is not UTF-8.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, MAX_TEXT_BYTES)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Hex SHA-256 of `bytes` (64 lowercase hex digits; FIPS 180-4).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Resolves a path from the config against `base_dir` (the config file's directory,
/// [`crate::config::LoadedConfig::base_dir`]); an absolute path is kept.
pub fn relative_to(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_refuse_devices_directories_and_large_files() {
        let d = tempfile::tempdir().unwrap();
        let kind = |r: std::io::Result<Vec<u8>>| r.unwrap_err().kind();
        assert_eq!(
            kind(read_bounded(Path::new("/dev/zero"), 1 << 20)),
            std::io::ErrorKind::InvalidInput
        );
        assert_eq!(
            kind(read_bounded(d.path(), 1 << 20)),
            std::io::ErrorKind::InvalidInput
        );
        let f = d.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_bounded(&f, 10).unwrap(), b"0123456789");
        let e = read_bounded(&f, 9).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(
            e.to_string().starts_with("10 bytes, over the 9-byte limit"),
            "{e}"
        );
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_text(&f).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_to_nothing_and_fifos_are_not_regular_files() {
        let d = tempfile::tempdir().unwrap();
        let me = d.path().join("me.png");
        std::os::unix::fs::symlink(&me, &me).unwrap();
        let dangling = d.path().join("dangling.png");
        std::os::unix::fs::symlink(d.path().join("absent"), &dangling).unwrap();
        for p in [&me, &dangling] {
            assert!(is_present(p) && !p.exists());
            let e = read_bounded(p, 1 << 20).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().starts_with("not a regular file"), "{e}");
        }
        let fifo = d.path().join("x.png");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            // Refused before it is opened: opening a FIFO would wait for a writer.
            let e = open_bounded(&fifo, 1 << 20).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        }
        assert!(!is_present(&d.path().join("absent")));
    }

    #[test]
    fn replaces_whole_file_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        write_atomic(&p, b"old contents").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert!(write_atomic(&d.path().join("missing/x"), b"x").is_err());
    }

    #[test]
    fn sha256_of_abc_is_the_fips_vector() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
