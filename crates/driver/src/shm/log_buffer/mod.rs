//! The log buffer: three term partitions and a metadata section in one mapped file, the single-writer
//! [`ExclusiveAppender`], the sender-side [`scan`], the subscriber-side [`LogReader`] and
//! [`FragmentAssembler`], and the receiver-side [`TermRebuilder`].
//!
//! # Invariants
//!
//! - One appender per log ([`LogBuffer::appender`] hands out one at a time within a process; across
//!   processes the publication that created the log is its only writer).
//! - A frame is committed by a release store of its positive `frame_length`, written after every other
//!   byte of the frame. Readers acquire-load `frame_length` and stop at any value `<= 0`.
//! - Every consumer (subscriber, sender) stays within `term_length / 2` of the appender: the appender is
//!   given a publication limit of `slowest consumer + term_length / 2` and never writes past it. Hence when
//!   the appender rotates into term `T + 1`, no consumer is in term `T - 1`, whose partition is zeroed then
//!   to be reused by term `T + 2`.
//!
//! # Copies and the CPU's `rep movsb` pitfall
//!
//! Payloads start at 32-byte-aligned term offsets. glibc copies of 2112 bytes or more use `rep movsb`,
//! which on a Zen 3 CPU (measured on the project's first host) slows ~25x when `(dst - src) mod 4096` is
//! a small positive number (1..=31), and a caller's buffer can lie anywhere. The appender therefore
//! copies payloads of 2 KiB or more in 2048-byte chunks (`copy_in_chunks` in the appender), below that
//! threshold, which keeps glibc on its vector loop whatever the caller's buffer address. The
//! [`FragmentAssembler`] keeps its reassembly buffer 64-byte aligned so that copies out of a term are
//! always at a distance that is a multiple of 32. The readers hand out payloads in place (no copy).
//! `copy_distance_probe` in `tests/log_buffer_props.rs` measures both forms on the machine at hand.

mod appender;
mod copy;
pub mod descriptor;
mod reader;
mod rebuilder;
mod scanner;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use appender::{AppendError, BufferClaim, ExclusiveAppender};
pub use copy::{copy_frames, CopyError};
pub use descriptor::{partition_index, partition_of_term, position, position_bits_to_shift, term_id, term_offset};
pub use reader::{FragmentAssembler, LogReader, MessageReader};
pub use rebuilder::{Gap, RebuildError, TermRebuilder};
pub use scanner::{scan, Scan};

use crate::frame::{DATA_HEADER_LENGTH, FRAME_ALIGNMENT};
use crate::shm::buffer::{AtomicBuffer, Region};
use descriptor::*;

/// How to lay out a new log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Bytes per term: a power of two in `[64 KiB, 1 GiB]`.
    pub term_length: usize,
    /// Largest frame, header included: a multiple of 32, more than 32, at most 65504 and at most
    /// `term_length / 8`.
    pub mtu: usize,
    /// Term id of the first term (any value; term ids wrap).
    pub initial_term_id: i32,
    /// Session id written into every frame.
    pub session_id: i32,
    /// Stream id written into every frame.
    pub stream_id: i32,
    /// Page size the file is rounded to: a power of two in `[4 KiB, 1 GiB]`.
    pub page_size: usize,
    /// Touch every page when creating a file, so the hot path takes no page faults.
    pub pre_touch: bool,
}

impl LogConfig {
    /// A configuration with `term_length` and `mtu`, term and session ids 0, stream 1, 4 KiB pages.
    pub fn new(term_length: usize, mtu: usize) -> Self {
        Self { term_length, mtu, initial_term_id: 0, session_id: 0, stream_id: 1, page_size: 4096, pre_touch: false }
    }

