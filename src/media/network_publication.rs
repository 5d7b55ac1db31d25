//! A network publication: one log buffer sent by the Sender to every destination over UDP.
//!
//! Per duty cycle the publication:
//! 1. sends a SETUP to each destination whose receiver has not answered (every `setup_interval`, or at
//!    once when a receiver asks for one);
//! 2. scans the log from the sender position for whole committed frames, up to
//!    `min(flow-control window, MTU)` per datagram, and sends each datagram to every live destination in
//!    the channel's [`SendMode`];
//! 3. if it sent no data, sends a heartbeat after `heartbeat_interval` of silence;
//! 4. ends lingering retransmits.
//!
//! Control frames (status messages, NAKs) are read by [`NetworkPublication::poll_control`], which the
//! Sender calls when it sent nothing or every few cycles.
//!
//! Invariants:
//! - The sender position only moves forward, over whole frames, and never past the flow-control limit.
//! - Data goes only to live receivers (ones that answered within `receiver_timeout`); a datagram that
//!   a live receiver's socket refused is counted as a short send and recovered by that receiver's NAK.
//! - The sender registers as a consumer of the log, so the appender stays within `term_length / 2` of
//!   the sender position, and every range a NAK can name (`>= sender position - term_length / 2`) is
//!   intact in the log.

use std::fmt;
use std::net::SocketAddr;

use socket2::SockAddr;

use crate::agent::clock::nanos;
use crate::event_log::RateLimited;
use crate::frame::{
    self, DataHeader, Frame, SetupFrame, DATA_HEADER_LENGTH, SETUP_WITH_MEMBERSHIP_LENGTH, UNFRAGMENTED,
};
use crate::media::auth::TAG_LENGTH;
use crate::media::channel::{ChannelConfig, ChannelConfigError};
use crate::media::flow_control::{FlowControl, StatusChange};
use crate::media::retransmit::{NakOutcome, RetransmitHandler};
use crate::media::transport::{
    MmsgScratch, Network, RecvBatch, SendMode, SendOutcome, Transport, Udp, UdpEndpoint, MAX_BATCH,
};
use crate::setting::{Setting, SettingError};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::descriptor::{partition_index, position, term_count, term_id, term_offset};
use crate::shm::log_buffer::{scan, ConsumerPosition, LogBuffer};
use crate::shm::stats::{kinds, CounterKind};

/// The counters of one publication's send path.
#[derive(Debug, Clone)]
pub struct SenderCounters {
    /// `sendmsg`/`sendmmsg` calls that carried first-time data.
    pub data_syscalls: Counter,
    /// Every other syscall of the send path: setups, heartbeats, retransmits, control polls, consensus frames.
    pub control_syscalls: Counter,
    /// The control polls (also in `control_syscalls`) made on duty cycles that sent nothing: they spend the
    /// Sender's idle time, not its data budget, so the model's C leaves them out.
    pub idle_polls: Counter,
    /// First-time data datagrams put on the wire (counting each destination).
    pub datagrams: Counter,
    /// First-time data bytes put on the wire (counting each destination).
    pub bytes: Counter,
    /// Retransmitted datagrams.
    pub retransmits: Counter,
    /// Retransmitted bytes.
    pub retransmitted_bytes: Counter,
    /// NAKs received.
    pub naks_received: Counter,
    /// Status messages received.
    pub status_messages: Counter,
    /// Times data was waiting but the flow-control window was closed.
    pub flow_control_stalls: Counter,
    /// Duty cycles that sent no data because the flow-control window was closed with data waiting.
    pub window_closed_cycles: Counter,
    /// Duty cycles that sent no data with the window open: the Sender had caught up with the appender
    /// (or the next frame was still being written).
    pub caught_up_cycles: Counter,
    /// Sends the kernel did not take (socket full, peer refused), per destination.
    pub short_sends: Counter,
    /// Sends that failed with an unexpected error.
    pub send_errors: Counter,
    /// GSO sends the kernel refused at run time, after which the publication sends `classic`.
    pub gso_fallbacks: Counter,
    /// Control receives (`recvmmsg`) that failed with an unexpected error.
    pub recv_errors: Counter,
    /// Heartbeats sent.
    pub heartbeats: Counter,
    /// Setup frames sent.
    pub setups: Counter,
    /// Receivers dropped from flow control for silence.
    pub receivers_timed_out: Counter,
    /// Control datagrams that were malformed, foreign or for another stream.
    pub invalid_packets: Counter,
    /// Of `invalid_packets`, control datagrams from a source that is not a destination (`mmsg` mode; the
    /// connected sockets of the other modes never see them).
    pub foreign: Counter,
    /// Of `invalid_packets`, control datagrams whose authentication tag was missing or wrong.
    pub forged: Counter,
    /// Status messages refused for carrying another member list's tag.
    pub membership_refused: Counter,
    /// NAKs not acted on because the receiver's retransmit budget was spent.
    pub retransmits_throttled: Counter,
    /// NAKs for positions the log no longer retains.
    pub naks_behind_retained: Counter,
    /// BEHIND_RETAINED frames sent to receivers the log has left behind.
    pub behind_retained_sent: Counter,
    /// The sender position (`snd-pos`).
    pub position: Counter,
    /// The flow-control limit (`snd-lmt`).
    pub limit: Counter,
}

