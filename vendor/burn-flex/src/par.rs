//! (engram patch.) Elementwise loops split across rayon's pool.
//!
//! The published crate runs its elementwise kernels on one thread: the
//! closure-based paths (`scalar_op`, `unary_op`, `binary_op_typed`)
//! always, and `simd::portable`'s kernels below 4 Mi elements. A training
//! step's elementwise work (the optimiser's update over every parameter,
//! the activations and their gradients) then ran on one core while the
//! others waited for the next matmul: on the 784-400-400-10 MLP at two
//! threads it was a third of the step, and the step was no faster than
//! at one thread.
//!
//! Splitting is exact: every element is computed by the same code as
//! before, and chunks are whole multiples of 64 elements, so a SIMD kernel
//! puts each element in the same lane kind (vector or scalar tail) as the
//! unsplit loop would — only the last chunk has a tail, as the whole
//! slice had.

#[cfg(feature = "rayon")]
use rayon::prelude::*;

/// Fewest elements worth splitting: PyTorch's `at::internal::GRAIN_SIZE`
/// (32,768), below which waking another thread costs more than it saves.
pub(crate) const GRAIN: usize = 32 * 1024;

/// Whether a loop over `len` elements is split: at least [`GRAIN`]
/// elements and more than one thread in the current rayon pool.
#[inline]
pub(crate) fn worth_splitting(len: usize) -> bool {
    #[cfg(feature = "rayon")]
    {
        len >= GRAIN && rayon::current_num_threads() > 1
    }
    #[cfg(not(feature = "rayon"))]
    {
        let _ = len;
        false
    }
}

/// Chunk length for `len` elements: about four chunks a thread (so a thread
/// that finishes early steals work), a multiple of 64 elements.
#[cfg(feature = "rayon")]
pub(crate) fn chunk_len(len: usize) -> usize {
    let pieces = rayon::current_num_threads() * 4;
    len.div_ceil(pieces).next_multiple_of(64).max(GRAIN / 4)
}

/// Runs `f` over `dst` in chunks, in parallel when [`worth_splitting`].
#[inline]
pub(crate) fn chunks_mut<E, F>(dst: &mut [E], f: F)
where
    E: Send,
    F: Fn(&mut [E]) + Sync + Send,
{
    #[cfg(feature = "rayon")]
    if worth_splitting(dst.len()) {
        let c = chunk_len(dst.len());
        dst.par_chunks_mut(c).for_each(|d| f(d));
        return;
    }
    f(dst)
}

/// Runs `f` over matching chunks of `dst` and `src` (equal lengths), in
/// parallel when [`worth_splitting`].
#[inline]
pub(crate) fn zip_chunks_mut<E, S, F>(dst: &mut [E], src: &[S], f: F)
where
    E: Send,
    S: Sync,
    F: Fn(&mut [E], &[S]) + Sync + Send,
{
    debug_assert_eq!(dst.len(), src.len());
    #[cfg(feature = "rayon")]
    if worth_splitting(dst.len()) {
        let c = chunk_len(dst.len());
        dst.par_chunks_mut(c)
            .zip(src.par_chunks(c))
            .for_each(|(d, s)| f(d, s));
        return;
    }
    f(dst, src)
}

/// `src.iter().map(op).collect()`, in parallel when [`worth_splitting`]:
/// the output is allocated once and each chunk written in place.
#[inline]
pub(crate) fn map_collect<S, R, F>(src: &[S], op: F) -> alloc::vec::Vec<R>
where
    S: Copy + Sync,
    R: Copy + Send,
    F: Fn(S) -> R + Sync + Send,
{
    if !worth_splitting(src.len()) {
        return src.iter().map(|&x| op(x)).collect();
    }
    let n = src.len();
    let mut out = alloc::vec::Vec::<R>::with_capacity(n);
    zip_chunks_mut(&mut out.spare_capacity_mut()[..n], src, |d, s| {
        for (d, &s) in d.iter_mut().zip(s) {
            d.write(op(s));
        }
    });
    // SAFETY: the chunks cover `0..n`, and every element of each was written.
    unsafe { out.set_len(n) };
    out
}

/// `lhs.iter().zip(rhs).map(op).collect()` over equal lengths, in parallel
/// when [`worth_splitting`].
#[inline]
pub(crate) fn zip_map_collect<S, R, F>(lhs: &[S], rhs: &[S], op: F) -> alloc::vec::Vec<R>
where
    S: Copy + Sync,
    R: Copy + Send,
    F: Fn(S, S) -> R + Sync + Send,
{
    debug_assert_eq!(lhs.len(), rhs.len());
    #[cfg(feature = "rayon")]
    if worth_splitting(lhs.len()) {
        let n = lhs.len();
        let c = chunk_len(n);
        let mut out = alloc::vec::Vec::<R>::with_capacity(n);
        out.spare_capacity_mut()[..n]
            .par_chunks_mut(c)
            .zip(lhs.par_chunks(c).zip(rhs.par_chunks(c)))
            .for_each(|(d, (l, r))| {
                for ((d, &a), &b) in d.iter_mut().zip(l).zip(r) {
                    d.write(op(a, b));
                }
            });
        // SAFETY: the chunks cover `0..n`, and every element of each was written.
        unsafe { out.set_len(n) };
        return out;
    }
    lhs.iter().zip(rhs).map(|(&a, &b)| op(a, b)).collect()
}
