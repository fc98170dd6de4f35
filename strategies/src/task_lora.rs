//! `per-task-lora`: a new LoRA adapter for every task, the earlier ones kept frozen, and each
//! input answered by the adapter of the task it is inferred to come from.
//!
//! With `[[memory]] type = "lora"` (`merge = "none"`) only the adapters and the head train. At
//! a task's end this strategy keeps the task's *expert*, every trainable parameter's value (the
//! adapters, the head, `lora`'s `train` modules: what PEFT saves as an adapter), and attaches
//! fresh adapters for the next task (`A ~ N(0, σ = 1/r)` redrawn, `B = 0`, as Burn's LoRA
//! starts them). No sample is stored and nothing is merged into the base.
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
//!   nearest one.
//!
//! How often the task was inferred right is the report's `task_id_matrix`. A wrong task is a
//! wrong class: class-IL accuracy is at most the task-id accuracy times the task-IL view's.

use engram_core::burn::module::Module;
use engram_core::burn::tensor::{Device, Distribution, Tensor, TensorData};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::{Activation, ForwardCtx, Model};
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    ForgettingStrategy, Inference, LmRefusal, StateTensor, StrategyState, TaskContext, TaskInfo,
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

    /// The task's prototypes: the normalised mean of the normalised features of its training
    /// samples (the first `prototype_samples`, or all), under the frozen pretrained model; one,
    /// or one a class present ([`Prototypes`]).
    fn prototypes(&self, cx: &TaskContext<'_>) -> Result<Vec<Vec<f32>>> {
        let inner = cx.device.clone().inner();
        let view = load(cx.model.valid(), &self.origin);
        let mut refs: Vec<SampleRef> = cx.train_refs();
        if self.p.prototype_samples > 0 {
            refs.truncate(self.p.prototype_samples);
        }
        // Group (0 for the task, the label for a class) → Σ of normalised features.
        let mut sums: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
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
                let sum = sums.entry(g).or_insert_with(|| vec![0.0; d]);
                for (s, v) in sum.iter_mut().zip(row) {
                    *s += f64::from(*v);
                }
            }
        }
        Ok(sums
            .into_values()
            .map(|sum| {
                let norm = sum.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
                sum.iter().map(|v| (v / norm) as f32).collect()
            })
            .collect())
    }
}

