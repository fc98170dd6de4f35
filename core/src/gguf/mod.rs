//! GGUF files (llama.cpp's model format, version 3): the metadata, the tensor table, tensors
//! read lazily by name and dequantised to `f32`, and the tokenizer the metadata describes.
//!
//! The format (ggml's `docs/gguf.md`): a little-endian header (magic `GGUF`, version `u32`,
//! tensor count `u64`, metadata count `u64`); the metadata, each a key (a `u64`-length UTF-8
//! string) and a typed value (13 types: the integers of 8 to 64 bits, `f32`, `f64`, `bool`,
//! strings and arrays of any of them); the tensor table, each a name, a rank `u32`, the
//! dimensions `ne[0..rank]` as `u64`, a ggml type `u32` and an offset `u64` into the data
//! section; then the data section, starting at the next multiple of the alignment
//! (`general.alignment`, 32 when absent), each tensor at its offset from there.
//!
//! # Shapes
//! GGUF lists dimensions fastest-varying first: `ne[0]` is the length of a row in memory. A
//! matrix of `ne = [cols, rows]` holds `rows` rows of `cols` contiguous values, so its
//! row-major shape is the dimensions reversed, `[rows, cols]`. [`TensorInfo::dims`] keeps the
//! file's order; [`TensorInfo::shape`] and [`GgufFile::tensor_f32`] give the row-major one
//! (`token_embd.weight` of SmolLM2: `dims = [576, 49152]`, shape `[49152, 576]`, one row per
//! token; a linear layer's weight `[out_features, in_features]`, as PyTorch's `nn.Linear`).
//!
//! # Bad files
//! Every defect is an [`Error::DataFile`] (format `gguf`) naming the file: a wrong magic or
//! version, a file that ends early (with the byte offset and what was being read), a count,
//! string or array longer than what is left of the file, nested arrays deeper than
//! [`MAX_ARRAY_DEPTH`], more metadata array elements than [`MAX_METADATA_ELEMENTS`], an
//! unknown value or ggml type, a tensor whose data lies beyond the end of the file, a rank
//! above 4, a misaligned offset, a repeated tensor name. No length field is trusted for an
//! allocation before it is checked against the bytes the file has left (and no list reserves
//! more than 65,536 items ahead of those it has read); nothing panics.

mod dequant;
mod read;
mod tokenizer;

pub use dequant::dequantize;
pub use tokenizer::GgufTokenizer;

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The format name in errors ([`Error::DataFile`]).
const FORMAT: &str = "gguf";

/// Whether `path` names a GGUF file: named `*.gguf` (any case), or a regular file whose first
/// four bytes are the magic `GGUF`. The one rule by which `[model] init` and a tokenizer path
/// tell a GGUF file from a Hugging Face directory, safetensors or `tokenizer.json`; reads at
/// most 4 bytes, and a file it cannot read is not GGUF (its reader reports the error).
pub fn is_gguf(path: &Path) -> bool {
    let named = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    named
        || (path.is_file() && {
            let mut head = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| f.read_exact(&mut head))
                .is_ok()
                && &head == b"GGUF"
        })
}

/// The deepest nesting of arrays in a metadata value (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 4;

/// The most array elements the metadata may hold, all arrays together: 16 Mi, 64 times the
/// largest vocabulary's tokens, merges and scores (Gemma's 256 Ki each). Bounds the memory a
/// file's metadata can claim (each element a [`Value`] of 32 bytes: 512 MiB at most).
pub const MAX_METADATA_ELEMENTS: u64 = 1 << 24;

/// The alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// A metadata value: one of GGUF's 13 value types.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `UINT8` (type 0).
    U8(u8),
    /// `INT8` (type 1).
    I8(i8),
    /// `UINT16` (type 2).
    U16(u16),
    /// `INT16` (type 3).
    I16(i16),
    /// `UINT32` (type 4).
    U32(u32),
    /// `INT32` (type 5).
    I32(i32),
    /// `FLOAT32` (type 6).
    F32(f32),
    /// `BOOL` (type 7): one byte, 0 or 1 (any other byte is refused).
    Bool(bool),
    /// `STRING` (type 8): UTF-8.
    String(String),
    /// `ARRAY` (type 9): the element type and the elements (all of that type).
    Array(ValueType, Vec<Value>),
    /// `UINT64` (type 10).
    U64(u64),
    /// `INT64` (type 11).
    I64(i64),
    /// `FLOAT64` (type 12).
    F64(f64),
}

