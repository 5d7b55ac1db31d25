//! Load from another process: `qc-client` run as a child of the harness, beside a [`LoadCluster`] that
//! takes remote clients ([`ClusterSpec::clients`](super::cluster::ClusterSpec::clients)), and the UDP
//! round trip between two processes that floors a remote client's latency. `cargo bench --bench client`
//! and the sweep's `--client-process` run these.
//!
//! While a client runs, the harness thread keeps invoking and applying the nodes
//! ([`LoadCluster::poll`]): the leader acknowledges a client's message only when its application polls
//! it, so a harness that waited on the child would stall the client. The child's figures come back
//! through its `--json` file (see `qc-client`'s documentation), its `.hgrm` files where asked. The child
//! may run on any CPU this process may (it would otherwise inherit the pinned harness thread's core).
//!
//! The floor ([`ClientProcess::udp_rtt`]) runs with the cluster's agent threads parked
//! ([`LoadCluster::paused`]): an echo socket on the harness thread answers `qc-client --udp-rtt`, both
//! polling non-blocking sockets (the harness spins, the client idles with its strategy), so the two
//! processes have the cores the cluster and the client otherwise share.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::shm::stats::Stats;

use crate::report::Percentiles;

use super::cluster::{LoadCluster, SETTLE_TIMEOUT};
use super::measure::{agent_cycles, AgentCycles};
use super::profile::Timings;
use super::SweepError;

/// How often the harness looks at the child (has it exited? has an agent failed?).
const CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// The largest window a client may have: the cluster's `clients.window` (`ClientEndpointConfig::default`).
pub const MAX_WINDOW: usize = 4096;

/// A `qc-client` binary and how it idles.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientProcess {
    /// The `qc-client` executable (a bench finds it with `env!("CARGO_BIN_EXE_qc-client")`).
    pub binary: PathBuf,
    /// Its `--idle` strategy; `None`: its default (`sched_yield`).
    pub idle: Option<IdleStrategyConfig>,
    /// Its `--linger-us`: how long an offered message may wait for more to share its datagram (0: none).
    pub linger: Duration,
    /// Its `--wait`: block on the socket when idle (instead of `idle`).
    pub wait: bool,
    /// The one CPU it runs on; `None`: any of this process's.
    pub core: Option<usize>,
    /// It runs under `SCHED_IDLE`: on a core it shares with the cluster's threads, it takes only the time
    /// they leave, and a cluster thread that wakes runs at once instead of waiting out the client's slice.
    /// The client stands in for a process on another host; where it must share a core (2 cores), this keeps
    /// its CPU from delaying the cluster it measures. Its own CPU time is counted either way.
    pub sched_idle: bool,
}

/// One load of a client process.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientLoadSpec {
    /// Messages to have committed, the warm-up's included.
    pub messages: u64,
    /// Of those, the first ones, not recorded.
    pub warmup: u64,
    /// Bytes of each message.
    pub msg_size: usize,
    /// Messages a second, open loop; `None`: closed loop, as fast as the window allows.
    pub rate: Option<f64>,
    /// Messages in flight at most.
    pub window: usize,
    /// The cluster's MTU (the client's datagrams at most).
    pub mtu: usize,
    /// Stop offering after this long and end when what was offered is acknowledged (`--duration`);
    /// `messages` is then a cap.
    pub duration: Option<Duration>,
    /// The child gives up after this long (and the harness kills it a little later).
    pub timeout: Duration,
    /// Where the child writes its figures.
    pub json: PathBuf,
    /// Where it writes its latency distribution (from intended send time), if anywhere.
    pub hgrm: Option<PathBuf>,
    /// Where it writes its latency distribution from actual offer, if anywhere.
    pub service_hgrm: Option<PathBuf>,
}

