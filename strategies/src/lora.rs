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
//! parameters can be targeted. Burn's adapter has no dropout and one adapter per weight:
//! `dropout` above 0 (or `path = "activation"`) puts the adapters on engram's own component
//! beside the layer instead ([`engram_core::model::adapter`]). With `quantize` the frozen
//! projections are held quantized under the weight-path adapters (QLoRA, Burn's
//! `apply_qlora`; see `lora_quant.rs`).
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
use engram_core::model::ParamInfo;
use engram_core::model::adapter::{AdapterConfig, Adapters, LinearLayer};
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest, StrategyState, TaskInfo,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

#[path = "lora_quant.rs"]
mod quant;
pub use quant::Quantize;

/// What the adapter strategies (`moe-lora`, `per-task-lora`, `o-lora`) own
/// ([`engram_core::strategy::ForgettingStrategy::owns`]): a run has at most one of them, once.
pub const ADAPTERS: &str = "the structure of `lora`'s adapters";

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterPath {
    /// Chosen by `dropout`: the activation path above 0, the weight path at 0.
    #[default]
    Auto,
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
    /// Where the adapters sit: `"weight"` (Burn's LoRA), `"activation"` (engram's adapter
    /// component: adapter dropout, and what `moe-lora` needs) or `"auto"` (the default: the
    /// activation path when `dropout` is above 0, else the weight path).
    pub path: AdapterPath,
    /// QLoRA (Dettmers et al. 2023): hold the frozen projection weights quantized by Burn,
    /// `"int8"` or `"int4"` (symmetric integers, one `f32` scale a `block`), the adapters in
    /// `f32` on the weight path ([`Quantize`]). Default `"none"`.
    pub quantize: Quantize,
    /// Values per quantization block along a weight's output dimension (1 to 255; 0: one scale
    /// per weight); every quantized weight's output dimension must be a multiple of it.
    /// Default 32 (ggml's Q4_0/Q8_0 block; QLoRA's NF4 uses 64).
    pub block: usize,
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
            path: AdapterPath::Auto,
            quantize: Quantize::None,
            block: 32,
        }
    }
}

/// What adapting a model did, for `report.json` (`memory.strategies.lora`): the counts of the
/// model as [`Lora`] adapted it, before the first task. Adapters that forgetting strategies add
/// later (`moe-lora`'s experts, `per-task-lora`'s adapters) are in the report's
/// `memory.parameters` and `memory.trainable_parameters`, not here.
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
    /// Parameters (count) of the weights held quantized (`quantize`; 0 without).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quantized_parameters: u64,
    /// Bytes the model's parameters take as the device holds them
    /// ([`Model::param_bytes`]: the packed base, the adapters, the rest in `f32`).
    #[serde(default)]
    pub parameter_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

/// The config's `lora` entry among `memory`, its keys decoded (defaults for the absent ones):
/// what the strategies on adapters check their setting against
/// ([`engram_core::strategy::ForgettingStrategy::memory_refusal`]). `None` when there is no
/// `lora` entry, or its keys do not decode (its own entry says why).
pub fn lora_entry(memory: &[engram_core::config::StrategyEntry]) -> Option<Lora> {
    let e = memory.iter().find(|e| e.kind == LoraParams::NAME)?;
    let p: LoraParams = toml::Value::Table(e.params.clone()).try_into().ok()?;
    Some(Lora::new(p))
}

/// `memory_refusal` of a strategy that needs a `lora` entry (`who` names it, `what` says what
/// it does with the adapters) whose setting `ok` accepts, else `refusal` (message, hint).
pub(crate) fn needs_lora(
    memory: &[engram_core::config::StrategyEntry],
    who: &str,
    what: &str,
    ok: impl Fn(&Lora) -> Result<(), (String, String)>,
) -> Option<engram_core::strategy::MemoryRefusal> {
    let refuse = |message: String, hint: String| {
        Some(engram_core::strategy::MemoryRefusal {
            key: "type",
            message,
            hint,
        })
    };
    if !memory.iter().any(|e| e.kind == LoraParams::NAME) {
        return refuse(
            format!("{who} {what}, and the config has no [[memory]] type = \"lora\" to attach them"),
            "add a [[memory]] type = \"lora\" entry (the book's adapters chapter shows each method's)".into(),
        );
    }
    let lora = lora_entry(memory)?;
    ok(&lora).err().and_then(|(m, h)| refuse(m, h))
}

impl Lora {
    /// The keys the strategy was built with.
    pub fn params(&self) -> &LoraParams {
        &self.params
    }
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

    /// Where the adapters sit: `path`, or by `dropout` for `"auto"` (never `Auto`).
    pub fn path(&self) -> AdapterPath {
        match self.params.path {
            AdapterPath::Auto if self.params.dropout > 0.0 => AdapterPath::Activation,
            AdapterPath::Auto => AdapterPath::Weight,
            p => p,
        }
    }

