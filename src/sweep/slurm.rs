//! Slurm execution: one job-array script for the grid's unfinished runs, submitted with
//! `sbatch`; each array task runs `engram sweep task DIR --index I`, which executes run `I` of
//! `DIR/grid.json` exactly as the local runner does ([`super::exec`]). A task that is
//! cancelled, preempted or requeued (`--requeue`) resumes its run from its newest checkpoint
//! when it starts again, so the job array is requeue-safe.

use super::exec::{self, Outcome, Status};
use super::grid::Manifest;
use engram_core::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `--key=value` for an `#SBATCH` line, the value in double quotes when it holds a space.
fn sbatch_opt(k: &str, v: &str) -> String {
    if v.contains(char::is_whitespace) {
        format!("#SBATCH --{k}=\"{v}\"")
    } else {
        format!("#SBATCH --{k}={v}")
    }
}

/// `0-3,5,7-11`: array indices as Slurm's `--array` takes them (sorted, ranges merged).
pub fn array_spec(indices: &[usize]) -> String {
    let mut v = indices.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The job-array script for `indices` (positions in `manifest.runs`) of the sweep in `dir`
/// (an absolute path on a file system the nodes share), running `engram`.
///
/// Resources come from `[sweep.slurm]`: `--cpus-per-task` (default 1; also each run's
/// `RAYON_NUM_THREADS`), `--mem` (default 4G), `--time` (default 01:00:00), and when given
/// `--partition`, `--account`, `--gres` and the `extra` lines; `max_parallel` adds `%N` to
/// `--array`. Every task's output goes to `DIR/slurm/%A_%a.out` (appended across requeues).
pub fn script(manifest: &Manifest, dir: &Path, engram: &Path, indices: &[usize]) -> String {
    let o = &manifest.slurm;
    let mut array = array_spec(indices);
    if let Some(n) = o.max_parallel {
        let _ = write!(array, "%{n}");
    }
    let mut s = String::from("#!/bin/bash\n");
    let _ = writeln!(
        s,
        "# engram sweep `{}`: {} of {} runs, one array task each (index = position in grid.json).",
        manifest.name,
        indices.len(),
        manifest.runs.len()
    );
    let _ = writeln!(
        s,
        "# Requeue-safe: a task that starts again resumes its run from its newest checkpoint."
    );
    let mut opt = |k: &str, v: &str| {
        let _ = writeln!(s, "{}", sbatch_opt(k, v));
    };
    opt("job-name", &format!("engram-{}", manifest.name));
    opt("array", &array);
    opt("cpus-per-task", &o.cpus_per_task.unwrap_or(1).to_string());
    opt("mem", o.mem.as_deref().unwrap_or("4G"));
    opt("time", o.time.as_deref().unwrap_or("01:00:00"));
    opt(
        "output",
        &dir.join("slurm").join("%A_%a.out").display().to_string(),
    );
    opt("open-mode", "append");
    if let Some(p) = &o.partition {
        opt("partition", p);
    }
    if let Some(a) = &o.account {
        opt("account", a);
    }
    if let Some(g) = &o.gres {
        opt("gres", g);
    }
    s.push_str("#SBATCH --requeue\n");
    for e in o.extra.iter().flatten() {
        let _ = writeln!(s, "#SBATCH {}", e.trim());
    }
    s.push_str("set -euo pipefail\n");
    s.push_str("export RAYON_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n");
    let _ = writeln!(
        s,
        "exec {} sweep task {} --index \"$SLURM_ARRAY_TASK_ID\"",
        shell_quote(&engram.display().to_string()),
        shell_quote(&dir.display().to_string())
    );
    s
}

/// `'…'` quoting for a shell word.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// One `sbatch` submission, recorded in `DIR/slurm/jobs.json`.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize, PartialEq)]
pub struct Submission {
    /// The array job's id.
    pub job_id: String,
    /// The grid indices it runs.
    pub indices: Vec<usize>,
}

/// The submissions recorded for the sweep in `dir`, oldest first.
pub fn submissions(dir: &Path) -> Vec<Submission> {
    std::fs::read(dir.join("slurm").join("jobs.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes `DIR/slurm/array.sbatch` and submits it with `sbatch --parsable`; records the job id.
///
/// # Errors
/// [`Error::Usage`] when `sbatch` is not installed; [`Error::Other`] when it refuses the
/// script or cannot reach the controller (its message);
/// [`Error::Io`] when the files cannot be written.
pub fn submit(dir: &Path, script: &str, indices: &[usize]) -> Result<Submission> {
    let sdir = dir.join("slurm");
    std::fs::create_dir_all(&sdir).map_err(|e| Error::io(&sdir, e))?;
    let path = sdir.join("array.sbatch");
    engram_core::fsutil::write_atomic(&path, script.as_bytes())?;
    let out = std::process::Command::new("sbatch")
        .arg("--parsable")
        .arg(&path)
        .output()
        .map_err(|e| {
            Error::Usage(format!(
                "cannot run sbatch ({e}): is Slurm installed here? `engram sweep submit --print` shows the script to submit elsewhere"
            ))
        })?;
    if !out.status.success() {
        // Not bad input: the cluster refused or did not answer (exit 1).
        return Err(Error::Other(format!(
            "sbatch refused {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let job_id = text
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let sub = Submission {
        job_id,
        indices: indices.to_vec(),
    };
    let mut all = submissions(dir);
    all.push(sub.clone());
    let bytes = serde_json::to_vec_pretty(&all).map_err(|e| Error::Other(e.to_string()))?;
    engram_core::fsutil::write_atomic(&sdir.join("jobs.json"), &bytes)?;
    Ok(sub)
}

/// Slurm's view of the recorded array tasks, `grid index → state` (`PENDING`, `RUNNING`, …),
/// from `squeue` (jobs still queued or running) and then `sacct` (finished ones, where
/// accounting is configured). Empty where neither answers.
pub fn queue_states(dir: &Path) -> std::collections::BTreeMap<usize, String> {
    let mut states = std::collections::BTreeMap::new();
    let subs = submissions(dir);
    if subs.is_empty() {
        return states;
    }
    let ids: Vec<&str> = subs.iter().map(|s| s.job_id.as_str()).collect();
    let run = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let joined = ids.join(",");
    // sacct first (older states), then squeue overrides with the live ones.
    if let Some(text) = run(
        "sacct",
        &["-n", "-P", "-X", "-j", &joined, "-o", "JobID,State"],
    ) {
        for l in text.lines() {
            if let Some((id, st)) = l.split_once('|')
                && let Some(i) = task_index(id)
            {
                states.insert(i, st.split_whitespace().next().unwrap_or(st).to_string());
            }
        }
    }
    if let Some(text) = run("squeue", &["-h", "-r", "-j", &joined, "-o", "%i|%T"]) {
        for l in text.lines() {
            if let Some((id, st)) = l.split_once('|')
                && let Some(i) = task_index(id)
            {
                states.insert(i, st.trim().to_string());
            }
        }
    }
    states
}

/// `123_4` → 4.
fn task_index(id: &str) -> Option<usize> {
    id.trim().rsplit_once('_')?.1.parse().ok()
}

/// `engram sweep task DIR --index I`: executes run `I` of the sweep in `dir` in the foreground
/// (what each array task calls), with `RAYON_NUM_THREADS` or 1 thread. Returns the run's
/// status; a run already finished is `Done`, one whose lock another process holds is
/// `Running`.
///
/// # Errors
/// [`Error::Usage`] for an index outside the grid; the errors of [`exec::start`].
pub fn task(exe: &Path, dir: &Path, index: usize) -> Result<Status> {
    let manifest = Manifest::read(dir)?;
    let run = manifest.runs.get(index).ok_or_else(|| {
        Error::Usage(format!(
            "sweep task: index {index} is outside the grid of {} runs in {}",
            manifest.runs.len(),
            dir.display()
        ))
    })?;
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    match exec::start(exe, dir, &manifest, run, threads)? {
        Outcome::Finished => Ok(Status::Done),
        Outcome::Busy => Ok(Status::Running),
        Outcome::Started(s) => s.wait(),
    }
}

/// The engram binary the array tasks run: `[sweep.slurm] engram`, else this one.
pub fn engram_binary(manifest: &Manifest) -> PathBuf {
    manifest
        .slurm
        .engram
        .clone()
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| PathBuf::from("engram"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_spec_merges_ranges() {
        assert_eq!(array_spec(&[0, 1, 2, 3]), "0-3");
        assert_eq!(array_spec(&[7, 5, 0, 1, 9, 8, 10, 11]), "0-1,5,7-11");
        assert_eq!(array_spec(&[4]), "4");
        assert_eq!(task_index("123_4"), Some(4));
        assert_eq!(task_index("123_[5-7]"), None);
        assert_eq!(shell_quote("/a b/it's"), "'/a b/it'\\''s'");
        assert_eq!(shell_quote("/usr/bin/engram"), "/usr/bin/engram");
    }
}
