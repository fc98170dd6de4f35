//! A stream of datasets (`[[data.stream]]`, Avalanche's `benchmark_from_datasets`): task `t`
//! is entry `t`'s whole dataset, with its own classes.
//!
//! The entries' datasets become one [`Dataset`] whose splits are the entries' splits one
//! after the other, and whose label space is the union of the entries' classes: an entry's
//! class `c` becomes `offset + c`, the offset being the number of classes of the label spaces
//! before it, unless the entry names a `label_space` an earlier entry opened, whose classes it
//! then shares, matched by name. A task's rows are its entry's range of rows, so replay's
//! [`SampleRef`](super::stream::SampleRef)s, checkpoints, resuming and every strategy work on
//! the stream as on a dealt one. Class-incremental evaluation reads every logit of the union
//! (masked to the classes seen so far with `mask_logits`); the report's task-IL view
//! restricts the logits to the task's own classes.
//!
//! Values: token ids, or bytes (or floats) sharing one normalisation, are joined as they are
//! stored; otherwise (MNIST's and Fashion-MNIST's normalisations differ) each row is stored
//! normalised by its own dataset's statistics as `f32`, and the joined split's normalisation
//! is the identity (mean 0, std 1), so that a batch sees the values each dataset gives alone.

use super::dataset::{Dataset, Split, Values};
use super::stream::{Stream, Task};
use crate::config::DataConfig;
use crate::rng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One entry's dataset and what its entry says about it.
#[derive(Clone, Debug)]
pub struct Source {
    /// The entry's data, as its reader gave it (after its `shape`, `mean` and `std`).
    pub dataset: Dataset,
    /// The label space it shares with other entries (by name), or `None` for its own.
    pub label_space: Option<String>,
    /// Keep at most this many training samples of the task.
    pub subsample: Option<usize>,
    /// Keep at most this many test (and validation) samples of the task.
    pub test_subsample: Option<usize>,
}

/// Why the entries do not make a stream: entry `entry`'s key `key` (the caller positions it).
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The `[[data.stream]]` entry, `0..`.
    pub entry: usize,
    /// The key of the entry the message is about.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl Refusal {
    fn new(entry: usize, key: &'static str, message: String, hint: Option<&str>) -> Self {
        Self {
            entry,
            key,
            message,
            hint: hint.map(str::to_string),
        }
    }
}

/// The union label space: each entry's classes as union labels, and the union's class names
/// (`space:class`, the space being the entry's `label_space` or its dataset's name).
///
/// # Errors
/// A [`Refusal`] at `label_space` when an entry's classes are not, by name, those of the
/// space an earlier entry opened.
pub fn label_maps(sources: &[Source]) -> Result<(Vec<Vec<u32>>, Vec<String>), Refusal> {
    let mut names: Vec<String> = Vec::new();
    // space → (first entry, offset, class names in the first entry's order)
    let mut spaces: BTreeMap<&str, (usize, usize, &[String])> = BTreeMap::new();
    let mut maps = Vec::with_capacity(sources.len());
    for (i, s) in sources.iter().enumerate() {
        let own = &s.dataset.class_names;
        let space = s.label_space.as_deref();
        if let Some((first, offset, known)) = space.and_then(|sp| spaces.get(sp)) {
            let mut mine: Vec<&String> = own.iter().collect();
            let mut theirs: Vec<&String> = known.iter().collect();
            mine.sort();
            theirs.sort();
            if mine != theirs {
                return Err(Refusal::new(
                    i,
                    "label_space",
                    format!(
                        "label_space = \"{}\": `{}` has the classes {own:?}, entry {} (`{}`) opened the space with {known:?}; a shared label space matches classes by name",
                        space.unwrap_or_default(),
                        s.dataset.name,
                        first + 1,
                        sources[*first].dataset.name
                    ),
                    Some(
                        "give both datasets the same class names, or remove `label_space` to give this one its own classes",
                    ),
                ));
            }
            let map = own
                .iter()
                .map(|n| (offset + known.iter().position(|k| k == n).unwrap_or(0)) as u32)
                .collect();
            maps.push(map);
            continue;
        }
        let offset = names.len();
        let prefix = space.unwrap_or(&s.dataset.name);
        names.extend(own.iter().map(|c| format!("{prefix}:{c}")));
        if let Some(sp) = space {
            spaces.insert(sp, (i, offset, own));
        }
        maps.push((offset..offset + own.len()).map(|c| c as u32).collect());
    }
    Ok((maps, names))
}

