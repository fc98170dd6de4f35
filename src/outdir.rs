//! The output directory is the user's: engram writes into a directory only when it is absent,
//! empty, or one of its own runs (recognised by its manifest), under a lock, and a run never
//! replaces a previous one before it has something to put in its place.
//!
//! Why this shape: the old rule ("remove the previous run's files, then train") lost a finished
//! run whenever the new one failed, deleted files of directories that were not runs at all, and
//! let two processes write one directory at once. Now a new run into a directory that holds a
//! run trains beside it in `OUT/attempts/<time>/` (a complete run directory of its own, which
//! `report`, `compare` and `resume` read) and is moved into `OUT` only when it finishes
//! ([`promote`]); one that fails leaves `OUT` as it was, and its record (`report.json` with
//! `status = "failed"`, `steps.csv`) stays in the attempt's directory.

use engram_core::{Error, Result};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Files and directories that engram writes in a run's directory (and moves on [`promote`]).
pub const RUN_FILES: [&str; 9] = [
    "report.json",
    "metrics.csv",
    "steps.csv",
    "metrics.jsonl",
    "config.toml",
    "run.json",
    "aggregate.json",
    "checkpoints",
    "plots",
];

/// The lock file inside an output directory.
pub const LOCK: &str = ".lock";

/// The directory of attempts inside an output directory.
pub const ATTEMPTS: &str = "attempts";

/// The marker in an attempt's directory: it replaces the run of `OUT` (the directory above
/// `attempts/`) when it finishes, if that run is still the one it was started beside.
pub const ATTEMPT_MARKER: &str = "attempt.json";

/// The journal of a swap in progress (`OUT/.swap.json`), so that a swap killed halfway is
/// finished by the next engram command on `OUT` instead of leaving a mix of two runs.
pub const SWAP_JOURNAL: &str = ".swap.json";

/// Whether `name` in an output directory is engram's own bookkeeping (never a user's file):
/// the lock, attempts, a swap's journal and set-aside run, leftovers of atomic writes.
fn internal(name: &str) -> bool {
    name == LOCK
        || name == ATTEMPTS
        || name == SWAP_JOURNAL
        || name.starts_with(".replaced-")
        || name.starts_with(".engram-tmp-")
}

/// Whether `dir/run.json` is an engram run manifest (a JSON object naming the engram version
/// and the config it came from), not merely a file of that name.
fn is_manifest(dir: &Path) -> bool {
    engram_core::train::manifest::RunManifest::read(dir).is_some()
}

/// An exclusive `flock(2)` on a lock file, held by the process that writes: released when that
/// process ends (however it ends), so a killed run leaves no stale lock and the next one takes
/// it over. (On a cluster's shared file system, Linux's NFS client maps it to a POSIX lock on
/// the server.) The descriptor is close-on-exec: no child process inherits it.
pub struct Lock {
    _file: File,
}

impl Lock {
    /// Takes the lock without waiting and writes this process's id into the file; `Ok(None)`
    /// when another process holds it.
    ///
    /// # Errors
    /// [`Error::Io`] when the lock file cannot be opened.
    pub fn try_take(path: &Path) -> Result<Option<Self>> {
        use std::os::unix::fs::OpenOptionsExt;
        // A lock file that is a symbolic link is not followed (it could name a user's file).
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        // SAFETY: flock on a file descriptor this function owns.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            return Ok(None);
        }
        let _ = file.set_len(0);
        let _ = writeln!(file, "{}", std::process::id());
        Ok(Some(Self { _file: file }))
    }

    /// Whether some process holds the lock at `path` now.
    pub fn held(path: &Path) -> bool {
        path.is_file() && matches!(Self::try_take_quiet(path), Ok(None))
    }

    /// [`Lock::try_take`] without writing the pid (a probe must not overwrite the owner's).
    fn try_take_quiet(path: &Path) -> Result<Option<File>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        // SAFETY: flock on a file descriptor this function owns.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        Ok((r == 0).then_some(file))
    }
}

