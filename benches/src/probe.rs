//! Probes of this host's send path: the model's S, measured with the engine's own socket code.
//!
//! S is the rate at which one thread can put datagrams on the wire with `sendmsg` (`docs/MODEL.md`); it
//! depends on the CPU and the kernel's send path, so it must be measured where the numbers are read. [`probe_s`] sends
//! datagrams of one size from one thread to `D` loopback destinations, which a second thread drains, for a
//! few windows, and reports the median window. On loopback every send also runs the receive path on the
//! sender's CPU (about a third of its time), so S here is lower than over a real NIC.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::SockAddr;

use quorumcast_driver::media::transport::{MmsgScratch, RecvBatch, SendMode, SendOutcome, SocketOptions, UdpEndpoint};

/// One measurement of the send path.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SendRate {
    /// How the datagrams were sent.
    pub send_mode: SendMode,
    /// Bytes per datagram.
    pub datagram_bytes: usize,
    /// Destinations each datagram went to.
    pub destinations: usize,
    /// Datagrams the kernel took per second (counting each destination).
    pub datagrams_per_s: f64,
    /// Send syscalls per second.
    pub syscalls_per_s: f64,
}

/// Where the probe's two threads run: the sending thread where the cluster's Sender runs, the draining
/// thread where its receivers run, so that S is measured on the cores that will spend it. `None` leaves a
/// thread unpinned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeCores {
    /// Core of the sending thread.
    pub sender: Option<usize>,
    /// Core of the draining thread.
    pub drain: Option<usize>,
}

/// Datagrams per `sendmmsg` or GSO call in the batched modes.
pub const PROBE_BATCH: usize = 16;

/// Measures the send rate of one thread for datagrams of `datagram_bytes` to `destinations` loopback
/// receivers, in `mode`: `windows` windows of `window` each; returns the median window. The sending thread
/// and the draining thread run on `cores`.
pub fn probe_s(
    mode: SendMode,
    datagram_bytes: usize,
    destinations: usize,
    window: Duration,
    windows: usize,
    cores: ProbeCores,
) -> std::io::Result<SendRate> {
    let options = SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(8 << 20) };
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let mut receivers = Vec::with_capacity(destinations);
    for _ in 0..destinations {
        receivers.push(UdpEndpoint::bind(loopback, &options)?.0);
    }
    let addrs: Vec<SocketAddr> = receivers.iter().map(UdpEndpoint::local_addr).collect();
    let running = Arc::new(AtomicBool::new(true));
    let drainer = {
        let running = Arc::clone(&running);
        std::thread::spawn(move || {
            // Drains even when unpinned, so the sending thread never waits on full sockets; the error
            // comes out once it has stopped.
            let pinned = pin(cores.drain);
            drain(receivers, datagram_bytes, &running);
            pinned
        })
    };
    let result = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                pin(cores.sender)?;
                send_windows(mode, datagram_bytes, &addrs, &options, window, windows.max(1))
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the probe's sending thread panicked")))
    });
    running.store(false, Ordering::Release);
    let drained = drainer.join().unwrap_or_else(|_| Err(std::io::Error::other("the probe's draining thread panicked")));
    result.and_then(|rate| drained.map(|()| rate))
}

/// Pins the calling thread to `core`, when given. An S measured on other cores than asked is not the S
/// of the layout it is read against, so a refused pin is an error, not a silent fallback.
pub fn pin(core: Option<usize>) -> std::io::Result<()> {
    match core {
        Some(core) => quorumcast_driver::agent::pin_current_thread(core).map_err(std::io::Error::other),
        None => Ok(()),
    }
}

fn drain(receivers: Vec<UdpEndpoint>, datagram_bytes: usize, running: &AtomicBool) {
    let mut batch = RecvBatch::new(64, datagram_bytes.max(64));
    while running.load(Ordering::Acquire) {
        let mut got = 0;
        for r in &receivers {
            got += r.recv_batch(&mut batch).unwrap_or(0);
        }
        if got == 0 {
            std::thread::yield_now();
        }
    }
}

