//! Concurrency tests of the rings: many producers against one consumer, one against one across many wraps,
//! and a ring shared by two mappings of one file. Every wait yields the CPU (the machine has 2 cores).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use quorumcast_driver::shm::buffer::{AtomicBuffer, Region};
use quorumcast_driver::shm::ring_buffer::{
    required_length, Claim, ManyToOneRingBuffer, OneToOneRingBuffer, ProducerMode, RingBuffer,
};
use quorumcast_testkit::ScratchDir;

const PRODUCERS: u32 = 4;
const RECORDS_PER_PRODUCER: u32 = 250_000;

/// Length of record `seq`'s message: 8 to 64 bytes, so that records of many sizes meet the wrap.
fn message_length(seq: u32) -> usize {
    8 + (seq as usize * 7) % 57
}

/// Message `seq` of producer `id`: id, seq, then bytes derived from both.
fn encode(id: u32, seq: u32, out: &mut [u8]) {
    out[0..4].copy_from_slice(&id.to_le_bytes());
    out[4..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in out[8..].iter_mut().enumerate() {
        *b = (seq as usize + i) as u8 ^ id as u8;
    }
}

/// Checks a message against what `encode` made of its own id and seq, and returns them.
fn decode(msg_type_id: i32, msg: &[u8]) -> (u32, u32) {
    let id = u32::from_le_bytes(msg[0..4].try_into().unwrap());
    let seq = u32::from_le_bytes(msg[4..8].try_into().unwrap());
    assert_eq!(msg_type_id, id as i32 + 1, "type of producer {id}'s record {seq}");
    assert_eq!(msg.len(), message_length(seq), "length of producer {id}'s record {seq}");
    let mut expected = vec![0; msg.len()];
    encode(id, seq, &mut expected);
    assert_eq!(msg, &expected[..], "bytes of producer {id}'s record {seq}");
    (id, seq)
}

/// What the threads of one test share so that a failure on either side ends the test instead of hanging it.
#[derive(Default)]
struct Run {
    /// Set by a thread that panics: the others stop waiting.
    failed: AtomicBool,
    /// Producers that have offered all their records.
    producers_done: AtomicU32,
}

impl Run {
    fn check(&self) {
        assert!(!self.failed.load(Ordering::Acquire), "another thread of the test failed");
    }
}

/// Marks the run failed if the thread holding it panics.
struct FailOnPanic<'a>(&'a Run);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.failed.store(true, Ordering::Release);
        }
    }
}

/// Offers producer `id`'s records, yielding while the ring is full. Every third record goes through a
/// claim, every seventh claim of which is first aborted (and its record offered again).
fn produce<P: ProducerMode>(ring: &RingBuffer<P>, run: &Run, id: u32, records: u32) {
    let _guard = FailOnPanic(run);
    let mut message = [0u8; 64];
    for seq in 0..records {
        let message = &mut message[..message_length(seq)];
        encode(id, seq, message);
        let msg_type_id = id as i32 + 1;
        if seq % 3 == 0 {
            if seq % 21 == 0 {
                claim_with_retry(ring, run, msg_type_id, message.len()).abort();
            }
            let mut claim = claim_with_retry(ring, run, msg_type_id, message.len());
            claim.put_bytes(0, message).unwrap();
            claim.commit();
        } else {
            while ring.write(msg_type_id, message).is_err() {
                run.check();
                thread::yield_now();
            }
        }
    }
    run.producers_done.fetch_add(1, Ordering::AcqRel);
}

fn claim_with_retry<'a, P: ProducerMode>(
    ring: &'a RingBuffer<P>,
    run: &Run,
    msg_type_id: i32,
    length: usize,
) -> Claim<'a> {
    loop {
        match ring.try_claim(msg_type_id, length) {
            Ok(claim) => return claim,
            Err(_) => {
                run.check();
                thread::yield_now();
            }
        }
    }
}

/// Reads until every producer's `records` have arrived, checking each producer's records come once and in
/// order; yields when the ring is empty. Fails, rather than waits, when the ring stays empty after every
/// producer has finished.
fn consume<P: ProducerMode>(ring: &RingBuffer<P>, run: &Run, producers: u32, records: u32) {
    let _guard = FailOnPanic(run);
    let mut next = vec![0u32; producers as usize];
    let mut handle = |msg_type_id: i32, msg: &[u8]| {
        let (id, seq) = decode(msg_type_id, msg);
        assert_eq!(seq, next[id as usize], "producer {id}'s records out of order or repeated");
        next[id as usize] += 1;
    };
    let expected_total = producers as u64 * records as u64;
    let mut total = 0u64;
    let mut producers_finished = false;
    while total < expected_total {
        let read = ring.read(&mut handle, 256);
        total += read as u64;
        if read == 0 {
            // Once every producer has finished, every record is committed: an empty read means a loss.
            assert!(!producers_finished, "ring stalled after {total} of {expected_total} records");
            run.check();
            producers_finished = run.producers_done.load(Ordering::Acquire) == producers;
            thread::yield_now();
        }
    }
    assert!(next.iter().all(|&n| n == records), "every record seen exactly once: {next:?}");
    assert_eq!(ring.read(|_, _| panic!("no record beyond those produced"), usize::MAX), 0);
    assert_eq!(ring.consumer_position(), ring.producer_position());
    assert_eq!(ring.size(), 0);
}

