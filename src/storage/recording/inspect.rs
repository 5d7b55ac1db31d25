//! A recording read without changing a byte: what [`Recording::open`] would find in it, cut from it and
//! start from, for an operator looking at a stopped member's directory (`qc-cluster recovery-plan`).
//!
//! # Invariants
//!
//! - Nothing is created, written, cut, renamed, removed or synced: files are opened read-only
//!   ([`Disk::open_read`], [`Disk::read`], [`Disk::list`]).
//! - The same reading code as [`Recording::open`]: the segment list, the index's load and checks, each
//!   segment's header check and block walk ([`Segment::walk`], every block's checksum verified), the
//!   term-start markers the walk adds to the index, and the terms a consensus core would start from. What
//!   open would repair (a torn tail cut, segments below the start removed, an unmade last segment
//!   removed, an index rebuilt) is reported instead of done; what it would refuse is reported as the
//!   refusal, with its message.
//! - Every segment is walked, not only the last (open walks only the last): damage in an earlier one
//!   is reported where it is, although open would not cut it (a replay or a catch-up from it stops there
//!   with an error naming it).

use std::io;
use std::path::{Path, PathBuf};

use bytemuck::Zeroable;

use super::index::{Index, RecordedTerm};
use super::segment::{self, Segment, SegmentHeader, SEGMENT_HEADER_LENGTH, SEGMENT_MAGIC, UNMARKED_SEGMENT_MAGIC};
use super::{add_markers, list_segments, term_history_of, Recording, RecordingError, RecordingIdentity};
use crate::cluster::consensus_core::TermHistory;
use crate::storage::disk::Disk;

/// What a restart would do with one segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentFate {
    /// Kept: its verified blocks are part of the recorded log.
    Kept,
    /// Removed: it lies wholly below the recording's start (a compaction, or a reset to a snapshot,
    /// stopped before it removed it).
    BelowStart,
    /// Removed: the last segment, shorter than its header (it was being made when the member stopped).
    Unmade,
    /// Removed: it lies past the first bad block of an earlier segment, where a restart cuts the recording.
    PastCut,
}

/// One segment file, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInspection {
    /// The file.
    pub path: PathBuf,
    /// The log position its first block starts at (from its name).
    pub base_position: i64,
    /// Its length in bytes.
    pub file_length: u64,
    /// Blocks that verified, from the first.
    pub blocks: u64,
    /// Where the verified blocks end in the log.
    pub end_position: i64,
    /// Where the verified blocks end in the file: what a cut keeps.
    pub valid_length: u64,
    /// Why the walk stopped before the end of the file (a torn or damaged block), if it did; the bytes
    /// from `valid_length` on are then not part of the log.
    pub damage: Option<String>,
    /// What a restart does with the file.
    pub fate: SegmentFate,
}

/// What a recording holds and what [`Recording::open`] would do with it, read without changing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// The recording's directory.
    pub dir: PathBuf,
    /// Whose log it is, from the index's header or the first segment's (`None` for an empty directory).
    pub identity: Option<RecordingIdentity>,
    /// The index's format (its magic number, [`super::INDEX_FORMAT`]) when `index.dat` loaded.
    pub index_format: Option<&'static str>,
    /// `index.dat` was missing: a restart rebuilds it from the segments' term-start markers.
    pub index_missing: bool,
    /// The index as a restart completes it: its start and the terms whose markers are recorded.
    pub index: Index,
    /// The segment files, ascending.
    pub segments: Vec<SegmentInspection>,
    /// Where the recorded log ends once the torn tail (if any) is cut.
    pub end: i64,
    /// What a restart cuts off the last segment (torn or damaged last blocks), and how many bytes.
    pub torn: Option<String>,
    /// Bytes cut at a restart (the torn tail, or an unmade last segment).
    pub torn_bytes: u64,
    /// The terms a consensus core would start from; `None` when they do not make a history.
    pub term_history: Option<TermHistory>,
    /// Why a restart would refuse this recording (its message, as the node would stop with), if it would.
    pub refusal: Option<String>,
}

