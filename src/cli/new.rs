//! `engram new plugin NAME`: writes a plugin crate outside engram's workspace that builds
//! against this engram without compiling Burn or engram-core a second time
//! (`engram new library NAME`, a program using engram as a library: [`library`]).
//!
//! # Why the crate looks the way it does
//!
//! A plugin must link the very `libengram_core.so` the `engram` binary loads (the loader
//! compares build ids, then binds every symbol; see `engram_core::plugin`). Cargo names that
//! library without a hash and gives each compiled crate an identity (`-C metadata`) that, for a
//! path dependency, hashes the package's path *relative to the workspace root*. engram-core is
//! `core` in engram's workspace, so the generated crate is a workspace of its own whose
//! dependency `engram-core = { path = "core" }` goes through a symbolic link `core` → engram's
//! `core/`: same relative path, same features (the workspace tables are copied from engram's
//! `Cargo.toml`: engram-core inherits its version and dependencies from them), same profile,
//! same `-C prefer-dynamic`, same `Cargo.lock` and the same target directory (set in the crate's
//! `.cargo/config.toml`). Cargo then finds engram-core and Burn fresh and compiles the new crate
//! alone (measured: 7 to 12 s on two cores). A plain path dependency on `/path/to/engram/core` instead compiles
//! engram-core again under another identity and writes it over engram's `libengram_core.so`,
//! after which the `engram` binary no longer starts (`undefined symbol`).

use super::Cli;
use clap::{Args, Subcommand, ValueEnum};
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use std::path::{Path, PathBuf};

pub mod library;

/// `engram new`'s arguments.
#[derive(Args)]
pub struct NewArgs {
    #[command(subcommand)]
    what: NewCommand,
}

#[derive(Subcommand)]
enum NewCommand {
    /// Write a plugin crate (a model or strategy the stock `engram` loads) that builds against
    /// this engram's compiled engram-core: `cargo build --release` compiles the new crate only.
    Plugin(PluginArgs),
    /// Write a program that uses engram as a library (`engram::Experiment`); it builds in a
    /// target directory of its own (the first build compiles Burn and engram).
    Library(library::LibraryArgs),
}

/// What a generated plugin registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PluginKind {
    /// A model (`[model] type = NAME`): one hidden layer on the flattened input.
    Model,
    /// A forgetting strategy (`[[forgetting]]`): an L2 pull towards the last task's weights.
    Forgetting,
    /// A memory strategy (`[[memory]]`): times every step, reports the mean.
    Memory,
    /// A scheduler (`[[scheduler]]`): the learning rate times `gamma` at every task.
    Scheduler,
}

impl PluginKind {
    /// The kind's word in configs and messages (`model`, `forgetting`, …).
    fn word(self) -> &'static str {
        match self {
            PluginKind::Model => "model",
            PluginKind::Forgetting => "forgetting",
            PluginKind::Memory => "memory",
            PluginKind::Scheduler => "scheduler",
        }
    }

    /// The template of `src/lib.rs` (`{{name}}` stands for the plugin's name).
    fn template(self) -> &'static str {
        match self {
            PluginKind::Model => include_str!("new/model.rs.tmpl"),
            PluginKind::Forgetting => include_str!("new/forgetting.rs.tmpl"),
            PluginKind::Memory => include_str!("new/memory.rs.tmpl"),
            PluginKind::Scheduler => include_str!("new/scheduler.rs.tmpl"),
        }
    }

    /// The sample experiment's lines that use the component `name` (and the model, unless the
    /// plugin is one).
    fn experiment_tables(self, name: &str) -> String {
        let mlp = "[model]\ntype = \"mlp\"\nhidden = [400, 400]\n";
        match self {
            PluginKind::Model => format!("[model]\ntype = \"{name}\"\nhidden = 128\n"),
            PluginKind::Forgetting => {
                format!("{mlp}\n[[forgetting]]\ntype = \"{name}\"\nlambda = 1.0\n")
            }
            PluginKind::Memory => format!("{mlp}\n[[memory]]\ntype = \"{name}\"\n"),
            PluginKind::Scheduler => {
                format!("{mlp}\n[[scheduler]]\ntype = \"{name}\"\ngamma = 0.8\n")
            }
        }
    }
}

