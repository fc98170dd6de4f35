//! `[[forgetting]] type = "replay"` keys and their choices: how the memory is divided
//! ([`Allocation`]), how samples are chosen ([`Selection`], [`Score`]), how a mixed batch is
//! weighted ([`Balance`]) and how the evaluation classifies ([`Classifier`]).

use serde::{Deserialize, Serialize};

/// How the memory is divided between tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Allocation {
    /// Proportional to the model's mean predictive entropy on the task.
    Entropy,
    /// Proportional to the entropy of the task's label distribution.
    Labels,
    /// Equal shares.
    #[default]
    Equal,
}

/// How samples are chosen inside a task's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Uniform (reservoir sampling).
    #[default]
    Reservoir,
    /// Equal counts per class.
    ClassBalanced,
    /// The top of every quantile stratum of the score.
    Stratified,
    /// Herding (iCaRL, Rebuffi et al. 2017, Algorithm 4): per class, the samples whose running
    /// feature mean best approximates the mean of the class's candidates, greedily; classes
    /// interleaved by rank, so a shrunk share keeps the first samples of every class. Cost
    /// `O(share · candidates · features)` per task.
    Herding,
}

/// The score strata are cut on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Score {
    /// Per-sample cross-entropy.
    #[default]
    Loss,
    /// Predictive entropy.
    Entropy,
}

/// `[[forgetting]] type = "replay"` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayParams {
    /// Memory size in samples, shared by all tasks. Default 500.
    pub capacity: usize,
    /// `equal` (default), `entropy` or `labels`.
    pub allocation: Allocation,
    /// Smallest share of a past task, in samples. Default 10.
    pub min_per_task: usize,
    /// `reservoir` (default), `class_balanced`, `stratified` or `herding`.
    pub selection: Selection,
    /// Number of strata for `stratified`. Default 4.
    pub strata: usize,
    /// `loss` (default) or `entropy`.
    pub stratify_by: Score,
    /// Candidates scored per task for selection (0 = all). Default 2000.
    pub candidates: usize,
    /// Draw memory rows by priority. Default false.
    pub priority: bool,
    /// Sampling exponent: `P(i) ∝ p_i^alpha`. Default 1.
    pub priority_alpha: f64,
    /// Priority update `p ← decay·p + (1 − decay)·loss`. Default 0.5.
    pub priority_decay: f64,
    /// Memory rows per new row, added to every batch (default 0.2 when `every` is unset).
    pub ratio: Option<f64>,
    /// Replay every k-th batch instead (exclusive with `ratio`).
    pub every: Option<usize>,
    /// Loss weight of the memory rows with `every` (default 0.3).
    pub weight: Option<f64>,
    /// `ratio` mode loss: `class` weighs rows so that every class present in the mixed batch
    /// contributes equally (`w_i = 1 / (classes · count(class_i))`), countering the imbalance
    /// between the new task's classes and the memory's; `none` is the plain mean. Default
    /// `class`.
    pub balance: Balance,
    /// With `balance = "class"`: the share of each task, in `[0, 1]`, over which the row weights
    /// move linearly from the plain mean to class-balanced (`α = step_in_task / (share ·
    /// steps_per_task)`, capped at 1). Balanced weights give the new task's classes only their
    /// share of the classes seen (2 of 10 in Split-FMNIST's last task); a task of a few steps
    /// is then never learned, so the balance comes in as the task goes. 0 balances from the
    /// first step. Default 1 (the whole task): on Split-FMNIST's validation split it leaves
    /// the full-length ACC where 0 has it and keeps the new tasks of 13-step tasks learnable.
    pub balance_warmup: f64,
    /// Weight aligning after each task (Zhao et al. 2020, "Maintaining Discrimination and
    /// Fairness in Class Incremental Learning", eq. 4–5): scale the head's weight columns of
    /// the task's new classes by `γ = mean ‖w_old‖ / mean ‖w_new‖` (and their biases by γ),
    /// removing the head's bias towards the newest classes. Class-incremental only. Default
    /// false (measured: it lowered ACC on Split-FMNIST with this MLP, see the book).
    pub align_head: bool,
    /// How the trainer's evaluation classifies: `linear` (default: the trained head) or `ncm`
    /// (nearest class mean of the memory's features, iCaRL; see [`crate::ncm`]).
    pub classifier: Classifier,
    /// Logit replay (dark experience replay, Buzzega et al. 2020): each stored sample keeps the
    /// logits `z*` the model gave it when it entered the memory, and memory rows add
    /// `distill · T² · mean_i KL(softmax(z*_i/T) ‖ softmax(z_i/T))` with `T = temperature` to the loss —
    /// a soft-label distillation (Hinton et al. 2015) instead of DER's logit MSE, whose
    /// unbounded gradient diverged at the runner's lr 0.05 / momentum 0.9. 0 turns it off.
    /// Default 0.5 (chosen on the validation split).
    pub distill: f64,
    /// The distillation temperature `T` of `distill` (Hinton et al. 2015, eq. 1), > 0; higher
    /// values soften the stored distributions and carry more of the non-argmax logits.
    /// Default 2; the replay examples use 4 (validation split, ratio 1.0 with weight averaging
    /// and `update_logits`: T = 2 0.818, 3 0.821, 4 0.825, 6 0.823). With the few memory rows
    /// of the default ratio 0.2, T = 4 lowered ACC.
    pub temperature: f64,
    /// Class-incremental logit replay only: after each task, every older stored sample's
    /// logits for the classes that task introduced are replaced by the current model's
    /// (X-DER's update of the buffer's past logits, Boschini et al. 2022; see
    /// [`update_new_class_logits`](super::update_new_class_logits)). A sample stored before a
    /// class existed otherwise keeps the value the untrained class had then, and logit replay
    /// pins it there for the rest of the stream. That stale, very low value is also a pressure
    /// against the newest classes: with few memory rows it is the stronger effect. Default false; the replay examples turn
    /// it on (validation split, ratio 1.0, T = 4, weight averaging: ACC 0.826 against 0.819
    /// without it; at ratio 0.2, T = 2: 0.728 against 0.756).
    pub update_logits: bool,
}

/// Loss weighting of a mixed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Every class in the batch weighs the same.
    #[default]
    Class,
    /// Plain mean over rows.
    None,
}

impl Default for ReplayParams {
    fn default() -> Self {
        Self {
            capacity: 500,
            allocation: Allocation::Equal,
            min_per_task: 10,
            selection: Selection::Reservoir,
            strata: 4,
            stratify_by: Score::Loss,
            candidates: 2000,
            priority: false,
            priority_alpha: 1.0,
            priority_decay: 0.5,
            ratio: None,
            every: None,
            weight: None,
            balance: Balance::Class,
            balance_warmup: 1.0,
            align_head: false,
            classifier: Classifier::Linear,
            distill: 0.5,
            temperature: 2.0,
            update_logits: false,
        }
    }
}

/// How the trainer's evaluation classifies (see [`ReplayParams::classifier`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Classifier {
    /// The trained linear head.
    #[default]
    Linear,
    /// Nearest class mean of the memory's features.
    Ncm,
}
