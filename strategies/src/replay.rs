//! `replay`: dynamic experience replay — one memory of `capacity` samples shared by all past
//! tasks, mixed into training batches (Rolnick et al. 2019; Chaudhry et al. 2019, "On Tiny
//! Episodic Memories"), with the seed's three improvements, each of which can be turned off:
//!
//! 1. **Entropy allocation** (`allocation`). Each task's share of the memory is proportional to
//!    its complexity, re-balanced whenever a task arrives (older shares shrink, never below
//!    `min_per_task`). `entropy`: the model's mean predictive entropy `mean_n H(p(·|x_n))` on
//!    the task's data, measured right after training the task (a task the model is unsure
//!    about gets more memory); `labels`: the entropy of the task's label distribution; `equal`:
//!    equal shares (Avalanche's experience-balanced buffer).
//! 2. **Stratified selection** (`selection`). `stratified` scores candidates by per-sample loss
//!    (or entropy, `stratify_by`), cuts them into `strata` equal-size quantile bins and keeps
//!    the highest-scoring samples of *every* bin, so the memory holds easy, typical and hard
//!    samples alike; `class_balanced` keeps equal counts per class; `reservoir` is uniform
//!    (Vitter's algorithm R).
//! 3. **Online priorities** (`priority`). Each stored sample carries a priority, initialised to
//!    its loss at selection and updated after every step that replays it:
//!    `p ← decay·p + (1 − decay)·loss`. Memory rows are drawn with probability `∝ p^alpha`
//!    (with replacement, no importance correction); `priority = false` draws uniformly.
//!
//! **Mixing** — two exclusive modes (setting both is a config error):
//! - `ratio` (default 0.2 when `every` is unset): `round(ratio × batch)` memory rows are
//!   *added* to every batch; the loss is the plain mean over all rows. `ratio = 1.0` at batch
//!   128 is 128 new + 128 memory rows, the volume of Avalanche's replay.
//! - `every = k`: every k-th batch gets as many memory rows as new ones, and the loss is
//!   `mean(new) + weight · mean(memory)` (the seed's schedule, `weight` default 0.3).
//!
//! The memory stores [`SampleRef`]s into the dataset (no pixel copies): 500 samples cost a few
//! kilobytes. Sampling draws only the rows a step needs, so a memory larger than an epoch is
//! never iterated whole.

use engram_core::burn::tensor::{Device, Tensor, TensorData, activation};
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, Part, SampleRef};
use engram_core::model::{Activation, ForwardCtx};
use engram_core::registry::{BuildContext, Factory, Registration};
use engram_core::strategy::{BatchContext, ForgettingStrategy, StepContext, StrategyState, TaskContext};
use engram_core::{Error, Result, burn, rng};
use burn::module::Module;
use rand::Rng as _;
use serde::{Deserialize, Serialize};

/// How the memory is divided between tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Allocation {
    /// Proportional to the model's mean predictive entropy on the task.
    #[default]
    Entropy,
    /// Proportional to the entropy of the task's label distribution.
    Labels,
    /// Equal shares.
    Equal,
}

/// How samples are chosen inside a task's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Uniform (reservoir sampling).
    Reservoir,
    /// Equal counts per class.
    ClassBalanced,
    /// The top of every quantile stratum of the score.
    #[default]
    Stratified,
}

/// The score strata are cut on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Score {
    /// Per-sample cross-entropy.
    #[default]
    Loss,
    /// Predictive entropy.
    Entropy,
}

/// `[[forgetting]] type = "replay"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayParams {
    /// Memory size in samples, shared by all tasks. Default 500.
    pub capacity: usize,
    /// `entropy` (default), `labels` or `equal`.
    pub allocation: Allocation,
    /// Smallest share of a past task, in samples. Default 10.
    pub min_per_task: usize,
    /// `stratified` (default), `class_balanced` or `reservoir`.
    pub selection: Selection,
    /// Number of strata for `stratified`. Default 4.
    pub strata: usize,
    /// `loss` (default) or `entropy`.
    pub stratify_by: Score,
    /// Candidates scored per task for selection (0 = all). Default 2000.
    pub candidates: usize,
    /// Draw memory rows by priority. Default true.
    pub priority: bool,
    /// Sampling exponent: `P(i) ∝ p_i^alpha`. Default 1.
    pub priority_alpha: f64,
    /// Priority update `p ← decay·p + (1 − decay)·loss`. Default 0.5.
    pub priority_decay: f64,
    /// Memory rows per new row, added to every batch (default 0.2 when `every` is unset).
    pub ratio: Option<f64>,
    /// Replay every k-th batch instead (exclusive with `ratio`).
    pub every: Option<usize>,
    /// Loss weight of the memory rows with `every` (default 0.3).
    pub weight: Option<f64>,
    /// `ratio` mode loss: `class` weighs rows so that every class present in the mixed batch
    /// contributes equally (`w_i = 1 / (classes · count(class_i))`), countering the imbalance
    /// between the new task's classes and the memory's; `none` is the plain mean. Default
    /// `class`.
    pub balance: Balance,
}

