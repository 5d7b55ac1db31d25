//! The simulated network the node simulator's nodes bind every endpoint on.
//!
//! It behaves as UDP on Linux does where a node can tell (a datagram goes to the endpoint bound at its
//! destination, preferring one connected to its source; an address nobody holds loses it; a datagram over
//! the path's limit is refused with `EMSGSIZE`), and does what a real network may, drawn from the
//! simulation's seed: it loses, duplicates and delays datagrams (a delay drawn per datagram reorders
//! them), and it cuts links between hosts, one way or both, until they heal. Time is the simulation's: a
//! datagram sent at `t` with delay `d` is received at the first [`SimNetwork::pump`] at or after `t + d`.
//!
//! Byte streams (the catch-up connection) are TCP as a node sees it: a connection to an address where
//! nobody listens is refused, bytes arrive whole and in order after the link's delay, a cut link holds
//! them (TCP retransmits) until it heals, a writer may have at most [`STREAM_WINDOW`] bytes unread by the
//! other end, and a closed end reads as the end of the stream once what it sent is read.
//!
//! Everything is in one thread's order: the same seed and the same calls give the same deliveries.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use quorumcast_driver::media::auth::{AuthKey, TAG_LENGTH};
use quorumcast_driver::media::transport::stream::{Stream, StreamListener, StreamOptions};
use quorumcast_driver::media::transport::{
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
    /// Stream listeners, by slot.
    listeners: Vec<Option<ListenerSlot>>,
    /// Stream connections, by slot.
    connections: Vec<Option<Connection>>,
    /// The next port a stream is opened from.
    next_port: u16,
}

/// Most bytes a stream's writer may have sent and the reader not yet read (as TCP's windows hold).
pub const STREAM_WINDOW: usize = 256 << 10;

struct ListenerSlot {
    local: SocketAddr,
    /// Connections that arrived and are not yet accepted.
    backlog: VecDeque<usize>,
}

/// A stream between a client (end 0) and a server (end 1).
struct Connection {
    ends: [SocketAddr; 2],
    /// The connection request is on its way, due at this time.
    opening_at: Option<u64>,
    /// Nobody listened where it arrived: the client's reads and writes fail.
    refused: bool,
    /// Bytes each end sent, `[to end 0, to end 1]`: on the wire (due at a time) and arrived.
    wire: [VecDeque<(u64, Vec<u8>)>; 2],
    arrived: [VecDeque<u8>; 2],
    /// An end was closed (dropped).
    closed: [bool; 2],
}

impl Connection {
    /// Bytes sent toward end `to` and not yet read.
    fn unread(&self, to: usize) -> usize {
        self.wire[to].iter().map(|(_, b)| b.len()).sum::<usize>() + self.arrived[to].len()
    }
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
            max_payload: quorumcast_driver::frame::MAX_UDP_PAYLOAD_LENGTH,
            endpoints: Vec::new(),
            in_flight: BTreeMap::new(),
            sequence: 0,
            stats: NetworkStats::default(),
            recent: VecDeque::new(),
            busy_until: BTreeMap::new(),
            listeners: Vec::new(),
            connections: Vec::new(),
            next_port: 50_000,
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
        state.pump_streams();
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

    /// Stream connections open (bounded: what held or idle connections may make a member keep).
    pub fn streams(&self) -> usize {
        self.lock().connections.iter().flatten().filter(|c| !(c.closed[0] && c.closed[1])).count()
    }

    /// Opens a stream from `from` to `to` as a host outside the cluster would (an unauthenticated or idle
    /// peer): the caller holds it, writes what it likes, or never does.
    pub fn connect_from(&self, from: SocketAddr, to: SocketAddr) -> SimStream {
        let mut state = self.lock();
        let id = state.open_connection(from, to);
        SimStream { network: self.clone(), id, end: 0, peer: to }
    }

    fn bind_endpoint(&self, local: SocketAddr, shared: bool, auth: Option<AuthKey>) -> io::Result<SimEndpoint> {
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
        Ok(SimEndpoint { network: self.clone(), id, local, peer: None, auth })
    }
}

impl State {
    /// A connection from `from` to `to`, its request on the wire; its slot.
    fn open_connection(&mut self, from: SocketAddr, to: SocketAddr) -> usize {
        let delay = self.prng.between(self.faults.min_delay_ns, self.faults.max_delay_ns);
        let connection = Connection {
            ends: [from, to],
            opening_at: Some(self.now_ns + delay),
            refused: false,
            wire: [VecDeque::new(), VecDeque::new()],
            arrived: [VecDeque::new(), VecDeque::new()],
            closed: [false, false],
        };
        match self.connections.iter().position(Option::is_none) {
            Some(free) => {
                self.connections[free] = Some(connection);
                free
            }
            None => {
                self.connections.push(Some(connection));
                self.connections.len() - 1
            }
        }
    }

