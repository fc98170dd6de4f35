//! [`ParamSource`]: one component's keys, decoded from the spanned document so that every
//! error points into the config file.

use super::*;

/// Where a strategy's parameters come from: entry `index` of `list` in a config's text.
/// Decoding through it keeps positions for errors.
#[derive(Clone, Debug)]
pub struct ParamSource {
    pub(super) file: PathBuf,
    /// Where relative paths of the config resolve ([`LoadedConfig::base_dir`]).
    pub(super) base_dir: PathBuf,
    pub(super) source: Arc<str>,
    pub(super) list: &'static str,
    pub(super) index: usize,
    /// A table inside the entry whose keys these are (`options` of a `[[data.stream]]`
    /// entry), or `None` for the entry's own keys.
    pub(super) inner: Option<&'static str>,
}

impl ParamSource {
    /// Parameters given as a TOML table body with no file behind them (tests, plugins).
    pub fn from_toml(text: &str) -> Self {
        Self {
            file: PathBuf::from("<inline>"),
            base_dir: PathBuf::new(),
            source: Arc::from(format!("[[inline]]\n{text}\n")),
            list: "inline",
            index: 0,
            inner: None,
        }
    }

    /// The keys of table `key` inside this entry instead of the entry's own
    /// (`[data.stream.options]` of `[[data.stream]]` entry `index`).
    pub fn nested(self, key: &'static str) -> Self {
        Self {
            inner: Some(key),
            ..self
        }
    }

