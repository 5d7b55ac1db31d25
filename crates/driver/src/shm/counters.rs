//! Labelled 64-bit counters in a shared-memory file, readable by other processes while a node runs.
//!
//! # The counters file
//!
//! A node keeps its counters in `<node dir>/counters.dat` ([`COUNTERS_FILE_NAME`]), laid out as
//! (all little-endian, every offset a multiple of 128):
//!
//! ```text
//! 0                      header: CountersHeader (128 bytes)
//! 128                    metadata: capacity x CounterMetadata (128 bytes each)
//! 128 + 128 x capacity   values: capacity x one i64 at the start of its own 128-byte line
//! ```
//!
//! Publication protocol (one writer, the [`CountersManager`]; any number of readers):
//!
//! - the header's fields are written first and its `magic` last with a release store, so a reader that
//!   loads a valid magic with acquire sees a complete header;
//! - a counter's record gets its type, owner, label and length first and its `state` last with a release
//!   store to [`RECORD_ALLOCATED`]; the header's `high_water` is then raised (release). A reader loads the
//!   state with acquire and reads the label only of allocated records, so it never sees a half-written one;
//! - a record is never rewritten once allocated: [`CountersManager::free`] only marks it
//!   [`RECORD_FREED`], and its id is not reused during the run, so a reader cannot see a label change
//!   under it;
//! - values follow [`Counter`]'s rules: one writer, release stores, acquire loads.
//!
//! [`CountersReader`] opens the file from another process (for `qc-stat`) and checks its magic, version
//! and length, reporting a foreign, uninitialised or truncated file as a typed [`CountersError`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytemuck::{Pod, Zeroable};

use crate::shm::buffer::{AtomicBuffer, Region, CACHE_LINE_LENGTH};

/// A handle to one 64-bit counter value, alone on its cache line.
///
/// A counter has one writer (the agent that owns it) unless documented otherwise; readers in any
/// process load it with acquire ordering. Updates are plain load + release store for the single writer,
/// which costs no locked instruction on the hot path; [`Counter::get_and_add`] is the atomic form for
/// counters that several threads update.
#[derive(Clone)]
pub struct Counter {
    value: AtomicBuffer,
    id: i32,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

impl Counter {
    /// A counter over the first 8 bytes of `value` (which must be 8-byte aligned), with identity `id`.
    pub fn new(value: AtomicBuffer, id: i32) -> Self {
        assert!(value.len() >= 8, "a counter needs 8 bytes");
        Self { value, id }
    }

    /// A counter in private memory, for agents run without a counters file (tests, invoker mode).
    pub fn detached() -> Self {
        Self::new(AtomicBuffer::anonymous(8).expect("map 8 bytes"), -1)
    }

    /// The counter's identity in its file (-1 when detached).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Current value (acquire).
    #[inline]
    pub fn get(&self) -> i64 {
        self.value.get_i64_acquire(0)
    }

    /// Sets the value (release). Single writer.
    #[inline]
    pub fn set(&self, value: i64) {
        self.value.put_i64_release(0, value)
    }

    /// Adds `delta` (single writer: load + release store).
    #[inline]
    pub fn add(&self, delta: i64) {
        self.value.put_i64_release(0, self.value.get_i64(0) + delta)
    }

    /// Adds one (single writer).
    #[inline]
    pub fn increment(&self) {
        self.add(1)
    }

    /// Raises the value to `value` if it is higher (single writer).
    #[inline]
    pub fn set_max(&self, value: i64) {
        self.value.put_i64_max(0, value)
    }

