//! `accumulate`: gradient accumulation — run a batch as `steps` micro-batches through the
//! rest of the memory chain and combine their gradients, so the activations of only one
//! micro-batch are alive at a time while the optimiser sees the whole batch.
//!
//! With the task loss a mean over rows, the whole batch's gradient is
//! `Σ_i (n_i / N) ∇L_i` for micro-batches of `n_i` rows; rows with explicit weights get
//! `w·N/n_i` in their micro-batch so the same combination holds, and a penalty on the
//! parameters (EWC) is counted once because the `n_i / N` sum to 1. Without dropout the result
//! equals one step on the whole batch (tested to 1e-5); with dropout the micro-batches draw
//! their own masks.

use engram_core::Result;
use engram_core::burn::tensor::Tensor;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::Batch;
use engram_core::model::unflatten_grads;
use engram_core::registry::BuildContext;
use engram_core::strategy::{MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `[[memory]] type = "accumulate"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccumulateParams {
    /// Micro-batches per batch (a warning is printed when it is not a power of two, which
    /// leaves micro-batches of unequal size for power-of-two batch sizes). Default 4.
    pub steps: usize,
}

impl Default for AccumulateParams {
    fn default() -> Self {
        Self { steps: 4 }
    }
}

/// Gradient accumulation over `steps` micro-batches.
#[derive(Debug)]
pub struct Accumulate {
    steps: usize,
}

impl Accumulate {
    /// Accumulation over `steps` micro-batches (at least 1).
    pub fn new(steps: usize) -> Self {
        Self {
            steps: steps.max(1),
        }
    }
}

/// Rows `range` of `batch`, with weights rescaled by `scale`.
fn rows(batch: &Batch, range: std::ops::Range<usize>, scale: f32) -> Batch {
    let n = range.len();
    Batch {
        x: batch.x.slice_rows(range.clone()),
        y: batch.y.clone().slice([range.clone()]),
        weights: batch
            .weights
            .as_ref()
            .map(|w| w.clone().slice([range.clone()]).mul_scalar(scale)),
        logit_mask: batch.logit_mask.as_ref().map(|m| {
            let c = m.dims()[1];
            m.clone().slice([range.clone(), 0..c])
        }),
        refs: batch.refs[range.clone()].to_vec(),
        new_samples: batch.new_samples.saturating_sub(range.start).min(n),
    }
}

impl MemoryStrategy for Accumulate {
    fn name(&self) -> &str {
        AccumulateParams::NAME
    }
    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Accumulation
    }
    fn splits_batch(&self) -> bool {
        self.steps > 1
    }
    fn step(&mut self, req: StepRequest<'_>, mut next: Next<'_>) -> Result<StepOutcome> {
        let total = req.batch.len();
        let k = self.steps.min(total.max(1));
        if k <= 1 {
            return next.run(req);
        }
        let model = req.model;
        let mut acc: HashMap<_, Tensor<1>> = HashMap::new();
        let (mut loss, mut losses, mut skipped, mut scale) = (0.0f32, Vec::new(), false, None);
        let mut start = 0;
        for i in 0..k {
            let end = start + (total - start) / (k - i);
            let n = end - start;
            let frac = n as f32 / total as f32;
            let micro = rows(&req.batch, start..end, total as f32 / n as f32);
            let out = next.reborrow().run(StepRequest {
                model,
                batch: micro,
                loss: req.loss,
                loss_scale: req.loss_scale,
                compute_dtype: req.compute_dtype,
                rng_seed: req.rng_seed,
            })?;
            loss += frac * out.loss;
            if let Some(l) = out.sample_losses {
                losses.extend(l);
            }
            skipped |= out.skipped;
            scale = scale.or(out.loss_scale);
            for (info, g) in model.flat_grads(&out.grads) {
                let g = g.inner().mul_scalar(frac);
                let sum = match acc.remove(&info.id) {
                    Some(prev) => prev + g,
                    None => g,
                };
                acc.insert(info.id, sum);
            }
            start = end;
        }
        Ok(StepOutcome {
            loss,
            sample_losses: (losses.len() == total).then_some(losses),
            grads: unflatten_grads(model, acc.into_iter().collect()),
            skipped,
            loss_scale: scale,
        })
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let p: AccumulateParams = src.parse()?;
    if p.steps == 0 {
        return Err(src.key_error("steps", "accumulate: steps must be ≥ 1".into(), None));
    }
    if !p.steps.is_power_of_two() {
        eprintln!(
            "warning: accumulate: steps = {} is not a power of two; with a power-of-two batch the micro-batches differ in size",
            p.steps
        );
    }
    Ok(Box::new(Accumulate::new(p.steps)))
}

engram_core::component!(memory "accumulate", "gradient accumulation: run a batch as micro-batches and sum their gradients", AccumulateParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::SampleRef;
    use engram_core::model::Model;
    use engram_core::model::mlp::{ActivationKind, build_mlp};

    const LOSS: crate::test_util::CeL2 = crate::test_util::CeL2(1e-3);

    fn grads(m: &Model, o: &StepOutcome) -> Vec<f32> {
        m.flat_grads(&o.grads)
            .into_iter()
            .flat_map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn k_micro_batches_equal_one_k_times_batch() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        let mut r = engram_core::rng::stream(2, "init", 0, 0);
        let m = build_mlp(6, &[8, 8], 3, ActivationKind::Tanh, 0.0, &mut r, &d);
        let n = 12;
        let x: Vec<f32> = (0..n * 6)
            .map(|i| ((i * 11 % 17) as f32 - 8.0) / 4.0)
            .collect();
        let y: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
        for weighted in [false, true] {
            let weights = weighted.then(|| {
                let w: Vec<f32> = (0..n).map(|i| (1 + i % 4) as f32 / 30.0).collect();
                Tensor::from_data(TensorData::new(w, [n]), &d)
            });
            let batch = Batch {
                x: engram_core::data::input::Input::Float(Tensor::from_data(
                    TensorData::new(x.clone(), [n, 6]),
                    &d,
                )),
                y: Tensor::<1, Int>::from_data(TensorData::new(y.clone(), [n]), &d),
                weights,
                logit_mask: None,
                refs: (0..n as u32)
                    .map(|i| SampleRef { task: 0, index: i })
                    .collect(),
                new_samples: n,
            };
            let req = || StepRequest {
                model: &m,
                batch: batch.clone(),
                loss: &LOSS,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed: 0,
            };
            let whole = crate::standard::plain_step(req()).unwrap();
            let mut chain: Vec<Box<dyn MemoryStrategy>> = vec![Box::new(crate::standard::Standard)];
            for k in [2, 3, 4, 5] {
                let out = Accumulate::new(k)
                    .step(req(), Next::new(&mut chain))
                    .unwrap();
                let (a, b) = (grads(&m, &out), grads(&m, &whole));
                let err = a
                    .iter()
                    .zip(&b)
                    .map(|(p, q)| (p - q).abs() / q.abs().max(1e-3))
                    .fold(0.0f32, f32::max);
                assert!(
                    err <= 1e-5,
                    "weighted {weighted}, k {k}: max relative error {err}"
                );
                assert!((out.loss - whole.loss).abs() <= 1e-5 * whole.loss.abs().max(1.0));
                assert_eq!(out.sample_losses.as_ref().map(Vec::len), Some(n));
            }
        }
    }
}
