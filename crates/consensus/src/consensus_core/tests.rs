//! The core's transitions, one rule at a time.

use super::*;

const MS: u64 = 1_000_000;
const HASH_OF_123: fn() -> u64 = || config::membership_hash(&[1, 2, 3]);

fn config(id: MemberId) -> CoreConfig {
    CoreConfig { seed: u64::from(id.unsigned_abs()), ..CoreConfig::new(id, vec![1, 2, 3]) }
}

fn core(id: MemberId) -> ConsensusCore {
    ConsensusCore::new(config(id), DurableState::default(), 0).unwrap()
}

fn log(terms: &[(i64, i64)], append_position: i64) -> TermHistory {
    let terms = terms.iter().map(|&(leadership_term_id, base_position)| TermBase { leadership_term_id, base_position });
    TermHistory::from_terms(terms.collect(), append_position).unwrap()
}

fn core_with(
    id: MemberId,
    term: i64,
    voted_for: Option<MemberId>,
    terms: &[(i64, i64)],
    append: i64,
    commit: i64,
) -> ConsensusCore {
    let durable = DurableState {
        leadership_term_id: term,
        voted_for,
        term_history: log(terms, append),
        append_position: append,
        commit_position: commit,
        memberships: Vec::new(),
    };
    ConsensusCore::new(config(id), durable, 0).unwrap()
}

fn sent(out: &[Output]) -> Vec<(Destination, Message)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, message } => Some((*to, *message)),
            _ => None,
        })
        .collect()
}

fn canvass(term: i64, log_term: i64, position: i64) -> Message {
    Message::Canvass {
        candidate_term_id: term,
        log_leadership_term_id: log_term,
        log_position: position,
        membership_hash: HASH_OF_123(),
    }
}

fn request_vote(term: i64, log_term: i64, position: i64) -> Message {
    Message::RequestVote {
        candidate_term_id: term,
        log_leadership_term_id: log_term,
        log_position: position,
        membership_hash: HASH_OF_123(),
    }
}

/// A follower's acknowledgement of `position` in `term`, knowing no commit.
fn append_ack(term: i64, position: i64) -> Message {
    Message::AppendPosition { leadership_term_id: term, log_position: position, commit_position: 0 }
}

fn granted(out: &[Output]) -> Option<bool> {
    sent(out).iter().find_map(|(_, m)| match m {
        Message::Vote { granted, .. } | Message::CanvassReply { granted, .. } => Some(*granted),
        _ => None,
    })
}

/// Drives member 1 through a canvass and an election it wins against 2 and 3; returns it leading term 1.
fn elected_leader() -> ConsensusCore {
    let mut leader = core(1);
    win(&mut leader, &mut Vec::new());
    leader
}

/// Makes `leader` (member 1, not yet canvassing) time out, canvass and win the next term with member 2's
/// grant and vote; its outputs go to `out`.
fn win(leader: &mut ConsensusCore, out: &mut Vec<Output>) {
    let (prior, candidate) = (leader.leadership_term_id(), leader.leadership_term_id() + 1);
    leader.tick(1000 * MS, out);
    leader.on_message(
        2,
        Message::CanvassReply { leadership_term_id: prior, candidate_term_id: candidate, granted: true },
        1000 * MS,
        out,
    );
    leader.on_message(
        2,
        Message::Vote { leadership_term_id: candidate, candidate_term_id: candidate, granted: true },
        1000 * MS,
        out,
    );
    assert_eq!((leader.role(), leader.leadership_term_id()), (Role::Leader, candidate));
}

#[test]
fn a_follower_times_out_and_canvasses_without_changing_its_term() {
    let mut follower = core(1);
    let mut out = Vec::new();
    follower.tick(100 * MS, &mut out);
    assert_eq!(follower.role(), Role::Follower, "no election before the shortest timeout");
    follower.tick(301 * MS, &mut out);
    assert_eq!(follower.role(), Role::Canvass);
    assert_eq!(follower.leadership_term_id(), 0, "a canvass changes no term");
    assert!(!out.iter().any(|o| matches!(o, Output::Persist { .. })));
    assert_eq!(sent(&out), vec![(Destination::Others, canvass(1, 0, 0))]);
}

#[test]
fn a_canvass_majority_starts_an_election_persisting_the_own_vote_first() {
    let mut member = core(1);
    let mut out = Vec::new();
    member.tick(301 * MS, &mut out);
    out.clear();
    member.on_message(
        3,
        Message::CanvassReply { leadership_term_id: 0, candidate_term_id: 1, granted: true },
        302 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Candidate);
    assert_eq!(member.leadership_term_id(), 1);
    let persist = out.iter().position(|o| *o == Output::Persist { leadership_term_id: 1, voted_for: Some(1) });
    let request = out.iter().position(|o| matches!(o, Output::Send { message: Message::RequestVote { .. }, .. }));
    assert!(persist.unwrap() < request.unwrap(), "persisted before the request goes out: {out:?}");
}

#[test]
fn a_candidate_wins_with_a_majority_and_asks_for_the_term_start_marker() {
    let mut out = Vec::new();
    let mut member = core(1);
    member.tick(301 * MS, &mut out);
    member.on_message(
        2,
        Message::CanvassReply { leadership_term_id: 0, candidate_term_id: 1, granted: true },
        302 * MS,
        &mut out,
    );
    out.clear();
    member.on_message(
        3,
        Message::Vote { leadership_term_id: 1, candidate_term_id: 1, granted: false },
        303 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Candidate, "a refusal is not a vote");
    member.on_message(
        2,
        Message::Vote { leadership_term_id: 1, candidate_term_id: 1, granted: true },
        303 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Leader);
    assert!(out.contains(&Output::RoleChange { role: Role::Leader, leadership_term_id: 1, leader_member_id: Some(1) }));
    assert!(out.contains(&Output::AppendTermStart { leadership_term_id: 1, position: 0 }));
}

#[test]
fn a_pre_vote_is_refused_while_a_leader_is_heard() {
    let mut follower = core(2);
    let mut out = Vec::new();
    let heartbeat = Message::CommitPosition { leadership_term_id: 1, log_position: 0 };
    follower.on_message(1, heartbeat, 10 * MS, &mut out);
    assert_eq!(follower.leader_member_id(), Some(1));
    out.clear();
    follower.on_message(3, canvass(2, 0, 0), 50 * MS, &mut out);
    assert_eq!(granted(&out), Some(false), "the leader was heard 40 ms ago");
    out.clear();
    follower.on_message(3, canvass(2, 0, 0), 111 * MS, &mut out);
    assert_eq!(granted(&out), Some(true), "the leader is silent past the heartbeat timeout");
    assert_eq!(follower.leadership_term_id(), 1, "granting a canvass changes no term");
    assert_eq!(follower.voted_for(), None);
}

#[test]
fn a_vote_is_granted_once_per_term_and_persisted_before_it_is_sent() {
    let mut voter = core(1);
    let mut out = Vec::new();
    voter.on_message(2, request_vote(1, 0, 0), MS, &mut out);
    let persist = out.iter().position(|o| *o == Output::Persist { leadership_term_id: 1, voted_for: Some(2) });
    let vote = out.iter().position(|o| matches!(o, Output::Send { message: Message::Vote { granted: true, .. }, .. }));
    assert!(persist.unwrap() < vote.unwrap(), "{out:?}");
    out.clear();
    voter.on_message(3, request_vote(1, 0, 0), MS, &mut out);
    assert_eq!(granted(&out), Some(false), "one vote per term");
    out.clear();
    voter.on_message(2, request_vote(1, 0, 0), MS, &mut out);
    assert_eq!(granted(&out), Some(true), "the same candidate may ask again");
    assert!(!out.iter().any(|o| matches!(o, Output::Persist { .. })), "nothing new to persist");
    out.clear();
    voter.on_message(3, request_vote(2, 0, 0), MS, &mut out);
    assert_eq!(granted(&out), Some(true), "a new term, a new vote");
}

