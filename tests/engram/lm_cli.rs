//! `engram perplexity` and `engram generate` (issue #31, item 3) on the tiny random Llama GGUF,
//! against transformers' own figures (bench/reference/llama_lm.py ->
//! tests/data/gguf/llama-tiny-lm.json), and their bad input (exit 2, no panic).

use crate::util::run;
use std::path::{Path, PathBuf};

fn gguf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf")
}

fn tiny() -> String {
    gguf_dir().join("llama-tiny.gguf").display().to_string()
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(gguf_dir().join("llama-tiny-lm.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Perplexity over the same windows (lines + eos, chunks of 8, 3 tokens dropped) equals
/// `LlamaForCausalLM`'s within 1e-4 relative.
#[test]
fn perplexity_equals_transformers_on_the_tiny_llama() {
    let r = reference();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ppl.json");
    let text = gguf_dir().join("lm-text.txt");
    let (code, log) = run(&[
        "perplexity",
        &tiny(),
        "--text",
        text.to_str().unwrap(),
        "--window",
        "8",
        "--batch",
        "3",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    let got = read_json(&out);
    assert_eq!(got["window"], 8);
    assert_eq!(got["windows"], r["windows"].as_array().unwrap().len());
    assert_eq!(got["tokens"], r["tokens"]);
    assert_eq!(got["dropped_tokens"], r["dropped_tokens"]);
    let (a, b) = (
        got["perplexity"].as_f64().unwrap(),
        r["perplexity"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-4 * b, "engram {a}, transformers {b}");
    let (a, b) = (
        got["mean_nll"].as_f64().unwrap(),
        r["mean_nll"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-4 * b, "engram {a}, transformers {b}");
    assert!(log.contains("70 tokens"), "{log}");
}

/// The Hugging Face directory of the same weights (tests/data/llama-tiny/) with the GGUF's
/// tokenizer as transformers converts it (tokenizer.json) gives the same perplexity and ids.
#[test]
fn a_hugging_face_directory_gives_the_same_figures() {
    let r = reference();
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("llama");
    std::fs::create_dir(&hf).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama-tiny");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), hf.join(f)).unwrap();
    }
    let hf_s = hf.display().to_string();
    // No tokenizer.json yet: refused by name.
    let text = gguf_dir().join("lm-text.txt");
    let text = text.to_str().unwrap();
    let (code, log) = run(&["perplexity", &hf_s, "--text", text, "--window", "8"]);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("tokenizer.json: no such file"), "{log}");
    std::fs::copy(
        gguf_dir().join("llama-tiny-tokenizer.json"),
        hf.join("tokenizer.json"),
    )
    .unwrap();
    let out = dir.path().join("ppl.json");
    let (code, log) = run(&[
        "perplexity",
        &hf_s,
        "--text",
        text,
        "--window",
        "8",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    let got = read_json(&out);
    assert_eq!(got["tokens"], r["tokens"]);
    let (a, b) = (
        got["perplexity"].as_f64().unwrap(),
        r["perplexity"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-4 * b, "engram {a}, transformers {b}");
    let out = dir.path().join("gen.json");
    let (code, log) = run(&[
        "generate",
        &hf_s,
        "--prompt",
        "the cat",
        "--tokens",
        "10",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_json(&out)["generated_ids"], r["generated_ids"]);
}

/// Greedy ids equal `generate(do_sample=False, max_new_tokens=10)`'s; the printed text is the
/// prompt and its continuation decoded.
#[test]
fn greedy_generation_equals_transformers_on_the_tiny_llama() {
    let r = reference();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen.json");
    let (code, log) = run(&[
        "generate",
        &tiny(),
        "--prompt",
        r["prompt"].as_str().unwrap(),
        "--tokens",
        "10",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    let got = read_json(&out);
    assert_eq!(got["prompt_ids"], r["prompt_ids"]);
    assert_eq!(got["generated_ids"], r["generated_ids"]);
    assert_eq!(got["stop"], "tokens");
    assert!(log.starts_with("the cat a a"), "{log}");
    // --tokens 0 is accepted: the prompt alone.
    let (code, log) = run(&["generate", &tiny(), "--prompt", "the cat", "--tokens", "0"]);
    assert_eq!((code, log.trim()), (0, "the cat"));
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let text = gguf_dir().join("lm-text.txt");
    let text = text.to_str().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let empty = write("empty.txt", b"\n\n  \n");
    let short = write("short.txt", b"hi\n");
    // The tiny GGUF with general.architecture = "mamba".
    let mut bytes = std::fs::read(tiny()).unwrap();
    let key = b"general.architecture";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 12;
    assert_eq!(&bytes[at..at + 5], b"llama");
    bytes[at..at + 5].copy_from_slice(b"mamba");
    let mamba = write("mamba.gguf", &bytes);
    let rundir = dir.path().join("run");
    std::fs::create_dir_all(rundir.join("checkpoints")).unwrap();
    let rundir = rundir.display().to_string();
    let missing = dir.path().join("none.gguf").display().to_string();
    let t = tiny();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["perplexity", &missing, "--text", text], "no such file"),
        (vec!["perplexity", &t, "--text", &missing], "none.gguf"),
        (
            vec!["perplexity", &mamba, "--text", text],
            "general.architecture is `mamba`",
        ),
        (
            vec!["perplexity", &rundir, "--text", text],
            "no checkpoint here",
        ),
        (
            vec!["perplexity", &t, "--text", &empty],
            "every line is empty",
        ),
        (
            vec!["perplexity", &t, "--text", &short, "--window", "8"],
            "fewer than one window",
        ),
        (
            vec!["perplexity", &t, "--text", text, "--window", "0"],
            "at least 2 tokens",
        ),
        (
            vec!["perplexity", &t, "--text", text, "--window", "1"],
            "at least 2 tokens",
        ),
        (
            vec!["perplexity", &t, "--text", text, "--window", "65"],
            "context length 64",
        ),
        (
            vec!["perplexity", &t, "--text", text, "--batch", "0"],
            "--batch 0",
        ),
        (vec!["generate", &missing, "--prompt", "hi"], "no such file"),
        (vec!["generate", &t, "--prompt", ""], "no token"),
    ];
    for (args, want) in cases {
        let (code, log) = run(&args);
        assert_eq!(code, 2, "{args:?}: {log}");
        assert!(log.contains(want), "{args:?}: {log}");
        assert!(!log.contains("panicked"), "{args:?}: {log}");
    }
}

/// With `ENGRAM_SMOLLM2=FILE` (SmolLM2-135M-Instruct.Q4_1.gguf, `engram data fetch smollm2`):
/// its perplexity on two Austen sentences (windows of 32) and its greedy continuation of
/// "The capital of France is" equal transformers' (tests/data/gguf/smollm2-lm.json, from
/// `bench/reference/llama_lm.py --smollm2 FILE`), and both are printed.
#[test]
fn smollm2_perplexity_and_greedy_text_equal_transformers() {
    let Some(file) = std::env::var_os("ENGRAM_SMOLLM2") else {
        eprintln!("ENGRAM_SMOLLM2 unset: SmolLM2 not checked");
        return;
    };
    let file = file.to_str().unwrap().to_string();
    let text = std::fs::read_to_string(gguf_dir().join("smollm2-lm.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ppl.json");
    let text = gguf_dir().join("smollm2-lm-text.txt");
    let (code, log) = run(&[
        "perplexity",
        &file,
        "--text",
        text.to_str().unwrap(),
        "--window",
        "32",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    eprintln!("SmolLM2: {log}");
    let got = read_json(&out);
    assert_eq!(got["tokens"], r["tokens"]);
    let (a, b) = (
        got["perplexity"].as_f64().unwrap(),
        r["perplexity"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-4 * b, "engram {a}, transformers {b}");
    let out = dir.path().join("gen.json");
    let (code, log) = run(&[
        "generate",
        &file,
        "--prompt",
        r["prompt"].as_str().unwrap(),
        "--tokens",
        "12",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{log}");
    eprintln!("SmolLM2: {log}");
    let got = read_json(&out);
    assert_eq!(got["prompt_ids"], r["prompt_ids"]);
    assert_eq!(got["generated_ids"], r["generated_ids"]);
}
