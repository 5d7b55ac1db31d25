//! The simulated network the node simulator's nodes bind every endpoint on.
//!
//! It behaves as UDP on Linux does where a node can tell (a datagram goes to the endpoint bound at its
//! destination, preferring one connected to its source; an address nobody holds loses it; a datagram over
//! the path's limit is refused with `EMSGSIZE`), and does what a real network may, drawn from the
//! simulation's seed: it loses, duplicates and delays datagrams (a delay drawn per datagram reorders
//! them), and it cuts links between hosts, one way or both, until they heal. Time is the simulation's: a
//! datagram sent at `t` with delay `d` is received at the first [`SimNetwork::pump`] at or after `t + d`.
//!
//! Everything is in one thread's order: the same seed and the same calls give the same deliveries.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use quorumcast::media::auth::TAG_LENGTH;
use quorumcast::media::transport::{
    send_each_copy, Binding, MmsgScratch, Network, Received, RecvBatch, SendMode, SendOutcome, Transport,
};
use socket2::SockAddr;

use super::prng::Prng;

/// What the network does to datagrams, drawn per datagram.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFaults {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Least one-way delay, ns.
    pub min_delay_ns: u64,
    /// Most one-way delay, ns (delays drawn between reorder datagrams).
    pub max_delay_ns: u64,
}

impl LinkFaults {
    /// A quiet network: nothing lost, 20-60 us one way.
    pub const QUIET: LinkFaults = LinkFaults { loss: 0.0, duplicate: 0.0, min_delay_ns: 20_000, max_delay_ns: 60_000 };
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams handed to an endpoint.
    pub delivered: u64,
    /// Lost by the drawn loss.
    pub lost: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Lost on a cut link.
    pub cut: u64,
    /// Sent to an address no endpoint holds.
    pub unreachable: u64,
    /// Refused as longer than the path carries.
    pub too_large: u64,
}

/// A network of simulated endpoints. Clones share it.
#[derive(Clone)]
pub struct SimNetwork {
    state: Arc<Mutex<State>>,
}

struct State {
    now_ns: u64,
    prng: Prng,
    faults: LinkFaults,
    /// Links cut, `(from host, to host)`.
    cut: BTreeSet<(IpAddr, IpAddr)>,
    /// Longest datagram the path carries.
    max_payload: usize,
    endpoints: Vec<Option<Slot>>,
    /// Datagrams on the wire, by (delivery time, sequence).
    in_flight: BTreeMap<(u64, u64), Flight>,
    sequence: u64,
    stats: NetworkStats,
    /// The last datagrams handed over (for an outsider to replay).
    recent: VecDeque<Vec<u8>>,
    /// Hosts whose sends leave no earlier than a time (a process busy on one thread until then).
    busy_until: BTreeMap<IpAddr, u64>,
}

