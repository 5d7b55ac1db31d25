//! One publication to two receivers over UDP loopback: every message arrives complete, in order, exactly
//! once, in every send mode, at MTU 1408 and 8192, with and without injected loss, duplication and
//! reordering on data and control traffic; a receiver that stops is dropped from flow control and the
//! stream goes on; a restarted receiver joins again.
//!
//! Threads: the Sender and both Receivers run as one composite agent with a backoff idle strategy; the
//! test thread publishes and reads both subscriptions. Two threads, two cores.

use std::time::{Duration, Instant};

use quorumcast_driver::agent::idle::{Idle, IdleStrategyConfig};
use quorumcast_driver::agent::{AgentCounters, AgentRunner, CompositeAgent};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::faulty::{FaultConfig, Faulty};
use quorumcast_driver::media::transport::{SendMode, Udp};
use quorumcast_driver::shm::log_buffer::{AppendError, ExclusiveAppender, LogBuffer, LogConfig};

const TERM_LENGTH: usize = 256 * 1024;
const STREAM: i32 = 10;

/// The size of message `seq`: mostly small, with some larger than either MTU (fragmented).
fn size_of(seq: u64) -> usize {
    let x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    match x % 1000 {
        0 => 20_000,
        1..=4 => 9_000,
        5..=30 => 2_000,
        31..=200 => 300,
        _ => 8 + (x % 120) as usize,
    }
}

/// Message `seq`: its sequence number, then bytes that depend on both.
fn message(seq: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&seq.to_le_bytes());
    let len = size_of(seq);
    buf.extend((8..len).map(|i| (seq as usize ^ i) as u8));
}

fn check(expected_seq: u64, payload: &[u8]) {
    let mut want = Vec::new();
    message(expected_seq, &mut want);
    let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
    assert_eq!(seq, expected_seq, "message out of order or lost");
    assert!(payload == want.as_slice(), "message {seq} corrupted");
}

struct Setup {
    counters: SenderCounters,
    receiver_counters: Vec<ReceiverCounters>,
    appender: ExclusiveAppender,
    runner: AgentRunner,
    subscriptions: Vec<Subscription>,
}

fn start(mode: SendMode, mtu: usize, faults: bool, receiver_timeout: Duration) -> Setup {
    let fault = |seed| {
        if faults {
            FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed }
        } else {
            FaultConfig::default()
        }
    };
    let mut channel = ChannelConfig {
        mtu,
        term_length: TERM_LENGTH,
        send_mode: mode,
        receiver_timeout,
        receive_faults: fault(7),
        // Loopback round trips are tens of microseconds: repair lost NAKs and resends within a millisecond.
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        // A lost status message that would open a closed window costs a status interval of silence.
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    };
    let mut receivers = Vec::new();
    let mut subscriptions = Vec::new();
    let mut receiver_counters = Vec::new();
    for seed in [1u64, 2] {
        let mut config = ReceiveChannelConfig::new("127.0.0.1:0".parse().unwrap(), STREAM);
        config.channel = ChannelConfig { receive_faults: fault(seed * 100), ..channel.clone() };
        let rc = ReceiverCounters::detached();
        receiver_counters.push(rc.clone());
        let receive_faults = config.channel.receive_faults;
        let mut network = Faulty::new(Udp, FaultConfig::default(), receive_faults);
        let (receiver, mut subs, _) = Receiver::open(vec![config], rc, &mut network).unwrap();
        channel.destinations.push(receiver.local_addr(0));
        subscriptions.push(subs.remove(0));
        receivers.push(receiver);
    }
    let log_config =
        LogConfig { session_id: 77, stream_id: STREAM, initial_term_id: 5, ..LogConfig::new(TERM_LENGTH, mtu) };
    let log = LogBuffer::create_anonymous(log_config).unwrap();
    let appender = log.appender().unwrap();
    let counters = SenderCounters::detached();
    let mut network = Faulty::new(Udp, channel.send_faults, channel.receive_faults);
    let publication = NetworkPublication::open(log, channel, counters.clone(), &mut network).unwrap();
    assert_eq!(publication.send_mode(), mode, "{:?}", publication.warnings());
    let mut agents: Vec<Box<dyn quorumcast_driver::agent::Agent>> = vec![Box::new(Sender::new(vec![publication]))];
    agents.extend(receivers.into_iter().map(|r| Box::new(r) as Box<dyn quorumcast_driver::agent::Agent>));
    let idle = Idle::new(&"backoff:10,5,1us,100us".parse::<IdleStrategyConfig>().unwrap()).unwrap();
    let runner = AgentRunner::start(CompositeAgent::new(agents), idle, None, AgentCounters::detached()).unwrap();
    Setup { counters, receiver_counters, appender, runner, subscriptions }
}

