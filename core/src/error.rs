//! engram's error type: one enum for the crate, each variant carrying what a user needs to fix
//! the problem (the file and position, the offending value, a hint).
//!
//! [`Error::exit_code`] maps variants to the CLI's exit codes: `2` for bad input (config, data,
//! plugin, device), `1` for any other failure.

use std::path::PathBuf;

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
    #[error("bad dimensions {dims:?}: {reason}")]
    BadDims {
        /// Dimensions read from the header.
        dims: Vec<u32>,
        /// Why they are unusable.
        reason: String,
    },
    /// More data follows the declared dimensions.
    #[error("{extra} trailing bytes after the declared data")]
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
    #[error("{file}:{line}:{column}: {message}{}", hint_suffix(hint))]
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
    #[error("{file}: {message}{}", hint_suffix(hint))]
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
    /// Bad command-line arguments that clap cannot check (for example `--batch 0`).
    #[error("{0}")]
    Usage(String),
    /// No plan of the `budget` memory strategy fits its budget (the message names the smallest
    /// footprint found and its plan).
    #[error("memory budget: {0}")]
    MemoryBudget(String),
    /// Bad data settings (for example more tasks than classes).
    #[error("data: {0}")]
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
    Plugin(#[from] crate::plugin::PluginError),
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
    #[error("strategy `{strategy}`: {message}")]
    Strategy {
        /// The strategy's registered name.
        strategy: String,
        /// What went wrong.
        message: String,
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
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!("\n  hint: {h}"),
        None => String::new(),
    }
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
            | Error::Data(_)
            | Error::Usage(_)
            | Error::MemoryBudget(_)
            | Error::Device { .. }
            | Error::Checkpoint { .. } => 2,
            Error::Plugin(e) => match e {
                crate::plugin::PluginError::Panicked { .. } => 1,
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
