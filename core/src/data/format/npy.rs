//! `format = "npy"`: NumPy arrays (the `.npy` format, read and written with the `npyz` crate).
//!
//! `path` is a directory holding `train_x.npy`, `train_y.npy`, `test_x.npy` and `test_y.npy`,
//! or one `.npz` archive holding arrays of those four names (`numpy.savez`), or a directory
//! holding exactly one `.npz`.
//! - `*_x`: `[n, …]` of `uint8` (pixels, scaled by 1/255) or `float32`/`float64` (taken as
//!   they are; `float64` is narrowed). `[n, c, h, w]` is an image batch in PyTorch's layout;
//!   `[n, h, w, c]` with 1, 3 or 4 channels last (and not first) is transposed to it;
//!   `[n, h, w]` is one channel; `[n, f]` a feature vector.
//! - `*_y`: `[n]` of any integer type, each 0 or more.
//!
//! `engram data export --format npy` writes the four `.npy` files (`*_y` as `int64`).

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use npyz::{DType, NpyFile, TypeChar, WriterBuilder};
use std::io::Read;
use std::path::{Path, PathBuf};

const FORMAT: &str = <NpyOptions as crate::component::Component>::NAME;

/// The four arrays, by name.
pub const ARRAYS: [&str; 4] = ["train_x", "train_y", "test_x", "test_y"];

/// `[data.options]` of `format = "npy"`: it takes no keys yet (any key is refused, with
/// its position).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NpyOptions {}

crate::component!(format "npy", "NumPy arrays: train_x.npy [n, …] (uint8 or float), train_y.npy [n] (integers), test_x.npy, test_y.npy, or one .npz of the four", NpyOptions, read, write);

/// An array as read: its shape and values.
struct Array {
    shape: Vec<usize>,
    values: Values,
}

fn decode<R: Read>(npy: NpyFile<R>, path: &Path, labels: bool) -> Result<(Vec<usize>, Data)> {
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let DType::Plain(ty) = npy.dtype() else {
        return Err(bad(
            path,
            FORMAT,
            "a structured (record) array; give a plain numeric array",
        ));
    };
    if npy.order() == npyz::Order::Fortran && npy.shape().len() > 1 {
        return Err(bad(
            path,
            FORMAT,
            "Fortran (column-major) order; save it with numpy.ascontiguousarray first",
        ));
    }
    let io = |e: std::io::Error| bad(path, FORMAT, format!("cannot decode the data: {e}"));
    let size = ty.size_field();
    let data = match (ty.type_char(), size) {
        (TypeChar::Uint, 1) if !labels => Data::U8(npy.into_vec::<u8>().map_err(io)?),
        (TypeChar::Float, 4) if !labels => Data::F32(npy.into_vec::<f32>().map_err(io)?),
        (TypeChar::Uint, 4) if !labels => Data::U32(npy.into_vec::<u32>().map_err(io)?),
        (TypeChar::Float, 8) if !labels => Data::F32(
            npy.into_vec::<f64>()
                .map_err(io)?
                .into_iter()
                .map(|x| x as f32)
                .collect(),
        ),
        (TypeChar::Int, 1) if labels => Data::I64(ints::<i8, _>(npy, io)?),
        (TypeChar::Int, 2) if labels => Data::I64(ints::<i16, _>(npy, io)?),
        (TypeChar::Int, 4) if labels => Data::I64(ints::<i32, _>(npy, io)?),
        (TypeChar::Int, 8) if labels => Data::I64(ints::<i64, _>(npy, io)?),
        (TypeChar::Uint, 1) => Data::I64(ints::<u8, _>(npy, io)?),
        (TypeChar::Uint, 2) if labels => Data::I64(ints::<u16, _>(npy, io)?),
        (TypeChar::Uint, 4) if labels => Data::I64(ints::<u32, _>(npy, io)?),
        (TypeChar::Uint, 8) if labels => Data::I64(
            npy.into_vec::<u64>()
                .map_err(io)?
                .into_iter()
                // Past i64: refused as above the class limit, not called negative.
                .map(|x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect(),
        ),
        _ => {
            return Err(bad(
                path,
                FORMAT,
                format!(
                    "dtype {ty}: {}",
                    if labels {
                        "labels must be integers (int8 … int64, uint8 … uint64)"
                    } else {
                        "samples must be uint8 (pixels), uint32 (token ids), float32 or float64"
                    }
                ),
            ));
        }
    };
    Ok((shape, data))
}

enum Data {
    U8(Vec<u8>),
    /// Token ids (`uint32` samples).
    U32(Vec<u32>),
    F32(Vec<f32>),
    I64(Vec<i64>),
}

fn ints<T: npyz::Deserialize + Into<i64>, R: Read>(
    npy: NpyFile<R>,
    io: impl Fn(std::io::Error) -> Error,
) -> Result<Vec<i64>> {
    Ok(npy
        .into_vec::<T>()
        .map_err(io)?
        .into_iter()
        .map(Into::into)
        .collect())
}

/// Where the arrays live: four files, or one archive.
enum Source {
    Files(PathBuf),
    Archive(PathBuf),
}

fn source(path: &Path) -> Result<Source> {
    if path.is_file() {
        return Ok(Source::Archive(path.to_path_buf()));
    }
    if !path.is_dir() {
        return Err(bad(
            path,
            FORMAT,
            "not a regular file or a directory (a device, a FIFO, a link to nothing): `[data] \
             path` names the directory of the .npy files or one .npz archive",
        ));
    }
    if ARRAYS
        .iter()
        .any(|a| crate::fsutil::is_present(&path.join(format!("{a}.npy"))))
    {
        return Ok(Source::Files(path.to_path_buf()));
    }
    let npz: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "npz"))
        .collect();
    match &npz[..] {
        [one] => Ok(Source::Archive(one.clone())),
        [] => Err(bad(
            path,
            FORMAT,
            format!(
                "no {} here, and no .npz",
                ARRAYS.map(|a| format!("{a}.npy")).join(", ")
            ),
        )),
        _ => Err(bad(
            path,
            FORMAT,
            format!(
                "{} .npz archives here; set `[data] path` to the one to read",
                npz.len()
            ),
        )),
    }
}

