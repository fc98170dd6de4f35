//! Property tests over malformed input, replayed in CI with a fixed seed and a bounded number
//! of cases (proptest, ChaCha seeded by `RngSeed::Fixed`): the config decoder (and `prepare`,
//! which decodes every strategy's keys), every data format's reader and the checkpoint reader
//! get valid inputs mutated by byte flips, insertions, deletions, truncations and value
//! replacements. None may panic, abort or allocate without bound: each input either reads or
//! is a typed error that names its file. A failure prints the minimised input.

use engram::core::config::LoadedConfig;
use engram::core::data::Dataset;
use engram::core::data::dataset::Split;
use engram::core::error::Error;
use engram::core::model::InputShape;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use std::path::{Path, PathBuf};

/// A runner with `cases` cases from a fixed seed, so CI replays the same inputs each time.
/// `ENGRAM_FUZZ_SCALE=K` runs K times as many (a longer search than CI's, from seed
/// `ENGRAM_FUZZ_SEED` when given).
fn runner(cases: u32) -> TestRunner {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    TestRunner::new(Config {
        cases: cases * env("ENGRAM_FUZZ_SCALE").unwrap_or(1).max(1) as u32,
        rng_seed: RngSeed::Fixed(env("ENGRAM_FUZZ_SEED").unwrap_or(0x656e_6772_616d)),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    })
}

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum Edit {
    /// XOR the byte at the position with a non-zero mask.
    Flip(prop::sample::Index, u8),
    /// Insert bytes at the position.
    Insert(prop::sample::Index, Vec<u8>),
    /// Delete up to `n` bytes from the position.
    Delete(prop::sample::Index, usize),
    /// Cut the input at the position.
    Truncate(prop::sample::Index),
    /// Copy up to `n` bytes from one position to another (repeats structure).
    Splice(prop::sample::Index, prop::sample::Index, usize),
}

/// Bytes that matter to the formats read here: TOML and JSON punctuation, digits, signs,
/// letters of `nan`/`inf`, newlines, NUL and 0xff (huge header fields).
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b"[]{}=\",.:#-+0123456789eEnaif \n\t\\'".to_vec()),
        Just(0u8),
        Just(0xffu8),
        any::<u8>(),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(i, m)| Edit::Flip(i, m)),
        3 => (any::<prop::sample::Index>(), prop::collection::vec(interesting_byte(), 1..8))
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => (any::<prop::sample::Index>(), 1..32usize).prop_map(|(i, n)| Edit::Delete(i, n)),
        1 => any::<prop::sample::Index>().prop_map(Edit::Truncate),
        1 => (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1..64usize)
            .prop_map(|(a, b, n)| Edit::Splice(a, b, n)),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit(), 1..4)
}

fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = b.len();
        match e {
            Edit::Flip(i, m) if len > 0 => b[i.index(len)] ^= m,
            Edit::Insert(i, x) => {
                let at = i.index(len + 1);
                b.splice(at..at, x.iter().copied());
            }
            Edit::Delete(i, n) if len > 0 => {
                let at = i.index(len);
                b.drain(at..(at + n).min(len));
            }
            Edit::Truncate(i) => b.truncate(i.index(len + 1)),
            Edit::Splice(from, to, n) if len > 0 => {
                let f = from.index(len);
                let part = b[f..(f + n).min(len)].to_vec();
                let at = to.index(len + 1);
                b.splice(at..at, part);
            }
            _ => {}
        }
    }
    b
}

/// The tiny in-memory dataset the config cases name (`dataset = "tiny"`): 24 training and 8
/// test images of 4×4 pixels, 4 classes.
fn tiny() -> Dataset {
    let split = |n: usize| {
        let px: Vec<u8> = (0..n * 16).map(|i| (i * 37 % 251) as u8).collect();
        let labels = (0..n).map(|i| (i % 4) as u32).collect();
        Split::bytes(px, labels, 16, 0.5, 0.3)
    };
    Dataset::new(
        "tiny",
        PathBuf::from("tiny"),
        split(24),
        split(8),
        InputShape::Image {
            channels: 1,
            height: 4,
            width: 4,
        },
        4,
    )
}

