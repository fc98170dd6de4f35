//! The trial load: a plugin is opened first in a child process, so that a library that crashes
//! while it loads (a damaged file whose declaration is intact: garbage code, a broken symbol
//! table, a constructor that faults) takes down the child instead of the host.
//!
//! Loading foreign code cannot be made safe inside the process that loads it: `dlopen` runs the
//! library's constructors and relocations, and a fault there is a signal no Rust code can
//! catch. The `engram` binary therefore installs a [`Probe`] ([`set_probe`]) that re-executes
//! itself as `engram __probe-plugin PATH` ([`PROBE_COMMAND`]); the child loads the plugin and
//! calls its register function ([`probe_child`]), and the parent ([`probe_in_child`]) opens
//! the library itself only when the child came back: loaded, or refused with a typed error
//! (which the parent's own load then reproduces, without a crash). A child killed by a signal
//! or exiting otherwise is [`PluginError::Crashed`] naming the plugin (exit code 2).
//!
//! A library user of engram-core gets no probe unless it installs one: [`super::load`] then
//! opens the library directly, as before.
//!
//! What the trial load cannot catch: a plugin that loads and registers cleanly, then crashes
//! later (in a strategy's method during training, by a fault rather than a panic).

use super::PluginError;
use std::io::Read as _;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A trial load of the library at a (canonical) path, run by [`super::load`] after the
/// declaration's checks and before the library is opened in this process: `Err` with how the
/// trial ended (`killed by signal 11 (SIGSEGV)`) refuses the library.
pub type Probe = fn(&Path) -> Result<(), String>;

static PROBE: OnceLock<Probe> = OnceLock::new();

/// Installs `probe` for every later [`super::load`] of this process (the first call wins).
pub fn set_probe(probe: Probe) {
    let _ = PROBE.set(probe);
}

/// The installed probe's verdict on `canonical`: [`PluginError::Crashed`] naming `path` when
/// the trial load crashed; `Ok` without a probe.
pub(crate) fn run_probe(path: &Path, canonical: &Path) -> Result<(), PluginError> {
    match PROBE.get() {
        Some(probe) => probe(canonical).map_err(|how| PluginError::Crashed {
            path: path.to_path_buf(),
            how,
        }),
        None => Ok(()),
    }
}

/// The hidden subcommand of the `engram` binary that runs [`probe_child`]: `engram
/// __probe-plugin PATH`.
pub const PROBE_COMMAND: &str = "__probe-plugin";

/// The child's exit status when the plugin loaded and registered.
pub const PROBE_LOADED: u8 = 0;

/// The child's exit status when loading returned a typed error (no crash): the parent's own
/// load reproduces the error in-process.
pub const PROBE_REFUSED: u8 = 3;

/// How long a trial load may take before it counts as hung (seconds).
pub const PROBE_TIMEOUT_S: u64 = 120;

/// The child's side: loads `path` (declaration checks, `dlopen`, register call) and returns its
/// exit status, [`PROBE_LOADED`] or [`PROBE_REFUSED`] (with the error on stderr). A crash ends
/// the process before it returns.
pub fn probe_child(path: &Path) -> u8 {
    match super::load(path) {
        Ok(_) => PROBE_LOADED,
        Err(e) => {
            eprintln!("{e}");
            PROBE_REFUSED
        }
    }
}

/// The parent's side, a [`Probe`]: runs this executable as `EXE __probe-plugin PATH` and waits
/// for it (at most [`PROBE_TIMEOUT_S`]). `Ok` when it exits with [`PROBE_LOADED`] or
/// [`PROBE_REFUSED`]; otherwise how it ended — the signal that killed it, another exit status
/// or the timeout — with the last lines it wrote to stderr (the dynamic loader's assertion, for
/// example).
///
/// # Errors
/// That description, also when the child cannot be started.
pub fn probe_in_child(path: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find engram itself: {e}"))?;
    let mut child = std::process::Command::new(&exe)
        .arg(PROBE_COMMAND)
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the trial load ({}): {e}", exe.display()))?;
    // stderr is drained on a thread, so that a child writing much cannot block on the pipe.
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(1 << 20).read_to_string(&mut text);
        }
        text
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < Duration::from_secs(PROBE_TIMEOUT_S) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let said = last_lines(&reader.join().unwrap_or_default());
    let Some(status) = status else {
        return Err(format!(
            "the trial load did not finish within {PROBE_TIMEOUT_S} s{said}"
        ));
    };
    match status.code() {
        Some(c) if c == i32::from(PROBE_LOADED) || c == i32::from(PROBE_REFUSED) => Ok(()),
        Some(c) => Err(format!("the trial load exited with status {c}{said}")),
        None => Err(format!("the trial load was {}{said}", signal_of(&status))),
    }
}

/// `killed by signal 11 (SIGSEGV)`.
fn signal_of(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(sig) = status.signal() {
            let name = match sig {
                4 => " (SIGILL)",
                5 => " (SIGTRAP)",
                6 => " (SIGABRT)",
                7 => " (SIGBUS)",
                8 => " (SIGFPE)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    format!("ended without an exit status ({status})")
}

/// The last three non-empty lines of `text`, each cut to 200 characters, as `: a | b | c`;
/// empty for none.
fn last_lines(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.chars().take(200).collect())
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(": {}", lines[lines.len().saturating_sub(3)..].join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_load_reports_the_signal_and_what_the_child_said() {
        assert_eq!(last_lines(""), "");
        assert_eq!(last_lines("a\n\n b \nc\nd\n"), ": b | c | d");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            let segv = std::process::ExitStatus::from_raw(11);
            assert_eq!(signal_of(&segv), "killed by signal 11 (SIGSEGV)");
            let abrt = std::process::ExitStatus::from_raw(6);
            assert_eq!(signal_of(&abrt), "killed by signal 6 (SIGABRT)");
        }
        // Without a probe installed, nothing is run.
        assert!(run_probe(Path::new("x.so"), Path::new("/x.so")).is_ok());
    }
}
