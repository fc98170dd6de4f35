//! The shape of one sample ([`InputShape`]): what a dataset says its samples are and what a
//! model reads its geometry from. It belongs to the data (a dataset carries it); models import
//! it from here.

/// The shape of one input sample, as the dataset gives it. Batches reach the model flattened,
/// `[batch, features]`, in row-major order of these dimensions; image models reshape them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputShape {
    /// Images `[channels, height, width]` (1 channel for the IDX datasets).
    Image {
        /// Colour channels.
        channels: usize,
        /// Rows of pixels.
        height: usize,
        /// Columns of pixels.
        width: usize,
    },
    /// A feature vector `[features]` (a table's row).
    Features(usize),
}

impl InputShape {
    /// Scalars per sample (`channels · height · width`, or the feature count).
    pub fn features(&self) -> usize {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => channels * height * width,
            InputShape::Features(n) => n,
        }
    }

    /// Colour channels: the image's, 1 for a feature vector (its normalisation groups).
    pub fn channels(&self) -> usize {
        match *self {
            InputShape::Image { channels, .. } => channels,
            InputShape::Features(_) => 1,
        }
    }

    /// The dimensions, `[channels, height, width]` or `[features]`.
    pub fn dims(&self) -> Vec<usize> {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => vec![channels, height, width],
            InputShape::Features(n) => vec![n],
        }
    }

    /// `(channels, side)` for square images; `None` for features or non-square images.
    pub fn square(&self) -> Option<(usize, usize)> {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } if height == width => Some((channels, height)),
            _ => None,
        }
    }
}

impl std::fmt::Display for InputShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            InputShape::Image {
                channels,
                height,
                width,
            } => write!(
                f,
                "{height}×{width} images of {channels} channel{}",
                if channels == 1 { "" } else { "s" }
            ),
            InputShape::Features(n) => write!(f, "vectors of {n} features"),
        }
    }
}

/// The normalisation groups of a sample shape when the statistics are computed: one per
/// channel of an image, one per feature of a feature vector (a table's columns have their own
/// scales: standardisation per column).
pub fn groups(input: InputShape) -> usize {
    match input {
        InputShape::Image { channels, .. } => channels,
        InputShape::Features(n) => n,
    }
}

/// Which normalisation rule `means` means and stds give for samples of shape `input`, in words
/// (report.json's `normalization`, the run summary): `per channel` (one mean and std per channel
/// of an image, over its pixels), `over all values` (one mean and std for every value of a
/// sample: the image rule for a feature vector, as a CSV of pixel bytes gets), or `per feature`
/// (one per column of a table).
pub fn normalization_rule(input: InputShape, means: usize) -> String {
    let per = |n: usize, what: &str| {
        if n == 1 {
            format!("1 {what}")
        } else {
            format!("{n} {what}s")
        }
    };
    match input {
        InputShape::Image { channels, .. } if means == channels => format!(
            "per channel: {} and std over the pixels ({input})",
            per(means, "mean")
        ),
        _ if means == 1 => format!(
            "over all values: 1 mean and std for all {} values of a sample, the image rule ({input})",
            input.features()
        ),
        InputShape::Features(n) if means == n => format!(
            "per feature: {} and stds, one per column ({input})",
            per(n, "mean")
        ),
        _ => format!(
            "{} and stds in {means} groups ({input})",
            per(means, "mean")
        ),
    }
}

/// The side of the square grey image a row of `features` pixel bytes would be (`784` → 28):
/// `Some(s)` when `features` is `s²` with `s ≥ 8` (an image of 64 pixels or more: MNIST's 28,
/// the 8×8 digits), else `None` (a table's byte columns, normalised per column).
pub fn square_side(features: usize) -> Option<usize> {
    let s = (features as f64).sqrt().round() as usize;
    (s >= 8 && s * s == features).then_some(s)
}

/// Checks a normalisation against a sample shape: 1 group, or one per channel of an image or
/// per feature of a feature vector ([`groups`]); stds finite and positive, means finite.
///
/// # Errors
/// The reason, for the caller to place.
pub fn check_normalization(
    mean: &[f32],
    std: &[f32],
    input: InputShape,
) -> std::result::Result<(), String> {
    let groups = groups(input);
    let per = if matches!(input, InputShape::Features(_)) {
        "feature"
    } else {
        "channel"
    };
    if mean.len() != std.len() || !(mean.len() == 1 || mean.len() == groups) {
        return Err(format!(
            "{} means and {} stds for {input}: give 1 of each, or one per {per} ({groups})",
            mean.len(),
            std.len()
        ));
    }
    if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!("std {s} must be a finite number above 0"));
    }
    if let Some(m) = mean.iter().find(|m| !m.is_finite()) {
        return Err(format!("mean {m} must be finite"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_in_words_and_square_images() {
        let grey = InputShape::Image {
            channels: 1,
            height: 28,
            width: 28,
        };
        let rgb = InputShape::Image {
            channels: 3,
            height: 32,
            width: 32,
        };
        assert_eq!(
            normalization_rule(grey, 1),
            "per channel: 1 mean and std over the pixels (28×28 images of 1 channel)"
        );
        assert!(normalization_rule(rgb, 3).starts_with("per channel: 3 means"));
        assert!(
            normalization_rule(rgb, 1).starts_with("over all values: 1 mean and std for all 3072")
        );
        assert_eq!(
            normalization_rule(InputShape::Features(784), 1),
            "over all values: 1 mean and std for all 784 values of a sample, the image rule (vectors of 784 features)"
        );
        assert!(
            normalization_rule(InputShape::Features(784), 784)
                .starts_with("per feature: 784 means")
        );
        assert_eq!(square_side(784), Some(28));
        assert_eq!(square_side(64), Some(8));
        for n in [1, 4, 16, 49, 783, 785, 3072] {
            assert_eq!(square_side(n), None, "{n}");
        }
    }
}
