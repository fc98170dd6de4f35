//! `format = "csv"`: `train.csv` and `test.csv` in `path` (read and written with the `csv`
//! crate), each with a header row, one column named `label` (anywhere) and the feature columns
//! in order; both files with the same header.
//!
//! - Cells: numbers. When every cell of both files is an integer in 0–255 the values are
//!   read as bytes (pixels, scaled by 1/255, as the other formats do); otherwise as `f32`.
//!   Normalisation is computed from the training split either way (standardisation does not
//!   depend on that scale), unless `dataset.toml` or `[data] mean`/`std` give it: one mean and
//!   std per column, except for pixel bytes of a square image (a row of 784 bytes: 28×28, at
//!   least 8×8) without a `dataset.toml` shape, which get the image rule (one mean and std over
//!   every pixel, as IDX and NPY images do), so the same images normalise alike from every
//!   format. `report.json`'s `normalization` says which rule a run's data got.
//! - Labels: class indices (0 or more), or class names, which are then numbered in sorted
//!   order (or by `dataset.toml`'s `class_names` when it has them).
//! - A sample is a feature vector `[features]`; `dataset.toml`'s or `[data] shape` makes it an
//!   image (`[1, 28, 28]`).
//! - **Text**: with `text_column` (and `tokenizer`), a row is a document: the text column's
//!   cell is tokenized as the text formats do ([`super::text`]: ids `[max_len]`, identity
//!   normalisation, test rows whose text is also a training row's dropped), the
//!   `label_column`'s cell (default `label`) is its class, named by its text (classes in
//!   sorted order, numerically when every label is an integer); other columns are ignored.

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

const FORMAT: &str = <CsvOptions as crate::component::Component>::NAME;

/// The two files.
pub const FILES: [&str; 2] = ["train.csv", "test.csv"];

/// `[data.options]` of `format = "csv"`: none for numbers; for text (module docs),
/// `text_column` and `tokenizer`, with `label_column` and `max_len`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvOptions {
    /// The column holding a document's text: the rows are then documents (module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_column: Option<String>,
    /// With `text_column`: the column holding the label (default `label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_column: Option<String>,
    /// With `text_column`: a Hugging Face `tokenizer.json` (or a GGUF file, whose metadata's
    /// tokenizer is read), relative to the config's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// With `text_column`: token ids per document (default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<usize>,
}

/// The documents of one CSV file of text: `(text, label cell, "file:row")`.
fn read_text_table(
    path: &Path,
    text: &str,
    label: &str,
    lossy: &mut super::text::Lossy,
) -> Result<Vec<(String, String, String)>> {
    let file = crate::fsutil::open_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| Error::io(path, e))?;
    let mut r = ::csv::ReaderBuilder::new().from_reader(std::io::BufReader::new(file));
    let header = r
        .byte_headers()
        .map_err(|e| bad(path, FORMAT, format!("header: {e}")))?
        .clone();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name.as_bytes())
            .ok_or_else(|| bad(path, FORMAT, format!("no column `{name}` in the header")))
    };
    let (t, l) = (col(text)?, col(label)?);
    let mut out = Vec::new();
    for (i, rec) in r.byte_records().enumerate() {
        let rec = rec.map_err(|e| bad(path, FORMAT, format!("row {}: {e}", i + 1)))?;
        let at = format!("{}:{}", path.display(), i + 2);
        let doc = lossy.decode(rec.get(t).unwrap_or_default(), &at);
        if doc.trim().is_empty() {
            return Err(bad(
                path,
                FORMAT,
                format!(
                    "row {}: the document is empty (nothing but white space)",
                    i + 1
                ),
            ));
        }
        let class = lossy.decode(rec.get(l).unwrap_or_default(), &at);
        out.push((doc, class, at));
    }
    Ok(out)
}