    /// Atomically adds `delta` and returns the previous value, for counters with several writers.
    #[inline]
    pub fn get_and_add(&self, delta: i64) -> i64 {
        self.value.get_and_add_i64(0, delta)
    }
}

/// Name of the counters file inside a node directory.
pub const COUNTERS_FILE_NAME: &str = "counters.dat";
/// First 8 bytes of every counters file: `"QCCNTRS\0"` read as a little-endian u64.
pub const COUNTERS_MAGIC: u64 = u64::from_le_bytes(*b"QCCNTRS\0");
/// Layout version of the counters file; readers refuse any other.
pub const COUNTERS_VERSION: u32 = 1;
/// Length of the header at the start of the file.
pub const HEADER_LENGTH: usize = 128;
/// Length of one metadata record.
pub const METADATA_RECORD_LENGTH: usize = 128;
/// Length of one value record: each value has a cache line to itself, so writers never false-share.
pub const VALUE_RECORD_LENGTH: usize = CACHE_LINE_LENGTH;
/// Longest label in UTF-8 bytes.
pub const MAX_LABEL_LENGTH: usize = 96;
/// Most counters a file may hold (a 256 MiB file).
pub const MAX_CAPACITY: usize = 1 << 20;

/// Record state: never allocated.
pub const RECORD_UNUSED: i32 = 0;
/// Record state: allocated, its label and type are complete and will not change.
pub const RECORD_ALLOCATED: i32 = 1;
/// Record state: freed; its id is not reused during the run.
pub const RECORD_FREED: i32 = -1;

/// Type id of system counters (bytes sent, NAKs, errors, ... as in Aeron's system counters).
pub const TYPE_SYSTEM: i32 = 0;
/// Type id of an agent's duty-cycle count.
pub const TYPE_AGENT_DUTY_CYCLES: i32 = 1;
/// Type id of an agent's total work count.
pub const TYPE_AGENT_WORK: i32 = 2;
/// Type id of an agent's count of idle cycles (duty cycles that did no work).
pub const TYPE_AGENT_IDLE_CYCLES: i32 = 3;
/// Type id of an agent's longest duty cycle in nanoseconds.
pub const TYPE_AGENT_MAX_CYCLE_NS: i32 = 4;
/// Type id of a publisher's position (`pub-pos`).
pub const TYPE_PUBLISHER_POSITION: i32 = 10;
/// Type id of a publisher's limit (`pub-lmt`).
pub const TYPE_PUBLISHER_LIMIT: i32 = 11;
/// Type id of a sender's position (`snd-pos`).
pub const TYPE_SENDER_POSITION: i32 = 12;
/// Type id of a sender's flow-control limit (`snd-lmt`).
pub const TYPE_SENDER_LIMIT: i32 = 13;
/// Type id of a sender's back-pressure event count (`snd-bpe`).
pub const TYPE_SENDER_BACK_PRESSURE_EVENTS: i32 = 14;
/// Type id of a receiver's high-water mark (`rcv-hwm`).
pub const TYPE_RECEIVER_HWM: i32 = 15;
/// Type id of a receiver's position (`rcv-pos`).
pub const TYPE_RECEIVER_POSITION: i32 = 16;
/// Type id of a subscriber's position (`sub-pos`).
pub const TYPE_SUBSCRIBER_POSITION: i32 = 17;
/// Type id of a cluster's quorum commit position.
pub const TYPE_COMMIT_POSITION: i32 = 20;
/// First type id free for applications; quorumcast defines none at or above it.
pub const TYPE_USER_MIN: i32 = 1000;

/// Length of a counters file holding `capacity` counters.
pub const fn counters_file_length(capacity: usize) -> usize {
    HEADER_LENGTH + capacity * (METADATA_RECORD_LENGTH + VALUE_RECORD_LENGTH)
}

/// The header at offset 0 of a counters file.
///
/// Every field except `high_water` is written once before `magic` is published and never changes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CountersHeader {
    /// [`COUNTERS_MAGIC`], stored last with release.
    pub magic: u64,
    /// [`COUNTERS_VERSION`].
    pub version: u32,
    /// Number of metadata and value records.
    pub capacity: u32,
    /// Process id of the writer.
    pub pid: u32,
    /// Number of ids ever allocated: records at ids below it are allocated or freed (release store).
    pub high_water: i32,
    /// When the writer created the file, in milliseconds since the Unix epoch.
    pub start_time_ms: i64,
    /// Offset of the metadata section ([`HEADER_LENGTH`]).
    pub metadata_offset: u64,
    /// Offset of the values section.
    pub values_offset: u64,
    /// Length of the whole file ([`counters_file_length`] of the capacity).
    pub file_length: u64,
    /// Zero.
    pub reserved: [u64; 9],
}
const _: () = assert!(std::mem::size_of::<CountersHeader>() == HEADER_LENGTH);

/// One metadata record, describing the counter of the same id.
///
/// `state` is published last (release); the other fields never change once it is [`RECORD_ALLOCATED`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CounterMetadata {
    /// [`RECORD_UNUSED`], [`RECORD_ALLOCATED`] or [`RECORD_FREED`].
    pub state: i32,
    /// What the counter counts (one of the `TYPE_*` constants, or an application's id).
    pub type_id: i32,
    /// Id of the object the counter belongs to (a stream, a session), 0 when none.
    pub owner_id: i64,
    /// Length of the label in bytes, at most [`MAX_LABEL_LENGTH`].
    pub label_length: i32,
    /// Zero.
    pub reserved0: i32,
    /// Zero.
    pub reserved1: i64,
    /// UTF-8 label, `label_length` bytes used.
    pub label: [u8; MAX_LABEL_LENGTH],
}
const _: () = assert!(std::mem::size_of::<CounterMetadata>() == METADATA_RECORD_LENGTH);

