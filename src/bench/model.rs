//! The models the benchmarks build (`--model mlp|cnn|vit|bert|llama`) and their synthetic
//! inputs: 28×28 images in `[-1, 1)` for the image models, random token ids for BERT and the
//! Llama decoder, each drawn once from a seeded stream so that every row and every run sees the
//! same data.

use engram_core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram_core::data::stream::{Batch, SampleRef};
use engram_core::model::bert::{BertShape, Pooling};
use engram_core::model::llama::LlamaShape;
use engram_core::model::mlp::{ActivationKind, build_mlp};
use engram_core::model::{Model, bert, llama};
use engram_core::{Error, Result, rng};
use rand::Rng as _;
use std::path::PathBuf;

/// Classes of the BERT benchmark's head (a sentence-pair or binary task's).
pub const BERT_CLASSES: usize = 2;

/// Classes of the image models' head (Fashion-MNIST's).
pub const IMAGE_CLASSES: usize = 10;

/// The model a benchmark runs.
#[derive(Clone, Debug, PartialEq)]
pub enum BenchModel {
    /// A deep MLP on 784 inputs: `depth` hidden blocks of `width` (ReLU).
    Mlp {
        /// Hidden blocks.
        depth: usize,
        /// Their width.
        width: usize,
    },
    /// The CNN on 1×28×28 images: `depth` (1 or 2) conv blocks of `width`, `2·width` channels,
    /// flatten head.
    Cnn {
        /// Conv blocks (1 or 2).
        depth: usize,
        /// Channels of the first block.
        width: usize,
    },
    /// The ViT: `depth` encoder blocks of width `width` (4 heads, 7×7 patches, dropout 0.1).
    Vit {
        /// Encoder blocks.
        depth: usize,
        /// Model width.
        width: usize,
    },
    /// A BERT encoder (post-norm, dropout 0.1, `cls` pooling) with a [`BERT_CLASSES`]-way head
    /// on random token ids `[batch, seq_len]`.
    Bert {
        /// Its geometry (a preset's, or a Hugging Face `config.json`'s).
        shape: BertShape,
        /// A Hugging Face directory whose weights it starts from (`None`: random init, BERT's
        /// standard deviation 0.02).
        init: Option<PathBuf>,
        /// Tokens per sequence (at most `shape.max_position`).
        seq_len: usize,
    },
    /// A Llama decoder trained by next-token prediction on windows of random token ids
    /// `[batch, seq_len]` (the loss: the mean next-token NLL, as `objective = "lm"` trains).
    Llama {
        /// Its geometry (a preset's, or a GGUF file's).
        shape: LlamaShape,
        /// A GGUF file whose weights it starts from (`None`: random init, standard deviation
        /// 0.02).
        init: Option<PathBuf>,
        /// Tokens per window (at least 2).
        seq_len: usize,
    },
}

/// The geometry of BERT preset `name` ([`bert::PRESETS`]: `minilm`, `base`, `large`) with
/// BERT's vocabulary, 512 positions, 2 token types, ε 1e-12, dropout 0.1, pad id 0 and `cls`
/// pooling; `None` for an unknown name.
pub fn bert_preset(name: &str) -> Option<BertShape> {
    let (_, [layers, hidden, heads, ffn]) = bert::PRESETS.iter().find(|(n, _)| *n == name)?;
    Some(BertShape {
        layers: *layers,
        hidden: *hidden,
        heads: *heads,
        ffn: *ffn,
        vocab: bert::BERT_VOCAB,
        max_position: 512,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
        dropout: 0.1,
        pad_id: 0,
        pooling: Pooling::Cls,
    })
}

impl BenchModel {
    /// A BERT benchmark model from a Hugging Face directory's `config.json` (dropout 0.1, `cls`
    /// pooling), starting from its weights.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the directory when its `config.json` cannot be read or is not a
    /// supported BERT config, or when `seq_len` exceeds its position table.
    pub fn bert_from_dir(dir: &std::path::Path, seq_len: usize) -> Result<Self> {
        let cfg = bert::hf::HfConfig::read(dir)
            .map_err(|e| Error::Usage(format!("bench: --init {}: {e}", dir.display())))?;
        let shape = cfg.shape(Pooling::Cls, 0.1);
        check_seq_len(&shape, seq_len)?;
        Ok(Self::Bert {
            shape,
            init: Some(dir.to_path_buf()),
            seq_len,
        })
    }

