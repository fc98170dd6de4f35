//! What the text formats (`text-folder`, `jsonl`) share: reading a document's bytes, the
//! seeded stratified split that keeps exact duplicates on one side, and the token dataset.
//!
//! A text dataset's sample is `InputShape::Features(max_len)` whose values are token ids
//! (`Values::Tokens`, `uint32`: 4 bytes an id, exact for any vocabulary), truncated and padded
//! with the tokenizer's pad id ([`crate::data::tokenizer::TextTokenizer`]); its normalisation
//! is the identity (mean 0, std 1) and batches carry the ids as `Int`, so that a run never
//! changes an id.
//!
//! - **Bytes that are not UTF-8** are decoded lossily (each bad sequence becomes U+FFFD, which
//!   the tokenizer reads as an unknown token) with one warning that counts the documents and
//!   names the first: real corpora carry a few Latin-1 bytes, and refusing a whole corpus for
//!   one `£` helps no one.
//! - **Empty documents** (nothing but white space) are refused, naming the file: a sample of
//!   `[CLS] [SEP]` carries no text to learn from.
//! - **Duplicates**: exact duplicate texts are never on both sides of a split. The seeded split
//!   places each distinct text once; given splits lose the test documents whose text is also a
//!   training one (with a warning that counts them).

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::dataset::{Dataset, Values};
use crate::data::tokenizer::TextTokenizer;
use crate::error::{Error, Result};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::collections::HashMap;
use std::path::Path;

/// The default `max_len`: ids per text.
pub const DEFAULT_MAX_LEN: usize = 128;

/// The default `test_fraction` of the seeded split.
pub const DEFAULT_TEST_FRACTION: f64 = 0.2;

/// The test share of a seeded split: `test_fraction` (default [`DEFAULT_TEST_FRACTION`]) in
/// `[0, 1)`. `given` is `Some((what, how))` when the data already holds its split (`what`
/// names it; `how` says how to have it split instead), where `test_fraction` is refused.
///
/// # Errors
/// [`Error::Config`] at the `test_fraction` key, from `req`'s options.
pub fn test_fraction(
    req: &crate::data::DatasetRequest<'_>,
    test_fraction: Option<f64>,
    given: Option<(String, &str)>,
) -> Result<f64> {
    if let (Some((what, how)), Some(_)) = (&given, test_fraction) {
        return Err(req.options.key_error(
            "test_fraction",
            format!("`test_fraction`: {what}, which are the split"),
            Some(format!("remove test_fraction, or {how}")),
        ));
    }
    let fraction = test_fraction.unwrap_or(DEFAULT_TEST_FRACTION);
    if !(0.0..1.0).contains(&fraction) {
        return Err(req.options.key_error(
            "test_fraction",
            format!("`test_fraction`: {fraction} is not in [0, 1)"),
            None,
        ));
    }
    Ok(fraction)
}

/// The default for `max_len`.
pub fn default_max_len() -> usize {
    DEFAULT_MAX_LEN
}

/// The default for `test_fraction`.
pub fn default_test_fraction() -> f64 {
    DEFAULT_TEST_FRACTION
}

/// One document: its text, its class index and where it came from (named by errors).
#[derive(Clone, Debug)]
pub struct Doc {
    /// The text.
    pub text: String,
    /// Its class index (in the sorted class names).
    pub label: u32,
    /// The file it came from, with `:LINE` for a line of a JSON Lines file.
    pub source: String,
}

/// Counts the documents that were not valid UTF-8 (decoded lossily) for one warning.
#[derive(Debug, Default)]
pub struct Lossy {
    count: usize,
    first: Option<String>,
}

impl Lossy {
    /// `bytes` as text, invalid UTF-8 replaced by U+FFFD and counted against `source`.
    pub fn decode(&mut self, bytes: &[u8], source: &str) -> String {
        match String::from_utf8_lossy(bytes) {
            std::borrow::Cow::Borrowed(s) => s.to_string(),
            std::borrow::Cow::Owned(s) => {
                self.count += 1;
                self.first.get_or_insert_with(|| source.to_string());
                s
            }
        }
    }

    /// Prints the warning when any document was decoded lossily.
    pub fn warn(&self, format: &str) {
        if let Some(first) = &self.first {
            eprintln!(
                "warning: {format}: {} document(s) are not valid UTF-8; their bad bytes were read as U+FFFD (first: {first})",
                self.count
            );
        }
    }
}

/// Refuses a document of white space only, naming `path`.
///
/// # Errors
/// [`Error::DataFile`] naming `path`.
pub fn check_not_empty(text: &str, path: &Path, format: &'static str, what: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(bad(
            path,
            format,
            format!("{what} is empty (nothing but white space); remove it or give it text"),
        ));
    }
    Ok(())
}

