//! What a restart of a stopped member would read, replay and catch up (`qc-cluster recovery-plan`), from
//! its data directory.
//!
//! Read with the engine's own reading code, which changes nothing: the vote file
//! ([`VoteFile::read_stored`]), the recording ([`Recording::inspect`]: the same index load, header checks
//! and block walks as the node's start, saying what the start would cut or refuse) and the snapshots
//! ([`SnapshotStore::open_read_only`], the newest that verifies as a restore would pick it). A data
//! directory whose node is running (it holds `data.lock`) is refused: its files are changing.
//!
//! The plan: the member starts its consensus core at the end of its recorded log, in the newer of its
//! vote file's term and its log's last term; its application restores the newest snapshot that verifies
//! (`Node::restore`) and replays the recording from there to its end as the commit position allows;
//! anything past the end comes from the leader (replicated from the leader's log in memory, or a
//! catch-up from the leader's recording and snapshot when it is further behind). Uncommitted bytes at
//! the end of the recording may be cut by a new leader whose log differs there.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quorumcast::unstable::disk::{OsDisk, SharedDisk, DATA_LOCK_FILE};
use quorumcast::unstable::recording::{Inspection, Recording, SegmentFate};
use quorumcast::unstable::snapshot::{SnapshotIdentity, SnapshotInfo, SnapshotStore};
use quorumcast::unstable::vote_file::{StoredVote, VoteFile};
use quorumcast_driver::shm::directory::{DirectoryLock, DirectoryStatus};
use serde_json::{json, Value};

/// The snapshots of a data directory: every file listed, and the one a restore would load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshots {
    /// Every snapshot file, oldest first, as its header says (not verified).
    pub listed: Vec<SnapshotInfo>,
    /// The newest that verifies entirely (header, identity, length, state hash).
    pub newest: Option<SnapshotInfo>,
    /// Why each newer one would be skipped.
    pub skipped: Vec<String>,
}

/// What a restart of the member whose data directory was read would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The persisted term and vote (`None`: never voted, a new member), or why it cannot be read.
    pub vote: Result<Option<StoredVote>, String>,
    /// The recording as read, with what a start would cut.
    pub recording: Inspection,
    /// The snapshots (`None` without a recording to say whose they must be).
    pub snapshots: Option<Snapshots>,
    /// The leadership term the member restarts in: the newer of its vote's and its log's last.
    pub restart_term: i64,
    /// Where the replay into the state machine starts: the snapshot's position, or the recording's start.
    pub replay_from: i64,
    /// Where the member's log restarts (the recording's end): everything past it comes from the leader.
    pub restart_position: i64,
    /// Why the member would not start, or its application could not restore (each with what to do).
    pub refusals: Vec<String>,
    /// What the reader could not check (a directory without `data.lock`, written by an older node).
    pub notes: Vec<String>,
}

