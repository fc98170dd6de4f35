//! Tests of the text formats (`text-folder`, `jsonl`) on tiny corpora written here, tokenized
//! by the committed tiny WordPiece tokenizer (`tests/data/tokenizer-tiny/`); the expected ids
//! are Hugging Face `tokenizers`' for the same texts at `max_len` 8.

use crate::data::DatasetRequest;
use crate::data::dataset::{Dataset, Values};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

fn tokenizer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tokenizer-tiny/tokenizer.json")
}

/// Reads `dir` with `read` and `[data.options]` `options` (the tokenizer added, max_len 8).
fn load(
    read: fn(&DatasetRequest<'_>) -> Result<Dataset>,
    dir: &Path,
    options: &str,
) -> Result<Dataset> {
    let src = format!(
        "[data]\nformat = \"text-folder\"\npath = \".\"\n[data.options]\ntokenizer = {:?}\nmax_len = 8\n{options}\n[model]\ntype = \"mlp\"\n",
        tokenizer().display().to_string()
    );
    let cfg = crate::config::LoadedConfig::from_source(Path::new("t.toml"), src).unwrap();
    let options = cfg.params("data.options", 0);
    read(&DatasetRequest {
        name: "t",
        path: Some(dir),
        options: &options,
        base_dir: Path::new(""),
        lm_window: None,
    })
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn ids(ds_values: &Values) -> Vec<u32> {
    let Values::Tokens(v) = ds_values else {
        panic!("token ids are stored as Values::Tokens")
    };
    v.clone()
}

const STRIKER: [u32; 8] = [2, 58, 137, 199, 138, 184, 7, 3];
const SHARES: [u32; 8] = [2, 101, 117, 167, 7, 3, 0, 0];
const MARKET: [u32; 8] = [2, 58, 128, 178, 136, 89, 7, 3];
const TEAM: [u32; 8] = [2, 58, 142, 47, 79, 7, 3, 0];
/// `caf\xe9 market`: the bad byte is read as U+FFFD, which BERT's normaliser drops.
const CAFE: [u32; 8] = [2, 11, 42, 55, 128, 178, 3, 0];

#[test]
fn text_folder_with_splits_reads_ids_labels_and_drops_shared_test_texts() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(&r.join("train/sport/a.txt"), b"The striker scored.");
    write(&r.join("train/sport/notes.md"), b"skipped");
    write(&r.join("train/business/b.txt"), b"Shares fell.");
    write(&r.join("train/business/c.txt"), b"The market rose.");
    write(&r.join("test/sport/d.txt"), b"The team won.");
    write(&r.join("test/business/e.txt"), b"Shares fell.");
    write(&r.join("test/business/f.txt"), b"caf\xe9 market");
    let ds = load(super::text_folder::read, r, "").unwrap();
    assert_eq!(ds.class_names, ["business", "sport"]);
    assert_eq!(ds.input, crate::data::InputShape::Features(8));
    assert_eq!(
        (ds.train.mean.clone(), ds.train.std.clone()),
        (vec![0.0], vec![1.0])
    );
    assert_eq!(ds.train.labels, [0, 0, 1]);
    assert_eq!(ids(&ds.train.values), [SHARES, MARKET, STRIKER].concat());
    // e.txt repeats a training text: dropped from the test split.
    assert_eq!(ds.test.labels, [0, 1]);
    assert_eq!(ids(&ds.test.values), [CAFE, TEAM].concat());
    // test_fraction beside train/ and test/ is refused at its key.
    let err = load(super::text_folder::read, r, "test_fraction = 0.5").unwrap_err();
    assert!(matches!(err, Error::Config { line: 7, .. }), "{err}");
}

/// `tokenizer` resolves against the config's directory (`base_dir`), as `[data] path`.
#[test]
fn the_tokenizer_path_is_relative_to_the_config() {
    let d = tempfile::tempdir().unwrap();
    write(&d.path().join("a/1.txt"), b"The market rose.");
    write(&d.path().join("b/1.txt"), b"Shares fell.");
    write(&d.path().join("b/2.txt"), b"The team won.");
    let cfg = crate::config::LoadedConfig::from_source(
        Path::new("t.toml"),
        "[data]\nformat = \"text-folder\"\npath = \".\"\n[data.options]\ntokenizer = \"tokenizer.json\"\nmax_len = 8\n[model]\ntype = \"mlp\"\n".into(),
    )
    .unwrap();
    let options = cfg.params("data.options", 0);
    let base = tokenizer().parent().unwrap().to_path_buf();
    let read = |base_dir: &Path| {
        super::text_folder::read(&DatasetRequest {
            name: "",
            path: Some(d.path()),
            options: &options,
            base_dir,
            lm_window: None,
        })
    };
    let ds = read(&base).unwrap();
    // b has two texts: one goes to the test split; a keeps its only one.
    assert_eq!(
        (ds.train.labels.clone(), ds.test.labels.clone()),
        (vec![0, 1], vec![1])
    );
    assert_eq!(&ids(&ds.train.values)[..8], MARKET);
    let err = read(d.path()).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if *path == d.path().join("tokenizer.json")),
        "{err}"
    );
}

