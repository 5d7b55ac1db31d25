//! The recording's file formats, recovery of a torn tail, cuts, compaction and reading back.

use super::*;
use crate::cluster::frames::TERM_START_FLAG;
use crate::frame::UNFRAGMENTED;
use crate::shm::log_buffer::{LogBuffer, LogConfig};

pub(super) const IDENTITY: RecordingIdentity =
    RecordingIdentity { membership: 42, stream_id: 1001, term_length: 65536 };

pub(super) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qc-recording-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub(super) fn config(dir: &Path, segment_length: u64) -> RecordingConfig {
    RecordingConfig { dir: dir.to_path_buf(), segment_length, sync: SyncPolicy::Batch, page_cache_window: None }
}

/// A log of `terms` leadership terms (1, 2, ...), each its marker and `per_term` messages of 100 bytes.
pub(super) fn log_of(terms: i64, per_term: usize) -> LogBuffer {
    let log = LogBuffer::create_anonymous(LogConfig { stream_id: 1001, ..LogConfig::new(65536, 1408) }).unwrap();
    let mut appender = log.appender().unwrap();
    appender.set_limit(i64::MAX);
    for term in 1..=terms {
        appender.append_frame(&term.to_le_bytes(), UNFRAGMENTED | TERM_START_FLAG, 0).unwrap();
        for i in 0..per_term {
            appender.append(&[i as u8; 100]).unwrap();
        }
    }
    log
}

/// Records `log` from the recording's end to `to`, in blocks of at most `block` bytes.
pub(super) fn record(recording: &mut Recording, log: &LogBuffer, to: i64, block: usize) {
    while recording.end() < to {
        let position = recording.end();
        let found = crate::shm::log_buffer::scan(log, position, block.min((to - position) as usize));
        assert!(found.available > 0, "frames at {position}");
        let bits = log.position_bits_to_shift();
        let term = log.term(crate::shm::log_buffer::partition_index(position, bits));
        let payload = term.bytes(crate::shm::log_buffer::term_offset(position, log.term_length()), found.available);
        recording.append(position, payload, found.advance()).unwrap();
    }
}

/// Every byte a reader hands out from `from` up to `to`.
fn read_all(recording: &Recording, from: i64, to: i64) -> Result<Vec<u8>, RecordingError> {
    let mut reader = recording.reader(from);
    let mut bytes = Vec::new();
    while let Some((_, block, _)) = reader.next_block(to)? {
        bytes.extend_from_slice(block);
    }
    Ok(bytes)
}

fn log_bytes(log: &LogBuffer, from: i64, to: i64) -> Vec<u8> {
    let term = log.term(0);
    term.bytes(from as usize, (to - from) as usize).to_vec()
}

