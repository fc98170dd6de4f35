//! Low-rank adapters on the activation path: engram's one adapter component.
//!
//! A targeted linear layer `y = x·W₀ + b` (`W₀ [d_in, d_out]`) computes, with adapters,
//!
//! ```text
//! y = x·W₀ + b + (α/r) · Σₑ gₑ(x) · drop(x)·Aₑ·Bₑ        Aₑ [d_in, r], Bₑ [r, d_out]
//! ```
//!
//! beside the frozen layer rather than inside its weight (Burn's `apply_lora` reparameterizes
//! the weight itself, `W₀ + (α/r)·A·B`, and allows one adapter per weight and nothing on the
//! path). That is what the methods Burn's adapter cannot carry need:
//!
//! - **adapter dropout** (`drop`, PEFT's `lora_dropout`; Hu et al. 2021 use 0.1 on GPT-2):
//!   dropout on the adapter's input only, the frozen path untouched;
//! - **several adapters on one weight** (`gₑ = 1`: their updates summed);
//! - **a router's mixture** (`gₑ(x)`: per token, the softmax of the router logits `x·R`
//!   (`R [d_in, E]`) over the `top_k` largest, 0 elsewhere — the top-k gating of Shazeer et
//!   al. 2017, eq. 3–5, as Mixtral renormalises it over the chosen experts), with the
//!   load-balancing loss of Fedus et al. 2022 ("Switch Transformers", eq. 4), `E·Σₑ fₑ·Pₑ`:
//!   `fₑ` the fraction of the layer's tokens that chose expert `e` among their top `k`
//!   (divided by `k`), `Pₑ` the mean router probability of `e` over all `E` experts.
//!
//! The component ([`Adapters`]) is a part of the [`Model`](super::Model) (its parameters sit
//! under `adapters.` beside `blocks.`, so the optimiser, checkpoints, the memory accounting and
//! mixed precision see them as every other parameter), and a block's linear layers reach it
//! through [`ForwardCtx::linear`]: `bert`, `llama`, `vit` and `mlp` route every linear layer
//! through it. Strategies configure it: `lora` with `path = "activation"` (one adapter per
//! target, with dropout), `moe-lora` (a pool of experts and a router per target, grown by task).
//! Experts are added in groups; a group's parameters (its `A`, `B` and router columns) are
//! frozen together with Burn's `require_grad` flags, so a frozen group holds no gradient and no
//! optimiser state.

use super::ForwardCtx;
use super::nodes::softmax_last;
use burn::module::{Module, Param, ParamId};
use burn::nn::Linear;
use burn::tensor::{Distribution, Tensor};
use std::sync::{Arc, Mutex};

/// One low-rank adapter: `A [d_in, r]` drawn from `N(0, σ = 1/r)` (Burn's LoRA), `B [r, d_out]`
/// zero, so that a new adapter leaves the layer's output unchanged.
#[derive(Module, Debug)]
pub struct LowRank {
    /// Down-projection `[d_in, r]`.
    pub a: Param<Tensor<2>>,
    /// Up-projection `[r, d_out]`.
    pub b: Param<Tensor<2>>,
}

/// The adapters of one targeted linear layer: its experts (all of rank `r`) and, when it is a
/// mixture, the router's columns, one `[d_in, group size]` block per group of experts.
#[derive(Module, Debug)]
pub struct LayerAdapters {
    /// The experts, in the order their groups were added.
    pub experts: Vec<LowRank>,
    /// The router's weight, one column block per group (empty: no router, every expert's
    /// update is added).
    pub router: Vec<Param<Tensor<2>>>,
}

/// `parts` side by side along `dim`; a single part as it is (no copy: the common one-adapter
/// case runs every forward).
fn joined(mut parts: Vec<Tensor<2>>, dim: usize) -> Tensor<2> {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    Tensor::cat(parts, dim)
}

impl LayerAdapters {
    /// The experts' factors side by side: `A` `[d_in, E·r]` and `B` `[E·r, d_out]`.
    fn factors(&self) -> (Tensor<2>, Tensor<2>) {
        (
            joined(self.experts.iter().map(|e| e.a.val()).collect(), 1),
            joined(self.experts.iter().map(|e| e.b.val()).collect(), 0),
        )
    }
}

/// How the component computes (the same for every layer).
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterConfig {
    /// The scale `α/r` of each expert's update.
    pub scale: f64,
    /// The rank `r` of each expert.
    pub rank: usize,
    /// Dropout probability on the adapters' input during training, in `[0, 1)`.
    pub dropout: f64,
    /// Experts a token uses when the layer has a router (clamped to the experts there are).
    pub top_k: usize,
    /// Whether the layers have routers (a mixture) or sum their experts.
    pub routed: bool,
    /// The load-balancing loss is collected (for a strategy to add to the training loss,
    /// [`Adapters::take_balance`]) when this is above 0.
    pub balance: f64,
}