/// Splits `docs` into `(train, test)`: stratified by class (each class gives
/// `round(test_fraction · its documents)` to the test split, at least one when it has two
/// distinct texts, and keeps at least one text for training), drawn by a ChaCha8 generator
/// seeded with `seed`, each distinct text placed as a whole (its duplicates on the same side,
/// counted in the class of its first document; a text whose copies would overshoot the count
/// is passed over for a smaller one, unless it is the first drawn). Both sides keep the
/// documents' order.
pub fn split(
    docs: Vec<Doc>,
    classes: usize,
    test_fraction: f64,
    seed: u64,
) -> (Vec<Doc>, Vec<Doc>) {
    // Distinct texts in order of first appearance, with their documents.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let g = *index.entry(d.text.as_str()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); classes];
    for (g, members) in groups.iter().enumerate() {
        by_class[docs[members[0]].label as usize].push(g);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut test = vec![false; docs.len()];
    for class_groups in &mut by_class {
        class_groups.shuffle(&mut rng);
        let total: usize = class_groups.iter().map(|&g| groups[g].len()).sum();
        let want = (test_fraction * total as f64).round() as usize;
        let want = if class_groups.len() >= 2 && test_fraction > 0.0 {
            want.max(1)
        } else {
            want
        };
        let mut taken = 0;
        // The last group always stays for training; a group that would overshoot `want` is
        // passed over for a smaller one (unless nothing was taken yet).
        for &g in &class_groups[..class_groups.len().saturating_sub(1)] {
            if taken >= want {
                break;
            }
            let n = groups[g].len();
            if taken > 0 && taken + n > want {
                continue;
            }
            taken += n;
            groups[g].iter().for_each(|&i| test[i] = true);
        }
    }
    let (mut train, mut tests) = (Vec::new(), Vec::new());
    for (d, t) in docs.into_iter().zip(test) {
        if t { tests.push(d) } else { train.push(d) }
    }
    (train, tests)
}

/// The sorted class names of `labels` (deduplicated): numerically when every one is an
/// integer, else byte-wise.
pub fn class_names<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = labels.map(str::to_string).collect();
    names.sort();
    names.dedup();
    if names.iter().all(|n| n.parse::<i128>().is_ok()) {
        names.sort_by_key(|n| n.parse::<i128>().unwrap_or(0));
    }
    names
}

/// Rows `(text, label as written, source)` as documents, labelled by their position in
/// `classes` (which holds every label).
pub fn docs(rows: Vec<(String, String, String)>, classes: &[String]) -> Vec<Doc> {
    rows.into_iter()
        .map(|(text, label, source)| Doc {
            label: classes.iter().position(|c| *c == label).unwrap_or(0) as u32,
            text,
            source,
        })
        .collect()
}

/// Refuses a class without training documents, naming `path`.
///
/// # Errors
/// [`Error::DataFile`] naming `path` and the class.
pub fn check_every_class(
    train: &[Doc],
    classes: &[String],
    path: &Path,
    format: &'static str,
) -> Result<()> {
    for (c, name) in classes.iter().enumerate() {
        if !train.iter().any(|d| d.label as usize == c) {
            return Err(bad(
                path,
                format,
                format!("class `{name}` has no training document"),
            ));
        }
    }
    Ok(())
}

/// Drops the test documents whose exact text is also a training document's, warning with
/// their count (given splits: a duplicate on both sides would score memorisation).
pub fn drop_shared(train: &[Doc], test: Vec<Doc>, format: &str) -> Vec<Doc> {
    let seen: std::collections::HashSet<&str> = train.iter().map(|d| d.text.as_str()).collect();
    let before = test.len();
    let kept: Vec<Doc> = test
        .into_iter()
        .filter(|d| !seen.contains(d.text.as_str()))
        .collect();
    if kept.len() < before {
        eprintln!(
            "warning: {format}: dropped {} test document(s) whose exact text is also in the train split",
            before - kept.len()
        );
    }
    kept
}

