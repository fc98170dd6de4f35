//! The `--set key.path=value` engine: overrides applied to the TOML text with its formatting
//! kept, and errors moved back to the override that caused them.

use super::*;

/// Places an error found in `rewritten` — the config text `original` with the `--set`
/// overrides `sets` applied — for the user, who never saw `rewritten`:
/// - a decoding error (wrong type, unknown key or variant) at a key that an override wrote, or
///   inside a section an override created, names that override (as [`Error::ConfigFile`]:
///   ``--set `forgetting.1.update_logits=1`: invalid type: integer `1`, expected a boolean``);
/// - any other error at a key the file has gets that key's line and column in the file
///   (overrides that add lines move everything after them), noting that the overrides were
///   applied — a check over several keys reports at one of them, which need not be the one an
///   override changed, so no override is blamed;
/// - an error at a key only an override wrote says so, without a position;
/// - the rest keep their position in the rewritten text, and say so.
///
/// Errors other than [`Error::Config`], and any error when `sets` is empty, are unchanged.
pub fn relocate_override_error(
    err: Error,
    original: &str,
    rewritten: &str,
    sets: &[String],
) -> Error {
    let Error::Config {
        file,
        line,
        column,
        message,
        hint,
    } = err
    else {
        return err;
    };
    let config = |line, column, message| Error::Config {
        file: file.clone(),
        line,
        column,
        message,
        hint: hint.clone(),
    };
    if sets.is_empty() {
        return config(line, column, message);
    }
    let set_key = |s: &str| {
        s.split_once('=')
            .map(|(k, _)| k.split('.').map(str::trim).collect::<Vec<_>>().join("."))
    };
    let off = offset_of(rewritten, line, column);
    let key = off.and_then(|o| key_at(rewritten, o));
    if let (Some(off), Some(key)) = (off, &key) {
        if is_decode_error(&message) {
            let culprit = sets.iter().rev().find(|s| {
                set_key(s).is_some_and(|k| k == *key || k.starts_with(&format!("{key}.")))
            });
            if let Some(set) = culprit {
                return Error::ConfigFile {
                    file,
                    message: format!("--set `{set}`: {message}"),
                    hint,
                };
            }
        }
        if let (Some((k1, v1)), Some((k0, v0))) =
            (spans_of(rewritten, key), spans_of(original, key))
        {
            let at = if off >= v1.start {
                v0.start + (off - v1.start).min(v0.len())
            } else {
                k0.start + off.saturating_sub(k1.start).min(k0.len())
            };
            let (line, column) = line_col(original, at);
            return config(
                line,
                column,
                format!("{message} (with the --set overrides applied)"),
            );
        }
        // A key the file does not have: an override added it, and its position means nothing
        // to the user.
        if let Some(set) = sets
            .iter()
            .rev()
            .find(|s| set_key(s).is_some_and(|k| k == *key))
        {
            return Error::ConfigFile {
                file,
                message: format!("{message} (at `{key}`, which --set `{set}` added)"),
                hint,
            };
        }
    }
    config(
        line,
        column,
        format!("{message} (position in the config with --set applied)"),
    )
}

