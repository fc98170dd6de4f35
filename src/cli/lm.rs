//! `engram perplexity MODEL --text FILE` and `engram generate MODEL --prompt TEXT`: a causal
//! language model (a Llama) read as it ships, scored on a text or continued greedily (issue #31,
//! item 3).
//!
//! `MODEL` is a GGUF file (`general.architecture = llama`: [`llama::gguf::from_file`], its
//! tokenizer from the same file's metadata) or a Hugging Face Llama directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`: [`llama::hf::from_dir`]), or the directory or a
//! checkpoint of an engram language-model run (`[train] objective = "lm"`: the checkpoint's
//! model with the tokenizer its data was read with, so that a text's perplexity is the run's
//! own figure for the same windows).
//!
//! **Tokens.** Each text is encoded by the model's own tokenizer with its default special
//! tokens, as `transformers`' `tokenizer(text)` does: for a GGUF, `bos` before each text only
//! when `tokenizer.ggml.add_bos_token` is true (SmolLM2 and the tiny fixture: no `bos`); for a
//! directory, whatever `tokenizer.json`'s post-processor adds.
//!
//! **Perplexity.** Each non-empty line of `--text` is a document; documents are followed by the
//! model's `eos` id, concatenated and cut into windows of `--window` tokens
//! ([`lm::chunk_windows`]); the last remainder shorter than a window is dropped (the count is
//! printed), so every window is scored the same way. Perplexity is `exp(Σ NLL / Σ tokens)` over
//! every window, `window − 1` predictions each ([`lm::perplexity_of`]).
//!
//! **Generation.** Greedy: at each step the full sequence is run again (no KV cache) and the
//! id with the largest last-position logit (the first on a tie, as `torch.argmax`) is appended;
//! it stops after `--tokens` ids, at the model's `eos`, or at its context length. `--tokens 0`
//! is accepted and prints the prompt alone.

use super::{Cli, device_help};
use clap::Args;
use engram::core::burn::tensor::{Tensor, TensorData};
use engram::core::data::tokenizer::TextTokenizer;
use engram::core::model::{Activation, ForwardCtx, Model, llama};
use engram::core::registry::Registry;
use engram::core::train::lm;
use engram::core::{Error, Result};
use engram::outpath::Existing;
use std::path::{Path, PathBuf};

/// The tokenizer's truncation length: far above any line a text file holds, so that nothing is
/// cut before chunking (the text file itself is read bounded).
const NO_TRUNCATION: usize = 1 << 24;

/// `engram perplexity`'s arguments.
#[derive(Args)]
pub struct PerplexityArgs {
    /// A Llama GGUF file, a Hugging Face Llama directory (config.json, model.safetensors,
    /// tokenizer.json), or a language-model run's directory or checkpoint.
    model: PathBuf,
    /// The text, UTF-8; each non-empty line is a document, followed by the model's eos.
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    /// Tokens per window (2 or more, at most the model's context length); the last partial
    /// window is dropped.
    #[arg(long, default_value_t = 128, value_name = "N")]
    window: usize,
    /// Windows per forward pass.
    #[arg(long, default_value_t = 8, value_name = "N")]
    batch: usize,
    #[arg(long, help = device_help("Compute on this device", ""))]
    device: Option<String>,
    /// Also write the figures as JSON to this file (it must not exist, unless --overwrite).
    #[arg(long, value_name = "OUT.json")]
    json: Option<PathBuf>,
    /// Replace an existing regular file at --json.
    #[arg(long)]
    overwrite: bool,
}

/// `engram generate`'s arguments.
#[derive(Args)]
pub struct GenerateArgs {
    /// A Llama GGUF file, a Hugging Face Llama directory (config.json, model.safetensors,
    /// tokenizer.json), or a language-model run's directory or checkpoint.
    model: PathBuf,
    /// The text to continue (at least one token once encoded).
    #[arg(long, value_name = "TEXT")]
    prompt: String,
    /// New tokens at most (greedy; fewer at eos or the context length; 0 prints the prompt).
    #[arg(long, default_value_t = 20, value_name = "N")]
    tokens: usize,
    #[arg(long, help = device_help("Compute on this device", ""))]
    device: Option<String>,
    /// Also write the prompt's and the generated ids and the text as JSON to this file.
    #[arg(long, value_name = "OUT.json")]
    json: Option<PathBuf>,
    /// Replace an existing regular file at --json.
    #[arg(long)]
    overwrite: bool,
}

