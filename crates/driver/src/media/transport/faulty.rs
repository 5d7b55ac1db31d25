//! Fault injection: drop, duplicate and reorder datagrams, on send or on receive, for tests.
//!
//! `tc netem` is not available everywhere (it is not on our CI hosts), so loss, duplication and
//! reordering are injected in-process, by [`FaultyTransport`]: a [`Transport`] wrapped around another, as
//! Aeron's loss generators wrap its transport, so that the publication and the Receiver know nothing of
//! faults. A direction without faults passes each call straight through, for one predictable branch per
//! call; [`Faulty`] is a [`Network`] whose endpoints are so wrapped, with the faults it was made with.
//!
//! Decisions come from a seeded xorshift generator, so a failing run can be replayed with its seed.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::str::FromStr;

use socket2::SockAddr;

use crate::frame::MAX_UDP_PAYLOAD_LENGTH;
use crate::media::auth::TAG_LENGTH;
use crate::media::transport::{Binding, MmsgScratch, Network, Received, RecvBatch, SendMode, SendOutcome, Transport};

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

/// A seeded source of datagram fates, with the one datagram it may be holding back (and that datagram's
/// address: where it goes, or where it came from).
#[derive(Debug)]
pub struct FaultInjector {
    config: FaultConfig,
    state: u64,
    held: Vec<u8>,
    held_addr: Option<SocketAddr>,
    holding: bool,
    stats: FaultStats,
}

impl FaultInjector {
    /// An injector for `config`; `max_datagram` sizes the buffer a held-back datagram is copied into,
    /// so that injection does not allocate after start.
    pub fn new(config: FaultConfig, max_datagram: usize) -> Self {
        // xorshift has one forbidden state, zero; mix the seed so that small seeds differ widely.
        let state = config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Self {
            config,
            state,
            held: Vec::with_capacity(max_datagram),
            held_addr: None,
            holding: false,
            stats: FaultStats::default(),
        }
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
        self.apply_addressed(datagram, None, |bytes, _| deliver(bytes));
    }

    /// As [`apply`](Self::apply) for a datagram with an address (its destination or its source), which
    /// `deliver` gets with the bytes: a held-back datagram keeps its own.
    pub fn apply_addressed(
        &mut self,
        datagram: &[u8],
        addr: Option<SocketAddr>,
        mut deliver: impl FnMut(&[u8], Option<SocketAddr>),
    ) {
        match self.fate() {
            Fate::Drop => self.stats.dropped += 1,
            Fate::Duplicate => {
                self.stats.duplicated += 1;
                deliver(datagram, addr);
                deliver(datagram, addr);
            }
            Fate::Reorder if !self.holding => {
                self.stats.reordered += 1;
                self.held.clear();
                self.held.extend_from_slice(datagram);
                self.held_addr = addr;
                self.holding = true;
                return;
            }
            Fate::Reorder | Fate::Deliver => deliver(datagram, addr),
        }
        self.flush_addressed(deliver);
    }

    /// Delivers the held-back datagram, if any (call when a duty cycle found nothing else to do, so that
    /// a reordered datagram is late but never lost).
    pub fn flush(&mut self, mut deliver: impl FnMut(&[u8])) {
        self.flush_addressed(|bytes, _| deliver(bytes));
    }

    /// As [`flush`](Self::flush), with the held datagram's address.
    pub fn flush_addressed(&mut self, mut deliver: impl FnMut(&[u8], Option<SocketAddr>)) {
        if self.holding {
            self.holding = false;
            deliver(&self.held, self.held_addr);
        }
    }

    /// Whether a datagram is being held back.
    pub fn is_holding(&self) -> bool {
        self.holding
    }
}