#[test]
fn a_vote_survives_a_restart() {
    let mut voter = core_with(1, 4, Some(2), &[], 0, 0);
    let mut out = Vec::new();
    voter.on_message(3, request_vote(4, 0, 0), MS, &mut out);
    assert_eq!(granted(&out), Some(false));
}

#[test]
fn a_stale_log_candidate_is_refused() {
    let mut voter = core_with(1, 3, None, &[(1, 0), (3, 100)], 150, 0);
    let mut out = Vec::new();
    voter.on_message(2, request_vote(4, 2, 500), MS, &mut out);
    assert_eq!(granted(&out), Some(false), "an older last term loses whatever its length");
    out.clear();
    voter.on_message(2, request_vote(5, 3, 149), MS, &mut out);
    assert_eq!(granted(&out), Some(false), "same last term, shorter log");
    assert_eq!(voter.voted_for(), None);
    out.clear();
    voter.on_message(2, request_vote(6, 3, 150), MS, &mut out);
    assert_eq!(granted(&out), Some(true), "at least as up to date");
    out.clear();
    voter.on_message(3, canvass(7, 2, 900), 1000 * MS, &mut out);
    assert_eq!(granted(&out), Some(false), "canvasses compare logs too");
}

#[test]
fn the_up_to_date_check_can_be_broken_for_the_checker_test() {
    let mut cfg = config(1);
    cfg.bugs.skip_up_to_date_check = true;
    let durable = DurableState {
        leadership_term_id: 3,
        term_history: log(&[(3, 0)], 10),
        append_position: 10,
        ..Default::default()
    };
    let mut voter = ConsensusCore::new(cfg, durable, 0).unwrap();
    let mut out = Vec::new();
    voter.on_message(2, request_vote(4, 1, 0), MS, &mut out);
    assert_eq!(granted(&out), Some(true));
}

#[test]
fn a_leader_steps_down_on_a_higher_term() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_message(3, append_ack(2, 0), 1001 * MS, &mut out);
    assert_eq!(leader.role(), Role::Follower);
    assert_eq!(leader.leadership_term_id(), 2);
    assert_eq!(out[0], Output::Persist { leadership_term_id: 2, voted_for: None });
    assert_eq!(leader.counters().step_downs, 1);
    assert_eq!(leader.take_step_down(), Some(StepDown::NewerTerm { leadership_term_id: 2 }), "why, for the log");
    assert_eq!(leader.take_step_down(), None, "told once");
}

#[test]
fn a_leader_without_a_majority_steps_down() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_append_position(1, 32, 1000 * MS, &mut out);
    for ms in (1000..1090).step_by(10) {
        leader.on_message(2, append_ack(1, 32), ms * MS, &mut out);
        leader.tick(ms * MS, &mut out);
    }
    assert_eq!(leader.role(), Role::Leader, "one follower answering is a majority of three");
    leader.tick(1200 * MS, &mut out);
    assert_eq!(leader.role(), Role::Leader, "silent for 120 ms: longer than the heartbeat timeout, not the election's");
    leader.tick(1240 * MS, &mut out);
    assert_eq!(leader.role(), Role::Follower, "nobody answered for longer than the shortest election timeout");
    assert_eq!(leader.leadership_term_id(), 1);
    let Some(StepDown::NoMajority { heard }) = leader.take_step_down() else { panic!("why, for the log") };
    assert_eq!(heard, [(2, Some(160 * MS)), (3, None)], "member 2 last heard at 1080 ms, member 3 never");
    assert!(StepDown::NoMajority { heard }.to_string().contains("member 2 last heard 160 ms ago"));
}

/// A leader that knows no commit (just elected from a restart) takes a follower's: committed by an
/// earlier leader, in its own log, and what lets followers' windows (which count from what they applied)
/// take the log past its old uncommitted tail. Never past its own log, and never back.
#[test]
fn a_leader_takes_a_followers_commit_past_its_own() {
    let mut leader = core_with(1, 1, None, &[(1, 0)], 100, 0);
    let mut out = Vec::new();
    win(&mut leader, &mut out);
    leader.on_append_position(2, 132, 1001 * MS, &mut out);
    assert_eq!(leader.commit_position(), 0);
    out.clear();
    let with_commit = |position, commit| Message::AppendPosition {
        leadership_term_id: 2,
        log_position: position,
        commit_position: commit,
    };
    leader.on_message(2, with_commit(64, 96), 1002 * MS, &mut out);
    assert_eq!(leader.commit_position(), 96, "below its term start, committed before");
    assert!(out.contains(&Output::Commit { position: 96 }));
    assert!(sent(&out)
        .contains(&(Destination::Others, Message::CommitPosition { leadership_term_id: 2, log_position: 96 })));
    out.clear();
    leader.on_message(3, with_commit(64, 32), 1003 * MS, &mut out);
    assert_eq!((leader.commit_position(), out.len()), (96, 0), "never back");
    leader.on_message(3, with_commit(100, 164), 1003 * MS, &mut out);
    assert_eq!(leader.commit_position(), 96, "past its own log: not of this term's log, refused whole");
    leader.on_message(3, with_commit(132, 100), 1004 * MS, &mut out);
    assert_eq!(leader.commit_position(), 132, "its own term's entry, by the quorum of 1 and 3");
}

/// A transfer: the leader takes nothing new, tells the target once it holds the whole log, and the
/// target stands at once without a canvass.
#[test]
fn a_leader_hands_over_once_the_target_holds_its_log_and_the_target_stands_at_once() {
    let mut leader = core_with(1, 1, None, &[(1, 0)], 100, 0);
    let mut out = Vec::new();
    win(&mut leader, &mut out);
    leader.on_append_position(2, 132, 1001 * MS, &mut out);
    assert_eq!(leader.transfer_leadership(Some(1), 132, 1001 * MS, &mut out), Err(TransferError::NotAFollower(1)));
    out.clear();
    leader.on_message(2, append_ack(2, 100), 1002 * MS, &mut out);
    assert_eq!(leader.transfer_leadership(None, 132, 1002 * MS, &mut out), Ok(2), "the live follower furthest along");
    assert!(leader.is_transferring());
    assert!(!sent(&out).iter().any(|(_, m)| matches!(m, Message::TimeoutNow { .. })), "2 lacks 100..132");
    leader.on_message(2, append_ack(2, 132), 1003 * MS, &mut out);
    let timeout_now = Message::TimeoutNow { leadership_term_id: 2, log_position: 132 };
    assert!(sent(&out).contains(&(Destination::Member(2), timeout_now)));

    // The target, following 1 in term 2 and holding 132, stands for term 3 at once.
    let mut target = core_with(2, 2, Some(1), &[(1, 0), (2, 100)], 132, 0);
    let mut out = Vec::new();
    target.on_message(1, Message::CommitPosition { leadership_term_id: 2, log_position: 100 }, MS, &mut out);
    target.on_message(3, timeout_now, 2 * MS, &mut out);
    assert_eq!(target.role(), Role::Follower, "only the leader's TimeoutNow counts");
    target.on_message(1, Message::TimeoutNow { leadership_term_id: 2, log_position: 164 }, 2 * MS, &mut out);
    assert_eq!(target.role(), Role::Follower, "not before it holds the position told");
    target.on_message(1, timeout_now, 2 * MS, &mut out);
    assert_eq!((target.role(), target.leadership_term_id()), (Role::Candidate, 3));
    assert!(out.contains(&Output::Persist { leadership_term_id: 3, voted_for: Some(2) }));
    assert!(sent(&out).iter().any(|(to, m)| *to == Destination::Others && matches!(m, Message::RequestVote { .. })));
}