impl SenderCounters {
    /// Allocates every counter with `allocate(kind)`, its kind from the [catalogue](crate::shm::stats::kinds).
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            data_syscalls: allocate(&kinds::sender::data_syscalls),
            control_syscalls: allocate(&kinds::sender::control_syscalls),
            datagrams: allocate(&kinds::sender::data_datagrams),
            bytes: allocate(&kinds::sender::data_bytes),
            retransmits: allocate(&kinds::sender::retransmits),
            retransmitted_bytes: allocate(&kinds::sender::retransmitted_bytes),
            naks_received: allocate(&kinds::sender::naks_received),
            status_messages: allocate(&kinds::sender::status_messages_received),
            flow_control_stalls: allocate(&kinds::sender::flow_control_stalls),
            short_sends: allocate(&kinds::sender::short_sends),
            send_errors: allocate(&kinds::sender::send_errors),
            recv_errors: allocate(&kinds::sender::recv_errors),
            gso_fallbacks: allocate(&kinds::sender::gso_fallbacks),
            heartbeats: allocate(&kinds::sender::heartbeats),
            setups: allocate(&kinds::sender::setups),
            receivers_timed_out: allocate(&kinds::sender::receivers_timed_out),
            invalid_packets: allocate(&kinds::sender::invalid_packets),
            foreign: allocate(&kinds::sender::foreign_control_dropped),
            membership_refused: allocate(&kinds::sender::membership_refused),
            forged: allocate(&kinds::sender::forged_control_dropped),
            retransmits_throttled: allocate(&kinds::sender::retransmits_throttled),
            naks_behind_retained: allocate(&kinds::sender::naks_behind_retained),
            behind_retained_sent: allocate(&kinds::sender::behind_retained_sent),
            position: allocate(&kinds::sender::position),
            limit: allocate(&kinds::sender::limit),
            idle_polls: allocate(&kinds::sender::idle_control_polls),
            window_closed_cycles: allocate(&kinds::sender::window_closed_cycles),
            caught_up_cycles: allocate(&kinds::sender::caught_up_cycles),
        }
    }

    /// Counters in private memory, for tests.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}

/// Why a publication could not start or stopped.
#[derive(Debug)]
pub enum PublicationError {
    /// The configuration breaks a rule.
    Config(ChannelConfigError),
    /// A socket could not be made.
    Io(std::io::Error),
    /// A datagram was larger than the path to a destination carries unfragmented (`EMSGSIZE`).
    PathMtu {
        /// The destination.
        destination: SocketAddr,
        /// The configured MTU.
        mtu: usize,
        /// The path MTU the kernel reported (IP packet size), if it could.
        path_mtu: Option<usize>,
    },
    /// The log has no free consumer slot for the sender.
    Log(String),
}

impl fmt::Display for PublicationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "socket error: {e}"),
            Self::PathMtu { destination, mtu, path_mtu } => {
                let path = path_mtu.map_or("unknown".to_string(), |m| m.to_string());
                write!(
                    f,
                    "channel to {destination} stopped: a datagram of the configured MTU {mtu} does not fit the path MTU {path}; \
                     use MTU 1408, or enable jumbo frames on every hop"
                )
            }
            Self::Log(e) => write!(f, "log: {e}"),
        }
    }
}

impl std::error::Error for PublicationError {}

impl From<std::io::Error> for PublicationError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<ChannelConfigError> for PublicationError {
    fn from(e: ChannelConfigError) -> Self {
        Self::Config(e)
    }
}

/// How the publication's sockets are arranged for its send mode.
enum Sockets<T> {
    /// `classic` and `gso`: one socket connected to each destination (cheaper sends, readable path MTU).
    PerDestination(Vec<T>),
    /// `mmsg`: one unconnected socket, the destination named in each message.
    Shared { endpoint: T, addrs: Vec<SockAddr> },
}

impl<T: Transport> Sockets<T> {
    #[inline]
    fn send(&mut self, destination: usize, bytes: &[u8]) -> SendOutcome {
        match self {
            Sockets::PerDestination(endpoints) => endpoints[destination].send(bytes, None),
            Sockets::Shared { endpoint, addrs } => endpoint.send(bytes, Some(&addrs[destination])),
        }
    }

    /// As [`send`](Self::send), with the authentication tag of `bytes` already computed (or `None`).
    #[inline]
    fn send_with_tag(&mut self, destination: usize, bytes: &[u8], tag: Option<&[u8; TAG_LENGTH]>) -> SendOutcome {
        match self {
            Sockets::PerDestination(endpoints) => endpoints[destination].send_with_tag(bytes, tag, None),
            Sockets::Shared { endpoint, addrs } => endpoint.send_with_tag(bytes, tag, Some(&addrs[destination])),
        }
    }

    fn endpoints(&self) -> &[T] {
        match self {
            Sockets::PerDestination(endpoints) => endpoints,
            Sockets::Shared { endpoint, .. } => std::slice::from_ref(endpoint),
        }
    }

    fn endpoints_mut(&mut self) -> &mut [T] {
        match self {
            Sockets::PerDestination(endpoints) => endpoints,
            Sockets::Shared { endpoint, .. } => std::slice::from_mut(endpoint),
        }
    }
}

/// One datagram found by a scan: `length` bytes at `offset` of term `partition`, after which the sender
/// position moves by `advance` (the length plus any padding it ends with).
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    partition: usize,
    offset: usize,
    length: usize,
    advance: usize,
}

/// The first retry of an unanswered SETUP (see `Destination::setup_retry_ns`).
const FIRST_SETUP_RETRY_NS: u64 = 1_000_000;

/// Per-destination state besides flow control.
struct Destination {
    addr: SocketAddr,
    next_setup_ns: u64,
    /// How long after this SETUP the next goes while the receiver has not answered: from
    /// [`FIRST_SETUP_RETRY_NS`], doubling up to `setup_interval`, so that a receiver that binds just after
    /// the first SETUP (a follower of a leader elected a moment ago) joins within milliseconds, and one
    /// that is down costs a SETUP per `setup_interval`.
    setup_retry_ns: u64,
    /// When this receiver may next be told it is behind the retained log.
    next_behind_ns: u64,
    setup_requested: bool,
}