/// A metadata value's type code (GGUF's `gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// 0.
    U8,
    /// 1.
    I8,
    /// 2.
    U16,
    /// 3.
    I16,
    /// 4.
    U32,
    /// 5.
    I32,
    /// 6.
    F32,
    /// 7.
    Bool,
    /// 8.
    String,
    /// 9.
    Array,
    /// 10.
    U64,
    /// 11.
    I64,
    /// 12.
    F64,
}

impl Value {
    /// The value as an unsigned integer: any integer type that is not negative (`bool`s and
    /// floats are not integers).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer (any integer type that fits an `i64`).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float: `F32` and `F64` (`F64` rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// The value of a `BOOL`.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value of a `STRING`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements of an `ARRAY`.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

/// A ggml tensor type (`enum ggml_type` of ggml's `ggml.h`): its code, name, block length in
/// elements and block size in bytes. Every type ggml defines is known here (for the bounds of
/// the tensor table); [`GgufFile::tensor_f32`] dequantises F32, F16, Q4_0, Q4_1 and Q8_0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType(pub u32);

/// ggml's types: (code, name, elements per block, bytes per block), from ggml's
/// `ggml.c` `type_traits` (the same as the `gguf` package's `GGML_QUANT_SIZES`). Codes 4, 5
/// and 31..=33, 36..=38 were removed from ggml.
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    /// 32-bit floats.
    pub const F32: GgmlType = GgmlType(0);
    /// IEEE half floats.
    pub const F16: GgmlType = GgmlType(1);
    /// Blocks of 32: an `f16` scale and 32 4-bit values.
    pub const Q4_0: GgmlType = GgmlType(2);
    /// Blocks of 32: an `f16` scale, an `f16` minimum and 32 4-bit values.
    pub const Q4_1: GgmlType = GgmlType(3);
    /// Blocks of 32: an `f16` scale and 32 `i8` values.
    pub const Q8_0: GgmlType = GgmlType(8);

    fn traits(self) -> Option<&'static (u32, &'static str, u64, u64)> {
        GGML_TYPES.iter().find(|t| t.0 == self.0)
    }

    /// The type's name as ggml spells it (`Q4_1`), or `type N` for a code ggml does not define.
    pub fn name(self) -> String {
        self.traits()
            .map_or_else(|| format!("type {}", self.0), |t| t.1.to_string())
    }

    /// Elements per block (1 for the float and integer types), when ggml defines the type.
    pub fn block_len(self) -> Option<u64> {
        self.traits().map(|t| t.2)
    }

    /// Bytes per block, when ggml defines the type.
    pub fn block_bytes(self) -> Option<u64> {
        self.traits().map(|t| t.3)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// The dimensions as GGUF orders them: `dims[0]` (ggml's `ne[0]`) varies fastest.
    pub dims: Vec<u64>,
    /// The element type.
    pub ggml_type: GgmlType,
    /// The offset of the data from the start of the data section, in bytes.
    pub offset: u64,
    /// The size of the data in bytes (blocks × block size).
    pub bytes: u64,
}

