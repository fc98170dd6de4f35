//! What `[data]` does to a dataset after reading it, for every dataset and format alike:
//! `shape` reinterprets a sample's values (a CSV row of 784 features as a 1×28×28 image), and
//! `mean`/`std` replace the normalisation. Statistics computed for the old shape (per feature
//! of a CSV row) are computed again for the new one (per channel of the image).

use super::Dataset;
use super::format::shape_of;
use super::shape::{check_normalization, groups};

/// Why `[data]`'s `shape`, `mean` or `std` does not fit the data: the key to point at, the
/// message and a hint (the registry positions it in the config file).
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The `[data]` key at fault: `shape`, `mean` or `std`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl Refusal {
    fn new(key: &'static str, message: String, hint: Option<String>) -> Self {
        Self { key, message, hint }
    }
}

/// Applies `[data] shape`, `mean` and `std` to `ds` (see the module docs), then checks that
/// its normalisation fits its samples.
///
/// # Errors
/// A [`Refusal`] for a shape that is no sample shape or holds another number of values, a
/// `mean` without `std` (or the reverse), a normalisation of the wrong length or with a std
/// not above 0, or a dataset normalisation that no longer fits the new shape.
pub fn apply(
    ds: &mut Dataset,
    shape: Option<&[usize]>,
    mean: Option<&[f32]>,
    std: Option<&[f32]>,
) -> Result<(), Refusal> {
    if let Some(dims) = shape {
        reshape(ds, dims)?;
    }
    match (mean, std) {
        (None, None) => {}
        (Some(m), Some(s)) => {
            check_normalization(m, s, ds.input).map_err(|e| {
                let key = if e.starts_with("std") { "std" } else { "mean" };
                Refusal::new(key, e, None)
            })?;
            for split in [&mut ds.train, &mut ds.test] {
                split.mean = m.to_vec();
                split.std = s.to_vec();
            }
        }
        (m, _) => {
            return Err(Refusal::new(
                if m.is_some() { "mean" } else { "std" },
                "give both `mean` and `std`, or neither".into(),
                None,
            ));
        }
    }
    check_normalization(&ds.train.mean, &ds.train.std, ds.input).map_err(|e| {
        Refusal::new(
            "shape",
            format!(
                "the normalisation of `{}` does not fit its samples ({}): {e}",
                ds.name, ds.input
            ),
            Some("give `mean` and `std` per channel of the new shape".into()),
        )
    })
}

/// Gives `ds` the sample shape `dims`, recomputing statistics that no longer fit it.
fn reshape(ds: &mut Dataset, dims: &[usize]) -> Result<(), Refusal> {
    match shape_of(dims) {
        Some(s) if s.features() == ds.input.features() => {
            ds.input = s;
            if check_normalization(&ds.train.mean, &ds.train.std, s).is_err() {
                let (mean, std) = ds.train.statistics(groups(s));
                for split in [&mut ds.train, &mut ds.test] {
                    split.mean.clone_from(&mean);
                    split.std.clone_from(&std);
                }
            }
            Ok(())
        }
        None => Err(Refusal::new(
            "shape",
            format!(
                "shape {dims:?}: a sample shape is [channels, height, width] (an image) or [features] (a vector), every entry above 0"
            ),
            Some(format!(
                "for example [1, 28, 28], or [{}]",
                ds.input.features()
            )),
        )),
        _ => Err(Refusal::new(
            "shape",
            format!(
                "shape {dims:?} does not hold the {} values of a sample of `{}` ({})",
                ds.input.features(),
                ds.name,
                ds.input
            ),
            Some(
                "give [channels, height, width] or [features] with the same number of values"
                    .into(),
            ),
        )),
    }
}