/// Reads `train.csv` and `test.csv` as documents (module docs).
fn read_text(
    req: &crate::data::DatasetRequest<'_>,
    dir: &Path,
    opts: &CsvOptions,
    text: &str,
) -> Result<Dataset> {
    let Some(tokenizer) = &opts.tokenizer else {
        return Err(req.options.key_error(
            "text_column",
            "`text_column` needs `tokenizer`: the path of a Hugging Face tokenizer.json".into(),
            None,
        ));
    };
    let max_len = opts.max_len.unwrap_or(super::text::DEFAULT_MAX_LEN);
    let tok = super::text::tokenizer(req, tokenizer, max_len)?;
    let label = opts.label_column.as_deref().unwrap_or("label");
    let mut lossy = super::text::Lossy::default();
    let train = read_text_table(&dir.join(FILES[0]), text, label, &mut lossy)?;
    let test = read_text_table(&dir.join(FILES[1]), text, label, &mut lossy)?;
    lossy.warn(FORMAT);
    let classes = super::text::class_names(train.iter().chain(&test).map(|r| r.1.as_str()));
    let train = super::text::docs(train, &classes);
    let test = super::text::drop_shared(&train, super::text::docs(test, &classes), FORMAT);
    super::text::check_every_class(&train, &classes, dir, FORMAT)?;
    let name = super::display_name(req, dir);
    super::text::assemble(
        FORMAT,
        &name,
        dir,
        &tok,
        (&train, &test),
        classes,
        req.lm_window,
    )
}

crate::component!(format "csv", "train.csv and test.csv with a header row, a `label` column (indices or names) and the feature columns", CsvOptions, read, write);

/// One file as read: the header, values (bytes while every cell is one), label cells.
struct Table {
    header: Vec<String>,
    values: Values,
    labels: Vec<String>,
}

/// A cell that is an integer 0–255.
fn byte(cell: &[u8]) -> Option<u8> {
    if cell.is_empty() || cell.len() > 3 || !cell.iter().all(u8::is_ascii_digit) {
        return None;
    }
    cell.iter()
        .try_fold(0u16, |a, &d| Some(a * 10 + u16::from(d - b'0')))
        .and_then(|v| u8::try_from(v).ok())
}

/// A label cell written as an integer (an optional sign, then digits).
fn integer_shaped(l: &str) -> bool {
    let digits = l.strip_prefix(['-', '+']).unwrap_or(l);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The value of an [`integer_shaped`] label, saturated to `i128`'s range (a label of 40 digits
/// is as far from a class index as one of 39).
fn integer_value(l: &str) -> i128 {
    l.parse::<i128>().unwrap_or(if l.starts_with('-') {
        i128::MIN
    } else {
        i128::MAX
    })
}

fn read_table(path: &Path) -> Result<Table> {
    if !crate::fsutil::is_present(path) {
        return Err(bad(
            path,
            FORMAT,
            "missing: the CSV layout is train.csv and test.csv (header row, a `label` column) in one directory",
        ));
    }
    // A FIFO, a device, a directory or a link to nothing is refused by name before it is read.
    let file = crate::fsutil::open_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| Error::io(path, e))?;
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(std::io::BufReader::new(file));
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| bad(path, FORMAT, e.to_string()))?
        .iter()
        .map(str::to_string)
        .collect();
    let label_cols: Vec<usize> = (0..header.len())
        .filter(|&i| header[i] == "label")
        .collect();
    let &[label] = &label_cols[..] else {
        return Err(bad(
            path,
            FORMAT,
            format!(
                "the header must name exactly one `label` column; it has {} (header: {})",
                label_cols.len(),
                header.iter().take(6).cloned().collect::<Vec<_>>().join(",")
                    + if header.len() > 6 { ",…" } else { "" }
            ),
        ));
    };
    if header.len() < 2 {
        return Err(bad(path, FORMAT, "no feature column beside `label`"));
    }
    let mut values = Values::U8(Vec::new());
    let mut labels = Vec::new();
    let mut record = csv::ByteRecord::new();
    loop {
        match rdr.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(bad(path, FORMAT, e.to_string())),
        }
        let line = record.position().map_or(0, |p| p.line());
        for (i, cell) in record.iter().enumerate() {
            if i == label {
                labels.push(String::from_utf8_lossy(cell).into_owned());
                continue;
            }
            if let Values::U8(v) = &mut values {
                if let Some(b) = byte(cell) {
                    v.push(b);
                    continue;
                }
                values = Values::F32(v.iter().map(|&b| f32::from(b)).collect());
            }
            let Values::F32(v) = &mut values else {
                unreachable!("switched to floats above")
            };
            let x = std::str::from_utf8(cell)
                .ok()
                .and_then(|s| s.parse::<f32>().ok())
                .filter(|x| x.is_finite())
                .ok_or_else(|| {
                    bad(
                        path,
                        FORMAT,
                        format!(
                            "line {line}, column `{}`: {:?} is not a finite number",
                            header[i],
                            String::from_utf8_lossy(cell)
                        ),
                    )
                })?;
            v.push(x);
        }
    }
    if labels.is_empty() {
        return Err(bad(path, FORMAT, "no rows below the header"));
    }
    Ok(Table {
        header,
        values,
        labels,
    })
}

