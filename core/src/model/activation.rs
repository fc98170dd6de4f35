//! What flows between blocks ([`Activation`], each variant naming its shape) and what a block
//! may know about the forward pass ([`ForwardCtx`]).

use burn::tensor::{Bool, Device, Int, Tensor};

/// The value that flows between blocks. Each variant names its shape.
// `Tokens` holds two tensor handles; an activation is moved once per block, so the size costs
// nothing that a box (an allocation per block) would save.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Activation {
    /// Flat features, `[batch, features]` (MLP layers, logits).
    Flat(Tensor<2>),
    /// A token sequence, `[batch, tokens, d_model]` (transformer blocks).
    Seq(Tensor<3>),
    /// Images, `[batch, channels, height, width]` (convolutions).
    Image(Tensor<4>),
    /// A padded token sequence with its attention mask (BERT-family encoders): `hidden`
    /// `[batch, tokens, d_model]` and `mask` `[batch, tokens]`, `true` at real tokens and
    /// `false` at padding. The mask is a constant of the batch: it carries no gradient and
    /// passes unchanged through [`Activation::detach`], [`Activation::grad`] and
    /// [`Activation::require_grad`].
    Tokens {
        /// Hidden states `[batch, tokens, d_model]`.
        hidden: Tensor<3>,
        /// `[batch, tokens]`, `true` where the token is real (not padding).
        mask: Tensor<2, Bool>,
        /// `false` only when every entry of `mask` is `true` (no token is padding), which lets
        /// attention leave its scores unmasked: a mask that masks nothing changes no value,
        /// forward or backward, so skipping it is exact. `true` when some token may be padding
        /// (a sub-batch keeps its batch's flag).
        padded: bool,
    },
    /// Token ids `[batch, len]`, a text batch's input ([`Input::Ids`](crate::data::input::Input)):
    /// what an embedding block (BERT's [`Embeddings`](crate::model::bert::Embeddings)) reads.
    /// Ids carry no gradient: [`Activation::detach`] and [`Activation::require_grad`] leave
    /// them as they are and [`Activation::grad`] is `None`.
    Ids(Tensor<2, Int>),
}

impl From<crate::data::input::Input> for Activation {
    fn from(x: crate::data::input::Input) -> Self {
        match x {
            crate::data::input::Input::Float(t) => Activation::Flat(t),
            crate::data::input::Input::Ids(t) => Activation::Ids(t),
        }
    }
}

impl Activation {
    /// The `[batch, features]` tensor; other variants are flattened per sample, and token ids
    /// become their values as floats (exact below 2^24: a model that means to read ids
    /// matches [`Activation::Ids`] instead).
    pub fn into_flat(self) -> Tensor<2> {
        match self {
            Activation::Flat(t) => t,
            Activation::Ids(t) => t.float(),
            Activation::Seq(t) => t.flatten(1, 2),
            Activation::Image(t) => t.flatten(1, 3),
            Activation::Tokens { hidden, .. } => hidden.flatten(1, 2),
        }
    }

    /// One feature vector per sample, `[batch, width]`, for selecting and comparing samples
    /// (herding's running means, class means): token hidden states ([`Activation::Tokens`])
    /// pooled over their real tokens by `pooling` (`[batch, d_model]`, the sentence vector the
    /// head classifies), any other activation as [`Activation::into_flat`] gives it.
    pub fn into_features(self, pooling: crate::model::bert::Pooling) -> Tensor<2> {
        match self {
            Activation::Tokens { hidden, mask, .. } => {
                crate::model::bert::pool(hidden, &mask, pooling)
            }
            other => other.into_flat(),
        }
    }

    /// Images `[batch, channels, height, width]` of `shape` `[channels, height, width]`: a flat
    /// activation `[batch, c·h·w]` (the trainer's input) is reshaped in row-major order, an
    /// image is returned as it is.
    ///
    /// # Panics
    /// On a token sequence, or when the sizes do not match (the model factory checks the data's
    /// [`InputShape`] before training, so this is a bug in the block).
    pub fn into_image(self, shape: [usize; 3]) -> Tensor<4> {
        match self {
            Activation::Image(t) => t,
            Activation::Flat(t) => {
                let [b, _] = t.dims();
                t.reshape([b, shape[0], shape[1], shape[2]])
            }
            Activation::Seq(_) | Activation::Tokens { .. } | Activation::Ids(_) => {
                panic!("a token sequence [batch, tokens, d] is not an image")
            }
        }
    }