/// What a directory holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Holds {
    /// It is absent, empty, or holds only engram's lock file.
    Nothing,
    /// A run or a `--seeds` run of engram: `run.json`, `aggregate.json` or a `seed-N/run.json`.
    Run {
        /// Whether the run (every seed of a `--seeds` run) has a report, finished or failed.
        reported: bool,
        /// Whether it has checkpoints and no report: `engram resume` can finish it.
        unfinished: bool,
    },
    /// Files that engram did not write (their names, up to five).
    Foreign(Vec<String>),
}

/// What `dir` holds (see [`Holds`]).
pub fn holds(dir: &Path) -> Holds {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Holds::Nothing;
    };
    let names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !internal(n))
        .collect();
    if names.is_empty() {
        return Holds::Nothing;
    }
    let seeds: Vec<PathBuf> = names
        .iter()
        .filter(|n| n.starts_with("seed-"))
        .map(|n| dir.join(n))
        .filter(|d| is_manifest(d))
        .collect();
    let single = is_manifest(dir);
    if single || !seeds.is_empty() {
        let run_dirs: Vec<PathBuf> = if single {
            vec![dir.to_path_buf()]
        } else {
            seeds
        };
        let reported = run_dirs.iter().all(|d| d.join("report.json").is_file());
        let unfinished = run_dirs
            .iter()
            .any(|d| !d.join("report.json").is_file() && d.join("checkpoints").is_dir());
        return Holds::Run {
            reported,
            unfinished,
        };
    }
    let mut shown: Vec<String> = names.into_iter().take(5).collect();
    shown.sort();
    Holds::Foreign(shown)
}

/// Where a new run writes, and what it replaces when it finishes.
pub struct Claim {
    /// The directory the run writes (the output directory, or an attempt inside it).
    pub target: PathBuf,
    /// The output directory whose run this one replaces when it finishes.
    pub replaces: Option<PathBuf>,
    _lock: Lock,
}

/// Takes the output directory `out` for a new run: creates it when absent, locks it, and
/// decides where the run writes: `out` itself when it holds nothing, else a new
/// `out/attempts/<time>/` (with a marker naming `out`) that [`promote`] moves into `out` once
/// the run finishes. Nothing in `out` is changed here but the lock file and the attempt.
///
/// # Errors
/// [`Error::Usage`] (exit 2) for an empty path, a path that is a file, a dangling or looping
/// symbolic link or a path under a file ([`crate::outpath::check_dir`]), a directory that holds
/// files engram did not write (nothing is touched), a directory another engram process is
/// writing (its lock is held; the message gives the pid), and an unfinished run without
/// `overwrite` (it could be resumed); [`Error::Io`] when the directory cannot be created.
pub fn claim(out: &Path, overwrite: bool) -> Result<Claim> {
    if out.as_os_str().is_empty() {
        return Err(Error::Usage(
            "the output directory is an empty path; give --out DIR or `[run] out = \"DIR\"`".into(),
        ));
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::Usage(format!(
            "--out {}: is a file, not a directory",
            out.display()
        )));
    }
    // A dangling or looping symbolic link, a path under a file: refused by name (exit 2), not
    // left to `create_dir_all`'s raw OS error.
    crate::outpath::check_dir(out, "--out")?;
    if Lock::held(&out.join(LOCK)) {
        return Err(busy(out));
    }
    if let Holds::Foreign(names) = holds(out) {
        return Err(foreign(out, &names));
    }
    std::fs::create_dir_all(out).map_err(|e| crate::outpath::cannot_create("--out", out, e))?;
    let lock = take(out)?;
    finish_swap(out)?;
    // Decided under the lock: another process may have written a run meanwhile.
    let (target, replaces) = match holds(out) {
        Holds::Nothing => (out.to_path_buf(), None),
        Holds::Foreign(names) => return Err(foreign(out, &names)),
        Holds::Run { unfinished, .. } => {
            if unfinished && !overwrite {
                return Err(Error::Usage(format!(
                    "{} holds an unfinished run; continue it with `engram resume {}`, choose another --out, or pass --overwrite (a new run then replaces it when it finishes)",
                    out.display(),
                    out.display()
                )));
            }
            let attempt = new_attempt(out)?;
            (attempt, Some(out.to_path_buf()))
        }
    };
    Ok(Claim {
        target,
        replaces,
        _lock: lock,
    })
}

