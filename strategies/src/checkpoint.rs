//! `checkpoint`: hybrid (segment) gradient checkpointing — trade compute for activation
//! memory (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", §3).
//!
//! The model's blocks are cut into segments of `interval` blocks. The forward pass runs every
//! segment without an autodiff graph and keeps only each segment's *input*; the last segment
//! is then re-run with a graph, the loss is backpropagated through it, and each earlier
//! segment, in reverse, is re-run with a graph and backpropagated with the gradient of its
//! output through the surrogate `Σ y ⊙ ∂L/∂y`. Peak activation memory drops from all blocks'
//! activations to the segment inputs plus one segment's graph, for one extra forward pass.
//!
//! Burn 0.22 has no segment API (its own checkpointing is op-level), so this is built from
//! public calls. The traps and how they are handled:
//! - Dropout and batch norm pick training behaviour from the *input's device*: the graph-free
//!   pass runs on the autodiff device too, with the input detached and the parameters not
//!   requiring gradients, so the layers behave as in training and no graph is recorded.
//! - Batch norm's training forward also updates its running statistics: the recomputation runs
//!   with [`ForwardCtx::replay`] set, so the statistics move once per step, as in a plain step.
//! - Dropout masks cannot be replayed from Burn's RNG state: Burn's RNG is reseeded from the
//!   step's seed and the block index before each block's forward
//!   ([`Model::forward_range_seeded`]), in both passes and in the plain `standard` step, so
//!   the recomputation draws the same masks — and a checkpointed run equals a plain one.
//! - Parameter gradients from every backward (the last segment's also carries penalties on
//!   all parameters, such as EWC's) are summed per parameter.
//!
//! The result equals the plain backward (tested to 1e-5 relative error, dropout included).

