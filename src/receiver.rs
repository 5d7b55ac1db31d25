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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use socket2::SockAddr;

use crate::agent::{Agent, AgentError};
use crate::channel::ChannelConfig;
use crate::clock::{nanos, NanoClock};
use crate::counters::Counter;
use crate::fault::FaultInjector;
use crate::frame::{
    self, AppendPositionFrame, DataHeader, Frame, NakFrame, SetupFrame, StatusMessageFrame, SM_SEND_SETUP_FLAG,
};
use crate::idle::Park;
use crate::image::{Feedback, ImageTimers, InsertOutcome, PublicationImage};
use crate::log_buffer::descriptor::position;
use crate::log_buffer::{ConsumerPosition, FragmentAssembler, LogBuffer, LogConfig, LogReader};
use crate::transport::{RecvBatch, UdpEndpoint, MAX_BATCH};

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
    /// Timers, window, socket buffers and faults (`receive_faults` act on what this channel receives).
    pub channel: ChannelConfig,
    /// Where image logs are made (a node directory); `None` maps them anonymously.
    pub image_dir: Option<PathBuf>,
    /// Start images here instead of at the publisher's current position (a follower that already has
    /// the log up to this position asks for the rest by NAK).
    pub join_position: Option<i64>,
    /// Identity sent in status messages, unique per receiver start.
    pub receiver_id: i64,
    /// Set when this channel carries a replicated log to a follower: acknowledge, and track commits.
    pub follower: Option<FollowerLink>,
}

/// A follower's side of the replicated log: what it acknowledges and where it learns the commit position.
#[derive(Clone, Debug)]
pub struct FollowerLink {
    /// This follower's member id, sent in its acknowledgements.
    pub member_id: i32,
    /// The commit position the leader has announced (commit frames, or piggybacked reserved values).
    pub commit: Counter,
    /// Read the commit position from data frames' reserved value too.
    pub piggyback: bool,
    /// Acknowledge at least this often, even when the log does not move.
    pub ack_interval: Duration,
}

impl ReceiveChannelConfig {
    /// A channel listening on `bind` for `stream_id`, with defaults for everything else.
    pub fn new(bind: SocketAddr, stream_id: i32) -> Self {
        Self {
            bind,
            stream_id,
            peers: Vec::new(),
            channel: ChannelConfig::default(),
            image_dir: None,
            join_position: None,
            receiver_id: unique_receiver_id(),
            follower: None,
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
    /// Datagrams from sources that are not configured peers.
    pub foreign: Counter,
    /// Datagrams for another stream or a session without an image.
    pub unknown_stream: Counter,
    /// Images created.
    pub images: Counter,
    /// Receive calls that failed with an unexpected error.
    pub recv_errors: Counter,
    /// Commit-position frames received.
    pub commits: Counter,
}

impl ReceiverCounters {
    /// Allocates every counter with `allocate(label)`.
    pub fn new(mut allocate: impl FnMut(&str) -> Counter) -> Self {
        Self {
            datagrams: allocate("receiver datagrams"),
            bytes: allocate("receiver bytes"),
            recv_syscalls: allocate("receiver recv syscalls"),
            status_messages: allocate("receiver status messages sent"),
            naks: allocate("receiver NAKs sent"),
            setups: allocate("receiver setups received"),
            heartbeats: allocate("receiver heartbeats received"),
            duplicates: allocate("receiver duplicates dropped"),
            out_of_window: allocate("receiver out-of-window dropped"),
            malformed: allocate("receiver malformed dropped"),
            foreign: allocate("receiver foreign source dropped"),
            unknown_stream: allocate("receiver unknown stream or session dropped"),
            images: allocate("receiver images"),
            recv_errors: allocate("receiver recv errors"),
            commits: allocate("receiver commit frames received"),
        }
    }

    /// Counters in private memory, for tests.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}

/// An image handed from the Receiver to the channel's subscriptions.
struct ImageHandoff {
    reader: LogReader,
    consumer: ConsumerPosition,
    position: i64,
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
    current: Option<(LogReader, ConsumerPosition, i64)>,
    reassembler: FragmentAssembler<()>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("position", &self.position()).finish()
    }
}

impl Subscription {
    fn new(shared: Arc<ChannelShared>) -> Self {
        Self { shared, generation: 0, current: None, reassembler: FragmentAssembler::new(()) }
    }

    /// Whether an image is connected.
    pub fn is_connected(&mut self) -> bool {
        self.refresh();
        self.current.is_some()
    }

    /// The position read up to, if connected.
    pub fn position(&self) -> Option<i64> {
        self.current.as_ref().map(|c| c.2)
    }

    fn refresh(&mut self) {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.generation = generation;
            if let Some(handoff) = self.shared.newest.lock().expect("image hand-off lock").take() {
                self.current = Some((handoff.reader, handoff.consumer, handoff.position));
                self.reassembler = FragmentAssembler::new(());
            }
        }
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages to `handler`; returns the number
    /// of fragments read. The position is published once per call.
    pub fn poll(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8])) -> usize {
        self.poll_bounded(i64::MAX, fragment_limit, &mut handler)
    }