/// What a client process reported (its `--json`): counts, rate, latency in microseconds.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ClientReport {
    /// Messages offered.
    pub offered: u64,
    /// Messages reported committed.
    pub committed: u64,
    /// Of those, found committed by a resend.
    pub duplicates: u64,
    /// Messages reported not applied.
    pub not_applied: u64,
    /// Times it connected to a leader after the first.
    pub reconnects: u64,
    /// Committed messages a second, from the first offer to the last acknowledgement.
    pub rate: f64,
    /// Seconds from the first offer to the last acknowledgement.
    pub elapsed_s: f64,
    /// Offer (intended, open loop) to commit acknowledgement, after the warm-up.
    pub latency_us: Percentiles,
    /// Actual offer to commit acknowledgement, after the warm-up.
    pub service_latency_us: Percentiles,
    /// The client process's CPU seconds (user + system) from its first offer to its last
    /// acknowledgement; `None` where it could not read `/proc`.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// This (the cluster's) process's CPU seconds over the same time, as the client read them.
    #[serde(default)]
    pub cluster_cpu_s: Option<f64>,
    /// The client's own counts over the same time.
    #[serde(default)]
    pub client_stats: ClientSideCounts,
    /// What the members' client endpoints counted during the run, summed (not in the client's JSON).
    #[serde(skip)]
    pub endpoints: EndpointCounts,
}

impl ClientReport {
    /// The client process's CPU microseconds per committed message, if measured.
    pub fn client_cpu_us_per_msg(&self) -> Option<f64> {
        Some(self.cpu_s? * 1e6 / self.committed.max(1) as f64)
    }

    /// The cluster process's CPU microseconds per committed message, if measured.
    pub fn cluster_cpu_us_per_msg(&self) -> Option<f64> {
        Some(self.cluster_cpu_s? * 1e6 / self.committed.max(1) as f64)
    }
}

/// A client process's own counts over its run (`ClientStats`'s): datagrams and receive calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ClientSideCounts {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Messages sent, resends included.
    pub messages_sent: u64,
    /// Datagrams read.
    pub datagrams_received: u64,
    /// Receive calls (`recvmmsg`), the empty ones included.
    pub receive_calls: u64,
    /// Send calls (`sendmmsg`, or an ask's `sendmsg`); `None` from a client that does not count them.
    #[serde(default)]
    pub send_calls: Option<u64>,
}

/// Every member's client-endpoint counters over one client run, summed (only the leader takes messages;
/// the others answer with a redirect): how well datagrams were filled and read each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndpointCounts {
    /// Client datagrams received.
    pub datagrams_in: i64,
    /// Receive calls that found datagrams.
    pub receive_calls: i64,
    /// Client records received (messages, keep-alives, opens).
    pub records_in: i64,
    /// Egress datagrams sent to the client.
    pub datagrams_out: i64,
    /// Egress records sent (acknowledgements and other answers).
    pub records_out: i64,
    /// Records not appended because the log had no room.
    pub back_pressured: i64,
    /// Gaps found in the session's messages (each a NAK, and resends).
    pub gaps: i64,
}

impl EndpointCounts {
    /// The members' counters' changes from `before` to `after` (the same members, in the same order), summed.
    fn between(before: &[Stats], after: &[Stats]) -> Self {
        let mut sum = Self::default();
        for (before, after) in before.iter().zip(after) {
            let delta = after.since(before);
            let c = delta.clients();
            sum.datagrams_in += c.datagrams_received();
            sum.receive_calls += c.receive_calls();
            sum.records_in += c.records_received();
            sum.datagrams_out += c.egress_datagrams();
            sum.records_out += c.egress_records();
            sum.back_pressured += c.back_pressured();
            sum.gaps += c.gaps();
        }
        sum
    }
}

/// What `qc-client --udp-rtt` reported.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RttReport {
    /// Round trips recorded.
    pub samples: u64,
    /// Datagrams not echoed within a second.
    pub lost: u64,
    /// The round trips, microseconds.
    pub rtt_us: Percentiles,
}

impl ClientProcess {
    /// The client at `built` (a bench's `env!("CARGO_BIN_EXE_qc-client")`: cargo builds a package's
    /// binaries before its benches), else [`next_to_current_exe`](Self::next_to_current_exe)'s; with its
    /// default idle strategy. The error says where it looked.
    pub fn find(built: &str) -> Result<Self, String> {
        let binary = PathBuf::from(built);
        if binary.is_file() {
            return Ok(Self::at(binary));
        }
        Self::next_to_current_exe().ok_or_else(|| {
            format!(
                "qc-client is neither at {built} nor next to this executable's directory; build it with `cargo build \
                 --profile bench -p quorumcast-bench --bin qc-client`"
            )
        })
    }

