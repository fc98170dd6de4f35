//! (engram patch.) GELU's f32 forward and backward in vector registers, bit
//! for bit.
//!
//! The published crate computes GELU, `½·x·(1 + erf(x/√2))`, and its
//! derivative, `½(1 + erf(x/√2)) + x·e^(−x²/2)/√(2π)`, with a scalar call to
//! `libm::erff` an element (and, in the backward, to `f32::exp`): on MiniLM's
//! training step (six layers of `[16, 128, 1536]` activations) that was about a
//! tenth of the step. `erff` below is libm 0.2.16's `erff` (FreeBSD's
//! `s_erff.c`, with its `expf`, `e_expf.c`), operation for operation, with its
//! branches taken as selects: every region is computed and the one libm's
//! branch picks is kept. All its steps are IEEE f32 operations, comparisons,
//! bit operations and an `as i32` conversion, so LLVM vectorises the loops
//! below for the instruction set macerator dispatches to, and the results are
//! libm's bits on every instruction set, thread count and layout (the test
//! `vendor::gelu_is_libm_bit_for_bit` compares every 61st f32 bit pattern).
//! The backward's `f32::exp` is computed for a block of 256 into a buffer the
//! vector loop then reads: glibc's bits in vector registers where `expf.rs`
//! gives them, else the platform's scalar call.

use alloc::vec::Vec;
use burn_backend::DType;
use burn_std::Bytes;
use core::mem::MaybeUninit;

use crate::{FlexTensor, Layout};

// libm 0.2.16 `erff.rs`'s constants.
const ERX: f32 = 8.4506291151e-01;
const EFX8: f32 = 1.0270333290e+00;
const PP0: f32 = 1.2837916613e-01;
const PP1: f32 = -3.2504209876e-01;
const PP2: f32 = -2.8481749818e-02;
const PP3: f32 = -5.7702702470e-03;
const PP4: f32 = -2.3763017452e-05;
const QQ1: f32 = 3.9791721106e-01;
const QQ2: f32 = 6.5022252500e-02;
const QQ3: f32 = 5.0813062117e-03;
const QQ4: f32 = 1.3249473704e-04;
const QQ5: f32 = -3.9602282413e-06;
const PA0: f32 = -2.3621185683e-03;
const PA1: f32 = 4.1485610604e-01;
const PA2: f32 = -3.7220788002e-01;
const PA3: f32 = 3.1834661961e-01;
const PA4: f32 = -1.1089469492e-01;
const PA5: f32 = 3.5478305072e-02;
const PA6: f32 = -2.1663755178e-03;
const QA1: f32 = 1.0642088205e-01;
const QA2: f32 = 5.4039794207e-01;
const QA3: f32 = 7.1828655899e-02;
const QA4: f32 = 1.2617121637e-01;
const QA5: f32 = 1.3637083583e-02;
const QA6: f32 = 1.1984500103e-02;
const RA0: f32 = -9.8649440333e-03;
const RA1: f32 = -6.9385856390e-01;
const RA2: f32 = -1.0558626175e+01;
const RA3: f32 = -6.2375331879e+01;
const RA4: f32 = -1.6239666748e+02;
const RA5: f32 = -1.8460508728e+02;
const RA6: f32 = -8.1287437439e+01;
const RA7: f32 = -9.8143291473e+00;
const SA1: f32 = 1.9651271820e+01;
const SA2: f32 = 1.3765776062e+02;
const SA3: f32 = 4.3456588745e+02;
const SA4: f32 = 6.4538726807e+02;
const SA5: f32 = 4.2900814819e+02;
const SA6: f32 = 1.0863500214e+02;
const SA7: f32 = 6.5702495575e+00;
const SA8: f32 = -6.0424413532e-02;
const RB0: f32 = -9.8649431020e-03;
const RB1: f32 = -7.9928326607e-01;
const RB2: f32 = -1.7757955551e+01;
const RB3: f32 = -1.6063638306e+02;
const RB4: f32 = -6.3756646729e+02;
const RB5: f32 = -1.0250950928e+03;
const RB6: f32 = -4.8351919556e+02;
const SB1: f32 = 3.0338060379e+01;
const SB2: f32 = 3.2579251099e+02;
const SB3: f32 = 1.5367296143e+03;
const SB4: f32 = 3.1998581543e+03;
const SB5: f32 = 2.5530502930e+03;
const SB6: f32 = 4.7452853394e+02;
const SB7: f32 = -2.2440952301e+01;
// libm 0.2.16 `expf.rs`'s constants.
const LN2_HI: f32 = 6.9314575195e-01;
const LN2_LO: f32 = 1.4286067653e-06;
const INV_LN2: f32 = 1.4426950216e+00;
const P1: f32 = 1.6666625440e-1;
const P2: f32 = -2.7667332906e-3;

