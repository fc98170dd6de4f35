//! Runtime plugins: the example plugins load from their .so files and run, a penalty computed
//! inside a plugin backpropagates exactly like the host's, and every loader failure is a typed
//! error with the host alive (negative fixtures: `plugins/fixture`, plus copies of it whose
//! declaration is rewritten on disk).
//!
//! The libraries are built by `cargo build --release --workspace` (the README's test command
//! runs it first); these tests never start a nested cargo build.

use crate::util::{engram, fmnist_dir, output, run, run_quiet, small_config};
use engram::core::Error;
use engram::core::burn::optim::GradientsParams;
use engram::core::burn::tensor::{Tensor, TensorData};
use engram::core::config::LoadedConfig;
use engram::core::plugin::{self, PluginError};
use engram::core::strategy::{BatchContext, Controls, Position, StateTensor, StrategyState};
use engram::core::train::trainer::{self, RunOptions};
use std::path::{Path, PathBuf};

/// A plugin library built next to the `engram` binary (`target/release/lib<name>.so`).
fn plugin_lib(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_engram")).parent().unwrap();
    let p = dir.join(format!("lib{name}.so"));
    assert!(
        p.is_file(),
        "{} is missing: build the plugins first with `cargo build --release --workspace`",
        p.display()
    );
    p
}

/// A 2-task Permuted-FMNIST slice (domain-incremental) with `extra` appended.
fn permuted_config(dir: &Path, name: &str, plugins: &[&Path], extra: &str) -> PathBuf {
    let _ = fmnist_dir();
    let list: Vec<String> = plugins
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    let text = format!(
        "plugins = [{}]\n[run]\nseed = 0\n[data]\ndataset = \"fashion-mnist\"\n\
         scenario = \"domain-incremental\"\ntasks = 2\nsubsample = 3000\ntest_subsample = 500\n\
         [model]\ntype = \"mlp\"\nhidden = [128]\n[optimizer]\ntype = \"sgd\"\nlr = 0.05\n\
         momentum = 0.9\n[train]\nbatch_size = 64\n{extra}",
        list.join(", ")
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn run_in_process(cfg: &Path, out: &Path) -> engram::core::train::report::Report {
    let cfg = LoadedConfig::load(cfg, &[]).unwrap();
    let p = trainer::prepare(cfg, &engram::registry()).unwrap();
    trainer::run(
        p,
        &RunOptions {
            out: out.to_path_buf(),
            progress: false,
        },
    )
    .unwrap()
}

#[test]
fn example_plugins_load_and_si_keeps_more_of_the_old_task_than_naive() {
    crate::util::require_fmnist!();
    let si = plugin_lib("synaptic_intelligence");
    let cosine = plugin_lib("cosine_warmup");
    let d = tempfile::tempdir().unwrap();
    let sched = "[[scheduler]]\ntype = \"cosine-warmup\"\nwarmup_steps = 10\n";
    let naive = permuted_config(d.path(), "naive.toml", &[&cosine], sched);
    let with_si = permuted_config(
        d.path(),
        "si.toml",
        &[&si, &cosine],
        &format!("{sched}[[forgetting]]\ntype = \"si\"\nc = 30.0\n"),
    );
    let a = run_in_process(&naive, &d.path().join("naive"));
    let b = run_in_process(&with_si, &d.path().join("si"));
    let old = |r: &engram::core::train::report::Report| r.accuracy_matrix[1][0].unwrap();
    assert!(
        old(&b) > old(&a) + 0.02,
        "task 0 after task 1: SI {:.3} vs naive {:.3}",
        old(&b),
        old(&a)
    );
    // The scheduler plugin shaped the learning rate: warm-up from lr/10 at the first step.
    let steps = std::fs::read_to_string(d.path().join("si/steps.csv")).unwrap();
    assert!(steps.lines().count() > 2, "{steps}");
    // run.json records each plugin with its build id and checksum.
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("si/run.json")).unwrap()).unwrap();
    let recorded = run["plugins"].as_array().unwrap();
    assert_eq!(recorded.len(), 2, "{run}");
    assert_eq!(recorded[0]["build_id"], plugin::BUILD_ID);
    assert_eq!(recorded[0]["sha256"].as_str().unwrap().len(), 64);
}

