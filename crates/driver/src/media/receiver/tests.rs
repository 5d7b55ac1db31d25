//! The receive path over the in-process transport, driven by hand-built frames from a publisher endpoint:
//! SETUPs accepted and refused, a gap NAKed and filled, strangers' and malformed datagrams counted and
//! dropped, a SETUP asked for. Time is a number the test moves on; nothing here waits.

use super::*;
use crate::frame::{DataHeader, DATA_HEADER_LENGTH, UNFRAGMENTED};
use crate::media::transport::memory::{MemoryEndpoint, MemoryNetwork};

const TERM: usize = 64 * 1024;
const MTU: usize = 1408;
const SESSION: i32 = 7;
const STREAM: i32 = 10;
const INITIAL_TERM: i32 = 3;
/// Every data frame here is 256 bytes.
const FRAME: usize = 256;
const US: u64 = 1_000;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn channel() -> ChannelConfig {
    ChannelConfig {
        term_length: TERM,
        mtu: MTU,
        receiver_window: 8 * 1024,
        status_interval: Duration::from_millis(1),
        nak_delay: Duration::from_micros(100),
        nak_retry_delay: Duration::from_millis(1),
        ..ChannelConfig::default()
    }
}

/// A receiver on `net` for the test stream, accepting only `peers` (any source when empty).
fn receiver(net: &MemoryNetwork, peers: Vec<SocketAddr>) -> (Receiver<MemoryEndpoint>, Subscription) {
    let mut config = ReceiveChannelConfig::new(loopback(), STREAM);
    config.channel = channel();
    config.peers = peers;
    let (receiver, mut subscriptions, _) =
        Receiver::open(vec![config], ReceiverCounters::detached(), &mut net.clone()).unwrap();
    (receiver, subscriptions.remove(0))
}

/// A receiver that made an image of a publisher's session from its SETUP at time 0, the status message
/// answering it drained: the receiver, its subscription, its address and the publisher's endpoint.
fn joined(net: &MemoryNetwork) -> (Receiver<MemoryEndpoint>, Subscription, SocketAddr, MemoryEndpoint) {
    let (mut receiver, subscription) = receiver(net, Vec::new());
    let at = receiver.local_addr(0);
    let mut publisher = net.bind(loopback(), false).unwrap();
    send(&mut publisher, at, &setup(TERM, MTU));
    receiver.poll_at(0);
    publisher.drain();
    (receiver, subscription, at, publisher)
}

fn setup(term_length: usize, mtu: usize) -> Vec<u8> {
    setup_at(term_length, mtu, 0)
}

/// A SETUP of the test session with the publisher at `term_offset` of its initial term.
fn setup_at(term_length: usize, mtu: usize, term_offset: usize) -> Vec<u8> {
    let setup = SetupFrame {
        session_id: SESSION,
        stream_id: STREAM,
        initial_term_id: INITIAL_TERM,
        active_term_id: INITIAL_TERM,
        term_offset: term_offset as i32,
        term_length: term_length as i32,
        mtu: mtu as i32,
        ..SetupFrame::default()
    };
    let mut bytes = vec![0u8; frame::SETUP_LENGTH];
    setup.encode(&mut bytes).unwrap();
    bytes
}

/// One data frame of [`FRAME`] bytes at `offset` of the initial term of `stream`, its payload all `fill`.
fn data(stream: i32, offset: usize, fill: u8) -> Vec<u8> {
    let header = DataHeader::new(SESSION, stream, INITIAL_TERM, offset as i32, UNFRAGMENTED);
    let mut bytes = vec![0u8; FRAME];
    frame::encode_data(&mut bytes, &header, &[fill; FRAME - DATA_HEADER_LENGTH]).unwrap();
    bytes
}

fn send(from: &mut MemoryEndpoint, to: SocketAddr, bytes: &[u8]) {
    assert!(matches!(from.send(bytes, Some(&socket2::SockAddr::from(to))), SendOutcome::Sent(1)));
}

fn status_messages(frames: &[Vec<u8>]) -> Vec<StatusMessageFrame> {
    frames
        .iter()
        .filter_map(|f| match frame::parse(f) {
            Ok(Frame::StatusMessage { frame, .. }) => Some(frame),
            _ => None,
        })
        .collect()
}

