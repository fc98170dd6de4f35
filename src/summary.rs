//! Text tables for the terminal: a run's accuracy matrix and metrics, and the aggregate of
//! several seeds.

use engram_core::train::metrics::{Metrics, mean_std};
use engram_core::train::report::{MemoryReport, Report};
use std::fmt::Write as _;

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "    –".into(), |v| format!("{:5.1}", v * 100.0))
}

fn signed(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:+.4}", v))
}

/// The one line `engram run -q` and `engram resume -q` print: `ACC 0.8123` (final average
/// accuracy), or for a language model (`objective = "lm"`, no accuracy) `mean perplexity
/// 46.5519` (the mean over the domains of the last row of the perplexity matrix).
pub fn final_line(r: &Report) -> String {
    match r.language_model.as_ref().and_then(|l| l.metrics.mean_ppl) {
        Some(p) => format!("mean perplexity {p:.4}"),
        None => format!("ACC {:.4}", r.metrics.acc.unwrap_or(f64::NAN)),
    }
}

/// The accuracy matrix (percent) and the metrics of one run; above the matrix's rows, the
/// `initial` row: each task's accuracy before any training (`initial_accuracy`, the FWT
/// baseline), with where that start came from (the `[model] init` file or a random start).
pub fn run_table(r: &Report) -> String {
    let mut s = match &r.language_model {
        Some(lm) => perplexity_table(r, lm),
        None => accuracy_table(r),
    };
    let _ = writeln!(
        s,
        "time {:.1} s (train {:.1} s, eval {:.1} s)  throughput {:.0} samples/s  peak memory {:.1} MiB ({})",
        r.timings.total_s,
        r.timings.train_s,
        r.timings.eval_s,
        r.throughput.train_samples_per_s,
        r.memory.peak_bytes as f64 / (1024.0 * 1024.0),
        r.memory.source,
    );
    s.push_str(&step_memory_line(&r.memory));
    s.push_str(&stored_line(&r.memory));
    s.push_str(&state_line(&r.memory));
    s
}

/// `bytes` in B, KiB or MiB (1 decimal above a KiB).
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

/// What the optimiser and the strategies keep beside the model at the run's last checkpoint
/// (`memory.optimizer_state_bytes`, `memory.strategy_state_bytes`), one line, empty when the
/// report has neither (older versions): for example `kept beside the model: optimizer 1.2 MiB;
/// o-lora 512 B; ewc 3.4 MiB`.
pub fn state_line(m: &MemoryReport) -> String {
    let mut parts = Vec::new();
    if m.optimizer_state_bytes > 0 {
        parts.push(format!("optimizer {}", size(m.optimizer_state_bytes)));
    }
    parts.extend(
        m.strategy_state_bytes
            .iter()
            .map(|(name, b)| format!("{name} {}", size(*b))),
    );
    if parts.is_empty() {
        return String::new();
    }
    format!("kept beside the model: {}\n", parts.join("; "))
}

/// A language-model run's perplexity matrix (lower is better), its `initial` row (before any
/// training) and its metrics on log-perplexity (report.json's `language_model`).
fn perplexity_table(r: &Report, lm: &engram_core::train::trainer::LmReport) -> String {
    let mut s = String::new();
    let n = lm.perplexity_matrix.first().map_or(0, Vec::len);
    let cell = |v: Option<f64>| v.map_or_else(|| "       –".into(), |v| format!("{v:8.2}"));
    let _ = writeln!(
        s,
        "perplexity matrix (held-out windows of {} tokens; lower is better; row = after training task, column = task)",
        lm.window
    );
    let _ = write!(s, "{:>10}", "");
    for j in 0..n {
        let _ = write!(s, " {:>8}", format!("T{j}"));
    }
    s.push('\n');
    if !lm.initial_perplexity.is_empty() {
        let _ = write!(s, "{:>10}", "initial");
        for v in &lm.initial_perplexity {
            let _ = write!(s, " {}", cell(*v));
        }
        s.push('\n');
    }
    matrix_rows(&mut s, r.joint, &lm.perplexity_matrix, cell);
    let m = &lm.metrics;
    let _ = writeln!(
        s,
        "mean perplexity {}  BWT {} and forgetting {} nats/token on log-perplexity (positive = forgetting); no accuracies: a window has no class",
        m.mean_ppl.map_or("–".into(), |v| format!("{v:.2}")),
        signed(m.bwt_log_ppl),
        signed(m.forgetting_log_ppl),
    );
    s
}