    /// A Llama benchmark model from a GGUF file (its geometry and weights).
    ///
    /// # Errors
    /// [`Error::Usage`] naming the file when it cannot be read or is not a Llama GGUF, or when
    /// `seq_len` is over its context length (`llama.context_length`).
    pub fn llama_from_gguf(file: &std::path::Path, seq_len: usize) -> Result<Self> {
        let usage = |e: String| Error::Usage(format!("bench: --init {}: {e}", file.display()));
        let f = engram_core::gguf::GgufFile::open(file).map_err(|e| usage(e.to_string()))?;
        let shape = llama::gguf::shape_of(&f).map_err(|e| usage(e.to_string()))?;
        let context = f
            .metadata("llama.context_length")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize);
        if let Some(c) = context.filter(|c| seq_len > *c) {
            return Err(Error::Usage(format!(
                "bench: --seq-len {seq_len} is over the model's context length {c} (GGUF llama.context_length)"
            )));
        }
        Ok(Self::Llama {
            shape,
            init: Some(file.to_path_buf()),
            seq_len,
        })
    }

    /// Whether the model trains by next-token prediction (the Llama decoder).
    pub fn is_lm(&self) -> bool {
        matches!(self, Self::Llama { .. })
    }

    /// Input features per sample: 784 pixels, or the `seq_len` token ids of BERT and Llama.
    pub fn input_width(&self) -> usize {
        match self {
            Self::Bert { seq_len, .. } | Self::Llama { seq_len, .. } => *seq_len,
            _ => 784,
        }
    }

    /// Classes of the head (a Llama's: its vocabulary, the logits of each token).
    pub fn classes(&self) -> usize {
        match self {
            Self::Bert { .. } => BERT_CLASSES,
            Self::Llama { shape, .. } => shape.vocab,
            _ => IMAGE_CLASSES,
        }
    }

    /// One line for the tables: `MLP 16 × 256`, `BERT 24 layers × 1024 (16 heads, FFN 4096),
    /// length 64, random init`…
    pub fn describe(&self) -> String {
        match self {
            Self::Mlp { depth, width } => format!("MLP {depth} × {width}"),
            Self::Cnn { depth, width } => {
                let ch: Vec<usize> = (0..*depth).map(|i| width << i).collect();
                format!("CNN channels {ch:?}")
            }
            Self::Vit { depth, width } => format!("ViT {depth} × {width}"),
            Self::Bert {
                shape,
                init,
                seq_len,
            } => format!(
                "BERT {} layers × {} ({} heads, FFN {}), length {seq_len}, {}",
                shape.layers,
                shape.hidden,
                shape.heads,
                shape.ffn,
                init.as_ref().map_or("random init".to_string(), |d| format!(
                    "weights of {}",
                    d.display()
                ))
            ),
            Self::Llama {
                shape,
                init,
                seq_len,
            } => format!(
                "Llama {} layers × {} ({} heads, {} key/value, FFN {}, vocabulary {}), windows of {seq_len}, {}",
                shape.layers,
                shape.hidden,
                shape.heads,
                shape.kv_heads,
                shape.ffn,
                shape.vocab,
                init.as_ref().map_or("random init".to_string(), |d| format!(
                    "weights of {}",
                    d.display()
                ))
            ),
        }
    }

    /// Builds the model on `ad` from the random stream `r` (and, for BERT with `init`, its
    /// checkpoint's weights).
    ///
    /// # Errors
    /// [`Error::Usage`] when a BERT checkpoint's weights cannot be loaded.
    pub fn build(&self, r: &mut rng::Rng, ad: &Device) -> Result<Model> {
        Ok(match self {
            Self::Mlp { depth, width } => build_mlp(
                784,
                &vec![*width; *depth],
                IMAGE_CLASSES,
                ActivationKind::Relu,
                0.0,
                r,
                ad,
            ),
            Self::Cnn { depth, width } => engram_core::model::cnn::build_cnn(
                [1, 28, 28],
                &(0..*depth).map(|i| width << i).collect::<Vec<_>>(),
                engram_core::model::cnn::CnnHead::Flatten,
                IMAGE_CLASSES,
                r,
                ad,
            ),
            Self::Vit { depth, width } => engram_core::model::vit::build_vit(
                &engram_core::model::vit::VitShape {
                    side: 28,
                    channels: 1,
                    patch: 7,
                    dim: *width,
                    depth: *depth,
                    heads: 4,
                    mlp_ratio: 2,
                    dropout: 0.1,
                },
                IMAGE_CLASSES,
                r,
                ad,
            ),
            Self::Bert { shape, init, .. } => {
                let m = bert::build_bert(shape, BERT_CLASSES, r, ad);
                match init {
                    None => m,
                    Some(dir) => {
                        bert::hf::load_dir(m, dir, shape.layers)
                            .map_err(|e| {
                                Error::Usage(format!(
                                    "bench: --init {}: {}",
                                    dir.display(),
                                    e.error
                                ))
                            })?
                            .0
                    }
                }
            }
            Self::Llama { shape, init, .. } => match init {
                None => llama::build_llama(shape, r, ad),
                Some(file) => {
                    llama::gguf::from_file(file, ad)
                        .map_err(|e| {
                            Error::Usage(format!("bench: --init {}: {e}", file.display()))
                        })?
                        .0
                }
            },
        })
    }
}