use crate::standard::to_dtype;
use engram_core::burn::module::{Module, ParamId};
use engram_core::burn::optim::GradientsParams;
use engram_core::burn::tensor::{DType, Tensor};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::model::{Activation, Model, unflatten_grads};
use engram_core::registry::BuildContext;
use engram_core::strategy::{MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `[[memory]] type = "checkpoint"` keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointParams {
    /// Also enable Burn's op-level checkpointing (the `Balanced` strategy of burn-autodiff: cheap
    /// operations are recomputed in backward instead of kept) on the run's autodiff device.
    /// Default false.
    pub op_level: bool,
    /// Blocks per segment. Default 0: the model's own default
    /// ([`Model::segment_blocks`](engram_core::model::Model::segment_blocks)) — `cnn`: 2 (each
    /// conv block pools its output to a quarter, so the first blocks' activations dominate and
    /// short segments keep few of them alive; the seed's range 2–4), `vit`: 3 (equal-size
    /// encoder blocks: for the default 4–8 blocks, 3 is about √depth, Chen et al.'s
    /// memory-optimal segment for equal-cost blocks; the seed's range 3–6) — and about √blocks
    /// for a model that sets none (the `mlp`).
    pub interval: usize,
}

/// Segment checkpointing executor.
#[derive(Debug)]
pub struct Checkpoint {
    interval: usize,
    op_level: bool,
}

impl Checkpoint {
    /// An executor with `interval` blocks per segment (0: about √blocks).
    pub fn new(interval: usize) -> Self {
        Self {
            interval,
            op_level: false,
        }
    }

    /// The segments of a model with `blocks` blocks, as ranges (interval 0: about √blocks).
    pub fn segments(&self, blocks: usize) -> Vec<std::ops::Range<usize>> {
        self.segments_of(blocks, None)
    }

    /// The segments of `model`: interval 0 takes the model's default segment length
    /// ([`Model::segment_blocks`]), then about √blocks.
    pub fn segments_for(&self, model: &Model) -> Vec<std::ops::Range<usize>> {
        self.segments_of(model.num_blocks(), model.segment_blocks())
    }

    fn segments_of(
        &self,
        blocks: usize,
        model_default: Option<usize>,
    ) -> Vec<std::ops::Range<usize>> {
        let k = match (self.interval, model_default) {
            (0, Some(k)) => k,
            (0, None) => ((blocks as f64).sqrt().round() as usize).max(1),
            (k, _) => k,
        };
        (0..blocks)
            .step_by(k)
            .map(|a| a..(a + k).min(blocks))
            .collect()
    }
}

fn add_grads(acc: &mut HashMap<ParamId, Tensor<1>>, model: &Model, grads: &GradientsParams) {
    for (info, g) in model.flat_grads(grads) {
        let g = g.inner();
        match acc.remove(&info.id) {
            Some(prev) => acc.insert(info.id, prev + g),
            None => acc.insert(info.id, g),
        };
    }
}

/// Runs one checkpointed step (see the module docs).
///
/// # Errors
/// [`Error::Strategy`] when the loss is not finite and no loss scaling is active.
pub fn checkpointed_step(
    req: StepRequest<'_>,
    segments: &[std::ops::Range<usize>],
) -> Result<StepOutcome> {
    let model = req.model;
    let ctx = req.batch.forward_ctx();
    // Pass 1: no graph, keep each segment's input.
    let dt = req.compute_dtype;
    // Every graph gets its own compute view (mixed precision): a view's casts are consumed by
    // the backward pass that uses them.
    let frozen = model.clone().no_grad().compute_view(dt);
    let mut inputs = Vec::with_capacity(segments.len());
    let mut x = Activation::from(req.batch.x.clone().to_dtype(model.input_dtype(dt)).detach());
    for (s, range) in segments.iter().enumerate() {
        inputs.push(x.clone());
        if s + 1 < segments.len() {
            x = frozen
                .forward_range_seeded(range.clone(), x, &ctx, req.rng_seed)
                .detach();
        }
    }
    drop(frozen);
    // The last segment with a graph, through the loss.
    let last = segments.len() - 1;
    let xin = inputs.pop().expect("at least one segment").require_grad();
    let logits = model
        .compute_view(dt)
        .forward_range_seeded(segments[last].clone(), xin.clone(), &ctx, req.rng_seed)
        .into_flat();
    let logits = to_dtype(logits, Some(DType::F32));
    let (loss, ce) = req.loss.loss(model, logits, &req.batch);
    let (value, sample_losses, scaled) =
        crate::standard::read_loss(loss, ce, req.loss_scale, CheckpointParams::NAME)?;
    let grads = scaled.backward();
    let mut upstream = if last > 0 { xin.grad(&grads) } else { None };
    let mut acc = HashMap::new();
    add_grads(&mut acc, model, &GradientsParams::from_grads(grads, model));
    // Earlier segments in reverse: recompute with a graph, backpropagate the upstream gradient.
    for s in (0..last).rev() {
        let g = upstream.take().ok_or_else(|| Error::Strategy {
            strategy: CheckpointParams::NAME.into(),
            message: format!("segment {} produced no input gradient", s + 1),
        })?;
        let xin = inputs.pop().expect("one input per segment").require_grad();
        // A replay of pass 1: same dropout masks (reseeded), no second batch-norm update.
        let replay_ctx = ctx.replayed();
        let y = model.compute_view(dt).forward_range_seeded(
            segments[s].clone(),
            xin.clone(),
            &replay_ctx,
            req.rng_seed,
        );
        let mut dot = y.dot(g);
        // The recomputed segment's load-balancing terms (`moe-lora`'s routers): in the loss,
        // pass 1 gave their value without a graph; their gradient flows here.
        if let Some(b) = model.take_aux_loss() {
            let dt = dot.dtype();
            dot = dot + b.mul_scalar(req.loss_scale).cast(dt);
        }
        if s == 0 && !dot.is_tracked() {
            // The first segment holds nothing that trains and reads data that carries no
            // gradient (token ids into a frozen embedding under `lora`): nothing to collect.
            continue;
        }
        let grads = dot.backward();
        if s > 0 {
            upstream = xin.grad(&grads);
        }
        add_grads(&mut acc, model, &GradientsParams::from_grads(grads, model));
    }
    Ok(StepOutcome {
        loss: value,
        sample_losses,
        grads: unflatten_grads(model, acc.into_iter().collect()),
        skipped: false,
        loss_scale: None,
    })
}

impl MemoryStrategy for Checkpoint {
    fn name(&self) -> &str {
        CheckpointParams::NAME
    }
    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Execution
    }
    fn op_level_checkpointing(&self) -> bool {
        self.op_level
    }
    fn step(&mut self, req: StepRequest<'_>, _next: Next<'_>) -> Result<StepOutcome> {
        let segments = self.segments_for(req.model);
        checkpointed_step(req, &segments)
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let p: CheckpointParams = src.parse()?;
    Ok(Box::new(Checkpoint {
        interval: p.interval,
        op_level: p.op_level,
    }))
}

engram_core::component!(memory "checkpoint", "hybrid (segment) gradient checkpointing: keep segment inputs, recompute in backward", CheckpointParams, build);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::mlp::{ActivationKind, build_mlp};
    use engram_core::strategy::LossFn;

    /// Cross-entropy plus a penalty on every parameter, as EWC's gradient mode adds: its
    /// gradient reaches the first segments' parameters through the last backward only.
    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(1e-3);

    /// A 12-16-…-4 GELU MLP of `blocks` blocks with `dropout`, and a batch of 8 rows.
    pub(crate) fn setup(dropout: f64, blocks: usize) -> (Model, Batch) {
        let d = Device::flex().autodiff();
        let mut r = engram_core::rng::stream(5, "init", 0, 0);
        let hidden = vec![16; blocks - 1];
        let m = build_mlp(12, &hidden, 4, ActivationKind::Gelu, dropout, &mut r, &d);
        let x: Vec<f32> = (0..8 * 12)
            .map(|i| ((i * 37 % 19) as f32 - 9.0) / 5.0)
            .collect();
        let y: Vec<i64> = (0..8).map(|i| i % 4).collect();
        let b = Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [8, 12]),
                &d,
            )),
            y: Tensor::<1, Int>::from_data(TensorData::new(y, [8]), &d),
            weights: None,
            logit_mask: None,
            refs: (0..8).map(|i| SampleRef { task: 0, index: i }).collect(),
            new_samples: 8,
        };
        (m, b)
    }

    fn grads(out: &StepOutcome, m: &Model) -> Vec<Vec<f32>> {
        m.flat_grads(&out.grads)
            .into_iter()
            .map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
            .collect()
    }

    /// Asserts that checkpointed steps every 1, 2 and 3 blocks give `m`'s plain-step gradients
    /// on `b` with `loss` (every parameter, within 1e-5 relative), rng seed 11 for both.
    pub(super) fn assert_checkpointed_equals_plain(m: &Model, b: &Batch, loss: &dyn LossFn) {
        let req = || StepRequest {
            model: m,
            batch: b.clone(),
            loss,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: 11,
        };
        let grads = |o: &StepOutcome| -> Vec<Vec<f32>> {
            m.flat_grads(&o.grads)
                .into_iter()
                .map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
                .collect()
        };
        let want = grads(&crate::standard::plain_step(req()).unwrap());
        assert_eq!(want.len(), m.params().len());
        for interval in [1, 2, 3] {
            let got = grads(
                &checkpointed_step(req(), &Checkpoint::new(interval).segments(m.num_blocks()))
                    .unwrap(),
            );
            let err = max_rel_err(&got, &want);
            assert!(err <= 1e-5, "interval {interval}: max relative error {err}");
        }
    }

    pub(super) fn max_rel_err(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .flat_map(|(x, y)| {
                x.iter()
                    .zip(y)
                    .map(|(p, q)| (p - q).abs() / (q.abs().max(1e-3)))
            })
            .fold(0.0, f32::max)
    }

    fn req<'a>(m: &'a Model, b: &Batch, loss: &'a dyn LossFn) -> StepRequest<'a> {
        StepRequest {
            model: m,
            batch: b.clone(),
            loss,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: 99,
        }
    }

    #[test]
    fn checkpointed_gradients_equal_plain_gradients_with_dropout() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        for dropout in [0.0, 0.3] {
            let (m, b) = setup(dropout, 7);
            let plain = crate::standard::plain_step(req(&m, &b, &CE)).unwrap();
            let want = grads(&plain, &m);
            assert_eq!(want.len(), 14, "every parameter has a gradient");
            for interval in [1, 2, 3, 7, 0] {
                let ck = Checkpoint::new(interval);
                let segs = ck.segments(m.num_blocks());
                let out = checkpointed_step(req(&m, &b, &CE), &segs).unwrap();
                let got = grads(&out, &m);
                let err = max_rel_err(&got, &want);
                assert!(
                    err <= 1e-5,
                    "dropout {dropout}, interval {interval}: max relative error {err}"
                );
                assert_eq!(out.loss, plain.loss);
            }
        }
    }

    #[test]
    fn dropout_is_active_in_both_passes() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        // With dropout, the gradients differ from a dropout-free model's: the masks are
        // applied (and identically in the recomputation, by the test above).
        let (m0, b) = setup(0.0, 4);
        let (m1, _) = setup(0.5, 4);
        let g0 = grads(
            &checkpointed_step(req(&m0, &b, &CE), &Checkpoint::new(2).segments(4)).unwrap(),
            &m0,
        );
        let g1 = grads(
            &checkpointed_step(req(&m1, &b, &CE), &Checkpoint::new(2).segments(4)).unwrap(),
            &m1,
        );
        assert!(max_rel_err(&g1, &g0) > 1e-2);
    }

    #[test]
    fn segments_cover_the_blocks() {
        assert_eq!(Checkpoint::new(3).segments(7), vec![0..3, 3..6, 6..7]);
        assert_eq!(Checkpoint::new(0).segments(9), vec![0..3, 3..6, 6..9]);
        assert_eq!(Checkpoint::new(10).segments(4), vec![0..4]);
    }
}

