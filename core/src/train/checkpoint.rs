//! Checkpoints: everything a run needs to continue exactly where it stopped.
//!
//! A checkpoint is a directory `OUT/checkpoints/step-NNNNNNNN/` holding
//! - `model.bpk`: the model's parameters (burnpack, which keeps parameter ids);
//! - `optimizer.bin`: the optimiser's state (burn-optim's `ModuleOptimizer` record, burnpack);
//! - `state.json`: the loop's [`Progress`] and every strategy's metadata;
//! - `tensors.bpk`: every strategy's tensors (burnpack), indexed in `state.json`;
//! - `manifest.json`, written last: the SHA-256 of each file.
//!
//! The files are written into `step-NNNNNNNN.tmp/`, which is renamed into place only once the
//! manifest is on disk: a kill at any moment leaves either the previous checkpoints or a
//! complete new one (plus a `.tmp` directory that loading ignores). Loading verifies every
//! checksum and falls back to the newest checkpoint that verifies. The two newest checkpoints
//! are kept, and the one at the current task's start (a restart after a divergence goes back
//! to it).
//!
//! Randomness needs no saving: every stream is derived from `(seed, position)` (see
//! [`crate::rng`]).

use super::memory::PhaseMemory;
use super::metrics::Matrix;
use super::report::{Event, MemoryReport, StepLog, Timings, TrainingCounters};
use crate::error::{Error, Result};
use crate::fsutil::write_atomic;
use crate::strategy::{StateTensor, StrategyState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the continual loop is, and what it has measured so far, in named parts.
///
/// In a checkpoint's `state.json` the parts' fields stand side by side at the top level
/// (`#[serde(flatten)]`), under the names and in the order checkpoints have always had, and
/// the pairs and triples ([`LossSum`], [`LogWindow`], [`Adjust`]) as JSON arrays: checkpoints
/// written before the parts existed load unchanged.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Progress {
    /// Where the loop is: task, epoch, batch, step.
    #[serde(flatten)]
    pub at: Cursor,
    /// The running losses and the last learning rate.
    #[serde(flatten)]
    pub losses: Losses,
    /// The accuracy matrices and the initial model's accuracies.
    #[serde(flatten)]
    pub results: Results,
    /// What the run has recorded: counters, events, logged steps, time and memory.
    #[serde(flatten)]
    pub record: Record,
    /// The anomaly rollbacks of the current task and their adjustments.
    #[serde(flatten)]
    pub retry: Retry,
    /// What the run started from: the initial weights and the data.
    #[serde(flatten)]
    pub origin: Origin,
}

/// Where the loop is: the next step trains batch `chunk` of epoch `epoch` of task `round`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Cursor {
    /// The task (round) in progress or next.
    pub round: usize,
    /// The epoch in progress.
    pub epoch: usize,
    /// The next batch index within the epoch.
    pub chunk: usize,
    /// Steps taken in the current task.
    pub step_in_task: usize,
    /// Steps taken in the run.
    pub global_step: usize,
    /// Whether the `before_task` hooks already ran for `round`.
    pub before_task_done: bool,
}

/// The running losses: the current epoch's and the logging window's sums, and the last
/// learning rate and epoch loss.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Losses {
    /// The step losses of the current epoch.
    pub epoch_loss: LossSum,
    /// The logging window: the steps since the last `steps.csv` row.
    pub window: LogWindow,
    /// Learning rate of the last step.
    pub last_lr: f64,
    /// Mean loss of the last finished epoch.
    pub last_epoch_loss: f64,
}

/// A sum of step losses and their count; stored as the pair `[sum, steps]`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(from = "(f64, usize)", into = "(f64, usize)")]
pub struct LossSum {
    /// Sum of the step losses.
    pub sum: f64,
    /// Steps summed.
    pub steps: usize,
}

impl LossSum {
    /// Adds one step's loss.
    pub fn add(&mut self, loss: f64) {
        self.sum += loss;
        self.steps += 1;
    }

    /// The mean step loss, `sum / max(steps, 1)` (0 without steps).
    pub fn mean(&self) -> f64 {
        self.sum / self.steps.max(1) as f64
    }
}

impl From<(f64, usize)> for LossSum {
    fn from((sum, steps): (f64, usize)) -> Self {
        Self { sum, steps }
    }
}

