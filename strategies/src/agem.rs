//! `agem`: averaged gradient episodic memory (A-GEM; Chaudhry et al. 2019, "Efficient Lifelong
//! Learning with A-GEM", eq. 11).
//!
//! Before each optimiser step, A-GEM computes the reference gradient `g_ref` of the plain
//! cross-entropy on a batch of `memory_batch` samples drawn from the episodic memory, and
//! projects the step's gradient `g` when it would increase that loss:
//!
//! ```text
//! g̃ = g − (gᵀ g_ref / g_refᵀ g_ref) · g_ref    if gᵀ g_ref < 0,    else g̃ = g
//! ```
//!
//! over all parameters at once (one flat vector), through the trainer's
//! [`ForgettingStrategy::adjust_gradients`] hook: `g` is the total loss's gradient as the
//! optimiser would apply it (after clipping), so A-GEM composes with any optimiser, as in the
//! paper's SGD it changes the direction, not the update rule. The episodic memory holds past
//! tasks only: when a task ends its training samples are offered, in a seeded random order, to
//! a reservoir of `capacity` samples ([`crate::reservoir`]), so the memory is a uniform sample
//! of every past task's data (equal shares for tasks of equal size; the paper fills a fixed
//! share per task). The first task trains unprojected.
//!
//! The paper's optimiser is plain SGD. With momentum the velocity keeps the unprojected
//! directions of earlier steps and the constraint no longer holds: on Split-FMNIST (5 × 2,
//! class-incremental, 1 epoch, lr 0.05) ACC was 0.199 with momentum 0.9, as low as naive
//! fine-tuning, and 0.555 with plain SGD. Use `momentum = 0` with it.

use engram_core::burn::optim::GradientsParams;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::{Model, unflatten_grads};
use engram_core::registry::BuildContext;
use engram_core::strategy::{BatchContext, ForgettingStrategy, StrategyState, TaskContext};
use engram_core::train::trainer::per_sample_cross_entropy;
use engram_core::{Result, rng};
use serde::{Deserialize, Serialize};

use crate::reservoir::{self, Reservoir};

/// `[[forgetting]] type = "agem"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgemParams {
    /// Episodic memory size in samples, ≥ 1. Default 500.
    pub capacity: usize,
    /// Samples of the memory batch `g_ref` is computed on, ≥ 1. Default 256.
    pub memory_batch: usize,
}

impl Default for AgemParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            memory_batch: 256,
        }
    }
}

/// The A-GEM strategy.
pub struct Agem {
    p: AgemParams,
    memory: Reservoir,
    /// Steps projected, and steps that had a reference gradient.
    projected: (u64, u64),
}

impl Agem {
    /// A strategy with an empty memory.
    ///
    /// # Errors
    /// [`engram_core::Error::Config`] (positioned at the key, when `src` is given) for a
    /// capacity or memory batch of 0.
    pub fn new(p: AgemParams, src: Option<&ParamSource>) -> Result<Self> {
        reservoir::require(
            src,
            AgemParams::NAME,
            p.capacity >= 1,
            "capacity",
            "must be ≥ 1",
        )?;
        reservoir::require(
            src,
            AgemParams::NAME,
            p.memory_batch >= 1,
            "memory_batch",
            "must be ≥ 1",
        )?;
        Ok(Self {
            memory: Reservoir::new(p.capacity),
            p,
            projected: (0, 0),
        })
    }
}

/// A-GEM's projection (eq. 11) of the flat gradient `g` against `g_ref`, both `(id, [numel])`
/// per parameter; a parameter missing from `g_ref` counts as 0 there. Returns the projected
/// gradient and whether it was projected (`gᵀ g_ref < 0`).
pub fn project(
    g: Vec<(
        engram_core::burn::module::ParamId,
        engram_core::burn::tensor::Tensor<1>,
    )>,
    g_ref: &[(
        engram_core::burn::module::ParamId,
        engram_core::burn::tensor::Tensor<1>,
    )],
) -> (
    Vec<(
        engram_core::burn::module::ParamId,
        engram_core::burn::tensor::Tensor<1>,
    )>,
    bool,
) {
    let find = |id| g_ref.iter().find(|(r, _)| *r == id).map(|(_, t)| t.clone());
    let scalar = |t: engram_core::burn::tensor::Tensor<1>| f64::from(t.sum().into_scalar::<f32>());
    let mut dot = 0.0f64;
    for (id, t) in &g {
        if let Some(r) = find(*id) {
            dot += scalar(t.clone() * r);
        }
    }
    let rr: f64 = g_ref
        .iter()
        .map(|(_, r)| scalar(r.clone() * r.clone()))
        .sum();
    if dot >= 0.0 || rr == 0.0 {
        return (g, false);
    }
    let k = (dot / rr) as f32;
    let out = g
        .into_iter()
        .map(|(id, t)| match find(id) {
            Some(r) => (id, t - r.mul_scalar(k)),
            None => (id, t),
        })
        .collect();
    (out, true)
}

