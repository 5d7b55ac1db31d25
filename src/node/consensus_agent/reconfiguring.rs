//! The consensus agent and membership changes: the leader appends a change an embedder asked for as a
//! configuration entry; every member, leader or follower, hands each entry its log gains to the core
//! before its append position passes it; and when the configuration in effect changes, the node follows
//! it: whom it sends consensus frames to and accepts them from, the leader's Sender's destinations, the
//! members its catch-up server serves, and the configuration it publishes.

use std::net::IpAddr;

use super::{ConsensusAgent, ConsensusAgentCounters, Current, Peer, RecorderLink};
use crate::agent::AgentError;
use crate::cluster::configuration::Configuration;
use crate::cluster::consensus_core::{ConsensusCore, MembershipError, Role, MAX_MEMBERS};
use crate::cluster::introduction::{self, Introduction};
use crate::node::membership::{MembershipAnswer, MembershipChangeError, MembershipRequest};
use crate::node::sessions::ingress::ClientIngress;
use crate::node::start::wiring::Wiring;
use crate::node::Links;

impl ConsensusAgent {
    /// Takes a membership change asked through the node, if one waits, and answers it.
    pub(super) fn poll_membership_request(&mut self, now_ns: u64) -> usize {
        let Some(request) = self.links.membership.take_request() else {
            return 0;
        };
        let answer = self.propose(&request, now_ns);
        match &answer {
            Ok((membership, end)) => log::info!(
                "member {}: {}: configuration {} appended, ending at {end}",
                self.wiring.config.id,
                request.change,
                membership.id
            ),
            Err(why) => log::warn!("member {}: {} not made: {why}", self.wiring.config.id, request.change),
        }
        self.links.membership.answer(request.ticket, answer);
        1
    }

    /// On the leader: the change, if the core allows it now, appended as a configuration entry.
    pub(super) fn propose(&mut self, request: &MembershipRequest, now_ns: u64) -> MembershipAnswer {
        let Current::Leading(leading) = &mut self.current else {
            let leader = self.core.leader_member_id();
            return Err(MembershipChangeError::Refused(MembershipError::NotLeader { leader }));
        };
        let promote_within = self.wiring.config.promote_within;
        let next = self
            .core
            .propose_membership(request.change, promote_within, now_ns)
            .map_err(MembershipChangeError::Refused)?;
        if let Some(endpoints) = request.endpoints {
            if let Some(taken) = self.wiring.known().iter().find(|k| {
                k.id != endpoints.id
                    && [k.log, k.consensus, k.client].iter().any(|a| *a == endpoints.log || *a == endpoints.consensus)
            }) {
                return Err(MembershipChangeError::Failed(format!(
                    "member {}'s endpoints are member {}'s: every member needs endpoints of its own",
                    endpoints.id, taken.id
                )));
            }
            self.wiring.learn(&[endpoints]);
        }
        let entry = Configuration::new(next.clone(), self.wiring.known()).map_err(MembershipChangeError::Failed)?;
        let end = leading.stage.append_configuration(&entry.encode()).map_err(|e| {
            MembershipChangeError::Failed(format!("the entry of configuration {} was refused by the log: {e}", next.id))
        })?;
        let term = leading.term;
        self.core.on_membership(end, next.clone(), &mut self.outputs);
        if self.recorder.synced.is_none() {
            // A leader without a recorded log counts itself as it appends.
            self.core.on_append_position(term, end, now_ns, &mut self.outputs);
        }
        Ok((next, end))
    }

    /// The configuration in effect changed: the node follows it.
    pub(super) fn on_membership_changed(&mut self) -> Result<(), AgentError> {
        let membership = self.core.membership().clone();
        if self.links.membership.current().is_some_and(|(published, _)| published == membership) {
            // Several entries handed over at once (a catch-up's) each report the latest: once is enough.
            return Ok(());
        }
        let id = self.wiring.config.id;
        log::info!(
            "member {id}: configuration {} in effect: voters {:?}, learners {:?}",
            membership.id,
            membership.voters,
            membership.learners
        );
        self.endpoint.peers = peers_of(&self.wiring);
        publish_membership(
            &self.core,
            &self.wiring,
            &self.endpoint.peers,
            self.intake.endpoint.as_mut(),
            &self.counters,
            &self.links,
            &self.recorder,
        );
        if let Current::Leading(leading) = &mut self.current {
            // The Sender goes on with the followers of the configuration in effect.
            let rule = self.core.ack_rule(leading.stage.identity().session_id);
            let log = &self.log.as_ref().expect("a leader has its log").log;
            let start = self.log.as_ref().map_or(0, |l| l.start);
            let acks = self
                .wiring
                .send(log, start, rule, sender_quorum(&self.core), &leading.command_buffer)
                .map_err(AgentError::new)?;
            leading.acks = acks.into_iter().map(|(member, counter)| (member, counter, 0)).collect();
        }
        Ok(())
    }

