//! Data formats users have: `[data] format = "idx" | "npy" | "csv" | "image-folder"` with
//! `path = DIR`, each a registered component ([`Kind::Format`](crate::registry::Kind::Format))
//! in one file of this module that both reads and writes it (`engram data export`).
//!
//! What every format shares, here:
//! - **`dataset.toml`** ([`Meta`]), optional beside the data: the class names, the sample shape
//!   and the normalisation. `engram data export` writes it, so an exported dataset reads back
//!   as the original (the same class names, the same `mean`/`std`, hence the same run bit for
//!   bit). Users may write one by hand.
//! - **Assembly** ([`assemble`]): the class count is the names' count, else the largest label
//!   plus one; class names default to the labels (`"0"`, `"1"`, …); the normalisation is
//!   `dataset.toml`'s, else computed from the training split ([`Split::statistics`]) per channel
//!   of an image or per feature of a feature vector ([`groups`](crate::data::shape::groups)).
//!   `[data] mean`, `std` and `shape` override it afterwards, for every format and dataset alike
//!   (in the registry).
//! - **Errors**: every malformed file is an [`Error::DataFile`] that names the file, the format
//!   and what is wrong.
//! - **Atomic export** ([`export`]): a format writes into a fresh temporary directory beside
//!   the target, which is renamed into place when complete; an existing target is never touched.

pub mod cifar;
pub mod csv;
pub mod idx;
pub mod image_folder;
pub mod jsonl;
pub mod npy;
pub mod text;
pub mod text_folder;
#[cfg(test)]
mod text_tests;

use super::dataset::{Dataset, Split, Values};
use crate::data::InputShape;
use crate::data::shape::{check_normalization, groups};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The optional description beside a dataset's files.
pub const META_FILE: &str = "dataset.toml";

/// `dataset.toml`: what the data files themselves do not say. Every key is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// The dataset's name (informational: `[data] dataset` names the run's data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The classes' names, by label; their count is the class count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_names: Option<Vec<String>>,
    /// One sample's shape: `[channels, height, width]` for images, `[features]` for vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<usize>>,
    /// The normalisation's mean after scaling (1 value, or one per channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<Vec<f32>>,
    /// The normalisation's standard deviation after scaling, each > 0 (as many as `mean`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<Vec<f32>>,
}

/// The error of a malformed data file.
pub fn bad(path: &Path, format: &'static str, reason: impl Into<String>) -> Error {
    Error::DataFile {
        path: path.to_path_buf(),
        format,
        reason: reason.into(),
    }
}

impl Meta {
    /// Reads `dir/dataset.toml` when there is one.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read, is not a regular file or is not UTF-8 text;
    /// [`Error::Config`] with its line and column when it is not valid TOML or has an unknown
    /// key.
    pub fn read(dir: &Path) -> Result<Option<Meta>> {
        let path = dir.join(META_FILE);
        // Something that is there but not a file (a directory, a device) is an error below.
        if !path.exists() {
            return Ok(None);
        }
        // Not a file, too large or not UTF-8: bad input (exit 2), naming the file.
        let text = crate::fsutil::read_text(&path).map_err(|e| Error::io(&path, e))?;
        toml::from_str(&text).map(Some).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| crate::config::line_col(&text, s.start))
                .unwrap_or((1, 1));
            Error::Config {
                file: path.clone(),
                line,
                column,
                message: e.message().to_string(),
                hint: Some(
                    "dataset.toml takes name, class_names, shape, mean and std (each optional)"
                        .into(),
                ),
            }
        })
    }

    /// What `engram data export` writes for `ds`: everything needed to read it back as it is.
    pub fn of(ds: &Dataset) -> Meta {
        Meta {
            name: Some(ds.name.clone()),
            class_names: Some(ds.class_names.clone()),
            shape: Some(ds.input.dims()),
            mean: Some(ds.train.mean.clone()),
            std: Some(ds.train.std.clone()),
        }
    }

    /// Writes it as `dir/dataset.toml`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(META_FILE);
        let text = format!(
            "# Written by `engram data export`: what the data files do not say (every key optional).\n{}",
            toml::to_string(self).map_err(|e| Error::Other(format!("dataset.toml: {e}")))?
        );
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }
}

