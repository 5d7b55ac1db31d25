//! The cluster as an operator sees it, from its members' counters (what `qc-cluster describe` prints):
//! each member's role, term, leader, positions (committed, applied by its state machine, recorded, synced,
//! its newest snapshot's), and how far it is behind the leader, in bytes and in time.
//!
//! Read from the node directories of members on this host (their `counters.dat`, never written). The lag in
//! time is the lag in bytes over the leader's commit rate, measured between two readings.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quorumcast_driver::shm::counters::{CountersReader, COUNTERS_FILE_NAME};
use quorumcast_driver::shm::directory::{DirectoryStatus, NodeDirectory};
use quorumcast_driver::shm::stats::{kinds, Stats};
use serde_json::{json, Value};

/// One member, as its counters say.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberView {
    /// Its node directory.
    pub dir: PathBuf,
    /// Its member id (-1 for a node that publishes none).
    pub member_id: i64,
    /// `follower`, `canvass`, `candidate` or `leader`.
    pub role: &'static str,
    /// Its leadership term.
    pub leadership_term_id: i64,
    /// The leader it knows of.
    pub leader: Option<i64>,
    /// Its commit position.
    pub commit_position: i64,
    /// The leader's append position (on the leader; 0 elsewhere).
    pub append_position: i64,
    /// Where its recorded log ends (0 without a recorded log).
    pub recorded_position: i64,
    /// What of its recorded log is durable.
    pub synced_position: i64,
    /// Where its recorded log starts (past 0 once compacted below a snapshot, or begun at one).
    pub recording_start: i64,
    /// What its state machine (or reader) has consumed: where the last committed message handed to the
    /// application ends.
    pub applied_position: i64,
    /// The id of the configuration in effect on it (0: the initial one).
    pub configuration_id: i64,
    /// The position of its newest snapshot (taken, restored at start, or installed by a catch-up); 0
    /// without one.
    pub snapshot_position: i64,
    /// Behind the leader's commit position, in bytes (`None` while no leader is known here).
    pub lag_bytes: Option<i64>,
    /// The lag in time at the leader's commit rate (`None` while the leader commits nothing).
    pub lag: Option<Duration>,
}

impl MemberView {
    fn from_stats(dir: &Path, stats: &Stats) -> Self {
        let election = stats.election();
        let recorder = stats.recorder();
        let role = match election.role() {
            3 => "leader",
            2 => "candidate",
            1 => "canvass",
            _ => "follower",
        };
        let leader = Some(election.leader_member_id()).filter(|&id| id >= 0);
        Self {
            dir: dir.to_path_buf(),
            member_id: if stats.iter().any(|c| c.type_id == kinds::election::member_id.type_id) {
                election.member_id()
            } else {
                -1
            },
            role,
            leadership_term_id: election.leadership_term(),
            leader,
            commit_position: stats.consensus().commit_position(),
            append_position: stats.consensus().append_position(),
            recorded_position: recorder.position(),
            synced_position: recorder.synced_position(),
            recording_start: recorder.start_position(),
            applied_position: stats.state().applied_position(),
            configuration_id: election.configuration_id(),
            snapshot_position: stats.state().snapshot_position(),
            lag_bytes: None,
            lag: None,
        }
    }
}

/// Reads the members in `dirs`: two readings `window` apart, the second described, the lag taken against the
/// member leading the highest term, its commit rate over the window.
pub fn describe(dirs: &[PathBuf], window: Duration) -> Result<Vec<MemberView>, String> {
    let readers = dirs.iter().map(|dir| open(dir)).collect::<Result<Vec<_>, _>>()?;
    let first: Vec<Stats> = readers.iter().map(Stats::read).collect();
    std::thread::sleep(window);
    let second: Vec<Stats> = readers.iter().map(Stats::read).collect();
    let mut views: Vec<MemberView> = dirs.iter().zip(&second).map(|(dir, s)| MemberView::from_stats(dir, s)).collect();
    let leader = (0..views.len()).filter(|&i| views[i].role == "leader").max_by_key(|&i| views[i].leadership_term_id);
    if let Some(leader) = leader {
        let commit = views[leader].commit_position;
        let moved = commit - first[leader].consensus().commit_position();
        for view in &mut views {
            let (bytes, lag) = lag(commit, Some(moved), window, view.commit_position);
            (view.lag_bytes, view.lag) = (Some(bytes), lag);
        }
    }
    Ok(views)
}

