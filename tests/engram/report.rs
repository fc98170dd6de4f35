//! `engram report` and `engram compare` on hand-written fixture runs
//! (`tests/fixtures/report/`: a 3-task run with `report.json` and `steps.csv`, and `seeds/`, a
//! two-seed run with `aggregate.json`). No data set and no training.

use crate::util::{engram, run};
use engram::report::{self, FIGURE_SIZE, FIGURES};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 33, "PNG too short: {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is not IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// The text content of every element of an SVG document, trimmed (plotters writes each
/// `<text>` element's content on a line of its own).
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split('<')
        .filter_map(|part| part.split_once('>').map(|(_, t)| t.trim().to_string()))
        .filter(|t| !t.is_empty())
        .collect()
}

/// The texts each figure's SVG must hold: axis labels, task names, legend entries.
fn expected_text(stem: &str) -> &'static [&'static str] {
    match stem {
        "accuracy_matrix" => &[
            "evaluated task",
            "after training task",
            "accuracy (%)",
            "T0",
            "T1",
            "T2",
            "90.0",
            "70.0",
        ],
        "task_accuracy" => &[
            "after training task",
            "test accuracy (%)",
            "T0",
            "T2",
            "mean of tasks seen",
        ],
        "memory" => &[
            "Peak memory (heap), MiB",
            "peak memory (MiB)",
            "run peak",
            "training task",
            "100.0",
            "training step peak (MiB)",
            "3.2",
        ],
        "loss_lr" => &[
            "global step",
            "training loss (window mean)",
            "learning rate (sgd)",
            "T1",
        ],
        other => panic!("no expectations for figure {other}"),
    }
}

#[test]
fn renders_every_figure_from_the_fixture() {
    let out = tempfile::tempdir().unwrap();
    let files = report::render_dir(&fixture(), Some(out.path())).unwrap();
    assert_eq!(files.len(), 2 * FIGURES.len(), "{files:?}");
    for stem in FIGURES {
        let png = std::fs::read(out.path().join(format!("{stem}.png"))).unwrap();
        assert_eq!(png_size(&png), FIGURE_SIZE, "{stem}.png");
        let svg = std::fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg"),
            "{stem}.svg: {}",
            &svg[..40.min(svg.len())]
        );
        let texts = svg_texts(&svg);
        for text in expected_text(stem) {
            assert!(
                texts.iter().any(|t| t == text),
                "{stem}.svg lacks the text {text:?}; it has {texts:?}"
            );
        }
    }
    // Written atomically: nothing but the figures is left behind.
    let names: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2 * FIGURES.len(), "{names:?}");
}

#[test]
fn png_text_is_drawn_with_the_embedded_font() {
    // The x-axis description ("evaluated task") sits centred in the band below the heatmap's
    // tick labels; without a font that band would stay white.
    let out = tempfile::tempdir().unwrap();
    let r = report::load_report(&fixture()).unwrap();
    let files = report::render(&r, &[], out.path()).unwrap();
    assert_eq!(
        files.len(),
        2 * (FIGURES.len() - 1),
        "no steps, no loss figure"
    );
    let bytes = std::fs::read(out.path().join("accuracy_matrix.png")).unwrap();
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), FIGURE_SIZE);
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let (w, h) = (info.width as usize, info.height as usize);
    let dark = (h - 60..h - 15)
        .flat_map(|y| (300..650).map(move |x| (y * w + x) * 3))
        .filter(|&i| buf[i] < 100 && buf[i + 1] < 100 && buf[i + 2] < 100)
        .count();
    assert!(
        dark > 50,
        "only {dark} dark pixels where the axis label should be"
    );
}

