//! Your own Burn model as an engram model, in-process: the code behind the book's chapter
//! "Your model".
//!
//! `tiny-conv` is two Burn modules, each made an engram block: a convolution stage built with
//! Burn's own `Conv2dConfig::init` and a linear head built with `LinearConfig::init`. One
//! registration line makes it `[model] type = "tiny-conv"`; the example then trains it on a
//! small slice of real Split Fashion-MNIST with EWC and replay, through the same `prepare` and
//! `run` as `engram run`, and prints the accuracy matrix. Run it with
//! `cargo run --release --example own_model` (it needs the dataset: `apt-get install
//! dataset-fashion-mnist`, or `engram data fetch fashion-mnist`).

// ANCHOR: blocks
use engram::core::burn;
use engram::core::burn::module::Module;
use engram::core::burn::nn::conv::{Conv2d, Conv2dConfig};
use engram::core::burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use engram::core::burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use engram::core::burn::tensor::{Device, activation::relu};
use engram::core::component::Component;
use engram::core::config::{LoadedConfig, ParamSource};
use engram::core::model::{Activation, Block, DynBlock, ForwardCtx, Model, ModelContext};
use engram::core::registry::Origin;
use engram::core::train::trainer::{RunOptions, prepare, run};
use engram::core::{Error, Result};
use serde::{Deserialize, Serialize};

/// 3×3 convolution, ReLU, 2×2 max pooling: `[b, c, h, w]` → `[b, channels, h/2, w/2]`.
#[derive(Module, Debug)]
pub struct ConvStage {
    conv: Conv2d,
    pool: MaxPool2d,
    /// `[channels, height, width]` of one input sample (the trainer's batches are flat).
    #[module(skip)]
    input: [usize; 3],
}

impl Block for ConvStage {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        let x = x.into_image(self.input);
        Activation::Image(self.pool.forward(relu(self.conv.forward(x))))
    }
    fn kind(&self) -> &'static str {
        "conv"
    }
}

/// A linear layer on the flattened features: `[b, …]` → `[b, classes]`.
#[derive(Module, Debug)]
pub struct Head {
    linear: Linear,
}

impl Block for Head {
    fn forward(&self, x: Activation, _ctx: &ForwardCtx) -> Activation {
        Activation::Flat(self.linear.forward(x.into_flat()))
    }
    fn kind(&self) -> &'static str {
        "head"
    }
}
// ANCHOR_END: blocks

// ANCHOR: factory
/// `[model] type = "tiny-conv"`: its keys, with their defaults.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TinyConvParams {
    /// Convolution channels. Default 8.
    pub channels: usize,
}

impl Default for TinyConvParams {
    fn default() -> Self {
        Self { channels: 8 }
    }
}

/// Decodes the keys, checks them against the data, and builds the model on `device`.
fn build(src: &ParamSource, cx: &ModelContext, device: &Device) -> Result<Model> {
    let p: TinyConvParams = src.parse()?;
    if p.channels == 0 || p.channels > 256 {
        return Err(src.key_error("channels", "channels must be 1 to 256".into(), None));
    }
    let (c, side) = cx.square_side(src, TinyConvParams::NAME)?;
    cx.seed_device(device); // Burn's layers initialise from the device's RNG
    let blocks = vec![
        DynBlock::new(ConvStage {
            conv: Conv2dConfig::new([c, p.channels], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            input: [c, side, side],
        }),
        DynBlock::new(Head {
            linear: LinearConfig::new(p.channels * (side / 2) * (side / 2), cx.num_classes)
                .init(device),
        }),
    ];
    Ok(Model::new(blocks, cx.num_classes))
}

// The one declaration: kind and name, summary, the keys' type (for the defaults) and the
// factory become the registration `TINY_CONV` and `TinyConvParams::NAME`.
engram::core::component!(pub const TINY_CONV = model "tiny-conv", "one conv stage and a linear head (the book's example)", TinyConvParams, build);
// ANCHOR_END: factory

// ANCHOR: main
const CONFIG: &str = r#"
[run]
seed = 0
[data]
dataset = "fashion-mnist"
tasks = 2
classes_per_task = 2
subsample = 1000
test_subsample = 400
[model]
type = "tiny-conv"
channels = 8
[optimizer]
type = "sgd"
lr = 0.05
momentum = 0.9
[train]
batch_size = 64
[[forgetting]]
type = "ewc"
[[forgetting]]
type = "replay"
capacity = 100
"#;

fn main() -> Result<()> {
    let mut registry = engram::registry();
    registry.add(TINY_CONV, Origin::Builtin)?;
    let cfg = LoadedConfig::from_source(std::path::Path::new("own-model.toml"), CONFIG.into())?;
    let prepared = match prepare(cfg, &registry) {
        Err(Error::DatasetMissing { hint, .. }) => {
            println!("Fashion-MNIST is not installed, so nothing was trained: {hint}");
            return Ok(());
        }
        other => other?,
    };
    let out = std::env::temp_dir().join(format!("engram-own-model-{}", std::process::id()));
    let report = run(
        prepared,
        &RunOptions {
            out: out.clone(),
            progress: false,
        },
    )?;
    println!("model: {}", report.config["model"]);
    for (t, row) in report.accuracy_matrix.iter().enumerate() {
        let cells: Vec<String> = row.iter().flatten().map(|a| format!("{a:.3}")).collect();
        println!("after task {t}: {}", cells.join(" "));
    }
    println!("ACC {:.4}", report.metrics.acc.unwrap_or(f64::NAN));
    let _ = std::fs::remove_dir_all(out);
    Ok(())
}
// ANCHOR_END: main
