//! The sweep file: read (bounded), parsed with positions, checked, into a [`Sweep`].
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
//!
//! [sweep.suite]                               # `engram bench suite`'s roles, by config stem
//! naive = "split-fmnist"
//! recipes = ["split-fmnist-replay"]
//! ```
//!
//! An axis is any key of `[sweep]` other than the reserved ones (`name`, `base`, `configs`,
//! `seeds`, `set`, `out`, `slurm`, `suite`, `variants`): its key is a `--set` path into the config and
//! its value a non-empty list. Dotted keys written without quotes (`forgetting.1.capacity =
//! […]`) and sub-tables (`[sweep.data] subsample = […]`) are the same axes.
//!
//! Parsing is the experiment file's (`engram_core::config`): the `toml` crate's spanned
//! document ([`DeTable`]), each typed value decoded through serde from its spanned node (so
//! every error knows its byte offset), and [`positioned`] errors (file, line, column, hint).

use super::grid::{Axis, MAX_RUNS, Sweep};
use super::resources::{SlurmOptions, check_options};
use super::suite::Roles;
use engram_core::config::positioned;
use engram_core::{Error, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue, ValueDeserializer};

mod axes;

/// Keys of `[sweep]` that are not axes.
const RESERVED: [&str; 9] = [
    "name", "base", "configs", "seeds", "set", "out", "slurm", "suite", "variants",
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

/// A value of the sweep file with its span.
type Node<'i> = Spanned<DeValue<'i>>;

/// `node` decoded through serde as a `T`; `None` when it is not one.
fn decode<T: DeserializeOwned>(node: &Node<'_>) -> Option<T> {
    T::deserialize(ValueDeserializer::from(node.clone())).ok()
}

/// A value as bare TOML text (`0.001` for `1e-3`, `[400, 400]`, `"herding"`), as
/// `engram run --set KEY=VALUE` takes it.
fn toml_text(node: &Node<'_>) -> String {
    decode::<toml::Value>(node).map_or_else(String::new, |v| v.to_string())
}

/// A TOML value as JSON; `None` for tables, dates and non-finite floats.
fn to_json(node: &Node<'_>) -> Option<serde_json::Value> {
    Some(match node.get_ref() {
        DeValue::String(s) => s.to_string().into(),
        DeValue::Integer(_) => decode::<i64>(node)?.into(),
        DeValue::Float(_) => {
            serde_json::Number::from_f64(decode::<f64>(node)?).map(serde_json::Value::Number)?
        }
        DeValue::Boolean(b) => (*b).into(),
        DeValue::Array(a) => a.iter().map(to_json).collect::<Option<Vec<_>>>()?.into(),
        _ => return None,
    })
}

/// The entries of `table` in file order (by their keys' offsets): the parsed table is a map
/// that may be sorted by key, and the grid's order and names follow the file's.
fn entries<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Spanned<DeString<'i>>, &'t Node<'i>)> {
    let mut v: Vec<_> = table.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// The leaves of `table` as dotted paths under `prefix`, with their nodes, in file order.
fn flatten<'t, 'i>(table: &'t DeTable<'i>, prefix: &str, out: &mut Vec<(String, &'t Node<'i>)>) {
    for (k, v) in entries(table) {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        match v.get_ref() {
            DeValue::Table(t) => flatten(t, &path, out),
            _ => out.push((path, v)),
        }
    }
}

/// The reserved key nearest to a mistyped axis name, if any is close.
fn nearest_reserved(key: &str) -> Option<&'static str> {
    RESERVED
        .iter()
        .copied()
        .find(|r| strsim::levenshtein(r, key) <= 2 && !key.contains('.'))
}

/// Why `path` cannot be a base config, when it exists and is not a readable text file of
/// bounded size (a directory, a device such as `/dev/zero`, a FIFO, a file over
/// [`engram_core::fsutil::MAX_TEXT_BYTES`]); `None` when it is one, or is absent (said later,
/// with the sweep's other checks).
fn config_problem(path: &Path) -> Option<String> {
    use std::io::ErrorKind;
    let limit = engram_core::fsutil::MAX_TEXT_BYTES;
    let e = engram_core::fsutil::check_regular(path, limit).err()?;
    let what = match e.kind() {
        ErrorKind::NotFound => return None,
        ErrorKind::InvalidInput if path.is_dir() => "is a directory, not a config file".into(),
        ErrorKind::InvalidInput => {
            "is not a regular file (a device or a FIFO): a config is a TOML text file".into()
        }
        ErrorKind::FileTooLarge => format!("is too large ({e})"),
        _ => format!("cannot be read: {e}"),
    };
    Some(format!("config {} {what}", path.display()))
}

