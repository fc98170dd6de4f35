//! `engram bench memory --model llama` (issue #31, item 4): next-token training of a decoder,
//! full fine-tuning against LoRA and QLoRA (a base held in 4-bit blocks), with and without
//! segment checkpointing; and the figure `bench/llama-memory.sh` generates from it.

use crate::util::{run, table_rows};
use std::path::Path;

/// On the tiny Llama (2 layers × 32, vocabulary 300) with AdamW: the default rows, full
/// fine-tuning training every parameter, LoRA and QLoRA the adapters on the query and value
/// projections and the head's norm (2 · ((32 + 32)·8 + (32 + 16)·8) + 32 = 1,824), QLoRA's
/// parameters as held exactly the hand count (its 18,432 projection values at one byte and a
/// 4-byte scale a block of 16, the largest block up to 32 that divides them, the rest in f32),
/// and every training footprint the sum of its parts.
#[test]
fn a_tiny_llama_memory_bench_measures_lora_and_qlora_beside_full_fine_tuning() {
    let d = tempfile::tempdir().unwrap();
    let j = d.path().join("m.json");
    let gguf = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gguf/llama-tiny.gguf"
    );
    let (code, msg) = run(&[
        "bench",
        "memory",
        "--model",
        "llama",
        "--init",
        gguf,
        "--batch",
        "4",
        "--seq-len",
        "16",
        "--optimizer",
        "adamw",
        "--steps",
        "1",
        "--json",
        j.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{msg}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "standard",
            "checkpoint",
            "lora",
            "lora+checkpoint",
            "qlora",
            "qlora+checkpoint"
        ]
    );
    assert_eq!(
        v["qlora_block"], 16,
        "the largest block up to 32 dividing 16-wide projections"
    );
    let params = v["params"].as_u64().unwrap();
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    assert_eq!(n(&rows[0], "trainable_params"), params);
    assert_eq!(n(&rows[0], "parameter_bytes"), params * 4);
    for r in &rows[2..] {
        assert_eq!(n(r, "trainable_params"), 1_824, "{r}");
    }
    let adapters = 1_824 - 32;
    assert_eq!(n(&rows[2], "parameter_bytes"), (params + adapters) * 4);
    let q = 18_432;
    assert_eq!(
        n(&rows[4], "parameter_bytes"),
        (params + adapters - q) * 4 + q + q / 16 * 4
    );
    for r in rows {
        assert_eq!(
            n(r, "training_peak_bytes"),
            n(r, "parameter_bytes") + n(r, "optimizer_state_bytes") + n(r, "peak_bytes"),
            "{r}"
        );
        assert!(n(r, "peak_bytes") > 0 && r["step_seconds"].as_f64().unwrap() > 0.0);
    }
    // AdamW: two moments a trainable parameter (and a few bytes of keys), 15× fewer here.
    assert!(n(&rows[2], "optimizer_state_bytes") * 5 < n(&rows[0], "optimizer_state_bytes"));
}

/// book/src/figures/llama-memory.md is `bench/llama-memory.sh`'s output (a golden file: its
/// structure is checked, not the SmolLM2 run): the machine, the command, the six rows with full
/// fine-tuning first as the reference, the adapter rows training a sliver of the parameters,
/// QLoRA's parameters held in fewer bytes than LoRA's, each footprint the sum of its columns.
#[test]
fn the_llama_memory_figure_is_generated() {
    let fig = crate::util::generated_figure("llama-memory");
    assert!(fig.contains("\nMachine: "), "{fig}");
    assert!(
        fig.contains("`engram bench memory --model llama --init SMOLLM2 --batch 8 --seq-len 128 --optimizer adamw --rows standard,checkpoint,lora,lora+checkpoint,qlora,qlora+checkpoint"),
        "{fig}"
    );
    let rows = table_rows(&fig, "| row");
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "standard (full fine-tuning)",
            "checkpoint",
            "lora",
            "lora+checkpoint",
            "qlora",
            "qlora+checkpoint"
        ],
        "{fig}"
    );
    let num = |c: &str| c.replace(',', "").parse::<f64>().unwrap();
    assert_eq!(
        num(rows[0][1]),
        134_515_008.0,
        "SmolLM2's parameters: {fig}"
    );
    assert_eq!(
        rows[0][6], "1.00",
        "full fine-tuning is the reference: {fig}"
    );
    for r in &rows {
        let sum = num(r[2]) + num(r[3]) + num(r[4]);
        assert!(
            (sum - num(r[5])).abs() <= 0.2,
            "footprint = its parts: {r:?}"
        );
    }
    for r in &rows[2..] {
        assert!(num(r[1]) * 100.0 < num(rows[0][1]), "trainable: {r:?}");
    }
    assert!(
        num(rows[4][2]) * 2.0 < num(rows[2][2]),
        "QLoRA's packed base: {fig}"
    );
    assert!(fig.contains("QLoRA's own claim"), "{fig}");
}

