//! Logit replay: the distillation of memory rows towards the logits stored with them, those
//! stored logits for a step's memory rows, and X-DER's update of older samples' logits for
//! the classes a task introduced ([`update_new_class_logits`]).

use super::Replay;
use super::memory::forward_rows;
use engram_core::Result;
use engram_core::burn::tensor::{Tensor, TensorData, activation};
use engram_core::data::stream::{Batch, SampleRef};
use engram_core::strategy::{BatchContext, TaskContext};

impl Replay {
    /// The logit-replay penalty of `batch`'s memory rows against the targets of the last
    /// prepared batch (see [`crate::replay::ReplayParams::distill`]); `None` without targets
    /// or when `logits` does not have the batch's rows.
    pub(super) fn distillation(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        let targets = self.targets.as_ref()?;
        let [m, c] = targets.dims();
        let n = batch.new_samples;
        if logits.dims()[0] != n + m {
            return None;
        }
        // KL(softmax(z*/T) ‖ softmax(z/T)) · T², averaged over memory rows (Hinton et al. 2015),
        // over the classes the batch's logit mask allows each row (task-incremental: the
        // sample's task; the stored z* were masked the same way when they were taken).
        let t = self.p.temperature;
        let z = logits.clone().slice([n..n + m, 0..c]);
        let z = match &batch.logit_mask {
            Some(mask) if mask.dims() == [n + m, c] => z + mask.clone().slice([n..n + m, 0..c]),
            _ => z,
        };
        let z = z.div_scalar(t);
        let p = activation::softmax(targets.clone().div_scalar(t), 1);
        let logq = activation::log_softmax(z, 1);
        let logp = p.clone().clamp_min(1e-12).log();
        let kl = (p * (logp - logq)).sum();
        Some(kl.mul_scalar(self.p.distill * t * t / m as f64))
    }

    /// The stored logits `[m, classes]` of the `m` memory rows just drawn, zeros for a slot
    /// stored without them.
    pub(super) fn stored_logits(&self, m: usize, cx: &BatchContext<'_>) -> Tensor<2> {
        let c = cx.stream.num_classes;
        let z: Vec<f32> = self
            .drawn
            .iter()
            .flat_map(|&(t, i)| {
                let l = &self.buffers[t][i].logits;
                if l.len() == c {
                    l.clone()
                } else {
                    vec![0.0; c]
                }
            })
            .collect();
        Tensor::from_data(TensorData::new(z, [m, c]), cx.device)
    }

    /// `update_logits`: the stored logits of the samples of tasks before `cx.task` get the
    /// current model's logits for the classes `cx.task` introduced ([`update_new_class_logits`]).
    pub(super) fn update_past_logits(&mut self, cx: &TaskContext<'_>) -> Result<()> {
        let t = cx.task.index;
        let seen: Vec<usize> = cx.stream.tasks[..t]
            .iter()
            .flat_map(|k| k.classes.iter().copied())
            .collect();
        let new: Vec<usize> = cx.stream.tasks[t]
            .classes
            .iter()
            .copied()
            .filter(|c| !seen.contains(c))
            .collect();
        let keys: Vec<(usize, usize)> = self
            .buffers
            .iter()
            .enumerate()
            .take(t)
            .flat_map(|(k, b)| (0..b.len()).map(move |i| (k, i)))
            .collect();
        if new.is_empty() || keys.is_empty() {
            return Ok(());
        }
        let refs: Vec<SampleRef> = keys.iter().map(|&(k, i)| self.buffers[k][i].r).collect();
        let (z, c) = forward_rows(cx, &refs, cx.model.num_blocks())?;
        for (row, &(k, i)) in keys.iter().enumerate() {
            let slot = &mut self.buffers[k][i];
            if slot.logits.len() == c {
                let now = &z[row * c..(row + 1) * c];
                update_new_class_logits(&mut slot.logits, slot.class as usize, now, &new);
            }
        }
        Ok(())
    }
}

/// The cap of [`update_new_class_logits`]: a new class's replaced logit stays below
/// `UPDATE_GAMMA ×` the sample's own stored logit. Measured insensitive on the validation
/// split (0.3, 0.5, 0.85 and 1.0 within 0.001 of ACC): the cap rarely binds.
pub const UPDATE_GAMMA: f32 = 0.85;