/// Offers `seq`, refreshing the limit from the sender's position when back-pressured.
fn offer(appender: &mut ExclusiveAppender, buf: &[u8]) -> bool {
    match appender.append(buf) {
        Ok(_) => true,
        Err(AppendError::BackPressured) => {
            appender.refresh_limit_from_consumers();
            false
        }
        Err(e) => panic!("append failed: {e}"),
    }
}

fn stream(mode: SendMode, mtu: usize, faults: bool, total: u64) {
    let Setup { counters, receiver_counters, mut appender, runner, mut subscriptions } =
        start(mode, mtu, faults, Duration::from_secs(5));
    let started = Instant::now();
    let mut next_offer = 0u64;
    let mut next_read = [0u64; 2];
    let mut buf = Vec::new();
    message(0, &mut buf);
    let deadline = Instant::now() + Duration::from_secs(60);
    while next_read.iter().any(|&n| n < total) {
        assert!(
            Instant::now() < deadline,
            "stalled: offered {next_offer}, read {next_read:?}; {:?}\nsender {counters:#?}\nreceivers {receiver_counters:#?}",
            runner.status()
        );
        let mut progressed = false;
        for _ in 0..256 {
            if next_offer >= total || !offer(&mut appender, &buf) {
                break;
            }
            next_offer += 1;
            message(next_offer, &mut buf);
            progressed = true;
        }
        for (s, sub) in subscriptions.iter_mut().enumerate() {
            let next = &mut next_read[s];
            progressed |= sub.poll(1024, |payload| {
                check(*next, payload);
                *next += 1;
            }) > 0;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    assert!(runner.failure().is_none(), "{:?}", runner.failure());
    runner.close().unwrap();
    let c = &counters;
    eprintln!(
        "{mode} mtu {mtu} faults {faults}: {total} messages in {:?}; data syscalls {}, control syscalls {}, retransmits {}, NAKs {}, stalls {}, short sends {}",
        started.elapsed(),
        c.data_syscalls.get(),
        c.control_syscalls.get(),
        c.retransmits.get(),
        c.naks_received.get(),
        c.flow_control_stalls.get(),
        c.short_sends.get()
    );
}

macro_rules! stream_tests {
    ($($name:ident: $mode:expr, $mtu:expr, $faults:expr;)*) => {$(
        #[test]
        fn $name() {
            stream($mode, $mtu, $faults, 1_000_000);
        }
    )*};
}

stream_tests! {
    classic_1408: SendMode::Classic, 1408, false;
    classic_8192: SendMode::Classic, 8192, false;
    mmsg_1408: SendMode::Mmsg, 1408, false;
    mmsg_8192: SendMode::Mmsg, 8192, false;
    gso_1408: SendMode::Gso, 1408, false;
    gso_8192: SendMode::Gso, 8192, false;
    classic_1408_faults: SendMode::Classic, 1408, true;
    classic_8192_faults: SendMode::Classic, 8192, true;
    mmsg_1408_faults: SendMode::Mmsg, 1408, true;
    mmsg_8192_faults: SendMode::Mmsg, 8192, true;
    gso_1408_faults: SendMode::Gso, 1408, true;
    gso_8192_faults: SendMode::Gso, 8192, true;
}

/// Starts a Receiver on its own runner (backoff idle), bound to `bind`.
fn receiver_on(
    bind: std::net::SocketAddr,
    channel: &ChannelConfig,
) -> (AgentRunner, Subscription, std::net::SocketAddr) {
    let mut config = ReceiveChannelConfig::new(bind, STREAM);
    config.channel = channel.clone();
    let (receiver, mut subs, _) = Receiver::new(vec![config], ReceiverCounters::detached()).unwrap();
    let addr = receiver.local_addr(0);
    let idle = Idle::new(&"backoff:10,5,1us,100us".parse::<IdleStrategyConfig>().unwrap()).unwrap();
    let runner = AgentRunner::start(receiver, idle, None, AgentCounters::detached()).unwrap();
    (runner, subs.remove(0), addr)
}

/// Publishes and reads until `done(reads)` holds, asserting every subscription sees a contiguous sequence.
struct Driver {
    counters: SenderCounters,
    appender: ExclusiveAppender,
    next_offer: u64,
    buf: Vec<u8>,
}

impl Driver {
    fn pump(&mut self, subs: &mut [(&mut Subscription, &mut Option<u64>)], until: impl Fn(u64) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !until(self.next_offer) || subs.iter().any(|(_, next)| next.is_none_or(|n| n < self.next_offer)) {
            assert!(
                Instant::now() < deadline,
                "stalled at {} offered, read {:?}; sender {:#?}",
                self.next_offer,
                subs.iter().map(|(_, n)| **n).collect::<Vec<_>>(),
                self.counters
            );
            let mut progressed = false;
            while !until(self.next_offer) && offer(&mut self.appender, &self.buf) {
                self.next_offer += 1;
                message(self.next_offer, &mut self.buf);
                progressed = true;
            }
            for (sub, next) in subs.iter_mut() {
                progressed |= sub.poll(1024, |payload| {
                    let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
                    let expected = next.unwrap_or(seq); // a receiver that joins late starts where it joined
                    check(expected, payload);
                    **next = Some(expected + 1);
                }) > 0;
            }
            if !progressed {
                std::thread::yield_now();
            }
        }
    }
}

#[test]
fn a_stopped_receiver_is_dropped_and_a_restarted_one_joins_again() {
    let channel = ChannelConfig {
        mtu: 1408,
        term_length: TERM_LENGTH,
        receiver_timeout: Duration::from_millis(300),
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    };
    let (runner_a, mut sub_a, addr_a) = receiver_on("127.0.0.1:0".parse().unwrap(), &channel);
    let (runner_b, mut sub_b, addr_b) = receiver_on("127.0.0.1:0".parse().unwrap(), &channel);
    let log = LogBuffer::create_anonymous(LogConfig {
        session_id: 9,
        stream_id: STREAM,
        ..LogConfig::new(TERM_LENGTH, 1408)
    })
    .unwrap();
    let appender = log.appender().unwrap();
    let counters = SenderCounters::detached();
    let publication = NetworkPublication::new(
        log,
        ChannelConfig { destinations: vec![addr_a, addr_b], ..channel.clone() },
        counters.clone(),
    )
    .unwrap();
    let idle = Idle::new(&"backoff:10,5,1us,100us".parse::<IdleStrategyConfig>().unwrap()).unwrap();
    let sender = AgentRunner::start(Sender::new(vec![publication]), idle, None, AgentCounters::detached()).unwrap();
    let mut driver = Driver { counters: counters.clone(), appender, next_offer: 0, buf: Vec::new() };
    message(0, &mut driver.buf);
    let (mut next_a, mut next_b) = (Some(0), Some(0));
    // Both images first: a receiver whose SETUP is answered after the stream has passed its window joins
    // where the stream is (Aeron's rule for a late subscriber), and this test reads both from message 0.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(sub_a.is_connected() && sub_b.is_connected()) {
        assert!(Instant::now() < deadline, "the receivers never got a SETUP");
        std::thread::yield_now();
    }
    driver.pump(&mut [(&mut sub_a, &mut next_a), (&mut sub_b, &mut next_b)], |n| n >= 50_000);
    runner_b.close().unwrap();
    drop(sub_b);
    // B is gone: the stream stalls on B's window until its time-out, then goes on to A alone.
    driver.pump(&mut [(&mut sub_a, &mut next_a)], |n| n >= 150_000);
    assert_eq!(counters.receivers_timed_out.get(), 1, "B was dropped from flow control");

    let (runner_b, mut sub_b, _) = receiver_on(addr_b, &channel);
    let mut next_b = None;
    // Keep the stream flowing until the restarted B has its image (the sender's SETUP reaches it).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sub_b.is_connected() {
        assert!(Instant::now() < deadline, "the restarted receiver never got a SETUP");
        let target = driver.next_offer + 100;
        driver.pump(&mut [(&mut sub_a, &mut next_a)], |n| n >= target);
    }
    let connected_at = driver.next_offer;
    driver.pump(&mut [(&mut sub_a, &mut next_a), (&mut sub_b, &mut next_b)], |n| n >= connected_at + 100_000);
    assert!(next_b.unwrap() > connected_at, "the restarted receiver joined the live stream and read to its end");
    assert_eq!(next_a, next_b, "both receivers end at the same message");
    sender.close().unwrap();
    runner_a.close().unwrap();
    runner_b.close().unwrap();
}

