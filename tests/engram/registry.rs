//! Extension kinds: every built-in component — strategy, model, dataset — is one file holding its
//! registration plus its line in a `BUILTINS` list, and no other code names it (a behaviour
//! asked of a component by its name is what a trait method is for).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dirs` with its code: the text before the file's first
/// `#[cfg(test)]`, comment lines dropped.
fn sources(root: &Path, dirs: &[&str]) -> BTreeMap<PathBuf, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for d in dirs {
        walk(&root.join(d), &mut files);
    }
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            // A test module of its own (`tests.rs`, `*_tests.rs`) is test code throughout.
            let stem = p.file_stem().unwrap_or_default().to_string_lossy();
            let test_file = stem == "tests" || stem.ends_with("_tests");
            let code = if test_file {
                ""
            } else {
                text.split("#[cfg(test)]").next().unwrap_or_default()
            };
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| format!("{l}\n"))
                .collect();
            (p.strip_prefix(root).unwrap().to_path_buf(), code)
        })
        .collect()
}

/// Places that name a built-in for another meaning than the component, with why.
const OTHER_MEANINGS: &[(&str, &str, &str)] = &[
    (
        "llama",
        "core/src/model/llama/gguf.rs",
        "a GGUF file's `general.architecture`, the only one the llama model reads",
    ),
    (
        "naive",
        "src/report/compare.rs",
        "a run's config naming the naive baseline, which `compare` measures plasticity against",
    ),
    (
        "naive",
        "src/sweep/suite.rs",
        "the `[sweep.suite]` role key naming a suite's naive fine-tuning config",
    ),
    (
        "lr",
        "strategies/src/gdumb.rs",
        "GDumb's own key, the learning rate of its training on the memory",
    ),
    (
        "standard",
        "src/bench/memory.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "checkpoint",
        "src/bench/memory.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "lora",
        "src/bench/memory.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "amp",
        "src/bench/memory.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "mlp",
        "src/cli/bench/vocab.rs",
        "a value of the benchmarks' `--model`",
    ),
    (
        "vit",
        "src/cli/bench/vocab.rs",
        "a value of the benchmarks' `--model`",
    ),
    (
        "cnn",
        "src/cli/bench/vocab.rs",
        "a value of the benchmarks' `--model`",
    ),
    (
        "bert",
        "src/cli/bench/vocab.rs",
        "a value of the benchmarks' `--model`",
    ),
    (
        "cnn",
        "src/bench/torch.rs",
        "the `--model` of the image models' PyTorch twin (bench/throughput_image_torch.py)",
    ),
    (
        "vit",
        "src/bench/torch.rs",
        "the `--model` of the image models' PyTorch twin (bench/throughput_image_torch.py)",
    ),
    (
        "llama",
        "src/cli/bench/vocab.rs",
        "a value of the benchmarks' `--model`",
    ),
    (
        "lr",
        "core/src/config/checks.rs",
        "the optimiser's key `lr`",
    ),
    ("lr", "src/report/load.rs", "the `lr` column of steps.csv"),
    (
        "anomaly",
        "core/src/train/report.rs",
        "the kind of a report event",
    ),
    (
        "constant",
        "strategies/src/ewc.rs",
        "a key of EWC's saved state",
    ),
    (
        "budget",
        "strategies/src/budget.rs",
        "the budget strategy's own key `budget`",
    ),
];