fn foreign(out: &Path, names: &[String]) -> Error {
    Error::Usage(format!(
        "--out {} holds files that engram did not write ({}); nothing was written or removed: choose an empty or new directory, or one of engram's runs",
        out.display(),
        names.join(", ")
    ))
}

/// Locks `dir` for writing (see [`Lock`]).
///
/// # Errors
/// [`Error::Usage`] naming the pid of the process that holds it; [`Error::Io`].
pub fn take(dir: &Path) -> Result<Lock> {
    Lock::try_take(&dir.join(LOCK))?.ok_or_else(|| busy(dir))
}

fn busy(dir: &Path) -> Error {
    let pid = std::fs::read_to_string(dir.join(LOCK)).unwrap_or_default();
    Error::Usage(format!(
        "{} is being written by another engram process (pid {}); wait for it to finish or choose another --out",
        dir.display(),
        pid.trim()
    ))
}

/// A fresh `out/attempts/<UTC time>[-k]/` with its marker naming `out`.
fn new_attempt(out: &Path) -> Result<PathBuf> {
    let root = out.join(ATTEMPTS);
    std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    let stamp = utc_stamp();
    let mut k = 0;
    let dir = loop {
        let name = if k == 0 {
            stamp.clone()
        } else {
            format!("{stamp}-{k}")
        };
        let d = root.join(name);
        match std::fs::create_dir(&d) {
            Ok(()) => break d,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => k += 1,
            Err(e) => return Err(Error::io(&d, e)),
        }
    };
    let marker = serde_json::json!({
        "replaces_run": run_identity(out),
    });
    engram_core::fsutil::write_atomic(&dir.join(ATTEMPT_MARKER), marker.to_string().as_bytes())?;
    Ok(dir)
}

/// What identifies the run in `out` for an attempt beside it: the SHA-256 of its `run.json`
/// files (the run's and its seeds'), empty when it has none.
fn run_identity(out: &Path) -> String {
    let mut bytes = std::fs::read(out.join("run.json")).unwrap_or_default();
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(out)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
                .map(|e| e.path().join("run.json"))
                .collect()
        })
        .unwrap_or_default();
    seeds.sort();
    for s in seeds {
        bytes.extend(std::fs::read(s).unwrap_or_default());
    }
    engram_core::fsutil::sha256_hex(&bytes)
}

/// The output directory `attempt` works for: the directory above its `attempts/`, when
/// `attempt` carries the marker and lies there; `None` for any other directory.
pub fn replaces(attempt: &Path) -> Option<PathBuf> {
    if !attempt.join(ATTEMPT_MARKER).is_file() {
        return None;
    }
    let abs = std::path::absolute(attempt).ok()?;
    let parent = abs.parent()?;
    (parent.file_name()? == ATTEMPTS).then(|| parent.parent().map(Path::to_path_buf))?
}

/// Whether the run in `out` is still the one `attempt` was started beside (a newer run that
/// finished meanwhile is not replaced by an older attempt).
pub fn still_replaces(attempt: &Path, out: &Path) -> bool {
    std::fs::read(attempt.join(ATTEMPT_MARKER))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("replaces_run")?.as_str().map(str::to_string))
        .is_some_and(|id| id == run_identity(out))
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A swap's journal: which attempt moves in, where the old run is set aside, and how far the
/// swap got (`aside`: the old run's entries are moving out; `in`: the attempt's are moving in).
#[derive(serde::Serialize, serde::Deserialize)]
struct Journal {
    attempt: PathBuf,
    aside: PathBuf,
    phase: String,
}

