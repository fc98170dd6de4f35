//! The memory: its [`Slot`]s, the division of `capacity` between tasks ([`shares`]), adding a
//! task and re-balancing, the draw of a step's memory rows (uniform or by priority) and the
//! forward pass over stored samples.

use super::{Replay, select};
use engram_core::burn::module::Module as _;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::ForwardCtx;
use engram_core::strategy::TaskContext;
use engram_core::{Error, Result, rng};
use rand::Rng as _;
use serde::{Deserialize, Serialize};

/// One stored sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    /// The sample.
    pub r: SampleRef,
    /// Its class.
    pub class: u8,
    /// Its selection score (loss or entropy when selected).
    pub score: f32,
    /// Its sampling priority.
    pub priority: f32,
    /// Its logits when stored (for `distill`), `[classes]`; empty when not kept.
    #[serde(default)]
    pub logits: Vec<f32>,
}

/// Shares of `capacity` for tasks with complexities `c`: `min_per_task` each, the rest
/// proportional to `c` by largest remainder, then capped at each task's `available` samples.
pub fn shares(capacity: usize, min_per_task: usize, c: &[f64], available: &[usize]) -> Vec<usize> {
    let n = c.len();
    if n == 0 {
        return Vec::new();
    }
    let base = min_per_task.min(capacity / n);
    let rest = capacity - base * n;
    let total: f64 = c.iter().map(|v| v.max(0.0)).sum();
    let weights: Vec<f64> = if total > 0.0 {
        c.iter().map(|v| v.max(0.0) / total).collect()
    } else {
        vec![1.0 / n as f64; n]
    };
    let raw: Vec<f64> = weights.iter().map(|w| w * rest as f64).collect();
    let mut s: Vec<usize> = raw.iter().map(|r| r.floor() as usize).collect();
    let mut left = rest - s.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        (raw[b] - raw[b].floor())
            .total_cmp(&(raw[a] - raw[a].floor()))
            .then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take(n * 2) {
        if left == 0 {
            break;
        }
        s[i] += 1;
        left -= 1;
    }
    s.iter()
        .zip(available)
        .map(|(&x, &a)| (x + base).min(a))
        .collect()
}

impl Replay {
    /// Adds task `t` (its scored candidates and complexity) and re-balances every share; a
    /// task's share never exceeds its candidates (the shares then sum to less than capacity).
    /// With `selection = "herding"` the candidates must be in
    /// [`herding_order`](super::herding_order).
    pub fn add_task(&mut self, t: usize, candidates: Vec<Slot>, complexity: f64, seed: u64) {
        while self.buffers.len() <= t {
            self.buffers.push(Vec::new());
            self.complexity.push(0.0);
            self.available.push(0);
        }
        self.complexity[t] = complexity;
        self.available[t] = candidates.len();
        self.buffers[t] = candidates;
        let s = shares(
            self.p.capacity,
            self.p.min_per_task,
            &self.complexity,
            &self.available,
        );
        for (k, share) in s.into_iter().enumerate() {
            let mut r = rng::stream(seed, "replay-select", k as u64, t as u64);
            let items = std::mem::take(&mut self.buffers[k]);
            self.buffers[k] = select(items, share, self.p.selection, self.p.strata, &mut r);
        }
    }

    /// The share task `t` gets when it arrives with `complexity` and `available` candidates
    /// (what [`Replay::add_task`] will give it). Later tasks never raise it by more than one
    /// sample: the weights of the tasks already stored only fall as complexities are added,
    /// and only the rounding of the largest remainder can add one.
    pub(super) fn share_on_arrival(&self, t: usize, complexity: f64, available: usize) -> usize {
        let (mut c, mut a) = (self.complexity.clone(), self.available.clone());
        c.resize(c.len().max(t + 1), 0.0);
        a.resize(a.len().max(t + 1), 0);
        c[t] = complexity;
        a[t] = available;
        shares(self.p.capacity, self.p.min_per_task, &c, &a)[t]
    }

    /// Draws `m` memory slots, by priority or uniformly, with replacement.
    pub(super) fn draw(&self, m: usize, r: &mut rng::Rng) -> Vec<(usize, usize)> {
        let flat: Vec<(usize, usize, f64)> = self
            .buffers
            .iter()
            .enumerate()
            .flat_map(|(t, b)| {
                b.iter()
                    .enumerate()
                    .map(move |(i, s)| (t, i, f64::from(s.priority)))
            })
            .collect();
        if flat.is_empty() || m == 0 {
            return Vec::new();
        }
        if !self.p.priority {
            return (0..m)
                .map(|_| {
                    let (t, i, _) = flat[r.random_range(0..flat.len())];
                    (t, i)
                })
                .collect();
        }
        // P(i) ∝ p_i^α + mean_j p_j^α: priorities steer half of the mass at most, so
        // well-learned samples are still replayed.
        let pw: Vec<f64> = flat
            .iter()
            .map(|&(_, _, p)| p.max(0.0).powf(self.p.priority_alpha))
            .collect();
        let floor = pw.iter().sum::<f64>() / pw.len() as f64 + 1e-12;
        let mut cum = Vec::with_capacity(flat.len());
        let mut acc = 0.0;
        for w in &pw {
            acc += w + floor;
            cum.push(acc);
        }
        (0..m)
            .map(|_| {
                let u = r.random_range(0.0..acc);
                let k = cum.partition_point(|&c| c <= u).min(flat.len() - 1);
                (flat[k].0, flat[k].1)
            })
            .collect()
    }
}

