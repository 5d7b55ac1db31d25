//! `qc-node`: runs one quorumcast node from a TOML file, so that a cluster can span processes and hosts.
//!
//! ```text
//! qc-node --config tuning/cluster/node0.toml [--profile tuning/profiles/balanced.toml]...
//!         [--directory DIR] [--data-dir DIR] [--offer N] [--msg-size BYTES] [--expect N] [--timeout SECS]
//!         [--in-flight K] [--linger-ms MS] [--print-counters] [--applied-log FILE]
//! ```
//!
//! The node file says who the node is (id, leader, members, channel, timers); each `--profile` is laid over
//! it in order and wins where both set a key (see `quorumcast::NodeFile` and `tuning/README.md`).
//!
//! The main thread is the application: it offers (`--offer N`: while this node leads, N generated
//! messages of `--msg-size` bytes, each led by its sequence number, retried while the log is
//! back-pressured, at most `--rate` a second; a node that does not lead offers nothing until it does), applies
//! committed entries into a running FNV-1a 64 digest (of each entry's length, as 4 little-endian bytes,
//! then its bytes), and in invoker mode runs the node's agents itself. It idles with the
//! `agents.application` idle strategy.
//!
//! With `--expect N` it prints `applied N digest <16 hex digits>` on stdout once N entries are applied, and
//! exits 0. A leader first waits until every follower has acknowledged what it applied (or until it no longer
//! leads: the followers that applied everything have gone) and then stays up
//! `--linger-ms` more, so that the followers learn the final commit position (resent every
//! `timers.commit_heartbeat`) before the leader goes away. Without `--expect` it runs until SIGINT or
//! SIGTERM. Either way it closes the node, which removes the node directory.
//!
//! `qc-node`'s state machine is the digest, which it does not snapshot: a node that restarts with its
//! recorded log (the default storage) replays it from position 0 and goes on from there; one without it
//! joins the log at position 0, within the leader's retained log.
//!
//! Remote clients (`[clients] enabled = true` in the node file; see `qc-client`) are served too: each
//! client message is applied into the digest like any entry, answered with its correlation id, and,
//! with `--applied-log FILE`, written there as `<session> <correlation id>`, so that a test can check
//! every member applied each exactly once.
//!
//! With `--checkpoint K` it also prints `applied N digest <hex>` each time N reaches a multiple of K, so
//! runs of different members can be compared entry by entry. Each change of role, term or leader is
//! printed on stdout as `role <role> term <term> leader <id or ->`.
//!
//! Start-up facts (layout, warnings) go to stderr; stdout carries only the `applied` and `role` lines.
//! Exit status: 0 on success or on a signal, 1 on a failure (start, agents, timeout), 2 on bad arguments.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use quorumcast::NodeFile;
use quorumcast::{LocalClient, LocalOfferError, Node, NodeConfig};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_driver::agent::idle::{set_timer_slack, Idle, IdleStrategyConfig};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::shm::stats::TYPE_ACK_POSITION;
use quorumcast_testkit::{fill_numbered, Fnv1a64};

/// Most committed fragments handed over per application duty cycle.
const FRAGMENT_LIMIT: usize = 1024;
/// Most messages offered per application duty cycle, so that applying keeps pace with offering.
const OFFER_BURST: u64 = 256;
/// How often an idle application thread looks for failed agents.
const FAILURE_CHECK_INTERVAL: Duration = Duration::from_millis(20);

/// Command line of qc-node.
#[derive(Debug, Parser)]
#[command(name = "qc-node", version, about = "Run one quorumcast node from a TOML file")]
struct Args {
    /// The node file: identity, membership, channel and timers.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// A profile laid over the node file (threading, idle strategies, cores); repeatable, the last wins.
    #[arg(long, value_name = "FILE")]
    profile: Vec<PathBuf>,
    /// Overrides the node directory of the files.
    #[arg(long, value_name = "DIR")]
    directory: Option<PathBuf>,
    /// Overrides the data directory of the files (the vote, the recorded log, the snapshots).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// On the leader: offer N generated messages.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offer: u64,
    /// Bytes of each generated message (at least 8: its sequence number leads).
    #[arg(long, value_name = "BYTES", default_value_t = 64, value_parser = clap::value_parser!(u64).range(8..=1 << 20))]
    msg_size: u64,
    /// On the leader: at most K messages offered and not yet applied (0: no limit). With 1, the run time
    /// over N is the mean commit latency: offer, replicate, quorum acknowledgement, apply.
    #[arg(long, value_name = "K", default_value_t = 0)]
    in_flight: u64,
    /// Exit 0 after applying N entries, printing `applied N digest <hex>`.
    #[arg(long, value_name = "N")]
    expect: Option<u64>,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Leader with --expect: milliseconds to stay up after every follower acknowledged.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    linger_ms: u64,
    /// Print the node's non-zero counters before closing it.
    #[arg(long)]
    print_counters: bool,
    /// Offer at most this many messages per second (0: as fast as the log takes them).
    #[arg(long, value_name = "MSGS", default_value_t = 0)]
    rate: u64,
    /// Print `applied N digest <hex>` on stdout each time N, the entries applied, reaches a multiple of K.
    #[arg(long, value_name = "K")]
    checkpoint: Option<u64>,
    /// Write `<session> <correlation id>` here for each remote client message applied, in log order.
    #[arg(long, value_name = "FILE")]
    applied_log: Option<PathBuf>,
}

