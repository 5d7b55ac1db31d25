//! What a role is made of: the leader's publication and Sender, a follower's Receiver, and putting the
//! node's agents on threads.
//!
//! A node lays out three agents once: the consensus agent, and the places of the Sender and the
//! Receiver ([`Slot`]s). The consensus agent builds, on each change of role, what runs in those places:
//! the leader of a term gets a new log continued at its append position and one Sender replicating it
//! to every follower; a follower gets a Receiver that accepts that leader's log from the position its
//! own log agrees up to. Nothing runs in a place the role does not use.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};

use super::seams::{FollowerLog, LeaderAcks};
use crate::agent::clock::NanoClock;
use crate::agent::{available_cores, Agent, AgentCounters, AgentHandles, AgentLayout, AgentRole, AgentSpec, Warning};
use crate::cluster::append::ConsensusCounters;
use crate::cluster::configuration::MemberEndpoints;
use crate::cluster::consensus_core::AckRule;
use crate::cluster::term_starts::TermStarts;
use crate::media::channel::ChannelConfig;
use crate::media::flow_control::FlowControlMode;
use crate::media::network_publication::{ControlHandler, NetworkPublication, SenderCounters};
use crate::media::receiver::{
    FollowerSeam, ReceiveChannelConfig, Receiver, ReceiverCounters, SpareImage, Subscription,
};
use crate::media::sender::Sender;
use crate::media::time_split::TimeSplitCounters;
use crate::media::transport::faulty::{FaultConfig, Faulty};
use crate::media::transport::{Network, Udp};
use crate::shm::buffer::AtomicBuffer;
use crate::shm::buffer::Region;
use crate::shm::counters::{Counter, CountersManager};
use crate::shm::log_buffer::descriptor::log_length;
use crate::shm::log_buffer::{copy_frames, ExclusiveAppender, LogBuffer, LogConfig, LogError};
use crate::shm::ring_buffer::{self, OneToOneRingBuffer};
use crate::shm::stats::{agent_type_of, kinds, CounterKind, TYPE_ACK_POSITION};

use super::slot::{Slot, SlotHandle};
use crate::node::environment::{Environment, LogFiles};
use crate::node::{Member, NodeConfig, NodeError};

/// The counters a node allocates once and every role's agents share.
#[derive(Clone, Debug)]
pub(crate) struct NodeCounters {
    pub(crate) sender: SenderCounters,
    /// The leader Sender's time split (0 unless `sender_time_split`).
    pub(crate) sender_time: TimeSplitCounters,
    pub(crate) receiver: ReceiverCounters,
    /// The leader's record of each other member's acknowledged position (for `qc-stat`; the consensus
    /// core gets each term's acknowledgements from counters of that term alone).
    pub(crate) acks: Vec<(i32, Counter)>,
    pub(crate) refused_acks: Counter,
    pub(crate) follower_commit: Counter,
    pub(crate) consensus: ConsensusCounters,
    /// Spare log files: one ready (0 or 1), made, and terms that found none (`LogFileStats`).
    pub(crate) spare_ready: Counter,
    pub(crate) spares_made: Counter,
    pub(crate) terms_without_spare: Counter,
}

impl NodeCounters {
    pub(crate) fn allocate(config: &NodeConfig, counters: &CountersManager) -> Self {
        let allocate = |kind: &CounterKind| node_counter(counters, kind);
        let acks = config
            .members
            .iter()
            .filter(|m| m.id != config.id)
            .map(|m| {
                let label = format!("ack position of member {}", m.id);
                (m.id, counters.allocate_owned(&label, TYPE_ACK_POSITION, m.id.into()).expect("counters file has room"))
            })
            .collect();
        Self {
            sender: SenderCounters::new(allocate),
            sender_time: TimeSplitCounters::new(allocate),
            receiver: ReceiverCounters::new(allocate),
            acks,
            refused_acks: allocate(&kinds::membership::acknowledgements_refused),
            follower_commit: allocate(&kinds::membership::follower_commit_position),
            consensus: ConsensusCounters::new(allocate),
            spare_ready: allocate(&kinds::log_files::spare_ready),
            spares_made: allocate(&kinds::log_files::spares_made),
            terms_without_spare: allocate(&kinds::log_files::terms_without_spare),
        }
    }
}