/// What the forward passes leave for the strategies: the load-balancing terms of the training
/// forwards since the last [`Adapters::take_balance`], and, while recording, how many tokens
/// chose each expert.
#[derive(Debug, Default)]
struct Sink {
    balance: Vec<Tensor<1>>,
    /// `Some([layer][expert])` token counts while recording.
    counts: Option<Vec<Vec<f64>>>,
}

/// Every activation-path adapter of a model (see the module docs): one [`LayerAdapters`] per
/// targeted linear layer, the layer named by its block and its path inside the block.
#[derive(Module, Debug)]
pub struct Adapters {
    /// The layers' adapters, in the order of `targets`.
    pub layers: Vec<LayerAdapters>,
    /// For each layer: its block's index and its module path in the block
    /// (`attention.query`), as [`ForwardCtx::linear`] names it.
    #[module(skip)]
    pub targets: Vec<(usize, String)>,
    /// The layers' shapes `[d_in, d_out]`, in the order of `targets`.
    #[module(skip)]
    pub shapes: Vec<[usize; 2]>,
    /// How they compute.
    #[module(skip)]
    pub config: AdapterConfig,
    /// Experts per group, in the order the groups were added.
    #[module(skip)]
    pub groups: Vec<usize>,
    #[module(skip)]
    sink: Arc<Mutex<Sink>>,
}

impl Adapters {
    /// An empty component for the linear layers `targets` (block index, path in the block)
    /// of shapes `shapes` `[d_in, d_out]`; [`Adapters::grow`] adds experts.
    pub fn new(
        targets: Vec<(usize, String)>,
        shapes: Vec<[usize; 2]>,
        config: AdapterConfig,
    ) -> Self {
        Self {
            layers: targets
                .iter()
                .map(|_| LayerAdapters {
                    experts: Vec::new(),
                    router: Vec::new(),
                })
                .collect(),
            targets,
            shapes,
            config,
            groups: Vec::new(),
            sink: Arc::default(),
        }
    }

    /// Adds a group of `experts` experts to every layer (`A ~ N(0, σ = 1/r)`, `B = 0`, and,
    /// for a router, columns `~ N(0, σ = 1/√d_in)`), drawn on `device` from `seed`, trainable.
    pub fn grow(mut self, experts: usize, seed: u64, device: &burn::tensor::Device) -> Self {
        let group = self.groups.len() as u64;
        let r = self.config.rank;
        for (l, (layer, &[d_in, d_out])) in self.layers.iter_mut().zip(&self.shapes).enumerate() {
            device.seed(crate::rng::derive_seed(seed, "adapters", group, l as u64));
            for _ in 0..experts {
                let a = Tensor::<2>::random(
                    [d_in, r],
                    Distribution::Normal(0.0, 1.0 / r as f64),
                    device,
                );
                layer.experts.push(LowRank {
                    a: Param::from_tensor(a),
                    b: Param::from_tensor(Tensor::zeros([r, d_out], device)),
                });
            }
            if self.config.routed {
                let std = 1.0 / (d_in as f64).sqrt();
                let w =
                    Tensor::<2>::random([d_in, experts], Distribution::Normal(0.0, std), device);
                layer.router.push(Param::from_tensor(w));
            }
        }
        self.groups.push(experts);
        self
    }

    /// Freezes every expert (and router block) of the groups there are now: they keep their
    /// values and get no gradient and no optimiser state.
    pub fn freeze_all(self) -> Self {
        self.no_grad()
    }

    /// The ids of every parameter of group `g` (its experts' `A`, `B` and its router block).
    pub fn group_ids(&self, g: usize) -> Vec<ParamId> {
        let start: usize = self.groups[..g].iter().sum();
        let end = start + self.groups[g];
        let mut ids = Vec::new();
        for layer in &self.layers {
            for e in &layer.experts[start..end] {
                ids.push(e.a.id);
                ids.push(e.b.id);
            }
            if let Some(r) = layer.router.get(g) {
                ids.push(r.id);
            }
        }
        ids
    }

    /// The experts each layer has (the sum of the groups).
    pub fn experts(&self) -> usize {
        self.groups.iter().sum()
    }

    /// The index of the layer at block `block`, path `path`, if it is adapted.
    pub fn find(&self, block: usize, path: &str) -> Option<usize> {
        self.targets
            .iter()
            .position(|(b, p)| *b == block && p == path)
    }

