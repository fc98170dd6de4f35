//! The guard: a plugin's strategies behind `catch_unwind`, their panics turned into typed
//! errors; `Guarded` forwards every trait method (a test holds it to that).

use super::*;

/// A fault raised out of a plugin method that cannot return an error itself (for example
/// [`ForgettingStrategy::penalty`], called inside a memory strategy's step); the trainer
/// catches it and returns the error it carries.
#[derive(Debug)]
pub struct PluginFault(pub Error);

/// Calls plugin code with panics caught.
pub(crate) fn guard<R>(
    lib: &Library,
    strategy: &str,
    method: &'static str,
    f: impl FnOnce() -> R,
) -> crate::Result<R> {
    let _call = PluginCall::enter();
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        Error::Plugin(PluginError::Panicked {
            path: lib.path.clone(),
            strategy: strategy.to_string(),
            method,
            message: panic_message(&*p),
        })
    })
}

/// [`guard`] for methods without a `Result`: a panic is re-raised as a [`PluginFault`] (which
/// does not run the panic hook) for the trainer to catch.
pub(crate) fn guard_or_fault<R>(
    lib: &Library,
    strategy: &str,
    method: &'static str,
    f: impl FnOnce() -> R,
) -> R {
    match guard(lib, strategy, method, f) {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(Box::new(PluginFault(e))),
    }
}

/// Builds a strategy through a plugin's factory with panics caught.
///
/// # Errors
/// The factory's own error, or [`PluginError::Panicked`] (method `build`).
pub(crate) fn guarded_build<R>(
    lib: &Library,
    name: &str,
    f: impl FnOnce() -> crate::Result<R>,
) -> crate::Result<R> {
    guard(lib, name, "build", f)?
}

/// A plugin's strategy behind the panic guard, holding its library.
pub struct Guarded<T: ?Sized> {
    inner: Box<T>,
    lib: Arc<Library>,
    name: String,
}

impl<T: ?Sized> Guarded<T> {
    /// Wraps `inner`, built by the plugin loaded as `lib`, registered as `name`.
    pub fn new(inner: Box<T>, lib: Arc<Library>, name: &str) -> Self {
        Self {
            inner,
            lib,
            name: name.to_string(),
        }
    }
}

impl<T: ForgettingStrategy + ?Sized> ForgettingStrategy for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "before_task", || {
            self.inner.before_task(cx)
        })?
    }
    fn prepare_batch(&mut self, batch: Batch, cx: &BatchContext<'_>) -> crate::Result<Batch> {
        guard(&self.lib, &self.name, "prepare_batch", || {
            self.inner.prepare_batch(batch, cx)
        })?
    }
    fn penalty(&self, model: &Model, cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        guard_or_fault(&self.lib, &self.name, "penalty", || {
            self.inner.penalty(model, cx)
        })
    }
    fn logit_penalty(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        guard_or_fault(&self.lib, &self.name, "logit_penalty", || {
            self.inner.logit_penalty(logits, batch)
        })
    }
    fn adjust_gradients(
        &mut self,
        model: &Model,
        grads: GradientsParams,
        cx: &BatchContext<'_>,
    ) -> crate::Result<GradientsParams> {
        guard(&self.lib, &self.name, "adjust_gradients", || {
            self.inner.adjust_gradients(model, grads, cx)
        })?
    }
    fn after_update(&mut self, model: Model, cx: &BatchContext<'_>) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "after_update", || {
            self.inner.after_update(model, cx)
        })?
    }
    fn after_step(&mut self, cx: &StepContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "after_step", || {
            self.inner.after_step(cx)
        })?
    }
    fn rebuild_model(&self, model: Model, device: &Device) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "rebuild_model", || {
            self.inner.rebuild_model(model, device)
        })?
    }
    fn infer(
        &self,
        model: &Model,
        input: crate::model::Activation,
        task: Option<usize>,
    ) -> Option<crate::strategy::Inference> {
        guard_or_fault(&self.lib, &self.name, "infer", || {
            self.inner.infer(model, input, task)
        })
    }
    fn model_is_partial(&self) -> Option<String> {
        // A plugin whose answer panics cannot vouch for its model: export refuses.
        guard(&self.lib, &self.name, "model_is_partial", || {
            self.inner.model_is_partial()
        })
        .unwrap_or_else(|e| Some(e.to_string()))
    }
    fn task_end_weights(&mut self, model: Model, task: &TaskInfo) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "task_end_weights", || {
            self.inner.task_end_weights(model, task)
        })?
    }
    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "after_task", || {
            self.inner.after_task(cx)
        })?
    }
    fn owns(&self) -> Option<&'static str> {
        // A plugin whose answer panics owns nothing: the refusal it would cause is advice.
        guard(&self.lib, &self.name, "owns", || self.inner.owns()).unwrap_or(None)
    }

    fn lm_refusal(&self) -> Option<crate::strategy::LmRefusal> {
        // A plugin whose answer panics is refused, as one that does not say.
        guard(&self.lib, &self.name, "lm_refusal", || {
            self.inner.lm_refusal()
        })
        .unwrap_or_else(|e| {
            Some(crate::strategy::LmRefusal {
                key: "type",
                reason: e.to_string(),
            })
        })
    }
    fn report(&self) -> Option<serde_json::Value> {
        guard_or_fault(&self.lib, &self.name, "report", || self.inner.report())
    }
    fn memory_refusal(
        &self,
        memory: &[crate::config::StrategyEntry],
    ) -> Option<crate::strategy::MemoryRefusal> {
        // A plugin whose answer panics is refused, as one that does not say.
        guard(&self.lib, &self.name, "memory_refusal", || {
            self.inner.memory_refusal(memory)
        })
        .unwrap_or_else(|e| {
            Some(crate::strategy::MemoryRefusal {
                key: "type",
                message: e.to_string(),
                hint: "fix or remove the plugin".into(),
            })
        })
    }
    fn divergence_hint(&self) -> Option<String> {
        // Asked while a divergence is reported: a hint that panics is left out.
        guard(&self.lib, &self.name, "divergence_hint", || {
            self.inner.divergence_hint()
        })
        .unwrap_or(None)
    }
    fn stored_samples(
        &self,
        stream: &crate::data::stream::Stream,
    ) -> Option<crate::strategy::StoredSamples> {
        // Asked for the report: a count that panics is left out.
        guard(&self.lib, &self.name, "stored_samples", || {
            self.inner.stored_samples(stream)
        })
        .unwrap_or(None)
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState, device: &Device) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state, device)
        })?
    }
}

