//! (engram patch.) f32 `exp` in vector registers, with glibc's bits.
//!
//! The published crate computes `exp` on f32 with `f32::exp` an element: on
//! x86-64 Linux that is glibc's `expf`, which glibc's resolver points at its
//! FMA build (`__expf_fma`) when the CPU has FMA and AVX2. That routine (the
//! Arm optimized-routines `expf`, glibc ≥ 2.27) is `2^(k/32) · P(r)` in double
//! precision: `z = InvLn2N·x + shift` (fused), `k` from `z`'s bits, `r =
//! InvLn2N·x − kd` (fused), `2^(k/32)` from a 32-entry table plus `k`'s high
//! bits in the exponent, and a cubic in `r` (three fused multiply-adds).
//! [`expf`] is that routine, step for step (its constants and table read out
//! of glibc 2.36's `libm.so.6`), with its special cases as selects, so LLVM
//! vectorises it (the table as a gather) and it gives `__expf_fma`'s bits.
//! The loops are compiled for AVX-512 and for AVX2 with FMA and picked at run
//! time (`widest`), not through macerator's dispatch, where LLVM left them
//! scalar.
//! It runs only where glibc would run `__expf_fma` ([`vector_ok`]: x86-64
//! Linux with glibc, FMA and AVX2); elsewhere the scalar call stays.
//! `vendor::exp_is_the_platform_s_bit_for_bit` compares every 61st f32 bit
//! pattern with `f32::exp`. It serves `float_exp` (the softmax's exp under
//! autodiff) and GELU's backward (`gelu.rs`).

use core::mem::MaybeUninit;

use crate::FlexTensor;

/// `32 / ln 2`.
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// `1.5 · 2⁵²`: adding it rounds to an integer in the low bits.
const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// The cubic's coefficients (glibc's `__exp2f_data.poly_scaled`).
const C0: f64 = f64::from_bits(0x3ebc_6af8_4b91_2394);
const C1: f64 = f64::from_bits(0x3f2e_bfce_50fa_c4f3);
const C2: f64 = f64::from_bits(0x3f96_2e42_ff0c_52d6);
/// `2^(i/32)` with `i << 47` taken out of the bits (glibc's `__exp2f_data.tab`).
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// Whether glibc's `expf` is `__expf_fma` here, so that [`expf`] is its bits.
#[inline]
pub(crate) fn vector_ok() -> bool {
    #[cfg(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "gnu",
        feature = "std",
        feature = "simd"
    ))]
    {
        std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "gnu",
        feature = "std",
        feature = "simd"
    )))]
    {
        false
    }
}

/// glibc's `__expf_fma`, step for step.
#[inline(always)]
fn expf(x: f32) -> f32 {
    let xd = x as f64;
    let z = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = z.to_bits();
    let kd = z - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    let s = f64::from_bits(TAB[(ki & 31) as usize].wrapping_add(ki << 47));
    let zp = r.mul_add(C0, C1);
    let r2 = r * r;
    let y = r.mul_add(C2, 1.0);
    let y = zp.mul_add(r2, y);
    let fast = (y * s) as f32;
    // glibc's special cases, for |x| ≥ 88 (the top 12 bits at or above 88's), in its order.
    let bits = x.to_bits();
    let abstop = (bits >> 20) & 0x7ff;
    let special = if bits == 0xff80_0000 {
        0.0
    } else if abstop > 0x7f7 {
        x + x
    } else if x > f32::from_bits(0x42b1_7217) {
        // __math_oflowf(0)
        f32::from_bits(0x7000_0000) * f32::from_bits(0x7000_0000)
    } else if x < f32::from_bits(0xc2cf_f1b4) {
        // __math_uflowf(0)
        f32::from_bits(0x1000_0000) * f32::from_bits(0x1000_0000)
    } else if x < f32::from_bits(0xc2ce_8ecf) {
        // __math_may_uflowf(0)
        f32::from_bits(0x1a20_0000) * f32::from_bits(0x1a20_0000)
    } else {
        fast
    };
    if abstop > 0x42a { special } else { fast }
}

#[inline(always)]
fn in_place_body(xs: &mut [f32]) {
    for x in xs {
        *x = expf(*x);
    }
}

#[inline(always)]
fn map_body(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        d.write(expf(x));
    }
}

/// Whether the AVX-512 build of a [`widest`] loop can run here (the detection
/// is cached).
#[cfg(all(target_arch = "x86_64", feature = "std"))]
pub(crate) fn v4() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

/// Whether the AVX2 build of a [`widest`] loop can run here.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
pub(crate) fn v3() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Defines `$name`, which runs `$body` compiled for AVX-512 or for AVX2 with
/// FMA where the CPU has them ([`v4`], [`v3`]), else the baseline build
/// (SSE2 on x86-64). Not macerator's `with_simd`: through its dispatch
/// closure LLVM kept `exp`'s loop over a slice scalar (one `vcvtsd2ss` a
/// lane, no gather), at about 2.4 ns an element, where a function with the
/// target features itself vectorises it with `vpgatherqq` (about 0.9 ns an
/// element, `[16, 12, 128, 128]` at 1 thread). The builds differ only in
/// vector width: the bodies' operations (and `exp`'s explicit fused
/// multiply-adds) are the same in each lane, and Rust contracts no other
/// multiply and add into an FMA.
macro_rules! widest {
    ($vis:vis $name:ident($($arg:ident: $ty:ty),*) = $body:path) => {
        $vis fn $name($($arg: $ty),*) {
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
                unsafe fn v4($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn v3($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if $crate::ops::expf::v4() {
                    // SAFETY: the CPU has the features `v4` is compiled for.
                    return unsafe { v4($($arg),*) };
                }
                if $crate::ops::expf::v3() {
                    // SAFETY: as above, for `v3`.
                    return unsafe { v3($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}
pub(crate) use widest;

// Every f32 `exp` takes this one dispatch: GELU's backward, whose loop over
// fixed blocks of 256 had vectorised inside macerator, calls `in_place` too.
widest!(pub(crate) in_place(xs: &mut [f32]) = in_place_body);
widest!(map(dst: &mut [MaybeUninit<f32>], src: &[f32]) = map_body);

/// `exp` of an f32 tensor (any layout) when [`vector_ok`], in place when the
/// tensor is its storage's only handle.
pub(crate) fn forward(tensor: FlexTensor) -> FlexTensor {
    crate::ops::gelu::map_f32(tensor, in_place, map)
}
