//! The recorded log: a node's log on disk, in segment files with a recording index, written by the
//! [`Recorder`] agent (after Aeron Archive's recorder) and read back at start, by replays to the
//! application and by catch-up of other members.
//!
//! A recording lives in a directory of its own (`<data dir>/recording` by default):
//!
//! - `segment-<base position>.rec`: the log's frames from `base position` on, in checksummed blocks (see
//!   `segment`); a new segment starts once the current one reaches the configured segment length;
//! - `index.dat`: where the recording starts and the leadership terms it holds (see `index`);
//! - the member's persisted term and vote stay in the data directory's `vote.dat` ([`crate::storage::vote_file`]).
//!
//! # Invariants
//!
//! - The segments hold one contiguous run of the log, `[start, end)`: each segment's base is where the one
//!   before it ends. Every byte below `end` was a frame of this member's log when it was written.
//! - What the recording says it holds is only what verified: at [`Recording::open`] every segment is
//!   walked block by block, and the first block that fails (a write torn by a crash, or damage) is cut off
//!   with everything after it, and reported. A reader verifies every block it hands out.
//! - A bad block that blocks which verify follow is damage, not a torn tail (a crash tears only the last
//!   writes): the end of what verified past it is kept in `repair.dat` until the recording holds that end
//!   again or is cut back, and the member repairs meanwhile ([`Recording::repair`], `repair`).
//! - Under [`SyncPolicy::Batch`] the recorder's synced position is the end of what `fdatasync` made
//!   durable; a member acknowledges and counts itself only up to it. Under [`SyncPolicy::None`] the
//!   synced position is the end of what is written (to the page cache).

pub mod catch_up;
mod coalescing;
mod group_commit;
mod index;
mod inspect;
mod reader;
mod recorder;
mod repair;
mod segment;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use index::{Index, RecordedTerm, INDEX_FORMAT};
pub use inspect::{Inspection, SegmentFate, SegmentInspection};
pub use reader::RecordingReader;
pub use recorder::{CatchUpChannel, Recorder, RecorderCounters, RecorderSource};
pub use segment::{BlockHeader, WriteCost, BLOCK_HEADER_LENGTH, MAX_BLOCK_LENGTH, MIN_PAGE_CACHE_WINDOW};

use crate::cluster::configuration::configuration_of;
use crate::cluster::consensus_core::{TermBase, TermHistory};
use crate::cluster::frames::term_start_of;
use crate::frame::{Frame, DATA_HEADER_LENGTH};
use crate::storage::disk::{Disk, SharedDisk};
use segment::Segment;

/// When recorded bytes are made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum SyncPolicy {
    /// `none`: written to the page cache only (Aeron Archive's default). The default. A member
    /// acknowledges what its recorder wrote, so a crash of the process loses nothing it acknowledged; a
    /// crash of the machine (power loss, kernel panic) or a failed writeback loses what the kernel had
    /// not yet written, which a member may already have acknowledged.
    #[default]
    None,
    /// `batch`: group commit. One `fdatasync` at a time covers everything written before it started (on a
    /// committer thread beside the recorder while the recorder writes the next batch, or in the recorder's
    /// duty cycle under the simulator), and the member acknowledges (a leader counts itself) only up to
    /// the synced position: a committed entry is on the disks of a majority and survives the power loss of
    /// every member.
    Batch,
}

impl fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyncPolicy::None => "none",
            SyncPolicy::Batch => "batch",
        })
    }
}

impl FromStr for SyncPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(SyncPolicy::None),
            "batch" => Ok(SyncPolicy::Batch),
            _ => Err(format!("unknown sync policy `{text}`; use none or batch")),
        }
    }
}

/// Which log a recording is of: a recording of another cluster, stream or term length is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordingIdentity {
    /// The member-list tag of the cluster.
    pub membership: i64,
    /// The log's stream id.
    pub stream_id: i32,
    /// The log's term length.
    pub term_length: u32,
}

/// Why a recording cannot be used; every message names the file and says what to do.
#[derive(Debug)]
pub struct RecordingError {
    /// The file or directory at fault.
    pub path: PathBuf,
    /// What is wrong and what to do.
    pub message: String,
}

impl RecordingError {
    fn new(path: &Path, message: impl Into<String>) -> Self {
        Self { path: path.to_path_buf(), message: message.into() }
    }