#[test]
fn a_setup_for_another_term_length_or_mtu_is_refused_and_a_matching_one_makes_the_image() {
    let net = MemoryNetwork::new();
    let (mut receiver, mut subscription) = receiver(&net, Vec::new());
    let at = receiver.local_addr(0);
    let mut publisher = net.bind(loopback(), false).unwrap();

    send(&mut publisher, at, &setup(2 * TERM, MTU));
    send(&mut publisher, at, &setup(TERM, 8192));
    receiver.poll_at(0);
    let counters = receiver.counters();
    assert_eq!((counters.setups.get(), counters.setups_refused.get()), (2, 2));
    assert!(receiver.images(0).is_empty());
    assert!(!subscription.is_connected());
    assert!(publisher.drain().is_empty(), "a refused SETUP is not answered");

    send(&mut publisher, at, &setup(TERM, MTU));
    receiver.poll_at(US);
    assert_eq!(receiver.counters().images.get(), 1);
    assert_eq!(receiver.images(0).len(), 1);
    assert!(subscription.is_connected());
    let answers = status_messages(&publisher.drain());
    assert_eq!(answers.len(), 1, "the new image says where it is and how much it takes");
    let sm = answers[0];
    assert_eq!(
        (sm.session_id, sm.stream_id, sm.consumption_term_id, sm.consumption_term_offset),
        (SESSION, STREAM, INITIAL_TERM, 0)
    );
    assert_eq!(sm.receiver_window, 8 * 1024);
    assert_eq!(sm.flags & SM_SEND_SETUP_FLAG, 0);
}

#[test]
fn an_image_that_received_nothing_moves_up_to_a_newer_setup_only_past_its_window() {
    let net = MemoryNetwork::new();
    let (mut first, mut subscription, at, mut publisher) = joined(&net);

    // The publisher sent 4 frames to the live receivers before this one's status message made it live, and
    // repeats its SETUP: within the window, the image stays where it joined and the frames are repaired.
    send(&mut publisher, at, &setup_at(TERM, MTU, 4 * FRAME));
    first.poll_at(US);
    assert_eq!(first.images(0)[0].join_position(), 0, "within the window the image keeps its join position");
    let answers = status_messages(&publisher.drain());
    assert_eq!(answers.len(), 1, "the repeated SETUP is answered");
    assert_eq!(answers[0].consumption_term_offset, 0);
    for i in 0..5 {
        send(&mut publisher, at, &data(STREAM, i * FRAME, i as u8));
    }
    first.poll_at(2 * US);
    let mut read = Vec::new();
    subscription.poll(16, |m| read.push(m[0]));
    assert_eq!(read, [0, 1, 2, 3, 4], "nothing before the newer SETUP is lost");

    // A second session whose stream passed this image's window (8 KiB) before it heard anything moves up.
    let (mut late, _late_subscription) = receiver(&net, Vec::new());
    let late_at = late.local_addr(0);
    send(&mut publisher, late_at, &setup(TERM, MTU));
    late.poll_at(0);
    send(&mut publisher, late_at, &setup_at(TERM, MTU, 16 * 1024));
    late.poll_at(US);
    let joined: Vec<i64> = late.images(0).iter().map(|i| i.join_position()).collect();
    assert_eq!(joined, [16 * 1024], "past the window, an untouched image joins where the stream is");
}

#[test]
fn a_gap_is_naked_after_the_delay_and_the_resent_frame_completes_the_log() {
    let net = MemoryNetwork::new();
    let (mut receiver, mut subscription, at, mut publisher) = joined(&net);

    // The frame at 256 is lost.
    send(&mut publisher, at, &data(STREAM, 0, 1));
    send(&mut publisher, at, &data(STREAM, 2 * FRAME, 3));
    receiver.poll_at(10 * US);
    let mut read = Vec::new();
    subscription.poll(16, |m| read.push(m[0]));
    assert_eq!(read, [1], "only what is complete is read");
    let naks = |frames: Vec<Vec<u8>>| -> Vec<NakFrame> {
        frames
            .iter()
            .filter_map(|f| match frame::parse(f) {
                Ok(Frame::Nak(nak)) => Some(nak),
                _ => None,
            })
            .collect()
    };
    assert!(naks(publisher.drain()).is_empty(), "not before the NAK delay");

    receiver.poll_at(200 * US);
    let sent = naks(publisher.drain());
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].session_id, sent[0].stream_id), (SESSION, STREAM));
    assert_eq!((sent[0].term_id, sent[0].term_offset, sent[0].length), (INITIAL_TERM, FRAME as i32, FRAME as i32));
    assert_eq!(receiver.counters().naks.get(), 1);

    send(&mut publisher, at, &data(STREAM, FRAME, 2));
    receiver.poll_at(210 * US);
    subscription.poll(16, |m| read.push(m[0]));
    assert_eq!(read, [1, 2, 3]);
    assert_eq!(receiver.images(0)[0].rebuild_position(), 3 * FRAME as i64);

    send(&mut publisher, at, &data(STREAM, FRAME, 2));
    receiver.poll_at(220 * US);
    assert_eq!(receiver.counters().duplicates.get(), 1, "a frame received twice is dropped");
}

