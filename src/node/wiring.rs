//! The agents a role is made of, and putting them on threads.

use std::sync::Arc;

use crate::agent::{available_cores, Agent, AgentCounters, AgentHandles, AgentLayout, AgentRole, AgentSpec, Warning};
use crate::buffer::AtomicBuffer;
use crate::channel::ChannelConfig;
use crate::clock::nanos;
use crate::consensus::{ConsensusCounters, FollowerConsensus, LeaderConsensus, LeaderParts, LogIdentity};
use crate::counters::{Counter, CountersManager};
use crate::directory::NodeDirectory;
use crate::flow_control::FlowControlMode;
use crate::frame::Frame;
use crate::log_buffer::{LogBuffer, LogConfig, LogReader, MessageReader};
use crate::network_publication::{NetworkPublication, SenderCounters};
use crate::receiver::{FollowerLink, ReceiveChannelConfig, Receiver, ReceiverCounters};
use crate::ring_buffer::{self, ManyToOneRingBuffer, OneToOneRingBuffer};
use crate::sender::Sender;
use crate::stats::{agent_type_of, type_of, TYPE_ACK_POSITION};

use super::{CommittedReader, Member, NodeConfig, NodeError};

/// The agents and endpoints a node is made of, before they are put on threads.
pub(super) struct Parts {
    pub(super) consensus: Box<dyn Agent>,
    pub(super) sender: Sender,
    pub(super) receiver: Receiver,
    pub(super) commit: Counter,
    pub(super) reader: CommittedReader,
    pub(super) warnings: Vec<String>,
}

pub(super) fn leader_parts(
    config: &NodeConfig,
    directory: &NodeDirectory,
    ingress: &Arc<ManyToOneRingBuffer>,
    counters: &CountersManager,
) -> Result<Parts, NodeError> {
    let allocate = |label: &str| node_counter(counters, label);
    let session_id = session_id_for(config.id);
    let log_config = LogConfig {
        session_id,
        stream_id: config.stream_id,
        pre_touch: true,
        ..LogConfig::new(config.channel.term_length, config.channel.mtu)
    };
    let log = LogBuffer::create(&directory.file("log.dat"), log_config)?;
    let appender = log.appender()?;
    let reader = LogReader::new(&log);
    let consumer = log.register_consumer(0)?;
    let followers: Vec<&Member> = config.followers().collect();
    // The leader sends from its member endpoint, the one source its followers accept, and waits for the
    // followers a commit needs (a majority, less itself), not for the slowest.
    let needed = config.members.len() / 2;
    let channel = ChannelConfig {
        destinations: followers.iter().map(|m| m.endpoint).collect(),
        source: Some(config.leader_endpoint()),
        membership: Some(config.membership()),
        flow_control: FlowControlMode::Quorum(needed),
        ..config.channel.clone()
    };
    let mut publication = NetworkPublication::new(log, channel, SenderCounters::new(allocate))?;
    let mut warnings = publication.warnings().to_vec();
    let acks: Vec<Counter> = followers
        .iter()
        .map(|m| {
            let label = format!("ack position of member {}", m.id);
            counters.allocate_owned(&label, TYPE_ACK_POSITION, m.id.into()).expect("counters file has room")
        })
        .collect();
    let ack_members: Vec<(i32, Counter)> = followers.iter().map(|m| m.id).zip(acks.iter().cloned()).collect();
    let refused_acks = allocate("leader acknowledgements refused");
    publication.set_control_handler(Box::new(move |destination, frame| {
        // A follower acknowledges for itself only, and only this log: destination `d` is follower `d`.
        match (frame, ack_members.get(destination)) {
            (Frame::AppendPosition(ack), Some((id, counter)))
                if ack.member_id == *id && ack.session_id == session_id =>
            {
                counter.set_max(ack.log_position);
            }
            _ => refused_acks.increment(),
        }
    }));
    let command_buffer = AtomicBuffer::anonymous(ring_buffer::required_length(64 * 1024))?;
    let commands = OneToOneRingBuffer::new(command_buffer.clone())?;
    let sender_commands = OneToOneRingBuffer::new(command_buffer)?;
    let mut sender = Sender::new(vec![publication]);
    sender.add_command_ring(sender_commands, 0);
    let counters = ConsensusCounters::new(allocate);
    let commit = counters.commit.clone();
    let consensus = LeaderConsensus::new(LeaderParts {
        ingress: ManyToOneRingBuffer::new(ingress.buffer().clone())?,
        appender,
        acks,
        commands,
        identity: LogIdentity {
            session_id,
            stream_id: config.stream_id,
            leader_member_id: config.id,
            leadership_term_id: 0,
        },
        piggyback: config.commit_piggyback,
        piggyback_refresh: (config.channel.receiver_window / 4) as i64,
        commit_heartbeat_ns: nanos(config.commit_heartbeat),
        counters,
    });
    let (receiver, _, w) = Receiver::new(Vec::new(), ReceiverCounters::new(allocate))?;
    warnings.extend(w);
    Ok(Parts {
        consensus: Box::new(consensus),
        sender,
        receiver,
        commit,
        reader: CommittedReader::Leader(MessageReader::new(reader, consumer, 0)),
        warnings,
    })
}

