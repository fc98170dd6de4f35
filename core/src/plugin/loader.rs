//! The loader: the checks made on the file before any of its code runs (size, ELF section,
//! ABI version, build id), then `dlopen` and the register call.

use super::*;

/// [`PluginError::Missing`] for a file that does not exist, else [`PluginError::Unreadable`].
pub(crate) fn io_error(path: &Path, e: std::io::Error) -> PluginError {
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
    use std::io::ErrorKind;
    crate::fsutil::read_bounded(path, MAX_PLUGIN_BYTES).map_err(|e| match e.kind() {
        ErrorKind::InvalidInput | ErrorKind::FileTooLarge => PluginError::NotSharedLibrary {
            path: path.to_path_buf(),
            reason: if e.kind() == ErrorKind::InvalidInput {
                "not a regular file".into()
            } else {
                format!("{e} (a plugin)")
            },
        },
        _ => io_error(path, e),
    })
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

pub(crate) fn declaration_from_bytes(
    path: &Path,
    bytes: &[u8],
) -> Result<DeclarationInfo, PluginError> {
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

pub(crate) fn parse_declaration(d: &[u8]) -> Option<DeclarationInfo> {
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
pub(crate) static LOADED: Mutex<Vec<Plugin>> = Mutex::new(Vec::new());

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
/// module docs ([`PluginError::Crashed`] only with a trial load installed, [`super::set_probe`]).
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
    // The trial load in a child process, when one is installed: a library that crashes while
    // it loads is refused here, before this process opens it.
    super::probe::run_probe(path, &canonical)?;
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