    /// As [`poll`](Self::poll), reading nothing beyond `limit_position` (a follower applies only what the
    /// leader has committed).
    pub fn poll_bounded(
        &mut self,
        limit_position: i64,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8]),
    ) -> usize {
        self.refresh();
        let Some((reader, consumer, position)) = self.current.as_mut() else {
            return 0;
        };
        let mut fragments = 0;
        let reassembler = &mut self.reassembler;
        let mut next = *position;
        while fragments < fragment_limit {
            let mut read = 0;
            let mut deliver = |payload: &[u8], _: &DataHeader| handler(payload);
            let after = reader.poll_bounded(next, limit_position, fragment_limit - fragments, |payload, header| {
                read += 1;
                reassembler.on_fragment_with(payload, header, &mut deliver);
            });
            if after == next {
                break;
            }
            fragments += read;
            next = after;
        }
        if next != *position {
            *position = next;
            consumer.set(next);
        }
        fragments
    }
}

/// One receive socket, its images and its subscriptions' shared state.
struct ReceiveChannel {
    config: ReceiveChannelConfig,
    endpoint: UdpEndpoint,
    images: Vec<PublicationImage>,
    shared: Arc<ChannelShared>,
    faults: Option<FaultInjector>,
    timers: ImageTimers,
    next_elicit_ns: u64,
}

/// The Receiver agent.
pub struct Receiver {
    channels: Vec<ReceiveChannel>,
    batch: RecvBatch,
    clock: NanoClock,
    counters: ReceiverCounters,
    parker: ReadinessPark,
}

impl fmt::Debug for Receiver {
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
    /// Binds a socket for each channel and returns the Receiver with one subscription per channel, in order.
    pub fn new(
        configs: Vec<ReceiveChannelConfig>,
        counters: ReceiverCounters,
    ) -> std::io::Result<(Self, Vec<Subscription>, Vec<String>)> {
        let poll = Poll::new()?;
        let mut pending = Vec::with_capacity(configs.len());
        let mut channels = Vec::with_capacity(configs.len());
        let mut subscriptions = Vec::with_capacity(configs.len());
        let mut warnings = Vec::new();
        let mut max_datagram = 0;
        for config in configs {
            config.channel.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let (endpoint, w) = UdpEndpoint::bind(config.bind, &config.channel.socket)?;
            warnings.extend(w);
            pending.push(endpoint.raw_fd());
            let c = &config.channel;
            let timers = ImageTimers {
                nak_delay_ns: nanos(c.nak_delay),
                nak_retry_ns: nanos(c.nak_retry_delay),
                status_interval_ns: nanos(c.status_interval),
                window: c.receiver_window as i64,
            };
            let faults = c
                .receive_faults
                .is_active()
                .then(|| FaultInjector::new(c.receive_faults, frame::MAX_UDP_PAYLOAD_LENGTH));
            max_datagram = max_datagram.max(frame::MAX_UDP_PAYLOAD_LENGTH.min(c.mtu.max(4096)));
            let shared = Arc::new(ChannelShared::default());
            subscriptions.push(Subscription::new(Arc::clone(&shared)));
            channels.push(ReceiveChannel {
                config,
                endpoint,
                images: Vec::new(),
                shared,
                faults,
                timers,
                next_elicit_ns: 0,
            });
        }
        let batch = RecvBatch::new(MAX_BATCH.min(32), max_datagram.max(frame::MAX_UDP_PAYLOAD_LENGTH.min(9000)));
        let parker = ReadinessPark { poll, events: Events::with_capacity(channels.len().max(1)), pending };
        let receiver = Self { channels, batch, clock: NanoClock::new(), counters, parker };
        Ok((receiver, subscriptions, warnings))
    }

