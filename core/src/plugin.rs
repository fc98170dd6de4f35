//! Runtime plugins: strategies loaded from shared libraries.
//!
//! A plugin is a Rust crate of type `dylib` that depends on `engram-core` (and reaches Burn only
//! through its re-export, [`crate::burn`]) and ends with
//!
//! ```ignore
//! fn register(r: &mut engram_core::plugin::Registrar) -> engram_core::Result<()> {
//!     r.add(engram_core::registration!(forgetting "si", "synaptic intelligence", SiParams, build));
//!     Ok(())
//! }
//! engram_core::declare_plugin!(register);
//! ```
//!
//! # One copy of Burn
//!
//! engram-core is itself a Rust `dylib` (`libengram_core.so`), linked by the `engram` binary and
//! by every plugin, so the process holds one copy of engram-core and of Burn. That matters:
//! burn-autodiff keeps its graph bookkeeping in process-global statics, and a `cdylib` plugin
//! (which links its own copy of everything) would run tensor ops on a second, disconnected
//! autodiff. The integration test `plugins::penalty_in_plugin_backpropagates_like_the_host`
//! shows a penalty computed inside a loaded plugin giving exactly the host's gradients.
//!
//! # The checks, in order, before any plugin code runs
//!
//! Loading a library runs its constructors, so [`load`] first reads the plugin's
//! [`Declaration`] from the file itself (the ELF section [`SECTION`], parsed with the `object`
//! crate): the magic bytes, then [`ABI_VERSION`], then the [`BUILD_ID`] (rustc version,
//! engram-core version, Burn version, target, features, profile), which must equal the host's.
//! Only then is the library opened, with immediate binding (`RTLD_NOW`: an unresolved symbol is
//! an error now, not a crash later), and its `engram_plugin_register` function called. Plugins
//! register only through that function (no `inventory`), handing their factories to a
//! [`Registrar`]; panics inside it are caught in the plugin's frame and returned as errors.
//!
//! # At run time
//!
//! Every strategy a plugin builds is wrapped in a guard that catches a panic in any of its
//! methods and turns it into [`PluginError::Panicked`] (with the plugin's path, the strategy and
//! the method): the run stops with that typed error, the last checkpoint stays intact and the
//! host process does not abort. Libraries are never unloaded: every factory and strategy keeps an
//! [`Arc`] to its library, and the loader keeps one more for the life of the process.
//!
//! Loading a plugin runs its code with the host's rights: load only what you trust.

use crate::component::Registration;
use crate::error::Error;
use crate::strategy::{
    BatchContext, Controls, ForgettingStrategy, MemoryLayer, MemoryStrategy, Next, Position,
    Scheduler, StepContext, StepOutcome, StepRequest, StrategyState, TaskContext, TaskInfo,
};
use crate::{data::stream::Batch, model::Model};
use burn::tensor::{Device, Tensor};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The version of the loader/plugin contract (the [`Declaration`] layout, the register
/// function's signature, the [`Registrar`] and the strategy traits' methods, whose vtables
/// a plugin's objects carry). Read first; a plugin with another is refused.
/// 2: `ForgettingStrategy::task_end_weights`.
pub const ABI_VERSION: u32 = 2;

/// The ELF section holding a plugin's [`Declaration`].
pub const SECTION: &str = ".engram_plugin";

/// The first bytes of every [`Declaration`].
pub const MAGIC: [u8; 8] = *b"ENGRAMPL";

/// The exported function the loader calls after the checks.
pub const REGISTER_SYMBOL: &str = "engram_plugin_register";

/// Capacity of [`Declaration::build_id`] (bytes).
pub const BUILD_ID_CAP: usize = 512;

/// Capacity of [`Declaration::name`] (bytes).
pub const NAME_CAP: usize = 64;

/// What a plugin must have been built with to be loaded into this host: `;`-separated
/// `key=value` fields (rustc version, engram-core version, Burn version, target triple, the
/// enabled features of engram-core, cargo profile and optimisation level, and a hash of
/// engram-core's sources, so that a plugin left over from before a change to engram-core is
/// refused rather than loaded with another trait layout). Built from the
/// toolchain and settings that compiled engram-core; a plugin embeds the value of the
/// engram-core it was compiled against, so any difference (another toolchain, another
/// Cargo.lock resolving another Burn, `--features cuda`, a debug build) is caught before its code
/// runs.
pub const BUILD_ID: &str = concat!(
    "rustc=",
    env!("ENGRAM_RUSTC_VERSION"),
    ";engram-core=",
    env!("CARGO_PKG_VERSION"),
    ";burn=",
    crate::burn_version!(),
    ";target=",
    env!("ENGRAM_TARGET"),
    ";features=",
    env!("ENGRAM_FEATURES"),
    ";profile=",
    env!("ENGRAM_PROFILE"),
    ";source=",
    env!("ENGRAM_SOURCE_HASH"),
);

/// A plugin's declaration: plain data (no pointers, so no relocations) that the loader reads
/// from the file's [`SECTION`] before opening it. Layout (`repr(C)`, native endianness):
/// `magic` [8 bytes] · `abi_version` u32 · `build_id_len` u32 · `build_id` [[`BUILD_ID_CAP`]
/// bytes] · `name_len` u32 · `name` [[`NAME_CAP`] bytes]; 596 bytes. Exported by
/// [`declare_plugin!`](crate::declare_plugin).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Declaration {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`ABI_VERSION`] of the engram-core the plugin was built against.
    pub abi_version: u32,
    /// Length of the build id in bytes.
    pub build_id_len: u32,
    /// [`BUILD_ID`] of that engram-core, UTF-8, zero-padded.
    pub build_id: [u8; BUILD_ID_CAP],
    /// Length of the name in bytes.
    pub name_len: u32,
    /// The plugin crate's name, UTF-8, zero-padded (truncated to [`NAME_CAP`] bytes).
    pub name: [u8; NAME_CAP],
}