const MAGIC_OFFSET: usize = std::mem::offset_of!(CountersHeader, magic);
const VERSION_OFFSET: usize = std::mem::offset_of!(CountersHeader, version);
const CAPACITY_OFFSET: usize = std::mem::offset_of!(CountersHeader, capacity);
const PID_OFFSET: usize = std::mem::offset_of!(CountersHeader, pid);
const HIGH_WATER_OFFSET: usize = std::mem::offset_of!(CountersHeader, high_water);
const START_TIME_OFFSET: usize = std::mem::offset_of!(CountersHeader, start_time_ms);
const METADATA_OFFSET_OFFSET: usize = std::mem::offset_of!(CountersHeader, metadata_offset);
const VALUES_OFFSET_OFFSET: usize = std::mem::offset_of!(CountersHeader, values_offset);
const FILE_LENGTH_OFFSET: usize = std::mem::offset_of!(CountersHeader, file_length);

const STATE_OFFSET: usize = std::mem::offset_of!(CounterMetadata, state);
const TYPE_ID_OFFSET: usize = std::mem::offset_of!(CounterMetadata, type_id);
const OWNER_ID_OFFSET: usize = std::mem::offset_of!(CounterMetadata, owner_id);
const LABEL_LENGTH_OFFSET: usize = std::mem::offset_of!(CounterMetadata, label_length);
const LABEL_OFFSET: usize = std::mem::offset_of!(CounterMetadata, label);

/// Why a counter could not be allocated or a counters file opened.
#[derive(Debug)]
pub enum CountersError {
    /// Every record is taken.
    Full {
        /// The file's capacity.
        capacity: usize,
    },
    /// The label is longer than [`MAX_LABEL_LENGTH`] bytes.
    LabelTooLong {
        /// Its length in bytes.
        length: usize,
    },
    /// A capacity of 0 or above [`MAX_CAPACITY`].
    InvalidCapacity {
        /// The capacity asked for.
        capacity: usize,
    },
    /// `free` of a counter that is not allocated in this file.
    NotAllocated {
        /// The counter's id.
        id: i32,
    },
    /// A file operation failed.
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is shorter than its header says, or than a header.
    Truncated {
        /// The file.
        path: PathBuf,
        /// Its length.
        length: usize,
        /// The length it needs.
        needed: usize,
    },
    /// The file is all zeros at the magic: a node is creating it right now, or it died doing so.
    NotInitialised {
        /// The file.
        path: PathBuf,
    },
    /// The file does not start with [`COUNTERS_MAGIC`]: it is not a counters file.
    Foreign {
        /// The file.
        path: PathBuf,
        /// The first 8 bytes found.
        magic: u64,
    },
    /// A counters file of another layout version.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The header's sizes and offsets do not describe a valid layout.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
}

impl fmt::Display for CountersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { capacity } => {
                write!(f, "all {capacity} counters are allocated: create the counters file with a larger capacity")
            }
            Self::LabelTooLong { length } => {
                write!(f, "a counter label of {length} bytes is longer than {MAX_LABEL_LENGTH}: shorten it")
            }
            Self::InvalidCapacity { capacity } => {
                write!(f, "a counters capacity of {capacity} is invalid: use 1 to {MAX_CAPACITY}")
            }
            Self::NotAllocated { id } => write!(f, "counter {id} is not allocated in this counters file"),
            Self::Io { action, path, source } => write!(f, "cannot {action} {}: {source}", path.display()),
            Self::Truncated { path, length, needed } => write!(
                f,
                "{} is truncated ({length} bytes, its layout needs {needed}): it is not a complete counters file",
                path.display()
            ),
            Self::NotInitialised { path } => write!(
                f,
                "{} is not initialised yet: the node may be starting (retry), or died while creating it",
                path.display()
            ),
            Self::Foreign { path, magic } => {
                write!(f, "{} is not a quorumcast counters file (magic {magic:#018x})", path.display())
            }
            Self::UnsupportedVersion { path, found } => write!(
                f,
                "{} has counters layout version {found}, this build reads version {COUNTERS_VERSION}: \
                 use the qc-stat of the node's build",
                path.display()
            ),
            Self::Corrupt { path, reason } => write!(f, "{} is corrupt: {reason}", path.display()),
        }
    }
}