/// The sweep file being parsed: where it is and its text, for positioned errors.
struct Parser<'a> {
    file: &'a Path,
    source: &'a str,
}

impl Parser<'_> {
    /// A positioned error at byte `offset`.
    fn at(&self, offset: usize, message: String, hint: Option<&str>) -> Error {
        positioned(
            self.file,
            self.source,
            offset,
            message,
            hint.map(str::to_string),
        )
    }

    /// `[sweep]`, after refusing any other top-level key.
    fn sweep_table<'t, 'i>(&self, root: &'t DeTable<'i>) -> Result<&'t DeTable<'i>> {
        if let Some((k, _)) = entries(root)
            .into_iter()
            .find(|(k, _)| k.get_ref() != "sweep")
        {
            return Err(self.at(
                k.span().start,
                format!("unknown top-level key `{}` in a sweep file", k.get_ref()),
                Some(
                    "a sweep file holds one [sweep] table; the configs it names hold the experiment",
                ),
            ));
        }
        match root.get("sweep").map(Spanned::get_ref) {
            Some(DeValue::Table(t)) => Ok(t),
            _ => Err(self.at(
                0,
                "no [sweep] table".into(),
                Some(
                    "start with [sweep] and base = \"experiment.toml\" (see examples/sweep-small.toml)",
                ),
            )),
        }
    }

    /// The byte offset of key `k` of `table` (of its value when the key has no span; 0 when
    /// absent).
    fn key_offset(table: &DeTable<'_>, k: &str) -> usize {
        table.get_key_value(k).map_or(0, |(key, v)| {
            if key.span().is_empty() {
                v.span().start
            } else {
                key.span().start
            }
        })
    }

    /// String key `k` of `sweep` with the offset of its value; `None` when absent.
    fn string(&self, sweep: &DeTable<'_>, k: &str) -> Result<Option<(String, usize)>> {
        let Some(node) = sweep.get(k) else {
            return Ok(None);
        };
        let o = node.span().start;
        let s = decode::<String>(node).ok_or_else(|| {
            self.at(
                o,
                format!("`{k}` must be a string"),
                Some("put the value in double quotes"),
            )
        })?;
        Ok(Some((s, o)))
    }

    /// The entries of list key `k` of `sweep`; `None` when absent.
    fn list<'t, 'i>(
        &self,
        sweep: &'t DeTable<'i>,
        k: &str,
        what: &str,
        hint: &str,
    ) -> Result<Option<&'t [Node<'i>]>> {
        let Some(node) = sweep.get(k) else {
            return Ok(None);
        };
        match node.get_ref() {
            DeValue::Array(a) if !a.is_empty() => Ok(Some(&a[..])),
            _ => Err(self.at(
                node.span().start,
                format!("`{k}` must be a non-empty list of {what}"),
                Some(hint),
            )),
        }
    }

    /// `base` and `configs`, resolved against the sweep file's directory, with their offsets.
    fn configs(&self, sweep: &DeTable<'_>) -> Result<Vec<(PathBuf, usize)>> {
        let dir = self.file.parent().unwrap_or(Path::new("")).to_path_buf();
        let resolve = |p: &str| {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::path::absolute(dir.join(p)).unwrap_or_else(|_| dir.join(p))
            }
        };
        let mut configs = Vec::new();
        if let Some((b, o)) = self.string(sweep, "base")? {
            configs.push((resolve(&b), o));
        }
        let hint = "write configs = [\"a.toml\", \"b.toml\"]";
        for v in self
            .list(sweep, "configs", "config files", hint)?
            .unwrap_or_default()
        {
            let o = v.span().start;
            let s = decode::<String>(v).ok_or_else(|| {
                self.at(o, "a config must be a file name (a string)".into(), None)
            })?;
            configs.push((resolve(&s), o));
        }
        Ok(configs)
    }

    /// `seeds`: whole numbers ≥ 0, each once.
    fn seeds(&self, sweep: &DeTable<'_>) -> Result<Vec<u64>> {
        let hint = "write seeds = [0, 1, 2]";
        let mut seeds = Vec::new();
        for v in self
            .list(sweep, "seeds", "whole numbers ≥ 0", hint)?
            .unwrap_or_default()
        {
            let o = v.span().start;
            let s = decode::<i64>(v)
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| {
                    self.at(
                        o,
                        format!("seed `{}` is not a whole number ≥ 0", toml_text(v)),
                        Some(hint),
                    )
                })?;
            if seeds.contains(&s) {
                return Err(self.at(o, format!("seed {s} is listed twice"), None));
            }
            seeds.push(s);
        }
        Ok(seeds)
    }

    /// `[sweep.slurm]`, decoded through serde (unknown keys and wrong types refused).
    fn slurm(&self, sweep: &DeTable<'_>) -> Result<SlurmOptions> {
        let Some(node) = sweep.get("slurm") else {
            return Ok(SlurmOptions::default());
        };
        let o = node.span().start;
        if !matches!(node.get_ref(), DeValue::Table(_)) {
            return Err(self.at(o, "`slurm` must be a table".into(), None));
        }
        SlurmOptions::deserialize(ValueDeserializer::from(node.clone())).map_err(|e| {
            self.at(
                o,
                format!("[sweep.slurm]: {}", e.message().trim()),
                Some(
                    "keys: cpus_per_task, mem, time, partition, account, gres, max_parallel, engram, extra",
                ),
            )
        })
    }

    /// `[sweep.suite]`, decoded through serde (unknown keys and wrong types refused); every
    /// stem it names must be one of `configs`' (the tables name configs by stem).
    fn suite(&self, sweep: &DeTable<'_>, configs: &[(PathBuf, usize)]) -> Result<Roles> {
        let Some(node) = sweep.get("suite") else {
            return Ok(Roles::default());
        };
        let o = node.span().start;
        let DeValue::Table(t) = node.get_ref() else {
            return Err(self.at(o, "`suite` must be a table".into(), None));
        };
        let roles = Roles::deserialize(ValueDeserializer::from(node.clone())).map_err(|e| {
            self.at(
                o,
                format!("[sweep.suite]: {}", e.message().trim()),
                Some("keys: naive, plain, joint (config stems) and recipes (a list of them)"),
            )
        })?;
        let stems: Vec<String> = configs
            .iter()
            .filter_map(|(c, _)| c.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .collect();
        for (key, stem) in roles.named() {
            if !stems.iter().any(|s| s == stem) {
                return Err(self.at(
                    t.get(key).map_or(o, |v| v.span().start),
                    format!("[sweep.suite] {key}: `{stem}` is not one of the sweep's configs"),
                    Some(&format!(
                        "name a config by its file stem: {}",
                        stems.join(", ")
                    )),
                ));
            }
        }
        Ok(roles)
    }

    /// Refuses a sweep without configs, two configs of one stem (the config axis is named by
    /// stems), and a config that is a directory, a device or too large to be one.
    fn check_configs(&self, configs: &[(PathBuf, usize)]) -> Result<()> {
        if configs.is_empty() {
            return Err(self.at(
                0,
                "the sweep names no config".into(),
                Some(
                    "add base = \"experiment.toml\" or configs = [\"a.toml\", \"b.toml\"] to [sweep]",
                ),
            ));
        }
        let mut stems: Vec<String> = Vec::new();
        for (c, o) in configs {
            let stem = c
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            if stems.contains(&stem) {
                return Err(self.at(
                    *o,
                    format!(
                        "two configs are named `{stem}`: the config axis is named by the file's stem"
                    ),
                    Some("rename one of the files, or list each config once"),
                ));
            }
            stems.push(stem);
        }
        for (c, o) in configs {
            if let Some(problem) = config_problem(c) {
                return Err(self.at(
                    *o,
                    problem,
                    Some("a base config is an experiment's TOML file"),
                ));
            }
        }
        Ok(())
    }

    /// Refuses a grid of more than [`MAX_RUNS`] runs.
    fn check_size(&self, configs: usize, seeds: usize, axes: &[Axis]) -> Result<()> {
        let runs = axes
            .iter()
            .try_fold(configs * seeds.max(1), |n: usize, a| {
                n.checked_mul(a.values.len())
            })
            .unwrap_or(usize::MAX);
        if runs > MAX_RUNS {
            return Err(self.at(
                0,
                format!("the grid has {runs} runs, more than the {MAX_RUNS} a sweep expands"),
                Some("split it into several sweeps, or sweep fewer values"),
            ));
        }
        Ok(())
    }

    /// `name` (default the file's stem), which names a directory.
    fn name(&self, sweep: &DeTable<'_>) -> Result<String> {
        match self.string(sweep, "name")? {
            None => Ok(self
                .file
                .file_stem()
                .map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned())),
            Some((n, o)) if n.is_empty() || n.starts_with('.') || n.contains(['/', '\\', '\n']) => {
                Err(self.at(
                    o,
                    format!(
                        "name `{n}` cannot name a directory: no `/`, no leading `.`, not empty"
                    ),
                    None,
                ))
            }
            Some((n, _)) => Ok(n),
        }
    }

    /// `out`; an empty one is refused (it would put the sweep's files, `sweep.toml` and
    /// `sweep.csv` among them, into the current directory over the user's own).
    fn out(&self, sweep: &DeTable<'_>) -> Result<Option<PathBuf>> {
        match self.string(sweep, "out")? {
            Some((o, at)) if o.trim().is_empty() => Err(self.at(
                at,
                "`out` is empty: it names no directory, and the sweep would write into the current directory".into(),
                Some("write out = \"runs/NAME\" (a new or empty directory), or leave it out for runs/<name>"),
            )),
            o => Ok(o.map(|(o, _)| PathBuf::from(o))),
        }
    }
}

