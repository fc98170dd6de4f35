//! `lwf`: learning without forgetting (Li & Hoiem 2016, "Learning without Forgetting", §3,
//! eq. 2–4).
//!
//! No memory of past data: before training task `t > 0`, the model as it left task `t − 1`
//! records its logits `y_o` on every training sample of task `t`, over the classes seen so far
//! (the paper's "responses of the original network on the new data", computed once, before
//! training, as its Algorithm 1 does). While task `t` trains, each new row adds the
//! distillation term (Hinton et al. 2015) of the model's current logits `ŷ_o` on those classes:
//!
//! ```text
//! L_old = λ · mean_rows [ −Σ_{c ∈ old} y'_c · log ŷ'_c ],   y' = softmax(y_o / T),  ŷ' = softmax(ŷ_o / T)
//! ```
//!
//! with `λ = lambda` (the paper's `λ_o`) and `T = temperature` (the paper's `T = 2`). In a
//! class-incremental stream the old classes are the earlier tasks' classes; in a
//! domain-incremental one (permuted, rotated) every class, so the whole head is distilled.
//! Rows other strategies add (replay) are left to them. Only the new samples' recorded logits
//! are kept, `[samples of the task, old classes]` floats, in checkpoints too.

use engram_core::burn::module::Module as _;
use engram_core::burn::tensor::{Tensor, TensorData, activation};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, Part, SampleRef};
use engram_core::model::ForwardCtx;
use engram_core::registry::BuildContext;
use engram_core::strategy::{ForgettingStrategy, StateTensor, StrategyState, TaskContext};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use crate::reservoir;

/// `[[forgetting]] type = "lwf"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LwfParams {
    /// `λ_o`, the weight of the distillation term, > 0. Default 1 (the paper's).
    pub lambda: f64,
    /// The distillation temperature `T`, > 0. Default 2 (the paper's).
    pub temperature: f64,
}

impl Default for LwfParams {
    fn default() -> Self {
        Self {
            lambda: 1.0,
            temperature: 2.0,
        }
    }
}

/// The recorded responses of the previous model on the current task's samples.
#[derive(Clone, Debug, Default, PartialEq)]
struct Recorded {
    /// The old classes (logit columns distilled).
    old: Vec<usize>,
    /// Row of each sample in `logits`.
    row: HashMap<SampleRef, usize>,
    /// `[samples, old.len()]`, row-major.
    logits: Vec<f32>,
}

/// The LwF strategy.
pub struct Lwf {
    p: LwfParams,
    recorded: Recorded,
}

impl Lwf {
    /// A strategy with nothing recorded.
    ///
    /// # Errors
    /// [`engram_core::Error::Config`] (positioned at the key, when `src` is given) for a
    /// `lambda` or `temperature` that is not > 0.
    pub fn new(p: LwfParams, src: Option<&ParamSource>) -> Result<Self> {
        reservoir::require(
            src,
            LwfParams::NAME,
            p.lambda > 0.0,
            "lambda",
            "must be > 0",
        )?;
        reservoir::require(
            src,
            LwfParams::NAME,
            p.temperature > 0.0,
            "temperature",
            "must be > 0",
        )?;
        Ok(Self {
            p,
            recorded: Recorded::default(),
        })
    }
}

/// LwF's distillation term for current logits `z` `[k, o]` against recorded ones `y_o`
/// `[k, o]` (the old classes' columns of the same rows): `λ · mean_rows −Σ softmax(y_o/T) ·
/// log_softmax(z/T)`. `[1]`.
pub fn distillation(z: Tensor<2>, y_o: Tensor<2>, lambda: f64, t: f64) -> Tensor<1> {
    let k = z.dims()[0];
    let p = activation::softmax(y_o.div_scalar(t), 1);
    let logq = activation::log_softmax(z.div_scalar(t), 1);
    (p * logq).sum().neg().mul_scalar(lambda / k as f64)
}