/// Set by the SIGINT/SIGTERM handler; the main loop polls it.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the SIGINT and SIGTERM handler.
fn install_signal_handlers() -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `action` is zero-initialised and then fully set up (handler, empty mask, flags) before it
        // is passed by reference to sigaction, which only reads it; the handler is an `extern "C"` function
        // with the signature sigaction expects that does nothing but an atomic store (async-signal-safe).
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Prints the node's log lines (bad input, refused peers) to standard error, as its own lines are.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("qc-node: {}: {}", record.level().as_str().to_lowercase(), record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLog = StderrLog;

fn main() -> ExitCode {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("qc-node: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("qc-node: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why qc-node stops with a non-zero status.
enum Failure {
    /// Bad arguments or files (status 2).
    Usage(String),
    /// The node failed to start or run (status 1).
    Run(String),
}

/// The node file with every profile laid over it, and the command-line overrides.
fn load(args: &Args) -> Result<(NodeConfig, NodeFile), Failure> {
    let mut file = NodeFile::load(&args.config).map_err(|e| Failure::Usage(e.to_string()))?;
    for profile in &args.profile {
        file = file.merge(NodeFile::load(profile).map_err(|e| Failure::Usage(e.to_string()))?);
    }
    let mut config = file.clone().into_config().map_err(|e| {
        let files: Vec<String> =
            std::iter::once(&args.config).chain(&args.profile).map(|p| p.display().to_string()).collect();
        Failure::Usage(format!("{}: {e}", files.join(" with profile ")))
    })?;
    if let Some(directory) = &args.directory {
        config.directory = Some(directory.clone());
    }
    if let Some(data_dir) = &args.data_dir {
        config.data_dir = Some(data_dir.clone());
    }
    Ok((config, file))
}

fn run(args: &Args) -> Result<(), Failure> {
    let (config, file) = load(args)?;
    let app_idle = file.application_idle();
    let invoker = config.threading.invokes();
    describe(&config, &file);
    install_signal_handlers().map_err(|e| Failure::Run(format!("cannot install signal handlers: {e}")))?;
    if app_idle.sleeps() {
        // As the agent runner does for sleeping agent threads: park for the period asked, not 50 us more.
        if let Err(e) = set_timer_slack(Duration::from_nanos(1)) {
            eprintln!("qc-node: warning: could not lower the application thread's timer slack: {e}");
        }
    }
    if let Some(core) = file.application_core() {
        if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
            eprintln!("qc-node: warning: could not pin the application thread to core {core}");
        }
    }
    let node = Node::start(config).map_err(|e| Failure::Run(format!("cannot start the node: {e}")))?;
    for warning in node.warnings() {
        eprintln!("qc-node: warning: {warning}");
    }
    eprintln!(
        "qc-node: node {} started as {}, directory {}",
        node.id(),
        node.role(),
        node.directory().map_or_else(|| "-".into(), |d| d.display().to_string())
    );
    let mut node = node;
    node.on_role_change(|change| {
        let leader = change.leader.map_or_else(|| "-".to_string(), |id| id.to_string());
        println!("role {} term {} leader {leader}", change.role, change.leadership_term_id);
    });
    let mut app = App::new(node, args, invoker, app_idle)?;
    let outcome = app.run();
    if args.print_counters {
        print_counters(&app.node);
    }
    let App { node, .. } = app;
    let closed = node.close().map_err(|e| Failure::Run(format!("closing the node: {e}")));
    outcome.and(closed)
}

/// What the application thread does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Offering and applying until `--expect` entries are applied.
    Applying,
    /// Leader: applied everything; waiting for every follower's acknowledgement.
    AwaitingAcks,
    /// Leader: acknowledged; staying up until the instant so that followers learn the commit position.
    Lingering(Instant),
}