/// A split as a format reads it: values `[n, features]` and labels `[n]`.
#[derive(Clone, Debug)]
pub struct Raw {
    /// The values.
    pub values: Values,
    /// The labels.
    pub labels: Vec<u32>,
}

/// The shape a `shape` list gives: `[c, h, w]` → an image, `[n]` → a feature vector.
pub fn shape_of(dims: &[usize]) -> Option<InputShape> {
    match *dims {
        [channels, height, width] if channels * height * width > 0 => Some(InputShape::Image {
            channels,
            height,
            width,
        }),
        [n] if n > 0 => Some(InputShape::Features(n)),
        _ => None,
    }
}

/// Builds the dataset a format read (see the module docs for the defaults `meta` fills in).
///
/// # Errors
/// [`Error::DataFile`] naming `dir` (or its `dataset.toml`) when the two splits disagree in
/// width, a label is outside `dataset.toml`'s classes, or `dataset.toml`'s shape or
/// normalisation does not fit the data.
pub fn assemble(
    format: &'static str,
    name: &str,
    dir: &Path,
    train: Raw,
    test: Raw,
    input: InputShape,
    meta: Option<Meta>,
) -> Result<Dataset> {
    let meta = meta.unwrap_or_default();
    let meta_path = dir.join(META_FILE);
    let features = input.features();
    check_splits(format, dir, &train, &test, features)?;
    let input = match &meta.shape {
        None => input,
        Some(dims) => match shape_of(dims) {
            Some(s) if s.features() == features => s,
            _ => {
                return Err(bad(
                    &meta_path,
                    format,
                    format!(
                        "shape {dims:?} does not hold the {features} values of a sample ({input})"
                    ),
                ));
            }
        },
    };
    let class_names = class_names(format, dir, &meta_path, meta.class_names, &train, &test)?;
    let mut train = Split {
        values: train.values,
        labels: train.labels,
        features,
        mean: Vec::new(),
        std: Vec::new(),
    };
    let (mean, std) = match (meta.mean, meta.std) {
        (Some(m), Some(s)) => (m, s),
        (None, None) => train.statistics(groups(input)),
        _ => {
            return Err(bad(
                &meta_path,
                format,
                "give both `mean` and `std`, or neither (then they are computed from the training split)",
            ));
        }
    };
    check_normalization(&mean, &std, input).map_err(|m| bad(&meta_path, format, m))?;
    train.mean.clone_from(&mean);
    train.std.clone_from(&std);
    let test = Split {
        values: test.values,
        labels: test.labels,
        features,
        mean,
        std,
    };
    Ok(Dataset {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        classes: class_names.len(),
        class_names,
        train,
        test,
        input,
    })
}

/// Checks that both splits hold `features` values per label, have samples, and store values
/// of one type.
///
/// # Errors
/// [`Error::DataFile`] naming `dir`.
fn check_splits(
    format: &'static str,
    dir: &Path,
    train: &Raw,
    test: &Raw,
    features: usize,
) -> Result<()> {
    for (what, raw) in [("train", train), ("test", test)] {
        if raw.values.len() != raw.labels.len() * features {
            return Err(bad(
                dir,
                format,
                format!(
                    "the {what} split has {} values for {} samples of {features}",
                    raw.values.len(),
                    raw.labels.len()
                ),
            ));
        }
        if raw.labels.is_empty() {
            return Err(bad(dir, format, format!("the {what} split has no samples")));
        }
    }
    if std::mem::discriminant(&train.values) != std::mem::discriminant(&test.values) {
        return Err(bad(
            dir,
            format,
            format!(
                "the train split holds {} values, the test split {}; give both the same type",
                train.values.dtype(),
                test.values.dtype()
            ),
        ));
    }
    Ok(())
}

