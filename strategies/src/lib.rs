//! # engram-strategies
//!
//! engram's built-in strategies, one file each: the parameter struct (serde,
//! `deny_unknown_fields`, documented defaults), the strategy, its registration and its tests.
//!
//! | name | kind | file |
//! |---|---|---|
//! | `naive` | forgetting | [`naive`] |
//! | `ewc` | forgetting | [`ewc`] |
//! | `replay` | forgetting | [`replay`] |
//! | `ema` | forgetting | [`ema`] |
//! | `standard` | memory | [`standard`] |
//! | `checkpoint` | memory | [`checkpoint`] |
//! | `accumulate` | memory | [`accumulate`] |
//! | `amp` | memory | [`amp`] |
//! | `budget` | memory | [`budget`] |
//! | `constant` | scheduler | [`constant`] |
//! | `lr`, `reg_warmup`, `replay_ratio`, `cadence`, `anomaly` | scheduler | [`schedules`] |
//!
//! A crate listed only as a dependency is not linked, and `inventory` registrations of an
//! unlinked crate vanish; the `engram` facade calls [`link`] so that they are always present.

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
pub mod standard;

/// Names of every built-in strategy of this crate (checked against the registry by a test).
pub const BUILTIN_NAMES: &[&str] = &[
    "naive",
    "ewc",
    "replay",
    "ema",
    "standard",
    "checkpoint",
    "accumulate",
    "amp",
    "budget",
    "constant",
    "lr",
    "reg_warmup",
    "replay_ratio",
    "cadence",
    "anomaly",
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

/// Forces this crate to be linked (its `inventory` registrations live in it).
#[inline(never)]
pub fn link() -> &'static [&'static str] {
    BUILTIN_NAMES
}

#[cfg(test)]
mod tests {
    use engram_core::registry::Registry;

    #[test]
    fn registry_has_unique_builtins() {
        let r = Registry::builtin();
        for name in super::BUILTIN_NAMES {
            assert!(
                r.entries().iter().any(|e| e.registration.name == *name),
                "built-in `{name}` is not registered"
            );
        }
        let mut seen = std::collections::HashSet::new();
        for reg in engram_core::inventory::iter::<engram_core::registry::Registration> {
            assert!(
                seen.insert((reg.factory.kind(), reg.name)),
                "`{}` registered twice",
                reg.name
            );
        }
    }
}
