//! Tests of `lora`: the chain rule through the adapters, merging, bad keys.

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::super::*;
    use engram_core::burn::tensor::Tensor;

    fn values(t: Tensor<1>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().unwrap()
    }

    /// `[d_in, d_out]` row-major product `a [d_in, r] · b [r, d_out]`.
    fn matmul(a: &[f32], b: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
        (0..n * m)
            .map(|ij| (0..k).map(|l| a[ij / m * k + l] * b[l * m + ij % m]).sum())
            .collect()
    }

    fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|ij| a[(ij % rows) * cols + ij / rows])
            .collect()
    }

    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * scale, "{what}[{i}]: {g} vs {w}");
        }
    }

    /// The base is frozen (no gradient), the head and the adapters train, and the adapters'
    /// gradients are the chain rule through `W = W₀ + s·A·B` (Hu et al. 2021, eq. 3):
    /// `∂L/∂B = s·Aᵀ·∂L/∂W` and `∂L/∂A = s·∂L/∂W·Bᵀ`, with `∂L/∂W` the plain model's weight
    /// gradient (equal at any `B` once the effective weight is the same).
    #[test]
    fn adapter_gradients_follow_the_chain_rule_and_the_base_gets_none() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let s = lora("rank = 2\nalpha = 6.0\ntargets = [\"0.linear\", \"1.linear\"]");
        let adapted = s.adapt(m.clone()).unwrap();
        let summary = s.summary();
        assert_eq!(
            summary.adapted,
            ["blocks.0.linear.weight", "blocks.1.linear.weight"]
        );
        // Adapters: (12 + 16)·2 + (16 + 16)·2 = 120; head: 16·4 + 4 = 68.
        assert_eq!(summary.adapter_parameters, 120);
        assert_eq!(summary.trainable_parameters, 188);
        assert_eq!(adapted.trainable_numel(), 188);
        // The frozen base: every original parameter but the head's 68.
        assert_eq!(summary.frozen_parameters as usize, m.numel() - 68);
        // Move B away from 0 so both factor gradients are non-zero: one SGD step.
        let g = step_grads(&adapted, &b);
        let names: Vec<String> = adapted
            .flat_grads(&g)
            .iter()
            .map(|(i, _)| i.path.clone())
            .collect();
        assert_eq!(
            names,
            [
                "blocks.0.linear.weight.lora.a",
                "blocks.0.linear.weight.lora.b",
                "blocks.1.linear.weight.lora.a",
                "blocks.1.linear.weight.lora.b",
                "blocks.2.linear.weight",
                "blocks.2.linear.bias"
            ],
            "only the adapters and the head get gradients"
        );
        let mut optim = engram_core::train::trainer::sgd(0.0, None);
        let adapted = optim.step(0.5, adapted, g);
        // The plain model with the adapted model's effective weights.
        let plain = adapted
            .clone()
            .materialize()
            .unfreeze_group(ParamGroup::all());
        let g_lora = adapted.flat_grads(&step_grads(&adapted, &b));
        let g_plain = plain.flat_grads(&step_grads(&plain, &b));
        let by_path = |gs: &[(engram_core::model::ParamInfo, Tensor<1>)], p: &str| {
            values(gs.iter().find(|(i, _)| i.path == p).unwrap().1.clone())
        };
        let param = |m: &Model, p: &str| {
            values(
                m.param_values()
                    .into_iter()
                    .find(|(i, _)| i.path == p)
                    .unwrap()
                    .1,
            )
        };
        let sc = 3.0; // α / r
        for (l, d_in, d_out) in [(0, 12, 16), (1, 16, 16)] {
            let gw = by_path(&g_plain, &format!("blocks.{l}.linear.weight"));
            let a = param(&adapted, &format!("blocks.{l}.linear.weight.lora.a"));
            let bb = param(&adapted, &format!("blocks.{l}.linear.weight.lora.b"));
            assert!(bb.iter().any(|v| *v != 0.0), "B moved off zero");
            let want_b: Vec<f32> = matmul(&transpose(&a, d_in, 2), &gw, 2, d_in, d_out)
                .into_iter()
                .map(|v| v * sc)
                .collect();
            let want_a: Vec<f32> = matmul(&gw, &transpose(&bb, 2, d_out), d_in, d_out, 2)
                .into_iter()
                .map(|v| v * sc)
                .collect();
            let got_b = by_path(&g_lora, &format!("blocks.{l}.linear.weight.lora.b"));
            let got_a = by_path(&g_lora, &format!("blocks.{l}.linear.weight.lora.a"));
            assert_close(&got_b, &want_b, 1e-4, &format!("dL/dB of layer {l}"));
            assert_close(&got_a, &want_a, 1e-4, &format!("dL/dA of layer {l}"));
        }
        // The base did not move: the adapted model's stored base is the original weight.
        let base_after: Vec<(String, Vec<f32>)> = adapted
            .param_values()
            .into_iter()
            .filter(|(i, _)| i.path == "blocks.0.linear.weight")
            .map(|(i, t)| (i.path, values(t)))
            .collect();
        assert_eq!(base_after[0].1, param(&m, "blocks.0.linear.weight"));
    }
}

