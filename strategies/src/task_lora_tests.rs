//! Tests of `per-task-lora`: experts answer as their task ended, routing by prototype (cosine
//! and Mahalanobis) against hand-computed choices, the state's round trip, refusals.

use super::*;
use crate::lora::tests_support::lora;
use crate::test_util::{task_cx, task_info, toy_model, toy_stream};
use engram_core::data::stream::Stream;

/// The inference copy's logits of task `t`'s evaluation rows, row-major, and the input.
fn eval_batch(stream: &Stream, t: usize, device: &Device) -> Activation {
    let (rows, part) = stream.eval_rows(t);
    let refs: Vec<SampleRef> = rows
        .iter()
        .map(|&index| SampleRef {
            task: t as u16,
            index,
        })
        .collect();
    stream.batch(&refs, part, t, device).input()
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// "Training" of a task: every trainable parameter moved by a deterministic amount, so that
/// each task's adapters and head differ from the others'.
fn train(model: Model, task: usize) -> Model {
    let mut n = 0.0f32;
    model.update_params(&mut |i, t| {
        n += 1.0;
        let k = i.numel();
        let shift: Vec<f32> = (0..k)
            .map(|j| 0.3 * ((j as f32 + 1.0) * (n + task as f32 * 7.0)).sin())
            .collect();
        (i.path.contains(".lora.") || i.path.starts_with("blocks.1."))
            .then(|| t.clone() + Tensor::from_data(TensorData::new(shift, [k]), &t.device()))
    })
}

/// Each task's expert answers as the model answered when the task ended (its adapters and
/// head, not the later ones'), restricted to its classes; fresh adapters (`B = 0`) follow
/// each task; inputs go to the prototype with the largest cosine, the prototype being the
/// normalised mean of the plain (never adapted) model's normalised features, or (Mahalanobis)
/// to the group mean nearest under the Ledoit–Wolf shrunk pooled within-group covariance,
/// computed here from the features as `(x − μ)ᵀ Σ⁻¹ (x − μ)`; the state round-trips.
#[test]
fn experts_answer_as_their_task_ended_and_route_by_prototype() {
    let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
    for distance in [Distance::Cosine, Distance::Mahalanobis] {
        check_two_tasks(Prototypes::Task, distance);
        check_two_tasks(Prototypes::Class, distance);
    }
}

fn check_two_tasks(mode: Prototypes, distance: Distance) {
    let params = PerTaskLoraParams {
        prototypes: mode,
        distance,
        ..PerTaskLoraParams::default()
    };
    let device = Device::flex().autodiff();
    let inner = device.clone().inner();
    let stream = toy_stream();
    let plain = toy_model(&device);
    let mut model = lora("rank = 2\ntargets = [\"0.linear\"]")
        .adapt(plain.clone())
        .unwrap();
    let mut s = PerTaskLora::new(params.clone(), 3, 7);
    let mut at_end = Vec::new();
    for t in 0..2 {
        let info = task_info(&stream, t);
        s.before_task(&mut task_cx(&mut model, &device, &info, &stream))
            .unwrap();
        model = train(model, t);
        let x = eval_batch(&stream, t, &inner);
        at_end.push(values(
            model.valid().forward(x, &ForwardCtx::evaluation(None)),
        ));
        model = s.task_end_weights(model, &info).unwrap();
        s.after_task(&mut task_cx(&mut model, &device, &info, &stream))
            .unwrap();
        for (i, v) in model.trainable_values() {
            if i.path.ends_with(".lora.b") {
                assert!(
                    values(v).iter().all(|&x| x == 0.0),
                    "fresh B after task {t}"
                );
            }
        }
    }
    assert_eq!(s.experts(), 2);
    let valid = model.valid();
    let classes = 10;
    for (t, want_t) in at_end.iter().enumerate() {
        let x = eval_batch(&stream, t, &inner);
        let a = s.infer(&valid, x, Some(t)).unwrap();
        let got = values(a.logits);
        assert!(a.tasks.iter().all(|&k| k == t));
        let own = &stream.tasks[t].classes;
        for (r, row) in got.chunks(classes).enumerate() {
            for c in 0..classes {
                let want = if own.contains(&c) {
                    want_t[r * classes + c]
                } else {
                    -1e9
                };
                assert!((row[c] - want).abs() < 1e-5, "task {t} row {r} class {c}");
            }
        }
    }
    let (protos, group_rows) = prototypes_by_hand(&s, &stream, &plain, mode, &inner);
    let maha = mahalanobis_by_hand(&group_rows);
    let mut routed_by_hand = Vec::new();
    let mut both = None;
    for t in 0..2 {
        let x = eval_batch(&stream, t, &inner);
        for r in phi(&plain, x.clone()) {
            if distance == Distance::Mahalanobis {
                routed_by_hand.push(maha(&r));
                continue;
            }
            let cos = |p: &Vec<f64>| -> f64 { p.iter().zip(&r).map(|(a, b)| a * b).sum() };
            let mut best = 0;
            for (j, (_, p)) in protos.iter().enumerate() {
                if cos(p) > cos(&protos[best].1) {
                    best = j;
                }
            }
            routed_by_hand.push(protos[best].0);
        }
        both = Some(match both {
            None => x,
            Some(Activation::Flat(a)) => Activation::Flat(Tensor::cat(vec![a, x.into_flat()], 0)),
            Some(other) => other,
        });
    }
    let both = both.unwrap();
    // Both experts are picked for some rows (the check below compares real choices).
    assert!(
        routed_by_hand.contains(&0) && routed_by_hand.contains(&1),
        "{routed_by_hand:?}"
    );
    let a = s.infer(&valid, both.clone(), None).unwrap();
    assert_eq!(a.tasks, routed_by_hand);
    let logits = values(a.logits);
    // A routed row is answered by its expert, within its expert's classes.
    let per_task: Vec<Vec<f32>> = (0..2)
        .map(|k| values(s.infer(&valid, both.clone(), Some(k)).unwrap().logits))
        .collect();
    for (r, &k) in a.tasks.iter().enumerate() {
        assert_eq!(
            &logits[r * classes..(r + 1) * classes],
            &per_task[k][r * classes..(r + 1) * classes]
        );
    }
    // The state round-trips: the restored strategy answers identically.
    let mut back = PerTaskLora::new(params, 3, 7);
    back.load_state(s.state().unwrap(), &device).unwrap();
    let again = back.infer(&valid, both, None).unwrap();
    assert_eq!(again.tasks, a.tasks);
    assert_eq!(values(again.logits), logits);
}

/// The plain model's first-block features of `x`, each row L2-normalised (`[rows][6]`).
fn phi(plain: &Model, x: Activation) -> Vec<Vec<f64>> {
    let f = values(
        plain
            .valid()
            .forward_range(0..1, x, &ForwardCtx::evaluation(None))
            .into_flat(),
    );
    f.chunks(6)
        .map(|r| {
            let n = r.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
            r.iter().map(|v| f64::from(*v) / n).collect()
        })
        .collect()
}

/// The prototypes by hand (the plain model's first block, rows normalised, each group's mean,
/// normalised), checked against `s`'s, with each group's task, and each group's rows (every
/// task's groups in order) for the Mahalanobis router by hand.
#[allow(clippy::type_complexity)]
fn prototypes_by_hand(
    s: &PerTaskLora,
    stream: &Stream,
    plain: &Model,
    mode: Prototypes,
    inner: &Device,
) -> (Vec<(usize, Vec<f64>)>, Vec<(usize, Vec<Vec<f64>>)>) {
    let mut protos = Vec::new();
    // Group rows (every task's groups in order) for the Mahalanobis router by hand.
    let mut group_rows: Vec<(usize, Vec<Vec<f64>>)> = Vec::new();
    for t in 0..2 {
        let refs: Vec<SampleRef> = stream.tasks[t]
            .train
            .iter()
            .map(|&index| SampleRef {
                task: t as u16,
                index,
            })
            .collect();
        let b = stream.batch(&refs, Part::Train, t, inner);
        let labels = b.labels();
        let rows = phi(plain, b.input());
        // Groups in label order (one group for the whole task).
        let mut groups: Vec<i64> = match mode {
            Prototypes::Task => vec![-1],
            Prototypes::Class => labels.clone(),
        };
        groups.sort_unstable();
        groups.dedup();
        assert_eq!(s.experts[t].prototypes.len(), groups.len());
        for (g, got) in groups.iter().zip(&s.experts[t].prototypes) {
            let mut m = [0.0f64; 6];
            let mut members = Vec::new();
            for (r, y) in rows.iter().zip(&labels) {
                if *g == -1 || g == y {
                    for (a, b) in m.iter_mut().zip(r) {
                        *a += b;
                    }
                    members.push(r.clone());
                }
            }
            group_rows.push((t, members));
            let n = m.iter().map(|v| v * v).sum::<f64>().sqrt();
            let m: Vec<f64> = m.iter().map(|v| v / n).collect();
            for (a, b) in m.iter().zip(got) {
                assert!((a - f64::from(*b)).abs() < 1e-5, "prototype {t} {g}");
            }
            protos.push((t, m));
        }
    }
    (protos, group_rows)
}

/// The task of the group mean nearest to a feature row by `(x − μ_g)ᵀ Σ⁻¹ (x − μ_g)`, `Σ` the
/// Ledoit–Wolf shrunk covariance of every group's rows centred on their mean (written out
/// here: `S = W / n`, `m = tr S / d`, `δ² = ‖S − m·I‖²`, `β̄² = (Σ‖x − μ‖⁴ / n − ‖S‖²) / n`,
/// `ρ = min(β̄², δ²) / δ²`, `Σ = (1 − ρ)·S + ρ·m·I`).
fn mahalanobis_by_hand(groups: &[(usize, Vec<Vec<f64>>)]) -> impl Fn(&[f64]) -> usize {
    let d = groups[0].1[0].len();
    let mut w = vec![0.0f64; d * d];
    let (mut n, mut fourth) = (0.0f64, 0.0f64);
    let mut means = Vec::new();
    for (t, rows) in groups {
        let mu: Vec<f64> = (0..d)
            .map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / rows.len() as f64)
            .collect();
        for r in rows {
            let c: Vec<f64> = r.iter().zip(&mu).map(|(a, b)| a - b).collect();
            for i in 0..d {
                for j in 0..d {
                    w[i * d + j] += c[i] * c[j];
                }
            }
            fourth += c.iter().map(|v| v * v).sum::<f64>().powi(2);
            n += 1.0;
        }
        means.push((*t, mu));
    }
    let s: Vec<f64> = w.iter().map(|v| v / n).collect();
    let m = (0..d).map(|i| s[i * d + i]).sum::<f64>() / d as f64;
    let mut delta = 0.0;
    for i in 0..d {
        for j in 0..d {
            let e = s[i * d + j] - if i == j { m } else { 0.0 };
            delta += e * e;
        }
    }
    let s2: f64 = s.iter().map(|v| v * v).sum();
    let beta = ((fourth / n - s2) / n).max(0.0);
    let rho = beta.min(delta) / delta;
    let mut cov: Vec<f64> = s.iter().map(|v| (1.0 - rho) * v).collect();
    for i in 0..d {
        cov[i * d + i] += rho * m;
    }
    let p = crate::mahalanobis::inverse_spd(&cov, d).unwrap();
    move |x: &[f64]| {
        let dist = |mu: &[f64]| -> f64 {
            let c: Vec<f64> = x.iter().zip(mu).map(|(a, b)| a - b).collect();
            (0..d)
                .map(|i| c[i] * (0..d).map(|j| p[i * d + j] * c[j]).sum::<f64>())
                .sum()
        };
        let mut best = 0;
        for (g, (_, mu)) in means.iter().enumerate() {
            if dist(mu) < dist(&means[best].1) {
                best = g;
            }
        }
        means[best].0
    }
}

