//! The send path over the in-process transport: a publication against a hand-driven receiving endpoint
//! (SETUP and status handshake, flow control, NAK and retransmit, control traffic it must refuse), and a
//! publication with a [`Sender`] against a [`Receiver`] (the stream rebuilt whole, a lost datagram
//! repaired, a subscriber that stops reading holding the stream back, faults on both sides). Time is a
//! number the test moves on; nothing here waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::frame::{NakFrame, StatusMessageFrame};
use crate::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use crate::media::sender::Sender;
use crate::media::transport::faulty::{FaultConfig, Faulty, FaultyTransport};
use crate::media::transport::memory::{MemoryEndpoint, MemoryNetwork};
use crate::shm::log_buffer::{AppendError, ExclusiveAppender, LogConfig};

const TERM: usize = 64 * 1024;
const MTU: usize = 1408;
const SESSION: i32 = 7;
const STREAM: i32 = 10;
const INITIAL_TERM: i32 = 3;
/// A message that frames to 256 bytes: five to a datagram at MTU 1408.
const SMALL: usize = 256 - DATA_HEADER_LENGTH;
const MS: u64 = 1_000_000;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn channel(destinations: Vec<SocketAddr>) -> ChannelConfig {
    ChannelConfig {
        destinations,
        term_length: TERM,
        mtu: MTU,
        receiver_window: 8 * 1024,
        status_interval: Duration::from_millis(1),
        setup_interval: Duration::from_millis(1),
        heartbeat_interval: Duration::from_millis(1),
        nak_delay: Duration::from_micros(100),
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        ..ChannelConfig::default()
    }
}

fn log() -> (LogBuffer, ExclusiveAppender) {
    let config = LogConfig {
        session_id: SESSION,
        stream_id: STREAM,
        initial_term_id: INITIAL_TERM,
        ..LogConfig::new(TERM, MTU)
    };
    let log = LogBuffer::create_anonymous(config).unwrap();
    let appender = log.appender().unwrap();
    (log, appender)
}

fn publication<N: Network>(
    network: &mut N,
    config: ChannelConfig,
) -> (NetworkPublication<N::Endpoint>, ExclusiveAppender) {
    let (log, mut appender) = log();
    let publication = NetworkPublication::open(log, config, SenderCounters::detached(), network).unwrap();
    appender.refresh_limit_from_consumers(); // the publication's sender is the log's consumer
    (publication, appender)
}

/// The term offsets and lengths of the data datagrams among `datagrams`.
fn data_runs(datagrams: &[Vec<u8>]) -> Vec<(i32, usize)> {
    datagrams
        .iter()
        .filter_map(|d| match frame::parse(d) {
            Ok(Frame::Data { header, .. }) => Some((header.term_offset, d.len())),
            _ => None,
        })
        .collect()
}

fn send_to(from: &mut MemoryEndpoint, to: SocketAddr, bytes: &[u8]) {
    assert!(matches!(from.send(bytes, Some(&SockAddr::from(to))), SendOutcome::Sent(1)));
}

/// A status message from `rx` for the test log: received up to `offset` of the initial term, `window` more.
fn status(rx: &mut MemoryEndpoint, to: SocketAddr, offset: i32, window: i32) {
    let mut sm = StatusMessageFrame {
        session_id: SESSION,
        stream_id: STREAM,
        consumption_term_id: INITIAL_TERM,
        consumption_term_offset: offset,
        receiver_window: window,
        ..StatusMessageFrame::default()
    };
    sm.set_receiver_id(42);
    let mut bytes = [0u8; 64];
    let length = sm.encode(&mut bytes).unwrap();
    send_to(rx, to, &bytes[..length]);
}

fn nak(rx: &mut MemoryEndpoint, to: SocketAddr, offset: i32, length: i32) {
    let nak = NakFrame {
        session_id: SESSION,
        stream_id: STREAM,
        term_id: INITIAL_TERM,
        term_offset: offset,
        length,
        ..NakFrame::default()
    };
    let mut bytes = [0u8; 64];
    let n = nak.encode(&mut bytes).unwrap();
    send_to(rx, to, &bytes[..n]);
}

fn control<T: Transport>(publication: &mut NetworkPublication<T>, now_ns: u64) -> usize {
    let mut batch = RecvBatch::new(16, 1024);
    publication.poll_control(now_ns, &mut batch, true)
}

