//! Language modelling as a task (issue #31, item 3): the pieces a next-token objective is built
//! from, independent of the trainer's wiring.
//!
//! * **Windows.** [`chunk_windows`] turns tokenized documents into training windows by
//!   *concatenate-and-chunk*, the field's standard for causal LM fine-tuning (GPT-2's
//!   WebText windows, Radford et al. 2019; Hugging Face's `run_clm.py` `group_texts`): every
//!   document's ids followed by the tokenizer's end-of-sequence id, concatenated, cut into
//!   windows of exactly `window` tokens; the last, shorter remainder is dropped, so no window
//!   holds padding.
//! * **Loss.** [`next_token_nll`]: position `t` predicts token `t + 1` (the logits shifted by
//!   one against the ids), cross-entropy summed per window over its real positions only (a
//!   window of real length `n` contributes `n − 1` predictions; padding never counts).
//!   [`next_token_loss`] is the mean over every counted token of the batch (token-mean, as
//!   `LlamaForCausalLM`'s loss).
//! * **Perplexity.** [`Perplexity`] accumulates NLL and token counts over a task's held-out
//!   windows: `ppl = exp(Σ NLL / Σ tokens)`, the exponential of the mean token NLL in nats.
//! * **Forgetting on a lower-is-better matrix.** [`LmMetrics::compute`] reads `P[i][j]`, the
//!   perplexity of task `j` after training task `i`, on *log*-perplexity (mean NLL, nats per
//!   token), so a change means the same at every scale of perplexity:
//!   `BWT = mean_{j<T−1} (ln P[T−1][j] − ln P[j][j])` — Lopez-Paz & Ranzato 2017's eq. 3 on
//!   `ln P`, its sign flipped by the metric's direction: **positive = forgetting** (held-out
//!   NLL of an earlier domain went up);
//!   `Forgetting = mean_{j<T−1} (ln P[T−1][j] − min_{j≤i<T−1} ln P[i][j])` — Chaudhry et al.
//!   2018 (RWalk) eq. 7–8 with "best" = lowest log-perplexity; positive = forgetting. Class-IL / task-IL views do not apply to a language model and are not defined.

use crate::{Error, Result};
use burn::tensor::{Int, Tensor, TensorData, activation};

pub use crate::data::windows::chunk_windows;

/// Next-token NLL of a batch: per window, the sum of `−ln p(x_{t+1} | x_{≤t})` over its real
/// positions, and how many predictions that sum holds.
#[derive(Debug)]
pub struct TokenNll {
    /// Summed NLL per window `[batch]`, in nats (tracked when `logits` is).
    pub per_sample: Tensor<1>,
    /// Predictions per window: `max(length − 1, 0)`.
    pub tokens: Vec<usize>,
}

/// Next-token NLL of `logits` `[batch, len, vocab]` (from
/// [`Model::forward_tokens`](crate::model::Model::forward_tokens)) against `ids` `[batch, len]`:
/// the logits at position `t` score the id at `t + 1`; a window's positions at or past its
/// real length `lengths[b]` (right padding) are masked out.
///
/// # Errors
/// [`Error::Data`] when the shapes disagree (`ids` not `[batch, len]`, `lengths` not `batch`
/// long, a length over `len`) or an id is outside the vocabulary.
pub fn next_token_nll(
    logits: Tensor<3>,
    ids: Tensor<2, Int>,
    lengths: &[usize],
) -> Result<TokenNll> {
    let [b, len, vocab] = logits.dims();
    if ids.dims() != [b, len] {
        return Err(Error::Data(format!(
            "next-token loss: ids are {:?}, the logits [{b}, {len}, {vocab}] need [{b}, {len}]",
            ids.dims()
        )));
    }
    if lengths.len() != b || lengths.iter().any(|&n| n > len) {
        return Err(Error::Data(format!(
            "next-token loss: lengths {lengths:?} do not fit a batch of {b} windows of {len} tokens"
        )));
    }
    let device = logits.device();
    let tokens: Vec<usize> = lengths.iter().map(|&n| n.saturating_sub(1)).collect();
    if len < 2 {
        // Nothing to predict; zeros that keep the graph (a backward through them is zero).
        let per_sample = logits.sum_dim(2).sum_dim(1).reshape([b]).mul_scalar(0.0);
        return Ok(TokenNll { per_sample, tokens });
    }
    let flat: Vec<i64> = ids
        .to_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| Error::Data(format!("next-token loss: ids unreadable: {e:?}")))?;
    let counted_ok = lengths.iter().enumerate().all(|(i, &n)| {
        flat[i * len..i * len + n]
            .iter()
            .skip(1)
            .all(|&v| v >= 0 && v < vocab as i64)
    });
    if !counted_ok {
        return Err(Error::Data(format!(
            "next-token loss: a target id is outside the vocabulary 0..{vocab}"
        )));
    }
    // Padding positions may hold any id; they are clamped into range and masked out.
    let mask: Vec<f32> = lengths
        .iter()
        .flat_map(|&n| (0..len - 1).map(move |t| if t + 1 < n { 1.0 } else { 0.0 }))
        .collect();
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [b, len - 1]), &device);
    let per_sample = (picked_log_probs(logits, ids) * mask)
        .neg()
        .sum_dim(1)
        .reshape([b]);
    Ok(TokenNll { per_sample, tokens })
}

