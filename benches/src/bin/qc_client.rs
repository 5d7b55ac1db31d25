//! `qc-client`: a remote client of a quorumcast cluster, from another process or host.
//!
//! ```text
//! qc-client --cluster tuning/cluster/node0.toml [--member ID=ADDR]... --offer N [--msg-size BYTES]
//!           [--rate MSGS] [--window K] [--warmup N] [--duration SECS] [--timeout SECS] [--idle STRATEGY] [--hgrm FILE]
//!           [--service-hgrm FILE] [--json FILE]
//! qc-client --udp-rtt HOST:PORT [--samples N] [--msg-size BYTES] [--warmup N] [--idle STRATEGY]
//!           [--timeout SECS] [--hgrm FILE] [--json FILE]
//! ```
//!
//! It finds the leader among the members' client endpoints (those of a node file given with `--cluster`,
//! or each `--member id=host:port`), opens a session, and has `--offer N` messages of `--msg-size` bytes
//! committed: closed loop with at most `--window` in flight (the default), or open loop at `--rate`
//! messages a second, latency then counted from each message's intended send time; with `--duration` it
//! stops offering after that many seconds, and ends once what it offered is acknowledged. Across a change of
//! leader it reconnects and resends what it was not told was committed; each message is applied once.
//!
//! It prints on stdout the session, the counts (committed, duplicates found by resends, responses and
//! whether they matched their messages) and the offer-to-commit-acknowledgement latency percentiles
//! (`latency_us` from intended send time, `service_us` from actual offer); `--hgrm` and `--service-hgrm`
//! write their whole HDR percentile distributions, `--json` the figures for scripts (the percentiles with
//! the keys of the sweep report's, `p50 p90 p99 p999 max mean stddev`, in microseconds).
//!
//! `--idle` sets how it waits on a duty cycle that found nothing to do (an idle strategy as in a node
//! file: `yield`, `sleep-ns:1000`, `backoff`, `noop`, ...); without it, it yields the CPU
//! (`sched_yield`), which spins on an otherwise idle core. A cycle that can offer nothing until an answer
//! comes (a full window, or everything offered) blocks on the socket whatever `--idle` says. `--wait` instead blocks on the socket until
//! an answer arrives or the next message is due (`ClusterClient::wait`): no CPU spent waiting.
//!
//! `--udp-rtt HOST:PORT` measures the UDP round trip to an echo socket instead (the floor under a
//! client's latency; `cargo bench --bench client` runs the echo): `--samples` ping-pongs, one datagram
//! of `--msg-size` bytes in flight at a time, each echoed back unchanged, after `--warmup` unrecorded
//! ones. Waiting for each echo it polls a non-blocking socket, idling with `--idle`; a datagram not
//! echoed within a second counts as lost. It prints `udp_rtt samples N lost L` and `rtt_us p50 .. p90 ..
//! p99 .. p99.9 .. max ..`; `--json` writes `{"mode": "udp-rtt", "samples", "lost", "msg_size",
//! "rtt_us": {p50, p90, p99, p999, max, mean, stddev}}`, `--hgrm` the distribution.
//!
//! Exit status: 0 when every message was committed exactly once (or every ping answered), 1 otherwise,
//! 2 on bad arguments.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use quorumcast::unstable::credentials::{ClientKey, DEFAULT_CLIENT_KEY_NAME};
use quorumcast::NodeFile;
use quorumcast::{ClientConfig, ClusterClient};
use quorumcast_bench::client_load::{drive, summary, ClientLoad};
use quorumcast_bench::hiccup::ProcessTimes;
use quorumcast_bench::report::{write_hgrm, Percentiles, NS_PER_US};
use quorumcast_driver::agent::idle::{set_timer_slack, Idle, IdleStrategyConfig};
use quorumcast_driver::media::auth::AuthKey;