    /// Table `inner` of `entry` when [`ParamSource::nested`] names one (an empty table spanning
    /// the entry when it is absent), else `entry`.
    fn descend<'b>(&self, entry: Spanned<DeValue<'b>>) -> Spanned<DeValue<'b>> {
        let Some(key) = self.inner else {
            return entry;
        };
        let span = entry.span();
        match entry.get_ref() {
            DeValue::Table(t) => t.get(key).cloned(),
            _ => None,
        }
        .unwrap_or_else(|| Spanned::new(span.start..span.start, DeValue::Table(DeTable::new())))
    }

    /// Decodes this entry's keys (all but `type`, and for `[model]` the `init` keys of
    /// [`crate::model::init::KEYS`]) into `T`.
    ///
    /// # Errors
    /// [`Error::Config`] with the key's line and column for unknown keys and wrong types.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        let src: &str = &self.source;
        let doc = DeTable::parse(src).map_err(|e| toml_error(&self.file, src, &e))?;
        let entry: Option<Spanned<DeValue<'_>>> =
            table_at(doc.get_ref(), self.list).and_then(|v| match v.get_ref() {
                DeValue::Array(a) => a.get(self.index).cloned(),
                DeValue::Table(_) if self.index == 0 => Some(v.clone()),
                _ => None,
            });
        let entry = entry.unwrap_or_else(|| Spanned::new(0..0, DeValue::Table(DeTable::new())));
        let entry = self.descend(entry);
        let span = entry.span();
        let table = match entry.into_inner() {
            DeValue::Table(t) => t,
            _ => DeTable::new(),
        };
        let table: DeTable<'_> = table
            .into_iter()
            .filter(|(k, _)| {
                let k = k.get_ref().as_ref();
                k != "type" && !(self.list == "model" && super::INIT_KEYS.contains(&k))
            })
            .collect();
        // No strategy key takes NaN or an infinity (`nan`, `inf`, `1e400`): one check for every
        // strategy, built-in or plugin, so that a non-finite value can never switch a comparison
        // off silently (a NaN threshold is never exceeded).
        fn non_finite<'a>(v: &'a DeValue<'_>) -> Option<&'a str> {
            match v {
                DeValue::Float(f) => {
                    let raw = f.as_str();
                    (!raw
                        .replace('_', "")
                        .parse::<f64>()
                        .is_ok_and(f64::is_finite))
                    .then_some(raw)
                }
                DeValue::Array(a) => a.iter().find_map(|x| non_finite(x.get_ref())),
                DeValue::Table(t) => t.values().find_map(|x| non_finite(x.get_ref())),
                _ => None,
            }
        }
        for (k, v) in &table {
            if let Some(raw) = non_finite(v.get_ref()) {
                let key = k.get_ref().as_ref();
                return Err(self.key_error(
                    key,
                    format!("`{key}`: {raw} is not a finite number"),
                    Some("every key of a strategy, model or dataset takes finite values".into()),
                ));
            }
        }
        let value = Spanned::new(span, DeValue::Table(table));
        T::deserialize(ValueDeserializer::from(value)).map_err(|e| {
            let mut err = toml_error_with_choices(&self.file, src, &e, |patched| {
                let again = ParamSource {
                    source: Arc::from(patched),
                    ..self.clone()
                };
                match again.parse::<T>() {
                    Err(Error::Config { message, .. }) => Some(message),
                    _ => None,
                }
            });
            if self.list == "model"
                && let Error::Config { message, hint, .. } = &mut err
                && let Some(m) = with_section_keys(message)
            {
                *hint = hint_for(&m);
                *message = m;
            }
            err
        })
    }

    /// `[model] init` as written, resolved against the config's directory: what a model factory
    /// whose geometry comes from a pretrained directory reads (BERT's Hugging Face `config.json`).
    /// `None` outside `[model]`, without `init`, or when it is not a string.
    pub fn model_init(&self) -> Option<PathBuf> {
        if self.list != "model" {
            return None;
        }
        let doc: toml::Table = toml::from_str(&self.source).ok()?;
        let init = Path::new(doc.get("model")?.get("init")?.as_str()?);
        Some(if init.is_absolute() {
            init.to_path_buf()
        } else {
            self.base_dir.join(init)
        })
    }

    /// A positioned [`Error::Config`] about key `key` of this entry (at the entry when the key
    /// is absent), for checks that serde cannot express.
    pub fn key_error(&self, key: &str, message: String, hint: Option<String>) -> Error {
        let src: &str = &self.source;
        let offset = DeTable::parse(src).ok().and_then(|doc| {
            let v = table_at(doc.get_ref(), self.list)?;
            let entry = match v.get_ref() {
                DeValue::Array(a) => a.get(self.index)?.clone(),
                _ => v.clone(),
            };
            let entry = self.descend(entry);
            let start = entry.span().start;
            match entry.get_ref() {
                DeValue::Table(t) => {
                    Some(t.get_key_value(key).map_or(start, |(k, _)| k.span().start))
                }
                _ => Some(start),
            }
        });
        positioned(&self.file, src, offset.unwrap_or(0), message, hint)
    }

    /// The strategy list this entry belongs to.
    pub fn list(&self) -> &str {
        self.list
    }
}

/// The value at `list` of `doc`: a top-level key, or a dotted path into tables
/// (`data.options`).
fn table_at<'a, 'b>(doc: &'a DeTable<'b>, list: &str) -> Option<&'a Spanned<DeValue<'b>>> {
    let mut parts = list.split('.');
    let mut v = doc.get(parts.next()?)?;
    for part in parts {
        match v.get_ref() {
            DeValue::Table(t) => v = t.get(part)?,
            _ => return None,
        }
    }
    Some(v)
}

/// An unknown-field `message` from a model's own keys with `[model]`'s keys added to what it
/// expected (`type` and [`super::INIT_KEYS`], which the section reads before the model's
/// factory sees the rest), so that neither the list nor the did-you-mean leaves them out
/// (`adaptor` → `adapter`); `None` for any other message.
fn with_section_keys(message: &str) -> Option<String> {
    let field = message.strip_prefix("unknown field `")?.split('`').next()?;
    // serde's three forms: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`,
    // `c`" (or "there are no fields"): the quoted names after the field.
    let keys: Vec<String> = message
        .split('`')
        .skip(3)
        .step_by(2)
        .chain(std::iter::once("type"))
        .chain(super::INIT_KEYS)
        .map(|k| format!("`{k}`"))
        .collect();
    Some(format!(
        "unknown field `{field}`, expected one of {}",
        keys.join(", ")
    ))
}