/// book/src/figures/lm-stream.md is `bench/lm-stream.sh`'s output (a golden file: its structure
/// is checked, not the SmolLM2 runs): the machine, the base model's perplexity on the three
/// domains, then one row for each way to train (full fine-tuning, LoRA, O-LoRA, LoRA + replay)
/// whose first-domain forgetting is the log of the two perplexities it quotes, and the whole
/// matrices (three rows of three a way).
#[test]
fn the_lm_stream_figure_is_generated() {
    let fig = crate::util::generated_figure("lm-stream");
    assert!(fig.contains("\nMachine: "), "{fig}");
    let table = |first: &str| -> Vec<Vec<String>> {
        fig.lines()
            .skip_while(|l| !l.starts_with(first))
            .take_while(|l| l.starts_with('|'))
            .filter(|l| !l.starts_with("|---"))
            .map(|l| {
                l.trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect()
    };
    let base = table("| | austen");
    assert_eq!(
        base[0][1..],
        ["austen", "bbc-news", "spam-assassin/new"],
        "{fig}"
    );
    assert_eq!(base[1][0], "SmolLM2 as it ships", "{fig}");
    let rows = table("| row |");
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["full", "lora", "o-lora", "lora-replay"], "{fig}");
    for r in &rows[1..] {
        let (a, b) = r[4].split_once(" → ").unwrap();
        let (a, b): (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
        assert_eq!(r[1], format!("{b:.2}"), "the last row's first cell: {r:?}");
        let f0: f64 = r[5].parse().unwrap();
        assert!((f0 - (b.ln() - a.ln())).abs() < 0.01, "{r:?}");
    }
    let matrices = fig.split("```text").nth(1).unwrap();
    assert_eq!(matrices.matches("  after ").count(), 12, "{fig}");
}

/// book/src/figures/llama-equality.md is `bench/llama-equality.sh`'s output (a golden file: the
/// SmolLM2 checks run only where ENGRAM_SMOLLM2 names the file): its three checks, each with the
/// verdict its test asserts, and a logit difference within the issue's bound (1e-3 of the
/// largest logit) that is the quotient of the two figures it quotes.
#[test]
fn the_llama_equality_figure_is_generated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = crate::util::generated_figure("llama-equality");
    let rows = table_rows(&fig, "| check");
    let checks: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        checks,
        ["dequantisation", "tokenizer", "next-token logits"],
        "{fig}"
    );
    assert_eq!(rows[0][2], "bitwise equal", "{fig}");
    assert_eq!(rows[1][2], "byte-identical; ids equal", "{fig}");
    let figure = |after: &str| -> f64 {
        let rest = &rows[2][2][rows[2][2].find(after).unwrap() + after.len()..];
        rest.split([' ', ':'])
            .find(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    let (diff, scale, rel) = (
        figure("max \\|Δ\\| "),
        figure("max \\|logit\\| "),
        figure("relative "),
    );
    assert!(rel <= 1e-3, "{fig}");
    assert!((diff / scale - rel).abs() <= 0.06 * rel, "{fig}");
    assert!(rows[2][2].ends_with("same argmax"), "{fig}");
    let script = std::fs::read_to_string(root.join("bench/llama-equality.sh")).unwrap();
    assert!(script.contains("> book/src/figures/llama-equality.md.tmp"));
}
