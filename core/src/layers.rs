//! The layer order of engram-core, checked: every `crate::…` path in `core/src` (a `use` line
//! or a path written inline, outside comments and strings) names a module of its own layer or
//! of a layer above it ([`LAYERS`], the order of the crate docs' diagram), except the one
//! documented cycle ([`COMPONENT_CYCLE`]). A new import that runs back up fails this test, so
//! it fails CI.

/// engram-core's top-level modules, by layer, top first: a module may use its own layer and
/// the layers above it.
pub const LAYERS: &[&[&str]] = &[
    &["error", "fsutil", "rng", "alloc", "device", "threads"],
    &["config"],
    &["data", "gguf"],
    &["model"],
    &["strategy"],
    &["component"],
    &["plugin"],
    &["registry"],
    &["train"],
];

/// The one inherent cycle: a component and its kinds. [`crate::component`]'s factories name
/// what they build (a `Model`, a `Dataset`, the strategy traits), so it sits below `data`,
/// `model` and `strategy`; and each built-in of those kinds declares its own
/// [`Registration`](crate::component::Registration) in its file (one declaration per
/// component), so these three layers name `component` back.
pub const COMPONENT_CYCLE: (&[&str], &str) = (&["data", "model", "strategy"], "component");

/// The module a root-level path names: macros and re-exports at the root map to the module
/// that defines them; `None` for anything else (Burn's re-export, a constant).
fn module_of(ident: &str) -> Option<&str> {
    match ident {
        "registration" | "component" => Some("component"),
        "declare_plugin" => Some("plugin"),
        "Error" | "Result" => Some("error"),
        "burn" | "burn_version" | "BURN_VERSION" => None,
        m => Some(m),
    }
}

/// `text` with its comments and the contents of its string and character literals blanked
/// (newlines kept, so that line numbers stay).
fn code_of(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    while i < c.len() {
        let rest = &c[i..];
        let end = if rest.starts_with(&['/', '/']) {
            rest.iter().position(|&ch| ch == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            (2..rest.len())
                .find(|&k| rest[k - 1] == '*' && rest[k] == '/')
                .map_or(rest.len(), |k| k + 1)
        } else if rest[0] == 'r'
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
            && rest.len() > 1
            && (rest[1] == '"' || rest[1] == '#')
        {
            let hashes = rest[1..].iter().take_while(|&&ch| ch == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                out.push(rest[0]);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            (2 + hashes..rest.len())
                .find(|&k| rest[k..].starts_with(&close))
                .map_or(rest.len(), |k| k + close.len())
        } else if rest[0] == '"' {
            let mut k = 1;
            while k < rest.len() && rest[k] != '"' {
                k += if rest[k] == '\\' { 2 } else { 1 };
            }
            (k + 1).min(rest.len())
        } else if rest[0] == '\'' && rest.len() > 2 && rest[1] == '\\' {
            rest[3..]
                .iter()
                .position(|&ch| ch == '\'')
                .map_or(1, |k| k + 4)
        } else if rest[0] == '\'' && rest.len() > 2 && rest[2] == '\'' {
            3
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    out
}

/// The top-level modules that the paths `crate::…` in `code` name (`crate::{a::X, b::Y}`
/// names `a` and `b`); `$crate::` (inside a macro) is skipped.
fn named_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        let after = &rest[i + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let idents: Vec<&str> = match after.strip_prefix('{') {
            Some(group) => {
                let end = group.find('}').unwrap_or(group.len());
                group[..end]
                    .split(',')
                    .map(|s| s.trim())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            None => vec![after],
        };
        for item in idents {
            let ident: String = item
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                out.push(ident);
            }
        }
    }
    out
}

/// Every import of `core/src` that runs up the layer order: `(file:line, from, to)`.
fn upward_imports() -> Vec<(String, String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let mut files = vec![root.clone()];
    let mut out = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            let entries = std::fs::read_dir(&p).expect("core/src is readable");
            files.extend(entries.map(|e| e.expect("a directory entry").path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = p.strip_prefix(&root).expect("under src").to_path_buf();
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .unwrap_or_default();
        if top == "lib" || top == "layers" {
            continue;
        }
        let from = layer(&top).unwrap_or_else(|| {
            panic!(
                "core/src/{}: module `{top}` has no place in LAYERS",
                rel.display()
            )
        });
        let text = std::fs::read_to_string(&p).expect("a source file is readable");
        for (n, line) in code_of(&text).lines().enumerate() {
            for ident in named_modules(line) {
                let Some(m) = module_of(&ident) else { continue };
                let to = layer(m).unwrap_or_else(|| {
                    panic!(
                        "core/src/{}:{}: `crate::{ident}` is no module of LAYERS",
                        rel.display(),
                        n + 1
                    )
                });
                let excepted = COMPONENT_CYCLE.0.contains(&top.as_str()) && m == COMPONENT_CYCLE.1;
                if to > from && !excepted {
                    out.push((
                        format!("core/src/{}:{}", rel.display(), n + 1),
                        top.clone(),
                        m.to_string(),
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn paths_are_parsed() {
    assert_eq!(
        named_modules(&code_of(
            "use crate::{data::X, model::Y};\nlet a = crate::train::f(\"crate::registry\", '\"'); // crate::plugin\n/* crate::config */ r#\"crate::rng\"#"
        )),
        ["data", "model", "train"]
    );
    assert_eq!(
        named_modules("$crate::component::Kind"),
        Vec::<String>::new()
    );
    assert_eq!(named_modules("engram_crate::x"), Vec::<String>::new());
}

#[test]
fn no_import_runs_up_the_layers() {
    let up = upward_imports();
    assert!(
        up.is_empty(),
        "{} imports run up the layer order of core/src/lib.rs (LAYERS in core/src/layers.rs):\n{}",
        up.len(),
        up.iter()
            .map(|(at, from, to)| format!("  {at}: {from} uses {to}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