impl From<LossSum> for (f64, usize) {
    fn from(l: LossSum) -> Self {
        (l.sum, l.steps)
    }
}

/// The logging window, the steps since the last `steps.csv` row; stored as the triple
/// `[loss_sum, steps, rows]`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(from = "(f64, usize, usize)", into = "(f64, usize, usize)")]
pub struct LogWindow {
    /// Sum of the window's step losses.
    pub loss_sum: f64,
    /// Steps in the window.
    pub steps: usize,
    /// Rows trained in the window (new plus replayed).
    pub rows: usize,
}

impl LogWindow {
    /// Adds one step's loss and its `rows`.
    pub fn add(&mut self, loss: f64, rows: usize) {
        self.loss_sum += loss;
        self.steps += 1;
        self.rows += rows;
    }
}

impl From<(f64, usize, usize)> for LogWindow {
    fn from((loss_sum, steps, rows): (f64, usize, usize)) -> Self {
        Self {
            loss_sum,
            steps,
            rows,
        }
    }
}

impl From<LogWindow> for (f64, usize, usize) {
    fn from(w: LogWindow) -> Self {
        (w.loss_sum, w.steps, w.rows)
    }
}

/// The accuracy matrices so far and the initial model's accuracy per task.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Results {
    /// Rows of the accuracy matrix so far.
    pub matrix: Matrix,
    /// Rows of the task-IL view of the matrix so far (class-incremental streams only; empty
    /// otherwise and in checkpoints of older versions).
    pub task_il_matrix: Matrix,
    /// Accuracy of the initial model per task.
    pub baseline: Vec<f64>,
    /// The same in the task-IL view (class-incremental streams only).
    pub task_il_baseline: Vec<f64>,
    /// Rows of the task-identification matrix so far: cell `[i][j]` the fraction of task `j`'s
    /// evaluation rows that a strategy inferring the task ([`crate::strategy::ForgettingStrategy::infer`])
    /// answered as task `j` after training task `i`. Empty when no strategy infers tasks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task_id_matrix: Matrix,
    /// Rows of the perplexity matrix so far (`[train] objective = "lm"`; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub perplexity_matrix: Matrix,
    /// Perplexity of the initial model per task (`objective = "lm"`; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub perplexity_baseline: Vec<Option<f64>>,
}

/// What the run has recorded so far, beyond the matrices.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Record {
    /// Loop counters.
    pub counters: TrainingCounters,
    /// Events.
    pub events: Vec<Event>,
    /// Logged steps.
    pub logs: Vec<StepLog>,
    /// Timings accumulated so far (seconds).
    pub timings: Timings,
    /// Memory figures so far (bytes).
    pub memory: MemoryReport,
    /// Evaluation samples so far.
    pub eval_samples: usize,
    /// Peak of the current task's train phase so far (bytes).
    pub task_train: PhaseMemory,
    /// The current task's training step's own peak so far: the most a step added above the
    /// bytes in use before it (bytes; [`super::memory::PeakWindow`]); left out while 0.
    #[serde(skip_serializing_if = "crate::train::report::is_zero")]
    pub task_step_peak: u64,
}

/// The anomaly rollbacks: how often the current task was retried, and the control
/// adjustments every later step keeps.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Retry {
    /// Control adjustments made by anomaly rollbacks, applied to every later step.
    pub adjust: Adjust,
    /// Rollbacks of the current task so far.
    pub retries: usize,
    /// Restarts after a divergence in the run so far (`[train] on_divergence = "restart"`);
    /// left out of `state.json` while 0.
    #[serde(rename = "divergence_restarts", skip_serializing_if = "is_zero")]
    pub restarts: usize,
    /// The `clip_norm` a restart turned on, which every later step keeps; left out of
    /// `state.json` while unset.
    #[serde(
        rename = "divergence_clip_norm",
        skip_serializing_if = "Option::is_none"
    )]
    pub clip_norm: Option<f64>,
}

/// Whether `n` is 0 (a field left out of `state.json`).
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The control adjustments of the anomaly rollbacks so far, applied to every later step
/// ([`crate::strategy::Controls`]); stored as the triple `[lr_factor, reg_factor,
/// replay_delta]`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(from = "(f64, f64, f64)", into = "(f64, f64, f64)")]
pub struct Adjust {
    /// Factor on the learning rate.
    pub lr_factor: f64,
    /// Factor on the regularisation scale.
    pub reg_factor: f64,
    /// Added to the replay ratio.
    pub replay_delta: f64,
}