    /// Checks every rule on the lengths.
    pub fn validate(&self) -> Result<(), LogError> {
        let t = self.term_length;
        if !t.is_power_of_two() || !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&t) {
            return Err(LogError::InvalidTermLength(t));
        }
        let p = self.page_size;
        if !p.is_power_of_two() || !(PAGE_MIN_SIZE..=PAGE_MAX_SIZE).contains(&p) {
            return Err(LogError::InvalidPageSize(p));
        }
        let m = self.mtu;
        let rule = if m <= DATA_HEADER_LENGTH {
            Some("must be more than the 32-byte data header")
        } else if m % 32 != 0 {
            Some("must be a multiple of 32")
        } else if m > MTU_MAX_LENGTH {
            Some("must be at most 65504, the largest UDP payload rounded down to 32")
        } else if m > t / 8 {
            Some("must be at most term_length / 8, the largest message")
        } else {
            None
        };
        match rule {
            Some(rule) => Err(LogError::InvalidMtu { mtu: m, term_length: t, rule }),
            None => Ok(()),
        }
    }
}

/// Why a log could not be created, opened or used.
#[derive(Debug)]
pub enum LogError {
    /// The term length is not a power of two in `[64 KiB, 1 GiB]`.
    InvalidTermLength(usize),
    /// The page size is not a power of two in `[4 KiB, 1 GiB]`.
    InvalidPageSize(usize),
    /// The MTU breaks `rule`.
    InvalidMtu {
        /// The MTU given.
        mtu: usize,
        /// The term length it was checked against.
        term_length: usize,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// Mapping or creating the file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The error of the system.
        source: std::io::Error,
    },
    /// The file is not a complete quorumcast log.
    NotALog {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Every consumer slot of the log is taken.
    NoFreeConsumerSlot,
    /// A start position that is negative, not a multiple of the frame alignment, or too far.
    InvalidStartPosition(i64),
    /// An appender of this log is alive in this process already.
    AppenderInUse,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidTermLength(t) => write!(
                f,
                "term length {t} must be a power of two between {TERM_MIN_LENGTH} (64 KiB) and {TERM_MAX_LENGTH} (1 GiB)"
            ),
            Self::InvalidPageSize(p) => {
                write!(f, "page size {p} must be a power of two between {PAGE_MIN_SIZE} and {PAGE_MAX_SIZE}")
            }
            Self::InvalidMtu { mtu, term_length, rule } => {
                write!(f, "MTU {mtu} {rule} (term length {term_length}, largest message {})", term_length / 8)
            }
            Self::Io { path, source } => write!(f, "log file {}: {source}", path.display()),
            Self::NotALog { path, reason } => write!(f, "{} is not a quorumcast log: {reason}", path.display()),
            Self::NoFreeConsumerSlot => {
                write!(f, "all {CONSUMER_SLOT_COUNT} consumer slots of the log are taken; close a subscriber first")
            }
            Self::InvalidStartPosition(p) => {
                write!(f, "start position {p} must be a non-negative multiple of {FRAME_ALIGNMENT}, within 2^31 terms")
            }
            Self::AppenderInUse => write!(f, "the log has an appender already; drop it before taking another"),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A mapped log: three terms and the metadata.
///
/// Cheap to share by reference; the views it hands out keep the mapping alive on their own. A clone maps
/// the same log and shares its one appender.
#[derive(Clone, Debug)]
pub struct LogBuffer {
    terms: [AtomicBuffer; PARTITION_COUNT],
    metadata: AtomicBuffer,
    config: LogConfig,
    appender_taken: Arc<AtomicBool>,
}

impl LogBuffer {
    /// Creates (or truncates) the log file at `path` laid out by `config`.
    pub fn create(path: &Path, config: LogConfig) -> Result<Self, LogError> {
        Self::create_at(path, config, 0)
    }

    /// As [`create`](Self::create), for a log whose first byte is at `start_position` rather than 0: the
    /// appender, and a consumer that joins, start there, in the term and at the offset that position falls
    /// in. A log continued by another publisher (a new leader continuing the cluster's one log at its own
    /// append position) starts so. `start_position` must be a non-negative multiple of the frame alignment.
    pub fn create_at(path: &Path, config: LogConfig, start_position: i64) -> Result<Self, LogError> {
        config.validate()?;
        check_start(&config, start_position)?;
        let length = log_length(config.term_length, config.page_size);
        let region = Region::create_file(path, length, config.pre_touch).map_err(|e| io_error(path, e))?;
        Ok(Self::initialise(region, config, start_position))
    }

    /// As [`create_at`](Self::create_at), in a region made beforehand (a file reserved and pre-touched off
    /// the thread that needs the log): `region` must be fresh (all zeros) and exactly
    /// the log's length.
    pub fn create_in(region: Arc<Region>, config: LogConfig, start_position: i64) -> Result<Self, LogError> {
        config.validate()?;
        check_start(&config, start_position)?;
        let length = log_length(config.term_length, config.page_size);
        if region.len() != length {
            return Err(LogError::NotALog {
                path: Path::new("<region>").to_path_buf(),
                reason: format!("{} bytes made for a log of {length}", region.len()),
            });
        }
        Ok(Self::initialise(region, config, start_position))
    }

    /// Creates a log in anonymous memory, for use within one process (tests, in-process IPC).
    pub fn create_anonymous(config: LogConfig) -> Result<Self, LogError> {
        Self::create_anonymous_at(config, 0)
    }

    /// As [`create_anonymous`](Self::create_anonymous), starting at `start_position` (see
    /// [`create_at`](Self::create_at)).
    pub fn create_anonymous_at(config: LogConfig, start_position: i64) -> Result<Self, LogError> {
        config.validate()?;
        check_start(&config, start_position)?;
        let length = log_length(config.term_length, config.page_size);
        let region = Region::anonymous(length).map_err(|e| io_error(Path::new("<anonymous>"), e))?;
        Ok(Self::initialise(region, config, start_position))
    }

    /// Maps an existing log created by another process and reads its configuration from the metadata.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let region = Region::open_file(path).map_err(|e| io_error(path, e))?;
        let not_a_log = |reason: String| LogError::NotALog { path: path.to_path_buf(), reason };
        let length = region.len();
        if length < PARTITION_COUNT * TERM_MIN_LENGTH + LOG_METADATA_LENGTH {
            return Err(not_a_log(format!("{length} bytes is shorter than the smallest log")));
        }
        let whole = AtomicBuffer::new(region);
        let metadata = whole.view(length - LOG_METADATA_LENGTH, LOG_METADATA_LENGTH);
        if metadata.get_i32_acquire(MAGIC_OFFSET) != LOG_MAGIC {
            return Err(not_a_log("no magic number: not a log, or still being created".into()));
        }
        let meta: LogMetadata = bytemuck::pod_read_unaligned(metadata.bytes(0, LOG_METADATA_LENGTH));
        if meta.layout_version != LOG_LAYOUT_VERSION {
            return Err(not_a_log(format!("layout version {} is not {LOG_LAYOUT_VERSION}", meta.layout_version)));
        }
        let config = LogConfig {
            term_length: meta.term_length as usize,
            mtu: meta.mtu as usize,
            initial_term_id: meta.initial_term_id,
            session_id: meta.session_id,
            stream_id: meta.stream_id,
            page_size: meta.page_size as usize,
            pre_touch: false,
        };
        config.validate().map_err(|e| not_a_log(format!("its metadata is invalid: {e}")))?;
        if log_length(config.term_length, config.page_size) != length {
            return Err(not_a_log(format!("{length} bytes does not match its term length {}", config.term_length)));
        }
        Ok(Self::from_views(&whole, config))
    }

    /// Lays out fresh metadata with the tail at `start_position`: the active term is the one that position
    /// falls in, and the two other partitions hold (empty) the two terms before it, as after rotations.
    fn initialise(region: Arc<Region>, config: LogConfig, start_position: i64) -> Self {
        let whole = AtomicBuffer::new(region);
        let log = Self::from_views(&whole, config);
        let bits = position_bits_to_shift(config.term_length);
        let count = (start_position >> bits) as i32;
        let active_term = config.initial_term_id.wrapping_add(count);
        let offset = (start_position & (config.term_length as i64 - 1)) as u32;
        let mut tail_counters = [0i64; PARTITION_COUNT];
        for back in 0..PARTITION_COUNT as i32 {
            // Term `active - back` lives in partition `(count - back) mod 3`.
            let partition = (count - back).rem_euclid(PARTITION_COUNT as i32) as usize;
            let term_offset = if back == 0 { offset } else { 0 };
            tail_counters[partition] = pack_tail(active_term.wrapping_sub(back), term_offset);
        }
        let meta = LogMetadata {
            tail_counters,
            active_term_count: count,
            end_of_stream_position: i64::MAX,
            initial_term_id: config.initial_term_id,
            term_length: config.term_length as i32,
            mtu: config.mtu as i32,
            session_id: config.session_id,
            stream_id: config.stream_id,
            page_size: config.page_size as i32,
            layout_version: LOG_LAYOUT_VERSION,
            ..bytemuck::Zeroable::zeroed()
        };
        // Nobody else can see the memory yet except a concurrent `open`, which waits for the magic number.
        log.metadata.put_bytes(0, bytemuck::bytes_of(&meta));
        log.metadata.put_i32_release(MAGIC_OFFSET, LOG_MAGIC);
        log
    }

    fn from_views(whole: &AtomicBuffer, config: LogConfig) -> Self {
        let t = config.term_length;
        let terms = [whole.view(0, t), whole.view(t, t), whole.view(2 * t, t)];
        let metadata = whole.view(whole.len() - LOG_METADATA_LENGTH, LOG_METADATA_LENGTH);
        Self { terms, metadata, config, appender_taken: Arc::new(AtomicBool::new(false)) }
    }

    /// The configuration of the log.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Bytes per term.
    pub fn term_length(&self) -> usize {
        self.config.term_length
    }

    /// `log2(term_length)`.
    pub fn position_bits_to_shift(&self) -> u32 {
        position_bits_to_shift(self.config.term_length)
    }

    /// The term buffer of `partition` (0, 1 or 2).
    ///
    /// # Panics
    /// When `partition >= 3`.
    pub fn term(&self, partition: usize) -> &AtomicBuffer {
        &self.terms[partition]
    }

    /// The three term buffers.
    pub fn terms(&self) -> &[AtomicBuffer; PARTITION_COUNT] {
        &self.terms
    }

    /// The metadata section (see [`LogMetadata`] for its layout).
    pub(crate) fn metadata(&self) -> &AtomicBuffer {
        &self.metadata
    }

    /// The single appender of this log, resuming at its current tail.
    ///
    /// Its publication limit starts at 0: set it with [`ExclusiveAppender::set_limit`] (normally
    /// `consumer_limit()`), so that nothing is written before a consumer is there to bound it.
    pub fn appender(&self) -> Result<ExclusiveAppender, LogError> {
        if self.appender_taken.swap(true, Ordering::AcqRel) {
            return Err(LogError::AppenderInUse);
        }
        Ok(ExclusiveAppender::new(self, Arc::clone(&self.appender_taken)))
    }

    /// The position of the appender's tail as published in the metadata (what has been appended).
    pub fn producer_position(&self) -> i64 {
        loop {
            let count = self.metadata.get_i32_acquire(ACTIVE_TERM_COUNT_OFFSET);
            let raw = self.metadata.get_i64_acquire(tail_counter_offset(count as u32 as usize % PARTITION_COUNT));
            let term = tail_term_id(raw);
            if term == self.config.initial_term_id.wrapping_add(count) {
                let offset = tail_term_offset(raw, self.config.term_length);
                return position(term, offset, self.config.initial_term_id, self.position_bits_to_shift());
            }
            // The appender rotated between the two loads; read again.
            std::hint::spin_loop();
        }
    }

    /// The position at which the stream ended, if the appender has been closed.
    pub fn end_of_stream_position(&self) -> Option<i64> {
        let p = self.metadata.get_i64_acquire(END_OF_STREAM_POSITION_OFFSET);
        (p != i64::MAX).then_some(p)
    }

    /// Whether the medium has marked the publication connected.
    pub fn is_connected(&self) -> bool {
        self.metadata.get_i32_acquire(IS_CONNECTED_OFFSET) != 0
    }

    /// Marks the publication connected or not (the medium's business).
    pub fn set_connected(&self, connected: bool) {
        self.metadata.put_i32_release(IS_CONNECTED_OFFSET, connected as i32)
    }

    /// Takes a free consumer slot and publishes `position` in it. The slot is freed when the handle drops.
    pub fn register_consumer(&self, position: i64) -> Result<ConsumerPosition, LogError> {
        for index in 0..CONSUMER_SLOT_COUNT {
            let slot = consumer_slot_offset(index);
            if self.metadata.compare_and_set_i64(slot + SLOT_STATE_OFFSET, SLOT_FREE, SLOT_CLAIMED) {
                let slot = self.metadata.view(slot, std::mem::size_of::<ConsumerSlot>());
                slot.put_i64_release(SLOT_POSITION_OFFSET, position);
                slot.put_i64_release(SLOT_STATE_OFFSET, SLOT_ACTIVE);
                return Ok(ConsumerPosition { slot, index });
            }
        }
        Err(LogError::NoFreeConsumerSlot)
    }

    /// The lowest position among the active consumers, `None` when there is none.
    pub fn min_consumer_position(&self) -> Option<i64> {
        min_consumer_position(&self.metadata)
    }

    /// The publication limit the consumers allow: slowest consumer + `term_length / 2`; `None` without one.
    pub fn consumer_limit(&self) -> Option<i64> {
        consumer_limit(&self.metadata, self.config.term_length)
    }
}

fn min_consumer_position(metadata: &AtomicBuffer) -> Option<i64> {
    (0..CONSUMER_SLOT_COUNT)
        .filter_map(|index| {
            let slot = consumer_slot_offset(index);
            let active = metadata.get_i64_acquire(slot + SLOT_STATE_OFFSET) == SLOT_ACTIVE;
            active.then(|| metadata.get_i64_acquire(slot + SLOT_POSITION_OFFSET))
        })
        .min()
}

fn consumer_limit(metadata: &AtomicBuffer, term_length: usize) -> Option<i64> {
    min_consumer_position(metadata).map(|p| p + (term_length / 2) as i64)
}

/// Refuses a start position that is negative, not frame aligned, or further than an i32 of terms.
fn check_start(config: &LogConfig, start_position: i64) -> Result<(), LogError> {
    let terms = start_position >> position_bits_to_shift(config.term_length);
    if start_position < 0 || start_position % FRAME_ALIGNMENT as i64 != 0 || terms >= i32::MAX as i64 {
        return Err(LogError::InvalidStartPosition(start_position));
    }
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> LogError {
    LogError::Io { path: path.to_path_buf(), source }
}

/// A consumer's position slot in the log metadata; freed on drop.
///
/// The consumer publishes its position with [`ConsumerPosition::set`] after it has finished with every
/// byte before it; the appender never writes past the slowest such position + `term_length / 2`.
#[derive(Debug)]
pub struct ConsumerPosition {
    slot: AtomicBuffer,
    index: usize,
}

impl ConsumerPosition {
    /// Publishes `position` (release).
    #[inline]
    pub fn set(&self, position: i64) {
        self.slot.put_i64_release(SLOT_POSITION_OFFSET, position)
    }

    /// The last published position.
    #[inline]
    pub fn get(&self) -> i64 {
        self.slot.get_i64_acquire(SLOT_POSITION_OFFSET)
    }

    /// Which slot this is.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for ConsumerPosition {
    fn drop(&mut self) {
        self.slot.put_i64_release(SLOT_STATE_OFFSET, SLOT_FREE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_that_starts_at_a_position_appends_and_reads_from_there_across_terms() {
        const TERM: i64 = 65536;
        let config = LogConfig { initial_term_id: 40, session_id: 5, ..LogConfig::new(TERM as usize, 1408) };
        for start in [0, 4096, TERM - 64, TERM, 2 * TERM + 96, 5 * TERM + 1024] {
            let log = LogBuffer::create_anonymous_at(config, start).unwrap();
            assert_eq!(log.producer_position(), start, "start {start}");
            let consumer = log.register_consumer(start).unwrap();
            let mut appender = log.appender().unwrap();
            appender.refresh_limit_from_consumers();
            // 200 messages of 300 B (352 B framed): about 70 KB, past at least one term boundary.
            let mut appended = 0;
            let reader = LogReader::new(&log);
            let (mut position, mut read) = (start, Vec::new());
            while read.len() < 200 {
                while appended < 200 && appender.append(&[appended as u8; 300]).is_ok() {
                    appended += 1;
                }
                position = reader.poll(position, 64, |payload, header| {
                    assert_eq!((header.session_id, payload.len()), (5, 300));
                    read.push(payload[0]);
                });
                consumer.set(position);
                appender.refresh_limit_from_consumers();
            }
            assert_eq!(read, (0..200).map(|i| i as u8).collect::<Vec<_>>(), "start {start}");
            assert!(position > start + 200 * 352 - 1, "start {start}: read to {position}");
            assert_eq!(position, log.producer_position());
        }
        for bad in [-32, 33, TERM << 31] {
            assert!(matches!(LogBuffer::create_anonymous_at(config, bad), Err(LogError::InvalidStartPosition(_))));
        }
    }

    #[test]
    fn config_rules_name_the_value() {
        let ok = LogConfig::new(65536, 8192);
        assert!(ok.validate().is_ok());
        let e = LogConfig::new(65536 + 1, 1408).validate().unwrap_err();
        assert!(e.to_string().contains("65537") && e.to_string().contains("power of two"), "{e}");
        assert!(matches!(LogConfig::new(32768, 1408).validate(), Err(LogError::InvalidTermLength(32768))));
        assert!(LogConfig::new(2 << 30, 1408).validate().is_err());
        for (mtu, needle) in [(32, "more than"), (1400, "multiple of 32"), (16384, "term_length / 8")] {
            let e = LogConfig::new(65536, mtu).validate().unwrap_err();
            assert!(e.to_string().contains(needle) && e.to_string().contains(&mtu.to_string()), "{e}");
        }
        let e = LogConfig::new(1 << 20, 65536).validate().unwrap_err();
        assert!(e.to_string().contains("65504"), "{e}");
        assert!(LogConfig::new(1 << 20, 65504).validate().is_ok());
        let bad_page = LogConfig { page_size: 1000, ..ok };
        assert!(matches!(bad_page.validate(), Err(LogError::InvalidPageSize(1000))));
    }

    #[test]
    fn create_then_open_reads_the_config() {
        let dir = std::env::temp_dir().join(format!("qc-test-{}-log-open", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let config = LogConfig {
            initial_term_id: -3,
            session_id: 11,
            stream_id: 12,
            page_size: 1 << 21,
            pre_touch: true,
            ..LogConfig::new(65536, 1408)
        };
        let log = LogBuffer::create(&path, config).unwrap();
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        let position = appender.append(b"hello").unwrap();
        let opened = LogBuffer::open(&path).unwrap();
        assert_eq!(opened.config(), &LogConfig { pre_touch: false, ..config });
        assert_eq!(opened.producer_position(), position);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 21);
        std::fs::write(&path, vec![0u8; 300_000]).unwrap();
        assert!(matches!(LogBuffer::open(&path), Err(LogError::NotALog { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_appender_at_a_time() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        let a = log.appender().unwrap();
        assert!(matches!(log.appender(), Err(LogError::AppenderInUse)));
        drop(a);
        assert!(log.appender().is_ok());
    }

    #[test]
    fn consumer_slots_bound_the_limit() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        assert_eq!(log.consumer_limit(), None);
        let a = log.register_consumer(1000).unwrap();
        let b = log.register_consumer(500).unwrap();
        assert_eq!(log.consumer_limit(), Some(500 + 32768));
        b.set(2000);
        assert_eq!(log.min_consumer_position(), Some(1000));
        drop(a);
        assert_eq!(log.min_consumer_position(), Some(2000));
        let rest: Vec<_> = (1..CONSUMER_SLOT_COUNT).map(|_| log.register_consumer(0).unwrap()).collect();
        assert!(matches!(log.register_consumer(0), Err(LogError::NoFreeConsumerSlot)));
        drop(rest);
    }
}
