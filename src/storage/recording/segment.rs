//! One segment file of a recording: a header, then blocks of log frames, each with its own checksum.
//!
//! # Layout
//!
//! ```text
//! SegmentHeader (64 bytes)  identity, base position, checksum of the header
//! SyncMark x 2  (64 bytes)  the log position each of the last two syncs made durable (`qcseg002`)
//! BlockHeader   (32 bytes)  position, stored length, log bytes covered, checksum of header and payload
//! payload                   the log's frames from `position`, exactly as in the term (a data run)
//! BlockHeader ...
//! ```
//!
//! # Invariants
//!
//! - A block's payload is a run of whole frames of one term, starting at `position`, as a Sender would
//!   send it: when it ends with a PAD frame only the PAD's header is stored, and `advance` (the log bytes
//!   the block covers) includes the padding; otherwise `advance == length`.
//! - Blocks are contiguous: each starts at the position where the one before it ends
//!   (`position + advance`); the first at the segment's base position.
//! - A block is written whole with one `pwrite` at the end of the file; a crash can leave a torn last
//!   block (short, or with bytes of another write), which the checksum finds. Nothing after the first
//!   block that fails is read.
//! - Every block is of a format this version reads: written as [`BLOCK_MAGIC`] (`qcb4`), read as that or
//!   as `qcb3` (a segment begun by the version before, which this one goes on appending to: each block's
//!   magic says its checksum). A segment whose first block is of a format no longer read is refused when
//!   it is opened, never walked and cut as torn.
//! - Space written ahead (under `batch`, while each sync covers little: see [`WRITE_AHEAD_STEP`]): the
//!   file of the segment being written may go on past its last block with zeros the writer wrote ahead,
//!   so that the block writes after them overwrite bytes the file already holds and a sync carries no
//!   change of the file's length. A walk stops at them as at a torn block (a block header of zeros); only
//!   the last segment ever has them: a segment's zeros are cut before the next segment is made, and on a
//!   clean close.
//! - Sync marks (segments of format `qcseg002`; `qcseg001` ones, begun by the version before, have none
//!   and are still read and appended to): before each sync of the segment, the log position it makes
//!   durable is written into the older of two slots (with a sequence number and a checksum), so the
//!   newest slot that verifies names an end the segment's blocks reached and synced. Blocks that end below
//!   it are damage (a misdirected write, a bad sector), not a torn tail: the blocks alone cannot tell the
//!   two apart when the damage is the last synced blocks themselves (found by the node simulator: seed
//!   1796375184919812163). The mark is written after the blocks it covers, so on a disk that persists
//!   writes in order a mark never outlives them; a cut lowers both slots, durably, before it cuts.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytemuck::{Pod, Zeroable};

use super::RecordingIdentity;
use crate::frame::FRAME_ALIGNMENT;
use crate::storage::disk::{Disk, DiskFile};

/// A segment file's first 8 bytes: the format this version writes, with sync marks.
pub(super) const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"qcseg002");
/// The segment format before, still read and appended to: blocks right after the header, no sync marks.
pub(super) const UNMARKED_SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"qcseg001");
/// A sync mark's first 8 bytes.
const SYNC_MARK_MAGIC: u64 = u64::from_le_bytes(*b"qcsync01");
/// A block header's first 4 bytes: the block format. `qcb4`: the checksum is CRC-32 (`crc32fast`, with
/// the CPU's carry-less multiply) over the payload, then the header's first fields: it finds a torn or
/// damaged block at 4-5x less CPU than BLAKE3 (docs/results.md), on a recorder that shares the cores with
/// the data path.
const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"qcb4");
/// The block format before, still read: the first 8 bytes of BLAKE3 over the payload, then the header's
/// first fields.
const BLAKE3_BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"qcb3");
/// The magic numbers of older block formats, which this version does not read, and what they were.
const OLDER_BLOCK_FORMATS: [(u32, &str); 2] = [
    (u32::from_le_bytes(*b"qcbk"), "qcbk, BLAKE3 over the header's fields, then the payload"),
    (u32::from_le_bytes(*b"qcb2"), "qcb2, CRC-32 block checksums"),
];
/// Bytes of the segment header.
pub(super) const SEGMENT_HEADER_LENGTH: u64 = std::mem::size_of::<SegmentHeader>() as u64;
/// Bytes of one sync mark.
const SYNC_MARK_LENGTH: u64 = std::mem::size_of::<SyncMark>() as u64;
/// Where the first block of a segment of this version's format starts: after the header and two marks.
pub(super) const MARKED_DATA_START: u64 = SEGMENT_HEADER_LENGTH + 2 * SYNC_MARK_LENGTH;
/// Bytes of a block header.
pub const BLOCK_HEADER_LENGTH: usize = std::mem::size_of::<BlockHeader>();
/// The longest block payload a reader accepts: a bound on what a damaged length can make it allocate.
pub const MAX_BLOCK_LENGTH: usize = 1 << 20;

