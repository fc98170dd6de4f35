//! Executing one run of a grid: its lock, the decision to skip, resume or start it, the child
//! `engram` process, and its state record. The local runner and a Slurm array task both call
//! [`start`] and [`finish`], so a run behaves the same wherever it executes.

use super::grid::{GridRun, Manifest};
use crate::outdir::Lock;
use engram_core::train::report::finished_run;
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What is known of a run.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Never started.
    Pending,
    /// A process holds its lock now.
    Running,
    /// Its `report.json` exists.
    Done,
    /// Its last attempt exited with an error (see the state's `exit_code` and `error`).
    Failed,
    /// Started, stopped before its report (killed, Ctrl-C, a requeued Slurm task): the next
    /// execution resumes it from its newest checkpoint.
    Interrupted,
}

impl Status {
    /// The lowercase word (`done`, `failed`, …).
    pub fn word(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
        }
    }
}

/// `DIR/state/<run>.json`: the last attempt at a run.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct State {
    /// `running` while executing, then `done`, `failed` or `interrupted`.
    pub status: Option<Status>,
    /// Attempts so far (this one included).
    pub attempts: u32,
    /// The child's exit code (`None` while running, or when killed by a signal).
    pub exit_code: Option<i32>,
    /// The last `error:` line of the run's log, for a failed run.
    pub error: Option<String>,
    /// Host name of the process that executed it.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// `SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID` when it ran as an array task.
    pub slurm_task: Option<String>,
    /// Wall-clock seconds of the last attempt.
    pub seconds: Option<f64>,
}

/// Paths of a run inside the sweep's directory.
pub struct RunPaths {
    /// The run's output directory.
    pub out: PathBuf,
    /// `state/<run>.json`.
    pub state: PathBuf,
    /// `state/<run>.lock`.
    pub lock: PathBuf,
    /// `logs/<run>.log`.
    pub log: PathBuf,
}

impl RunPaths {
    /// The paths of `run` under `dir`.
    pub fn of(dir: &Path, run: &GridRun) -> Self {
        let flat = run.flat_name();
        Self {
            out: dir.join(&run.name),
            state: dir.join("state").join(format!("{flat}.json")),
            lock: dir.join("state").join(format!("{flat}.lock")),
            log: dir.join("logs").join(format!("{flat}.log")),
        }
    }
}

/// Reads a run's state file (default when absent or unreadable).
pub fn read_state(p: &RunPaths) -> State {
    std::fs::read(&p.state)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_state(p: &RunPaths, s: &State) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(s).map_err(|e| Error::Other(e.to_string()))?;
    engram_core::fsutil::write_atomic(&p.state, &bytes)
}

/// Where a run stands on disk: `Done` with a finished report, `Interrupted` with checkpoints or a
/// state that was running when its process died, `Failed` from its state, else `Pending`;
/// `Running` while its lock is held.
pub fn status(dir: &Path, run: &GridRun) -> Status {
    let p = RunPaths::of(dir, run);
    if finished_run(&p.out) {
        return Status::Done;
    }
    if Lock::held(&p.lock) {
        return Status::Running;
    }
    match read_state(&p).status {
        Some(Status::Failed) => Status::Failed,
        Some(_) => Status::Interrupted,
        None if p.out.join("checkpoints").is_dir() => Status::Interrupted,
        None => Status::Pending,
    }
}

/// A run being executed: its child process, lock and state.
pub struct Started {
    /// The grid's run.
    pub run: GridRun,
    /// Its paths.
    pub paths: RunPaths,
    /// `resume` or `run`.
    pub verb: &'static str,
    child: Child,
    _lock: Lock,
    state: State,
    t0: std::time::Instant,
    interrupted: bool,
}

/// What [`start`] did.
pub enum Outcome {
    /// The run has a report already.
    Finished,
    /// Another process holds its lock.
    Busy,
    /// It now executes in a child process.
    Started(Box<Started>),
}

/// Executes `run` of `manifest` under `dir` unless it is finished or locked: `engram resume`
/// when it has checkpoints, else `engram run CONFIG --out DIR/<run> --set …` (its overrides,
/// the seed among them), as a child process of `exe` with `threads` threads
/// (`RAYON_NUM_THREADS`) and its output in `DIR/logs/<run>.log`. The child is killed when
/// this process dies (`PR_SET_PDEATHSIG`), keeping its checkpoints for the next execution.
///
/// # Errors
/// [`Error::Io`] when the lock, log or state file cannot be written or the child not started.
pub fn start(
    exe: &Path,
    dir: &Path,
    manifest: &Manifest,
    run: &GridRun,
    threads: usize,
) -> Result<Outcome> {
    let paths = RunPaths::of(dir, run);
    if finished_run(&paths.out) {
        return Ok(Outcome::Finished);
    }
    let Some(lock) = Lock::try_take(&paths.lock)? else {
        return Ok(Outcome::Busy);
    };
    // Checked again under the lock: another process may just have finished it.
    if finished_run(&paths.out) {
        return Ok(Outcome::Finished);
    }
    let (mut cmd, verb) = child_command(exe, manifest, run, &paths, threads)?;
    let child = cmd.spawn().map_err(|e| Error::io(exe, e))?;
    let old = read_state(&paths);
    let state = State {
        status: Some(Status::Running),
        attempts: old.attempts + 1,
        exit_code: None,
        error: None,
        host: hostname(),
        pid: child.id(),
        slurm_task: slurm_task(),
        seconds: None,
    };
    write_state(&paths, &state)?;
    Ok(Outcome::Started(Box::new(Started {
        run: run.clone(),
        paths,
        verb,
        child,
        _lock: lock,
        state,
        t0: std::time::Instant::now(),
        interrupted: false,
    })))
}