const fn copy_into<const N: usize>(s: &str) -> ([u8; N], u32) {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < b.len() && i < N {
        out[i] = b[i];
        i += 1;
    }
    (out, i as u32)
}

impl Declaration {
    /// The declaration of a plugin named `name`, built against this engram-core.
    pub const fn new(name: &str) -> Self {
        let (build_id, build_id_len) = copy_into::<BUILD_ID_CAP>(BUILD_ID);
        let (name, name_len) = copy_into::<NAME_CAP>(name);
        Self {
            magic: MAGIC,
            abi_version: ABI_VERSION,
            build_id_len,
            build_id,
            name_len,
            name,
        }
    }

    /// The size of the declaration in bytes (596).
    pub const SIZE: usize = std::mem::size_of::<Declaration>();
}

/// A declaration as read from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclarationInfo {
    /// The plugin's ABI version.
    pub abi_version: u32,
    /// The plugin's build id.
    pub build_id: String,
    /// The plugin crate's name.
    pub name: String,
}

/// Why a plugin could not be loaded or failed while running (defined with the other errors,
/// in [`crate::error`]).
pub use crate::error::PluginError;

/// Collects a plugin's registrations inside its register function.
#[derive(Default)]
pub struct Registrar {
    entries: Vec<Registration>,
    error: Option<String>,
}

impl Registrar {
    /// Offers a strategy factory to the host (see [`registration!`](crate::registration)). The
    /// host adds it after the register function returns; a name that is already taken is a
    /// [`PluginError::Duplicate`].
    pub fn add(&mut self, registration: Registration) {
        self.entries.push(registration);
    }
}

thread_local! {
    static IN_PLUGIN: Cell<usize> = const { Cell::new(0) };
    static LAST_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Marks the current thread as running plugin code while alive.
struct PluginCall;

impl PluginCall {
    fn enter() -> Self {
        IN_PLUGIN.with(|c| c.set(c.get() + 1));
        LAST_LOCATION.with(|l| l.borrow_mut().take());
        PluginCall
    }
}

impl Drop for PluginCall {
    fn drop(&mut self) {
        IN_PLUGIN.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// For a panic hook: when the panic happens inside plugin code (which engram catches and reports
/// as a typed error), records its location for that error and returns `true`, so the hook can
/// stay quiet; returns `false` for any other panic.
pub fn note_plugin_panic(info: &std::panic::PanicHookInfo<'_>) -> bool {
    if IN_PLUGIN.with(Cell::get) == 0 {
        return false;
    }
    let loc = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()));
    LAST_LOCATION.with(|l| *l.borrow_mut() = loc);
    true
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_string()
    };
    match LAST_LOCATION.with(|l| l.borrow_mut().take()) {
        Some(loc) => format!("{msg} (at {loc})"),
        None => msg,
    }
}