/// `engram new plugin`'s arguments.
#[derive(Args)]
pub struct PluginArgs {
    /// The crate's name, also the component's (`type = "NAME"`): a lowercase letter, then
    /// lowercase letters, digits, `-` or `_` (at most 64).
    name: String,
    /// The directory to write (default `./NAME`); it must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// What the plugin registers.
    #[arg(long, value_enum, default_value = "forgetting")]
    kind: PluginKind,
    /// engram's source tree, whose `core/` the crate builds against (default: the tree this
    /// binary was built from, while it exists).
    #[arg(long, value_name = "PATH")]
    engram: Option<PathBuf>,
    /// The cargo target directory holding the compiled engram-core the binary loads (default:
    /// the one this binary runs from, else ENGRAM/target).
    #[arg(long = "target-dir", value_name = "DIR")]
    target_dir: Option<PathBuf>,
}

/// The source tree this binary was built from.
const BUILT_FROM: &str = env!("CARGO_MANIFEST_DIR");
/// engram's workspace manifest and lock file as they were when this binary was built: used
/// when the source tree is gone.
const BUILT_MANIFEST: &str = include_str!("../../Cargo.toml");
const BUILT_LOCK: &str = include_str!("../../Cargo.lock");
const BUILT_CARGO_CONFIG: &str = include_str!("../../.cargo/config.toml");

/// `engram new`: dispatches to the thing to write.
pub fn new(cli: &Cli, _registry: &Registry, args: &NewArgs) -> Result<()> {
    match &args.what {
        NewCommand::Plugin(p) => {
            let plan = PluginPlan::from_args(p)?;
            plan.write()?;
            if !cli.quiet {
                print!("{}", plan.next_steps());
            }
            Ok(())
        }
        NewCommand::Library(l) => {
            let plan = library::LibraryPlan::from_args(l)?;
            plan.write()?;
            if !cli.quiet {
                print!("{}", plan.next_steps());
            }
            Ok(())
        }
    }
}

/// Everything a plugin crate is written from, resolved from the arguments.
#[derive(Debug)]
pub struct PluginPlan {
    /// The crate's and the component's name.
    pub name: String,
    /// What it registers.
    pub kind: PluginKind,
    /// The directory to write.
    pub dir: PathBuf,
    /// engram's source tree (absolute), when known.
    pub engram: Option<PathBuf>,
    /// The target directory (absolute), when known.
    pub target_dir: Option<PathBuf>,
}

/// Checks a plugin name: a cargo package name that is also a short component name.
///
/// # Errors
/// [`Error::Usage`] (exit code 2) naming the rule it breaks.
pub fn check_name(name: &str) -> Result<()> {
    let ok_start = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok_start || !ok_chars || name.len() > 64 {
        return Err(Error::Usage(format!(
            "`{name}` cannot name a plugin: use a lowercase letter, then lowercase letters, \
             digits, `-` or `_`, at most 64 in all (for example `my-strategy`)"
        )));
    }
    // Crate names of the standard library and engram's own packages would clash with theirs.
    let taken = [
        "core",
        "std",
        "alloc",
        "test",
        "proc_macro",
        "engram",
        "engram-core",
    ];
    if taken.contains(&name) || name.starts_with("engram-") || name.starts_with("engram_") {
        return Err(Error::Usage(format!(
            "`{name}` is taken by Rust's or engram's own crates: choose another plugin name"
        )));
    }
    Ok(())
}

/// Whether `dir` is an engram source tree (its `core/Cargo.toml` is engram-core's).
fn is_engram_tree(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("core/Cargo.toml"))
        .is_ok_and(|t| t.contains("name = \"engram-core\""))
}

/// The target directory of the running binary: `T` when it is `T/release/engram` beside
/// `T/release/libengram_core.so`.
fn target_of_running_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let release = exe.parent()?;
    let lib = format!(
        "{}engram_core{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    (release.file_name()? == "release" && release.join(lib).is_file())
        .then(|| release.parent().map(Path::to_path_buf))
        .flatten()
}