impl Recording {
    /// Reads the recording in `dir` on `disk` as [`Recording::open`] would, changing nothing (see
    /// `inspect`): for a stopped member's directory, whose identity is read from its files. A directory
    /// that does not exist reads as an empty recording. `Err` only when the directory cannot be listed.
    pub fn inspect(disk: &dyn Disk, dir: &Path) -> Result<Inspection, RecordingError> {
        let bases = match list_segments(disk, dir) {
            Err(_) if disk.list(dir).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) => Vec::new(),
            listed => listed?,
        };
        let identity = Index::stored_identity(disk, dir)
            .or_else(|| bases.first().and_then(|&base| segment_identity(disk, &dir.join(segment::file_name(base)))));
        let mut inspection = Inspection {
            dir: dir.to_path_buf(),
            identity,
            index_format: None,
            index_missing: false,
            index: Index::default(),
            segments: Vec::new(),
            end: 0,
            torn: None,
            torn_bytes: 0,
            term_history: None,
            refusal: None,
        };
        let Some(identity) = identity else {
            inspection.term_history = term_history_of(&inspection.index, 0);
            if !bases.is_empty() {
                inspection.refusal = Some("its segments carry no readable header: this is not a recording".into());
            }
            return Ok(inspection);
        };
        let loaded = match Index::load(disk, dir, &identity) {
            Ok(loaded) => loaded,
            Err(why) => {
                inspection.refusal = Some(format!(
                    "{}: {why}; the recording cannot be trusted: delete index.dat to have it rebuilt from the \
                     segments, or move the recording directory away to start this member empty",
                    dir.join(super::index::INDEX_FILE).display()
                ));
                None
            }
        };
        let rebuild = loaded.is_none() && !bases.is_empty();
        inspection.index_format = loaded.is_some().then_some(super::INDEX_FORMAT);
        inspection.index_missing = loaded.is_none() && inspection.refusal.is_none();
        let mut index =
            loaded.unwrap_or_else(|| Index { start_position: bases.first().copied().unwrap_or(0), ..Index::default() });
        let start = index.start_position;
        let mut scratch = Vec::new();
        // Segments wholly below the start (a compaction stopped before it removed them all), and a first
        // one that begins below it and ends at or below it (a reset to a snapshot stopped).
        let mut below = 0;
        while bases.len() - below > 1 && bases[below + 1] <= start {
            below += 1;
        }
        let mut walked: Vec<(SegmentInspection, Option<Segment>)> = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let path = dir.join(segment::file_name(base));
            let (mut report, segment) = walk(disk, &path, base, &identity, &mut scratch);
            if i < below || (i == below && base < start && report.end_position <= start && segment.is_some()) {
                report.fate = SegmentFate::BelowStart;
            }
            walked.push((report, segment));
        }
        let kept: Vec<usize> = (0..walked.len()).filter(|&i| walked[i].0.fate == SegmentFate::Kept).collect();
        if let Some(&first) = kept.first() {
            if walked[first].0.base_position != start && inspection.refusal.is_none() {
                inspection.refusal = Some(format!(
                    "{} is the first segment but the index says the recording starts at {start}: a segment is \
                     missing; restore it, or move the recording directory away to start this member empty",
                    walked[first].0.path.display()
                ));
            }
        }
        if let Some(&last) = kept.last() {
            if walked[last].0.file_length < SEGMENT_HEADER_LENGTH {
                walked[last].0.fate = SegmentFate::Unmade;
                inspection.torn_bytes += walked[last].0.file_length;
                inspection.torn = Some(format!(
                    "{}: {} bytes, shorter than a segment header: removed",
                    walked[last].0.path.display(),
                    walked[last].0.file_length
                ));
            }
        }
        let kept: Vec<usize> = (0..walked.len()).filter(|&i| walked[i].0.fate == SegmentFate::Kept).collect();
        inspection.end = start;
        // As open: the first bad block in any segment cuts the recording there, and the segments after it go
        // (blocks that verify past it, there or later, make it damage rather than a torn tail).
        let cut_at = kept.iter().position(|&i| walked[i].0.damage.is_some() && walked[i].1.is_some());
        for (n, &i) in kept.iter().enumerate() {
            let is_last = cut_at.map_or(n + 1 == kept.len(), |c| n == c);
            if cut_at.is_some_and(|c| n > c) {
                let (report, _) = &mut walked[i];
                report.fate = SegmentFate::PastCut;
                inspection.torn_bytes += report.file_length;
                continue;
            }
            let (report, segment) = &mut walked[i];
            let Some(segment) = segment else {
                if inspection.refusal.is_none() {
                    inspection.refusal = Some(format!(
                        "{}: {}; move it (and the segments after it) away, or the whole recording directory to \
                         start this member empty",
                        report.path.display(),
                        report.damage.as_deref().unwrap_or("cannot be read")
                    ));
                }
                continue;
            };
            if rebuild || is_last {
                // The walk again, adding the markers as open's walk does (a verified block is the same
                // block the first walk read).
                let _ = segment.walk(&mut scratch, |header, payload| {
                    add_markers(&mut index, payload, header.position);
                });
            }
            if is_last {
                if let Some(why) = &report.damage {
                    inspection.torn_bytes += report.file_length - report.valid_length;
                    inspection.torn = Some(format!("{}: {why}", report.path.display()));
                }
                inspection.end = report.end_position;
            }
        }
        index.cut(inspection.end);
        inspection.term_history = term_history_of(&index, inspection.end);
        if inspection.term_history.is_none() && inspection.refusal.is_none() {
            inspection.refusal = Some(format!(
                "{}: its terms ({:?} from {} in term {}) do not make a history ending at {}: delete index.dat to \
                 have it rebuilt from the segments",
                dir.join(super::index::INDEX_FILE).display(),
                index.terms,
                index.start_position,
                index.start_term,
                inspection.end
            ));
        }
        inspection.index = index;
        inspection.segments = walked.into_iter().map(|(report, _)| report).collect();
        Ok(inspection)
    }
}