/// Runs a plugin's register function with panics caught (called by the code
/// [`declare_plugin!`](crate::declare_plugin) generates; not for direct use). Returns `0` on
/// success, `1` when `f` returned an error and `2` when it panicked; the message is kept in the
/// registrar.
///
/// # Safety
/// `registrar` must be the `*mut Registrar` the loader passed in.
#[doc(hidden)]
pub unsafe fn guarded_register(
    registrar: *mut c_void,
    f: fn(&mut Registrar) -> crate::Result<()>,
) -> i32 {
    // SAFETY: the loader passes a live, exclusive `Registrar` (build ids match, so the layout
    // is the host's).
    let reg = unsafe { &mut *registrar.cast::<Registrar>() };
    let _call = PluginCall::enter();
    match catch_unwind(AssertUnwindSafe(|| f(reg))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            reg.error = Some(e.to_string());
            1
        }
        Err(p) => {
            reg.error = Some(format!("panicked: {}", panic_message(&*p)));
            2
        }
    }
}

/// Exports a plugin's [`Declaration`] and register function. `$register` is a
/// `fn(&mut Registrar) -> engram_core::Result<()>`.
#[macro_export]
macro_rules! declare_plugin {
    ($register:path) => {
        /// This plugin's declaration, read by engram's loader before the library is opened.
        #[used]
        #[unsafe(no_mangle)]
        #[unsafe(link_section = ".engram_plugin")]
        pub static ENGRAM_PLUGIN_DECLARATION: $crate::plugin::Declaration =
            $crate::plugin::Declaration::new(env!("CARGO_PKG_NAME"));

        /// Hands this plugin's strategies to engram's registrar (called once by the loader,
        /// after the declaration's checks).
        ///
        /// # Safety
        /// `registrar` must point to the loader's `Registrar`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn engram_plugin_register(registrar: *mut ::std::ffi::c_void) -> i32 {
            // SAFETY: forwarded from the loader's contract.
            unsafe { $crate::plugin::guarded_register(registrar, $register) }
        }
    };
}

/// [`PluginError::Missing`] for a file that does not exist, else [`PluginError::Unreadable`].
fn io_error(path: &Path, e: std::io::Error) -> PluginError {
    if e.kind() == std::io::ErrorKind::NotFound {
        PluginError::Missing {
            path: path.to_path_buf(),
        }
    } else {
        PluginError::Unreadable {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// The largest file read as a plugin, bytes (1 GiB): a plugin built with the `cuda` feature
/// links LLVM statically and reaches a few hundred MiB; anything larger (or endless, such as
/// `/dev/zero`) is refused before it is read.
pub const MAX_PLUGIN_BYTES: u64 = 1 << 30;

/// Reads a plugin file whole, bounded: a path that is not a regular file (a device, a FIFO, a
/// directory) or is larger than [`MAX_PLUGIN_BYTES`] is refused before or while reading.
///
/// # Errors
/// [`PluginError::Missing`], [`PluginError::Unreadable`], or [`PluginError::NotSharedLibrary`]
/// for a file that is not regular or too large.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, PluginError> {
    use std::io::Read as _;
    let not_lib = |reason: String| PluginError::NotSharedLibrary {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(not_lib("not a regular file".into()));
    }
    let too_big = |n: u64| {
        not_lib(format!(
            "{n} bytes, over the {MAX_PLUGIN_BYTES}-byte limit for a plugin"
        ))
    };
    if meta.len() > MAX_PLUGIN_BYTES {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_PLUGIN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > MAX_PLUGIN_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads the declaration of the shared library at `path` without loading it.
///
/// # Errors
/// [`PluginError::Missing`], [`PluginError::Unreadable`], [`PluginError::NotSharedLibrary`],
/// [`PluginError::NoDeclaration`] (also for a section too short or without the magic bytes).
pub fn read_declaration(path: &Path) -> Result<DeclarationInfo, PluginError> {
    let bytes = read_bounded(path)?;
    declaration_from_bytes(path, &bytes)
}

fn declaration_from_bytes(path: &Path, bytes: &[u8]) -> Result<DeclarationInfo, PluginError> {
    use object::{Object, ObjectKind, ObjectSection};
    let not_lib = |reason: String| PluginError::NotSharedLibrary {
        path: path.to_path_buf(),
        reason,
    };
    let file = object::File::parse(bytes).map_err(|e| not_lib(e.to_string()))?;
    if file.kind() != ObjectKind::Dynamic {
        return Err(not_lib(format!("an object of kind {:?}", file.kind())));
    }
    let none = || PluginError::NoDeclaration {
        path: path.to_path_buf(),
    };
    let section = file.section_by_name(SECTION).ok_or_else(none)?;
    let data = section.data().map_err(|_| none())?;
    parse_declaration(data).ok_or_else(none)
}

fn parse_declaration(d: &[u8]) -> Option<DeclarationInfo> {
    let u32_at =
        |o: usize| -> Option<u32> { Some(u32::from_ne_bytes(d.get(o..o + 4)?.try_into().ok()?)) };
    if d.get(..8)? != MAGIC {
        return None;
    }
    let abi_version = u32_at(8)?;
    let info = |len_at: usize, cap: usize| -> Option<String> {
        let len = (u32_at(len_at)? as usize).min(cap);
        Some(String::from_utf8_lossy(d.get(len_at + 4..len_at + 4 + len)?).into_owned())
    };
    // Only the magic and the ABI version are read from a plugin of another ABI.
    if abi_version != ABI_VERSION {
        return Some(DeclarationInfo {
            abi_version,
            build_id: String::new(),
            name: String::new(),
        });
    }
    Some(DeclarationInfo {
        abi_version,
        build_id: info(12, BUILD_ID_CAP)?,
        name: info(16 + BUILD_ID_CAP, NAME_CAP)?,
    })
}

/// The `;`-separated fields in which two build ids differ (`profile`, `features`, …).
pub fn build_id_differences(a: &str, b: &str) -> String {
    let fields = |s: &str| -> Vec<(String, String)> {
        s.split(';')
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (kv.to_string(), String::new()),
            })
            .collect()
    };
    let (fa, fb) = (fields(a), fields(b));
    let mut keys: Vec<&String> = fa.iter().chain(fb.iter()).map(|(k, _)| k).collect();
    keys.dedup();
    let mut out: Vec<String> = Vec::new();
    for k in keys {
        let va = fa.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str());
        let vb = fb.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str());
        if va != vb && !out.contains(k) {
            out.push(k.clone());
        }
    }
    if out.is_empty() {
        "(layout)".into()
    } else {
        out.join(", ")
    }
}

