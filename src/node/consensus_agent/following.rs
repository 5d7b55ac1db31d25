//! The consensus agent as a follower: feeding the core what the leader's image rebuilt, taking the image
//! as this member's log, catching up from the leader's recording, and following again.

use std::sync::Arc;

use super::catch_up::{self, CatchUpState};
use super::{ConsensusAgent, Current, MemberLog};
use crate::agent::AgentError;
use crate::cluster::configuration::Configuration;
use crate::cluster::consensus_core::{ConsensusCore, Membership, Message, Output, TermBase};
use crate::cluster::term_starts::TermStarts;
use crate::media::receiver::{ImageHandoff, Subscription};
use crate::node::read::committed::ReaderLog;
use crate::shm::counters::Counter;
use crate::storage::recording::catch_up::{CatchUpRequest, Fetched};
use crate::storage::recording::RecorderSource;

pub(super) struct Following {
    pub(super) leader: i32,
    pub(super) term: i64,
    pub(super) subscription: Option<Subscription>,
    /// Where the image starts.
    pub(super) join: i64,
    pub(super) append: Counter,
    /// What the core holds of the leader's log (its append position): the Receiver acknowledges no further.
    pub(super) held: Counter,
    pub(super) term_starts: Arc<TermStarts>,
    pub(super) reported: u64,
    /// Markers not yet passed by the rebuilt position, by position.
    pub(super) pending: Vec<(i64, i64)>,
    /// Configuration entries not yet handed to the core: where each starts and ends, and what it holds.
    pub(super) configurations: Vec<(i64, i64, Configuration)>,
    /// The position and the term of the last byte handed to the core.
    pub(super) fed: i64,
    pub(super) fed_term: i64,
    pub(super) commit_fed: i64,
    /// A catch-up from the leader's recording.
    pub(super) catch_up: CatchUpState,
}

impl Following {
    /// Whether this image already carries `leader`'s log of `term` from `position` on: the core matched
    /// this member again (after a canvass it gave up) at a position this image passed or reached. The
    /// core's position may be behind what was fed since: its outputs are carried out after the bytes
    /// that arrived in the same duty cycle were handed to it, and the same leader's log of one term
    /// agrees with itself, so nothing needs replicating again.
    pub(super) fn continues(&self, leader: i32, term: i64, position: i64) -> bool {
        self.leader == leader && self.term == term && self.fed != i64::MAX && (self.join..=self.fed).contains(&position)
    }
}