    /// The local address of channel `index` (a port 0 bind is resolved here).
    pub fn local_addr(&self, index: usize) -> SocketAddr {
        self.channels[index].endpoint.local_addr()
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
        let mut work = 0;
        for c in 0..self.channels.len() {
            work += self.receive(c, now_ns);
            work += self.send_feedback(c, now_ns);
        }
        work
    }

    fn receive(&mut self, c: usize, now_ns: u64) -> usize {
        let mut work = 0;
        for _ in 0..MAX_BATCHES_PER_CYCLE {
            self.counters.recv_syscalls.increment();
            let received = self.channels[c].endpoint.recv_batch(&mut self.batch).unwrap_or_else(|_| {
                self.counters.recv_errors.increment();
                0
            });
            for i in 0..received {
                let datagram = self.batch.datagram(i);
                self.counters.datagrams.increment();
                self.counters.bytes.add(datagram.bytes.len() as i64);
                let channel = &mut self.channels[c];
                if datagram.truncated {
                    self.counters.malformed.increment();
                    continue;
                }
                let Some(source) =
                    datagram.source.filter(|s| channel.config.peers.is_empty() || channel.config.peers.contains(s))
                else {
                    self.counters.foreign.increment();
                    continue;
                };
                match channel.faults.take() {
                    None => on_datagram(channel, &self.counters, source, datagram.bytes, now_ns),
                    Some(mut faults) => {
                        faults
                            .apply(datagram.bytes, |bytes| on_datagram(channel, &self.counters, source, bytes, now_ns));
                        channel.faults = Some(faults);
                    }
                }
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
            let id = FeedbackIdentity {
                session_id: image.session_id(),
                stream_id: image.stream_id(),
                receiver_id: channel.config.receiver_id,
                member_id: channel.config.follower.as_ref().map(|f| f.member_id),
            };
            let source = image.source();
            let endpoint = &channel.endpoint;
            let counters = &self.counters;
            work += image.feedback(now_ns, |feedback| send_feedback_frame(endpoint, counters, source, id, feedback));
        }
        if work == 0 {
            if let Some(mut faults) = channel.faults.take() {
                let source = channel.images.last().map(|i| i.source());
                if let Some(source) = source {
                    faults.flush(|bytes| on_datagram(channel, &self.counters, source, bytes, now_ns));
                }
                channel.faults = Some(faults);
            }
        }
        work
    }
}

/// Who a feedback frame is from and about.
#[derive(Clone, Copy)]
struct FeedbackIdentity {
    session_id: i32,
    stream_id: i32,
    receiver_id: i64,
    member_id: Option<i32>,
}

fn send_feedback_frame(
    endpoint: &UdpEndpoint,
    counters: &ReceiverCounters,
    source: SocketAddr,
    id: FeedbackIdentity,
    feedback: Feedback,
) {
    let FeedbackIdentity { session_id, stream_id, receiver_id, member_id } = id;
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
            sm.encode(&mut bytes)
        }
        Feedback::Ack { position } => {
            let ack = AppendPositionFrame {
                session_id,
                stream_id,
                log_position: position,
                member_id: member_id.unwrap_or(-1),
                ..AppendPositionFrame::default()
            };
            ack.encode(&mut bytes)
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
        let _ = endpoint.send(&bytes[..length], Some(&SockAddr::from(source)));
    }
}

