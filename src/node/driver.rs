//! The node's consensus agent: it feeds the consensus core and carries out what the core decides.
//!
//! Every decision (role, term, vote, where logs agree, what is committed) is the core's
//! ([`ConsensusCore`]); this agent only moves inputs in and outputs out, once per duty cycle:
//!
//! 1. election and heartbeat frames from the other members' consensus endpoints (a socket of its own,
//!    Aeron Cluster's consensus channel), each checked for its source and decoded, to
//!    [`ConsensusCore::on_message`];
//! 2. the data path's positions: on the leader, each follower's acknowledged position (raised by the
//!    Sender from acknowledgement frames of this term's log) as an append position from that member;
//!    on a follower, the rebuilt position of the leader's log, split by the term-start markers the
//!    Receiver found, to [`ConsensusCore::on_append_position`], and the commit positions the leader sent
//!    as its commit messages;
//! 3. a [`ConsensusCore::tick`] with the time;
//! 4. the outputs, in order: a vote is written to the vote file (and synced) before anything after it
//!    runs; a role change stops the Sender or Receiver of the old role; a term to lead gets a new log
//!    continued from this member's log and a Sender; a leader to follow gets a Receiver from the position
//!    the logs agree up to; a commit raises the commit position;
//! 5. on the leader, once its term has started, the append stage: client messages from the ingress ring
//!    into the log, and commit frames to the Sender.
//!
//! The data path's own acknowledgements and commit frames carry positions at the rate data moves; the
//! consensus endpoint carries them at heartbeat rate only (the core's sends of them are thinned to one
//! per half heartbeat interval), so elections cost the steady state nothing measurable.

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::SockAddr;

use super::catch_up::{self, CatchUpState};
use crate::agent::clock::NanoClock;
use crate::agent::{Agent, AgentError};
use crate::cluster::append::{AppendParts, AppendStage, LogIdentity};
use crate::cluster::consensus_core::{wire, ConsensusCore, CoreError, Destination, Message, Output, Role, TermBase};
use crate::cluster::term_starts::TermStarts;
use crate::event_log::RateLimited;
use crate::media::receiver::{ImageHandoff, Subscription};
use crate::media::transport::{RecvBatch, Transport};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{LogBuffer, LogReader};
use crate::shm::ring_buffer::ManyToOneRingBuffer;
use crate::shm::stats::{kinds, CounterKind};
use crate::storage::recording::catch_up::{CatchUpRequest, Fetched};
use crate::storage::recording::RecorderSource;
use crate::storage::vote_file::{TermVote, VoteFile};

use super::client::{ReaderLog, Shared};
use super::ingress::{Appending, ClientIngress};
use super::wiring::Wiring;
use super::RoleChange;

/// Most consensus frames read per duty cycle.
const MAX_FRAMES_PER_CYCLE: usize = 64;

/// How often the consensus endpoint is read (and the core's counters mirrored) while it is quiet: election
/// frames and heartbeats come every few milliseconds at most, and a receive call on every duty cycle
/// would add a syscall to each cycle of a spinning consensus agent, which shares its thread with the
/// Sender in the shared and invoker layouts.
const CONSENSUS_POLL_INTERVAL_NS: u64 = 50_000;

/// The counters of the consensus agent's own work (the core's drop reasons are mirrored beside them).
#[derive(Clone, Debug)]
pub(super) struct DriverCounters {
    pub(super) frames_received: Counter,
    pub(super) frames_sent: Counter,
    pub(super) foreign_dropped: Counter,
    pub(super) malformed_dropped: Counter,
    pub(super) role_changes: Counter,
    pub(super) leadership_term: Counter,
    pub(super) ingress_dropped: Counter,
    pub(super) core_errors: Counter,
    pub(super) stale_dropped: Counter,
    pub(super) refused_membership: Counter,
    pub(super) elections: Counter,
    pub(super) truncations: Counter,
}

impl DriverCounters {
    pub(super) fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            frames_received: allocate(&kinds::election::frames_received),
            frames_sent: allocate(&kinds::election::frames_sent),
            foreign_dropped: allocate(&kinds::election::foreign_dropped),
            malformed_dropped: allocate(&kinds::election::malformed_dropped),
            role_changes: allocate(&kinds::election::role_changes),
            leadership_term: allocate(&kinds::election::leadership_term),
            ingress_dropped: allocate(&kinds::election::ingress_dropped),
            core_errors: allocate(&kinds::election::core_errors),
            stale_dropped: allocate(&kinds::election::stale_dropped),
            refused_membership: allocate(&kinds::election::refused_membership),
            elections: allocate(&kinds::election::elections),
            truncations: allocate(&kinds::election::truncations),
        }
    }
}