#[cfg(test)]
mod vit_tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::vit::{VitShape, build_vit};

    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(0.0);

    #[test]
    fn vit_with_dropout_checkpointed_gradients_equal_plain() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        d.seed(3);
        let mut r = engram_core::rng::stream(1, "init", 0, 0);
        let shape = VitShape {
            side: 28,
            channels: 1,
            patch: 7,
            dim: 16,
            depth: 4,
            heads: 2,
            mlp_ratio: 2,
            dropout: 0.2,
        };
        let m = build_vit(&shape, 10, &mut r, &d);
        // The attention weights are findable by path (EWC's layered importance).
        assert!(
            m.params()
                .iter()
                .any(|p| p.path == "blocks.1.attention.query.weight")
        );
        let x: Vec<f32> = (0..4 * 784)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
            .collect();
        let b = Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [4, 784]),
                &d,
            )),
            y: Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 3, 5, 7], [4]), &d),
            weights: None,
            logit_mask: None,
            refs: (0..4).map(|i| SampleRef { task: 0, index: i }).collect(),
            new_samples: 4,
        };
        super::tests::assert_checkpointed_equals_plain(&m, &b, &CE);
    }
}

#[cfg(test)]
mod cnn_tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::cnn::{ConvBlock, build_cnn};

    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(1e-3);

    fn model(d: &Device) -> Model {
        d.seed(4);
        let mut r = engram_core::rng::stream(2, "init", 0, 0);
        build_cnn(
            [1, 28, 28],
            &[4, 6],
            engram_core::model::cnn::CnnHead::Flatten,
            10,
            &mut r,
            d,
        )
    }

    fn running_mean(m: &Model) -> Vec<f32> {
        m.blocks()[0]
            .downcast_ref::<ConvBlock>()
            .unwrap()
            .norm
            .running_mean
            .value_sync()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    }

    /// Checkpointed gradients equal plain ones through batch norm (training statistics in both
    /// passes), and the running statistics move once per step, as in a plain step.
    #[test]
    fn cnn_with_batch_norm_checkpointed_gradients_and_statistics_equal_plain() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        let x: Vec<f32> = (0..6 * 784)
            .map(|i| ((i * 17 % 31) as f32 - 15.0) / 8.0)
            .collect();
        let b = Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [6, 784]),
                &d,
            )),
            y: Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 2, 4, 6, 8, 1], [6]), &d),
            weights: None,
            logit_mask: None,
            refs: (0..6).map(|i| SampleRef { task: 0, index: i }).collect(),
            new_samples: 6,
        };
        let grads = |m: &Model, o: &StepOutcome| -> Vec<Vec<f32>> {
            m.flat_grads(&o.grads)
                .into_iter()
                .map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
                .collect()
        };
        fn req<'a>(m: &'a Model, b: &Batch) -> StepRequest<'a> {
            StepRequest {
                model: m,
                batch: b.clone(),
                loss: &CE,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed: 5,
            }
        }
        let plain_model = model(&d);
        let before = running_mean(&plain_model);
        let plain = crate::standard::plain_step(req(&plain_model, &b)).unwrap();
        let want = grads(&plain_model, &plain);
        let after_plain = running_mean(&plain_model);
        assert_ne!(
            before, after_plain,
            "a training step moves the running mean"
        );
        assert_eq!(
            want.len(),
            2 * 4 + 2,
            "conv weight and bias, gamma, beta per block; head"
        );
        for interval in [1, 2] {
            let m = model(&d);
            assert_eq!(running_mean(&m), before);
            let out = checkpointed_step(
                req(&m, &b),
                &Checkpoint::new(interval).segments(m.num_blocks()),
            )
            .unwrap();
            let err = super::tests::max_rel_err(&grads(&m, &out), &want);
            assert!(err <= 1e-5, "interval {interval}: max relative error {err}");
            let moved = running_mean(&m);
            let diff = moved
                .iter()
                .zip(&after_plain)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                diff <= 1e-6,
                "interval {interval}: running mean off by {diff} (updated twice?)"
            );
        }
    }

    #[test]
    fn interval_zero_takes_the_models_default_segment() {
        // Building the CNN draws from Burn's process-global RNG.
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex();
        let mut r = engram_core::rng::stream(0, "init", 0, 0);
        let cnn = engram_core::model::cnn::build_cnn(
            [1, 8, 8],
            &[2, 2],
            engram_core::model::cnn::CnnHead::Flatten,
            3,
            &mut r,
            &d,
        );
        let mlp = engram_core::model::mlp::build_mlp(
            4,
            &[3, 3, 3, 3, 3, 3, 3],
            2,
            engram_core::model::mlp::ActivationKind::Relu,
            0.0,
            &mut r,
            &d,
        );
        assert_eq!(Checkpoint::new(0).segments_for(&cnn), vec![0..2, 2..3]);
        assert_eq!(
            Checkpoint::new(1).segments_for(&cnn),
            vec![0..1, 1..2, 2..3]
        );
        // 8 blocks and no default of its own: round(√8) = 3.
        assert_eq!(
            Checkpoint::new(0).segments_for(&mlp),
            vec![0..3, 3..6, 6..8]
        );
    }
}