/// A loaded language model with what reading text needs.
struct Loaded {
    model: Model,
    tokenizer: TextTokenizer,
    /// The end-of-sequence id, when the model defines one.
    eos: Option<u32>,
    /// The context length (GGUF `llama.context_length`, `max_position_embeddings`).
    context: Option<usize>,
}

/// Reads `path` (a GGUF file, a Hugging Face directory, or an engram run directory or
/// checkpoint: [`load_run`]) onto `device` (`device_name` as `--device` gave it).
fn load(
    path: &Path,
    device: &engram::core::burn::tensor::Device,
    registry: &Registry,
    device_name: Option<&str>,
) -> Result<Loaded> {
    // A usage error (exit 2) naming `path` once.
    let at = |e: Error| {
        let m = e.to_string();
        let shown = path.display().to_string();
        Error::Usage(if m.contains(&shown) {
            m
        } else {
            format!("{shown}: {m}")
        })
    };
    if path.is_dir() {
        if path.join("checkpoints").is_dir()
            || path.join("report.json").is_file()
            || path.join("manifest.json").is_file()
        {
            return load_run(path, registry, device_name);
        }
        let config = path.join("config.json");
        let tok = path.join("tokenizer.json");
        for f in [&config, &tok] {
            if !f.is_file() {
                return Err(Error::Usage(format!(
                    "{}: no such file; a Hugging Face Llama directory holds config.json, \
                     model.safetensors and tokenizer.json",
                    f.display()
                )));
            }
        }
        let text = std::fs::read_to_string(&config).map_err(|e| Error::io(&config, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Usage(format!("{}: {e}", config.display())))?;
        let eos = json["eos_token_id"].as_u64().map(|v| v as u32);
        let context = json["max_position_embeddings"].as_u64().map(|v| v as usize);
        let (model, _) = llama::hf::from_dir(path, device).map_err(at)?;
        // A decoder pads nothing here; the id only fills TextTokenizer's padded form.
        let pad = json["pad_token_id"]
            .as_u64()
            .map(|v| v as u32)
            .or(eos)
            .unwrap_or(0);
        let tokenizer = TextTokenizer::load_with_pad(&tok, NO_TRUNCATION, pad)?;
        return Ok(Loaded {
            model,
            tokenizer,
            eos,
            context,
        });
    }
    if !path.is_file() {
        return Err(Error::Usage(format!(
            "{}: no such file or directory",
            path.display()
        )));
    }
    if !engram::core::gguf::is_gguf(path) {
        return Err(Error::Usage(format!(
            "{}: neither a GGUF file nor a Hugging Face directory",
            path.display()
        )));
    }
    let file = engram::core::gguf::GgufFile::open(path).map_err(at)?;
    // Another architecture is refused by the model's own reader (llama::gguf::shape_of).
    llama::gguf::shape_of(&file).map_err(at)?;
    let context = file
        .metadata("llama.context_length")
        .and_then(|v| v.as_u64())
        .map(|v| v as usize);
    // The tokenizer is built once, by TextTokenizer::load (which also checks that this id is
    // one of its tokens); the eos id is read from the metadata, not from a second build.
    let eos = file
        .metadata("tokenizer.ggml.eos_token_id")
        .and_then(|v| v.as_u64())
        .map(|v| v as u32);
    let (model, _) = llama::gguf::from_file(path, device).map_err(at)?;
    let tokenizer = TextTokenizer::load(path, NO_TRUNCATION).map_err(at)?;
    Ok(Loaded {
        model,
        tokenizer,
        eos,
        context,
    })
}

/// An engram run directory (its newest checkpoint) or one checkpoint of a language-model run
/// (`[train] objective = "lm"`): the checkpoint's model, and the tokenizer its data was read
/// with (the first `[[data.stream]]` entry's `tokenizer`, every entry's being the same, read
/// as the run read it: [`TextTokenizer::load_decoder`], its eos id included), so that a text
/// scores as the run's own evaluation scores that text's windows.
///
/// # Errors
/// [`trainer::load_checkpoint_model`]'s; [`Error::Usage`] for a run that is not a
/// language-model run or names no tokenizer.
fn load_run(path: &Path, registry: &Registry, device_name: Option<&str>) -> Result<Loaded> {
    use engram::core::train::trainer;
    let (p, model, _) = trainer::load_checkpoint_model(path, registry, device_name)?;
    let cfg = &p.cfg;
    let not_lm = || {
        Error::Usage(format!(
            "{}: a run of `[train] objective = \"{}\"`; perplexity reads a language-model run's checkpoint (objective = \"lm\")",
            path.display(),
            serde_json::to_value(cfg.config.train.objective)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        ))
    };
    cfg.config.train.lm_window().ok_or_else(not_lm)?;
    let tok = cfg
        .config
        .data
        .stream
        .first()
        .and_then(|e| {
            e.options
                .as_ref()?
                .get("tokenizer")?
                .as_str()
                .map(PathBuf::from)
        })
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: the run's [[data.stream]] names no tokenizer",
                path.display()
            ))
        })?;
    let tok = engram::core::fsutil::relative_to(&cfg.base_dir, &tok);
    let tokenizer = TextTokenizer::load_decoder(&tok, NO_TRUNCATION)?;
    let context = engram::core::gguf::is_gguf(&tok)
        .then(|| engram::core::gguf::GgufFile::open(&tok).ok())
        .flatten()
        .and_then(|f| f.metadata("llama.context_length").and_then(|v| v.as_u64()))
        .map(|v| v as usize);
    Ok(Loaded {
        model,
        eos: tokenizer.eos_id(),
        tokenizer,
        context,
    })
}