/// A segment file's header, little-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct SegmentHeader {
    pub(super) magic: u64,
    pub(super) membership: i64,
    pub(super) stream_id: i32,
    pub(super) term_length: u32,
    /// The log position of the first block's first byte.
    pub(super) base_position: i64,
    pub(super) reserved: [u64; 3],
    /// The first 8 bytes of BLAKE3 over the fields before it.
    pub(super) checksum: u64,
}

const _: () = assert!(std::mem::size_of::<SegmentHeader>() == 64);

/// One sync mark slot, little-endian: a log position the segment's blocks were synced up to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct SyncMark {
    magic: u64,
    /// Higher in each mark written to the segment: the newest slot that verifies is the one to believe.
    sequence: u64,
    /// The log position everything before which (in this segment) was written before the sync.
    end: i64,
    /// The first 8 bytes of BLAKE3 over the fields before it.
    checksum: u64,
}

const _: () = assert!(std::mem::size_of::<SyncMark>() == 32);

impl SyncMark {
    fn new(sequence: u64, end: i64) -> Self {
        let mut mark = Self { magic: SYNC_MARK_MAGIC, sequence, end, checksum: 0 };
        mark.checksum = checksum(&[&bytemuck::bytes_of(&mark)[..24]]);
        mark
    }

    fn verifies(&self) -> bool {
        self.magic == SYNC_MARK_MAGIC && self.checksum == checksum(&[&bytemuck::bytes_of(self)[..24]])
    }
}

/// The sync marks of one segment (format `qcseg002`): shared by the recorder and a group commit in
/// flight, which writes one before each sync. Only one writer at a time: the recorder quiesces the
/// group commit before it cuts.
#[derive(Debug, Default)]
pub(crate) struct SyncMarks {
    /// The sequence number of the next mark; its slot is `next % 2`, so the newest one is never
    /// overwritten by the mark after it.
    next: AtomicU64,
}

impl SyncMarks {
    /// Writes `end` as the next mark (not synced: the sync that follows makes it durable with the blocks
    /// written before it).
    pub(crate) fn write(&self, file: &dyn DiskFile, end: i64) -> io::Result<()> {
        let sequence = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = SEGMENT_HEADER_LENGTH + (sequence % 2) * SYNC_MARK_LENGTH;
        file.write_all_at(bytemuck::bytes_of(&SyncMark::new(sequence, end)), slot)
    }

    /// Lowers both slots to `end` (a cut), durably: no mark is left above the blocks that stay, even if
    /// the cut itself is lost to a power loss.
    fn lower(&self, file: &dyn DiskFile, end: i64) -> io::Result<()> {
        self.write(file, end)?;
        self.write(file, end)?;
        file.sync_data()
    }

    /// The newest mark of `file` that verifies, if one does, and the sequence number to write next.
    fn read(file: &dyn DiskFile) -> (Option<i64>, u64) {
        let mut newest: Option<SyncMark> = None;
        for slot in 0..2 {
            let mut mark = SyncMark::zeroed();
            if file
                .read_exact_at(bytemuck::bytes_of_mut(&mut mark), SEGMENT_HEADER_LENGTH + slot * SYNC_MARK_LENGTH)
                .is_ok()
                && mark.verifies()
                && newest.is_none_or(|n| n.sequence < mark.sequence)
            {
                newest = Some(mark);
            }
        }
        (newest.map(|m| m.end), newest.map_or(0, |m| m.sequence + 1))
    }
}

/// A block's header, little-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockHeader {
    magic: u32,
    /// Payload bytes stored after the header: a multiple of 32, at most [`MAX_BLOCK_LENGTH`].
    pub length: u32,
    /// The log position of the payload's first byte.
    pub position: i64,
    /// Log bytes the block covers: `length`, plus a final PAD frame's body.
    pub advance: u32,
    reserved: u32,
    /// The checksum of the payload, then the fields before it, by the block format (`magic`): CRC-32 in
    /// the low 32 bits (`qcb4`), or the first 8 bytes of BLAKE3 (`qcb3`, whose payload comes first so
    /// that it starts on a BLAKE3 chunk boundary, where its chunks are hashed side by side in SIMD lanes).
    checksum: u64,
}

const _: () = assert!(BLOCK_HEADER_LENGTH == 32);

impl SegmentHeader {
    pub(super) fn new(identity: &RecordingIdentity, base_position: i64) -> Self {
        let mut header = Self {
            magic: SEGMENT_MAGIC,
            membership: identity.membership,
            stream_id: identity.stream_id,
            term_length: identity.term_length,
            base_position,
            reserved: [0; 3],
            checksum: 0,
        };
        header.checksum = checksum(&[&bytemuck::bytes_of(&header)[..56]]);
        header
    }

