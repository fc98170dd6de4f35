//! Mixing memory rows into a batch: the two modes (`ratio`, `every`), how many rows a step
//! gets, and the row weights of the mixed batch (`every`'s weighted mean, or the
//! class-balanced loss).

use super::{Balance, Replay, ReplayParams};
use engram_core::burn::tensor::{Tensor, TensorData};
use engram_core::strategy::BatchContext;
use engram_core::{Error, Result};

/// How memory rows are mixed in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mixing {
    /// `round(ratio × batch)` memory rows added to every batch.
    Ratio(f64),
    /// As many memory rows as new ones every `k`-th batch, weighing `weight` in the loss.
    Every { k: usize, weight: f64 },
}

impl Mixing {
    /// The mode `p` asks for; `err(key, message, hint)` builds the error of a bad key.
    ///
    /// # Errors
    /// When `ratio` and `every` are both set, `every` is 0, `weight` is set without `every`,
    /// or `ratio` is outside `[0, 10]`.
    pub(super) fn of(
        p: &ReplayParams,
        err: impl Fn(&str, String, Option<String>) -> Error,
    ) -> Result<Self> {
        Ok(match (p.ratio, p.every) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "every",
                    "replay: `ratio` and `every` are exclusive mixing modes".into(),
                    Some(
                        "keep `ratio` (memory rows added to every batch) or `every` + `weight`"
                            .into(),
                    ),
                ));
            }
            (None, Some(0)) => {
                return Err(err("every", "replay: `every` must be ≥ 1".into(), None));
            }
            (None, Some(k)) => Mixing::Every {
                k,
                weight: p.weight.unwrap_or(0.3),
            },
            (r, None) => {
                if p.weight.is_some() {
                    return Err(err(
                        "weight",
                        "replay: `weight` applies to the `every` mode only".into(),
                        Some("add `every = 10` or remove `weight`".into()),
                    ));
                }
                let r = r.unwrap_or(0.2);
                if !(0.0..=10.0).contains(&r) {
                    return Err(err(
                        "ratio",
                        format!("replay: ratio {r} must be in [0, 10]"),
                        None,
                    ));
                }
                Mixing::Ratio(r)
            }
        })
    }
}

impl Replay {
    /// The memory rows of a step with `n` new rows and their loss weight (`every` mode), or
    /// `None` when the step takes none.
    pub(super) fn memory_rows(
        &self,
        n: usize,
        cx: &BatchContext<'_>,
    ) -> Option<(usize, Option<f64>)> {
        let (m, weight) = match self.mixing {
            Mixing::Ratio(r) => {
                let r = (cx.controls.replay_ratio.unwrap_or(r) + cx.controls.replay_delta).max(0.0);
                ((r * n as f64).round() as usize, None)
            }
            Mixing::Every { k, weight } => {
                if !(cx.position.step_in_task + 1).is_multiple_of(k) {
                    return None;
                }
                (n, Some(weight))
            }
        };
        (m > 0).then_some((m, weight))
    }