/// Reads the data directory `data_dir` of a stopped member, its recording in `recording_dir` (default
/// `<data_dir>/recording`, as a node has it unless `storage.recording_dir` moves it). `Err` for a missing
/// directory or one whose node runs.
pub fn plan(data_dir: &Path, recording_dir: Option<&Path>) -> Result<RecoveryPlan, String> {
    let mut notes = Vec::new();
    match DirectoryLock::status(data_dir, DATA_LOCK_FILE) {
        DirectoryStatus::Missing => return Err(format!("no data directory at {}", data_dir.display())),
        DirectoryStatus::Running(owner) => {
            return Err(format!(
                "a node is running on the data directory {} ({owner}, holding {DATA_LOCK_FILE}): stop it first; \
                 recovery-plan reads a stopped member's directory, whose files do not change under it",
                data_dir.display()
            ))
        }
        DirectoryStatus::NoLockFile => notes.push(format!(
            "{} has no {DATA_LOCK_FILE} (a node of an earlier version wrote it, or none ever ran there): whether \
             a node runs on it cannot be told; make sure none does",
            data_dir.display()
        )),
        DirectoryStatus::Stale(_) => {}
    }
    let disk = OsDisk;
    let vote = VoteFile::read_stored(&disk, &data_dir.join("vote.dat")).map_err(|e| e.to_string());
    let recording_dir = recording_dir.map_or_else(|| data_dir.join("recording"), Path::to_path_buf);
    let recording = Recording::inspect(&disk, &recording_dir).map_err(|e| e.to_string())?;
    let snapshots = recording
        .identity
        .map(|identity| {
            let identity = SnapshotIdentity { membership: identity.membership, stream_id: identity.stream_id };
            let store = SnapshotStore::open_read_only(SharedDisk::os(), &data_dir.join("snapshots"), identity);
            let listed = store.list().map_err(|e| e.to_string())?;
            let (newest, skipped) = store.newest().map_err(|e| e.to_string())?;
            Ok::<_, String>(Snapshots { listed, newest, skipped })
        })
        .transpose()?;
    let mut refusals: Vec<String> = recording.refusal.iter().cloned().collect();
    match (&vote, recording.identity) {
        (Err(why), _) => refusals.push(why.clone()),
        // The node loads its vote file only if its own cluster wrote it.
        (Ok(Some(v)), Some(identity)) if v.membership != identity.membership => refusals.push(format!(
            "vote file {}: written by member {} of cluster {:#018x}, the recording is of cluster {:#018x}; if this \
             directory belongs to another member or cluster, give the node its own",
            data_dir.join("vote.dat").display(),
            v.member_id,
            v.membership,
            identity.membership
        )),
        _ => {}
    }
    let start = recording.index.start_position;
    let newest = snapshots.as_ref().and_then(|s| s.newest.as_ref());
    let replay_from = match newest {
        Some(info) if info.position < start => {
            refusals.push(format!(
                "{}: at position {}, below the recorded log's start {start}; the log between is gone: move the \
                 data directory away to start this member empty",
                info.path.display(),
                info.position
            ));
            start
        }
        Some(info) => info.position,
        None if start > 0 => {
            refusals.push(format!(
                "no snapshot verifies, and the recorded log starts at {start}: the state before it cannot be \
                 rebuilt; restore a snapshot into {}, or move the data directory away to start this member empty",
                data_dir.join("snapshots").display()
            ));
            start
        }
        None => start,
    };
    let voted_term = vote.as_ref().ok().and_then(|v| v.map(|v| v.vote.leadership_term_id)).unwrap_or(0);
    let log_term = recording.term_history.as_ref().map_or(0, |h| h.last_term_id());
    Ok(RecoveryPlan {
        data_dir: data_dir.to_path_buf(),
        vote,
        restart_term: voted_term.max(log_term),
        replay_from,
        restart_position: recording.end,
        snapshots,
        recording,
        refusals,
        notes,
    })
}

impl RecoveryPlan {
    /// Bytes of recorded log replayed into the state machine (from the snapshot, or the start, to the end).
    pub fn replay_bytes(&self) -> i64 {
        (self.restart_position - self.replay_from).max(0)
    }
}

/// What a restart does with a segment, in words.
fn fate(fate: SegmentFate) -> &'static str {
    match fate {
        SegmentFate::Kept => "kept",
        SegmentFate::BelowStart => "removed (below the recording's start)",
        SegmentFate::Unmade => "removed (shorter than its header)",
        SegmentFate::PastCut => "removed (past the first bad block of an earlier segment)",
    }
}

