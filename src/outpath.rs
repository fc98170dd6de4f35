//! Whether a path a user named is engram's to write: the one rule every writer of a
//! user-named file or directory follows (`export --safetensors`, `compare --plots`, `run --out`
//! through [`crate::outdir::claim`]; reports and sweep outputs are meant to use it too).
//!
//! - A **file** is written only where nothing is, or, when the command was told so
//!   explicitly (`--overwrite`), where a *regular* file is. Never through a symbolic link,
//!   never onto a FIFO, device, socket or directory: those are refused whatever the flags (a
//!   rename onto `/dev/full` would replace the device node with a regular file). The bytes go to
//!   a temporary file in the same directory (`.engram-tmp-…`, which [`crate::outdir`] knows as
//!   engram's own), are synced, and are renamed into place; without `--overwrite` the rename
//!   refuses to replace anything (`RENAME_NOREPLACE`), so a file that appeared meanwhile is not
//!   lost either ([`write_file`], [`write_file_with`]).
//! - A **directory** is used when it exists (a symbolic link to a directory included) and
//!   created with its parents otherwise ([`ensure_dir`]); a path that is a file, a dangling or
//!   looping symbolic link, or lies under a file is refused ([`check_dir`]).
//!
//! Every refusal is [`Error::Usage`] (exit code 2) naming the flag and the path; nothing is
//! written or removed before it.

use engram_core::{Error, Result};
use std::path::{Path, PathBuf};

/// What may be at a file target already (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing may be there: the writer has no way to replace a file.
    Refuse,
    /// A regular file may be replaced when the command's `--overwrite` is given (`true`); the
    /// refusal without it says so.
    Overwrite(bool),
}

fn usage(flag: &str, path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{flag} {}: {why}", path.display()))
}

/// `path` (named with `flag`) could not be created although its checks passed: a place where
/// nothing can be made (`/proc`, `/sys`, a read-only or permission-less folder). The user's
/// choice, so bad input (exit 2) naming the flag; used by every writer here and by
/// [`crate::outdir::claim`].
pub fn cannot_create(flag: &str, path: &Path, e: std::io::Error) -> Error {
    usage(
        flag,
        path,
        format!("cannot be created there ({e}); choose another path"),
    )
}