    fn io(path: &Path, what: &str, e: std::io::Error) -> Self {
        let hint = if e.raw_os_error() == Some(libc::ENOSPC) {
            ": the disk is full; free space on it (or move the data directory) and restart the node"
        } else {
            ""
        };
        Self::new(path, format!("cannot {what}: {e}{hint}"))
    }
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for RecordingError {}

/// Where a recording is and how it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingConfig {
    /// Its directory.
    pub dir: PathBuf,
    /// A new segment starts once the current one holds this many bytes.
    pub segment_length: u64,
    /// When bytes are made durable.
    pub sync: SyncPolicy,
    /// How many bytes behind its end the segment being written keeps in the page cache: older ones are
    /// written back and dropped as it grows (`None`: all stay cached until the kernel reclaims them).
    /// See [`StorageConfig::page_cache_window`](crate::node::StorageConfig::page_cache_window).
    pub page_cache_window: Option<u64>,
}

/// What [`Recording::open`] found besides the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Why bytes at the end of the last segment were cut (a torn or damaged last block), if any were.
    pub torn: Option<String>,
    /// How many bytes were cut.
    pub torn_bytes: u64,
    /// The index was missing and was rebuilt from the segments' term-start markers.
    pub index_rebuilt: bool,
    /// Why the bytes cut were damage below what was written after them (a bad block followed by blocks
    /// that verify), not a torn tail, if they were.
    pub damaged: Option<String>,
    /// The end of the log this member held before a loss it has not repaired yet (found now or at an
    /// earlier start, `repair.dat`): see [`Recording::repair`].
    pub repair: Option<i64>,
}

/// A recording opened for writing: one writer (the [`Recorder`]) per recording.
#[derive(Debug)]
pub struct Recording {
    disk: SharedDisk,
    config: RecordingConfig,
    identity: RecordingIdentity,
    index: Index,
    /// The base positions of every segment, ascending; the last is `active`'s when it is open.
    bases: Vec<i64>,
    active: Option<Segment>,
    end: i64,
    /// Set when a segment was created or removed since the directory was last synced.
    dir_changed: bool,
    scratch: Vec<u8>,
    /// Why a change of the recording failed, if one did: its files may no longer be what this handle
    /// says (a write, a removal or a sync failed half-way), so every later change is refused.
    failed: Option<String>,
    /// What appends cost since [`take_cost`](Self::take_cost).
    cost: WriteCost,
    /// Appends write zeros ahead of the blocks (see [`segment::WRITE_AHEAD_STEP`]).
    write_ahead: bool,
    /// The end of the log held before a loss being repaired (`repair.dat`), while the recording ends
    /// below it.
    repair: Option<i64>,
}

impl Recording {
    /// Opens (creating) the recording in `config.dir`: checks every segment's header and the index against
    /// `identity`, walks the last segment, cuts a torn tail, and completes the index with term markers
    /// it lacks.
    pub fn open(
        config: RecordingConfig,
        identity: RecordingIdentity,
    ) -> Result<(Recording, OpenReport), RecordingError> {
        Self::open_on(SharedDisk::os(), config, identity)
    }