/// Checks a declaration against this host: the ABI version, then the build id.
///
/// # Errors
/// [`PluginError::AbiMismatch`], [`PluginError::BuildIdMismatch`].
pub fn check_declaration(path: &Path, d: &DeclarationInfo) -> Result<(), PluginError> {
    if d.abi_version != ABI_VERSION {
        return Err(PluginError::AbiMismatch {
            path: path.to_path_buf(),
            found: d.abi_version,
            expected: ABI_VERSION,
        });
    }
    if d.build_id != BUILD_ID {
        return Err(PluginError::BuildIdMismatch {
            path: path.to_path_buf(),
            plugin: d.build_id.clone(),
            host: BUILD_ID.to_string(),
            differs: build_id_differences(&d.build_id, BUILD_ID),
        });
    }
    Ok(())
}

/// An opened plugin library, kept alive by every factory and strategy that came from it.
pub struct Library {
    /// The library's path (canonical).
    pub path: PathBuf,
    _lib: libloading::Library,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.registrations.iter().map(|r| r.name).collect();
        write!(f, "Plugin({}, {names:?})", self.info.path.display())
    }
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Library({})", self.path.display())
    }
}

/// Every library loaded so far: never unloaded, and loaded once per canonical path.
static LOADED: Mutex<Vec<Plugin>> = Mutex::new(Vec::new());

/// What a run records about a plugin (in `run.json`) and `engram list` shows.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    /// Canonical path of the library.
    pub path: PathBuf,
    /// The plugin crate's name.
    pub name: String,
    /// Its build id (equal to the host's [`BUILD_ID`]).
    pub build_id: String,
    /// SHA-256 of the file, hex.
    pub sha256: String,
}

/// A loaded plugin: its library and the strategies it registered.
#[derive(Clone)]
pub struct Plugin {
    /// Path, name, build id and checksum.
    pub info: PluginInfo,
    /// The open library.
    pub library: Arc<Library>,
    /// What its register function handed over.
    pub registrations: Vec<Registration>,
}

