//! The core's own source of randomness: SplitMix64, seeded from the configuration, so a member's
//! election timeouts are a function of its seed and its inputs alone.

/// SplitMix64 (Steele, Lea and Flood): a 64-bit state, full period, good enough to spread election
/// timeouts; not for anything secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `min..=max` (`min` when `max <= min`).
    pub fn between(&mut self, min: u64, max: u64) -> u64 {
        let span = max.saturating_sub(min);
        if span == 0 {
            return min;
        }
        min + self.next_u64() % span.saturating_add(1)
    }
}
