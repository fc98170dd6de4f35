//! A dataset as engram holds it ([`Dataset`]): two splits of contiguous arrays ([`Split`],
//! values as bytes, `f32` or token ids ([`Values`])), the sample shape, the classes and their names. Every
//! source produces one: the named datasets of [`crate::data::catalog`], the formats of
//! [`crate::data::format`], a plugin's factory, a program's own data.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// The stored values of a split, row-major `[n, features]`.
///
/// Bytes are pixels (IDX, 8-bit images, integer CSV cells in 0–255) and are scaled to `[0, 1]`
/// by `1/255` before normalisation; floats are taken as they are. Bytes keep a quarter of the
/// memory of `f32`. Token ids (text data, `[n, max_len]`) are never scaled nor normalised:
/// batches carry them to the model as `Int` ids ([`crate::data::input::Input::Ids`]), 4 bytes
/// each, exact for any vocabulary (an `f32` holds integers exactly only up to 2^24).
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// 8-bit values, scaled by `1/255`.
    U8(Vec<u8>),
    /// 32-bit floats, unscaled.
    F32(Vec<f32>),
    /// Token ids of a tokenizer's vocabulary, padded with its pad id; never normalised.
    Tokens(Vec<u32>),
}

impl Values {
    /// Number of values (`n · features`).
    pub fn len(&self) -> usize {
        match self {
            Values::U8(v) => v.len(),
            Values::F32(v) => v.len(),
            Values::Tokens(v) => v.len(),
        }
    }

    /// Whether the values are token ids ([`Values::Tokens`]).
    pub fn is_tokens(&self) -> bool {
        matches!(self, Values::Tokens(_))
    }

    /// Bytes one stored value takes: 1 (`uint8`), 4 (`float32`, and a token id's `uint32`).
    pub fn value_bytes(&self) -> usize {
        match self {
            Values::U8(_) => 1,
            Values::F32(_) | Values::Tokens(_) => 4,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The factor that takes a stored value to the scale normalisation works on: `1/255` for
    /// bytes, 1 for floats and token ids.
    pub fn scale(&self) -> f32 {
        match self {
            Values::U8(_) => 1.0 / 255.0,
            Values::F32(_) | Values::Tokens(_) => 1.0,
        }
    }

    /// Value `k`, scaled ([`Values::scale`]); a token id as an `f32` (exact below 2^24).
    pub fn scaled(&self, k: usize) -> f32 {
        match self {
            Values::U8(v) => f32::from(v[k]) / 255.0,
            Values::F32(v) => v[k],
            Values::Tokens(v) => v[k] as f32,
        }
    }

    /// The element type's name, as in NumPy (`uint8`, `float32`, `uint32` for token ids).
    pub fn dtype(&self) -> &'static str {
        match self {
            Values::U8(_) => "uint8",
            Values::F32(_) => "float32",
            Values::Tokens(_) => "uint32",
        }
    }

    /// What the values are, in words, with their element type: `pixel bytes (uint8)`,
    /// `floats (float32)`, `token ids (uint32)` (report.json's memory section, the run summary).
    pub fn kind(&self) -> String {
        let what = match self {
            Values::U8(_) => "pixel bytes",
            Values::F32(_) => "floats",
            Values::Tokens(_) => "token ids",
        };
        format!("{what} ({})", self.dtype())
    }
}

/// One split (train or test) as contiguous arrays.
///
/// [`Split::normalized_row`] turns a row into the model's input `(x·s − mean[g])/std[g]` when a
/// batch is gathered, `s` being [`Values::scale`] and `g` the normalisation group of the value:
/// with one `mean`/`std` every value shares it; with `G` of them value `k` of `features` belongs
/// to group `k / (features / G)`: its channel (CHW layout) for `G = channels`, itself for
/// `G = features`.
#[derive(Clone, Debug)]
pub struct Split {
    /// The values, row-major `[n, features]` (images in CHW order).
    pub values: Values,
    /// Class labels `[n]`, each below the dataset's `classes`.
    pub labels: Vec<u32>,
    /// Values per sample (784 for 28×28 gray, 3072 for 3×32×32).
    pub features: usize,
    /// Mean of each normalisation group after scaling; 1 entry, one per channel, or one per
    /// feature (each group is `features / mean.len()` consecutive values).
    pub mean: Vec<f32>,
    /// Standard deviation of each group after scaling, each > 0; as many as `mean`.
    pub std: Vec<f32>,
}

impl Split {
    /// A split of 8-bit values normalised by one `mean` and `std` (after scaling by `1/255`):
    /// `pixels` is `[labels.len(), features]`.
    pub fn bytes(pixels: Vec<u8>, labels: Vec<u32>, features: usize, mean: f32, std: f32) -> Self {
        Self {
            values: Values::U8(pixels),
            labels,
            features,
            mean: vec![mean],
            std: vec![std],
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split is empty.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Sample `i`'s raw bytes, `[features]`, when the values are bytes.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        match &self.values {
            Values::U8(v) => Some(&v[i * self.features..(i + 1) * self.features]),
            Values::F32(_) | Values::Tokens(_) => None,
        }
    }

