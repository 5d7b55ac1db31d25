//! Failover benchmark: how long a 3-node cluster under a steady load goes without committing when its
//! leader stops, for the default consensus timers and the `latency` profile's.
//!
//! `cargo bench --bench failover` (about 2 minutes), `-- --trials N` (default 50 per timer set), `-- --rate R`
//! (offered messages a second, default 20000), `-- --timers latency` (one set only).
//!
//! Each node runs its three agents on one thread of its own (`shared` mode, `backoff`: nothing spins); the
//! bench thread offers 16-byte messages at the rate to whichever member leads and applies on every member,
//! keeping a running digest of each member's applied entries. A trial:
//! 1. waits until a leader has held its term for half a second and every member has caught up;
//! 2. stops the leader: its agents are frozen where they are (as `SIGSTOP` or a long pause would freeze a
//!    process), so from that instant it sends and reads nothing; the bench no longer offers to it;
//! 3. measures, from that instant, the time until the new leader applies (so: has committed) the first
//!    message offered after the stop (`kill_to_commit_ms`), and until the surviving follower applies it
//!    (`kill_to_apply_ms`);
//! 4. resumes the old leader, which finds a newer term, steps down, cuts what it held that was never
//!    committed, and follows; the trial ends when it has caught up;
//! 5. checks that nothing the old leader had applied before it stopped is missing or different on the two
//!    others (`lost_committed` counts members whose first N entries differ, N being what the old leader
//!    had applied; expected 0).
//!
//! `QC_FAILOVER_DEBUG=1` prints, per trial, when the new leader was elected, when its commit position first
//! moved, and when a message offered after the stop committed.
//!
//! `-- --one-shot-clients N` runs, instead of the trials, one-shot remote clients (a new `ClusterClient`
//! each: connect, one message, its commit, close) against the cluster with member 0 leading, then with
//! member 0 stopped (frozen as above) and another member leading, the clients listing the members from
//! member 0: N clients per connect fan-out (`ClientConfig::connect_fanout` 1, one member at a time as the
//! client asked before it had a fan-out, and 3), in interleaved blocks of 50. It prints, per phase and
//! fan-out, the total time of the N clients, their p50/p99 connect-to-commit time and the asks per client,
//! and writes `target/failover/latest/one_shot.json`.
//!
//! `-- --transfer` runs the trials with a leadership transfer instead of a stop: the leader is asked to
//! hand its leadership to the next member (`Node::transfer_leadership`), and the times are measured from
//! that request (`kill_to_commit_ms` is then request to the first commit, in the new term, of a message
//! offered after the request). Target: p99 at most 2 heartbeat intervals.
//!
//! Results: a table and `target/failover/latest/summary.json` with `rows`, one per timer set:
//! `timers`, `trials`, `timeouts`, `kill_to_elected_ms` (until a new leader holds its term, as the bench
//! polls it), `kill_to_commit_ms` and `kill_to_apply_ms` ({p50, p99, max}),
//! `lost_committed`. The target on a LAN-class host with the `latency` timers: p99 kill-to-commit at most
//! 300 ms.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use quorumcast::{ClientConfig, ClusterClient, Event};
use quorumcast::{ClientEndpointConfig, Member, Node, NodeBuilder};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_consensus::consensus_core::Timers;
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_testkit::{members_on, shared_memory, Fnv1a64};
use serde_json::{json, Value};