/// Hex SHA-256 of a file.
///
/// # Errors
/// [`PluginError::Missing`] or [`PluginError::Unreadable`].
pub fn file_sha256(path: &Path) -> Result<String, PluginError> {
    let bytes = read_bounded(path)?;
    Ok(crate::fsutil::sha256_hex(&bytes))
}

/// Loads the plugin at `path`: reads and checks its declaration from the file, then opens it
/// with `RTLD_NOW` and calls its register function. A library already loaded (same canonical
/// path) is not opened again.
///
/// # Errors
/// Every [`PluginError`] variant but `Duplicate`, `Panicked` and `Changed`, in the order of the
/// module docs.
pub fn load(path: &Path) -> Result<Plugin, PluginError> {
    let canonical = std::fs::canonicalize(path).map_err(|e| io_error(path, e))?;
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = loaded.iter().find(|p| p.info.path == canonical) {
        return Ok(p.clone());
    }
    let bytes = read_bounded(&canonical)?;
    let decl = declaration_from_bytes(path, &bytes)?;
    check_declaration(path, &decl)?;
    let sha256 = crate::fsutil::sha256_hex(&bytes);
    drop(bytes);
    // SAFETY: the declaration says the library was built against this very engram-core (same
    // toolchain, Burn, features and profile); loading it runs its constructors, which is what
    // the user asked for by naming it.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(&canonical),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|e| PluginError::LoadFailed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let lib = libloading::Library::from(lib);
    let mut registrar = Registrar::default();
    {
        type RegisterFn = unsafe extern "C" fn(*mut c_void) -> i32;
        // SAFETY: the symbol's type is fixed by ABI_VERSION, which matched.
        let register =
            unsafe { lib.get::<RegisterFn>(REGISTER_SYMBOL.as_bytes()) }.map_err(|e| {
                PluginError::RegisterFailed {
                    path: path.to_path_buf(),
                    message: format!("no `{REGISTER_SYMBOL}` function: {e}"),
                }
            })?;
        // SAFETY: as above; the registrar outlives the call. Panics are caught inside.
        let status = unsafe { register((&raw mut registrar).cast::<c_void>()) };
        if status != 0 {
            return Err(PluginError::RegisterFailed {
                path: path.to_path_buf(),
                message: registrar
                    .error
                    .take()
                    .unwrap_or_else(|| format!("status {status}")),
            });
        }
    }
    let info = PluginInfo {
        path: canonical.clone(),
        name: decl.name,
        build_id: decl.build_id,
        sha256,
    };
    let library = Arc::new(Library {
        path: canonical.clone(),
        _lib: lib,
    });
    let plugin = Plugin {
        info,
        library,
        registrations: registrar.entries,
    };
    loaded.push(plugin.clone());
    Ok(plugin)
}

/// A fault raised out of a plugin method that cannot return an error itself (for example
/// [`ForgettingStrategy::penalty`], called inside a memory strategy's step); the trainer
/// catches it and returns the error it carries.
#[derive(Debug)]
pub struct PluginFault(pub Error);

/// Calls plugin code with panics caught.
fn guard<R>(
    lib: &Library,
    strategy: &str,
    method: &'static str,
    f: impl FnOnce() -> R,
) -> crate::Result<R> {
    let _call = PluginCall::enter();
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        Error::Plugin(PluginError::Panicked {
            path: lib.path.clone(),
            strategy: strategy.to_string(),
            method,
            message: panic_message(&*p),
        })
    })
}

/// [`guard`] for methods without a `Result`: a panic is re-raised as a [`PluginFault`] (which
/// does not run the panic hook) for the trainer to catch.
fn guard_or_fault<R>(
    lib: &Library,
    strategy: &str,
    method: &'static str,
    f: impl FnOnce() -> R,
) -> R {
    match guard(lib, strategy, method, f) {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(Box::new(PluginFault(e))),
    }
}

/// Builds a strategy through a plugin's factory with panics caught.
///
/// # Errors
/// The factory's own error, or [`PluginError::Panicked`] (method `build`).
pub(crate) fn guarded_build<R>(
    lib: &Library,
    name: &str,
    f: impl FnOnce() -> crate::Result<R>,
) -> crate::Result<R> {
    guard(lib, name, "build", f)?
}

/// A plugin's strategy behind the panic guard, holding its library.
pub struct Guarded<T: ?Sized> {
    inner: Box<T>,
    lib: Arc<Library>,
    name: String,
}

