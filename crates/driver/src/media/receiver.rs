//! The Receiver agent: one thread for every receive socket of a node.
//!
//! Per duty cycle it drains each socket with `recvmmsg` batches, dispatches every datagram, then for each
//! image advances the rebuild position and sends the status messages and NAKs that are due. When its idle
//! strategy parks, it parks in `epoll_wait` on its sockets (see [`Agent::parker`]), so a parked receiver
//! still wakes on the first datagram.
//!
//! Dispatch: a datagram from a source that is not a configured peer, malformed, truncated, for another
//! stream, or for a session without an image is dropped and counted; it never panics the thread. Data for
//! an unknown session elicits a SETUP (a status message with the send-setup flag, at most once per
//! status interval per channel); a SETUP creates the image and hands it to the channel's subscriptions.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use socket2::SockAddr;

use crate::agent::clock::{nanos, NanoClock};
use crate::agent::idle::Park;
use crate::agent::{Agent, AgentError};
use crate::event_log::RateLimited;
use crate::frame::{
    self, DataHeader, ExtensionHeader, Frame, NakFrame, SetupFrame, StatusMessageFrame, SM_SEND_SETUP_FLAG,
};
use crate::media::channel::ChannelConfig;
use crate::media::image::{Feedback, ImageTimers, InsertOutcome, PublicationImage};
use crate::media::transport::{Network, RecvBatch, SendOutcome, Transport, Udp, UdpEndpoint, MAX_BATCH};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::descriptor::position;
use crate::shm::log_buffer::{ConsumerPosition, LogBuffer, LogConfig, LogError, LogReader, MessageReader};
use crate::shm::stats::{kinds, CounterKind};

/// Most `recvmmsg` batches one socket gets per duty cycle (16 x 32 = 512 datagrams, about half a
/// millisecond of draining here), so one busy socket cannot starve the others for long. A receiver
/// invoked once per application loop (the invoker modes) drains at most this per loop: at 4 batches a
/// follower invoked 1,600 times a second capped at 205k datagrams/s, below one Sender's rate at 1408 B.
const MAX_BATCHES_PER_CYCLE: usize = 16;

/// A receive channel: a bound socket and the stream it accepts.
#[derive(Clone, Debug)]
pub struct ReceiveChannelConfig {
    /// Where to listen.
    pub bind: SocketAddr,
    /// The stream accepted; other streams are dropped and counted.
    pub stream_id: i32,
    /// Accepted sources (the publisher's address); empty accepts any source.
    pub peers: Vec<SocketAddr>,
    /// The other known endpoints (the cluster's members): a datagram from one of them that is not a peer is
    /// counted apart from a stranger's, and logged as a member that wrongly claims to lead.
    pub members: Vec<SocketAddr>,
    /// Timers, window, socket buffers and faults (`receive_faults` act on what this channel receives).
    pub channel: ChannelConfig,
    /// Where image logs are made (a node directory); `None` maps them anonymously.
    pub image_dir: Option<PathBuf>,
    /// Start images here instead of at the publisher's current position (a follower that already has
    /// the log up to this position asks for the rest by NAK).
    pub join_position: Option<i64>,
    /// Identity sent in status messages, unique per receiver start.
    pub receiver_id: i64,
    /// Accept only this publication session (a follower that knows which log it was told to follow); a
    /// SETUP of another is refused and counted (`receiver new sessions refused`). `None` accepts any.
    pub session_id: Option<i32>,
    /// Set when this channel carries a replicated log: acknowledge what is rebuilt (APPEND_POSITION), and
    /// hand what the media layer does not interpret (runs, commit frames) to the layer above.
    pub follower: Option<FollowerSeam>,
    /// Bind with `SO_REUSEPORT`, beside the sockets a cluster member sends the log from while it leads
    /// (on the same endpoint) and beside the Receiver of its previous term, until that one is dropped.
    pub reuse_port: bool,
    /// Make a file-backed image's log on the Receiver's thread, when its SETUP comes, instead of on a
    /// thread of its own: slower to join (tens of milliseconds on the receive loop for a large log), but
    /// deterministic, for the node simulator. Default: `false`.
    pub inline_image_files: bool,
    /// A log file made beforehand (reserved and pre-touched, all zeros, the length of this channel's
    /// logs) that the channel's first file-backed image takes instead of making one, so that a follower
    /// joins its leader's log at once. Default: `None`.
    pub spare_image: Option<SpareImage>,
}

/// A log file made beforehand for an image (see [`ReceiveChannelConfig::spare_image`]).
#[derive(Clone, Debug)]
pub struct SpareImage {
    /// Its file: the image's file once it is taken.
    pub path: PathBuf,
    /// Its mapping.
    pub region: Arc<crate::shm::buffer::Region>,
}

/// A follower's side of a replicated log, as the media layer sees it: how it acknowledges, and the
/// observer it reports to. What the reports mean (commit positions, term starts) is the cluster's.
#[derive(Clone, Debug)]
pub struct FollowerSeam {
    /// Acknowledge at least this often, even when the log does not move.
    pub ack_interval: Duration,
    /// Acknowledge an advance no sooner than this after the last acknowledgement (zero: at every advance).
    pub ack_gap: Duration,
    /// Acknowledge no further than this counter (a recording member: the recorder's durable position).
    pub ack_up_to: Option<Counter>,
    /// Told what the follower's image rebuilds and which commit frames of its session arrive.
    pub observer: Arc<dyn FollowerObserver>,
}

