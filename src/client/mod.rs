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
//! `sendmmsg` (or sooner, when [`SEND_BATCH`](outbox::SEND_BATCH) datagrams are full). At most
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

pub mod async_client;
mod connect;
pub mod credentials;
mod outbox;
mod receive;
mod send;
pub mod session;
mod timers;
mod wait;
pub mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::SockAddr;

use crate::agent::clock::NanoClock;
use crate::media::auth::AuthKey;
use crate::media::transport::{RecvBatch, SharedNetwork, Transport};

use self::credentials::{ClientKey, Ephemeral, ReplayWindow, COOKIE_LENGTH};
use self::outbox::Outbox;
use self::wire::RefusalCode;

quorumcast_driver::section! {
    /// How a client reaches a cluster, and its timeouts.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ClientConfig in pub(crate) mod client_settings, built as ("ClientConfig::", ""),
        checked with (), defaults in fn defaults {
        /// Each member's id and client endpoint ([`crate::node::Member::client`]) (required:
        /// [`ClientConfig::new`] takes them).
        pub members: Vec<(i32, SocketAddr)> = Vec::new(), shown "[]";
        /// Bytes of a datagram, at most (the cluster's MTU).
        pub mtu: usize = 1408, shown "1408", unit "bytes";
        /// Messages in flight (offered, not yet reported), at most; at most the cluster's `clients.window`.
        pub window: usize = 1024, shown "1024", unit "messages";
        /// A keep-alive goes to the leader when nothing else has for this long.
        pub keepalive_interval: Duration = Duration::from_millis(100), shown "100ms";
        /// Nothing heard from the leader for this long: the client looks for the leader again.
        pub leader_timeout: Duration = Duration::from_secs(1), shown "1s";
        /// The oldest message in flight unanswered for this long is resent, with those after it.
        pub resend_timeout: Duration = Duration::from_millis(200), shown "200ms";
        /// While connecting, an open (or reconnect) is sent again this often, to the next members when the
        /// last ones did not answer. An answer that names the leader is followed at once, without this wait.
        pub connect_retry: Duration = Duration::from_millis(20), shown "20ms";
        /// Members one open (or reconnect) goes to at once: the last known leader first, then the others in
        /// list order (capped at the member count). The first that answers as the leader opens the session
        /// (only a leader appends an open; the others answer with a redirect), so with more than one a dead
        /// member costs nothing. 1 asks one member at a time, each that does not answer costing a
        /// [`connect_retry`](Self::connect_retry).
        pub connect_fanout: usize = 3, shown "3", unit "members";
        /// The local address to bind (port 0: any).
        pub bind: Option<SocketAddr> = None, shown "None";
        /// How long an offered message may wait for more to share its datagram before a poll sends it
        /// (Kafka's `linger.ms`). 0, the default, sends at every poll: the least latency, and at moderate
        /// rates many small datagrams, each a receive the leader pays for; a few microseconds fill them.
        pub linger: Duration = Duration::ZERO, shown "0ns";
        /// The member (by id) believed to lead, asked first by the first open: a new client seeded with
        /// another's [`ClusterClient::known_leader`] goes straight to the leader, whatever the list's order
        /// and whichever members are down. An id the list does not name is ignored.
        pub leader_hint: Option<i32> = None, shown "None";
        /// The client key, for a cluster that requires one (`[clients] auth_key` or `[[clients.keys]]`):
        /// every datagram is tagged with it (or with the session's token, which the cluster gives only to a
        /// holder of it). `None`: for a cluster without client keys.
        pub key: Option<ClientKey> = None, shown "None";
    }
}

impl ClientConfig {
    /// A client of `members`, with the default limits and timeouts.
    pub fn new(members: Vec<(i32, SocketAddr)>) -> Self {
        Self { members, ..Self::defaults() }
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
    /// The service's response was longer than `[service] max_response_length` and was not sent.
    pub response_too_long: bool,
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
    /// The service refused the session at its open (its `StateMachine::on_session_open`), with the
    /// application's code.
    RefusedByService {
        /// The application's reason.
        code: u32,
    },
    /// The socket failed.
    Io(io::Error),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimedOut => f.write_str("no leader opened a session in time"),
            Self::Refused(code) => write!(f, "the leader refused the session: {code}"),
            Self::RefusedByService { code } => write!(f, "the service refused the session (its code {code})"),
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
    /// The service's response to message `correlation_id` was longer than `[service]
    /// max_response_length` and was not sent (the message is committed: [`Event::Committed`] follows).
    ResponseTooLong {
        /// The message.
        correlation_id: u64,
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
    /// The service pushed a message to this session (its `Cluster::push`): each push is reported once, in
    /// the order the service made them, across losses and leader changes.
    Pushed {
        /// Its number in the session's stream of pushes (from 1).
        number: u64,
        /// The service's bytes.
        payload: &'a [u8],
    },
    /// The leader refused a new session.
    ConnectRefused {
        /// Why.
        reason: RefusalCode,
    },
    /// The service refused a new session at its open (its `StateMachine::on_session_open`).
    RefusedByService {
        /// The application's reason.
        code: u32,
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
    /// The service closed it (`Cluster::close_session`); the messages it applied before are reported
    /// committed, the rest never will be.
    ClosedByService,
    /// This client left `[service] max_push_backlog` bytes of pushes unacknowledged (it polled too
    /// seldom to keep up with them).
    Backlog,
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
    /// Pushes received again (a resend after a loss or a change of leader) and dropped: each push is
    /// handed out once.
    pub pushes_duplicate: u64,
    /// Requests to the leader to send the pushes after a gap again.
    pub push_resends_asked: u64,
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
    /// The session's pushes handed to the application, and what the leader was told of them.
    pushes: PushesSeen,
    /// The record being put together from `FRAGMENT` records, and its whole length.
    assembly: (Vec<u8>, usize),
}

/// The longest record a client puts together from pieces: past any `[service] max_response_length`.
const MAX_ASSEMBLED: usize = 32 << 20;

/// The pushes of the session ([`Event::Pushed`]) as this client has seen them.
#[derive(Clone, Copy, Debug, Default)]
struct PushesSeen {
    /// The number of the last push handed out (each once, in order).
    received: u64,
    /// The last number the leader was told the client has.
    acknowledged: u64,
    /// When the client last asked for a resend, and from which number (0: never).
    resend_asked: (u64, u64),
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

    /// Whether its socket can be waited on ([`wait`](Self::wait) blocks): a UDP socket, not a simulated
    /// network's endpoint.
    pub(crate) fn has_socket(&self) -> bool {
        self.link.socket.readiness_fd().is_some()
    }

    /// The longest message [`offer`](Self::offer) takes.
    pub fn max_message_length(&self) -> usize {
        self.link.out.max_payload()
    }
}
