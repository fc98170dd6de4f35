//! vendor/burn-flex's changes compute bit for bit what the published burn-flex 0.22.1 computes
//! (vendor/README.md). Each test sets a patched kernel beside a path the patch left untouched:
//! the published `TensorData::random`, the generic max-pool loop, an element-by-element gather.
//! The one change that sums in another order, the conv2d weight gradient, is checked against a
//! gradient summed by hand on integer-valued inputs, where every order gives the same sum.

use engram::core::burn::tensor::ops::MaxPoolOptions;
use engram::core::burn::tensor::{DType, Device, Distribution, Tensor, TensorData, module};

/// FNV-1a over the bit patterns of `values`: a digest that moves with any bit of any value.
fn digest(values: &[f32]) -> u64 {
    values.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01b3)
    })
}

/// The backend's `float_random` (one sampler a tensor) draws the very numbers burn-std's
/// `TensorData::random` (one sampler an element) draws from the same seeded generator: dropout
/// masks (Bernoulli), uniform and normal initialisations, f32. The digests and sums are those of
/// `TensorData::random::<f32>([37, 29], dist, &mut StdRng::seed_from_u64(seed))`, the published
/// path, recorded with rand 0.10.4 (a test beside it compared the two draw for draw; rand is
/// not a dependency here, so that `cargo test` builds Burn with `cargo build`'s features).
#[test]
fn random_tensors_are_the_published_draws() {
    let device = Device::flex();
    let published = [
        (
            Distribution::Bernoulli(0.9),
            0xafe5_b63c_a2a3_171f_u64,
            971.0_f32,
        ),
        (
            Distribution::Uniform(-0.5, 2.0),
            0x1e91_3afc_06f9_0289,
            785.225_46,
        ),
        (
            Distribution::Normal(0.1, 3.0),
            0x739f_aa8a_f89c_0bf7,
            128.732_21,
        ),
        (Distribution::Default, 0xdffc_fc9d_91f6_9b6d, 523.317_75),
    ];
    for (i, (dist, want, sum)) in published.into_iter().enumerate() {
        device.seed(40 + i as u64);
        let ours = Tensor::<2>::random([37, 29], dist, &device)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(ours.len(), 37 * 29);
        assert_eq!(ours.iter().sum::<f32>(), sum, "{dist:?}");
        assert_eq!(digest(&ours), want, "{dist:?}: {:#018x}", digest(&ours));
    }
    // A Bernoulli(0.9) mask by hand: 971 of its 1,073 entries are 1, the others 0.
    device.seed(40);
    let mask = Tensor::<2>::random([37, 29], Distribution::Bernoulli(0.9), &device)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(mask.iter().filter(|&&x| x == 1.0).count(), 971);
    assert_eq!(mask.iter().filter(|&&x| x == 0.0).count(), 1073 - 971);
    // f32 masks are drawn in blocks of words (`bernoulli_f32`); f64 ones still one sampler call
    // an element. The same seed gives the same mask in both, over several blocks and a partial
    // one, and leaves the generator in the same place (the next draw is the same too).
    for p in [0.0, 0.1, 0.9, 0.999_999] {
        let draw = |dtype: DType| -> (Vec<f32>, Vec<f32>) {
            device.seed(77);
            let like = Tensor::<1>::zeros([5_000], &device).cast(dtype);
            let mask = like.random_like(Distribution::Bernoulli(p));
            let next = Tensor::<1>::random([3], Distribution::Default, &device);
            let v = |t: Tensor<1>| t.cast(DType::F32).into_data().try_to_vec::<f32>().unwrap();
            (v(mask), v(next))
        };
        let (f32s, after_f32) = draw(DType::F32);
        let (f64s, after_f64) = draw(DType::F64);
        assert_eq!(digest(&f32s), digest(&f64s), "Bernoulli({p})");
        assert_eq!(
            digest(&after_f32),
            digest(&after_f64),
            "after Bernoulli({p})"
        );
        let ones = f32s.iter().filter(|&&x| x == 1.0).count();
        assert_eq!(ones + f32s.iter().filter(|&&x| x == 0.0).count(), 5_000);
        assert!((ones as f64 - 5_000.0 * p).abs() < 5.0 * (5_000.0 * p * (1.0 - p)).sqrt() + 1.0);
    }
}

/// The 2x2, stride-2 max pool's own loop against the generic loop (reached by `ceil_mode` on an
/// even-sized input, where it gives the same windows): values and argmax indices, on values with
/// ties (the first of equal values wins) and NaNs (a NaN wins, the last one in the window).
#[test]
fn the_2x2_max_pool_is_the_generic_loop() {
    let device = Device::flex();
    let (n, c, h, w) = (3, 4, 6, 8);
    let mut values: Vec<f32> = (0..n * c * h * w)
        .map(|i| ((i * 7919) % 5) as f32 - 2.0)
        .collect();
    // The first plane's second window (x[2], x[3], x[10], x[11]) ties at 3.0, its third holds
    // one NaN (x[5]), its fourth two (x[6], x[15]).
    for (i, v) in [(2, 1.0), (3, 3.0), (10, 3.0), (11, 0.0)] {
        values[i] = v;
    }
    for i in [5, 6, 15] {
        values[i] = f32::NAN;
    }
    let x = Tensor::<4>::from_data(TensorData::new(values, [n, c, h, w]), &device);
    let pool = |ceil| {
        let (y, idx) = module::max_pool2d_with_indices(
            x.clone(),
            MaxPoolOptions::new([2, 2]).with_ceil_mode(ceil),
        );
        (y.into_data().try_to_vec::<f32>().unwrap(), idx.into_data())
    };
    let (fast, fast_idx) = pool(false);
    let (generic, generic_idx) = pool(true);
    assert_eq!(fast.len(), n * c * (h / 2) * (w / 2));
    assert!(
        fast.iter()
            .zip(&generic)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    assert_eq!(fast_idx, generic_idx);
    // By hand, the first plane's first four windows: x[0..2], x[8..10] = -2, 2, 0, -1 gives 2
    // at 1; the tie gives the first 3.0 (index 3); a NaN wins (index 5); of two NaNs the last
    // (index 15).
    let idx = fast_idx.convert::<i64>().try_to_vec::<i64>().unwrap();
    assert_eq!((fast[0], idx[0]), (2.0, 1));
    assert_eq!((fast[1], idx[1]), (3.0, 3));
    assert!(fast[2].is_nan() && idx[2] == 5, "{} at {}", fast[2], idx[2]);
    assert!(
        fast[3].is_nan() && idx[3] == 15,
        "{} at {}",
        fast[3],
        idx[3]
    );
}

/// A copy of strided rows (the `[C, N, H·W]` view batch norm reshapes) equals an element-by-
/// element gather of the same view.
#[test]
fn strided_rows_copy_as_gathered() {
    let device = Device::flex();
    let (n, c, h, w) = (5, 3, 4, 7);
    let values: Vec<f32> = (0..n * c * h * w).map(|i| i as f32 * 0.5 - 3.0).collect();
    let x = Tensor::<4>::from_data(TensorData::new(values.clone(), [n, c, h, w]), &device);
    let got = x
        .swap_dims(0, 1)
        .reshape([c, n * h * w])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let mut want = Vec::with_capacity(values.len());
    for ci in 0..c {
        for ni in 0..n {
            for s in 0..h * w {
                want.push(values[(ni * c + ci) * h * w + s]);
            }
        }
    }
    assert_eq!(got, want);
}

/// Values with a spread of magnitudes and signs, so that sums round differently in another order.
fn spread(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let k = (i * 7919 + seed * 104_729) % 1009;
            (k as f32 - 500.0) / 97.0 * if k.is_multiple_of(7) { 31.0 } else { 1.0 }
        })
        .collect()
}