/// The layer above a follower's Receiver channel: told, on the Receiver's thread, what happened to the
/// image, without the media layer knowing what it means. Each call is on the Receiver's duty cycle, so an
/// implementation does no more than set counters or hand positions on.
pub trait FollowerObserver: Send + Sync + fmt::Debug {
    /// The image's rebuilt (contiguous) position, after each feedback pass (it only grows).
    fn rebuilt(&self, position: i64);
    /// A run of data frames was inserted into `log`: its markers and reserved values are in `run`.
    fn run_inserted(&self, log: &LogBuffer, run: &frame::DataRun);
    /// An extension frame ([`Frame::Extension`]: the layer above's control frames) of the image's own
    /// session and stream, from the image's source; its whole bytes.
    fn extension_frame(&self, header: &ExtensionHeader, bytes: &[u8]);
    /// Writes the acknowledgement of the image's rebuilt `position` (an extension frame of session
    /// `session_id` and stream `stream_id`) at the start of `dst`; returns its length (0: none is sent).
    fn encode_ack(&self, session_id: i32, stream_id: i32, position: i64, dst: &mut [u8]) -> usize;
}

impl ReceiveChannelConfig {
    /// A channel listening on `bind` for `stream_id`, with defaults for everything else.
    pub fn new(bind: SocketAddr, stream_id: i32) -> Self {
        Self {
            bind,
            stream_id,
            peers: Vec::new(),
            members: Vec::new(),
            channel: ChannelConfig::default(),
            image_dir: None,
            join_position: None,
            receiver_id: unique_receiver_id(),
            session_id: None,
            follower: None,
            reuse_port: false,
            inline_image_files: false,
            spare_image: None,
        }
    }
}

fn unique_receiver_id() -> i64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ ((std::process::id() as u64) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9))
        as i64
}

/// The counters of a receiver.
#[derive(Clone, Debug)]
pub struct ReceiverCounters {
    /// Datagrams received (before any check).
    pub datagrams: Counter,
    /// Bytes received.
    pub bytes: Counter,
    /// `recvmmsg` calls.
    pub recv_syscalls: Counter,
    /// Status messages sent.
    pub status_messages: Counter,
    /// NAKs sent.
    pub naks: Counter,
    /// Acknowledgements (append positions) sent.
    pub acknowledgements: Counter,
    /// SETUP frames received.
    pub setups: Counter,
    /// Heartbeats received.
    pub heartbeats: Counter,
    /// Datagrams that had all arrived before.
    pub duplicates: Counter,
    /// Datagrams beyond the window.
    pub out_of_window: Counter,
    /// Malformed or truncated datagrams.
    pub malformed: Counter,
    /// Datagrams from sources that are not configured peers (strangers and members alike).
    pub foreign: Counter,
    /// Of `foreign`, those from a configured member that is not a peer (a member claiming to lead).
    pub foreign_members: Counter,
    /// Of `foreign`, data, pad and heartbeat frames.
    pub foreign_data: Counter,
    /// Of `foreign`, SETUP frames.
    pub foreign_setups: Counter,
    /// Of `foreign`, commit-position frames.
    pub foreign_commits: Counter,
    /// SETUPs refused: a term length or MTU other than the channel's, or another member list.
    pub setups_refused: Counter,
    /// SETUPs of a new session refused because the follower's log already holds another session's data.
    pub sessions_refused: Counter,
    /// Commit-position frames for a session other than the image's.
    pub commits_refused: Counter,
    /// Datagrams whose authentication tag was missing or wrong (with a shared key configured).
    pub forged: Counter,
    /// Image log files removed because their session ended (a newer image replaced them).
    pub images_removed: Counter,
    /// BEHIND_RETAINED frames received: the publisher no longer retains this receiver's position.
    pub behind_retained: Counter,
    /// Datagrams for another stream or a session without an image.
    pub unknown_stream: Counter,
    /// Images created.
    pub images: Counter,
    /// Receive calls that failed with an unexpected error.
    pub recv_errors: Counter,
    /// Status messages, NAKs and acknowledgements the socket did not take (full, or an error): the timers
    /// send the next one.
    pub feedback_send_failures: Counter,
    /// Commit-position frames received.
    pub commits: Counter,
}

impl ReceiverCounters {
    /// Allocates every counter with `allocate(kind)`, its kind from the [catalogue](crate::shm::stats::kinds).
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            datagrams: allocate(&kinds::receiver::datagrams),
            bytes: allocate(&kinds::receiver::bytes),
            recv_syscalls: allocate(&kinds::receiver::recv_syscalls),
            status_messages: allocate(&kinds::receiver::status_messages_sent),
            naks: allocate(&kinds::receiver::naks_sent),
            acknowledgements: allocate(&kinds::receiver::acknowledgements_sent),
            setups: allocate(&kinds::receiver::setups_received),
            heartbeats: allocate(&kinds::receiver::heartbeats_received),
            duplicates: allocate(&kinds::receiver::duplicates_dropped),
            out_of_window: allocate(&kinds::receiver::out_of_window_dropped),
            malformed: allocate(&kinds::receiver::malformed_dropped),
            foreign: allocate(&kinds::receiver::foreign_source_dropped),
            foreign_members: allocate(&kinds::receiver::foreign_member_dropped),
            foreign_data: allocate(&kinds::receiver::foreign_data_dropped),
            foreign_setups: allocate(&kinds::receiver::foreign_setups_dropped),
            foreign_commits: allocate(&kinds::receiver::foreign_commits_dropped),
            setups_refused: allocate(&kinds::receiver::setups_refused),
            sessions_refused: allocate(&kinds::receiver::new_sessions_refused),
            commits_refused: allocate(&kinds::receiver::commits_refused),
            images_removed: allocate(&kinds::receiver::images_removed),
            forged: allocate(&kinds::receiver::forged_dropped),
            behind_retained: allocate(&kinds::receiver::behind_retained_received),
            unknown_stream: allocate(&kinds::receiver::unknown_stream_dropped),
            images: allocate(&kinds::receiver::images),
            recv_errors: allocate(&kinds::receiver::recv_errors),
            feedback_send_failures: allocate(&kinds::receiver::feedback_send_failures),
            commits: allocate(&kinds::receiver::commit_frames_received),
        }
    }

    /// Counters in private memory, for tests.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}

