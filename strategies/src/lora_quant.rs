//! QLoRA's frozen base for `lora` (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of
//! Quantized LLMs", §3): with `quantize = "int8"` or `"int4"` the frozen projection weights are
//! quantized by Burn itself (`Module::apply_qlora`, burn-core `module/lora.rs`) and the adapters
//! train in `f32` over `dequantize(W₀) + (α/r)·A·B`.
//!
//! What Burn gives is not QLoRA's NF4 with double quantization: symmetric absmax integers
//! (`Q8S`: −127…127, `Q4S`: −7…7) with one `f32` scale per block of `block` values along a
//! weight's output dimension (`W ≈ s_b · q`, `s_b = max_{block}|w| / qmax`), where QLoRA uses
//! NF4 over blocks of 64 and quantizes the scales again. What is quantized is every linear
//! layer the blocks route through `ForwardCtx::linear` (the attention's and the feed-forward's
//! projections), but those that stay trainable (the `head` blocks, `train`); embeddings, norms
//! and a Llama's output head stay in `f32`, as QLoRA keeps them.

use engram_core::burn::module::{
    Module, ModuleVisitor, Param, ParamGroup, ParamId, QLora, Quantizer,
};
use engram_core::burn::tensor::quantization::{Calibration, QuantScheme, QuantValue, ScaleDtype};
use engram_core::burn::tensor::{DType, Tensor};
use engram_core::model::adapter::LinearLayer;
use engram_core::model::{Model, ParamInfo};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// `lora`'s `quantize` key: how the frozen base weights are held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantize {
    /// In their own dtype (`f32`): LoRA.
    #[default]
    None,
    /// 8-bit symmetric integers, one scale a block: QLoRA's base at 8 bits.
    Int8,
    /// 4-bit symmetric integers (−7…7), one scale a block: QLoRA's base at 4 bits.
    Int4,
}

impl Quantize {
    /// Burn's value type for it; `None` for [`Quantize::None`].
    fn value(self) -> Option<QuantValue> {
        match self {
            Quantize::None => None,
            Quantize::Int8 => Some(QuantValue::Q8S),
            Quantize::Int4 => Some(QuantValue::Q4S),
        }
    }

    /// The scheme for `device`: its own quantization settings with this value type and a
    /// per-block `f32` scale over `block` values of a weight's last (output) dimension, or one
    /// per-tensor scale when `block` is 0; `None` for [`Quantize::None`].
    pub fn scheme(
        self,
        block: usize,
        device: &engram_core::burn::tensor::Device,
    ) -> Option<QuantScheme> {
        let scheme = device
            .settings()
            .quantization
            .scheme
            .with_value(self.value()?);
        Some(match u8::try_from(block) {
            Ok(0) | Err(_) => scheme,
            Ok(b) => scheme.per_block([b], ScaleDtype::F32),
        })
    }
}

/// The ids of `model`'s parameters held quantized, and their parameters (count).
pub fn held_quantized(model: &Model) -> (HashSet<ParamId>, u64) {
    struct V(HashSet<ParamId>, u64);
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if matches!(param.val().dtype(), DType::QFloat(_)) && self.0.insert(param.id) {
                self.1 += param.lazy_shape().num_elements() as u64;
            }
        }
    }
    let mut v = V(HashSet::new(), 0);
    model.visit(&mut v);
    (v.0, v.1)
}

/// The weights QLoRA quantizes: those of `linears` (the layers routed through
/// `ForwardCtx::linear`) that stay frozen, `keep` (the head's and `train`'s parameters) left
/// out, and those `model` holds quantized already (after `merge = "task"`, the weights that had
/// no adapter stay packed; the merged ones are dense again and are quantized anew).
pub fn quantized<'a>(
    model: &Model,
    params: &'a [ParamInfo],
    linears: &[LinearLayer],
    keep: &[ParamId],
) -> Vec<&'a ParamInfo> {
    let (packed, _) = held_quantized(model);
    params
        .iter()
        .filter(|i| i.shape.len() == 2 && !keep.contains(&i.id) && !packed.contains(&i.id))
        .filter(|i| {
            linears
                .iter()
                .any(|l| i.path == format!("{}.weight", l.path))
        })
        .collect()
}

/// The first of `weights` whose output dimension is not a whole number of `block`-value blocks
/// (Burn's block quantization refuses it), with the largest block up to 255 that fits them all.
pub fn misfit<'a>(weights: &[&'a ParamInfo], block: usize) -> Option<(&'a ParamInfo, usize)> {
    if block == 0 {
        return None;
    }
    let bad = weights.iter().find(|i| i.shape[1] % block != 0)?;
    let fits = (1..=255usize)
        .rev()
        .find(|b| weights.iter().all(|i| i.shape[1] % b == 0))
        .unwrap_or(1);
    Some((bad, fits))
}

/// Burn's QLoRA reparameterizer: `lora` over the weights `ids`, quantized with `scheme`.
pub fn qlora(
    lora: engram_core::burn::module::Lora,
    scheme: QuantScheme,
    ids: Vec<ParamId>,
) -> QLora {
    let mut q = Quantizer::new(Calibration::MinMax, scheme);
    q.set_param_group(ParamGroup::from_ids(ids));
    QLora::new(lora, q)
}
