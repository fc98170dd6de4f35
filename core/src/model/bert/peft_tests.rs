//! Unit tests of [`super`]: the name table, transposes and safetensors files.

use super::*;

/// [`param_names`] is [`super::super::hf::remap`] read backwards: each `BertModel` name,
/// renamed by the loader's patterns (and `LayerNorm`'s weight/bias read as gamma/beta),
/// is engram's.
#[test]
fn param_names_invert_the_loaders_remap() {
    let remap = super::super::hf::remap(3);
    let names = param_names(3);
    assert_eq!(names.len(), 5 + 3 * 16);
    for n in &names {
        let mut s = n.hf.clone();
        for [from, to] in &remap {
            s = regex::Regex::new(from)
                .unwrap()
                .replace(&s, to.as_str())
                .into_owned();
        }
        if n.hf.contains("LayerNorm") {
            s = s.replace(".weight", ".gamma").replace(".bias", ".beta");
        }
        assert_eq!(s, n.engram, "{}", n.hf);
    }
}

/// The suffixes pick exactly the chosen modules: `query` alone where it is unique,
/// `attention.output.dense` where `output.dense` would take the FFN's output as well.
#[test]
fn suffixes_pick_exactly_the_chosen_modules() {
    let all: Vec<String> = [
        "encoder.layer.0.attention.self.query",
        "encoder.layer.0.attention.output.dense",
        "encoder.layer.0.output.dense",
        "encoder.layer.1.attention.self.query",
        "encoder.layer.1.attention.output.dense",
        "encoder.layer.1.output.dense",
        "pooler.dense",
    ]
    .map(String::from)
    .to_vec();
    let pick = |c: &[&str]| suffixes(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &all);
    assert_eq!(
        pick(&[
            "encoder.layer.0.attention.self.query",
            "encoder.layer.1.attention.self.query",
            "encoder.layer.0.attention.output.dense",
            "encoder.layer.1.attention.output.dense"
        ]),
        ["query", "attention.output.dense"]
    );
    assert_eq!(
        pick(&["encoder.layer.1.output.dense"]),
        ["layer.1.output.dense"]
    );
}

#[test]
fn transpose_and_safetensors_round_trip() {
    assert_eq!(
        transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
        [1., 4., 2., 5., 3., 6.]
    );
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("t.safetensors");
    let t = vec![
        ("x".to_string(), vec![2, 3], vec![1., 2., 3., 4., 5., 6.]),
        ("y".to_string(), vec![1], vec![-0.5]),
    ];
    std::fs::write(&f, safetensors_bytes(&t)).unwrap();
    let back = read_safetensors(&f).unwrap();
    assert_eq!(back["x"], (vec![2, 3], vec![1., 2., 3., 4., 5., 6.]));
    assert_eq!(back["y"], (vec![1], vec![-0.5]));
    std::fs::write(&f, b"\xff\xff\xff\xff\xff\xff\xff\x7fxx").unwrap();
    assert!(
        read_safetensors(&f)
            .unwrap_err()
            .contains("not a safetensors")
    );
    // A value that is not finite is refused by tensor and index, NaN and infinity alike.
    for bad in [f32::NAN, f32::NEG_INFINITY] {
        let t = vec![("x".to_string(), vec![2, 2], vec![1., 2., bad, 4.])];
        std::fs::write(&f, safetensors_bytes(&t)).unwrap();
        let e = read_safetensors(&f).unwrap_err();
        assert!(e.contains("x holds") && e.contains("flat index 2"), "{e}");
    }
}
