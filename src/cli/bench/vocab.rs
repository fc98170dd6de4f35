//! The benchmarks' one vocabulary for the model they run, shared by `engram bench memory` and
//! `engram bench throughput` (and the adapter and language-model benchmarks after them):
//! `--model mlp|cnn|vit|bert|llama`, `--preset minilm|base|large|smollm2` (a BERT or Llama
//! geometry, random init) or `--init DIR|FILE.gguf` (a Hugging Face BERT directory, a Llama GGUF
//! file: its geometry and weights), `--seq-len`, `--batch`, `--depth`/`--width` (the image
//! models' size) and `--optimizer sgd|adamw`. `llama` is bench memory's only.

use clap::Args;
use engram::bench::{BenchModel, BenchOptimizer, bert_preset};
use engram::core::{Error, Result};
use std::path::PathBuf;

/// The model flags of a benchmark.
#[derive(Args, Clone, Debug, Default)]
pub struct ModelArgs {
    /// The model: `mlp`, `cnn`, `vit`, `bert` or `llama` (bench memory only: a decoder trained
    /// by next-token prediction) [default: `vit` for bench memory, `mlp` for bench throughput].
    #[arg(long)]
    pub model: Option<String>,
    /// A geometry with random init: BERT's `minilm` (6 layers × 384, 12 heads, FFN 1536; the
    /// default), `base` (12 × 768, 12, 3072) or `large` (24 × 1024, 16, 4096); Llama's
    /// `smollm2` (30 × 576, 9 heads, 3 key/value, FFN 1536, vocabulary 49,152; the default).
    #[arg(long, conflicts_with = "init")]
    pub preset: Option<String>,
    /// Where the weights come from, with the geometry: a Hugging Face BERT directory
    /// (`config.json` + `model.safetensors`) for `--model bert`, a Llama GGUF file for
    /// `--model llama`.
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Tokens per sequence (random ids) [default: bert 64 for bench memory, 128 for bench
    /// throughput; llama 128]. `--model bert` and `llama` only.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Batch size [defaults: bench memory: mlp 4096, cnn and vit 256, bert 4, llama 8; bench
    /// throughput: 128, cnn 64 (examples/cnn/split-fmnist.toml's), bert 16].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Blocks of the mlp, cnn (1 or 2) or vit [defaults: bench memory: mlp 16, vit 8; bench
    /// throughput: mlp 2, vit 8; cnn 2].
    #[arg(long)]
    pub depth: Option<usize>,
    /// Width of each block (mlp, vit; the cnn's first channels) [defaults: bench memory: mlp
    /// 256, vit 128; bench throughput: mlp 400, vit 128; cnn 16].
    #[arg(long)]
    pub width: Option<usize>,
    /// The optimiser: `sgd` (momentum 0.9; bench throughput's default) or `adamw`. On bench
    /// memory it adds the optimiser's update to each measured step and the columns trainable
    /// parameters, optimiser state and training peak (without it: forward and backward only).
    #[arg(long)]
    pub optimizer: Option<String>,
}

/// Which benchmark the flags are for (their defaults differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bench {
    /// `engram bench memory`.
    Memory,
    /// `engram bench throughput`.
    Throughput,
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::Memory => "bench memory",
            Bench::Throughput => "bench throughput",
        }
    }
}

/// The models the vocabulary names and builds.
pub const MODELS: [&str; 5] = ["mlp", "cnn", "vit", "bert", "llama"];

/// A model, its batch and the optimiser, resolved from [`ModelArgs`].
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The model.
    pub model: BenchModel,
    /// Batch size.
    pub batch: usize,
    /// The optimiser (SGD unless `--optimizer` names another).
    pub optimizer: BenchOptimizer,
    /// Whether `--optimizer` was given: bench memory then includes the optimiser's update in
    /// each measured step (and its state in the training peak); without it, a step is the
    /// forward and backward only.
    pub optimizer_given: bool,
}

