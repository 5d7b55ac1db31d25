//! The subscriber side: polling fragments and reassembling messages.

use bytemuck::{Pod, Zeroable};

use super::descriptor::{partition_index, position_bits_to_shift, term_offset, PARTITION_COUNT};
use super::LogBuffer;
use crate::frame::{
    align_frame, DataHeader, BEGIN_FLAG, DATA_HEADER_LENGTH, END_FLAG, FRAME_LENGTH_OFFSET, MARKER_FLAG, TYPE_PAD,
    UNFRAGMENTED,
};
use crate::shm::buffer::AtomicBuffer;

/// How far ahead of the frame being read [`LogReader::poll_to`] prefetches (bytes).
const PREFETCH_DISTANCE: usize = 2048;

/// Reads committed frames of a log (a publication's or a rebuilt image) from a position.
#[derive(Debug, Clone)]
pub struct LogReader {
    terms: [AtomicBuffer; PARTITION_COUNT],
    term_length: usize,
    bits: u32,
}

impl LogReader {
    /// A reader of `log`.
    pub fn new(log: &LogBuffer) -> Self {
        let term_length = log.term_length();
        Self { terms: log.terms().clone(), term_length, bits: position_bits_to_shift(term_length) }
    }

    /// Hands up to `fragment_limit` committed data fragments from `position` to `handler` (payload and
    /// header), skipping PAD frames, and returns the position after the last frame read.
    ///
    /// Stops at the first uncommitted frame and at the end of the term (the next poll continues in the
    /// next term). The payload slices are valid only during the call: the caller must stay within
    /// `term_length / 2` of the appender (publish its position to the log's consumer slot) so that they
    /// are never overwritten.
    #[inline]
    pub fn poll(&self, position: i64, fragment_limit: usize, handler: impl FnMut(&[u8], &DataHeader)) -> i64 {
        self.read(position, i64::MAX, false, fragment_limit, handler)
    }

    /// As [`poll`](Self::poll), reading no frame that starts at or after `end`, a position up to which
    /// every frame is known to be committed (the producer position read earlier), and prefetching ahead.
    ///
    /// Each frame's offset depends on the length loaded from the frame before: when another core wrote
    /// the frames, that is a chain of cache misses, which the prefetches overlap. Prefetching stops at
    /// `end`, so no line the appender may still be writing is pulled away from it. ([`poll`](Self::poll)
    /// does not prefetch: it cannot know where the committed frames end.)
    #[inline]
    pub fn poll_to(
        &self,
        position: i64,
        end: i64,
        fragment_limit: usize,
        handler: impl FnMut(&[u8], &DataHeader),
    ) -> i64 {
        self.read(position, end, true, fragment_limit, handler)
    }

    /// As [`poll`](Self::poll), reading no frame that ends beyond `limit_position` (a commit position:
    /// the state machine applies only what is committed).
    #[inline]
    pub fn poll_bounded(
        &self,
        position: i64,
        limit_position: i64,
        fragment_limit: usize,
        handler: impl FnMut(&[u8], &DataHeader),
    ) -> i64 {
        self.read(position, limit_position, false, fragment_limit, handler)
    }

    #[inline(always)]
    fn read(
        &self,
        position: i64,
        end: i64,
        prefetch: bool,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8], &DataHeader),
    ) -> i64 {
        let term = &self.terms[partition_index(position, self.bits)];
        let start = term_offset(position, self.term_length);
        let stop = if end - position < (self.term_length - start) as i64 {
            start + (end - position).max(0) as usize
        } else {
            self.term_length
        };
        let mut offset = start;
        let mut fragments = 0;
        while fragments < fragment_limit && offset < stop {
            if prefetch && offset + PREFETCH_DISTANCE < stop {
                term.prefetch(offset + PREFETCH_DISTANCE);
            }
            let frame_length = term.get_i32_acquire(offset + FRAME_LENGTH_OFFSET);
            if frame_length < DATA_HEADER_LENGTH as i32 {
                break; // uncommitted (0 or negative), or not a frame
            }
            let aligned = align_frame(frame_length as usize);
            if aligned > stop - offset {
                break; // runs past the term, or past `end`
            }
            // One bounds check for the frame; its header and payload are slices of it.
            let frame = term.bytes(offset, frame_length as usize);
            let (header, payload) = frame.split_at(DATA_HEADER_LENGTH);
            let header: DataHeader = bytemuck::pod_read_unaligned(header);
            if header.frame_type != TYPE_PAD {
                handler(payload, &header);
                fragments += 1;
            }
            offset += aligned;
        }
        position + (offset - start) as i64
    }
}