#[test]
fn text_folder_refuses_empty_documents_fifos_and_link_loops_by_name() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(&r.join("a/1.txt"), b"The striker scored.");
    write(&r.join("b/2.txt"), b"Shares fell.");
    write(&r.join("b/3.txt"), b" \n\t");
    let err = load(super::text_folder::read, r, "").unwrap_err();
    assert!(
        matches!(&err, Error::DataFile { path, reason, .. } if path.ends_with("b/3.txt") && reason.contains("empty")),
        "{err}"
    );
    std::fs::remove_file(r.join("b/3.txt")).unwrap();
    std::os::unix::fs::symlink("loop.txt", r.join("b/loop.txt")).unwrap();
    let err = load(super::text_folder::read, r, "").unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.ends_with("b/loop.txt"))
            && err.exit_code() == 2,
        "{err}"
    );
    std::fs::remove_file(r.join("b/loop.txt")).unwrap();
    let fifo = r.join("b/fifo.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let err = load(super::text_folder::read, r, "").unwrap_err();
        assert!(
            matches!(&err, Error::Io { path, .. } if *path == fifo) && err.exit_code() == 2,
            "{err}"
        );
    }
}

/// 10 documents per class, class `a` holding one text three times.
fn corpus(r: &Path) {
    for i in 0..10 {
        let a = if i < 3 {
            "the bank".to_string()
        } else {
            format!("the market {i}")
        };
        write(&r.join(format!("a/{i}.txt")), a.as_bytes());
        write(
            &r.join(format!("b/{i}.txt")),
            format!("sport news {i}").as_bytes(),
        );
    }
}

#[test]
fn text_folder_split_is_seeded_stratified_and_keeps_duplicates_together() {
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let one = load(super::text_folder::read, d.path(), "seed = 3").unwrap();
    let again = load(super::text_folder::read, d.path(), "seed = 3").unwrap();
    assert_eq!(ids(&one.test.values), ids(&again.test.values));
    assert_eq!(one.test.labels, again.test.labels);
    assert_eq!(one.train.len() + one.test.len(), 20);
    // Class b: round(0.2 · 10) = 2 test documents; class a: 2, or 3 when the tripled text
    // was drawn first (it moves as a whole).
    let count = |labels: &[u32], c| labels.iter().filter(|&&l| l == c).count();
    assert_eq!(count(&one.test.labels, 1), 2);
    let bank = [2, 58, 109, 155, 3, 0, 0, 0];
    for seed in 0..8 {
        let ds = load(
            super::text_folder::read,
            d.path(),
            &format!("seed = {seed}"),
        )
        .unwrap();
        let a = count(&ds.test.labels, 0);
        let in_test = ids(&ds.test.values)
            .chunks(8)
            .filter(|r| *r == bank)
            .count();
        let in_train = ids(&ds.train.values)
            .chunks(8)
            .filter(|r| *r == bank)
            .count();
        assert!(
            in_test == 0 || in_train == 0,
            "seed {seed}: the duplicate on both sides"
        );
        assert_eq!(in_test + in_train, 3);
        assert!(a == 2 || (a == 3 && in_test == 3), "seed {seed}: {a}");
    }
    let half = load(super::text_folder::read, d.path(), "test_fraction = 0.5").unwrap();
    assert_eq!(count(&half.test.labels, 1), 5);
    let err = load(super::text_folder::read, d.path(), "test_fraction = 1.0").unwrap_err();
    assert!(matches!(err, Error::Config { line: 7, .. }), "{err}");
}

