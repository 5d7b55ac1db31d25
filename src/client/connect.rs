//! Connecting: a client's construction, the members it asks (and learns from redirects), and the
//! handshake that opens a session: the rounds of asks for the leader, the open with its ephemeral key and
//! cookie, and the reconnect of a session whose leader changed.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::SockAddr;

use super::credentials::{Ephemeral, ReplayWindow, COOKIE_LENGTH, PUBLIC_KEY_LENGTH};
use super::outbox::Outbox;
use super::send::seal;
use super::wire::{self, RecordHeader};
use super::{
    ClientConfig, ClientEnvironment, ClientStats, ClusterClient, ConnectError, Event, Handshake, InFlight,
    LeaderSearch, Link, Session, State,
};
use crate::cluster::consensus_core::MAX_MEMBERS;
use crate::frame::MAX_UDP_PAYLOAD_LENGTH;
use crate::media::transport::{Binding, Network, RecvBatch, SocketOptions};

impl ClusterClient {
    /// A client of the cluster `config` names, its socket bound; not yet connected.
    pub fn new(config: ClientConfig) -> io::Result<Self> {
        Self::new_in(config, ClientEnvironment::production())
    }

    /// As [`new`](Self::new), in `env` (its network, clock and seed).
    pub fn new_in(config: ClientConfig, env: ClientEnvironment) -> io::Result<Self> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        if config.members.is_empty() {
            return Err(invalid("a cluster client needs the members' endpoints".into()));
        }
        let smallest = wire::DATAGRAM_HEADER_LENGTH + wire::RECORD_HEADER_LENGTH + 8;
        if !(smallest..=MAX_UDP_PAYLOAD_LENGTH).contains(&config.mtu) {
            return Err(invalid(format!(
                "ClientConfig::mtu {}: a client datagram is {smallest} to {MAX_UDP_PAYLOAD_LENGTH} bytes (use the \
                 cluster's MTU, 1408 or 8192)",
                config.mtu
            )));
        }
        if config.window == 0 {
            return Err(invalid("ClientConfig::window must be at least 1 message".into()));
        }
        let bind = config.bind.unwrap_or_else(|| {
            let ip: std::net::IpAddr = if config.members[0].1.is_ipv6() {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            };
            SocketAddr::new(ip, 0)
        });
        let options = SocketOptions { send_buffer: Some(1 << 20), receive_buffer: Some(4 << 20) };
        let mut network = env.network.clone();
        let (socket, _) = network.bind(bind, &Binding { socket: &options, auth: None, shared: false })?;
        let addrs = config.members.iter().map(|&(_, addr)| SockAddr::from(addr)).collect();
        let clock = env.clock;
        let seed = env.seed.unwrap_or_else(|| clock.now_ns() ^ u64::from(std::process::id()).rotate_left(32));
        // Of the datagrams it sends: from the wall clock at its start, so that a client started again goes
        // on past the numbers its predecessor used.
        let sequence = (clock.epoch_ns() as u64).max(1);
        let known_leader = config.leader_hint.and_then(|id| config.members.iter().position(|m| m.0 == id));
        Ok(Self {
            link: Link {
                socket,
                addrs,
                out: Outbox::new(config.mtu),
                out_since_ns: 0,
                // Room for the largest UDP datagram: the cluster's MTU may be larger than this client's.
                batch: Some(RecvBatch::new(16, MAX_UDP_PAYLOAD_LENGTH)),
            },
            clock,
            state: State::Idle,
            session: Session {
                id: 0,
                token: None,
                sequence,
                windows: vec![ReplayWindow::default(); config.members.len()],
            },
            handshake: Handshake {
                nonce: seed | 1,
                ephemeral: ephemeral(env.seed, seed | 1),
                cookie: None,
                seed: env.seed,
            },
            search: LeaderSearch {
                target: 0,
                known_leader,
                cursor: 0,
                asked_in: vec![0; config.members.len()],
                round: 0,
                next_ask_ns: 0,
            },
            in_flight: InFlight {
                next_correlation: 1,
                pending: VecDeque::with_capacity(config.window),
                free: Vec::new(),
                resent_from: 0,
            },
            stats: ClientStats::default(),
            last_heard_ns: 0,
            last_sent_ns: 0,
            closing: None,
            pushes: Default::default(),
            assembly: (Vec::new(), 0),
            config,
        })
    }

    /// Adds member `id` at `addr` to the members this client asks (named by a member's redirect, not by
    /// its configuration); its index, or `None` when the list is full or the address is another's.
    pub(super) fn learn_member(&mut self, id: i32, addr: SocketAddr) -> Option<usize> {
        if id < 0 || self.config.members.len() >= MAX_MEMBERS || self.config.members.iter().any(|m| m.1 == addr) {
            return None;
        }
        self.config.members.push((id, addr));
        self.link.addrs.push(SockAddr::from(addr));
        self.search.asked_in.push(0);
        self.session.windows.push(ReplayWindow::default());
        self.stats.members_learnt += 1;
        Some(self.config.members.len() - 1)
    }

    /// Takes the members of the configuration in effect, as the leader lists them (`MEMBERS`): a member not
    /// known yet is added. A member it knows keeps the address it was given (the application may reach it
    /// through a relay or a translated address: what the member advertises need not be reachable from
    /// here), and members the list no longer names are kept (one that left answers with a redirect, or
    /// not at all).
    pub(super) fn learn_members(&mut self, members: &[(i32, SocketAddr)]) {
        for &(id, addr) in members {
            if !self.config.members.iter().any(|m| m.0 == id) {
                let _ = self.learn_member(id, addr);
            }
        }
    }

    /// Opens a session with the leader, polling until it is open or `timeout` passes (events of the
    /// session before, if any, are reported to nobody: poll them first).
    pub fn connect(&mut self, timeout: Duration) -> Result<u64, ConnectError> {
        self.start_connect();
        let deadline = self.clock.now_ns() + timeout.as_nanos() as u64;
        let mut refused = None;
        while self.state != State::Connected {
            if self.clock.now_ns() >= deadline {
                self.state = State::Idle;
                return Err(ConnectError::TimedOut);
            }
            if self.poll(|event| match event {
                Event::ConnectRefused { reason } => refused = Some(ConnectError::Refused(reason)),
                Event::RefusedByService { code } => refused = Some(ConnectError::RefusedByService { code }),
                _ => {}
            }) == 0
            {
                std::thread::sleep(Duration::from_micros(50));
            }
            if let Some(error) = refused {
                return Err(error);
            }
        }
        Ok(self.session.id)
    }

    /// Starts opening a new session; [`poll`](Self::poll) reports [`Event::Connected`] once it is open.
    /// The previous session, if any, is forgotten with the messages it still had in flight, unreported:
    /// poll until [`in_flight`](Self::in_flight) is 0 first (after [`Event::SessionClosed`] it is).
    pub fn start_connect(&mut self) {
        self.state = State::Opening;
        self.handshake.nonce = self.handshake.nonce.wrapping_add(2);
        self.handshake.ephemeral = ephemeral(self.handshake.seed, self.handshake.nonce);
        self.handshake.cookie = None;
        self.session.id = 0;
        self.session.token = None;
        self.pushes = Default::default();
        self.assembly.0.clear();
        self.session.windows.fill(ReplayWindow::default());
        self.in_flight.next_correlation = 1;
        self.in_flight.resent_from = 0;
        for pending in self.in_flight.pending.drain(..) {
            self.in_flight.free.push(pending.bytes);
        }
        self.search.next_ask_ns = 0;
    }

    /// Pushes the record that asks for the session: an open (with this open's public key, and the
    /// cookie once a member gave one), or a reconnect of the session.
    pub(super) fn push_ask(&mut self) {
        if self.state == State::Opening {
            let mut payload = [0u8; PUBLIC_KEY_LENGTH + COOKIE_LENGTH];
            payload[..PUBLIC_KEY_LENGTH].copy_from_slice(&self.handshake.ephemeral.public());
            let length = match self.handshake.cookie {
                Some(cookie) => {
                    payload[PUBLIC_KEY_LENGTH..].copy_from_slice(&cookie);
                    payload.len()
                }
                None => PUBLIC_KEY_LENGTH,
            };
            self.push(RecordHeader::new(wire::OPEN, 0).correlation(self.handshake.nonce), &payload[..length]);
        } else {
            self.push(RecordHeader::new(wire::RECONNECT, self.session.id), &[]);
        }
    }

    /// One round of asking: the open (or reconnect) to [`ClientConfig::connect_fanout`] members at
    /// once, the known leader first (then forgotten), then the others from `cursor` on; returns the
    /// datagrams sent. One datagram is sealed and sent to each (its sequence is the same to every member:
    /// each member keeps its own window of a session's sequences).
    pub(super) fn ask_round(&mut self) -> usize {
        let n = self.config.members.len();
        let fanout = self.config.connect_fanout.clamp(1, n);
        self.search.round += 1;
        self.stats.ask_rounds += 1;
        // What waits goes to the member it was for; the ask goes alone.
        let mut sent = self.flush();
        self.push_ask();
        let leader = self.search.known_leader.take();
        let seal = seal(
            &self.session.token,
            self.config.key.as_ref(),
            self.state,
            self.session.id,
            &mut self.session.sequence,
        );
        let bytes = self.link.out.finish_current(seal);
        let mut asked = 0;
        if let Some(leader) = leader {
            let _ = self.link.socket.send(bytes, Some(&self.link.addrs[leader]));
            self.search.asked_in[leader] = self.search.round;
            self.search.target = leader;
            asked += 1;
        }
        // Each member at most once: at most n steps from the cursor.
        let mut next = self.search.cursor;
        for _ in 0..n {
            if asked >= fanout {
                break;
            }
            let member = next;
            next = (next + 1) % n;
            if Some(member) == leader {
                continue;
            }
            let _ = self.link.socket.send(bytes, Some(&self.link.addrs[member]));
            self.search.asked_in[member] = self.search.round;
            if asked == 0 {
                self.search.target = member;
            }
            asked += 1;
        }
        self.search.cursor = next;
        self.link.out.clear_current();
        self.last_sent_ns = self.clock.now_ns();
        self.stats.asks += asked as u64;
        self.stats.datagrams_sent += asked as u64;
        self.stats.send_calls += asked as u64;
        sent += asked;
        sent
    }

    /// Asks member `member` alone, now (an answer named it the leader); returns the datagrams sent.
    pub(super) fn ask_one(&mut self, member: usize) -> usize {
        // What waits goes to the member it was for.
        let mut sent = self.flush();
        self.search.asked_in[member] = self.search.round;
        self.search.target = member;
        self.push_ask();
        let asked = self.flush();
        self.stats.asks += asked as u64;
        sent += asked;
        sent
    }
}

/// The ephemeral key pair of the open with `nonce`: from the seed when there is one (a simulated client
/// replays exactly), from the kernel's randomness otherwise.
fn ephemeral(seed: Option<u64>, nonce: u64) -> Ephemeral {
    let from_seed = |seed: u64| {
        let mut hasher = blake3::Hasher::new_derive_key("quorumcast 2026-12 seeded client ephemeral");
        hasher.update(&seed.to_le_bytes()).update(&nonce.to_le_bytes());
        Ephemeral::from_random(*hasher.finalize().as_bytes())
    };
    match seed {
        Some(seed) => from_seed(seed),
        None => Ephemeral::generate().unwrap_or_else(|_| {
            from_seed(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
            )
        }),
    }
}
