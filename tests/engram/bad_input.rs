//! Malformed configs: each is a typed error with a position where one exists, exit code 2,
//! no panic, and nothing written to the out dir.

use crate::util::{run, small_config};
use engram::core::registry::Kind;

struct Case {
    name: &'static str,
    text: &'static str,
    /// A substring the message must contain (position and/or hint).
    expect: &'static str,
}

const MIN: &str = "[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\n";

fn cases() -> Vec<(String, String, &'static str)> {
    let fixed = [
        Case {
            name: "unclosed",
            text: "[run\nseed = 1\n",
            expect: ":1:",
        },
        Case {
            name: "string_seed",
            text: "[run]\nseed = \"one\"\n",
            expect: ":2:8:",
        },
        Case {
            name: "empty",
            text: "",
            expect: "missing field `data`",
        },
        Case {
            name: "binary",
            text: "\u{0}\u{1} garbage",
            expect: ":1:",
        },
        Case {
            name: "no_model",
            text: "[data]\ndataset = \"fashion-mnist\"\n",
            expect: "missing field `model`",
        },
        Case {
            name: "bad_dataset",
            text: "[data]\ndataset = \"no-such-dataset\"\n[model]\ntype = \"mlp\"\n",
            expect: "registered datasets: cifar10, cifar100, fashion-mnist, mnist",
        },
        Case {
            name: "model_without_type",
            text: "[data]\ndataset = \"fashion-mnist\"\n[model]\nhidden = [8]\n",
            expect: "`engram list` shows the registered ones",
        },
        Case {
            name: "plugin_missing",
            text: "plugins = [\"nowhere/libx.so\"]\n[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\n",
            expect: ":1:11: plugin nowhere/libx.so: no such file (looked at /",
        },
    ];
    let mut v: Vec<(String, String, &'static str)> = fixed
        .into_iter()
        .map(|c| (c.name.to_string(), c.text.to_string(), c.expect))
        .collect();
    let with_min = [
        (
            "unknown_key",
            "[train]\nepochz = 3\n",
            ":6:1: unknown field `epochz`",
        ),
        (
            "did_you_mean_key",
            "[train]\nbatchsize = 3\n",
            "did you mean `batch_size`?",
        ),
        (
            "unknown_strategy",
            "[[forgetting]]\ntype = \"naiv\"\n",
            "did you mean `naive`?",
        ),
        (
            "strategy_key",
            "[[forgetting]]\ntype = \"naive\"\nbogus_key = 1\n",
            ":7:1: unknown field `bogus_key`",
        ),
        ("no_type", "[[forgetting]]\nlambda = 1\n", "missing `type"),
        ("bad_scenario", "[run]\nseed = 1\n", ""),
        ("scenario_value", "", ""),
        (
            "negative_lr",
            "[optimizer]\nlr = -1.0\n",
            "learning rate -1 must be positive",
        ),
        (
            "zero_batch",
            "[train]\nbatch_size = 0\n",
            "must be at least 1",
        ),
        (
            "memory_unknown",
            "[[memory]]\ntype = \"checkpointt\"\n",
            "unknown memory strategy",
        ),
        (
            "bad_device",
            "[run]\ndevice = \"tpu\"\n",
            "unknown device `tpu`",
        ),
        (
            "wrong_table_type",
            "train = 3\n",
            "invalid type: integer `3`, expected struct TrainConfig",
        ),
        ("model_type", "", ""),
        ("too_many_tasks", "", ""),
        // Values once accepted and clamped or ignored (issue: nothing lost, never a panic).
        (
            "step_size_zero",
            "[[scheduler]]\ntype = \"lr\"\nschedule = \"step\"\nstep_size = 0\n",
            ":8:1: lr: step_size must be at least 1",
        ),
        (
            "threshold_nan",
            "[[scheduler]]\ntype = \"anomaly\"\nthreshold = nan\n",
            ":7:1: `threshold`: nan is not a finite number",
        ),
        (
            "momentum_under_adamw",
            "[optimizer]\ntype = \"adamw\"\nmomentum = 0.9\n",
            ":7:1: momentum is an SGD key; `adamw` does not use it",
        ),
    ];
    for (name, extra, expect) in with_min {
        let text = match name {
            // Duplicate [run] table.
            "bad_scenario" => format!("[run]\nseed = 2\n{MIN}{extra}"),
            "scenario_value" => MIN.replace(
                "\"fashion-mnist\"\n",
                "\"fashion-mnist\"\nscenario = \"online\"\n",
            ),
            "model_type" => MIN.replace("\"mlp\"", "\"transformerr\""),
            "wrong_table_type" => format!("{extra}{MIN}"),
            "too_many_tasks" => MIN.replace(
                "\"fashion-mnist\"\n",
                "\"fashion-mnist\"\ntasks = 7\nclasses_per_task = 2\n",
            ),
            _ => format!("{MIN}{extra}"),
        };
        let expect = match name {
            "bad_scenario" => "duplicate key",
            "scenario_value" => "unknown variant `online`",
            "model_type" => "unknown model `transformerr`",
            "too_many_tasks" => "7 tasks × 2 classes",
            _ => expect,
        };
        v.push((name.to_string(), text, expect));
    }
    v
}

#[test]
fn malformed_configs_are_positioned_typed_errors() {
    let d = tempfile::tempdir().unwrap();
    let cases = cases();
    assert!(cases.len() >= 10);
    for (name, text, expect) in cases {
        let f = d.path().join(format!("{name}.toml"));
        std::fs::write(&f, text.as_bytes()).unwrap();
        let out = d.path().join(format!("out-{name}"));
        let (code, msg) = run(&["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: exit code {code}, output:\n{msg}");
        assert!(!msg.contains("panicked"), "{name} panicked:\n{msg}");
        assert!(msg.contains(expect), "{name}: want `{expect}` in:\n{msg}");
        assert!(
            !out.exists(),
            "{name}: a bad config left {} behind",
            out.display()
        );
        // `validate` agrees with `run`.
        let (vcode, _) = run(&["validate", f.to_str().unwrap()]);
        assert_eq!(vcode, 2, "{name}: validate exit code");
    }
}

#[test]
fn missing_config_and_bad_overrides() {
    crate::util::require_fmnist!();
    let (code, msg) = run(&["run", "/nonexistent/x.toml"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("/nonexistent/x.toml"), "{msg}");
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "ok.toml", "");
    let (code, msg) = run(&["validate", f.to_str().unwrap(), "--set", "train.epochs"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("has no `=`"), "{msg}");
    let (code, msg) = run(&[
        "validate",
        f.to_str().unwrap(),
        "--set",
        "train.epochs=\"x\"",
    ]);
    assert_eq!(code, 2, "{msg}");
    // The override is named (not a line of the rewritten text), with how to write the type.
    assert!(
        msg.contains(
            "ok.toml: --set `train.epochs=\"x\"`: invalid type: string \"x\", expected usize"
        ),
        "{msg}"
    );
    assert!(msg.contains("hint: write a whole number"), "{msg}");
    // Also for a strategy key added by --set, checked when the strategy is built.
    let strategy = format!(
        "{}\n[[forgetting]]\ntype = \"replay\"\n",
        std::fs::read_to_string(&f).unwrap()
    );
    std::fs::write(&f, strategy).unwrap();
    // Each bad override is named with what is wrong (and a hint where one helps). The last
    // four cannot be applied as meant and are refused before anything is checked.
    for (set, want, hint) in [
        (
            "forgetting.0.update_logits=1",
            "invalid type: integer `1`, expected a boolean",
            "hint: write true or false",
        ),
        (
            "forgetting.0.selection=\"herd\"",
            "unknown variant `herd`",
            "hint: did you mean \"herding\"?",
        ),
        (
            "forgetting.0.capacityy=10",
            "unknown field `capacityy`",
            "hint: did you mean `capacity`?",
        ),
        ("optimizer.lr=.05", "`.05` is not a TOML value", "hint:"),
        (
            "train.epochs=3 # three",
            "`3 # three` is not a TOML value",
            "hint:",
        ),
        (
            "optimizer={type=\"adam\"}",
            "`optimizer` is a section of the file; replacing it whole would drop the keys it has",
            "hint: set its keys one by one",
        ),
        (
            "forgetting.0={type=\"ewc\"}",
            "an entry of `forgetting` cannot be replaced whole",
            "hint: set its keys one by one",
        ),
    ] {
        let (code, msg) = run(&["validate", f.to_str().unwrap(), "--set", set]);
        assert_eq!(code, 2, "{msg}");
        assert!(
            msg.contains(&format!("--set `{set}`: {want}")),
            "{set}: {msg}"
        );
        assert!(msg.contains(hint), "{set}: {msg}");
    }
    // A bare word is a string, and spaces around the key's parts do not matter.
    let (code, msg) = run(&[
        "validate",
        f.to_str().unwrap(),
        "--set",
        "run.device=cpu",
        "--set",
        "train. epochs = 2",
    ]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = run(&["validate", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("ok (2 tasks"), "{msg}");
}

#[test]
fn missing_dataset_says_how_to_get_it() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("mnist.toml");
    std::fs::write(&f, MIN.replace("fashion-mnist", "mnist")).unwrap();
    let (code, msg) = crate::util::output(
        crate::util::engram()
            .args([
                "run",
                f.to_str().unwrap(),
                "--out",
                d.path().join("o").to_str().unwrap(),
            ])
            .env("ENGRAM_DATA", d.path())
            .output()
            .unwrap(),
    );
    if std::path::Path::new("/usr/share/datasets/mnist/train-images-idx3-ubyte.gz").exists() {
        return; // MNIST is installed here: nothing is missing.
    }
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("dataset `mnist` not found"), "{msg}");
    assert!(msg.contains("engram data fetch mnist"), "{msg}");
    assert!(!d.path().join("o").exists());
}

#[test]
fn unknown_device_and_missing_backend() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "c.toml", "");
    let (code, msg) = run(&[
        "validate",
        f.to_str().unwrap(),
        "--set",
        "run.device=\"cuda\"",
    ]);
    if cfg!(feature = "cuda") {
        return;
    }
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("built without CUDA"), "{msg}");
}