#[cfg(test)]
mod op_level_tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::mlp::{ActivationKind, build_mlp};

    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(1e-3);

    /// On a device with Burn's op-level (Balanced) checkpointing, plain and segment-checkpointed
    /// steps give the default device's gradients: the strategies compose, and nothing mixes
    /// checkpointing strategies (which would panic).
    #[test]
    fn op_level_checkpointing_keeps_the_gradients() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let run = |d: &Device, segmented: bool| -> Vec<Vec<f32>> {
            let mut r = engram_core::rng::stream(9, "init", 0, 0);
            let m = build_mlp(12, &[16, 16, 16], 4, ActivationKind::Gelu, 0.0, &mut r, d);
            let x: Vec<f32> = (0..8 * 12)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0)
                .collect();
            let b = Batch {
                x: engram_core::data::input::Input::Float(Tensor::from_data(
                    TensorData::new(x, [8, 12]),
                    d,
                )),
                y: Tensor::<1, Int>::from_data(
                    TensorData::new((0..8).map(|i| i % 4).collect::<Vec<i64>>(), [8]),
                    d,
                ),
                weights: None,
                logit_mask: None,
                refs: (0..8).map(|i| SampleRef { task: 0, index: i }).collect(),
                new_samples: 8,
            };
            let req = StepRequest {
                model: &m,
                batch: b,
                loss: &CE,
                loss_scale: 1.0,
                compute_dtype: None,
                rng_seed: 3,
            };
            let out = if segmented {
                checkpointed_step(req, &Checkpoint::new(2).segments(m.num_blocks())).unwrap()
            } else {
                crate::standard::plain_step(req).unwrap()
            };
            m.flat_grads(&out.grads)
                .into_iter()
                .map(|(_, g)| g.into_data().try_to_vec::<f32>().unwrap())
                .collect()
        };
        let plain = Device::flex().autodiff();
        let balanced = Device::flex().autodiff().gradient_checkpointing();
        let want = run(&plain, false);
        for segmented in [false, true] {
            let got = run(&balanced, segmented);
            let err = super::tests::max_rel_err(&got, &want);
            assert!(
                err <= 1e-5,
                "segmented {segmented}: max relative error {err}"
            );
        }
    }
}