/// The class names: `dataset.toml`'s (which must cover every label), else the labels
/// `0..=top` as text, each of which must have a training sample.
///
/// # Errors
/// [`Error::DataFile`] naming `dataset.toml` (too few names) or `dir` (a label without
/// training samples).
fn class_names(
    format: &'static str,
    dir: &Path,
    meta_path: &Path,
    names: Option<Vec<String>>,
    train: &Raw,
    test: &Raw,
) -> Result<Vec<String>> {
    let top = train
        .labels
        .iter()
        .chain(&test.labels)
        .copied()
        .max()
        .unwrap_or(0) as usize;
    if let Some(names) = names {
        if top >= names.len() {
            return Err(bad(
                meta_path,
                format,
                format!("{} class names, but the data has label {top}", names.len()),
            ));
        }
        return Ok(names);
    }
    // Classes are the labels 0..=top: each must have training samples, or the labels are not
    // class indices (a stray 1000000 would make a head a million wide).
    let mut seen = vec![false; top + 1];
    train.labels.iter().for_each(|&l| seen[l as usize] = true);
    // Counted, with the first five named: no list as long as the classes.
    let empty = seen.iter().filter(|&&s| !s).count();
    if empty > 0 {
        let few: Vec<String> = (0..=top)
            .filter(|&c| !seen[c])
            .take(5)
            .map(|c| c.to_string())
            .collect();
        return Err(bad(
            dir,
            format,
            format!(
                "labels must be the class indices 0..{}: {} of them have no training sample ({}{}); renumber the labels, or name every class in dataset.toml's class_names to keep empty classes",
                top + 1,
                empty,
                few.join(", "),
                if empty > 5 { ", …" } else { "" }
            ),
        ));
    }
    Ok((0..=top).map(|c| c.to_string()).collect())
}

/// The `[channels, height, width]` of a dataset a writer of 8-bit images (IDX, PNG) can
/// write: image samples held as bytes in both splits.
///
/// # Errors
/// [`Error::DataFile`] naming `dir` and `format` for feature vectors or float values.
pub fn byte_images(ds: &Dataset, dir: &Path, format: &'static str) -> Result<[usize; 3]> {
    let InputShape::Image {
        channels,
        height,
        width,
    } = ds.input
    else {
        return Err(bad(
            dir,
            format,
            format!(
                "{format} holds images; this dataset's samples are {}",
                ds.input
            ),
        ));
    };
    for split in [&ds.train, &ds.test] {
        if !matches!(split.values, Values::U8(_)) {
            return Err(bad(
                dir,
                format,
                format!(
                    "{format} holds bytes; this dataset holds {}",
                    split.values.dtype()
                ),
            ));
        }
    }
    Ok([channels, height, width])
}

/// The most classes a dataset may have: a label is a class index below it. Checked as the
/// labels are read, so that a stray label (`1000000000`) is refused at a cost that does not
/// grow with its value, instead of sizing a per-class table or a head a billion wide.
pub const MAX_CLASSES: u32 = 65_536;

/// Why a label of value `value`, written `label`, is not a class index, if it is not one:
/// negative, or at least [`MAX_CLASSES`].
pub fn label_problem(label: &str, value: i128) -> Option<String> {
    if value < 0 {
        Some(format!(
            "label {label} is negative; labels are class indices (0 or more)"
        ))
    } else if value >= i128::from(MAX_CLASSES) {
        Some(format!(
            "label {label} is not a class index: engram takes at most {MAX_CLASSES} classes \
             (labels 0..{})",
            MAX_CLASSES - 1
        ))
    } else {
        None
    }
}

/// Labels read as signed integers, checked to be class indices: in `0..`[`MAX_CLASSES`].
///
/// # Errors
/// [`Error::DataFile`] naming `path` and the first bad label.
pub fn labels_from_i64(
    path: &Path,
    format: &'static str,
    labels: impl IntoIterator<Item = i64>,
) -> Result<Vec<u32>> {
    labels
        .into_iter()
        .enumerate()
        .map(
            |(i, l)| match label_problem(&l.to_string(), i128::from(l)) {
                None => Ok(l as u32),
                Some(why) => Err(bad(path, format, format!("sample {i}: {why}"))),
            },
        )
        .collect()
}

