//! `er-ace`: experience replay with the asymmetric cross-entropy (ER-ACE; Caccia et al. 2022,
//! "New Insights on Reducing Abrupt Representation Change in Online Continual Learning",
//! §4, eq. 4).
//!
//! Each step trains on the incoming batch `B_n` (`n` rows) and a batch `B_m` of
//! `m = round(ratio · n)` rows drawn uniformly from a reservoir memory ([`crate::reservoir`])
//! of `capacity` samples:
//!
//! ```text
//! L = mean_{(x,y)∈B_n} CE(z(x) restricted to C_n, y)  +  mean_{(x,y)∈B_m} CE(z(x), y)
//! ```
//!
//! where `C_n` is the set of classes present in the incoming batch: the incoming rows push
//! their classes only against each other, never against the memory's classes, so that the
//! old classes' representations are not pushed away at every new class (the asymmetry), while
//! the memory rows see every class. After the step, the incoming rows are offered to the
//! memory (reservoir sampling over the whole stream). The memory rows follow the batch's logit
//! mask (`mask_logits`, task-incremental streams) like any row; the `replay_ratio` scheduler
//! and the anomaly handler's extra replay set `ratio` as they do `replay`'s.
//!
//! Use it as the only forgetting strategy that mixes rows: it sets the batch's row weights
//! (incoming rows 0, their loss is the penalty; memory rows `1/m`). The loss is two means, so
//! its gradient is about twice one batch's: on Split-FMNIST at the examples' lr 0.05 with
//! momentum 0.9 it diverged in the first task, and `[train] clip_norm = 1.0` keeps it stable.

use engram_core::burn::tensor::{Tensor, TensorData, activation};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, Part, SampleRef};
use engram_core::registry::BuildContext;
use engram_core::strategy::{BatchContext, ForgettingStrategy, StepContext, StrategyState};
use engram_core::{Result, rng};
use serde::{Deserialize, Serialize};

use crate::reservoir::{self, Reservoir};

/// `[[forgetting]] type = "er-ace"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ErAceParams {
    /// Memory size in samples (the reservoir), ≥ 1. Default 500.
    pub capacity: usize,
    /// Memory rows per incoming row, > 0. Default 1 (the paper's equal-size batches).
    pub ratio: f64,
}

impl Default for ErAceParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            ratio: 1.0,
        }
    }
}

/// The ER-ACE strategy.
pub struct ErAce {
    p: ErAceParams,
    memory: Reservoir,
    /// The run seed, from the last batch's context (the offers' random stream).
    seed: u64,
}

impl ErAce {
    /// A strategy with an empty memory.
    ///
    /// # Errors
    /// [`engram_core::Error::Config`] (positioned at the key, when `src` is given) for a
    /// capacity of 0 or a ratio that is not > 0.
    pub fn new(p: ErAceParams, src: Option<&ParamSource>) -> Result<Self> {
        reservoir::require(
            src,
            ErAceParams::NAME,
            p.capacity >= 1,
            "capacity",
            "must be ≥ 1",
        )?;
        reservoir::require(
            src,
            ErAceParams::NAME,
            p.ratio > 0.0,
            "ratio",
            "must be > 0",
        )?;
        Ok(Self {
            memory: Reservoir::new(p.capacity),
            p,
            seed: 0,
        })
    }
}

/// The asymmetric part of ER-ACE: mean cross-entropy of the first `n` rows of `logits`
/// `[rows, classes]` against `y` `[n]`, each row's logits restricted to the classes present in
/// `y` (an additive −1e9 elsewhere) and to `mask` `[n, classes]` when given. `[1]`.
pub fn asymmetric_ce(logits: Tensor<2>, y: &[i64], mask: Option<Tensor<2>>) -> Tensor<1> {
    let n = y.len();
    let c = logits.dims()[1];
    let device = logits.device();
    let mut present = vec![false; c];
    for &k in y {
        if let Some(p) = present.get_mut(k as usize) {
            *p = true;
        }
    }
    let row: Vec<f32> = present
        .iter()
        .map(|&p| if p { 0.0 } else { -1e9 })
        .collect();
    let restrict = Tensor::<2>::from_data(TensorData::new(row.repeat(n), [n, c]), &device);
    let mut z = logits.slice([0..n, 0..c]) + restrict;
    if let Some(m) = mask {
        z = z + m;
    }
    let labels = Tensor::from_data(TensorData::new(y.to_vec(), [n, 1]), &device);
    activation::log_softmax(z, 1)
        .gather(1, labels)
        .reshape([n])
        .neg()
        .mean()
}