    /// Sample `i`'s token ids, `[max_len]` (`features` of them), when the values are ids.
    pub fn token_row(&self, i: usize) -> Option<&[u32]> {
        match &self.values {
            Values::Tokens(v) => Some(&v[i * self.features..(i + 1) * self.features]),
            Values::U8(_) | Values::F32(_) => None,
        }
    }

    /// Bytes one stored sample takes: `features × ` [`Values::value_bytes`] (a token sequence
    /// of `max_len` ids: `max_len × 4`; a 28×28 byte image: 784).
    pub fn sample_bytes(&self) -> usize {
        self.features * self.values.value_bytes()
    }

    /// Each group's `(a, b)` with `normalised = stored·a − b`: `a = s/std`, `b = mean/std`
    /// (`s` = [`Values::scale`]), written as `1/(255·std)` for bytes so that the arithmetic is
    /// the same whatever the group count.
    pub fn coefficients(&self) -> Vec<(f32, f32)> {
        let base = match self.values {
            Values::U8(_) => 255.0f32,
            Values::F32(_) | Values::Tokens(_) => 1.0,
        };
        self.mean
            .iter()
            .zip(&self.std)
            .map(|(&m, &s)| (1.0 / (base * s), m / s))
            .collect()
    }

    /// Sample `i`'s normalised values appended to `out`, in the order `perm` gives
    /// (`out[k] = x[perm[k]]`, each value normalised by its own group) when there is one;
    /// `coef` is [`Split::coefficients`] (computed once per batch by the caller).
    pub fn normalized_row_with(
        &self,
        coef: &[(f32, f32)],
        i: usize,
        perm: Option<&[u32]>,
        out: &mut Vec<f32>,
    ) {
        let f = self.features;
        let per = f / coef.len().max(1);
        fn push<T: Copy>(
            row: &[T],
            to: impl Fn(T) -> f32,
            coef: &[(f32, f32)],
            per: usize,
            perm: Option<&[u32]>,
            out: &mut Vec<f32>,
        ) {
            if let [(a, b)] = coef {
                match perm {
                    Some(p) => out.extend(p.iter().map(|&j| to(row[j as usize]) * a - b)),
                    None => out.extend(row.iter().map(|&x| to(x) * a - b)),
                }
                return;
            }
            let at = |j: usize| {
                let (a, b) = coef[j / per];
                to(row[j]) * a - b
            };
            match perm {
                Some(p) => out.extend(p.iter().map(|&j| at(j as usize))),
                None => out.extend((0..row.len()).map(at)),
            }
        }
        match &self.values {
            Values::U8(v) => push(&v[i * f..(i + 1) * f], f32::from, coef, per, perm, out),
            Values::F32(v) => push(&v[i * f..(i + 1) * f], |x| x, coef, per, perm, out),
            Values::Tokens(v) => push(&v[i * f..(i + 1) * f], |x| x as f32, coef, per, perm, out),
        }
    }

    /// Sample `i`'s normalised values appended to `out` (see [`Split::normalized_row_with`]).
    pub fn normalized_row(&self, i: usize, perm: Option<&[u32]>, out: &mut Vec<f32>) {
        self.normalized_row_with(&self.coefficients(), i, perm, out);
    }