/// Burn's published `ModuleOps::batch_norm_train` and `batch_norm_train_backward` (the trait's
/// defaults, composed from tensor ops) written out with the same tensor ops: mean and biased
/// variance over the `[C, N·spatial]` rows, then `((x − μ)/√(σ² + ε))·γ + β`; and the backward's
/// `∂β = Σg`, `∂γ = Σg·x̂`, `∂x = γ/σ · ((g − ∂β/M) − x̂·∂γ/M)`.
fn composed_batch_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    grad: Tensor<D>,
    eps: f64,
) -> [Vec<f32>; 6] {
    let dims = x.dims();
    let c = dims[1];
    let m = x.shape().num_elements() / c;
    let mut per = [1; D];
    per[1] = c;
    let rows = |t: Tensor<D>| t.swap_dims(0, 1).reshape([c, m]);
    let mean = rows(x.clone()).mean_dim(1).reshape(per);
    let centered = x.clone() - mean.clone();
    let var = rows(centered.clone() * centered).mean_dim(1).reshape(per);
    let std = (var.clone() + eps).sqrt();
    let out = (x.clone() - mean.clone()) / std * gamma.clone().reshape(per) + beta.reshape(per);
    let inv_std = (var.clone() + eps).sqrt().recip();
    let normalized = (x - mean.clone()) * inv_std.clone();
    let beta_grad = rows(grad.clone()).sum_dim(1);
    let gamma_grad = rows(grad.clone() * normalized.clone()).sum_dim(1);
    let mean_grad = rows(grad.clone()).mean_dim(1).reshape(per);
    let mean_normalized_grad = rows(grad.clone() * normalized.clone())
        .mean_dim(1)
        .reshape(per);
    let x_grad =
        (gamma.reshape(per) * inv_std) * ((grad - mean_grad) - normalized * mean_normalized_grad);
    let v = |t: Tensor<D>| t.into_data().try_to_vec::<f32>().unwrap();
    let v2 = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
    [
        v(out),
        v(mean),
        v(var),
        v(x_grad),
        v2(gamma_grad),
        v2(beta_grad),
    ]
}

