//! `engram bench suite`: the benchmark suite's tables, from a sweep's `sweep.json`.
//!
//! The suite is an ordinary sweep (`bench/suite.toml`: configs × `[sweep.variants.stream]` ×
//! seeds); this module turns its `sweep.json` into one Markdown table per stream (mean ± sd
//! over seeds of ACC, BWT, forgetting, retention, the task-IL view's ACC, time and peak
//! memory, one row per config) and a table of the recipe goals on every stream.
//!
//! The goals compare configs in the roles the sweep file's `[sweep.suite]` gives them, by file
//! stem ([`Roles`]): for each shipped recipe and stream,
//!
//! - with `plain`: the recipe's ACC against plain replay's at the same memory;
//! - with `joint`: the recipe's ACC within [`JOINT_GAP`] of joint training's and its retention
//!   at least [`RETENTION_GOAL`] (the seed write-up's figure);
//! - with `naive`: plasticity: right after training on task `t`, the recipe's accuracy on `t`
//!   against naive fine-tuning's, in the task-IL view (logits restricted to `t`'s classes; the
//!   accuracy matrix itself where a stream has no class-IL head to restrict, task- and
//!   domain-incremental): the worst gap over tasks and seeds, naive's minus the recipe's
//!   (positive: below naive), at most [`crate::report::PLASTICITY_GAP`].
//!
//! A view the goal does not judge is shown beside it: the runs whose class-IL accuracy on a
//! task right after training on it was no better than chance (the trainer's `at-chance`
//! warning). A run whose report has a `retention_note` (such a task was an old one, so its
//! retention divides by a near-zero diagonal) marks its cell's retention `†`.
//!
//! The same function renders the book's tables from the committed `sweep.json` of the last full
//! run, and a test holds the committed Markdown to it.

use crate::report::Stat;
use serde::Deserialize;
use std::fmt::Write as _;

/// The variant axis that names the streams.
pub const STREAM: &str = "stream";

/// The retention a recipe judged against joint training must keep: the seed write-up's "≥ 92 %
/// retention" (retention = mean over old tasks of final / right-after accuracy).
pub const RETENTION_GOAL: f64 = 0.92;

/// How far below joint training's ACC a recipe judged against it may be.
pub const JOINT_GAP: f64 = 0.05;

/// `[sweep.suite]`: which of a suite's configs, by file stem (as the tables name them), play
/// the roles the goals compare. Every key is optional; a goal whose role is not named is not
/// judged or shown, and without `recipes` there is no goals table.
///
/// ```toml
/// [sweep.suite]
/// naive = "split-fmnist"              # the plasticity reference
/// plain = "replay-plain"              # plain replay at the recipes' memory
/// joint = "joint-fmnist"              # the upper bound
/// recipes = ["split-fmnist-replay"]   # what the goals judge, one goals row each per stream
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Roles {
    /// Naive fine-tuning: each recipe's new tasks are held to its plasticity.
    pub naive: Option<String>,
    /// Plain replay at the recipes' memory: each recipe's ACC must reach its.
    pub plain: Option<String>,
    /// Joint training: each recipe's ACC must be within [`JOINT_GAP`] of its, with retention
    /// at least [`RETENTION_GOAL`].
    pub joint: Option<String>,
    /// The shipped recipes the goals judge.
    pub recipes: Vec<String>,
}

impl Roles {
    /// Every stem named, with its key (`recipes` for each recipe), in key order.
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        let mut v: Vec<(&'static str, &str)> = [
            ("naive", &self.naive),
            ("plain", &self.plain),
            ("joint", &self.joint),
        ]
        .into_iter()
        .filter_map(|(k, s)| s.as_deref().map(|s| (k, s)))
        .collect();
        v.extend(self.recipes.iter().map(|r| ("recipes", r.as_str())));
        v
    }
}

/// The columns of a stream's table: `sweep.json` metric, header, decimals.
const COLUMNS: [(&str, &str, usize); 7] = [
    ("acc", "ACC", 4),
    ("bwt", "BWT", 4),
    ("forgetting", "forgetting", 4),
    ("retention", "retention", 4),
    ("task_il_acc", "task-IL ACC", 4),
    ("time_s", "time (s)", 1),
    ("peak_mib", "peak MiB", 1),
];