/// libm's `expf` for `|x| < 87.33` (below its overflow and underflow
/// branches; `erff` calls it with arguments in `(-36.6, 0]`): the reduction
/// `x = k·ln 2 + r`, the rational approximation on `r`, and `scalbnf(y, k)`,
/// which for `-126 ≤ k` is the product with `2^k`.
#[inline(always)]
fn expf(x: f32) -> f32 {
    let hx = x.to_bits() & 0x7fff_ffff;
    let neg = x.to_bits() >> 31 != 0;
    // (engram patch.) `as i32` saturates (NaN to 0, out-of-range values to
    // the bounds), which LLVM compiles to a scalar conversion with checks a
    // lane: the whole loop ran a lane at a time. Here the value is first held
    // to ±1e6 (a NaN becomes -1e6), where the plain truncating conversion is
    // the same number and vectorises. `k_far` is only kept for `|x| > 1.04`
    // below overflow (erff's arguments lie in (-36.6, 0]), where both give
    // the same integer; for the other lanes it is computed and discarded.
    let v = INV_LN2 * x + if neg { -0.5 } else { 0.5 };
    // SAFETY: after the clamp `v` is finite and within i32's range.
    let k_far = unsafe { v.max(-1.0e6).min(1.0e6).to_int_unchecked::<i32>() };
    let k_near = if neg { -1 } else { 1 };
    let reduce = hx > 0x3eb1_7218;
    let k = if !reduce {
        0
    } else if hx > 0x3f85_1592 {
        k_far
    } else {
        k_near
    };
    let kf = k as f32;
    let hi_r = x - kf * LN2_HI;
    let lo_r = kf * LN2_LO;
    let (hi, lo, x_r) = if reduce {
        (hi_r, lo_r, hi_r - lo_r)
    } else {
        (x, 0.0, x)
    };
    let xx = x_r * x_r;
    let c = x_r - xx * (P1 + xx * P2);
    let y = 1. + (x_r * c / (2. - c) - lo + hi);
    let scaled = y * f32::from_bits((k.wrapping_add(127) as u32) << 23);
    let y = if k == 0 { y } else { scaled };
    if hx > 0x3900_0000 { y } else { 1. + x }
}

/// libm's `erff`, every region computed and libm's kept.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let ix = x.to_bits() & 0x7fff_ffff;
    let neg = x.to_bits() >> 31 != 0;
    // |x| < 0.84375
    let z = x * x;
    let r = PP0 + z * (PP1 + z * (PP2 + z * (PP3 + z * PP4)));
    let s = 1.0 + z * (QQ1 + z * (QQ2 + z * (QQ3 + z * (QQ4 + z * QQ5))));
    let small = x + x * (r / s);
    // |x| < 2⁻²⁸
    let tiny = 0.125 * (8.0 * x + EFX8 * x);
    // 0.84375 ≤ |x| < 1.25: erfc1
    let a = x.abs();
    let s = a - 1.0;
    let p = PA0 + s * (PA1 + s * (PA2 + s * (PA3 + s * (PA4 + s * (PA5 + s * PA6)))));
    let q = 1.0 + s * (QA1 + s * (QA2 + s * (QA3 + s * (QA4 + s * (QA5 + s * QA6)))));
    let erfc1 = 1.0 - ERX - p / q;
    // 1.25 ≤ |x| < 6: erfc2
    let s = 1.0 / (a * a);
    let ra = RA0 + s * (RA1 + s * (RA2 + s * (RA3 + s * (RA4 + s * (RA5 + s * (RA6 + s * RA7))))));
    let sa = 1.0
        + s * (SA1
            + s * (SA2 + s * (SA3 + s * (SA4 + s * (SA5 + s * (SA6 + s * (SA7 + s * SA8)))))));
    let rb = RB0 + s * (RB1 + s * (RB2 + s * (RB3 + s * (RB4 + s * (RB5 + s * RB6)))));
    let sb = 1.0 + s * (SB1 + s * (SB2 + s * (SB3 + s * (SB4 + s * (SB5 + s * (SB6 + s * SB7))))));
    let (r, big_s) = if ix < 0x4036_db6d { (ra, sa) } else { (rb, sb) };
    let z = f32::from_bits(a.to_bits() & 0xffff_e000);
    let erfc2 = expf(-z * z - 0.5625) * expf((z - a) * (z + a) + r / big_s) / a;
    let erfc = if ix < 0x3fa0_0000 { erfc1 } else { erfc2 };
    let y = if ix < 0x40c0_0000 {
        1.0 - erfc
    } else {
        1.0 - f32::from_bits(0x0380_0000)
    };
    let signed = if neg { -y } else { y };
    let special = 1.0 - 2.0 * (neg as u32 as f32) + 1.0 / x;
    if ix >= 0x7f80_0000 {
        special
    } else if ix < 0x3180_0000 {
        tiny
    } else if ix < 0x3f58_0000 {
        small
    } else {
        signed
    }
}

