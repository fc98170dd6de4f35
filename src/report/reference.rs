//! The registry as text: `engram list` (plain or JSON) and the book's reference page
//! (`book/src/reference.md`), rendered by one function, [`registry_text`], so the two can
//! never list different components or defaults.

use engram_core::registry::{Entry, Kind, Registry};
use std::fmt::Write as _;

/// How [`registry_text`] writes the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryFormat {
    /// `engram list`: a `[kind]` line per kind, then each component's name, summary and
    /// origin, and its keys with their defaults, indented.
    List,
    /// `engram list --json`: an array of `{name, kind, summary, defaults, origin}`, pretty
    /// printed, with a final newline.
    Json,
    /// The book's reference page ([`reference_markdown`]).
    Markdown,
}

/// The preamble of the reference page.
const MARKDOWN_PREAMBLE: &str = "# Reference: strategies, models and datasets\n\n\
     <!-- Generated from the strategy registry by the `reference_md_matches_registry` test\n     \
     (tests/engram/book.rs). Do not edit by hand: run\n     \
     `UPDATE_GOLDEN=1 cargo test --release --test engram book::` to regenerate it. -->\n\n\
     Every registered built-in component with every key it accepts and its default value, as\n\
     `engram list` prints them. Copy the keys you want to change into an experiment file; a\n\
     key left out keeps its default, and an unknown key is an error that names the nearest\n\
     valid one. Keys whose default is *unset* (for example `replay`'s `every`) are not shown\n\
     here, and some keys only apply in one mode (for example `replay`'s `weight` with\n\
     `every`): see [the built-ins](built-ins.md).\n";

/// The reference page's section on `[train] on_divergence`
/// ([`engram_core::config::OnDivergence`]): its values, its default and what a restart changes
/// (the most restarts is [`engram_core::config::MAX_RESTARTS`]).
fn divergence_section(s: &mut String) {
    let _ = write!(
        s,
        "\n## When the loss diverges: `[train] on_divergence`\n\n\
         ```toml\n[train]\non_divergence = \"restart\"\n```\n\n\
         What a run does when its training loss becomes infinite or NaN. `restart` (the \
         default) restores the task's start (the model, the optimiser and every strategy's state, \
         from the checkpoint at the task's start, which pruning keeps), halves the learning rate \
         and turns on `clip_norm = 1.0` (a smaller `clip_norm` is kept) for the rest of the run, \
         records a `divergence` event in `report.json` with the error and what it changed, warns, \
         and trains the task again; after {} restarts in a run the next divergence ends it with \
         its error. `stop` ends the run with the error at once. A run that never diverges trains \
         exactly the same either way. See [troubleshooting](troubleshooting.md#the-loss-diverges).\n",
        engram_core::config::MAX_RESTARTS
    );
}

/// Every entry of `registry` in registration order (grouped by kind, as the registry keeps
/// them), written as `format` says: the text `engram list` prints (`List`, `Json`), or the
/// book's reference page (`Markdown`). Keys whose default is unset (an `Option` that is
/// `None`) have no TOML value and are listed by none of the formats.
pub fn registry_text(registry: &Registry, format: RegistryFormat) -> String {
    registry_text_of(registry, format, None)
}

