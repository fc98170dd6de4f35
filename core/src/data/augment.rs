//! Data augmentation of training batches (`[data.augment]`): a random crop with zero padding
//! and a random horizontal flip, the two transforms of the CIFAR recipes (He et al. 2016, §4.2:
//! "4 pixels are padded on each side, and a 32×32 crop is randomly sampled from the padded
//! image or its horizontal flip"), as Avalanche's and Mammoth's training transforms
//! (`RandomCrop(32, padding=4)`, `RandomHorizontalFlip()`) apply them.
//!
//! - **Keys**: [`Augment`] (`crop_padding`, `flip`).
//! - **Where**: on each training step's batch, after the forgetting strategies prepared it, so
//!   that replayed rows are augmented when drawn and replay buffers keep the original samples
//!   (they store [`SampleRef`](super::stream::SampleRef)s). Evaluation, Fisher passes and
//!   every other batch gathered by [`Stream::batch`] are never augmented.
//! - **What**: sample `i` of the batch draws an offset `(dy, dx)`, each uniform in
//!   `0..=2p` for `crop_padding = p`, and a flip with probability ½; its output pixel
//!   `(c, y, x)` is the padded image's pixel `(c, y + dy, x' + dx)` with `x' = W − 1 − x` when
//!   flipped, else `x`. Padding is black: the stored value 0, normalised
//!   (`−mean_c/std_c`), as torchvision pads before `Normalize`.
//! - **How**: one gather on the batch tensor `[batch, features]` extended by one padding column
//!   per channel, with indices drawn on the host: no per-sample loop on the device.
//! - **Seeded**: the draws come from the stream `(seed, "augment", task, global step)`
//!   ([`crate::rng`]): the same seed gives the same augmented batches, and a resumed run
//!   draws what the uninterrupted one drew.

use super::InputShape;
use super::stream::{Batch, Part, Stream};
use crate::config::{Augment, Scenario};
use crate::rng;
use burn::tensor::{Int, Tensor, TensorData};
use rand::Rng as _;

/// One sample's draw: its crop offset in the padded image and whether it is flipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    /// Rows skipped at the padded image's top, `0..=2·crop_padding`.
    pub dy: usize,
    /// Columns skipped at the padded image's left, `0..=2·crop_padding`.
    pub dx: usize,
    /// Flipped left to right.
    pub flip: bool,
}

/// Checks `a` against the data: images (`[channels, height, width]`) only, and not the
/// permuted scenario (its pixels are shuffled: no longer an image); a padding below the
/// height and the width.
///
/// # Errors
/// The reason, for the caller to place in the config.
pub fn check(a: &Augment, input: InputShape, scenario: Scenario) -> Result<(), String> {
    if a.is_off() {
        return Ok(());
    }
    let InputShape::Image { height, width, .. } = input else {
        return Err(format!(
            "[data.augment] crops and flips images; this data's samples are {input} \
             (token or feature data): remove [data.augment], or give image data a \
             `[data] shape = [channels, height, width]`"
        ));
    };
    if scenario == Scenario::DomainIncremental {
        return Err(
            "[data.augment] crops and flips images; the domain-incremental \
             scenario permutes their pixels, so they are images no longer: remove \
             [data.augment] or use a split scenario"
                .into(),
        );
    }
    if a.crop_padding >= height.min(width) {
        return Err(format!(
            "crop_padding = {} must be below the images' height and width ({height}×{width}): \
             4 for 32×32 images, 2 for 28×28 are usual",
            a.crop_padding
        ));
    }
    Ok(())
}

/// The draws of `a` for `n` samples from `r`: per sample `dy`, then `dx` (when cropping), then the
/// flip (when flipping).
pub fn draws(a: &Augment, n: usize, r: &mut rng::Rng) -> Vec<Draw> {
    let span = 2 * a.crop_padding;
    (0..n)
        .map(|_| {
            let (dy, dx) = if span > 0 {
                (r.random_range(0..=span), r.random_range(0..=span))
            } else {
                (0, 0)
            };
            let flip = a.flip && r.random_bool(0.5);
            Draw { dy, dx, flip }
        })
        .collect()
}