    /// What the last [`Lora::adapt`] did.
    pub fn summary(&self) -> LoraSummary {
        self.summary.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The names a target can use: the last part of each rank-2 parameter's module path (on
    /// the activation path, of each linear layer the blocks route through it), sorted.
    fn layer_names<'a>(&self, params: &'a [ParamInfo], linears: &'a [LinearLayer]) -> Vec<&'a str> {
        let mut layers: Vec<&str> = if self.path() == AdapterPath::Activation {
            linears
                .iter()
                .filter_map(|l| l.path.rsplit('.').next())
                .collect()
        } else {
            params
                .iter()
                .filter(|i| i.shape.len() == 2)
                .filter_map(|i| i.path.rsplit_once('.')?.0.rsplit('.').next())
                .collect()
        };
        layers.sort_unstable();
        layers.dedup();
        layers
    }

    /// An error at the entry's `key` (with a hint naming `layers`), or a strategy error when the
    /// strategy was built in code.
    fn error(&self, key: &str, message: String, layers: &[&str]) -> Error {
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
    }

    /// Checks that every name of `targets` (a rank-2 parameter) and of `train` (any parameter)
    /// names something of `params`, and that no layer is named by both (`layers`: the names
    /// for the hint).
    ///
    /// # Errors
    /// A config error at the key, naming the unmatched or doubly named entries.
    fn check_names(&self, params: &[ParamInfo], layers: &[&str]) -> Result<()> {
        let p = &self.params;
        let err = |key: &str, message: String| self.error(key, message, layers);
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
                let message = if rank2 {
                    format!(
                        "{key} {unmatched:?} name no rank-2 parameter of this model; its layers with rank-2 weights are named {}",
                        layers.join(", ")
                    )
                } else {
                    let mut modules: Vec<&str> = params
                        .iter()
                        .filter_map(|i| i.path.rsplit_once('.')?.0.rsplit('.').next())
                        .collect();
                    modules.sort_unstable();
                    modules.dedup();
                    format!(
                        "{key} {unmatched:?} name no parameter of this model; its layers are named {}",
                        modules.join(", ")
                    )
                };
                return Err(err(key, message));
            }
        }
        // A layer both adapted and trained in full would train its base weight under its
        // adapters: the frozen base LoRA promises would be gone, and the adapters could not be
        // exported apart from it.
        let both: Vec<&String> = p
            .train
            .iter()
            .filter(|t| {
                params.iter().any(|i| {
                    i.shape.len() == 2
                        && module_matches(&i.path, t)
                        && p.targets.iter().any(|g| module_matches(&i.path, g))
                })
            })
            .collect();
        if !both.is_empty() {
            let message = format!(
                "train {both:?} names layers that targets adapts: their base weights would train in full under the adapters, where LoRA keeps an adapted layer's base frozen"
            );
            return Err(match &self.src {
                Some(src) => src.key_error(
                    "train",
                    message,
                    Some(format!(
                        "leave {both:?} out of train (or out of targets, to train them in full without adapters)"
                    )),
                ),
                None => err("train", message),
            });
        }
        Ok(())
    }

    /// The parameters `targets` adapts, after checking that every name of `targets` and
    /// `train` names something, that the model carries no adapters yet, that the rank fits,
    /// and, on the activation path, that every target is a linear layer routed through it.
    fn targeted(
        &self,
        model: &Model,
        params: &[ParamInfo],
        linears: &[LinearLayer],
    ) -> Result<Vec<ParamInfo>> {
        let p = &self.params;
        let layers = self.layer_names(params, linears);
        let err = |key: &str, message: String| self.error(key, message, &layers);
        if params.iter().any(|i| i.path.contains(".lora.")) || model.adapters().is_some() {
            return Err(err(
                "targets",
                "the model already carries LoRA adapters (adapters on adapters are not supported)"
                    .into(),
            ));
        }
        self.check_names(params, &layers)?;
        let targeted: Vec<ParamInfo> = params
            .iter()
            .filter(|i| i.shape.len() == 2 && p.targets.iter().any(|t| module_matches(&i.path, t)))
            .cloned()
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
            let fits = targeted
                .iter()
                .map(|i| i.shape[0].min(i.shape[1]))
                .min()
                .unwrap_or(1);
            return Err(match &self.src {
                Some(src) => src.key_error(
                    "rank",
                    message,
                    Some(format!(
                        "rank = {fits} (the smallest side among the targets), or leave {} out of targets",
                        i.path.trim_end_matches(".weight")
                    )),
                ),
                None => err("rank", message),
            });
        }
        if self.path() == AdapterPath::Activation {
            let missing: Vec<&str> = targeted
                .iter()
                .map(|i| i.path.strip_suffix(".weight").unwrap_or(&i.path))
                .filter(|m| !linears.iter().any(|l| &l.path == m))
                .collect();
            if !missing.is_empty() {
                return Err(err(
                    "targets",
                    format!(
                        "path = \"activation\" adapts linear layers that the blocks route through the adapter component, and {missing:?} are not among them (Burn's attention inside the ViT, embeddings, a plugin block that does not call ForwardCtx::linear); the layers it can adapt are named {}",
                        layers.join(", ")
                    ),
                ));
            }
        }
        Ok(targeted)
    }

    /// `model` frozen, with one adapter on each of `targeted`: Burn's LoRA on the weight path,
    /// the adapter component on the activation path (drawn from the run seed and the merges so
    /// far, so each task's fresh adapters differ).
    /// With `quantize`, the weights `quantized` are quantized first (Burn's QLoRA).
    fn attach(
        &self,
        model: Model,
        targeted: &[ParamInfo],
        quantized: &[&ParamInfo],
        linears: Vec<LinearLayer>,
    ) -> Model {
        let p = &self.params;
        let device = model.devices().into_iter().next().unwrap_or_default();
        if self.path() != AdapterPath::Activation {
            let lora = BurnLora::new(p.rank, p.alpha).set_param_group(ParamGroup::from_ids(
                targeted.iter().map(|i| i.id).collect(),
            ));
            return match p.quantize.scheme(p.block, &device) {
                Some(scheme) => model.apply_qlora(quant::qlora(
                    lora,
                    scheme,
                    quantized.iter().map(|i| i.id).collect(),
                )),
                None => model.apply_lora(lora),
            };
        }
        let chosen: Vec<LinearLayer> = linears
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
    }

    /// `model` with a LoRA adapter on every rank-2 parameter that `targets` names, every other
    /// parameter frozen but those of the `head` blocks (when `head`) and of the `train` layers.
    ///
    /// # Errors
    /// When `targets` names no rank-2 parameter of the model (the message lists the layers it
    /// has), a rank does not fit, an activation-path target is not a routed linear layer, or
    /// the model already carries adapters: [`Error::Config`] at the entry's key when the
    /// strategy came from a config, [`Error::Strategy`] otherwise.
    pub fn adapt(&self, model: Model) -> Result<Model> {
        let p = &self.params;
        let params = model.params();
        let linears = engram_core::model::adapter::linear_layers(&model);
        let targeted = self.targeted(&model, &params, &linears)?;
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
        let quantized = match p.quantize {
            Quantize::None => Vec::new(),
            _ => quant::quantized(&model, &params, &linears, &keep),
        };
        if p.quantize != Quantize::None
            && quantized.is_empty()
            && quant::held_quantized(&model).1 == 0
        {
            let message = "quantize finds no frozen linear layer to hold quantized in this model: QLoRA quantizes the linear layers the blocks route through the adapter call (BERT's and Llama's projections, the ViT's patch projection and MLP; not convolutions, not Burn's attention inside the ViT), and those of the head and `train` stay trainable".to_string();
            return Err(match &self.src {
                Some(src) => src.key_error(
                    "quantize",
                    message,
                    Some("remove quantize (there is nothing here it would hold)".into()),
                ),
                None => Error::Strategy {
                    strategy: LoraParams::NAME.into(),
                    message,
                },
            });
        }
        if let Some((bad, fits)) = quant::misfit(&quantized, p.block) {
            let message = format!(
                "block = {} does not divide {}'s output dimension ({:?}): Burn quantizes whole blocks only",
                p.block, bad.path, bad.shape
            );
            // A block under 8 values holds more scale than values: one scale a weight then.
            let hint = if fits >= 8 {
                format!(
                    "block = {fits} (the largest block up to 255 that divides every quantized weight)"
                )
            } else {
                "block = 0 (one scale per weight: no block of 8 to 255 values divides every quantized weight)".to_string()
            };
            return Err(match &self.src {
                Some(src) => src.key_error("block", message, Some(hint)),
                None => Error::Strategy {
                    strategy: LoraParams::NAME.into(),
                    message,
                },
            });
        }
        let mut model = self.attach(model, &targeted, &quantized, linears);
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
            s.quantized_parameters = quant::held_quantized(&model).1;
            s.parameter_bytes = model.param_bytes();
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
    if p.dropout != 0.0 && p.path == AdapterPath::Weight {
        return Err(src.key_error(
            "dropout",
            format!("dropout = {} needs the adapter on the activation path; path = \"weight\" is Burn's LoRA, inside the weight, where no dropout can act", p.dropout),
            Some("path = \"activation\" (or leave path out: dropout chooses it)".into()),
        ));
    }
    if p.quantize != Quantize::None && (p.path == AdapterPath::Activation || p.dropout != 0.0) {
        return Err(src.key_error(
            "quantize",
            "quantize (QLoRA) is Burn's, on the weight path: the adapter composes with the dequantized base inside the weight; path = \"activation\" and dropout above 0 do not take it".into(),
            Some("remove path and dropout (the weight path), or remove quantize".into()),
        ));
    }
    if p.quantize == Quantize::None && p.block != LoraParams::default().block {
        return Err(src.key_error(
            "block",
            format!(
                "block = {} sizes the quantization blocks of quantize, and quantize is \"none\": it would do nothing",
                p.block
            ),
            Some("add quantize = \"int4\" (QLoRA's base), or remove block".into()),
        ));
    }
    if p.block > 255 {
        return Err(src.key_error(
            "block",
            format!(
                "block must be at most 255 values (Burn's block sizes are 8-bit), not {}",
                p.block
            ),
            Some("block = 32 (ggml's Q4_0 block) or 64 (QLoRA's)".into()),
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
#[path = "lora_tests.rs"]
mod lora_tests;