/// `ln p(x_{t+1} | x_{≤t})` at every position `t < len − 1`: `[batch, len − 1]`, from logits
/// `[batch, len, vocab]` (`len ≥ 2`) and ids `[batch, len]` (clamped into the vocabulary).
fn picked_log_probs(logits: Tensor<3>, ids: Tensor<2, Int>) -> Tensor<2> {
    let [b, len, vocab] = logits.dims();
    let targets = ids.slice([0..b, 1..len]).clamp(0, vocab as i64 - 1);
    let logp = activation::log_softmax(logits.slice([0..b, 0..len - 1, 0..vocab]), 2);
    logp.gather(2, targets.reshape([b, len - 1, 1]))
        .reshape([b, len - 1])
}

/// The training loss of a language-model run (`[train] objective = "lm"`), per window: the
/// mean next-token NLL of each full window, nats per prediction, `[batch]`
/// (`NLL_b / (len − 1)`, [`next_token_nll`] without padding). Its mean over the batch is
/// [`next_token_loss`] of the same windows (every window has `len − 1` predictions).
///
/// `flat_logits` are the model's per-token logits as the memory strategies hand them to the
/// loss, flattened per window (`[batch, len · vocab]`, [`Activation::into_flat`] of
/// `[batch, len, vocab]`); `ids` `[batch, len]` the windows (`len ≥ 2`, ids below `vocab`: the
/// trainer checks the data's ids against the model's vocabulary before a run starts).
///
/// [`Activation::into_flat`]: crate::model::Activation::into_flat
pub fn window_nll(flat_logits: Tensor<2>, ids: Tensor<2, Int>, vocab: usize) -> Tensor<1> {
    let [b, len] = ids.dims();
    let logits = flat_logits.reshape([b, len, vocab]);
    let predictions = len.saturating_sub(1).max(1) as f32;
    picked_log_probs(logits, ids)
        .sum_dim(1)
        .reshape([b])
        .neg()
        .div_scalar(predictions)
}

/// Mean next-token NLL over every counted token of the batch (the training loss `[1]`):
/// `Σ_b NLL_b / Σ_b tokens_b`.
///
/// # Errors
/// As [`next_token_nll`]; [`Error::Data`] when the batch holds no prediction (every window
/// shorter than 2 tokens).
pub fn next_token_loss(
    logits: Tensor<3>,
    ids: Tensor<2, Int>,
    lengths: &[usize],
) -> Result<Tensor<1>> {
    let nll = next_token_nll(logits, ids, lengths)?;
    let n: usize = nll.tokens.iter().sum();
    if n == 0 {
        return Err(Error::Data(
            "next-token loss: no window of the batch has 2 tokens to predict from".into(),
        ));
    }
    Ok(nll.per_sample.sum().div_scalar(n as f32))
}

/// Held-out perplexity of a task, accumulated window batch by window batch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Perplexity {
    /// Σ NLL so far, in nats.
    pub nll: f64,
    /// Σ counted predictions so far.
    pub tokens: usize,
}

impl Perplexity {
    /// Adds a batch's NLL.
    pub fn add(&mut self, batch: &TokenNll) {
        let sums: Vec<f32> = batch
            .per_sample
            .to_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        self.nll += sums.iter().map(|&v| f64::from(v)).sum::<f64>();
        self.tokens += batch.tokens.iter().sum::<usize>();
    }

    /// Mean token NLL in nats (`ln` of the perplexity); `None` before any token.
    pub fn mean_nll(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.nll / self.tokens as f64)
    }

    /// `exp(Σ NLL / Σ tokens)`; `None` before any token.
    pub fn perplexity(&self) -> Option<f64> {
        self.mean_nll().map(f64::exp)
    }
}

/// The summary of a perplexity matrix (module docs give the definitions).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LmMetrics {
    /// Mean perplexity over every task after the last (lower is better).
    pub mean_ppl: Option<f64>,
    /// Backward transfer on log-perplexity, nats per token (positive = forgetting).
    pub bwt_log_ppl: Option<f64>,
    /// Average forgetting on log-perplexity, nats per token (positive = forgetting).
    pub forgetting_log_ppl: Option<f64>,
}