    /// The client found next to this executable's directory (`target/<profile>/qc-client` for a bench at
    /// `target/<profile>/deps/<bench>-<hash>`), with its default idle strategy; `None` when it is not there.
    pub fn next_to_current_exe() -> Option<Self> {
        let exe = std::env::current_exe().ok()?;
        let binary = exe.parent()?.parent()?.join("qc-client");
        binary.is_file().then(|| Self::at(binary))
    }

    /// The client at `binary`, run with its defaults: its own idle strategy, no linger, no wait, on any of
    /// this process's cores, at normal priority.
    fn at(binary: PathBuf) -> Self {
        Self { binary, idle: None, linger: Duration::ZERO, wait: false, core: None, sched_idle: false }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        // A child inherits the CPU affinity of the thread that forks it, and the harness thread is pinned:
        // left alone, the client would share the harness's core, which spins (the echo) or runs the nodes.
        let cpus = match self.core {
            Some(core) => {
                // SAFETY: cpu_set_t is a plain bit array, valid when zeroed.
                let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: CPU_SET writes one bit inside the set it is given, and ignores a core past its size.
                unsafe { libc::CPU_SET(core, &mut one) };
                Some(one)
            }
            None => crate::hiccup::process_cpus(),
        };
        let sched_idle = self.sched_idle;
        if cpus.is_some() || sched_idle {
            // SAFETY: the closure runs in the child between fork and exec; it makes at most two system calls,
            // which are async-signal-safe, on values copied into the closure, and neither allocates nor takes
            // a lock.
            unsafe {
                command.pre_exec(move || {
                    // Best effort: a child left on the harness's core, or at normal priority, still runs.
                    if let Some(cpus) = &cpus {
                        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpus);
                    }
                    if sched_idle {
                        let param = libc::sched_param { sched_priority: 0 };
                        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                    }
                    Ok(())
                });
            }
        }
        if let Some(idle) = &self.idle {
            command.arg("--idle").arg(idle.to_string());
        }
        if !self.linger.is_zero() {
            command.arg("--linger-us").arg(self.linger.as_micros().to_string());
        }
        if self.wait {
            command.arg("--wait");
        }
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    /// Runs `load` from a client process against `cluster`'s client endpoints, polling the cluster on
    /// this (the harness) thread until the child exits; its report, or an error with its output when it
    /// failed (a message not committed, a timeout) or an agent of the cluster failed.
    pub fn load(&self, cluster: &mut LoadCluster, load: &ClientLoadSpec) -> Result<ClientReport, SweepError> {
        let mut command = self.command();
        for (id, addr) in cluster.client_endpoints() {
            command.arg("--member").arg(format!("{id}={addr}"));
        }
        if let Some(path) = cluster.client_key_file() {
            command.arg("--client-key-file").arg(path);
        }
        command
            .args(["--offer", &load.messages.to_string(), "--warmup", &load.warmup.to_string()])
            .args(["--msg-size", &load.msg_size.to_string(), "--mtu", &load.mtu.to_string()])
            .args(["--window", &load.window.clamp(1, MAX_WINDOW).to_string()])
            .args(["--timeout", &format!("{:.3}", load.timeout.as_secs_f64())])
            .arg("--json")
            .arg(&load.json)
            .args(["--cluster-pid", &std::process::id().to_string()]);
        if let Some(duration) = load.duration {
            command.args(["--duration", &format!("{:.3}", duration.as_secs_f64())]);
        }
        if let Some(rate) = load.rate {
            command.args(["--rate", &format!("{rate:.3}")]);
        }
        if let Some(path) = &load.hgrm {
            command.arg("--hgrm").arg(path);
        }
        if let Some(path) = &load.service_hgrm {
            command.arg("--service-hgrm").arg(path);
        }
        let _ = std::fs::remove_file(&load.json);
        if let Some(dir) = load.json.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let before = cluster.stats();
        run_child(command, load.timeout + SETTLE_TIMEOUT, |check| {
            if check {
                cluster.failure()?;
            }
            cluster.cycle(|_| {});
            Ok(())
        })?;
        // The followers apply the client's last messages after the leader acknowledged them.
        cluster.drain(SETTLE_TIMEOUT)?;
        let mut report: ClientReport = read_json(&load.json)?;
        report.endpoints = EndpointCounts::between(&before, &cluster.stats());
        Ok(report)
    }