/// The application thread of qc-node: offers, applies, and in invoker mode runs the agents.
struct App {
    node: Node,
    invoker: bool,
    idle: Idle,
    offers: Offers,
    applied: Applied,
    /// On the leader, the followers whose acknowledgements it records.
    followers: Vec<i32>,
    timers: Timers,
}

/// The generated messages this node offers, and the pace it offers them at.
///
/// Invariant: `offered <= to_offer`, and `offered` never passes the applied count plus `in_flight` nor (with
/// `--rate`) what the rate allows since `rate_base`.
struct Offers {
    client: LocalClient,
    /// The message buffer, refilled with each message's number before it is offered.
    message: Vec<u8>,
    to_offer: u64,
    offered: u64,
    in_flight: u64,
    /// With `--rate`: nanoseconds between offers, and when the rate allows the next one.
    offer_interval_ns: u64,
    /// The rate counts from here: when this node last found it did not lead, and what it had offered.
    rate_base: (Instant, u64),
}

/// What this node applied: the count, the digest over every entry in order, and where it says so.
///
/// Invariant: `digest` covers exactly the first `count` entries (each as its length, then its bytes).
struct Applied {
    expect: Option<u64>,
    count: u64,
    digest: Fnv1a64,
    checkpoint: Option<u64>,
    /// With `--applied-log`: where each client message applied is written.
    log_file: Option<std::io::BufWriter<std::fs::File>>,
}

/// The application thread's clock: when it gives up, how long a leader lingers, when it next looks for
/// agent failures.
struct Timers {
    deadline: Option<Instant>,
    linger: Duration,
    next_failure_check: Instant,
}

impl App {
    fn new(node: Node, args: &Args, invoker: bool, idle: IdleStrategyConfig) -> Result<Self, Failure> {
        let idle = Idle::new(&idle).map_err(|e| Failure::Usage(e.to_string()))?;
        let deadline = match args.timeout {
            Some(secs) if secs.is_finite() && secs > 0.0 => Some(Instant::now() + Duration::from_secs_f64(secs)),
            Some(secs) => return Err(Failure::Usage(format!("--timeout {secs} must be a positive number of seconds"))),
            None => None,
        };
        let followers =
            node.stats().iter().filter(|c| c.type_id == TYPE_ACK_POSITION).map(|c| c.owner_id as i32).collect();
        let applied_log = match &args.applied_log {
            Some(path) => Some(std::io::BufWriter::new(
                std::fs::File::create(path)
                    .map_err(|e| Failure::Usage(format!("--applied-log {}: {e}", path.display())))?,
            )),
            None => None,
        };
        Ok(Self {
            offers: Offers {
                client: node.client(),
                message: vec![0; args.msg_size as usize],
                to_offer: args.offer,
                offered: 0,
                in_flight: if args.in_flight == 0 { u64::MAX } else { args.in_flight },
                offer_interval_ns: if args.rate == 0 { 0 } else { 1_000_000_000 / args.rate.max(1) },
                rate_base: (Instant::now(), 0),
            },
            applied: Applied {
                expect: args.expect,
                count: 0,
                digest: Fnv1a64::new(),
                checkpoint: args.checkpoint.filter(|&k| k > 0),
                log_file: applied_log,
            },
            invoker,
            node,
            idle,
            followers,
            timers: Timers {
                deadline,
                linger: Duration::from_millis(args.linger_ms),
                next_failure_check: Instant::now(),
            },
        })
    }