#[test]
fn a_setup_repeats_until_a_status_message_makes_the_receiver_live() {
    let net = MemoryNetwork::new();
    let mut rx = net.bind(loopback(), false).unwrap();
    let (mut publication, _appender) = publication(&mut net.clone(), channel(vec![rx.local_addr()]));
    let from = publication.local_addrs()[0];
    assert_eq!(publication.flow_control().live_count(), 0);

    publication.send(0);
    let got = rx.drain();
    assert_eq!(got.len(), 1);
    let Ok(Frame::Setup(setup)) = frame::parse(&got[0]) else { panic!("not a SETUP: {got:?}") };
    assert_eq!((setup.session_id, setup.stream_id), (SESSION, STREAM));
    assert_eq!((setup.initial_term_id, setup.active_term_id, setup.term_offset), (INITIAL_TERM, INITIAL_TERM, 0));
    assert_eq!((setup.term_length, setup.mtu), (TERM as i32, MTU as i32));

    publication.send(MS / 2);
    assert!(rx.drain().is_empty(), "not again within the setup interval");
    publication.send(MS);
    assert_eq!(rx.drain().len(), 1, "again after it");

    status(&mut rx, from, 0, 4096);
    assert_eq!(control(&mut publication, MS), 1);
    assert_eq!(publication.counters().status_messages.get(), 1);
    assert_eq!(publication.flow_control().live_count(), 1);
    publication.send(3 * MS);
    let got = rx.drain();
    assert!(got.iter().all(|d| !matches!(frame::parse(d), Ok(Frame::Setup(_)))), "no SETUP to a live receiver");
    assert!(matches!(frame::parse(&got[0]), Ok(Frame::Heartbeat(_))), "an idle stream heartbeats: {got:?}");
    assert_eq!(publication.counters().setups.get(), 2);
}

#[test]
fn the_sender_stops_at_the_receiver_window_and_goes_on_when_it_moves() {
    let net = MemoryNetwork::new();
    let mut rx = net.bind(loopback(), false).unwrap();
    let (mut publication, mut appender) = publication(&mut net.clone(), channel(vec![rx.local_addr()]));
    let from = publication.local_addrs()[0];
    for _ in 0..64 {
        appender.append(&[5; SMALL]).unwrap();
    }
    publication.send(0);
    assert_eq!(publication.sender_position(), 0, "no data before a receiver is live");
    rx.drain();

    status(&mut rx, from, 0, 4096);
    control(&mut publication, 0);
    publication.send(1);
    assert_eq!(publication.sender_position(), 4096);
    let runs = data_runs(&rx.drain());
    assert_eq!(
        runs,
        [(0, 1280), (1280, 1280), (2560, 1280), (3840, 256)],
        "whole frames up to the MTU, then the window"
    );
    assert_eq!(publication.counters().datagrams.get(), 4);

    publication.send(2);
    assert_eq!(publication.sender_position(), 4096, "the window is closed");
    assert!(data_runs(&rx.drain()).is_empty());
    assert_eq!(publication.counters().flow_control_stalls.get(), 1);
    assert!(publication.counters().window_closed_cycles.get() >= 1);

    status(&mut rx, from, 4096, 4096);
    control(&mut publication, 3);
    publication.send(4);
    assert_eq!(publication.sender_position(), 8192);
    assert_eq!(publication.counters().limit.get(), 8192);
}

#[test]
fn a_nak_is_answered_by_resending_the_range_once_per_linger() {
    let net = MemoryNetwork::new();
    let mut rx = net.bind(loopback(), false).unwrap();
    let (mut publication, mut appender) = publication(&mut net.clone(), channel(vec![rx.local_addr()]));
    let from = publication.local_addrs()[0];
    for i in 0..16u8 {
        appender.append(&[i; SMALL]).unwrap();
    }
    status(&mut rx, from, 0, 8192);
    control(&mut publication, 0);
    publication.send(0);
    let sent: Vec<Vec<u8>> = rx.drain().into_iter().filter(|d| frame::data_run(d).is_ok()).collect();
    assert_eq!(publication.sender_position(), 16 * 256);

    nak(&mut rx, from, 1280, 1280);
    control(&mut publication, 10);
    assert_eq!(rx.drain(), vec![sent[1].clone()], "the second datagram, byte for byte");
    assert_eq!(publication.counters().naks_received.get(), 1);
    assert_eq!(publication.counters().retransmits.get(), 1);

    nak(&mut rx, from, 1280, 1280);
    control(&mut publication, 20);
    assert!(rx.drain().is_empty(), "the same range is not resent within the linger");
    publication.send(2 * MS); // ends the linger
    rx.drain();
    nak(&mut rx, from, 1280, 1280);
    control(&mut publication, 2 * MS);
    assert_eq!(rx.drain(), vec![sent[1].clone()]);

    nak(&mut rx, from, 8192, 256);
    control(&mut publication, 3 * MS);
    assert!(rx.drain().is_empty(), "nothing beyond what was sent");
    assert_eq!(publication.counters().invalid_packets.get(), 1);
}

