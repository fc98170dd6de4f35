//! engram's global allocator: the system allocator, counting live and peak bytes.
//!
//! On the CPU backend tensors live on the heap, so this is how engram measures memory there
//! (current and peak bytes, reported per phase by [`crate::train::memory`]). It is defined here,
//! in `libengram_core.so`, and not in the binary: allocations made inside the shared library
//! (most of Burn's) and frees made by the binary or a plugin must meet the same counters.

use serde::{Deserialize, Serialize};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Heap figures from the counting allocator, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapStats {
    /// Bytes allocated now.
    pub current: u64,
    /// Highest `current` since the last [`reset_peak`].
    pub peak: u64,
}

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Wraps the system allocator and counts live bytes.
pub struct Counting;

/// The process's allocator: every Rust allocation of the binary, engram-core and every plugin
/// goes through it (it lives in `libengram_core.so`, whose allocator shim they all share).
#[global_allocator]
static ALLOC: Counting = Counting;

fn add(n: u64) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn sub(n: u64) {
    CURRENT.fetch_sub(n, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are side effects only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as u64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as u64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size() as u64);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            sub(layout.size() as u64);
            add(new_size as u64);
        }
        p
    }
}

/// Live and peak heap bytes counted so far.
pub fn read() -> HeapStats {
    HeapStats {
        current: CURRENT.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed),
    }
}

/// Sets the peak to the current value (start of a phase).
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Sets the peak to `max(bytes, current)`: closing a nested measurement restores the enclosing
/// one's peak ([`crate::train::memory::PeakWindow`]).
pub fn set_peak(bytes: u64) {
    PEAK.store(
        bytes.max(CURRENT.load(Ordering::Relaxed)),
        Ordering::Relaxed,
    );
}
