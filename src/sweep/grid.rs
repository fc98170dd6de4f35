//! The grid of a parsed sweep file ([`Sweep`], parsed in `file.rs`): its expansion into runs
//! with stable names, and the grid manifest (`DIR/grid.json`) that every later command reads.
//!
//! The grid is the cartesian product configs × axes (in file order) × seeds, the seeds varying
//! fastest; a run's name is `<cell>/seed-<N>`, its cell naming every axis value but the seed.

pub use super::resources::SlurmOptions;
use engram_core::config::positioned;
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// `[sweep.suite]`: the roles `engram bench suite`'s goals compare (empty when absent).
    pub suite: super::suite::Roles,
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
    /// A positioned error at `offset` of the sweep file.
    pub fn error_at(&self, offset: usize, message: String, hint: Option<String>) -> Error {
        positioned(&self.file, &self.source, offset, message, hint)
    }

    /// Refuses a grid in which two runs would get the same directory, at the first axis value.
    pub(super) fn check_names(&self) -> Result<()> {
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
                // Bounded: a base that is a device (`/dev/zero`) is refused by the parser, and
                // a file swapped for one later is not read whole either.
                let h = engram_core::fsutil::read_bounded(c, engram_core::fsutil::MAX_TEXT_BYTES)
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

/// `run.seed` of a config, if it reads.
fn config_seed(config: &Path) -> Option<u64> {
    let text = engram_core::fsutil::read_text(config).ok()?;
    let v: toml::Table = toml::from_str(&text).ok()?;
    v.get("run")?.get("seed")?.as_integer()?.try_into().ok()
}

/// A value's part of a run name: strings as written, numbers in their JSON form, lists joined
/// by `x`; characters other than letters, digits, `.`, `+` and `-` become `_`.
pub(super) fn label_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => sanitize(s),
        serde_json::Value::Array(a) => a.iter().map(label_of).collect::<Vec<_>>().join("x"),
        other => sanitize(&other.to_string()),
    }
}

/// `s` with every character but letters, digits, `.`, `+` and `-` as `_`, and `_` before a
/// leading `.` (or for an empty `s`): a safe path segment.
pub(super) fn sanitize(s: &str) -> String {
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
    /// [`Error::Usage`] when `dir` is empty (`--out ""`), a file, a dangling link or under a
    /// file ([`crate::outpath::check_dir`]); [`Error::ConfigFile`] when it holds other files and
    /// no grid manifest (it is not a sweep's: nothing in it is touched), or holds a sweep that defines a run of the
    /// same name differently; [`Error::Usage`] when nothing can be created in it; [`Error::Io`] when a write fails.
    pub fn install(&self, dir: &Path, sweep_source: &str) -> Result<()> {
        // The one rule for user-named paths (`crate::outpath`): an empty path (which would
        // put the sweep's files into the current directory over the user's own), a file, a
        // dangling link or a path under a file is refused by name before anything is written.
        crate::outpath::check_dir(dir, "--out")?;
        if dir.join(MANIFEST).is_file() {
            self.check_compatible(&Self::read(dir)?, dir)?;
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
            std::fs::create_dir_all(&p)
                .map_err(|e| crate::outpath::cannot_create("--out", dir, e))?;
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Other(e.to_string()))?;
        engram_core::fsutil::write_atomic(&dir.join(MANIFEST), &bytes)?;
        engram_core::fsutil::write_atomic(&dir.join("sweep.toml"), sweep_source.as_bytes())
    }

    /// Refuses to replace `old`, the manifest in `dir`, when it is another sweep's, or
    /// defines a run of the same name differently (another config, other overrides, or a base
    /// config whose text changed since).
    fn check_compatible(&self, old: &Self, dir: &Path) -> Result<()> {
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
                        "restore the config, or run the changed sweep into another --out".into(),
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
        Ok(())
    }
}
