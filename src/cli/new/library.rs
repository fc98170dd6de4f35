//! `engram new library NAME`: a program of one's own that uses engram as a library (the facade
//! crate `engram`: `engram::Experiment`, `engram::core`, `engram::strategies`).
//!
//! Unlike a plugin it cannot share engram's compiled build: the facade is the root package of
//! engram's workspace, a position no other workspace can give it, so cargo would compile
//! engram-core again under another identity and, in engram's target directory, write it over
//! the `libengram_core.so` the `engram` binary loads. The crate therefore builds in a target
//! directory of its own (the first build compiles Burn and engram), with engram's profiles,
//! `Cargo.lock` and `-C prefer-dynamic`, and engram's `build.rs`, which gives the program a run
//! path to `libengram_core.so` and the toolchain's `libstd`.

use super::{
    BUILT_CARGO_CONFIG, BUILT_LOCK, BUILT_MANIFEST, engram_file, resolve, rustflags, toml_sections,
};
use clap::Args;
use engram::core::{Error, Result};
use std::path::PathBuf;

/// engram's build script and smallest library program as they were when this binary was built.
const BUILT_BUILD_RS: &str = include_str!("../../../build.rs");
const LIBRARY_EXAMPLE: &str = include_str!("../../../examples/library.rs");

/// `engram new library`'s arguments.
#[derive(Args)]
pub struct LibraryArgs {
    /// The crate's name (a lowercase letter, then lowercase letters, digits, `-` or `_`).
    name: String,
    /// The directory to write (default `./NAME`); it must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// engram's source tree, which the crate depends on (default: the tree this binary was
    /// built from, while it exists).
    #[arg(long, value_name = "PATH")]
    engram: Option<PathBuf>,
}

/// Everything a library crate is written from, resolved from the arguments.
#[derive(Debug)]
pub struct LibraryPlan {
    /// The crate's name.
    pub name: String,
    /// The directory to write.
    pub dir: PathBuf,
    /// engram's source tree (absolute), when known.
    pub engram: Option<PathBuf>,
}

impl LibraryPlan {
    /// Resolves the arguments (the checks of `engram new plugin`).
    ///
    /// # Errors
    /// [`Error::Usage`] (exit code 2) for a bad name, a directory that holds files, or an
    /// `--engram` that is not an engram source tree.
    pub fn from_args(a: &LibraryArgs) -> Result<Self> {
        let (dir, engram) = resolve(&a.name, a.dir.as_deref(), a.engram.as_deref())?;
        Ok(Self {
            name: a.name.clone(),
            dir,
            engram,
        })
    }

    /// Writes the crate: `Cargo.toml`, `Cargo.lock`, `.cargo/config.toml`, `build.rs`,
    /// `src/main.rs`, `README.md` and `.gitignore`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be written; [`Error::Other`] when engram's
    /// manifest cannot be read as TOML.
    pub fn write(&self) -> Result<()> {
        let e = self.engram.as_deref();
        let files = [
            (
                "Cargo.toml",
                self.cargo_toml(&engram_file(e, "Cargo.toml", BUILT_MANIFEST))?,
            ),
            ("Cargo.lock", engram_file(e, "Cargo.lock", BUILT_LOCK)),
            (".cargo/config.toml", self.cargo_config(e)?),
            ("build.rs", engram_file(e, "build.rs", BUILT_BUILD_RS)),
            ("src/main.rs", self.main_rs()),
            ("README.md", self.readme()),
            (".gitignore", "/target\n".to_string()),
        ];
        super::write_files(&self.dir, &files)
    }

    /// `Cargo.toml`: a binary crate depending on the facade by path, with engram's profiles,
    /// standalone (an empty `[workspace]`).
    ///
    /// # Errors
    /// [`Error::Other`] when `manifest` (engram's) or the result is not valid TOML.
    pub fn cargo_toml(&self, manifest: &str) -> Result<String> {
        toml::from_str::<toml::Table>(manifest)
            .map_err(|e| Error::Other(format!("engram's Cargo.toml: {e}")))?;
        let dep = match &self.engram {
            Some(e) => format!(
                "engram = {{ path = {} }}\n",
                toml::Value::String(e.display().to_string())
            ),
            None => "# Set this to engram's source tree:\n\
                     engram = { path = \"/path/to/engram\" }\n"
                .to_string(),
        };
        let mut out = format!(
            "# `{name}`: a program that uses engram as a library, written by `engram new library`\n\
             # (engram {version}). Build it with `cargo build --release` (README.md): the first build\n\
             # compiles Burn and engram in this crate's own target directory.\n\n\
             [package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\n\
             # The facade crate: engram::Experiment, engram::core (with engram::core::burn, the\n\
             # Burn engram is built with: never add `burn` yourself), engram::strategies.\n\
             {dep}serde = {{ version = \"1\", features = [\"derive\"] }}\n\n\
             # A workspace of its own, even inside another project's directory.\n[workspace]\n\n\
             # engram's profiles, copied from its Cargo.toml: one release profile for building\n\
             # and testing, which engram's compiled crates share.\n",
            name = self.name,
            version = env!("CARGO_PKG_VERSION"),
        );
        for (header, text) in toml_sections(manifest) {
            if header.starts_with("profile.") {
                out.push_str(&text);
                out.push('\n');
            }
        }
        out.push_str(&patch_table(manifest, self.engram.as_deref())?);
        toml::from_str::<toml::Table>(&out)
            .map_err(|e| Error::Other(format!("the crate's Cargo.toml would be invalid: {e}")))?;
        Ok(out)
    }

