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
//!
//! This module holds the duty cycle and the carrying out of outputs; the follower's side (the image, the
//! catch-up, joining the live log) is in `following` (when to catch up, without I/O, in `catch_up`), the
//! leader's (its term's log, its own and its followers' positions, the append stage) in `leading`,
//! membership changes in `reconfiguring`, the operator's commands in `administering`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use socket2::SockAddr;

use crate::agent::clock::NanoClock;
use crate::agent::{Agent, AgentError};
use crate::cluster::consensus_core::{wire, ConsensusCore, CoreError, Destination, Message, Output, Role};
use crate::cluster::introduction;
use crate::cluster::log_switch::SwitchQueue;
use crate::event_log::RateLimited;
use crate::media::transport::{RecvBatch, Transport};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::LogBuffer;
use crate::shm::ring_buffer::ManyToOneRingBuffer;
use crate::shm::stats::{kinds, CounterKind};
use crate::storage::recording::catch_up::CatchUpMembers;
use crate::storage::recording::{CatchUpChannel, RecorderSource};
use crate::storage::vote_file::{TermVote, VoteFile};

use super::admin::{self, AdminRings};

use super::sessions::clock::LeaderClock;
use super::sessions::ingress::ClientIngress;
use super::start::wiring::Wiring;
use super::{Links, RoleChange};

mod administering;
mod catch_up;
mod following;
mod leading;
mod reconfiguring;

/// Most consensus frames read per duty cycle.
const MAX_FRAMES_PER_CYCLE: usize = 64;

/// How often the consensus endpoint is read (and the core's counters mirrored) while it is quiet: election
/// frames and heartbeats come every few milliseconds at most, and a receive call on every duty cycle
/// would add a syscall to each cycle of a spinning consensus agent, which shares its thread with the
/// Sender in the shared and invoker layouts.
const CONSENSUS_POLL_INTERVAL_NS: u64 = 50_000;

/// The counters of the consensus agent's own work (the core's drop reasons are mirrored beside them).
#[derive(Clone, Debug)]
pub(super) struct ConsensusAgentCounters {
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
    pub(super) role: Counter,
    pub(super) leader_member_id: Counter,
    pub(super) configuration_id: Counter,
    pub(super) repairing_to: Counter,
    pub(super) admin_taken: Counter,
    pub(super) admin_refused: Counter,
    pub(super) introductions_sent: Counter,
    pub(super) introductions_taken: Counter,
    /// The node's applied position (the application's, which `Node` sets): what `status` reports.
    pub(super) applied: Counter,
    /// The node's newest snapshot's position (which `Node` sets): what `status` reports.
    pub(super) snapshot: Counter,
}

impl ConsensusAgentCounters {
    /// The counters of member `member_id`'s consensus agent.
    pub(super) fn new(member_id: i32, mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        allocate(&kinds::election::member_id).set(member_id.into());
        let leader_member_id = allocate(&kinds::election::leader_member_id);
        leader_member_id.set(-1);
        Self {
            role: allocate(&kinds::election::role),
            configuration_id: allocate(&kinds::election::configuration_id),
            leader_member_id,
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
            repairing_to: allocate(&kinds::election::repairing_to),
            admin_taken: allocate(&kinds::election::admin_taken),
            admin_refused: allocate(&kinds::election::admin_refused),
            introductions_sent: allocate(&kinds::election::introductions_sent),
            introductions_taken: allocate(&kinds::election::introductions_taken),
            applied: allocate(&kinds::state::applied_position),
            snapshot: allocate(&kinds::state::snapshot_position),
        }
    }
}

/// A leadership transfer asked of the consensus agent (by [`Node::transfer_leadership`](super::Node::transfer_leadership)
/// or an operator): [`NO_TRANSFER`], [`ANY_MEMBER`] or a member id.
pub(super) struct LeadershipTransfer(AtomicI64);

/// No transfer is asked for.
const NO_TRANSFER: i64 = i64::MIN;
/// A transfer to the follower furthest along.
const ANY_MEMBER: i64 = -1;

impl Default for LeadershipTransfer {
    fn default() -> Self {
        Self(AtomicI64::new(NO_TRANSFER))
    }
}

impl LeadershipTransfer {
    /// Asks the consensus agent to hand the leadership to `to` (`None`: the follower furthest along).
    pub(super) fn request(&self, to: Option<i32>) {
        self.0.store(to.map_or(ANY_MEMBER, i64::from), Ordering::Release);
    }