#[cfg(test)]
mod merge_tests {
    use super::super::tests_support::*;
    use super::super::*;
    use engram_core::burn::tensor::Tensor;
    use engram_core::model::{Activation, ForwardCtx};

    fn logits(m: &Model, b: &engram_core::data::stream::Batch) -> Vec<f32> {
        let x = match &b.x {
            engram_core::data::input::Input::Float(t) => t.clone(),
            _ => unreachable!(),
        };
        m.valid()
            .forward(Activation::Flat(x.inner()), &ForwardCtx::default())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    }

    /// Merging is an exact round trip: the merged model's logits equal the adapted model's, and
    /// `merge = "task"` leaves fresh adapters (`B = 0`) that change nothing.
    #[test]
    fn merged_outputs_equal_adapted_outputs() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let mut s =
            lora("rank = 4\nalpha = 8.0\ntargets = [\"0.linear\", \"1.linear\"]\nmerge = \"task\"");
        let adapted = s.adapt(m).unwrap();
        let g = step_grads(&adapted, &b);
        let adapted = engram_core::train::trainer::sgd(0.0, None).step(0.5, adapted, g);
        let before = logits(&adapted, &b);
        let merged_plain = adapted.clone().materialize();
        assert!(
            merged_plain
                .params()
                .iter()
                .all(|i| !i.path.contains(".lora."))
        );
        let diff = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(diff(&logits(&merged_plain, &b), &before) < 1e-5);
        let stream = crate::test_util::toy_stream();
        let merged = s
            .task_end_model(adapted, &crate::test_util::task_info(&stream, 0))
            .unwrap();
        assert!(diff(&logits(&merged, &b), &before) < 1e-5);
        assert_eq!(s.summary().merges, 1);
        for (i, t) in merged.param_values() {
            if i.path.ends_with(".lora.b") {
                let v: Vec<f32> = t.into_data().try_to_vec::<f32>().unwrap();
                assert!(v.iter().all(|x| *x == 0.0), "{} is fresh", i.path);
            }
        }
        assert_eq!(merged.trainable_numel(), 4 * (12 + 16 + 16 + 16) + 68);
        let _: Option<Tensor<1>> = None;
    }

    /// LoRA composes with segment checkpointing: the checkpointed step's gradients of the
    /// adapters and the head equal the plain step's.
    #[test]
    fn checkpointed_lora_gradients_equal_plain_ones() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let adapted = lora("rank = 2\ntargets = [\"linear\"]").adapt(m).unwrap();
        let req = || StepRequest {
            model: &adapted,
            batch: b.clone(),
            loss: &CE,
            loss_scale: 1.0,
            compute_dtype: None,
            rng_seed: 7,
        };
        let flat = |o: StepOutcome| -> Vec<(String, Vec<f32>)> {
            adapted
                .flat_grads(&o.grads)
                .into_iter()
                .map(|(i, g)| (i.path, g.into_data().try_to_vec::<f32>().unwrap()))
                .collect()
        };
        let want = flat(crate::standard::plain_step(req()).unwrap());
        let got = flat(
            crate::checkpoint::checkpointed_step(
                req(),
                &crate::checkpoint::Checkpoint::new(1).segments(adapted.num_blocks()),
            )
            .unwrap(),
        );
        assert_eq!(
            got.iter().map(|g| &g.0).collect::<Vec<_>>(),
            want.iter().map(|g| &g.0).collect::<Vec<_>>()
        );
        // Head adapted too (targets "linear" names it): its base trains as well (head = true).
        assert_eq!(want.len(), 3 * 2 + 2);
        for ((p, g), (_, w)) in got.iter().zip(&want) {
            for (x, y) in g.iter().zip(w) {
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1e-3), "{p}: {x} vs {y}");
            }
        }
    }

    /// A target that names no layer is a typed error listing the layers the model has.
    #[test]
    fn targets_that_name_nothing_list_the_layers() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, _) = setup();
        let e = lora("targets = [\"query\"]")
            .adapt(m)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("name no rank-2 parameter") && e.contains("linear"),
            "{e}"
        );
    }

    /// Bad keys are positioned errors at the key.
    #[test]
    fn bad_keys_are_refused_at_their_line() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        for (text, key) in [
            ("rank = 0", "rank must be at least 1"),
            ("alpha = -1.0", "alpha must be a positive number"),
            ("targets = []", "targets must name at least one layer"),
            (
                "dropout = 0.1\npath = \"weight\"",
                "needs the adapter on the activation path",
            ),
            (
                "quantize = \"int8\"\npath = \"activation\"",
                "quantize (QLoRA) is Burn's, on the weight path",
            ),
            (
                "block = 300\nquantize = \"int4\"",
                "block must be at most 255",
            ),
        ] {
            let src = ParamSource::from_toml(&format!("type = \"lora\"\n{text}"));
            let cx = engram_core::registry::BuildContext {
                num_tasks: 1,
                num_classes: 2,
                batch_size: 4,
                seed: 0,
            };
            let Err(e) = build(&src, &cx) else {
                panic!("{text} was accepted")
            };
            let e = e.to_string();
            assert!(e.contains(key) && e.contains(":3:1:"), "{text}: {e}");
        }
    }
}