/// Found by the node simulator: a leader whose log ran ahead of what it had made durable sent TimeoutNow
/// while its own (and a follower's) log grew past the target's, and the target could win no vote. The
/// leader now waits until its durable position and the target's both reach its log's end.
#[test]
fn a_transfer_waits_until_the_leaders_whole_log_is_durable_and_on_the_target() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_append_position(1, 64, 1000 * MS, &mut out);
    leader.on_message(2, append_ack(1, 64), 1000 * MS, &mut out);
    out.clear();
    assert_eq!(leader.transfer_leadership(Some(2), 96, 1000 * MS, &mut out), Ok(2));
    leader.on_message(2, append_ack(1, 64), 1001 * MS, &mut out);
    leader.on_append_position(1, 96, 1001 * MS, &mut out);
    assert!(!sent(&out).iter().any(|(_, m)| matches!(m, Message::TimeoutNow { .. })), "2 holds 64 of 96");
    leader.on_message(2, append_ack(1, 96), 1002 * MS, &mut out);
    let timeout_now = Message::TimeoutNow { leadership_term_id: 1, log_position: 96 };
    assert!(sent(&out).contains(&(Destination::Member(2), timeout_now)));
}

#[test]
fn a_transfer_is_abandoned_after_the_minimum_election_timeout() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_message(2, append_ack(1, 0), 1000 * MS, &mut out);
    leader.on_message(3, append_ack(1, 0), 1000 * MS, &mut out);
    assert_eq!(leader.transfer_leadership(Some(3), 0, 1000 * MS, &mut out), Ok(3));
    leader.on_message(2, append_ack(1, 0), 1100 * MS, &mut out);
    leader.tick(1100 * MS, &mut out);
    assert!(leader.is_transferring());
    leader.on_message(2, append_ack(1, 0), 1150 * MS, &mut out);
    leader.tick(1150 * MS, &mut out);
    assert!(!leader.is_transferring(), "abandoned: the leader takes entries again");
    assert_eq!((leader.role(), leader.counters().transfers_abandoned), (Role::Leader, 1));
    assert_eq!(core(2).transfer_leadership(None, 0, 0, &mut out), Err(TransferError::NotLeader));
}

#[test]
fn a_leader_commits_only_once_its_own_term_is_on_a_majority() {
    // Member 1 holds bytes of term 1 up to 100, becomes leader of term 2 with base 100.
    let mut leader = core_with(1, 1, None, &[(1, 0)], 100, 0);
    let mut out = Vec::new();
    win(&mut leader, &mut out);
    assert_eq!(leader.role(), Role::Leader);
    out.clear();
    leader.on_message(
        2,
        Message::TermQuery { leadership_term_id: 2, log_leadership_term_id: 1, log_position: 100 },
        1001 * MS,
        &mut out,
    );
    leader.on_message(2, append_ack(2, 100), 1001 * MS, &mut out);
    assert_eq!(leader.commit_position(), 0, "a majority holds term 1's bytes, but none of term 2 (figure 8)");
    leader.on_append_position(2, 132, 1002 * MS, &mut out);
    leader.on_message(2, append_ack(2, 132), 1003 * MS, &mut out);
    assert_eq!(leader.commit_position(), 132);
    assert_eq!((leader.acknowledged_position(2), leader.acknowledged_position(3)), (Some(132), Some(0)));
    assert_eq!((leader.acknowledged_position(1), leader.acknowledged_position(9)), (Some(132), None));
    assert!(out.contains(&Output::Commit { position: 132 }));
    assert!(sent(&out)
        .contains(&(Destination::Others, Message::CommitPosition { leadership_term_id: 2, log_position: 132 })));
}

#[test]
fn the_leader_answers_a_term_query_with_where_that_term_ends() {
    let mut leader = core_with(1, 3, None, &[(1, 0), (3, 100)], 150, 0);
    let mut out = Vec::new();
    win(&mut leader, &mut out);
    out.clear();
    leader.on_message(
        3,
        Message::TermQuery { leadership_term_id: 4, log_leadership_term_id: 2, log_position: 120 },
        1001 * MS,
        &mut out,
    );
    let answer = Message::NewLeadershipTerm {
        leadership_term_id: 4,
        log_leadership_term_id: 1,
        next_leadership_term_id: 3,
        next_term_base_position: 100,
        commit_position: 0,
    };
    assert_eq!(sent(&out), vec![(Destination::Member(3), answer)]);
}

fn announcement(term: i64, log_term: i64, next_term: i64, next_base: i64, commit: i64) -> Message {
    Message::NewLeadershipTerm {
        leadership_term_id: term,
        log_leadership_term_id: log_term,
        next_leadership_term_id: next_term,
        next_term_base_position: next_base,
        commit_position: commit,
    }
}

#[test]
fn a_follower_truncates_an_uncommitted_suffix_and_replicates_from_the_common_position() {
    // The follower holds term 1 to 100 and term 2 (a leader that failed) to 180; commit 60.
    let mut follower = core_with(2, 2, None, &[(1, 0), (2, 100)], 180, 60);
    let mut out = Vec::new();
    // The leader of term 3 holds term 1 to 120 (it heard more of term 1), no term 2.
    follower.on_message(1, announcement(3, 1, 3, 120, 60), MS, &mut out);
    assert!(out.contains(&Output::Truncate { position: 100 }), "term 2 is not in the leader's log: {out:?}");
    assert!(out.contains(&Output::ReplicateFrom { leader_member_id: 1, leadership_term_id: 3, position: 100 }));
    assert_eq!(follower.append_position(), 100);
    assert_eq!(follower.term_history().last_term_id(), 1);
    let ack = Message::AppendPosition { leadership_term_id: 3, log_position: 100, commit_position: 60 };
    assert!(sent(&out).contains(&(Destination::Member(1), ack)), "with the commit it knows");
}

#[test]
fn a_follower_truncates_within_a_shared_term() {
    let mut follower = core_with(2, 1, None, &[(1, 0)], 150, 40);
    let mut out = Vec::new();
    follower.on_message(1, announcement(3, 1, 3, 120, 40), MS, &mut out);
    assert!(out.contains(&Output::Truncate { position: 120 }));
    assert_eq!(follower.append_position(), 120);
}

#[test]
fn a_follower_never_truncates_below_its_commit() {
    let mut follower = core_with(2, 2, None, &[(1, 0), (2, 100)], 180, 150);
    let mut out = Vec::new();
    follower.on_message(1, announcement(3, 1, 3, 120, 0), MS, &mut out);
    assert!(out.contains(&Output::Error(CoreError::TruncateBelowCommit { position: 100, commit_position: 150 })));
    assert!(!out.iter().any(|o| matches!(o, Output::Truncate { .. } | Output::ReplicateFrom { .. })));
    assert_eq!(follower.append_position(), 180);
}

#[test]
fn a_follower_behind_the_leaders_last_term_asks_and_then_matches() {
    let mut follower = core_with(2, 1, None, &[(1, 0)], 50, 0);
    let mut out = Vec::new();
    follower.on_message(1, announcement(4, 3, 4, 200, 0), MS, &mut out);
    let query = Message::TermQuery { leadership_term_id: 4, log_leadership_term_id: 1, log_position: 50 };
    assert_eq!(sent(&out), vec![(Destination::Member(1), query)]);
    out.clear();
    // The leader's term 1 ends at 40, where its term 3 starts.
    follower.on_message(1, announcement(4, 1, 3, 40, 0), MS, &mut out);
    assert!(out.contains(&Output::Truncate { position: 40 }));
    assert!(out.contains(&Output::ReplicateFrom { leader_member_id: 1, leadership_term_id: 4, position: 40 }));
}

