//! `lora`: low-rank adaptation (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
//! Models", eq. 3) as a memory strategy — freeze the pretrained weights and train, for each
//! targeted weight `W₀ [d_in, d_out]`, two factors `A [d_in, r]` and `B [r, d_out]`, so that
//! the layer computes with `W₀ + (α/r)·A·B`.
//!
//! The memory it saves is the frozen base's: no gradient and no optimiser state for it (AdamW
//! keeps two moments per trainable parameter, so full fine-tuning holds about 4× the model in
//! parameters, gradients and moments; LoRA holds the model once plus the adapters'). The
//! activations stay: a step still backpropagates through every layer, so on a small model at a
//! long sequence, where activations dominate, LoRA alone saves little and composes with
//! `checkpoint` and `amp` for the rest.
//!
//! It is Burn's own LoRA (`Module::apply_lora`, burn-core `module/lora.rs`): the adapter is a
//! reparameterization of the weight itself, `A ~ N(0, σ = 1/r)`, `B = 0` (so the adapted model
//! starts equal to the base), and `materialize` merges `W₀ + (α/r)·A·B` into a plain weight.
//! engram's type-erased blocks take it through their rank bridges, so any model's rank-2
//! parameters can be targeted. Burn's adapter has no dropout and one adapter per weight; keys
//! that would need an adapter on the activation path (`dropout` above 0) are refused.
//!
//! The strategy acts at the [`MemoryLayer::Parameters`] layer: it adapts the model when the
//! run builds it ([`MemoryStrategy::adapt_model`]: after `[model] init` is loaded, before a
//! checkpoint's weights are) and passes every step on unchanged, so it composes with
//! `accumulate`, `amp`, `checkpoint` and `budget`. With `merge = "task"` the adapters are merged
//! into the base at the end of each task and fresh ones attached
//! ([`MemoryStrategy::task_end_model`]).

use engram_core::burn::module::{Lora as BurnLora, Module, ParamGroup, ParamId};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::model::Model;
use engram_core::model::adapter::{AdapterConfig, Adapters};
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest, StrategyState, TaskInfo,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// When the adapters are merged into the base weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Merge {
    /// Never during the run: one set of adapters trains over every task (`engram export`
    /// writes the merged weights).
    #[default]
    None,
    /// At the end of each task: `W₀ ← W₀ + (α/r)·A·B`, then fresh adapters (`B = 0`) for the
    /// next task, so each task's update is a rank-`r` step from the last task's weights.
    Task,
}

/// Where the adapters sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterPath {
    /// On the weight: Burn's LoRA (`W₀ + (α/r)·A·B`), any rank-2 parameter; no dropout.
    Weight,
    /// Beside the layer: engram's activation-path component
    /// ([`engram_core::model::adapter`]), `x·W₀ + (α/r)·drop(x)·A·B`, on the linear layers the
    /// blocks route through it; adapter dropout, and what `moe-lora` builds on.
    Activation,
}

/// `[[memory]] type = "lora"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoraParams {
    /// Rank `r` of each adapter (at least 1). Default 8.
    pub rank: usize,
    /// Scaling numerator `α`: the update is `(α/r)·A·B` (Hu et al. 2021, §4.1). Default 16.
    pub alpha: f64,
    /// The layers to adapt, by name, as PEFT's `target_modules`: a rank-2 parameter is adapted
    /// when its module path (its dotted path without the last part: `blocks.2.attention.query`
    /// for `blocks.2.attention.query.weight`) is the name or ends with `.name`. Default
    /// `["query", "value"]`, the attention's query and value projections of `bert` and
    /// `llama` (Hu et al. 2021, §7.1).
    pub targets: Vec<String>,
    /// Keep every parameter of the model's `head` blocks trainable (the classifier, which a
    /// class-incremental stream's new classes need). Default true.
    pub head: bool,
    /// More layers to keep trainable in full, by name as `targets` matches them (PEFT's
    /// `modules_to_save`), for example `["norm"]` for layer norms named so. Default none.
    pub train: Vec<String>,
    /// When to merge the adapters into the base. Default `none`.
    pub merge: Merge,
    /// Dropout on the adapter's input (PEFT's `lora_dropout`), in `[0, 1)`; above 0 it needs
    /// `path = "activation"` (the default then). Default 0.
    pub dropout: f64,
    /// Where the adapters sit: `"weight"` (Burn's LoRA, the default without dropout) or
    /// `"activation"` (engram's adapter component: the default with dropout, and what
    /// `moe-lora` needs). Unset: chosen by `dropout`.
    pub path: Option<AdapterPath>,
}