/// Loss weighting of a mixed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Every class in the batch weighs the same.
    #[default]
    Class,
    /// Plain mean over rows.
    None,
}

impl Default for ReplayParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            allocation: Allocation::Entropy,
            min_per_task: 10,
            selection: Selection::Stratified,
            strata: 4,
            stratify_by: Score::Loss,
            candidates: 2000,
            priority: true,
            priority_alpha: 1.0,
            priority_decay: 0.5,
            ratio: None,
            every: None,
            weight: None,
            balance: Balance::Class,
        }
    }
}

/// How memory rows are mixed in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mixing {
    Ratio(f64),
    Every { k: usize, weight: f64 },
}

/// One stored sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    /// The sample.
    pub r: SampleRef,
    /// Its class.
    pub class: u8,
    /// Its selection score (loss or entropy when selected).
    pub score: f32,
    /// Its sampling priority.
    pub priority: f32,
}

/// The replay strategy.
pub struct Replay {
    p: ReplayParams,
    mixing: Mixing,
    /// Per past task (stream position), its stored samples.
    buffers: Vec<Vec<Slot>>,
    /// Per past task, its complexity.
    complexity: Vec<f64>,
    /// Per past task, its available sample count (caps its share).
    available: Vec<usize>,
    /// `(task, slot)` of the memory rows of the last prepared batch, in row order.
    drawn: Vec<(usize, usize)>,
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

/// Keeps `k` of `items` by `rule` (see the module docs); deterministic given `rng`.
pub fn select(items: Vec<Slot>, k: usize, rule: Selection, strata: usize, rng: &mut rng::Rng) -> Vec<Slot> {
    if items.len() <= k {
        return items;
    }
    match rule {
        Selection::Reservoir => {
            let mut keep: Vec<Slot> = items[..k].to_vec();
            for (i, item) in items.iter().enumerate().skip(k) {
                let j = rng.random_range(0..=i);
                if j < k {
                    keep[j] = *item;
                }
            }
            keep
        }
        Selection::ClassBalanced => {
            let mut by_class: Vec<Vec<Slot>> = vec![Vec::new(); 256];
            for s in items {
                by_class[s.class as usize].push(s);
            }
            let mut classes: Vec<Vec<Slot>> = by_class.into_iter().filter(|v| !v.is_empty()).collect();
            for c in classes.iter_mut() {
                let perm = rng::permutation(c.len(), rng);
                *c = perm.into_iter().map(|i| c[i]).collect();
            }
            let mut keep = Vec::with_capacity(k);
            let mut round = 0;
            while keep.len() < k {
                for c in &classes {
                    if keep.len() < k && round < c.len() {
                        keep.push(c[round]);
                    }
                }
                round += 1;
            }
            keep
        }
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
                keep.extend(sorted[lo..hi].iter().rev().take(quota).copied());
            }
            keep
        }
    }
}

fn entropy_of(probs: &[f32], classes: usize) -> Vec<f32> {
    probs
        .chunks(classes)
        .map(|p| -p.iter().filter(|&&v| v > 0.0).map(|&v| v * v.ln()).sum::<f32>())
        .collect()
}

