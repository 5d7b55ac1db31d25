//! The UDP endpoint on loopback: sends in each mode, batched receives, buffer warnings, runs the kernel cuts.

use super::send::segment_run;
use super::socket::buffer_clamp;
use super::*;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn endpoint() -> UdpEndpoint {
    UdpEndpoint::bind(loopback(), &SocketOptions::default()).unwrap().0
}

/// Receives until `want` datagrams arrived (loopback delivers synchronously, so a few polls suffice).
fn drain(rx: &UdpEndpoint, want: usize) -> Vec<(Vec<u8>, Option<SocketAddr>)> {
    let mut batch = RecvBatch::new(16, 2048);
    let mut got = Vec::new();
    for _ in 0..10_000 {
        let n = rx.recv_batch(&mut batch).unwrap();
        for i in 0..n {
            let d = batch.datagram(i);
            assert!(!d.truncated);
            got.push((d.bytes.to_vec(), d.source));
        }
        if got.len() >= want {
            break;
        }
        std::thread::yield_now();
    }
    got
}

#[test]
fn send_modes_parse_and_print() {
    for mode in SendMode::ALL {
        assert_eq!(mode.to_string().parse::<SendMode>().unwrap(), mode);
    }
    assert!("fast".parse::<SendMode>().unwrap_err().contains("classic, mmsg or gso"));
}

#[test]
fn a_clamped_buffer_is_told_from_the_kernels_doubling() {
    assert_eq!(buffer_clamp("SO_RCVBUF", 4 << 20, 8 << 20, "net.core.rmem_max"), None, "granted in full");
    let clamped = buffer_clamp("SO_RCVBUF", 8 << 20, 8 << 20, "net.core.rmem_max").unwrap();
    assert!(clamped.contains("granted 4194304") && clamped.contains("rmem_max=8388608"), "{clamped}");
}

#[test]
fn classic_send_to_connected_and_addressed_peers() {
    let rx = endpoint();
    let mut tx = endpoint();
    assert!(matches!(tx.send(b"addressed", Some(&SockAddr::from(rx.local_addr()))), SendOutcome::Sent(1)));
    tx.connect(rx.local_addr()).unwrap();
    assert!(matches!(tx.send(b"connected", None), SendOutcome::Sent(1)));
    let got = drain(&rx, 2);
    assert_eq!(got[0].0, b"addressed");
    assert_eq!(got[1].0, b"connected");
    assert_eq!(got[1].1, Some(tx.local_addr()));
    assert!(tx.path_max_payload().unwrap() >= 1408);
}

#[test]
fn mmsg_fans_each_datagram_out_to_every_destination() {
    let (a, b) = (endpoint(), endpoint());
    let tx = endpoint();
    let dests = [SockAddr::from(a.local_addr()), SockAddr::from(b.local_addr())];
    let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100 + i as usize]).collect();
    let datagrams: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let mut scratch = MmsgScratch::default();
    let (outcome, calls) = tx.send_mmsg(&datagrams, &dests, &mut scratch);
    assert!(matches!(outcome, SendOutcome::Sent(80)), "{outcome:?}");
    assert_eq!(calls, 2, "80 messages need two calls of at most {MAX_BATCH}");
    for rx in [&a, &b] {
        let got: Vec<Vec<u8>> = drain(rx, 40).into_iter().map(|(d, _)| d).collect();
        assert_eq!(got, payloads);
    }
}

#[test]
fn gso_cuts_a_run_into_equal_segments() {
    if !probe_gso() {
        eprintln!("skipped: this kernel refuses UDP_SEGMENT");
        return;
    }
    let rx = endpoint();
    let mut tx = endpoint();
    tx.connect(rx.local_addr()).unwrap();
    let data: Vec<u8> = (0..(5 * 1408 + 300)).map(|i| (i % 251) as u8).collect();
    assert!(matches!(tx.send_gso(&data, 1408), SendOutcome::Sent(6)));
    let got = drain(&rx, 6);
    assert_eq!(got.len(), 6);
    let joined: Vec<u8> = got.iter().flat_map(|(d, _)| d.clone()).collect();
    assert_eq!(joined, data);
    assert_eq!(got[5].0.len(), 300);
}

