//! The transport bench's streaming part: one network publication to one subscriber over UDP loopback
//! (D = 1), through the crate's own `NetworkPublication`/`Sender` and `Receiver`/`Subscription`, read
//! against the model's `(S - C) / 1 x M_pkt` with S and C measured in the same run.
//!
//! Layout: two busy threads. Bench thread 1 (the first core) is the publisher and runs the Sender's duty
//! cycles: it keeps between [`LEAD`] and twice that of messages appended ahead of the Sender, so that the
//! Sender always has whole datagrams to send, and the time it spends appending is measured. Bench thread 2
//! (the second core) runs the Receiver's duty cycles and polls the subscription, checking that every
//! message arrives whole and in order. The model's Sender has a core of its own; here appending shares it,
//! which the table shows as "appending" (the share of the Sender thread's time spent appending), beside
//! "Sender idle" (its time in duty cycles that sent no data).
//!
//! Each row (MTU x message size x send mode) runs on a fresh publication: S probed with
//! `quorumcast_bench::probe` (one destination, datagrams of the MTU, the row's send mode, the sending thread on
//! the first core and the draining one on the second), one unmeasured warm-up stream of a tenth of the
//! window, the measured stream, and S probed again; the row's S is the mean of the two probes (S drifts on
//! a shared host). The measured rate is the messages received over the time from the first append of the
//! window to the receipt of its last message. C is the publication's control syscalls per second over the
//! same time, less its control polls on duty cycles that sent nothing (they spend idle time, not the data
//! budget: the sweep's C). For `mmsg` and `gso`, S is the probe's datagrams per second, as in the sweep.
//!
//! What held the row below the model, by the first rule that applies: `sender` when its data datagrams
//! reached 90% of S; `receiver` when the Sender thread spent 10% or more of its time in duty cycles that
//! sent no data ("Sender idle") and most of those found the flow-control window closed on waiting data
//! (the subscriber's core did not keep up); `appending` when the publisher took 10% or more of the Sender
//! thread's time; otherwise `unclear` (the Sender thread neither waited nor appended, yet sent below S:
//! S moved during the row, or the thread lost its core to other work on the host).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorumcast_bench::model::{Capacity, Model};
use quorumcast_bench::probe::{probe_s, ProbeCores};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::{probe_gso, SendMode, SocketOptions};
use quorumcast_driver::shm::log_buffer::{AppendError, ExclusiveAppender, LogBuffer, LogConfig};
use serde_json::json;

use quorumcast_bench::bench::{si, Cores, SetOnDrop};

/// Stream id of the streamed publication.
const STREAM: i32 = 2001;
/// Term length: 8 MiB, so a term holds four receiver windows.
const TERM_LENGTH: usize = 8 << 20;
/// The receiver's window: half its receive buffer, so that a full window never overflows the socket.
const RECEIVER_WINDOW: usize = 2 << 20;
/// Socket buffers of both ends.
const SOCKET_BUFFER: usize = 4 << 20;
/// The publisher appends when fewer bytes than this wait for the Sender, up to twice as many.
const LEAD: i64 = 256 << 10;
/// Fragments one subscription poll may read.
const FRAGMENT_LIMIT: usize = 1024;
/// How long a stream may go without finishing, beyond its window, before the bench gives up.
const STALL: Duration = Duration::from_secs(20);

/// What the streaming part runs.
#[derive(Clone, Debug)]
pub struct StreamPlan {
    /// MTUs, bytes.
    pub mtus: Vec<usize>,
    /// Message sizes, bytes (at least 8: each carries its sequence number).
    pub msgs: Vec<usize>,
    /// Send modes.
    pub modes: Vec<SendMode>,
    /// Length of each row's measured stream.
    pub window: Duration,
    /// Length of each S probe window.
    pub s_window: Duration,
    /// S probe windows before and after each row (their median each time).
    pub s_windows: usize,
}

impl StreamPlan {
    /// The send modes streamed by default: classic, and the best this kernel supports (gso, else mmsg).
    pub fn default_modes() -> Vec<SendMode> {
        vec![SendMode::Classic, if probe_gso() { SendMode::Gso } else { SendMode::Mmsg }]
    }
}

