//! Positions in the config's text: byte offsets to lines and columns, the key at an offset,
//! the spans of a dotted path and of a list entry, and the positioned errors built from them
//! (with "did you mean" hints).

use super::*;

/// The 1-based line and column of byte `offset` in `src`.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The byte offset of 1-based `line:column` (in characters) in `src`, the inverse of
/// [`line_col`]; `None` past the end.
pub(crate) fn offset_of(src: &str, line: usize, column: usize) -> Option<usize> {
    let start: usize = src
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    let rest = src.get(start..)?;
    let col = rest
        .char_indices()
        .nth(column.checked_sub(1)?)
        .map_or(rest.len(), |(i, _)| i);
    Some(start + col)
}

/// The dotted path (`forgetting.1.update_logits`; arrays of tables by index) of the innermost
/// key whose key or value spans byte `offset` of the TOML text `src`; `None` when the text
/// does not parse or no key is there.
pub fn key_at(src: &str, offset: usize) -> Option<String> {
    // A table's own span is not reliable (a `[section]` header's table spans the header
    // only), so tables are always searched; keys and scalar values by their spans.
    fn walk(t: &DeTable<'_>, offset: usize) -> Option<Vec<String>> {
        let at =
            |s: std::ops::Range<usize>| s.contains(&offset) || (s.end == offset && s.end > s.start);
        for (k, v) in t {
            let key = k.get_ref().to_string();
            let found = match v.get_ref() {
                DeValue::Table(inner) => walk(inner, offset),
                DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                    let inner = match item.get_ref() {
                        DeValue::Table(inner) => walk(inner, offset),
                        _ => None,
                    };
                    match inner {
                        Some(mut p) => {
                            p.insert(0, i.to_string());
                            Some(p)
                        }
                        None if at(item.span()) => Some(vec![i.to_string()]),
                        None => None,
                    }
                }),
                _ => None,
            };
            if let Some(mut p) = found {
                p.insert(0, key);
                return Some(p);
            }
            if at(k.span()) || at(v.span()) {
                return Some(vec![key]);
            }
        }
        None
    }
    let doc = DeTable::parse(src).ok()?;
    walk(doc.get_ref(), offset).map(|p| p.join("."))
}

/// The key span and value span (bytes) of the key at dotted `path` (arrays of tables by
/// index; an index as the last part gives the entry's span twice) in the TOML text `src`.
pub(crate) fn spans_of(
    src: &str,
    path: &str,
) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let doc = DeTable::parse(src).ok()?;
    let parts: Vec<&str> = path.split('.').collect();
    let mut table = doc.get_ref();
    let mut i = 0;
    loop {
        let (k, v) = table.get_key_value(parts[i])?;
        let (ks, vs) = (k.span(), v.span());
        match (v.get_ref(), parts.get(i + 1)) {
            (_, None) => return Some((ks, vs)),
            (DeValue::Table(inner), Some(_)) => {
                table = inner;
                i += 1;
            }
            (DeValue::Array(items), Some(idx)) => {
                let item = items.get(idx.parse::<usize>().ok()?)?;
                if i + 2 == parts.len() {
                    return Some((item.span(), item.span()));
                }
                let DeValue::Table(inner) = item.get_ref() else {
                    return None;
                };
                table = inner;
                i += 2;
            }
            _ => return None,
        }
    }
}

/// Whether `message` is a decoding error of serde (a wrong type, an unknown key or variant, a
/// missing key): about the key or value at its position and nothing else.
pub(crate) fn is_decode_error(message: &str) -> bool {
    [
        "invalid type:",
        "invalid value:",
        "invalid length",
        "unknown variant",
        "unknown field",
        "missing field",
        "data did not match any variant",
    ]
    .iter()
    .any(|p| message.starts_with(p))
}