/// With `init = "previous"` the next task starts from the adapters just kept: after the first
/// task's end every trainable value (adapters and head) is the kept expert's, B is not zero, and
/// the expert does not move when the model trains on.
#[test]
fn init_previous_trains_on_from_the_kept_adapters() {
    let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let params = PerTaskLoraParams {
        init: Init::Previous,
        ..PerTaskLoraParams::default()
    };
    let device = Device::flex().autodiff();
    let stream = toy_stream();
    let mut model = lora("rank = 2\ntargets = [\"0.linear\"]")
        .adapt(toy_model(&device))
        .unwrap();
    let mut s = PerTaskLora::new(params, 3, 7);
    let info = task_info(&stream, 0);
    s.before_task(&mut task_cx(&mut model, &device, &info, &stream))
        .unwrap();
    model = train(model, 0);
    model = s.task_end_weights(model, &info).unwrap();
    s.after_task(&mut task_cx(&mut model, &device, &info, &stream))
        .unwrap();
    let kept: Vec<(String, Vec<f32>)> = s.experts[0]
        .params
        .iter()
        .map(|(p, t)| (p.clone(), values(t.clone())))
        .collect();
    let mut now: Vec<(String, Vec<f32>)> = model
        .trainable_values()
        .into_iter()
        .map(|(i, t)| (i.path, values(t)))
        .collect();
    now.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(now, kept);
    assert!(
        now.iter()
            .any(|(p, v)| p.ends_with(".lora.b") && v.iter().any(|&x| x != 0.0))
    );
    let _ = train(model, 1);
    let again: Vec<(String, Vec<f32>)> = s.experts[0]
        .params
        .iter()
        .map(|(p, t)| (p.clone(), values(t.clone())))
        .collect();
    assert_eq!(again, kept);
}