    /// Moves every stream on to now: requests due arrive at their listener (or are refused), bytes due
    /// arrive at their reader, in order, over links that are not cut; connections closed at both ends go.
    fn pump_streams(&mut self) {
        let now = self.now_ns;
        for i in 0..self.connections.len() {
            let Some(c) = self.connections[i].as_mut() else { continue };
            if let Some(at) = c.opening_at {
                let cut = self.cut.contains(&(c.ends[0].ip(), c.ends[1].ip()));
                if at <= now && !cut {
                    c.opening_at = None;
                    let to = c.ends[1];
                    match self.listeners.iter_mut().flatten().find(|l| l.local == to) {
                        Some(listener) if !c.closed[0] => listener.backlog.push_back(i),
                        _ => c.refused = true,
                    }
                }
            }
            for to in 0..2 {
                let from = 1 - to;
                let cut = self.cut.contains(&(c.ends[from].ip(), c.ends[to].ip()));
                while !cut && c.wire[to].front().is_some_and(|(due, _)| *due <= now) {
                    let (_, bytes) = c.wire[to].pop_front().expect("a front");
                    c.arrived[to].extend(bytes);
                }
            }
            if c.closed[0] && c.closed[1] {
                self.connections[i] = None;
            }
        }
    }

    fn send(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> SendOutcome {
        if std::env::var_os("QC_NODE_SIM_NETLOG").is_some() {
            let kind = if bytes.len() > 6 { u16::from_le_bytes([bytes[6], bytes[7]]) } else { 0 };
            let at = |o: usize| bytes.get(o..o + 8).map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap()));
            eprintln!("net {} {from} {to} {} type {kind:#x} [16]={} [24]={}", self.now_ns, bytes.len(), at(16), at(24));
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
        self.bind_endpoint(local, binding.shared, binding.auth).map(|endpoint| (endpoint, Vec::new()))
    }

    fn supports(&self, _mode: SendMode) -> bool {
        true
    }

    fn listen(&mut self, local: SocketAddr) -> io::Result<Box<dyn StreamListener>> {
        let mut state = self.lock();
        if state.listeners.iter().flatten().any(|l| l.local == local) {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{local} is listened at already")));
        }
        let slot = ListenerSlot { local, backlog: VecDeque::new() };
        let id = match state.listeners.iter().position(Option::is_none) {
            Some(free) => {
                state.listeners[free] = Some(slot);
                free
            }
            None => {
                state.listeners.push(Some(slot));
                state.listeners.len() - 1
            }
        };
        Ok(Box::new(SimListener { network: self.clone(), id, local }))
    }

    fn connect_stream(&mut self, peer: SocketAddr, options: &StreamOptions) -> io::Result<Box<dyn Stream>> {
        let mut state = self.lock();
        state.next_port = state.next_port.checked_add(1).unwrap_or(50_000);
        let from = SocketAddr::new(options.local, state.next_port);
        let id = state.open_connection(from, peer);
        Ok(Box::new(SimStream { network: self.clone(), id, end: 0, peer }))
    }
}

/// A stream listener of a [`SimNetwork`]: closed when dropped (connections not yet accepted are refused).
pub struct SimListener {
    network: SimNetwork,
    id: usize,
    local: SocketAddr,
}

impl Drop for SimListener {
    fn drop(&mut self) {
        let mut state = self.network.lock();
        if let Some(listener) = state.listeners[self.id].take() {
            for waiting in listener.backlog {
                if let Some(c) = state.connections[waiting].as_mut() {
                    c.refused = true;
                    c.closed[1] = true;
                }
            }
        }
    }
}

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimListener").field("local", &self.local).finish()
    }
}

impl StreamListener for SimListener {
    fn accept(&mut self) -> io::Result<Option<(Box<dyn Stream>, SocketAddr)>> {
        let mut state = self.network.lock();
        let Some(id) = state.listeners[self.id].as_mut().and_then(|l| l.backlog.pop_front()) else {
            return Ok(None);
        };
        let peer = state.connections[id].as_ref().map(|c| c.ends[0]).expect("a waiting connection");
        Ok(Some((Box::new(SimStream { network: self.network.clone(), id, end: 1, peer }), peer)))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// One end of a [`SimNetwork`] stream: closed when dropped.
pub struct SimStream {
    network: SimNetwork,
    id: usize,
    /// 0: the end that connected; 1: the end a listener accepted.
    end: usize,
    peer: SocketAddr,
}

impl std::fmt::Debug for SimStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimStream").field("end", &self.end).field("peer", &self.peer).finish()
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        if let Some(c) = self.network.lock().connections[self.id].as_mut() {
            c.closed[self.end] = true;
        }
    }
}