impl Default for LoraParams {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            targets: vec!["query".into(), "value".into()],
            head: true,
            train: Vec::new(),
            merge: Merge::None,
            dropout: 0.0,
            path: None,
        }
    }
}

/// What adapting a model did, for `report.json` (`memory.strategies.lora`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoraSummary {
    /// The adapted weights' dotted paths.
    pub adapted: Vec<String>,
    /// Parameters (count) of the adapter factors `A` and `B`.
    pub adapter_parameters: u64,
    /// Parameters (count) that train: the adapters and what `head` and `train` keep trainable.
    pub trainable_parameters: u64,
    /// Parameters (count) that are frozen (the base).
    pub frozen_parameters: u64,
    /// Merges done so far (`merge = "task"`).
    pub merges: usize,
}

/// The LoRA memory strategy.
#[derive(Debug)]
pub struct Lora {
    params: LoraParams,
    /// The run seed (the activation path's adapters are drawn from it).
    seed: u64,
    /// Where the keys came from, for errors positioned at them (none when built in code).
    src: Option<ParamSource>,
    summary: Mutex<LoraSummary>,
}

/// Which factor of a LoRA adapter the parameter at `path` is, `'a'` or `'b'`, on either path:
/// Burn's weight-path adapter (`<weight>.lora.a`) or the activation-path component's
/// (`adapters.layers.<l>.experts.<e>.a`); `None` for any other parameter (a router's columns
/// included). The one place the strategies on adapters (`o-lora`, `per-task-lora`) read them.
pub fn factor(path: &str) -> Option<char> {
    let f = if path.starts_with("adapters.") && path.contains(".experts.") {
        path.rsplit('.').next()?
    } else {
        path.rsplit_once(".lora.")?.1
    };
    match f {
        "a" => Some('a'),
        "b" => Some('b'),
        _ => None,
    }
}

/// The path of the weight the adapter factor at `path` adapts (`blocks.1.attention.query.
/// weight`), on either path ([`factor`]); `None` when `path` is no adapter factor of `model`.
pub fn adapted_weight(model: &Model, path: &str) -> Option<String> {
    factor(path)?;
    if let Some(rest) = path.strip_prefix("adapters.layers.") {
        let l: usize = rest.split('.').next()?.parse().ok()?;
        let (block, local) = model.adapters()?.targets.get(l)?;
        return Some(format!("blocks.{block}.{local}.weight"));
    }
    Some(path.rsplit_once(".lora.")?.0.to_string())
}

/// Whether the module path of parameter `path` (the path without its last part) is `name` or
/// ends with `.name`.
fn module_matches(path: &str, name: &str) -> bool {
    let module = path.rsplit_once('.').map_or("", |(m, _)| m);
    module == name || module.ends_with(&format!(".{name}"))
}

impl Lora {
    /// The strategy with keys `params` (checked by the builder).
    pub fn new(params: LoraParams) -> Self {
        Self {
            params,
            seed: 0,
            src: None,
            summary: Mutex::new(LoraSummary::default()),
        }
    }

    /// Where the adapters sit: `path`, or by `dropout` when unset.
    pub fn path(&self) -> AdapterPath {
        self.params.path.unwrap_or(if self.params.dropout > 0.0 {
            AdapterPath::Activation
        } else {
            AdapterPath::Weight
        })
    }

