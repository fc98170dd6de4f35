//! The continual trainer, its metrics, memory accounting and report.

pub mod checkpoint;
pub mod lm;
pub mod manifest;
pub mod memory;
pub mod metrics;
pub mod observer;
pub mod report;
pub mod sgd;
pub mod trainer;
