//! `[train] on_divergence`: what a run does when its training loss becomes infinite or NaN
//! (the trainer's `divergence.rs` does it).

use serde::{Deserialize, Serialize};

/// The most restarts `on_divergence = "restart"` makes in one run; each halves the learning
/// rate again, so the last retry trains at 1/8 of the configured rate.
pub const MAX_RESTARTS: usize = 3;

/// What a diverging run does (`[train] on_divergence`): `restart` (the default) rolls the
/// model, the optimiser and every strategy back to the task's start (its checkpoint), halves
/// the learning rate, turns on `clip_norm = 1.0` (keeping a smaller one) for the rest of the
/// run, records a `divergence` event and trains the task again, at most [`MAX_RESTARTS`] times
/// in a run; `stop` ends the run with the divergence error. A run that never diverges trains
/// exactly the same either way.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnDivergence {
    /// Restart the task from its start with the learning rate halved and `clip_norm = 1.0`.
    #[default]
    Restart,
    /// Stop the run with the divergence error.
    Stop,
}

impl OnDivergence {
    /// Whether this is the default (`restart`).
    pub fn is_default(&self) -> bool {
        *self == OnDivergence::Restart
    }
}