/// `a`'s gather indices `[draws.len(), c·h·w]` into a row of `c·h·w` values followed by `c`
/// padding values (value `c·h·w + k` is channel `k`'s padding): output `(c, y, x)` of
/// sample `i` reads padded `(c, y + dy, x' + dx)` ([module docs](self)).
pub fn indices(
    a: &Augment,
    draws: &[Draw],
    channels: usize,
    height: usize,
    width: usize,
) -> Vec<i64> {
    let (p, plane) = (a.crop_padding, height * width);
    let features = channels * plane;
    let mut out = Vec::with_capacity(draws.len() * features);
    for d in draws {
        for c in 0..channels {
            for y in 0..height {
                // Row and column in the unpadded image, when inside it.
                let row = (y + d.dy).checked_sub(p).filter(|&r| r < height);
                for x in 0..width {
                    let xs = if d.flip { width - 1 - x } else { x };
                    let col = (xs + d.dx).checked_sub(p).filter(|&q| q < width);
                    out.push(match (row, col) {
                        (Some(r), Some(q)) => (c * plane + r * width + q) as i64,
                        _ => (features + c) as i64,
                    });
                }
            }
        }
    }
    out
}

/// `x` `[n, c·h·w]` (images of `input`) cropped and flipped as `draws` say, padding channel
/// `k` with `pad[k]` (one value, or one per channel).
pub fn apply(
    a: &Augment,
    x: Tensor<2>,
    input: InputShape,
    pad: &[f32],
    draws: &[Draw],
) -> Tensor<2> {
    let InputShape::Image {
        channels,
        height,
        width,
    } = input
    else {
        return x;
    };
    let [n, f] = x.dims();
    let device = x.device();
    let pads: Vec<f32> = (0..n * channels)
        .map(|k| pad[(k % channels).min(pad.len().saturating_sub(1))])
        .collect();
    let extended = Tensor::cat(
        vec![
            x,
            Tensor::from_data(TensorData::new(pads, [n, channels]), &device),
        ],
        1,
    );
    let idx = indices(a, draws, channels, height, width);
    let idx = Tensor::<2, Int>::from_data(TensorData::new(idx, [n, f]), &device);
    extended.gather(1, idx)
}

/// The training batch `batch` of the step at (`task`, `global_step`) augmented: its inputs
/// cropped and flipped ([`apply`]) with draws from the stream
/// `(seed, "augment", task, global_step)`, padding with the training split's normalised 0.
/// Labels, weights, masks and refs are kept.
pub fn augment_batch(
    a: &Augment,
    mut batch: Batch,
    stream: &Stream,
    seed: u64,
    task: usize,
    global_step: usize,
) -> Batch {
    if a.is_off() || batch.is_empty() {
        return batch;
    }
    // Token ids are never augmented: [`check`] refuses `[data.augment]` for them.
    let x = match batch.x {
        crate::data::input::Input::Float(x) => x,
        ids => {
            batch.x = ids;
            return batch;
        }
    };
    let mut r = rng::stream(seed, "augment", task as u64, global_step as u64);
    let draws = draws(a, batch.refs.len(), &mut r);
    let pad = black(stream, Part::Train);
    batch.x = apply(a, x, stream.dataset.input, &pad, &draws).into();
    batch
}

