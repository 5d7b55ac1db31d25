//! Group commit on a thread of its own (after a database's log writer): under `batch`, the recorder hands
//! the end of what each duty cycle wrote to a committer thread, which makes it durable with one
//! `fdatasync` while the recorder goes on writing the next batch. One sync is in flight at a time; the
//! next covers everything written meanwhile (requests made during a sync collapse into the newest), so
//! the batches grow with the load and the recorder's thread (the Sender's, when agents share one) never
//! waits on the disk.
//!
//! # Invariants
//!
//! - The committer publishes a synced position only after the `fdatasync` of a request covering it (and
//!   of the directory, when the request carries a segment made or removed) returned without error, and
//!   it only raises it.
//! - After a failed sync nothing more is synced or published: the failure is handed to the recorder,
//!   which stops the node (what a failed `fdatasync` left on the disk is unknown).
//! - [`GroupCommit::quiesce`] returns once no request is pending or in flight: the recorder calls it
//!   before it cuts, compacts, hands its recording to a catch-up or closes, so that no sync of old bytes
//!   publishes a position over what replaced them.
//! - A request names one segment: the recorder starts the next segment only once the synced position
//!   reached the end of the one before (see `Recorder::record`), so a request for the new segment never
//!   leaves bytes of the old one unsynced.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use super::segment::{SyncMarks, WriteAheadChoice};
use super::{RecorderCounters, RecordingError};
use crate::storage::disk::{DiskFile, SharedDisk};

/// What one group commit makes durable.
#[derive(Debug)]
pub(crate) struct CommitRequest {
    /// The segment being written.
    pub(crate) file: Arc<dyn DiskFile>,
    /// Its sync marks, when it has them: `end` is marked before the sync.
    pub(crate) marks: Option<Arc<SyncMarks>>,
    /// Its path, for errors.
    pub(crate) path: PathBuf,
    /// The recording's directory, when a segment was made or removed since the last sync.
    pub(crate) dir: Option<(SharedDisk, PathBuf)>,
    /// The log position everything before which is durable once this request is.
    pub(crate) end: i64,
}

impl CommitRequest {
    /// The sync mark, `fdatasync` of the segment, then of the directory when asked.
    fn run(&self) -> Result<(), RecordingError> {
        if let Some(marks) = &self.marks {
            marks.write(&*self.file, self.end).map_err(|e| RecordingError::io(&self.path, "write", e))?;
        }
        self.file.sync_data().map_err(|e| RecordingError::io(&self.path, "sync", e))?;
        if let Some((disk, dir)) = &self.dir {
            disk.sync_dir(dir).map_err(|e| RecordingError::io(dir, "sync", e))?;
        }
        Ok(())
    }

    /// This request, with `older`'s directory sync too when it had one and this one has not (the newer
    /// request replaces the older before it ran).
    fn merged_with(mut self, older: Option<CommitRequest>) -> Self {
        if self.dir.is_none() {
            self.dir = older.and_then(|o| o.dir);
        }
        self
    }
}

