//! `gdumb`: greedy sampler and dumb learner (GDumb; Prabhu et al. 2020, "GDumb: A Simple
//! Approach that Questions Our Progress in Continual Learning", §3, Algorithm 1).
//!
//! GDumb keeps a class-balanced memory of `capacity` samples and, whenever it is evaluated,
//! trains a model **from its initial weights on the memory alone**. The sampler (Algorithm 1):
//! a sample is stored while the memory has room; once it is full, a sample of class `y` is
//! stored only when `y` holds fewer than `capacity / |classes seen|` slots, and then a random
//! sample of the largest class makes room. Here the samples of each task are offered to the
//! sampler when the task ends, in a seeded random order (the stream's order, for a learner that
//! never trains on the stream), then the model is reset to the weights the run started from
//! and trained for `epochs` passes over the memory with SGD (momentum 0.9) at batch
//! `batch_size`, the learning rate annealed from `lr` to `lr / 100` by a cosine (the paper's
//! SGDR range, without restarts or cutmix), gradients clipped to a global norm of `clip_norm`. That model is what each task is evaluated with; the
//! trainer's own steps on the stream are discarded at every task's end, so GDumb is a baseline
//! that asks how much a method gains over its memory alone.

use engram_core::burn::optim::GradientsParams;
use engram_core::burn::tensor::Tensor;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::Model;
use engram_core::registry::BuildContext;
use engram_core::strategy::{ForgettingStrategy, StateTensor, StrategyState, TaskContext};
use engram_core::train::trainer::{clip_global_norm, per_sample_cross_entropy};
use engram_core::{Error, Result, rng};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::reservoir::{self, Stored};

/// `[[forgetting]] type = "gdumb"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GdumbParams {
    /// Memory size in samples, ≥ 1. Default 500.
    pub capacity: usize,
    /// Passes over the memory at each task's end, ≥ 1. Default 10.
    pub epochs: usize,
    /// Batch size of that training, ≥ 1. Default 16 (the paper's).
    pub batch_size: usize,
    /// Initial learning rate, > 0 (annealed to `lr / 100`). Default 0.05 (the paper's).
    pub lr: f64,
    /// Global gradient-norm clipping of that training, > 0. Default 10 (the authors' code's
    /// default; without it the first task diverged at lr 0.05 on Split-FMNIST).
    pub clip_norm: f64,
}

impl Default for GdumbParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            epochs: 10,
            batch_size: 16,
            lr: 0.05,
            clip_norm: 10.0,
        }
    }
}

/// The GDumb strategy.
pub struct Gdumb {
    p: GdumbParams,
    /// The class-balanced memory.
    memory: Vec<Stored>,
    /// The weights the run started from, by parameter path (`[numel]` each).
    init: BTreeMap<String, StateTensor>,
}

/// GDumb's greedy class-balanced sampler (Algorithm 1): offers `item` to `memory` of at most
/// `capacity` samples; returns whether it was stored.
pub fn offer(memory: &mut Vec<Stored>, capacity: usize, item: Stored, r: &mut rng::Rng) -> bool {
    if memory.len() < capacity {
        memory.push(item);
        return true;
    }
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for s in memory.iter() {
        *counts.entry(s.class).or_default() += 1;
    }
    let classes = counts.len() + usize::from(!counts.contains_key(&item.class));
    let mine = counts.get(&item.class).copied().unwrap_or(0);
    if capacity == 0 || mine >= capacity / classes {
        return false;
    }
    // The largest class (the smallest label among ties) gives up a random sample.
    let (&largest, _) = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .expect("a full memory has classes");
    let slots: Vec<usize> = (0..memory.len())
        .filter(|&i| memory[i].class == largest)
        .collect();
    let k = slots[r.random_range(0..slots.len())];
    memory[k] = item;
    true
}

