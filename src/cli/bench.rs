//! `engram bench memory|throughput|suite`: benchmarks that print figures.

pub mod memory;
pub mod throughput;
pub mod throughput_rows;
pub mod vocab;

use super::Cli;
use clap::{Args, Subcommand};
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use std::path::{Path, PathBuf};

/// `engram bench`'s arguments: one of its subcommands.
#[derive(Args)]
pub struct BenchArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// `engram bench`'s subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Peak memory and step time of the memory strategies (standard, checkpoint, amp,
    /// checkpoint+amp, and op-level checkpointing alone and with segments) on one model, each as
    /// a ratio to standard, beside the seed write-up's claims for BERT-large.
    Memory(memory::MemoryArgs),
    /// Training samples/s (and peak RSS) of one model's training step, here and at each of
    /// `--threads`, with its PyTorch twin at the same thread counts when importable: the plain
    /// loop for the example MLP (batch 128), Hugging Face `transformers` for `--model bert`.
    Throughput(throughput::ThroughputArgs),
    /// The benchmark suite: every built-in forgetting strategy, the standard methods and the
    /// shipped recipes with the plain baselines, on five streams × 3 seeds (a sweep:
    /// `bench/suite.toml`), then one table per stream and the recipe goals (the recipes and the
    /// baselines they are held to: the sweep file's `[sweep.suite]`). Resumable: a rerun skips
    /// finished runs.
    Suite {
        /// The short table: `bench/suite-quick.toml` (short streams, 1 seed).
        #[arg(long)]
        quick: bool,
        /// Another suite file (a sweep file with `[sweep.variants.stream]`).
        #[arg(long, conflicts_with = "quick")]
        sweep: Option<PathBuf>,
        /// The suite's directory (default: runs/<suite name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Runs at a time.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Also write the tables (Markdown) to this file, as the book's figures are.
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
}

/// `engram bench …`.
pub fn bench(cli: &Cli, registry: &Registry, args: &BenchArgs) -> Result<()> {
    match &args.command {
        BenchCommand::Memory(a) => memory::memory(a),
        BenchCommand::Throughput(a) => throughput::throughput(a),
        BenchCommand::Suite {
            quick,
            sweep,
            out,
            jobs,
            markdown,
        } => suite(
            cli,
            registry,
            *quick,
            sweep.as_deref(),
            out.clone(),
            *jobs,
            markdown.as_deref(),
        ),
    }
}

/// `engram bench suite`: runs the suite's sweep here (`jobs` at a time), then prints its tables
/// and writes them to DIR/suite.md (and `markdown`). The suite file defaults to
/// `bench/suite.toml` (`bench/suite-quick.toml` with `quick`) under the current directory.
fn suite(
    cli: &Cli,
    registry: &Registry,
    quick: bool,
    file: Option<&Path>,
    out: Option<PathBuf>,
    jobs: usize,
    markdown: Option<&Path>,
) -> Result<()> {
    let file = file.map_or_else(
        || {
            PathBuf::from(if quick {
                "bench/suite-quick.toml"
            } else {
                "bench/suite.toml"
            })
        },
        Path::to_path_buf,
    );
    if !file.is_file() {
        return Err(Error::Usage(format!(
            "bench suite: no suite file at {} (run it from engram's repository root, or give --sweep FILE)",
            file.display()
        )));
    }
    // Parsed here for its axes and directory; `sweep run` below checks every run's config.
    let sweep = engram::sweep::Sweep::load(&file)?;
    if !sweep
        .axes
        .iter()
        .any(|a| a.key == engram::sweep::suite::STREAM)
    {
        return Err(Error::Usage(format!(
            "bench suite: {} has no [sweep.variants.{}] (the suite's streams)",
            file.display(),
            engram::sweep::suite::STREAM
        )));
    }
    let dir = super::sweep::sweep_out(&sweep, out);
    let written = || {
        std::fs::metadata(dir.join("sweep.json"))
            .and_then(|m| m.modified())
            .ok()
    };
    let before = written();
    let ran = super::sweep::run(cli, registry, &file, Some(dir.clone()), jobs, None);
    if ran.is_err() && written() == before {
        // Refused before any run (a config that does not check): that error, and no tables of
        // an earlier sweep.json in the directory.
        return ran;
    }
    let bytes =
        std::fs::read(dir.join("sweep.json")).map_err(|e| Error::io(dir.join("sweep.json"), e))?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::Other(format!("sweep.json: {e}")))?;
    let md = engram::sweep::suite::markdown(&json, &sweep.suite);
    print!("\n{md}");
    engram::core::fsutil::write_atomic(&dir.join("suite.md"), md.as_bytes())?;
    if let Some(m) = markdown {
        engram::core::fsutil::write_atomic(m, md.as_bytes())?;
    }
    ran
}