/// The committer thread and what it shares with the recorder.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the committer: a request, or the stop.
    wake: Condvar,
    /// Wakes a recorder waiting in [`GroupCommit::quiesce`].
    idle: Condvar,
    /// Set with the failure, so that the recorder looks at the lock only then.
    failed: AtomicBool,
    /// The last syncs covered few log bytes (see [`WriteAheadChoice`]): the recorder writes zeros ahead
    /// of its blocks (see `segment::WRITE_AHEAD_STEP`).
    small_syncs: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// The newest request not yet started.
    pending: Option<CommitRequest>,
    /// A sync is in flight.
    busy: bool,
    /// The committer waits on `wake`: a request wakes it (else it takes the request when its sync is
    /// done, and the recorder saves the wake-up's system call).
    parked: bool,
    /// Why a sync failed; nothing is synced after it.
    failure: Option<String>,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl GroupCommit {
    /// Starts the committer thread, which publishes into `counters` (synced position, fsyncs, their time).
    pub(crate) fn start(counters: &RecorderCounters) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let (inner, counters) = (Arc::clone(&shared), counters.clone());
        let thread =
            std::thread::Builder::new().name("qc-group-commit".into()).spawn(move || commit(&inner, &counters))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Asks for everything up to `request.end` to be made durable: at once when no sync is in flight, else
    /// by the next one (replacing a request that waits for it). When the committer was parked, the
    /// segment's writeback starts here, while it wakes (tens of microseconds on a busy host).
    pub(crate) fn request(&self, request: CommitRequest) {
        let file = Arc::clone(&request.file);
        let mut state = self.shared.lock();
        if state.failure.is_some() {
            return;
        }
        let older = state.pending.take();
        state.pending = Some(request.merged_with(older));
        let parked = state.parked;
        drop(state);
        if parked {
            self.shared.wake.notify_one();
            file.start_writeback();
        }
    }

    /// Whether the last syncs covered few enough log bytes to write zeros ahead ([`WriteAheadChoice`]).
    pub(crate) fn syncs_are_small(&self) -> bool {
        self.shared.small_syncs.load(Ordering::Relaxed)
    }

    /// Why a sync failed, if one did.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        self.shared.lock().failure.clone()
    }

    /// Waits until no request is pending or in flight; the failure, if a sync failed.
    pub(crate) fn quiesce(&self) -> Result<(), String> {
        let mut state = self.shared.lock();
        while (state.pending.is_some() || state.busy) && state.failure.is_none() {
            state = self.shared.idle.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.failure.clone().map_or(Ok(()), Err)
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The committer: one request at a time, until stopped or a sync fails.
fn commit(shared: &Shared, counters: &RecorderCounters) {
    let mut write_ahead = WriteAheadChoice::default();
    loop {
        let request = {
            let mut state = shared.lock();
            loop {
                if state.stop {
                    return;
                }
                if let Some(request) = state.pending.take() {
                    state.busy = true;
                    break request;
                }
                shared.idle.notify_all();
                state.parked = true;
                state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                state.parked = false;
            }
        };
        let started = Instant::now();
        let result = request.run();
        let mut state = shared.lock();
        state.busy = false;
        match result {
            Ok(()) => {
                counters.sync_ns.add(started.elapsed().as_nanos() as i64);
                counters.fsyncs.increment();
                let covered = request.end - counters.synced_position.get();
                counters.synced_position.set_max(request.end);
                shared.small_syncs.store(write_ahead.after_sync(covered), Ordering::Relaxed);
            }
            Err(e) => {
                state.failure = Some(e.to_string());
                state.pending = None;
                shared.failed.store(true, Ordering::Release);
                shared.idle.notify_all();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::{SMALL_SYNCS_TO_WRITE_AHEAD, WRITE_AHEAD_BELOW};
    use super::*;

    /// A request to sync `file` to `end`.
    fn request(file: &Arc<dyn DiskFile>, end: i64) -> CommitRequest {
        CommitRequest { file: Arc::clone(file), marks: None, path: "segment".into(), dir: None, end }
    }

    #[test]
    fn syncs_are_small_after_a_run_of_syncs_each_covering_fewer_bytes_than_the_write_ahead_bound() {
        let dir = std::env::temp_dir().join(format!("qc-group-commit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file: Arc<dyn DiskFile> = Arc::from(SharedDisk::os().create(&dir.join("segment")).unwrap());
        let counters = RecorderCounters::detached();
        let group_commit = GroupCommit::start(&counters).unwrap();
        assert!(!group_commit.syncs_are_small(), "nothing synced yet");
        let mut end = 0;
        let mut sync = |covered: i64| {
            end += covered;
            group_commit.request(request(&file, end));
            group_commit.quiesce().unwrap();
            assert_eq!(counters.synced_position.get(), end);
            group_commit.syncs_are_small()
        };
        let small = SMALL_SYNCS_TO_WRITE_AHEAD as usize;
        let run: Vec<bool> = (0..small).map(|_| sync(4096)).collect();
        assert_eq!(run.iter().filter(|&&s| s).count(), 1, "only the last of a run of small ones: {run:?}");
        assert!(sync(WRITE_AHEAD_BELOW - 1), "still small");
        assert!(!sync(WRITE_AHEAD_BELOW), "one large sync ends it");
        assert!(!sync(4096), "and the run starts again");
        drop(group_commit);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
