//! (engram patch.) The weight gradient of a 2-d convolution, one GEMM a sample.
//!
//! `ModuleOps`' default computes `∂W` as a convolution of the input (batch and channel swapped)
//! with the output gradient as its kernel: for a 3 × 3 layer that is a GEMM with 9 output
//! positions over `K = N·H·W`, which fills 9 of a vector's 16 lanes and packs all of `K` again
//! for each input channel. Here, as oneDNN does it, each sample's input is unfolded once
//! (`col = [C_in/groups · kh · kw, P]`, `P = H_out · W_out`) and
//! `∂W[g] += ∂Y_n[g] · col_n[g]ᵀ` (`[C_out/groups, P] · [P, C_in/groups · kh · kw]`).
//! Samples are taken in chunks of 8, each chunk's partial sum on its own thread, and the
//! partial sums are added in chunk order: the result does not depend on the thread count. It
//! sums in another order than the default, so it is **not** bit for bit the published crate.

use alloc::vec;
use alloc::vec::Vec;

use burn_backend::{DType, TensorMetadata, ops::ConvOptions};
use burn_std::{Bytes, Shape, bf16, f16};
use bytemuck::Pod;

use crate::{FlexTensor, Layout};

/// Samples whose gradients one task sums before the partial sums are added.
const CHUNK: usize = 8;

/// `∂L/∂W` of `conv2d(x, weight, options)` given `∂L/∂y`: `x` `[N, C_in, H, W]`, `weight`
/// `[C_out, C_in/groups, kh, kw]`, `output_grad` `[N, C_out, H_out, W_out]`; returns the weight's
/// shape. Padding is read from its beginning; the output gradient's size gives the rest.
pub fn conv2d_weight_backward(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: ConvOptions<2>,
) -> FlexTensor {
    match x.dtype() {
        DType::F32 => grad::<f32>(x, weight, output_grad, &options, 0.0, 1.0),
        DType::F64 => grad::<f64>(x, weight, output_grad, &options, 0.0, 1.0),
        DType::F16 => grad::<f16>(
            x,
            weight,
            output_grad,
            &options,
            f16::from_f32(0.0),
            f16::from_f32(1.0),
        ),
        DType::BF16 => {
            let f = |t: FlexTensor| crate::ops::module::cast_to_f32(t, bf16::to_f32);
            let out = grad::<f32>(f(x), f(weight), f(output_grad), &options, 0.0, 1.0);
            crate::ops::module::cast_from_f32(out, bf16::from_f32)
        }
        other => panic!("conv2d_weight_backward: unsupported dtype {other:?}"),
    }
}

