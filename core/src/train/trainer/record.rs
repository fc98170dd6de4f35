//! The record of a run: its report when it finishes, and what a failed run leaves (its steps
//! so far, the error and where it stopped, the matrix so far).

use super::*;

/// The model's size figures for the report's memory section.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ModelSize {
    /// Every parameter (count).
    pub parameters: u64,
    /// The parameters that train ([`Model::trainable_numel`]).
    pub trainable: u64,
}

impl ModelSize {
    /// The sizes of `model`.
    pub(super) fn of(model: &Model) -> Self {
        Self {
            parameters: model.numel() as u64,
            trainable: model.trainable_numel() as u64,
        }
    }
}

/// What each strategy's saved state takes in checkpoint `ck`, by name (entries of one name
/// summed): 4 bytes a tensor value plus the JSON metadata's length; strategies that save
/// nothing are left out.
pub(super) fn state_bytes(ck: &Checkpoint) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for (name, st) in ck.forgetting.iter().chain(&ck.memory).chain(&ck.schedulers) {
        let tensors: usize = st.tensors.values().map(|t| 4 * t.values.len()).sum();
        let meta = if st.meta.is_null() {
            0
        } else {
            serde_json::to_vec(&st.meta).map_or(0, |v| v.len())
        };
        if tensors + meta > 0 {
            *out.entry(name.clone()).or_insert(0) += (tensors + meta) as u64;
        }
    }
    out
}

/// Writes the record of a run that stopped with `e`: `steps.csv` (the logged steps and the
/// steps since the last log row) and a `report.json` with `status = "failed"`, the error and
/// position, the accuracy matrix so far and no metrics.
pub(super) fn write_failure(
    p: &Prepared,
    opts: &RunOptions,
    pr: &mut Progress,
    e: &Error,
    size: ModelSize,
    t0: Instant,
    inner: &Device,
) -> Result<()> {
    pr.flush_window(pr.at.step_in_task, pr.at.global_step, pr.losses.last_lr);
    write_atomic(
        &opts.out.join("steps.csv"),
        steps_csv(&pr.record.logs).as_bytes(),
    )?;
    let earlier_s = pr.record.timings.total_s;
    let mut report = build_report(
        p,
        pr,
        inner,
        size,
        earlier_s + t0.elapsed().as_secs_f64() + p.setup_s,
    );
    report.metrics = metrics::Metrics::default();
    report.task_il_metrics = None;
    report.status = crate::train::report::RunStatus::Failed;
    report.failure = Some(crate::train::report::Failure {
        error: e.to_string(),
        task: pr.at.round,
        epoch: pr.at.epoch,
        step_in_task: pr.at.step_in_task,
        global_step: pr.at.global_step,
    });
    report.write(&opts.out)
}

/// [`Report::retention_note`]: the old tasks (all but the last row's) with an `at-chance` event,
/// when retention is defined.
fn retention_note(pr: &Progress, retention: Option<f64>) -> Option<String> {
    let last = pr.results.matrix.len().checked_sub(1)?;
    retention?;
    let mut low: Vec<usize> = pr
        .record
        .events
        .iter()
        .filter(|e| e.kind == EventKind::AtChance && e.task < last)
        .map(|e| e.task)
        .collect();
    low.sort_unstable();
    low.dedup();
    if low.is_empty() {
        return None;
    }
    let list = low
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "task(s) {list} scored no better than chance right after training on them: retention \
         divides by those diagonals, so it is not a share kept (it can read above 1); \
         read BWT, forgetting and the task-IL view instead"
    ))
}

