//! (engram patch.) Batch normalization in one pass a channel, for f32.
//!
//! `ModuleOps`' defaults compose batch normalization out of tensor operations: each statistic
//! swaps the batch and channel dimensions and reshapes to `[channels, N·spatial]`, which copies
//! the whole tensor, and the elementwise steps allocate an output each (about ten full-size
//! tensors for a training step's forward and backward). These kernels gather one channel at a
//! time into a scratch row, sum it with the very kernel `sum_dim` uses on the reshaped rows
//! (`sum_rows_f32`, the same `sum_body` over the same `N·spatial` values in the same order) and
//! apply the defaults' elementwise formulas operation for operation, so every output is bit for
//! bit the composed one; only the copies and the intermediate tensors are gone.
//!
//! Layout: `x` is `[batch, channels, ...]` (any rank ≥ 2), the per-channel tensors `[channels]`.
//! Other dtypes keep the composed path (`composed_*` below, the defaults' bodies as published).

use alloc::vec;
use alloc::vec::Vec;
use core::mem::MaybeUninit;

use burn_backend::{
    DType, Scalar, TensorMetadata,
    ops::{BatchNormTrain, BatchNormTrainBackward, FloatTensorOps},
    tensor::FloatTensor,
};
use burn_std::{Bytes, Shape};

#[cfg(feature = "simd")]
use crate::simd::kernels;
use crate::{Flex, FlexTensor, Layout};

#[cfg(feature = "rayon")]
use rayon::prelude::*;

/// `t` made contiguous (an `Arc` clone when it already is) and its storage's `start..end`.
fn values(t: &FlexTensor) -> (FlexTensor, usize, usize) {
    let t = t.to_contiguous();
    let (start, end) = t.layout().contiguous_offsets().expect("contiguous");
    (t, start, end)
}

/// The `[channels]` values of a per-channel tensor.
fn channel_values(t: &FlexTensor) -> Vec<f32> {
    let (t, a, b) = values(t);
    t.storage::<f32>()[a..b].to_vec()
}

/// The sum `sum_dim` computes for one contiguous row (`reduce_last_dim_f32`).
fn row_sum(row: &[f32]) -> f32 {
    #[cfg(feature = "simd")]
    {
        let mut out = [0.0f32];
        kernels::sum_rows_f32(row, &mut out, 1, row.len());
        out[0]
    }
    #[cfg(not(feature = "simd"))]
    {
        row.iter().copied().sum()
    }
}

/// `[batch, channels, spatial]` of an `[batch, channels, ...]` shape.
fn dims(shape: &Shape) -> (usize, usize, usize) {
    let n = shape[0];
    let c = shape[1];
    let s = shape.num_elements() / (n * c).max(1);
    (n, c, s)
}

/// Runs `f(channel)` for every channel, in parallel for large tensors, and collects the results.
fn per_channel<T: Send>(channels: usize, elements: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    #[cfg(feature = "rayon")]
    if crate::par::worth_splitting(elements) {
        return (0..channels).into_par_iter().map(&f).collect();
    }
    let _ = elements;
    (0..channels).map(f).collect()
}

/// Fills `out` (`[batch, channels·spatial]`) sample by sample with `f(sample_in, sample_out)`.
fn per_sample<T: Send>(out: &mut [T], sample: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    #[cfg(feature = "rayon")]
    if crate::par::worth_splitting(out.len()) {
        out.par_chunks_mut(sample)
            .enumerate()
            .for_each(|(i, o)| f(i, o));
        return;
    }
    for (i, o) in out.chunks_mut(sample).enumerate() {
        f(i, o);
    }
}

/// A new `[batch, channels·spatial]` buffer of `len` values, filled sample by sample with
/// `f(sample_index, sample_out)` as [`per_sample`] does, and not zeroed first: the zeros were a
/// memset of the whole output on the calling thread that every element's write then replaced
/// (about 1 % of the recipe CNN's step each for the forward and the backward output).
///
/// # Safety
/// `f` must write every element of the chunk it is given.
unsafe fn new_per_sample(
    len: usize,
    sample: usize,
    f: impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync,
) -> Vec<f32> {
    let mut out = Vec::<f32>::with_capacity(len);
    per_sample(&mut out.spare_capacity_mut()[..len], sample, f);
    // SAFETY: `f` wrote every element of every chunk (the caller's contract), and the chunks
    // cover all `len` slots.
    unsafe { out.set_len(len) };
    out
}

/// Copies channel `ch` of every sample into `row` (`[batch·spatial]`).
fn gather(data: &[f32], (n, c, s): (usize, usize, usize), ch: usize, row: &mut [f32]) {
    for b in 0..n {
        row[b * s..][..s].copy_from_slice(&data[(b * c + ch) * s..][..s]);
    }
}