/// Another member's consensus endpoint.
struct Peer {
    id: i32,
    addr: SocketAddr,
    sockaddr: SockAddr,
}

/// This member's log: the one that holds its bytes up to the core's append position.
struct MemberLog {
    log: LogBuffer,
    /// Where its first byte is.
    start: i64,
    /// Its file, removed when a newer log replaces it (the mapping stays while a reader holds it).
    file: Option<std::path::PathBuf>,
}

/// What the data path does in the current role.
enum Current {
    /// No log moves: an election runs, or the leader is not yet matched with.
    Idle,
    Leading(Box<Leading>),
    Following(Box<Following>),
}

struct Leading {
    term: i64,
    stage: AppendStage,
    /// Each follower's acknowledged position in this term, and the last one handed to the core.
    acks: Vec<(i32, Counter, i64)>,
    /// With a recorded log: the leader's own durable position last handed to the core.
    own_fed: i64,
}

struct Following {
    leader: i32,
    term: i64,
    subscription: Option<Subscription>,
    /// Where the image starts.
    join: i64,
    append: Counter,
    term_starts: Arc<TermStarts>,
    reported: u64,
    /// Markers not yet passed by the rebuilt position, by position.
    pending: Vec<(i64, i64)>,
    /// The position and the term of the last byte handed to the core.
    fed: i64,
    fed_term: i64,
    commit_fed: i64,
    /// A catch-up from the leader's recording.
    catch_up: CatchUpState,
}

impl Following {
    /// Whether this image already carries `leader`'s log of `term` from `position` on: the core matched
    /// this member again (after a canvass it gave up) at a position this image passed or reached. The
    /// core's position may be behind what was fed since: its outputs are carried out after the bytes
    /// that arrived in the same duty cycle were handed to it, and the same leader's log of one term
    /// agrees with itself, so nothing needs replicating again.
    fn continues(&self, leader: i32, term: i64, position: i64) -> bool {
        self.leader == leader && self.term == term && self.fed != i64::MAX && (self.join..=self.fed).contains(&position)
    }
}

/// The consensus agent of a node.
pub(super) struct ConsensusAgent {
    core: ConsensusCore,
    outputs: Vec<Output>,
    /// The outputs being carried out (swapped with `outputs`).
    executing: Vec<Output>,
    wiring: Wiring,
    socket: Box<dyn Transport>,
    batch: RecvBatch,
    peers: Vec<Peer>,
    votes: VoteFile,
    ingress: ManyToOneRingBuffer,
    /// The client endpoint, when remote clients are taken.
    clients: Option<ClientIngress>,
    clock: NanoClock,
    current: Current,
    log: Option<MemberLog>,
    /// With a recorded log: the recorder's durable position (synced under `batch`, written under `none`).
    synced: Option<Counter>,
    /// The recorder takes every new log.
    records: bool,
    shared: Arc<Shared>,
    counters: DriverCounters,
    /// When the core last sent a commit (leader) or append (follower) position on the consensus endpoint.
    last_position_send_ns: u64,
    preferred_leader: bool,
    /// When the consensus endpoint is next read.
    next_receive_ns: u64,
    logs: RateLimited,
    membership_log: RateLimited,
}

/// What a consensus agent is made of.
pub(super) struct DriverParts {
    /// The last bytes of this member's recorded log, rebuilt in memory at start, and where they start.
    pub(super) tail: Option<(LogBuffer, i64)>,
    /// With a recorded log: the position the recorder has made durable (synced under `batch`, written
    /// under `none`). This member acknowledges (and, leading, counts itself) only up to it.
    pub(super) synced: Option<Counter>,
    /// With a recorded log: the recorder's switch queue gets each new log, with a consumer slot of its own.
    pub(super) records: bool,
    pub(super) core: ConsensusCore,
    pub(super) wiring: Wiring,
    pub(super) socket: Box<dyn Transport>,
    /// The node's clock.
    pub(super) clock: NanoClock,
    pub(super) votes: VoteFile,
    pub(super) clients: Option<ClientIngress>,
    pub(super) ingress: ManyToOneRingBuffer,
    pub(super) shared: Arc<Shared>,
    pub(super) counters: DriverCounters,
}

