//! `derpp`: DER++, dark experience replay with labels (Buzzega et al. 2020, "Dark Experience
//! for General Continual Learning: a Strong, Simple Baseline", eq. 6).
//!
//! A reservoir memory ([`crate::reservoir`]) of `capacity` samples keeps, with each sample, the
//! logits `z*` the model gave it when it was stored. Each step trains on the incoming batch
//! `B_n` and two batches `B_a`, `B_b` of `m = round(ratio · n)` rows each, drawn independently
//! and uniformly from the memory:
//!
//! ```text
//! L = mean_{B_n} CE(z(x), y)  +  α · mean_{B_a, classes} (z(x) − z*)²  +  β · mean_{B_b} CE(z(x), y)
//! ```
//!
//! The logit term is a mean over rows and classes, as in the authors' code (Mammoth's
//! `derpp.py`, `F.mse_loss`); the paper writes the squared L2 norm over classes, which is `C`
//! times larger for `C` classes. After the step the incoming rows are offered to the memory
//! (reservoir sampling over the whole stream); a row that is stored keeps the logits of the
//! model right after that step (the paper keeps those of the step's forward pass, before the
//! update: the same model one step earlier). `β = 0` is plain DER.
//!
//! Use it as the only forgetting strategy that mixes rows: it sets the batch's row weights
//! (`1/n` incoming, 0 for `B_a`, `β/m` for `B_b`). Its logit term needs the whole mixed batch in
//! one pass: under `accumulate`, which splits the batch, the term is left out.

use engram_core::burn::module::Module as _;
use engram_core::burn::tensor::{Tensor, TensorData};
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::data::stream::{Batch, Part, SampleRef};
use engram_core::model::Activation;
use engram_core::registry::BuildContext;
use engram_core::strategy::{BatchContext, ForgettingStrategy, StepContext, StrategyState};
use engram_core::{Result, rng};
use serde::{Deserialize, Serialize};

use crate::reservoir::{self, Reservoir};

/// `[[forgetting]] type = "derpp"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DerppParams {
    /// Memory size in samples (the reservoir), ≥ 1. Default 500.
    pub capacity: usize,
    /// `α`, the weight of the logit term, ≥ 0. Default 0.1.
    pub alpha: f64,
    /// `β`, the weight of the memory rows' cross-entropy, ≥ 0 (0: DER). Default 0.5.
    pub beta: f64,
    /// Rows of each memory batch per incoming row, > 0. Default 1 (the paper's equal sizes).
    pub ratio: f64,
}

impl Default for DerppParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            alpha: 0.1,
            beta: 0.5,
            ratio: 1.0,
        }
    }
}

/// The DER++ strategy.
pub struct Derpp {
    p: DerppParams,
    memory: Reservoir,
    /// `(n, m)` of the last prepared batch and the stored logits of its `B_a` rows `[m, C]`.
    targets: Option<(usize, usize, Tensor<2>)>,
    /// The run seed, from the last batch's context.
    seed: u64,
}

impl Derpp {
    /// A strategy with an empty memory.
    ///
    /// # Errors
    /// [`engram_core::Error::Config`] (positioned at the key, when `src` is given) for a
    /// capacity of 0, a negative `alpha` or `beta`, or a ratio that is not > 0.
    pub fn new(p: DerppParams, src: Option<&ParamSource>) -> Result<Self> {
        reservoir::require(
            src,
            DerppParams::NAME,
            p.capacity >= 1,
            "capacity",
            "must be ≥ 1",
        )?;
        reservoir::require(
            src,
            DerppParams::NAME,
            p.alpha >= 0.0,
            "alpha",
            "must be ≥ 0",
        )?;
        reservoir::require(src, DerppParams::NAME, p.beta >= 0.0, "beta", "must be ≥ 0")?;
        reservoir::require(
            src,
            DerppParams::NAME,
            p.ratio > 0.0,
            "ratio",
            "must be > 0",
        )?;
        Ok(Self {
            memory: Reservoir::new(p.capacity),
            p,
            targets: None,
            seed: 0,
        })
    }
}

impl ForgettingStrategy for Derpp {
    fn name(&self) -> &str {
        DerppParams::NAME
    }

    fn stored_samples(
        &self,
        stream: &engram_core::data::stream::Stream,
    ) -> Option<engram_core::strategy::StoredSamples> {
        Some(self.memory.stored_samples(stream))
    }