impl LmMetrics {
    /// From a square matrix `p`, `p[i][j]` = perplexity of task `j` after training task `i`;
    /// cells that are `None` (not evaluated) or not finite and positive are skipped. A matrix
    /// that is not square gives the mean only.
    pub fn compute(p: &[Vec<Option<f64>>]) -> Self {
        let ok = |v: Option<f64>| v.filter(|x| x.is_finite() && *x > 0.0);
        let Some(last) = p.last() else {
            return Self::default();
        };
        let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let mean_ppl = mean(last.iter().filter_map(|&v| ok(v)).collect());
        let t = p.len();
        if t < 2 || p.iter().any(|row| row.len() != t) {
            return Self {
                mean_ppl,
                ..Self::default()
            };
        }
        let mut bwt = Vec::new();
        let mut fgt = Vec::new();
        for (j, &fin) in p[t - 1][..t - 1].iter().enumerate() {
            let Some(fin) = ok(fin) else { continue };
            if let Some(diag) = ok(p[j][j]) {
                bwt.push(fin.ln() - diag.ln());
            }
            let best = (j..t - 1)
                .filter_map(|i| ok(p[i][j]))
                .map(f64::ln)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
            if let Some(best) = best {
                fgt.push(fin.ln() - best);
            }
        }
        Self {
            mean_ppl,
            bwt_log_ppl: mean(bwt),
            forgetting_log_ppl: mean(fgt),
        }
    }
}

/// Held-out perplexity of `model` (a language model: [`Model::forward_tokens`]) over
/// `windows` (token ids, every window the same length, as [`chunk_windows`] gives them), in
/// batches of `batch` windows on `device`, without an autodiff graph: `exp(Σ NLL / Σ tokens)`
/// over all windows, so batching does not change it.
///
/// # Errors
/// [`Error::Data`] when there is no window, `batch` is 0, the windows differ in length or hold
/// fewer than 2 tokens, or an id is outside the vocabulary; the model's error when it gives no
/// per-token logits (a classifier).
///
/// [`Model::forward_tokens`]: crate::model::Model::forward_tokens
pub fn perplexity_of(
    model: &crate::model::Model,
    windows: &[Vec<u32>],
    batch: usize,
    device: &burn::tensor::Device,
) -> Result<Perplexity> {
    let len = windows.first().map_or(0, Vec::len);
    if windows.is_empty() || batch == 0 || len < 2 || windows.iter().any(|w| w.len() != len) {
        return Err(Error::Data(format!(
            "perplexity: {} windows in batches of {batch}: need at least one window, all of one \
             length of 2 tokens or more, and a batch of 1 or more",
            windows.len()
        )));
    }
    // The embedding would index out of range (a panic) on an id past the vocabulary.
    let vocab = model.num_classes;
    if let Some(bad) = windows.iter().flatten().find(|&&v| v as usize >= vocab) {
        return Err(Error::Data(format!(
            "perplexity: id {bad} is outside the model's vocabulary 0..{vocab}"
        )));
    }
    let mut p = Perplexity::default();
    for chunk in windows.chunks(batch) {
        let shape = [chunk.len(), len];
        let f: Vec<f32> = chunk.iter().flatten().map(|&v| v as f32).collect();
        let i: Vec<i64> = chunk.iter().flatten().map(|&v| i64::from(v)).collect();
        let x =
            crate::model::Activation::Flat(Tensor::from_data(TensorData::new(f, shape), device));
        let ids = Tensor::<2, Int>::from_data(TensorData::new(i, shape), device);
        let logits = model.forward_tokens(x, &crate::model::ForwardCtx::evaluation(None))?;
        p.add(&next_token_nll(logits, ids, &vec![len; chunk.len()])?);
    }
    Ok(p)
}

/// Windows of `window` tokens from raw texts: each text encoded by `tokenizer` (its own special
/// tokens added; truncated at the tokenizer's `max_len`, so load it with a `max_len` that holds
/// the longest document), then [`chunk_windows`] with `eos` after each document.
///
/// # Errors
/// The tokenizer's error on a text; [`chunk_windows`]'s for `window` 0.
pub fn windows_from_texts<S: AsRef<str>>(
    tokenizer: &crate::data::tokenizer::TextTokenizer,
    texts: &[S],
    eos: Option<u32>,
    window: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut docs = Vec::with_capacity(texts.len());
    let mut row = Vec::with_capacity(tokenizer.max_len());
    for t in texts {
        row.clear();
        let n = tokenizer.encode_into(t.as_ref(), &mut row)?;
        docs.push(row[..n].to_vec());
    }
    chunk_windows(&docs, eos, window)
}
