//! GSO with runs of full 8192-byte datagrams: a batch of 16 would be 128 KiB, more than one UDP datagram
//! can carry, and the kernel refuses it with `EMSGSIZE`. The publication must cut the run (at 7 segments)
//! and keep the channel up, delivering every datagram.

use std::time::{Duration, Instant};

use quorumcast_driver::frame::{StatusMessageFrame, DATA_HEADER_LENGTH};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::transport::{probe_gso, RecvBatch, SendMode, SocketOptions, UdpEndpoint};
use quorumcast_driver::shm::log_buffer::{LogBuffer, LogConfig};
use socket2::SockAddr;

const MTU: usize = 8192;
const TERM_LENGTH: usize = 1 << 20;
const MESSAGES: usize = 32;

#[test]
fn gso_runs_of_full_mtu_datagrams_stay_within_one_udp_datagram() {
    if !probe_gso() {
        eprintln!("skipped: this kernel refuses UDP_SEGMENT");
        return;
    }
    let options = SocketOptions { send_buffer: None, receive_buffer: Some(4 << 20) };
    let (receiver, _) = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &options).unwrap();
    let log =
        LogBuffer::create_anonymous(LogConfig { session_id: 5, stream_id: 9, ..LogConfig::new(TERM_LENGTH, MTU) })
            .unwrap();
    let mut appender = log.appender().unwrap();
    let counters = SenderCounters::detached();
    let config = ChannelConfig {
        destinations: vec![receiver.local_addr()],
        mtu: MTU,
        term_length: TERM_LENGTH,
        send_mode: SendMode::Gso,
        batch_limit: 16,
        receiver_window: TERM_LENGTH / 2,
        ..ChannelConfig::default()
    };
    let mut publication = NetworkPublication::new(log, config, counters.clone()).unwrap();
    assert_eq!(publication.send_mode(), SendMode::Gso);

    // Open flow control: a status message from the destination, at position 0, with a window for everything.
    let mut sm = StatusMessageFrame {
        session_id: 5,
        stream_id: 9,
        consumption_term_id: 0,
        consumption_term_offset: 0,
        receiver_window: (TERM_LENGTH / 2) as i32,
        ..StatusMessageFrame::default()
    };
    sm.set_receiver_id(1);
    let mut bytes = [0u8; 64];
    let length = sm.encode(&mut bytes).unwrap();
    let publication_port = publication.local_addrs()[0].port();
    let to = SockAddr::from(std::net::SocketAddr::from(([127, 0, 0, 1], publication_port)));
    receiver.send(&bytes[..length], Some(&to));
    let mut control = RecvBatch::new(16, 1024);
    let deadline = Instant::now() + Duration::from_secs(10);
    while publication.flow_control().live_count() == 0 {
        assert!(Instant::now() < deadline, "the status message never arrived");
        publication.poll_control(0, &mut control, true);
        std::thread::yield_now();
    }

    // Every message fills one frame of exactly the MTU, so each datagram is a full 8192 bytes.
    appender.refresh_limit_from_consumers();
    for i in 0..MESSAGES {
        appender.append(&[i as u8; MTU - DATA_HEADER_LENGTH]).unwrap();
    }
    let mut batch = RecvBatch::new(64, MTU);
    let mut received = 0;
    while received < MESSAGES {
        assert!(Instant::now() < deadline, "received {received} of {MESSAGES}; counters {counters:#?}");
        publication.send(1);
        assert!(publication.failure().is_none(), "the channel stopped: {}", publication.failure().unwrap());
        let n = receiver.recv_batch(&mut batch).unwrap();
        for i in 0..n {
            let datagram = batch.datagram(i);
            if datagram.bytes.len() == MTU {
                assert_eq!(datagram.bytes[DATA_HEADER_LENGTH], received as u8, "datagrams in order");
                received += 1;
            }
        }
    }
    assert_eq!(counters.send_errors.get(), 0);
    assert!(counters.data_syscalls.get() >= (MESSAGES / 7) as i64, "runs of at most 7 segments");
}