impl ForgettingStrategy for ErAce {
    fn name(&self) -> &str {
        ErAceParams::NAME
    }

    fn stored_samples(
        &self,
        stream: &engram_core::data::stream::Stream,
    ) -> Option<engram_core::strategy::StoredSamples> {
        Some(self.memory.stored_samples(stream))
    }

    fn prepare_batch(&mut self, batch: Batch, cx: &BatchContext<'_>) -> Result<Batch> {
        self.seed = cx.seed;
        let n = batch.len();
        let ratio =
            (cx.controls.replay_ratio.unwrap_or(self.p.ratio) + cx.controls.replay_delta).max(0.0);
        let m = (ratio * n as f64).round() as usize;
        let mut r = rng::stream(
            cx.seed,
            "er-ace-draw",
            cx.position.task as u64,
            cx.position.global_step as u64,
        );
        let drawn = self.memory.draw(m, &mut r);
        let mut out = if drawn.is_empty() {
            batch
        } else {
            let refs: Vec<SampleRef> = drawn.iter().map(|&i| self.memory.slots[i].r).collect();
            let memory = cx
                .stream
                .batch(&refs, Part::Train, cx.position.task, cx.device);
            batch.concat(memory)
        };
        let m = drawn.len();
        let mut w = vec![0.0f32; n];
        w.extend(std::iter::repeat_n(1.0 / m.max(1) as f32, m));
        out.weights = Some(Tensor::from_data(TensorData::new(w, [n + m]), cx.device));
        Ok(out)
    }

    fn logit_penalty(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        let n = batch.new_samples.min(logits.dims()[0]);
        if n == 0 {
            return None;
        }
        let y = batch.labels();
        let c = logits.dims()[1];
        let mask = batch
            .logit_mask
            .as_ref()
            .map(|m| m.clone().slice([0..n, 0..c]));
        Some(asymmetric_ce(logits.clone(), &y[..n], mask))
    }

    fn divergence_hint(&self) -> Option<String> {
        Some("er-ace's loss is two means (incoming rows, memory rows), about twice one batch's gradient: halve `[optimizer] lr` or set `[train] clip_norm` (1.0 kept Split-FMNIST at lr 0.05, momentum 0.9, from diverging)".into())
    }

    fn after_step(&mut self, cx: &StepContext<'_>) -> Result<()> {
        let mut r = rng::stream(
            self.seed,
            "er-ace-offer",
            cx.position.task as u64,
            cx.position.global_step as u64,
        );
        reservoir::offer_new_rows(&mut self.memory, cx.batch, &mut r);
        Ok(())
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(self.memory.to_state())
    }