/// One copy of Burn: a penalty computed inside the SI plugin on the host's tracked parameters
/// gives bit-for-bit the gradients of the same penalty computed here, in the host.
#[test]
fn penalty_in_plugin_backpropagates_like_the_host() {
    crate::util::require_fmnist!();
    let si = plugin_lib("synaptic_intelligence");
    let d = tempfile::tempdir().unwrap();
    let cfg = permuted_config(
        d.path(),
        "si.toml",
        &[&si],
        "[[forgetting]]\ntype = \"si\"\nc = 0.7\nupdate = \"gradient\"\n",
    );
    let cfg = LoadedConfig::load(&cfg, &[]).unwrap();
    let mut p = trainer::prepare(cfg, &engram::registry()).unwrap();
    let ad = p.device.clone().autodiff();
    let model = p.build_model(&ad).unwrap();
    // Known importance and anchor for every parameter.
    let mut state = StrategyState::default();
    let mut host_terms = Vec::new();
    for (k, (info, theta)) in model.param_values().into_iter().enumerate() {
        let n = info.numel();
        let omega: Vec<f32> = (0..n)
            .map(|i| 0.5 + ((i + k) as f32 * 0.37).sin().abs())
            .collect();
        let anchor: Vec<f32> = (0..n)
            .map(|i| ((i * 7 + k) as f32 * 0.11).cos() * 0.1)
            .collect();
        for (group, v) in [("omega", &omega), ("anchor", &anchor)] {
            state.tensors.insert(
                format!("{group}/{}", info.path),
                StateTensor {
                    shape: vec![n],
                    values: v.clone(),
                },
            );
        }
        let o = Tensor::<1>::from_data(TensorData::new(omega, [n]), &p.device);
        let a = Tensor::<1>::from_data(TensorData::new(anchor, [n]), &p.device);
        let diff = theta - a;
        host_terms.push((diff.clone() * diff * o).sum());
    }
    let host = host_terms
        .into_iter()
        .reduce(|a, b| a + b)
        .unwrap()
        .mul_scalar(0.7);
    p.forgetting[0].load_state(state, &p.device).unwrap();
    let controls = Controls {
        lr: 0.05,
        reg_scale: 1.0,
        replay_ratio: None,
        replay_delta: 0.0,
    };
    let position = Position::default();
    let bcx = BatchContext {
        position: &position,
        controls: &controls,
        stream: &p.stream,
        device: &ad,
        seed: 0,
    };
    let in_plugin = p.forgetting[0].penalty(&model, &bcx).expect("a penalty");
    let value = |t: &Tensor<1>| t.clone().into_scalar::<f32>();
    assert_eq!(value(&in_plugin), value(&host));
    assert!(value(&host) > 0.0);
    let g_plugin = GradientsParams::from_grads(in_plugin.backward(), &model);
    let g_host = GradientsParams::from_grads(host.backward(), &model);
    let flat = |g: &GradientsParams| -> Vec<Vec<f32>> {
        model
            .flat_grads(g)
            .into_iter()
            .map(|(_, t)| t.into_data().try_to_vec::<f32>().unwrap())
            .collect()
    };
    let (a, b) = (flat(&g_plugin), flat(&g_host));
    assert_eq!(
        a.len(),
        model.params().len(),
        "every parameter got a gradient"
    );
    assert_eq!(a, b, "gradients through the plugin differ from the host's");
    assert!(a.iter().flatten().any(|v| *v != 0.0));
}