    /// What the last [`Lora::adapt`] did.
    pub fn summary(&self) -> LoraSummary {
        self.summary.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// `model` with a LoRA adapter on every rank-2 parameter that `targets` names, every other
    /// parameter frozen but those of the `head` blocks (when `head`) and of the `train` layers.
    ///
    /// # Errors
    /// When `targets` names no rank-2 parameter of the model (the message lists the layers it
    /// has) or the model already carries adapters: [`Error::Config`] at the entry's `targets`
    /// when the strategy came from a config, [`Error::Strategy`] otherwise.
    pub fn adapt(&self, model: Model) -> Result<Model> {
        let p = &self.params;
        let params = model.params();
        // The names a target can use: the last part of each rank-2 parameter's module path.
        let mut layers: Vec<&str> = params
            .iter()
            .filter(|i| i.shape.len() == 2)
            .filter_map(|i| i.path.rsplit_once('.')?.0.rsplit('.').next())
            .collect();
        layers.sort_unstable();
        layers.dedup();
        let err = |key: &str, message: String| {
            match &self.src {
            Some(src) => src.key_error(
                key,
                message,
                Some(format!(
                    "name layers this model has (a module path or its last part, without `.weight`), for example {key} = [\"{}\"]",
                    layers.first().copied().unwrap_or("linear")
                )),
            ),
            None => Error::Strategy {
                strategy: LoraParams::NAME.into(),
                message,
            },
        }
        };
        if params.iter().any(|i| i.path.contains(".lora.")) || model.adapters().is_some() {
            return Err(err(
                "targets",
                "the model already carries LoRA adapters (adapters on adapters are not supported)"
                    .into(),
            ));
        }
        // Every name must name something: a misspelt one would silently leave its layers out.
        for (key, names, rank2) in [("targets", &p.targets, true), ("train", &p.train, false)] {
            let unmatched: Vec<&String> = names
                .iter()
                .filter(|t| {
                    !params
                        .iter()
                        .any(|i| (!rank2 || i.shape.len() == 2) && module_matches(&i.path, t))
                })
                .collect();
            if !unmatched.is_empty() {
                return Err(err(
                    key,
                    format!(
                        "{key} {unmatched:?} name no {}parameter of this model; its layers with rank-2 weights are named {}",
                        if rank2 { "rank-2 " } else { "" },
                        layers.join(", ")
                    ),
                ));
            }
        }
        let targeted: Vec<_> = params
            .iter()
            .filter(|i| i.shape.len() == 2 && p.targets.iter().any(|t| module_matches(&i.path, t)))
            .collect();
        // A rank above min(d_in, d_out) is no low-rank update (and a huge one cannot be allocated).
        if let Some(i) = targeted
            .iter()
            .find(|i| p.rank > i.shape[0].min(i.shape[1]))
        {
            let message = format!(
                "rank {} is above {}'s smaller side ({:?}): a low-rank adapter needs rank ≤ min(d_in, d_out)",
                p.rank, i.path, i.shape
            );
            return Err(match &self.src {
                Some(src) => src.key_error("rank", message, Some("rank = 8".into())),
                None => err("rank", message),
            });
        }
        let activation = self.path() == AdapterPath::Activation;
        let linears = engram_core::model::adapter::linear_layers(&model);
        if activation {
            let missing: Vec<&str> = targeted
                .iter()
                .filter_map(|i| i.path.strip_suffix(".weight").or(Some(i.path.as_str())))
                .filter(|m| !linears.iter().any(|l| &l.path == m))
                .collect();
            if !missing.is_empty() {
                let mut names: Vec<&str> = linears
                    .iter()
                    .filter_map(|l| l.path.rsplit('.').next())
                    .collect();
                names.sort_unstable();
                names.dedup();
                return Err(err(
                    "targets",
                    format!(
                        "path = \"activation\" adapts linear layers that the blocks route through the adapter component, and {missing:?} are not among them (Burn's attention inside the ViT, embeddings, a plugin block that does not call ForwardCtx::linear); the layers it can adapt are named {}",
                        names.join(", ")
                    ),
                ));
            }
        }
        // The blocks whose parameters stay trainable: the head blocks, by kind.
        let head_blocks: Vec<String> = model
            .blocks()
            .iter()
            .enumerate()
            .filter(|(_, b)| p.head && b.inner().kind() == "head")
            .map(|(i, _)| format!("blocks.{i}."))
            .collect();
        let keep: Vec<ParamId> = params
            .iter()
            .filter(|i| {
                head_blocks.iter().any(|h| i.path.starts_with(h))
                    || p.train.iter().any(|t| module_matches(&i.path, t))
            })
            .map(|i| i.id)
            .collect();
        let mut model = if activation {
            let chosen: Vec<_> = linears
                .into_iter()
                .filter(|l| {
                    targeted
                        .iter()
                        .any(|i| i.path == format!("{}.weight", l.path))
                })
                .collect();
            let config = AdapterConfig {
                scale: p.alpha / p.rank as f64,
                rank: p.rank,
                dropout: p.dropout,
                top_k: 1,
                routed: false,
                balance: 0.0,
            };
            let device = model.devices().into_iter().next().unwrap_or_default();
            let merges = self.summary().merges as u64;
            let adapters = Adapters::new(
                chosen.iter().map(|l| (l.block, l.local.clone())).collect(),
                chosen.iter().map(|l| l.shape).collect(),
                config,
            )
            .grow(
                1,
                engram_core::rng::derive_seed(self.seed, LoraParams::NAME, merges, 0),
                &device,
            );
            model.freeze().map_adapters(|_| Some(adapters))
        } else {
            let lora = BurnLora::new(p.rank, p.alpha).set_param_group(ParamGroup::from_ids(
                targeted.iter().map(|i| i.id).collect(),
            ));
            model.apply_lora(lora)
        };
        if !keep.is_empty() {
            model = model.unfreeze_group(ParamGroup::from_ids(keep));
        }
        let adapter_parameters = targeted
            .iter()
            .map(|i| (i.shape[0] + i.shape[1]) * p.rank)
            .sum::<usize>() as u64;
        let total = model.numel() as u64;
        let trainable = model.trainable_numel() as u64;
        if let Ok(mut s) = self.summary.lock() {
            s.adapted = targeted.iter().map(|i| i.path.clone()).collect();
            s.adapter_parameters = adapter_parameters;
            s.trainable_parameters = trainable;
            s.frozen_parameters = total - trainable;
        }
        Ok(model)
    }
}

impl MemoryStrategy for Lora {
    fn name(&self) -> &str {
        LoraParams::NAME
    }
    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Parameters
    }
    fn step(&mut self, req: StepRequest<'_>, next: Next<'_>) -> Result<StepOutcome> {
        next.run(req)
    }
    fn adapt_model(&self, model: Model) -> Result<Model> {
        self.adapt(model)
    }
    fn task_end_model(&mut self, model: Model, _task: &TaskInfo) -> Result<Model> {
        if self.params.merge != Merge::Task {
            return Ok(model);
        }
        // Burn's `materialize` writes `W₀ + (α/r)·A·B` into each adapted weight and drops the
        // adapter (the activation path's: `Model::merge_adapters`); fresh adapters (`B = 0`)
        // leave the merged model's outputs as they are.
        let plain = model
            .merge_adapters()
            .map_err(|e| Error::Strategy {
                strategy: LoraParams::NAME.into(),
                message: format!("merge = \"task\": {e}"),
            })?
            .materialize();
        let merged = self.adapt(plain)?;
        if let Ok(mut s) = self.summary.lock() {
            s.merges += 1;
        }
        Ok(merged)
    }
    fn report(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.summary()).ok()
    }
    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({ "merges": self.summary().merges }),
            ..StrategyState::default()
        })
    }
    fn load_state(&mut self, state: StrategyState) -> Result<()> {
        let merges = state
            .meta
            .get("merges")
            .and_then(|m| m.as_u64())
            .unwrap_or(0);
        if let Ok(mut s) = self.summary.lock() {
            s.merges = merges as usize;
        }
        Ok(())
    }
}

