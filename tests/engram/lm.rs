//! Language modelling as a task (issue #31, item 3, first slice): concatenate-and-chunk
//! windows, the next-token loss (shifted by one, padding masked) and its gradient against hand
//! values, held-out perplexity by hand, forgetting on a perplexity matrix, and a tiny Llama
//! trained on two domains in sequence through these pieces.

use engram::core::burn::module::Module;
use engram::core::burn::optim::{AdamConfig, GradientsParams};
use engram::core::burn::tensor::{Device, Int, Tensor, TensorData};
use engram::core::model::llama::{self, LlamaShape};
use engram::core::model::{Activation, ForwardCtx, Model};
use engram::core::train::lm::{
    LmMetrics, Perplexity, chunk_windows, next_token_loss, next_token_nll, perplexity_of,
};

fn logits3(rows: &[[[f32; 3]; 3]], device: &Device) -> Tensor<3> {
    let flat: Vec<f32> = rows.iter().flatten().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), 3, 3]), device)
}

fn ids2(rows: &[[i64; 3]], device: &Device) -> Tensor<2, Int> {
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), 3]), device)
}

/// Two windows over a vocabulary of 3. Window 0 = ids [0, 1, 2], all real: position 0's
/// logits [0, ln 2, 0] give p(1) = 2/4, position 1's [0, 0, 0] give p(2) = 1/3, position 2
/// predicts nothing: NLL = ln 2 + ln 3 = ln 6 over 2 tokens. Window 1 = ids [2, 0, 9], real
/// length 2 (9 is padding, outside the vocabulary, and must not count): position 0's logits
/// [ln 3, 0, 0] give p(0) = 3/5: NLL = ln(5/3) over 1 token. Batch: ln 10 over 3 tokens, so
/// perplexity 10^(1/3) = 2.15443; window 0 alone sqrt 6 = 2.44949.
fn hand_batch(device: &Device) -> (Tensor<3>, Tensor<2, Int>, Vec<usize>) {
    let l2 = 2f32.ln();
    let l3 = 3f32.ln();
    let logits = logits3(
        &[
            [[0.0, l2, 0.0], [0.0, 0.0, 0.0], [5.0, -5.0, 1.0]],
            [[l3, 0.0, 0.0], [7.0, 1.0, -2.0], [0.5, 0.5, 0.5]],
        ],
        device,
    );
    (logits, ids2(&[[0, 1, 2], [2, 0, 9]], device), vec![3, 2])
}

#[test]
fn perplexity_by_hand() {
    let d = Device::flex();
    let (logits, ids, lengths) = hand_batch(&d);
    let nll = next_token_nll(logits, ids, &lengths).unwrap();
    assert_eq!(nll.tokens, vec![2, 1]);
    let sums = nll
        .per_sample
        .clone()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert!((f64::from(sums[0]) - 6f64.ln()).abs() < 1e-5, "{sums:?}");
    assert!(
        (f64::from(sums[1]) - (5.0f64 / 3.0).ln()).abs() < 1e-5,
        "{sums:?}"
    );
    let mut ppl = Perplexity::default();
    ppl.add(&nll);
    assert_eq!(ppl.tokens, 3);
    let p = ppl.perplexity().unwrap();
    assert!((p - 10f64.powf(1.0 / 3.0)).abs() < 1e-5, "{p}");
    assert!((ppl.mean_nll().unwrap() - 10f64.ln() / 3.0).abs() < 1e-6);
    assert_eq!(Perplexity::default().perplexity(), None);
}

