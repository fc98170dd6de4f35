//! Tests of the activation-path adapters against hand computations.

use super::adapter::*;
use super::mlp::{ActivationKind, build_mlp};
use super::*;
use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Int, Tensor, TensorData, activation};

fn vals<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// `a [n, k] · b [k, m]`, row-major.
fn mm(a: &[f32], b: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
    (0..n * m)
        .map(|ij| (0..k).map(|l| a[ij / m * k + l] * b[l * m + ij % m]).sum())
        .collect()
}

fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

fn seq(n: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    (0..n).map(f).collect()
}

fn t2(v: Vec<f32>, shape: [usize; 2], d: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, shape), d)
}

/// A layer `[3, 2]`, two groups of one rank-2 expert each, with the given router.
fn setup(
    routed: bool,
    top_k: usize,
    d: &Device,
) -> (Linear, Adapters, Vec<[Vec<f32>; 2]>, Vec<f32>) {
    let w = seq(6, |i| (i as f32 - 2.5) / 4.0);
    let lin = Linear {
        weight: Param::from_tensor(t2(w, [3, 2], d)),
        bias: Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(vec![0.1f32, -0.2], [2]),
            d,
        ))),
    };
    let config = AdapterConfig {
        scale: 1.5,
        rank: 2,
        dropout: 0.0,
        top_k,
        routed,
        balance: 1.0,
    };
    let mut a = Adapters::new(vec![(0, "linear".into())], vec![[3, 2]], config)
        .grow(1, 1, d)
        .grow(1, 2, d);
    // Hand-set values: A_e [3, 2], B_e [2, 2], router [3, 1] per group.
    let experts: Vec<[Vec<f32>; 2]> = (0..2)
        .map(|e| {
            [
                seq(6, |i| ((i * 5 + e * 3) % 7) as f32 / 7.0 - 0.4),
                seq(4, |i| ((i * 3 + e) % 5) as f32 / 5.0 - 0.3),
            ]
        })
        .collect();
    let router = vec![0.9f32, -0.4, 0.3, -0.5, 0.8, 0.2];
    for (e, [av, bv]) in experts.iter().enumerate() {
        a.layers[0].experts[e].a = Param::from_tensor(t2(av.clone(), [3, 2], d));
        a.layers[0].experts[e].b = Param::from_tensor(t2(bv.clone(), [2, 2], d));
    }
    if routed {
        for g in 0..2 {
            let col = vec![router[g], router[2 + g], router[4 + g]];
            a.layers[0].router[g] = Param::from_tensor(t2(col, [3, 1], d));
        }
    }
    (lin, a, experts, router)
}

fn ctx_with(a: &Adapters, evaluation: bool) -> ForwardCtx {
    let mut c = if evaluation {
        ForwardCtx::evaluation(None)
    } else {
        ForwardCtx::training(None)
    };
    c.adapters = Some(std::sync::Arc::new(a.clone()));
    c
}

const X: [f32; 12] = [
    0.5, -1.0, 0.25, 1.0, 0.5, -0.5, -0.75, 0.2, 0.9, 0.3, 0.3, -1.2,
];

/// Unrouted: `y = x·W₀ + b + s·Σₑ x·Aₑ·Bₑ`, every expert summed, by hand.
#[test]
fn summed_adapters_add_their_scaled_low_rank_updates() {
    let d = Device::flex();
    let (lin, a, experts, _) = setup(false, 1, &d);
    let x = t2(X.to_vec(), [4, 3], &d);
    let got = vals(ctx_with(&a, true).linear(&lin, "linear", x));
    let w = seq(6, |i| (i as f32 - 2.5) / 4.0);
    let mut want = mm(&X, &w, 4, 3, 2);
    for (i, v) in want.iter_mut().enumerate() {
        *v += [0.1, -0.2][i % 2];
    }
    for [av, bv] in &experts {
        let u = mm(&mm(&X, av, 4, 3, 2), bv, 4, 2, 2);
        for (v, u) in want.iter_mut().zip(u) {
            *v += 1.5 * u;
        }
    }
    close(&got, &want, 1e-5, "y");
    // Another block's layer of the same name is not adapted.
    let mut other = ctx_with(&a, true);
    other.block = 1;
    let plain = vals(other.linear(&lin, "linear", t2(X.to_vec(), [4, 3], &d)));
    close(
        &plain,
        &mm(&X, &seq(6, |i| (i as f32 - 2.5) / 4.0), 4, 3, 2)
            .iter()
            .enumerate()
            .map(|(i, v)| v + [0.1, -0.2][i % 2])
            .collect::<Vec<_>>(),
        1e-5,
        "plain",
    );
}

