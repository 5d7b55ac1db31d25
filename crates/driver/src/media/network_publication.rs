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
//! Files: `sockets` (the endpoints and how they are opened), `send_modes` (the data path in each send
//! mode), `control` (SETUP, heartbeats, status messages, NAKs, retransmits, the layer above's frames).
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
use crate::media::time_split::{CallClass, CallNs, CallTimer};
use crate::media::transport::{
    MmsgScratch, Network, RecvBatch, SendMode, SendOutcome, Transport, Udp, UdpEndpoint, MAX_BATCH,
};
use crate::setting::SettingError;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::descriptor::{partition_index, position, term_count, term_id, term_offset};
use crate::shm::log_buffer::{scan, ConsumerPosition, LogBuffer};
use crate::shm::stats::{kinds, CounterKind};

mod control;
mod send_modes;
mod sockets;

pub use control::ControlHandler;
use send_modes::Run;
use sockets::{is_gso_refusal, open_sockets, probe_path_mtu, resolve_mode, transmit, Sockets};

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
        /// Bytes of authentication tag each datagram carries after the MTU's (0 without a key).
        tag: usize,
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
            Self::PathMtu { destination, mtu, tag, path_mtu } => {
                let path = path_mtu.map_or("unknown".to_string(), |m| m.to_string());
                // The MTU that fits is the path's IP packet size less the IPv4 and UDP headers and the tag,
                // in the multiples of 32 an MTU is made of.
                let fix = match path_mtu {
                    Some(m) => format!("set the channel's MTU to at most {}", m.saturating_sub(28 + tag) / 32 * 32),
                    None => "set a smaller channel MTU".to_string(),
                };
                let tagged = if *tag > 0 { format!(" and its {tag}-byte authentication tag") } else { String::new() };
                write!(
                    f,
                    "channel to {destination} stopped: a datagram of the configured MTU {mtu}{tagged} does not fit the \
                     path MTU {path}; {fix}, or raise the MTU of every hop (jumbo frames)"
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

/// One log buffer, replicated to every destination, over transport `T` (see [`crate::media::transport`]).
///
/// Its parts by concern: where the send path is in the log (`SendProgress`), the scratch one duty
/// cycle's batch is built in (`BatchScratch`), what it tells its operator (`PublicationLogs`); beside
/// them the sockets in their send mode, the destinations with flow control and retransmits over them, and
/// the counters and call timer of the send path. The parts are held by value: the send path reaches every
/// field at a fixed offset from `self`, as it did when they were flat.
pub struct NetworkPublication<T: Transport = UdpEndpoint> {
    log: LogBuffer,
    config: ChannelConfig,
    mode: SendMode,
    sockets: Sockets<T>,
    destinations: Vec<Destination>,
    flow_control: FlowControl,
    retransmit: RetransmitHandler,
    consumer: ConsumerPosition,
    progress: SendProgress,
    control_handler: Option<Box<dyn ControlHandler>>,
    batch: BatchScratch,
    failure: Option<PublicationError>,
    counters: SenderCounters,
    /// The time inside its send and poll calls, when the Sender splits its time (off by default).
    calls: CallTimer,
    logs: PublicationLogs,
}

/// Where the send path is in the log, and what it last did there.
///
/// Invariants: `sender_position` only moves forward, over whole frames, and never past the flow-control
/// limit; `prefetched` is at most the producer position at the time it was set (never a line the
/// appender was still writing).
struct SendProgress {
    /// Everything before it has been sent to every live receiver.
    sender_position: i64,
    /// Where the log's first byte is (see [`NetworkPublication::set_log_start`]); 0 for a log that holds its
    /// terms whole.
    log_start: i64,
    /// Everything before this position has been prefetched (see [`NetworkPublication::prefetch_batch`]).
    prefetched: i64,
    /// When data or a heartbeat last went out: a heartbeat is due `heartbeat_interval` after it.
    last_data_or_heartbeat_ns: u64,
    /// The flow-control window has been closed with data waiting since data last went out: the stall is
    /// counted once, at its first cycle.
    stalled: bool,
}

impl SendProgress {
    /// Moves the sender position over `advance` bytes just sent at `now_ns` (which ends any stall and
    /// restarts the heartbeat timer), and returns the new position.
    #[inline]
    fn advance(&mut self, advance: usize, now_ns: u64) -> i64 {
        self.sender_position += advance as i64;
        self.last_data_or_heartbeat_ns = now_ns;
        self.stalled = false;
        self.sender_position
    }
}

/// The scratch one duty cycle's data batch is built in, kept between cycles so that the send path does not
/// allocate.
///
/// Invariant: between cycles its contents mean nothing; each send fills what it reads (`runs[..count]` by
/// the scan, `live_addrs` by the `mmsg` send) before reading it.
struct BatchScratch {
    /// The datagrams the scan found, in log order.
    runs: [Run; MAX_BATCH],
    /// `mmsg`: the addresses of the live destinations, in destination order.
    live_addrs: Vec<SockAddr>,
    /// `mmsg`: the message headers of one `sendmmsg`.
    mmsg: MmsgScratch,
}

/// What a publication tells its operator: the warnings of its start-up and its rate-limited log lines.
#[derive(Default)]
struct PublicationLogs {
    /// Start-up warnings (a send mode the kernel refused, clamped socket buffers).
    warnings: Vec<String>,
    membership: RateLimited,
    behind: RateLimited,
}

impl<T: Transport> fmt::Debug for NetworkPublication<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkPublication")
            .field("mode", &self.mode)
            .field("sender_position", &self.progress.sender_position)
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
                crate::media::channel::settings::send_faults,
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
                crate::media::channel::settings::mtu,
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
            progress: SendProgress {
                sender_position: start,
                log_start: 0,
                prefetched: 0,
                last_data_or_heartbeat_ns: 0,
                stalled: false,
            },
            control_handler: None,
            batch: BatchScratch { runs: [Run::default(); MAX_BATCH], live_addrs, mmsg: MmsgScratch::default() },
            failure: None,
            counters,
            calls: CallTimer::default(),
            logs: PublicationLogs { warnings, ..PublicationLogs::default() },
            config,
        })
    }

    /// Warnings from start-up (a send mode the kernel refused, clamped socket buffers).
    pub fn warnings(&self) -> &[String] {
        &self.logs.warnings
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
        self.progress.sender_position
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

    /// Says where the log's first byte is, when it does not hold everything from its term's start: a log
    /// continued from another at a later position (a new leader's, whose first bytes were copied from its
    /// previous log). Nothing below `start` can be resent: a receiver there is told it is behind what the
    /// log retains, and does not hold the stream back.
    pub fn set_log_start(&mut self, start: i64) {
        self.progress.log_start = start;
    }

    /// Times every send and poll call with `clock` from now on (`None`: stops), for the Sender's
    /// [time split](crate::media::time_split).
    pub fn time_calls(&mut self, clock: Option<crate::agent::clock::NanoClock>) {
        self.calls.set_clock(clock);
    }

    /// The time spent inside calls since the last take, by class (all 0 when calls are not timed), and
    /// zeroes it.
    pub fn take_call_ns(&mut self) -> CallNs {
        self.calls.take()
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

    /// The window the sender may fill now: flow control's limit, less the sender position.
    fn window(&self, now_ns: u64) -> i64 {
        match self.flow_control.limit(self.oldest_retained(), now_ns) {
            Some(limit) => limit - self.progress.sender_position,
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests;
