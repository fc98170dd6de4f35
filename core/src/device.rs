//! Choosing the compute device at run time.
//!
//! `cpu` is Burn's pure-Rust flex backend (`Device::flex()`), always built. `vulkan`, `cuda` and
//! `cubecl-cpu` exist only in binaries built with the cargo features of the same names. `vulkan`
//! is Burn's wgpu runtime pinned to the Vulkan API with CubeCL's WGSL compiler: it runs on real
//! GPUs and on Mesa's software Vulkan (lavapipe), where CI exercises the GPU code path; Burn's own
//! `vulkan` feature (CubeCL's SPIR-V compiler) crashed lavapipe in its first pipeline. `cubecl-cpu` is CubeCL's CPU
//! runtime (`Device::cpu()`): the same kernels, memory pools and dtype support as the GPU
//! runtimes, compiled by LLVM for this CPU, so that the GPU code path runs without a GPU. A device is
//! probed with `Device::enumerate` before first use, because Burn panics ("no adapter found")
//! when it is absent; engram turns that into [`Error::Device`].

use crate::error::{Error, Result};
use burn::tensor::Device;

/// Device names `--device` accepts; `cuda` and `vulkan` also take an index, `cuda:1`.
pub const DEVICE_NAMES: [&str; 4] = ["cpu", "vulkan", "cuda", "cubecl-cpu"];

/// The device kinds that take an index (`cuda:N`, `vulkan:N`).
const INDEXED: [&str; 2] = ["cuda", "vulkan"];

/// A `--device` value split into its kind and index: `cuda:1` is `("cuda", Some(1))`, `cuda`
/// is `("cuda", None)` (the first device of its kind). `flex` is another name of `cpu`.
///
/// # Errors
/// A message (what [`select`] puts in its [`Error::Device`]) for an unknown kind, an index
/// that is not a whole number, or an index on a kind that has one device (`cpu:1`).
pub fn parse(name: &str) -> Result<(&str, Option<usize>), String> {
    let (kind, index) = match name.split_once(':') {
        Some((k, i)) => (k, Some(i)),
        None => (name, None),
    };
    let kind = if kind == "flex" { "cpu" } else { kind };
    if !DEVICE_NAMES.contains(&kind) {
        return Err(format!(
            "unknown device `{name}`; choose one of {} (cuda and vulkan take an index: cuda:1)",
            DEVICE_NAMES.join(", ")
        ));
    }
    let Some(index) = index else {
        return Ok((kind, None));
    };
    if !INDEXED.contains(&kind) {
        return Err(format!(
            "`{kind}` is one device and takes no index; write `{kind}` (an index goes with \
             cuda or vulkan: cuda:1)"
        ));
    }
    match index.parse::<usize>() {
        Ok(i) => Ok((kind, Some(i))),
        Err(_) => Err(format!(
            "`{index}` in `{name}` is not a device index; write {kind}:0, {kind}:1, … \
             (0 is the first {kind} device)"
        )),
    }
}

/// The device named `name` (`cpu`, `vulkan`, `cuda`, `cubecl-cpu`, or `cuda:N` / `vulkan:N`
/// for the `N`-th device of that kind, from 0), without autodiff.
///
/// # Errors
/// [`Error::Device`] for a name [`parse`] refuses, a backend not compiled into this binary, or
/// no such device on this machine (an index past the last device names how many there are).
pub fn select(name: &str) -> Result<Device> {
    let err = |message: String| Error::Device {
        device: name.to_string(),
        message,
    };
    match parse(name).map_err(err)? {
        ("cpu", _) => Ok(Device::flex()),
        ("vulkan", index) => vulkan(index).map_err(err),
        ("cuda", index) => cuda(index.unwrap_or(0)).map_err(err),
        (_, _) => cubecl_cpu().map_err(err),
    }
}

/// Makes Burn's default device the CPU (flex) for this process, unless `BURN_DEVICE` is set:
/// sets `BURN_DEVICE=flex`. Call it first thing in `main`, before any thread starts (it writes
/// the environment); the `engram` binary does.
///
/// Why: Burn picks `Device::default()` by the first backend compiled in (CUDA in a cuda build)
/// and burn-optim 0.22 materialises a restored optimiser state there
/// (`ModuleOptimizer::load_record`) before moving it to each parameter's device. In a cuda
/// build on a machine without a GPU, every resume from a checkpoint that holds optimiser state
/// (Adam's moments) panicked there, whatever `--device` said. Flex is always present, and the
/// state moves to the parameters' device on the next step as before.
pub fn pin_default_device() {
    if std::env::var_os("BURN_DEVICE").is_none() {
        // SAFETY: called from `main` before any other thread exists (see above).
        unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    }
}

/// Runs a probe that may panic inside Burn, turning the panic into a message.
#[allow(dead_code)]
fn probe<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(prev);
    r.map_err(|_| "the backend failed to start (no adapter or driver found)".into())
}

/// Device `index` of type `t` on this machine (`what` names the kind in messages), probed.
#[allow(dead_code)]
fn nth(t: burn::tensor::DeviceType, index: usize, what: &str) -> Result<Device, String> {
    let all = probe(move || Device::enumerate(t).into_vec())?;
    let n = all.len();
    all.into_iter().nth(index).ok_or_else(|| match n {
        0 => "no such device on this machine (Device::enumerate found none)".into(),
        _ => format!(
            "no {what} device {index} on this machine: it has {n} ({what}:0 to {what}:{})",
            n - 1
        ),
    })
}

