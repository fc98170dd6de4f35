//! (engram patch.) The softmax over the last dimension for training, as one
//! pass a block of rows each way.
//!
//! Under autodiff Burn composes the softmax from five operations
//! (`ActivationOps::softmax`'s default: a detached `max_dim`, a broadcast
//! subtraction, `exp`, `sum_dim` and a broadcast division), and its backward
//! from their backward steps: the division's two gradients (`g · (1/s)`, and
//! `g · (−e / (s·s))` summed over the row), the sum's (`1 · gs`, summed
//! again over a row of one), their addition at `e`, and `exp`'s
//! (`(…) · exp(x − m)`). Each is a pass over the whole
//! `[batch, heads, tokens, tokens]` tensor: about a tenth of a MiniLM
//! training step on one thread.
//!
//! [`forward`] and [`backward`] compute the same IEEE f32 operations on each
//! element in the same order, a block of rows at a time while it is in
//! cache, with the kernels those operations run on (`kernels::sum_rows_f32`
//! for both row sums and for the sum over a row of one, the same `exp`), so
//! the output and the gradient are the composition's bits; the caller
//! builds the autodiff node. The row maximum is `kernels::max_f32` (NaN if
//! the row has one), where `max_dim` scans rows under 512 elements one by
//! one: the two differ at most in the sign of a zero maximum, which
//! `x − m` cannot show (`x − (±0) = x` for `x ≠ 0`, and `exp(±0) = 1`).
//! Outputs are written into buffers that are not zeroed first. The
//! backward keeps `e` and `s`; the composition kept `x − m` as well.

use alloc::vec;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use burn_backend::DType;
use burn_std::{Bytes, Shape};

use super::expf::widest;
use crate::simd::kernels;
use crate::{FlexTensor, Layout};

/// Rows a block: 32 rows of 128 are 16 KiB a buffer, which stay in cache
/// through the block's passes.
const BLOCK: usize = 32;

/// The forward's output and what its backward needs.
#[derive(Clone, Debug)]
pub struct Forward {
    /// `softmax(x)`, `x`'s shape.
    pub output: FlexTensor,
    /// `e = exp(x − max(x))`, `x`'s shape.
    pub exp: FlexTensor,
    /// `s = Σ e` over the last dimension, `x`'s shape with the last
    /// dimension 1.
    pub sum: FlexTensor,
}

/// The softmax of an f32 `x` over its last dimension, with the `e` and `s`
/// [`backward`] takes: bit for bit the output of
/// `ActivationOps::softmax`'s default on Flex.
///
/// # Panics
/// If `x` is not f32, has no dimensions or its last dimension is empty (as
/// `max_dim` panics there).
pub fn forward(x: &FlexTensor) -> Forward {
    assert_eq!(x.dtype(), DType::F32, "softmax_train: f32 only");
    let x = x.to_contiguous();
    let shape = x.layout().shape().clone();
    let dims = shape.num_dims();
    assert!(dims > 0 && shape[dims - 1] > 0, "softmax_train: empty rows");
    let n = shape[dims - 1];
    let total = shape.num_elements();
    let rows = total / n;
    let xs = &x.storage::<f32>()[x.layout().start_offset()..][..total];
    let (mut e, mut y, mut s) = (
        Vec::<f32>::with_capacity(total),
        Vec::<f32>::with_capacity(total),
        vec![0f32; rows],
    );
    forward_blocks(
        xs,
        &mut e.spare_capacity_mut()[..total],
        &mut y.spare_capacity_mut()[..total],
        &mut s,
        n,
    );
    // SAFETY: the blocks wrote every element of both.
    unsafe {
        e.set_len(total);
        y.set_len(total);
    }
    finish(y, e, s, &shape)
}