/// GELU as the published crate computes it: `0.5 * x * (1 + erf(x / √2))`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / core::f32::consts::SQRT_2))
}

/// `1/√(2π)` as the published crate computes it.
#[inline(always)]
fn inv_sqrt_2pi() -> f32 {
    1.0 / (2.0 * core::f32::consts::PI).sqrt()
}

/// GELU's backward as the published crate computes it: `g·(cdf + x·pdf)`.
#[inline(always)]
pub(crate) fn gelu_grad(x: f32, g: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf(x / core::f32::consts::SQRT_2));
    let pdf = inv_sqrt_2pi() * (-0.5 * x * x).exp();
    g * (cdf + x * pdf)
}

/// [`gelu_grad`] given `e = (-0.5 * x * x).exp()`.
#[inline(always)]
fn gelu_grad_with(x: f32, g: f32, e: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf(x / core::f32::consts::SQRT_2));
    g * (cdf + x * (inv_sqrt_2pi() * e))
}

/// Elements a backward block takes: its `exp`s are computed into a buffer on
/// the stack by the scalar call, then read by the vector loop.
const BLOCK: usize = 256;

#[inline(always)]
fn forward_in_place_body(xs: &mut [f32]) {
    for x in xs {
        *x = gelu(*x);
    }
}

#[inline(always)]
fn forward_map_body(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        d.write(gelu(x));
    }
}

/// `(-0.5 * x * x).exp()` for a block: glibc's bits in vector registers where
/// `expf.rs` gives them (through its own dispatch, the one every f32 `exp`
/// takes), else the platform's scalar call.
#[inline(always)]
fn exps(x: &[f32], e: &mut [f32; BLOCK], vector: bool) {
    let e = &mut e[..x.len()];
    if vector {
        for (e, &x) in e.iter_mut().zip(x) {
            *e = -0.5 * x * x;
        }
        crate::ops::expf::in_place(e);
    } else {
        for (e, &x) in e.iter_mut().zip(x) {
            *e = (-0.5 * x * x).exp();
        }
    }
}

#[inline(always)]
fn backward_in_place_body(g: &mut [f32], x: &[f32]) {
    let vector = crate::ops::expf::vector_ok();
    let mut e = [0.0f32; BLOCK];
    for (g, x) in g.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
        exps(x, &mut e, vector);
        for ((g, &x), &e) in g.iter_mut().zip(x).zip(&e) {
            *g = gelu_grad_with(x, *g, e);
        }
    }
}

#[inline(always)]
fn backward_map_body(dst: &mut [MaybeUninit<f32>], x: &[f32], g: &[f32]) {
    let vector = crate::ops::expf::vector_ok();
    let mut e = [0.0f32; BLOCK];
    for ((d, x), g) in dst
        .chunks_mut(BLOCK)
        .zip(x.chunks(BLOCK))
        .zip(g.chunks(BLOCK))
    {
        exps(x, &mut e, vector);
        for (((d, &x), &g), &e) in d.iter_mut().zip(x).zip(g).zip(&e) {
            d.write(gelu_grad_with(x, g, e));
        }
    }
}

