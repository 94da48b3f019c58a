//! SplitMix64, a few lines that never change: every record, id and instant of the
//! benchmark is a function of its position alone, the same on every run and machine.

use uuid::Uuid;

/// SplitMix64's finaliser: a fixed, well-mixed function of its input.
pub fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A number that depends on every one of `parts`, in order.
pub fn hash(parts: &[u64]) -> u64 {
    parts.iter().fold(0x6c65_6374_6572_6e21, |state, part| mix(state ^ mix(*part)))
}

/// A version-4-shaped UUID that is a function of `parts` only.
pub fn derived_id(parts: &[u64]) -> Uuid {
    let state = hash(parts);
    let bytes = (u128::from(mix(state ^ 1)) << 64 | u128::from(mix(state ^ 2))).to_be_bytes();
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

#[derive(Debug)]
pub struct Prng(u64);

impl Prng {
    pub fn new(parts: &[u64]) -> Self {
        Self(hash(parts))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next_u64() % (high - low + 1).max(1) as u64) as i64
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// `count` decimal digits, the first not 0.
    pub fn digits(&mut self, count: usize) -> String {
        (0..count)
            .map(|position| char::from(b'0' + if position == 0 { 1 + self.below(9) } else { self.below(10) } as u8))
            .collect()
    }
}
