//! A batch's input ([`Input`]): normalised float features, or token ids for a model that reads
//! them (BERT's embeddings). Token ids travel as `Int` from the dataset's `uint32` values to the
//! embedding lookup, never through a float: an `f32` holds integers exactly only up to 2^24, an
//! `f16` up to 2048.
//!
//! The operations a strategy needs on rows (concatenate, slice, select, move off autodiff) work
//! on both kinds; a float-only operation (a cast to a compute dtype) leaves ids as they are.
//! Pixel permutations and image augmentation are refused for token data before a run starts
//! (the trainer's checks), so they never see ids.

use burn::tensor::{DType, Device, Int, Tensor};

/// The input rows of a batch.
#[derive(Clone, Debug)]
pub enum Input {
    /// Normalised features `[batch, features]` (images flattened in CHW order).
    Float(Tensor<2>),
    /// Token ids `[batch, len]`, padded with the tokenizer's pad id.
    Ids(Tensor<2, Int>),
}

impl From<Tensor<2>> for Input {
    fn from(t: Tensor<2>) -> Self {
        Input::Float(t)
    }
}

impl From<Tensor<2, Int>> for Input {
    fn from(t: Tensor<2, Int>) -> Self {
        Input::Ids(t)
    }
}

impl Input {
    /// `[rows, features]` or `[rows, len]`.
    pub fn dims(&self) -> [usize; 2] {
        match self {
            Input::Float(t) => t.dims(),
            Input::Ids(t) => t.dims(),
        }
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.dims()[0]
    }

    /// The device the rows live on.
    pub fn device(&self) -> Device {
        match self {
            Input::Float(t) => t.device(),
            Input::Ids(t) => t.device(),
        }
    }

    /// Whether the rows are token ids.
    pub fn is_ids(&self) -> bool {
        matches!(self, Input::Ids(_))
    }

    /// The float features, when the rows are features.
    pub fn float(&self) -> Option<&Tensor<2>> {
        match self {
            Input::Float(t) => Some(t),
            Input::Ids(_) => None,
        }
    }

    /// The token ids, when the rows are ids.
    pub fn ids(&self) -> Option<&Tensor<2, Int>> {
        match self {
            Input::Ids(t) => Some(t),
            Input::Float(_) => None,
        }
    }

    /// The rows of `parts` one after the other (`Tensor::cat` on dimension 0).
    ///
    /// # Panics
    /// When `parts` is empty or mixes features and ids: the rows of one run come from one
    /// dataset, so a mix is a bug in the caller, not bad input.
    pub fn cat(parts: Vec<Input>) -> Input {
        if parts.iter().all(Input::is_ids) {
            let ids = parts.into_iter().filter_map(|p| match p {
                Input::Ids(t) => Some(t),
                Input::Float(_) => None,
            });
            Input::Ids(Tensor::cat(ids.collect(), 0))
        } else {
            let float: Vec<Tensor<2>> = parts
                .into_iter()
                .map(|p| match p {
                    Input::Float(t) => t,
                    Input::Ids(_) => panic!("Input::cat: token ids joined to float features"),
                })
                .collect();
            Input::Float(Tensor::cat(float, 0))
        }
    }

    /// Rows `range` (`[range.len(), features]`).
    pub fn slice_rows(&self, range: std::ops::Range<usize>) -> Input {
        let w = self.dims()[1];
        match self {
            Input::Float(t) => Input::Float(t.clone().slice([range, 0..w])),
            Input::Ids(t) => Input::Ids(t.clone().slice([range, 0..w])),
        }
    }

    /// Rows `indices` `[k]` in that order (`Tensor::select` on dimension 0).
    pub fn select_rows(&self, indices: Tensor<1, Int>) -> Input {
        match self {
            Input::Float(t) => Input::Float(t.clone().select(0, indices)),
            Input::Ids(t) => Input::Ids(t.clone().select(0, indices)),
        }
    }

    /// The same rows off the autodiff graph (Burn's `inner`: no graph, no autodiff dispatch).
    pub fn inner(self) -> Input {
        match self {
            Input::Float(t) => Input::Float(t.inner()),
            Input::Ids(t) => Input::Ids(t.inner()),
        }
    }

    /// The same rows detached from the autodiff graph (a new leaf; ids are never tracked).
    pub fn detach(self) -> Input {
        match self {
            Input::Float(t) => Input::Float(t.detach()),
            ids => ids,
        }
    }

    /// The same rows on `device`.
    pub fn to_device(self, device: &Device) -> Input {
        match self {
            Input::Float(t) => Input::Float(t.to_device(device)),
            Input::Ids(t) => Input::Ids(t.to_device(device)),
        }
    }

    /// Float features cast to `dtype` (mixed precision; unchanged when `None` or already of
    /// that dtype); token ids unchanged, whatever `dtype`: ids are looked up, not computed with.
    pub fn to_dtype(self, dtype: Option<DType>) -> Input {
        match (self, dtype) {
            (Input::Float(t), Some(dt)) if t.dtype() != dt => Input::Float(t.cast(dt)),
            (other, _) => other,
        }
    }

    /// The rows' values as tensor data (features as floats, ids as integers).
    pub fn to_data(&self) -> burn::tensor::TensorData {
        match self {
            Input::Float(t) => t.to_data(),
            Input::Ids(t) => t.to_data(),
        }
    }

    /// The rows' values read back to the host as `i64` (ids as they are, features truncated):
    /// for tests and checks, `[rows × width]` row-major.
    pub fn to_i64(&self) -> Vec<i64> {
        self.to_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    #[test]
    fn ids_keep_their_values_through_every_row_operation() {
        let d = Device::flex();
        // 2^24 + 1 has no f32: a float round-trip would read 16 777 216.
        let big = (1i64 << 24) + 1;
        let a = Input::from(Tensor::<2, Int>::from_data(
            TensorData::new(vec![101i64, big, 0, 30521], [2, 2]),
            &d,
        ));
        let b = Input::from(Tensor::<2, Int>::from_data(
            TensorData::new(vec![7i64, 8], [1, 2]),
            &d,
        ));
        let all = Input::cat(vec![a, b]);
        assert!(all.is_ids());
        assert_eq!(all.dims(), [3, 2]);
        assert_eq!(all.to_i64(), vec![101, big, 0, 30521, 7, 8]);
        assert_eq!(all.slice_rows(1..3).to_i64(), vec![0, 30521, 7, 8]);
        let picked = all.select_rows(Tensor::from_data(TensorData::new(vec![2i64, 0], [2]), &d));
        assert_eq!(picked.to_i64(), vec![7, 8, 101, big]);
        let cast = all.clone().to_dtype(Some(DType::F16)).inner().detach();
        assert_eq!(cast.to_i64(), all.to_i64());
        assert!(all.float().is_none() && all.ids().is_some());
    }

    #[test]
    fn features_cast_and_join() {
        let d = Device::flex();
        let x = Input::from(Tensor::<2>::from_data(
            TensorData::new(vec![1.5f32, -2.0], [1, 2]),
            &d,
        ));
        let two = Input::cat(vec![x.clone(), x.clone()]);
        assert_eq!(two.dims(), [2, 2]);
        assert_eq!(two.to_i64(), vec![1, -2, 1, -2]);
        let h = x.to_dtype(Some(DType::F16));
        assert_eq!(h.float().unwrap().dtype(), DType::F16);
    }
}