    /// Checks the header is whole and of `identity`; the error says what is wrong.
    pub(super) fn verify(&self, identity: &RecordingIdentity) -> Result<(), String> {
        if self.magic != SEGMENT_MAGIC && self.magic != UNMARKED_SEGMENT_MAGIC {
            return Err("is not a segment of a quorumcast recording (no magic number)".into());
        }
        if self.checksum != checksum(&[&bytemuck::bytes_of(self)[..56]]) {
            return Err("its header fails its checksum".into());
        }
        if self.membership != identity.membership || self.stream_id != identity.stream_id {
            return Err(format!(
                "was written by another cluster (member-list tag {:#x}, stream {}; this node's is {:#x}, stream {})",
                self.membership, self.stream_id, identity.membership, identity.stream_id
            ));
        }
        if self.term_length != identity.term_length {
            return Err(format!(
                "was written with term length {}; this node's is {}",
                self.term_length, identity.term_length
            ));
        }
        if self.base_position < 0 || self.base_position % FRAME_ALIGNMENT as i64 != 0 {
            return Err(format!("its base position {} is not a frame boundary", self.base_position));
        }
        Ok(())
    }
}

impl BlockHeader {
    /// The header of a block of `payload` at `position` covering `advance` log bytes.
    pub fn new(position: i64, payload: &[u8], advance: usize) -> Self {
        let mut header = Self {
            magic: BLOCK_MAGIC,
            length: payload.len() as u32,
            position,
            advance: advance as u32,
            reserved: 0,
            checksum: 0,
        };
        header.checksum = block_checksum(BLOCK_MAGIC, payload, &bytemuck::bytes_of(&header)[..24]);
        header
    }

    /// The position where the block ends.
    pub fn end(&self) -> i64 {
        self.position + i64::from(self.advance)
    }

    /// Checks the header's own fields, before its payload is read: at `position`, of a sane length.
    pub fn check_fields(&self, position: i64) -> Result<(), String> {
        let length = self.length as usize;
        if *self == Self::zeroed() {
            return Err(
                "zeros where a block would start (written ahead of the blocks, or a write that never reached the disk)"
                    .into(),
            );
        }
        if self.magic != BLOCK_MAGIC && self.magic != BLAKE3_BLOCK_MAGIC {
            return Err(match older_format(self.magic) {
                Some(format) => format!("a block of an older format ({format}), which this version does not read"),
                None => "no block header (no magic number)".into(),
            });
        }
        if self.position != position {
            return Err(format!("a block at position {} where {position} was expected", self.position));
        }
        if length == 0 || length > MAX_BLOCK_LENGTH || length % FRAME_ALIGNMENT != 0 {
            return Err(format!("a block length of {length} bytes"));
        }
        if (self.advance as usize) < length || self.advance as usize % FRAME_ALIGNMENT != 0 {
            return Err(format!("a block covering {} log bytes for {length} stored", self.advance));
        }
        Ok(())
    }

    /// Checks `payload` is the one this header was written with.
    pub fn check_payload(&self, payload: &[u8]) -> bool {
        self.checksum == block_checksum(self.magic, payload, &bytemuck::bytes_of(self)[..24])
    }
}

#[cfg(test)]
impl SegmentHeader {
    /// This header as the version before wrote it (`qcseg001`: no sync marks after it).
    pub(super) fn in_unmarked_format(mut self) -> Self {
        self.magic = UNMARKED_SEGMENT_MAGIC;
        self.checksum = checksum(&[&bytemuck::bytes_of(&self)[..56]]);
        self
    }
}

#[cfg(test)]
impl BlockHeader {
    /// This header as the version before wrote it (`qcb3`, BLAKE3), for `payload`.
    pub(super) fn in_blake3_format(mut self, payload: &[u8]) -> Self {
        self.magic = BLAKE3_BLOCK_MAGIC;
        self.checksum = block_checksum(self.magic, payload, &bytemuck::bytes_of(&self)[..24]);
        self
    }
}

/// What an older block format was, when `magic` is one's.
fn older_format(magic: u32) -> Option<&'static str> {
    OLDER_BLOCK_FORMATS.iter().find(|&&(older, _)| older == magic).map(|&(_, format)| format)
}

