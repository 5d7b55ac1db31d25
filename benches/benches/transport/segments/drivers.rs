//! The segment drivers, generic over the medium: one way, one request at a time, a pipeline of
//! requests, and the bare UDP ping-pong floor; each on the two bench threads, checking that every message
//! arrives whole and in order.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use quorumcast_bench::bench::{new_histogram, record, Cores};
use quorumcast_driver::frame::DATA_HEADER_LENGTH;

use super::side::Side;
use crate::{FRAGMENT_LIMIT, PIPELINE_WINDOW, STALL};

/// Aligned length of a message's frames in the log (header per fragment, 32-byte alignment).
fn framed(size: usize, mtu: usize) -> usize {
    let payload = mtu - DATA_HEADER_LENGTH;
    let fragments = size.div_ceil(payload).max(1);
    (size + fragments * DATA_HEADER_LENGTH + 31) & !31
}

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
pub fn one_way(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize, mtu: usize) -> f64 {
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
pub fn rtt(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize) -> (Histogram<u64>, f64) {
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
pub fn pipeline(cores: &Cores, a: &mut dyn Side, b: &mut dyn Side, size: usize, count: usize) -> f64 {
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
pub fn udp_floor(cores: &Cores, size: usize, count: usize) -> Histogram<u64> {
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