/// The layer above a leader's publication: handed, on the Sender's thread, each control frame that is not
/// for the send path itself (acknowledgements and commit frames of a replicated log), with the index of
/// the destination it came from. The media layer does not interpret them.
pub trait ControlHandler: Send {
    /// A control frame from destination `destination` (its index in the channel's `destinations`).
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>);
}

impl<F: FnMut(usize, &Frame<'_>) + Send> ControlHandler for F {
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>) {
        self(destination, frame)
    }
}

/// One log buffer, replicated to every destination, over transport `T` (see [`crate::media::transport`]).
pub struct NetworkPublication<T: Transport = UdpEndpoint> {
    log: LogBuffer,
    config: ChannelConfig,
    mode: SendMode,
    sockets: Sockets<T>,
    destinations: Vec<Destination>,
    flow_control: FlowControl,
    retransmit: RetransmitHandler,
    consumer: ConsumerPosition,
    sender_position: i64,
    /// Everything before this position has been prefetched (see [`Self::prefetch_batch`]).
    prefetched: i64,
    last_data_or_heartbeat_ns: u64,
    stalled: bool,
    live_addrs: Vec<SockAddr>,
    control_handler: Option<Box<dyn ControlHandler>>,
    scratch: MmsgScratch,
    runs: [Run; MAX_BATCH],
    failure: Option<PublicationError>,
    counters: SenderCounters,
    warnings: Vec<String>,
    logs: PublicationLogs,
}

/// The rate-limited log lines of a publication.
#[derive(Default)]
struct PublicationLogs {
    membership: RateLimited,
    behind: RateLimited,
}

impl<T: Transport> fmt::Debug for NetworkPublication<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkPublication")
            .field("mode", &self.mode)
            .field("sender_position", &self.sender_position)
            .field("live", &self.flow_control.live_count())
            .finish()
    }
}

impl NetworkPublication {
    /// Makes the UDP sockets for `config` and the publication over them (see [`open`](Self::open)). A
    /// channel with faults configured is refused: open it on a
    /// [`Faulty`](crate::media::transport::faulty::Faulty) network.
    pub fn new(log: LogBuffer, config: ChannelConfig, counters: SenderCounters) -> Result<Self, PublicationError> {
        if config.has_faults() {
            return Err(PublicationError::Config(ChannelConfigError(SettingError::new(
                Setting::SendFaults,
                "faults are set: open the publication with NetworkPublication::open on \
                 transport::faulty::Faulty::new(Udp, send_faults, receive_faults)",
            ))));
        }
        Self::open(log, config, counters, &mut Udp)
    }
}

impl<T: Transport> NetworkPublication<T> {
    /// Makes the endpoints for `config` on `network` (probing `mmsg` and `gso` support and falling back to
    /// `classic` with a warning), checks the path MTU to each destination, and registers the sender as a
    /// consumer of `log` at its producer position... or at 0 for a fresh log.
    pub fn open<N: Network<Endpoint = T>>(
        log: LogBuffer,
        config: ChannelConfig,
        counters: SenderCounters,
        network: &mut N,
    ) -> Result<Self, PublicationError> {
        config.validate()?;
        if log.config().mtu != config.mtu || log.term_length() != config.term_length {
            return Err(ChannelConfigError(SettingError::new(
                Setting::Mtu,
                format!(
                    "the log was made with MTU {} and term length {}, the channel asks for MTU {} and term length {}",
                    log.config().mtu,
                    log.term_length(),
                    config.mtu,
                    config.term_length
                ),
            ))
            .into());
        }
        let mut warnings = Vec::new();
        let mut mode = resolve_mode(config.send_mode, network, &mut warnings);
        if mode == SendMode::Gso && config.auth.is_some() {
            // The kernel cuts a GSO run into datagrams itself and cannot tag each one.
            warnings.push("send mode gso cannot tag each datagram for authentication: using mmsg".to_string());
            mode = if network.supports(SendMode::Mmsg) { SendMode::Mmsg } else { SendMode::Classic };
        }
        let sockets = open_sockets(&config, mode, network, &mut warnings)?;
        let start = log.producer_position();
        let consumer = log.register_consumer(start).map_err(|e| PublicationError::Log(e.to_string()))?;
        let destinations = config
            .destinations
            .iter()
            .map(|&addr| Destination {
                addr,
                next_setup_ns: 0,
                setup_retry_ns: FIRST_SETUP_RETRY_NS,
                next_behind_ns: 0,
                setup_requested: true,
            })
            .collect();
        let receivers = config.destinations.len();
        // A responsive receiver speaks at least every status interval; three missed ones mean stopped.
        let flow_control = FlowControl::new(receivers, config.flow_control, nanos(config.receiver_timeout))
            .with_lag_bound((config.term_length / 2) as i64, 3 * nanos(config.status_interval));
        let retransmit = RetransmitHandler::new(
            receivers,
            nanos(config.retransmit_linger),
            config.max_retransmit_rate,
            config.receiver_window,
        );
        let live_addrs = Vec::with_capacity(config.destinations.len());
        counters.position.set(start);
        Ok(Self {
            log,
            mode,
            sockets,
            destinations,
            flow_control,
            retransmit,
            consumer,
            sender_position: start,
            last_data_or_heartbeat_ns: 0,
            prefetched: 0,
            stalled: false,
            live_addrs,
            control_handler: None,
            scratch: MmsgScratch::default(),
            runs: [Run::default(); MAX_BATCH],
            failure: None,
            counters,
            warnings,
            logs: PublicationLogs::default(),
            config,
        })
    }

    /// Warnings from start-up (a send mode the kernel refused, clamped socket buffers).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The send mode in use (after probing).
    pub fn send_mode(&self) -> SendMode {
        self.mode
    }

    /// The log this publication sends.
    pub fn log(&self) -> &LogBuffer {
        &self.log
    }