/// A spare log file made off the consensus agent's thread: its path and mapping, or why it failed.
type SpareLog = Result<(PathBuf, Arc<Region>), String>;

/// How long after a term took the spare the next one is made at the earliest, once the term has settled
/// (see [`Wiring::make_spare_if_due`]): the first commits of a new term come in its first milliseconds.
const SPARE_DEFERRAL_MIN_NS: u64 = 100_000_000;

/// Bytes of a spare log file whose pages the thread making it writes in one burst (256 pages): short
/// enough that a burst's page faults hold a core for a fraction of a millisecond.
const SPARE_TOUCH_CHUNK: usize = 1 << 20;

/// The sleep between two bursts: the spare is ready well before the next term needs it, and the
/// bursts leave the cores to the agents between them.
const SPARE_TOUCH_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// The longest the spare taken by a term waits to be replaced when the term does not settle.
const SPARE_DEFERRAL_MAX_NS: u64 = 500_000_000;

/// Builds each role's agents and hands them to their places.
pub(crate) struct Wiring {
    /// The clock, network and seed every agent made here is given.
    pub(crate) env: Environment,
    pub(crate) config: NodeConfig,
    pub(crate) directory: PathBuf,
    pub(crate) counters: NodeCounters,
    pub(crate) sender: SlotHandle<Box<dyn Agent>>,
    pub(crate) receiver: SlotHandle<Box<dyn Agent>>,
    /// A log file being made (reserved and pre-touched) off the consensus agent's thread, for the next
    /// term this member leads: making one takes tens of milliseconds, which would add to every failover.
    spare: Option<mpsc::Receiver<SpareLog>>,
    /// The thread making the newest spare: joined when the wiring goes, so that no spare file is made in
    /// a node directory being removed.
    spare_thread: Option<std::thread::JoinHandle<()>>,
    /// A spare made on this thread (the first, at start; every one with [`LogFiles::Inline`]).
    ready: Option<(PathBuf, Arc<Region>)>,
    /// The next spare is due: a term took the last one. It is made once that term has settled, never
    /// while it starts: reserving and touching a log file takes milliseconds of CPU, which on a small host
    /// competes with every member's agents for the cores just when the new leader and its followers need
    /// them (a leadership transfer's first commit would wait for the members' spares).
    spare_due: bool,
    /// Since when (the consensus agent's time) the due spare has waited for its term to settle.
    spare_due_since: Option<u64>,
    spares_made: u64,
    /// Image files named so far (each follow's image takes the spare log file).
    images_made: u64,
    /// Every member's endpoints this node knows: the node file's, and those of every configuration entry
    /// its log has held (a member added while the cluster runs is named by no node file).
    known: Vec<MemberEndpoints>,
}

/// A leader's log for one term, its Sender handed to its place.
pub(crate) struct Leadership {
    /// The log, continued from the previous one at the term's start position.
    pub(crate) log: LogBuffer,
    /// Where the log's first copied byte is.
    pub(crate) start: i64,
    /// Its file.
    pub(crate) file: PathBuf,
    /// The log's appender, at the term's start position.
    pub(crate) appender: ExclusiveAppender,
    /// Where commit frames go to the Sender.
    pub(crate) commands: OneToOneRingBuffer,
    /// The ring's buffer (a Sender made again for new members reads it too).
    pub(crate) command_buffer: AtomicBuffer,
    /// Each follower's acknowledged position in this term, raised by the Sender's control handler.
    pub(crate) acks: Vec<(i32, Counter)>,
    /// The session of this term's log.
    pub(crate) session_id: i32,
}

/// A follower's Receiver of one leader's log, handed to its place.
pub(crate) struct Followership {
    /// Where the leader's log will be read, once its image is made.
    pub(crate) subscription: Subscription,
    /// The rebuilt position of the image.
    pub(crate) append: Counter,
    /// The term-start markers rebuilt.
    pub(crate) term_starts: Arc<TermStarts>,
    /// What this member's consensus core holds of the leader's log: the Receiver acknowledges no further.
    pub(crate) held: Counter,
}

