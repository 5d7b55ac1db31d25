//! Hostile and broken traffic on both ends of a UDP stream, over real loopback sockets.
//!
//! - A Receiver whose `peers` is a hand-driven "publisher" socket (it speaks the protocol with the
//!   `frame` encoders): datagrams from a stranger, garbage, truncated frames, impossible lengths and
//!   offsets, other streams, sessions without a SETUP, duplicates and data beyond the window are each
//!   counted in their own counter and dropped, and the valid stream around them is delivered whole and
//!   in order.
//! - A property test: mutated copies of the session's own frames, and random bytes, never panic the
//!   Receiver, each is counted as received, and a publisher that starts a new session afterwards is heard.
//! - A publication whose destination is a hand-driven "receiver" socket: garbage, truncated, oversized,
//!   wrong-session, wrong-stream and impossible status messages and NAKs are counted in `invalid_packets`
//!   and ignored, a stranger's status message changes nothing, and the stream goes on.
//!
//! Every test drives the agents by hand on its own thread, yielding while it waits for a counter.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use socket2::SockAddr;

use quorumcast_driver::frame::{
    self, align_frame, DataHeader, Frame, NakFrame, RttmFrame, SetupFrame, StatusMessageFrame, BEGIN_FLAG,
    SM_SEND_SETUP_FLAG, TYPE_PAD, UNFRAGMENTED,
};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::receiver::{ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::{RecvBatch, SendMode, SendOutcome, SocketOptions, UdpEndpoint};
use quorumcast_driver::shm::log_buffer::{LogBuffer, LogConfig};

const TERM_LENGTH: usize = 64 * 1024;
const MTU: usize = 1408;
const STREAM: i32 = 10;
const SESSION: i32 = 4242;
const INITIAL_TERM: i32 = 5;
const DEADLINE: Duration = Duration::from_secs(20);

fn endpoint() -> UdpEndpoint {
    UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap().0
}

fn send_to(from: &UdpEndpoint, to: SocketAddr, bytes: &[u8]) {
    let outcome = from.send(bytes, Some(&SockAddr::from(to)));
    assert!(matches!(outcome, SendOutcome::Sent(1)), "loopback send of {} bytes: {outcome:?}", bytes.len());
}

/// Runs `step` (yielding between calls) until it says it is done; panics with `what` after the deadline.
fn wait_for(what: &str, mut step: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !step() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn channel() -> ChannelConfig {
    ChannelConfig {
        mtu: MTU,
        term_length: TERM_LENGTH,
        receiver_window: TERM_LENGTH / 2,
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    }
}

fn setup_frame(session_id: i32) -> Vec<u8> {
    let setup = SetupFrame {
        session_id,
        stream_id: STREAM,
        initial_term_id: INITIAL_TERM,
        active_term_id: INITIAL_TERM,
        term_offset: 0,
        term_length: TERM_LENGTH as i32,
        mtu: MTU as i32,
        ..SetupFrame::default()
    };
    let mut bytes = vec![0u8; SetupFrame::LENGTH];
    setup.encode(&mut bytes).unwrap();
    bytes
}

/// Message `seq` of the valid stream.
fn payload(seq: u64) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend((0..(seq % 90) as usize).map(|i| (seq as usize + i) as u8));
    p
}

/// One unfragmented data frame as a datagram (unpadded, as the last frame of a datagram may be).
fn data_frame(session_id: i32, stream_id: i32, term_id: i32, term_offset: i32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; 32 + payload.len()];
    let header = DataHeader::new(session_id, stream_id, term_id, term_offset, UNFRAGMENTED);
    frame::encode_data(&mut bytes, &header, payload).unwrap();
    bytes
}

/// A Receiver listening for `peer` only, and the state of the hand-made stream sent to it.
struct Rig {
    receiver: Receiver,
    sub: Subscription,
    counters: ReceiverCounters,
    addr: SocketAddr,
    publisher: UdpEndpoint,
    stranger: UdpEndpoint,
    sent: i64,
    next_offset: i32,
    next_seq: u64,
    delivered: Vec<Vec<u8>>,
}