fn anonymous_ring<P: ProducerMode>(capacity: usize) -> RingBuffer<P> {
    RingBuffer::new(AtomicBuffer::anonymous(required_length(capacity)).unwrap()).unwrap()
}

#[test]
fn four_producers_one_consumer_a_million_records() {
    let ring = anonymous_ring::<quorumcast_driver::shm::ring_buffer::ManyProducers>(64 * 1024);
    let run = Run::default();
    thread::scope(|s| {
        for id in 0..PRODUCERS {
            let ring = &ring;
            let run = &run;
            s.spawn(move || produce(ring, run, id, RECORDS_PER_PRODUCER));
        }
        consume(&ring, &run, PRODUCERS, RECORDS_PER_PRODUCER);
    });
}

#[test]
fn one_producer_one_consumer_across_many_wraps() {
    let ring: OneToOneRingBuffer = anonymous_ring(4096);
    let run = Run::default();
    thread::scope(|s| {
        s.spawn(|| produce(&ring, &run, 0, 1_000_000));
        consume(&ring, &run, 1, 1_000_000);
    });
    assert!(ring.consumer_position() > 100 * 4096, "the test must wrap the ring many times");
}

/// Two producers racing for the tail with nobody consuming (the ring holds everything), so that both cores
/// run producers at once: a claim that is not atomic shows up as lost or mangled records. Ten rounds, each
/// drained before the next.
#[test]
fn two_producers_racing_claim_disjoint_space() {
    const RECORDS: u32 = 50_000; // at most 72 bytes each, plus aborted claims: under 8 MiB for two
    let ring = anonymous_ring::<quorumcast_driver::shm::ring_buffer::ManyProducers>(8 * 1024 * 1024);
    let run = Run::default();
    let start = Barrier::new(2);
    for _round in 0..10 {
        thread::scope(|s| {
            for id in 0..2 {
                let (ring, run, start) = (&ring, &run, &start);
                s.spawn(move || {
                    start.wait();
                    produce(ring, run, id, RECORDS);
                });
            }
        });
        run.producers_done.store(0, Ordering::Release);
        consume(&ring, &run, 2, RECORDS);
    }
}

/// A directory for this test's files, removed when dropped.

#[test]
fn a_ring_in_a_file_carries_records_between_two_mappings() {
    let dir = ScratchDir::new("ring-file");
    let path = dir.join("ingress.ring");
    let capacity = 4096;
    let producer_map = AtomicBuffer::new(Region::create_file(&path, required_length(capacity), true).unwrap());
    let consumer_map = AtomicBuffer::new(Region::open_file(&path).unwrap());
    assert_ne!(producer_map.as_ptr(), consumer_map.as_ptr(), "two distinct mappings of the file");
    let producer = ManyToOneRingBuffer::new(producer_map).unwrap();
    let consumer = ManyToOneRingBuffer::new(consumer_map).unwrap();
    let run = Run::default();
    thread::scope(|s| {
        s.spawn(|| produce(&producer, &run, 0, 50_000));
        consume(&consumer, &run, 1, 50_000);
    });
    assert!(producer.consumer_position() > 10 * capacity as i64, "positions seen through both mappings");
    assert_eq!(producer.consumer_position(), consumer.producer_position());
}

/// SPSC throughput of 32-byte records (8-byte header + 24-byte message) between two threads. Not a test:
/// run with `cargo test --release --test ring_buffer_stress -- --ignored --nocapture`. Both threads spin.
#[test]
#[ignore]
fn spsc_throughput_of_32_byte_records() {
    const MESSAGES: u64 = 5_000_000;
    for capacity in [64 * 1024, 1024 * 1024] {
        for read_limit in [64, usize::MAX] {
            let ring: OneToOneRingBuffer = anonymous_ring(capacity);
            let start = Instant::now();
            let (full, empty) = thread::scope(|s| {
                let producer = s.spawn(|| {
                    let mut message = [0u8; 24];
                    let mut full = 0u64;
                    for i in 0..MESSAGES {
                        message[..8].copy_from_slice(&i.to_le_bytes());
                        while ring.write(1, &message).is_err() {
                            full += 1;
                            std::hint::spin_loop();
                        }
                    }
                    full
                });
                let (mut expected, mut empty) = (0u64, 0u64);
                while expected < MESSAGES {
                    let check = |_, m: &[u8]| {
                        assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), expected);
                        expected += 1;
                    };
                    if ring.read(check, read_limit) == 0 {
                        empty += 1;
                    }
                }
                (producer.join().unwrap(), empty)
            });
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "capacity {capacity:>7} B, read limit {:>4}: {:5.1} M msgs/s, {:4.0} MB/s; per message: {:.2} full retries, {:.2} empty reads",
                if read_limit == usize::MAX { "all".to_string() } else { read_limit.to_string() },
                MESSAGES as f64 / seconds / 1e6,
                MESSAGES as f64 * 32.0 / seconds / 1e6,
                full as f64 / MESSAGES as f64,
                empty as f64 / MESSAGES as f64,
            );
        }
    }
}