/// An image handed from the Receiver to the channel's subscriptions.
pub struct ImageHandoff {
    /// The image's log.
    pub log: LogBuffer,
    /// A reader of it.
    pub reader: LogReader,
    /// The consumer slot registered for the subscription, at `position`.
    pub consumer: ConsumerPosition,
    /// Where the image starts.
    pub position: i64,
    /// Its file (`None` for an image mapped anonymously).
    pub file: Option<PathBuf>,
}

/// What the Receiver and a channel's subscriptions share: the newest image, behind a generation number
/// so that a subscription takes the lock only when an image was added.
#[derive(Default)]
struct ChannelShared {
    generation: AtomicU64,
    newest: Mutex<Option<ImageHandoff>>,
}

/// Reads whole messages from the images of one receive channel.
///
/// A subscription follows the newest image (a publisher restart, or a new leader, makes a new session);
/// the Receiver registered the image's consumer position for it, so the sender never gets more than a
/// window ahead of what this subscription has read.
pub struct Subscription {
    shared: Arc<ChannelShared>,
    generation: u64,
    current: Option<MessageReader>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("position", &self.position()).finish()
    }
}

impl Subscription {
    fn new(shared: Arc<ChannelShared>) -> Self {
        Self { shared, generation: 0, current: None }
    }

    /// Whether an image is connected.
    pub fn is_connected(&mut self) -> bool {
        self.refresh();
        self.current.is_some()
    }

    /// The position read up to, if connected.
    pub fn position(&self) -> Option<i64> {
        self.current.as_ref().map(MessageReader::position)
    }

    fn refresh(&mut self) {
        if let Some(handoff) = self.take_handoff() {
            self.current = Some(MessageReader::new(handoff.reader, handoff.consumer, handoff.position));
        }
    }

    /// The image the Receiver handed over since the last look, if any (the lock is taken only then).
    fn take_handoff(&mut self) -> Option<ImageHandoff> {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return None;
        }
        self.generation = generation;
        self.shared.newest.lock().expect("image hand-off lock").take()
    }

    /// Takes the newest image, to read its log with a reader of the caller's. `None` until an image is
    /// made (or when this image was already taken). A subscription that hands its image out reads nothing
    /// itself.
    pub fn take_image(&mut self) -> Option<ImageHandoff> {
        let handoff = self.take_handoff()?;
        self.current = None;
        Some(handoff)
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages to `handler`; returns the number
    /// of fragments read. The position is published once per call.
    pub fn poll(&mut self, fragment_limit: usize, handler: impl FnMut(&[u8])) -> usize {
        self.poll_bounded(i64::MAX, fragment_limit, handler)
    }

    /// As [`poll`](Self::poll), reading nothing beyond `limit_position` (a follower applies only what the
    /// leader has committed).
    pub fn poll_bounded(&mut self, limit_position: i64, fragment_limit: usize, handler: impl FnMut(&[u8])) -> usize {
        self.refresh();
        match self.current.as_mut() {
            Some(reader) => reader.poll_bounded(limit_position, fragment_limit, handler),
            None => 0,
        }
    }
}

/// One receive channel's images and its subscriptions' shared state (its endpoint is the Receiver's
/// `endpoints[c]`).
struct ReceiveChannel {
    config: ReceiveChannelConfig,
    images: Vec<PublicationImage>,
    shared: Arc<ChannelShared>,
    timers: ImageTimers,
    next_elicit_ns: u64,
    /// A follower's channel told its session asks its peers for a SETUP until it has an image (see
    /// [`ask_for_setup`]): when it next asks, and the interval after that one.
    next_ask_ns: u64,
    ask_retry_ns: u64,
    /// The file of the newest image, removed when a newer one replaces it.
    image_file: Option<PathBuf>,
    /// An image whose file is being made off the receive loop.
    pending: Option<PendingImage>,
    /// A log file made beforehand, for the first image.
    spare_image: Option<SpareImage>,
    logs: ChannelLogs,
}

/// The rate-limited log lines of one receive channel.
#[derive(Default)]
struct ChannelLogs {
    foreign: RateLimited,
    setup: RateLimited,
    session: RateLimited,
    behind: RateLimited,
}

/// The Receiver agent, over transport `T` (see [`crate::media::transport`]).
pub struct Receiver<T: Transport = UdpEndpoint> {
    channels: Vec<ReceiveChannel>,
    /// Channel `c`'s endpoint.
    endpoints: Vec<T>,
    batch: RecvBatch,
    clock: NanoClock,
    counters: ReceiverCounters,
    parker: ReadinessPark,
}

impl<T: Transport> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").field("channels", &self.channels.len()).finish()
    }
}

