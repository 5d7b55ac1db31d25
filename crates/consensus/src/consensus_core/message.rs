//! What members say to each other. The sender's id travels beside a message (the transport knows it,
//! and the [`wire`](super::wire) frames carry it), not inside it.

/// One consensus message. Every leadership term id and position is in `0..i64::MAX` (so a next term
/// always exists); the core drops, and counts as malformed, a message that says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// Pre-vote (Aeron's canvass): "would you vote for me in `candidate_term_id`?". Changes no term.
    Canvass {
        /// The term the sender would stand in: its own term plus one.
        candidate_term_id: i64,
        /// The term of the last byte of the sender's log.
        log_leadership_term_id: i64,
        /// The sender's append position.
        log_position: i64,
        /// The sender's [`membership_hash`](super::config::membership_hash).
        membership_hash: u64,
    },
    /// The answer to a [`Message::Canvass`].
    CanvassReply {
        /// The replier's leadership term (a canvasser behind it adopts it).
        leadership_term_id: i64,
        /// The `candidate_term_id` of the canvass answered.
        candidate_term_id: i64,
        /// Whether the replier would vote for the canvasser.
        granted: bool,
    },
    /// Raft's RequestVote: the sender is a candidate in `candidate_term_id`.
    RequestVote {
        /// The term the sender stands in.
        candidate_term_id: i64,
        /// The term of the last byte of the candidate's log.
        log_leadership_term_id: i64,
        /// The candidate's append position.
        log_position: i64,
        /// The candidate's [`membership_hash`](super::config::membership_hash).
        membership_hash: u64,
    },
    /// The answer to a [`Message::RequestVote`]; a grant was persisted before it was sent.
    Vote {
        /// The voter's leadership term after handling the request.
        leadership_term_id: i64,
        /// The `candidate_term_id` of the request answered.
        candidate_term_id: i64,
        /// Whether the vote is the candidate's.
        granted: bool,
    },
    /// The leader of `leadership_term_id` announces itself (Aeron's NewLeadershipTerm) and tells a
    /// follower where one of its log's terms ends: in the leader's log, term `log_leadership_term_id` is
    /// followed directly by term `next_leadership_term_id`, which starts at `next_term_base_position`.
    /// Broadcast when the term starts (`log_leadership_term_id` is then the leader's last term before it
    /// and `next_leadership_term_id` the new term) and sent again in answer to a [`Message::TermQuery`].
    NewLeadershipTerm {
        /// The leader's term.
        leadership_term_id: i64,
        /// A term of the leader's log (0: the empty prefix).
        log_leadership_term_id: i64,
        /// The term that follows it in the leader's log (or the leader's current term).
        next_leadership_term_id: i64,
        /// Where that next term starts: the end of `log_leadership_term_id` in the leader's log.
        next_term_base_position: i64,
        /// The leader's commit position.
        commit_position: i64,
    },
    /// A follower that cannot yet tell where its log and the leader's agree asks about its last term.
    TermQuery {
        /// The leader's term, as the follower knows it.
        leadership_term_id: i64,
        /// The term of the last byte of the follower's log.
        log_leadership_term_id: i64,
        /// The follower's append position.
        log_position: i64,
    },
    /// A follower's acknowledgement: its log agrees with the leader's up to `log_position` (frame 0x40).
    AppendPosition {
        /// The leader's term.
        leadership_term_id: i64,
        /// The follower's append position.
        log_position: i64,
        /// The follower's commit position (0: none known). Committed by a leader of some term, so in this
        /// leader's log: a leader that knows less (just elected, or restarted) takes it, and followers whose
        /// receive windows count from what they applied can take the log past it.
        commit_position: i64,
    },
    /// The leader's commit position, also its heartbeat (frame 0x41).
    CommitPosition {
        /// The leader's term.
        leadership_term_id: i64,
        /// The commit position.
        log_position: i64,
    },
    /// Raft's TimeoutNow (leadership transfer): the leader of `leadership_term_id`, which takes no new
    /// entries meanwhile, tells a follower holding its log up to `log_position` to stand for election at
    /// once, without a canvass.
    TimeoutNow {
        /// The leader's term.
        leadership_term_id: i64,
        /// The leader's append position: the follower stands only if it holds the log up to it.
        log_position: i64,
    },
}

impl Message {
    /// The leadership term the message speaks for: the candidate's term for canvass and vote requests,
    /// the sender's term otherwise.
    pub const fn leadership_term_id(&self) -> i64 {
        match *self {
            Self::Canvass { candidate_term_id, .. } | Self::RequestVote { candidate_term_id, .. } => candidate_term_id,
            Self::CanvassReply { leadership_term_id, .. }
            | Self::Vote { leadership_term_id, .. }
            | Self::NewLeadershipTerm { leadership_term_id, .. }
            | Self::TermQuery { leadership_term_id, .. }
            | Self::AppendPosition { leadership_term_id, .. }
            | Self::CommitPosition { leadership_term_id, .. }
            | Self::TimeoutNow { leadership_term_id, .. } => leadership_term_id,
        }
    }

    /// True when every term id and position in the message is in `0..i64::MAX`.
    pub fn is_well_formed(&self) -> bool {
        let values: &[i64] = match self {
            Self::Canvass { candidate_term_id, log_leadership_term_id, log_position, .. }
            | Self::RequestVote { candidate_term_id, log_leadership_term_id, log_position, .. } => {
                &[*candidate_term_id, *log_leadership_term_id, *log_position]
            }
            Self::CanvassReply { leadership_term_id, candidate_term_id, .. }
            | Self::Vote { leadership_term_id, candidate_term_id, .. } => &[*leadership_term_id, *candidate_term_id],
            Self::NewLeadershipTerm {
                leadership_term_id,
                log_leadership_term_id,
                next_leadership_term_id,
                next_term_base_position,
                commit_position,
            } => &[
                *leadership_term_id,
                *log_leadership_term_id,
                *next_leadership_term_id,
                *next_term_base_position,
                *commit_position,
            ],
            Self::TermQuery { leadership_term_id, log_leadership_term_id, log_position } => {
                &[*leadership_term_id, *log_leadership_term_id, *log_position]
            }
            Self::AppendPosition { leadership_term_id, log_position, commit_position } => {
                &[*leadership_term_id, *log_position, *commit_position]
            }
            Self::CommitPosition { leadership_term_id, log_position }
            | Self::TimeoutNow { leadership_term_id, log_position } => &[*leadership_term_id, *log_position],
        };
        values.iter().all(|&v| (0..i64::MAX).contains(&v))
    }
}