impl ModelArgs {
    /// The model, batch and optimiser these flags give for `bench`.
    ///
    /// # Errors
    /// [`Error::Usage`] (exit code 2): an unknown model or preset, `llama` on bench throughput,
    /// a zero size, the token models' flags (`--preset`, `--init`, `--seq-len`) on an image
    /// model or the image models' (`--depth`, `--width`) on a token model, a CNN of more than 2
    /// blocks, `--init` that is not a Hugging Face BERT directory (a Llama GGUF file), a
    /// sequence longer than BERT's positions (or a Llama window under 2), and an unknown
    /// optimiser.
    pub fn resolve(&self, bench: Bench) -> Result<Resolved> {
        let cmd = bench.name();
        let usage = |m: String| Err(Error::Usage(format!("{cmd}: {m}")));
        let default = if bench == Bench::Memory { "vit" } else { "mlp" };
        let name = self.model.as_deref().unwrap_or(default);
        if name == "llama" && bench == Bench::Throughput {
            return usage(
                "--model llama is measured by bench memory (peak memory and step time of next-token training); bench throughput's peers are the classifiers (mlp, cnn, vit, bert)".into(),
            );
        }
        if !MODELS.contains(&name) {
            return usage(format!(
                "unknown model `{name}` (available: {})",
                MODELS.join(", ")
            ));
        }
        for (flag, v) in [
            ("--batch", self.batch),
            ("--depth", self.depth),
            ("--width", self.width),
            ("--seq-len", self.seq_len),
        ] {
            if v == Some(0) {
                return usage(format!("{flag} must be at least 1"));
            }
        }
        let optimizer = match &self.optimizer {
            None => BenchOptimizer::Sgd,
            Some(o) => BenchOptimizer::parse(o)?,
        };
        let model = match name {
            "bert" => self.bert(bench)?,
            "llama" => self.llama()?,
            _ => self.image_model(name, bench)?,
        };
        let batch = self.batch.unwrap_or(match (bench, name) {
            (Bench::Memory, "mlp") => 4096,
            (Bench::Memory, "bert") => 4,
            (Bench::Memory, "llama") => 8,
            (Bench::Memory, _) => 256,
            (Bench::Throughput, "bert") => 16,
            (Bench::Throughput, "cnn") => 64,
            (Bench::Throughput, _) => 128,
        });
        Ok(Resolved {
            model,
            batch,
            optimizer,
            optimizer_given: self.optimizer.is_some(),
        })
    }

    /// `--model mlp|cnn|vit`: refuses BERT's flags, applies the size defaults.
    fn image_model(&self, name: &str, bench: Bench) -> Result<BenchModel> {
        let given: Vec<&str> = [
            ("--preset", self.preset.is_some()),
            ("--init", self.init.is_some()),
            ("--seq-len", self.seq_len.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        if !given.is_empty() {
            return Err(Error::Usage(format!(
                "{}: {} {} the token models' (--model bert, llama); --model {name} is sized by --depth and --width",
                bench.name(),
                given.join(", "),
                if given.len() == 1 { "is" } else { "are" }
            )));
        }
        let memory = bench == Bench::Memory;
        Ok(match name {
            "mlp" => BenchModel::Mlp {
                depth: self.depth.unwrap_or(if memory { 16 } else { 2 }),
                width: self.width.unwrap_or(if memory { 256 } else { 400 }),
            },
            "cnn" => {
                let (depth, width) = (self.depth.unwrap_or(2), self.width.unwrap_or(16));
                if depth > 2 || width > 512 {
                    return Err(Error::Usage(format!(
                        "{}: the cnn has 1 or 2 conv blocks (--depth) of at most 512 channels (--width); got {depth} × {width}",
                        bench.name()
                    )));
                }
                BenchModel::Cnn { depth, width }
            }
            _ => BenchModel::Vit {
                depth: self.depth.unwrap_or(8),
                width: self.width.unwrap_or(128),
            },
        })
    }

    /// `--model bert`: a preset's geometry (default `minilm`) or an `--init` directory's.
    fn bert(&self, bench: Bench) -> Result<BenchModel> {
        let cmd = bench.name();
        if self.depth.is_some() || self.width.is_some() {
            return Err(Error::Usage(format!(
                "{cmd}: --depth and --width size the mlp, cnn and vit; a bert's geometry is its --preset (minilm, base, large) or --init DIR"
            )));
        }
        let seq_len = self
            .seq_len
            .unwrap_or(if bench == Bench::Memory { 64 } else { 128 });
        if let Some(dir) = &self.init {
            if !engram::core::model::bert::hf::is_hf_dir(dir) {
                return Err(Error::Usage(format!(
                    "{cmd}: --init {}: not a Hugging Face directory (no config.json in it)",
                    dir.display()
                )));
            }
            return BenchModel::bert_from_dir(dir, seq_len);
        }
        let preset = self.preset.as_deref().unwrap_or("minilm");
        let Some(shape) = bert_preset(preset) else {
            let later = if preset == "smollm2" {
                " (smollm2 is a llama preset: --model llama)"
            } else {
                ""
            };
            return Err(Error::Usage(format!(
                "{cmd}: unknown preset `{preset}`{later}; available: minilm, base, large"
            )));
        };
        engram::bench::model::check_seq_len(&shape, seq_len)?;
        Ok(BenchModel::Bert {
            shape,
            init: None,
            seq_len,
        })
    }

    /// `--model llama`: a preset's geometry (default `smollm2`, random init) or a GGUF file's
    /// (`--init`, its weights too); windows of `--seq-len` tokens (default 128).
    fn llama(&self) -> Result<BenchModel> {
        let cmd = Bench::Memory.name();
        if self.depth.is_some() || self.width.is_some() {
            return Err(Error::Usage(format!(
                "{cmd}: --depth and --width size the mlp, cnn and vit; a llama's geometry is its --preset (smollm2) or --init FILE.gguf"
            )));
        }
        let seq_len = self.seq_len.unwrap_or(128);
        if seq_len < 2 {
            return Err(Error::Usage(format!(
                "{cmd}: --seq-len {seq_len}: a next-token window needs at least 2 tokens"
            )));
        }
        if let Some(file) = &self.init {
            return BenchModel::llama_from_gguf(file, seq_len);
        }
        let preset = self.preset.as_deref().unwrap_or("smollm2");
        let Some((_, [layers, hidden, heads, kv_heads, ffn, vocab])) =
            engram::core::model::llama::PRESETS
                .iter()
                .find(|(n, _)| *n == preset)
        else {
            return Err(Error::Usage(format!(
                "{cmd}: unknown llama preset `{preset}`; available: smollm2"
            )));
        };
        Ok(BenchModel::Llama {
            shape: engram::core::model::llama::LlamaShape {
                layers: *layers,
                hidden: *hidden,
                heads: *heads,
                kv_heads: *kv_heads,
                ffn: *ffn,
                vocab: *vocab,
                rope_base: 1e5,
                rms_eps: 1e-5,
                tied: true,
            },
            init: None,
            seq_len,
        })
    }

    /// The flags as given, to hand to a child process of this binary.
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut put = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(flag.to_string());
                out.push(v);
            }
        };
        put("--model", self.model.clone());
        put("--preset", self.preset.clone());
        put(
            "--init",
            self.init.as_ref().map(|p| p.display().to_string()),
        );
        put("--seq-len", self.seq_len.map(|v| v.to_string()));
        put("--batch", self.batch.map(|v| v.to_string()));
        put("--depth", self.depth.map(|v| v.to_string()));
        put("--width", self.width.map(|v| v.to_string()));
        put("--optimizer", self.optimizer.clone());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(model: &str) -> ModelArgs {
        ModelArgs {
            model: Some(model.into()),
            ..ModelArgs::default()
        }
    }

