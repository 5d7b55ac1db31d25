//! An in-process network: endpoints with socket addresses that hand datagrams to each other through
//! queues, so that the send and receive paths can be tested without sockets, deterministically.
//!
//! Delivery follows UDP on Linux: a datagram goes to the endpoint bound to its destination, preferring one
//! connected to its source over an unconnected one (endpoints bound with `shared` may share an address);
//! with no endpoint there, or a full queue, it is lost without a word to the sender. A filter set with
//! [`MemoryNetwork::set_filter`] can drop chosen datagrams. There is no authentication: a channel's key is
//! ignored. The endpoints allocate for each datagram; they are for tests, not for the hot path.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use socket2::SockAddr;

use super::{
    send_each_copy, Binding, MmsgScratch, Network, Received, RecvBatch, SendMode, SendOutcome, Transport, MAX_BATCH,
};
use crate::frame::MAX_UDP_PAYLOAD_LENGTH;
use crate::media::auth::TAG_LENGTH;

/// Most datagrams waiting for one endpoint before more are lost (as a full socket buffer loses them).
pub const DEFAULT_QUEUE_LIMIT: usize = 1 << 16;

/// Decides whether a datagram (source, destination, bytes) is delivered: false drops it.
type Filter = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + Send>;

/// Counts of what the network did with the datagrams sent through it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Datagrams queued for an endpoint.
    pub delivered: u64,
    /// Datagrams the filter dropped.
    pub filtered: u64,
    /// Datagrams sent to an address no endpoint is bound to.
    pub unreachable: u64,
    /// Datagrams lost to a full queue.
    pub overflowed: u64,
}

/// A set of in-process endpoints that reach each other by address. Clones share the same network.
#[derive(Clone, Default)]
pub struct MemoryNetwork {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Endpoints by id; `None` once dropped.
    slots: Vec<Option<Slot>>,
    next_port: u16,
    queue_limit: Option<usize>,
    filter: Option<Filter>,
    stats: MemoryStats,
}

struct Slot {
    local: SocketAddr,
    peer: Option<SocketAddr>,
    shared: bool,
    queue: VecDeque<(Vec<u8>, SocketAddr)>,
}

impl fmt::Debug for MemoryNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("MemoryNetwork").field("endpoints", &state.slots.iter().flatten().count()).finish()
    }
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves consistent queues: go on with them.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Binds an endpoint to `local`: port 0 picks a free one, an unspecified address becomes loopback.
    /// `shared` endpoints may share an address with other shared ones.
    pub fn bind(&self, local: SocketAddr, shared: bool) -> io::Result<MemoryEndpoint> {
        let mut state = self.lock();
        let ip = match local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let port = match local.port() {
            0 => state.free_port(ip),
            port => port,
        };
        let local = SocketAddr::new(ip, port);
        let taken = state.slots.iter().flatten().filter(|s| s.local == local).any(|s| !(shared && s.shared));
        if taken {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{local} is bound already")));
        }
        let slot = Slot { local, peer: None, shared, queue: VecDeque::new() };
        let id = match state.slots.iter().position(Option::is_none) {
            Some(free) => {
                state.slots[free] = Some(slot);
                free
            }
            None => {
                state.slots.push(Some(slot));
                state.slots.len() - 1
            }
        };
        Ok(MemoryEndpoint { network: self.clone(), id, local, peer: None })
    }

    /// Sets the filter every datagram passes before delivery: it gets the source, the destination and the
    /// bytes, and returns false to drop the datagram.
    pub fn set_filter(&self, filter: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + Send + 'static) {
        self.lock().filter = Some(Box::new(filter));
    }

    /// Removes the filter: every datagram is delivered again.
    pub fn clear_filter(&self) {
        self.lock().filter = None;
    }

    /// Most datagrams that wait for one endpoint (default [`DEFAULT_QUEUE_LIMIT`]).
    pub fn set_queue_limit(&self, limit: usize) {
        self.lock().queue_limit = Some(limit);
    }

    /// What the network did so far.
    pub fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// Hands `bytes` from `from` to the endpoint bound at `to`, if any.
    fn deliver(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let mut guard = self.lock();
        let state = &mut *guard;
        if let Some(filter) = state.filter.as_mut() {
            if !filter(from, to, bytes) {
                state.stats.filtered += 1;
                return;
            }
        }
        let limit = state.queue_limit.unwrap_or(DEFAULT_QUEUE_LIMIT);
        let slots = &mut state.slots;
        let bound_with = |peer: Option<SocketAddr>| {
            slots.iter().position(|s| s.as_ref().is_some_and(|s| s.local == to && s.peer == peer))
        };
        let index = bound_with(Some(from)).or_else(|| bound_with(None));
        match index.and_then(|i| slots[i].as_mut()) {
            None => state.stats.unreachable += 1,
            Some(slot) if slot.queue.len() >= limit => state.stats.overflowed += 1,
            Some(slot) => {
                slot.queue.push_back((bytes.to_vec(), from));
                state.stats.delivered += 1;
            }
        }
    }
}

