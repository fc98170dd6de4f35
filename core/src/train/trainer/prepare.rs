//! Preparing a run: the config checked and every component built before anything is written.

use super::*;

/// How to run, beyond the config.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The output directory.
    pub out: PathBuf,
    /// Show progress bars (on a terminal).
    pub progress: bool,
}

/// Everything a run needs, built and checked before anything is written.
pub struct Prepared {
    /// The config.
    pub cfg: LoadedConfig,
    /// The device (without autodiff).
    pub device: Device,
    /// The stream of tasks.
    pub stream: Stream,
    /// Forgetting strategies, in config order.
    pub forgetting: Vec<Box<dyn ForgettingStrategy>>,
    /// Memory strategies, in chain order.
    pub memory: Vec<Box<dyn MemoryStrategy>>,
    /// Schedulers, in config order.
    pub schedulers: Vec<Box<dyn Scheduler>>,
    /// Seconds spent preparing.
    pub setup_s: f64,
    /// The plugins loaded for this run (recorded in `run.json` and reloaded by [`resume`]).
    pub plugins: Vec<crate::plugin::PluginInfo>,
    /// The registry the run was prepared with (its model factory builds [`Prepared::build_model`]).
    pub registry: Registry,
    /// The data's fingerprint ([`crate::data::Dataset::fingerprint`]), recorded in every
    /// checkpoint and checked on resume.
    pub data_sha256: String,
    /// The program's observers of the run's progress ([`crate::train::observer`]); none after
    /// [`prepare`]. The terminal's bar is [`RunOptions::progress`], not one of these.
    pub observers: Vec<crate::train::observer::SharedObserver>,
}

pub use crate::fsutil::relative_to;