    /// The mean and population standard deviation of each of `groups` groups of this split's
    /// scaled values (computed in `f64`); a group whose values are all equal gets std 1, so
    /// that it normalises to zeros instead of dividing by zero. Token ids are never
    /// normalised: one group of mean 0 and std 1 (the identity).
    pub fn statistics(&self, groups: usize) -> (Vec<f32>, Vec<f32>) {
        if self.values.is_tokens() {
            return (vec![0.0], vec![1.0]);
        }
        let groups = groups.max(1);
        let per = self.features / groups;
        let mut sum = vec![0f64; groups];
        let mut sq = vec![0f64; groups];
        let mut add = |k: usize, x: f64| {
            let g = (k % self.features) / per;
            sum[g] += x;
            sq[g] += x * x;
        };
        match &self.values {
            Values::U8(v) => v
                .iter()
                .enumerate()
                .for_each(|(k, &x)| add(k, f64::from(x) / 255.0)),
            Values::F32(v) => v
                .iter()
                .enumerate()
                .for_each(|(k, &x)| add(k, f64::from(x))),
            Values::Tokens(_) => {}
        }
        let count = (self.len() * per).max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / count).collect();
        let std = sq
            .iter()
            .zip(&mean)
            .map(|(q, m)| {
                let v = (q / count - m * m).max(0.0).sqrt();
                if v > 1e-12 { v as f32 } else { 1.0 }
            })
            .collect();
        (mean.into_iter().map(|m| m as f32).collect(), std)
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
    pub input: crate::data::InputShape,
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
        input: crate::data::InputShape,
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

impl Dataset {
    /// Hex SHA-256 of everything a run reads of the dataset: the sample shape, the class names,
    /// both splits' values (with their type), labels and normalisation. A resumed run compares
    /// it with the one its checkpoints recorded, so that changed files (or a changed
    /// `dataset.toml`) are refused instead of mixed into one record.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(format!("{:?}|{:?}|", self.input.dims(), self.class_names).as_bytes());
        for s in [&self.train, &self.test] {
            h.update(format!(
                "{}|{}|{:?}|{:?}|",
                s.values.dtype(),
                s.features,
                s.mean,
                s.std
            ));
            match &s.values {
                Values::U8(v) => h.update(v),
                Values::F32(v) => v.iter().for_each(|x| h.update(x.to_le_bytes())),
                Values::Tokens(v) => v.iter().for_each(|x| h.update(x.to_le_bytes())),
            }
            s.labels.iter().for_each(|l| h.update(l.to_le_bytes()));
        }
        format!("{:x}", h.finalize())
    }
}

/// Checks what a dataset factory returned against the [`crate::data::Dataset`] contract, so
/// that a plugin's mistake is a message instead of a panic in the trainer: both splits have
/// `input.features()` values per sample and one label per sample below `classes`, and there
/// are `classes` names.
///
/// # Errors
/// [`Error::Data`] naming the dataset and the broken rule.
pub fn check_dataset(ds: &Dataset) -> Result<()> {
    let f = ds.input.features();
    let bad = |m: String| Err(Error::Data(format!("dataset `{}`: {m}", ds.name)));
    if f == 0 || ds.classes == 0 {
        return bad(format!(
            "{} features and {} classes (each must be at least 1)",
            f, ds.classes
        ));
    }
    if ds.class_names.len() != ds.classes {
        return bad(format!(
            "{} class names for {} classes",
            ds.class_names.len(),
            ds.classes
        ));
    }
    for (what, split) in [("train", &ds.train), ("test", &ds.test)] {
        if split.features != f || split.values.len() != split.labels.len() * f {
            return bad(format!(
                "the {what} split has {} values for {} samples of {} features ({})",
                split.values.len(),
                split.labels.len(),
                split.features,
                ds.input
            ));
        }
        if split.values.is_tokens() && (split.mean != [0.0] || split.std != [1.0]) {
            return bad(format!(
                "the {what} split holds token ids with mean {:?} and std {:?}; token ids are never normalised (mean [0.0], std [1.0])",
                split.mean, split.std
            ));
        }
        if let Err(e) = super::shape::check_normalization(&split.mean, &split.std, ds.input) {
            return bad(format!("the {what} split's normalisation: {e}"));
        }
        if let Some(l) = split.labels.iter().find(|&&l| l as usize >= ds.classes) {
            return bad(format!(
                "the {what} split has label {l}, outside 0..{}",
                ds.classes
            ));
        }
    }
    Ok(())
}