/// A member's lag behind a leader whose commit is at `leader_commit` and `moved` that far over `window`:
/// in bytes (from the member's `commit`), and in time at the leader's rate (`None` when the rate is not
/// known or the leader committed nothing).
pub fn lag(leader_commit: i64, moved: Option<i64>, window: Duration, commit: i64) -> (i64, Option<Duration>) {
    let bytes = (leader_commit - commit).max(0);
    let rate = moved.map_or(0.0, |moved| moved as f64 / window.as_secs_f64().max(1e-9));
    (bytes, (rate > 0.0).then(|| Duration::from_secs_f64(bytes as f64 / rate)))
}

/// A lag in time as the tables show it (`-` when unknown).
pub fn lag_text(lag: Option<Duration>) -> String {
    lag_ms(lag).map_or("-".into(), |ms| format!("{ms:.3} ms"))
}

/// A lag in time as the JSON gives it: milliseconds, `None` (null) when unknown.
pub fn lag_ms(lag: Option<Duration>) -> Option<f64> {
    lag.map(|d| d.as_secs_f64() * 1e3)
}

/// Opens a running member's counters; a clear error for a missing or stale directory.
fn open(dir: &Path) -> Result<CountersReader, String> {
    match NodeDirectory::status(dir) {
        DirectoryStatus::Missing => {
            return Err(format!("no node directory at {}: is the member running?", dir.display()))
        }
        DirectoryStatus::Stale(owner) => {
            return Err(format!("{} is stale: its node ({owner}) is not running", dir.display()));
        }
        _ => {}
    }
    CountersReader::open(dir.join(COUNTERS_FILE_NAME))
        .map_err(|e| format!("cannot read the counters of {}: {e}", dir.display()))
}

/// The members as a table.
pub fn render(views: &[MemberView]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6}  {:<9}  {:>5}  {:>6}  {:>6}  {:>14}  {:>14}  {:>14}  {:>14}  {:>14}  {:>12}  {:>10}  dir",
        "member",
        "role",
        "term",
        "leader",
        "config",
        "commit",
        "applied",
        "recorded",
        "synced",
        "snapshot",
        "lag bytes",
        "lag"
    );
    for v in views {
        let leader = v.leader.map_or("-".into(), |l| l.to_string());
        let lag_bytes = v.lag_bytes.map_or("-".into(), |b| b.to_string());
        let lag = lag_text(v.lag);
        let _ = writeln!(
            out,
            "{:>6}  {:<9}  {:>5}  {:>6}  {:>6}  {:>14}  {:>14}  {:>14}  {:>14}  {:>14}  {:>12}  {:>10}  {}",
            v.member_id,
            v.role,
            v.leadership_term_id,
            leader,
            v.configuration_id,
            v.commit_position,
            v.applied_position,
            v.recorded_position,
            v.synced_position,
            v.snapshot_position,
            lag_bytes,
            lag,
            v.dir.display()
        );
    }
    out
}

/// The members as one JSON object: `{"members": [{...}]}`, `lag_ms` and `lag_bytes` null when unknown.
pub fn render_json(views: &[MemberView]) -> Value {
    let members: Vec<Value> = views
        .iter()
        .map(|v| {
            json!({
                "member_id": v.member_id,
                "dir": v.dir.display().to_string(),
                "role": v.role,
                "leadership_term_id": v.leadership_term_id,
                "leader": v.leader,
                "configuration_id": v.configuration_id,
                "commit_position": v.commit_position,
                "append_position": v.append_position,
                "recorded_position": v.recorded_position,
                "synced_position": v.synced_position,
                "recording_start": v.recording_start,
                "applied_position": v.applied_position,
                "snapshot_position": v.snapshot_position,
                "lag_bytes": v.lag_bytes,
                "lag_ms": lag_ms(v.lag),
            })
        })
        .collect();
    json!({ "members": members })
}
