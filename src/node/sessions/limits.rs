//! What one address may take of a member's client endpoint: sessions held at once, and opens (and
//! reconnects, and the challenges they draw) per second.
//!
//! An address is an IPv4 address, or the /64 an IPv6 address is in (a host is given a /64, so an address
//! of each would be no limit at all).
//!
//! # Invariants
//!
//! - [`OpenRate`] holds at most [`OpenRate::CAPACITY`] addresses, whatever sends: when full, it forgets
//!   the addresses whose allowance has refilled, then the one with the most left.
//! - [`OpenRate::take`] lets an address take at most `per_second` in any second after a burst of as
//!   many, and never fails an address it has not seen.

use std::collections::HashMap;
use std::net::IpAddr;

/// An address as the limits count it: an IPv4 address (as an IPv4-mapped IPv6 one), or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct AddressKey(u128);

impl AddressKey {
    /// The key of `ip`.
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(u128::from(v4.to_ipv6_mapped())),
                None => Self(u128::from(v6) & !((1u128 << 64) - 1)),
            },
        }
    }
}

impl AddressKey {
    /// The key of the network `ip` is in: its IPv4 /24, or its IPv6 /48.
    pub(crate) fn prefix_of(ip: IpAddr) -> Self {
        let Self(bits) = Self::of(ip);
        if bits >> 32 == 0xffff {
            Self(bits & !0xff)
        } else {
            Self(bits & !((1u128 << 80) - 1))
        }
    }
}

/// A token bucket per address: opens, reconnects and challenges per second.
#[derive(Debug)]
pub(crate) struct OpenRate {
    per_second: u32,
    buckets: HashMap<AddressKey, Bucket>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Allowance left, in millionths of an open.
    micros: u64,
    /// When it was last refilled (the member's monotonic clock).
    at_ns: u64,
}

impl OpenRate {
    /// Addresses tracked at most.
    pub(crate) const CAPACITY: usize = 4096;

    /// `per_second` opens per second per address.
    pub(crate) fn new(per_second: u32) -> Self {
        Self { per_second: per_second.max(1), buckets: HashMap::new() }
    }

    fn full(&self) -> u64 {
        u64::from(self.per_second) * 1_000_000
    }

    /// Takes one open for `address` at `now_ns`; false when its allowance is spent.
    pub(crate) fn take(&mut self, address: AddressKey, now_ns: u64) -> bool {
        if !self.buckets.contains_key(&address) && self.buckets.len() >= Self::CAPACITY {
            self.make_room(now_ns);
        }
        let full = self.full();
        let per_second = u64::from(self.per_second);
        let bucket = self.buckets.entry(address).or_insert(Bucket { micros: full, at_ns: now_ns });
        let elapsed_us = now_ns.saturating_sub(bucket.at_ns) / 1_000;
        bucket.micros = bucket.micros.saturating_add(elapsed_us.saturating_mul(per_second)).min(full);
        bucket.at_ns = bucket.at_ns.max(now_ns);
        if bucket.micros < 1_000_000 {
            return false;
        }
        bucket.micros -= 1_000_000;
        true
    }

    /// Forgets the addresses whose allowance has refilled by `now_ns`; if none has, the one with the most
    /// left (its next open finds a full allowance, which costs at most one more burst).
    fn make_room(&mut self, now_ns: u64) {
        let full = self.full();
        let per_second = u64::from(self.per_second);
        self.buckets.retain(|_, b| {
            b.micros.saturating_add((now_ns.saturating_sub(b.at_ns) / 1_000).saturating_mul(per_second)) < full
        });
        if self.buckets.len() >= Self::CAPACITY {
            if let Some((&key, _)) = self.buckets.iter().max_by_key(|(_, b)| b.micros) {
                self.buckets.remove(&key);
            }
        }
    }

    /// Addresses tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.len()
    }
}

/// Sessions each address holds at the endpoint.
#[derive(Debug, Default)]
pub(crate) struct SessionsPerAddress {
    counts: HashMap<AddressKey, usize>,
}

impl SessionsPerAddress {
    /// Sessions `address` holds.
    pub(crate) fn of(&self, address: AddressKey) -> usize {
        self.counts.get(&address).copied().unwrap_or(0)
    }

    /// `address` holds one more.
    pub(crate) fn add(&mut self, address: AddressKey) {
        *self.counts.entry(address).or_default() += 1;
    }

