//! `format = "image-folder"`: torchvision's `ImageFolder` convention, `path/train/<class>/*`
//! and `path/test/<class>/*`, PNG or JPEG (decoded with the `image` crate, by content rather
//! than by extension), gray or colour.
//!
//! - Class index: the position of the class folder's name in the sorted (byte-wise) list of
//!   the train folders; a test folder must be one of them. Class names: the folder names, or
//!   `dataset.toml`'s `class_names` when it has them.
//! - Sample order: sorted by file name across the classes (ties by class), so that files
//!   numbered in their original order (as `engram data export` writes them) read back in it.
//!   Images in subfolders of a class folder belong to it; files whose name starts with `.` and
//!   files that are not `.png`, `.jpg` or `.jpeg` are skipped (with a warning that counts them).
//! - Channels: 3 (RGB, CHW) when any image has colour (gray ones are repeated into three
//!   channels), else 1; alpha is dropped; 16-bit images are reduced to 8 bits. Every image
//!   must have the first one's size.

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

const FORMAT: &str = <ImageFolderOptions as crate::component::Component>::NAME;

/// The two split folders.
pub const SPLITS: [&str; 2] = ["train", "test"];

/// `[data.options]` of `format = "image-folder"`: it takes no keys yet (any key is refused, with
/// its position).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageFolderOptions {}

crate::component!(format "image-folder", "torchvision's ImageFolder layout: train/CLASS/*.png or .jpg and test/CLASS/*, gray or RGB, classes in sorted folder order", ImageFolderOptions, read, write);

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
    path: PathBuf,
    size: (u32, u32),
    color: bool,
    pixels: Vec<u8>,
}

fn decode(path: &Path) -> Result<Image> {
    // Through the bounded read: a FIFO named `x.png` (which would block the open forever), a
    // device, a link to nothing (`me.png -> me.png`) are refused by name.
    let bytes = crate::fsutil::read_bounded(path, crate::fsutil::MAX_DATA_BYTES)
        .map_err(|e| Error::io(path, e))?;
    let img = image::ImageReader::new(std::io::Cursor::new(bytes))
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
            path: path.to_path_buf(),
            size,
            color: true,
            pixels: chw,
        })
    } else {
        Ok(Image {
            path: path.to_path_buf(),
            size,
            color: false,
            pixels: img.into_luma8().into_raw(),
        })
    }
}

/// The image extensions read (as torchvision's `ImageFolder`, other files are skipped).
const EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// Every image file under `dir`, in its subfolders too (as torchvision's `ImageFolder`), as
/// `(file name, path)`; other files are counted in `skipped`.
fn images_in(
    dir: &Path,
    out: &mut Vec<(String, PathBuf)>,
    skipped: &mut Vec<PathBuf>,
) -> Result<()> {
    for (name, p) in sorted_entries(dir)? {
        if p.is_dir() {
            images_in(&p, out, skipped)?;
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
        {
            out.push((name, p));
        } else {
            skipped.push(p);
        }
    }
    Ok(())
}

/// Reads one split: images with their labels in sorted file-name order.
/// With `require_images`, a class folder without images is an error (the classes come from
/// the folders, and an empty one is a class no sample has).
fn read_split(
    dir: &Path,
    classes: &[String],
    split: &str,
    require_images: bool,
) -> Result<Vec<(Image, u32)>> {
    let mut files: Vec<(String, u32, PathBuf)> = Vec::new();
    let mut skipped = Vec::new();
    for (name, path) in class_dirs(&dir.join(split))? {
        let Some(label) = classes.iter().position(|c| *c == name) else {
            return Err(bad(
                &path,
                FORMAT,
                format!("class folder `{name}` has no train folder of the same name"),
            ));
        };
        let mut found = Vec::new();
        images_in(&path, &mut found, &mut skipped)?;
        if found.is_empty() && require_images {
            return Err(bad(
                &path,
                FORMAT,
                "a train class folder without images (.png, .jpg, .jpeg); remove it, add its images, or name every class in dataset.toml's class_names to keep it",
            ));
        }
        files.extend(found.into_iter().map(|(f, p)| (f, label as u32, p)));
    }
    if let Some(first) = skipped.first() {
        eprintln!(
            "warning: {}: skipped {} file(s) that are not .png, .jpg or .jpeg images (first: {})",
            dir.join(split).display(),
            skipped.len(),
            first.display()
        );
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
    let ImageFolderOptions {} = req.options()?;
    let classes: Vec<String> = class_dirs(&dir.join(SPLITS[0]))?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut meta = Meta::read(dir)?.unwrap_or_default();
    // Without dataset.toml's class names, every train class folder must hold images.
    let train = read_split(dir, &classes, SPLITS[0], meta.class_names.is_none())?;
    let test = read_split(dir, &classes, SPLITS[1], false)?;
    let size = train[0].0.size;
    let first = train[0].0.path.clone();
    let color = train.iter().chain(&test).any(|(i, _)| i.color);
    let channels = if color { 3 } else { 1 };
    let raw = |items: Vec<(Image, u32)>| -> Result<Raw> {
        let mut values = Vec::with_capacity(items.len() * channels * (size.0 * size.1) as usize);
        let mut labels = Vec::with_capacity(items.len());
        for (img, label) in items {
            if img.size != size {
                return Err(bad(
                    &img.path,
                    FORMAT,
                    format!(
                        "{}×{} pixels, but the first train image ({}) is {}×{}; give every image one size",
                        img.size.0,
                        img.size.1,
                        first.display(),
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
    if meta.class_names.is_none() {
        meta.class_names = Some(classes.clone());
    }
    let name = super::display_name(req, dir);
    super::assemble(
        FORMAT,
        &name,
        dir,
        raw(train)?,
        raw(test)?,
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
    let [channels, height, width] = super::byte_images(ds, dir, FORMAT)?;
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
            unreachable!("byte_images checked both splits")
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
