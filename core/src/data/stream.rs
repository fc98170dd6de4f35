//! Scenarios: a dataset dealt into a stream of tasks.
//!
//! A task owns no pixels: it is a list of sample indices into the dataset's contiguous arrays
//! plus, for permuted tasks, one pixel permutation drawn once per task from the seed. Batches
//! are gathered from those arrays on demand ([`Stream::batch`]), so a replay memory can store
//! [`SampleRef`]s rather than copies.

use super::dataset::{Dataset, Split, Values};
use super::input::Input;
use crate::config::{ClassesPerTask, DataConfig, EvalSplit, Scenario};
use crate::error::{Error, Result};
use crate::rng;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which split of the dataset a sample lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Part {
    /// The training split (also the held-out validation samples).
    Train,
    /// The test split.
    Test,
}

/// One sample of the stream: a row of the dataset as seen by a task (with its permutation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SampleRef {
    /// The task (position in the stream) whose view of the row this is.
    pub task: u16,
    /// Row index in the split.
    pub index: u32,
}

/// One task of the stream.
#[derive(Clone, Debug)]
pub struct Task {
    /// Position in the stream, `0..T`.
    pub index: usize,
    /// The classes the task contains (all classes for permuted tasks).
    pub classes: Vec<usize>,
    /// Training rows (after the validation hold-out and subsampling).
    pub train: Vec<u32>,
    /// Held-out validation rows (from the training split).
    pub validation: Vec<u32>,
    /// Test rows.
    pub test: Vec<u32>,
    /// Pixel permutation `[features]` for domain-incremental tasks.
    pub permutation: Option<Arc<Vec<u32>>>,
}

/// A gathered batch, ready for a step.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Inputs: normalised features `[batch, features]`, or token ids `[batch, len]` for text
    /// data ([`Input`]).
    pub x: Input,
    /// Class labels `[batch]`.
    pub y: Tensor<1, Int>,
    /// Per-sample loss weights `[batch]`: the task loss is `Σ w_i·CE_i`; `None` means the plain
    /// mean (`w_i = 1/batch`).
    pub weights: Option<Tensor<1>>,
    /// Additive logit mask `[batch, classes]` (0 or −1e9), for task-incremental training.
    pub logit_mask: Option<Tensor<2>>,
    /// The samples, in row order.
    pub refs: Vec<SampleRef>,
    /// How many of the rows are new data (the rest were added by strategies, e.g. replay).
    pub new_samples: usize,
}

