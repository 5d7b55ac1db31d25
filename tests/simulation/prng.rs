//! The simulation's one source of randomness: SplitMix64, so a run is a function of its seed.

/// SplitMix64; every random choice of a run comes from one of these, seeded from the run's seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// An independent generator for one part of the simulation, derived from `seed` and `stream`.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut mixer = Self(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        Self(mixer.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A value in `min..=max`.
    pub fn between(&mut self, min: u64, max: u64) -> u64 {
        min + self.below(max.saturating_sub(min) + 1)
    }

    /// True with probability `per_million` / 1,000,000.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    /// One of `choices`.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }
}
