//! The PyTorch twins of [`throughput`](super::throughput): `bench/throughput_torch.py`, the
//! identical MLP training loop in plain PyTorch, `bench/throughput_image_torch.py`, the CNN's
//! and the ViT's, and `bench/throughput_bert_torch.py`, the BERT loop in Hugging Face
//! `transformers`, run in a Python subprocess for comparison.
//! The scripts are embedded, so that an installed or bundled binary carries them.

/// The script (`bench/throughput_torch.py`): reads its options from the command line and
/// prints one JSON object (`train_samples_per_s`, `step_seconds`, `torch`, …).
pub const SCRIPT: &str = include_str!("../../bench/throughput_torch.py");

/// Runs [`SCRIPT`] with the interpreter `python` at batch `batch` for `steps` measured steps
/// with `threads` intra-op threads, on CUDA when `device` is `cuda` or `cuda:N` (the same
/// device) and on the CPU otherwise;
/// returns its figures, or `None` when PyTorch cannot run (no interpreter, torch not
/// importable, a failed run, output that is not JSON).
pub fn run(
    python: &str,
    batch: usize,
    steps: usize,
    threads: usize,
    device: &str,
) -> Option<serde_json::Value> {
    use std::io::Write as _;
    let device = torch_device(device);
    let mut child = std::process::Command::new(python)
        .arg("-")
        .args(["--batch", &batch.to_string(), "--steps", &steps.to_string()])
        .args(["--threads", &threads.to_string(), "--device", &device])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(SCRIPT.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// The script (`bench/throughput_bert_torch.py`): the BERT loop in Hugging Face `transformers`,
/// printing one JSON object (`train_samples_per_s`, `peak_rss_bytes`, `torch`,
/// `transformers`, …).
pub const BERT_SCRIPT: &str = include_str!("../../bench/throughput_bert_torch.py");

/// The options of a twin (BERT's, the CNN's, the ViT's): the model, batch, steps, optimiser and
/// threads of the engram run it is compared with.
pub struct Twin<'a> {
    /// The benchmark model (BERT for [`run_bert`], the CNN or the ViT for [`run_image`]).
    pub model: &'a super::BenchModel,
    /// Batch size (sequences).
    pub batch: usize,
    /// Measured steps.
    pub steps: usize,
    /// Unmeasured steps before them.
    pub warmup: usize,
    /// The optimiser, at the same learning rate as engram's ([`super::BenchOptimizer::lr`]).
    pub optimizer: super::BenchOptimizer,
    /// Intra-op threads (`torch.set_num_threads`).
    pub threads: usize,
    /// engram's device name (`cuda`, `cuda:N`: the same GPU; anything else: the CPU).
    pub device: &'a str,
    /// LoRA rank on query and value (PEFT's `LoraConfig`, α = 2 × rank), BERT only.
    pub lora_rank: Option<usize>,
}

/// Runs [`BERT_SCRIPT`] with the interpreter `python` for `twin`; `None` when the model is not
/// BERT or PyTorch cannot run (no interpreter, torch or transformers not importable, a failed
/// run, output that is not JSON).
pub fn run_bert(python: &str, twin: &Twin) -> Option<serde_json::Value> {
    let super::BenchModel::Bert {
        shape,
        init,
        seq_len,
    } = twin.model
    else {
        return None;
    };
    let mut cmd = std::process::Command::new(python);
    cmd.arg("-");
    match init {
        Some(dir) => cmd.arg("--init").arg(dir),
        None => cmd.args([
            "--layers",
            &shape.layers.to_string(),
            "--hidden",
            &shape.hidden.to_string(),
            "--heads",
            &shape.heads.to_string(),
            "--ffn",
            &shape.ffn.to_string(),
            "--vocab",
            &shape.vocab.to_string(),
        ]),
    };
    let n = |v: usize| v.to_string();
    cmd.args(["--batch", &n(twin.batch), "--seq-len", &n(*seq_len)])
        .args(["--steps", &n(twin.steps), "--warmup", &n(twin.warmup)])
        .args(["--optimizer", twin.optimizer.name()])
        .args(["--lr", &twin.optimizer.lr(twin.model).to_string()])
        .args(["--classes", &n(super::model::BERT_CLASSES)])
        .args([
            "--threads",
            &n(twin.threads),
            "--device",
            &torch_device(twin.device),
        ]);
    if let Some(r) = twin.lora_rank {
        cmd.args(["--lora-rank", &n(r)]);
    }
    run_script(cmd, BERT_SCRIPT)
}

/// The script (`bench/throughput_image_torch.py`): the CNN's and the ViT's loop in plain
/// PyTorch (the same layers, initialisation aside), printing one JSON object
/// (`train_samples_per_s`, `peak_rss_bytes`, `torch`, …).
pub const IMAGE_SCRIPT: &str = include_str!("../../bench/throughput_image_torch.py");

/// The command-line arguments of [`IMAGE_SCRIPT`] for `twin`; `None` when the model is neither
/// the CNN nor the ViT.
pub fn image_args(twin: &Twin) -> Option<Vec<String>> {
    let (model, depth, width) = match twin.model {
        super::BenchModel::Cnn { depth, width } => ("cnn", depth, width),
        super::BenchModel::Vit { depth, width } => ("vit", depth, width),
        _ => return None,
    };
    let mut v: Vec<String> = vec!["--model".into(), model.into()];
    for (flag, n) in [
        ("--depth", *depth),
        ("--width", *width),
        ("--batch", twin.batch),
        ("--steps", twin.steps),
        ("--warmup", twin.warmup),
        ("--threads", twin.threads),
    ] {
        v.extend([flag.to_string(), n.to_string()]);
    }
    v.extend([
        "--optimizer".into(),
        twin.optimizer.name().into(),
        "--lr".into(),
        twin.optimizer.lr(twin.model).to_string(),
        "--device".into(),
        torch_device(twin.device),
    ]);
    Some(v)
}

/// Runs [`IMAGE_SCRIPT`] with the interpreter `python` for `twin` ([`image_args`]); `None` when
/// the model is neither the CNN nor the ViT, or PyTorch cannot run (no interpreter, torch not
/// importable, a failed run, output that is not JSON).
pub fn run_image(python: &str, twin: &Twin) -> Option<serde_json::Value> {
    let mut cmd = std::process::Command::new(python);
    cmd.arg("-").args(image_args(twin)?);
    run_script(cmd, IMAGE_SCRIPT)
}

/// Runs `cmd` (a Python interpreter reading its program from standard input) on `script`; its
/// standard output as JSON, `None` when it cannot start, fails or prints something else.
fn run_script(mut cmd: std::process::Command, script: &str) -> Option<serde_json::Value> {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(script.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// PyTorch's name of engram's device `name`: `cuda` and `cuda:N` as they are (PyTorch names
/// CUDA devices as engram does), anything else the CPU.
fn torch_device(name: &str) -> String {
    match engram_core::device::parse(name) {
        Ok(("cuda", Some(i))) => format!("cuda:{i}"),
        Ok(("cuda", None)) => "cuda".to_string(),
        _ => "cpu".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchModel, BenchOptimizer};

    /// The image twin gets the engram run's model, sizes, loop and optimiser (AdamW at 1e-3),
    /// and no twin runs for a model it does not build.
    #[test]
    fn image_twin_arguments() {
        let vit = BenchModel::Vit {
            depth: 8,
            width: 128,
        };
        let twin = Twin {
            model: &vit,
            batch: 32,
            steps: 5,
            warmup: 1,
            optimizer: BenchOptimizer::Adamw,
            threads: 2,
            device: "cpu",
            lora_rank: None,
        };
        assert_eq!(
            image_args(&twin).unwrap().join(" "),
            "--model vit --depth 8 --width 128 --batch 32 --steps 5 --warmup 1 --threads 2 \
             --optimizer adamw --lr 0.001 --device cpu"
        );
        let cnn = BenchModel::Cnn {
            depth: 2,
            width: 16,
        };
        let args = image_args(&Twin {
            model: &cnn,
            optimizer: BenchOptimizer::Sgd,
            ..twin
        })
        .unwrap();
        assert_eq!(args[..6].join(" "), "--model cnn --depth 2 --width 16");
        assert_eq!(args[14..16].join(" "), "--optimizer sgd");
        assert_eq!(args[16..18].join(" "), "--lr 0.05");
        let mlp = BenchModel::Mlp {
            depth: 2,
            width: 400,
        };
        assert!(
            image_args(&Twin {
                model: &mlp,
                ..twin
            })
            .is_none()
        );
        assert!(
            run_image(
                "python3",
                &Twin {
                    model: &mlp,
                    ..twin
                }
            )
            .is_none()
        );
    }
}