#[test]
fn ipv6_destinations_stream_too() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback on this host");
        return;
    }
    let channel = ChannelConfig { mtu: 1408, term_length: TERM_LENGTH, ..ChannelConfig::default() };
    let (runner, mut sub, addr) = receiver_on("[::1]:0".parse().unwrap(), &channel);
    let log = LogBuffer::create_anonymous(LogConfig {
        session_id: 6,
        stream_id: STREAM,
        ..LogConfig::new(TERM_LENGTH, 1408)
    })
    .unwrap();
    let appender = log.appender().unwrap();
    let counters = SenderCounters::detached();
    let publication =
        NetworkPublication::new(log, ChannelConfig { destinations: vec![addr], ..channel }, counters.clone()).unwrap();
    let idle = Idle::new(&"backoff:10,5,1us,100us".parse::<IdleStrategyConfig>().unwrap()).unwrap();
    let sender = AgentRunner::start(Sender::new(vec![publication]), idle, None, AgentCounters::detached()).unwrap();
    let mut driver = Driver { counters, appender, next_offer: 0, buf: Vec::new() };
    message(0, &mut driver.buf);
    let mut next = Some(0);
    driver.pump(&mut [(&mut sub, &mut next)], |n| n >= 20_000);
    assert_eq!(next, Some(20_000));
    sender.close().unwrap();
    runner.close().unwrap();
}