/// Command line of qc-client.
#[derive(Debug, Parser)]
#[command(name = "qc-client", version, about = "Drive a quorumcast cluster as a remote client")]
struct Args {
    /// A node file of the cluster: its members' client endpoints are used.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// A member's id and client endpoint, `ID=HOST:PORT` (repeatable; instead of --cluster).
    #[arg(long, value_name = "ID=ADDR")]
    member: Vec<String>,
    /// A file holding the client key (64 hex digits) of a cluster that requires one (`[clients]
    /// auth_key`, or an entry of `[clients] keys`).
    #[arg(long, value_name = "FILE")]
    client_key_file: Option<PathBuf>,
    /// The name the cluster knows the key by: `default` for `[clients] auth_key`, else the entry's
    /// `name` in `[clients] keys`.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_CLIENT_KEY_NAME, requires = "client_key_file")]
    client_key_name: String,
    /// Messages to have committed.
    #[arg(long, value_name = "N", required_unless_present = "udp_rtt")]
    offer: Option<u64>,
    /// Bytes of each message (at least 8: the correlation id leads).
    #[arg(long, value_name = "BYTES", default_value_t = 128, value_parser = clap::value_parser!(u64).range(8..=65_536))]
    msg_size: u64,
    /// Open loop: messages a second (latency from each message's intended send time).
    #[arg(long, value_name = "MSGS")]
    rate: Option<f64>,
    /// Messages in flight at most.
    #[arg(long, value_name = "K", default_value_t = 64)]
    window: usize,
    /// Messages before latency is recorded.
    #[arg(long, value_name = "N", default_value_t = 0)]
    warmup: u64,
    /// Datagram bytes at most (the cluster's MTU).
    #[arg(long, value_name = "BYTES", default_value_t = 1408)]
    mtu: usize,
    /// Stop offering after this many seconds (then wait for what was offered).
    #[arg(long, value_name = "SECS", conflicts_with = "udp_rtt")]
    duration: Option<f64>,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    timeout: f64,
    /// Seconds of silence from the leader before looking for another.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    leader_timeout: f64,
    /// Microseconds an offered message may wait for more to share its datagram (0: sent at the next poll).
    #[arg(long, value_name = "US", default_value_t = 0)]
    linger_us: u64,
    /// How to wait on a duty cycle without work (`yield`, `sleep-ns:1000`, `backoff`, ...) [default:
    /// sched_yield].
    #[arg(long, value_name = "STRATEGY")]
    idle: Option<IdleStrategyConfig>,
    /// On a duty cycle without work, block on the socket (`ppoll`) until an answer arrives, the next
    /// message is due (`--rate`) or a timer of the client: no CPU spent waiting, woken by the answer.
    #[arg(long, conflicts_with = "idle")]
    wait: bool,
    /// Also measure this process's CPU time (`/proc/PID/stat`) over the run, beside the client's own: the
    /// cluster's, when it runs in one process (the client bench passes it); `--json` writes both
    /// (`cpu_s`, `cluster_cpu_s`).
    #[arg(long, value_name = "PID")]
    cluster_pid: Option<u32>,
    /// Measure the UDP round trip to the echo socket at this address instead (no cluster).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["cluster", "member", "offer", "rate"])]
    udp_rtt: Option<SocketAddr>,
    /// Round trips of --udp-rtt.
    #[arg(long, value_name = "N", default_value_t = 10_000, requires = "udp_rtt")]
    samples: u64,
    /// Write the HDR percentile distribution (microseconds) here.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the HDR percentile distribution of the latency from actual offer (microseconds) here.
    #[arg(long, value_name = "FILE")]
    service_hgrm: Option<PathBuf>,
    /// Write the figures as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.udp_rtt {
        Some(echo) => udp_rtt(&args, echo),
        None => run(&args),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(Usage(message)) => {
            eprintln!("qc-client: {message}");
            ExitCode::from(2)
        }
    }
}

/// A bad argument or file.
struct Usage(String);

fn members(args: &Args) -> Result<Vec<(i32, SocketAddr)>, Usage> {
    let mut members = Vec::new();
    if let Some(path) = &args.cluster {
        let config = NodeFile::load(path)
            .and_then(|f| f.into_config())
            .map_err(|e| Usage(format!("{}: {e}", path.display())))?;
        members.extend(config.members.iter().map(|m| (m.id, m.client)));
    }
    for entry in &args.member {
        let parsed = entry.split_once('=').and_then(|(id, addr)| Some((id.parse().ok()?, addr.parse().ok()?)));
        members.push(parsed.ok_or_else(|| Usage(format!("--member {entry:?}: expected ID=HOST:PORT")))?);
    }
    if members.is_empty() {
        return Err(Usage("give the cluster: --cluster NODE_FILE or --member ID=HOST:PORT".into()));
    }
    Ok(members)
}