/// The training samples `refs` through the first `blocks` blocks of the inference copy of
/// `cx.model` (no graph), in chunks of 500: the outputs row-major `[refs, width]` (token hidden
/// states pooled as the model's head pools them, [`engram_core::model::Activation::into_features`]: a text sample's
/// feature is its sentence vector `[d_model]`, not its `len × d_model` states), and `width` (0
/// for no rows).
pub(super) fn forward_rows(
    cx: &TaskContext<'_>,
    refs: &[SampleRef],
    blocks: usize,
) -> Result<(Vec<f32>, usize)> {
    let valid = cx.model.valid();
    let inner = cx.device.clone().inner();
    let ctx = ForwardCtx::default();
    let (mut out, mut width) = (Vec::new(), 0);
    let pooling = crate::ncm::pooling_of(&valid);
    for chunk in refs.chunks(500) {
        let b = cx.stream.batch(chunk, Part::Train, cx.task.index, &inner);
        let f = valid
            .forward_range(0..blocks, b.input(), &ctx)
            .into_features(pooling);
        width = f.dims()[1];
        out.extend(
            f.into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .map_err(|e| Error::Strategy {
                    strategy: super::NAME.into(),
                    message: format!("memory forward pass: {e:?}"),
                })?,
        );
    }
    Ok((out, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::tests::{replay, slots};
    use crate::replay::{Allocation, ReplayParams};

    #[test]
    fn shares_sum_to_capacity_and_respect_minimum_and_data() {
        let s = shares(500, 10, &[1.0, 3.0], &[1000, 1000]);
        assert_eq!(s.iter().sum::<usize>(), 500);
        // 10 each, then 480 split 1:3 = 120 / 360.
        assert_eq!(s, vec![130, 370]);
        let s = shares(100, 10, &[0.0, 0.0, 1.0], &[1000, 1000, 1000]);
        assert_eq!(s, vec![10, 10, 80]);
        // A share larger than the task's data stores what exists.
        let s = shares(500, 10, &[1.0, 1.0], &[40, 1000]);
        assert_eq!(s, vec![40, 250]);
        assert!(s.iter().sum::<usize>() < 500);
        // Largest remainder keeps the total exact.
        let s = shares(10, 0, &[1.0, 1.0, 1.0], &[100; 3]);
        assert_eq!(s.iter().sum::<usize>(), 10);
        // Herding orders only `share + 1` ranks of a task when it arrives: no later task may
        // raise a stored task's share by more than one (random complexities and data sizes).
        let mut g = rng::stream(3, "t", 0, 0);
        let mut grew = 0;
        for _ in 0..300 {
            let capacity = g.random_range(20..600);
            let n = g.random_range(2..12);
            let min = g.random_range(0..=capacity / n);
            let c: Vec<f64> = (0..n)
                .map(|_| {
                    if g.random_bool(0.2) {
                        0.0
                    } else {
                        g.random_range(0.0..3.0)
                    }
                })
                .collect();
            let a: Vec<usize> = (0..n).map(|_| g.random_range(1..400)).collect();
            for t in 0..n {
                let on_arrival = shares(capacity, min, &c[..=t], &a[..=t])[t];
                for later in t + 1..n {
                    let now = shares(capacity, min, &c[..=later], &a[..=later])[t];
                    assert!(
                        now <= on_arrival + 1,
                        "{capacity} {min} {c:?} {a:?}: task {t}"
                    );
                    grew += usize::from(now > on_arrival);
                }
            }
        }
        assert!(grew > 0, "the one sample of slack is needed");
    }

    #[test]
    fn memory_never_exceeds_capacity_and_rebalances() {
        let mut r = replay(ReplayParams {
            capacity: 50,
            min_per_task: 5,
            allocation: Allocation::Entropy,
            ..ReplayParams::default()
        });
        assert!(r.is_empty());
        for t in 0..5u16 {
            r.add_task(
                t as usize,
                slots(t, 200, &[2 * t as u8, 2 * t as u8 + 1]),
                1.0 + f64::from(t),
                3,
            );
            assert!(r.len() <= 50);
            assert_eq!(r.len(), 50);
            assert!(r.buffers().iter().all(|b| b.len() >= 5));
        }
        // Older tasks shrank to make room; the most complex task holds the largest share.
        let sizes: Vec<usize> = r.buffers().iter().map(Vec::len).collect();
        assert!(sizes[4] > sizes[0], "{sizes:?}");
    }
}