impl Inspection {
    /// The terms of the recorded log as a restart completes the index.
    pub fn terms(&self) -> &[RecordedTerm] {
        &self.index.terms
    }
}

/// Opens (read-only) and walks one segment: what it holds, and the open segment when its header checks.
fn walk(
    disk: &dyn Disk,
    path: &Path,
    base: i64,
    identity: &RecordingIdentity,
    scratch: &mut Vec<u8>,
) -> (SegmentInspection, Option<Segment>) {
    let file_length = disk.open_read(path).and_then(|f| f.len()).unwrap_or(0);
    let mut report = SegmentInspection {
        path: path.to_path_buf(),
        base_position: base,
        file_length,
        blocks: 0,
        end_position: base,
        valid_length: file_length.min(SEGMENT_HEADER_LENGTH),
        damage: None,
        fate: SegmentFate::Kept,
    };
    if file_length < SEGMENT_HEADER_LENGTH {
        report.damage = Some(format!("{file_length} bytes, shorter than a segment header"));
        return (report, None);
    }
    let mut segment = match Segment::open_read(disk, path, identity) {
        Ok(segment) => segment,
        Err(why) => {
            report.damage = Some(why);
            return (report, None);
        }
    };
    let mut blocks = 0;
    match segment.walk(scratch, |_, _| blocks += 1) {
        Ok(walk) => {
            report.blocks = blocks;
            report.end_position = walk.end_position;
            report.valid_length = walk.file_end;
            report.damage = walk.torn;
            if let Some(marked) = segment.marked_end.filter(|&m| m > walk.end_position && report.damage.is_none()) {
                report.damage =
                    Some(format!("its blocks end at {}, below the {marked} a sync made durable", walk.end_position));
            }
        }
        Err(e) => report.damage = Some(format!("cannot be read: {e}")),
    }
    (report, Some(segment))
}