impl<T: ?Sized> Guarded<T> {
    /// Wraps `inner`, built by the plugin loaded as `lib`, registered as `name`.
    pub fn new(inner: Box<T>, lib: Arc<Library>, name: &str) -> Self {
        Self {
            inner,
            lib,
            name: name.to_string(),
        }
    }
}

impl<T: ForgettingStrategy + ?Sized> ForgettingStrategy for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn before_task(&mut self, cx: &mut TaskContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "before_task", || {
            self.inner.before_task(cx)
        })?
    }
    fn prepare_batch(&mut self, batch: Batch, cx: &BatchContext<'_>) -> crate::Result<Batch> {
        guard(&self.lib, &self.name, "prepare_batch", || {
            self.inner.prepare_batch(batch, cx)
        })?
    }
    fn penalty(&self, model: &Model, cx: &BatchContext<'_>) -> Option<Tensor<1>> {
        guard_or_fault(&self.lib, &self.name, "penalty", || {
            self.inner.penalty(model, cx)
        })
    }
    fn logit_penalty(&self, logits: &Tensor<2>, batch: &Batch) -> Option<Tensor<1>> {
        guard_or_fault(&self.lib, &self.name, "logit_penalty", || {
            self.inner.logit_penalty(logits, batch)
        })
    }
    fn after_update(&mut self, model: Model, cx: &BatchContext<'_>) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "after_update", || {
            self.inner.after_update(model, cx)
        })?
    }
    fn after_step(&mut self, cx: &StepContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "after_step", || {
            self.inner.after_step(cx)
        })?
    }
    fn rebuild_model(&self, model: Model, device: &Device) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "rebuild_model", || {
            self.inner.rebuild_model(model, device)
        })?
    }
    fn task_end_weights(&mut self, model: Model, task: &TaskInfo) -> crate::Result<Model> {
        guard(&self.lib, &self.name, "task_end_weights", || {
            self.inner.task_end_weights(model, task)
        })?
    }
    fn after_task(&mut self, cx: &mut TaskContext<'_>) -> crate::Result<()> {
        guard(&self.lib, &self.name, "after_task", || {
            self.inner.after_task(cx)
        })?
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState, device: &Device) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state, device)
        })?
    }
}

impl<T: MemoryStrategy + ?Sized> MemoryStrategy for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn layer(&self) -> MemoryLayer {
        guard_or_fault(&self.lib, &self.name, "layer", || self.inner.layer())
    }
    fn step(&mut self, req: StepRequest<'_>, next: Next<'_>) -> crate::Result<StepOutcome> {
        guard(&self.lib, &self.name, "step", || self.inner.step(req, next))?
    }
    fn report(&self) -> Option<serde_json::Value> {
        guard_or_fault(&self.lib, &self.name, "report", || self.inner.report())
    }
    fn op_level_checkpointing(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "op_level_checkpointing", || {
            self.inner.op_level_checkpointing()
        })
    }
    fn splits_batch(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "splits_batch", || {
            self.inner.splits_batch()
        })
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state)
        })?
    }
}

impl<T: Scheduler + ?Sized> Scheduler for Guarded<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn before_task(&mut self, task: &TaskInfo) {
        guard_or_fault(&self.lib, &self.name, "before_task", || {
            self.inner.before_task(task)
        })
    }
    fn controls(&mut self, position: &Position, controls: &mut Controls) {
        guard_or_fault(&self.lib, &self.name, "controls", || {
            self.inner.controls(position, controls)
        })
    }
    fn evaluate_all(&self, round: usize, rounds: usize) -> Option<bool> {
        guard_or_fault(&self.lib, &self.name, "evaluate_all", || {
            self.inner.evaluate_all(round, rounds)
        })
    }
    fn after_evaluation(
        &mut self,
        round: usize,
        matrix: &[Vec<Option<f64>>],
    ) -> crate::strategy::AnomalyAction {
        guard_or_fault(&self.lib, &self.name, "after_evaluation", || {
            self.inner.after_evaluation(round, matrix)
        })
    }
    fn may_roll_back(&self) -> bool {
        guard_or_fault(&self.lib, &self.name, "may_roll_back", || {
            self.inner.may_roll_back()
        })
    }
    fn state(&self) -> crate::Result<StrategyState> {
        guard(&self.lib, &self.name, "state", || self.inner.state())?
    }
    fn load_state(&mut self, state: StrategyState) -> crate::Result<()> {
        guard(&self.lib, &self.name, "load_state", || {
            self.inner.load_state(state)
        })?
    }
}

