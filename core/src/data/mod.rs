//! Datasets and scenarios: IDX files, the datasets engram knows, and task streams.

pub mod dataset;
pub mod idx;
pub mod stream;
