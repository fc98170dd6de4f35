//! The CIFAR datasets (Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny
//! Images"): `cifar10` and `cifar100` of `[data] dataset`, read from the files of the official
//! binary archives (`cifar-10-binary.tar.gz`, `cifar-100-binary.tar.gz`).
//!
//! - **CIFAR-10**: `data_batch_1.bin` … `data_batch_5.bin` (training, 10,000 records each) and
//!   `test_batch.bin` (10,000). A record is 3,073 bytes: the label (0–9), then 3,072 pixels.
//! - **CIFAR-100**: `train.bin` (50,000 records) and `test.bin` (10,000). A record is 3,074
//!   bytes: the coarse label (0–19), the fine label (0–99), then 3,072 pixels.
//!   `[data.options] label = "fine"` (default, 100 classes) or `"coarse"` (20 superclasses).
//!
//! The pixels are channel-major, `[3, 32, 32]` (1,024 red, 1,024 green, 1,024 blue, each row by
//! row), which is engram's CHW layout: a record's pixels are a sample's values as they are. The
//! normalisation is the image rule of every format ([`super::assemble`]): the training split's
//! mean and standard deviation per channel, after scaling bytes to `[0, 1]`.
//!
//! Where the files are looked for is the IDX datasets' rule ([`crate::data::catalog`]):
//! `[data] path` only when given, else `$ENGRAM_DATA/<name>/`, then
//! `/usr/share/datasets/<name>/`; in each, the files themselves or the archive's own folder
//! (`cifar-10-batches-bin/`, `cifar-100-binary/`) as `tar xzf` leaves it. `engram data fetch
//! cifar10` writes the files into `$ENGRAM_DATA/cifar10/`.

use super::{Meta, Raw, bad};
use crate::data::InputShape;
use crate::data::catalog::search_dirs;
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The name CIFAR's errors give the format (`cifar10` and `cifar100` files alike).
pub const FORMAT: &str = "cifar";

/// Pixels of one record: `3 × 32 × 32`.
pub const PIXELS: usize = 3 * 32 * 32;

/// The sample shape of both datasets, `[3, 32, 32]`.
pub const SHAPE: InputShape = InputShape::Image {
    channels: 3,
    height: 32,
    width: 32,
};

/// A CIFAR dataset: its files, its record layout, its archive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CifarSpec {
    /// The name used in `[data] dataset`, `engram data fetch` and as the directory name.
    pub name: &'static str,
    /// The training files, in order.
    pub train: &'static [&'static str],
    /// The test file.
    pub test: &'static str,
    /// Label bytes before a record's pixels: 1 (CIFAR-10's label) or 2 (CIFAR-100's coarse,
    /// then fine label).
    pub label_bytes: usize,
    /// Records of each official file, in `train` order then `test`'s (checked by
    /// `engram data fetch` on the official archive).
    pub records: &'static [usize],
    /// The official archive's URL (`engram data fetch`).
    pub url: &'static str,
    /// The official archive's MD5, as published on the dataset's page (the only digest it
    /// publishes; its SHA-256 is not pinned).
    pub md5: &'static str,
    /// The folder the archive holds the files in.
    pub archive_dir: &'static str,
}

impl CifarSpec {
    /// Bytes of one record: the label bytes and [`PIXELS`].
    pub fn record_bytes(&self) -> usize {
        self.label_bytes + PIXELS
    }

    /// Every file, the training files then the test file.
    pub fn files(&self) -> Vec<&'static str> {
        let mut v = self.train.to_vec();
        v.push(self.test);
        v
    }
}

/// CIFAR-10.
pub const CIFAR10: CifarSpec = CifarSpec {
    name: <Cifar10Options as crate::component::Component>::NAME,
    train: &[
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
    ],
    test: "test_batch.bin",
    label_bytes: 1,
    records: &[10_000, 10_000, 10_000, 10_000, 10_000, 10_000],
    url: "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    md5: "c32a1d4ab5d03f1284b67883e8d87530",
    archive_dir: "cifar-10-batches-bin",
};

/// CIFAR-100.
pub const CIFAR100: CifarSpec = CifarSpec {
    name: <Cifar100Options as crate::component::Component>::NAME,
    train: &["train.bin"],
    test: "test.bin",
    label_bytes: 2,
    records: &[50_000, 10_000],
    url: "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
    md5: "03b5dce01913d631647c71ecec9e9cb8",
    archive_dir: "cifar-100-binary",
};

