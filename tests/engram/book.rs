//! The book in `book/`: its registry-generated reference is up to date, and every
//! `{{#include}}`, anchor and relative link resolves.
//!
//! mdbook 0.5 exits 0 on a missing include and checks no links, so these tests are what fails
//! the build on a broken one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn book_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src")
}

/// Every `.md` file under `book/src`, sorted.
fn chapters() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(&book_src(), &mut v);
    v.sort();
    v
}

#[test]
fn reference_md_matches_registry() {
    let path = book_src().join("reference.md");
    let want = engram::report::reference_markdown(&engram::registry());
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "{} is out of date with the strategy registry (first difference at line {}).\n\
             Regenerate it with:\n    UPDATE_GOLDEN=1 cargo test --release --test engram book::\n\
             and commit the result.",
            path.display(),
            first + 1
        );
    }
}

/// The text outside fenced code blocks and inline code spans (links inside code are text).
fn prose(md: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in md.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Link targets `](target)` in `text` (inline links and images), without a title.
fn link_targets(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            v.push(target.trim_matches(['<', '>']).to_string());
            rest = &rest[end..];
        }
    }
    v
}

/// mdbook's heading ids: lower case, alphanumerics, `-` and `_` kept, spaces become `-`.
fn heading_ids(md: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut fenced = false;
    for line in md.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
        }
        if fenced || !t.starts_with('#') {
            continue;
        }
        let title = t.trim_start_matches('#').trim();
        let id: String = title
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '-' || c == '_' {
                    Some(c.to_lowercase().next().unwrap_or(c))
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        ids.insert(id);
    }
    ids
}

/// `{{#include path}}`, `{{#include path:anchor}}`, `{{#include path:from:to}}` and
/// `{{#rustdoc_include ...}}` directives: (path, selector).
fn includes(md: &str) -> Vec<(String, Option<String>)> {
    let mut v = Vec::new();
    let mut rest = md;
    while let Some(i) = rest.find("{{#") {
        rest = &rest[i + 3..];
        let Some(end) = rest.find("}}") else { break };
        let body = rest[..end].trim();
        rest = &rest[end..];
        let Some(arg) = body
            .strip_prefix("include ")
            .or_else(|| body.strip_prefix("rustdoc_include "))
        else {
            continue;
        };
        let arg = arg.trim();
        match arg.split_once(':') {
            Some((p, sel)) => v.push((p.to_string(), Some(sel.to_string()))),
            None => v.push((arg.to_string(), None)),
        }
    }
    v
}

