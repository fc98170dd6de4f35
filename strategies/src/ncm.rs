//! A nearest-class-mean head for replay (`classifier = "ncm"`; Rebuffi et al., *iCaRL*, CVPR
//! 2017, §2.1).
//!
//! The linear head of a class-incremental model is biased towards the classes of the last task
//! (they had the most recent, most numerous gradient steps). iCaRL classifies instead by the
//! nearest mean of the stored exemplars' features: `y* = argmin_c ‖φ(x) − μ_c‖` with `φ` the
//! L2-normalised output of the blocks before the head and `μ_c` the normalised mean of `φ` over
//! the replay memory's samples of class `c`. The means are recomputed after every task from the
//! memory.
//!
//! [`NcmHead`] wraps the model's head: training, distillation targets and Fisher passes go
//! through its linear layer as before; only the trainer's evaluation
//! ([`ForwardCtx::evaluation`]) uses the class means, returning `−‖φ(x) − μ_c‖²` as logits
//! `[batch, classes]` (`−10⁹` for a class without a mean).
//!
//! The heads it wraps ([`supports`]): the MLP's and CNN's [`HeadBlock`] (`φ` the flat input of
//! the head) and BERT's [`PoolHead`] (`φ` the pooled sentence vector
//! [`Activation::into_features`] gives, the head's own pooling and dropout kept). Other heads
//! (a ViT's, a Llama's language-model head, a plugin's) are refused by the replay strategy
//! before the first task, at its `classifier` key.

use engram_core::burn;
use engram_core::burn::module::Module;
use engram_core::burn::nn::{Dropout, Linear};
use engram_core::burn::tensor::{Tensor, TensorData};
use engram_core::model::bert::{PoolHead, Pooling};
use engram_core::model::mlp::HeadBlock;
use engram_core::model::{Activation, Block, DynBlock, ForwardCtx, Model};

/// Class means `[classes, features]`, row-major, with a flag per class.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassMeans {
    /// Feature width `d`.
    pub features: usize,
    /// `classes × d` values; a class without samples has zeros.
    pub means: Vec<f32>,
    /// Which classes have a mean.
    pub present: Vec<bool>,
}

/// The head with class means (see the module docs).
#[derive(Module, Debug)]
pub struct NcmHead {
    /// The linear head, weight `[d, classes]`, trained as usual.
    pub linear: Linear,
    /// The class means used in evaluation (not parameters; in the replay strategy's state).
    #[module(skip)]
    pub means: ClassMeans,
    /// A wrapped BERT [`PoolHead`]'s pooling of [`Activation::Tokens`] `[batch, tokens,
    /// hidden]` to `[batch, hidden]` (`None`: the input is flattened, as [`HeadBlock`] does).
    #[module(skip)]
    pub pooling: Option<Pooling>,
    /// A wrapped [`PoolHead`]'s dropout on the pooled vector, in training (`None`: none).
    #[module(skip)]
    pub dropout: Option<Dropout>,
}

impl NcmHead {
    /// The features `φ` `[batch, d]` the head classifies: `x` pooled by [`NcmHead::pooling`]
    /// (token hidden states), else flattened.
    fn features(&self, x: Activation) -> Tensor<2> {
        match self.pooling {
            Some(p) => x.into_features(p),
            None => x.into_flat(),
        }
    }
}

/// L2-normalises the rows of `x` `[n, d]`.
pub fn normalize_rows(x: Tensor<2>) -> Tensor<2> {
    let norm = (x.clone() * x.clone()).sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}

impl Block for NcmHead {
    fn forward(&self, x: Activation, ctx: &ForwardCtx) -> Activation {
        let x = self.features(x);
        if !ctx.evaluation || self.means.present.iter().all(|p| !p) {
            let x = match &self.dropout {
                Some(d) => d.forward(x),
                None => x,
            };
            return Activation::Flat(self.linear.forward(x));
        }
        let device = x.device();
        let classes = self.means.present.len();
        let d = self.means.features;
        let mu = Tensor::<2>::from_data(
            TensorData::new(self.means.means.clone(), [classes, d]),
            &device,
        );
        let f = normalize_rows(x);
        // −‖f − μ‖² = 2 f·μ − ‖f‖² − ‖μ‖²; ‖f‖ = 1 for every row, so it does not change the argmin.
        let mu_sq = (mu.clone() * mu.clone()).sum_dim(1).reshape([1, classes]);
        let missing: Vec<f32> = self
            .means
            .present
            .iter()
            .map(|&p| if p { 0.0 } else { -1e9 })
            .collect();
        let missing = Tensor::<2>::from_data(TensorData::new(missing, [1, classes]), &device);
        let logits = f.matmul(mu.transpose()).mul_scalar(2.0) - mu_sq + missing;
        Activation::Flat(logits)
    }

    fn kind(&self) -> &'static str {
        "ncm-head"
    }
}

