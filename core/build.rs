//! Records what a plugin's build id compares: the compiler version, the target, the enabled
//! features and the profile (see `engram_core::plugin::BUILD_ID`).
fn main() {
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
