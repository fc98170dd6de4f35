//! Where a config's `plugins` entry is looked for.
//!
//! - An absolute path, or a path with a directory in it (`../target/release/libx.so`), is taken
//!   as it is, a relative one relative to the config file's directory (as before bare names
//!   were searched for).
//! - A bare name is searched for: a plugin's name (`synaptic-intelligence`, the file
//!   `libsynaptic_intelligence.so`: `-` becomes `_`, with the platform's prefix and suffix) or
//!   a file name (`libsynaptic_intelligence.so`). The places, in order: each directory of
//!   `$ENGRAM_PLUGIN_PATH` (colon-separated), the directory of the running program (where
//!   `cargo build --release --workspace` puts the plugins beside `engram`) and its `../lib`
//!   (an installed layout), then the config file's directory. The first file found wins.

use std::path::{Path, PathBuf};

/// The environment variable listing extra plugin directories, separated by `:`.
pub const PLUGIN_PATH_VAR: &str = "ENGRAM_PLUGIN_PATH";

/// Where a `plugins` entry led: the file to load, or every path looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The file (it exists).
    File(PathBuf),
    /// No file: the candidates looked at, in search order (one for a path with a directory).
    Missing(Vec<PathBuf>),
}

/// Whether `entry` is a bare name (no directory component), searched for by [`find`].
pub fn is_bare(entry: &Path) -> bool {
    !entry.is_absolute() && entry.components().count() == 1 && entry.parent() == Some(Path::new(""))
}

/// The file names a bare `entry` may stand for: itself when it ends with the platform's
/// library suffix (`.so`), else the library a plugin crate of that name builds
/// (`lib<name with - as _>.so`) and then the name itself.
pub fn file_names(entry: &str) -> Vec<String> {
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    if entry.ends_with(DLL_SUFFIX) {
        vec![entry.to_string()]
    } else {
        let stem = entry.replace('-', "_");
        let lib = if stem.starts_with(DLL_PREFIX) {
            format!("{stem}{DLL_SUFFIX}")
        } else {
            format!("{DLL_PREFIX}{stem}{DLL_SUFFIX}")
        };
        vec![lib, entry.to_string()]
    }
}

/// The directories a bare name is searched in, in order (see the module docs): those of
/// `plugin_path` (the value of [`PLUGIN_PATH_VAR`], empty entries skipped), the directory of
/// `exe` and its `../lib`, then `base_dir`.
pub fn search_dirs(plugin_path: Option<&str>, exe: Option<&Path>, base_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = plugin_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Some(dir) = exe.and_then(Path::parent) {
        dirs.push(dir.to_path_buf());
        dirs.push(dir.join("..").join("lib"));
    }
    dirs.push(base_dir.to_path_buf());
    dirs
}

/// Resolves the `plugins` entry `entry` of a config whose directory is `base_dir`, searching
/// `$ENGRAM_PLUGIN_PATH` and the running program's directory for a bare name (module docs).
pub fn find(entry: &Path, base_dir: &Path) -> Found {
    let var = std::env::var(PLUGIN_PATH_VAR).ok();
    let exe = std::env::current_exe().ok();
    find_in(entry, base_dir, var.as_deref(), exe.as_deref())
}

/// [`find`] with the environment given: `plugin_path` is `$ENGRAM_PLUGIN_PATH`'s value and
/// `exe` the running program's path.
pub fn find_in(
    entry: &Path,
    base_dir: &Path,
    plugin_path: Option<&str>,
    exe: Option<&Path>,
) -> Found {
    let bare = entry.to_str().filter(|_| is_bare(entry));
    let Some(name) = bare else {
        // Whatever is there is the loader's to judge (a directory is refused by it).
        let p = crate::fsutil::relative_to(base_dir, entry);
        return if p.exists() {
            Found::File(p)
        } else {
            Found::Missing(vec![p])
        };
    };
    let mut looked = Vec::new();
    for dir in search_dirs(plugin_path, exe, base_dir) {
        for f in file_names(name) {
            let p = dir.join(&f);
            if p.is_file() {
                return Found::File(p);
            }
            looked.push(p);
        }
    }
    Found::Missing(looked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_and_paths() {
        assert!(is_bare(Path::new("synaptic-intelligence")));
        assert!(is_bare(Path::new("libx.so")));
        assert!(!is_bare(Path::new("../target/release/libx.so")));
        assert!(!is_bare(Path::new("./libx.so")));
        assert!(!is_bare(Path::new("/abs/libx.so")));
        assert_eq!(
            file_names("synaptic-intelligence"),
            ["libsynaptic_intelligence.so", "synaptic-intelligence"]
        );
        assert_eq!(file_names("libmoe_experts.so"), ["libmoe_experts.so"]);
        assert_eq!(
            file_names("libmoe_experts"),
            ["libmoe_experts.so", "libmoe_experts"]
        );
    }

    #[test]
    fn search_order_is_the_variable_then_the_program_then_the_config() {
        let d = tempfile::tempdir().unwrap();
        let (env1, env2, bin, cfg) = (
            d.path().join("e1"),
            d.path().join("e2"),
            d.path().join("inst/bin"),
            d.path().join("cfg"),
        );
        let lib = d.path().join("inst/lib");
        for p in [&env1, &env2, &bin, &lib, &cfg] {
            std::fs::create_dir_all(p).unwrap();
        }
        let var = format!("{}::{}", env1.display(), env2.display());
        let exe = bin.join("engram");
        let find = |e: &str| find_in(Path::new(e), &cfg, Some(&var), Some(&exe));
        // Nowhere: every candidate named, in order (2 names × 5 places).
        let Found::Missing(looked) = find("my-plugin") else {
            panic!("found a file that does not exist")
        };
        assert_eq!(looked.len(), 10, "{looked:?}");
        assert_eq!(looked[0], env1.join("libmy_plugin.so"));
        assert_eq!(looked[2], env2.join("libmy_plugin.so"));
        assert_eq!(looked[4], bin.join("libmy_plugin.so"));
        assert_eq!(looked[6], bin.join("../lib/libmy_plugin.so"));
        assert_eq!(looked[8], cfg.join("libmy_plugin.so"));
        // Each place wins over the later ones.
        let put = |dir: &Path| std::fs::write(dir.join("libmy_plugin.so"), b"x").unwrap();
        put(&cfg);
        assert_eq!(find("my-plugin"), Found::File(cfg.join("libmy_plugin.so")));
        put(&lib);
        assert_eq!(
            find("libmy_plugin.so"),
            Found::File(bin.join("../lib/libmy_plugin.so"))
        );
        put(&bin);
        assert_eq!(find("my-plugin"), Found::File(bin.join("libmy_plugin.so")));
        put(&env2);
        assert_eq!(find("my-plugin"), Found::File(env2.join("libmy_plugin.so")));
        // A path with a directory is the config's, as before: no search.
        assert_eq!(
            find("./libmy_plugin.so"),
            Found::File(cfg.join("./libmy_plugin.so"))
        );
        assert_eq!(
            find("sub/libmy_plugin.so"),
            Found::Missing(vec![cfg.join("sub/libmy_plugin.so")])
        );
    }
}