/// Whether `name` is one of the entries a swap moves (a run's files and `seed-N/`).
fn moved(name: &str) -> bool {
    RUN_FILES.contains(&name) || name.starts_with("seed-")
}

/// Moves the finished run in `attempt` into `out` in place of the run there, as a journalled
/// swap (`out/.swap.json`): `out`'s own run files (and `seed-N/` directories) are moved aside
/// into `out/.replaced-<time>/`, then the attempt's are renamed into `out`, then the old ones
/// and the empty attempt are removed. A swap killed at any point is finished by the next
/// [`claim`] or `resume` of `out` ([`finish_swap`]). Files of `out` that engram did not write,
/// and other attempts, are left alone. Renames within one file system: no file is copied.
///
/// # Errors
/// [`Error::Io`] when a rename fails (the journal stays, and the next command retries).
pub fn promote(attempt: &Path, out: &Path) -> Result<()> {
    let journal = Journal {
        attempt: std::path::absolute(attempt).unwrap_or_else(|_| attempt.to_path_buf()),
        aside: out.join(format!(".replaced-{}", utc_stamp())),
        phase: "aside".into(),
    };
    write_journal(out, &journal)?;
    finish_swap(out)
}

fn write_journal(out: &Path, j: &Journal) -> Result<()> {
    let bytes = serde_json::to_vec(j).map_err(|e| Error::Other(e.to_string()))?;
    engram_core::fsutil::write_atomic(&out.join(SWAP_JOURNAL), &bytes)
}