/// Command line of the failover benchmark.
#[derive(Debug, Parser)]
#[command(name = "failover", about = "Time from a leader's stop to the next commit, per timer set")]
struct Args {
    /// Trials per timer set.
    #[arg(long, default_value_t = 50)]
    trials: usize,
    /// Messages offered per second.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Timer sets to run: `default`, `latency`, or both (comma-separated).
    #[arg(long, default_value = "default,latency")]
    timers: String,
    /// Hand the leadership over (Raft's TimeoutNow) instead of stopping the leader.
    #[arg(long)]
    transfer: bool,
    /// One-shot clients per fan-out and phase instead of the failover trials (0: the trials).
    #[arg(long, default_value_t = 0)]
    one_shot_clients: usize,
    /// Accepted and ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// Longest a trial may take before it counts as a timeout.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// A leader must hold its term this long before it is stopped.
const SETTLE: Duration = Duration::from_millis(500);

/// Digests kept per member: enough for the entries of one trial at the highest rate.
const HISTORY: usize = 1 << 18;

/// One member as the bench sees it.
struct Running {
    node: Node,
    applied: u64,
    digest: Fnv1a64,
    /// The sequence number of the newest entry applied.
    last_seq: u64,
    /// The digest after each of the newest applied entries: (applied count, digest).
    history: std::collections::VecDeque<(u64, u64)>,
}

impl Running {
    /// The digest of the first `count` entries, if still in the history.
    fn digest_at(&self, count: u64) -> Option<u64> {
        let first = self.history.front()?.0;
        self.history.get(count.checked_sub(first)? as usize).filter(|(c, _)| *c == count).map(|(_, d)| *d)
    }
}

struct Cluster {
    members: Vec<Running>,
    /// The members' client endpoints.
    addrs: Vec<(i32, std::net::SocketAddr)>,
    offered: u64,
    started: Instant,
    rate: u64,
    frozen: Option<usize>,
    /// The members' data directories (in shared memory): removed at `close`, as the node directories are.
    data_dirs: Vec<std::path::PathBuf>,
}

impl Cluster {
    fn start(run: &str, timers: Timers, rate: u64, clients: Option<AuthKey>) -> Self {
        let members = members_on(Ipv4Addr::LOCALHOST.into(), 3).expect("free ports");
        let nodes = (0..3).map(|id| {
            let builder = builder(run, id, &members, timers);
            let builder = match clients {
                Some(key) => builder.clients(ClientEndpointConfig::enabled(key)),
                None => builder,
            };
            builder.start().expect("the node starts")
        });
        let addrs = members.iter().map(|m| (m.id, m.client)).collect();
        let data_dirs = (0..3).map(|id| node_dir(run, id).with_extension("data")).collect();
        let members = nodes
            .map(|node| Running {
                node,
                applied: 0,
                digest: Fnv1a64::new(),
                last_seq: 0,
                history: std::collections::VecDeque::with_capacity(HISTORY),
            })
            .collect();
        Self { members, addrs, offered: 0, started: Instant::now(), rate, frozen: None, data_dirs }
    }

    /// The live member that leads, if any.
    fn leader(&self) -> Option<usize> {
        (0..3).find(|&i| Some(i) != self.frozen && self.members[i].node.role() == Role::Leader)
    }

    /// Offers up to what the rate allows by now, to the leader; then applies on every live member.
    fn step(&mut self) {
        let due = self.started.elapsed().as_nanos() as u64 * self.rate / 1_000_000_000;
        if let Some(leader) = self.leader() {
            let client = self.members[leader].node.client();
            let term = self.members[leader].node.leadership_term_id() as u64;
            while self.offered < due {
                let mut message = [0u8; 16];
                message[..8].copy_from_slice(&self.offered.to_le_bytes());
                message[8..].copy_from_slice(&term.to_le_bytes());
                if client.offer(&message).is_err() {
                    break;
                }
                self.offered += 1;
            }
        }
        for (i, member) in self.members.iter_mut().enumerate() {
            if Some(i) == self.frozen {
                continue;
            }
            let (applied, digest, last_seq, history) =
                (&mut member.applied, &mut member.digest, &mut member.last_seq, &mut member.history);
            member.node.poll_committed(4096, |entry| {
                digest.update(entry);
                *applied += 1;
                *last_seq = u64::from_le_bytes(entry[..8].try_into().expect("16-byte entries"));
                if history.len() == HISTORY {
                    history.pop_front();
                }
                history.push_back((*applied, digest.value()));
            });
        }
    }