impl Default for Adjust {
    /// No adjustment: factors 1, delta 0.
    fn default() -> Self {
        Self {
            lr_factor: 1.0,
            reg_factor: 1.0,
            replay_delta: 0.0,
        }
    }
}

impl From<(f64, f64, f64)> for Adjust {
    fn from((lr_factor, reg_factor, replay_delta): (f64, f64, f64)) -> Self {
        Self {
            lr_factor,
            reg_factor,
            replay_delta,
        }
    }
}

impl From<Adjust> for (f64, f64, f64) {
    fn from(a: Adjust) -> Self {
        (a.lr_factor, a.reg_factor, a.replay_delta)
    }
}

/// What the run started from.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Origin {
    /// What `[model] init` loaded at the start of the run (`None`: a random start).
    pub init: Option<crate::model::init::InitReport>,
    /// The data the run started on ([`crate::data::Dataset::fingerprint`]); empty in
    /// checkpoints of older versions.
    pub data_sha256: String,
}

impl Progress {
    /// Closes the logging window into a `steps.csv` row: its mean loss over its steps, the
    /// rows it trained, at `step` of the task (`global_step` of the run) with learning rate
    /// `lr`; nothing when the window is empty.
    pub fn flush_window(&mut self, step: usize, global_step: usize, lr: f64) {
        let w = self.losses.window;
        if w.steps > 0 {
            self.record.logs.push(StepLog {
                task: self.at.round,
                epoch: self.at.epoch,
                step,
                global_step,
                loss: w.loss_sum / w.steps as f64,
                lr,
                samples: w.rows,
            });
            self.losses.window = LogWindow::default();
        }
    }
}

/// The saved state of one strategy: its metadata and the index of its tensors.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct SavedStrategy {
    name: String,
    meta: serde_json::Value,
    /// Tensor name → (its name in `tensors.bpk`, shape).
    tensors: BTreeMap<String, (String, Vec<usize>)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StateFile {
    format: u32,
    /// SHA-256 of the config the checkpoint was written under (absent in older checkpoints).
    #[serde(default)]
    config_sha256: String,
    progress: Progress,
    forgetting: Vec<SavedStrategy>,
    memory: Vec<SavedStrategy>,
    schedulers: Vec<SavedStrategy>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    files: BTreeMap<String, String>,
}

const FORMAT: u32 = 1;

/// What a checkpoint holds, in memory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Burnpack bytes of the model record.
    pub model: Vec<u8>,
    /// Burnpack bytes of the optimiser record.
    pub optimizer: Vec<u8>,
    /// Loop progress.
    pub progress: Progress,
    /// `(name, state)` of each forgetting strategy, in config order.
    pub forgetting: Vec<(String, StrategyState)>,
    /// `(name, state)` of each memory strategy, in chain order.
    pub memory: Vec<(String, StrategyState)>,
    /// `(name, state)` of each scheduler, in config order.
    pub schedulers: Vec<(String, StrategyState)>,
    /// Hex SHA-256 of the run's effective config (`OUT/config.toml`) it was written under;
    /// empty for checkpoints of older engram versions.
    pub config_sha256: String,
}

fn pack(
    kind: &str,
    list: &[(String, StrategyState)],
    blob: &mut Vec<burn::store::burn_pack::Tensor>,
) -> Vec<SavedStrategy> {
    use burn::store::burn_pack::{Bytes, DType, Tensor};
    list.iter()
        .enumerate()
        .map(|(i, (name, s))| SavedStrategy {
            name: name.clone(),
            meta: s.meta.clone(),
            tensors: s
                .tensors
                .iter()
                .map(|(k, t)| {
                    let packed = format!("{kind}/{i}/{k}");
                    let bytes: Vec<u8> = t.values.iter().flat_map(|v| v.to_le_bytes()).collect();
                    blob.push(Tensor::new(
                        packed.clone(),
                        DType::F32,
                        t.shape.clone(),
                        None,
                        Bytes::from_bytes_vec(bytes),
                    ));
                    (k.clone(), (packed, t.shape.clone()))
                })
                .collect(),
        })
        .collect()
}

