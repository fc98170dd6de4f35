//! `constant`: keep the learning rate and every strength as configured, evaluate every task
//! after every task, never intervene. The default scheduler.

use engram_core::Result;
use engram_core::component::Component;
use engram_core::config::ParamSource;
use engram_core::registry::BuildContext;
use engram_core::strategy::Scheduler;
use serde::{Deserialize, Serialize};

/// `constant` takes no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConstantParams {}

/// Leaves every control as configured.
#[derive(Debug, Default)]
pub struct Constant;

impl Scheduler for Constant {
    fn name(&self) -> &str {
        ConstantParams::NAME
    }
}

fn build(src: &ParamSource, _cx: &BuildContext) -> Result<Box<dyn Scheduler>> {
    let _: ConstantParams = src.parse()?;
    Ok(Box::new(Constant))
}

engram_core::component!(scheduler "constant", "constant learning rate and strengths; evaluate every task after every task", ConstantParams, build);