/// Whether `model`'s last block is a head [`with_means`] can wrap: a [`HeadBlock`], a BERT
/// [`PoolHead`], or an [`NcmHead`] already.
pub fn supports(model: &Model) -> bool {
    model.blocks().last().is_some_and(|b| {
        b.downcast_ref::<HeadBlock>().is_some()
            || b.downcast_ref::<PoolHead>().is_some()
            || b.downcast_ref::<NcmHead>().is_some()
    })
}

/// How `model`'s head pools token hidden states into the features `φ` the class means are
/// taken over: a wrapped [`PoolHead`]'s pooling, else
/// [`engram_core::model::bert::pooling_of`] (a [`PoolHead`]'s, or mean pooling).
pub fn pooling_of(model: &Model) -> Pooling {
    model
        .blocks()
        .last()
        .and_then(|b| b.downcast_ref::<NcmHead>())
        .and_then(|h| h.pooling)
        .unwrap_or_else(|| engram_core::model::bert::pooling_of(model))
}

/// `model` with its last block (a [`HeadBlock`], a [`PoolHead`] or an [`NcmHead`]) carrying
/// `means`; the model unchanged when the last block is none of them (see [`supports`]).
pub fn with_means(mut model: Model, means: ClassMeans) -> Model {
    let Some(last) = model.num_blocks().checked_sub(1) else {
        return model;
    };
    let block = &model.blocks()[last];
    let (linear, pooling, dropout) = if let Some(h) = block.downcast_ref::<HeadBlock>() {
        (h.linear.clone(), None, None)
    } else if let Some(h) = block.downcast_ref::<PoolHead>() {
        (h.linear.clone(), Some(h.pooling), Some(h.dropout.clone()))
    } else if let Some(h) = block.downcast_ref::<NcmHead>() {
        (h.linear.clone(), h.pooling, h.dropout.clone())
    } else {
        return model;
    };
    model.replace_block(last, |_| {
        DynBlock::new(NcmHead {
            linear,
            means,
            pooling,
            dropout,
        })
    });
    model
}

/// Class means of the normalised features `[n, d]` (rows) with labels `labels` over `classes`.
pub fn class_means(features: &[f32], d: usize, labels: &[usize], classes: usize) -> ClassMeans {
    let mut sums = vec![0.0f64; classes * d];
    let mut counts = vec![0usize; classes];
    for (row, &c) in features.chunks(d).zip(labels) {
        let norm = row
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            .sqrt()
            .max(1e-12);
        for (k, v) in row.iter().enumerate() {
            sums[c * d + k] += f64::from(*v) / norm;
        }
        counts[c] += 1;
    }
    let mut means = vec![0.0f32; classes * d];
    for c in 0..classes {
        if counts[c] == 0 {
            continue;
        }
        let row = &sums[c * d..(c + 1) * d];
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
        for k in 0..d {
            means[c * d + k] = (row[k] / norm) as f32;
        }
    }
    ClassMeans {
        features: d,
        means,
        present: counts.iter().map(|&n| n > 0).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_means_are_normalised_means_of_normalised_rows() {
        // Two samples of class 1: (3, 4) → (0.6, 0.8) and (0, 2) → (0, 1); mean (0.3, 0.9),
        // normalised (0.316, 0.949). Class 0 has none.
        let m = class_means(&[3.0, 4.0, 0.0, 2.0], 2, &[1, 1], 2);
        assert_eq!(m.present, vec![false, true]);
        let n = (0.3f32 * 0.3 + 0.9 * 0.9).sqrt();
        assert!((m.means[2] - 0.3 / n).abs() < 1e-6 && (m.means[3] - 0.9 / n).abs() < 1e-6);
        assert_eq!(&m.means[..2], &[0.0, 0.0]);
    }

    #[test]
    fn evaluation_picks_the_nearest_mean_and_training_the_linear_head() {
        use engram_core::burn::tensor::Device;
        let d = Device::flex();
        let mut r = engram_core::rng::stream(0, "t", 0, 0);
        let linear = engram_core::model::mlp::init_linear(2, 3, &mut r, &d);
        let head = NcmHead {
            linear,
            means: class_means(&[1.0, 0.0, 0.0, 1.0], 2, &[0, 2], 3),
            pooling: None,
            dropout: None,
        };
        let x = Tensor::<2>::from_data(TensorData::new(vec![0.9f32, 0.1, 0.2, 5.0], [2, 2]), &d);
        let eval = ForwardCtx::evaluation(None);
        let pred: Vec<i64> = Block::forward(&head, Activation::Flat(x.clone()), &eval)
            .into_flat()
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .try_to_vec()
            .unwrap();
        assert_eq!(pred, vec![0, 2], "nearest means; class 1 has none");
        let train =
            Block::forward(&head, Activation::Flat(x.clone()), &ForwardCtx::default()).into_flat();
        let lin = head.linear.forward(x);
        assert!((train - lin).abs().max().into_scalar::<f32>() < 1e-7);
    }
}