impl Rig {
    /// A Receiver whose only peer is `publisher`, with an image of session `SESSION` (its SETUP sent).
    fn new() -> Self {
        let publisher = endpoint();
        let mut config = ReceiveChannelConfig::new("127.0.0.1:0".parse().unwrap(), STREAM);
        config.peers = vec![publisher.local_addr()];
        config.channel = channel();
        let counters = ReceiverCounters::detached();
        let (receiver, mut subs, _) = Receiver::new(vec![config], counters.clone()).unwrap();
        let addr = receiver.local_addr(0);
        let mut rig = Rig {
            receiver,
            sub: subs.remove(0),
            counters,
            addr,
            publisher,
            stranger: endpoint(),
            sent: 0,
            next_offset: 0,
            next_seq: 0,
            delivered: Vec::new(),
        };
        rig.send_from_publisher(&setup_frame(SESSION));
        assert_eq!((rig.counters.setups.get(), rig.counters.images.get()), (1, 1));
        rig
    }

    /// Runs the receiver and reads the subscription until every datagram sent so far was received.
    fn settle(&mut self) {
        let (receiver, sub, counters, delivered, sent) =
            (&mut self.receiver, &mut self.sub, &self.counters, &mut self.delivered, self.sent);
        wait_for("the receiver to take every datagram", || {
            receiver.poll_once();
            sub.poll(64, |p| delivered.push(p.to_vec()));
            counters.datagrams.get() >= sent
        });
        assert_eq!(counters.datagrams.get(), sent, "loopback lost or invented a datagram");
        // One more cycle each, so feedback and the subscription catch up with what just arrived.
        receiver.poll_once();
        sub.poll(64, |p| delivered.push(p.to_vec()));
    }

    fn send_from_publisher(&mut self, bytes: &[u8]) {
        send_to(&self.publisher, self.addr, bytes);
        self.sent += 1;
        self.settle();
    }

    fn send_from_stranger(&mut self, bytes: &[u8]) {
        send_to(&self.stranger, self.addr, bytes);
        self.sent += 1;
        self.settle();
    }

    /// The next valid data frame of the stream, not yet sent.
    fn next_frame(&self) -> Vec<u8> {
        data_frame(SESSION, STREAM, INITIAL_TERM, self.next_offset, &payload(self.next_seq))
    }

    /// Sends the next valid message and checks that it, and everything before it, was delivered in order.
    fn send_valid(&mut self) {
        let frame = self.next_frame();
        self.send_from_publisher(&frame);
        self.next_offset += align_frame(frame.len()) as i32;
        self.next_seq += 1;
        let (sub, delivered, receiver) = (&mut self.sub, &mut self.delivered, &mut self.receiver);
        let want = self.next_seq as usize;
        wait_for("the valid message to be delivered", || {
            receiver.poll_once();
            sub.poll(64, |p| delivered.push(p.to_vec()));
            delivered.len() >= want
        });
        let expected: Vec<Vec<u8>> = (0..self.next_seq).map(payload).collect();
        assert_eq!(self.delivered, expected, "the valid stream is delivered whole and in order");
    }

    /// The drop counters, in the order `malformed, foreign, unknown_stream, duplicates, out_of_window`.
    fn drops(&self) -> [i64; 5] {
        let c = &self.counters;
        [c.malformed.get(), c.foreign.get(), c.unknown_stream.get(), c.duplicates.get(), c.out_of_window.get()]
    }
}

const MALFORMED: usize = 0;
const FOREIGN: usize = 1;
const UNKNOWN: usize = 2;
const DUPLICATE: usize = 3;
const OUT_OF_WINDOW: usize = 4;
const NAMES: [&str; 5] = ["malformed", "foreign", "unknown_stream", "duplicates", "out_of_window"];

