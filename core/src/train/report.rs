//! What a run writes: `report.json`, `metrics.csv`, `steps.csv` (all written atomically).
//!
//! `report.json` (schema version [`SCHEMA_VERSION`]):
//! - `accuracy_matrix`: rows = after training task i, columns = task j, fractions in `[0, 1]`,
//!   `null` for cells not evaluated;
//! - `metrics`: `acc`, `bwt`, `forgetting`, `fwt`, `retention`, `aia` (see [`super::metrics`]);
//! - `initial_accuracy`: `b_j`, the accuracy of the model as it starts the stream on each task
//!   (for FWT); also as `random_init_accuracy` when that start is random; `init`: what
//!   `[model] init` loaded;
//! - `memory`, `throughput`, `timings`: figures that measure the machine, listed in
//!   `machine_dependent_keys`; everything else is identical for the same seed and config;
//! - `config` (the effective config), `seed`, `versions`, `device`, `tasks`, `training`,
//!   `events`.
//!
//! `metrics.csv` columns: `trained_task,evaluated_task,accuracy,samples` — one row per
//! evaluated cell. `steps.csv` columns: `task,epoch,step,global_step,loss,lr,samples` — one row
//! every `log_every` steps; `loss` is the mean total loss over the logged window, `samples`
//! the rows trained in the window (new plus replayed).

use super::memory::PhaseMemory;
use super::metrics::{Matrix, Metrics};
use crate::error::Result;
use crate::fsutil::write_atomic;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Version of the `report.json` layout.
pub const SCHEMA_VERSION: u32 = 1;

/// Keys of `report.json` whose values measure the machine rather than the run.
pub const MACHINE_DEPENDENT_KEYS: [&str; 3] = ["timings", "throughput", "memory"];

/// Versions of what produced a report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Versions {
    /// engram's version.
    pub engram: String,
    /// Burn's version.
    pub burn: String,
    /// The compiler that built engram (`rustc -V`).
    pub rustc: String,
}

impl Versions {
    /// The versions of this build.
    pub fn current() -> Self {
        Self {
            engram: env!("CARGO_PKG_VERSION").into(),
            burn: crate::BURN_VERSION.into(),
            rustc: env!("ENGRAM_RUSTC_VERSION").into(),
        }
    }
}

/// One task of the stream, as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TaskSummary {
    /// Position in the stream.
    pub index: usize,
    /// Its classes.
    pub classes: Vec<usize>,
    /// Their names, from the dataset (`dataset.toml`, the class folders, CSV label names).
    #[serde(default)]
    pub class_names: Vec<String>,
    /// Training samples.
    pub train_samples: usize,
    /// Evaluation samples.
    pub eval_samples: usize,
}

/// Memory figures in bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MemoryReport {
    /// Where the figures come from: `heap` (counting allocator, CPU) or `device-pool`.
    pub source: String,
    /// Highest bytes in use over the whole run.
    pub peak_bytes: u64,
    /// Bytes in use at the end.
    pub end_bytes: u64,
    /// Training steps.
    pub train: PhaseMemory,
    /// Evaluations.
    pub eval: PhaseMemory,
    /// After-task passes (Fisher information, buffer updates).
    pub after_task: PhaseMemory,
    /// Per task: the train phase's peak bytes (the process's: parameters, optimiser and
    /// strategy state and the data set included).
    pub per_task_train_peak_bytes: Vec<u64>,
    /// Per task: the training step's own addition, the highest over the task's steps of the
    /// step's peak bytes minus the bytes in use just before it
    /// ([`super::memory::PeakWindow`]: activations, gradients, temporaries; what the memory
    /// strategies change and a `budget` bounds). A memory budget's probe steps that it
    /// discards are not counted (`memory.strategies.budget` lists them). Empty in reports
    /// of older versions (and left out while empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_task_step_peak_bytes: Vec<u64>,
    /// The highest of [`MemoryReport::per_task_step_peak_bytes`] (0 in reports of older
    /// versions; left out while 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_peak_bytes: u64,
    /// Parameters (count) of the final model; `4 ×` this is their size in bytes in `f32`.
    /// Grows during a run for strategies that add parameters (mixture of experts).
    #[serde(default)]
    pub parameters: u64,
    /// Parameters (count) of the final model that train, the ones the optimiser updates: all
    /// of them in full fine-tuning; with `lora`, the adapters and what it keeps trainable (the
    /// head), the frozen base excluded. 0 in reports of older versions (and left out while 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trainable_parameters: u64,
    /// Bytes of the optimiser's state at the run's last checkpoint (its end, for a finished
    /// run), as its record serialises it (burnpack: SGD's momentum, Adam's two moments per
    /// trainable parameter, plus a few bytes of keys): it grows with the trainable parameters
    /// only. 0 in reports of older versions (and left out while 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub optimizer_state_bytes: u64,
    /// Bytes each strategy's saved state takes at the run's last checkpoint, by name: 4 bytes
    /// a tensor value ([`crate::strategy::StrategyState`]) plus its JSON metadata. What a
    /// strategy holds beside the model and the optimiser: EWC's Fisher diagonal and anchors,
    /// O-LoRA's kept down-projections, per-task-lora's experts and prototypes, replay's sample
    /// list and logits (its samples' inputs are [`MemoryReport::stored`]). Strategies that
    /// keep nothing are left out; empty in reports of older versions (and left out while
    /// empty).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub strategy_state_bytes: std::collections::BTreeMap<String, u64>,
    /// What each memory strategy reports ([`crate::strategy::MemoryStrategy::report`]), by name.
    #[serde(default)]
    pub strategies: std::collections::BTreeMap<String, serde_json::Value>,
    /// The samples each sample-storing forgetting strategy keeps at the end of the run, by
    /// name: count, bytes of their inputs in the data's own type (`max_len × 4` a token
    /// sequence) and of their stored logits ([`crate::strategy::StoredSamples`]). Left out
    /// while empty.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stored: std::collections::BTreeMap<String, crate::strategy::StoredSamples>,
}