/// Writes a dataset with `write` into `out`, atomically: into a fresh directory beside `out`,
/// renamed to `out` once complete (a failed export leaves nothing behind), with `dataset.toml`
/// ([`Meta::of`]) added.
///
/// # Errors
/// [`Error::Usage`] when `out` exists (nothing is overwritten) or no directory can be created
/// beside it; [`Error::Io`] and the writer's errors otherwise.
pub fn export(ds: &Dataset, out: &Path, write: crate::data::DatasetWriter) -> Result<PathBuf> {
    if out.exists() {
        return Err(Error::Usage(format!(
            "{} exists; export writes a new directory (remove it or choose another --out)",
            out.display()
        )));
    }
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The parent is the user's choice: a place where no directory can be made (`/proc`, a
    // read-only or permission-less folder) is bad input that names --out, not a failure.
    let unwritable = |e: std::io::Error| {
        Error::Usage(format!(
            "--out {}: cannot create a directory in {} ({e}); choose another --out",
            out.display(),
            parent.display()
        ))
    };
    std::fs::create_dir_all(parent).map_err(unwritable)?;
    let tmp = tempfile::Builder::new()
        .prefix(".engram-export-")
        .tempdir_in(parent)
        .map_err(unwritable)?;
    write(ds, tmp.path())?;
    Meta::of(ds).write(tmp.path())?;
    let staged = tmp.keep();
    std::fs::rename(&staged, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staged);
        Error::io(out, e)
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755));
    }
    Ok(out.to_path_buf())
}

/// The name a format's dataset gets: `[data] dataset` when given, else the directory's name.
pub fn display_name(req: &super::DatasetRequest<'_>, dir: &Path) -> String {
    if req.name.is_empty() {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "data".into())
    } else {
        req.name.to_string()
    }
}

