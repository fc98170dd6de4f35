//! `engram tune`: a recipe's knobs chosen on the user's own stream by the protocol of A-GEM
//! (Chaudhry et al., "Efficient Lifelong Learning with A-GEM", ICLR 2019, §5): every point of
//! a grid is run on the **first K tasks** only (default 3), trained on each task's training
//! samples minus a held-out **validation share** and evaluated on that share
//! (`[data] evaluate_on = "validation"`), over a few seeds; the point with the best mean ACC
//! wins (ties go to the first in grid order), and the config with its values is written as
//! `tuned.toml`, to be run on the whole stream and its test split. The later tasks and the test
//! split take no part in the choice.
//!
//! The grid's runs are an ordinary sweep ([`super`]): `DIR/tune.toml` is its sweep file
//! (readable, and runnable by `engram sweep run` itself), `DIR/grid/` its directory (resumable:
//! a rerun skips finished runs). This module holds the pure parts: the `--grid` arguments, the
//! overrides that keep the first K tasks, the sweep file's text, the choice and the tuned
//! config's text; `src/cli/tune.rs` runs them.

use super::aggregate::Cell;
use engram_core::config::{LoadedConfig, Scenario, apply_overrides};
use engram_core::{Error, Result};
use std::path::{Path, PathBuf};

/// The tasks tuned on by default: A-GEM's protocol (Chaudhry et al. 2019, §5) cross-validates
/// on the first 3 tasks of each stream.
pub const DEFAULT_TASKS: usize = 3;

/// The config keys `engram tune` sets itself (a `--grid` or `--set` of one is refused).
pub const OWNED: [&str; 5] = [
    "data.tasks",
    "data.classes_per_task",
    "data.validation",
    "data.evaluate_on",
    "run.seed",
];

/// One `--grid KEY=V1,V2,…`: a config key (a `--set` path) and its values as TOML text.
#[derive(Clone, Debug, PartialEq)]
pub struct GridAxis {
    /// The `--set` path, e.g. `forgetting.1.distill`.
    pub key: String,
    /// The values, each TOML text as written (`0.5`, `[400, 400]`, `"herding"`) or a bare
    /// word taken as a string (`herding`).
    pub values: Vec<String>,
}

/// Splits `s` at the commas outside brackets, braces and quotes: `1,[2,3],"a,b"` →
/// `1`, `[2,3]`, `"a,b"` (each trimmed).
fn split_top_level(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for c in s.chars() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

/// Parses one `--grid KEY=V1,V2[,…]`.
///
/// # Errors
/// [`Error::Usage`] for a missing `=`, an empty key or value, a value given twice, or a key
/// that `engram tune` sets itself ([`OWNED`]).
pub fn parse_grid(arg: &str) -> Result<GridAxis> {
    let (key, values) = arg.split_once('=').ok_or_else(|| {
        Error::Usage(format!(
            "--grid `{arg}` has no `=`; write --grid forgetting.1.distill=0.25,0.5,1.0"
        ))
    })?;
    let key = key.trim().to_string();
    check_key(&key, "--grid")?;
    let values = split_top_level(values);
    if values.iter().any(String::is_empty) {
        return Err(Error::Usage(format!(
            "--grid `{arg}` has an empty value; write --grid KEY=V1,V2"
        )));
    }
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err(Error::Usage(format!("--grid `{arg}` lists `{v}` twice")));
        }
    }
    Ok(GridAxis { key, values })
}

/// Refuses an empty key and the keys tune sets itself.
fn check_key(key: &str, flag: &str) -> Result<()> {
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(Error::Usage(format!(
            "{flag}: `{key}` is not a config key; write section.key, e.g. optimizer.lr"
        )));
    }
    if OWNED.contains(&key) {
        return Err(Error::Usage(format!(
            "{flag} `{key}`: engram tune sets it itself (the first --tasks tasks, --validation, \
             evaluate_on = \"validation\", --seeds)"
        )));
    }
    Ok(())
}

/// A value as TOML text: itself when it parses as TOML, else (a bare word such as `herding`)
/// quoted as a string.
pub fn toml_value(v: &str) -> String {
    match v.parse::<toml_edit::Value>() {
        Ok(value) => value.to_string().trim().to_string(),
        Err(_) => toml_edit::Value::from(v).to_string().trim().to_string(),
    }
}