/// A block's checksum in its format (`magic`, one [`BlockHeader::check_fields`] accepts): of its payload,
/// then its header's `fields`.
fn block_checksum(magic: u32, payload: &[u8], fields: &[u8]) -> u64 {
    if magic == BLAKE3_BLOCK_MAGIC {
        return checksum(&[payload, fields]);
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(payload);
    crc.update(fields);
    u64::from(crc.finalize())
}

/// The first 8 bytes of BLAKE3 over `parts`: the checksum of a segment header (and of a `qcb3` block).
fn checksum(parts: &[&[u8]]) -> u64 {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    u64::from_le_bytes(hasher.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The file name of the segment whose first block starts at `base_position`.
pub(super) fn file_name(base_position: i64) -> String {
    format!("segment-{base_position:020}.rec")
}

/// The base position a segment file name says, if it is one.
pub(super) fn parse_file_name(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("segment-")?.strip_suffix(".rec")?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

/// An open segment: where its blocks end in the file and in the log.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) path: PathBuf,
    /// Shared with a group commit in flight (see `group_commit`).
    pub(super) file: Arc<dyn DiskFile>,
    pub(super) base_position: i64,
    /// Where its first block starts: after the header, and the sync marks when it has them.
    pub(super) data_start: u64,
    /// Its sync marks (`None`: a segment of the format before, which has none).
    pub(super) marks: Option<Arc<SyncMarks>>,
    /// The end its newest sync mark names, as it was opened (`None` for a new segment or one without).
    pub(super) marked_end: Option<i64>,
    /// The file length up to the end of the last whole block.
    pub(super) file_end: u64,
    /// The log position where the last whole block ends.
    pub(super) end_position: i64,
    /// How far the file's disk space is reserved (see [`RESERVE_STEP`]).
    reserved: u64,
    /// Whether appends write zeros ahead of the blocks (see [`WRITE_AHEAD_STEP`]); set by the recording.
    pub(super) write_ahead: bool,
    /// How far this handle wrote the file with zeros ahead of its blocks (at or below `file_end`: no zeros
    /// past the blocks).
    written_ahead: u64,
    /// How far its writeback has been started, and how far its cached pages dropped, by
    /// [`release_cache`](Self::release_cache).
    released: CacheRelease,
}

/// How far behind its end a segment's page cache has been written back and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CacheRelease {
    /// Writeback started for every byte below this offset.
    written_back: u64,
    /// Cached pages dropped below this offset, from [`RELEASE_FROM`] (the first page, with the header and
    /// the sync marks the group commit rewrites, stays cached).
    dropped: u64,
}

/// A segment's page cache is written back and dropped this much at a time.
pub(super) const RELEASE_STEP: u64 = 4 << 20;
/// The smallest page cache window a segment keeps (`StorageConfig::page_cache_window`): two steps, so the
/// step being written back is never the one being dropped.
pub const MIN_PAGE_CACHE_WINDOW: u64 = 2 * RELEASE_STEP;
/// Where dropping a segment's cached pages starts: past its first page.
const RELEASE_FROM: u64 = 4096;

/// What appending blocks cost, added up until the recorder takes it for its counters. Times are wall
/// time (a thread that loses its core meanwhile counts the wait).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCost {
    /// Write calls (one per block).
    pub writes: u64,
    /// Nanoseconds computing block checksums.
    pub checksum_ns: u64,
    /// Nanoseconds in write calls (the copy into the page cache, on the operating system's disk).
    pub write_ns: u64,
    /// Bytes of zeros written ahead of the blocks (under `batch` while syncs are small).
    pub zeros_ahead: u64,
}

/// Zeros are written ahead of the blocks this much at a time, when asked (`Segment::write_ahead`).
/// Measured on ext4 (docs/runs/2026-12-05.md): an `fdatasync` after a 4 KiB write into bytes the
/// file already holds took 92-140 us p50 against 160-182 us after an append, and 139-192 us against
/// 270-333 us with three writers syncing at once, as the three members of a cluster on one disk do: an
/// append changes the file's length, which the sync writes with the inode, a second write before the
/// disk's flush. The zeros cost a second write of the same bytes to the disk (the first sync after them
/// writes them), which is why they are only written while syncs are small (the latency regime, where the
/// disk's bandwidth is idle), and one sync per step carries them and the new length.
pub const WRITE_AHEAD_STEP: u64 = 256 << 10;

/// Zeros are written ahead once [`SMALL_SYNCS_TO_WRITE_AHEAD`] syncs in a row each covered fewer log
/// bytes than this (a few pages: above it the length's inode write is a small part of what a sync writes,
/// and the second write of the zeros is not).
pub(super) const WRITE_AHEAD_BELOW: i64 = 16 << 10;
/// Syncs in a row under [`WRITE_AHEAD_BELOW`] before zeros are written ahead: a stream fast enough to
/// fill the disk has small syncs too now and then (9-27% of its bytes were zeros written ahead at MTU 1408
/// with one small sync enough, measured 2026-12-05), and a latency-bound load has nothing else.
pub(super) const SMALL_SYNCS_TO_WRITE_AHEAD: u32 = 8;

/// Whether to write zeros ahead, from the log bytes each sync covered.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriteAheadChoice {
    /// Syncs in a row that covered fewer bytes than [`WRITE_AHEAD_BELOW`].
    small_in_a_row: u32,
}

impl WriteAheadChoice {
    /// After a sync that covered `covered` log bytes: whether zeros are to be written ahead now.
    pub(crate) fn after_sync(&mut self, covered: i64) -> bool {
        self.small_in_a_row = if covered < WRITE_AHEAD_BELOW { self.small_in_a_row.saturating_add(1) } else { 0 };
        self.small_in_a_row >= SMALL_SYNCS_TO_WRITE_AHEAD
    }
}

/// Zeros to write ahead of the blocks from: one step's worth, made once per process (calloc'd: pages of
/// zeros the kernel maps as they are read).
static ZEROS: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| vec![0; WRITE_AHEAD_STEP as usize]);

