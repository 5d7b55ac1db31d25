//! What `qc-cluster`'s administrative commands do: find the member that must take a command (the leader,
//! or every member for a snapshot) among the node directories given, send it through the directory's
//! admin ring ([`quorumcast::unstable::admin`]), and wait, with a time-out, for its answer (a membership change
//! is answered once it commits) and, for a leadership transfer, for another member to lead. A refusal
//! that says to retry (a new leader that has not committed an entry of its term yet) is retried.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use quorumcast::unstable::admin::{AdminCommand, AdminRings};

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

/// Administration over the network: commands to members' consensus endpoints, each request and answer
/// tagged with the operator key (`[admin] key` on the members; see [`quorumcast::unstable::admin`]).
pub mod remote {
    use std::net::{SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};

    use quorumcast::unstable::admin::{self, AdminBody, AdminCommand, AdminFrameError, MAX_ADMIN_FRAME_LENGTH};
    use quorumcast_driver::media::auth::AuthKey;
    use serde_json::{json, Value};

    /// How often a `status` request is sent again while no answer came (it changes nothing).
    const STATUS_RETRY: Duration = Duration::from_millis(200);

    /// A member's `status` answer, read.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Status {
        /// The consensus endpoint it answered from.
        pub endpoint: SocketAddr,
        /// Its member id.
        pub member_id: i64,
        /// `follower`, `canvass`, `candidate` or `leader`.
        pub role: String,
        /// Its leadership term.
        pub term: i64,
        /// The leader it knows of (-1: none).
        pub leader: i64,
        /// Its append and commit positions.
        pub append: i64,
        /// Its commit position.
        pub commit: i64,
        /// The configuration in effect on it.
        pub configuration: i64,
        /// What its application applied, and its newest snapshot's position (`None` from a member of a
        /// version that does not say).
        pub applied: Option<i64>,
        /// See `applied`.
        pub snapshot: Option<i64>,
        /// How far its commit is behind the leader's: in bytes, and in time at the leader's commit rate
        /// (`None` when unknown: no leader, or one that committed nothing in the window). Set by
        /// [`describe`].
        pub lag_bytes: Option<i64>,
        /// See `lag_bytes`.
        pub lag: Option<Duration>,
        /// The whole answer.
        pub text: String,
    }

    impl Status {
        /// Reads `member=0 role=leader term=2 ...` (the words a member's `status` answer has).
        pub fn parse(endpoint: SocketAddr, text: &str) -> Result<Self, String> {
            let word = |key: &str| -> Result<&str, String> {
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
                    .ok_or_else(|| format!("{endpoint}: `{text}` has no {key}"))
            };
            let number = |key: &str| -> Result<i64, String> {
                word(key)?.parse().map_err(|_| format!("{endpoint}: `{text}`: {key} is not a number"))
            };
            Ok(Self {
                endpoint,
                member_id: number("member")?,
                role: word("role")?.to_string(),
                term: number("term")?,
                leader: number("leader")?,
                append: number("append")?,
                commit: number("commit")?,
                configuration: number("configuration")?,
                applied: number("applied").ok(),
                snapshot: number("snapshot").ok(),
                lag_bytes: None,
                lag: None,
                text: text.to_string(),
            })
        }
    }

    /// One request to `endpoint` and its answer (`member N: ...`, or the error naming the member), waiting
    /// at most until `deadline`. A `status` is sent again while unanswered; anything else once (a lost
    /// answer to a change is a time-out that says to look).
    pub fn ask(
        endpoint: SocketAddr,
        key: &AuthKey,
        command: &AdminCommand,
        deadline: Instant,
    ) -> Result<String, String> {
        let bind: SocketAddr = if endpoint.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("an address");
        let socket = UdpSocket::bind(bind).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
        let correlation = super::correlation();
        let mut buf = vec![0u8; MAX_ADMIN_FRAME_LENGTH + 64];
        let mut next_send = Instant::now();
        let mut sent = false;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "{endpoint}: no answer within the time-out (is it a member's consensus endpoint, does it hold \
                     this operator key? a change may still be made: describe the cluster)"
                ));
            }
            if now >= next_send && (!sent || *command == AdminCommand::Status) {
                let bytes = admin::encode_request(key, correlation, unix_ms(), command);
                socket.send_to(&bytes, endpoint).map_err(|e| format!("{endpoint}: cannot send: {e}"))?;
                (sent, next_send) = (true, now + STATUS_RETRY);
            }
            let wait = deadline.min(next_send).saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            socket.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
            let Ok((length, from)) = socket.recv_from(&mut buf) else { continue };
            if from != endpoint {
                continue;
            }
            let (frame, verified) = match admin::decode(Some(key), &buf[..length]) {
                Ok(frame) => (frame, true),
                // A member without an operator key says so untagged: shown, marked as unverified.
                Err(AdminFrameError::BadTag) => match admin::decode(None, &buf[..length]) {
                    Ok(frame) => (frame, false),
                    Err(_) => continue,
                },
                Err(_) => continue,
            };
            let AdminBody::Answer { member_id, result } = frame.body else { continue };
            if frame.correlation != correlation {
                continue;
            }
            return match (verified, result) {
                (true, Ok(what)) => Ok(format!("member {member_id}: {what}")),
                (true, Err(why)) => Err(format!("member {member_id} ({endpoint}): {why}")),
                (false, answer) => Err(format!(
                    "{endpoint} answered without this operator key's tag (unverified): {}",
                    answer.unwrap_or_else(|why| why)
                )),
            };
        }
    }

    /// Every endpoint's status, in order.
    pub fn statuses(endpoints: &[SocketAddr], key: &AuthKey, deadline: Instant) -> Result<Vec<Status>, String> {
        endpoints
            .iter()
            .map(|&endpoint| {
                let answer = ask(endpoint, key, &AdminCommand::Status, deadline)?;
                let text = answer.split_once(": ").map_or(answer.as_str(), |(_, text)| text);
                Status::parse(endpoint, text)
            })
            .collect()
    }

    /// The member that leads the newest term among `statuses`.
    fn leader(statuses: &[Status]) -> Result<&Status, String> {
        statuses.iter().filter(|s| s.role == "leader").max_by_key(|s| s.term).ok_or_else(|| {
            let known: Vec<String> = statuses.iter().map(|s| format!("member {} is {}", s.member_id, s.role)).collect();
            format!(
                "no member given leads ({}): give the leader's endpoint too, or retry after the election",
                known.join(", ")
            )
        })
    }

    /// As [`super::run`], over the network: `command` to the leader among `endpoints` (a snapshot to each,
    /// a status from each), retried where the answer says to, a transfer followed until another member
    /// leads; never past `timeout`.
    pub fn run(
        endpoints: &[SocketAddr],
        key: &AuthKey,
        command: &AdminCommand,
        timeout: Duration,
    ) -> Result<String, String> {
        let started = Instant::now();
        let deadline = started + timeout;
        if matches!(command, AdminCommand::Snapshot | AdminCommand::Status) {
            let answers = endpoints.iter().map(|&e| ask(e, key, command, deadline)).collect::<Result<Vec<_>, _>>()?;
            return Ok(answers.join("\n"));
        }
        let (from, answer) = loop {
            let statuses = statuses(endpoints, key, deadline)?;
            let leader = leader(&statuses)?.clone();
            match ask(leader.endpoint, key, command, deadline) {
                Err(why) if (why.contains("does not lead") || why.contains("retry")) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                answer => break (leader, answer?),
            }
        };
        let mut lines = vec![answer];
        if let AdminCommand::TransferLeadership(to) = command {
            // Asked again each round until another member leads (another follower may be further along).
            loop {
                let round = Instant::now() + super::TRANSFER_ROUND;
                while Instant::now() < round.min(deadline) {
                    let statuses = statuses(endpoints, key, deadline)?;
                    if let Ok(now) = leader(&statuses) {
                        if now.member_id != from.member_id && now.term > from.term {
                            if to.is_some_and(|to| i64::from(to) != now.member_id) {
                                return Err(format!(
                                    "member {} leads term {}, not member {}",
                                    now.member_id,
                                    now.term,
                                    to.unwrap_or(-1)
                                ));
                            }
                            lines.push(format!("member {} leads term {}", now.member_id, now.term));
                            return Ok(lines.join("\n"));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "member {} still leads after {timeout:?}: the transfer was abandoned (see its log)",
                        from.member_id
                    ));
                }
                let _ = ask(from.endpoint, key, command, deadline);
            }
        }
        Ok(lines.join("\n"))
    }

    /// `describe` over the network: every member's status, read twice `window` apart (the second kept),
    /// with its lag behind the member leading the highest term, in bytes and in time at that leader's
    /// commit rate over the window (as [`crate::cluster_view::describe`] reads local members).
    pub fn describe(
        endpoints: &[SocketAddr],
        key: &AuthKey,
        window: Duration,
        deadline: Instant,
    ) -> Result<Vec<Status>, String> {
        let first = statuses(endpoints, key, deadline)?;
        let started = Instant::now();
        std::thread::sleep(window.min(deadline.saturating_duration_since(started)));
        let mut second = statuses(endpoints, key, deadline)?;
        let elapsed = started.elapsed();
        let lead = leader(&second).ok().map(|l| (l.endpoint, l.term, l.commit));
        if let Some((endpoint, term, commit)) = lead {
            // The rate counts only when the same member led the same term at both readings.
            let before = first.iter().find(|s| s.endpoint == endpoint && s.term == term).map(|s| s.commit);
            for status in &mut second {
                let (bytes, lag) = crate::cluster_view::lag(commit, before.map(|b| commit - b), elapsed, status.commit);
                (status.lag_bytes, status.lag) = (Some(bytes), lag);
            }
        }
        Ok(second)
    }

    /// `describe` over the network as a table: each member's role, term, leader, configuration, append,
    /// commit and applied positions, newest snapshot, and lag behind the leader (see [`describe`]).
    pub fn render(statuses: &[Status]) -> String {
        let known = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
        let mut out = format!(
            "{:>6}  {:<9}  {:>5}  {:>6}  {:>6}  {:>14}  {:>14}  {:>14}  {:>14}  {:>12}  {:>10}  endpoint\n",
            "member", "role", "term", "leader", "config", "append", "commit", "applied", "snapshot", "lag bytes", "lag"
        );
        for s in statuses {
            let lag = crate::cluster_view::lag_text(s.lag);
            out += &format!(
                "{:>6}  {:<9}  {:>5}  {:>6}  {:>6}  {:>14}  {:>14}  {:>14}  {:>14}  {:>12}  {:>10}  {}\n",
                s.member_id,
                s.role,
                s.term,
                s.leader,
                s.configuration,
                s.append,
                s.commit,
                known(s.applied),
                known(s.snapshot),
                known(s.lag_bytes),
                lag,
                s.endpoint
            );
        }
        out
    }

    /// The same as one JSON object, `{"members": [{member_id, endpoint, role, leadership_term_id, leader,
    /// configuration_id, append_position, commit_position, applied_position, snapshot_position, lag_bytes,
    /// lag_ms}]}` (null where unknown).
    pub fn render_json(statuses: &[Status]) -> Value {
        let members: Vec<Value> = statuses
            .iter()
            .map(|s| {
                json!({
                    "member_id": s.member_id,
                    "endpoint": s.endpoint.to_string(),
                    "role": s.role,
                    "leadership_term_id": s.term,
                    "leader": (s.leader >= 0).then_some(s.leader),
                    "configuration_id": s.configuration,
                    "append_position": s.append,
                    "commit_position": s.commit,
                    "applied_position": s.applied,
                    "snapshot_position": s.snapshot,
                    "lag_bytes": s.lag_bytes,
                    "lag_ms": crate::cluster_view::lag_ms(s.lag),
                })
            })
            .collect();
        json!({ "members": members })
    }

    fn unix_ms() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_status_answer_is_read_word_by_word() {
            let at: SocketAddr = "127.0.0.1:9".parse().unwrap();
            let text = "member=2 role=leader term=7 leader=2 append=4096 commit=4000 configuration=3 voters=[0,1,2] learners=[]";
            let status = Status::parse(at, text).unwrap();
            assert_eq!((status.member_id, status.role.as_str(), status.term, status.commit), (2, "leader", 7, 4000));
            assert_eq!((status.applied, status.snapshot), (None, None), "a member of the version before");
            let newer = text.replace("commit=4000", "commit=4000 applied=3900 snapshot=2048");
            let status = Status::parse(at, &newer).unwrap();
            assert_eq!((status.applied, status.snapshot), (Some(3900), Some(2048)));
            assert!(Status::parse(at, "member=2 role=leader").unwrap_err().contains("no term"));
            assert!(Status::parse(at, &text.replace("term=7", "term=x")).unwrap_err().contains("not a number"));
        }
    }
}