/// Checks and builds everything a run needs: device, data, stream, strategies.
///
/// # Errors
/// Any input error ([`Error::Config`], [`Error::DatasetMissing`], [`Error::Idx`],
/// [`Error::Device`], …) before a single file is written.
pub fn prepare(cfg: LoadedConfig, registry: &Registry) -> Result<Prepared> {
    let start = Instant::now();
    let c = &cfg.config;
    // Plugins named in the config join the caller's registry: a path relative to the config
    // file, or a bare name searched for ([`crate::plugin::search`]).
    let mut registry = registry.clone();
    for path in &c.plugins {
        load_config_plugin(&cfg, &mut registry, path)?;
    }
    let registry = &registry;
    let device = crate::device::select(&c.run.device)
        .map_err(|e| cfg.error_at("run", "device", e.to_string(), None))?;
    // Names are looked up before the data is read, so that a misspelt name says so at once.
    registry.check_names(&cfg)?;
    let stream = registry.stream(&cfg)?;
    if stream.dataset.train.values.is_tokens() && stream.scenario == Scenario::DomainIncremental {
        return Err(cfg.error_at(
            "data",
            "scenario",
            "the domain-incremental scenario permutes each sample's values; this data holds token ids, which a permutation turns into other sentences, not the same text in a new domain".into(),
            Some("use scenario = \"class-incremental\" or \"task-incremental\" for text".into()),
        ));
    }
    if let Some(a) = &c.data.augment {
        crate::data::augment::check(a, stream.dataset.input, stream.scenario)
            .map_err(|m| cfg.error_at("data", "augment", m, None))?;
    }
    // The model's factory checks its keys against the data's geometry now, before anything is
    // written (the model itself is built again, on the run's device, by `build_model`).
    let model = registry.build_model(&cfg, &model_context(&cfg, &stream), &device)?;
    let (model, _) = load_init(&cfg, model)?;
    check_model_fits_data(&cfg, &model, &stream)?;
    let bcx = BuildContext {
        num_tasks: stream.len(),
        num_classes: stream.num_classes,
        batch_size: c.train.batch_size,
        seed: c.run.seed,
    };
    let forgetting = registry.build_forgetting(&cfg, &bcx)?;
    check_objective(&cfg, &model, &stream, &forgetting, &device)?;
    let mut owners: Vec<(&'static str, &str)> = Vec::new();
    for (i, f) in forgetting.iter().enumerate() {
        if let Some(r) = f.memory_refusal(&c.memory) {
            return Err(cfg
                .params("forgetting", i)
                .key_error(r.key, r.message, Some(r.hint)));
        }
        if let Some(what) = f.owns() {
            if let Some((_, first)) = owners.iter().find(|(w, _)| *w == what) {
                let message = if *first == f.name() {
                    format!("`{first}` is listed twice: each entry would own {what}")
                } else {
                    format!("`{}` and `{first}` both own {what}", f.name())
                };
                return Err(cfg.params("forgetting", i).key_error(
                    "type",
                    message,
                    Some(format!("keep one strategy that owns {what}")),
                ));
            }
            owners.push((what, f.name()));
        }
    }
    let memory = registry.build_memory(&cfg, &bcx)?;
    let schedulers = registry.build_schedulers(&cfg, &bcx)?;
    // A memory strategy's adaptation (`lora`'s targets) is checked on the real model too, and
    // `[model] adapter` against the adapters it attaches.
    load_adapter(&cfg, adapt(&memory, model)?)?;
    Ok(Prepared {
        data_sha256: stream.dataset.fingerprint(),
        plugins: registry.plugins().to_vec(),
        registry: registry.clone(),
        cfg,
        device,
        stream,
        forgetting,
        memory,
        schedulers,
        setup_s: start.elapsed().as_secs_f64(),
        observers: Vec::new(),
    })
}

/// Loads the config's `plugins` entry `path` into `registry`: found by
/// [`crate::plugin::search::find`] (a bare name is searched for in `$ENGRAM_PLUGIN_PATH`, the
/// program's directory and its `../lib`, then the config's directory).
///
/// # Errors
/// [`Error::Config`] at `plugins` naming every path looked at when no file is found (unless
/// the registry already stands in for one of them: a moved library given with `--plugin`);
/// any error of [`Registry::load_plugin`].
fn load_config_plugin(cfg: &LoadedConfig, registry: &mut Registry, path: &Path) -> Result<()> {
    use crate::plugin::search::{Found, PLUGIN_PATH_VAR, find};
    let looked = match find(path, &cfg.base_dir) {
        Found::File(file) => return registry.load_plugin(&file),
        Found::Missing(looked) => looked,
    };
    // A resumed run whose library moved: the registry stands in for the recorded path.
    if looked.iter().any(|p| registry.load_plugin(p).is_ok()) {
        return Ok(());
    }
    let (line, column) = cfg.position("plugins", "");
    let shown: Vec<String> = looked
        .iter()
        .map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        })
        .collect();
    Err(Error::Config {
        file: cfg.file.clone(),
        line,
        column,
        message: format!(
            "plugin {}: no such file (looked at {})",
            path.display(),
            shown.join(", ")
        ),
        hint: Some(format!(
            "a bare name (`synaptic-intelligence` or `libsynaptic_intelligence.so`) is searched \
             for in ${PLUGIN_PATH_VAR} (directories separated by `:`), beside the engram \
             program and in its ../lib, then beside the config; a path with a directory is \
             relative to the config file. Build plugins with `cargo build --release \
             --workspace` (they land beside target/release/engram), point \
             {PLUGIN_PATH_VAR}=DIR at them, or name the file: `--set plugins=[\"/path/to/lib<name>.so\"]`; \
             a run resumed after its plugin moved takes the library again with `--plugin PATH`"
        )),
    })
}

/// What the model factory is told about the run: the data's input shape, the stream's class
/// count and the run seed.
pub fn model_context(cfg: &LoadedConfig, stream: &Stream) -> crate::model::ModelContext {
    crate::model::ModelContext {
        input: stream.dataset.input,
        num_classes: stream.num_classes,
        seed: cfg.config.run.seed,
    }
}