/// The one-pass batch normalization (`src/ops/batch_norm.rs`) against Burn's composed default,
/// bit for bit: the output, the batch statistics, and the gradients of the input, γ and β, for a
/// 4-d input (the CNN's), a 3-d one and a transposed (non-contiguous) one, at sizes below and
/// above the kernel's parallel threshold; and the inference path with given statistics.
#[test]
fn batch_norm_is_the_composed_default() {
    let flex = Device::flex();
    let ad = flex.clone().autodiff();
    let eps = 1e-5;
    let cases: [[usize; 4]; 3] = [[5, 3, 4, 7], [64, 16, 6, 7], [3, 2, 1, 1]];
    for (k, dims) in cases.into_iter().enumerate() {
        let [n, c, h, w] = dims;
        let len = n * c * h * w;
        let x = TensorData::new(spread(len, k), dims);
        let g = TensorData::new(spread(len, k + 10), dims);
        let gamma = TensorData::new(spread(c, k + 20), [c]);
        let beta = TensorData::new(spread(c, k + 30), [c]);
        let want = composed_batch_norm(
            Tensor::<4>::from_data(x.clone(), &flex),
            Tensor::<1>::from_data(gamma.clone(), &flex),
            Tensor::<1>::from_data(beta.clone(), &flex),
            Tensor::<4>::from_data(g.clone(), &flex),
            eps,
        );
        let xa = Tensor::<4>::from_data(x.clone(), &ad).require_grad();
        let ga = Tensor::<1>::from_data(gamma.clone(), &ad).require_grad();
        let ba = Tensor::<1>::from_data(beta.clone(), &ad).require_grad();
        let r = module::batch_norm_train(xa.clone(), ga.clone(), ba.clone(), eps);
        let v = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().unwrap();
        let v1 = |t: Tensor<1>| t.into_data().try_to_vec::<f32>().unwrap();
        // d(Σ out·g)/d out = g exactly: the backward sees the same output gradient.
        let grads = (r.output.clone() * Tensor::<4>::from_data(g.clone(), &ad))
            .sum()
            .backward();
        let got = [
            v(r.output),
            v1(r.mean.clone()),
            v1(r.variance.clone()),
            v(xa.grad(&grads).unwrap()),
            v1(ga.grad(&grads).unwrap()),
            v1(ba.grad(&grads).unwrap()),
        ];
        let names = [
            "output",
            "mean",
            "variance",
            "x grad",
            "gamma grad",
            "beta grad",
        ];
        for ((name, got), want) in names.iter().zip(&got).zip(&want) {
            assert_eq!(got.len(), want.len(), "{dims:?} {name}");
            let same = got
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{dims:?} {name}: {:?} vs {:?}", &got[..3], &want[..3]);
        }
        // Inference with the batch's statistics gives the training output.
        let infer = |input: Tensor<4>| {
            module::batch_norm(
                input,
                Tensor::<1>::from_data(gamma.clone(), &flex),
                Tensor::<1>::from_data(beta.clone(), &flex),
                Tensor::<1>::from_data(TensorData::new(want[1].clone(), [c]), &flex),
                Tensor::<1>::from_data(TensorData::new(want[2].clone(), [c]), &flex),
                eps,
            )
        };
        let eval = infer(Tensor::<4>::from_data(x.clone(), &flex));
        assert_eq!(v(eval), want[0], "{dims:?} inference");
        // That input had no other handle, so it was normalized in place; a shared one is left
        // as it was and the output is a new tensor with the same values.
        let shared = Tensor::<4>::from_data(x.clone(), &flex);
        assert_eq!(v(infer(shared.clone())), want[0], "{dims:?} shared input");
        let kept = x.try_to_vec::<f32>().unwrap();
        assert_eq!(v(shared), kept, "{dims:?} input kept");
        // Each channel of the output has mean β (to rounding): the statistics are per channel.
        let out = &want[0];
        let beta = beta.try_to_vec::<f32>().unwrap();
        for (ci, b) in beta.iter().enumerate() {
            let s: f64 = (0..n)
                .flat_map(|ni| out[(ni * c + ci) * h * w..][..h * w].iter())
                .map(|&o| f64::from(o))
                .sum();
            let mean = s / (n * h * w) as f64;
            assert!(
                (mean - f64::from(*b)).abs() < 1e-3,
                "{dims:?} channel {ci}: {mean} vs {b}"
            );
        }
    }
    // A 3-d input given as a transposed view ([N, C, L] from an [N, L, C] tensor).
    let (n, l, c) = (6, 5, 4);
    let x = || Tensor::<3>::from_data(TensorData::new(spread(n * l * c, 7), [n, l, c]), &flex);
    let g = || Tensor::<3>::from_data(TensorData::new(spread(n * l * c, 8), [n, c, l]), &flex);
    let gamma = || Tensor::<1>::from_data(TensorData::new(spread(c, 9), [c]), &flex);
    let beta = || Tensor::<1>::from_data(TensorData::new(spread(c, 11), [c]), &flex);
    let want = composed_batch_norm(x().swap_dims(1, 2), gamma(), beta(), g(), eps);
    let xa = Tensor::<3>::from_data(x().into_data(), &ad).require_grad();
    let ga = Tensor::<1>::from_data(gamma().into_data(), &ad).require_grad();
    let r = module::batch_norm_train(
        xa.clone().swap_dims(1, 2),
        ga.clone(),
        beta().to_device(&ad),
        eps,
    );
    let grads = (r.output.clone() * g().to_device(&ad)).sum().backward();
    let v3 = |t: Tensor<3>| t.into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(v3(r.output), want[0]);
    // The input's gradient comes back in the input's [N, L, C] order.
    assert_eq!(v3(xa.grad(&grads).unwrap().swap_dims(1, 2)), want[3]);
    assert_eq!(
        ga.grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        want[4]
    );
}

/// The convolution's copies (the weight's and the input's tiled transposes, the im2col rows, the
/// transposed convolution's row adds) against a direct convolution by hand, on small integers,
/// where every sum is exact in any order: the forward output and the gradients of the input and
/// the weight (3 x 3, padding 1), at the CNN's shapes and at shapes that take the generic path.
#[test]
fn convolution_copies_against_a_direct_convolution() {
    use engram::core::burn::tensor::ops::ConvOptions;
    let flex = Device::flex();
    let ad = flex.clone().autodiff();
    let int = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 31) % 7) as f32 - 3.0)
            .collect()
    };
    // [batch, in, out, height, width]: the recipe's first and second layers, and a small case
    // on the generic path in both directions (more than 4 input channels, batch above 4). In
    // pools of one thread and of three: the second layer's input gradient (a transposed
    // convolution of 75k outputs but 22M multiply-adds) is split by sample, one column buffer a
    // worker, and must give the same sums on one worker as on three.
    let cases = [
        (1, [8, 1, 16, 10, 10]),
        (3, [24, 16, 32, 14, 14]),
        (1, [24, 16, 32, 14, 14]),
        (3, [5, 6, 5, 6, 7]),
    ];
    for (threads, [n, ci, co, h, w]) in cases {
        let pool = pool(threads);
        let xs = int(n * ci * h * w, 1);
        let ws = int(co * ci * 9, 2);
        let gs = int(n * co * h * w, 3);
        let x =
            Tensor::<4>::from_data(TensorData::new(xs.clone(), [n, ci, h, w]), &ad).require_grad();
        let wt =
            Tensor::<4>::from_data(TensorData::new(ws.clone(), [co, ci, 3, 3]), &ad).require_grad();
        let v = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().unwrap();
        let (out, dx, dw) = pool.install(|| {
            let out = module::conv2d(
                x.clone(),
                wt.clone(),
                None,
                ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
            );
            let g = Tensor::<4>::from_data(TensorData::new(gs.clone(), [n, co, h, w]), &ad);
            let grads = (out.clone() * g).sum().backward();
            (
                v(out),
                v(x.grad(&grads).unwrap()),
                v(wt.grad(&grads).unwrap()),
            )
        });
        let xi = |b: usize, c: usize, y: isize, z: isize| -> f64 {
            if y < 0 || z < 0 || y >= h as isize || z >= w as isize {
                0.0
            } else {
                f64::from(xs[((b * ci + c) * h + y as usize) * w + z as usize])
            }
        };
        let (mut want_out, mut want_dx, mut want_dw) = (
            vec![0.0; out.len()],
            vec![0.0; dx.len()],
            vec![0.0; dw.len()],
        );
        for b in 0..n {
            for o in 0..co {
                for y in 0..h {
                    for z in 0..w {
                        let gi = f64::from(gs[((b * co + o) * h + y) * w + z]);
                        let mut acc = 0.0;
                        for c in 0..ci {
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let (iy, ix) = (
                                        y as isize + ky as isize - 1,
                                        z as isize + kx as isize - 1,
                                    );
                                    let wi = (o * ci + c) * 9 + ky * 3 + kx;
                                    let xv = xi(b, c, iy, ix);
                                    acc += xv * f64::from(ws[wi]);
                                    want_dw[wi] += gi * xv;
                                    if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                                        let xi_ =
                                            ((b * ci + c) * h + iy as usize) * w + ix as usize;
                                        want_dx[xi_] += gi * f64::from(ws[wi]);
                                    }
                                }
                            }
                        }
                        want_out[((b * co + o) * h + y) * w + z] = acc;
                    }
                }
            }
        }
        let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
        let case = format!("[{n}, {ci}, {co}, {h}, {w}] on {threads} thread(s)");
        assert_eq!(out, f(want_out), "{case}: output");
        assert_eq!(dx, f(want_dx), "{case}: input gradient");
        assert_eq!(dw, f(want_dw), "{case}: weight gradient");
    }
}