/// `path` made absolute against the current directory (not resolving links).
fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(|e| Error::io(path, e))
}

/// The checks and defaults every `engram new` command shares: the name ([`check_name`]), the
/// directory to write (absolute; `./NAME` by default; absent or empty) and engram's source tree
/// (`--engram`, else the tree this binary was built from while it exists).
///
/// # Errors
/// [`Error::Usage`] (exit code 2) for a bad name, a directory that holds files, or an
/// `--engram` that is not an engram source tree.
fn resolve(
    name: &str,
    dir: Option<&Path>,
    engram: Option<&Path>,
) -> Result<(PathBuf, Option<PathBuf>)> {
    check_name(name)?;
    let dir = absolute(dir.unwrap_or(Path::new(name)))?;
    if dir.exists() {
        let empty = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(&dir, e))?
            .next()
            .is_none();
        if !empty {
            return Err(Error::Usage(format!(
                "{} exists and is not empty: give `--dir` a new directory",
                dir.display()
            )));
        }
    }
    let engram = match engram {
        Some(p) if is_engram_tree(p) => Some(absolute(p)?),
        Some(p) => {
            return Err(Error::Usage(format!(
                "--engram {}: not an engram source tree (no core/Cargo.toml of engram-core)",
                p.display()
            )));
        }
        None => Some(PathBuf::from(BUILT_FROM)).filter(|p| is_engram_tree(p)),
    };
    Ok((dir, engram))
}

/// Writes `files` (paths relative to `dir`, and their text), creating directories.
///
/// # Errors
/// [`Error::Io`] naming the file that could not be written.
fn write_files(dir: &Path, files: &[(&str, String)]) -> Result<()> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// A file of engram's tree `engram`, or the copy `built` into this binary when the tree is
/// unknown or lacks it.
fn engram_file(engram: Option<&Path>, rel: &str, built: &'static str) -> String {
    engram
        .and_then(|e| std::fs::read_to_string(e.join(rel)).ok())
        .unwrap_or_else(|| built.to_string())
}

impl PluginPlan {
    /// Resolves the arguments: checks the name, the directory (absent or empty) and
    /// `--engram`, and finds the defaults of the source tree and the target directory.
    ///
    /// # Errors
    /// [`Error::Usage`] (exit code 2) for a bad name, a directory that holds files, or an
    /// `--engram` that is not an engram source tree.
    pub fn from_args(a: &PluginArgs) -> Result<Self> {
        let (dir, engram) = resolve(&a.name, a.dir.as_deref(), a.engram.as_deref())?;
        let target_dir = match &a.target_dir {
            Some(t) => Some(absolute(t)?),
            None => {
                target_of_running_binary().or_else(|| engram.as_ref().map(|e| e.join("target")))
            }
        };
        Ok(Self {
            name: a.name.clone(),
            kind: a.kind,
            dir,
            engram,
            target_dir,
        })
    }

    /// The file name of the library `cargo build --release` makes (`lib<name, - as _>.so`).
    pub fn library_file(&self) -> String {
        format!(
            "{}{}{}",
            std::env::consts::DLL_PREFIX,
            self.name.replace('-', "_"),
            std::env::consts::DLL_SUFFIX
        )
    }

    /// Where the built library will be: `TARGET/release/<library_file>` (a bare file name when
    /// the target directory is unknown).
    pub fn library_path(&self) -> PathBuf {
        match &self.target_dir {
            Some(t) => t.join("release").join(self.library_file()),
            None => PathBuf::from(self.library_file()),
        }
    }

    /// A file of engram's tree, or the copy built into this binary.
    fn engram_file(&self, rel: &str, built: &'static str) -> String {
        engram_file(self.engram.as_deref(), rel, built)
    }

