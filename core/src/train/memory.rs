//! Memory accounting.
//!
//! On the CPU backend (flex) tensors live on the process heap, so the heap *is* the device
//! memory: engram-core's global allocator ([`crate::alloc`]) counts live and peak bytes. On CubeCL devices (CUDA, Vulkan) the device pool is read with
//! `Device::memory_pool_usage` after a `sync` (it reports current bytes, not a peak, so engram
//! samples it at the high points of a step).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::alloc::HeapStats;

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

/// The highest absolute heap peak (bytes) of the windows closed with
/// [`PeakWindow::close_apart`] since the last [`PhaseMeter::start`]: counted in the phase's
/// peak, not in the windows around them.
static APART_PEAK: AtomicU64 = AtomicU64::new(0);

/// Bytes in use in `device`'s pool after a `sync`, on CubeCL devices; `None` on the CPU.
fn pool_bytes(device: &Device) -> Option<u64> {
    device.memory_pool_usage()?;
    let _ = device.sync();
    device.memory_pool_usage().map(|u| u.bytes_in_use)
}

/// A nestable measurement of what a stretch of work (one training step, one probe step of a
/// memory budget) adds to memory: its **peak bytes minus the bytes in use when it opened**.
/// This is the training step's own addition that `report.json` gives as
/// `memory.step_peak_bytes` and that the `budget` memory strategy bounds: its activations,
/// gradients and temporaries, without the parameters, optimiser state and data set already
/// held.
///
/// On the CPU (heap accounting) the heap peak is reset on opening, and closing restores the
/// enclosing measurement's peak, so windows nest: a window inside another counts in the outer
/// one too (unless closed with [`PeakWindow::close_apart`]), and in the phase's peak
/// ([`PhaseMeter`]). On CubeCL devices the pool reports current bytes only, so the peak is the
/// bytes in use at the close (after a `sync`), which holds the gradients but not the freed
/// activations: a lower bound.
#[derive(Debug)]
#[must_use = "close the window to read what it added"]
pub struct PeakWindow {
    /// Bytes in use at the opening.
    before: u64,
    /// The enclosing measurement's heap peak at the opening (heap accounting only).
    outer_peak: u64,
    /// Whether the figures are the device pool's.
    pool: bool,
}

impl PeakWindow {
    /// Opens a window on `device`'s memory (the pool on CubeCL devices, the heap on the CPU).
    pub fn open(device: &Device) -> Self {
        if let Some(before) = pool_bytes(device) {
            return Self {
                before,
                outer_peak: 0,
                pool: true,
            };
        }
        let h = crate::alloc::read();
        reset_heap_peak();
        Self {
            before: h.current,
            outer_peak: h.peak,
            pool: false,
        }
    }

    /// The bytes in use when the window opened.
    pub fn before(&self) -> u64 {
        self.before
    }

    /// What the window added so far: its peak minus the bytes in use at its opening, bytes.
    pub fn added(&self, device: &Device) -> u64 {
        self.peak(device).saturating_sub(self.before)
    }

    /// Peak bytes so far, absolute.
    fn peak(&self, device: &Device) -> u64 {
        if self.pool {
            pool_bytes(device).unwrap_or(self.before)
        } else {
            crate::alloc::read().peak
        }
    }

    /// Closes the window: returns its peak minus the bytes in use at its opening, in bytes,
    /// and keeps that peak in the enclosing measurement.
    pub fn close(self, device: &Device) -> u64 {
        let peak = self.peak(device);
        if !self.pool {
            crate::alloc::set_peak(peak.max(self.outer_peak));
        }
        peak.saturating_sub(self.before)
    }

    /// Closes the window like [`PeakWindow::close`], but leaves its peak out of the enclosing
    /// windows (the phase's peak still counts it): for work whose result is thrown away, such
    /// as a memory budget's probe steps over the budget, which are not the step that was taken.
    pub fn close_apart(self, device: &Device) -> u64 {
        let peak = self.peak(device);
        if !self.pool {
            APART_PEAK.fetch_max(peak, Ordering::Relaxed);
            crate::alloc::set_peak(self.outer_peak);
        }
        peak.saturating_sub(self.before)
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
        APART_PEAK.store(0, Ordering::Relaxed);
        Self { peak: 0 }
    }