/// The longest NPY header engram reads, in bytes. NumPy's own writers keep headers to a few
/// hundred bytes, and its reader refuses headers over 10,000 bytes unless told otherwise
/// (`max_header_size`, NumPy 1.24); a version-2 header's 4-byte length could otherwise make the
/// reader allocate 4 GiB for a 13-byte file.
pub const MAX_HEADER_BYTES: u32 = 1 << 16;

/// Checks the header length of the NPY file `file` (NPY format, versions 1 to 3: magic
/// `\x93NUMPY`, two version bytes, then the length as a little-endian `u16` (v1) or `u32`) before
/// any of it is read, and rewinds the file.
///
/// # Errors
/// [`Error::DataFile`] naming `path` when the length is over [`MAX_HEADER_BYTES`];
/// [`Error::Io`] when the file cannot be read or rewound. A prefix that is not NPY's is left to
/// the NPY reader to name.
fn check_header_len(file: &mut std::fs::File, path: &Path) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match file
            .read(&mut head[got..])
            .map_err(|e| Error::io(path, e))?
        {
            0 => break,
            n => got += n,
        }
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    if got < 10 || &head[..6] != b"\x93NUMPY" {
        return Ok(());
    }
    let len = match head[6] {
        1 => u32::from(u16::from_le_bytes([head[8], head[9]])),
        _ if got == 12 => u32::from_le_bytes([head[8], head[9], head[10], head[11]]),
        _ => return Ok(()),
    };
    if len > MAX_HEADER_BYTES {
        return Err(bad(
            path,
            FORMAT,
            format!(
                "its header claims {len} bytes (NPY headers are at most {MAX_HEADER_BYTES}); not an NPY file engram reads"
            ),
        ));
    }
    Ok(())
}

