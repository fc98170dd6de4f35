//! `engram eval CHECKPOINT`: a checkpoint's model on every task of its stream.

use super::device_help;
use clap::Args;
use engram::core::Result;
use engram::core::registry::Registry;
use engram::core::train::trainer;
use std::path::PathBuf;

/// `engram eval`'s arguments.
#[derive(Args)]
pub struct EvalArgs {
    /// A run's output directory (newest checkpoint) or OUT/checkpoints/step-N.
    checkpoint: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Also print the confusion matrix over every task's evaluation rows (row: true
    /// class, column: predicted class, in samples) and each class's recall.
    #[arg(long)]
    confusion: bool,
    #[arg(long, help = device_help("Evaluate on this device", " instead of the run's"))]
    device: Option<String>,
}

/// `engram eval`: each task's accuracy (and with `--confusion` the confusion matrix) of the
/// checkpoint's model, as a table or one JSON line; for a language-model run
/// (`[train] objective = "lm"`), each task's held-out perplexity instead ([`eval_lm`]).
pub fn eval(_cli: &super::Cli, registry: &Registry, args: &EvalArgs) -> Result<()> {
    let (p, model, progress) =
        trainer::load_checkpoint_model(&args.checkpoint, registry, args.device.as_deref())?;
    let seen = progress.round.saturating_sub(1);
    let valid = engram::core::burn::module::Module::valid(&model);
    let batch = p.cfg.config.train.eval_batch_size;
    if p.cfg.config.train.lm_window().is_some() {
        return eval_lm(&p, &valid, &progress, args.json);
    }
    // The restored forgetting strategies answer where they infer tasks (per-task adapters).
    let ev = trainer::Evaluator {
        model: &valid,
        strategies: &p.forgetting,
    };
    let acc: Vec<f64> = (0..p.stream.len())
        .map(|t| trainer::evaluate_task(ev, &p.stream, t, seen, batch, &p.device))
        .collect();
    let matrix = args
        .confusion
        .then(|| trainer::confusion_matrix(ev, &p.stream, seen, batch, &p.device));
    let names = &p.stream.dataset.class_names;
    if args.json {
        let mut v = serde_json::json!({
            "tasks_trained": progress.round,
            "step_in_task": progress.step_in_task,
            "accuracy": acc,
        });
        if let Some(m) = &matrix {
            v["confusion"] = serde_json::json!(m);
            v["class_names"] = serde_json::json!(names);
        }
        println!("{v}");
        return Ok(());
    }
    if progress.step_in_task > 0 {
        println!(
            "after {} finished task(s) and {} step(s) of task {}:",
            progress.round, progress.step_in_task, progress.round
        );
    } else {
        println!("after {} trained task(s):", progress.round);
    }
    for (t, a) in acc.iter().enumerate() {
        println!("  T{t}  {:5.1} %", a * 100.0);
    }
    let mean = |a: &[f64]| a.iter().sum::<f64>() / a.len().max(1) as f64 * 100.0;
    let trained = progress.round.min(acc.len());
    if trained == acc.len() || trained == 0 {
        println!("  mean {:5.1} %", mean(&acc));
    } else {
        // Mid-stream: the untrained tasks score (near) zero in a class-incremental stream, so
        // the mean over all tasks is not the run's ACC.
        println!(
            "  mean {:5.1} % over the {trained} finished task(s), {:5.1} % over all {}",
            mean(&acc[..trained]),
            mean(&acc),
            acc.len()
        );
    }
    if let Some(m) = &matrix {
        print!("{}", engram::summary::confusion_table(m, names));
    }
    Ok(())
}

/// A language-model run's checkpoint on every task: the perplexity of its evaluation windows
/// (as the run's own perplexity matrix scores them, [`trainer::task_perplexity`]; lower is
/// better), as a table or one JSON line (`"perplexity"`, `null` for a task without windows).
fn eval_lm(
    p: &trainer::Prepared,
    model: &engram::core::model::Model,
    progress: &engram::core::train::checkpoint::Cursor,
    json: bool,
) -> Result<()> {
    let batch = p.cfg.config.train.eval_batch_size;
    let ppl: Vec<Option<f64>> = (0..p.stream.len())
        .map(|t| trainer::task_perplexity(model, &p.stream, t, batch, &p.device))
        .collect();
    if json {
        let v = serde_json::json!({
            "tasks_trained": progress.round,
            "step_in_task": progress.step_in_task,
            "perplexity": ppl,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "after {} trained task(s){}: held-out perplexity (lower is better)",
        progress.round,
        if progress.step_in_task > 0 {
            format!(
                " and {} step(s) of task {}",
                progress.step_in_task, progress.round
            )
        } else {
            String::new()
        }
    );
    for (t, v) in ppl.iter().enumerate() {
        match v {
            Some(v) => println!("  T{t}  {v:10.3}"),
            None => println!("  T{t}  –"),
        }
    }
    Ok(())
}
