//! `[train] objective = "lm"` in the trainer (issue #31, item 3): what a language-model run
//! checks before it starts and how it evaluates. The rest of the objective lives where the
//! thing it changes does: the windows in the text formats
//! ([`crate::data::format::text::assemble_windows`]), the loss in [`per_row_loss`].
//!
//! **Evaluation.** After each task, every task's held-out windows are scored by
//! [`crate::train::lm::perplexity_of`] (the function `engram perplexity` scores a text with):
//! `P[i][j]` = perplexity of task `j`'s test windows after training task `i`, lower is better.
//! The accuracy matrix of such a run holds no value (`null` cells): a window has no class.

use super::*;
use crate::config::Objective;
use crate::train::lm::{LmMetrics, perplexity_of};

/// The definition report.json states beside a perplexity matrix.
pub const LM_DEFINITION: &str = "perplexity_matrix[i][j] = exp(mean next-token NLL, nats) of \
task j's held-out windows after training task i (lower is better); initial_perplexity[j] = the \
same before any training. On log-perplexity L = ln P: bwt_log_ppl = mean_{j<T-1} (L[T-1][j] - \
L[j][j]) (Lopez-Paz & Ranzato 2017, sign flipped: positive = forgetting); forgetting_log_ppl = \
mean_{j<T-1} (L[T-1][j] - min_{j<=i<T-1} L[i][j]) (Chaudhry et al. 2018; positive = \
forgetting); mean_ppl = mean_j P[T-1][j]";

/// The language-model part of report.json (`language_model`): the perplexity matrix and its
/// metrics ([`LmMetrics`], [`LM_DEFINITION`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LmReport {
    /// The matrix's metric: `"perplexity"`.
    pub metric: String,
    /// Always true: a lower perplexity is better.
    pub lower_is_better: bool,
    /// Tokens per window.
    pub window: usize,
    /// `P[i][j]`, perplexity of task `j` after training task `i` (`null`: not evaluated).
    pub perplexity_matrix: crate::train::metrics::Matrix,
    /// Perplexity of each task before any training (the start: `[model] init`'s weights or a
    /// random model).
    pub initial_perplexity: Vec<Option<f64>>,
    /// Mean perplexity after the last task, BWT and forgetting on log-perplexity (nats).
    pub metrics: LmMetrics,
    /// How the figures are defined ([`LM_DEFINITION`]).
    pub definition: String,
}

/// Refuses, before a language-model run starts, what cannot train under it: a model that is
/// not a decoder (no per-token logits over its vocabulary from
/// [`Model::forward_tokens`]), data that is not windows of `[train] window` token ids (a
/// format that does not cut text into windows), and a forgetting strategy that needs class
/// logits ([`ForgettingStrategy::lm_refusal`]). A classification run passes.
///
/// # Errors
/// A positioned [`Error::Config`]: at `[model] type` (or `init`) for a model that is not a
/// decoder, at `[train] objective` for data that is not windows, at the strategy entry's key
/// naming the strategy.
pub fn check_objective(
    cfg: &LoadedConfig,
    model: &Model,
    stream: &Stream,
    forgetting: &[Box<dyn ForgettingStrategy>],
    device: &Device,
) -> Result<()> {
    let Some(window) = cfg.config.train.lm_window() else {
        return Ok(());
    };
    let d = &stream.dataset;
    if !d.train.values.is_tokens() || d.input != crate::data::InputShape::Features(window) {
        return Err(cfg.error_at(
            "train",
            "objective",
            format!(
                "objective = \"lm\" trains on windows of {window} token ids; the data is {} samples of {}",
                d.train.values.kind(),
                d.input
            ),
            Some("give text datasets in a format that cuts them into windows (format = \"jsonl\", \"text-folder\" or a csv with text_column)".into()),
        ));
    }
    // One window of ids through the model: a decoder gives [1, window, vocab].
    let probe = Tensor::<2, burn::tensor::Int>::from_data(
        burn::tensor::TensorData::new(vec![0i64; window], [1, window]),
        device,
    );
    let per_token = model
        .forward_tokens(
            crate::model::Activation::Ids(probe),
            &ForwardCtx::evaluation(None),
        )
        .map(|t| t.dims())
        .ok();
    if per_token != Some([1, window, model.num_classes]) {
        let key = if cfg.config.model.init.is_some() {
            "init"
        } else {
            "type"
        };
        return Err(cfg.error_at(
            "model",
            key,
            format!(
                "objective = \"lm\" trains a decoder, whose output is next-token logits over its vocabulary at every position; `{}` gives {}",
                cfg.config.model.kind,
                match per_token {
                    Some(d) => format!("{d:?} for a window of ids [1, {window}]"),
                    None => format!("{} outputs a sample, not one per token", model.num_classes),
                }
            ),
            Some("use type = \"llama\" (a geometry, `preset = \"smollm2\"`, or `init = FILE.gguf`), or objective = \"classify\"".into()),
        ));
    }
    for (i, f) in forgetting.iter().enumerate() {
        if let Some(r) = f.lm_refusal() {
            return Err(cfg.params("forgetting", i).key_error(
                r.key,
                format!(
                    "[[forgetting]] `{}` cannot train a language model (objective = \"lm\"): {}",
                    f.name(),
                    r.reason
                ),
                Some(
                    "language-model runs take `naive`, `ema` and `replay` (of windows, distill = 0)"
                        .into(),
                ),
            ));
        }
    }
    Ok(())
}