/// A [`Transport`] with faults injected on what it sends, what it receives, or both.
///
/// Sends: each datagram (each destination's copy, for `mmsg`; each segment, for `gso`) draws its fate and
/// goes out with its own `send`; a datagram held back for reordering is sent after the next one, or by
/// [`flush`](Transport::flush). Receives: each intact datagram received draws its fate; a held one is
/// delivered after the next, or on the next receive that finds nothing. A call's outcome is that of its
/// last send (a dropped datagram counts as sent).
#[derive(Debug)]
pub struct FaultyTransport<T> {
    inner: T,
    send: Option<FaultInjector>,
    receive: Option<FaultInjector>,
    /// What `inner` received, before the faults; sized on first use from the caller's batch.
    scratch: Option<RecvBatch>,
}

impl<T: Transport> FaultyTransport<T> {
    /// Wraps `inner`, with `send` faults on what it sends and `receive` faults on what it receives
    /// (inactive configurations pass everything through).
    pub fn new(inner: T, send: FaultConfig, receive: FaultConfig) -> Self {
        let injector =
            |config: FaultConfig| config.is_active().then(|| FaultInjector::new(config, MAX_UDP_PAYLOAD_LENGTH));
        Self { inner, send: injector(send), receive: injector(receive), scratch: None }
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Faults injected so far on sends and on receives.
    pub fn stats(&self) -> (FaultStats, FaultStats) {
        let stats = |f: &Option<FaultInjector>| f.as_ref().map_or(FaultStats::default(), FaultInjector::stats);
        (stats(&self.send), stats(&self.receive))
    }

    /// Sends `datagram` through the send faults, which must be active.
    fn send_faulty(inner: &mut T, faults: &mut FaultInjector, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        let mut outcome = SendOutcome::Sent(1);
        faults.apply_addressed(datagram, dest.and_then(SockAddr::as_socket), |bytes, to| {
            outcome = inner.send(bytes, to.map(SockAddr::from).as_ref());
        });
        outcome
    }
}

impl<T: Transport> Transport for FaultyTransport<T> {
    #[inline]
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.inner.connect(peer)
    }

    fn path_max_payload(&self) -> Option<usize> {
        self.inner.path_max_payload()
    }

    #[inline]
    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        match self.send.as_mut() {
            None => self.inner.send(datagram, dest),
            Some(faults) => Self::send_faulty(&mut self.inner, faults, datagram, dest),
        }
    }

    #[inline]
    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        match self.send.as_mut() {
            None => self.inner.send_with_tag(datagram, tag, dest),
            // A held-back datagram is sent with other bytes' call: each send computes its own tag.
            Some(faults) => Self::send_faulty(&mut self.inner, faults, datagram, dest),
        }
    }

    #[inline]
    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        let Some(faults) = self.send.as_mut() else {
            return self.inner.send_mmsg(datagrams, dests, scratch);
        };
        // Each copy draws its own fate: one send per datagram per destination.
        let inner = &mut self.inner;
        super::send_each_copy(datagrams, dests, |datagram, dest| Self::send_faulty(inner, faults, datagram, dest))
    }

    #[inline]
    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        let Some(faults) = self.send.as_mut() else {
            return self.inner.send_gso(data, segment);
        };
        let mut segments = 0;
        for chunk in data.chunks(segment.max(1)) {
            match Self::send_faulty(&mut self.inner, faults, chunk, None) {
                SendOutcome::Sent(_) => segments += 1,
                other => return other,
            }
        }
        SendOutcome::Sent(segments)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let Self { inner, receive, scratch, .. } = self;
        let Some(faults) = receive.as_mut() else {
            return inner.recv_batch(batch);
        };
        // Each datagram received becomes at most two, and one held back may follow: receive at most
        // (capacity - 1) / 2, so that what the faults deliver fits the caller's batch.
        let want = (batch.capacity().saturating_sub(1) / 2).max(1);
        let fits = |s: &RecvBatch| s.capacity() == want && s.datagram_capacity() == batch.datagram_capacity();
        let scratch = match scratch {
            Some(s) if fits(s) => s,
            _ => scratch.insert(RecvBatch::new(want, batch.datagram_capacity())),
        };
        let received = inner.recv_batch(scratch)?;
        batch.clear();
        for i in 0..received {
            let datagram = scratch.datagram(i);
            if datagram.truncated || datagram.forged {
                batch.push(datagram); // dropped by the caller anyway: passed through as received
                continue;
            }
            faults.apply_addressed(datagram.bytes, datagram.source, |bytes, source| {
                batch.push(Received { bytes, source, truncated: false, forged: false });
            });
        }
        if received == 0 {
            faults.flush_addressed(|bytes, source| {
                batch.push(Received { bytes, source, truncated: false, forged: false });
            });
        }
        Ok(batch.len())
    }

    fn flush(&mut self) -> usize {
        let Self { inner, send, .. } = self;
        let mut sent = inner.flush();
        if let Some(faults) = send.as_mut() {
            faults.flush_addressed(|bytes, to| {
                sent += 1;
                let _ = inner.send(bytes, to.map(SockAddr::from).as_ref());
            });
        }
        sent
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        self.inner.readiness_fd()
    }
}