#[test]
fn strategy_values_and_data_path_are_checked_with_positions() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[forgetting]]\ntype = \"ewc\"\nlambda = -5.0\n",
            ":7:1: ewc: lambda = -5 must be ≥ 0",
        ),
        (
            "[[forgetting]]\ntype = \"ewc\"\ngroups = [{pattern = \"(\", factor = 3.0}]\n",
            ":7:1: ewc: group `(`",
        ),
        (
            "[[forgetting]]\ntype = \"replay\"\nratio = 1e9\n",
            ":7:1: replay: ratio",
        ),
        (
            "[[forgetting]]\ntype = \"replay\"\nstrata = 0\n",
            ":7:1: replay: capacity and strata",
        ),
        (
            "[train]\nclip_norm = -1.0\n",
            ":6:1: clip_norm -1 must be a positive, finite number",
        ),
        ("[data]\n", "duplicate key"),
    ];
    for (i, (extra, expect)) in cases.iter().enumerate() {
        let f = d.path().join(format!("c{i}.toml"));
        std::fs::write(&f, format!("{MIN}{extra}")).unwrap();
        let (code, msg) = run(&["validate", f.to_str().unwrap()]);
        assert_eq!(code, 2, "{extra}: {msg}");
        assert!(msg.contains(expect), "{extra}: want `{expect}` in {msg}");
    }
    // A configured data path is the only place looked: a wrong one is an error, not a
    // silent fallback to the system copy.
    let f = d.path().join("p.toml");
    std::fs::write(
        &f,
        MIN.replace(
            "\"fashion-mnist\"\n",
            "\"fashion-mnist\"\npath = \"/nonexistent-dir\"\n",
        ),
    )
    .unwrap();
    let (code, msg) = run(&["validate", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("looked in: /nonexistent-dir)") && msg.contains("`[data] path` points here"),
        "{msg}"
    );
}