impl TensorInfo {
    /// The row-major shape: [`TensorInfo::dims`] reversed (`[rows, cols]` for a matrix).
    pub fn shape(&self) -> Vec<usize> {
        // Each dimension was checked against the file's size on open, so it fits a usize.
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// The number of elements (the product of the dimensions; 1 for a rank-0 tensor).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// An open GGUF file: its header, metadata and tensor table, read on open; tensor data read
/// on demand ([`GgufFile::tensor_f32`], [`GgufFile::tensor_bytes`]).
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    file: Mutex<std::fs::File>,
    version: u32,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    file_len: u64,
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    crate::data::format::bad(path, FORMAT, reason)
}

impl GgufFile {
    /// Opens `path` and reads its header, metadata and tensor table (not the tensor data).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened or is not a regular file;
    /// [`Error::DataFile`] naming it for any defect listed in the module's "Bad files".
    pub fn open(path: &Path) -> Result<Self> {
        let file_len =
            crate::fsutil::check_regular(path, u64::MAX).map_err(|e| Error::io(path, e))?;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let parsed = read::parse(path, &file, file_len)?;
        let index = parsed
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            version: parsed.version,
            metadata: parsed.metadata,
            index,
            tensors: parsed.tensors,
            tensor_index,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
            file_len,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version (2 or 3; version 2 differs from 3 only in not allowing big-endian).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment in bytes (`general.alignment`, else 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The data section's position in the file, in bytes.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The value of metadata `key` (`llama.block_count`), if the file has it.
    pub fn metadata(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every metadata key and value, in the file's order.
    pub fn metadata_entries(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The tensor table, in the file's order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The table entry of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of tensor `name`, as stored (blocks of its [`GgmlType`]).
    ///
    /// # Errors
    /// [`Error::DataFile`] naming the file when it has no tensor `name` or the file became
    /// shorter since it was opened; [`Error::Io`] when reading fails.
    pub fn tensor_bytes(&self, name: &str) -> Result<Vec<u8>> {
        let info = self.find(name)?;
        let start = self.data_offset + info.offset;
        // Checked on open: start + bytes <= file_len, so `bytes` fits in memory's address space
        // only as much as the file does.
        let mut buf = vec![0u8; info.bytes as usize];
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => bad(
                    &self.path,
                    format!(
                        "tensor `{name}`: the file ends before its data (bytes {start}..{}); it was {} bytes when opened",
                        start + info.bytes,
                        self.file_len
                    ),
                ),
                _ => Error::io(&self.path, e),
            })?;
        Ok(buf)
    }

    /// Tensor `name` dequantised to `f32`: its row-major shape ([`TensorInfo::shape`], GGUF's
    /// dimensions reversed) and its values in that order (GGUF's storage order).
    ///
    /// # Errors
    /// As [`GgufFile::tensor_bytes`]; [`Error::DataFile`] naming the tensor and its type when
    /// the type is not one [`dequantize`] reads.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let info = self.find(name)?;
        if !dequant::supported(info.ggml_type) {
            return Err(bad(
                &self.path,
                format!(
                    "tensor `{name}`: unsupported ggml type {} (engram dequantises F32, F16, Q4_0, Q4_1 and Q8_0)",
                    info.ggml_type
                ),
            ));
        }
        let bytes = self.tensor_bytes(name)?;
        let values = dequantize(info.ggml_type, &bytes, info.elements() as usize)
            .map_err(|reason| bad(&self.path, format!("tensor `{name}`: {reason}")))?;
        Ok((info.shape(), values))
    }

    fn find(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_info(name).ok_or_else(|| {
            let near = self
                .tensors
                .iter()
                .map(|t| (strsim::levenshtein(&t.name, name), &t.name))
                .min();
            let hint = near.map_or_else(String::new, |(_, n)| format!("; the nearest is `{n}`"));
            bad(
                &self.path,
                format!(
                    "no tensor `{name}` among its {} tensors{hint}",
                    self.tensors.len()
                ),
            )
        })
    }

    /// A metadata string, or a typed error naming `key` (for required keys).
    ///
    /// # Errors
    /// [`Error::DataFile`] when `key` is absent or not a string.
    pub fn require_str(&self, key: &str) -> Result<&str> {
        match self.metadata(key) {
            Some(v) => v.as_str().ok_or_else(|| {
                bad(
                    &self.path,
                    format!("metadata `{key}` is {v:?}, not a string"),
                )
            }),
            None => Err(bad(&self.path, format!("no metadata `{key}`"))),
        }
    }

    /// A metadata unsigned integer, or a typed error naming `key` (for required keys).
    ///
    /// # Errors
    /// [`Error::DataFile`] when `key` is absent or not a non-negative integer.
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        match self.metadata(key) {
            Some(v) => v.as_u64().ok_or_else(|| {
                bad(
                    &self.path,
                    format!(
                        "metadata `{key}` is {}, not a non-negative integer",
                        short(v)
                    ),
                )
            }),
            None => Err(bad(&self.path, format!("no metadata `{key}`"))),
        }
    }
}

/// A value for a message: arrays by type and length only.
fn short(v: &Value) -> String {
    match v {
        Value::Array(t, items) => format!("an array of {} {t:?}", items.len()),
        Value::String(s) if s.len() > 60 => format!("a string of {} bytes", s.len()),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests;
