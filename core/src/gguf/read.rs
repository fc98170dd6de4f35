//! The GGUF header, metadata and tensor table: a bounded little-endian reader.
//!
//! Every length is checked against the bytes left in the file before anything is allocated
//! for it; a read past the end is reported with the byte offset and what was being read.

use super::{
    DEFAULT_ALIGNMENT, GgmlType, MAX_ARRAY_DEPTH, MAX_METADATA_ELEMENTS, TensorInfo, Value,
    ValueType, bad,
};
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::io::{BufReader, Read};
use std::path::Path;

/// The header's magic: the bytes `GGUF`.
pub(super) const MAGIC: [u8; 4] = *b"GGUF";

/// The most dimensions a ggml tensor has (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// What [`parse`] read before the data section.
pub(super) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// The most items reserved ahead from a count in the file: lists grow past it only as their
/// items are read, so memory follows the bytes actually read, not what a count claims.
const RESERVE_MAX: u64 = 1 << 16;

fn reserve(n: u64) -> usize {
    n.min(RESERVE_MAX) as usize
}

/// A little-endian reader that knows its position and the file's length.
struct Reader<'a> {
    inner: BufReader<&'a std::fs::File>,
    path: &'a Path,
    pos: u64,
    len: u64,
    /// Array elements read so far, all arrays together.
    elements: u64,
}

impl<'a> Reader<'a> {
    fn left(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let at = self.pos;
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => bad(
                self.path,
                format!(
                    "truncated: the file ends ({} bytes) while reading {what} at byte {at}",
                    self.len
                ),
            ),
            _ => Error::io(self.path, e),
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left.
    fn count(&mut self, what: &str, min_bytes: u64) -> Result<u64> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n.saturating_mul(min_bytes) > self.left() {
            return Err(bad(
                self.path,
                format!(
                    "{what} at byte {at} is {n}, more than the {} bytes left in the file can hold",
                    self.left()
                ),
            ));
        }
        Ok(n)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let n = self.count(&format!("the length of {what}"), 1)?;
        let mut buf = vec![0u8; n as usize];
        self.fill(&mut buf, what)?;
        String::from_utf8(buf).map_err(|e| {
            bad(
                self.path,
                format!(
                    "{what} at byte {at} is not UTF-8 (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let at = self.pos;
        let code = self.u32(what)?;
        Ok(match code {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => {
                return Err(bad(
                    self.path,
                    format!("{what} at byte {at} is {code}: not a GGUF value type (0..=12)"),
                ));
            }
        })
    }

    /// One value of type `t` (of key `key`, for messages), arrays at nesting `depth`.
    fn value(&mut self, t: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = format!("the value of `{key}`");
        Ok(match t {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(&what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(bad(
                            self.path,
                            format!("{what} at byte {at} is a bool of byte {b}, not 0 or 1"),
                        ));
                    }
                }
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => self.array_value(key, depth + 1)?,
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Value> {
        let at = self.pos;
        if depth > MAX_ARRAY_DEPTH {
            return Err(bad(
                self.path,
                format!(
                    "the value of `{key}` at byte {at}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
                ),
            ));
        }
        let elem = self.value_type(&format!("the element type of `{key}`"))?;
        let min = match elem {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        };
        let n = self.count(&format!("the length of array `{key}`"), min)?;
        self.elements += n;
        if self.elements > MAX_METADATA_ELEMENTS {
            return Err(bad(
                self.path,
                format!(
                    "array `{key}` at byte {at}: more than {MAX_METADATA_ELEMENTS} metadata array elements in all"
                ),
            ));
        }
        let mut items = Vec::with_capacity(reserve(n));
        for _ in 0..n {
            items.push(self.value(elem, key, depth)?);
        }
        Ok(Value::Array(elem, items))
    }

    fn tensor_info(&mut self, i: u64) -> Result<(TensorInfo, u64)> {
        let name = self.string(&format!("the name of tensor {i}"))?;
        let at = self.pos;
        let rank = self.u32(&format!("the rank of tensor `{name}`"))?;
        if rank > MAX_DIMS {
            return Err(bad(
                self.path,
                format!(
                    "tensor `{name}` at byte {at}: rank {rank}, ggml tensors have at most {MAX_DIMS} dimensions"
                ),
            ));
        }
        let mut dims = Vec::with_capacity(rank as usize);
        for d in 0..rank {
            dims.push(self.u64(&format!("dimension {d} of tensor `{name}`"))?);
        }
        let ggml_type = GgmlType(self.u32(&format!("the type of tensor `{name}`"))?);
        let offset = self.u64(&format!("the offset of tensor `{name}`"))?;
        Ok((
            TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                bytes: 0,
            },
            at,
        ))
    }
}

/// Reads the header, metadata and tensor table of `file` (`len` bytes long), and checks that
/// every tensor's data lies inside the file.
pub(super) fn parse(path: &Path, file: &std::fs::File, len: u64) -> Result<Parsed> {
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 16, file),
        path,
        pos: 0,
        len,
        elements: 0,
    };
    let magic: [u8; 4] = r.array("the magic")?;
    if magic != MAGIC {
        return Err(bad(
            path,
            format!(
                "not a GGUF file: it starts with {magic:02x?}, a GGUF file with the bytes `GGUF`"
            ),
        ));
    }
    let version = r.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(bad(
            path,
            format!("GGUF version {version}: engram reads versions 2 and 3 (little-endian)"),
        ));
    }
    // A tensor entry takes at least 24 bytes (empty name, rank 0), a metadata entry 12.
    let tensor_count = r.count("the tensor count", 24)?;
    let kv_count = r.count("the metadata count", 12)?;
    let mut metadata = Vec::with_capacity(reserve(kv_count));
    let mut keys = HashSet::new();
    for i in 0..kv_count {
        let at = r.pos;
        let key = r.string(&format!("metadata key {i}"))?;
        let t = r.value_type(&format!("the type of `{key}`"))?;
        let value = r.value(t, &key, 0)?;
        if !keys.insert(key.clone()) {
            return Err(bad(
                path,
                format!("metadata key `{key}` at byte {at} is repeated"),
            ));
        }
        metadata.push((key, value));
    }
    let alignment = alignment(path, &metadata)?;
    let mut tensors = Vec::with_capacity(reserve(tensor_count));
    let mut names = HashSet::new();
    let mut positions = Vec::with_capacity(reserve(tensor_count));
    for i in 0..tensor_count {
        let (info, at) = r.tensor_info(i)?;
        if !names.insert(info.name.clone()) {
            return Err(bad(
                path,
                format!("tensor `{}` at byte {at} is listed twice", info.name),
            ));
        }
        positions.push(at);
        tensors.push(info);
    }
    let data_offset = r.pos.div_ceil(alignment).saturating_mul(alignment);
    for (info, at) in tensors.iter_mut().zip(positions) {
        info.bytes = check_tensor(path, info, at, alignment, data_offset, len)?;
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// `general.alignment`: a power of two of type `u32` (the spec's), else 32.
fn alignment(path: &Path, metadata: &[(String, Value)]) -> Result<u64> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, Value::U32(a))) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some((_, v)) => Err(bad(
            path,
            format!("metadata `general.alignment` is {v:?}: it must be a u32 power of two"),
        )),
    }
}