#[test]
fn a_matched_follower_ignores_a_repeated_announcement_and_commits_what_it_holds() {
    let mut follower = core(2);
    let mut out = Vec::new();
    follower.on_message(1, announcement(1, 0, 1, 0, 0), MS, &mut out);
    follower.on_append_position(1, 64, 2 * MS, &mut out);
    out.clear();
    follower.on_message(1, announcement(1, 0, 1, 0, 0), 3 * MS, &mut out);
    assert!(!out.iter().any(|o| matches!(o, Output::Truncate { .. })), "already matched: {out:?}");
    assert_eq!(follower.counters().duplicate, 1);
    follower.on_message(1, Message::CommitPosition { leadership_term_id: 1, log_position: 96 }, 4 * MS, &mut out);
    assert_eq!(follower.commit_position(), 64, "never past its own log");
    follower.on_append_position(1, 96, 5 * MS, &mut out);
    assert_eq!(follower.commit_position(), 96);
}

#[test]
fn a_restarted_follower_with_bytes_of_the_current_term_keeps_them() {
    let mut follower = core_with(2, 3, None, &[(1, 0), (3, 100)], 150, 0);
    let mut out = Vec::new();
    follower.on_message(1, Message::CommitPosition { leadership_term_id: 3, log_position: 120 }, MS, &mut out);
    assert!(matches!(sent(&out)[0].1, Message::TermQuery { log_leadership_term_id: 3, .. }));
    out.clear();
    follower.on_message(1, announcement(3, 3, 3, 300, 120), MS, &mut out);
    assert!(out.contains(&Output::ReplicateFrom { leader_member_id: 1, leadership_term_id: 3, position: 150 }));
    assert_eq!(follower.commit_position(), 120);
}

#[test]
fn stale_duplicate_and_foreign_messages_are_counted_and_dropped() {
    let mut member = core_with(1, 5, None, &[], 0, 0);
    let mut out = Vec::new();
    member.on_message(1, Message::CommitPosition { leadership_term_id: 9, log_position: 0 }, MS, &mut out);
    member.on_message(2, Message::CommitPosition { leadership_term_id: 4, log_position: 0 }, MS, &mut out);
    member.on_message(2, Message::CommitPosition { leadership_term_id: 6, log_position: -1 }, MS, &mut out);
    member.on_message(2, append_ack(5, 0), MS, &mut out);
    let counters = member.counters();
    assert_eq!((counters.non_member, counters.stale_term, counters.malformed, counters.unexpected), (1, 1, 1, 1));
    // The stale leader's message is not acted on; it is answered with the newer term (see the test after).
    assert_eq!(sent(&out), vec![(Destination::Member(2), refusal(5))], "{out:?}");
    assert_eq!(member.leadership_term_id(), 5);
}

/// The answer to a leader of a term older than `term`: a refused canvass of `term`.
fn refusal(term: i64) -> Message {
    Message::CanvassReply { leadership_term_id: term, candidate_term_id: term, granted: false }
}

#[test]
fn a_member_in_a_newer_term_answers_an_older_leaders_heartbeat_and_the_leader_steps_down() {
    // Member 2 stood in term 2 while cut off (no request of term 2 reached anyone); member 1 leads term 1.
    let mut leader = elected_leader();
    // Its log holds 500 bytes of term 1 that no leader of term 2 has matched.
    let mut member = core_with(2, 2, Some(2), &[(1, 0)], 500, 0);
    let mut out = Vec::new();
    for heartbeat in [Message::CommitPosition { leadership_term_id: 1, log_position: 0 }, announcement(1, 0, 1, 0, 0)] {
        out.clear();
        member.on_message(1, heartbeat, 1001 * MS, &mut out);
        assert_eq!(sent(&out), vec![(Destination::Member(1), refusal(2))], "{heartbeat:?}");
        assert_eq!(member.leadership_term_id(), 2, "an older term is never adopted");
    }
    let (_, answer) = sent(&out)[0];
    leader.on_message(2, answer, 1001 * MS, &mut Vec::new());
    assert_eq!((leader.role(), leader.leadership_term_id()), (Role::Follower, 2));
    assert_eq!(leader.take_step_down(), Some(StepDown::NewerTerm { leadership_term_id: 2 }));
    // Delivered late, to a member that leads the answering member's term by then, it counts for nothing.
    // (An acknowledgement of 500 there would make a majority with the leader's own 600 of term 2.)
    let mut leader = core_with(1, 1, None, &[], 0, 0);
    win(&mut leader, &mut Vec::new());
    assert_eq!(leader.leadership_term_id(), 2);
    leader.on_append_position(2, 600, 1002 * MS, &mut Vec::new());
    let commit = leader.commit_position();
    assert_eq!(commit, 0);
    leader.on_message(2, answer, 1002 * MS, &mut Vec::new());
    assert_eq!((leader.role(), leader.leadership_term_id(), leader.commit_position()), (Role::Leader, 2, commit));
    // A leader of the member's own term is not answered so.
    out.clear();
    member.on_message(3, Message::CommitPosition { leadership_term_id: 2, log_position: 0 }, 1002 * MS, &mut out);
    assert!(sent(&out).iter().all(|(_, m)| !matches!(m, Message::AppendPosition { .. })), "{out:?}");
    assert!(matches!(sent(&out)[..], [(Destination::Member(3), Message::TermQuery { leadership_term_id: 2, .. })]));
}

#[test]
fn members_with_different_member_lists_refuse_each_other() {
    let mut member = core(1);
    let mut out = Vec::new();
    let foreign = config::membership_hash(&[1, 2, 3, 4]);
    let request = Message::RequestVote {
        candidate_term_id: 1,
        log_leadership_term_id: 0,
        log_position: 0,
        membership_hash: foreign,
    };
    member.on_message(2, request, 1000 * MS, &mut out);
    let canvass =
        Message::Canvass { candidate_term_id: 1, log_leadership_term_id: 0, log_position: 0, membership_hash: foreign };
    member.on_message(2, canvass, 1000 * MS, &mut out);
    assert_eq!(member.counters().membership_mismatch, 2);
    assert_eq!(member.leadership_term_id(), 0, "a foreign request does not move the term");
    assert!(sent(&out).iter().all(|(_, m)| matches!(
        m,
        Message::Vote { granted: false, .. } | Message::CanvassReply { granted: false, .. }
    )));
    assert_eq!(config::membership_hash(&[3, 1, 2]), HASH_OF_123(), "order does not matter");
}

#[test]
fn a_single_member_elects_itself_and_commits_what_it_appends() {
    let mut cfg = config(1);
    cfg.members = vec![1];
    let mut solo = ConsensusCore::new(cfg, DurableState::default(), 0).unwrap();
    let mut out = Vec::new();
    solo.tick(400 * MS, &mut out);
    assert_eq!(solo.role(), Role::Leader);
    solo.on_append_position(1, 32, 401 * MS, &mut out);
    assert_eq!(solo.commit_position(), 32);
}