/// Dispatches one datagram of channel `channel` from `source`.
fn on_datagram(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    bytes: &[u8],
    now_ns: u64,
) {
    match frame::parse(bytes) {
        Ok(Frame::Data { header, .. }) | Ok(Frame::Pad(header)) => {
            on_data(channel, counters, source, &header, bytes, now_ns)
        }
        Ok(Frame::Heartbeat(header)) => {
            counters.heartbeats.increment();
            match find_image(channel, &header, source) {
                Some(image) => {
                    image.on_heartbeat(&header);
                }
                None => elicit_setup(channel, counters, source, &header, now_ns),
            }
        }
        Ok(Frame::Setup(setup)) => on_setup(channel, counters, source, &setup, now_ns),
        Ok(Frame::CommitPosition(commit)) => match &channel.config.follower {
            Some(follower) if commit.stream_id == channel.config.stream_id => {
                counters.commits.increment();
                follower.commit.set_max(commit.log_position);
            }
            _ => counters.unknown_stream.increment(),
        },
        Ok(_) => counters.unknown_stream.increment(),
        Err(_) => counters.malformed.increment(),
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

fn on_data(
    channel: &mut ReceiveChannel,
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
    // Every frame of the datagram must parse, and be of the first frame's session and stream, before any
    // of it is written.
    let same_stream = |h: &DataHeader| h.session_id == header.session_id && h.stream_id == header.stream_id;
    let whole = frame::frames(bytes).all(|f| match f {
        Ok(Frame::Data { header: h, .. }) | Ok(Frame::Pad(h)) | Ok(Frame::Heartbeat(h)) => same_stream(&h),
        _ => false,
    });
    if !whole {
        counters.malformed.increment();
        return;
    }
    let Some(image) = find_image(channel, header, source) else {
        counters.unknown_stream.increment();
        elicit_setup(channel, counters, source, header, now_ns);
        return;
    };
    match image.insert(header, bytes) {
        InsertOutcome::Inserted => {
            if let Some(follower) = channel.config.follower.as_ref().filter(|f| f.piggyback) {
                let reserved = frame::frames(bytes).filter_map(|f| match f {
                    Ok(Frame::Data { header, .. }) => Some(header.reserved_value),
                    _ => None,
                });
                if let Some(commit) = reserved.max() {
                    follower.commit.set_max(commit);
                }
            }
        }
        InsertOutcome::Duplicate => counters.duplicates.increment(),
        InsertOutcome::OutOfWindow => counters.out_of_window.increment(),
        InsertOutcome::Malformed => counters.malformed.increment(),
    }
}

/// Asks an unknown publisher for a SETUP, at most once per status interval per channel.
fn elicit_setup(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    header: &DataHeader,
    now_ns: u64,
) {
    if header.stream_id != channel.config.stream_id || now_ns < channel.next_elicit_ns {
        return;
    }
    channel.next_elicit_ns = now_ns + channel.timers.status_interval_ns;
    let mut sm = StatusMessageFrame {
        session_id: header.session_id,
        stream_id: header.stream_id,
        consumption_term_id: header.term_id,
        consumption_term_offset: 0,
        receiver_window: 0,
        ..StatusMessageFrame::default()
    };
    sm.flags = SM_SEND_SETUP_FLAG;
    sm.set_receiver_id(channel.config.receiver_id);
    let mut bytes = [0u8; 64];
    if let Ok(length) = sm.encode(&mut bytes) {
        counters.status_messages.increment();
        let _ = channel.endpoint.send(&bytes[..length], Some(&SockAddr::from(source)));
    }
}

fn on_setup(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    setup: &SetupFrame,
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
    let bits = log_config.term_length.trailing_zeros();
    let setup_position = position(setup.active_term_id, setup.term_offset as usize, setup.initial_term_id, bits);
    if let Some(image) = channel.images.iter_mut().find(|i| i.session_id() == setup.session_id && i.source() == source)
    {
        // An image that has received nothing may move up to a newer SETUP (its first one went out long
        // enough ago for the stream to pass its window); one with data, or with a fixed join position, stays.
        let untouched = image.hwm() == image.join_position() && channel.config.join_position.is_none();
        if !untouched || setup_position <= image.join_position() {
            image.request_status();
            return;
        }
    }
    let log = match &channel.config.image_dir {
        Some(dir) => {
            LogBuffer::create(&dir.join(format!("image-{}-{}.log", setup.stream_id, setup.session_id)), log_config)
        }
        None => LogBuffer::create_anonymous(log_config),
    };
    let Ok(log) = log else {
        counters.malformed.increment();
        return;
    };
    let join = channel.config.join_position.map_or(setup_position, |p| p.min(setup_position));
    let mut image = PublicationImage::new(log, source, join, channel.timers, now_ns);
    if let Some(follower) = &channel.config.follower {
        image.acknowledge_every(nanos(follower.ack_interval));
    }
    let Some(consumer) = image.register_consumer() else {
        counters.malformed.increment();
        return;
    };
    let handoff = ImageHandoff { reader: LogReader::new(image.log()), consumer, position: join };
    // Only the newest image of a channel is kept: an older session is over once its publisher restarted.
    channel.images.clear();
    channel.images.push(image);
    *channel.shared.newest.lock().expect("image hand-off lock") = Some(handoff);
    channel.shared.generation.fetch_add(1, Ordering::Release);
    counters.images.increment();
}

impl Agent for Receiver {
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
