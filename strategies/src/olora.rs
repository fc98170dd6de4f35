//! `o-lora`: orthogonal subspace learning for continual learning on adapters (Wang et al. 2023,
//! "Orthogonal Subspace Learning for Language Model Continual Learning", §3.2–3.3, eq. 7–9).
//!
//! Each task trains its own LoRA adapter; the earlier tasks' adapters are frozen and kept, and
//! the current one is pushed into a subspace orthogonal to theirs by a loss on the
//! down-projections. In engram's layout an adapter's down-projection is `A [d_in, r]` (the paper
//! writes `A ∈ ℝ^{r×d}`), so for every adapted weight and every earlier task `i`:
//!
//! ```text
//! O_{i,t} = A_iᵀ · A_t          [r_i, r]
//! L_orth  = Σ_layers Σ_{i<t} Σ_{j,k} O_{i,t}[j,k]²      (eq. 7)
//! L       = L_task + λ₁ · L_orth + λ₂ · Σ_layers (‖A_t‖² + ‖B_t‖²)     (eq. 9)
//! ```
//!
//! with `λ₁ = lambda_orth` and `λ₂ = lambda_l2` (the paper's 0.5 and 0). No replay, no task id at
//! inference: the earlier adapters are summed into the weights, which is what merging them does.
//! So `o-lora` goes with `[[memory]] type = "lora"` and `merge = "task"`: at a task's end this
//! strategy keeps the adapters' `A` (in [`ForgettingStrategy::task_end_weights`], before the
//! merge), then `lora` merges them into the base and attaches fresh ones for the next task.
//! A model without adapters, or adapters that did not change between tasks (no merge), is a
//! typed error before the next task trains.

