//! Records what a plugin's build id compares: the compiler version, the target, the enabled
//! features, the profile and a hash of engram-core's sources (see
//! `engram_core::plugin::BUILD_ID`).

/// A hash of every file under `src/` (paths and contents, in sorted order): a plugin built
/// against engram-core sources that have changed since (same version number, another trait
/// layout) is refused instead of crashing on a mismatched vtable.
fn source_hash() -> String {
    use std::hash::{Hash, Hasher};
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
    }
    let mut files = Vec::new();
    walk(std::path::Path::new("src"), &mut files);
    files.sort();
    // SipHash with fixed keys: the same for the same sources under one toolchain (which the
    // build id pins as well).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

fn main() {
    println!("cargo:rustc-env=ENGRAM_SOURCE_HASH={}", source_hash());
    println!("cargo:rerun-if-changed=src");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ENGRAM_RUSTC_VERSION={version}");
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=ENGRAM_TARGET={}", var("TARGET"));
    // `release`/`debug` plus the optimisation level, so a plugin built with another profile
    // (whose crate hashes differ) is refused before it is loaded.
    println!(
        "cargo:rustc-env=ENGRAM_PROFILE={}-O{}",
        var("PROFILE"),
        var("OPT_LEVEL")
    );
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase()))
        .collect();
    features.sort();
    println!("cargo:rustc-env=ENGRAM_FEATURES={}", features.join("+"));
    println!("cargo:rerun-if-changed=build.rs");
}