/// Entry `i`'s samples against the first entry's: the same shape and the same kind of values.
fn check_fits(sources: &[Source]) -> Result<(), Refusal> {
    let first = &sources[0].dataset;
    for (i, s) in sources.iter().enumerate().skip(1) {
        let d = &s.dataset;
        if d.input != first.input || d.train.features != first.train.features {
            return Err(Refusal::new(
                i,
                "dataset",
                format!(
                    "`{}`'s samples are {} ({} values), the first entry's (`{}`) {} ({} values); every dataset of a stream feeds the same model",
                    d.name,
                    d.input,
                    d.input.features(),
                    first.name,
                    first.input,
                    first.input.features()
                ),
                Some(
                    "give the entries the same sample shape: `shape` reshapes an entry's values, and text formats take the same `max_len` in [data.stream.options]",
                ),
            ));
        }
        if d.train.values.is_tokens() != first.train.values.is_tokens() {
            return Err(Refusal::new(
                i,
                "dataset",
                format!(
                    "`{}` holds {}, the first entry (`{}`) {}; a stream's datasets are all text or all numbers",
                    d.name,
                    d.train.values.kind(),
                    first.name,
                    first.train.values.kind()
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// The splits `parts` (one per entry, labels mapped through `maps`) one after the other.
fn join(parts: &[&Split], maps: &[Vec<u32>]) -> Split {
    let features = parts[0].features;
    let labels = parts
        .iter()
        .zip(maps)
        .flat_map(|(s, m)| s.labels.iter().map(|&l| m[l as usize]))
        .collect();
    let same_norm = parts
        .iter()
        .all(|s| s.mean == parts[0].mean && s.std == parts[0].std);
    let (values, mean, std) = match &parts[0].values {
        Values::Tokens(_) => (
            Values::Tokens(
                parts
                    .iter()
                    .flat_map(|s| match &s.values {
                        Values::Tokens(v) => v.as_slice(),
                        _ => &[],
                    })
                    .copied()
                    .collect(),
            ),
            vec![0.0],
            vec![1.0],
        ),
        Values::U8(_) if same_norm && parts.iter().all(|s| matches!(s.values, Values::U8(_))) => (
            Values::U8(parts.iter().flat_map(|s| bytes(s)).copied().collect()),
            parts[0].mean.clone(),
            parts[0].std.clone(),
        ),
        _ => {
            let mut out = Vec::with_capacity(parts.iter().map(|s| s.values.len()).sum());
            for s in parts {
                let coef = s.coefficients();
                for i in 0..s.len() {
                    s.normalized_row_with(&coef, i, None, &mut out);
                }
            }
            (Values::F32(out), vec![0.0], vec![1.0])
        }
    };
    Split {
        values,
        labels,
        features,
        mean,
        std,
    }
}

fn bytes(s: &Split) -> &[u8] {
    match &s.values {
        Values::U8(v) => v,
        _ => &[],
    }
}

/// `rows` kept to at most `cap`, drawn from `r` (in row order).
fn cap(rows: Vec<u32>, cap: Option<usize>, r: &mut rng::Rng) -> Vec<u32> {
    match cap {
        Some(cap) if rows.len() > cap => {
            let order = rng::permutation(rows.len(), r);
            let mut keep: Vec<u32> = order[..cap].iter().map(|&i| rows[i]).collect();
            keep.sort_unstable();
            keep
        }
        _ => rows,
    }
}

/// Task `t` of `classes`: training rows `train` (less the validation share of `cfg`) and test
/// rows `test`, each kept to its cap, every draw from the task's stream of `seed` (as a dealt
/// stream draws them).
fn task(
    t: usize,
    classes: Vec<usize>,
    (train, test): (std::ops::Range<u32>, std::ops::Range<u32>),
    (max_train, max_test): (Option<usize>, Option<usize>),
    validation: f64,
    seed: u64,
) -> Task {
    let mut r = rng::stream(seed, "split", t as u64, 0);
    let all: Vec<u32> = train.collect();
    let order = rng::permutation(all.len(), &mut r);
    let n_val = (all.len() as f64 * validation).round() as usize;
    let mut held: Vec<u32> = order[..n_val].iter().map(|&i| all[i]).collect();
    let mut kept: Vec<u32> = order[n_val..].iter().map(|&i| all[i]).collect();
    held.sort_unstable();
    kept.sort_unstable();
    let kept = cap(kept, max_train, &mut r);
    let held = cap(held, max_test, &mut r);
    let test = cap(test.collect(), max_test, &mut r);
    Task {
        index: t,
        classes,
        train: kept,
        validation: held,
        test,
        permutation: None,
    }
}

/// The stream of `sources`, one task per entry, in order: their datasets joined into one (see
/// the module's documentation), each task's caps its entry's or `cfg`'s (`subsample`,
/// `test_subsample`), its validation share `cfg.validation`, every draw from `seed`.
///
/// # Errors
/// A [`Refusal`] for no entry, an entry whose samples differ in shape or kind from the first's,
/// a shared label space whose classes differ by name, or a task without training samples.
pub fn build(sources: Vec<Source>, cfg: &DataConfig, seed: u64) -> Result<Stream, Refusal> {
    if sources.is_empty() {
        return Err(Refusal::new(
            0,
            "dataset",
            "no [[data.stream]] entry".into(),
            None,
        ));
    }
    check_fits(&sources)?;
    let (maps, names) = label_maps(&sources)?;
    let trains: Vec<&Split> = sources.iter().map(|s| &s.dataset.train).collect();
    let tests: Vec<&Split> = sources.iter().map(|s| &s.dataset.test).collect();
    let (mut at_train, mut at_test) = (0u32, 0u32);
    let mut tasks = Vec::with_capacity(sources.len());
    for (t, s) in sources.iter().enumerate() {
        let (n_train, n_test) = (s.dataset.train.len() as u32, s.dataset.test.len() as u32);
        let mut classes: Vec<usize> = maps[t].iter().map(|&c| c as usize).collect();
        classes.sort_unstable();
        let caps = (
            s.subsample.or(cfg.subsample),
            s.test_subsample.or(cfg.test_subsample),
        );
        let ranges = (at_train..at_train + n_train, at_test..at_test + n_test);
        let task = task(t, classes, ranges, caps, cfg.validation, seed);
        if task.train.is_empty() {
            return Err(Refusal::new(
                t,
                "dataset",
                format!("task {t} (`{}`) has no training samples", s.dataset.name),
                None,
            ));
        }
        tasks.push(task);
        at_train += n_train;
        at_test += n_test;
    }
    let first = &sources[0].dataset;
    let dataset = Dataset {
        name: sources
            .iter()
            .map(|s| s.dataset.name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        dir: PathBuf::from(
            sources
                .iter()
                .map(|s| s.dataset.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        ),
        train: join(&trains, &maps),
        test: join(&tests, &maps),
        input: first.input,
        classes: names.len(),
        class_names: names,
    };
    Ok(Stream {
        num_classes: dataset.classes,
        dataset: Arc::new(dataset),
        scenario: cfg.scenario,
        tasks,
        eval_split: cfg.evaluate_on,
        mask_unseen: cfg.mask_logits,
        joint: false,
    })
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
