//! # engram-strategies
//!
//! engram's built-in strategies, one file each: the parameter struct (serde,
//! `deny_unknown_fields`, documented defaults), the strategy, its registration and its tests.
//!
//! [`BUILTINS`] lists them, one line each: the registry, `engram list` and the book's
//! reference page are generated from it. Adding a strategy is a new file (parameters, strategy,
//! `pub const REGISTRATION`, tests) plus its `mod` line and its line in [`BUILTINS`]; the test
//! `extension_kinds_take_one_file_and_one_line` (tests/engram/registry.rs) holds every
//! built-in to that.

pub mod accumulate;
pub mod amp;
pub mod budget;
pub mod checkpoint;
pub mod constant;
pub mod ema;
pub mod ewc;
pub mod naive;
pub mod ncm;
pub mod replay;
pub mod schedules;
/// The plain step, engram-core's (re-exported where it used to live).
pub use engram_core::strategy::standard;

use engram_core::registry::Registration;

/// Every built-in strategy, in the order of the book's tables.
pub const BUILTINS: &[Registration] = &[
    naive::REGISTRATION,
    ewc::REGISTRATION,
    replay::REGISTRATION,
    ema::REGISTRATION,
    checkpoint::REGISTRATION,
    accumulate::REGISTRATION,
    amp::REGISTRATION,
    budget::REGISTRATION,
    constant::REGISTRATION,
    schedules::LR,
    schedules::REG_WARMUP,
    schedules::REPLAY_RATIO,
    schedules::CADENCE,
    schedules::ANOMALY,
];

/// Burn's RNG is process-global and every training step reseeds it per block: unit tests that
/// run steps take this lock so that they do not reseed it under each other's dropout draws.
#[cfg(test)]
pub(crate) static BURN_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Helpers shared by the unit tests of the execution strategies.
#[cfg(test)]
pub(crate) mod test_util {
    use engram_core::burn::tensor::Tensor;
    use engram_core::data::stream::Batch;
    use engram_core::model::Model;
    use engram_core::strategy::LossFn;

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