/// conv2d's weight gradient (one GEMM a sample) against the definition by hand, on small
/// integers (exact sums): `∂W[o][c][ky][kx] = Σ_{n,oy,ox} ∂Y[n][o][oy][ox] · x[n][g·C_in/groups + c]
/// [oy·s_h + ky·d_h − p_h][ox·s_w + kx·d_w − p_w]`, with groups, strides, dilations and padding,
/// and batches below, at and above the 8-sample chunk, and at the recipe CNN's layer shapes.
#[test]
fn conv_weight_gradient_by_hand() {
    use engram::core::burn::tensor::ops::ConvOptions;
    let ad = Device::flex().autodiff();
    let int = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 31) % 7) as f32 - 3.0)
            .collect()
    };
    // [n, c_in, c_out, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups]
    let cases = [
        [3, 4, 6, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1],
        [9, 4, 6, 8, 7, 3, 2, 2, 1, 1, 0, 1, 2, 2],
        [17, 6, 3, 6, 9, 2, 3, 1, 2, 0, 2, 2, 1, 3],
        // The recipe CNN's two layers (3 × 3, padding 1) at 28 × 28 and 14 × 14.
        [10, 1, 16, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1],
        [20, 16, 32, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1],
    ];
    for [n, ci, co, h, w, kh, kw, sh, sw, ph, pw, dh, dw, groups] in cases {
        let (cig, cog) = (ci / groups, co / groups);
        let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        let ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
        let xs = int(n * ci * h * w, 1);
        let ws = int(co * cig * kh * kw, 2);
        let gs = int(n * co * oh * ow, 3);
        let x = Tensor::<4>::from_data(TensorData::new(xs.clone(), [n, ci, h, w]), &ad);
        let wt = Tensor::<4>::from_data(TensorData::new(ws, [co, cig, kh, kw]), &ad).require_grad();
        let options = ConvOptions::new([sh, sw], [ph, pw], [dh, dw], groups);
        let out = module::conv2d(x, wt.clone(), None, options);
        assert_eq!(out.dims(), [n, co, oh, ow]);
        let g = Tensor::<4>::from_data(TensorData::new(gs.clone(), [n, co, oh, ow]), &ad);
        let grads = (out * g).sum().backward();
        let got = wt
            .grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let mut want = vec![0.0f64; co * cig * kh * kw];
        for b in 0..n {
            for o in 0..co {
                let gi = o / cog;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let gv = f64::from(gs[((b * co + o) * oh + oy) * ow + ox]);
                        for c in 0..cig {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * sh + ky * dh) as isize - ph as isize;
                                    let ix = (ox * sw + kx * dw) as isize - pw as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let xc = gi * cig + c;
                                    let xv =
                                        xs[((b * ci + xc) * h + iy as usize) * w + ix as usize];
                                    want[((o * cig + c) * kh + ky) * kw + kx] += gv * f64::from(xv);
                                }
                            }
                        }
                    }
                }
            }
        }
        let want: Vec<f32> = want.into_iter().map(|v| v as f32).collect();
        assert_eq!(
            got, want,
            "n {n}, groups {groups}, stride [{sh}, {sw}], dilation [{dh}, {dw}]"
        );
    }
}

/// Elementwise ops split across rayon's pool (vendor/burn-flex/src/par.rs) compute what one
/// thread computes, bit for bit: the in-place and the allocating paths of the binary, scalar and
/// unary kernels on a tensor above the split threshold (32,768 elements) whose length is no
/// multiple of a SIMD vector, in pools of 1, 2 and 3 threads; and the sums and products against
/// a loop written here, so that a chunk left out or written twice shows.
#[test]
fn elementwise_ops_split_across_threads_as_one_thread() {
    const N: usize = 100_003;
    let a = spread(N, 1);
    let b: Vec<f32> = spread(N, 2).iter().map(|x| x * 0.37 + 0.01).collect();
    let run = |threads: usize| -> Vec<Vec<f32>> {
        let pool = pool(threads);
        pool.install(|| {
            let device = Device::flex();
            let t = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [N]), &device);
            let (ta, tb) = (t(&a), t(&b));
            let outs = [
                // the SIMD in-place kernels: lhs unique, then lhs shared and rhs unique
                t(&a) + tb.clone(),
                ta.clone() - t(&b),
                t(&a) * tb.clone(),
                ta.clone() / t(&b),
                // both shared: the allocating loop
                ta.clone() + tb.clone(),
                // scalar ops in place and allocating (SGD's momentum and learning rate)
                t(&a).mul_scalar(0.9),
                ta.clone().mul_scalar(0.05),
                ta.clone().add_scalar(1.5),
                // unary ops in place and allocating; relu's backward is a binary closure
                t(&b).exp(),
                tb.clone().exp(),
                ta.clone().tanh(),
                module_relu(ta.clone()),
            ];
            outs.into_iter()
                .map(|o| o.into_data().try_to_vec::<f32>().unwrap())
                .collect()
        })
    };
    let one = run(1);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(one[0][i].to_bits(), (x + y).to_bits(), "a + b at {i}");
        assert_eq!(one[2][i].to_bits(), (x * y).to_bits(), "a * b at {i}");
        assert_eq!(
            one[4][i].to_bits(),
            (x + y).to_bits(),
            "shared a + b at {i}"
        );
        assert_eq!(one[5][i].to_bits(), (x * 0.9).to_bits(), "a * 0.9 at {i}");
        assert_eq!(one[6][i].to_bits(), (x * 0.05).to_bits(), "a * 0.05 at {i}");
    }
    for threads in [2, 3] {
        let many = run(threads);
        for (k, (o, m)) in one.iter().zip(&many).enumerate() {
            assert_eq!(o.len(), N);
            assert_eq!(digest(o), digest(m), "op {k} at {threads} threads");
        }
    }
}

