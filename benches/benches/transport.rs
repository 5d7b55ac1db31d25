//! Transport benchmark: the segments of `docs/BASELINE.md` over our UDP stream and our IPC medium, the raw
//! datagram rate of our Sender in each send mode next to bare `sendmsg`, our request round trip next to a
//! bare UDP ping-pong, and one publication streaming to one subscriber next to the model, all in one run.
//!
//! Run with `cargo bench --bench transport` (`-- --help` lists the options: `--part segments,rates,stream`
//! picks parts, `--mtu`, `--msg`, `--send-mode` and `--seconds` shape the stream; `--quick` cuts every count
//! and window by 10x for a smoke run). Exactly two busy threads, pinned to cores 0 and 1 when the host
//! allows. Prints the segment table in docs/BASELINE.md's layout (BASELINE's figures are another system on
//! another machine: reference only), the round-trip table, the sender-rate table, the stream table and the
//! targets, and writes `target/transport/<timestamp>/summary.json`, pointed at by `target/transport/latest`.
//!
//! How a segment runs over UDP: two nodes in one process, A and B, each with a Sender (one network
//! publication to the other node), a Receiver (one channel from the other node) and a subscription. Thread
//! 1 drives node A in invoker style (its Sender and Receiver duty cycles, then the application: offer and
//! poll), thread 2 drives node B the same way. One-way segments offer on A and read on B; the clock runs
//! from the first offer to the receipt of the last message. Request segments send requests A -> B and
//! responses B -> A. Each throughput segment runs once to warm up, then three times; the median is
//! reported. The invoker runs once per MTU of offered bytes, and whenever the appender is back-pressured.
//! The "datagram" and "stream" segments are the same publication -> subscription path (our log is a
//! message stream either way); they differ only in sizes and counts, as in BASELINE.
//!
//! Round trips: every RTT figure (our UDP and IPC request round trips, and the bare UDP ping-pong floor)
//! rests on [`RTT_ROUND_TRIPS`] (100k) round trips, in three runs, each of ours after one of the floor's,
//! merged into one histogram; the table gives p50, p99, p99.9, max and mean. `--quick` takes 10k and says
//! so.
//!
//! Sender rate: one publication per send mode and size, to two plain sockets that the second thread
//! drains with `recvmmsg`; the bench thread keeps the log topped up with one frame of exactly the datagram
//! size per message and acknowledges the Sender's own position about once a millisecond; both are kept
//! out of the measured time. Windows of bare `sendmsg` (two connected sockets, alternated) run in the
//! same rounds, so each point is read against the bare rate of its own round.
//!
//! Stream: see `benches/benches/stream` (one row per MTU x message size x send mode, about 1.5 s each).
//!
//! Exploration knobs: `QC_BENCH_ONLY=<substring>` runs only the matching segments (and `QC_BENCH_RATES=1`
//! adds the sender-rate and stream parts); `QC_BENCH_DIAG=1` prints counters after each segment and rate
//! window.

mod stream;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use quorumcast_bench::bench::{self, median, new_histogram, record, si, Cores, Percentiles, SetOnDrop};
use quorumcast_driver::frame::{StatusMessageFrame, DATA_HEADER_LENGTH};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::ipc::{IpcOfferError, IpcPublication, IpcSubscription};
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::{RecvBatch, SendMode, SendOutcome, SocketOptions, UdpEndpoint};
use quorumcast_driver::shm::counters::Counter;
use quorumcast_driver::shm::log_buffer::{position_bits_to_shift, term_id, term_offset};
use quorumcast_driver::shm::log_buffer::{AppendError, ExclusiveAppender, LogBuffer, LogConfig};
use serde_json::json;
use socket2::SockAddr;
use stream::StreamPlan;

/// Stream id of every bench stream.
const STREAM: i32 = 1001;
/// Fragments one subscription poll may read.
const FRAGMENT_LIMIT: usize = 1024;
/// Requests in flight in the pipelined segment.
const PIPELINE_WINDOW: usize = 256;
/// Measured repetitions of each segment (the median is reported).
const REPEATS: usize = 3;
/// Longest any one segment run may take before the bench gives up with a diagnosis.
const STALL: Duration = Duration::from_secs(30);
/// Rounds of sender-rate windows (each round: bare, classic, mmsg, gso, one window each).
const RATE_ROUNDS: usize = 5;
/// Round trips behind every RTT figure (ours and the bare UDP ping-pong floor's), in [`REPEATS`] runs
/// interleaved with the floor's; `--quick` takes a tenth and says so.
const RTT_ROUND_TRIPS: usize = 100_000;
/// Targets.
const TARGET_CLASSIC_OVER_BARE: f64 = 0.90;
const TARGET_RTT_OVER_FLOOR: f64 = 1.5;

// ---------------------------------------------------------------------------------------------------
// Segments
// ---------------------------------------------------------------------------------------------------

/// What a segment does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `count` messages of `size` bytes offered on A, read on B.
    OneWay,
    /// One request of `size` bytes at a time A -> B, its response B -> A; latency per round trip.
    Rtt,
    /// Up to [`PIPELINE_WINDOW`] requests outstanding.
    Pipeline,
}

/// Which node pair (MTU and term length) a segment uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Geometry {
    /// MTU 1408 (the conservative preset), term 1 MiB: 64-byte messages.
    Small,
    /// MTU 8192, term 4 MiB (a 64 KiB message needs term >= 512 KiB): 1 KiB and 64 KiB messages.
    Large,
}

impl Geometry {
    fn mtu(self) -> usize {
        match self {
            Geometry::Small => 1408,
            Geometry::Large => 8192,
        }
    }