impl ConsensusAgent {
    pub(super) fn new(parts: DriverParts) -> Self {
        let config = &parts.wiring.config;
        let peers = config
            .members
            .iter()
            .filter(|m| m.id != config.id)
            .map(|m| Peer { id: m.id, addr: m.consensus, sockaddr: SockAddr::from(m.consensus) })
            .collect();
        let preferred_leader = config.leader == Some(config.id);
        Self {
            core: parts.core,
            outputs: Vec::with_capacity(16),
            executing: Vec::with_capacity(16),
            socket: parts.socket,
            batch: RecvBatch::new(16, wire::MAX_CONSENSUS_FRAME_LENGTH.max(64) + 64),
            peers,
            votes: parts.votes,
            ingress: parts.ingress,
            clients: parts.clients,
            clock: parts.clock,
            current: Current::Idle,
            log: parts.tail.map(|(log, start)| MemberLog { log, start, file: None }),
            synced: parts.synced,
            records: parts.records,
            shared: parts.shared,
            counters: parts.counters,
            last_position_send_ns: 0,
            preferred_leader,
            next_receive_ns: 0,
            logs: RateLimited::default(),
            membership_log: RateLimited::default(),
            wiring: parts.wiring,
        }
    }

    /// One duty cycle; returns the work done.
    fn poll_once(&mut self) -> Result<usize, AgentError> {
        let now_ns = self.clock.now_ns();
        if std::mem::take(&mut self.preferred_leader) {
            self.core.campaign(now_ns, &mut self.outputs);
        }
        if let Some(target) = self.shared.take_transfer() {
            let log_end = match &self.current {
                Current::Leading(leading) => leading.stage.position(),
                _ => self.core.append_position(),
            };
            match self.core.transfer_leadership(target, log_end, now_ns, &mut self.outputs) {
                Ok(to) => log::info!("member {}: handing the leadership to member {to}", self.wiring.config.id),
                Err(e) => log::warn!("member {}: cannot transfer the leadership: {e}", self.wiring.config.id),
            }
        }
        let mut work = 0;
        if now_ns >= self.next_receive_ns {
            let received = self.receive(now_ns);
            // While frames arrive (an election), read on every cycle.
            self.next_receive_ns = if received > 0 { now_ns } else { now_ns + CONSENSUS_POLL_INTERVAL_NS };
            self.mirror_counters(now_ns);
            work += received;
            // What the messages decided is carried out before the data path's positions are handed over:
            // a new term's ReplicateFrom names the core's position now, and an image of the term it ends
            // must not feed the core past it first (soak seeds 1796322893243130984, 1796322893239166647).
            work += self.execute(now_ns)?;
        }
        work += self.feed(now_ns)?;
        self.core.tick(now_ns, &mut self.outputs);
        work += self.execute(now_ns)?;
        work += self.append(now_ns);
        work += self.execute(now_ns)?;
        Ok(work)
    }

    /// Reads consensus frames and hands each, from a member's consensus endpoint, to the core.
    fn receive(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        while work < MAX_FRAMES_PER_CYCLE {
            let received = self.socket.recv_batch(&mut self.batch).unwrap_or(0);
            for i in 0..received {
                let datagram = self.batch.datagram(i);
                self.counters.frames_received.increment();
                let peer = datagram.source.and_then(|s| self.peers.iter().find(|p| p.addr == s));
                let (Some(peer), false) = (peer, datagram.forged) else {
                    self.counters.foreign_dropped.increment();
                    continue;
                };
                match wire::decode(datagram.bytes) {
                    Ok((sender, message)) if sender == peer.id => {
                        self.core.on_message(sender, message, now_ns, &mut self.outputs)
                    }
                    Ok(_) => self.counters.foreign_dropped.increment(),
                    Err(_) => self.counters.malformed_dropped.increment(),
                }
            }
            work += received;
            if received < self.batch.capacity() {
                break;
            }
        }
        work
    }