/// A copy of `src` at `dst` whose declaration is replaced by `patch(bytes)`.
fn patched_copy(src: &Path, dst: &Path, patch: impl FnOnce(&mut [u8])) {
    use object::{Object, ObjectSection};
    let mut bytes = std::fs::read(src).unwrap();
    let (offset, size) = {
        let file = object::File::parse(&*bytes).unwrap();
        let s = file.section_by_name(plugin::SECTION).unwrap();
        s.file_range().unwrap()
    };
    patch(&mut bytes[offset as usize..(offset + size) as usize]);
    std::fs::write(dst, bytes).unwrap();
}

/// Rewrites a declaration's build id (offset 12: length, 16: bytes).
fn set_build_id(decl: &mut [u8], id: &str) {
    decl[12..16].copy_from_slice(&(id.len() as u32).to_ne_bytes());
    decl[16..16 + plugin::BUILD_ID_CAP].fill(0);
    decl[16..16 + id.len()].copy_from_slice(id.as_bytes());
}

/// `engram list --plugin LIB` with `env`; returns exit code and output.
fn list_with(lib: &Path, env: &[(&str, &str)]) -> (i32, String) {
    let mut c = engram();
    c.args(["list", "--plugin", lib.to_str().unwrap()]);
    for (k, v) in env {
        c.env(k, v);
    }
    output(c.output().unwrap())
}

fn assert_refused(code: i32, msg: &str, needle: &str) {
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(needle), "expected `{needle}` in: {msg}");
    assert!(
        !msg.contains("internal error") && !msg.contains("panicked at"),
        "{msg}"
    );
}

