//! A client of a cluster from another process or host (Aeron Cluster's `AeronCluster`): it finds the
//! leader, opens a session, offers messages over UDP, and learns for each whether it was committed, with
//! the service's response; across a change of leader it finds the new one and resends what it was not
//! told was committed, and the replicated session table applies each message exactly once.
//!
//! ```no_run
//! use quorumcast::{ClientConfig, ClusterClient, Event};
//! use std::time::Duration;
//!
//! // Each member's id and client endpoint (`Member::client`).
//! let members = vec![(0, "10.0.0.1:40300".parse().unwrap()), (1, "10.0.0.2:40300".parse().unwrap())];
//! let mut client = ClusterClient::new(ClientConfig::new(members)).unwrap();
//! client.connect(Duration::from_secs(5)).unwrap();
//! let id = client.offer(b"set x = 1").unwrap();
//! let mut done = false;
//! while !done {
//!     client.poll(|event| {
//!         if let Event::Committed { correlation_id, response, .. } = event {
//!             done = correlation_id == id;
//!             println!("{correlation_id} committed, response {response:?}");
//!         }
//!     });
//! }
//! ```
//!
//! Messages are numbered from 1 in their session (the correlation id); a message is at most one
//! datagram's payload ([`ClusterClient::max_message_length`]), and many are batched per datagram: an
//! offer is sent by the next [`ClusterClient::poll`], with every datagram filled since the last, in one
//! `sendmmsg` (or sooner, when [`SEND_BATCH`] datagrams are full). At most
//! [`ClientConfig::window`] messages are in flight; past that an offer is back-pressured.
//!
//! # Finding the leader
//!
//! An open (or, for a session that lost its leader, a reconnect) goes to
//! [`ClientConfig::connect_fanout`] members at once: the member last known to lead first, then the
//! others in list order. Only the leader appends an open (the others answer with a redirect naming the
//! leader they know), so the first `OPENED` is the session's, and a dead member among those asked costs
//! nothing. A redirect to a member not asked in the round is followed at once; only a round in which no
//! member answered as the leader waits [`ClientConfig::connect_retry`] for the next.
//! [`ClusterClient::stats`] counts the rounds and asks. A new client can be seeded with the leader
//! another one knows ([`ClientConfig::leader_hint`], [`ClusterClient::known_leader`]): its first open
//! asks that member first.
//!
//! # Invariants
//!
//! - Every offered message ends in exactly one [`Event::Committed`], [`Event::NotApplied`] or
//!   [`Event::OutcomeUnknown`], unless the client is dropped, or starts a new session, first. A message
//!   reported not applied never is: a closed session's answer names its last message applied, and the
//!   client reports those up to it committed; where no member can say (the session is unknown to it, or
//!   moved to another client), the outcome is unknown, never a guess.
//! - A message is kept (and resent after a loss or a change of leader) until it is reported committed or
//!   not applied; the session table makes sure a resend is never applied twice.
//! - Only datagrams from the members' client endpoints are read.

pub mod credentials;
mod outbox;
pub mod session;
mod wait;
pub mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::SockAddr;

use crate::agent::clock::NanoClock;
use crate::cluster::configuration::decode_addr;
use crate::cluster::consensus_core::MAX_MEMBERS;
use crate::frame::MAX_UDP_PAYLOAD_LENGTH;
use crate::media::auth::AuthKey;
use crate::media::transport::{Binding, Network, RecvBatch, SharedNetwork, SocketOptions, Transport};

use self::credentials::{open_token, ClientKey, Ephemeral, ReplayWindow, COOKIE_LENGTH, PUBLIC_KEY_LENGTH};
use self::outbox::Outbox;
use self::wire::{Datagram, RecordHeader, RefusalCode, Seal};

/// How a client reaches a cluster, and its timeouts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Each member's id and client endpoint ([`crate::node::Member::client`]).
    pub members: Vec<(i32, SocketAddr)>,
    /// Bytes of a datagram, at most (the cluster's MTU).
    /// Default: `1408`.
    pub mtu: usize,
    /// Messages in flight (offered, not yet reported), at most; at most the cluster's `clients.window`.
    /// Default: `1024`.
    pub window: usize,
    /// A keep-alive goes to the leader when nothing else has for this long.
    /// Default: `100ms`.
    pub keepalive_interval: Duration,
    /// Nothing heard from the leader for this long: the client looks for the leader again.
    /// Default: `1s`.
    pub leader_timeout: Duration,
    /// The oldest message in flight unanswered for this long is resent, with those after it.
    /// Default: `200ms`.
    pub resend_timeout: Duration,
    /// While connecting, an open (or reconnect) is sent again this often, to the next members when the
    /// last ones did not answer. An answer that names the leader is followed at once, without this wait.
    /// Default: `20ms`.
    pub connect_retry: Duration,
    /// Members one open (or reconnect) goes to at once: the last known leader first, then the others in
    /// list order (capped at the member count). The first that answers as the leader opens the session
    /// (only a leader appends an open; the others answer with a redirect), so with more than one a dead
    /// member costs nothing. 1 asks one member at a time, each that does not answer costing a
    /// [`connect_retry`](Self::connect_retry).
    /// Default: `3`.
    pub connect_fanout: usize,
    /// The local address to bind (port 0: any).
    /// Default: `None`.
    pub bind: Option<SocketAddr>,
    /// How long an offered message may wait for more to share its datagram before a poll sends it
    /// (Kafka's `linger.ms`). 0, the default, sends at every poll: the least latency, and at moderate
    /// rates many small datagrams, each a receive the leader pays for; a few microseconds fill them.
    /// Default: `0ns`.
    pub linger: Duration,
    /// The member (by id) believed to lead, asked first by the first open: a new client seeded with
    /// another's [`ClusterClient::known_leader`] goes straight to the leader, whatever the list's order
    /// and whichever members are down. An id the list does not name is ignored.
    /// Default: `None`.
    pub leader_hint: Option<i32>,
    /// The client key, for a cluster that requires one (`[clients] auth_key` or `[[clients.keys]]`):
    /// every datagram is tagged with it (or with the session's token, which the cluster gives only to a
    /// holder of it). `None`, the default: for a cluster without client keys.
    /// Default: `None`.
    pub key: Option<ClientKey>,
}