impl Wiring {
    pub(crate) fn new(
        env: Environment,
        config: NodeConfig,
        directory: PathBuf,
        counters: NodeCounters,
        sender: SlotHandle<Box<dyn Agent>>,
        receiver: SlotHandle<Box<dyn Agent>>,
    ) -> Self {
        let mut wiring = Self {
            env,
            config,
            directory,
            counters,
            sender,
            receiver,
            spare: None,
            spare_thread: None,
            ready: None,
            spare_due: false,
            spare_due_since: None,
            spares_made: 0,
            images_made: 0,
            known: Vec::new(),
        };
        let members: Vec<MemberEndpoints> = wiring.config.members.iter().map(Member::endpoints).collect();
        wiring.learn(&members);
        // The first spare is made now, before the node joins an election: a member that wins its first
        // election without one makes its log on the consensus thread (for longer than a
        // heartbeat timeout with a large log), and its followers, hearing nothing for longer than the heartbeat timeout, elect another.
        if !wiring.env.bugs.no_first_spare() {
            wiring.make_spare_now();
        }
        wiring
    }

    /// Learns the endpoints of `members` (those of a configuration entry replace what was known of them).
    pub(crate) fn learn(&mut self, members: &[MemberEndpoints]) {
        for member in members {
            match self.known.iter_mut().find(|k| k.id == member.id) {
                Some(known) => *known = *member,
                None => self.known.push(*member),
            }
        }
    }

    /// Every member's endpoints this node knows.
    pub(crate) fn known(&self) -> &[MemberEndpoints] {
        &self.known
    }

    /// Member `id`'s endpoints, if known.
    pub(crate) fn endpoints(&self, id: i32) -> Option<MemberEndpoints> {
        self.known.iter().find(|k| k.id == id).copied()
    }

    /// The length of a log file, and the path of the next spare.
    fn next_spare(&mut self) -> (usize, PathBuf) {
        let channel = &self.config.channel;
        let length = log_length(channel.term_length, LogConfig::new(channel.term_length, channel.mtu).page_size);
        let path = self.directory.join(format!("log-spare-{}.dat", self.spares_made));
        self.spares_made += 1;
        (length, path)
    }

    /// Makes the next spare log file on this thread (one that fails is not kept: the term makes its own).
    fn make_spare_now(&mut self) {
        let (length, path) = self.next_spare();
        self.ready = Region::create_file(&path, length, true).ok().map(|region| (path, region));
        if self.ready.is_some() {
            self.counters.spares_made.get_and_add(1);
            self.counters.spare_ready.set(1);
        }
    }

    /// Makes the next spare: on a thread of its own, or on this one with [`LogFiles::Inline`] (where it
    /// stands for the thread's work, done while nothing else runs).
    fn replace_spare(&mut self) {
        match self.env.log_files {
            LogFiles::Threaded => self.make_spare(),
            LogFiles::Inline => self.make_spare_now(),
        }
    }

    /// Starts making the next spare log file on a thread of its own, at a lowered priority, its pages
    /// written in [`SPARE_TOUCH_CHUNK`] bursts [`SPARE_TOUCH_PAUSE`] apart. Made at once, a large spare's
    /// page faults hold a core for milliseconds, and the members' spares, made as their first term
    /// settled, would stall a pinned application thread sharing those cores (their page faults in
    /// `Region::create_file` leave it no time).
    fn make_spare(&mut self) {
        let (length, path) = self.next_spare();
        let (done, made) = mpsc::channel();
        // Written by the spare's thread and this one: `spares_made` with atomic adds; `spare_ready` set to 1
        // there before the spare is sent, to 0 here once it is received and taken, so never at once.
        let (ready, made_count) = (self.counters.spare_ready.clone(), self.counters.spares_made.clone());
        let spawned = std::thread::Builder::new().name("log-spare".into()).spawn(move || {
            crate::shm::reclaim::lower_priority();
            let region = Region::create_file(&path, length, false).map_err(|e| format!("{}: {e}", path.display()));
            if let Ok(region) = &region {
                region.touch_pages_paced(SPARE_TOUCH_CHUNK, SPARE_TOUCH_PAUSE);
                made_count.get_and_add(1);
                ready.set(1);
            }
            drop(done.send(region.map(|r| (path, r))));
        });
        if let Some(previous) = self.spare_thread.take() {
            let _ = previous.join();
        }
        self.spare = spawned.as_ref().ok().map(|_| made);
        self.spare_thread = spawned.ok();
    }