/// Without adapters, the first task is refused; with `lora` merging at the task's end
/// (merge = "task"), the end of the first task is, saying merge = "none".
#[test]
fn per_task_lora_needs_lora_without_merge() {
    let _rng = crate::BURN_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex().autodiff();
    let stream = toy_stream();
    let info = task_info(&stream, 0);
    let mut s = PerTaskLora::new(PerTaskLoraParams::default(), 0, 8);
    let mut plain = toy_model(&device);
    let e = s
        .before_task(&mut task_cx(&mut plain, &device, &info, &stream))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the model has none") && e.contains("[[memory]]"),
        "{e}"
    );
    let mut l = lora("rank = 2\ntargets = [\"0.linear\"]\nmerge = \"task\"");
    let mut m = l.adapt(toy_model(&device)).unwrap();
    s.before_task(&mut task_cx(&mut m, &device, &info, &stream))
        .unwrap();
    let m = train(m, 0);
    let m = s.task_end_weights(m, &info).unwrap();
    let mut m = engram_core::strategy::MemoryStrategy::task_end_model(&mut l, m, &info).unwrap();
    let e = s
        .after_task(&mut task_cx(&mut m, &device, &info, &stream))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("merge = \\\"none\\\"") || e.contains("merge = \"none\""),
        "{e}"
    );
}

