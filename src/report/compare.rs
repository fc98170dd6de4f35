//! `engram compare`: the headline figures of runs side by side ([`RunRow`], [`compare_table`]),
//! mean ± sample standard deviation over seeds ([`Stat`]), and the warnings that say when two
//! rows are not comparable ([`data_differences`]) or a strategy kept new tasks from being
//! learned ([`plasticity_warnings`]).

use super::MIB;
use super::load::load_report;
use engram_core::train::report::Report;
use engram_core::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A figure's mean and, over several seeds, its sample standard deviation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// The value, or the mean over seeds.
    pub mean: f64,
    /// Standard deviation over seeds; `None` for a single run.
    pub std: Option<f64>,
}

impl Stat {
    /// Mean ± sample standard deviation of `values` (`None` when empty; no deviation for one
    /// value, which has none).
    pub fn of(values: &[f64]) -> Option<Self> {
        engram_core::train::metrics::mean_std(values).map(|(mean, std)| Self {
            mean,
            std: (values.len() > 1).then_some(std),
        })
    }

    /// Reads `{"mean": m, "std": s}` (the form of `aggregate.json` and `sweep.json`; `std` may
    /// be `null`); `None` for anything else.
    pub fn from_aggregate(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            mean: v.get("mean")?.as_f64()?,
            std: v.get("std").and_then(serde_json::Value::as_f64),
        })
    }

    /// `0.1992`, or `0.1992 ± 0.0010` with a standard deviation; `digits` decimals.
    pub fn format(&self, digits: usize) -> String {
        match self.std {
            Some(sd) => format!("{:.*} ± {:.*}", digits, self.mean, digits, sd),
            None => format!("{:.*}", digits, self.mean),
        }
    }
}

/// One row of `engram compare`: a run directory's headline figures.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// The directory as given on the command line.
    pub name: String,
    /// Number of seeds (1 for a single run).
    pub seeds: usize,
    /// Average accuracy after the last task (fraction).
    pub acc: Option<Stat>,
    /// Average incremental accuracy (Rebuffi et al. 2017; fraction;
    /// [`engram_core::train::metrics::average_incremental_accuracy`]).
    pub aia: Option<Stat>,
    /// Backward transfer (fraction; negative = forgetting).
    pub bwt: Option<Stat>,
    /// Average forgetting (fraction; positive = forgetting).
    pub forgetting: Option<Stat>,
    /// Forward transfer (fraction).
    pub fwt: Option<Stat>,
    /// Share of old-task accuracy kept (fraction).
    pub retention: Option<Stat>,
    /// Whether a report of the row has a `retention_note`: an old task scored no better than
    /// chance right after training on it, so retention divides by that low diagonal and is not
    /// a share kept (it can exceed 1); the figure marks such a row.
    pub retention_caveat: bool,
    /// ACC of the task-IL view (class-incremental runs; fraction).
    pub task_il_acc: Option<Stat>,
    /// Wall-clock time of the whole run, seconds.
    pub total_s: Option<Stat>,
    /// Peak memory of the run, MiB (heap on the CPU, device pool on GPUs).
    pub peak_mib: Option<Stat>,
    /// The training step's own peak, MiB: what a step adds above the bytes in use before it
    /// (`memory.step_peak_bytes`: activations, gradients, temporaries, the part the memory
    /// strategies change); `None` for reports of older versions.
    pub step_peak_mib: Option<Stat>,
    /// The final model's parameters, thousands.
    pub params_k: Option<Stat>,
    /// Of them, those that trained (the optimiser's: the adapters and head under `lora`),
    /// thousands; `None` for reports of older versions, which do not say.
    pub trainable_k: Option<Stat>,
    /// What the figures were measured on ([`benchmark`]; the first seed's for a `--seeds`
    /// directory).
    pub data: serde_json::Value,
    /// Accuracy on each task right after training on it, `[tasks]`, mean over seeds
    /// ([`learned`]); `None` when no report has a full diagonal.
    pub learned: Option<Vec<f64>>,
    /// Whether the run is naive fine-tuning: no `[[forgetting]]` strategy but `naive`, not
    /// joint.
    pub naive: bool,
}