impl ClientConfig {
    /// A client of `members`, with the default limits and timeouts.
    pub fn new(members: Vec<(i32, SocketAddr)>) -> Self {
        Self {
            members,
            mtu: 1408,
            window: 1024,
            keepalive_interval: Duration::from_millis(100),
            leader_timeout: Duration::from_secs(1),
            resend_timeout: Duration::from_millis(200),
            connect_retry: Duration::from_millis(20),
            connect_fanout: 3,
            bind: None,
            linger: Duration::ZERO,
            leader_hint: None,
            key: None,
        }
    }
}

/// Why an offer was not taken (nothing was sent; the caller may offer again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientOfferError {
    /// No session is open (connecting, reconnecting to a new leader, or closed): poll, then offer again.
    NotConnected,
    /// [`ClientConfig::window`] messages are in flight: poll for their outcomes first.
    BackPressured,
    /// Longer than a datagram can carry.
    TooLong {
        /// The longest message.
        max: usize,
    },
}

impl fmt::Display for ClientOfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotConnected => f.write_str("not connected to the cluster's leader"),
            Self::BackPressured => f.write_str("the window of messages in flight is full"),
            Self::TooLong { max } => write!(f, "a client message is at most {max} bytes"),
        }
    }
}

impl std::error::Error for ClientOfferError {}

/// A message [`ClusterClient::offer_and_wait`] saw committed and applied, exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Where its entry ends in the log (see [`Event::Committed`]).
    pub position: Option<i64>,
    /// The service's response.
    pub response: Vec<u8>,
    /// Found applied by a resend.
    pub duplicate: bool,
}

/// Why [`ClusterClient::offer_and_wait`] returned without a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The timeout passed. With `offered`, the message was sent and may still be applied (once): its
    /// outcome comes to a later [`poll`](ClusterClient::poll) as usual.
    TimedOut {
        /// Whether the message was offered before the timeout.
        offered: bool,
    },
    /// Longer than a datagram can carry.
    TooLong {
        /// The longest message.
        max: usize,
    },
    /// Not applied, and never will be (its session closed).
    NotApplied(RefusalCode),
    /// Another client took the session: applied at most once, and this client will not learn whether.
    OutcomeUnknown,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimedOut { offered: false } => f.write_str("timed out before the message could be offered"),
            Self::TimedOut { offered: true } => f.write_str("timed out waiting for the commit (it may still come)"),
            Self::TooLong { max } => write!(f, "a client message is at most {max} bytes"),
            Self::NotApplied(code) => write!(f, "not applied: {code}"),
            Self::OutcomeUnknown => f.write_str("outcome unknown: another client took the session"),
        }
    }
}

impl std::error::Error for WaitError {}

/// Why [`ClusterClient::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// No leader answered in time.
    TimedOut,
    /// The leader refused the session.
    Refused(RefusalCode),
    /// The socket failed.
    Io(io::Error),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimedOut => f.write_str("no leader opened a session in time"),
            Self::Refused(code) => write!(f, "the leader refused the session: {code}"),
            Self::Io(e) => write!(f, "client socket: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// What [`ClusterClient::poll`] reports.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A session is open at the leader `leader` (first, or again after a change of leader).
    Connected {
        /// The session.
        session_id: u64,
        /// The leader's member id.
        leader: i32,
    },
    /// The message `correlation_id` was committed and applied, exactly once.
    Committed {
        /// The message.
        correlation_id: u64,
        /// Where its entry ends in the log: of the resend that found it applied, for a duplicate;
        /// `None` when the commit is known only from a later one (its own answer was lost).
        position: Option<i64>,
        /// The service's response (empty when it wrote none, or it was lost with a change of leader).
        response: &'a [u8],
        /// True when it was found applied by a resend (after a loss or a change of leader).
        duplicate: bool,
    },
    /// The message `correlation_id` was not applied and never will be (its session closed).
    NotApplied {
        /// The message.
        correlation_id: u64,
        /// Why.
        reason: RefusalCode,
    },
    /// The session closed, or moved to another client that holds its token, before message
    /// `correlation_id`'s outcome was known: it was applied at most once, and this client will not learn whether.
    OutcomeUnknown {
        /// The message.
        correlation_id: u64,
    },
    /// The session closed (the client may [`connect`](ClusterClient::connect) again for a new one).
    SessionClosed {
        /// Why.
        reason: ClosedReason,
    },
    /// The leader refused a new session.
    ConnectRefused {
        /// Why.
        reason: RefusalCode,
    },
    /// The cluster takes no new messages now (an operator suspended it, `qc-cluster suspend`): message
    /// `correlation_id` and those after it stay in flight, and are sent again until it resumes. The
    /// session lives on.
    Suspended {
        /// The first message refused.
        correlation_id: u64,
    },
}