/// A black pixel (stored value 0) of split `part` normalised, per normalisation group:
/// `0·a − b = −mean/std`.
fn black(stream: &Stream, part: Part) -> Vec<f32> {
    let split = match part {
        Part::Train => &stream.dataset.train,
        Part::Test => &stream.dataset.test,
    };
    split.coefficients().iter().map(|&(_, b)| -b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    fn image(c: usize, h: usize, w: usize) -> InputShape {
        InputShape::Image {
            channels: c,
            height: h,
            width: w,
        }
    }

    fn values(t: Tensor<2>) -> Vec<f32> {
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    /// A 2-channel 3×4 image: value `100·c + 10·y + x`.
    fn known() -> Vec<f32> {
        (0..2)
            .flat_map(|c| {
                (0..3).flat_map(move |y| (0..4).map(move |x| (100 * c + 10 * y + x) as f32))
            })
            .collect()
    }

    #[test]
    fn a_flip_is_the_mirror_image() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(known(), [1, 24]), &device);
        let a = Augment {
            crop_padding: 0,
            flip: true,
        };
        let d = [Draw {
            dy: 0,
            dx: 0,
            flip: true,
        }];
        let out = values(apply(&a, x.clone(), image(2, 3, 4), &[-9.0], &d));
        // Row y of channel c read right to left: 100c + 10y + (3 − x).
        let want: Vec<f32> = (0..2)
            .flat_map(|c| {
                (0..3).flat_map(move |y| (0..4).map(move |x| (100 * c + 10 * y + 3 - x) as f32))
            })
            .collect();
        assert_eq!(out, want);
        // Not flipped: unchanged.
        let d = [Draw {
            dy: 0,
            dx: 0,
            flip: false,
        }];
        assert_eq!(values(apply(&a, x, image(2, 3, 4), &[-9.0], &d)), known());
    }

    #[test]
    fn a_crop_shifts_the_content_by_the_offset_and_pads_each_channel() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(known(), [1, 24]), &device);
        let a = Augment {
            crop_padding: 1,
            flip: false,
        };
        // dy = 2, dx = 0 with padding 1: output (y, x) reads image (y + 1, x − 1).
        let d = [Draw {
            dy: 2,
            dx: 0,
            flip: false,
        }];
        let out = values(apply(&a, x.clone(), image(2, 3, 4), &[-1.0, -2.0], &d));
        #[rustfmt::skip]
        let want = [
            -1.0, 10.0, 11.0, 12.0,
            -1.0, 20.0, 21.0, 22.0,
            -1.0, -1.0, -1.0, -1.0,
            -2.0, 110.0, 111.0, 112.0,
            -2.0, 120.0, 121.0, 122.0,
            -2.0, -2.0, -2.0, -2.0,
        ];
        assert_eq!(out, want);
        // Crop then flip (dy = 1, dx = 2): output (y, x) reads image (y, (3 − x) + 1).
        let d = [Draw {
            dy: 1,
            dx: 2,
            flip: true,
        }];
        let out = values(apply(&a, x, image(2, 3, 4), &[-1.0], &d));
        assert_eq!(&out[..4], &[-1.0, 3.0, 2.0, 1.0]);
        assert_eq!(&out[12..16], &[-1.0, 103.0, 102.0, 101.0]);
    }

    #[test]
    fn draws_cover_the_offsets_and_repeat_with_the_seed() {
        let a = Augment {
            crop_padding: 2,
            flip: true,
        };
        let d1 = draws(&a, 400, &mut rng::stream(7, "augment", 1, 5));
        let d2 = draws(&a, 400, &mut rng::stream(7, "augment", 1, 5));
        let d3 = draws(&a, 400, &mut rng::stream(7, "augment", 1, 6));
        assert_eq!(d1, d2);
        assert_ne!(d1, d3);
        assert!(d1.iter().all(|d| d.dy <= 4 && d.dx <= 4));
        for v in 0..=4 {
            assert!(d1.iter().any(|d| d.dy == v) && d1.iter().any(|d| d.dx == v));
        }
        let flips = d1.iter().filter(|d| d.flip).count();
        assert!((150..250).contains(&flips), "{flips} flips of 400");
        // Off: no draw moves anything.
        let off = draws(&Augment::default(), 3, &mut rng::stream(7, "augment", 1, 5));
        assert!(off.iter().all(|d| *d
            == Draw {
                dy: 0,
                dx: 0,
                flip: false
            }));
    }

    #[test]
    fn non_image_and_permuted_data_and_oversized_padding_are_refused() {
        let a = Augment {
            crop_padding: 4,
            flip: true,
        };
        let e = check(&a, InputShape::Features(12), Scenario::ClassIncremental).unwrap_err();
        assert!(e.contains("vectors of 12 features"), "{e}");
        let e = check(&a, image(1, 28, 28), Scenario::DomainIncremental).unwrap_err();
        assert!(e.contains("permutes"), "{e}");
        let e = check(&a, image(1, 4, 8), Scenario::ClassIncremental).unwrap_err();
        assert!(e.contains("crop_padding = 4 must be below"), "{e}");
        assert!(check(&a, image(3, 32, 32), Scenario::TaskIncremental).is_ok());
        let off = Augment::default();
        assert!(check(&off, InputShape::Features(3), Scenario::DomainIncremental).is_ok());
    }
}
