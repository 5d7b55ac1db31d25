//! The path MTU over a real link: two network namespaces joined by a veth pair, a Receiver in one and a
//! publication in the other.
//!
//! - Over a 1500-byte link, a channel with MTU 8192 is refused at start, in every send mode, with a message
//!   that names both the configured MTU and the path MTU.
//! - Over a 9000-byte link whose MTU drops to 1500 after the channel started, the first data send is
//!   refused by the kernel (`EMSGSIZE`, the sockets forbid fragmentation) and the channel stops with
//!   `PublicationError::PathMtu` naming both MTUs, in every send mode; the Sender agent reports it as its
//!   failure.
//! - Over a 1500-byte link, MTU 1408 carries 10,000 messages (some fragmented) complete and in order.
//!
//! The namespaces (`qc<pid><tag>a`/`b`, addresses 10.200.<tag>.1/24 and .2/24 on the veth ends, nothing
//! outside them) are made with `ip` and removed by a drop guard, also when a test fails. Sockets are
//! made inside a namespace by switching the test thread into it with `setns` for the duration of a
//! closure; a socket stays in the namespace it was made in. Every test drives the Sender and Receiver
//! by hand on its own thread (one thread per test, yielding when idle), with deadlines on every loop.
//! A test prints why and passes when it cannot make namespaces (not root, no `ip`, refused).

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use quorumcast_driver::agent::Agent;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, PublicationError, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::SendMode;
use quorumcast_driver::shm::log_buffer::{AppendError, ExclusiveAppender, LogBuffer, LogConfig};

const TERM_LENGTH: usize = 256 * 1024;
const STREAM: i32 = 21;
const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `ip` with `args`; the error carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}