/// Suggests the closest of `candidates` to `word` (Jaro–Winkler ≥ 0.8, ignoring case: `RELU`
/// finds `relu`).
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&word, &c.to_lowercase()), c))
        .filter(|(s, _)| *s >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A fix for a decoding error's `message`: the nearest valid key of an unknown field (or the
/// list of valid keys), the nearest value of an unknown variant, and how to write a value of
/// the expected type.
pub(crate) fn hint_for(message: &str) -> Option<String> {
    if message.starts_with("missing field `type`") {
        return Some(
            "name the component with `type = \"…\"`; `engram list` shows the registered ones"
                .into(),
        );
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next()?;
        return Some(format!(
            "add `{field}`; examples/split-fmnist.toml is a complete config to start from"
        ));
    }
    // TOML syntax.
    if message.starts_with("duplicate key") {
        return Some(
            "each key once per table; a further strategy is another [[forgetting]], \
             [[memory]] or [[scheduler]] entry (double brackets), not a second [forgetting]"
                .into(),
        );
    }
    if [
        "invalid float",
        "invalid integer",
        "invalid number",
        "invalid mantissa",
        "invalid exponent",
        "floating-point number overflowed",
    ]
    .iter()
    .any(|p| message.starts_with(p))
    {
        return Some("write a number such as 0.025, 1e-3 or 400".into());
    }
    if message.starts_with("invalid basic string") || message.starts_with("invalid literal string")
    {
        return Some("a string needs its closing quote on the same line, e.g. \"cpu\"".into());
    }
    if message.starts_with("unexpected key or value") {
        return Some(
            "after a value the line ends (or a # comment): decimals take a point (0.05), a list \
             takes brackets ([a, b]), and each key has its own line"
                .into(),
        );
    }
    if message.starts_with("string values must be quoted") {
        return Some(
            "a key needs a value after `=`: a number, true/false, a \"quoted string\" or a \
             [list]"
                .into(),
        );
    }
    if message == "invalid type: map, expected a sequence" {
        return Some(
            "strategies are a list of entries: write each as [[forgetting]] or [[memory]] \
             (double brackets), one per strategy"
                .into(),
        );
    }
    if message.starts_with("missing comma between array elements")
        || message.starts_with("unclosed array")
    {
        return Some(
            "a list is [a, b]: check that the `[` on this line or the one before has its `]`, \
             and that its items are separated by commas"
                .into(),
        );
    }
    let quoted: Vec<&str> = message.split('`').skip(3).step_by(2).collect();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next()?;
        return did_you_mean(field, quoted.iter().copied())
            .map(|s| format!("did you mean `{s}`?"))
            .or_else(|| Some(format!("valid keys: {}", quoted.join(", "))));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let word = rest.split('`').next()?;
        return did_you_mean(word, quoted.iter().copied())
            .map(|s| format!("did you mean \"{s}\"?"));
    }
    if message.contains("untagged enum OneOrMany") {
        return Some(
            "a strategy entry is a table with `type = \"…\"` ([[scheduler]] in the file); \
             --set changes the keys of the entries the file has (scheduler.0.k=v) but cannot \
             add one: add it to the file"
                .into(),
        );
    }
    if !(message.starts_with("invalid type:") || message.starts_with("invalid value:")) {
        return None;
    }
    let expected = message.rsplit("expected ").next()?;
    let hint = match expected {
        "a boolean" => "write true or false, without quotes",
        "usize" | "u64" | "u32" | "u16" | "u8" => {
            "write a whole number ≥ 0, without quotes, e.g. 3"
        }
        "i64" | "i32" => "write a whole number, without quotes, e.g. 3",
        "f64" | "f32" => "write a number, without quotes, e.g. 0.5",
        "a string" => "put the value in double quotes, e.g. \"cpu\"",
        e if e.starts_with("a sequence") => {
            "write a list in brackets, e.g. [400, 400]; --set changes the keys of the \
             [[forgetting]], [[memory]] and [[scheduler]] entries the file has \
             (forgetting.0.lambda=100) but cannot add one: add it to the file"
        }
        _ => return None,
    };
    Some(hint.into())
}

/// serde's message for a number, a boolean or a list where a choice goes ("wanted string or
/// table", which names neither the key's choices nor what was found): `decode` decodes `src`
/// again with `"?"` in place of the value at `span`, and the choices its "unknown variant"
/// error lists are said. The new message and hint, when that worked.
pub(crate) fn name_the_choices(
    message: &str,
    src: &str,
    span: Option<std::ops::Range<usize>>,
    decode: impl FnOnce(&str) -> Option<String>,
) -> Option<(String, String)> {
    if message != "wanted string or table" {
        return None;
    }
    let span = span?;
    let found = src.get(span.clone())?.trim();
    let patched = format!("{}\"?\"{}", src.get(..span.start)?, src.get(span.end..)?);
    let again = decode(&patched)?;
    let list = again.strip_prefix("unknown variant `?`, expected ")?;
    let list = list.strip_prefix("one of ").unwrap_or(list);
    let first = list.split('`').nth(1)?;
    Some((
        format!("{found} is not one of the choices here: {list}"),
        format!("a choice is a string in quotes, e.g. \"{first}\""),
    ))
}

/// [`toml_error`] with [`name_the_choices`]'s message and hint when they apply.
pub(crate) fn toml_error_with_choices(
    file: &Path,
    src: &str,
    err: &toml::de::Error,
    decode: impl FnOnce(&str) -> Option<String>,
) -> Error {
    let mut out = toml_error(file, src, err);
    if let Some((m, h)) = name_the_choices(err.message().trim(), src, err.span(), decode)
        && let Error::Config { message, hint, .. } = &mut out
    {
        *message = m;
        *hint = Some(h);
    }
    out
}

pub(crate) fn toml_error(file: &Path, src: &str, err: &toml::de::Error) -> Error {
    let mut message = err.message().trim().to_string();
    // The parser does not name the repeated key: its span does.
    if message == "duplicate key"
        && let Some(key) = err
            .span()
            .and_then(|s| src.get(s))
            .map(|k| k.trim().trim_matches(['[', ']']).trim())
            .filter(|k| !k.is_empty() && !k.contains('\n'))
    {
        message = format!("duplicate key `{key}`");
    }
    let hint = hint_for(&message);
    positioned(file, src, err.span().map_or(0, |s| s.start), message, hint)
}

/// An [`Error::Config`] at byte `offset` of `src`, the text of `file` (line and column
/// 1-based, as [`line_col`] counts them).
pub fn positioned(
    file: &Path,
    src: &str,
    offset: usize,
    message: String,
    hint: Option<String>,
) -> Error {
    let (line, column) = line_col(src, offset);
    Error::Config {
        file: file.to_path_buf(),
        line,
        column,
        message,
        hint,
    }
}

/// Finds entry `index` of `list` in the document: the entry table's span start and the `type`
/// value's span start.
pub(crate) fn entry_span(src: &str, list: &str, index: usize) -> Option<(usize, Option<usize>)> {
    let doc = DeTable::parse(src).ok()?;
    let v = doc.get_ref().get(list)?;
    let entry = match v.get_ref() {
        DeValue::Array(a) => a.get(index)?.clone(),
        DeValue::Table(_) if index == 0 => v.clone(),
        _ => return None,
    };
    let ty = match entry.get_ref() {
        DeValue::Table(t) => t.get("type").map(|t| t.span().start),
        _ => None,
    };
    Some((entry.span().start, ty))
}
