//! One node of a segment's pair, as the application on its thread sees it: the [`Side`] a segment
//! drives, over UDP (a Sender, a Receiver, their log and subscription) or over IPC (two logs in this
//! process's memory), and the connected pairs of each.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::ipc::{IpcOfferError, IpcPublication, IpcSubscription};
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::SocketOptions;
use quorumcast_driver::shm::log_buffer::{AppendError, ExclusiveAppender, LogBuffer, LogConfig};

use super::Geometry;
use crate::STREAM;

/// One node, driven by one thread: offer into its outgoing stream, poll its incoming one, and run its
/// agents' duty cycles.
pub trait Side: Send {
    /// Offers one message; false when back-pressured (run [`Side::duty`] and offer again).
    fn offer(&mut self, message: &[u8]) -> bool;
    /// One duty cycle of the node's agents (UDP: Sender then Receiver; IPC: nothing).
    fn duty(&mut self);
    /// Hands up to `limit` fragments' worth of whole messages to `handler`; returns the fragments read.
    fn poll(&mut self, limit: usize, handler: &mut dyn FnMut(&[u8])) -> usize;
    /// A line of counters for a stall diagnosis.
    fn diagnose(&self) -> String;
}

/// A node over UDP: a Sender with one publication to the peer, a Receiver with one channel from it.
pub struct UdpSide {
    sender: Sender,
    receiver: Receiver,
    appender: ExclusiveAppender,
    subscription: Subscription,
    counters: SenderCounters,
}

impl Side for UdpSide {
    #[inline]
    fn offer(&mut self, message: &[u8]) -> bool {
        match self.appender.append(message) {
            Ok(_) => true,
            Err(AppendError::BackPressured) => {
                self.appender.refresh_limit_from_consumers();
                self.appender.append(message).is_ok()
            }
            Err(e) => panic!("append failed: {e}"),
        }
    }

    #[inline]
    fn duty(&mut self) {
        self.sender.poll_once();
        self.receiver.poll_once();
    }

    #[inline]
    fn poll(&mut self, limit: usize, handler: &mut dyn FnMut(&[u8])) -> usize {
        self.subscription.poll(limit, handler)
    }

    fn diagnose(&self) -> String {
        let c = &self.counters;
        let r = self.receiver.counters();
        format!(
            "appender at {}, sender at {}; data syscalls {}, control {}, retransmits {}, NAKs in {}, stalls {}, short sends {}; \
             receiver datagrams {}, NAKs out {}, SMs out {}, duplicates {}, out of window {}",
            self.appender.position(),
            self.sender.publications()[0].sender_position(),
            c.data_syscalls.get(),
            c.control_syscalls.get(),
            c.retransmits.get(),
            c.naks_received.get(),
            c.flow_control_stalls.get(),
            c.short_sends.get(),
            r.datagrams.get(),
            r.naks.get(),
            r.status_messages.get(),
            r.duplicates.get(),
            r.out_of_window.get(),
        )
    }
}

/// A node over IPC: the publication of its outgoing stream and the subscription of its incoming one (two
/// logs in this process's memory; no agent runs).
pub struct IpcSide {
    publication: IpcPublication,
    subscription: IpcSubscription,
}

impl Side for IpcSide {
    #[inline]
    fn offer(&mut self, message: &[u8]) -> bool {
        match self.publication.offer(message) {
            Ok(_) => true,
            Err(IpcOfferError::BackPressured) => false,
            Err(e) => panic!("IPC offer failed: {e}"),
        }
    }

    #[inline]
    fn duty(&mut self) {}

    #[inline]
    fn poll(&mut self, limit: usize, handler: &mut dyn FnMut(&[u8])) -> usize {
        self.subscription.poll(handler, limit)
    }

    fn diagnose(&self) -> String {
        format!(
            "IPC publication at {} (limit {}), subscription at {}",
            self.publication.position(),
            self.publication.limit(),
            self.subscription.position()
        )
    }
}

/// Two IPC nodes, A and B: a log A -> B and a log B -> A, each with its subscription on the other side.
pub fn ipc_pair(geometry: Geometry) -> (IpcSide, IpcSide) {
    let log = |stream_id| LogConfig { stream_id, ..LogConfig::new(geometry.term_length(), geometry.mtu()) };
    let a_to_b = IpcPublication::create_anonymous(log(STREAM)).expect("map the A -> B log");
    let b_reads = a_to_b.subscribe().expect("subscribe to A -> B");
    let b_to_a = IpcPublication::create_anonymous(log(STREAM + 1)).expect("map the B -> A log");
    let a_reads = b_to_a.subscribe().expect("subscribe to B -> A");
    (IpcSide { publication: a_to_b, subscription: a_reads }, IpcSide { publication: b_to_a, subscription: b_reads })
}

/// The channel configuration of a pair's streams.
fn channel(geometry: Geometry) -> ChannelConfig {
    ChannelConfig {
        mtu: geometry.mtu(),
        term_length: geometry.term_length(),
        receiver_window: geometry.term_length() / 4,
        socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(4 << 20) },
        // Loopback round trips are tens of microseconds: repair a loss within a millisecond.
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    }
}

/// Two UDP nodes, A and B, each publishing to the other, connected (SETUP answered, flow control live)
/// before they are returned.
pub fn udp_pair(geometry: Geometry) -> (UdpSide, UdpSide) {
    let channel = channel(geometry);
    let receiver = || {
        let mut config = ReceiveChannelConfig::new("127.0.0.1:0".parse().unwrap(), STREAM);
        config.channel = channel.clone();
        let (receiver, mut subscriptions, warnings) =
            Receiver::new(vec![config], ReceiverCounters::detached()).expect("bind a receive socket");
        warnings.iter().for_each(|w| eprintln!("warning: {w}"));
        (receiver, subscriptions.remove(0))
    };
    let (receiver_a, subscription_a) = receiver();
    let (receiver_b, subscription_b) = receiver();
    let side = |session_id: i32, to: SocketAddr, receiver: Receiver, subscription: Subscription| {
        let log_config = LogConfig {
            session_id,
            stream_id: STREAM,
            initial_term_id: 7,
            ..LogConfig::new(geometry.term_length(), geometry.mtu())
        };
        let log = LogBuffer::create_anonymous(log_config).expect("map a log");
        let mut appender = log.appender().expect("the log's appender");
        let counters = SenderCounters::detached();
        let publication =
            NetworkPublication::new(log, ChannelConfig { destinations: vec![to], ..channel.clone() }, counters.clone())
                .expect("open the publication");
        publication.warnings().iter().for_each(|w| eprintln!("warning: {w}"));
        appender.refresh_limit_from_consumers();
        UdpSide { sender: Sender::new(vec![publication]), receiver, appender, subscription, counters }
    };
    let to_b = receiver_b.local_addr(0);
    let to_a = receiver_a.local_addr(0);
    let mut a = side(11, to_b, receiver_a, subscription_a);
    let mut b = side(22, to_a, receiver_b, subscription_b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        a.duty();
        b.duty();
        let live = |s: &UdpSide| s.sender.publications()[0].flow_control().live_count() == 1;
        if a.subscription.is_connected() && b.subscription.is_connected() && live(&a) && live(&b) {
            return (a, b);
        }
        assert!(Instant::now() < deadline, "the UDP pair did not connect: A {}; B {}", a.diagnose(), b.diagnose());
        std::thread::yield_now();
    }
}