    fn term_length(self) -> usize {
        match self {
            Geometry::Small => 1 << 20,
            Geometry::Large => 4 << 20,
        }
    }
}

/// One of docs/BASELINE.md's segments, with BASELINE's figures (another system, another machine) beside it.
struct Segment {
    name: &'static str,
    shape: Shape,
    size: usize,
    count: usize,
    geometry: Geometry,
    baseline_tcp: &'static str,
    baseline_inprocess: &'static str,
}

const SEGMENTS: [Segment; 6] = [
    Segment {
        name: "datagram 64B x 100k (serial, one way)",
        shape: Shape::OneWay,
        size: 64,
        count: 100_000,
        geometry: Geometry::Small,
        baseline_tcp: "47.7k msg/s",
        baseline_inprocess: "5.75M msg/s",
    },
    Segment {
        name: "datagram 64KiB x 2k",
        shape: Shape::OneWay,
        size: 64 * 1024,
        count: 2_000,
        geometry: Geometry::Large,
        baseline_tcp: "5.07k msg/s (317 MB/s)",
        baseline_inprocess: "5.77M msg/s (by reference)",
    },
    Segment {
        name: "request RTT 64B x 100k",
        shape: Shape::Rtt,
        size: 64,
        count: RTT_ROUND_TRIPS,
        geometry: Geometry::Small,
        baseline_tcp: "mean 86 · p50 81 · p99 165 us",
        baseline_inprocess: "mean 2 us",
    },
    Segment {
        name: "request pipeline 64B window 256 x 50k",
        shape: Shape::Pipeline,
        size: 64,
        count: 50_000,
        geometry: Geometry::Small,
        baseline_tcp: "49.4k op/s",
        baseline_inprocess: "812k op/s",
    },
    Segment {
        name: "stream 64KiB frames x 2k (125MB)",
        shape: Shape::OneWay,
        size: 64 * 1024,
        count: 2_000,
        geometry: Geometry::Large,
        baseline_tcp: "308 MB/s (4.9k frames/s)",
        baseline_inprocess: "~118 GB/s (pass-through)",
    },
    Segment {
        name: "stream 1KiB frames x 20k (20MB)",
        shape: Shape::OneWay,
        size: 1024,
        count: 20_000,
        geometry: Geometry::Large,
        baseline_tcp: "45 MB/s (45.8k frames/s)",
        baseline_inprocess: "4.5 GB/s",
    },
];

/// A segment's measured figures.
#[derive(Clone, Debug, Default)]
struct Figures {
    msgs_per_s: f64,
    mb_per_s: f64,
    /// Round trips, for the RTT segment.
    rtt: Option<Percentiles>,
    /// The bare UDP ping-pong's round trips, beside the UDP RTT segment.
    floor: Option<Percentiles>,
}

