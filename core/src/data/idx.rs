//! The IDX file format of MNIST, Fashion-MNIST, KMNIST and EMNIST (LeCun et al. 1998,
//! <http://yann.lecun.com/exdb/mnist/>).
//!
//! Layout: a big-endian magic `0x00 0x00 type rank`, then `rank` big-endian `u32` dimensions,
//! then the data in row-major order. engram reads the unsigned-byte type (`0x08`) only, which
//! is what every dataset of the family uses. Files may be gzip-compressed (detected by the gzip
//! magic `1f 8b`, not by the file name).

use crate::error::{Error, IdxError};
use flate2::read::GzDecoder;
use std::io::Read;
use std::path::Path;

/// A decoded IDX array of unsigned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxArray {
    /// Dimensions from the header, for example `[60000, 28, 28]`.
    pub dims: Vec<usize>,
    /// Row-major data, `dims.iter().product()` bytes.
    pub data: Vec<u8>,
}

/// Largest rank accepted (images are rank 3, labels rank 1).
const MAX_RANK: usize = 4;

/// Decodes IDX bytes (raw or gzip).
///
/// # Errors
/// [`IdxError::Gzip`] for a corrupt gzip stream, [`IdxError::Truncated`] when the header or the
/// data are short, [`IdxError::BadMagic`] for another type code, [`IdxError::BadDims`] for a rank
/// of 0 or above 4 or a zero dimension, [`IdxError::TrailingData`] for extra bytes.
pub fn parse_idx(bytes: &[u8]) -> Result<IdxArray, IdxError> {
    let owned;
    let raw: &[u8] = if bytes.starts_with(&[0x1f, 0x8b]) {
        owned = gunzip_bounded(bytes)?;
        &owned
    } else {
        bytes
    };
    if raw.len() < 4 {
        return Err(IdxError::Truncated {
            expected: 4,
            actual: raw.len() as u64,
        });
    }
    let magic = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    if raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 {
        return Err(IdxError::BadMagic { magic });
    }
    let rank = raw[3] as usize;
    let header = 4 + 4 * rank;
    if raw.len() < header {
        return Err(IdxError::Truncated {
            expected: header as u64,
            actual: raw.len() as u64,
        });
    }
    let dims32 = header_dims(raw, rank);
    if rank == 0 || rank > MAX_RANK {
        return Err(IdxError::BadDims {
            dims: dims32,
            reason: format!("rank {rank} (engram reads ranks 1 to {MAX_RANK})"),
        });
    }
    if dims32.contains(&0) {
        return Err(IdxError::BadDims {
            dims: dims32,
            reason: "a dimension is zero".into(),
        });
    }
    let total = declared_size(&dims32).ok_or_else(|| IdxError::BadDims {
        dims: dims32.clone(),
        reason: "the declared size is implausibly large".into(),
    })?;
    let need = header as u64 + total;
    let have = raw.len() as u64;
    if have < need {
        return Err(IdxError::Truncated {
            expected: need,
            actual: have,
        });
    }
    if have > need {
        return Err(IdxError::TrailingData { extra: have - need });
    }
    Ok(IdxArray {
        dims: dims32.iter().map(|&d| d as usize).collect(),
        data: raw[header..].to_vec(),
    })
}

/// The `rank` big-endian dimensions after the 4 magic bytes (`raw` holds them all).
fn header_dims(raw: &[u8], rank: usize) -> Vec<u32> {
    (0..rank)
        .map(|i| {
            let o = 4 + 4 * i;
            u32::from_be_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]])
        })
        .collect()
}

/// The number of data bytes `dims` declare, when it is at most 2³⁶ (64 GiB; larger is not a
/// plausible IDX file).
fn declared_size(dims: &[u32]) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
        .filter(|&t| t <= (1u64 << 36))
}

/// The most bytes deflate can inflate one compressed byte to (RFC 1951: a 258-byte match coded
/// in about 2 bits; zlib's documentation gives 1032:1).
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Decompresses gzipped IDX bytes no further than their header declares: the header first,
/// then the declared data and one byte more (enough to tell trailing data), so a small file
/// that inflates to gigabytes (a gzip bomb) costs only what its header claims, itself bounded
/// by the 2³⁶-byte limit of [`parse_idx`]. A header that is not valid is returned as read, for
/// [`parse_idx`] to name what is wrong.
fn gunzip_bounded(bytes: &[u8]) -> Result<Vec<u8>, IdxError> {
    let mut d = GzDecoder::new(bytes);
    let mut out = Vec::new();
    let mut more = |out: &mut Vec<u8>, n: u64| {
        (&mut d)
            .take(n)
            .read_to_end(out)
            .map_err(|e| IdxError::Gzip(e.to_string()))
    };
    more(&mut out, 4)?;
    if out.len() < 4 || out[..3] != [0, 0, 0x08] {
        return Ok(out);
    }
    let rank = out[3] as usize;
    if rank == 0 || rank > MAX_RANK {
        return Ok(out);
    }
    more(&mut out, 4 * rank as u64)?;
    if out.len() < 4 + 4 * rank {
        return Ok(out);
    }
    if let Some(total) = declared_size(&header_dims(&out, rank)) {
        // Deflate inflates at most 1032:1 (a 258-byte match per 2 bits, RFC 1951 §3.2.5), so a
        // file of `bytes.len()` bytes cannot hold more than this: a header claiming more is
        // refused before anything is inflated (a gzip bomb under a huge header costs nothing).
        let most = (bytes.len() as u64).saturating_mul(MAX_DEFLATE_RATIO);
        if total > most {
            return Err(IdxError::BadDims {
                dims: header_dims(&out, rank),
                reason: format!(
                    "they declare {total} bytes of data, more than a gzip file of {} bytes can hold (deflate inflates at most {MAX_DEFLATE_RATIO}:1)",
                    bytes.len()
                ),
            });
        }
        more(&mut out, total + 1)?;
    }
    Ok(out)
}

