//! engram's own random streams.
//!
//! Burn's RNG state cannot be read back, so a run that is killed and resumed could not replay
//! it. engram therefore draws every random number it needs (data order, permutations,
//! initialisation, replay sampling) from ChaCha8 generators whose seeds are derived from
//! `(run seed, stream name, a, b)` — for example `("order", task, epoch)` — and reseeds Burn
//! from `(seed, "burn", task, step)` before any Burn op that draws (dropout). Any position of a
//! run can thus be reproduced from the seed and the position alone.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator type used for every engram stream.
pub type Rng = ChaCha8Rng;

/// SplitMix64 finaliser (Steele, Lea & Flood 2014), used to mix stream coordinates.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 64-bit seed for stream `name` at coordinates `(a, b)` of a run seeded with `seed`.
pub fn derive_seed(seed: u64, name: &str, a: u64, b: u64) -> u64 {
    let mut h = mix(seed);
    for byte in name.bytes() {
        h = mix(h ^ u64::from(byte));
    }
    mix(mix(h ^ a) ^ b.rotate_left(17))
}

/// A generator for stream `name` at coordinates `(a, b)`.
pub fn stream(seed: u64, name: &str, a: u64, b: u64) -> Rng {
    Rng::seed_from_u64(derive_seed(seed, name, a, b))
}

/// Fisher–Yates shuffle of `0..n` drawn from `rng`.
pub fn permutation(n: usize, rng: &mut Rng) -> Vec<usize> {
    use rand::seq::SliceRandom;
    let mut v: Vec<usize> = (0..n).collect();
    v.shuffle(rng);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        assert_eq!(derive_seed(0, "order", 1, 2), derive_seed(0, "order", 1, 2));
        assert_ne!(derive_seed(0, "order", 1, 2), derive_seed(0, "order", 2, 1));
        assert_ne!(derive_seed(0, "order", 1, 2), derive_seed(1, "order", 1, 2));
        assert_ne!(derive_seed(0, "order", 1, 2), derive_seed(0, "perm", 1, 2));
        let p1 = permutation(10, &mut stream(3, "x", 0, 0));
        let p2 = permutation(10, &mut stream(3, "x", 0, 0));
        assert_eq!(p1, p2);
        let mut sorted = p1.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    }
}