fn unpack(
    saved: Vec<SavedStrategy>,
    reader: &burn::store::burn_pack::Reader,
) -> std::result::Result<Vec<(String, StrategyState)>, String> {
    saved
        .into_iter()
        .map(|s| {
            let mut tensors = BTreeMap::new();
            for (k, (packed, shape)) in s.tensors {
                let raw = reader
                    .tensor_data(&packed)
                    .map_err(|e| format!("{packed}: {e}"))?;
                let values: Vec<f32> = raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                if values.len() != shape.iter().product::<usize>() {
                    return Err(format!(
                        "{packed}: {} values for shape {shape:?}",
                        values.len()
                    ));
                }
                tensors.insert(k, StateTensor { shape, values });
            }
            Ok((
                s.name,
                StrategyState {
                    meta: s.meta,
                    tensors,
                },
            ))
        })
        .collect()
}

/// Crashes the process at a named point when `ENGRAM_FAILPOINT` names it, so tests can kill a
/// run at an exact place instead of by timing: `checkpoint-write` (inside a checkpoint, after
/// two of its files), `step-N` (right after global step N).
pub fn failpoint(name: &str) {
    static POINT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let point = POINT.get_or_init(|| std::env::var("ENGRAM_FAILPOINT").ok());
    if point.as_deref() == Some(name) {
        eprintln!("engram: failpoint `{name}` reached, aborting");
        std::process::abort();
    }
}

/// The checkpoints directory of a run.
pub fn dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

/// Writes `ck` as checkpoint `step` under `out`, atomically, and prunes all but the newest two
/// and the one at the start of `ck`'s task (step `global_step − step_in_task`).
///
/// # Errors
/// [`Error::Io`] when a file cannot be written.
pub fn save(out: &Path, step: usize, ck: &Checkpoint) -> Result<PathBuf> {
    let root = dir(out);
    std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    let name = format!("step-{step:08}");
    let tmp = root.join(format!("{name}.tmp"));
    // Leftovers of checkpoints killed mid-write.
    for stale in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        if stale.file_name().to_string_lossy().ends_with(".tmp") {
            let _ = std::fs::remove_dir_all(stale.path());
        }
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let mut blob = Vec::new();
    let state = StateFile {
        format: FORMAT,
        config_sha256: ck.config_sha256.clone(),
        progress: ck.progress.clone(),
        forgetting: pack("forgetting", &ck.forgetting, &mut blob),
        memory: pack("memory", &ck.memory, &mut blob),
        schedulers: pack("scheduler", &ck.schedulers, &mut blob),
    };
    let state_json =
        serde_json::to_vec(&state).map_err(|e| Error::Other(format!("checkpoint: {e}")))?;
    let tensors = burn::store::burn_pack::Writer::new(blob)
        .into_bytes()
        .map_err(|e| Error::Other(format!("checkpoint tensors: {e}")))?;
    let files: [(&str, &[u8]); 4] = [
        ("model.bpk", &ck.model),
        ("optimizer.bin", &ck.optimizer),
        ("state.json", &state_json),
        ("tensors.bpk", &tensors),
    ];
    let mut manifest = Manifest {
        format: FORMAT,
        files: BTreeMap::new(),
    };
    for (i, (f, bytes)) in files.iter().enumerate() {
        write_atomic(&tmp.join(f), bytes)?;
        manifest
            .files
            .insert(f.to_string(), crate::fsutil::sha256_hex(bytes));
        if i == 1 {
            failpoint("checkpoint-write");
        }
    }
    let m = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Other(e.to_string()))?;
    write_atomic(&tmp.join("manifest.json"), &m)?;
    let dst = root.join(&name);
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::rename(&tmp, &dst).map_err(|e| Error::io(&dst, e))?;
    // Keep the newest two complete checkpoints, and the one at the current task's start, which
    // a restart after a divergence goes back to (`[train] on_divergence`).
    let task_start = format!(
        "step-{:08}",
        ck.progress
            .at
            .global_step
            .saturating_sub(ck.progress.at.step_in_task)
    );
    let mut all = list(out);
    all.sort();
    let older = all.len().saturating_sub(2);
    for old in all.into_iter().take(older).filter(|n| *n != task_start) {
        let _ = std::fs::remove_dir_all(root.join(old));
    }
    Ok(dst)
}