/// A 64-byte-aligned block of the reassembly buffer.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Block([u8; 64]);

const _: () = assert!(std::mem::size_of::<Block>() == 64);

/// Reassembles fragmented messages (B ... E) and hands whole messages to a handler.
///
/// Unfragmented frames pass straight through without a copy. Fragments are copied into one buffer that
/// grows to the largest message seen and is then reused, so the steady state does not allocate. The
/// buffer is 64-byte aligned and fragment payloads are 32-byte aligned in the term, so every copy has
/// `(dst - src) mod 32 == 0`, clear of the CPU's slow `rep movsb` distances. A fragment without a begun
/// message (a reader that joined mid-message) is dropped. A reassembled message is handed over with the
/// header of its last fragment.
///
/// The handler is either owned ([`FragmentAssembler::on_fragment`]) or lent per call
/// ([`FragmentAssembler::on_fragment_with`], for callers such as [`MessageReader`] whose handler changes
/// from one poll to the next); the reassembly state is the same.
pub struct FragmentAssembler<F> {
    handler: F,
    state: Reassembly,
}

/// The reassembly buffer and where a fragmented message stands.
#[derive(Default)]
struct Reassembly {
    blocks: Vec<Block>,
    length: usize,
    in_progress: bool,
}

impl<F> std::fmt::Debug for FragmentAssembler<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentAssembler")
            .field("length", &self.state.length)
            .field("in_progress", &self.state.in_progress)
            .finish()
    }
}

impl<F> FragmentAssembler<F> {
    /// An assembler handing whole messages to `handler` (which may be `()` when every fragment is
    /// given with [`on_fragment_with`](Self::on_fragment_with)).
    pub fn new(handler: F) -> Self {
        Self { handler, state: Reassembly::default() }
    }

    /// Takes one fragment, handing a completed message to `handler` instead of the owned one.
    #[inline]
    pub fn on_fragment_with(
        &mut self,
        payload: &[u8],
        header: &DataHeader,
        handler: &mut impl FnMut(&[u8], &DataHeader),
    ) {
        self.state.on_fragment(payload, header, handler);
    }

    /// True while a message's first fragments are held, waiting for the rest.
    pub fn is_assembling(&self) -> bool {
        self.state.in_progress
    }

    /// The message handler.
    pub fn handler_mut(&mut self) -> &mut F {
        &mut self.handler
    }

    /// Gives the handler back.
    pub fn into_handler(self) -> F {
        self.handler
    }
}

impl<F: FnMut(&[u8], &DataHeader)> FragmentAssembler<F> {
    /// Takes one fragment, as a [`LogReader::poll`] handler.
    #[inline]
    pub fn on_fragment(&mut self, payload: &[u8], header: &DataHeader) {
        self.state.on_fragment(payload, header, &mut self.handler);
    }
}

impl Reassembly {
    #[inline]
    fn on_fragment(&mut self, payload: &[u8], header: &DataHeader, handler: &mut impl FnMut(&[u8], &DataHeader)) {
        let flags = header.flags & UNFRAGMENTED;
        if flags == UNFRAGMENTED {
            handler(payload, header);
            return;
        }
        if flags & BEGIN_FLAG != 0 {
            self.length = 0;
            self.in_progress = true;
        } else if !self.in_progress {
            return;
        }
        self.push(payload);
        if flags & END_FLAG != 0 {
            self.in_progress = false;
            let bytes: &[u8] = bytemuck::cast_slice(&self.blocks);
            handler(&bytes[..self.length], header);
        }
    }

