//! # synaptic-intelligence: an engram plugin
//!
//! Synaptic intelligence (SI; Zenke, Poole & Ganguli, *Continual Learning Through Synaptic
//! Intelligence*, ICML 2017) as a [`ForgettingStrategy`] loaded at run time:
//!
//! ```toml
//! plugins = ["../target/release/libsynaptic_intelligence.so"]   # relative to this file
//! [[forgetting]]
//! type = "si"
//! c = 1.0
//! ```
//!
//! SI estimates each parameter's importance online, from the path the parameter travels while a
//! task is learned, instead of from a Fisher pass after it (EWC):
//!
//! - during task μ, after every optimiser step t: `ω_k += −g_k(t) · (θ_k(t+1) − θ_k(t))`
//!   (the path integral of eq. 3, with `g` the gradient the optimiser applied: the task loss plus
//!   the SI penalty, as in the reference implementations of van de Ven et al. and Avalanche);
//! - at the end of task μ (eq. 5): `Ω_k += max(0, ω_k / ((Δ_k)² + ξ))` with
//!   `Δ_k = θ_k(end of μ) − θ_k(start of μ)`, then `ω ← 0` and the anchor `θ̃ ← θ(end of μ)`. The
//!   clamp at 0 keeps the penalty convex (a parameter whose path integral is negative got no
//!   importance, instead of a negative one);
//! - the loss of every later step adds (eq. 4) `c · Σ_k Ω_k (θ_k − θ̃_k)²`, scaled by the
//!   scheduler's regularisation scale (`update = "gradient"`). As Ω accumulates over tasks, the
//!   penalty's stiffness `2cΩ` outgrows what an SGD step of rate η can follow (`2ηcΩ > 2`
//!   diverges): on Permuted-FMNIST at η = 0.05 with momentum, seed 2 of 3 diverged at task 10
//!   with c = 1. The default `update = "proximal"` therefore applies the penalty exactly after
//!   each optimiser step, `θ ← (θ + 2ηcΩ·θ̃) / (1 + 2ηcΩ)` (the same treatment as engram's EWC),
//!   which is stable for any stiffness.
//!
//! Parameters: `c` (strength, dimensionless; 1.0) and `xi` (damping ξ, in squared parameter
//! units; 0.1). Cost: three elementwise passes over the parameters per step, no extra forward or
//! backward pass. The state (Ω, θ̃, ω, θ at the task start and after the last step) is saved in
//! checkpoints, so a resumed run continues exactly.

use engram_core::burn::tensor::{Device, Tensor};
use engram_core::config::ParamSource;
use engram_core::model::Model;
use engram_core::plugin::Registrar;
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    BatchContext, ForgettingStrategy, StateTensor, StepContext, StrategyState, TaskContext,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// ANCHOR: params
/// `[[forgetting]] type = "si"` parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SiParams {
    /// Strength `c` of the penalty `c · Σ Ω (θ − θ̃)²` (dimensionless).
    pub c: f64,
    /// Damping ξ of `Ω = ω / (Δ² + ξ)` (squared parameter units), which keeps a parameter that
    /// hardly moved from getting an unbounded importance.
    pub xi: f64,
    /// How the penalty acts: `proximal` (default) takes its exact minimiser after each
    /// optimiser step, `gradient` adds it to the loss as in the paper (see the crate docs).
    pub update: Update,
}

/// How the penalty is applied.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Update {
    /// After each optimiser step with learning rate η:
    /// `θ ← (θ + 2ηcΩ·θ̃) / (1 + 2ηcΩ)`, the minimiser of `½‖θ − θ_step‖² + η·c·Ω(θ − θ̃)²`:
    /// stable for any stiffness.
    Proximal,
    /// The penalty's gradient joins the loss: diverges once `2ηcΩ` exceeds 2 for a parameter.
    Gradient,
}

impl Default for SiParams {
    fn default() -> Self {
        Self {
            c: 1.0,
            xi: 0.1,
            update: Update::Proximal,
        }
    }
}
// ANCHOR_END: params