    /// The sender position: everything before it has been sent to every live receiver.
    pub fn sender_position(&self) -> i64 {
        self.sender_position
    }

    /// The counters.
    pub fn counters(&self) -> &SenderCounters {
        &self.counters
    }

    /// Flow control's view of the receivers.
    pub fn flow_control(&self) -> &FlowControl {
        &self.flow_control
    }

    /// The error that stopped the channel, if one did.
    pub fn failure(&self) -> Option<&PublicationError> {
        self.failure.as_ref()
    }

    /// Local addresses of the publication's sockets (receivers answer to these).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets.endpoints().iter().map(Transport::local_addr).collect()
    }

    /// Sets the handler of control frames other than status messages and NAKs (consensus frames).
    pub fn set_control_handler(&mut self, handler: Box<dyn ControlHandler>) {
        self.control_handler = Some(handler);
    }

    /// Sends `frame` (a control frame, e.g. a commit position) to every live destination, counted as
    /// control syscalls. Returns how many destinations took it.
    pub fn send_control(&mut self, frame: &[u8]) -> usize {
        let mut delivered = 0;
        for d in 0..self.destinations.len() {
            if self.flow_control.is_live(d) && self.send_counted(d, frame) {
                delivered += 1;
            }
        }
        delivered
    }

    /// One duty cycle of the send path; returns the work done (bytes and frames sent).
    pub fn send(&mut self, now_ns: u64) -> usize {
        if self.failure.is_some() {
            return 0;
        }
        let mut work = self.setup_check(now_ns);
        let sent = self.send_data(now_ns);
        work += sent;
        if sent == 0 {
            work += self.heartbeat_check(now_ns);
            self.flush_held();
        }
        self.retransmit.expire(now_ns);
        work
    }

    /// Drops receivers that went silent; called on idle cycles.
    pub fn on_idle(&mut self, now_ns: u64) {
        let dropped = self.flow_control.on_idle(now_ns);
        if dropped > 0 {
            self.counters.receivers_timed_out.add(dropped as i64);
            for (i, d) in self.destinations.iter_mut().enumerate() {
                if !self.flow_control.is_live(i) {
                    d.setup_requested = true;
                    d.setup_retry_ns = FIRST_SETUP_RETRY_NS;
                }
            }
        }
    }

    fn setup_check(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        for d in 0..self.destinations.len() {
            let dest = &self.destinations[d];
            let due = !self.flow_control.is_live(d) && now_ns >= dest.next_setup_ns;
            if due || dest.setup_requested {
                let setup = self.setup_frame();
                let mut bytes = [0u8; SETUP_WITH_MEMBERSHIP_LENGTH];
                let length = match self.config.membership {
                    Some(tag) => setup.encode_with_membership(&mut bytes, tag),
                    None => setup.encode(&mut bytes),
                };
                let length = length.expect("a setup frame fits its own length");
                self.send_counted(d, &bytes[..length]);
                self.counters.setups.increment();
                let dest = &mut self.destinations[d];
                dest.setup_requested = false;
                let interval = nanos(self.config.setup_interval);
                dest.next_setup_ns = now_ns + dest.setup_retry_ns.min(interval);
                dest.setup_retry_ns = (dest.setup_retry_ns * 2).min(interval);
                work += 1;
            }
        }
        work
    }

    fn setup_frame(&self) -> SetupFrame {
        let c = self.log.config();
        let bits = self.log.position_bits_to_shift();
        SetupFrame {
            term_offset: term_offset(self.sender_position, c.term_length) as i32,
            session_id: c.session_id,
            stream_id: c.stream_id,
            initial_term_id: c.initial_term_id,
            active_term_id: term_id(self.sender_position, c.initial_term_id, bits),
            term_length: c.term_length as i32,
            mtu: c.mtu as i32,
            ..SetupFrame::default()
        }
    }

    fn heartbeat_check(&mut self, now_ns: u64) -> usize {
        if self.flow_control.live_count() == 0
            || now_ns < self.last_data_or_heartbeat_ns + nanos(self.config.heartbeat_interval)
        {
            return 0;
        }
        let c = self.log.config();
        let bits = self.log.position_bits_to_shift();
        let header = DataHeader::new(
            c.session_id,
            c.stream_id,
            term_id(self.sender_position, c.initial_term_id, bits),
            term_offset(self.sender_position, c.term_length) as i32,
            UNFRAGMENTED,
        );
        let mut bytes = [0u8; DATA_HEADER_LENGTH];
        frame::encode_heartbeat(&mut bytes, &header).expect("a heartbeat fits 32 bytes");
        self.send_control(&bytes);
        self.counters.heartbeats.increment();
        self.last_data_or_heartbeat_ns = now_ns;
        1
    }

    /// The window the sender may fill now: flow control's limit, less the sender position.
    fn window(&self, now_ns: u64) -> i64 {
        match self.flow_control.limit(self.oldest_retained(), now_ns) {
            Some(limit) => limit - self.sender_position,
            None => 0,
        }
    }

    fn send_data(&mut self, now_ns: u64) -> usize {
        let window = self.window(now_ns);
        self.counters.limit.set(self.sender_position + window.max(0));
        if window <= 0 {
            self.note_window_closed();
            return 0;
        }
        let batch = self.collect_runs(window as usize);
        if batch == 0 {
            // A committed frame is at most one MTU, so a window of a whole MTU takes it: found nothing then
            // means caught up (or the next frame is still being written); a smaller window may not fit it.
            if (window as usize) < self.config.mtu && self.log.producer_position() > self.sender_position {
                self.note_window_closed();
            } else {
                self.counters.caught_up_cycles.increment();
            }
            return 0;
        }
        let (delivered, advance) = match self.mode {
            SendMode::Classic => self.send_runs_classic(batch),
            SendMode::Mmsg => self.send_runs_mmsg(batch),
            SendMode::Gso => self.send_runs_gso(batch),
        };
        if delivered == 0 {
            return 0; // every live socket was full: try the same bytes next cycle
        }
        self.sender_position += advance as i64;
        self.consumer.set(self.sender_position);
        self.counters.position.set(self.sender_position);
        self.last_data_or_heartbeat_ns = now_ns;
        self.stalled = false;
        advance
    }

    /// Counts a cycle the flow-control window kept from sending data that waits (none waiting: nothing to
    /// count), and the first of a run of such cycles as a stall.
    fn note_window_closed(&mut self) {
        if self.log.producer_position() <= self.sender_position {
            return;
        }
        self.counters.window_closed_cycles.increment();
        if !self.stalled && self.flow_control.live_count() > 0 {
            self.stalled = true;
            self.counters.flow_control_stalls.increment();
        }
    }

    /// Scans up to `batch_limit` datagrams of at most one MTU each, within `window` bytes, into `runs`;
    /// returns how many it found.
    fn collect_runs(&mut self, window: usize) -> usize {
        let mtu = self.config.mtu;
        let term_length = self.log.term_length();
        let bits = self.log.position_bits_to_shift();
        let mut position = self.sender_position;
        let mut remaining = window;
        self.prefetch_batch(window);
        let mut count = 0;
        while count < self.config.batch_limit && remaining > 0 {
            let found = scan(&self.log, position, remaining.min(mtu));
            if found.available == 0 {
                break;
            }
            self.runs[count] = Run {
                partition: partition_index(position, bits),
                offset: term_offset(position, term_length),
                length: found.available,
                advance: found.advance(),
            };
            remaining = remaining.saturating_sub(found.advance());
            position += found.advance() as i64;
            count += 1;
        }
        count
    }

    /// Prefetches what the next batch can hold from the sender position, within `window`, the active term
    /// and the producer position (never lines the appender is still writing), skipping the lines an
    /// earlier cycle already prefetched. The log was written by another core: without this, the scan
    /// fetches it one dependent frame header at a time; prefetching a line twice costs a fill-buffer slot
    /// for nothing (it was 5% of a saturated Sender's time when every cycle prefetched the whole batch).
    fn prefetch_batch(&mut self, window: usize) {
        let term_length = self.log.term_length();
        let offset = term_offset(self.sender_position, term_length);
        let produced = (self.log.producer_position() - self.sender_position).max(0) as usize;
        let length = (self.config.batch_limit * self.config.mtu).min(window).min(produced).min(term_length - offset);
        let end = self.sender_position + length as i64;
        let start = self.prefetched.max(self.sender_position);
        if start < end {
            let partition = partition_index(self.sender_position, self.log.position_bits_to_shift());
            let skip = (start - self.sender_position) as usize;
            self.log.term(partition).prefetch_range(offset + skip, length - skip);
            self.prefetched = end;
        }
    }

    /// `classic`: one `sendmsg` per datagram per live destination. Returns (datagrams that at least one
    /// destination took, bytes of position to advance over them).
    fn send_runs_classic(&mut self, count: usize) -> (usize, usize) {
        let mut delivered = 0;
        let mut advance = 0;
        for run in &self.runs[..count] {
            let bytes = self.log.term(run.partition).bytes(run.offset, run.length);
            // With a key, the datagram is hashed once for every destination.
            let tag = self.config.auth.map(|key| key.tag(bytes));
            let mut taken = false;
            for (d, dest) in self.destinations.iter().enumerate() {
                if self.flow_control.is_live(d) {
                    let outcome = transmit(&mut self.sockets, d, bytes, tag.as_ref(), &self.counters.data_syscalls);
                    taken |=
                        account(outcome, bytes.len(), 1, dest.addr, &self.config, &self.counters, &mut self.failure);
                }
            }
            if !taken {
                break;
            }
            delivered += 1;
            advance += run.advance;
        }
        (delivered, advance)
    }

    /// `mmsg`: one `sendmmsg` carries every datagram of the batch to every live destination.
    fn send_runs_mmsg(&mut self, count: usize) -> (usize, usize) {
        let Sockets::Shared { endpoint, addrs } = &mut self.sockets else {
            unreachable!("mmsg mode always has a shared socket");
        };
        self.live_addrs.clear();
        for (d, addr) in addrs.iter().enumerate() {
            if self.flow_control.is_live(d) {
                self.live_addrs.push(addr.clone());
            }
        }
        let mut datagrams: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (slot, run) in datagrams.iter_mut().zip(&self.runs[..count]) {
            *slot = self.log.term(run.partition).bytes(run.offset, run.length);
        }
        let (outcome, calls) = endpoint.send_mmsg(&datagrams[..count], &self.live_addrs, &mut self.scratch);
        self.counters.data_syscalls.add(calls as i64);
        let fan = self.live_addrs.len();
        let messages = match outcome {
            SendOutcome::Sent(n) => n,
            other => {
                // A failed sendmmsg sent nothing: its first message, to the first live destination, failed.
                let first_live = (0..self.destinations.len()).find(|&d| self.flow_control.is_live(d)).unwrap_or(0);
                let addr = self.destinations[first_live].addr;
                account(other, datagrams[0].len(), 0, addr, &self.config, &self.counters, &mut self.failure);
                0
            }
        };
        // A datagram counts as sent once any destination took it; the others recover it by NAK.
        let delivered = messages.div_ceil(fan).min(count);
        self.counters.short_sends.add((count * fan - messages.min(count * fan)) as i64);
        self.counters.datagrams.add(messages as i64);
        let mut advance = 0;
        for (k, run) in self.runs[..delivered].iter().enumerate() {
            let copies = messages.saturating_sub(k * fan).min(fan);
            self.counters.bytes.add((run.length * copies) as i64);
            advance += run.advance;
        }
        (delivered, advance)
    }

    /// `gso`: the longest prefix of the batch whose datagrams are contiguous and of one length (the last
    /// may be shorter) goes to each live destination in one `sendmsg` with `UDP_SEGMENT`.
    ///
    /// The kernel refuses (`EMSGSIZE`) a GSO send whose bytes exceed one UDP datagram's payload, so a run
    /// stops before 64 KiB (7 full segments at MTU 8192).
    fn send_runs_gso(&mut self, count: usize) -> (usize, usize) {
        let first = self.runs[0];
        let segment = first.length;
        let mut segments = 1;
        let mut end = first.offset + first.advance;
        while segments < count {
            let next = self.runs[segments];
            let contiguous = next.partition == first.partition && next.offset == end && first.advance == first.length;
            // One GSO send is one UDP datagram to the kernel: its whole payload must fit 64 KiB.
            let fits = end + next.length - first.offset <= frame::MAX_UDP_PAYLOAD_LENGTH;
            if !contiguous || !fits || next.length > segment {
                break;
            }
            segments += 1;
            end = next.offset + next.advance;
            if next.length < segment || next.advance != next.length {
                break; // a shorter segment, or padding, can only be the last
            }
        }
        let length = self.runs[segments - 1].offset + self.runs[segments - 1].length - first.offset;
        let bytes = self.log.term(first.partition).bytes(first.offset, length);
        let Sockets::PerDestination(endpoints) = &mut self.sockets else {
            unreachable!("gso mode always has per-destination sockets");
        };
        let mut taken = false;
        let mut refused = None;
        for (d, dest) in self.destinations.iter().enumerate() {
            if self.flow_control.is_live(d) {
                self.counters.data_syscalls.increment();
                let outcome = endpoints[d].send_gso(bytes, segment);
                if let SendOutcome::Failed(e) = &outcome {
                    if is_gso_refusal(e) {
                        refused = Some((dest.addr, e.to_string()));
                    }
                }
                taken |=
                    account(outcome, segment, segments, dest.addr, &self.config, &self.counters, &mut self.failure);
            }
        }
        if let Some((addr, error)) = refused {
            // The probe at start passed, but this path refuses segmentation (a device without checksum
            // offload, a tunnel): fall back to classic once, for good, and say so.
            self.mode = SendMode::Classic;
            self.counters.gso_fallbacks.increment();
            log::warn!("GSO send to {addr} refused by the kernel ({error}): falling back to classic sends");
        }
        if !taken {
            return (0, 0);
        }
        (segments, self.runs[..segments].iter().map(|r| r.advance).sum())
    }

    /// Sends a control frame to destination `d`, counted as a control syscall; true when it went.
    fn send_counted(&mut self, d: usize, bytes: &[u8]) -> bool {
        let outcome = transmit(&mut self.sockets, d, bytes, None, &self.counters.control_syscalls);
        match outcome {
            SendOutcome::Sent(_) => true,
            SendOutcome::WouldBlock => {
                self.counters.short_sends.increment();
                false
            }
            other => {
                let addr = self.destinations[d].addr;
                account(other, bytes.len(), 0, addr, &self.config, &self.counters, &mut self.failure);
                false
            }
        }
    }

    /// Lets the transports send what they held back (on a cycle that sent no data; see
    /// [`Transport::flush`]).
    fn flush_held(&mut self) {
        for endpoint in self.sockets.endpoints_mut() {
            let sent = endpoint.flush();
            if sent > 0 {
                self.counters.control_syscalls.add(sent as i64);
            }
        }
    }

    /// Reads the control traffic waiting on the publication's sockets (status messages, NAKs, and frames
    /// for the control handler); returns the number of datagrams read. `idle_cycle`: the Sender's duty cycle
    /// sent nothing, so the polls are counted as idle polls too.
    pub fn poll_control(&mut self, now_ns: u64, batch: &mut RecvBatch, idle_cycle: bool) -> usize {
        let mut work = 0;
        for s in 0..self.sockets.endpoints().len() {
            self.counters.control_syscalls.increment();
            if idle_cycle {
                self.counters.idle_polls.increment();
            }
            let received = match self.sockets.endpoints_mut()[s].recv_batch(batch) {
                Ok(n) => n,
                Err(_) => {
                    self.counters.recv_errors.increment();
                    0
                }
            };
            for i in 0..received {
                let datagram = batch.datagram(i);
                let Some(d) = self.destination_of(s, datagram.source) else {
                    self.counters.invalid_packets.increment();
                    self.counters.foreign.increment();
                    continue;
                };
                if datagram.forged {
                    self.counters.invalid_packets.increment();
                    self.counters.forged.increment();
                    continue;
                }
                if datagram.truncated {
                    self.counters.invalid_packets.increment();
                    continue;
                }
                self.on_control(d, datagram.bytes, now_ns);
            }
            work += received;
        }
        work
    }

    /// Which destination a control datagram on socket `s` came from.
    fn destination_of(&self, s: usize, source: Option<SocketAddr>) -> Option<usize> {
        match &self.sockets {
            Sockets::PerDestination(_) => Some(s), // connected: the kernel only delivers the peer's datagrams
            Sockets::Shared { .. } => {
                let source = source?;
                self.destinations.iter().position(|d| d.addr == source)
            }
        }
    }

    fn on_control(&mut self, d: usize, datagram: &[u8], now_ns: u64) {
        let c = *self.log.config();
        match frame::parse(datagram) {
            Ok(Frame::StatusMessage { frame, group_tag })
                if frame.session_id == c.session_id && frame.stream_id == c.stream_id =>
            {
                self.counters.status_messages.increment();
                if self.config.membership.is_some_and(|mine| group_tag != Some(mine)) {
                    self.counters.membership_refused.increment();
                    let (addr, mine) = (self.destinations[d].addr, self.config.membership.unwrap_or(0));
                    self.logs.membership.warn(now_ns, || {
                        format!(
                            "status message from {addr} refused: it carries member-list tag {}, this node's is \
                             {mine:#018x}: the two nodes are configured with different `members`; give every node \
                             the same list",
                            group_tag.map_or("none".to_string(), |t| format!("{t:#018x}"))
                        )
                    });
                    return;
                }
                if frame.flags & frame::SM_SEND_SETUP_FLAG != 0 {
                    // A receiver without an image asks for a SETUP; its position and window mean nothing yet.
                    self.destinations[d].setup_requested = true;
                    return;
                }
                let bits = self.log.position_bits_to_shift();
                let pos = position(
                    frame.consumption_term_id,
                    frame.consumption_term_offset as usize,
                    c.initial_term_id,
                    bits,
                );
                let window = frame.receiver_window as i64;
                let change = self.flow_control.on_status_message(d, frame.receiver_id(), pos, window, now_ns);
                if pos < self.oldest_retained() {
                    self.tell_behind(d, pos, now_ns);
                }
                if change == StatusChange::Joined && pos + window < self.sender_position {
                    // Its SETUP went out a while ago and the stream has moved on past its window: tell it
                    // where the stream is now, so an image that has received nothing can join there.
                    self.destinations[d].setup_requested = true;
                }
            }
            Ok(Frame::Nak(nak)) if nak.session_id == c.session_id && nak.stream_id == c.stream_id => {
                self.counters.naks_received.increment();
                self.on_nak(d, nak.term_id, nak.term_offset, nak.length, now_ns);
            }
            Ok(other @ (Frame::AppendPosition(_) | Frame::CommitPosition(_))) => match self.control_handler.as_mut() {
                Some(handler) => handler.on_control(d, &other),
                None => self.counters.invalid_packets.increment(),
            },
            _ => self.counters.invalid_packets.increment(),
        }
    }

    /// Answers a NAK: only for a range the log retains and the sender has sent, at most once per range
    /// per linger, at most a window per resend and within the receiver's byte budget (see
    /// [`RetransmitHandler`]). A receiver that NAKs what the log no longer holds is told so instead.
    fn on_nak(&mut self, d: usize, nak_term_id: i32, nak_offset: i32, length: i32, now_ns: u64) {
        let c = *self.log.config();
        let bits = self.log.position_bits_to_shift();
        if nak_offset < 0 || length <= 0 || nak_offset as usize >= c.term_length {
            self.counters.invalid_packets.increment();
            return;
        }
        let from = position(nak_term_id, nak_offset as usize, c.initial_term_id, bits);
        if from >= self.sender_position {
            self.counters.invalid_packets.increment();
            return;
        }
        if !self.is_retained(from) {
            self.counters.naks_behind_retained.increment();
            self.tell_behind(d, from, now_ns);
            return;
        }
        match self.retransmit.on_nak(d, nak_term_id, nak_offset, length, now_ns) {
            NakOutcome::Resend { length } => {
                let end = (from + length as i64).min(self.sender_position);
                let term_end = from - nak_offset as i64 + c.term_length as i64;
                let sent = self.resend(d, from, end.min(term_end));
                self.retransmit.spent(d, sent);
            }
            NakOutcome::Lingering => {}
            NakOutcome::Throttled => self.counters.retransmits_throttled.increment(),
        }
    }

    /// Tells receiver `d`, at most once per status interval (and logs it at most once a second), that its
    /// position `at` is older than anything the log
    /// retains: its NAKs cannot be answered, and it does not hold the stream back (see
    /// [`FlowControl::limit`]). Logged here too, naming the positions.
    fn tell_behind(&mut self, d: usize, at: i64, now_ns: u64) {
        if now_ns < self.destinations[d].next_behind_ns {
            return;
        }
        self.destinations[d].next_behind_ns = now_ns + nanos(self.config.status_interval);
        let c = *self.log.config();
        let (oldest, sender) = (self.oldest_retained(), self.sender_position);
        let frame = frame::BehindRetainedFrame {
            session_id: c.session_id,
            stream_id: c.stream_id,
            receiver_position: at,
            oldest_retained: oldest,
            sender_position: sender,
            ..frame::BehindRetainedFrame::default()
        };
        let mut bytes = [0u8; frame::BEHIND_RETAINED_LENGTH];
        if frame.encode(&mut bytes).is_ok() && self.send_counted(d, &bytes) {
            self.counters.behind_retained_sent.increment();
        }
        let addr = self.destinations[d].addr;
        self.logs.behind.warn(now_ns, || {
            format!(
                "receiver {addr} is at position {at}, behind the oldest position this log retains ({oldest}; sent \
                 up to {sender}): it cannot catch up from memory and no longer holds the stream back"
            )
        });
    }

    /// Whether the log still holds `position` intact, now and for as long as the sender is busy with it.
    ///
    /// The appender zeroes the partition of term `T - 1` when it rotates into `T + 1`, and it stays within
    /// `term_length / 2` of the sender position, which does not move during a resend. So terms from
    /// `term(sender_position + term_length / 2) - 1` on are intact. (This is at least `term_length / 2`
    /// of history, more than Aeron's bound, and it stays correct when the sender position has jumped over
    /// padding to a term boundary.)
    fn is_retained(&self, position: i64) -> bool {
        position >= self.oldest_retained()
    }

    /// The oldest position [`Self::is_retained`] accepts: the start of the term before the one the appender
    /// can reach while the sender position stays where it is.
    fn oldest_retained(&self) -> i64 {
        let bits = self.log.position_bits_to_shift();
        let furthest_producer = self.sender_position + (self.log.term_length() / 2) as i64;
        ((term_count(furthest_producer, bits) - 1).max(0)) << bits
    }

    /// Resends `[from, to)` of the log to destination `d`, in datagrams of whole frames up to the MTU;
    /// returns the bytes sent.
    fn resend(&mut self, d: usize, mut from: i64, to: i64) -> usize {
        let start = from;
        let term_length = self.log.term_length();
        let bits = self.log.position_bits_to_shift();
        while from < to {
            let found =
                scan(&self.log, from, ((to - from) as usize).min(self.config.mtu).max(crate::frame::FRAME_ALIGNMENT));
            if found.available == 0 {
                break;
            }
            let partition = partition_index(from, bits);
            let bytes = self.log.term(partition).bytes(term_offset(from, term_length), found.available);
            let outcome = transmit(&mut self.sockets, d, bytes, None, &self.counters.control_syscalls);
            if !matches!(outcome, SendOutcome::Sent(_)) {
                self.counters.short_sends.increment();
                break;
            }
            self.counters.retransmits.increment();
            self.counters.retransmitted_bytes.add(found.available as i64);
            from += found.advance() as i64;
        }
        (from - start) as usize
    }
}

