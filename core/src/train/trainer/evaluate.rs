//! Evaluation: a row of the accuracy matrix ([`state::RunState::evaluate_row`]) and the
//! initial model's row, one cell (class-IL and task-IL views), predictions, the confusion
//! matrix, and the check that a task just trained is above chance.

use super::*;
use crate::model::Activation;
use crate::strategy::ForgettingStrategy;

/// What answers an evaluation: the inference copy of the model, and the forgetting strategies
/// that may answer a batch in its place ([`ForgettingStrategy::infer`]: per-task adapters pick
/// a task's adapter for each input). A bare `&Model` converts to one without strategies.
#[derive(Clone, Copy)]
pub struct Evaluator<'a> {
    /// The model (the inference copy: no autodiff graph).
    pub model: &'a Model,
    /// The run's forgetting strategies, in config order; the first that answers is used.
    pub strategies: &'a [Box<dyn ForgettingStrategy>],
}

impl<'a> From<&'a Model> for Evaluator<'a> {
    fn from(model: &'a Model) -> Self {
        Self {
            model,
            strategies: &[],
        }
    }
}

impl Evaluator<'_> {
    /// Logits `[batch, classes]` of `input`, and the task each row was answered as when a
    /// strategy answered (`None`: `model.forward` did). `granted` is the task identity the
    /// evaluation gives the strategies.
    fn answer(
        &self,
        input: Activation,
        granted: Option<usize>,
        ctx: &ForwardCtx,
    ) -> (Tensor<2>, Option<Vec<usize>>) {
        for s in self.strategies {
            if let Some(a) = s.infer(self.model, input.clone(), granted) {
                return (a.logits, Some(a.tasks));
            }
        }
        (self.model.forward(input, ctx), None)
    }
}

/// Accuracy of `model` on task `t`'s evaluation rows, without an autodiff graph.
///
/// `seen` is the last trained task (for unseen-class masks). Returns the fraction correct
/// (0 for a task without evaluation rows). The class-incremental cell of
/// [`score_task`].
pub fn evaluate_task<'a>(
    model: impl Into<Evaluator<'a>>,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> f64 {
    score_task(model, stream, t, seen, batch, device).class_il
}

/// One accuracy-matrix cell in both views, from one forward pass over task `t`'s evaluation
/// rows (two when a strategy infers each row's task: the task-IL view then grants it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskScore {
    /// Fraction correct as the scenario scores it: the argmax over every class the masks allow
    /// (`R[i][j]` of the accuracy matrix).
    pub class_il: f64,
    /// Fraction correct with the logits restricted to task `t`'s own classes (the task-IL view
    /// of a class-incremental run, as Mammoth reports it next to the class-IL one). For
    /// task-incremental streams it equals `class_il`; for domain-incremental ones, where every
    /// task has every class, too. Where a strategy infers each row's task
    /// ([`ForgettingStrategy::infer`]), this view is scored with task `t`'s identity granted
    /// to it.
    pub task_il: f64,
    /// Fraction of the rows a strategy answered as task `t` when it had to infer the task
    /// (task-identity prediction, Kim et al. 2022, "A Theoretical Study on Solving Continual
    /// Learning", where class-IL accuracy factors into within-task and task-id prediction);
    /// `None` when no strategy inferred it (none answers, or the scenario grants the identity).
    pub task_id: Option<f64>,
}

