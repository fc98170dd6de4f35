//! The free-form part of `[sweep]`: its axes (every key but the reserved ones), `set` and
//! `[sweep.variants.<axis>]`, each key a `--set` path into the config.

use super::{
    Node, OWNED, Parser, RESERVED, SECTIONS, entries, flatten, nearest_reserved, to_json, toml_text,
};
use crate::sweep::grid::{Axis, AxisValue, label_of, sanitize};
use engram_core::Result;
use toml::de::{DeTable, DeValue};

impl Parser<'_> {
    /// Refuses an axis or `set` key that is not a path into the config (its first segment a
    /// section), or one the sweep sets itself ([`OWNED`]).
    fn check_key(&self, key: &str, offset: usize) -> Result<()> {
        let first = key.split('.').next().unwrap_or(key);
        if !SECTIONS.contains(&first) {
            let close = RESERVED
                .iter()
                .chain(SECTIONS.iter())
                .copied()
                .filter(|c| strsim::levenshtein(c, first) <= 2)
                .min_by_key(|c| strsim::levenshtein(c, first));
            let hint = match close {
                Some(c) if RESERVED.contains(&c) => format!("did you mean the sweep key `{c}`?"),
                Some(c) => format!("did you mean the config section `{c}`?"),
                None => format!(
                    "sweep keys: {}; axes are config paths such as \"optimizer.lr\"",
                    RESERVED.join(", ")
                ),
            };
            return Err(self.at(
                offset,
                format!(
                    "`{first}` is neither a key of [sweep] nor a section of the config (in `{key}`)"
                ),
                Some(&hint),
            ));
        }
        if let Some((_, why)) = OWNED.iter().find(|(k, _)| *k == key) {
            return Err(self.at(offset, format!("`{key}` cannot be swept: {why}"), None));
        }
        Ok(())
    }

    /// The overrides of a table (`set`, a variant's bundle) as `KEY=VALUE` with the offset of
    /// each value, every key checked; `clash` names what else sets a key of `fixed`.
    fn overrides(
        &self,
        table: &DeTable<'_>,
        fixed: &[(String, usize)],
        clash: Option<&str>,
    ) -> Result<Vec<(String, usize)>> {
        let mut leaves = Vec::new();
        flatten(table, "", &mut leaves);
        let mut sets = Vec::new();
        for (k, v) in leaves {
            let o = v.span().start;
            self.check_key(&k, o)?;
            if let Some(what) = clash
                && is_fixed(fixed, &k)
            {
                return Err(self.at(
                    o,
                    format!("`{k}` is both set by {what} and a fixed value in `set`"),
                    Some("keep one of the two"),
                ));
            }
            sets.push((format!("{k}={}", toml_text(v)), o));
        }
        Ok(sets)
    }

    /// `set`: the fixed overrides of every run.
    pub(super) fn fixed(&self, sweep: &DeTable<'_>) -> Result<Vec<(String, usize)>> {
        let Some(node) = sweep.get("set") else {
            return Ok(Vec::new());
        };
        let DeValue::Table(t) = node.get_ref() else {
            return Err(self.at(
                node.span().start,
                "`set` must be a table of fixed overrides".into(),
                Some("write set = { \"data.subsample\" = 1000 }"),
            ));
        };
        self.overrides(t, &[], None)
    }

    /// The axes: every key of `[sweep]` but the reserved ones, each leaf a non-empty list.
    pub(super) fn axes(&self, sweep: &DeTable<'_>, fixed: &[(String, usize)]) -> Result<Vec<Axis>> {
        let mut axes = Vec::new();
        for (k, node) in entries(sweep) {
            let k: &str = k.get_ref();
            if RESERVED.contains(&k) {
                continue;
            }
            let mut leaves = Vec::new();
            match node.get_ref() {
                DeValue::Table(t) => flatten(t, k, &mut leaves),
                _ => leaves.push((k.to_string(), node)),
            }
            for (key, v) in leaves {
                self.check_key(&key, Self::key_offset(sweep, k))?;
                axes.push(self.axis(key, v, fixed)?);
            }
        }
        Ok(axes)
    }

    /// The axis `key` whose values are the list `v`.
    fn axis(&self, key: String, v: &Node<'_>, fixed: &[(String, usize)]) -> Result<Axis> {
        let o = v.span().start;
        if is_fixed(fixed, &key) {
            return Err(self.at(
                o,
                format!("`{key}` is both an axis and a fixed value in `set`"),
                Some("keep one of the two"),
            ));
        }
        let list = match v.get_ref() {
            DeValue::Array(a) if !a.is_empty() => a,
            _ => {
                let hint = match nearest_reserved(&key) {
                    Some(r) => format!("did you mean the sweep key `{r}`?"),
                    None => format!(
                        "write \"{key}\" = [a, b]; one value for every run goes in set = {{ \"{key}\" = a }}"
                    ),
                };
                return Err(self.at(
                    o,
                    format!("axis `{key}` must be a non-empty list of values"),
                    Some(&hint),
                ));
            }
        };
        let mut values: Vec<AxisValue> = Vec::new();
        for v in list.iter() {
            let vo = v.span().start;
            let json = to_json(v).ok_or_else(|| {
                self.at(
                    vo,
                    format!(
                        "axis `{key}`: a value must be a number, string, boolean or list of them"
                    ),
                    None,
                )
            })?;
            if values.iter().any(|w| w.json == json) {
                return Err(self.at(
                    vo,
                    format!("axis `{key}`: the value {} is listed twice", toml_text(v)),
                    None,
                ));
            }
            values.push(AxisValue {
                sets: vec![(format!("{key}={}", toml_text(v)), vo)],
                label: label_of(&json),
                json,
                offset: vo,
            });
        }
        Ok(Axis {
            label: key.rsplit('.').next().unwrap_or(&key).to_string(),
            key,
            values,
        })
    }

    /// `[sweep.variants.<axis>]`: `name = { "config.path" = value, ... }`, one axis value per
    /// name, each setting its whole bundle (a stream: its scenario, tasks and size at once).
    pub(super) fn variants(
        &self,
        sweep: &DeTable<'_>,
        axes: &[Axis],
        fixed: &[(String, usize)],
    ) -> Result<Vec<Axis>> {
        let Some(node) = sweep.get("variants") else {
            return Ok(Vec::new());
        };
        let DeValue::Table(t) = node.get_ref() else {
            return Err(self.at(
                node.span().start,
                "`variants` must be a table of variant axes".into(),
                Some(
                    "write [sweep.variants.stream] with one line per variant: short = { \"data.subsample\" = 1600 }",
                ),
            ));
        };
        let mut out = Vec::new();
        for (axis, vnode) in entries(t) {
            let axis: &str = axis.get_ref();
            let aoff = Self::key_offset(t, axis);
            if axes.iter().any(|a| a.key == axis) || SECTIONS.contains(&axis) || axis == "config" {
                return Err(self.at(
                    aoff,
                    format!(
                        "variant axis `{axis}` has the name of another axis or of a config section"
                    ),
                    Some("name it after what it varies, e.g. `stream`"),
                ));
            }
            let vt = match vnode.get_ref() {
                DeValue::Table(vt) if !vt.is_empty() => vt,
                _ => {
                    return Err(self.at(
                        aoff,
                        format!("variant axis `{axis}` must be a non-empty table of named variants"),
                        Some("write short = { \"data.subsample\" = 1600 } under it, one line per variant"),
                    ));
                }
            };
            out.push(Axis {
                key: axis.to_string(),
                label: axis.to_string(),
                values: self.variant_values(axis, vt, fixed)?,
            });
        }
        Ok(out)
    }

    /// The named variants of variant axis `axis`, each with its bundle of overrides.
    fn variant_values(
        &self,
        axis: &str,
        vt: &DeTable<'_>,
        fixed: &[(String, usize)],
    ) -> Result<Vec<AxisValue>> {
        let mut values: Vec<AxisValue> = Vec::new();
        for (name, bundle) in entries(vt) {
            let name: &str = name.get_ref();
            let noff = Self::key_offset(vt, name);
            let DeValue::Table(b) = bundle.get_ref() else {
                return Err(self.at(
                    noff,
                    format!("variant `{axis}.{name}` must be a table of overrides"),
                    Some(
                        "write name = { \"data.tasks\" = 10 }, or name = {} for the config as it is",
                    ),
                ));
            };
            let what = format!("variant `{axis}.{name}`");
            let sets = self.overrides(b, fixed, Some(&what))?;
            let label = sanitize(name);
            if values.iter().any(|w| w.label == label) {
                return Err(self.at(
                    noff,
                    format!("variant axis `{axis}`: two variants are named `{label}`"),
                    None,
                ));
            }
            values.push(AxisValue {
                sets,
                json: name.into(),
                label,
                offset: noff,
            });
        }
        Ok(values)
    }
}

/// Whether `fixed` (`KEY=VALUE` entries) sets `key`.
fn is_fixed(fixed: &[(String, usize)], key: &str) -> bool {
    fixed
        .iter()
        .any(|(f, _)| f.split_once('=').is_some_and(|(fk, _)| fk == key))
}