    /// The transfer asked for, if one was: its target (`None`: any).
    fn take(&self) -> Option<Option<i32>> {
        match self.0.swap(NO_TRANSFER, Ordering::AcqRel) {
            NO_TRANSFER => None,
            ANY_MEMBER => Some(None),
            id => Some(Some(id as i32)),
        }
    }
}

/// What the consensus agent shares with the recorder (a node with a recorded log): the log switches the
/// recorder has still to make, the catch-ups the agent asks it for, and the members its catch-up server
/// serves (which the agent changes with the membership).
#[derive(Default)]
pub(super) struct RecorderLink {
    pub(super) switches: Arc<SwitchQueue<RecorderSource>>,
    pub(super) catch_ups: Arc<CatchUpChannel>,
    pub(super) members: CatchUpMembers,
    /// With a recorded log: the recorder's durable position (synced under `batch`, written under `none`);
    /// `Some` exactly when there is a recorder, which takes every new log.
    synced: Option<Counter>,
}

impl RecorderLink {
    /// Whether a recorder takes every new log (the node records its log).
    pub(super) fn records(&self) -> bool {
        self.synced.is_some()
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
    Leading(Box<leading::Leading>),
    Following(Box<following::Following>),
}

/// The consensus agent of a node.
pub(super) struct ConsensusAgent {
    core: ConsensusCore,
    outputs: Vec<Output>,
    /// The outputs being carried out (swapped with `outputs`).
    executing: Vec<Output>,
    wiring: Wiring,
    /// The consensus endpoint and the other members it hears.
    endpoint: ConsensusEndpoint,
    votes: VoteFile,
    /// Where clients' messages come in.
    intake: Intake,
    clock: NanoClock,
    current: Current,
    log: Option<MemberLog>,
    /// What it shares with the node's application side.
    links: Links,
    /// What it shares with the recorder.
    recorder: RecorderLink,
    counters: ConsensusAgentCounters,
    preferred_leader: bool,
    warnings: Warnings,
    /// The operator's commands.
    operator: administering::Operator,
}

/// The consensus endpoint: its socket, the members it hears, and when it is read and written.
struct ConsensusEndpoint {
    socket: Box<dyn Transport>,
    batch: RecvBatch,
    peers: Vec<Peer>,
    /// When the endpoint is next read.
    next_receive_ns: u64,
    /// When the core last sent a commit (leader) or append (follower) position on it.
    last_position_send_ns: u64,
}

/// Where clients' messages come in: the node's ingress ring (local clients), and the client endpoint
/// (remote clients).
struct Intake {
    ring: ManyToOneRingBuffer,
    /// The client endpoint, when remote clients are taken.
    endpoint: Option<ClientIngress>,
    /// The leader's clock in the log: its term's entry and the ticks for the replicated deadlines.
    clock: LeaderClock,
}

/// The agent's rate-limited warnings: a limiter of their own for members configured with another member
/// list, so that other warnings never hide that one.
#[derive(Default)]
struct Warnings {
    general: RateLimited,
    membership: RateLimited,
}

/// What a consensus agent is made of.
pub(super) struct ConsensusAgentParts {
    /// The last bytes of this member's recorded log, rebuilt in memory at start, and where they start.
    pub(super) tail: Option<(LogBuffer, i64)>,
    /// With a recorded log: the position the recorder has made durable (synced under `batch`, written
    /// under `none`). This member acknowledges (and, leading, counts itself) only up to it. `Some` exactly
    /// when there is a recorder, whose switch queue then gets each new log, with a consumer slot of its own.
    pub(super) synced: Option<Counter>,
    pub(super) core: ConsensusCore,
    pub(super) wiring: Wiring,
    pub(super) socket: Box<dyn Transport>,
    /// The node's clock.
    pub(super) clock: NanoClock,
    pub(super) votes: VoteFile,
    pub(super) clients: Option<ClientIngress>,
    pub(super) leader_clock: LeaderClock,
    pub(super) ingress: ManyToOneRingBuffer,
    pub(super) links: Links,
    pub(super) recorder: RecorderLink,
    pub(super) counters: ConsensusAgentCounters,
    /// The operator's command rings in the node directory.
    pub(super) admin: Option<AdminRings>,
}

impl ConsensusAgent {
    pub(super) fn new(parts: ConsensusAgentParts) -> Self {
        let config = &parts.wiring.config;
        let peers = reconfiguring::peers_of(&parts.wiring);
        let preferred_leader = config.leader == Some(config.id);
        let mut clients = parts.clients;
        reconfiguring::publish_membership(
            &parts.core,
            &parts.wiring,
            &peers,
            clients.as_mut(),
            &parts.counters,
            &parts.links,
            &parts.recorder,
        );
        let mut recorder = parts.recorder;
        recorder.synced = parts.synced;
        Self {
            core: parts.core,
            outputs: Vec::with_capacity(16),
            executing: Vec::with_capacity(16),
            endpoint: ConsensusEndpoint {
                socket: parts.socket,
                batch: RecvBatch::new(16, wire::MAX_CONSENSUS_FRAME_LENGTH.max(64) + 64),
                peers,
                next_receive_ns: 0,
                last_position_send_ns: 0,
            },
            votes: parts.votes,
            intake: Intake { ring: parts.ingress, endpoint: clients, clock: parts.leader_clock },
            clock: parts.clock,
            current: Current::Idle,
            log: parts.tail.map(|(log, start)| MemberLog { log, start, file: None }),
            links: parts.links,
            recorder,
            counters: parts.counters,
            preferred_leader,
            warnings: Warnings::default(),
            operator: administering::Operator::new(parts.admin),
            wiring: parts.wiring,
        }
    }