impl ForgettingStrategy for Lwf {
    fn name(&self) -> &str {
        LwfParams::NAME
    }

    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> Result<()> {
        self.recorded = Recorded::default();
        let t = cx.task.index;
        if t == 0 || cx.task.joint {
            return Ok(());
        }
        let mut old: Vec<usize> = cx.stream.tasks[..t]
            .iter()
            .flat_map(|task| task.classes.iter().copied())
            .collect();
        old.sort_unstable();
        old.dedup();
        let refs = cx.train_refs();
        let valid = cx.model.valid();
        let inner = cx.device.clone().inner();
        let cols = reservoir::index(&old, &inner);
        let mut logits = Vec::with_capacity(refs.len() * old.len());
        for chunk in refs.chunks(500) {
            let b = cx.stream.batch(chunk, Part::Train, t, &inner);
            let ctx = ForwardCtx::training(b.forward_ctx().task);
            let z = valid.forward(b.input(), &ctx);
            logits.extend(
                z.select(1, cols.clone())
                    .into_data()
                    .try_to_vec::<f32>()
                    .map_err(|e| Error::Strategy {
                        strategy: LwfParams::NAME.into(),
                        message: format!("reading the recorded logits: {e:?}"),
                    })?,
            );
        }
        self.recorded = Recorded {
            row: refs.iter().enumerate().map(|(i, &r)| (r, i)).collect(),
            old,
            logits,
        };
        Ok(())
    }

    fn logit_penalty(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        let o = self.recorded.old.len();
        if o == 0 {
            return None;
        }
        let n = batch.new_samples.min(logits.dims()[0]);
        let (rows, recorded): (Vec<usize>, Vec<usize>) = (0..n)
            .filter_map(|i| self.recorded.row.get(&batch.refs[i]).map(|&r| (i, r)))
            .unzip();
        if rows.is_empty() {
            return None;
        }
        let device = logits.device();
        let y: Vec<f32> = recorded
            .iter()
            .flat_map(|&r| self.recorded.logits[r * o..(r + 1) * o].iter().copied())
            .collect();
        let y_o = Tensor::<2>::from_data(TensorData::new(y, [rows.len(), o]), &device);
        let z = logits
            .clone()
            .select(0, reservoir::index(&rows, &device))
            .select(1, reservoir::index(&self.recorded.old, &device));
        Some(distillation(z, y_o, self.p.lambda, self.p.temperature))
    }

    fn state(&self) -> Result<StrategyState> {
        let mut refs: Vec<(SampleRef, usize)> =
            self.recorded.row.iter().map(|(&r, &i)| (r, i)).collect();
        refs.sort_by_key(|&(_, i)| i);
        let refs: Vec<SampleRef> = refs.into_iter().map(|(r, _)| r).collect();
        let mut tensors = std::collections::BTreeMap::new();
        tensors.insert(
            "recorded_logits".into(),
            StateTensor {
                shape: vec![refs.len(), self.recorded.old.len()],
                values: self.recorded.logits.clone(),
            },
        );
        Ok(StrategyState {
            meta: serde_json::json!({ "old_classes": self.recorded.old, "samples": refs }),
            tensors,
        })
    }