    /// Runs duty cycles until done, a signal, a failure or the timeout.
    fn run(&mut self) -> Result<(), Failure> {
        let mut phase = Phase::Applying;
        let started = Instant::now();
        loop {
            if STOP.load(Ordering::Relaxed) {
                eprintln!("qc-node: stopping on a signal after applying {} entries", self.applied.count);
                return Ok(());
            }
            let mut work = 0;
            if self.invoker {
                work += self.node.invoke().map_err(|e| Failure::Run(e.to_string()))?;
            }
            work += self.offers.offer(self.applied.count)?;
            work += self.applied.apply(&mut self.node);
            phase = match phase {
                Phase::Applying if self.applied.expect.is_some_and(|n| self.applied.count >= n) => {
                    println!("applied {} digest {:016x}", self.applied.count, self.applied.digest.value());
                    let secs = started.elapsed().as_secs_f64();
                    eprintln!(
                        "qc-node: applied {} entries in {secs:.3} s ({:.0}/s, {:.1} us each)",
                        self.applied.count,
                        self.applied.count as f64 / secs,
                        secs * 1e6 / self.applied.count.max(1) as f64
                    );
                    if self.node.role() != Role::Leader {
                        return Ok(());
                    }
                    Phase::AwaitingAcks
                }
                // Followers that applied everything exit, and one may go before its last acknowledgement
                // left: this member then loses its quorum and stops leading, and nobody is left to wait for.
                Phase::AwaitingAcks if self.followers_acknowledged() || self.node.role() != Role::Leader => {
                    Phase::Lingering(Instant::now() + self.timers.linger)
                }
                Phase::Lingering(until) if Instant::now() >= until => return Ok(()),
                phase => phase,
            };
            if work == 0 {
                if let Some(log) = self.applied.log_file.as_mut() {
                    log.flush().map_err(|e| Failure::Run(format!("--applied-log: {e}")))?;
                }
                self.check(phase)?;
            }
            self.idle.idle(work);
        }
    }

    /// True when every follower has acknowledged at least what this leader applied.
    fn followers_acknowledged(&self) -> bool {
        let applied = self.node.applied_position();
        let stats = self.node.stats();
        self.followers.iter().all(|&member| stats.ack_position(member).is_some_and(|ack| ack >= applied))
    }

    /// On an idle cycle: the timeout, and now and then the agents' failures.
    fn check(&mut self, phase: Phase) -> Result<(), Failure> {
        let now = Instant::now();
        if self.timers.deadline.is_some_and(|d| now >= d) {
            let waiting = match phase {
                Phase::AwaitingAcks => format!(", waiting for the followers' acknowledgements ({})", self.acks()),
                _ => String::new(),
            };
            return Err(Failure::Run(format!(
                "timed out: offered {} of {}, applied {}{}, commit position {}{waiting}",
                self.offers.offered,
                self.offers.to_offer,
                self.applied.count,
                self.applied.expect.map_or_else(String::new, |n| format!(" of {n}")),
                self.node.commit_position(),
            )));
        }
        if now >= self.timers.next_failure_check {
            self.timers.next_failure_check = now + FAILURE_CHECK_INTERVAL;
            let failures = self.node.failures();
            if !failures.is_empty() {
                let text: Vec<String> = failures.iter().map(ToString::to_string).collect();
                return Err(Failure::Run(format!("agents failed: {}", text.join("; "))));
            }
        }
        Ok(())
    }

    fn acks(&self) -> String {
        let stats = self.node.stats();
        let acks: Vec<String> = self
            .followers
            .iter()
            .map(|&m| format!("ack position of member {m}: {}", stats.ack_position(m).unwrap_or(-1)))
            .collect();
        acks.join(", ")
    }
}

impl Offers {
    /// Offers up to a burst of the remaining generated messages; returns how many were taken. `applied`: the
    /// entries applied so far, which with `in_flight` bounds the offers.
    fn offer(&mut self, applied: u64) -> Result<usize, Failure> {
        let window_end = applied.saturating_add(self.in_flight);
        let mut end = self.to_offer.min(self.offered + OFFER_BURST).min(window_end);
        let (since, base) = self.rate_base;
        if let Some(allowed) = (since.elapsed().as_nanos() as u64).checked_div(self.offer_interval_ns) {
            end = end.min(base + allowed);
        }
        let start = self.offered;
        while self.offered < end {
            fill_numbered(&mut self.message, self.offered);
            match self.client.offer(&self.message) {
                Ok(_) => self.offered += 1,
                Err(LocalOfferError::BackPressured) => break,
                // Not the leader (yet, or any more): offer again once this node leads, at the rate from then.
                Err(LocalOfferError::NotLeader { .. }) => {
                    self.rate_base = (Instant::now(), self.offered);
                    break;
                }
                Err(e) => return Err(Failure::Run(format!("offer {}: {e}", self.offered))),
            }
        }
        Ok((self.offered - start) as usize)
    }
}

