//! engram as a library: [`Experiment`], a typed builder for Rust programs.
//!
//! The model, the data, the strategies and the memory strategies are given by value (their
//! parameter structs, [`Component`]; a dataset the program holds in memory, [`Dataset`]), not as
//! TOML text. The builder writes them into the run's config (`OUT/config.toml`, the same file a
//! config-file run records), so a run made here is checked, recorded, reported and resumed
//! exactly as `engram run` would: [`Experiment::resume`] continues it, given the same in-memory
//! dataset again.
//!
//! ```no_run
//! use engram::Experiment;
//! use engram::core::model::mlp::MlpParams;
//! use engram::strategies::{ewc::EwcParams, replay::ReplayParams};
//!
//! let report = Experiment::new()
//!     .dataset_named("fashion-mnist")
//!     .data(|d| {
//!         d.tasks = Some(5);
//!         d.classes_per_task = Some(2.into());
//!     })
//!     .model(MlpParams { hidden: vec![400, 400], ..MlpParams::default() })
//!     .forgetting(EwcParams::default())
//!     .forgetting(ReplayParams::default())
//!     .run("runs/lib".as_ref())
//!     .unwrap();
//! println!("ACC {:.4}", report.metrics.acc.unwrap());
//! ```

use engram_core::component::{
    Component, ForgettingComponent, Kind, MemoryComponent, ModelComponent, Registration,
    SchedulerComponent,
};
use engram_core::config::{DataConfig, LoadedConfig, OptimizerConfig, RunConfig, TrainConfig};
use engram_core::data::Dataset;
use engram_core::error::{Error, Result};
use engram_core::registry::{Origin, Registry};
use engram_core::train::observer::{Observer, SharedObserver};
use engram_core::train::report::Report;
use engram_core::train::trainer::{self, Prepared, RunOptions};
use std::path::Path;

/// A continual-learning experiment put together in Rust (see the module docs).
#[derive(Clone)]
pub struct Experiment {
    registry: Registry,
    run: RunConfig,
    data: DataConfig,
    model: Option<toml::Table>,
    init: Option<(std::path::PathBuf, engram_core::model::init::InitLayout)>,
    optimizer: OptimizerConfig,
    train: TrainConfig,
    lists: [(Kind, Vec<toml::Table>); 3],
    progress: bool,
    /// The program's observers of each run ([`Experiment::observe`]).
    observers: Vec<SharedObserver>,
    /// Parameters that could not be serialised, reported by [`Experiment::prepare`].
    problems: Vec<String>,
}

impl Default for Experiment {
    fn default() -> Self {
        Self::new()
    }
}

/// `params` as a config table with `type = NAME`.
fn table<C: Component>(params: &C) -> Result<toml::Table> {
    let mut t = toml::Table::try_from(params)
        .map_err(|e| Error::Other(format!("{} `{}`: {e}", C::KIND.noun(), C::NAME)))?;
    t.insert("type".into(), toml::Value::String(C::NAME.into()));
    Ok(t)
}