/// Sends `bytes` to destination `d`, counting the syscall on `syscalls`.
///
/// `tag` is `bytes`' authentication tag when the caller computed it once for several destinations (`None`:
/// the socket computes it, if it authenticates).
#[inline]
fn transmit<T: Transport>(
    sockets: &mut Sockets<T>,
    d: usize,
    bytes: &[u8],
    tag: Option<&[u8; TAG_LENGTH]>,
    syscalls: &Counter,
) -> SendOutcome {
    syscalls.increment();
    match tag {
        Some(tag) => sockets.send_with_tag(d, bytes, Some(tag)),
        None => sockets.send(d, bytes),
    }
}

/// Counts the outcome of a data send of `count` datagrams of `length` bytes; a path-MTU refusal stops the
/// channel. Returns whether the kernel took the data.
fn account(
    outcome: SendOutcome,
    length: usize,
    count: usize,
    destination: SocketAddr,
    config: &ChannelConfig,
    counters: &SenderCounters,
    failure: &mut Option<PublicationError>,
) -> bool {
    match outcome {
        SendOutcome::Sent(n) => {
            counters.datagrams.add(n.max(count) as i64);
            counters.bytes.add((length * n.max(count)) as i64);
            true
        }
        SendOutcome::WouldBlock => {
            counters.short_sends.increment();
            false
        }
        SendOutcome::TooLarge { path_mtu, .. } => {
            counters.send_errors.increment();
            let path_mtu = path_mtu.or_else(|| probe_path_mtu(destination, config));
            failure.get_or_insert(PublicationError::PathMtu { destination, mtu: config.mtu, path_mtu });
            false
        }
        SendOutcome::Failed(_) => {
            counters.send_errors.increment();
            false
        }
    }
}

