//! `per-task-lora`: a new LoRA adapter for every task, the earlier ones kept frozen, and each
//! input answered by the adapter of the task it is inferred to come from.
//!
//! With `[[memory]] type = "lora"` (`merge = "none"`) only the adapters and the head train. At
//! a task's end this strategy keeps the task's *expert*, every trainable parameter's value (the
//! adapters, the head, `lora`'s `train` modules: what PEFT saves as an adapter), and attaches
//! fresh adapters for the next task (`A ~ N(0, σ = 1/r)` redrawn, `B = 0`, as Burn's LoRA
//! starts them), or with `init = "previous"` lets the next task train on from the adapters just
//! kept. No sample is stored and nothing is merged into the base. A task trains its expert on
//! its own classes' logits (`train_classes = "task"`, the default): the expert answers among
//! no others.
//!
//! At evaluation ([`ForgettingStrategy::infer`]):
//! - where the task is given (a task-incremental stream, the task-IL view), its expert answers;
//! - otherwise (class-incremental inference) the task is inferred from the *task prototype*:
//!   the mean of the L2-normalised pooled features `φ(x)` of the task's training inputs under
//!   the frozen pretrained model (adapters off, the trainable modules as the first task found
//!   them: the model a query function reads in L2P, Wang et al. CVPR 2022, §4.2), and an input
//!   goes to `k* = argmax_k cos(φ(x), μ_k)`. Expert `k*` answers, its logits restricted to task
//!   `k*`'s classes (task-id prediction, then within-task prediction: Kim et al. 2022, "A
//!   Theoretical Study on Solving Continual Learning", eq. 1). With `prototypes = "class"` a
//!   task has one prototype a class (its class means) and an input goes to the task of the
//!   nearest one. With `distance = "mahalanobis"` "nearest" is the Mahalanobis distance to the
//!   prototypes' raw means under one covariance shared by every task's groups (the pooled
//!   within-group covariance, Ledoit–Wolf shrunk: [`crate::mahalanobis`]) instead of the
//!   cosine: a feature direction along which every task's documents spread counts less than
//!   one along which they do not.
//!
//! How often the task was inferred right is the report's `task_id_matrix`. A wrong task is a
//! wrong class: class-IL accuracy is at most the task-id accuracy times the task-IL view's.

use crate::mahalanobis::{Nearest, Pooled};
use engram_core::burn::module::Module;
use engram_core::burn::tensor::{Device, Distribution, Tensor, TensorData};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, Part, SampleRef};
use engram_core::model::{Activation, ForwardCtx, Model};
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    BatchContext, ForgettingStrategy, Inference, LmRefusal, StateTensor, StrategyState,
    TaskContext, TaskInfo,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a task's prototypes are ([`PerTaskLoraParams::prototypes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prototypes {
    /// One per task: the mean feature of its training inputs (the and L2P's query
    /// matching; the default).
    #[default]
    Task,
    /// One per class of the task: the class means (iCaRL's nearest-mean rule, Rebuffi et al.
    /// 2017, §2.1, used to pick the task): a task of several topics is several clusters,
    /// which one mean blurs.
    Class,
}

/// How an input's feature is compared with the prototypes ([`PerTaskLoraParams::distance`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distance {
    /// The largest cosine with the normalised prototype (L2P's query matching; the default).
    #[default]
    Cosine,
    /// The smallest Mahalanobis distance to the prototype's mean under the tied, Ledoit–Wolf
    /// shrunk within-group covariance of every task's features (Lee et al. 2018, eq. 2;
    /// [`crate::mahalanobis`]). Adds a `[features, features]` matrix to the state (576 KiB at
    /// 384 features).
    Mahalanobis,
}