    fn load_state(
        &mut self,
        state: StrategyState,
        _device: &engram_core::burn::tensor::Device,
    ) -> Result<()> {
        self.memory = Reservoir::from_state(ErAceParams::NAME, &state)?;
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: ErAceParams = src.parse()?;
    Ok(Box::new(ErAce::new(p, Some(src))?))
}

engram_core::component!(forgetting "er-ace", "ER-ACE (Caccia et al. 2022): reservoir replay, incoming rows' cross-entropy restricted to their batch's classes", ErAceParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::toy_stream;
    use engram_core::burn::tensor::Device;
    use engram_core::strategy::{LossFn, Position};
    use engram_core::train::trainer::TrainLoss;

    /// `-ln softmax(z)[y]` over the classes `keep`, in f64.
    fn ce(z: &[f64], y: usize, keep: &[usize]) -> f64 {
        let s: f64 = keep.iter().map(|&k| z[k].exp()).sum();
        -(z[y].exp() / s).ln()
    }

    #[test]
    fn the_loss_is_the_asymmetric_ce_of_the_incoming_rows_plus_the_memory_rows_ce() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut s = ErAce::new(
            ErAceParams {
                capacity: 4,
                ratio: 1.0,
            },
            None,
        )
        .unwrap();
        // The memory holds four task-0 samples (classes 0 and 1).
        let refs0: Vec<SampleRef> = stream.epoch_order(0, 0, 0)[..4].to_vec();
        let b0 = stream.batch(&refs0, Part::Train, 0, &device);
        let position = Position {
            task: 1,
            global_step: 3,
            ..Position::default()
        };
        let step = StepContext {
            position: &position,
            batch: &b0,
            sample_losses: None,
            loss: 0.0,
            model: &crate::test_util::toy_model(&device),
            grads: None,
        };
        s.after_step(&step).unwrap();
        assert_eq!(s.memory.len(), 4);
        // Two incoming task-1 rows: m = 2 memory rows join them.
        let controls = crate::test_util::controls();
        let cx = crate::test_util::batch_cx(&position, &controls, &stream, &device);
        let refs1: Vec<SampleRef> = stream.epoch_order(1, 0, 0)[..2].to_vec();
        let b = s
            .prepare_batch(stream.batch(&refs1, Part::Train, 1, &device), &cx)
            .unwrap();
        assert_eq!((b.len(), b.new_samples), (4, 2));
        let y: Vec<usize> = b.labels().iter().map(|&v| v as usize).collect();
        assert!(y[..2].iter().all(|&c| c == 2 || c == 3), "{y:?}");
        assert!(y[2..].iter().all(|&c| c < 2), "{y:?}");
        // Logits chosen by hand, 10 classes.
        let z: Vec<Vec<f64>> = (0..4)
            .map(|i| {
                (0..10)
                    .map(|k| ((i * 7 + k * 3) % 5) as f64 - 2.0)
                    .collect()
            })
            .collect();
        let flat: Vec<f32> = z.iter().flatten().map(|&v| v as f32).collect();
        let logits = Tensor::<2>::from_data(TensorData::new(flat, [4, 10]), &device);
        let mut present: Vec<usize> = y[..2].to_vec();
        present.sort();
        present.dedup();
        let all: Vec<usize> = (0..10).collect();
        let want = (ce(&z[0], y[0], &present) + ce(&z[1], y[1], &present)) / 2.0
            + (ce(&z[2], y[2], &all) + ce(&z[3], y[3], &all)) / 2.0;
        let strategies: Vec<Box<dyn ForgettingStrategy>> = vec![Box::new(s)];
        let loss = TrainLoss {
            forgetting: &strategies,
            cx: &cx,
            objective: Default::default(),
        };
        let model = crate::test_util::toy_model(&device);
        let got = f64::from(loss.loss(&model, logits, &b).0.into_scalar::<f32>());
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn the_restriction_ignores_the_other_classes_and_the_memory_survives_a_checkpoint() {
        // Incoming labels {0, 1}: class 2's logit (50) is not in the softmax.
        let device = Device::flex();
        let z = Tensor::<2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 50.0, 0.0, 0.0, 50.0], [2, 3]),
            &device,
        );
        let got = f64::from(asymmetric_ce(z, &[0, 1], None).into_scalar::<f32>());
        let want = (ce(&[1.0, 2.0, 50.0], 0, &[0, 1]) + ce(&[0.0, 0.0, 50.0], 1, &[0, 1])) / 2.0;
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        let mut s = ErAce::new(ErAceParams::default(), None).unwrap();
        let mut r = rng::stream(0, "t", 0, 0);
        for i in 0..3 {
            s.memory.offer(
                reservoir::Stored {
                    r: SampleRef { task: 0, index: i },
                    class: 1,
                    logits: Vec::new(),
                },
                &mut r,
            );
        }
        let mut back = ErAce::new(ErAceParams::default(), None).unwrap();
        back.load_state(s.state().unwrap(), &device).unwrap();
        assert_eq!(back.memory, s.memory);
        assert!(
            ErAce::new(
                ErAceParams {
                    capacity: 0,
                    ..ErAceParams::default()
                },
                None
            )
            .is_err()
        );
        assert!(
            ErAce::new(
                ErAceParams {
                    ratio: 0.0,
                    ..ErAceParams::default()
                },
                None
            )
            .is_err()
        );
    }
}