impl Experiment {
    /// An experiment with every built-in registered ([`crate::registry`]) and the config's
    /// defaults: seed 0 on the CPU, SGD lr 0.05 with momentum 0.9, 1 epoch a task, batches of
    /// 128, class-incremental with 2 classes a task, no forgetting strategy (naive
    /// fine-tuning), the standard step.
    pub fn new() -> Self {
        Self {
            registry: crate::registry(),
            run: RunConfig::default(),
            data: toml::from_str("").expect("every [data] key has a default"),
            model: None,
            init: None,
            optimizer: OptimizerConfig::default(),
            train: TrainConfig::default(),
            lists: [
                (Kind::Forgetting, Vec::new()),
                (Kind::Memory, Vec::new()),
                (Kind::Scheduler, Vec::new()),
            ],
            progress: false,
            observers: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// The registry the experiment builds from (to add the program's own components with
    /// [`Registry::add`], or plugins with [`Registry::load_plugin`]).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Adds the program's own component (a model, strategy or dataset registration).
    ///
    /// # Errors
    /// [`Error::Other`] when its kind already has that name.
    pub fn register(mut self, registration: Registration) -> Result<Self> {
        self.registry.add(registration, Origin::Builtin)?;
        Ok(self)
    }

    /// Trains on a dataset the program holds in memory ([`Registry::provide`]); the run's
    /// config names it by `dataset.name`.
    ///
    /// # Errors
    /// [`Error::Data`] when it breaks the dataset contract (labels below `classes`, values per
    /// sample matching `input`).
    pub fn dataset(mut self, dataset: Dataset) -> Result<Self> {
        self.data.dataset = dataset.name.clone();
        self.data.format = None;
        self.registry.provide(dataset)?;
        Ok(self)
    }

    /// Trains on a registered dataset (`fashion-mnist`, `mnist`, a plugin's).
    pub fn dataset_named(mut self, name: &str) -> Self {
        self.data.dataset = name.into();
        self.data.format = None;
        self
    }

    /// Trains on the data at `path` in a data format (`idx`, `npy`, `csv`, `image-folder`).
    pub fn dataset_files(mut self, format: &str, path: &Path) -> Self {
        self.data.format = Some(format.into());
        self.data.path = Some(path.to_path_buf());
        self
    }

    /// Sets the rest of `[data]`: the scenario, tasks, classes per task, subsampling, … .
    pub fn data(mut self, f: impl FnOnce(&mut DataConfig)) -> Self {
        f(&mut self.data);
        self
    }

    /// The model: a registered model's parameters (`MlpParams`, `CnnParams`, `VitParams`, a
    /// program's own).
    pub fn model<C: ModelComponent>(mut self, params: C) -> Self {
        match table(&params) {
            Ok(t) => self.model = Some(t),
            Err(e) => self.problems.push(e.to_string()),
        }
        self
    }

    /// Starts the model from pretrained weights, whatever the model (`[model] init`, see
    /// [`engram_core::model::init`]).
    pub fn init(mut self, file: &Path, layout: engram_core::model::init::InitLayout) -> Self {
        self.init = Some((file.to_path_buf(), layout));
        self
    }

    fn push<C: Component>(mut self, params: C) -> Self {
        match table(&params) {
            Ok(t) => {
                if let Some((_, list)) = self.lists.iter_mut().find(|(k, _)| *k == C::KIND) {
                    list.push(t);
                }
            }
            Err(e) => self.problems.push(e.to_string()),
        }
        self
    }

    /// Adds a forgetting strategy (applied in the order added): `EwcParams`, `ReplayParams`, … .
    pub fn forgetting<C: ForgettingComponent>(self, params: C) -> Self {
        self.push(params)
    }

    /// Adds a memory strategy: `CheckpointParams`, `AmpParams`, … .
    pub fn memory<C: MemoryComponent>(self, params: C) -> Self {
        self.push(params)
    }

    /// Adds a scheduler.
    pub fn scheduler<C: SchedulerComponent>(self, params: C) -> Self {
        self.push(params)
    }

    /// The run-wide settings (seed, device).
    pub fn run_settings(mut self, f: impl FnOnce(&mut RunConfig)) -> Self {
        f(&mut self.run);
        self
    }

    /// The optimiser.
    pub fn optimizer(mut self, optimizer: OptimizerConfig) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// Epochs, batch sizes, clipping, logging.
    pub fn train(mut self, f: impl FnOnce(&mut TrainConfig)) -> Self {
        f(&mut self.train);
        self
    }

    /// Shows a progress bar while training (default: quiet).
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// Tells `observer` how each run goes: every
    /// [`RunEvent`](engram_core::train::observer::RunEvent) (a task's start and end, each
    /// step's loss, each logged window, each accuracy cell, the end), on the training thread,
    /// in order. A closure is an observer:
    ///
    /// ```no_run
    /// use engram::core::train::observer::RunEvent;
    /// let e = engram::Experiment::new().observe(|e: &RunEvent| {
    ///     if let RunEvent::Eval { after_task: Some(k), task, accuracy, .. } = e {
    ///         println!("after task {k}: task {task} at {accuracy:.3}");
    ///     }
    /// });
    /// ```
    ///
    /// [`Experiment::run`], [`Experiment::run_seeds`] and [`Experiment::resume`] tell every
    /// observer added; `metrics.jsonl` in the run's directory has the same `train` and `eval`
    /// events whatever the observers.
    pub fn observe(mut self, observer: impl Observer + Send + 'static) -> Self {
        self.observers
            .push(engram_core::train::observer::shared(observer));
        self
    }

    /// The config the experiment amounts to, as TOML (what the run records as
    /// `OUT/config.toml`; `engram run` on it trains the same run when the data is a file).
    ///
    /// # Errors
    /// [`Error::Other`] when a section cannot be serialised.
    pub fn config_text(&self) -> Result<String> {
        let ser = |what: &str, v: &dyn erased::Ser| -> Result<toml::Value> {
            v.value()
                .map_err(|e| Error::Other(format!("[{what}]: {e}")))
        };
        let mut doc = toml::Table::new();
        doc.insert("run".into(), ser("run", &self.run)?);
        doc.insert("data".into(), ser("data", &self.data)?);
        let mut model = match &self.model {
            Some(m) => m.clone(),
            None => table(&engram_core::model::mlp::MlpParams::default())?,
        };
        if let Some((file, layout)) = &self.init {
            model.insert("init".into(), file.display().to_string().into());
            model.insert("init_layout".into(), ser("model", layout)?);
        }
        doc.insert("model".into(), toml::Value::Table(model));
        doc.insert("optimizer".into(), ser("optimizer", &self.optimizer)?);
        doc.insert("train".into(), ser("train", &self.train)?);
        for (kind, list) in &self.lists {
            if !list.is_empty() {
                doc.insert(
                    kind.list().into(),
                    toml::Value::Array(list.iter().cloned().map(toml::Value::Table).collect()),
                );
            }
        }
        toml::to_string(&doc).map_err(|e| Error::Other(format!("the experiment's config: {e}")))
    }

    /// Checks everything and builds the run (data loaded, strategies built), as
    /// [`trainer::prepare`] does for a config file.
    ///
    /// # Errors
    /// As [`trainer::prepare`]: positioned errors point into [`Experiment::config_text`], named
    /// `experiment.toml`.
    pub fn prepare(&self) -> Result<Prepared> {
        if let Some(p) = self.problems.first() {
            return Err(Error::Other(p.clone()));
        }
        let cfg = LoadedConfig::from_source(Path::new("experiment.toml"), self.config_text()?)?;
        self.observed(trainer::prepare(cfg, &self.registry))
    }

    /// `prepared` with this experiment's observers.
    fn observed(&self, prepared: Result<Prepared>) -> Result<Prepared> {
        prepared.map(|mut p| {
            p.observers = self.observers.clone();
            p
        })
    }

    /// Trains the whole stream, writing the run into `out` (report.json, steps.csv,
    /// checkpoints, config.toml), and returns the report.
    ///
    /// # Errors
    /// As [`Experiment::prepare`] and [`trainer::run`].
    pub fn run(&self, out: &Path) -> Result<Report> {
        trainer::run(
            self.prepare()?,
            &RunOptions {
                out: out.to_path_buf(),
                progress: self.progress,
            },
        )
    }

    /// Trains one run per seed of `seeds` (each this experiment with `run.seed` set), as
    /// `engram run --seeds` does: into `out/seed-N/`, every seed's config written before any
    /// trains, then `out/aggregate.json` with the mean ± std over the seeds that finished
    /// ([`crate::seeds`]). A single seed trains into `out` itself, without an aggregate.
    ///
    /// # Errors
    /// As [`Experiment::prepare`] for any seed's config (checked before anything is written),
    /// [`Error::ConfigFile`] when a seed repeats, and as [`crate::seeds::run`]. A seed that
    /// fails does not stop the others: see [`crate::seeds::Outcome::error`].
    pub fn run_seeds(&self, out: &Path, seeds: &[u64]) -> Result<crate::seeds::Outcome> {
        if let Some(p) = self.problems.first() {
            return Err(Error::Other(p.clone()));
        }
        let file = Path::new("experiment.toml");
        crate::seeds::check_distinct(file, seeds)?;
        let configs = seeds
            .iter()
            .map(|&seed| {
                let mut e = self.clone();
                e.run.seed = seed;
                LoadedConfig::from_source(file, e.config_text()?)
            })
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = configs.first() else {
            return Ok(crate::seeds::Outcome::default());
        };
        let first = self.observed(trainer::prepare(first.clone(), &self.registry))?;
        crate::seeds::run(
            crate::seeds::Plan {
                configs,
                first: Some(first),
                target: out.to_path_buf(),
                progress: self.progress,
                prepare: &mut |cfg| self.observed(trainer::prepare(cfg, &self.registry)),
            },
            &mut (),
        )
    }

    /// Continues a multi-seed run made by [`Experiment::run_seeds`] (every unfinished seed,
    /// then `out/aggregate.json` again), with this experiment's registry.
    ///
    /// # Errors
    /// As [`crate::seeds::resume`].
    pub fn resume_seeds(&self, out: &Path) -> Result<crate::seeds::Outcome> {
        crate::seeds::resume(out, &self.registry, self.progress, None, &mut ())
    }

    /// Continues the run in `out` from its last checkpoint (or rewrites the report of a
    /// finished one) with this experiment's registry: the in-memory dataset given to
    /// [`Experiment::dataset`] again, the program's own components. The run's own config
    /// (`out/config.toml`) says everything else. In a program built with engram's `cuda`
    /// feature, call [`engram_core::device::pin_default_device`] first thing in `main`: without
    /// it, restoring an optimiser's state starts CUDA even for a CPU run (burn-optim 0.22).
    ///
    /// # Errors
    /// As [`trainer::resume`].
    pub fn resume(&self, out: &Path) -> Result<Report> {
        trainer::resume_observed(out, &self.registry, self.progress, None, &self.observers)
    }
}

/// Serialising the typed sections into TOML values behind one object-safe call.
mod erased {
    pub trait Ser {
        fn value(&self) -> Result<toml::Value, toml::ser::Error>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn value(&self) -> Result<toml::Value, toml::ser::Error> {
            toml::Value::try_from(self)
        }
    }
}
