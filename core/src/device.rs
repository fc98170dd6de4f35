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

/// Device names `--device` accepts.
pub const DEVICE_NAMES: [&str; 4] = ["cpu", "vulkan", "cuda", "cubecl-cpu"];

/// The device named `name` (`cpu`, `vulkan`, `cuda`, `cubecl-cpu`), without autodiff.
///
/// # Errors
/// [`Error::Device`] for an unknown name, a backend not compiled into this binary, or no such
/// device on this machine.
pub fn select(name: &str) -> Result<Device> {
    let err = |message: String| Error::Device {
        device: name.to_string(),
        message,
    };
    match name {
        "cpu" | "flex" => Ok(Device::flex()),
        "vulkan" => vulkan().map_err(err),
        "cuda" => cuda().map_err(err),
        "cubecl-cpu" => cubecl_cpu().map_err(err),
        other => Err(err(format!(
            "unknown device `{other}`; choose one of {}",
            DEVICE_NAMES.join(", ")
        ))),
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

/// The first device of type `t` on this machine, probed.
#[allow(dead_code)]
fn first(t: burn::tensor::DeviceType) -> Result<Device, String> {
    probe(move || Device::enumerate(t).into_vec().into_iter().next())?
        .ok_or_else(|| "no such device on this machine (Device::enumerate found none)".into())
}

/// The Vulkan device: Burn's wgpu runtime pinned to the Vulkan API (it never falls back to
/// OpenGL), kernels compiled from WGSL (CubeCL's WGSL compiler; wgpu's naga turns them into
/// SPIR-V for the driver). Opened once per process and kept: the runtime refuses a second
/// initialisation, and `resume`, `eval` and the tests may ask more than once.
#[cfg(feature = "vulkan")]
fn vulkan() -> Result<Device, String> {
    use burn::tensor::wgpu::WgpuBackend;
    static VULKAN: std::sync::OnceLock<Result<Device, String>> = std::sync::OnceLock::new();
    VULKAN
        .get_or_init(|| {
            let opened = probe(|| {
                Device::wgpu_options()
                    .graphics_api(WgpuBackend::Vulkan)
                    .init()
                    .map_err(|e| e.to_string())
            });
            match opened {
                Ok(Ok(device)) => Ok(device),
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
fn vulkan() -> Result<Device, String> {
    Err("this binary was built without Vulkan; build one beside this one with `CARGO_TARGET_DIR=target/vulkan cargo build --release --features vulkan` and run `target/vulkan/release/engram` (or `--features cuda,vulkan` in `target/cuda` after `scripts/setup-cuda-build.sh`: one build for both devices)".into())
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device, String> {
    first(burn::tensor::DeviceType::Cuda)
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device, String> {
    Err("this binary was built without CUDA; build one beside this one with `CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda` and run `target/cuda/release/engram` (Burn's CUDA build downloads a prebuilt LLVM the first time, unless `scripts/setup-cuda-build.sh` has prepared Debian's)".into())
}

#[cfg(feature = "cubecl-cpu")]
fn cubecl_cpu() -> Result<Device, String> {
    first(burn::tensor::DeviceType::Cpu)
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
        assert!(matches!(select("tpu"), Err(Error::Device { .. })));
        #[cfg(not(feature = "cuda"))]
        assert!(matches!(select("cuda"), Err(Error::Device { .. })));
    }
}
