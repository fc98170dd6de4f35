//! Schedulers end to end: a harmful learning rate on a later task triggers the anomaly
//! handler, which rolls back and retries until the old task recovers; the evaluation cadence
//! leaves `null` cells in the matrix.

use crate::util::{run, small_config};
use serde_json::Value;

fn report(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

#[test]
fn harmful_learning_rate_is_rolled_back_and_the_old_task_recovers() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let base = "[[forgetting]]\ntype = \"ewc\"\nlambda = 10.0\n\
                [[scheduler]]\ntype = \"lr\"\ntask_factors = [1.0, 6.0]\n";
    let extra = format!(
        "{base}[[scheduler]]\ntype = \"anomaly\"\nthreshold = 0.05\nlambda_factor = 10.0\nlr_factor = 0.3\nmax_retries = 2\n"
    );
    let f = small_config(d.path(), "a.toml", &extra);
    let out = d.path().join("out");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "--set",
        "data.scenario=\"task-incremental\"",
        "--set",
        "model.hidden=[64]",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    let events = r["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "rollback" && e["task"] == 1),
        "a rollback is reported: {events:?}"
    );
    let m = &r["accuracy_matrix"];
    let (best, now) = (m[0][0].as_f64().unwrap(), m[1][0].as_f64().unwrap());
    assert!(
        best - now <= 0.05,
        "task 0 recovered within the threshold: {best} -> {now}"
    );
    // Without the handler the same harmful rate forgets task 0 well beyond the threshold.
    let f2 = small_config(d.path(), "b.toml", base);
    let out2 = d.path().join("out2");
    let (code, msg) = run(&[
        "run",
        f2.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "-q",
        "--set",
        "data.scenario=\"task-incremental\"",
        "--set",
        "model.hidden=[64]",
    ]);
    assert_eq!(code, 0, "{msg}");
    let m2 = &report(&out2)["accuracy_matrix"];
    assert!(
        m2[0][0].as_f64().unwrap() - m2[1][0].as_f64().unwrap() > 0.05,
        "{m2}"
    );
}

#[test]
fn cadence_skips_cells_and_metrics_use_what_was_evaluated() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let f = small_config(
        d.path(),
        "c.toml",
        "[[scheduler]]\ntype = \"cadence\"\nevery = 2\n",
    );
    let out = d.path().join("out");
    let (code, msg) = run(&[
        "run",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "--set",
        "data.tasks=3",
    ]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&out);
    let m = r["accuracy_matrix"].as_array().unwrap();
    // After task 0: the diagonal only. After task 1 (2nd): the whole row. Last row: whole.
    assert!(m[0][0].is_number() && m[0][1].is_null() && m[0][2].is_null());
    assert!(m[1].as_array().unwrap().iter().all(Value::is_number));
    assert!(m[2].as_array().unwrap().iter().all(Value::is_number));
    assert!(r["metrics"]["acc"].is_number());
    // FWT needs R[0][1], which was skipped, but R[1][2] exists.
    assert!(r["metrics"]["fwt"].is_number());
}