/// Whether `n` is 0 (a figure left out of `report.json` and `state.json` until measured).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Throughput figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// Training rows per second of training time (new plus replayed), samples/s.
    pub train_samples_per_s: f64,
    /// Evaluation samples per second of evaluation time, samples/s.
    pub eval_samples_per_s: f64,
}

/// Wall-clock timings in seconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Timings {
    /// The whole run, s.
    pub total_s: f64,
    /// Loading data and building the model, s.
    pub setup_s: f64,
    /// Training steps, s.
    pub train_s: f64,
    /// Evaluations (including the random-init baseline), s.
    pub eval_s: f64,
    /// After-task hooks (Fisher passes, buffer updates), s.
    pub after_task_s: f64,
    /// Per task: training time, s.
    pub per_task_train_s: Vec<f64>,
}

/// Counters of the training loop.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TrainingCounters {
    /// Optimiser steps taken.
    pub steps: usize,
    /// Steps skipped (inf/NaN gradients under loss scaling).
    pub skipped_steps: usize,
    /// Rows trained on (new plus replayed).
    pub samples: usize,
    /// Final mean training loss of each task's last epoch.
    pub final_loss: Vec<f64>,
}

/// Something that happened during the run (rollbacks, warnings).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// Task index when it happened.
    pub task: usize,
    /// What happened.
    pub kind: EventKind,
    /// Details.
    pub message: String,
}

/// The kinds of [`Event`], written in `report.json` as the strings named below (the same
/// strings since the first schema version).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// `at-chance`: a task scored no better than chance right after training on it.
    AtChance,
    /// `batch-statistics`: a memory strategy splits batches of a model with batch norm.
    BatchStatistics,
    /// `leak`: device memory grew past the leak alarm's threshold during a task.
    Leak,
    /// `rollback`: a scheduler rolled the task back to its start and retried it.
    Rollback,
    /// `anomaly`: a scheduler asked for a rollback after its retries were spent.
    Anomaly,
    /// `memory`: a memory strategy's warning: a step went over a memory budget, or a plan
    /// with checkpointing took more than the plain step it was to shrink.
    Memory,
    /// `divergence`: the loss became infinite or NaN and the run restarted the task with a
    /// lower learning rate and clipping (`[train] on_divergence = "restart"`).
    Divergence,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 7] = [
        EventKind::AtChance,
        EventKind::BatchStatistics,
        EventKind::Leak,
        EventKind::Rollback,
        EventKind::Anomaly,
        EventKind::Memory,
        EventKind::Divergence,
    ];

    /// The kind's name in `report.json`, for example `at-chance`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AtChance => "at-chance",
            EventKind::BatchStatistics => "batch-statistics",
            EventKind::Leak => "leak",
            EventKind::Rollback => "rollback",
            EventKind::Anomaly => "anomaly",
            EventKind::Memory => "memory",
            EventKind::Divergence => "divergence",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a run reached its end.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every task trained and evaluated.
    #[default]
    Finished,
    /// Stopped by an error (a diverged loss, a failing strategy): see [`Report::failure`].
    Failed,
}