/// The overrides that keep the first `k` tasks of a stream whose tasks hold `classes` (each
/// task's classes, from the prepared full stream) in `scenario`: `data.tasks = k` and, for the
/// split scenarios of one dataset, `data.classes_per_task` set to the first `k` tasks' counts
/// (one number when they are equal), so that the first `k` tasks are exactly the full stream's
/// first `k`. With `entries` (a `[[data.stream]]` config, one task an entry) `data.tasks = k`
/// alone keeps the first `k` entries.
///
/// # Errors
/// [`Error::Usage`] when `k` is 0 or more than the stream's tasks.
pub fn first_tasks_sets(
    scenario: Scenario,
    classes: &[Vec<usize>],
    k: usize,
    entries: bool,
) -> Result<Vec<String>> {
    if k == 0 || k > classes.len() {
        return Err(Error::Usage(format!(
            "--tasks {k}: the stream has {} tasks; tune on 1 to {} of them (A-GEM's protocol: the first 3)",
            classes.len(),
            classes.len()
        )));
    }
    let mut sets = vec![format!("data.tasks={k}")];
    if scenario != Scenario::DomainIncremental && !entries {
        let counts: Vec<usize> = classes[..k].iter().map(Vec::len).collect();
        if counts.iter().all(|&c| c == counts[0]) {
            sets.push(format!("data.classes_per_task={}", counts[0]));
        } else {
            let list: Vec<String> = counts.iter().map(usize::to_string).collect();
            sets.push(format!("data.classes_per_task=[{}]", list.join(", ")));
        }
    }
    Ok(sets)
}

/// The text of the sweep file that runs the grid: `base` (absolute), the seeds, the fixed
/// overrides `fixed` (`KEY=VALUE`: the first tasks, the validation split, the user's `--set`)
/// and one axis per `--grid`, in order.
pub fn sweep_text(base: &Path, seeds: &[u64], fixed: &[String], axes: &[GridAxis]) -> String {
    let q = |s: &str| toml_edit::Value::from(s).to_string().trim().to_string();
    let mut t = String::from(
        "# Written by `engram tune`: the grid on the first tasks, evaluated on their validation split.\n[sweep]\nname = \"tune\"\n",
    );
    t.push_str(&format!("base = {}\n", q(&base.to_string_lossy())));
    let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
    t.push_str(&format!("seeds = [{}]\n", seeds.join(", ")));
    let fixed: Vec<String> = fixed
        .iter()
        .filter_map(|s| s.split_once('='))
        .map(|(k, v)| format!("{} = {}", q(k.trim()), toml_value(v.trim())))
        .collect();
    t.push_str(&format!("set = {{ {} }}\n", fixed.join(", ")));
    for a in axes {
        let values: Vec<String> = a.values.iter().map(|v| toml_value(v)).collect();
        t.push_str(&format!("{} = [{}]\n", q(&a.key), values.join(", ")));
    }
    t
}

/// The grid's points in the sweep's grid order (the last axis varying fastest), each as its
/// `KEY=VALUE` overrides.
pub fn points(axes: &[GridAxis]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    for a in axes {
        out = out
            .iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut p: Vec<String> = p.clone();
                    p.push(format!("{}={}", a.key, toml_value(v)));
                    p
                })
            })
            .collect();
    }
    out
}

/// One point's result: its overrides, its cell, ACC over its finished seeds.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PointResult {
    /// The point's `KEY=VALUE` overrides, in `--grid` order.
    pub sets: Vec<String>,
    /// Its cell (the runs' directory under `DIR/grid/`).
    pub cell: String,
    /// Mean ACC over its finished seeds on the validation split (fraction), if any finished.
    pub acc_mean: Option<f64>,
    /// Sample standard deviation of that ACC (`None` for fewer than two seeds).
    pub acc_std: Option<f64>,
    /// Seeds that finished.
    pub seeds_done: usize,
    /// Seeds that did not (failed, diverged, interrupted).
    pub seeds_unfinished: usize,
}

/// Pairs the grid's `points` with the sweep's `cells` (both in grid order).
///
/// # Errors
/// [`Error::Other`] when their counts differ (the sweep's directory holds another grid).
pub fn results(points: &[Vec<String>], cells: &[Cell]) -> Result<Vec<PointResult>> {
    if points.len() != cells.len() {
        return Err(Error::Other(format!(
            "the tune's sweep holds {} cells for a grid of {} points",
            cells.len(),
            points.len()
        )));
    }
    Ok(points
        .iter()
        .zip(cells)
        .map(|(p, c)| PointResult {
            sets: p.clone(),
            cell: c.cell.clone(),
            acc_mean: c.row.acc.as_ref().map(|s| s.mean),
            acc_std: c.row.acc.as_ref().and_then(|s| s.std),
            seeds_done: c.done.len(),
            seeds_unfinished: c.unfinished.len(),
        })
        .collect())
}

