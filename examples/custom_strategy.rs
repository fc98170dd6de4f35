//! A forgetting strategy written in-process and registered with engram, the code behind the
//! book's chapter "Writing a strategy in-process".
//!
//! `l2-anchor` pulls every parameter towards its value after the previous task:
//!
//! ```text
//! penalty = (λ / 2) · Σ_i (θ_i − θ*_i)²        θ* = the parameters after the last finished task
//! ```
//!
//! It is EWC with every Fisher entry set to 1 (the "L2" baseline of Kirkpatrick et al. 2017),
//! small enough to read in one sitting. Run it with
//! `cargo run --release --example custom_strategy`: it registers the strategy, builds it from a
//! TOML snippet through the registry as `engram run` would, and checks its penalty on two tiny
//! models (no data set, no training).

// ANCHOR: imports
use engram::core::burn::tensor::{Device, Tensor};
use engram::core::component::Component;
use engram::core::config::ParamSource;
use engram::core::model::Model;
use engram::core::model::mlp::{ActivationKind, build_mlp};
use engram::core::registry::{BuildContext, Factory, Kind, Origin};
use engram::core::strategy::{
    BatchContext, ForgettingStrategy, StateTensor, StrategyState, TaskContext,
};
use engram::core::{Error, Result, rng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
// ANCHOR_END: imports

// ANCHOR: params
/// `[[forgetting]] type = "l2-anchor"` keys. `deny_unknown_fields` turns a typo into a config
/// error that names the key; `default` lets every key be left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct L2AnchorParams {
    /// Strength λ of the pull towards the previous task's parameters. Default 1.
    pub lambda: f64,
}

impl Default for L2AnchorParams {
    fn default() -> Self {
        Self { lambda: 1.0 }
    }
}
// ANCHOR_END: params

// ANCHOR: strategy
/// The strategy: λ and the anchor `θ*`, one detached tensor `[numel]` per parameter path.
pub struct L2Anchor {
    lambda: f64,
    anchors: BTreeMap<String, Tensor<1>>,
}

impl L2Anchor {
    /// Remembers `model`'s current parameters as the anchor `θ*`.
    pub fn set_anchor(&mut self, model: &Model) {
        self.anchors = model
            .param_values()
            .into_iter()
            .map(|(info, value)| (info.path, value.detach()))
            .collect();
    }

    /// `(λ / 2) · Σ (θ − θ*)²` on `model`'s parameters, tracked by autodiff (`[1]`); `None`
    /// before the first task has finished.
    pub fn penalty_of(&self, model: &Model) -> Option<Tensor<1>> {
        let mut total: Option<Tensor<1>> = None;
        for (info, theta) in model.param_values() {
            let Some(anchor) = self.anchors.get(&info.path) else {
                continue;
            };
            let d = theta - anchor.clone();
            let term = (d.clone() * d).sum();
            total = Some(match total {
                Some(t) => t + term,
                None => term,
            });
        }
        total.map(|t| t.mul_scalar(self.lambda / 2.0))
    }
}

impl ForgettingStrategy for L2Anchor {
    fn name(&self) -> &str {
        L2AnchorParams::NAME
    }

    /// The trainer adds this to the task loss at every step. `reg_scale` is the schedulers'
    /// multiplier on every regularisation strength.
    fn penalty(&self, model: &Model, cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        self.penalty_of(model)
            .map(|p| p.mul_scalar(cx.controls.reg_scale))
    }

    /// After each task: the trained parameters become the new anchor.
    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        self.set_anchor(cx.model);
        Ok(())
    }

    /// Checkpoints keep the anchor, so a resumed run penalises the same way.
    fn state(&self) -> Result<StrategyState> {
        Ok(StrategyState {
            meta: serde_json::json!({ "lambda": self.lambda }),
            tensors: self
                .anchors
                .iter()
                .map(|(path, t)| (path.clone(), StateTensor::from_tensor(t)))
                .collect(),
        })
    }

    fn load_state(&mut self, state: StrategyState, device: &Device) -> Result<()> {
        self.anchors = state
            .tensors
            .iter()
            .map(|(path, t)| (path.clone(), t.to_tensor(device)))
            .collect();
        Ok(())
    }
}
// ANCHOR_END: strategy

// ANCHOR: register
/// The factory: decode the keys (unknown keys and wrong types are config errors with a line
/// and column), check their values, build the strategy.
fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: L2AnchorParams = src.parse()?;
    if !(p.lambda >= 0.0 && p.lambda.is_finite()) {
        return Err(src.key_error(
            "lambda",
            format!("lambda must be a finite number ≥ 0, got {}", p.lambda),
            None,
        ));
    }
    Ok(Box::new(L2Anchor {
        lambda: p.lambda,
        anchors: BTreeMap::new(),
    }))
}

// The one declaration: kind and name, summary, the keys' type (for the defaults) and the
// factory become the registration `L2_ANCHOR` and `L2AnchorParams::NAME`.
engram::core::component!(pub const L2_ANCHOR = forgetting "l2-anchor", "pull every parameter towards its value after the previous task (L2)", L2AnchorParams, build);
// ANCHOR_END: register

// ANCHOR: main
fn main() -> Result<()> {
    // The built-ins and `l2-anchor`: the registry to hand to `engram::core::train::trainer::prepare`.
    let mut registry = engram::registry();
    registry.add(L2_ANCHOR, Origin::Builtin)?;
    let entry = registry
        .get(Kind::Forgetting, L2AnchorParams::NAME)
        .ok_or_else(|| Error::Other("l2-anchor is not registered".into()))?;
    println!(
        "{}: {}",
        entry.registration.name, entry.registration.summary
    );
    for (key, value) in (entry.registration.defaults)() {
        println!("    {key} = {value} (default)");
    }

    // Build it as `[[forgetting]] type = "l2-anchor"` with `lambda = 2.0` would.
    let Factory::Forgetting(factory) = entry.registration.factory else {
        return Err(Error::Other(
            "l2-anchor is not a forgetting strategy".into(),
        ));
    };
    let built = factory(
        &ParamSource::from_toml("lambda = 2.0"),
        &BuildContext::default(),
    )?;
    println!("built `{}` from TOML", built.name());

    // A typo is a config error that names the key.
    let typo = factory(
        &ParamSource::from_toml("lamda = 2.0"),
        &BuildContext::default(),
    );
    println!(
        "typo: {}",
        typo.err().map(|e| e.to_string()).unwrap_or_default()
    );

    // The penalty on two tiny models: zero at the anchor, positive elsewhere.
    let device = Device::flex().autodiff();
    let tiny = |seed| {
        let mut r = rng::stream(seed, "init", 0, 0);
        build_mlp(4, &[8], 3, ActivationKind::Relu, 0.0, &mut r, &device)
    };
    let (old, new) = (tiny(0), tiny(1));
    let mut s = L2Anchor {
        lambda: 2.0,
        anchors: BTreeMap::new(),
    };
    assert!(
        s.penalty_of(&old).is_none(),
        "no anchor before the first task"
    );
    s.set_anchor(&old);
    let at_anchor = s
        .penalty_of(&old)
        .map_or(f32::NAN, |t| t.into_scalar::<f32>());
    let moved = s
        .penalty_of(&new)
        .map_or(f32::NAN, |t| t.into_scalar::<f32>());
    println!("penalty at the anchor {at_anchor}, after moving {moved:.4}");
    assert!(at_anchor == 0.0 && moved > 0.0);
    Ok(())
}
// ANCHOR_END: main
