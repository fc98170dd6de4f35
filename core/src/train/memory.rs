//! Memory accounting.
//!
//! On the CPU backend (flex) tensors live on the process heap, so the heap *is* the device
//! memory: engram-core's global allocator ([`crate::alloc`]) counts live and peak bytes. On CubeCL devices (CUDA, Vulkan) the device pool is read with
//! `Device::memory_pool_usage` after a `sync` (it reports current bytes, not a peak, so engram
//! samples it at the high points of a step).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

/// Heap figures from the counting allocator, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapStats {
    /// Bytes allocated now.
    pub current: u64,
    /// Highest `current` since the last [`HeapProbe::reset_peak`].
    pub peak: u64,
}

/// Current heap figures from the counting allocator ([`crate::alloc`]); always `Some` (the
/// `Option` leaves room for a build without it).
pub fn heap() -> Option<HeapStats> {
    Some(crate::alloc::read())
}

/// Resets the heap peak to the current value (start of a phase).
pub fn reset_heap_peak() {
    crate::alloc::reset_peak();
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

/// The leak alarm (the seed's §6.1): bytes in use at the same point of successive steps (after
/// the optimiser step) are compared with a per-task baseline taken once the task's first steps
/// have allocated what they keep; usage above `factor ×` the baseline (and at least 16 MiB
/// above it, so small runs do not trip on noise) raises the alarm, once per task.
#[derive(Clone, Debug)]
pub struct LeakDetector {
    factor: f64,
    baseline: Option<u64>,
    raised: bool,
}

/// Steps of a task before its baseline is taken.
const LEAK_WARMUP_STEPS: usize = 3;
/// Smallest growth above the baseline that counts as a leak, in bytes.
const LEAK_MIN_BYTES: u64 = 16 << 20;

impl LeakDetector {
    /// A detector raising at `factor ×` the baseline.
    pub fn new(factor: f64) -> Self {
        Self {
            factor,
            baseline: None,
            raised: false,
        }
    }

    /// Starts a new task (a new baseline).
    pub fn start_task(&mut self) {
        self.baseline = None;
        self.raised = false;
    }

    /// Records `bytes` in use after step `step_in_task`; returns a summary the first time the
    /// usage exceeds the threshold in this task.
    pub fn observe(&mut self, step_in_task: usize, bytes: u64) -> Option<String> {
        if step_in_task < LEAK_WARMUP_STEPS {
            return None;
        }
        let base = *self.baseline.get_or_insert(bytes);
        if self.raised
            || (bytes as f64) <= self.factor * base as f64
            || bytes.saturating_sub(base) < LEAK_MIN_BYTES
        {
            return None;
        }
        self.raised = true;
        Some(format!(
            "memory grew from {:.1} MiB (step {LEAK_WARMUP_STEPS} of the task) to {:.1} MiB at step {step_in_task}: {:.2}× the baseline, above the {:.2}× alarm; something keeps tensors across steps (a strategy storing graphs or batches?)",
            base as f64 / 1048576.0,
            bytes as f64 / 1048576.0,
            bytes as f64 / base.max(1) as f64,
            self.factor
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_alarm_raises_once_above_factor_and_floor() {
        let mib = 1u64 << 20;
        let mut d = LeakDetector::new(1.5);
        // Warm-up steps are ignored; the baseline is step 3's reading.
        assert_eq!(d.observe(0, 1000 * mib), None);
        assert_eq!(d.observe(3, 40 * mib), None);
        // 1.4× the baseline: no alarm.
        assert_eq!(d.observe(4, 56 * mib), None);
        // 1.6× and 24 MiB above: alarm, once.
        let msg = d.observe(5, 64 * mib).unwrap();
        assert!(
            msg.contains("40.0 MiB") && msg.contains("64.0 MiB"),
            "{msg}"
        );
        assert_eq!(d.observe(6, 128 * mib), None);
        // A new task has a new baseline.
        d.start_task();
        assert_eq!(d.observe(3, 128 * mib), None);
        assert_eq!(d.observe(9, 130 * mib), None);
        // Small absolute growth never alarms, whatever the ratio.
        let mut small = LeakDetector::new(1.5);
        assert_eq!(small.observe(3, mib), None);
        assert_eq!(small.observe(4, 10 * mib), None);
    }
}
