//! A Hugging Face tokenizer (`tokenizer.json`, read by the `tokenizers` crate, offline) with
//! engram's own truncation and padding: texts become token ids `[n, max_len]`.
//!
//! The file's own `truncation` and `padding` sections are overridden (MiniLM's file fixes both
//! at 128): a text is encoded with the file's normaliser, pre-tokeniser, model and
//! post-processor (BERT's `[CLS] … [SEP]`), truncated at `max_len` ids special tokens included
//! (the end of the text is dropped, as Hugging Face's `truncation=True`), then padded on the
//! right with the pad id to exactly `max_len`. The ids equal Hugging Face's `tokenizers` with
//! `enable_truncation(max_length=max_len)` and `enable_padding(length=max_len)` (checked by a
//! test against `bench/reference/tokenizer_ids.py`'s output).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use tokenizers::PostProcessor as _;

/// The name errors give for a tokenizer file.
const WHAT: &str = "tokenizer.json";

/// A loaded `tokenizer.json` with engram's truncation and padding at `max_len`.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    max_len: usize,
    pad_id: u32,
    eos_id: Option<u32>,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("max_len", &self.max_len)
            .field("pad_id", &self.pad_id)
            .finish_non_exhaustive()
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    crate::data::format::bad(path, WHAT, reason)
}

