//! engram's error type: one enum for the crate, each variant carrying what a user needs to fix
//! the problem (the file and position, the offending value, a hint).
//!
//! [`Error::exit_code`] maps variants to the CLI's exit codes: `2` for bad input (config, data,
//! plugin, device), `1` for any other failure.

use std::path::{Path, PathBuf};

/// Why a plugin could not be loaded or failed while running. Every variant names the library
/// and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file does not exist.
    #[error("plugin {}: no such file\n  hint: build it with `cargo build --release --workspace` (plugins land in target/release/lib<name>.so); a path in a config file is relative to that file; a run resumed after its plugin moved takes the library again with `--plugin PATH`", path.display())]
    Missing {
        /// The path as given.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("plugin {}: cannot read: {source}", path.display())]
    Unreadable {
        /// The library.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a shared library.
    #[error("plugin {}: not a shared library ({reason})\n  hint: name the `lib<name>.so` that `cargo build` writes for a crate with `crate-type = [\"dylib\"]`", path.display())]
    NotSharedLibrary {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The library has no engram declaration.
    #[error("plugin {}: no engram plugin declaration (section `.engram_plugin`)\n  hint: a plugin ends with `engram_core::declare_plugin!(register);`", path.display())]
    NoDeclaration {
        /// The library.
        path: PathBuf,
    },
    /// The declaration is from another version of the loader contract.
    #[error("plugin {}: ABI version {found}, this engram expects {expected}\n  hint: rebuild the plugin against this engram-core", path.display())]
    AbiMismatch {
        /// The library.
        path: PathBuf,
        /// The plugin's ABI version.
        found: u32,
        /// The host's ([`crate::plugin::ABI_VERSION`]).
        expected: u32,
    },
    /// The plugin was built with another toolchain, engram-core, Burn, target, feature set or
    /// profile.
    #[error("plugin {}: built for another engram build; its code was not run\n  plugin: {plugin}\n  host:   {host}\n  differs in: {differs}\n  hint: build the plugin with the host's toolchain, Cargo.lock, features and profile (for example `cargo build --release --workspace`)", path.display())]
    BuildIdMismatch {
        /// The library.
        path: PathBuf,
        /// The plugin's build id.
        plugin: String,
        /// The host's ([`crate::plugin::BUILD_ID`]).
        host: String,
        /// The fields that differ.
        differs: String,
    },
    /// The dynamic loader refused the library (for example an unresolved symbol).
    #[error("plugin {}: the dynamic loader refused it: {reason}\n  hint: rebuild the plugin and engram together (same Cargo.lock and profile)", path.display())]
    LoadFailed {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
    /// The trial load in a child process ([`crate::plugin::set_probe`]) crashed: the library
    /// was not opened in this process.
    #[error("plugin {}: crashed while loading in a trial process ({how}); it was not loaded\n  hint: the library is damaged or was not built for this engram: rebuild it with `cargo build --release --workspace`", path.display())]
    Crashed {
        /// The library.
        path: PathBuf,
        /// How the trial ended: the signal, the exit status or the timeout, and what it wrote.
        how: String,
    },
    /// The plugin's register function returned an error or panicked.
    #[error("plugin {}: registration failed: {message}", path.display())]
    RegisterFailed {
        /// The library.
        path: PathBuf,
        /// Its error, or `panicked: …` with the panic message.
        message: String,
    },
    /// A component of the same kind and name is already registered.
    #[error("plugin {}: duplicate {kind} `{name}`: already registered by {other}\n  hint: rename the plugin's {kind}, or load only one of the two", path.display())]
    Duplicate {
        /// The library that registered it second.
        path: PathBuf,
        /// What the component is ([`crate::component::Kind::noun`]: `forgetting strategy`,
        /// `model`, …).
        kind: &'static str,
        /// The strategy name.
        name: String,
        /// Where the first one came from (`built-in` or a path).
        other: String,
    },
    /// A plugin's strategy panicked; the run stopped without aborting the process.
    #[error("plugin {}: strategy `{strategy}` panicked in `{method}`: {message}\n  hint: the run stopped; its last checkpoint is intact (fix the plugin, then `engram resume`)", path.display())]
    Panicked {
        /// The library.
        path: PathBuf,
        /// The strategy's name.
        strategy: String,
        /// The trait method.
        method: &'static str,
        /// The panic message and location.
        message: String,
    },
    /// A run recorded a plugin whose file has since changed.
    #[error("plugin {}: changed since the run started (SHA-256 {found}, recorded {recorded})\n  hint: restore the library the run was started with; a changed plugin could not continue the same run", path.display())]
    Changed {
        /// The library.
        path: PathBuf,
        /// The SHA-256 recorded in run.json.
        recorded: String,
        /// The SHA-256 of the file now.
        found: String,
    },
}

impl PluginError {
    /// The library the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PluginError::Missing { path }
            | PluginError::Unreadable { path, .. }
            | PluginError::NotSharedLibrary { path, .. }
            | PluginError::NoDeclaration { path }
            | PluginError::AbiMismatch { path, .. }
            | PluginError::BuildIdMismatch { path, .. }
            | PluginError::LoadFailed { path, .. }
            | PluginError::Crashed { path, .. }
            | PluginError::RegisterFailed { path, .. }
            | PluginError::Duplicate { path, .. }
            | PluginError::Panicked { path, .. }
            | PluginError::Changed { path, .. } => path,
        }
    }
}

/// A `Result` with engram's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can be wrong in an IDX file (the MNIST family's format, LeCun et al. 1998).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdxError {
    /// The file is shorter than its header or its declared dimensions require.
    #[error("truncated: header and dimensions need {expected} bytes, the file has {actual}")]
    Truncated {
        /// Bytes the header and dimensions require.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The magic number is not `0x0000 0x08 rank` (unsigned bytes).
    #[error("bad magic number 0x{magic:08x}: not an IDX file of unsigned bytes (want 0x000008nn)")]
    BadMagic {
        /// The first four bytes, big-endian.
        magic: u32,
    },
    /// The dimensions are zero, too many, or not what the dataset needs.
    #[error("bad dimensions {}: {reason}", dims_text(dims))]
    BadDims {
        /// Dimensions read from the header.
        dims: Vec<u32>,
        /// Why they are unusable.
        reason: String,
    },
    /// More data follows the declared dimensions.
    #[error(
        "{extra} trailing byte(s) after the declared data (at least: a gzip stream is read only one byte past it)"
    )]
    TrailingData {
        /// Extra bytes.
        extra: u64,
    },
    /// The gzip stream is corrupt.
    #[error("gzip stream is corrupt: {0}")]
    Gzip(String),
}