#[test]
fn report_command_writes_into_dir_plots() {
    let d = tempfile::tempdir().unwrap();
    for f in ["report.json", "steps.csv"] {
        std::fs::copy(fixture().join(f), d.path().join(f)).unwrap();
    }
    let (code, out) = run(&["report", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    for stem in FIGURES {
        for ext in ["png", "svg"] {
            let p = d.path().join("plots").join(format!("{stem}.{ext}"));
            assert!(p.is_file(), "{} missing; output:\n{out}", p.display());
            assert!(out.contains(&format!("{stem}.{ext}")), "{out}");
        }
    }
}

#[test]
fn report_without_a_run_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let (code, out) = run(&["report", d.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("report.json: not found"), "{out}");
    assert!(out.contains("engram run CONFIG --out DIR"), "{out}");

    // A multi-seed directory points at its seed-N/ runs.
    let seeds = fixture().join("seeds");
    let (code, out) = run(&["report", seeds.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("seed-N/"), "{out}");

    // A malformed report names the file.
    std::fs::write(d.path().join("report.json"), "{\"schema_version\": 1}").unwrap();
    let (code, out) = run(&["report", d.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not an engram report: missing field"), "{out}");
}

#[test]
fn compare_prints_runs_side_by_side() {
    let single = fixture();
    let seeds = fixture().join("seeds");
    let rows = [
        report::run_row(&single).unwrap(),
        report::run_row(&seeds).unwrap(),
    ];
    assert_eq!(rows[0].seeds, 1);
    assert_eq!(rows[1].seeds, 2);
    assert_eq!(rows[0].acc.unwrap().std, None);
    let acc = rows[1].acc.unwrap();
    assert!((acc.mean - 0.65).abs() < 1e-9 && (acc.std.unwrap() - 0.0707).abs() < 1e-4);

    let (code, out) = run(&["compare", single.to_str().unwrap(), seeds.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for col in [
        "run",
        "seeds",
        "ACC",
        "BWT",
        "forgetting",
        "FWT",
        "retention",
        "time (s)",
        "peak MiB",
        "step peak MiB",
    ] {
        assert!(lines[0].contains(col), "header lacks {col}: {out}");
    }
    // Single run: the report's figures (hand-computed metrics of R in the fixture).
    for cell in [
        "0.7000", "-0.2500", "0.2500", "0.0250", "0.7059", "12.5", "100.0", "3.25",
    ] {
        assert!(lines[1].contains(cell), "row 1 lacks {cell}: {out}");
    }
    // Two seeds: mean ± sample std; time 10 and 12 s, peak 100 and 120 MiB.
    for cell in [
        "0.6500 ± 0.0707",
        "-0.3000 ± 0.0707",
        "11.0 ± 1.4",
        "110.0 ± 14.1",
    ] {
        assert!(lines[2].contains(cell), "row 2 lacks {cell}: {out}");
    }
    // Columns line up: every row has the same width up to the last column.
    let ends: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(ends.iter().all(|&e| e == ends[0]), "{out}");

    // Runs measured on different data get a warning naming the key and each run's value
    // (the two fixtures agree, so the output above has no warning).
    let other = tempfile::tempdir().unwrap();
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(single.join("report.json")).unwrap()).unwrap();
    r["config"]["data"]["evaluate_on"] = "validation".into();
    r["config"]["data"]["path"] = "/elsewhere".into();
    r["tasks"][0]["train_samples"] = 900.into();
    // Keys written differently but meaning the same (an unset task count) are not flagged.
    r["config"]["data"]["tasks"] = serde_json::Value::Null;
    std::fs::write(other.path().join("report.json"), r.to_string()).unwrap();
    let o = engram()
        .args([
            "compare",
            single.to_str().unwrap(),
            other.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stdout.lines().count(),
        3,
        "the table alone on stdout: {stdout}"
    );
    let warn: Vec<&str> = stderr.lines().collect();
    assert_eq!(warn.len(), 3, "{stderr}");
    assert!(warn[0].contains("not comparable"), "{stderr}");
    let other_name = other.path().display().to_string();
    assert_eq!(
        warn[1],
        format!(
            "  data.evaluate_on: {} \"test\", {other_name} \"validation\"",
            single.display()
        )
    );
    let tasks = |train: usize| {
        format!("3 tasks (classes 0 1 | 2 3 | 4 5), {train} training and 1200 evaluation samples")
    };
    assert_eq!(
        warn[2],
        format!(
            "  tasks: {} {:?}, {other_name} {:?}",
            single.display(),
            tasks(3000),
            tasks(2900)
        )
    );

    // Next to a naive run on the same data, a task another run learned more than 0.05 below
    // naive's diagonal is named (task 1: 0.70 against 0.80); one 0.02 below is not (task 2).
    let strong = tempfile::tempdir().unwrap();
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(single.join("report.json")).unwrap()).unwrap();
    r["config"]["forgetting"] = serde_json::json!([{"type": "ewc"}]);
    r["accuracy_matrix"][1][1] = 0.7.into();
    r["accuracy_matrix"][2][2] = 0.88.into();
    std::fs::write(strong.path().join("report.json"), r.to_string()).unwrap();
    let o = engram()
        .args([
            "compare",
            single.to_str().unwrap(),
            strong.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let warn: Vec<&str> = stderr.lines().collect();
    assert_eq!(warn.len(), 1, "{stderr}");
    assert!(
        warn[0].starts_with(&format!(
            "warning: {}: task 1 reached 0.700 right after training on it, naive fine-tuning ({}) 0.800",
            strong.path().display(),
            single.display()
        )),
        "{stderr}"
    );

    let missing = tempfile::tempdir().unwrap();
    let (code, out) = run(&[
        "compare",
        single.to_str().unwrap(),
        missing.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}");
}

/// A `report.json` of `tasks` tasks from the fixture's: a lower-triangular accuracy matrix
/// (`R[i][j]` = 0.5 + 0.4·(j mod 2) for j ≤ i, null above), one entry per task in `tasks` and
/// in the per-task memory peaks.
fn synthetic_report(tasks: usize) -> String {
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture().join("report.json")).unwrap()).unwrap();
    let task = r["tasks"][0].clone();
    r["tasks"] = (0..tasks)
        .map(|i| {
            let mut t = task.clone();
            t["index"] = i.into();
            t
        })
        .collect::<Vec<_>>()
        .into();
    r["memory"]["per_task_train_peak_bytes"] = (0..tasks)
        .map(|i| serde_json::Value::from(1_000_000 + 1000 * i))
        .collect::<Vec<_>>()
        .into();
    r["accuracy_matrix"] = serde_json::Value::Null;
    let text = r.to_string();
    // The matrix written as text: a Value of 4 million cells would be slow to build.
    let mut m = String::with_capacity(tasks * tasks * 5);
    m.push('[');
    for i in 0..tasks {
        m.push_str(if i == 0 { "[" } else { ",[" });
        for j in 0..tasks {
            if j > 0 {
                m.push(',');
            }
            m.push_str(match (j <= i, j % 2) {
                (false, _) => "null",
                (true, 0) => "0.5",
                (true, _) => "0.9",
            });
        }
        m.push(']');
    }
    m.push(']');
    text.replacen(
        "\"accuracy_matrix\":null",
        &format!("\"accuracy_matrix\":{m}"),
        1,
    )
}

/// Issue #32, defect 9: `engram report` on 2,000 tasks of online learning ran for minutes (a
/// 2000×2000 heatmap with a label per cell, 2,000 curves). The figures are bounded: the
/// heatmap draws blocks of tasks and says so, the curves are capped with the mean kept.
/// (How long it takes is measured by `engram bench`, not asserted here.)
#[test]
fn issue32_report_of_2000_tasks_renders_bounded_figures() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("report.json"), synthetic_report(2000)).unwrap();
    let files = report::render_dir(d.path(), None).unwrap();
    assert_eq!(files.len(), 2 * (FIGURES.len() - 1), "{files:?}");
    for stem in &FIGURES[..3] {
        let png = std::fs::read(d.path().join("plots").join(format!("{stem}.png"))).unwrap();
        assert_eq!(png_size(&png), FIGURE_SIZE, "{stem}.png");
    }
    let svg = |stem: &str| {
        svg_texts(
            &std::fs::read_to_string(d.path().join("plots").join(format!("{stem}.svg"))).unwrap(),
        )
    };
    let matrix = svg("accuracy_matrix");
    assert!(
        matrix
            .iter()
            .any(|t| t == "Accuracy matrix R[i][j] (%), means of 20×20 task blocks"),
        "{:?}",
        &matrix[..20.min(matrix.len())]
    );
    // No cell is annotated, and the axes are thinned to round task numbers.
    assert!(!matrix.iter().any(|t| t == "90.0" || t == "50.0"));
    assert!(matrix.iter().any(|t| t == "T1000"), "{matrix:?}");
    assert!(!matrix.iter().any(|t| t == "T1001"));
    let curves = svg("task_accuracy");
    assert!(
        curves.iter().any(|t| t == "task (20 of 2000)"),
        "{curves:?}"
    );
    assert!(curves.iter().any(|t| t == "T1999"), "{curves:?}");
    assert!(curves.iter().any(|t| t == "mean of tasks seen"));
    let memory = svg("memory");
    assert!(
        memory
            .iter()
            .any(|t| t == "training tasks (peak of each 40)"),
        "{memory:?}"
    );
}

/// Issue #32, defect 11: `engram report` on a regular file or a device, or with `OUT/plots`
/// a file of the user's, failed with exit 1 and a bare OS error. Bad input: exit 2, the path
/// named, the user's file left as it was.
#[test]
fn issue32_report_on_a_file_or_device_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    for (path, what) in [
        (file.to_str().unwrap(), "is a file, not a run's directory"),
        ("/dev/zero", "is a device or a FIFO, not a run's directory"),
    ] {
        let (code, out) = run(&["report", path]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains(&format!("{path}: {what}")), "{out}");
    }
    let r = d.path().join("run");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::copy(fixture().join("report.json"), r.join("report.json")).unwrap();
    std::fs::write(r.join("plots"), "my plots").unwrap();
    let (code, out) = run(&["report", r.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "the figures' directory {}: is a file, not a directory",
            r.join("plots").display()
        )),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("plots")).unwrap(),
        "my plots"
    );
}

/// `engram list` (plain and `--json`) prints exactly what `report::registry_text` renders, the
/// one function that also writes the book's reference page: the two cannot drift apart.
#[test]
fn engram_list_is_the_registry_text() {
    use engram::report::{RegistryFormat, registry_text};
    let registry = engram::registry();
    for (args, format) in [
        (&["list"][..], RegistryFormat::List),
        (&["list", "--json"][..], RegistryFormat::Json),
    ] {
        let o = engram().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            registry_text(&registry, format),
            "{args:?}"
        );
    }
    let page = registry_text(&registry, RegistryFormat::Markdown);
    assert_eq!(page, report::reference_markdown(&registry));
    assert!(page.starts_with("# Reference: strategies, models and datasets\n"));
}

/// `engram list NAME` shows the entries of that name only (keys and defaults, as the whole
/// list shows them), in JSON too; a name nothing is registered as is a usage error (exit 2)
/// that offers the names containing it.
#[test]
fn engram_list_name_shows_that_entry_only() {
    use engram::report::{RegistryFormat, registry_text};
    let whole = registry_text(&engram::registry(), RegistryFormat::List);
    let o = engram().args(["list", "lora"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
            .count(),
        1,
        "{out}"
    );
    assert!(out.contains("  lora ") && out.contains("rank = 8"), "{out}");
    for line in out.lines() {
        assert!(whole.contains(line), "{line}");
    }
    let o = engram().args(["list", "ewc", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["name"], "ewc");
    let o = engram().args(["list", "lor"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`lor`") && err.contains("o-lora") && err.contains("per-task-lora"),
        "{err}"
    );
}

/// `engram compare` on `[[data.stream]]` runs: their data is the ordered list of the entries'
/// datasets (`[data] dataset` is empty for a stream). Two runs of the same stream compare with
/// no warning; a stream against a plain run, or against a stream of other datasets, is flagged
/// on `data.dataset` as two plain runs on different datasets are.
#[test]
fn compare_judges_stream_runs_by_their_entries_datasets() {
    let base: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture().join("report.json")).unwrap()).unwrap();
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, entries: &[&str]| {
        let mut r = base.clone();
        r["config"]["data"]["dataset"] = "".into();
        r["config"]["data"]["stream"] = entries
            .iter()
            .map(|e| serde_json::json!({ "dataset": e }))
            .collect::<Vec<_>>()
            .into();
        let dir = d.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("report.json"), r.to_string()).unwrap();
        dir
    };
    let a = write("a", &["fashion-mnist", "mnist"]);
    let b = write("b", &["fashion-mnist", "mnist"]);
    let swapped = write("swapped", &["mnist", "fashion-mnist"]);
    let compare = |x: &Path, y: &Path| {
        let o = engram()
            .args(["compare", x.to_str().unwrap(), y.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert_eq!(compare(&a, &b), "");
    let plain = fixture();
    let warn = compare(&plain, &a);
    let lines: Vec<&str> = warn.lines().collect();
    assert_eq!(lines.len(), 2, "{warn}");
    assert!(lines[0].contains("not comparable"), "{warn}");
    assert_eq!(
        lines[1],
        format!(
            "  data.dataset: {} \"fashion-mnist\", {} [\"fashion-mnist\",\"mnist\"]",
            plain.display(),
            a.display()
        )
    );
    let warn = compare(&a, &swapped);
    assert!(
        warn.contains(&format!(
            "  data.dataset: {} [\"fashion-mnist\",\"mnist\"], {} [\"mnist\",\"fashion-mnist\"]",
            a.display(),
            swapped.display()
        )),
        "{warn}"
    );
}
