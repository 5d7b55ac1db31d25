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
//!
//! Files: this one holds the Receiver and its duty cycle; `config` what a channel is configured with,
//! `counters` its counters, `subscription` the image hand-off and the subscriptions that read it, `park`
//! its parking in `epoll_wait`, `dispatch` what each datagram does, `setup` SETUPs and the images they
//! make, `feedback` the status messages, NAKs and acknowledgements it sends.

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

mod config;
mod counters;
mod dispatch;
mod feedback;
mod park;
mod setup;
mod subscription;

pub use config::{FollowerObserver, FollowerSeam, ReceiveChannelConfig, SpareImage};
pub use counters::ReceiverCounters;
use dispatch::on_datagram;
use dispatch::on_foreign;
use feedback::{send_feedback_frame, FeedbackIdentity};
use park::ReadinessPark;
use setup::{ask_for_setup, install_pending, PendingImage, FIRST_ASK_RETRY_NS};
use subscription::ChannelShared;
pub use subscription::{ImageHandoff, Subscription};

/// Most `recvmmsg` batches one socket gets per duty cycle (16 x 32 = 512 datagrams), so one busy socket
/// cannot starve the others for long. A receiver invoked once per application loop (the invoker modes)
/// drains at most this per loop, so the cap must stay above what one Sender sends between two of its
/// loops, or the follower falls behind its leader.
const MAX_BATCHES_PER_CYCLE: usize = 16;

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
