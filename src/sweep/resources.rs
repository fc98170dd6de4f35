//! Slurm resources of a sweep (`[sweep.slurm]`) and their check. A leaf module: the sweep
//! file's parser (`file`), the grid's manifest (`grid`) and the job-array writer (`slurm`) all
//! read it, and it reads none of them.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Slurm resources of each array task (`[sweep.slurm]`); every key is optional.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlurmOptions {
    /// `--cpus-per-task` (default 1); also each run's thread count (`RAYON_NUM_THREADS`).
    pub cpus_per_task: Option<u32>,
    /// `--mem`, e.g. `"4G"` (default `"4G"`).
    pub mem: Option<String>,
    /// `--time`, e.g. `"01:00:00"` (default `"01:00:00"`).
    pub time: Option<String>,
    /// `--partition` (default: the cluster's default partition).
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--gres`, e.g. `"gpu:1"` for one GPU per task.
    pub gres: Option<String>,
    /// At most this many array tasks at once (`--array=…%N`); default: no limit.
    pub max_parallel: Option<u32>,
    /// The `engram` binary the tasks run (default: this binary), for clusters where it lives
    /// elsewhere on the shared file system.
    pub engram: Option<PathBuf>,
    /// Further `#SBATCH` options, one per entry, e.g. `["--qos=short"]`.
    pub extra: Option<Vec<String>>,
}

/// Checks `[sweep.slurm]` before any script is written: counts at least 1, `mem` a size
/// (`4G`, `500M`, `1024`), `time` in one of Slurm's forms (`MM`, `HH:MM:SS`, `D-HH:MM`, …), no
/// line break or double quote in any value (they would end or break an `#SBATCH` line), and
/// `extra` entries that are options (`--qos=short`).
///
/// # Errors
/// What is wrong, for the caller to place in the sweep file.
pub fn check_options(o: &SlurmOptions) -> std::result::Result<(), String> {
    if o.cpus_per_task == Some(0) {
        return Err("cpus_per_task must be at least 1".into());
    }
    if o.max_parallel == Some(0) {
        return Err("max_parallel must be at least 1 (leave it out for no limit)".into());
    }
    if let Some(m) = &o.mem {
        let digits = m.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
        if digits.is_empty()
            || !digits.chars().all(|c| c.is_ascii_digit())
            || m.len() > digits.len() + 1
        {
            return Err(format!(
                "mem `{m}` is not a size such as \"4G\" or \"500M\""
            ));
        }
    }
    if let Some(t) = &o.time
        && (t.is_empty()
            || !t
                .chars()
                .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
            || t.starts_with([':', '-']))
    {
        return Err(format!(
            "time `{t}` is not one of Slurm's forms (\"30\", \"01:00:00\", \"1-12:00\")"
        ));
    }
    let strings = [&o.mem, &o.time, &o.partition, &o.account, &o.gres]
        .into_iter()
        .flatten()
        .chain(o.extra.iter().flatten())
        .cloned()
        .chain(o.engram.iter().map(|p| p.display().to_string()));
    for v in strings {
        if v.contains(['\n', '\r', '"']) {
            return Err(format!(
                "{v:?}: a value cannot hold a line break or a double quote"
            ));
        }
    }
    if let Some(e) = o
        .extra
        .iter()
        .flatten()
        .find(|e| !e.trim().starts_with("--"))
    {
        return Err(format!(
            "extra `{e}` is not an sbatch option (write it as \"--qos=short\")"
        ));
    }
    Ok(())
}