fn read_array(src: &Source, name: &str) -> Result<(PathBuf, Vec<usize>, Data)> {
    let labels = name.ends_with("_y");
    match src {
        Source::Files(dir) => {
            let path = dir.join(format!("{name}.npy"));
            if !crate::fsutil::is_present(&path) {
                return Err(bad(
                    &path,
                    FORMAT,
                    format!(
                        "missing: the NPY layout is {} in one directory",
                        ARRAYS.map(|a| format!("{a}.npy")).join(", ")
                    ),
                ));
            }
            // A FIFO, a device or a link to nothing is refused by name before it is opened.
            let mut file = crate::fsutil::open_bounded(&path, crate::fsutil::MAX_DATA_BYTES)
                .map_err(|e| Error::io(&path, e))?;
            check_header_len(&mut file, &path)?;
            let npy = NpyFile::new(std::io::BufReader::new(file))
                .map_err(|e| bad(&path, FORMAT, format!("not an NPY file: {e}")))?;
            let (shape, data) = decode(npy, &path, labels)?;
            Ok((path, shape, data))
        }
        Source::Archive(path) => {
            crate::fsutil::check_regular(path, crate::fsutil::MAX_DATA_BYTES)
                .map_err(|e| Error::io(path, e))?;
            let mut npz = npyz::npz::NpzArchive::open(path)
                .map_err(|e| bad(path, FORMAT, format!("not an .npz archive: {e}")))?;
            let names: Vec<String> = npz.array_names().map(str::to_string).collect();
            let npy = npz
                .by_name(name)
                .map_err(|e| bad(path, FORMAT, format!("array `{name}`: {e}")))?
                .ok_or_else(|| {
                    bad(
                        path,
                        FORMAT,
                        format!(
                            "no array `{name}` (it holds {}); the archive needs {}",
                            if names.is_empty() {
                                "none".into()
                            } else {
                                names.join(", ")
                            },
                            ARRAYS.join(", ")
                        ),
                    )
                })?;
            let at = path.join(name);
            let (shape, data) = decode(npy, &at, labels)?;
            Ok((at, shape, data))
        }
    }
}

/// The sample shape of `x` of shape `[n, …]`, transposing channels-last images to CHW.
fn samples(path: &Path, shape: &[usize], data: Data) -> Result<(InputShape, Array)> {
    let values = match data {
        Data::U8(v) => Values::U8(v),
        Data::F32(v) => Values::F32(v),
        Data::U32(v) => Values::Tokens(v),
        Data::I64(_) => unreachable!("samples decode as u8, u32 or f32"),
    };
    let is_channel = |d: usize| matches!(d, 1 | 3 | 4);
    let (input, values) = match *shape {
        [_, f] => (InputShape::Features(f), values),
        [_, height, width] => (
            InputShape::Image {
                channels: 1,
                height,
                width,
            },
            values,
        ),
        [_, c, h, w] if is_channel(c) || !is_channel(w) => (
            InputShape::Image {
                channels: c,
                height: h,
                width: w,
            },
            values,
        ),
        [n, h, w, c] => (
            InputShape::Image {
                channels: c,
                height: h,
                width: w,
            },
            to_chw(values, n, h, w, c),
        ),
        _ => {
            return Err(bad(
                path,
                FORMAT,
                format!(
                    "shape {shape:?}: samples must be [n, features], [n, height, width] or [n, channels, height, width]"
                ),
            ));
        }
    };
    if input.features() == 0 {
        return Err(bad(
            path,
            FORMAT,
            format!("shape {shape:?} has an empty sample"),
        ));
    }
    Ok((
        input,
        Array {
            shape: shape.to_vec(),
            values,
        },
    ))
}

/// `[n, h, w, c]` → `[n, c, h, w]`.
fn to_chw(values: Values, n: usize, h: usize, w: usize, c: usize) -> Values {
    fn t<T: Copy + Default>(v: &[T], n: usize, h: usize, w: usize, c: usize) -> Vec<T> {
        let mut out = vec![T::default(); v.len()];
        for i in 0..n {
            let base = i * h * w * c;
            for y in 0..h {
                for x in 0..w {
                    for k in 0..c {
                        out[base + (k * h + y) * w + x] = v[base + (y * w + x) * c + k];
                    }
                }
            }
        }
        out
    }
    match values {
        Values::U8(v) => Values::U8(t(&v, n, h, w, c)),
        Values::F32(v) => Values::F32(t(&v, n, h, w, c)),
        Values::Tokens(v) => Values::Tokens(t(&v, n, h, w, c)),
    }
}