impl ForgettingStrategy for Agem {
    fn name(&self) -> &str {
        AgemParams::NAME
    }

    fn stored_samples(
        &self,
        stream: &engram_core::data::stream::Stream,
    ) -> Option<engram_core::strategy::StoredSamples> {
        Some(self.memory.stored_samples(stream))
    }

    fn adjust_gradients(
        &mut self,
        model: &Model,
        grads: GradientsParams,
        cx: &BatchContext<'_>,
    ) -> Result<GradientsParams> {
        if self.memory.is_empty() {
            return Ok(grads);
        }
        let mut r = rng::stream(
            cx.seed,
            "agem-draw",
            cx.position.task as u64,
            cx.position.global_step as u64,
        );
        let refs: Vec<SampleRef> = self
            .memory
            .draw(self.p.memory_batch, &mut r)
            .into_iter()
            .map(|i| self.memory.slots[i].r)
            .collect();
        let b = cx
            .stream
            .batch(&refs, Part::Train, cx.position.task, cx.device);
        let logits = model.forward(b.input(), &b.forward_ctx());
        let loss = per_sample_cross_entropy(logits, &b).mean();
        let g_ref = GradientsParams::from_grads(loss.backward(), model);
        let flat = |g: &GradientsParams| {
            model
                .flat_grads(g)
                .into_iter()
                .map(|(p, t)| (p.id, t))
                .collect::<Vec<_>>()
        };
        let (g, projected) = project(flat(&grads), &flat(&g_ref));
        self.projected.1 += 1;
        if !projected {
            return Ok(grads);
        }
        self.projected.0 += 1;
        Ok(unflatten_grads(model, g))
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let refs = cx.train_refs();
        let mut r = rng::stream(cx.seed, "agem-memory", cx.task.index as u64, 0);
        let order = rng::permutation(refs.len(), &mut r);
        let labels = &cx.stream.dataset.train.labels;
        for i in order {
            self.memory.offer(
                reservoir::Stored {
                    r: refs[i],
                    class: labels.get(refs[i].index as usize).map_or(0, |&c| c as u16),
                    logits: Vec::new(),
                },
                &mut r,
            );
        }
        Ok(())
    }

    fn state(&self) -> Result<StrategyState> {
        let mut st = self.memory.to_state();
        st.meta["projected_steps"] = self.projected.0.into();
        st.meta["reference_steps"] = self.projected.1.into();
        Ok(st)
    }