/// Whether `e` is `ELOOP` (too many levels of symbolic links; `ErrorKind::FilesystemLoop` is
/// not stable yet).
fn is_loop(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

/// Why `path` (whose own lookup failed) cannot be created: its nearest existing ancestor is not
/// a directory, or a component loops; `None` when it can be.
fn blocked_ancestor(flag: &str, path: &Path) -> Option<Error> {
    for a in path.ancestors().skip(1) {
        if a.as_os_str().is_empty() {
            return None;
        }
        match std::fs::metadata(a) {
            Ok(m) if m.is_dir() => return None,
            Ok(_) => {
                return Some(usage(
                    flag,
                    path,
                    format!("{} is not a directory", a.display()),
                ));
            }
            Err(e) if is_loop(&e) => {
                return Some(usage(
                    flag,
                    path,
                    format!("{} is a symbolic link that loops", a.display()),
                ));
            }
            Err(_) => {}
        }
    }
    None
}

/// What kind of thing a non-regular, non-directory file is, for a message.
fn kind_of(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Checks that engram may write the file `path` (named by the user with `flag`, for messages)
/// under `existing`; nothing is written.
///
/// # Errors
/// [`Error::Usage`] naming `flag` and `path` for an empty path, a symbolic link, a directory, a
/// FIFO, device or socket, an existing regular file (unless `Existing::Overwrite(true)`), a
/// parent that is missing or not a directory, a looping path; [`Error::Io`] when the path
/// cannot be examined (permission denied).
pub fn check_file(path: &Path, flag: &str, existing: Existing) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::Usage(format!("{flag}: an empty path")));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(usage(
                flag,
                path,
                "is a symbolic link; engram does not write through links (name the file itself, or another path)",
            ));
        }
        Ok(m) if m.is_dir() => return Err(usage(flag, path, "is a directory, not a file")),
        Ok(m) if m.is_file() => match existing {
            Existing::Overwrite(true) => {}
            Existing::Overwrite(false) => {
                return Err(usage(
                    flag,
                    path,
                    "already exists; choose another path, or pass --overwrite to replace it",
                ));
            }
            Existing::Refuse => {
                return Err(usage(flag, path, "already exists; choose another path"));
            }
        },
        Ok(m) => {
            return Err(usage(
                flag,
                path,
                format!(
                    "is {}; engram writes only regular files (choose another path)",
                    kind_of(&m)
                ),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if is_loop(&e) || e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(blocked_ancestor(flag, path).unwrap_or_else(|| usage(flag, path, e)));
        }
        Err(e) => return Err(Error::io(path, e)),
    }
    let parent = parent_of(path);
    match std::fs::metadata(&parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(usage(
            flag,
            path,
            format!("{} is not a directory", parent.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(blocked_ancestor(flag, &parent)
            .unwrap_or_else(|| {
                usage(
                    flag,
                    path,
                    format!("{} does not exist; create it first", parent.display()),
                )
            })),
        Err(e) if is_loop(&e) || e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(blocked_ancestor(flag, &parent).unwrap_or_else(|| usage(flag, path, e)))
        }
        Err(e) => Err(Error::io(&parent, e)),
    }
}

/// The directory `path` lies in (`.` for a bare file name).
fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// A temporary file beside the target, removed when dropped unless renamed into place.
struct Temp(PathBuf);

impl Temp {
    /// Creates an empty `dir/.engram-tmp-<pid>-<n>` of its own (`O_EXCL`) for `target`, named
    /// by the user with `flag`.
    fn new(dir: &Path, flag: &str, target: &Path) -> Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        loop {
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let p = dir.join(format!(".engram-tmp-{}-{nanos:x}-{n}", std::process::id()));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&p)
            {
                Ok(_) => return Ok(Self(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(cannot_create(flag, target, e)),
            }
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Renames `from` to `to` only if nothing is at `to` (`renameat2(RENAME_NOREPLACE)`, or a hard
/// link and an unlink where the file system lacks it).
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        return Err(e);
    }
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

/// Writes the file `path` (named by the user with `flag`) by `write`, which fills the temporary
/// file whose path it is given (it may replace that file, by rename, with its own); then syncs
/// it and renames it into place, as the module docs say.
///
/// # Errors
/// As [`check_file`], before `write` runs; `write`'s error (the temporary file is removed);
/// [`Error::Usage`] when a file appeared at `path` meanwhile (without `--overwrite`);
/// [`Error::Usage`] ([`cannot_create`]) when no file can be created beside `path`;
/// [`Error::Io`] when the temporary file cannot be synced or renamed.
pub fn write_file_with(
    path: &Path,
    flag: &str,
    existing: Existing,
    write: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    check_file(path, flag, existing)?;
    let tmp = Temp::new(&parent_of(path), flag, path)?;
    write(&tmp.0)?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(0o644));
    }
    std::fs::File::open(&tmp.0)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, e))?;
    // Checked again right before the rename: what is there now is what gets replaced.
    check_file(path, flag, existing)?;
    let renamed = if existing == Existing::Overwrite(true) {
        std::fs::rename(&tmp.0, path)
    } else {
        rename_noreplace(&tmp.0, path)
    };
    match renamed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(usage(
            flag,
            path,
            "appeared while it was being written; nothing was replaced",
        )),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Writes `bytes` to the file `path` (named by the user with `flag`) under the rule of
/// [`write_file_with`].
///
/// # Errors
/// As [`write_file_with`].
pub fn write_file(path: &Path, flag: &str, existing: Existing, bytes: &[u8]) -> Result<()> {
    write_file_with(path, flag, existing, |tmp| {
        std::fs::write(tmp, bytes).map_err(|e| Error::io(path, e))
    })
}

/// Checks that `path` (named by the user with `flag`) is a directory engram may write into or
/// create: an existing directory (a symbolic link to one included), or an absent path whose
/// nearest existing ancestor is a directory. Nothing is created.
///
/// # Errors
/// [`Error::Usage`] naming `flag` and `path` for an empty path, a path that is a file (or
/// FIFO, device, socket), a dangling or looping symbolic link, a path under a file;
/// [`Error::Io`] when it cannot be examined (permission denied).
pub fn check_dir(path: &Path, flag: &str) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::Usage(format!("{flag}: an empty path")));
    }
    let e = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => return Err(usage(flag, path, "is a file, not a directory")),
        Err(e) => e,
    };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        let why = if is_loop(&e) {
            "is a symbolic link that loops".to_string()
        } else {
            let to = std::fs::read_link(path).unwrap_or_default();
            format!(
                "is a symbolic link to {}, which does not exist; remove the link or choose another path",
                to.display()
            )
        };
        return Err(usage(flag, path, why));
    }
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
            blocked_ancestor(flag, path).map_or(Ok(()), Err)
        }
        _ if is_loop(&e) => {
            Err(blocked_ancestor(flag, path).unwrap_or_else(|| usage(flag, path, e)))
        }
        _ => Err(Error::io(path, e)),
    }
}