impl<T: MemoryStrategy + ?Sized> MemoryStrategy for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn layer(&self) -> MemoryLayer {
        guard_or_fault(&self.lib, &self.name, "layer", || self.inner.layer())
    }
    fn step(&mut self, req: StepRequest<'_>, next: Next<'_>) -> crate::Result<StepOutcome> {
        guard(&self.lib, &self.name, "step", || self.inner.step(req, next))?
    }
    fn adapt_model(&self, model: Model) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "adapt_model", || {
            self.inner.adapt_model(model)
        })?
    }
    fn task_end_model(&mut self, model: Model, task: &TaskInfo) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "task_end_model", || {
            self.inner.task_end_model(model, task)
        })?
    }
    fn before_task(&mut self, task: &TaskInfo) {
        guard_or_fault(&self.lib, &self.name, "before_task", || {
            self.inner.before_task(task)
        })
    }
    fn take_warnings(&mut self) -> Vec<String> {
        guard_or_fault(&self.lib, &self.name, "take_warnings", || {
            self.inner.take_warnings()
        })
    }
    fn report(&self) -> Option<serde_json::Value> {
        guard_or_fault(&self.lib, &self.name, "report", || self.inner.report())
    }
    fn divergence_note(&self) -> Option<String> {
        // Asked while a divergence is reported: a note that panics is left out.
        guard(&self.lib, &self.name, "divergence_note", || {
            self.inner.divergence_note()
        })
        .unwrap_or(None)
    }
    fn op_level_checkpointing(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "op_level_checkpointing", || {
            self.inner.op_level_checkpointing()
        })
    }
    fn splits_batch(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "splits_batch", || {
            self.inner.splits_batch()
        })
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state)
        })?
    }
}

impl<T: Scheduler + ?Sized> Scheduler for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn before_task(&mut self, task: &TaskInfo) {
        guard_or_fault(&self.lib, &self.name, "before_task", || {
            self.inner.before_task(task)
        })
    }
    fn controls(&mut self, position: &Position, controls: &mut Controls) {
        guard_or_fault(&self.lib, &self.name, "controls", || {
            self.inner.controls(position, controls)
        })
    }
    fn evaluate_all(&self, round: usize, rounds: usize) -> Option<bool> {
        guard_or_fault(&self.lib, &self.name, "evaluate_all", || {
            self.inner.evaluate_all(round, rounds)
        })
    }
    fn after_evaluation(
        &mut self,
        round: usize,
        matrix: &[Vec<Option<f64>>],
    ) -> crate::strategy::AnomalyAction {
        guard_or_fault(&self.lib, &self.name, "after_evaluation", || {
            self.inner.after_evaluation(round, matrix)
        })
    }
    fn may_roll_back(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "may_roll_back", || {
            self.inner.may_roll_back()
        })
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state)
        })?
    }
}

/// Runs `f`, turning a [`PluginFault`] raised inside it back into its error; any other panic
/// continues unwinding.
///
/// # Errors
/// The fault's error.
pub fn catch_faults<R>(f: impl FnOnce() -> crate::Result<R>) -> crate::Result<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => match payload.downcast::<PluginFault>() {
            Ok(fault) => Err(fault.0),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}