/// d(mean NLL)/dz at a counted position is (softmax(z) − onehot(target)) / N (N = 3 counted
/// tokens); every uncounted position (each window's last, window 1's padded one) gets 0.
#[test]
fn next_token_gradient_by_hand() {
    let ad = Device::flex().autodiff();
    let (logits, ids, lengths) = hand_batch(&ad);
    let logits = logits.require_grad();
    let loss = next_token_loss(logits.clone(), ids, &lengths).unwrap();
    let l = f64::from(loss.clone().into_scalar::<f32>());
    assert!((l - 10f64.ln() / 3.0).abs() < 1e-6, "{l}");
    let grads = loss.backward();
    let g = logits
        .grad(&grads)
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let n = 3.0;
    #[rustfmt::skip]
    let want: [f64; 18] = [
        0.25 / n, -0.5 / n, 0.25 / n,                 // w0 t0: softmax [1/4,1/2,1/4] - e1
        1.0 / 3.0 / n, 1.0 / 3.0 / n, -2.0 / 3.0 / n, // w0 t1: [1/3,1/3,1/3] - e2
        0.0, 0.0, 0.0,                                // w0 t2: predicts nothing
        -0.4 / n, 0.2 / n, 0.2 / n,                   // w1 t0: [3/5,1/5,1/5] - e0
        0.0, 0.0, 0.0,                                // w1 t1: padding follows
        0.0, 0.0, 0.0,                                // w1 t2: padding
    ];
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((f64::from(*a) - b).abs() < 1e-6, "[{i}] {a} vs {b}");
    }
}

#[test]
fn windows_concatenate_and_chunk() {
    let docs = vec![vec![1, 2, 3], vec![4, 5], vec![6, 7, 8, 9]];
    let w = chunk_windows(&docs, Some(0), 4).unwrap();
    // 1 2 3 0 | 4 5 0 6 | 7 8 9 0 : 12 tokens, 3 whole windows.
    assert_eq!(
        w,
        vec![vec![1, 2, 3, 0], vec![4, 5, 0, 6], vec![7, 8, 9, 0]]
    );
    let w = chunk_windows(&docs, None, 4).unwrap();
    // 9 tokens: two windows, the remainder [9] dropped.
    assert_eq!(w, vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]]);
    let e = chunk_windows(&docs, None, 0).unwrap_err().to_string();
    assert!(e.contains("window = 0"), "{e}");
}

#[test]
fn bad_batches_are_errors_not_panics() {
    let d = Device::flex();
    let (logits, ids, _) = hand_batch(&d);
    let e = next_token_nll(logits.clone(), ids.clone(), &[3]).unwrap_err();
    assert!(e.to_string().contains("lengths"), "{e}");
    let e = next_token_nll(logits.clone(), ids.clone(), &[3, 4]).unwrap_err();
    assert!(e.to_string().contains("lengths"), "{e}");
    // Counting window 1's third token brings id 9 into the loss: outside the vocabulary.
    let e = next_token_nll(logits.clone(), ids, &[3, 3]).unwrap_err();
    assert!(e.to_string().contains("vocabulary"), "{e}");
    let e = next_token_loss(logits, ids2(&[[0, 1, 2], [0, 0, 0]], &d), &[1, 0]).unwrap_err();
    assert!(e.to_string().contains("no window"), "{e}");
}

/// P = [[4, 30, 50], [8, 5, 40], [16, 10, 6]]: BWT = mean(ln 16 − ln 4, ln 10 − ln 5) =
/// 1.5 ln 2; forgetting = mean(ln 16 − min(ln 4, ln 8), ln 10 − ln 5) = 1.5 ln 2 too; mean
/// final perplexity (16 + 10 + 6)/3. An improvement gives negative BWT.
#[test]
fn forgetting_on_a_perplexity_matrix() {
    let p = vec![
        vec![Some(4.0), Some(30.0), Some(50.0)],
        vec![Some(8.0), Some(5.0), Some(40.0)],
        vec![Some(16.0), Some(10.0), Some(6.0)],
    ];
    let m = LmMetrics::compute(&p);
    assert!((m.mean_ppl.unwrap() - 32.0 / 3.0).abs() < 1e-12);
    assert!((m.bwt_log_ppl.unwrap() - 1.5 * 2f64.ln()).abs() < 1e-12);
    assert!((m.forgetting_log_ppl.unwrap() - 1.5 * 2f64.ln()).abs() < 1e-12);
    let better = LmMetrics::compute(&[vec![Some(8.0), None], vec![Some(4.0), Some(3.0)]]);
    assert!((better.bwt_log_ppl.unwrap() + 2f64.ln()).abs() < 1e-12);
    assert_eq!(LmMetrics::compute(&[vec![Some(3.0)]]).bwt_log_ppl, None);
}