    /// The same, on `disk`.
    pub fn open_on(
        disk: SharedDisk,
        config: RecordingConfig,
        identity: RecordingIdentity,
    ) -> Result<(Recording, OpenReport), RecordingError> {
        let dir = config.dir.clone();
        disk.create_dir_all(&dir).map_err(|e| RecordingError::io(&dir, "create the recording directory", e))?;
        let _ = disk.remove_file(&dir.join("index.dat.tmp"));
        let bases = list_segments(&*disk, &dir)?;
        let index_path = dir.join(index::INDEX_FILE);
        let loaded = Index::load(&*disk, &dir, &identity).map_err(|why| {
            RecordingError::new(
                &index_path,
                format!("{why}; the recording cannot be trusted: delete index.dat to have it rebuilt from the segments, or move the recording directory away to start this member empty"),
            )
        })?;
        let repair_path = dir.join(repair::REPAIR_FILE);
        let mut marked = repair::load(&*disk, &dir).map_err(|why| {
            RecordingError::new(
                &repair_path,
                format!("{why}; this member cannot tell how much of its log it lost: move the recording directory away to start it empty (it catches up from the leader)"),
            )
        })?;
        let mut report = OpenReport::default();
        let mut recording = Recording {
            disk,
            config,
            identity,
            index: Index::default(),
            bases,
            active: None,
            end: 0,
            dir_changed: false,
            scratch: Vec::new(),
            failed: None,
            cost: WriteCost::default(),
            write_ahead: false,
            repair: None,
        };
        let rebuild = loaded.is_none() && !recording.bases.is_empty();
        recording.index = match loaded {
            Some(index) => index,
            None => Index { start_position: recording.bases.first().copied().unwrap_or(0), ..Index::default() },
        };
        // Segments wholly below the start: a compaction made the new start durable and stopped before it
        // removed them all.
        while recording.bases.len() > 1 && recording.bases[1] <= recording.index.start_position {
            let below = recording.bases.remove(0);
            let path = recording.segment_path(below);
            recording.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
            recording.dir_changed = true;
            log::info!("removed {}, below the recording's start (a compaction stopped before it)", path.display());
        }
        recording.remove_segment_ending_below_start(&identity)?;
        if recording.bases.first().is_some_and(|&first| first != recording.index.start_position) {
            let path = recording.segment_path(recording.bases[0]);
            return Err(RecordingError::new(
                &path,
                format!(
                    "is the first segment but the index says the recording starts at {}: a segment is missing; restore it, or move the recording directory away to start this member empty",
                    recording.index.start_position
                ),
            ));
        }
        report.index_rebuilt = rebuild;
        recording.end = recording.index.start_position;
        recording.drop_unmade_last_segment(&mut report)?;
        // Every segment is walked, verifying each block (and completing the index with term markers it
        // lacks): a misdirected write can damage any segment written since the last start, not only the
        // last one's tail, and a reader (the node's replay, a catch-up served) that met the damage later
        // would stop. Opening reads the recording once; it is bounded by compaction below the snapshots.
        let mut cut: Option<Cut> = None;
        for i in 0..recording.bases.len() {
            let path = recording.segment_path(recording.bases[i]);
            let mut segment = Segment::open(&*recording.disk, &path, &identity).map_err(|why| {
                RecordingError::new(&path, format!("{why}; move it (and the segments after it) away, or the whole recording directory to start this member empty"))
            })?;
            if let Some(cut) = cut.as_mut() {
                // Past the first bad block: what verifies here was written after it.
                let past = segment
                    .verified_end_past(segment.data_start, cut.walk.end_position)
                    .map_err(|e| RecordingError::io(&path, "read", e))?;
                cut.held = cut.held.max(past).max(Some(recording.bases[i])).max(segment.marked_end);
                continue;
            }
            let length = segment.file.len().map_err(|e| RecordingError::io(&path, "read", e))?;
            let index = &mut recording.index;
            let walk = segment
                .walk(&mut recording.scratch, |header, payload| {
                    add_markers(index, payload, header.position);
                })
                .map_err(|e| RecordingError::io(&path, "read", e))?;
            // Blocks that end below the segment's sync mark lost bytes a sync made durable.
            let synced_past = segment.marked_end.filter(|&marked| marked > walk.end_position);
            if walk.torn.is_some() || synced_past.is_some() {
                // A torn tail is only ever past the last sync, the last writes made, which nothing that
                // verifies follows; a bad block that blocks which verify follow (here or in a later segment)
                // is damage (a misdirected write, a bad sector) below them, maybe below what this member
                // synced and acknowledged; and so are blocks that stop below the sync mark.
                let past = segment
                    .verified_end_past(walk.file_end, walk.end_position)
                    .map_err(|e| RecordingError::io(&path, "read", e))?;
                let mut walk = walk;
                if let (None, Some(marked)) = (&walk.torn, synced_past) {
                    walk.torn = Some(format!(
                        "its blocks end at {}, below the {marked} a sync made durable",
                        walk.end_position
                    ));
                }
                cut = Some(Cut { segment: i, length, walk, held: past.max(synced_past) });
            }
            recording.end = segment.end_position;
            recording.active = Some(segment);
        }
        if let Some(cut) = cut {
            recording.cut_at_first_bad_block(cut, &mut marked, &mut report)?;
        }
        recording.index.cut(recording.end);
        recording.store_index()?;
        if recording.config.sync == SyncPolicy::Batch {
            // What a stopped process wrote after its last sync may still be dirty in the page cache: it is
            // made durable before the recorder reports the recording's end synced (found by the node
            // simulator: seed 1796357726977249856, a member that stopped on a failing index sync, started
            // again, counted its unsynced tail synced, and lost it to a power loss).
            recording.sync()?;
        }
        recording.repair = marked;
        recording.end_repair_if_synced(recording.end);
        report.repair = recording.repair;
        Ok((recording, report))
    }