/// Parks in `epoll_wait` on the receive sockets, so readiness ends an idle park.
///
/// The sockets join the epoll set on the first park, not before: a socket in an epoll set makes every
/// datagram the kernel queues on it run the epoll callback under a lock, on the sending CPU, which on
/// loopback is the leader's Sender. A Receiver that never parks (invoked, or spinning) never pays that.
struct ReadinessPark {
    poll: Poll,
    events: Events,
    /// The sockets to register, by channel index; emptied once they are registered.
    pending: Vec<RawFd>,
}

impl ReadinessPark {
    fn register_pending(&mut self) {
        for (i, fd) in self.pending.drain(..).enumerate() {
            // A socket that cannot join the set is still polled every duty cycle: only its wake-up is lost,
            // and the park's timeout bounds that.
            let _ = self.poll.registry().register(&mut SourceFd(&fd), Token(i), Interest::READABLE);
        }
    }
}

impl Park for ReadinessPark {
    fn park(&mut self, timeout: Duration) {
        if !self.pending.is_empty() {
            self.register_pending();
        }
        // An error (EINTR) only ends this park early; the next duty cycle polls the sockets anyway.
        let _ = self.poll.poll(&mut self.events, Some(timeout));
    }
}

impl Receiver {
    /// Binds a UDP socket for each channel and returns the Receiver with one subscription per channel, in
    /// order (see [`open`](Self::open)). A channel with receive faults configured is refused: open the
    /// Receiver on a [`Faulty`](crate::media::transport::faulty::Faulty) network.
    pub fn new(
        configs: Vec<ReceiveChannelConfig>,
        counters: ReceiverCounters,
    ) -> std::io::Result<(Self, Vec<Subscription>, Vec<String>)> {
        if configs.iter().any(|c| c.channel.receive_faults.is_active()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "receive_faults are set: open the Receiver with Receiver::open on \
                 transport::faulty::Faulty::new(Udp, FaultConfig::default(), receive_faults)",
            ));
        }
        Self::open(configs, counters, &mut Udp)
    }
}

impl<T: Transport> Receiver<T> {
    /// Binds an endpoint on `network` for each channel and returns the Receiver with one subscription per
    /// channel, in order.
    pub fn open<N: Network<Endpoint = T>>(
        configs: Vec<ReceiveChannelConfig>,
        counters: ReceiverCounters,
        network: &mut N,
    ) -> std::io::Result<(Self, Vec<Subscription>, Vec<String>)> {
        let poll = Poll::new()?;
        let mut pending = Vec::with_capacity(configs.len());
        let mut channels = Vec::with_capacity(configs.len());
        let mut endpoints = Vec::with_capacity(configs.len());
        let mut subscriptions = Vec::with_capacity(configs.len());
        let mut warnings = Vec::new();
        let mut max_datagram = 0;
        for mut config in configs {
            config.channel.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let (endpoint, w) = network.bind(config.bind, &config.channel.binding(config.reuse_port))?;
            warnings.extend(w);
            pending.extend(endpoint.readiness_fd());
            let c = &config.channel;
            let timers = ImageTimers {
                nak_delay_ns: nanos(c.nak_delay),
                nak_retry_ns: nanos(c.nak_retry_delay),
                status_interval_ns: nanos(c.status_interval),
                window: c.receiver_window as i64,
            };
            max_datagram = max_datagram.max(frame::MAX_UDP_PAYLOAD_LENGTH.min(c.mtu.max(4096)));
            let shared = Arc::new(ChannelShared::default());
            subscriptions.push(Subscription::new(Arc::clone(&shared)));
            endpoints.push(endpoint);
            let spare_image = config.spare_image.take();
            channels.push(ReceiveChannel {
                config,
                images: Vec::new(),
                shared,
                timers,
                next_elicit_ns: 0,
                next_ask_ns: 0,
                ask_retry_ns: FIRST_ASK_RETRY_NS,
                image_file: None,
                pending: None,
                spare_image,
                logs: ChannelLogs::default(),
            });
        }
        let batch = RecvBatch::new(MAX_BATCH.min(32), max_datagram.max(frame::MAX_UDP_PAYLOAD_LENGTH.min(9000)));
        let parker = ReadinessPark { poll, events: Events::with_capacity(channels.len().max(1)), pending };
        let receiver = Self { channels, endpoints, batch, clock: NanoClock::new(), counters, parker };
        Ok((receiver, subscriptions, warnings))
    }

    /// Reads `clock` from now on (a simulated one, under the node simulator).
    pub fn set_clock(&mut self, clock: NanoClock) {
        self.clock = clock;
    }

    /// The local address of channel `index` (a port 0 bind is resolved here).
    pub fn local_addr(&self, index: usize) -> SocketAddr {
        self.endpoints[index].local_addr()
    }

    /// The counters.
    pub fn counters(&self) -> &ReceiverCounters {
        &self.counters
    }

    /// The images of channel `index` (for inspection).
    pub fn images(&self, index: usize) -> &[PublicationImage] {
        &self.channels[index].images
    }

    /// One duty cycle; returns the work done.
    pub fn poll_once(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        self.poll_at(now_ns)
    }

    /// One duty cycle at `now_ns` (a test's clock; [`poll_once`](Self::poll_once) reads the real one).
    pub fn poll_at(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        for c in 0..self.channels.len() {
            work += install_pending(&mut self.channels[c], &self.counters, now_ns) as usize;
            work += ask_for_setup(&mut self.channels[c], &mut self.endpoints[c], &self.counters, now_ns);
            work += self.receive(c, now_ns);
            work += self.send_feedback(c, now_ns);
        }
        work
    }

