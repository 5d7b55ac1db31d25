//! What `qc-cluster`'s administrative commands do: find the member that must take a command (the leader,
//! or every member for a snapshot) among the node directories given, send it through the directory's
//! admin ring ([`quorumcast::node::admin`]), and wait, with a time-out, for its answer (a membership change
//! is answered once it commits) and, for a leadership transfer, for another member to lead. A refusal
//! that says to retry (a new leader that has not committed an entry of its term yet) is retried.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use quorumcast::node::admin::{AdminCommand, AdminRings};

use crate::cluster_view::{self, MemberView};

/// How long a transfer is given before it is asked again.
const TRANSFER_ROUND: Duration = Duration::from_secs(1);

/// Carries out `command` on the members in `dirs`; the answers, one line each, or a clear error naming
/// the member and the reason. Never waits past `timeout`.
pub fn run(dirs: &[PathBuf], command: &AdminCommand, timeout: Duration) -> Result<String, String> {
    let started = Instant::now();
    if let AdminCommand::Snapshot = command {
        let views = cluster_view::describe(dirs, Duration::from_millis(1))?;
        let answers =
            views.iter().map(|member| ask(member, command, started, timeout)).collect::<Result<Vec<_>, _>>()?;
        return Ok(answers.join("\n"));
    }
    // The leader read from the counters may have handed over by the time the command reaches it: a
    // member that does not lead says so, and the command goes to the leader read again.
    let (leader, answer) = loop {
        let views = cluster_view::describe(dirs, Duration::from_millis(1))?;
        let leader = leader(&views)?.clone();
        match ask(&leader, command, started, timeout) {
            Err(why) if why.contains("does not lead") && started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(5))
            }
            answer => break (leader, answer?),
        }
    };
    let mut lines = vec![answer];
    if let AdminCommand::TransferLeadership(to) = command {
        let (from, term) = (leader.member_id, leader.leadership_term_id);
        let rings = AdminRings::attach(&leader.dir)?;
        // A transfer whose target does not win in time is abandoned, and the leader leads on: it is
        // asked again (another follower may be further along by then) until the time-out.
        loop {
            let round = Instant::now();
            match wait_for_new_leader(dirs, from, term, *to, round, TRANSFER_ROUND.min(timeout)) {
                Ok(line) => {
                    lines.push(line);
                    break;
                }
                Err(why) if started.elapsed() >= timeout => return Err(why),
                Err(_) => rings.send(correlation(), command)?,
            }
        }
    }
    Ok(lines.join("\n"))
}

/// Sends `command` to `member` and waits for its answer, `member N: <answer>`; a refusal that says to
/// retry (a new leader that has not committed an entry of its term, a transfer running) is asked again
/// until the time-out.
fn ask(member: &MemberView, command: &AdminCommand, started: Instant, timeout: Duration) -> Result<String, String> {
    let rings = AdminRings::attach(&member.dir)?;
    let answer = loop {
        let correlation = correlation();
        rings.send(correlation, command)?;
        match wait(&rings, correlation, started, timeout) {
            Err(why) if why.contains("retry") && started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(5))
            }
            answer => break answer,
        }
    };
    let answer = answer.map_err(|why| format!("member {} ({}): {why}", member.member_id, member.dir.display()))?;
    Ok(format!("member {}: {answer}", member.member_id))
}

/// The member that leads the newest term among `views`.
fn leader(views: &[MemberView]) -> Result<&MemberView, String> {
    views.iter().filter(|v| v.role == "leader").max_by_key(|v| v.leadership_term_id).ok_or_else(|| {
        let known: Vec<String> = views.iter().map(|v| format!("member {} is {}", v.member_id, v.role)).collect();
        format!(
            "no member given leads ({}): give the leader's directory too, or retry after the election",
            known.join(", ")
        )
    })
}

/// A correlation id no other run of the tool is likely to use.
fn correlation() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (u64::from(std::process::id()) << 40) ^ nanos
}

fn wait(rings: &AdminRings, correlation: u64, started: Instant, timeout: Duration) -> Result<String, String> {
    loop {
        if let Some(answer) = rings.answer(correlation) {
            return answer;
        }
        if started.elapsed() >= timeout {
            return Err(format!("no answer within {timeout:?} (the change may still be made: describe the cluster)"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until a member other than `from` leads a term after `term` (`to`, when named).
fn wait_for_new_leader(
    dirs: &[PathBuf],
    from: i64,
    term: i64,
    to: Option<i32>,
    started: Instant,
    timeout: Duration,
) -> Result<String, String> {
    loop {
        let views = cluster_view::describe(dirs, Duration::from_millis(1))?;
        if let Ok(now) = leader(&views) {
            if now.member_id != from && now.leadership_term_id > term {
                if to.is_some_and(|to| i64::from(to) != now.member_id) {
                    return Err(format!(
                        "member {} leads term {}, not member {}",
                        now.member_id,
                        now.leadership_term_id,
                        to.unwrap_or(-1)
                    ));
                }
                return Ok(format!("member {} leads term {}", now.member_id, now.leadership_term_id));
            }
        }
        if started.elapsed() >= timeout {
            return Err(format!(
                "member {from} still leads after {timeout:?}: the transfer was abandoned (see its log)"
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
