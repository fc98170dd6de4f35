//! `engram embed DIR --text FILE --out OUT.json`: the pooled outputs of a Hugging Face BERT
//! checkpoint for texts, one per line: what a sentence-embedding user wants, and the interface
//! of the equality checks against Hugging Face `transformers` (issue #35, item 4).
//!
//! `DIR` is a Hugging Face directory: `config.json` (a `BertConfig`), `model.safetensors`
//! (PyTorch layout, with or without the `bert.` prefix), `tokenizer.json`, and optionally
//! sentence-transformers' `1_Pooling/config.json`. Each text is tokenized with engram's
//! truncation and padding ([`TextTokenizer`]) at `--max-len` ids, run through the encoder
//! ([`hf::from_dir`]), pooled (`cls` or `mean` over the non-pad tokens, [`bert::pool`]) and
//! optionally L2-normalised as sentence-transformers' `Normalize` module does
//! (`x / max(‖x‖₂, 10⁻¹²)`, `torch.nn.functional.normalize`).
//!
//! An engram run directory (its checkpoints) is not read: `DIR` must be a Hugging Face
//! directory, and a run is refused with that said.
//!
//! Output: one JSON object `{model, pooling, normalize, max_len, texts, dim, embeddings}`,
//! `embeddings` being `[texts, dim]` (one array of `dim` numbers per input line, in order),
//! written under [`engram::outpath`]'s rule (a temporary file renamed into place).

use super::{Cli, device_help};
use clap::{Args, ValueEnum};
use engram::core::burn::tensor::{Tensor, TensorData};
use engram::core::data::tokenizer::TextTokenizer;
use engram::core::model::bert::{self, Pooling, hf};
use engram::core::model::{Activation, ForwardCtx, Model};
use engram::core::registry::Registry;
use engram::core::{Error, Result};
use engram::outpath::Existing;
use std::path::{Path, PathBuf};

/// `engram embed`'s arguments.
#[derive(Args)]
pub struct EmbedArgs {
    /// A Hugging Face BERT directory: config.json, model.safetensors, tokenizer.json, and
    /// optionally 1_Pooling/config.json (sentence-transformers' pooling).
    dir: PathBuf,
    /// The texts, one per line, UTF-8 (a final newline ends the last text; an empty line is an
    /// empty text).
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    /// The JSON file to write (it must not exist, unless --overwrite).
    #[arg(long, value_name = "OUT.json")]
    out: PathBuf,
    /// Ids per text, special tokens included (longer texts are truncated, shorter ones padded).
    /// Default: tokenizer.json's truncation length, else 128; at most the model's
    /// max_position_embeddings.
    #[arg(long, value_name = "N")]
    max_len: Option<usize>,
    /// How the tokens become one vector. Default: 1_Pooling/config.json's (mean or cls), else
    /// cls.
    #[arg(long, value_enum)]
    pooling: Option<PoolingArg>,
    /// L2-normalise each embedding (sentence-transformers' Normalize module).
    #[arg(long)]
    normalize: bool,
    /// A tokenizer.json to use instead of DIR/tokenizer.json.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32, value_name = "N")]
    batch: usize,
    #[arg(long, help = device_help("Compute on this device", ""))]
    device: Option<String>,
    /// Replace an existing regular file at --out.
    #[arg(long)]
    overwrite: bool,
}

/// `--pooling`: [`Pooling`]'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PoolingArg {
    /// The first token's (`[CLS]`) last hidden state.
    Cls,
    /// The mean over the non-pad tokens.
    Mean,
}

impl From<PoolingArg> for Pooling {
    fn from(p: PoolingArg) -> Self {
        match p {
            PoolingArg::Cls => Pooling::Cls,
            PoolingArg::Mean => Pooling::Mean,
        }
    }
}

/// The length a text gets when neither `--max-len` nor tokenizer.json gives one.
const DEFAULT_MAX_LEN: usize = 128;

/// The format name errors give for the texts file.
const TEXTS: &str = "texts";

