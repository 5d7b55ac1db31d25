//! What a session's open costs: from `ClusterClient::start_connect` to the first message's commit
//! acknowledgement, against a 3-node cluster in this process (invoker mode: the nodes and the client run on
//! the bench thread, so wall time is the CPU both sides spend, with loopback's kernel work).
//!
//! `cargo bench --bench open [-- --opens N]`: N opens (default 2,000), each followed by
//! one message and a close; prints the open-to-first-commit p50/p90/p99/max in microseconds, and the thread's
//! CPU microseconds per open. The open is one round trip to the leader (two since protocol 3: the cookie)
//! and an entry through the log; this bench shows what the handshake adds to it.

use std::time::{Duration, Instant};

use quorumcast::{ClientConfig, ClusterClient, Event};
use quorumcast::{ClientEndpointConfig, Node};
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel};
use quorumcast_testkit::ScratchDir;

fn thread_cpu_us() -> f64 {
    // SAFETY: clock_gettime writes one timespec we own.
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

fn turn(nodes: &mut [Node]) {
    for node in nodes.iter_mut() {
        node.invoke().expect("the nodes run");
        node.poll_service(256, |_, _| {});
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opens: usize = args
        .iter()
        .position(|a| a == "--opens")
        .and_then(|i| args.get(i + 1))
        .map_or(2_000, |n| n.parse().expect("--opens N"));
    let scratch = ScratchDir::new("bench-open");
    let members = members(3);
    let clients = ClientEndpointConfig::enabled(AuthKey::generate().expect("a key"));
    let mut nodes: Vec<Node> = (0..3)
        .map(|id| {
            test_builder(&scratch, id, &members, test_channel()).memory_log().clients(clients.clone()).start().unwrap()
        })
        .collect();
    elect(&mut nodes, 0, Duration::from_secs(30));
    let endpoints: Vec<(i32, std::net::SocketAddr)> = members.iter().map(|m| (m.id, m.client)).collect();
    let mut client = ClusterClient::new(ClientConfig::new(endpoints)).expect("a client");
    let mut latency = hdrhistogram::Histogram::<u64>::new(3).expect("a histogram");
    let mut turns = 0u64;
    let cpu_before = thread_cpu_us();
    let started = Instant::now();
    for _ in 0..opens {
        let open = Instant::now();
        client.start_connect();
        let mut committed = false;
        let mut offered = false;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !committed {
            assert!(Instant::now() < deadline, "no commit within 30 s");
            turn(&mut nodes);
            turns += 1;
            client.poll(|event| committed |= matches!(event, Event::Committed { .. }));
            if !offered && client.session_id().is_some() {
                client.offer(b"first").expect("offered");
                offered = true;
            }
        }
        latency.record(open.elapsed().as_nanos() as u64).expect("recorded");
        client.close();
        for _ in 0..8 {
            turn(&mut nodes);
            client.poll(|_| {});
        }
    }
    let cpu_us = (thread_cpu_us() - cpu_before) / opens as f64;
    let us = |q: f64| latency.value_at_quantile(q) as f64 / 1e3;
    println!(
        "opens {opens} in {:.2} s: open to first commit p50 {:.1} us, p90 {:.1}, p99 {:.1}, max {:.1}; \
         CPU {:.1} us per open (open, one message, close, every node's turns); {:.1} turns of every node per open",
        started.elapsed().as_secs_f64(),
        us(0.5),
        us(0.9),
        us(0.99),
        latency.max() as f64 / 1e3,
        cpu_us,
        turns as f64 / opens as f64
    );
}