/// Matmul outputs are handed to gemm unwritten (it writes every element and reads none), so
/// a product is the same whatever the allocator hands back: each product here follows a freed
/// buffer of NaNs of its output's size (which the allocator tends to reuse) and equals a sum
/// by hand, exactly, on small integers where every summation order gives the same sum. The
/// shapes take each of gemm's paths: a vector product, the small horizontal kernel, the
/// parallel blocked one, `k = 0`, a transposed (strided) operand, and batches, broadcast too.
#[test]
fn matmul_outputs_written_whatever_the_memory_held() {
    let device = Device::flex();
    let ints = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 17) as f32 - 8.0)
            .collect()
    };
    let by_hand = |a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)| -> Vec<f32> {
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                // From +0, as gemm starts (`Sum` for f32 starts from -0).
                out[i * n + j] = (0..k).fold(0.0, |s, p| s + a[i * k + p] * b[p * n + j]);
            }
        }
        out
    };
    let poison = |len: usize| drop(std::hint::black_box(vec![f32::NAN; len]));
    for (m, k, n) in [
        (1, 37, 5),
        (7, 9, 11),
        (64, 300, 90),
        (200, 200, 200),
        (3, 0, 4),
    ] {
        let (a, b) = (ints(m * k, 1), ints(k * n, 2));
        let want = by_hand(&a, &b, (m, k, n));
        let ta = Tensor::<2>::from_data(TensorData::new(a, [m, k]), &device);
        let tb = Tensor::<2>::from_data(TensorData::new(b, [k, n]), &device);
        poison(m * n);
        let got = ta
            .clone()
            .matmul(tb.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(digest(&got), digest(&want), "[{m}, {k}] x [{k}, {n}]");
        // The same product with the right operand stored transposed: a strided view.
        let tb_t = tb.transpose().into_data();
        let strided = Tensor::<2>::from_data(tb_t, &device).transpose();
        poison(m * n);
        let got = ta.matmul(strided).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(digest(&got), digest(&want), "[{m}, {k}] x [{k}, {n}]ᵀᵀ");
    }
    // Batches: six products of [33, 17] x [17, 29], then the right operand broadcast.
    let (bs, m, k, n) = (6, 33, 17, 29);
    let (a, b) = (ints(bs * m * k, 3), ints(bs * k * n, 4));
    let want: Vec<f32> = (0..bs)
        .flat_map(|i| {
            by_hand(
                &a[i * m * k..(i + 1) * m * k],
                &b[i * k * n..(i + 1) * k * n],
                (m, k, n),
            )
        })
        .collect();
    let ta = Tensor::<3>::from_data(TensorData::new(a.clone(), [bs, m, k]), &device);
    let tb = Tensor::<3>::from_data(TensorData::new(b.clone(), [bs, k, n]), &device);
    poison(bs * m * n);
    let got = ta
        .clone()
        .matmul(tb)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(digest(&got), digest(&want), "batched");
    let one = Tensor::<3>::from_data(TensorData::new(b[..k * n].to_vec(), [1, k, n]), &device);
    let want: Vec<f32> = (0..bs)
        .flat_map(|i| by_hand(&a[i * m * k..(i + 1) * m * k], &b[..k * n], (m, k, n)))
        .collect();
    poison(bs * m * n);
    let got = ta.matmul(one).into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(digest(&got), digest(&want), "broadcast");
}

/// GELU's f32 forward and backward in vector registers (`vendor/burn-flex/src/ops/gelu.rs`)
/// against the published crate's scalar formulas with libm 0.2.16's `erff` and `f32::exp`, bit
/// for bit: the forward on every 61st f32 bit pattern (70 M values: every sign, exponent,
/// NaNs, infinities, subnormals), the backward on every 997th and on 917,504 values drawn across
/// the whole range, with an upstream gradient that varies, both in place (the only handle) and
/// allocating (a second handle kept), on a transposed view, and at 1, 2 and 3 threads.
#[test]
fn gelu_is_libm_bit_for_bit() {
    use engram::core::burn::tensor::activation::gelu;
    let published = |x: f32| 0.5 * x * (1.0 + libm::erff(x / std::f32::consts::SQRT_2));
    let published_grad = |x: f32, g: f32| {
        let cdf = 0.5 * (1.0 + libm::erff(x / std::f32::consts::SQRT_2));
        let pdf = 1.0 / (2.0 * std::f32::consts::PI).sqrt() * (-0.5 * x * x).exp();
        g * (cdf + x * pdf)
    };
    // Equal bits, or both NaN (a NaN's payload is not part of the claim).
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let device = Device::flex();
    const CHUNK: usize = 1 << 20;
    let patterns: Vec<f32> = (0..=u32::MAX / 61)
        .map(|i| f32::from_bits(i * 61))
        .collect();
    for xs in patterns.chunks(CHUNK) {
        let n = xs.len();
        let t = Tensor::<1>::from_data(TensorData::new(xs.to_vec(), [n]), &device);
        let kept = t.clone();
        let allocating = gelu(kept.clone()).into_data().try_to_vec::<f32>().unwrap();
        drop(kept);
        let in_place = gelu(t).into_data().try_to_vec::<f32>().unwrap();
        for (i, &x) in xs.iter().enumerate() {
            let want = published(x);
            assert!(
                same(in_place[i], want),
                "GELU({x:e}) = {:e}, published {want:e}",
                in_place[i]
            );
            assert!(same(allocating[i], want), "GELU({x:e}) allocating");
        }
    }
    // The backward: d/dx Σ GELU(x)·w hands GELU's backward the gradient w.
    // Then values drawn across the whole range (neighbouring bit patterns mostly fall in one of
    // erf's regions; these put several regions and expf's reductions into every vector of
    // lanes), 7 × 2¹⁷ of them so that the count stays a multiple of 7.
    let xs: Vec<f32> = (0..=u32::MAX / 997)
        .map(|i| f32::from_bits(i * 997))
        .chain((0..7 << 17).map(|i| patterns[(i * 1_000_003) % patterns.len()]))
        .collect();
    let ws: Vec<f32> = spread(xs.len(), 5);
    let n = xs.len();
    let run = |threads: usize| -> [Vec<f32>; 2] {
        let pool = pool(threads);
        pool.install(|| {
            let ad = Device::flex().autodiff();
            let x = Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &ad).require_grad();
            let w = Tensor::<1>::from_data(TensorData::new(ws.clone(), [n]), &ad);
            let grads = (gelu(x.clone()) * w).sum().backward();
            let grad = x
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            // a transposed view (n = 7 × 746,485), back to rows after
            let x2 = Tensor::<2>::from_data(TensorData::new(xs.clone(), [7, n / 7]), &device);
            let transposed = gelu(x2.transpose()).transpose().reshape([n]);
            [grad, transposed.into_data().try_to_vec::<f32>().unwrap()]
        })
    };
    let [grad, transposed] = run(1);
    for (i, (&x, &w)) in xs.iter().zip(&ws).enumerate() {
        let want = published_grad(x, w);
        assert!(
            same(grad[i], want),
            "GELU'({x:e})·{w} = {:e}, published {want:e}",
            grad[i]
        );
        assert!(same(transposed[i], published(x)), "GELU({x:e}) transposed");
    }
    for threads in [2, 3] {
        let [g, t] = run(threads);
        assert_eq!(digest(&g), digest(&grad), "backward at {threads} threads");
        assert_eq!(
            digest(&t),
            digest(&transposed),
            "transposed at {threads} threads"
        );
    }
}

