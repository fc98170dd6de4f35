//! The episodic memory of the standard rehearsal methods ([`crate::er_ace`], [`crate::derpp`],
//! [`crate::agem`]): a reservoir sample (Vitter 1985, algorithm R) of the training samples
//! offered to it, as in ER (Chaudhry et al. 2019, "On Tiny Episodic Memories"), DER++ and
//! ER-ACE. After `n` offers each offered sample is in the memory with probability
//! `min(1, capacity / n)`, whatever the order of the tasks; a method offers every incoming
//! sample as it is trained on (online) or a task's samples when the task ends.
//!
//! The memory holds [`SampleRef`]s into the dataset, not pixels, plus whatever a method keeps
//! per sample (DER's logits): 500 samples cost a few kilobytes. `replay` has its own, richer
//! memory (per-task shares, herding, priorities); this one is the papers' plain buffer.

use engram_core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, SampleRef};
use engram_core::strategy::{StoredSamples, StrategyState};
use engram_core::{Error, Result, rng};
use rand::Rng as _;
use serde::{Deserialize, Serialize};

/// One stored sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// The sample.
    pub r: SampleRef,
    /// Its label.
    pub class: u16,
    /// What the method keeps with it (DER: the logits `[classes]` it had when stored); empty
    /// otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logits: Vec<f32>,
}

/// A reservoir of at most `capacity` samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reservoir {
    /// Most samples kept.
    pub capacity: usize,
    /// Samples offered so far (`n` of algorithm R).
    pub seen: u64,
    /// The memory, in slot order.
    pub slots: Vec<Stored>,
}

impl Reservoir {
    /// The stored samples' size ([`StoredSamples::of`]): their inputs in the data's own type
    /// and their stored logits.
    pub fn stored_samples(&self, stream: &engram_core::data::stream::Stream) -> StoredSamples {
        let logits = self.slots.iter().map(|s| s.logits.len()).sum();
        StoredSamples::of(stream, self.slots.len(), logits)
    }

    /// An empty memory of `capacity` samples.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            seen: 0,
            slots: Vec::new(),
        }
    }

    /// Number of stored samples.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Offers one sample (algorithm R): the slot it was written to, or `None` when it was not
    /// kept. While the memory is not full every sample is kept; then the `n`-th offer replaces a
    /// uniformly chosen slot with probability `capacity / n`.
    pub fn offer(&mut self, item: Stored, rng: &mut rng::Rng) -> Option<usize> {
        self.seen += 1;
        if self.capacity == 0 {
            return None;
        }
        if self.slots.len() < self.capacity {
            self.slots.push(item);
            return Some(self.slots.len() - 1);
        }
        let j = rng.random_range(0..self.seen) as usize;
        (j < self.capacity).then(|| {
            self.slots[j] = item;
            j
        })
    }

    /// `m` distinct slots drawn uniformly (all of them, shuffled, when `m ≥ len`).
    pub fn draw(&self, m: usize, rng: &mut rng::Rng) -> Vec<usize> {
        let mut order = rng::permutation(self.slots.len(), rng);
        order.truncate(m);
        order
    }

    /// A strategy's checkpoint state holding this memory (`meta.memory`); a strategy adds its
    /// own keys to `meta`.
    pub fn to_state(&self) -> StrategyState {
        StrategyState {
            meta: serde_json::json!({ "memory": serde_json::to_value(self).unwrap_or_default() }),
            tensors: Default::default(),
        }
    }

    /// The memory of a state written by [`Reservoir::to_state`].
    ///
    /// # Errors
    /// A malformed saved state, as [`Error::Strategy`] of `strategy`.
    pub fn from_state(strategy: &str, state: &StrategyState) -> Result<Self> {
        serde_json::from_value(state.meta["memory"].clone()).map_err(|e| Error::Strategy {
            strategy: strategy.into(),
            message: format!("saved memory: {e}"),
        })
    }
}