/// Refuses the text keys (`label_column`, `tokenizer`, `max_len`) on a CSV of features, at
/// the key: they apply only with `text_column`.
fn refuse_text_keys(req: &crate::data::DatasetRequest<'_>, opts: &CsvOptions) -> Result<()> {
    for (key, given) in [
        ("label_column", opts.label_column.is_some()),
        ("tokenizer", opts.tokenizer.is_some()),
        ("max_len", opts.max_len.is_some()),
    ] {
        if given {
            return Err(req.options.key_error(
                key,
                format!("`{key}` applies to text only: give `text_column` too"),
                None,
            ));
        }
    }
    Ok(())
}

/// A label written as an integer is a class index, never a class name: checked as read, at a
/// cost that does not depend on its value, naming the file and row of the first bad one.
fn check_integer_labels(dir: &Path, train: &Table, test: &Table) -> Result<()> {
    for (t, file) in [(train, FILES[0]), (test, FILES[1])] {
        let first_bad = t.labels.iter().enumerate().find_map(|(row, l)| {
            integer_shaped(l)
                .then(|| super::label_problem(l, integer_value(l)))
                .flatten()
                .map(|why| (row, why))
        });
        if let Some((row, why)) = first_bad {
            return Err(bad(
                &dir.join(file),
                FORMAT,
                format!("row {}: {why}", row + 1),
            ));
        }
    }
    Ok(())
}

/// Reads `train.csv` and `test.csv` of `[data] path` (with `dataset.toml` when present).
///
/// # Errors
/// [`Error::DataFile`] naming the file (and the line) for a missing file, a header without one
/// `label` column, rows of another width, a cell that is not a number, a negative label or one
/// `dataset.toml` does not name, headers that differ; [`super::assemble`]'s.
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let dir = super::required_dir(req, FORMAT)?;
    let opts: CsvOptions = req.options()?;
    if let Some(text) = &opts.text_column {
        return read_text(req, dir, &opts, text);
    }
    refuse_text_keys(req, &opts)?;
    let train = read_table(&dir.join(FILES[0]))?;
    let test = read_table(&dir.join(FILES[1]))?;
    if train.header != test.header {
        return Err(bad(
            &dir.join(FILES[1]),
            FORMAT,
            format!(
                "its header differs from train.csv's ({} columns against {})",
                test.header.len(),
                train.header.len()
            ),
        ));
    }
    let mut meta = Meta::read(dir)?.unwrap_or_default();
    check_integer_labels(dir, &train, &test)?;
    let numeric = train
        .labels
        .iter()
        .chain(&test.labels)
        .all(|l| integer_shaped(l));
    let index: BTreeMap<String, u32> = if numeric {
        BTreeMap::new()
    } else {
        let names: Vec<String> = match &meta.class_names {
            Some(n) => n.clone(),
            None => {
                let mut n: Vec<String> = train.labels.iter().chain(&test.labels).cloned().collect();
                n.sort();
                n.dedup();
                n
            }
        };
        meta.class_names = Some(names.clone());
        names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, i as u32))
            .collect()
    };
    let labels = |t: &Table, file: &str| -> Result<Vec<u32>> {
        t.labels
            .iter()
            .enumerate()
            .map(|(row, l)| {
                let got = if numeric {
                    l.parse::<u32>().ok()
                } else {
                    index.get(l).copied()
                };
                got.ok_or_else(|| {
                    bad(
                        &dir.join(file),
                        FORMAT,
                        format!(
                            "row {}: label {l:?} is {}",
                            row + 1,
                            if numeric {
                                "not a class index"
                            } else {
                                "not one of dataset.toml's class_names"
                            }
                        ),
                    )
                })
            })
            .collect()
    };
    let (train_labels, test_labels) = (labels(&train, FILES[0])?, labels(&test, FILES[1])?);
    let (train_values, test_values) = match (train.values, test.values) {
        (Values::U8(a), Values::F32(b)) => (
            Values::F32(a.into_iter().map(f32::from).collect()),
            Values::F32(b),
        ),
        (Values::F32(a), Values::U8(b)) => (
            Values::F32(a),
            Values::F32(b.into_iter().map(f32::from).collect()),
        ),
        pair => pair,
    };
    let features = train.header.len() - 1;
    let train_values = pixel_rule(&mut meta, train_values, &train_labels, features);
    let name = super::display_name(req, dir);
    super::assemble(
        FORMAT,
        &name,
        dir,
        Raw {
            values: train_values,
            labels: train_labels,
        },
        Raw {
            values: test_values,
            labels: test_labels,
        },
        InputShape::Features(features),
        Some(meta),
    )
}