#[test]
fn malformed_foreign_and_other_session_control_is_counted_and_dropped() {
    let net = MemoryNetwork::new();
    let mut rx = net.bind(loopback(), false).unwrap();
    let mut stranger = net.bind(loopback(), false).unwrap();
    // Mmsg: one unconnected socket, which any source can reach.
    let config = ChannelConfig { send_mode: SendMode::Mmsg, ..channel(vec![rx.local_addr()]) };
    let (mut publication, _appender) = publication(&mut net.clone(), config);
    assert_eq!(publication.send_mode(), SendMode::Mmsg);
    let from = publication.local_addrs()[0];

    send_to(&mut rx, from, &[0xff; 12]);
    status(&mut stranger, from, 0, 4096);
    let mut sm = StatusMessageFrame { session_id: SESSION + 1, stream_id: STREAM, ..StatusMessageFrame::default() };
    sm.receiver_window = 4096;
    let mut bytes = [0u8; 64];
    let n = sm.encode(&mut bytes).unwrap();
    send_to(&mut rx, from, &bytes[..n]);
    assert_eq!(control(&mut publication, 0), 3);

    let counters = publication.counters();
    assert_eq!(counters.invalid_packets.get(), 3);
    assert_eq!(counters.foreign.get(), 1);
    assert_eq!(counters.status_messages.get(), 0);
    assert_eq!(publication.flow_control().live_count(), 0, "none of them made a receiver live");
}

/// A receiver on `network` for the test stream, accepting any source.
fn receiver<N: Network>(
    network: &mut N,
    config: ChannelConfig,
) -> (Receiver<N::Endpoint>, Subscription, ReceiverCounters) {
    let mut rc = ReceiveChannelConfig::new(loopback(), STREAM);
    rc.channel = config;
    let counters = ReceiverCounters::detached();
    let (receiver, mut subscriptions, _) = Receiver::open(vec![rc], counters.clone(), network).unwrap();
    (receiver, subscriptions.remove(0), counters)
}

/// Message `i`: a mix of small ones and ones that take three fragments at MTU 1408.
fn message(i: u32) -> Vec<u8> {
    let length = if i % 7 == 3 { 3000 } else { 8 + (i as usize * 37) % 200 };
    let mut bytes = vec![(i % 251) as u8; length];
    bytes[..4].copy_from_slice(&i.to_le_bytes());
    bytes
}

/// A publication on a Sender, streaming to a Receiver and its subscription, run a step at a time.
struct Stream<T: Transport, R: Transport> {
    sender: Sender<T>,
    receiver: Receiver<R>,
    subscription: Subscription,
    appender: ExclusiveAppender,
    now_ns: u64,
    offered: u32,
    read: Vec<Vec<u8>>,
}

impl<T: Transport, R: Transport> Stream<T, R> {
    /// Offers messages up to the `total`-th as back-pressure allows, runs the Sender and the Receiver at
    /// 20 us of test time past the last step, and reads the subscription when `read` says so.
    fn step(&mut self, total: u32, read: bool) {
        self.offer(total);
        self.now_ns += 20_000;
        self.sender.poll_at(self.now_ns);
        self.receiver.poll_at(self.now_ns);
        if read {
            let read = &mut self.read;
            self.subscription.poll(64, |m| read.push(m.to_vec()));
        }
    }

    /// Offers messages up to the `total`-th as back-pressure allows.
    fn offer(&mut self, total: u32) {
        while self.offered < total {
            match self.appender.append(&message(self.offered)) {
                Ok(_) => self.offered += 1,
                Err(AppendError::BackPressured) => {
                    self.appender.refresh_limit_from_consumers();
                    break;
                }
                Err(e) => panic!("append: {e}"),
            }
        }
    }

    /// Steps until `total` messages were read, in at most `steps` steps, and checks them.
    fn run(&mut self, total: u32, steps: usize) {
        for _ in 0..steps {
            if self.read.len() == total as usize {
                break;
            }
            self.step(total, true);
        }
        assert_eq!(self.read.len(), total as usize, "every message within {steps} steps");
        for (i, m) in self.read.iter().enumerate() {
            assert!(*m == message(i as u32), "message {i} intact and in order");
        }
    }

    fn publication(&self) -> &NetworkPublication<T> {
        &self.sender.publications()[0]
    }
}