/// Finishes a swap that `out/.swap.json` records (see [`promote`]); nothing when there is none.
/// Each phase only renames what is still left to rename, so it can be run again after a kill.
///
/// # Errors
/// [`Error::Io`] when a rename fails.
pub fn finish_swap(out: &Path) -> Result<()> {
    let path = out.join(SWAP_JOURNAL);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    let Ok(mut j) = serde_json::from_slice::<Journal>(&bytes) else {
        return Err(Error::Usage(format!(
            "{} is damaged: a swap of runs was interrupted; move the run you want to keep into place by hand and remove the file",
            path.display()
        )));
    };
    let mv = |from: &Path, to: &Path| std::fs::rename(from, to).map_err(|e| Error::io(from, e));
    let entries = |d: &Path| -> Vec<(String, PathBuf)> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .filter(|(n, _)| moved(n))
                    .collect()
            })
            .unwrap_or_default()
    };
    if j.phase == "aside" {
        std::fs::create_dir_all(&j.aside).map_err(|e| Error::io(&j.aside, e))?;
        for (name, p) in entries(out) {
            mv(&p, &j.aside.join(&name))?;
        }
        j.phase = "in".into();
        write_journal(out, &j)?;
    }
    for (name, p) in entries(&j.attempt) {
        mv(&p, &out.join(&name))?;
    }
    if j.aside.exists() {
        std::fs::remove_dir_all(&j.aside).map_err(|e| Error::io(&j.aside, e))?;
    }
    if j.attempt.exists() {
        std::fs::remove_dir_all(&j.attempt).map_err(|e| Error::io(&j.attempt, e))?;
    }
    let root = out.join(ATTEMPTS);
    if std::fs::read_dir(&root).is_ok_and(|mut rd| rd.next().is_none()) {
        let _ = std::fs::remove_dir(&root);
    }
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_classified_by_their_manifest() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        assert_eq!(holds(&p.join("absent")), Holds::Nothing);
        std::fs::write(p.join(LOCK), "1").unwrap();
        assert_eq!(holds(p), Holds::Nothing);
        std::fs::write(p.join("config.toml"), "").unwrap();
        assert_eq!(holds(p), Holds::Foreign(vec!["config.toml".into()]));
        // A file named run.json is not a manifest.
        std::fs::write(p.join("run.json"), "{}").unwrap();
        assert!(matches!(holds(p), Holds::Foreign(_)));
        std::fs::write(
            p.join("run.json"),
            r#"{"engram":"0.1.0","config":"/x.toml","config_sha256":"ab"}"#,
        )
        .unwrap();
        std::fs::write(p.join(".engram-tmp-abc"), "").unwrap();
        std::fs::create_dir(p.join("checkpoints")).unwrap();
        assert_eq!(
            holds(p),
            Holds::Run {
                reported: false,
                unfinished: true
            }
        );
        std::fs::write(p.join("report.json"), "{}").unwrap();
        assert_eq!(
            holds(p),
            Holds::Run {
                reported: true,
                unfinished: false
            }
        );
    }

    #[test]
    fn promote_replaces_only_engram_files_and_keeps_others() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path();
        for f in ["report.json", "run.json", "notes.txt"] {
            std::fs::write(out.join(f), "old").unwrap();
        }
        std::fs::create_dir_all(out.join("attempts")).unwrap();
        std::fs::create_dir_all(out.join("seed-0")).unwrap();
        let a = new_attempt(out).unwrap();
        assert_eq!(replaces(&a).unwrap(), std::path::absolute(out).unwrap());
        assert!(still_replaces(&a, out));
        for f in ["report.json", "run.json", "steps.csv"] {
            std::fs::write(a.join(f), "new").unwrap();
        }
        let failed = new_attempt(out).unwrap();
        promote(&a, out).unwrap();
        let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
        assert_eq!(read("report.json"), "new");
        assert_eq!(read("steps.csv"), "new");
        assert_eq!(read("notes.txt"), "old");
        assert!(!out.join("seed-0").exists());
        assert!(!a.exists());
        assert!(failed.is_dir(), "other attempts are kept");
        let left: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".replaced"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_swap_killed_halfway_is_finished_by_the_next_command() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path();
        for f in ["report.json", "run.json", "steps.csv"] {
            std::fs::write(out.join(f), "old").unwrap();
        }
        let a = new_attempt(out).unwrap();
        for f in ["report.json", "run.json", "steps.csv"] {
            std::fs::write(a.join(f), "new").unwrap();
        }
        // Killed after the old report was set aside and one new file moved in.
        let aside = out.join(".replaced-x");
        std::fs::create_dir_all(&aside).unwrap();
        for f in ["report.json", "run.json", "steps.csv"] {
            std::fs::rename(out.join(f), aside.join(f)).unwrap();
        }
        std::fs::rename(a.join("run.json"), out.join("run.json")).unwrap();
        write_journal(
            out,
            &Journal {
                attempt: a.clone(),
                aside: aside.clone(),
                phase: "in".into(),
            },
        )
        .unwrap();
        finish_swap(out).unwrap();
        for f in ["report.json", "run.json", "steps.csv"] {
            assert_eq!(std::fs::read_to_string(out.join(f)).unwrap(), "new", "{f}");
        }
        assert!(!aside.exists() && !a.exists() && !out.join(SWAP_JOURNAL).exists());
        // Nothing to finish: a no-op.
        finish_swap(out).unwrap();
    }

    #[test]
    fn a_held_lock_refuses_a_second_writer_and_dies_with_its_holder() {
        let d = tempfile::tempdir().unwrap();
        let first = take(d.path()).unwrap();
        assert!(Lock::held(&d.path().join(LOCK)));
        let msg = take(d.path()).err().unwrap().to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(first);
        assert!(!Lock::held(&d.path().join(LOCK)));
        assert!(take(d.path()).is_ok());
        assert_eq!(utc_stamp().len(), 15);
    }
}