/// The plan as text for an operator.
pub fn render(plan: &RecoveryPlan) -> String {
    let mut out = String::new();
    let r = &plan.recording;
    let _ = writeln!(out, "recovery plan for the data directory {}", plan.data_dir.display());
    match &plan.vote {
        Ok(Some(v)) => {
            let voted = v.vote.voted_for.map_or("nobody".into(), |m| format!("member {m}"));
            let _ = writeln!(
                out,
                "vote file: member {} of cluster {:#018x}, term {}, voted for {voted}",
                v.member_id, v.membership, v.vote.leadership_term_id
            );
        }
        Ok(None) => out.push_str("vote file: none (a member that never voted)\n"),
        Err(why) => {
            let _ = writeln!(out, "vote file: unreadable: {why}");
        }
    }
    let _ = writeln!(out, "recording {}:", r.dir.display());
    match (r.index_format, r.index_missing) {
        (Some(format), _) => {
            let _ = writeln!(out, "  index: format {format}, recording starts at {}", r.index.start_position);
        }
        (None, true) => out.push_str("  index: missing, rebuilt at restart from the segments' term-start markers\n"),
        (None, false) if r.segments.is_empty() => out.push_str("  index: none (an empty recording)\n"),
        (None, false) => out.push_str("  index: refused (below)\n"),
    }
    let terms: Vec<String> = r
        .term_history
        .as_ref()
        .map(|h| h.terms().iter().map(|t| format!("{} from {}", t.leadership_term_id, t.base_position)).collect())
        .unwrap_or_default();
    let _ = writeln!(out, "  term history: {}", if terms.is_empty() { "empty".into() } else { terms.join(", ") });
    for s in &r.segments {
        let name = s.path.file_name().map_or(s.path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let _ = writeln!(
            out,
            "  {name}: positions {}..{}, {} bytes, {} blocks valid, {}",
            s.base_position,
            s.end_position,
            s.file_length,
            s.blocks,
            fate(s.fate)
        );
        if let Some(why) = &s.damage {
            let _ = writeln!(
                out,
                "    damaged at byte {} ({why}): {} bytes past it are not log",
                s.valid_length,
                s.file_length - s.valid_length
            );
        }
    }
    match &r.torn {
        Some(torn) => {
            let _ = writeln!(out, "  restart cuts {} bytes: {torn}", r.torn_bytes);
        }
        None => out.push_str("  restart cuts nothing\n"),
    }
    let _ = writeln!(out, "  recorded log: {}..{}", r.index.start_position, r.end);
    match &plan.snapshots {
        None => out.push_str("snapshots: not read (no recording says whose they must be)\n"),
        Some(s) if s.listed.is_empty() => out.push_str("snapshots: none\n"),
        Some(s) => {
            for info in &s.listed {
                let verified = if s.newest.as_ref() == Some(info) { ", verifies (the one restored)" } else { "" };
                let _ = writeln!(
                    out,
                    "snapshot at {}: term {}, {} bytes of state{verified}",
                    info.position, info.leadership_term_id, info.length
                );
            }
            for skipped in &s.skipped {
                let _ = writeln!(out, "  skipped: {skipped}");
            }
        }
    }
    let _ = writeln!(
        out,
        "restart: in term {}, its log at {}; the state machine restores {} and replays {}..{} ({} bytes) as \
         the commit position allows; anything past {} comes from the leader (catch-up)",
        plan.restart_term,
        plan.restart_position,
        plan.snapshots
            .as_ref()
            .and_then(|s| s.newest.as_ref())
            .map_or("no snapshot".into(), |i| format!("the snapshot at {}", i.position)),
        plan.replay_from,
        plan.restart_position,
        plan.replay_bytes(),
        plan.restart_position
    );
    for refusal in &plan.refusals {
        let _ = writeln!(out, "REFUSED: {refusal}");
    }
    for note in &plan.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The plan as one JSON object, for scripts.
pub fn render_json(plan: &RecoveryPlan) -> Value {
    let r = &plan.recording;
    let vote = match &plan.vote {
        Ok(v) => v.map(|v| {
            json!({
                "member_id": v.member_id,
                "membership": v.membership,
                "leadership_term_id": v.vote.leadership_term_id,
                "voted_for": v.vote.voted_for,
            })
        }),
        Err(_) => None,
    };
    let segments: Vec<Value> = r
        .segments
        .iter()
        .map(|s| {
            json!({
                "file": s.path.display().to_string(),
                "base_position": s.base_position,
                "end_position": s.end_position,
                "file_length": s.file_length,
                "blocks": s.blocks,
                "valid_length": s.valid_length,
                "damage": s.damage,
                "bytes_past_damage": s.damage.as_ref().map(|_| s.file_length - s.valid_length),
                "fate": match s.fate {
                    SegmentFate::Kept => "kept",
                    SegmentFate::BelowStart => "below_start",
                    SegmentFate::Unmade => "unmade",
                    SegmentFate::PastCut => "past_cut",
                },
            })
        })
        .collect();
    let snapshot = |i: &SnapshotInfo| {
        json!({"position": i.position, "leadership_term_id": i.leadership_term_id, "length": i.length,
               "file": i.path.display().to_string()})
    };
    let snapshots = plan.snapshots.as_ref().map(|s| {
        json!({
            "listed": s.listed.iter().map(snapshot).collect::<Vec<_>>(),
            "newest_verified": s.newest.as_ref().map(snapshot),
            "skipped": s.skipped,
        })
    });
    let terms: Vec<Value> = r.term_history.as_ref().map_or(Vec::new(), |h| {
        h.terms()
            .iter()
            .map(|t| json!({"leadership_term_id": t.leadership_term_id, "base_position": t.base_position}))
            .collect()
    });
    json!({
        "data_dir": plan.data_dir.display().to_string(),
        "vote": vote,
        "vote_error": plan.vote.as_ref().err(),
        "recording": {
            "dir": r.dir.display().to_string(),
            "index_format": r.index_format,
            "index_missing": r.index_missing,
            "start_position": r.index.start_position,
            "end_position": r.end,
            "term_history": terms,
            "segments": segments,
            "torn": r.torn,
            "torn_bytes": r.torn_bytes,
        },
        "snapshots": snapshots,
        "restart_term": plan.restart_term,
        "replay_from": plan.replay_from,
        "replay_bytes": plan.replay_bytes(),
        "restart_position": plan.restart_position,
        "catch_up_from": plan.restart_position,
        "refusals": plan.refusals,
        "notes": plan.notes,
    })
}
