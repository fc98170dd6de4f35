use super::*;
use crate::data::InputShape;
use crate::data::stream::{Part, SampleRef};

/// `classes` classes named `names`, `per` training and 2 test samples a class; 2 byte values
/// a sample, `[label, index]`, normalised by `mean`/`std`.
fn ds(name: &str, names: &[&str], per: usize, mean: f32, std: f32) -> Dataset {
    let split = |per: usize| {
        let (mut v, mut l) = (Vec::new(), Vec::new());
        for i in 0..names.len() * per {
            let c = (i % names.len()) as u8;
            v.extend_from_slice(&[c, i as u8]);
            l.push(u32::from(c));
        }
        Split::bytes(v, l, 2, mean, std)
    };
    let mut d = Dataset::new(
        name,
        PathBuf::from(name),
        split(per),
        split(2),
        InputShape::Features(2),
        names.len(),
    );
    d.class_names = names.iter().map(|s| s.to_string()).collect();
    d
}

fn src(d: Dataset, space: Option<&str>) -> Source {
    Source {
        dataset: d,
        label_space: space.map(str::to_string),
        subsample: None,
        test_subsample: None,
    }
}

fn cfg(text: &str) -> DataConfig {
    toml::from_str(text).unwrap()
}

#[test]
fn each_dataset_is_a_task_with_its_classes_offset_into_one_label_space() {
    let a = ds("a", &["x", "y", "z"], 4, 0.0, 1.0);
    let b = ds("b", &["p", "q"], 3, 0.0, 1.0);
    let s = build(vec![src(a, None), src(b, None)], &cfg(""), 0).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s.num_classes, 5);
    assert_eq!(s.dataset.class_names, ["a:x", "a:y", "a:z", "b:p", "b:q"]);
    assert_eq!(s.tasks[0].classes, vec![0, 1, 2]);
    assert_eq!(s.tasks[1].classes, vec![3, 4]);
    // a: 12 training rows 0..12, b: 6 rows 12..18; tests 6 + 4.
    assert_eq!(s.tasks[0].train, (0..12).collect::<Vec<u32>>());
    assert_eq!(s.tasks[1].train, (12..18).collect::<Vec<u32>>());
    assert_eq!(s.tasks[1].test, (6..10).collect::<Vec<u32>>());
    // b's row 1 (class q = 1) is union row 13 with label 3 + 1; its values are unchanged.
    assert_eq!(s.dataset.train.labels[13], 4);
    assert_eq!(s.dataset.train.row(13), Some(&[1u8, 1][..]));
    assert_eq!(s.dataset.test.labels[6..], [3, 4, 3, 4]);
    assert!(matches!(s.dataset.train.values, Values::U8(_)));
}

#[test]
fn a_shared_label_space_maps_classes_by_name() {
    let old = ds("old", &["ham", "spam"], 3, 0.0, 1.0);
    let topic = ds("topic", &["t0", "t1", "t2"], 2, 0.0, 1.0);
    // The new release lists its classes in the other order: matched by name, not position.
    let new = ds("new", &["spam", "ham"], 3, 0.0, 1.0);
    let sources = vec![
        src(old, Some("spam")),
        src(topic, None),
        src(new, Some("spam")),
    ];
    let s = build(sources, &cfg(""), 0).unwrap();
    assert_eq!(
        s.dataset.class_names,
        ["spam:ham", "spam:spam", "topic:t0", "topic:t1", "topic:t2"]
    );
    assert_eq!(s.num_classes, 5);
    assert_eq!(s.tasks[2].classes, vec![0, 1]);
    // new's rows start after old's 6 and topic's 6: its label 0 ("spam") is union class 1.
    assert_eq!(s.dataset.train.labels[12..], [1, 0, 1, 0, 1, 0]);
    // Mismatched names are refused at the entry's label_space.
    let odd = ds("odd", &["ham", "junk"], 2, 0.0, 1.0);
    let e = build(
        vec![
            src(ds("old", &["ham", "spam"], 3, 0.0, 1.0), Some("spam")),
            src(odd, Some("spam")),
        ],
        &cfg(""),
        0,
    )
    .unwrap_err();
    assert_eq!((e.entry, e.key), (1, "label_space"));
    assert!(e.message.contains("[\"ham\", \"junk\"]"), "{}", e.message);
}

#[test]
fn differing_normalisations_are_stored_normalised() {
    // a: (x/255 − 0)/(1/255) = x; b: (x/255 − 0.5)/(0.25) = 4x/255 − 2.
    let a = ds("a", &["x", "y"], 1, 0.0, 1.0 / 255.0);
    let b = ds("b", &["p", "q"], 1, 0.5, 0.25);
    let s = build(vec![src(a, None), src(b, None)], &cfg(""), 0).unwrap();
    let Values::F32(v) = &s.dataset.train.values else {
        panic!("f32 values")
    };
    let want_b = |x: f32| 4.0 * x / 255.0 - 2.0;
    let want = [
        0.0,
        0.0,
        1.0,
        1.0,
        want_b(0.0),
        want_b(0.0),
        want_b(1.0),
        want_b(1.0),
    ];
    for (g, w) in v.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{v:?}");
    }
    assert_eq!(
        (s.dataset.train.mean.clone(), s.dataset.train.std.clone()),
        (vec![0.0], vec![1.0])
    );
}

#[test]
fn a_shape_mismatch_is_refused_at_the_entry() {
    let a = ds("a", &["x", "y"], 2, 0.0, 1.0);
    let mut b = ds("b", &["p", "q"], 2, 0.0, 1.0);
    b.input = InputShape::Image {
        channels: 1,
        height: 1,
        width: 2,
    };
    let e = build(vec![src(a, None), src(b, None)], &cfg(""), 0).unwrap_err();
    assert_eq!((e.entry, e.key), (1, "dataset"));
    assert!(
        e.message
            .contains("`b`'s samples are 1×2 images of 1 channel (2 values)"),
        "{}",
        e.message
    );
}

#[test]
fn class_il_masks_unseen_classes_and_caps_are_per_task() {
    let a = ds("a", &["x", "y", "z"], 4, 0.0, 1.0);
    let b = ds("b", &["p", "q"], 3, 0.0, 1.0);
    let mut sb = src(b, None);
    sb.subsample = Some(2);
    sb.test_subsample = Some(1);
    let s = build(
        vec![src(a, None), sb],
        &cfg("mask_logits = true\nsubsample = 5"),
        0,
    )
    .unwrap();
    assert_eq!(
        [
            s.tasks[0].train.len(),
            s.tasks[1].train.len(),
            s.tasks[1].test.len()
        ],
        [5, 2, 1]
    );
    assert_eq!(s.tasks[0].test.len(), 6);
    assert_eq!(s.allowed_classes(1, 0), Some(vec![0, 1, 2]));
    assert_eq!(s.allowed_classes(1, 1), Some(vec![0, 1, 2, 3, 4]));
    let b = s.batch(
        &[SampleRef { task: 1, index: 12 }],
        Part::Train,
        0,
        &burn::tensor::Device::flex(),
    );
    assert_eq!(b.labels(), [3]);
    let m = b
        .logit_mask
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(m, [0.0, 0.0, 0.0, -1e9, -1e9]);
}