#[test]
fn extension_kinds_take_one_file_and_one_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = sources(root, &["core/src", "strategies/src", "src"]);
    let lists = registration_lists(&src);
    assert!(lists.len() >= 4, "registration lists: {lists:?}");
    let mut table = Vec::new();
    for e in engram::registry().entries() {
        let reg = &e.registration;
        let (kind, lit) = (reg.factory.kind(), format!("{:?}", reg.name));
        let homes: Vec<&PathBuf> = src
            .iter()
            .filter(|(_, code)| {
                declares(code, kind, &lit) || code.contains(&format!("name: {lit}"))
            })
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            homes.len(),
            1,
            "{kind} `{}` is registered in {homes:?}",
            reg.name
        );
        let home = homes[0];
        // Its one line in a list: `module::CONST` of the home file, or the registration itself.
        let module = home.file_stem().unwrap().to_string_lossy().to_string();
        let lines: Vec<&PathBuf> = lists
            .iter()
            .filter(|(p, list)| {
                (*p == home && list.contains(&lit))
                    || [" ", "[", "\n", "::"]
                        .iter()
                        .any(|b| list.contains(&format!("{b}{module}::")))
            })
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(lines.len(), 1, "{kind} `{}`: listed in {lines:?}", reg.name);
        let named_elsewhere: Vec<&PathBuf> = src
            .iter()
            .filter(|(p, code)| {
                *p != home
                    && code.contains(&lit)
                    && !OTHER_MEANINGS
                        .iter()
                        .any(|(n, f, _)| *n == reg.name && Path::new(f) == p.as_path())
            })
            .map(|(p, _)| p)
            .collect();
        assert!(
            named_elsewhere.is_empty(),
            "{kind} `{}` (registered in {}) is named by {named_elsewhere:?}: ask it through a \
             trait method instead, or list the other meaning in OTHER_MEANINGS",
            reg.name,
            home.display()
        );
        table.push(format!(
            "| {kind} | `{}` | `{}` | `{}` |",
            reg.name,
            home.display(),
            lines[0].display()
        ));
    }
    // The list of other meanings holds no stale entry.
    for (name, file, why) in OTHER_MEANINGS {
        let code = &src[Path::new(file)];
        assert!(
            code.contains(&format!("{name:?}")),
            "stale: `{name}` in {file} ({why})"
        );
    }
    // The commands: `Variant(module::Args) => module::function` lines of `commands!`, each
    // module one file under src/cli/.
    let cli = &src[Path::new("src/cli/mod.rs")];
    let list = &cli[cli
        .find("commands! {")
        .expect("the commands! list in src/cli/mod.rs")..];
    for line in list.lines().skip(1).take_while(|l| !l.starts_with('}')) {
        let Some((variant, rest)) = line.trim().split_once('(') else {
            continue;
        };
        let module = rest.split("::").next().unwrap();
        let file = format!("src/cli/{module}.rs");
        assert!(src.contains_key(Path::new(&file)), "{variant}: no {file}");
        assert!(
            cli.contains(&format!("pub mod {module};")),
            "{variant}: no `pub mod {module};`"
        );
        table.push(format!(
            "| command | `engram {}` | `{file}` | `src/cli/mod.rs` |",
            variant.to_lowercase()
        ));
    }
    let text = format!(
        "<!-- Generated by the test registry::extension_kinds_take_one_file_and_one_line; \
         regenerate with `UPDATE_GOLDEN=1 cargo test --release --test engram registry::`. -->\n\n\
         | kind | name | file | listed in |\n|---|---|---|---|\n{}\n",
        table.join("\n")
    );
    let golden = root.join("book/src/figures/extensions.md");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&golden).unwrap_or_default(),
        text,
        "{} is out of date with the registry and src/cli/mod.rs; regenerate with\n    \
         UPDATE_GOLDEN=1 cargo test --release --test engram registry::",
        golden.display()
    );
}

/// Whether `code` declares the component `lit` of `kind`: `component!(kind "name", …)` (or
/// `component!(pub const X = kind "name", …)`), or a plugin-style `registration!(kind "name", …)`.
fn declares(code: &str, kind: impl std::fmt::Display, lit: &str) -> bool {
    code.contains(&format!("component!({kind} {lit},"))
        || code.contains(&format!("= {kind} {lit},"))
        || code.contains(&format!("registration!({kind} {lit},"))
}

/// The lists of registrations in `src`, by file: each `const` whose type is a list of
/// `Registration`s or of `DatasetSpec`s (the IDX datasets) written out as `[ … ]`, up to its
/// closing `];`. (A list computed from another, as `data::BUILTINS` is, is no list here.)
fn registration_lists(src: &BTreeMap<PathBuf, String>) -> Vec<(&PathBuf, &str)> {
    let mut out = Vec::new();
    for (p, code) in src {
        let mut at = 0;
        while let Some(i) = code[at..].find("const ") {
            let start = at + i;
            at = start + 6;
            let line_end = code[start..].find('\n').map_or(code.len(), |e| start + e);
            let line = &code[start..line_end];
            let Some(eq) = line.find('=') else { continue };
            let (ty, init) = (&line[..eq], code[start + eq + 1..].trim_start());
            if !(ty.contains("Registration") || ty.contains("DatasetSpec"))
                || !(init.starts_with("&[") || init.starts_with('['))
            {
                continue;
            }
            let body = start + eq;
            if let Some(end) = code[body..].find("];") {
                out.push((p, &code[body..body + end]));
            }
        }
    }
    out
}

/// Every built-in is declared once: its home file names it in its one declaration
/// (`component!`, which gives it its name, keys, builder, registration and typed-builder
/// marker) and nowhere else in its code; the builder's code says `Params::NAME`. Iterates the
/// registry, so a new component is held to it without a list here.
#[test]
fn every_builtin_is_declared_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = sources(root, &["core/src", "strategies/src"]);
    let r = engram::registry();
    assert!(r.entries().len() >= 22, "{} entries", r.entries().len());
    for e in r.entries() {
        let reg = &e.registration;
        let (kind, lit) = (reg.factory.kind(), format!("{:?}", reg.name));
        let homes: Vec<(&PathBuf, &String)> = src
            .iter()
            .filter(|(_, code)| {
                declares(code, kind, &lit) || code.contains(&format!("name: {lit}"))
            })
            .collect();
        assert_eq!(
            homes.len(),
            1,
            "{kind} `{}` is declared in {:?}",
            reg.name,
            homes.iter().map(|h| h.0).collect::<Vec<_>>()
        );
        let (home, code) = homes[0];
        let uses = code.lines().filter(|l| l.contains(&lit)).count();
        let other = OTHER_MEANINGS
            .iter()
            .filter(|(n, f, _)| *n == reg.name && Path::new(f) == home.as_path())
            .count();
        // A name with another meaning in its home file (a key of the same name) is written
        // there for that meaning as well.
        assert!(
            uses == 1 || (other > 0 && uses > 1),
            "{kind} `{}`: {} writes its name {uses} times; declare it once and say \
             `Params::NAME` (the `Component` constant) elsewhere",
            reg.name,
            home.display()
        );
    }
}