/// Task `t`'s evaluation windows (`[window]` ids each), as the stream holds them.
pub fn task_windows(stream: &Stream, t: usize) -> Vec<Vec<u32>> {
    let (rows, part) = stream.eval_rows(t);
    let split = match part {
        Part::Test => &stream.dataset.test,
        Part::Train => &stream.dataset.train,
    };
    let f = split.features;
    let crate::data::dataset::Values::Tokens(ids) = &split.values else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|&r| ids.get(r as usize * f..(r as usize + 1) * f))
        .map(<[u32]>::to_vec)
        .collect()
}

/// Perplexity of `model` on task `t`'s evaluation windows ([`perplexity_of`] in batches of
/// `batch`), `None` for a task without one or when the model gives no per-token logits.
pub fn task_perplexity(
    model: &Model,
    stream: &Stream,
    t: usize,
    batch: usize,
    device: &Device,
) -> Option<f64> {
    let windows = task_windows(stream, t);
    perplexity_of(model, &windows, batch.max(1), device)
        .ok()?
        .perplexity()
}

impl state::RunState<'_> {
    /// Whether this run models language (`[train] objective = "lm"`).
    pub(super) fn is_lm(&self) -> bool {
        self.c.train.objective == Objective::Lm
    }

    /// A language-model run's row `round` (see the module docs): the perplexity of every task
    /// (or of the task just trained, under a scheduler's cadence) into the perplexity matrix,
    /// and a row of `null` accuracies, so that the accuracy matrix keeps its shape and says
    /// nothing. With `baseline`, the initial perplexities instead.
    pub(super) fn evaluate_lm(&mut self, round: usize, all: bool, baseline: bool) {
        let te = Instant::now();
        let meter = PhaseMeter::start();
        let (stream, eval_bs) = (&self.p.stream, self.c.train.eval_batch_size);
        let valid = self.model.valid();
        let mut eval_samples = 0;
        let row: Vec<Option<f64>> = (0..stream.len())
            .map(|j| {
                (baseline || all || j == round).then(|| {
                    eval_samples += stream.eval_rows(j).0.len();
                    task_perplexity(&valid, stream, j, eval_bs, &self.inner)
                })?
            })
            .collect();
        drop(valid);
        let pr = &mut *self.pr;
        pr.record.eval_samples += eval_samples;
        if baseline {
            pr.results.perplexity_baseline = row;
        } else {
            meter.finish(&self.inner, &mut pr.record.memory.eval);
            pr.results.matrix.push(vec![None; stream.len()]);
            pr.results.perplexity_matrix.push(row);
        }
        pr.record.timings.eval_s += te.elapsed().as_secs_f64();
    }
}

/// The `language_model` part of a report at `pr`, for a language-model run.
pub(super) fn lm_report(cfg: &LoadedConfig, results: &checkpoint::Results) -> Option<LmReport> {
    let window = cfg.config.train.lm_window()?;
    Some(LmReport {
        metric: "perplexity".into(),
        lower_is_better: true,
        window,
        perplexity_matrix: results.perplexity_matrix.clone(),
        initial_perplexity: results.perplexity_baseline.clone(),
        metrics: LmMetrics::compute(&results.perplexity_matrix),
        definition: LM_DEFINITION.into(),
    })
}