    /// Hands the data path's positions to the core.
    fn feed(&mut self, now_ns: u64) -> Result<usize, AgentError> {
        let mut taken = None;
        let mut refused = false;
        let work = match &mut self.current {
            Current::Idle => 0,
            Current::Leading(leading) => {
                let mut work = 0;
                if let Some(synced) = &self.synced {
                    // A recording leader counts itself as its recorder makes its log durable.
                    let own = leading.stage.position().min(synced.get());
                    if own > leading.own_fed {
                        leading.own_fed = own;
                        self.core.on_append_position(leading.term, own, now_ns, &mut self.outputs);
                        work += 1;
                    }
                }
                // A recording leader's own position is its durable one, which a follower's may pass: its
                // acknowledgement is handed over up to the leader's, and the rest once the leader's is.
                let own = if self.synced.is_some() { leading.own_fed } else { i64::MAX };
                for (member, counter, fed) in leading.acks.iter_mut() {
                    let position = counter.get().min(own);
                    if position > *fed {
                        *fed = position;
                        let message =
                            Message::AppendPosition { leadership_term_id: leading.term, log_position: position };
                        self.core.on_message(*member, message, now_ns, &mut self.outputs);
                        work += 1;
                    }
                }
                work
            }
            Current::Following(following) => {
                let mut work = 0;
                if let Some(image) = following.subscription.as_mut().and_then(Subscription::take_image) {
                    following.subscription = None;
                    // An image that does not start where the logs agree is not this member's log.
                    if image.position == following.join {
                        taken = Some(image);
                        work += 1;
                    } else {
                        log::warn!(
                            "member {}: refused leader {}'s image starting at {}: this member's log agrees with the \
                             leader's up to {}; following it again with a new Receiver",
                            self.wiring.config.id,
                            following.leader,
                            image.position,
                            following.join
                        );
                        refused = true;
                    }
                }
                let durable = self.synced.as_ref().map_or(i64::MAX, Counter::get);
                work += feed_follower(following, durable, &mut self.core, now_ns, &mut self.outputs);
                let commit = self.wiring.counters.consensus.commit.get();
                if commit > following.commit_fed {
                    following.commit_fed = commit;
                    let message = Message::CommitPosition { leadership_term_id: following.term, log_position: commit };
                    self.core.on_message(following.leader, message, now_ns, &mut self.outputs);
                }
                work
            }
        };
        if let Some(image) = taken {
            self.adopt_image(image)?;
        }
        if refused {
            self.follow_again()?;
        }
        Ok(work + self.poll_catch_up(now_ns)?)
    }

    /// On a follower with a recorded log: joins the live log after a catch-up the recorder finished, and
    /// asks for one when the leader said it no longer holds this member's position in memory (or when a
    /// failed one is due again).
    fn poll_catch_up(&mut self, now_ns: u64) -> Result<usize, AgentError> {
        let Current::Following(following) = &mut self.current else {
            return Ok(0);
        };
        if !self.records {
            return Ok(0);
        }
        match self.shared.catch_ups.take_result().filter(|(ticket, _)| following.catch_up.asked(*ticket)) {
            Some((_, Ok(fetched))) => {
                self.join_after_catch_up(fetched)?;
                return Ok(1);
            }
            Some((_, Err(why))) => {
                self.logs.warn(now_ns, || {
                    let retry = std::time::Duration::from_nanos(catch_up::RETRY_NS);
                    format!(
                        "a catch-up from leader {}'s recording failed (retried in {retry:?}): {why}",
                        following.leader
                    )
                });
                following.catch_up.failed(now_ns);
            }
            None => {}
        }
        let behind = self.wiring.counters.receiver.behind_retained.get();
        if following.fed == i64::MAX || !following.catch_up.start_if_due(behind, now_ns) {
            return Ok(0);
        }
        // The leader no longer holds this member's position in memory: its Receiver stops, and the recorder
        // fetches the log from the leader's recording.
        following.subscription = None;
        self.wiring.clear();
        let config = &self.wiring.config;
        if let Some(leader) = config.member(following.leader).map(|m| m.consensus) {
            let request = CatchUpRequest::new(config.membership(), config.id, following.fed);
            following.catch_up.ticket(self.shared.catch_ups.request(leader, request));
            log::info!(
                "member {}: leader {} no longer holds this member's log position {} in memory; fetching the rest \
                 from its recording (a catch-up over TCP at {leader}), then joining its live log",
                config.id,
                following.leader,
                following.fed
            );
        }
        Ok(1)
    }

