//! `standard`: the plain training step — one forward pass with an autodiff graph, one backward
//! pass. The execution layer every other memory strategy wraps, and the one a run uses when its
//! config names none: it lives in engram-core so that the registry appends this type, not a
//! name it looks up.

use super::BuildContext;
use crate::burn::optim::GradientsParams;
use crate::burn::tensor::{DType, Tensor};
use crate::config::ParamSource;
use crate::model::Activation;
use crate::strategy::{MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// `standard` takes no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StandardParams {}

/// Forward the whole model, compute the loss, backward, collect parameter gradients.
#[derive(Debug, Default)]
pub struct Standard;

/// Reads a step's loss `[1]` and per-sample cross-entropy `[batch]` back and returns them with
/// the loss multiplied by `loss_scale`, ready for backward.
///
/// # Errors
/// [`Error::Diverged`] naming `strategy` when the loss is not finite, with loss scaling too: a
/// loss scaler (AMP) skips the steps whose *gradients* overflow, but the scale multiplies the
/// loss only after it is computed, so no scale can mend a loss that is itself inf or NaN, and
/// skipping such steps would only hide a divergence.
pub fn read_loss(
    loss: Tensor<1>,
    ce: Tensor<1>,
    loss_scale: f32,
    strategy: &str,
) -> Result<(f32, Option<Vec<f32>>, Tensor<1>)> {
    let value = loss.clone().into_scalar::<f32>();
    let sample_losses = ce.into_data().convert::<f32>().try_to_vec::<f32>().ok();
    if !value.is_finite() {
        return Err(Error::Diverged {
            strategy: strategy.into(),
            value,
            at: String::new(),
            notes: Vec::new(),
            advice: Vec::new(),
        });
    }
    let scaled = if loss_scale == 1.0 {
        loss
    } else {
        loss.mul_scalar(loss_scale)
    };
    Ok((value, sample_losses, scaled))
}

/// `t` cast to `dtype` (unchanged when `None` or already of that dtype).
pub fn to_dtype<const D: usize>(t: Tensor<D>, dtype: Option<DType>) -> Tensor<D> {
    match dtype {
        Some(dt) if t.dtype() != dt => t.cast(dt),
        _ => t,
    }
}

/// Runs one plain step of `req`: forward on `req.batch.x` `[batch, features]` (in
/// `req.compute_dtype` when set, normalisation and the loss in `f32`; see
/// [`Model::compute_view`](crate::model::Model::compute_view)), loss × scale, backward.
/// Gradients come back `f32`, multiplied by `req.loss_scale`.
///
/// # Errors
/// [`Error::Strategy`] when the loss is not finite and no loss scaling is active.
pub fn plain_step(req: StepRequest<'_>) -> Result<StepOutcome> {
    let ctx = req.batch.forward_ctx();
    let n = req.model.num_blocks();
    // Mixed precision: parameters and input in the compute dtype, logits back to f32 for the loss.
    let view = req.model.compute_view(req.compute_dtype);
    let logits = view
        .forward_range_seeded(
            0..n,
            Activation::from(
                req.batch
                    .x
                    .clone()
                    .to_dtype(req.model.input_dtype(req.compute_dtype)),
            ),
            &ctx,
            req.rng_seed,
        )
        .into_flat();
    let logits = to_dtype(logits, Some(DType::F32));
    let (loss, ce) = req.loss.loss(req.model, logits, &req.batch);
    let (value, sample_losses, scaled) = read_loss(
        loss,
        ce,
        req.loss_scale,
        <StandardParams as crate::component::Component>::NAME,
    )?;
    let grads = scaled.backward();
    let grads = GradientsParams::from_grads(grads, req.model);
    Ok(StepOutcome {
        loss: value,
        sample_losses,
        grads,
        skipped: false,
        loss_scale: None,
    })
}

impl MemoryStrategy for Standard {
    fn name(&self) -> &str {
        <StandardParams as crate::component::Component>::NAME
    }
    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Execution
    }
    fn step(&mut self, req: StepRequest<'_>, _next: Next<'_>) -> Result<StepOutcome> {
        plain_step(req)
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let _: StandardParams = src.parse()?;
    Ok(Box::new(Standard))
}

crate::component!(memory "standard", "plain forward and backward with a full autodiff graph", StandardParams, build);