#[test]
fn jsonl_reads_given_splits_and_splits_one_file() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(
        &r.join("train.jsonl"),
        b"{\"text\": \"Shares fell.\", \"label\": 10}\n\n{\"text\": \"The striker scored.\", \"label\": 2}\n",
    );
    write(
        &r.join("test.jsonl"),
        b"{\"text\": \"The team won.\", \"label\": 2}\n{\"text\": \"caf\xe9 market\", \"label\": 10}\n",
    );
    let ds = load(super::jsonl::read, r, "").unwrap();
    // Integer labels sort numerically.
    assert_eq!(ds.class_names, ["2", "10"]);
    assert_eq!(ds.train.labels, [1, 0]);
    assert_eq!(ids(&ds.train.values), [SHARES, STRIKER].concat());
    assert_eq!(ds.test.labels, [0, 1]);
    assert_eq!(ids(&ds.test.values), [TEAM, CAFE].concat());
    // Other field names, one file, a seeded split.
    let mut lines = String::new();
    for i in 0..10 {
        lines += &format!("{{\"body\": \"the market {i}\", \"topic\": \"business\"}}\n");
        lines += &format!("{{\"body\": \"sport news {i}\", \"topic\": \"sport\"}}\n");
    }
    write(&r.join("one.jsonl"), lines.as_bytes());
    let keys = "text_field = \"body\"\nlabel_field = \"topic\"\nseed = 1";
    let ds = load(super::jsonl::read, &r.join("one.jsonl"), keys).unwrap();
    assert_eq!(ds.class_names, ["business", "sport"]);
    assert_eq!((ds.train.len(), ds.test.len()), (16, 4));
    let again = load(super::jsonl::read, &r.join("one.jsonl"), keys).unwrap();
    assert_eq!(ids(&ds.test.values), ids(&again.test.values));
    // A line without the text field: the file and line are named.
    write(
        &r.join("bad.jsonl"),
        b"{\"text\": \"a\", \"label\": 1}\n{\"label\": 2}\n",
    );
    let err = load(super::jsonl::read, &r.join("bad.jsonl"), "").unwrap_err();
    assert!(
        matches!(&err, Error::DataFile { path, reason, .. } if path.ends_with("bad.jsonl") && reason.starts_with("line 2: no `text`")),
        "{err}"
    );
    write(
        &r.join("empty.jsonl"),
        b"{\"text\": \"  \", \"label\": 1}\n",
    );
    let err = load(super::jsonl::read, &r.join("empty.jsonl"), "").unwrap_err();
    assert!(
        err.to_string().contains("line 1: the document is empty"),
        "{err}"
    );
}

#[test]
fn csv_reads_a_text_column_and_refuses_text_keys_without_it() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(
        &r.join("train.csv"),
        b"id,body,topic\n1,Shares fell.,business\n2,\"The striker scored.\",sport\n",
    );
    write(
        &r.join("test.csv"),
        b"id,body,topic\n3,The team won.,sport\n4,Shares fell.,business\n5,caf\xe9 market,business\n",
    );
    let keys = "text_column = \"body\"\nlabel_column = \"topic\"";
    let ds = load(super::csv::read, r, keys).unwrap();
    assert_eq!(ds.class_names, ["business", "sport"]);
    assert_eq!(ds.input, crate::data::InputShape::Features(8));
    assert_eq!(ds.train.labels, [0, 1]);
    assert_eq!(ids(&ds.train.values), [SHARES, STRIKER].concat());
    // Row 4 repeats a training text: dropped.
    assert_eq!(ds.test.labels, [1, 0]);
    assert_eq!(ids(&ds.test.values), [TEAM, CAFE].concat());
    // A missing column is named; text keys without text_column are refused at their key.
    let err = load(super::csv::read, r, "text_column = \"text\"").unwrap_err();
    assert!(err.to_string().contains("no column `text`"), "{err}");
    let err = load(super::csv::read, r, "").unwrap_err();
    assert!(
        matches!(&err, Error::Config { line: 5, message, .. } if message.contains("`tokenizer` applies to text only")),
        "{err}"
    );
}