impl io::Read for SimStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut state = self.network.lock();
        let Some(c) = state.connections[self.id].as_mut() else {
            return Ok(0);
        };
        if c.refused {
            return Err(io::Error::new(io::ErrorKind::ConnectionRefused, format!("{} refused", self.peer)));
        }
        let arrived = &mut c.arrived[self.end];
        if arrived.is_empty() {
            let other_gone = c.closed[1 - self.end] && c.wire[self.end].is_empty();
            return if other_gone { Ok(0) } else { Err(io::ErrorKind::WouldBlock.into()) };
        }
        let n = buf.len().min(arrived.len());
        for (slot, byte) in buf.iter_mut().zip(arrived.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

impl io::Write for SimStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut guard = self.network.lock();
        let state = &mut *guard;
        let to = 1 - self.end;
        let Some(c) = state.connections[self.id].as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        if c.refused {
            return Err(io::Error::new(io::ErrorKind::ConnectionRefused, format!("{} refused", self.peer)));
        }
        if c.closed[to] {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let room = STREAM_WINDOW.saturating_sub(c.unread(to));
        if room == 0 || buf.is_empty() {
            return if buf.is_empty() { Ok(0) } else { Err(io::ErrorKind::WouldBlock.into()) };
        }
        let n = room.min(buf.len());
        let delay = state.prng.between(state.faults.min_delay_ns, state.faults.max_delay_ns);
        // In order: never due before what was sent earlier.
        let due = c.wire[to].back().map_or(0, |(d, _)| *d).max(state.now_ns + delay);
        c.wire[to].push_back((due, buf[..n].to_vec()));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for SimStream {
    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

/// One endpoint of a [`SimNetwork`]: unbound when dropped.
pub struct SimEndpoint {
    network: SimNetwork,
    id: usize,
    local: SocketAddr,
    peer: Option<SocketAddr>,
    /// The key its datagrams are tagged with and checked against, as a UDP endpoint's.
    auth: Option<AuthKey>,
}

impl Drop for SimEndpoint {
    fn drop(&mut self) {
        self.network.lock().endpoints[self.id] = None;
    }
}

impl SimEndpoint {
    /// Sends `datagram`, with its tag after it when the endpoint authenticates (`tag`, or computed).
    fn send_to(&self, datagram: &[u8], tag: Option<&[u8; TAG_LENGTH]>, dest: Option<&SockAddr>) -> SendOutcome {
        let Some(to) = dest.and_then(SockAddr::as_socket).or(self.peer) else {
            return SendOutcome::Failed(io::Error::new(io::ErrorKind::NotConnected, "no destination"));
        };
        match self.auth {
            None => self.network.lock().send(self.local, to, datagram),
            Some(key) => {
                let tag = tag.copied().unwrap_or_else(|| key.tag(datagram));
                let tagged = [datagram, &tag].concat();
                match self.network.lock().send(self.local, to, &tagged) {
                    SendOutcome::TooLarge { path_mtu, .. } => {
                        SendOutcome::TooLarge { datagram: datagram.len(), path_mtu }
                    }
                    outcome => outcome,
                }
            }
        }
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
        self.send_to(datagram, None, dest)
    }

    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        self.send_to(datagram, tag, dest)
    }

    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        _scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        // Counted as one call, as `sendmmsg` of one batch is.
        let (outcome, _) = send_each_copy(datagrams, dests, |datagram, dest| self.send_to(datagram, None, dest));
        (outcome, 1)
    }

    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        let mut segments = 0;
        for chunk in data.chunks(segment.max(1)) {
            match self.send_to(chunk, None, None) {
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
            // As a UDP endpoint with a key: a datagram whose tag is missing or wrong is marked forged.
            let (length, forged) = match self.auth {
                None => (bytes.len(), false),
                Some(key) => key.verify(&bytes).map_or((bytes.len(), true), |length| (length, false)),
            };
            batch.push(Received { bytes: &bytes[..length], source: Some(source), truncated: false, forged });
        }
        Ok(batch.len())
    }
}