/// Accuracy on each task `t` right after training on it, `[tasks]`: the task-IL view's
/// diagonal for class-incremental runs (logits restricted to `t`'s classes, which does not
/// reward a head biased to the newest classes), the accuracy matrix's otherwise. `None` when a
/// cell is missing (a failed run).
pub fn learned(r: &Report) -> Option<Vec<f64>> {
    learned_of(
        &r.accuracy_matrix,
        r.task_il_accuracy_matrix.as_ref(),
        r.tasks.len(),
    )
}

/// [`learned`] from the matrices themselves (`[tasks][tasks]`, as `report.json` and
/// `sweep.json` hold them): the diagonal of `task_il` where given, else of `accuracy`, over
/// `tasks` tasks; `None` when a cell is missing.
pub fn learned_of(
    accuracy: &engram_core::train::metrics::Matrix,
    task_il: Option<&engram_core::train::metrics::Matrix>,
    tasks: usize,
) -> Option<Vec<f64>> {
    let m = task_il.unwrap_or(accuracy);
    (0..tasks)
        .map(|t| m.get(t).and_then(|row| row.get(t).copied().flatten()))
        .collect()
}

/// How far below naive fine-tuning a new task may be learned, right after training on it
/// ([`learned`]), before [`plasticity_warnings`] says so: 0.05 (the suite's goal).
pub const PLASTICITY_GAP: f64 = 0.05;

/// A warning for each task that a run learned more than [`PLASTICITY_GAP`] below a naive run
/// on the same data ([`RunRow::naive`], same [`benchmark`]): the strategies kept the new task
/// from being learned (too strong a penalty, too much replay, a projection that cancels the
/// new gradient). Empty without a naive run to compare with.
pub fn plasticity_warnings(rows: &[RunRow]) -> Vec<String> {
    let mut out = Vec::new();
    for base in rows.iter().filter(|r| r.naive) {
        let Some(naive) = &base.learned else { continue };
        for r in rows.iter().filter(|r| !r.naive && r.data == base.data) {
            let Some(mine) = &r.learned else { continue };
            for (t, (m, b)) in mine.iter().zip(naive).enumerate() {
                if b - m > PLASTICITY_GAP {
                    out.push(format!(
                        "warning: {}: task {t} reached {m:.3} right after training on it, naive fine-tuning ({}) {b:.3}: its strategies kept the new task from being learned (the book's troubleshooting chapter, \"A new task is learned far below naive\")",
                        r.name, base.name
                    ));
                }
            }
        }
    }
    out
}

