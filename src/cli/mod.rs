//! The `engram` command line: the arguments ([`Cli`], one [`Command`] per subcommand) and
//! [`dispatch`], which maps each subcommand to its module's function.
//!
//! Exit codes: `0` success, `2` bad input (config, data, plugin, device, a path that cannot be
//! used), `1` any other failure ([`engram::core::Error::exit_code`]).

pub mod bench;
pub mod compare;
pub mod data;
pub mod embed;
pub mod eval;
pub mod export;
pub mod list;
pub mod lm;
pub mod new;
pub mod report;
pub mod resume;
pub mod run;
pub mod sweep;
pub mod tune;
pub mod validate;

use clap::{Parser, Subcommand};
use engram::core::config::LoadedConfig;
use engram::core::registry::Registry;
use engram::core::train::trainer;
use engram::core::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "engram",
    version,
    about = "Continual learning under a memory budget, on Burn"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More output (-v: the strategy chain and data directory; -vv: the effective config).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors and the final line.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Load strategies, models or datasets from a plugin shared library (repeatable; `run`, `validate`, `list`,
    /// `resume`, `eval`, `export`). Its code runs in this process: load only what you trust.
    #[arg(long = "plugin", value_name = "PATH", global = true)]
    pub plugins: Vec<PathBuf>,
}