/// One row: what was streamed, what was measured, and what the model says.
#[derive(Clone, Debug)]
pub struct StreamRow {
    mtu: usize,
    msg: usize,
    mode: SendMode,
    msgs_per_s: f64,
    /// Data datagrams the Sender put on the wire per second.
    datagrams_per_s: f64,
    /// S: the mean of the probes before and after the row.
    s: f64,
    /// The probes before and after.
    s_probes: [f64; 2],
    /// C: control syscalls per second that took from the data budget.
    c: f64,
    /// The model's terms; `None` when it refuses them (C >= S, or a message beyond its table).
    capacity: Option<Capacity>,
    /// Share of the Sender thread's time spent appending.
    append_share: f64,
    /// Share of the Sender thread's time spent in duty cycles that sent no data.
    idle_share: f64,
    /// Share of those cycles in which the flow-control window kept waiting data back.
    window_closed_share: f64,
    /// Retransmitted datagrams (0 on a clean loopback).
    retransmits: i64,
    seconds: f64,
}

impl StreamRow {
    /// Measured over the model's prediction.
    fn ratio(&self) -> Option<f64> {
        self.capacity.map(|c| self.msgs_per_s / c.mu)
    }

    /// Data datagrams as a share of S.
    fn s_used(&self) -> f64 {
        self.datagrams_per_s / self.s
    }

    /// What held the row back (see the module's documentation for the rules).
    fn limit(&self) -> &'static str {
        if self.s_used() >= 0.9 {
            "sender"
        } else if self.idle_share >= 0.1 && self.window_closed_share >= 0.5 {
            "receiver"
        } else if self.append_share >= 0.1 {
            "appending"
        } else {
            "unclear"
        }
    }

    /// `{mtu, msg, mode, msgs_per_s, s, c, m_pkt, model, ratio, ...}`.
    fn to_json(&self) -> serde_json::Value {
        json!({
            "mtu": self.mtu,
            "msg": self.msg,
            "mode": self.mode.as_str(),
            "msgs_per_s": self.msgs_per_s,
            "s": self.s,
            "c": self.c,
            "m_pkt": self.capacity.map(|c| c.packing.per_datagram()),
            "model": self.capacity.map(|c| c.mu),
            "ratio": self.ratio(),
            "d": 1,
            "datagrams_per_s": self.datagrams_per_s,
            "s_used": self.s_used(),
            "s_probes": self.s_probes,
            "append_share": self.append_share,
            "sender_idle_share": self.idle_share,
            "window_closed_share_of_idle_cycles": self.window_closed_share,
            "limit": self.limit(),
            "retransmits": self.retransmits,
            "seconds": self.seconds,
        })
    }
}

/// Runs every row of `plan`, printing each as it completes.
pub fn run(cores: &Cores, plan: &StreamPlan) -> Vec<StreamRow> {
    let mut rows = Vec::new();
    for &mtu in &plan.mtus {
        for &mode in &plan.modes {
            for &msg in &plan.msgs {
                let row = run_row(cores, plan, mtu, msg, mode);
                println!(
                    "stream mtu {mtu} {msg:>4} B {mode:<7} {:>8} msg/s, S {}, C {}, model {}, measured/model {}, limit {}",
                    si(row.msgs_per_s),
                    si(row.s),
                    si(row.c),
                    row.capacity.map_or("n/a".into(), |c| si(c.mu)),
                    row.ratio().map_or("n/a".into(), |r| format!("{r:.2}")),
                    row.limit()
                );
                rows.push(row);
            }
        }
    }
    rows
}

/// One row: S, a warm-up stream, the measured stream, S again.
fn run_row(cores: &Cores, plan: &StreamPlan, mtu: usize, msg: usize, mode: SendMode) -> StreamRow {
    let (mut publisher, mut subscriber) = connect(mtu, mode, msg);
    let s_before = probe(cores, plan, mtu, mode);
    stream_once(cores, &mut publisher, &mut subscriber, plan.window / 10);
    let run = stream_once(cores, &mut publisher, &mut subscriber, plan.window);
    let s_after = probe(cores, plan, mtu, mode);
    let s = (s_before + s_after) / 2.0;
    let c = run.control_syscalls / run.seconds;
    let capacity = Model::new(s, c, 1).and_then(|model| model.analyze(mtu, msg)).ok();
    StreamRow {
        mtu,
        msg,
        mode,
        msgs_per_s: run.messages / run.seconds,
        datagrams_per_s: run.datagrams / run.seconds,
        s,
        s_probes: [s_before, s_after],
        c,
        capacity,
        append_share: run.appending / run.seconds,
        idle_share: run.idle / run.seconds,
        window_closed_share: run.window_closed_cycles / run.idle_cycles.max(1.0),
        retransmits: run.retransmits,
        seconds: run.seconds,
    }
}