    /// The UDP round trip between this process and a client process: with `cluster`'s agent threads
    /// parked, `qc-client --udp-rtt` ping-pongs `samples` datagrams of `msg_size` bytes (after `warmup`
    /// unrecorded ones) with an echo socket this (the harness) thread runs, spinning. `json` is where the
    /// child writes its figures.
    pub fn udp_rtt(
        &self,
        cluster: &mut LoadCluster,
        samples: u64,
        warmup: u64,
        msg_size: usize,
        json: &Path,
    ) -> Result<RttReport, SweepError> {
        let echo = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        echo.set_nonblocking(true)?;
        let addr = echo.local_addr()?;
        // The echo spins on this (pinned) thread's core: a client pinned to the same core would take turns
        // with it a scheduler slice at a time, not measure a round trip; it runs on any other core then.
        // SAFETY: sched_getcpu takes no arguments and only reads which CPU the calling thread is on.
        let here = usize::try_from(unsafe { libc::sched_getcpu() }).ok();
        let floor_client = Self { core: self.core.filter(|&core| Some(core) != here), ..self.clone() };
        let mut command = floor_client.command();
        command
            .arg("--udp-rtt")
            .arg(addr.to_string())
            .args(["--samples", &samples.to_string(), "--warmup", &warmup.to_string()])
            .args(["--msg-size", &msg_size.to_string()])
            .arg("--json")
            .arg(json);
        let _ = std::fs::remove_file(json);
        let mut buffer = vec![0u8; 65_536];
        cluster.paused(|| {
            run_child(command, SETTLE_TIMEOUT, |_| {
                echo_pending(&echo, &mut buffer)?;
                std::hint::spin_loop();
                Ok(())
            })
        })?;
        read_json(json)
    }
}

/// Echoes every datagram waiting on `socket` back to its sender.
fn echo_pending(socket: &UdpSocket, buffer: &mut [u8]) -> Result<(), SweepError> {
    loop {
        match socket.recv_from(buffer) {
            Ok((n, from)) => echo_one(socket, &buffer[..n], from)?,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(SweepError::Io(e)),
        }
    }
}

fn echo_one(socket: &UdpSocket, datagram: &[u8], to: SocketAddr) -> Result<(), SweepError> {
    match socket.send_to(datagram, to) {
        // A full send buffer drops this echo: the client counts it lost.
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(SweepError::Io(e)),
    }
}

/// Reads a child's `--json` file.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, SweepError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SweepError::Cluster(format!("the client wrote no {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| SweepError::Cluster(format!("{}: {e}", path.display())))
}

/// Collects a child's output stream on a thread of its own (it blocks on the pipe, never spins).
fn collect(stream: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stream) = stream {
            let _ = stream.read_to_string(&mut text);
        }
        text
    })
}

/// Kills the child if it is still running when dropped (an error of the harness, a panic).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Spawns `command` and calls `cycle` until it exits (with `true` every [`CHECK_INTERVAL`]); kills it
/// after `timeout`. Its stdout, or an error with its output when it exited with a failure.
fn run_child(
    mut command: Command,
    timeout: Duration,
    mut cycle: impl FnMut(bool) -> Result<(), SweepError>,
) -> Result<String, SweepError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = Reaped(command.spawn().map_err(|e| SweepError::Cluster(format!("cannot start {program}: {e}")))?);
    let (stdout, stderr) = (collect(child.0.stdout.take()), collect(child.0.stderr.take()));
    let start = Instant::now();
    let mut next_check = start;
    let status = loop {
        let now = Instant::now();
        let check = now >= next_check;
        if check {
            if let Some(status) = child.0.try_wait()? {
                break Some(status);
            }
            if now > start + timeout {
                break None;
            }
            next_check = now + CHECK_INTERVAL;
        }
        cycle(check)?;
    };
    drop(child); // kills it on a timeout
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) if status.success() => Ok(stdout),
        Some(status) => Err(SweepError::Cluster(format!(
            "{program} exited with {status}: {}{}",
            stderr.trim(),
            if stdout.is_empty() { String::new() } else { format!("; stdout: {}", stdout.trim()) }
        ))),
        None => Err(SweepError::Cluster(format!(
            "{program} did not finish within {} s; stderr: {}",
            timeout.as_secs(),
            stderr.trim()
        ))),
    }
}