/// Runs `f`, turning a [`PluginFault`] raised inside it back into its error; any other panic
/// continues unwinding.
///
/// # Errors
/// The fault's error.
pub fn catch_faults<R>(f: impl FnOnce() -> crate::Result<R>) -> crate::Result<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => match payload.downcast::<PluginFault>() {
            Ok(fault) => Err(fault.0),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declaration_layout_round_trips() {
        let d = Declaration::new("my-plugin");
        assert_eq!(Declaration::SIZE, 8 + 4 + 4 + BUILD_ID_CAP + 4 + NAME_CAP);
        // SAFETY: Declaration is plain old data.
        let bytes =
            unsafe { std::slice::from_raw_parts((&raw const d).cast::<u8>(), Declaration::SIZE) };
        let info = parse_declaration(bytes).unwrap();
        assert_eq!(info.abi_version, ABI_VERSION);
        assert_eq!(info.build_id, BUILD_ID);
        assert_eq!(info.name, "my-plugin");
        assert!(parse_declaration(&bytes[..20]).is_none());
        let mut bad = bytes.to_vec();
        bad[0] = b'X';
        assert!(parse_declaration(&bad).is_none());
    }

    #[test]
    fn build_id_names_its_fields_and_differences() {
        for key in [
            "rustc=",
            "engram-core=",
            "burn=0.22.1",
            "target=",
            "features=",
            "profile=",
        ] {
            assert!(BUILD_ID.contains(key), "{BUILD_ID} lacks {key}");
        }
        let other = BUILD_ID.replace("profile=", "profile=debug-O0-was-");
        assert_eq!(build_id_differences(&other, BUILD_ID), "profile");
        let err = check_declaration(
            Path::new("x.so"),
            &DeclarationInfo {
                abi_version: ABI_VERSION + 1,
                build_id: BUILD_ID.into(),
                name: "x".into(),
            },
        )
        .unwrap_err();
        assert!(matches!(err, PluginError::AbiMismatch { found, .. } if found == ABI_VERSION + 1));
    }

    #[test]
    fn non_libraries_are_refused_before_loading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bogus.so");
        std::fs::write(&p, b"not a library").unwrap();
        assert!(matches!(
            load(&p),
            Err(PluginError::NotSharedLibrary { .. })
        ));
        assert!(matches!(
            load(&dir.path().join("absent.so")),
            Err(PluginError::Missing { .. })
        ));
    }
}

#[cfg(test)]
mod forwarding_tests {
    /// The `fn` names of the block that starts at `header` in `src` (up to the first line that
    /// is a lone `}`).
    fn methods(src: &str, header: &str) -> std::collections::BTreeSet<String> {
        let start = src.find(header).unwrap_or_else(|| panic!("no `{header}`"));
        let body = &src[start..];
        let end = body.find("\n}\n").expect("the block ends");
        body[..end]
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let rest = l.strip_prefix("fn ")?;
                Some(rest.split(['(', '<']).next()?.to_string())
            })
            .collect()
    }

    /// `Guarded` forwards every method of the three traits: a method it lacks would silently
    /// run the trait's default for a plugin's strategy instead of the plugin's own.
    #[test]
    fn guarded_forwards_every_trait_method() {
        let traits = include_str!("strategy/mod.rs");
        let guard = include_str!("plugin.rs");
        for t in ["ForgettingStrategy", "MemoryStrategy", "Scheduler"] {
            let want = methods(traits, &format!("pub trait {t}: Send"));
            let have = methods(
                guard,
                &format!("impl<T: {t} + ?Sized> {t} for Guarded<T> {{"),
            );
            assert!(want.len() >= 6, "{t}: {want:?}");
            assert_eq!(want, have, "{t}: the trait's methods vs Guarded's");
        }
    }
}

#[cfg(test)]
mod message_tests {
    /// The error enum is a leaf (crate::error imports nothing of engram), so its message names
    /// the declaration's section by value: it must stay this module's [`super::SECTION`].
    #[test]
    fn the_missing_declaration_message_names_the_section() {
        let e = super::PluginError::NoDeclaration {
            path: "x.so".into(),
        };
        assert!(e.to_string().contains(super::SECTION), "{e}");
    }
}