/// The report of a run at `pr`: the matrix and metrics so far, the memory and time figures
/// (`total_s` seconds of wall time over every process of the run), the model's `size`.
pub(super) fn build_report(
    p: &Prepared,
    pr: &Progress,
    inner: &Device,
    size: ModelSize,
    total_s: f64,
) -> Report {
    let c = &p.cfg.config;
    let stream = &p.stream;
    let m = metrics::compute(&pr.results.matrix, &pr.results.baseline);
    // A language-model run has no accuracies: no task-IL view either (objective.rs).
    let lm = c.train.lm_window().is_some();
    let class_il = stream.scenario == Scenario::ClassIncremental && !lm;
    let m_retention = m.retention;
    let mut mem = pr.record.memory.clone();
    mem.peak_bytes = mem
        .train
        .peak_bytes
        .max(mem.eval.peak_bytes)
        .max(mem.after_task.peak_bytes);
    mem.end_bytes = memory::device_bytes(inner).unwrap_or(0);
    mem.parameters = size.parameters;
    mem.trainable_parameters = size.trainable;
    mem.strategies = p
        .memory
        .iter()
        .filter_map(|s| Some((s.name().to_string(), s.report()?)))
        .collect();
    mem.stored = p
        .forgetting
        .iter()
        .filter_map(|f| Some((f.name().to_string(), f.stored_samples(stream)?)))
        .collect();
    let mut timings = pr.record.timings.clone();
    timings.setup_s += p.setup_s;
    timings.total_s = total_s;
    Report {
        schema_version: SCHEMA_VERSION,
        versions: Versions::current(),
        status: crate::train::report::RunStatus::Finished,
        failure: None,
        seed: c.run.seed,
        device: c.run.device.clone(),
        config: serde_json::to_value(c).unwrap_or_default(),
        scenario: serde_json::to_value(stream.scenario)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        joint: c.train.joint,
        tasks: task_summaries(stream),
        accuracy_matrix: pr.results.matrix.clone(),
        initial_accuracy: pr.results.baseline.clone(),
        random_init_accuracy: (pr.origin.init.is_none() && !lm)
            .then(|| pr.results.baseline.clone()),
        init: pr.origin.init.clone(),
        normalization: Some(if stream.dataset.train.values.is_tokens() {
            "not at all: token ids (uint32) reach the model as Int ids, as the tokenizer gave them"
                .to_string()
        } else {
            crate::data::shape::normalization_rule(
                stream.dataset.input,
                stream.dataset.train.mean.len(),
            )
        }),
        metrics: m,
        task_il_accuracy_matrix: class_il.then(|| pr.results.task_il_matrix.clone()),
        task_il_metrics: class_il
            .then(|| metrics::compute(&pr.results.task_il_matrix, &pr.results.task_il_baseline)),
        task_id_matrix: (!pr.results.task_id_matrix.is_empty())
            .then(|| pr.results.task_id_matrix.clone()),
        retention_note: retention_note(pr, m_retention),
        language_model: lm_report(&p.cfg, &pr.results),
        metric_cells: crate::train::report::metric_cells(&pr.results.matrix),
        throughput: Throughput {
            train_samples_per_s: pr.record.counters.samples as f64 / timings.train_s.max(1e-9),
            eval_samples_per_s: pr.record.eval_samples as f64 / timings.eval_s.max(1e-9),
        },
        training: pr.record.counters.clone(),
        events: pr.record.events.clone(),
        memory: mem,
        forgetting: p
            .forgetting
            .iter()
            .filter_map(|f| Some((f.name().to_string(), f.report()?)))
            .collect(),
        timings,
        machine_dependent_keys: MACHINE_DEPENDENT_KEYS
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

/// Each task of `stream` as the report lists it: its classes (and their names), its training
/// and evaluation samples.
fn task_summaries(stream: &Stream) -> Vec<TaskSummary> {
    stream
        .tasks
        .iter()
        .map(|t| TaskSummary {
            index: t.index,
            classes: t.classes.clone(),
            class_names: t
                .classes
                .iter()
                .map(|&c| stream.dataset.class_names[c].clone())
                .collect(),
            train_samples: t.train.len(),
            eval_samples: stream.eval_rows(t.index).0.len(),
        })
        .collect()
}