fn build(src: &ParamSource, cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let p: LoraParams = src.parse()?;
    if p.rank == 0 {
        return Err(src.key_error(
            "rank",
            "rank must be at least 1".into(),
            Some("rank = 8 (Hu et al. 2021 find 4 to 8 enough on GPT-3)".into()),
        ));
    }
    if !(p.alpha.is_finite() && p.alpha > 0.0) {
        return Err(src.key_error(
            "alpha",
            format!("alpha must be a positive number, not {}", p.alpha),
            Some("alpha = 16 (twice the rank, PEFT's common choice)".into()),
        ));
    }
    if p.targets.is_empty() || p.targets.iter().any(|t| t.trim().is_empty()) {
        return Err(src.key_error(
            "targets",
            "targets must name at least one layer, and no name may be empty".into(),
            Some("targets = [\"query\", \"value\"]".into()),
        ));
    }
    if !(p.dropout.is_finite() && (0.0..1.0).contains(&p.dropout)) {
        return Err(src.key_error(
            "dropout",
            format!("dropout must be in [0, 1), not {}", p.dropout),
            Some("remove dropout (LoRA without dropout is Hu et al.'s own setting)".into()),
        ));
    }
    if p.dropout != 0.0 && p.path == Some(AdapterPath::Weight) {
        return Err(src.key_error(
            "dropout",
            format!("dropout = {} needs the adapter on the activation path; path = \"weight\" is Burn's LoRA, inside the weight, where no dropout can act", p.dropout),
            Some("path = \"activation\" (or leave path out: dropout chooses it)".into()),
        ));
    }
    let mut lora = Lora::new(p);
    lora.seed = cx.seed;
    lora.src = Some(src.clone());
    Ok(Box::new(lora))
}