impl Batch {
    /// The labels `[batch]`, read back to the host.
    pub fn labels(&self) -> Vec<i64> {
        self.y
            .clone()
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap_or_default()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    /// Appends `other`'s rows (with their masks) after this batch's rows. Weights are
    /// dropped: the result's loss is the plain mean over all rows; a strategy that wants other
    /// weights sets them on the result.
    pub fn concat(self, other: Batch) -> Batch {
        let (n1, n2) = (self.len(), other.len());
        let device = self.x.device();
        let logit_mask = match (self.logit_mask, other.logit_mask) {
            (None, None) => None,
            (a, b) => {
                let c = a.as_ref().or(b.as_ref()).map(|m| m.dims()[1]).unwrap_or(0);
                Some(Tensor::cat(
                    vec![
                        a.unwrap_or_else(|| Tensor::zeros([n1, c], &device)),
                        b.unwrap_or_else(|| Tensor::zeros([n2, c], &device)),
                    ],
                    0,
                ))
            }
        };
        let mut refs = self.refs;
        refs.extend(other.refs);
        Batch {
            x: Input::cat(vec![self.x, other.x]),
            y: Tensor::cat(vec![self.y, other.y], 0),
            weights: None,
            logit_mask,
            refs,
            new_samples: self.new_samples,
        }
    }
}

/// A dataset dealt into tasks by a scenario.
#[derive(Clone, Debug)]
pub struct Stream {
    /// The dataset (shared, never copied).
    pub dataset: Arc<Dataset>,
    /// The scenario.
    pub scenario: Scenario,
    /// The tasks in order.
    pub tasks: Vec<Task>,
    /// Logit width (all classes of the dataset).
    pub num_classes: usize,
    /// Which split evaluation reads.
    pub eval_split: EvalSplit,
    /// Class-incremental: mask logits of classes not yet seen.
    pub mask_unseen: bool,
    /// Joint training (`[train] joint`): every task's classes are seen from the first step,
    /// so the unseen-class mask ignores the task it is given and allows the classes of all
    /// tasks. Set by [`crate::registry::Registry::stream`]; false from the builders.
    pub joint: bool,
}

fn subsample(mut rows: Vec<u32>, cap: Option<usize>, rng: &mut rng::Rng) -> Vec<u32> {
    if let Some(cap) = cap
        && rows.len() > cap
    {
        let order = rng::permutation(rows.len(), rng);
        let mut keep: Vec<u32> = order[..cap].iter().map(|&i| rows[i]).collect();
        keep.sort_unstable();
        rows = keep;
    }
    rows
}

/// A permutation of a sample's features (domain-incremental tasks), shared by the task's
/// batches.
type Perm = Option<Arc<Vec<u32>>>;

/// The order classes are dealt in: `class_order`, else `0..classes`.
///
/// # Errors
/// [`Error::Data`] when `class_order` is not a list of distinct classes of the dataset.
fn class_order(cfg: &DataConfig, classes: usize) -> Result<Vec<usize>> {
    let order = cfg
        .class_order
        .clone()
        .unwrap_or_else(|| (0..classes).collect());
    let mut sorted = order.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != order.len() || order.iter().any(|&c| c >= classes) {
        return Err(Error::Data(format!(
            "class_order {order:?} must list distinct classes of 0..{classes}"
        )));
    }
    Ok(order)
}

/// The classes of each task and its pixel permutation (domain-incremental only, drawn once
/// per task from `seed`).
///
/// # Errors
/// [`Error::Data`] for a task count or classes per task that the classes cannot fill.
fn deal(
    cfg: &DataConfig,
    order: &[usize],
    features: usize,
    seed: u64,
) -> Result<(Vec<Vec<usize>>, Vec<Perm>)> {
    Ok(match cfg.scenario {
        Scenario::ClassIncremental | Scenario::TaskIncremental => {
            let per_task = match (&cfg.classes_per_task, cfg.tasks) {
                (Some(c), _) => c.clone(),
                (None, Some(t)) if t > 0 => ClassesPerTask::Each(order.len() / t),
                _ => ClassesPerTask::Each(2),
            };
            let classes = per_task.deal(cfg.tasks, order).map_err(Error::Data)?;
            let perms = vec![None; classes.len()];
            (classes, perms)
        }
        Scenario::DomainIncremental => {
            let tasks = cfg.tasks.unwrap_or(10);
            if tasks == 0 || tasks > u16::MAX as usize {
                return Err(Error::Data(format!(
                    "tasks = {tasks}: a domain-incremental stream needs 1 to {} tasks",
                    u16::MAX
                )));
            }
            let perms = (0..tasks)
                .map(|t| {
                    let mut r = rng::stream(seed, "permutation", t as u64, 0);
                    Some(Arc::new(
                        rng::permutation(features, &mut r)
                            .into_iter()
                            .map(|p| p as u32)
                            .collect(),
                    ))
                })
                .collect();
            (vec![order.to_vec(); tasks], perms)
        }
    })
}

/// Warns on stderr about classes that no task holds, when the task count was derived
/// (explicitly fewer tasks is a choice).
fn warn_unused_classes(dataset: &Dataset, cfg: &DataConfig, per_task_classes: &[Vec<usize>]) {
    let classes = dataset.classes;
    let dealt: std::collections::BTreeSet<usize> =
        per_task_classes.iter().flatten().copied().collect();
    let left: Vec<String> = (0..classes)
        .filter(|c| !dealt.contains(c))
        .map(|c| format!("{c} ({})", dataset.class_names[c]))
        .collect();
    if !left.is_empty() && cfg.tasks.is_none() {
        eprintln!(
            "warning: {} of the {classes} classes are in no task and their samples are not used: {}{} (the tasks hold {} classes; set [data] tasks, classes_per_task or class_order to include them)",
            left.len(),
            left.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if left.len() > 5 { ", …" } else { "" },
            dealt.len()
        );
    }
}

/// The rows of `split` whose label is one of `cls`, in order.
fn rows_of(split: &Split, classes: usize, cls: &[usize]) -> Vec<u32> {
    let mut member = vec![false; classes];
    for &c in cls {
        member[c] = true;
    }
    (0..split.len() as u32)
        .filter(|&i| member[split.labels[i as usize] as usize])
        .collect()
}

/// Task `t` of classes `cls`: its rows split into training and validation, then subsampled,
/// with every draw from the task's stream of `seed`.
///
/// # Errors
/// [`Error::Data`] when the task has no training samples.
fn task(
    dataset: &Dataset,
    cfg: &DataConfig,
    seed: u64,
    t: usize,
    (cls, perm): (Vec<usize>, Perm),
) -> Result<Task> {
    let mut r = rng::stream(seed, "split", t as u64, 0);
    let all = rows_of(&dataset.train, dataset.classes, &cls);
    let order = rng::permutation(all.len(), &mut r);
    let n_val = (all.len() as f64 * cfg.validation).round() as usize;
    let mut validation: Vec<u32> = order[..n_val].iter().map(|&i| all[i]).collect();
    let mut train: Vec<u32> = order[n_val..].iter().map(|&i| all[i]).collect();
    validation.sort_unstable();
    train.sort_unstable();
    let train = subsample(train, cfg.subsample, &mut r);
    let validation = subsample(validation, cfg.test_subsample, &mut r);
    let test = subsample(
        rows_of(&dataset.test, dataset.classes, &cls),
        cfg.test_subsample,
        &mut r,
    );
    if train.is_empty() {
        return Err(Error::Data(format!("task {t} has no training samples")));
    }
    Ok(Task {
        index: t,
        classes: cls,
        train,
        validation,
        test,
        permutation: perm,
    })
}

/// Rows `refs` of `split` as a batch's input on `device`: token ids `[n, len]` as they are
/// stored (no permutation: the trainer refuses a domain-incremental stream of token data),
/// other values normalised `[n, features]`, each through its task's permutation `perm(task)`.
fn gather_input<'a>(
    split: &Split,
    refs: &[SampleRef],
    perm: impl Fn(usize) -> Option<&'a Vec<u32>>,
    device: &Device,
) -> Input {
    let (n, f) = (refs.len(), split.features);
    if let Values::Tokens(v) = &split.values {
        let ids: Vec<i64> = refs
            .iter()
            .flat_map(|r| {
                let i = r.index as usize;
                v[i * f..(i + 1) * f].iter().map(|&id| i64::from(id))
            })
            .collect();
        return Input::Ids(Tensor::from_data(TensorData::new(ids, [n, f]), device));
    }
    let coef = split.coefficients();
    let mut x = Vec::with_capacity(n * f);
    for r in refs {
        let p = perm(r.task as usize).map(Vec::as_slice);
        split.normalized_row_with(&coef, r.index as usize, p, &mut x);
    }
    Input::Float(Tensor::from_data(TensorData::new(x, [n, f]), device))
}