    /// Writes the crate: `Cargo.toml`, `.cargo/config.toml`, `Cargo.lock`, `src/lib.rs`,
    /// `experiment.toml`, `README.md`, `.gitignore` and the links [`LINKS`] (when engram's tree
    /// is known).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be written.
    pub fn write(&self) -> Result<()> {
        let manifest = self.engram_file("Cargo.toml", BUILT_MANIFEST);
        let files = [
            ("Cargo.toml", cargo_toml(self, &manifest)?),
            (".cargo/config.toml", self.cargo_config()?),
            ("Cargo.lock", self.engram_file("Cargo.lock", BUILT_LOCK)),
            (
                "src/lib.rs",
                self.kind.template().replace("{{name}}", &self.name),
            ),
            ("experiment.toml", self.experiment()),
            ("README.md", self.readme()),
            (".gitignore", "/core\n/vendor\n".to_string()),
        ];
        write_files(&self.dir, &files)?;
        if let Some(e) = &self.engram {
            for name in LINKS {
                let link = self.dir.join(name);
                std::os::unix::fs::symlink(e.join(name), &link).map_err(|e| Error::io(&link, e))?;
            }
        }
        Ok(())
    }

    /// `.cargo/config.toml`: engram's `rustflags` (`-C prefer-dynamic`) and its target
    /// directory.
    fn cargo_config(&self) -> Result<String> {
        let flags = rustflags(&self.engram_file(".cargo/config.toml", BUILT_CARGO_CONFIG))?;
        let mut out = String::from(
            "# engram's build settings, which this plugin must share (README.md).\n[build]\n\
             # engram-core is a Rust dylib shared by the engram binary and its plugins: std must\n\
             # be linked dynamically too. A RUSTFLAGS environment variable replaces this line:\n\
             # add `-C prefer-dynamic` to it when you set one.\n",
        );
        out.push_str(&format!("rustflags = {flags}\n"));
        match &self.target_dir {
            Some(t) => out.push_str(&format!(
                "# engram's own target directory: it holds the compiled Burn and the\n\
                 # libengram_core.so the engram binary loads, so a build here compiles this crate\n\
                 # alone, and the plugin lands beside the binary.\n\
                 target-dir = {}\n",
                toml::Value::String(t.display().to_string())
            )),
            None => out.push_str(
                "# Set engram's own target directory here (the directory holding\n\
                 # release/libengram_core.so):\n# target-dir = \"/path/to/engram/target\"\n",
            ),
        }
        Ok(out)
    }

    /// The sample experiment: a small Split Fashion-MNIST run that loads the plugin.
    fn experiment(&self) -> String {
        let lib = toml::Value::String(self.library_path().display().to_string());
        format!(
            "# Split Fashion-MNIST, class-incremental, with the plugin `{name}` ({kind}).\n\
             # Build the plugin first (`cargo build --release`), then:\n\
             #   engram run experiment.toml --out runs/{name}\n\
             # (`--set data.subsample=600` for a run of seconds).\n\
             plugins = [{lib}]   # the library `cargo build --release` writes\n\n\
             [run]\nseed = 0\n\n\
             [data]\ndataset = \"fashion-mnist\"\nscenario = \"class-incremental\"\n\
             tasks = 5\nclasses_per_task = 2\n\n\
             {tables}\n\
             [optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n\n\
             [train]\nepochs = 1\nbatch_size = 128\neval_batch_size = 1000\n",
            name = self.name,
            kind = self.kind.word(),
            tables = self.kind.experiment_tables(&self.name),
        )
    }

    /// The crate's README: how to build, run and change it, and the rules.
    fn readme(&self) -> String {
        let engram = self
            .engram
            .as_ref()
            .map_or("/path/to/engram".into(), |e| e.display().to_string());
        let target = self
            .target_dir
            .as_ref()
            .map_or("/path/to/engram/target".into(), |t| t.display().to_string());
        include_str!("new/README.md.tmpl")
            .replace("{{name}}", &self.name)
            .replace("{{kind}}", self.kind.word())
            .replace("{{engram}}", &engram)
            .replace("{{target}}", &target)
            .replace("{{library}}", &self.library_path().display().to_string())
    }