/// S: one thread's datagrams per second to one loopback destination, datagrams of `mtu` bytes, in
/// `mode`, on the cores the stream uses.
fn probe(cores: &Cores, plan: &StreamPlan, mtu: usize, mode: SendMode) -> f64 {
    let ids = cores.ids();
    let on = ProbeCores { sender: ids.map(|i| i[0]), drain: ids.map(|i| i[1]) };
    probe_s(mode, mtu, 1, plan.s_window, plan.s_windows, on)
        .unwrap_or_else(|e| panic!("the S probe failed ({mode}, {mtu} B): {e}"))
        .datagrams_per_s
}

// ---------------------------------------------------------------------------------------------------
// The two ends
// ---------------------------------------------------------------------------------------------------

/// The publishing end: the log's appender and the Sender of its one publication.
struct Publisher {
    appender: ExclusiveAppender,
    sender: Sender,
    counters: SenderCounters,
    /// The next message, its first 8 bytes the sequence number.
    message: Vec<u8>,
    /// Sequence number of the next message appended.
    next: u64,
}

/// The subscribing end: the Receiver and the subscription to the stream.
struct Subscriber {
    receiver: Receiver,
    subscription: Subscription,
    counters: ReceiverCounters,
    /// Sequence number of the next message expected.
    next: u64,
    size: usize,
}

/// How the publisher's thread spent a stream.
#[derive(Clone, Copy, Debug)]
struct Publishing {
    /// The first append.
    start: Instant,
    /// Time spent appending.
    appending: Duration,
    /// Time spent in duty cycles that sent no data.
    idle: Duration,
    cycles: u64,
    idle_cycles: u64,
}

impl Default for Publishing {
    fn default() -> Self {
        Self { start: Instant::now(), appending: Duration::ZERO, idle: Duration::ZERO, cycles: 0, idle_cycles: 0 }
    }
}

/// The counters a stream is measured by, read by [`Publisher::snapshot`].
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    datagrams: i64,
    control_syscalls: i64,
    idle_polls: i64,
    retransmits: i64,
    window_closed_cycles: i64,
}

impl Publisher {
    /// Whether fewer than [`LEAD`] bytes wait for the Sender.
    #[inline]
    fn needs_top_up(&self) -> bool {
        self.appender.position() - self.sender.publications()[0].sender_position() < LEAD
    }

    /// Appends numbered messages until twice [`LEAD`] bytes wait for the Sender, or the log is full.
    fn top_up(&mut self) {
        let target = self.sender.publications()[0].sender_position() + 2 * LEAD;
        self.appender.refresh_limit_from_consumers();
        while self.appender.position() < target {
            self.message[..8].copy_from_slice(&self.next.to_le_bytes());
            match self.appender.append(&self.message) {
                Ok(_) => self.next += 1,
                Err(AppendError::BackPressured) => return,
                Err(e) => panic!("append failed: {e}"),
            }
        }
    }

    /// Appends and sends for `window`, then publishes the sequence number after the last message and runs
    /// the Sender until the subscriber has it all (`done`).
    fn publish(&mut self, window: Duration, end: &AtomicU64, done: &AtomicBool) -> Publishing {
        let mut publishing = Publishing { start: Instant::now(), ..Publishing::default() };
        loop {
            if self.needs_top_up() {
                let t = Instant::now();
                self.top_up();
                publishing.appending += t.elapsed();
            }
            self.duty_cycle(&mut publishing);
            if publishing.cycles % 64 == 0 && publishing.start.elapsed() >= window {
                break;
            }
        }
        end.store(self.next, Ordering::Release);
        while !done.load(Ordering::Acquire) {
            self.duty_cycle(&mut publishing);
        }
        publishing
    }

    /// One duty cycle of the Sender, its time counted as idle when it sent no data.
    #[inline]
    fn duty_cycle(&mut self, publishing: &mut Publishing) {
        let (t, datagrams) = (Instant::now(), self.counters.datagrams.get());
        self.sender.poll_once();
        publishing.cycles += 1;
        if self.counters.datagrams.get() == datagrams {
            publishing.idle += t.elapsed();
            publishing.idle_cycles += 1;
        }
    }

