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
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
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
        "naive",
        "src/report.rs",
        "a run's config naming the naive baseline, which `compare` measures plasticity against",
    ),
    (
        "lr",
        "strategies/src/gdumb.rs",
        "GDumb's own key, the learning rate of its training on the memory",
    ),
    (
        "standard",
        "src/bench.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "checkpoint",
        "src/bench.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "amp",
        "src/bench.rs",
        "a row label of `engram bench memory`",
    ),
    (
        "mlp",
        "src/main.rs",
        "a value of `engram bench memory --model`",
    ),
    (
        "vit",
        "src/main.rs",
        "a value of `engram bench memory --model`",
    ),
    (
        "lr",
        "core/src/config/checks.rs",
        "the optimiser's key `lr`",
    ),
    ("lr", "src/report.rs", "the `lr` column of steps.csv"),
    (
        "anomaly",
        "core/src/train/trainer/mod.rs",
        "the kind of a report event",
    ),
    (
        "constant",
        "strategies/src/ewc.rs",
        "a key of EWC's saved state",
    ),
];

#[test]
fn extension_kinds_take_one_file_and_one_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = sources(root, &["core/src", "strategies/src", "src"]);
    let lists: Vec<(&PathBuf, &str)> = src
        .iter()
        .filter_map(|(p, code)| {
            let start = code.find("BUILTINS: &[")?;
            let end = code[start..].find("];")? + start;
            Some((p, &code[start..end]))
        })
        .collect();
    assert!(lists.len() >= 4, "BUILTINS lists: {lists:?}");
    let mut table = Vec::new();
    for e in engram::registry().entries() {
        let reg = &e.registration;
        let (kind, lit) = (reg.factory.kind(), format!("{:?}", reg.name));
        let homes: Vec<&PathBuf> = src
            .iter()
            .filter(|(_, code)| {
                code.contains(&format!("registration!({kind} {lit}"))
                    || code.contains(&format!("name: {lit}"))
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
    println!(
        "| kind | name | file | listed in |\n|---|---|---|---|\n{}",
        table.join("\n")
    );
}

/// Every parameter type that names its component (`component!`) names one that is registered,
/// of that kind, and its defaults serialise to the values the registration lists (so the
/// builder writes what `engram list` shows).
#[test]
fn component_names_match_the_registry() {
    use engram::core::component::Component;
    use engram::core::model::{cnn::CnnParams, mlp::MlpParams, vit::VitParams};
    use engram::strategies::{
        accumulate::AccumulateParams, amp::AmpParams, budget::BudgetParams,
        checkpoint::CheckpointParams, constant::ConstantParams, ema::EmaParams, ewc::EwcParams,
        naive::NaiveParams, replay::ReplayParams, schedules::*,
    };
    fn check<C: Component + Default>(r: &engram::core::registry::Registry) {
        let e = r
            .get(C::KIND, C::NAME)
            .unwrap_or_else(|| panic!("{} `{}` is not registered", C::KIND.noun(), C::NAME));
        // Every key the builder would write has the value `engram list` shows (a key left out
        // is an unset `Option`, whose effective default the listing spells out).
        let listed = (e.registration.defaults)();
        for (k, v) in toml::Table::try_from(C::default()).unwrap() {
            assert_eq!(Some(&v), listed.get(&k), "{} `{k}`", C::NAME);
        }
    }
    let r = engram::registry();
    check::<MlpParams>(&r);
    check::<CnnParams>(&r);
    check::<VitParams>(&r);
    check::<NaiveParams>(&r);
    check::<EwcParams>(&r);
    check::<ReplayParams>(&r);
    check::<EmaParams>(&r);
    check::<CheckpointParams>(&r);
    check::<AmpParams>(&r);
    check::<AccumulateParams>(&r);
    check::<BudgetParams>(&r);
    check::<ConstantParams>(&r);
    check::<LrParams>(&r);
    check::<RegWarmupParams>(&r);
    check::<ReplayRatioParams>(&r);
    check::<CadenceParams>(&r);
    check::<AnomalyParams>(&r);
}
