//! Schedulers: learning rate, regularisation warm-up, replay ratio, evaluation cadence and
//! the forgetting-anomaly handler. Each is registered under its own name and composes with
//! the others in config order (`[[scheduler]]` entries).
//!
//! Every schedule is a function of the run's [`Position`](engram_core::strategy::Position);
//! the only state a scheduler keeps is rebuilt from the position, so a resumed run gets
//! exactly the same controls.
//!
//! One scheduler per file: its parameters, the scheduler, `pub const REGISTRATION` and its
//! tests.

pub mod anomaly;
pub mod cadence;
pub mod lr;
pub mod reg_warmup;
pub mod replay_ratio;

pub use anomaly::{Anomaly, AnomalyParams, REGISTRATION as ANOMALY};
pub use cadence::{Cadence, CadenceParams, REGISTRATION as CADENCE};
pub use lr::{Lr, LrParams, REGISTRATION as LR, Shape};
pub use reg_warmup::{REGISTRATION as REG_WARMUP, RegWarmup, RegWarmupParams};
pub use replay_ratio::{REGISTRATION as REPLAY_RATIO, ReplayRatio, ReplayRatioParams};

#[cfg(test)]
pub(crate) mod tests {
    use engram_core::strategy::Position;

    /// The position of step `step` of task `task` (of 5) with `per_task` steps in `epochs`
    /// epochs.
    pub(crate) fn pos(task: usize, step: usize, per_task: usize, epochs: usize) -> Position {
        Position {
            task,
            num_tasks: 5,
            epoch: step / (per_task / epochs),
            epochs,
            step_in_task: step,
            steps_per_task: per_task,
            global_step: task * per_task + step,
        }
    }
}
