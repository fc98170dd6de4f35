//! `format = "idx"`: the four IDX files of the MNIST family (LeCun et al. 1998) in `path`,
//! `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
//! `t10k-labels-idx1-ubyte`, each raw or gzip-compressed (`.gz`). Images are `[n, height,
//! width]` bytes (one channel) or `[n, channels, height, width]`; labels `[n]` bytes.

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::dataset::{Dataset, Values};
use crate::data::idx::{encode_idx, read_idx};
use crate::error::{Error, IdxError, Result};
use std::path::{Path, PathBuf};

/// The four IDX files of a dataset, without the `.gz` suffix.
pub const FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// The format's name, as in `[data] format` and in its errors.
pub const FORMAT: &str = <IdxOptions as crate::component::Component>::NAME;

/// `[data.options]` of `format = "idx"`: it takes no keys yet (any key is refused, with
/// its position).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdxOptions {}

crate::component!(format "idx", "the four IDX files of the MNIST family (raw or .gz): bytes [n, height, width] or [n, channels, height, width], labels [n]", IdxOptions, read, write);

/// A file of `dir` named `stem`, raw or `.gz`: whatever is there under that name (a device, a
/// FIFO or a symbolic link to nothing too, which the bounded read then refuses by name instead
/// of calling it missing).
pub fn file_in(dir: &Path, stem: &str) -> Option<PathBuf> {
    [format!("{stem}.gz"), stem.to_string()]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| crate::fsutil::is_present(p))
}

/// Reads one split: its images' shape and the raw split.
fn read_split(dir: &Path, images: &str, labels: &str) -> Result<(InputShape, Raw)> {
    let find = |stem: &str| {
        file_in(dir, stem).ok_or_else(|| Error::DatasetMissing {
            name: dir.display().to_string(),
            searched: format!("{} (or {stem}.gz)", dir.join(stem).display()),
            hint: format!(
                "the IDX format needs {} (raw or .gz) here",
                FILES.join(", ")
            ),
        })
    };
    let (ipath, lpath) = (find(images)?, find(labels)?);
    let img = read_idx(&ipath)?;
    let lab = read_idx(&lpath)?;
    let wrong = |path: &Path, dims: &[usize], reason: String| Error::Idx {
        path: path.to_path_buf(),
        source: IdxError::BadDims {
            dims: dims.iter().map(|&d| d as u32).collect(),
            reason,
        },
    };
    let shape = match img.dims[..] {
        [_, height, width] => InputShape::Image {
            channels: 1,
            height,
            width,
        },
        [_, channels, height, width] => InputShape::Image {
            channels,
            height,
            width,
        },
        _ => {
            return Err(wrong(
                &ipath,
                &img.dims,
                "images must be [n, height, width] or [n, channels, height, width]".into(),
            ));
        }
    };
    if lab.dims.len() != 1 {
        return Err(wrong(&lpath, &lab.dims, "labels must be [n]".into()));
    }
    if lab.dims[0] != img.dims[0] {
        return Err(wrong(
            &lpath,
            &lab.dims,
            format!("{} labels for {} images", lab.dims[0], img.dims[0]),
        ));
    }
    Ok((
        shape,
        Raw {
            values: Values::U8(img.data),
            labels: lab.data.into_iter().map(u32::from).collect(),
        },
    ))
}

/// Reads both splits of `dir`: the train images' shape, train, test.
///
/// # Errors
/// [`Error::DatasetMissing`] for a missing file, [`Error::Idx`] for a corrupt or inconsistent
/// one, [`Error::DataFile`] when train and test images differ in shape.
pub fn read_splits(dir: &Path) -> Result<(InputShape, Raw, Raw)> {
    let (shape, train) = read_split(dir, FILES[0], FILES[1])?;
    let (test_shape, test) = read_split(dir, FILES[2], FILES[3])?;
    if shape != test_shape {
        return Err(bad(
            dir,
            FORMAT,
            format!("train images are {shape}, test images {test_shape}"),
        ));
    }
    Ok((shape, train, test))
}

/// Reads `[data] path` as IDX files (with `dataset.toml` when present).
///
/// # Errors
/// As [`read_splits`] and [`super::assemble`].
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let dir = super::required_dir(req, FORMAT)?;
    let IdxOptions {} = req.options()?;
    let (shape, train, test) = read_splits(dir)?;
    let name = super::display_name(req, dir);
    super::assemble(FORMAT, &name, dir, train, test, shape, Meta::read(dir)?)
}

/// Writes the four IDX files (raw) into `dir`: images `[n, height, width]` for one channel,
/// `[n, channels, height, width]` otherwise.
///
/// # Errors
/// [`Error::DataFile`] for float values, feature vectors or more than 255 classes (IDX holds
/// bytes), [`Error::Io`] when a file cannot be written.
pub fn write(ds: &Dataset, dir: &Path) -> Result<()> {
    let [channels, height, width] = super::byte_images(ds, dir, FORMAT)?;
    if ds.classes > 256 {
        return Err(bad(
            dir,
            FORMAT,
            format!(
                "IDX labels are bytes; this dataset has {} classes",
                ds.classes
            ),
        ));
    }
    for (split, images, labels) in [
        (&ds.train, FILES[0], FILES[1]),
        (&ds.test, FILES[2], FILES[3]),
    ] {
        let Values::U8(v) = &split.values else {
            unreachable!("byte_images checked both splits")
        };
        let n = split.len() as u32;
        let dims: Vec<u32> = if channels == 1 {
            vec![n, height as u32, width as u32]
        } else {
            vec![n, channels as u32, height as u32, width as u32]
        };
        let path = dir.join(images);
        std::fs::write(&path, encode_idx(&dims, v)).map_err(|e| Error::io(&path, e))?;
        let bytes: Vec<u8> = split.labels.iter().map(|&l| l as u8).collect();
        let path = dir.join(labels);
        std::fs::write(&path, encode_idx(&[n], &bytes)).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}
