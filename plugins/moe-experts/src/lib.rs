//! # moe-experts: a mixture-of-experts strategy as an engram plugin
//!
//! An architectural answer to forgetting: every task gets parameters of its own.
//!
//! - Before task `t` the strategy adds **expert `t`**, a small MLP from the input to the logits
//!   (`expert_hidden` wide), and trains only it: the experts of finished tasks are **frozen**
//!   (their weights are detached in the forward pass, so they receive no gradient and cannot
//!   forget).
//! - A **router** (an MLP from the input to one score per task) mixes the experts:
//!   `p(y | x) = Σ_e g_e(x) · softmax(expert_e(x))_y` with `g = softmax(router(x))` over the
//!   experts added so far (a gated mixture, Jacobs et al. 1991); the model's output is
//!   `log p(y | x)`, so the trainer's cross-entropy is the mixture's negative log-likelihood.
//! - When the task is known (training, and evaluation in task-incremental streams) the sample
//!   goes to its task's expert alone (`g = one-hot(t)`).
//! - The router is the one shared part, so it is the part that can forget. It is trained as a
//!   task classifier, by the strategy's penalty, on `router_batch` samples per step drawn from a
//!   small memory holding `router_samples` training samples of every task seen (this task's
//!   included): replay of router inputs, `router_weight × cross-entropy(router(x), task)`.
//!
//! Costs: parameters grow by one expert per task (`expert_hidden · (d_in + classes)` each), and
//! every class-incremental prediction runs every expert. The memory holds sample indices only.
//!
//! The strategy replaces the configured model by a single [`MoeBlock`] at the first task, so the
//! `[model]` section only sets the input (its hidden sizes are unused). Checkpoints save the
//! experts' count in the strategy state; [`ForgettingStrategy::rebuild_model`] re-creates the
//! block before the saved weights are loaded, so `resume`, `eval` and `export` work.

use engram_core::burn;
use engram_core::burn::module::{Module, Param};
use engram_core::burn::nn::Linear;
use engram_core::burn::tensor::activation::{log_softmax, relu, softmax};
use engram_core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram_core::config::ParamSource;
use engram_core::data::stream::{Part, SampleRef};
use engram_core::model::mlp::init_linear;
use engram_core::model::{Activation, Block, DynBlock, ForwardCtx, Model};
use engram_core::plugin::Registrar;
use engram_core::registry::BuildContext;
use engram_core::rng;
use engram_core::strategy::{BatchContext, ForgettingStrategy, StrategyState, TaskContext};
use engram_core::{Error, Result};
use rand::Rng as _;
use serde::{Deserialize, Serialize};

// ANCHOR: params
/// `[[forgetting]] type = "moe-experts"` parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MoeParams {
    /// Hidden width of each expert (one hidden layer, ReLU).
    pub expert_hidden: usize,
    /// Hidden width of the router.
    pub router_hidden: usize,
    /// Training samples of each task kept to train the router (indices only).
    pub router_samples: usize,
    /// Router-memory samples in the router's loss at each step.
    pub router_batch: usize,
    /// Weight of the router's cross-entropy in the loss.
    pub router_weight: f64,
}

impl Default for MoeParams {
    fn default() -> Self {
        Self {
            expert_hidden: 128,
            router_hidden: 256,
            router_samples: 100,
            router_batch: 128,
            router_weight: 1.0,
        }
    }
}
// ANCHOR_END: params

// ANCHOR: block
/// A two-layer perceptron: `[batch, d_in] → [batch, d_out]`.
#[derive(Module, Debug)]
pub struct Mlp2 {
    /// `[d_in, hidden]`.
    pub hidden: Linear,
    /// `[hidden, d_out]`.
    pub out: Linear,
}

impl Mlp2 {
    fn new(d_in: usize, hidden: usize, d_out: usize, rng: &mut rng::Rng, device: &Device) -> Self {
        Self {
            hidden: init_linear(d_in, hidden, rng, device),
            out: init_linear(hidden, d_out, rng, device),
        }
    }