/// The chosen point: the best mean ACC among the points whose every seed finished (a point
/// with a failed seed is not robust enough to ship); ties go to the first in grid order.
/// `None` when no point finished all its seeds.
pub fn choose(results: &[PointResult]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, r) in results.iter().enumerate() {
        if r.seeds_unfinished > 0 || r.seeds_done == 0 {
            continue;
        }
        let Some(acc) = r.acc_mean else { continue };
        if best.is_none_or(|(_, b)| acc > b) {
            best = Some((i, acc));
        }
    }
    best.map(|(i, _)| i)
}

/// The table of the results: one row per point (`*` marks the chosen), its values, ACC mean ±
/// sd on the validation split and the seeds that finished.
pub fn table(axes: &[GridAxis], results: &[PointResult], chosen: Option<usize>) -> String {
    let mut width: Vec<usize> = axes.iter().map(|a| a.key.len()).collect();
    let value = |set: &str| {
        set.split_once('=')
            .map_or(String::new(), |(_, v)| v.to_string())
    };
    for r in results {
        for (w, s) in width.iter_mut().zip(&r.sets) {
            *w = (*w).max(value(s).len());
        }
    }
    let mut t = String::from("  ");
    for (a, w) in axes.iter().zip(&width) {
        t.push_str(&format!("{:<w$}  ", a.key));
    }
    t.push_str("ACC (validation)  seeds\n");
    for (i, r) in results.iter().enumerate() {
        t.push_str(if chosen == Some(i) { "* " } else { "  " });
        for (s, w) in r.sets.iter().zip(&width) {
            t.push_str(&format!("{:<w$}  ", value(s)));
        }
        let acc = match (r.acc_mean, r.acc_std) {
            (Some(m), Some(s)) => format!("{m:.4} ± {s:.4}"),
            (Some(m), None) => format!("{m:.4}"),
            _ => "-".into(),
        };
        let seeds = if r.seeds_unfinished > 0 {
            format!("{} ({} unfinished)", r.seeds_done, r.seeds_unfinished)
        } else {
            r.seeds_done.to_string()
        };
        t.push_str(&format!("{acc:<16}  {seeds}\n"));
    }
    t
}