/// What a new task's adapters start from ([`PerTaskLoraParams::init`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Fresh: `A ~ N(0, σ = 1/r)` redrawn, `B = 0`, as Burn's LoRA starts them (the default;
    /// every expert is its own task's alone).
    #[default]
    Fresh,
    /// The previous task's trained adapters (a copy: the kept expert does not move): forward
    /// transfer, as sequential fine-tuning has, where tasks share their classes or their
    /// features (two releases of one spam corpus); the earlier experts stay frozen all the same.
    Previous,
}

/// Which logits a training step's softmax runs over ([`PerTaskLoraParams::train_classes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainClasses {
    /// The row's task's own classes (the default): its expert only ever answers among them,
    /// so it learns the within-task prediction of Kim et al. 2022 (eq. 1) and spends no step
    /// pushing down the earlier tasks' logits (the "labels trick", Zeno et al. 2018, §4).
    #[default]
    Task,
    /// What `[data]` allows: the classes seen so far under `mask_logits`, every class without
    /// (the cross-entropy of every other strategy).
    Seen,
}

/// `[[forgetting]] type = "per-task-lora"` keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerTaskLoraParams {
    /// Training samples of a task its prototypes are the means over (its first ones in stored
    /// order); 0 (the default) takes them all. One forward pass (no graph) over them at the
    /// task's end.
    pub prototype_samples: usize,
    /// `task` (default): one prototype a task; `class`: one a class of the task, an input
    /// going to the task of the nearest class mean.
    pub prototypes: Prototypes,
    /// `cosine` (default) or `mahalanobis`: how an input's feature is compared with the
    /// prototypes ([`Distance`]).
    pub distance: Distance,
    /// `fresh` (default) or `previous`: what a new task's adapters start from ([`Init`]).
    pub init: Init,
    /// `task` (default) or `seen`: which logits the training loss's softmax runs over
    /// ([`TrainClasses`]).
    pub train_classes: TrainClasses,
}

/// A finished task's expert: its classes, its trainable parameters' values and its prototype.
#[derive(Clone, Debug)]
struct Expert {
    /// The task's classes (the logits an answer keeps).
    classes: Vec<usize>,
    /// Trainable parameter path → value `[numel]` (untracked).
    params: BTreeMap<String, Tensor<1>>,
    /// The prototypes `μ` `[features]` each, L2-normalised: one, or one a class (none until
    /// the task's `after_task`).
    prototypes: Vec<Vec<f32>>,
    /// The same groups' raw means `[features]` of the normalised features (`distance =
    /// "mahalanobis"` only; empty otherwise).
    means: Vec<Vec<f64>>,
}

/// The per-task-adapters strategy (see the module docs).
#[derive(Debug, Default)]
pub struct PerTaskLora {
    p: PerTaskLoraParams,
    seed: u64,
    /// Samples per feature pass.
    batch: usize,
    /// The trainable parameters' values as the first task found them (adapters with `B = 0`):
    /// loaded into the model, they give the frozen pretrained model the prototypes read.
    origin: BTreeMap<String, Tensor<1>>,
    experts: Vec<Expert>,
    /// Every finished task's groups' pooled within-group statistics (`distance =
    /// "mahalanobis"`), its scatter rounded to f32 after each task as the state saves it.
    pooled: Pooled,
    /// The Mahalanobis router over every expert's means, in expert order with the expert of
    /// each mean; rebuilt from `pooled` and the means when a task ends or the state loads.
    router: Option<(Nearest, Vec<usize>)>,
    /// What evaluation has computed (see [`Cache`]).
    cache: std::sync::Mutex<Cache>,
    /// The config entry it came from (positions its errors about the run's setup).
    src: Option<ParamSource>,
}

/// Answers that cannot change while the run goes on, by input row (a 64-bit hash of its
/// values): the frozen model's feature of a row (routing), and an expert's logits for a row
/// (an expert is frozen once kept, and so is the base). Each row of the evaluation set is then
/// run once through the router and once through each expert over the whole run, not once per
/// row of the accuracy matrix and view. Cleared when the state is loaded (a rollback).
#[derive(Debug, Default)]
struct Cache {
    features: std::collections::HashMap<u64, Vec<f32>>,
    logits: std::collections::HashMap<(usize, u64), Vec<f32>>,
}

