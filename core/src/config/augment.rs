//! `[data.augment]`'s keys ([`Augment`]); what they do to a training batch is
//! [`crate::data::augment`]'s.

use serde::{Deserialize, Serialize};

/// `[data.augment]`: what each training batch's images go through
/// ([`crate::data::augment`]). Both keys off (the default) is no augmentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Augment {
    /// Pixels of black padding on each side before a random crop back to the image's size
    /// (4 for 32×32 images, 2 for 28×28 are the usual choices); 0 crops nothing. Below the
    /// image's height and width.
    #[serde(default)]
    pub crop_padding: usize,
    /// Flip each image left to right with probability ½.
    #[serde(default)]
    pub flip: bool,
}

impl Augment {
    /// Whether it changes nothing (no padding, no flip).
    pub fn is_off(&self) -> bool {
        self.crop_padding == 0 && !self.flip
    }
}