/// Routed, top-1 of 2: each token's update is its chosen expert's alone (the softmax over one
/// logit is 1); top-2: `softmax(x·R)`-weighted. The load-balancing term equals
/// `E·Σₑ fₑ·Pₑ` (Fedus et al. 2022, eq. 4) by hand.
#[test]
fn routed_adapters_gate_by_the_top_k_softmax_and_balance_as_switch_eq_4() {
    let d = Device::flex();
    let w = seq(6, |i| (i as f32 - 2.5) / 4.0);
    for k in [1usize, 2] {
        let (lin, a, experts, router) = setup(true, k, &d);
        let x = t2(X.to_vec(), [4, 3], &d);
        let got = vals(ctx_with(&a, false).linear(&lin, "linear", x));
        let logits = mm(&X, &router, 4, 3, 2);
        let ups: Vec<Vec<f32>> = experts
            .iter()
            .map(|[av, bv]| mm(&mm(&X, av, 4, 3, 2), bv, 4, 2, 2))
            .collect();
        let mut want = mm(&X, &w, 4, 3, 2);
        let (mut f, mut p) = ([0f32; 2], [0f32; 2]);
        for n in 0..4 {
            let (l0, l1) = (logits[2 * n], logits[2 * n + 1]);
            let m = l0.max(l1);
            let (e0, e1) = ((l0 - m).exp(), (l1 - m).exp());
            let soft = [e0 / (e0 + e1), e1 / (e0 + e1)];
            p[0] += soft[0] / 4.0;
            p[1] += soft[1] / 4.0;
            let gates = if k == 2 {
                f = [f[0] + 0.25 / 2.0, f[1] + 0.25 / 2.0];
                soft
            } else if l0 >= l1 {
                f[0] += 0.25;
                [1.0, 0.0]
            } else {
                f[1] += 0.25;
                [0.0, 1.0]
            };
            for j in 0..2 {
                want[2 * n + j] += [0.1, -0.2][j]
                    + 1.5 * (gates[0] * ups[0][2 * n + j] + gates[1] * ups[1][2 * n + j]);
            }
        }
        close(&got, &want, 1e-5, &format!("y, top-{k}"));
        let bal = vals(
            a.take_balance()
                .expect("a training forward leaves its term"),
        );
        let want_bal = 2.0 * (f[0] * p[0] + f[1] * p[1]);
        close(&bal, &[want_bal], 1e-5, &format!("balance, top-{k}"));
        assert!(a.take_balance().is_none(), "taken once");
        // An evaluation forward leaves no term, and counts choices while recording.
        a.record(true);
        let _ = ctx_with(&a, true).linear(&lin, "linear", t2(X.to_vec(), [4, 3], &d));
        let counts = a.record(false).unwrap();
        assert!(a.take_balance().is_none());
        let want_counts: Vec<f64> = (0..2).map(|e| f64::from(f[e] * 4.0 * k as f32)).collect();
        assert_eq!(counts, vec![want_counts]);
        // With token 3 marked as padding, it counts in neither the term nor the choices.
        let (mut fm, mut pm, mut cm) = ([0f32; 2], [0f32; 2], vec![0f64; 2]);
        for n in 0..3 {
            let (l0, l1) = (logits[2 * n], logits[2 * n + 1]);
            let m = l0.max(l1);
            let (e0, e1) = ((l0 - m).exp(), (l1 - m).exp());
            pm = [pm[0] + e0 / (e0 + e1) / 3.0, pm[1] + e1 / (e0 + e1) / 3.0];
            for e in 0..2 {
                let picked = k == 2 || (e == 0) == (l0 >= l1);
                if picked {
                    fm[e] += 1.0 / 3.0 / k as f32;
                    cm[e] += 1.0;
                }
            }
        }
        let mut c = ctx_with(&a, false);
        c.token_mask = Some(Tensor::from_data(
            TensorData::new(vec![true, true, true, false], [1, 4]),
            &d,
        ));
        a.record(true);
        let _ = c.linear(&lin, "linear", t2(X.to_vec(), [4, 3], &d));
        assert_eq!(a.record(false).unwrap(), vec![cm], "masked counts, top-{k}");
        let bal = vals(a.take_balance().unwrap());
        close(
            &bal,
            &[2.0 * (fm[0] * pm[0] + fm[1] * pm[1])],
            1e-5,
            "masked balance",
        );
    }
}

fn mlp(d: &Device) -> Model {
    let mut r = crate::rng::stream(0, "init", 0, 0);
    build_mlp(6, &[5, 4], 3, ActivationKind::Tanh, 0.0, &mut r, d)
}

fn data(d: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let xv: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0).collect();
    (
        Tensor::from_data(TensorData::new(xv, [4, 6]), d),
        Tensor::from_data(TensorData::new(vec![0i64, 1, 2, 1], [4]), d),
    )
}

fn loss(m: &Model, x: &Tensor<2>, y: &Tensor<1, Int>) -> Tensor<1> {
    let logits = m.forward(Activation::Flat(x.clone()), &ForwardCtx::default());
    activation::log_softmax(logits, 1)
        .gather(1, y.clone().reshape([4, 1]))
        .reshape([4])
        .neg()
        .mean()
}