/// One chunk of [`forward_train`]: `y = GELU(x)` and `d = GELU′(x)`, with
/// `1 + erf(x/√2)` computed once for both and the `exp`s a block at a time
/// as the backward computes them.
#[inline(always)]
fn train_body(y: &mut [MaybeUninit<f32>], d: &mut [MaybeUninit<f32>], x: &[f32]) {
    let vector = crate::ops::expf::vector_ok();
    let mut e = [0.0f32; BLOCK];
    for ((y, d), x) in y
        .chunks_mut(BLOCK)
        .zip(d.chunks_mut(BLOCK))
        .zip(x.chunks(BLOCK))
    {
        exps(x, &mut e, vector);
        for (((y, d), &x), &e) in y.iter_mut().zip(d.iter_mut()).zip(x).zip(&e) {
            // `gelu`'s and `gelu_grad_with`'s operations, in their order.
            let t = 1.0 + erf(x / core::f32::consts::SQRT_2);
            y.write(0.5 * x * t);
            d.write(0.5 * t + x * (inv_sqrt_2pi() * e));
        }
    }
}

#[cfg(feature = "simd")]
mod dispatched {
    use core::mem::MaybeUninit;
    use macerator::Simd;

    #[macerator::with_simd]
    pub(super) fn forward_in_place<S: Simd>(xs: &mut [f32]) {
        super::forward_in_place_body(xs)
    }

    #[macerator::with_simd]
    pub(super) fn forward_map<S: Simd>(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
        super::forward_map_body(dst, src)
    }

    #[macerator::with_simd]
    pub(super) fn backward_in_place<S: Simd>(g: &mut [f32], x: &[f32]) {
        super::backward_in_place_body(g, x)
    }

    #[macerator::with_simd]
    pub(super) fn backward_map<S: Simd>(dst: &mut [MaybeUninit<f32>], x: &[f32], g: &[f32]) {
        super::backward_map_body(dst, x, g)
    }

    #[macerator::with_simd]
    pub(super) fn train<S: Simd>(
        y: &mut [MaybeUninit<f32>],
        d: &mut [MaybeUninit<f32>],
        x: &[f32],
    ) {
        super::train_body(y, d, x)
    }
}

#[cfg(feature = "simd")]
use dispatched::{backward_in_place, backward_map, forward_in_place, forward_map, train};
#[cfg(not(feature = "simd"))]
use {
    backward_in_place_body as backward_in_place, backward_map_body as backward_map,
    forward_in_place_body as forward_in_place, forward_map_body as forward_map,
    train_body as train,
};

/// GELU of an f32 tensor (any layout), in place when the tensor is its
/// storage's only handle.
pub(crate) fn forward(tensor: FlexTensor) -> FlexTensor {
    map_f32(tensor, forward_in_place, forward_map)
}

/// An f32 tensor (any layout) through a slice kernel: `in_place` over its
/// storage when it is the storage's only handle, else `map` into a new
/// buffer; split across threads (`crate::par`). Shared with `expf.rs`.
pub(crate) fn map_f32(
    tensor: FlexTensor,
    in_place: fn(&mut [f32]),
    map: fn(&mut [MaybeUninit<f32>], &[f32]),
) -> FlexTensor {
    debug_assert_eq!(tensor.dtype(), DType::F32);
    let mut tensor = tensor.into_contiguous();
    let n = tensor.layout().num_elements();
    if let Some(s) = tensor.try_storage_mut::<f32>() {
        crate::par::chunks_mut(&mut s[..n], in_place);
        return tensor;
    }
    let src: &[f32] = &tensor.storage::<f32>()[..n];
    let mut out = Vec::<f32>::with_capacity(n);
    crate::par::zip_chunks_mut(&mut out.spare_capacity_mut()[..n], src, map);
    // SAFETY: the chunks cover `0..n`, and `map` writes every element.
    unsafe { out.set_len(n) };
    let shape = tensor.layout().shape().clone();
    FlexTensor::new(
        Bytes::from_elems(out),
        Layout::contiguous(shape),
        DType::F32,
    )
}