/// Disk space is reserved ahead of the writes this much at a time, so that appends do not allocate ext4
/// blocks one write at a time, and a small log does not hold a whole segment's worth of disk.
const RESERVE_STEP: u64 = 8 << 20;

/// What walking a segment's blocks found.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Walk {
    /// The file offset and log position after the last block that verified.
    pub(super) file_end: u64,
    pub(super) end_position: i64,
    /// Why the walk stopped before the end of the file, if it did.
    pub(super) torn: Option<String>,
}

impl Segment {
    /// Creates a segment at `base_position`, writing its header (not synced: the recording syncs the file
    /// and its directory with the blocks that follow).
    pub(super) fn create(
        disk: &dyn Disk,
        dir: &Path,
        identity: &RecordingIdentity,
        base_position: i64,
    ) -> io::Result<Segment> {
        let path = dir.join(file_name(base_position));
        let file = disk.create(&path)?;
        let mut start = [0u8; MARKED_DATA_START as usize];
        start[..SEGMENT_HEADER_LENGTH as usize]
            .copy_from_slice(bytemuck::bytes_of(&SegmentHeader::new(identity, base_position)));
        file.write_all_at(&start, 0)?;
        Ok(Segment {
            path,
            file: Arc::from(file),
            base_position,
            data_start: MARKED_DATA_START,
            marks: Some(Arc::default()),
            marked_end: None,
            file_end: MARKED_DATA_START,
            end_position: base_position,
            reserved: 0,
            write_ahead: false,
            written_ahead: 0,
            released: CacheRelease::default(),
        })
    }

    /// Opens a segment and checks its header against `identity`.
    pub(super) fn open(disk: &dyn Disk, path: &Path, identity: &RecordingIdentity) -> Result<Segment, String> {
        let file = disk.open(path).map_err(|e| format!("cannot be opened: {e}"))?;
        Self::checked(file, path, identity)
    }

    /// As [`open`](Self::open), for reading only (a recording inspected, never changed): nothing may be
    /// appended, cut or synced through it.
    pub(super) fn open_read(disk: &dyn Disk, path: &Path, identity: &RecordingIdentity) -> Result<Segment, String> {
        let file = disk.open_read(path).map_err(|e| format!("cannot be opened: {e}"))?;
        Self::checked(file, path, identity)
    }

    /// The segment in `file`, its header checked against `identity`.
    fn checked(file: Box<dyn DiskFile>, path: &Path, identity: &RecordingIdentity) -> Result<Segment, String> {
        let mut header = SegmentHeader::zeroed();
        file.read_exact_at(bytemuck::bytes_of_mut(&mut header), 0)
            .map_err(|e| format!("its header cannot be read: {e}"))?;
        header.verify(identity)?;
        // The first block says the format of every block in the file: one of an older format is refused
        // here, rather than failing the walk and being cut as a torn tail.
        let marked = header.magic == SEGMENT_MAGIC;
        let data_start = if marked { MARKED_DATA_START } else { SEGMENT_HEADER_LENGTH };
        let mut magic = [0u8; 4];
        if file.read_exact_at(&mut magic, data_start).is_ok() {
            if let Some(format) = older_format(u32::from_le_bytes(magic)) {
                return Err(format!("holds blocks of an older format ({format}), which this version does not read"));
            }
        }
        let (marked_end, next) = if marked { SyncMarks::read(&*file) } else { (None, 0) };
        Ok(Segment {
            path: path.to_path_buf(),
            file: Arc::from(file),
            base_position: header.base_position,
            data_start,
            marks: marked.then(|| Arc::new(SyncMarks { next: AtomicU64::new(next) })),
            marked_end,
            file_end: data_start,
            end_position: header.base_position,
            reserved: 0,
            write_ahead: false,
            written_ahead: 0,
            released: CacheRelease::default(),
        })
    }