    fn push(&mut self, payload: &[u8]) {
        let end = self.length + payload.len();
        let blocks = end.div_ceil(64);
        if blocks > self.blocks.len() {
            self.blocks.resize(blocks.next_power_of_two(), Block::zeroed());
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
        bytes[self.length..end].copy_from_slice(payload);
        self.length = end;
    }
}

/// Reads whole messages from one log through a consumer slot: fragments reassembled, the position
/// published to the slot once per poll. The one reader of whole messages: of committed entries, for the
/// leader's own log and a follower's image, with reads bounded by a limit position (a follower and a
/// leader apply only what is committed: [`poll_bounded`](Self::poll_bounded)), and of an IPC stream,
/// where every committed frame is read, up to a producer position learnt earlier with prefetching and
/// past it by spinning on the next frame ([`poll_committed_to`](Self::poll_committed_to)).
///
/// Invariant: `position` is a frame boundary, every frame before it has been handed on, and the consumer
/// slot holds it after every poll.
#[derive(Debug)]
pub struct MessageReader {
    reader: LogReader,
    consumer: super::ConsumerPosition,
    position: i64,
    assembler: FragmentAssembler<()>,
}

impl MessageReader {
    /// A reader of `reader`'s log from `position`, publishing its progress to `consumer`.
    pub fn new(reader: LogReader, consumer: super::ConsumerPosition, position: i64) -> Self {
        Self { reader, consumer, position, assembler: FragmentAssembler::new(()) }
    }

    /// A reader that goes on from `position` of `reader`'s log with reassembly `assembler` carried over
    /// from a reader of the same log bytes elsewhere (the recorded log a restarted member replayed).
    pub fn continuing(
        reader: LogReader,
        consumer: super::ConsumerPosition,
        position: i64,
        assembler: FragmentAssembler<()>,
    ) -> Self {
        consumer.set(position);
        Self { reader, consumer, position, assembler }
    }

    /// The position read up to.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// The index of the consumer slot it publishes its position to.
    pub fn slot_index(&self) -> usize {
        self.consumer.index()
    }

    /// True while a message's first fragments are read and the rest are not.
    pub fn is_assembling(&self) -> bool {
        self.assembler.is_assembling()
    }

    /// Gives back the reassembly state, to go on in a reader of the same bytes elsewhere.
    pub fn into_assembler(self) -> FragmentAssembler<()> {
        self.assembler
    }

    /// Goes on reading from the same position in another log: the log of the next leader, which holds the
    /// same bytes from here on (it starts here, or was copied from here with [`super::copy_frames`]). The
    /// reassembly goes on too, so a message whose first fragments were in the old log is delivered whole.
    /// `consumer` is the new log's slot; the caller has made sure the new log holds this position.
    pub fn continue_in(&mut self, reader: LogReader, consumer: super::ConsumerPosition) {
        consumer.set(self.position);
        self.reader = reader;
        self.consumer = consumer;
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages, reading nothing at or beyond
    /// `limit_position`, to `handler`; returns the fragments read. Follows the log across term boundaries.
    pub fn poll_bounded(
        &mut self,
        limit_position: i64,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8]),
    ) -> usize {
        self.poll_bounded_with_positions(limit_position, fragment_limit, |message, _| handler(message))
    }

