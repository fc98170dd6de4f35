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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    let pool = POOL.get_or_init(|| pool_builder().num_threads(threads()).build().ok());
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// How engram's pool is built, less its thread count.
fn pool_builder() -> rayon::ThreadPoolBuilder {
    rayon::ThreadPoolBuilder::new()
        .stack_size(STACK_BYTES)
        .thread_name(|i| format!("engram-{i}"))
        .start_handler(|_| allocate_thread_buffers())
}

/// Allocates, on the calling thread, the buffers Burn's CPU backend keeps a thread for its
/// lifetime: `gemm`'s packing slab (the size of a core's L2 cache, 1–2 MiB), otherwise
/// allocated the first time the thread joins a matmul. Run when each pool thread starts, so
/// that no training step's memory window ([`crate::train::memory::PeakWindow`]) counts it: at
/// 2 threads, which step a second thread first joined a matmul in varied from run to run, and
/// so did that step's measured peak (by the slab, 1.1 MiB of the MLP step's 2.4 MiB).
fn allocate_thread_buffers() {
    gemm_common::gemm::L2_SLAB.with(|_| ());
}

/// Pool threads now looking for work in [`keep_awake`]'s loop.
static LOOKING: AtomicUsize = AtomicUsize::new(0);

/// How long a thread that [`keep_awake`] woke keeps looking for work after the last job it ran
/// (OpenMP's "block time", 200 ms by default in Intel's runtime; a step's parallel regions are
/// at most a few hundred microseconds apart, so 2 ms covers a step and frees the core soon
/// after the training loop stops).
const LOOK_FOR: Duration = Duration::from_millis(2);

/// Keeps the other threads of the current rayon pool looking for work for the next
/// [`LOOK_FOR`] instead of asleep; a no-op outside a pool, in a pool of one thread, or while
/// they still look.
///
/// Every parallel region of a step (each matmul's, each element-wise op's split) hands work to
/// the pool's other threads. rayon lets an idle thread spin only a few dozen yields before it
/// sleeps on a futex, so most regions of a training step found the other thread asleep and paid
/// a wake-up (a system call and, in a VM, an inter-processor interrupt) before it joined: about
/// a tenth of the stepping thread's time on the 2-thread MLP step (`bench/profile/README.md`).
/// Called at the start of each forward pass ([`crate::model::Model::forward_range`]), this
/// spawns one job a thread that runs whatever work appears (`rayon::yield_now`) until none has
/// appeared for [`LOOK_FOR`], so the step's regions find a thread already awake, as PyTorch's
/// OpenMP threads spin between regions. It changes no result: which thread runs a job never
/// changes what the job computes. A looking thread yields the CPU between looks, so another
/// process on the core still runs.
pub fn keep_awake() {
    let (Some(caller), threads) = (rayon::current_thread_index(), rayon::current_num_threads())
    else {
        return;
    };
    let others = threads.saturating_sub(1);
    while LOOKING.load(Ordering::Relaxed) < others {
        LOOKING.fetch_add(1, Ordering::Relaxed);
        rayon::spawn(move || look_for_work(caller));
    }
}

/// [`keep_awake`]'s job: runs the pool's pending work until none has appeared for
/// [`LOOK_FOR`]. On the thread that asked (which can pick the job up while it waits in a join),
/// it returns at once: that thread has its own work to get back to.
fn look_for_work(caller: usize) {
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            LOOKING.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _done = Done;
    if rayon::current_thread_index() == Some(caller) {
        return;
    }
    let mut last = Instant::now();
    loop {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => last = Instant::now(),
            Some(rayon::Yield::Idle) if last.elapsed() < LOOK_FOR => std::thread::yield_now(),
            _ => return,
        }
    }
}

/// The floating-point control bits [`flush_denormals`] sets: on x86-64, MXCSR's flush-to-zero
/// (bit 15: a result too small for a normal number becomes ±0) and denormals-are-zero (bit 6: a
/// denormal operand reads as ±0), as `torch.set_flush_denormal(True)` and XLA's CPU threads set
/// them (Intel® 64 and IA-32 Architectures Software Developer's Manual, vol. 1, §10.2.3).
#[cfg(target_arch = "x86_64")]
const FLUSH_BITS: u32 = (1 << 15) | (1 << 6);

/// This thread's MXCSR (SSE and AVX control and status register).
#[cfg(target_arch = "x86_64")]
fn control_word() -> u32 {
    let mut word = 0u32;
    // SAFETY: `stmxcsr` stores the 4-byte register at the address, a live local.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut word, options(nostack, preserves_flags));
    }
    word
}

/// Sets this thread's MXCSR to `word`.
#[cfg(target_arch = "x86_64")]
fn set_control_word(word: u32) {
    // SAFETY: `ldmxcsr` loads the 4-byte register from a live local; callers only flip
    // FLUSH_BITS of the current value, which no exception or rounding mode depends on.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &word, options(nostack, readonly, preserves_flags));
    }
}

/// Whether [`flush_denormals`] can flush on this CPU architecture (x86-64 only; elsewhere it
/// changes nothing and the trainer says so).
pub const CAN_FLUSH_DENORMALS: bool = cfg!(target_arch = "x86_64");

/// Sets (`on`) or clears flush-to-zero and denormals-are-zero on the calling thread and every
/// thread of the current rayon pool (rayon's global pool when called outside one); returns
/// whether the caller's were set before.
fn set_flush(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let apply = move || {
            let word = control_word();
            set_control_word(if on {
                word | FLUSH_BITS
            } else {
                word & !FLUSH_BITS
            });
            word & FLUSH_BITS == FLUSH_BITS
        };
        let before = apply();
        rayon::broadcast(|_| {
            apply();
        });
        before
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        false
    }
}

