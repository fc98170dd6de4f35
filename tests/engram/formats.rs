//! The data formats (`[data] format`): every format writes a slice of the real Fashion-MNIST
//! and reads it back identically; colour, float values and class names survive; malformed
//! files are typed errors naming the file; a run on an NPY export gives the IDX run's report;
//! `[model] init` from `engram export` and from a PyTorch-layout file.

use crate::util::{fmnist_slice as slice, run, run_quiet, small_config};
use engram::core::data::Dataset;
use engram::core::data::dataset::Values;
use engram::core::error::Error;
use engram::core::model::InputShape;
use std::path::Path;

const FORMATS: [&str; 4] = ["idx", "npy", "csv", "image-folder"];

/// Fashion-MNIST tinted into three channels (1, 0.6 and 0.3 of each pixel), `[3, 28, 28]`.
fn colour(ds: &Dataset) -> Dataset {
    let mut out = ds.clone();
    for s in [&mut out.train, &mut out.test] {
        let Values::U8(v) = &s.values else {
            unreachable!()
        };
        let f = s.features;
        let mut rgb = Vec::with_capacity(v.len() * 3);
        for row in v.chunks(f) {
            for k in [1.0f32, 0.6, 0.3] {
                rgb.extend(row.iter().map(|&x| (f32::from(x) * k) as u8));
            }
        }
        s.values = Values::U8(rgb);
        s.features = 3 * f;
        s.mean = vec![0.29, 0.17, 0.09];
        s.std = vec![0.35, 0.21, 0.1];
    }
    out.input = InputShape::Image {
        channels: 3,
        height: 28,
        width: 28,
    };
    out
}

fn assert_same(a: &Dataset, b: &Dataset, what: &str) {
    assert_eq!(a.input, b.input, "{what}: shape");
    assert_eq!(a.classes, b.classes, "{what}: classes");
    assert_eq!(a.class_names, b.class_names, "{what}: class names");
    for (x, y) in [(&a.train, &b.train), (&a.test, &b.test)] {
        assert_eq!(x.labels, y.labels, "{what}: labels");
        assert_eq!(x.values, y.values, "{what}: values");
        assert_eq!(
            (&x.mean, &x.std),
            (&y.mean, &y.std),
            "{what}: normalisation"
        );
    }
}

#[test]
fn every_format_reads_back_what_it_wrote_gray_and_colour() {
    crate::util::require_fmnist!();
    let r = engram::registry();
    let gray = slice(300, 100);
    let rgb = colour(&gray);
    let d = tempfile::tempdir().unwrap();
    for f in FORMATS {
        for (tag, ds) in [("gray", &gray), ("rgb", &rgb)] {
            let out = d.path().join(format!("{f}-{tag}"));
            r.write_data(ds, f, &out).unwrap();
            let back = r.read_data("fashion-mnist", Some(f), Some(&out)).unwrap();
            assert_same(ds, &back, &format!("{f} {tag}"));
            assert_eq!(back.name, "fashion-mnist");
        }
    }
    // The image folder follows torchvision's layout: class folders in label order.
    let classes: Vec<String> = std::fs::read_dir(d.path().join("image-folder-gray/train"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(classes[0], "00-T-shirt_top");
    assert_eq!(classes[9], "09-Ankle_boot");
    // An existing directory is never written over.
    let again = r.write_data(&gray, "npy", &d.path().join("npy-gray"));
    assert!(matches!(again, Err(Error::Usage(m)) if m.contains("exists")));
}

#[test]
fn without_dataset_toml_classes_and_normalisation_come_from_the_data() {
    crate::util::require_fmnist!();
    let r = engram::registry();
    let ds = slice(400, 100);
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("img");
    r.write_data(&ds, "image-folder", &out).unwrap();
    std::fs::remove_file(out.join("dataset.toml")).unwrap();
    let back = r.read_data("", Some("image-folder"), Some(&out)).unwrap();
    assert_eq!(back.name, "img");
    assert_eq!(back.class_names[0], "00-T-shirt_top");
    assert_eq!(back.train.values, ds.train.values);
    // The mean and population std of the 400 training images, by hand.
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
    assert!((f64::from(back.train.mean[0]) - mean).abs() < 1e-6);
    assert!((f64::from(back.train.std[0]) - var.sqrt()).abs() < 1e-6);
    assert_eq!(
        back.test.mean, back.train.mean,
        "the test split uses the train statistics"
    );
}

#[test]
fn float_values_and_named_labels_in_csv() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tab");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("train.csv"),
        "a,label,b\n0.5,cat,-1.25\n1.5,dog,2\n2.5,cat,1e-3\n",
    )
    .unwrap();
    std::fs::write(dir.join("test.csv"), "a,label,b\n3,dog,4\n").unwrap();
    let r = engram::registry();
    let ds = r.read_data("pets", Some("csv"), Some(&dir)).unwrap();
    assert_eq!(ds.input, InputShape::Features(2));
    assert_eq!(ds.class_names, ["cat", "dog"]);
    assert_eq!(ds.train.labels, [0, 1, 0]);
    assert_eq!(ds.test.labels, [1]);
    assert_eq!(
        ds.train.values,
        Values::F32(vec![0.5, -1.25, 1.5, 2.0, 2.5, 1e-3])
    );
    assert_eq!(ds.test.values, Values::F32(vec![3.0, 4.0]));
    // A table is standardised per column: column a is 0.5, 1.5, 2.5 (mean 1.5, std √(2/3)).
    assert_eq!(ds.train.mean.len(), 2);
    assert!((ds.train.mean[0] - 1.5).abs() < 1e-6);
    assert!((ds.train.std[0] - (2.0f32 / 3.0).sqrt()).abs() < 1e-6);
    // Floats survive CSV and NPY exactly.
    for f in ["csv", "npy"] {
        let out = d.path().join(format!("x-{f}"));
        r.write_data(&ds, f, &out).unwrap();
        let back = r.read_data("pets", Some(f), Some(&out)).unwrap();
        assert_same(&ds, &back, f);
    }
}