/// Appends a matrix's rows to `s`, labelled `after T{i}` (`joint` for a joint run's one row),
/// each cell written by `cell`.
fn matrix_rows<T: Copy>(s: &mut String, joint: bool, rows: &[Vec<T>], cell: impl Fn(T) -> String) {
    for (i, row) in rows.iter().enumerate() {
        let label = if joint {
            "joint".to_string()
        } else {
            format!("after T{i}")
        };
        let _ = write!(s, "{label:>10}");
        for c in row {
            let _ = write!(s, " {}", cell(*c));
        }
        s.push('\n');
    }
}

/// The accuracy matrix and metrics of a classification run (see [`run_table`]).
fn accuracy_table(r: &Report) -> String {
    let mut s = String::new();
    let n = r.accuracy_matrix.first().map_or(0, Vec::len);
    let _ = writeln!(
        s,
        "accuracy matrix (% test accuracy; row = after training task, column = task)"
    );
    let _ = write!(s, "{:>10}", "");
    for j in 0..n {
        let _ = write!(s, " {:>5}", format!("T{j}"));
    }
    s.push('\n');
    // b_j, the model as it starts the stream (report.json's `initial_accuracy`): the seeded
    // random start, or what `[model] init` loaded.
    if !r.initial_accuracy.is_empty() {
        let _ = write!(s, "{:>10}", "initial");
        for v in &r.initial_accuracy {
            let _ = write!(s, " {}", pct(Some(*v)));
        }
        let init = r.init.as_ref().map(|i| i.file.as_path());
        let _ = write!(
            s,
            "  ({})",
            start_label(init, r.config["model"]["adapter"].as_str())
        );
        s.push('\n');
    }
    matrix_rows(&mut s, r.joint, &r.accuracy_matrix, pct);
    let m = &r.metrics;
    let _ = writeln!(
        s,
        "ACC {}  AIA {}  BWT {}  forgetting {}  FWT {}  retention {}",
        m.acc.map_or("–".into(), |v| format!("{v:.4}")),
        m.aia.map_or("–".into(), |v| format!("{v:.4}")),
        signed(m.bwt),
        signed(m.forgetting),
        signed(m.fwt),
        m.retention.map_or("–".into(), |v| format!("{v:.4}")),
    );
    if let Some(rule) = &r.normalization {
        let _ = writeln!(s, "data normalised {rule}");
    }
    if let Some(note) = &r.retention_note {
        let _ = writeln!(s, "  retention: {note}");
    }
    if let (Some(t), Some(tm)) = (&r.task_il_accuracy_matrix, &r.task_il_metrics) {
        let diagonal: Vec<String> = t
            .iter()
            .enumerate()
            .map(|(i, row)| pct(row.get(i).copied().flatten()).trim().to_string())
            .collect();
        let _ = writeln!(
            s,
            "task-IL (logits restricted to each task's classes): ACC {}  BWT {}  each task right after training on it: {}",
            tm.acc.map_or("–".into(), |v| format!("{v:.4}")),
            signed(tm.bwt),
            diagonal.join(" "),
        );
    }
    if let Some(last) = r.task_id_matrix.as_ref().and_then(|t| t.last()) {
        let cells: Vec<String> = last.iter().map(|v| pct(*v).trim().to_string()).collect();
        let _ = writeln!(
            s,
            "task inferred right (per-task experts' routing, % of each task's test samples, after the last task): {}",
            cells.join(" "),
        );
    }
    s
}

/// The samples each strategy stores (`memory.stored`), one line, empty when none does: for
/// example `stored samples: replay 4 × 48 B of token ids (uint32) + 32 B of logits = 224 B`.
pub fn stored_line(m: &MemoryReport) -> String {
    if m.stored.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = m
        .stored
        .iter()
        .map(|(name, s)| {
            let logits = if s.logit_bytes > 0 {
                format!(" + {} B of logits", s.logit_bytes)
            } else {
                String::new()
            };
            format!(
                "{name} {} × {} B of {}{logits} = {} B",
                s.samples, s.sample_bytes, s.dtype, s.total_bytes
            )
        })
        .collect();
    format!("stored samples: {}\n", parts.join("; "))
}