/// Reads and decodes an IDX file.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, [`Error::Idx`] when its content is invalid.
pub fn read_idx(path: &Path) -> Result<IdxArray, Error> {
    let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| Error::io(path, e))?;
    parse_idx(&bytes).map_err(|source| Error::Idx {
        path: path.to_path_buf(),
        source,
    })
}

/// Encodes an unsigned-byte IDX array (the inverse of [`parse_idx`], used by tests and
/// `engram data` tooling to write fixtures).
pub fn encode_idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;

    /// Issue #32: a gzip file whose header claims more than its compressed size can inflate to
    /// is refused before anything is inflated (it took 1.1 GB before the size check).
    #[test]
    fn issue32_a_header_larger_than_the_gzip_can_hold_is_refused_before_inflating() {
        let mut bytes = encode_idx(&[1_400_000, 28, 28], &[]);
        bytes.extend(std::iter::repeat_n(0u8, 1 << 20));
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        gz.write_all(&bytes).unwrap();
        let gz = gz.finish().unwrap();
        match parse_idx(&gz) {
            Err(IdxError::BadDims { dims, reason }) => {
                assert_eq!(dims, vec![1_400_000, 28, 28]);
                assert!(reason.contains("1097600000 bytes of data"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn round_trip_raw_and_gzip() {
        let data: Vec<u8> = (0..2 * 3 * 2).map(|i| i as u8).collect();
        let bytes = encode_idx(&[2, 3, 2], &data);
        let a = parse_idx(&bytes).unwrap();
        assert_eq!(a.dims, vec![2, 3, 2]);
        assert_eq!(a.data, data);
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&bytes).unwrap();
        let b = parse_idx(&gz.finish().unwrap()).unwrap();
        assert_eq!(a, b);
    }

    /// A gzip bomb: 12 declared bytes followed by 256 MiB of zeros in a file of about 1.2 MiB.
    /// Decompression stops one byte past the declared data (`extra == 1`), so the bomb costs
    /// what its header claims, not what it inflates to.
    #[test]
    fn a_gzip_stream_is_inflated_no_further_than_its_header_declares() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&encode_idx(&[2, 3, 2], &[7; 12])).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..256 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 2 << 20, "{}", bomb.len());
        assert_eq!(parse_idx(&bomb), Err(IdxError::TrailingData { extra: 1 }));
    }

    #[test]
    fn corrupt_files_are_typed_errors() {
        // Bad magic: an int32 IDX (type 0x0c).
        let mut bytes = encode_idx(&[2], &[1, 2]);
        bytes[2] = 0x0c;
        assert_eq!(
            parse_idx(&bytes),
            Err(IdxError::BadMagic { magic: 0x0000_0c01 })
        );
        // Truncated data.
        let bytes = encode_idx(&[4], &[1, 2]);
        assert_eq!(
            parse_idx(&bytes),
            Err(IdxError::Truncated {
                expected: 12,
                actual: 10
            })
        );
        // Truncated header.
        assert!(matches!(
            parse_idx(&[0, 0, 8, 3, 0, 0]),
            Err(IdxError::Truncated { expected: 16, .. })
        ));
        // Zero dimension and rank 0.
        assert!(matches!(
            parse_idx(&encode_idx(&[0, 5], &[])),
            Err(IdxError::BadDims { .. })
        ));
        assert!(matches!(
            parse_idx(&encode_idx(&[], &[])),
            Err(IdxError::BadDims { .. })
        ));
        // Trailing bytes.
        assert_eq!(
            parse_idx(&encode_idx(&[1], &[1, 2])),
            Err(IdxError::TrailingData { extra: 1 })
        );
        // Corrupt gzip.
        assert!(matches!(
            parse_idx(&[0x1f, 0x8b, 8, 0, 1, 2, 3]),
            Err(IdxError::Gzip(_))
        ));
        // Empty file.
        assert!(matches!(
            parse_idx(&[]),
            Err(IdxError::Truncated { expected: 4, .. })
        ));
    }
}