/// A domain's documents: sequences of `next` from varied starts, 12 tokens each.
fn domain(next: fn(u32) -> u32, starts: std::ops::Range<u32>) -> Vec<Vec<u32>> {
    starts
        .map(|s| {
            let mut x = (s * 7) % 24;
            (0..12)
                .map(|_| {
                    let v = x;
                    x = next(x);
                    v
                })
                .collect()
        })
        .collect()
}

fn ids_of(windows: &[Vec<u32>], device: &Device) -> (Activation, Tensor<2, Int>, Vec<usize>) {
    let len = windows[0].len();
    let f: Vec<f32> = windows.iter().flatten().map(|&v| v as f32).collect();
    let i: Vec<i64> = windows.iter().flatten().map(|&v| i64::from(v)).collect();
    let shape = [windows.len(), len];
    (
        Activation::Flat(Tensor::from_data(TensorData::new(f, shape), device)),
        Tensor::from_data(TensorData::new(i, shape), device),
        vec![len; windows.len()],
    )
}

fn held_out_ppl(model: &Model, windows: &[Vec<u32>]) -> f64 {
    let inner = model.valid();
    let d = Device::flex();
    let (x, ids, lengths) = ids_of(windows, &d);
    let logits = inner
        .forward_tokens(x, &ForwardCtx::evaluation(None))
        .unwrap();
    let mut p = Perplexity::default();
    p.add(&next_token_nll(logits, ids, &lengths).unwrap());
    p.perplexity().unwrap()
}

/// Two domains in sequence on a tiny random Llama (vocab 24): A = `(3x + 1) mod 24`,
/// B = `(x + 5) mod 24`, documents concatenated with eos 23 and chunked into windows of 8.
/// Training A (30 Adam steps) takes A's held-out perplexity from about the vocabulary (24) to
/// under a third of it; training B then raises it again: forgetting > 0 on the 2×2 matrix.
#[test]
fn a_tiny_llama_on_two_domains_forgets_the_first() {
    let ad = Device::flex().autodiff();
    let shape = LlamaShape {
        layers: 2,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 64,
        vocab: 24,
        rope_base: 1e5,
        rms_eps: 1e-5,
        tied: true,
    };
    let mut rng = engram::core::rng::stream(11, "init", 0, 0);
    let mut model = llama::build_llama(&shape, &mut rng, &ad);
    let rules: [fn(u32) -> u32; 2] = [|x| (3 * x + 1) % 24, |x| (x + 5) % 24];
    let split = |next| {
        let train = chunk_windows(&domain(next, 0..24), Some(23), 8).unwrap();
        let test = chunk_windows(&domain(next, 24..30), Some(23), 8).unwrap();
        (train, test)
    };
    let data = [split(rules[0]), split(rules[1])];
    let before = held_out_ppl(&model, &data[0].1);
    let mut matrix: Vec<Vec<Option<f64>>> = Vec::new();
    for (train, _) in &data {
        let mut optim = AdamConfig::new().init();
        for step in 0..30 {
            let at = (step * 8) % (train.len() - 7);
            let (x, ids, lengths) = ids_of(&train[at..at + 8], &ad);
            let logits = model
                .forward_tokens(x, &ForwardCtx::training(None))
                .unwrap();
            let loss = next_token_loss(logits, ids, &lengths).unwrap();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(1e-2, model, grads);
        }
        matrix.push(
            data.iter()
                .map(|(_, t)| Some(held_out_ppl(&model, t)))
                .collect(),
        );
    }
    let m = LmMetrics::compute(&matrix);
    println!(
        "tiny llama, A then B: ppl(A) before {before:.3}, after A {:.3}, after B {:.3}; \
         ppl(B) after B {:.3}; BWT {:.3} nats/token, forgetting {:.3}",
        matrix[0][0].unwrap(),
        matrix[1][0].unwrap(),
        matrix[1][1].unwrap(),
        m.bwt_log_ppl.unwrap(),
        m.forgetting_log_ppl.unwrap()
    );
    assert!(before > 12.0 && before < 48.0, "{before}");
    assert!(matrix[0][0].unwrap() < before / 3.0, "{matrix:?}");
    assert!(matrix[1][1].unwrap() < before / 3.0, "{matrix:?}");
    assert!(m.forgetting_log_ppl.unwrap() > 0.0, "{matrix:?}");
}