impl Replay {
    /// Builds the strategy; `num_tasks` checks that the minimum shares fit.
    ///
    /// # Errors
    /// [`Error::Config`] (positioned) when `ratio` and `every` are both set, a value is out of
    /// range, or `min_per_task × tasks > capacity`.
    pub fn new(p: ReplayParams, num_tasks: usize, src: Option<&ParamSource>) -> Result<Self> {
        let err = |key: &str, m: String, hint: Option<String>| match src {
            Some(s) => s.key_error(key, m, hint),
            None => Error::Strategy {
                strategy: "replay".into(),
                message: m,
            },
        };
        let mixing = match (p.ratio, p.every) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "every",
                    "replay: `ratio` and `every` are exclusive mixing modes".into(),
                    Some("keep `ratio` (memory rows added to every batch) or `every` + `weight`".into()),
                ));
            }
            (None, Some(0)) => return Err(err("every", "replay: `every` must be ≥ 1".into(), None)),
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
                if !(r >= 0.0 && r.is_finite()) {
                    return Err(err("ratio", format!("replay: ratio {r} must be ≥ 0"), None));
                }
                Mixing::Ratio(r)
            }
        };
        if p.min_per_task.saturating_mul(num_tasks) > p.capacity {
            return Err(err(
                "min_per_task",
                format!(
                    "replay: min_per_task × tasks = {} × {num_tasks} exceeds capacity {}",
                    p.min_per_task, p.capacity
                ),
                Some(format!(
                    "lower min_per_task to at most {} or raise capacity",
                    p.capacity / num_tasks.max(1)
                )),
            ));
        }
        if !(0.0..=1.0).contains(&p.priority_decay) {
            return Err(err("priority_decay", "replay: priority_decay must be in [0, 1]".into(), None));
        }
        Ok(Self {
            p,
            mixing,
            buffers: Vec::new(),
            complexity: Vec::new(),
            available: Vec::new(),
            drawn: Vec::new(),
        })
    }

    /// Stored samples per past task.
    pub fn buffers(&self) -> &[Vec<Slot>] {
        &self.buffers
    }

    /// Total stored samples.
    pub fn len(&self) -> usize {
        self.buffers.iter().map(Vec::len).sum()
    }

    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds task `t` (its scored candidates and complexity) and re-balances every share; a
    /// task's share never exceeds its candidates (the shares then sum to less than capacity).
    pub fn add_task(&mut self, t: usize, candidates: Vec<Slot>, complexity: f64, seed: u64) {
        while self.buffers.len() <= t {
            self.buffers.push(Vec::new());
            self.complexity.push(0.0);
            self.available.push(0);
        }
        self.complexity[t] = complexity;
        self.available[t] = candidates.len();
        self.buffers[t] = candidates;
        let s = shares(self.p.capacity, self.p.min_per_task, &self.complexity, &self.available);
        for (k, share) in s.into_iter().enumerate() {
            let mut r = rng::stream(seed, "replay-select", k as u64, t as u64);
            let items = std::mem::take(&mut self.buffers[k]);
            self.buffers[k] = select(items, share, self.p.selection, self.p.strata, &mut r);
        }
    }

    /// Draws `m` memory slots, by priority or uniformly, with replacement.
    fn draw(&self, m: usize, r: &mut rng::Rng) -> Vec<(usize, usize)> {
        let flat: Vec<(usize, usize, f64)> = self
            .buffers
            .iter()
            .enumerate()
            .flat_map(|(t, b)| {
                b.iter().enumerate().map(move |(i, s)| (t, i, f64::from(s.priority)))
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

impl ForgettingStrategy for Replay {
    fn name(&self) -> &str {
        "replay"
    }

    fn prepare_batch(&mut self, batch: Batch, cx: &BatchContext<'_>) -> Result<Batch> {
        self.drawn.clear();
        if self.is_empty() {
            return Ok(batch);
        }
        let n = batch.len();
        let (m, weight) = match self.mixing {
            Mixing::Ratio(r) => {
                let r = cx.controls.replay_ratio.unwrap_or(r);
                ((r * n as f64).round() as usize, None)
            }
            Mixing::Every { k, weight } => {
                if (cx.position.step_in_task + 1) % k != 0 {
                    return Ok(batch);
                }
                (n, Some(weight))
            }
        };
        if m == 0 {
            return Ok(batch);
        }
        let mut r = rng::stream(cx.seed, "replay-draw", cx.position.task as u64, cx.position.global_step as u64);
        self.drawn = self.draw(m, &mut r);
        let refs: Vec<SampleRef> = self.drawn.iter().map(|&(t, i)| self.buffers[t][i].r).collect();
        let memory = cx.stream.batch(&refs, Part::Train, cx.position.task, cx.device);
        let new_classes: Vec<i64> = if weight.is_none() && self.p.balance == Balance::Class {
            batch.y.clone().into_data().convert::<i64>().try_to_vec::<i64>().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut out = batch.concat(memory);
        if let Some(w) = weight {
            let mut v = vec![1.0 / n as f32; n];
            v.extend(std::iter::repeat_n(w as f32 / m as f32, m));
            out.weights = Some(Tensor::from_data(TensorData::new(v, [n + m]), cx.device));
        } else if self.p.balance == Balance::Class {
            let mut classes = new_classes;
            classes.extend(self.drawn.iter().map(|&(t, i)| i64::from(self.buffers[t][i].class)));
            let mut counts = [0usize; 256];
            for &c in &classes {
                counts[c as usize] += 1;
            }
            let distinct = counts.iter().filter(|&&c| c > 0).count() as f32;
            let v: Vec<f32> = classes
                .iter()
                .map(|&c| 1.0 / (distinct * counts[c as usize] as f32))
                .collect();
            out.weights = Some(Tensor::from_data(TensorData::new(v, [n + m]), cx.device));
        }
        Ok(out)
    }

    fn after_step(&mut self, cx: &StepContext<'_>) -> Result<()> {
        if !self.p.priority || self.drawn.is_empty() {
            return Ok(());
        }
        let Some(losses) = cx.sample_losses else {
            return Ok(());
        };
        let d = self.p.priority_decay as f32;
        for (row, &(t, i)) in self.drawn.iter().enumerate() {
            if let Some(&l) = losses.get(cx.batch.new_samples + row) {
                let s = &mut self.buffers[t][i];
                s.priority = d * s.priority + (1.0 - d) * l;
            }
        }
        Ok(())
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let t = cx.task.index;
        if cx.task.joint {
            return Ok(());
        }
        let mut refs = cx.train_refs();
        let mut r = rng::stream(cx.seed, "replay-candidates", t as u64, 0);
        let order = rng::permutation(refs.len(), &mut r);
        refs = order.into_iter().map(|i| refs[i]).collect();
        if self.p.candidates > 0 {
            refs.truncate(self.p.candidates);
        }
        // Score the candidates without a graph: per-sample loss and predictive entropy.
        let valid = cx.model.valid();
        let inner = cx.device.clone().inner();
        let classes = cx.stream.num_classes;
        let ctx = ForwardCtx {
            task: (cx.stream.scenario == engram_core::config::Scenario::TaskIncremental).then_some(t),
        };
        let mut slots = Vec::with_capacity(refs.len());
        let mut entropy_sum = 0.0f64;
        for chunk in refs.chunks(500) {
            let b = cx.stream.batch(chunk, Part::Train, t, &inner);
            let logits = valid.forward(Activation::Flat(b.x.clone()), &ctx);
            let logits = match &b.logit_mask {
                Some(m) => logits + m.clone(),
                None => logits,
            };
            let probs: Vec<f32> = activation::softmax(logits.clone(), 1)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default();
            let ce: Vec<f32> = engram_core::train::trainer::per_sample_cross_entropy(logits, &b)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default();
            let ent = entropy_of(&probs, classes);
            let labels: Vec<i64> = b.y.into_data().convert::<i64>().try_to_vec::<i64>().unwrap_or_default();
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
                    priority: if self.p.priority { ce[k].max(1e-3) } else { 1.0 },
                });
            }
        }
        let complexity = match self.p.allocation {
            Allocation::Entropy => entropy_sum / slots.len().max(1) as f64,
            Allocation::Labels => {
                let mut counts = [0usize; 256];
                for s in &slots {
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
        };
        self.add_task(t, slots, complexity, cx.seed);
        Ok(())
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({
                "buffers": self.buffers,
                "complexity": self.complexity,
                "available": self.available,
            }),
            tensors: Default::default(),
        })
    }

    fn load_state(&mut self, state: StrategyState, _device: &Device) -> Result<()> {
        let bad = |e: serde_json::Error| Error::Strategy {
            strategy: "replay".into(),
            message: format!("saved state: {e}"),
        };
        self.buffers = serde_json::from_value(state.meta["buffers"].clone()).map_err(bad)?;
        self.complexity = serde_json::from_value(state.meta["complexity"].clone()).map_err(bad)?;
        self.available = serde_json::from_value(state.meta["available"].clone()).map_err(bad)?;
        self.drawn.clear();
        Ok(())
    }
}

fn build(src: &ParamSource, cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: ReplayParams = src.parse()?;
    Ok(Box::new(Replay::new(p, cx.num_tasks, Some(src))?))
}

fn defaults() -> toml::Table {
    let mut t = engram_core::registry::defaults_table::<ReplayParams>();
    t.insert("ratio".into(), toml::Value::Float(0.2));
    t.insert("weight".into(), toml::Value::Float(0.3));
    t
}

engram_core::inventory::submit! {
    Registration {
        name: "replay",
        summary: "dynamic experience replay: entropy-allocated shared memory, stratified selection, online priorities",
        defaults,
        factory: Factory::Forgetting(build),
    }
}