    fn receive(&mut self, c: usize, now_ns: u64) -> usize {
        let mut work = 0;
        for _ in 0..MAX_BATCHES_PER_CYCLE {
            self.counters.recv_syscalls.increment();
            let received = self.endpoints[c].recv_batch(&mut self.batch).unwrap_or_else(|_| {
                self.counters.recv_errors.increment();
                0
            });
            for i in 0..received {
                let datagram = self.batch.datagram(i);
                self.counters.datagrams.increment();
                self.counters.bytes.add(datagram.bytes.len() as i64);
                let channel = &mut self.channels[c];
                if datagram.forged {
                    self.counters.forged.increment();
                    continue;
                }
                if datagram.truncated {
                    self.counters.malformed.increment();
                    continue;
                }
                let Some(source) =
                    datagram.source.filter(|s| channel.config.peers.is_empty() || channel.config.peers.contains(s))
                else {
                    on_foreign(channel, &self.counters, datagram.source, datagram.bytes, now_ns);
                    continue;
                };
                on_datagram(channel, &mut self.endpoints[c], &self.counters, source, datagram.bytes, now_ns);
            }
            work += received;
            if received < self.batch.capacity() {
                break;
            }
        }
        work
    }

    fn send_feedback(&mut self, c: usize, now_ns: u64) -> usize {
        let channel = &mut self.channels[c];
        let mut work = 0;
        for image in channel.images.iter_mut() {
            work += image.track_rebuild() as usize;
            if let Some(follower) = &channel.config.follower {
                follower.observer.rebuilt(image.rebuild_position());
            }
            let id = FeedbackIdentity {
                session_id: image.session_id(),
                stream_id: image.stream_id(),
                receiver_id: channel.config.receiver_id,
                observer: channel.config.follower.as_ref().map(|f| &*f.observer),
                membership: channel.config.channel.membership,
            };
            let source = image.source();
            let endpoint = &mut self.endpoints[c];
            let counters = &self.counters;
            work += image.feedback(now_ns, |feedback| send_feedback_frame(endpoint, counters, source, id, feedback));
            // An acknowledgement waiting for its gap to end is work about to be done: the idle strategy must
            // not park the thread past it (a park here costs tens of microseconds, the gap a few).
            work += image.ack_deferred() as usize;
        }
        work
    }
}

/// Who a feedback frame is from and about, and (on a follower's channel) who writes its acknowledgements.
#[derive(Clone, Copy)]
struct FeedbackIdentity<'a> {
    session_id: i32,
    stream_id: i32,
    receiver_id: i64,
    observer: Option<&'a dyn FollowerObserver>,
    membership: Option<i64>,
}

fn send_feedback_frame<T: Transport>(
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    id: FeedbackIdentity<'_>,
    feedback: Feedback,
) {
    let FeedbackIdentity { session_id, stream_id, receiver_id, observer, membership } = id;
    let mut bytes = [0u8; 64];
    let length = match feedback {
        Feedback::Status { term_id, term_offset, window } => {
            let mut sm = StatusMessageFrame {
                session_id,
                stream_id,
                consumption_term_id: term_id,
                consumption_term_offset: term_offset,
                receiver_window: window,
                ..StatusMessageFrame::default()
            };
            sm.set_receiver_id(receiver_id);
            counters.status_messages.increment();
            encode_status(&sm, membership, &mut bytes)
        }
        Feedback::Ack { position } => {
            // The layer above writes its acknowledgement: the media layer only says when and of what.
            let Some(observer) = observer else { return };
            counters.acknowledgements.increment();
            Ok(observer.encode_ack(session_id, stream_id, position, &mut bytes))
        }
        Feedback::Nak(gap) => {
            let nak = NakFrame {
                session_id,
                stream_id,
                term_id: gap.term_id,
                term_offset: gap.term_offset as i32,
                length: gap.length as i32,
                ..NakFrame::default()
            };
            counters.naks.increment();
            nak.encode(&mut bytes)
        }
    };
    if let Ok(length) = length {
        // A full socket loses this frame; the timers send the next one.
        if !matches!(endpoint.send(&bytes[..length], Some(&SockAddr::from(source))), SendOutcome::Sent(_)) {
            counters.feedback_send_failures.increment();
        }
    }
}

/// Counts (by source kind and frame type) and drops a datagram from a source that is not a peer.
fn on_foreign(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: Option<SocketAddr>,
    bytes: &[u8],
    now_ns: u64,
) {
    counters.foreign.increment();
    let member = source.is_some_and(|s| channel.config.members.contains(&s));
    if member {
        counters.foreign_members.increment();
    }
    let frame_type = bytes.get(frame::TYPE_OFFSET..frame::TYPE_OFFSET + 2).map(|t| u16::from_le_bytes([t[0], t[1]]));
    match frame_type {
        Some(frame::TYPE_DATA | frame::TYPE_PAD) => counters.foreign_data.increment(),
        Some(frame::TYPE_SETUP) => counters.foreign_setups.increment(),
        Some(frame::TYPE_EXTENSION_FIRST..=frame::TYPE_EXTENSION_LAST) => counters.foreign_commits.increment(),
        _ => {}
    }
    let stream = channel.config.stream_id;
    let kind = if member { "a member that is not the leader" } else { "a source that is not a member" };
    let peers = &channel.config.peers;
    channel.logs.foreign.warn(now_ns, || {
        let source = source.map_or("an unknown address".to_string(), |s| s.to_string());
        format!(
            "stream {stream}: dropped a datagram (type {}) from {source}, {kind}; only {peers:?} may send it",
            frame_type.map_or("unreadable".to_string(), |t| format!("{t:#04x}"))
        )
    });
}