/// Why a session closed under its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedReason {
    /// It sent nothing for `clients.session_timeout`.
    TimedOut,
    /// The cluster does not have it (closed, or never known to the leader asked).
    Unknown,
    /// Another client proved it holds the session's token and took it (the same token used from two
    /// places): this client's messages in flight end in [`Event::OutcomeUnknown`].
    Displaced,
    /// The cluster was full, and closed this session (of an address holding more sessions than any
    /// other) to let a client of another address in: its messages in flight end in
    /// [`Event::OutcomeUnknown`].
    Evicted,
}

/// What a client has done so far (plain counts, read with [`ClusterClient::stats`]): how it found its
/// leaders, and what it sent and read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Rounds of asking for a session or a leader: the first ask of each connect or reconnect, and each
    /// [`ClientConfig::connect_retry`] that passed without an answer naming the leader.
    pub ask_rounds: u64,
    /// Datagrams of those rounds and of followed redirects (an open or reconnect to one member each).
    pub asks: u64,
    /// Cookies a leader gave this client's address, each answered with the open again, carrying it (the
    /// second half of an ask; not counted in `asks`).
    pub cookies: u64,
    /// Answers naming another member as the leader that were followed at once (that member had not been
    /// asked in the round).
    pub redirects_followed: u64,
    /// Members learnt from redirects (a leader added while the cluster ran, which the client's list did
    /// not name).
    pub members_learnt: u64,
    /// Datagrams sent (every kind).
    pub datagrams_sent: u64,
    /// Messages sent, resends included.
    pub messages_sent: u64,
    /// Datagrams read from the members.
    pub datagrams_received: u64,
    /// Receive calls (each a `recvmmsg` of up to 16 datagrams).
    pub receive_calls: u64,
    /// Send calls (each a `sendmmsg` of up to `SEND_BATCH` datagrams, or an ask's `sendmsg`).
    pub send_calls: u64,
}

/// One message in flight.
#[derive(Debug)]
struct Pending {
    correlation_id: u64,
    bytes: Vec<u8>,
    sent_ns: u64,
}

/// Where the client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No session, and none asked for.
    Idle,
    /// Asking for a new session.
    Opening,
    /// Asking a (new) leader to go on with the session.
    Reconnecting,
    /// The session is open at the leader.
    Connected,
}

/// What a client takes from the world outside it: the network its socket is bound on, its clock, and
/// the seed of its random choices. [`ClusterClient::new`] uses UDP, the monotonic and wall clocks and a
/// seed from the time; the node simulator gives a simulated network and clock and a fixed seed, so that
/// a client replays exactly with its seed.
#[derive(Clone, Debug)]
pub struct ClientEnvironment {
    /// Where its socket is bound.
    pub network: SharedNetwork,
    /// What it times keep-alives, resends and deadlines by, and starts its datagram sequence from.
    pub clock: NanoClock,
    /// The seed of its nonces; `None` takes one from the time and the process id.
    pub seed: Option<u64>,
}

impl ClientEnvironment {
    /// UDP, the monotonic and wall clocks, a seed from the time.
    pub fn production() -> Self {
        Self { network: SharedNetwork::udp(), clock: NanoClock::new(), seed: None }
    }
}

/// A client of a cluster; see the module documentation.
pub struct ClusterClient {
    config: ClientConfig,
    clock: NanoClock,
    state: State,
    /// The socket, the members' addresses, and the datagrams being filled and read.
    link: Link,
    /// The open session's id and credentials.
    session: Session,
    /// The open being asked for: its nonce, key pair and cookie.
    handshake: Handshake,
    /// Which member is asked or connected to, and the rounds of asking for the leader.
    search: LeaderSearch,
    /// The messages offered and not yet reported.
    in_flight: InFlight,
    stats: ClientStats,
    last_heard_ns: u64,
    last_sent_ns: u64,
    /// Records of the datagram being read that reported outcomes.
    closing: Option<Closing>,
}

/// A client's socket and its datagrams: the members' addresses it sends to, the datagrams being filled
/// (and since when one waits), and the batch read into.
struct Link {
    /// A UDP socket (one indirect call beside each system call), or a simulated network's endpoint.
    socket: Box<dyn Transport>,
    /// The members' client endpoints, as socket addresses.
    addrs: Vec<SockAddr>,
    out: Outbox,
    /// When the first message waiting in `out` was offered.
    out_since_ns: u64,
    /// Taken while a poll reads from it (records borrow from it while the client changes).
    batch: Option<RecvBatch>,
}

/// The session's identity and credentials.
struct Session {
    id: u64,
    /// What the session's datagrams are tagged with (given in `OPENED`).
    token: Option<AuthKey>,
    /// Of the datagrams this client sends: from the wall clock at its start, growing with each.
    sequence: u64,
    /// The datagrams of the session seen from each member (by index).
    windows: Vec<ReplayWindow>,
}

/// The open being asked for, and what makes each open's key pair.
struct Handshake {
    /// The nonce of the open being asked for.
    nonce: u64,
    /// The ephemeral key pair of the open being asked for (a new one for each open).
    ephemeral: Ephemeral,
    /// The cookie a member gave this client's address for that open, once one did.
    cookie: Option<[u8; COOKIE_LENGTH]>,
    /// The seed of its random choices, when its environment gives one (then its keys come from it).
    seed: Option<u64>,
}