/// f32 `exp` (`vendor/burn-flex/src/ops/expf.rs`: glibc's `__expf_fma` step for step, in vector
/// registers, where glibc itself would run it) equals the published crate's `f32::exp` bit for
/// bit on every 61st f32 bit pattern (70 M values, with the overflow, underflow and NaN cases),
/// in place and allocating, at 1 and 2 threads; elsewhere flex keeps the scalar call, and the
/// comparison holds trivially.
#[test]
fn exp_is_the_platform_s_bit_for_bit() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let patterns: Vec<f32> = (0..=u32::MAX / 61)
        .map(|i| f32::from_bits(i * 61))
        .collect();
    for threads in [1, 2] {
        let pool = pool(threads);
        pool.install(|| {
            let device = Device::flex();
            for xs in patterns.chunks(1 << 20) {
                let n = xs.len();
                let t = Tensor::<1>::from_data(TensorData::new(xs.to_vec(), [n]), &device);
                let kept = t.clone();
                let allocating = kept.clone().exp().into_data().try_to_vec::<f32>().unwrap();
                drop(kept);
                let in_place = t.exp().into_data().try_to_vec::<f32>().unwrap();
                for (i, &x) in xs.iter().enumerate() {
                    let want = x.exp();
                    assert!(
                        same(in_place[i], want),
                        "exp({x:e}) = {:e}, platform {want:e}",
                        in_place[i]
                    );
                    assert!(
                        same(allocating[i], want),
                        "exp({x:e}) allocating, {threads} threads"
                    );
                }
            }
        });
    }
}