#[cfg(test)]
mod bert_tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::bert::{BertShape, Pooling, build_bert};

    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(0.0);

    /// The attention mask travels through segment boundaries (`Activation::Tokens`): with
    /// dropout on and padded sequences, checkpointed gradients equal a plain step's.
    #[test]
    fn bert_with_padding_checkpointed_gradients_equal_plain() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        d.seed(3);
        let mut r = engram_core::rng::stream(1, "init", 0, 0);
        let shape = BertShape {
            layers: 3,
            hidden: 16,
            heads: 2,
            ffn: 32,
            vocab: 30,
            max_position: 8,
            type_vocab: 2,
            layer_norm_eps: 1e-12,
            dropout: 0.2,
            pad_id: 0,
            pooling: Pooling::Mean,
        };
        let m = build_bert(&shape, 4, &mut r, &d);
        // Rows of lengths 8, 5, 2 and 6, padded with 0.
        let lens = [8usize, 5, 2, 6];
        let x: Vec<f32> = (0..32)
            .map(|i| {
                let (row, t) = (i / 8, i % 8);
                if t < lens[row] {
                    (1 + (i * 7) % 29) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let b = Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [4, 8]),
                &d,
            )),
            y: Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 3], [4]), &d),
            weights: None,
            logit_mask: None,
            refs: (0..4).map(|i| SampleRef { task: 0, index: i }).collect(),
            new_samples: 4,
        };
        super::tests::assert_checkpointed_equals_plain(&m, &b, &CE);
    }
}