/// Where the client looks for the leader: the member asked or connected to, the one last known to lead,
/// and the rounds of asking.
struct LeaderSearch {
    /// The member connected to (or last asked alone), by index in `members`: where the session's
    /// datagrams go.
    target: usize,
    /// The member last known to lead, by index: asked first by the next round (then forgotten until an
    /// answer names a leader again, so that a dead one is not asked alone forever).
    known_leader: Option<usize>,
    /// Where the next round's members start, after the known leader, by index.
    cursor: usize,
    /// The round each member was last asked in (`round` is the current one): a redirect to a member
    /// asked in this round waits for that member's own answer.
    asked_in: Vec<u64>,
    round: u64,
    /// When an open or reconnect is next sent.
    next_ask_ns: u64,
}

/// The window of messages in flight: offered, kept for resending until reported.
struct InFlight {
    /// The correlation id the next offer gets.
    next_correlation: u64,
    pending: VecDeque<Pending>,
    /// The buffers of reported messages, for the next offers.
    free: Vec<Vec<u8>>,
    /// A NAK's resend from this id has been made (no second resend for a repeat of it).
    resent_from: u64,
}

/// A session closed while its messages were in flight: they are reported not applied when the member
/// told the session's last message applied (those up to it were reported committed first), and of
/// unknown outcome otherwise (the session moved to another client, or the member does not hold it).
#[derive(Clone, Copy, Debug)]
struct Closing {
    refusal: RefusalCode,
    reason: ClosedReason,
    /// The member said which messages the session applied.
    known: bool,
}

