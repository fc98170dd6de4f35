//! The newcomer's road (issue 33): `export --layout pytorch` writes PyTorch's layout and
//! `[model] init` reads it back to the same parameters; the summary shows the initial accuracy
//! and the normalisation rule; a CSV of pixel bytes normalises as IDX does; bare plugin names
//! are found from anywhere; `--set memory=[]` / `forgetting=[]` empty a list; the comparison
//! figure carries retention's caveat; the quick start's commands run in order.

use crate::util::{engram, fmnist_slice as slice, output, run, run_quiet, small_config};
use engram::core::data::dataset::{Split, Values};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A safetensors file's `f32` tensors by name: `(shape, values)` (row-major), read by hand
/// from the format (8-byte little-endian header length, JSON header, data).
fn tensors(path: &Path) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let data = &b[8 + n..];
    let mut out = BTreeMap::new();
    for (k, v) in header.as_object().unwrap() {
        if k == "__metadata__" {
            continue;
        }
        assert_eq!(v["dtype"], "F32", "{k}");
        let shape: Vec<usize> = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let [a, z] = [0, 1].map(|i| v["data_offsets"][i].as_u64().unwrap() as usize);
        let values = data[a..z]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        out.insert(k.clone(), (shape, values));
    }
    out
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

fn export(run_dir: &Path, file: &Path, layout: &[&str]) {
    let mut args = vec![
        "export",
        run_dir.to_str().unwrap(),
        "--safetensors",
        file.to_str().unwrap(),
    ];
    args.extend(layout);
    let (code, msg) = run(&args);
    assert_eq!(code, 0, "{msg}");
}

