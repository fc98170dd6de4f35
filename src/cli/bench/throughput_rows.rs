//! `engram bench throughput`'s rows: per thread count, this binary's `--single` child and the
//! PyTorch twin, alternated round by round; medians.

use super::throughput::ThroughputArgs;
use super::vocab::Resolved;
use engram::bench::{BenchModel, BenchOptimizer};
use engram::core::{Error, Result};
use serde_json::{Value, json};

/// The rows and the versions of the PyTorch that ran beside them.
pub struct Rows {
    /// One JSON object per thread count.
    pub rows: Vec<Value>,
    /// PyTorch's version, when it ran.
    pub torch: Option<String>,
    /// `transformers`' version, when the BERT twin ran.
    pub transformers: Option<String>,
}

/// Runs this binary's `bench throughput --single` with `RAYON_NUM_THREADS=threads`.
fn engram_child(a: &ThroughputArgs, threads: usize) -> Result<Value> {
    let exe = std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["bench", "throughput", "--single", "--device", &a.device])
        .args(a.model.to_args());
    for (flag, v) in [
        ("--steps", a.steps),
        ("--warmup", a.warmup),
        ("--lora-rank", a.lora_rank),
    ] {
        if let Some(v) = v {
            cmd.args([flag, &v.to_string()]);
        }
    }
    if let Some(p) = &a.lora_path {
        cmd.args(["--lora-path", p]);
    }
    let out = cmd
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(&exe, e))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "bench throughput: the {threads}-thread run failed ({})",
            out.status
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        Error::Other(format!(
            "bench throughput: the {threads}-thread run printed no figures: {e}"
        ))
    })
}