fn stream<N: Network + Clone>(
    network: N,
    send: ChannelConfig,
    receive: ChannelConfig,
) -> Stream<N::Endpoint, N::Endpoint> {
    stream_on(network.clone(), network, send, receive)
}

/// A stream whose publication binds on `publisher` and whose Receiver binds on `subscriber`.
fn stream_on<P: Network, R: Network>(
    mut publisher: P,
    mut subscriber: R,
    send: ChannelConfig,
    receive: ChannelConfig,
) -> Stream<P::Endpoint, R::Endpoint> {
    let (receiver, subscription, _) = receiver(&mut subscriber, receive);
    let config = ChannelConfig { destinations: vec![receiver.local_addr(0)], ..send };
    let (publication, appender) = publication(&mut publisher, config);
    Stream {
        sender: Sender::new(vec![publication]),
        receiver,
        subscription,
        appender,
        now_ns: 0,
        offered: 0,
        read: Vec::new(),
    }
}

#[test]
fn a_stream_is_rebuilt_whole_in_every_send_mode() {
    for mode in SendMode::ALL {
        let net = MemoryNetwork::new();
        let mut s = stream(net.clone(), ChannelConfig { send_mode: mode, ..channel(vec![]) }, channel(vec![]));
        assert_eq!(s.publication().send_mode(), mode);
        s.run(2000, 100_000);
        assert_eq!(s.publication().counters().retransmits.get(), 0, "{mode}: nothing lost, nothing resent");
        assert_eq!(s.receiver.counters().naks.get(), 0);
        assert_eq!(s.receiver.images(0).len(), 1);
    }
}

#[test]
fn a_lost_datagram_is_naked_and_retransmitted() {
    let net = MemoryNetwork::new();
    // Lose the first data datagram at term offset 2560 (the third of the stream), once.
    let lost = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&lost);
    net.set_filter(move |_, _, bytes| match frame::parse(bytes) {
        Ok(Frame::Data { header, .. }) if header.term_offset >= 2560 && !flag.load(Ordering::Relaxed) => {
            flag.store(true, Ordering::Relaxed);
            false
        }
        _ => true,
    });
    let mut s = stream(net.clone(), channel(vec![]), channel(vec![]));
    s.run(500, 100_000);
    assert!(lost.load(Ordering::Relaxed));
    assert_eq!(net.stats().filtered, 1);
    assert!(s.receiver.counters().naks.get() >= 1);
    assert!(s.publication().counters().naks_received.get() >= 1);
    assert!(s.publication().counters().retransmits.get() >= 1);
}

#[test]
fn a_subscriber_that_stops_reading_holds_the_sender_at_half_a_term() {
    let net = MemoryNetwork::new();
    let mut s = stream(net.clone(), channel(vec![]), channel(vec![]));
    for _ in 0..5000 {
        s.step(u32::MAX, false);
    }
    // The receiver advertises no more than the log holds beyond its slowest subscriber: half a term, which
    // the sender fills up to its last whole frame.
    let held = s.publication().sender_position();
    assert!(held <= (TERM / 2) as i64 && held > (TERM / 2 - MTU) as i64, "held at {held}");
    assert_eq!(s.receiver.images(0)[0].rebuild_position(), held);
    assert!(s.publication().counters().flow_control_stalls.get() >= 1);
    assert!(s.read.is_empty());
    let total = s.offered + 200;
    s.run(total, 100_000);
    assert!(s.publication().sender_position() > (TERM / 2) as i64);
}

#[test]
fn a_stream_is_rebuilt_whole_through_faults_on_both_sides_in_every_send_mode() {
    let faults = |seed| FaultConfig { drop: 0.05, duplicate: 0.02, reorder: 0.02, seed };
    for mode in SendMode::ALL {
        let send =
            ChannelConfig { send_mode: mode, send_faults: faults(1), receive_faults: faults(2), ..channel(vec![]) };
        let receive = ChannelConfig { receive_faults: faults(3), ..channel(vec![]) };
        let net = MemoryNetwork::new();
        let publisher = Faulty::new(net.clone(), send.send_faults, send.receive_faults);
        let subscriber = Faulty::new(net, FaultConfig::default(), receive.receive_faults);
        let mut s: Stream<FaultyTransport<MemoryEndpoint>, _> = stream_on(publisher, subscriber, send, receive);
        assert_eq!(s.publication().send_mode(), mode);
        s.run(3000, 400_000);
        assert!(s.receiver.counters().naks.get() > 0, "{mode}");
        assert!(s.publication().counters().retransmits.get() > 0, "{mode}");
    }
}

