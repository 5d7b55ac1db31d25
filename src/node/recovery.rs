//! A member's log kept across a crash of its process: the consensus agent keeps a hard link to the file
//! of its current log in the data directory, and a restart reads the log back from it.
//!
//! The node directory of a process that died is stale and is emptied at the next start, but a file linked
//! from elsewhere outlives that. So `member.log` in the data directory is always the member's current log
//! (the log it leads in, or the image of the log it follows), and `member.log.meta` says where that log
//! starts, the leadership term of its first byte, and which cluster and stream it belongs to. On start,
//! a node whose data directory has both reads the log from its start to the end of its contiguous frames,
//! labels its bytes by term from the term-start markers, and starts its consensus core with that log: it
//! votes with its real (term, position) and rejoins as a follower, truncating what was never committed.
//!
//! What is not recovered: a log that does not start at position 0 (the application, restarted empty,
//! could not be rebuilt from it), and anything the files do not say (they live in `/dev/shm` with the
//! node directory's default; a machine restart loses them). The durable log is issue "Keep the log".

use std::path::Path;

use crate::consensus_core::{TermBase, TermHistory};
use crate::frame::{term_start_of, DataHeader};
use crate::log_buffer::{position, position_bits_to_shift, ConsumerPosition, LogBuffer, LogReader};

/// The link to the member's current log, in the data directory.
pub(super) const MEMBER_LOG: &str = "member.log";
/// What the link's log is, beside it.
const MEMBER_LOG_META: &str = "member.log.meta";

/// Where a member's log starts and whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogMeta {
    pub(super) start: i64,
    pub(super) start_term: i64,
    pub(super) stream_id: i32,
    pub(super) membership: i64,
}

/// A log read back at start.
pub(super) struct Recovered {
    pub(super) log: LogBuffer,
    /// The slot the node's reader of committed entries reads it from, at 0.
    pub(super) consumer: ConsumerPosition,
    pub(super) history: TermHistory,
    pub(super) end: i64,
}

/// Links `file` as the member's current log, described by `meta`. Failures are returned for a log line:
/// the member goes on (a crash then loses the log, as before the link existed).
pub(super) fn record(data_dir: &Path, file: &Path, meta: LogMeta) -> std::io::Result<()> {
    let link = data_dir.join(MEMBER_LOG);
    let fresh = data_dir.join("member.log.new");
    let _ = std::fs::remove_file(&fresh);
    std::fs::hard_link(file, &fresh)?;
    std::fs::rename(&fresh, &link)?;
    let text = format!(
        "start={} start_term={} stream_id={} membership={}\n",
        meta.start, meta.start_term, meta.stream_id, meta.membership
    );
    let meta_fresh = data_dir.join("member.log.meta.new");
    std::fs::write(&meta_fresh, text)?;
    std::fs::rename(meta_fresh, data_dir.join(MEMBER_LOG_META))
}

/// Forgets the member's log (a clean shutdown keeps nothing to recover: the application closed cleanly
/// with its state).
pub(super) fn forget(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(MEMBER_LOG));
    let _ = std::fs::remove_file(data_dir.join(MEMBER_LOG_META));
}

/// Reads the member's log back, if the data directory holds one of this cluster and stream that starts
/// at 0; `Err` says why a log that is there is not used (for a log line), `Ok(None)` that there is none.
pub(super) fn recover(data_dir: &Path, stream_id: i32, membership: i64) -> Result<Option<Recovered>, String> {
    let link = data_dir.join(MEMBER_LOG);
    let Ok(text) = std::fs::read_to_string(data_dir.join(MEMBER_LOG_META)) else {
        return Ok(None);
    };
    if !link.exists() {
        return Ok(None);
    }
    let meta =
        parse(&text).ok_or_else(|| format!("{}: unreadable: {text:?}", data_dir.join(MEMBER_LOG_META).display()))?;
    if meta.stream_id != stream_id || meta.membership != membership {
        return Err(format!("{}: written by another cluster or stream; not used", link.display()));
    }
    if meta.start != 0 {
        return Err(format!(
            "{}: starts at position {}, not 0: the application could not be rebuilt from it; not used",
            link.display(),
            meta.start
        ));
    }
    let log = LogBuffer::open(&link).map_err(|e| format!("{}: {e}", link.display()))?;
    let (history, end) =
        scan(&log, meta).ok_or_else(|| format!("{}: its terms are out of order; not used", link.display()))?;
    let consumer = log.register_consumer(0).map_err(|e| format!("{}: cannot be read again: {e}", link.display()))?;
    Ok(Some(Recovered { log, consumer, history, end }))
}

