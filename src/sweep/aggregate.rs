//! `engram sweep report` and `engram sweep status`: every run of a sweep's directory read
//! back, grouped into cells (every axis but the seed) with mean ± standard deviation over the
//! cell's seeds, written as `DIR/sweep.json`, `DIR/sweep.csv` and the comparison plot.

use super::exec::{self, Status};
use super::grid::Manifest;
use crate::report::{RunRow, Stat};
use engram_core::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One cell of the table: its runs' figures over seeds.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The cell's name (its runs' directory).
    pub cell: String,
    /// Its axis values.
    pub axes: serde_json::Map<String, serde_json::Value>,
    /// Runs of the cell that finished, by name.
    pub done: Vec<String>,
    /// Runs that did not finish, with their status.
    pub unfinished: Vec<(String, Status)>,
    /// The figures (`name` = the cell), mean ± sd over the finished runs.
    pub row: RunRow,
}

/// Reads every run of the sweep in `dir` into its cell, in grid order.
///
/// # Errors
/// As [`Manifest::read`]; a finished run whose `report.json` does not read (see
/// [`crate::report::load_report`]).
pub fn cells(dir: &Path) -> Result<(Manifest, Vec<Cell>, Vec<serde_json::Value>)> {
    let m = Manifest::read(dir)?;
    let mut cells: Vec<Cell> = Vec::new();
    let mut runs = Vec::new();
    let mut reports: Vec<Vec<engram_core::train::report::Report>> = Vec::new();
    for r in &m.runs {
        let k = match cells.iter().position(|c| c.cell == r.cell) {
            Some(k) => k,
            None => {
                cells.push(Cell {
                    cell: r.cell.clone(),
                    axes: r.axes.clone(),
                    done: Vec::new(),
                    unfinished: Vec::new(),
                    row: RunRow::of_reports(&r.cell, &[]),
                });
                reports.push(Vec::new());
                cells.len() - 1
            }
        };
        let status = exec::status(dir, r);
        let mut entry = serde_json::json!({
            "name": r.name,
            "cell": r.cell,
            "seed": r.seed,
            "status": status.word(),
        });
        if status == Status::Done {
            let rep = crate::report::load_report(&dir.join(&r.name))?;
            entry["acc"] = serde_json::json!(rep.metrics.acc);
            entry["bwt"] = serde_json::json!(rep.metrics.bwt);
            entry["forgetting"] = serde_json::json!(rep.metrics.forgetting);
            entry["retention"] = serde_json::json!(rep.metrics.retention);
            entry["task_il_acc"] =
                serde_json::json!(rep.task_il_metrics.as_ref().and_then(|m| m.acc));
            entry["accuracy_matrix"] = serde_json::json!(rep.accuracy_matrix);
            entry["task_il_accuracy_matrix"] = serde_json::json!(rep.task_il_accuracy_matrix);
            // The tasks the run warned about as no better than chance right after training.
            let mut at_chance: Vec<usize> = rep
                .events
                .iter()
                .filter(|e| e.kind == engram_core::train::report::EventKind::AtChance)
                .map(|e| e.task)
                .collect();
            at_chance.sort_unstable();
            at_chance.dedup();
            entry["at_chance"] = serde_json::json!(at_chance);
            entry["retention_note"] = serde_json::json!(rep.retention_note);
            cells[k].done.push(r.name.clone());
            reports[k].push(rep);
        } else {
            let st = exec::read_state(&exec::RunPaths::of(dir, r));
            if let Some(e) = st.error {
                entry["error"] = e.into();
            }
            cells[k].unfinished.push((r.name.clone(), status));
        }
        runs.push(entry);
    }
    for (c, reps) in cells.iter_mut().zip(&reports) {
        c.row = RunRow::of_reports(&c.cell, reps);
    }
    Ok((m, cells, runs))
}

fn stat_json(s: &Option<Stat>) -> serde_json::Value {
    match s {
        Some(s) => serde_json::json!({"mean": s.mean, "std": s.std}),
        None => serde_json::Value::Null,
    }
}

/// Writes `DIR/sweep.json`, `DIR/sweep.csv` and `DIR/plots/compare.{png,svg}` for the sweep in
/// `dir`, and returns the table ([`crate::report::compare_table`] with one row per cell, `seeds`
/// counting the finished runs) followed by a line for each unfinished run and the
/// [`crate::report::plasticity_warnings`] of its cells (a cell learning a task far below a naive
/// cell on the same data).
///
/// `sweep.json`: `{"sweep", "axes", "cells": [{"cell", "axes", "runs", "unfinished",
/// "metrics": {"acc": {"mean", "std"}, "bwt", "forgetting", "fwt", "retention", "task_il_acc",
/// "time_s", "peak_mib", "params_k"}}], "runs": [{"name", "cell", "seed", "status", "acc",
/// "bwt", "forgetting", "retention", "task_il_acc", "accuracy_matrix",
/// "task_il_accuracy_matrix", "at_chance", "retention_note"}]}` (`task_il_acc` and
/// `task_il_accuracy_matrix`: the task-IL view, `null` except for class-incremental runs;
/// `at_chance`: the tasks the run's report warned about as no better than chance right after
/// training on them; `retention_note`: the report's, or `null`); fractions for the metrics, seconds,
/// MiB and thousands of parameters for the rest; `std` is the sample standard deviation over
/// seeds (`null` for one seed). `sweep.csv`: one row per cell, the axis values and
/// `<metric>_mean`, `<metric>_std` columns.
///
/// # Errors
/// As [`cells`]; [`Error::Usage`] when `DIR/plots` is a file ([`crate::outpath::ensure_dir`]);
/// [`Error::Io`] when a file cannot be written.
pub fn report(dir: &Path) -> Result<(String, Vec<PathBuf>)> {
    let (m, cells, runs) = cells(dir)?;
    let bytes = serde_json::to_vec_pretty(&sweep_json(&m, &cells, runs))
        .map_err(|e| Error::Other(e.to_string()))?;
    let json_path = dir.join("sweep.json");
    engram_core::fsutil::write_atomic(&json_path, &bytes)?;
    let csv_path = dir.join("sweep.csv");
    engram_core::fsutil::write_atomic(&csv_path, sweep_csv(&m, &cells).as_bytes())?;

    let rows: Vec<RunRow> = cells.iter().map(|c| c.row.clone()).collect();
    let plots = dir.join("plots");
    crate::outpath::ensure_dir(&plots, "the sweep's figures' directory")?;
    let mut files = vec![json_path, csv_path];
    files.extend(crate::report::render_rows(&rows, &plots)?);

    let mut table = crate::report::compare_table(&rows);
    for c in &cells {
        for (n, s) in &c.unfinished {
            let _ = writeln!(table, "not in the table: {n} ({})", s.word());
        }
    }
    for w in crate::report::plasticity_warnings(&rows) {
        let _ = writeln!(table, "{w}");
    }
    Ok((table, files))
}