    /// The forward pass; with `frozen`, the weights are detached (no gradient reaches them).
    pub fn forward(&self, x: Tensor<2>, frozen: bool) -> Tensor<2> {
        let lin = |l: &Linear, x: Tensor<2>| {
            let (mut w, mut b) = (l.weight.val(), l.bias.as_ref().map(Param::val));
            if frozen {
                w = w.detach();
                b = b.map(Tensor::detach);
            }
            let y = x.matmul(w);
            match b {
                Some(b) => y + b.unsqueeze(),
                None => y,
            }
        };
        lin(&self.out, relu(lin(&self.hidden, x)))
    }
}

/// The whole model of a `moe-experts` run: experts, one per task so far, and the router.
#[derive(Module, Debug)]
pub struct MoeBlock {
    /// Expert `e` serves task `e`: `[batch, d_in] → [batch, classes]`.
    pub experts: Vec<Mlp2>,
    /// `[batch, d_in] → [batch, max_experts]` task scores.
    pub router: Mlp2,
    /// Experts `0..frozen` belong to finished tasks.
    #[module(skip)]
    pub frozen: usize,
}

impl MoeBlock {
    /// Router scores of the experts that exist, `[batch, experts]`.
    pub fn router_logits(&self, x: Tensor<2>) -> Tensor<2> {
        let n = self.experts.len();
        let s = self.router.forward(x, false);
        let [b, _] = s.dims();
        s.slice([0..b, 0..n])
    }
}

impl Block for MoeBlock {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = x.into_flat();
        let n = self.experts.len();
        let expert = |e: usize| self.experts[e].forward(x.clone(), e < self.frozen);
        // The task is known: its expert alone.
        if let Some(t) = ctx.task.filter(|&t| t < n) {
            return Activation::Flat(log_softmax(expert(t), 1));
        }
        // Otherwise the gated mixture, in probability space: log Σ_e g_e · softmax(expert_e).
        let gate = softmax(self.router_logits(x.clone()).detach(), 1);
        let [b, _] = gate.dims();
        let mut p: Option<Tensor<2>> = None;
        for e in 0..n {
            let g = gate.clone().slice([0..b, e..e + 1]);
            let term = softmax(expert(e), 1) * g;
            p = Some(match p {
                Some(p) => p + term,
                None => term,
            });
        }
        let p = p.expect("at least one expert");
        Activation::Flat(p.clamp_min(1e-12).log())
    }

    fn kind(&self) -> &'static str {
        "moe"
    }
}
// ANCHOR_END: block

/// The `moe-experts` strategy (see the crate docs).
pub struct MoeExperts {
    p: MoeParams,
    num_tasks: usize,
    num_classes: usize,
    d_in: usize,
    experts: usize,
    /// Router memory: `router_samples` training samples per task seen.
    memory: Vec<SampleRef>,
}

fn moe(model: &Model) -> Result<&MoeBlock> {
    model
        .blocks()
        .first()
        .and_then(|b| b.downcast_ref::<MoeBlock>())
        .ok_or_else(|| Error::Strategy {
            strategy: "moe-experts".into(),
            message: "the model is not a mixture of experts (another strategy replaced it?)".into(),
        })
}

impl MoeExperts {
    fn new_expert(&self, e: usize, seed: u64, device: &Device) -> Mlp2 {
        let mut r = rng::stream(seed, "moe-expert", e as u64, 0);
        Mlp2::new(
            self.d_in,
            self.p.expert_hidden,
            self.num_classes,
            &mut r,
            device,
        )
    }

    /// A block with `experts` experts (weights to be loaded or freshly drawn) and the router.
    fn block(&self, seed: u64, device: &Device) -> MoeBlock {
        let mut r = rng::stream(seed, "moe-router", 0, 0);
        MoeBlock {
            experts: (0..self.experts)
                .map(|e| self.new_expert(e, seed, device))
                .collect(),
            router: Mlp2::new(
                self.d_in,
                self.p.router_hidden,
                self.num_tasks.max(1),
                &mut r,
                device,
            ),
            frozen: self.experts.saturating_sub(1),
        }
    }
}