/// A [`Network`] whose endpoints are [`FaultyTransport`]s around another's, each with the `send` and
/// `receive` faults this network was made with: an interceptor chained over the real network, which
/// neither the publication nor the Receiver knows of.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faulty<N> {
    inner: N,
    send: FaultConfig,
    receive: FaultConfig,
}

impl<N: Network> Faulty<N> {
    /// Wraps every endpoint `inner` binds, with `send` faults on what it sends and `receive` faults on
    /// what it receives.
    pub fn new(inner: N, send: FaultConfig, receive: FaultConfig) -> Self {
        Self { inner, send, receive }
    }
}

impl<N: Network> Network for Faulty<N> {
    type Endpoint = FaultyTransport<N::Endpoint>;

    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(Self::Endpoint, Vec<String>)> {
        let (endpoint, warnings) = self.inner.bind(local, binding)?;
        Ok((FaultyTransport::new(endpoint, self.send, self.receive), warnings))
    }

    fn supports(&self, mode: SendMode) -> bool {
        self.inner.supports(mode)
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

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    /// Values of the datagrams waiting at `rx`, with their sources, read in batches of 8.
    fn drain(rx: &mut impl Transport) -> Vec<(u32, Option<SocketAddr>)> {
        let mut batch = RecvBatch::new(8, 64);
        let mut got = Vec::new();
        while rx.recv_batch(&mut batch).unwrap() > 0 {
            got.extend((0..batch.len()).map(|i| {
                let d = batch.datagram(i);
                (u32::from_le_bytes(d.bytes.try_into().unwrap()), d.source)
            }));
        }
        got
    }

    /// Every value of `0..n` appears as often as its fate says: once, never (dropped) or twice.
    fn check_fates(values: &[u32], n: u32, stats: FaultStats) {
        assert_eq!(values.len() as u64, n as u64 - stats.dropped + stats.duplicated, "{stats:?}");
        let mut seen = vec![0u32; n as usize];
        values.iter().for_each(|&v| seen[v as usize] += 1);
        assert_eq!(seen.iter().filter(|&&c| c == 0).count() as u64, stats.dropped);
        assert_eq!(seen.iter().filter(|&&c| c == 2).count() as u64, stats.duplicated);
        assert!(stats.dropped > 0 && stats.duplicated > 0 && stats.reordered > 0, "{stats:?}");
        assert!(values.windows(2).any(|w| w[0] > w[1]), "something arrives late");
    }

    #[test]
    fn a_faulty_transport_sends_each_destination_its_own_datagrams_with_faults() {
        use crate::media::transport::memory::MemoryNetwork;
        let net = MemoryNetwork::new();
        let mut rxs = [net.bind(loopback(), false).unwrap(), net.bind(loopback(), false).unwrap()];
        let config = FaultConfig { drop: 0.1, duplicate: 0.1, reorder: 0.1, seed: 9 };
        let mut tx = FaultyTransport::new(net.bind(loopback(), false).unwrap(), config, FaultConfig::default());
        let dests = rxs.each_ref().map(|rx| SockAddr::from(rx.local_addr()));
        let n = 4000u32;
        for i in 0..n {
            // Runs of four values to each destination: 0-3 to the first, 4-7 to the second, and so on.
            tx.send(&i.to_le_bytes(), Some(&dests[(i / 4 % 2) as usize]));
        }
        tx.flush();
        let got: Vec<Vec<u32>> = rxs.iter_mut().map(|rx| drain(rx).into_iter().map(|(v, _)| v).collect()).collect();
        assert!(
            got[0].iter().all(|v| v / 4 % 2 == 0) && got[1].iter().all(|v| v / 4 % 2 == 1),
            "held ones go where sent"
        );
        check_fates(&got.concat(), n, tx.stats().0);
        assert!(got.iter().any(|values| values.windows(2).any(|w| w[0] > w[1])), "a destination's datagram is late");
    }

    #[test]
    fn a_faulty_transport_receives_with_faults_and_keeps_each_source() {
        use crate::media::transport::memory::MemoryNetwork;
        let net = MemoryNetwork::new();
        let config = FaultConfig { drop: 0.1, duplicate: 0.1, reorder: 0.1, seed: 4 };
        let mut rx = FaultyTransport::new(net.bind(loopback(), false).unwrap(), FaultConfig::default(), config);
        let mut tx = net.bind(loopback(), false).unwrap();
        let to = SockAddr::from(rx.local_addr());
        let n = 5000u32;
        let mut got = Vec::new();
        for i in 0..n {
            tx.send(&i.to_le_bytes(), Some(&to));
            if i % 50 == 49 {
                got.extend(drain(&mut rx)); // the last receive finds nothing and releases a held datagram
            }
        }
        got.extend(drain(&mut rx));
        assert!(got.iter().all(|(_, source)| *source == Some(tx.local_addr())));
        let values: Vec<u32> = got.into_iter().map(|(v, _)| v).collect();
        check_fates(&values, n, rx.stats().1);
    }

    #[test]
    fn a_faulty_transport_without_faults_passes_every_call_through() {
        use crate::media::transport::memory::MemoryNetwork;
        let net = MemoryNetwork::new();
        let mut rx = net.bind(loopback(), false).unwrap();
        let off = FaultConfig::default();
        let mut tx = FaultyTransport::new(net.bind(loopback(), false).unwrap(), off, off);
        let to = [SockAddr::from(rx.local_addr())];
        let (outcome, calls) = tx.send_mmsg(&[&[1; 4], &[2; 4]], &to, &mut MmsgScratch::default());
        assert!(matches!(outcome, SendOutcome::Sent(2)) && calls == 1, "one call, as the wrapped transport makes");
        tx.connect(rx.local_addr()).unwrap();
        assert!(matches!(tx.send_gso(&[3; 12], 4), SendOutcome::Sent(3)));
        assert!(matches!(tx.send(&[4; 4], None), SendOutcome::Sent(1)));
        assert_eq!(tx.flush(), 0);
        let got: Vec<u32> = drain(&mut rx).into_iter().map(|(v, _)| v).collect();
        assert_eq!(got, [1, 2, 3, 3, 3, 4].map(|b| u32::from_le_bytes([b; 4])));
        assert_eq!(tx.stats(), (FaultStats::default(), FaultStats::default()));
    }

    #[test]
    fn same_seed_same_fates() {
        let config = FaultConfig { drop: 0.1, duplicate: 0.1, reorder: 0.1, seed: 3 };
        assert_eq!(run(config, 5000).0, run(config, 5000).0);
        let other = FaultConfig { seed: 4, ..config };
        assert_ne!(run(config, 5000).0, run(other, 5000).0);
    }
}
