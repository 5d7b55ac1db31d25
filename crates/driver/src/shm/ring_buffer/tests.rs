//! Unit tests of both rings; each check runs against both producer modes.

use super::descriptor::{required_length, MIN_CAPACITY, TRAILER_LENGTH};
use super::*;

fn ring<P: ProducerMode>(capacity: usize) -> RingBuffer<P> {
    RingBuffer::new(AtomicBuffer::anonymous(required_length(capacity)).unwrap()).unwrap()
}

fn drain<P: ProducerMode>(ring: &RingBuffer<P>, limit: usize) -> Vec<(i32, Vec<u8>)> {
    let mut out = Vec::new();
    ring.read(|t, m| out.push((t, m.to_vec())), limit);
    out
}

fn data_is_zero<P: ProducerMode>(ring: &RingBuffer<P>) -> bool {
    ring.buffer().bytes(0, ring.capacity()).iter().all(|&b| b == 0)
}

/// Runs `check` for both producer modes.
macro_rules! both_modes {
    ($($name:ident => $check:ident;)*) => {
        $(mod $name {
            #[test]
            fn many_to_one() {
                super::$check::<super::ManyProducers>();
            }
            #[test]
            fn one_to_one() {
                super::$check::<super::OneProducer>();
            }
        })*
    };
}

both_modes! {
    read_while => a_refused_message_stays_for_the_next_read;
    write_then_read => write_then_read_delivers_type_and_bytes_in_order;
    message_limit => read_stops_at_the_message_limit;
    wrap => a_record_that_would_cross_the_end_wraps_after_padding;
    full => a_full_ring_refuses_until_the_consumer_frees_space;
    too_long => messages_longer_than_an_eighth_are_refused;
    invalid_type => message_types_must_be_positive;
    claim => claims_are_invisible_until_committed;
    abort => aborted_and_dropped_claims_become_padding;
    overrun => writes_past_a_claim_are_refused;
    positions => positions_and_size_follow_writes_and_reads;
    panics => a_panicking_handler_still_consumes_what_it_was_given;
    counters => correlation_ids_and_heartbeat;
}

fn write_then_read_delivers_type_and_bytes_in_order<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    ring.write(1, b"hello").unwrap();
    ring.write(2, b"").unwrap();
    ring.write(3, &[9; 128]).unwrap();
    let got = drain(&ring, usize::MAX);
    assert_eq!(got, vec![(1, b"hello".to_vec()), (2, vec![]), (3, vec![9; 128])]);
    assert!(drain(&ring, usize::MAX).is_empty());
    assert!(data_is_zero(&ring), "consumed space must be zeroed for the next lap");
}

fn read_stops_at_the_message_limit<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    for i in 1..=5 {
        ring.write(i, &[i as u8]).unwrap();
    }
    assert_eq!(ring.read(|_, _| {}, 2), 2);
    assert_eq!(drain(&ring, 2).iter().map(|r| r.0).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(drain(&ring, 10).iter().map(|r| r.0).collect::<Vec<_>>(), vec![5]);
}

fn a_record_that_would_cross_the_end_wraps_after_padding<P: ProducerMode>() {
    let ring = ring::<P>(128);
    for i in 0..5 {
        ring.write(1, &[i; 16]).unwrap(); // 24-byte records: 120 bytes
    }
    assert_eq!(drain(&ring, usize::MAX).len(), 5);
    assert_eq!(ring.consumer_position(), 120);
    ring.write(2, &[42; 16]).unwrap(); // 8 bytes left at the end: padding, then the record at index 0
    assert_eq!(ring.producer_position(), 120 + 8 + 24);
    assert_eq!(ring.buffer().get_i32(120 + LENGTH_OFFSET), 8);
    assert_eq!(ring.buffer().get_i32(120 + TYPE_OFFSET), PADDING_MSG_TYPE_ID);
    assert_eq!(ring.buffer().get_i32(TYPE_OFFSET), 2);
    assert_eq!(drain(&ring, usize::MAX), vec![(2, vec![42; 16])], "one read crosses the wrap");
    assert_eq!(ring.consumer_position(), 152);
    assert!(data_is_zero(&ring));
}

fn a_full_ring_refuses_until_the_consumer_frees_space<P: ProducerMode>() {
    let ring = ring::<P>(128);
    let mut written = 0;
    while ring.write(1, &[1; 16]).is_ok() {
        written += 1;
    }
    assert_eq!(written, 5, "5 records of 24 bytes fit in 128, a 6th does not");
    assert_eq!(ring.write(1, &[1; 16]), Err(RingError::Full));
    assert_eq!(ring.write(1, &[]), Ok(()), "an 8-byte record still fits");
    assert_eq!(ring.write(1, &[]), Err(RingError::Full));
    assert_eq!(ring.read(|_, _| {}, 1), 1);
    ring.write(1, &[1; 16]).unwrap(); // fits again only once the consumer has freed 24 bytes
    assert_eq!(drain(&ring, usize::MAX).len(), 6);
}

fn messages_longer_than_an_eighth_are_refused<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    assert_eq!(ring.max_msg_length(), 128);
    assert_eq!(ring.write(1, &[0; 129]), Err(RingError::TooLong { length: 129, max: 128 }));
    assert_eq!(ring.try_claim(1, 129).unwrap_err(), RingError::TooLong { length: 129, max: 128 });
    assert_eq!(ring.producer_position(), 0, "a refused message claims nothing");
    ring.write(1, &[0; 128]).unwrap();
}

fn message_types_must_be_positive<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    assert_eq!(ring.write(0, b"x"), Err(RingError::InvalidType { msg_type_id: 0 }));
    assert_eq!(ring.write(PADDING_MSG_TYPE_ID, b"x"), Err(RingError::InvalidType { msg_type_id: -1 }));
    assert_eq!(ring.producer_position(), 0);
}