/// Writes a status message, with the member-list tag as its group tag when the channel has one (the
/// publisher refuses status messages of another cluster's members).
fn encode_status(
    sm: &StatusMessageFrame,
    membership: Option<i64>,
    bytes: &mut [u8],
) -> Result<usize, frame::EncodeError> {
    match membership {
        Some(tag) => sm.encode_with_group_tag(bytes, tag),
        None => sm.encode(bytes),
    }
}

/// Dispatches one datagram of channel `channel` (whose endpoint is `endpoint`) from `source`.
fn on_datagram<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    bytes: &[u8],
    now_ns: u64,
) {
    match frame::parse(bytes) {
        Ok(Frame::Data { header, .. }) | Ok(Frame::Pad(header)) => {
            on_data(channel, endpoint, counters, source, &header, bytes, now_ns)
        }
        Ok(Frame::Heartbeat(header)) => {
            counters.heartbeats.increment();
            match find_image(channel, &header, source) {
                Some(image) => {
                    image.on_heartbeat(&header);
                }
                None => elicit_setup(channel, endpoint, counters, source, &header, now_ns),
            }
        }
        Ok(Frame::Setup(setup)) => on_setup(channel, counters, source, &setup, bytes, now_ns),
        Ok(Frame::Extension { header, bytes }) => match &channel.config.follower {
            Some(follower) if header.stream_id == channel.config.stream_id => {
                counters.commits.increment();
                // Only the image's own session speaks for its log: a commit of another log would let the
                // follower apply entries no quorum of this log has acknowledged.
                if channel.images.iter().any(|i| i.session_id() == header.session_id && i.source() == source) {
                    follower.observer.extension_frame(&header, bytes);
                } else {
                    counters.commits_refused.increment();
                }
            }
            _ => counters.unknown_stream.increment(),
        },
        Ok(Frame::BehindRetained(behind)) => on_behind_retained(channel, counters, source, &behind, now_ns),
        Ok(_) => counters.unknown_stream.increment(),
        Err(_) => counters.malformed.increment(),
    }
}

/// The publisher says it no longer retains this receiver's position: stop NAKing, and say so.
fn on_behind_retained(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    behind: &frame::BehindRetainedFrame,
    now_ns: u64,
) {
    let image = channel.images.iter_mut().find(|i| i.session_id() == behind.session_id && i.source() == source);
    let Some(image) = image.filter(|_| behind.stream_id == channel.config.stream_id) else {
        counters.unknown_stream.increment();
        return;
    };
    counters.behind_retained.increment();
    if image.on_behind_retained(behind.oldest_retained) {
        let (at, oldest, sender) = (image.rebuild_position(), behind.oldest_retained, behind.sender_position);
        channel.logs.behind.warn(now_ns, || {
            format!(
                "the publisher at {source} no longer holds this log in memory at position {at} (it holds it from \
                 {oldest} and has sent up to {sender}): a member that records its log fetches the rest from the \
                 publisher's recording next (a catch-up, logged when it starts and ends); one that does not record \
                 cannot go on from here"
            )
        });
    }
}

fn find_image<'a>(
    channel: &'a mut ReceiveChannel,
    header: &DataHeader,
    source: SocketAddr,
) -> Option<&'a mut PublicationImage> {
    channel
        .images
        .iter_mut()
        .find(|i| i.session_id() == header.session_id && i.stream_id() == header.stream_id && i.source() == source)
}

fn on_data<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    header: &DataHeader,
    bytes: &[u8],
    now_ns: u64,
) {
    if header.stream_id != channel.config.stream_id {
        counters.unknown_stream.increment();
        return;
    }
    // One walk checks every frame of the datagram (one session, stream and term, contiguous, whole) before
    // any of it is written, and tells where it goes and what commit it carries; then one copy.
    let Ok(run) = frame::data_run(bytes) else {
        counters.malformed.increment();
        return;
    };
    let follower = channel.config.follower.as_ref();
    let Some(image) = channel
        .images
        .iter_mut()
        .find(|i| i.session_id() == header.session_id && i.stream_id() == header.stream_id && i.source() == source)
    else {
        counters.unknown_stream.increment();
        elicit_setup(channel, endpoint, counters, source, header, now_ns);
        return;
    };
    match image.insert_run(&run, bytes) {
        InsertOutcome::Inserted => {
            if let Some(follower) = follower {
                follower.observer.run_inserted(image.log(), &run);
            }
        }
        InsertOutcome::Duplicate => counters.duplicates.increment(),
        InsertOutcome::OutOfWindow => counters.out_of_window.increment(),
        InsertOutcome::Malformed => counters.malformed.increment(),
    }
}

/// The first interval between a follower's SETUP requests (see [`ask_for_setup`]); it doubles up to the
/// status interval.
const FIRST_ASK_RETRY_NS: u64 = 500_000;

/// A follower's channel told the session it is to follow (`session_id`, from `peers`) and holding no
/// image yet asks each peer for a SETUP: at once, then after [`FIRST_ASK_RETRY_NS`], doubling up to the
/// status interval. Without it the follower waits for the publisher's own SETUP retries, which double
/// from 1 ms: a follower whose Receiver binds just after one (a new leader announces its term before
/// its followers' Receivers exist) joined up to several milliseconds late, and a leader's first commit
/// of its term waited for it. Returns the requests sent.
fn ask_for_setup<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    now_ns: u64,
) -> usize {
    let Some(session_id) = channel.config.session_id else {
        return 0;
    };
    if !channel.images.is_empty() || channel.pending.is_some() || now_ns < channel.next_ask_ns {
        return 0;
    }
    channel.next_ask_ns = now_ns + channel.ask_retry_ns;
    channel.ask_retry_ns = (channel.ask_retry_ns * 2).min(channel.timers.status_interval_ns.max(FIRST_ASK_RETRY_NS));
    let stream_id = channel.config.stream_id;
    for i in 0..channel.config.peers.len() {
        let peer = channel.config.peers[i];
        send_setup_request(channel, endpoint, counters, peer, session_id, stream_id, 0);
    }
    channel.config.peers.len()
}