use engram_core::burn::tensor::{Device, Tensor};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::model::Model;
use engram_core::registry::BuildContext;
use engram_core::strategy::{
    BatchContext, ForgettingStrategy, StateTensor, StrategyState, TaskContext, TaskInfo,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[[forgetting]] type = "o-lora"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OLoraParams {
    /// `λ₁`, the weight of the orthogonality loss (≥ 0). Default 0.5 (the paper's).
    pub lambda_orth: f64,
    /// `λ₂`, the weight of the L2 term on the current adapter's factors (≥ 0). Default 0 (the
    /// paper's released setting).
    pub lambda_l2: f64,
}

impl Default for OLoraParams {
    fn default() -> Self {
        Self {
            lambda_orth: 0.5,
            lambda_l2: 0.0,
        }
    }
}

/// The O-LoRA strategy: the earlier tasks' down-projections, by adapted weight.
#[derive(Debug, Default)]
pub struct OLora {
    p: OLoraParams,
    /// Adapted weight's path (`blocks.1.attention.query.weight`) → the `A [d_in, r]` of each
    /// finished task, in task order.
    past: BTreeMap<String, Vec<Tensor<2>>>,
    /// The config entry it came from (positions its errors about the run's setup).
    src: Option<ParamSource>,
}

/// `(weight path, A or B, shape, flat value)` of every adapter factor of `model`.
fn factors(model: &Model) -> Vec<(String, char, Vec<usize>, Tensor<1>)> {
    model
        .param_values()
        .into_iter()
        .filter_map(|(i, t)| {
            let f = crate::lora::factor(&i.path)?;
            let base = crate::lora::adapted_weight(model, &i.path)?;
            Some((base, f, i.shape, t))
        })
        .collect()
}

impl OLora {
    /// The strategy with keys `p`.
    pub fn new(p: OLoraParams) -> Self {
        Self {
            p,
            past: BTreeMap::new(),
            src: None,
        }
    }

    /// Finished tasks whose adapters are kept.
    pub fn tasks_kept(&self) -> usize {
        self.past.values().map(Vec::len).max().unwrap_or(0)
    }

    /// `λ₁·L_orth + λ₂·Σ(‖A_t‖² + ‖B_t‖²)` of `model`'s current adapters (eq. 7 and 9), a tracked
    /// scalar `[1]`; `None` when there is nothing to add (no earlier task and `λ₂ = 0`).
    pub fn penalty_value(&self, model: &Model) -> Option<Tensor<1>> {
        let mut total: Option<Tensor<1>> = None;
        let mut add = |t: Tensor<1>| {
            total = Some(match total.take() {
                Some(s) => s + t,
                None => t,
            })
        };
        for (base, f, shape, v) in factors(model) {
            if self.p.lambda_l2 > 0.0 {
                add((v.clone() * v.clone()).sum().mul_scalar(self.p.lambda_l2));
            }
            if f != 'a' || self.p.lambda_orth == 0.0 {
                continue;
            }
            let a_t = v.reshape([shape[0], shape[1]]);
            for a_i in self.past.get(&base).into_iter().flatten() {
                let o = a_i.clone().transpose().matmul(a_t.clone());
                add((o.clone() * o).sum().mul_scalar(self.p.lambda_orth));
            }
        }
        total
    }
}

impl ForgettingStrategy for OLora {
    fn name(&self) -> &str {
        OLoraParams::NAME
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        let err = |m: &str| Error::Strategy {
            strategy: OLoraParams::NAME.into(),
            message: m.into(),
        };
        let now = factors(cx.model);
        if !now.iter().any(|(_, f, ..)| *f == 'a') {
            let message = "o-lora keeps each task's LoRA adapter orthogonal to the earlier ones, and the model has no LoRA adapters";
            let hint = "add [[memory]] type = \"lora\" with merge = \"task\" to the config";
            return Err(match &self.src {
                Some(src) => src.key_error("type", message.into(), Some(hint.into())),
                None => err(&format!("{message}: {hint}")),
            });
        }
        if cx.model.adapters().is_some_and(|a| a.config.routed) {
            return Err(err(
                "o-lora keeps one adapter per layer orthogonal to the earlier tasks', and moe-lora turned them into routed pools of experts: use one of the two",
            ));
        }
        // The current adapters must be new ones, not the last task's kept A (no merge).
        for (base, f, shape, v) in now {
            let Some(last) = self.past.get(&base).and_then(|l| l.last()) else {
                continue;
            };
            if f == 'a' && last.dims() == [shape[0], shape[1]] {
                let same = (last.clone().reshape([shape[0] * shape[1]]) - v.inner())
                    .abs()
                    .max()
                    .into_scalar::<f32>()
                    == 0.0;
                if same {
                    return Err(err(
                        "the adapters did not change since the last task ended: o-lora needs [[memory]] type = \"lora\" with merge = \"task\", so that each task trains a new adapter",
                    ));
                }
            }
        }
        Ok(())
    }

    fn penalty(&self, model: &Model, _cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        self.penalty_value(model)
    }

    fn task_end_weights(&mut self, model: Model, _task: &TaskInfo) -> Result<Model> {
        for (base, f, shape, v) in factors(&model) {
            if f == 'a' {
                self.past
                    .entry(base)
                    .or_default()
                    .push(v.inner().reshape([shape[0], shape[1]]));
            }
        }
        Ok(model)
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
            OLoraParams::NAME,
            "keeps each task's LoRA adapter orthogonal to the earlier ones",
            |l| {
                if l.params().merge == crate::lora::Merge::Task {
                    Ok(())
                } else {
                    Err((
                    "o-lora needs a new adapter for each task, and lora with merge = \"none\" keeps training the same one (o-lora would orthogonalise it against itself)".into(),
                    "set merge = \"task\" in the [[memory]] type = \"lora\" entry".into(),
                ))
                }
            },
        )
    }

    fn lm_refusal(&self) -> Option<engram_core::strategy::LmRefusal> {
        // A loss on the adapters' factors only: next-token training takes it as it is.
        None
    }

    fn divergence_hint(&self) -> Option<String> {
        Some(
            "lower o-lora's lambda_orth (the orthogonality loss grows with the adapters' scale)"
                .into(),
        )
    }

    fn state(&self) -> Result<StrategyState> {
        let mut tensors = BTreeMap::new();
        for (base, list) in &self.past {
            for (i, a) in list.iter().enumerate() {
                tensors.insert(format!("{base}/{i}"), StateTensor::from_tensor(a));
            }
        }
        Ok(StrategyState {
            meta: serde_json::Value::Null,
            tensors,
        })
    }

    fn load_state(&mut self, state: StrategyState, device: &Device) -> Result<()> {
        let mut past: BTreeMap<String, Vec<(usize, Tensor<2>)>> = BTreeMap::new();
        for (key, t) in &state.tensors {
            let bad = || Error::Strategy {
                strategy: OLoraParams::NAME.into(),
                message: format!("saved state has a malformed entry `{key}`"),
            };
            let (base, i) = key.rsplit_once('/').ok_or_else(bad)?;
            let i: usize = i.parse().map_err(|_| bad())?;
            if t.shape.len() != 2 {
                return Err(bad());
            }
            past.entry(base.to_string())
                .or_default()
                .push((i, t.to_tensor::<2>(device)));
        }
        self.past = past
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by_key(|(i, _)| *i);
                (k, v.into_iter().map(|(_, t)| t).collect())
            })
            .collect();
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: OLoraParams = src.parse()?;
    for (key, v) in [("lambda_orth", p.lambda_orth), ("lambda_l2", p.lambda_l2)] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(src.key_error(
                key,
                format!("{key} must be a number ≥ 0, not {v}"),
                Some("lambda_orth = 0.5 and lambda_l2 = 0 are the paper's".into()),
            ));
        }
    }
    let mut s = OLora::new(p);
    s.src = Some(src.clone());
    Ok(Box::new(s))
}