/// Refuses a model that does not fit the data before anything runs: a head whose outputs are
/// not the data's classes (a language model's per-token logits over its vocabulary, which a
/// classification run would score as classes), and token ids the model's embedding cannot look
/// up (a tokenizer with a larger vocabulary than the model's: the lookup would index past the
/// table, a panic in the backend).
///
/// # Errors
/// A positioned [`Error::Config`] at `[model]` (`init`, else `vocab`, else `type`) saying which
/// count disagrees with which.
pub fn check_model_fits_data(cfg: &LoadedConfig, model: &Model, stream: &Stream) -> Result<()> {
    let m = &cfg.config.model;
    let key = if m.init.is_some() {
        "init"
    } else if m.params.contains_key("vocab") {
        "vocab"
    } else {
        "type"
    };
    // A language model's outputs are its vocabulary, not classes (objective.rs checks it).
    if model.num_classes != stream.num_classes && cfg.config.train.lm_window().is_none() {
        return Err(cfg.error_at(
            "model",
            key,
            format!(
                "the model gives {} outputs a sample, the data has {} classes: this model's head \
                 does not classify the data (a decoder language model's outputs are its vocabulary's \
                 next-token logits, which a classification run does not train as classes)",
                model.num_classes, stream.num_classes
            ),
            Some("classify text with an encoder (type = \"bert\"), whose head takes the data's classes, or train the decoder on next tokens: [train] objective = \"lm\"".into()),
        ));
    }
    let Some(vocab) = model.token_vocab() else {
        return Ok(());
    };
    let d = &stream.dataset;
    for (part, values) in [("training", &d.train.values), ("test", &d.test.values)] {
        if let crate::data::dataset::Values::Tokens(ids) = values
            && let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab)
        {
            return Err(cfg.error_at(
                "model",
                key,
                format!(
                    "the {part} data holds token id {bad}, outside the model's vocabulary of \
                     {vocab} ids: the data's tokenizer is not the model's"
                ),
                Some("tokenize with the model's own tokenizer ([data.options] tokenizer: the checkpoint's tokenizer.json, or the GGUF file itself)".into()),
            ));
        }
    }
    Ok(())
}

/// Applies `[model] init` to a freshly built model, when the config has it.
///
/// # Errors
/// A positioned [`Error::Config`] at `[model] init` with [`crate::model::init::load`]'s reason.
pub fn load_init(
    cfg: &LoadedConfig,
    model: Model,
) -> Result<(Model, Option<crate::model::init::InitReport>)> {
    let m = &cfg.config.model;
    let Some(file) = &m.init else {
        if m.init_layout != crate::model::init::InitLayout::default() || !m.init_remap.is_empty() {
            let key = if m.init_remap.is_empty() {
                "init_layout"
            } else {
                "init_remap"
            };
            return Err(cfg.error_at(
                "model",
                key,
                format!("`{key}` says how to read `init`, and there is no `init`"),
                Some("add `init = \"weights.safetensors\"`, or remove the key".into()),
            ));
        }
        return Ok((model, None));
    };
    use crate::model::init::InitSource;
    match InitSource::of(&relative_to(&cfg.base_dir, file)) {
        InitSource::HfDir(dir) => load_hf_dir(cfg, model, &dir),
        InitSource::Gguf(file) => load_gguf(cfg, model, &file),
        InitSource::Safetensors(file) => {
            crate::model::init::load(model, &file, m.init_layout, &m.init_remap)
                .map(|(model, r)| (model, Some(r)))
                .map_err(|e| cfg.error_at("model", e.key, e.error.to_string(), None))
        }
    }
}

/// Applies `[model] adapter` (a PEFT adapter directory, relative to the config file) to a model
/// whose memory strategies attached their adapters ([`crate::model::bert::peft::load`]); the
/// model unchanged when the config has none.
///
/// # Errors
/// A positioned [`Error::Config`] at `[model] adapter` for a path that is not a directory and
/// for every refusal of [`crate::model::bert::peft::load`] (a rank or alpha unlike the run's
/// `lora` entry, a key that names no adapted module, a missing file).
pub fn load_adapter(cfg: &LoadedConfig, model: Model) -> Result<Model> {
    let Some(dir) = &cfg.config.model.adapter else {
        return Ok(model);
    };
    let dir = relative_to(&cfg.base_dir, dir);
    if !dir.is_dir() {
        return Err(cfg.error_at(
            "model",
            "adapter",
            if dir.exists() {
                format!("{}: is a file, not a directory", dir.display())
            } else {
                format!("{}: no such directory", dir.display())
            },
            Some(
                "name the directory `engram export --peft` or PEFT's save_pretrained wrote".into(),
            ),
        ));
    }
    crate::model::bert::peft::load(model, &dir)
        .map_err(|e| cfg.error_at("model", "adapter", e.message, e.hint))
}