fn text<'a>(v: &'a serde_json::Value, k: &str) -> &'a str {
    v.get(k).and_then(serde_json::Value::as_str).unwrap_or("")
}

/// Each run's diagonal `[tasks]`: accuracy on task `t` right after training on it, in the
/// task-IL view where the run has one, else its accuracy matrix's.
fn diagonal(run: &serde_json::Value) -> Option<Vec<f64>> {
    let matrix = |k: &str| -> Option<engram_core::train::metrics::Matrix> {
        serde_json::from_value(run.get(k).filter(|m| !m.is_null())?.clone()).ok()
    };
    let accuracy = matrix("accuracy_matrix")?;
    crate::report::learned_of(
        &accuracy,
        matrix("task_il_accuracy_matrix").as_ref(),
        accuracy.len(),
    )
}

/// The cell of `config` on `stream`.
fn cell_of<'a>(
    sweep: &'a serde_json::Value,
    stream: &str,
    config: &str,
) -> Option<&'a serde_json::Value> {
    sweep["cells"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| text(&c["axes"], STREAM) == stream && text(&c["axes"], "config") == config)
}

/// The tasks run `run` warned about as no better than chance right after training on them
/// (`sweep.json`'s `at_chance`; none for a sweep written before it had that field).
fn at_chance(run: &serde_json::Value) -> Vec<usize> {
    run["at_chance"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_u64().map(|t| t as usize))
        .collect()
}

/// The finished runs of cell `cell`.
fn runs_of<'a>(sweep: &'a serde_json::Value, cell: &str) -> Vec<&'a serde_json::Value> {
    sweep["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| text(r, "cell") == cell && r["accuracy_matrix"].is_array())
        .collect()
}

/// Whether a run of `cell` has a report's `retention_note` (an old task at chance right after
/// training on it: its retention is then no share kept).
fn retention_flagged(sweep: &serde_json::Value, cell: &str) -> bool {
    runs_of(sweep, cell)
        .iter()
        .any(|r| r["retention_note"].is_string())
}