/// `--device D` that this build or machine lacks is the flag's error: it names the device and
/// does not blame the config's `device = "cpu"` line or `--set` overrides nobody gave.
#[test]
fn a_missing_device_blames_the_flag_not_the_config() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(d.path(), "dev.toml", "");
    for dev in ["tpu", "cuda"] {
        let (code, msg) = run(&[
            "run",
            f.to_str().unwrap(),
            "--device",
            dev,
            "--out",
            d.path().join("o").to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{msg}");
        assert!(
            msg.starts_with(&format!("error: device `{dev}`: ")),
            "{msg}"
        );
        assert!(!msg.contains("dev.toml") && !msg.contains("--set"), "{msg}");
    }
    assert!(!d.path().join("o").exists(), "nothing written");
}

/// Every numeric key of every registered strategy, fed NaN, ±inf, 0 and −1 (0 and −1 for whole
/// numbers): each value is a positioned error (exit 2, `file:line:column`), or one of the
/// zeros below, each with its documented meaning. A new key that takes a value without a
/// meaning makes this test fail until it is refused or listed here.
#[test]
fn every_numeric_strategy_key_refuses_non_finite_and_out_of_range_values() {
    // Zeros that mean something (the key's doc comment says what).
    let meaningful = [
        ("ewc", "fisher_samples", "all of the task's samples"),
        (
            "ewc",
            "gamma",
            "online EWC keeps only the last task's Fisher",
        ),
        ("ewc", "lambda", "no penalty"),
        ("ewc", "stiffness_cap", "the cap is off"),
        (
            "per-task-lora",
            "prototype_samples",
            "every training sample of the task",
        ),
        (
            "replay",
            "candidates",
            "every sample of the task is a candidate",
        ),
        (
            "replay",
            "balance_warmup",
            "class-balanced from the task's first step",
        ),
        ("replay", "distill", "no logit distillation"),
        ("derpp", "alpha", "no logit term"),
        ("derpp", "beta", "DER: no cross-entropy on memory rows"),
        ("replay", "min_per_task", "no floor on a task's share"),
        ("replay", "priority_alpha", "uniform drawing (p^0 = 1)"),
        ("replay", "priority_decay", "a priority is the last loss"),
        ("replay", "ratio", "no memory rows added"),
        (
            "checkpoint",
            "interval",
            "the model's default segment length",
        ),
        (
            "anomaly",
            "max_retries",
            "detect and record, never roll back",
        ),
        (
            "anomaly",
            "replay_step",
            "a retry leaves the replay ratio alone",
        ),
        ("anomaly", "threshold", "any drop below the best triggers"),
        ("lr", "final_lr", "the linear schedule ends at 0"),
        ("lr", "min_lr", "the cosine floor is 0"),
        ("lr", "warmup_steps", "no warm-up"),
        ("reg_warmup", "decay_epochs", "the boost ends at once"),
        ("reg_warmup", "epochs", "no hold at full strength"),
        ("replay_ratio", "end", "no replay on the last task"),
        ("replay_ratio", "start", "no replay on the second task"),
        (
            "o-lora",
            "lambda_l2",
            "no L2 term (the paper's released setting)",
        ),
        (
            "o-lora",
            "lambda_orth",
            "no orthogonality loss: one merged LoRA adapter a task",
        ),
        (
            "lora",
            "dropout",
            "no adapter dropout (Hu et al.'s setting)",
        ),
        ("mlp", "dropout", "no dropout"),
        ("moe-lora", "balance", "no load-balancing loss"),
        (
            "moe-lora",
            "routing_samples",
            "the routing table over all of a task's training inputs",
        ),
        ("vit", "dropout", "no dropout"),
        (
            "vit",
            "depth",
            "no encoder block: patch embedding and head only",
        ),
    ];
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("k.toml");
    let mut accepted = Vec::new();
    let mut tried = 0;
    for e in engram::registry().entries() {
        let kind = e.registration.factory.kind();
        let name = e.registration.name;
        let head = match kind {
            Kind::Model => format!("[model]\ntype = \"{name}\""),
            Kind::Dataset => continue,
            // The strategies on adapters need the lora entry their setting asks for.
            _ => {
                let lora = match name {
                    "o-lora" => "rank = 2\ntargets = [\"linear\"]\nmerge = \"task\"",
                    "per-task-lora" => "rank = 2\ntargets = [\"linear\"]",
                    "moe-lora" => "rank = 2\ntargets = [\"linear\"]\npath = \"activation\"",
                    _ => "",
                };
                let memory = if lora.is_empty() {
                    String::new()
                } else {
                    format!("[[memory]]\ntype = \"lora\"\n{lora}\n")
                };
                // lora's own keys on layers the MLP has.
                let own = if name == "lora" {
                    "\ntargets = [\"linear\"]"
                } else {
                    ""
                };
                format!(
                    "[model]\ntype = \"mlp\"\nhidden = [8]\n{memory}[[{kind}]]\ntype = \"{name}\"{own}"
                )
            }
        };
        for (key, default) in (e.registration.defaults)() {
            let values: &[&str] = match default {
                toml::Value::Float(_) => &["nan", "inf", "-inf", "0.0", "-1.0"],
                toml::Value::Integer(_) => &["0", "-1"],
                _ => continue,
            };
            for v in values {
                std::fs::write(
                    &f,
                    format!(
                        "[data]\ndataset = \"fashion-mnist\"\nsubsample = 100\n{head}\n{key} = {v}\n"
                    ),
                )
                .unwrap();
                tried += 1;
                let (code, msg) = run(&["validate", f.to_str().unwrap()]);
                assert!(!msg.contains("panicked"), "{name}.{key} = {v}: {msg}");
                match code {
                    0 => accepted.push((name.to_string(), key.to_string(), v.to_string())),
                    2 => assert!(
                        msg.contains(&format!("{}:", f.display())),
                        "{name}.{key} = {v}: not positioned: {msg}"
                    ),
                    c => panic!("{name}.{key} = {v}: exit {c}: {msg}"),
                }
            }
        }
    }
    assert!(tried > 100, "only {tried} values tried");
    for (name, key, v) in &accepted {
        assert!(
            (v == "0" || v == "0.0") && meaningful.iter().any(|(n, k, _)| n == name && k == key),
            "{name}.{key} = {v} is accepted without a documented meaning"
        );
    }
    // The list holds no stale entries.
    for (n, k, _) in meaningful {
        assert!(
            accepted.iter().any(|(name, key, _)| name == n && key == k),
            "{n}.{k}: listed as meaningful but 0 is refused or the key is gone"
        );
    }
}

/// Every reader of a user's file is bounded: a device or a directory given as a config, a
/// sweep file, a dataset file, `dataset.toml`, weights or a report is a typed error (exit 2)
/// naming it, read without a byte of `/dev/zero` (which would otherwise be read until the
/// memory is gone).
#[test]
fn devices_and_directories_given_as_files_are_refused_before_they_are_read() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let expect = |args: &[&str], needle: &str| {
        let (code, msg) = run(args);
        assert_eq!(code, 2, "{args:?}: {msg}");
        assert!(msg.contains(needle), "{args:?}: {msg}");
        assert!(msg.contains("not a regular file"), "{args:?}: {msg}");
    };
    expect(&["validate", "/dev/zero"], "/dev/zero");
    expect(
        &["run", d.path().to_str().unwrap()],
        &d.path().display().to_string(),
    );
    expect(&["sweep", "validate", "/dev/zero"], "/dev/zero");
    // The IDX files of a dataset directory, one of them a link to /dev/zero.
    let data = d.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for f in [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ] {
        let src = crate::util::fmnist_dir().join(format!("{f}.gz"));
        std::fs::copy(src, data.join(format!("{f}.gz"))).unwrap();
    }
    std::fs::remove_file(data.join("train-images-idx3-ubyte.gz")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", data.join("train-images-idx3-ubyte")).unwrap();
    let cfg = crate::util::small_config(d.path(), "c.toml", "");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "dataset = \"fashion-mnist\"\n",
        &format!(
            "dataset = \"fashion-mnist\"\npath = {:?}\n",
            data.to_str().unwrap()
        ),
    );
    std::fs::write(&cfg, text).unwrap();
    expect(
        &["validate", cfg.to_str().unwrap()],
        "train-images-idx3-ubyte",
    );
    // dataset.toml and weights.
    std::fs::remove_file(data.join("train-images-idx3-ubyte")).unwrap();
    std::fs::copy(
        crate::util::fmnist_dir().join("train-images-idx3-ubyte.gz"),
        data.join("train-images-idx3-ubyte.gz"),
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", data.join("dataset.toml")).unwrap();
    let npy = d.path().join("npy");
    let (code, msg) = run(&[
        "data",
        "export",
        "fashion-mnist",
        "--format",
        "idx",
        "--out",
        npy.to_str().unwrap(),
        "--from",
        "idx",
        "--path",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("dataset.toml") && msg.contains("not a regular file"),
        "{msg}"
    );
    std::fs::remove_file(data.join("dataset.toml")).unwrap();
    expect(
        &[
            "validate",
            cfg.to_str().unwrap(),
            "--set",
            "model.init=\"/dev/zero\"",
        ],
        "/dev/zero",
    );
    // A report.
    let run_dir = d.path().join("r");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run_dir.join("report.json")).unwrap();
    let (code, msg) = run(&["report", run_dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
}

/// `engram validate` on `MIN` plus `extra`, with `sets`.
fn validate_with(extra: &str, sets: &[&str]) -> (i32, String) {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("c.toml");
    std::fs::write(&cfg, format!("{MIN}{extra}")).unwrap();
    let mut args = vec!["validate", cfg.to_str().unwrap()];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (code, msg) = run(&args);
    assert!(
        !msg.contains("panicked") && !msg.contains("internal error"),
        "{msg}"
    );
    (code, msg)
}

#[test]
fn issue32_replay_ratio_start_1e308_refused_at_validation() {
    // It passed `validate`, then `run` died of `capacity overflow`.
    let (code, msg) = validate_with(
        "[[forgetting]]\ntype = \"replay\"\n[[scheduler]]\ntype = \"replay_ratio\"\nstart = 1e308\n",
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("c.toml:9:1"), "{msg}");
    assert!(msg.contains("start = 1e308 must be in [0, 10]"), "{msg}");
    let (code, msg) = validate_with(
        "[[scheduler]]\ntype = \"anomaly\"\nreplay_step = 1e308\n",
        &[],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("replay_step 1e308 must be in [0, 10]"),
        "{msg}"
    );
}

#[test]
fn issue32_set_on_a_missing_scheduler_entry_says_how_to_add_one() {
    let (code, msg) = validate_with("", &["scheduler.0.type=lr"]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("the config has no [[scheduler]] entry 0 (it has none)"),
        "{msg}"
    );
    assert!(msg.contains("add `[[scheduler]]`"), "{msg}");
    assert!(!msg.contains("OneOrMany"), "{msg}");
    let (code, msg) = validate_with(
        "[[forgetting]]\ntype = \"ewc\"\n",
        &["forgetting.1.lambda=5"],
    );
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("there is no entry 1 in `forgetting` (the file has 1"),
        "{msg}"
    );
}

#[test]
fn issue32_a_number_where_a_choice_goes_names_the_choices() {
    let (code, msg) = validate_with("activation = 1\n", &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("c.toml:5:14"), "{msg}");
    assert!(msg.contains("1 is not one of the choices here"), "{msg}");
    assert!(msg.contains("`relu`") && msg.contains("`tanh`"), "{msg}");
    assert!(!msg.contains("wanted string or table"), "{msg}");
    // A choice of the config itself, not of a component.
    let (code, msg) = validate_with("", &["data.scenario=3"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("`class-incremental`"), "{msg}");
}

#[test]
fn issue32_task_settings_that_deal_no_class_say_what_to_change() {
    for (set, want) in [
        ("data.tasks=0", "tasks = 0 leaves nothing to train"),
        (
            "data.classes_per_task=0",
            "classes_per_task = 0 gives a task no class",
        ),
        (
            "data.class_order=[]",
            "class_order = [] deals no class to any task",
        ),
    ] {
        let (code, msg) = validate_with("", &[set]);
        assert_eq!(code, 2, "{set}: {msg}");
        assert!(msg.contains(want), "{set}: {msg}");
        assert!(msg.contains("hint:"), "{set}: {msg}");
    }
}

#[test]
fn issue32_huge_numbers_and_long_strings_are_shortened_in_messages() {
    let (code, msg) = validate_with("", &["optimizer.lr=-1e308"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("-1e308"), "{msg}");
    assert!(!msg.contains("0000000000"), "{msg}");
    let long = format!("[[forgetting]]\ntype = \"{}\"\n", "x".repeat(100_000));
    let (code, msg) = validate_with(&long, &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.len() < 2_000, "{} bytes: {}", msg.len(), &msg[..300]);
    assert!(msg.contains("(100000 characters)"), "{msg}");
}

/// Issue #32, second hostile pass: a list of hundreds of `[[forgetting]]` entries (each an EMA
/// with a copy of the weights) grew to gigabytes and aborted; it is refused at validation, at
/// the entry past the limit, with what to change.
#[test]
fn issue32_a_strategy_list_past_its_limit_is_refused_at_the_entry() {
    let many = "[[forgetting]]\ntype = \"ema\"\n".repeat(17);
    let (code, msg) = validate_with(&many, &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(
        msg.contains("17 [[forgetting]] entries; engram composes at most 16"),
        "{msg}"
    );
    // The 17th entry's `type` value: after MIN's lines, on the 34th line of the entries.
    let line = MIN.lines().count() + 34;
    assert!(msg.contains(&format!("c.toml:{line}:")), "{msg}");
    let (code, msg) = validate_with(&"[[forgetting]]\ntype = \"ema\"\n".repeat(16), &[]);
    assert_eq!(code, 0, "{msg}");
}

/// Issue #32, second hostile pass: a path thousands of characters long, echoed by an OS error,
/// is cut in the message like a long value.
#[test]
fn issue32_a_very_long_path_is_cut_in_the_message() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("c.toml");
    std::fs::write(&cfg, MIN).unwrap();
    let long = "p".repeat(5000);
    let (code, msg) = run(&["--plugin", &long, "validate", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.len() < 600, "{} bytes", msg.len());
    assert!(
        msg.contains("(5000 characters)") || msg.contains("(5001 characters)"),
        "{msg}"
    );
}
