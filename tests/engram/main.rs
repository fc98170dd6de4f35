//! engram's integration tests: one test binary (each extra binary links Burn again).
//!
//! They run the real `engram` binary and the library on small slices of the real
//! Fashion-MNIST (Debian's `dataset-fashion-mnist`, installed by `.ci/run`).

mod augment;
mod avalanche;
mod bad_input;
mod bert;
mod book;
mod cifar;
mod corpora;
mod corrupt_data;
mod data_stream;
mod divergence;
mod e2e;
mod fetch;
mod formats;
mod fuzz;
mod llama;
mod llama_memory;
mod lm;
mod lm_cli;
mod lm_run;
mod lora;
mod memory;
mod moe_lora;
mod new_plugin;
mod newcomer;
mod outdir;
mod peft;
mod plugins;
mod recipes;
mod registry;
mod report;
mod resume;
mod schedulers;
mod sweep;
mod synopsis;
mod text;
mod tune;
mod util;
mod vendor;
