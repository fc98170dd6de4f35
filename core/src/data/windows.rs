//! Language-model windows of token ids (issue #31): the data-layer half of next-token
//! training, used by the text formats under `[train] objective = "lm"` and by
//! [`crate::train::lm`] (which re-exports [`chunk_windows`]).

use crate::error::{Error, Result};

/// Concatenate-and-chunk: each document of `docs` (token ids) followed by `eos` (when the
/// tokenizer defines one), concatenated in order, then cut into windows of `window` tokens;
/// the final remainder shorter than `window` is dropped.
///
/// # Errors
/// [`Error::Data`] when `window` is 0 (a window must hold at least one token; a next-token
/// loss needs 2).
pub fn chunk_windows(docs: &[Vec<u32>], eos: Option<u32>, window: usize) -> Result<Vec<Vec<u32>>> {
    if window == 0 {
        return Err(Error::Data(
            "language-model windows: window = 0; a window needs at least 2 tokens".into(),
        ));
    }
    let mut stream: Vec<u32> = Vec::new();
    for d in docs {
        stream.extend_from_slice(d);
        if let Some(e) = eos {
            stream.push(e);
        }
    }
    Ok(stream.chunks_exact(window).map(<[u32]>::to_vec).collect())
}