/// The identity a segment file's header names, when it has the segment magic (checked by the open).
fn segment_identity(disk: &dyn Disk, path: &Path) -> Option<RecordingIdentity> {
    let file = disk.open_read(path).ok()?;
    let mut header = SegmentHeader::zeroed();
    file.read_exact_at(bytemuck::bytes_of_mut(&mut header), 0).ok()?;
    (header.magic == SEGMENT_MAGIC || header.magic == UNMARKED_SEGMENT_MAGIC).then_some(RecordingIdentity {
        membership: header.membership,
        stream_id: header.stream_id,
        term_length: header.term_length,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{config, log_of, record, scratch, IDENTITY};
    use super::*;
    use crate::storage::disk::OsDisk;

    /// Every file under `dir` with its length and content hash, in name order: what must not change.
    fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, blake3::Hash)> {
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files
            .into_iter()
            .map(|p| (p.clone(), std::fs::metadata(&p).unwrap().len(), blake3::hash(&std::fs::read(&p).unwrap())))
            .collect()
    }

    #[test]
    fn an_inspection_changes_nothing_and_says_what_open_then_cuts_and_starts_from() {
        let dir = scratch("inspect");
        let log = log_of(3, 40);
        let end = log.producer_position();
        let (mut recording, _) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
        record(&mut recording, &log, end, 1024);
        drop(recording);
        let whole = Recording::inspect(&OsDisk, &dir).unwrap();
        assert_eq!((whole.identity, whole.end, whole.torn_bytes, &whole.refusal), (Some(IDENTITY), end, 0, &None));
        assert!(whole.segments.len() > 2 && whole.segments.iter().all(|s| s.damage.is_none() && s.blocks > 0));
        assert_eq!(whole.terms().len(), 3);

        // A torn last block, and a damaged block in the first segment: open cuts the recording there (and
        // the segments after it go), which the inspection says.
        let last = &whole.segments.last().unwrap().path;
        let mut file = std::fs::OpenOptions::new().append(true).open(last).unwrap();
        std::io::Write::write_all(&mut file, &[0x71, 0x63, 0x62, 0x34, 0x40, 0, 0, 0, 1, 2, 3]).unwrap();
        drop(file);
        let first = &whole.segments[0].path;
        let file = std::fs::OpenOptions::new().write(true).open(first).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &[0x55], 200).unwrap();
        drop(file);
        let before = fingerprint(&dir);
        let torn = Recording::inspect(&OsDisk, &dir).unwrap();
        assert_eq!(fingerprint(&dir), before, "an inspection writes nothing");
        let damaged = &torn.segments[0];
        assert!(damaged.damage.as_deref().is_some_and(|d| d.contains("checksum")), "{damaged:?}");
        assert!(damaged.valid_length < damaged.file_length && damaged.fate == SegmentFate::Kept);
        assert_eq!(torn.end, damaged.end_position, "cut at the first bad block");
        assert!(torn.torn.as_deref().is_some_and(|t| t.contains(first.to_str().unwrap())), "{torn:?}");
        assert!(torn.segments[1..].iter().all(|s| s.fate == SegmentFate::PastCut));

        // What open then does is what the inspection said.
        let (recording, report) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
        assert_eq!((report.torn_bytes, recording.end()), (torn.torn_bytes, torn.end));
        assert_eq!(recording.term_history(), torn.term_history);
        assert_eq!(recording.index(), &torn.index);
        drop(recording);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn segments_a_stopped_compaction_left_below_the_start_are_reported_as_removed() {
        let dir = scratch("inspect-compaction");
        let log = log_of(2, 60);
        let end = log.producer_position();
        let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
        record(&mut recording, &log, end, 1024);
        let first = Recording::inspect(&OsDisk, &dir).unwrap().segments;
        let copies: Vec<(PathBuf, Vec<u8>)> =
            first.iter().map(|s| (s.path.clone(), std::fs::read(&s.path).unwrap())).collect();
        let start = recording.delete_before(5000).unwrap();
        drop(recording);
        // The segments as a compaction stopped after its new index leaves them.
        let restored: Vec<&PathBuf> = copies.iter().filter(|(p, _)| !p.exists()).map(|(p, _)| p).collect();
        for (path, bytes) in &copies {
            std::fs::write(path, bytes).unwrap();
        }
        let inspection = Recording::inspect(&OsDisk, &dir).unwrap();
        assert_eq!((inspection.index.start_position, inspection.end, &inspection.refusal), (start, end, &None));
        let removed: Vec<&PathBuf> =
            inspection.segments.iter().filter(|s| s.fate == SegmentFate::BelowStart).map(|s| &s.path).collect();
        assert!(!removed.is_empty());
        assert_eq!(removed, restored);
        let (recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
        assert_eq!((recording.start(), recording.end()), (start, end));
        assert!(removed.iter().all(|p| !p.exists()), "open removed what the inspection said");
        drop(recording);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_index_is_the_refusal_open_would_stop_with_and_a_missing_directory_is_empty() {
        let dir = scratch("inspect-index");
        let log = log_of(1, 10);
        let (mut recording, _) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
        record(&mut recording, &log, log.producer_position(), 1024);
        drop(recording);
        let index = dir.join(super::super::index::INDEX_FILE);
        let mut bytes = std::fs::read(&index).unwrap();
        bytes[36] ^= 0x40;
        std::fs::write(&index, bytes).unwrap();
        let inspection = Recording::inspect(&OsDisk, &dir).unwrap();
        let refusal = inspection.refusal.unwrap();
        let opened = Recording::open(config(&dir, 4096), IDENTITY).unwrap_err().to_string();
        assert_eq!(refusal, opened);
        let empty = Recording::inspect(&OsDisk, &dir.join("none")).unwrap();
        assert_eq!((empty.identity, empty.end, empty.segments.len(), empty.refusal), (None, 0, 0, None));
        assert!(!dir.join("none").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