    /// `.cargo/config.toml`: engram's `rustflags` (`-C prefer-dynamic`), and why the target
    /// directory is the crate's own.
    fn cargo_config(&self, engram: Option<&std::path::Path>) -> Result<String> {
        let flags = rustflags(&engram_file(
            engram,
            ".cargo/config.toml",
            BUILT_CARGO_CONFIG,
        ))?;
        Ok(format!(
            "[build]\n\
             # engram-core is a Rust dylib: a program that links it must link std dynamically\n\
             # too. A RUSTFLAGS environment variable replaces this line: add `-C prefer-dynamic`\n\
             # to it when you set one.\n\
             rustflags = {flags}\n\
             # The target directory is this crate's own (./target). Not engram's: there cargo\n\
             # would compile engram-core again and overwrite the libengram_core.so the engram\n\
             # binary loads.\n"
        ))
    }

    /// `src/main.rs`: engram's `examples/library.rs` (the book's smallest library program, from
    /// the tree the crate depends on, else the copy built into this binary) under a header of
    /// its own, without the book's anchors.
    pub fn main_rs(&self) -> String {
        let example = engram_file(
            self.engram.as_deref(),
            "examples/library.rs",
            LIBRARY_EXAMPLE,
        );
        let body: Vec<&str> = example
            .lines()
            .skip_while(|l| l.starts_with("//!"))
            .filter(|l| !l.trim_start().starts_with("// ANCHOR"))
            .collect();
        format!(
            "//! `{}`: engram as a library, written by `engram new library` from engram's\n\
             //! `examples/library.rs`: a model, data, EWC and replay as typed Rust values, a run\n\
             //! and its metrics. Run it with `cargo run --release`.\n{}\n",
            self.name,
            body.join("\n")
        )
    }

    /// The crate's README.
    fn readme(&self) -> String {
        format!(
            "# {name}\n\n\
             A program that uses engram as a library, written by `engram new library`.\n\n\
             ```sh\n\
             cargo build --release   # the first build compiles Burn and engram (minutes)\n\
             target/release/{name}   # starts without LD_LIBRARY_PATH (build.rs)\n\
             ```\n\n\
             It depends on engram's facade crate by path and shares its build settings:\n\
             engram's profiles in `Cargo.toml`, its `Cargo.lock`, `-C prefer-dynamic` in\n\
             `.cargo/config.toml` (engram-core is a Rust dylib) and its `build.rs` (a run path\n\
             to `libengram_core.so` and the toolchain's `libstd`). Build in this crate's own\n\
             target directory, never engram's. Use Burn through `engram::core::burn` only;\n\
             `#[derive(Module)]` needs `use engram::core::burn;` in scope, because the derive\n\
             writes `burn::…` paths. The book's chapters \"engram as a library\" and \"Engram\n\
             from your own crate\" say more.\n",
            name = self.name
        )
    }

    /// What `engram new library` prints once the crate is written.
    pub fn next_steps(&self) -> String {
        let mut s = format!("wrote {} (program `{}`)\n", self.dir.display(), self.name);
        match &self.engram {
            Some(e) => s.push_str(&format!("  depends on engram at {}\n", e.display())),
            None => s.push_str(
                "  engram's source tree is unknown: set `engram = { path = … }` in Cargo.toml\n",
            ),
        }
        s.push_str(&format!(
            "next:\n  cd {}\n  cargo build --release   # compiles Burn and engram once (minutes)\n  \
             target/release/{}\n",
            self.dir.display(),
            self.name
        ));
        s
    }
}

/// The `[patch.crates-io]` table of engram's `manifest` with each patched crate's `path` made
/// absolute under `engram`'s source tree (`/path/to/engram/…` when it is unknown), so that the
/// crate builds the same patched Burn as engram does: a `[patch]` of a dependency's manifest is
/// ignored by cargo. Empty when engram patches nothing.
///
/// # Errors
/// [`Error::Other`] when `manifest` is not TOML.
fn patch_table(manifest: &str, engram: Option<&std::path::Path>) -> Result<String> {
    let parsed: toml::Table =
        toml::from_str(manifest).map_err(|e| Error::Other(format!("engram's Cargo.toml: {e}")))?;
    let Some(mut patch) = parsed.get("patch").and_then(toml::Value::as_table).cloned() else {
        return Ok(String::new());
    };
    let root = engram.map_or_else(|| PathBuf::from("/path/to/engram"), PathBuf::from);
    for crates in patch.iter_mut().filter_map(|(_, v)| v.as_table_mut()) {
        for spec in crates.iter_mut().filter_map(|(_, v)| v.as_table_mut()) {
            if let Some(rel) = spec.get("path").and_then(toml::Value::as_str) {
                let abs = root.join(rel).display().to_string();
                spec.insert("path".into(), toml::Value::String(abs));
            }
        }
    }
    let mut table = toml::Table::new();
    table.insert("patch".into(), toml::Value::Table(patch));
    let text = toml::to_string(&table)
        .map_err(|e| Error::Other(format!("engram's [patch] table: {e}")))?;
    Ok(format!(
        "# The Burn crates engram builds patched (engram's vendor/), so that this crate\n\
         # computes what engram computes, as fast.\n{text}"
    ))
}