/// The client key of `--client-key-file`, under `--client-key-name`; `None` without the file.
fn client_key(args: &Args) -> Result<Option<ClientKey>, Usage> {
    let Some(path) = &args.client_key_file else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| Usage(format!("--client-key-file {}: {e}", path.display())))?;
    let key: AuthKey = text.parse().map_err(|e| Usage(format!("--client-key-file {}: {e}", path.display())))?;
    Ok(Some(ClientKey::new(args.client_key_name.clone(), key)))
}

/// The `--idle` strategy as a closure for a duty cycle without work (`sched_yield` without one), with
/// the thread's timer slack lowered for a strategy that sleeps (as the agent runner does).
fn idler(args: &Args) -> Result<impl FnMut(), Usage> {
    let mut idle = match args.idle {
        Some(config) => {
            if config.sleeps() {
                if let Err(e) = set_timer_slack(Duration::from_nanos(1)) {
                    eprintln!("qc-client: warning: could not lower the timer slack: {e}");
                }
            }
            Some(Idle::new(&config).map_err(|e| Usage(format!("--idle: {e}")))?)
        }
        None => None,
    };
    Ok(move || match &mut idle {
        Some(idle) => idle.idle(0),
        None => std::thread::yield_now(),
    })
}

fn timeout(args: &Args) -> Result<Duration, Usage> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Usage(format!("--timeout {} must be a positive number of seconds", args.timeout)));
    }
    Ok(Duration::from_secs_f64(args.timeout))
}

/// Writes `histogram` (nanoseconds) as an `.hgrm` in microseconds, warning when it cannot.
fn hgrm(histogram: &Histogram<u64>, path: Option<&Path>) {
    if let Some(path) = path {
        if let Err(e) = write_hgrm(histogram, path, NS_PER_US) {
            eprintln!("qc-client: cannot write {}: {e}", path.display());
        }
    }
}

/// Writes `json` to `--json`, warning when it cannot.
fn json(args: &Args, json: &serde_json::Value) {
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(json).unwrap_or_default() + "\n") {
            eprintln!("qc-client: cannot write {}: {e}", path.display());
        }
    }
}

/// How long `--udp-rtt` waits for one echo before counting the datagram lost.
const ECHO_TIMEOUT: Duration = Duration::from_secs(1);

/// `--udp-rtt`: ping-pongs with the echo socket at `echo`, one datagram in flight at a time.
fn udp_rtt(args: &Args, echo: SocketAddr) -> Result<bool, Usage> {
    let deadline = Instant::now() + timeout(args)?;
    let mut idle = idler(args)?;
    let size = args.msg_size as usize;
    let local: SocketAddr = if echo.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("a valid address");
    let socket = UdpSocket::bind(local)
        .and_then(|s| s.connect(echo).and(s.set_nonblocking(true)).map(|()| s))
        .map_err(|e| Usage(format!("--udp-rtt {echo}: {e}")))?;
    let mut rtt = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let (mut ping, mut pong) = (vec![0u8; size], vec![0u8; size.max(8) + 1]);
    let mut lost = 0u64;
    for seq in 0..args.warmup + args.samples {
        if Instant::now() > deadline {
            eprintln!("qc-client: timed out after {seq} round trips");
            return Ok(false);
        }
        ping.iter_mut().for_each(|b| *b = seq as u8);
        ping[..8].copy_from_slice(&seq.to_le_bytes());
        let sent = Instant::now();
        if let Err(e) = socket.send(&ping) {
            eprintln!("qc-client: send to {echo}: {e}");
            return Ok(false);
        }
        loop {
            match socket.recv(&mut pong) {
                Ok(n) if n == size && pong[..8] == ping[..8] => {
                    if seq >= args.warmup {
                        rtt.saturating_record(sent.elapsed().as_nanos() as u64);
                    }
                    break;
                }
                Ok(_) => {} // a late echo of a datagram counted lost
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if sent.elapsed() > ECHO_TIMEOUT {
                        lost += 1;
                        break;
                    }
                    idle();
                }
                Err(e) => {
                    eprintln!("qc-client: receive from {echo}: {e}");
                    return Ok(false);
                }
            }
        }
    }
    let p = Percentiles::from_histogram(&rtt, NS_PER_US);
    println!("udp_rtt samples {} lost {lost} msg_size {size}", rtt.len());
    println!("rtt_us p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}", p.p50, p.p90, p.p99, p.p999, p.max);
    hgrm(&rtt, args.hgrm.as_deref());
    json(
        args,
        &serde_json::json!({
            "mode": "udp-rtt",
            "echo": echo.to_string(),
            "samples": rtt.len(),
            "lost": lost,
            "msg_size": size,
            "rtt_us": p,
        }),
    );
    Ok(lost == 0)
}

