//! The two seams between the media layer (which sends and rebuilds a log and knows nothing of commits,
//! members or terms) and the cluster: [`LeaderAcks`], the leader's [`ControlHandler`], reads followers'
//! acknowledgements; [`FollowerLog`], a follower's [`FollowerObserver`], reads what its Receiver rebuilds.

use std::sync::Arc;

use crate::cluster::term_starts::TermStarts;
use crate::frame::{CommitPositionFrame, DataRun, Frame};
use crate::media::network_publication::ControlHandler;
use crate::media::receiver::FollowerObserver;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::descriptor::position;
use crate::shm::log_buffer::LogBuffer;

/// A follower's view of the leader's log, fed by its Receiver: the rebuilt (appended) position, the
/// commit positions the leader announces, and where each leadership term starts.
#[derive(Debug)]
pub(super) struct FollowerLog {
    /// The commit position the leader has announced (commit frames, or piggybacked reserved values).
    pub(super) commit: Counter,
    /// Read the commit position from data frames' reserved value too.
    pub(super) piggyback: bool,
    /// The follower's rebuilt (contiguous) position, for its consensus agent.
    pub(super) append: Counter,
    /// The term-start markers rebuilt into the log, for its consensus agent.
    pub(super) term_starts: Arc<TermStarts>,
}

impl FollowerObserver for FollowerLog {
    fn rebuilt(&self, position: i64) {
        self.append.set_max(position);
    }

    fn run_inserted(&self, log: &LogBuffer, run: &DataRun) {
        if let (true, Some(commit)) = (self.piggyback, run.max_reserved) {
            self.commit.set_max(commit);
        }
        if run.term_start_count == 0 {
            return;
        }
        let (initial, bits) = (log.config().initial_term_id, log.position_bits_to_shift());
        for &(term_offset, leadership_term_id) in run.term_starts() {
            let at = position(run.first.term_id, term_offset as usize, initial, bits);
            self.term_starts.report(at, leadership_term_id);
        }
    }

    fn commit_frame(&self, commit: &CommitPositionFrame) {
        self.commit.set_max(commit.log_position);
    }
}

/// The leader's reading of its followers' acknowledgements, on the Sender's thread.
///
/// Invariant: a follower acknowledges for itself only, and only this term's log: destination `d` is
/// follower `acks[d]`, and an APPEND_POSITION counts only with that member's id and this log's session.
/// Anything else is counted in `refused`.
pub(super) struct LeaderAcks {
    /// This term's log.
    pub(super) session_id: i32,
    /// Per destination: the follower's member id and its acknowledged position.
    pub(super) acks: Vec<(i32, Counter)>,
    /// Per destination: the node's published acknowledgement counters (for `qc-stat`).
    pub(super) mirrors: Vec<Counter>,
    /// Acknowledgements refused.
    pub(super) refused: Counter,
}

impl ControlHandler for LeaderAcks {
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>) {
        match (frame, self.acks.get(destination)) {
            (Frame::AppendPosition(ack), Some((id, counter)))
                if ack.member_id == *id && ack.session_id == self.session_id =>
            {
                counter.set_max(ack.log_position);
                if let Some(mirror) = self.mirrors.get(destination) {
                    mirror.set_max(ack.log_position);
                }
            }
            _ => self.refused.increment(),
        }
    }
}