/// GELU's backward for f32 `x` and `grad` of one shape: `grad·GELU′(x)`,
/// written into `grad` when it is its storage's only handle. `Err` gives both
/// back when the shapes differ (the caller broadcasts).
pub(crate) fn backward(
    x: FlexTensor,
    grad: FlexTensor,
) -> Result<FlexTensor, (FlexTensor, FlexTensor)> {
    debug_assert_eq!(x.dtype(), DType::F32);
    debug_assert_eq!(grad.dtype(), DType::F32);
    if x.layout().shape() != grad.layout().shape() {
        return Err((x, grad));
    }
    let x = x.into_contiguous();
    let mut grad = grad.into_contiguous();
    let n = x.layout().num_elements();
    let xs: &[f32] = &x.storage::<f32>()[..n];
    if let Some(g) = grad.try_storage_mut::<f32>() {
        crate::par::zip_chunks_mut(&mut g[..n], xs, backward_in_place);
        return Ok(grad);
    }
    let gs: &[f32] = &grad.storage::<f32>()[..n];
    let mut out = Vec::<f32>::with_capacity(n);
    {
        let dst = &mut out.spare_capacity_mut()[..n];
        #[cfg(feature = "rayon")]
        if crate::par::worth_splitting(n) {
            use rayon::prelude::*;
            let c = crate::par::chunk_len(n);
            dst.par_chunks_mut(c)
                .zip(xs.par_chunks(c).zip(gs.par_chunks(c)))
                .for_each(|(d, (x, g))| backward_map(d, x, g));
        } else {
            backward_map(dst, xs, gs);
        }
        #[cfg(not(feature = "rayon"))]
        backward_map(dst, xs, gs);
    }
    // SAFETY: the chunks cover `0..n`, and `backward_map` wrote every element.
    unsafe { out.set_len(n) };
    let shape = x.layout().shape().clone();
    Ok(FlexTensor::new(
        Bytes::from_elems(out),
        Layout::contiguous(shape),
        DType::F32,
    ))
}

/// GELU's output and slope, for a training step (engram's autodiff node,
/// `core/src/model/nodes.rs`): both tensors have the input's shape.
#[derive(Clone, Debug)]
pub struct Train {
    /// `GELU(x) = ½·x·(1 + erf(x/√2))`, [`forward`]'s bits.
    pub output: FlexTensor,
    /// `GELU′(x) = ½(1 + erf(x/√2)) + x·e^(−x²/2)/√(2π)`: the backward is
    /// `grad · slope`, the bits `gelu_backward` computes from `x`.
    pub slope: FlexTensor,
}

/// GELU of an f32 `x` (any layout) and its slope, in one pass that computes
/// `erf` once an element: the backward then multiplies the output's gradient
/// by the slope instead of computing `erf` again from `x`, and keeps the slope
/// where Burn's GELU node keeps `x` (the same size).
///
/// # Panics
/// If `x` is not f32.
pub fn forward_train(x: &FlexTensor) -> Train {
    assert_eq!(x.dtype(), DType::F32, "gelu::forward_train: f32 only");
    let x = x.to_contiguous();
    let n = x.layout().num_elements();
    let xs: &[f32] = &x.storage::<f32>()[x.layout().start_offset()..][..n];
    let (mut y, mut d) = (Vec::<f32>::with_capacity(n), Vec::<f32>::with_capacity(n));
    {
        let (ys, ds) = (&mut y.spare_capacity_mut()[..n], &mut d.spare_capacity_mut()[..n]);
        #[cfg(feature = "rayon")]
        if crate::par::worth_splitting(n) {
            use rayon::prelude::*;
            let c = crate::par::chunk_len(n);
            ys.par_chunks_mut(c)
                .zip(ds.par_chunks_mut(c).zip(xs.par_chunks(c)))
                .for_each(|(y, (d, x))| train(y, d, x));
        } else {
            train(ys, ds, xs);
        }
        #[cfg(not(feature = "rayon"))]
        train(ys, ds, xs);
    }
    // SAFETY: the chunks cover `0..n`, and `train` wrote every element of both.
    unsafe {
        y.set_len(n);
        d.set_len(n);
    }
    let shape = x.layout().shape().clone();
    let tensor = |v: Vec<f32>| {
        FlexTensor::new(
            Bytes::from_elems(v),
            Layout::contiguous(shape.clone()),
            DType::F32,
        )
    };
    Train {
        output: tensor(y),
        slope: tensor(d),
    }
}