/// `[model] init = FILE.gguf`: only `type = "llama"` reads one (its factory took the geometry
/// from the same file), with [`crate::model::llama::gguf::load_file`].
///
/// # Errors
/// A positioned [`Error::Config`] at `init` for another model type or a file that is not a
/// llama GGUF engram reads, at `init_remap` / `init_layout` when one is given (the names and
/// layout are engram's own).
fn load_gguf(
    cfg: &LoadedConfig,
    model: Model,
    file: &std::path::Path,
) -> Result<(Model, Option<crate::model::init::InitReport>)> {
    let m = &cfg.config.model;
    let is_llama = model
        .blocks()
        .first()
        .and_then(|b| b.downcast_ref::<crate::model::llama::TokenEmbedding>())
        .is_some();
    if !is_llama {
        return Err(cfg.error_at(
            "model",
            "init",
            format!(
                "{} is a GGUF file, which only type = \"llama\" reads",
                file.display()
            ),
            Some("use type = \"llama\", or name a safetensors file for this model".into()),
        ));
    }
    for (key, given) in [
        ("init_remap", !m.init_remap.is_empty()),
        (
            "init_layout",
            m.init_layout != crate::model::init::InitLayout::default(),
        ),
    ] {
        if given {
            return Err(cfg.error_at(
                "model",
                key,
                format!("a GGUF file's tensor names and layout are read by engram itself; `{key}` does not apply"),
                Some(format!("remove {key}")),
            ));
        }
    }
    crate::model::llama::gguf::load_file(model, file)
        .map(|(model, r)| (model, Some(r)))
        .map_err(|e| cfg.error_at("model", e.key, e.error.to_string(), None))
}

/// `[model] init = DIR` where DIR is a Hugging Face checkpoint (`config.json` +
/// `model.safetensors`): only `type = "bert"` and `type = "llama"` read one (their factories
/// took the geometry from the same `config.json`), in PyTorch layout with the renames of
/// [`crate::model::bert::hf::remap`] / [`crate::model::llama::hf::remap`].
///
/// # Errors
/// A positioned [`Error::Config`] at `init` for another model type or weights that do not fit,
/// at `init_remap` when one is given (the renames are engram's own).
fn load_hf_dir(
    cfg: &LoadedConfig,
    model: Model,
    dir: &std::path::Path,
) -> Result<(Model, Option<crate::model::init::InitReport>)> {
    let m = &cfg.config.model;
    let first = model.blocks().first();
    let is_bert = first
        .and_then(|b| b.downcast_ref::<crate::model::bert::Embeddings>())
        .is_some();
    let is_llama = first
        .and_then(|b| b.downcast_ref::<crate::model::llama::TokenEmbedding>())
        .is_some();
    if !is_bert && !is_llama {
        return Err(cfg.error_at(
            "model",
            "init",
            format!(
                "{} is a Hugging Face checkpoint directory, which only type = \"bert\" and type = \"llama\" read",
                dir.display()
            ),
            Some(
                "name a safetensors file for this model, or use type = \"bert\" / \"llama\""
                    .into(),
            ),
        ));
    }
    if !m.init_remap.is_empty() {
        return Err(cfg.error_at(
            "model",
            "init_remap",
            "a Hugging Face directory's tensor names are renamed by engram itself".into(),
            Some("remove init_remap".into()),
        ));
    }
    let layers = model.num_blocks().saturating_sub(2);
    if is_llama {
        crate::model::llama::hf::load_dir(model, dir, layers)
    } else {
        crate::model::bert::hf::load_dir(model, dir, layers)
    }
    .map(|(model, r)| (model, Some(r)))
    .map_err(|e| cfg.error_at("model", e.key, e.error.to_string(), None))
}

/// `model` through every memory strategy's [`MemoryStrategy::adapt_model`], in chain order
/// (`lora` attaches its adapters and freezes the base).
///
/// # Errors
/// A strategy's error, named by the strategy.
fn adapt(memory: &[Box<dyn MemoryStrategy>], model: Model) -> Result<Model> {
    memory.iter().try_fold(model, |m, s| {
        s.adapt_model(m).map_err(|e| match e {
            e @ (Error::Strategy { .. } | Error::Config { .. }) => e,
            other => Error::Strategy {
                strategy: s.name().to_string(),
                message: other.to_string(),
            },
        })
    })
}