#[test]
fn bad_configuration_names_the_key() {
    let mut cfg = config(1);
    use super::config::timer_settings;
    use crate::setting::FrontEnd;
    cfg.timers.heartbeat_timeout_ns = cfg.timers.heartbeat_interval_ns;
    assert_eq!(cfg.timers.validate().unwrap_err().setting, timer_settings::heartbeat_timeout_ns);
    assert_eq!(cfg.validate().unwrap_err().key, "timers");
    let mut cfg = config(1);
    cfg.timers.election_timeout_min_ns = cfg.timers.election_timeout_max_ns + 1;
    assert_eq!(cfg.timers.validate().unwrap_err().setting, timer_settings::election_timeout_min_ns);
    let mut cfg = config(1);
    cfg.timers.heartbeat_interval_ns = 0;
    let error = cfg.validate().unwrap_err();
    assert!(error.to_string().contains("heartbeat_interval_ns"), "{error}");
    // A heartbeat timeout at or above the election timeout's minimum cannot elect: refused, both named.
    let mut cfg = config(1);
    cfg.timers.heartbeat_timeout_ns = cfg.timers.election_timeout_min_ns;
    let error = cfg.timers.validate().unwrap_err();
    assert_eq!(error.setting, timer_settings::heartbeat_timeout_ns);
    let file = error.render(FrontEnd::NodeFile);
    assert!(file.starts_with("[consensus] heartbeat_timeout: "), "{file}");
    assert!(file.contains("[consensus] election_timeout_min"), "{file}");
    assert!(!file.contains("_ns"), "{file}");
    let builder = error.render(FrontEnd::Builder);
    assert!(builder.contains("heartbeat_timeout_ns") && builder.contains("election_timeout_min_ns"), "{builder}");
    assert!(CoreConfig::new(4, vec![1, 2, 3]).validate().is_ok(), "a member that joins later");
    let entry = Membership::initial(&[1, 2, 3]).apply(MembershipChange::AddLearner(4)).unwrap();
    let durable = DurableState { memberships: vec![(64, entry)], ..Default::default() };
    assert_eq!(ConsensusCore::new(config(1), durable, 0).unwrap_err().key, "durable.memberships");
    assert_eq!(CoreConfig::new(1, vec![1, 1]).validate().unwrap_err().key, "members");
    let durable = DurableState { commit_position: 5, ..Default::default() };
    assert_eq!(ConsensusCore::new(config(1), durable, 0).unwrap_err().key, "durable.commit_position");
    let durable = DurableState { leadership_term_id: i64::MAX, ..Default::default() };
    assert_eq!(ConsensusCore::new(config(1), durable, 0).unwrap_err().key, "durable.leadership_term_id");
    let durable = DurableState { append_position: 64, ..Default::default() };
    assert_eq!(ConsensusCore::new(config(1), durable, 0).unwrap_err().key, "durable.append_position");
}

#[test]
fn the_same_seed_gives_the_same_timeouts() {
    let run = || {
        let mut member = core(1);
        let mut out = Vec::new();
        let mut at = Vec::new();
        for ms in 0..3000 {
            out.clear();
            member.tick(ms * MS, &mut out);
            if !out.is_empty() {
                at.push(ms);
            }
        }
        at
    };
    let first = run();
    assert!(first.len() > 5);
    assert_eq!(first, run());
}

#[test]
fn a_candidate_repeats_its_request_to_members_that_have_not_granted() {
    let mut member = core(1);
    let mut out = Vec::new();
    member.tick(301 * MS, &mut out);
    member.on_message(
        2,
        Message::CanvassReply { leadership_term_id: 0, candidate_term_id: 1, granted: true },
        302 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Candidate);
    out.clear();
    member.tick(305 * MS, &mut out);
    assert!(sent(&out).is_empty(), "not before a heartbeat interval");
    member.tick(312 * MS, &mut out);
    let repeated =
        vec![(Destination::Member(2), request_vote(1, 0, 0)), (Destination::Member(3), request_vote(1, 0, 0))];
    assert_eq!(sent(&out), repeated);
    out.clear();
    member.on_message(
        2,
        Message::Vote { leadership_term_id: 1, candidate_term_id: 1, granted: false },
        313 * MS,
        &mut out,
    );
    member.on_message(
        3,
        Message::Vote { leadership_term_id: 1, candidate_term_id: 1, granted: true },
        313 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Leader);
}

#[test]
fn an_idle_leader_heartbeats_every_interval_and_announces_its_term_to_the_silent() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_append_position(1, 32, 1000 * MS, &mut out);
    leader.on_message(2, append_ack(1, 32), 1001 * MS, &mut out);
    assert_eq!(leader.commit_position(), 32);
    out.clear();
    leader.tick(1005 * MS, &mut out);
    assert!(sent(&out).is_empty(), "the commit went out at 1001 ms");
    leader.tick(1011 * MS, &mut out);
    let heartbeat = Message::CommitPosition { leadership_term_id: 1, log_position: 32 };
    assert_eq!(
        sent(&out),
        vec![(Destination::Others, heartbeat), (Destination::Member(3), announcement(1, 0, 1, 0, 32))]
    );
}

#[test]
fn a_candidate_that_hears_the_leader_of_its_term_follows_it() {
    let mut member = core(1);
    let mut out = Vec::new();
    member.tick(301 * MS, &mut out);
    member.on_message(
        2,
        Message::CanvassReply { leadership_term_id: 0, candidate_term_id: 1, granted: true },
        302 * MS,
        &mut out,
    );
    assert_eq!(member.role(), Role::Candidate);
    out.clear();
    member.on_message(3, announcement(1, 0, 1, 0, 0), 303 * MS, &mut out);
    assert_eq!(member.role(), Role::Follower);
    assert_eq!(member.leader_member_id(), Some(3));
    assert!(out.contains(&Output::RoleChange {
        role: Role::Follower,
        leadership_term_id: 1,
        leader_member_id: Some(3)
    }));
    assert_eq!(member.voted_for(), Some(1), "its vote in the term stands");
}

mod arbitrary_inputs {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Input {
        Message(MemberId, Message),
        Tick(u64),
        Append(i64, i64),
    }

    fn value() -> impl Strategy<Value = i64> {
        prop_oneof![0i64..8, 0i64..512, Just(i64::MAX - 1), Just(i64::MAX), Just(-1)]
    }

    fn message() -> impl Strategy<Value = Message> {
        let hash = prop_oneof![Just(HASH_OF_123()), any::<u64>()];
        prop_oneof![
            (value(), value(), value(), hash.clone()).prop_map(|(a, b, c, h)| Message::Canvass {
                candidate_term_id: a,
                log_leadership_term_id: b,
                log_position: c,
                membership_hash: h
            }),
            (value(), value(), any::<bool>()).prop_map(|(a, b, granted)| Message::CanvassReply {
                leadership_term_id: a,
                candidate_term_id: b,
                granted
            }),
            (value(), value(), value(), hash).prop_map(|(a, b, c, h)| Message::RequestVote {
                candidate_term_id: a,
                log_leadership_term_id: b,
                log_position: c,
                membership_hash: h
            }),
            (value(), value(), any::<bool>()).prop_map(|(a, b, granted)| Message::Vote {
                leadership_term_id: a,
                candidate_term_id: b,
                granted
            }),
            (value(), value(), value(), value(), value()).prop_map(|(a, b, c, d, e)| announcement(a, b, c, d, e)),
            (value(), value(), value()).prop_map(|(a, b, c)| Message::TermQuery {
                leadership_term_id: a,
                log_leadership_term_id: b,
                log_position: c
            }),
            (value(), value()).prop_map(|(a, b)| append_ack(a, b)),
            (value(), value()).prop_map(|(a, b)| Message::CommitPosition { leadership_term_id: a, log_position: b }),
            (value(), value()).prop_map(|(a, b)| Message::TimeoutNow { leadership_term_id: a, log_position: b }),
        ]
    }

    fn input() -> impl Strategy<Value = Input> {
        prop_oneof![
            4 => (0i32..5, message()).prop_map(|(from, m)| Input::Message(from, m)),
            1 => (0u64..400).prop_map(|ms| Input::Tick(ms * MS)),
            1 => (value(), value()).prop_map(|(term, grow)| Input::Append(term, grow)),
        ]
    }