impl RunRow {
    /// The figures of `reports` (one per seed) as one row named `name`: each metric's mean ±
    /// sample sd over the reports that define it; time in seconds, peak memory in MiB,
    /// parameters in thousands, [`learned`] averaged per task.
    pub fn of_reports(name: &str, reports: &[Report]) -> Self {
        let of = |f: &dyn Fn(&Report) -> Option<f64>| {
            let v: Vec<f64> = reports.iter().filter_map(f).collect();
            Stat::of(&v)
        };
        let diagonals: Option<Vec<Vec<f64>>> = reports.iter().map(learned).collect();
        let learned = diagonals.filter(|d| !d.is_empty()).map(|d| {
            (0..d[0].len())
                .map(|t| d.iter().map(|row| row[t]).sum::<f64>() / d.len() as f64)
                .collect()
        });
        RunRow {
            name: name.to_string(),
            seeds: reports.len(),
            acc: of(&|r| r.metrics.acc),
            aia: of(&|r| r.metrics.aia),
            bwt: of(&|r| r.metrics.bwt),
            forgetting: of(&|r| r.metrics.forgetting),
            fwt: of(&|r| r.metrics.fwt),
            retention: of(&|r| r.metrics.retention),
            retention_caveat: reports.iter().any(|r| r.retention_note.is_some()),
            task_il_acc: of(&|r| r.task_il_metrics.as_ref().and_then(|m| m.acc)),
            total_s: of(&|r| Some(r.timings.total_s)),
            peak_mib: of(&|r| Some(r.memory.peak_bytes as f64 / MIB)),
            step_peak_mib: of(&|r| {
                let b = r.memory.step_peak_bytes;
                (b > 0).then(|| b as f64 / MIB)
            }),
            params_k: of(&|r| Some(r.memory.parameters as f64 / 1e3)),
            trainable_k: of(&|r| {
                (r.memory.trainable_parameters > 0)
                    .then(|| r.memory.trainable_parameters as f64 / 1e3)
            }),
            data: reports.first().map_or(serde_json::Value::Null, benchmark),
            learned,
            naive: !reports.is_empty()
                && reports.iter().all(|r| {
                    !r.joint
                        && r.config["forgetting"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .all(|f| f["type"] == "naive")
                }),
        }
    }
}

/// Reads the headline figures of a run directory: `dir/report.json` for a single run, else
/// `dir/aggregate.json` (written by `engram run --seeds`) for mean ± standard deviation, with
/// time and peak memory averaged over the `seed-N/report.json` files it lists.
///
/// # Errors
/// [`Error::ConfigFile`] when `dir` holds neither file or one is malformed (see
/// [`load_report`]); [`Error::Io`] when a file cannot be read.
pub fn run_row(dir: &Path) -> Result<RunRow> {
    let name = dir.display().to_string();
    let agg_path = dir.join("aggregate.json");
    if !dir.join("report.json").is_file() && agg_path.is_file() {
        let bytes =
            engram_core::fsutil::read_bounded(&agg_path, engram_core::fsutil::MAX_TEXT_BYTES)
                .map_err(|e| Error::io(&agg_path, e))?;
        let agg: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::ConfigFile {
                file: agg_path.clone(),
                message: format!("not valid JSON: {e}"),
                hint: None,
            })?;
        let reports = agg["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .map(|s| load_report(&dir.join(s)))
            .collect::<Result<Vec<_>>>()?;
        let mut row = RunRow::of_reports(&name, &reports);
        row.seeds = agg["seeds"]
            .as_array()
            .map_or(reports.len(), |a| a.len())
            .max(reports.len());
        return Ok(row);
    }
    let r = load_report(dir)?;
    let name = match &r.failure {
        Some(f) => format!(
            "{name} (failed at task {}, step {})",
            f.task, f.step_in_task
        ),
        None => name,
    };
    Ok(RunRow::of_reports(&name, std::slice::from_ref(&r)))
}

/// What a run's figures were measured on, as the run itself saw it (defaults resolved): the
/// data set (`data.dataset`: the `[data] dataset` name, or for a `[[data.stream]]` run the
/// ordered list of its entries' `dataset` names, which a plain run's name never equals), the
/// `scenario`, the evaluation split (`data.evaluate_on`) and
/// the task split (`tasks`: the count, each task's classes and the training and evaluation
/// samples in all). Two runs with the same values were scored on the same task sequence.
pub fn benchmark(r: &Report) -> serde_json::Value {
    let classes: Vec<String> = r
        .tasks
        .iter()
        .map(|t| {
            t.classes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let train: usize = r.tasks.iter().map(|t| t.train_samples).sum();
    let eval: usize = r.tasks.iter().map(|t| t.eval_samples).sum();
    serde_json::json!({
        "data.dataset": dataset_identity(&r.config["data"]),
        "scenario": r.scenario,
        "data.evaluate_on": r.config["data"]["evaluate_on"],
        "tasks": format!(
            "{} tasks (classes {}), {train} training and {eval} evaluation samples",
            r.tasks.len(),
            classes.join(" | ")
        ),
    })
}

/// The data set a run's `[data]` table (as its report holds it) names: `dataset`, or when
/// `stream` has entries the list of their `dataset` names in order (`[data] dataset` is empty
/// for a stream, so it alone would call any two streams the same data).
fn dataset_identity(data: &serde_json::Value) -> serde_json::Value {
    match data["stream"].as_array() {
        Some(entries) if !entries.is_empty() => entries
            .iter()
            .map(|e| e["dataset"].clone())
            .collect::<Vec<_>>()
            .into(),
        _ => data["dataset"].clone(),
    }
}

/// The [`benchmark`] entries on which `rows` differ, each as `key: value per run` — figures
/// measured on another data set, scenario, evaluation split or task split are not comparable.
/// Empty when the runs agree.
pub fn data_differences(rows: &[RunRow]) -> Vec<String> {
    let mut keys: Vec<&String> = rows
        .iter()
        .filter_map(|r| r.data.as_object())
        .flat_map(|o| o.keys())
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| {
            rows.iter()
                .any(|r| r.data.get(k.as_str()) != rows[0].data.get(k.as_str()))
        })
        .map(|k| {
            let values: Vec<String> = rows
                .iter()
                .map(|r| {
                    let v = r.data.get(k.as_str()).unwrap_or(&serde_json::Value::Null);
                    format!("{} {v}", r.name)
                })
                .collect();
            format!("{k}: {}", values.join(", "))
        })
        .collect()
}

/// The `engram compare` table: a header and one row per run, columns aligned.
///
/// Columns: `run`, `seeds`, `ACC`, `AIA` (average incremental accuracy), `BWT`, `forgetting`, `FWT`, `retention`, `task-IL ACC` (4
/// decimals, fractions; the last for class-incremental runs), `time (s)` (1 decimal), `peak MiB` (1 decimal; the process's), `step peak MiB` (2 decimals; the training step's own addition), `params k` (the final model's
/// parameters in thousands, 1 decimal), and `trainable k` (those that trained, thousands, 1
/// decimal) when some run trained only part of its model (`lora`); `–` where undefined.
pub fn compare_table(rows: &[RunRow]) -> String {
    let partial = rows.iter().any(|r| match (r.trainable_k, r.params_k) {
        (Some(t), Some(p)) => t.mean < p.mean,
        _ => false,
    });
    let mut header = vec![
        "run",
        "seeds",
        "ACC",
        "AIA",
        "BWT",
        "forgetting",
        "FWT",
        "retention",
        "task-IL ACC",
        "time (s)",
        "peak MiB",
        "step peak MiB",
        "params k",
    ];
    if partial {
        header.push("trainable k");
    }
    let cell = |s: &Option<Stat>, d: usize| s.map_or_else(|| "–".to_string(), |s| s.format(d));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.seeds.to_string(),
                cell(&r.acc, 4),
                cell(&r.aia, 4),
                cell(&r.bwt, 4),
                cell(&r.forgetting, 4),
                cell(&r.fwt, 4),
                cell(&r.retention, 4),
                cell(&r.task_il_acc, 4),
                cell(&r.total_s, 1),
                cell(&r.peak_mib, 1),
                cell(&r.step_peak_mib, 2),
                cell(&r.params_k, 1),
            ]
            .into_iter()
            .chain(partial.then(|| cell(&r.trainable_k, 1)))
            .collect()
        })
        .collect();
    let width = |c: usize| {
        body.iter()
            .map(|r| r[c].chars().count())
            .chain(std::iter::once(header[c].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let mut s = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (c, text) in cells.iter().enumerate() {
            let pad = widths[c].saturating_sub(text.chars().count());
            if c == 0 {
                l.push_str(text);
                l.push_str(&" ".repeat(pad));
            } else {
                l.push_str("  ");
                l.push_str(&" ".repeat(pad));
                l.push_str(text);
            }
        }
        let _ = writeln!(s, "{}", l.trim_end());
    };
    line(header.clone());
    for r in &body {
        line(r.iter().map(String::as_str).collect());
    }
    s
}

/// `engram compare DIR...`: [`run_row`] for each directory, then [`compare_table`], a
/// warning line for each `[data]` key on which the runs differ ([`data_differences`]): a
/// validation figure next to a test figure, or runs on other task splits, would look
/// comparable in the table and are not; and, with a naive run among them, a warning for each
/// task another run learned far below it ([`plasticity_warnings`]). Returns the table and the warnings (the CLI prints
/// them on standard error).
///
/// # Errors
/// The first error of [`run_row`].
pub fn compare(dirs: &[PathBuf]) -> Result<(String, Vec<String>)> {
    let rows = dirs
        .iter()
        .map(|d| run_row(d))
        .collect::<Result<Vec<_>>>()?;
    let diff = data_differences(&rows);
    let mut warnings = if diff.is_empty() {
        Vec::new()
    } else {
        std::iter::once(
            "warning: these runs were measured on different data; their figures are not comparable:"
                .to_string(),
        )
        .chain(diff.into_iter().map(|d| format!("  {d}")))
        .collect()
    };
    warnings.extend(plasticity_warnings(&rows));
    Ok((compare_table(&rows), warnings))
}