/// Both CIFAR datasets.
pub const SPECS: [CifarSpec; 2] = [CIFAR10, CIFAR100];

/// The CIFAR dataset named `name`, if it is one.
pub fn spec(name: &str) -> Option<&'static CifarSpec> {
    SPECS.iter().find(|s| s.name == name)
}

/// CIFAR-10's classes, by label (the archive's `batches.meta.txt`).
pub const CIFAR10_CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];

/// CIFAR-100's 20 superclasses, by coarse label (`coarse_label_names.txt`).
pub const CIFAR100_COARSE: [&str; 20] = [
    "aquatic_mammals",
    "fish",
    "flowers",
    "food_containers",
    "fruit_and_vegetables",
    "household_electrical_devices",
    "household_furniture",
    "insects",
    "large_carnivores",
    "large_man-made_outdoor_things",
    "large_natural_outdoor_scenes",
    "large_omnivores_and_herbivores",
    "medium_mammals",
    "non-insect_invertebrates",
    "people",
    "reptiles",
    "small_mammals",
    "trees",
    "vehicles_1",
    "vehicles_2",
];

/// CIFAR-100's 100 classes, by fine label (`fine_label_names.txt`).
pub const CIFAR100_FINE: [&str; 100] = [
    "apple",
    "aquarium_fish",
    "baby",
    "bear",
    "beaver",
    "bed",
    "bee",
    "beetle",
    "bicycle",
    "bottle",
    "bowl",
    "boy",
    "bridge",
    "bus",
    "butterfly",
    "camel",
    "can",
    "castle",
    "caterpillar",
    "cattle",
    "chair",
    "chimpanzee",
    "clock",
    "cloud",
    "cockroach",
    "couch",
    "crab",
    "crocodile",
    "cup",
    "dinosaur",
    "dolphin",
    "elephant",
    "flatfish",
    "forest",
    "fox",
    "girl",
    "hamster",
    "house",
    "kangaroo",
    "keyboard",
    "lamp",
    "lawn_mower",
    "leopard",
    "lion",
    "lizard",
    "lobster",
    "man",
    "maple_tree",
    "motorcycle",
    "mountain",
    "mouse",
    "mushroom",
    "oak_tree",
    "orange",
    "orchid",
    "otter",
    "palm_tree",
    "pear",
    "pickup_truck",
    "pine_tree",
    "plain",
    "plate",
    "poppy",
    "porcupine",
    "possum",
    "rabbit",
    "raccoon",
    "ray",
    "road",
    "rocket",
    "rose",
    "sea",
    "seal",
    "shark",
    "shrew",
    "skunk",
    "skyscraper",
    "snail",
    "snake",
    "spider",
    "squirrel",
    "streetcar",
    "sunflower",
    "sweet_pepper",
    "table",
    "tank",
    "telephone",
    "television",
    "tiger",
    "tractor",
    "train",
    "trout",
    "tulip",
    "turtle",
    "wardrobe",
    "whale",
    "willow_tree",
    "wolf",
    "woman",
    "worm",
];

/// `[data.options]` of the dataset `cifar10`: it takes no keys (any key is refused, with its
/// position).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cifar10Options {}

/// Which of CIFAR-100's two labels is the class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cifar100Label {
    /// The 100 classes (a record's second label byte).
    #[default]
    Fine,
    /// The 20 superclasses (a record's first label byte).
    Coarse,
}

/// `[data.options]` of the dataset `cifar100`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cifar100Options {
    /// `"fine"` (default: 100 classes) or `"coarse"` (20 superclasses).
    #[serde(default)]
    pub label: Cifar100Label,
}

crate::component!(pub const CIFAR10_REGISTRATION = dataset "cifar10", "CIFAR-10 (Krizhevsky 2009): 60,000 32×32 colour images of 10 classes, the official binary files", Cifar10Options, read_cifar10);
crate::component!(pub const CIFAR100_REGISTRATION = dataset "cifar100", "CIFAR-100 (Krizhevsky 2009): 60,000 32×32 colour images of 100 classes (label \"fine\") or 20 superclasses (\"coarse\"), the official binary files", Cifar100Options, read_cifar100);