/// The JSON `engram perplexity --json` writes.
#[derive(serde::Serialize)]
struct PerplexityJson {
    /// `MODEL` as given.
    model: String,
    /// Tokens per window.
    window: usize,
    /// Windows scored.
    windows: usize,
    /// Predictions scored (`windows × (window − 1)`).
    tokens: usize,
    /// Tokens of the final partial window, not scored.
    dropped_tokens: usize,
    /// Mean NLL, nats per token.
    mean_nll: f64,
    /// `exp(mean_nll)`.
    perplexity: f64,
}

/// `engram perplexity`: see the module docs.
///
/// # Errors
/// Exit code 2 ([`Error::Usage`], [`Error::DataFile`], [`Error::Device`]) for a missing or
/// non-Llama model, a run directory, an empty or non-UTF-8 text, a text too short for one
/// window, `--window` below 2 or over the context length, `--batch 0`, or a `--json` that cannot
/// be written.
pub fn perplexity(cli: &Cli, registry: &Registry, args: &PerplexityArgs) -> Result<()> {
    if args.batch == 0 {
        return Err(Error::Usage(
            "--batch 0: at least one window per pass".into(),
        ));
    }
    if args.window < 2 {
        return Err(Error::Usage(format!(
            "--window {}: a window needs at least 2 tokens (one prediction)",
            args.window
        )));
    }
    let existing = Existing::Overwrite(args.overwrite);
    if let Some(out) = &args.json {
        engram::outpath::check_file(out, "--json", existing)?;
    }
    let bytes =
        engram::core::fsutil::read_bounded(&args.text, engram::core::fsutil::MAX_TEXT_BYTES)
            .map_err(|e| engram::core::data::format::bad(&args.text, "text", e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        engram::core::data::format::bad(&args.text, "text", format!("not UTF-8: {e}"))
    })?;
    let docs: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if docs.is_empty() {
        return Err(engram::core::data::format::bad(
            &args.text,
            "text",
            "no text: every line is empty",
        ));
    }
    let device = engram::core::device::select(args.device.as_deref().unwrap_or("cpu"))?;
    let m = load(&args.model, &device, registry, args.device.as_deref())?;
    if let Some(c) = m.context.filter(|&c| args.window > c) {
        return Err(Error::Usage(format!(
            "--window {}: over the model's context length {c}",
            args.window
        )));
    }
    let ids: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| m.tokenizer.encode_ids(d))
        .collect::<Result<_>>()?;
    let total = ids.iter().map(Vec::len).sum::<usize>() + m.eos.map_or(0, |_| ids.len());
    let windows = lm::chunk_windows(&ids, m.eos, args.window)?;
    if windows.is_empty() {
        return Err(engram::core::data::format::bad(
            &args.text,
            "text",
            format!(
                "{total} tokens (eos included) are fewer than one window of {}; give more text or a smaller --window",
                args.window
            ),
        ));
    }
    let p = lm::perplexity_of(&m.model, &windows, args.batch, &device)?;
    let (mean_nll, ppl) = match (p.mean_nll(), p.perplexity()) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(Error::Other("perplexity: no token scored".into())),
    };
    let out = PerplexityJson {
        model: args.model.display().to_string(),
        window: args.window,
        windows: windows.len(),
        tokens: p.tokens,
        dropped_tokens: total - windows.len() * args.window,
        mean_nll,
        perplexity: ppl,
    };
    if let Some(path) = &args.json {
        let mut bytes = serde_json::to_vec_pretty(&out).map_err(|e| Error::Other(e.to_string()))?;
        bytes.push(b'\n');
        engram::outpath::write_file(path, "--json", existing, &bytes)?;
    }
    if !cli.quiet {
        println!(
            "perplexity {ppl:.4} (mean NLL {mean_nll:.4} nats/token) over {} tokens: {} windows of {}, {} tokens of the last partial window dropped",
            out.tokens, out.windows, out.window, out.dropped_tokens
        );
    } else {
        println!("{ppl:.4}");
    }
    Ok(())
}