const CONFIG: &str = r#"[run]
seed = 0
[data]
dataset = "tiny"
tasks = 2
classes_per_task = 2
[model]
type = "mlp"
hidden = [8]
dropout = 0.1
[optimizer]
type = "sgd"
lr = 0.05
momentum = 0.9
[train]
batch_size = 8
epochs = 1
clip_norm = 1.0
leak_factor = 1.5
[[forgetting]]
type = "ewc"
lambda = 100.0
fisher_samples = 16
[[forgetting]]
type = "replay"
capacity = 20
ratio = 1.0
[[memory]]
type = "checkpoint"
interval = 1
[[scheduler]]
type = "anomaly"
threshold = 0.1
[[scheduler]]
type = "lr"
schedule = "cosine"
warmup_steps = 2
"#;

/// Values put in place of a key's value: out of range, non-finite, of the wrong type, huge.
const VALUES: &[&str] = &[
    "nan",
    "inf",
    "-inf",
    "0",
    "-1",
    "0.0",
    "-1e308",
    "1e308",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "\"\"",
    "\"x\"",
    "[]",
    "[[]]",
    "{}",
    "true",
    "[1, \"a\"]",
    "1979-05-27",
];

/// The config text with the value of its `line`-th `key = value` line replaced by `v`.
fn replace_value(text: &str, line: prop::sample::Index, v: &str) -> String {
    let assigns: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(" = "))
        .map(|(i, _)| i)
        .collect();
    let pick = assigns[line.index(assigns.len())];
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == pick {
                format!("{} = {v}", l.split(" = ").next().unwrap())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A config error must name the file; the others are typed too (no `Other`).
fn check_error(e: &Error, file: &Path) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(!msg.is_empty());
    if matches!(e, Error::Config { .. } | Error::ConfigFile { .. }) {
        prop_assert!(
            msg.contains(&file.display().to_string()),
            "not positioned: {msg}"
        );
    }
    prop_assert!(
        e.exit_code() == 2,
        "exit {} for bad input: {msg}",
        e.exit_code()
    );
    Ok(())
}

#[test]
fn the_config_decoder_and_prepare_never_panic_on_mutated_configs() {
    let mut registry = engram::registry();
    registry.provide(tiny()).unwrap();
    let file = Path::new("/fuzz/experiment.toml");
    // The seed itself is valid.
    let cfg = LoadedConfig::from_source(file, CONFIG.into()).unwrap();
    engram::core::train::trainer::prepare(cfg, &registry).unwrap();
    let strategy = prop_oneof![
        edits().prop_map(|e| apply(CONFIG.as_bytes().to_vec(), &e)),
        (any::<prop::sample::Index>(), prop::sample::select(VALUES))
            .prop_map(|(line, v)| replace_value(CONFIG, line, v).into_bytes()),
    ];
    let (decoded, prepared) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner(400)
        .run(&strategy, |bytes| {
            let Ok(text) = String::from_utf8(bytes) else {
                return Ok(());
            };
            match LoadedConfig::from_source(file, text) {
                Err(e) => check_error(&e, file),
                Ok(cfg) => {
                    decoded.set(decoded.get() + 1);
                    match engram::core::train::trainer::prepare(cfg, &registry) {
                        Ok(_) => {
                            prepared.set(prepared.get() + 1);
                            Ok(())
                        }
                        Err(e) => check_error(&e, file),
                    }
                }
            }
        })
        .unwrap();
    // The cases reach past the parser: some decode, some of those are refused by a check.
    let (decoded, prepared) = (decoded.get(), prepared.get());
    assert!(
        decoded > 40 && prepared > 10,
        "{decoded} decoded, {prepared} prepared"
    );
    assert!(prepared < decoded, "{decoded} decoded, {prepared} prepared");
}

/// Reads every file under `dir` (relative path, bytes), `.gz` files decompressed (the readers
/// take both, and mutating compressed bytes would mostly test the CRC).
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            let bytes = std::fs::read(&p).unwrap();
            if rel.extension().is_some_and(|x| x == "gz") {
                let mut raw = Vec::new();
                use std::io::Read;
                flate2::read::GzDecoder::new(&bytes[..])
                    .read_to_end(&mut raw)
                    .unwrap();
                out.push((rel.with_extension(""), raw));
            } else {
                out.push((rel, bytes));
            }
        }
    }
    out.sort();
    out
}

/// `files` with the one at `which` edited by `edits`.
fn mutate_one(
    files: &[(PathBuf, Vec<u8>)],
    which: prop::sample::Index,
    edits: &[Edit],
) -> Vec<(PathBuf, Vec<u8>)> {
    let mut fs = files.to_vec();
    let i = which.index(fs.len());
    fs[i].1 = apply(std::mem::take(&mut fs[i].1), edits);
    fs
}