/// [`forward_block`] over every block of 32 rows, across rayon's pool when
/// the tensor is large enough (`crate::par`): each row is computed by the
/// same code whichever thread takes it.
fn forward_blocks(xs: &[f32], e: &mut [Uninit], y: &mut [Uninit], s: &mut [f32], n: usize) {
    let rows_n = BLOCK * n;
    let block = |((x, e), (y, s)): ((&[f32], &mut [Uninit]), (&mut [Uninit], &mut [f32]))| {
        forward_block(x, e, y, s, n)
    };
    #[cfg(feature = "rayon")]
    if crate::par::worth_splitting(xs.len()) {
        use rayon::prelude::*;
        xs.par_chunks(rows_n)
            .zip(e.par_chunks_mut(rows_n))
            .zip(y.par_chunks_mut(rows_n).zip(s.par_chunks_mut(BLOCK)))
            .for_each(block);
        return;
    }
    xs.chunks(rows_n)
        .zip(e.chunks_mut(rows_n))
        .zip(y.chunks_mut(rows_n).zip(s.chunks_mut(BLOCK)))
        .for_each(block);
}

/// An f32 of an output buffer not yet written.
type Uninit = MaybeUninit<f32>;

/// `elements` as initialised f32.
///
/// # Safety
/// Every element has been written.
unsafe fn assume_init(elements: &mut [Uninit]) -> &mut [f32] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; the caller wrote every element.
    unsafe { &mut *(elements as *mut [Uninit] as *mut [f32]) }
}

fn finish(y: Vec<f32>, e: Vec<f32>, s: Vec<f32>, shape: &Shape) -> Forward {
    let mut sum_shape = shape.clone();
    let last = sum_shape.num_dims() - 1;
    sum_shape[last] = 1;
    Forward {
        output: f32_tensor(y, shape.clone()),
        exp: f32_tensor(e, shape.clone()),
        sum: f32_tensor(s, sum_shape),
    }
}

fn f32_tensor(v: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::new(Bytes::from_elems(v), Layout::contiguous(shape), DType::F32)
}

widest!(forward_block(x: &[f32], e: &mut [Uninit], y: &mut [Uninit], s: &mut [f32], n: usize) = forward_body);
widest!(backward_block(g: &[f32], e: &[f32], s: &[f32], out: &mut [Uninit], n: usize) = backward_body);

/// One block of rows: `e = exp(x − m)`, `s = Σ e`, `y = e / s`.
#[inline(always)]
fn forward_body(x: &[f32], e: &mut [Uninit], y: &mut [Uninit], s: &mut [f32], n: usize) {
    for (xr, er) in x.chunks_exact(n).zip(e.chunks_exact_mut(n)) {
        let m = kernels::max_f32(xr);
        for (o, &v) in er.iter_mut().zip(xr) {
            o.write(v - m);
        }
    }
    // SAFETY: the loop above wrote every element.
    let e = unsafe { assume_init(e) };
    exp_in_place(e);
    kernels::sum_rows_f32(e, s, s.len(), n);
    for ((yr, er), &t) in y.chunks_exact_mut(n).zip(e.chunks_exact(n)).zip(s.iter()) {
        for (o, &v) in yr.iter_mut().zip(er) {
            o.write(v / t);
        }
    }
}

/// `float_exp`'s f32 values, in place.
fn exp_in_place(xs: &mut [f32]) {
    if super::expf::vector_ok() {
        super::expf::in_place(xs);
    } else {
        for v in xs {
            *v = v.exp();
        }
    }
}