/// A batch's input from a `[rows, width]` float tensor: the tensor itself, or its float variant
/// where a batch's input type also holds token ids (generic, so that it is the conversion of
/// either).
fn batch_input<X: From<Tensor<2>>>(t: Tensor<2>) -> X {
    X::from(t)
}

/// Refuses a sequence longer than BERT's position table (or empty).
///
/// # Errors
/// [`Error::Usage`].
pub fn check_seq_len(shape: &BertShape, seq_len: usize) -> Result<()> {
    if seq_len == 0 || seq_len > shape.max_position {
        return Err(Error::Usage(format!(
            "bench: --seq-len {seq_len} must be in 1..={} (the model's position table)",
            shape.max_position
        )));
    }
    Ok(())
}

/// Synthetic samples drawn once and rebuilt as batches on any device: `x` `[n, width]` (pixels
/// in `[-1, 1)`, or token ids drawn uniformly from the vocabulary without the pad id, as exact
/// `f32` integers, which BERT's embeddings read as ids), labels uniform over the classes.
pub struct Inputs {
    /// The features, row-major `[n, width]`.
    pub xs: Vec<f32>,
    /// The labels `[n]`.
    pub ys: Vec<i64>,
    /// Features per sample.
    pub width: usize,
    /// Whether a batch holds the rows as token ids (`Input::Ids`, a language model's windows,
    /// which its next-token loss reads) rather than as floats.
    pub ids: bool,
}

impl Inputs {
    /// `n` samples for `model` from `r`.
    pub fn draw(model: &BenchModel, n: usize, r: &mut rng::Rng) -> Self {
        let width = model.input_width();
        let xs = match model {
            BenchModel::Llama { shape, .. } => (0..n * width)
                .map(|_| r.random_range(0..shape.vocab as u32) as f32)
                .collect(),
            BenchModel::Bert { shape, .. } => (0..n * width)
                .map(|_| {
                    let id = r.random_range(0..shape.vocab as u32 - 1);
                    (if id >= shape.pad_id { id + 1 } else { id }) as f32
                })
                .collect(),
            _ => (0..n * width).map(|_| r.random_range(-1.0..1.0)).collect(),
        };
        let classes = model.classes() as i64;
        let ys = (0..n).map(|_| r.random_range(0..classes)).collect();
        Self {
            xs,
            ys,
            width,
            ids: model.is_lm(),
        }
    }

    /// `x` `[rows, width]` as a tensor on `device` (BERT reads token ids given as exact
    /// floats as ids).
    pub fn tensor(&self, x: Vec<f32>, rows: usize, device: &Device) -> Tensor<2> {
        Tensor::from_data(TensorData::new(x, [rows, self.width]), device)
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.ys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ys.is_empty()
    }

    /// Batch `k` of size `batch` (cycling through the samples) on `device`.
    pub fn batch(&self, device: &Device, k: usize, batch: usize) -> Batch {
        let chunks = (self.len() / batch).max(1);
        let start = (k % chunks) * batch;
        let x = self.xs[start * self.width..(start + batch) * self.width].to_vec();
        let y = self.ys[start..start + batch].to_vec();
        let x = self.tensor(x, batch, device);
        Batch {
            x: if self.ids {
                engram_core::data::input::Input::Ids(x.int())
            } else {
                batch_input(x)
            },
            y: Tensor::<1, Int>::from_data(TensorData::new(y, [batch]), device),
            weights: None,
            logit_mask: None,
            refs: (0..batch)
                .map(|i| SampleRef {
                    task: 0,
                    index: i as u32,
                })
                .collect(),
            new_samples: batch,
        }
    }
}