    /// The device the activation lives on.
    pub fn device(&self) -> Device {
        match self {
            Activation::Flat(t) => t.device(),
            Activation::Seq(t) => t.device(),
            Activation::Image(t) => t.device(),
            Activation::Tokens { hidden, .. } => hidden.device(),
            Activation::Ids(t) => t.device(),
        }
    }

    /// The batch size (first dimension) in samples.
    pub fn batch_size(&self) -> usize {
        match self {
            Activation::Flat(t) => t.dims()[0],
            Activation::Seq(t) => t.dims()[0],
            Activation::Image(t) => t.dims()[0],
            Activation::Tokens { hidden, .. } => hidden.dims()[0],
            Activation::Ids(t) => t.dims()[0],
        }
    }

    /// The same activation detached from the autodiff graph (a new leaf).
    pub fn detach(self) -> Self {
        match self {
            Activation::Flat(t) => Activation::Flat(t.detach()),
            Activation::Seq(t) => Activation::Seq(t.detach()),
            Activation::Image(t) => Activation::Image(t.detach()),
            Activation::Tokens {
                hidden,
                mask,
                padded,
            } => Activation::Tokens {
                hidden: hidden.detach(),
                mask,
                padded,
            },
            Activation::Ids(t) => Activation::Ids(t),
        }
    }

    /// The gradient of this activation in `grads` (it must have been marked with
    /// [`Activation::require_grad`]), as an untracked activation of the same shape.
    pub fn grad(&self, grads: &burn::tensor::Gradients) -> Option<Activation> {
        Some(match self {
            Activation::Flat(t) => Activation::Flat(t.grad(grads)?),
            Activation::Seq(t) => Activation::Seq(t.grad(grads)?),
            Activation::Image(t) => Activation::Image(t.grad(grads)?),
            Activation::Tokens {
                hidden,
                mask,
                padded,
            } => Activation::Tokens {
                hidden: hidden.grad(grads)?,
                mask: mask.clone(),
                padded: *padded,
            },
            Activation::Ids(_) => return None,
        })
    }

    /// `Σ self ⊙ upstream` as a scalar `[1]`: backpropagating it sends `upstream` into the
    /// graph that produced `self` (the surrogate loss of segment recomputation).
    ///
    /// # Panics
    /// When the two activations are of different variants or shapes, or are token ids (which
    /// carry no gradient): a bug in the caller.
    pub fn dot(self, upstream: Activation) -> Tensor<1> {
        let up = |u: Activation| match u {
            // A constant: an untracked tensor joins any autodiff context (lifting it with
            // `autodiff()` would give it the default checkpointing strategy, which panics
            // against a device with op-level checkpointing).
            Activation::Flat(t) => t.detach().flatten::<1>(0, 1),
            Activation::Seq(t) => t.detach().flatten::<1>(0, 2),
            Activation::Image(t) => t.detach().flatten::<1>(0, 3),
            Activation::Tokens { hidden, .. } => hidden.detach().flatten::<1>(0, 2),
            Activation::Ids(_) => panic!("token ids carry no gradient to send upstream"),
        };
        let mine = match self {
            Activation::Flat(t) => t.flatten::<1>(0, 1),
            Activation::Seq(t) => t.flatten::<1>(0, 2),
            Activation::Image(t) => t.flatten::<1>(0, 3),
            Activation::Tokens { hidden, .. } => hidden.flatten::<1>(0, 2),
            Activation::Ids(_) => panic!("token ids carry no gradient to send upstream"),
        };
        (mine * up(upstream)).sum()
    }

    /// Rows `rows` of the batch, in that order (indices into the first dimension, each below
    /// [`Activation::batch_size`]): the sub-batch a per-input choice of model answers (the
    /// evaluation of per-task adapters routes each input to one task's adapter).
    ///
    /// # Panics
    /// When an index is out of range (Burn's `select`): a bug in the caller.
    pub fn select_rows(self, rows: &[usize]) -> Self {
        let device = self.device();
        let idx = Tensor::<1, Int>::from_data(
            burn::tensor::TensorData::new(
                rows.iter().map(|&r| r as i64).collect::<Vec<_>>(),
                [rows.len()],
            ),
            &device,
        );
        match self {
            Activation::Flat(t) => Activation::Flat(t.select(0, idx)),
            Activation::Seq(t) => Activation::Seq(t.select(0, idx)),
            Activation::Image(t) => Activation::Image(t.select(0, idx)),
            Activation::Tokens {
                hidden,
                mask,
                padded,
            } => Activation::Tokens {
                hidden: hidden.select(0, idx.clone()),
                mask: mask.select(0, idx),
                padded,
            },
            Activation::Ids(t) => Activation::Ids(t.select(0, idx)),
        }
    }

