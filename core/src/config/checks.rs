//! The checks of a decoded config that serde cannot express (ranges, combinations of keys),
//! each a positioned error at the key. A component's own keys are checked by its factory.

use super::*;

/// The most entries a strategy list (`[[forgetting]]`, `[[memory]]`, `[[scheduler]]`) takes.
/// A composition uses a handful; each entry may hold model-sized state (an EMA keeps a copy of
/// the weights, EWC a Fisher and an anchor), so hundreds of them were gigabytes, then an abort.
pub const MAX_LIST_ENTRIES: usize = 16;

/// The longest `[train] window`, in tokens: far above a small model's context (SmolLM2's is
/// 8,192), low enough that a window's logits `[window, vocab]` stay a bounded allocation.
pub const MAX_WINDOW: usize = 1 << 16;

impl LoadedConfig {
    /// Refuses a strategy list longer than [`MAX_LIST_ENTRIES`], at its entry past the limit.
    fn check_list_lengths(&self) -> Result<()> {
        let c = &self.config;
        for (list, n) in [
            ("forgetting", c.forgetting.len()),
            ("memory", c.memory.len()),
            ("scheduler", c.scheduler.len()),
        ] {
            if n > MAX_LIST_ENTRIES {
                let (line, column) = self.type_position(list, MAX_LIST_ENTRIES);
                return Err(Error::Config {
                    file: self.file.clone(),
                    line,
                    column,
                    message: format!(
                        "{n} [[{list}]] entries; engram composes at most {MAX_LIST_ENTRIES}"
                    ),
                    hint: Some(format!(
                        "remove the entries past the {MAX_LIST_ENTRIES}th (duplicates of one strategy add its state again)"
                    )),
                });
            }
        }
        Ok(())
    }

    /// `[train] objective` and `window`: a window only for a language-model run, of 2 to
    /// [`MAX_WINDOW`] tokens, and a language-model run's tasks from `[[data.stream]]` (one text
    /// dataset a task: a `[data]` dataset is dealt into tasks by its classes, which windows of
    /// text do not have).
    fn check_objective(&self) -> Result<()> {
        let t = &self.config.train;
        if let Some(w) = t.window {
            if t.objective != Objective::Lm {
                return Err(self.error_at(
                    "train",
                    "window",
                    "`window` (tokens per language-model window) needs `objective = \"lm\"`".into(),
                    Some("add `objective = \"lm\"` to [train], or remove `window`".into()),
                ));
            }
            if !(2..=MAX_WINDOW).contains(&w) {
                return Err(self.error_at(
                    "train",
                    "window",
                    format!("window {w}: a window holds 2 to {MAX_WINDOW} tokens (one next-token prediction needs 2)"),
                    Some(format!("the default is {DEFAULT_WINDOW}; at most the model's context length")),
                ));
            }
        }
        if t.objective == Objective::Lm && self.config.data.stream.is_empty() {
            return Err(self.error_at(
                "train",
                "objective",
                "objective = \"lm\" trains on a stream of text datasets, one a task, and this config has no [[data.stream]] entry".into(),
                Some("list the domains as [[data.stream]] entries with format = \"jsonl\" or \"text-folder\" (see examples/text/lm-stream.toml)".into()),
            ));
        }
        Ok(())
    }