#[cfg(test)]
mod llama_tests {
    use super::*;
    use engram_core::burn::tensor::{Device, Int, TensorData};
    use engram_core::data::stream::{Batch, SampleRef};
    use engram_core::model::llama::{LlamaShape, build_llama};

    const CE: crate::test_util::CeL2 = crate::test_util::CeL2(0.0);

    /// A tied Llama (one block per decoder layer, the head sharing the embedding parameter)
    /// under segment checkpointing: the tied parameter's gradient, summed over the segments that
    /// use it, and every other gradient equal a plain step's.
    #[test]
    fn tied_llama_checkpointed_gradients_equal_plain() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        let mut r = engram_core::rng::stream(2, "init", 0, 0);
        let shape = LlamaShape {
            layers: 3,
            hidden: 16,
            heads: 4,
            kv_heads: 2,
            ffn: 24,
            vocab: 12,
            rope_base: 1e4,
            rms_eps: 1e-5,
            tied: true,
        };
        let m = build_llama(&shape, &mut r, &d);
        assert_eq!(m.num_blocks(), 5);
        let x: Vec<f32> = (0..24).map(|i| ((i * 5 + 1) % 12) as f32).collect();
        // The loss reads the flattened per-token logits [4, 6 · 12] as one row each.
        let b = Batch {
            x: Tensor::<2>::from_data(TensorData::new(x, [4, 6]), &d).into(),
            y: Tensor::<1, Int>::from_data(TensorData::new(vec![3i64, 20, 41, 70], [4]), &d),
            weights: None,
            logit_mask: None,
            refs: (0..4).map(|i| SampleRef { task: 0, index: i }).collect(),
            new_samples: 4,
        };
        super::tests::assert_checkpointed_equals_plain(&m, &b, &CE);
    }
}