    /// The load-balancing terms collected since the last call, summed and divided by the
    /// number of adapted layers (so a coefficient means the same on any depth), times
    /// [`AdapterConfig::balance`]; `None` when none was collected. A plain step collects every
    /// layer's term; a checkpointed step collects its last segment's with the loss and each
    /// recomputed segment's with that segment's backward (see the `checkpoint` strategy).
    pub fn take_balance(&self) -> Option<Tensor<1>> {
        let terms = std::mem::take(&mut self.sink.lock().ok()?.balance);
        let sum = terms.into_iter().reduce(|a, b| a + b)?;
        Some(sum.mul_scalar(self.config.balance / self.layers.len().max(1) as f64))
    }

    /// Starts (`true`) or stops counting which experts the tokens choose; stopping returns
    /// the counts `[layer][expert]` (tokens that had the expert among their top `k`).
    pub fn record(&self, on: bool) -> Option<Vec<Vec<f64>>> {
        let mut s = self.sink.lock().ok()?;
        if on {
            s.counts = Some(vec![vec![0.0; self.experts()]; self.layers.len()]);
            None
        } else {
            s.counts.take()
        }
    }

    /// The update the adapters of layer `l` add to the layer's output for input `x`
    /// `[…, d_in]` → `[…, d_out]`; `training` turns dropout and the load-balancing term on.
    pub fn delta<const D: usize>(
        &self,
        l: usize,
        x: Tensor<D>,
        ctx: &ForwardCtx,
    ) -> Option<Tensor<D>> {
        let layer = &self.layers[l];
        if layer.experts.is_empty() {
            return None;
        }
        let dims = x.dims();
        let d_in = dims[D - 1];
        let n = x.shape().num_elements() / d_in.max(1);
        let x2: Tensor<2> = x.reshape([n, d_in]);
        let training = !ctx.evaluation;
        let xd = if training && self.config.dropout > 0.0 {
            burn::nn::DropoutConfig::new(self.config.dropout)
                .init()
                .forward(x2.clone())
        } else {
            x2.clone()
        };
        let (a, b) = layer.factors();
        let mut h = xd.matmul(a);
        if self.config.routed && !layer.router.is_empty() {
            let e = layer.experts.len();
            let r = self.config.rank;
            let w = joined(layer.router.iter().map(|p| p.val()).collect(), 1);
            let logits = x2.matmul(w);
            let k = self.config.top_k.clamp(1, e);
            let kth = logits.clone().topk(k, 1).slice([0..n, k - 1..k]);
            let chosen = logits.clone().greater_equal(kth.expand([n, e]));
            let gates = softmax_last(
                logits
                    .clone()
                    .mask_fill(chosen.clone().bool_not(), f32::NEG_INFINITY),
            );
            let balance = training && self.config.balance > 0.0;
            let recording = self.sink.lock().is_ok_and(|s| s.counts.is_some());
            if balance || recording {
                self.route_stats(l, &logits, chosen, ctx, balance);
            }
            let g = gates
                .unsqueeze_dim::<3>(2)
                .expand([n, e, r])
                .reshape([n, e * r]);
            h = h * g;
        }
        let y = h.matmul(b).mul_scalar(self.config.scale);
        let mut out = dims;
        out[D - 1] = self.shapes[l][1];
        Some(y.reshape(out))
    }

    /// The router's statistics of one forward of layer `l`: its load-balancing term (pushed
    /// for [`Adapters::take_balance`] when `balance`) and, while recording, the choice counts;
    /// padding rows (`ctx.token_mask`) left out. `logits` `[n, E]`, `chosen` the top-k mask.
    fn route_stats(
        &self,
        l: usize,
        logits: &Tensor<2>,
        chosen: Tensor<2, burn::tensor::Bool>,
        ctx: &ForwardCtx,
        balance: bool,
    ) {
        let [n, e] = logits.dims();
        let k = self.config.top_k.clamp(1, e);
        // Which rows are real tokens: all, or the block's mask flattened `[n, 1]`.
        let real = ctx
            .token_mask
            .as_ref()
            .filter(|m| m.shape().num_elements() == n)
            .map(|m| m.clone().reshape([n, 1]).float().cast(logits.dtype()));
        let chosen_f = chosen.float().cast(logits.dtype());
        let chosen_f = match &real {
            Some(w) => chosen_f * w.clone(),
            None => chosen_f,
        };
        if balance {
            let tokens = match &real {
                Some(w) => w.clone().sum().detach(),
                None => Tensor::<1>::ones([1], &logits.device())
                    .cast(logits.dtype())
                    .mul_scalar(n as f64),
            };
            let f = chosen_f.clone().detach().sum_dim(0).div_scalar(k as f64)
                / tokens.clone().unsqueeze_dim::<2>(1);
            let probs = softmax_last(logits.clone());
            let probs = match &real {
                Some(w) => probs * w.clone(),
                None => probs,
            };
            let p = probs.sum_dim(0) / tokens.unsqueeze_dim::<2>(1);
            let term = (f * p).sum().mul_scalar(e as f64);
            if let Ok(mut s) = self.sink.lock() {
                s.balance.push(term.cast(burn::tensor::DType::F32));
            }
        }
        if let Ok(mut s) = self.sink.lock()
            && let Some(counts) = s.counts.as_mut()
        {
            let c: Vec<f32> = chosen_f
                .clone()
                .sum_dim(0)
                .cast(burn::tensor::DType::F32)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default();
            for (acc, v) in counts[l].iter_mut().zip(c) {
                *acc += f64::from(v);
            }
        }
    }

