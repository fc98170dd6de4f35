//! Memory accounting.
//!
//! On the CPU backend (flex) tensors live on the process heap, so the heap *is* the device
//! memory: the `engram` binary installs a counting global allocator and hands engram-core a
//! probe ([`set_heap_probe`]). On CubeCL devices (CUDA, Vulkan) the device pool is read with
//! `Device::memory_pool_usage` after a `sync` (it reports current bytes, not a peak, so engram
//! samples it at the high points of a step).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Heap figures from the counting allocator, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapStats {
    /// Bytes allocated now.
    pub current: u64,
    /// Highest `current` since the last [`HeapProbe::reset_peak`].
    pub peak: u64,
}

/// A source of heap figures (the binary's counting allocator).
pub struct HeapProbe {
    /// Reads the figures.
    pub read: fn() -> HeapStats,
    /// Sets the peak to the current value.
    pub reset_peak: fn(),
}

static PROBE: OnceLock<HeapProbe> = OnceLock::new();

/// Installs the heap probe (once per process; later calls are ignored).
pub fn set_heap_probe(probe: HeapProbe) {
    let _ = PROBE.set(probe);
}

/// Current heap figures, when a probe is installed.
pub fn heap() -> Option<HeapStats> {
    PROBE.get().map(|p| (p.read)())
}

/// Resets the heap peak to the current value (start of a phase).
pub fn reset_heap_peak() {
    if let Some(p) = PROBE.get() {
        (p.reset_peak)();
    }
}

/// Bytes in use on `device`: the device pool on CubeCL devices, the heap on the CPU.
pub fn device_bytes(device: &Device) -> Option<u64> {
    match device.memory_pool_usage() {
        Some(u) => {
            let _ = device.sync();
            Some(u.bytes_in_use)
        }
        None => heap().map(|h| h.current),
    }
}

/// Peak and end-of-phase bytes of one phase (train step, evaluation, after-task pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseMemory {
    /// Highest bytes seen during the phase.
    pub peak_bytes: u64,
    /// Bytes at the end of the phase.
    pub end_bytes: u64,
}

/// Tracks one phase: call [`PhaseMeter::start`], sample with [`PhaseMeter::sample`] at high
/// points, then [`PhaseMeter::finish`].
#[derive(Clone, Debug, Default)]
pub struct PhaseMeter {
    peak: u64,
}

impl PhaseMeter {
    /// Starts a phase (resets the heap peak).
    pub fn start() -> Self {
        reset_heap_peak();
        Self { peak: 0 }
    }

    /// Records the current usage (device pool or heap peak).
    pub fn sample(&mut self, device: &Device) {
        let v = match device.memory_pool_usage() {
            Some(u) => u.bytes_in_use,
            None => heap().map_or(0, |h| h.peak),
        };
        self.peak = self.peak.max(v);
    }

    /// Ends the phase and merges it into `into`.
    pub fn finish(mut self, device: &Device, into: &mut PhaseMemory) {
        self.sample(device);
        into.peak_bytes = into.peak_bytes.max(self.peak);
        into.end_bytes = device_bytes(device).unwrap_or(0);
    }
}