struct Flight {
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

struct Slot {
    local: SocketAddr,
    peer: Option<SocketAddr>,
    shared: bool,
    inbox: VecDeque<(Vec<u8>, SocketAddr)>,
}

/// Most datagrams waiting for one endpoint (as a socket buffer holds): more are lost.
const INBOX_LIMIT: usize = 4096;

impl SimNetwork {
    /// A quiet network whose draws come from `seed`.
    pub fn new(seed: u64) -> Self {
        let state = State {
            now_ns: 0,
            prng: Prng::new(seed),
            faults: LinkFaults::QUIET,
            cut: BTreeSet::new(),
            max_payload: quorumcast::frame::MAX_UDP_PAYLOAD_LENGTH,
            endpoints: Vec::new(),
            in_flight: BTreeMap::new(),
            sequence: 0,
            stats: NetworkStats::default(),
            recent: VecDeque::new(),
            busy_until: BTreeMap::new(),
        };
        Self { state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets what happens to the datagrams sent from now on.
    pub fn set_faults(&self, faults: LinkFaults) {
        self.lock().faults = faults;
    }

    /// Cuts the link from host `from` to host `to` (one way).
    pub fn cut(&self, from: IpAddr, to: IpAddr) {
        self.lock().cut.insert((from, to));
    }

    /// Heals every cut link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// Whether any link is cut.
    pub fn has_cuts(&self) -> bool {
        !self.lock().cut.is_empty()
    }

    /// Clamps the longest datagram the path carries (a smaller path MTU).
    pub fn clamp_payload(&self, max_payload: usize) {
        self.lock().max_payload = max_payload;
    }

    /// Moves the network's time to `now_ns` and hands every datagram due by then to its endpoint.
    pub fn pump(&self, now_ns: u64) {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.now_ns = state.now_ns.max(now_ns);
        while let Some(entry) = state.in_flight.first_entry() {
            if entry.key().0 > state.now_ns {
                break;
            }
            let flight = entry.remove();
            state.hand_over(flight);
        }
    }

    /// Sends `bytes` from `from` to `to` as a host outside the cluster would (forged traffic).
    pub fn inject(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        self.lock().send(from, to, bytes);
    }

    /// Holds what `host` sends from now until `for_ns` later: it leaves then (the sending thread was busy).
    pub fn hold_host(&self, host: IpAddr, for_ns: u64) {
        let mut state = self.lock();
        let until = state.now_ns + for_ns;
        let held = state.busy_until.entry(host).or_insert(0);
        *held = (*held).max(until);
    }

    /// The `k`-th newest datagram handed over, of the last 64.
    pub fn recent(&self, k: usize) -> Option<Vec<u8>> {
        let state = self.lock();
        state.recent.iter().rev().nth(k).cloned()
    }

    /// What the network did so far.
    pub fn stats(&self) -> NetworkStats {
        self.lock().stats
    }

    /// Datagrams on the wire or waiting in an endpoint (bounded: what forged traffic may make it hold).
    pub fn held(&self) -> usize {
        let state = self.lock();
        state.in_flight.len() + state.endpoints.iter().flatten().map(|s| s.inbox.len()).sum::<usize>()
    }

    fn bind_endpoint(&self, local: SocketAddr, shared: bool) -> io::Result<SimEndpoint> {
        let mut state = self.lock();
        let taken = state.endpoints.iter().flatten().filter(|s| s.local == local).any(|s| !(shared && s.shared));
        if taken || local.port() == 0 {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{local} is bound already (or port 0)")));
        }
        let slot = Slot { local, peer: None, shared, inbox: VecDeque::new() };
        let id = match state.endpoints.iter().position(Option::is_none) {
            Some(free) => {
                state.endpoints[free] = Some(slot);
                free
            }
            None => {
                state.endpoints.push(Some(slot));
                state.endpoints.len() - 1
            }
        };
        Ok(SimEndpoint { network: self.clone(), id, local, peer: None })
    }
}

impl State {
    fn send(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> SendOutcome {
        if std::env::var_os("QC_NODE_SIM_NETLOG").is_some() {
            let kind = if bytes.len() > 6 { u16::from_le_bytes([bytes[6], bytes[7]]) } else { 0 };
            eprintln!("net {} {from} {to} {} type {kind:#x}", self.now_ns, bytes.len());
        }
        if bytes.len() > self.max_payload {
            self.stats.too_large += 1;
            return SendOutcome::TooLarge { datagram: bytes.len(), path_mtu: Some(self.max_payload + 28) };
        }
        self.stats.sent += 1;
        if self.cut.contains(&(from.ip(), to.ip())) {
            self.stats.cut += 1;
            return SendOutcome::Sent(1);
        }
        let faults = self.faults;
        if self.prng.chance(faults.loss) {
            self.stats.lost += 1;
            return SendOutcome::Sent(1);
        }
        let copies = if self.prng.chance(faults.duplicate) { 2 } else { 1 };
        self.stats.duplicated += copies - 1;
        let leaves = self.busy_until.get(&from.ip()).map_or(self.now_ns, |&until| until.max(self.now_ns));
        for _ in 0..copies {
            let delay = self.prng.between(faults.min_delay_ns, faults.max_delay_ns);
            self.sequence += 1;
            let flight = Flight { from, to, bytes: bytes.to_vec() };
            self.in_flight.insert((leaves + delay, self.sequence), flight);
        }
        SendOutcome::Sent(1)
    }

    fn hand_over(&mut self, flight: Flight) {
        let Flight { from, to, bytes } = flight;
        let slots = &mut self.endpoints;
        let bound_with = |peer: Option<SocketAddr>| {
            slots.iter().position(|s| s.as_ref().is_some_and(|s| s.local == to && s.peer == peer))
        };
        let index = bound_with(Some(from)).or_else(|| bound_with(None));
        match index.and_then(|i| slots[i].as_mut()) {
            None => self.stats.unreachable += 1,
            Some(slot) if slot.inbox.len() >= INBOX_LIMIT => self.stats.lost += 1,
            Some(slot) => {
                if self.recent.len() == 64 {
                    self.recent.pop_front();
                }
                self.recent.push_back(bytes.clone());
                slot.inbox.push_back((bytes, from));
                self.stats.delivered += 1;
            }
        }
    }
}

impl Network for SimNetwork {
    type Endpoint = SimEndpoint;

    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(SimEndpoint, Vec<String>)> {
        self.bind_endpoint(local, binding.shared).map(|endpoint| (endpoint, Vec::new()))
    }

    fn supports(&self, _mode: SendMode) -> bool {
        true
    }
}

/// One endpoint of a [`SimNetwork`]: unbound when dropped.
pub struct SimEndpoint {
    network: SimNetwork,
    id: usize,
    local: SocketAddr,
    peer: Option<SocketAddr>,
}

impl Drop for SimEndpoint {
    fn drop(&mut self) {
        self.network.lock().endpoints[self.id] = None;
    }
}

impl SimEndpoint {
    fn send_to(&self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        let Some(to) = dest.and_then(SockAddr::as_socket).or(self.peer) else {
            return SendOutcome::Failed(io::Error::new(io::ErrorKind::NotConnected, "no destination"));
        };
        self.network.lock().send(self.local, to, datagram)
    }
}

impl Transport for SimEndpoint {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.peer = Some(peer);
        if let Some(slot) = self.network.lock().endpoints[self.id].as_mut() {
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
        // Counted as one call, as `sendmmsg` of one batch is.
        let (outcome, _) = send_each_copy(datagrams, dests, |datagram, dest| self.send_to(datagram, dest));
        (outcome, 1)
    }

    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        let mut segments = 0;
        for chunk in data.chunks(segment.max(1)) {
            match self.send_to(chunk, None) {
                SendOutcome::Sent(_) => segments += 1,
                other if segments == 0 => return other,
                _ => break,
            }
        }
        SendOutcome::Sent(segments)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        let mut state = self.network.lock();
        let Some(slot) = state.endpoints[self.id].as_mut() else {
            return Ok(0);
        };
        while batch.len() < batch.capacity() {
            let Some((bytes, source)) = slot.inbox.pop_front() else {
                break;
            };
            batch.push(Received { bytes: &bytes, source: Some(source), truncated: false, forged: false });
        }
        Ok(batch.len())
    }
}
