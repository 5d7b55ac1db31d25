//! The recorder agent: copies the member's log from its mapped log buffers into the recording, on a
//! thread of its own (never the Sender's or the consensus append's), and makes it durable by the
//! node's sync policy.
//!
//! Each duty cycle it:
//!
//! 1. takes the next log switch when it has reached it (its queue is fed by the consensus agent, like the
//!    node's reader of committed entries), cutting the recording back first when the new log starts below
//!    its end (a follower's log agreeing with a new leader's only up to there);
//! 2. records the whole frames its current log holds past the recording's end, in blocks of up to
//!    [`MAX_BLOCK_LENGTH`] bytes, at most [`MAX_BYTES_PER_CYCLE`], publishing its consumer position so
//!    the log's writer never overwrites what it has not recorded;
//! 3. under [`SyncPolicy::Batch`], makes everything the cycle wrote durable with one `fdatasync` (a group
//!    commit) and publishes the synced position: on a committer thread of its own when it has one (see
//!    `group_commit`: one sync in flight while the next batch is written, the position published by the
//!    committer), else in the duty cycle; under [`SyncPolicy::None`] the synced position is the written
//!    one;
//! 4. deletes the segments below a compaction point the application asked for (its oldest snapshot
//!    kept).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::catch_up::{self, CatchUpKey, CatchUpRequest, CatchUpServer, Fetched};
use super::coalescing::{Coalescing, Decision};
use super::group_commit::GroupCommit;
use super::segment::WriteAheadChoice;
use super::{Recording, SyncPolicy, MAX_BLOCK_LENGTH};
use crate::agent::{Agent, AgentError};
use crate::cluster::log_switch::SwitchQueue;
use crate::media::transport::stream::StreamOptions;
use crate::media::transport::Network;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{
    partition_index, position_bits_to_shift, scan, term_offset, ConsumerPosition, LogBuffer, Scan,
};
use crate::shm::stats::{kinds, CounterKind};
use crate::storage::snapshot::SnapshotStore;

/// Most bytes recorded per duty cycle: what one group commit covers at most.
pub const MAX_BYTES_PER_CYCLE: usize = 4 << 20;

/// A log for the recorder to record, and its consumer slot in it.
#[derive(Debug)]
pub struct RecorderSource {
    /// The log.
    pub log: LogBuffer,
    /// The recorder's consumer slot in it: the log's writer stays within half a term of it.
    pub consumer: ConsumerPosition,
}

/// How long a catch-up waits on its leader for each read or write before it gives up (to be retried).
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a cancelled catch-up reports (its followership ended before it did).
const CANCELLED: &str = "cancelled: the followership that asked for it ended";

/// A catch-up the consensus agent asks the recorder for (from a leader, the log from a position), and
/// what came of it.
///
/// Each request has a ticket, which its result carries: a result is for the followership that asked,
/// and one that ended meanwhile [cancels](Self::cancel) it (the recorder stops it, and its result, if any
/// still comes, names the old ticket).
#[derive(Debug, Default)]
pub struct CatchUpChannel {
    /// Set with a request, so that the recorder looks at the lock only then.
    requested: std::sync::atomic::AtomicBool,
    request: Mutex<Option<(u64, SocketAddr, CatchUpRequest)>>,
    result: Mutex<Option<(u64, Result<Fetched, String>)>>,
    /// The last ticket given.
    tickets: std::sync::atomic::AtomicU64,
    /// Requests with tickets up to this one are cancelled.
    cancelled_through: Arc<std::sync::atomic::AtomicU64>,
}

impl CatchUpChannel {
    /// Asks for a catch-up (replacing one not yet started); its ticket.
    pub fn request(&self, leader: SocketAddr, request: CatchUpRequest) -> u64 {
        let ticket = self.tickets.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
        *self.request.lock().unwrap_or_else(|e| e.into_inner()) = Some((ticket, leader, request));
        self.requested.store(true, std::sync::atomic::Ordering::Release);
        ticket
    }