    fn load_state(
        &mut self,
        state: StrategyState,
        _device: &engram_core::burn::tensor::Device,
    ) -> Result<()> {
        self.memory = Reservoir::from_state(AgemParams::NAME, &state)?;
        self.projected = (
            state.meta["projected_steps"].as_u64().unwrap_or(0),
            state.meta["reference_steps"].as_u64().unwrap_or(0),
        );
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: AgemParams = src.parse()?;
    Ok(Box::new(Agem::new(p, Some(src))?))
}

engram_core::component!(forgetting "agem", "A-GEM (Chaudhry et al. 2019): the step's gradient projected so that the loss on a past-task memory batch does not rise", AgemParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{toy_model, toy_stream};
    use engram_core::burn::tensor::{Device, Tensor};
    use engram_core::strategy::Position;

    fn values(model: &Model, g: &GradientsParams) -> Vec<f64> {
        model
            .flat_grads(g)
            .into_iter()
            .flat_map(|(_, t)| t.into_data().try_to_vec::<f32>().unwrap())
            .map(f64::from)
            .collect()
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn a_gradient_against_the_memory_is_projected_onto_its_plane_and_others_pass() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut model = toy_model(&device);
        let mut s = Agem::new(
            AgemParams {
                capacity: 40,
                memory_batch: 8,
            },
            None,
        )
        .unwrap();
        let info = crate::test_util::task_info(&stream, 0);
        s.after_task(&mut crate::test_util::task_cx(
            &mut model, &device, &info, &stream,
        ))
        .unwrap();
        assert_eq!(s.memory.len(), 40);
        assert!(s.memory.slots.iter().all(|m| m.class < 2));
        let position = Position {
            task: 1,
            global_step: 9,
            ..Position::default()
        };
        let controls = crate::test_util::controls();
        let cx = crate::test_util::batch_cx(&position, &controls, &stream, &device);
        // g_ref by hand: the same draw, the memory batch's mean cross-entropy.
        let mut r = rng::stream(0, "agem-draw", 1, 9);
        let refs: Vec<SampleRef> = s
            .memory
            .draw(8, &mut r)
            .into_iter()
            .map(|i| s.memory.slots[i].r)
            .collect();
        let mb = stream.batch(&refs, Part::Train, 1, &device);
        let loss =
            per_sample_cross_entropy(model.forward(mb.input(), &mb.forward_ctx()), &mb).mean();
        let g_ref = GradientsParams::from_grads(loss.backward(), &model);
        let gr = values(&model, &g_ref);
        // A task-1 batch's gradient, and its negation of g_ref plus a part along it.
        let b1 = stream.batch(&stream.epoch_order(1, 0, 0)[..8], Part::Train, 1, &device);
        let l1 = per_sample_cross_entropy(model.forward(b1.input(), &b1.forward_ctx()), &b1).mean();
        let g1 = GradientsParams::from_grads(l1.backward(), &model);
        let g = values(&model, &g1);
        let against: Vec<(engram_core::burn::module::ParamId, Tensor<1>)> = model
            .flat_grads(&g_ref)
            .into_iter()
            .map(|(p, t)| (p.id, t.mul_scalar(-2.0)))
            .collect();
        let g_against = unflatten_grads(&model, against);
        let ga = values(&model, &g_against);
        for (input, g, name) in [(g1, g, "task-1 gradient"), (g_against, ga, "-2 g_ref")] {
            let want: Vec<f64> = if dot(&g, &gr) < 0.0 {
                let k = dot(&g, &gr) / dot(&gr, &gr);
                g.iter().zip(&gr).map(|(a, b)| a - k * b).collect()
            } else {
                g.clone()
            };
            let out = s.adjust_gradients(&model, input, &cx).unwrap();
            let got = values(&model, &out);
            assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{name}: {a} vs {b}");
            }
            if dot(&g, &gr) < 0.0 {
                // Projected onto the plane: no first-order rise of the memory loss.
                assert!(dot(&got, &gr).abs() < 1e-5, "{name}");
            }
        }
        // -2 g_ref is anti-parallel: it was projected (to 0), and both steps were counted.
        assert_eq!(s.projected.1, 2);
        assert!(s.projected.0 >= 1);
    }

    #[test]
    fn bad_keys_and_state_round_trip() {
        assert!(
            Agem::new(
                AgemParams {
                    capacity: 0,
                    ..AgemParams::default()
                },
                None
            )
            .is_err()
        );
        assert!(
            Agem::new(
                AgemParams {
                    memory_batch: 0,
                    ..AgemParams::default()
                },
                None
            )
            .is_err()
        );
        let mut s = Agem::new(AgemParams::default(), None).unwrap();
        let mut r = rng::stream(0, "t", 0, 0);
        s.memory.offer(
            reservoir::Stored {
                r: SampleRef { task: 2, index: 3 },
                class: 5,
                logits: Vec::new(),
            },
            &mut r,
        );
        s.projected = (3, 7);
        let mut back = Agem::new(AgemParams::default(), None).unwrap();
        back.load_state(s.state().unwrap(), &Device::flex())
            .unwrap();
        assert_eq!(
            (back.memory.clone(), back.projected),
            (s.memory.clone(), (3, 7))
        );
    }
}