/// The training softmax (`vendor/burn-flex/src/ops/softmax_train.rs`, one autodiff node in
/// `engram::core::model::nodes`) gives the output and the input gradient of Burn's composed
/// softmax (max, subtract, exp, sum, divide, and their backward steps) bit for bit: rows
/// shorter than a vector, of 128 (attention's), and past `max_dim`'s SIMD threshold (600); row
/// counts off the 32-row block; scores masked to -10⁴ (BERT's padding), ties and large values;
/// at 1 and 2 threads, with and without Burn's op-level gradient checkpointing. That the node
/// was taken (had the composition run, the comparison would hold trivially) shows in what the
/// graph keeps: without checkpointing the composition holds `x − max` for `exp`'s backward as
/// well, `4·len` bytes more.
#[test]
fn softmax_train_is_the_composition_bit_for_bit() {
    use engram::core::burn::tensor::activation;
    use engram::core::model::nodes::softmax_last;
    let bits = |t: Tensor<3>| -> Vec<u32> {
        let v = t.into_data().try_to_vec::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    let cases: [[usize; 3]; 4] = [[3, 5, 7], [2, 37, 128], [4, 16, 128], [1, 70, 600]];
    for threads in [1, 2] {
        pool(threads).install(|| {
            for checkpointing in [false, true] {
                let ad = autodiff(checkpointing);
                for (k, dims) in cases.into_iter().enumerate() {
                    let len = dims.iter().product();
                    let mut x = spread(len, k);
                    let n = dims[2];
                    for (i, v) in x.iter_mut().enumerate() {
                        // A masked key in every third column, a whole masked row, ties.
                        if i % n % 3 == 1 || i / n == 1 {
                            *v = -1.0e4;
                        } else if i % n % 5 == 0 {
                            *v = 2.5;
                        }
                    }
                    let g = spread(len, k + 7);
                    let run = |fused: bool| {
                        let xa = Tensor::<3>::from_data(TensorData::new(x.clone(), dims), &ad)
                            .require_grad();
                        // The scores come out of an operation, as attention's do.
                        let scores = xa.clone() * 1.0;
                        let before = engram::core::alloc::read().current;
                        let y = if fused {
                            softmax_last(scores)
                        } else {
                            activation::softmax(scores, 2)
                        };
                        // Signed: the counter is the process's, and a test freeing memory
                        // in parallel can move it below `before`.
                        let kept = engram::core::alloc::read().current as i64 - before as i64;
                        let w = Tensor::<3>::from_data(TensorData::new(g.clone(), dims), &ad);
                        let grads = (y.clone() * w).sum().backward();
                        (bits(y), bits(xa.grad(&grads).unwrap()), kept)
                    };
                    let (want_y, want_g, want_kept) = run(false);
                    let (got_y, got_g, got_kept) = run(true);
                    let case =
                        format!("{dims:?}, {threads} threads, checkpointing {checkpointing}");
                    assert_eq!(got_y, want_y, "output {case}");
                    assert_eq!(got_g, want_g, "gradient {case}");
                    // Rows sum to 1 and the gradient is not all zero: the comparison has values.
                    let y: Vec<f32> = got_y.iter().map(|&b| f32::from_bits(b)).collect();
                    for row in y.chunks(n) {
                        let s: f32 = row.iter().sum();
                        assert!((s - 1.0).abs() < 1e-5, "row sum {s} {case}");
                    }
                    assert!(
                        got_g.iter().any(|&b| f32::from_bits(b).abs() > 1e-3),
                        "{case}"
                    );
                    if !checkpointing {
                        // The counter is process-wide: a pair of readings another test moved is
                        // taken again (at most three times).
                        let holds = |g: i64, w: i64| g >= 0 && g + 4 * len as i64 <= w;
                        let (mut got_kept, mut want_kept) = (got_kept, want_kept);
                        for _ in 0..3 {
                            if holds(got_kept, want_kept) {
                                break;
                            }
                            (want_kept, got_kept) = (run(false).2, run(true).2);
                        }
                        assert!(
                            holds(got_kept, want_kept),
                            "kept {got_kept} B against the composition's {want_kept} B, {case}"
                        );
                    }
                }
            }
        });
    }
}

/// GELU as engram's autodiff node (`engram::core::model::nodes::gelu`: the output and the slope
/// from one pass of `vendor/burn-flex/src/ops/gelu.rs`'s `forward_train`, the backward
/// `grad · slope`) gives the output and the input gradient of Burn's GELU node (the forward,
/// then `gelu_backward` from the kept input) bit for bit: every 4,999th f32 bit pattern (NaNs,
/// infinities, subnormals, every `erf` region) and values drawn across the range, contiguous
/// and as a transposed view, at 1 and 2 threads; that the node ran shows in what it keeps (the
/// slope, where Burn's node keeps the input). Under Burn's op-level checkpointing, without an
/// autodiff graph and when nothing asks for a gradient, Burn's GELU runs.
#[test]
fn gelu_node_is_burn_s_bit_for_bit() {
    use engram::core::burn::tensor::activation;
    use engram::core::model::nodes::gelu;
    let bits = |v: Vec<f32>| -> Vec<u32> {
        // A NaN's payload is not part of the claim: one NaN stands for all.
        v.iter()
            .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
            .collect()
    };
    let xs: Vec<f32> = (0..=u32::MAX / 4999)
        .map(|i| f32::from_bits(i * 4999))
        .chain(spread(7 * 4096, 3))
        .collect();
    let n = xs.len() - xs.len() % 7;
    let xs = xs[..n].to_vec();
    let ws = spread(n, 11);
    // The node's gradient is the slope: the published derivative at a few points by hand.
    let slope = |x: f32| {
        let cdf = 0.5 * (1.0 + libm::erff(x / std::f32::consts::SQRT_2));
        cdf + x * (1.0 / (2.0 * std::f32::consts::PI).sqrt() * (-0.5 * x * x).exp())
    };
    for threads in [1, 2] {
        pool(threads).install(|| {
            for checkpointing in [false, true] {
                let ad = autodiff(checkpointing);
                for transposed in [false, true] {
                    let run = |node: bool| {
                        let xa =
                            Tensor::<2>::from_data(TensorData::new(xs.clone(), [7, n / 7]), &ad)
                                .require_grad();
                        // The input comes out of an operation, as a linear layer's does.
                        let h = if transposed {
                            xa.clone().transpose()
                        } else {
                            xa.clone() * 1.0
                        };
                        let y = if node { gelu(h) } else { activation::gelu(h) };
                        let y = if transposed { y.transpose() } else { y };
                        let w =
                            Tensor::<2>::from_data(TensorData::new(ws.clone(), [7, n / 7]), &ad);
                        let grads = (y.clone() * w).sum().backward();
                        let g = xa.grad(&grads).unwrap();
                        (
                            y.into_data().try_to_vec::<f32>().unwrap(),
                            g.into_data().try_to_vec::<f32>().unwrap(),
                        )
                    };
                    let (want_y, want_g) = run(false);
                    let (got_y, got_g) = run(true);
                    let case = format!(
                        "{threads} threads, checkpointing {checkpointing}, transposed {transposed}"
                    );
                    assert_eq!(bits(got_y), bits(want_y), "output {case}");
                    for i in [0, 1, n / 3, n - 5] {
                        let (x, w) = (xs[i], ws[i]);
                        if x.is_finite() && w.is_finite() {
                            let want = w * slope(x);
                            assert!(
                                got_g[i] == want || (got_g[i].is_nan() && want.is_nan()),
                                "gradient at {x:e}: {:e}, by hand {want:e}",
                                got_g[i]
                            );
                        }
                    }
                    assert_eq!(bits(got_g), bits(want_g), "gradient {case}");
                }
            }
            // No graph, and a graph that tracks nothing: Burn's forward.
            let plain = Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &Device::flex());
            let untracked = Tensor::<1>::from_data(
                TensorData::new(xs.clone(), [n]),
                &Device::flex().autodiff(),
            );
            let want = bits(
                activation::gelu(plain.clone())
                    .into_data()
                    .try_to_vec()
                    .unwrap(),
            );
            assert_eq!(bits(gelu(plain).into_data().try_to_vec().unwrap()), want);
            assert_eq!(
                bits(gelu(untracked).into_data().try_to_vec().unwrap()),
                want
            );
        });
    }
    // That the node ran (had Burn's, the comparisons above would hold trivially) shows in what
    // it keeps: with its input also held here, Burn's node adds nothing (it keeps that input),
    // engram's adds its slope, the input's size; under op-level checkpointing Burn's runs. The
    // allocator's counter is the process's, which the tests running beside this one move too:
    // a small input, measured until one try pair is undisturbed.
    let len = 4096;
    for checkpointing in [false, true] {
        let ad = autodiff(checkpointing);
        let kept = |node: bool| {
            let x =
                Tensor::<1>::from_data(TensorData::new(spread(len, 2), [len]), &ad).require_grad();
            let h = x * 1.0;
            let held = h.clone();
            let before = engram::core::alloc::read().current as i64;
            let y = if node { gelu(h) } else { activation::gelu(h) };
            let kept = engram::core::alloc::read().current as i64 - before;
            drop((y, held));
            kept
        };
        let slope_bytes = if checkpointing { 0 } else { 4 * len as i64 };
        let diffs: Vec<i64> = (0..100).map(|_| kept(true) - kept(false)).collect();
        assert!(
            diffs.iter().any(|d| (d - slope_bytes).abs() < 512),
            "the node kept {diffs:?} B more than Burn's, not {slope_bytes}, checkpointing {checkpointing}"
        );
    }
}