    /// One duty cycle; returns the work done.
    fn poll_once(&mut self) -> Result<usize, AgentError> {
        let now_ns = self.clock.now_ns();
        if std::mem::take(&mut self.preferred_leader) {
            self.core.campaign(now_ns, &mut self.outputs);
        }
        if let Some(target) = self.links.transfer.take() {
            let log_end = match &self.current {
                Current::Leading(leading) => leading.stage.position(),
                _ => self.core.append_position(),
            };
            match self.core.transfer_leadership(target, log_end, now_ns, &mut self.outputs) {
                Ok(to) => log::info!("member {}: handing the leadership to member {to}", self.wiring.config.id),
                Err(e) => log::warn!("member {}: cannot transfer the leadership: {e}", self.wiring.config.id),
            }
        }
        let mut work = self.poll_membership_request(now_ns);
        if now_ns >= self.endpoint.next_receive_ns {
            let received = self.receive(now_ns);
            // While frames arrive (an election), read on every cycle.
            self.endpoint.next_receive_ns = if received > 0 { now_ns } else { now_ns + CONSENSUS_POLL_INTERVAL_NS };
            self.mirror_counters(now_ns);
            work += received + self.poll_admin(now_ns);
            // What the messages decided is carried out before the data path's positions are handed over:
            // a new term's ReplicateFrom names the core's position now, and an image of the term it ends
            // must not feed the core past it first.
            work += self.execute(now_ns)?;
        }
        work += self.feed(now_ns)?;
        self.core.tick(now_ns, &mut self.outputs);
        work += self.execute(now_ns)?;
        work += self.append(now_ns);
        work += self.execute(now_ns)?;
        self.wiring.make_spare_if_due(self.term_settled(), now_ns);
        Ok(work)
    }

    /// Whether the current term has settled: as leader, a quorum holds its term start (its first commit);
    /// as a follower, the leader's commit has passed where this member joined its log.
    fn term_settled(&self) -> bool {
        match &self.current {
            Current::Leading(leading) => self.core.commit_position() >= leading.start_end,
            Current::Following(following) => following.commit_fed > following.join,
            Current::Idle => false,
        }
    }

    /// Reads consensus frames and hands each, from a member's consensus endpoint, to the core.
    fn receive(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        while work < MAX_FRAMES_PER_CYCLE {
            let received = self.endpoint.socket.recv_batch(&mut self.endpoint.batch).unwrap_or(0);
            for i in 0..received {
                let datagram = self.endpoint.batch.datagram(i);
                self.counters.frames_received.increment();
                if admin::is_admin_request(datagram.bytes) {
                    // From an operator, not a member: its own key authenticates it, whatever its source.
                    let (bytes, source) = (datagram.bytes.to_vec(), datagram.source);
                    self.on_admin_datagram(&bytes, source, now_ns);
                    continue;
                }
                let peer = datagram.source.and_then(|s| self.endpoint.peers.iter().find(|p| p.addr == s));
                let (Some(peer), false) = (peer, datagram.forged) else {
                    self.counters.foreign_dropped.increment();
                    continue;
                };
                if introduction::is_introduction(datagram.bytes) {
                    let (introduced, from) = (introduction::decode(datagram.bytes), peer.id);
                    self.on_introduction(introduced, from, now_ns);
                    continue;
                }
                match wire::decode(datagram.bytes) {
                    Ok((sender, message)) if sender == peer.id => {
                        if let Message::Canvass { .. } = message {
                            self.introduce_leader(sender);
                        }
                        self.core.on_message(sender, message, now_ns, &mut self.outputs)
                    }
                    Ok(_) => self.counters.foreign_dropped.increment(),
                    Err(_) => self.counters.malformed_dropped.increment(),
                }
            }
            work += received;
            if received < self.endpoint.batch.capacity() {
                break;
            }
        }
        work
    }

