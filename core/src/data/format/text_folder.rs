//! `format = "text-folder"`: one plain-text file per document, in a folder per class, as
//! `image-folder`: `path/train/<class>/*.txt` and `path/test/<class>/*.txt`, or only
//! `path/<class>/*.txt`, then split by a seeded stratified split (`test_fraction`, `seed`).
//!
//! - Class index: the position of the class folder's name in the sorted (byte-wise) list of
//!   class folders (of `train/` when given); a test folder must be one of them.
//! - Documents: the `.txt` files of a class folder and of its subfolders (16 levels at most:
//!   deeper is a symbolic-link loop), in sorted path order; files whose name starts with `.`
//!   are ignored, other files are skipped with a warning that counts them. A FIFO, a device
//!   or a link that leads nowhere named `*.txt` is refused by name.
//! - Text: as every text format ([`super::text`]): not-UTF-8 bytes decoded lossily with a
//!   warning, empty documents refused, exact duplicates never on both sides of a split,
//!   token ids `[max_len]` per document.
//! - `dataset.toml` is not read: the classes are the folders, the normalisation the identity.

use super::bad;
use super::text::{self, Doc, Lossy};
use crate::data::dataset::Dataset;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

const FORMAT: &str = <TextFolderOptions as crate::component::Component>::NAME;

/// How deep class folders may nest before it is taken for a symbolic-link loop.
const MAX_DEPTH: usize = 16;

/// `[data.options]` of `format = "text-folder"`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextFolderOptions {
    /// A Hugging Face `tokenizer.json` (or a GGUF file, whose metadata's tokenizer is read),
    /// relative to the config's directory (required).
    pub tokenizer: PathBuf,
    /// Token ids per document: longer ones are truncated, shorter ones padded (default 128).
    #[serde(default = "text::default_max_len")]
    pub max_len: usize,
    /// The share of each class's documents the seeded split puts into the test split, in
    /// `[0, 1)` (default 0.2); only without `train/` and `test/` folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_fraction: Option<f64>,
    /// The split's seed (default 0).
    #[serde(default)]
    pub seed: u64,
}

impl Default for TextFolderOptions {
    fn default() -> Self {
        Self {
            tokenizer: PathBuf::from("tokenizer.json"),
            max_len: text::DEFAULT_MAX_LEN,
            test_fraction: None,
            seed: 0,
        }
    }
}

crate::component!(format "text-folder", "plain-text documents, one .txt file each: train/CLASS/*.txt and test/CLASS/*.txt, or CLASS/*.txt with a seeded stratified split; token ids from a Hugging Face tokenizer.json", TextFolderOptions, read, write);

/// The sub-folders of `dir` that do not start with `.`, sorted by name.
fn sorted_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && e.path().is_dir() {
            out.push((name, e.path()));
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(bad(
            dir,
            FORMAT,
            "no class folders here: the text-folder layout is CLASS/*.txt, or train/CLASS/*.txt and test/CLASS/*.txt",
        ));
    }
    Ok(out)
}

/// Every `.txt` file under `dir` (subfolders too), sorted; other files counted in `skipped`.
fn texts_in(dir: &Path, depth: usize, out: &mut Vec<PathBuf>, skipped: &mut usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(bad(
            dir,
            FORMAT,
            format!("folders nested over {MAX_DEPTH} deep: a symbolic-link loop?"),
        ));
    }
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if !e.file_name().to_string_lossy().starts_with('.') {
            entries.push(e.path());
        }
    }
    entries.sort();
    for p in entries {
        if p.is_dir() {
            texts_in(&p, depth + 1, out, skipped)?;
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("txt")) {
            out.push(p);
        } else {
            *skipped += 1;
        }
    }
    Ok(())
}

/// The documents of the class folders `dirs` (labels from their names' positions in
/// `classes`).
fn read_classes(
    root: &Path,
    dirs: &[(String, PathBuf)],
    classes: &[String],
    lossy: &mut Lossy,
) -> Result<Vec<Doc>> {
    let mut docs = Vec::new();
    let mut skipped = 0;
    for (name, path) in dirs {
        let Some(label) = classes.iter().position(|c| c == name) else {
            return Err(bad(
                path,
                FORMAT,
                format!("class folder `{name}` has no train folder of the same name"),
            ));
        };
        let mut files = Vec::new();
        texts_in(path, 0, &mut files, &mut skipped)?;
        for f in files {
            let source = f.display().to_string();
            let text = lossy.decode(&text::read_doc(&f)?, &source);
            text::check_not_empty(&text, &f, FORMAT, "this document")?;
            docs.push(Doc {
                text,
                label: label as u32,
                source,
            });
        }
    }
    if skipped > 0 {
        eprintln!(
            "warning: {}: skipped {skipped} file(s) that are not .txt",
            root.display()
        );
    }
    Ok(docs)
}

/// Reads `[data] path` as a text folder (module docs).
///
/// # Errors
/// A positioned [`Error::Config`] for an unknown key, a missing `tokenizer`, or a
/// `test_fraction` outside `[0, 1)` or given beside `train/` and `test/`; [`Error::DataFile`]
/// naming the file or folder for an empty document, a test class without a train folder, a
/// class without documents, folders nested too deep; [`Error::Io`] naming the file for one
/// that is not a regular file (a FIFO, a link that leads nowhere); the tokenizer's errors.
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let dir = super::required_dir(req, FORMAT)?;
    let opts: TextFolderOptions = req.options()?;
    let given = dir.join("train").is_dir();
    let fraction = text::test_fraction(
        req,
        opts.test_fraction,
        given.then(|| {
            (
                format!("{} has train/ and test/ folders", dir.display()),
                "give only CLASS/ folders to split them",
            )
        }),
    )?;
    let tok = text::tokenizer(req, &opts.tokenizer, opts.max_len)?;
    let mut lossy = Lossy::default();
    let train_dirs = sorted_dirs(&if given {
        dir.join("train")
    } else {
        dir.to_path_buf()
    })?;
    let classes: Vec<String> = train_dirs.iter().map(|(n, _)| n.clone()).collect();
    let (train, test) = if given {
        let test_dir = dir.join("test");
        if !test_dir.is_dir() {
            return Err(bad(
                &test_dir,
                FORMAT,
                "missing: a train/ folder needs a test/ folder beside it",
            ));
        }
        let train = read_classes(dir, &train_dirs, &classes, &mut lossy)?;
        let test = read_classes(dir, &sorted_dirs(&test_dir)?, &classes, &mut lossy)?;
        let test = text::drop_shared(&train, test, FORMAT);
        (train, test)
    } else {
        let docs = read_classes(dir, &train_dirs, &classes, &mut lossy)?;
        text::split(docs, classes.len(), fraction, opts.seed)
    };
    lossy.warn(FORMAT);
    for (c, (name, path)) in train_dirs.iter().enumerate() {
        if !train.iter().any(|d| d.label as usize == c) {
            return Err(bad(
                path,
                FORMAT,
                format!("class `{name}` has no training document (.txt)"),
            ));
        }
    }
    let name = super::display_name(req, dir);
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
/// Always [`Error::DataFile`].
pub fn write(_ds: &Dataset, dir: &Path) -> Result<()> {
    text::refuse_write(dir, FORMAT)
}