/// [`TaskScore`] of `model` on task `t` (see [`evaluate_task`] for `seen`).
pub fn score_task<'a>(
    model: impl Into<Evaluator<'a>>,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> TaskScore {
    let ev = model.into();
    // The task-IL view: the task's own classes, less those the scenario masks (not seen yet
    // under `mask_logits`). The mask adds a finite −1e9, which would leave the masked classes
    // tied and the first of them "predicted" when all of the task's classes are masked.
    let allowed = stream.allowed_classes(t, seen);
    let own: Vec<usize> = stream.tasks[t]
        .classes
        .iter()
        .copied()
        .filter(|c| allowed.as_ref().is_none_or(|a| a.contains(c)))
        .collect();
    let granted = (stream.scenario == Scenario::TaskIncremental).then_some(t);
    let (mut n, mut class_il, mut task_il) = (0usize, 0usize, 0usize);
    let (mut routed, mut right) = (0usize, 0usize);
    forward_task(
        ev,
        stream,
        t,
        seen,
        batch,
        device,
        granted,
        |y, logits, task| {
            n += 1;
            class_il += usize::from(argmax(logits, |_| true) == Some(y));
            task_il += usize::from(argmax(logits, |c| own.contains(&c)) == Some(y));
            if let Some(k) = task {
                routed += 1;
                right += usize::from(k == t);
            }
        },
    );
    let frac = |k: usize| k as f64 / n.max(1) as f64;
    let inferred = granted.is_none() && routed > 0;
    if inferred {
        // The task-IL view grants the identity: the strategy answers with task t's expert.
        task_il = 0;
        forward_task(
            ev,
            stream,
            t,
            seen,
            batch,
            device,
            Some(t),
            |y, logits, _| {
                task_il += usize::from(argmax(logits, |c| own.contains(&c)) == Some(y));
            },
        );
    }
    TaskScore {
        class_il: frac(class_il),
        task_il: frac(task_il),
        task_id: inferred.then(|| frac(right)),
    }
}

/// The first index of the largest of `logits` among the classes `allowed` admits (`None` when
/// it admits none, or every value it admits is NaN or `-inf`). A class masked out (`-inf`
/// added: not seen yet under `mask_logits`) is never predicted, so a task whose classes are all
/// masked scores 0 in either view, as the class-IL view scores it.
fn argmax(logits: &[f32], allowed: impl Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (c, &v) in logits.iter().enumerate() {
        if allowed(c) && !v.is_nan() && v > f32::NEG_INFINITY && best.is_none_or(|(_, b)| v > b) {
            best = Some((c, v));
        }
    }
    best.map(|(c, _)| c)
}

/// `(true class, predicted class)` for each of task `t`'s evaluation rows, in row order, as
/// [`evaluate_task`] scores them (same masks, no autodiff graph).
pub fn predict_task<'a>(
    model: impl Into<Evaluator<'a>>,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let granted = (stream.scenario == Scenario::TaskIncremental).then_some(t);
    forward_task(
        model.into(),
        stream,
        t,
        seen,
        batch,
        device,
        granted,
        |y, logits, _| {
            out.push((y, argmax(logits, |_| true).unwrap_or(usize::MAX)));
        },
    );
    out
}

/// Runs the evaluator over task `t`'s evaluation rows in chunks of `batch` (the scenario's task
/// id and unseen-class mask applied; `granted` the task identity the strategies get) and calls
/// `row(true class, logits [classes], task answered as)` for each row in order.
#[allow(clippy::too_many_arguments)]
fn forward_task(
    ev: Evaluator<'_>,
    stream: &Stream,
    t: usize,
    seen: usize,
    batch: usize,
    device: &Device,
    granted: Option<usize>,
    mut row: impl FnMut(usize, &[f32], Option<usize>),
) {
    let (rows, part) = stream.eval_rows(t);
    let ctx = ForwardCtx::evaluation((stream.scenario == Scenario::TaskIncremental).then_some(t));
    let refs: Vec<SampleRef> = rows
        .iter()
        .map(|&i| SampleRef {
            task: t as u16,
            index: i,
        })
        .collect();
    for chunk in refs.chunks(batch.max(1)) {
        let b = stream.batch(chunk, part, seen, device);
        let (mut logits, tasks) = ev.answer(b.input(), granted, &ctx);
        if let Some(m) = &b.logit_mask {
            logits = logits + m.clone();
        }
        let [n, classes] = logits.dims();
        let values = logits
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        let y = b.labels();
        for (i, &label) in y.iter().enumerate().take(n) {
            if let Some(l) = values.get(i * classes..(i + 1) * classes) {
                row(
                    label as usize,
                    l,
                    tasks.as_ref().and_then(|k| k.get(i).copied()),
                );
            }
        }
    }
}