    /// The spare log file for a term (a leader's log or a follower's image), renamed to `file`, if it is
    /// ready; the next one is due either way (see [`Self::make_spare_if_due`]). A term that finds none is
    /// counted (`log terms begun without a spare`).
    fn take_spare(&mut self, file: &std::path::Path) -> Option<Arc<Region>> {
        let spare = self.take_ready_spare(file);
        if spare.is_none() {
            self.counters.terms_without_spare.increment();
        }
        spare
    }

    /// [`Self::take_spare`] without the count.
    fn take_ready_spare(&mut self, file: &std::path::Path) -> Option<Arc<Region>> {
        if let Some((path, region)) = self.ready.take() {
            self.spare_due = true;
            self.counters.spare_ready.set(0);
            std::fs::rename(&path, file).ok()?;
            return Some(region);
        }
        let made = match self.spare.as_ref()?.try_recv() {
            Ok(made) => made,
            // Still being made: this term makes its own, the spare stays for the next.
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Err("the thread making it stopped".into()),
        };
        self.spare = None;
        self.spare_due = true;
        self.counters.spare_ready.set(0);
        let (path, region) = made.ok()?;
        std::fs::rename(&path, file).ok()?;
        Some(region)
    }

    /// Starts making the next spare log file, if one is due, once the term that took the last one has
    /// `settled` (its first commit: the leader's term start acknowledged by a quorum, or a follower's
    /// commit past where it joined) and [`SPARE_DEFERRAL_MIN_NS`] have passed since this was first asked
    /// after it was taken, or once [`SPARE_DEFERRAL_MAX_NS`] have, whichever is first.
    pub(crate) fn make_spare_if_due(&mut self, settled: bool, now_ns: u64) {
        if !self.spare_due {
            return;
        }
        let since = *self.spare_due_since.get_or_insert(now_ns);
        let waited = now_ns.saturating_sub(since);
        if (settled && waited >= SPARE_DEFERRAL_MIN_NS) || waited >= SPARE_DEFERRAL_MAX_NS {
            self.spare_due = false;
            self.spare_due_since = None;
            self.replace_spare();
        }
    }

    /// Stops whatever runs in the Sender's and the Receiver's places (they are dropped on their threads).
    pub(crate) fn clear(&self) {
        self.sender.replace(None);
        self.receiver.replace(None);
    }

    /// Starts leading `leadership_term_id` at `position`: a new log whose first bytes are copied from
    /// `previous` (what a follower behind this leader still needs), up to `position`, and a Sender for it.
    pub(crate) fn lead(
        &mut self,
        leadership_term_id: i64,
        position: i64,
        previous: Option<(&LogBuffer, i64)>,
        ack_rule: impl FnOnce(i32) -> AckRule,
        quorum: usize,
    ) -> Result<Leadership, NodeError> {
        let file = self.directory.join(format!("log-{leadership_term_id}.dat"));
        let mut spare = self.take_spare(&file);
        let config = &self.config;
        let session_id = session_id_for(config.id, leadership_term_id);
        // Drawn as before the session id stopped using it, so that every simulated seed replays as it did.
        let _ = self.env.random(config.id as u64);
        let log_config = LogConfig {
            session_id,
            stream_id: config.stream_id,
            pre_touch: true,
            ..LogConfig::new(config.channel.term_length, config.channel.mtu)
        };
        let env = &self.env;
        let make = |from: i64| match spare.take() {
            Some(region) => LogBuffer::create_in(region, log_config, from),
            None => {
                // Made here, on the consensus thread: the simulator charges its modelled time.
                env.charge_inline_log(log_length(log_config.term_length, log_config.page_size));
                LogBuffer::create_at(&file, log_config, from)
            }
        };
        let (log, start, appender) = continue_log(make, position, previous)?;
        let rule = ack_rule(session_id);
        let command_buffer = AtomicBuffer::anonymous(ring_buffer::required_length(64 * 1024))?;
        let commands = OneToOneRingBuffer::new(command_buffer.clone())?;
        let acks = self.send(&log, start, rule, quorum, &command_buffer)?;
        Ok(Leadership { log, start, file, appender, commands, command_buffer, acks, session_id })
    }