    /// The same activation marked as requiring a gradient (for segment recomputation).
    pub fn require_grad(self) -> Self {
        match self {
            Activation::Flat(t) => Activation::Flat(t.require_grad()),
            Activation::Seq(t) => Activation::Seq(t.require_grad()),
            Activation::Image(t) => Activation::Image(t.require_grad()),
            Activation::Tokens {
                hidden,
                mask,
                padded,
            } => Activation::Tokens {
                hidden: hidden.require_grad(),
                mask,
                padded,
            },
            Activation::Ids(t) => Activation::Ids(t),
        }
    }
}

/// What a block may know about the current forward pass.
#[derive(Clone, Debug, Default)]
pub struct ForwardCtx {
    /// The task the batch belongs to, where the scenario provides it (task-incremental
    /// training and evaluation); `None` in class- and domain-incremental evaluation.
    pub task: Option<usize>,
    /// This forward repeats one already run in the same step (a checkpointed segment recomputed
    /// in backward): blocks must compute exactly as before but not update state again (batch
    /// norm's running statistics, see [`cnn::batch_norm`]).
    pub replay: bool,
    /// This forward is the trainer's evaluation (a row of the accuracy matrix, `engram eval`),
    /// on the inference copy of the model. A block may classify differently there (replay's
    /// nearest-class-mean head does).
    pub evaluation: bool,
    /// The model's activation-path adapters, when it has any ([`ForwardCtx::linear`] adds
    /// their update to a targeted layer's output); set by [`Model::forward_range`](super::Model::forward_range).
    pub adapters: Option<std::sync::Arc<super::adapter::Adapters>>,
    /// The index of the block running (set by the model before each block's forward).
    pub block: usize,
    /// Which tokens of the block's input are real, `[batch, tokens]` (`true` at real tokens),
    /// where the block knows it (BERT's encoder layers): a router's load-balancing term and
    /// choice counts leave padding out.
    pub token_mask: Option<Tensor<2, burn::tensor::Bool>>,
}

impl ForwardCtx {
    /// A training forward of a batch of task `task` (`None`: rows of several tasks); build it
    /// with [`Batch::forward_ctx`](crate::data::stream::Batch::forward_ctx).
    pub fn training(task: Option<usize>) -> Self {
        Self {
            task,
            replay: false,
            evaluation: false,
            adapters: None,
            block: 0,
            token_mask: None,
        }
    }

    /// An evaluation forward on the inference copy; `task` is given only where the scenario
    /// provides task identity at test time (task-incremental).
    pub fn evaluation(task: Option<usize>) -> Self {
        Self {
            task,
            replay: false,
            evaluation: true,
            adapters: None,
            block: 0,
            token_mask: None,
        }
    }

    /// The same forward repeated in backward (a recomputed checkpoint segment).
    pub fn replayed(&self) -> Self {
        Self {
            replay: true,
            ..self.clone()
        }
    }
}

impl crate::data::stream::Batch {
    /// The batch's input as the model's first activation: [`Activation::Flat`] features or
    /// [`Activation::Ids`] token ids (a clone of the handle, not of the data).
    pub fn input(&self) -> Activation {
        self.x.clone().into()
    }

    /// The context of a training forward over this batch ([`ForwardCtx::training`]): its task
    /// when every row belongs to one task, `None` for a batch that mixes tasks (replayed rows
    /// joined it), so that a task-routed block never sends an old task's row to the current
    /// task's branch. (Defined here, with the context, so that the data layer needs nothing
    /// of the model layer.)
    pub fn forward_ctx(&self) -> ForwardCtx {
        let first = self.refs.first().map(|r| r.task);
        let one = first.filter(|&t| self.refs.iter().all(|r| r.task == t));
        ForwardCtx::training(one.map(|t| t as usize))
    }
}
