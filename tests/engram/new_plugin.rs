//! `engram new plugin`: the crate it writes, without building it (CI's `.ci/outside-crate.sh`
//! builds one of each kind against the workspace and runs it): the manifest is valid TOML that
//! asks for a `dylib` on engram-core through the link `core` with engram's own workspace tables
//! and profile, the build settings are the workspace's, and the sample experiment is a config
//! that `engram validate` checks.

use crate::util::run;
use std::path::{Path, PathBuf};

/// The workspace root (engram's source tree).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory of the binary under test (`T` of `T/release/engram`).
fn target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_engram"))
        .canonicalize()
        .unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn toml_of(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Writes a plugin crate of `kind` named `name` under `dir`; returns its directory.
fn generate(dir: &Path, name: &str, kind: &str) -> PathBuf {
    let out = dir.join(name);
    let (code, text) = run(&[
        "new",
        "plugin",
        name,
        "--kind",
        kind,
        "--dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("cargo build --release"), "{text}");
    out
}

#[test]
fn the_crate_shares_the_workspace_s_build() {
    let tmp = tempfile::tempdir().unwrap();
    let krate = generate(tmp.path(), "my-anchor", "forgetting");
    let manifest = toml_of(&krate.join("Cargo.toml"));
    let ours = toml_of(&root().join("Cargo.toml"));
    assert_eq!(manifest["package"]["name"].as_str(), Some("my-anchor"));
    assert_eq!(
        manifest["lib"]["crate-type"],
        toml::Value::from(vec!["dylib"])
    );
    let deps = manifest["dependencies"].as_table().unwrap();
    assert_eq!(deps["engram-core"]["path"].as_str(), Some("core"));
    assert!(!deps.contains_key("burn") && !deps.contains_key("engram-strategies"));
    // engram-core inherits from these and the profile is part of every crate's identity: any
    // difference would compile engram-core again.
    assert_eq!(manifest["profile"], ours["profile"]);
    for table in ["package", "dependencies", "resolver"] {
        assert_eq!(
            manifest["workspace"][table], ours["workspace"][table],
            "{table}"
        );
    }
    // The links `core` and `vendor` are the workspace's engram-core and patched Burn crates,
    // which the copied [patch.crates-io] names at the same relative paths.
    assert_eq!(manifest["patch"], ours["patch"]);
    for link in ["core", "vendor"] {
        assert_eq!(
            krate.join(link).canonicalize().unwrap(),
            root().join(link).canonicalize().unwrap(),
            "{link}"
        );
        assert!(
            std::fs::symlink_metadata(krate.join(link))
                .unwrap()
                .is_symlink(),
            "{link}"
        );
    }
    // The workspace's lock file, `-C prefer-dynamic` and target directory.
    assert_eq!(
        std::fs::read(krate.join("Cargo.lock")).unwrap(),
        std::fs::read(root().join("Cargo.lock")).unwrap()
    );
    let config = toml_of(&krate.join(".cargo/config.toml"));
    assert_eq!(
        config["build"]["rustflags"],
        toml_of(&root().join(".cargo/config.toml"))["build"]["rustflags"]
    );
    assert_eq!(
        config["build"]["target-dir"].as_str().map(PathBuf::from),
        Some(target_dir())
    );
    let lib = std::fs::read_to_string(krate.join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("engram_core::component!(forgetting \"my-anchor\"")
            && lib.contains("engram_core::declare_plugin!(register);"),
        "{lib}"
    );
    assert!(!lib.contains("{{"), "an unreplaced placeholder:\n{lib}");
    let readme = std::fs::read_to_string(krate.join("README.md")).unwrap();
    assert!(
        readme.contains("# my-anchor") && !readme.contains("{{"),
        "{readme}"
    );
}

/// `cfg` with its `plugins` line removed and `from` replaced by `to`.
fn without_plugin(cfg: &Path, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(cfg).unwrap();
    assert!(text.contains(from), "{text}");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("plugins = "))
        .collect();
    let out = cfg.with_file_name("built-in.toml");
    std::fs::write(&out, kept.join("\n").replace(from, to)).unwrap();
    out
}

#[test]
fn the_sample_experiment_loads_the_plugin_and_validates() {
    let tmp = tempfile::tempdir().unwrap();
    let lib_dir = target_dir().join("release");
    for (kind, name, component, builtin) in [
        (
            "forgetting",
            "t-anchor",
            "type = \"t-anchor\"\nlambda = 1.0",
            "type = \"ewc\"",
        ),
        (
            "model",
            "t-model",
            "type = \"t-model\"\nhidden = 128",
            "type = \"mlp\"\nhidden = [128]",
        ),
        ("memory", "t-timer", "[[memory]]\ntype = \"t-timer\"", ""),
        (
            "scheduler",
            "t-decay",
            "type = \"t-decay\"\ngamma = 0.8",
            "type = \"constant\"",
        ),
    ] {
        let krate = generate(tmp.path(), name, kind);
        let cfg = krate.join("experiment.toml");
        let config = toml_of(&cfg);
        let lib = lib_dir.join(format!("lib{}.so", name.replace('-', "_")));
        assert_eq!(
            config["plugins"],
            toml::Value::from(vec![lib.display().to_string()]),
            "{kind}"
        );
        let lib_rs = std::fs::read_to_string(krate.join("src/lib.rs")).unwrap();
        assert!(
            lib_rs.contains(&format!("engram_core::component!({kind} \"{name}\"")),
            "{lib_rs}"
        );
        // Not built here: `engram validate` refuses the config, naming the library to build.
        let (code, text) = run(&["validate", cfg.to_str().unwrap()]);
        assert_eq!(code, 2, "{kind}: {text}");
        assert!(text.contains(&lib.display().to_string()), "{kind}: {text}");
        // Everything but the plugin's own lines is a valid experiment.
        let plain = without_plugin(&cfg, component, builtin);
        let (code, text) = run(&["validate", plain.to_str().unwrap(), "--quiet"]);
        assert_eq!(code, 0, "{kind}: {text}");
    }
}

#[test]
fn bad_arguments_are_refused_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("x");
    let d = dir.to_str().unwrap();
    for (args, says) in [
        (
            vec!["new", "plugin", "My Plugin", "--dir", d],
            "cannot name a plugin",
        ),
        (vec!["new", "plugin", "core", "--dir", d], "taken"),
        (
            vec![
                "new",
                "plugin",
                "ok",
                "--dir",
                d,
                "--engram",
                "/nonexistent",
            ],
            "not an engram source tree",
        ),
    ] {
        let (code, text) = run(&args);
        assert_eq!(code, 2, "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!dir.exists(), "{args:?} wrote {d}");
    }
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let (code, text) = run(&["new", "plugin", "ok", "--dir", d]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("not empty"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn the_library_crate_depends_on_the_facade_with_engram_s_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let krate = tmp.path().join("my-study");
    let (code, text) = run(&[
        "new",
        "library",
        "my-study",
        "--dir",
        krate.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let manifest = toml_of(&krate.join("Cargo.toml"));
    let ours = toml_of(&root().join("Cargo.toml"));
    assert_eq!(manifest["package"]["name"].as_str(), Some("my-study"));
    assert_eq!(
        manifest["dependencies"]["engram"]["path"]
            .as_str()
            .map(|p| PathBuf::from(p).canonicalize().unwrap()),
        Some(root().canonicalize().unwrap())
    );
    assert!(
        !manifest["dependencies"]
            .as_table()
            .unwrap()
            .contains_key("burn")
    );
    assert_eq!(manifest["profile"], ours["profile"]);
    assert_eq!(
        manifest["workspace"],
        toml::Value::Table(toml::Table::new())
    );
    // engram's patched Burn crates, by absolute path (a dependency's [patch] is ignored).
    let ours_patch = ours["patch"]["crates-io"].as_table().unwrap();
    let patch = manifest["patch"]["crates-io"].as_table().unwrap();
    assert_eq!(
        patch.keys().collect::<Vec<_>>(),
        ours_patch.keys().collect::<Vec<_>>()
    );
    for (name, spec) in ours_patch {
        let rel = spec["path"].as_str().unwrap();
        assert_eq!(
            PathBuf::from(patch[name]["path"].as_str().unwrap())
                .canonicalize()
                .unwrap(),
            root().join(rel).canonicalize().unwrap(),
            "{name}"
        );
    }
    // Its own target directory (not engram's), engram's flags, lock file and build script.
    let config = toml_of(&krate.join(".cargo/config.toml"));
    assert!(config["build"].get("target-dir").is_none());
    assert_eq!(
        config["build"]["rustflags"],
        toml_of(&root().join(".cargo/config.toml"))["build"]["rustflags"]
    );
    for same in ["Cargo.lock", "build.rs"] {
        assert_eq!(
            std::fs::read(krate.join(same)).unwrap(),
            std::fs::read(root().join(same)).unwrap(),
            "{same}"
        );
    }
    // The program is the workspace's compiled example, without the book's anchors.
    let main = std::fs::read_to_string(krate.join("src/main.rs")).unwrap();
    let example = std::fs::read_to_string(root().join("examples/library.rs")).unwrap();
    assert!(
        main.starts_with("//! `my-study`: engram as a library"),
        "{main}"
    );
    assert!(
        !main.contains("ANCHOR") && main.contains("fn main()"),
        "{main}"
    );
    let code_lines = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("//!") && !l.contains("// ANCHOR"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(code_lines(&main), code_lines(&example));
}