/// Sends `bytes` (from the stranger when `stranger`) and checks that exactly counter `expect` rose by one.
fn expect_dropped(rig: &mut Rig, what: &str, bytes: &[u8], stranger: bool, expect: usize) {
    let before = rig.drops();
    let (images, hwm) = (rig.counters.images.get(), rig.receiver.images(0)[0].hwm());
    if stranger {
        rig.send_from_stranger(bytes);
    } else {
        rig.send_from_publisher(bytes);
    }
    let mut want = before;
    want[expect] += 1;
    assert_eq!(rig.drops(), want, "{what}: counted as {} (order: {NAMES:?})", NAMES[expect]);
    assert_eq!(rig.counters.images.get(), images, "{what}: no new image");
    assert_eq!(rig.receiver.images(0)[0].hwm(), hwm, "{what}: the image did not move");
}

/// Sets the i32 at `offset` of `bytes`.
fn put_i32(bytes: &mut [u8], offset: usize, value: i32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

#[test]
fn every_kind_of_bad_datagram_is_counted_and_dropped_and_the_stream_goes_on() {
    let mut rig = Rig::new();
    for _ in 0..3 {
        rig.send_valid();
    }
    let next = rig.next_frame();
    let next_offset = rig.next_offset;
    let at = |offset: i32| data_frame(SESSION, STREAM, INITIAL_TERM, offset, &payload(99));

    // Sources that are not the configured peer.
    expect_dropped(&mut rig, "a stranger's valid data frame", &next, true, FOREIGN);
    expect_dropped(&mut rig, "a stranger's SETUP", &setup_frame(SESSION + 1), true, FOREIGN);
    assert_eq!(rig.counters.setups.get(), 1, "a stranger's SETUP is not even read");

    // Bytes that are not frames.
    expect_dropped(&mut rig, "garbage", &[0xAB; 100], false, MALFORMED);
    expect_dropped(&mut rig, "three bytes", &[0, 0, 0], false, MALFORMED);
    expect_dropped(
        &mut rig,
        "an unknown frame type",
        &{
            let mut b = next.clone();
            b[6] = 0x7F;
            b
        },
        false,
        MALFORMED,
    );
    expect_dropped(&mut rig, "a data header cut at 20 bytes", &next[..20], false, MALFORMED);
    expect_dropped(&mut rig, "a data frame cut inside its payload", &next[..next.len() - 4], false, MALFORMED);
    let big = data_frame(SESSION, STREAM, INITIAL_TERM, rig.next_offset, &vec![1u8; 20_000]);
    expect_dropped(&mut rig, "a datagram longer than the receive buffer", &big, false, MALFORMED);

    // Impossible lengths and offsets.
    let with = |offset: usize, value: i32| {
        let mut b = next.clone();
        put_i32(&mut b, offset, value);
        b
    };
    expect_dropped(&mut rig, "a negative frame length", &with(0, -64), false, MALFORMED);
    expect_dropped(&mut rig, "a frame length below the header", &with(0, 16), false, MALFORMED);
    expect_dropped(&mut rig, "a frame length beyond the datagram", &with(0, 4096), false, MALFORMED);
    expect_dropped(&mut rig, "a negative term offset", &with(8, -32), false, MALFORMED);
    expect_dropped(&mut rig, "an unaligned term offset", &with(8, next_offset + 8), false, MALFORMED);
    expect_dropped(&mut rig, "a term offset at the term's end", &at(TERM_LENGTH as i32), false, MALFORMED);
    expect_dropped(&mut rig, "a term offset far beyond the term", &at(1 << 30), false, MALFORMED);
    expect_dropped(&mut rig, "a frame that crosses the term's end", &at(TERM_LENGTH as i32 - 32), false, MALFORMED);
    let mut pad = vec![0u8; 32];
    let pad_header = DataHeader { frame_type: TYPE_PAD, ..DataHeader::new(SESSION, STREAM, INITIAL_TERM, 4096, 0) };
    frame::encode_pad(&mut pad, &pad_header, TERM_LENGTH).unwrap();
    expect_dropped(&mut rig, "a PAD longer than the rest of the term", &pad, false, MALFORMED);
    // A valid frame followed by a broken one: nothing of the datagram is written, not even the valid frame.
    let mut two = next.clone();
    two.resize(align_frame(next.len()), 0);
    two.extend_from_slice(&[0xEE; 40]);
    expect_dropped(&mut rig, "a valid frame then a broken one", &two, false, MALFORMED);
    // A valid frame followed by a frame of another session: a datagram carries one session's frames only.
    let mut mixed = next.clone();
    mixed.resize(align_frame(next.len()), 0);
    let second_offset = rig.next_offset + align_frame(next.len()) as i32;
    mixed.extend_from_slice(&data_frame(SESSION + 1, STREAM, INITIAL_TERM, second_offset, &payload(1)));
    expect_dropped(&mut rig, "a frame of another session after a valid one", &mixed, false, MALFORMED);
    let mut short_setup = setup_frame(SESSION);
    put_i32(&mut short_setup, 28, 4096); // a term length below 64 KiB
    expect_dropped(&mut rig, "a SETUP with an impossible term length", &short_setup, false, MALFORMED);
    assert_eq!(rig.counters.setups.get(), 2, "the peer's broken SETUP was read, and refused");

    // Well-formed, but not for this channel's image.
    let other_stream = data_frame(SESSION, STREAM + 1, INITIAL_TERM, rig.next_offset, &payload(0));
    expect_dropped(&mut rig, "another stream", &other_stream, false, UNKNOWN);
    let mut sms = RecvBatch::new(32, 256);
    while rig.publisher.recv_batch(&mut sms).unwrap() > 0 {} // the status messages so far
    let no_setup = data_frame(SESSION + 7, STREAM, INITIAL_TERM, 0, &payload(0));
    expect_dropped(&mut rig, "a session that sent no SETUP", &no_setup, false, UNKNOWN);
    let mut asked = false;
    wait_for("the receiver to ask the unknown session for a SETUP", || {
        let n = rig.publisher.recv_batch(&mut sms).unwrap();
        for i in 0..n {
            if let Ok(Frame::StatusMessage { frame, .. }) = frame::parse(sms.datagram(i).bytes) {
                asked |= frame.session_id == SESSION + 7 && frame.flags & SM_SEND_SETUP_FLAG != 0;
            }
        }
        asked
    });

    // The image's own data, already had or too far ahead.
    let first = data_frame(SESSION, STREAM, INITIAL_TERM, 0, &payload(0));
    expect_dropped(&mut rig, "a copy of the first message", &first, false, DUPLICATE);
    expect_dropped(&mut rig, "data beyond the window", &at(40_000), false, OUT_OF_WINDOW);
    let far_term = data_frame(SESSION, STREAM, INITIAL_TERM + 100, 0, &payload(0));
    expect_dropped(&mut rig, "a term far ahead", &far_term, false, OUT_OF_WINDOW);

    // The valid stream goes on where it was, and the valid frame of the broken datagram was not written.
    let duplicates = rig.counters.duplicates.get();
    for _ in 0..20 {
        rig.send_valid();
    }
    assert_eq!(rig.counters.duplicates.get(), duplicates, "none of the later valid frames was already there");
    assert_eq!(rig.counters.recv_errors.get(), 0);
}

/// How one datagram of the property test is made from a valid frame of the session.
#[derive(Clone, Debug)]
enum Mutation {
    /// Sent as it is.
    Intact,
    /// One byte XORed with a non-zero value.
    Flip { at: usize, with: u8 },
    /// One header field (an i32 at a multiple of 4 below 32) replaced.
    Field { at: usize, value: i32 },
    /// Cut to `len` bytes.
    Truncate { len: usize },
    /// Random bytes appended.
    Extend { tail: Vec<u8> },
    /// Random bytes instead of the frame.
    Random { bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let edge = prop_oneof![
        any::<i32>(),
        Just(0),
        Just(-1),
        Just(i32::MIN),
        Just(i32::MAX),
        Just(TERM_LENGTH as i32),
        Just(TERM_LENGTH as i32 - 32),
        (0..TERM_LENGTH as i32 / 32).prop_map(|k| k * 32),
        (INITIAL_TERM - 2..INITIAL_TERM + 4),
        Just(SESSION),
        Just(STREAM),
    ];
    prop_oneof![
        Just(Mutation::Intact),
        (0..200usize, 1..=255u8).prop_map(|(at, with)| Mutation::Flip { at, with }),
        (0..8usize, edge).prop_map(|(k, value)| Mutation::Field { at: k * 4, value }),
        (0..200usize).prop_map(|len| Mutation::Truncate { len }),
        proptest::collection::vec(any::<u8>(), 1..100).prop_map(|tail| Mutation::Extend { tail }),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|bytes| Mutation::Random { bytes }),
    ]
}

/// Valid datagrams of the session near the stream's position: single frames, a two-frame datagram, a PAD,
/// a heartbeat, and a fragment.
fn bases(rig: &Rig) -> Vec<Vec<u8>> {
    let offset = rig.next_offset;
    let mut out = vec![
        rig.next_frame(),
        data_frame(SESSION, STREAM, INITIAL_TERM, offset + 96, &payload(3)),
        data_frame(SESSION, STREAM, INITIAL_TERM, 0, &payload(0)),
    ];
    let mut two = data_frame(SESSION, STREAM, INITIAL_TERM, offset, &[5u8; 20]);
    two.resize(64, 0);
    two.extend(data_frame(SESSION, STREAM, INITIAL_TERM, offset + 64, &[6u8; 30]));
    out.push(two);
    let mut pad = vec![0u8; 32];
    let header = DataHeader { frame_type: TYPE_PAD, ..DataHeader::new(SESSION, STREAM, INITIAL_TERM, offset, 0) };
    frame::encode_pad(&mut pad, &header, 256).unwrap();
    out.push(pad);
    let mut heartbeat = vec![0u8; 32];
    frame::encode_heartbeat(&mut heartbeat, &DataHeader::new(SESSION, STREAM, INITIAL_TERM, offset + 512, 0)).unwrap();
    out.push(heartbeat);
    let mut fragment = vec![0u8; 32 + 100];
    frame::encode_data(&mut fragment, &DataHeader::new(SESSION, STREAM, INITIAL_TERM, offset, BEGIN_FLAG), &[9; 100])
        .unwrap();
    out.push(fragment);
    out
}

fn apply(base: &[u8], mutation: &Mutation) -> Vec<u8> {
    let mut bytes = base.to_vec();
    match mutation {
        Mutation::Intact => {}
        Mutation::Flip { at, with } => {
            let at = at % bytes.len();
            bytes[at] ^= with;
        }
        Mutation::Field { at, value } => put_i32(&mut bytes, *at, *value),
        Mutation::Truncate { len } => bytes.truncate(*len),
        Mutation::Extend { tail } => bytes.extend_from_slice(tail),
        Mutation::Random { bytes: random } => bytes = random.clone(),
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever arrives, from the peer or a stranger, the Receiver counts it and goes on; a publisher that
    /// restarts with a new session afterwards is heard.
    #[test]
    fn mutated_datagrams_never_panic_the_receiver(
        datagrams in proptest::collection::vec((0..7usize, mutation(), proptest::bool::weighted(0.1)), 1..24),
    ) {
        let mut rig = Rig::new();
        rig.send_valid();
        let bases = bases(&rig);
        for (base, mutation, stranger) in &datagrams {
            let bytes = apply(&bases[*base], mutation);
            if bytes.is_empty() {
                continue; // an empty datagram is legal UDP, but says nothing
            }
            if *stranger {
                send_to(&rig.stranger, rig.addr, &bytes);
            } else {
                send_to(&rig.publisher, rig.addr, &bytes);
            }
            rig.sent += 1;
        }
        rig.settle(); // every datagram was received and dispatched, none panicked
        prop_assert_eq!(rig.counters.recv_errors.get(), 0);
        for _ in 0..50 {
            rig.receiver.poll_once(); // feedback and timers over whatever state the datagrams left
        }

        // The publisher restarts: a new session, a SETUP, one message at the start of its stream.
        rig.send_from_publisher(&setup_frame(SESSION + 1));
        prop_assert_eq!(rig.receiver.images(0)[0].session_id(), SESSION + 1);
        let before = rig.delivered.len(); // the subscription follows the new image from here
        let message = b"after the storm".to_vec();
        rig.send_from_publisher(&data_frame(SESSION + 1, STREAM, INITIAL_TERM, 0, &message));
        let (sub, receiver, delivered) = (&mut rig.sub, &mut rig.receiver, &mut rig.delivered);
        wait_for("the new session's message", || {
            receiver.poll_once();
            sub.poll(64, |p| delivered.push(p.to_vec()));
            delivered.len() > before
        });
        prop_assert_eq!(&rig.delivered[before..], &[message][..]);
    }
}

// ---------------------------------------------------------------------------------------------------
// The Sender side
// ---------------------------------------------------------------------------------------------------

const PUB_SESSION: i32 = 77;

/// A hand-driven receiver socket and a publication sending to it.
struct SenderRig {
    sender: Sender,
    counters: SenderCounters,
    appender: quorumcast_driver::shm::log_buffer::ExclusiveAppender,
    rx: UdpEndpoint,
    /// Where the publication's control socket listens.
    control: SocketAddr,
    batch: RecvBatch,
    /// Data frames received by `rx`, as (term offset, payload).
    frames: Vec<(i32, Vec<u8>)>,
}

impl SenderRig {
    fn new(mode: SendMode) -> Self {
        let rx = endpoint();
        let config = LogConfig {
            session_id: PUB_SESSION,
            stream_id: STREAM,
            initial_term_id: INITIAL_TERM,
            ..LogConfig::new(TERM_LENGTH, MTU)
        };
        let log = LogBuffer::create_anonymous(config).unwrap();
        let appender = log.appender().unwrap();
        let counters = SenderCounters::detached();
        let channel = ChannelConfig { destinations: vec![rx.local_addr()], send_mode: mode, ..channel() };
        let publication = NetworkPublication::new(log, channel, counters.clone()).unwrap();
        let port = publication.local_addrs()[0].port();
        let mut rig = SenderRig {
            sender: Sender::new(vec![publication]),
            counters,
            appender,
            rx,
            control: SocketAddr::from(([127, 0, 0, 1], port)),
            batch: RecvBatch::new(32, 2048),
            frames: Vec::new(),
        };
        // The publication announces itself; the receiver answers with a status message and goes live.
        let mut setup = None;
        rig.run_until("a SETUP", |rig| {
            rig.drain(|f| {
                if let Frame::Setup(s) = f {
                    setup = Some(s);
                }
            });
            setup.is_some()
        });
        let setup = setup.unwrap();
        assert_eq!((setup.session_id, setup.stream_id, setup.initial_term_id), (PUB_SESSION, STREAM, INITIAL_TERM));
        rig.to_publication(&rig.status(PUB_SESSION, STREAM));
        rig.run_until("the receiver to go live", |rig| rig.counters.status_messages.get() == 1);
        rig.appender.refresh_limit_from_consumers();
        rig
    }

    /// A status message at position 0 with a window of half a term.
    fn status(&self, session_id: i32, stream_id: i32) -> Vec<u8> {
        let mut sm = StatusMessageFrame {
            session_id,
            stream_id,
            consumption_term_id: INITIAL_TERM,
            consumption_term_offset: 0,
            receiver_window: (TERM_LENGTH / 2) as i32,
            ..StatusMessageFrame::default()
        };
        sm.set_receiver_id(1);
        let mut bytes = vec![0u8; StatusMessageFrame::LENGTH];
        sm.encode(&mut bytes).unwrap();
        bytes
    }

    fn to_publication(&self, bytes: &[u8]) {
        send_to(&self.rx, self.control, bytes);
    }

    /// Reads what reached `rx`, keeping data frames and handing every frame to `seen`.
    fn drain(&mut self, mut seen: impl FnMut(Frame<'_>)) {
        while self.rx.recv_batch(&mut self.batch).unwrap() > 0 {
            for i in 0..self.batch.len() {
                for f in frame::frames(self.batch.datagram(i).bytes).flatten() {
                    if let Frame::Data { header, payload } = f {
                        self.frames.push((header.term_offset, payload.to_vec()));
                    }
                    seen(f);
                }
            }
        }
    }

    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; sender {:#?}", self.counters);
            if self.sender.poll_once() == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Appends messages `from..to` and waits until `rx` has them all, in order.
    fn stream(&mut self, from: u64, to: u64) {
        for seq in from..to {
            self.appender.append(&payload(seq)).expect("the window holds every message of the test");
        }
        let want = to as usize;
        self.run_until("the data to reach the receiver", |rig| {
            rig.drain(|_| {});
            rig.frames.len() >= want
        });
        let payloads: Vec<Vec<u8>> = self.frames.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(payloads, (0..to).map(payload).collect::<Vec<_>>(), "sent whole and in order");
    }

    /// Sends `bytes` from `rx` and checks that it was counted as invalid and as nothing else.
    fn expect_invalid(&mut self, what: &str, bytes: &[u8]) {
        let c = self.counters.clone();
        let (invalid, status, naks, retransmits) =
            (c.invalid_packets.get(), c.status_messages.get(), c.naks_received.get(), c.retransmits.get());
        self.to_publication(bytes);
        self.run_until(what, |rig| rig.counters.invalid_packets.get() > invalid);
        assert_eq!(c.invalid_packets.get(), invalid + 1, "{what}");
        assert_eq!((c.status_messages.get(), c.naks_received.get()), (status, naks), "{what}: not taken as control");
        assert_eq!(c.retransmits.get(), retransmits, "{what}: nothing resent");
        assert!(self.sender.publications()[0].failure().is_none(), "{what}");
    }
}

fn nak(session_id: i32, stream_id: i32, term_offset: i32, length: i32) -> Vec<u8> {
    let nak = NakFrame { session_id, stream_id, term_id: INITIAL_TERM, term_offset, length, ..NakFrame::default() };
    let mut bytes = vec![0u8; NakFrame::LENGTH];
    nak.encode(&mut bytes).unwrap();
    bytes
}

fn bad_control_traffic_is_counted_and_the_stream_goes_on(mode: SendMode) {
    let mut rig = SenderRig::new(mode);
    assert_eq!(rig.sender.publications()[0].send_mode(), mode, "{:?}", rig.sender.publications()[0].warnings());
    rig.stream(0, 10);
    let sent_end = rig.frames.last().map(|(o, p)| o + align_frame(32 + p.len()) as i32).unwrap();

    rig.expect_invalid("garbage", &[0x5A; 64]);
    rig.expect_invalid("four bytes", &[0, 0, 0, 0]);
    rig.expect_invalid("a status message cut at 20 bytes", &rig.status(PUB_SESSION, STREAM)[..20]);
    rig.expect_invalid("a datagram longer than the control buffer", &[0u8; 1500]);
    rig.expect_invalid("a status message of another session", &rig.status(PUB_SESSION + 1, STREAM));
    rig.expect_invalid("a status message of another stream", &rig.status(PUB_SESSION, STREAM + 1));
    rig.expect_invalid("a NAK of another session", &nak(PUB_SESSION + 1, STREAM, 0, 64));
    rig.expect_invalid("a NAK of another stream", &nak(PUB_SESSION, STREAM + 1, 0, 64));
    let mut rttm = vec![0u8; RttmFrame::LENGTH];
    RttmFrame { session_id: PUB_SESSION, stream_id: STREAM, ..RttmFrame::default() }.encode(&mut rttm).unwrap();
    rig.expect_invalid("an RTT measurement (not handled)", &rttm);
    rig.expect_invalid("a data frame", &data_frame(PUB_SESSION, STREAM, INITIAL_TERM, 0, b"echo"));
    // NAKs of this session that name nothing the sender can resend: counted as NAKs, then as invalid.
    for (what, offset, length) in [
        ("a NAK at a negative offset", -32, 64),
        ("a NAK of no bytes", 0, 0),
        ("a NAK beyond the term", TERM_LENGTH as i32, 64),
        ("a NAK of data not sent yet", sent_end, 64),
    ] {
        let c = rig.counters.clone();
        let (invalid, naks) = (c.invalid_packets.get(), c.naks_received.get());
        rig.to_publication(&nak(PUB_SESSION, STREAM, offset, length));
        rig.run_until(what, |rig| rig.counters.invalid_packets.get() > invalid);
        assert_eq!((c.invalid_packets.get(), c.naks_received.get()), (invalid + 1, naks + 1), "{what}");
        assert_eq!(c.retransmits.get(), 0, "{what}: nothing resent");
    }

    // A stranger's status message: a connected socket never sees it; a shared one counts it as invalid.
    // A valid status message from the receiver follows it on the same socket, so once that one has been
    // read the stranger's has been too, if it was delivered at all.
    let (invalid, status) = (rig.counters.invalid_packets.get(), rig.counters.status_messages.get());
    let stranger = endpoint();
    send_to(&stranger, rig.control, &rig.status(PUB_SESSION, STREAM));
    rig.to_publication(&rig.status(PUB_SESSION, STREAM));
    rig.run_until("the receiver's status message", |rig| rig.counters.status_messages.get() > status);
    let from_stranger = i64::from(mode == SendMode::Mmsg);
    assert_eq!(rig.counters.invalid_packets.get(), invalid + from_stranger, "{mode}: the stranger's status message");
    assert_eq!(rig.counters.status_messages.get(), status + 1, "only the receiver's status message counts");
    assert_eq!(rig.sender.publications()[0].flow_control().live_count(), 1);

    // The stream goes on, and a valid NAK is still answered.
    rig.stream(10, 40);
    let retransmits = rig.counters.retransmits.get();
    let first = align_frame(32 + payload(0).len()) as i32;
    rig.to_publication(&nak(PUB_SESSION, STREAM, 0, first));
    rig.run_until("the retransmit", |rig| rig.counters.retransmits.get() > retransmits);
    let copies = rig.frames.len();
    rig.run_until("the resent frame", |rig| {
        rig.drain(|_| {});
        rig.frames.len() > copies
    });
    assert_eq!(rig.frames[copies], (0, payload(0)), "the NAKed frame is resent");
    assert!(rig.sender.publications()[0].failure().is_none());
}

#[test]
fn a_classic_publication_counts_bad_control_traffic_and_keeps_streaming() {
    bad_control_traffic_is_counted_and_the_stream_goes_on(SendMode::Classic);
}

#[test]
fn an_mmsg_publication_counts_bad_control_traffic_and_keeps_streaming() {
    bad_control_traffic_is_counted_and_the_stream_goes_on(SendMode::Mmsg);
}