    /// The row weights of the mixed batch (`n` new rows of classes `new_classes`, then the
    /// `m` memory rows just drawn): `every` mode's `1/n` per new row and `weight/m` per memory
    /// row, or with `balance = "class"` the class-balanced weights, moving in from the plain
    /// mean over `balance_warmup` of the task; `None` (the batch's own) otherwise.
    pub(super) fn row_weights(
        &self,
        (n, m): (usize, usize),
        weight: Option<f64>,
        new_classes: Vec<i64>,
        cx: &BatchContext<'_>,
    ) -> Option<Tensor<1>> {
        if let Some(w) = weight {
            let mut v = vec![1.0 / n as f32; n];
            v.extend(std::iter::repeat_n(w as f32 / m as f32, m));
            return Some(Tensor::from_data(TensorData::new(v, [n + m]), cx.device));
        }
        if self.p.balance != Balance::Class {
            return None;
        }
        let mut classes = new_classes;
        classes.extend(
            self.drawn
                .iter()
                .map(|&(t, i)| i64::from(self.buffers[t][i].class)),
        );
        let mut counts = [0usize; 256];
        for &c in &classes {
            counts[c as usize] += 1;
        }
        let distinct = counts.iter().filter(|&&c| c > 0).count() as f32;
        let span = self.p.balance_warmup * cx.position.steps_per_task as f64;
        let alpha = if span > 0.0 {
            (cx.position.step_in_task as f64 / span).min(1.0) as f32
        } else {
            1.0
        };
        let plain = 1.0 / classes.len() as f32;
        let v: Vec<f32> = classes
            .iter()
            .map(|&c| (1.0 - alpha) * plain + alpha / (distinct * counts[c as usize] as f32))
            .collect();
        Some(Tensor::from_data(TensorData::new(v, [n + m]), cx.device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::tests::{replay, slots};
    use crate::test_util::toy_stream;
    use engram_core::burn::tensor::Device;
    use engram_core::data::stream::{Part, SampleRef};
    use engram_core::strategy::{ForgettingStrategy, Position, StepContext};

    #[test]
    fn mixing_sampling_priorities_and_state() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut r = replay(ReplayParams {
            ratio: Some(0.5),
            capacity: 20,
            min_per_task: 2,
            priority: true,
            ..ReplayParams::default()
        });
        let position = Position {
            task: 1,
            global_step: 7,
            ..Position::default()
        };
        let controls = crate::test_util::controls();
        let cx = crate::test_util::batch_cx(&position, &controls, &stream, &device);
        let refs: Vec<SampleRef> = stream.epoch_order(1, 0, 0)[..8].to_vec();
        // Empty memory on the first task: the batch is unchanged.
        let b = r
            .prepare_batch(stream.batch(&refs, Part::Train, 1, &device), &cx)
            .unwrap();
        assert_eq!(b.len(), 8);
        // A memory much larger than the batch: only ratio × batch rows are drawn.
        r.add_task(0, slots(0, 60, &[0, 1]), 1.0, 0);
        assert_eq!(r.len(), 20);
        let b = r
            .prepare_batch(stream.batch(&refs, Part::Train, 1, &device), &cx)
            .unwrap();
        assert_eq!((b.len(), b.new_samples), (12, 8));
        assert!(b.refs[8..].iter().all(|s| s.task == 0));
        // Deterministic under the seed.
        let drawn = r.drawn.clone();
        r.prepare_batch(stream.batch(&refs, Part::Train, 1, &device), &cx)
            .unwrap();
        assert_eq!(drawn, r.drawn);
        // Priorities follow the replayed rows' losses.
        let before: Vec<f32> = drawn
            .iter()
            .map(|&(t, i)| r.buffers[t][i].priority)
            .collect();
        let losses: Vec<f32> = (0..12).map(|i| if i < 8 { 0.0 } else { 5.0 }).collect();
        let mut rng = engram_core::rng::stream(0, "init", 0, 0);
        let model = engram_core::model::mlp::build_mlp(
            4,
            &[],
            2,
            engram_core::model::mlp::ActivationKind::Relu,
            0.0,
            &mut rng,
            &Device::flex(),
        );
        let step = StepContext {
            position: &position,
            batch: &b,
            sample_losses: Some(&losses),
            loss: 1.0,
            model: &model,
            grads: None,
        };
        r.after_step(&step).unwrap();
        let after: Vec<f32> = drawn
            .iter()
            .map(|&(t, i)| r.buffers[t][i].priority)
            .collect();
        assert!(
            after.iter().zip(&before).all(|(a, b)| a > b),
            "{before:?} -> {after:?}"
        );
        // State round-trip.
        let st = r.state().unwrap();
        let mut back = replay(ReplayParams::default());
        back.load_state(st.clone(), &device).unwrap();
        assert_eq!(back.buffers, r.buffers);
        assert_eq!(back.state().unwrap(), st);
    }

    #[test]
    fn every_mode_replays_every_kth_batch_weighted() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let controls = crate::test_util::controls();
        let refs: Vec<SampleRef> = stream.epoch_order(1, 0, 0)[..8].to_vec();
        // `every` mode: memory rows only every k-th batch, weighted.
        let mut e = replay(ReplayParams {
            every: Some(3),
            weight: Some(0.3),
            ..ReplayParams::default()
        });
        e.add_task(0, slots(0, 60, &[0, 1]), 1.0, 0);
        let mut sizes = Vec::new();
        for s in 0..6 {
            let pos = Position {
                task: 1,
                step_in_task: s,
                global_step: s,
                ..Position::default()
            };
            let cx = BatchContext {
                position: &pos,
                controls: &controls,
                stream: &stream,
                device: &device,
                seed: 0,
            };
            let b = e
                .prepare_batch(stream.batch(&refs, Part::Train, 1, &device), &cx)
                .unwrap();
            if b.len() > 8 {
                let w = b
                    .weights
                    .clone()
                    .unwrap()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap();
                let (new, mem): (f32, f32) = (w[..8].iter().sum(), w[8..].iter().sum());
                assert!((new - 1.0).abs() < 1e-6 && (mem - 0.3).abs() < 1e-6);
            }
            sizes.push(b.len());
        }
        assert_eq!(sizes, vec![8, 8, 16, 8, 8, 16]);
    }
}