/// The PyTorch twin of `r` at `threads`: the plain loop for the example MLP (784-400-400-10
/// with SGD), the CNN and the ViT, `transformers` for BERT; none for another MLP.
fn twin(a: &ThroughputArgs, r: &Resolved, threads: usize) -> Option<Value> {
    let (steps, warmup) = super::throughput::steps(a, &r.model);
    match &r.model {
        BenchModel::Mlp {
            depth: 2,
            width: 400,
        } if r.optimizer == BenchOptimizer::Sgd => {
            engram::bench::torch::run(&a.python, r.batch, steps, threads, &a.device)
        }
        BenchModel::Mlp { .. } => None,
        model => {
            let twin = engram::bench::torch::Twin {
                model,
                batch: r.batch,
                steps,
                warmup,
                optimizer: r.optimizer,
                threads,
                device: &a.device,
                lora_rank: a.lora_rank,
            };
            if matches!(model, BenchModel::Bert { .. }) {
                engram::bench::torch::run_bert(&a.python, &twin)
            } else {
                engram::bench::torch::run_image(&a.python, &twin)
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

const MIB: f64 = 1048576.0;

/// One round's figures at one thread count: engram's child, and the twin's when it ran.
type Run = (Value, Option<Value>);

fn mib(bytes: Option<f64>) -> String {
    bytes.map_or("-".into(), |b| format!("{:.0} MiB", b / MIB))
}

fn cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Runs the rounds and prints one line per round and thread count, then the table of medians.
pub fn rows(a: &ThroughputArgs, r: &Resolved, counts: &[usize]) -> Result<Rows> {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); counts.len()];
    for round in 1..=a.rounds {
        for (i, &n) in counts.iter().enumerate() {
            // How far apart the cores are just before a multi-thread round (see
            // `core_round_trip_ns`): on a VM it can change from one round to the next.
            let trip = (n > 1)
                .then(|| engram::bench::core_round_trip_ns(std::time::Duration::from_millis(20)))
                .flatten();
            let mut e = engram_child(a, n)?;
            e["core_round_trip_ns"] = json!(trip);
            let t = twin(a, r, n);
            println!(
                "round {round}, {n} thread(s): engram {} samples/s, PyTorch {}{}",
                cell(e["train_samples_per_s"].as_f64()),
                cell(t.as_ref().and_then(|t| t["train_samples_per_s"].as_f64())),
                trip.map_or(String::new(), |ns| format!(
                    " (a cache line's round trip between two cores: {ns:.0} ns)"
                ))
            );
            runs[i].push((e, t));
        }
    }
    let mut out = Rows {
        rows: Vec::new(),
        torch: None,
        transformers: None,
    };
    if !counts.is_empty() {
        println!(
            "{:>7} {:>18} {:>18} {:>15} {:>17} {:>18}",
            "threads",
            "engram samples/s",
            "PyTorch samples/s",
            "engram/PyTorch",
            "engram peak RSS",
            "PyTorch peak RSS"
        );
    }
    for (&n, runs) in counts.iter().zip(&runs) {
        let of = |f: &dyn Fn(&Run) -> Option<f64>| median(runs.iter().filter_map(f).collect());
        let e = of(&|(e, _)| e["train_samples_per_s"].as_f64()).unwrap_or(f64::NAN);
        let ts = of(&|(_, t)| t.as_ref()?["train_samples_per_s"].as_f64());
        let e_rss = of(&|(e, _)| e["peak_rss_bytes"].as_f64());
        let t_rss = of(&|(_, t)| t.as_ref()?["peak_rss_bytes"].as_f64());
        if let Some((_, Some(t))) = runs.iter().find(|(_, t)| t.is_some()) {
            out.torch = t["torch"].as_str().map(str::to_string);
            out.transformers = t["transformers"].as_str().map(str::to_string);
        }
        let ratio = ts.map(|ts| e / ts);
        println!(
            "{n:>7} {e:>18.2} {:>18} {:>15} {:>17} {:>18}",
            cell(ts),
            ratio.map_or("-".into(), |v| format!("{v:.2}x")),
            mib(e_rss),
            mib(t_rss),
        );
        out.rows.push(json!({
            "threads": n,
            "engram_samples_per_s": e,
            "torch_samples_per_s": ts,
            "ratio_vs_torch": ratio,
            "engram_peak_rss_bytes": e_rss,
            "torch_peak_rss_bytes": t_rss,
            "rounds": runs.iter().map(|(e, t)| json!({"engram": e, "torch": t})).collect::<Vec<_>>(),
        }));
    }
    let script = match r.model {
        BenchModel::Bert { .. } => "bench/throughput_bert_torch.py",
        BenchModel::Mlp { .. } => "bench/throughput_torch.py",
        _ => "bench/throughput_image_torch.py",
    };
    match (&out.torch, &r.model) {
        (Some(v), BenchModel::Bert { .. }) => println!(
            "PyTorch {v}, transformers {}{}: BertModel and a linear head, {script}; peak RSS of each process (VmHWM / ru_maxrss)",
            out.transformers.as_deref().unwrap_or("?"),
            a.lora_rank.map_or(String::new(), |r| format!(
                ", PEFT LoRA rank {r} on query and value"
            ))
        ),
        (Some(v), _) => println!("PyTorch {v}: the plain loop of {script}"),
        (None, BenchModel::Mlp { depth, width })
            if !counts.is_empty()
                && (*depth, *width, r.optimizer) != (2, 400, BenchOptimizer::Sgd) =>
        {
            println!(
                "PyTorch comparison skipped: no PyTorch twin for {} with {} (the example MLP 784-400-400-10 with sgd has one)",
                r.model.describe(),
                r.optimizer.name()
            )
        }
        (None, _) if !counts.is_empty() => {
            let needs = if matches!(r.model, BenchModel::Bert { .. }) {
                "are torch and transformers importable?"
            } else {
                "is torch importable?"
            };
            println!(
                "PyTorch comparison skipped: `{} - < {script}` did not run ({needs})",
                a.python
            )
        }
        (None, _) => {}
    }
    Ok(out)
}