engram_core::component!(memory "lora", "LoRA: freeze the base, train low-rank adapters on the targeted weights (Hu et al. 2021)", LoraParams, build);

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use engram_core::burn::optim::GradientsParams;
    use engram_core::data::stream::Batch;

    pub(crate) const CE: crate::test_util::CeL2 = crate::test_util::CeL2(0.0);

    /// A 12-16-16-4 MLP (`blocks.0.linear`, `blocks.1.linear`, head `blocks.2.linear`) and a
    /// batch of 8 rows: the checkpoint tests' setup without dropout.
    pub(crate) fn setup() -> (Model, Batch) {
        crate::checkpoint::tests::setup(0.0, 3)
    }

    pub(crate) fn lora(toml: &str) -> Lora {
        let src = ParamSource::from_toml(toml);
        let p: LoraParams = src.parse().unwrap();
        Lora::new(p)
    }

    pub(crate) fn step_grads(m: &Model, b: &Batch) -> GradientsParams {
        let req = StepRequest {
            model: m,
            batch: b.clone(),
            loss: &CE,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: 5,
        };
        crate::standard::plain_step(req).unwrap().grads
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;
    use engram_core::burn::tensor::Tensor;

    fn values(t: Tensor<1>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().unwrap()
    }

    /// `[d_in, d_out]` row-major product `a [d_in, r] · b [r, d_out]`.
    fn matmul(a: &[f32], b: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
        (0..n * m)
            .map(|ij| (0..k).map(|l| a[ij / m * k + l] * b[l * m + ij % m]).sum())
            .collect()
    }

    fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|ij| a[(ij % rows) * cols + ij / rows])
            .collect()
    }

    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * scale, "{what}[{i}]: {g} vs {w}");
        }
    }

    /// The base is frozen (no gradient), the head and the adapters train, and the adapters'
    /// gradients are the chain rule through `W = W₀ + s·A·B` (Hu et al. 2021, eq. 3):
    /// `∂L/∂B = s·Aᵀ·∂L/∂W` and `∂L/∂A = s·∂L/∂W·Bᵀ`, with `∂L/∂W` the plain model's weight
    /// gradient (equal at any `B` once the effective weight is the same).
    #[test]
    fn adapter_gradients_follow_the_chain_rule_and_the_base_gets_none() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let s = lora("rank = 2\nalpha = 6.0\ntargets = [\"0.linear\", \"1.linear\"]");
        let adapted = s.adapt(m.clone()).unwrap();
        let summary = s.summary();
        assert_eq!(
            summary.adapted,
            ["blocks.0.linear.weight", "blocks.1.linear.weight"]
        );
        // Adapters: (12 + 16)·2 + (16 + 16)·2 = 120; head: 16·4 + 4 = 68.
        assert_eq!(summary.adapter_parameters, 120);
        assert_eq!(summary.trainable_parameters, 188);
        assert_eq!(adapted.trainable_numel(), 188);
        // The frozen base: every original parameter but the head's 68.
        assert_eq!(summary.frozen_parameters as usize, m.numel() - 68);
        // Move B away from 0 so both factor gradients are non-zero: one SGD step.
        let g = step_grads(&adapted, &b);
        let names: Vec<String> = adapted
            .flat_grads(&g)
            .iter()
            .map(|(i, _)| i.path.clone())
            .collect();
        assert_eq!(
            names,
            [
                "blocks.0.linear.weight.lora.a",
                "blocks.0.linear.weight.lora.b",
                "blocks.1.linear.weight.lora.a",
                "blocks.1.linear.weight.lora.b",
                "blocks.2.linear.weight",
                "blocks.2.linear.bias"
            ],
            "only the adapters and the head get gradients"
        );
        let mut optim = engram_core::train::trainer::sgd(0.0, None);
        let adapted = optim.step(0.5, adapted, g);
        // The plain model with the adapted model's effective weights.
        let plain = adapted
            .clone()
            .materialize()
            .unfreeze_group(ParamGroup::all());
        let g_lora = adapted.flat_grads(&step_grads(&adapted, &b));
        let g_plain = plain.flat_grads(&step_grads(&plain, &b));
        let by_path = |gs: &[(engram_core::model::ParamInfo, Tensor<1>)], p: &str| {
            values(gs.iter().find(|(i, _)| i.path == p).unwrap().1.clone())
        };
        let param = |m: &Model, p: &str| {
            values(
                m.param_values()
                    .into_iter()
                    .find(|(i, _)| i.path == p)
                    .unwrap()
                    .1,
            )
        };
        let sc = 3.0; // α / r
        for (l, d_in, d_out) in [(0, 12, 16), (1, 16, 16)] {
            let gw = by_path(&g_plain, &format!("blocks.{l}.linear.weight"));
            let a = param(&adapted, &format!("blocks.{l}.linear.weight.lora.a"));
            let bb = param(&adapted, &format!("blocks.{l}.linear.weight.lora.b"));
            assert!(bb.iter().any(|v| *v != 0.0), "B moved off zero");
            let want_b: Vec<f32> = matmul(&transpose(&a, d_in, 2), &gw, 2, d_in, d_out)
                .into_iter()
                .map(|v| v * sc)
                .collect();
            let want_a: Vec<f32> = matmul(&gw, &transpose(&bb, 2, d_out), d_in, d_out, 2)
                .into_iter()
                .map(|v| v * sc)
                .collect();
            let got_b = by_path(&g_lora, &format!("blocks.{l}.linear.weight.lora.b"));
            let got_a = by_path(&g_lora, &format!("blocks.{l}.linear.weight.lora.a"));
            assert_close(&got_b, &want_b, 1e-4, &format!("dL/dB of layer {l}"));
            assert_close(&got_a, &want_a, 1e-4, &format!("dL/dA of layer {l}"));
        }
        // The base did not move: the adapted model's stored base is the original weight.
        let base_after: Vec<(String, Vec<f32>)> = adapted
            .param_values()
            .into_iter()
            .filter(|(i, _)| i.path == "blocks.0.linear.weight")
            .map(|(i, t)| (i.path, values(t)))
            .collect();
        assert_eq!(base_after[0].1, param(&m, "blocks.0.linear.weight"));
    }
}

