//! Choosing what the memory keeps: the candidates of a finished task and their scores (loss,
//! entropy, logits), the task's complexity for the allocation, and the selection rules
//! ([`select`], [`herding_order`]).

use super::memory::forward_rows;
use super::{Allocation, Replay, Score, Selection, Slot};
use engram_core::Result;
use engram_core::burn::module::Module as _;
use engram_core::burn::tensor::activation;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::ForwardCtx;
use engram_core::rng;
use engram_core::strategy::TaskContext;
use rand::Rng as _;

/// Keeps `k` of `items` by `rule` (see the module docs); deterministic given `rng`. For
/// `herding` the items must already be in [`herding_order`] (the first `k` are kept).
pub fn select(
    items: Vec<Slot>,
    k: usize,
    rule: Selection,
    strata: usize,
    rng: &mut rng::Rng,
) -> Vec<Slot> {
    if items.len() <= k {
        return items;
    }
    match rule {
        Selection::Reservoir => {
            let mut keep: Vec<Slot> = items[..k].to_vec();
            for (i, item) in items.iter().enumerate().skip(k) {
                let j = rng.random_range(0..=i);
                if j < k {
                    keep[j] = item.clone();
                }
            }
            keep
        }
        Selection::ClassBalanced => {
            let mut by_class: Vec<Vec<Slot>> = vec![Vec::new(); 256];
            for s in items {
                by_class[s.class as usize].push(s);
            }
            let mut classes: Vec<Vec<Slot>> =
                by_class.into_iter().filter(|v| !v.is_empty()).collect();
            for c in classes.iter_mut() {
                let perm = rng::permutation(c.len(), rng);
                *c = perm.into_iter().map(|i| c[i].clone()).collect();
            }
            let mut keep = Vec::with_capacity(k);
            let mut round = 0;
            while keep.len() < k {
                for c in &classes {
                    if keep.len() < k && round < c.len() {
                        keep.push(c[round].clone());
                    }
                }
                round += 1;
            }
            keep
        }
        // `after_task` orders a task's candidates by `herding_order`: the prefix is the
        // herding selection of every class.
        Selection::Herding => items.into_iter().take(k).collect(),
        Selection::Stratified => {
            let mut sorted = items;
            sorted.sort_by(|a, b| a.score.total_cmp(&b.score));
            let strata = strata.clamp(1, k.max(1));
            let n = sorted.len();
            let mut keep = Vec::with_capacity(k);
            for s in 0..strata {
                let (lo, hi) = (s * n / strata, (s + 1) * n / strata);
                let quota = k / strata + usize::from(s < k % strata);
                // The highest-scoring samples of this stratum.
                keep.extend(sorted[lo..hi].iter().rev().take(quota).cloned());
            }
            keep
        }
    }
}

fn entropy_of(probs: &[f32], classes: usize) -> Vec<f32> {
    probs
        .chunks(classes)
        .map(|p| {
            -p.iter()
                .filter(|&&v| v > 0.0)
                .map(|&v| v * v.ln())
                .sum::<f32>()
        })
        .collect()
}

impl Replay {
    /// Task `t`'s candidates: its training samples in a seeded random order, the first
    /// `candidates` of them (all with `candidates = 0`).
    pub(super) fn candidates(&self, cx: &TaskContext<'_>, t: usize) -> Vec<SampleRef> {
        let mut refs = cx.train_refs();
        let mut r = rng::stream(cx.seed, "replay-candidates", t as u64, 0);
        let order = rng::permutation(refs.len(), &mut r);
        refs = order.into_iter().map(|i| refs[i]).collect();
        if self.p.candidates > 0 {
            refs.truncate(self.p.candidates);
        }
        refs
    }

    /// Whether anything reads the scoring forward of [`Replay::score`]: stratified selection
    /// (its score), priorities (the loss), entropy allocation (the entropy sum) and logit
    /// replay (the logits). Reservoir, class-balanced and herding selection at `distill = 0`
    /// read none of them.
    fn scores_read(&self) -> bool {
        self.p.selection == Selection::Stratified
            || self.p.priority
            || self.p.allocation == Allocation::Entropy
            || self.p.distill > 0.0
    }

