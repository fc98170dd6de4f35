//! The training step's loss and gradient norm: cross-entropy per sample, the loss the memory
//! strategies backpropagate, global-norm clipping.

use super::*;

/// Cross-entropy of `logits` `[batch, classes]` against `batch.y`, per sample `[batch]`,
/// after adding the batch's logit mask.
pub fn per_sample_cross_entropy(logits: Tensor<2>, batch: &Batch) -> Tensor<1> {
    let logits = match &batch.logit_mask {
        Some(m) => logits + m.clone(),
        None => logits,
    };
    let logp = activation::log_softmax(logits, 1);
    let n = batch.y.dims()[0];
    logp.gather(1, batch.y.clone().reshape([n, 1]))
        .reshape([n])
        .neg()
}

/// The loss of a training step: cross-entropy plus every strategy's penalty.
///
/// `task loss = mean_i CE_i` when the batch has no weights, else `Σ_i w_i·CE_i` (a strategy
/// that sets weights chooses their normalisation; replay's `every`/`weight` mode uses
/// `1/n_new` for new rows and `weight/n_memory` for memory rows).
pub struct TrainLoss<'a> {
    /// The forgetting strategies (their penalties are added).
    pub forgetting: &'a [Box<dyn ForgettingStrategy>],
    /// The batch context the penalties see.
    pub cx: &'a BatchContext<'a>,
}

impl LossFn for TrainLoss<'_> {
    fn loss(&self, model: &Model, logits: Tensor<2>, batch: &Batch) -> (Tensor<1>, Tensor<1>) {
        let mut extra: Option<Tensor<1>> = None;
        for f in self.forgetting {
            if let Some(p) = f.logit_penalty(&logits, batch) {
                extra = Some(match extra {
                    Some(e) => e + p,
                    None => p,
                });
            }
        }
        let ce = per_sample_cross_entropy(logits, batch);
        let mut total = match &batch.weights {
            Some(w) => (ce.clone() * w.clone()).sum(),
            None => ce.clone().mean(),
        };
        for f in self.forgetting {
            if let Some(p) = f.penalty(model, self.cx) {
                total = total + p;
            }
        }
        if let Some(e) = extra {
            total = total + e;
        }
        (total, ce)
    }
}

/// Global L2 norm of all gradients (Pascanu et al. 2013): `sqrt(Σ_p ‖g_p‖²)`.
pub fn global_grad_norm(model: &Model, grads: &GradientsParams) -> f64 {
    model
        .flat_grads(grads)
        .into_iter()
        .map(|(_, g)| f64::from(g.powf_scalar(2.0).sum().into_scalar::<f32>()))
        .sum::<f64>()
        .sqrt()
}

/// Scales gradients by `min(1, max_norm / ‖g‖)` when the global norm exceeds `max_norm`.
/// Returns the norm before clipping.
pub fn clip_global_norm(
    model: &Model,
    grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, f64) {
    let norm = global_grad_norm(model, &grads);
    if norm <= max_norm || norm == 0.0 {
        return (grads, norm);
    }
    let scale = (max_norm / norm) as f32;
    let flat = model
        .flat_grads(&grads)
        .into_iter()
        .map(|(p, g)| (p.id, g.mul_scalar(scale)))
        .collect();
    (crate::model::unflatten_grads(model, flat), norm)
}