fn send_windows(
    mode: SendMode,
    datagram_bytes: usize,
    addrs: &[SocketAddr],
    options: &SocketOptions,
    window: Duration,
    windows: usize,
) -> std::io::Result<SendRate> {
    let payload = vec![0x5Au8; datagram_bytes * PROBE_BATCH];
    let mut connected = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        let (mut endpoint, _) = UdpEndpoint::bind("127.0.0.1:0".parse().expect("an address"), options)?;
        endpoint.connect(addr)?;
        connected.push(endpoint);
    }
    let (shared, _) = UdpEndpoint::bind("127.0.0.1:0".parse().expect("an address"), options)?;
    let sock_addrs: Vec<SockAddr> = addrs.iter().map(|&a| SockAddr::from(a)).collect();
    let mut scratch = MmsgScratch::default();
    let mut samples = Vec::with_capacity(windows);
    for _ in 0..windows {
        let (mut datagrams, mut syscalls) = (0u64, 0u64);
        let start = Instant::now();
        while start.elapsed() < window {
            for _ in 0..64 {
                let (d, s) = match mode {
                    SendMode::Classic => send_classic(&connected, &payload[..datagram_bytes]),
                    SendMode::Mmsg => send_mmsg(&shared, &payload, datagram_bytes, &sock_addrs, &mut scratch),
                    SendMode::Gso => send_gso(&connected, &payload, datagram_bytes),
                };
                datagrams += d;
                syscalls += s;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        samples.push((datagrams as f64 / seconds, syscalls as f64 / seconds));
    }
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (datagrams_per_s, syscalls_per_s) = samples[samples.len() / 2];
    Ok(SendRate { send_mode: mode, datagram_bytes, destinations: addrs.len(), datagrams_per_s, syscalls_per_s })
}

fn taken(outcome: SendOutcome) -> u64 {
    match outcome {
        SendOutcome::Sent(n) => n as u64,
        _ => 0,
    }
}

fn send_classic(connected: &[UdpEndpoint], datagram: &[u8]) -> (u64, u64) {
    let sent = connected.iter().map(|e| taken(e.send(datagram, None))).sum();
    (sent, connected.len() as u64)
}

fn send_mmsg(
    shared: &UdpEndpoint,
    payload: &[u8],
    datagram_bytes: usize,
    addrs: &[SockAddr],
    scratch: &mut MmsgScratch,
) -> (u64, u64) {
    let mut datagrams: [&[u8]; PROBE_BATCH] = [&[]; PROBE_BATCH];
    for (i, slot) in datagrams.iter_mut().enumerate() {
        *slot = &payload[i * datagram_bytes..(i + 1) * datagram_bytes];
    }
    let (outcome, calls) = shared.send_mmsg(&datagrams, addrs, scratch);
    (taken(outcome), calls as u64)
}

fn send_gso(connected: &[UdpEndpoint], payload: &[u8], datagram_bytes: usize) -> (u64, u64) {
    // One GSO send carries at most one UDP payload's worth of segments (7 of 8192 B, not 16).
    let segments = (quorumcast_driver::frame::MAX_UDP_PAYLOAD_LENGTH / datagram_bytes.max(1)).clamp(1, PROBE_BATCH);
    let payload = &payload[..segments * datagram_bytes];
    let sent = connected.iter().map(|e| taken(e.send_gso(payload, datagram_bytes))).sum();
    (sent, connected.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_measures_a_positive_rate() {
        for mode in SendMode::ALL {
            if mode == SendMode::Gso && !quorumcast_driver::media::transport::probe_gso() {
                continue;
            }
            let rate = probe_s(mode, 1408, 2, Duration::from_millis(20), 1, ProbeCores::default()).unwrap();
            assert!(rate.datagrams_per_s > 0.0 && rate.syscalls_per_s > 0.0, "{rate:?}");
            let jumbo = probe_s(mode, 8192, 2, Duration::from_millis(20), 1, ProbeCores::default()).unwrap();
            assert!(jumbo.datagrams_per_s > 0.0, "{jumbo:?}");
            assert_eq!((rate.destinations, rate.datagram_bytes), (2, 1408));
            let per_call = rate.datagrams_per_s / rate.syscalls_per_s;
            match mode {
                SendMode::Classic => assert!((per_call - 1.0).abs() < 1e-9, "one datagram per sendmsg"),
                _ => assert!(per_call > 1.0, "{mode}: several datagrams per call, got {per_call}"),
            }
        }
    }

    #[test]
    fn send_modes_serialize_as_their_names() {
        assert_eq!(serde_json::to_string(&SendMode::Gso).unwrap(), "\"gso\"");
        assert_eq!(serde_json::from_str::<SendMode>("\"mmsg\"").unwrap(), SendMode::Mmsg);
    }
}
