//! `amp`: automatic mixed precision (Micikevicius et al., *Mixed Precision Training*, ICLR
//! 2018) with dynamic loss scaling.
//!
//! The precision layer of the memory chain. It asks the execution strategy (`standard` or
//! `checkpoint`) to compute in `f16` or `bf16`: the parameters are cast from their `f32` master
//! copies for each forward pass (a tracked cast, so the gradients land on the `f32` masters, and
//! the optimiser steps in `f32`), the input is cast, normalisation layers run in `f32`
//! ([`norm_f32`](engram_core::model::norm_f32)), and the logits are cast back to `f32` for the
//! softmax, the loss and every penalty.
//!
//! Dynamic loss scaling (the paper's §3.2, as `torch.cuda.amp.GradScaler`): the loss is
//! multiplied by a scale `S` before backward, so small gradients survive `f16`'s range
//! (smallest normal 6.1e-5); the gradients are divided by `S` before anything reads them
//! (clipping in the trainer, EWC's Fisher, which runs its own `f32` passes anyway). A step whose
//! gradients contain inf or NaN is **skipped** (the optimiser does not step; the trainer counts
//! it in `report.json`'s `training.skipped_steps`, and AMP's `memory.strategies.amp` holds its
//! own count and the history of its scale) and `S ← S · backoff_factor`; after
//! `growth_interval` clean steps in a row `S ← S · growth_factor`. A step whose *loss* is inf or
//! NaN is a divergence ([`engram_core::Error::Diverged`]), not a skipped step: the scale
//! multiplies the loss only after the forward pass, so no scale can mend it, and its error says
//! what AMP did before ([`MemoryStrategy::divergence_note`]: the steps skipped, the scale's
//! history). Defaults: `S₀ = 2¹⁶`, growth
//! ×2 every 2000 clean steps, back-off ×0.5 (PyTorch's). `bf16` has `f32`'s range, so
//! `loss_scaling = false` is safe there.
//!
//! On this CPU backend (Burn's flex) `f16` and `bf16` tensors are stored in 2 bytes but many
//! kernels compute through `f32`: `engram bench memory` reports what that gives.

use engram_core::burn::optim::GradientsParams;
use engram_core::burn::tensor::{DType, Tensor};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::model::unflatten_grads;
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    MemoryLayer, MemoryStrategy, Next, StepOutcome, StepRequest, StrategyState,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The compute dtype.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE half precision: 5 exponent bits (max 65 504), needs loss scaling.
    F16,
    /// bfloat16: `f32`'s 8 exponent bits, 7 mantissa bits.
    Bf16,
}

impl Precision {
    /// The Burn dtype.
    pub fn dtype(self) -> DType {
        match self {
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }
}

/// `[[memory]] type = "amp"` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmpParams {
    /// `f16` or `bf16`.
    pub dtype: Precision,
    /// Dynamic loss scaling on (`false`: scale 1, no skipping; only for `bf16`).
    pub loss_scaling: bool,
    /// Initial loss scale `S₀`.
    pub init_scale: f64,
    /// Multiplier of `S` after `growth_interval` clean steps.
    pub growth_factor: f64,
    /// Multiplier of `S` after a step with inf/NaN gradients (which is skipped).
    pub backoff_factor: f64,
    /// Clean steps in a row before `S` grows.
    pub growth_interval: usize,
}

