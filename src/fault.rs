//! Fault injection: drop, duplicate and reorder datagrams, on send or on receive, for tests.
//!
//! `tc netem` is not available everywhere (it is not on our CI hosts), so loss, duplication and
//! reordering are injected in-process. A channel holds an `Option<FaultInjector>` per direction: `None`
//! (the default) costs one predictable branch per datagram, and nothing else.
//!
//! Decisions come from a seeded xorshift generator, so a failing run can be replayed with its seed.

use std::fmt;
use std::str::FromStr;

/// Rates (each in `0.0..=1.0`) of the faults to inject on one direction of a channel, and the seed.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct FaultConfig {
    /// Probability that a datagram is dropped.
    pub drop: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back and delivered after the next one.
    pub reorder: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl FaultConfig {
    /// Whether any fault is configured.
    pub fn is_active(&self) -> bool {
        self.drop > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0
    }

    /// Checks that every rate is a probability and that they add up to at most 1.
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [("drop", self.drop), ("duplicate", self.duplicate), ("reorder", self.reorder)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("fault rate {name}={rate} is not a probability in 0..=1"));
            }
        }
        if self.drop + self.duplicate + self.reorder > 1.0 {
            return Err("fault rates drop + duplicate + reorder must add up to at most 1".into());
        }
        Ok(())
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "drop={},duplicate={},reorder={},seed={}", self.drop, self.duplicate, self.reorder, self.seed)
    }
}

impl FromStr for FaultConfig {
    type Err = String;

    /// Parses `drop=0.05,duplicate=0.01,reorder=0.01,seed=7` (any subset, any order).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut config = FaultConfig::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| format!("fault option '{part}' is not key=value"))?;
            let rate = || value.parse::<f64>().map_err(|e| format!("fault {key}={value}: {e}"));
            match key {
                "drop" => config.drop = rate()?,
                "duplicate" => config.duplicate = rate()?,
                "reorder" => config.reorder = rate()?,
                "seed" => config.seed = value.parse().map_err(|e| format!("fault seed={value}: {e}"))?,
                _ => return Err(format!("unknown fault option '{key}': use drop, duplicate, reorder, seed")),
            }
        }
        config.validate()?;
        Ok(config)
    }
}

/// What happens to one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered once, as usual.
    Deliver,
    /// Never delivered.
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Held back and delivered after the next datagram (or at the next flush).
    Reorder,
}

/// Counts of the faults injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Datagrams dropped.
    pub dropped: u64,
    /// Datagrams delivered twice.
    pub duplicated: u64,
    /// Datagrams delivered out of order.
    pub reordered: u64,
}

/// A seeded source of datagram fates, with the one datagram it may be holding back.
#[derive(Debug)]
pub struct FaultInjector {
    config: FaultConfig,
    state: u64,
    held: Vec<u8>,
    holding: bool,
    stats: FaultStats,
}