    /// The leader's image did not start where this member's log agrees with it: that Receiver stops (what it
    /// rebuilds is not this member's log, and must not raise its commit position), and a new one waits for
    /// the leader's log from the same position.
    fn follow_again(&mut self) -> Result<(), AgentError> {
        let Current::Following(following) = &mut self.current else {
            return Ok(());
        };
        self.wiring.clear();
        let followership =
            self.wiring.follow(following.leader, following.join, self.synced.clone()).map_err(AgentError::new)?;
        following.subscription = Some(followership.subscription);
        following.append = followership.append;
        following.term_starts = followership.term_starts;
        Ok(())
    }

    /// The leader's image is made: it becomes this member's log (kept in the data directory), and the
    /// node's reader goes on in it at the position it starts at.
    fn adopt_image(&mut self, image: ImageHandoff) -> Result<(), AgentError> {
        if self.records {
            let consumer = image.log.register_consumer(image.position).map_err(AgentError::new)?;
            self.shared.recorder_switches.complete(image.position, RecorderSource { log: image.log.clone(), consumer });
        }
        self.shared.switches.complete(image.position, ReaderLog::Memory(image.reader, image.consumer));
        // The image's file goes when a newer log replaces it (its mapping stays while it is read).
        self.replace_log(MemberLog { log: image.log, start: image.position, file: image.file });
        Ok(())
    }

    /// The recorder fetched the log up to `fetched.end` (after the snapshot it installed, if any): the
    /// member's log goes on there. The node's reader replays what was fetched, the core is handed its
    /// terms and end, and a new Receiver joins the live log at the end: no gap, no duplicate.
    fn join_after_catch_up(&mut self, fetched: Fetched) -> Result<(), AgentError> {
        let Current::Following(following) = &mut self.current else {
            return Ok(());
        };
        let followership =
            self.wiring.follow(following.leader, fetched.end, self.synced.clone()).map_err(AgentError::new)?;
        let mut terms = fetched.terms.iter();
        if let Some(snapshot) = &fetched.snapshot {
            // The bytes between this member's log and the snapshot are not this member's: its log goes on
            // from the snapshot's position in the snapshot's term (all of it committed, never cut back), and
            // its terms below it are the leader's.
            if let Some(&(_, term)) = terms.next() {
                following.fed_term = following.fed_term.max(term);
            }
            let mut history: Vec<TermBase> = fetched
                .history
                .iter()
                .map(|&(base_position, leadership_term_id)| TermBase { leadership_term_id, base_position })
                .collect();
            if history.is_empty() {
                // A leader whose index lost the terms below its start (compacted before they were kept):
                // the snapshot's term holds from 0, as such a recording holds its first term.
                history.push(TermBase { leadership_term_id: following.fed_term, base_position: 0 });
            }
            // The log goes on in the term it is in at the snapshot.
            following.fed_term = following.fed_term.max(history.last().map_or(0, |t| t.leadership_term_id));
            self.core.on_snapshot_installed(snapshot.position, &history, &mut self.outputs);
        }
        for &(base, term) in terms {
            followership.term_starts.report(base, term);
        }
        let snapshot = fetched.snapshot.as_ref().map(|s| s.position);
        let installed = snapshot.map_or(String::new(), |at| format!(", after installing its snapshot at {at}"));
        log::info!(
            "member {}: caught up from leader {}'s recording from {} to {}{installed}; joining its live log there",
            self.wiring.config.id,
            following.leader,
            following.fed,
            fetched.end
        );
        // The node's reader goes on in the recording from where it is (at or past where the fetch began).
        let from = if snapshot.is_some() { following.fed } else { fetched.from };
        if let Some(at) = snapshot {
            // The core holds the log up to the snapshot now: it is fed from there.
            following.fed = following.fed.max(at);
        }
        // The planted bug: the reader goes on where the fetch ended, past what it fetched.
        let from = if self.wiring.env.bugs.catch_up_wrong_offset { fetched.end } else { from };
        self.shared.switches.push(from, Some(ReaderLog::Recorded { snapshot }));
        self.shared.switches.push(fetched.end, None);
        self.shared.recorder_switches.push(fetched.end, None);
        following.subscription = Some(followership.subscription);
        following.join = fetched.end;
        following.append = followership.append;
        following.term_starts = followership.term_starts;
        following.reported = 0;
        following.catch_up.joined();
        Ok(())
    }

