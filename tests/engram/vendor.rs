//! vendor/burn-flex's changes compute bit for bit what the published burn-flex 0.22.1 computes
//! (vendor/README.md). Each test sets a patched kernel beside a path the patch left untouched:
//! the published `TensorData::random`, the generic max-pool loop, an element-by-element gather.

use engram::core::burn::tensor::ops::MaxPoolOptions;
use engram::core::burn::tensor::{Device, Distribution, Tensor, TensorData, module};

/// FNV-1a over the bit patterns of `values`: a digest that moves with any bit of any value.
fn digest(values: &[f32]) -> u64 {
    values.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01b3)
    })
}

/// The backend's `float_random` (one sampler a tensor) draws the very numbers burn-std's
/// `TensorData::random` (one sampler an element) draws from the same seeded generator: dropout
/// masks (Bernoulli), uniform and normal initialisations, f32. The digests and sums are those of
/// `TensorData::random::<f32>([37, 29], dist, &mut StdRng::seed_from_u64(seed))`, the published
/// path, recorded with rand 0.10.4 (a test beside it compared the two draw for draw; rand is
/// not a dependency here, so that `cargo test` builds Burn with `cargo build`'s features).
#[test]
fn random_tensors_are_the_published_draws() {
    let device = Device::flex();
    let published = [
        (
            Distribution::Bernoulli(0.9),
            0xafe5_b63c_a2a3_171f_u64,
            971.0_f32,
        ),
        (
            Distribution::Uniform(-0.5, 2.0),
            0x1e91_3afc_06f9_0289,
            785.225_46,
        ),
        (
            Distribution::Normal(0.1, 3.0),
            0x739f_aa8a_f89c_0bf7,
            128.732_21,
        ),
        (Distribution::Default, 0xdffc_fc9d_91f6_9b6d, 523.317_75),
    ];
    for (i, (dist, want, sum)) in published.into_iter().enumerate() {
        device.seed(40 + i as u64);
        let ours = Tensor::<2>::random([37, 29], dist, &device)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(ours.len(), 37 * 29);
        assert_eq!(ours.iter().sum::<f32>(), sum, "{dist:?}");
        assert_eq!(digest(&ours), want, "{dist:?}: {:#018x}", digest(&ours));
    }
    // A Bernoulli(0.9) mask by hand: 971 of its 1,073 entries are 1, the others 0.
    device.seed(40);
    let mask = Tensor::<2>::random([37, 29], Distribution::Bernoulli(0.9), &device)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(mask.iter().filter(|&&x| x == 1.0).count(), 971);
    assert_eq!(mask.iter().filter(|&&x| x == 0.0).count(), 1073 - 971);
}

/// The 2x2, stride-2 max pool's own loop against the generic loop (reached by `ceil_mode` on an
/// even-sized input, where it gives the same windows): values and argmax indices, on values with
/// ties (the first of equal values wins) and NaNs (a NaN wins, the last one in the window).
#[test]
fn the_2x2_max_pool_is_the_generic_loop() {
    let device = Device::flex();
    let (n, c, h, w) = (3, 4, 6, 8);
    let mut values: Vec<f32> = (0..n * c * h * w)
        .map(|i| ((i * 7919) % 5) as f32 - 2.0)
        .collect();
    // The first plane's second window (x[2], x[3], x[10], x[11]) ties at 3.0, its third holds
    // one NaN (x[5]), its fourth two (x[6], x[15]).
    for (i, v) in [(2, 1.0), (3, 3.0), (10, 3.0), (11, 0.0)] {
        values[i] = v;
    }
    for i in [5, 6, 15] {
        values[i] = f32::NAN;
    }
    let x = Tensor::<4>::from_data(TensorData::new(values, [n, c, h, w]), &device);
    let pool = |ceil| {
        let (y, idx) = module::max_pool2d_with_indices(
            x.clone(),
            MaxPoolOptions::new([2, 2]).with_ceil_mode(ceil),
        );
        (y.into_data().try_to_vec::<f32>().unwrap(), idx.into_data())
    };
    let (fast, fast_idx) = pool(false);
    let (generic, generic_idx) = pool(true);
    assert_eq!(fast.len(), n * c * (h / 2) * (w / 2));
    assert!(
        fast.iter()
            .zip(&generic)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    assert_eq!(fast_idx, generic_idx);
    // By hand, the first plane's first four windows: x[0..2], x[8..10] = -2, 2, 0, -1 gives 2
    // at 1; the tie gives the first 3.0 (index 3); a NaN wins (index 5); of two NaNs the last
    // (index 15).
    let idx = fast_idx.convert::<i64>().try_to_vec::<i64>().unwrap();
    assert_eq!((fast[0], idx[0]), (2.0, 1));
    assert_eq!((fast[1], idx[1]), (3.0, 3));
    assert!(fast[2].is_nan() && idx[2] == 5, "{} at {}", fast[2], idx[2]);
    assert!(
        fast[3].is_nan() && idx[3] == 15,
        "{} at {}",
        fast[3],
        idx[3]
    );
}

/// A copy of strided rows (the `[C, N, H·W]` view batch norm reshapes) equals an element-by-
/// element gather of the same view.
#[test]
fn strided_rows_copy_as_gathered() {
    let device = Device::flex();
    let (n, c, h, w) = (5, 3, 4, 7);
    let values: Vec<f32> = (0..n * c * h * w).map(|i| i as f32 * 0.5 - 3.0).collect();
    let x = Tensor::<4>::from_data(TensorData::new(values.clone(), [n, c, h, w]), &device);
    let got = x
        .swap_dims(0, 1)
        .reshape([c, n * h * w])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let mut want = Vec::with_capacity(values.len());
    for ci in 0..c {
        for ni in 0..n {
            for s in 0..h * w {
                want.push(values[(ni * c + ci) * h * w + s]);
            }
        }
    }
    assert_eq!(got, want);
}

/// book/src/figures/vendor-gain.md is `bench/vendor-gain.sh`'s output (a golden file: the
/// second build against the published crate is not made here): one row per model and thread
/// count, with both builds' samples/s, the gain that is their ratio, and each round.
#[test]
fn the_vendor_gain_figure_is_generated() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fig = std::fs::read_to_string(root.join("book/src/figures/vendor-gain.md")).unwrap();
    assert!(
        fig.starts_with("<!-- Generated by `bash bench/vendor-gain.sh`; do not edit by hand. -->"),
        "{fig}"
    );
    let rows = crate::util::table_rows(&fig, "| model");
    // MLP, CNN, ViT and BERT at 1 and 2 threads.
    assert_eq!(rows.len(), 8, "{fig}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 6, "{row:?}");
        assert_eq!(row[1], ["1", "2"][i % 2], "{row:?}");
        let (v, p): (f64, f64) = (row[2].parse().unwrap(), row[3].parse().unwrap());
        let gain: f64 = row[4].trim_end_matches(" %").parse().unwrap();
        assert!((gain - 100.0 * (v / p - 1.0)).abs() < 1.0, "{row:?}");
        assert_eq!(row[5].split(", ").count(), 3, "three rounds: {row:?}");
    }
    let script = std::fs::read_to_string(root.join("bench/vendor-gain.sh")).unwrap();
    assert!(script.contains("> book/src/figures/vendor-gain.md.tmp"));
}