/// Per-parameter tensors, each `[numel]`, keyed by the parameter's dotted path.
type PerParam = BTreeMap<String, Tensor<1>>;

/// The SI strategy (see the crate docs).
pub struct Si {
    p: SiParams,
    /// Ω: consolidated importance of finished tasks.
    omega: PerParam,
    /// θ̃: the parameters at the end of the last finished task.
    anchor: PerParam,
    /// ω: the running path integral of the current task.
    path: PerParam,
    /// θ at the start of the current task.
    start: PerParam,
    /// θ after the previous step.
    prev: PerParam,
}

impl Si {
    /// A fresh SI with parameters `p`.
    pub fn new(p: SiParams) -> Self {
        Self {
            p,
            omega: PerParam::new(),
            anchor: PerParam::new(),
            path: PerParam::new(),
            start: PerParam::new(),
            prev: PerParam::new(),
        }
    }

    fn values(model: &Model) -> PerParam {
        model
            .param_values()
            .into_iter()
            .map(|(i, t)| (i.path, t.inner()))
            .collect()
    }

    /// `c · Σ_k Ω_k (θ_k − θ̃_k)²` on `model`'s parameters (a `[1]` tensor on the model's
    /// device, tracked when the model is), or `None` before the first task ends.
    pub fn penalty_value(&self, model: &Model, c: f64) -> Option<Tensor<1>> {
        if self.anchor.is_empty() || c == 0.0 {
            return None;
        }
        let mut total: Option<Tensor<1>> = None;
        for (info, theta) in model.param_values() {
            let (Some(omega), Some(anchor)) =
                (self.omega.get(&info.path), self.anchor.get(&info.path))
            else {
                continue;
            };
            let d = theta - anchor.clone();
            let term = (d.clone() * d * omega.clone()).sum();
            total = Some(match total {
                Some(t) => t + term,
                None => term,
            });
        }
        total.map(|t| t.mul_scalar(c))
    }
}

// ANCHOR: strategy
impl ForgettingStrategy for Si {
    fn name(&self) -> &str {
        "si"
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        self.begin_task(cx.model);
        Ok(())
    }

    fn penalty(&self, model: &Model, cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        if self.p.update == Update::Proximal {
            return None;
        }
        self.penalty_value(model, self.p.c * cx.controls.reg_scale)
    }

    fn after_update(&mut self, model: Model, cx: &BatchContext<'_>) -> Result<Model> {
        if self.p.update == Update::Gradient || self.anchor.is_empty() {
            return Ok(model);
        }
        Ok(self.proximal(
            model,
            2.0 * cx.controls.lr * self.p.c * cx.controls.reg_scale,
        ))
    }

    fn after_step(&mut self, cx: &StepContext<'_>) -> Result<()> {
        let Some(grads) = cx.grads else {
            return Ok(()); // a skipped step moved nothing
        };
        let now = Self::values(cx.model);
        for (info, g) in grads {
            let (Some(theta), Some(prev), Some(w)) = (
                now.get(&info.path),
                self.prev.get(&info.path),
                self.path.get_mut(&info.path),
            ) else {
                continue;
            };
            let moved = theta.clone() - prev.clone();
            *w = w.clone() - g.clone() * moved;
        }
        self.prev = now;
        Ok(())
    }

    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        self.end_task(cx.model);
        Ok(())
    }

    // ANCHOR_END: strategy
    fn state(&self) -> Result<StrategyState> {
        let mut tensors = BTreeMap::new();
        for (group, map) in self.groups() {
            for (k, t) in map {
                tensors.insert(format!("{group}/{k}"), StateTensor::from_tensor(t));
            }
        }
        Ok(StrategyState {
            meta: serde_json::json!({ "version": 1 }),
            tensors,
        })
    }

    fn load_state(&mut self, state: StrategyState, device: &Device) -> Result<()> {
        let mut fresh = Si::new(self.p.clone());
        for (key, t) in &state.tensors {
            let (group, k) = key.split_once('/').ok_or_else(|| Error::Strategy {
                strategy: "si".into(),
                message: format!("saved state has a malformed key `{key}`"),
            })?;
            let map = match group {
                "omega" => &mut fresh.omega,
                "anchor" => &mut fresh.anchor,
                "path" => &mut fresh.path,
                "start" => &mut fresh.start,
                "prev" => &mut fresh.prev,
                other => {
                    return Err(Error::Strategy {
                        strategy: "si".into(),
                        message: format!("saved state has an unknown group `{other}`"),
                    });
                }
            };
            map.insert(k.to_string(), t.to_tensor::<1>(device));
        }
        *self = fresh;
        Ok(())
    }
}

