//! The consensus agent as the leader: starting a term's log, counting itself and its followers'
//! acknowledgements, and appending clients' messages.

use super::reconfiguring::sender_quorum;
use super::{ConsensusAgent, Current, MemberLog};
use crate::agent::AgentError;
use crate::cluster::append::{AppendParts, AppendStage, LogIdentity};
use crate::cluster::consensus_core::Message;
use crate::node::read::committed::ReaderLog;
use crate::node::sessions::ingress::Appending;
use crate::shm::buffer::AtomicBuffer;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::LogReader;
use crate::storage::recording::RecorderSource;

pub(super) struct Leading {
    pub(super) term: i64,
    pub(super) stage: AppendStage,
    /// Each follower's acknowledged position in this term, and the last one handed to the core.
    pub(super) acks: Vec<(i32, Counter, i64)>,
    /// With a recorded log: the leader's own durable position last handed to the core.
    pub(super) own_fed: i64,
    /// The buffer of the ring commit frames go to the Sender by (a Sender made for new members reads it).
    pub(super) command_buffer: AtomicBuffer,
    /// Where the term-start marker ends: once the commit reaches it, the term has settled.
    pub(super) start_end: i64,
}

impl ConsensusAgent {
    /// On the leader: its own durable position (with a recorded log) and its followers' acknowledgements.
    pub(super) fn feed_leading(&mut self, now_ns: u64) -> usize {
        let Current::Leading(leading) = &mut self.current else {
            return 0;
        };
        let mut work = 0;
        if let Some(synced) = &self.recorder.synced {
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
        let own = if self.recorder.synced.is_some() { leading.own_fed } else { i64::MAX };
        for (member, counter, fed) in leading.acks.iter_mut() {
            let position = counter.get().min(own);
            if position > *fed {
                *fed = position;
                let message = Message::AppendPosition {
                    leadership_term_id: leading.term,
                    log_position: position,
                    commit_position: 0,
                };
                self.core.on_message(*member, message, now_ns, &mut self.outputs);
                work += 1;
            }
        }
        work
    }

    /// On the leader whose term has started: client messages into the log (from the ingress ring and the
    /// client endpoint). Elsewhere the client endpoint redirects clients to the leader.
    pub(super) fn append(&mut self, now_ns: u64) -> usize {
        let Current::Leading(leading) = &mut self.current else {
            let leader = self.links.offers.leader();
            return self.intake.endpoint.as_mut().map_or(0, |clients| clients.poll(now_ns, None, leader));
        };
        // The commit this cycle's acknowledgements moved rides in what is appended now, or goes in a frame.
        leading.stage.on_commit(self.core.commit_position());
        if self.core.is_transferring() {
            // Handing the leadership over: nothing new, so the target can reach the end of the log (the
            // ingress ring and the clients' sockets hold what arrives; a new leader's term drops it).
            return leading.stage.send_commit_if_due(0, now_ns);
        }
        // Suspended by the operator: local offers are refused (`LocalOfferError::Suspended`), and remote
        // clients' opens and messages (`RefusalCode::Suspended`); their sessions live on.
        let suspended = self.links.offers.suspended.load(std::sync::atomic::Ordering::Acquire);
        let mut appended = if suspended { 0 } else { leading.stage.drain(&self.intake.ring) };
        let clock = self.intake.clock.keep_time(&mut leading.stage, leading.term);
        appended += clock.appended;
        if let Some(clients) = self.intake.endpoint.as_mut() {
            let mut appending = Appending::new(&mut leading.stage, leading.term, clock);
            appending.suspended = suspended;
            appended += clients.poll(now_ns, Some(appending), Some(self.core.member_id()));
        }
        if appended > 0 && self.recorder.synced.is_none() {
            self.core.on_append_position(leading.term, leading.stage.position(), now_ns, &mut self.outputs);
        }
        appended + leading.stage.send_commit_if_due(appended, now_ns)
    }

    /// Leads `term` from `position`: a new log continued from this member's, a Sender, the marker.
    pub(super) fn start_term(&mut self, term: i64, position: i64, now_ns: u64) -> Result<(), AgentError> {
        let previous = self.log.as_ref().map(|l| (&l.log, l.start));
        let making = std::time::Instant::now();
        let leadership = self
            .wiring
            .lead(term, position, previous, |session| self.core.ack_rule(session), sender_quorum(&self.core))
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
            max_uncommitted: if self.wiring.env.bugs.unbounded_uncommitted() {
                i64::MAX / 2
            } else {
                crate::cluster::append::uncommitted_bound(config.channel.receiver_window)
            },
            counters: self.wiring.counters.consensus.clone(),
        });
        let end = stage.append_term_start().map_err(AgentError::new)?;
        if self.recorder.records() {
            let consumer = leadership.log.register_consumer(position).map_err(AgentError::new)?;
            self.recorder.switches.push(position, Some(RecorderSource { log: leadership.log.clone(), consumer }));
        }
        self.replace_log(MemberLog { log: leadership.log, start: leadership.start, file: Some(leadership.file) });
        self.links.reader.switches.push(position, Some(ReaderLog::Memory(reader, consumer)));
        let acks = leadership.acks.into_iter().map(|(id, counter)| (id, counter, 0)).collect();
        let command_buffer = leadership.command_buffer;
        self.current = Current::Leading(Box::new(Leading {
            term,
            stage,
            acks,
            own_fed: position,
            command_buffer,
            start_end: end,
        }));
        self.recorder.catch_ups.cancel();
        if self.recorder.synced.is_none() {
            self.core.on_append_position(term, end, now_ns, &mut self.outputs);
        }
        Ok(())
    }
}