fn split(src: &Source, x: &str, y: &str) -> Result<(InputShape, Raw)> {
    let (xpath, xshape, xdata) = read_array(src, x)?;
    let (ypath, yshape, ydata) = read_array(src, y)?;
    if let Data::F32(v) = &xdata
        && let Some(i) = v.iter().position(|x| !x.is_finite())
    {
        return Err(bad(
            &xpath,
            FORMAT,
            format!(
                "value {} (flat index {i}, sample {}) is not finite: {}",
                i + 1,
                i / (v.len() / xshape[0].max(1)).max(1),
                v[i]
            ),
        ));
    }
    let (input, array) = samples(&xpath, &xshape, xdata)?;
    let Data::I64(labels) = ydata else {
        unreachable!("labels decode as i64")
    };
    if yshape.len() != 1 || yshape[0] != array.shape[0] {
        return Err(bad(
            &ypath,
            FORMAT,
            format!(
                "labels of shape {yshape:?} for samples of shape {:?}: want [{}]",
                array.shape, array.shape[0]
            ),
        ));
    }
    let labels = super::labels_from_i64(&ypath, FORMAT, labels)?;
    Ok((
        input,
        Raw {
            values: array.values,
            labels,
        },
    ))
}

/// Reads `[data] path` as NumPy arrays (with `dataset.toml` when present beside them).
///
/// # Errors
/// [`Error::DataFile`] naming the file for a missing array, another dtype, a shape that does
/// not fit, a negative label; [`Error::Io`] for an unreadable file; [`super::assemble`]'s.
pub fn read(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let path = super::required_dir(req, FORMAT)?;
    let NpyOptions {} = req.options()?;
    let src = source(path)?;
    let (input, train) = split(&src, ARRAYS[0], ARRAYS[1])?;
    let (test_input, test) = split(&src, ARRAYS[2], ARRAYS[3])?;
    if input != test_input {
        return Err(bad(
            path,
            FORMAT,
            format!("train samples are {input}, test samples {test_input}"),
        ));
    }
    let dir = if path.is_file() {
        path.parent().unwrap_or(Path::new("."))
    } else {
        path
    };
    let name = super::display_name(req, path);
    super::assemble(FORMAT, &name, path, train, test, input, Meta::read(dir)?)
}

fn write_array<T: npyz::AutoSerialize + Copy>(
    path: &Path,
    shape: &[u64],
    data: &[T],
) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, e);
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}

/// Writes the four `.npy` files into `dir`: `*_x` `[n, c, h, w]` (or `[n, f]`) in the
/// values' own type, `*_y` `[n]` `int64`.
///
/// # Errors
/// [`Error::Io`] when a file cannot be written.
pub fn write(ds: &Dataset, dir: &Path) -> Result<()> {
    for (split, x, y) in [
        (&ds.train, ARRAYS[0], ARRAYS[1]),
        (&ds.test, ARRAYS[2], ARRAYS[3]),
    ] {
        let n = split.len() as u64;
        let mut shape = vec![n];
        shape.extend(ds.input.dims().iter().map(|&d| d as u64));
        let path = dir.join(format!("{x}.npy"));
        match &split.values {
            Values::U8(v) => write_array(&path, &shape, v)?,
            Values::F32(v) => write_array(&path, &shape, v)?,
            Values::Tokens(v) => write_array(&path, &shape, v)?,
        }
        let labels: Vec<i64> = split.labels.iter().map(|&l| i64::from(l)).collect();
        write_array(&dir.join(format!("{y}.npy")), &[n], &labels)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_images_are_transposed_to_chw() {
        // One 2×2 RGB image, values = 10·channel + pixel.
        let hwc: Vec<u8> = (0..4)
            .flat_map(|p| (0..3).map(move |c| 10 * c + p))
            .collect();
        let Values::U8(chw) = to_chw(Values::U8(hwc), 1, 2, 2, 3) else {
            unreachable!()
        };
        assert_eq!(chw, vec![0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]);
    }
}
