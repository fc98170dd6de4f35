//! Text through the real binary (issue #35): a `text-folder` corpus tokenized by the committed
//! tiny WordPiece tokenizer (`tests/data/tokenizer-tiny/`), trained on by a small `bert`; bad
//! documents as bad input (exit 2) naming the file.

use crate::util::run_quiet;
use std::path::Path;

fn tokenizer() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-tiny/tokenizer.json")
}

/// A corpus of 2 classes × 6 documents under `dir/corpus`, the tokenizer beside the config
/// (named relatively, as a user would), and the config; returns the config's path.
fn setup(dir: &Path) -> std::path::PathBuf {
    for (class, words) in [
        ("business", "shares fell as the bank reported profits"),
        ("sport", "the striker scored and the team won"),
    ] {
        let folder = dir.join("corpus").join(class);
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..6 {
            std::fs::write(folder.join(format!("{i}.txt")), format!("{words} {i}")).unwrap();
        }
    }
    std::fs::copy(tokenizer(), dir.join("tok.json")).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "[run]\nseed = 0\n[data]\nformat = \"text-folder\"\npath = \"corpus\"\n\
         scenario = \"class-incremental\"\ntasks = 1\nclasses_per_task = 2\n\
         [data.options]\ntokenizer = \"tok.json\"\nmax_len = 12\ntest_fraction = 0.5\n\
         [model]\ntype = \"bert\"\nlayers = 1\nhidden = 16\nheads = 2\nffn = 32\nvocab = 200\n\
         [optimizer]\ntype = \"sgd\"\nlr = 0.1\n[train]\nepochs = 1\nbatch_size = 4\n",
    )
    .unwrap();
    cfg
}

#[test]
fn a_bert_trains_on_a_text_folder_and_bad_documents_are_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cfg = setup(d.path());
    // A Latin-1 byte: read lossily, with a warning that counts it.
    std::fs::write(
        d.path().join("corpus/business/latin1.txt"),
        b"caf\xe9 shares",
    )
    .unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out"), &[], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 document(s) are not valid UTF-8"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/report.json")).unwrap())
            .unwrap();
    assert_eq!(
        report["tasks"][0]["class_names"],
        serde_json::json!(["business", "sport"])
    );
    // An empty document: exit 2, the file named.
    std::fs::write(d.path().join("corpus/sport/empty.txt"), "\n  \n").unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out2"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("sport/empty.txt") && out.contains("empty"),
        "{out}"
    );
    // An unknown [data.options] key: refused with its line.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::remove_file(d.path().join("corpus/sport/empty.txt")).unwrap();
    std::fs::write(
        &cfg,
        text.replace("max_len = 12", "max_len = 12\nmaxlen = 3"),
    )
    .unwrap();
    let (code, out) = run_quiet(&cfg, &d.path().join("out3"), &[], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("run.toml:12:") && out.contains("maxlen"),
        "{out}"
    );
}