    /// Steps until `done`; false on the trial timeout.
    fn step_until(&mut self, mut done: impl FnMut(&Cluster) -> bool) -> bool {
        let until = Instant::now() + TRIAL_TIMEOUT;
        while !done(self) {
            if Instant::now() > until {
                return false;
            }
            self.step();
            std::thread::yield_now();
        }
        true
    }

    fn close(self) {
        for member in self.members {
            member.node.resume_agents();
            let _ = member.node.close();
        }
        // A node keeps its data directory (its durable log) when it closes; the bench's are scratch, and
        // left in shared memory they filled it (97 MiB a member a timer set, run after run).
        for dir in &self.data_dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Member `id`'s node directory in run `run` (its data directory is beside it, with extension `data`).
fn node_dir(run: &str, id: i32) -> std::path::PathBuf {
    shared_memory().join(format!("quorumcast-failover-{}-{run}-{id}", std::process::id()))
}

fn builder(run: &str, id: i32, members: &[Member], timers: Timers) -> NodeBuilder {
    let dir = node_dir(run, id);
    NodeBuilder::new(id, members.to_vec())
        .leader(0)
        .timers(timers)
        .directory(&dir)
        .data_dir(dir.with_extension("data"))
        .clean_stale(true)
        .channel(ChannelConfig {
            mtu: 8192,
            term_length: 16 << 20,
            receiver_window: 2 << 20,
            status_interval: Duration::from_millis(10),
            ..ChannelConfig::default()
        })
        .threading(ThreadingMode::Shared)
        .idle_all("backoff")
}

/// The figures of one timer set.
struct Row {
    timers: &'static str,
    trials: usize,
    timeouts: usize,
    commit: Histogram<u64>,
    apply: Histogram<u64>,
    /// From the stop (or the transfer's request) until a new leader holds its term, as the bench sees it.
    elected: Histogram<u64>,
    lost_committed: usize,
}

fn run_timers(name: &'static str, timers: Timers, args: &Args) -> Row {
    let mut cluster = Cluster::start(name, timers, args.rate, None);
    let histogram = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut row = Row {
        timers: name,
        trials: 0,
        timeouts: 0,
        commit: histogram(),
        apply: histogram(),
        elected: histogram(),
        lost_committed: 0,
    };
    for trial in 0..args.trials {
        // A settled leader, every member caught up.
        let mut held_since: Option<(usize, i64, Instant)> = None;
        let settled = cluster.step_until(|c| {
            let Some(leader) = c.leader() else { return false };
            let term = c.members[leader].node.leadership_term_id();
            let caught_up = c.members.iter().all(|m| m.applied + 2 * c.rate / 100 >= c.members[leader].applied);
            match held_since {
                Some((l, t, since)) if l == leader && t == term => caught_up && since.elapsed() >= SETTLE,
                _ => {
                    held_since = Some((leader, term, Instant::now()));
                    false
                }
            }
        });
        if !settled {
            eprintln!("trial {trial}: the cluster did not settle");
            row.timeouts += 1;
            continue;
        }
        let leader = cluster.leader().expect("settled");
        let old_term = cluster.members[leader].node.leadership_term_id();
        // Stop it: from here it sends and reads nothing. Or, with `--transfer`, ask it to hand over.
        let stopped = Instant::now();
        if args.transfer {
            let to = cluster.members[(leader + 1) % 3].node.id();
            cluster.members[leader].node.transfer_leadership(Some(to)).expect("the leader transfers");
        } else {
            cluster.members[leader].node.pause_agents(Duration::from_secs(1));
            cluster.frozen = Some(leader);
        }
        let first_after = cluster.offered;
        let applied_at_stop = cluster.members[leader].applied;
        let digest_at_stop = cluster.members[leader].digest.value();
        let (mut commit_at, mut apply_at, mut elected_at) = (None, None, None::<(Duration, i64)>);
        let mut first_commit: Option<Duration> = None;
        let done = cluster.step_until(|c| {
            let new_leader = (0..3).find(|&i| {
                i != leader
                    && c.members[i].node.role() == Role::Leader
                    && c.members[i].node.leadership_term_id() > old_term
            });
            if let Some(i) = new_leader {
                let commit = c.members[i].node.commit_position();
                let at = elected_at.get_or_insert((stopped.elapsed(), commit)).1;
                if commit > at && std::env::var_os("QC_FAILOVER_DEBUG").is_some() && first_commit.is_none() {
                    first_commit = Some(stopped.elapsed());
                }
            }
            for (i, member) in c.members.iter().enumerate() {
                if i == leader || member.applied == 0 || member.last_seq < first_after {
                    continue;
                }
                let at = stopped.elapsed();
                if member.node.role() == Role::Leader && member.node.leadership_term_id() > old_term {
                    commit_at.get_or_insert(at);
                } else {
                    apply_at.get_or_insert(at);
                }
            }
            commit_at.is_some() && apply_at.is_some()
        });
        cluster.members[leader].node.resume_agents();
        cluster.frozen = None;
        if !done {
            eprintln!("trial {trial}: no commit by a new leader within {} s", TRIAL_TIMEOUT.as_secs());
            row.timeouts += 1;
            continue;
        }
        let ms = |d: Duration| (d.as_micros() as u64).max(1);
        row.commit.record(ms(commit_at.expect("done"))).expect("in bounds");
        row.apply.record(ms(apply_at.expect("done"))).expect("in bounds");
        row.elected.record(ms(elected_at.map_or(commit_at.expect("done"), |(at, _)| at))).expect("in bounds");
        if let Some(first) = first_commit {
            eprintln!(
                "trial {trial}: elected {:?}, its commit moved {first:?}, a new message committed {:?}",
                elected_at.map(|(at, _)| at),
                commit_at
            );
        }
        row.trials += 1;
        // The old leader rejoins; the others must hold what it had applied.
        let target = cluster.members.iter().map(|m| m.applied).max().unwrap_or(0);
        cluster.step_until(|c| c.members.iter().all(|m| m.applied >= target));
        for (i, member) in cluster.members.iter().enumerate() {
            if i != leader && applied_at_stop > 0 && member.digest_at(applied_at_stop) != Some(digest_at_stop) {
                row.lost_committed += 1;
            }
        }
    }
    cluster.close();
    row
}

fn quantiles_ms(h: &Histogram<u64>) -> Value {
    let ms = |us: u64| us as f64 / 1000.0;
    json!({ "p50": ms(h.value_at_quantile(0.5)), "p99": ms(h.value_at_quantile(0.99)), "max": ms(h.max()) })
}

/// What the one-shot clients of one phase and fan-out took.
struct OneShot {
    phase: &'static str,
    fanout: usize,
    clients: usize,
    total: Duration,
    /// Connect to commit, per client (us).
    each: Histogram<u64>,
    asks: u64,
    ask_rounds: u64,
    /// Opens refused (asked again).
    refused: u64,
    failed: usize,
}

/// One client: a new `ClusterClient` of the members (member 0 first) connects, offers one message, waits
/// for its commit and closes, while the bench steps the cluster; an open the leader refuses (its
/// `clients.opens_per_second` from one address) is asked again at once, and counted. `None` on the trial
/// timeout; else the time, the client's counts and the refusals.
fn one_shot(cluster: &mut Cluster, fanout: usize, n: u64) -> Option<(Duration, quorumcast::ClientStats, u64)> {
    let mut config = ClientConfig::new(cluster.addrs.clone());
    config.connect_fanout = fanout;
    let mut client = ClusterClient::new(config).expect("a client socket");
    let began = Instant::now();
    client.start_connect();
    let mut message = [0u8; 16];
    message[..8].copy_from_slice(&n.to_le_bytes());
    let (mut offered, mut committed, mut refused) = (false, false, 0);
    let until = Instant::now() + TRIAL_TIMEOUT;
    while !committed {
        if Instant::now() > until {
            return None;
        }
        cluster.step();
        if !offered && client.offer(&message).is_ok() {
            offered = true;
        }
        let mut again = false;
        let work = client.poll(|event| match event {
            Event::Committed { correlation_id: 1, .. } => committed = true,
            Event::ConnectRefused { .. } => again = true,
            _ => {}
        });
        if again {
            refused += 1;
            client.start_connect();
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
    let took = began.elapsed();
    client.close();
    Some((took, client.stats(), refused))
}

/// `--one-shot-clients`: see the module doc.
fn run_one_shot(args: &Args) -> Vec<OneShot> {
    const BLOCK: usize = 50;
    const FANOUTS: [usize; 2] = [1, 3];
    let key = AuthKey::generate().expect("a session key");
    let mut cluster = Cluster::start("one-shot", Timers::default(), 0, Some(key));
    let mut rows = Vec::new();
    let mut n = 0u64;
    for phase in ["member 0 leads", "member 0 stopped"] {
        if phase == "member 0 stopped" {
            cluster.members[0].node.pause_agents(Duration::from_secs(1));
            cluster.frozen = Some(0);
        }
        let settled = cluster.step_until(|c| c.leader().is_some_and(|l| c.members[l].node.commit_position() > 0));
        assert!(settled, "{phase}: no leader");
        eprintln!("one-shot clients, {phase}: member {} leads", cluster.leader().expect("settled"));
        let histogram = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        let mut phase_rows: Vec<OneShot> = FANOUTS
            .iter()
            .map(|&fanout| OneShot {
                phase,
                fanout,
                clients: 0,
                total: Duration::ZERO,
                each: histogram(),
                asks: 0,
                ask_rounds: 0,
                refused: 0,
                failed: 0,
            })
            .collect();
        while phase_rows.iter().any(|r| r.clients + r.failed < args.one_shot_clients) {
            for row in &mut phase_rows {
                for _ in 0..BLOCK.min(args.one_shot_clients - row.clients - row.failed) {
                    n += 1;
                    match one_shot(&mut cluster, row.fanout, n) {
                        Some((took, stats, refused)) => {
                            row.refused += refused;
                            row.clients += 1;
                            row.total += took;
                            row.each.record((took.as_micros() as u64).max(1)).expect("in bounds");
                            row.asks += stats.asks;
                            row.ask_rounds += stats.ask_rounds;
                        }
                        None => row.failed += 1,
                    }
                }
            }
        }
        rows.extend(phase_rows);
    }
    cluster.close();
    rows
}

fn main() {
    let args = Args::parse();
    if args.one_shot_clients > 0 {
        let rows = run_one_shot(&args);
        println!(
            "{:<18} {:>6} {:>7} {:>6} | {:>9} | {:>22} | {:>11} {:>11} {:>8}",
            "phase",
            "fanout",
            "clients",
            "failed",
            "total s",
            "per client ms p50/p99",
            "asks/client",
            "rounds/client",
            "refused"
        );
        let mut json_rows = Vec::new();
        for r in &rows {
            let per = |x: u64| x as f64 / r.clients.max(1) as f64;
            println!(
                "{:<18} {:>6} {:>7} {:>6} | {:>9.2} | {:>22} | {:>11.2} {:>11.2} {:>8}",
                r.phase,
                r.fanout,
                r.clients,
                r.failed,
                r.total.as_secs_f64(),
                format!(
                    "{:.2}/{:.2}",
                    r.each.value_at_quantile(0.5) as f64 / 1e3,
                    r.each.value_at_quantile(0.99) as f64 / 1e3
                ),
                per(r.asks),
                per(r.ask_rounds),
                r.refused
            );
            json_rows.push(json!({
                "phase": r.phase,
                "connect_fanout": r.fanout,
                "clients": r.clients,
                "failed": r.failed,
                "total_s": r.total.as_secs_f64(),
                "per_client_ms": quantiles_ms(&r.each),
                "asks_per_client": per(r.asks),
                "ask_rounds_per_client": per(r.ask_rounds),
                "refused_opens": r.refused,
            }));
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/failover/latest");
        std::fs::create_dir_all(&dir).expect("the results directory");
        let summary = json!({ "bench": "failover --one-shot-clients", "rows": json_rows });
        std::fs::write(dir.join("one_shot.json"), serde_json::to_string_pretty(&summary).expect("json"))
            .expect("one_shot.json written");
        return;
    }
    let mut rows = Vec::new();
    for name in args.timers.split(',').map(str::trim) {
        let (name, timers) = match name {
            "default" => ("default", Timers::default()),
            "latency" => ("latency", Timers::latency()),
            other => {
                eprintln!("--timers: `{other}` is neither `default` nor `latency`");
                std::process::exit(2);
            }
        };
        eprintln!(
            "failover: timers {name} (heartbeat {} ms, timeout {} ms, election {}-{} ms), {} trials at {} msg/s",
            timers.heartbeat_interval_ns / 1_000_000,
            timers.heartbeat_timeout_ns / 1_000_000,
            timers.election_timeout_min_ns / 1_000_000,
            timers.election_timeout_max_ns / 1_000_000,
            args.trials,
            args.rate
        );
        rows.push((timers, run_timers(name, timers, &args)));
    }
    println!(
        "{:<8} {:>6} {:>8} | {:>26} | {:>26} | {:>26} | lost",
        "timers",
        "trials",
        "timeouts",
        "kill->elected ms p50/p99/max",
        "kill->commit ms p50/p99/max",
        "kill->apply ms p50/p99/max"
    );
    let mut json_rows = Vec::new();
    for (timers, row) in &rows {
        let f = |h: &Histogram<u64>| {
            format!(
                "{:.1}/{:.1}/{:.1}",
                h.value_at_quantile(0.5) as f64 / 1e3,
                h.value_at_quantile(0.99) as f64 / 1e3,
                h.max() as f64 / 1e3
            )
        };
        println!(
            "{:<8} {:>6} {:>8} | {:>26} | {:>26} | {:>26} | {}",
            row.timers,
            row.trials,
            row.timeouts,
            f(&row.elected),
            f(&row.commit),
            f(&row.apply),
            row.lost_committed
        );
        json_rows.push(json!({
            "timers": row.timers,
            "heartbeat_interval_ms": timers.heartbeat_interval_ns as f64 / 1e6,
            "heartbeat_timeout_ms": timers.heartbeat_timeout_ns as f64 / 1e6,
            "election_timeout_ms": [timers.election_timeout_min_ns as f64 / 1e6, timers.election_timeout_max_ns as f64 / 1e6],
            "trials": row.trials,
            "timeouts": row.timeouts,
            "kill_to_elected_ms": quantiles_ms(&row.elected),
            "kill_to_commit_ms": quantiles_ms(&row.commit),
            "kill_to_apply_ms": quantiles_ms(&row.apply),
            "lost_committed": row.lost_committed,
        }));
    }
    let summary = json!({
        "bench": "failover",
        "rate": args.rate,
        "stop": if args.transfer { "a leadership transfer to the next member" } else { "the leader's agents frozen in process" },
        "rows": json_rows,
    });
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/failover/latest");
    std::fs::create_dir_all(&dir).expect("the results directory");
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&summary).expect("json"))
        .expect("summary.json written");
    eprintln!("failover: wrote {}", dir.join("summary.json").display());
}