    /// `address` holds one fewer.
    pub(crate) fn remove(&mut self, address: AddressKey) {
        if let Some(count) = self.counts.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&address);
            }
        }
    }

    /// Forgets every address.
    pub(crate) fn clear(&mut self) {
        self.counts.clear();
    }

    /// The address holding the most sessions, and how many (the lowest such address on a tie).
    pub(crate) fn heaviest(&self) -> Option<(AddressKey, usize)> {
        self.counts.iter().map(|(&a, &n)| (a, n)).max_by_key(|&(a, n)| (n, std::cmp::Reverse(a)))
    }
}

/// The client public keys of the opens a member admitted in this cookie period and the last: an open
/// is good once, and a replayed one (its cookie still good) opens nothing.
#[derive(Debug, Default)]
pub(crate) struct UsedOpens {
    keys: HashMap<[u8; 32], u64>,
}

impl UsedOpens {
    /// Whether an open with `key` was admitted in period `period` or the one before; forgets older ones.
    pub(crate) fn seen(&mut self, key: &[u8; 32], period: u64) -> bool {
        self.keys.retain(|_, at| *at + 1 >= period);
        self.keys.contains_key(key)
    }

    /// Keys remembered.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Remembers `key`, admitted in `period`.
    pub(crate) fn insert(&mut self, key: [u8; 32], period: u64) {
        self.keys.insert(key, period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> AddressKey {
        AddressKey::of(text.parse().unwrap())
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(key("2001:db8::1"), key("2001:db8::ffff:2"));
        assert_ne!(key("2001:db8::1"), key("2001:db8:0:1::1"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
    }

    #[test]
    fn networks_count_by_their_ipv4_24_and_ipv6_48() {
        let prefix = |text: &str| AddressKey::prefix_of(text.parse().unwrap());
        assert_eq!(prefix("10.0.0.1"), prefix("10.0.0.200"));
        assert_ne!(prefix("10.0.0.1"), prefix("10.0.1.1"));
        assert_eq!(prefix("2001:db8:1::1"), prefix("2001:db8:1:ffff::2"));
        assert_ne!(prefix("2001:db8:1::1"), prefix("2001:db8:2::1"));
        assert_eq!(prefix("::ffff:10.0.0.1"), prefix("10.0.0.9"));
    }

    #[test]
    fn an_address_takes_a_burst_then_its_rate_and_others_are_untouched() {
        let mut rate = OpenRate::new(10);
        let (a, b) = (key("10.0.0.1"), key("10.0.0.2"));
        assert!((0..10).all(|_| rate.take(a, 0)));
        assert!(!rate.take(a, 0), "burst spent");
        assert!(rate.take(b, 0), "another address has its own");
        assert!(!rate.take(a, 99_000_000), "a tenth of a second is not quite one open");
        assert!(rate.take(a, 100_000_000));
        assert!(!rate.take(a, 100_000_000));
        // A long silence refills the burst, never more.
        assert!((0..10).all(|_| rate.take(a, 100_000_000_000)));
        assert!(!rate.take(a, 100_000_000_000));
    }

    #[test]
    fn the_table_of_addresses_is_bounded() {
        let mut rate = OpenRate::new(1);
        for i in 0..(OpenRate::CAPACITY as u32 + 100) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            rate.take(AddressKey::of(ip.into()), 0);
            assert!(rate.len() <= OpenRate::CAPACITY);
        }
    }

    #[test]
    fn an_open_is_remembered_for_its_period_and_the_next() {
        let mut used = UsedOpens::default();
        assert!(!used.seen(&[1; 32], 5));
        used.insert([1; 32], 5);
        assert!(used.seen(&[1; 32], 5) && used.seen(&[1; 32], 6));
        assert!(!used.seen(&[1; 32], 7), "its cookie is spent by then");
        assert_eq!(used.len(), 0);
    }

    #[test]
    fn sessions_per_address_count_up_and_down() {
        let mut sessions = SessionsPerAddress::default();
        let a = key("10.0.0.1");
        sessions.add(a);
        sessions.add(a);
        assert_eq!(sessions.of(a), 2);
        sessions.add(key("10.0.0.2"));
        assert_eq!(sessions.heaviest(), Some((a, 2)));
        sessions.remove(a);
        sessions.remove(a);
        sessions.remove(a);
        assert_eq!(sessions.of(a), 0);
    }
}