impl std::error::Error for CountersError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Offset of the metadata record of counter `id`.
const fn metadata_offset(id: usize) -> usize {
    HEADER_LENGTH + id * METADATA_RECORD_LENGTH
}

/// Offset of the value of counter `id` in a file of `capacity` counters.
const fn value_offset(capacity: usize, id: usize) -> usize {
    HEADER_LENGTH + capacity * METADATA_RECORD_LENGTH + id * VALUE_RECORD_LENGTH
}

/// The sections of a mapped counters file (shared by the manager and readers).
///
/// Invariant: `buffer` is at least [`counters_file_length`]`(capacity)` bytes long.
#[derive(Clone, Debug)]
struct CountersFile {
    buffer: AtomicBuffer,
    capacity: usize,
}

impl CountersFile {
    fn metadata_offset(&self, id: usize) -> usize {
        metadata_offset(id)
    }

    fn value_offset(&self, id: usize) -> usize {
        value_offset(self.capacity, id)
    }

    fn state(&self, id: usize) -> i32 {
        self.buffer.get_i32_acquire(self.metadata_offset(id) + STATE_OFFSET)
    }

    fn value(&self, id: usize) -> i64 {
        self.buffer.get_i64_acquire(self.value_offset(id))
    }

    /// Ids below this may be allocated (clamped to the capacity, whatever the file says).
    fn high_water(&self) -> usize {
        (self.buffer.get_i32_acquire(HIGH_WATER_OFFSET).max(0) as usize).min(self.capacity)
    }

    /// The header; every field but `high_water` is immutable once the magic is published.
    fn header(&self) -> CountersHeader {
        let b = &self.buffer;
        CountersHeader {
            magic: b.get_i64_acquire(MAGIC_OFFSET) as u64,
            version: b.get_i32(VERSION_OFFSET) as u32,
            capacity: b.get_i32(CAPACITY_OFFSET) as u32,
            pid: b.get_i32(PID_OFFSET) as u32,
            high_water: b.get_i32_acquire(HIGH_WATER_OFFSET),
            start_time_ms: b.get_i64(START_TIME_OFFSET),
            metadata_offset: b.get_i64(METADATA_OFFSET_OFFSET) as u64,
            values_offset: b.get_i64(VALUES_OFFSET_OFFSET) as u64,
            file_length: b.get_i64(FILE_LENGTH_OFFSET) as u64,
            reserved: [0; 9],
        }
    }
}

/// Allocates counters in a counters file it creates; the single writer of the file's metadata.
///
/// Allocation is meant for start-up, from one thread; it takes an internal mutex so that a manager shared
/// between threads (in an `Arc`) stays correct, and is not a hot path. Each returned [`Counter`] then has
/// its own single writer.
#[derive(Debug)]
pub struct CountersManager {
    file: CountersFile,
    /// Next id to allocate; the mutex serialises allocation and freeing.
    next_id: Mutex<usize>,
    path: Option<PathBuf>,
}