/// Applies `--set key.path=value` overrides to TOML text, keeping its formatting.
///
/// # Errors
/// [`Error::ConfigFile`] for an override without `=`, a value that is not TOML, or a path that
/// crosses a non-table.
pub fn apply_overrides(file: &Path, src: &str, sets: &[String]) -> Result<String> {
    if sets.is_empty() {
        return Ok(src.to_string());
    }
    let bad = |m: String, hint: &str| Error::ConfigFile {
        file: file.to_path_buf(),
        message: m,
        hint: Some(hint.to_string()),
    };
    let mut doc: toml_edit::DocumentMut = src
        .parse()
        .map_err(|e: toml_edit::TomlError| bad(e.to_string(), "fix the file first"))?;
    for set in sets {
        let (key, value) = set.split_once('=').ok_or_else(|| {
            bad(
                format!("--set `{set}` has no `=`"),
                "write --set train.epochs=3",
            )
        })?;
        let value = override_value(set, value.trim()).map_err(|(m, h)| bad(m, h))?;
        if key.trim().is_empty() || key.split('.').any(|p| p.trim().is_empty()) {
            return Err(bad(
                format!("--set `{set}` has an empty key"),
                "write --set section.key=value, e.g. --set train.epochs=3",
            ));
        }
        let parts: Vec<&str> = key.trim().split('.').map(str::trim).collect();
        let (last, path) = parts.split_last().expect("split yields one part");
        let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
        let mut i = 0;
        while i < path.len() {
            let p = path[i];
            // The list's dotted name as the file writes its header: `forgetting`, `data.stream`.
            let list = path[..=i].join(".");
            // `scheduler.0.type=…` on a file without [[scheduler]]: an override changes the
            // entries the file has but cannot add one (it would make a table `0`).
            let index = path
                .get(i + 1)
                .or((i + 1 == path.len()).then_some(last))
                .and_then(|s| s.parse::<usize>().ok());
            if let (None, Some(idx)) = (table.get(p), index) {
                return Err(bad(
                    format!(
                        "--set `{set}`: the config has no [[{list}]] entry {idx} (it has none)"
                    ),
                    &format!(
                        "--set changes the entries the file has but cannot add one: add \
                         `[[{list}]]` with its `type = \"…\"` to the file (`engram list` names \
                         the types), then set its keys as {list}.0.KEY=VALUE"
                    ),
                ));
            }
            let item = table
                .entry(p)
                .or_insert(toml_edit::Item::Table(toml_edit::Table::new()));
            if item.is_array_of_tables() {
                if i + 1 == path.len() && last.parse::<usize>().is_ok() {
                    return Err(bad(
                        format!("--set `{set}`: an entry of `{list}` cannot be replaced whole"),
                        "set its keys one by one, e.g. forgetting.0.lambda=100",
                    ));
                }
                // Arrays of tables are addressed by index: `forgetting.0.lambda`.
                let idx = path
                    .get(i + 1)
                    .and_then(|s| s.parse::<usize>().ok())
                    .ok_or_else(|| {
                        bad(
                            format!("--set `{key}`: `{list}` is a list; add an index"),
                            "write for example forgetting.0.lambda=100",
                        )
                    })?;
                let count = item.as_array_of_tables().map_or(0, |a| a.len());
                table = item
                    .as_array_of_tables_mut()
                    .and_then(|a| a.get_mut(idx))
                    .ok_or_else(|| {
                        bad(
                            format!(
                                "--set `{key}`: there is no entry {idx} in `{list}` (the file \
                                 has {count}: {list}.0 … {list}.{})",
                                count.saturating_sub(1)
                            ),
                            &format!(
                                "entries are numbered from 0; --set cannot add one: add another \
                                 `[[{list}]]` to the file"
                            ),
                        )
                    })?;
                i += 2;
            } else {
                table = item.as_table_like_mut().ok_or_else(|| {
                    bad(
                        format!("--set `{key}`: `{p}` is not a table"),
                        "check the key path",
                    )
                })?;
                i += 1;
            }
        }
        put(table, path, last, set, value).map_err(|(m, h)| bad(m, &h))?;
    }
    Ok(doc.to_string())
}

/// Puts override `set`'s `value` at key `last` of `table` (reached by `path`): an empty list
/// empties a list of entries (`--set memory=[]` is the plain step, `forgetting=[]` naive
/// fine-tuning, `scheduler=[]` the constant rate: the file's `[[memory]]` … entries dropped, as
/// if it had none); a section of the file is never replaced whole.
///
/// # Errors
/// The message and hint of a value that would replace a section.
fn put(
    table: &mut dyn toml_edit::TableLike,
    path: &[&str],
    last: &str,
    set: &str,
    value: toml_edit::Value,
) -> std::result::Result<(), (String, String)> {
    if let Some(item) = table.get(last)
        && empties_a_list(item, path.is_empty() && last == "scheduler", &value)
    {
        table.remove(last);
        return Ok(());
    }
    if let Some(item) = table.get(last)
        && (item.is_table() || item.is_array_of_tables())
    {
        let whole = if path.is_empty() {
            last.to_string()
        } else {
            format!("{}.{last}", path.join("."))
        };
        return Err((
            format!(
                "--set `{set}`: `{whole}` is a section of the file; replacing it whole \
                 would drop the keys it has"
            ),
            format!("set its keys one by one: --set {whole}.KEY=VALUE"),
        ));
    }
    table.insert(last, toml_edit::Item::Value(value));
    Ok(())
}

/// Whether override value `value` (an empty array) replaces `item`, a list of entries: an
/// array of tables (`[[memory]]`), or a single table where `single_table_list` (the top-level
/// `[scheduler]`, which may be one table or a list).
fn empties_a_list(
    item: &toml_edit::Item,
    single_table_list: bool,
    value: &toml_edit::Value,
) -> bool {
    value.as_array().is_some_and(toml_edit::Array::is_empty)
        && (item.is_array_of_tables() || (single_table_list && item.is_table()))
}