    /// Scores `refs` (of task `t`) without a graph: per-sample loss and predictive entropy.
    /// Their slots, in the order of `refs`, with the loss or the entropy as score, the
    /// priority and (when distilling) the logits; and the sum of their predictive entropies.
    /// When nothing reads them ([`Replay::scores_read`]) there is no forward: the slots carry
    /// their labels, score 0 and priority 1 (a language model's windows would otherwise be run
    /// through the model with their full-vocabulary logits, gigabytes at a few hundred windows).
    pub(super) fn score(
        &self,
        cx: &TaskContext<'_>,
        t: usize,
        refs: &[SampleRef],
    ) -> (Vec<Slot>, f64) {
        if !self.scores_read() {
            let labels = &cx.stream.dataset.train.labels;
            let slots = refs
                .iter()
                .map(|r| Slot {
                    r: *r,
                    class: labels[r.index as usize] as u8,
                    score: 0.0,
                    priority: 1.0,
                    logits: Vec::new(),
                })
                .collect();
            return (slots, 0.0);
        }
        let valid = cx.model.valid();
        let inner = cx.device.clone().inner();
        let classes = cx.stream.num_classes;
        let ctx = ForwardCtx::training(
            (cx.stream.scenario == engram_core::config::Scenario::TaskIncremental).then_some(t),
        );
        let mut slots = Vec::with_capacity(refs.len());
        let mut entropy_sum = 0.0f64;
        for chunk in refs.chunks(500) {
            let b = cx.stream.batch(chunk, Part::Train, t, &inner);
            let logits = valid.forward(b.input(), &ctx);
            let logits = match &b.logit_mask {
                Some(m) => logits + m.clone(),
                None => logits,
            };
            let logits_raw = logits.clone();
            let probs: Vec<f32> = activation::softmax(logits.clone(), 1)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default();
            let ce: Vec<f32> = engram_core::train::trainer::per_sample_cross_entropy(logits, &b)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default();
            let ent = entropy_of(&probs, classes);
            let z: Vec<f32> = if self.p.distill > 0.0 {
                logits_raw
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let labels = b.labels();
            for (k, sref) in chunk.iter().enumerate() {
                entropy_sum += f64::from(ent[k]);
                let score = match self.p.stratify_by {
                    Score::Loss => ce[k],
                    Score::Entropy => ent[k],
                };
                slots.push(Slot {
                    r: *sref,
                    class: labels[k] as u8,
                    score,
                    priority: if self.p.priority {
                        ce[k].max(1e-3)
                    } else {
                        1.0
                    },
                    logits: z
                        .get(k * classes..(k + 1) * classes)
                        .map(<[f32]>::to_vec)
                        .unwrap_or_default(),
                });
            }
        }
        (slots, entropy_sum)
    }

    /// The task's complexity for `allocation` from its scored `slots` and their summed
    /// predictive entropy.
    pub(super) fn complexity(&self, slots: &[Slot], entropy_sum: f64) -> f64 {
        match self.p.allocation {
            Allocation::Entropy => entropy_sum / slots.len().max(1) as f64,
            Allocation::Labels => {
                let mut counts = [0usize; 256];
                for s in slots {
                    counts[s.class as usize] += 1;
                }
                let n = slots.len().max(1) as f64;
                -counts
                    .iter()
                    .filter(|&&c| c > 0)
                    .map(|&c| (c as f64 / n) * (c as f64 / n).ln())
                    .sum::<f64>()
            }
            Allocation::Equal => 1.0,
        }
    }

    /// `slots` of task `t` in [`herding_order`] on the features of `cx.model`, herded up to
    /// one past the share the task gets on arrival.
    pub(super) fn herd(
        &self,
        cx: &TaskContext<'_>,
        t: usize,
        complexity: f64,
        slots: Vec<Slot>,
    ) -> Result<Vec<Slot>> {
        let sref: Vec<SampleRef> = slots.iter().map(|s| s.r).collect();
        let blocks = cx.model.num_blocks().saturating_sub(1);
        let (features, d) = forward_rows(cx, &sref, blocks)?;
        let labels: Vec<usize> = slots.iter().map(|s| s.class as usize).collect();
        // Ranks past `share + 1` are never kept: the share only shrinks as tasks arrive
        // (by one sample at most it can grow, from largest-remainder rounding).
        let share = self.share_on_arrival(t, complexity, slots.len());
        let order = herding_order(&features, d, &labels, share + 1);
        Ok(order.into_iter().map(|i| slots[i].clone()).collect())
    }
}

/// Herding order of rows `features` (`[n, d]`, row-major) with class `labels` (`[n]`): per
/// class, the greedy sequence of iCaRL (Rebuffi et al. 2017, "iCaRL: Incremental Classifier
/// and Representation Learning", Algorithm 4) on L2-normalised features `φ` — step `k ≥ 1`
/// picks the unpicked row `i` minimising `‖μ − (Σ_{j<k} φ_j + φ_i)/k‖`, `μ` the mean of the
/// class's `φ` (ties: the earlier row) — with the classes interleaved by rank (every class's
/// first row, then every class's second…, classes in ascending order, a class dropping out
/// when it runs out). Only the first `limit` rows of that order are computed; the other rows
/// follow in their original order. Returns a permutation of `0..n`: any prefix of up to
/// `limit` rows holds the herding selection of every class, as balanced as the classes allow.
/// Cost `O(limit · n · d)`.
pub fn herding_order(features: &[f32], d: usize, labels: &[usize], limit: usize) -> Vec<usize> {
    let n = labels.len();
    if d == 0 || features.len() != n * d {
        return (0..n).collect();
    }
    // φ_i = x_i/‖x_i‖, and ‖φ_i‖² (1, or 0 for an all-zero row).
    let mut phi = features.to_vec();
    let mut sq = vec![0.0f32; n];
    for (row, s) in phi.chunks_mut(d).zip(sq.iter_mut()) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 1e-12 {
            row.iter_mut().for_each(|x| *x /= norm);
            *s = 1.0;
        }
    }
    let dot = |a: &[f32], i: usize| -> f32 {
        a.iter()
            .zip(&phi[i * d..(i + 1) * d])
            .map(|(x, y)| x * y)
            .sum()
    };
    let mut classes: Vec<usize> = labels.to_vec();
    classes.sort_unstable();
    classes.dedup();
    // Per class: its unpicked rows, its mean μ and the sum S of its picked φ.
    let mut state: Vec<(Vec<usize>, Vec<f32>, Vec<f32>)> = classes
        .iter()
        .map(|&c| {
            let rows: Vec<usize> = (0..n).filter(|&i| labels[i] == c).collect();
            let mut mu = vec![0.0f32; d];
            for &i in &rows {
                mu.iter_mut()
                    .zip(&phi[i * d..(i + 1) * d])
                    .for_each(|(m, x)| *m += x);
            }
            let count = rows.len() as f32;
            mu.iter_mut().for_each(|m| *m /= count);
            (rows, mu, vec![0.0f32; d])
        })
        .collect();
    let mut order = Vec::with_capacity(n);
    let mut picked = vec![false; n];
    let mut k = 0.0f32;
    let mut a = vec![0.0f32; d];
    while order.len() < limit.min(n) {
        k += 1.0;
        for (left, mu, sum) in state.iter_mut() {
            if left.is_empty() || order.len() == limit {
                continue;
            }
            // ‖μ − (S + φ_i)/k‖² = ‖a‖² − (2/k)·a·φ_i + ‖φ_i‖²/k² with a = μ − S/k: the
            // nearest row has the largest (2/k)·a·φ_i − ‖φ_i‖²/k².
            a.iter_mut()
                .zip(mu.iter().zip(sum.iter()))
                .for_each(|(a, (m, s))| *a = m - s / k);
            let score = |i: usize| 2.0 / k * dot(&a, i) - sq[i] / (k * k);
            let mut best = (0, score(left[0]));
            for (pos, &i) in left.iter().enumerate().skip(1) {
                let v = score(i);
                if v > best.1 {
                    best = (pos, v);
                }
            }
            let i = left.remove(best.0);
            sum.iter_mut()
                .zip(&phi[i * d..(i + 1) * d])
                .for_each(|(s, x)| *s += x);
            picked[i] = true;
            order.push(i);
        }
    }
    order.extend((0..n).filter(|&i| !picked[i]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayParams;
    use crate::replay::tests::{end_task, replay, slots};
    use crate::test_util::{toy_model, toy_stream};
    use engram_core::burn::tensor::Device;

    #[test]
    fn selection_rules() {
        let mut g = rng::stream(1, "t", 0, 0);
        let items = slots(0, 100, &[0, 1, 2, 3]);
        let keep = select(items.clone(), 10, Selection::Reservoir, 4, &mut g);
        assert_eq!(keep.len(), 10);
        let again = select(
            items.clone(),
            10,
            Selection::Reservoir,
            4,
            &mut rng::stream(1, "t", 0, 0),
        );
        assert_eq!(keep, again, "deterministic under a seed");
        // Class-balanced: 12 from 4 classes = 3 each, even with imbalanced input.
        let mut imbalanced = slots(0, 80, &[0]);
        imbalanced.extend(slots(0, 4, &[1, 2, 3]).into_iter().map(|mut s| {
            s.r.index += 1000;
            s
        }));
        let keep = select(imbalanced, 12, Selection::ClassBalanced, 4, &mut g);
        let count = |c: u8| keep.iter().filter(|s| s.class == c).count();
        // Classes 1–3 have 2, 1 and 1 samples: all are kept, class 0 fills the rest.
        assert_eq!((count(0), count(1), count(2), count(3)), (8, 2, 1, 1));
        // Stratified: every quarter of the score range is represented, top of each stratum.
        let keep = select(items, 8, Selection::Stratified, 4, &mut g);
        let mut scores: Vec<f32> = keep.iter().map(|s| s.score).collect();
        scores.sort_by(f32::total_cmp);
        assert_eq!(scores, vec![23.0, 24.0, 48.0, 49.0, 73.0, 74.0, 98.0, 99.0]);
        // Herding: the candidates arrive in herding order; a share keeps their prefix.
        let ordered = slots(0, 20, &[0, 1]);
        let keep = select(ordered.clone(), 6, Selection::Herding, 4, &mut g);
        assert_eq!(keep, ordered[..6].to_vec());
    }

    #[test]
    fn herding_order_by_hand() {
        // Class 0: a = (10, 0), b = (0, 5), c = (0, 1) at rows 0, 1, 2 — normalised (1, 0),
        // (0, 1), (0, 1), so μ_0 = (1/3, 2/3). Step 1: ‖μ − φ‖² = a 8/9, b and c 2/9: a tie,
        // the earlier row b wins (unnormalised, c would be nearest). Step 2: ‖μ − (φ_b + φ)/2‖²
        // = a 1/18, c 2/9 → a; then c.
        // Class 2: z = (0, 0), p = (3, 4), p' = (3, 4) at rows 3, 4, 5 — φ = 0, (0.6, 0.8),
        // (0.6, 0.8), μ_2 = (0.4, 0.533). Step 1: z 0.444, p and p' 0.111 → p (earlier).
        // Step 2: ‖μ − (φ_p + φ)/2‖² = z 0.028, p' 0.111 → z (an all-zero row has ‖φ‖ = 0,
        // not 1); then p'. Interleaved by rank: b, p, a, z, c, p'.
        let f = [10.0, 0.0, 0.0, 5.0, 0.0, 1.0, 0.0, 0.0, 3.0, 4.0, 3.0, 4.0];
        let labels = [0, 0, 0, 2, 2, 2];
        assert_eq!(herding_order(&f, 2, &labels, 10), vec![1, 4, 0, 3, 2, 5]);
        // Only the first `limit` rows are herded; the rest follow in their original order.
        assert_eq!(herding_order(&f, 2, &labels, 3), vec![1, 4, 0, 2, 3, 5]);
        assert_eq!(herding_order(&f, 2, &labels, 1), vec![1, 0, 2, 3, 4, 5]);
        // No features: the identity.
        assert_eq!(herding_order(&[], 0, &labels, 10), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn herding_keeps_each_class_s_most_central_samples_and_shrinks_by_prefix() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut model = toy_model(&device);
        let mut r = replay(ReplayParams {
            capacity: 8,
            min_per_task: 1,
            ratio: Some(1.0),
            selection: Selection::Herding,
            ..ReplayParams::default()
        });
        // Normalised hidden features of every training row of task 0.
        let rows: Vec<SampleRef> = stream.tasks[0]
            .train
            .iter()
            .map(|&index| SampleRef { task: 0, index })
            .collect();
        let b = stream.batch(&rows, Part::Train, 0, &device.clone().inner());
        let labels: Vec<usize> =
            b.y.clone()
                .into_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .unwrap()
                .into_iter()
                .map(|c| c as usize)
                .collect();
        let h: Vec<f32> = model
            .valid()
            .forward_range(0..1, b.input(), &ForwardCtx::default())
            .into_flat()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let phi: Vec<Vec<f32>> = h
            .chunks(6)
            .map(|v| {
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / n).collect()
            })
            .collect();
        let mut after = Vec::new();
        for t in 0..2 {
            end_task(&mut r, &mut model, &stream, t, &device);
            after.push(r.buffers[0].clone());
        }
        // After task 0 its share is the whole memory, 4 per class; each class's first pick is
        // the sample nearest the class mean.
        assert_eq!(after[0].len(), 8);
        for c in stream.tasks[0].classes.clone() {
            let kept: Vec<&Slot> = after[0].iter().filter(|s| s.class as usize == c).collect();
            assert_eq!(kept.len(), 4, "class {c}");
            let members: Vec<usize> = (0..rows.len()).filter(|&i| labels[i] == c).collect();
            let mut mu = [0.0f32; 6];
            for &i in &members {
                mu.iter_mut().zip(&phi[i]).for_each(|(m, x)| *m += x);
            }
            mu.iter_mut().for_each(|m| *m /= members.len() as f32);
            let dist = |i: usize| -> f32 { (0..6).map(|j| (mu[j] - phi[i][j]).powi(2)).sum() };
            let nearest = members
                .iter()
                .copied()
                .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
                .unwrap();
            assert_eq!(kept[0].r, rows[nearest], "class {c}");
        }
        // Task 1 halves task 0's share: the first half of its herding order stays.
        assert_eq!(after[1], after[0][..4].to_vec());
        assert_eq!(r.buffers[1].len(), 4);
    }
}
