//! The two seams between the media layer (which sends and rebuilds a log and knows nothing of commits,
//! members or terms) and the cluster: [`LeaderAcks`], the leader's [`ControlHandler`], reads followers'
//! acknowledgements; [`FollowerLog`], a follower's [`FollowerObserver`], reads what its Receiver rebuilds.

use std::sync::Arc;

use crate::cluster::configuration::CONFIGURATION_MARKER;
use crate::cluster::consensus_core::{follower_commit, AckRule};
use crate::cluster::frames::{AppendPositionFrame, CommitPositionFrame};
use crate::cluster::term_starts::TermStarts;
use crate::frame::{align_frame, DATA_HEADER_LENGTH};
use crate::frame::{DataRun, ExtensionHeader, Frame};
use crate::media::network_publication::ControlHandler;
use crate::media::receiver::FollowerObserver;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::descriptor::{partition_index, position};
use crate::shm::log_buffer::LogBuffer;

/// A follower's view of the leader's log, fed by its Receiver: the rebuilt (appended) position, the
/// commit positions the leader announces, and where each leadership term starts.
///
/// Invariant: `commit` moves by the consensus core's rule alone ([`follower_commit`]): the highest commit
/// the leader announced, as far as `append` (what this member holds of the leader's log) reaches. It is
/// applied here, on the Receiver's thread, for latency; the core applies the same rule to the same inputs.
#[derive(Debug)]
pub(crate) struct FollowerLog {
    /// The node's commit position, raised by this rule (and by the core's, which is the same).
    pub(crate) commit: Counter,
    /// The highest commit position the leader has announced (commit frames, or piggybacked reserved values).
    pub(crate) announced: Counter,
    /// Read the commit position from data frames' reserved value too.
    pub(crate) piggyback: bool,
    /// The follower's rebuilt (contiguous) position, for its consensus agent.
    pub(crate) append: Counter,
    /// The term-start markers rebuilt into the log, for its consensus agent.
    pub(crate) term_starts: Arc<TermStarts>,
    /// This member's id, in its acknowledgements.
    pub(crate) member_id: i32,
}

impl FollowerObserver for FollowerLog {
    fn rebuilt(&self, position: i64) {
        self.append.set_max(position);
        self.apply_commit_rule();
    }

    fn run_inserted(&self, log: &LogBuffer, run: &DataRun) {
        if let (true, Some(commit)) = (self.piggyback, run.max_reserved) {
            self.announced.set_max(commit);
            self.apply_commit_rule();
        }
        if run.marker_count == 0 {
            return;
        }
        // The log's markers are its term starts (their value is the leadership term) and its configuration
        // entries (read back from the image they were just copied into).
        let (initial, bits) = (log.config().initial_term_id, log.position_bits_to_shift());
        for &(term_offset, value) in run.markers() {
            let at = position(run.first.term_id, term_offset as usize, initial, bits);
            if value < CONFIGURATION_MARKER {
                self.term_starts.report(at, value);
                continue;
            }
            let term = log.term(partition_index(at, bits));
            let offset = term_offset as usize;
            let length = (term.get_i32(offset).max(0) as usize).min(term.len() - offset);
            let mut frame = vec![0u8; length];
            term.get_bytes(offset, &mut frame);
            if let Some(payload) = frame.get(DATA_HEADER_LENGTH..) {
                self.term_starts.report_configuration(at, at + align_frame(length) as i64, payload);
            }
        }
    }

    fn extension_frame(&self, header: &ExtensionHeader, bytes: &[u8]) {
        if let Some(commit) = CommitPositionFrame::read(header, bytes) {
            self.announced.set_max(commit.log_position);
            self.apply_commit_rule();
        }
    }

    fn encode_ack(&self, session_id: i32, stream_id: i32, position: i64, dst: &mut [u8]) -> usize {
        let ack = AppendPositionFrame {
            session_id,
            stream_id,
            log_position: position,
            member_id: self.member_id,
            commit_position: self.commit.get(),
            ..AppendPositionFrame::default()
        };
        ack.encode(dst).unwrap_or(0)
    }
}

impl FollowerLog {
    fn apply_commit_rule(&self) {
        self.commit.set_max(follower_commit(self.announced.get(), self.append.get()));
    }
}

/// The leader's reading of its followers' acknowledgements, on the Sender's thread: it forwards those that
/// count by the consensus core's [`AckRule`] (destination `d` is the core's follower `d`, for this term's
/// log) to their counters, and counts the rest in `refused`. It decides nothing itself.
pub(crate) struct LeaderAcks {
    /// Which acknowledgement counts, from the core.
    pub(crate) rule: AckRule,
    /// Per destination: the follower's acknowledged position.
    pub(crate) acks: Vec<Counter>,
    /// Per destination: the node's published acknowledgement counters (for `qc-stat`).
    pub(crate) mirrors: Vec<Counter>,
    /// Acknowledgements refused.
    pub(crate) refused: Counter,
}

impl ControlHandler for LeaderAcks {
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>) {
        let ack = match frame {
            Frame::Extension { header, bytes } => AppendPositionFrame::read(header, bytes),
            _ => None,
        };
        match (ack, self.acks.get(destination)) {
            (Some(ack), Some(counter)) if self.rule.counts(destination, ack.member_id, ack.session_id) => {
                counter.set_max(ack.log_position);
                if let Some(mirror) = self.mirrors.get(destination) {
                    mirror.set_max(ack.log_position);
                }
            }
            _ => self.refused.increment(),
        }
    }
}