    /// On the leader whose term has started: client messages into the log (from the ingress ring and the
    /// client endpoint). Elsewhere the client endpoint redirects clients to the leader.
    fn append(&mut self, now_ns: u64) -> usize {
        let Current::Leading(leading) = &mut self.current else {
            let leader = self.shared.leader();
            return self.clients.as_mut().map_or(0, |clients| clients.poll(now_ns, None, leader));
        };
        // The commit this cycle's acknowledgements moved rides in what is appended now, or goes in a frame.
        leading.stage.on_commit(self.core.commit_position());
        if self.core.is_transferring() {
            // Handing the leadership over: nothing new, so the target can reach the end of the log (the
            // ingress ring and the clients' sockets hold what arrives; a new leader's term drops it).
            return leading.stage.send_commit_if_due(0, now_ns);
        }
        let mut appended = leading.stage.drain(&self.ingress);
        if let Some(clients) = self.clients.as_mut() {
            let appending = Appending::new(&mut leading.stage, leading.term);
            appended += clients.poll(now_ns, Some(appending), Some(self.core.member_id()));
        }
        if appended > 0 && self.synced.is_none() {
            self.core.on_append_position(leading.term, leading.stage.position(), now_ns, &mut self.outputs);
        }
        appended + leading.stage.send_commit_if_due(appended, now_ns)
    }

    /// Carries out the core's outputs, in order, and those they lead to; except that a new term's log is
    /// made after the rest of the call's outputs: the term's announcement goes out first, so the followers
    /// get ready while the log is made (what the announcement says of the log holds either way).
    fn execute(&mut self, now_ns: u64) -> Result<usize, AgentError> {
        let mut work = 0;
        while !self.outputs.is_empty() {
            let mut term_start = None;
            let mut deferred = Vec::new();
            // Two buffers swapped, so that a duty cycle allocates nothing.
            let mut batch = std::mem::take(&mut self.executing);
            std::mem::swap(&mut batch, &mut self.outputs);
            for output in batch.drain(..) {
                work += 1;
                // A send after the term start goes first, unless a vote it may depend on waits behind it.
                let hoisted = matches!(output, Output::Send { .. })
                    && !deferred.iter().any(|o| matches!(o, Output::Persist { .. }));
                match output {
                    Output::AppendTermStart { .. } if term_start.is_none() => term_start = Some(output),
                    _ if term_start.is_none() || hoisted => self.execute_one(output, now_ns)?,
                    _ => deferred.push(output),
                }
            }
            self.executing = batch;
            if let Some(start) = term_start {
                self.execute_one(start, now_ns)?;
                self.outputs.splice(0..0, deferred);
            }
        }
        Ok(work)
    }

    fn execute_one(&mut self, output: Output, now_ns: u64) -> Result<(), AgentError> {
        match output {
            Output::Persist { leadership_term_id, voted_for } => {
                // Nothing after a vote may run before the vote is on stable storage: a member that cannot
                // persist stops rather than vote.
                self.votes.store(TermVote { leadership_term_id, voted_for }).map_err(AgentError::new)?;
            }
            Output::Send { to, message } => self.send(to, message, now_ns),
            Output::RoleChange { role, leadership_term_id, leader_member_id } => {
                self.on_role_change(role, leadership_term_id, leader_member_id)
            }
            Output::AppendTermStart { leadership_term_id, position } => {
                self.start_term(leadership_term_id, position, now_ns)?
            }
            Output::Truncate { position } => {
                self.counters.truncations.increment();
                let dropped = self.log.as_ref().map_or(0, |l| l.log.producer_position() - position);
                self.logs.warn(now_ns, || {
                    format!("log cut back to {position}: {dropped} bytes this member held were never committed")
                });
            }
            Output::ReplicateFrom { leader_member_id, leadership_term_id, position } => {
                self.replicate_from(leader_member_id, leadership_term_id, position)?
            }
            Output::Commit { position } => {
                self.wiring.counters.consensus.commit.set_max(position);
            }
            Output::Error(error) => {
                self.counters.core_errors.increment();
                self.logs.warn(now_ns, || format!("consensus core refused: {error}"));
                if let CoreError::AppendPositionWentBack { .. } | CoreError::AppendTermWentBack { .. } = error {
                    return Err(AgentError::msg(format!("the log and the consensus core disagree: {error}")));
                }
            }
        }
        Ok(())
    }