/// The gradient of [`forward`]'s output with respect to its input, given the
/// output's gradient `grad` and the forward's `exp` and `sum`: bit for bit
/// what Burn's autodiff computes through the composed softmax (module docs).
///
/// # Panics
/// If the tensors are not f32 or their shapes disagree.
pub fn backward(grad: &FlexTensor, exp: &FlexTensor, sum: &FlexTensor) -> FlexTensor {
    assert!(
        grad.dtype() == DType::F32 && exp.dtype() == DType::F32 && sum.dtype() == DType::F32,
        "softmax_train: f32 only"
    );
    let shape = exp.layout().shape().clone();
    assert_eq!(grad.layout().shape(), &shape, "softmax_train: gradient shape");
    let n = shape[shape.num_dims() - 1];
    let total = shape.num_elements();
    let rows = total / n;
    assert_eq!(sum.layout().num_elements(), rows, "softmax_train: sum shape");
    let (g, e, s) = (grad.to_contiguous(), exp.to_contiguous(), sum.to_contiguous());
    let gs = &g.storage::<f32>()[g.layout().start_offset()..][..total];
    let es = &e.storage::<f32>()[e.layout().start_offset()..][..total];
    let ss = &s.storage::<f32>()[s.layout().start_offset()..][..rows];
    let mut out = Vec::<f32>::with_capacity(total);
    backward_blocks(gs, es, ss, &mut out.spare_capacity_mut()[..total], n);
    // SAFETY: the blocks wrote every element.
    unsafe { out.set_len(total) };
    f32_tensor(out, shape)
}

/// [`backward_block`] over every block of 32 rows, split as [`forward_blocks`].
fn backward_blocks(g: &[f32], e: &[f32], s: &[f32], out: &mut [Uninit], n: usize) {
    let rows_n = BLOCK * n;
    let block = |((o, g), (e, s)): ((&mut [Uninit], &[f32]), (&[f32], &[f32]))| {
        backward_block(g, e, s, o, n)
    };
    #[cfg(feature = "rayon")]
    if crate::par::worth_splitting(g.len()) {
        use rayon::prelude::*;
        out.par_chunks_mut(rows_n)
            .zip(g.par_chunks(rows_n))
            .zip(e.par_chunks(rows_n).zip(s.par_chunks(BLOCK)))
            .for_each(block);
        return;
    }
    out.chunks_mut(rows_n)
        .zip(g.chunks(rows_n))
        .zip(e.chunks(rows_n).zip(s.chunks(BLOCK)))
        .for_each(block);
}

/// One block of rows of the backward, in the composition's operations:
/// the division's rhs gradient `g · ((−e) / (s·s))` summed over the row
/// (`broadcast_shape`'s `sum_dim`), the sum's backward (`1 · Σ` over a row of
/// one), the division's lhs gradient `g · (1/s)` added to it at `e`, and
/// `exp`'s backward, the product with `e`. `out` holds the rhs terms before
/// it holds the result.
#[inline(always)]
fn backward_body(g: &[f32], e: &[f32], s: &[f32], out: &mut [Uninit], n: usize) {
    let rows = s.len();
    for (((o, gr), er), &t) in out
        .chunks_exact_mut(n)
        .zip(g.chunks_exact(n))
        .zip(e.chunks_exact(n))
        .zip(s)
    {
        let t2 = t * t;
        for ((o, &gv), &ev) in o.iter_mut().zip(gr).zip(er) {
            o.write(gv * (-ev / t2));
        }
    }
    // SAFETY: the loop above wrote every element.
    let out = unsafe { assume_init(out) };
    let (mut gsum, mut gsum1) = ([0f32; BLOCK], [0f32; BLOCK]);
    kernels::sum_rows_f32(out, &mut gsum[..rows], rows, n);
    kernels::sum_rows_f32(&gsum[..rows], &mut gsum1[..rows], rows, 1);
    for ((((o, gr), er), &t), &b) in out
        .chunks_exact_mut(n)
        .zip(g.chunks_exact(n))
        .zip(e.chunks_exact(n))
        .zip(s)
        .zip(&gsum1[..rows])
    {
        // The sum's backward multiplies `b` by a tensor of ones: `b` itself.
        let r = 1.0 / t;
        for ((o, &gv), &ev) in o.iter_mut().zip(gr).zip(er) {
            *o = (b + gv * r) * ev;
        }
    }
}
