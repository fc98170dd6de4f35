//! The sweep file and its grid: parsing with positions, expansion into runs with stable names,
//! and the grid manifest (`DIR/grid.json`) that every later command reads.
//!
//! ```toml
//! [sweep]
//! configs = ["split-fmnist-replay.toml", "split-fmnist-ewc-replay.toml"]  # or base = "…"
//! seeds = [0, 1, 2]
//! set = { "data.subsample" = 1000 }          # fixed overrides for every run
//! "forgetting.1.capacity" = [200, 500]        # an axis: every other key of [sweep]
//!
//! [sweep.slurm]                               # job-array resources (see `slurm`)
//! cpus_per_task = 1
//! ```
//!
//! An axis is any key of `[sweep]` other than the reserved ones (`name`, `base`, `configs`,
//! `seeds`, `set`, `out`, `slurm`): its key is a `--set` path into the config and its value a
//! non-empty list. Dotted keys written without quotes (`forgetting.1.capacity = […]`) and
//! sub-tables (`[sweep.data] subsample = […]`) are the same axes. The grid is the cartesian
//! product configs × axes (in file order) × seeds, the seeds varying fastest.

use engram_core::config::positioned;
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Keys of `[sweep]` that are not axes.
const RESERVED: [&str; 8] = [
    "name", "base", "configs", "seeds", "set", "out", "slurm", "variants",
];

/// The top-level keys of an experiment config: the first segment of every axis and `set` key.
const SECTIONS: [&str; 9] = [
    "run",
    "data",
    "model",
    "optimizer",
    "train",
    "forgetting",
    "memory",
    "scheduler",
    "plugins",
];

/// Keys a sweep sets itself, so that no axis or `set` entry may.
const OWNED: [(&str, &str); 2] = [
    ("run.seed", "the sweep's `seeds` sets each run's seed"),
    ("run.out", "the sweep puts each run in DIR/<cell>/seed-<N>"),
];

/// The largest grid a sweep expands (runs); a larger one is most likely a mistake, and would
/// take days to run.
pub const MAX_RUNS: usize = 100_000;

/// A cell while the grid is expanded: `[config, name parts…]`, its overrides, its axis values.
type CellDraft = (
    Vec<String>,
    Vec<String>,
    serde_json::Map<String, serde_json::Value>,
);

/// A value of an axis, as written in the sweep file.
#[derive(Clone, Debug)]
pub struct AxisValue {
    /// The overrides this value sets, as `engram run --set KEY=VALUE` takes them, each with the
    /// byte offset of its value in the sweep file: one for a value of a config key's axis;
    /// one per key of the bundle for a variant (`[sweep.variants.<axis>]`), none for `{}`.
    pub sets: Vec<(String, usize)>,
    /// The value as JSON (for `grid.json` and the report): a variant's name.
    pub json: serde_json::Value,
    /// Its part of a run's name: `200`, `herding`, `400x400`.
    pub label: String,
    /// Byte offset of the value in the sweep file (for positioned errors).
    pub offset: usize,
}

/// One varied key, or one set of named variants.
#[derive(Clone, Debug)]
pub struct Axis {
    /// The `--set` path, e.g. `forgetting.1.capacity`; for variants, the axis's own name
    /// (`stream` for `[sweep.variants.stream]`).
    pub key: String,
    /// Its part of a run's name: the last path segment (`capacity`), or the whole path when
    /// two axes share a last segment.
    pub label: String,
    /// The values, in file order.
    pub values: Vec<AxisValue>,
}

/// Slurm resources of each array task (`[sweep.slurm]`); every key is optional.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlurmOptions {
    /// `--cpus-per-task` (default 1); also each run's thread count (`RAYON_NUM_THREADS`).
    pub cpus_per_task: Option<u32>,
    /// `--mem`, e.g. `"4G"` (default `"4G"`).
    pub mem: Option<String>,
    /// `--time`, e.g. `"01:00:00"` (default `"01:00:00"`).
    pub time: Option<String>,
    /// `--partition` (default: the cluster's default partition).
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--gres`, e.g. `"gpu:1"` for one GPU per task.
    pub gres: Option<String>,
    /// At most this many array tasks at once (`--array=…%N`); default: no limit.
    pub max_parallel: Option<u32>,
    /// The `engram` binary the tasks run (default: this binary), for clusters where it lives
    /// elsewhere on the shared file system.
    pub engram: Option<PathBuf>,
    /// Further `#SBATCH` options, one per entry, e.g. `["--qos=short"]`.
    pub extra: Option<Vec<String>>,
}

/// A parsed sweep file.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The sweep file.
    pub file: PathBuf,
    /// Its text (for positions).
    pub source: String,
    /// `[sweep] name`, default the file's stem.
    pub name: String,
    /// `[sweep] out`, relative to the current directory as written.
    pub out: Option<PathBuf>,
    /// The base configs, resolved against the sweep file's directory, with the offset of
    /// each in the sweep file.
    pub configs: Vec<(PathBuf, usize)>,
    /// The seeds (`run.seed` of each run); empty: each config's own seed.
    pub seeds: Vec<u64>,
    /// Fixed overrides (`KEY=VALUE`) applied to every run, with the offset of each value.
    pub fixed: Vec<(String, usize)>,
    /// The axes, in file order.
    pub axes: Vec<Axis>,
    /// Slurm resources.
    pub slurm: SlurmOptions,
}

