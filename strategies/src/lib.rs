//! # engram-strategies
//!
//! engram's built-in strategies, one file each: the parameter struct (serde,
//! `deny_unknown_fields`, documented defaults), the strategy, its registration and its tests.
//!
//! [`BUILTINS`] lists them, one line each: the registry, `engram list` and the book's
//! reference page are generated from it. Adding a strategy is a new file (parameters, strategy,
//! its one declaration `engram_core::component!(kind "name", "summary", Params, build)`, which
//! gives it its name, keys, builder, `REGISTRATION` and typed-builder marker, and tests) plus
//! its `mod` line and its line in [`BUILTINS`]; the test
//! `extension_kinds_take_one_file_and_one_line` (tests/engram/registry.rs) holds every
//! built-in to that.

pub mod accumulate;
pub mod agem;
pub mod amp;
pub mod budget;
pub mod checkpoint;
pub mod constant;
pub mod derpp;
pub mod ema;
pub mod er_ace;
pub mod ewc;
pub mod gdumb;
pub mod lora;
pub mod lwf;
pub mod mahalanobis;
pub mod moe_lora;
pub mod naive;
pub mod ncm;
pub mod olora;
pub mod replay;
pub mod reservoir;
pub mod schedules;
pub mod task_lora;
/// The plain step, engram-core's (re-exported where it used to live).
pub use engram_core::strategy::standard;

use engram_core::registry::Registration;

/// Every built-in strategy, in the order of the book's tables.
pub const BUILTINS: &[Registration] = &[
    naive::REGISTRATION,
    ewc::REGISTRATION,
    replay::REGISTRATION,
    er_ace::REGISTRATION,
    derpp::REGISTRATION,
    agem::REGISTRATION,
    lwf::REGISTRATION,
    moe_lora::REGISTRATION,
    olora::REGISTRATION,
    task_lora::REGISTRATION,
    gdumb::REGISTRATION,
    ema::REGISTRATION,
    checkpoint::REGISTRATION,
    accumulate::REGISTRATION,
    amp::REGISTRATION,
    budget::REGISTRATION,
    lora::REGISTRATION,
    constant::REGISTRATION,
    schedules::lr::REGISTRATION,
    schedules::reg_warmup::REGISTRATION,
    schedules::replay_ratio::REGISTRATION,
    schedules::cadence::REGISTRATION,
    schedules::anomaly::REGISTRATION,
];

/// Burn's RNG is process-global and every training step reseeds it per block: unit tests that
/// run steps take this lock so that they do not reseed it under each other's dropout draws.
#[cfg(test)]
pub(crate) static BURN_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Helpers shared by the unit tests of the strategies.
#[cfg(test)]
pub(crate) mod test_util {
    use engram_core::burn::tensor::{Device, Tensor};
    use engram_core::config::DataConfig;
    use engram_core::data::dataset::{Dataset, Split};
    use engram_core::data::stream::{Batch, Stream};
    use engram_core::model::Model;
    use engram_core::strategy::LossFn;
    use std::sync::Arc;

    /// A class-incremental stream of 5 tasks × 2 classes over a toy dataset: 4 features (2 × 2
    /// images), 30 training and 5 test rows per class, labels `i % 10`.
    pub(crate) fn toy_stream() -> Stream {
        let split = |per: usize| {
            let n = 10 * per;
            Split::bytes(
                (0..n * 4).map(|i| (i % 251) as u8).collect(),
                (0..n).map(|i| (i % 10) as u32).collect(),
                4,
                0.0,
                1.0,
            )
        };
        let ds = Dataset::new(
            "toy",
            "toy".into(),
            split(30),
            split(5),
            engram_core::model::InputShape::Image {
                channels: 1,
                height: 2,
                width: 2,
            },
            10,
        );
        let cfg: DataConfig = toml::from_str("dataset = \"fashion-mnist\"").unwrap();
        Stream::build(Arc::new(ds), &cfg, 0).unwrap()
    }

    /// A step's knobs as configured (lr 0.1, no scheduler).
    pub(crate) fn controls() -> engram_core::strategy::Controls {
        engram_core::strategy::Controls {
            lr: 0.1,
            reg_scale: 1.0,
            replay_ratio: None,
            replay_delta: 0.0,
        }
    }

    /// The batch context of a step at `position` (run seed 0).
    pub(crate) fn batch_cx<'a>(
        position: &'a engram_core::strategy::Position,
        controls: &'a engram_core::strategy::Controls,
        stream: &'a Stream,
        device: &'a Device,
    ) -> engram_core::strategy::BatchContext<'a> {
        engram_core::strategy::BatchContext {
            position,
            controls,
            stream,
            device,
            seed: 0,
        }
    }

    /// What the trainer knows about task `t` of `stream`.
    pub(crate) fn task_info(stream: &Stream, t: usize) -> engram_core::strategy::TaskInfo {
        engram_core::strategy::TaskInfo {
            index: t,
            num_tasks: stream.tasks.len(),
            classes: stream.tasks[t].classes.clone(),
            train_samples: stream.tasks[t].train.len(),
            joint: false,
        }
    }

    /// The task context of `task` on `model` (run seed 0).
    pub(crate) fn task_cx<'a>(
        model: &'a mut Model,
        device: &'a Device,
        task: &'a engram_core::strategy::TaskInfo,
        stream: &'a Stream,
    ) -> engram_core::strategy::TaskContext<'a> {
        engram_core::strategy::TaskContext {
            model,
            device,
            task,
            stream,
            seed: 0,
            final_train_loss: 0.0,
        }
    }

    /// A 4-6-10 tanh MLP for the toy stream.
    pub(crate) fn toy_model(device: &Device) -> Model {
        use engram_core::model::mlp::{ActivationKind, build_mlp};
        let mut g = engram_core::rng::stream(0, "init", 0, 0);
        build_mlp(4, &[6], 10, ActivationKind::Tanh, 0.0, &mut g, device)
    }

    /// The trainer's loss (mean or row-weighted cross-entropy) plus `l2 · Σ θ²` on every
    /// parameter: a penalty like EWC's, whose gradient reaches every block.
    pub(crate) struct CeL2(pub(crate) f64);

    impl LossFn for CeL2 {
        fn loss(&self, model: &Model, logits: Tensor<2>, batch: &Batch) -> (Tensor<1>, Tensor<1>) {
            let ce = engram_core::train::trainer::per_sample_cross_entropy(logits, batch);
            let task = match &batch.weights {
                Some(w) => (ce.clone() * w.clone()).sum(),
                None => ce.clone().mean(),
            };
            if self.0 == 0.0 {
                return (task, ce);
            }
            let l2 = model
                .param_values()
                .into_iter()
                .map(|(_, p)| (p.clone() * p).sum())
                .reduce(|a, b| a + b)
                .expect("the model has parameters")
                .mul_scalar(self.0);
            (task + l2, ce)
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_core::registry::Registry;

    #[test]
    fn builtins_have_unique_names_per_kind() {
        // `with` panics on a name registered twice for one kind.
        let r = Registry::builtin().with(super::BUILTINS);
        assert_eq!(
            r.entries().len(),
            super::BUILTINS.len()
                + engram_core::strategy::BUILTINS.len()
                + engram_core::model::BUILTINS.len()
                + engram_core::data::BUILTINS.len()
        );
    }
}