impl CountersManager {
    /// Creates the counters file at `path` for `capacity` counters, pre-touched, and publishes its
    /// header with this process's pid and the current time.
    ///
    /// An existing file at `path` is unlinked first rather than truncated, so a reader that still maps
    /// it keeps reading the old values instead of faulting on a shrunken file.
    pub fn create(path: impl AsRef<Path>, capacity: usize) -> Result<Self, CountersError> {
        let path = path.as_ref();
        check_capacity(capacity)?;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(CountersError::Io {
                    action: "replace the counters file",
                    path: path.to_path_buf(),
                    source: e,
                })
            }
            _ => {}
        }
        let region = Region::create_file(path, counters_file_length(capacity), true).map_err(|source| {
            CountersError::Io { action: "create the counters file", path: path.to_path_buf(), source }
        })?;
        Ok(Self::init(AtomicBuffer::new(region), capacity, Some(path.to_path_buf())))
    }

    /// A counters area in private memory, for a node run without a node directory (tests, embedding).
    pub fn anonymous(capacity: usize) -> Result<Self, CountersError> {
        check_capacity(capacity)?;
        let buffer = AtomicBuffer::anonymous(counters_file_length(capacity)).map_err(|source| CountersError::Io {
            action: "map anonymous memory for",
            path: PathBuf::from("counters"),
            source,
        })?;
        Ok(Self::init(buffer, capacity, None))
    }

    /// Writes the header into zeroed `buffer`, magic last.
    fn init(buffer: AtomicBuffer, capacity: usize, path: Option<PathBuf>) -> Self {
        let file = CountersFile { buffer, capacity };
        let b = &file.buffer;
        let start_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        b.put_i32(VERSION_OFFSET, COUNTERS_VERSION as i32);
        b.put_i32(CAPACITY_OFFSET, capacity as i32);
        b.put_i32(PID_OFFSET, std::process::id() as i32);
        b.put_i32(HIGH_WATER_OFFSET, 0);
        b.put_i64(START_TIME_OFFSET, start_ms);
        b.put_i64(METADATA_OFFSET_OFFSET, file.metadata_offset(0) as i64);
        b.put_i64(VALUES_OFFSET_OFFSET, file.value_offset(0) as i64);
        b.put_i64(FILE_LENGTH_OFFSET, counters_file_length(capacity) as i64);
        b.put_i64_release(MAGIC_OFFSET, COUNTERS_MAGIC as i64);
        Self { file, next_id: Mutex::new(0), path }
    }

    /// Allocates a counter labelled `label` of type `type_id`, with no owner; its value starts at 0.
    pub fn allocate(&self, label: &str, type_id: i32) -> Result<Counter, CountersError> {
        self.allocate_owned(label, type_id, 0)
    }

    /// Allocates a counter as [`CountersManager::allocate`] does, recording `owner_id` (a stream or
    /// session id) in its metadata.
    pub fn allocate_owned(&self, label: &str, type_id: i32, owner_id: i64) -> Result<Counter, CountersError> {
        if label.len() > MAX_LABEL_LENGTH {
            return Err(CountersError::LabelTooLong { length: label.len() });
        }
        let mut next_id = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
        let id = *next_id;
        if id >= self.file.capacity {
            return Err(CountersError::Full { capacity: self.file.capacity });
        }
        let b = &self.file.buffer;
        let record = self.file.metadata_offset(id);
        b.put_i32(record + TYPE_ID_OFFSET, type_id);
        b.put_i64(record + OWNER_ID_OFFSET, owner_id);
        b.put_bytes(record + LABEL_OFFSET, label.as_bytes());
        b.put_i32(record + LABEL_LENGTH_OFFSET, label.len() as i32);
        b.put_i64_release(self.file.value_offset(id), 0);
        b.put_i32_release(record + STATE_OFFSET, RECORD_ALLOCATED);
        *next_id = id + 1;
        b.put_i32_release(HIGH_WATER_OFFSET, *next_id as i32);
        Ok(Counter::new(b.view(self.file.value_offset(id), VALUE_RECORD_LENGTH), id as i32))
    }

    /// Marks `counter`'s record freed, so readers stop listing it. The id is not reused in this run
    /// (which keeps every allocated record immutable for readers); its value line is left as it was.
    pub fn free(&self, counter: Counter) -> Result<(), CountersError> {
        let _guard = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
        let id = counter.id();
        let index = usize::try_from(id).map_err(|_| CountersError::NotAllocated { id })?;
        let same_line = index < self.file.capacity
            && std::ptr::eq(
                counter.value.as_ptr(),
                self.file.buffer.as_ptr().wrapping_add(self.file.value_offset(index)),
            );
        if !same_line || self.file.state(index) != RECORD_ALLOCATED {
            return Err(CountersError::NotAllocated { id });
        }
        self.file.buffer.put_i32_release(self.file.metadata_offset(index) + STATE_OFFSET, RECORD_FREED);
        Ok(())
    }

    /// Number of counters the file holds.
    pub fn capacity(&self) -> usize {
        self.file.capacity
    }

    /// Number of ids allocated so far (freed ones included).
    pub fn allocated(&self) -> usize {
        self.file.high_water()
    }

    /// The file's path (None for an anonymous manager).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A reader of this manager's counters, in this process.
    pub fn reader(&self) -> CountersReader {
        CountersReader { file: self.file.clone(), path: self.path.clone() }
    }
}

fn check_capacity(capacity: usize) -> Result<(), CountersError> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(CountersError::InvalidCapacity { capacity });
    }
    Ok(())
}

/// One counter as read at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Its id.
    pub id: i32,
    /// Its type id.
    pub type_id: i32,
    /// Its owner id (0 when none).
    pub owner_id: i64,
    /// Its label.
    pub label: String,
    /// Its value.
    pub value: i64,
}