/// The subcommands, one line each: `Variant(module::Args) => module::function`, the doc
/// comment above it being the command's `--help` line. From this one list the macro makes
/// [`Command`] (clap's subcommands) and [`dispatch`]'s mapping. Adding a command is one file
/// under `src/cli/` (its clap `Args` struct and its function
/// `fn(&Cli, &Registry, &Args) -> Result<()>`), its `pub mod` line above and its line here.
macro_rules! commands {
    ($($(#[$doc:meta])* $variant:ident($args:ty) => $function:path,)+) => {
        /// The subcommands ([`commands!`]'s list).
        #[derive(Subcommand)]
        pub enum Command {
            $($(#[$doc])* $variant($args),)+
        }

        /// Calls the function of the command `cli` names.
        fn call(cli: &Cli, registry: &Registry) -> Result<()> {
            match &cli.command {
                $(Command::$variant(args) => $function(cli, registry, args),)+
            }
        }
    };
}

commands! {
    /// Run an experiment: train on the stream, evaluate, write report.json.
    Run(run::RunArgs) => run::run,
    /// Evaluate a checkpoint's model on every task of its stream.
    Eval(eval::EvalArgs) => eval::eval,
    /// Write a checkpoint's weights for other tools.
    Export(export::ExportArgs) => export::export,
    /// Sentence embeddings: a Hugging Face BERT directory's pooled outputs for texts, one per
    /// line, as JSON.
    Embed(embed::EmbedArgs) => embed::embed,
    /// Perplexity of a Llama (GGUF file or Hugging Face directory) on a text, in windows.
    Perplexity(lm::PerplexityArgs) => lm::perplexity,
    /// Greedy continuation of a prompt by a Llama (GGUF file or Hugging Face directory).
    Generate(lm::GenerateArgs) => lm::generate,
    /// Continue a killed or interrupted run from its newest valid checkpoint (a `--seeds`
    /// directory: every unfinished seed, then the aggregate).
    Resume(resume::ResumeArgs) => resume::resume,
    /// Check a config (syntax, keys, strategies, dataset) without running it.
    Validate(validate::ValidateArgs) => validate::validate,
    /// List the registered strategies, models and datasets with their keys and defaults.
    List(list::ListArgs) => list::list,
    /// Dataset tools.
    Data(data::DataArgs) => data::data,
    /// Benchmarks that print figures.
    Bench(bench::BenchArgs) => bench::bench,
    /// Render a run's plots (PNG and SVG): accuracy matrix, per-task accuracy, memory, loss
    /// and learning rate.
    Report(report::ReportArgs) => report::report,
    /// Write a new crate that builds against this engram: `engram new plugin NAME` (a model or
    /// strategy the stock binary loads; only the new crate compiles).
    New(new::NewArgs) => new::new,
    /// Print several runs side by side (ACC, BWT, forgetting, FWT, retention, time, memory).
    Compare(compare::CompareArgs) => compare::compare,
    /// Grids of runs: a sweep file's configs × axes × seeds, run here N at a time or as a
    /// Slurm job array, then aggregated.
    Sweep(sweep::SweepArgs) => sweep::sweep,
    /// Choose a recipe's knobs on your own stream: each grid point on the first tasks'
    /// validation split (A-GEM's protocol), the best mean ACC written as DIR/tuned.toml.
    Tune(tune::TuneArgs) => tune::tune,
}

impl Cli {
    /// Whether the command trains (`run`, `resume`, `sweep run`, `sweep task`): there Ctrl-C
    /// asks for a checkpoint at the next step instead of exiting at once.
    pub fn training(&self) -> bool {
        match &self.command {
            Command::Run(_) | Command::Resume(_) | Command::Tune(_) => true,
            Command::Sweep(args) => args.command.trains(),
            _ => false,
        }
    }
}

/// Runs the command `cli` names, with the built-in registry and `--plugin` libraries loaded.
///
/// # Errors
/// The command's error; its [`Error::exit_code`] is the process's.
pub fn dispatch(cli: &Cli) -> Result<()> {
    let mut registry = engram::registry();
    registry.load_plugins(&cli.plugins)?;
    call(cli, &registry)
}

/// The help of a `--device` option, generated from
/// [`DEVICE_NAMES`](engram::core::device::DEVICE_NAMES) so that every command lists the same
/// devices: `{lead} ({names}; {the last N} need their build features; cuda:N and vulkan:N
/// pick the N-th device){tail}`.
pub fn device_help(lead: &str, tail: &str) -> String {
    use engram::core::device::DEVICE_NAMES;
    let (last, rest) = DEVICE_NAMES.split_last().expect("at least one device");
    let names = if rest.is_empty() {
        (*last).to_string()
    } else {
        format!("{} or {last}", rest.join(", "))
    };
    // Every device but the first (`cpu`, always built) needs its cargo feature.
    let featured = match DEVICE_NAMES.len() - 1 {
        0 => String::new(),
        1 => "; the last needs its build feature".into(),
        n => {
            let words = ["two", "three", "four", "five", "six"];
            let n = words
                .get(n - 2)
                .map_or_else(|| n.to_string(), |w| w.to_string());
            format!("; the last {n} need their build features")
        }
    };
    format!("{lead} ({names}{featured}; cuda:N and vulkan:N pick the N-th device){tail}")
}

/// [`trainer::prepare`], with an error in a strategy's keys placed for the user by
/// [`engram::core::config::relocate_override_error`]: blamed on the `--set` override that
/// wrote a wrongly typed value, or positioned in the file as the user wrote it.
pub fn prepare(
    cfg: LoadedConfig,
    registry: &Registry,
    sets: &[String],
) -> Result<trainer::Prepared> {
    let (file, rewritten) = (cfg.file.clone(), cfg.source.clone());
    trainer::prepare(cfg, registry).map_err(|e| {
        // The file as the user wrote it, read again only to place an error.
        let original = std::fs::read_to_string(&file).unwrap_or_else(|_| rewritten.to_string());
        engram::core::config::relocate_override_error(e, &original, &rewritten, sets)
    })
}

/// What `-v` and `-vv` add before a run (`run`) or after a check (`validate`), on standard
/// error: at `-v` the strategy chain and the data directory, at `-vv` also the effective config
/// (the file with the `--set` overrides applied).
pub fn describe(cli: &Cli, p: &trainer::Prepared) {
    if cli.verbose == 0 {
        return;
    }
    let names = |v: Vec<&str>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    eprintln!(
        "engram: forgetting: {}; memory chain: {}; schedulers: {}; data: {}",
        names(p.forgetting.iter().map(|s| s.name()).collect()),
        names(p.memory.iter().map(|s| s.name()).collect()),
        names(p.schedulers.iter().map(|s| s.name()).collect()),
        p.stream.dataset.dir.display()
    );
    if cli.verbose > 1 {
        eprintln!("{}", p.cfg.source);
    }
}

/// Adds to an interruption how to continue: `engram resume OUT` for the directory the user
/// gave. For a `--seeds` run that is the whole directory (every unfinished seed, then the
/// aggregate), not the interrupted seed's, which would not write the aggregate.
pub fn resume_hint(e: Error, out: &Path) -> Error {
    match e {
        Error::Interrupted(m) => Error::Interrupted(format!(
            "{m}; continue with `engram resume {}`",
            out.display()
        )),
        other => other,
    }
}

/// Prints the table of a `--seeds` run's `aggregate.json` (`agg`, over `n` seeds) to standard
/// output.
pub fn print_aggregate(agg: &serde_json::Value, n: usize) {
    println!("mean ± std over {n} seed{}:", if n == 1 { "" } else { "s" });
    print!("{}", engram::summary::aggregate_table(&agg["metrics"]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_help_lists_every_device_once() {
        let h = device_help("Device", "");
        for d in engram::core::device::DEVICE_NAMES {
            assert!(h.contains(d), "{h}");
        }
        assert_eq!(
            h,
            "Device (cpu, vulkan, cuda or cubecl-cpu; the last three need their build features; \
             cuda:N and vulkan:N pick the N-th device)"
        );
    }
}
