//! The plugin ABI: what a plugin declares (its section, ABI version and build id), the
//! `Registrar` its register function fills, and `declare_plugin!`.

use super::*;

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

pub(crate) const fn copy_into<const N: usize>(s: &str) -> ([u8; N], u32) {
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

/// Collects a plugin's registrations inside its register function.
#[derive(Default)]
pub struct Registrar {
    pub(crate) entries: Vec<Registration>,
    pub(crate) error: Option<String>,
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
pub(crate) struct PluginCall;

impl PluginCall {
    pub(crate) fn enter() -> Self {
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

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
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