    /// Cuts the recording where its first bad block is (`cut`): the segments after it go, and the bad one is
    /// cut back to its last block that verified. When blocks that verify were found past the bad one, it is
    /// damage, not a torn tail: the end held before (the highest of theirs) is made durable in `repair.dat`
    /// before anything is cut, and the member repairs until it holds that end again.
    fn cut_at_first_bad_block(
        &mut self,
        cut: Cut,
        marked: &mut Option<i64>,
        report: &mut OpenReport,
    ) -> Result<(), RecordingError> {
        let base = self.bases[cut.segment];
        let path = self.segment_path(base);
        let why = cut.walk.torn.as_deref().unwrap_or("a bad block");
        if cut.walk.end_position < self.start() {
            return Err(RecordingError::new(
                &path,
                format!(
                    "{why} at position {}, below the recording's start {}: move the recording directory away to start this member empty (it catches up from the leader)",
                    cut.walk.end_position,
                    self.start()
                ),
            ));
        }
        if let Some(held) = cut.held {
            report.damaged = Some(format!(
                "{}: {why} at position {}, below log written up to {held}",
                path.display(),
                cut.walk.end_position
            ));
            if marked.is_none_or(|m| m < held) {
                let repair_path = self.config.dir.join(repair::REPAIR_FILE);
                repair::store(&*self.disk, &self.config.dir, held)
                    .map_err(|e| RecordingError::io(&repair_path, "write", e))?;
                *marked = Some(held);
            }
        }
        let mut cut_bytes = cut.length - cut.walk.file_end;
        while self.bases.len() > cut.segment + 1 {
            let later = self.bases.pop().expect("a later segment");
            let later_path = self.segment_path(later);
            cut_bytes += self.disk.open_read(&later_path).and_then(|file| file.len()).unwrap_or(0);
            self.active = None;
            self.disk.remove_file(&later_path).map_err(|e| RecordingError::io(&later_path, "remove", e))?;
            self.dir_changed = true;
        }
        let mut segment = match self.active.take() {
            Some(segment) if segment.base_position == base => segment,
            _ => Segment::open(&*self.disk, &path, &self.identity).map_err(|why| RecordingError::new(&path, why))?,
        };
        segment.lower_marks(cut.walk.end_position).map_err(|e| RecordingError::io(&path, "write", e))?;
        segment.file.set_len(cut.walk.file_end).map_err(|e| RecordingError::io(&path, "cut the torn tail", e))?;
        segment.file.sync_data().map_err(|e| RecordingError::io(&path, "sync", e))?;
        segment.file_end = cut.walk.file_end;
        segment.end_position = cut.walk.end_position;
        report.torn_bytes = cut_bytes;
        report.torn = Some(format!("{}: {why}", path.display()));
        self.end = cut.walk.end_position;
        self.active = Some(segment);
        Ok(())
    }

    /// A first segment that begins below the start and ends at or below it: what a reset to a snapshot left
    /// when it stopped after making its new start durable; removed.
    fn remove_segment_ending_below_start(&mut self, identity: &RecordingIdentity) -> Result<(), RecordingError> {
        let start = self.index.start_position;
        let Some(&first) = self.bases.first().filter(|&&first| first < start) else { return Ok(()) };
        let path = self.segment_path(first);
        let Ok(mut segment) = Segment::open(&*self.disk, &path, identity) else { return Ok(()) };
        let walk = segment.walk(&mut self.scratch, |_, _| {}).map_err(|e| RecordingError::io(&path, "read", e))?;
        if walk.end_position > start {
            return Ok(());
        }
        drop(segment);
        self.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
        self.bases.remove(0);
        self.dir_changed = true;
        log::info!(
            "removed {}, which ends below the recording's start (a reset to a snapshot stopped)",
            path.display()
        );
        Ok(())
    }

    /// The disk it is on.
    pub fn disk(&self) -> &SharedDisk {
        &self.disk
    }

    /// Before the last segment is trusted: drops its cached pages (what a crashed process wrote after a
    /// failed sync is in the page cache but not on the disk, and a later sync would not write it), and
    /// removes it if it is shorter than its header: it was being made when the member stopped, or its
    /// header never reached the disk, and it holds no block.
    fn drop_unmade_last_segment(&mut self, report: &mut OpenReport) -> Result<(), RecordingError> {
        let Some(&base) = self.bases.last() else { return Ok(()) };
        let path = self.segment_path(base);
        let file = self.disk.open(&path).map_err(|e| RecordingError::io(&path, "open", e))?;
        file.drop_cache();
        let length = file.len().map_err(|e| RecordingError::io(&path, "read", e))?;
        if length >= segment::SEGMENT_HEADER_LENGTH {
            return Ok(());
        }
        drop(file);
        self.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
        self.bases.pop();
        self.dir_changed = true;
        report.torn_bytes += length;
        report.torn = Some(format!("{}: {length} bytes, shorter than a segment header: removed", path.display()));
        Ok(())
    }

    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Its configuration.
    pub fn config(&self) -> &RecordingConfig {
        &self.config
    }