    fn prepare_batch(&mut self, batch: Batch, cx: &BatchContext<'_>) -> Result<Batch> {
        self.seed = cx.seed;
        self.targets = None;
        let n = batch.len();
        let ratio =
            (cx.controls.replay_ratio.unwrap_or(self.p.ratio) + cx.controls.replay_delta).max(0.0);
        let m = ((ratio * n as f64).round() as usize).min(self.memory.len());
        if m == 0 {
            return Ok(batch);
        }
        let draw = |name: &str| {
            let mut r = rng::stream(
                cx.seed,
                name,
                cx.position.task as u64,
                cx.position.global_step as u64,
            );
            self.memory.draw(m, &mut r)
        };
        let (a, b) = (draw("derpp-logits"), draw("derpp-labels"));
        let refs: Vec<SampleRef> = a
            .iter()
            .chain(&b)
            .map(|&i| self.memory.slots[i].r)
            .collect();
        let memory = cx
            .stream
            .batch(&refs, Part::Train, cx.position.task, cx.device);
        let mut out = batch.concat(memory);
        let mut w = vec![1.0 / n as f32; n];
        w.extend(std::iter::repeat_n(0.0, m));
        w.extend(std::iter::repeat_n((self.p.beta / m as f64) as f32, m));
        out.weights = Some(Tensor::from_data(
            TensorData::new(w, [n + 2 * m]),
            cx.device,
        ));
        let c = cx.stream.num_classes;
        let z: Vec<f32> = a
            .iter()
            .flat_map(|&i| {
                let l = &self.memory.slots[i].logits;
                if l.len() == c {
                    l.clone()
                } else {
                    vec![0.0; c]
                }
            })
            .collect();
        self.targets = Some((
            n,
            m,
            Tensor::from_data(TensorData::new(z, [m, c]), cx.device),
        ));
        Ok(out)
    }

    fn logit_penalty(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        let (n, m, targets) = self.targets.as_ref()?;
        let (n, m) = (*n, *m);
        let [rows, c] = logits.dims();
        if rows != n + 2 * m || batch.new_samples != n || self.p.alpha == 0.0 {
            return None;
        }
        let d = logits.clone().slice([n..n + m, 0..c]) - targets.clone();
        Some((d.clone() * d).mean().mul_scalar(self.p.alpha))
    }

    fn after_step(&mut self, cx: &StepContext<'_>) -> Result<()> {
        let mut r = rng::stream(
            self.seed,
            "derpp-offer",
            cx.position.task as u64,
            cx.position.global_step as u64,
        );
        let stored = reservoir::offer_new_rows(&mut self.memory, cx.batch, &mut r);
        if stored.is_empty() {
            return Ok(());
        }
        // The stored rows' logits under the model just updated, without a graph.
        let rows: Vec<usize> = stored.iter().map(|&(row, _)| row).collect();
        let x = cx.batch.x.clone().inner();
        let x = x.select_rows(reservoir::index(&rows, &x.device()));
        let valid = cx.model.valid();
        // The forward context the step trained these rows with (its batch's).
        let ctx = cx.batch.forward_ctx();
        let z: Vec<f32> = valid
            .forward(Activation::from(x), &ctx)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        let c = z.len() / rows.len();
        for (k, &(_, slot)) in stored.iter().enumerate() {
            self.memory.slots[slot].logits = z[k * c..(k + 1) * c].to_vec();
        }
        Ok(())
    }

    fn state(&self) -> Result<StrategyState> {
        Ok(self.memory.to_state())
    }

    fn load_state(
        &mut self,
        state: StrategyState,
        _device: &engram_core::burn::tensor::Device,
    ) -> Result<()> {
        self.memory = Reservoir::from_state(DerppParams::NAME, &state)?;
        self.targets = None;
        Ok(())
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let p: DerppParams = src.parse()?;
    Ok(Box::new(Derpp::new(p, Some(src))?))
}

engram_core::component!(forgetting "derpp", "DER++ (Buzzega et al. 2020): reservoir replay of labels and of the logits each sample had when stored", DerppParams, build);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{toy_model, toy_stream};
    use engram_core::burn::tensor::Device;
    use engram_core::model::ForwardCtx;
    use engram_core::strategy::{LossFn, Position};
    use engram_core::train::trainer::TrainLoss;

    fn ce(z: &[f64], y: usize) -> f64 {
        let s: f64 = z.iter().map(|v| v.exp()).sum();
        -(z[y].exp() / s).ln()
    }