impl Stream {
    /// Deals `dataset` into tasks as `cfg` says, with every random choice drawn from `seed`.
    ///
    /// # Errors
    /// [`Error::Data`] for impossible settings (more classes per task than classes, a class
    /// order that is not a permutation, zero tasks).
    pub fn build(dataset: Arc<Dataset>, cfg: &DataConfig, seed: u64) -> Result<Self> {
        let order = class_order(cfg, dataset.classes)?;
        let (per_task_classes, perms) = deal(cfg, &order, dataset.train.features, seed)?;
        warn_unused_classes(&dataset, cfg, &per_task_classes);
        let tasks = per_task_classes
            .into_iter()
            .zip(perms)
            .enumerate()
            .map(|(t, dealt)| task(&dataset, cfg, seed, t, dealt))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            num_classes: dataset.classes,
            dataset,
            scenario: cfg.scenario,
            tasks,
            eval_split: cfg.evaluate_on,
            mask_unseen: cfg.mask_logits,
            joint: false,
        })
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the stream has no tasks.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The rows evaluation reads for task `t` (test or validation).
    pub fn eval_rows(&self, t: usize) -> (&[u32], Part) {
        match self.eval_split {
            EvalSplit::Test => (&self.tasks[t].test, Part::Test),
            EvalSplit::Validation => (&self.tasks[t].validation, Part::Train),
        }
    }

    /// The classes whose logits are allowed for a sample of task `t`, after training up to
    /// task `seen` (`None`: no mask). Task-incremental: task `t`'s classes. Class-incremental
    /// with `mask_logits`: the classes of tasks `0..=seen`, whatever `t` — a task not yet
    /// trained is scored against the classes seen so far, so it scores 0 as it does without
    /// the mask. In a [`Stream::joint`] stream every task is seen whatever `seen` says.
    pub fn allowed_classes(&self, t: usize, seen: usize) -> Option<Vec<usize>> {
        let last = self.tasks.len().saturating_sub(1);
        let seen = if self.joint { last } else { seen.min(last) };
        match self.scenario {
            Scenario::TaskIncremental => Some(self.tasks[t].classes.clone()),
            Scenario::ClassIncremental if self.mask_unseen => Some(
                self.tasks[..=seen]
                    .iter()
                    .flat_map(|k| k.classes.iter().copied())
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The additive logit mask `[refs, classes]` of rows `refs`: 0 at the classes `allowed`
    /// gives for a row's task, −1e9 elsewhere (what [`Batch::logit_mask`] holds).
    pub fn logit_mask(
        &self,
        refs: &[SampleRef],
        device: &Device,
        allowed: impl Fn(usize) -> Vec<usize>,
    ) -> Tensor<2> {
        let (n, c) = (refs.len(), self.num_classes);
        let mut m = vec![-1e9f32; n * c];
        for (row, r) in m.chunks_mut(c.max(1)).zip(refs) {
            for k in allowed(r.task as usize) {
                if let Some(v) = row.get_mut(k) {
                    *v = 0.0;
                }
            }
        }
        Tensor::from_data(TensorData::new(m, [n, c]), device)
    }

    /// Gathers `refs` from split `part` into a batch on `device`.
    ///
    /// Masks: task-incremental rows get the mask of their own task; class-incremental rows with
    /// `mask_logits` the classes seen up to `seen`.
    pub fn batch(&self, refs: &[SampleRef], part: Part, seen: usize, device: &Device) -> Batch {
        let split = match part {
            Part::Train => &self.dataset.train,
            Part::Test => &self.dataset.test,
        };
        let f = split.features;
        let n = refs.len();
        let y: Vec<i64> = refs
            .iter()
            .map(|r| i64::from(split.labels[r.index as usize]))
            .collect();
        let x = gather_input(
            split,
            refs,
            |t| self.tasks[t].permutation.as_deref(),
            device,
        );
        let logit_mask = self.allowed_classes(0, seen).map(|_| {
            self.logit_mask(refs, device, |t| {
                self.allowed_classes(t, seen).unwrap_or_default()
            })
        });
        debug_assert_eq!(x.dims(), [n, f]);
        Batch {
            x,
            y: Tensor::from_data(TensorData::new(y, [n]), device),
            weights: None,
            logit_mask,
            refs: refs.to_vec(),
            new_samples: n,
        }
    }

    /// The training samples of task `t`, shuffled for `epoch` from the seed.
    pub fn epoch_order(&self, t: usize, epoch: usize, seed: u64) -> Vec<SampleRef> {
        let rows = &self.tasks[t].train;
        let mut r = rng::stream(seed, "order", t as u64, epoch as u64);
        rng::permutation(rows.len(), &mut r)
            .into_iter()
            .map(|i| SampleRef {
                task: t as u16,
                index: rows[i],
            })
            .collect()
    }

    /// The training samples of all tasks at once (joint training), shuffled for `epoch`.
    pub fn joint_order(&self, epoch: usize, seed: u64) -> Vec<SampleRef> {
        let all: Vec<SampleRef> = self
            .tasks
            .iter()
            .flat_map(|t| {
                t.train.iter().map(move |&i| SampleRef {
                    task: t.index as u16,
                    index: i,
                })
            })
            .collect();
        let mut r = rng::stream(seed, "order-joint", 0, epoch as u64);
        rng::permutation(all.len(), &mut r)
            .into_iter()
            .map(|i| all[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::dataset::{Dataset, Split};

    /// 10 classes × 6 train and 3 test samples each, 4 "pixels" = [label, index, 0, 1].
    fn toy() -> Arc<Dataset> {
        let split = |per: usize| {
            let mut images = Vec::new();
            let mut labels = Vec::new();
            for i in 0..10 * per {
                let l = (i % 10) as u8;
                images.extend_from_slice(&[l, i as u8, 0, 255]);
                labels.push(u32::from(l));
            }
            Split::bytes(images, labels, 4, 0.0, 1.0 / 255.0)
        };
        Arc::new(Dataset::new(
            "toy",
            "toy".into(),
            split(6),
            split(3),
            crate::data::InputShape::Image {
                channels: 1,
                height: 2,
                width: 2,
            },
            10,
        ))
    }

    fn cfg(text: &str) -> DataConfig {
        toml::from_str(&format!("dataset = \"fashion-mnist\"\n{text}")).unwrap()
    }

    #[test]
    fn split_deals_classes_in_order() {
        let s = Stream::build(toy(), &cfg("tasks = 5\nclasses_per_task = 2"), 0).unwrap();
        assert_eq!(s.len(), 5);
        let classes: Vec<Vec<usize>> = s.tasks.iter().map(|t| t.classes.clone()).collect();
        assert_eq!(
            classes,
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7], vec![8, 9]]
        );
        for t in &s.tasks {
            assert_eq!(t.train.len(), 12);
            assert_eq!(t.test.len(), 6);
            for &i in &t.train {
                assert!(
                    t.classes
                        .contains(&(s.dataset.train.labels[i as usize] as usize))
                );
            }
            assert!(t.permutation.is_none());
        }
    }

    #[test]
    fn class_order_and_validation_hold_out() {
        let s = Stream::build(
            toy(),
            &cfg("tasks = 2\nclasses_per_task = 3\nclass_order = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]\nvalidation = 0.25"),
            1,
        )
        .unwrap();
        assert_eq!(s.tasks[0].classes, vec![9, 8, 7]);
        assert_eq!(s.tasks[1].classes, vec![6, 5, 4]);
        // 18 rows per task: round(18 × 0.25) = 5 held out, 13 kept, disjoint.
        assert_eq!(s.tasks[0].validation.len(), 5);
        assert_eq!(s.tasks[0].train.len(), 13);
        assert!(
            s.tasks[0]
                .validation
                .iter()
                .all(|v| !s.tasks[0].train.contains(v))
        );
    }

    #[test]
    fn impossible_splits_are_errors() {
        assert!(Stream::build(toy(), &cfg("tasks = 6\nclasses_per_task = 2"), 0).is_err());
        assert!(Stream::build(toy(), &cfg("class_order = [0, 0, 1]"), 0).is_err());
        assert!(Stream::build(toy(), &cfg("classes_per_task = 11"), 0).is_err());
    }

    #[test]
    fn uneven_tasks_deal_their_counts_in_both_split_scenarios() {
        for scenario in ["class-incremental", "task-incremental"] {
            let c = cfg(&format!(
                "scenario = \"{scenario}\"\nclasses_per_task = [6, 1, 2]\nclass_order = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]"
            ));
            let s = Stream::build(toy(), &c, 0).unwrap();
            let classes: Vec<Vec<usize>> = s.tasks.iter().map(|t| t.classes.clone()).collect();
            assert_eq!(classes, vec![vec![9, 8, 7, 6, 5, 4], vec![3], vec![2, 1]]);
            // 6 training and 3 test samples a class.
            let sizes: Vec<(usize, usize)> = s
                .tasks
                .iter()
                .map(|t| (t.train.len(), t.test.len()))
                .collect();
            assert_eq!(sizes, vec![(36, 18), (6, 3), (12, 6)]);
            // Task-IL masks to the task's own classes; class-IL (no mask_logits) masks nothing.
            let b = s.batch(
                &[SampleRef { task: 2, index: 1 }],
                Part::Train,
                2,
                &Device::flex(),
            );
            let allowed = b.logit_mask.map(|m| {
                let m = m.into_data().try_to_vec::<f32>().unwrap();
                (0..10).filter(|&k| m[k] == 0.0).collect::<Vec<_>>()
            });
            let want = (scenario == "task-incremental").then(|| vec![1, 2]);
            assert_eq!(allowed, want, "{scenario}");
        }
        let e = |text: &str| Stream::build(toy(), &cfg(text), 0).unwrap_err().to_string();
        assert!(e("classes_per_task = [6, 5]").contains("deals 11 classes"));
        assert!(e("tasks = 3\nclasses_per_task = [6, 1]").contains("lists 2 tasks"));
    }

    #[test]
    fn permutations_are_fixed_per_task_and_seed() {
        let c = cfg("scenario = \"domain-incremental\"\ntasks = 3");
        let a = Stream::build(toy(), &c, 7).unwrap();
        let b = Stream::build(toy(), &c, 7).unwrap();
        let other = Stream::build(toy(), &c, 8).unwrap();
        let perm = |s: &Stream, t: usize| s.tasks[t].permutation.as_ref().unwrap().to_vec();
        for t in 0..3 {
            assert_eq!(perm(&a, t), perm(&b, t));
            let mut sorted = perm(&a, t);
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2, 3]);
            assert_eq!(a.tasks[t].classes, (0..10).collect::<Vec<_>>());
        }
        assert!((0..3).any(|t| perm(&a, t) != perm(&other, t)));
        // The gathered pixels follow the task's permutation, identically in every epoch.
        let device = burn::tensor::Device::flex();
        for epoch in 0..2 {
            let order = a.epoch_order(1, epoch, 7);
            let batch = a.batch(&order[..1], Part::Train, 1, &device);
            let got = batch
                .x
                .float()
                .unwrap()
                .to_data()
                .try_to_vec::<f32>()
                .unwrap();
            let row = a.dataset.train.row(order[0].index as usize).unwrap();
            // mean 0 and std 1/255 make the normalised value the raw byte.
            let want: Vec<f32> = perm(&a, 1)
                .iter()
                .map(|&j| f32::from(row[j as usize]))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn epoch_orders_are_shuffles_that_change_per_epoch() {
        let s = Stream::build(toy(), &cfg(""), 3).unwrap();
        let e0 = s.epoch_order(0, 0, 3);
        let e1 = s.epoch_order(0, 1, 3);
        assert_eq!(e0, s.epoch_order(0, 0, 3));
        assert_ne!(e0, e1);
        let mut a: Vec<u32> = e0.iter().map(|r| r.index).collect();
        a.sort();
        assert_eq!(a, s.tasks[0].train);
        assert!(e0.iter().all(|r| r.task == 0));
    }

    #[test]
    fn task_incremental_masks_other_classes() {
        let s = Stream::build(toy(), &cfg("scenario = \"task-incremental\""), 0).unwrap();
        let device = burn::tensor::Device::flex();
        let refs = [SampleRef { task: 1, index: 2 }];
        let b = s.batch(&refs, Part::Train, 1, &device);
        let m = b
            .logit_mask
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let allowed: Vec<usize> = (0..10).filter(|&k| m[k] == 0.0).collect();
        assert_eq!(allowed, vec![2, 3]);
    }
}
