//! The classifier head after a task: the memory's class means for the nearest-class-mean
//! evaluation (`classifier = "ncm"`) and weight aligning ([`align_head`]).

use super::Replay;
use super::memory::forward_rows;
use engram_core::Result;
use engram_core::burn::tensor::{Tensor, TensorData};
use engram_core::data::stream::SampleRef;
use engram_core::model::Model;
use engram_core::strategy::TaskContext;

impl Replay {
    /// Class means of the L2-normalised features (the output of every block but the head) of
    /// the memory's samples, on the inference copy of `cx.model`.
    pub(super) fn memory_class_means(
        &self,
        cx: &TaskContext<'_>,
    ) -> Result<crate::ncm::ClassMeans> {
        let refs: Vec<SampleRef> = self.buffers.iter().flatten().map(|s| s.r).collect();
        let labels: Vec<usize> = self
            .buffers
            .iter()
            .flatten()
            .map(|s| s.class as usize)
            .collect();
        let blocks = cx.model.num_blocks().saturating_sub(1);
        let (features, d) = forward_rows(cx, &refs, blocks)?;
        Ok(crate::ncm::class_means(
            &features,
            d,
            &labels,
            cx.stream.num_classes,
        ))
    }
}

/// Weight aligning (see [`ReplayParams::align_head`](super::ReplayParams::align_head)): the
/// last block's linear weight `[d, classes]` has its `new` class columns (and bias entries)
/// scaled by
/// `γ = mean_{c∈old} ‖w_c‖ / mean_{c∈new} ‖w_c‖`.
pub fn align_head(model: Model, old: &[usize], new: &[usize]) -> Model {
    let Some(last) = model.num_blocks().checked_sub(1) else {
        return model;
    };
    let prefix = format!("blocks.{last}.");
    let classes = model.num_classes;
    let weight = model
        .param_values()
        .into_iter()
        .find(|(i, _)| i.path.starts_with(&prefix) && i.shape.len() == 2 && i.shape[1] == classes);
    let Some((info, w)) = weight else {
        return model;
    };
    let w: Vec<f32> = w
        .inner()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap_or_default();
    let norm = |c: usize| -> f64 {
        (0..info.shape[0])
            .map(|r| f64::from(w[r * classes + c]).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let mean = |cs: &[usize]| cs.iter().map(|&c| norm(c)).sum::<f64>() / cs.len().max(1) as f64;
    let (m_old, m_new) = (mean(old), mean(new));
    if m_old <= 0.0 || m_new <= 0.0 {
        return model;
    }
    let gamma = (m_old / m_new) as f32;
    let mut scale = vec![1.0f32; classes];
    for &c in new {
        scale[c] = gamma;
    }
    model.update_params(&mut |i, value| {
        if !i.path.starts_with(&prefix) || i.shape.last() != Some(&classes) {
            return None;
        }
        let reps = i.numel() / classes;
        let s: Vec<f32> = (0..reps).flat_map(|_| scale.iter().copied()).collect();
        let s = Tensor::<1>::from_data(TensorData::new(s, [i.numel()]), &value.device());
        Some(value * s)
    })
}