/// Reads the counters of a counters file, typically from another process (`qc-stat`); never writes.
///
/// Lists only records in state [`RECORD_ALLOCATED`] (loaded with acquire), whose labels are complete.
#[derive(Clone, Debug)]
pub struct CountersReader {
    file: CountersFile,
    path: Option<PathBuf>,
}

impl CountersReader {
    /// Maps the counters file at `path` and checks its magic, version and layout.
    ///
    /// The mapping is shared read-write (the only kind [`Region`] makes) but the reader never writes.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CountersError> {
        let path = path.as_ref();
        let io = |action| move |source| CountersError::Io { action, path: path.to_path_buf(), source };
        let length = std::fs::metadata(path).map_err(io("open the counters file"))?.len() as usize;
        if length < HEADER_LENGTH {
            return Err(CountersError::Truncated { path: path.to_path_buf(), length, needed: HEADER_LENGTH });
        }
        let region = Region::open_file(path).map_err(io("map the counters file"))?;
        let buffer = AtomicBuffer::new(region);
        let header = CountersFile { buffer: buffer.clone(), capacity: 0 }.header();
        let capacity = validate(path, &header, buffer.len())?;
        Ok(Self { file: CountersFile { buffer, capacity }, path: Some(path.to_path_buf()) })
    }

    /// The file's header (`high_water` as of now).
    pub fn header(&self) -> CountersHeader {
        self.file.header()
    }

    /// Number of records in the file.
    pub fn capacity(&self) -> usize {
        self.file.capacity
    }

    /// Process id of the file's writer.
    pub fn pid(&self) -> u32 {
        self.header().pid
    }

    /// When the writer created the file.
    pub fn start_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.header().start_time_ms.max(0) as u64)
    }

    /// The file's path (None for a reader of an anonymous manager).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Calls `f(id, type_id, label, value)` for every allocated counter, in id order.
    ///
    /// Allocates nothing when labels are valid UTF-8 (a foreign writer's invalid bytes are replaced).
    pub fn for_each(&self, mut f: impl FnMut(i32, i32, &str, i64)) {
        self.for_each_record(|id, type_id, _, label, value| f(id, type_id, label, value));
    }

    /// The value of the first allocated counter labelled `label`.
    pub fn find(&self, label: &str) -> Option<i64> {
        let mut found = None;
        self.for_each(|_, _, l, value| {
            if found.is_none() && l == label {
                found = Some(value);
            }
        });
        found
    }

    /// The value of counter `id` if it is allocated.
    pub fn value(&self, id: i32) -> Option<i64> {
        let index = usize::try_from(id).ok().filter(|&i| i < self.file.high_water())?;
        (self.file.state(index) == RECORD_ALLOCATED).then(|| self.file.value(index))
    }

    /// Every allocated counter, in id order.
    pub fn snapshot(&self) -> Vec<CounterSnapshot> {
        let mut all = Vec::new();
        self.for_each_record(|id, type_id, owner_id, label, value| {
            all.push(CounterSnapshot { id, type_id, owner_id, label: label.to_owned(), value })
        });
        all
    }

    fn for_each_record(&self, mut f: impl FnMut(i32, i32, i64, &str, i64)) {
        let b = &self.file.buffer;
        let mut label = [0u8; MAX_LABEL_LENGTH];
        for id in 0..self.file.high_water() {
            if self.file.state(id) != RECORD_ALLOCATED {
                continue;
            }
            let record = self.file.metadata_offset(id);
            let length = (b.get_i32(record + LABEL_LENGTH_OFFSET).max(0) as usize).min(MAX_LABEL_LENGTH);
            b.get_bytes(record + LABEL_OFFSET, &mut label[..length]);
            let text = String::from_utf8_lossy(&label[..length]);
            let type_id = b.get_i32(record + TYPE_ID_OFFSET);
            let owner_id = b.get_i64(record + OWNER_ID_OFFSET);
            f(id as i32, type_id, owner_id, &text, self.file.value(id));
        }
    }
}