#[test]
fn a_recording_reads_back_the_log_across_segments_with_its_terms() {
    let dir = scratch("roundtrip");
    let log = log_of(3, 40);
    let end = log.producer_position();
    let (mut recording, report) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    assert_eq!(report, OpenReport::default());
    record(&mut recording, &log, end, 1024);
    recording.sync().unwrap();
    assert!(recording.segment_count() > 2, "4 KiB segments roll");
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(&log, 0, end));
    // From the middle of a block, too.
    assert_eq!(read_all(&recording, 640, end).unwrap(), log_bytes(&log, 640, end));
    drop(recording);
    let (again, report) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    assert_eq!(report.torn, None);
    assert_eq!(again.end(), end);
    let history = again.term_history().unwrap();
    let terms: Vec<i64> = history.terms().iter().map(|t| t.leadership_term_id).collect();
    assert_eq!(terms, vec![1, 2, 3]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_or_damaged_last_block_is_cut_and_reported() {
    for damage in ["truncate", "flip", "garbage"] {
        let dir = scratch(&format!("torn-{damage}"));
        let log = log_of(1, 30);
        let end = log.producer_position();
        let (mut recording, _) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        record(&mut recording, &log, end, 1024);
        let mut last_block_start = 0;
        let mut reader = recording.reader(0);
        while let Some((at, _, _)) = reader.next_block(end).unwrap() {
            last_block_start = at;
        }
        drop(recording);
        let segment = dir.join(segment::file_name(0));
        let length = std::fs::metadata(&segment).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
        match damage {
            "truncate" => file.set_len(length - 7).unwrap(),
            "flip" => std::os::unix::fs::FileExt::write_all_at(&file, &[0xFF], length - 40).unwrap(),
            _ => std::os::unix::fs::FileExt::write_all_at(&file, &[0xAB; 64], length).unwrap(),
        }
        drop(file);
        let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        let expected_end = if damage == "garbage" { end } else { last_block_start };
        assert_eq!(recording.end(), expected_end, "{damage}");
        assert!(report.torn.is_some(), "{damage}: {report:?}");
        assert!(report.torn_bytes > 0);
        assert_eq!((report.damaged, report.repair), (None, None), "{damage}: a torn tail, nothing to repair");
        assert_eq!(read_all(&recording, 0, expected_end).unwrap(), log_bytes(&log, 0, expected_end));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The file offsets and log positions of the blocks of the recording's only segment.
fn blocks_of(recording: &Recording, end: i64) -> Vec<(u64, i64, usize)> {
    let (mut reader, mut offset, mut blocks) = (recording.reader(0), segment::MARKED_DATA_START, Vec::new());
    while let Some((at, bytes, _)) = reader.next_block(end).unwrap() {
        blocks.push((offset, at, bytes.len()));
        offset += (BLOCK_HEADER_LENGTH + bytes.len()) as u64;
    }
    blocks
}

#[test]
fn damage_below_blocks_that_verify_is_told_from_a_torn_tail_and_repaired_until_the_log_holds_its_end_again() {
    for damage in ["bad sector", "misdirected last write", "last synced blocks gone"] {
        let dir = scratch(&format!("repair-{}", damage.replace(' ', "-")));
        let log = log_of(1, 40);
        let end = log.producer_position();
        let (mut recording, _) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        record(&mut recording, &log, end, 512);
        recording.sync().unwrap();
        let blocks = blocks_of(&recording, end);
        drop(recording);
        let segment = dir.join(segment::file_name(0));
        let file = std::fs::OpenOptions::new().write(true).read(true).open(&segment).unwrap();
        let (bad_offset, _, _) = blocks[2];
        let valid_end = match damage {
            "bad sector" => {
                std::os::unix::fs::FileExt::write_all_at(&file, &[0x5A; 16], bad_offset + 40).unwrap();
                blocks[2].1
            }
            "last synced blocks gone" => {
                // The last two blocks lost after they were synced (a misdirected write over them, then the
                // file cut by a torn tail): nothing past them verifies, and only the sync mark tells it from
                // a torn tail (the node simulator's seed 1796375184919812163).
                let (offset, at, _) = blocks[blocks.len() - 2];
                file.set_len(offset).unwrap();
                at
            }
            _ => {
                // The last block's write landed on a sector below; where it was asked for keeps what it
                // had: nothing (the file ends before it).
                let &(last_offset, _, _) = blocks.last().unwrap();
                let bytes = std::fs::read(&segment).unwrap()[last_offset as usize..].to_vec();
                file.set_len(last_offset).unwrap();
                std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 1024).unwrap();
                blocks.iter().rev().find(|(offset, _, _)| *offset <= 1024).unwrap().1
            }
        };
        drop(file);
        let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        assert!(report.damaged.is_some(), "{damage}: {report:?}");
        assert_eq!((recording.end(), report.repair, recording.repair()), (valid_end, Some(end), Some(end)), "{damage}");
        drop(recording);
        // The repair outlives a restart: the recording no longer shows the damage.
        let (mut recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        assert_eq!((report.damaged, report.repair), (None, Some(end)), "{damage}");
        // The log fetched back up to its end and synced: repaired, for good.
        record(&mut recording, &log, end, 512);
        recording.sync().unwrap();
        recording.end_repair_if_synced(end - 32);
        assert_eq!(recording.repair(), Some(end), "not yet synced up to its end");
        recording.end_repair_if_synced(end);
        assert_eq!(recording.repair(), None);
        drop(recording);
        let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        assert_eq!((recording.end(), report.repair), (end, None), "{damage}");
        // A repair also ends when a leader cuts the log back (nothing past the cut was committed).
        drop(recording);
        repair::store(&*SharedDisk::os(), &dir, end + 4096).unwrap();
        let (mut recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        assert_eq!(report.repair, Some(end + 4096));
        recording.truncate(blocks[1].1).unwrap();
        assert_eq!(recording.repair(), None);
        assert!(!dir.join(repair::REPAIR_FILE).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn damage_in_an_earlier_segment_cuts_the_recording_there_and_the_later_segments_count_as_held() {
    let dir = scratch("repair-earlier");
    let log = log_of(1, 60);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    record(&mut recording, &log, end, 512);
    recording.sync().unwrap();
    assert!(recording.segment_count() > 3);
    let bases = list_segments(&*SharedDisk::os(), &dir).unwrap();
    drop(recording);
    // A sector of the second segment overwritten: its blocks from there on, and every later segment, go.
    let segment = dir.join(segment::file_name(bases[1]));
    let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xC3; 512], 1024).unwrap();
    drop(file);
    let (recording, report) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    assert!(report.damaged.is_some(), "{report:?}");
    assert_eq!((recording.segment_count(), report.repair), (2, Some(end)), "{report:?}");
    assert!(recording.end() > bases[1] && recording.end() < bases[2], "{}", recording.end());
    assert_eq!(read_all(&recording, 0, recording.end()).unwrap(), log_bytes(&log, 0, recording.end()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_index_or_segment_header_or_a_foreign_recording_stops_the_open_naming_the_file() {
    let dir = scratch("damaged");
    let log = log_of(2, 10);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
    record(&mut recording, &log, end, 4096);
    drop(recording);
    let other = RecordingIdentity { membership: 43, ..IDENTITY };
    let e = Recording::open(config(&dir, 1 << 20), other).unwrap_err();
    assert!(e.message.contains("another cluster"), "{e}");
    let term = RecordingIdentity { term_length: 131072, ..IDENTITY };
    let e = Recording::open(config(&dir, 1 << 20), term).unwrap_err();
    assert!(e.to_string().contains("term length"), "{e}");
    // A flipped byte in the index.
    let index = dir.join(index::INDEX_FILE);
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[60] ^= 1;
    std::fs::write(&index, &bytes).unwrap();
    let e = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap_err();
    assert!(e.path.ends_with("index.dat") && e.message.contains("checksum"), "{e}");
    assert!(e.message.contains("delete index.dat"), "says what to do: {e}");
    // Deleted, it is rebuilt from the segments' markers.
    std::fs::remove_file(&index).unwrap();
    let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
    assert!(report.index_rebuilt);
    assert_eq!(recording.term_history().unwrap().terms().len(), 2);
    drop(recording);
    // A segment header flipped.
    let segment = dir.join(segment::file_name(0));
    let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xEE], 30).unwrap();
    let e = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap_err();
    assert!(e.path == segment && e.message.contains("checksum"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_block_in_an_earlier_segment_is_an_error_for_a_reader_never_bytes() {
    let dir = scratch("reader-damage");
    let log = log_of(1, 60);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    record(&mut recording, &log, end, 1024);
    let segment = dir.join(segment::file_name(0));
    let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0x55], 200).unwrap();
    let e = read_all(&recording, 0, end).unwrap_err();
    assert!(e.path == segment && e.message.contains("checksum"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cut_rewrites_the_block_across_it_and_forgets_later_terms() {
    let dir = scratch("cut");
    let log = log_of(3, 20);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 3000), IDENTITY).unwrap();
    record(&mut recording, &log, end, 2048);
    let terms = recording.term_history().unwrap();
    let third = terms.terms()[2].base_position;
    // A frame boundary inside a block of term 2: its marker (64 bytes aligned), then 3 messages (160 each).
    let cut = terms.terms()[1].base_position + 64 + 3 * 160;
    recording.truncate(cut).unwrap();
    assert_eq!(recording.end(), cut);
    assert!(third > cut);
    assert_eq!(recording.term_history().unwrap().terms().len(), 2);
    assert_eq!(read_all(&recording, 0, cut).unwrap(), log_bytes(&log, 0, cut));
    // It goes on from the cut, and reads back whole after a reopen.
    let other = log_of(3, 20);
    record(&mut recording, &other, end, 2048);
    drop(recording);
    let (recording, report) = Recording::open(config(&dir, 3000), IDENTITY).unwrap();
    assert_eq!((recording.end(), report.torn), (end, None));
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(&other, 0, end));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compaction_deletes_whole_segments_below_a_position_and_a_reset_starts_over() {
    let dir = scratch("compact");
    let log = log_of(2, 60);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    record(&mut recording, &log, end, 1024);
    let segments = recording.segment_count();
    let start = recording.delete_before(5000).unwrap();
    assert!(start > 0 && start <= 5000, "{start}");
    assert!(recording.segment_count() < segments);
    let e = read_all(&recording, 0, end).unwrap_err();
    assert!(e.message.contains("compacted"), "{e}");
    assert_eq!(read_all(&recording, start, end).unwrap(), log_bytes(&log, start, end));
    drop(recording);
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    assert_eq!((recording.start(), recording.end()), (start, end));
    let history = recording.term_history().unwrap();
    assert_eq!(history.terms()[0].base_position, 0, "the compacted start is labelled with its term, from 0");
    assert_eq!(history.terms()[0].leadership_term_id, 1);
    recording.reset(1 << 20, 5).unwrap();
    assert_eq!((recording.start(), recording.end(), recording.segment_count()), (1 << 20, 1 << 20, 0));
    drop(recording);
    let (recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    assert_eq!(recording.end(), 1 << 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reset_at_an_installed_snapshot_keeps_the_leaders_terms_below_it_across_a_restart() {
    let dir = scratch("reset-history");
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    recording.reset_with_history(1 << 20, 5, &[(0, 1), (4096, 3), (1 << 19, 5)]).unwrap();
    drop(recording);
    let (recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    let terms: Vec<(i64, i64)> =
        recording.term_history().unwrap().terms().iter().map(|t| (t.base_position, t.leadership_term_id)).collect();
    assert_eq!(terms, [(0, 1), (4096, 3), (1 << 19, 5)], "which term each position below the snapshot is in");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_segment_of_an_older_block_format_is_refused_not_cut() {
    for (older, format) in [(*b"qcb2", "CRC-32"), (*b"qcbk", "BLAKE3")] {
        let dir = scratch(&format!("older-{}", String::from_utf8_lossy(&older)));
        let log = log_of(1, 30);
        let end = log.producer_position();
        let (mut recording, _) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
        record(&mut recording, &log, end, 1024);
        drop(recording);
        // The first block's magic number as an older version wrote it.
        let segment = dir.join(segment::file_name(0));
        let length = std::fs::metadata(&segment).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &older, segment::MARKED_DATA_START).unwrap();
        drop(file);
        let e = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap_err();
        assert!(e.path == segment && e.message.contains("older format") && e.message.contains(format), "{e}");
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), length, "nothing was cut");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A recording in a new scratch directory `name` holding, synced, the first half of a log of two terms (to
/// a message's end): what a test of an older format rewrites. Returns the directory, the log, where the
/// recorded half ends and where the log ends.
fn half_recorded(name: &str) -> (PathBuf, LogBuffer, i64, i64) {
    let dir = scratch(name);
    let log = log_of(2, 60);
    let end = log.producer_position();
    let middle = crate::shm::log_buffer::scan(&log, 0, (end / 2 / 32 * 32) as usize).available as i64;
    let (mut recording, _) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
    record(&mut recording, &log, middle, 1024);
    recording.sync().unwrap();
    (dir, log, middle, end)
}

/// Opens the recording in `dir` again, which must end at `middle`, records the rest of `log` to `end` in
/// this version's format and checks that all of it reads back; returns what the open reported.
fn reopen_and_finish(dir: &Path, log: &LogBuffer, middle: i64, end: i64) -> OpenReport {
    let (mut recording, report) = Recording::open(config(dir, 1 << 20), IDENTITY).unwrap();
    assert_eq!(recording.end(), middle, "{report:?}");
    record(&mut recording, log, end, 1024);
    recording.sync().unwrap();
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(log, 0, end));
    report
}

/// A segment the version before wrote (`qcb3` blocks, BLAKE3) is read back, appended to in this version's
/// format, and a torn block after both is still cut.
#[test]
fn a_segment_of_the_previous_block_format_is_read_and_appended_to() {
    let (dir, log, middle, end) = half_recorded("previous-format");
    // Every block rewritten as the version before wrote it.
    let segment = dir.join(segment::file_name(0));
    let file = crate::storage::disk::SharedDisk::os().open(&segment).unwrap();
    let length = file.len().unwrap();
    let mut reader = segment::BlockReader::new(0, segment::MARKED_DATA_START);
    let mut payload = Vec::new();
    let mut rewritten = 0;
    loop {
        let at = reader.offset;
        let Some(header) = reader.next(&*file, length, &mut payload).unwrap() else { break };
        file.write_all_at(bytemuck::bytes_of(&header.in_blake3_format(&payload)), at).unwrap();
        rewritten += 1;
    }
    assert!(rewritten > 1);
    drop(file);
    let report = reopen_and_finish(&dir, &log, middle, end);
    assert_eq!(report.torn, None);
    // A torn last block (of this version's format) is cut back to the blocks before it.
    let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    let length = file.metadata().unwrap().len();
    file.set_len(length - 8).unwrap();
    drop(file);
    let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
    assert!(report.torn.is_some() && recording.end() > middle && recording.end() < end, "{report:?}");
    assert_eq!(read_all(&recording, 0, recording.end()).unwrap(), log_bytes(&log, 0, recording.end()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by the node simulator (disk schedule): a member stopped while its newest segment had no whole
/// header on the disk (its creation failed, or the header's sync did); it must start without that
/// segment, not refuse to start over it.
#[test]
fn a_last_segment_shorter_than_its_header_is_removed_at_open() {
    let dir = scratch("unmade");
    let log = log_of(2, 40);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    record(&mut recording, &log, end, 1024);
    recording.sync().unwrap();
    let segments = recording.segment_count();
    drop(recording);
    std::fs::write(dir.join(segment::file_name(end)), [0u8; 10]).unwrap();
    let (again, report) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    assert_eq!((again.end(), again.segment_count()), (end, segments));
    assert!(report.torn.as_deref().is_some_and(|t| t.contains("shorter than a segment header")), "{report:?}");
    assert!(!dir.join(segment::file_name(end)).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reset to a snapshot makes its new start durable before it removes the old segments; a member that
/// stopped in between finds them, all below the start, and the open removes them (found by the node
/// simulator: seed 1796356595306429662).
#[test]
fn segments_a_stopped_reset_left_below_the_start_are_removed_at_open() {
    let dir = scratch("reset-leftovers");
    let log = log_of(2, 60);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    record(&mut recording, &log, end, 1024);
    assert!(recording.segment_count() > 1);
    let kept = scratch("reset-leftovers-kept");
    std::fs::create_dir_all(&kept).unwrap();
    let segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    for segment in &segments {
        std::fs::copy(segment, kept.join(segment.file_name().unwrap())).unwrap();
    }
    let snapshot = end + 4096;
    recording.reset_with_history(snapshot, 2, &[(0, 1)]).unwrap();
    drop(recording);
    // The segments as a reset stopped after its new index leaves them.
    for segment in &segments {
        std::fs::copy(kept.join(segment.file_name().unwrap()), segment).unwrap();
    }
    let (recording, _) = Recording::open(config(&dir, 2048), IDENTITY).unwrap();
    assert_eq!((recording.start(), recording.end(), recording.segment_count()), (snapshot, snapshot, 0));
    assert!(segments.iter().all(|s| !s.exists()), "every segment below the start is gone");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&kept);
}

#[test]
fn configuration_entries_are_indexed_kept_across_a_reopen_and_cut_with_the_log() {
    use crate::cluster::configuration::{Configuration, MemberEndpoints};
    use crate::cluster::consensus_core::{Membership, MembershipChange};
    let dir = scratch("configurations");
    let at = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let endpoints = |id: i32| MemberEndpoints { id, log: at(1000 + id as u16), consensus: at(2000), client: at(3000) };
    let added = Membership::initial(&[0, 1, 2]).apply(MembershipChange::AddLearner(3)).unwrap();
    let promoted = added.apply(MembershipChange::Promote(3)).unwrap();
    let known: Vec<_> = (0..4).map(endpoints).collect();
    let log = LogBuffer::create_anonymous(LogConfig { stream_id: 1001, ..LogConfig::new(65536, 1408) }).unwrap();
    let mut appender = log.appender().unwrap();
    appender.set_limit(i64::MAX);
    appender.append_frame(&1i64.to_le_bytes(), UNFRAGMENTED | TERM_START_FLAG, 0).unwrap();
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for membership in [&added, &promoted] {
        starts.push(appender.append(&[7; 100]).unwrap());
        let entry = Configuration::new(membership.clone(), &known).unwrap();
        ends.push(appender.append_frame(&entry.encode(), UNFRAGMENTED | TERM_START_FLAG, 0).unwrap());
    }
    let end = appender.append(&[8; 100]).unwrap();
    let (mut recording, _) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    record(&mut recording, &log, end, 256);
    let decoded = |r: &Recording| -> Vec<(i64, u64)> {
        let entries = &r.index().configurations;
        entries.iter().map(|(end, payload)| (*end, Configuration::decode(payload).unwrap().membership().id)).collect()
    };
    assert_eq!(decoded(&recording), vec![(ends[0], 1), (ends[1], 2)]);
    assert_eq!(recording.index().terms.len(), 1, "a configuration entry is no term start");
    drop(recording);
    let (mut recording, _) = Recording::open(config(&dir, 4096), IDENTITY).unwrap();
    assert_eq!(decoded(&recording), vec![(ends[0], 1), (ends[1], 2)], "kept across a reopen");
    recording.truncate(starts[1]).unwrap();
    assert_eq!(decoded(&recording), vec![(ends[0], 1)], "the cut entry goes with the log");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment the version before began (`qcseg001`: blocks right after the header, no sync marks) is read
/// back and appended to; blocks cut from its end are then a torn tail, as that version knew them.
#[test]
fn a_segment_without_sync_marks_is_read_and_appended_to() {
    let (dir, log, middle, end) = half_recorded("unmarked-segment");
    let path = dir.join(segment::file_name(0));
    let bytes = std::fs::read(&path).unwrap();
    let header: segment::SegmentHeader =
        bytemuck::pod_read_unaligned(&bytes[..segment::SEGMENT_HEADER_LENGTH as usize]);
    let mut older = bytemuck::bytes_of(&header.in_unmarked_format()).to_vec();
    older.extend_from_slice(&bytes[segment::MARKED_DATA_START as usize..]);
    std::fs::write(&path, &older).unwrap();
    let report = reopen_and_finish(&dir, &log, middle, end);
    assert_eq!((report.torn, report.damaged), (None, None));
    // No mark to say the last block was synced: cut from the file, it is a torn tail.
    let length = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(length - 7).unwrap();
    let (recording, report) = Recording::open(config(&dir, 1 << 20), IDENTITY).unwrap();
    assert!(report.torn.is_some() && report.damaged.is_none() && recording.end() < end, "{report:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The file lengths of a recording's segments, oldest first.
fn segment_lengths(recording: &Recording) -> Vec<u64> {
    let length = |base: &i64| std::fs::metadata(recording.segment_path(*base)).unwrap().len();
    recording.bases.iter().map(length).collect()
}

#[test]
fn zeros_written_ahead_are_written_over_cut_at_a_roll_a_cut_and_a_close_and_a_torn_tail_after_a_crash() {
    let dir = scratch("write-ahead");
    let log = log_of(2, 60);
    let end = log.producer_position();
    let (mut recording, _) = Recording::open(config(&dir, 8192), IDENTITY).unwrap();
    recording.set_write_ahead(true);
    record(&mut recording, &log, 1024, 1024);
    let ahead = segment_lengths(&recording);
    assert_eq!(ahead, vec![segment::WRITE_AHEAD_STEP], "the first block wrote zeros ahead of it");
    let first_block_end = segment::MARKED_DATA_START + (BLOCK_HEADER_LENGTH + 1024) as u64;
    assert_eq!(recording.take_cost().zeros_ahead, segment::WRITE_AHEAD_STEP - first_block_end, "counted");
    record(&mut recording, &log, 4064, 1024);
    assert_eq!(segment_lengths(&recording), ahead, "blocks written over the zeros: the length stays");
    record(&mut recording, &log, end, 1024);
    let lengths = segment_lengths(&recording);
    assert!(lengths.len() > 2, "8 KiB segments roll: {lengths:?}");
    let (last, finished) = lengths.split_last().unwrap();
    assert_eq!(*last, segment::WRITE_AHEAD_STEP, "the segment being written goes on with zeros");
    assert!(finished.iter().all(|&l| l < 8192 + 1024 + 64), "a roll cuts the zeros: {finished:?}");
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(&log, 0, end));

    // A cut in the last segment (the second term's 55th message), then the log again.
    let cut = end - 5 * 160;
    recording.truncate(cut).unwrap();
    assert!(*segment_lengths(&recording).last().unwrap() < 8192, "the cut cuts the zeros too");
    assert_eq!(read_all(&recording, 0, cut).unwrap(), log_bytes(&log, 0, cut));
    record(&mut recording, &log, end, 1024);
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(&log, 0, end));

    // A crash: the zeros stay, and the next open reads them as a torn tail and cuts them.
    recording.sync().unwrap();
    let zeros = *segment_lengths(&recording).last().unwrap();
    drop(recording);
    let (mut recording, report) = Recording::open(config(&dir, 8192), IDENTITY).unwrap();
    assert_eq!(recording.end(), end);
    assert!(report.torn.as_deref().is_some_and(|t| t.contains("zeros where a block would start")), "{report:?}");
    assert!(report.torn_bytes > 0 && report.torn_bytes < zeros, "{report:?}");
    assert_eq!((report.damaged, report.repair), (None, None), "zeros are no damage");
    assert_eq!(read_all(&recording, 0, end).unwrap(), log_bytes(&log, 0, end));

    // A clean close cuts them: the next open finds nothing torn.
    let more = log_of(3, 60);
    let further = more.producer_position();
    recording.set_write_ahead(true);
    record(&mut recording, &more, further, 1024);
    assert_eq!(*segment_lengths(&recording).last().unwrap() % segment::WRITE_AHEAD_STEP, 0);
    recording.cut_zeros_ahead().unwrap();
    recording.sync().unwrap();
    drop(recording);
    let (recording, report) = Recording::open(config(&dir, 8192), IDENTITY).unwrap();
    assert_eq!((recording.end(), report.torn), (further, None));
    assert_eq!(read_all(&recording, 0, further).unwrap(), log_bytes(&more, 0, further));
    let _ = std::fs::remove_dir_all(&dir);
}