/// While alive, denormal numbers are flushed to zero on the threads that compute (see
/// [`flush_denormals`]); dropping it puts back the caller's setting before, on the same
/// threads.
#[must_use = "the flushing ends when the guard is dropped"]
pub struct FlushDenormals {
    /// Whether the caller flushed before the guard.
    before: bool,
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        set_flush(self.before);
    }
}

/// Flushes denormal numbers (magnitudes below 2⁻¹²⁶ ≈ 1.2·10⁻³⁸ in `f32`) to zero, as results
/// and as operands, on the calling thread and every thread of the current rayon pool, until the
/// returned guard drops (`[run] flush_denormals`).
///
/// A multiply or add that takes or makes a denormal runs in microcode on x86 cores, about a
/// hundred times slower than a normal one. Training meets them when a task's loss saturates:
/// the softmax's gradients shrink towards zero and the backward pass carries values below
/// 2⁻¹²⁶ through every convolution (the recipe CNN's third task of Split Fashion-MNIST,
/// `bench/profile/README.md`). Flushing changes results only where a value would be denormal,
/// well below anything an `f32` weight update can resolve, and makes the run reproducible with
/// itself, not with an unflushed run. PyTorch does the same under `torch.set_flush_denormal(True)`.
///
/// The setting is per thread, so the pool must not change while the guard lives; another
/// computation sharing the pool meanwhile is flushed too. On CPUs other than x86-64 this
/// changes nothing ([`CAN_FLUSH_DENORMALS`]).
pub fn flush_denormals() -> FlushDenormals {
    FlushDenormals {
        before: set_flush(true),
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

    /// A thread of engram's pool has `gemm`'s packing slab when it starts: its first matmul
    /// allocates nothing more (without the start handler it allocated the slab, the size of
    /// the L2 cache, there). The heap counter is the process's and other tests run beside, so
    /// the bound is a quarter of the smallest L2 cache `gemm` would size it by.
    #[test]
    fn pool_threads_start_with_their_gemm_buffers() {
        let pool = super::pool_builder().num_threads(2).build().unwrap();
        let first_use = pool.broadcast(|_| {
            let before = crate::alloc::read().current;
            gemm_common::gemm::L2_SLAB.with(|_| ());
            crate::alloc::read().current as i64 - before as i64
        });
        assert!(first_use.iter().all(|&b| b < 64 << 10), "{first_use:?}");
        // Without the handler, the same first use allocates the slab.
        let bare = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let first_use = bare.broadcast(|_| {
            let before = crate::alloc::read().current;
            gemm_common::gemm::L2_SLAB.with(|_| ());
            crate::alloc::read().current as i64 - before as i64
        });
        assert!(first_use.iter().all(|&b| b >= 256 << 10), "{first_use:?}");
    }

    /// Waits up to 2 s for `cond`.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(2) {
            if cond() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }

    /// `keep_awake` puts the pool's other thread to looking for work, which then runs the
    /// caller's parallel work (the sums are right), and lets it go once no work has appeared for
    /// `LOOK_FOR`; outside a pool it does nothing.
    #[test]
    fn keep_awake_looks_for_work_then_lets_go() {
        use super::LOOKING;
        use std::sync::atomic::Ordering::Relaxed;
        let before = LOOKING.load(Relaxed);
        super::keep_awake();
        assert_eq!(LOOKING.load(Relaxed), before, "no pool, no looking thread");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (total, looked) = pool.install(|| {
            super::keep_awake();
            let looked = eventually(|| LOOKING.load(Relaxed) >= 1);
            let mut total = 0u64;
            for k in 0..200u64 {
                let (a, b) = rayon::join(
                    || (0..=k).sum::<u64>(),
                    || (0..=k).map(|x| 2 * x).sum::<u64>(),
                );
                total += a + b;
            }
            (total, looked)
        });
        assert!(looked, "the other thread never started looking");
        // Σ_k 3·k(k+1)/2 over k < 200.
        assert_eq!(total, (0..200u64).map(|k| 3 * k * (k + 1) / 2).sum::<u64>());
        assert!(eventually(|| LOOKING.load(Relaxed) == 0), "it kept looking");
    }

    /// Inside the guard, a product below 2⁻¹²⁶ comes out as zero and a denormal operand reads as
    /// zero, on the caller and on the pool's other threads; after it, both are denormal again.
    #[test]
    fn flush_denormals_flushes_every_thread_until_dropped() {
        let tiny = f32::MIN_POSITIVE; // 2⁻¹²⁶, the smallest normal f32
        let probe = || {
            let half = std::hint::black_box(tiny) * std::hint::black_box(0.5f32);
            let denormal = std::hint::black_box(f32::from_bits(1)); // 2⁻¹⁴⁹
            (half, denormal * std::hint::black_box(2.0f32))
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let everywhere = || {
            let mut seen = vec![probe()];
            seen.extend(rayon::broadcast(|_| probe()));
            seen
        };
        let (during, after) = pool.install(|| {
            let guard = super::flush_denormals();
            let during = everywhere();
            drop(guard);
            (during, everywhere())
        });
        assert_eq!(during.len(), 4);
        assert_eq!(after.len(), 4);
        if super::CAN_FLUSH_DENORMALS {
            assert!(
                during.iter().all(|&(h, d)| h == 0.0 && d == 0.0),
                "{during:?}"
            );
        }
        // 2⁻¹²⁷ and 2⁻¹⁴⁸, both denormal, once the guard is gone.
        let unflushed = (f32::from_bits(1 << 22), f32::from_bits(2));
        assert!(after.iter().all(|&p| p == unflushed), "{after:?}");
    }
}