/// Every error engram reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration error at a known position in a file.
    #[error("{file}:{line}:{column}: {}{}", tidy(message), hint_suffix(hint))]
    Config {
        /// The config file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
        /// How to fix it (for example "did you mean `ewc`?").
        hint: Option<String>,
    },
    /// A configuration error without a position (for example a whole file that is not UTF-8).
    #[error("{file}: {}{}", tidy(message), hint_suffix(hint))]
    ConfigFile {
        /// The config file.
        file: PathBuf,
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: Option<String>,
    },
    /// A dataset is missing.
    #[error("dataset `{name}` not found (looked in: {searched}){}", hint_suffix(&Some(hint.clone())))]
    DatasetMissing {
        /// The dataset's name.
        name: String,
        /// Every directory tried, in order.
        searched: String,
        /// How to get the files.
        hint: String,
    },
    /// A dataset file is corrupt.
    #[error("{}: {source}", path.display())]
    Idx {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: IdxError,
    },
    /// A data file of a `[data] format` (NPY, CSV, an image, `dataset.toml`) is malformed or
    /// does not fit the others.
    #[error("{}: {format}: {}", path.display(), tidy(reason))]
    DataFile {
        /// The file (or directory).
        path: PathBuf,
        /// The format being read or written (`npy`, `csv`, `image-folder`, `idx`).
        format: &'static str,
        /// What is wrong, and how to fix it where that is known.
        reason: String,
    },
    /// Bad command-line arguments that clap cannot check (for example `--batch 0`).
    #[error("{}", tidy(.0))]
    Usage(String),
    /// No plan of the `budget` memory strategy fits its budget (the message names the smallest
    /// footprint found and its plan).
    #[error("memory budget: {0}")]
    MemoryBudget(String),
    /// Bad data settings (for example more tasks than classes).
    #[error("data: {}", tidy(.0))]
    Data(String),
    /// The requested device is not built in or not present.
    #[error("device `{device}`: {message}")]
    Device {
        /// The device name as given (`cpu`, `vulkan`, `cuda`).
        device: String,
        /// Why it cannot be used, and what to do.
        message: String,
    },
    /// A plugin could not be loaded or registered, or one of its strategies panicked.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A strategy failed during training.
    #[error("strategy `{strategy}`: {}", tidy(message))]
    Strategy {
        /// The strategy's registered name.
        strategy: String,
        /// What went wrong.
        message: String,
    },
    /// The training loss became infinite or NaN (with loss scaling too, which skips the steps
    /// whose gradients overflow but cannot mend a non-finite loss). `notes` say what happened on the
    /// way (what AMP did: [`crate::strategy::MemoryStrategy::divergence_note`], the loss's
    /// parts, the strategies of the run); `advice` is what to change: the trainer's concrete
    /// advice (the learning rate, `clip_norm`) and the strategies' own
    /// ([`crate::strategy::ForgettingStrategy::divergence_hint`]). Without advice the
    /// message gives the general one.
    #[error("strategy `{strategy}`: the loss is {value}{at}: training diverged{} ({})", notes.iter().map(|n| format!(". {n}")).collect::<String>(), if advice.is_empty() { "lower the learning rate or add clip_norm".to_string() } else { advice.join("; ") })]
    Diverged {
        /// The memory strategy whose step computed the loss.
        strategy: String,
        /// The loss value read back (`inf`, `-inf` or `NaN`).
        value: f32,
        /// Where, as ` at task T, epoch E, step S of the task` (empty when not known).
        at: String,
        /// What happened on the way, one sentence each (no final period).
        notes: Vec<String>,
        /// What to change, one sentence each: the general advice first.
        advice: Vec<String>,
    },
    /// A checkpoint is missing, corrupt or from another run.
    #[error("checkpoint {}: {message}", path.display())]
    Checkpoint {
        /// The checkpoint directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A run was interrupted (Ctrl-C) after writing its state.
    #[error("interrupted: {0}")]
    Interrupted(String),
    /// A program a command runs is not installed or not on `PATH` (the package registries'
    /// clients `engram data fetch` runs: pip, npm, apt-get, Rscript).
    #[error("`{tool}` is not installed or not on PATH; {why}{}", hint_suffix(&Some(install.clone())))]
    ToolMissing {
        /// The program looked for.
        tool: String,
        /// What it is needed for.
        why: String,
        /// How to install it.
        install: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// An IDX header's dimensions for a message: all of them up to 8, else the first 8 and the
/// rank (a rank-255 header is not listed in full).
fn dims_text(dims: &[u32]) -> String {
    if dims.len() <= 8 {
        format!("{dims:?}")
    } else {
        format!("{:?}… (rank {})", &dims[..8], dims.len())
    }
}

fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!("\n  hint: {}", tidy(h)),
        None => String::new(),
    }
}