fn write_all(dir: &Path, files: &[(PathBuf, Vec<u8>)]) {
    let _ = std::fs::remove_dir_all(dir);
    for (rel, bytes) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

#[test]
fn the_format_readers_never_panic_on_mutated_files() {
    let r = engram::registry();
    let d = tempfile::tempdir().unwrap();
    let ds = tiny();
    for format in ["idx", "npy", "csv", "image-folder"] {
        let seed = d.path().join(format!("{format}-seed"));
        r.write_data(&ds, format, &seed).unwrap();
        let seed_files = files(&seed);
        let case = d.path().join(format!("{format}-case"));
        // The decompressed seed reads back.
        write_all(&case, &seed_files);
        r.read_data("tiny", Some(format), Some(&case)).unwrap();
        let (ok, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        runner(120)
            .run(
                &(any::<prop::sample::Index>(), edits()),
                |(which, edits)| {
                    write_all(&case, &mutate_one(&seed_files, which, &edits));
                    match r.read_data("tiny", Some(format), Some(&case)) {
                        Ok(_) => ok.set(ok.get() + 1),
                        Err(e) => {
                            refused.set(refused.get() + 1);
                            let msg = e.to_string();
                            prop_assert!(
                                e.exit_code() == 2,
                                "{format}: exit {}: {msg}",
                                e.exit_code()
                            );
                            prop_assert!(
                                msg.contains(&case.display().to_string()),
                                "{format}: the error does not name the file: {msg}"
                            );
                        }
                    }
                    Ok(())
                },
            )
            .unwrap();
        let (ok, refused) = (ok.get(), refused.get());
        assert!(refused > 20, "{format}: {ok} read, {refused} refused");
    }
}

#[test]
fn the_checkpoint_reader_never_panics_on_mutated_checkpoints() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    let cfg = crate::util::small_config(
        d.path(),
        "c.toml",
        "checkpoint_every = 4\n[[forgetting]]\ntype = \"ewc\"\n[[forgetting]]\ntype = \"replay\"\ncapacity = 40\n",
    );
    let out = d.path().join("run");
    let (code, msg) = crate::util::run_quiet(&cfg, &out, &[], &[]);
    assert_eq!(code, 0, "{msg}");
    let newest = engram::core::train::checkpoint::newest_first(&out);
    assert!(newest.len() >= 2, "{newest:?}");
    let seed = files(&newest[0]);
    engram::core::train::checkpoint::load_dir(&newest[0]).unwrap();
    let case = d.path().join("case");
    // Mutated files with the manifest's checksums rewritten to match (so that decoding, not
    // only the checksum, is reached), or left as they were.
    let rehash = |fs: &mut Vec<(PathBuf, Vec<u8>)>| {
        let Some(m) = fs.iter().position(|(p, _)| p == Path::new("manifest.json")) else {
            return;
        };
        let Ok(mut manifest) = serde_json::from_slice::<serde_json::Value>(&fs[m].1) else {
            return;
        };
        if let Some(map) = manifest["files"].as_object_mut() {
            for (p, b) in fs.iter() {
                if let Some(v) = map.get_mut(p.to_str().unwrap()) {
                    *v = engram::core::fsutil::sha256_hex(b).into();
                }
            }
        }
        fs[m].1 = serde_json::to_vec(&manifest).unwrap();
    };
    let (ok, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner(200)
        .run(
            &(any::<prop::sample::Index>(), edits(), any::<bool>()),
            |(which, edits, fix)| {
                let mut fs = mutate_one(&seed, which, &edits);
                if fix {
                    rehash(&mut fs);
                }
                write_all(&case, &fs);
                match engram::core::train::checkpoint::load_dir(&case) {
                    Ok(_) => ok.set(ok.get() + 1),
                    Err(e) => {
                        refused.set(refused.get() + 1);
                        let msg = e.to_string();
                        prop_assert!(matches!(e, Error::Checkpoint { .. }), "{msg}");
                        prop_assert!(msg.contains(&case.display().to_string()), "{msg}");
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    let (ok, refused) = (ok.get(), refused.get());
    assert!(ok > 0 && refused > 50, "{ok} read, {refused} refused");

    // Through the commands: the newest checkpoint mutated (checksums rewritten, so it
    // verifies) is passed over for the older one or refused with its path; never a panic.
    let ck_dir = newest[0].clone();
    runner(12)
        .run(
            &(any::<prop::sample::Index>(), edits()),
            |(which, edits)| {
                let mut fs = mutate_one(&seed, which, &edits);
                rehash(&mut fs);
                write_all(&ck_dir, &fs);
                let (code, msg) = crate::util::run(&["eval", out.to_str().unwrap(), "--json"]);
                prop_assert!(!msg.contains("panicked"), "{msg}");
                prop_assert!(code == 0 || code == 2, "exit {code}: {msg}");
                if code == 2 {
                    prop_assert!(msg.contains("checkpoint"), "{msg}");
                }
                Ok(())
            },
        )
        .unwrap();
}

/// What is put in an image-folder's class folder in place of an image file.
#[derive(Clone, Copy, Debug)]
enum NotAFile {
    /// A FIFO (no writer: opening it for reading would wait forever).
    Fifo,
    /// A symbolic link to a path that does not exist.
    Dangling,
    /// A symbolic link to itself.
    Loop,
    /// A directory named like an image (with an image inside or not).
    Directory(bool),
}

#[cfg(unix)]
#[test]
fn issue32_image_folder_entries_that_are_not_files_never_hang_or_panic() {
    let r = engram::registry();
    let d = tempfile::tempdir().unwrap();
    let seed = d.path().join("seed");
    r.write_data(&tiny(), "image-folder", &seed).unwrap();
    let seed_files = files(&seed);
    let case = d.path().join("case");
    let kind = prop_oneof![
        Just(NotAFile::Fifo),
        Just(NotAFile::Dangling),
        Just(NotAFile::Loop),
        any::<bool>().prop_map(NotAFile::Directory),
    ];
    let name = prop::sample::select(vec!["x.png", "0000.png", "zz.jpeg", ".hidden.png", "x.txt"]);
    let (ok, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner(16)
        .run(
            &(kind, name, any::<prop::sample::Index>(), any::<bool>()),
            |(kind, name, class, in_test)| {
                write_all(&case, &seed_files);
                let split = case.join(if in_test { "test" } else { "train" });
                let mut classes: Vec<PathBuf> = std::fs::read_dir(&split)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                classes.sort();
                let at = classes[class.index(classes.len())].join(name);
                match kind {
                    NotAFile::Fifo => {
                        let made = std::process::Command::new("mkfifo").arg(&at).status();
                        prop_assume!(made.is_ok_and(|s| s.success()));
                    }
                    NotAFile::Dangling => {
                        std::os::unix::fs::symlink(case.join("absent.png"), &at).unwrap()
                    }
                    NotAFile::Loop => std::os::unix::fs::symlink(&at, &at).unwrap(),
                    NotAFile::Directory(with_image) => {
                        std::fs::create_dir(&at).unwrap();
                        if with_image {
                            let (_, png) = seed_files
                                .iter()
                                .find(|(p, _)| p.extension().is_some_and(|x| x == "png"))
                                .unwrap();
                            std::fs::write(at.join("inner.png"), png).unwrap();
                        }
                    }
                }
                match r.read_data("tiny", Some("image-folder"), Some(&case)) {
                    Ok(_) => ok.set(ok.get() + 1),
                    Err(e) => {
                        refused.set(refused.get() + 1);
                        let msg = e.to_string();
                        prop_assert!(
                            e.exit_code() == 2,
                            "{kind:?} {name}: exit {}: {msg}",
                            e.exit_code()
                        );
                        prop_assert!(msg.contains(&at.display().to_string()), "{kind:?}: {msg}");
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    // Hidden and non-image names are skipped, directories are read as subfolders: some read.
    assert!(
        ok.get() > 0 && refused.get() > 0,
        "{} read, {} refused",
        ok.get(),
        refused.get()
    );
}

/// Labels near the integer limits, in CSV and NPY: each is refused as not a class index,
/// quickly (no table as long as the label), by the file's name.
#[test]
fn issue32_labels_near_the_integer_limits_are_refused_by_name() {
    let r = engram::registry();
    let d = tempfile::tempdir().unwrap();
    type Files = Vec<(PathBuf, Vec<u8>)>;
    let seeds: Vec<(&str, Files)> = ["csv", "npy"]
        .into_iter()
        .map(|format| {
            let seed = d.path().join(format!("{format}-seed"));
            r.write_data(&tiny(), format, &seed).unwrap();
            (format, files(&seed))
        })
        .collect();
    let label = prop::sample::select(vec![
        i128::from(i64::MAX),
        i128::from(i64::MIN),
        i128::from(u64::MAX),
        i128::from(u32::MAX),
        1 << 31,
        (1 << 31) - 1,
        1 << 32,
        i128::from(engram::core::data::format::MAX_CLASSES),
        1_000_000_000,
        -1,
    ]);
    let case = d.path().join("case");
    runner(24)
        .run(
            &(
                prop::sample::select(vec![0usize, 1]),
                label,
                any::<prop::sample::Index>(),
            ),
            |(which, label, row)| {
                let (format, seed_files) = &seeds[which];
                let mut fs = seed_files.clone();
                let row = row.index(24);
                let y = if *format == "csv" {
                    "train.csv"
                } else {
                    "train_y.npy"
                };
                let (_, bytes) = fs.iter_mut().find(|(p, _)| p == Path::new(y)).unwrap();
                if *format == "csv" {
                    let text = String::from_utf8(bytes.clone()).unwrap();
                    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                    let cells: Vec<&str> = lines[row + 1].splitn(2, ',').collect();
                    lines[row + 1] = format!("{label},{}", cells[1]);
                    *bytes = (lines.join("\n") + "\n").into_bytes();
                } else {
                    // `engram data export` writes labels as little-endian int64 after the header.
                    let start = bytes.len() - 24 * 8;
                    let v =
                        i64::try_from(label).unwrap_or(if label < 0 { i64::MIN } else { i64::MAX });
                    bytes[start + row * 8..start + row * 8 + 8].copy_from_slice(&v.to_le_bytes());
                }
                write_all(&case, &fs);
                let start = std::time::Instant::now();
                let e = r.read_data("tiny", Some(format), Some(&case)).err();
                prop_assert!(
                    start.elapsed().as_secs() < 10,
                    "{format} {label}: {:?}",
                    start.elapsed()
                );
                let e =
                    e.ok_or_else(|| TestCaseError::fail(format!("{format}: label {label} read")))?;
                let msg = e.to_string();
                prop_assert!(e.exit_code() == 2, "{msg}");
                prop_assert!(msg.contains(y), "{format} {label}: {msg}");
                prop_assert!(msg.contains("class"), "{format} {label}: {msg}");
                Ok(())
            },
        )
        .unwrap();
}

/// Keys and values put into a sweep file's axes.
const SWEEP_KEYS: &[&str] = &[
    "optimizer.lr",
    "data.subsample",
    "train.epochs",
    "model.hidden",
    "forgetting.0.capacity",
    "forgetting.7.lambda",
    "scheduler.0.type",
    "nothing.here",
    "seeds",
    "configs",
    "",
    "data",
];

#[test]
fn issue32_sweep_files_with_random_axes_never_panic() {
    crate::util::require_fmnist!();
    let d = tempfile::tempdir().unwrap();
    crate::util::small_config(
        d.path(),
        "base.toml",
        "[[forgetting]]\ntype = \"replay\"\ncapacity = 50\n",
    );
    let file = d.path().join("sweep.toml");
    let value = prop::sample::select(VALUES.to_vec());
    let axis = (
        prop::sample::select(SWEEP_KEYS.to_vec()),
        prop::collection::vec(value, 0..3),
    );
    let (ok, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner(10)
        .run(
            &(prop::collection::vec(axis, 0..3), any::<bool>()),
            |(axes, with_seeds)| {
                let mut text = String::from("[sweep]\nbase = \"base.toml\"\n");
                if with_seeds {
                    text.push_str("seeds = [0]\n");
                }
                for (key, values) in &axes {
                    text.push_str(&format!("{key:?} = [{}]\n", values.join(", ")));
                }
                std::fs::write(&file, &text).unwrap();
                let (code, msg) = crate::util::run(&["sweep", "validate", file.to_str().unwrap()]);
                prop_assert!(
                    !msg.contains("panicked") && !msg.contains("internal error"),
                    "{text}\n{msg}"
                );
                prop_assert!(code == 0 || code == 2, "exit {code}: {text}\n{msg}");
                if code == 0 {
                    ok.set(ok.get() + 1);
                } else {
                    refused.set(refused.get() + 1);
                }
                Ok(())
            },
        )
        .unwrap();
    assert!(
        refused.get() > 0,
        "{} ok, {} refused",
        ok.get(),
        refused.get()
    );
}