/// The metrics of a cell in `sweep.json` and `sweep.csv`, in column order ([`stats`]).
const METRIC_NAMES: [&str; 9] = [
    "acc",
    "bwt",
    "forgetting",
    "fwt",
    "retention",
    "task_il_acc",
    "time_s",
    "peak_mib",
    "params_k",
];

/// The statistics of a row named by [`METRIC_NAMES`], in that order.
fn stats(r: &RunRow) -> [Option<Stat>; 9] {
    [
        r.acc,
        r.bwt,
        r.forgetting,
        r.fwt,
        r.retention,
        r.task_il_acc,
        r.total_s,
        r.peak_mib,
        r.params_k,
    ]
}

/// `sweep.json` (its layout: [`report`]).
fn sweep_json(m: &Manifest, cells: &[Cell], runs: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "sweep": m.name,
        "axes": m.axes,
        "cells": cells.iter().map(|c| {
            let metrics: serde_json::Map<String, serde_json::Value> = METRIC_NAMES
                .iter()
                .zip(stats(&c.row))
                .map(|(k, s)| (k.to_string(), stat_json(&s)))
                .collect();
            serde_json::json!({
                "cell": c.cell,
                "axes": c.axes,
                "runs": c.done,
                "unfinished": c.unfinished.iter().map(|(n, s)| serde_json::json!({"name": n, "status": s.word()})).collect::<Vec<_>>(),
                "metrics": metrics,
            })
        }).collect::<Vec<_>>(),
        "runs": runs,
    })
}

/// `sweep.csv`: one row per cell, the axis values and `<metric>_mean`, `<metric>_std`.
fn sweep_csv(m: &Manifest, cells: &[Cell]) -> String {
    let mut csv = String::from("cell");
    for a in &m.axes {
        csv.push(',');
        csv.push_str(&csv_field(a));
    }
    csv.push_str(",seeds");
    for k in METRIC_NAMES {
        let _ = write!(csv, ",{k}_mean,{k}_std");
    }
    csv.push('\n');
    for c in cells {
        csv.push_str(&csv_field(&c.cell));
        for a in &m.axes {
            let v = c.axes.get(a).map_or(String::new(), |v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            csv.push(',');
            csv.push_str(&csv_field(&v));
        }
        let _ = write!(csv, ",{}", c.row.seeds);
        for s in stats(&c.row) {
            match s {
                Some(s) => {
                    let _ = write!(csv, ",{}", s.mean);
                    match s.std {
                        Some(sd) => {
                            let _ = write!(csv, ",{sd}");
                        }
                        None => csv.push(','),
                    }
                }
                None => csv.push_str(",,"),
            }
        }
        csv.push('\n');
    }
    csv
}

/// A CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `engram sweep status DIR`: one line per run (`done`, `running`, `failed` with its error,
/// `interrupted`, `pending`, with Slurm's state of its array task where `squeue`/`sacct`
/// know it), then the counts.
///
/// # Errors
/// As [`Manifest::read`].
pub fn status(dir: &Path) -> Result<String> {
    let m = Manifest::read(dir)?;
    let slurm = super::slurm::queue_states(dir);
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    let mut s = String::new();
    let width = m.runs.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for (i, r) in m.runs.iter().enumerate() {
        let st = exec::status(dir, r);
        *counts.entry(st.word()).or_default() += 1;
        let _ = write!(s, "{i:>4}  {:<width$}  {:<11}", r.name, st.word());
        if let Some(q) = slurm.get(&i) {
            let _ = write!(s, "  slurm {q}");
        }
        let state = exec::read_state(&exec::RunPaths::of(dir, r));
        if st == Status::Failed {
            let _ = write!(
                s,
                "  exit {}: {}",
                state.exit_code.map_or("?".into(), |c| c.to_string()),
                state.error.unwrap_or_default()
            );
        }
        if st == Status::Running && !state.host.is_empty() {
            let _ = write!(s, "  on {} (pid {})", state.host, state.pid);
        }
        let end = s.trim_end_matches(' ').len();
        s.truncate(end);
        s.push('\n');
    }
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(s, "{} runs: {}", m.runs.len(), parts.join(", "));
    Ok(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(super::csv_field("a"), "a");
        assert_eq!(super::csv_field("[400, 400]"), "\"[400, 400]\"");
        assert_eq!(super::csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