    /// What `engram new plugin` prints once the crate is written.
    pub fn next_steps(&self) -> String {
        let mut s = format!(
            "wrote {} ({} plugin `{}`)\n",
            self.dir.display(),
            self.kind.word(),
            self.name
        );
        match (&self.engram, &self.target_dir) {
            (Some(e), Some(t)) => s.push_str(&format!(
                "  builds against {} (link `core`), into {}\n",
                e.join("core").display(),
                t.display()
            )),
            _ => s.push_str(
                "  engram's source tree is unknown: link it and set the target directory as \
                 README.md says (`ln -s /path/to/engram/core core` and \
                 `ln -s /path/to/engram/vendor vendor`)\n",
            ),
        }
        s.push_str(&format!(
            "next:\n  cd {}\n  cargo build --release\n  engram run experiment.toml --out runs/{}\n",
            self.dir.display(),
            self.name
        ));
        s
    }
}

/// The symbolic links a plugin crate holds into engram's source tree, each at the same path
/// relative to the workspace root as in engram's, so that cargo gives the crates behind them
/// engram's identities: `core` (engram-core) and `vendor` (the patched Burn crates of
/// engram's `[patch.crates-io]`).
pub const LINKS: [&str; 2] = ["core", "vendor"];

/// The sections of a TOML text: `(header, text)` in order, the text before the first header
/// under the header `""`. Comment lines just above a header belong to that header's section.
fn toml_sections(text: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, Vec<&str>)> = vec![(String::new(), Vec::new())];
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            let header = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim();
            // Move the comments (and blank lines) that precede this header into its section.
            let prev = &mut sections.last_mut().expect("one section").1;
            let mut moved = Vec::new();
            while prev
                .last()
                .is_some_and(|l| l.trim().is_empty() || l.trim().starts_with('#'))
            {
                moved.push(prev.pop().expect("a line"));
            }
            moved.reverse();
            while moved.first().is_some_and(|l| l.trim().is_empty()) {
                moved.remove(0);
            }
            moved.push(line);
            sections.push((header.to_string(), moved));
        } else {
            sections.last_mut().expect("one section").1.push(line);
        }
    }
    sections
        .into_iter()
        .map(|(h, lines)| (h, lines.join("\n").trim_end().to_string() + "\n"))
        .collect()
}