#[cfg(test)]
mod merge_tests {
    use super::tests_support::*;
    use super::*;
    use engram_core::burn::tensor::Tensor;
    use engram_core::model::{Activation, ForwardCtx};

    fn logits(m: &Model, b: &engram_core::data::stream::Batch) -> Vec<f32> {
        let x = match &b.x {
            engram_core::data::input::Input::Float(t) => t.clone(),
            _ => unreachable!(),
        };
        m.valid()
            .forward(Activation::Flat(x.inner()), &ForwardCtx::default())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    }

    /// Merging is an exact round trip: the merged model's logits equal the adapted model's, and
    /// `merge = "task"` leaves fresh adapters (`B = 0`) that change nothing.
    #[test]
    fn merged_outputs_equal_adapted_outputs() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let mut s =
            lora("rank = 4\nalpha = 8.0\ntargets = [\"0.linear\", \"1.linear\"]\nmerge = \"task\"");
        let adapted = s.adapt(m).unwrap();
        let g = step_grads(&adapted, &b);
        let adapted = engram_core::train::trainer::sgd(0.0, None).step(0.5, adapted, g);
        let before = logits(&adapted, &b);
        let merged_plain = adapted.clone().materialize();
        assert!(
            merged_plain
                .params()
                .iter()
                .all(|i| !i.path.contains(".lora."))
        );
        let diff = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(diff(&logits(&merged_plain, &b), &before) < 1e-5);
        let stream = crate::test_util::toy_stream();
        let merged = s
            .task_end_model(adapted, &crate::test_util::task_info(&stream, 0))
            .unwrap();
        assert!(diff(&logits(&merged, &b), &before) < 1e-5);
        assert_eq!(s.summary().merges, 1);
        for (i, t) in merged.param_values() {
            if i.path.ends_with(".lora.b") {
                let v: Vec<f32> = t.into_data().try_to_vec::<f32>().unwrap();
                assert!(v.iter().all(|x| *x == 0.0), "{} is fresh", i.path);
            }
        }
        assert_eq!(merged.trainable_numel(), 4 * (12 + 16 + 16 + 16) + 68);
        let _: Option<Tensor<1>> = None;
    }

    /// LoRA composes with segment checkpointing: the checkpointed step's gradients of the
    /// adapters and the head equal the plain step's.
    #[test]
    fn checkpointed_lora_gradients_equal_plain_ones() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let adapted = lora("rank = 2\ntargets = [\"linear\"]").adapt(m).unwrap();
        let req = || StepRequest {
            model: &adapted,
            batch: b.clone(),
            loss: &CE,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: 7,
        };
        let flat = |o: StepOutcome| -> Vec<(String, Vec<f32>)> {
            adapted
                .flat_grads(&o.grads)
                .into_iter()
                .map(|(i, g)| (i.path, g.into_data().try_to_vec::<f32>().unwrap()))
                .collect()
        };
        let want = flat(crate::standard::plain_step(req()).unwrap());
        let got = flat(
            crate::checkpoint::checkpointed_step(
                req(),
                &crate::checkpoint::Checkpoint::new(1).segments(adapted.num_blocks()),
            )
            .unwrap(),
        );
        assert_eq!(
            got.iter().map(|g| &g.0).collect::<Vec<_>>(),
            want.iter().map(|g| &g.0).collect::<Vec<_>>()
        );
        // Head adapted too (targets "linear" names it): its base trains as well (head = true).
        assert_eq!(want.len(), 3 * 2 + 2);
        for ((p, g), (_, w)) in got.iter().zip(&want) {
            for (x, y) in g.iter().zip(w) {
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1e-3), "{p}: {x} vs {y}");
            }
        }
    }

    /// A target that names no layer is a typed error listing the layers the model has.
    #[test]
    fn targets_that_name_nothing_list_the_layers() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, _) = setup();
        let e = lora("targets = [\"query\"]")
            .adapt(m)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("name no rank-2 parameter") && e.contains("linear"),
            "{e}"
        );
    }

    /// Bad keys are positioned errors at the key.
    #[test]
    fn bad_keys_are_refused_at_their_line() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        for (text, key) in [
            ("rank = 0", "rank must be at least 1"),
            ("alpha = -1.0", "alpha must be a positive number"),
            ("targets = []", "targets must name at least one layer"),
            (
                "dropout = 0.1\npath = \"weight\"",
                "needs the adapter on the activation path",
            ),
        ] {
            let src = ParamSource::from_toml(&format!("type = \"lora\"\n{text}"));
            let cx = engram_core::registry::BuildContext {
                num_tasks: 1,
                num_classes: 2,
                batch_size: 4,
                seed: 0,
            };
            let Err(e) = build(&src, &cx) else {
                panic!("{text} was accepted")
            };
            let e = e.to_string();
            assert!(e.contains(key) && e.contains(":3:1:"), "{text}: {e}");
        }
    }
}
