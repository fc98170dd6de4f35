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