pub(super) fn follower_parts(
    config: &NodeConfig,
    directory: &NodeDirectory,
    counters: &CountersManager,
) -> Result<Parts, NodeError> {
    let allocate = |label: &str| node_counter(counters, label);
    let me = config.members.iter().find(|m| m.id == config.id).expect("validated");
    let commit = allocate("follower commit position");
    let mut channel = ReceiveChannelConfig::new(me.endpoint, config.stream_id);
    channel.channel = ChannelConfig { membership: Some(config.membership()), ..config.channel.clone() };
    // Only the leader's endpoint may send the log; the other members' datagrams are counted apart.
    channel.peers = vec![config.leader_endpoint()];
    channel.members = config.members.iter().map(|m| m.endpoint).filter(|e| *e != me.endpoint).collect();
    channel.image_dir = Some(directory.path().to_path_buf());
    // A follower's log must start where its state does (0 for a fresh one), never where the leader's
    // sender happens to be when the SETUP arrives: it would acknowledge and apply a log it does not have.
    channel.join_position = Some(config.resume_from.unwrap_or(0));
    channel.follower = Some(FollowerLink {
        member_id: config.id,
        commit: commit.clone(),
        piggyback: config.commit_piggyback,
        ack_interval: config.ack_interval,
    });
    let (receiver, mut subscriptions, warnings) = Receiver::new(vec![channel], ReceiverCounters::new(allocate))?;
    Ok(Parts {
        consensus: Box::new(FollowerConsensus),
        sender: Sender::new(Vec::new()),
        receiver,
        commit,
        reader: CommittedReader::Follower { subscription: subscriptions.remove(0) },
        warnings,
    })
}

pub(super) fn start_agents(
    config: &NodeConfig,
    consensus: Box<dyn Agent>,
    sender: Sender,
    receiver: Receiver,
    counters: &CountersManager,
    warnings: &mut Vec<String>,
) -> Result<AgentHandles, NodeError> {
    let specs = vec![
        AgentSpec { role: AgentRole::Consensus, agent: consensus, idle: config.idle[0], core: config.cores[0] },
        AgentSpec { role: AgentRole::Sender, agent: Box::new(sender), idle: config.idle[1], core: config.cores[1] },
        AgentSpec { role: AgentRole::Receiver, agent: Box::new(receiver), idle: config.idle[2], core: config.cores[2] },
    ];
    let layout = AgentLayout::plan(config.threading, specs).map_err(NodeError::Layout)?;
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

/// Allocates the node counter labelled `label`, with the type id the catalogue gives it.
pub(super) fn node_counter(counters: &CountersManager, label: &str) -> Counter {
    counters.allocate(label, type_of(label)).expect("counters file has room")
}

/// A session id for the log of a leader: distinct per member and per start, so followers tell a restarted
/// leader's log from the old one.
pub(super) fn session_id_for(member: i32) -> i32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (nanos as i32 & 0x7FFF_0000) | (member & 0xFFFF)
}
