//! In-process IPC: messages of mixed sizes (fragmented ones included) arrive whole and in order across
//! term rotations; back pressure starts exactly when the slowest subscriber is `term_length / 2` behind
//! and ends when it polls; a closed subscriber no longer holds the publisher back; a file log is read to
//! its end of stream after the publication is gone.

use std::thread;

use crossbeam_utils::Backoff;
use quorumcast_driver::frame::framed_length;
use quorumcast_driver::media::ipc::{IpcOfferError, IpcPublication, IpcSubscription};
use quorumcast_driver::shm::log_buffer::LogConfig;
use quorumcast_testkit::ScratchDir;

const TERM: usize = 65536;
const WINDOW: i64 = (TERM / 2) as i64;
const MTU: usize = 1408;

/// Sizes cycled through: empty, sub-frame, one frame exactly, just fragmented, several fragments, the largest.
const SIZES: [usize; 10] = [0, 1, 31, 32, 100, 1376, 1377, 3000, 5000, TERM / 8];

fn message(seq: u64, length: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..length).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8).collect();
    if length >= 8 {
        m[..8].copy_from_slice(&seq.to_le_bytes());
    }
    m
}

/// Log bytes a message of `length` takes with a 1408-byte MTU (fragments of 1376 bytes of payload).
fn log_length(length: usize) -> usize {
    let payload = MTU - 32;
    if length <= payload {
        return framed_length(length);
    }
    (length / payload) * MTU + if length % payload > 0 { framed_length(length % payload) } else { 0 }
}

/// Bytes an append of `required` log bytes moves the tail from `position`, padding the term if it must.
fn with_padding(position: i64, required: usize) -> i64 {
    let remaining = TERM - (position as usize % TERM);
    (if required <= remaining { required } else { remaining + required }) as i64
}

fn drain(sub: &mut IpcSubscription, out: &mut Vec<Vec<u8>>) {
    while sub.poll(|m| out.push(m.to_vec()), 7) > 0 {}
}

#[test]
fn mixed_sizes_arrive_whole_and_in_order_across_threads() {
    const COUNT: u64 = 60_000;
    let mut publication = IpcPublication::create_anonymous(LogConfig::new(TERM, MTU)).unwrap();
    let mut sub = publication.subscribe().unwrap();
    let publisher = thread::spawn(move || {
        let backoff = Backoff::new();
        for seq in 0..COUNT {
            let m = message(seq, SIZES[seq as usize % SIZES.len()]);
            loop {
                match publication.offer(&m) {
                    Ok(_) => break,
                    Err(IpcOfferError::BackPressured) => backoff.snooze(),
                    Err(e) => panic!("offer {seq}: {e}"),
                }
            }
            backoff.reset();
        }
        publication.close();
        publication.position()
    });
    let mut seq = 0u64;
    let backoff = Backoff::new();
    while !sub.is_end_of_stream() {
        let read = sub.poll(
            |m| {
                assert_eq!(m, message(seq, SIZES[seq as usize % SIZES.len()]), "message {seq}");
                seq += 1;
            },
            64,
        );
        if read == 0 {
            backoff.snooze();
        } else {
            backoff.reset();
        }
    }
    let end = publisher.join().unwrap();
    assert_eq!(seq, COUNT);
    assert_eq!(sub.position(), end);
    assert!(end > 20 * TERM as i64, "the stream went through many term rotations");
}