/// Simulated nanoseconds a send (any kind) takes on a [`Slow`] network, and a poll.
const SEND_NS: u64 = 1_000;
const POLL_NS: u64 = 300;

/// The memory network with a simulated time that each call moves on: a send by [`SEND_NS`], a poll by
/// [`POLL_NS`], counting both.
#[derive(Clone)]
struct Slow {
    network: MemoryNetwork,
    time: Arc<crate::agent::clock::SimulatedTime>,
    calls: Arc<[std::sync::atomic::AtomicU64; 2]>,
}

struct SlowEndpoint {
    inner: MemoryEndpoint,
    slow: Slow,
}

impl SlowEndpoint {
    fn spend(&self, which: usize, ns: u64) {
        self.slow.calls[which].fetch_add(1, Ordering::Relaxed);
        self.slow.time.advance_to(self.slow.time.now_ns() + ns);
    }
}

impl Network for Slow {
    type Endpoint = SlowEndpoint;

    fn bind(
        &mut self,
        local: SocketAddr,
        binding: &crate::media::transport::Binding<'_>,
    ) -> std::io::Result<(SlowEndpoint, Vec<String>)> {
        let (inner, warnings) = Network::bind(&mut self.network, local, binding)?;
        Ok((SlowEndpoint { inner, slow: self.clone() }, warnings))
    }

    fn supports(&self, mode: SendMode) -> bool {
        self.network.supports(mode)
    }
}

impl Transport for SlowEndpoint {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn connect(&mut self, peer: SocketAddr) -> std::io::Result<()> {
        self.inner.connect(peer)
    }

    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        self.spend(0, SEND_NS);
        self.inner.send(datagram, dest)
    }

    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        self.spend(0, SEND_NS);
        self.inner.send_with_tag(datagram, tag, dest)
    }

    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        self.spend(0, SEND_NS);
        self.inner.send_mmsg(datagrams, dests, scratch)
    }

    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        self.spend(0, SEND_NS);
        self.inner.send_gso(data, segment)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> std::io::Result<usize> {
        self.spend(1, POLL_NS);
        self.inner.recv_batch(batch)
    }
}

#[test]
fn the_time_split_books_every_call_to_its_class_and_tiles_the_sender_s_time() {
    use crate::agent::clock::{NanoClock, SimulatedTime};
    use crate::media::time_split::TimeSplitCounters;
    for mode in SendMode::ALL {
        let time = SimulatedTime::new(0);
        let net = MemoryNetwork::new();
        let slow = Slow { network: net.clone(), time: Arc::clone(&time), calls: Arc::default() };
        let send = ChannelConfig { send_mode: mode, ..channel(vec![]) };
        let mut s = stream_on(slow.clone(), net, send, channel(vec![]));
        s.sender.set_clock(NanoClock::simulated(Arc::clone(&time)));
        let split = TimeSplitCounters::detached();
        s.sender.split_time(split.clone());
        let first_ns = time.now_ns();
        let mut cycles = 0;
        for _ in 0..2_000 {
            if s.read.len() == 500 {
                break;
            }
            // 20 us between the Sender's cycles, none inside them but the calls' own time.
            time.advance_to(time.now_ns() + 20_000);
            s.offer(500);
            s.sender.poll_once();
            s.receiver.poll_at(time.now_ns());
            let read = &mut s.read;
            s.subscription.poll(64, |m| read.push(m.to_vec()));
            cycles += 1;
        }
        assert_eq!(s.read.len(), 500, "{mode}: the stream went through");
        let counters = s.publication().counters();
        let [sends, polls] = [0, 1].map(|i| slow.calls[i].load(Ordering::Relaxed));
        let values =
            [&split.data_call_ns, &split.control_call_ns, &split.own_code_ns, &split.idle_ns].map(|c| c.get() as u64);
        let between = split.between_cycles_ns.get() as u64;
        assert_eq!(values[0], SEND_NS * counters.data_syscalls.get() as u64, "{mode}: data calls");
        assert_eq!(values[2], 0, "{mode}: no simulated time passes in the Sender's own code");
        assert_eq!(
            values[0] + values[1] + values[3],
            SEND_NS * sends + POLL_NS * polls,
            "{mode}: every call is in data, control or (a poll on a cycle that sent nothing) idle"
        );
        assert!(values[1] >= SEND_NS, "{mode}: the SETUP at least is a control call");
        assert_eq!(between, 20_000 * (cycles - 1), "{mode}: between cycles");
        assert_eq!(
            values.iter().sum::<u64>() + between + 20_000,
            time.now_ns() - first_ns,
            "{mode}: the classes tile the time"
        );
    }
}