#[cfg(test)]
mod qlora_tests {
    use super::super::tests_support::*;
    use super::super::*;
    use engram_core::burn::tensor::Tensor;

    fn values(t: Tensor<1>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().unwrap()
    }

    /// The parameter at `path` of `m`, dequantized when it is held quantized.
    fn param(m: &Model, path: &str) -> Vec<f32> {
        let t = m
            .param_values()
            .into_iter()
            .find(|(i, _)| i.path == path)
            .unwrap()
            .1;
        match t.dtype() {
            engram_core::burn::tensor::DType::QFloat(_) => values(t.dequantize()),
            _ => values(t),
        }
    }

    /// Symmetric absmax quantization by hand, as QLoRA's base is held (Dettmers et al. 2023,
    /// eq. 1, with integers instead of NF4): per block of `block` values along each row,
    /// `s = max|w| / qmax`, `w' = s · clamp(round(w / s), −qmax, qmax)`.
    fn quantized_by_hand(w: &[f32], block: usize, qmax: f32) -> Vec<f32> {
        w.chunks(block)
            .flat_map(|b| {
                let s = b.iter().fold(0.0f32, |m, v| m.max(v.abs())) / qmax;
                b.iter()
                    .map(move |v| s * (v / s).round().clamp(-qmax, qmax))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// `quantize = "int8"` / `"int4"`: the frozen projection weights are held quantized (Burn's
    /// QLoRA) with exactly the hand-computed values, the head stays in `f32` and trains, the
    /// adapters' gradients are the chain rule through `dequantize(W₀) + s·A·B` (the plain
    /// model's weight gradient, as for LoRA), a step leaves the packed base as it was, and
    /// `param_bytes` counts the packed base: one `i8` a value and one `f32` scale a block on
    /// the CPU.
    #[test]
    fn a_quantized_base_holds_hand_computed_values_and_trains_only_the_adapters() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        for (kind, qmax) in [("int8", 127.0f32), ("int4", 7.0)] {
            let (m, b) = setup();
            let s = lora(&format!(
                "rank = 2\nalpha = 4.0\ntargets = [\"0.linear\"]\nquantize = \"{kind}\"\nblock = 8"
            ));
            let adapted = s.adapt(m.clone()).unwrap();
            let summary = s.summary();
            // Quantized: the frozen linear weights, 12·16 + 16·16 (the head's 16·4 trains).
            assert_eq!(summary.quantized_parameters, 448, "{kind}");
            for (l, d_out) in [(0, 16), (1, 16)] {
                let p = format!("blocks.{l}.linear.weight");
                let want = quantized_by_hand(&param(&m, &p), 8, qmax);
                assert_eq!(want.len() % d_out, 0);
                let got = param(&adapted, &p);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!((g - w).abs() <= 1e-6, "{kind} {p}[{i}]: {g} vs {w}");
                }
            }
            // One adapter (12 + 16)·2 = 56, the head's 68, the rest frozen.
            assert_eq!(adapted.trainable_numel(), 56 + 68, "{kind}");
            // Bytes: 448 values of one byte + 448/8 scales of 4 bytes, the biases (16 + 16) and
            // the head (68) in f32, the adapter's 56 in f32.
            let want_bytes = 448 + 56 * 4 + (16 + 16 + 68) * 4 + 56 * 4;
            assert_eq!(adapted.param_bytes(), want_bytes as u64, "{kind}");
            assert_eq!(summary.parameter_bytes, want_bytes as u64);
            assert_eq!(m.param_bytes(), m.numel() as u64 * 4);
            let g = step_grads(&adapted, &b);
            let names: Vec<String> = adapted
                .flat_grads(&g)
                .iter()
                .map(|(i, _)| i.path.clone())
                .collect();
            assert_eq!(
                names,
                [
                    "blocks.0.linear.weight.lora.a",
                    "blocks.0.linear.weight.lora.b",
                    "blocks.2.linear.weight",
                    "blocks.2.linear.bias"
                ],
                "{kind}: only the adapter and the head get gradients"
            );
            let stepped = engram_core::train::trainer::sgd(0.0, None).step(0.5, adapted.clone(), g);
            assert_eq!(
                param(&stepped, "blocks.0.linear.weight"),
                param(&adapted, "blocks.0.linear.weight"),
                "{kind}: the packed base does not move"
            );
            // The chain rule at B ≠ 0 against the plain model of the same effective weights.
            let plain = stepped
                .clone()
                .materialize()
                .unfreeze_group(ParamGroup::all());
            let gw = plain.flat_grads(&step_grads(&plain, &b));
            let gl = stepped.flat_grads(&step_grads(&stepped, &b));
            let by = |gs: &[(engram_core::model::ParamInfo, Tensor<1>)], p: &str| {
                values(gs.iter().find(|(i, _)| i.path == p).unwrap().1.clone())
            };
            let gw0 = by(&gw, "blocks.0.linear.weight");
            let a = param(&stepped, "blocks.0.linear.weight.lora.a");
            let bb = param(&stepped, "blocks.0.linear.weight.lora.b");
            assert!(bb.iter().any(|v| *v != 0.0));
            // ∂L/∂B[k][j] = s·Σᵢ A[i][k]·∂L/∂W[i][j], s = α/r = 2.
            let want_b: Vec<f32> = (0..2 * 16)
                .map(|kj| {
                    2.0 * (0..12)
                        .map(|i| a[i * 2 + kj / 16] * gw0[i * 16 + kj % 16])
                        .sum::<f32>()
                })
                .collect();
            let got_b = by(&gl, "blocks.0.linear.weight.lora.b");
            let scale = want_b.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
            for (g, w) in got_b.iter().zip(&want_b) {
                assert!((g - w).abs() <= 1e-4 * scale, "{kind} dL/dB: {g} vs {w}");
            }
        }
    }

    /// A block that does not divide a quantized weight's output dimension is refused at
    /// `block`, with the largest that does.
    #[test]
    fn a_block_that_does_not_divide_a_weight_is_refused_with_one_that_does() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, _) = setup();
        let mut s = lora("targets = [\"0.linear\"]\nrank = 2\nquantize = \"int8\"\nblock = 5");
        s.src = Some(ParamSource::from_toml(
            "targets = [\"0.linear\"]\nrank = 2\nquantize = \"int8\"\nblock = 5",
        ));
        let err = s.adapt(m).unwrap_err().to_string();
        assert!(err.contains("block = 5 does not divide"), "{err}");
        assert!(err.contains("block = 16"), "{err}");
    }

    /// `merge = "task"` over a quantized base: the merged weight `dequantize(W₀) + s·A·B` is
    /// quantized anew (its values are the hand quantization of the merge, so each merge adds
    /// one quantization error), the weights without an adapter stay packed as they were, and
    /// fresh adapters follow.
    #[test]
    fn a_merge_over_a_quantized_base_quantizes_the_merged_weight_anew() {
        let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (m, b) = setup();
        let mut s = lora(
            "rank = 2\ntargets = [\"0.linear\"]\nquantize = \"int8\"\nblock = 8\nmerge = \"task\"",
        );
        let adapted = s.adapt(m).unwrap();
        let g = step_grads(&adapted, &b);
        let adapted = engram_core::train::trainer::sgd(0.0, None).step(0.5, adapted, g);
        let dense = param(&adapted.clone().materialize(), "blocks.0.linear.weight");
        let untouched = param(&adapted, "blocks.1.linear.weight");
        let stream = crate::test_util::toy_stream();
        let merged = s
            .task_end_model(adapted, &crate::test_util::task_info(&stream, 0))
            .unwrap();
        let want = quantized_by_hand(&dense, 8, 127.0);
        let got = param(&merged, "blocks.0.linear.weight");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-6, "merged[{i}]: {g} vs {w}");
        }
        assert_eq!(param(&merged, "blocks.1.linear.weight"), untouched);
        assert_eq!(s.summary().quantized_parameters, 448);
        assert!(
            param(&merged, "blocks.0.linear.weight.lora.b")
                .iter()
                .all(|v| *v == 0.0)
        );
    }
}