/// `perplexity_of` in batches of 2 over 5 windows equals one pass over all 5 (token-weighted,
/// not a mean of batch perplexities), and refuses what it cannot score.
#[test]
fn perplexity_of_is_batch_invariant_and_refuses_bad_windows() {
    let d = Device::flex();
    let shape = LlamaShape {
        layers: 1,
        hidden: 16,
        heads: 2,
        kv_heads: 1,
        ffn: 32,
        vocab: 24,
        rope_base: 1e4,
        rms_eps: 1e-5,
        tied: false,
    };
    let mut rng = engram::core::rng::stream(3, "init", 0, 0);
    let model = llama::build_llama(&shape, &mut rng, &d);
    let windows = chunk_windows(&domain(|x| (x + 5) % 24, 0..4), Some(23), 6).unwrap();
    assert_eq!(windows.len(), 8); // 4 × (12 + 1) = 52 tokens: 8 windows of 6, 4 dropped
    let five = &windows[..5];
    let whole = held_out_ppl(&model, five);
    let p = perplexity_of(&model, five, 2, &d).unwrap();
    assert_eq!(p.tokens, 25);
    assert!(
        (p.perplexity().unwrap() - whole).abs() < 1e-4 * whole,
        "{p:?} vs {whole}"
    );
    for (w, b) in [(&windows[..0], 2), (five, 0), (&[vec![1u32]][..], 1)] {
        assert!(perplexity_of(&model, w, b, &d).is_err());
    }
    let ragged = vec![vec![1u32, 2, 3], vec![1, 2]];
    assert!(perplexity_of(&model, &ragged, 2, &d).is_err());
    let e = perplexity_of(&model, &[vec![1u32, 40]], 1, &d).unwrap_err();
    assert!(e.to_string().contains("vocabulary"), "{e}");
}

/// Texts through the tiny GGUF's byte-level BPE tokenizer into windows: the concatenation of
/// transformers' ids for each text (tests/data/gguf/llama-tiny.json, from
/// bench/reference/llama_gguf.py) each followed by the eos id 2, cut into windows of 8.
#[test]
fn texts_become_windows_of_transformers_ids() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf");
    let tok = engram::core::data::tokenizer::TextTokenizer::load(&root.join("llama-tiny.gguf"), 64)
        .unwrap();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("llama-tiny.json")).unwrap())
            .unwrap();
    let (mut texts, mut stream) = (Vec::new(), Vec::new());
    for t in r["texts"].as_array().unwrap() {
        texts.push(t["text"].as_str().unwrap().to_string());
        stream.extend(
            t["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32),
        );
        stream.push(2);
    }
    let got = engram::core::train::lm::windows_from_texts(&tok, &texts, Some(2), 8).unwrap();
    let want: Vec<Vec<u32>> = stream.chunks_exact(8).map(<[u32]>::to_vec).collect();
    assert!(want.len() >= 5, "{}", want.len());
    assert_eq!(got, want);
    assert!(engram::core::train::lm::windows_from_texts(&tok, &texts, Some(2), 0).is_err());
}