/// A batched product whose right-hand side every batch shares (`vendor/burn-flex/src/ops/
/// matmul.rs`, `folded`: a linear layer's `[batch, tokens, features] · W` and its input
/// gradient `grad · Wᵀ`, which the vendored flex computes as one gemm call over all the rows)
/// equals the published crate's calls, `gemm::gemm` a batch at a time, bit for bit: MiniLM's
/// shapes with `W` and with the transposed view `Wᵀ`, depths over several of gemm's blocks, odd
/// sizes, four dimensions, batches that are not one run of rows, and the edges of gemm's
/// general path (`k` of 3, `m·n` of 257, `m` or `n` just past 64; below them the batches keep
/// their own calls), at 1 and 2 threads. The values are not integers, so sums in another order
/// would show.
#[test]
fn matmul_folded_batches_are_gemm_s_bit_for_bit() {
    // [batches, m, k, n]; the batches are [2, b / 2] when `four` below.
    let cases: [[usize; 4]; 11] = [
        [16, 128, 384, 384],
        [4, 128, 1536, 384],
        [4, 128, 384, 1536],
        [2, 100, 1300, 70],
        [4, 40, 100, 70],
        [4, 70, 100, 40],
        [3, 17, 5, 19],
        [2, 257, 3, 1],
        [4, 1, 7, 300],
        [2, 16, 16, 16],
        [2, 64, 5, 64],
    ];
    for threads in [1, 2] {
        pool(threads).install(|| {
            let device = Device::flex();
            for (c, [b, m, k, n]) in cases.into_iter().enumerate() {
                for (transposed, four, sliced) in [
                    (false, false, false),
                    (true, false, false),
                    (true, true, false),
                    (false, false, true),
                ] {
                    let a = spread(b * m * k, c);
                    let w = spread(n * k, c + 5);
                    // `sliced`: the first half of the rows of batches twice as tall, batches that
                    // are not one run of rows.
                    let lhs =
                        if sliced {
                            let a2: Vec<f32> = a
                                .chunks(m * k)
                                .flat_map(|x| x.iter().chain(x.iter()).copied())
                                .collect();
                            Tensor::<3>::from_data(TensorData::new(a2, [b, 2 * m, k]), &device)
                                .slice([0..b, 0..m, 0..k])
                        } else {
                            Tensor::<3>::from_data(TensorData::new(a.clone(), [b, m, k]), &device)
                        };
                    // `W` is `[k, n]`, or `[n, k]` whose transpose is a `[k, n]` view, with one
                    // batch dimension of 1 per batch dimension of the left-hand side.
                    let (w_cs, w_rs) = if transposed {
                        (k as isize, 1)
                    } else {
                        (1, n as isize)
                    };
                    let data = || {
                        let dims = if transposed { [n, k] } else { [k, n] };
                        TensorData::new(w.clone(), dims)
                    };
                    let got = if four && b % 2 == 0 {
                        let rhs = Tensor::<2>::from_data(data(), &device).unsqueeze::<4>();
                        let rhs = if transposed { rhs.swap_dims(2, 3) } else { rhs };
                        let lhs4 = lhs.reshape([2, b / 2, m, k]);
                        lhs4.matmul(rhs).into_data().try_to_vec::<f32>().unwrap()
                    } else {
                        let rhs = Tensor::<2>::from_data(data(), &device).unsqueeze::<3>();
                        let rhs = if transposed { rhs.swap_dims(1, 2) } else { rhs };
                        lhs.matmul(rhs).into_data().try_to_vec::<f32>().unwrap()
                    };
                    let mut want = vec![f32::NAN; b * m * n];
                    for i in 0..b {
                        // SAFETY: the pointers cover `m × k` (row stride `k`), `k × n` (strides
                        // `w_rs`, `w_cs`) and `m × n` (row stride `n`) f32 values.
                        unsafe {
                            gemm::gemm(
                                m,
                                n,
                                k,
                                want[i * m * n..].as_mut_ptr(),
                                1,
                                n as isize,
                                false,
                                a[i * m * k..].as_ptr(),
                                1,
                                k as isize,
                                w.as_ptr(),
                                w_cs,
                                w_rs,
                                0.0f32,
                                1.0f32,
                                false,
                                false,
                                false,
                                gemm::Parallelism::None,
                            );
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "[{b}, {m}, {k}] · [{k}, {n}], transposed {transposed}, four {four}, \
                         sliced {sliced}, {threads} threads"
                    );
                }
            }
        });
    }
}

/// The flex device under autodiff, with Burn's op-level gradient checkpointing (the `Balanced`
/// strategy) or without.
fn autodiff(checkpointing: bool) -> Device {
    let ad = Device::flex().autodiff();
    if checkpointing {
        ad.gradient_checkpointing()
    } else {
        ad
    }
}

/// A rayon pool of `threads` threads, for the kernels' split.
fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// ReLU through Burn's activation (flex's unary closure).
fn module_relu(x: Tensor<1>) -> Tensor<1> {
    engram::core::burn::tensor::activation::relu(x)
}

/// book/src/figures/vendor-gain.md is `bench/vendor-gain.sh`'s output (a golden file: the
/// second build against the published crate is not made here): one row per model and thread
/// count, with both builds' samples/s, the gain that is their ratio, and each round.
#[test]
fn the_vendor_gain_figure_is_generated() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = crate::util::generated_figure("vendor-gain");
    let rows = crate::util::table_rows(&fig, "| model");
    // MLP, CNN, ViT and BERT at 1 and 2 threads.
    assert_eq!(rows.len(), 8, "{fig}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 6, "{row:?}");
        assert_eq!(row[1], ["1", "2"][i % 2], "{row:?}");
        // The gain is the ratio of the unrounded figures: it lies within what the printed
        // ones allow (each off by up to half its last digit), give or take its own rounding.
        let (v, p): (f64, f64) = (row[2].parse().unwrap(), row[3].parse().unwrap());
        let half_digit =
            |s: &str| 0.5 * 10f64.powi(-(s.split('.').nth(1).map_or(0, str::len) as i32));
        let (dv, dp) = (half_digit(row[2]), half_digit(row[3]));
        let gain: f64 = row[4].trim_end_matches(" %").parse().unwrap();
        let (low, high) = (
            100.0 * ((v - dv) / (p + dp) - 1.0) - 0.5,
            100.0 * ((v + dv) / (p - dp) - 1.0) + 0.5,
        );
        assert!((low..=high).contains(&gain), "{row:?}: {low:.1}..{high:.1}");
        assert_eq!(row[5].split(", ").count(), 3, "three rounds: {row:?}");
    }
    let script = std::fs::read_to_string(root.join("bench/vendor-gain.sh")).unwrap();
    assert!(script.contains("> book/src/figures/vendor-gain.md.tmp"));
}