#[test]
fn every_include_anchor_and_link_resolves() {
    let mut broken = Vec::new();
    let files = chapters();
    assert!(files.len() > 5, "book/src has too few chapters: {files:?}");
    for file in &files {
        let md = std::fs::read_to_string(file).unwrap();
        let dir = file.parent().unwrap();
        let name = file.strip_prefix(book_src()).unwrap().display().to_string();

        for (path, sel) in includes(&md) {
            let target = dir.join(&path);
            let Ok(text) = std::fs::read_to_string(&target) else {
                broken.push(format!("{name}: include `{path}` does not exist"));
                continue;
            };
            match sel.as_deref() {
                None => {}
                // A line range silently shows other lines once the file above it changes
                // (the suite chapter showed three of its five streams that way).
                Some(sel) if sel.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
                    broken.push(format!(
                        "{name}: include `{path}:{sel}` by line numbers: mark the lines with \
                         `ANCHOR: name` / `ANCHOR_END: name` and include `{path}:name`"
                    ));
                }
                Some(anchor) => {
                    let start = text.contains(&format!("ANCHOR: {anchor}\n"));
                    let end = text.contains(&format!("ANCHOR_END: {anchor}\n"));
                    if !(start && end) {
                        broken.push(format!(
                            "{name}: include `{path}`: anchor `{anchor}` needs `ANCHOR: {anchor}` and `ANCHOR_END: {anchor}` lines"
                        ));
                    }
                }
            }
        }

        for target in link_targets(&prose(&md)) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                broken.push(format!(
                    "{name}: link `{target}`: {} does not exist",
                    resolved.display()
                ));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.extension().is_some_and(|x| x == "md")
            {
                let ids = heading_ids(&std::fs::read_to_string(&resolved).unwrap());
                if !ids.contains(fragment) {
                    broken.push(format!(
                        "{name}: link `{target}`: no heading with id `{fragment}` (ids: {ids:?})"
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken book references:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn summary_lists_every_chapter() {
    let summary = std::fs::read_to_string(book_src().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = link_targets(&summary).into_iter().collect();
    let missing: Vec<String> = chapters()
        .iter()
        .map(|p| p.strip_prefix(book_src()).unwrap().display().to_string())
        // `figures/` holds generated tables that chapters include, not chapters.
        .filter(|p| p != "SUMMARY.md" && !p.starts_with("figures/") && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "chapters missing from SUMMARY.md: {missing:?}"
    );
}

#[test]
fn the_link_checker_finds_broken_references() {
    // The checker itself: a made-up page with each kind of breakage.
    let md = "see [a](missing.md) and `[code](not-checked.md)`\n\
              ```\n[fenced](not-checked.md)\n```\n\
              {{#include ../../examples/custom_strategy.rs:no_such_anchor}}\n";
    assert_eq!(link_targets(&prose(md)), vec!["missing.md".to_string()]);
    assert_eq!(
        includes(md),
        vec![(
            "../../examples/custom_strategy.rs".to_string(),
            Some("no_such_anchor".to_string())
        )]
    );
    let ids = heading_ids("# Writing a strategy in-process\n## `ewc`: the math\n");
    assert!(ids.contains("writing-a-strategy-in-process"), "{ids:?}");
    assert!(ids.contains("ewc-the-math"), "{ids:?}");
}

/// book/src/figures/text-minilm.md is `bench/text-minilm.sh`'s output (a golden file: MiniLM and
/// the corpora are not fetched here): the machine, the command, and engram's summary of the run
/// of examples/text/minilm-stream.toml with every part the text chapter explains.
#[test]
fn the_text_chapter_figure_is_generated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = crate::util::generated_figure("text-minilm");
    // The stored samples line holds the example's own replay capacity (128 ids × 4 B each).
    let example: toml::Value = toml::from_str(
        &std::fs::read_to_string(root.join("examples/text/minilm-stream.toml")).unwrap(),
    )
    .unwrap();
    let capacity = example["forgetting"][0]["capacity"].as_integer().unwrap();
    let stored = format!("stored samples: replay {capacity} × 512 B of token ids (uint32)");
    for part in [
        "\nMachine: ",
        "`engram run examples/text/minilm-stream.toml`",
        "accuracy matrix",
        "\n   initial ",
        "\n  after T3 ",
        "\nACC ",
        "\ntask-IL (logits restricted to each task's classes): ACC ",
        &stored,
    ] {
        assert!(fig.contains(part), "{part:?} missing from:\n{fig}");
    }
    assert!(
        !fig.contains(" -> "),
        "the run's directory is left out: {fig}"
    );
    let script = std::fs::read_to_string(root.join("bench/text-minilm.sh")).unwrap();
    assert!(script.contains("> book/src/figures/text-minilm.md.tmp"));
    assert!(script.contains("CONFIG=examples/text/minilm-stream.toml"));
}

/// book/src/figures/lora-text.md is `bench/lora-text.sh`'s output (a golden file: MiniLM and the
/// corpora are not fetched here): the machine, the slice and seeds, `engram compare`'s table
/// with the nine rows in the script's order (named by row, not by the machine's paths), and
/// the per-task experts' routing line for each seed.
#[test]
fn the_lora_text_figure_is_generated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = crate::util::generated_figure("lora-text");
    assert!(
        fig.contains("\nMachine: ") && fig.contains(" seeds "),
        "{fig}"
    );
    let rows: Vec<&str> = fig
        .lines()
        .skip_while(|l| !l.starts_with("run "))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        rows,
        [
            "full-naive",
            "full-replay",
            "lora-naive",
            "lora-replay",
            "o-lora",
            "per-task-lora",
            "per-task-lora-seen",
            "moe-lora",
            "joint"
        ],
        "{fig}"
    );
    assert!(fig.contains("trainable k"), "{fig}");
    assert!(fig.contains("\nper-task-lora seed 0: "), "{fig}");
    assert!(!fig.contains("/target/"), "no machine paths: {fig}");
    let script = std::fs::read_to_string(root.join("bench/lora-text.sh")).unwrap();
    assert!(script.contains("> book/src/figures/lora-text.md.tmp"));
    assert!(script.contains("BASE=examples/text/minilm-stream.toml"));
}

/// book/src/figures/peft-twin.md is `bench/peft-twin.sh`'s table of peft-twin.json (golden
/// files: MiniLM, the corpora and PyTorch are not here): every cell is recomputed from the
/// JSON's accuracy matrices, throughputs and peaks, each path's rows followed by their mean.
#[test]
fn the_peft_twin_figure_is_generated_from_its_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = crate::util::generated_figure("peft-twin");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("book/src/figures/peft-twin.json")).unwrap(),
    )
    .unwrap();
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let matrix = |v: &serde_json::Value| -> Vec<Vec<f64>> {
        serde_json::from_value(v["accuracy_matrix"].clone()).unwrap()
    };
    // One row a seed and path: the cells the table shows.
    let cells = |r: &serde_json::Value| -> Vec<f64> {
        let (e, p) = (&r["engram"], &r["peft"]);
        let (me, mp) = (matrix(e), matrix(p));
        // ACC is the last row's mean on both sides.
        for (m, side) in [(&me, e), (&mp, p)] {
            let last = m.last().unwrap();
            let acc = last.iter().sum::<f64>() / last.len() as f64;
            assert!((acc - f(&side["acc"])).abs() < 1e-12, "{side}");
        }
        let worst = me
            .iter()
            .flatten()
            .zip(mp.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let (te, tp) = (f(&e["train_samples_per_s"]), f(&p["train_samples_per_s"]));
        let mib = |v: &serde_json::Value| f(&v["peak_rss_bytes"]) / (1u64 << 20) as f64;
        vec![
            f(&e["acc"]),
            f(&p["acc"]),
            (f(&e["acc"]) - f(&p["acc"])).abs(),
            worst,
            te,
            tp,
            te / tp,
            mib(e),
            mib(p),
        ]
    };
    let rows = json["rows"].as_array().unwrap();
    let mut paths: Vec<&str> = Vec::new();
    for r in rows {
        let p = r["path"].as_str().unwrap();
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    let mut want: Vec<(String, String, Vec<f64>)> = Vec::new();
    for path in &paths {
        let mine: Vec<&serde_json::Value> = rows.iter().filter(|r| r["path"] == *path).collect();
        let table: Vec<Vec<f64>> = mine.iter().map(|r| cells(r)).collect();
        for (r, c) in mine.iter().zip(&table) {
            want.push((r["seed"].to_string(), path.to_string(), c.clone()));
        }
        let n = table.len() as f64;
        let mean = (0..9)
            .map(|i| table.iter().map(|c| c[i]).sum::<f64>() / n)
            .collect();
        want.push(("mean".into(), path.to_string(), mean));
    }
    assert!(!rows.is_empty(), "{json}");
    let shown = crate::util::table_rows(&fig, "| seed ");
    assert_eq!(shown.len(), want.len(), "{fig}");
    let decimals = [4, 4, 4, 4, 2, 2, 2, 0, 0];
    for (row, (seed, path, w)) in shown.iter().zip(&want) {
        let mut cells = vec![seed.clone(), path.clone()];
        cells.extend(w.iter().zip(decimals).map(|(v, d)| format!("{v:.d$}")));
        let got: Vec<String> = row
            .iter()
            .map(|c| c.trim_end_matches('×').replace(',', ""))
            .collect();
        assert_eq!(got, cells, "{fig}");
    }
    let script = std::fs::read_to_string(root.join("bench/peft-twin.sh")).unwrap();
    assert!(script.contains("book/src/figures/peft-twin.md.tmp"));
    assert!(script.contains("BASE=examples/text/minilm-stream.toml"));
}