/// The tuned config's text: `cfg`'s file with the user's `sets` and the chosen point's
/// overrides applied (formatting and comments kept), a header saying how it was chosen, and
/// its relative paths (`[data] path`, `[model] init`, `plugins` entries that exist) made
/// absolute, as the file moves to `out_dir`.
///
/// # Errors
/// As [`apply_overrides`]; [`Error::ConfigFile`] when the config cannot be read again.
pub fn tuned_text(cfg: &LoadedConfig, sets: &[String], header: &str) -> Result<String> {
    let original = engram_core::fsutil::read_text(&cfg.file).map_err(|e| Error::ConfigFile {
        file: cfg.file.clone(),
        message: format!("cannot read the config again: {e}"),
        hint: None,
    })?;
    let mut doc: toml_edit::DocumentMut = apply_overrides(&cfg.file, &original, sets)?
        .parse()
        .map_err(|e: toml_edit::TomlError| Error::ConfigFile {
            file: cfg.file.clone(),
            message: e.to_string(),
            hint: None,
        })?;
    let base = std::path::absolute(&cfg.base_dir).unwrap_or_else(|_| cfg.base_dir.clone());
    let absolute = |p: &str, must_exist: bool| -> Option<String> {
        let path = PathBuf::from(p);
        let joined = base.join(&path);
        (path.is_relative() && (!must_exist || joined.exists()))
            .then(|| joined.to_string_lossy().into_owned())
    };
    for (section, key) in [("data", "path"), ("model", "init")] {
        if let Some(item) = doc.get_mut(section).and_then(|s| s.get_mut(key))
            && let Some(abs) = item.as_str().and_then(|p| absolute(p, false))
        {
            *item = toml_edit::value(abs);
        }
    }
    if let Some(list) = doc.get_mut("plugins").and_then(|p| p.as_array_mut()) {
        for v in list.iter_mut() {
            if let Some(abs) = v.as_str().and_then(|p| absolute(p, true)) {
                *v = abs.into();
            }
        }
    }
    Ok(format!("{header}{doc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_values_split_at_top_level_commas_only() {
        let a = parse_grid("model.hidden=[400,400],[200, 200]").unwrap();
        assert_eq!(a.key, "model.hidden");
        assert_eq!(a.values, vec!["[400,400]", "[200, 200]"]);
        let b = parse_grid("forgetting.1.selection=herding,\"a,b\"").unwrap();
        assert_eq!(b.values, vec!["herding", "\"a,b\""]);
        assert_eq!(toml_value("herding"), "\"herding\"");
        assert_eq!(toml_value("0.5"), "0.5");
        for bad in ["nokey", "=1,2", "data.tasks=1,2", "x.y=1,,2", "x.y=1,1"] {
            assert!(parse_grid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_first_tasks_keep_the_streams_own_classes() {
        let even = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7], vec![8, 9]];
        assert_eq!(
            first_tasks_sets(Scenario::ClassIncremental, &even, 3, false).unwrap(),
            vec!["data.tasks=3", "data.classes_per_task=2"]
        );
        let uneven = vec![vec![0, 1, 2, 3, 4, 5], vec![6], vec![7], vec![8], vec![9]];
        assert_eq!(
            first_tasks_sets(Scenario::TaskIncremental, &uneven, 2, false).unwrap(),
            vec!["data.tasks=2", "data.classes_per_task=[6, 1]"]
        );
        assert_eq!(
            first_tasks_sets(Scenario::DomainIncremental, &even, 3, false).unwrap(),
            vec!["data.tasks=3"]
        );
        assert!(first_tasks_sets(Scenario::ClassIncremental, &even, 6, false).is_err());
        assert!(first_tasks_sets(Scenario::ClassIncremental, &even, 0, false).is_err());
        // A [[data.stream]] config: each entry is a task, and data.tasks keeps the first ones.
        assert_eq!(
            first_tasks_sets(Scenario::ClassIncremental, &uneven, 3, true).unwrap(),
            vec!["data.tasks=3"]
        );
    }

    #[test]
    fn points_follow_the_grid_order_and_ties_go_to_the_first() {
        let axes = vec![
            parse_grid("a.x=1,2").unwrap(),
            parse_grid("a.y=p,q").unwrap(),
        ];
        let p = points(&axes);
        assert_eq!(p[1], vec!["a.x=1", "a.y=\"q\""]);
        assert_eq!(p[2], vec!["a.x=2", "a.y=\"p\""]);
        let r = |acc: f64, unfinished| PointResult {
            sets: vec![],
            cell: String::new(),
            acc_mean: Some(acc),
            acc_std: None,
            seeds_done: 3 - unfinished,
            seeds_unfinished: unfinished,
        };
        // 0.9 has a failed seed; 0.8 twice: the first wins.
        assert_eq!(
            choose(&[r(0.7, 0), r(0.8, 0), r(0.9, 1), r(0.8, 0)]),
            Some(1)
        );
        assert_eq!(choose(&[r(0.9, 1)]), None);
        let text = sweep_text(
            Path::new("/c/x.toml"),
            &[0, 1],
            &["data.tasks=3".into(), "data.evaluate_on=validation".into()],
            &axes,
        );
        assert!(
            text.contains("set = { \"data.tasks\" = 3, \"data.evaluate_on\" = \"validation\" }"),
            "{text}"
        );
        assert!(text.contains("\"a.y\" = [\"p\", \"q\"]"), "{text}");
    }

    #[test]
    fn the_tuned_config_keeps_comments_sets_the_choice_and_absolute_paths() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cfg")).unwrap();
        std::fs::write(d.path().join("cfg/p.so"), b"").unwrap();
        let file = d.path().join("cfg/c.toml");
        let text = "# my recipe\nplugins = [\"p.so\", \"absent\"]\n[data]\ndataset = \"x\"\npath = \"d\"\n\
                    [model]\ntype = \"mlp\"\n[optimizer]\ntype = \"sgd\"\nlr = 0.05 # tuned below\n";
        std::fs::write(&file, text).unwrap();
        let cfg = LoadedConfig::from_source(&file, text.into()).unwrap();
        let out = tuned_text(&cfg, &["optimizer.lr=0.01".into()], "# header\n").unwrap();
        let v: toml::Table = toml::from_str(&out).unwrap();
        let base = std::path::absolute(d.path().join("cfg")).unwrap();
        assert!(out.starts_with("# header\n# my recipe\n"), "{out}");
        assert_eq!(v["optimizer"]["lr"].as_float(), Some(0.01));
        assert_eq!(v["data"]["path"].as_str(), base.join("d").to_str());
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins[0].as_str(), base.join("p.so").to_str());
        // A name that is not a file beside the config is a plugin name: kept as written.
        assert_eq!(plugins[1].as_str(), Some("absent"));
    }
}