    /// Cancels every catch-up asked for so far: one not started never starts, a running one stops.
    pub fn cancel(&self) {
        let last = self.tickets.load(std::sync::atomic::Ordering::Acquire);
        self.cancelled_through.fetch_max(last, std::sync::atomic::Ordering::AcqRel);
    }

    /// Whether the catch-up of `ticket` was cancelled.
    fn is_cancelled(&self, ticket: u64) -> bool {
        ticket <= self.cancelled_through.load(std::sync::atomic::Ordering::Acquire)
    }

    /// What the last catch-up brought, once it is over, with its ticket.
    pub fn take_result(&self) -> Option<(u64, Result<Fetched, String>)> {
        self.result.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What a catch-up thread hands back: the recording handle it wrote with and what it fetched (or why it
/// could not), and the snapshot store it installed into.
type CatchUpOutcome = (Result<(Recording, Result<Fetched, String>), String>, SnapshotStore);

/// The recorder's counters (see [`kinds::recorder`]).
#[derive(Clone, Debug)]
pub struct RecorderCounters {
    /// The position recorded up to.
    pub position: Counter,
    /// The position made durable.
    pub synced_position: Counter,
    /// Bytes recorded.
    pub bytes: Counter,
    /// Frames recorded.
    pub frames: Counter,
    /// `fdatasync` calls.
    pub fsyncs: Counter,
    /// Cuts of the recording.
    pub truncations: Counter,
    /// Bytes cut at start.
    pub torn_bytes: Counter,
    /// Segments deleted by compaction.
    pub segments_deleted: Counter,
    /// Where the recording starts.
    pub start_position: Counter,
    /// Catch-ups made.
    pub catch_ups: Counter,
    /// Catch-ups that failed.
    pub catch_ups_failed: Counter,
    /// Catch-ups served.
    pub catch_ups_served: Counter,
    /// Catch-up connections refused.
    pub catch_ups_refused: Counter,
    /// Catch-up connections timed out.
    pub catch_ups_timed_out: Counter,
    /// Write calls to the segment files.
    pub writes: Counter,
    /// Nanoseconds computing block checksums.
    pub checksum_ns: Counter,
    /// Nanoseconds in write calls.
    pub write_ns: Counter,
    /// Nanoseconds in the `fdatasync` calls of group commits.
    pub sync_ns: Counter,
    /// Bytes of zeros written ahead of the blocks.
    pub zeros_ahead: Counter,
}

impl RecorderCounters {
    /// Allocates every recorder counter with `allocate`.
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            position: allocate(&kinds::recorder::position),
            synced_position: allocate(&kinds::recorder::synced_position),
            bytes: allocate(&kinds::recorder::bytes),
            frames: allocate(&kinds::recorder::frames),
            fsyncs: allocate(&kinds::recorder::fsyncs),
            truncations: allocate(&kinds::recorder::truncations),
            torn_bytes: allocate(&kinds::recorder::torn_bytes),
            segments_deleted: allocate(&kinds::recorder::segments_deleted),
            start_position: allocate(&kinds::recorder::start_position),
            catch_ups: allocate(&kinds::recorder::catch_ups),
            catch_ups_failed: allocate(&kinds::recorder::catch_ups_failed),
            catch_ups_served: allocate(&kinds::recorder::catch_ups_served),
            catch_ups_refused: allocate(&kinds::recorder::catch_ups_refused),
            catch_ups_timed_out: allocate(&kinds::recorder::catch_ups_timed_out),
            writes: allocate(&kinds::recorder::writes),
            checksum_ns: allocate(&kinds::recorder::checksum_ns),
            write_ns: allocate(&kinds::recorder::write_ns),
            sync_ns: allocate(&kinds::recorder::sync_ns),
            zeros_ahead: allocate(&kinds::recorder::zeros_ahead),
        }
    }

    /// Detached counters, for a recorder outside a node.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}

/// The recorder agent.
#[derive(Debug)]
pub struct Recorder {
    recording: Recording,
    switches: Arc<SwitchQueue<RecorderSource>>,
    generation: u64,
    source: Option<RecorderSource>,
    /// Where the current log hands over to the next (`i64::MAX`: no switch queued).
    bound: i64,
    counters: RecorderCounters,
    /// Segments deleted below what the application's snapshots cover.
    compaction: Compaction,
    unsynced: bool,
    /// Under `batch`, the committer thread that syncs while the recorder writes; `None`: the recorder
    /// syncs in its duty cycle.
    group_commit: Option<GroupCommit>,
    /// Whether to write zeros ahead of the blocks, from what its syncs covered (without a committer).
    write_ahead: WriteAheadChoice,
    /// The end of the last request made to the committer (or of a sync made here since).
    requested: i64,
    /// What the recorder holds back for a larger write (see `coalescing`).
    coalescing: Coalescing,
    /// The clock coalescing reads; `None`: every look writes what it finds.
    coalescing_clock: Option<crate::agent::clock::NanoClock>,
    /// Serves other members' catch-ups from this recording.
    server: Option<CatchUpServer>,
    /// The catch-ups this member makes from the leader's recording.
    catch_up: CatchUps,
    /// A planted bug (the node simulator's own test): report writes as synced at once, and sync them in
    /// the next duty cycle.
    ack_before_sync: bool,
}

/// The catch-ups a member makes from the leader's recording: what they run on, the one running, and the
/// stores they install into.
#[derive(Debug, Default)]
struct CatchUps {
    /// The catch-up running on its thread, if one is.
    thread: Option<std::thread::JoinHandle<CatchUpOutcome>>,
    /// The catch-up running in the recorder's duty cycles (an inline runtime), if one is.
    inline: Option<catch_up::CatchUpFetch>,
    /// What catch-ups run on.
    runtime: Option<catch_up::CatchUpRuntime>,
    /// The ticket of the catch-up running (or that ran last).
    ticket: u64,
    /// Catch-ups this member makes, and where it installs a snapshot it is sent.
    channel: Arc<CatchUpChannel>,
    /// The key this member proves to the leader it catches up from.
    key: Option<CatchUpKey>,
    /// Where a snapshot a catch-up is sent is installed.
    snapshots: Option<SnapshotStore>,
}

/// Deleting the log's segments that the application's snapshots make unneeded.
#[derive(Debug)]
struct Compaction {
    /// The position below which the application's snapshots make the log unneeded.
    below: Counter,
    /// Where the recording starts now (segments before it deleted).
    done_to: i64,
}

impl Recorder {
    /// A recorder writing `recording`, taking its logs from `switches`, deleting segments below what
    /// `compact_below` says.
    pub fn new(
        recording: Recording,
        switches: Arc<SwitchQueue<RecorderSource>>,
        counters: RecorderCounters,
        compact_below: Counter,
    ) -> Self {
        counters.position.set(recording.end());
        counters.synced_position.set(recording.end());
        counters.start_position.set(recording.start());
        let (compacted_to, recording_end) = (recording.start(), recording.end());
        Self {
            recording,
            switches,
            generation: u64::MAX,
            source: None,
            bound: i64::MAX,
            counters,
            compaction: Compaction { below: compact_below, done_to: compacted_to },
            unsynced: false,
            group_commit: None,
            write_ahead: WriteAheadChoice::default(),
            requested: recording_end,
            coalescing: Coalescing::default(),
            coalescing_clock: None,
            server: None,
            catch_up: CatchUps::default(),
            ack_before_sync: false,
        }
    }

    /// Plants the bug of a recorder that reports what it wrote as synced before its `fdatasync`: for the
    /// test that proves the node simulator catches it. Not part of the API.
    #[doc(hidden)]
    #[cfg(feature = "sim")]
    pub fn plant_ack_before_sync(mut self) -> Self {
        self.ack_before_sync = true;
        self
    }

    /// Under `batch`, makes its group commits on a committer thread of its own (see `group_commit`)
    /// instead of in its duty cycle; no change under `none`.
    pub fn with_group_commit_thread(mut self) -> std::io::Result<Self> {
        if self.recording.config().sync == SyncPolicy::Batch && self.group_commit.is_none() {
            self.group_commit = Some(GroupCommit::start(&self.counters)?);
        }
        Ok(self)
    }

    /// Holds back short runs of a streaming log for larger writes (see `coalescing`), timed by `clock`.
    pub fn with_write_coalescing(mut self, clock: crate::agent::clock::NanoClock) -> Self {
        self.coalescing_clock = Some(clock);
        self
    }

    /// Waits until the committer thread, if there is one, has no sync pending or in flight: before the
    /// recording is cut, compacted, handed to a catch-up or closed.
    fn quiesce(&self) -> Result<(), AgentError> {
        self.group_commit.as_ref().map_or(Ok(()), |g| g.quiesce().map_err(AgentError::msg))
    }

    /// Serves catch-ups with `server`, and makes the ones `catch_ups` asks for on `runtime`, proving `key`,
    /// installing snapshots into `snapshots`.
    pub fn with_catch_up(
        mut self,
        server: Option<CatchUpServer>,
        catch_ups: Arc<CatchUpChannel>,
        key: CatchUpKey,
        snapshots: SnapshotStore,
        runtime: catch_up::CatchUpRuntime,
    ) -> Self {
        self.server = server;
        self.catch_up.runtime = Some(runtime);
        self.catch_up.channel = catch_ups;
        self.catch_up.key = Some(key);
        self.catch_up.snapshots = Some(snapshots);
        self
    }

    /// Starts the catch-up asked for, on a thread of its own (it waits on the network and the leader; the
    /// agents sharing this thread, the consensus agent among them, must not), with a second handle on the
    /// recording: this one writes nothing until the catch-up is over and hands its handle back.
    fn catch_up(&mut self) -> Result<usize, AgentError> {
        if !self.catch_up.channel.requested.swap(false, std::sync::atomic::Ordering::AcqRel) {
            return Ok(0);
        }
        let mut pending = self.catch_up.channel.request.lock().unwrap_or_else(|e| e.into_inner());
        let Some((ticket, leader, mut request)) = *pending else {
            return Ok(0);
        };
        if self.catch_up.channel.is_cancelled(ticket) {
            pending.take();
            return Ok(0);
        }
        let (Some(key), Some(runtime)) = (self.catch_up.key, self.catch_up.runtime.clone()) else {
            return Ok(0);
        };
        let Some(snapshots) = self.catch_up.snapshots.take() else {
            self.catch_up.channel.requested.store(true, std::sync::atomic::Ordering::Release);
            return Ok(0);
        };
        pending.take();
        drop(pending);
        if let Err(e) = self.quiesce() {
            self.catch_up.snapshots = Some(snapshots);
            return Err(e);
        }
        if request.from < self.recording.start() {
            // The recording begins at a snapshot a catch-up installed after its followership ended (cancelled
            // too late to stop it): the member's log goes on there, so this catch-up reports that snapshot
            // instead of fetching (found by the node simulator: seed 1796355903926318035).
            self.catch_up.ticket = ticket;
            let result = self.installed_snapshot(&snapshots, request.from);
            self.catch_up.snapshots = Some(snapshots);
            self.report_catch_up(result)?;
            return Ok(1);
        }
        // The catch-up decides where the recording goes on: the logs queued before it (a Receiver's image
        // it replaces) and the one being recorded are done with; the next comes after it.
        self.switches.clear();
        self.source = None;
        self.bound = i64::MAX;
        if self.recording.end() > request.from {
            self.cut(request.from)?;
        }
        self.recording.sync().map_err(AgentError::new)?;
        // What the member holds past the recording (a Receiver's image not yet recorded) is fetched again:
        // the leader's log has the same bytes there.
        request.from = request.from.min(self.recording.end());
        self.catch_up.ticket = ticket;
        if runtime.inline {
            self.catch_up.snapshots = Some(snapshots);
            return self.catch_up_inline(runtime, leader, request, key);
        }
        let cancelled = Arc::clone(&self.catch_up.channel.cancelled_through);
        let (config, identity) = (self.recording.config().clone(), *self.recording.identity());
        let disk = self.recording.disk().clone();
        let thread = std::thread::Builder::new().name("qc-catch-up".into()).spawn(move || {
            let (mut network, local) = (runtime.network, runtime.local);
            let result =
                Recording::open_on(disk, config, identity).map_err(|e| e.to_string()).and_then(|(mut recording, _)| {
                    let fetched = catch_up::fetch(
                        &mut network,
                        local,
                        leader,
                        request,
                        &key,
                        &mut recording,
                        &snapshots,
                        CATCH_UP_TIMEOUT,
                        &|| cancelled.load(std::sync::atomic::Ordering::Acquire) >= ticket,
                    );
                    // Whatever arrived is kept (it verified); it is made durable before it is reported.
                    recording.sync().map_err(|e| e.to_string())?;
                    Ok((recording, fetched))
                });
            (result, snapshots)
        });
        self.catch_up.thread = Some(thread.map_err(AgentError::new)?);
        Ok(1)
    }

    /// Starts the catch-up in this agent's duty cycles, over a non-blocking stream.
    fn catch_up_inline(
        &mut self,
        runtime: catch_up::CatchUpRuntime,
        leader: SocketAddr,
        request: CatchUpRequest,
        key: CatchUpKey,
    ) -> Result<usize, AgentError> {
        let now_ns = runtime.clock.now_ns();
        let timeout_ns = CATCH_UP_TIMEOUT.as_nanos() as u64;
        let options = StreamOptions { local: runtime.local, connect_timeout: CATCH_UP_TIMEOUT, blocking: None };
        let started = runtime
            .network
            .clone()
            .connect_stream(leader, &options)
            .map_err(|e| format!("connect to {leader}: {e}"))
            .and_then(|stream| {
                catch_up::CatchUpFetch::start(leader, stream, request, key, &runtime.nonces, timeout_ns, now_ns)
            });
        match started {
            Ok(fetch) => self.catch_up.inline = Some(fetch),
            Err(why) => self.report_catch_up(Err(why))?,
        }
        Ok(1)
    }

    /// While a catch-up runs: once it is over, takes the recording back and reports the outcome; true
    /// while it still runs (nothing else is done meanwhile).
    fn catch_up_running(&mut self) -> Result<bool, AgentError> {
        if let Some(fetch) = self.catch_up.inline.as_mut() {
            let now_ns = self.catch_up.runtime.as_ref().map_or(0, |r| r.clock.now_ns());
            let snapshots = self.catch_up.snapshots.as_ref().expect("the store stays while a catch-up runs inline");
            let result = if self.catch_up.channel.is_cancelled(self.catch_up.ticket) {
                Err(CANCELLED.to_string())
            } else {
                match fetch.poll(&mut self.recording, snapshots, now_ns) {
                    Ok(None) => return Ok(true),
                    Ok(Some(fetched)) => Ok(fetched),
                    // Past an installed snapshot, what arrived is reported: the recording starts there now.
                    Err(why) => fetch.partial(&self.recording).ok_or(why),
                }
            };
            self.catch_up.inline = None;
            // Whatever arrived is kept (it verified); it is made durable before it is reported. A sync that
            // fails loses it (as any failed fsync does): the recorder stops rather than report it synced
            // (found by the node simulator: seed 1796356595306429662).
            self.recording.sync().map_err(|e| AgentError::msg(format!("after a catch-up: {e}")))?;
            self.report_catch_up(result)?;
            return Ok(false);
        }
        let Some(thread) = self.catch_up.thread.take_if(|t| t.is_finished()) else {
            return Ok(self.catch_up.thread.is_some());
        };
        let (result, snapshots) = thread.join().map_err(|_| AgentError::msg("the catch-up thread panicked"))?;
        self.catch_up.snapshots = Some(snapshots);
        // The catch-up's own handle on the recording could not be opened or synced: what it wrote is not
        // durable, and this handle no longer describes the files. The recorder stops, as on any failed sync.
        let (recording, result) = result.map_err(|why| AgentError::msg(format!("during a catch-up: {why}")))?;
        self.recording = recording;
        self.report_catch_up(result)?;
        Ok(false)
    }

    /// The snapshot the recording begins at, as a catch-up from `from` (below it) reports it: the recording
    /// is cut back to the snapshot (what was fetched past it may not be committed) and the member joins
    /// there; the terms below it are the recording's (the leader's, kept when it was installed).
    fn installed_snapshot(&mut self, snapshots: &SnapshotStore, from: i64) -> Result<Fetched, String> {
        let start = self.recording.start();
        if self.recording.end() > start {
            self.cut(start).map_err(|e| e.to_string())?;
        }
        self.recording.sync().map_err(|e| e.to_string())?;
        let snapshot = snapshots
            .list()
            .map_err(|e| e.to_string())?
            .into_iter()
            .rfind(|s| s.position == start)
            .ok_or_else(|| format!("the recording begins at {start}, and no snapshot there is kept"))?;
        let index = self.recording.index();
        let history: Vec<(i64, i64)> = index
            .terms
            .iter()
            .filter(|t| t.base_position <= start)
            .map(|t| (t.base_position, t.leadership_term_id))
            .collect();
        let terms = vec![(start, index.term_at(start))];
        // The configuration in effect at the snapshot: the one the index keeps at its start, if any.
        let configuration = index.configurations.iter().rev().find(|(end, _)| *end <= start).map(|(_, c)| c.clone());
        let configuration_at_snapshot = Some(configuration.unwrap_or_default());
        Ok(Fetched {
            from,
            end: start,
            terms,
            history,
            snapshot: Some(snapshot),
            configurations: Vec::new(),
            configuration_at_snapshot,
        })
    }

    /// Counts a finished catch-up and hands its outcome to the consensus agent.
    fn report_catch_up(&mut self, result: Result<Fetched, String>) -> Result<(), AgentError> {
        if let Some(why) = self.recording.failed() {
            // A write to the recording failed during the catch-up (the snapshot's install, a block): its files
            // may not be what it says (segments removed, the index not rewritten). It reports nothing synced
            // and stops, as on any failed write (found by the node simulator: seed 1796356595306429662).
            return Err(AgentError::msg(format!("the recording failed during a catch-up: {why}")));
        }
        match &result {
            Ok(fetched) => {
                self.counters.catch_ups.increment();
                if let Some(installed) = &fetched.snapshot {
                    self.counters.start_position.set(installed.position);
                    self.compaction.done_to = installed.position;
                }
            }
            Err(_) => self.counters.catch_ups_failed.increment(),
        }
        self.counters.fsyncs.increment();
        self.counters.position.set(self.recording.end());
        self.counters.synced_position.set(self.recording.end());
        self.requested = self.recording.end();
        self.coalescing.reset();
        *self.catch_up.channel.result.lock().unwrap_or_else(|e| e.into_inner()) = Some((self.catch_up.ticket, result));
        Ok(())
    }

    /// The recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// Takes the next switch once the recording has reached it (or has no log to record).
    fn switch_if_due(&mut self) -> Result<usize, AgentError> {
        let generation = self.switches.generation();
        if generation != self.generation {
            self.generation = generation;
            self.bound = self.switches.next_at().unwrap_or(i64::MAX);
        }
        let end = self.recording.end();
        if self.source.is_some() && self.bound > end {
            return Ok(0);
        }
        // At the switch (or with no log at all): take it once its log is there.
        let Some((at, source, next)) = self.switches.take() else {
            return Ok(0);
        };
        let start = self.recording.start();
        if at < start && end >= start {
            // A catch-up whose followership ended installed the leader's snapshot after this log began
            // (it was cancelled too late to stop it): the bytes below the snapshot are the committed log the
            // snapshot covers, so they are passed over rather than cut back into, and what the catch-up
            // fetched past the snapshot (perhaps not committed) is cut (found by the node simulator: seed
            // 1796355885111822848).
            if end > start {
                self.cut(start)?;
            }
            log::info!(
                "recorder: the log to record starts at {at}, below the snapshot the recording starts at ({start}): \
                 its bytes up to {start} are passed over"
            );
        } else if at < end {
            self.cut(at)?;
        } else if at > end {
            return Err(AgentError::msg(format!(
                "the log to record starts at {at} but the recording ends at {end}: {} bytes of this member's \
                 log are in neither",
                at - end
            )));
        }
        source.consumer.set(at);
        self.source = Some(source);
        self.coalescing.reset();
        self.bound = next.unwrap_or(i64::MAX);
        Ok(1)
    }

    fn cut(&mut self, at: i64) -> Result<(), AgentError> {
        self.quiesce()?;
        // Lowered before the cut: what is above `at` is no longer held as soon as the cut starts, and a
        // cut that fails on the way (its sync) must not leave the member reporting it synced (found by the
        // node simulator: seed 1796347944366307667).
        self.counters.position.set(self.counters.position.get().min(at));
        self.counters.synced_position.set(self.counters.synced_position.get().min(at));
        self.recording.truncate(at).map_err(AgentError::new)?;
        self.counters.truncations.increment();
        self.counters.position.set(at);
        self.counters.synced_position.set(at);
        self.unsynced = false;
        self.requested = at;
        self.coalescing.reset();
        Ok(())
    }

    /// Records what the current log holds past the recording's end; returns the blocks written.
    fn record(&mut self) -> Result<usize, AgentError> {
        let Some(source) = &self.source else {
            return Ok(0);
        };
        let log = &source.log;
        let end = self.recording.end();
        if source.consumer.get() < end {
            // Passing over what an installed snapshot covers: the log's writer may not wait on this consumer,
            // and nothing is read until the log reaches the recording's end.
            let produced = log.producer_position();
            source.consumer.set(produced.min(end));
            if produced < end {
                return Ok(0);
            }
        }
        let bits = position_bits_to_shift(log.term_length());
        let mut blocks = 0;
        let mut bytes = 0;
        while bytes < MAX_BYTES_PER_CYCLE {
            let position = self.recording.end();
            if self.group_commit.is_some()
                && self.recording.segment_full()
                && self.counters.synced_position.get() < position
            {
                // The next block starts a new segment: only once the committer made this one durable to
                // its end (see `group_commit`).
                break;
            }
            let in_term = log.term_length() - term_offset(position, log.term_length());
            let room = (self.bound - position).clamp(0, MAX_BLOCK_LENGTH as i64).min(in_term as i64) as usize;
            if room == 0 {
                break;
            }
            // Frames held back at the last look were scanned then: the scan goes on after them.
            let held = self.coalescing.held().min(room);
            let more = scan(log, position + held as i64, room - held);
            let found = Scan { available: held + more.available, padding: more.padding };
            if found.available == 0 {
                break;
            }
            if let (0, Some(clock)) = (blocks, &self.coalescing_clock) {
                // A PAD frame, the term's end, the switch or the longest block: nothing more can join it.
                let ends_term = found.padding > 0 || found.available == room;
                if self.coalescing.decide(found.available, more.available, ends_term, || clock.now_ns())
                    == Decision::Hold
                {
                    // Held for a larger write: this look did work, so that the idle strategy does not park
                    // the recorder on it.
                    return Ok(1);
                }
            }
            let term = log.term(partition_index(position, bits));
            let payload = term.bytes(term_offset(position, log.term_length()), found.available);
            let frames = self.recording.append(position, payload, found.advance()).map_err(AgentError::new)?;
            source.consumer.set(position + found.advance() as i64);
            self.counters.frames.add(frames as i64);
            blocks += 1;
            bytes += found.available;
        }
        if blocks == 0 {
            // Nothing found: the log paused.
            self.coalescing.decide(0, 0, false, || 0);
        }
        if blocks > 0 {
            let cost = self.recording.take_cost();
            self.counters.writes.add(cost.writes as i64);
            self.counters.checksum_ns.add(cost.checksum_ns as i64);
            self.counters.write_ns.add(cost.write_ns as i64);
            self.counters.zeros_ahead.add(cost.zeros_ahead as i64);
            self.counters.bytes.add(bytes as i64);
            self.counters.position.set(self.recording.end());
            match self.recording.config().sync {
                SyncPolicy::None => self.counters.synced_position.set(self.recording.end()),
                SyncPolicy::Batch => {
                    self.unsynced = true;
                    if self.ack_before_sync {
                        self.counters.synced_position.set(self.recording.end());
                    }
                }
            }
        }
        Ok(blocks)
    }

    /// Under `batch`: one `fdatasync` for what was written since the last, then the synced position (by
    /// the committer thread when there is one).
    fn sync_if_due(&mut self) -> Result<usize, AgentError> {
        if let Some(group_commit) = &self.group_commit {
            if let Some(why) = group_commit.failure() {
                return Err(AgentError::msg(why));
            }
            self.unsynced = false;
            self.recording.set_write_ahead(group_commit.syncs_are_small());
            if self.recording.end() <= self.requested {
                return Ok(0);
            }
            if let Some(request) = self.recording.commit_request() {
                self.requested = request.end;
                group_commit.request(request);
            }
            return Ok(1);
        }
        if !std::mem::take(&mut self.unsynced) {
            return Ok(0);
        }
        let covered = self.recording.end() - self.counters.synced_position.get();
        let write_ahead = self.write_ahead.after_sync(covered);
        self.recording.set_write_ahead(write_ahead);
        self.recording.sync().map_err(AgentError::new)?;
        self.counters.fsyncs.increment();
        self.counters.synced_position.set(self.recording.end());
        Ok(1)
    }

    /// Deletes the segments below the compaction point, once it moved.
    fn compact(&mut self) -> Result<usize, AgentError> {
        let below = self.compaction.below.get().min(self.recording.end());
        if below <= self.compaction.done_to {
            return Ok(0);
        }
        self.compaction.done_to = below;
        self.quiesce()?;
        let segments = self.recording.segment_count();
        let start = self.recording.delete_before(below).map_err(AgentError::new)?;
        self.counters.segments_deleted.add((segments - self.recording.segment_count()) as i64);
        self.counters.start_position.set(start);
        Ok(1)
    }
}

impl Agent for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        if self.catch_up_running()? {
            return Ok(0);
        }
        let mut work = self.switch_if_due()?;
        if self.ack_before_sync {
            // The planted bug: last cycle's writes, reported synced then, are synced only now.
            work += self.sync_if_due()?;
        }
        work += self.record()?;
        if !self.ack_before_sync {
            work += self.sync_if_due()?;
        }
        // A repair of a loss found at start is over once the log it held is synced again.
        self.recording.end_repair_if_synced(self.counters.synced_position.get());
        work += self.compact()?;
        work += self.catch_up()?;
        if let Some(server) = self.server.as_mut() {
            work += server.poll(&self.recording, &self.counters);
        }
        Ok(work)
    }

    fn on_close(&mut self) {
        if let Some(thread) = self.catch_up.thread.take() {
            // Its reads time out: it ends within the catch-up timeout.
            let _ = thread.join();
        }
        // What was written is made durable on a clean close, whatever the policy.
        let _ = self.quiesce();
        self.group_commit = None;
        let _ = self.recording.cut_zeros_ahead();
        let _ = self.recording.sync();
    }
}