fn parse(text: &str) -> Option<LogMeta> {
    let mut meta = LogMeta { start: -1, start_term: -1, stream_id: 0, membership: 0 };
    for field in text.split_whitespace() {
        let (key, value) = field.split_once('=')?;
        match key {
            "start" => meta.start = value.parse().ok()?,
            "start_term" => meta.start_term = value.parse().ok()?,
            "stream_id" => meta.stream_id = value.parse().ok()?,
            "membership" => meta.membership = value.parse().ok()?,
            _ => return None,
        }
    }
    (meta.start >= 0 && meta.start_term >= 0).then_some(meta)
}

/// Walks the log's contiguous frames from its start: where they end, and the terms of its bytes.
fn scan(log: &LogBuffer, meta: LogMeta) -> Option<(TermHistory, i64)> {
    let reader = LogReader::new(log);
    let (initial, bits) = (log.config().initial_term_id, position_bits_to_shift(log.term_length()));
    let mut terms: Vec<TermBase> = Vec::new();
    if meta.start_term > 0 {
        terms.push(TermBase { leadership_term_id: meta.start_term, base_position: meta.start });
    }
    let mut at = meta.start;
    loop {
        let next = reader.poll_bounded(at, i64::MAX, 1024, |payload, header: &DataHeader| {
            if let Some(term) = term_start_of(header.flags, payload) {
                let base = position(header.term_id, header.term_offset as usize, initial, bits);
                match terms.last_mut() {
                    Some(last) if last.base_position == base => last.leadership_term_id = term,
                    _ => terms.push(TermBase { leadership_term_id: term, base_position: base }),
                }
            }
        });
        if next == at {
            break;
        }
        at = next;
    }
    if at == meta.start {
        return Some((TermHistory::new(), at));
    }
    Some((TermHistory::from_terms(terms, at)?, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{TERM_START_FLAG, UNFRAGMENTED};
    use crate::log_buffer::LogConfig;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("qc-recovery-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A log at `path` of two terms: term 1's marker and 3 messages, term 2's marker and 2 messages.
    fn two_terms(path: &Path) -> (i64, i64) {
        let log = LogBuffer::create(path, LogConfig { session_id: 7, stream_id: 1001, ..LogConfig::new(65536, 1408) })
            .unwrap();
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        appender.append_frame(&1i64.to_le_bytes(), UNFRAGMENTED | TERM_START_FLAG, 0).unwrap();
        for _ in 0..3 {
            appender.append(b"entry of term 1").unwrap();
        }
        let second = appender.position();
        appender.append_frame(&2i64.to_le_bytes(), UNFRAGMENTED | TERM_START_FLAG, 0).unwrap();
        for _ in 0..2 {
            appender.append(b"entry of term 2").unwrap();
        }
        (second, appender.position())
    }

    #[test]
    fn a_kept_log_is_read_back_with_its_terms_and_end() {
        let dir = scratch("roundtrip");
        let file = dir.join("log-2.dat");
        let (second, end) = two_terms(&file);
        let meta = LogMeta { start: 0, start_term: 1, stream_id: 1001, membership: 42 };
        record(&dir, &file, meta).unwrap();
        // The node directory's file goes (a stale directory emptied); the link keeps the log.
        std::fs::remove_file(&file).unwrap();
        let recovered = recover(&dir, 1001, 42).unwrap().expect("a kept log");
        assert_eq!(recovered.end, end);
        let terms = recovered.history.terms();
        assert_eq!(terms.len(), 2);
        assert_eq!((terms[0].leadership_term_id, terms[0].base_position), (1, 0));
        assert_eq!((terms[1].leadership_term_id, terms[1].base_position), (2, second));
        forget(&dir);
        assert!(recover(&dir, 1001, 42).unwrap().is_none(), "a clean shutdown forgets it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_log_of_another_cluster_or_not_from_the_start_is_not_used() {
        let dir = scratch("refused");
        let file = dir.join("log-1.dat");
        two_terms(&file);
        record(&dir, &file, LogMeta { start: 0, start_term: 1, stream_id: 1001, membership: 42 }).unwrap();
        let other = recover(&dir, 1001, 43).err().expect("another member list is refused");
        assert!(other.contains("another cluster"), "{other}");
        record(&dir, &file, LogMeta { start: 4096, start_term: 1, stream_id: 1001, membership: 42 }).unwrap();
        let late = recover(&dir, 1001, 42).err().expect("a log from 4096 is refused");
        assert!(late.contains("not 0"), "{late}");
        std::fs::write(dir.join(MEMBER_LOG_META), "start=zero").unwrap();
        assert!(recover(&dir, 1001, 42).is_err(), "an unreadable meta file is reported, not trusted");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