/// The factory of the dataset `cifar10`: [`load`] with the label byte.
///
/// # Errors
/// As [`load`]; a positioned [`Error::Config`] for any `[data.options]` key.
pub fn read_cifar10(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let Cifar10Options {} = req.options()?;
    load(&CIFAR10, req.path, 0, &CIFAR10_CLASSES)
}

/// The factory of the dataset `cifar100`: [`load`] with the fine (default) or coarse label.
///
/// # Errors
/// As [`load`]; a positioned [`Error::Config`] for an unknown key or label kind.
pub fn read_cifar100(req: &crate::data::DatasetRequest<'_>) -> Result<Dataset> {
    let Cifar100Options { label } = req.options()?;
    match label {
        Cifar100Label::Fine => load(&CIFAR100, req.path, 1, &CIFAR100_FINE),
        Cifar100Label::Coarse => load(&CIFAR100, req.path, 0, &CIFAR100_COARSE),
    }
}

/// The directory holding every file of `spec` in `dir`: `dir` itself or its archive folder.
fn holding(spec: &CifarSpec, dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join(spec.archive_dir)]
        .into_iter()
        .find(|d| {
            spec.files()
                .iter()
                .all(|f| crate::fsutil::is_present(&d.join(f)))
        })
}

/// Finds the directory holding `spec`'s files: `configured` only when given, else the
/// catalog's places ([`search_dirs`]).
///
/// # Errors
/// [`Error::DatasetMissing`] naming the places tried, the missing files and how to get them.
pub fn resolve(spec: &CifarSpec, configured: Option<&Path>) -> Result<PathBuf> {
    let name = spec.name;
    let files = spec.files().join(", ");
    if let Some(dir) = configured {
        return holding(spec, dir).ok_or_else(|| Error::DatasetMissing {
            name: name.to_string(),
            searched: format!("{} (and its {}/)", dir.display(), spec.archive_dir),
            hint: format!(
                "`[data] path` points here, but {name} needs {files} in it; fix the path or \
                 remove it to use $ENGRAM_DATA/{name} or /usr/share/datasets/{name}"
            ),
        });
    }
    let dirs = search_dirs(name, None);
    if let Some(d) = dirs.iter().find_map(|d| holding(spec, d)) {
        return Ok(d);
    }
    Err(Error::DatasetMissing {
        name: name.to_string(),
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        hint: format!(
            "`engram data fetch {name}` (downloads {} into $ENGRAM_DATA/{name}, ./data/{name} by \
             default), or extract that archive and put its files {files} in a directory (or \
             keep its {}/ folder there) and set `[data] path` or $ENGRAM_DATA",
            spec.url, spec.archive_dir
        ),
    })
}

/// The largest CIFAR file read: CIFAR-100's `train.bin` is 153.7 MB.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Decodes one CIFAR file's bytes: the records' pixels `[n, 3072]` and label byte `label`
/// (0-based, below `spec.label_bytes`) of each record, each below `classes`.
///
/// # Errors
/// The reason, for the caller to place: no records, a size that is not whole records (a
/// truncated last record), a label byte outside the classes.
pub fn decode(
    spec: &CifarSpec,
    bytes: &[u8],
    label: usize,
    classes: usize,
) -> std::result::Result<(Vec<u8>, Vec<u32>), String> {
    let rec = spec.record_bytes();
    if bytes.is_empty() {
        return Err("the file is empty: it holds no records".into());
    }
    if !bytes.len().is_multiple_of(rec) {
        return Err(format!(
            "{} bytes are not whole records of {rec} bytes ({} label byte{} + {PIXELS} pixels): \
             the last record is truncated to {} bytes",
            bytes.len(),
            spec.label_bytes,
            if spec.label_bytes == 1 { "" } else { "s" },
            bytes.len() % rec
        ));
    }
    let n = bytes.len() / rec;
    let mut pixels = Vec::with_capacity(n * PIXELS);
    let mut labels = Vec::with_capacity(n);
    for (i, r) in bytes.chunks_exact(rec).enumerate() {
        let l = r[label];
        if usize::from(l) >= classes {
            return Err(format!(
                "record {i}: label {l} is outside the {classes} classes of {}",
                spec.name
            ));
        }
        labels.push(u32::from(l));
        pixels.extend_from_slice(&r[spec.label_bytes..]);
    }
    Ok((pixels, labels))
}

