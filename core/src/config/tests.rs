//! Tests of the config's parsing and checks (`config/mod.rs`).

use super::*;

/// `text` loaded as the experiment file `t.toml`.
pub(crate) fn load(text: &str) -> Result<LoadedConfig> {
    LoadedConfig::from_source(Path::new("t.toml"), text.to_string())
}

/// A whole experiment file of the fewest keys.
pub(crate) const MIN: &str = "[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\n";

#[test]
fn defaults_fill_in() {
    let c = load(MIN).unwrap().config;
    assert_eq!(c.train.batch_size, 128);
    assert_eq!(c.optimizer.lr, 0.05);
    assert_eq!(c.model.kind, "mlp");
    assert_eq!(c.data.scenario, Scenario::ClassIncremental);
}

#[test]
fn unknown_key_has_position_and_hint() {
    let err = load(&format!("{MIN}[train]\nepochz = 3\n")).unwrap_err();
    match err {
        Error::Config {
            line, column, hint, ..
        } => {
            assert_eq!((line, column), (6, 1));
            assert_eq!(hint.as_deref(), Some("did you mean `epochs`?"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_type_has_position() {
    let err = load(&format!("[run]\nseed = \"one\"\n{MIN}")).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                line: 2,
                column: 8,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn strategy_params_keep_positions() {
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct P {
        lambda: f64,
    }
    let text = format!(
        "{MIN}[[forgetting]]\ntype = \"ewc\"\nlambda = 1.0\n[[forgetting]]\ntype = \"x\"\nlamda = 2\n"
    );
    let l = load(&text).unwrap();
    assert_eq!(l.config.forgetting[1].kind, "x");
    let p: P = l.params("forgetting", 0).parse().unwrap();
    assert_eq!(p.lambda, 1.0);
    let err = l.params("forgetting", 1).parse::<P>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                line: 10,
                column: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("did you mean `lambda`"), "{err}");
    assert_eq!(l.type_position("forgetting", 1), (9, 8));
}

/// A model's unknown key is checked against `[model]`'s own keys too (`type`, `init`,
/// `adapter`…, which the section reads before the model's factory): the list names them and
/// the did-you-mean finds them, whether the model has many keys, one or none.
#[test]
fn model_keys_include_the_section_s_own() {
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Two {
        hidden: Option<usize>,
        layers: Option<usize>,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct One {
        hidden: Option<usize>,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Zero {}
    let l = load(&format!("{MIN}adaptor = \"x\"\n")).unwrap();
    let parts = |e: Error| match e {
        Error::Config {
            line,
            message,
            hint,
            ..
        } => (line, message, hint.unwrap_or_default()),
        other => panic!("{other:?}"),
    };
    let (line, message, hint) = parts(l.params("model", 0).parse::<Two>().unwrap_err());
    assert_eq!(line, 5);
    assert_eq!(
        message,
        "unknown field `adaptor`, expected one of `hidden`, `layers`, `type`, `init`, \
         `init_layout`, `init_remap`, `adapter`"
    );
    assert_eq!(hint, "did you mean `adapter`?");
    let (_, message, hint) = parts(l.params("model", 0).parse::<One>().unwrap_err());
    assert!(
        message.ends_with(
            "expected one of `hidden`, `type`, `init`, `init_layout`, `init_remap`, `adapter`"
        ),
        "{message}"
    );
    assert_eq!(hint, "did you mean `adapter`?");
    let (_, message, _) = parts(l.params("model", 0).parse::<Zero>().unwrap_err());
    assert!(
        message.ends_with("expected one of `type`, `init`, `init_layout`, `init_remap`, `adapter`"),
        "{message}"
    );
    // Another section's unknown key keeps its own list.
    let l = load(&format!("{MIN}[train]\nadaptor = 1\n")).unwrap_err();
    assert!(!l.to_string().contains("`adapter`"), "{l}");
}

#[test]
fn key_at_names_the_innermost_key_and_blame_names_the_override() {
    let src = "[train]\nepochs = 3\n[[forgetting]]\ntype = \"ewc\"\n[[forgetting]]\n\
               type = \"replay\"\nsel = { a = 1 }\n";
    let at = |line, col| key_at(src, offset_of(src, line, col).unwrap());
    assert_eq!(at(2, 1).as_deref(), Some("train.epochs"));
    assert_eq!(at(2, 10).as_deref(), Some("train.epochs"));
    assert_eq!(at(4, 8).as_deref(), Some("forgetting.0.type"));
    assert_eq!(at(6, 8).as_deref(), Some("forgetting.1.type"));
    assert_eq!(at(7, 9).as_deref(), Some("forgetting.1.sel.a"));
    assert_eq!(at(7, 7).as_deref(), Some("forgetting.1.sel"));
    assert_eq!(key_at("not toml = [", 3), None);
    assert_eq!(offset_of("ab\ncd", 2, 2), Some(4));

    // Index 0 of an entry with no key there: the entry itself.
    assert_eq!(at(3, 2).as_deref(), Some("forgetting.0"));
}

#[test]
fn override_errors_are_blamed_or_placed_in_the_file() {
    let original = "[train]\nepochs = 3\n[[forgetting]]\ntype = \"ewc\"\nlambda = 5.0\n\
                    [[forgetting]]\ntype = \"replay\"\n";
    let sets = vec![
        "train.batch=7".to_string(),
        "forgetting.0.lambda=-1".to_string(),
    ];
    let rewritten = apply_overrides(Path::new("c.toml"), original, &sets).unwrap();
    assert_ne!(
        rewritten.find("lambda"),
        original.find("lambda"),
        "a line was added"
    );
    // An error at the `n`-th occurrence of `word` in the rewritten text.
    let err = |word: &str, n: usize, message: &str| {
        let o = rewritten.match_indices(word).nth(n).unwrap().0;
        let (line, column) = line_col(&rewritten, o);
        Error::Config {
            file: "c.toml".into(),
            line,
            column,
            message: message.into(),
            hint: Some("h".into()),
        }
    };
    let place = |e| relocate_override_error(e, original, &rewritten, &sets);
    // A decoding error at a key an override wrote: the override is named.
    match place(err("-1", 0, "invalid type: integer `-1`, expected usize")) {
        Error::ConfigFile { message, hint, .. } => {
            assert_eq!(
                message,
                "--set `forgetting.0.lambda=-1`: invalid type: integer `-1`, expected usize"
            );
            assert_eq!(hint.as_deref(), Some("h"));
        }
        e => panic!("{e:?}"),
    }
    // A check at that key (which may concern others too): its place in the file, line 5.
    match place(err("lambda", 0, "lambda must be ≥ 0")) {
        Error::Config {
            line,
            column,
            message,
            ..
        } => {
            assert_eq!((line, column), (5, 1));
            assert_eq!(
                message,
                "lambda must be ≥ 0 (with the --set overrides applied)"
            );
        }
        e => panic!("{e:?}"),
    }
    // A decoding error in the file, past the added line: line 7 of the file, column 8.
    assert!(matches!(
        place(err("\"replay\"", 0, "unknown variant `replay`")),
        Error::Config {
            line: 7,
            column: 8,
            ..
        }
    ));
    // At a key only an override wrote: said so, without a position.
    match place(err("batch", 0, "batch must be even")) {
        Error::ConfigFile { message, .. } => assert_eq!(
            message,
            "batch must be even (at `train.batch`, which --set `train.batch=7` added)"
        ),
        e => panic!("{e:?}"),
    }
    // No overrides: unchanged.
    let e = relocate_override_error(err("lambda", 0, "m"), original, &rewritten, &[]);
    assert!(matches!(e, Error::Config { ref message, .. } if message == "m"));
}

#[test]
fn bare_strings_are_words_and_paths_not_numbers() {
    for v in ["cpu", "/data/fmnist", "./data", "fashion-mnist", "a.b"] {
        assert!(is_bare_string(v), "{v}");
    }
    for v in [
        ".05",
        "-.5",
        "+1x",
        "1e400",
        "9x",
        "\"a\" # c",
        "a b",
        "[1",
        "",
        "a=b",
    ] {
        assert!(!is_bare_string(v), "{v}");
    }
}

#[test]
fn hints_for_types_and_variants() {
    assert_eq!(
        hint_for("invalid type: integer `1`, expected a boolean").as_deref(),
        Some("write true or false, without quotes")
    );
    assert!(
        hint_for("invalid value: integer `-1`, expected usize")
            .unwrap()
            .contains("whole number ≥ 0")
    );
    assert!(
        hint_for("invalid type: string \"x\", expected f64")
            .unwrap()
            .contains("0.5")
    );
    assert_eq!(
        hint_for("unknown variant `adamx`, expected one of `sgd`, `adam`, `adamw`").as_deref(),
        Some("did you mean \"adam\"?")
    );
    assert_eq!(
        hint_for("unknown variant `zzz`, expected one of `sgd`, `adam`"),
        None
    );
    assert_eq!(
        hint_for("unknown field `lamda`, expected one of `lambda`, `gamma`").as_deref(),
        Some("did you mean `lambda`?")
    );
    assert_eq!(hint_for("something else"), None);
    assert!(
        hint_for("missing field `data`")
            .unwrap()
            .starts_with("add `data`")
    );
    assert!(
        hint_for("duplicate key `forgetting`")
            .unwrap()
            .contains("[[forgetting]]")
    );
    assert!(
        hint_for("invalid float, expected nothing")
            .unwrap()
            .contains("0.025")
    );
    assert!(
        hint_for("invalid exponent, expected digits")
            .unwrap()
            .contains("1e-3")
    );
    assert!(
        hint_for("invalid basic string, expected `\"`")
            .unwrap()
            .contains("closing")
    );
    assert!(
        hint_for("unexpected key or value, expected newline, `#`")
            .unwrap()
            .contains("(0.05)")
    );
    assert!(
        hint_for("string values must be quoted, expected literal string")
            .unwrap()
            .contains("after `=`")
    );
    assert!(
        hint_for("invalid type: map, expected a sequence")
            .unwrap()
            .contains("[[forgetting]]")
    );
    assert!(
        hint_for("missing comma between array elements, expected `,`")
            .unwrap()
            .contains("its `]`")
    );
}

#[test]
fn overrides_edit_the_text() {
    let out = apply_overrides(
        Path::new("t.toml"),
        &format!("{MIN}[[forgetting]]\ntype = \"ewc\"\n"),
        &[
            "train.epochs=3".into(),
            "run.device=cpu".into(),
            "forgetting.0.lambda=5.5".into(),
        ],
    )
    .unwrap();
    let c = load(&out).unwrap();
    assert_eq!(c.config.train.epochs, 3);
    assert_eq!(c.config.run.device, "cpu");
    assert_eq!(
        c.config.forgetting[0].params.get("lambda"),
        Some(&toml::Value::Float(5.5))
    );
}

#[test]
fn line_col_counts_from_one() {
    assert_eq!(line_col("ab\ncd", 0), (1, 1));
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
}