/// A hash of each row of `input` (token ids or flat features: the inputs a text or tabular
/// evaluation gives), `None` for other activations (not cached).
fn row_keys(input: &Activation) -> Option<Vec<u64>> {
    use std::hash::{Hash, Hasher};
    let n = input.batch_size();
    let words: Vec<u64> = match input {
        Activation::Ids(t) => t
            .clone()
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .ok()?
            .into_iter()
            .map(|v| v as u64)
            .collect(),
        Activation::Flat(t) => t
            .clone()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .ok()?
            .into_iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        _ => return None,
    };
    let width = words.len() / n.max(1);
    Some(
        words
            .chunks(width.max(1))
            .take(n)
            .map(|row| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                row.hash(&mut h);
                h.finish()
            })
            .collect(),
    )
}

/// Runs `f` on the rows of `input` whose key `map` lacks (all rows when there are no keys)
/// and returns each row's answer, in row order, storing the new ones in `map`. `f` gets the
/// missing rows and returns their `[rows, width]` values row-major, and `width`.
fn cached_rows<K: std::hash::Hash + Eq + Copy>(
    input: &Activation,
    keys: Option<&[K]>,
    map: &mut std::collections::HashMap<K, Vec<f32>>,
    f: &dyn Fn(Activation) -> Option<(Vec<f32>, usize)>,
) -> Option<Vec<Vec<f32>>> {
    let n = input.batch_size();
    let mut out: Vec<Option<Vec<f32>>> = (0..n)
        .map(|r| keys.and_then(|k| map.get(&k[r]).cloned()))
        .collect();
    let missing: Vec<usize> = (0..n).filter(|&r| out[r].is_none()).collect();
    if !missing.is_empty() {
        let sub = if missing.len() == n {
            input.clone()
        } else {
            input.clone().select_rows(&missing)
        };
        let (values, width) = f(sub)?;
        for (j, &r) in missing.iter().enumerate() {
            let row = values.get(j * width..(j + 1) * width)?.to_vec();
            if let Some(k) = keys {
                map.insert(k[r], row.clone());
            }
            out[r] = Some(row);
        }
    }
    out.into_iter().collect()
}

fn err(message: impl Into<String>) -> Error {
    Error::Strategy {
        strategy: PerTaskLoraParams::NAME.into(),
        message: message.into(),
    }
}

/// `model` with the parameters named in `values` set to them (paths as [`Model::params`]).
fn load(model: Model, values: &BTreeMap<String, Tensor<1>>) -> Model {
    model.update_params(&mut |i, _| values.get(&i.path).cloned())
}

/// L2-normalised pooled features `[batch, d]` of `input` under `model`: every block but the
/// head, pooled as the head pools token states.
fn features(model: &Model, input: Activation) -> Tensor<2> {
    let blocks = model.num_blocks().saturating_sub(1);
    let pooling = crate::ncm::pooling_of(model);
    let f = model
        .forward_range(0..blocks, input, &ForwardCtx::evaluation(None))
        .into_features(pooling);
    crate::ncm::normalize_rows(f)
}

impl PerTaskLora {
    /// The strategy with keys `p`, the run's seed and its training batch size (the chunk of a
    /// prototype's feature pass).
    pub fn new(p: PerTaskLoraParams, seed: u64, batch: usize) -> Self {
        Self {
            p,
            seed,
            batch: batch.max(1),
            ..Self::default()
        }
    }

    /// Finished tasks whose experts are kept.
    pub fn experts(&self) -> usize {
        self.experts.len()
    }

