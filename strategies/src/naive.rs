//! `naive`: fine-tune on each task as it comes, with nothing against forgetting. The lower
//! bound every continual-learning method is measured against.

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::ForgettingStrategy;
use serde::{Deserialize, Serialize};

/// `naive` takes no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NaiveParams {}

/// Does nothing at any hook.
#[derive(Debug, Default)]
pub struct Naive;

impl ForgettingStrategy for Naive {
    fn name(&self) -> &str {
        NaiveParams::NAME
    }
    /// Nothing to refuse: plain fine-tuning trains any objective.
    fn lm_refusal(&self) -> Option<engram_core::strategy::LmRefusal> {
        None
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn ForgettingStrategy>> {
    let _: NaiveParams = src.parse()?;
    Ok(Box::new(Naive))
}

engram_core::component!(forgetting "naive", "fine-tune on each task with nothing against forgetting (the lower bound)", NaiveParams, build);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_any_key() {
        assert!(build(&ParamSource::from_toml(""), &BuildContext::default()).is_ok());
        let err = build(
            &ParamSource::from_toml("lambda = 1"),
            &BuildContext::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("unknown field `lambda`"), "{err}");
    }
}