/// The TOML value of override `set` (its text after `=`, trimmed: `v`), or the message and
/// hint of the error that refuses it.
fn override_value(
    set: &str,
    v: &str,
) -> std::result::Result<toml_edit::Value, (String, &'static str)> {
    match v.parse() {
        Ok(value) => Ok(value),
        // A bare word or path is taken as a string: --set run.device=cpu. Anything else that is
        // not TOML (`.05`, `1e400`, a comment) is an error rather than a string that a type
        // check would then reject with a misleading hint.
        Err(_) if is_bare_string(v) => Ok(toml_edit::Value::from(v)),
        Err(_) => Err((
            format!("--set `{set}`: `{v}` is not a TOML value"),
            "a number needs a digit before its point (0.05) and must fit in 64 bits; a string \
             can be quoted (\"cpu\"); no comments",
        )),
    }
}

/// Whether an override's value that is not TOML may be taken as a string: a bare word or
/// path (`cpu`, `/data/fmnist`, `./data`) — no spaces, quotes, brackets or `#`, and not
/// shaped like a number (a digit first, or a sign or point before one).
pub(crate) fn is_bare_string(v: &str) -> bool {
    let unsigned = v.strip_prefix(['+', '-']).unwrap_or(v);
    let numeric = unsigned
        .strip_prefix('.')
        .unwrap_or(unsigned)
        .starts_with(|c: char| c.is_ascii_digit());
    !v.is_empty()
        && !numeric
        && !v.chars().any(|c| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '[' | ']' | '{' | '}' | '#' | '=')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "[train]\nepochs = 1\n\n[[forgetting]]\ntype = \"ewc\"\n\n[[memory]]\ntype = \"amp\"\n\n[[memory]]\ntype = \"checkpoint\"\n\n[scheduler]\ntype = \"step\"\n";

    fn apply(sets: &[&str]) -> Result<toml::Table> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let text = apply_overrides(Path::new("c.toml"), FILE, &sets)?;
        Ok(toml::from_str(&text).unwrap())
    }

    /// `[[data.stream]]` entries are addressed like top-level lists: `data.stream.1.subsample`;
    /// a wrong index names the key and the list by its dotted name.
    #[test]
    fn stream_entries_are_set_by_index_under_data() {
        let file = "[data]\nmask_logits = true\n\n[[data.stream]]\ndataset = \"mnist\"\n\n\
                    [[data.stream]]\ndataset = \"fashion-mnist\"\nsubsample = 300\n";
        let set = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            apply_overrides(Path::new("c.toml"), file, &sets)
        };
        let text = set(&["data.stream.1.subsample=100", "data.stream.0.subsample=50"]).unwrap();
        let t: toml::Table = toml::from_str(&text).unwrap();
        let entry = |i: usize| t["data"]["stream"][i].clone();
        assert_eq!(entry(0)["subsample"].as_integer(), Some(50));
        assert_eq!(entry(1)["subsample"].as_integer(), Some(100));
        assert_eq!(entry(1)["dataset"].as_str(), Some("fashion-mnist"));
        assert_eq!(t["data"]["mask_logits"].as_bool(), Some(true));
        let e = set(&["data.stream.2.subsample=100"]).unwrap_err();
        assert!(matches!(e, Error::ConfigFile { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains(
                "--set `data.stream.2.subsample`: there is no entry 2 in `data.stream` (the \
                 file has 2: data.stream.0 … data.stream.1)"
            ),
            "{e}"
        );
        assert!(e.contains("add another `[[data.stream]]`"), "{e}");
        let e = set(&["data.stream.subsample=100"]).unwrap_err().to_string();
        assert!(e.contains("`data.stream` is a list; add an index"), "{e}");
        let e = set(&["data.stream.0=1"]).unwrap_err().to_string();
        assert!(
            e.contains("an entry of `data.stream` cannot be replaced whole"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_list_empties_a_list_of_entries() {
        // memory=[]: both [[memory]] entries gone (the plain step), the rest kept.
        let t = apply(&["memory=[]"]).unwrap();
        assert!(!t.contains_key("memory"), "{t:?}");
        assert_eq!(t["forgetting"][0]["type"].as_str(), Some("ewc"));
        assert_eq!(t["scheduler"]["type"].as_str(), Some("step"));
        // forgetting=[] (naive) and the single-table scheduler=[] (constant rate) too.
        let t = apply(&["forgetting=[]", "scheduler=[]"]).unwrap();
        assert!(
            !t.contains_key("forgetting") && !t.contains_key("scheduler"),
            "{t:?}"
        );
        assert_eq!(t["memory"].as_array().unwrap().len(), 2);
        // A list the file does not have becomes an empty one.
        let sets = vec!["memory=[]".to_string()];
        let text = apply_overrides(Path::new("c.toml"), "[train]\n", &sets).unwrap();
        let t: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(t["memory"].as_array().map(Vec::len), Some(0));
        // A section that is not a list is still refused, and so is a non-empty value.
        for set in ["train=[]", "memory=[1]", "memory=0"] {
            let e = apply(&[set]).unwrap_err().to_string();
            assert!(e.contains("section of the file"), "{set}: {e}");
        }
    }
}
