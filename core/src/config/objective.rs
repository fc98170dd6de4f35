//! `[train] objective` and `[train] window`: what a run trains its model to do — classify
//! (the default) or model language (next-token prediction on windows of text, issue #31).

use serde::{Deserialize, Serialize};

/// The default `[train] window` of a language-model run: tokens per window.
pub const DEFAULT_WINDOW: usize = 128;

/// What a run trains (`[train] objective`).
///
/// - `classify` (the default): cross-entropy of the data's labels, evaluated as accuracy.
/// - `lm`: causal language modelling. Every `[[data.stream]]` text dataset becomes windows of
///   `[train] window` tokens (its documents, each followed by the tokenizer's end-of-sequence
///   id, concatenated and cut: [`crate::train::lm::chunk_windows`]); the loss is next-token
///   cross-entropy ([`crate::train::lm::next_token_nll`]), and each task is evaluated by the
///   perplexity of its held-out windows (report.json's `language_model`). The model must be a
///   decoder ([`crate::model::Model::forward_tokens`]: `type = "llama"`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Classification of the data's labels.
    #[default]
    Classify,
    /// Next-token language modelling on windows of text.
    Lm,
}

impl Objective {
    /// Whether this is the default (`classify`): left out of the config as written, so that
    /// configs and checkpoints keep the identity they had before the key existed.
    pub fn is_default(&self) -> bool {
        *self == Objective::Classify
    }
}