impl TextTokenizer {
    /// Loads `path` (a Hugging Face `tokenizer.json`, or a GGUF file whose metadata holds a
    /// tokenizer: [`TextTokenizer::from_gguf`]) to encode texts into `max_len` ids each.
    ///
    /// The pad id is the file's `padding.pad_id` when it has a padding section, else the id of
    /// the vocabulary's `[PAD]` token.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be read or is not a regular file (a FIFO, a
    /// directory, a symbolic link that leads nowhere); [`Error::DataFile`] naming it when it is
    /// not a tokenizer the `tokenizers` crate reads, has no pad id, or `max_len` is below 2 or
    /// cannot hold its special tokens. Any `u32` id is taken: datasets store ids as `uint32`
    /// ([`crate::data::dataset::Values::Tokens`]), not as floats.
    pub fn load(path: &Path, max_len: usize) -> Result<Self> {
        if crate::gguf::is_gguf(path) {
            return Self::from_gguf(path, max_len);
        }
        let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_TEXT_BYTES)
            .map_err(|e| Error::io(path, e))?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| bad(path, format!("not a Hugging Face tokenizer file: {e}")))?;
        Self::with(inner, path, max_len, None)
    }

    /// [`TextTokenizer::load`] of a Hugging Face `tokenizer.json` with `pad_id` as its pad id,
    /// whatever the file says: for a decoder's tokenizer (a Llama's has neither a padding
    /// section nor a `[PAD]` token), where the caller takes the id from the model's
    /// `config.json` (`pad_token_id`, else `eos_token_id`, as [`TextTokenizer::from_gguf`]).
    ///
    /// # Errors
    /// As [`TextTokenizer::load`], less the missing pad id.
    pub fn load_with_pad(path: &Path, max_len: usize, pad_id: u32) -> Result<Self> {
        let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_TEXT_BYTES)
            .map_err(|e| Error::io(path, e))?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| bad(path, format!("not a Hugging Face tokenizer file: {e}")))?;
        Self::with(inner, path, max_len, Some(pad_id))
    }

    /// The tokenizer of a GGUF file's metadata
    /// ([`GgufFile::tokenizer`](crate::gguf::GgufFile::tokenizer): the ids
    /// `transformers` gives with `gguf_file=`), what [`TextTokenizer::load`] reads for a path
    /// named `*.gguf` (or starting with `GGUF`). Its pad id is `tokenizer.ggml.padding_token_id`,
    /// else the `eos` id (SmolLM2: 2, `<|im_end|>`).
    ///
    /// # Errors
    /// [`crate::gguf::GgufFile::open`]'s and `tokenizer`'s; [`Error::DataFile`] naming
    /// the file when it has neither a pad nor an `eos` id, and for `max_len` as
    /// [`TextTokenizer::load`].
    pub fn from_gguf(path: &Path, max_len: usize) -> Result<Self> {
        let t = crate::gguf::GgufFile::open(path)?.tokenizer()?;
        let pad = t.pad_id.or(t.eos_id).ok_or_else(|| {
            bad(
                path,
                "no pad id: the GGUF metadata has neither tokenizer.ggml.padding_token_id nor tokenizer.ggml.eos_token_id",
            )
        })?;
        Self::with(t.tokenizer, path, max_len, Some(pad))
    }

    /// `inner` with engram's truncation at `max_len` and no padding; `pad_id` when given, else
    /// the file's padding section's or its `[PAD]` token's.
    fn with(
        mut inner: tokenizers::Tokenizer,
        path: &Path,
        max_len: usize,
        pad_id: Option<u32>,
    ) -> Result<Self> {
        if max_len < 2 {
            return Err(bad(
                path,
                format!("max_len {max_len}: a sequence needs at least 2 ids"),
            ));
        }
        let pad_id = match (pad_id, inner.get_padding()) {
            (Some(id), _) => id,
            (None, Some(p)) => p.pad_id,
            (None, None) => inner.token_to_id("[PAD]").ok_or_else(|| {
                bad(
                    path,
                    "no pad id: the file has no `padding` section and its vocabulary no `[PAD]` token",
                )
            })?,
        };
        let special = inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if special >= max_len {
            return Err(bad(
                path,
                format!(
                    "max_len {max_len} cannot hold the {special} special tokens this tokenizer adds and any text"
                ),
            ));
        }
        inner
            .with_truncation(Some(tokenizers::TruncationParams {
                direction: tokenizers::TruncationDirection::Right,
                max_length: max_len,
                strategy: tokenizers::TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| bad(path, format!("truncation at {max_len}: {e}")))?;
        inner.with_padding(None);
        Ok(Self {
            inner,
            path: path.to_path_buf(),
            max_len,
            pad_id,
            eos_id: None,
        })
    }

    /// A decoder's tokenizer for language modelling (`[train] objective = "lm"`): `path` read
    /// as [`TextTokenizer::load`] with no truncation below `max_len`, and its end-of-sequence
    /// id ([`TextTokenizer::eos_id`]) — a GGUF file's `tokenizer.ggml.eos_token_id`; for a
    /// `tokenizer.json`, the `eos_token_id` of the `config.json` beside it (a Hugging Face
    /// model directory), which also gives the pad id when the file has none (`pad_token_id`,
    /// else the eos id, as `engram perplexity` reads such a directory). Without an eos id the
    /// documents of a text are concatenated with nothing between them.
    ///
    /// # Errors
    /// As [`TextTokenizer::load`]; [`Error::DataFile`] naming `config.json` when it is there
    /// but not JSON.
    pub fn load_decoder(path: &Path, max_len: usize) -> Result<Self> {
        if crate::gguf::is_gguf(path) {
            let eos = crate::gguf::GgufFile::open(path)?.tokenizer()?.eos_id;
            let mut t = Self::from_gguf(path, max_len)?;
            t.eos_id = eos;
            return Ok(t);
        }
        let config = path.with_file_name("config.json");
        let (eos, pad) = if config.is_file() {
            let bytes = crate::fsutil::read_bounded(&config, crate::fsutil::MAX_TEXT_BYTES)
                .map_err(|e| Error::io(&config, e))?;
            let json: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| bad(&config, format!("not JSON: {e}")))?;
            let id = |k: &str| json[k].as_u64().and_then(|v| u32::try_from(v).ok());
            (id("eos_token_id"), id("pad_token_id"))
        } else {
            (None, None)
        };
        let mut t = match pad.or(eos) {
            Some(p) => Self::load_with_pad(path, max_len, p)?,
            None => Self::load(path, max_len)?,
        };
        t.eos_id = eos;
        Ok(t)
    }

    /// The end-of-sequence id a language model's documents end with, when this tokenizer was
    /// loaded for one ([`TextTokenizer::load_decoder`]); `None` otherwise.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// Ids per text (`max_len`).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The id that fills a text's ids after its last token.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The tokenizer file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The vocabulary's size, added tokens included (every id is below it).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// One text's ids, `[max_len]`, appended to `out`: special tokens added, truncated, padded
    /// with [`TextTokenizer::pad_id`]. Returns how many are tokens (the rest are padding).
    ///
    /// # Errors
    /// [`Error::DataFile`] naming the tokenizer file when the `tokenizers` crate fails on the
    /// text.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<usize> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| bad(&self.path, format!("cannot encode a text: {e}")))?;
        let ids = enc.get_ids();
        let n = ids.len().min(self.max_len);
        out.extend_from_slice(&ids[..n]);
        out.extend(std::iter::repeat_n(self.pad_id, self.max_len - n));
        Ok(n)
    }

    /// One text's ids with the tokenizer's own special tokens (a GGUF's `bos` when its
    /// `add_bos_token` says so; BERT's `[CLS] … [SEP]`), truncated at `max_len`, **not** padded:
    /// `[n]`, `n ≤ max_len`. What a language model reads (`engram perplexity`, `engram
    /// generate`).
    ///
    /// # Errors
    /// [`Error::DataFile`] naming the tokenizer file when the `tokenizers` crate fails on the
    /// text.
    pub fn encode_ids(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| bad(&self.path, format!("cannot encode a text: {e}")))?;
        let ids = enc.get_ids();
        Ok(ids[..ids.len().min(self.max_len)].to_vec())
    }

    /// The text of `ids` (the tokenizer's decoder: byte-level BPE back to UTF-8), special
    /// tokens left out when `skip_special`.
    ///
    /// # Errors
    /// [`Error::DataFile`] naming the tokenizer file when an id is not in its vocabulary or the
    /// decoder fails.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| bad(&self.path, format!("cannot decode ids: {e}")))
    }

    /// The ids of `texts`, row-major `[texts.len(), max_len]` ([`TextTokenizer::encode_into`]),
    /// encoded on engram's thread pool (rayon's), in order.
    ///
    /// # Errors
    /// As [`TextTokenizer::encode_into`] (the first failing text's).
    pub fn encode<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<u32>> {
        use rayon::prelude::*;
        let rows: Vec<Vec<u32>> = texts
            .par_iter()
            .map(|t| {
                let mut row = Vec::with_capacity(self.max_len);
                self.encode_into(t.as_ref(), &mut row).map(|_| row)
            })
            .collect::<Result<_>>()?;
        Ok(rows.concat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tokenizer-tiny")
    }

    /// Checks `reference` (bench/reference/tokenizer_ids.py's JSON) against `tokenizer`;
    /// returns engram's ids and `max_len`.
    fn check_reference(reference: &Path, tokenizer: &Path) -> (Vec<u32>, usize) {
        let text = std::fs::read_to_string(reference).unwrap();
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        let max_len = r["max_len"].as_u64().unwrap() as usize;
        let tok = TextTokenizer::load(tokenizer, max_len).unwrap();
        assert_eq!(u64::from(tok.pad_id()), r["pad_id"].as_u64().unwrap());
        let texts: Vec<&str> = r["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let want: Vec<u32> = r["ids"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(&texts).unwrap();
        assert_eq!(got.len(), texts.len() * max_len);
        assert_eq!(got, want, "{}", reference.display());
        (got, max_len)
    }

    /// With `ENGRAM_TOKENIZER_REFERENCE=FILE` (bench/reference/tokenizer_ids.py --tokenizer
    /// PATH --out FILE, e.g. MiniLM's tokenizer.json, which is not committed), engram's ids
    /// equal Hugging Face's for that tokenizer too.
    #[test]
    fn ids_equal_hugging_face_on_a_given_tokenizer() {
        let Some(file) = std::env::var_os("ENGRAM_TOKENIZER_REFERENCE") else {
            eprintln!("ENGRAM_TOKENIZER_REFERENCE unset: checked on the committed tokenizer only");
            return;
        };
        let file = PathBuf::from(file);
        let text = std::fs::read_to_string(&file).unwrap();
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        let tokenizer = PathBuf::from(r["tokenizer"].as_str().unwrap());
        check_reference(&file, &tokenizer);
    }

    /// engram's ids equal Hugging Face's `tokenizers` (bench/reference/tokenizer_ids.py) for
    /// every reference text: truncated, empty, accented, CJK, unknown words; although the file
    /// itself fixes truncation and padding at 128.
    #[test]
    fn ids_equal_hugging_face_with_engram_truncation_and_padding() {
        let (got, max_len) = check_reference(
            &tiny().join("reference.json"),
            &tiny().join("tokenizer.json"),
        );
        assert_eq!(got.len(), 8 * max_len);
        // The empty text: [CLS] [SEP] then padding.
        assert_eq!(&got[4 * max_len..4 * max_len + 3], &[2, 3, 0]);
    }

    #[test]
    fn bad_files_and_lengths_are_data_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("tokenizer.json");
        std::fs::write(&junk, "{\"not\": 1}").unwrap();
        let err = TextTokenizer::load(&junk, 8).unwrap_err();
        assert!(
            matches!(&err, Error::DataFile { path, .. } if *path == junk),
            "{err}"
        );
        let real = tiny().join("tokenizer.json");
        // [CLS] and [SEP] leave no room in 2.
        let err = TextTokenizer::load(&real, 2).unwrap_err();
        assert!(err.to_string().contains("2 special tokens"), "{err}");
        let missing = dir.path().join("none.json");
        assert!(matches!(
            TextTokenizer::load(&missing, 8),
            Err(Error::Io { .. })
        ));
        // Without a padding section the pad id is the vocabulary's [PAD] (0 here).
        let mut j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&real).unwrap()).unwrap();
        j["padding"] = serde_json::Value::Null;
        std::fs::write(&junk, j.to_string()).unwrap();
        let tok = TextTokenizer::load(&junk, 5).unwrap();
        assert_eq!(tok.pad_id(), 0);
        assert_eq!(tok.encode(&["the"]).unwrap(), [2, 58, 3, 0, 0]);
    }
}