#[test]
fn malformed_files_are_typed_errors_that_name_the_file() {
    crate::util::require_fmnist!();
    let r = engram::registry();
    let d = tempfile::tempdir().unwrap();
    let reason = |format: &str, dir: &Path| match r.read_data("x", Some(format), Some(dir)) {
        Err(Error::DataFile { path, reason, .. }) => (path, reason),
        other => panic!("{format}: want a DataFile error, got {other:?}"),
    };
    // CSV: a cell that is not a number names the line and the column.
    let csv = d.path().join("csv");
    std::fs::create_dir(&csv).unwrap();
    std::fs::write(csv.join("train.csv"), "label,p0\n1,3\n0,x7\n").unwrap();
    std::fs::write(csv.join("test.csv"), "label,p0\n1,3\n").unwrap();
    let (path, why) = reason("csv", &csv);
    assert!(
        path.ends_with("train.csv") && why.contains("line 3") && why.contains("`p0`"),
        "{why}"
    );
    // CSV: no label column; rows of another width.
    std::fs::write(csv.join("train.csv"), "y,p0\n1,3\n").unwrap();
    assert!(reason("csv", &csv).1.contains("`label`"));
    std::fs::write(csv.join("train.csv"), "label,p0\n1,3,4\n").unwrap();
    assert!(reason("csv", &csv).0.ends_with("train.csv"));
    // NPY: labels of a float type, and labels that do not match the samples in number.
    let ds = slice(20, 10);
    let npy = d.path().join("npy");
    r.write_data(&ds, "npy", &npy).unwrap();
    let good = std::fs::read(npy.join("test_y.npy")).unwrap();
    let mut floats = ds.clone();
    for s in [&mut floats.train, &mut floats.test] {
        let Values::U8(v) = &s.values else {
            unreachable!()
        };
        s.values = Values::F32(v.iter().map(|&x| f32::from(x)).collect());
    }
    r.write_data(&floats, "npy", &d.path().join("f32")).unwrap();
    std::fs::copy(d.path().join("f32/test_x.npy"), npy.join("test_y.npy")).unwrap();
    let (path, why) = reason("npy", &npy);
    assert!(
        path.ends_with("test_y.npy") && why.contains("labels must be integers"),
        "{why}"
    );
    std::fs::copy(npy.join("train_y.npy"), npy.join("test_y.npy")).unwrap();
    let (path, why) = reason("npy", &npy);
    assert!(
        path.ends_with("test_y.npy") && why.contains("want [10]"),
        "{why}"
    );
    std::fs::write(npy.join("test_y.npy"), &good[..good.len() - 8]).unwrap();
    assert!(reason("npy", &npy).0.ends_with("test_y.npy"));
    // Image folder: a file that is not an image, and an image of another size.
    let img = d.path().join("img");
    r.write_data(&ds, "image-folder", &img).unwrap();
    let bogus = img.join("test/03-Dress/99.png");
    std::fs::write(&bogus, b"not a png").unwrap();
    let (path, why) = reason("image-folder", &img);
    assert!(
        path == bogus && why.contains("PNG or JPEG"),
        "{path:?}: {why}"
    );
    let mut enc = png::Encoder::new(std::fs::File::create(&bogus).unwrap(), 5, 5);
    enc.set_color(png::ColorType::Grayscale);
    enc.write_header()
        .unwrap()
        .write_image_data(&[0; 25])
        .unwrap();
    assert!(reason("image-folder", &img).1.contains("5×5"));
    // NPY: a non-finite sample value names the samples' file.
    let mut nan = floats.clone();
    if let Values::F32(v) = &mut nan.train.values {
        v[5] = f32::NAN;
    }
    let nan_dir = d.path().join("nan");
    r.write_data(&nan, "npy", &nan_dir).unwrap();
    let (path, why) = reason("npy", &nan_dir);
    assert!(
        path.ends_with("train_x.npy") && why.contains("not finite"),
        "{path:?}: {why}"
    );
    // Labels that are not the indices 0..K−1 (here 0, 1 and a stray 7) are refused.
    let sparse = d.path().join("sparse");
    std::fs::create_dir(&sparse).unwrap();
    std::fs::write(sparse.join("train.csv"), "label,p0\n0,3\n1,4\n7,5\n").unwrap();
    std::fs::write(sparse.join("test.csv"), "label,p0\n0,3\n").unwrap();
    assert!(reason("csv", &sparse).1.contains("have no training sample"));
    // A negative CSV label is no class name.
    std::fs::write(sparse.join("train.csv"), "label,p0\n0,3\n-1,4\n").unwrap();
    assert!(reason("csv", &sparse).1.contains("negative"));
    // Image folder: an image in a subfolder belongs to its class (torchvision's rule), other
    // files are skipped, an empty train class is refused.
    std::fs::remove_file(&bogus).unwrap();
    let sub = img.join("train/00-T-shirt_top/more");
    std::fs::create_dir(&sub).unwrap();
    let some_png = std::fs::read_dir(img.join("train/00-T-shirt_top"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "png"))
        .unwrap();
    std::fs::copy(some_png, sub.join("99.png")).unwrap();
    std::fs::write(img.join("train/00-T-shirt_top/notes.txt"), "x").unwrap();
    let n = r
        .read_data("x", Some("image-folder"), Some(&img))
        .map(|ds| ds.train.len());
    assert_eq!(n.unwrap(), 21);
    std::fs::remove_dir_all(img.join("train/01-Trouser")).unwrap();
    std::fs::create_dir(img.join("train/01-Trouser")).unwrap();
    std::fs::remove_file(img.join("dataset.toml")).unwrap();
    std::fs::remove_dir_all(img.join("train/08-Bag")).ok();
    std::fs::remove_dir_all(img.join("test/08-Bag")).ok();
    let (path, why) = reason("image-folder", &img);
    assert!(
        path.ends_with("01-Trouser") && why.contains("without images"),
        "{why}"
    );
    // A format without a path says how to give one.
    let cfg = d.path().join("c.toml");
    std::fs::write(&cfg, "[data]\nformat = \"npy\"\n[model]\ntype = \"mlp\"\n").unwrap();
    let (code, msg) = run(&[
        "run",
        cfg.to_str().unwrap(),
        "--out",
        d.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("c.toml:2:1") && msg.contains("path"), "{msg}");
}

#[test]
fn a_run_on_an_npy_export_gives_the_idx_run_s_report() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let npy = d.path().join("fmnist-npy");
    let (code, msg) = run(&[
        "data",
        "export",
        "fashion-mnist",
        "--format",
        "npy",
        "--out",
        npy.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    let cfg = small_config(d.path(), "c.toml", "");
    let (a, b) = (d.path().join("idx"), d.path().join("npy"));
    let (code, msg) = run_quiet(&cfg, &a, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let path = format!("data.path=\"{}\"", npy.display());
    let (code, msg) = run_quiet(
        &cfg,
        &b,
        &["--set", "data.format=\"npy\"", "--set", &path],
        &[],
    );
    assert_eq!(code, 0, "{msg}");
    let report = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
    };
    let (ra, rb) = (report(&a), report(&b));
    assert_eq!(ra["accuracy_matrix"], rb["accuracy_matrix"]);
    assert_eq!(ra["metrics"], rb["metrics"]);
    assert_eq!(ra["initial_accuracy"], rb["initial_accuracy"]);
    // The class names travel with the data into the report.
    assert_eq!(
        rb["tasks"][0]["class_names"],
        serde_json::json!(["T-shirt/top", "Trouser"])
    );
    assert_eq!(ra["tasks"], rb["tasks"]);
}

#[test]
fn init_from_an_export_reproduces_the_model_and_a_pytorch_file_loads_transposed() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(d.path(), "c.toml", "");
    let run_dir = d.path().join("trained");
    let (code, msg) = run_quiet(&cfg, &run_dir, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let w = d.path().join("w.safetensors");
    let (code, msg) = run(&[
        "export",
        run_dir.to_str().unwrap(),
        "--safetensors",
        w.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    let report = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
    };
    // A new run starting from the file (the same seed, so the same test samples): its accuracy
    // before training is the exported model's after the last task.
    let init = d.path().join("init");
    let set = format!("model.init=\"{}\"", w.display());
    let (code, msg) = run_quiet(&cfg, &init, &["--set", &set], &[]);
    assert_eq!(code, 0, "{msg}");
    let (trained, started) = (report(&run_dir), report(&init));
    let last = trained["accuracy_matrix"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(started["initial_accuracy"], last);
    assert!(started.get("random_init_accuracy").is_none());
    assert_eq!(
        started["init"]["loaded"], 4,
        "two linear layers, weight and bias each"
    );
    assert_eq!(started["init"]["missing"].as_array().unwrap().len(), 0);
    assert!(trained["random_init_accuracy"] == trained["initial_accuracy"]);

    // The same weights in PyTorch's layout (burn-store's Burn-to-PyTorch adapter transposes
    // every Linear weight to [out, in]): refused as they are, taken with init_layout.
    use engram::core::burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
    let prepared = engram::core::train::trainer::prepare(
        engram::core::config::LoadedConfig::load(&cfg, std::slice::from_ref(&set)).unwrap(),
        &engram::registry(),
    )
    .unwrap();
    let (model, _) = engram::core::train::trainer::load_init(
        &prepared.cfg,
        prepared.build_model(&prepared.device).unwrap(),
    )
    .unwrap();
    let torch = d.path().join("torch.safetensors");
    let mut store = SafetensorsStore::from_file(&torch).with_to_adapter(BurnToPyTorchAdapter);
    model.save_into(&mut store).unwrap();
    let set_t = format!("model.init=\"{}\"", torch.display());
    let (code, msg) = run_quiet(&cfg, &d.path().join("t1"), &["--set", &set_t], &[]);
    assert_eq!(
        code, 2,
        "a [64, 784] weight read as [784, 64] is a shape mismatch: {msg}"
    );
    assert!(msg.contains("init") && msg.contains("pytorch"), "{msg}");
    let t2 = d.path().join("t2");
    let (code, msg) = run_quiet(
        &cfg,
        &t2,
        &["--set", &set_t, "--set", "model.init_layout=\"pytorch\""],
        &[],
    );
    assert_eq!(code, 0, "{msg}");
    assert_eq!(report(&t2)["initial_accuracy"], last);
}

#[test]
fn the_library_builder_trains_in_memory_data_and_resumes_it() {
    crate::util::require_fmnist!();
    use engram::Experiment;
    use engram::core::model::mlp::MlpParams;
    use engram::strategies::{ewc::EwcParams, replay::ReplayParams};
    let mut ds = slice(6000, 1000);
    ds.name = "in-memory".into();
    let experiment = || {
        Experiment::new()
            .dataset(ds.clone())
            .unwrap()
            .data(|d| {
                d.tasks = Some(2);
                d.classes_per_task = Some(2.into());
            })
            .model(MlpParams {
                hidden: vec![32],
                ..MlpParams::default()
            })
            .forgetting(EwcParams::default())
            .forgetting(ReplayParams {
                capacity: 50,
                ..ReplayParams::default()
            })
            .train(|t| t.checkpoint_every = Some(3))
    };
    // The typed values become the run's config, keys and all.
    let text = experiment().config_text().unwrap();
    let cfg: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(cfg["data"]["dataset"].as_str(), Some("in-memory"));
    assert_eq!(cfg["model"]["hidden"].as_array().unwrap().len(), 1);
    let types: Vec<&str> = cfg["forgetting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["ewc", "replay"]);
    assert_eq!(cfg["forgetting"][1]["capacity"].as_integer(), Some(50));

    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let full = experiment().run(&out).unwrap();
    assert!(
        full.accuracy_matrix[0][0].unwrap() > 0.8,
        "{:?}",
        full.accuracy_matrix
    );
    // Back to the second newest checkpoint (3 steps before the end), without the report: the
    // builder resumes it with the same in-memory data, to the same matrix.
    let newest = engram::core::train::checkpoint::newest_first(&out);
    assert!(newest.len() >= 2, "{newest:?}");
    std::fs::remove_dir_all(&newest[0]).unwrap();
    std::fs::remove_file(out.join("report.json")).unwrap();
    let resumed = experiment().resume(&out).unwrap();
    assert_eq!(resumed.accuracy_matrix, full.accuracy_matrix);
    // Other data under the same name (a changed normalisation) is refused, not mixed in.
    let newest = engram::core::train::checkpoint::newest_first(&out);
    std::fs::remove_dir_all(&newest[0]).unwrap();
    let mut changed = ds.clone();
    changed.train.mean = vec![0.5];
    changed.test.mean = vec![0.5];
    let other = experiment().dataset(changed).unwrap().resume(&out);
    assert!(
        matches!(&other, Err(Error::Checkpoint { message, .. }) if message.contains("other data")),
        "{other:?}"
    );
    // Without the data the run cannot be resumed, and says which dataset it misses.
    let (code, msg) = run(&["resume", out.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(msg.contains("in-memory"), "{msg}");
}