impl Si {
    /// Starts the path integral of a task at `model`'s parameters.
    pub fn begin_task(&mut self, model: &Model) {
        let theta = Self::values(model);
        self.path = theta
            .iter()
            .map(|(k, t)| (k.clone(), t.zeros_like()))
            .collect();
        self.start = theta.clone();
        self.prev = theta;
    }

    /// Ends a task at `model`'s parameters: `Ω += max(0, ω / (Δ² + ξ))`, `θ̃ ← θ`.
    pub fn end_task(&mut self, model: &Model) {
        let end = Self::values(model);
        for (k, theta) in &end {
            let (Some(w), Some(start)) = (self.path.get(k), self.start.get(k)) else {
                continue;
            };
            let delta = theta.clone() - start.clone();
            let gain = (w.clone() / (delta.clone() * delta).add_scalar(self.p.xi)).clamp_min(0.0);
            let omega = match self.omega.remove(k) {
                Some(o) => o + gain,
                None => gain,
            };
            self.omega.insert(k.clone(), omega);
        }
        self.anchor = end;
        self.path.clear();
    }

    /// The proximal step `θ ← (θ + kΩ·θ̃) / (1 + kΩ)` with `k = 2ηc` (see [`Update::Proximal`]).
    pub fn proximal(&self, model: Model, k: f64) -> Model {
        model.update_params(&mut |info, theta| {
            let (omega, anchor) = (self.omega.get(&info.path)?, self.anchor.get(&info.path)?);
            let s = omega.clone().mul_scalar(k);
            Some((theta + s.clone() * anchor.clone()) / s.add_scalar(1.0))
        })
    }

