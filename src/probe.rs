//! The hidden `engram __probe-plugin PATH` subcommand: the trial load of a plugin in a child
//! process ([`engram::core::plugin::probe_in_child`]), so that a library that crashes while it
//! loads takes down the child, not the command that named it.

use engram::core::plugin;
use std::process::ExitCode;

/// Run first in `main`: in the child (`engram __probe-plugin PATH`) loads the plugin and
/// returns the exit code the parent reads; otherwise installs the trial load for every plugin
/// this process loads and returns `None`.
pub fn intercept() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(plugin::PROBE_COMMAND)) {
        plugin::set_probe(plugin::probe_in_child);
        return None;
    }
    Some(match args.next() {
        Some(path) => ExitCode::from(plugin::probe_child(std::path::Path::new(&path))),
        None => {
            eprintln!("usage: engram {} PATH", plugin::PROBE_COMMAND);
            ExitCode::from(2)
        }
    })
}
