//! The PyTorch twin of [`throughput`](super::throughput): `bench/throughput_torch.py`, the
//! identical MLP training loop in plain PyTorch, run in a Python subprocess for comparison.
//! The script is embedded, so that an installed or bundled binary carries it.

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
    // PyTorch names CUDA devices as engram does (`cuda`, `cuda:1`); anything else is the CPU.
    let device = match engram_core::device::parse(device) {
        Ok(("cuda", Some(i))) => format!("cuda:{i}"),
        Ok(("cuda", None)) => "cuda".to_string(),
        _ => "cpu".to_string(),
    };
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