    /// `W₀ + (α/r)·Σₑ Aₑ·Bₑ` for layer `l` when it has no router: the weight that computes,
    /// without the adapters, what the layer computes with them (in evaluation, dropout off).
    /// `None` for a routed layer (its update depends on the token) or one without experts.
    pub fn merged_update(&self, l: usize) -> Option<Tensor<2>> {
        let layer = &self.layers[l];
        if self.config.routed || layer.experts.is_empty() {
            return None;
        }
        let (a, b) = layer.factors();
        Some(a.matmul(b).mul_scalar(self.config.scale))
    }
}

impl ForwardCtx {
    /// `layer.forward(x)` plus, when the model carries activation-path adapters on this
    /// block's layer `path` (its module path inside the block, `attention.query`), their
    /// update ([`Adapters::delta`]). `x` `[…, d_in]` → `[…, d_out]`. Every built-in block calls
    /// its linear layers through this.
    pub fn linear<const D: usize>(&self, layer: &Linear, path: &str, x: Tensor<D>) -> Tensor<D> {
        let Some(adapters) = self.adapters.as_deref() else {
            return layer.forward(x);
        };
        let Some(l) = adapters.find(self.block, path) else {
            return layer.forward(x);
        };
        let y = layer.forward(x.clone());
        match adapters.delta(l, x, self) {
            Some(d) => y + d,
            None => y,
        }
    }
}

/// A linear layer that can take activation-path adapters: its module path (`blocks.2.
/// attention.query`), its block, its path inside the block (`attention.query`) and its weight's
/// shape `[d_in, d_out]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearLayer {
    /// The module path in the model (the weight's path without `.weight`).
    pub path: String,
    /// The block's index.
    pub block: usize,
    /// The path inside the block, as the block names it to [`ForwardCtx::linear`].
    pub local: String,
    /// The weight's shape `[d_in, d_out]`.
    pub shape: [usize; 2],
}

/// Every Burn `Linear` of `model`'s blocks that a forward reaches through
/// [`ForwardCtx::linear`]: the linear layers of the built-in blocks, except those inside
/// Burn's `MultiHeadAttention` (the ViT's attention projections, which Burn calls itself). A
/// plugin block's linear layers take adapters when its forward calls [`ForwardCtx::linear`]
/// with their path.
pub fn linear_layers(model: &super::Model) -> Vec<LinearLayer> {
    struct V {
        path: Vec<(String, String)>,
        out: Vec<LinearLayer>,
    }
    impl burn::module::ModuleVisitor for V {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.path
                .push((name.to_string(), container_type.to_string()));
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let Some((last, container)) = self.path.last() else {
                return;
            };
            if D != 2 || last != "weight" || container != "Struct:Linear" {
                return;
            }
            if self
                .path
                .iter()
                .any(|(_, c)| c.ends_with("MultiHeadAttention"))
            {
                return;
            }
            let names: Vec<&str> = self.path.iter().map(|(n, _)| n.as_str()).collect();
            if names.len() < 4 || names[0] != "blocks" {
                return;
            }
            let Ok(block) = names[1].parse::<usize>() else {
                return;
            };
            let dims = param.val().dims();
            self.out.push(LinearLayer {
                path: names[..names.len() - 1].join("."),
                block,
                local: names[2..names.len() - 1].join("."),
                shape: [dims[0], dims[1]],
            });
        }
    }
    let mut v = V {
        path: Vec::new(),
        out: Vec::new(),
    };
    model.visit(&mut v);
    v.out
}