/// `engram embed`: see the module docs.
///
/// # Errors
/// Exit code 2 ([`Error::Usage`], [`Error::DataFile`], [`Error::Device`]) naming the path for a
/// missing or incomplete `DIR`, a `config.json` that is not a supported BERT, a pooling engram
/// does not compute, a `--max-len` over the position table, an unusable tokenizer, an empty or
/// non-UTF-8 texts file (the line), an id outside the model's vocabulary, or an `--out` that
/// cannot be written.
pub fn embed(cli: &Cli, _registry: &Registry, args: &EmbedArgs) -> Result<()> {
    if args.batch == 0 {
        return Err(Error::Usage("--batch 0: at least one text per pass".into()));
    }
    let existing = Existing::Overwrite(args.overwrite);
    engram::outpath::check_file(&args.out, "--out", existing)?;
    let config = check_dir(&args.dir)?;
    let texts = read_texts(&args.text)?;
    let blank: Vec<usize> = (0..texts.len())
        .filter(|&i| texts[i].trim().is_empty())
        .collect();
    if let Some(first) = blank.first() {
        // An empty text is a text (transformers embeds `""` as [CLS] [SEP]), but a stray blank
        // line shifts every later text's row: said, so that it is not a surprise.
        eprintln!(
            "warning: {}: {} blank line(s), the first line {}, embedded as empty texts (one row each)",
            args.text.display(),
            blank.len(),
            first + 1
        );
    }
    let pooling = match args.pooling {
        Some(p) => p.into(),
        None => dir_pooling(&args.dir)?,
    };
    let tok_path = args
        .tokenizer
        .clone()
        .unwrap_or_else(|| args.dir.join("tokenizer.json"));
    if !tok_path.is_file() {
        return Err(Error::Usage(format!(
            "{}: no such file; give the checkpoint's tokenizer.json (beside it in DIR, or --tokenizer FILE)",
            tok_path.display()
        )));
    }
    let max_len = max_len(args.max_len, &tok_path, config.max_position_embeddings)?;
    let tokenizer = TextTokenizer::load(&tok_path, max_len)?;
    let ids = tokenizer.encode(&texts)?;
    if let Some(i) = ids.iter().position(|&id| id as usize >= config.vocab_size) {
        return Err(engram::core::data::format::bad(
            &args.text,
            TEXTS,
            format!(
                "line {}: token id {} of {} is outside the model's vocabulary of {} ({})",
                i / max_len + 1,
                ids[i],
                tok_path.display(),
                config.vocab_size,
                args.dir.join("config.json").display()
            ),
        ));
    }
    let device = engram::core::device::select(args.device.as_deref().unwrap_or("cpu"))?;
    let (model, _) = hf::from_dir(&args.dir, 1, pooling, 0, &device)
        .map_err(|e| Error::Usage(format!("{}: {e}", args.dir.display())))?;
    let mut embeddings = pooled(&model, &ids, max_len, pooling, args.batch, &device)?;
    if args.normalize {
        embeddings.iter_mut().for_each(|v| l2_normalize(v));
    }
    let dim = embeddings.first().map_or(0, Vec::len);
    let json = Output {
        model: args.dir.display().to_string(),
        pooling: pooling_name(pooling),
        normalize: args.normalize,
        max_len,
        texts: embeddings.len(),
        dim,
        embeddings: &embeddings,
    };
    let mut bytes = serde_json::to_vec(&json).map_err(|e| Error::Other(e.to_string()))?;
    bytes.push(b'\n');
    engram::outpath::write_file(&args.out, "--out", existing, &bytes)?;
    if !cli.quiet {
        println!(
            "{}: {} embedding{} of {dim} ({} pooling{}, max_len {max_len})",
            args.out.display(),
            embeddings.len(),
            if embeddings.len() == 1 { "" } else { "s" },
            pooling_name(pooling),
            if args.normalize {
                ", L2-normalised"
            } else {
                ""
            },
        );
    }
    Ok(())
}

/// The JSON `engram embed` writes (fields in this order; numbers as `f32` prints them).
#[derive(serde::Serialize)]
struct Output<'a> {
    /// `DIR` as given.
    model: String,
    /// `"cls"` or `"mean"`.
    pooling: &'static str,
    /// Whether each embedding was L2-normalised.
    normalize: bool,
    /// Ids per text.
    max_len: usize,
    /// How many texts (lines).
    texts: usize,
    /// The embeddings' width (the model's `hidden_size`).
    dim: usize,
    /// `[texts, dim]`, in the order of the lines.
    embeddings: &'a [Vec<f32>],
}

fn pooling_name(p: Pooling) -> &'static str {
    match p {
        Pooling::Cls => "cls",
        Pooling::Mean => "mean",
    }
}

/// `dir`'s `config.json`, after checking that `dir` is a directory holding it and
/// `model.safetensors`.
///
/// # Errors
/// [`Error::Usage`] naming what is missing or wrong (exit code 2).
fn check_dir(dir: &Path) -> Result<hf::HfConfig> {
    if !dir.is_dir() {
        let what = if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(Error::Usage(format!(
            "{}: {what}; give a Hugging Face BERT directory (config.json, model.safetensors, tokenizer.json)",
            dir.display()
        )));
    }
    if !dir.join("config.json").exists()
        && (dir.join("checkpoints").is_dir() || dir.join("report.json").is_file())
    {
        return Err(Error::Usage(format!(
            "{}: an engram run; `engram embed` reads a Hugging Face BERT directory \
             (config.json, model.safetensors, tokenizer.json), not a run's checkpoints",
            dir.display()
        )));
    }
    for file in ["config.json", "model.safetensors"] {
        if !dir.join(file).is_file() {
            return Err(Error::Usage(format!(
                "{}: no {file}; a Hugging Face BERT directory holds config.json, model.safetensors and tokenizer.json",
                dir.display()
            )));
        }
    }
    hf::HfConfig::read(dir).map_err(|e| match e {
        Error::Other(m) => Error::Usage(m),
        other => other,
    })
}