    /// Whose log it is.
    pub fn identity(&self) -> &RecordingIdentity {
        &self.identity
    }

    /// The first byte it holds.
    pub fn start(&self) -> i64 {
        self.index.start_position
    }

    /// Where it ends: the position after its last block.
    pub fn end(&self) -> i64 {
        self.end
    }

    /// The end of the log this member held before a loss it repairs (its recording was found damaged below
    /// what it had synced, at this start or an earlier one), while the recording ends below it: until then
    /// the member must not vote for a log less up to date than that one, nor stand
    /// (`consensus_core::repair`). `None` once repaired.
    pub fn repair(&self) -> Option<i64> {
        self.repair
    }

    /// The recording is synced up to `synced`: a repair up to there is over (its `repair.dat` goes; a
    /// failure to remove it is only logged: the next start finds the recording past it and removes it).
    pub fn end_repair_if_synced(&mut self, synced: i64) {
        if self.repair.is_some_and(|held| held <= synced) {
            self.end_repair();
        }
    }

    /// Ends a repair: the log holds what it held, or was cut back by a leader whose log disagrees with it
    /// (then nothing it held past the cut was committed).
    fn end_repair(&mut self) {
        if self.repair.take().is_some() {
            if let Err(e) = repair::remove(&*self.disk, &self.config.dir) {
                log::warn!("{}: cannot remove {}: {e}", self.config.dir.display(), repair::REPAIR_FILE);
            }
        }
    }

    /// The index: its start and terms.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The terms of the recorded log, ending at [`end`](Self::end), for a consensus core to start from;
    /// `None` when the index's terms do not make a history. A recording that starts past 0 (compacted
    /// below a snapshot, or begun at an installed snapshot) holds its first term from position 0: every
    /// byte below its start was committed, so no election and no cut ever asks which term it was.
    pub fn term_history(&self) -> Option<TermHistory> {
        term_history_of(&self.index, self.end)
    }

    /// Appends a block of `payload` (whole frames of one term, as [`crate::shm::log_buffer::scan`] finds them)
    /// at `position`, which must be [`end`](Self::end), covering `advance` log bytes; records the
    /// term-start markers it holds in the index; returns the frames it holds. Not synced: see
    /// [`sync`](Self::sync).
    pub fn append(&mut self, position: i64, payload: &[u8], advance: usize) -> Result<usize, RecordingError> {
        self.usable()?;
        let result = self.append_unchecked(position, payload, advance);
        self.note(result)
    }

    fn append_unchecked(&mut self, position: i64, payload: &[u8], advance: usize) -> Result<usize, RecordingError> {
        if position != self.end {
            return Err(RecordingError::new(
                &self.config.dir,
                format!("a block at {position} does not continue the recording, which ends at {}", self.end),
            ));
        }
        let roll = self.active.as_ref().is_none_or(|s| s.file_end >= self.config.segment_length);
        if roll {
            self.roll()?;
        }
        let segment = self.active.as_mut().expect("a segment after a roll");
        segment.write_ahead = self.write_ahead;
        segment
            .append(position, payload, advance, &mut self.cost)
            .map_err(|e| RecordingError::io(&segment.path, "write", e))?;
        if let Some(window) = self.config.page_cache_window {
            segment.release_cache(window, self.config.sync == SyncPolicy::None, &mut self.cost);
        }
        self.end = segment.end_position;
        let (frames, new_terms) = add_markers(&mut self.index, payload, position);
        if new_terms {
            self.store_index()?;
        }
        Ok(frames)
    }

    /// Whether appends write zeros ahead of the blocks, so that a sync of them changes no file length
    /// (see [`segment::WRITE_AHEAD_STEP`]): the recorder asks for it under `batch` while its syncs are
    /// small.
    pub(crate) fn set_write_ahead(&mut self, write_ahead: bool) {
        self.write_ahead = write_ahead;
    }

    /// Cuts the zeros written ahead of the segment being written, if there are any (a clean close: the
    /// next open finds the file ending at its last block). Not synced.
    pub(crate) fn cut_zeros_ahead(&mut self) -> Result<(), RecordingError> {
        self.usable()?;
        let Some(segment) = self.active.as_mut() else { return Ok(()) };
        let result = segment.cut_zeros_ahead().map_err(|e| RecordingError::io(&segment.path, "cut", e));
        self.note(result)
    }

    /// What appends cost since this was last called.
    pub fn take_cost(&mut self) -> WriteCost {
        std::mem::take(&mut self.cost)
    }

