//! Lets `target/release/engram` and the examples (`target/release/examples/*`) start without
//! `LD_LIBRARY_PATH`.
//!
//! engram-core is a Rust `dylib` (one copy of Burn shared with runtime plugins), so the binary
//! needs `libengram_core.so` and the toolchain's `libstd-*.so` at run time. The binary's run path
//! lists `$ORIGIN` (the directory of the executable: `target/release/`, or wherever the README's
//! install step puts the binary next to both libraries), `$ORIGIN/..` (for an example, one level
//! below `target/release/`) and then the toolchain's own library directory, so a fresh build runs
//! in place even under `env -i`.
fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = std::process::Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string());
    let target = std::env::var("TARGET").unwrap_or_default();
    let mut rpath = String::from("$ORIGIN:$ORIGIN/..");
    if let Some(root) = sysroot.filter(|s| !s.is_empty()) {
        rpath.push_str(&format!(":{root}/lib/rustlib/{target}/lib"));
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{rpath}");
    println!("cargo:rerun-if-changed=build.rs");
}
