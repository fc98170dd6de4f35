//! `moe-lora`: a mixture of LoRA experts per adapted layer, grown by task (LoRAMoE, Dou et al.
//! 2023, "LoRAMoE: Alleviate World Knowledge Forgetting in Large Language Models via MoE-Style
//! Plugin", §3.1; MoE-Adapters, Yu et al. 2024, "Boosting Continual Learning of Vision-Language
//! Models via Mixture-of-Experts Adapters", §3.2).
//!
//! Every layer that `[[memory]] type = "lora"` adapts on the activation path
//! (`path = "activation"`, [`engram_core::model::adapter`]) gets a pool of `E` LoRA experts and
//! a router `R [d_in, E]`: a token `x` computes
//!
//! ```text
//! y = x·W₀ + b + (α/r) · Σₑ gₑ(x) · drop(x)·Aₑ·Bₑ,   g(x) = softmax over the top k of x·R
//! ```
//!
//! (top-k gating, Shazeer et al. 2017, eq. 3–5, renormalised over the chosen experts). At the
//! start of each task `experts_per_task` new experts (`A ~ N(0, σ = 1/r)`, `B = 0`) and their
//! router columns (`N(0, σ = 1/√d_in)`) join every pool, and every earlier expert and router
//! column is frozen (no gradient, no optimiser state): what a task learnt stays in its experts,
//! and what moves is which experts later inputs choose. The training loss adds the
//! load-balancing term of Fedus et al. 2022 ("Switch Transformers", eq. 4), `balance · E ·
//! Σₑ fₑ·Pₑ`, averaged over the adapted layers (`fₑ`: the fraction of the layer's tokens whose
//! top `k` hold `e`, over `k`; `Pₑ`: the mean router probability of `e`). No task identity is
//! used, in training or at inference.
//!
//! At each task's end the strategy measures the router's choices: on up to `routing_samples`
//! training inputs of every task seen so far, the share of top-k choices (over all adapted
//! layers and tokens) that went to each task's experts. `report.json` holds them as
//! `forgetting["moe-lora"].routing[t][j][g]` — after task `t`, inputs of task `j`, experts
//! added at task `g` — the write-up's "experts specialise per task" made a number: a diagonal
//! near 1 is specialisation.

use engram_core::burn::module::Module;
use engram_core::burn::tensor::Device;
use engram_core::burn::tensor::Tensor;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::adapter::{AdapterConfig, Adapters};
use engram_core::model::{ForwardCtx, Model};
use engram_core::registry::BuildContext;
use engram_core::strategy::{BatchContext, ForgettingStrategy, StrategyState, TaskContext};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The most experts one adapted layer's pool may hold after the stream's last task. The
/// mixtures this strategy follows use a handful (LoRAMoE: 6; MoE-Adapters: 22); a pool of
/// thousands is a typo that would allocate `experts × rank × (d_in + d_out)` values per layer
/// (f32, 4 bytes each) before it could be refused for memory.
pub const MAX_POOL: usize = 1024;

/// `[[forgetting]] type = "moe-lora"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MoeLoraParams {
    /// Experts added to every adapted layer's pool at the start of each task (at least 1; the
    /// pool after the stream's last task, this times the tasks, at most [`MAX_POOL`]).
    /// Default 2.
    pub experts_per_task: usize,
    /// Experts each token uses (at least 1; the pool's size when it has fewer). Default 2.
    pub top_k: usize,
    /// Coefficient of the load-balancing loss (Fedus et al. 2022 use 0.01); 0 turns it off.
    /// Default 0.01.
    pub balance: f64,
    /// Training inputs per task the routing table is measured on at each task's end (0: all
    /// of them). Default 256.
    pub routing_samples: usize,
}

impl Default for MoeLoraParams {
    fn default() -> Self {
        Self {
            experts_per_task: 2,
            top_k: 2,
            balance: 0.01,
            routing_samples: 256,
        }
    }
}

/// The strategy.
#[derive(Debug, Default)]
pub struct MoeLora {
    p: MoeLoraParams,
    src: Option<ParamSource>,
    seed: u64,
    /// Expert groups added so far (one per task started).
    groups: usize,
    /// `[after task t][inputs of task j][experts of task g]`: share of top-k choices.
    routing: Vec<Vec<Vec<f64>>>,
}

fn err(message: String) -> Error {
    Error::Strategy {
        strategy: MoeLoraParams::NAME.into(),
        message,
    }
}

impl MoeLora {
    /// The strategy with keys `p`, experts drawn from `seed`.
    pub fn new(p: MoeLoraParams, seed: u64) -> Self {
        Self {
            p,
            seed,
            ..Self::default()
        }
    }