impl State {
    fn free_port(&mut self, ip: IpAddr) -> u16 {
        loop {
            self.next_port = self.next_port.wrapping_add(1).max(40_000);
            let candidate = SocketAddr::new(ip, self.next_port);
            if !self.slots.iter().flatten().any(|s| s.local == candidate) {
                return self.next_port;
            }
        }
    }
}

impl Network for MemoryNetwork {
    type Endpoint = MemoryEndpoint;

    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(MemoryEndpoint, Vec<String>)> {
        MemoryNetwork::bind(self, local, binding.shared).map(|endpoint| (endpoint, Vec::new()))
    }

    fn supports(&self, _mode: SendMode) -> bool {
        true
    }
}

/// One endpoint of a [`MemoryNetwork`]: unbound when dropped.
pub struct MemoryEndpoint {
    network: MemoryNetwork,
    id: usize,
    local: SocketAddr,
    peer: Option<SocketAddr>,
}

impl fmt::Debug for MemoryEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryEndpoint").field("local", &self.local).field("peer", &self.peer).finish()
    }
}

impl Drop for MemoryEndpoint {
    fn drop(&mut self) {
        self.network.lock().slots[self.id] = None;
    }
}

impl MemoryEndpoint {
    /// Datagrams waiting to be received.
    pub fn pending(&self) -> usize {
        self.network.lock().slots[self.id].as_ref().map_or(0, |s| s.queue.len())
    }

    /// Takes every datagram waiting, without a [`RecvBatch`]: for a test to look at what was sent here.
    pub fn drain(&mut self) -> Vec<Vec<u8>> {
        let mut state = self.network.lock();
        state.slots[self.id].as_mut().map_or_else(Vec::new, |s| s.queue.drain(..).map(|(bytes, _)| bytes).collect())
    }

    fn send_to(&self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        if datagram.len() > MAX_UDP_PAYLOAD_LENGTH {
            return SendOutcome::TooLarge { datagram: datagram.len(), path_mtu: None };
        }
        let Some(to) = dest.and_then(SockAddr::as_socket).or(self.peer) else {
            return SendOutcome::Failed(io::Error::new(io::ErrorKind::NotConnected, "no destination"));
        };
        self.network.deliver(self.local, to, datagram);
        SendOutcome::Sent(1)
    }
}