/// `Ok` when `ok`; otherwise an error about key `key` of `strategy`: positioned at the key
/// ([`engram_core::Error::Config`]) when the strategy was built from a config entry `src`,
/// else [`Error::Strategy`]. `what` completes "`key` …" ("must be ≥ 1").
pub fn require(
    src: Option<&ParamSource>,
    strategy: &str,
    ok: bool,
    key: &str,
    what: &str,
) -> Result<()> {
    if ok {
        return Ok(());
    }
    let message = format!("{strategy}: `{key}` {what}");
    Err(match src {
        Some(s) => s.key_error(key, message, None),
        None => Error::Strategy {
            strategy: strategy.into(),
            message,
        },
    })
}

/// Row indices `idx` as an index tensor `[idx.len()]` on `device` (for `select`).
pub fn index(idx: &[usize], device: &Device) -> Tensor<1, Int> {
    let v: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(v, [idx.len()]), device)
}

/// Offers the new rows of a trained batch (its first `batch.new_samples` rows) to `memory`, one
/// at a time in row order; returns `(row, slot)` for each row that was stored.
pub fn offer_new_rows(
    memory: &mut Reservoir,
    batch: &Batch,
    rng: &mut rng::Rng,
) -> Vec<(usize, usize)> {
    let y = batch.labels();
    let n = batch.new_samples.min(batch.refs.len()).min(y.len());
    (0..n)
        .filter_map(|i| {
            let item = Stored {
                r: batch.refs[i],
                class: y[i] as u16,
                logits: Vec::new(),
            };
            memory.offer(item, rng).map(|slot| (i, slot))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: u32) -> Stored {
        Stored {
            r: SampleRef { task: 0, index: i },
            class: 0,
            logits: Vec::new(),
        }
    }

    #[test]
    fn keeps_everything_until_full_then_replaces_with_probability_capacity_over_n() {
        let mut m = Reservoir::new(3);
        let mut r = rng::stream(0, "t", 0, 0);
        assert_eq!(m.offer(item(0), &mut r), Some(0));
        assert_eq!(m.offer(item(1), &mut r), Some(1));
        assert_eq!(m.offer(item(2), &mut r), Some(2));
        assert_eq!(m.len(), 3);
        // Offer number n = 4..: kept with probability 3/n. Over many independent runs the
        // share of runs that keep the 10th sample is 3/10.
        let runs = 20_000;
        let mut kept = 0;
        for run in 0..runs {
            let mut m = Reservoir::new(3);
            let mut r = rng::stream(run, "t", 0, 0);
            for i in 0..10 {
                m.offer(item(i), &mut r);
            }
            kept += m.slots.iter().any(|s| s.r.index == 9) as usize;
            // Every sample, first or last, has the same chance: the first is also kept 3/10.
            assert_eq!(m.seen, 10);
            assert_eq!(m.len(), 3);
        }
        let share = kept as f64 / runs as f64;
        assert!((share - 0.3).abs() < 0.015, "{share}");
    }

    #[test]
    fn a_zero_capacity_memory_keeps_nothing_and_draw_is_distinct() {
        let mut m = Reservoir::new(0);
        let mut r = rng::stream(0, "t", 0, 0);
        assert_eq!(m.offer(item(0), &mut r), None);
        assert!(m.is_empty());
        let mut m = Reservoir::new(5);
        for i in 0..5 {
            m.offer(item(i), &mut r);
        }
        let mut d = m.draw(3, &mut r);
        assert_eq!(d.len(), 3);
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 3);
        assert_eq!(m.draw(9, &mut r).len(), 5);
        let back = Reservoir::from_state("x", &m.to_state()).unwrap();
        assert_eq!(back, m);
        let bad = StrategyState {
            meta: serde_json::json!({"memory": {"capacity": "a"}}),
            tensors: Default::default(),
        };
        assert!(Reservoir::from_state("x", &bad).is_err());
    }
}