/// Tokenizes both splits and assembles the token dataset (module docs): shape
/// `[max_len]`, ids as `uint32` ([`Values::Tokens`]), mean 0 and std 1, `class_names` in label order;
/// with `window` (a language-model run, [`crate::data::DatasetRequest::lm_window`]) the
/// windows of [`assemble_windows`] instead.
///
/// # Errors
/// [`Error::DataFile`] naming `dir` when a split has no documents; the tokenizer's errors;
/// [`super::assemble`]'s.
pub fn assemble(
    format: &'static str,
    name: &str,
    dir: &Path,
    tok: &TextTokenizer,
    (train, test): (&[Doc], &[Doc]),
    class_names: Vec<String>,
    window: Option<usize>,
) -> Result<Dataset> {
    if let Some(w) = window {
        return assemble_windows(format, name, dir, tok, (train, test), w);
    }
    let raw = |docs: &[Doc], what: &str| -> Result<Raw> {
        if docs.is_empty() {
            return Err(bad(
                dir,
                format,
                format!("the {what} split has no documents"),
            ));
        }
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        let ids = tok.encode(&texts)?;
        Ok(Raw {
            values: Values::Tokens(ids),
            labels: docs.iter().map(|d| d.label).collect(),
        })
    };
    let meta = Meta {
        class_names: Some(class_names),
        mean: Some(vec![0.0]),
        std: Some(vec![1.0]),
        ..Meta::default()
    };
    super::assemble(
        format,
        name,
        dir,
        raw(train, "train")?,
        raw(test, "test")?,
        InputShape::Features(tok.max_len()),
        Some(meta),
    )
}

/// A language-model run's dataset of one split pair: each split's documents encoded by `tok`
/// (its own special tokens, no truncation), each followed by `tok`'s end-of-sequence id,
/// concatenated and cut into windows of `window` tokens, the last partial window dropped
/// ([`crate::data::windows::chunk_windows`], as `engram perplexity` cuts a text). Shape
/// `[window]`, ids as `uint32`, one class `text` (every label 0: a window is no class).
///
/// # Errors
/// [`Error::DataFile`] naming `dir` when a split has no documents or too few tokens for one
/// window; the tokenizer's errors.
pub fn assemble_windows(
    format: &'static str,
    name: &str,
    dir: &Path,
    tok: &TextTokenizer,
    (train, test): (&[Doc], &[Doc]),
    window: usize,
) -> Result<Dataset> {
    use rayon::prelude::*;
    let raw = |docs: &[Doc], what: &str| -> Result<Raw> {
        let ids: Vec<Vec<u32>> = docs
            .par_iter()
            .map(|d| tok.encode_ids(&d.text))
            .collect::<Result<_>>()?;
        let windows = crate::data::windows::chunk_windows(&ids, tok.eos_id(), window)?;
        if windows.is_empty() {
            let tokens: usize = ids.iter().map(|d| d.len() + 1).sum();
            return Err(bad(
                dir,
                format,
                format!(
                    "the {what} split's {} documents hold {tokens} tokens (eos included), fewer than one language-model window of {window}",
                    docs.len()
                ),
            ));
        }
        Ok(Raw {
            labels: vec![0; windows.len()],
            values: Values::Tokens(windows.concat()),
        })
    };
    let meta = Meta {
        class_names: Some(vec!["text".into()]),
        mean: Some(vec![0.0]),
        std: Some(vec![1.0]),
        ..Meta::default()
    };
    super::assemble(
        format,
        name,
        dir,
        raw(train, "train")?,
        raw(test, "test")?,
        InputShape::Features(window),
        Some(meta),
    )
}

/// A document's most tokens in a language-model run: far above any document a bounded file
/// holds, so that nothing is cut before the documents are chunked into windows.
pub const LM_MAX_TOKENS: usize = 1 << 24;

/// Loads `[data.options] tokenizer` (resolved against the config's directory) for `max_len`;
/// in a language-model run ([`crate::data::DatasetRequest::lm_window`]) as a decoder's
/// tokenizer with its eos id and no truncation ([`TextTokenizer::load_decoder`]; `max_len` is
/// then not used).
///
/// # Errors
/// As [`TextTokenizer::load`].
pub fn tokenizer(
    req: &crate::data::DatasetRequest<'_>,
    path: &Path,
    max_len: usize,
) -> Result<TextTokenizer> {
    match req.lm_window {
        Some(_) => TextTokenizer::load_decoder(&req.resolve(path), LM_MAX_TOKENS),
        None => TextTokenizer::load(&req.resolve(path), max_len),
    }
}

/// A text writer's refusal: writing text back is not built yet.
///
/// # Errors
/// Always [`Error::DataFile`] naming `dir`.
pub fn refuse_write(dir: &Path, format: &'static str) -> Result<()> {
    Err(bad(
        dir,
        format,
        "writing text datasets is not supported yet (the dataset holds token ids, not text); export to npy to keep the ids",
    ))
}

/// A path that is a file of the data but a symbolic-link loop or a FIFO is refused by
/// [`crate::fsutil::read_bounded`]: this reads one document, naming the file on any error.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn read_doc(path: &Path) -> Result<Vec<u8>> {
    crate::fsutil::read_bounded(path, crate::fsutil::MAX_TEXT_BYTES).map_err(|e| Error::io(path, e))
}