    fn groups(&self) -> [(&'static str, &PerParam); 5] {
        [
            ("omega", &self.omega),
            ("anchor", &self.anchor),
            ("path", &self.path),
            ("start", &self.start),
            ("prev", &self.prev),
        ]
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: SiParams = src.parse()?;
    for (key, v) in [("c", p.c), ("xi", p.xi)] {
        if !(v.is_finite() && v >= 0.0) || (key == "xi" && v == 0.0) {
            return Err(src.key_error(
                key,
                format!("`{key}` must be a finite number > 0 (got {v})"),
                None,
            ));
        }
    }
    Ok(Box::new(Si::new(p)))
}

// ANCHOR: register
fn register(r: &mut Registrar) -> Result<()> {
    r.add(engram_core::registration!(
        forgetting "si",
        "synaptic intelligence: path-integral importance, quadratic penalty (plugin; Zenke et al. 2017)",
        SiParams,
        build
    ));
    Ok(())
}

engram_core::declare_plugin!(register);
// ANCHOR_END: register

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::burn::tensor::TensorData;
    use engram_core::data::stream::Batch;
    use engram_core::model::mlp::{ActivationKind, build_mlp};
    use engram_core::strategy::Position;

    fn model() -> Model {
        let mut r = engram_core::rng::stream(3, "init", 0, 0);
        build_mlp(
            2,
            &[],
            2,
            ActivationKind::Relu,
            0.0,
            &mut r,
            &Device::flex(),
        )
    }

    fn flat(t: &Tensor<1>) -> Vec<f32> {
        t.clone()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap()
    }

    /// ω, Ω and the penalty against values computed by hand: two steps that move every
    /// parameter by −0.1·g with g = 1, then g = 2.
    #[test]
    fn importance_and_penalty_match_hand_computed_values() {
        let d = Device::flex();
        let m0 = model();
        let mut si = Si::new(SiParams {
            c: 2.0,
            xi: 0.5,
            update: Update::Gradient,
        });
        si.begin_task(&m0);
        let mut m = m0.clone();
        for g in [1.0f32, 2.0] {
            let grads: Vec<_> = m
                .params()
                .into_iter()
                .map(|i| {
                    let n = i.numel();
                    (
                        i,
                        Tensor::<1>::from_data(TensorData::new(vec![g; n], [n]), &d),
                    )
                })
                .collect();
            m = m.update_params(&mut |_, t| Some(t.sub_scalar(0.1 * g)));
            let batch = Batch {
                x: Tensor::<2>::zeros([1, 2], &d).into(),
                y: Tensor::zeros([1], &d),
                weights: None,
                logit_mask: None,
                refs: vec![],
                new_samples: 0,
            };
            si.after_step(&StepContext {
                position: &Position::default(),
                batch: &batch,
                sample_losses: None,
                loss: 0.0,
                model: &m,
                grads: Some(&grads),
            })
            .unwrap();
        }
        // ω = 1·0.1 + 2·0.2 = 0.5 for every parameter.
        for w in si.path.values() {
            for v in flat(w) {
                assert!((v - 0.5).abs() < 1e-6, "{v}");
            }
        }
        si.end_task(&m);
        // Δ = −0.3, so Ω = 0.5 / (0.09 + 0.5); the anchor is the end of the task.
        let expected = 0.5 / (0.09 + 0.5);
        for o in si.omega.values() {
            for v in flat(o) {
                assert!((f64::from(v) - expected).abs() < 1e-5, "{v}");
            }
        }
        assert!(
            si.penalty_value(&m, 2.0)
                .unwrap()
                .into_scalar::<f32>()
                .abs()
                < 1e-9
        );
        // Back at θ0 every parameter is 0.3 away: penalty = c · Ω · 0.09 · numel.
        let n = m0.numel() as f64;
        let p = f64::from(si.penalty_value(&m0, 2.0).unwrap().into_scalar::<f32>());
        let want = 2.0 * expected * 0.09 * n;
        assert!((p - want).abs() < 1e-4 * want, "{p} vs {want}");
    }

    /// The proximal step by hand: Ω = 3, k = 0.5, θ̃ = θ + 1 → θ moves by 1.5 / 2.5 = 0.6.
    #[test]
    fn proximal_step_matches_hand_computed_values() {
        let m = model();
        let mut si = Si::new(SiParams::default());
        let v = Si::values(&m);
        si.omega = v
            .iter()
            .map(|(k, t)| (k.clone(), t.zeros_like().add_scalar(3.0)))
            .collect();
        si.anchor = v
            .iter()
            .map(|(k, t)| (k.clone(), t.clone().add_scalar(1.0)))
            .collect();
        let after = Si::values(&si.proximal(m, 0.5));
        for (k, t) in &after {
            for (a, b) in flat(t).iter().zip(flat(&v[k])) {
                assert!((a - b - 0.6).abs() < 1e-6, "{a} {b}");
            }
        }
    }

    #[test]
    fn state_round_trips_and_rejects_bad_keys() {
        let m = model();
        let mut si = Si::new(SiParams::default());
        let v = Si::values(&m);
        si.omega = v
            .iter()
            .map(|(k, t)| (k.clone(), t.clone().add_scalar(0.25)))
            .collect();
        si.anchor = v.clone();
        let st = si.state().unwrap();
        let mut back = Si::new(SiParams::default());
        back.load_state(st.clone(), &Device::flex()).unwrap();
        assert_eq!(back.state().unwrap(), st);
        let mut bad = st;
        bad.tensors.insert(
            "nope/x".into(),
            StateTensor {
                shape: vec![1],
                values: vec![0.0],
            },
        );
        assert!(back.load_state(bad, &Device::flex()).is_err());
    }

    #[test]
    fn parameters_are_checked() {
        let e = build(
            &ParamSource::from_toml("xi = 0.0"),
            &BuildContext::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("`xi` must be"), "{e}");
        let e = build(
            &ParamSource::from_toml("lambda = 1"),
            &BuildContext::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("unknown field `lambda`"), "{e}");
    }
}