// ANCHOR: strategy
impl ForgettingStrategy for MoeExperts {
    fn name(&self) -> &str {
        "moe-experts"
    }

    /// Adds expert `t` (replacing the configured model by a [`MoeBlock`] at the first task),
    /// freezes the earlier ones, and stores `router_samples` of the task for the router.
    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let t = cx.task.index;
        self.d_in = cx.stream.dataset.input.features();
        let device = cx.device.clone();
        if self.experts == 0 {
            self.experts = 1;
            let block = self.block(cx.seed, &device);
            *cx.model = Model::new(vec![DynBlock::new(block)], self.num_classes);
        } else {
            let mut block = moe(cx.model)?.clone();
            block
                .experts
                .push(self.new_expert(block.experts.len(), cx.seed, &device));
            block.frozen = block.experts.len() - 1;
            self.experts = block.experts.len();
            cx.model.replace_block(0, |_| DynBlock::new(block));
        }
        debug_assert_eq!(self.experts, t + 1);
        let mut refs = cx.train_refs();
        let mut r = rng::stream(cx.seed, "moe-memory", t as u64, 0);
        let order = rng::permutation(refs.len(), &mut r);
        refs = order
            .iter()
            .take(self.p.router_samples)
            .map(|&i| refs[i])
            .collect();
        self.memory.extend(refs);
        Ok(())
    }

    /// The router's cross-entropy on a draw from the router memory.
    fn penalty(&self, model: &Model, cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        let block = moe(model).ok()?;
        if self.memory.is_empty() || self.p.router_weight == 0.0 || block.experts.len() < 2 {
            return None;
        }
        let mut r = rng::stream(
            cx.seed,
            "moe-router-batch",
            cx.position.global_step as u64,
            0,
        );
        let n = self.p.router_batch.min(self.memory.len()).max(1);
        let refs: Vec<SampleRef> = (0..n)
            .map(|_| self.memory[r.random_range(0..self.memory.len())])
            .collect();
        let batch = cx
            .stream
            .batch(&refs, Part::Train, cx.position.task, cx.device);
        let tasks: Vec<i64> = refs.iter().map(|s| i64::from(s.task)).collect();
        let y = Tensor::<1, Int>::from_data(TensorData::new(tasks, [n]), cx.device);
        let logp = log_softmax(
            block.router_logits(Activation::from(batch.x).into_flat()),
            1,
        );
        let nll = logp.gather(1, y.unsqueeze_dim(1)).mean().neg();
        Some(nll.mul_scalar(self.p.router_weight * cx.controls.reg_scale))
    }

    fn rebuild_model(&self, model: Model, device: &Device) -> Result<Model> {
        if self.experts == 0 {
            return Ok(model);
        }
        // Weights are loaded next; the seed only fills them until then.
        Ok(Model::new(
            vec![DynBlock::new(self.block(0, device))],
            self.num_classes,
        ))
    }
    // ANCHOR_END: strategy

    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({
                "experts": self.experts,
                "d_in": self.d_in,
                "memory": self.memory.iter().map(|s| [u64::from(s.task), u64::from(s.index)]).collect::<Vec<_>>(),
            }),
            tensors: Default::default(),
        })
    }

    fn load_state(&mut self, state: StrategyState, _device: &Device) -> Result<()> {
        let bad = || Error::Strategy {
            strategy: "moe-experts".into(),
            message: "saved state is incomplete".into(),
        };
        self.experts = state.meta["experts"].as_u64().ok_or_else(bad)? as usize;
        self.d_in = state.meta["d_in"].as_u64().ok_or_else(bad)? as usize;
        self.memory = state.meta["memory"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|p| {
                Some(SampleRef {
                    task: u16::try_from(p.get(0)?.as_u64()?).ok()?,
                    index: u32::try_from(p.get(1)?.as_u64()?).ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        Ok(())
    }
}

fn build(src: &ParamSource, cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: MoeParams = src.parse()?;
    for (key, v) in [
        ("expert_hidden", p.expert_hidden),
        ("router_hidden", p.router_hidden),
        ("router_batch", p.router_batch),
    ] {
        if v == 0 {
            return Err(src.key_error(key, format!("`{key}` must be at least 1"), None));
        }
    }
    Ok(Box::new(MoeExperts {
        p,
        num_tasks: cx.num_tasks,
        num_classes: cx.num_classes,
        d_in: 0,
        experts: 0,
        memory: Vec::new(),
    }))
}

// ANCHOR: register
fn register(r: &mut Registrar) -> Result<()> {
    r.add(engram_core::registration!(
        forgetting "moe-experts",
        "mixture of experts: one expert per task, frozen when it ends, a replayed router (plugin)",
        MoeParams,
        build
    ));
    Ok(())
}

engram_core::declare_plugin!(register);
// ANCHOR_END: register

#[cfg(test)]
mod tests {
    use super::*;

    fn block(experts: usize, frozen: usize) -> MoeBlock {
        block_on(experts, frozen, &Device::flex())
    }

    fn block_on(experts: usize, frozen: usize, d: &Device) -> MoeBlock {
        let mut r = rng::stream(1, "t", 0, 0);
        MoeBlock {
            experts: (0..experts)
                .map(|_| Mlp2::new(4, 3, 5, &mut r, d))
                .collect(),
            router: Mlp2::new(4, 3, 3, &mut r, d),
            frozen,
        }
    }

    fn x(device: &Device) -> Tensor<2> {
        Tensor::from_data(
            TensorData::new(
                (0..8).map(|i| i as f32 * 0.1 - 0.3).collect::<Vec<_>>(),
                [2, 4],
            ),
            device,
        )
    }

    /// The mixture's output is a log-distribution, equal by hand to log Σ g_e softmax(expert_e).
    #[test]
    fn mixture_is_the_gated_sum_of_expert_distributions() {
        let d = Device::flex();
        let b = block(2, 1);
        let out = Block::forward(&b, Activation::Flat(x(&d)), &ForwardCtx::default()).into_flat();
        let probs: Vec<f32> = out.clone().exp().into_data().try_to_vec().unwrap();
        for row in probs.chunks(5) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        let g = softmax(b.router_logits(x(&d)), 1);
        let e0 = softmax(b.experts[0].forward(x(&d), false), 1);
        let e1 = softmax(b.experts[1].forward(x(&d), false), 1);
        let [n, _] = g.dims();
        let by_hand = e0 * g.clone().slice([0..n, 0..1]) + e1 * g.slice([0..n, 1..2]);
        let diff = (out.exp() - by_hand).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-6, "{diff}");
        // With the task known, only that expert answers.
        let t1 =
            Block::forward(&b, Activation::Flat(x(&d)), &ForwardCtx::training(Some(1))).into_flat();
        let e1 = log_softmax(b.experts[1].forward(x(&d), false), 1);
        assert!((t1 - e1).abs().max().into_scalar::<f32>() < 1e-6);
    }

    /// Frozen experts get no gradient; the current one does.
    #[test]
    fn frozen_experts_receive_no_gradient() {
        let ad = Device::flex().autodiff();
        let b = block_on(2, 1, &ad);
        let out = Block::forward(&b, Activation::Flat(x(&ad)), &ForwardCtx::default()).into_flat();
        let grads = out.sum().backward();
        assert!(b.experts[0].hidden.weight.grad(&grads).is_none());
        assert!(b.experts[1].hidden.weight.grad(&grads).is_some());
    }

    #[test]
    fn parameters_are_checked() {
        let cx = BuildContext::default();
        let e = build(&ParamSource::from_toml("expert_hidden = 0"), &cx)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("`expert_hidden` must be at least 1"),
            "{e}"
        );
    }
}
