//! Reading a finished run: `report.json` (checked against [`SCHEMA_VERSION`]) and `steps.csv`.

use engram_core::train::report::{Report, SCHEMA_VERSION, StepLog};
use engram_core::{Error, Result};
use std::path::Path;

/// A finished run as read from its directory.
#[derive(Clone, Debug)]
pub struct RunFiles {
    /// `report.json`.
    pub report: Report,
    /// The rows of `steps.csv`; empty when the file is absent.
    pub steps: Vec<StepLog>,
}

/// Reads `dir/report.json` and, when present, `dir/steps.csv`.
///
/// # Errors
/// - [`Error::ConfigFile`] naming `dir/report.json` when it is missing (the hint says how to
///   make one, or to pick a `seed-N/` directory of a multi-seed run), is not valid JSON, does
///   not match the report layout, or has another [`SCHEMA_VERSION`];
/// - [`Error::ConfigFile`] naming `steps.csv` when it is malformed (see [`parse_steps_csv`]);
/// - [`Error::Io`] when a file exists but cannot be read.
pub fn load_run(dir: &Path) -> Result<RunFiles> {
    let report = load_report(dir)?;
    let steps_path = dir.join("steps.csv");
    let steps = match engram_core::fsutil::read_text(&steps_path) {
        Ok(text) => parse_steps_csv(&text, &steps_path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(steps_path, e)),
    };
    Ok(RunFiles { report, steps })
}

/// Reads and checks `dir/report.json`.
///
/// # Errors
/// As [`load_run`], for `report.json` only; [`Error::ConfigFile`] naming `dir` when it is not
/// a directory (a regular file, a device such as `/dev/zero`).
pub fn load_report(dir: &Path) -> Result<Report> {
    check_run_dir(dir)?;
    let path = dir.join("report.json");
    let bytes = match engram_core::fsutil::read_bounded(&path, engram_core::fsutil::MAX_TEXT_BYTES)
    {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let hint = if dir.join("aggregate.json").is_file() {
                format!(
                    "`{}` holds several seeds: name one of its `seed-N/` directories",
                    dir.display()
                )
            } else {
                "`engram run CONFIG --out DIR` writes report.json into DIR".to_string()
            };
            return Err(Error::ConfigFile {
                file: path,
                message: "not found: not the output directory of an engram run".into(),
                hint: Some(hint),
            });
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut report: Report = serde_json::from_slice(&bytes).map_err(|e| Error::ConfigFile {
        file: path.clone(),
        message: format!("not an engram report: {e}"),
        hint: None,
    })?;
    if report.initial_accuracy.is_empty()
        && let Some(b) = &report.random_init_accuracy
    {
        report.initial_accuracy.clone_from(b);
    }
    if report.schema_version != SCHEMA_VERSION {
        return Err(Error::ConfigFile {
            file: path,
            message: format!(
                "report layout version {} is not the version this engram reads ({SCHEMA_VERSION})",
                report.schema_version
            ),
            hint: Some("use the engram version that wrote the report".into()),
        });
    }
    Ok(report)
}

/// Parses `steps.csv` text (columns `task,epoch,step,global_step,loss,lr,samples`, found by
/// name in the header, any order). `file` only names the file in errors.
///
/// # Errors
/// [`Error::ConfigFile`] naming `file` and the 1-based line when the header lacks a column, a
/// row has too few fields, or a field does not parse (integers for counters, floats for `loss`
/// and `lr`; `NaN` and `inf` are accepted and left out of plots).
pub fn parse_steps_csv(text: &str, file: &Path) -> Result<Vec<StepLog>> {
    let err = |line: usize, message: String| Error::ConfigFile {
        file: file.to_path_buf(),
        message: format!("line {line}: {message}"),
        hint: None,
    };
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Err(err(1, "empty file: expected a header line".into()));
    };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| err(1, format!("header has no `{name}` column")))
    };
    let (c_task, c_epoch, c_step, c_global, c_loss, c_lr, c_samples) = (
        col("task")?,
        col("epoch")?,
        col("step")?,
        col("global_step")?,
        col("loss")?,
        col("lr")?,
        col("samples")?,
    );
    let mut out = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize, name: &str| {
            fields
                .get(c)
                .copied()
                .ok_or_else(|| err(n, format!("missing field `{name}`")))
        };
        let int = |c: usize, name: &str| -> Result<usize> {
            let v = get(c, name)?;
            v.parse()
                .map_err(|_| err(n, format!("`{name}` = `{v}` is not a whole number")))
        };
        let float = |c: usize, name: &str| -> Result<f64> {
            let v = get(c, name)?;
            v.parse()
                .map_err(|_| err(n, format!("`{name}` = `{v}` is not a number")))
        };
        out.push(StepLog {
            task: int(c_task, "task")?,
            epoch: int(c_epoch, "epoch")?,
            step: int(c_step, "step")?,
            global_step: int(c_global, "global_step")?,
            loss: float(c_loss, "loss")?,
            lr: float(c_lr, "lr")?,
            samples: int(c_samples, "samples")?,
        });
    }
    Ok(out)
}

/// Refuses a `dir` that exists and is not a directory (a file, a device, a FIFO) by name: the
/// OS error of reading `dir/report.json` below it ("Not a directory") would not say what is
/// wrong with the input. An absent `dir` is left to the caller's "not found".
fn check_run_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(Error::ConfigFile {
            file: dir.to_path_buf(),
            message: format!(
                "is {}, not a run's directory",
                if meta.is_file() {
                    "a file"
                } else {
                    "a device or a FIFO"
                }
            ),
            hint: Some(
                "give the output directory of `engram run` (the one holding report.json)".into(),
            ),
        }),
        _ => Ok(()),
    }
}