    #[test]
    fn the_loss_is_ce_plus_alpha_logit_mse_plus_beta_memory_ce_by_hand() {
        let stream = toy_stream();
        let device = Device::flex().autodiff();
        let model = toy_model(&device);
        let mut s = Derpp::new(
            DerppParams {
                capacity: 3,
                alpha: 0.3,
                beta: 0.7,
                ratio: 1.0,
            },
            None,
        )
        .unwrap();
        // Three task-0 rows trained on: all three are stored, with the model's logits.
        let position = Position {
            task: 1,
            global_step: 5,
            ..Position::default()
        };
        let b0 = stream.batch(&stream.epoch_order(0, 0, 0)[..3], Part::Train, 0, &device);
        s.after_step(&StepContext {
            position: &position,
            batch: &b0,
            sample_losses: None,
            loss: 0.0,
            model: &model,
            grads: None,
        })
        .unwrap();
        assert_eq!(s.memory.len(), 3);
        let direct: Vec<f32> = model
            .valid()
            .forward(
                Activation::from(b0.x.clone().inner()),
                &ForwardCtx::training(None),
            )
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (i, slot) in s.memory.slots.iter().enumerate() {
            assert_eq!(slot.logits, direct[i * 10..(i + 1) * 10].to_vec());
        }
        let controls = crate::test_util::controls();
        let cx = crate::test_util::batch_cx(&position, &controls, &stream, &device);
        // Two incoming rows: B_a and B_b have two rows each.
        let b = s
            .prepare_batch(
                stream.batch(&stream.epoch_order(1, 0, 0)[..2], Part::Train, 1, &device),
                &cx,
            )
            .unwrap();
        assert_eq!((b.len(), b.new_samples), (6, 2));
        let y: Vec<usize> = b.labels().iter().map(|&v| v as usize).collect();
        let stored_of = |row: usize| -> Vec<f64> {
            let slot = s
                .memory
                .slots
                .iter()
                .find(|sl| sl.r == b.refs[row])
                .unwrap();
            slot.logits.iter().map(|&v| f64::from(v)).collect()
        };
        let zstar: Vec<Vec<f64>> = (2..4).map(stored_of).collect();
        let z: Vec<Vec<f64>> = (0..6)
            .map(|i| {
                (0..10)
                    .map(|k| ((i * 5 + k * 3) % 7) as f64 * 0.5 - 1.5)
                    .collect()
            })
            .collect();
        let flat: Vec<f32> = z.iter().flatten().map(|&v| v as f32).collect();
        let logits = Tensor::<2>::from_data(TensorData::new(flat, [6, 10]), &device);
        let mse: f64 = (0..2)
            .map(|r| {
                (0..10)
                    .map(|k| (z[2 + r][k] - zstar[r][k]).powi(2))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / 20.0;
        let want = (ce(&z[0], y[0]) + ce(&z[1], y[1])) / 2.0
            + 0.3 * mse
            + 0.7 * (ce(&z[4], y[4]) + ce(&z[5], y[5])) / 2.0;
        let strategies: Vec<Box<dyn ForgettingStrategy>> = vec![Box::new(s)];
        let loss = TrainLoss {
            forgetting: &strategies,
            cx: &cx,
            objective: Default::default(),
        };
        let got = f64::from(loss.loss(&model, logits, &b).0.into_scalar::<f32>());
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn bad_keys_and_state_round_trip() {
        for p in [
            DerppParams {
                capacity: 0,
                ..DerppParams::default()
            },
            DerppParams {
                alpha: -1.0,
                ..DerppParams::default()
            },
            DerppParams {
                beta: -1.0,
                ..DerppParams::default()
            },
            DerppParams {
                ratio: 0.0,
                ..DerppParams::default()
            },
        ] {
            assert!(Derpp::new(p, None).is_err());
        }
        let mut s = Derpp::new(DerppParams::default(), None).unwrap();
        let mut r = rng::stream(0, "t", 0, 0);
        s.memory.offer(
            reservoir::Stored {
                r: SampleRef { task: 0, index: 7 },
                class: 1,
                logits: vec![0.5, -1.0],
            },
            &mut r,
        );
        let mut back = Derpp::new(DerppParams::default(), None).unwrap();
        back.load_state(
            s.state().unwrap(),
            &engram_core::burn::tensor::Device::flex(),
        )
        .unwrap();
        assert_eq!(back.memory, s.memory);
    }
}