    fn snapshot(&self) -> Snapshot {
        let c = &self.counters;
        Snapshot {
            datagrams: c.datagrams.get(),
            control_syscalls: c.control_syscalls.get(),
            idle_polls: c.idle_polls.get(),
            retransmits: c.retransmits.get(),
            window_closed_cycles: c.window_closed_cycles.get(),
        }
    }
}

impl Subscriber {
    /// Runs the Receiver and reads the stream until the message before `end` (once published) has
    /// arrived; returns when it did. Sets `done` however it returns, a panic included, so the publisher
    /// never waits forever.
    fn consume(&mut self, end: &AtomicU64, done: &AtomicBool, deadline: Instant) -> Instant {
        let _done = SetOnDrop(done);
        loop {
            self.receiver.poll_once();
            let (next, size) = (&mut self.next, self.size);
            self.subscription.poll(FRAGMENT_LIMIT, |m| {
                let seq = u64::from_le_bytes(m[..8].try_into().expect("messages carry a sequence number"));
                assert_eq!((seq, m.len()), (*next, size), "a message lost, reordered or cut");
                *next += 1;
            });
            if self.next == end.load(Ordering::Acquire) {
                return Instant::now();
            }
            if Instant::now() > deadline {
                let r = &self.counters;
                panic!(
                    "the stream stalled at message {}: receiver datagrams {}, NAKs {}, out of window {}",
                    self.next,
                    r.datagrams.get(),
                    r.naks.get(),
                    r.out_of_window.get()
                );
            }
        }
    }
}

/// A publication of `msg`-byte messages at `mtu` in `mode` to one subscriber, connected (SETUP answered,
/// flow control live) before it is returned.
fn connect(mtu: usize, mode: SendMode, msg: usize) -> (Publisher, Subscriber) {
    let channel = ChannelConfig {
        mtu,
        term_length: TERM_LENGTH,
        send_mode: mode,
        receiver_window: RECEIVER_WINDOW,
        socket: SocketOptions { send_buffer: Some(SOCKET_BUFFER), receive_buffer: Some(SOCKET_BUFFER) },
        // Loopback round trips are tens of microseconds: repair a loss within a millisecond.
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    };
    let mut config = ReceiveChannelConfig::new("127.0.0.1:0".parse().expect("an address"), STREAM);
    config.channel = channel.clone();
    let receiver_counters = ReceiverCounters::detached();
    let (receiver, mut subscriptions, warnings) =
        Receiver::new(vec![config], receiver_counters.clone()).expect("bind the receive socket");
    warnings.iter().for_each(|w| eprintln!("warning: {w}"));
    let log_config =
        LogConfig { session_id: 31, stream_id: STREAM, initial_term_id: 5, ..LogConfig::new(TERM_LENGTH, mtu) };
    let log = LogBuffer::create_anonymous(log_config).expect("map a log");
    let appender = log.appender().expect("the log's appender");
    let counters = SenderCounters::detached();
    let to = receiver.local_addr(0);
    let publication =
        NetworkPublication::new(log, ChannelConfig { destinations: vec![to], ..channel }, counters.clone())
            .expect("open the publication");
    publication.warnings().iter().for_each(|w| eprintln!("warning: {w}"));
    assert_eq!(publication.send_mode(), mode, "the kernel refused send mode {mode}");
    let mut publisher =
        Publisher { appender, sender: Sender::new(vec![publication]), counters, message: vec![0x6B; msg], next: 0 };
    let mut subscriber =
        Subscriber { receiver, subscription: subscriptions.remove(0), counters: receiver_counters, next: 0, size: msg };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(subscriber.subscription.is_connected()
        && publisher.sender.publications()[0].flow_control().live_count() == 1)
    {
        publisher.sender.poll_once();
        subscriber.receiver.poll_once();
        assert!(Instant::now() < deadline, "the stream did not connect ({mode}, MTU {mtu})");
        std::thread::yield_now();
    }
    (publisher, subscriber)
}

// ---------------------------------------------------------------------------------------------------
// One stream
// ---------------------------------------------------------------------------------------------------