impl Default for AmpParams {
    fn default() -> Self {
        Self {
            dtype: Precision::F16,
            loss_scaling: true,
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

/// The most scale changes [`LossScaler::history`] keeps (the newest).
pub const HISTORY_LEN: usize = 64;

/// The dynamic loss scaler: `S`, the clean steps since it last changed, and what it did: the
/// steps it saw and skipped, and its changes of scale.
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    /// The current scale `S`.
    pub scale: f64,
    /// Clean steps in a row.
    pub clean: usize,
    /// Steps recorded so far (the run's global steps that reached the scaler).
    pub steps: usize,
    /// Steps skipped so far (non-finite gradients or loss).
    pub skipped: usize,
    /// The scale the run started with (`init_scale`, or 1 without loss scaling).
    pub start_scale: f64,
    /// The newest [`HISTORY_LEN`] changes of scale: `(step, scale after)`, the step counted
    /// from 0 as [`LossScaler::steps`] counts.
    pub history: Vec<(usize, f64)>,
    /// The scale before the history's first kept change.
    pub history_from: f64,
    p: AmpParams,
}

impl LossScaler {
    /// A scaler at `p.init_scale`.
    pub fn new(p: AmpParams) -> Self {
        let scale = if p.loss_scaling { p.init_scale } else { 1.0 };
        Self {
            scale,
            clean: 0,
            steps: 0,
            skipped: 0,
            start_scale: scale,
            history: Vec::new(),
            history_from: scale,
            p,
        }
    }

    /// Records one step: `finite` says whether its gradients were all finite. Returns whether
    /// the step must be skipped.
    pub fn update(&mut self, finite: bool) -> bool {
        let step = self.steps;
        self.steps += 1;
        if !self.p.loss_scaling {
            return false;
        }
        if !finite {
            self.scale *= self.p.backoff_factor;
            self.clean = 0;
            self.skipped += 1;
            self.remember(step);
            return true;
        }
        self.clean += 1;
        if self.clean >= self.p.growth_interval {
            self.scale *= self.p.growth_factor;
            self.clean = 0;
            self.remember(step);
        }
        false
    }

    /// Adds the scale after step `step` to the history, dropping the oldest past
    /// [`HISTORY_LEN`].
    fn remember(&mut self, step: usize) {
        if self.history.len() == HISTORY_LEN {
            self.history_from = self.history.remove(0).1;
        }
        self.history.push((step, self.scale));
    }

    /// The history as runs of the same change at consecutive steps, for a message:
    /// `65536 → 1 (16 back-offs at steps 38–53)`, runs separated by `; `.
    pub fn history_text(&self) -> String {
        let mut runs: Vec<(f64, f64, usize, usize, bool)> = Vec::new();
        let mut before = self.history_from;
        for &(step, after) in &self.history {
            let down = after < before;
            match runs.last_mut() {
                Some(r) if r.4 == down && r.3 + 1 == step => {
                    r.1 = after;
                    r.3 = step;
                }
                _ => runs.push((before, after, step, step, down)),
            }
            before = after;
        }
        runs.iter()
            .map(|&(from, to, a, b, down)| {
                let n = b - a + 1;
                let what = match (down, n) {
                    (true, 1) => "a back-off".to_string(),
                    (true, n) => format!("{n} back-offs"),
                    (false, 1) => "a growth".to_string(),
                    (false, n) => format!("{n} growths"),
                };
                let at = if n == 1 {
                    format!("step {a}")
                } else {
                    format!("steps {a}–{b}")
                };
                format!("{from} → {to} ({what} at {at})")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Mixed precision with a dynamic loss scaler.
#[derive(Debug)]
pub struct Amp {
    dtype: Precision,
    scaler: LossScaler,
}

impl Amp {
    /// AMP with parameters `p` (unchecked; the registry's factory checks them).
    pub fn new(p: AmpParams) -> Self {
        Self {
            dtype: p.dtype,
            scaler: LossScaler::new(p),
        }
    }
}

impl MemoryStrategy for Amp {
    fn name(&self) -> &str {
        AmpParams::NAME
    }

    fn layer(&self) -> MemoryLayer {
        MemoryLayer::Precision
    }

    fn step(&mut self, mut req: StepRequest<'_>, next: Next<'_>) -> Result<StepOutcome> {
        let scale = self.scaler.scale as f32;
        req.compute_dtype = Some(self.dtype.dtype());
        req.loss_scale = scale;
        let model = req.model;
        let mut out = next.run(req)?;
        // Unscale, and look for inf/NaN with one read back to the host: the sum of every
        // gradient's sum is finite exactly when no element is inf or NaN (short of a sum above
        // f32's range, which is treated as an overflow too). The step's own gradients are let go
        // before the loop, so that each scaled gradient is freed as its unscaled copy is made:
        // the step holds one set of gradients and one tensor more, not two sets.
        let mut total: Option<Tensor<1>> = None;
        let mut unscaled = Vec::new();
        let scaled = model.flat_grads(&std::mem::replace(&mut out.grads, GradientsParams::new()));
        for (info, g) in scaled {
            let g = g.inner().div_scalar(scale);
            let sum = g.clone().sum();
            total = Some(match total {
                Some(t) => t + sum,
                None => sum,
            });
            unscaled.push((info.id, g));
        }
        let finite =
            out.loss.is_finite() && total.is_none_or(|t| t.into_scalar::<f32>().is_finite());
        let skipped = self.scaler.update(finite);
        if !finite && !self.scaler.p.loss_scaling {
            return Err(Error::Strategy {
                strategy: AmpParams::NAME.into(),
                message: format!(
                    "non-finite gradients in {:?} without loss scaling (set loss_scaling = true, or use bf16)",
                    self.dtype
                ),
            });
        }
        Ok(StepOutcome {
            loss: out.loss,
            sample_losses: out.sample_losses,
            grads: if skipped {
                GradientsParams::new()
            } else {
                unflatten_grads(model, unscaled)
            },
            skipped: skipped || out.skipped,
            loss_scale: Some(self.scaler.scale as f32),
        })
    }

    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "dtype": self.dtype,
            "final_loss_scale": self.scaler.scale,
            "clean_steps": self.scaler.clean,
            "skipped_steps": self.scaler.skipped,
            "loss_scale_history": self.scaler.history,
        }))
    }

    /// What AMP did: the steps it skipped and how it moved its loss scale, for example
    /// "`amp` (f16) skipped 16 of 53 steps and lowered the loss scale from 65536 to 1
    /// (65536 → 1 (16 back-offs at steps 37–52))".
    fn divergence_note(&self) -> Option<String> {
        let sc = &self.scaler;
        let dtype = format!("{:?}", self.dtype).to_lowercase();
        if !sc.p.loss_scaling {
            return Some(format!(
                "`amp` computed in {dtype} without loss scaling (it skips no steps)"
            ));
        }
        if sc.skipped == 0 {
            return Some(format!(
                "`amp` ({dtype}) skipped none of {} steps; the loss scale is {}",
                sc.steps, sc.scale
            ));
        }
        let moved = if sc.scale < sc.start_scale {
            format!(
                "lowered the loss scale from {} to {}",
                sc.start_scale, sc.scale
            )
        } else {
            format!(
                "kept the loss scale at {} (it started at {})",
                sc.scale, sc.start_scale
            )
        };
        Some(format!(
            "`amp` ({dtype}) skipped {} of {} steps (their gradients overflowed) and {moved} ({})",
            sc.skipped,
            sc.steps,
            sc.history_text()
        ))
    }

    fn state(&self) -> Result<StrategyState> {
        let sc = &self.scaler;
        Ok(StrategyState {
            meta: serde_json::json!({
                "scale": sc.scale,
                "clean": sc.clean,
                "steps": sc.steps,
                "skipped": sc.skipped,
                "start_scale": sc.start_scale,
                "history": sc.history,
                "history_from": sc.history_from,
            }),
            tensors: Default::default(),
        })
    }

    fn load_state(&mut self, state: StrategyState) -> Result<()> {
        let bad = || Error::Strategy {
            strategy: AmpParams::NAME.into(),
            message: "saved state is incomplete".into(),
        };
        let m = &state.meta;
        let sc = &mut self.scaler;
        sc.scale = m["scale"].as_f64().ok_or_else(bad)?;
        sc.clean = m["clean"].as_u64().ok_or_else(bad)? as usize;
        // What the scaler did; absent from checkpoints of older versions.
        sc.steps = m["steps"].as_u64().unwrap_or(0) as usize;
        sc.skipped = m["skipped"].as_u64().unwrap_or(0) as usize;
        sc.start_scale = m["start_scale"].as_f64().unwrap_or(sc.start_scale);
        sc.history = serde_json::from_value(m["history"].clone()).unwrap_or_default();
        sc.history_from = m["history_from"].as_f64().unwrap_or(sc.start_scale);
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn MemoryStrategy>> {
    let p: AmpParams = src.parse()?;
    let positive = |key: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(src.key_error(key, format!("amp: `{key}` must be > 0 (got {v})"), None))
        }
    };
    positive("init_scale", p.init_scale)?;
    positive("growth_factor", p.growth_factor)?;
    positive("backoff_factor", p.backoff_factor)?;
    if p.backoff_factor >= 1.0 {
        return Err(src.key_error(
            "backoff_factor",
            format!(
                "amp: `backoff_factor` must be < 1 (got {})",
                p.backoff_factor
            ),
            None,
        ));
    }
    if p.growth_interval == 0 {
        return Err(src.key_error(
            "growth_interval",
            "amp: `growth_interval` must be ≥ 1".into(),
            None,
        ));
    }
    Ok(Box::new(Amp::new(p)))
}

engram_core::component!(memory "amp", "mixed precision (f16/bf16 compute, f32 master weights) with dynamic loss scaling", AmpParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BURN_RNG;
    use crate::test_util::CeL2;
    use engram_core::burn::tensor::{Device, Int, Tensor, TensorData};
    use engram_core::data::stream::Batch;
    use engram_core::model::mlp::{ActivationKind, build_mlp};

    /// The scaler grows after `growth_interval` clean steps, backs off and skips on inf.
    #[test]
    fn scaler_grows_backs_off_and_skips() {
        let mut s = LossScaler::new(AmpParams {
            growth_interval: 3,
            ..AmpParams::default()
        });
        assert_eq!(s.scale, 65536.0);
        assert!(!s.update(true) && !s.update(true));
        assert_eq!(s.scale, 65536.0);
        assert!(!s.update(true));
        assert_eq!((s.scale, s.clean), (131072.0, 0));
        assert!(s.update(false), "an inf step is skipped");
        assert_eq!((s.scale, s.clean), (65536.0, 0));
        assert!(!s.update(true));
        assert_eq!(s.clean, 1);
        let mut off = LossScaler::new(AmpParams {
            loss_scaling: false,
            ..AmpParams::default()
        });
        assert_eq!(off.scale, 1.0);
        assert!(!off.update(false));
    }

    /// What AMP did, as the divergence error tells it: the skipped steps out of all, the scale
    /// from where to where, and the changes as runs of consecutive steps.
    #[test]
    fn the_divergence_note_tells_the_skips_and_the_scale_history() {
        let mut amp = Amp::new(AmpParams::default());
        assert_eq!(
            amp.divergence_note().unwrap(),
            "`amp` (f16) skipped none of 0 steps; the loss scale is 65536"
        );
        assert!(!amp.scaler.update(true) && !amp.scaler.update(true));
        for _ in 0..16 {
            assert!(amp.scaler.update(false));
        }
        assert_eq!(
            (amp.scaler.scale, amp.scaler.skipped, amp.scaler.steps),
            (1.0, 16, 18)
        );
        assert_eq!(
            amp.divergence_note().unwrap(),
            "`amp` (f16) skipped 16 of 18 steps (their gradients overflowed) and lowered the \
             loss scale from 65536 to 1 (65536 → 1 (16 back-offs at steps 2–17))"
        );
        // The history in the report and through a checkpoint.
        let r = amp.report().unwrap();
        assert_eq!(r["skipped_steps"], 16);
        assert_eq!(r["loss_scale_history"][0], serde_json::json!([2, 32768.0]));
        assert_eq!(r["loss_scale_history"][15], serde_json::json!([17, 1.0]));
        let mut back = Amp::new(AmpParams::default());
        back.load_state(amp.state().unwrap()).unwrap();
        assert_eq!(back.scaler, amp.scaler);

        // A growth, then two back-offs in a row.
        let mut s = LossScaler::new(AmpParams {
            growth_interval: 2,
            ..AmpParams::default()
        });
        for finite in [true, true, false, false] {
            s.update(finite);
        }
        assert_eq!(
            s.history_text(),
            "65536 → 131072 (a growth at step 1); 131072 → 32768 (2 back-offs at steps 2–3)"
        );
        // The history keeps the newest 64 changes and the scale before them.
        let mut s = LossScaler::new(AmpParams {
            init_scale: 2f64.powi(80),
            ..AmpParams::default()
        });
        for _ in 0..70 {
            s.update(false);
        }
        assert_eq!(s.history.len(), HISTORY_LEN);
        assert_eq!(
            (s.history_from, s.history[0]),
            (2f64.powi(74), (6, 2f64.powi(73)))
        );
        assert!(
            s.history_text()
                .ends_with(" → 1024 (64 back-offs at steps 6–69)")
        );
    }

    fn batch(d: &Device) -> Batch {
        let x: Vec<f32> = (0..8 * 6)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.2)
            .collect();
        Batch {
            x: engram_core::data::input::Input::Float(Tensor::from_data(
                TensorData::new(x, [8, 6]),
                d,
            )),
            y: Tensor::<1, Int>::from_data(
                TensorData::new((0..8).map(|i| i % 3).collect::<Vec<i64>>(), [8]),
                d,
            ),
            weights: None,
            logit_mask: None,
            refs: vec![],
            new_samples: 8,
        }
    }

    /// An AMP step gives the f32 step's gradients within half precision's error, unscaled, and
    /// an overflowing scale makes it skip the step and halve the scale.
    #[test]
    fn amp_step_matches_f32_and_skips_on_overflow() {
        let _g = BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex().autodiff();
        let mut r = engram_core::rng::stream(0, "init", 0, 0);
        let m = build_mlp(6, &[16], 3, ActivationKind::Relu, 0.0, &mut r, &d);
        let flat = |g: &GradientsParams| -> Vec<f32> {
            m.flat_grads(g)
                .into_iter()
                .flat_map(|(_, t)| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap())
                .collect()
        };
        let run = |chain: &mut Vec<Box<dyn MemoryStrategy>>| {
            Next::new(chain)
                .run(StepRequest {
                    model: &m,
                    batch: batch(&d),
                    loss: &CeL2(0.0),
                    loss_scale: 1.0,
                    compute_dtype: None,
                    rng_seed: 1,
                })
                .unwrap()
        };
        let plain = run(&mut vec![Box::new(crate::standard::Standard)]);
        for dtype in [Precision::F16, Precision::Bf16] {
            let amp = Amp {
                dtype,
                scaler: LossScaler::new(AmpParams {
                    dtype,
                    init_scale: 1024.0,
                    ..AmpParams::default()
                }),
            };
            let out = run(&mut vec![
                Box::new(amp),
                Box::new(crate::standard::Standard),
            ]);
            assert!(!out.skipped);
            assert_eq!(out.loss_scale, Some(1024.0));
            let (a, b) = (flat(&plain.grads), flat(&out.grads));
            let norm = a.iter().map(|v| v * v).sum::<f32>().sqrt();
            let err = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).powi(2))
                .sum::<f32>()
                .sqrt();
            // bf16 keeps 8 significant bits, f16 11: relative error well under 5 %.
            assert!(err < 0.05 * norm, "{dtype:?}: |Δg| {err} vs |g| {norm}");
            assert!((out.loss - plain.loss).abs() < 0.02 * plain.loss.abs().max(1.0));
        }
        // A scale of 2^60 overflows f16 (max 65504): the step is skipped and the scale halves.
        let mut chain: Vec<Box<dyn MemoryStrategy>> = vec![
            Box::new(Amp {
                dtype: Precision::F16,
                scaler: LossScaler::new(AmpParams {
                    init_scale: 2f64.powi(60),
                    ..AmpParams::default()
                }),
            }),
            Box::new(crate::standard::Standard),
        ];
        let out = run(&mut chain);
        assert!(out.skipped);
        assert_eq!(out.loss_scale, Some(2f32.powi(59)));
        assert_eq!(out.grads.len(), 0);
    }

    #[test]
    fn parameters_are_checked() {
        let cx = BuildContext::default();
        for (text, needle) in [
            ("backoff_factor = 1.5", "`backoff_factor` must be < 1"),
            ("growth_interval = 0", "`growth_interval` must be ≥ 1"),
            ("init_scale = -1.0", "`init_scale` must be > 0"),
            ("dtype = \"f8\"", "unknown variant `f8`"),
        ] {
            let e = build(&ParamSource::from_toml(text), &cx).err().unwrap();
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }
}