    proptest! {
        /// Whatever arrives, in any order, the core never panics, its term and commit position never go
        /// back, the commit never passes the log, and a vote once cast stands for its term.
        #[test]
        fn never_panic_and_keep_the_invariants(inputs in prop::collection::vec(input(), 1..200)) {
            let mut member = core(1);
            let mut now = 0u64;
            let mut out = Vec::new();
            for input in inputs {
                let (term, commit, vote) = (member.leadership_term_id(), member.commit_position(), member.voted_for());
                out.clear();
                match input {
                    Input::Message(from, message) => member.on_message(from, message, now, &mut out),
                    Input::Tick(step) => {
                        now += step;
                        member.tick(now, &mut out);
                    }
                    Input::Append(append_term, grow) => {
                        let position = member.append_position().saturating_add(grow.clamp(-1, 1 << 20));
                        member.on_append_position(append_term, position, now, &mut out);
                    }
                }
                prop_assert!(member.leadership_term_id() >= term);
                prop_assert!(member.commit_position() >= commit);
                prop_assert!(member.commit_position() <= member.append_position());
                if member.leadership_term_id() == term && vote.is_some() {
                    prop_assert_eq!(member.voted_for(), vote);
                }
                for output in &out {
                    if let Output::Truncate { position } = output {
                        prop_assert!(*position >= commit, "truncated to {} below commit {}", position, commit);
                    }
                }
            }
        }
    }
}

/// Regression (found by `never_panic_and_keep_the_invariants`): a member's message with term
/// `i64::MAX` was adopted, and the next canvass overflowed computing `term + 1`.
#[test]
fn a_term_with_no_successor_is_dropped_as_malformed() {
    let mut member = core(1);
    let mut out = Vec::new();
    member.on_message(2, Message::CommitPosition { leadership_term_id: i64::MAX, log_position: 0 }, MS, &mut out);
    assert_eq!(member.counters().malformed, 1);
    assert_eq!(member.leadership_term_id(), 0);
    member.on_message(2, Message::CommitPosition { leadership_term_id: i64::MAX - 1, log_position: 0 }, MS, &mut out);
    member.tick(1000 * MS, &mut out);
    assert_eq!(member.role(), Role::Canvass, "the last term still has a next one to canvass for");
}

/// Delivers the messages in `outputs`, sent by `from`, to each of `to` that they address; returns the
/// outputs of the receivers, each with its member id.
fn route(
    cores: &mut [ConsensusCore],
    from: MemberId,
    outputs: &[Output],
    to: &[MemberId],
    now_ns: u64,
) -> Vec<(MemberId, Output)> {
    let mut produced = Vec::new();
    for (destination, message) in sent(outputs) {
        for &member in to {
            let addressed = match destination {
                Destination::Member(id) => id == member,
                Destination::Others => member != from,
            };
            if addressed {
                let mut out = Vec::new();
                cores[member as usize - 1].on_message(from, message, now_ns, &mut out);
                produced.extend(out.into_iter().map(|o| (member, o)));
            }
        }
    }
    produced
}

fn outputs_of(produced: &[(MemberId, Output)], member: MemberId) -> Vec<Output> {
    produced.iter().filter(|(id, _)| *id == member).map(|(_, o)| *o).collect()
}

/// Raft's figure 8 over positions. Member 1 led term 1 and alone holds its bytes 60..100; member 2 led
/// term 2 and alone holds its marker at 60..92; member 3 holds term 1 up to 60. Member 1 wins term 3
/// with member 3, which catches up to 100: a majority holds 0..100, but none of it is of term 3, so
/// nothing commits. Member 1 crashes; member 2 wins term 4 with member 3 (its last term, 2, beats 1)
/// and member 3 truncates 60..100, which was never committed. Had member 1 committed by counting, that
/// truncation would have dropped committed bytes.
#[test]
fn figure_8_a_new_leader_commits_nothing_of_earlier_terms_by_counting() {
    let mut cores = vec![
        core_with(1, 2, None, &[(1, 0)], 100, 0),
        core_with(2, 2, Some(2), &[(1, 0), (2, 60)], 92, 0),
        core_with(3, 2, Some(2), &[(1, 0)], 60, 0),
    ];
    let mut now = 1000 * MS;
    let mut out = Vec::new();
    cores[0].tick(now, &mut out);
    let replies = route(&mut cores, 1, &out, &[3], now);
    out.clear();
    route(&mut cores, 3, &outputs_of(&replies, 3), &[1], now).into_iter().for_each(|(_, o)| out.push(o));
    let votes = route(&mut cores, 1, &out, &[3], now);
    out.clear();
    route(&mut cores, 3, &outputs_of(&votes, 3), &[1], now).into_iter().for_each(|(_, o)| out.push(o));
    assert_eq!(cores[0].role(), Role::Leader, "member 1 leads term 3: {out:?}");
    assert!(out.contains(&Output::AppendTermStart { leadership_term_id: 3, position: 100 }));
    let mut marker = Vec::new();
    cores[0].on_append_position(3, 132, now, &mut marker);

    // Member 3 joins at 60, copies member 1's term 1 bytes up to 100 (not yet the marker) and says so.
    let joined = route(&mut cores, 1, &out, &[3], now);
    assert!(outputs_of(&joined, 3).contains(&Output::ReplicateFrom {
        leader_member_id: 1,
        leadership_term_id: 3,
        position: 60
    }));
    let mut copied = Vec::new();
    cores[2].on_append_position(1, 100, now, &mut copied);
    let acked = route(&mut cores, 3, &copied, &[1], now);
    assert_eq!(cores[0].commit_position(), 0, "0..100 is on a majority but holds nothing of term 3: {acked:?}");

    // Member 1 crashes. Once member 3 stops hearing it, member 2 wins term 4.
    now += 1000 * MS;
    let mut canvass = Vec::new();
    cores[1].tick(now, &mut canvass);
    let mut produced = route(&mut cores, 2, &canvass, &[3], now);
    for _ in 0..6 {
        let from_3 = outputs_of(&produced, 3);
        let mut from_2: Vec<Output> = route(&mut cores, 3, &from_3, &[2], now).into_iter().map(|(_, o)| o).collect();
        if cores[1].role() != Role::Leader && from_2.is_empty() {
            now += 400 * MS;
            cores[1].tick(now, &mut from_2);
        }
        produced = route(&mut cores, 2, &from_2, &[3], now);
        if outputs_of(&produced, 3).iter().any(|o| matches!(o, Output::Truncate { .. })) {
            break;
        }
    }
    assert_eq!((cores[1].role(), cores[1].leadership_term_id()), (Role::Leader, 4));
    let truncation = outputs_of(&produced, 3);
    assert!(truncation.contains(&Output::Truncate { position: 60 }), "{truncation:?}");
    assert!(!truncation.iter().any(|o| matches!(o, Output::Error(_))));
    assert_eq!(cores[2].append_position(), 60);
}

#[test]
fn a_campaign_canvasses_at_once_only_while_no_leader_is_known() {
    let mut follower = core(1);
    let mut out = Vec::new();
    follower.campaign(MS, &mut out);
    assert_eq!(follower.role(), Role::Canvass, "a preferred leader canvasses before any timeout");
    assert!(sent(&out).iter().any(|(to, m)| *to == Destination::Others && matches!(m, Message::Canvass { .. })));
    assert_eq!(follower.leadership_term_id(), 0, "a canvass changes no term");

    // A follower of a known leader does not campaign: its leader is live until the timers say otherwise.
    let mut leader = elected_leader();
    let mut follower = core(2);
    let mut out = Vec::new();
    leader.tick(1100 * MS, &mut out);
    for (to, message) in sent(&out) {
        if to == Destination::Others || to == Destination::Member(2) {
            follower.on_message(leader.member_id(), message, 1100 * MS, &mut Vec::new());
        }
    }
    assert_eq!(follower.leader_member_id(), Some(leader.member_id()));
    let mut out = Vec::new();
    follower.campaign(1101 * MS, &mut out);
    assert_eq!(follower.role(), Role::Follower);
    assert!(sent(&out).is_empty());
}