/// X-DER's update of a stored sample's logits (Boschini et al. 2022, "Class-Incremental
/// Continual Learning into the eXtended DER-verse", IEEE TPAMI, the update of the buffer's
/// past logits): `stored` `[classes]` (the logits the sample got when it entered the memory)
/// takes the current model's `now` `[classes]` at the indices `new` (the classes the task just
/// learned introduced). When the largest of those exceeds `g = stored[class]` (the sample's
/// own class, which must stay the argmax) they are lowered: multiplied by `γ·g / max` when
/// `g > 0` (X-DER's rescaling, `γ =` [`UPDATE_GAMMA`]), otherwise shifted down so that the
/// largest is `g − (1 − γ)` (a scale would flip signs). Other entries are kept.
pub fn update_new_class_logits(stored: &mut [f32], class: usize, now: &[f32], new: &[usize]) {
    let g = stored[class];
    let mut v: Vec<f32> = new.iter().map(|&j| now[j]).collect();
    let top = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if top > g {
        if g > 0.0 {
            let scale = UPDATE_GAMMA * g / top;
            v.iter_mut().for_each(|x| *x *= scale);
        } else {
            let shift = top - (g - (1.0 - UPDATE_GAMMA));
            v.iter_mut().for_each(|x| *x -= shift);
        }
    }
    for (&j, x) in new.iter().zip(v) {
        stored[j] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayParams;
    use crate::replay::tests::{end_task, replay};
    use crate::test_util::{toy_model, toy_stream};
    use engram_core::burn::module::Module as _;
    use engram_core::burn::tensor::Device;
    use engram_core::data::stream::Part;
    use engram_core::model::{ForwardCtx, Model};
    use engram_core::strategy::ForgettingStrategy;

    /// `logit_penalty` at `distill = 0.5` and temperature `t` for a batch of one new row
    /// (logits `[5, −5, 0]`, ignored by the penalty) and one memory row with stored logits
    /// `stored` and current logits `now`; `mask` is the batch's logit mask for both rows. The
    /// penalty and the (tracked) logits `[2, 3]`.
    fn one_memory_row(
        t: f64,
        stored: [f32; 3],
        now: [f32; 3],
        mask: Option<[f32; 3]>,
    ) -> (Tensor<1>, Tensor<2>) {
        let device = Device::flex().autodiff();
        let p = ReplayParams {
            distill: 0.5,
            temperature: t,
            ..ReplayParams::default()
        };
        let mut r = Replay::new(p, 5, None).unwrap();
        r.targets = Some(Tensor::from_data(
            TensorData::new(stored.to_vec(), [1, 3]),
            &device,
        ));
        let mut z = vec![5.0f32, -5.0, 0.0];
        z.extend(now);
        let logits = Tensor::<2>::from_data(TensorData::new(z, [2, 3]), &device).require_grad();
        let batch = Batch {
            x: Tensor::<2>::zeros([2, 1], &device).into(),
            y: Tensor::zeros([2], &device),
            weights: None,
            logit_mask: mask
                .map(|m| Tensor::from_data(TensorData::new([m, m].concat(), [2, 3]), &device)),
            refs: vec![SampleRef { task: 0, index: 0 }; 2],
            new_samples: 1,
        };
        (r.logit_penalty(&logits, &batch).unwrap(), logits)
    }

    /// `distill · T² · KL(softmax(p/T) ‖ softmax(q/T))` by hand in f64, `distill = 0.5`.
    fn softened_kl(t: f64, p: &[f32], q: &[f32]) -> f64 {
        let soft = |v: &[f32]| -> Vec<f64> {
            let e: Vec<f64> = v.iter().map(|&x| (f64::from(x) / t).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        let (ps, qs) = (soft(p), soft(q));
        let kl: f64 = ps.iter().zip(&qs).map(|(p, q)| p * (p / q).ln()).sum();
        0.5 * t * t * kl
    }

    #[test]
    fn logit_replay_penalty_equals_the_softened_kl_by_hand() {
        let (stored, now) = ([1.0f32, 0.0, -1.0], [0.0f32, 1.0, 0.0]);
        let got = one_memory_row(4.0, stored, now, None)
            .0
            .into_scalar::<f32>();
        let want = softened_kl(4.0, &stored, &now);
        assert!(want > 0.05, "the example is not degenerate: {want}");
        assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn logit_replay_keeps_to_the_classes_the_mask_allows() {
        // Task-incremental: a memory row's logits are masked to its task's classes when stored
        // and when replayed; the penalty is the KL over those classes only, whatever the
        // masked logit of the model (here 50, which would dominate an unmasked softmax).
        let (pen, logits) = one_memory_row(
            2.0,
            [1.0, 0.0, -1e9],
            [0.0, 1.0, 50.0],
            Some([0.0, 0.0, -1e9]),
        );
        let got = pen.clone().into_scalar::<f32>();
        let want = softened_kl(2.0, &[1.0, 0.0], &[0.0, 1.0]);
        assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
        // No gradient reaches the masked logit.
        let g = logits.grad(&pen.backward()).unwrap();
        let g: Vec<f32> = g.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(g[5], 0.0);
        assert!(g[3].abs() > 1e-3);
    }

    #[test]
    fn update_of_new_class_logits_by_hand() {
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        let now = [9.0f32, 9.0, 1.0, 1.5];
        // Below the sample's own logit (2): copied as they are; the other entries are kept.
        let mut stored = vec![2.0f32, 0.0, -5.0, -6.0];
        update_new_class_logits(&mut stored, 0, &now, &[2, 3]);
        assert!(close(&stored, &[2.0, 0.0, 1.0, 1.5]), "{stored:?}");
        // Above it: scaled by γ·g/max = 0.85 · 2 / 4, so the largest becomes 0.85 · 2.
        let mut stored = vec![2.0f32, 0.0, -5.0, -6.0];
        update_new_class_logits(&mut stored, 0, &[0.0, 0.0, 4.0, 1.0], &[2, 3]);
        assert!(close(&stored, &[2.0, 0.0, 1.7, 0.425]), "{stored:?}");
        // A negative own logit (−1): shifted so the largest is −1 − 0.15.
        let mut stored = vec![-1.0f32, 0.0, -5.0, -6.0];
        update_new_class_logits(&mut stored, 0, &[0.0, 0.0, 0.5, -3.0], &[2, 3]);
        assert!(close(&stored, &[-1.0, 0.0, -1.15, -4.65]), "{stored:?}");
    }

    #[test]
    fn after_a_task_older_samples_get_the_models_logits_for_its_new_classes() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut model = toy_model(&device);
        let mut r = replay(ReplayParams {
            capacity: 20,
            min_per_task: 2,
            ratio: Some(1.0),
            update_logits: true,
            ..ReplayParams::default()
        });
        let logits_of = |model: &Model, sref: SampleRef| -> Vec<f32> {
            let b = stream.batch(&[sref], Part::Train, 1, &device.clone().inner());
            model
                .valid()
                .forward(b.input(), &ForwardCtx::default())
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        let (mut before, mut trained) = (Vec::new(), model.clone());
        for t in 0..2 {
            before = r.buffers.clone();
            end_task(&mut r, &mut model, &stream, t, &device);
            trained = model.clone();
            // The next task's model answers differently.
            model = model.update_params(&mut |_, v| Some(v.mul_scalar(1.5).add_scalar(0.1)));
        }
        let new = stream.tasks[1].classes.clone();
        let old = stream.tasks[0].classes.clone();
        let mut checked = 0;
        for slot in &r.buffers[0] {
            let was = before[0]
                .iter()
                .find(|s| s.r == slot.r)
                .expect("a kept sample");
            let mut want = was.logits.clone();
            update_new_class_logits(
                &mut want,
                slot.class as usize,
                &logits_of(&trained, slot.r),
                &new,
            );
            for k in 0..10 {
                assert!(
                    (slot.logits[k] - want[k]).abs() < 1e-5,
                    "{:?} vs {want:?}",
                    slot.logits
                );
                if !new.contains(&k) {
                    // Every other entry (the sample's own classes included) is untouched.
                    assert_eq!(slot.logits[k], was.logits[k]);
                }
            }
            assert!(new.iter().any(|&k| slot.logits[k] != was.logits[k]));
            assert!(old.contains(&(slot.class as usize)));
            checked += 1;
        }
        assert_eq!(checked, 10, "task 0 keeps half of the memory");
        // The samples the task itself stored are not touched by the update.
        for slot in &r.buffers[1] {
            let now = logits_of(&trained, slot.r);
            assert!(
                slot.logits
                    .iter()
                    .zip(&now)
                    .all(|(a, b)| (a - b).abs() < 1e-5)
            );
        }
    }
}