impl Transport for MemoryEndpoint {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.peer = Some(peer);
        if let Some(slot) = self.network.lock().slots[self.id].as_mut() {
            slot.peer = Some(peer);
        }
        Ok(())
    }

    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        self.send_to(datagram, dest)
    }

    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        _tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        self.send_to(datagram, dest)
    }

    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        _scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        // As `sendmmsg` would count them: a call per batch of copies.
        match send_each_copy(datagrams, dests, |datagram, dest| self.send_to(datagram, dest)) {
            (SendOutcome::Sent(sent), _) => (SendOutcome::Sent(sent), sent.div_ceil(MAX_BATCH).max(1)),
            failed => failed,
        }
    }

    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        if data.len() > MAX_UDP_PAYLOAD_LENGTH {
            return SendOutcome::TooLarge { datagram: segment, path_mtu: None };
        }
        let mut segments = 0;
        for chunk in data.chunks(segment.max(1)) {
            match self.send_to(chunk, None) {
                SendOutcome::Sent(_) => segments += 1,
                other => return other,
            }
        }
        SendOutcome::Sent(segments)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        let mut state = self.network.lock();
        let Some(slot) = state.slots[self.id].as_mut() else {
            return Ok(0);
        };
        while batch.len() < batch.capacity() {
            let Some((bytes, source)) = slot.queue.pop_front() else {
                break;
            };
            batch.push(Received { bytes: &bytes, source: Some(source), truncated: false, forged: false });
        }
        Ok(batch.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn receive(endpoint: &mut MemoryEndpoint, batch: &mut RecvBatch) -> Vec<(Vec<u8>, Option<SocketAddr>)> {
        let n = endpoint.recv_batch(batch).unwrap();
        (0..n).map(|i| (batch.datagram(i).bytes.to_vec(), batch.datagram(i).source)).collect()
    }

    #[test]
    fn datagrams_reach_the_bound_address_with_their_source() {
        let net = MemoryNetwork::new();
        let mut a = net.bind(addr("127.0.0.1:0"), false).unwrap();
        let mut b = net.bind(addr("0.0.0.0:0"), false).unwrap();
        assert_ne!(a.local_addr(), b.local_addr());
        assert_eq!(b.local_addr().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(net.bind(a.local_addr(), false).is_err(), "one unshared endpoint per address");
        assert!(matches!(a.send(b"one", Some(&SockAddr::from(b.local_addr()))), SendOutcome::Sent(1)));
        a.connect(b.local_addr()).unwrap();
        assert!(matches!(a.send(b"two", None), SendOutcome::Sent(1)));
        let mut batch = RecvBatch::new(8, 64);
        let got = receive(&mut b, &mut batch);
        assert_eq!(got, vec![(b"one".to_vec(), Some(a.local_addr())), (b"two".to_vec(), Some(a.local_addr()))]);
        assert!(receive(&mut b, &mut batch).is_empty());
        assert_eq!(net.stats().delivered, 2);
    }

    #[test]
    fn a_shared_address_delivers_to_the_endpoint_connected_to_the_source() {
        let net = MemoryNetwork::new();
        let shared = addr("127.0.0.1:7000");
        let (mut x, mut y) =
            (net.bind(addr("127.0.0.1:0"), false).unwrap(), net.bind(addr("127.0.0.1:0"), false).unwrap());
        let mut to_x = net.bind(shared, true).unwrap();
        let mut to_y = net.bind(shared, true).unwrap();
        let mut open = net.bind(shared, true).unwrap();
        to_x.connect(x.local_addr()).unwrap();
        to_y.connect(y.local_addr()).unwrap();
        x.send(b"from x", Some(&SockAddr::from(shared)));
        y.send(b"from y", Some(&SockAddr::from(shared)));
        let stranger = net.bind(addr("127.0.0.1:0"), false).unwrap();
        stranger.send_to(b"from a stranger", Some(&SockAddr::from(shared)));
        let mut batch = RecvBatch::new(8, 64);
        assert_eq!(receive(&mut to_x, &mut batch)[0].0, b"from x");
        assert_eq!(receive(&mut to_y, &mut batch)[0].0, b"from y");
        assert_eq!(receive(&mut open, &mut batch)[0].0, b"from a stranger");
        // Mmsg and GSO sends arrive as their datagrams.
        let mut scratch = MmsgScratch::default();
        let dests = [SockAddr::from(x.local_addr()), SockAddr::from(y.local_addr())];
        let (outcome, _) = open.send_mmsg(&[b"a", b"b"], &dests, &mut scratch);
        assert!(matches!(outcome, SendOutcome::Sent(4)));
        assert!(matches!(to_x.send_gso(b"0123456789", 4), SendOutcome::Sent(3)));
        let got: Vec<Vec<u8>> = receive(&mut x, &mut batch).into_iter().map(|(d, _)| d).collect();
        assert_eq!(got, [&b"a"[..], b"b", b"0123", b"4567", b"89"]);
        assert_eq!(receive(&mut y, &mut batch).len(), 2);
    }

    #[test]
    fn filters_drop_unbound_addresses_lose_and_long_datagrams_are_cut() {
        let net = MemoryNetwork::new();
        let a = net.bind(addr("127.0.0.1:0"), false).unwrap();
        let mut b = net.bind(addr("127.0.0.1:0"), false).unwrap();
        let to_b = SockAddr::from(b.local_addr());
        net.set_filter(|_, _, bytes| bytes != b"drop me");
        a.send_to(b"drop me", Some(&to_b));
        a.send_to(&[7; 100], Some(&to_b));
        a.send_to(b"nobody", Some(&SockAddr::from(addr("127.0.0.1:9"))));
        let mut batch = RecvBatch::new(8, 64);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 1);
        assert!(batch.datagram(0).truncated);
        assert_eq!(batch.datagram(0).bytes.len(), 64);
        let stats = net.stats();
        assert_eq!((stats.delivered, stats.filtered, stats.unreachable), (1, 1, 1));
        drop(b);
        a.send_to(b"gone", Some(&to_b));
        assert_eq!(net.stats().unreachable, 2, "a dropped endpoint is unbound");
    }
}