/// What one stream measured.
struct StreamRun {
    messages: f64,
    datagrams: f64,
    /// Control syscalls less the control polls of duty cycles that sent nothing.
    control_syscalls: f64,
    retransmits: i64,
    /// From the first append to the receipt of the last message.
    seconds: f64,
    /// Seconds the Sender thread spent appending.
    appending: f64,
    /// Seconds the Sender thread spent in duty cycles that sent no data.
    idle: f64,
    /// Those cycles, and the ones among all in which the flow-control window kept waiting data back.
    idle_cycles: f64,
    window_closed_cycles: f64,
}

/// Streams for `window` on the two cores: the publisher and Sender on the first, the Receiver and
/// subscriber on the second.
fn stream_once(cores: &Cores, publisher: &mut Publisher, subscriber: &mut Subscriber, window: Duration) -> StreamRun {
    let end = AtomicU64::new(u64::MAX);
    let done = AtomicBool::new(false);
    let (first, before) = (publisher.next, publisher.snapshot());
    let deadline = Instant::now() + window + STALL;
    let (publishing, received) =
        cores.run(|| publisher.publish(window, &end, &done), || subscriber.consume(&end, &done, deadline));
    let after = publisher.snapshot();
    assert!(
        publisher.sender.publications()[0].failure().is_none(),
        "{:?}",
        publisher.sender.publications()[0].failure()
    );
    let control = (after.control_syscalls - before.control_syscalls) - (after.idle_polls - before.idle_polls);
    StreamRun {
        messages: (publisher.next - first) as f64,
        datagrams: (after.datagrams - before.datagrams) as f64,
        control_syscalls: control as f64,
        retransmits: after.retransmits - before.retransmits,
        seconds: received.duration_since(publishing.start).as_secs_f64(),
        appending: publishing.appending.as_secs_f64(),
        idle: publishing.idle.as_secs_f64(),
        idle_cycles: publishing.idle_cycles as f64,
        window_closed_cycles: (after.window_closed_cycles - before.window_closed_cycles) as f64,
    }
}

// ---------------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------------

/// Prints the rows as a table.
pub fn print_table(rows: &[StreamRow], cores: &Cores) {
    println!();
    println!(
        "Streaming, one publication -> one subscriber over UDP loopback (D = 1); publisher + Sender and \
         Receiver + subscriber on two cores ({}); S probed before and after each row on the same cores, C the \
         publication's control syscalls/s during the row",
        cores.describe()
    );
    println!(
        "| {:>5} | {:>5} | {:<7} | {:>9} | {:>11} | {:>7} | {:>6} | {:>5} | {:>22} | {:>14} | {:>6} | {:>9} | {:>13} | {:<9} |",
        "MTU",
        "msg B",
        "mode",
        "msg/s",
        "datagrams/s",
        "S /s",
        "C /s",
        "M_pkt",
        "model (S - C)/1 x M_pkt",
        "measured/model",
        "S used",
        "appending",
        "Sender idle",
        "limit"
    );
    println!(
        "|{:->7}|{:->7}|{:-<9}|{:->11}|{:->13}|{:->9}|{:->8}|{:->7}|{:->24}|{:->16}|{:->8}|{:->11}|{:->15}|{:-<11}|",
        ":", ":", "", ":", ":", ":", ":", ":", ":", ":", ":", ":", ":", ""
    );
    for row in rows {
        println!(
            "| {:>5} | {:>5} | {:<7} | {:>9} | {:>11} | {:>7} | {:>6} | {:>5} | {:>22} | {:>14} | {:>5.0}% | {:>8.0}% | {:>12.0}% | {:<9} |",
            row.mtu,
            row.msg,
            row.mode.as_str(),
            si(row.msgs_per_s),
            si(row.datagrams_per_s),
            si(row.s),
            si(row.c),
            row.capacity.map_or("n/a".into(), |c| c.packing.to_string()),
            row.capacity.map_or("n/a".into(), |c| si(c.mu)),
            row.ratio().map_or("n/a".into(), |r| format!("{r:.2}")),
            100.0 * row.s_used(),
            100.0 * row.append_share,
            100.0 * row.idle_share,
            row.limit()
        );
    }
}

/// The rows as `summary.json`'s `stream` array.
pub fn to_json(rows: &[StreamRow]) -> serde_json::Value {
    rows.iter().map(StreamRow::to_json).collect()
}