    /// The routing table so far ([module docs](self)).
    pub fn routing(&self) -> &[Vec<Vec<f64>>] {
        &self.routing
    }

    /// `model` with `groups` expert groups on every layer its adapters (from `lora`,
    /// activation path) target, every group but the last frozen. The adapters' targets, rank,
    /// scale and dropout are kept; their single `lora` adapter is replaced by the pools.
    fn with_groups(&self, model: Model, groups: usize, device: &Device) -> Result<Model> {
        let Some(current) = model.adapters() else {
            return Err(self.no_lora(&model));
        };
        let mut adapters = if current.config.routed {
            current.clone()
        } else {
            Adapters::new(
                current.targets.clone(),
                current.shapes.clone(),
                AdapterConfig {
                    routed: true,
                    top_k: self.p.top_k,
                    balance: self.p.balance,
                    ..current.config.clone()
                },
            )
        };
        while adapters.groups.len() < groups {
            let g = adapters.groups.len() as u64;
            adapters = adapters.freeze_all().grow(
                self.p.experts_per_task,
                engram_core::rng::derive_seed(self.seed, MoeLoraParams::NAME, g, 0),
                device,
            );
        }
        Ok(model.map_adapters(|_| Some(adapters)))
    }

    fn no_lora(&self, model: &Model) -> Error {
        let weight = model.params().iter().any(|i| i.path.contains(".lora."));
        let (message, hint) = if weight {
            (
                "moe-lora builds its experts on the activation-path adapter component, and lora's adapters sit on the weights (path = \"weight\", Burn's LoRA)",
                "set path = \"activation\" in the [[memory]] type = \"lora\" entry",
            )
        } else {
            (
                "moe-lora grows a pool of LoRA experts on the layers lora adapts, and the model has no adapters",
                "add [[memory]] type = \"lora\" with path = \"activation\" to the config",
            )
        };
        match &self.src {
            Some(src) => src.key_error("type", message.into(), Some(hint.into())),
            None => err(format!("{message}: {hint}")),
        }
    }

    /// The share of top-k choices each expert group got on up to `routing_samples` training
    /// inputs of task `task`, under `model` (evaluation: no dropout, no graph).
    fn route_shares(&self, cx: &TaskContext<'_>, model: &Model, task: usize) -> Vec<f64> {
        let Some(adapters) = model.adapters() else {
            return Vec::new();
        };
        let mut refs: Vec<SampleRef> = cx.stream.tasks[task]
            .train
            .iter()
            .map(|&i| SampleRef {
                task: task as u16,
                index: i,
            })
            .collect();
        if self.p.routing_samples > 0 {
            refs.truncate(self.p.routing_samples);
        }
        let inner = cx.device.clone().inner();
        adapters.record(true);
        // Small chunks: a language model's forward gives logits over its vocabulary per token.
        for chunk in refs.chunks(16) {
            let b = cx.stream.batch(chunk, Part::Train, cx.task.index, &inner);
            let _ = model.forward(b.input(), &ForwardCtx::evaluation(None));
        }
        let counts = adapters.record(false).unwrap_or_default();
        let mut shares = vec![0.0; adapters.groups.len()];
        let mut start = 0;
        for (g, &n) in adapters.groups.iter().enumerate() {
            shares[g] = counts
                .iter()
                .map(|layer| layer[start..start + n].iter().sum::<f64>())
                .sum();
            start += n;
        }
        let total: f64 = shares.iter().sum();
        if total > 0.0 {
            shares.iter_mut().for_each(|s| *s /= total);
        }
        shares
    }
}

impl ForgettingStrategy for MoeLora {
    fn name(&self) -> &str {
        MoeLoraParams::NAME
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let t = cx.task.index;
        let model = std::mem::replace(cx.model, Model::new(Vec::new(), 0));
        let grown = self.with_groups(model.clone(), t + 1, cx.device);
        match grown {
            Ok(m) => {
                // Terms left by forwards outside a step (another strategy's after-task pass).
                let _ = m.take_aux_loss();
                *cx.model = m;
                self.groups = self.groups.max(t + 1);
                Ok(())
            }
            Err(e) => {
                *cx.model = model;
                Err(e)
            }
        }
    }

    fn penalty(&self, model: &Model, _cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        if self.p.balance <= 0.0 {
            return None;
        }
        model.take_aux_loss()
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let model = cx.model.valid();
        let row = (0..=cx.task.index)
            .map(|j| self.route_shares(cx, &model, j))
            .collect();
        self.routing.truncate(cx.task.index);
        self.routing.push(row);
        Ok(())
    }