engram_core::component!(forgetting "o-lora", "O-LoRA: each task's LoRA adapter kept orthogonal to the earlier tasks' (Wang et al. 2023); with lora merge = \"task\"", OLoraParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lora::tests_support::{lora, setup};
    use engram_core::burn::tensor::Device;
    use engram_core::strategy::MemoryStrategy;

    fn vals(t: Tensor<2>) -> (Vec<f32>, [usize; 2]) {
        let d = t.dims();
        (
            t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap(),
            d,
        )
    }

    fn a_of(m: &Model, base: &str) -> (Vec<f32>, [usize; 2]) {
        let (_, _, shape, v) = factors(m)
            .into_iter()
            .find(|(b, f, ..)| b == base && *f == 'a')
            .unwrap();
        vals(v.inner().reshape([shape[0], shape[1]]))
    }

    /// Σ_{j,k} (A_iᵀ·A_t)[j,k]², by hand.
    fn orth(ai: &(Vec<f32>, [usize; 2]), at: &(Vec<f32>, [usize; 2])) -> f64 {
        let (d, ri, rt) = (ai.1[0], ai.1[1], at.1[1]);
        let mut s = 0.0f64;
        for j in 0..ri {
            for k in 0..rt {
                let o: f64 = (0..d)
                    .map(|x| f64::from(ai.0[x * ri + j]) * f64::from(at.0[x * rt + k]))
                    .sum();
                s += o * o;
            }
        }
        s
    }

    /// After task 0 ends (A₁ kept, then merged and a fresh adapter attached by `lora`), the
    /// penalty is λ₁·Σ‖A₁ᵀA₂‖² over both adapted layers plus λ₂·Σ(‖A₂‖² + ‖B₂‖²) (eq. 7, 9),
    /// equal to the hand-computed value; its gradient reaches the current A only.
    #[test]
    fn penalty_is_the_papers_orthogonality_and_l2_terms() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, _) = setup();
        let mut l = lora("rank = 2\ntargets = [\"0.linear\", \"1.linear\"]\nmerge = \"task\"");
        let m = l.adapt(m).unwrap();
        let mut o = OLora::new(OLoraParams {
            lambda_orth: 0.5,
            lambda_l2: 0.25,
        });
        let stream = crate::test_util::toy_stream();
        let info = crate::test_util::task_info(&stream, 0);
        // Task 0: only the L2 term (no earlier adapter).
        let l2_0: f64 = factors(&m)
            .into_iter()
            .map(|(.., v)| {
                let x: Vec<f32> = v.into_data().try_to_vec::<f32>().unwrap();
                x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>()
            })
            .sum();
        let p0 = o.penalty_value(&m).unwrap().into_scalar::<f32>();
        assert!(
            (f64::from(p0) - 0.25 * l2_0).abs() < 1e-4 * l2_0.max(1.0),
            "{p0}"
        );
        let bases = ["blocks.0.linear.weight", "blocks.1.linear.weight"];
        let a1: Vec<_> = bases.iter().map(|b| a_of(&m, b)).collect();
        let m = o.task_end_weights(m, &info).unwrap();
        let m = l.task_end_model(m, &info).unwrap();
        assert_eq!(o.tasks_kept(), 1);
        let a2: Vec<_> = bases.iter().map(|b| a_of(&m, b)).collect();
        assert_ne!(a1[0].0, a2[0].0, "a fresh adapter after the merge");
        let want_orth: f64 = a1.iter().zip(&a2).map(|(x, y)| orth(x, y)).sum();
        // B₂ = 0 after the merge: the L2 term is ‖A₂‖² alone.
        let want_l2: f64 = a2
            .iter()
            .flat_map(|a| a.0.iter().map(|v| f64::from(*v).powi(2)))
            .sum();
        let want = 0.5 * want_orth + 0.25 * want_l2;
        let got = f64::from(o.penalty_value(&m).unwrap().into_scalar::<f32>());
        assert!((got - want).abs() < 1e-4 * want.max(1.0), "{got} vs {want}");
        // Without λ₂, the orthogonality term alone; its gradient reaches A₂ and nothing else.
        o.p.lambda_l2 = 0.0;
        let pen = o.penalty_value(&m).unwrap();
        let got = f64::from(pen.clone().into_scalar::<f32>());
        assert!((got - 0.5 * want_orth).abs() < 1e-4 * want_orth.max(1.0));
        let with_grad: Vec<String> = m.grads_of(pen).into_iter().map(|(i, _)| i.path).collect();
        assert_eq!(
            with_grad,
            [
                "blocks.0.linear.weight.lora.a",
                "blocks.1.linear.weight.lora.a"
            ]
        );
        // The kept A round-trips through the checkpoint state.
        let mut back = OLora::new(o.p.clone());
        back.load_state(o.state().unwrap(), &Device::flex().autodiff())
            .unwrap();
        let again = f64::from(back.penalty_value(&m).unwrap().into_scalar::<f32>());
        assert!((again - got).abs() < 1e-6 * got.max(1.0));
    }

    /// Without adapters, or with adapters that were not renewed (no merge), the next task is
    /// refused with a typed error that says what to configure.
    #[test]
    fn o_lora_needs_lora_with_merge_task() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (plain, _) = setup();
        let stream = crate::test_util::toy_stream();
        let device = Device::flex().autodiff();
        let mut o = OLora::default();
        let before = |model: &mut Model, o: &mut OLora, t: usize| {
            let info = crate::test_util::task_info(&stream, t);
            let mut cx = TaskContext {
                model,
                device: &device,
                task: &info,
                stream: &stream,
                seed: 0,
                final_train_loss: 0.0,
            };
            o.before_task(&mut cx).map_err(|e| e.to_string())
        };
        let mut m = plain.clone();
        let e = before(&mut m, &mut o, 0).unwrap_err();
        assert!(e.contains("no LoRA adapters"), "{e}");
        let mut m = lora("targets = [\"0.linear\"]").adapt(plain).unwrap();
        before(&mut m, &mut o, 0).unwrap();
        let info = crate::test_util::task_info(&stream, 0);
        let mut m = o.task_end_weights(m, &info).unwrap();
        let e = before(&mut m, &mut o, 1).unwrap_err();
        assert!(e.contains("merge = \"task\""), "{e}");
    }
}