/// The Vulkan device: Burn's wgpu runtime pinned to the Vulkan API (it never falls back to
/// OpenGL), kernels compiled from WGSL (CubeCL's WGSL compiler; wgpu's naga turns them into
/// SPIR-V for the driver). `index` `None` is the default adapter (a high-performance GPU first,
/// else any, Mesa's lavapipe included); `Some(n)` the `n`-th discrete GPU wgpu lists
/// (`DeviceKind::DiscreteGpu(n)`). Each is opened once per process and kept: the runtime
/// refuses a second initialisation, and `resume`, `eval` and the tests may ask more than once.
#[cfg(feature = "vulkan")]
fn vulkan(index: Option<usize>) -> Result<Device, String> {
    use burn::tensor::DeviceKind;
    use burn::tensor::wgpu::WgpuBackend;
    use std::collections::BTreeMap;
    type Opened = BTreeMap<Option<usize>, Result<Device, String>>;
    static VULKAN: std::sync::Mutex<Opened> = std::sync::Mutex::new(BTreeMap::new());
    let mut opened = VULKAN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    opened
        .entry(index)
        .or_insert_with(|| {
            let attempt = probe(|| {
                let options = Device::wgpu_options().graphics_api(WgpuBackend::Vulkan);
                match index {
                    Some(n) => options.device_kind(DeviceKind::DiscreteGpu(n)),
                    None => options,
                }
                .init()
                .map_err(|e| e.to_string())
            });
            match attempt {
                Ok(Ok(device)) => Ok(device),
                Ok(Err(message)) if index.is_some() => Err(format!(
                    "no discrete GPU {} under Vulkan on this machine ({message}); `vulkan` \
                     alone takes the default adapter",
                    index.unwrap_or_default()
                )),
                Ok(Err(message)) => Err(format!(
                    "no Vulkan device on this machine ({message}); on a machine without a GPU, \
                     Mesa's software Vulkan serves (`apt-get install mesa-vulkan-drivers`, and \
                     XDG_RUNTIME_DIR set to a directory of mode 0700)"
                )),
                Err(message) => Err(message),
            }
        })
        .clone()
}

#[cfg(not(feature = "vulkan"))]
fn vulkan(_index: Option<usize>) -> Result<Device, String> {
    Err("this binary was built without Vulkan; build one beside this one with `CARGO_TARGET_DIR=target/vulkan cargo build --release --features vulkan` and run `target/vulkan/release/engram` (or `--features cuda,vulkan` in `target/cuda` after `scripts/setup-cuda-build.sh`: one build for both devices)".into())
}

/// CUDA device `index` (from 0, as `Device::enumerate` lists them).
#[cfg(feature = "cuda")]
fn cuda(index: usize) -> Result<Device, String> {
    nth(burn::tensor::DeviceType::Cuda, index, "cuda")
}

#[cfg(not(feature = "cuda"))]
fn cuda(_index: usize) -> Result<Device, String> {
    Err("this binary was built without CUDA; build one beside this one with `CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda` and run `target/cuda/release/engram` (Burn's CUDA build downloads a prebuilt LLVM the first time, unless `scripts/setup-cuda-build.sh` has prepared Debian's)".into())
}

#[cfg(feature = "cubecl-cpu")]
fn cubecl_cpu() -> Result<Device, String> {
    nth(burn::tensor::DeviceType::Cpu, 0, "cubecl-cpu")
}

#[cfg(not(feature = "cubecl-cpu"))]
fn cubecl_cpu() -> Result<Device, String> {
    Err("this binary was built without CubeCL's CPU runtime; build one beside this one with `CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda,cubecl-cpu` after `scripts/setup-cuda-build.sh`, and run `target/cuda/release/engram`".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_missing_devices_are_typed_errors() {
        assert!(select("cpu").is_ok());
        assert!(select("flex").is_ok());
        assert!(matches!(select("tpu"), Err(Error::Device { .. })));
        #[cfg(not(feature = "cuda"))]
        for name in ["cuda", "cuda:0", "cuda:3"] {
            let e = select(name).unwrap_err().to_string();
            assert!(e.contains("built without CUDA"), "{name}: {e}");
        }
        #[cfg(not(feature = "vulkan"))]
        assert!(
            select("vulkan:1")
                .unwrap_err()
                .to_string()
                .contains("without Vulkan")
        );
    }

    #[test]
    fn a_device_is_a_kind_and_an_optional_index() {
        assert_eq!(parse("cpu"), Ok(("cpu", None)));
        assert_eq!(parse("flex"), Ok(("cpu", None)));
        assert_eq!(parse("cuda"), Ok(("cuda", None)));
        assert_eq!(parse("cuda:0"), Ok(("cuda", Some(0))));
        assert_eq!(parse("cuda:12"), Ok(("cuda", Some(12))));
        assert_eq!(parse("vulkan:1"), Ok(("vulkan", Some(1))));
        assert_eq!(parse("cubecl-cpu"), Ok(("cubecl-cpu", None)));
        let e = |name: &str| parse(name).unwrap_err();
        assert!(e("cuda:x").starts_with("`x` in `cuda:x` is not a device index"));
        assert!(e("cuda:-1").contains("not a device index"));
        assert!(e("cuda:").contains("not a device index"));
        assert!(e("cpu:1").starts_with("`cpu` is one device and takes no index"));
        assert!(e("cubecl-cpu:0").contains("takes no index"));
        assert!(e("gpu:0").starts_with("unknown device `gpu:0`"));
        // An unknown name is refused before its index is looked at.
        assert!(e("tpu:x").starts_with("unknown device"));
    }
}