fn claims_are_invisible_until_committed<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    let mut claim = ring.try_claim(7, 10).unwrap();
    assert_eq!(claim.length(), 10);
    claim.put_bytes(0, b"01234").unwrap();
    claim.put_bytes(5, b"56789").unwrap();
    ring.write(8, b"later").unwrap();
    assert!(drain(&ring, usize::MAX).is_empty(), "the consumer must wait for the claimed record");
    claim.commit();
    assert_eq!(drain(&ring, usize::MAX), vec![(7, b"0123456789".to_vec()), (8, b"later".to_vec())]);
}

fn aborted_and_dropped_claims_become_padding<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    ring.try_claim(7, 10).unwrap().abort();
    drop(ring.try_claim(7, 10).unwrap());
    ring.write(8, b"kept").unwrap();
    assert_eq!(drain(&ring, usize::MAX), vec![(8, b"kept".to_vec())]);
    assert_eq!(ring.consumer_position(), ring.producer_position());
    assert!(data_is_zero(&ring));
}

fn writes_past_a_claim_are_refused<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    let mut claim = ring.try_claim(1, 4).unwrap();
    assert_eq!(claim.put_bytes(2, b"abc"), Err(RingError::ClaimOverrun { offset: 2, length: 3, claimed: 4 }));
    assert!(claim.put_bytes(5, b"").is_err());
    claim.put_bytes(0, b"abcd").unwrap();
    claim.commit();
    assert_eq!(drain(&ring, usize::MAX), vec![(1, b"abcd".to_vec())]);
}

fn positions_and_size_follow_writes_and_reads<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    assert_eq!((ring.producer_position(), ring.consumer_position(), ring.size()), (0, 0, 0));
    ring.write(1, &[0; 3]).unwrap(); // 16 bytes
    ring.write(1, &[0; 8]).unwrap(); // 16 bytes
    ring.write(1, &[0; 9]).unwrap(); // 24 bytes
    assert_eq!((ring.producer_position(), ring.consumer_position(), ring.size()), (56, 0, 56));
    ring.read(|_, _| {}, 1);
    assert_eq!((ring.producer_position(), ring.consumer_position(), ring.size()), (56, 16, 40));
    ring.read(|_, _| {}, 10);
    assert_eq!((ring.producer_position(), ring.consumer_position(), ring.size()), (56, 56, 0));
}

fn a_panicking_handler_still_consumes_what_it_was_given<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    for i in 1..=3 {
        ring.write(i, b"m").unwrap();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ring.read(|t, _| assert_ne!(t, 2, "handler fails on the second message"), usize::MAX)
    }));
    assert!(result.is_err());
    assert_eq!(ring.consumer_position(), 32, "messages 1 and 2 are consumed");
    assert_eq!(drain(&ring, usize::MAX), vec![(3, b"m".to_vec())]);
}

fn correlation_ids_and_heartbeat<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    assert_eq!(ring.next_correlation_id(), 0);
    assert_eq!(ring.next_correlation_id(), 1);
    assert_eq!(ring.consumer_heartbeat_time(), 0);
    ring.set_consumer_heartbeat_time(123);
    assert_eq!(ring.consumer_heartbeat_time(), 123);
}

#[test]
fn new_validates_the_layout() {
    let buffer = |length| AtomicBuffer::anonymous(length).unwrap();
    assert!(ManyToOneRingBuffer::new(buffer(required_length(1024))).is_ok());
    for length in [8, TRAILER_LENGTH, required_length(1000), required_length(MIN_CAPACITY / 2), 1024] {
        assert_eq!(
            OneToOneRingBuffer::new(buffer(length)).unwrap_err(),
            RingError::InvalidCapacity { buffer_length: length }
        );
    }
    let misaligned = buffer(required_length(1024) + 4).view(4, required_length(1024));
    assert!(matches!(ManyToOneRingBuffer::new(misaligned), Err(RingError::Misaligned { .. })));
}

#[test]
fn two_rings_over_one_buffer_share_it() {
    let buffer = AtomicBuffer::anonymous(required_length(1024)).unwrap();
    let producer = OneToOneRingBuffer::new(buffer.clone()).unwrap();
    producer.write(4, b"shared").unwrap();
    let consumer = OneToOneRingBuffer::new(buffer).unwrap();
    assert_eq!(drain(&consumer, usize::MAX), vec![(4, b"shared".to_vec())]);
    assert_eq!(producer.consumer_position(), 16);
}

#[test]
fn errors_say_what_to_change() {
    let message = RingError::TooLong { length: 300, max: 128 }.to_string();
    assert!(message.contains("300") && message.contains("4096"), "{message}");
    assert!(RingError::InvalidCapacity { buffer_length: 10 }.to_string().contains("required_length"));
}

fn a_refused_message_stays_for_the_next_read<P: ProducerMode>() {
    let ring = ring::<P>(1024);
    for i in 1..=5u8 {
        ring.write(1, &[i; 10]).unwrap();
    }
    let before = ring.consumer_position();
    let mut taken = Vec::new();
    let read = ring.read_while(
        |_, m| {
            if m[0] == 3 {
                return false;
            }
            taken.push(m[0]);
            true
        },
        10,
    );
    assert_eq!((read, taken), (2, vec![1, 2]));
    assert_eq!(ring.consumer_position(), before + 2 * 24, "only the two taken records are consumed");
    assert_eq!(drain(&ring, 10).iter().map(|(_, m)| m[0]).collect::<Vec<_>>(), vec![3, 4, 5]);
}