fn f32_tensor(data: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(data),
        Layout::contiguous(shape),
        DType::F32,
    )
}

fn is_f32(tensors: &[&FlexTensor]) -> bool {
    tensors.iter().all(|t| t.dtype() == DType::F32)
        && tensors[0].shape().num_dims() >= 2
        && tensors[0].shape().num_elements() > 0
}

/// `ModuleOps::batch_norm`: `(x − mean) / sqrt(variance + ε) · γ + β`, per channel.
pub fn batch_norm(
    x: FlexTensor,
    gamma: FlexTensor,
    beta: FlexTensor,
    mean: FlexTensor,
    variance: FlexTensor,
    epsilon: f64,
) -> FlexTensor {
    if !is_f32(&[&x, &gamma, &beta, &mean, &variance]) {
        return composed_batch_norm(x, gamma, beta, mean, variance, epsilon);
    }
    let shape = x.shape();
    let (n, c, s) = dims(&shape);
    let eps = epsilon as f32;
    let (gamma, beta, mean, variance) = (
        channel_values(&gamma),
        channel_values(&beta),
        channel_values(&mean),
        channel_values(&variance),
    );
    let mut x = x;
    if x.is_unique() && x.layout().is_contiguous() && x.layout().start_offset() == 0 {
        // Inference holds no other reference to its input: normalize it where it lies, as the
        // defaults' in-place elementwise ops do, so the peak holds one activation, not two.
        let std = std_of(&variance, eps);
        per_sample(&mut x.storage_mut::<f32>()[..n * c * s], c * s, |_, v| {
            normalize_in_place(v, s, &mean, &std, &gamma, &beta)
        });
        return x;
    }
    let (x, a, b) = values(&x);
    let out = normalized(
        &x.storage::<f32>()[a..b],
        (n, c, s),
        &mean,
        &variance,
        &gamma,
        &beta,
        eps,
    );
    f32_tensor(out, shape)
}

/// `√(var + ε)` a channel (the defaults' `sqrt(add_scalar(variance, ε))`).
fn std_of(variance: &[f32], eps: f32) -> Vec<f32> {
    variance.iter().map(|&v| (v + eps).sqrt()).collect()
}

/// [`normalize`] of one sample's `[channels·spatial]` in place.
fn normalize_in_place(
    x: &mut [f32],
    s: usize,
    mean: &[f32],
    std: &[f32],
    gamma: &[f32],
    beta: &[f32],
) {
    for (ch, xs) in x.chunks_mut(s).enumerate() {
        let (m, d, g, b) = (mean[ch], std[ch], gamma[ch], beta[ch]);
        for v in xs {
            *v = affine(*v, m, d, g, b);
        }
    }
}