/// Item 9: an MLP 784-400-10 exported in PyTorch's layout has its first weight `[400, 784]`,
/// the transpose of the Burn-layout export value for value (biases as they are); `init` from it
/// with `init_layout = "pytorch"` rebuilds exactly the exported parameters and starts the
/// stream at the trained model's last accuracies; the summary prints that initial row. Also
/// the comparison figure marks a retention that divides by an at-chance task.
#[test]
fn export_in_pytorch_layout_round_trips_through_init() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let wide = ["--set", "model.hidden=[400]"];
    let trained = d.path().join("trained");
    let mut args = vec![
        "run",
        cfg.to_str().unwrap(),
        "--out",
        trained.to_str().unwrap(),
    ];
    args.extend(wide);
    let (code, summary) = run(&args);
    assert_eq!(code, 0, "{summary}");
    let r = report(&trained);
    // The summary's `initial` row is report.json's initial_accuracy, in percent.
    let initial: Vec<String> = r["initial_accuracy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{:5.1}", v.as_f64().unwrap() * 100.0))
        .collect();
    let want = format!("{:>10} {}  (random start)", "initial", initial.join(" "));
    assert!(summary.contains(&want), "want {want:?} in\n{summary}");
    let rule = "per channel: 1 mean and std over the pixels (28×28 images of 1 channel)";
    assert_eq!(r["normalization"], rule);
    assert!(
        summary.contains(&format!("data normalised {rule}")),
        "{summary}"
    );

    let (burn, torch) = (
        d.path().join("b.safetensors"),
        d.path().join("p.safetensors"),
    );
    export(&trained, &burn, &[]);
    export(&trained, &torch, &["--layout", "pytorch"]);
    let (b, p) = (tensors(&burn), tensors(&torch));
    assert_eq!(
        b.keys().collect::<Vec<_>>(),
        p.keys().collect::<Vec<_>>(),
        "same names"
    );
    let mut transposed = Vec::new();
    for (name, (bs, bv)) in &b {
        let (ps, pv) = &p[name];
        if bs.len() == 2 && name.ends_with("weight") {
            let (i, o) = (bs[0], bs[1]);
            assert_eq!(ps, &vec![o, i], "{name}");
            for r in 0..o {
                for c in 0..i {
                    assert_eq!(pv[r * i + c], bv[c * o + r], "{name}[{r}][{c}]");
                }
            }
            transposed.push(ps.clone());
        } else {
            assert_eq!((ps, pv), (bs, bv), "{name}");
        }
    }
    assert_eq!(
        transposed,
        [vec![400, 784], vec![10, 400]],
        "{:?}",
        p.keys()
    );

    // Back: init from the PyTorch-layout file rebuilds the very parameters of the Burn export.
    let sets = [
        "model.hidden=[400]".to_string(),
        format!("model.init=\"{}\"", torch.display()),
        "model.init_layout=\"pytorch\"".to_string(),
    ];
    let prepared = engram::core::train::trainer::prepare(
        engram::core::config::LoadedConfig::load(&cfg, &sets).unwrap(),
        &engram::registry(),
    )
    .unwrap();
    let (model, _) = engram::core::train::trainer::load_init(
        &prepared.cfg,
        prepared.build_model(&prepared.device).unwrap(),
    )
    .unwrap();
    let again = d.path().join("again.safetensors");
    engram::core::train::trainer::export_safetensors(
        &model,
        &again,
        engram::core::train::trainer::ExportLayout::Burn,
    )
    .unwrap();
    assert_eq!(
        tensors(&again),
        b,
        "init from the PyTorch layout, exported again"
    );
    // …and a run started from it begins where the trained run ended.
    let started = d.path().join("started");
    let set: Vec<String> = sets
        .iter()
        .flat_map(|s| ["--set".into(), s.clone()])
        .collect();
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let (code, msg) = run_quiet(&cfg, &started, &set, &[]);
    assert_eq!(code, 0, "{msg}");
    let last = r["accuracy_matrix"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(report(&started)["initial_accuracy"], last);

    // The comparison figure: a retention over an at-chance task is starred and explained.
    let caveat = d.path().join("caveat");
    std::fs::create_dir(&caveat).unwrap();
    let mut rc = r.clone();
    rc["metrics"]["retention"] = serde_json::json!(1.22);
    rc["retention_note"] = serde_json::json!("task(s) 0 scored no better than chance");
    std::fs::write(caveat.join("report.json"), rc.to_string()).unwrap();
    let plots = d.path().join("plots");
    let (code, msg) = run(&[
        "compare",
        trained.to_str().unwrap(),
        caveat.to_str().unwrap(),
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    let svg = std::fs::read_to_string(plots.join("compare.svg")).unwrap();
    assert!(svg.contains(" 1.220*"), "the starred value");
    assert!(svg.contains("is not a share kept"), "the footnote");
    assert_eq!(svg.matches('*').count(), 3, "value, axis title, footnote");
}

/// Sample `i` of `s` as the model sees it: `(x / 255 − mean) / std`, one group per
/// `features / mean.len()` values.
fn normalised(s: &Split, i: usize) -> Vec<f32> {
    let row = s.row(i).unwrap();
    let per = s.features / s.mean.len();
    row.iter()
        .enumerate()
        .map(|(k, &x)| (f32::from(x) / 255.0 - s.mean[k / per]) / s.std[k / per])
        .collect()
}

/// Item 6: the same Fashion-MNIST images as CSV (784 byte columns, no `dataset.toml`) and as
/// IDX give equal normalised features (one mean and std over all pixels, by hand), and equal
/// accuracy matrices; a table of byte columns that is not a square image keeps one mean per
/// column. The runs' config lists EWC and checkpointing, emptied by `--set forgetting=[]`
/// and `--set memory=[]` (item 10).
#[test]
fn csv_pixels_normalise_as_idx_images_do() {
    crate::util::require_fmnist!();
    let r = engram::registry();
    let ds = slice(1200, 400);
    let d = tempfile::tempdir().unwrap();
    let mut back = Vec::new();
    for f in ["idx", "csv"] {
        let out = d.path().join(f);
        r.write_data(&ds, f, &out).unwrap();
        std::fs::remove_file(out.join("dataset.toml")).unwrap();
        back.push(r.read_data("", Some(f), Some(&out)).unwrap());
    }
    let (idx, csv) = (&back[0], &back[1]);
    assert_eq!(csv.input.features(), 784);
    assert_eq!((csv.train.mean.len(), idx.train.mean.len()), (1, 1));
    let Values::U8(v) = &ds.train.values else {
        unreachable!()
    };
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x) / 255.0).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) / 255.0 - mean).powi(2))
        .sum::<f64>()
        / n;
    assert!((f64::from(csv.train.mean[0]) - mean).abs() < 1e-6, "{mean}");
    assert!((f64::from(csv.train.std[0]) - var.sqrt()).abs() < 1e-6);
    for (a, b) in [(&idx.train, &csv.train), (&idx.test, &csv.test)] {
        for i in [0, 1, 399] {
            assert_eq!(normalised(a, i), normalised(b, i), "sample {i}");
        }
    }
    // A table of 3 byte columns is no image: one mean per column, by hand.
    let tab = d.path().join("tab");
    std::fs::create_dir(&tab).unwrap();
    let rows = "label,a,b,c\n0,0,255,10\n1,255,255,20\n";
    for f in ["train.csv", "test.csv"] {
        std::fs::write(tab.join(f), rows).unwrap();
    }
    let t = r.read_data("", Some("csv"), Some(&tab)).unwrap();
    assert_eq!(t.train.mean.len(), 3);
    for (m, want) in t.train.mean.iter().zip([0.5, 1.0, 15.0 / 255.0]) {
        assert!((f64::from(*m) - want).abs() < 1e-7, "{:?}", t.train.mean);
    }
    assert_eq!(t.train.std[1], 1.0, "a constant column keeps std 1");

    // Runs: the same matrix from both formats, and the rule named in each report.
    let cfg = small_config(
        d.path(),
        "c.toml",
        "[[forgetting]]\ntype = \"ewc\"\n[[memory]]\ntype = \"checkpoint\"\n",
    );
    let mut matrices = Vec::new();
    for f in ["idx", "csv"] {
        let out = d.path().join(format!("run-{f}"));
        let (fmt, path) = (
            format!("data.format=\"{f}\""),
            format!("data.path=\"{}\"", d.path().join(f).display()),
        );
        let (code, msg) = run_quiet(
            &cfg,
            &out,
            &[
                "--set",
                &fmt,
                "--set",
                &path,
                "--set",
                "forgetting=[]",
                "--set",
                "memory=[]",
            ],
            &[],
        );
        assert_eq!(code, 0, "{msg}");
        let rep = report(&out);
        assert_eq!(rep["config"]["forgetting"], serde_json::json!([]));
        assert_eq!(rep["config"]["memory"], serde_json::json!([]));
        matrices.push(rep["accuracy_matrix"].clone());
        let rule = rep["normalization"].as_str().unwrap().to_string();
        let want = if f == "idx" {
            "per channel: 1 mean"
        } else {
            "over all values: 1 mean"
        };
        assert!(rule.starts_with(want), "{f}: {rule}");
    }
    assert_eq!(matrices[0], matrices[1]);
}