fn run(args: &Args) -> Result<bool, Usage> {
    let timeout = timeout(args)?;
    let offer = args.offer.ok_or_else(|| Usage("give --offer N (or --udp-rtt HOST:PORT)".into()))?;
    if args.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        return Err(Usage("--duration must be a positive number of seconds".into()));
    }
    let idle = idler(args)?;
    if args.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(Usage("--rate must be a positive number of messages a second".into()));
    }
    let mut config = ClientConfig::new(members(args)?);
    config.key = client_key(args)?;
    config.mtu = args.mtu;
    config.window = args.window.max(1);
    config.leader_timeout = Duration::from_secs_f64(args.leader_timeout.max(0.01));
    config.linger = Duration::from_micros(args.linger_us);
    let mut client = ClusterClient::new(config).map_err(|e| Usage(format!("client socket: {e}")))?;
    if let Err(e) = client.connect(timeout) {
        eprintln!("qc-client: {e}");
        return Ok(false);
    }
    eprintln!("qc-client: session {} at member {:?}", client.session_id().unwrap_or(0), client.leader());
    let load = ClientLoad {
        messages: offer,
        msg_size: args.msg_size as usize,
        rate: args.rate,
        window: args.window.max(1),
        duration: args.duration.map(Duration::from_secs_f64),
        timeout,
        warmup: args.warmup,
        cluster_pid: args.cluster_pid,
        wait: args.wait,
    };
    if args.wait {
        if let Err(e) = set_timer_slack(Duration::from_nanos(1)) {
            eprintln!("qc-client: warning: could not lower the timer slack: {e}");
        }
    }
    let run = match drive(&mut client, &load, idle) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("qc-client: {e}");
            return Ok(false);
        }
    };
    client.close();
    println!("{}", summary(&run));
    hgrm(&run.latency_ns, args.hgrm.as_deref());
    hgrm(&run.service_ns, args.service_hgrm.as_deref());
    json(
        args,
        &serde_json::json!({
            "session_id": run.session_id,
            "messages": offer,
            "offered": run.offered,
            "committed": run.committed,
            "duplicates": run.duplicates,
            "not_applied": run.not_applied,
            "responses": run.responses,
            "bad_responses": run.bad_responses,
            "reported_twice": run.reported_twice,
            "reconnects": run.reconnects,
            "rate": run.rate(),
            "elapsed_s": run.elapsed.as_secs_f64(),
            "msg_size": args.msg_size,
            "duration_s": args.duration,
            "rate_offered": args.rate,
            "window": load.window,
            "warmup": args.warmup,
            "latency_us": Percentiles::from_histogram(&run.latency_ns, NS_PER_US),
            "service_latency_us": Percentiles::from_histogram(&run.service_ns, NS_PER_US),
            "cpu_s": run.cpu_ticks.map(ProcessTimes::seconds),
            "cluster_cpu_s": run.cluster_cpu_ticks.map(ProcessTimes::seconds),
            "client_stats": {
                "datagrams_sent": run.stats.datagrams_sent,
                "messages_sent": run.stats.messages_sent,
                "datagrams_received": run.stats.datagrams_received,
                "receive_calls": run.stats.receive_calls,
                "send_calls": run.stats.send_calls,
            },
        }),
    );
    let all_offered = args.duration.is_some() || run.offered == offer;
    Ok(all_offered
        && run.committed == run.offered
        && run.reported_twice == 0
        && run.bad_responses == 0
        && run.not_applied == 0)
}