    /// Sends `message` on the consensus endpoint; commit and append positions at most once per half
    /// heartbeat interval (the data path carries them at data rate).
    fn send(&mut self, to: Destination, message: Message, now_ns: u64) {
        if let Message::CommitPosition { .. } | Message::AppendPosition { .. } = message {
            let interval = self.core.config().timers.heartbeat_interval_ns / 2;
            if now_ns.saturating_sub(self.last_position_send_ns) < interval {
                return;
            }
            self.last_position_send_ns = now_ns;
        }
        let mut bytes = [0u8; wire::MAX_CONSENSUS_FRAME_LENGTH];
        let Ok(length) = wire::encode(self.core.member_id(), &message, &mut bytes) else {
            return;
        };
        for peer in self.peers.iter().filter(|p| matches!(to, Destination::Others) || to == Destination::Member(p.id)) {
            // A lost send is what the network does anyway: the core repeats what matters.
            let _ = self.socket.send(&bytes[..length], Some(&peer.sockaddr));
            self.counters.frames_sent.increment();
        }
    }

    fn on_role_change(&mut self, role: Role, leadership_term_id: i64, leader: Option<i32>) {
        let id = self.wiring.config.id;
        log::info!("member {id}: {role} in term {leadership_term_id}, leader {leader:?}");
        if let Some(why) = self.core.take_step_down() {
            log::warn!("member {id}: stopped leading: {why}");
        }
        self.counters.role_changes.increment();
        self.counters.leadership_term.set(leadership_term_id);
        if role == Role::Candidate {
            self.counters.elections.increment();
        }
        self.shared.publish(RoleChange { role, leadership_term_id, leader });
        // A canvass changes no term: the follower keeps replicating its leader meanwhile (a refused
        // pre-vote must cost the steady state nothing), and so when it hears that leader again.
        let same_leader = |f: &Following| {
            f.term == leadership_term_id
                && (role == Role::Canvass || (role == Role::Follower && leader.is_none_or(|l| l == f.leader)))
        };
        if matches!(&self.current, Current::Following(f) if same_leader(f)) {
            return;
        }
        // Whatever ran for the old role stops: a leader's Sender, a follower's Receiver.
        // (A leader's log stays this member's log: its bytes up to the core's append position are kept.)
        if let Current::Leading(_) = std::mem::replace(&mut self.current, Current::Idle) {
            // Messages taken for a term that is over are not this cluster's to append any more.
            let dropped = self.ingress.read(|_, _| {}, usize::MAX);
            self.counters.ingress_dropped.add(dropped as i64);
        }
        if let Some(clients) = self.clients.as_mut() {
            clients.on_role_change();
        }
        self.wiring.clear();
    }

    /// Leads `term` from `position`: a new log continued from this member's, a Sender, the marker.
    fn start_term(&mut self, term: i64, position: i64, now_ns: u64) -> Result<(), AgentError> {
        let previous = self.log.as_ref().map(|l| (&l.log, l.start));
        let making = std::time::Instant::now();
        let leadership = self
            .wiring
            .lead(term, position, previous, |session| self.core.ack_rule(session))
            .map_err(AgentError::new)?;
        log::info!(
            "member {} leads term {term} from position {position}: its log (from {}) made in {:?}",
            self.wiring.config.id,
            leadership.start,
            making.elapsed()
        );
        let reader = LogReader::new(&leadership.log);
        let consumer = leadership.log.register_consumer(position).map_err(AgentError::new)?;
        let config = &self.wiring.config;
        let mut stage = AppendStage::new(AppendParts {
            appender: leadership.appender,
            commands: leadership.commands,
            identity: LogIdentity {
                session_id: leadership.session_id,
                stream_id: config.stream_id,
                leader_member_id: config.id,
                leadership_term_id: term,
            },
            piggyback: config.commit_piggyback,
            piggyback_refresh: (config.channel.receiver_window / 4) as i64,
            commit_heartbeat_ns: crate::agent::clock::nanos(config.commit_heartbeat),
            commit: self.core.commit_position(),
            max_uncommitted: if self.wiring.env.bugs.unbounded_uncommitted {
                i64::MAX / 2
            } else {
                crate::cluster::append::uncommitted_bound(config.channel.receiver_window)
            },
            counters: self.wiring.counters.consensus.clone(),
        });
        let end = stage.append_term_start().map_err(AgentError::new)?;
        if self.records {
            let consumer = leadership.log.register_consumer(position).map_err(AgentError::new)?;
            self.shared
                .recorder_switches
                .push(position, Some(RecorderSource { log: leadership.log.clone(), consumer }));
        }
        self.replace_log(MemberLog { log: leadership.log, start: leadership.start, file: Some(leadership.file) });
        self.shared.switches.push(position, Some(ReaderLog::Memory(reader, consumer)));
        let acks = leadership.acks.into_iter().map(|(id, counter)| (id, counter, 0)).collect();
        self.current = Current::Leading(Box::new(Leading { term, stage, acks, own_fed: position }));
        self.shared.catch_ups.cancel();
        if self.synced.is_none() {
            self.core.on_append_position(term, end, now_ns, &mut self.outputs);
        }
        Ok(())
    }