impl fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterClient")
            .field("state", &self.state)
            .field("session_id", &self.session.id)
            .field("leader", &self.leader())
            .field("in_flight", &self.in_flight.pending.len())
            .finish()
    }
}

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
            config,
        })
    }

    /// Adds member `id` at `addr` to the members this client asks (named by a member's redirect, not by
    /// its configuration); its index, or `None` when the list is full or the address is another's.
    fn learn_member(&mut self, id: i32, addr: SocketAddr) -> Option<usize> {
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
    fn learn_members(&mut self, members: &[(i32, SocketAddr)]) {
        for &(id, addr) in members {
            if !self.config.members.iter().any(|m| m.0 == id) {
                let _ = self.learn_member(id, addr);
            }
        }
    }

    /// The local address the client sends from.
    pub fn local_addr(&self) -> SocketAddr {
        self.link.socket.local_addr()
    }

    /// Whether it is asking the members for a session (an open, or a reconnect after its leader was lost):
    /// [`poll`](Self::poll) goes on with it.
    pub fn is_connecting(&self) -> bool {
        matches!(self.state, State::Opening | State::Reconnecting)
    }

    /// The open session, if one is.
    pub fn session_id(&self) -> Option<u64> {
        Some(self.session.id).filter(|_| self.state == State::Connected)
    }

    /// The member the client is connected to (or asking), by id.
    pub fn leader(&self) -> Option<i32> {
        Some(self.config.members[self.search.target].0).filter(|_| self.state == State::Connected)
    }

    /// The member (by id) this client last knew to lead: the one it is connected to, else the last one an
    /// answer named. Seed a new client with it ([`ClientConfig::leader_hint`]) so that its first open
    /// goes there first.
    pub fn known_leader(&self) -> Option<i32> {
        let index = if self.state == State::Connected { Some(self.search.target) } else { self.search.known_leader };
        index.map(|i| self.config.members[i].0)
    }

    /// What the client has done so far.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The correlation id the next offer gets.
    pub fn next_correlation_id(&self) -> u64 {
        self.in_flight.next_correlation
    }

    /// Messages offered and not yet reported.
    pub fn in_flight(&self) -> usize {
        self.in_flight.pending.len()
    }

    /// The longest message [`offer`](Self::offer) takes.
    pub fn max_message_length(&self) -> usize {
        self.link.out.max_payload()
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
            if self.poll(|event| {
                if let Event::ConnectRefused { reason } = event {
                    refused = Some(reason);
                }
            }) == 0
            {
                std::thread::sleep(Duration::from_micros(50));
            }
            if let Some(reason) = refused {
                return Err(ConnectError::Refused(reason));
            }
        }
        Ok(self.session.id)
    }

    /// Offers `message` and waits, polling, until its outcome is known or `timeout` passes: the blocking
    /// form of [`offer`](Self::offer) then [`poll`](Self::poll) for its [`Event::Committed`].
    ///
    /// Back-pressure (a full window) and a session between leaders are waited out within the timeout, as
    /// a caller's loop would. Returns the service's response. Events of other messages in flight that
    /// arrive meanwhile are reported to nobody: use `offer` and `poll` when several are in flight.
    pub fn offer_and_wait(&mut self, message: &[u8], timeout: Duration) -> Result<Committed, WaitError> {
        let deadline = self.clock.now_ns() + timeout.as_nanos() as u64;
        let correlation_id = loop {
            match self.offer(message) {
                Ok(id) => break id,
                Err(ClientOfferError::TooLong { max }) => return Err(WaitError::TooLong { max }),
                Err(ClientOfferError::NotConnected | ClientOfferError::BackPressured) => {}
            }
            if self.clock.now_ns() >= deadline {
                return Err(WaitError::TimedOut { offered: false });
            }
            if self.poll(|_| {}) == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        };
        let mut outcome = None;
        loop {
            let work = self.poll(|event| match event {
                Event::Committed { correlation_id: id, position, response, duplicate } if id == correlation_id => {
                    outcome = Some(Ok(Committed { position, response: response.to_vec(), duplicate }));
                }
                Event::NotApplied { correlation_id: id, reason } if id == correlation_id => {
                    outcome = Some(Err(WaitError::NotApplied(reason)));
                }
                Event::OutcomeUnknown { correlation_id: id } if id == correlation_id => {
                    outcome = Some(Err(WaitError::OutcomeUnknown));
                }
                _ => {}
            });
            if let Some(outcome) = outcome.take() {
                return outcome;
            }
            if self.clock.now_ns() >= deadline {
                return Err(WaitError::TimedOut { offered: true });
            }
            if work == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
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
        self.session.windows.fill(ReplayWindow::default());
        self.in_flight.next_correlation = 1;
        self.in_flight.resent_from = 0;
        for pending in self.in_flight.pending.drain(..) {
            self.in_flight.free.push(pending.bytes);
        }
        self.search.next_ask_ns = 0;
    }

    /// Offers `message`; returns its correlation id. It is sent by the next [`poll`](Self::poll) (or
    /// sooner, when `SEND_BATCH` datagrams are full). Never blocks.
    pub fn offer(&mut self, message: &[u8]) -> Result<u64, ClientOfferError> {
        if self.state != State::Connected {
            return Err(ClientOfferError::NotConnected);
        }
        if message.len() > self.link.out.max_payload() {
            return Err(ClientOfferError::TooLong { max: self.link.out.max_payload() });
        }
        if self.in_flight.pending.len() >= self.config.window {
            return Err(ClientOfferError::BackPressured);
        }
        let correlation_id = self.in_flight.next_correlation;
        self.in_flight.next_correlation += 1;
        let mut bytes = self.in_flight.free.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(message);
        // The clock is read once per run of offers that waits to be sent (the first of them), not per
        // offer: it was a tenth of a saturating client's CPU. A message's resend timer then runs from
        // the first offer of its run, at most that much early (it is sent later still, at the poll).
        if self.link.out.is_empty() {
            self.link.out_since_ns = self.clock.now_ns();
        }
        let now = self.link.out_since_ns;
        self.push_message(correlation_id, message);
        self.in_flight.pending.push_back(Pending { correlation_id, bytes, sent_ns: now });
        Ok(correlation_id)
    }

    /// Blocks (in `ppoll(2)` on the client's socket, spending no CPU) until a datagram is there to read,
    /// `timeout` passes, or the client's next timer is due (a keep-alive, a resend, an ask for the
    /// leader, the leader's silence, a lingering datagram), whichever is first; true when a datagram is
    /// there. The idle of a caller with nothing to do until the cluster answers: it wakes when the answer
    /// arrives, not at the end of a sleep, and leaves the core to others meanwhile (on a host whose cores
    /// the cluster shares, a client that spins takes them from it). Call [`poll`](Self::poll) after it.
    ///
    /// A wait too short to be worth arming a timer on this host (twice what arming one costs, measured once
    /// per process: on some virtual machines arming one costs 25 us of CPU and never gives up the core)
    /// yields the core once and looks at the socket without blocking instead.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let now = self.clock.now_ns();
        let mut wait_ns = timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
        if let Some(due) = self.next_timer_ns() {
            wait_ns = wait_ns.min(due.saturating_sub(now));
        }
        let Some(socket_fd) = self.link.socket.readiness_fd() else {
            // A simulated network: nothing to block on (its caller moves the time).
            return Ok(false);
        };
        wait::until_readable(socket_fd, wait_ns)
    }

    /// When the first of the client's timers is due (clock ns), if it has any.
    fn next_timer_ns(&self) -> Option<u64> {
        let after = |from: u64, d: Duration| from.saturating_add(d.as_nanos() as u64);
        let linger = (!self.link.out.is_empty()).then(|| after(self.link.out_since_ns, self.config.linger));
        let timers = match self.state {
            State::Idle => None,
            State::Opening | State::Reconnecting => Some(self.search.next_ask_ns),
            State::Connected => {
                let resend = self.in_flight.pending.front().map(|p| after(p.sent_ns, self.config.resend_timeout));
                let silent = after(self.last_heard_ns, self.config.leader_timeout);
                let keepalive = after(self.last_sent_ns, self.config.keepalive_interval);
                Some(silent.min(keepalive).min(resend.unwrap_or(u64::MAX)))
            }
        };
        match (timers, linger) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// Closes the session (the leader is told; nothing in flight is resent after this).
    pub fn close(&mut self) {
        if self.state == State::Connected {
            self.push(RecordHeader::new(wire::CLOSE, self.session.id), &[]);
            self.flush();
        }
        self.state = State::Idle;
    }

    /// Sends what was offered, reads the cluster's answers and reports them to `handler`, and keeps the
    /// session alive (keep-alives, resends, finding a new leader); returns the work done.
    pub fn poll(&mut self, mut handler: impl FnMut(Event<'_>)) -> usize {
        let now = self.clock.now_ns();
        let lingered = now.saturating_sub(self.link.out_since_ns) >= self.config.linger.as_nanos() as u64;
        let mut work = if lingered { self.flush() } else { 0 };
        let mut batch = self.link.batch.take().expect("put back after every poll");
        loop {
            let received = self.link.socket.recv_batch(&mut batch).unwrap_or(0);
            self.stats.receive_calls += 1;
            self.stats.datagrams_received += received as u64;
            for i in 0..received {
                let datagram = batch.datagram(i);
                let Some(member) = datagram.source.and_then(|s| self.config.members.iter().position(|m| m.1 == s))
                else {
                    continue;
                };
                let Some(in_session) = self.authenticate(member, datagram.bytes) else {
                    continue;
                };
                let Ok(records) = Datagram::parse(datagram.bytes).and_then(|d| d.records()) else {
                    continue;
                };
                for (record, payload) in records {
                    on_record(&mut self.view(now), member, in_session, record, payload, &mut handler);
                }
            }
            work += received;
            if received < batch.capacity() {
                break;
            }
        }
        self.link.batch = Some(batch);
        if let Some(closing) = self.closing.take() {
            for pending in self.in_flight.pending.drain(..) {
                let correlation_id = pending.correlation_id;
                handler(match closing.known {
                    false => Event::OutcomeUnknown { correlation_id },
                    true => Event::NotApplied { correlation_id, reason: closing.refusal },
                });
                self.in_flight.free.push(pending.bytes);
            }
            handler(Event::SessionClosed { reason: closing.reason });
        }
        work + self.on_timers(now)
    }

    /// Checks a datagram from member `member` before its records are read: a datagram of this session
    /// must carry the session token's tag and a sequence not seen from that member; one of no session,
    /// the client key's tag when this client has one. Some(true) for the session's, Some(false) for one
    /// of no session, None to drop it.
    fn authenticate(&mut self, member: usize, bytes: &[u8]) -> Option<bool> {
        let datagram = Datagram::parse(bytes).ok()?;
        let header = datagram.header;
        if header.session_id != 0 {
            let token = self.session.token.as_ref().filter(|_| header.session_id == self.session.id)?;
            if !datagram.verify(token) || !self.session.windows[member].accept(header.sequence) {
                return None;
            }
            return Some(true);
        }
        match &self.config.key {
            Some(key) => datagram.verify(key.key()).then_some(false),
            None => Some(false),
        }
    }

    fn view(&mut self, now: u64) -> View<'_> {
        View { client: self, now }
    }

    /// Keep-alives, resends, and asking for a session or a leader.
    fn on_timers(&mut self, now: u64) -> usize {
        match self.state {
            State::Idle => 0,
            State::Opening | State::Reconnecting => {
                if now < self.search.next_ask_ns {
                    return 0;
                }
                self.search.next_ask_ns = now + self.config.connect_retry.as_nanos() as u64;
                self.ask_round()
            }
            State::Connected => {
                if now.saturating_sub(self.last_heard_ns) >= self.config.leader_timeout.as_nanos() as u64 {
                    // The leader is silent: look for the leader, from the next member.
                    self.state = State::Reconnecting;
                    self.search.known_leader = None;
                    self.search.cursor = (self.search.target + 1) % self.config.members.len();
                    self.search.next_ask_ns = 0;
                    return 1;
                }
                if let Some(oldest) = self.in_flight.pending.front() {
                    if now.saturating_sub(oldest.sent_ns) >= self.config.resend_timeout.as_nanos() as u64 {
                        let from = oldest.correlation_id;
                        return self.resend_from(from, now);
                    }
                }
                if now.saturating_sub(self.last_sent_ns) >= self.config.keepalive_interval.as_nanos() as u64 {
                    self.push(RecordHeader::new(wire::KEEP_ALIVE, self.session.id), &[]);
                    return self.flush();
                }
                0
            }
        }
    }

    /// Pushes the record that asks for the session: an open (with this open's public key, and the
    /// cookie once a member gave one), or a reconnect of the session.
    fn push_ask(&mut self) {
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
    fn ask_round(&mut self) -> usize {
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
    fn ask_one(&mut self, member: usize) -> usize {
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

    /// Resends every message in flight from `from` on; returns the datagrams sent.
    fn resend_from(&mut self, from: u64, now: u64) -> usize {
        let session = self.session.id;
        for i in 0..self.in_flight.pending.len() {
            if self.in_flight.pending[i].correlation_id < from {
                continue;
            }
            let record =
                RecordHeader::new(wire::MESSAGE, session).correlation(self.in_flight.pending[i].correlation_id);
            let bytes = std::mem::take(&mut self.in_flight.pending[i].bytes);
            self.push(record, &bytes);
            self.in_flight.pending[i].bytes = bytes;
            self.in_flight.pending[i].sent_ns = now;
            self.stats.messages_sent += 1;
        }
        self.flush()
    }

    fn push_message(&mut self, correlation_id: u64, message: &[u8]) {
        self.stats.messages_sent += 1;
        self.push(RecordHeader::new(wire::MESSAGE, self.session.id).correlation(correlation_id), message);
    }

    /// Adds a record to the datagram being filled; when it does not fit, that datagram is sealed first
    /// (and the sealed ones sent first when they are [`SEND_BATCH`]).
    fn push(&mut self, record: RecordHeader, payload: &[u8]) {
        if !self.link.out.fits(payload.len()) {
            self.seal_current();
        }
        self.link.out.push(record, payload);
    }

    /// Seals the datagram being filled with the session's token (or, opening, with the client key); the
    /// sealed ones are sent first when they are [`SEND_BATCH`] less one.
    fn seal_current(&mut self) {
        if self.link.out.is_full() {
            self.send_sealed();
        }
        let (token, key, state, session_id) =
            (&self.session.token, self.config.key.as_ref(), self.state, self.session.id);
        let sequence = &mut self.session.sequence;
        self.link.out.seal(|| seal(token, key, state, session_id, sequence));
    }

    /// Sends the sealed datagrams to the member asked or connected to, in one `sendmmsg`; returns the
    /// datagrams sent.
    fn send_sealed(&mut self) -> usize {
        let sent = self.link.out.send(&mut *self.link.socket, &self.link.addrs[self.search.target]);
        if sent > 0 {
            self.last_sent_ns = self.clock.now_ns();
            self.stats.datagrams_sent += sent as u64;
            self.stats.send_calls += 1;
        }
        sent
    }

    /// Seals the datagram being filled and sends it with those sealed before it to the member asked or
    /// connected to; returns the datagrams sent.
    fn flush(&mut self) -> usize {
        if self.link.out.is_empty() {
            return 0;
        }
        self.seal_current();
        self.send_sealed()
    }
}

/// How a client datagram is sealed: with the session's token (its next sequence), or, opening, with the
/// client key (or untagged, without one).
fn seal<'a>(
    token: &'a Option<AuthKey>,
    key: Option<&'a ClientKey>,
    state: State,
    session_id: u64,
    sequence: &mut u64,
) -> Seal<'a> {
    let key_id = key.map_or(0, ClientKey::id);
    match token {
        Some(token) if state != State::Opening => {
            *sequence += 1;
            Seal { session_id, key_id, sequence: *sequence, key: Some(token) }
        }
        _ => Seal { session_id: 0, key_id, sequence: 0, key: key.map(ClientKey::key) },
    }
}

/// The client while it reads one record.
struct View<'a> {
    client: &'a mut ClusterClient,
    now: u64,
}

