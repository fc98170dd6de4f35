//! `format = "jsonl"`: JSON Lines, one document per line as an object with a text field and a
//! label field (`{"text": "…", "label": "sport"}`): `path/train.jsonl` and `path/test.jsonl`,
//! or `path` naming one `.jsonl` file, then split by a seeded stratified split
//! (`test_fraction`, `seed`).
//!
//! - Fields: `text_field` (default `"text"`) holds a string, `label_field` (default
//!   `"label"`) a string or an integer. Blank lines are skipped.
//! - Classes: the distinct labels in sorted order (numerically when every label is an
//!   integer, else byte-wise as text), from both splits.
//! - Text: as every text format ([`super::text`]): not-UTF-8 bytes decoded lossily with a
//!   warning, empty documents refused naming the file and line, exact duplicates never on
//!   both sides of a split, token ids `[max_len]` per document.

use super::bad;
use super::text::{self, Lossy, class_names, docs};
use crate::data::dataset::Dataset;
use crate::error::Result;
use std::path::{Path, PathBuf};

const FORMAT: &str = <JsonlOptions as crate::component::Component>::NAME;

/// `[data.options]` of `format = "jsonl"`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlOptions {
    /// A Hugging Face `tokenizer.json` (or a GGUF file, whose metadata's tokenizer is read),
    /// relative to the config's directory (required).
    pub tokenizer: PathBuf,
    /// Token ids per document: longer ones are truncated, shorter ones padded (default 128).
    #[serde(default = "text::default_max_len")]
    pub max_len: usize,
    /// The field that holds a document's text (default `"text"`).
    #[serde(default = "default_text_field")]
    pub text_field: String,
    /// The field that holds a document's label, a string or an integer (default `"label"`).
    #[serde(default = "default_label_field")]
    pub label_field: String,
    /// The share of each class's documents the seeded split puts into the test split, in
    /// `[0, 1)` (default 0.2); only when `path` names one file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_fraction: Option<f64>,
    /// The split's seed (default 0).
    #[serde(default)]
    pub seed: u64,
}

fn default_text_field() -> String {
    "text".into()
}

fn default_label_field() -> String {
    "label".into()
}

impl Default for JsonlOptions {
    fn default() -> Self {
        Self {
            tokenizer: PathBuf::from("tokenizer.json"),
            max_len: text::DEFAULT_MAX_LEN,
            text_field: default_text_field(),
            label_field: default_label_field(),
            test_fraction: None,
            seed: 0,
        }
    }
}

crate::component!(format "jsonl", "JSON Lines documents {\"text\": …, \"label\": …}: train.jsonl and test.jsonl, or one file with a seeded stratified split; token ids from a Hugging Face tokenizer.json", JsonlOptions, read, write);

/// One file's documents as `(text, label as written, source)`.
fn read_file(
    path: &Path,
    opts: &JsonlOptions,
    lossy: &mut Lossy,
) -> Result<Vec<(String, String, String)>> {
    let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| crate::error::Error::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let at = format!("{}:{}", path.display(), i + 1);
        let line = lossy.decode(line, &at);
        if line.trim().is_empty() {
            continue;
        }
        let here = |why: String| bad(path, FORMAT, format!("line {}: {why}", i + 1));
        let v: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| here(format!("not a JSON object: {e}")))?;
        let text = match v.get(&opts.text_field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(_) => return Err(here(format!("`{}` is not a string", opts.text_field))),
            None => return Err(here(format!("no `{}` field (text_field)", opts.text_field))),
        };
        let label = match v.get(&opts.label_field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => {
                return Err(here(format!(
                    "`{}` is neither a string nor an integer",
                    opts.label_field
                )));
            }
            None => {
                return Err(here(format!(
                    "no `{}` field (label_field)",
                    opts.label_field
                )));
            }
        };
        if text.trim().is_empty() {
            return Err(here(
                "the document is empty (nothing but white space)".into(),
            ));
        }
        out.push((text, label, at));
    }
    if out.is_empty() {
        return Err(bad(path, FORMAT, "no documents"));
    }
    Ok(out)
}

/// Reads `[data] path` as JSON Lines (module docs).
///
/// # Errors
/// A positioned [`crate::Error::Config`] for an unknown key, a missing `tokenizer`, or a
/// `test_fraction` outside `[0, 1)` or given beside `train.jsonl` and `test.jsonl`;
/// [`crate::Error::DataFile`] naming the file and line for a line that is not a JSON object, a
/// missing or mistyped field, an empty document; [`crate::Error::Io`] naming a file that is not
/// a regular file; the tokenizer's errors.
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let path = super::required_dir(req, FORMAT)?;
    let opts: JsonlOptions = req.options()?;
    let given = path.is_dir();
    let fraction = text::test_fraction(
        req,
        opts.test_fraction,
        given.then(|| {
            (
                format!(
                    "{} is a folder of train.jsonl and test.jsonl",
                    path.display()
                ),
                "name one .jsonl file as `path` to split it",
            )
        }),
    )?;
    let tok = text::tokenizer(req, &opts.tokenizer, opts.max_len)?;
    let mut lossy = Lossy::default();
    let (train, test, classes) = if given {
        let train = read_file(&path.join("train.jsonl"), &opts, &mut lossy)?;
        let test = read_file(&path.join("test.jsonl"), &opts, &mut lossy)?;
        let classes = class_names(train.iter().chain(&test).map(|r| r.1.as_str()));
        let train = docs(train, &classes);
        let test = text::drop_shared(&train, docs(test, &classes), FORMAT);
        (train, test, classes)
    } else {
        let rows = read_file(path, &opts, &mut lossy)?;
        let classes = class_names(rows.iter().map(|r| r.1.as_str()));
        let (train, test) = text::split(docs(rows, &classes), classes.len(), fraction, opts.seed);
        (train, test, classes)
    };
    lossy.warn(FORMAT);
    text::check_every_class(&train, &classes, path, FORMAT)?;
    let dir = if given {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let name = super::display_name(req, path);
    text::assemble(
        FORMAT,
        &name,
        dir,
        &tok,
        (&train, &test),
        classes,
        req.lm_window,
    )
}

/// Writing text back is not built yet ([`text::refuse_write`]).
///
/// # Errors
/// Always [`crate::Error::DataFile`].
pub fn write(_ds: &Dataset, dir: &Path) -> Result<()> {
    text::refuse_write(dir, FORMAT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_sort_numerically_when_every_label_is_an_integer() {
        assert_eq!(
            class_names(["10", "2", "2", "0"].into_iter()),
            ["0", "2", "10"]
        );
        assert_eq!(class_names(["b", "10", "a"].into_iter()), ["10", "a", "b"]);
    }
}