#[test]
fn back_pressure_starts_exactly_half_a_term_behind_and_ends_when_the_subscriber_polls() {
    let mut publication = IpcPublication::create_anonymous(LogConfig::new(TERM, MTU)).unwrap();
    let mut sub = publication.subscribe().unwrap();
    // 32-byte messages take 64 bytes: exactly 512 fit in the window of the subscriber at 0.
    for _ in 0..512 {
        publication.offer(&[1; 32]).unwrap();
    }
    assert_eq!(publication.position(), WINDOW);
    assert_eq!(publication.offer(&[1; 32]), Err(IpcOfferError::BackPressured));
    assert!(matches!(publication.try_claim(0), Err(IpcOfferError::BackPressured)));
    assert_eq!(publication.position(), WINDOW, "nothing written when back pressured");
    assert_eq!(sub.poll(|_| {}, 1), 1);
    assert_eq!(publication.offer(&[2; 32]), Ok(WINDOW + 64), "one message consumed, one more fits");
    assert_eq!(publication.offer(&[2; 32]), Err(IpcOfferError::BackPressured));

    // Now mixed sizes over several terms: every refusal is exact, and every message arrives.
    let mut received = Vec::new();
    drain(&mut sub, &mut received);
    assert_eq!(received.len(), 512, "513 offered, one polled already");
    received.clear();
    let mut sent = Vec::new();
    let mut seq = 0u64;
    let mut refusals = 0;
    while publication.position() < 6 * TERM as i64 {
        let m = message(seq, SIZES[seq as usize % SIZES.len()]);
        let before = publication.position();
        let needed = with_padding(before, log_length(m.len()));
        match publication.offer(&m) {
            Ok(after) => {
                assert!(after <= sub.position() + WINDOW, "wrote past the window: {after}");
                assert_eq!(after, before + needed);
                sent.push(m);
                seq += 1;
            }
            Err(IpcOfferError::BackPressured) => {
                assert!(before + needed > sub.position() + WINDOW, "refused a message that fits: {before} + {needed}");
                refusals += 1;
                // Consume a little (two fragments) so the window opens by less than a whole message at times.
                sub.poll(|m| received.push(m.to_vec()), 2);
            }
            Err(e) => panic!("{e}"),
        }
    }
    drain(&mut sub, &mut received);
    assert!(refusals > 10, "the test exercised back pressure ({refusals} refusals)");
    assert_eq!(received, sent);
}

#[test]
fn the_slowest_of_two_subscribers_governs_and_a_closed_one_no_longer_counts() {
    let mut publication = IpcPublication::create_anonymous(LogConfig::new(TERM, MTU)).unwrap();
    let mut fast = publication.subscribe().unwrap();
    let mut slow = publication.subscribe().unwrap();
    let mut fast_seen = Vec::new();
    let mut sent = 0u64;
    // Offers until back pressured with the fast subscriber drained, or until `stop_at`; returns the position.
    let mut offer_until_stuck = |publication: &mut IpcPublication, fast: &mut IpcSubscription, stop_at: i64| loop {
        if publication.position() >= stop_at {
            return publication.position();
        }
        match publication.offer(&sent.to_le_bytes()) {
            Ok(_) => sent += 1,
            Err(IpcOfferError::BackPressured) => {
                // The fast one is always drained: only the slow one can be holding the publisher back.
                let before = fast.position();
                drain(fast, &mut fast_seen);
                if fast.position() == before {
                    return publication.position();
                }
            }
            Err(e) => panic!("{e}"),
        }
    };
    let far = 8 * TERM as i64;
    let stuck_at = offer_until_stuck(&mut publication, &mut fast, far);
    assert_eq!(stuck_at, slow.position() + WINDOW, "64-byte frames fill the slow window exactly");
    let mut slow_seen = Vec::new();
    assert_eq!(slow.poll(|m| slow_seen.push(m.to_vec()), 100), 100);
    let stuck_again = offer_until_stuck(&mut publication, &mut fast, far);
    assert_eq!(stuck_again, slow.position() + WINDOW);
    assert_eq!(stuck_again, stuck_at + 100 * 64);

    slow.close();
    assert_eq!(offer_until_stuck(&mut publication, &mut fast, far), far, "never stuck once the slow one left");
    drain(&mut fast, &mut fast_seen);
    let expected: Vec<Vec<u8>> = (0..sent).map(|s| s.to_le_bytes().to_vec()).collect();
    assert_eq!(fast_seen, expected);
    assert_eq!(slow_seen, expected[..100]);
}

#[test]
fn a_file_log_is_read_to_its_end_after_the_publication_is_dropped() {
    let dir = ScratchDir::new("ipc-file");
    let path = dir.join("ipc-7.log");
    std::fs::write(&path, b"an old file, replaced not truncated").unwrap();
    let mut publication = IpcPublication::create(&path, LogConfig::new(TERM, MTU)).unwrap();
    let mut sub = IpcSubscription::open(&path).unwrap();
    // Ten 3000-byte messages (3104 log bytes each) fit in the window without polling.
    for seq in 0..10 {
        publication.offer(&message(seq, 3000)).unwrap();
    }
    drop(publication);
    assert!(!path.exists(), "the publication removes its file");
    assert!(!sub.is_end_of_stream());
    let mut received = Vec::new();
    drain(&mut sub, &mut received);
    assert!(sub.is_end_of_stream());
    assert_eq!(received, (0..10).map(|s| message(s, 3000)).collect::<Vec<_>>());
}
