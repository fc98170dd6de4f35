//! `format = "image-folder"`: torchvision's `ImageFolder` convention, `path/train/<class>/*`
//! and `path/test/<class>/*`, PNG or JPEG (decoded with the `image` crate, by content rather
//! than by extension), gray or colour.
//!
//! - Class index: the position of the class folder's name in the sorted (byte-wise) list of
//!   the train folders; a test folder must be one of them. Class names: the folder names, or
//!   `dataset.toml`'s `class_names` when it has them.
//! - Sample order: sorted by file name across the classes (ties by class), so that files
//!   numbered in their original order (as `engram data export` writes them) read back in it.
//!   Files whose name starts with `.` are skipped.
//! - Channels: 3 (RGB, CHW) when any image has colour (gray ones are repeated into three
//!   channels), else 1; alpha is dropped; 16-bit images are reduced to 8 bits. Every image
//!   must have the first one's size.

use super::{Meta, Raw, bad};
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use crate::model::InputShape;
use std::path::{Path, PathBuf};

const FORMAT: &str = "image-folder";

/// The two split folders.
pub const SPLITS: [&str; 2] = ["train", "test"];

/// The registration of `format = "image-folder"`.
pub const REGISTRATION: crate::registry::Registration = crate::registration!(format "image-folder", "torchvision's ImageFolder layout: train/CLASS/*.png or .jpg and test/CLASS/*, gray or RGB, classes in sorted folder order", crate::data::dataset::IdxParams, read, write);

fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            out.push((name, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The class folders of `split_dir`, sorted.
fn class_dirs(split_dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    if !split_dir.is_dir() {
        return Err(bad(
            split_dir,
            FORMAT,
            "missing: the image-folder layout is train/<class>/* and test/<class>/*",
        ));
    }
    let dirs: Vec<_> = sorted_entries(split_dir)?
        .into_iter()
        .filter(|(_, p)| p.is_dir())
        .collect();
    if dirs.is_empty() {
        return Err(bad(split_dir, FORMAT, "no class folders here"));
    }
    Ok(dirs)
}

/// One decoded image: `[c, h, w]` bytes with c = 1 or 3.
struct Image {
    size: (u32, u32),
    color: bool,
    pixels: Vec<u8>,
}

fn decode(path: &Path) -> Result<Image> {
    let img = image::ImageReader::open(path)
        .map_err(|e| Error::io(path, e))?
        .with_guessed_format()
        .map_err(|e| Error::io(path, e))?
        .decode()
        .map_err(|e| {
            bad(
                path,
                FORMAT,
                format!("not a readable PNG or JPEG image: {e}"),
            )
        })?;
    let size = (img.width(), img.height());
    if img.color().has_color() {
        let rgb = img.into_rgb8();
        let (w, h) = (size.0 as usize, size.1 as usize);
        let mut chw = vec![0u8; 3 * w * h];
        for (k, px) in rgb.pixels().enumerate() {
            for c in 0..3 {
                chw[c * w * h + k] = px.0[c];
            }
        }
        Ok(Image {
            size,
            color: true,
            pixels: chw,
        })
    } else {
        Ok(Image {
            size,
            color: false,
            pixels: img.into_luma8().into_raw(),
        })
    }
}

/// Reads one split: images with their labels in sorted file-name order.
fn read_split(dir: &Path, classes: &[String], split: &str) -> Result<Vec<(Image, u32)>> {
    let mut files: Vec<(String, u32, PathBuf)> = Vec::new();
    for (name, path) in class_dirs(&dir.join(split))? {
        let Some(label) = classes.iter().position(|c| *c == name) else {
            return Err(bad(
                &path,
                FORMAT,
                format!("class folder `{name}` has no train folder of the same name"),
            ));
        };
        for (file, p) in sorted_entries(&path)? {
            if p.is_file() {
                files.push((file, label as u32, p));
            }
        }
    }
    if files.is_empty() {
        return Err(bad(
            &dir.join(split),
            FORMAT,
            "no images in the class folders",
        ));
    }
    files.sort();
    files
        .into_iter()
        .map(|(_, label, p)| Ok((decode(&p)?, label)))
        .collect()
}

/// Reads `[data] path` as an image folder (with `dataset.toml` when present).
///
/// # Errors
/// [`Error::DataFile`] naming the file for a missing split folder, a file that is not a PNG
/// or JPEG image, an image of another size, a test class without a train folder;
/// [`Error::Io`] for an unreadable directory; [`super::assemble`]'s.
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let dir = super::required_dir(req, FORMAT)?;
    let classes: Vec<String> = class_dirs(&dir.join(SPLITS[0]))?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let train = read_split(dir, &classes, SPLITS[0])?;
    let test = read_split(dir, &classes, SPLITS[1])?;
    let size = train[0].0.size;
    let color = train.iter().chain(&test).any(|(i, _)| i.color);
    let channels = if color { 3 } else { 1 };
    let raw = |items: Vec<(Image, u32)>, split: &str| -> Result<Raw> {
        let mut values = Vec::with_capacity(items.len() * channels * (size.0 * size.1) as usize);
        let mut labels = Vec::with_capacity(items.len());
        for (k, (img, label)) in items.into_iter().enumerate() {
            if img.size != size {
                return Err(bad(
                    &dir.join(split),
                    FORMAT,
                    format!(
                        "image {} (in sorted order) is {}×{}, the first train image {}×{}; give every image one size",
                        k + 1,
                        img.size.0,
                        img.size.1,
                        size.0,
                        size.1
                    ),
                ));
            }
            if color && !img.color {
                for _ in 0..3 {
                    values.extend_from_slice(&img.pixels);
                }
            } else {
                values.extend(img.pixels);
            }
            labels.push(label);
        }
        Ok(Raw {
            values: Values::U8(values),
            labels,
        })
    };
    let mut meta = Meta::read(dir)?.unwrap_or_default();
    if meta.class_names.is_none() {
        meta.class_names = Some(classes.clone());
    }
    let name = super::display_name(req, dir);
    super::assemble(
        FORMAT,
        &name,
        dir,
        raw(train, SPLITS[0])?,
        raw(test, SPLITS[1])?,
        InputShape::Image {
            channels,
            height: size.1 as usize,
            width: size.0 as usize,
        },
        Some(meta),
    )
}

/// A class folder's name: the zero-padded label, so that sorted order is label order, then
/// the class name with every character but letters, digits, `-`, `_` and `.` replaced by `_`
/// (`00-T-shirt_top`).
pub fn class_folder(label: usize, classes: usize, name: &str) -> String {
    let width = (classes.saturating_sub(1)).to_string().len().max(2);
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{label:0width$}-{safe}")
}

/// Writes `train/<class>/<index>.png` and `test/…` into `dir`: 8-bit gray or RGB PNGs, files
/// numbered with zero padding in sample order.
///
/// # Errors
/// [`Error::DataFile`] for float values or samples that are not 1- or 3-channel images;
/// [`Error::Io`] when a file cannot be written.
pub fn write(ds: &Dataset, dir: &Path) -> Result<()> {
    let InputShape::Image {
        channels,
        height,
        width,
    } = ds.input
    else {
        return Err(bad(
            dir,
            FORMAT,
            format!(
                "an image folder holds images; this dataset's samples are {}",
                ds.input
            ),
        ));
    };
    let color = match channels {
        1 => image::ExtendedColorType::L8,
        3 => image::ExtendedColorType::Rgb8,
        c => {
            return Err(bad(
                dir,
                FORMAT,
                format!("PNG images are gray or RGB; this dataset has {c} channels"),
            ));
        }
    };
    for (split, name) in [(&ds.train, SPLITS[0]), (&ds.test, SPLITS[1])] {
        let Values::U8(v) = &split.values else {
            return Err(bad(
                dir,
                FORMAT,
                format!(
                    "PNG images hold bytes; this dataset holds {}",
                    split.values.dtype()
                ),
            ));
        };
        let folders: Vec<PathBuf> = (0..ds.classes)
            .map(|c| {
                dir.join(name)
                    .join(class_folder(c, ds.classes, &ds.class_names[c]))
            })
            .collect();
        for f in &folders {
            std::fs::create_dir_all(f).map_err(|e| Error::io(f, e))?;
        }
        let digits = split.len().saturating_sub(1).to_string().len();
        let f = split.features;
        let mut hwc = vec![0u8; f];
        for i in 0..split.len() {
            let row = &v[i * f..(i + 1) * f];
            let buf: &[u8] = if channels == 1 {
                row
            } else {
                let plane = height * width;
                for k in 0..plane {
                    for c in 0..3 {
                        hwc[k * 3 + c] = row[c * plane + k];
                    }
                }
                &hwc
            };
            let path = folders[split.labels[i] as usize].join(format!("{i:0digits$}.png"));
            image::save_buffer_with_format(
                &path,
                buf,
                width as u32,
                height as u32,
                color,
                image::ImageFormat::Png,
            )
            .map_err(|e| bad(&path, FORMAT, format!("cannot write: {e}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_folders_sort_in_label_order_and_are_safe_names() {
        assert_eq!(class_folder(0, 10, "T-shirt/top"), "00-T-shirt_top");
        assert_eq!(class_folder(9, 10, "Ankle boot"), "09-Ankle_boot");
        assert_eq!(class_folder(7, 120, "x"), "007-x");
        let mut names: Vec<String> = (0..12).map(|c| class_folder(c, 12, "z")).collect();
        let before = names.clone();
        names.sort();
        assert_eq!(names, before);
    }
}