/// `train_classes = "task"`: each row's loss is the cross-entropy over its own task's classes
/// alone (a replayed row of task 0 over task 0's), checked against the two-class log-softmax by
/// hand; `seen` leaves the batch's mask as the stream made it (none: class-IL without
/// `mask_logits`).
#[test]
fn task_rows_train_on_their_own_classes() {
    use engram_core::strategy::Position;
    let device = Device::flex();
    let stream = toy_stream();
    let position = Position {
        task: 1,
        ..Position::default()
    };
    let controls = crate::test_util::controls();
    let cx = crate::test_util::batch_cx(&position, &controls, &stream, &device);
    let mut refs: Vec<SampleRef> = stream.epoch_order(1, 0, 0)[..3].to_vec();
    refs.push(stream.epoch_order(0, 0, 0)[0]);
    let plain = stream.batch(&refs, Part::Train, 1, &device);
    assert!(plain.logit_mask.is_none());
    let mut seen = PerTaskLora::new(
        PerTaskLoraParams {
            train_classes: TrainClasses::Seen,
            ..PerTaskLoraParams::default()
        },
        0,
        8,
    );
    assert!(
        seen.prepare_batch(plain.clone(), &cx)
            .unwrap()
            .logit_mask
            .is_none()
    );
    let mut s = PerTaskLora::new(PerTaskLoraParams::default(), 0, 8);
    let b = s.prepare_batch(plain, &cx).unwrap();
    let c = stream.num_classes;
    let logits: Vec<f32> = (0..refs.len() * c)
        .map(|i| ((i * 7) % 11) as f32 * 0.3)
        .collect();
    let got = values(engram_core::train::trainer::per_sample_cross_entropy(
        Tensor::from_data(TensorData::new(logits.clone(), [refs.len(), c]), &device),
        &b,
    ));
    let labels = b.labels();
    for (i, r) in refs.iter().enumerate() {
        let own = &stream.tasks[r.task as usize].classes;
        assert_eq!(own.len(), 2);
        let z = |k: usize| f64::from(logits[i * c + k]);
        let lse = (z(own[0]).exp() + z(own[1]).exp()).ln();
        let want = lse - z(labels[i] as usize);
        assert!(
            (f64::from(got[i]) - want).abs() < 1e-5,
            "row {i} (task {}): {} vs {want}",
            r.task,
            got[i]
        );
    }
}