/// The training step's own memory (`memory.step_peak_bytes`, what a step adds above the bytes
/// in use before it, MiB with 2 decimals) and each task's, beside each task's training-phase
/// peak of the process; empty for a report without it (older versions, no step trained).
/// For example `training step's own peak 2.31 MiB (per task 1.90 / 2.31 / 2.31), against the
/// process's 121.5 MiB (per task 118.2 / 120.9 / 121.5)`.
pub fn step_memory_line(m: &MemoryReport) -> String {
    if m.step_peak_bytes == 0 {
        return String::new();
    }
    let mib = |b: &u64| *b as f64 / (1024.0 * 1024.0);
    // Up to 10 tasks one by one, else their range.
    let list = |v: &[u64], d: usize| {
        if v.len() > 10 {
            let (lo, hi) = (v.iter().min(), v.iter().max());
            return format!(
                "{} tasks, {:.*} to {:.*}",
                v.len(),
                d,
                lo.map_or(0.0, mib),
                d,
                hi.map_or(0.0, mib)
            );
        }
        v.iter()
            .map(|b| format!("{:.*}", d, mib(b)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    format!(
        "training step's own peak {:.2} MiB (per task {}), against the process's {:.1} MiB (per task {})\n",
        mib(&m.step_peak_bytes),
        list(&m.per_task_step_peak_bytes, 2),
        mib(&m.train.peak_bytes),
        list(&m.per_task_train_peak_bytes, 1),
    )
}

/// Mean ± standard deviation of each metric over runs, plus `task_il_acc` (the task-IL view's
/// ACC, from `task_il`, the runs' [`Report::task_il_metrics`]) when any run has one.
pub fn aggregate(metrics: &[Metrics], task_il: &[Metrics]) -> serde_json::Value {
    let field = |f: fn(&Metrics) -> Option<f64>| {
        let v: Vec<f64> = metrics.iter().filter_map(f).collect();
        match mean_std(&v) {
            Some((m, sd)) => serde_json::json!({"mean": m, "std": sd, "n": v.len()}),
            None => serde_json::Value::Null,
        }
    };
    let mut agg = serde_json::json!({
        "acc": field(|m| m.acc),
        "aia": field(|m| m.aia),
        "bwt": field(|m| m.bwt),
        "forgetting": field(|m| m.forgetting),
        "fwt": field(|m| m.fwt),
        "retention": field(|m| m.retention),
    });
    let v: Vec<f64> = task_il.iter().filter_map(|m| m.acc).collect();
    if let Some((m, sd)) = mean_std(&v) {
        agg["task_il_acc"] = serde_json::json!({"mean": m, "std": sd, "n": v.len()});
    }
    agg
}

/// One line per metric: `acc 0.2000 ± 0.0010 (n=3)`.
pub fn aggregate_table(agg: &serde_json::Value) -> String {
    let mut s = String::new();
    for k in [
        "acc",
        "aia",
        "bwt",
        "forgetting",
        "fwt",
        "retention",
        "task_il_acc",
    ] {
        match &agg[k] {
            serde_json::Value::Null if k == "task_il_acc" => {}
            serde_json::Value::Null => {
                let _ = writeln!(s, "{k:>11}  –");
            }
            v => {
                let _ = writeln!(
                    s,
                    "{k:>11}  {:.4} ± {:.4} (n={})",
                    v["mean"].as_f64().unwrap_or(f64::NAN),
                    v["std"].as_f64().unwrap_or(f64::NAN),
                    v["n"]
                );
            }
        }
    }
    s
}

/// A confusion matrix `[classes][classes]` (row: true class, column: predicted class, in
/// samples) as a table, with each class's recall (the diagonal over the row's total, percent)
/// and, for each class, the class it is most often mistaken for, both named by `names` (the
/// dataset's class names, by label; a missing name prints the label alone). Classes without
/// samples are left out.
pub fn confusion_table(m: &[Vec<u64>], names: &[String]) -> String {
    let name = |c: usize| names.get(c).filter(|n| **n != c.to_string());
    let mut s = String::new();
    let rows: Vec<usize> = (0..m.len())
        .filter(|&c| m[c].iter().sum::<u64>() > 0)
        .collect();
    let _ = write!(s, "confusion (row: true class, column: predicted)\n  true");
    for c in 0..m.len() {
        let _ = write!(s, " {c:>5}");
    }
    let _ = writeln!(s, "  recall  mostly mistaken for   class");
    for &c in &rows {
        let total: u64 = m[c].iter().sum();
        let _ = write!(s, "  {c:>4}");
        for v in &m[c] {
            let _ = write!(s, " {v:>5}");
        }
        let recall = m[c].get(c).copied().unwrap_or(0) as f64 / total as f64;
        let worst = (0..m[c].len())
            .filter(|&k| k != c && m[c][k] > 0)
            .max_by_key(|&k| (m[c][k], std::cmp::Reverse(k)));
        let _ = write!(s, "  {:5.1} %", recall * 100.0);
        let mistaken = match worst {
            Some(k) => format!(
                "{k}{} ({:.1} %)",
                name(k).map(|n| format!(" {n}")).unwrap_or_default(),
                m[c][k] as f64 / total as f64 * 100.0
            ),
            None => "–".into(),
        };
        match name(c) {
            Some(n) => {
                let _ = writeln!(s, "  {mistaken:<20}  {n}");
            }
            None => {
                let _ = writeln!(s, "  {mistaken}");
            }
        }
    }
    s
}

/// Where the `initial` row's model came from: the `[model] init` file (`init`) or the seeded
/// random start, with the `[model] adapter` directory (`adapter`: the adapters, and an
/// exported head, loaded over either) when the run loaded one.
fn start_label(init: Option<&std::path::Path>, adapter: Option<&str>) -> String {
    let base = init.map_or_else(
        || "random start".to_string(),
        |f| format!("from {}", f.display()),
    );
    match adapter {
        Some(a) => format!("{base} with the adapter {a}"),
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_label_by_hand() {
        let f = std::path::Path::new("m/model.safetensors");
        assert_eq!(start_label(None, None), "random start");
        assert_eq!(
            start_label(None, Some("ad")),
            "random start with the adapter ad"
        );
        assert_eq!(start_label(Some(f), None), "from m/model.safetensors");
        assert_eq!(
            start_label(Some(f), Some("ad")),
            "from m/model.safetensors with the adapter ad"
        );
    }

    #[test]
    fn step_memory_line_by_hand() {
        let mib = 1u64 << 20;
        let mut m = MemoryReport::default();
        // An older report has no step figure: no line.
        assert_eq!(step_memory_line(&m), "");
        m.step_peak_bytes = 3 * mib / 2;
        m.per_task_step_peak_bytes = vec![mib, 3 * mib / 2];
        m.train.peak_bytes = 120 * mib;
        m.per_task_train_peak_bytes = vec![100 * mib, 120 * mib];
        assert_eq!(
            step_memory_line(&m),
            "training step's own peak 1.50 MiB (per task 1.00 / 1.50), against the process's 120.0 MiB (per task 100.0 / 120.0)\n"
        );
        // Beyond 10 tasks, their range.
        m.per_task_step_peak_bytes = (1..=12).map(|k| k * mib).collect();
        m.per_task_train_peak_bytes = vec![100 * mib; 12];
        let line = step_memory_line(&m);
        assert!(
            line.contains("(per task 12 tasks, 1.00 to 12.00)")
                && line.contains("(per task 12 tasks, 100.0 to 100.0)"),
            "{line}"
        );
    }

    #[test]
    fn stored_line_by_hand() {
        let mut m = MemoryReport::default();
        assert_eq!(stored_line(&m), "");
        m.stored.insert(
            "replay".into(),
            engram_core::strategy::StoredSamples {
                samples: 4,
                sample_bytes: 48,
                input_bytes: 192,
                logit_bytes: 32,
                total_bytes: 224,
                dtype: "token ids (uint32)".into(),
            },
        );
        assert_eq!(
            stored_line(&m),
            "stored samples: replay 4 × 48 B of token ids (uint32) + 32 B of logits = 224 B\n"
        );
    }

    #[test]
    fn state_line_by_hand() {
        let mut m = MemoryReport::default();
        assert_eq!(state_line(&m), "");
        m.optimizer_state_bytes = 3 * 1024 * 1024 / 2;
        m.strategy_state_bytes.insert("o-lora".into(), 512);
        m.strategy_state_bytes.insert("ewc".into(), 2048 + 512);
        assert_eq!(
            state_line(&m),
            "kept beside the model: optimizer 1.5 MiB; ewc 2.5 KiB; o-lora 512 B\n"
        );
    }

    #[test]
    fn confusion_table_by_hand() {
        // Class 0: 3 right, 1 taken for class 1; class 1: all right; class 2: no samples.
        let m = vec![vec![3, 1, 0], vec![0, 2, 0], vec![0, 0, 0]];
        let t = confusion_table(&m, &[]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[2].trim_start().starts_with("0     3     1     0"),
            "{t}"
        );
        assert!(lines[2].ends_with("75.0 %  1 (25.0 %)"), "{t}");
        assert!(lines[3].ends_with("100.0 %  –"), "{t}");
        // With the dataset's class names, both the row and its worst confusion are named.
        let names = ["cat", "dog", "eel"].map(String::from);
        let t = confusion_table(&m, &names);
        let row = t.lines().nth(2).unwrap();
        assert!(
            row.contains("75.0 %  1 dog (25.0 %)") && row.ends_with("  cat"),
            "{t}"
        );
    }
}
