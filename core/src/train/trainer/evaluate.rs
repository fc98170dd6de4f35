//! Evaluation: one accuracy-matrix cell, predictions, the confusion matrix, and the check that
//! a task just trained is above chance.

use super::*;

/// Accuracy of `model` on task `t`'s evaluation rows, without an autodiff graph.
///
/// `seen` is the last trained task (for unseen-class masks). Returns the fraction correct
/// (0 for a task without evaluation rows).
pub fn evaluate_task(
    model: &Model,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> f64 {
    let pairs = predict_task(model, stream, t, seen, batch, device);
    let correct = pairs.iter().filter(|(y, p)| y == p).count();
    correct as f64 / pairs.len().max(1) as f64
}

/// `(true class, predicted class)` for each of task `t`'s evaluation rows, in row order, as
/// [`evaluate_task`] scores them (same masks, no autodiff graph).
pub fn predict_task(
    model: &Model,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<(usize, usize)> {
    let (rows, part) = stream.eval_rows(t);
    let ctx = ForwardCtx::evaluation((stream.scenario == Scenario::TaskIncremental).then_some(t));
    let refs: Vec<SampleRef> = rows
        .iter()
        .map(|&i| SampleRef {
            task: t as u16,
            index: i,
        })
        .collect();
    let mut out = Vec::with_capacity(refs.len());
    for chunk in refs.chunks(batch.max(1)) {
        let b = stream.batch(chunk, part, seen, device);
        let mut logits = model.forward(Activation::Flat(b.x.clone()), &ctx);
        if let Some(m) = &b.logit_mask {
            logits = logits + m.clone();
        }
        let to_vec = |t: Tensor<1, burn::tensor::Int>| -> Vec<i64> {
            t.into_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .unwrap_or_default()
        };
        let pred = to_vec(logits.argmax(1).reshape([chunk.len()]));
        let y = to_vec(b.y);
        out.extend(
            y.into_iter()
                .zip(pred)
                .map(|(y, p)| (y as usize, p as usize)),
        );
    }
    out
}

/// The confusion matrix `[classes][classes]` (row: true class, column: predicted class, in
/// samples) of `model` over the evaluation rows of every task of `stream`, scored as
/// [`evaluate_task`] does with `seen` the last trained task.
pub fn confusion_matrix(
    model: &Model,
    stream: &Stream,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<Vec<u64>> {
    let c = stream.num_classes;
    let mut m = vec![vec![0u64; c]; c];
    for t in 0..stream.len() {
        for (y, p) in predict_task(model, stream, t, seen, batch, device) {
            if y < c && p < c {
                m[y][p] += 1;
            }
        }
    }
    m
}

/// Warns (on standard error and as an `at-chance` event of the report) when task `t`, just
/// trained, scores no better than chance on its own evaluation rows: `row[t] ≤ 1/classes +
/// 0.02`, `classes` the task's class count. A model that collapsed to predicting one class
/// keeps a finite loss, so the divergence check does not stop it; without this the run would
/// finish silently with a dead model.
pub(crate) fn check_learned(
    t: usize,
    classes: usize,
    row: &[Option<f64>],
    events: &mut Vec<Event>,
) {
    let chance = 1.0 / classes.max(1) as f64;
    let Some(acc) = row.get(t).copied().flatten() else {
        return;
    };
    if acc > chance + 0.02 {
        return;
    }
    let message = format!(
        "task {t} scores {acc:.3} right after training on it, no better than chance ({chance:.3}): \
         the model did not learn it — it collapsed to one class, the learning rate is far off, \
         or the task has too few steps for the strategies to let it in (the book's \
         troubleshooting chapter, \"A task is at chance right after training\")"
    );
    eprintln!("warning: {message}");
    events.push(Event {
        task: t,
        kind: "at-chance".into(),
        message,
    });
}