/// What one utilisation point driven from a client process found.
#[derive(Debug)]
pub struct ClientPoint {
    /// The target utilisation.
    pub rho: f64,
    /// The paced offered load, messages per second.
    pub lambda: f64,
    /// Messages of the point, recorded.
    pub messages: u64,
    /// Messages before them, not recorded.
    pub warmup: u64,
    /// The client's report.
    pub report: ClientReport,
    /// Each agent thread's duty-cycle lengths during the point.
    pub agents: Vec<AgentCycles>,
}

/// The warm-up of a client point of `messages`: a tenth, at least one message.
pub fn warmup_of(messages: u64) -> u64 {
    (messages / 10).max(1)
}

/// A utilisation point with its load from a client process: `lambda = rho x mu` messages a second of
/// `msg` bytes, open loop, as many as [`super::measure::run_point`] would offer (the first tenth not
/// recorded), latency from each message's intended send time to its commit acknowledgement at the client.
/// `json` is where the child writes its figures; `hgrm`, where it writes its two distributions (from
/// intended send time, from actual offer), if anywhere.
#[allow(clippy::too_many_arguments)]
pub fn client_point(
    cluster: &mut LoadCluster,
    client: &ClientProcess,
    rho: f64,
    mu: f64,
    (msg, mtu): (usize, usize),
    timings: &Timings,
    json: PathBuf,
    hgrm: Option<(PathBuf, PathBuf)>,
) -> Result<ClientPoint, SweepError> {
    let lambda = rho * mu;
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(SweepError::Config(format!("rho {rho} x mu {mu} is no load: mu must be positive")));
    }
    let messages = ((lambda * timings.point.as_secs_f64()).ceil() as u64).clamp(1, timings.point_messages.max(1));
    let warmup = warmup_of(messages);
    let (hgrm, service_hgrm) = hgrm.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    let load = ClientLoadSpec {
        messages: messages + warmup,
        warmup,
        msg_size: msg,
        rate: Some(lambda),
        window: MAX_WINDOW,
        mtu,
        duration: None,
        timeout: timings.point + SETTLE_TIMEOUT,
        json,
        hgrm,
        service_hgrm,
    };
    let before = cluster.stats();
    let report = client.load(cluster, &load)?;
    let deltas: Vec<Stats> = cluster.stats().iter().zip(&before).map(|(after, before)| after.since(before)).collect();
    Ok(ClientPoint { rho, lambda, messages, warmup, report, agents: agent_cycles(&deltas) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_report_reads_qc_client_s_json() {
        let p = r#"{"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0, "mean": 1.5, "stddev": 0.5}"#;
        let text = format!(
            r#"{{"session_id": 7, "messages": 10, "offered": 10, "committed": 10, "duplicates": 0,
                "not_applied": 0, "responses": 0,
                "bad_responses": 0, "reported_twice": 0, "reconnects": 0, "rate": 1000.0, "elapsed_s": 0.01,
                "msg_size": 128, "duration_s": null, "rate_offered": null, "window": 64, "warmup": 0,
                "latency_us": {p}, "service_latency_us": {p}}}"#
        );
        let report: ClientReport = serde_json::from_str(&text).unwrap();
        assert_eq!((report.committed, report.rate), (10, 1000.0));
        assert_eq!((report.latency_us.p50, report.service_latency_us.p999), (1.0, 4.0));
        let rtt: RttReport =
            serde_json::from_str(&format!(r#"{{"mode": "udp-rtt", "samples": 3, "lost": 0, "rtt_us": {p}}}"#)).unwrap();
        assert_eq!((rtt.samples, rtt.rtt_us.p99), (3, 3.0));
    }

    #[test]
    fn the_warm_up_is_a_tenth() {
        assert_eq!(warmup_of(0), 1);
        assert_eq!(warmup_of(1000), 100);
    }
}