    /// Semantic checks that serde cannot express.
    pub(crate) fn check(&self) -> Result<()> {
        let c = &self.config;
        if !(0.0..=0.5).contains(&c.data.validation) {
            return Err(self.error_at(
                "data",
                "validation",
                format!("validation share {} is outside [0, 0.5]", c.data.validation),
                None,
            ));
        }
        if c.data.evaluate_on == EvalSplit::Validation && c.data.validation <= 0.0 {
            return Err(self.error_at(
                "data",
                "evaluate_on",
                "evaluate_on = \"validation\" needs a validation share > 0".into(),
                Some("add `validation = 0.1` to [data]".into()),
            ));
        }
        self.check_tasks()?;
        self.check_stream()?;
        self.check_list_lengths()?;
        if c.train.batch_size == 0 || c.train.eval_batch_size == 0 || c.train.epochs == 0 {
            return Err(self.error_at(
                "train",
                if c.train.epochs == 0 {
                    "epochs"
                } else {
                    "batch_size"
                },
                "epochs, batch_size and eval_batch_size must be at least 1".into(),
                None,
            ));
        }
        if !(c.optimizer.lr > 0.0 && c.optimizer.lr.is_finite()) {
            return Err(self.error_at(
                "optimizer",
                "lr",
                format!("learning rate {} must be positive", c.optimizer.lr),
                None,
            ));
        }
        if let Some(v) = c.train.clip_norm
            && !(v > 0.0 && v.is_finite())
        {
            return Err(self.error_at(
                "train",
                "clip_norm",
                format!("clip_norm {v} must be a positive, finite number"),
                Some("remove it to train without clipping".into()),
            ));
        }
        self.check_objective()?;
        if !(c.train.leak_factor >= 1.0 && c.train.leak_factor.is_finite()) {
            return Err(self.error_at(
                "train",
                "leak_factor",
                format!("leak_factor {} must be at least 1", c.train.leak_factor),
                None,
            ));
        }
        if c.train.checkpoint_every == Some(0) {
            return Err(self.error_at(
                "train",
                "checkpoint_every",
                "checkpoint_every must be ≥ 1".into(),
                None,
            ));
        }
        if c.data.test_subsample == Some(0) || c.data.subsample == Some(0) {
            return Err(self.error_at(
                "data",
                if c.data.subsample == Some(0) {
                    "subsample"
                } else {
                    "test_subsample"
                },
                "a subsample of 0 samples leaves nothing to train or evaluate".into(),
                None,
            ));
        }
        // `momentum` is SGD's; Adam and AdamW would ignore it without a word.
        if c.optimizer.kind != OptimizerKind::Sgd
            && toml::from_str::<toml::Table>(&self.source)
                .ok()
                .and_then(|t| t.get("optimizer")?.get("momentum").cloned())
                .is_some()
        {
            return Err(self.error_at(
                "optimizer",
                "momentum",
                format!(
                    "momentum is an SGD key; `{}` does not use it",
                    serde_json::to_value(c.optimizer.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
                Some("remove it, or use type = \"sgd\"".into()),
            ));
        }
        let decay_ok = c.optimizer.weight_decay >= 0.0 && c.optimizer.weight_decay.is_finite();
        if !(decay_ok && (0.0..1.0).contains(&c.optimizer.momentum)) {
            return Err(self.error_at(
                "optimizer",
                if c.optimizer.weight_decay < 0.0 {
                    "weight_decay"
                } else {
                    "momentum"
                },
                format!(
                    "weight_decay must be ≥ 0 and momentum in [0, 1) (got {} and {})",
                    c.optimizer.weight_decay, c.optimizer.momentum
                ),
                None,
            ));
        }
        Ok(())
    }

    /// `tasks`, `classes_per_task` and `class_order` deal at least one class to a task (the
    /// data's own checks say what does not fit the dataset).
    fn check_tasks(&self) -> Result<()> {
        let d = &self.config.data;
        if d.tasks == Some(0) {
            return Err(self.error_at(
                "data",
                "tasks",
                "tasks = 0 leaves nothing to train".into(),
                Some(
                    "set tasks to 1 or more, or remove it (split scenarios then make classes / \
                     classes_per_task tasks, permuted ones 10)"
                        .into(),
                ),
            ));
        }
        match &d.classes_per_task {
            Some(ClassesPerTask::Each(0)) => {
                return Err(self.error_at(
                    "data",
                    "classes_per_task",
                    "classes_per_task = 0 gives a task no class".into(),
                    Some("set it to 1 or more (2 is the default), or remove it".into()),
                ));
            }
            Some(list @ ClassesPerTask::List(v)) if v.is_empty() || v.contains(&0) => {
                return Err(self.error_at(
                    "data",
                    "classes_per_task",
                    format!("classes_per_task = {list} gives a task no class"),
                    Some(
                        "list 1 or more classes for every task, e.g. [6, 1, 1, 1, 1] (a first \
                         task of 6 classes, then one class a task)"
                            .into(),
                    ),
                ));
            }
            Some(list @ ClassesPerTask::List(v)) if d.tasks.is_some_and(|t| t != v.len()) => {
                return Err(self.error_at(
                    "data",
                    "tasks",
                    format!(
                        "tasks = {} but classes_per_task = {list} lists {} tasks",
                        d.tasks.unwrap_or_default(),
                        v.len()
                    ),
                    Some(format!(
                        "remove `tasks` (the list gives the number of tasks) or set tasks = {}",
                        v.len()
                    )),
                ));
            }
            _ => {}
        }
        if d.class_order.as_ref().is_some_and(Vec::is_empty) {
            return Err(self.error_at(
                "data",
                "class_order",
                "class_order = [] deals no class to any task".into(),
                Some(
                    "list the classes in the order the tasks get them, e.g. [0, 1, 2, 3], or \
                     remove it (the classes in their own order)"
                        .into(),
                ),
            ));
        }
        Ok(())
    }
}