#[test]
fn every_loader_failure_is_a_typed_error_and_refused_libraries_never_run() {
    let fixture = plugin_lib("engram_plugin_fixture");
    let d = tempfile::tempdir().unwrap();
    let marker = d.path().join("constructor-ran");
    let m = marker.to_str().unwrap();

    // Typed variants, in-process.
    let missing = plugin::load(&d.path().join("absent.so")).unwrap_err();
    assert!(matches!(missing, PluginError::Missing { .. }), "{missing}");
    let text = d.path().join("text.so");
    std::fs::write(&text, "not a library").unwrap();
    assert!(matches!(
        plugin::load(&text),
        Err(PluginError::NotSharedLibrary { .. })
    ));
    let core = plugin_lib("engram_core");
    assert!(matches!(
        plugin::read_declaration(&core),
        Err(PluginError::NoDeclaration { .. })
    ));

    // Through the binary: exit code 2, the message and hint, no abort.
    let (code, msg) = list_with(&d.path().join("absent.so"), &[]);
    assert_refused(code, &msg, "no such file");
    let (code, msg) = list_with(&text, &[]);
    assert_refused(code, &msg, "not a shared library");
    let (code, msg) = list_with(&core, &[]);
    assert_refused(code, &msg, "no engram plugin declaration");

    // The marker works: loading the real fixture runs its constructor.
    let (code, msg) = list_with(&fixture, &[("ENGRAM_FIXTURE_MARKER", m)]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("fixture-panic"), "{msg}");
    assert!(
        marker.is_file(),
        "the fixture's constructor should have run"
    );
    std::fs::remove_file(&marker).unwrap();

    // Another ABI version: refused before loading.
    let abi = d.path().join("libabi.so");
    patched_copy(&fixture, &abi, |decl| {
        decl[8..12].copy_from_slice(&99u32.to_ne_bytes())
    });
    let (code, msg) = list_with(&abi, &[("ENGRAM_FIXTURE_MARKER", m)]);
    assert_refused(
        code,
        &msg,
        &format!(
            "ABI version 99, this engram expects {}",
            plugin::ABI_VERSION
        ),
    );
    assert!(!marker.exists(), "a refused plugin's constructor ran");
    assert!(matches!(
        plugin::load(&abi),
        Err(PluginError::AbiMismatch { found: 99, .. })
    ));

    // Another profile, other features: refused before loading, both ids shown.
    for (field, other) in [
        ("profile", "profile=debug-O0"),
        ("features", "features=cuda+default"),
    ] {
        let key = format!("{field}=");
        let host_field = plugin::BUILD_ID
            .split(';')
            .find(|f| f.starts_with(&key))
            .unwrap();
        let id = plugin::BUILD_ID.replace(host_field, other);
        let lib = d.path().join(format!("lib{field}.so"));
        patched_copy(&fixture, &lib, |decl| set_build_id(decl, &id));
        let (code, msg) = list_with(&lib, &[("ENGRAM_FIXTURE_MARKER", m)]);
        assert_refused(
            code,
            &msg,
            "built for another engram build; its code was not run",
        );
        assert!(msg.contains(&id) && msg.contains(plugin::BUILD_ID), "{msg}");
        assert!(msg.contains(&format!("differs in: {field}")), "{msg}");
        assert!(!marker.exists(), "a refused plugin's constructor ran");
        match plugin::load(&lib) {
            Err(PluginError::BuildIdMismatch { plugin, host, .. }) => {
                assert_eq!(
                    (plugin.as_str(), host.as_str()),
                    (id.as_str(), plugin::BUILD_ID)
                );
            }
            other => panic!("expected BuildIdMismatch, got {:?}", other.err()),
        }
    }

    // Registration that fails, that panics, that takes a built-in's name.
    let (code, msg) = list_with(&fixture, &[("ENGRAM_FIXTURE", "register-error")]);
    assert_refused(
        code,
        &msg,
        "registration failed: the fixture refuses to register",
    );
    let (code, msg) = list_with(&fixture, &[("ENGRAM_FIXTURE", "register-panic")]);
    assert_refused(
        code,
        &msg,
        "registration failed: panicked: the fixture panics while registering",
    );
    let (code, msg) = list_with(&fixture, &[("ENGRAM_FIXTURE", "duplicate")]);
    assert_refused(
        code,
        &msg,
        "duplicate forgetting strategy `ewc`: already registered by built-in",
    );
    // Two copies of one plugin: the second names the first.
    let copy = d.path().join("libcopy.so");
    std::fs::copy(&fixture, &copy).unwrap();
    let mut c = engram();
    c.args([
        "list",
        "--plugin",
        fixture.to_str().unwrap(),
        "--plugin",
        copy.to_str().unwrap(),
    ]);
    let (code, msg) = output(c.output().unwrap());
    assert_refused(
        code,
        &msg,
        "duplicate forgetting strategy `fixture-panic`: already registered by",
    );
    assert!(msg.contains("libengram_plugin_fixture.so"), "{msg}");
}

#[test]
fn a_plugin_that_panics_mid_training_stops_the_run_with_a_typed_error_and_keeps_the_checkpoint() {
    crate::util::require_fmnist!();
    let fixture = plugin_lib("engram_plugin_fixture");
    let d = tempfile::tempdir().unwrap();
    for method in ["penalty", "after_step"] {
        let cfg = small_config(
            d.path(),
            &format!("{method}.toml"),
            &format!(
                "checkpoint_every = 4\n[[forgetting]]\ntype = \"fixture-panic\"\npanic_at_step = 6\n\
                 panic_in = \"{method}\"\nweight = 0.001\n"
            ),
        );
        let out = d.path().join(method);
        let (code, msg) = run_quiet(&cfg, &out, &["--plugin", fixture.to_str().unwrap()], &[]);
        assert!(code != 0 && code < 100, "code {code}: {msg}");
        assert!(
            msg.contains(&format!(
                "strategy `fixture-panic` panicked in `{method}`: fixture-panic: {method} at step 6"
            )),
            "{msg}"
        );
        assert!(!msg.contains("internal error"), "{msg}");
        // The failed run keeps its record: status, error and position, the steps so far.
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(r["status"], "failed", "{r}");
        assert!(
            r["failure"]["error"]
                .as_str()
                .unwrap()
                .contains("fixture-panic"),
            "{r}"
        );
        assert_eq!(r["failure"]["global_step"], 6, "{r}");
        assert!(r["metrics"]["acc"].is_null(), "{r}");
        assert!(out.join("steps.csv").is_file());
        // The checkpoint of step 4 is intact: evaluating it works.
        assert!(out.join("checkpoints/step-00000004").is_dir(), "{msg}");
        let (out_s, plugin) = (out.to_str().unwrap(), fixture.to_str().unwrap());
        let (code, msg) = run(&["eval", out_s, "--json", "--plugin", plugin]);
        assert_eq!(code, 0, "{msg}");
        assert!(msg.contains("\"accuracy\""), "{msg}");
        // Without --json, a mid-task checkpoint prints its position and every task's accuracy.
        let (code, msg) = run(&["eval", out_s, "--plugin", plugin]);
        assert_eq!(code, 0, "{msg}");
        assert!(
            msg.contains("4 step(s) of task 0") && msg.contains("T0") && msg.contains("mean"),
            "{msg}"
        );
    }
}