/// Checks one tensor's type, dimensions and offset against the file; returns its size in
/// bytes.
fn check_tensor(
    path: &Path,
    info: &TensorInfo,
    at: u64,
    alignment: u64,
    data_offset: u64,
    len: u64,
) -> Result<u64> {
    let name = &info.name;
    let t = info.ggml_type;
    let (Some(block_len), Some(block_bytes)) = (t.block_len(), t.block_bytes()) else {
        return Err(bad(
            path,
            format!("tensor `{name}` at byte {at}: unknown ggml type {}", t.0),
        ));
    };
    let elements = info
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= len.saturating_mul(block_len))
        .ok_or_else(|| {
            bad(
                path,
                format!(
                    "tensor `{name}` at byte {at}: dimensions {:?} hold more elements than the file's {len} bytes can",
                    info.dims
                ),
            )
        })?;
    let row = info.dims.first().copied().unwrap_or(1);
    if row % block_len != 0 {
        return Err(bad(
            path,
            format!(
                "tensor `{name}`: {t} stores blocks of {block_len} elements, its rows have {row}"
            ),
        ));
    }
    if !info.offset.is_multiple_of(alignment) {
        return Err(bad(
            path,
            format!(
                "tensor `{name}`: offset {} is not a multiple of the alignment {alignment}",
                info.offset
            ),
        ));
    }
    let bytes = elements / block_len * block_bytes;
    let end = data_offset
        .checked_add(info.offset)
        .and_then(|s| s.checked_add(bytes));
    match end {
        Some(end) if end <= len => Ok(bytes),
        _ => Err(bad(
            path,
            format!(
                "tensor `{name}`: its data (offset {} from byte {data_offset}, {bytes} bytes) lies beyond the end of the file ({len} bytes)",
                info.offset
            ),
        )),
    }
}