/// The confusion matrix `[classes][classes]` (row: true class, column: predicted class, in
/// samples) of `model` over the evaluation rows of every task of `stream`, scored as
/// [`evaluate_task`] does with `seen` the last trained task.
pub fn confusion_matrix<'a>(
    model: impl Into<Evaluator<'a>>,
    stream: &Stream,
    seen: usize,
    batch: usize,
    device: &Device,
) -> Vec<Vec<u64>> {
    let ev = model.into();
    let c = stream.num_classes;
    let mut m = vec![vec![0u64; c]; c];
    for t in 0..stream.len() {
        for (y, p) in predict_task(ev, stream, t, seen, batch, device) {
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
/// finish silently with a dead model. `task_il` (class-incremental runs: the task-IL view of
/// the same row) tells the two causes apart in the message: a task the features separate but
/// the head never picks, or one not learned at all. A task of one class (an uneven stream's
/// `classes_per_task = [6, 1, …]`) has no chance level of its own and is never flagged.
pub(crate) fn check_learned(
    t: usize,
    classes: usize,
    row: &[Option<f64>],
    task_il: Option<&[Option<f64>]>,
    events: &mut Vec<Event>,
) {
    if classes < 2 {
        return;
    }
    let chance = 1.0 / classes as f64;
    let Some(acc) = row.get(t).copied().flatten() else {
        return;
    };
    if acc > chance + 0.02 {
        return;
    }
    let cause = match task_il.and_then(|r| r.get(t).copied().flatten()) {
        Some(til) if til > chance + 0.1 => format!(
            "its task-IL accuracy (logits restricted to its classes) is {til:.3}, so the \
             features separate its classes but the head never picks them over the older ones: \
             the strategies hold the old classes' logits up (replay at a high ratio on short \
             tasks, distillation, weight averaging over too long a horizon), or, with an adapter \
             per task (per-task-lora), its inputs were sent to another task's adapter (the \
             report's task_id_matrix)"
        ),
        Some(til) => format!(
            "its task-IL accuracy is {til:.3}, also near chance: the model did not learn it — it collapsed to \
             one class, the learning rate is far off, or the task has too few steps for the \
             strategies to let it in"
        ),
        None => "the model did not learn it — it collapsed to one class, the learning rate is \
                 far off, or the task has too few steps for the strategies to let it in"
            .to_string(),
    };
    let message = format!(
        "task {t} scores {acc:.3} right after training on it, no better than chance ({chance:.3}): \
         {cause} (the book's troubleshooting chapter, \"A task is at chance right after training\")"
    );
    eprintln!("warning: {message}");
    events.push(Event {
        task: t,
        kind: EventKind::AtChance,
        message,
    });
}

impl state::RunState<'_> {
    /// `b_j`: the initial model's accuracy on every task (for forward transfer), in both
    /// views on class-incremental streams.
    pub(super) fn evaluate_baseline(&mut self) {
        if self.is_lm() {
            return self.evaluate_lm(0, true, true);
        }
        let te = Instant::now();
        let valid = self.model.valid();
        let (stream, eval_bs) = (&self.p.stream, self.c.train.eval_batch_size);
        let ev = Evaluator {
            model: &valid,
            strategies: &self.p.forgetting,
        };
        let pr = &mut *self.pr;
        let scores: Vec<TaskScore> = (0..stream.len())
            .map(|j| {
                pr.record.eval_samples += stream.eval_rows(j).0.len();
                score_task(ev, stream, j, 0, eval_bs, &self.inner)
            })
            .collect();
        pr.results.baseline = scores.iter().map(|s| s.class_il).collect();
        if stream.scenario == Scenario::ClassIncremental {
            pr.results.task_il_baseline = scores.iter().map(|s| s.task_il).collect();
        }
        pr.record.timings.eval_s += te.elapsed().as_secs_f64();
    }

    /// Row `round` of the accuracy matrix (and of its task-IL view on class-incremental
    /// streams), after training task `round`: every task, or only the task just trained when
    /// a scheduler's cadence says so (always every task after the last); then the check that
    /// the task just trained is above chance.
    pub(super) fn evaluate_row(&mut self, round: usize) {
        let te = Instant::now();
        let meter = PhaseMeter::start();
        let rounds = self.rounds();
        let all = self
            .p
            .schedulers
            .iter()
            .filter_map(|s| s.evaluate_all(round, rounds))
            .all(|b| b)
            || round + 1 == rounds;
        if self.is_lm() {
            return self.evaluate_lm(round, all, false);
        }
        let (stream, joint) = (&self.p.stream, self.c.train.joint);
        let eval_bs = self.c.train.eval_batch_size;
        let valid = self.model.valid();
        let ev = Evaluator {
            model: &valid,
            strategies: &self.p.forgetting,
        };
        let mut eval_samples = 0;
        let scores: Vec<Option<TaskScore>> = (0..stream.len())
            .map(|j| {
                (joint || all || j == round).then(|| {
                    eval_samples += stream.eval_rows(j).0.len();
                    score_task(ev, stream, j, round, eval_bs, &self.inner)
                })
            })
            .collect();
        drop(valid);
        let row: Vec<Option<f64>> = scores.iter().map(|s| s.map(|s| s.class_il)).collect();
        let class_il = stream.scenario == Scenario::ClassIncremental;
        let pr = &mut *self.pr;
        if class_il {
            let task_il = scores.iter().map(|s| s.map(|s| s.task_il)).collect();
            pr.results.task_il_matrix.push(task_il);
        }
        let task_id: Vec<Option<f64>> = scores.iter().map(|s| s.and_then(|s| s.task_id)).collect();
        if task_id.iter().any(Option::is_some) || !pr.results.task_id_matrix.is_empty() {
            // Rows before the first inferred one (a strategy that keeps nothing until a task
            // ends answers nothing before) are padded with empty cells.
            while pr.results.task_id_matrix.len() < pr.results.matrix.len() {
                pr.results.task_id_matrix.push(vec![None; stream.len()]);
            }
            pr.results.task_id_matrix.push(task_id);
        }
        pr.record.eval_samples += eval_samples;
        meter.finish(&self.inner, &mut pr.record.memory.eval);
        pr.record.timings.eval_s += te.elapsed().as_secs_f64();
        if !joint {
            let task_il_row = class_il
                .then(|| pr.results.task_il_matrix.last().map(Vec::as_slice))
                .flatten();
            let classes = stream.tasks[round].classes.len();
            check_learned(round, classes, &row, task_il_row, &mut pr.record.events);
        }
        pr.results.matrix.push(row);
    }
}

#[cfg(test)]
mod tests {
    use super::argmax;

    #[test]
    fn argmax_takes_the_first_largest_allowed_class() {
        let l = [0.5f32, 2.0, 2.0, -1.0];
        assert_eq!(argmax(&l, |_| true), Some(1));
        // Restricted to classes {2, 3}: the tie with class 1 no longer matters.
        assert_eq!(argmax(&l, |c| c >= 2), Some(2));
        assert_eq!(argmax(&l, |c| c == 0 || c == 3), Some(0));
        // A masked class (-inf added) is never chosen, nor is NaN.
        assert_eq!(argmax(&[f32::NEG_INFINITY, -5.0], |_| true), Some(1));
        assert_eq!(
            argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY], |_| true),
            None
        );
        assert_eq!(argmax(&[f32::NAN, -5.0], |_| true), Some(1));
        assert_eq!(argmax(&[f32::NAN], |_| true), None);
        assert_eq!(argmax(&l, |_| false), None);
    }
}