    /// Follows `leader` in `term` from `position`, where this member's log agrees with the leader's.
    fn replicate_from(&mut self, leader: i32, term: i64, position: i64) -> Result<(), AgentError> {
        if matches!(&self.current, Current::Following(f) if f.continues(leader, term, position)) {
            // Matched again within what this Receiver's image already rebuilt (after a refused canvass): go on.
            return Ok(());
        }
        // A catch-up the previous followership asked for is of its leader's log: it stops, and its result,
        // if one still comes, is not this followership's.
        self.shared.catch_ups.cancel();
        let followership = self.wiring.follow(leader, position, self.synced.clone()).map_err(AgentError::new)?;
        self.shared.switches.push(position, None);
        if self.records {
            self.shared.recorder_switches.push(position, None);
        }
        let fed_term = self.core.term_history().last_term_id();
        self.current = Current::Following(Box::new(Following {
            leader,
            term,
            subscription: Some(followership.subscription),
            join: position,
            append: followership.append,
            term_starts: followership.term_starts,
            reported: 0,
            pending: Vec::new(),
            fed: position,
            fed_term,
            commit_fed: 0,
            catch_up: CatchUpState::new(self.wiring.counters.receiver.behind_retained.get()),
        }));
        Ok(())
    }

    fn replace_log(&mut self, log: MemberLog) {
        if let Some(file) = self.log.take().and_then(|old| old.file) {
            // Unlinked, the file's memory stays mapped for a reader still on it, and is freed with it.
            let _ = std::fs::remove_file(file);
        }
        self.log = Some(log);
    }

    fn mirror_counters(&mut self, now_ns: u64) {
        let core = *self.core.counters();
        if core.membership_mismatch as i64 > self.counters.refused_membership.get() {
            let members: Vec<i32> = self.wiring.config.members.iter().map(|m| m.id).collect();
            self.membership_log.warn(now_ns, || {
                format!(
                    "refused a canvass or vote request from a member configured with another member list (this \
                     node's members are {members:?}): give every node the same `members`"
                )
            });
        }
        self.counters.stale_dropped.set((core.stale_term + core.duplicate + core.unexpected) as i64);
        self.counters.refused_membership.set(core.membership_mismatch as i64);
        if let Current::Following(_) = self.current {
            self.wiring.counters.follower_commit.set_max(self.wiring.counters.consensus.commit.get());
        }
    }
}

/// Hands the follower's newly rebuilt bytes to the core, one term at a time, split at the term-start
/// markers the Receiver found; returns the positions handed over.
fn feed_follower(
    following: &mut Following,
    durable: i64,
    core: &mut ConsensusCore,
    now_ns: u64,
    out: &mut Vec<Output>,
) -> usize {
    // A recording follower reports only what its recorder made durable.
    let rebuilt = following.append.get().min(durable);
    let reported = following.term_starts.reported();
    if reported != following.reported {
        following.reported = reported;
        if following.term_starts.take(&mut following.pending) {
            // Markers were lost: the terms of the log cannot be told. Report bytes no further; the
            // member stays in the cluster's count as one that has not caught up.
            following.fed = i64::MAX;
            return 0;
        }
        following.pending.sort_unstable();
        following.pending.dedup();
    }
    if rebuilt <= following.fed {
        return 0;
    }
    let mut fed = 0;
    for &(at, term) in &following.pending {
        if at < following.fed || at >= rebuilt {
            continue;
        }
        if at > following.fed {
            core.on_append_position(following.fed_term, at, now_ns, out);
            following.fed = at;
            fed += 1;
        }
        following.fed_term = term;
    }
    following.pending.retain(|(at, _)| *at >= rebuilt);
    core.on_append_position(following.fed_term, rebuilt, now_ns, out);
    following.fed = rebuilt;
    fed + 1
}

impl Agent for ConsensusAgent {
    fn name(&self) -> &str {
        "consensus"
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        self.poll_once()
    }
}
