//! Image-classification datasets in IDX format, held as contiguous arrays.
//!
//! Where the files are looked for: the `path` given in `[data]` when there is one (and only
//! there); otherwise `$ENGRAM_DATA/<name>/` (`$ENGRAM_DATA` defaults to `./data`, where
//! `engram data fetch` writes), then `/usr/share/datasets/<name>/` (Debian's
//! `dataset-fashion-mnist` installs there).
//!
//! Each directory must hold `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each raw or with `.gz`.

use super::idx::read_idx;
use crate::error::{Error, IdxError, Result};
use std::path::{Path, PathBuf};

/// An IDX dataset of the MNIST family: where to find and verify its files, and its
/// statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DatasetSpec {
    /// The name used in `[data] dataset` and as the directory name.
    pub name: &'static str,
    /// Per-pixel mean of the training set after scaling to `[0, 1]`.
    pub mean: f32,
    /// Per-pixel standard deviation of the training set after scaling to `[0, 1]`.
    pub std: f32,
    /// Number of classes.
    pub classes: usize,
    /// The classes' names, by label.
    pub class_names: &'static [&'static str],
    /// Where to download the four files (`engram data fetch`).
    pub base_url: &'static str,
    /// SHA-256 of each file's *decompressed* IDX content, in [`FILES`] order, where pinned.
    /// Pinned on the decompressed bytes so that upstream's files and re-compressed copies
    /// (Debian's package) verify alike.
    pub sha256: Option<[&'static str; 4]>,
}

/// The four IDX files of a dataset, without the `.gz` suffix.
pub const FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// Datasets engram can load: Fashion-MNIST (Xiao et al. 2017) and MNIST (LeCun et al. 1998).
pub const DATASETS: &[DatasetSpec] = &[
    DatasetSpec {
        name: "fashion-mnist",
        mean: 0.2860,
        std: 0.3530,
        classes: 10,
        class_names: &[
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ],
        base_url: "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        // Measured on Debian's dataset-fashion-mnist 0.0~git20200523 (from the upstream repo).
        sha256: Some([
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        ]),
    },
    DatasetSpec {
        name: "mnist",
        mean: 0.1307,
        std: 0.3081,
        classes: 10,
        class_names: &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
        base_url: "https://ossci-datasets.s3.amazonaws.com/mnist/",
        // Not pinned: no verified copy was available when this was written.
        sha256: None,
    },
];

/// The registration of `fashion-mnist` ([`DATASETS`]' first entry).
pub const FASHION_MNIST_REGISTRATION: crate::registry::Registration = crate::registration!(dataset "fashion-mnist", "Fashion-MNIST (Xiao et al. 2017): 70,000 28×28 gray images of 10 clothing classes, IDX files", IdxParams, load_request);

/// The registration of `mnist` ([`DATASETS`]' second entry).
pub const MNIST_REGISTRATION: crate::registry::Registration = crate::registration!(dataset "mnist", "MNIST (LeCun et al. 1998): 70,000 28×28 gray images of handwritten digits, IDX files", IdxParams, load_request);

/// The IDX datasets' keys: they take none beyond `[data]`'s own (`path`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct IdxParams {}

/// The factory of the IDX datasets of [`DATASETS`] ([`crate::data::BUILTINS`]): [`load`].
///
/// # Errors
/// As [`load`].
pub fn load_request(req: &super::DatasetRequest<'_>) -> Result<Dataset> {
    load(req.name, req.path)
}