    /// Records the current usage (device pool or heap peak).
    pub fn sample(&mut self, device: &Device) {
        let v = match device.memory_pool_usage() {
            Some(u) => u.bytes_in_use,
            None => heap().map_or(0, |h| h.peak.max(APART_PEAK.load(Ordering::Relaxed))),
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
/// the optimiser step) are compared with two baselines, each taken at step
/// `LEAK_WARMUP_STEPS` of a task, once that task's first steps have allocated what they keep:
///
/// - **within a task**, against the task's own baseline: raised once per task;
/// - **across tasks**, each task's baseline against the first task's (of this process: a
///   resumed run starts a new one): memory that grows from task to task, raised once per run.
///
/// Either alarm needs usage above `factor ×` the baseline *and* at least 16 MiB above it, so
/// that small runs do not trip on noise.
#[derive(Clone, Debug)]
pub struct LeakDetector {
    factor: f64,
    task: usize,
    baseline: Option<u64>,
    raised: bool,
    /// The first task's index and baseline (bytes).
    first: Option<(usize, u64)>,
    raised_across: bool,
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
            task: 0,
            baseline: None,
            raised: false,
            first: None,
            raised_across: false,
        }
    }

    /// Starts task `task` (a new task baseline; the first task's is kept).
    pub fn start_task(&mut self, task: usize) {
        self.task = task;
        self.baseline = None;
        self.raised = false;
    }

    fn exceeds(&self, bytes: u64, base: u64) -> bool {
        (bytes as f64) > self.factor * base as f64 && bytes.saturating_sub(base) >= LEAK_MIN_BYTES
    }

    /// Records `bytes` in use after step `step_in_task` of the current task; returns a summary
    /// the first time the usage exceeds the task's threshold in this task, or the first time a
    /// task's baseline exceeds the first task's.
    pub fn observe(&mut self, step_in_task: usize, bytes: u64) -> Option<String> {
        if step_in_task < LEAK_WARMUP_STEPS {
            return None;
        }
        let mib = |b: u64| b as f64 / 1048576.0;
        let Some(base) = self.baseline else {
            self.baseline = Some(bytes);
            let &mut (t0, first) = self.first.get_or_insert((self.task, bytes));
            if self.raised_across || !self.exceeds(bytes, first) {
                return None;
            }
            self.raised_across = true;
            return Some(format!(
                "memory grew from task to task: {:.1} MiB at step {LEAK_WARMUP_STEPS} of task {} against {:.1} MiB at the same step of task {t0}: {:.2}× that, above the {:.2}× alarm; something keeps data from every task (a buffer without a bound, a strategy storing each task's batches or graphs?)",
                mib(bytes),
                self.task,
                mib(first),
                bytes as f64 / first.max(1) as f64,
                self.factor
            ));
        };
        if self.raised || !self.exceeds(bytes, base) {
            return None;
        }
        self.raised = true;
        Some(format!(
            "memory grew from {:.1} MiB (step {LEAK_WARMUP_STEPS} of the task) to {:.1} MiB at step {step_in_task}: {:.2}× the baseline, above the {:.2}× alarm; something keeps tensors across steps (a strategy storing graphs or batches?)",
            mib(base),
            mib(bytes),
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
        // A new task has a new baseline, and it is compared with the first task's: 128 MiB
        // is 3.2× task 0's 40 MiB, so the across-task alarm is raised, once per run.
        d.start_task(1);
        let msg = d.observe(3, 128 * mib).unwrap();
        assert!(
            msg.contains("128.0 MiB at step 3 of task 1 against 40.0 MiB") && msg.contains("3.20×"),
            "{msg}"
        );
        assert_eq!(d.observe(9, 130 * mib), None);
        d.start_task(2);
        assert_eq!(d.observe(3, 256 * mib), None);
        // Within task 2, growth above its own baseline is still raised.
        assert!(d.observe(4, 400 * mib).is_some());
        // A task that starts where the first did raises nothing across tasks.
        let mut flat = LeakDetector::new(1.5);
        flat.start_task(0);
        assert_eq!(flat.observe(3, 40 * mib), None);
        flat.start_task(1);
        assert_eq!(flat.observe(3, 50 * mib), None);
        // Small absolute growth never alarms, whatever the ratio.
        let mut small = LeakDetector::new(1.5);
        assert_eq!(small.observe(3, mib), None);
        assert_eq!(small.observe(4, 10 * mib), None);
    }
}