/// Where and why a failed run stopped.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Failure {
    /// The error, as the CLI printed it.
    pub error: String,
    /// The task (round) in progress.
    pub task: usize,
    /// Its epoch.
    pub epoch: usize,
    /// Steps of the task done before the error.
    pub step_in_task: usize,
    /// Steps of the run done before the error.
    pub global_step: usize,
}

/// Whether `dir` holds a *finished* run: a `report.json` whose `status` is not `failed`.
pub fn finished_run(dir: &Path) -> bool {
    crate::fsutil::read_bounded(&dir.join("report.json"), crate::fsutil::MAX_TEXT_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("status").and_then(|s| s.as_str()) != Some("failed"))
}

/// The whole `report.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// Layout version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Versions of engram, Burn and rustc.
    pub versions: Versions,
    /// `finished`, or `failed` for the record of a run that stopped with an error (then
    /// `metrics` are empty and `accuracy_matrix` holds the rows evaluated before it stopped).
    #[serde(default)]
    pub status: RunStatus,
    /// Where and why a failed run stopped; absent for a finished run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The run seed.
    pub seed: u64,
    /// The device name (`cpu`, `vulkan`, `cuda`).
    pub device: String,
    /// The effective config.
    pub config: serde_json::Value,
    /// The scenario.
    pub scenario: String,
    /// Whether the run trained all tasks jointly.
    pub joint: bool,
    /// The tasks.
    pub tasks: Vec<TaskSummary>,
    /// `R[i][j]`.
    pub accuracy_matrix: Matrix,
    /// `b_j`: accuracy of the model as it starts the stream, on each task (the FWT baseline):
    /// the seeded random initialisation, or `[model] init`'s pretrained weights. (Reports
    /// written before it existed have only `random_init_accuracy`; `engram report` reads that.)
    #[serde(default)]
    pub initial_accuracy: Vec<f64>,
    /// The same figures under their older name, present only when the start is random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_init_accuracy: Option<Vec<f64>>,
    /// What `[model] init` loaded (file, SHA-256, tensors loaded, missing, unused); absent for
    /// a random start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<crate::model::init::InitReport>,
    /// The normalisation rule the data got, in words
    /// ([`crate::data::shape::normalization_rule`]): `per channel …` for images, `over all
    /// values …` (the image rule, as a CSV of pixel bytes gets), `per feature …` for a table's
    /// columns. Absent in reports of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalization: Option<String>,
    /// ACC, BWT, forgetting, FWT, retention.
    pub metrics: Metrics,
    /// Class-incremental runs: the task-IL view of the accuracy matrix, `[tasks trained][tasks]`
    /// — cell `[i][j]` is the accuracy on task `j`'s evaluation samples after training task
    /// `i`, with the logits restricted to task `j`'s classes (Mammoth's "task-IL" next to its
    /// "class-IL"). Its diagonal measures how well each new task was learned without the
    /// class-IL head's bias toward the newest classes. Absent for other scenarios and in
    /// reports of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_il_accuracy_matrix: Option<Matrix>,
    /// The metrics of [`Report::task_il_accuracy_matrix`] (FWT against the starting model's
    /// task-IL accuracies); absent with it, and for a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_il_metrics: Option<Metrics>,
    /// How often a strategy that infers each input's task (per-task adapters' prototype
    /// routing, [`crate::strategy::ForgettingStrategy::infer`]) picked the right one,
    /// `[tasks trained][tasks]`: cell `[i][j]` is the fraction of task `j`'s evaluation samples
    /// it answered as task `j` after training task `i` (`null` where nothing was inferred: no
    /// task kept yet, or a cell not evaluated). Class-IL accuracy is at most this times the
    /// task-IL view's (Kim et al. 2022). Absent when no strategy infers tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id_matrix: Option<Matrix>,
    /// Why `metrics.retention` should not be read as a share kept, when it should not: the old
    /// tasks that scored no better than chance right after training on them (their `at-chance`
    /// events), against whose low diagonals the ratio is taken, so it can read above 1
    /// without anything having been retained. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_note: Option<String>,
    /// A language-model run (`[train] objective = "lm"`): the perplexity matrix, its metrics
    /// and their definitions ([`crate::train::trainer::LmReport`]). The accuracy matrix of such
    /// a run has `null` cells and `metrics` no value: a window of text has no class. Absent
    /// for a classification run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language_model: Option<crate::train::trainer::LmReport>,
    /// For each metric, the cells of the accuracy matrix it read (cells not evaluated under a
    /// cadence are `null` and skipped).
    #[serde(default)]
    pub metric_cells: serde_json::Value,
    /// Loop counters.
    pub training: TrainingCounters,
    /// Events.
    pub events: Vec<Event>,
    /// Memory (machine-dependent).
    pub memory: MemoryReport,
    /// What each forgetting strategy reports at the run's end
    /// ([`crate::strategy::ForgettingStrategy::report`]), by name: `moe-lora`'s routing table.
    /// Left out while empty.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub forgetting: std::collections::BTreeMap<String, serde_json::Value>,
    /// Throughput (machine-dependent).
    pub throughput: Throughput,
    /// Timings (machine-dependent).
    pub timings: Timings,
    /// Names of the machine-dependent keys.
    pub machine_dependent_keys: Vec<String>,
}