/// The JSON `engram generate --json` writes.
#[derive(serde::Serialize)]
struct GenerateJson {
    /// `MODEL` as given.
    model: String,
    /// The prompt's ids (the tokenizer's special tokens included).
    prompt_ids: Vec<u32>,
    /// The generated ids, in order (the eos included when it stopped there).
    generated_ids: Vec<u32>,
    /// Why it stopped: `"tokens"`, `"eos"` or `"context"`.
    stop: &'static str,
    /// The prompt and continuation decoded, special tokens left out.
    text: String,
}

/// Greedy continuation of `prompt` by `model`: up to `n` ids, stopping after `eos` or when the
/// sequence reaches `context` ids. Returns the new ids and why it stopped.
///
/// # Errors
/// The model's error on a forward pass.
fn greedy(
    m: &Loaded,
    prompt: &[u32],
    n: usize,
    device: &engram::core::burn::tensor::Device,
) -> Result<(Vec<u32>, &'static str)> {
    let mut ids = prompt.to_vec();
    let mut new = Vec::new();
    let vocab = m.model.num_classes;
    while new.len() < n {
        if m.context.is_some_and(|c| ids.len() >= c) {
            return Ok((new, "context"));
        }
        let len = ids.len();
        let f: Vec<f32> = ids.iter().map(|&v| v as f32).collect();
        let x = Activation::Flat(Tensor::from_data(TensorData::new(f, [1, len]), device));
        let logits = m.model.forward_tokens(x, &ForwardCtx::evaluation(None))?;
        let last: Vec<f32> = logits
            .slice([0..1, len - 1..len, 0..vocab])
            .to_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .map_err(|e| Error::Other(format!("generate: logits unreadable: {e:?}")))?;
        let mut best = 0;
        for (i, &v) in last.iter().enumerate() {
            if v > last[best] {
                best = i;
            }
        }
        let id = best as u32;
        ids.push(id);
        new.push(id);
        if Some(id) == m.eos {
            return Ok((new, "eos"));
        }
    }
    Ok((new, "tokens"))
}

/// `engram generate`: see the module docs.
///
/// # Errors
/// Exit code 2 for a missing or non-Llama model, a run directory, a prompt of no token or one
/// outside the vocabulary, or a `--json` that cannot be written.
pub fn generate(cli: &Cli, registry: &Registry, args: &GenerateArgs) -> Result<()> {
    let existing = Existing::Overwrite(args.overwrite);
    if let Some(out) = &args.json {
        engram::outpath::check_file(out, "--json", existing)?;
    }
    let device = engram::core::device::select(args.device.as_deref().unwrap_or("cpu"))?;
    let m = load(&args.model, &device, registry, args.device.as_deref())?;
    let prompt = m.tokenizer.encode_ids(&args.prompt)?;
    if prompt.is_empty() {
        return Err(Error::Usage(
            "--prompt: no token; give a text to continue".into(),
        ));
    }
    if let Some(&bad) = prompt.iter().find(|&&v| v as usize >= m.model.num_classes) {
        return Err(Error::Usage(format!(
            "--prompt: token id {bad} is outside the model's vocabulary of {}",
            m.model.num_classes
        )));
    }
    if let Some(c) = m.context.filter(|&c| prompt.len() > c) {
        return Err(Error::Usage(format!(
            "--prompt: {} tokens, over the model's context length {c}",
            prompt.len()
        )));
    }
    let (new, stop) = greedy(&m, &prompt, args.tokens, &device)?;
    let all: Vec<u32> = prompt.iter().chain(&new).copied().collect();
    let text = m.tokenizer.decode(&all, true)?;
    if let Some(path) = &args.json {
        let out = GenerateJson {
            model: args.model.display().to_string(),
            prompt_ids: prompt,
            generated_ids: new,
            stop,
            text: text.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&out).map_err(|e| Error::Other(e.to_string()))?;
        bytes.push(b'\n');
        engram::outpath::write_file(path, "--json", existing, &bytes)?;
    }
    let _ = cli;
    println!("{text}");
    Ok(())
}