/// The plugin's `Cargo.toml`: its package, a `dylib` that depends on engram-core through the
/// link `core`, and the workspace tables (`[workspace.package]`, `[workspace.dependencies]`,
/// the profiles, and `[patch.crates-io]`, whose patched Burn crates the link `vendor`
/// reaches at the same relative path) copied from engram's `manifest`.
///
/// # Errors
/// [`Error::Other`] when engram's manifest is not valid TOML or the result would not be.
pub fn cargo_toml(plan: &PluginPlan, manifest: &str) -> Result<String> {
    let parsed: toml::Table =
        toml::from_str(manifest).map_err(|e| Error::Other(format!("engram's Cargo.toml: {e}")))?;
    let resolver = parsed
        .get("workspace")
        .and_then(|w| w.get("resolver"))
        .and_then(toml::Value::as_str)
        .unwrap_or("2");
    let link = match &plan.engram {
        Some(e) => format!(
            "# `core` is a symbolic link to engram's {}. Through it engram-core sits at `core`\n\
             # in this workspace as in engram's, so cargo gives it the same identity and reuses\n\
             # engram's compiled libengram_core.so instead of building (and overwriting) another.\n",
            e.join("core").display()
        ),
        None => {
            "# `core` must be a symbolic link to the core/ directory of the engram source tree\n\
                 # that built your engram: `ln -s /path/to/engram/core core` (README.md), and\n\
                 # `vendor` one to its vendor/: `ln -s /path/to/engram/vendor vendor`.\n"
                .to_string()
        }
    };
    let mut out = format!(
        "# `{name}`: an engram plugin ({kind}), written by `engram new plugin` (engram {version}).\n\
         # Build it with `cargo build --release` (README.md). It shares engram's compiled build,\n\
         # so keep every table below `[dependencies]` as it is.\n\n\
         [package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
         # A Rust dylib (not a cdylib): it links engram's libengram_core.so, so the process holds\n\
         # one engram-core and one Burn (whose autodiff keeps process-global state).\n\
         [lib]\ncrate-type = [\"dylib\"]\n\n\
         [dependencies]\n{link}engram-core = {{ path = \"core\" }}\n\
         serde = {{ workspace = true }}\nserde_json = {{ workspace = true }}\n\
         # Never `burn` itself (a second Burn): use engram_core::burn.\n\n\
         # engram-core takes its version and dependencies from the workspace it is in: this one,\n\
         # whose tables are copied from engram's Cargo.toml.\n\
         [workspace]\nresolver = \"{resolver}\"\n\n",
        name = plan.name,
        kind = plan.kind.word(),
        version = env!("CARGO_PKG_VERSION"),
    );
    for (header, text) in toml_sections(manifest) {
        if header.starts_with("workspace.")
            || header.starts_with("profile.")
            || header.starts_with("patch.")
        {
            out.push_str(&text);
            out.push('\n');
        }
    }
    toml::from_str::<toml::Table>(&out)
        .map_err(|e| Error::Other(format!("the plugin's Cargo.toml would be invalid: {e}")))?;
    Ok(out)
}

/// The `[build] rustflags` of engram's `.cargo/config.toml` text `config` (`-C prefer-dynamic`
/// where it names none), which every crate linking engram-core must share.
///
/// # Errors
/// [`Error::Other`] when `config` is not TOML.
fn rustflags(config: &str) -> Result<toml::Value> {
    let parsed: toml::Table = toml::from_str(config)
        .map_err(|e| Error::Other(format!("engram's .cargo/config.toml: {e}")))?;
    Ok(parsed
        .get("build")
        .and_then(|b| b.get("rustflags"))
        .cloned()
        .unwrap_or_else(|| toml::Value::Array(vec!["-C".into(), "prefer-dynamic".into()])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["my-plugin", "si2", "a_b"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "My",
            "1x",
            "a b",
            "core",
            "engram-x",
            "a/b",
            &"x".repeat(65),
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
    }

    #[test]
    fn sections_keep_their_comments() {
        let s = toml_sections("a = 1\n\n# about b\n[b]\nx = 1\n# about c\n[c.d]\ny = 2\n");
        let names: Vec<&str> = s.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(names, ["", "b", "c.d"]);
        assert_eq!(s[0].1, "a = 1\n");
        assert_eq!(s[1].1, "# about b\n[b]\nx = 1\n");
        assert_eq!(s[2].1, "# about c\n[c.d]\ny = 2\n");
    }

    #[test]
    fn the_manifest_copies_engram_s_workspace_tables() {
        let plan = PluginPlan {
            name: "my-plugin".into(),
            kind: PluginKind::Model,
            dir: "/tmp/x".into(),
            engram: Some(BUILT_FROM.into()),
            target_dir: None,
        };
        let text = cargo_toml(&plan, BUILT_MANIFEST).unwrap();
        let t: toml::Table = toml::from_str(&text).unwrap();
        let ours: toml::Table = toml::from_str(BUILT_MANIFEST).unwrap();
        assert_eq!(t["lib"]["crate-type"], toml::Value::from(vec!["dylib"]));
        assert_eq!(
            t["dependencies"]["engram-core"]["path"].as_str(),
            Some("core")
        );
        assert_eq!(t["profile"], ours["profile"]);
        assert_eq!(
            t["workspace"]["dependencies"],
            ours["workspace"]["dependencies"]
        );
        assert_eq!(t["workspace"]["package"], ours["workspace"]["package"]);
        // The patched Burn crates, at the relative path the link `vendor` gives them.
        assert_eq!(t["patch"], ours["patch"]);
        assert_eq!(
            t["patch"]["crates-io"]["burn-flex"]["path"].as_str(),
            Some("vendor/burn-flex")
        );
        assert!(t["workspace"].get("members").is_none());
    }
}