/// Two axes ending in the same segment are named by their whole path.
fn relabel(axes: &mut [Axis]) {
    let labels: Vec<String> = axes.iter().map(|a| a.label.clone()).collect();
    for a in axes {
        if labels.iter().filter(|l| **l == a.label).count() > 1 {
            a.label = a.key.clone();
        }
    }
}

impl Sweep {
    /// Reads (bounded, [`engram_core::fsutil::read_text`]) and parses a sweep file.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read (absent, not a regular file, too
    /// large, not UTF-8); otherwise as [`Sweep::parse`].
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
    /// [`Error::Config`] (file, line, column, hint) for TOML syntax, a key outside `[sweep]`,
    /// a missing `[sweep]` table or base config, a base config that is a directory, a device
    /// or too large, a seed that is not a whole number ≥ 0, an axis that is not a non-empty
    /// list, an empty `out`, a bad `[sweep.slurm]`, a `[sweep.suite]` with an unknown key or a
    /// stem that is none of the configs', a grid over [`MAX_RUNS`], or two runs that
    /// would get the same name.
    pub fn parse(file: &Path, source: String) -> Result<Self> {
        let p = Parser {
            file,
            source: &source,
        };
        let doc = DeTable::parse(&source).map_err(|e| {
            p.at(
                e.span().map_or(0, |s| s.start),
                e.message().trim().to_string(),
                None,
            )
        })?;
        let sweep = p.sweep_table(doc.get_ref())?;
        let configs = p.configs(sweep)?;
        let seeds = p.seeds(sweep)?;
        let fixed = p.fixed(sweep)?;
        let slurm = p.slurm(sweep)?;
        let suite = p.suite(sweep, &configs)?;
        let mut axes = p.axes(sweep, &fixed)?;
        let variants = p.variants(sweep, &axes, &fixed)?;
        axes.extend(variants);
        p.check_configs(&configs)?;
        p.check_size(configs.len(), seeds.len(), &axes)?;
        relabel(&mut axes);
        let name = p.name(sweep)?;
        let out = p.out(sweep)?;
        let slurm_offset = Parser::key_offset(sweep, "slurm");
        let s = Self {
            file: file.to_path_buf(),
            name,
            out,
            configs,
            seeds,
            fixed,
            axes,
            slurm,
            suite,
            source: source.clone(),
        };
        s.check_names()?;
        check_options(&s.slurm)
            .map_err(|m| s.error_at(slurm_offset, format!("[sweep.slurm]: {m}"), None))?;
        Ok(s)
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
    fn an_empty_out_is_refused_in_the_file_and_by_install() {
        let e = parse("[sweep]\nbase = \"x.toml\"\nout = \"\"\n\"optimizer.lr\" = [0.1]\n")
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config { line: 3, column: 7, message, .. } if message.starts_with("`out` is empty")),
            "{e}"
        );
        let s = parse("[sweep]\nbase = \"x.toml\"\n\"optimizer.lr\" = [0.1]\n").unwrap();
        let e = s
            .manifest(&[])
            .install(Path::new(""), &s.source)
            .unwrap_err();
        assert!(e.to_string().contains("--out: an empty path"), "{e}");
        assert_eq!(e.exit_code(), 2);
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
            ("[sweep\n", 1, 7, "unclosed table"),
            (
                "[sweep]\nbase = \"x.toml\"\n\"model.b\" = [\"x y\", \"x_y\"]\n",
                3,
                14,
                "share the directory",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.suite]\nnaive = \"y\"\n",
                4,
                9,
                "`y` is not one of the sweep's configs name a config by its file stem: x",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.suite]\nrecipes = [\"x\", \"z\"]\n",
                4,
                11,
                "[sweep.suite] recipes: `z` is not one",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\n[sweep.suite]\nbaseline = \"x\"\n",
                3,
                1,
                "unknown field `baseline`",
            ),
            (
                "[sweep]\nbase = \"x.toml\"\nsuite = 3\n",
                3,
                9,
                "`suite` must be a table",
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