impl Prepared {
    /// Builds the configured model on `device`, initialised from the run seed (the same
    /// weights every time) and adapted by the memory strategies
    /// ([`MemoryStrategy::adapt_model`]): the model a checkpoint's weights load into. Without
    /// `[model] init`; a fresh run's model is [`Prepared::build_initial_model`].
    ///
    /// # Errors
    /// The model factory's errors (checked once by [`prepare`], so a second call fails only
    /// if a plugin's factory does), and a memory strategy's.
    pub fn build_model(&self, device: &Device) -> Result<Model> {
        let model = self.registry.build_model(
            &self.cfg,
            &model_context(&self.cfg, &self.stream),
            device,
        )?;
        adapt(&self.memory, model)
    }

    /// The model a fresh run starts from: the configured model on `device` with its
    /// `[model] init` loaded (with what [`load_init`] reports of it), then adapted
    /// by the memory strategies (adapters attach to the pretrained weights).
    ///
    /// # Errors
    /// As [`Prepared::build_model`], and [`load_init`]'s.
    pub fn build_initial_model(
        &self,
        device: &Device,
    ) -> Result<(Model, Option<crate::model::init::InitReport>)> {
        let model = self.registry.build_model(
            &self.cfg,
            &model_context(&self.cfg, &self.stream),
            device,
        )?;
        let (model, init) = load_init(&self.cfg, model)?;
        let model = load_adapter(&self.cfg, adapt(&self.memory, model)?)?;
        Ok((model, init))
    }
}

/// SGD with classical momentum `momentum` (none at 0), no dampening, no Nesterov, and optional
/// weight decay ([`crate::train::sgd::Sgd`]: burn-optim's arithmetic, fused on the CPU): the
/// configured `sgd`, and the fixed optimisers of `engram bench throughput` and GDumb's learner.
pub fn sgd(momentum: f64, weight_decay: Option<WeightDecayConfig>) -> ModuleOptimizer {
    ModuleOptimizer::from(crate::train::sgd::Sgd::new(
        momentum,
        weight_decay.map(|w| w.penalty),
    ))
}

/// The configured optimiser: engram's SGD, or burn-optim's Adam or AdamW.
pub fn build_optimizer(cfg: &LoadedConfig) -> ModuleOptimizer {
    let o = &cfg.config.optimizer;
    let wd = (o.weight_decay > 0.0).then_some(WeightDecayConfig {
        penalty: o.weight_decay as f32,
    });
    match o.kind {
        OptimizerKind::Sgd => sgd(o.momentum, wd),
        OptimizerKind::Adam => AdamConfig::new().with_weight_decay(wd).init(),
        OptimizerKind::Adamw => AdamWConfig::new()
            .with_weight_decay(o.weight_decay as f32)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::mlp::{ActivationKind, build_mlp};

    /// `load_init`'s error points at the key the model's loader names in its error
    /// ([`crate::model::init::InitError::key`]): `init_remap` for a pattern that is not a
    /// regular expression, `init` for a file that is not safetensors.
    #[test]
    fn init_errors_point_at_the_key_they_are_about() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("w.safetensors"), b"not safetensors").unwrap();
        let line_of = |remap: &str| {
            let text = format!(
                "[data]\ndataset = \"fashion-mnist\"\n[model]\ntype = \"mlp\"\ninit = \"w.safetensors\"\n{remap}"
            );
            let cfg = LoadedConfig::from_source(&d.path().join("x.toml"), text).unwrap();
            let ad = Device::flex();
            let mut r = rng::stream(0, "init", 0, 0);
            let model = build_mlp(3, &[2], 2, ActivationKind::Relu, 0.0, &mut r, &ad);
            match load_init(&cfg, model) {
                Err(Error::Config { line, message, .. }) => (line, message),
                Err(other) => panic!("want a config error, got {other}"),
                Ok(_) => panic!("want a config error, got a model"),
            }
        };
        let (line, message) = line_of("init_remap = [[\"(\", \"x\"]]\n");
        assert_eq!(line, 6, "{message}");
        assert!(message.contains("is not a regular expression"), "{message}");
        let (line, message) = line_of("");
        assert_eq!(line, 5, "{message}");
        assert!(message.contains("not a safetensors file"), "{message}");
    }
}