/// Which cells of `matrix` each metric read, as `[row, column]` pairs.
pub fn metric_cells(matrix: &Matrix) -> serde_json::Value {
    let t = matrix.len();
    let has = |i: usize, j: usize| {
        matrix
            .get(i)
            .and_then(|r| r.get(j))
            .is_some_and(Option::is_some)
    };
    let cells = |pairs: Vec<(usize, usize)>| -> Vec<[usize; 2]> {
        pairs
            .into_iter()
            .filter(|&(i, j)| has(i, j))
            .map(|(i, j)| [i, j])
            .collect()
    };
    let width = matrix.first().map_or(0, Vec::len);
    let last = t.saturating_sub(1);
    let old: Vec<usize> = (0..last).collect();
    serde_json::json!({
        "acc": cells((0..width).map(|j| (last, j)).collect()),
        "bwt": cells(old.iter().flat_map(|&j| [(last, j), (j, j)]).collect()),
        "forgetting": cells(old.iter().flat_map(|&j| (j..=last).map(move |i| (i, j))).collect()),
        "fwt": cells((1..t).map(|j| (j - 1, j)).collect()),
        "retention": cells(old.iter().flat_map(|&j| [(last, j), (j, j)]).collect()),
        "aia": cells((0..t).flat_map(|i| (0..=i).map(move |j| (i, j))).collect()),
    })
}

/// One logged training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// Task index.
    pub task: usize,
    /// Epoch within the task.
    pub epoch: usize,
    /// Step within the task.
    pub step: usize,
    /// Step since the start of the run.
    pub global_step: usize,
    /// Mean total loss over the window.
    pub loss: f64,
    /// Learning rate.
    pub lr: f64,
    /// Rows trained in the window.
    pub samples: usize,
}

impl Report {
    /// `metrics.csv`: one row per evaluated cell.
    pub fn metrics_csv(&self) -> String {
        let mut s = String::from("trained_task,evaluated_task,accuracy,samples\n");
        for (i, row) in self.accuracy_matrix.iter().enumerate() {
            for (j, cell) in row.iter().enumerate() {
                if let Some(a) = cell {
                    let n = self.tasks.get(j).map_or(0, |t| t.eval_samples);
                    let _ = writeln!(s, "{i},{j},{a:.6},{n}");
                }
            }
        }
        s
    }

    /// Writes `report.json` and `metrics.csv` into `dir` atomically.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when a file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| crate::Error::Other(format!("report: {e}")))?;
        write_atomic(&dir.join("metrics.csv"), self.metrics_csv().as_bytes())?;
        write_atomic(&dir.join("report.json"), &json)
    }
}

/// `steps.csv` text for `logs`.
pub fn steps_csv(logs: &[StepLog]) -> String {
    let mut s = String::from("task,epoch,step,global_step,loss,lr,samples\n");
    for l in logs {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{},{}",
            l.task, l.epoch, l.step, l.global_step, l.loss, l.lr, l.samples
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_are_written_as_their_names_and_read_back() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "at-chance",
                "batch-statistics",
                "leak",
                "rollback",
                "anomaly",
                "memory",
                "divergence"
            ]
        );
        for k in EventKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), k);
        }
        let e: Event =
            serde_json::from_str(r#"{"task": 2, "kind": "at-chance", "message": "m"}"#).unwrap();
        assert_eq!(e.kind, EventKind::AtChance);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"task":2,"kind":"at-chance","message":"m"}"#
        );
        // A kind this version does not know is an error, not a silent default.
        assert!(serde_json::from_str::<EventKind>("\"meltdown\"").is_err());
    }
}