/// `engram validate CFG` from `cwd` with `env`; exit code and output.
fn validate(cfg: &Path, cwd: &Path, env: &[(&str, &str)], extra: &[&str]) -> (i32, String) {
    let mut c = engram();
    c.current_dir(cwd)
        .args(["validate", cfg.to_str().unwrap()])
        .args(extra);
    c.env_remove("ENGRAM_PLUGIN_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    output(c.output().unwrap())
}

/// Item 8: bare plugin names are found beside the binary (the shipped examples validate from
/// any directory), in `$ENGRAM_PLUGIN_PATH`, and by a path given with `--set plugins=[…]`;
/// a name found nowhere lists every place looked at and the two ways out.
#[test]
fn bare_plugin_names_are_searched_for() {
    crate::util::require_fmnist!();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    for ex in [
        "permuted-fmnist-si.toml",
        "resnet-mini-split-fmnist.toml",
        "split-fmnist-moe.toml",
    ] {
        let cfg = root.join("examples").join(ex);
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(!text.contains("target/release"), "{ex} names a build path");
        let (code, msg) = validate(&cfg, d.path(), &[], &[]);
        assert_eq!(code, 0, "{ex}: {msg}");
    }
    // A copy under another name, in a directory of its own: found only through the variable.
    let dir = d.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_engram")).parent().unwrap();
    let lib = dir.join("libmy_si.so");
    std::fs::copy(bin.join("libsynaptic_intelligence.so"), &lib).unwrap();
    let cfg = small_config(d.path(), "c.toml", "[[forgetting]]\ntype = \"si\"\n");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("plugins = [\"my-si\"]\n{text}")).unwrap();
    let var = format!("/nonexistent:{}", dir.display());
    let (code, msg) = validate(&cfg, d.path(), &[("ENGRAM_PLUGIN_PATH", &var)], &[]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = validate(&cfg, d.path(), &[], &[]);
    assert_eq!(code, 2, "{msg}");
    let beside: PathBuf = bin.join("libmy_si.so");
    for needle in [
        "plugin my-si: no such file".to_string(),
        beside.display().to_string(),
        d.path().join("libmy_si.so").display().to_string(),
        "ENGRAM_PLUGIN_PATH".into(),
        "--set plugins=".into(),
        "c.toml:1:".into(),
    ] {
        assert!(msg.contains(&needle), "{needle:?} not in {msg}");
    }
    let set = format!("plugins=[\"{}\"]", lib.display());
    let (code, msg) = validate(&cfg, d.path(), &[], &["--set", &set]);
    assert_eq!(code, 0, "{msg}");
}

/// Item 10: every `compare` (or `report`) of the quick start reads run directories that an
/// earlier `run` of the chapter wrote (`runs/<config stem>`).
#[test]
fn the_quick_start_runs_what_it_compares() {
    let md = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/quick-start.md"),
    )
    .unwrap();
    let mut written: Vec<String> = Vec::new();
    let mut compared = 0;
    for line in md.lines() {
        let words: Vec<&str> = line
            .split(" #")
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let Some(at) = words.iter().position(|w| *w == "--") else {
            continue;
        };
        match words.get(at + 1) {
            Some(&"run") => {
                let stem = Path::new(words[at + 2]).file_stem().unwrap();
                written.push(format!("runs/{}", stem.to_str().unwrap()));
            }
            Some(&"compare") | Some(&"report") => {
                for dir in &words[at + 2..] {
                    assert!(
                        written.iter().any(|w| w == dir),
                        "{dir} is never run before: {line}"
                    );
                }
                compared += 1;
            }
            _ => {}
        }
    }
    assert_eq!(written, ["runs/split-fmnist", "runs/split-fmnist-replay"]);
    assert_eq!(compared, 2);
}

/// `validate -v` prints the strategy chain as `run -v` does, `-vv` also the effective config
/// (the `--set` override applied), and `-q` nothing at all: `--help` promises it for every
/// command.
#[test]
fn validate_is_as_verbose_as_run() {
    crate::util::require_fmnist!();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg = root.join("examples/split-fmnist.toml");
    let chain = "engram: forgetting: naive; memory chain: standard; schedulers: none; data: ";
    let (code, plain) = validate(&cfg, root, &[], &[]);
    assert_eq!(code, 0, "{plain}");
    assert!(!plain.contains(chain), "{plain}");
    let (code, v) = validate(&cfg, root, &[], &["-v"]);
    assert_eq!(code, 0, "{v}");
    assert!(v.contains(chain), "{v}");
    assert!(!v.contains("epochs = 7"), "{v}");
    let (code, vv) = validate(&cfg, root, &[], &["-vv", "--set", "train.epochs=7"]);
    assert_eq!(code, 0, "{vv}");
    assert!(vv.contains(chain) && vv.contains("epochs = 7"), "{vv}");
    let (code, q) = validate(&cfg, root, &[], &["-q"]);
    assert_eq!((code, q.as_str()), (0, ""));
}