/// [`check_dir`], then creates `path` with its parents when absent.
///
/// # Errors
/// As [`check_dir`]; [`Error::Usage`] ([`cannot_create`]) when it cannot be created.
pub fn ensure_dir(path: &Path, flag: &str) -> Result<()> {
    check_dir(path, flag)?;
    std::fs::create_dir_all(path).map_err(|e| cannot_create(flag, path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: Result<()>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn a_file_target_is_written_only_where_nothing_or_a_regular_file_is() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("w.bin");
        write_file(&f, "--x", Existing::Overwrite(false), b"one").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"one");
        assert!(
            msg(write_file(&f, "--x", Existing::Overwrite(false), b"two")).contains("--overwrite")
        );
        assert!(msg(write_file(&f, "--x", Existing::Refuse, b"two")).contains("already exists"));
        write_file(&f, "--x", Existing::Overwrite(true), b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(
            msg(write_file(&link, "--x", Existing::Overwrite(true), b"3"))
                .contains("symbolic link")
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert!(msg(check_file(d.path(), "--x", Existing::Overwrite(true))).contains("directory"));
        assert!(
            msg(check_file(&f.join("x"), "--x", Existing::Refuse)).contains("is not a directory")
        );
        assert!(
            msg(check_file(&d.path().join("no/x"), "--x", Existing::Refuse))
                .contains("does not exist")
        );
        let dev = Path::new("/dev/null");
        assert!(msg(check_file(dev, "--x", Existing::Overwrite(true))).contains("a device"));
        // Only the target is left: no temporary file behind.
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn a_path_that_cannot_be_used_is_bad_input() {
        for e in [
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            std::io::Error::from_raw_os_error(libc::ELOOP),
        ] {
            let e = Error::io("/some/path", e);
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().starts_with("/some/path: "), "{e}");
        }
        let e = Error::io("/x", std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn a_directory_target_is_refused_when_it_is_a_file_or_a_broken_link() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(msg(check_dir(&f, "--out")).contains("is a file"));
        assert!(msg(check_dir(&f.join("sub"), "--out")).contains("is not a directory"));
        let dangling = d.path().join("dangling");
        std::os::unix::fs::symlink(d.path().join("absent"), &dangling).unwrap();
        assert!(msg(check_dir(&dangling, "--out")).contains("does not exist"));
        let a = d.path().join("loop");
        std::os::unix::fs::symlink(&a, &a).unwrap();
        assert!(msg(check_dir(&a, "--out")).contains("loops"));
        ensure_dir(&d.path().join("new/deeper"), "--out").unwrap();
        assert!(d.path().join("new/deeper").is_dir());
    }
}