    /// Appends one block, header and payload in one write, adding what it cost to `cost`; the file is not
    /// synced.
    pub(super) fn append(
        &mut self,
        position: i64,
        payload: &[u8],
        advance: usize,
        cost: &mut WriteCost,
    ) -> io::Result<()> {
        debug_assert_eq!(position, self.end_position);
        let started = Instant::now();
        let header = BlockHeader::new(position, payload, advance);
        let checksummed = Instant::now();
        let needed = self.file_end + (BLOCK_HEADER_LENGTH + payload.len()) as u64;
        if needed > self.reserved {
            self.reserved = needed.next_multiple_of(RESERVE_STEP);
            self.file.reserve(self.reserved);
        }
        let zeros = self.zeros_ahead(needed);
        self.file.write_parts_at(&[bytemuck::bytes_of(&header), payload, &ZEROS[..zeros]], self.file_end)?;
        self.file_end = needed;
        self.end_position = header.end();
        cost.writes += 1;
        cost.zeros_ahead += zeros as u64;
        cost.checksum_ns += (checksummed - started).as_nanos() as u64;
        cost.write_ns += checksummed.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// How many zeros to write after a block that ends at file offset `end`: up to the next
    /// [`WRITE_AHEAD_STEP`] when writing ahead and the block ends past the zeros written before; else none.
    fn zeros_ahead(&mut self, end: u64) -> usize {
        if !self.write_ahead || end <= self.written_ahead {
            return 0;
        }
        self.written_ahead = (end + 1).next_multiple_of(WRITE_AHEAD_STEP);
        (self.written_ahead - end) as usize
    }

    /// Whether the file goes on past its last block with zeros written ahead.
    fn has_zeros_ahead(&self) -> bool {
        self.written_ahead > self.file_end
    }

    /// Cuts the zeros written ahead of the blocks, if there are any. Not synced: a roll syncs the segment
    /// after it, a clean close syncs the recording.
    pub(super) fn cut_zeros_ahead(&mut self) -> io::Result<()> {
        if self.has_zeros_ahead() {
            self.file.set_len(self.file_end)?;
        }
        self.written_ahead = 0;
        Ok(())
    }

    /// The file's length, for reading this handle's blocks: where its blocks end when it wrote zeros
    /// ahead of them.
    fn readable_length(&self) -> io::Result<u64> {
        if self.has_zeros_ahead() {
            return Ok(self.file_end);
        }
        self.file.len()
    }

    /// Keeps the page cache this segment holds to about `window` bytes behind its end: with `write_back`
    /// (sync `none`, where nothing else writes the bytes back soon) starts the writeback of each
    /// [`RELEASE_STEP`] written, and drops the cached pages of each step that ended `window` bytes ago or
    /// more (by then written back, by this or by a group commit's `fdatasync`: pages still dirty or being
    /// written stay cached).
    /// A recorder that appends through the page cache otherwise fills memory with pages no reader asks for
    /// again until reclaim takes them, and takes every new page from free memory, which on a guest whose
    /// hypervisor takes freed memory back costs a hypervisor fault per page (docs/runs/2026-12-05.md).
    /// `window` at least [`MIN_PAGE_CACHE_WINDOW`]; the time it takes is counted as write time in `cost`.
    pub(super) fn release_cache(&mut self, window: u64, write_back: bool, cost: &mut WriteCost) {
        let started = Instant::now();
        let mut calls = 0;
        let released = &mut self.released;
        while write_back && self.file_end.saturating_sub(released.written_back) >= RELEASE_STEP {
            self.file.start_writeback_of(released.written_back, RELEASE_STEP);
            released.written_back += RELEASE_STEP;
            calls += 1;
        }
        let behind = if write_back { released.written_back } else { self.file_end - self.file_end % RELEASE_STEP };
        let dropped_to = behind.saturating_sub(window);
        released.dropped = released.dropped.max(RELEASE_FROM);
        while dropped_to >= released.dropped + RELEASE_STEP {
            self.file.drop_cached(released.dropped, RELEASE_STEP);
            released.dropped += RELEASE_STEP;
            calls += 1;
        }
        if calls > 0 {
            cost.write_ns += started.elapsed().as_nanos() as u64;
        }
    }

    /// Walks every block from the first, verifying each and handing it to `on_block`, and sets where the
    /// verified blocks end.
    pub(super) fn walk(
        &mut self,
        scratch: &mut Vec<u8>,
        mut on_block: impl FnMut(&BlockHeader, &[u8]),
    ) -> io::Result<Walk> {
        let file_length = self.file.len()?;
        let mut reader = BlockReader::new(self.base_position, self.data_start);
        let torn = loop {
            match reader.next(&*self.file, file_length, scratch) {
                Ok(Some(header)) => on_block(&header, scratch),
                Ok(None) => break None,
                Err(why) => break Some(why),
            }
        };
        self.file_end = reader.offset;
        self.end_position = reader.position;
        Ok(Walk { file_end: reader.offset, end_position: reader.position, torn })
    }

    /// After a block that does not verify at file offset `offset` (where the block at log position
    /// `position` was expected): the highest end of a block that verifies anywhere further in the file (at
    /// any block-aligned offset: a block written whole, in its place or misdirected) and ends past
    /// `position`. `Some` is evidence that the bad block is damage below bytes written after it, not a
    /// torn tail: a crash tears only the last writes, which nothing valid follows. Reads the rest of the
    /// file once (at most a segment's length and a block).
    pub(super) fn verified_end_past(&self, offset: u64, position: i64) -> io::Result<Option<i64>> {
        let length = self.file.len()?;
        if length <= offset {
            return Ok(None);
        }
        let mut rest = vec![0; (length - offset) as usize];
        self.file.read_exact_at(&mut rest, offset)?;
        let mut highest = None;
        for at in (0..rest.len().saturating_sub(BLOCK_HEADER_LENGTH - 1)).step_by(FRAME_ALIGNMENT) {
            let header: BlockHeader = bytemuck::pod_read_unaligned(&rest[at..at + BLOCK_HEADER_LENGTH]);
            if header.end() <= position || header.check_fields(header.position).is_err() {
                continue;
            }
            let payload = at + BLOCK_HEADER_LENGTH;
            let Some(bytes) = rest.get(payload..payload + header.length as usize) else { continue };
            if header.position % FRAME_ALIGNMENT as i64 == 0 && header.check_payload(bytes) {
                highest = highest.max(Some(header.end()));
            }
        }
        Ok(highest)
    }

    /// Writes a sync mark for everything appended so far (before a sync of the file; not synced).
    pub(super) fn mark_synced_end(&self) -> io::Result<()> {
        match &self.marks {
            Some(marks) => marks.write(&*self.file, self.end_position),
            None => Ok(()),
        }
    }

    /// Before the file is cut back to `end`: its sync marks lowered to it, durably.
    pub(super) fn lower_marks(&self, end: i64) -> io::Result<()> {
        match &self.marks {
            Some(marks) => marks.lower(&*self.file, end),
            None => Ok(()),
        }
    }

    /// Cuts the segment at log position `position` (a frame boundary at or after its base): blocks after it
    /// go, and a block across it is rewritten to end there.
    pub(super) fn cut(&mut self, position: i64, scratch: &mut Vec<u8>) -> io::Result<()> {
        self.lower_marks(position)?;
        self.marked_end = None;
        let file_length = self.readable_length()?;
        // Every way on from here sets the file's length (an error fails the recording).
        self.written_ahead = 0;
        let mut reader = BlockReader::new(self.base_position, self.data_start);
        loop {
            let block_offset = reader.offset;
            // A block that does not read back (a failing read, a damaged block) stops the cut: cutting there
            // would drop what follows it, which this member may have acknowledged (the node simulator found
            // a bit flipped on read cut 170 KiB of a follower's recording, whose end then still said 184128).
            let header = match reader.next(&*self.file, file_length, scratch) {
                Ok(Some(header)) => header,
                Ok(None) if reader.position >= position => break,
                Ok(None) => {
                    let why = format!("it ends at {}, before {position}, where it is cut back to", reader.position);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, why));
                }
                Err(why) => {
                    let why =
                        format!("{why} at position {}, before {position}, where it is cut back to", reader.position);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, why));
                }
            };
            if header.end() <= position {
                continue;
            }
            // The block crosses `position`, or starts at it.
            let keep = (position - header.position) as usize;
            self.file.set_len(block_offset)?;
            self.file_end = block_offset;
            self.end_position = header.position;
            if keep > 0 {
                let payload = scratch[..keep.min(header.length as usize)].to_vec();
                self.append(header.position, &payload, keep, &mut WriteCost::default())?;
            }
            return Ok(());
        }
        self.file_end = reader.offset;
        self.end_position = reader.position;
        self.file.set_len(self.file_end)?;
        Ok(())
    }
}