/// The longest run of characters without a space (a path, a header line) that [`shorten_runs`]
/// prints whole.
pub const MAX_RUN: usize = 200;

/// `message` with every run of more than [`MAX_RUN`] characters without whitespace cut to its
/// first [`MAX_ECHO`], with its length (`pppp… (5000 characters)`): what the binary prints for
/// any error, so that a 5,000-character path or a malformed file header echoed by a library
/// does not flood the terminal.
pub fn shorten_runs(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4096));
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let n = run.chars().count();
        if n > MAX_RUN {
            out.extend(run.chars().take(MAX_ECHO));
            out.push_str(&format!("… ({n} characters)"));
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in message.chars() {
        if c.is_whitespace() {
            flush(&mut run, &mut out);
            out.push(c);
        } else {
            run.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The most characters of a quoted value (`"…"` or `` `…` ``) a message echoes; a longer one is
/// cut, with its length said.
pub const MAX_ECHO: usize = 80;

/// A message made fit to print: a number written with more than 24 digits (`1e308` printed by
/// `{}` is 309) in scientific notation (`1e308`), and a quoted value longer than [`MAX_ECHO`]
/// characters cut to its start, with its length (`"aaaa…" (100000 characters)`).
pub fn tidy(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len().min(4096));
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_alphanumeric()) {
            let mut j = i;
            let mut point = false;
            while j < chars.len()
                && (chars[j].is_ascii_digit()
                    || (chars[j] == '.'
                        && !point
                        && chars.get(j + 1).is_some_and(char::is_ascii_digit)))
            {
                point |= chars[j] == '.';
                j += 1;
            }
            let run: String = chars[i..j].iter().collect();
            let digits = run.chars().filter(char::is_ascii_digit).count();
            match run.parse::<f64>() {
                Ok(v) if digits > 24 && (j == chars.len() || !chars[j].is_ascii_alphanumeric()) => {
                    out.push_str(&format!("{v:e}"));
                }
                _ => out.push_str(&run),
            }
            i = j;
        } else if (c == '"' || c == '`')
            && let Some(k) = chars[i + 1..].iter().position(|&d| d == c)
        {
            // A quoted value, kept as written (its numbers too) unless it is long.
            let end = i + 1 + k;
            if k > MAX_ECHO {
                out.push(c);
                out.extend(&chars[i + 1..i + 1 + MAX_ECHO]);
                out.push('…');
                out.push(c);
                out.push_str(&format!(" ({k} characters)"));
            } else {
                out.extend(&chars[i..=end]);
            }
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

impl Error {
    /// The CLI exit code: `2` for bad input (config, data, a plugin that cannot be loaded,
    /// device, a missing or damaged checkpoint), `130` for a run stopped by Ctrl-C after its
    /// checkpoint (128 + SIGINT, the shell's convention, so a script can tell it from a
    /// failure), `1` otherwise (including a plugin strategy that panicked during a run).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Interrupted(_) => 130,
            Error::Config { .. }
            | Error::ConfigFile { .. }
            | Error::DatasetMissing { .. }
            | Error::Idx { .. }
            | Error::DataFile { .. }
            | Error::Data(_)
            | Error::Usage(_)
            | Error::MemoryBudget(_)
            | Error::Device { .. }
            | Error::ToolMissing { .. }
            | Error::Checkpoint { .. } => 2,
            // A device, a FIFO or a directory given as a file, or a file over its limit
            // (`fsutil::read_bounded`), is bad input, not a failure of the disk; so is a user's
            // path that cannot be one (a file where a directory must be or the reverse, a path
            // under a file, something already there, a symbolic link that loops). The message
            // names the path.
            Error::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::InvalidInput
                        | std::io::ErrorKind::FileTooLarge
                        | std::io::ErrorKind::InvalidData
                        | std::io::ErrorKind::NotADirectory
                        | std::io::ErrorKind::IsADirectory
                        | std::io::ErrorKind::AlreadyExists
                        | std::io::ErrorKind::InvalidFilename
                ) || source.raw_os_error() == Some(libc::ELOOP) =>
            {
                2
            }
            Error::Plugin(e) => match e {
                PluginError::Panicked { .. } => 1,
                _ => 2,
            },
            _ => 1,
        }
    }

    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tidy_tests {
    use super::tidy;

    #[test]
    fn issue32_long_runs_and_many_dimensions_are_shortened() {
        let path = "p".repeat(5000);
        let s = super::shorten_runs(&format!("plugin {path}: cannot read\n  hint: x"));
        assert_eq!(
            s,
            format!(
                "plugin {}… (5001 characters) cannot read\n  hint: x",
                "p".repeat(80)
            )
        );
        let ok = "a/b/c.toml:1:2: fine";
        assert_eq!(super::shorten_runs(ok), ok);
        let e = super::IdxError::BadDims {
            dims: vec![1; 255],
            reason: "rank 255".into(),
        };
        assert_eq!(
            e.to_string(),
            "bad dimensions [1, 1, 1, 1, 1, 1, 1, 1]… (rank 255): rank 255"
        );
    }

    #[test]
    fn issue32_huge_numbers_and_long_quoted_values_are_shortened() {
        let big = format!("ratio {} must be in [0, 10]", 1e308);
        assert_eq!(tidy(&big), "ratio 1e308 must be in [0, 10]");
        let tiny = format!("value {} is too small", 1e-300);
        assert_eq!(tidy(&tiny), "value 1e-300 is too small");
        // Ordinary numbers, integers up to u64 and digits inside words stay as they are.
        for keep in [
            "label 18446744073709551615 of sample 3",
            "lr 0.05, 1e308 as written",
            "sha ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "line 12, column 3",
        ] {
            assert_eq!(tidy(keep), keep);
        }
        let long = format!("unknown variant `{}`, expected `relu`", "a".repeat(100_000));
        let t = tidy(&long);
        assert!(t.len() < 200, "{t}");
        assert!(
            t.starts_with(&format!(
                "unknown variant `{}…` (100000 characters)",
                "a".repeat(80)
            )),
            "{t}"
        );
        assert!(t.ends_with(", expected `relu`"), "{t}");
        let quoted = format!("path \"{}\"", "x".repeat(90));
        assert_eq!(
            tidy(&quoted),
            format!("path \"{}…\" (90 characters)", "x".repeat(80))
        );
        // Quotes inside a short quoted value, and a quote without its pair, are left alone.
        let nested = format!("add `type = \"…\"` to the file, then {}", "y".repeat(100));
        assert_eq!(tidy(&nested), nested);
        let lone = format!("it\"s {}", "z".repeat(100));
        assert_eq!(tidy(&lone), lone);
    }
}