impl Applied {
    /// Applies committed entries into the digest; returns the fragments read. A remote client's message
    /// is answered with its correlation id (8 bytes, little-endian), and written to `--applied-log`.
    fn apply(&mut self, node: &mut Node) -> usize {
        let (digest, applied, checkpoint) = (&mut self.digest, &mut self.count, self.checkpoint);
        let applied_log = &mut self.log_file;
        node.poll_service(FRAGMENT_LIMIT, |entry, response| {
            if let Some(client) = entry.client {
                response.extend_from_slice(&client.correlation_id.to_le_bytes());
                if let Some(log) = applied_log.as_mut() {
                    let _ = writeln!(log, "{} {}", client.session_id, client.correlation_id);
                }
            }
            let entry = entry.payload;
            digest.update(&(entry.len() as u32).to_le_bytes());
            digest.update(entry);
            *applied += 1;
            if checkpoint.is_some_and(|k| *applied % k == 0) {
                println!("applied {} digest {:016x}", *applied, digest.value());
            }
        })
    }
}

/// Prints the node's identity, channel and agent layout to stderr.
fn describe(config: &NodeConfig, file: &NodeFile) {
    let members: Vec<String> = config.members.iter().map(|m| format!("{}={}", m.id, m.log)).collect();
    let role = match config.leader {
        Some(leader) if leader == config.id => "the preferred first leader".to_string(),
        Some(leader) => format!("member {leader} preferred as the first leader"),
        None => "no preferred first leader".to_string(),
    };
    eprintln!("qc-node: node {} ({role}), members {}", config.id, members.join(" "));
    let c = &config.channel;
    eprintln!(
        "qc-node: channel mtu {}, term length {}, send mode {}, window {}, SO_SNDBUF {}, SO_RCVBUF {}",
        c.mtu,
        c.term_length,
        c.send_mode,
        c.receiver_window,
        c.socket.send_buffer.map_or_else(|| "default".into(), |b| b.to_string()),
        c.socket.receive_buffer.map_or_else(|| "default".into(), |b| b.to_string()),
    );
    if config.clients.enabled {
        let me = config.members.iter().find(|m| m.id == config.id).map_or_else(|| "-".into(), |m| m.client.to_string());
        let c = &config.clients;
        eprintln!(
            "qc-node: clients at {me}: max_sessions {}, session_timeout {:?}, window {}, allow {}",
            c.max_sessions,
            c.session_timeout,
            c.window,
            if c.allow.is_empty() {
                "any".into()
            } else {
                c.allow.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
            }
        );
    }
    for line in layout_lines(config, file) {
        eprintln!("qc-node: {line}");
    }
}

/// The threads the configuration asks for, by the layout rules of `quorumcast_driver::agent::AgentLayout`: a thread
/// of several agents takes the first one's idle strategy and core.
fn layout_lines(config: &NodeConfig, file: &NodeFile) -> Vec<String> {
    const NAMES: [&str; 3] = ["consensus", "sender", "receiver"];
    let thread = |agents: &[usize]| {
        let first = agents[0];
        let names: Vec<&str> = agents.iter().map(|&a| NAMES[a]).collect();
        let idle = config.idle.iter().nth(first).expect("an agent");
        let core = *config.cores.iter().nth(first).expect("an agent");
        format!("thread {}: idle {idle}, core {}", names.join("+"), core_text(core))
    };
    let mut lines = vec![format!("layout {}", config.threading)];
    match config.threading {
        ThreadingMode::Dedicated => lines.extend((0..3).map(|a| thread(&[a]))),
        ThreadingMode::SharedNetwork => lines.extend([thread(&[0]), thread(&[1, 2])]),
        ThreadingMode::Shared => lines.push(thread(&[0, 1, 2])),
        ThreadingMode::Invoker => {}
        ThreadingMode::SharedNetworkInvoker => lines.push(thread(&[1, 2])),
    }
    let runs = match config.threading {
        ThreadingMode::Invoker => " and consensus+sender+receiver",
        ThreadingMode::SharedNetworkInvoker => " and consensus",
        _ => "",
    };
    lines.push(format!(
        "application thread{runs}: idle {}, core {}",
        file.application_idle(),
        core_text(file.application_core())
    ));
    lines
}

fn core_text(core: Option<usize>) -> String {
    core.map_or_else(|| "any".into(), |c| c.to_string())
}

/// Prints every non-zero counter of the node to stderr.
fn print_counters(node: &Node) {
    node.counters().reader().for_each(|id, _, label, value| {
        if value != 0 {
            eprintln!("qc-node: counter {id:>3} {value:>14} {label}");
        }
    });
}