/// Asks an unknown publisher for a SETUP, at most once per status interval per channel.
fn elicit_setup<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    header: &DataHeader,
    now_ns: u64,
) {
    if header.stream_id != channel.config.stream_id || now_ns < channel.next_elicit_ns {
        return;
    }
    channel.next_elicit_ns = now_ns + channel.timers.status_interval_ns;
    send_setup_request(channel, endpoint, counters, source, header.session_id, header.stream_id, header.term_id);
}

/// Sends `to` a status message that asks for a SETUP of session `session_id` (its position and window
/// mean nothing).
fn send_setup_request<T: Transport>(
    channel: &ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    to: SocketAddr,
    session_id: i32,
    stream_id: i32,
    term_id: i32,
) {
    let mut sm = StatusMessageFrame {
        session_id,
        stream_id,
        consumption_term_id: term_id,
        consumption_term_offset: 0,
        receiver_window: 0,
        ..StatusMessageFrame::default()
    };
    sm.flags = SM_SEND_SETUP_FLAG;
    sm.set_receiver_id(channel.config.receiver_id);
    let mut bytes = [0u8; 64];
    if let Ok(length) = encode_status(&sm, channel.config.channel.membership, &mut bytes) {
        counters.status_messages.increment();
        if !matches!(endpoint.send(&bytes[..length], Some(&SockAddr::from(to))), SendOutcome::Sent(_)) {
            counters.feedback_send_failures.increment();
        }
    }
}

/// Why a SETUP is refused before any image is made for it, if it is.
fn refuse_setup(config: &ReceiveChannelConfig, setup: &SetupFrame, bytes: &[u8]) -> Option<String> {
    let c = &config.channel;
    if i64::from(setup.term_length) != c.term_length as i64 || i64::from(setup.mtu) != c.mtu as i64 {
        return Some(format!(
            "asks for term length {} and MTU {}, but this channel is configured for term length {} and MTU {}; \
             set the same [channel] term_length and mtu on every member",
            setup.term_length, setup.mtu, c.term_length, c.mtu
        ));
    }
    if let Some(mine) = c.membership {
        let theirs = frame::setup_membership(bytes);
        if theirs != Some(mine) {
            return Some(format!(
                "carries member-list tag {}, this node's is {mine:#018x}: the two nodes are configured with \
                 different `members`; give every node the same list",
                theirs.map_or("none".to_string(), |t| format!("{t:#018x}"))
            ));
        }
    }
    None
}

/// A follower's log holds one session. A receiver told which one (`session_id`: a cluster member knows
/// its leader's term's) refuses every other; one that was not refuses another session's SETUP once its
/// image has data, which would make it drop its log and rejoin a different one (re-applying from its join
/// position).
fn refuse_new_session(channel: &ReceiveChannel, setup: &SetupFrame) -> Option<String> {
    if let Some(expected) = channel.config.session_id.filter(|&s| s != setup.session_id) {
        return Some(format!(
            "is not the log this receiver was told to follow (session {expected}): the log of another \
             leadership term of the same leader"
        ));
    }
    channel.config.follower.as_ref()?;
    let image = channel.images.iter().find(|i| i.session_id() != setup.session_id && i.hwm() > i.join_position())?;
    Some(format!(
        "starts a new log (session {}) while this follower holds session {} up to position {}: refused, the \
         follower keeps its log",
        setup.session_id,
        image.session_id(),
        image.rebuild_position()
    ))
}