#[test]
fn an_installed_snapshot_replaces_the_terms_below_it_and_commits_up_to_it() {
    // Member 2 held term 1 up to 100; the leader's log below its snapshot at 500 is term 1 up to 300,
    // then term 3.
    let mut member = core_with(2, 3, None, &[(1, 0)], 100, 50);
    let mut out = Vec::new();
    let history =
        [TermBase { leadership_term_id: 1, base_position: 0 }, TermBase { leadership_term_id: 3, base_position: 300 }];
    member.on_snapshot_installed(500, &history, &mut out);
    assert!(!out.iter().any(|o| matches!(o, Output::Error(_))), "{out:?}");
    assert_eq!((member.append_position(), member.commit_position()), (500, 500));
    assert_eq!(member.term_history().base_of(3), Some(300), "term 3 starts where the leader's does");
    // Below the log's end, or a history that is not one, is refused.
    let mut out = Vec::new();
    member.on_snapshot_installed(400, &history, &mut out);
    assert!(matches!(out[..], [Output::Error(CoreError::AppendPositionWentBack { .. })]), "{out:?}");
    let mut out = Vec::new();
    let backwards = [history[1], history[0]];
    member.on_snapshot_installed(900, &backwards, &mut out);
    assert!(matches!(out[..], [Output::Error(CoreError::SnapshotHistory { position: 900 })]), "{out:?}");
}

// ---------------------------------------------------------------------------------------------------
// Membership changes
// ---------------------------------------------------------------------------------------------------

/// Member 1 leading term 1 with its term-start marker (to 32) committed by member 2's acknowledgement.
fn leader_with_committed_term() -> ConsensusCore {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_append_position(1, 32, 1000 * MS, &mut out);
    leader.on_message(2, append_ack(1, 32), 1000 * MS, &mut out);
    assert_eq!(leader.commit_position(), 32);
    leader
}

/// The leader proposes `change`, appends its entry (64 bytes) and reports it, as a driver does; returns the
/// configuration and where its entry ends.
fn change(leader: &mut ConsensusCore, change: MembershipChange, out: &mut Vec<Output>) -> (Membership, i64) {
    let next = leader.propose_membership(change, 1024, 1000 * MS).unwrap();
    let end = leader.append_position() + 64;
    leader.on_membership(end, next.clone(), out);
    leader.on_append_position(leader.leadership_term_id(), end, 1000 * MS, out);
    (next, end)
}

fn ack(leader: &mut ConsensusCore, from: MemberId, position: i64, out: &mut Vec<Output>) {
    let term = leader.leadership_term_id();
    leader.on_message(from, append_ack(term, position), 1000 * MS, out);
}

#[test]
fn a_learner_receives_the_log_and_acknowledges_it_but_never_counts() {
    let mut leader = leader_with_committed_term();
    let mut out = Vec::new();
    let (added, end) = change(&mut leader, MembershipChange::AddLearner(4), &mut out);
    assert_eq!((added.id, added.voters.clone(), added.learners.clone()), (1, vec![1, 2, 3], vec![4]));
    assert!(out.contains(&Output::MembershipChanged { membership_id: 1 }), "{out:?}");
    assert_eq!(leader.followers(), vec![2, 3, 4], "the leader sends to the learner too");
    leader.tick(1011 * MS, &mut out);
    assert!(
        sent(&out)
            .iter()
            .any(|(to, m)| *to == Destination::Member(4) && matches!(m, Message::NewLeadershipTerm { .. })),
        "the term is announced to the new learner"
    );
    ack(&mut leader, 4, end, &mut out);
    assert_eq!(leader.acknowledged_position(4), Some(end), "its acknowledgement is tracked");
    assert_eq!(leader.commit_position(), 32, "but a learner's acknowledgement commits nothing");
    ack(&mut leader, 2, end, &mut out);
    assert_eq!(leader.commit_position(), end);
}

#[test]
fn one_change_at_a_time_and_only_once_the_leaders_term_is_committed() {
    let mut leader = elected_leader();
    let mut out = Vec::new();
    leader.on_append_position(1, 32, 1000 * MS, &mut out);
    assert_eq!(
        leader.propose_membership(MembershipChange::AddLearner(4), 1024, 1000 * MS),
        Err(MembershipError::TermNotCommitted)
    );
    ack(&mut leader, 2, 32, &mut out);
    let (_, end) = change(&mut leader, MembershipChange::AddLearner(4), &mut out);
    assert_eq!(
        leader.propose_membership(MembershipChange::AddLearner(5), 1024, 1000 * MS),
        Err(MembershipError::ChangeInProgress { id: 1 })
    );
    ack(&mut leader, 2, end, &mut out);
    assert!(leader.propose_membership(MembershipChange::AddLearner(5), 1024, 1000 * MS).is_ok());
    let mut follower = core(2);
    assert_eq!(
        follower.propose_membership(MembershipChange::AddLearner(5), 1024, 0),
        Err(MembershipError::NotLeader { leader: None })
    );
    follower.on_membership(0, Membership::initial(&[1]), &mut out);
    assert!(out.iter().any(|o| matches!(o, Output::Error(CoreError::MembershipOutOfOrder { .. }))));
}

#[test]
fn a_learner_is_promoted_only_once_close_enough_and_then_counts() {
    let mut leader = leader_with_committed_term();
    let mut out = Vec::new();
    let (_, end) = change(&mut leader, MembershipChange::AddLearner(4), &mut out);
    ack(&mut leader, 2, end, &mut out);
    let silent = leader.propose_membership(MembershipChange::Promote(4), 1 << 30, 1000 * MS);
    assert_eq!(silent, Err(MembershipError::LearnerSilent(4)), "never heard: not promoted, however short the log");
    leader.on_append_position(1, end + 4096, 1000 * MS, &mut out);
    ack(&mut leader, 4, end, &mut out);
    let behind = leader.propose_membership(MembershipChange::Promote(4), 1024, 1000 * MS);
    assert_eq!(behind, Err(MembershipError::LearnerBehind { member: 4, behind: 4096, limit: 1024 }));
    ack(&mut leader, 4, end + 4096, &mut out);
    let (promoted, end) = change(&mut leader, MembershipChange::Promote(4), &mut out);
    assert_eq!(promoted.voters, vec![1, 2, 3, 4]);
    ack(&mut leader, 2, end, &mut out);
    assert!(leader.commit_position() < end, "three of four voters are a majority: the leader and 2 are not");
    ack(&mut leader, 4, end, &mut out);
    assert_eq!(leader.commit_position(), end);
}

#[test]
fn a_removed_leader_leads_the_change_through_and_then_steps_down_for_good() {
    let mut leader = leader_with_committed_term();
    let mut out = Vec::new();
    ack(&mut leader, 3, 32, &mut out);
    let (removed, end) = change(&mut leader, MembershipChange::Remove(1), &mut out);
    assert_eq!(removed.voters, vec![2, 3]);
    assert_eq!(leader.role(), Role::Leader, "it leads until the change commits");
    ack(&mut leader, 2, end, &mut out);
    assert_eq!(leader.role(), Role::Leader, "its own position no longer counts: 2 of {{2, 3}} are needed");
    ack(&mut leader, 3, end, &mut out);
    assert_eq!(leader.commit_position(), end);
    assert_eq!(leader.role(), Role::Follower);
    assert_eq!(leader.take_step_down(), Some(StepDown::Removed { membership_id: 1 }));
    out.clear();
    leader.tick(5000 * MS, &mut out);
    assert!(sent(&out).is_empty() && leader.role() == Role::Follower, "a removed member never canvasses: {out:?}");
}