    /// As [`poll_bounded`](Self::poll_bounded), handing each message with the log position it ends at.
    pub fn poll_bounded_with_positions(
        &mut self,
        limit_position: i64,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8], i64),
    ) -> usize {
        self.poll_bounded_with_flags(limit_position, fragment_limit, |message, end, _| handler(message, end))
    }

    /// As [`poll_bounded_with_positions`](Self::poll_bounded_with_positions), with the flags of each
    /// message's last frame (such as [`crate::frame::APPLICATION_FLAG`]).
    pub fn poll_bounded_with_flags(
        &mut self,
        limit_position: i64,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8], i64, u8),
    ) -> usize {
        let start = self.position;
        let assembler = &mut self.assembler;
        let mut fragments = 0;
        let term_mask = !(self.reader.term_length as i64 - 1);
        while fragments < fragment_limit {
            let mut read = 0;
            // Every frame of one read is in the term `self.position` is in.
            let term_base = self.position & term_mask;
            let next = self.reader.poll_bounded(
                self.position,
                limit_position,
                fragment_limit - fragments,
                |payload, header| {
                    read += 1;
                    // A term-start marker is the log's own bookkeeping, not a message.
                    if header.flags & MARKER_FLAG == 0 {
                        let end =
                            term_base + header.term_offset as i64 + align_frame(header.frame_length as usize) as i64;
                        let mut deliver = |message: &[u8], last: &DataHeader| handler(message, end, last.flags);
                        assembler.on_fragment_with(payload, header, &mut deliver);
                    }
                },
            );
            if next == self.position {
                break;
            }
            fragments += read;
            self.position = next;
        }
        if self.position != start {
            self.consumer.set(self.position);
        }
        fragments
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages to `handler`, reading every
    /// committed frame (no limit position), and returns the fragments read (0 when nothing new was
    /// committed). Every frame is handed on: the log is a stream with no term-start markers (an IPC log).
    ///
    /// `known_tail` is a producer position read earlier: every frame before it is committed. Behind it,
    /// the frames up to it are read with prefetching ([`LogReader::poll_to`]), since the chain of
    /// dependent frame-length loads would otherwise pay one cross-core miss per frame; at or past it,
    /// the read spins on the next frame's length ([`LogReader::poll`]): one cache-line transfer when it
    /// lands, the lowest latency. Crosses at most one term boundary per call. The position is published
    /// to the consumer slot once, at the end, when it moved.
    #[inline]
    pub fn poll_committed_to(
        &mut self,
        known_tail: i64,
        fragment_limit: usize,
        mut handler: impl FnMut(&[u8]),
    ) -> usize {
        let start = self.position;
        let mut fragments = 0;
        let mut deliver = |message: &[u8], _: &DataHeader| handler(message);
        for _ in 0..2 {
            let limit = fragment_limit - fragments;
            let assembler = &mut self.assembler;
            let mut on_fragment = |payload: &[u8], header: &DataHeader| {
                fragments += 1;
                assembler.on_fragment_with(payload, header, &mut deliver);
            };
            let next = if self.position < known_tail {
                // Behind: every frame up to the known tail is committed; read them with prefetching.
                self.reader.poll_to(self.position, known_tail, limit, &mut on_fragment)
            } else {
                // Caught up: spin on the next frame's length, one cache-line transfer when it lands.
                self.reader.poll(self.position, limit, &mut on_fragment)
            };
            let moved = next != self.position;
            self.position = next;
            // Go on into the next term only when this read ended at the end of a term with room left.
            if !moved || fragments >= fragment_limit || term_offset(next, self.reader.term_length) != 0 {
                break;
            }
        }
        if self.position != start {
            self.consumer.set(self.position);
        }
        fragments
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::log_buffer::LogConfig;

    #[test]
    fn polls_fragments_and_skips_padding() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 8192)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for i in 0..9u8 {
            a.append(&[i; 8000]).unwrap();
        }
        drop(a.try_claim(10).unwrap()); // abandoned: padding in the middle of a term
        a.append(b"last").unwrap();
        let reader = LogReader::new(&log);
        let mut seen = Vec::new();
        let mut position = 0;
        loop {
            let next = reader.poll(position, 3, |payload, header| seen.push((payload.to_vec(), header.term_offset)));
            if next == position {
                break;
            }
            position = next;
        }
        assert_eq!(position, a.position());
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[8].0, vec![8u8; 8000]);
        assert_eq!(seen[8].1, 0, "the ninth message opens the second term");
        assert_eq!(seen[9].0, b"last");
    }

    #[test]
    fn poll_to_stops_before_the_end_position() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for i in 0..4u8 {
            a.append(&[i; 32]).unwrap();
        }
        let reader = LogReader::new(&log);
        let mut seen = Vec::new();
        assert_eq!(reader.poll_to(0, 128, 10, |p, _| seen.push(p[0])), 128);
        assert_eq!(
            reader.poll_to(128, 100, 10, |p, _| seen.push(p[0])),
            128,
            "an end behind the position reads nothing"
        );
        assert_eq!(reader.poll_to(128, 1 << 40, 10, |p, _| seen.push(p[0])), 256);
        assert_eq!(seen, [0, 1, 2, 3]);
    }

    #[test]
    fn a_message_reader_reads_a_stream_across_one_term_boundary_per_poll_and_publishes_its_position() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let mut seen = Vec::new();
        let mut reader = MessageReader::new(LogReader::new(&log), log.register_consumer(0).unwrap(), 0);
        for i in 0..60u32 {
            a.append(&[i as u8; 1000]).unwrap(); // 1056 log bytes: 62 to a term, then padding
        }
        assert_eq!(reader.poll_committed_to(a.position(), 1000, |m| seen.push(m[0])), 60);
        assert_eq!((reader.position(), log.min_consumer_position()), (63360, Some(63360)));
        for i in 60..130u32 {
            a.append(&[i as u8; 1000]).unwrap(); // the rest of term 0, all of term 1, 6 in term 2
        }
        // (Past the half-term bound, which `set_limit` lifted: appending in term 2 zeroes partition 0 only
        // from its start, below what the reader has still to read there.)
        let tail = a.position();
        // Behind a known tail: the end of the first term, then the second, and no further in one poll.
        assert_eq!(reader.poll_committed_to(tail, 1000, |m| seen.push(m[0])), 64);
        assert_eq!((reader.position(), log.min_consumer_position()), (131072, Some(131072)));
        assert_eq!(reader.poll_committed_to(tail, 1000, |m| seen.push(m[0])), 6);
        assert_eq!(log.min_consumer_position(), Some(tail));
        assert_eq!(seen, (0..130u32).map(|i| i as u8).collect::<Vec<_>>());
        // Caught up (at the known tail): it reads what lands past it, a fragmented message held whole
        // across polls cut by the fragment limit.
        assert_eq!(reader.poll_committed_to(tail, 1000, |_| panic!("nothing new")), 0);
        let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        a.append(&big).unwrap(); // 4 fragments
        let mut messages = Vec::new();
        assert_eq!(reader.poll_committed_to(tail, 2, |m| messages.push(m.to_vec())), 2);
        assert!(reader.is_assembling() && messages.is_empty());
        assert_eq!(log.min_consumer_position(), Some(reader.position()));
        assert_eq!(reader.poll_committed_to(tail, 10, |m| messages.push(m.to_vec())), 2);
        assert_eq!(messages, vec![big]);
        assert_eq!((reader.position(), log.min_consumer_position()), (a.position(), Some(a.position())));
    }

    #[test]
    fn assembles_fragments_reusing_its_buffer() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        a.append(&big).unwrap();
        a.append(b"small").unwrap();
        a.append(&big[..3000]).unwrap();
        let reader = LogReader::new(&log);
        let mut messages = Vec::new();
        let mut assembler = FragmentAssembler::new(|m: &[u8], _: &DataHeader| messages.push(m.to_vec()));
        let mut position = 0;
        for _ in 0..20 {
            position = reader.poll(position, 2, |p, h| assembler.on_fragment(p, h));
        }
        let capacity = assembler.state.blocks.len();
        assert_eq!(assembler.state.blocks.as_ptr() as usize % 64, 0);
        drop(assembler);
        assert_eq!(messages, vec![big.clone(), b"small".to_vec(), big[..3000].to_vec()]);
        assert_eq!(capacity, 128, "5000 bytes -> 79 blocks -> 128");
    }

    #[test]
    fn drops_fragments_of_a_message_it_joined_late() {
        let mut out = Vec::new();
        let mut assembler = FragmentAssembler::new(|m: &[u8], _: &DataHeader| out.push(m.to_vec()));
        let header = |flags| DataHeader { flags, ..DataHeader::default() };
        assembler.on_fragment(b"mid", &header(0));
        assembler.on_fragment(b"end", &header(END_FLAG));
        assembler.on_fragment(b"a", &header(BEGIN_FLAG));
        assembler.on_fragment(b"b", &header(END_FLAG));
        drop(assembler);
        assert_eq!(out, vec![b"ab".to_vec()]);
    }
}