/// One run of the grid.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct GridRun {
    /// `<cell>/seed-<N>`: its directory under the sweep's directory.
    pub name: String,
    /// The cell: every axis value but the seed (`capacity-200`), shared by a cell's seeds.
    pub cell: String,
    /// The base config (absolute path).
    pub config: PathBuf,
    /// Hex SHA-256 of the base config's text when the grid was expanded (empty when it could
    /// not be read): a sweep resumed after its config was edited is refused.
    #[serde(default)]
    pub config_sha256: String,
    /// The overrides, as `engram run --set` takes them (fixed ones first, then axes).
    pub sets: Vec<String>,
    /// The seed (`run.seed`).
    pub seed: u64,
    /// The axis values of this run, by axis key (`config` is the base config's stem when the
    /// sweep lists several).
    pub axes: serde_json::Map<String, serde_json::Value>,
}

impl GridRun {
    /// The run's name as one path segment (`/` → `__`), for files under `state/` and `logs/`.
    pub fn flat_name(&self) -> String {
        self.name.replace('/', "__")
    }
}

/// `DIR/grid.json`: the expanded grid, written when a sweep first writes its directory.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Manifest {
    /// Always `"engram-sweep"`: recognises a sweep's directory.
    pub kind: String,
    /// The engram version that wrote it.
    pub engram: String,
    /// The sweep's name.
    pub name: String,
    /// The sweep file (absolute path) it was expanded from.
    pub sweep_file: PathBuf,
    /// The axis keys, in grid order (`config` first when several configs are listed).
    pub axes: Vec<String>,
    /// Plugins given on the command line (`--plugin`), absolute paths; every run loads them.
    pub plugins: Vec<PathBuf>,
    /// Slurm resources (from `[sweep.slurm]`).
    pub slurm: SlurmOptions,
    /// The runs, in grid order; a Slurm array index is a position in this list.
    pub runs: Vec<GridRun>,
}

/// The manifest's `kind`.
pub const MANIFEST_KIND: &str = "engram-sweep";

/// The manifest's file name in a sweep's directory.
pub const MANIFEST: &str = "grid.json";

impl Sweep {
    /// Reads and parses a sweep file.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read; [`Error::Config`] (file, line,
    /// column, hint) for TOML syntax, a missing `[sweep]` table or base config, a seed that is
    /// not a whole number ≥ 0, an axis that is not a non-empty list, or two runs that would get
    /// the same name.
    pub fn load(file: &Path) -> Result<Self> {
        let source = engram_core::fsutil::read_text(file).map_err(|e| Error::ConfigFile {
            file: file.to_path_buf(),
            message: format!("cannot read the sweep file: {e}"),
            hint: Some("check the path; examples/sweep-small.toml is a runnable sweep".into()),
        })?;
        Self::parse(file, source)
    }