    /// The task inferred for each row of `input` `[batch, …]` under `model` (the inference
    /// copy): the expert with the prototype of the largest cosine with the row's feature.
    /// `None` before any prototype exists.
    pub fn route(&self, model: &Model, input: Activation) -> Option<Vec<usize>> {
        let kept: Vec<(usize, &Vec<f32>)> = self
            .experts
            .iter()
            .enumerate()
            .flat_map(|(k, e)| e.prototypes.iter().map(move |p| (k, p)))
            .collect();
        kept.first()?;
        let keys = row_keys(&input);
        let mut cache = self.cache.lock().ok()?;
        let rows = {
            cached_rows(&input, keys.as_deref(), &mut cache.features, &|x| {
                let view = load(model.clone(), &self.origin);
                let f = features(&view, x);
                let d = f.dims()[1];
                Some((f.into_data().convert::<f32>().try_to_vec::<f32>().ok()?, d))
            })?
        };
        if self.p.distance == Distance::Mahalanobis {
            let (router, owner) = self.router.as_ref()?;
            return Some(rows.iter().map(|f| owner[router.nearest(f)]).collect());
        }
        let dot = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
        Some(
            rows.iter()
                .map(|f| {
                    let mut best = 0;
                    for (j, (_, p)) in kept.iter().enumerate() {
                        if dot(f, p) > dot(f, kept[best].1) {
                            best = j;
                        }
                    }
                    kept[best].0
                })
                .collect(),
        )
    }

    /// The normalised features `[features]` of the task's training samples (the first
    /// `prototype_samples`, or all) under the frozen pretrained model, by group: 0 for the
    /// task, or each sample's class ([`Prototypes`]).
    fn task_groups(&self, cx: &TaskContext<'_>) -> Result<BTreeMap<usize, Vec<Vec<f32>>>> {
        let inner = cx.device.clone().inner();
        let view = load(cx.model.valid(), &self.origin);
        let mut refs: Vec<SampleRef> = cx.train_refs();
        if self.p.prototype_samples > 0 {
            refs.truncate(self.p.prototype_samples);
        }
        let mut groups: BTreeMap<usize, Vec<Vec<f32>>> = BTreeMap::new();
        for chunk in refs.chunks(self.batch) {
            let b = cx.stream.batch(chunk, Part::Train, cx.task.index, &inner);
            let labels = b.labels();
            let f = features(&view, b.input());
            let d = f.dims()[1];
            let rows = f
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .map_err(|e| err(format!("prototype pass: {e:?}")))?;
            for (row, &y) in rows.chunks(d.max(1)).zip(&labels) {
                let g = match self.p.prototypes {
                    Prototypes::Task => 0,
                    Prototypes::Class => y as usize,
                };
                groups.entry(g).or_default().push(row.to_vec());
            }
        }
        Ok(groups)
    }

    /// The Mahalanobis router over every kept expert's means (`None` for `cosine`, or before
    /// any mean).
    fn build_router(&self) -> Option<(Nearest, Vec<usize>)> {
        if self.p.distance != Distance::Mahalanobis {
            return None;
        }
        let (means, owner): (Vec<Vec<f64>>, Vec<usize>) = self
            .experts
            .iter()
            .enumerate()
            .flat_map(|(k, e)| e.means.iter().map(move |m| (m.clone(), k)))
            .unzip();
        if means.is_empty() {
            return None;
        }
        Some((Nearest::new(&self.pooled, &means)?, owner))
    }
}

/// Each group's prototype: the normalised mean of its (normalised) features.
fn prototypes(groups: &BTreeMap<usize, Vec<Vec<f32>>>) -> Vec<Vec<f32>> {
    groups
        .values()
        .map(|rows| {
            let d = rows.first().map_or(0, Vec::len);
            let mut sum = vec![0.0f64; d];
            for row in rows {
                for (s, v) in sum.iter_mut().zip(row) {
                    *s += f64::from(*v);
                }
            }
            let norm = sum.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
            sum.iter().map(|v| (v / norm) as f32).collect()
        })
        .collect()
}

impl ForgettingStrategy for PerTaskLora {
    fn name(&self) -> &str {
        PerTaskLoraParams::NAME
    }