fn grad<T>(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: &ConvOptions<2>,
    zero: T,
    one: T,
) -> FlexTensor
where
    T: Pod + Copy + Send + Sync + 'static + core::ops::Add<Output = T> + burn_backend::Element,
{
    let x = x.to_contiguous();
    let g = output_grad.to_contiguous();
    let [n, c_in, h, w] = x.shape().dims::<4>();
    let [c_out, c_in_g, kh, kw] = weight.shape().dims::<4>();
    let [_, _, oh, ow] = g.shape().dims::<4>();
    let groups = options.groups;
    let c_out_g = c_out / groups;
    let [sh, sw] = options.stride;
    let [ph, pw] = options.padding_begin();
    let [dh, dw] = options.dilation;
    let (xs, x0) = (x.storage::<T>(), x.layout().start_offset());
    let (gs, g0) = (g.storage::<T>(), g.layout().start_offset());
    let p = oh * ow;
    let k_g = c_in_g * kh * kw;
    let len = c_out * k_g;
    if len == 0 || n == 0 || p == 0 {
        return out_tensor(vec![zero; len], weight.shape(), x.dtype());
    }
    let chunk_sum = |chunk: usize| -> Vec<T> {
        let mut dw_ = vec![zero; len];
        let mut col = vec![zero; c_in * kh * kw * p];
        for b in chunk * CHUNK..((chunk + 1) * CHUNK).min(n) {
            let xb = &xs[x0 + b * c_in * h * w..][..c_in * h * w];
            unfold(
                xb,
                &mut col,
                (c_in, h, w),
                (kh, kw),
                (oh, ow),
                (sh, sw),
                (ph, pw),
                (dh, dw),
                zero,
            );
            let gb = &gs[g0 + b * c_out * p..][..c_out * p];
            for gi in 0..groups {
                let lhs = &gb[gi * c_out_g * p..][..c_out_g * p];
                let rhs = &col[gi * k_g * p..][..k_g * p];
                let dst = &mut dw_[gi * c_out_g * k_g..][..c_out_g * k_g];
                // dst[c_out_g, k_g] (+)= lhs[c_out_g, p] · rhs[k_g, p]ᵀ
                // SAFETY: the slices hold exactly the extents and strides given.
                unsafe {
                    gemm::gemm(
                        c_out_g,
                        k_g,
                        p,
                        dst.as_mut_ptr(),
                        1,
                        k_g as isize,
                        b != chunk * CHUNK,
                        lhs.as_ptr(),
                        1,
                        p as isize,
                        rhs.as_ptr(),
                        p as isize,
                        1,
                        one,
                        one,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
        }
        dw_
    };
    let chunks = n.div_ceil(CHUNK);
    #[cfg(feature = "rayon")]
    let partials: Vec<Vec<T>> = {
        use rayon::prelude::*;
        (0..chunks).into_par_iter().map(chunk_sum).collect()
    };
    #[cfg(not(feature = "rayon"))]
    let partials: Vec<Vec<T>> = (0..chunks).map(chunk_sum).collect();
    let mut parts = partials.into_iter();
    let mut out = parts.next().expect("at least one chunk");
    for part in parts {
        for (o, v) in out.iter_mut().zip(part) {
            *o = *o + v;
        }
    }
    out_tensor(out, weight.shape(), x.dtype())
}

fn out_tensor<T: Pod + Send + Sync>(data: Vec<T>, shape: Shape, dtype: DType) -> FlexTensor {
    FlexTensor::new(Bytes::from_elems(data), Layout::contiguous(shape), dtype)
}

/// One sample's im2col: `col[(c·kh + ky)·kw + kx][oy·ow + ox] = x[c][oy·sh + ky·dh − ph][ox·sw + kx·dw − pw]`,
/// zero outside the input.
#[allow(clippy::too_many_arguments)]
fn unfold<T: Copy>(
    x: &[T],
    col: &mut [T],
    (c_in, h, w): (usize, usize, usize),
    (kh, kw): (usize, usize),
    (oh, ow): (usize, usize),
    (sh, sw): (usize, usize),
    (ph, pw): (usize, usize),
    (dh, dw): (usize, usize),
    zero: T,
) {
    let p = oh * ow;
    for c in 0..c_in {
        let plane = &x[c * h * w..][..h * w];
        for ky in 0..kh {
            for kx in 0..kw {
                let row = &mut col[((c * kh + ky) * kw + kx) * p..][..p];
                for oy in 0..oh {
                    let r = &mut row[oy * ow..][..ow];
                    let iy = (oy * sh + ky * dh) as isize - ph as isize;
                    if iy < 0 || iy >= h as isize {
                        r.fill(zero);
                        continue;
                    }
                    let src = &plane[iy as usize * w..][..w];
                    let off = (kx * dw) as isize - pw as isize;
                    if sw == 1 {
                        // The valid columns are one contiguous run of the input row.
                        let lo = (-off).clamp(0, ow as isize) as usize;
                        let hi = (w as isize - off).clamp(lo as isize, ow as isize) as usize;
                        r[..lo].fill(zero);
                        r[lo..hi].copy_from_slice(
                            &src[(lo as isize + off) as usize..(hi as isize + off) as usize],
                        );
                        r[hi..].fill(zero);
                    } else {
                        for (ox, o) in r.iter_mut().enumerate() {
                            let ix = (ox * sw) as isize + off;
                            *o = if ix < 0 || ix >= w as isize {
                                zero
                            } else {
                                src[ix as usize]
                            };
                        }
                    }
                }
            }
        }
    }
}