impl FaultInjector {
    /// An injector for `config`; `max_datagram` sizes the buffer a held-back datagram is copied into,
    /// so that injection does not allocate after start.
    pub fn new(config: FaultConfig, max_datagram: usize) -> Self {
        // xorshift has one forbidden state, zero; mix the seed so that small seeds differ widely.
        let state = config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Self { config, state, held: Vec::with_capacity(max_datagram), holding: false, stats: FaultStats::default() }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Faults injected so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    fn next_unit(&mut self) -> f64 {
        // xorshift64*: small, fast and good enough to draw independent fates.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let x = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Draws the fate of the next datagram.
    pub fn fate(&mut self) -> Fate {
        let u = self.next_unit();
        let c = &self.config;
        if u < c.drop {
            Fate::Drop
        } else if u < c.drop + c.duplicate {
            Fate::Duplicate
        } else if u < c.drop + c.duplicate + c.reorder {
            Fate::Reorder
        } else {
            Fate::Deliver
        }
    }

    /// Passes `datagram` through the faults: `deliver` is called zero, one, two or three times (a held
    /// datagram is released after this one), in the order the bytes should reach their destination.
    pub fn apply(&mut self, datagram: &[u8], mut deliver: impl FnMut(&[u8])) {
        match self.fate() {
            Fate::Drop => self.stats.dropped += 1,
            Fate::Duplicate => {
                self.stats.duplicated += 1;
                deliver(datagram);
                deliver(datagram);
            }
            Fate::Reorder if !self.holding => {
                self.stats.reordered += 1;
                self.held.clear();
                self.held.extend_from_slice(datagram);
                self.holding = true;
                return;
            }
            Fate::Reorder | Fate::Deliver => deliver(datagram),
        }
        self.flush(deliver);
    }

    /// Delivers the held-back datagram, if any (call when a duty cycle found nothing else to do, so that
    /// a reordered datagram is late but never lost).
    pub fn flush(&mut self, mut deliver: impl FnMut(&[u8])) {
        if self.holding {
            self.holding = false;
            deliver(&self.held);
        }
    }

    /// Whether a datagram is being held back.
    pub fn is_holding(&self) -> bool {
        self.holding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: FaultConfig, n: u32) -> (Vec<u32>, FaultStats) {
        let mut f = FaultInjector::new(config, 16);
        let mut out = Vec::new();
        for i in 0..n {
            f.apply(&i.to_le_bytes(), |d| out.push(u32::from_le_bytes(d.try_into().unwrap())));
        }
        f.flush(|d| out.push(u32::from_le_bytes(d.try_into().unwrap())));
        (out, f.stats())
    }

    #[test]
    fn parses_prints_and_validates() {
        let c: FaultConfig = "drop=0.05,duplicate=0.01,reorder=0.01,seed=7".parse().unwrap();
        assert_eq!(c, FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed: 7 });
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c);
        assert!("drop=2".parse::<FaultConfig>().unwrap_err().contains("probability"));
        assert!("drop=0.6,duplicate=0.6".parse::<FaultConfig>().is_err());
        assert!("lose=0.1".parse::<FaultConfig>().unwrap_err().contains("unknown"));
        assert!(!FaultConfig::default().is_active());
    }

    #[test]
    fn no_faults_delivers_everything_in_order() {
        let (out, stats) = run(FaultConfig::default(), 1000);
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
        assert_eq!(stats, FaultStats::default());
    }

    #[test]
    fn rates_are_honoured_and_nothing_is_invented() {
        let config = FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed: 42 };
        let n = 200_000;
        let (out, stats) = run(config, n);
        // Every delivered value was sent; counts match the stats exactly.
        assert_eq!(out.len() as u64, n as u64 - stats.dropped + stats.duplicated);
        let mut seen = vec![0u32; n as usize];
        for v in &out {
            seen[*v as usize] += 1;
        }
        assert_eq!(seen.iter().filter(|&&c| c == 0).count() as u64, stats.dropped);
        assert_eq!(seen.iter().filter(|&&c| c == 2).count() as u64, stats.duplicated);
        // Rates within 10% of the configured ones over 200k draws (binomial sd is ~1% of the mean at 5%).
        let near = |got: u64, rate: f64| (got as f64 - rate * n as f64).abs() < 0.1 * rate * n as f64;
        assert!(near(stats.dropped, 0.05), "{stats:?}");
        assert!(near(stats.duplicated, 0.01), "{stats:?}");
        assert!(near(stats.reordered, 0.01), "{stats:?}");
        // Some value arrives after its successor.
        assert!(out.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn same_seed_same_fates() {
        let config = FaultConfig { drop: 0.1, duplicate: 0.1, reorder: 0.1, seed: 3 };
        assert_eq!(run(config, 5000).0, run(config, 5000).0);
        let other = FaultConfig { seed: 4, ..config };
        assert_ne!(run(config, 5000).0, run(other, 5000).0);
    }
}