impl ConsensusAgent {
    /// On a follower: the leader's image when it is made, what it rebuilt, the leader's commit, and a
    /// catch-up when one is due or over.
    pub(super) fn feed_following(&mut self, now_ns: u64) -> Result<usize, AgentError> {
        let Current::Following(following) = &mut self.current else {
            return Ok(0);
        };
        let mut taken = None;
        let mut refused = false;
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
        let durable = self.recorder.synced.as_ref().map_or(i64::MAX, Counter::get);
        if following.term_starts.reported() != following.reported {
            let mut reported = Vec::new();
            following.term_starts.take_configurations(&mut reported);
            for (at, end, payload) in reported {
                let entry = Configuration::decode(&payload).map_err(|why| {
                    AgentError::msg(format!(
                        "the configuration entry at {at} of leader {}'s log: {why}",
                        following.leader
                    ))
                })?;
                self.wiring.learn(entry.endpoints());
                following.configurations.push((at, end, entry));
            }
        }
        work += feed_follower(following, durable, &mut self.core, now_ns, &mut self.outputs);
        let commit = self.wiring.counters.consensus.commit.get();
        if commit > following.commit_fed {
            following.commit_fed = commit;
            let message = Message::CommitPosition { leadership_term_id: following.term, log_position: commit };
            self.core.on_message(following.leader, message, now_ns, &mut self.outputs);
        }
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
        if !self.recorder.records() {
            return Ok(0);
        }
        match self.recorder.catch_ups.take_result().filter(|(ticket, _)| following.catch_up.asked(*ticket)) {
            Some((_, Ok(fetched))) => {
                self.join_after_catch_up(fetched, now_ns)?;
                return Ok(1);
            }
            Some((_, Err(why))) => {
                self.warnings.general.warn(now_ns, || {
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
        let below_term_start = (following.fed_term < following.term).then_some(following.fed);
        if following.fed == i64::MAX || !following.catch_up.start_if_due(behind, below_term_start, now_ns) {
            return Ok(0);
        }
        // The leader no longer holds this member's position in memory (or its live log has held this member
        // below its term start): its Receiver stops, and the recorder fetches the log from the leader's
        // recording.
        following.subscription = None;
        self.wiring.clear();
        // The leader's endpoints as this member knows them: from its node file or from a configuration entry
        // its log holds (a leader added while the cluster ran is in no older member's node file). Known,
        // since this member follows it.
        let leader_at = self.wiring.endpoints(following.leader).map(|m| m.consensus);
        let config = &self.wiring.config;
        if let Some(leader) = leader_at {
            let request = CatchUpRequest::new(config.membership(), config.id, following.fed);
            following.catch_up.ticket(self.recorder.catch_ups.request(leader, request));
            log::info!(
                "member {}: leader {} no longer holds this member's log position {} in memory; fetching the rest \
                 from its recording (a catch-up over TCP at {leader}), then joining its live log",
                config.id,
                following.leader,
                following.fed
            );
        } else {
            log::warn!(
                "member {}: leader {} no longer holds this member's log position {} in memory, and this member \
                 knows no endpoints of it to fetch the rest from: name it in this node's `members`",
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
            self.wiring.follow(following.leader, following.term, following.join).map_err(AgentError::new)?;
        following.subscription = Some(followership.subscription);
        following.append = followership.append;
        following.term_starts = followership.term_starts;
        following.held = followership.held;
        Ok(())
    }

    /// The leader's image is made: it becomes this member's log (kept in the data directory), and the
    /// node's reader goes on in it at the position it starts at.
    fn adopt_image(&mut self, image: ImageHandoff) -> Result<(), AgentError> {
        if self.recorder.records() {
            let consumer = image.log.register_consumer(image.position).map_err(AgentError::new)?;
            self.recorder.switches.complete(image.position, RecorderSource { log: image.log.clone(), consumer });
        }
        self.links.reader.switches.complete(image.position, ReaderLog::Memory(image.reader, image.consumer));
        // The image's file goes when a newer log replaces it (its mapping stays while it is read).
        self.replace_log(MemberLog { log: image.log, start: image.position, file: image.file });
        Ok(())
    }

    /// The recorder fetched the log up to `fetched.end` (after the snapshot it installed, if any): the
    /// member's log goes on there. The node's reader replays what was fetched, the core is handed its
    /// terms and end, and a new Receiver joins the live log at the end: no gap, no duplicate.
    fn join_after_catch_up(&mut self, fetched: Fetched, now_ns: u64) -> Result<(), AgentError> {
        let Current::Following(following) = &mut self.current else {
            return Ok(());
        };
        let followership =
            self.wiring.follow(following.leader, following.term, fetched.end).map_err(AgentError::new)?;
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
            // The configuration in effect at the snapshot is the leader's (the entries below it are gone
            // with the log they were in).
            let membership = match fetched.configuration_at_snapshot.as_deref() {
                Some(payload) if !payload.is_empty() => {
                    let entry = Configuration::decode(payload).map_err(|why| {
                        AgentError::msg(format!("the configuration at leader {}'s snapshot: {why}", following.leader))
                    })?;
                    self.wiring.learn(entry.endpoints());
                    entry.membership().clone()
                }
                _ => Membership::initial(&self.wiring.config.initial_member_ids()),
            };
            self.core.on_snapshot_membership(membership, now_ns, &mut self.outputs);
        }
        for &(base, term) in terms {
            followership.term_starts.report(base, term);
        }
        for (at, end, payload) in &fetched.configurations {
            followership.term_starts.report_configuration(*at, *end, payload);
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
        let from = if self.wiring.env.bugs.catch_up_wrong_offset() { fetched.end } else { from };
        self.links.reader.switches.push(from, Some(ReaderLog::Recorded { snapshot }));
        self.links.reader.switches.push(fetched.end, None);
        self.recorder.switches.push(fetched.end, None);
        following.subscription = Some(followership.subscription);
        following.join = fetched.end;
        following.append = followership.append;
        following.term_starts = followership.term_starts;
        following.held = followership.held;
        // The core holds the fetched log once it is fed it (next duty cycle): nothing past is acknowledged.
        following.held.set(self.core.append_position().min(fetched.end));
        following.reported = 0;
        following.catch_up.joined();
        Ok(())
    }

    /// Follows `leader` in `term` from `position`, where this member's log agrees with the leader's.
    pub(super) fn replicate_from(&mut self, leader: i32, term: i64, position: i64) -> Result<(), AgentError> {
        if matches!(&self.current, Current::Following(f) if f.continues(leader, term, position)) {
            // Matched again within what this Receiver's image already rebuilt (after a refused canvass): go on.
            return Ok(());
        }
        // A catch-up the previous followership asked for is of its leader's log: it stops, and its result,
        // if one still comes, is not this followership's.
        self.recorder.catch_ups.cancel();
        let followership = self.wiring.follow(leader, term, position).map_err(AgentError::new)?;
        self.links.reader.switches.push(position, None);
        if self.recorder.records() {
            self.recorder.switches.push(position, None);
        }
        let fed_term = self.core.term_history().last_term_id();
        self.current = Current::Following(Box::new(Following {
            leader,
            term,
            subscription: Some(followership.subscription),
            join: position,
            append: followership.append,
            term_starts: followership.term_starts,
            held: followership.held,
            reported: 0,
            pending: Vec::new(),
            configurations: Vec::new(),
            fed: position,
            fed_term,
            commit_fed: 0,
            catch_up: CatchUpState::new(self.wiring.counters.receiver.behind_retained.get()),
        }));
        Ok(())
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
    // The configuration entries the rebuilt position passed, in log order (those below what was fed
    // already went to the core, or lie below where this member joined).
    following.configurations.sort_unstable_by_key(|(at, _, _)| *at);
    following.configurations.dedup_by_key(|(at, _, _)| *at);
    let (fed_from, passed) = (following.fed, following.configurations.partition_point(|(at, _, _)| *at < rebuilt));
    let mut entries: Vec<_> = following.configurations.drain(..passed).filter(|(at, _, _)| *at >= fed_from).collect();
    let mut entries = entries.drain(..).peekable();
    let mut fed = 0;
    let terms: Vec<(i64, i64)> =
        following.pending.iter().copied().filter(|&(at, _)| at >= following.fed && at < rebuilt).collect();
    for (at, term) in terms {
        // The configuration entries before this term start go to the core first.
        while let Some((entry_at, end, entry)) = entries.next_if(|(entry_at, _, _)| *entry_at < at) {
            fed += feed_to(following, entry_at, core, now_ns, out);
            core.on_membership(end, entry.membership().clone(), out);
        }
        fed += feed_to(following, at, core, now_ns, out);
        following.fed_term = term;
    }
    for (entry_at, end, entry) in entries {
        fed += feed_to(following, entry_at, core, now_ns, out);
        core.on_membership(end, entry.membership().clone(), out);
    }
    following.pending.retain(|(at, _)| *at >= rebuilt);
    core.on_append_position(following.fed_term, rebuilt, now_ns, out);
    following.fed = rebuilt;
    // What the core now holds may be acknowledged (and voted with).
    following.held.set_max(core.append_position());
    fed + 1
}

/// Hands the core the follower's log up to `position` (in the term being fed), if it holds less;
/// returns the positions handed over.
fn feed_to(
    following: &mut Following,
    position: i64,
    core: &mut ConsensusCore,
    now_ns: u64,
    out: &mut Vec<Output>,
) -> usize {
    if position <= following.fed {
        return 0;
    }
    core.on_append_position(following.fed_term, position, now_ns, out);
    following.fed = position;
    1
}