/// The command that executes `run` (`engram resume` when it has checkpoints, else `engram
/// run`), its output appended to the run's log, in its own process group and killed with this
/// process; with the verb it runs.
///
/// # Errors
/// [`Error::Io`] when the log cannot be opened.
fn child_command(
    exe: &Path,
    manifest: &Manifest,
    run: &GridRun,
    paths: &RunPaths,
    threads: usize,
) -> Result<(Command, &'static str)> {
    let mut cmd = Command::new(exe);
    for p in &manifest.plugins {
        cmd.arg("--plugin").arg(p);
    }
    let verb = if paths.out.join("checkpoints").is_dir() && paths.out.join("config.toml").is_file()
    {
        cmd.arg("resume").arg(&paths.out);
        "resume"
    } else {
        cmd.arg("run")
            .arg(&run.config)
            .arg("--out")
            .arg(&paths.out)
            .arg("--overwrite");
        for s in &run.sets {
            cmd.arg("--set").arg(s);
        }
        "run"
    };
    cmd.arg("--quiet");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log)
        .map_err(|e| Error::io(&paths.log, e))?;
    let log2 = log.try_clone().map_err(|e| Error::io(&paths.log, e))?;
    {
        use std::io::Write;
        let _ = writeln!(&log, "== engram sweep: {verb} {}", run.name);
    }
    cmd.env("RAYON_NUM_THREADS", threads.max(1).to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // The child runs in its own process group, so that a Ctrl-C at the terminal reaches this
    // process only and is forwarded once ([`Started::interrupt`]); it dies with this process.
    // SAFETY: setpgid and prctl in the forked child before exec; both async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Ok((cmd, verb))
}

impl Started {
    /// `Some(status)` once the child has exited (`Done`, `Failed`, or `Interrupted` for a
    /// Ctrl-C or a signal), with its state written; `None` while it runs.
    ///
    /// # Errors
    /// [`Error::Io`] when the state cannot be written or the child not waited for.
    pub fn poll(&mut self) -> Result<Option<Status>> {
        match self
            .child
            .try_wait()
            .map_err(|e| Error::io(&self.paths.log, e))?
        {
            None => Ok(None),
            Some(st) => self.finish(st).map(Some),
        }
    }

    /// Waits for the child, passing on an interruption of this process
    /// ([`engram_core::train::trainer::INTERRUPTED`]); its final status, with its state written.
    ///
    /// # Errors
    /// As [`Started::poll`].
    pub fn wait(mut self) -> Result<Status> {
        use std::sync::atomic::Ordering;
        loop {
            if engram_core::train::trainer::INTERRUPTED.load(Ordering::SeqCst) {
                self.interrupt();
            }
            if let Some(status) = self.poll()? {
                return Ok(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Asks the child to stop as Ctrl-C does (SIGINT: it writes a checkpoint at its next step
    /// and exits 130); sent once.
    pub fn interrupt(&mut self) {
        if !self.interrupted {
            self.interrupted = true;
            // SAFETY: kill(2) on the pid of a child this value owns and has not reaped.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
            }
        }
    }

    fn finish(&mut self, st: std::process::ExitStatus) -> Result<Status> {
        let done = finished_run(&self.paths.out);
        let status = match st.code() {
            Some(0) if done => Status::Done,
            Some(130) | None => Status::Interrupted,
            _ => Status::Failed,
        };
        self.state.status = Some(status);
        self.state.exit_code = st.code();
        self.state.seconds = Some(self.t0.elapsed().as_secs_f64());
        self.state.error = (status == Status::Failed).then(|| last_error(&self.paths.log));
        write_state(&self.paths, &self.state)?;
        Ok(status)
    }

    /// The child's exit code once [`Started::poll`] or [`Started::wait`] saw it exit.
    pub fn exit_code(&self) -> Option<i32> {
        self.state.exit_code
    }

    /// The last error line of a failed attempt.
    pub fn error(&self) -> Option<&str> {
        self.state.error.as_deref()
    }

    /// Seconds since the child started.
    pub fn elapsed(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// The last line starting with `error:` in a log (else its last line), for a failed run.
fn last_error(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("(no output)")
        .to_string()
}

/// This machine's host name (empty when unknown).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `JOB_TASK` of the Slurm array task this process is, if it is one.
fn slurm_task() -> Option<String> {
    let job = std::env::var("SLURM_ARRAY_JOB_ID").ok()?;
    let task = std::env::var("SLURM_ARRAY_TASK_ID").ok()?;
    Some(format!("{job}_{task}"))
}
