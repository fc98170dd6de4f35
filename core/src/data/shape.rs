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