/// Token ids reach a batch as the tokenizer gave them, whatever their size: the tiny
/// tokenizer with `the` renumbered to 2^24 + 1 (which no `f32` holds: it reads 2^24) and `.`
/// to 30521 (BERT's last id), through the text-folder format, the stream and a batch's `Int`
/// ids; the stored values take 4 bytes an id.
#[test]
fn a_batch_holds_the_tokenizers_ids_exactly_above_2_pow_24() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tokenizer()).unwrap()).unwrap();
    let big: u32 = (1 << 24) + 1;
    json["model"]["vocab"]["the"] = big.into();
    json["model"]["vocab"]["."] = 30521.into();
    let tok = r.join("big.json");
    std::fs::write(&tok, json.to_string()).unwrap();
    assert_eq!(big as f32 as u32, 1 << 24, "2^24 + 1 is not an f32");
    write(&r.join("data/sport/a.txt"), b"The striker scored.");
    write(&r.join("data/business/b.txt"), b"Shares fell.");
    write(&r.join("data/business/c.txt"), b"The market rose.");
    let src = format!(
        "[data]\nformat = \"text-folder\"\npath = \".\"\ntasks = 1\nclasses_per_task = 2\n[data.options]\ntokenizer = {:?}\nmax_len = 8\ntest_fraction = 0.5\n[model]\ntype = \"mlp\"\n",
        tok.display().to_string()
    );
    let cfg = crate::config::LoadedConfig::from_source(Path::new("t.toml"), src).unwrap();
    let options = cfg.params("data.options", 0);
    let ds = super::text_folder::read(&DatasetRequest {
        name: "t",
        path: Some(&r.join("data")),
        options: &options,
        base_dir: Path::new(""),
        lm_window: None,
    })
    .unwrap();
    let striker = [2, big, 137, 199, 138, 184, 30521, 3];
    let want = crate::data::tokenizer::TextTokenizer::load(&tok, 8)
        .unwrap()
        .encode(&["The striker scored."])
        .unwrap();
    assert_eq!(want, striker);
    let row = ds.train.labels.iter().position(|&l| l == 1).unwrap();
    assert_eq!(ds.train.token_row(row).unwrap(), striker);
    assert_eq!(ds.train.sample_bytes(), 8 * 4);
    assert_eq!(ds.train.values.dtype(), "uint32");
    // `engram data export` to NPY writes uint32 arrays, which read back as the same ids.
    let out = r.join("npy");
    super::export(&ds, &out, super::npy::write).unwrap();
    let plain = crate::config::LoadedConfig::from_source(
        Path::new("n.toml"),
        "[data]\nformat = \"npy\"\npath = \".\"\n[model]\ntype = \"mlp\"\n".into(),
    )
    .unwrap();
    let back = super::npy::read(&DatasetRequest {
        name: "t",
        path: Some(&out),
        options: &plain.params("data.options", 0),
        base_dir: Path::new(""),
        lm_window: None,
    })
    .unwrap();
    assert_eq!(back.train.values, ds.train.values);
    assert_eq!(back.fingerprint(), ds.fingerprint());
    let stream =
        crate::data::stream::Stream::build(std::sync::Arc::new(ds), &cfg.config.data, 0).unwrap();
    let refs = [crate::data::stream::SampleRef {
        task: 0,
        index: row as u32,
    }];
    let b = stream.batch(
        &refs,
        crate::data::stream::Part::Train,
        0,
        &burn::tensor::Device::flex(),
    );
    assert!(b.x.is_ids());
    let got: Vec<i64> = b.x.to_i64();
    assert_eq!(got, striker.map(i64::from));
}