/// Whether a failed GSO send means the kernel will not segment on this path (rather than a passing error).
fn is_gso_refusal(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT))
}

/// Falls back to `classic` with a warning when the network (the kernel) refuses the asked mode.
fn resolve_mode<N: Network>(asked: SendMode, network: &N, warnings: &mut Vec<String>) -> SendMode {
    if network.supports(asked) {
        asked
    } else {
        warnings.push(format!("send mode {asked} is not supported by this kernel: falling back to classic"));
        SendMode::Classic
    }
}

/// Opens the sockets of `mode` and checks that the MTU fits the path to every destination.
fn open_sockets<N: Network>(
    config: &ChannelConfig,
    mode: SendMode,
    network: &mut N,
    warnings: &mut Vec<String>,
) -> Result<Sockets<N::Endpoint>, PublicationError> {
    let mut connected = Vec::with_capacity(config.destinations.len());
    for &destination in &config.destinations {
        let (mut endpoint, w) = bind_source(config, network, destination)?;
        warnings.extend(w);
        endpoint.connect(destination)?;
        if let Some(payload) = endpoint.path_max_payload() {
            config.validate_path(destination, payload)?;
        }
        connected.push(endpoint);
    }
    if mode != SendMode::Mmsg {
        return Ok(Sockets::PerDestination(connected));
    }
    let first = config.destinations.first().copied().unwrap_or_else(|| "0.0.0.0:0".parse().unwrap());
    let (endpoint, _) = bind_source(config, network, first)?;
    let addrs = config.destinations.iter().map(|&d| SockAddr::from(d)).collect();
    Ok(Sockets::Shared { endpoint, addrs })
}

/// A socket for sending to `destination`: on the channel's `source` (shared with the publication's other
/// sockets) when it has one, else on an ephemeral port of the destination's family.
fn bind_source<N: Network>(
    config: &ChannelConfig,
    network: &mut N,
    destination: SocketAddr,
) -> std::io::Result<(N::Endpoint, Vec<String>)> {
    match config.source {
        Some(source) => network.bind(source, &config.binding(true)),
        None => network.bind(unspecified_like(destination), &config.binding(false)),
    }
}

/// The kernel's path MTU to `destination`, read through a socket connected for the purpose: the shared
/// socket of `mmsg` mode is not connected and cannot tell. Cold path: only when a channel stops.
fn probe_path_mtu(destination: SocketAddr, config: &ChannelConfig) -> Option<usize> {
    let (mut endpoint, _) = UdpEndpoint::bind(unspecified_like(destination), &config.socket).ok()?;
    endpoint.connect(destination).ok()?;
    endpoint.path_mtu().ok()
}

/// Port 0 on the loopback or unspecified address of the destination's family.
fn unspecified_like(destination: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = match destination {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, 0)
}

#[cfg(test)]
mod tests;