/// The image rule for pixel bytes: when both files hold bytes (`values` are still
/// [`Values::U8`]), a row is a square image's pixels ([`crate::data::shape::square_side`]: 784 =
/// 28×28) and `dataset.toml` gives neither a shape nor a normalisation, `meta` gets one mean and
/// std over every pixel of the training split (what IDX and NPY images of one channel get),
/// instead of one per column: the same images then give the same normalised features from
/// every format. Returns `values` unchanged.
fn pixel_rule(meta: &mut Meta, values: Values, labels: &[u32], features: usize) -> Values {
    let bytes = matches!(values, Values::U8(_));
    let free = meta.shape.is_none() && meta.mean.is_none() && meta.std.is_none();
    if !(bytes && free && crate::data::shape::square_side(features).is_some()) {
        return values;
    }
    let split = crate::data::dataset::Split {
        values,
        labels: labels.to_vec(),
        features,
        mean: Vec::new(),
        std: Vec::new(),
    };
    let (mean, std) = split.statistics(1);
    meta.mean = Some(mean);
    meta.std = Some(std);
    split.values
}

/// Writes `train.csv` and `test.csv` into `dir`: header `label,x0,x1,…`, labels as class
/// indices (the names go to `dataset.toml`), bytes and token ids as integers, floats in Rust's shortest
/// round-trip form (so they read back exactly).
///
/// # Errors
/// [`Error::Io`] when a file cannot be written.
pub fn write(ds: &Dataset, dir: &Path) -> Result<()> {
    let f = ds.input.features();
    for (split, file) in [(&ds.train, FILES[0]), (&ds.test, FILES[1])] {
        let path = dir.join(file);
        let io = |e: csv::Error| bad(&path, FORMAT, format!("cannot write: {e}"));
        let mut w = csv::Writer::from_path(&path).map_err(io)?;
        let mut header = vec!["label".to_string()];
        header.extend((0..f).map(|k| format!("x{k}")));
        w.write_record(&header).map_err(io)?;
        let mut row: Vec<String> = Vec::with_capacity(f + 1);
        for i in 0..split.len() {
            row.clear();
            row.push(split.labels[i].to_string());
            match &split.values {
                Values::U8(v) => row.extend(v[i * f..(i + 1) * f].iter().map(u8::to_string)),
                Values::F32(v) => row.extend(v[i * f..(i + 1) * f].iter().map(f32::to_string)),
                Values::Tokens(v) => row.extend(v[i * f..(i + 1) * f].iter().map(u32::to_string)),
            }
            w.write_record(&row).map_err(io)?;
        }
        w.flush().map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue32_labels_written_as_integers_are_class_indices() {
        for l in [
            "0",
            "7",
            "+3",
            "-1",
            "1000000000",
            "99999999999999999999999999999999999999999",
        ] {
            assert!(integer_shaped(l), "{l}");
        }
        for l in ["", "-", "cat", "1.0", "1e3", "7 "] {
            assert!(!integer_shaped(l), "{l}");
        }
        assert_eq!(integer_value("-5"), -5);
        assert_eq!(integer_value("9".repeat(50).as_str()), i128::MAX);
        assert_eq!(integer_value(&format!("-{}", "9".repeat(50))), i128::MIN);
    }

    #[test]
    fn byte_cells_are_integers_up_to_255() {
        assert_eq!(byte(b"0"), Some(0));
        assert_eq!(byte(b"255"), Some(255));
        assert_eq!(byte(b"256"), None);
        assert_eq!(byte(b"1.0"), None);
        assert_eq!(byte(b"-1"), None);
        assert_eq!(byte(b""), None);
    }
}