#[test]
fn a_run_is_as_long_as_its_first_datagram_allows() {
    let d = |lengths: &[usize]| -> Vec<Vec<u8>> { lengths.iter().map(|&l| vec![1u8; l]).collect() };
    let run = |lengths: &[usize]| {
        let owned = d(lengths);
        let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        segment_run(&slices)
    };
    assert_eq!(run(&[]), 0);
    assert_eq!(run(&[100]), 1);
    assert_eq!(run(&[100, 100, 100]), 3);
    assert_eq!(run(&[100, 100, 60, 100]), 3, "a shorter datagram ends the run it joins");
    assert_eq!(run(&[100, 120, 100]), 1, "a longer one starts another");
    assert_eq!(run(&[100, 0]), 1, "an empty one is never cut from a buffer");
    assert_eq!(run(&[8192; 20]), MAX_GSO_BYTES / 8192, "at most 64 KiB in all");
    assert_eq!(run(&[16; 100]), MAX_GSO_SEGMENTS);
}

#[test]
fn runs_go_in_one_call_each_and_arrive_whole_in_order() {
    let rx = endpoint();
    let dest = SockAddr::from(rx.local_addr());
    let mut tx = endpoint();
    // Two runs (each ending with a shorter datagram), then two datagrams that start none.
    let lengths = [1408, 1408, 1408, 1000, 1408, 1408, 700, 900, 1200];
    let owned: Vec<Vec<u8>> =
        lengths.iter().enumerate().map(|(i, &l)| (0..l).map(|j| (i * 7 + j) as u8).collect()).collect();
    let datagrams: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let (outcome, calls) = tx.send_runs(&datagrams, &dest, &mut MmsgScratch::default());
    assert!(matches!(outcome, SendOutcome::Sent(9)), "{outcome:?}");
    if probe_gso() {
        assert_eq!(calls, 3, "a call per run, one for the rest");
    }
    let got: Vec<Vec<u8>> = drain(&rx, 9).into_iter().map(|(d, _)| d).collect();
    assert_eq!(got, owned);
}

#[test]
fn oversized_datagram_is_refused_not_fragmented() {
    let rx = endpoint();
    let mut tx = endpoint();
    tx.connect(rx.local_addr()).unwrap();
    let big = vec![0u8; 70_000];
    assert!(matches!(tx.send(&big, None), SendOutcome::TooLarge { datagram: 70_000, .. }));
}

#[test]
fn empty_socket_receives_nothing_and_truncation_is_flagged() {
    let rx = endpoint();
    let mut batch = RecvBatch::new(4, 64);
    assert_eq!(rx.recv_batch(&mut batch).unwrap(), 0);
    let mut tx = endpoint();
    tx.connect(rx.local_addr()).unwrap();
    assert!(matches!(tx.send(&[7u8; 200], None), SendOutcome::Sent(1)));
    let mut n = 0;
    for _ in 0..1000 {
        n = rx.recv_batch(&mut batch).unwrap();
        if n > 0 {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(n, 1);
    assert!(batch.datagram(0).truncated);
    assert_eq!(batch.datagram(0).bytes.len(), 64);
}

#[test]
fn clamped_buffers_are_reported_with_the_sysctl() {
    let huge = 1 << 30;
    let options = SocketOptions { send_buffer: Some(huge), receive_buffer: Some(huge) };
    let (_e, warnings) = UdpEndpoint::bind(loopback(), &options).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("net.core.wmem_max"));
    assert!(warnings[1].contains("net.core.rmem_max"));
}

#[test]
fn ipv6_loopback_works_when_available() {
    let Ok((rx, _)) = UdpEndpoint::bind("[::1]:0".parse().unwrap(), &SocketOptions::default()) else {
        eprintln!("skipped: no IPv6 loopback");
        return;
    };
    let (mut tx, _) = UdpEndpoint::bind("[::1]:0".parse().unwrap(), &SocketOptions::default()).unwrap();
    tx.connect(rx.local_addr()).unwrap();
    assert!(matches!(tx.send(b"six", None), SendOutcome::Sent(1)));
    let got = drain(&rx, 1);
    assert_eq!(got[0].0, b"six");
    assert_eq!(got[0].1, Some(tx.local_addr()));
}
