//! Dequantisation of ggml's F32, F16, Q4_0, Q4_1 and Q8_0 to `f32`, exactly as ggml's
//! `ggml-quants.c` (`dequantize_row_q4_0`, `dequantize_row_q4_1`, `dequantize_row_q8_0`) and
//! `ggml.c` (`ggml_fp16_to_fp32_row`) define them.
//!
//! The quantised types store blocks of [`QK`] = 32 consecutive elements (along `ne[0]`):
//! - **Q8_0** (34 bytes): `d: f16`, `qs: [i8; 32]`; element `j` is `qs[j] · d`.
//! - **Q4_0** (18 bytes): `d: f16`, `qs: [u8; 16]`; element `j < 16` is the low nibble of
//!   `qs[j]`, element `j + 16` its high nibble; each value is `(q − 8) · d`.
//! - **Q4_1** (20 bytes): `d: f16`, `m: f16`, `qs: [u8; 16]` (nibbles as Q4_0); each value is
//!   `q · d + m`.
//!
//! The products and sums are single `f32` operations (no fused multiply-add), as the `gguf`
//! package's NumPy dequantisation computes them.

use super::GgmlType;
use burn::tensor::f16;
use rayon::prelude::*;

/// Elements per block of the quantised types (ggml's `QK4_0`, `QK4_1`, `QK8_0`).
pub const QK: usize = 32;

/// Blocks per parallel task.
const CHUNK_BLOCKS: usize = 1024;

/// Whether [`dequantize`] reads type `t`.
pub(super) fn supported(t: GgmlType) -> bool {
    [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ]
    .contains(&t)
}

fn half(lo: u8, hi: u8) -> f32 {
    f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// `n` elements of type `t` stored in `bytes` (little-endian, as in a GGUF file), as `f32`
/// in storage order.
///
/// # Errors
/// A message when `t` is not F32, F16, Q4_0, Q4_1 or Q8_0, when `n` is not a whole number of
/// blocks, or when `bytes` is not exactly `n` elements long.
pub fn dequantize(t: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>, String> {
    let (block_len, block_bytes): (usize, usize) = match (t.block_len(), t.block_bytes()) {
        (Some(l), Some(b)) if supported(t) => (l as usize, b as usize),
        _ => {
            return Err(format!(
                "unsupported ggml type {t} (engram dequantises F32, F16, Q4_0, Q4_1 and Q8_0)"
            ));
        }
    };
    if !n.is_multiple_of(block_len) {
        return Err(format!(
            "{n} elements of {t}: not a whole number of blocks of {block_len}"
        ));
    }
    let blocks = n / block_len;
    if blocks.checked_mul(block_bytes) != Some(bytes.len()) {
        return Err(format!(
            "{n} elements of {t} take {} bytes, the data has {}",
            blocks.saturating_mul(block_bytes),
            bytes.len()
        ));
    }
    let mut out = vec![0f32; n];
    let per_task = CHUNK_BLOCKS * block_len;
    out.par_chunks_mut(per_task)
        .zip(bytes.par_chunks(CHUNK_BLOCKS * block_bytes))
        .for_each(|(y, x)| match t {
            GgmlType::F32 => y
                .iter_mut()
                .zip(x.chunks_exact(4))
                .for_each(|(v, b)| *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            GgmlType::F16 => y
                .iter_mut()
                .zip(x.chunks_exact(2))
                .for_each(|(v, b)| *v = half(b[0], b[1])),
            GgmlType::Q8_0 => y
                .chunks_exact_mut(QK)
                .zip(x.chunks_exact(block_bytes))
                .for_each(|(y, b)| q8_0(y, b)),
            GgmlType::Q4_0 => y
                .chunks_exact_mut(QK)
                .zip(x.chunks_exact(block_bytes))
                .for_each(|(y, b)| q4_0(y, b)),
            _ => y
                .chunks_exact_mut(QK)
                .zip(x.chunks_exact(block_bytes))
                .for_each(|(y, b)| q4_1(y, b)),
        });
    Ok(out)
}

/// One Q8_0 block (`dequantize_row_q8_0`): `y[j] = qs[j] · d`.
fn q8_0(y: &mut [f32], b: &[u8]) {
    let d = half(b[0], b[1]);
    for (v, &q) in y.iter_mut().zip(&b[2..2 + QK]) {
        *v = f32::from(q as i8) * d;
    }
}

/// One Q4_0 block (`dequantize_row_q4_0`): `y[j] = ((qs[j] & 0xF) − 8) · d`,
/// `y[j + 16] = ((qs[j] >> 4) − 8) · d`.
fn q4_0(y: &mut [f32], b: &[u8]) {
    let d = half(b[0], b[1]);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[2..2 + QK / 2].iter().enumerate() {
        lo[j] = (f32::from(q & 0x0F) - 8.0) * d;
        hi[j] = (f32::from(q >> 4) - 8.0) * d;
    }
}

/// One Q4_1 block (`dequantize_row_q4_1`): `y[j] = (qs[j] & 0xF) · d + m`,
/// `y[j + 16] = (qs[j] >> 4) · d + m`.
fn q4_1(y: &mut [f32], b: &[u8]) {
    let d = half(b[0], b[1]);
    let m = half(b[2], b[3]);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[4..4 + QK / 2].iter().enumerate() {
        lo[j] = f32::from(q & 0x0F) * d + m;
        hi[j] = f32::from(q >> 4) * d + m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-built blocks: d = 0.5 (f16 0x3800), m = −1 (f16 0xBC00).
    #[test]
    fn blocks_by_hand() {
        // Q8_0: q = j − 16.
        let mut b = vec![0x00, 0x38];
        b.extend((0..32).map(|j| (j as i8 - 16) as u8));
        let y = dequantize(GgmlType::Q8_0, &b, 32).unwrap();
        assert_eq!(y[0], -8.0);
        assert_eq!(y[31], 7.5);
        // Q4_0: byte j = (hi = 15 − (j % 16), lo = j): y[j] = (j − 8)/2, y[j + 16] = (7 − j)/2.
        let mut b = vec![0x00, 0x38];
        b.extend((0..16u8).map(|j| ((15 - j) << 4) | j));
        let y = dequantize(GgmlType::Q4_0, &b, 32).unwrap();
        assert_eq!(y[0], -4.0);
        assert_eq!(y[15], 3.5);
        assert_eq!(y[16], 3.5);
        assert_eq!(y[31], -4.0);
        // Q4_1: y[j] = j/2 − 1.
        let mut b = vec![0x00, 0x38, 0x00, 0xBC];
        b.extend((0..16u8).map(|j| ((15 - j) << 4) | j));
        let y = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
        assert_eq!(y[3], 0.5);
        assert_eq!(y[16], 6.5);
        // F16: 1.0, −2.0.
        let y = dequantize(GgmlType::F16, &[0x00, 0x3C, 0x00, 0xC0], 2).unwrap();
        assert_eq!(y, [1.0, -2.0]);
    }

    #[test]
    fn wrong_lengths_and_types_are_messages() {
        assert!(dequantize(GgmlType::Q8_0, &[0; 34], 16).is_err());
        assert!(dequantize(GgmlType::Q8_0, &[0; 33], 32).is_err());
        assert!(dequantize(GgmlType(12), &[0; 144], 256).is_err());
        assert!(dequantize(GgmlType(999), &[], 0).is_err());
    }
}