    /// Parses sweep-file text that came from `file` (relative paths resolve against its
    /// directory).
    ///
    /// # Errors
    /// As [`Sweep::load`].
    pub fn parse(file: &Path, source: String) -> Result<Self> {
        let at = |offset: usize, message: String, hint: Option<&str>| {
            positioned(file, &source, offset, message, hint.map(str::to_string))
        };
        let doc = toml_edit::ImDocument::parse(source.clone()).map_err(|e| {
            at(
                e.span().map_or(0, |s| s.start),
                e.message().trim().to_string(),
                None,
            )
        })?;
        let root = doc.as_table();
        for (k, item) in root.iter() {
            if k != "sweep" {
                let off = root
                    .key(k)
                    .and_then(toml_edit::Key::span)
                    .or_else(|| item.span())
                    .map_or(0, |s| s.start);
                return Err(at(
                    off,
                    format!("unknown top-level key `{k}` in a sweep file"),
                    Some(
                        "a sweep file holds one [sweep] table; the configs it names hold the experiment",
                    ),
                ));
            }
        }
        let sweep = root
            .get("sweep")
            .and_then(toml_edit::Item::as_table_like)
            .ok_or_else(|| {
                at(
                    0,
                    "no [sweep] table".into(),
                    Some("start with [sweep] and base = \"experiment.toml\" (see examples/sweep-small.toml)"),
                )
            })?;
        let off = |item: &toml_edit::Item| item.span().map_or(0, |s| s.start);
        let key_off = |k: &str| {
            sweep
                .key(k)
                .and_then(toml_edit::Key::span)
                .or_else(|| sweep.get(k).and_then(toml_edit::Item::span))
                .map_or(0, |s| s.start)
        };
        let string = |k: &str| -> Result<Option<(String, usize)>> {
            match sweep.get(k) {
                None => Ok(None),
                Some(item) => item
                    .as_str()
                    .map(|s| Some((s.to_string(), off(item))))
                    .ok_or_else(|| {
                        at(
                            off(item),
                            format!("`{k}` must be a string"),
                            Some("put the value in double quotes"),
                        )
                    }),
            }
        };
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let resolve = |p: &str| {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::path::absolute(dir.join(p)).unwrap_or_else(|_| dir.join(p))
            }
        };
        let mut configs = Vec::new();
        if let Some((b, o)) = string("base")? {
            configs.push((resolve(&b), o));
        }
        // The values of a list key of [sweep] with their offsets; `None` when the key is absent.
        let list =
            |k: &str, what: &str, hint: &str| -> Result<Option<Vec<(toml_edit::Value, usize)>>> {
                let Some(item) = sweep.get(k) else {
                    return Ok(None);
                };
                let arr = item.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
                    at(
                        off(item),
                        format!("`{k}` must be a non-empty list of {what}"),
                        Some(hint),
                    )
                })?;
                Ok(Some(
                    arr.iter()
                        .map(|v| (v.clone(), v.span().map_or(off(item), |s| s.start)))
                        .collect(),
                ))
            };
        if let Some(values) = list(
            "configs",
            "config files",
            "write configs = [\"a.toml\", \"b.toml\"]",
        )? {
            for (v, o) in values {
                let s = v
                    .as_str()
                    .ok_or_else(|| at(o, "a config must be a file name (a string)".into(), None))?;
                configs.push((resolve(s), o));
            }
        }
        let mut seeds = Vec::new();
        if let Some(values) = list("seeds", "whole numbers ≥ 0", "write seeds = [0, 1, 2]")? {
            for (v, o) in values {
                let s = v
                    .as_integer()
                    .and_then(|i| u64::try_from(i).ok())
                    .ok_or_else(|| {
                        at(
                            o,
                            format!("seed `{}` is not a whole number ≥ 0", v.to_string().trim()),
                            Some("write seeds = [0, 1, 2]"),
                        )
                    })?;
                if seeds.contains(&s) {
                    return Err(at(o, format!("seed {s} is listed twice"), None));
                }
                seeds.push(s);
            }
        }
        // Every axis and `set` key is a path into the config: its first segment is a section.
        let check_key = |key: &str, offset: usize| -> Result<()> {
            let first = key.split('.').next().unwrap_or(key);
            if !SECTIONS.contains(&first) {
                let close = RESERVED
                    .iter()
                    .chain(SECTIONS.iter())
                    .copied()
                    .filter(|c| strsim::levenshtein(c, first) <= 2)
                    .min_by_key(|c| strsim::levenshtein(c, first));
                let hint = match close {
                    Some(c) if RESERVED.contains(&c) => {
                        format!("did you mean the sweep key `{c}`?")
                    }
                    Some(c) => format!("did you mean the config section `{c}`?"),
                    None => format!(
                        "sweep keys: {}; axes are config paths such as \"optimizer.lr\"",
                        RESERVED.join(", ")
                    ),
                };
                return Err(at(
                    offset,
                    format!(
                        "`{first}` is neither a key of [sweep] nor a section of the config (in `{key}`)"
                    ),
                    Some(&hint),
                ));
            }
            if let Some((_, why)) = OWNED.iter().find(|(k, _)| *k == key) {
                return Err(at(offset, format!("`{key}` cannot be swept: {why}"), None));
            }
            Ok(())
        };
        let mut fixed = Vec::new();
        if let Some(item) = sweep.get("set") {
            let t = item.as_table_like().ok_or_else(|| {
                at(
                    off(item),
                    "`set` must be a table of fixed overrides".into(),
                    Some("write set = { \"data.subsample\" = 1000 }"),
                )
            })?;
            let mut leaves = Vec::new();
            flatten(t, String::new(), &mut leaves);
            for (k, v) in leaves {
                let o = v.span().map_or(off(item), |s| s.start);
                check_key(&k, o)?;
                fixed.push((format!("{k}={}", toml_text(&v)), o));
            }
        }
        let slurm = match sweep.get("slurm") {
            None => SlurmOptions::default(),
            Some(item) => {
                let text = item
                    .as_table_like()
                    .map(|_| {
                        let mut d = toml_edit::DocumentMut::new();
                        if let Some(t) = item.as_table() {
                            *d.as_table_mut() = t.clone();
                        } else if let Some(t) = item.as_inline_table() {
                            *d.as_table_mut() = t.clone().into_table();
                        }
                        d.to_string()
                    })
                    .ok_or_else(|| at(off(item), "`slurm` must be a table".into(), None))?;
                toml::from_str(&text).map_err(|e: toml::de::Error| {
                    at(
                        off(item),
                        format!("[sweep.slurm]: {}", e.message().trim()),
                        Some(
                            "keys: cpus_per_task, mem, time, partition, account, gres, max_parallel, engram, extra",
                        ),
                    )
                })?
            }
        };
        let mut axes = Vec::new();
        for (k, item) in sweep.iter() {
            if RESERVED.contains(&k) {
                continue;
            }
            let mut leaves = Vec::new();
            match item.as_table_like() {
                Some(t) if item.as_array().is_none() => flatten(t, k.to_string(), &mut leaves),
                _ => leaves.push((
                    k.to_string(),
                    item.as_value()
                        .cloned()
                        .unwrap_or_else(|| toml_edit::Value::from(false)),
                )),
            }
            for (key, v) in leaves {
                let o = v.span().map_or_else(|| key_off(k), |s| s.start);
                check_key(&key, key_off(k))?;
                if fixed
                    .iter()
                    .any(|(f, _)| f.split_once('=').is_some_and(|(fk, _)| fk == key))
                {
                    return Err(at(
                        o,
                        format!("`{key}` is both an axis and a fixed value in `set`"),
                        Some("keep one of the two"),
                    ));
                }
                let arr = v.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
                    let close = crate::sweep::grid::nearest_reserved(&key);
                    at(
                        o,
                        format!("axis `{key}` must be a non-empty list of values"),
                        Some(&match close {
                            Some(r) => format!("did you mean the sweep key `{r}`?"),
                            None => format!(
                                "write \"{key}\" = [a, b]; one value for every run goes in set = {{ \"{key}\" = a }}"
                            ),
                        }),
                    )
                })?;
                let mut values = Vec::new();
                for v in arr.iter() {
                    let vo = v.span().map_or(o, |s| s.start);
                    let json = to_json(v).ok_or_else(|| {
                        at(
                            vo,
                            format!("axis `{key}`: a value must be a number, string, boolean or list of them"),
                            None,
                        )
                    })?;
                    if values.iter().any(|w: &AxisValue| w.json == json) {
                        return Err(at(
                            vo,
                            format!("axis `{key}`: the value {} is listed twice", toml_text(v)),
                            None,
                        ));
                    }
                    values.push(AxisValue {
                        sets: vec![(format!("{key}={}", toml_text(v)), vo)],
                        label: label_of(&json),
                        json,
                        offset: vo,
                    });
                }
                axes.push(Axis {
                    label: key.rsplit('.').next().unwrap_or(&key).to_string(),
                    key,
                    values,
                });
            }
        }
        // [sweep.variants.<axis>]: name = { "config.path" = value, ... }, one axis value per
        // name, each setting its whole bundle (a stream: its scenario, tasks and size at once).
        if let Some(item) = sweep.get("variants") {
            let t = item.as_table_like().ok_or_else(|| {
                at(
                    off(item),
                    "`variants` must be a table of variant axes".into(),
                    Some("write [sweep.variants.stream] with one line per variant: short = { \"data.subsample\" = 1600 }"),
                )
            })?;
            for (axis, vitem) in t.iter() {
                let aoff = t
                    .key(axis)
                    .and_then(toml_edit::Key::span)
                    .map_or(off(vitem), |s| s.start);
                if axes.iter().any(|a: &Axis| a.key == axis)
                    || SECTIONS.contains(&axis)
                    || axis == "config"
                {
                    return Err(at(
                        aoff,
                        format!(
                            "variant axis `{axis}` has the name of another axis or of a config section"
                        ),
                        Some("name it after what it varies, e.g. `stream`"),
                    ));
                }
                let vt = vitem.as_table_like().filter(|v| !v.is_empty()).ok_or_else(|| {
                    at(
                        aoff,
                        format!("variant axis `{axis}` must be a non-empty table of named variants"),
                        Some("write short = { \"data.subsample\" = 1600 } under it, one line per variant"),
                    )
                })?;
                let mut values = Vec::new();
                for (name, bundle) in vt.iter() {
                    let noff = vt
                        .key(name)
                        .and_then(toml_edit::Key::span)
                        .map_or(aoff, |s| s.start);
                    let b = bundle.as_table_like().ok_or_else(|| {
                        at(
                            noff,
                            format!("variant `{axis}.{name}` must be a table of overrides"),
                            Some("write name = { \"data.tasks\" = 10 }, or name = {} for the config as it is"),
                        )
                    })?;
                    let mut leaves = Vec::new();
                    flatten(b, String::new(), &mut leaves);
                    let mut sets = Vec::new();
                    for (k, v) in leaves {
                        let o = v.span().map_or(noff, |s| s.start);
                        check_key(&k, o)?;
                        if fixed
                            .iter()
                            .any(|(f, _)| f.split_once('=').is_some_and(|(fk, _)| fk == k))
                        {
                            return Err(at(
                                o,
                                format!(
                                    "`{k}` is both set by variant `{axis}.{name}` and a fixed value in `set`"
                                ),
                                Some("keep one of the two"),
                            ));
                        }
                        sets.push((format!("{k}={}", toml_text(&v)), o));
                    }
                    let label = sanitize(name);
                    if values.iter().any(|w: &AxisValue| w.label == label) {
                        return Err(at(
                            noff,
                            format!("variant axis `{axis}`: two variants are named `{label}`"),
                            None,
                        ));
                    }
                    values.push(AxisValue {
                        sets,
                        json: name.into(),
                        label,
                        offset: noff,
                    });
                }
                axes.push(Axis {
                    key: axis.to_string(),
                    label: axis.to_string(),
                    values,
                });
            }
        }
        if configs.is_empty() {
            return Err(at(
                0,
                "the sweep names no config".into(),
                Some(
                    "add base = \"experiment.toml\" or configs = [\"a.toml\", \"b.toml\"] to [sweep]",
                ),
            ));
        }
        let mut stems: Vec<String> = Vec::new();
        for (c, o) in &configs {
            let stem = c
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            if stems.contains(&stem) {
                return Err(at(
                    *o,
                    format!(
                        "two configs are named `{stem}`: the config axis is named by the file's stem"
                    ),
                    Some("rename one of the files, or list each config once"),
                ));
            }
            stems.push(stem);
        }
        let runs = axes
            .iter()
            .try_fold(configs.len() * seeds.len().max(1), |n: usize, a: &Axis| {
                n.checked_mul(a.values.len())
            })
            .unwrap_or(usize::MAX);
        if runs > MAX_RUNS {
            return Err(at(
                0,
                format!("the grid has {runs} runs, more than the {MAX_RUNS} a sweep expands"),
                Some("split it into several sweeps, or sweep fewer values"),
            ));
        }
        // Two axes ending in the same segment are named by their whole path.
        let labels: Vec<String> = axes.iter().map(|a| a.label.clone()).collect();
        for a in &mut axes {
            if labels.iter().filter(|l| **l == a.label).count() > 1 {
                a.label = a.key.clone();
            }
        }
        let name = string("name")?.map_or_else(
            || {
                file.file_stem()
                    .map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned())
            },
            |(n, _)| n,
        );
        if let Some((n, o)) = string("name")?
            && (n.is_empty() || n.starts_with('.') || n.contains(['/', '\\', '\n']))
        {
            return Err(at(
                o,
                format!("name `{n}` cannot name a directory: no `/`, no leading `.`, not empty"),
                None,
            ));
        }
        let out = string("out")?.map(|(o, _)| PathBuf::from(o));
        let s = Self {
            file: file.to_path_buf(),
            source,
            name,
            out,
            configs,
            seeds,
            fixed,
            axes,
            slurm,
        };
        s.check_names()?;
        super::slurm::check_options(&s.slurm)
            .map_err(|m| s.error_at(key_off("slurm"), format!("[sweep.slurm]: {m}"), None))?;
        Ok(s)
    }

    /// A positioned error at `offset` of the sweep file.
    pub fn error_at(&self, offset: usize, message: String, hint: Option<String>) -> Error {
        positioned(&self.file, &self.source, offset, message, hint)
    }

    fn check_names(&self) -> Result<()> {
        let runs = self.grid();
        let mut seen = std::collections::HashMap::new();
        for r in &runs {
            if let Some(prev) = seen.insert(r.name.clone(), r) {
                let off = self
                    .axes
                    .first()
                    .and_then(|a| a.values.first())
                    .map_or(0, |v| v.offset);
                return Err(self.error_at(
                    off,
                    format!(
                        "two runs would share the directory `{}` ({:?} and {:?})",
                        r.name, prev.sets, r.sets
                    ),
                    Some(
                        "give the axis values distinct names (values that differ only in punctuation), or list each config once"
                            .into(),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The grid: configs × axes × seeds, in that order (seeds fastest), each run with its
    /// stable name `<cell>/seed-<N>`. The cell joins `label-value` parts with `_`
    /// (`capacity-200_selection-herding`), led by the config's stem when several configs are
    /// listed; a sweep without axes and one config names its cell after the config.
    pub fn grid(&self) -> Vec<GridRun> {
        let mut cells: Vec<CellDraft> = Vec::new();
        for (config, _) in &self.configs {
            let stem = config
                .file_stem()
                .map_or_else(|| "config".into(), |s| s.to_string_lossy().into_owned());
            let mut parts = Vec::new();
            let mut axes = serde_json::Map::new();
            if self.configs.len() > 1 || self.axes.is_empty() {
                parts.push(sanitize(&stem));
            }
            if self.configs.len() > 1 {
                axes.insert("config".into(), stem.clone().into());
            }
            let mut partial = vec![(parts, Vec::<String>::new(), axes)];
            for axis in &self.axes {
                let mut next = Vec::new();
                for (parts, sets, axes) in &partial {
                    for v in &axis.values {
                        let mut p = parts.clone();
                        p.push(format!("{}-{}", sanitize(&axis.label), v.label));
                        let mut s = sets.clone();
                        s.extend(v.sets.iter().map(|(set, _)| set.clone()));
                        let mut a = axes.clone();
                        a.insert(axis.key.clone(), v.json.clone());
                        next.push((p, s, a));
                    }
                }
                partial = next;
            }
            for (p, s, a) in partial {
                let mut key = vec![config.display().to_string()];
                key.extend(p.iter().cloned());
                cells.push((key, s, a));
            }
        }
        let fixed: Vec<String> = self.fixed.iter().map(|(s, _)| s.clone()).collect();
        let hashes: std::collections::HashMap<PathBuf, String> = self
            .configs
            .iter()
            .map(|(c, _)| {
                let h = std::fs::read(c)
                    .map(|b| engram_core::fsutil::sha256_hex(&b))
                    .unwrap_or_default();
                (c.clone(), h)
            })
            .collect();
        let mut runs = Vec::new();
        for (key, sets, axes) in cells {
            let config = PathBuf::from(&key[0]);
            let cell = key[1..].join("_");
            let seeds: Vec<Option<u64>> = if self.seeds.is_empty() {
                vec![None]
            } else {
                self.seeds.iter().copied().map(Some).collect()
            };
            for seed in seeds {
                let mut all = fixed.clone();
                all.extend(sets.iter().cloned());
                // The config's own seed when the sweep lists none (read when validated).
                let seed = seed.unwrap_or_else(|| config_seed(&config).unwrap_or(0));
                all.push(format!("run.seed={seed}"));
                runs.push(GridRun {
                    name: format!("{cell}/seed-{seed}"),
                    cell: cell.clone(),
                    config_sha256: hashes.get(&config).cloned().unwrap_or_default(),
                    config: config.clone(),
                    sets: all,
                    seed,
                    axes: axes.clone(),
                });
            }
        }
        runs
    }

    /// The axis keys in grid order (`config` first when several configs are listed).
    pub fn axis_keys(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.configs.len() > 1 {
            v.push("config".to_string());
        }
        v.extend(self.axes.iter().map(|a| a.key.clone()));
        v
    }

    /// The manifest of this sweep's grid, with the plugins every run loads.
    pub fn manifest(&self, plugins: &[PathBuf]) -> Manifest {
        Manifest {
            kind: MANIFEST_KIND.into(),
            engram: env!("CARGO_PKG_VERSION").into(),
            name: self.name.clone(),
            sweep_file: std::path::absolute(&self.file).unwrap_or_else(|_| self.file.clone()),
            axes: self.axis_keys(),
            plugins: plugins
                .iter()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
                .collect(),
            slurm: self.slurm.clone(),
            runs: self.grid(),
        }
    }

    /// Places an error that loading run `run`'s config gave: when it names an override that
    /// an axis or `set` value of this file wrote, at that value in the sweep file; otherwise
    /// (an error of the base config itself) as it is. Either way the message names the run.
    pub fn place_error(&self, run: &GridRun, e: Error) -> Error {
        let text = e.to_string();
        let from_sweep = self
            .axes
            .iter()
            .flat_map(|a| a.values.iter().flat_map(|v| v.sets.iter().cloned()))
            .chain(self.fixed.iter().cloned())
            .find(|(set, _)| run.sets.contains(set) && mentions(&text, set));
        let (message, hint) = match &e {
            Error::Config { message, hint, .. } | Error::ConfigFile { message, hint, .. } => {
                (message.clone(), hint.clone())
            }
            other => (other.to_string(), None),
        };
        match from_sweep {
            Some((set, offset)) => self.error_at(
                offset,
                format!("run `{}` (`{set}`): {message}", run.name),
                hint,
            ),
            None => match e {
                Error::Config {
                    file, line, column, ..
                } => Error::Config {
                    file,
                    line,
                    column,
                    message: format!("run `{}`: {message}", run.name),
                    hint,
                },
                Error::ConfigFile { file, .. } => Error::ConfigFile {
                    file,
                    message: format!("run `{}`: {message}", run.name),
                    hint,
                },
                other => other,
            },
        }
    }
}

/// Whether an error's text blames the override `set` (`--set `k=v``) or its key.
fn mentions(text: &str, set: &str) -> bool {
    let key = set.split_once('=').map_or(set, |(k, _)| k);
    let last = key.rsplit('.').next().unwrap_or(key);
    text.contains(&format!("`{set}`"))
        || text.contains(&format!("--set `{key}"))
        || text.contains(&format!("`{key}`"))
        || text.contains(&format!("unknown field `{last}`"))
        || text.contains(&format!("`{last}`"))
}

/// The reserved key nearest to a mistyped axis name, if any is close.
pub(crate) fn nearest_reserved(key: &str) -> Option<&'static str> {
    RESERVED
        .iter()
        .copied()
        .find(|r| strsim::levenshtein(r, key) <= 2 && !key.contains('.'))
}

/// `run.seed` of a config, if it reads.
fn config_seed(config: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(config).ok()?;
    let v: toml::Table = toml::from_str(&text).ok()?;
    v.get("run")?.get("seed")?.as_integer()?.try_into().ok()
}

/// Leaves of a table, as dotted paths.
fn flatten(
    t: &dyn toml_edit::TableLike,
    prefix: String,
    out: &mut Vec<(String, toml_edit::Value)>,
) {
    for (k, item) in t.iter() {
        let path = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        match item {
            toml_edit::Item::Value(toml_edit::Value::InlineTable(it)) => flatten(it, path, out),
            toml_edit::Item::Value(v) => out.push((path, v.clone())),
            toml_edit::Item::Table(tt) => flatten(tt, path, out),
            _ => {}
        }
    }
}

/// A value as bare TOML text, without the file's surrounding whitespace or comments.
fn toml_text(v: &toml_edit::Value) -> String {
    let mut v = v.clone();
    v.decor_mut().clear();
    if let toml_edit::Value::Array(a) = &mut v {
        a.fmt();
    }
    v.to_string().trim().to_string()
}

/// A TOML value as JSON; `None` for tables, dates and non-finite floats.
fn to_json(v: &toml_edit::Value) -> Option<serde_json::Value> {
    Some(match v {
        toml_edit::Value::String(s) => s.value().clone().into(),
        toml_edit::Value::Integer(i) => (*i.value()).into(),
        toml_edit::Value::Float(f) => {
            serde_json::Number::from_f64(*f.value()).map(serde_json::Value::Number)?
        }
        toml_edit::Value::Boolean(b) => (*b.value()).into(),
        toml_edit::Value::Array(a) => a.iter().map(to_json).collect::<Option<Vec<_>>>()?.into(),
        _ => return None,
    })
}

/// A value's part of a run name: strings as written, numbers in their JSON form, lists joined
/// by `x`; characters other than letters, digits, `.`, `+` and `-` become `_`.
fn label_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => sanitize(s),
        serde_json::Value::Array(a) => a.iter().map(label_of).collect::<Vec<_>>().join("x"),
        other => sanitize(&other.to_string()),
    }
}

fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with('.') {
        format!("_{out}")
    } else {
        out
    }
}

impl Manifest {
    /// Reads `DIR/grid.json`.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when `dir` holds no grid manifest (not a sweep's directory) or it
    /// does not decode.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let bytes = engram_core::fsutil::read_bounded(&path, engram_core::fsutil::MAX_TEXT_BYTES)
            .map_err(|e| Error::ConfigFile {
            file: dir.to_path_buf(),
            message: format!("not the directory of an engram sweep (cannot read {MANIFEST}: {e})"),
            hint: Some(
                "give the --out directory of `engram sweep run` or `engram sweep submit`".into(),
            ),
        })?;
        let m: Self = serde_json::from_slice(&bytes).map_err(|e| Error::ConfigFile {
            file: path.clone(),
            message: format!("not a sweep manifest: {e}"),
            hint: Some(
                "the file is written by engram; restore it or start the sweep in a new directory"
                    .into(),
            ),
        })?;
        if m.kind != MANIFEST_KIND {
            return Err(Error::ConfigFile {
                file: path,
                message: format!("kind `{}` is not `{MANIFEST_KIND}`", m.kind),
                hint: None,
            });
        }
        Ok(m)
    }

    /// Makes `dir` this sweep's directory: creates it and writes `grid.json` and a copy of the
    /// sweep file when `dir` is absent or empty; accepts it when it already holds a sweep whose
    /// runs of the same name are defined alike (so a sweep can be resumed, or grown by more
    /// seeds or values), and then writes the new grid.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when `dir` is a file, holds other files and no grid manifest (it is
    /// not a sweep's: nothing in it is touched), or holds a sweep that defines a run of the
    /// same name differently; [`Error::Io`] when it cannot be written.
    pub fn install(&self, dir: &Path, sweep_source: &str) -> Result<()> {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::ConfigFile {
                file: dir.to_path_buf(),
                message: "is a file, not a directory".into(),
                hint: Some("choose another --out".into()),
            });
        }
        if dir.join(MANIFEST).is_file() {
            let old = Self::read(dir)?;
            if old.name != self.name {
                return Err(Error::ConfigFile {
                    file: dir.to_path_buf(),
                    message: format!(
                        "holds the sweep `{}` (from {}), not `{}`",
                        old.name,
                        old.sweep_file.display(),
                        self.name
                    ),
                    hint: Some("give each sweep its own --out".into()),
                });
            }
            for r in &self.runs {
                if let Some(o) = old.runs.iter().find(|o| o.name == r.name)
                    && !o.config_sha256.is_empty()
                    && !r.config_sha256.is_empty()
                    && o.config_sha256 != r.config_sha256
                {
                    return Err(Error::ConfigFile {
                        file: r.config.clone(),
                        message: format!(
                            "changed since this sweep's runs in {} started (run `{}` was made with another version of it)",
                            dir.display(),
                            r.name
                        ),
                        hint: Some(
                            "restore the config, or run the changed sweep into another --out"
                                .into(),
                        ),
                    });
                }
            }
            for r in &self.runs {
                if let Some(o) = old.runs.iter().find(|o| o.name == r.name)
                    && (o.config != r.config || o.sets != r.sets)
                {
                    return Err(Error::ConfigFile {
                        file: dir.join(MANIFEST),
                        message: format!(
                            "this directory's sweep defines run `{}` differently (config {} with {:?}; now config {} with {:?})",
                            r.name,
                            o.config.display(),
                            o.sets,
                            r.config.display(),
                            r.sets
                        ),
                        hint: Some(
                            "write the changed sweep into another --out, or remove that run's directory and its entry first"
                                .into(),
                        ),
                    });
                }
            }
        } else if let Ok(mut rd) = std::fs::read_dir(dir)
            && rd.next().is_some()
        {
            return Err(Error::ConfigFile {
                file: dir.to_path_buf(),
                message: "holds files and is not an engram sweep's directory (no grid.json); nothing was written".into(),
                hint: Some("choose an empty or new --out".into()),
            });
        }
        for sub in ["state", "logs"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| Error::io(&p, e))?;
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Other(e.to_string()))?;
        engram_core::fsutil::write_atomic(&dir.join(MANIFEST), &bytes)?;
        engram_core::fsutil::write_atomic(&dir.join("sweep.toml"), sweep_source.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Sweep> {
        Sweep::parse(Path::new("/s/sweep.toml"), text.to_string())
    }

    #[test]
    fn variants_set_their_whole_bundle_and_name_the_cell() {
        let s = parse(
            "[sweep]\nconfigs = [\"a.toml\", \"b.toml\"]\nseeds = [0]\n\"optimizer.lr\" = [0.1]\n\
             [sweep.variants.stream]\nsplit = {}\nperm = { \"data.scenario\" = \"domain-incremental\", \"data.tasks\" = 10 }\n",
        )
        .unwrap();
        let g = s.grid();
        assert_eq!(g.len(), 2 * 2);
        assert_eq!(g[0].name, "a_lr-0.1_stream-split/seed-0");
        assert_eq!(g[0].sets, ["optimizer.lr=0.1", "run.seed=0"]);
        assert_eq!(g[1].name, "a_lr-0.1_stream-perm/seed-0");
        assert_eq!(
            g[1].sets,
            [
                "optimizer.lr=0.1",
                "data.scenario=\"domain-incremental\"",
                "data.tasks=10",
                "run.seed=0"
            ]
        );
        assert_eq!(g[1].axes["stream"], "perm");
        assert_eq!(s.axis_keys(), ["config", "optimizer.lr", "stream"]);
        // Mistakes are positioned.
        for (text, want) in [
            (
                "[sweep]\nbase = \"a.toml\"\n[sweep.variants.stream]\nx = 3\n",
                "must be a table of overrides",
            ),
            (
                "[sweep]\nbase = \"a.toml\"\n[sweep.variants]\nstream = {}\n",
                "non-empty table of named variants",
            ),
            (
                "[sweep]\nbase = \"a.toml\"\n[sweep.variants.stream]\nx = { \"dta.tasks\" = 2 }\n",
                "neither a key of [sweep] nor a section",
            ),
            (
                "[sweep]\nbase = \"a.toml\"\nset = { \"data.tasks\" = 2 }\n[sweep.variants.stream]\nx = { \"data.tasks\" = 3 }\n",
                "both set by variant `stream.x`",
            ),
            (
                "[sweep]\nbase = \"a.toml\"\n[sweep.variants.data]\nx = {}\n",
                "name of another axis or of a config section",
            ),
        ] {
            let e = parse(text).err().unwrap();
            assert!(e.to_string().contains(want), "{text}: {e}");
            assert!(matches!(e, Error::Config { .. }), "{e}");
        }
    }

    #[test]
    fn grid_is_configs_times_axes_times_seeds_with_stable_names() {
        let s = parse(
            "[sweep]\nconfigs = [\"a.toml\", \"b.toml\"]\nseeds = [0, 1]\nset = { \"data.subsample\" = 100 }\n\
             \"forgetting.1.capacity\" = [200, 500]\nforgetting.1.selection = [\"herding\", \"reservoir\"]\n",
        )
        .unwrap();
        let g = s.grid();
        assert_eq!(g.len(), 2 * 2 * 2 * 2);
        assert_eq!(g[0].name, "a_capacity-200_selection-herding/seed-0");
        assert_eq!(g[1].name, "a_capacity-200_selection-herding/seed-1");
        assert_eq!(g[2].name, "a_capacity-200_selection-reservoir/seed-0");
        assert_eq!(g[15].name, "b_capacity-500_selection-reservoir/seed-1");
        assert_eq!(g[0].config, PathBuf::from("/s/a.toml"));
        assert_eq!(
            g[3].sets,
            [
                "data.subsample=100",
                "forgetting.1.capacity=200",
                "forgetting.1.selection=\"reservoir\"",
                "run.seed=1"
            ]
        );
        assert_eq!(g[3].axes["forgetting.1.selection"], "reservoir");
        assert_eq!(g[3].axes["config"], "a");
        assert_eq!(
            s.axis_keys(),
            ["config", "forgetting.1.capacity", "forgetting.1.selection"]
        );
        // The same file gives the same names (a resumed sweep finds its runs).
        assert_eq!(parse(&s.source).unwrap().grid(), g);
    }

    #[test]
    fn labels_of_lists_floats_and_clashing_axes() {
        let s = parse(
            "[sweep]\nbase = \"x.toml\"\n\"model.hidden\" = [[400, 400], [64]]\n\"optimizer.lr\" = [0.05, 1e-3]\n\
             \"forgetting.0.lambda\" = [1]\n\"scheduler.0.lambda\" = [2]\n",
        )
        .unwrap();
        let g = s.grid();
        assert_eq!(g.len(), 4);
        assert_eq!(
            g[0].cell,
            "hidden-400x400_lr-0.05_forgetting.0.lambda-1_scheduler.0.lambda-2"
        );
        assert_eq!(g[0].sets[0], "model.hidden=[400, 400]");
        assert_eq!(g[1].sets[1], "optimizer.lr=0.001");
        assert_eq!(g[1].axes["optimizer.lr"], 0.001);
        // No seeds: the config's own seed (here the file does not exist: 0).
        assert_eq!(g[0].seed, 0);
        assert!(g[0].name.ends_with("/seed-0"));
    }

    #[test]
    fn bad_sweeps_are_positioned_errors() {
        let cases = [
            ("[sweep]\nseeds = [0]\n", 1, 1, "names no config"),
            (
                "[sweep]\nbase = \"x.toml\"\nseeds = [0, -1]\n",
                3,
                13,
                "not a whole number",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nseeds = [1, 1]\n",
                3,
                13,
                "listed twice",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n\"optimizer.lr\" = 0.1\n",
                3,
                18,
                "non-empty list",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n\"optimizer.lr\" = []\n",
                3,
                18,
                "non-empty list",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nsead = 3\n",
                3,
                1,
                "the sweep key `seeds`",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nseed = [0, 1]\n",
                3,
                1,
                "the sweep key `seeds`",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nsets = { \"data.subsample\" = 1 }\n",
                3,
                1,
                "the sweep key `set`",
            ),
            ("[sweep]\nbsae = \"x.toml\"\n", 2, 1, "the sweep key `base`"),
            (
                "[sweep]\nbase = \"x.toml\"\n\"run.seed\" = [5, 6]\n",
                3,
                1,
                "cannot be swept",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nset = { \"run.out\" = \"x\" }\n",
                3,
                21,
                "cannot be swept",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nset = { \"optimizer.lr\" = 0.3 }\n\"optimizer.lr\" = [0.1]\n",
                4,
                18,
                "both an axis and a fixed value",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n\"optimizer.lr\" = [0.1, 1e-1]\n",
                3,
                24,
                "0.1 is listed twice",
            ),
            (
                "[sweep]\nconfigs = [\"a/x.toml\", \"b/x.toml\"]\n",
                2,
                24,
                "two configs are named `x`",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nname = \"../up\"\n",
                3,
                8,
                "cannot name a directory",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.slurm]\ncpus = 2\n",
                3,
                1,
                "unknown field `cpus`",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.slurm]\ncpus_per_task = 0\n",
                3,
                8,
                "cpus_per_task must be at least 1",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.slurm]\nextra = [\"--a\\n#SBATCH --b\"]\n",
                3,
                8,
                "line break",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.slurm]\ntime = \"forever\"\n",
                3,
                8,
                "not one of Slurm's forms",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n\"model.hidden\" = [[1], [2], [3], [4], [5], [6], [7], [8], [9], [10]]\n\"optimizer.lr\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"train.epochs\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"train.batch_size\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"train.log_every\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n",
                1,
                1,
                "the grid has 110000 runs",
            ),
            ("[run]\nseed = 1\n", 1, 2, "unknown top-level key `run`"),
            ("[sweep\n", 1, 7, "invalid"),
            (
                "[sweep]\nbase = \"x.toml\"\n\"model.b\" = [\"x y\", \"x_y\"]\n",
                3,
                14,
                "share the directory",
            ),
        ];
        for (text, line, column, needle) in cases {
            match parse(text) {
                Err(Error::Config {
                    line: l,
                    column: c,
                    message,
                    hint,
                    ..
                }) => {
                    let all = format!("{message} {}", hint.unwrap_or_default());
                    assert!(all.contains(needle), "{text:?}: {all}");
                    assert_eq!((l, c), (line, column), "{text:?}: {all}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