    /// Whether the segment being written is full: the next append starts a new one.
    pub(crate) fn segment_full(&self) -> bool {
        self.active.as_ref().is_some_and(|s| s.file_end >= self.config.segment_length)
    }

    /// What a group commit must make durable for everything appended so far: the segment being written up
    /// to [`end`](Self::end), and the directory when a segment was made or removed since the last sync
    /// (taking the request clears that mark: a request that fails stops the node). `None` without a
    /// segment, or once a change failed (nothing it holds is to be counted durable again).
    pub(crate) fn commit_request(&mut self) -> Option<group_commit::CommitRequest> {
        if self.failed.is_some() {
            return None;
        }
        let segment = self.active.as_ref()?;
        let dir = std::mem::take(&mut self.dir_changed).then(|| (self.disk.clone(), self.config.dir.clone()));
        Some(group_commit::CommitRequest {
            file: std::sync::Arc::clone(&segment.file),
            marks: segment.marks.clone(),
            path: segment.path.clone(),
            dir,
            end: self.end,
        })
    }

    /// How many segment files it has.
    pub fn segment_count(&self) -> usize {
        self.bases.len()
    }

    /// Starts a new segment at the end (the one before it synced first when the policy syncs).
    fn roll(&mut self) -> Result<(), RecordingError> {
        if let Some(mut old) = self.active.take() {
            // Only the last segment may go on past its blocks (a walk stops there as at a torn tail).
            old.cut_zeros_ahead().map_err(|e| RecordingError::io(&old.path, "cut", e))?;
            if self.config.sync == SyncPolicy::Batch {
                old.mark_synced_end().map_err(|e| RecordingError::io(&old.path, "write", e))?;
                old.file.sync_data().map_err(|e| RecordingError::io(&old.path, "sync", e))?;
            }
        }
        let dir = self.config.dir.clone();
        let segment = Segment::create(&*self.disk, &dir, &self.identity, self.end)
            .map_err(|e| RecordingError::io(&dir.join(segment::file_name(self.end)), "create", e))?;
        if self.bases.last() != Some(&self.end) {
            self.bases.push(self.end);
        }
        self.active = Some(segment);
        self.dir_changed = true;
        Ok(())
    }

    /// Makes everything appended so far durable (`fdatasync` of the segment being written, and of the
    /// directory when a segment was made).
    pub fn sync(&mut self) -> Result<(), RecordingError> {
        self.usable()?;
        let result = self.sync_unchecked();
        self.note(result)
    }

    fn sync_unchecked(&mut self) -> Result<(), RecordingError> {
        if let Some(segment) = &self.active {
            segment.mark_synced_end().map_err(|e| RecordingError::io(&segment.path, "write", e))?;
            segment.file.sync_data().map_err(|e| RecordingError::io(&segment.path, "sync", e))?;
        }
        if self.dir_changed {
            // Cleared only once synced: a failed directory sync is made again by the next sync.
            self.disk.sync_dir(&self.config.dir).map_err(|e| RecordingError::io(&self.config.dir, "sync", e))?;
            self.dir_changed = false;
        }
        Ok(())
    }

    /// Cuts the recording back to `position` (a frame boundary): a leader's log this member held beyond
    /// the point where it agrees with the new leader's. Below the recording's start is an error.
    pub fn truncate(&mut self, position: i64) -> Result<(), RecordingError> {
        self.usable()?;
        let result = self.truncate_unchecked(position);
        self.note(result)
    }

    fn truncate_unchecked(&mut self, position: i64) -> Result<(), RecordingError> {
        if position >= self.end {
            return Ok(());
        }
        if position < self.start() {
            return Err(RecordingError::new(
                &self.config.dir,
                format!("cannot cut back to {position}: the recording starts at {}", self.start()),
            ));
        }
        while let Some(&last) = self.bases.last() {
            if last < position {
                break;
            }
            let path = self.segment_path(last);
            self.active = None;
            self.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
            self.bases.pop();
            self.dir_changed = true;
        }
        if let Some(&last) = self.bases.last() {
            let path = self.segment_path(last);
            let mut segment = match self.active.take() {
                Some(segment) => segment,
                None => {
                    Segment::open(&*self.disk, &path, &self.identity).map_err(|why| RecordingError::new(&path, why))?
                }
            };
            segment.cut(position, &mut self.scratch).map_err(|e| RecordingError::io(&path, "cut", e))?;
            segment.end_position = position;
            self.active = Some(segment);
        }
        self.end = position;
        if self.index.cut(position) {
            self.store_index()?;
        }
        self.sync()?;
        // A leader's log disagrees with this one at `position`: nothing held past it was committed.
        self.end_repair();
        Ok(())
    }