    /// The defaults of each benchmark, and BERT-large's geometry from its preset.
    #[test]
    fn defaults_and_presets() {
        let r = ModelArgs::default().resolve(Bench::Memory).unwrap();
        assert_eq!(
            (r.model, r.batch),
            (
                BenchModel::Vit {
                    depth: 8,
                    width: 128
                },
                256
            )
        );
        let r = ModelArgs::default().resolve(Bench::Throughput).unwrap();
        assert_eq!(
            (r.model, r.batch, r.optimizer),
            (
                BenchModel::Mlp {
                    depth: 2,
                    width: 400
                },
                128,
                BenchOptimizer::Sgd
            )
        );
        // The CNN of bench throughput is the recipe's (examples/cnn/split-fmnist.toml):
        // channels [16, 32], batch 64.
        let r = args("cnn").resolve(Bench::Throughput).unwrap();
        assert_eq!(
            (r.model, r.batch),
            (
                BenchModel::Cnn {
                    depth: 2,
                    width: 16
                },
                64
            )
        );
        let r = args("vit").resolve(Bench::Throughput).unwrap();
        assert_eq!(
            (r.model, r.batch),
            (
                BenchModel::Vit {
                    depth: 8,
                    width: 128
                },
                128
            )
        );
        let mut a = args("bert");
        a.preset = Some("large".into());
        let r = a.resolve(Bench::Memory).unwrap();
        let BenchModel::Bert { shape, seq_len, .. } = r.model else {
            panic!("{r:?}")
        };
        assert_eq!(
            (shape.layers, shape.hidden, shape.heads, shape.ffn, seq_len),
            (24, 1024, 16, 4096, 64)
        );
        assert_eq!(r.batch, 4);
    }

    /// Each bad combination is a usage error that says what is wrong.
    #[test]
    fn bad_combinations_are_usage_errors() {
        let mut preset_on_mlp = args("mlp");
        preset_on_mlp.preset = Some("base".into());
        let mut depth_on_bert = args("bert");
        depth_on_bert.depth = Some(4);
        let mut long = args("bert");
        long.seq_len = Some(513);
        let mut smollm = args("bert");
        smollm.preset = Some("smollm2".into());
        let mut opt = args("bert");
        opt.optimizer = Some("adamw".into());
        let mut cnn = args("cnn");
        cnn.depth = Some(3);
        for (a, bench, want) in [
            (
                &preset_on_mlp,
                Bench::Memory,
                "--preset is the token models'",
            ),
            (
                &depth_on_bert,
                Bench::Memory,
                "a bert's geometry is its --preset",
            ),
            (&long, Bench::Throughput, "--seq-len 513 must be in 1..=512"),
            (
                &smollm,
                Bench::Memory,
                "smollm2 is a llama preset: --model llama",
            ),
            (
                &args("llama"),
                Bench::Throughput,
                "--model llama is measured by bench memory",
            ),
            (&args("gpt"), Bench::Throughput, "unknown model `gpt`"),
            (&cnn, Bench::Memory, "1 or 2 conv blocks"),
        ] {
            match a.resolve(bench) {
                Err(Error::Usage(m)) => assert!(m.contains(want), "{m}"),
                other => panic!("{a:?}: want a usage error, got {other:?}"),
            }
        }
        for bench in [Bench::Throughput, Bench::Memory] {
            let r = opt.resolve(bench).unwrap();
            assert_eq!(
                (r.optimizer, r.optimizer_given),
                (BenchOptimizer::Adamw, true)
            );
        }
    }
}