impl ForgettingStrategy for PerTaskLora {
    fn name(&self) -> &str {
        PerTaskLoraParams::NAME
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
        let prototypes = self.prototypes(cx)?;
        if let Some(e) = self.experts.last_mut() {
            e.prototypes = prototypes;
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
            .map(|e| serde_json::json!({ "classes": e.classes, "prototypes": e.prototypes }))
            .collect();
        Ok(StrategyState {
            meta: serde_json::json!({ "experts": meta }),
            tensors,
        })
    }

    fn load_state(&mut self, state: StrategyState, device: &Device) -> Result<()> {
        #[derive(Deserialize)]
        struct Meta {
            classes: Vec<usize>,
            prototypes: Vec<Vec<f32>>,
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
            })
            .collect();
        let mut origin = BTreeMap::new();
        for (key, t) in &state.tensors {
            let bad = || err(format!("saved state has a malformed entry `{key}`"));
            let (owner, path) = key.split_once('/').ok_or_else(bad)?;
            let value =
                Tensor::<1>::from_data(TensorData::new(t.values.clone(), [t.values.len()]), &inner);
            if owner == "origin" {
                origin.insert(path.to_string(), value);
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
mod tests {
    use super::*;
    use crate::lora::tests_support::lora;
    use crate::test_util::{task_cx, task_info, toy_model, toy_stream};
    use engram_core::data::stream::Stream;

    /// The inference copy's logits of task `t`'s evaluation rows, row-major, and the input.
    fn eval_batch(stream: &Stream, t: usize, device: &Device) -> Activation {
        let (rows, part) = stream.eval_rows(t);
        let refs: Vec<SampleRef> = rows
            .iter()
            .map(|&index| SampleRef {
                task: t as u16,
                index,
            })
            .collect();
        stream.batch(&refs, part, t, device).input()
    }

    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    /// "Training" of a task: every trainable parameter moved by a deterministic amount, so that
    /// each task's adapters and head differ from the others'.
    fn train(model: Model, task: usize) -> Model {
        let mut n = 0.0f32;
        model.update_params(&mut |i, t| {
            n += 1.0;
            let k = i.numel();
            let shift: Vec<f32> = (0..k)
                .map(|j| 0.3 * ((j as f32 + 1.0) * (n + task as f32 * 7.0)).sin())
                .collect();
            (i.path.contains(".lora.") || i.path.starts_with("blocks.1."))
                .then(|| t.clone() + Tensor::from_data(TensorData::new(shift, [k]), &t.device()))
        })
    }

    /// Each task's expert answers as the model answered when the task ended (its adapters and
    /// head, not the later ones'), restricted to its classes; fresh adapters (`B = 0`) follow
    /// each task; inputs go to the prototype with the largest cosine, the prototype being the
    /// normalised mean of the plain (never adapted) model's normalised features; the state
    /// round-trips.
    #[test]
    fn experts_answer_as_their_task_ended_and_route_by_prototype() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        check_two_tasks(Prototypes::Task);
        check_two_tasks(Prototypes::Class);
    }

    fn check_two_tasks(mode: Prototypes) {
        let params = PerTaskLoraParams {
            prototypes: mode,
            ..PerTaskLoraParams::default()
        };
        let device = Device::flex().autodiff();
        let inner = device.clone().inner();
        let stream = toy_stream();
        let plain = toy_model(&device);
        let mut model = lora("rank = 2\ntargets = [\"0.linear\"]")
            .adapt(plain.clone())
            .unwrap();
        let mut s = PerTaskLora::new(params.clone(), 3, 7);
        let mut at_end = Vec::new();
        for t in 0..2 {
            let info = task_info(&stream, t);
            s.before_task(&mut task_cx(&mut model, &device, &info, &stream))
                .unwrap();
            model = train(model, t);
            let x = eval_batch(&stream, t, &inner);
            at_end.push(values(
                model.valid().forward(x, &ForwardCtx::evaluation(None)),
            ));
            model = s.task_end_weights(model, &info).unwrap();
            s.after_task(&mut task_cx(&mut model, &device, &info, &stream))
                .unwrap();
            for (i, v) in model.trainable_values() {
                if i.path.ends_with(".lora.b") {
                    assert!(
                        values(v).iter().all(|&x| x == 0.0),
                        "fresh B after task {t}"
                    );
                }
            }
        }
        assert_eq!(s.experts(), 2);
        let valid = model.valid();
        let classes = 10;
        for (t, want_t) in at_end.iter().enumerate() {
            let x = eval_batch(&stream, t, &inner);
            let a = s.infer(&valid, x, Some(t)).unwrap();
            let got = values(a.logits);
            assert!(a.tasks.iter().all(|&k| k == t));
            let own = &stream.tasks[t].classes;
            for (r, row) in got.chunks(classes).enumerate() {
                for c in 0..classes {
                    let want = if own.contains(&c) {
                        want_t[r * classes + c]
                    } else {
                        -1e9
                    };
                    assert!((row[c] - want).abs() < 1e-5, "task {t} row {r} class {c}");
                }
            }
        }
        // Prototypes by hand: the plain model's first block, rows normalised, mean, normalised.
        let phi = |x: Activation| -> Vec<Vec<f64>> {
            let f = values(
                plain
                    .valid()
                    .forward_range(0..1, x, &ForwardCtx::evaluation(None))
                    .into_flat(),
            );
            f.chunks(6)
                .map(|r| {
                    let n = r.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
                    r.iter().map(|v| f64::from(*v) / n).collect()
                })
                .collect()
        };
        let mut protos = Vec::new();
        for t in 0..2 {
            let refs: Vec<SampleRef> = stream.tasks[t]
                .train
                .iter()
                .map(|&index| SampleRef {
                    task: t as u16,
                    index,
                })
                .collect();
            let b = stream.batch(&refs, Part::Train, t, &inner);
            let labels = b.labels();
            let rows = phi(b.input());
            // Groups in label order (one group for the whole task).
            let mut groups: Vec<i64> = match mode {
                Prototypes::Task => vec![-1],
                Prototypes::Class => labels.clone(),
            };
            groups.sort_unstable();
            groups.dedup();
            assert_eq!(s.experts[t].prototypes.len(), groups.len());
            for (g, got) in groups.iter().zip(&s.experts[t].prototypes) {
                let mut m = [0.0f64; 6];
                for (r, y) in rows.iter().zip(&labels) {
                    if *g == -1 || g == y {
                        for (a, b) in m.iter_mut().zip(r) {
                            *a += b;
                        }
                    }
                }
                let n = m.iter().map(|v| v * v).sum::<f64>().sqrt();
                let m: Vec<f64> = m.iter().map(|v| v / n).collect();
                for (a, b) in m.iter().zip(got) {
                    assert!((a - f64::from(*b)).abs() < 1e-5, "prototype {t} {g}");
                }
                protos.push((t, m));
            }
        }
        let mut routed_by_hand = Vec::new();
        let mut both = None;
        for t in 0..2 {
            let x = eval_batch(&stream, t, &inner);
            for r in phi(x.clone()) {
                let cos = |p: &Vec<f64>| -> f64 { p.iter().zip(&r).map(|(a, b)| a * b).sum() };
                let mut best = 0;
                for (j, (_, p)) in protos.iter().enumerate() {
                    if cos(p) > cos(&protos[best].1) {
                        best = j;
                    }
                }
                routed_by_hand.push(protos[best].0);
            }
            both = Some(match both {
                None => x,
                Some(Activation::Flat(a)) => {
                    Activation::Flat(Tensor::cat(vec![a, x.into_flat()], 0))
                }
                Some(other) => other,
            });
        }
        let both = both.unwrap();
        // Both experts are picked for some rows (the check below compares real choices).
        assert!(
            routed_by_hand.contains(&0) && routed_by_hand.contains(&1),
            "{routed_by_hand:?}"
        );
        let a = s.infer(&valid, both.clone(), None).unwrap();
        assert_eq!(a.tasks, routed_by_hand);
        let logits = values(a.logits);
        // A routed row is answered by its expert, within its expert's classes.
        let per_task: Vec<Vec<f32>> = (0..2)
            .map(|k| values(s.infer(&valid, both.clone(), Some(k)).unwrap().logits))
            .collect();
        for (r, &k) in a.tasks.iter().enumerate() {
            assert_eq!(
                &logits[r * classes..(r + 1) * classes],
                &per_task[k][r * classes..(r + 1) * classes]
            );
        }
        // The state round-trips: the restored strategy answers identically.
        let mut back = PerTaskLora::new(params, 3, 7);
        back.load_state(s.state().unwrap(), &device).unwrap();
        let again = back.infer(&valid, both, None).unwrap();
        assert_eq!(again.tasks, a.tasks);
        assert_eq!(values(again.logits), logits);
    }

    /// Without adapters, the first task is refused; with `lora` merging at the task's end
    /// (merge = "task"), the end of the first task is, saying merge = "none".
    #[test]
    fn per_task_lora_needs_lora_without_merge() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let device = Device::flex().autodiff();
        let stream = toy_stream();
        let info = task_info(&stream, 0);
        let mut s = PerTaskLora::new(PerTaskLoraParams::default(), 0, 8);
        let mut plain = toy_model(&device);
        let e = s
            .before_task(&mut task_cx(&mut plain, &device, &info, &stream))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the model has none") && e.contains("[[memory]]"),
            "{e}"
        );
        let mut l = lora("rank = 2\ntargets = [\"0.linear\"]\nmerge = \"task\"");
        let mut m = l.adapt(toy_model(&device)).unwrap();
        s.before_task(&mut task_cx(&mut m, &device, &info, &stream))
            .unwrap();
        let m = train(m, 0);
        let m = s.task_end_weights(m, &info).unwrap();
        let mut m =
            engram_core::strategy::MemoryStrategy::task_end_model(&mut l, m, &info).unwrap();
        let e = s
            .after_task(&mut task_cx(&mut m, &device, &info, &stream))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("merge = \\\"none\\\"") || e.contains("merge = \"none\""),
            "{e}"
        );
    }
}