    /// Deletes the segments that end at or before `position` (the log below the oldest snapshot kept);
    /// returns the new start.
    pub fn delete_before(&mut self, position: i64) -> Result<i64, RecordingError> {
        self.usable()?;
        let result = self.delete_before_unchecked(position);
        self.note(result)
    }

    fn delete_before_unchecked(&mut self, position: i64) -> Result<i64, RecordingError> {
        let gone = (1..self.bases.len()).take_while(|&i| self.bases[i] <= position).count();
        if gone == 0 {
            return Ok(self.start());
        }
        // The new start is made durable first, then the segments below it go: a crash (or a failing write)
        // in between leaves segments wholly below the start, which the next open removes, never an index
        // that names a segment no longer there (the node simulator found that order: a member refused to
        // start again).
        let start = self.bases[gone];
        self.index.start_term = self.index.term_at(start);
        self.index.start_position = start;
        self.index.forget_configurations_below(start);
        // The terms below the start stay: the member answers which term a position is in from them (a
        // follower with an uncommitted suffix there is told where the leader's terms start), and they are
        // one entry per leadership term.
        self.store_index()?;
        for base in self.bases.drain(..gone).collect::<Vec<_>>() {
            let path = self.segment_path(base);
            self.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
        }
        self.dir_changed = true;
        self.sync()?;
        Ok(self.start())
    }

    /// Empties the recording to start again at `position`, in leadership term `term` (a snapshot at
    /// `position` was installed: the log before it is not this member's to hold).
    pub fn reset(&mut self, position: i64, term: i64) -> Result<(), RecordingError> {
        self.usable()?;
        let result = self.reset_unchecked(position, term);
        self.note(result)
    }

    fn reset_unchecked(&mut self, position: i64, term: i64) -> Result<(), RecordingError> {
        self.reset_with_history(position, term, &[])
    }

    /// As [`reset`](Self::reset), keeping `history` (the terms that start at or below `position`, `(base,
    /// leadership term id)` oldest first: the leader's, whose snapshot was installed) in the index, so that
    /// the member knows which term every position is in after a restart too.
    pub fn reset_with_history(
        &mut self,
        position: i64,
        term: i64,
        history: &[(i64, i64)],
    ) -> Result<(), RecordingError> {
        self.reset_at_snapshot(position, term, history, None)
    }

    /// As [`reset_with_history`](Self::reset_with_history), keeping `configuration` (the payload of the
    /// configuration entry in effect at `position`, the leader's) in the index as the one in effect at the
    /// recording's start.
    pub fn reset_at_snapshot(
        &mut self,
        position: i64,
        term: i64,
        history: &[(i64, i64)],
        configuration: Option<&[u8]>,
    ) -> Result<(), RecordingError> {
        self.usable()?;
        let result = self.reset_with_history_unchecked(position, term, history, configuration);
        self.note(result)
    }

    fn reset_with_history_unchecked(
        &mut self,
        position: i64,
        term: i64,
        history: &[(i64, i64)],
        configuration: Option<&[u8]>,
    ) -> Result<(), RecordingError> {
        self.active = None;
        let old = std::mem::take(&mut self.bases);
        // The term at `position` too, when it starts there: the index then says which term every position
        // from 0 to the recording's start is in (a marker recorded again later is no change).
        let terms = history
            .iter()
            .filter(|&&(base, _)| base <= position)
            .map(|&(base_position, leadership_term_id)| index::RecordedTerm { leadership_term_id, base_position })
            .collect();
        // The configuration in effect at the snapshot is the leader's: none of this member's log is kept.
        let configurations = configuration.map(|c| vec![(position, c.to_vec())]).unwrap_or_default();
        self.index = Index { start_position: position, start_term: term, terms, configurations };
        self.end = position;
        // The new start is made durable before any old segment goes: a member stopped in between finds the
        // old segments wholly below the start, which the next open removes, never an index without its log
        // (found by the node simulator: seed 1796356595306429662, an index write failing after the removals).
        self.dir_changed = true;
        self.store_index()?;
        self.sync()?;
        for base in old {
            let path = self.segment_path(base);
            self.disk.remove_file(&path).map_err(|e| RecordingError::io(&path, "remove", e))?;
        }
        self.dir_changed = true;
        self.sync()?;
        self.end_repair_if_synced(position);
        Ok(())
    }

