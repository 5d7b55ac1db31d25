//! Committed messages per second through the async client ([`AsyncClient`], awaited from tokio tasks)
//! beside the blocking `offer` + `poll` loop of a [`ClusterClient`], against the same in-process 3-node
//! cluster in the same run (invoker mode, one thread idling with a backoff), and the sequential forms
//! (one message awaited at a time: `offer(..).await` against `offer_and_wait`).
//!
//! `cargo run --release --example async_throughput [messages]`; each figure is the best of two runs,
//! the forms alternating.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumcast::{
    AsyncClient, AsyncConfig, ClientConfig, ClientEndpointConfig, ClientOfferError, ClusterClient, Event, Idle, Member,
    Node,
};
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel};
use quorumcast_testkit::ScratchDir;

const PAYLOAD: usize = 32;

fn main() {
    let messages: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let scratch = ScratchDir::new("async-throughput");
    let members = members(3);
    let clients = ClientEndpointConfig::enabled(AuthKey::new([0x5e; 32]));
    let mut nodes: Vec<Node> = (0..3)
        .map(|id| {
            test_builder(&scratch, id, &members, test_channel()).memory_log().clients(clients.clone()).start().unwrap()
        })
        .collect();
    elect(&mut nodes, 0, Duration::from_secs(60));
    let stop = Arc::new(AtomicBool::new(false));
    let nodes_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut idle = Idle::backoff();
            while !stop.load(Ordering::Relaxed) {
                let mut work = 0;
                for node in nodes.iter_mut() {
                    work += node.invoke().unwrap();
                    // Every message answered with its first 8 bytes.
                    work += node.poll_service(1024, |entry, out| {
                        if entry.client.is_some() {
                            out.extend_from_slice(&entry.payload[..8]);
                        }
                    });
                }
                idle.idle(work);
            }
            for node in nodes {
                let _ = node.close();
            }
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let sequential = (messages / 50).max(100);
    let mut best = [0f64; 4];
    for _ in 0..2 {
        let figures = [
            pipelined_blocking(&members, messages),
            pipelined_async(&rt, &members, messages),
            sequential_blocking(&members, sequential),
            sequential_async(&rt, &members, sequential),
        ];
        for (best, figure) in best.iter_mut().zip(figures) {
            *best = best.max(figure);
        }
    }
    println!("{messages} messages of {PAYLOAD} bytes, pipelined (the client's window full):");
    println!("  blocking offer + poll loop:  {:>9.0} msg/s", best[0]);
    println!("  async, 4 tasks x 256 awaited: {:>9.0} msg/s ({:.2} of blocking)", best[1], best[1] / best[0]);
    println!("{sequential} messages, one at a time:");
    println!("  blocking offer_and_wait:      {:>9.0} msg/s", best[2]);
    println!("  async offer(..).await:        {:>9.0} msg/s ({:.2} of blocking)", best[3], best[3] / best[2]);
    stop.store(true, Ordering::Relaxed);
    nodes_thread.join().unwrap();
}

fn client(members: &[Member]) -> ClusterClient {
    let mut client = ClusterClient::new(ClientConfig::new(members.iter().map(|m| (m.id, m.client)).collect())).unwrap();
    client.connect(Duration::from_secs(30)).unwrap();
    client
}

fn message(seq: u64) -> [u8; PAYLOAD] {
    let mut bytes = [7u8; PAYLOAD];
    bytes[..8].copy_from_slice(&seq.to_le_bytes());
    bytes
}

/// The blocking loop an application writes: offer until back-pressured, poll, wait on the socket when
/// nothing happened.
fn pipelined_blocking(members: &[Member], messages: u64) -> f64 {
    let mut client = client(members);
    let start = Instant::now();
    let (mut offered, mut committed) = (0, 0);
    while committed < messages {
        while offered < messages {
            match client.offer(&message(offered)) {
                Ok(_) => offered += 1,
                Err(ClientOfferError::BackPressured) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let work = client.poll(|event| {
            if let Event::Committed { .. } = event {
                committed += 1;
            }
        });
        if work == 0 {
            client.wait(Duration::from_millis(1)).unwrap();
        }
    }
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    client.close();
    rate
}

fn pipelined_async(rt: &tokio::runtime::Runtime, members: &[Member], messages: u64) -> f64 {
    const TASKS: u64 = 4;
    const CONCURRENT: u64 = 256;
    let handle = AsyncClient::spawn(client(members), AsyncConfig::default()).unwrap();
    let start = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let per_task = messages / TASKS;
                    let mut seq = task * per_task;
                    let end = seq + per_task;
                    while seq < end {
                        let batch: Vec<_> =
                            (seq..(seq + CONCURRENT).min(end)).map(|s| handle.offer(&message(s))).collect();
                        seq += batch.len() as u64;
                        for future in batch {
                            future.await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    (messages / TASKS * TASKS) as f64 / start.elapsed().as_secs_f64()
}

fn sequential_blocking(members: &[Member], messages: u64) -> f64 {
    let mut client = client(members);
    let start = Instant::now();
    for seq in 0..messages {
        client.offer_and_wait(&message(seq), Duration::from_secs(30)).unwrap();
    }
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    client.close();
    rate
}

fn sequential_async(rt: &tokio::runtime::Runtime, members: &[Member], messages: u64) -> f64 {
    let handle = AsyncClient::spawn(client(members), AsyncConfig::default()).unwrap();
    let start = Instant::now();
    rt.block_on(async {
        for seq in 0..messages {
            handle.offer(&message(seq)).await.unwrap();
        }
    });
    messages as f64 / start.elapsed().as_secs_f64()
}