/// `config`'s runs on `stream` with a task at chance right after training on it, as
/// `task 3 (seeds 0, 2)`, one entry per task; `none` when no run has one; `–` when the runs
/// predate `sweep.json`'s `at_chance`.
pub fn at_chance_summary(sweep: &serde_json::Value, stream: &str, config: &str) -> String {
    let Some(cell) = cell_of(sweep, stream, config) else {
        return "–".into();
    };
    let runs = runs_of(sweep, text(cell, "cell"));
    if runs.is_empty() || runs.iter().any(|r| r.get("at_chance").is_none()) {
        return "–".into();
    }
    let mut by_task: std::collections::BTreeMap<usize, Vec<u64>> = Default::default();
    for r in runs {
        for t in at_chance(r) {
            by_task
                .entry(t)
                .or_default()
                .push(r["seed"].as_u64().unwrap_or(0));
        }
    }
    if by_task.is_empty() {
        return "none".into();
    }
    by_task
        .iter()
        .map(|(t, seeds)| {
            let s: Vec<String> = seeds.iter().map(u64::to_string).collect();
            let word = if seeds.len() == 1 { "seed" } else { "seeds" };
            format!("task {t} ({word} {})", s.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The streams of a suite's `sweep.json`, in grid order.
pub fn streams(sweep: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in sweep["cells"].as_array().into_iter().flatten() {
        let s = text(&c["axes"], STREAM).to_string();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// One recipe's goal figures on one stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// The stream.
    pub stream: String,
    /// The recipe (config stem).
    pub recipe: String,
    /// The recipe's ACC, mean over seeds.
    pub recipe_acc: Option<f64>,
    /// The recipe's retention, mean over seeds.
    pub retention: Option<f64>,
    /// Plain replay's ACC, mean over seeds (`None` also without a `plain` role).
    pub plain_acc: Option<f64>,
    /// Joint training's ACC, mean over seeds (`None` also without a `joint` role).
    pub joint_acc: Option<f64>,
    /// The worst gap naive − recipe over tasks and seeds (same seed, same task), with the task
    /// and seed; `None` when either has no finished run or there is no `naive` role.
    pub worst_gap: Option<(f64, usize, u64)>,
}

impl Goal {
    /// Every goal of a role `roles` names holds: the recipe's ACC at least plain replay's;
    /// within [`JOINT_GAP`] of joint training's, with retention at least [`RETENTION_GOAL`];
    /// every new task within [`crate::report::PLASTICITY_GAP`] of naive's. A goal without its
    /// figures (no finished run) does not hold.
    pub fn holds(&self, roles: &Roles) -> bool {
        let plain = roles.plain.is_none()
            || matches!((self.recipe_acc, self.plain_acc), (Some(r), Some(p)) if r >= p);
        let joint = roles.joint.is_none() || (self.near_joint() == Some(true) && self.retains());
        let naive = roles.naive.is_none()
            || self
                .worst_gap
                .is_some_and(|(g, _, _)| g <= crate::report::PLASTICITY_GAP);
        plain && joint && naive
    }

    /// Whether the recipe's ACC is within [`JOINT_GAP`] of joint training's; `None` without
    /// both figures.
    pub fn near_joint(&self) -> Option<bool> {
        Some(self.joint_acc? - self.recipe_acc? <= JOINT_GAP)
    }

    /// Whether the recipe's mean retention is at least [`RETENTION_GOAL`].
    pub fn retains(&self) -> bool {
        self.retention.is_some_and(|r| r >= RETENTION_GOAL)
    }
}

/// The worst gap `naive` − `config` over tasks and seeds on `stream` (same seed, same task) of
/// the accuracy right after training on a task ([`diagonal`]), with the task and seed; `None`
/// when either has no finished run.
pub fn worst_gap(
    sweep: &serde_json::Value,
    stream: &str,
    config: &str,
    naive: &str,
) -> Option<(f64, usize, u64)> {
    let runs: Vec<&serde_json::Value> = sweep["runs"].as_array().into_iter().flatten().collect();
    let cell_name = |config: &str| cell_of(sweep, stream, config).map(|c| text(c, "cell"));
    let (mine, naive) = (cell_name(config)?, cell_name(naive)?);
    let run = |cell: &str, seed: u64| {
        runs.iter()
            .find(|r| text(r, "cell") == cell && r["seed"].as_u64() == Some(seed))
            .copied()
    };
    let mut worst: Option<(f64, usize, u64)> = None;
    for r in runs.iter().filter(|r| text(r, "cell") == mine) {
        let Some(seed) = r["seed"].as_u64() else {
            continue;
        };
        let (Some(m), Some(b)) = (diagonal(r), run(naive, seed).and_then(diagonal)) else {
            continue;
        };
        for (t, (m, b)) in m.iter().zip(&b).enumerate() {
            let gap = b - m;
            if worst.is_none_or(|(w, _, _)| gap > w) {
                worst = Some((gap, t, seed));
            }
        }
    }
    worst
}

/// The goal figures of every recipe on every stream of a suite's `sweep.json`, stream by
/// stream.
pub fn goals(sweep: &serde_json::Value, roles: &Roles) -> Vec<Goal> {
    let mean = |stream: &str, config: Option<&str>, metric: &str| {
        cell_of(sweep, stream, config?)
            .and_then(|c| Stat::from_aggregate(&c["metrics"][metric]))
            .map(|s| s.mean)
    };
    let mut out = Vec::new();
    for stream in streams(sweep) {
        for recipe in &roles.recipes {
            out.push(Goal {
                recipe_acc: mean(&stream, Some(recipe), "acc"),
                retention: mean(&stream, Some(recipe), "retention"),
                plain_acc: mean(&stream, roles.plain.as_deref(), "acc"),
                joint_acc: mean(&stream, roles.joint.as_deref(), "acc"),
                worst_gap: roles
                    .naive
                    .as_deref()
                    .and_then(|n| worst_gap(sweep, &stream, recipe, n)),
                recipe: recipe.clone(),
                stream: stream.clone(),
            });
        }
    }
    out
}

/// One stream's table as Markdown: a `###` heading, then one row per config. Cells read
/// `mean ± sd` over seeds (`mean` alone for one seed, `–` where a metric is undefined); a cell
/// with unfinished runs says how many finished. With a `naive` role, the last column is the
/// config's [`worst_gap`] to naive, in bold with its task and seed where it exceeds
/// [`crate::report::PLASTICITY_GAP`]: a new task the strategies kept from being learned (`–`
/// for naive itself and for joint training, whose cell has no BWT).
pub fn stream_table(sweep: &serde_json::Value, stream: &str, roles: &Roles) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### {stream}\n");
    let mut head = String::from("| config | seeds |");
    let mut rule = String::from("|---|---:|");
    for (_, h, _) in COLUMNS {
        let _ = write!(head, " {h} |");
        rule.push_str("---:|");
    }
    if roles.naive.is_some() {
        head.push_str(" new task below naive (worst) |");
        rule.push_str("---:|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let mut flagged = false;
    for c in sweep["cells"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| text(&c["axes"], STREAM) == stream)
    {
        let done = c["runs"].as_array().map_or(0, Vec::len);
        let left = c["unfinished"].as_array().map_or(0, Vec::len);
        let seeds = if left > 0 {
            format!("{done} of {}", done + left)
        } else {
            done.to_string()
        };
        let mut line = format!("| {} | {seeds} |", text(&c["axes"], "config"));
        for (k, _, d) in COLUMNS {
            let mut v =
                Stat::from_aggregate(&c["metrics"][k]).map_or("–".into(), |st| st.format(d));
            if k == "retention" && v != "–" && retention_flagged(sweep, text(c, "cell")) {
                v.push_str(" †");
                flagged = true;
            }
            let _ = write!(line, " {v} |");
        }
        if let Some(naive) = roles.naive.as_deref() {
            let config = text(&c["axes"], "config");
            // Naive is the reference; a joint run (no BWT) has no "right after its task".
            let gap = match worst_gap(sweep, stream, config, naive) {
                _ if config == naive || c["metrics"]["bwt"].is_null() => "–".to_string(),
                Some((g, t, seed)) if g > crate::report::PLASTICITY_GAP => {
                    format!("**{g:.3}** (task {t}, seed {seed})")
                }
                Some((g, _, _)) => format!("{g:.3}"),
                None => "–".to_string(),
            };
            let _ = write!(line, " {gap} |");
        }
        let _ = writeln!(s, "{line}");
    }
    if flagged {
        let _ = writeln!(
            s,
            "\n† A seed had an old task no better than chance right after training on it (the \
             accuracy matrix's diagonal): retention divides by that diagonal and is no share \
             kept; read BWT and forgetting."
        );
    }
    s
}

/// The goals of every recipe on every stream as a Markdown table (with its `###` heading): a
/// column group for each role `roles` names; empty without recipes.
pub fn goals_table(sweep: &serde_json::Value, roles: &Roles) -> String {
    if roles.recipes.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(s, "### Goals on every stream\n");
    let mut head = String::from("| stream | recipe | ACC |");
    let mut rule = String::from("|---|---|---:|");
    if let Some(p) = &roles.plain {
        let _ = write!(head, " `{p}` ACC | ≥ plain |");
        rule.push_str("---:|---|");
    }
    if let Some(j) = &roles.joint {
        let _ = write!(
            head,
            " `{j}` ACC | within {JOINT_GAP} of joint | retention (≥ {RETENTION_GOAL}) |"
        );
        rule.push_str("---:|---|---:|");
    }
    if roles.naive.is_some() {
        head.push_str(" new task below naive (worst; task-IL where the stream has it) |");
        rule.push_str("---:|");
    }
    head.push_str(" holds | class-IL at chance right after (not judged) |");
    rule.push_str("---|---|");
    let _ = writeln!(s, "{head}\n{rule}");
    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.4}"));
    let yes = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "–",
    };
    for g in goals(sweep, roles) {
        let mut line = format!("| {} | `{}` | {} |", g.stream, g.recipe, f(g.recipe_acc));
        if roles.plain.is_some() {
            let ge = g.recipe_acc.zip(g.plain_acc).map(|(r, p)| r >= p);
            let _ = write!(line, " {} | {} |", f(g.plain_acc), yes(ge));
        }
        if roles.joint.is_some() {
            let _ = write!(
                line,
                " {} | {} | {} |",
                f(g.joint_acc),
                yes(g.near_joint()),
                f(g.retention)
            );
        }
        if roles.naive.is_some() {
            let gap = g.worst_gap.map_or("–".into(), |(v, t, seed)| {
                format!("{v:.3} (task {t}, seed {seed})")
            });
            let _ = write!(line, " {gap} |");
        }
        let _ = writeln!(
            s,
            "{line} {} | {} |",
            if g.holds(roles) { "yes" } else { "no" },
            at_chance_summary(sweep, &g.stream, &g.recipe)
        );
    }
    s
}

/// The suite's tables as Markdown: [`stream_table`] for every stream, then [`goals_table`].
pub fn markdown(sweep: &serde_json::Value, roles: &Roles) -> String {
    let mut s = String::new();
    for stream in streams(sweep) {
        s.push_str(&stream_table(sweep, &stream, roles));
        s.push('\n');
    }
    s.push_str(&goals_table(sweep, roles));
    s
}

/// The README's excerpt: the `split` stream's table (the first stream when there is none of
/// that name) and the goals table.
pub fn readme_excerpt(sweep: &serde_json::Value, roles: &Roles) -> String {
    let all = streams(sweep);
    let first = all
        .iter()
        .find(|s| *s == "split")
        .or(all.first())
        .cloned()
        .unwrap_or_default();
    format!(
        "{}\n{}",
        stream_table(sweep, &first, roles),
        goals_table(sweep, roles)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECIPE: &str = "split-fmnist-replay";
    const PLAIN_REPLAY: &str = "replay-plain";
    const NAIVE: &str = "split-fmnist";

    fn roles() -> Roles {
        Roles {
            naive: Some(NAIVE.into()),
            plain: Some(PLAIN_REPLAY.into()),
            joint: None,
            recipes: vec![RECIPE.into()],
        }
    }

    fn run(cell: &str, seed: u64, diag: [f64; 2]) -> serde_json::Value {
        serde_json::json!({
            "cell": cell, "seed": seed,
            "accuracy_matrix": [[diag[0]], [0.5, diag[1]]],
            "task_il_accuracy_matrix": null,
        })
    }

    #[test]
    fn goals_and_tables_by_hand() {
        let cell = |name: &str, config: &str, acc: f64| {
            serde_json::json!({
                "cell": name, "axes": {"config": config, "stream": "s"},
                "runs": [format!("{name}/seed-0"), format!("{name}/seed-1")], "unfinished": [],
                "metrics": {"acc": {"mean": acc, "std": 0.01}, "bwt": {"mean": -0.1, "std": null}, "retention": {"mean": 0.9, "std": null}, "time_s": {"mean": 2.0, "std": null}},
            })
        };
        // The recipe's seed 0 warned that task 0 was at chance right after training on it (an
        // old task: its cell's retention is flagged); naive's seed 1 warned about its last task
        // (not an old one: no flag).
        let mut a0 = run("a", 0, [0.90, 0.80]);
        a0["at_chance"] = serde_json::json!([0]);
        a0["retention_note"] = serde_json::json!("task(s) 0 scored no better than chance…");
        let mut c1 = run("c", 1, [0.96, 0.97]);
        c1["at_chance"] = serde_json::json!([1]);
        let mut c0 = run("c", 0, [0.99, 0.90]);
        c0["at_chance"] = serde_json::json!([]);
        let mut sweep = serde_json::json!({
            "cells": [cell("a", RECIPE, 0.8), cell("b", PLAIN_REPLAY, 0.75), cell("c", NAIVE, 0.2)],
            "runs": [a0, run("a", 1, [0.95, 0.97]), c0, c1],
        });
        // A sweep.json from before `at_chance`: unknown, not "none".
        assert_eq!(at_chance_summary(&sweep, "s", RECIPE), "–");
        sweep["runs"][1]["at_chance"] = serde_json::json!([]);
        let g = goals(&sweep, &roles());
        assert_eq!(g.len(), 1);
        assert_eq!((g[0].recipe_acc, g[0].plain_acc), (Some(0.8), Some(0.75)));
        // Gaps: seed 0: 0.09, 0.10; seed 1: 0.01, 0.00. The worst is task 1 of seed 0.
        let (gap, t, seed) = g[0].worst_gap.unwrap();
        assert!(
            (gap - 0.10).abs() < 1e-12 && t == 1 && seed == 0,
            "{:?}",
            g[0]
        );
        assert!(!g[0].holds(&roles()));
        let md = markdown(&sweep, &roles());
        assert!(md.contains("### s\n"), "{md}");
        assert!(
            md.contains(&format!(
                "| {RECIPE} | 2 | 0.8000 ± 0.0100 | -0.1000 | – | 0.9000 † | – | 2.0 | – | **0.100** (task 1, seed 0) |"
            )),
            "{md}"
        );
        // Plain replay has no finished run to compare; naive is the reference.
        assert!(
            md.contains(&format!(
                "| {PLAIN_REPLAY} | 2 | 0.7500 ± 0.0100 | -0.1000 | – | 0.9000 | – | 2.0 | – | – |"
            )),
            "{md}"
        );
        assert!(
            md.contains(&format!(
                "| {NAIVE} | 2 | 0.2000 ± 0.0100 | -0.1000 | – | 0.9000 | – | 2.0 | – | – |"
            )),
            "{md}"
        );
        assert!(
            md.contains(
                "| s | `split-fmnist-replay` | 0.8000 | 0.7500 | yes | 0.100 (task 1, seed 0) | no | task 0 (seed 0) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("\n† A seed had an old task no better than chance"),
            "{md}"
        );
        assert_eq!(at_chance_summary(&sweep, "s", NAIVE), "task 1 (seed 1)");
        // Plain replay has no finished run.
        assert_eq!(at_chance_summary(&sweep, "s", PLAIN_REPLAY), "–");
    }

    #[test]
    fn the_joint_goal_needs_retention_and_acc_near_joint() {
        let cell = |name: &str, acc: f64, retention: Option<f64>| {
            serde_json::json!({
                "cell": name, "axes": {"config": name, "stream": "text"},
                "runs": [format!("{name}/seed-0")], "unfinished": [],
                "metrics": {"acc": {"mean": acc, "std": null},
                            "retention": retention.map(|r| serde_json::json!({"mean": r, "std": null}))},
            })
        };
        // Recipe r1: 0.60 against joint 0.64 (within 0.05), retention 0.95: holds. Recipe r2:
        // retention 0.97 but 0.58 (0.06 below joint): does not. r3 has no runs: –.
        let sweep = serde_json::json!({
            "cells": [cell("joint", 0.64, None), cell("r1", 0.60, Some(0.95)), cell("r2", 0.58, Some(0.97))],
            "runs": [],
        });
        let roles = Roles {
            naive: None,
            plain: None,
            joint: Some("joint".into()),
            recipes: vec!["r1".into(), "r2".into(), "r3".into()],
        };
        let g = goals(&sweep, &roles);
        assert_eq!(g.len(), 3);
        assert_eq!(
            (g[0].near_joint(), g[0].retains(), g[0].holds(&roles)),
            (Some(true), true, true)
        );
        assert_eq!(
            (g[1].near_joint(), g[1].retains(), g[1].holds(&roles)),
            (Some(false), true, false)
        );
        assert_eq!((g[2].near_joint(), g[2].holds(&roles)), (None, false));
        let md = markdown(&sweep, &roles);
        // No naive role: no gap column in either table.
        assert!(!md.contains("below naive"), "{md}");
        assert!(md.contains("| config | seeds | ACC | BWT | forgetting | retention | task-IL ACC | time (s) | peak MiB |\n"), "{md}");
        assert!(
            md.contains("| stream | recipe | ACC | `joint` ACC | within 0.05 of joint | retention (≥ 0.92) | holds | class-IL at chance right after (not judged) |"),
            "{md}"
        );
        assert!(
            md.contains("| text | `r1` | 0.6000 | 0.6400 | yes | 0.9500 | yes | – |"),
            "{md}"
        );
        assert!(
            md.contains("| text | `r2` | 0.5800 | 0.6400 | no | 0.9700 | no | – |"),
            "{md}"
        );
        assert!(
            md.contains("| text | `r3` | – | 0.6400 | – | – | no | – |"),
            "{md}"
        );
        // Without recipes there are no goals.
        assert!(!markdown(&sweep, &Roles::default()).contains("Goals"));
    }
}