/// Names of the complete checkpoint directories (not `.tmp`), unsorted.
fn list(out: &Path) -> Vec<String> {
    std::fs::read_dir(dir(out))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("step-") && !n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads and verifies one checkpoint directory.
///
/// # Errors
/// [`Error::Checkpoint`] when a file is missing, its checksum differs from the manifest, or the
/// state cannot be decoded.
pub fn load_dir(path: &Path) -> Result<Checkpoint> {
    let bad = |m: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message: m,
    };
    let read = |f: &str| {
        crate::fsutil::read_bounded(&path.join(f), crate::fsutil::MAX_DATA_BYTES)
            .map_err(|e| bad(format!("{f}: {e}")))
    };
    let manifest: Manifest = serde_json::from_slice(&read("manifest.json")?)
        .map_err(|e| bad(format!("manifest.json: {e}")))?;
    let mut files = BTreeMap::new();
    for (f, want) in &manifest.files {
        let bytes = read(f)?;
        let got = crate::fsutil::sha256_hex(&bytes);
        if &got != want {
            return Err(bad(format!(
                "{f}: checksum {got} differs from the manifest's {want}"
            )));
        }
        files.insert(f.clone(), bytes);
    }
    let take = |files: &mut BTreeMap<String, Vec<u8>>, f: &str| {
        files
            .remove(f)
            .ok_or_else(|| bad(format!("{f} is not in the manifest")))
    };
    let state: StateFile = serde_json::from_slice(&take(&mut files, "state.json")?)
        .map_err(|e| bad(format!("state.json: {e}")))?;
    if state.format != FORMAT {
        return Err(bad(format!(
            "format {} (this engram reads {FORMAT})",
            state.format
        )));
    }
    let raw = take(&mut files, "tensors.bpk")?;
    let reader = burn::store::burn_pack::Reader::from_bytes(
        burn::store::burn_pack::Bytes::from_bytes_vec(raw),
    )
    .map_err(|e| bad(format!("tensors.bpk: {e}")))?;
    let un = |v| unpack(v, &reader).map_err(|e| bad(format!("tensors.bpk: {e}")));
    Ok(Checkpoint {
        model: take(&mut files, "model.bpk")?,
        optimizer: take(&mut files, "optimizer.bin")?,
        progress: state.progress,
        forgetting: un(state.forgetting)?,
        memory: un(state.memory)?,
        schedulers: un(state.schedulers)?,
        config_sha256: state.config_sha256,
    })
}

/// The checkpoint directories under `out`, newest first.
pub fn newest_first(out: &Path) -> Vec<PathBuf> {
    let mut names = list(out);
    names.sort();
    names.into_iter().rev().map(|n| dir(out).join(n)).collect()
}