/// Two namespaces joined by a veth pair; both are deleted on drop (which also deletes the pair).
struct Link {
    ns: [String; 2],
    devices: [String; 2],
    /// Addresses of the veth ends in namespaces `a` and `b`.
    addrs: [Ipv4Addr; 2],
    created: Vec<String>,
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in self.created.drain(..) {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

impl Link {
    /// Makes namespaces `qc<pid><tag>a` and `...b` joined by a veth pair of `mtu`, with 10.200.`tag`.1
    /// and .2; `Err` says why it could not.
    fn new(tag: u8, mtu: usize) -> Result<Self, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        let base = format!("qc{}{tag}", std::process::id());
        let ns = [format!("{base}a"), format!("{base}b")];
        let mut link = Link {
            devices: ns.clone(),
            ns,
            addrs: [Ipv4Addr::new(10, 200, tag, 1), Ipv4Addr::new(10, 200, tag, 2)],
            created: Vec::new(),
        };
        for ns in link.ns.clone() {
            ip(&["netns", "add", &ns])?;
            link.created.push(ns);
        }
        let [a, b] = &link.ns;
        let [va, vb] = &link.devices;
        // The pair is made inside `a` with its peer moved straight to `b`: nothing touches the host's namespace.
        ip(&["-n", a, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", b])?;
        let mtu = mtu.to_string();
        for (i, (ns, dev)) in [(a, va), (b, vb)].into_iter().enumerate() {
            ip(&["-n", ns, "addr", "add", &format!("{}/24", link.addrs[i]), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(link)
    }

    /// Sets the MTU of the veth end in namespace `a`.
    fn set_mtu_a(&self, mtu: usize) -> Result<(), String> {
        ip(&["-n", &self.ns[0], "link", "set", &self.devices[0], "mtu", &mtu.to_string()])
    }

    /// Runs `f` on this thread inside namespace `side` (0 = a, 1 = b), then switches back.
    fn run_in<T>(&self, side: usize, f: impl FnOnce() -> T) -> io::Result<T> {
        let original = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(format!("/run/netns/{}", self.ns[side]))?;
        setns(&target)?;
        struct Restore(File);
        impl Drop for Restore {
            fn drop(&mut self) {
                setns(&self.0).expect("cannot return to the test's own network namespace");
            }
        }
        let _restore = Restore(original);
        Ok(f())
    }

    fn addr(&self, side: usize, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.addrs[side]), port)
    }
}

/// Moves this thread into the network namespace of `file`.
fn setns(file: &File) -> io::Result<()> {
    // SAFETY: the descriptor is an open namespace file for the duration of the call; setns with
    // CLONE_NEWNET changes only the calling thread's network namespace and touches no memory of ours.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Makes the link, or prints why not and returns `None` (the test is skipped).
fn link_or_skip(test: &str, tag: u8, mtu: usize) -> Option<Link> {
    match Link::new(tag, mtu) {
        Ok(link) => Some(link),
        Err(reason) => {
            eprintln!("{test} skipped: {reason}");
            None
        }
    }
}

fn channel(mtu: usize, mode: SendMode) -> ChannelConfig {
    ChannelConfig {
        mtu,
        term_length: TERM_LENGTH,
        send_mode: mode,
        status_interval: Duration::from_millis(10),
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        ..ChannelConfig::default()
    }
}

/// A Receiver on the veth end of namespace `b` (port chosen by the kernel).
fn receiver_in_b(link: &Link, mtu: usize) -> (Receiver, Subscription, ReceiverCounters, SocketAddr) {
    let counters = ReceiverCounters::detached();
    let (receiver, mut subs, _) = link
        .run_in(1, || {
            let mut config = ReceiveChannelConfig::new(link.addr(1, 0), STREAM);
            config.channel = channel(mtu, SendMode::Classic);
            Receiver::new(vec![config], counters.clone())
        })
        .expect("enter namespace b")
        .expect("bind the receiver in namespace b");
    let addr = receiver.local_addr(0);
    (receiver, subs.remove(0), counters, addr)
}

fn log(mtu: usize) -> LogBuffer {
    let config =
        LogConfig { session_id: 55, stream_id: STREAM, initial_term_id: 3, ..LogConfig::new(TERM_LENGTH, mtu) };
    LogBuffer::create_anonymous(config).unwrap()
}

/// A publication in namespace `a` sending to `destination`.
fn publication_in_a(
    link: &Link,
    log: LogBuffer,
    mtu: usize,
    mode: SendMode,
    destination: SocketAddr,
) -> Result<NetworkPublication, PublicationError> {
    let config = ChannelConfig { destinations: vec![destination], ..channel(mtu, mode) };
    link.run_in(0, || NetworkPublication::new(log, config, SenderCounters::detached())).expect("enter namespace a")
}

#[test]
fn mtu_8192_is_refused_at_start_over_a_1500_byte_path() {
    let Some(link) = link_or_skip("mtu_8192_is_refused_at_start_over_a_1500_byte_path", 1, 1500) else {
        return;
    };
    let (_receiver, _sub, _, destination) = receiver_in_b(&link, 8192);
    for mode in SendMode::ALL {
        let err = publication_in_a(&link, log(8192), 8192, mode, destination).unwrap_err();
        assert!(matches!(err, PublicationError::Config(_)), "{mode}: {err:?}");
        let message = err.to_string();
        assert!(message.contains("MTU 8192"), "{mode}: the configured MTU is named: {message}");
        assert!(message.contains("path MTU 1500"), "{mode}: the path MTU is named: {message}");
        assert!(message.contains(&destination.to_string()), "{mode}: the destination is named: {message}");
    }
    // The same path takes the conservative preset.
    publication_in_a(&link, log(1408), 1408, SendMode::Classic, destination).unwrap();
}

/// Appends `message`, refreshing the limit from the sender's position when back-pressured.
fn offer(appender: &mut ExclusiveAppender, message: &[u8]) -> bool {
    match appender.append(message) {
        Ok(_) => true,
        Err(AppendError::BackPressured) => {
            appender.refresh_limit_from_consumers();
            false
        }
        Err(e) => panic!("append failed: {e}"),
    }
}

#[test]
fn a_path_that_shrinks_after_start_stops_the_channel_at_the_first_send() {
    let Some(link) = link_or_skip("a_path_that_shrinks_after_start_stops_the_channel_at_the_first_send", 2, 9000)
    else {
        return;
    };
    for mode in [SendMode::Mmsg, SendMode::Classic, SendMode::Gso] {
        let (mut receiver, _sub, _, destination) = receiver_in_b(&link, 8192);
        link.set_mtu_a(9000).unwrap();
        let log = log(8192);
        let mut appender = log.appender().unwrap();
        let publication = publication_in_a(&link, log, 8192, mode, destination).expect("8192 fits a 9000-byte path");
        let counters = publication.counters().clone();
        let mut sender = Sender::new(vec![publication]);

        // The path shrinks after the channel started: the start-up check cannot see it, the first send does.
        link.set_mtu_a(1500).unwrap();
        appender.refresh_limit_from_consumers();
        assert!(offer(&mut appender, &[7u8; 4000]), "a fresh log takes one message");
        let deadline = Instant::now() + DEADLINE;
        // The Sender runs in the publication's namespace, as it would in its own process there (a stopping
        // channel may open a socket to read the path MTU).
        let failure = link
            .run_in(0, || loop {
                assert!(Instant::now() < deadline, "{mode}: the channel never stopped; sender {counters:#?}");
                let result = sender.do_work();
                receiver.poll_once();
                match result {
                    Err(e) => break e.to_string(),
                    Ok(0) => std::thread::yield_now(),
                    Ok(_) => {}
                }
            })
            .expect("enter namespace a");
        let Some(PublicationError::PathMtu { destination: d, mtu, path_mtu, .. }) = sender.publications()[0].failure()
        else {
            panic!("{mode}: expected a path MTU failure, got {:?}", sender.publications()[0].failure());
        };
        assert_eq!((*d, *mtu, *path_mtu), (destination, 8192, Some(1500)), "{mode}");
        assert!(failure.contains("MTU 8192") && failure.contains("path MTU 1500"), "{mode}: {failure}");
        assert_eq!(counters.position.get(), 0, "{mode}: nothing was sent past the refused datagram");
        assert!(counters.send_errors.get() >= 1, "{mode}");
        // A stopped channel stays stopped: it sends nothing more.
        let syscalls = counters.data_syscalls.get() + counters.control_syscalls.get();
        assert_eq!(sender.publications_mut()[0].send(u64::MAX / 2), 0);
        assert_eq!(counters.data_syscalls.get() + counters.control_syscalls.get(), syscalls, "{mode}");
    }
}

/// The size of message `seq`: mostly small, some larger than the MTU (fragmented).
fn size_of(seq: u64) -> usize {
    match seq % 97 {
        0 => 5_000,
        1..=5 => 1_500,
        6..=30 => 400,
        _ => 8 + (seq % 200) as usize,
    }
}

fn message(seq: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend((8..size_of(seq)).map(|i| (seq as usize ^ i) as u8));
}

#[test]
fn mtu_1408_carries_ten_thousand_messages_over_a_1500_byte_path() {
    let Some(link) = link_or_skip("mtu_1408_carries_ten_thousand_messages_over_a_1500_byte_path", 3, 1500) else {
        return;
    };
    const TOTAL: u64 = 10_000;
    let (mut receiver, mut sub, receiver_counters, destination) = receiver_in_b(&link, 1408);
    let log = log(1408);
    let mut appender = log.appender().unwrap();
    let publication = publication_in_a(&link, log, 1408, SendMode::Classic, destination).unwrap();
    let counters = publication.counters().clone();
    let mut sender = Sender::new(vec![publication]);

    let (mut next_offer, mut next_read) = (0u64, 0u64);
    let (mut buf, mut want) = (Vec::new(), Vec::new());
    message(0, &mut buf);
    let deadline = Instant::now() + DEADLINE;
    while next_read < TOTAL {
        assert!(
            Instant::now() < deadline,
            "stalled: offered {next_offer}, read {next_read}; sender {counters:#?}\nreceiver {receiver_counters:#?}"
        );
        let mut work = 0;
        while next_offer < TOTAL && offer(&mut appender, &buf) {
            next_offer += 1;
            message(next_offer, &mut buf);
            work += 1;
        }
        work += sender.do_work().expect("the channel runs");
        work += receiver.poll_once();
        work += sub.poll(256, |payload| {
            message(next_read, &mut want);
            assert_eq!(payload.len(), want.len(), "message {next_read}: wrong length (lost or out of order)");
            assert!(payload == want.as_slice(), "message {next_read} corrupted or out of order");
            next_read += 1;
        });
        if work == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(receiver.images(0)[0].source().ip(), IpAddr::V4(link.addrs[0]), "the data crossed the veth pair");
    assert!(sender.publications()[0].failure().is_none());
    assert_eq!(receiver_counters.malformed.get(), 0);
    assert!(counters.datagrams.get() > 0 && counters.send_errors.get() == 0, "{counters:#?}");
}