fn on_setup(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    setup: &SetupFrame,
    bytes: &[u8],
    now_ns: u64,
) {
    counters.setups.increment();
    if setup.stream_id != channel.config.stream_id {
        counters.unknown_stream.increment();
        return;
    }
    let log_config = LogConfig {
        term_length: setup.term_length.max(0) as usize,
        mtu: setup.mtu.max(0) as usize,
        initial_term_id: setup.initial_term_id,
        session_id: setup.session_id,
        stream_id: setup.stream_id,
        page_size: 4096,
        pre_touch: false,
    };
    if log_config.validate().is_err() || setup.term_offset < 0 || setup.term_offset as usize >= log_config.term_length {
        counters.malformed.increment();
        return;
    }
    let refused = match refuse_setup(&channel.config, setup, bytes) {
        Some(why) => Some((&counters.setups_refused, &mut channel.logs.setup, why)),
        None => {
            refuse_new_session(channel, setup).map(|why| (&counters.sessions_refused, &mut channel.logs.session, why))
        }
    };
    if let Some((counter, log, why)) = refused {
        counter.increment();
        let session = setup.session_id;
        log.warn(now_ns, || format!("SETUP from {source} (session {session}) refused: it {why}"));
        return;
    }
    let bits = log_config.term_length.trailing_zeros();
    let setup_position = position(setup.active_term_id, setup.term_offset as usize, setup.initial_term_id, bits);
    if let Some(image) = channel.images.iter_mut().find(|i| i.session_id() == setup.session_id && i.source() == source)
    {
        // An image that has received nothing moves up to a newer SETUP only when the stream has passed its
        // window since its first (its status message reached the publisher too late to hold the stream for
        // it); within the window it stays, and the publisher, which holds those bytes, sends or resends
        // them once the image's status message makes it live. One with data, or with a fixed join
        // position, stays.
        let untouched = image.hwm() == image.join_position() && channel.config.join_position.is_none();
        let passed = setup_position > image.join_position() + channel.timers.window;
        if !untouched || !passed {
            image.request_status();
            return;
        }
    }
    let join = channel.config.join_position.map_or(setup_position, |p| p.min(setup_position));
    let Some(dir) = channel.config.image_dir.as_ref() else {
        let made = LogBuffer::create_anonymous(log_config);
        install_image(channel, counters, NewImage { source, join, file: None }, made, now_ns);
        return;
    };
    if channel.pending.is_some() {
        return; // an image file is being made; the publisher repeats its SETUP until it is answered
    }
    // A file-backed image reserves its whole log on the file system (tens of milliseconds for 48 MiB):
    // that is done on a thread of its own, never on the receive loop; the image joins when it is made.
    let path = dir.join(format!("image-{}-{}.log", setup.stream_id, setup.session_id));
    if let Some(spare) = channel.spare_image.take() {
        // Made beforehand: the image joins now, under the name an image of this session has. A spare of
        // another length (or one that cannot be renamed) is dropped, and the image made below.
        if std::fs::rename(&spare.path, &path).is_ok() {
            if let Ok(made) = LogBuffer::create_in(spare.region, log_config, 0) {
                install_image(channel, counters, NewImage { source, join, file: Some(path) }, Ok(made), now_ns);
                return;
            }
            let _ = std::fs::remove_file(&path);
        } else {
            let _ = std::fs::remove_file(&spare.path);
        }
    }
    if channel.config.inline_image_files {
        let made = LogBuffer::create(&path, log_config);
        install_image(channel, counters, NewImage { source, join, file: Some(path) }, made, now_ns);
        return;
    }
    let (done, made) = mpsc::channel();
    let creating = path.clone();
    let spawned = std::thread::Builder::new()
        .name("image-create".into())
        .spawn(move || drop(done.send(LogBuffer::create(&creating, log_config))));
    match spawned {
        Ok(_) => {
            let image = NewImage { source, join, file: Some(path) };
            channel.pending = Some(PendingImage { image, made });
        }
        Err(e) => {
            counters.setups_refused.increment();
            channel.logs.setup.warn(now_ns, || format!("SETUP from {source}: cannot start making the image: {e}"));
        }
    }
}

/// Where a new image comes from, where it starts, and its file.
struct NewImage {
    source: SocketAddr,
    join: i64,
    file: Option<PathBuf>,
}

/// An image whose log file a thread of its own is making.
struct PendingImage {
    image: NewImage,
    made: mpsc::Receiver<Result<LogBuffer, LogError>>,
}

/// Installs the image being made for `channel`, once its file is ready; returns whether it did.
fn install_pending(channel: &mut ReceiveChannel, counters: &ReceiverCounters, now_ns: u64) -> bool {
    let Some(pending) = channel.pending.as_ref() else {
        return false;
    };
    let made = match pending.made.try_recv() {
        Ok(made) => made,
        Err(mpsc::TryRecvError::Empty) => return false,
        Err(mpsc::TryRecvError::Disconnected) => Err(LogError::NotALog {
            path: pending.image.file.clone().unwrap_or_default(),
            reason: "the thread making it stopped".into(),
        }),
    };
    let pending = channel.pending.take().expect("checked above");
    install_image(channel, counters, pending.image, made, now_ns);
    true
}

/// Makes `made` the channel's image (or counts and logs why it could not be made).
fn install_image(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    new: NewImage,
    made: Result<LogBuffer, LogError>,
    now_ns: u64,
) {
    let NewImage { source, join, file } = new;
    let log = match made {
        Ok(log) => log,
        Err(e) => {
            counters.setups_refused.increment();
            channel.logs.setup.warn(now_ns, || format!("SETUP from {source}: cannot make the image: {e}"));
            return;
        }
    };
    let mut image = PublicationImage::new(log, source, join, channel.timers, now_ns);
    if let Some(follower) = &channel.config.follower {
        image.acknowledge_every(nanos(follower.ack_interval), nanos(follower.ack_gap));
        if let Some(durable) = &follower.ack_up_to {
            image.acknowledge_up_to(durable.clone());
        }
    }
    let Some(consumer) = image.register_consumer() else {
        counters.malformed.increment();
        return;
    };
    let handoff = ImageHandoff {
        log: image.log().clone(),
        reader: LogReader::new(image.log()),
        consumer,
        position: join,
        file: file.clone(),
    };
    // Only the newest image of a channel is kept: an older session is over once its publisher restarted.
    // Its file goes with it (a subscription still reading it keeps its mapping; the name is freed).
    channel.images.clear();
    channel.images.push(image);
    if let Some(old) = std::mem::replace(&mut channel.image_file, file) {
        if channel.image_file.as_ref() != Some(&old) && std::fs::remove_file(&old).is_ok() {
            counters.images_removed.increment();
        }
    }
    *channel.shared.newest.lock().expect("image hand-off lock") = Some(handoff);
    channel.shared.generation.fetch_add(1, Ordering::Release);
    counters.images.increment();
}

impl<T: Transport> Agent for Receiver<T> {
    fn name(&self) -> &str {
        "receiver"
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        Ok(self.poll_once())
    }

    fn parker(&mut self) -> Option<&mut dyn Park> {
        Some(&mut self.parker)
    }
}

#[cfg(test)]
mod tests;