/// The newest checkpoint under `out` that verifies, with the problems of any newer ones.
pub fn load_latest(out: &Path) -> (Option<(PathBuf, Checkpoint)>, Vec<Error>) {
    let mut skipped = Vec::new();
    for p in newest_first(out) {
        match load_dir(&p) {
            Ok(ck) => return (Some((p, ck)), skipped),
            Err(e) => skipped.push(e),
        }
    }
    (None, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(step: usize) -> Checkpoint {
        let mut tensors = BTreeMap::new();
        tensors.insert(
            "a".to_string(),
            StateTensor {
                shape: vec![2, 2],
                values: vec![1.0, 2.0, 3.0, step as f32],
            },
        );
        Checkpoint {
            model: vec![1, 2, 3],
            optimizer: vec![4, 5],
            config_sha256: "ab".repeat(32),
            progress: Progress {
                at: Cursor {
                    round: step,
                    global_step: step * 10,
                    ..Cursor::default()
                },
                ..Progress::default()
            },
            forgetting: vec![(
                "ewc".into(),
                StrategyState {
                    meta: serde_json::json!({"x": 1}),
                    tensors,
                },
            )],
            memory: vec![],
            schedulers: vec![("constant".into(), StrategyState::default())],
        }
    }

    /// The `progress` of a checkpoint written before `Progress` had named parts, byte for
    /// byte: `state.json` of step 45 of a 3-task EWC run whose anomaly scheduler rolled task 1
    /// back once (`[[scheduler]] type = "anomaly"`, `lr_factor = 0.3`, `lambda_factor = 10`),
    /// mid-task, so that the pairs, the triples and the events all hold values.
    const PROGRESS_V1: &str = include_str!("testdata/progress-v1.json");

    #[test]
    fn older_checkpoints_load_into_the_named_parts_and_write_back_the_same_bytes() {
        let text = PROGRESS_V1.trim_end();
        let p: Progress = serde_json::from_str(text).unwrap();
        assert_eq!(
            p.at,
            Cursor {
                round: 2,
                epoch: 0,
                chunk: 13,
                step_in_task: 13,
                global_step: 45,
                before_task_done: true,
            }
        );
        assert_eq!(
            p.losses.epoch_loss,
            LossSum {
                sum: 3.006129153072834,
                steps: 13
            }
        );
        assert_eq!(
            p.losses.window,
            LogWindow {
                loss_sum: 0.5560441389679909,
                steps: 6,
                rows: 384
            }
        );
        assert_eq!(
            p.retry.adjust,
            Adjust {
                lr_factor: 0.3,
                reg_factor: 10.0,
                replay_delta: 0.1
            }
        );
        assert_eq!(
            p.results.matrix[1],
            vec![Some(0.935), Some(0.9325), Some(0.4425)]
        );
        assert_eq!(p.record.counters.steps, 61);
        assert_eq!(
            p.record.events[0].kind,
            crate::train::report::EventKind::Rollback
        );
        assert_eq!(serde_json::to_string(&p).unwrap(), text);
        // Keys an older version did not write take their defaults: no adjustment.
        let p: Progress = serde_json::from_str(r#"{"round": 1, "global_step": 9}"#).unwrap();
        let want = Progress {
            at: Cursor {
                round: 1,
                global_step: 9,
                ..Cursor::default()
            },
            ..Progress::default()
        };
        assert_eq!(p, want);
        assert_eq!(p.retry.adjust, Adjust::default());
        assert_eq!(p.losses.epoch_loss.mean(), 0.0);
    }

    #[test]
    fn round_trip_prune_and_fallback_on_corruption() {
        let d = tempfile::tempdir().unwrap();
        for s in 1..=3 {
            save(d.path(), s, &ck(s)).unwrap();
        }
        let mut names = list(d.path());
        names.sort();
        assert_eq!(names, vec!["step-00000002", "step-00000003"]);
        let (latest, skipped) = load_latest(d.path());
        let (_, got) = latest.unwrap();
        assert!(skipped.is_empty());
        assert_eq!(got.progress, ck(3).progress);
        assert_eq!(got.forgetting, ck(3).forgetting);
        assert_eq!(got.model, vec![1, 2, 3]);
        // Corrupt the newest: its manifest catches it and the previous one is used.
        std::fs::write(dir(d.path()).join("step-00000003/tensors.bpk"), b"xx").unwrap();
        let (latest, skipped) = load_latest(d.path());
        assert_eq!(latest.unwrap().1.progress.at.round, 2);
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].to_string().contains("checksum"),
            "{}",
            skipped[0]
        );
        // A leftover .tmp directory (a kill mid-write) is ignored.
        std::fs::create_dir_all(dir(d.path()).join("step-00000009.tmp")).unwrap();
        assert_eq!(load_latest(d.path()).0.unwrap().1.progress.at.round, 2);
        // A truncated manifest is an error too.
        std::fs::write(dir(d.path()).join("step-00000002/manifest.json"), b"{").unwrap();
        let (latest, skipped) = load_latest(d.path());
        assert!(latest.is_none());
        assert_eq!(skipped.len(), 2);
    }

    /// Periodic checkpoints within a task keep the one at the task's start (global step 10,
    /// where a restart after a divergence goes back to) besides the newest two.
    #[test]
    fn pruning_keeps_the_task_start() {
        let d = tempfile::tempdir().unwrap();
        let at = |global_step: usize, step_in_task: usize| {
            let mut c = ck(1);
            c.progress.at.global_step = global_step;
            c.progress.at.step_in_task = step_in_task;
            c
        };
        save(d.path(), 7, &at(7, 7)).unwrap();
        save(d.path(), 10, &at(10, 0)).unwrap();
        for s in [13, 16, 19] {
            save(d.path(), s, &at(s, s - 10)).unwrap();
        }
        let mut names = list(d.path());
        names.sort();
        assert_eq!(names, ["step-00000010", "step-00000016", "step-00000019"]);
        // At the next task's start, the previous task's start goes.
        save(d.path(), 22, &at(22, 0)).unwrap();
        let mut names = list(d.path());
        names.sort();
        assert_eq!(names, ["step-00000019", "step-00000022"]);
    }
}