/// The directory a format reads: `[data] path`, which a format requires.
///
/// # Errors
/// [`Error::DatasetMissing`] when no path was given or it does not exist.
pub fn required_dir<'a>(req: &super::DatasetRequest<'a>, format: &str) -> Result<&'a Path> {
    match req.path {
        Some(p) if p.exists() => Ok(p),
        Some(p) => Err(Error::DatasetMissing {
            name: req.name.to_string(),
            searched: p.display().to_string(),
            hint: match crate::data::catalog::fetch_hint(p) {
                Some(fetch) => format!("`[data] path` names no file or directory; {fetch}"),
                None => format!(
                    "`[data] path` names no file or directory; `engram data export NAME --format {format} --out DIR` writes one"
                ),
            },
        }),
        None => Err(Error::DatasetMissing {
            name: req.name.to_string(),
            searched: "nowhere".into(),
            hint: format!(
                "`format = \"{format}\"` reads `[data] path`: set it to the data's directory"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(values: Vec<u8>, labels: Vec<u32>) -> Raw {
        Raw {
            values: Values::U8(values),
            labels,
        }
    }

    /// Every format and the IDX datasets decode `[data.options]` into their own typed keys:
    /// an unknown key is a positioned config error naming it, before any file is read.
    #[test]
    fn formats_and_datasets_refuse_unknown_options() {
        let src = crate::config::LoadedConfig::from_source(
            Path::new("t.toml"),
            "[data]\nformat = \"csv\"\npath = \".\"\n[data.options]\ncolumn = \"text\"\n[model]\ntype = \"mlp\"\n"
                .to_string(),
        )
        .unwrap();
        let options = src.params("data.options", 0);
        let dir = std::env::temp_dir();
        for reg in crate::data::BUILTINS {
            let req = crate::data::DatasetRequest {
                name: reg.name,
                path: Some(&dir),
                options: &options,
                base_dir: Path::new(""),
                lm_window: None,
            };
            let read = match reg.factory {
                crate::component::Factory::Format(f) => f.read,
                crate::component::Factory::Dataset(f) => f,
                _ => unreachable!("data registrations"),
            };
            match read(&req) {
                Err(Error::Config { line, message, .. }) => {
                    assert_eq!(line, 5, "{}", reg.name);
                    assert!(
                        message.contains("unknown field `column`"),
                        "{}: {message}",
                        reg.name
                    );
                }
                other => panic!("{}: {:?}", reg.name, other.map(|d| d.name)),
            }
        }
        // No options: nothing to refuse (the reader then reads, and fails on this directory).
        let none = crate::config::ParamSource::from_toml("");
        let req = crate::data::DatasetRequest {
            name: "t",
            path: Some(&dir),
            options: &none,
            base_dir: Path::new(""),
            lm_window: None,
        };
        assert!(!matches!(csv::read(&req), Err(Error::Config { .. })));
    }

    fn input_of() -> InputShape {
        InputShape::Image {
            channels: 2,
            height: 1,
            width: 2,
        }
    }

    #[test]
    fn assembly_counts_classes_names_them_and_normalises_per_channel() {
        // Two 2-channel 1×2 samples: channel 0 holds 0 and 255, channel 1 always 51.
        let train = raw(vec![0, 0, 51, 51, 255, 255, 51, 51], vec![0, 2]);
        let test = raw(vec![1, 2, 3, 4], vec![1]);
        // Label 1 has no training sample: the labels are not class indices.
        let gap = assemble(
            "npy",
            "toy",
            Path::new("d"),
            train.clone(),
            test.clone(),
            input_of(),
            None,
        );
        assert!(matches!(gap, Err(Error::DataFile { reason, .. }) if reason.contains("1 of them")));
        // Named in dataset.toml, class 1 may have test samples only.
        let names = Meta {
            class_names: Some(vec!["0".into(), "1".into(), "2".into()]),
            ..Meta::default()
        };
        let input = InputShape::Image {
            channels: 2,
            height: 1,
            width: 2,
        };
        let ds = assemble(
            "npy",
            "toy",
            Path::new("d"),
            train,
            test,
            input,
            Some(names),
        )
        .unwrap();
        assert_eq!(ds.classes, 3);
        assert_eq!(ds.class_names, ["0", "1", "2"]);
        // Channel 0: values 0, 0, 1, 1 → mean 0.5, std 0.5; channel 1 constant 0.2 → std 1.
        assert!((ds.train.mean[0] - 0.5).abs() < 1e-7 && (ds.train.std[0] - 0.5).abs() < 1e-7);
        assert!((ds.train.mean[1] - 0.2).abs() < 1e-7 && ds.train.std[1] == 1.0);
        assert_eq!(ds.test.mean, ds.train.mean);
        let mut row = Vec::new();
        ds.train.normalized_row(1, None, &mut row);
        let want = [1.0, 1.0, 0.0, 0.0];
        assert!(
            row.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{row:?}"
        );
    }

    #[test]
    fn meta_names_shape_and_normalisation_are_taken_and_checked() {
        let meta = Meta {
            class_names: Some(vec!["a".into(), "b".into()]),
            shape: Some(vec![4]),
            mean: Some(vec![0.25]),
            std: Some(vec![0.5]),
            ..Meta::default()
        };
        let input = InputShape::Image {
            channels: 1,
            height: 2,
            width: 2,
        };
        let ds = assemble(
            "csv",
            "t",
            Path::new("d"),
            raw(vec![0; 4], vec![1]),
            raw(vec![0; 4], vec![0]),
            input,
            Some(meta.clone()),
        )
        .unwrap();
        assert_eq!(ds.input, InputShape::Features(4));
        assert_eq!(ds.class_names, ["a", "b"]);
        assert_eq!(
            (ds.train.mean.clone(), ds.test.std.clone()),
            (vec![0.25], vec![0.5])
        );
        // A label beyond the names, a shape of another size, a std of zero: typed errors.
        let label = assemble(
            "csv",
            "t",
            Path::new("d"),
            raw(vec![0; 4], vec![2]),
            raw(vec![0; 4], vec![0]),
            input,
            Some(meta.clone()),
        );
        assert!(matches!(label, Err(Error::DataFile { reason, .. }) if reason.contains("label 2")));
        let shape = Meta {
            shape: Some(vec![3]),
            ..meta.clone()
        };
        let err = assemble(
            "csv",
            "t",
            Path::new("d"),
            raw(vec![0; 4], vec![0]),
            raw(vec![0; 4], vec![0]),
            input,
            Some(shape),
        );
        assert!(matches!(err, Err(Error::DataFile { reason, .. }) if reason.contains("shape [3]")));
        let std = Meta {
            std: Some(vec![0.0]),
            ..meta
        };
        let err = assemble(
            "csv",
            "t",
            Path::new("d"),
            raw(vec![0; 4], vec![0]),
            raw(vec![0; 4], vec![0]),
            input,
            Some(std),
        );
        assert!(matches!(err, Err(Error::DataFile { reason, .. }) if reason.contains("std 0")));
    }
}
