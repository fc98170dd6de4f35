//! The threads engram computes on.
//!
//! Burn's CPU backend (flex, and the `gemm` crate under it) runs its parallel work — matmuls of
//! at least 192³ multiply-adds, large element-wise ops — on rayon's *current* pool. Called from
//! an ordinary thread such as `main`, that is rayon's global pool of `N` workers, and the caller,
//! which runs every serial op of a training step, is an `N+1`-th thread: on `N` cores the workers'
//! spin-waits between parallel regions take cycles from it, and a second core added almost
//! nothing to the MLP step (`engram bench throughput`: 2 threads ran at the 1-thread rate).
//! [`install`] runs the work on one of the pool's own threads instead, as OpenMP does with its
//! master thread, so that `N` threads do all of it.

use std::sync::OnceLock;

/// Threads of engram's pool: `RAYON_NUM_THREADS` when set to a positive number, else the
/// cores available to this process.
pub fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Stack of each pool thread (bytes): the size of `main`'s (8 MiB) and then some, since the
/// whole command (autodiff's backward pass on deep models included) runs on one of them.
const STACK_BYTES: usize = 16 << 20;

/// Runs `f` on a thread of engram's rayon pool of [`threads`] threads (built on first use),
/// and returns its result; a panic in `f` is resumed in the caller. Called from a rayon thread
/// already, it runs `f` there. Where the pool cannot be built (no threads left), `f` runs here.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads())
            .stack_size(STACK_BYTES)
            .thread_name(|i| format!("engram-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn install_runs_on_a_pool_thread_and_nests() {
        let (outer, inner) = super::install(|| {
            let outer = rayon::current_thread_index();
            (outer, super::install(rayon::current_thread_index))
        });
        assert!(outer.is_some());
        assert_eq!(outer, inner);
        assert_eq!(super::install(rayon::current_num_threads), super::threads());
    }
}