/// [`registry_text`] of the entries named `only` (every kind that has one: `engram list
/// NAME`), or of all of them when `only` is `None`. The markdown page's preamble and closing
/// sections come only with the whole registry.
pub fn registry_text_of(registry: &Registry, format: RegistryFormat, only: Option<&str>) -> String {
    let picked = |e: &&Entry| only.is_none_or(|n| e.registration.name == n);
    if format == RegistryFormat::Json {
        let v: Vec<_> = registry
            .entries()
            .iter()
            .filter(picked)
            .map(|e| {
                serde_json::json!({
                    "name": e.registration.name,
                    "kind": e.registration.factory.kind(),
                    "summary": e.registration.summary,
                    "defaults": (e.registration.defaults)(),
                    "origin": e.origin.to_string(),
                })
            })
            .collect();
        return format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    let mut s = String::new();
    let whole = only.is_none();
    if format == RegistryFormat::Markdown && whole {
        s.push_str(MARKDOWN_PREAMBLE);
        divergence_section(&mut s);
    }
    let mut kind = None;
    for e in registry.entries().iter().filter(picked) {
        let k = e.registration.factory.kind();
        if kind != Some(k) {
            kind_heading(&mut s, k, format);
            kind = Some(k);
        }
        match format {
            RegistryFormat::Markdown => markdown_entry(&mut s, e, k),
            _ => list_entry(&mut s, e),
        }
    }
    if format == RegistryFormat::Markdown && whole {
        augment_section(&mut s);
    }
    s
}

/// The reference page's section on `[data.augment]` ([`engram_core::config::Augment`]):
/// its keys with their defaults (none of them augments), then the usual CIFAR settings.
fn augment_section(s: &mut String) {
    let defaults =
        toml::Table::try_from(engram_core::config::Augment::default()).unwrap_or_default();
    s.push_str(
        "\n## Data augmentation: `[data.augment]`\n\n\
         Random crop with zero padding and random horizontal flip of training batches only \
         (never evaluation), seeded from the run's seed; replayed rows are augmented when drawn. \
         Images only: refused for feature vectors, token ids and permuted tasks. See \
         [Your data](own-data.md#data-augmentation-dataaugment). The defaults augment nothing:\n\n\
         ```toml\n[data.augment]\n",
    );
    for (key, value) in &defaults {
        let _ = writeln!(s, "{key} = {value}");
    }
    s.push_str(
        "```\n\nThe CIFAR recipes' setting (2 for 28×28 images):\n\n\
         ```toml\n[data.augment]\ncrop_padding = 4\nflip = true\n```\n",
    );
}

/// The line that opens kind `k`'s entries.
fn kind_heading(s: &mut String, k: Kind, format: RegistryFormat) {
    if format != RegistryFormat::Markdown {
        let _ = writeln!(s, "[{}]", k.list());
        return;
    }
    let title = match k {
        Kind::Forgetting => "Forgetting strategies: `[[forgetting]]`",
        Kind::Memory => "Memory strategies: `[[memory]]`",
        Kind::Scheduler => "Schedulers: `[[scheduler]]`",
        Kind::Model => "Models: `[model]`",
        Kind::Dataset => "Datasets: `[data] dataset`",
        Kind::Format => "Data formats: `[data] format` with `path`",
    };
    let _ = write!(s, "\n## {title}\n");
}

/// One component as `engram list` prints it.
fn list_entry(s: &mut String, e: &Entry) {
    let reg = &e.registration;
    let _ = writeln!(s, "  {:<12} {}  ({})", reg.name, reg.summary, e.origin);
    for (key, value) in (reg.defaults)() {
        let _ = writeln!(s, "      {key} = {value}");
    }
}

/// One component of the reference page: its name, its summary as a sentence, and a TOML entry
/// with every key and its default.
fn markdown_entry(s: &mut String, e: &Entry, k: Kind) {
    let reg = &e.registration;
    let mut summary = reg.summary.chars();
    let summary: String = summary
        .next()
        .map(|c| c.to_uppercase().chain(summary).collect())
        .unwrap_or_default();
    let header = match k {
        Kind::Model => format!("[model]\ntype = \"{}\"", reg.name),
        Kind::Dataset => format!("[data]\ndataset = \"{}\"", reg.name),
        Kind::Format => format!("[data]\nformat = \"{}\"\npath = \"DIR\"", reg.name),
        _ => format!("[[{}]]\ntype = \"{}\"", k.list(), reg.name),
    };
    let _ = write!(
        s,
        "\n### `{}`\n\n{summary}.\n\n```toml\n{header}\n",
        reg.name
    );
    let defaults = (reg.defaults)();
    // A dataset's or format's own keys are `[data.options]`, not `[data]`'s.
    if matches!(k, Kind::Dataset | Kind::Format) && !defaults.is_empty() {
        s.push_str("[data.options]\n");
    }
    for (key, value) in &defaults {
        let _ = writeln!(s, "{key} = {value}");
    }
    s.push_str("```\n");
    if defaults.is_empty() {
        s.push_str("\nIt takes no parameters.\n");
    }
}

/// The reference page of the book (`book/src/reference.md`), generated from `registry`:
/// for each kind, each component's name, summary and a TOML entry listing every key with its
/// default value ([`registry_text`] with [`RegistryFormat::Markdown`]). Keys whose default is
/// unset (an `Option` that is `None`) have no TOML value and are not listed; the built-ins
/// chapter describes them.
pub fn reference_markdown(registry: &Registry) -> String {
    registry_text(registry, RegistryFormat::Markdown)
}