    /// Puts a Sender of this leader's `log` (whose first byte is at `start`) in the Sender's place, for the
    /// followers of `rule` (the core says which follower each destination is, and which acknowledgement
    /// counts), waiting for `quorum` of them; its commit frames come by `command_buffer`'s ring. Called
    /// when a term starts and when the members change during it (the Sender before goes; the new one
    /// goes on from the log's end, and a follower behind has what it misses sent again on its NAKs).
    /// Returns each follower's acknowledged position counter.
    pub(crate) fn send(
        &mut self,
        log: &LogBuffer,
        start: i64,
        rule: AckRule,
        quorum: usize,
        command_buffer: &AtomicBuffer,
    ) -> Result<Vec<(i32, Counter)>, NodeError> {
        let others = rule
            .followers()
            .iter()
            .map(|&id| {
                self.endpoints(id).ok_or_else(|| NodeError::Config(format!("no endpoints known for member {id}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let config = &self.config;
        // The leader sends from its member endpoint, the one source its followers accept, and waits for the
        // followers a commit needs (a majority, less itself), not for the slowest.
        let channel = ChannelConfig {
            destinations: others.iter().map(|m| m.log).collect(),
            source: Some(config.me().log),
            membership: Some(config.membership()),
            flow_control: FlowControlMode::Quorum(quorum),
            ..config.channel.clone()
        };
        let acks: Vec<(i32, Counter)> = others.iter().map(|m| (m.id, Counter::detached())).collect();
        let forwarded = acks.iter().map(|(_, c)| c.clone()).collect();
        // qc-stat's counters, by member, in the destinations' order.
        let mirrors: Vec<Counter> = others
            .iter()
            .map(|m| {
                self.counters.acks.iter().find(|(id, _)| *id == m.id).map_or_else(Counter::detached, |(_, c)| c.clone())
            })
            .collect();
        mirrors.iter().for_each(|c| c.set(0));
        let refused = self.counters.refused_acks.clone();
        let handler = Box::new(LeaderAcks { rule, acks: forwarded, mirrors, refused });
        let sender_commands = OneToOneRingBuffer::new(command_buffer.clone())?;
        let counters = self.counters.sender.clone();
        let clock = self.env.clock.fresh();
        let time_split = self.config.sender_time_split.then(|| self.counters.sender_time.clone());
        // The production Sender runs on bare UDP endpoints; another network, or fault injection (for tests),
        // takes boxed ones.
        let commands = sender_commands;
        let parts = SenderParts { log: log.clone(), start, channel, counters, time_split, handler, commands, clock };
        let sender = if self.env.is_udp() && !parts.channel.has_faults() {
            sender_on(&mut Udp, parts)?
        } else {
            let (send, receive) = (parts.channel.send_faults, parts.channel.receive_faults);
            let mut network = Faulty::new(self.env.network.clone(), send, receive);
            sender_on(&mut network, parts)?
        };
        self.receiver.replace(None);
        self.sender.replace(Some(sender));
        Ok(acks)
    }

    /// Starts following `leader` in `leadership_term_id` from `position`: a Receiver that accepts only that
    /// term's log from the leader's endpoint, and makes its image start at `position`.
    pub(crate) fn follow(
        &mut self,
        leader: i32,
        leadership_term_id: i64,
        position: i64,
    ) -> Result<Followership, NodeError> {
        let session_id = session_id_for(leader, leadership_term_id);
        // The spare log file is the image's (both are the channel's log length): the follower joins at
        // once instead of waiting tens of milliseconds for a file, and a new spare is made meanwhile.
        self.images_made += 1;
        let image_path = self.directory.join(format!("image-{}.log", self.images_made));
        let spare_image = self.take_spare(&image_path).map(|region| SpareImage { path: image_path, region });
        let config = &self.config;
        let me = config.me();
        let leader = self
            .endpoints(leader)
            .ok_or_else(|| NodeError::Config(format!("no endpoints known for member {leader}")))?;
        let mut channel = ReceiveChannelConfig::new(me.log, config.stream_id);
        channel.channel = ChannelConfig { membership: Some(config.membership()), ..config.channel.clone() };
        // Only the leader's endpoint may send the log; the other members' datagrams are counted apart.
        channel.peers = vec![leader.log];
        channel.members = self.known.iter().map(|m| m.log).filter(|e| *e != me.log).collect();
        channel.image_dir = Some(self.directory.clone());
        // The image starts where this member's log agrees with the leader's, never where the leader's
        // sender happens to be when the SETUP arrives: it would acknowledge a log it does not have.
        channel.join_position = Some(position);
        channel.session_id = Some(session_id);
        channel.reuse_port = true;
        channel.receiver_id = self.env.random(config.id as u64) as i64;
        channel.inline_image_files = self.env.log_files == LogFiles::Inline;
        channel.spare_image = spare_image;
        let append = Counter::detached();
        append.set(position);
        // A member acknowledges only what its consensus core holds (what it would vote with): the core is
        // fed what the recorder made durable, one duty cycle of the consensus agent after the Receiver
        // rebuilt it. An acknowledgement past the core's position let a member stand with a log shorter than
        // what a leader had committed with its acknowledgement (the node simulator found it: a committed
        // entry lost).
        let held = Counter::detached();
        held.set(position);
        let term_starts = Arc::new(TermStarts::default());
        let observer = FollowerLog {
            // The commit positions of this leader's log bound what the node applies (the consensus core gets
            // them too): every byte below one is in this member's log, from the leader's log or agreeing
            // with it up to `position`.
            commit: self.counters.consensus.commit.clone(),
            announced: Counter::detached(),
            piggyback: config.commit_piggyback,
            append: append.clone(),
            term_starts: Arc::clone(&term_starts),
            member_id: config.id,
        };
        channel.follower = Some(FollowerSeam {
            ack_interval: config.ack_interval,
            ack_gap: config.ack_gap,
            ack_up_to: Some(held.clone()),
            observer: Arc::new(observer),
        });
        let faults = channel.channel.receive_faults.is_active();
        let counters = self.counters.receiver.clone();
        let clock = self.env.clock.fresh();
        let (receiver, subscription) = if self.env.is_udp() && !faults {
            receiver_on(&mut Udp, channel, counters, clock)?
        } else {
            // The Receiver's status messages and NAKs go out as sent: `send_faults` act on the log.
            let receive = channel.channel.receive_faults;
            let mut network = Faulty::new(self.env.network.clone(), FaultConfig::default(), receive);
            receiver_on(&mut network, channel, counters, clock)?
        };
        self.sender.replace(None);
        self.receiver.replace(Some(receiver));
        Ok(Followership { subscription, append, term_starts, held })
    }
}

impl Drop for Wiring {
    fn drop(&mut self) {
        if let Some(thread) = self.spare_thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a leader's Sender is made of: one publication of `log` (whose first byte is at `start`), its
/// channel, control handler and clock, and the ring its commit frames come in by.
struct SenderParts {
    log: LogBuffer,
    start: i64,
    channel: ChannelConfig,
    counters: SenderCounters,
    time_split: Option<TimeSplitCounters>,
    handler: Box<dyn ControlHandler>,
    commands: OneToOneRingBuffer,
    clock: NanoClock,
}

/// The Sender of `parts` on `network`'s endpoints.
fn sender_on<N: Network>(network: &mut N, parts: SenderParts) -> Result<Box<dyn Agent>, NodeError>
where
    N::Endpoint: 'static,
{
    let SenderParts { log, start, channel, counters, time_split, handler, commands, clock } = parts;
    let mut publication = NetworkPublication::open(log, channel, counters, network)?;
    publication.set_log_start(start);
    publication.set_control_handler(handler);
    let mut sender = Sender::new(vec![publication]);
    sender.set_clock(clock);
    if let Some(counters) = time_split {
        sender.split_time(counters);
    }
    sender.add_command_ring(commands, 0);
    Ok(Box::new(sender))
}

/// A Receiver of `channel` on `network`'s endpoints, and its subscription.
fn receiver_on<N: Network>(
    network: &mut N,
    channel: ReceiveChannelConfig,
    counters: ReceiverCounters,
    clock: NanoClock,
) -> Result<(Box<dyn Agent>, Subscription), NodeError>
where
    N::Endpoint: 'static,
{
    let (mut receiver, mut subscriptions, _warnings) = Receiver::open(vec![channel], counters, network)?;
    receiver.set_clock(clock);
    Ok((Box::new(receiver), subscriptions.remove(0)))
}

/// Makes the log of a new term with `make(start)`, ending at `position`: its first bytes copied from
/// `previous` (a log and where its first byte is) as far back as the previous log still holds them, up to
/// the term before `position`'s; returns the log, where it starts, and its appender at `position`.
fn continue_log(
    mut make: impl FnMut(i64) -> Result<LogBuffer, LogError>,
    position: i64,
    previous: Option<(&LogBuffer, i64)>,
) -> Result<(LogBuffer, i64, ExclusiveAppender), NodeError> {
    let Some((source, source_start)) = previous.filter(|(_, start)| *start < position) else {
        let log = make(position)?;
        let appender = log.appender()?;
        return Ok((log, position, appender));
    };
    // The furthest back first; a copy that finds the source already overwritten there tries nearer.
    let term_length = source.term_length() as i64;
    let term_start = position - position % term_length;
    let candidates = [(term_start - term_length).max(source_start), term_start.max(source_start), position];
    let mut last_error = None;
    for from in candidates {
        let log = make(from)?;
        let mut appender = log.appender()?;
        if from == position {
            return Ok((log, from, appender));
        }
        // No consumer reads the new log yet: the copy may fill it up to the term's start.
        appender.set_limit(position);
        match copy_frames(source, from, position, &mut appender) {
            Ok(_) => return Ok((log, from, appender)),
            Err(e) => last_error = Some(e),
        }
    }
    Err(NodeError::Config(format!("cannot continue the log at {position}: {last_error:?}")))
}

/// A node's agents: the consensus agent, the two places whose agent the role sets, and the recorder.
pub(crate) struct NodeAgents {
    pub(crate) consensus: Box<dyn Agent>,
    pub(crate) sender: Slot<Box<dyn Agent>>,
    pub(crate) receiver: Slot<Box<dyn Agent>>,
    pub(crate) recorder: Option<Box<dyn Agent>>,
}

/// Lays the node's agents out on threads (an invoker's in the drawn `order`, if any), and starts them.
pub(crate) fn start_agents(
    config: &NodeConfig,
    agents: NodeAgents,
    counters: &CountersManager,
    order: Option<crate::agent::AgentOrder>,
    warnings: &mut Vec<String>,
) -> Result<AgentHandles, NodeError> {
    let NodeAgents { consensus, sender, receiver, recorder } = agents;
    let mut specs = vec![
        AgentSpec {
            role: AgentRole::Consensus,
            agent: consensus,
            idle: config.idle.consensus,
            core: config.cores.consensus,
        },
        AgentSpec {
            role: AgentRole::Sender,
            agent: Box::new(sender),
            idle: config.idle.sender,
            core: config.cores.sender,
        },
        AgentSpec {
            role: AgentRole::Receiver,
            agent: Box::new(receiver),
            idle: config.idle.receiver,
            core: config.cores.receiver,
        },
    ];
    if let Some(recorder) = recorder {
        specs.push(AgentSpec {
            role: AgentRole::Recorder,
            agent: recorder,
            idle: config.idle.recorder,
            core: config.cores.recorder,
        });
    }
    let layout = AgentLayout::plan_ordered(config.threading, specs, order).map_err(NodeError::Layout)?;
    let layout_warnings = layout.check_cores(available_cores(), config.force_layout).map_err(NodeError::Layout)?;
    warnings.extend(layout_warnings.iter().map(Warning::to_string));
    let mut handles = layout
        .start(|name| {
            AgentCounters::new(|what| {
                counters
                    .allocate(&format!("{name} {what}"), agent_type_of(what))
                    .unwrap_or_else(|_| Counter::detached())
            })
        })
        .map_err(NodeError::Layout)?;
    warnings.extend(handles.warnings.iter().map(Warning::to_string));
    if let Some(invoker) = handles.invoker.as_mut() {
        invoker.start().map_err(|f| NodeError::Agents(vec![f]))?;
    }
    Ok(handles)
}

/// Allocates a node counter of `kind`.
pub(crate) fn node_counter(counters: &CountersManager, kind: &CounterKind) -> Counter {
    counters.allocate(kind.label, kind.type_id).expect("counters file has room")
}

/// The session id of the log member `member` leads in `leadership_term_id`: its low 16 bits are the member's,
/// the 15 above the term's (modulo 32,768). One member leads a term once (a vote per member per term is kept
/// on disk), so a follower told to follow `member` in a term knows its log's session before any SETUP comes,
/// and refuses the log of another term of the same leader (found by the node simulator: a removed member
/// still following its leader's term 3 took that leader's term-5 log for it, and its commits with it).
pub(crate) fn session_id_for(member: i32, leadership_term_id: i64) -> i32 {
    (((leadership_term_id as u32) & 0x7FFF) << 16) as i32 | (member & 0xFFFF)
}