    fn load_state(
        &mut self,
        state: StrategyState,
        _device: &engram_core::burn::tensor::Device,
    ) -> Result<()> {
        let bad = |m: String| Error::Strategy {
            strategy: LwfParams::NAME.into(),
            message: format!("saved state: {m}"),
        };
        let old: Vec<usize> = serde_json::from_value(state.meta["old_classes"].clone())
            .map_err(|e| bad(e.to_string()))?;
        let refs: Vec<SampleRef> = serde_json::from_value(state.meta["samples"].clone())
            .map_err(|e| bad(e.to_string()))?;
        let logits = state
            .tensors
            .get("recorded_logits")
            .map(|t| t.values.clone())
            .unwrap_or_default();
        if logits.len() != refs.len() * old.len() {
            return Err(bad(format!(
                "{} recorded logits for {} samples × {} classes",
                logits.len(),
                refs.len(),
                old.len()
            )));
        }
        self.recorded = Recorded {
            row: refs.into_iter().enumerate().map(|(i, r)| (r, i)).collect(),
            old,
            logits,
        };
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: LwfParams = src.parse()?;
    Ok(Box::new(Lwf::new(p, Some(src))?))
}

engram_core::component!(forgetting "lwf", "LwF (Li & Hoiem 2016): distillation of the old classes' logits towards the previous model's, on the new task's data", LwfParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{toy_model, toy_stream};
    use engram_core::burn::tensor::Device;

    #[test]
    fn records_the_previous_model_and_the_term_is_the_softened_cross_entropy_by_hand() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let mut model = toy_model(&device);
        let mut s = Lwf::new(
            LwfParams {
                lambda: 0.7,
                temperature: 2.0,
            },
            None,
        )
        .unwrap();
        let info = crate::test_util::task_info(&stream, 2);
        s.before_task(&mut crate::test_util::task_cx(
            &mut model, &device, &info, &stream,
        ))
        .unwrap();
        // Tasks 0 and 1 came before: classes 0-3 are distilled.
        assert_eq!(s.recorded.old, vec![0, 1, 2, 3]);
        assert_eq!(s.recorded.row.len(), stream.tasks[2].train.len());
        let refs = stream.epoch_order(2, 0, 0)[..2].to_vec();
        let b = stream.batch(&refs, Part::Train, 2, &device);
        let before: Vec<f32> = model
            .valid()
            .forward(b.x.clone().inner().into(), &ForwardCtx::training(None))
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (i, r) in refs.iter().enumerate() {
            let row = s.recorded.row[r];
            assert_eq!(
                s.recorded.logits[row * 4..row * 4 + 4],
                before[i * 10..i * 10 + 4]
            );
        }
        // Current logits chosen by hand: −λ/2 Σ_rows Σ_c softmax(y_o/2)_c log softmax(z/2)_c.
        let z: Vec<f64> = (0..20).map(|i| ((i * 3) % 7) as f64 * 0.5 - 1.0).collect();
        let logits = Tensor::<2>::from_data(
            TensorData::new(z.iter().map(|&v| v as f32).collect(), [2, 10]),
            &device,
        );
        let soft = |v: &[f64]| -> Vec<f64> {
            let e: Vec<f64> = v.iter().map(|x| (x / 2.0).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        let want: f64 = (0..2)
            .map(|i| {
                let y: Vec<f64> = before[i * 10..i * 10 + 4]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let (p, q) = (soft(&y), soft(&z[i * 10..i * 10 + 4]));
                -p.iter().zip(&q).map(|(p, q)| p * q.ln()).sum::<f64>()
            })
            .sum::<f64>()
            * 0.7
            / 2.0;
        let got = f64::from(s.logit_penalty(&logits, &b).unwrap().into_scalar::<f32>());
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // Saved and restored: the same term.
        let mut back = Lwf::new(LwfParams::default(), None).unwrap();
        back.load_state(s.state().unwrap(), &device).unwrap();
        assert_eq!(back.recorded, s.recorded);
        // The first task distills nothing.
        let first = crate::test_util::task_info(&stream, 0);
        s.before_task(&mut crate::test_util::task_cx(
            &mut model, &device, &first, &stream,
        ))
        .unwrap();
        assert!(s.logit_penalty(&logits, &b).is_none());
        assert!(
            Lwf::new(
                LwfParams {
                    lambda: 0.0,
                    ..LwfParams::default()
                },
                None
            )
            .is_err()
        );
        assert!(
            Lwf::new(
                LwfParams {
                    temperature: -1.0,
                    ..LwfParams::default()
                },
                None
            )
            .is_err()
        );
    }
}