#[test]
fn strangers_malformed_datagrams_and_other_streams_are_counted_and_dropped() {
    let net = MemoryNetwork::new();
    let mut publisher = net.bind(loopback(), false).unwrap();
    let (mut receiver, mut subscription) = receiver(&net, vec![publisher.local_addr()]);
    let at = receiver.local_addr(0);
    let mut stranger = net.bind(loopback(), false).unwrap();

    send(&mut stranger, at, &setup(TERM, MTU));
    send(&mut stranger, at, &data(STREAM, 0, 1));
    receiver.poll_at(0);
    let counters = receiver.counters();
    assert_eq!((counters.foreign.get(), counters.foreign_setups.get(), counters.foreign_data.get()), (2, 1, 1));
    assert_eq!(counters.foreign_members.get(), 0);
    assert!(receiver.images(0).is_empty());
    assert!(stranger.drain().is_empty(), "a stranger gets no answer");

    send(&mut publisher, at, &setup(TERM, MTU));
    send(&mut publisher, at, &[0xee; 20]);
    send(&mut publisher, at, &data(STREAM + 1, 0, 1));
    let mut cut = data(STREAM, 0, 1);
    cut.truncate(100); // a frame longer than its datagram
    send(&mut publisher, at, &cut);
    receiver.poll_at(US);
    let counters = receiver.counters();
    assert_eq!(counters.malformed.get(), 2);
    assert_eq!(counters.unknown_stream.get(), 1);
    assert_eq!(counters.datagrams.get(), 6);
    assert_eq!(receiver.images(0).len(), 1, "the publisher's SETUP made the image");
    assert_eq!(receiver.images(0)[0].hwm(), 0, "and nothing was written to it");
    assert_eq!(subscription.poll(16, |_| panic!("nothing to read")), 0);
}

#[test]
fn data_without_an_image_asks_for_a_setup_once_per_status_interval() {
    let net = MemoryNetwork::new();
    let (mut receiver, _subscription) = receiver(&net, Vec::new());
    let at = receiver.local_addr(0);
    let mut publisher = net.bind(loopback(), false).unwrap();

    send(&mut publisher, at, &data(STREAM, 0, 1));
    send(&mut publisher, at, &data(STREAM, FRAME, 2));
    receiver.poll_at(0);
    let asked = status_messages(&publisher.drain());
    assert_eq!(asked.len(), 1, "once for both datagrams");
    assert_ne!(asked[0].flags & SM_SEND_SETUP_FLAG, 0);
    assert_eq!((asked[0].session_id, asked[0].stream_id), (SESSION, STREAM));
    assert_eq!(receiver.counters().unknown_stream.get(), 2);

    send(&mut publisher, at, &data(STREAM, 2 * FRAME, 3));
    receiver.poll_at(500 * US);
    assert!(publisher.drain().is_empty(), "not again within the status interval");
    send(&mut publisher, at, &data(STREAM, 3 * FRAME, 4));
    receiver.poll_at(1_000 * US);
    assert_eq!(status_messages(&publisher.drain()).len(), 1);
}

/// A follower's channel, told the session it follows and from where, asks for a SETUP before any of the
/// publisher's datagrams arrive: at once, then 0.5 ms later, then 1 ms later (doubling up to the status
/// interval), and no more once the SETUP made its image.
#[test]
fn a_channel_told_its_session_asks_its_peer_for_a_setup_until_it_has_an_image() {
    let net = MemoryNetwork::new();
    let mut publisher = net.bind(loopback(), false).unwrap();
    let mut config = ReceiveChannelConfig::new(loopback(), STREAM);
    config.channel = ChannelConfig { status_interval: Duration::from_millis(4), ..channel() };
    config.peers = vec![publisher.local_addr()];
    config.session_id = Some(SESSION);
    let (mut receiver, _subscriptions, _) =
        Receiver::open(vec![config], ReceiverCounters::detached(), &mut net.clone()).unwrap();
    let at = receiver.local_addr(0);

    let asks_at = |receiver: &mut Receiver<MemoryEndpoint>, publisher: &mut MemoryEndpoint, now_ns: u64| {
        receiver.poll_at(now_ns);
        let sent = status_messages(&publisher.drain());
        let asked: Vec<_> = sent.iter().filter(|sm| sm.flags & SM_SEND_SETUP_FLAG != 0).collect();
        assert!(asked.iter().all(|sm| (sm.session_id, sm.stream_id) == (SESSION, STREAM)));
        asked.len()
    };
    assert_eq!(asks_at(&mut receiver, &mut publisher, 0), 1, "at once");
    assert_eq!(asks_at(&mut receiver, &mut publisher, 400 * US), 0);
    assert_eq!(asks_at(&mut receiver, &mut publisher, 500 * US), 1);
    assert_eq!(asks_at(&mut receiver, &mut publisher, 1_400 * US), 0);
    assert_eq!(asks_at(&mut receiver, &mut publisher, 1_500 * US), 1);

    send(&mut publisher, at, &setup(TERM, MTU));
    receiver.poll_at(1_600 * US);
    assert_eq!(receiver.images(0).len(), 1, "the SETUP made the image");
    publisher.drain();
    assert_eq!(asks_at(&mut receiver, &mut publisher, 100_000 * US), 0, "no more asks once it has an image");
}