#[test]
fn a_log_that_starts_past_zero_is_joined_where_it_starts() {
    // A new leader continues the cluster's log at its own append position: its publication's log starts
    // there, mid-term, and a receiver that gets its SETUP joins at that position and reads on from it.
    let start = 3 * TERM_LENGTH as i64 + 4096;
    let channel = ChannelConfig { mtu: 1408, term_length: TERM_LENGTH, ..ChannelConfig::default() };
    let (runner, mut sub, addr) = receiver_on("127.0.0.1:0".parse().unwrap(), &channel);
    let config = LogConfig { session_id: 7, stream_id: STREAM, ..LogConfig::new(TERM_LENGTH, 1408) };
    let log = LogBuffer::create_anonymous_at(config, start).unwrap();
    let appender = log.appender().unwrap();
    let counters = SenderCounters::detached();
    let publication =
        NetworkPublication::new(log, ChannelConfig { destinations: vec![addr], ..channel }, counters.clone()).unwrap();
    assert_eq!(publication.sender_position(), start);
    let idle = Idle::new(&"backoff:10,5,1us,100us".parse::<IdleStrategyConfig>().unwrap()).unwrap();
    let sender = AgentRunner::start(Sender::new(vec![publication]), idle, None, AgentCounters::detached()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sub.is_connected() {
        assert!(Instant::now() < deadline, "the receiver never got a SETUP");
        std::thread::yield_now();
    }
    assert_eq!(sub.position(), Some(start), "joined where the log starts");
    let mut driver = Driver { counters, appender, next_offer: 0, buf: Vec::new() };
    message(0, &mut driver.buf);
    let mut next = Some(0);
    driver.pump(&mut [(&mut sub, &mut next)], |n| n >= 20_000);
    assert_eq!(next, Some(20_000), "every message from the start on, in order");
    assert!(sub.position().unwrap() > start + TERM_LENGTH as i64, "read on across term boundaries");
    sender.close().unwrap();
    runner.close().unwrap();
}
