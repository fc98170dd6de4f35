//! The `engram` command line: [`cli`] parses the arguments and runs the command; this file sets
//! up the process around it (the default device, the allocator, the panic hook, Ctrl-C and the
//! thread pool) and turns the result into the exit code.
//!
//! Exit codes: `0` success, `2` bad input (config, data, plugin, device, a path that cannot be
//! used), `1` any other failure. A panic is caught, reported as an internal error and exits
//! with `1`.

mod alloc;
mod cli;
mod probe;

use clap::Parser;
use engram::core::train::trainer;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `engram __probe-plugin PATH` (the trial load of a plugin) runs alone; any other command
    // gets the trial load for the plugins it loads.
    if let Some(code) = probe::intercept() {
        return code;
    }
    engram::core::device::pin_default_device();
    alloc::tune_malloc();
    std::panic::set_hook(Box::new(|info| {
        // A panic inside a plugin is caught and reported as a typed error naming the plugin.
        if engram::core::plugin::note_plugin_panic(info) {
            return;
        }
        eprintln!(
            "error: internal error: {info}\n  this is a bug in engram; please report it with the command that caused it"
        );
    }));
    let cli = cli::Cli::parse();
    handle_signals(cli.training());
    // On a thread of engram's pool, so that Burn's parallel ops and the step's serial ones share
    // its threads instead of oversubscribing the cores (engram_core::threads).
    let result =
        engram::core::threads::install(|| std::panic::catch_unwind(|| cli::dispatch(&cli)));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!(
                "error: {}",
                engram::core::error::shorten_runs(&e.to_string())
            );
            ExitCode::from(e.exit_code() as u8)
        }
        Err(_) => ExitCode::from(1),
    }
}

/// Ctrl-C during a command that trains (`training`: `run`, `resume`, `sweep run`, `sweep task`):
/// the trainer writes a checkpoint at the next step and stops; a second Ctrl-C exits at once.
/// Any other command exits at once.
///
/// SIGTERM and SIGHUP (kill, scancel, a closed terminal) are handled as Ctrl-C. A second
/// signal within a second of the first is the same interruption delivered twice (to the
/// process and its group, or by Slurm and by a sweep forwarding it), not a second Ctrl-C.
fn handle_signals(training: bool) {
    let first = std::sync::OnceLock::<std::time::Instant>::new();
    let _ = ctrlc::set_handler(move || {
        use std::sync::atomic::Ordering;
        if !training {
            std::process::exit(130);
        }
        let t0 = *first.get_or_init(std::time::Instant::now);
        if trainer::INTERRUPTED.swap(true, Ordering::SeqCst) {
            if t0.elapsed() < std::time::Duration::from_secs(1) {
                return;
            }
            eprintln!(
                "\nengram: quit without a new checkpoint; `engram resume OUT_DIR` continues from the last one"
            );
            std::process::exit(130);
        }
        eprintln!(
            "\nengram: interrupted; writing a checkpoint at the next step (Ctrl-C again to quit now)"
        );
    });
}