/// Looks an IDX dataset up by name.
///
/// # Errors
/// [`Error::Data`] naming the known datasets.
pub fn spec(name: &str) -> Result<&'static DatasetSpec> {
    DATASETS.iter().find(|d| d.name == name).ok_or_else(|| {
        Error::Data(format!(
            "unknown dataset `{name}`; known: {}",
            DATASETS
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// One split (train or test) as contiguous arrays.
///
/// Pixels stay bytes (a quarter of the memory of `f32`); [`Split::normalized_row`] turns a row
/// into the model's input `(x/255 − mean)/std` when a batch is gathered.
#[derive(Clone, Debug)]
pub struct Split {
    /// Raw pixels, row-major `[n, features]`.
    pub images: Vec<u8>,
    /// Per-pixel mean after scaling to `[0, 1]`.
    pub mean: f32,
    /// Per-pixel standard deviation after scaling to `[0, 1]`.
    pub std: f32,
    /// Class labels `[n]`.
    pub labels: Vec<u8>,
    /// Features per sample (784 for 28×28).
    pub features: usize,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split is empty.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Sample `i`'s raw pixels, `[features]`.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.images[i * self.features..(i + 1) * self.features]
    }

    /// Sample `i`'s normalised pixels `(x/255 − mean)/std` appended to `out`, in the order
    /// `perm` gives (`out[k] = x[perm[k]]`) when there is one.
    pub fn normalized_row(&self, i: usize, perm: Option<&[u32]>, out: &mut Vec<f32>) {
        let row = self.row(i);
        let scale = 1.0 / (255.0 * self.std);
        let shift = self.mean / self.std;
        match perm {
            Some(p) => out.extend(
                p.iter()
                    .map(|&j| f32::from(row[j as usize]) * scale - shift),
            ),
            None => out.extend(row.iter().map(|&x| f32::from(x) * scale - shift)),
        }
    }
}

/// A loaded dataset: two splits and what a model needs to know of them.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Its registered name.
    pub name: String,
    /// Where the files came from (a directory or a file).
    pub dir: PathBuf,
    /// Training split (60,000 samples for the MNIST family).
    pub train: Split,
    /// Test split (10,000 samples).
    pub test: Split,
    /// One sample's shape; `input.features()` equals each split's `features`.
    pub input: crate::model::InputShape,
    /// Number of classes; every label is below it.
    pub classes: usize,
    /// The classes' names, by label (`classes` of them).
    pub class_names: Vec<String>,
}

impl Dataset {
    /// A dataset of `classes` classes named by their labels (`"0"`, `"1"`, …) from two splits
    /// of samples shaped `input` (for tests and plugins' factories).
    pub fn new(
        name: &str,
        dir: PathBuf,
        train: Split,
        test: Split,
        input: crate::model::InputShape,
        classes: usize,
    ) -> Self {
        Self {
            name: name.to_string(),
            dir,
            train,
            test,
            input,
            classes,
            class_names: (0..classes).map(|c| c.to_string()).collect(),
        }
    }
}

fn file_in(dir: &Path, stem: &str) -> Option<PathBuf> {
    [format!("{stem}.gz"), stem.to_string()]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

fn has_all(dir: &Path) -> bool {
    FILES.iter().all(|f| file_in(dir, f).is_some())
}

/// `$ENGRAM_DATA`, or `./data` when it is unset.
pub fn data_root() -> PathBuf {
    std::env::var_os("ENGRAM_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("data"))
}

/// The directories searched for dataset `name`, in order.
pub fn search_dirs(name: &str, configured: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = configured {
        dirs.push(p.to_path_buf());
    }
    dirs.push(data_root().join(name));
    dirs.push(PathBuf::from("/usr/share/datasets").join(name));
    dirs
}

/// Finds the directory holding dataset `name`. A configured `path` is the only place looked
/// (a wrong path is an error, never a silent fallback to another copy).
///
/// # Errors
/// [`Error::DatasetMissing`] listing the directories tried and how to get the files.
pub fn resolve(name: &str, configured: Option<&Path>) -> Result<PathBuf> {
    let spec = spec(name)?;
    if let Some(dir) = configured {
        if has_all(dir) {
            return Ok(dir.to_path_buf());
        }
        let missing: Vec<&str> = FILES
            .iter()
            .copied()
            .filter(|f| file_in(dir, f).is_none())
            .collect();
        return Err(Error::DatasetMissing {
            name: name.to_string(),
            searched: dir.display().to_string(),
            hint: format!(
                "`[data] path` points here, but {} missing: {} (raw or .gz); fix the path or remove it to use $ENGRAM_DATA/{name} or /usr/share/datasets/{name}",
                if missing.len() == 1 {
                    "this file is"
                } else {
                    "these files are"
                },
                missing.join(", ")
            ),
        });
    }
    let dirs = search_dirs(name, configured);
    if let Some(d) = dirs.iter().find(|d| has_all(d)) {
        return Ok(d.clone());
    }
    let debian = if name == "fashion-mnist" {
        "`sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or "
    } else {
        ""
    };
    Err(Error::DatasetMissing {
        name: name.to_string(),
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        hint: format!(
            "{debian}`engram data fetch {name}` (downloads {} into $ENGRAM_DATA/{name}, ./data/{name} by default), \
             or put the four files {} (raw or .gz) in a directory and set `[data] path` or $ENGRAM_DATA",
            spec.base_url,
            FILES.join(", ")
        ),
    })
}

/// A split and its images' `(height, width)` from the IDX header.
fn load_split(
    dir: &Path,
    images: &str,
    labels: &str,
    spec: &DatasetSpec,
) -> Result<(Split, (usize, usize))> {
    let ipath = file_in(dir, images).expect("resolved directory has the file");
    let lpath = file_in(dir, labels).expect("resolved directory has the file");
    let img = read_idx(&ipath)?;
    let lab = read_idx(&lpath)?;
    let bad = |path: &Path, dims: &[usize], reason: String| Error::Idx {
        path: path.to_path_buf(),
        source: IdxError::BadDims {
            dims: dims.iter().map(|&d| d as u32).collect(),
            reason,
        },
    };
    if img.dims.len() != 3 {
        return Err(bad(
            &ipath,
            &img.dims,
            "images must be [n, height, width]".into(),
        ));
    }
    if lab.dims.len() != 1 {
        return Err(bad(&lpath, &lab.dims, "labels must be [n]".into()));
    }
    if lab.dims[0] != img.dims[0] {
        return Err(bad(
            &lpath,
            &lab.dims,
            format!("{} labels for {} images", lab.dims[0], img.dims[0]),
        ));
    }
    if let Some(&l) = lab.data.iter().find(|&&l| l as usize >= spec.classes) {
        return Err(bad(
            &lpath,
            &lab.dims,
            format!("label {l} outside 0..{}", spec.classes),
        ));
    }
    let hw = (img.dims[1], img.dims[2]);
    Ok((
        Split {
            images: img.data,
            mean: spec.mean,
            std: spec.std,
            labels: lab.data,
            features: hw.0 * hw.1,
        },
        hw,
    ))
}

/// Loads dataset `name` from the first directory that has it.
///
/// # Errors
/// [`Error::DatasetMissing`], [`Error::Io`], or [`Error::Idx`] for a corrupt or inconsistent
/// file.
pub fn load(name: &str, configured: Option<&Path>) -> Result<Dataset> {
    let spec = spec(name)?;
    let dir = resolve(name, configured)?;
    let (train, image_hw) = load_split(&dir, FILES[0], FILES[1], spec)?;
    let (test, test_hw) = load_split(&dir, FILES[2], FILES[3], spec)?;
    if image_hw != test_hw {
        return Err(Error::Data(format!(
            "{}: train images are {}×{} pixels, test images {}×{}",
            dir.display(),
            image_hw.0,
            image_hw.1,
            test_hw.0,
            test_hw.1
        )));
    }
    Ok(Dataset {
        name: spec.name.to_string(),
        dir,
        train,
        test,
        input: crate::model::InputShape::Image {
            channels: 1,
            height: image_hw.0,
            width: image_hw.1,
        },
        classes: spec.classes,
        class_names: spec.class_names.iter().map(|s| s.to_string()).collect(),
    })
}