/// Reads `files` of `dir` into one split, in order.
fn read_split(
    spec: &CifarSpec,
    dir: &Path,
    files: &[&str],
    label: usize,
    classes: usize,
) -> Result<Raw> {
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for f in files {
        let path = dir.join(f);
        let bytes =
            crate::fsutil::read_bounded(&path, MAX_FILE_BYTES).map_err(|e| Error::io(&path, e))?;
        let (p, l) = decode(spec, &bytes, label, classes).map_err(|m| bad(&path, FORMAT, m))?;
        pixels.extend_from_slice(&p);
        labels.extend(l);
    }
    Ok(Raw {
        values: Values::U8(pixels),
        labels,
    })
}

/// Loads `spec` from the directory [`resolve`] finds, its classes being label byte `label` of
/// each record, named `names`; normalised per channel by the training split's statistics.
///
/// # Errors
/// [`Error::DatasetMissing`] (with how to get the files), [`Error::Io`] for a file that
/// cannot be read, [`Error::DataFile`] naming the file for an empty or truncated one or a
/// label outside `names`.
pub fn load(
    spec: &CifarSpec,
    configured: Option<&Path>,
    label: usize,
    names: &[&str],
) -> Result<Dataset> {
    let dir = resolve(spec, configured)?;
    let train = read_split(spec, &dir, spec.train, label, names.len())?;
    let test = read_split(spec, &dir, &[spec.test], label, names.len())?;
    let meta = Meta {
        class_names: Some(names.iter().map(|s| s.to_string()).collect()),
        ..Meta::default()
    };
    super::assemble(FORMAT, spec.name, &dir, train, test, SHAPE, Some(meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CIFAR-100 record: its two labels, then pixels `k % 251`.
    fn record100(coarse: u8, fine: u8) -> Vec<u8> {
        let mut r = vec![coarse, fine];
        r.extend((0..PIXELS).map(|k| (k % 251) as u8));
        r
    }

    #[test]
    fn records_decode_to_labels_and_chw_pixels() {
        let mut bytes = record100(3, 41);
        bytes.extend(record100(19, 99));
        let (p, l) = decode(&CIFAR100, &bytes, 1, 100).unwrap();
        assert_eq!(l, [41, 99]);
        assert_eq!(p.len(), 2 * PIXELS);
        // Pixel 1024 is the first green value: (1024 % 251) = 20.
        assert_eq!((p[1024], p[PIXELS + 1024]), (20, 20));
        let (_, coarse) = decode(&CIFAR100, &bytes, 0, 20).unwrap();
        assert_eq!(coarse, [3, 19]);
    }

    #[test]
    fn truncated_empty_and_out_of_range_files_are_reasons() {
        let mut bytes = record100(3, 41);
        bytes.extend(&record100(1, 2)[..100]);
        let e = decode(&CIFAR100, &bytes, 1, 100).unwrap_err();
        assert!(
            e.contains("3174 bytes are not whole records of 3074")
                && e.contains("truncated to 100"),
            "{e}"
        );
        assert!(decode(&CIFAR10, &[], 0, 10).unwrap_err().contains("empty"));
        let mut r10 = vec![10u8];
        r10.extend(vec![0u8; PIXELS]);
        let e = decode(&CIFAR10, &r10, 0, 10).unwrap_err();
        assert!(
            e.contains("record 0: label 10 is outside the 10 classes"),
            "{e}"
        );
    }

    #[test]
    fn the_class_lists_are_complete_and_distinct() {
        for names in [&CIFAR10_CLASSES[..], &CIFAR100_COARSE, &CIFAR100_FINE] {
            let set: std::collections::BTreeSet<_> = names.iter().collect();
            assert_eq!(set.len(), names.len());
        }
        assert_eq!(CIFAR100_FINE[0], "apple");
        assert_eq!(CIFAR100_FINE[99], "worm");
        assert_eq!(CIFAR10.records.iter().sum::<usize>(), 60_000);
        assert_eq!(CIFAR100.records.iter().sum::<usize>(), 60_000);
    }
}