/// Reads a segment's blocks one at a time, each verified before it is returned.
#[derive(Debug)]
pub struct BlockReader {
    /// The file offset of the next block.
    pub offset: u64,
    /// The log position of the next block.
    pub position: i64,
}

impl BlockReader {
    /// A reader of the blocks at `offset`, the first at log position `position`.
    pub fn new(position: i64, offset: u64) -> Self {
        Self { offset, position }
    }

    /// Reads the next block's payload into `payload`: `Ok(None)` at the end of the file, `Err` with why
    /// when the bytes there are not a whole block that verifies (a torn or damaged block).
    pub fn next(
        &mut self,
        file: &dyn DiskFile,
        file_length: u64,
        payload: &mut Vec<u8>,
    ) -> Result<Option<BlockHeader>, String> {
        if self.offset >= file_length {
            return Ok(None);
        }
        if file_length - self.offset < BLOCK_HEADER_LENGTH as u64 {
            return Err(format!("{} bytes at the end, shorter than a block header", file_length - self.offset));
        }
        let mut header = BlockHeader::zeroed();
        file.read_exact_at(bytemuck::bytes_of_mut(&mut header), self.offset).map_err(|e| e.to_string())?;
        header.check_fields(self.position)?;
        let length = header.length as usize;
        let payload_at = self.offset + BLOCK_HEADER_LENGTH as u64;
        if file_length - payload_at < length as u64 {
            return Err(format!("a block of {length} bytes with {} left in the file", file_length - payload_at));
        }
        payload.resize(length, 0);
        file.read_exact_at(payload, payload_at).map_err(|e| e.to_string())?;
        if !header.check_payload(payload) {
            return Err(format!("the block at position {} fails its checksum", header.position));
        }
        self.offset = payload_at + length as u64;
        self.position = header.end();
        Ok(Some(header))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// What a segment asked of its file's page cache, in order: (started writeback, offset, length).
    type Calls = Arc<Mutex<Vec<(bool, u64, u64)>>>;

    /// A file that keeps only its length and the page cache calls made on it.
    #[derive(Debug)]
    struct CacheCalls(Calls, AtomicU64);

    impl DiskFile for CacheCalls {
        fn read_exact_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
            Err(io::ErrorKind::UnexpectedEof.into())
        }
        fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
            self.1.fetch_max(offset + bytes.len() as u64, Ordering::Relaxed);
            Ok(())
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.1.load(Ordering::Relaxed))
        }
        fn set_len(&self, length: u64) -> io::Result<()> {
            self.1.store(length, Ordering::Relaxed);
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn start_writeback_of(&self, offset: u64, length: u64) {
            self.0.lock().unwrap().push((true, offset, length));
        }
        fn drop_cached(&self, offset: u64, length: u64) {
            self.0.lock().unwrap().push((false, offset, length));
        }
    }

    #[derive(Debug, Default)]
    struct OneFileDisk(Calls);

    impl Disk for OneFileDisk {
        fn create(&self, _: &Path) -> io::Result<Box<dyn DiskFile>> {
            Ok(Box::new(CacheCalls(Arc::clone(&self.0), AtomicU64::new(0))))
        }
        fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
            self.create(path)
        }
        fn open_read(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
            self.create(path)
        }
        fn rename(&self, _: &Path, _: &Path) -> io::Result<()> {
            Ok(())
        }
        fn remove_file(&self, _: &Path) -> io::Result<()> {
            Ok(())
        }
        fn create_dir_all(&self, _: &Path) -> io::Result<()> {
            Ok(())
        }
        fn list(&self, _: &Path) -> io::Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn sync_dir(&self, _: &Path) -> io::Result<()> {
            Ok(())
        }
    }

    const MIB: u64 = 1 << 20;

    /// A segment on `disk` grown to 30 MiB in 32 KiB blocks, releasing its cache 16 MiB behind after each.
    fn grown(disk: &OneFileDisk, write_back: bool) -> (Segment, WriteCost) {
        let identity = RecordingIdentity { membership: 1, stream_id: 2, term_length: 1 << 20 };
        let mut segment = Segment::create(disk, Path::new("/r"), &identity, 0).unwrap();
        let payload = vec![0u8; 32 * 1024];
        let (mut cost, mut position) = (WriteCost::default(), 0);
        while segment.file_end < 30 * MIB {
            segment.append(position, &payload, payload.len(), &mut cost).unwrap();
            position += payload.len() as i64;
            segment.release_cache(16 * MIB, write_back, &mut cost);
        }
        (segment, cost)
    }

    #[test]
    fn the_page_cache_is_written_back_as_it_grows_and_dropped_a_window_behind_but_never_the_first_page() {
        let disk = OneFileDisk::default();
        let (mut segment, mut cost) = grown(&disk, true);
        let calls = disk.0.lock().unwrap().clone();
        let started: Vec<_> = calls.iter().filter(|c| c.0).map(|c| (c.1, c.2)).collect();
        let dropped: Vec<_> = calls.iter().filter(|c| !c.0).map(|c| (c.1, c.2)).collect();
        // Every whole step written is written back, in order, once.
        let steps = segment.file_end / RELEASE_STEP;
        assert_eq!(started, (0..steps).map(|i| (i * RELEASE_STEP, RELEASE_STEP)).collect::<Vec<_>>());
        // Dropped: steps from past the first page, each ending at least the window below the writeback.
        assert_eq!(dropped.first(), Some(&(RELEASE_FROM, RELEASE_STEP)));
        let written_back = steps * RELEASE_STEP;
        assert!(dropped.iter().all(|&(offset, length)| offset + length + 16 * MIB <= written_back), "{dropped:?}");
        assert!(dropped.windows(2).all(|w| w[1].0 == w[0].0 + RELEASE_STEP));
        let last_dropped = dropped.last().map(|&(offset, length)| offset + length).unwrap();
        assert!(written_back - last_dropped < 16 * MIB + RELEASE_STEP, "{last_dropped} {written_back}");
        // A cut below what was written back neither underflows nor asks again for what it asked.
        segment.file_end = 5 * MIB;
        segment.release_cache(16 * MIB, true, &mut cost);
        assert_eq!(disk.0.lock().unwrap().len(), calls.len());
    }

    #[test]
    fn under_group_commit_the_page_cache_is_only_dropped_a_window_behind() {
        let disk = OneFileDisk::default();
        let (segment, _) = grown(&disk, false);
        let calls = disk.0.lock().unwrap().clone();
        assert!(calls.iter().all(|c| !c.0), "no writeback started: {calls:?}");
        let whole = segment.file_end - segment.file_end % RELEASE_STEP;
        assert_eq!(calls.first().map(|c| (c.1, c.2)), Some((RELEASE_FROM, RELEASE_STEP)));
        assert!(calls.iter().all(|&(_, offset, length)| offset + length + 16 * MIB <= whole), "{calls:?}");
        assert!(calls.len() >= 2, "{calls:?}");
    }
}