impl Gdumb {
    /// A strategy with an empty memory.
    ///
    /// # Errors
    /// [`engram_core::Error::Config`] (positioned at the key, when `src` is given) for a
    /// capacity, epoch count or batch size of 0, or a learning rate that is not > 0.
    pub fn new(p: GdumbParams, src: Option<&ParamSource>) -> Result<Self> {
        reservoir::require(
            src,
            GdumbParams::NAME,
            p.capacity >= 1,
            "capacity",
            "must be ≥ 1",
        )?;
        reservoir::require(
            src,
            GdumbParams::NAME,
            p.epochs >= 1,
            "epochs",
            "must be ≥ 1",
        )?;
        reservoir::require(
            src,
            GdumbParams::NAME,
            p.batch_size >= 1,
            "batch_size",
            "must be ≥ 1",
        )?;
        reservoir::require(src, GdumbParams::NAME, p.lr > 0.0, "lr", "must be > 0")?;
        reservoir::require(
            src,
            GdumbParams::NAME,
            p.clip_norm > 0.0,
            "clip_norm",
            "must be > 0",
        )?;
        Ok(Self {
            p,
            memory: Vec::new(),
            init: BTreeMap::new(),
        })
    }

    /// `model` with the weights the run started from.
    fn reset(&self, model: Model) -> Model {
        model.update_params(&mut |info, v| {
            self.init
                .get(&info.path)
                .map(|t| t.to_tensor::<1>(&v.device()))
        })
    }

    /// Trains `model` from its initial weights on the memory (the dumb learner).
    fn learn(&self, model: Model, cx: &TaskContext<'_>) -> Model {
        let mut model = self.reset(model);
        let mut optim = engram_core::train::trainer::sgd(0.9, None);
        let per_epoch = self.memory.len().div_ceil(self.p.batch_size);
        let total = (per_epoch * self.p.epochs).max(1);
        let (hi, lo) = (self.p.lr, self.p.lr / 100.0);
        let mut step = 0usize;
        for epoch in 0..self.p.epochs {
            let mut r = rng::stream(cx.seed, "gdumb-epoch", cx.task.index as u64, epoch as u64);
            let order = rng::permutation(self.memory.len(), &mut r);
            let refs: Vec<SampleRef> = order.iter().map(|&i| self.memory[i].r).collect();
            for chunk in refs.chunks(self.p.batch_size) {
                let b = cx
                    .stream
                    .batch(chunk, Part::Train, cx.task.index, cx.device);
                let logits = model.forward(b.input(), &b.forward_ctx());
                let loss: Tensor<1> = per_sample_cross_entropy(logits, &b).mean();
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                let grads = clip_global_norm(&model, grads, self.p.clip_norm).0;
                let t = step as f64 / total as f64;
                let lr = lo + 0.5 * (hi - lo) * (1.0 + (std::f64::consts::PI * t).cos());
                model = optim.step(lr, model, grads);
                step += 1;
            }
        }
        model
    }
}

impl ForgettingStrategy for Gdumb {
    fn name(&self) -> &str {
        GdumbParams::NAME
    }

    fn stored_samples(
        &self,
        stream: &engram_core::data::stream::Stream,
    ) -> Option<engram_core::strategy::StoredSamples> {
        Some(engram_core::strategy::StoredSamples::of(
            stream,
            self.memory.len(),
            0,
        ))
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        if self.init.is_empty() {
            self.init = cx
                .model
                .param_values()
                .into_iter()
                .map(|(info, t)| (info.path, StateTensor::from_tensor(&t)))
                .collect();
        }
        Ok(())
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let refs = cx.train_refs();
        let mut r = rng::stream(cx.seed, "gdumb-sampler", cx.task.index as u64, 0);
        let labels = &cx.stream.dataset.train.labels;
        for i in rng::permutation(refs.len(), &mut r) {
            let item = Stored {
                r: refs[i],
                class: labels.get(refs[i].index as usize).map_or(0, |&c| c as u16),
                logits: Vec::new(),
            };
            offer(&mut self.memory, self.p.capacity, item, &mut r);
        }
        let model = self.learn(cx.model.clone(), cx);
        *cx.model = model;
        Ok(())
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({ "memory": self.memory }),
            tensors: self.init.clone(),
        })
    }

    fn load_state(
        &mut self,
        state: StrategyState,
        _device: &engram_core::burn::tensor::Device,
    ) -> Result<()> {
        self.memory =
            serde_json::from_value(state.meta["memory"].clone()).map_err(|e| Error::Strategy {
                strategy: GdumbParams::NAME.into(),
                message: format!("saved memory: {e}"),
            })?;
        self.init = state.tensors;
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: GdumbParams = src.parse()?;
    Ok(Box::new(Gdumb::new(p, Some(src))?))
}