    fn owns(&self) -> Option<&'static str> {
        Some(crate::lora::ADAPTERS)
    }

    fn memory_refusal(
        &self,
        memory: &[engram_core::config::StrategyEntry],
    ) -> Option<engram_core::strategy::MemoryRefusal> {
        use crate::lora::{AdapterPath, Merge};
        crate::lora::needs_lora(
            memory,
            MoeLoraParams::NAME,
            "grows a pool of LoRA experts on the layers lora adapts",
            |l| {
                if l.params().quantize != crate::lora::Quantize::None {
                    Err((
                    "moe-lora builds its experts on the activation-path adapter component, and this lora entry quantizes the base (quantize, QLoRA), which only Burn's weight-path adapter takes".into(),
                    "remove quantize from the [[memory]] type = \"lora\" entry and set path = \"activation\" there".into(),
                ))
                } else if l.path() != AdapterPath::Activation {
                    Err((
                    "moe-lora builds its experts on the activation-path adapter component, and this lora entry puts its adapters on the weights (path = \"weight\", Burn's LoRA: the default without dropout)".into(),
                    "set path = \"activation\" in the [[memory]] type = \"lora\" entry".into(),
                ))
                } else if l.params().merge == Merge::Task {
                    Err((
                    "lora's merge = \"task\" would merge the experts into the weights at each task's end, and a routed mixture has no merged weight".into(),
                    "set merge = \"none\" (or leave it out) in the [[memory]] type = \"lora\" entry".into(),
                ))
                } else {
                    Ok(())
                }
            },
        )
    }

    fn lm_refusal(&self) -> Option<engram_core::strategy::LmRefusal> {
        // The router and the balance term read the layers' inputs only; the routing table
        // runs training windows through the model as they are.
        None
    }

    fn rebuild_model(&self, model: Model, device: &Device) -> Result<Model> {
        if self.groups == 0 {
            return Ok(model);
        }
        self.with_groups(model, self.groups, device)
    }

    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "experts_per_task": self.p.experts_per_task,
            "top_k": self.p.top_k,
            "balance": self.p.balance,
            "experts": self.groups * self.p.experts_per_task,
            "routing": self.routing,
            "routing_definition": "routing[t][j][g]: after task t, on training inputs of task j, the share of the router's top-k choices (all adapted layers and tokens) that went to the experts added at task g",
        }))
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({ "groups": self.groups, "routing": self.routing }),
            ..StrategyState::default()
        })
    }

    fn load_state(&mut self, state: StrategyState, _device: &Device) -> Result<()> {
        self.groups = state
            .meta
            .get("groups")
            .and_then(|g| g.as_u64())
            .unwrap_or(0) as usize;
        self.routing = state
            .meta
            .get("routing")
            .map(|r| serde_json::from_value(r.clone()))
            .transpose()
            .map_err(|e| err(format!("saved routing table: {e}")))?
            .unwrap_or_default();
        Ok(())
    }
}

fn build(src: &ParamSource, cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: MoeLoraParams = src.parse()?;
    for (key, v) in [("experts_per_task", p.experts_per_task), ("top_k", p.top_k)] {
        if v == 0 {
            return Err(src.key_error(
                key,
                format!("{key} must be at least 1"),
                Some(format!("{key} = 2")),
            ));
        }
    }
    let tasks = cx.num_tasks.max(1);
    if p.experts_per_task.saturating_mul(tasks) > MAX_POOL {
        return Err(src.key_error(
            "experts_per_task",
            format!(
                "experts_per_task = {} over {tasks} tasks would give each adapted layer a pool \
                 of {} experts, above the {MAX_POOL} this strategy takes",
                p.experts_per_task,
                p.experts_per_task.saturating_mul(tasks)
            ),
            Some(format!(
                "experts_per_task = {} at most (mixtures of LoRA experts use 2 to 8 a task)",
                MAX_POOL / tasks
            )),
        ));
    }
    if !(p.balance.is_finite() && p.balance >= 0.0) {
        return Err(src.key_error(
            "balance",
            format!("balance must be a number ≥ 0, not {}", p.balance),
            Some("balance = 0.01 (Fedus et al. 2022)".into()),
        ));
    }
    let mut s = MoeLora::new(p, cx.seed);
    s.src = Some(src.clone());
    Ok(Box::new(s))
}

engram_core::component!(forgetting "moe-lora", "MoE-LoRA: a pool of LoRA experts per adapted layer with a top-k router and a load-balancing loss, new experts per task, earlier ones frozen (Dou et al. 2023; Yu et al. 2024); with lora path = \"activation\"", MoeLoraParams, build);