/// One record from member `member` (by index), of a datagram of the session (`in_session`, its tag
/// checked with the token) or of none (an answer to an open, or a redirect).
fn on_record(
    view: &mut View<'_>,
    member: usize,
    in_session: bool,
    record: RecordHeader,
    payload: &[u8],
    handler: &mut impl FnMut(Event<'_>),
) {
    let now = view.now;
    let client = &mut *view.client;
    if !in_session && !matches!(record.kind, wire::REDIRECT | wire::OPENED | wire::REFUSED | wire::COOKIE) {
        return;
    }
    let ours = in_session && record.session_id == client.session.id;
    match record.kind {
        wire::REDIRECT => {
            let mut leader = client.config.members.iter().position(|m| i64::from(m.0) == record.value);
            if let (None, Ok(id), Some(addr)) = (leader, i32::try_from(record.value), decode_addr(payload)) {
                // A leader its list does not name (added while the cluster ran): learnt from the redirect.
                leader = client.learn_member(id, addr);
            }
            if let (Some(leader), State::Opening | State::Reconnecting) = (leader, client.state) {
                // The next round asks it first.
                client.search.known_leader = Some(leader);
                // Named another member not yet asked in this round: ask it now. Named one asked in this
                // round (its own answer is on the way), or itself (its term is starting): ask again on the
                // retry timer, not at once.
                if leader != member && client.search.asked_in[leader] != client.search.round {
                    client.stats.redirects_followed += 1;
                    client.ask_one(leader);
                }
            } else if client.state == State::Connected && member == client.search.target {
                // The member this client was connected to does not lead any more: ask the one it names
                // first, or, naming none, the others from the next one.
                client.state = State::Reconnecting;
                client.search.known_leader = leader.filter(|&l| l != member);
                client.search.cursor = (member + 1) % client.config.members.len();
                client.search.next_ask_ns = 0;
            }
        }
        wire::COOKIE
            if !in_session && client.state == State::Opening && record.correlation_id == client.handshake.nonce =>
        {
            let Ok(cookie) = <[u8; COOKIE_LENGTH]>::try_from(payload) else {
                return;
            };
            // The member asks for proof that this address is the opener's: the open again, with it (the
            // second half of the ask it answers, counted apart).
            client.handshake.cookie = Some(cookie);
            client.stats.cookies += 1;
            client.flush();
            client.search.target = member;
            client.push_ask();
            client.flush();
        }
        wire::OPENED
            if !in_session && client.state == State::Opening && record.correlation_id == client.handshake.nonce =>
        {
            // Only the holder of this open's ephemeral secret unwraps the token; a payload that is not this
            // open's (forged, or another's) fails its proof and is ignored.
            let Some(token) =
                open_token(payload, &client.handshake.ephemeral, record.session_id, client.handshake.nonce)
            else {
                return;
            };
            client.session.token = Some(token);
            client.session.id = record.session_id;
            client.state = State::Connected;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.last_heard_ns = now;
            handler(Event::Connected { session_id: record.session_id, leader: client.config.members[member].0 });
        }
        wire::RECONNECTED if ours && client.state == State::Reconnecting => {
            client.state = State::Connected;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.last_heard_ns = now;
            acknowledge_up_to(client, record.value as u64, handler);
            handler(Event::Connected { session_id: client.session.id, leader: client.config.members[member].0 });
            client.in_flight.resent_from = 0;
            if let Some(first) = client.in_flight.pending.front().map(|p| p.correlation_id) {
                client.resend_from(first, now);
            }
        }
        wire::COMMITTED if ours => {
            if member == client.search.target {
                client.last_heard_ns = now;
            }
            let duplicate = record.code == wire::DUPLICATE;
            committed(client, record.correlation_id, record.value, payload, duplicate, handler);
        }
        wire::COMMITTED_RUN if ours => {
            if member == client.search.target {
                client.last_heard_ns = now;
            }
            for (i, position) in payload.chunks_exact(8).enumerate() {
                let Some(correlation_id) = record.correlation_id.checked_add(i as u64) else {
                    break;
                };
                let position = i64::from_le_bytes(position.try_into().expect("8 bytes"));
                committed(client, correlation_id, position, &[], false, handler);
            }
        }
        wire::HEARTBEAT if ours && member == client.search.target => client.last_heard_ns = now,
        wire::NAK if ours && client.state == State::Connected => {
            let from = record.value as u64;
            if from != client.in_flight.resent_from {
                client.in_flight.resent_from = from;
                client.resend_from(from, now);
            }
        }
        wire::CHALLENGE if ours && matches!(client.state, State::Connected | State::Reconnecting) => {
            // This member does not know this client's address for the session (a new leader, or a new
            // address): the answer proves the client holds the token, from here.
            client.state = State::Reconnecting;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.search.next_ask_ns = now + client.config.connect_retry.as_nanos() as u64;
            client.push(RecordHeader::new(wire::RECONNECT, client.session.id).correlation(record.correlation_id), &[]);
            client.flush();
        }
        wire::REFUSED => on_refused(client, member, ours, record, now, handler),
        wire::MEMBERS if ours => client.learn_members(&wire::decode_members(payload)),
        wire::CLOSED if ours && client.state != State::Idle => {
            client.state = State::Idle;
            // The session's last message applied: those up to it were (their answers were lost), the rest
            // never will be.
            acknowledge_up_to(client, record.value as u64, handler);
            let reason = match record.code {
                wire::TIMED_OUT => ClosedReason::TimedOut,
                wire::EVICTED => ClosedReason::Evicted,
                _ => ClosedReason::Unknown,
            };
            client.closing = Some(Closing { refusal: RefusalCode::UnknownSession, reason, known: true });
        }
        _ => {}
    }
}

fn on_refused(
    client: &mut ClusterClient,
    member: usize,
    ours: bool,
    record: RecordHeader,
    now: u64,
    handler: &mut impl FnMut(Event<'_>),
) {
    let Some(code) = RefusalCode::from_u8(record.code) else {
        return;
    };
    let to_open = !ours && client.state == State::Opening && record.correlation_id == client.handshake.nonce;
    match code {
        RefusalCode::TooManySessions
        | RefusalCode::TooManyFromAddress
        | RefusalCode::TooManyFromNetwork
        | RefusalCode::RateLimited
        | RefusalCode::Suspended
            if to_open =>
        {
            client.state = State::Idle;
            handler(Event::ConnectRefused { reason: code });
        }
        RefusalCode::UnknownSession | RefusalCode::TooManySessions if ours && client.state != State::Idle => {
            // The member does not hold the session (closed long ago, or never opened there): which of the
            // messages in flight were applied before it closed, it cannot tell.
            client.state = State::Idle;
            let reason = ClosedReason::Unknown;
            client.closing = Some(Closing { refusal: RefusalCode::UnknownSession, reason, known: false });
        }
        RefusalCode::Displaced | RefusalCode::Evicted if ours && client.state != State::Idle => {
            client.state = State::Idle;
            let reason = if code == RefusalCode::Evicted { ClosedReason::Evicted } else { ClosedReason::Displaced };
            client.closing = Some(Closing { refusal: code, reason, known: false });
        }
        RefusalCode::Replayed if to_open => {
            // Two members took the same open (or a delayed copy came back): a new open, with a new key.
            client.start_connect();
        }
        RefusalCode::Gap | RefusalCode::WindowExceeded if ours && client.state == State::Connected => {
            let from = if code == RefusalCode::Gap { record.value as u64 } else { record.correlation_id };
            if code == RefusalCode::Gap {
                // The table applied everything before the one it expects: their own answers were lost.
                acknowledge_up_to(client, from.saturating_sub(1), handler);
            }
            if from != client.in_flight.resent_from {
                client.in_flight.resent_from = from;
                client.resend_from(from, now);
            }
        }
        RefusalCode::Suspended if ours && client.state == State::Connected => {
            handler(Event::Suspended { correlation_id: record.correlation_id });
        }
        RefusalCode::NotConnected if ours && client.state == State::Connected && member == client.search.target => {
            // The leader does not know this session (it was elected since): go on with it there.
            client.state = State::Reconnecting;
            client.search.known_leader = Some(member);
            client.search.next_ask_ns = 0;
        }
        _ => {}
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

/// Reports message `correlation_id` committed at `position` with `response`, if it is in flight, and
/// every message before it too: the table applies a session's messages in order, so they were applied.
fn committed(
    client: &mut ClusterClient,
    correlation_id: u64,
    position: i64,
    response: &[u8],
    duplicate: bool,
    handler: &mut impl FnMut(Event<'_>),
) {
    acknowledge_up_to(client, correlation_id.saturating_sub(1), handler);
    if client.in_flight.pending.front().is_some_and(|p| p.correlation_id == correlation_id) {
        let pending = client.in_flight.pending.pop_front().expect("checked");
        handler(Event::Committed { correlation_id, position: Some(position), response, duplicate });
        client.in_flight.free.push(pending.bytes);
    }
}

/// Reports every message in flight up to `correlation_id` as committed (known from a later answer).
fn acknowledge_up_to(client: &mut ClusterClient, correlation_id: u64, handler: &mut impl FnMut(Event<'_>)) {
    while client.in_flight.pending.front().is_some_and(|p| p.correlation_id <= correlation_id) {
        let pending = client.in_flight.pending.pop_front().expect("checked");
        handler(Event::Committed {
            correlation_id: pending.correlation_id,
            position: None,
            response: &[],
            duplicate: true,
        });
        client.in_flight.free.push(pending.bytes);
    }
}

#[cfg(test)]
mod default_docs {
    #[test]
    fn every_documented_default_is_the_default() {
        let config = super::ClientConfig::new(Vec::new());
        crate::setting::documented_defaults::check(include_str!("mod.rs"), "ClientConfig", &config, &["members"]);
    }
}