/// The MLP's linear layers are found; a model with routed adapters on two of them has
/// gradients on the trainable experts and router equal to central finite differences, and
/// none on a frozen group or the base.
#[test]
fn routed_gradients_match_finite_differences_and_frozen_groups_get_none() {
    let ad = Device::flex().autodiff();
    let m = mlp(&ad);
    let layers = linear_layers(&m);
    assert_eq!(
        layers
            .iter()
            .map(|l| (l.path.as_str(), l.block, l.shape))
            .collect::<Vec<_>>(),
        vec![
            ("blocks.0.linear", 0, [6, 5]),
            ("blocks.1.linear", 1, [5, 4]),
            ("blocks.2.linear", 2, [4, 3])
        ]
    );
    let config = AdapterConfig {
        scale: 2.0,
        rank: 2,
        dropout: 0.0,
        top_k: 2,
        routed: true,
        balance: 0.0,
    };
    let a = Adapters::new(
        layers[..2]
            .iter()
            .map(|l| (l.block, l.local.clone()))
            .collect(),
        layers[..2].iter().map(|l| l.shape).collect(),
        config,
    )
    .grow(2, 7, &ad)
    .freeze_all()
    .grow(1, 8, &ad);
    let frozen = a.group_ids(0);
    let m = m.freeze().map_adapters(|_| Some(a));
    // B = 0 would zero A's gradient: give every B a value.
    let m = m.update_params(&mut |i, t| {
        i.path
            .ends_with(".b")
            .then(|| t.clone().ones_like().mul_scalar(0.3) + t)
    });
    let (x, y) = data(&ad);
    let grads = m.grads_of(loss(&m, &x, &y));
    let with_grad: Vec<String> = grads.iter().map(|(i, _)| i.path.clone()).collect();
    assert!(
        with_grad.iter().all(|p| p.starts_with("adapters.")),
        "{with_grad:?}"
    );
    let ids: Vec<_> = grads.iter().map(|(i, _)| i.id).collect();
    assert!(
        frozen.iter().all(|f| !ids.contains(f)),
        "a frozen group has gradients"
    );
    // Group 1 (one expert, its router column) on both layers: A, B and the router.
    assert_eq!(grads.len(), 2 * 3, "{with_grad:?}");
    let plain = Device::flex();
    let mv = m.valid();
    let (xp, yp) = data(&plain);
    for (info, g) in &grads {
        let g = vals(g.clone());
        for k in [0, info.shape.iter().product::<usize>() - 1] {
            let eps = 1e-2f32;
            let at = |delta: f32| {
                let mm = mv.clone().update_params(&mut |i, t| {
                    (i.id == info.id).then(|| {
                        let mut v = vals(t.clone());
                        v[k] += delta;
                        Tensor::from_data(TensorData::new(v, [t.dims()[0]]), &t.device())
                    })
                });
                vals(loss(&mm, &xp, &yp))[0]
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (fd - g[k]).abs() <= 2e-3 + 2e-2 * fd.abs(),
                "{}[{k}]: autodiff {} vs finite difference {fd}",
                info.path,
                g[k]
            );
        }
    }
}

/// Merging summed adapters into the weights (`Model::merge_adapters`) leaves the model's
/// outputs as they were; a routed model refuses.
#[test]
fn merged_adapters_compute_what_the_adapted_model_computes() {
    let d = Device::flex();
    let m = mlp(&d);
    let layers = linear_layers(&m);
    let config = AdapterConfig {
        scale: 0.5,
        rank: 2,
        dropout: 0.2,
        top_k: 1,
        routed: false,
        balance: 0.0,
    };
    let a = Adapters::new(
        layers.iter().map(|l| (l.block, l.local.clone())).collect(),
        layers.iter().map(|l| l.shape).collect(),
        config.clone(),
    )
    .grow(2, 3, &d);
    let m = m.map_adapters(|_| Some(a)).update_params(&mut |i, t| {
        i.path
            .ends_with(".b")
            .then(|| t.clone().ones_like().mul_scalar(-0.2) + t)
    });
    let (x, _) = data(&d);
    let eval = ForwardCtx::evaluation(None);
    let before = vals(m.forward(Activation::Flat(x.clone()), &eval));
    let merged = m.clone().merge_adapters().unwrap();
    assert!(merged.adapters().is_none());
    assert!(
        merged
            .params()
            .iter()
            .all(|i| !i.path.starts_with("adapters."))
    );
    let after = vals(merged.forward(Activation::Flat(x.clone()), &eval));
    close(&after, &before, 1e-5, "merged logits");
    let plain = vals(mlp(&d).forward(Activation::Flat(x), &eval));
    assert!(
        plain.iter().zip(&before).any(|(p, b)| (p - b).abs() > 1e-3),
        "the adapters changed nothing"
    );
    let routed = m.map_adapters(|a| {
        let mut a = a.unwrap();
        a.config.routed = true;
        Some(a)
    });
    assert!(routed.merge_adapters().is_err());
}