#[test]
fn a_change_that_would_leave_too_few_live_voters_is_refused() {
    let leader = leader_with_committed_term();
    // Member 3 was never heard from: removing 2 would leave {1, 3}, whose majority needs both.
    let refused = leader.propose_membership(MembershipChange::Remove(2), 1024, 1000 * MS);
    assert_eq!(refused, Err(MembershipError::TooFewLiveVoters { live: 1, needed: 2 }));
    assert!(leader.propose_membership(MembershipChange::Remove(3), 1024, 1000 * MS).is_ok());
}

#[test]
fn a_member_that_joins_waits_for_a_leader_without_canvassing() {
    let mut joining = core(4);
    let mut out = Vec::new();
    joining.tick(5000 * MS, &mut out);
    assert!(!joining.is_voter() && sent(&out).is_empty(), "{out:?}");
    joining.on_message(1, announcement(1, 0, 1, 0, 0), 5001 * MS, &mut out);
    assert_eq!(joining.leader_member_id(), Some(1), "it follows a leader of the configuration it knows");
    joining.on_message(9, announcement(2, 0, 2, 0, 0), 5002 * MS, &mut out);
    assert_eq!(
        joining.leader_member_id(),
        Some(9),
        "and a leader of a configuration it does not know yet (the entries that added it are in its log)"
    );
}

#[test]
fn a_truncation_that_cuts_a_configuration_entry_returns_to_the_one_before() {
    let mut follower = core_with(2, 1, None, &[(1, 0)], 64, 0);
    let mut out = Vec::new();
    let added = Membership::initial(&[1, 2, 3]).apply(MembershipChange::AddLearner(4)).unwrap();
    follower.on_membership(128, added, &mut out);
    assert_eq!(follower.membership().id, 0, "not in effect before the core knows the bytes");
    follower.on_append_position(1, 128, 0, &mut out);
    assert_eq!((follower.membership().id, follower.followers()), (1, vec![1, 3, 4]));
    // Member 3 leads term 2, whose log holds term 1 only up to 64: the entry is cut, and with it the change.
    out.clear();
    follower.on_message(3, announcement(2, 1, 2, 64, 0), 10 * MS, &mut out);
    assert!(out.contains(&Output::Truncate { position: 64 }), "{out:?}");
    assert!(out.contains(&Output::MembershipChanged { membership_id: 0 }), "{out:?}");
    assert_eq!(follower.membership().id, 0);
}

#[test]
fn a_restart_restores_the_configurations_of_its_log() {
    let added = Membership::initial(&[1, 2, 3]).apply(MembershipChange::AddLearner(4)).unwrap();
    let promoted = added.apply(MembershipChange::Promote(4)).unwrap();
    let durable = DurableState {
        leadership_term_id: 1,
        term_history: log(&[(1, 0)], 300),
        append_position: 300,
        commit_position: 150,
        memberships: vec![(100, added), (200, promoted.clone())],
        ..Default::default()
    };
    let member = ConsensusCore::new(config(2), durable, 0).unwrap();
    assert_eq!(member.membership(), &promoted);
    assert_eq!(member.membership_log().entries().len(), 1, "the committed entry is folded into the base");
}

/// Member 1 in term 3, its log (term 1 from 0, term 3 from 100) ending at 200 after a loss: it held up to
/// 500 before.
fn repairing() -> ConsensusCore {
    let mut member = core_with(1, 3, None, &[(1, 0), (3, 100)], 200, 0);
    member.start_repair(500);
    assert_eq!(member.repair(), Some(Repair { held: 500, term: 3 }));
    member
}

#[test]
fn a_repairing_member_neither_canvasses_nor_stands_when_told_to() {
    let mut member = repairing();
    let mut out = Vec::new();
    member.tick(1000 * MS, &mut out);
    member.campaign(1000 * MS, &mut out);
    assert_eq!(member.role(), Role::Follower);
    assert!(sent(&out).is_empty(), "{out:?}");
    assert!(!member.may_stand());
    member.on_message(2, Message::CommitPosition { leadership_term_id: 3, log_position: 0 }, 1000 * MS, &mut out);
    member.on_message(2, Message::TimeoutNow { leadership_term_id: 3, log_position: 200 }, 1000 * MS, &mut out);
    assert_eq!((member.role(), member.leadership_term_id()), (Role::Follower, 3));
}

#[test]
fn a_repairing_member_grants_only_a_log_as_up_to_date_as_the_one_it_held_before() {
    // Up to date with what it holds now, not with what it held: refused, canvass and vote alike.
    for message in [canvass(4, 3, 400), request_vote(4, 3, 400)] {
        let mut out = Vec::new();
        repairing().on_message(2, message, 1000 * MS, &mut out);
        assert_eq!(granted(&out), Some(false), "{message:?}");
    }
    let mut member = repairing();
    let mut out = Vec::new();
    member.on_message(2, request_vote(4, 3, 400), 1000 * MS, &mut out);
    assert_eq!(member.voted_for(), None, "a refused vote is not cast");
    // As far as the log it held, or of a newer last term: granted.
    for message in [canvass(4, 3, 500), request_vote(4, 3, 500), request_vote(4, 4, 300)] {
        let mut out = Vec::new();
        repairing().on_message(2, message, 1000 * MS, &mut out);
        assert_eq!(granted(&out), Some(true), "{message:?}");
    }
}

#[test]
fn a_repair_ends_when_the_log_holds_what_it_held_before() {
    let mut member = repairing();
    let mut out = Vec::new();
    let announce = Message::NewLeadershipTerm {
        leadership_term_id: 4,
        log_leadership_term_id: 3,
        next_leadership_term_id: 4,
        next_term_base_position: 600,
        commit_position: 0,
    };
    member.on_message(2, announce, 1000 * MS, &mut out);
    assert!(out.iter().any(|o| matches!(o, Output::ReplicateFrom { position: 200, .. })), "{out:?}");
    member.on_append_position(3, 499, 1000 * MS, &mut out);
    assert!(member.repair().is_some());
    member.on_append_position(3, 500, 1000 * MS, &mut out);
    assert_eq!(member.repair(), None);
    assert!(member.may_stand());
}

#[test]
fn a_repair_ends_when_a_leader_cuts_the_log_back() {
    // The leader of term 4 holds no byte of term 3 (its term 1 is followed by term 4 at 150): the member's
    // term 3 goes, and with it anything of term 3 it held before, none of which was committed.
    let mut member = repairing();
    let mut out = Vec::new();
    let announce = Message::NewLeadershipTerm {
        leadership_term_id: 4,
        log_leadership_term_id: 1,
        next_leadership_term_id: 4,
        next_term_base_position: 150,
        commit_position: 0,
    };
    member.on_message(2, announce, 1000 * MS, &mut out);
    assert!(out.iter().any(|o| matches!(o, Output::Truncate { position: 100 })), "{out:?}");
    assert_eq!((member.append_position(), member.repair()), (100, None));
}

#[test]
fn a_member_that_holds_what_it_held_does_not_repair() {
    let mut member = core_with(1, 3, None, &[(1, 0), (3, 100)], 200, 0);
    member.start_repair(200);
    assert_eq!(member.repair(), None);
}