impl Figures {
    fn describe(&self, shape: Shape) -> String {
        match (shape, &self.rtt) {
            (Shape::Rtt, Some(rtt)) => rtt.describe(),
            (Shape::Pipeline, _) => format!("{} op/s", si(self.msgs_per_s)),
            _ => format!("{} msg/s ({:.0} MB/s)", si(self.msgs_per_s), self.mb_per_s),
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// One node of a pair, as the application on its thread sees it
// ---------------------------------------------------------------------------------------------------

/// One node, driven by one thread: offer into its outgoing stream, poll its incoming one, and run its
/// agents' duty cycles.
trait Side: Send {
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
struct UdpSide {
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
struct IpcSide {
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
fn ipc_pair(geometry: Geometry) -> (IpcSide, IpcSide) {
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
fn udp_pair(geometry: Geometry) -> (UdpSide, UdpSide) {
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

/// Aligned length of a message's frames in the log (header per fragment, 32-byte alignment).
fn framed(size: usize, mtu: usize) -> usize {
    let payload = mtu - DATA_HEADER_LENGTH;
    let fragments = size.div_ceil(payload).max(1);
    (size + fragments * DATA_HEADER_LENGTH + 31) & !31
}

// ---------------------------------------------------------------------------------------------------
// Segment drivers (generic over the medium)
// ---------------------------------------------------------------------------------------------------

fn seq_of(message: &[u8]) -> u64 {
    u64::from_le_bytes(message[..8].try_into().expect("messages carry a sequence number"))
}

/// Offers `message`, running the invoker while back-pressured.
#[inline]
fn offer_blocking(side: &mut dyn Side, message: &[u8]) {
    let deadline = Instant::now() + STALL;
    while !side.offer(message) {
        side.duty();
        assert!(Instant::now() < deadline, "back-pressured for {STALL:?}: {}", side.diagnose());
    }
}

/// `count` messages of `size` bytes A -> B; returns messages per second, first offer to last receipt.
fn one_way(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize, mtu: usize) -> f64 {
    let stop = AtomicBool::new(false);
    let framed = framed(size, mtu);
    let (start, end) = cores.run(
        || {
            let mut message = vec![0xA5u8; size];
            let start = Instant::now();
            let mut since_duty = 0;
            for seq in 0..count as u64 {
                message[..8].copy_from_slice(&seq.to_le_bytes());
                offer_blocking(a, &message);
                since_duty += framed;
                if since_duty >= mtu {
                    a.duty();
                    since_duty = 0;
                }
            }
            while !stop.load(Ordering::Acquire) {
                a.duty();
            }
            start
        },
        || {
            let mut next = 0u64;
            let deadline = Instant::now() + STALL;
            while next < count as u64 {
                b.duty();
                b.poll(FRAGMENT_LIMIT, &mut |m| {
                    assert_eq!((seq_of(m), m.len()), (next, size), "a message lost, reordered or cut");
                    next += 1;
                });
                if Instant::now() > deadline {
                    stop.store(true, Ordering::Release);
                    panic!("one-way stalled at {next} of {count}: B {}", b.diagnose());
                }
            }
            let end = Instant::now();
            stop.store(true, Ordering::Release);
            end
        },
    );
    count as f64 / end.duration_since(start).as_secs_f64()
}

/// The responder of the request segments: echoes every request B receives until told to stop.
fn respond(b: &mut dyn Side, stop: &AtomicBool) {
    let mut pending: Vec<u8> = Vec::with_capacity(PIPELINE_WINDOW * 64);
    let mut sizes: Vec<usize> = Vec::with_capacity(PIPELINE_WINDOW);
    while !stop.load(Ordering::Acquire) {
        b.duty();
        b.poll(FRAGMENT_LIMIT, &mut |m| {
            pending.extend_from_slice(m);
            sizes.push(m.len());
        });
        let mut at = 0;
        for &size in &sizes {
            offer_blocking(b, &pending[at..at + size]);
            at += size;
        }
        pending.clear();
        sizes.clear();
    }
}

/// Unmeasured round trips before `count` measured ones.
fn warm_up(count: usize) -> usize {
    (count / 10).max(100)
}

/// One request at a time; returns the round-trip histogram (ns) of the `count` measured ones (after
/// [`warm_up`] more) and the requests per second.
fn rtt(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize) -> (Histogram<u64>, f64) {
    let stop = AtomicBool::new(false);
    let warm_up = warm_up(count);
    let (result, ()) = cores.run(
        || {
            let mut histogram = new_histogram();
            let mut message = vec![0x5Au8; size];
            let mut started = Instant::now();
            for seq in 0..(warm_up + count) as u64 {
                if seq == warm_up as u64 {
                    started = Instant::now();
                }
                message[..8].copy_from_slice(&seq.to_le_bytes());
                let t0 = Instant::now();
                offer_blocking(a, &message);
                let mut answered = false;
                while !answered {
                    a.duty();
                    a.poll(16, &mut |m| answered |= seq_of(m) == seq);
                    if t0.elapsed() > STALL {
                        stop.store(true, Ordering::Release);
                        panic!("no response to request {seq}: A {}", a.diagnose());
                    }
                }
                if seq >= warm_up as u64 {
                    record(&mut histogram, t0.elapsed());
                }
            }
            let rate = count as f64 / started.elapsed().as_secs_f64();
            stop.store(true, Ordering::Release);
            (histogram, rate)
        },
        || respond(b, &stop),
    );
    result
}

/// Up to [`PIPELINE_WINDOW`] requests in flight; returns completed requests per second.
fn pipeline(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize) -> f64 {
    let stop = AtomicBool::new(false);
    let (rate, ()) = cores.run(
        || {
            let mut message = vec![0x3Cu8; size];
            let (mut sent, mut answered) = (0u64, 0u64);
            let start = Instant::now();
            let deadline = start + STALL;
            while answered < count as u64 {
                while sent < count as u64 && sent - answered < PIPELINE_WINDOW as u64 {
                    message[..8].copy_from_slice(&sent.to_le_bytes());
                    if !a.offer(&message) {
                        break;
                    }
                    sent += 1;
                }
                a.duty();
                a.poll(FRAGMENT_LIMIT, &mut |m| {
                    assert_eq!(seq_of(m), answered, "a response lost or reordered");
                    answered += 1;
                });
                if Instant::now() > deadline {
                    stop.store(true, Ordering::Release);
                    panic!("pipeline stalled at {answered} of {count} ({sent} sent): A {}", a.diagnose());
                }
            }
            let rate = count as f64 / start.elapsed().as_secs_f64();
            stop.store(true, Ordering::Release);
            rate
        },
        || respond(b, &stop),
    );
    rate
}

/// Bare UDP ping-pong of `size` bytes between two non-blocking sockets busy-polled by the two threads;
/// returns the round-trip histogram (ns) of `count` measured round trips (after [`warm_up`] more).
fn udp_floor(cores: &Cores, size: usize, count: usize) -> Histogram<u64> {
    let ping = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let pong = UdpSocket::bind("127.0.0.1:0").expect("bind");
    ping.connect(pong.local_addr().unwrap()).unwrap();
    pong.connect(ping.local_addr().unwrap()).unwrap();
    ping.set_nonblocking(true).unwrap();
    pong.set_nonblocking(true).unwrap();
    let warm_up = warm_up(count);
    let total = warm_up + count;
    let (histogram, ()) = cores.run(
        || {
            let mut histogram = new_histogram();
            let mut message = vec![0u8; size];
            let mut reply = vec![0u8; 2048];
            for seq in 0..total as u64 {
                message[..8].copy_from_slice(&seq.to_le_bytes());
                let t0 = Instant::now();
                ping.send(&message).expect("ping send");
                loop {
                    match ping.recv(&mut reply) {
                        Ok(n) if n == size && seq_of(&reply) == seq => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                        Err(e) => panic!("ping recv: {e}"),
                    }
                }
                if seq >= warm_up as u64 {
                    record(&mut histogram, t0.elapsed());
                }
            }
            histogram
        },
        || {
            let mut buf = vec![0u8; 2048];
            let mut echoed = 0;
            while echoed < total {
                match pong.recv(&mut buf) {
                    Ok(n) => {
                        pong.send(&buf[..n]).expect("pong send");
                        echoed += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) => panic!("pong recv: {e}"),
                }
            }
        },
    );
    histogram
}

/// Runs one segment over one pair. Throughput: a warm-up run, then [`REPEATS`] measured ones; the median.
/// RTT: [`REPEATS`] runs of a third of the count each, every one preceded by as long a bare UDP ping-pong
/// floor run when `with_floor` (the host drifts: both see it), their histograms merged, so each figure
/// rests on the whole count.
fn run_segment(
    cores: &Cores,
    segment: &Segment,
    a: &mut dyn Side,
    b: &mut dyn Side,
    mtu: usize,
    scale: usize,
    with_floor: bool,
) -> Figures {
    let count = (segment.count / scale).max(10);
    let size = segment.size;
    match segment.shape {
        Shape::OneWay => {
            one_way(cores, a, b, size, (count / 10).max(10), mtu);
            let rates: Vec<f64> = (0..REPEATS).map(|_| one_way(cores, a, b, size, count, mtu)).collect();
            let rate = median(rates);
            Figures { msgs_per_s: rate, mb_per_s: rate * size as f64 / 1e6, ..Figures::default() }
        }
        Shape::Rtt => {
            let per_run = count.div_ceil(REPEATS);
            let (mut ours, mut floor) = (new_histogram(), new_histogram());
            let mut rates = Vec::with_capacity(REPEATS);
            for _ in 0..REPEATS {
                if with_floor {
                    floor.add(udp_floor(cores, size, per_run)).expect("histograms of the same bounds");
                }
                let (histogram, rate) = rtt(cores, a, b, size, per_run);
                ours.add(histogram).expect("histograms of the same bounds");
                rates.push(rate);
            }
            let rate = median(rates);
            Figures {
                msgs_per_s: rate,
                mb_per_s: rate * size as f64 / 1e6,
                rtt: Some(Percentiles::of(&ours)),
                floor: with_floor.then(|| Percentiles::of(&floor)),
            }
        }
        Shape::Pipeline => {
            pipeline(cores, a, b, size, (count / 10).max(10));
            let rate = median((0..REPEATS).map(|_| pipeline(cores, a, b, size, count)).collect());
            Figures { msgs_per_s: rate, mb_per_s: rate * size as f64 / 1e6, ..Figures::default() }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Sender raw datagram rate
// ---------------------------------------------------------------------------------------------------

/// What the receivers' status messages say about the measured publication: its stream, its sender
/// position counter (`snd-pos`) and, per destination, the publication socket to answer.
#[derive(Clone, Debug)]
struct SmTarget {
    position: Counter,
    session_id: i32,
    stream_id: i32,
    initial_term_id: i32,
    term_length: usize,
    window: i32,
    answer_to: [SocketAddr; 2],
}

impl SmTarget {
    /// Sends, from each destination socket, a status message acknowledging the Sender's own position.
    ///
    /// The bench thread sends these itself, outside the measured time, about once a millisecond:
    /// acknowledging `snd-pos` keeps flow control out of the figure. (When the drain thread answered with
    /// what it had received, the host descheduling it for a few milliseconds, as other load on this
    /// 2-vCPU VM does, closed the window and stalled the Sender, which a bare `sendmsg` loop never waits
    /// for.)
    fn acknowledge(&self, from: &[UdpEndpoint; 2]) {
        let bits = position_bits_to_shift(self.term_length);
        let acknowledged = self.position.get();
        for (i, endpoint) in from.iter().enumerate() {
            let mut sm = StatusMessageFrame {
                session_id: self.session_id,
                stream_id: self.stream_id,
                consumption_term_id: term_id(acknowledged, self.initial_term_id, bits),
                consumption_term_offset: term_offset(acknowledged, self.term_length) as i32,
                receiver_window: self.window,
                ..StatusMessageFrame::default()
            };
            sm.set_receiver_id(9000 + i as i64);
            let mut bytes = [0u8; 64];
            let length = sm.encode(&mut bytes).expect("a status message fits 64 bytes");
            let _ = endpoint.send(&bytes[..length], Some(&SockAddr::from(self.answer_to[i])));
        }
    }
}

/// Drains both destination sockets with `recvmmsg` until `stop`.
fn drain(endpoints: &[UdpEndpoint; 2], stop: &AtomicBool) {
    let mut batch = RecvBatch::new(64, 8192 + 64);
    while !stop.load(Ordering::Relaxed) {
        for endpoint in endpoints {
            let _ = endpoint.recv_batch(&mut batch);
        }
    }
}

/// One measured window of one point.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    datagrams: f64,
    syscalls: f64,
    data_syscalls: f64,
    control_syscalls: f64,
    /// Seconds spent sending: the window less the time the bench spent appending into the log and
    /// sending the receivers' status messages.
    send_seconds: f64,
    wall_seconds: f64,
}

impl Window {
    fn datagrams_per_s(&self) -> f64 {
        self.datagrams / self.send_seconds
    }
    fn syscalls_per_s(&self) -> f64 {
        self.syscalls / self.send_seconds
    }
}

/// A publication under measurement, with its own Sender, log appender and counters.
struct Measured {
    mode: SendMode,
    sender: Sender,
    appender: ExclusiveAppender,
    counters: SenderCounters,
    target: SmTarget,
    message: Vec<u8>,
    term_length: usize,
}

impl Measured {
    fn new(mode: SendMode, datagram: usize, destinations: [SocketAddr; 2], session_id: i32) -> Self {
        let term_length = 4 << 20;
        let log_config =
            LogConfig { session_id, stream_id: STREAM, initial_term_id: 3, ..LogConfig::new(term_length, datagram) };
        let log = LogBuffer::create_anonymous(log_config).expect("map a log");
        let mut appender = log.appender().expect("the log's appender");
        let counters = SenderCounters::detached();
        let config = ChannelConfig {
            destinations: destinations.to_vec(),
            mtu: datagram,
            term_length,
            send_mode: mode,
            receiver_window: term_length / 2,
            socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(4 << 20) },
            ..ChannelConfig::default()
        };
        let publication = NetworkPublication::new(log, config, counters.clone()).expect("open the publication");
        publication.warnings().iter().for_each(|w| eprintln!("warning: {w}"));
        assert_eq!(publication.send_mode(), mode, "the kernel refused send mode {mode}");
        let locals = publication.local_addrs();
        let local = |i: usize| {
            let port = locals[i.min(locals.len() - 1)].port();
            SocketAddr::new("127.0.0.1".parse().unwrap(), port)
        };
        let target = SmTarget {
            position: counters.position.clone(),
            session_id,
            stream_id: STREAM,
            initial_term_id: 3,
            term_length,
            window: (term_length / 2) as i32,
            answer_to: [local(0), local(1)],
        };
        appender.refresh_limit_from_consumers();
        // One frame of exactly `datagram` bytes per message, so that every data datagram is one frame.
        let message = vec![0x6Bu8; datagram - DATA_HEADER_LENGTH];
        Self { mode, sender: Sender::new(vec![publication]), appender, counters, target, message, term_length }
    }

    /// Appends whole frames up to the publication limit when less than a quarter term is buffered.
    #[inline]
    fn top_up(&mut self) -> bool {
        let buffered = self.appender.position() - self.sender.publications()[0].sender_position();
        if buffered >= (self.term_length / 4) as i64 {
            return false;
        }
        self.appender.refresh_limit_from_consumers();
        while self.appender.append(&self.message).is_ok() {}
        true
    }

    fn snapshot(&self) -> [i64; 3] {
        let c = &self.counters;
        [c.datagrams.get(), c.data_syscalls.get(), c.control_syscalls.get()]
    }

    /// Keeps the log topped up and the Sender busy for `seconds`; the counters' deltas over the window.
    fn window(&mut self, drains: &[UdpEndpoint; 2], seconds: f64) -> Window {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.sender.publications()[0].flow_control().live_count() < 2 {
            self.target.acknowledge(drains);
            self.top_up();
            self.sender.poll_once();
            assert!(Instant::now() < deadline, "the drain's status messages did not open flow control ({})", self.mode);
        }
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(20) {
            self.target.acknowledge(drains);
            self.top_up();
            self.sender.poll_once();
        }
        let before = self.snapshot();
        let start = Instant::now();
        let mut filling = Duration::ZERO;
        let mut cycles = 0u64;
        let mut next_ack = Instant::now();
        loop {
            let t = Instant::now();
            let mut outside = self.top_up();
            if t >= next_ack {
                self.target.acknowledge(drains);
                next_ack = t + Duration::from_millis(1);
                outside = true;
            }
            if outside {
                filling += t.elapsed();
            }
            self.sender.poll_once();
            cycles += 1;
            if cycles % 64 == 0 && start.elapsed().as_secs_f64() >= seconds {
                break;
            }
        }
        let wall = start.elapsed();
        let after = self.snapshot();
        if std::env::var_os("QC_BENCH_DIAG").is_some() {
            let c = &self.counters;
            println!(
                "  {} {}: after window: short sends {}, stalls {}, send errors {}, filling {:.0}% of {:.2} s, cycles {cycles}",
                self.mode,
                self.message.len() + DATA_HEADER_LENGTH,
                c.short_sends.get(),
                c.flow_control_stalls.get(),
                c.send_errors.get(),
                100.0 * filling.as_secs_f64() / wall.as_secs_f64(),
                wall.as_secs_f64()
            );
        }
        let delta = |i: usize| (after[i] - before[i]) as f64;
        assert!(self.sender.publications()[0].failure().is_none(), "{:?}", self.sender.publications()[0].failure());
        Window {
            datagrams: delta(0),
            syscalls: delta(1) + delta(2),
            data_syscalls: delta(1),
            control_syscalls: delta(2),
            send_seconds: (wall - filling).as_secs_f64(),
            wall_seconds: wall.as_secs_f64(),
        }
    }
}

/// Bare `sendmsg` of `datagram` bytes alternated over two connected sockets for `seconds`.
fn bare_window(endpoints: &[UdpEndpoint; 2], buffer: &[u8], seconds: f64) -> Window {
    let start = Instant::now();
    let (mut calls, mut sent) = (0u64, 0u64);
    loop {
        for endpoint in endpoints {
            calls += 1;
            if let SendOutcome::Sent(n) = endpoint.send(buffer, None) {
                sent += n as u64;
            }
        }
        if calls % 256 == 0 && start.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    Window {
        datagrams: sent as f64,
        syscalls: calls as f64,
        data_syscalls: calls as f64,
        control_syscalls: 0.0,
        send_seconds: wall,
        wall_seconds: wall,
    }
}

/// The median figures of one point of the sender-rate table.
struct RatePoint {
    mode: Option<SendMode>,
    datagram: usize,
    datagrams_per_s: f64,
    syscalls_per_s: f64,
    data_syscalls_per_s: f64,
    control_syscalls_per_s: f64,
    wall_datagrams_per_s: f64,
    bare_per_s: f64,
    /// Median over rounds of this point's window rate over the bare window of the same round.
    ratio: f64,
    windows: Vec<f64>,
}

/// For each datagram size: windows of bare `sendmsg` and of our Sender in each mode, interleaved round by
/// round (the host drifts), with the drain on the second thread.
fn sender_rates(cores: &Cores, seconds: f64, rounds: usize) -> Vec<RatePoint> {
    let options = SocketOptions { send_buffer: None, receive_buffer: Some(4 << 20) };
    let bind = || UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &options).expect("bind a drain socket").0;
    let drains = [bind(), bind()];
    let destinations = [drains[0].local_addr(), drains[1].local_addr()];
    let stop = AtomicBool::new(false);
    let (points, ()) = cores.run(
        || {
            // Stops the drain however this thread ends (a panic included), so the run never hangs.
            let _stop = SetOnDrop(&stop);
            let mut points = Vec::new();
            for (k, &datagram) in [1408usize, 8192].iter().enumerate() {
                let bare: [UdpEndpoint; 2] = [0, 1].map(|i| {
                    let (mut e, _) =
                        UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).expect("bind");
                    e.connect(destinations[i]).expect("connect");
                    e
                });
                let buffer = vec![0u8; datagram + 64];
                let buffer = &buffer[buffer.as_ptr().align_offset(64)..][..datagram];
                let mut measured: Vec<Measured> = SendMode::ALL
                    .iter()
                    .enumerate()
                    .map(|(m, &mode)| Measured::new(mode, datagram, destinations, 100 + (k * 10 + m) as i32))
                    .collect();
                let mut bare_windows = Vec::new();
                let mut windows: Vec<Vec<Window>> = vec![Vec::new(); measured.len()];
                for _ in 0..rounds {
                    bare_windows.push(bare_window(&bare, buffer, seconds));
                    for (m, publication) in measured.iter_mut().enumerate() {
                        windows[m].push(publication.window(&drains, seconds));
                    }
                }
                let bare_per_s = median(bare_windows.iter().map(Window::datagrams_per_s).collect());
                points.push(RatePoint {
                    mode: None,
                    datagram,
                    datagrams_per_s: bare_per_s,
                    syscalls_per_s: median(bare_windows.iter().map(Window::syscalls_per_s).collect()),
                    data_syscalls_per_s: median(bare_windows.iter().map(Window::syscalls_per_s).collect()),
                    control_syscalls_per_s: 0.0,
                    wall_datagrams_per_s: bare_per_s,
                    bare_per_s,
                    ratio: 1.0,
                    windows: bare_windows.iter().map(Window::datagrams_per_s).collect(),
                });
                for (m, w) in windows.iter().enumerate() {
                    let per = |f: &dyn Fn(&Window) -> f64| median(w.iter().map(f).collect());
                    points.push(RatePoint {
                        mode: Some(measured[m].mode),
                        datagram,
                        datagrams_per_s: per(&Window::datagrams_per_s),
                        syscalls_per_s: per(&Window::syscalls_per_s),
                        data_syscalls_per_s: per(&|x| x.data_syscalls / x.send_seconds),
                        control_syscalls_per_s: per(&|x| x.control_syscalls / x.send_seconds),
                        wall_datagrams_per_s: per(&|x| x.datagrams / x.wall_seconds),
                        bare_per_s,
                        ratio: median(
                            w.iter()
                                .zip(&bare_windows)
                                .map(|(x, b)| x.datagrams_per_s() / b.datagrams_per_s())
                                .collect(),
                        ),
                        windows: w.iter().map(Window::datagrams_per_s).collect(),
                    });
                }
            }
            points
        },
        || drain(&drains, &stop),
    );
    points
}

// ---------------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------------

/// The figures of one segment on each medium.
struct Row<'a> {
    segment: &'a Segment,
    udp: Figures,
    ipc: Option<Figures>,
}

fn print_segment_table(rows: &[Row<'_>]) {
    println!();
    println!(
        "Segments (ours: this host, median of {REPEATS}; BASELINE: another system on another machine, reference only)"
    );
    println!(
        "| {:<40} | {:<56} | {:<56} | {:<30} | {:<28} |",
        "segment", "our UDP", "our IPC", "BASELINE TCP loopback (ref)", "BASELINE InProcess (ref)"
    );
    println!("|{:-<42}|{:-<58}|{:-<58}|{:-<32}|{:-<30}|", "", "", "", "", "");
    for row in rows {
        let ipc = row.ipc.as_ref().map_or("n/a (IPC not on main yet)".to_string(), |f| f.describe(row.segment.shape));
        println!(
            "| {:<40} | {:<56} | {:<56} | {:<30} | {:<28} |",
            row.segment.name,
            row.udp.describe(row.segment.shape),
            ipc,
            row.segment.baseline_tcp,
            row.segment.baseline_inprocess
        );
    }
}

fn print_rate_table(points: &[RatePoint]) -> bool {
    println!();
    println!(
        "Sender raw datagram rate, 2 destinations drained by the second thread (median of the windows; \
         'vs bare' is the median over rounds of each window over the bare window of the same round)"
    );
    println!(
        "| {:<8} | {:>6} | {:>12} | {:>11} | {:>10} | {:>10} | {:>12} | {:>8} | {:<28} |",
        "mode",
        "bytes",
        "datagrams/s",
        "syscalls/s",
        "data sc/s",
        "ctrl sc/s",
        "wall rate",
        "vs bare",
        "windows (datagrams/s)"
    );
    let mut pass = true;
    for p in points {
        let ratio = p.ratio;
        let verdict = match p.mode {
            Some(SendMode::Classic) => {
                let ok = ratio >= TARGET_CLASSIC_OVER_BARE;
                pass &= ok;
                if ok {
                    " PASS"
                } else {
                    " MISS"
                }
            }
            _ => "",
        };
        let windows: Vec<String> = p.windows.iter().map(|w| si(*w)).collect();
        println!(
            "| {:<8} | {:>6} | {:>12} | {:>11} | {:>10} | {:>10} | {:>12} | {:>7.2}x{} | {:<28} |",
            p.mode.map_or("bare".to_string(), |m| m.to_string()),
            p.datagram,
            si(p.datagrams_per_s),
            si(p.syscalls_per_s),
            si(p.data_syscalls_per_s),
            si(p.control_syscalls_per_s),
            si(p.wall_datagrams_per_s),
            ratio,
            verdict,
            windows.join(" ")
        );
    }
    pass
}

/// Every round-trip figure: ours over UDP and IPC, and the bare UDP ping-pong floor.
fn print_rtt_table(rows: &[Row<'_>], quick: bool) {
    let mut figures = Vec::new();
    for row in rows.iter().filter(|r| r.segment.shape == Shape::Rtt) {
        figures.extend(row.udp.rtt.map(|p| ("our UDP request", p)));
        figures.extend(row.ipc.as_ref().and_then(|f| f.rtt).map(|p| ("our IPC request", p)));
        figures.extend(row.udp.floor.map(|p| ("bare UDP ping-pong (floor)", p)));
    }
    if figures.is_empty() {
        return;
    }
    println!();
    println!(
        "Round trips, {} B, one at a time ({} runs interleaved with the floor's, merged){}",
        SEGMENTS.iter().find(|s| s.shape == Shape::Rtt).map_or(0, |s| s.size),
        REPEATS,
        if quick { "; quick: fewer round trips than the 100k a figure needs, not a result" } else { "" }
    );
    println!(
        "| {:<28} | {:>11} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "round trip", "round trips", "p50 us", "p99 us", "p99.9 us", "max us", "mean us"
    );
    println!("|{:-<30}|{:->13}|{:->11}|{:->11}|{:->11}|{:->11}|{:->11}|", "", ":", ":", ":", ":", ":", ":");
    for (name, p) in figures {
        println!(
            "| {name:<28} | {:>11} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
            p.count, p.p50, p.p99, p.p999, p.max, p.mean
        );
    }
}

/// The parts of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// docs/BASELINE.md's segments over UDP and IPC, with the RTT figures and the bare UDP ping-pong floor.
    Segments,
    /// The Sender's raw datagram rate in each send mode beside bare `sendmsg`.
    Rates,
    /// One publication streaming to one subscriber (D = 1) beside the model's (S - C) / 1 x M_pkt.
    Stream,
}

/// docs/BASELINE.md's segments over our UDP stream and our IPC medium, the Sender's raw datagram rate beside
/// bare `sendmsg`, and a publication streaming to one subscriber beside the model, in one run.
#[derive(Debug, Parser)]
#[command(name = "transport", bin_name = "cargo bench --bench transport --", args_override_self = true)]
struct Cli {
    /// A smoke run: a tenth of every count and window (an RTT figure then rests on 10k round trips, not
    /// the 100k of a result) and 0.2 s per stream row.
    #[arg(long)]
    quick: bool,
    /// The parts to run, comma-separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    part: Vec<Part>,
    /// Stream: MTUs (bytes).
    #[arg(long, value_delimiter = ',', value_name = "LIST", default_value = "1408,8192")]
    mtu: Vec<usize>,
    /// Stream: message sizes (bytes, at least 8).
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = message_size,
          default_value = "32,128,224,512,1344")]
    msg: Vec<usize>,
    /// Stream: send modes (`classic`, `mmsg`, `gso`) [default: classic and the best this kernel supports:
    /// gso, else mmsg].
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = str::parse::<SendMode>)]
    send_mode: Vec<SendMode>,
    /// Stream: seconds each row streams [default: 1, or 0.2 with --quick].
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    seconds: Option<f64>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Cli {
    fn runs(&self, part: Part) -> bool {
        self.part.is_empty() || self.part.contains(&part)
    }

    fn stream_plan(&self) -> StreamPlan {
        let seconds = self.seconds.unwrap_or(if self.quick { 0.2 } else { 1.0 });
        StreamPlan {
            mtus: self.mtu.clone(),
            msgs: self.msg.clone(),
            modes: if self.send_mode.is_empty() { StreamPlan::default_modes() } else { self.send_mode.clone() },
            window: Duration::from_secs_f64(seconds),
            s_window: Duration::from_millis(if self.quick { 30 } else { 100 }),
            s_windows: if self.quick { 1 } else { 3 },
        }
    }
}

/// A message size the stream can number: at least 8 bytes.
fn message_size(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(size) if size >= 8 => Ok(size),
        Ok(_) => Err("messages carry an 8-byte sequence number: use 8 or more".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A positive number of seconds.
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        Ok(_) => Err("give a positive number of seconds".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs every segment over UDP, then over IPC (in the same round, as BASELINE runs TCP then InProcess),
/// the bare UDP ping-pong floor beside the UDP RTT segment; `only` keeps the segments whose name
/// contains it.
fn run_segments(cores: &Cores, scale: usize, only: Option<&str>) -> Vec<Row<'static>> {
    let (mut small_a, mut small_b) = udp_pair(Geometry::Small);
    let (mut large_a, mut large_b) = udp_pair(Geometry::Large);
    let (mut ipc_small_a, mut ipc_small_b) = ipc_pair(Geometry::Small);
    let (mut ipc_large_a, mut ipc_large_b) = ipc_pair(Geometry::Large);
    let mut rows = Vec::new();
    let diagnose = std::env::var_os("QC_BENCH_DIAG").is_some();
    for segment in SEGMENTS.iter().filter(|s| only.is_none_or(|o| s.name.contains(o))) {
        let mtu = segment.geometry.mtu();
        let (a, b): (&mut dyn Side, &mut dyn Side) = match segment.geometry {
            Geometry::Small => (&mut small_a, &mut small_b),
            Geometry::Large => (&mut large_a, &mut large_b),
        };
        let t = Instant::now();
        let udp = run_segment(cores, segment, a, b, mtu, scale, segment.shape == Shape::Rtt);
        let trips = udp.rtt.map_or(String::new(), |p| format!(", {} round trips", p.count));
        let floor = udp.floor.map_or(String::new(), |f| format!(", bare UDP ping-pong {}", f.describe()));
        println!(
            "udp  {:<40} {:<48} ({:.1} s{trips}{floor})",
            segment.name,
            udp.describe(segment.shape),
            t.elapsed().as_secs_f64()
        );
        if diagnose {
            println!("     A: {}\n     B: {}", a.diagnose(), b.diagnose());
        }
        let (a, b): (&mut dyn Side, &mut dyn Side) = match segment.geometry {
            Geometry::Small => (&mut ipc_small_a, &mut ipc_small_b),
            Geometry::Large => (&mut ipc_large_a, &mut ipc_large_b),
        };
        let t = Instant::now();
        let ipc = run_segment(cores, segment, a, b, mtu, scale, false);
        println!("ipc  {:<40} {:<48} ({:.1} s)", segment.name, ipc.describe(segment.shape), t.elapsed().as_secs_f64());
        rows.push(Row { segment, udp, ipc: Some(ipc) });
    }
    rows
}

/// The PASS/MISS lines of the targets the run measured.
fn print_targets(rows: &[Row<'_>], rates_pass: Option<bool>) {
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    println!();
    if let Some(pass) = rates_pass {
        println!(
            "target: classic Sender >= {:.0}% of bare sendmsg at every size: {}",
            TARGET_CLASSIC_OVER_BARE * 100.0,
            verdict(pass)
        );
    }
    if let Some(rtt_row) = rows.iter().find(|r| r.segment.shape == Shape::Rtt) {
        let (ours, floor) = (rtt_row.udp.rtt.expect("RTT figures").p50, rtt_row.udp.floor.expect("a floor").p50);
        let rtt_ratio = ours / floor;
        println!(
            "target: request RTT p50 within {TARGET_RTT_OVER_FLOOR}x of the bare UDP ping-pong: {ours:.1} us vs floor {floor:.1} us = {rtt_ratio:.2}x  {}",
            verdict(rtt_ratio <= TARGET_RTT_OVER_FLOOR)
        );
    }
}

/// The segments as `summary.json`'s `segments` array.
fn segments_json(rows: &[Row<'_>]) -> serde_json::Value {
    let mut segments = Vec::new();
    for row in rows {
        for (medium, figures) in [("udp", Some(&row.udp)), ("ipc", row.ipc.as_ref())] {
            let Some(f) = figures else { continue };
            let mut entry = json!({
                "name": row.segment.name,
                "medium": medium,
                "msgs_per_s": f.msgs_per_s,
                "mb_per_s": f.mb_per_s,
            });
            if let Some(rtt) = f.rtt {
                entry["rtt_us"] = rtt.to_json();
            }
            if let Some(floor) = f.floor {
                entry["rtt_us"]["floor_p50"] = json!(floor.p50);
                entry["floor_rtt_us"] = floor.to_json();
            }
            segments.push(entry);
        }
    }
    segments.into()
}

/// The sender-rate points as `summary.json`'s `sender_rate` array.
fn sender_rate_json(points: &[RatePoint]) -> serde_json::Value {
    points
        .iter()
        .filter_map(|p| {
            p.mode.map(|mode| {
                json!({
                    "send_mode": mode.as_str(),
                    "datagram_bytes": p.datagram,
                    "destinations": 2,
                    "datagrams_per_s": p.datagrams_per_s,
                    "syscalls_per_s": p.syscalls_per_s,
                    "bare_sendmsg_per_s": p.bare_per_s,
                })
            })
        })
        .collect()
}

fn main() {
    let cli = Cli::parse();
    let scale = if cli.quick { 10 } else { 1 };
    let cores = Cores::detect();
    let started = Instant::now();
    println!("transport bench{}: {}", if cli.quick { " (quick)" } else { "" }, cores.describe());

    let only = std::env::var("QC_BENCH_ONLY").ok();
    let rows = if cli.runs(Part::Segments) { run_segments(&cores, scale, only.as_deref()) } else { Vec::new() };
    if only.is_some() && std::env::var_os("QC_BENCH_RATES").is_none() {
        return;
    }
    let points = if cli.runs(Part::Rates) {
        sender_rates(&cores, if cli.quick { 0.1 } else { 1.0 }, RATE_ROUNDS)
    } else {
        Vec::new()
    };
    let stream_rows = if cli.runs(Part::Stream) { stream::run(&cores, &cli.stream_plan()) } else { Vec::new() };

    if !rows.is_empty() {
        print_segment_table(&rows);
        print_rtt_table(&rows, cli.quick);
    }
    let rates_pass = (!points.is_empty()).then(|| print_rate_table(&points));
    if !stream_rows.is_empty() {
        stream::print_table(&stream_rows, &cores);
    }
    print_targets(&rows, rates_pass);

    let summary = json!({
        "quick": cli.quick,
        "segments": segments_json(&rows),
        "sender_rate": sender_rate_json(&points),
        "stream": stream::to_json(&stream_rows),
        "host": bench::host(),
    });
    match bench::write_summary("transport", &summary) {
        Ok(path) => println!("wrote {} ({:.0} s in all)", path.display(), started.elapsed().as_secs_f64()),
        Err(e) => eprintln!("could not write the summary: {e}"),
    }
}