    /// Hands the data path's positions to the core.
    fn feed(&mut self, now_ns: u64) -> Result<usize, AgentError> {
        match self.current {
            Current::Idle => Ok(0),
            Current::Leading(_) => Ok(self.feed_leading(now_ns)),
            Current::Following(_) => self.feed_following(now_ns),
        }
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
                self.warnings.general.warn(now_ns, || {
                    format!("log cut back to {position}: {dropped} bytes this member held were never committed")
                });
            }
            Output::ReplicateFrom { leader_member_id, leadership_term_id, position } => {
                self.replicate_from(leader_member_id, leadership_term_id, position)?
            }
            Output::Commit { position } => {
                self.wiring.counters.consensus.commit.set_max(position);
            }
            Output::MembershipChanged { .. } => self.on_membership_changed()?,
            Output::Error(error) => {
                self.counters.core_errors.increment();
                self.warnings.general.warn(now_ns, || format!("consensus core refused: {error}"));
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
            if now_ns.saturating_sub(self.endpoint.last_position_send_ns) < interval {
                return;
            }
            self.endpoint.last_position_send_ns = now_ns;
        }
        let mut bytes = [0u8; wire::MAX_CONSENSUS_FRAME_LENGTH];
        let Ok(length) = wire::encode(self.core.member_id(), &message, &mut bytes) else {
            return;
        };
        // To all: the members of the configurations its log holds (a removed member stops hearing, and a
        // member of no configuration yet waits to be added). To one: whoever it is.
        let configurations = self.core.membership_log();
        let to_peer = |p: &&Peer| match to {
            Destination::Others => configurations.knows(p.id),
            Destination::Member(id) => id == p.id,
        };
        for peer in self.endpoint.peers.iter().filter(to_peer) {
            // A lost send is what the network does anyway: the core repeats what matters.
            let _ = self.endpoint.socket.send(&bytes[..length], Some(&peer.sockaddr));
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
        let role_code = match role {
            Role::Follower => 0,
            Role::Canvass => 1,
            Role::Candidate => 2,
            Role::Leader => 3,
        };
        self.counters.role.set(role_code);
        self.counters.leader_member_id.set(leader.map_or(-1, i64::from));
        if role == Role::Candidate {
            self.counters.elections.increment();
        }
        let change = RoleChange { role, leadership_term_id, leader };
        self.links.offers.publish(&change);
        self.links.roles.push(change);
        // A canvass changes no term: the follower keeps replicating its leader meanwhile (a refused
        // pre-vote must cost the steady state nothing), and so when it hears that leader again.
        let same_leader = |f: &following::Following| {
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
            let dropped = self.intake.ring.read(|_, _| {}, usize::MAX);
            self.counters.ingress_dropped.add(dropped as i64);
        }
        if let Some(clients) = self.intake.endpoint.as_mut() {
            clients.on_role_change();
        }
        self.wiring.clear();
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
            self.warnings.membership.warn(now_ns, || {
                format!(
                    "refused a canvass or vote request from a member configured with another member list (this \
                     node's members are {members:?}): give every node the same `members`"
                )
            });
        }
        self.counters.stale_dropped.set((core.stale_term + core.duplicate + core.unexpected) as i64);
        self.counters.refused_membership.set(core.membership_mismatch as i64);
        self.counters.repairing_to.set(self.core.repair().map_or(0, |r| r.held));
        if let Current::Following(_) = self.current {
            self.wiring.counters.follower_commit.set_max(self.wiring.counters.consensus.commit.get());
        }
    }
}

impl Agent for ConsensusAgent {
    fn name(&self) -> &str {
        "consensus"
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        self.poll_once()
    }
}