/// Checks a header read from a file of `length` bytes; returns its capacity.
fn validate(path: &Path, header: &CountersHeader, length: usize) -> Result<usize, CountersError> {
    let path = path.to_path_buf();
    match header.magic {
        0 => return Err(CountersError::NotInitialised { path }),
        COUNTERS_MAGIC => {}
        magic => return Err(CountersError::Foreign { path, magic }),
    }
    if header.version != COUNTERS_VERSION {
        return Err(CountersError::UnsupportedVersion { path, found: header.version });
    }
    let capacity = header.capacity as usize;
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(CountersError::Corrupt { path, reason: "its capacity is 0 or too large" });
    }
    let needed = counters_file_length(capacity);
    let offsets_match = header.metadata_offset == metadata_offset(0) as u64
        && header.values_offset == value_offset(capacity, 0) as u64
        && header.file_length == needed as u64;
    if !offsets_match {
        return Err(CountersError::Corrupt { path, reason: "its section offsets do not match its capacity" });
    }
    if length < needed {
        return Err(CountersError::Truncated { path, length, needed });
    }
    Ok(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let path = std::env::temp_dir().join(format!("qc-test-{}-counters-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn layout_is_what_the_docs_say() {
        assert_eq!(counters_file_length(2), 128 + 2 * 128 + 2 * 128);
        assert_eq!(value_offset(4, 1), 128 + 4 * 128 + 128);
        assert_eq!(HIGH_WATER_OFFSET, 20);
        assert_eq!(LABEL_OFFSET + MAX_LABEL_LENGTH, METADATA_RECORD_LENGTH);
    }

    #[test]
    fn allocates_labelled_counters_in_id_order() {
        let manager = CountersManager::anonymous(8).unwrap();
        let a = manager.allocate("bytes sent", TYPE_SYSTEM).unwrap();
        let b = manager.allocate_owned("snd-pos: stream 7 ünïcödé", TYPE_SENDER_POSITION, 7).unwrap();
        assert_eq!((a.id(), b.id()), (0, 1));
        a.add(40);
        b.set(-5);
        let reader = manager.reader();
        let all = reader.snapshot();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], CounterSnapshot { id: 0, type_id: 0, owner_id: 0, label: "bytes sent".into(), value: 40 });
        assert_eq!(all[1].label, "snd-pos: stream 7 ünïcödé");
        assert_eq!((all[1].type_id, all[1].owner_id, all[1].value), (TYPE_SENDER_POSITION, 7, -5));
        assert_eq!(reader.find("bytes sent"), Some(40));
        assert_eq!(reader.find("bytes"), None);
        assert_eq!(reader.value(1), Some(-5));
        assert_eq!(reader.value(2), None);
        assert_eq!(manager.allocated(), 2);
    }

    #[test]
    fn values_sit_on_their_own_cache_lines() {
        let manager = CountersManager::anonymous(4).unwrap();
        let a = manager.allocate("a", 0).unwrap();
        let b = manager.allocate("b", 0).unwrap();
        let distance = b.value.as_ptr() as usize - a.value.as_ptr() as usize;
        assert_eq!(distance, CACHE_LINE_LENGTH);
        assert_eq!(a.value.as_ptr() as usize % CACHE_LINE_LENGTH, 0);
    }

    #[test]
    fn full_and_label_too_long_are_errors() {
        let manager = CountersManager::anonymous(2).unwrap();
        let longest = "x".repeat(MAX_LABEL_LENGTH);
        assert!(manager.allocate(&longest, 0).is_ok());
        let error = manager.allocate(&"é".repeat(MAX_LABEL_LENGTH / 2 + 1), 0).unwrap_err();
        assert!(matches!(error, CountersError::LabelTooLong { length } if length == MAX_LABEL_LENGTH + 2));
        assert!(manager.allocate("", 0).is_ok());
        let error = manager.allocate("third", 0).unwrap_err();
        assert!(matches!(error, CountersError::Full { capacity: 2 }), "{error}");
        assert!(error.to_string().contains("larger capacity"));
        assert_eq!(manager.reader().find(&longest), Some(0));
        assert!(matches!(CountersManager::anonymous(0), Err(CountersError::InvalidCapacity { capacity: 0 })));
    }

    #[test]
    fn freed_counters_disappear_and_ids_are_not_reused() {
        let manager = CountersManager::anonymous(4).unwrap();
        let a = manager.allocate("a", 0).unwrap();
        let b = manager.allocate("b", 0).unwrap();
        manager.free(a.clone()).unwrap();
        assert!(matches!(manager.free(a), Err(CountersError::NotAllocated { id: 0 })));
        assert!(matches!(manager.free(Counter::detached()), Err(CountersError::NotAllocated { id: -1 })));
        let other = CountersManager::anonymous(4).unwrap();
        other.allocate("x", 0).unwrap();
        assert!(matches!(other.free(b.clone()), Err(CountersError::NotAllocated { id: 1 })));
        assert_eq!(manager.allocate("c", 0).unwrap().id(), 2);
        let labels: Vec<String> = manager.reader().snapshot().into_iter().map(|c| c.label).collect();
        assert_eq!(labels, ["b", "c"]);
    }

    #[test]
    fn allocation_from_several_threads_gives_distinct_ids() {
        let manager = std::sync::Arc::new(CountersManager::anonymous(64).unwrap());
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let manager = std::sync::Arc::clone(&manager);
                std::thread::spawn(move || {
                    (0..32).map(|i| manager.allocate(&format!("t{t}-{i}"), t).unwrap().id()).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<i32> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..64).collect::<Vec<_>>());
        assert_eq!(manager.reader().snapshot().len(), 64);
    }

    #[test]
    fn reader_opens_a_file_and_sees_header_and_updates() {
        let dir = TempDir::new("open");
        let path = dir.0.join(COUNTERS_FILE_NAME);
        let manager = CountersManager::create(&path, 16).unwrap();
        let counter = manager.allocate("work", TYPE_AGENT_WORK).unwrap();
        let reader = CountersReader::open(&path).unwrap();
        assert_eq!(reader.capacity(), 16);
        assert_eq!(reader.pid(), std::process::id());
        assert_eq!(reader.header().high_water, 1);
        assert!(SystemTime::now().duration_since(reader.start_time()).unwrap() < Duration::from_secs(3600));
        counter.increment();
        assert_eq!(reader.find("work"), Some(1));
        let late = manager.allocate("late", TYPE_AGENT_IDLE_CYCLES).unwrap();
        late.set_max(9);
        let mut seen = Vec::new();
        reader.for_each(|id, type_id, label, value| seen.push((id, type_id, label.to_owned(), value)));
        assert_eq!(seen, [(0, TYPE_AGENT_WORK, "work".into(), 1), (1, TYPE_AGENT_IDLE_CYCLES, "late".into(), 9)]);
        assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, counters_file_length(16));
    }

    #[test]
    fn recreating_a_file_leaves_an_old_reader_on_the_old_values() {
        let dir = TempDir::new("recreate");
        let path = dir.0.join(COUNTERS_FILE_NAME);
        let first = CountersManager::create(&path, 4).unwrap();
        first.allocate("a", 0).unwrap().set(5);
        let old_reader = CountersReader::open(&path).unwrap();
        let second = CountersManager::create(&path, 1).unwrap();
        second.allocate("b", 0).unwrap().set(6);
        assert_eq!(old_reader.find("a"), Some(5));
        let new_reader = CountersReader::open(&path).unwrap();
        assert_eq!((new_reader.find("a"), new_reader.find("b"), new_reader.capacity()), (None, Some(6), 1));
    }

    #[test]
    fn reader_rejects_foreign_uninitialised_truncated_and_other_version_files() {
        let dir = TempDir::new("bad");
        let path = dir.0.join("file");
        let open = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            CountersReader::open(&path).unwrap_err()
        };
        assert!(matches!(open(b"short"), CountersError::Truncated { length: 5, needed: HEADER_LENGTH, .. }));
        assert!(matches!(open(&[0u8; 4096]), CountersError::NotInitialised { .. }));
        let foreign = open(&[b'#'; 4096]);
        assert!(matches!(foreign, CountersError::Foreign { magic: 0x2323_2323_2323_2323, .. }), "{foreign}");
        assert!(foreign.to_string().contains("not a quorumcast counters file"));

        let good_path = dir.0.join("good");
        drop(CountersManager::create(&good_path, 4).unwrap());
        let good = std::fs::read(&good_path).unwrap();
        let mut other_version = good.clone();
        other_version[VERSION_OFFSET] = 9;
        assert!(matches!(open(&other_version), CountersError::UnsupportedVersion { found: 9, .. }));
        let cut = open(&good[..good.len() - 1]);
        assert!(matches!(cut, CountersError::Truncated { needed, .. } if needed == counters_file_length(4)), "{cut}");
        let mut bad_capacity = good.clone();
        bad_capacity[CAPACITY_OFFSET] = 5;
        assert!(matches!(open(&bad_capacity), CountersError::Corrupt { .. }));
        assert!(matches!(
            CountersReader::open(dir.0.join("absent")),
            Err(CountersError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound
        ));
    }
}