    /// Member `canvasser` canvasses while this member follows a leader it knows the endpoints of: it is
    /// told who leads and where, in case its log stops before the entry that added that leader (see
    /// `cluster::introduction`). One introduction per canvass, so no more often than the canvasser asks.
    /// Not when this member's node file names the leader: the node files written with it (the initial
    /// members', or those of members added after the leader) name it too, and one whose node file does not
    /// is introduced by a member whose file does not either (an initial member's, written before the leader
    /// was added). So a cluster whose node files all name every member sends none.
    pub(super) fn introduce_leader(&mut self, canvasser: i32) {
        let (Role::Follower, Some(leader)) = (self.core.role(), self.core.leader_member_id()) else {
            return;
        };
        if leader == canvasser || self.wiring.config.members.iter().any(|m| m.id == leader) {
            return;
        }
        let Some(endpoints) = self.wiring.endpoints(leader) else {
            return;
        };
        let Some(peer) = self.endpoint.peers.iter().find(|p| p.id == canvasser) else {
            return;
        };
        let introduction =
            Introduction { sender: self.wiring.config.id, term: self.core.leadership_term_id(), leader: endpoints };
        let mut bytes = Vec::with_capacity(introduction::MAX_INTRODUCTION_LENGTH);
        introduction::encode(&introduction, &mut bytes);
        // A lost introduction is answered again at the next canvass.
        let _ = self.endpoint.socket.send(&bytes, Some(&peer.sockaddr));
        self.counters.frames_sent.increment();
        self.counters.introductions_sent.increment();
    }

    /// Member `from` (a member this one hears) introduced its leader: if this member knew no endpoints of
    /// it, it learns them and hears that leader from now on. Endpoints it knows are never replaced here
    /// (only a configuration entry replaces them), and none is learnt once this member knows twice
    /// [`MAX_MEMBERS`] members' endpoints, so a member cannot make this one grow its tables without bound.
    pub(super) fn on_introduction(&mut self, introduced: Result<Introduction, String>, from: i32, now_ns: u64) {
        let introduction = match introduced {
            Ok(introduction) if introduction.sender == from => introduction,
            Ok(_) => {
                self.counters.foreign_dropped.increment();
                return;
            }
            Err(why) => {
                self.counters.malformed_dropped.increment();
                self.warnings.general.warn(now_ns, || format!("dropped an introduction from member {from}: {why}"));
                return;
            }
        };
        let leader = introduction.leader;
        let me = self.wiring.config.id;
        if leader.id == me || self.wiring.endpoints(leader.id).is_some() || self.wiring.known().len() > 2 * MAX_MEMBERS
        {
            return;
        }
        log::info!(
            "member {me}: member {from} follows member {} in term {}, whose endpoints no configuration this member \
             holds names (consensus {}, log {}): hearing it from now on",
            leader.id,
            introduction.term,
            leader.consensus,
            leader.log
        );
        self.wiring.learn(&[leader]);
        self.endpoint.peers = peers_of(&self.wiring);
        self.counters.introductions_taken.increment();
    }
}

/// What the rest of the node learns of the configuration in effect, at start and at each change: the
/// members its catch-up server serves (the `peers` of the configuration, at their consensus
/// addresses: at start too, so that a member a node file does not name but the recording added can catch
/// up), the client endpoint's member table (every member whose endpoints are known, so that a redirect can
/// name a leader of a configuration this member has not applied yet), counter `election configuration
/// id`, and the membership and its members' endpoints that `Node::membership` returns.
pub(super) fn publish_membership(
    core: &ConsensusCore,
    wiring: &Wiring,
    peers: &[Peer],
    clients: Option<&mut ClientIngress>,
    counters: &ConsensusAgentCounters,
    links: &Links,
    recorder: &RecorderLink,
) {
    let membership = core.membership().clone();
    let served: Vec<(i32, IpAddr)> =
        peers.iter().filter(|p| membership.contains(p.id)).map(|p| (p.id, p.addr.ip())).collect();
    recorder.members.set(served);
    if let Some(clients) = clients {
        let ids: Vec<i32> = membership.members().collect();
        clients.set_members(wiring.known().iter().map(|e| (e.id, e.client)).collect(), membership.id as i64, &ids);
    }
    let endpoints: Vec<_> = membership.members().filter_map(|m| wiring.endpoints(m)).collect();
    counters.configuration_id.set(membership.id as i64);
    links.membership.publish(membership, endpoints);
}

/// Whom a member hears on the consensus endpoint: every other member whose endpoints it knows (from its
/// node file and every configuration entry its log held), in a configuration it knows or not: a member
/// whose log stops before the entry that added the leader (or at one that removed it) must still hear
/// that leader to learn what came after. It sends to fewer: see `ConsensusAgent::send`.
pub(super) fn peers_of(wiring: &Wiring) -> Vec<Peer> {
    let me = wiring.config.id;
    wiring
        .known()
        .iter()
        .filter(|m| m.id != me)
        .map(|m| Peer { id: m.id, addr: m.consensus, sockaddr: m.consensus.into() })
        .collect()
}

/// How many followers' windows a leader's Sender waits for: a majority of the voters, less the leader if
/// it is one.
pub(super) fn sender_quorum(core: &ConsensusCore) -> usize {
    core.membership().majority() - usize::from(core.is_voter())
}