/// The pooling sentence-transformers' `dir/1_Pooling/config.json` asks for; [`Pooling::Cls`]
/// when there is none.
///
/// # Errors
/// [`Error::DataFile`] when the file cannot be read as JSON or asks for a pooling engram does
/// not compute (max, mean of square-root length, several at once).
fn dir_pooling(dir: &Path) -> Result<Pooling> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.exists() {
        return Ok(Pooling::Cls);
    }
    let bad = |reason: String| engram::core::data::format::bad(&path, "1_Pooling", reason);
    let bytes =
        engram::core::fsutil::read_bounded(&path, 1 << 20).map_err(|e| Error::io(&path, e))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let on = |key: &str| v.get(key).and_then(serde_json::Value::as_bool) == Some(true);
    let modes: Vec<&str> = [
        "pooling_mode_cls_token",
        "pooling_mode_mean_tokens",
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ]
    .into_iter()
    .filter(|k| on(k))
    .collect();
    match modes[..] {
        ["pooling_mode_cls_token"] => Ok(Pooling::Cls),
        ["pooling_mode_mean_tokens"] => Ok(Pooling::Mean),
        _ => Err(bad(format!(
            "asks for {modes:?}; engram computes one of cls and mean: pass --pooling cls or --pooling mean"
        ))),
    }
}

/// The ids per text: `given`, else `tokenizer`'s own truncation length, else
/// [`DEFAULT_MAX_LEN`]; a default is capped at `max_position`, a given length is not.
///
/// # Errors
/// [`Error::Usage`] for a `given` length over `max_position`; the tokenizer file's read error.
fn max_len(given: Option<usize>, tokenizer: &Path, max_position: usize) -> Result<usize> {
    if let Some(n) = given {
        if n > max_position {
            return Err(Error::Usage(format!(
                "--max-len {n}: the model's position table holds {max_position} tokens (max_position_embeddings)"
            )));
        }
        return Ok(n);
    }
    let bytes = engram::core::fsutil::read_bounded(tokenizer, engram::core::fsutil::MAX_TEXT_BYTES)
        .map_err(|e| Error::io(tokenizer, e))?;
    let own = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["truncation"]["max_length"].as_u64())
        .map(|n| n as usize);
    Ok(own.unwrap_or(DEFAULT_MAX_LEN).min(max_position))
}

/// The texts of `path`, one per line: split at `\n`, a trailing `\r` dropped, a final newline
/// ending the last text rather than starting an empty one.
///
/// # Errors
/// [`Error::DataFile`] naming the file when it cannot be read (missing, a directory, over
/// 64 MiB) or is empty, and with the line and column for a line that is not UTF-8. A blank
/// line is a text (an empty one, as `transformers` embeds `""`).
pub fn read_texts(path: &Path) -> Result<Vec<String>> {
    let bad = |reason: String| engram::core::data::format::bad(path, TEXTS, reason);
    let bytes = engram::core::fsutil::read_bounded(path, engram::core::fsutil::MAX_TEXT_BYTES)
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    if bytes.is_empty() {
        return Err(bad("the file is empty: give one text per line".into()));
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    body.split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            String::from_utf8(line.to_vec()).map_err(|e| {
                bad(format!(
                    "line {} is not UTF-8 (invalid byte at column {})",
                    i + 1,
                    e.utf8_error().valid_up_to() + 1
                ))
            })
        })
        .collect()
}

/// The pooled last hidden states `[texts, hidden]` of `model` (a BERT from [`hf::from_dir`])
/// for `ids` (row-major `[texts, max_len]`), `batch` texts per forward pass.
///
/// # Errors
/// [`Error::Other`] when the encoder gives something other than token states (a bug).
fn pooled(
    model: &Model,
    ids: &[u32],
    max_len: usize,
    pooling: Pooling,
    batch: usize,
    device: &engram::core::burn::tensor::Device,
) -> Result<Vec<Vec<f32>>> {
    let blocks = model.num_blocks();
    let mut out = Vec::with_capacity(ids.len() / max_len);
    for chunk in ids.chunks(batch * max_len) {
        let b = chunk.len() / max_len;
        let x: Vec<f32> = chunk.iter().map(|&i| i as f32).collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [b, max_len]), device);
        let ctx = ForwardCtx::evaluation(None);
        let Activation::Tokens { hidden, mask, .. } =
            model.forward_range(0..blocks - 1, Activation::Flat(x), &ctx)
        else {
            return Err(Error::Other("the BERT encoder gave no token states".into()));
        };
        let v = bert::pool(hidden, &mask, pooling)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .map_err(|e| Error::Other(format!("{e:?}")))?;
        let dim = v.len() / b;
        out.extend(v.chunks(dim).map(<[f32]>::to_vec));
    }
    Ok(out)
}

/// `v / max(‖v‖₂, 10⁻¹²)` in place (`torch.nn.functional.normalize(v, p=2)`, the norm summed in
/// `f64`).
fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let scale = 1.0 / norm.max(1e-12);
    v.iter_mut()
        .for_each(|x| *x = (f64::from(*x) * scale) as f32);
}