/// `[batch, channels·spatial]` output of `normalize` over every sample, with `std = √(var + ε)`
/// (the defaults' `sqrt(add_scalar(variance, ε))`).
fn normalized(
    data: &[f32],
    (n, c, s): (usize, usize, usize),
    mean: &[f32],
    variance: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Vec<f32> {
    let std = std_of(variance, eps);
    // SAFETY: `normalize` writes each of the sample's `c·s` outputs (its channels' chunks of
    // `s` cover the sample).
    unsafe {
        new_per_sample(n * c * s, c * s, |i, o| {
            normalize(&data[i * c * s..][..c * s], o, s, mean, &std, gamma, beta)
        })
    }
}

/// One sample's `[channels·spatial]`: `((x − mean) / std) · γ + β`, the defaults' four ops.
fn normalize(
    x: &[f32],
    out: &mut [MaybeUninit<f32>],
    s: usize,
    mean: &[f32],
    std: &[f32],
    gamma: &[f32],
    beta: &[f32],
) {
    for (ch, (xs, os)) in x.chunks(s).zip(out.chunks_mut(s)).enumerate() {
        let (m, d, g, b) = (mean[ch], std[ch], gamma[ch], beta[ch]);
        for (o, &v) in os.iter_mut().zip(xs) {
            o.write(affine(v, m, d, g, b));
        }
    }
}

/// `((v − mean) / std) · γ + β`: the defaults' sub, div, mul and add, in their order (the one
/// place the formula is written, for [`normalize`] and [`normalize_in_place`]).
#[inline(always)]
fn affine(v: f32, mean: f32, std: f32, gamma: f32, beta: f32) -> f32 {
    ((v - mean) / std) * gamma + beta
}

/// `ModuleOps::batch_norm_train`: the batch's mean and biased variance a channel, and the
/// normalized output.
pub fn batch_norm_train(
    x: FlexTensor,
    gamma: FlexTensor,
    beta: FlexTensor,
    epsilon: f64,
) -> BatchNormTrain<Flex> {
    if !is_f32(&[&x, &gamma, &beta]) {
        return composed_batch_norm_train(x, gamma, beta, epsilon);
    }
    let shape = x.shape();
    let (n, c, s) = dims(&shape);
    let count = (n * s) as f32;
    let (xt, a, b) = values(&x);
    let data = &xt.storage::<f32>()[a..b];
    // mean = Σx / M; variance = Σ(x − mean)² / M, each sum over the channel's row.
    let stats = per_channel(c, data.len(), |ch| {
        let mut row = vec![0.0f32; n * s];
        gather(data, (n, c, s), ch, &mut row);
        let mean = row_sum(&row) / count;
        for v in row.iter_mut() {
            let d = *v - mean;
            *v = d * d;
        }
        (mean, row_sum(&row) / count)
    });
    let mean: Vec<f32> = stats.iter().map(|s| s.0).collect();
    let variance: Vec<f32> = stats.iter().map(|s| s.1).collect();
    let out = normalized(
        data,
        (n, c, s),
        &mean,
        &variance,
        &channel_values(&gamma),
        &channel_values(&beta),
        epsilon as f32,
    );
    BatchNormTrain::new(
        f32_tensor(out, shape),
        f32_tensor(mean, Shape::new([c])),
        f32_tensor(variance, Shape::new([c])),
    )
}

/// `ModuleOps::batch_norm_train_backward`: with `x̂ = (x − mean) · (1 / sqrt(var + ε))`,
/// `∂β = Σ g`, `∂γ = Σ g·x̂` and `∂x = γ/std · ((g − ∂β/M) − x̂ · ∂γ/M)` (Ioffe & Szegedy 2015,
/// §3), in the defaults' order of operations.
pub fn batch_norm_train_backward(
    x: FlexTensor,
    gamma: FlexTensor,
    mean: FlexTensor,
    variance: FlexTensor,
    epsilon: f64,
    output_grad: FlexTensor,
) -> BatchNormTrainBackward<Flex> {
    if !is_f32(&[&x, &gamma, &mean, &variance, &output_grad]) {
        return composed_batch_norm_train_backward(x, gamma, mean, variance, epsilon, output_grad);
    }
    let shape = x.shape();
    let (n, c, s) = dims(&shape);
    let count = (n * s) as f32;
    let eps = epsilon as f32;
    let (gamma, mean, variance) = (
        channel_values(&gamma),
        channel_values(&mean),
        channel_values(&variance),
    );
    let inv_std: Vec<f32> = variance.iter().map(|&v| 1.0 / (v + eps).sqrt()).collect();
    let (xt, a, b) = values(&x);
    let xs = &xt.storage::<f32>()[a..b];
    let (gt, a, b) = values(&output_grad);
    let gs = &gt.storage::<f32>()[a..b];
    let sums = per_channel(c, xs.len(), |ch| {
        let mut row = vec![0.0f32; n * s];
        gather(gs, (n, c, s), ch, &mut row);
        let beta_grad = row_sum(&row);
        let (m, r) = (mean[ch], inv_std[ch]);
        gather(xs, (n, c, s), ch, &mut row);
        let mut k = 0;
        for b in 0..n {
            let g = &gs[(b * c + ch) * s..][..s];
            for &gv in g {
                row[k] = gv * ((row[k] - m) * r);
                k += 1;
            }
        }
        (beta_grad, row_sum(&row))
    });
    let beta_grad: Vec<f32> = sums.iter().map(|s| s.0).collect();
    let gamma_grad: Vec<f32> = sums.iter().map(|s| s.1).collect();
    let mean_grad: Vec<f32> = beta_grad.iter().map(|&v| v / count).collect();
    let mean_normalized_grad: Vec<f32> = gamma_grad.iter().map(|&v| v / count).collect();
    let scale: Vec<f32> = gamma.iter().zip(&inv_std).map(|(&g, &r)| g * r).collect();
    // SAFETY: the loop below writes each channel's `s` outputs of the sample, every one of its
    // `c·s`.
    let x_grad = unsafe {
        new_per_sample(n * c * s, c * s, |i, o| {
            let x = &xs[i * c * s..][..c * s];
            let g = &gs[i * c * s..][..c * s];
            for ch in 0..c {
                let (m, r) = (mean[ch], inv_std[ch]);
                let (mg, mn, sc) = (mean_grad[ch], mean_normalized_grad[ch], scale[ch]);
                let range = ch * s..(ch + 1) * s;
                for ((o, &v), &gv) in o[range.clone()]
                    .iter_mut()
                    .zip(&x[range.clone()])
                    .zip(&g[range])
                {
                    let normalized = (v - m) * r;
                    o.write(sc * ((gv - mg) - normalized * mn));
                }
            }
        })
    };
    BatchNormTrainBackward::new(
        f32_tensor(x_grad, shape),
        f32_tensor(gamma_grad, Shape::new([c])),
        f32_tensor(beta_grad, Shape::new([c])),
    )
}

// The published defaults of `burn_backend::ops::ModuleOps` (burn-backend 0.22.1,
// `backend/ops/modules/base.rs`), for the dtypes the kernels above leave alone.

type B = Flex;

fn composed_batch_norm(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    mean: FloatTensor<B>,
    variance: FloatTensor<B>,
    epsilon: f64,
) -> FloatTensor<B> {
    let rank = x.shape().num_dims();
    let channels = x.shape()[1];
    let mut dimensions = alloc::vec![1; rank];
    dimensions[1] = channels;
    let shape = Shape::from(dimensions);
    let gamma = B::float_reshape(gamma, shape.clone());
    let beta = B::float_reshape(beta, shape.clone());
    let mean = B::float_reshape(mean, shape.clone());
    let variance = B::float_reshape(variance, shape);
    let std = B::float_sqrt(B::float_add_scalar(variance, Scalar::Float(epsilon)));
    let normalized = B::float_div(B::float_sub(x, mean), std);
    B::float_add(B::float_mul(normalized, gamma), beta)
}

fn composed_batch_norm_train(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> BatchNormTrain<B> {
    let shape = x.shape();
    let channels = shape[1];
    let samples_per_channel = shape.num_elements() / channels;
    let flattened = Shape::new([channels, samples_per_channel]);
    let mut per_channel = alloc::vec![1; shape.num_dims()];
    per_channel[1] = channels;

    let mean = B::float_mean_dim(
        B::float_reshape(B::float_swap_dims(x.clone(), 0, 1), flattened.clone()),
        1,
    );
    let mean = B::float_reshape(mean, Shape::from(per_channel));
    let centered = B::float_sub(x.clone(), mean.clone());
    let variance = B::float_mean_dim(
        B::float_reshape(
            B::float_swap_dims(B::float_mul(centered.clone(), centered), 0, 1),
            flattened,
        ),
        1,
    );
    let mean = B::float_reshape(mean, Shape::new([channels]));
    let variance = B::float_reshape(variance, Shape::new([channels]));
    let output = composed_batch_norm(x, gamma, beta, mean.clone(), variance.clone(), epsilon);

    BatchNormTrain::new(output, mean, variance)
}

fn composed_batch_norm_train_backward(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    variance: FloatTensor<B>,
    epsilon: f64,
    output_grad: FloatTensor<B>,
) -> BatchNormTrainBackward<B> {
    let shape = x.shape();
    let rank = shape.num_dims();
    let channels = shape[1];
    let flattened = Shape::new([channels, shape.num_elements() / channels]);
    let mut per_channel = alloc::vec![1; rank];
    per_channel[1] = channels;
    let per_channel = Shape::from(per_channel);

    let inv_std = B::float_reshape(
        B::float_recip(B::float_sqrt(B::float_add_scalar(
            variance,
            Scalar::Float(epsilon),
        ))),
        per_channel.clone(),
    );
    let normalized = B::float_mul(
        B::float_sub(x, B::float_reshape(mean, per_channel.clone())),
        inv_std.clone(),
    );

    let output_grad_flat = B::float_reshape(
        B::float_swap_dims(output_grad.clone(), 0, 1),
        flattened.clone(),
    );
    let normalized_grad_flat = B::float_reshape(
        B::float_swap_dims(B::float_mul(output_grad.clone(), normalized.clone()), 0, 1),
        flattened,
    );
    let beta_grad = B::float_sum_dim(output_grad_flat.clone(), 1);
    let gamma_grad = B::float_sum_dim(normalized_grad_flat.clone(), 1);

    let mean_grad = B::float_reshape(B::float_mean_dim(output_grad_flat, 1), per_channel.clone());
    let mean_normalized_grad = B::float_reshape(
        B::float_mean_dim(normalized_grad_flat, 1),
        per_channel.clone(),
    );
    let centred_grad = B::float_sub(output_grad, mean_grad);
    let projected = B::float_mul(normalized, mean_normalized_grad);
    let scale = B::float_mul(B::float_reshape(gamma, per_channel), inv_std);
    let x_grad = B::float_mul(scale, B::float_sub(centred_grad, projected));

    BatchNormTrainBackward::new(
        x_grad,
        B::float_reshape(gamma_grad, Shape::new([channels])),
        B::float_reshape(beta_grad, Shape::new([channels])),
    )
}
