//! The smallest library program: a model, data, EWC + replay, a run, its metrics — all typed
//! Rust values, no TOML. The book's "engram as a library" chapter includes it.
//!
//! Run with `cargo run --release --example library` (or, once built,
//! `target/release/examples/library`, which starts without `LD_LIBRARY_PATH`). It trains two
//! tasks of Split Fashion-MNIST, 1,000 samples each, in a few seconds.

use engram::Experiment;
use engram::core::Error;
use engram::core::model::mlp::MlpParams;
use engram::strategies::{ewc::EwcParams, replay::ReplayParams};

fn main() -> engram::core::Result<()> {
    // ANCHOR: experiment
    let experiment = Experiment::new()
        .dataset_named("fashion-mnist")
        .data(|d| {
            d.tasks = Some(2);
            d.classes_per_task = Some(2.into());
            d.subsample = Some(1000);
        })
        .model(MlpParams {
            hidden: vec![128],
            ..MlpParams::default()
        })
        .forgetting(EwcParams::default())
        .forgetting(ReplayParams {
            capacity: 200,
            ..ReplayParams::default()
        });
    let out = std::env::temp_dir().join(format!("engram-library-{}", std::process::id()));
    let report = match experiment.run(&out) {
        Err(Error::DatasetMissing { hint, .. }) => {
            println!("Fashion-MNIST is not installed, so nothing was trained: {hint}");
            return Ok(());
        }
        other => other?,
    };
    for (t, row) in report.accuracy_matrix.iter().enumerate() {
        let cells: Vec<String> = row.iter().flatten().map(|a| format!("{a:.3}")).collect();
        println!("after task {t}: {}", cells.join(" "));
    }
    let m = &report.metrics;
    println!(
        "ACC {:.4}  BWT {:+.4}  forgetting {:.4}",
        m.acc.unwrap_or(f64::NAN),
        m.bwt.unwrap_or(f64::NAN),
        m.forgetting.unwrap_or(f64::NAN)
    );
    // ANCHOR_END: experiment
    // ANCHOR: resume
    // The same experiment continues a run from its last checkpoint (here a finished one: its
    // report is rewritten from it, identical).
    let again = experiment.resume(&out)?;
    assert_eq!(again.accuracy_matrix, report.accuracy_matrix);
    // ANCHOR_END: resume
    let _ = std::fs::remove_dir_all(out);
    Ok(())
}