#[test]
fn resume_reloads_the_recorded_plugins_and_refuses_a_changed_one() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libsynaptic_intelligence.so");
    std::fs::copy(plugin_lib("synaptic_intelligence"), &lib).unwrap();
    // The plugin is named on the command line only: resume must find it in run.json.
    let cfg = small_config(
        d.path(),
        "si.toml",
        "checkpoint_every = 5\n[[forgetting]]\ntype = \"si\"\n",
    );
    let out = d.path().join("out");
    let (code, msg) = run_quiet(
        &cfg,
        &out,
        &["--plugin", lib.to_str().unwrap()],
        &[("ENGRAM_FAILPOINT", "step-12")],
    );
    assert_ne!(code, 0, "{msg}");
    let (code, msg) = output(
        engram()
            .args(["resume", out.to_str().unwrap(), "-q"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, 0, "{msg}");
    assert!(out.join("report.json").is_file());
    // A changed library is refused.
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes.push(0);
    std::fs::write(&lib, bytes).unwrap();
    let (code, msg) = output(
        engram()
            .args(["resume", out.to_str().unwrap(), "-q"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("changed since the run started"), "{msg}");
    // And the library API says the same.
    match trainer::with_recorded_plugins(&out, &engram::registry()) {
        Err(Error::Plugin(PluginError::Changed { .. })) => {}
        other => panic!("expected Changed, got {:?}", other.err()),
    }
}

/// A run whose config names its plugin (`plugins = [...]`) and whose library then moved resumes,
/// evaluates and exports with `--plugin NEW_PATH` (the same file, by SHA-256), as the hint says.
#[test]
fn a_moved_plugin_named_in_the_config_is_taken_again_with_plugin() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let old_dir = d.path().join("old");
    std::fs::create_dir(&old_dir).unwrap();
    let lib = old_dir.join("libsynaptic_intelligence.so");
    std::fs::copy(plugin_lib("synaptic_intelligence"), &lib).unwrap();
    let cfg = small_config(
        d.path(),
        "si.toml",
        "checkpoint_every = 5\n[[forgetting]]\ntype = \"si\"\n",
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("plugins = [\"old/libsynaptic_intelligence.so\"]\n{text}"),
    )
    .unwrap();
    let out = d.path().join("out");
    let (code, msg) = run_quiet(&cfg, &out, &[], &[("ENGRAM_FAILPOINT", "step-12")]);
    assert_ne!(code, 0, "{msg}");
    let moved = d.path().join("libsynaptic_intelligence.so");
    std::fs::rename(&lib, &moved).unwrap();
    let (code, msg) = run(&["resume", out.to_str().unwrap(), "-q"]);
    assert_eq!(code, 2, "without the library: {msg}");
    assert!(
        msg.contains("no such file") && msg.contains("--plugin"),
        "{msg}"
    );
    let m = moved.to_str().unwrap();
    let (code, msg) = run(&["resume", out.to_str().unwrap(), "-q", "--plugin", m]);
    assert_eq!(code, 0, "{msg}");
    let (code, msg) = run(&["eval", out.to_str().unwrap(), "--plugin", m]);
    assert_eq!(code, 0, "{msg}");
    let st = d.path().join("si.safetensors");
    let (code, msg) = run(&[
        "export",
        out.to_str().unwrap(),
        "--safetensors",
        st.to_str().unwrap(),
        "--plugin",
        m,
    ]);
    assert_eq!(code, 0, "{msg}");
}

/// The mixture-of-experts plugin of the book's last chapter: it grows one expert per task (the
/// parameter count is exact), and a run killed in the second task resumes to the same report
/// (the checkpoint's experts are re-created before its weights are loaded).
#[test]
fn moe_plugin_grows_an_expert_per_task_and_resumes_exactly() {
    crate::util::require_fmnist!();
    let moe = plugin_lib("moe_experts");
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(
        d.path(),
        "moe.toml",
        "checkpoint_every = 5\n[[forgetting]]\ntype = \"moe-experts\"\nexpert_hidden = 16\n\
             router_hidden = 8\nrouter_samples = 20\nrouter_batch = 16\n",
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("plugins = [{:?}]\n{text}", moe.display().to_string()),
    )
    .unwrap();
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let report = |dir: &Path| -> serde_json::Value {
        let mut r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
        for k in ["timings", "throughput"] {
            r.as_object_mut().unwrap().remove(k);
        }
        r
    };
    let r = report(&full);
    // Two tasks of 2 classes (10 logits): two experts 784-16-10 and a router 784-8-2.
    let expert = 784 * 16 + 16 + 16 * 10 + 10;
    let router = 784 * 8 + 8 + 8 * 2 + 2;
    assert_eq!(
        r["memory"]["parameters"],
        2 * expert + router,
        "{}",
        r["memory"]
    );
    // The first task's expert is frozen: its accuracy after task 1 is what the router makes of it,
    // and it is far above naive's 0 on a class-incremental stream.
    let after = r["accuracy_matrix"][1][0].as_f64().unwrap();
    assert!(after > 0.3, "task 0 after task 1: {after}");

    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-22")]);
    assert_ne!(code, 0, "{msg}");
    let (code, msg) = crate::util::run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    let (mut a, mut b) = (report(&full), report(&cut));
    for v in [&mut a, &mut b] {
        v["memory"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k == "parameters");
    }
    assert_eq!(a, b);
}

/// The model plugin `plugins/resnet-mini`: a run with EWC + replay + segment checkpointing names
/// it in report.json, is killed and resumed to the same report, and `eval`/`export` work on it;
/// its own keys get positioned errors.
#[test]
fn a_plugin_model_trains_resumes_evaluates_and_exports() {
    crate::util::require_fmnist!();
    let lib = plugin_lib("resnet_mini");
    let d = tempfile::tempdir().unwrap();
    let cfg = small_config(
        d.path(),
        "res.toml",
        "epochs = 4\ncheckpoint_every = 3\n[[forgetting]]\ntype = \"ewc\"\nfisher_samples = 50\n\
         [[forgetting]]\ntype = \"replay\"\ncapacity = 40\n[[memory]]\ntype = \"checkpoint\"\n",
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(
            "[model]\ntype = \"mlp\"\nhidden = [64]",
            "[model]\ntype = \"resnet-mini\"\nwidths = [4, 8]\nbn_momentum = 0.5",
        )
        .replace(
            "subsample = 1000\ntest_subsample = 400",
            "subsample = 400\ntest_subsample = 200",
        );
    std::fs::write(
        &cfg,
        format!("plugins = [{:?}]\n{text}", lib.display().to_string()),
    )
    .unwrap();
    let report = crate::resume::stable;
    let full = d.path().join("full");
    let (code, msg) = run_quiet(&cfg, &full, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let r = report(&full);
    assert_eq!(r["config"]["model"]["type"], "resnet-mini");
    assert_eq!(r["config"]["model"]["widths"], serde_json::json!([4, 8]));
    // The first task is learned (2 classes: chance is 0.5): 4 epochs of 7 steps, and running
    // statistics that keep up with them (`bn_momentum`, see the plugin's docs).
    let first = r["accuracy_matrix"][0][0].as_f64().unwrap();
    assert!(first > 0.6, "task 0 right after training: {first}");

    let cut = d.path().join("cut");
    let (code, msg) = run_quiet(&cfg, &cut, &[], &[("ENGRAM_FAILPOINT", "step-5")]);
    assert_ne!(code, 0, "{msg}");
    let (code, msg) = run(&["resume", cut.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{msg}");
    assert_eq!(report(&full), report(&cut));

    let (code, msg) = run(&["eval", full.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    let st = d.path().join("res.safetensors");
    let (code, msg) = run(&[
        "export",
        full.to_str().unwrap(),
        "--safetensors",
        st.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    assert!(std::fs::metadata(&st).unwrap().len() > 4 * 100);

    // Its own keys: a typo and a bad value are positioned errors, before anything is written.
    for (bad, want) in [
        ("widths = [4, 8]\nwidht = 3", "unknown field `widht`"),
        ("widths = [0]", "1 to 4 stages"),
        ("bn_momentum = 0.0", "outside (0, 1]"),
    ] {
        let f = d.path().join("bad.toml");
        std::fs::write(
            &f,
            std::fs::read_to_string(&cfg)
                .unwrap()
                .replace("widths = [4, 8]\nbn_momentum = 0.5", bad),
        )
        .unwrap();
        let out = d.path().join("bad-out");
        let (code, msg) = run_quiet(&f, &out, &[], &[]);
        assert_eq!(code, 2, "{msg}");
        assert!(msg.contains(want) && msg.contains("bad.toml:"), "{msg}");
        assert!(!out.exists());
    }
}

/// The leak alarm on a real run with a strategy that really leaks (`fixture-leak` keeps host
/// copies of batches): growth within a task is raised in that task, growth from task to task
/// (each task flat once started, so no per-task baseline sees it) is raised across tasks,
/// `on_leak = "stop"` ends the run with the summary, and the same run keeping nothing raises
/// nothing.
#[test]
fn the_leak_alarm_catches_a_leaking_strategy_within_and_across_tasks() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let fixture = plugin_lib("engram_plugin_fixture");
    let config = |name: &str, keep: &str, copies: usize, extra: &str| {
        let text = format!(
            "plugins = [{:?}]\n[run]\nseed = 0\n[data]\ndataset = \"fashion-mnist\"\ntasks = 3\n\
             classes_per_task = 2\nsubsample = 1500\ntest_subsample = 300\n[model]\ntype = \"mlp\"\n\
             hidden = [64]\n[optimizer]\ntype = \"sgd\"\nlr = 0.05\n[train]\nbatch_size = 64\n{extra}\
             [[forgetting]]\ntype = \"fixture-leak\"\nkeep = \"{keep}\"\ncopies = {copies}\n",
            fixture.to_str().unwrap()
        );
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let events = |out: &Path| -> Vec<(u64, String)> {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "leak")
            .map(|e| {
                (
                    e["task"].as_u64().unwrap(),
                    e["message"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let go = |cfg: &Path, out: &str| {
        let out = d.path().join(out);
        let (code, msg) = crate::util::run_quiet(cfg, &out, &[], &[]);
        (code, msg, out)
    };

    // Keeping nothing: no alarm.
    let (code, msg, out) = go(&config("none.toml", "every-step", 0, ""), "none");
    assert_eq!(code, 0, "{msg}");
    assert_eq!(events(&out), vec![]);

    // Every step: the first task's own growth is raised in task 0.
    let (code, msg, out) = go(&config("every.toml", "every-step", 64, ""), "every");
    assert_eq!(code, 0, "{msg}");
    let ev = events(&out);
    assert!(
        ev.iter().any(|(t, m)| *t == 0
            && m.starts_with("memory grew from ")
            && m.contains("(step 3 of the task)")),
        "{ev:?}"
    );

    // The first steps of each task only: flat within every task, growing across them.
    let (code, msg, out) = go(&config("start.toml", "task-start", 128, ""), "start");
    assert_eq!(code, 0, "{msg}");
    let ev = events(&out);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(ev[0].0 >= 1, "{ev:?}");
    assert!(
        ev[0].1.starts_with("memory grew from task to task: ")
            && ev[0].1.contains("at the same step of task 0"),
        "{ev:?}"
    );
    assert!(msg.contains("warning: leak alarm at task "), "{msg}");

    // on_leak = "stop" ends the run there, with the summary, and its record has the event.
    let (code, msg, stopped) = go(
        &config("stop.toml", "task-start", 128, "on_leak = \"stop\"\n"),
        "stop",
    );
    assert_eq!(code, 1, "{msg}");
    assert!(
        msg.contains("leak alarm (on_leak = \"stop\") at task ")
            && msg.contains("memory grew from task to task"),
        "{msg}"
    );
    let ev = events(&stopped);
    assert_eq!(ev.len(), 1, "{ev:?}");
}

/// A copy of `src` at `dst` whose section `name` is replaced by `patch(bytes)`.
fn section_patched_copy(src: &Path, dst: &Path, name: &str, patch: impl FnOnce(&mut [u8])) {
    use object::{Object, ObjectSection};
    let mut bytes = std::fs::read(src).unwrap();
    let (offset, size) = {
        let file = object::File::parse(&*bytes).unwrap();
        let s = file.section_by_name(name).unwrap();
        s.file_range().unwrap()
    };
    patch(&mut bytes[offset as usize..(offset + size) as usize]);
    std::fs::write(dst, bytes).unwrap();
}

#[test]
fn issue32_plugin_with_garbage_code_is_refused_without_a_crash() {
    let fixture = plugin_lib("engram_plugin_fixture");
    let d = tempfile::tempdir().unwrap();
    // Its code is garbage (every instruction `ud2`), its declaration intact: loading it in
    // this process would kill it with SIGILL. The trial load in a child takes the signal.
    let code_garbage = d.path().join("libgarbage.so");
    section_patched_copy(&fixture, &code_garbage, ".text", |t| {
        for pair in t.chunks_mut(2) {
            pair.copy_from_slice(&[0x0f, 0x0b][..pair.len()]);
        }
    });
    plugin::read_declaration(&code_garbage).expect("the declaration is intact");
    let (code, msg) = list_with(&code_garbage, &[]);
    assert_refused(code, &msg, "crashed while loading in a trial process");
    assert!(msg.contains(&code_garbage.display().to_string()), "{msg}");
    assert!(msg.contains("killed by signal"), "{msg}");
    // A damaged symbol hash table (the dynamic loader's assertion before): refused, exit 2,
    // whether the loader reports it or the trial load dies of it.
    let hash_garbage = d.path().join("libhash.so");
    section_patched_copy(&fixture, &hash_garbage, ".gnu.hash", |t| t.fill(0xa5));
    let (code, msg) = list_with(&hash_garbage, &[]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains(&hash_garbage.display().to_string()), "{msg}");
    // The intact plugin still loads through the trial.
    let (code, msg) = list_with(&fixture, &[]);
    assert_eq!(code, 0, "{msg}");
    assert!(msg.contains("fixture-panic"), "{msg}");
}