    /// Why a change of this recording failed, if one did (then every later change is refused: the files
    /// may no longer match this handle, and only opening the recording again reads what they hold).
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn usable(&self) -> Result<(), RecordingError> {
        match &self.failed {
            Some(why) => {
                Err(RecordingError::new(&self.config.dir, format!("an earlier change failed ({why}): reopen it")))
            }
            None => Ok(()),
        }
    }

    /// Records a failed change.
    fn note<T>(&mut self, result: Result<T, RecordingError>) -> Result<T, RecordingError> {
        if let Err(e) = &result {
            self.failed.get_or_insert_with(|| e.to_string());
        }
        result
    }

    /// A reader of this recording from `position`.
    pub fn reader(&self, position: i64) -> RecordingReader {
        RecordingReader::on(self.disk.clone(), self.config.dir.clone(), self.identity, position)
    }

    fn store_index(&mut self) -> Result<(), RecordingError> {
        let sync = self.config.sync == SyncPolicy::Batch;
        self.index
            .store(&*self.disk, &self.config.dir, &self.identity, sync)
            .map_err(|e| RecordingError::io(&self.config.dir.join(index::INDEX_FILE), "write", e))
    }

    fn segment_path(&self, base: i64) -> PathBuf {
        self.config.dir.join(segment::file_name(base))
    }
}

/// The terms of a recorded log whose index is `index` and which ends at `end` (see
/// [`Recording::term_history`]).
fn term_history_of(index: &Index, end: i64) -> Option<TermHistory> {
    if end == index.start_position && index.terms.is_empty() && index.start_position == 0 {
        return Some(TermHistory::new());
    }
    let mut terms: Vec<TermBase> = Vec::with_capacity(index.terms.len() + 1);
    if index.terms.first().is_none_or(|t| t.base_position > 0) && index.start_term > 0 {
        terms.push(TermBase { leadership_term_id: index.start_term, base_position: 0 });
    }
    // A recording begun at an installed snapshot that is also its term's start lists that term's start
    // too (its first block carries the term-start marker): the term is held from 0 already.
    let held_from_zero = terms.first().map(|t| t.leadership_term_id);
    terms.extend(
        index
            .terms
            .iter()
            .filter(|t| Some(t.leadership_term_id) != held_from_zero)
            .map(|t| TermBase { leadership_term_id: t.leadership_term_id, base_position: t.base_position }),
    );
    if terms.is_empty() {
        return (end == 0).then(TermHistory::new);
    }
    TermHistory::from_terms(terms, end)
}

/// Where [`Recording::open`] found the first bad block.
struct Cut {
    /// Its segment's index in the bases.
    segment: usize,
    /// That segment's file length.
    length: u64,
    /// The walk that stopped at it.
    walk: segment::Walk,
    /// The highest end of a block that verifies past it, if one does (then it is damage).
    held: Option<i64>,
}

/// The base positions of the segment files in `dir`, ascending.
fn list_segments(disk: &dyn Disk, dir: &Path) -> Result<Vec<i64>, RecordingError> {
    let names = disk.list(dir).map_err(|e| RecordingError::io(dir, "list", e))?;
    let mut bases: Vec<i64> = names.iter().filter_map(|name| segment::parse_file_name(name)).collect();
    bases.sort_unstable();
    Ok(bases)
}

/// Adds the term-start markers and configuration entries among the frames of a block's `payload` (at `position`) to `index`; returns
/// the frames walked and whether the index changed.
fn add_markers(index: &mut Index, payload: &[u8], position: i64) -> (usize, bool) {
    let (mut frames, mut changed) = (0, false);
    for_each_frame(payload, position, |at, frame| {
        frames += 1;
        if let Frame::Data { header, payload } = frame {
            if let Some(term) = term_start_of(header.flags, payload) {
                changed |= index.add_term(term, at);
            } else if let Some(entry) = configuration_of(header.flags, payload) {
                let end = at + crate::frame::align_frame(header.frame_length as usize) as i64;
                changed |= index.add_configuration(end, entry);
            }
        }
    });
    (frames, changed)
}

/// Calls `f` with each frame of a block's `payload` and its log position (a block is whole frames: a
/// frame that does not parse ends the walk).
pub fn for_each_frame(payload: &[u8], position: i64, mut f: impl FnMut(i64, Frame<'_>)) {
    let mut offset = 0;
    for frame in crate::frame::frames(payload).map_while(Result::ok) {
        let length = match &frame {
            Frame::Data { header, .. } => crate::frame::align_frame(header.frame_length as usize),
            _ => DATA_HEADER_LENGTH,
        };
        f(position + offset as i64, frame);
        offset += length;
    }
}

#[cfg(test)]
mod tests;
