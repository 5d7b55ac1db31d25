//! The node's reader of committed entries while they come from the recorded log: after a restart, from
//! the snapshot's position (or the recording's start) up to where the first log in memory takes over.

use crate::cluster::frames::TERM_START_FLAG;
use crate::frame::{DataHeader, Frame};
use crate::shm::log_buffer::FragmentAssembler;
use crate::storage::recording::{for_each_frame, RecordingError, RecordingReader};

/// How long a block may fail to read before it is called damaged: the recorder may be cutting the block
/// being read (a new leader's log agrees with this member's only up to inside it), which a later read
/// gets whole, or emptying the recording for a snapshot a catch-up installs, which replaces this replay;
/// a read may fail once (a flipped bit) and verify when read again. Each takes milliseconds; a block that
/// still fails after a second, and [`READ_FAILING_TIMES`] reads in a row, is damage (a misdirected write, a
/// bad sector), and the node says so ([`crate::node::Node::recording_error`]): started again, it cuts its
/// recording there and repairs the rest from its leader. Read on the node's clock (the environment's,
/// simulated under the node simulator).
const READ_FAILING_FOR_NS: u64 = 1_000_000_000;
/// Reads in a row a block must fail, beside [`READ_FAILING_FOR_NS`], to be called damaged: a process
/// paused (or a clock that jumped) past the time after one failed read is not damage.
const READ_FAILING_TIMES: u32 = 64;

/// Whole messages from the recording, one block at a time, never past a limit.
pub(crate) struct Replay {
    reader: RecordingReader,
    /// The block being handed out, from `offset`.
    block: Vec<u8>,
    block_position: i64,
    offset: usize,
    pub(crate) assembler: FragmentAssembler<()>,
    /// Since when reads have failed, if they do (node clock, ns).
    failing_since: Option<u64>,
    /// Reads failed in a row.
    failed_reads: u32,
}

impl Replay {
    pub(crate) fn new(reader: RecordingReader) -> Self {
        let position = reader.position();
        Self {
            reader,
            block: Vec::new(),
            block_position: position,
            offset: 0,
            assembler: FragmentAssembler::new(()),
            failing_since: None,
            failed_reads: 0,
        }
    }

    /// A replay of the same recording from `position` instead (after a snapshot restored up to there).
    pub(crate) fn restart_at(&self, position: i64) -> Self {
        Self::new(self.reader.reopen(position))
    }

    /// The position read up to.
    pub(crate) fn position(&self) -> i64 {
        self.block_position + self.offset as i64
    }

    /// Hands whole messages that end at or below `limit` to `handler` with the position each ends at, up to
    /// `fragment_limit` fragments; returns the fragments read. `limit` must not exceed what is recorded.
    pub(crate) fn poll(
        &mut self,
        limit: i64,
        fragment_limit: usize,
        now_ns: u64,
        handler: &mut impl FnMut(&[u8], i64, u8),
    ) -> Result<usize, RecordingError> {
        let mut fragments = 0;
        while fragments < fragment_limit && self.position() < limit {
            if self.offset >= self.block.len() {
                if !self.next_block(limit, now_ns)? {
                    break;
                }
                continue;
            }
            let (read, end) = self.poll_block(limit, fragment_limit - fragments, handler);
            fragments += read;
            if read == 0 {
                // A frame that ends past the limit, or a PAD: move on only past a PAD's padding.
                if end > self.position() && end <= limit {
                    self.block_position = end;
                    self.offset = 0;
                    self.block.clear();
                    continue;
                }
                break;
            }
        }
        Ok(fragments)
    }

    /// Reads the next block; false when there is none below `limit` yet.
    fn next_block(&mut self, limit: i64, now_ns: u64) -> Result<bool, RecordingError> {
        let at = self.position();
        match self.reader.next_block(limit) {
            Ok(Some((_, bytes, _))) => {
                self.block.clear();
                self.block.extend_from_slice(bytes);
                self.block_position = at;
                self.offset = 0;
                self.failing_since = None;
                self.failed_reads = 0;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                let since = *self.failing_since.get_or_insert(now_ns);
                self.failed_reads = self.failed_reads.saturating_add(1);
                if now_ns.saturating_sub(since) >= READ_FAILING_FOR_NS && self.failed_reads >= READ_FAILING_TIMES {
                    return Err(e);
                }
                self.reader = self.reader.reopen(at);
                Ok(false)
            }
        }
    }

    /// Hands out the frames of the current block from its offset that end at or below `limit`; returns the
    /// fragments read and, when it stopped at a PAD, where the PAD's term ends.
    fn poll_block(
        &mut self,
        limit: i64,
        fragment_limit: usize,
        handler: &mut impl FnMut(&[u8], i64, u8),
    ) -> (usize, i64) {
        let start = self.position();
        let mut read = 0;
        let mut consumed = 0usize;
        let mut pad_end = start;
        let assembler = &mut self.assembler;
        for_each_frame(&self.block[self.offset..], start, |at, frame| {
            if read >= fragment_limit || pad_end != start {
                return;
            }
            match frame {
                Frame::Data { header, payload } => {
                    let end = at + crate::frame::align_frame(header.frame_length as usize) as i64;
                    if end > limit || at != start + consumed as i64 {
                        return;
                    }
                    consumed += (end - at) as usize;
                    read += 1;
                    if header.flags & TERM_START_FLAG == 0 {
                        let mut deliver = |message: &[u8], last: &DataHeader| handler(message, end, last.flags);
                        assembler.on_fragment_with(payload, &header, &mut deliver);
                    }
                }
                Frame::Pad(header) if at == start + consumed as i64 => {
                    pad_end = at + header.frame_length as i64;
                }
                _ => {}
            }
        });
        self.offset += consumed;
        (read, pad_end)
    }
}