    /// With `train_classes = "task"`, masks each row's logits `[batch, classes]` to its own
    /// task's classes ([`Stream::logit_mask`], as a task-incremental stream masks its rows); a
    /// replayed row keeps the mask of the task it came from.
    ///
    /// [`Stream::logit_mask`]: engram_core::data::stream::Stream::logit_mask
    fn prepare_batch(&mut self, mut batch: Batch, cx: &BatchContext<'_>) -> Result<Batch> {
        if self.p.train_classes == TrainClasses::Seen {
            return Ok(batch);
        }
        let tasks = &cx.stream.tasks;
        batch.logit_mask = Some(cx.stream.logit_mask(&batch.refs, cx.device, |t| {
            tasks.get(t).map(|k| k.classes.clone()).unwrap_or_default()
        }));
        Ok(batch)
    }

    fn owns(&self) -> Option<&'static str> {
        Some(crate::lora::ADAPTERS)
    }

    fn memory_refusal(
        &self,
        memory: &[engram_core::config::StrategyEntry],
    ) -> Option<engram_core::strategy::MemoryRefusal> {
        crate::lora::needs_lora(
            memory,
            PerTaskLoraParams::NAME,
            "keeps each task's LoRA adapter",
            |l| {
                if l.params().merge == crate::lora::Merge::Task {
                    Err((
                    "per-task-lora keeps each task's adapter beside the base, and lora with merge = \"task\" merges them into it at each task's end".into(),
                    "set merge = \"none\" (or leave it out) in the [[memory]] type = \"lora\" entry".into(),
                ))
                } else {
                    Ok(())
                }
            },
        )
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        if !cx
            .model
            .params()
            .iter()
            .any(|i| crate::lora::factor(&i.path) == Some('a'))
        {
            let message = "per-task-lora keeps each task's LoRA adapter, and the model has none";
            let hint = "add [[memory]] type = \"lora\" (merge = \"none\") to the config";
            return Err(match &self.src {
                Some(src) => src.key_error("type", message.into(), Some(hint.into())),
                None => err(format!("{message}: {hint}")),
            });
        }
        if self.origin.is_empty() {
            self.origin = cx
                .model
                .trainable_values()
                .into_iter()
                .map(|(i, t)| (i.path, t))
                .collect();
        }
        Ok(())
    }

    fn task_end_weights(&mut self, model: Model, task: &TaskInfo) -> Result<Model> {
        self.experts.push(Expert {
            classes: task.classes.clone(),
            params: model
                .trainable_values()
                .into_iter()
                .map(|(i, t)| (i.path, t))
                .collect(),
            prototypes: Vec::new(),
            means: Vec::new(),
        });
        Ok(model)
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let Some(expert) = self.experts.last() else {
            return Ok(());
        };
        // `lora` with merge = "task" has replaced the adapters just kept (merged them into the
        // base, which the earlier experts' adapters do not expect).
        for (i, t) in cx.model.trainable_values() {
            if crate::lora::factor(&i.path) == Some('b')
                && let Some(kept) = expert.params.get(&i.path)
            {
                let moved = (kept.clone() - t).abs().max().into_scalar::<f32>();
                if moved != 0.0 {
                    return Err(err(
                        "the adapters were replaced when the task ended: per-task-lora keeps each task's adapter beside the base, so [[memory]] type = \"lora\" must have merge = \"none\"",
                    ));
                }
            }
        }
        let groups = self.task_groups(cx)?;
        let mut means = Vec::new();
        if self.p.distance == Distance::Mahalanobis {
            for rows in groups.values() {
                let rows: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
                means.push(self.pooled.add_group(&rows).ok_or_else(|| {
                    err("a task's features differ in width from the earlier tasks'")
                })?);
            }
            // As the state saves it (f32 values), so a resumed run routes as this one does.
            for w in &mut self.pooled.scatter {
                *w = f64::from(*w as f32);
            }
        }
        if let Some(e) = self.experts.last_mut() {
            e.prototypes = prototypes(&groups);
            e.means = means;
        }
        self.router = self.build_router();
        if self.p.init == Init::Previous {
            // The next task trains on from this task's adapters (kept above as its expert).
            return Ok(());
        }
        // Fresh adapters for the next task: A redrawn, B = 0 (the model's outputs go back to
        // the base's under the current head).
        let device = cx.device.clone().inner();
        let task = cx.task.index as u64;
        let seed = self.seed;
        let model = std::mem::replace(cx.model, Model::new(Vec::new(), 0));
        let mut n = 0u64;
        *cx.model = model.update_params(&mut |i, t| {
            let f = crate::lora::factor(&i.path);
            if f == Some('b') {
                Some(t.zeros_like())
            } else if f == Some('a') && i.shape.len() == 2 {
                n += 1;
                device.seed(engram_core::rng::derive_seed(
                    seed,
                    PerTaskLoraParams::NAME,
                    task,
                    n,
                ));
                let std = 1.0 / i.shape[1].max(1) as f64;
                Some(
                    Tensor::<2>::random(
                        [i.shape[0], i.shape[1]],
                        Distribution::Normal(0.0, std),
                        &device,
                    )
                    .reshape([i.numel()]),
                )
            } else {
                None
            }
        });
        Ok(())
    }

    fn infer(&self, model: &Model, input: Activation, task: Option<usize>) -> Option<Inference> {
        let last = self.experts.len().checked_sub(1)?;
        let n = input.batch_size();
        let tasks = match task {
            // A task not trained yet (a later column of the matrix) gets the newest expert.
            Some(t) => vec![t.min(last); n],
            None => self.route(model, input.clone())?,
        };
        let classes = model.num_classes;
        let mut out = vec![-1e9f32; n * classes];
        let keys = row_keys(&input);
        let mut cache = self.cache.lock().ok()?;
        for (k, e) in self.experts.iter().enumerate() {
            let rows: Vec<usize> = (0..n).filter(|&r| tasks[r] == k).collect();
            if rows.is_empty() {
                continue;
            }
            let sub = if rows.len() == n {
                input.clone()
            } else {
                input.clone().select_rows(&rows)
            };
            let sub_keys: Option<Vec<(usize, u64)>> = keys
                .as_ref()
                .map(|h| rows.iter().map(|&r| (k, h[r])).collect());
            // Task k's expert answers as task k (the task it was inferred or given to be).
            let answers = cached_rows(&sub, sub_keys.as_deref(), &mut cache.logits, &|x| {
                let view = load(model.clone(), &e.params);
                let logits = view.forward(x, &ForwardCtx::evaluation(Some(k)));
                Some((
                    logits
                        .into_data()
                        .convert::<f32>()
                        .try_to_vec::<f32>()
                        .ok()?,
                    classes,
                ))
            })?;
            for (row, &r) in answers.iter().zip(&rows) {
                for &c in e.classes.iter().filter(|&&c| c < classes) {
                    out[r * classes + c] = row[c];
                }
            }
        }
        let device = input.device();
        Some(Inference {
            logits: Tensor::from_data(TensorData::new(out, [n, classes]), &device),
            tasks,
        })
    }

    fn model_is_partial(&self) -> Option<String> {
        Some(
            "per-task-lora keeps one expert (adapters and head) per task in its state and picks one for each input; the checkpoint's model holds only the fresh adapters of the next task. Evaluate the run with `engram eval`".into(),
        )
    }

    fn lm_refusal(&self) -> Option<LmRefusal> {
        Some(LmRefusal {
            key: "type",
            reason: "it picks a task's adapter for each input by the task's prototype, the mean pooled feature of a classifier's inputs; a language model's windows have no task prototype to route by (use o-lora or replay)".into(),
        })
    }

    fn state(&self) -> Result<StrategyState> {
        let mut tensors = BTreeMap::new();
        for (path, t) in &self.origin {
            tensors.insert(format!("origin/{path}"), StateTensor::from_tensor(t));
        }
        for (k, e) in self.experts.iter().enumerate() {
            for (path, t) in &e.params {
                tensors.insert(format!("{k}/{path}"), StateTensor::from_tensor(t));
            }
        }
        let meta: Vec<serde_json::Value> = self
            .experts
            .iter()
            .map(|e| {
                serde_json::json!({ "classes": e.classes, "prototypes": e.prototypes, "means": e.means })
            })
            .collect();
        let pooled = &self.pooled;
        if !pooled.scatter.is_empty() {
            tensors.insert(
                "pooled/scatter".into(),
                StateTensor {
                    shape: vec![pooled.dim, pooled.dim],
                    values: pooled.scatter.iter().map(|&w| w as f32).collect(),
                },
            );
        }
        Ok(StrategyState {
            meta: serde_json::json!({
                "experts": meta,
                "pooled": { "dim": pooled.dim, "count": pooled.count, "fourth": pooled.fourth },
            }),
            tensors,
        })
    }

    fn load_state(&mut self, state: StrategyState, device: &Device) -> Result<()> {
        #[derive(Deserialize)]
        struct Meta {
            classes: Vec<usize>,
            prototypes: Vec<Vec<f32>>,
            #[serde(default)]
            means: Vec<Vec<f64>>,
        }
        #[derive(Deserialize, Default)]
        struct PooledMeta {
            dim: usize,
            count: usize,
            fourth: f64,
        }
        let metas: Vec<Meta> = match state.meta.get("experts") {
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| err(format!("saved state: {e}")))?
            }
            None => Vec::new(),
        };
        let inner = device.clone().inner();
        let mut experts: Vec<Expert> = metas
            .into_iter()
            .map(|m| Expert {
                classes: m.classes,
                params: BTreeMap::new(),
                prototypes: m.prototypes,
                means: m.means,
            })
            .collect();
        let pm: PooledMeta = match state.meta.get("pooled") {
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| err(format!("saved state: {e}")))?
            }
            None => PooledMeta::default(),
        };
        let mut pooled = Pooled {
            dim: pm.dim,
            count: pm.count,
            fourth: pm.fourth,
            scatter: Vec::new(),
        };
        let mut origin = BTreeMap::new();
        for (key, t) in &state.tensors {
            let bad = || err(format!("saved state has a malformed entry `{key}`"));
            let (owner, path) = key.split_once('/').ok_or_else(bad)?;
            let value =
                Tensor::<1>::from_data(TensorData::new(t.values.clone(), [t.values.len()]), &inner);
            if owner == "origin" {
                origin.insert(path.to_string(), value);
            } else if owner == "pooled" {
                if path != "scatter" || t.values.len() != pm.dim * pm.dim {
                    return Err(bad());
                }
                pooled.scatter = t.values.iter().map(|&w| f64::from(w)).collect();
            } else {
                let k: usize = owner.parse().map_err(|_| bad())?;
                experts
                    .get_mut(k)
                    .ok_or_else(bad)?
                    .params
                    .insert(path.to_string(), value);
            }
        }
        self.origin = origin;
        self.experts = experts;
        self.pooled = pooled;
        self.router = self.build_router();
        if let Ok(mut c) = self.cache.lock() {
            *c = Cache::default();
        }
        Ok(())
    }
}

fn build(src: &ParamSource, cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: PerTaskLoraParams = src.parse()?;
    let mut s = PerTaskLora::new(p, cx.seed, cx.batch_size);
    s.src = Some(src.clone());
    Ok(Box::new(s))
}

engram_core::component!(forgetting "per-task-lora", "per-task adapters: a new LoRA adapter per task, earlier ones frozen, each input answered by the adapter of the task its prototype picks; with lora merge = \"none\"", PerTaskLoraParams, build);

#[cfg(test)]
#[path = "task_lora_tests.rs"]
mod tests;