engram_core::component!(forgetting "gdumb", "GDumb (Prabhu et al. 2020): a class-balanced memory, and a model trained from its initial weights on that memory alone at each task's end", GdumbParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{task_cx, task_info, toy_model, toy_stream};
    use engram_core::burn::tensor::Device;

    fn item(i: u32, class: u16) -> Stored {
        Stored {
            r: SampleRef { task: 0, index: i },
            class,
            logits: Vec::new(),
        }
    }

    fn counts(m: &[Stored]) -> Vec<usize> {
        let mut c = vec![0; 4];
        for s in m {
            c[s.class as usize] += 1;
        }
        c
    }

    #[test]
    fn the_greedy_sampler_balances_classes_by_hand() {
        let mut m = Vec::new();
        let mut r = rng::stream(0, "t", 0, 0);
        // Six samples of class 0 fill a memory of 6.
        for i in 0..6 {
            assert!(offer(&mut m, 6, item(i, 0), &mut r));
        }
        // Class 1 arrives: 2 classes, 3 slots each; class 1 takes slots from class 0 until 3-3.
        for i in 6..12 {
            offer(&mut m, 6, item(i, 1), &mut r);
        }
        assert_eq!(counts(&m), vec![3, 3, 0, 0]);
        // Class 0 again: it holds its share (3 of 6), so it is refused.
        assert!(!offer(&mut m, 6, item(12, 0), &mut r));
        // Class 2: 6 / 3 = 2 slots each; it takes them from the largest classes.
        for i in 13..20 {
            offer(&mut m, 6, item(i, 2), &mut r);
        }
        assert_eq!(counts(&m), vec![2, 2, 2, 0]);
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn each_task_ends_on_a_model_trained_from_the_initial_weights_on_the_memory() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut model = toy_model(&device);
        let init: Vec<Vec<f32>> = model
            .param_values()
            .into_iter()
            .map(|(_, t)| t.into_data().try_to_vec::<f32>().unwrap())
            .collect();
        let mut s = Gdumb::new(
            GdumbParams {
                capacity: 20,
                epochs: 1,
                batch_size: 4,
                lr: 0.05,
                clip_norm: 10.0,
            },
            None,
        )
        .unwrap();
        let info = task_info(&stream, 0);
        s.before_task(&mut task_cx(&mut model, &device, &info, &stream))
            .unwrap();
        // The model drifts (as the trainer's steps on the stream would move it).
        let drifted = model
            .clone()
            .update_params(&mut |_, v| Some(v.add_scalar(1.0)));
        // Reset: the initial weights, exactly.
        let back: Vec<Vec<f32>> = s
            .reset(drifted.clone())
            .param_values()
            .into_iter()
            .map(|(_, t)| t.into_data().try_to_vec::<f32>().unwrap())
            .collect();
        assert_eq!(back, init);
        // After the task: 20 samples of its two classes, and a model that no longer has the
        // drift (trained from the initial weights: one epoch of 5 small steps stays near them).
        let mut m = drifted;
        s.after_task(&mut task_cx(&mut m, &device, &info, &stream))
            .unwrap();
        assert_eq!(s.memory.len(), 20);
        assert_eq!(counts(&s.memory)[..2], [10, 10]);
        let trained: Vec<f32> = m
            .param_values()
            .into_iter()
            .flat_map(|(_, t)| t.into_data().try_to_vec::<f32>().unwrap())
            .collect();
        let start: Vec<f32> = init.concat();
        let moved = trained
            .iter()
            .zip(&start)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(moved > 0.0 && moved < 0.5, "{moved}");
        // State round-trip.
        let mut copy = Gdumb::new(GdumbParams::default(), None).unwrap();
        copy.load_state(s.state().unwrap(), &device).unwrap();
        assert_eq!(
            (copy.memory.clone(), copy.init.clone()),
            (s.memory.clone(), s.init.clone())
        );
        for p in [
            GdumbParams {
                capacity: 0,
                ..GdumbParams::default()
            },
            GdumbParams {
                epochs: 0,
                ..GdumbParams::default()
            },
            GdumbParams {
                batch_size: 0,
                ..GdumbParams::default()
            },
            GdumbParams {
                lr: 0.0,
                ..GdumbParams::default()
            },
            GdumbParams {
                clip_norm: 0.0,
                ..GdumbParams::default()
            },
        ] {
            assert!(Gdumb::new(p, None).is_err());
        }
    }
}
