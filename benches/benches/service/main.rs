//! Service-interface benchmark (issue 53, "Measured, in benchmarks"): replicated timers, pushes to remote
//! sessions, and the cost of the `StateMachine`/`Cluster` callbacks on the apply path, on one 3-node
//! cluster over UDP loopback in this process (the client bench's `LoadCluster`, `Layout::for_host`), each
//! figure beside a floor or peer measured in the same run.
//!
//! `cargo bench --bench service` (about 70 s on 2 cores, once built), `cargo bench --bench service --
//! --quick` (a smoke run, about 15 s), `-- --help` for the options.
//!
//! The harness applies every member's committed entries to a service of this file through
//! `Node::poll_state` (`LoadCluster::set_services`), so every figure goes through the service interface
//! as an application's would. The services are swapped between the parts; the cluster stays up.
//!
//! 1. **Timer lateness.** [`TimerService`] keeps one timer running: at a session's first open it schedules
//!    timer 1 for `time() + period`, and each time it fires, again for `time() + period` (cluster time:
//!    the same deadlines on every member). On the leader (`Cluster::role`, which only says where to
//!    measure, never what the state becomes), `on_timer` records the leader's wall clock (epoch ns) minus
//!    the deadline: lateness, both on this host's clock. It also records how late the entry that fired it
//!    was stamped (its cluster time minus the deadline): the part of the lateness before the entry was in
//!    the log; the rest is commit and apply.
//!    First the capacity: `qc-client` closed loop (4096 in flight), committed msg/s. Then, with the
//!    timers running, `qc-client --rate rho x capacity` at each rho (the client bench's open-loop points),
//!    whose commit latency (intended send time to commit acknowledgement at the client) stands beside the
//!    lateness of the timers that fired meanwhile. The UDP round trip between two processes is the floor
//!    of the commit latency, as in the client bench.
//!    Target: p99 lateness <= the same point's commit p99 + one tick interval ([`TICK_INTERVAL`], 50 ms:
//!    the leader's clock keeper appends a tick at its first duty cycle past the deadline, and again no
//!    sooner than 50 ms later if that tick was not applied; `commit_heartbeat` only resends an unchanged
//!    commit position to the followers, and does not gate the leader's apply, so it is not the interval
//!    that bounds a timer on the leader).
//! 2. **Pushes.** [`PushService`](pushes::PushService): a session that sends `S` subscribes; each `P` message (128 B, its
//!    number `k` in bytes 1..9) is pushed as is to every subscriber (`Cluster::push`) and answered with
//!    `k` (`Cluster::respond`). On the leader, `on_message` stores its wall clock for `k` before it pushes.
//!    A client thread of this process runs one publisher and N subscribers, each a `ClusterClient` over
//!    UDP with its own socket (remote clients; the subscribers bind 127.0.0.1 and the publisher
//!    127.0.1.1, so that 256 subscribers stay within `max_sessions_per_address` and per /24), polling
//!    them all in one loop and idling with `backoff`. Delivery latency: a subscriber's wall clock at
//!    `Event::Pushed` minus the leader's at the push. Response latency: the publisher's intended send
//!    time to its `Event::Committed` with the response (the response path of the same run).
//!    Per N: first saturated (the publisher offers while fewer than 4096 messages are in flight and no
//!    subscriber is more than [`PUSH_LAG`] pushes behind, so no session reaches `max_push_backlog`, nor all
//!    together more than [`PUSH_LAG_TOTAL`], so the leader's egress ring does not overflow):
//!    pushes delivered per second; then paced at half that rate: delivery and response latency. Beside
//!    them, this process's CPU microseconds per push delivered (the cluster and the clients: one
//!    process), the members' egress datagrams per push, and the subscribers' receive calls per push.
//! 3. **Apply-path cost.** [`PlainService`] implements only `apply`; [`InterfaceService`] implements
//!    `on_message` and reads `Cluster::time` and `Cluster::response` for every entry (it writes no
//!    response: a written response is egress work, the response path of part 2, not the interface's
//!    cost). `qc-client` closed loop against each, interleaved A B A B (A B A B A B in a full run), on the
//!    same cluster: committed msg/s, and the cluster process's CPU per message. Target: B's mean rate at
//!    least 0.95 of A's.
//!
//! Thread layout: the client bench's (`Layout::for_host`): on 2 cores the harness thread (the leader's
//! consensus agent and both followers, invoked; backoff idle) on core 0 and the leader's Sender (backoff,
//! no yields, as the client bench's `SENDER_IDLE_BESIDE_CLIENT`) on core 1, where `qc-client` runs
//! (`sched_yield` idle) and so does the push clients' thread (backoff): never more busy threads than
//! cores.
//!
//! Results: a table, and `target/service/<UTC timestamp>/summary.json` (`target/service/latest` points at
//! the newest), with each `qc-client` run's JSON beside it.

mod apply;
mod pushes;
mod timers;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use hdrhistogram::Histogram;
use quorumcast::StateMachine;
use quorumcast_bench::bench::{host, new_histogram, si, target_dir};
use quorumcast_bench::report::{self, Percentiles, NS_PER_US};
use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_bench::sweep::profile::Timings;
use quorumcast_bench::sweep::remote::{self, ClientLoadSpec, ClientProcess, ClientReport, RttReport, MAX_WINDOW};
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use serde_json::{json, Value};

use apply::{ApplyCost, ApplyRun, InterfaceService, PlainService};
use pushes::{push_run, PushPhase, PushRun};
use timers::{TimerPoint, TimerRecord, TimerService};

/// Message length of every client message and push.
const MESSAGE: usize = 128;
/// The log channel's MTU.
const MTU: usize = 1408;
/// The leader's least time between two ticks for one deadline (`TICK_INTERVAL_NS` of
/// `src/node/sessions/clock.rs`): a timer whose tick was appended but not applied fires at most this much
/// later than its first tick would have made it. The interval of the lateness target.
const TICK_INTERVAL: Duration = Duration::from_millis(50);
/// Apply-path cost: the interface's committed msg/s over the plain `apply` path's, at least.
const APPLY_TARGET: f64 = 0.95;
/// A subscriber is never more than this many pushes behind the publisher's offers: 256 pushes of about
/// 150 B are 38 KB, well inside `[service] max_push_backlog` (256 KiB), so no session closes for backlog.
const PUSH_LAG: u64 = 256;
/// Nor are all subscribers together more than this many pushes behind: the leader's egress ring (from its
/// reader to its client endpoint) holds 1 MiB, and a push it has no room for is dropped and sent again only
/// when its client asks after the gap (the first smoke run, with 256 per subscriber, filled it at 256
/// subscribers and delivered 416 pushes/s, each about 110 ms late). 2048 pushes of about 150 B are 300 KB.
const PUSH_LAG_TOTAL: u64 = 2048;
/// Publisher messages (and so push numbers) a push run can make at most: the leader's push times are
/// kept by number in an array this long.
const PUSH_SLOTS: usize = 1 << 21;
/// The Sender's idle strategy beside the client process (the client bench's `SENDER_IDLE_BESIDE_CLIENT`:
/// the default backoff without its yields, which would hand the client on its core whole scheduler slices).
const SENDER_IDLE: &str = "backoff:10,0,1us,1ms";

/// The service interface under load: timer lateness at rho 0.1/0.5/0.9 beside commit latency, pushes to
/// 1/16/256 remote sessions beside the response path, and the interface's cost on the apply path (about 70
/// s; `--quick` for a smoke run of about 15 s).
#[derive(Debug, Parser)]
#[command(name = "service", bin_name = "cargo bench --bench service --", args_override_self = true)]
struct Cli {
    /// A smoke run: shorter runs and fewer samples.
    #[arg(long)]
    quick: bool,
    /// Utilizations of the timer points, fractions of the measured capacity.
    #[arg(long, value_name = "LIST", default_value = "0.1,0.5,0.9", value_delimiter = ',')]
    rho: Vec<f64>,
    /// Subscriber sessions of the push runs.
    #[arg(long, value_name = "LIST", default_value = "1,16,256", value_delimiter = ',')]
    sessions: Vec<usize>,
    /// Cluster-time milliseconds between a timer's firing and its next deadline.
    #[arg(long, value_name = "MS", default_value_t = 1)]
    timer_period_ms: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// How long each part runs.
#[derive(Clone, Debug)]
struct Settings {
    quick: bool,
    /// The open-loop points' length (`Timings::point`; the rest of the timings are unused here).
    timings: Timings,
    /// The capacity's closed loop.
    capacity: Duration,
    /// Round trips of the UDP floor.
    rtt_samples: u64,
    /// A push run's warm-up (not recorded), then its saturated and its paced phase.
    push_warmup: Duration,
    push_phase: Duration,
    /// Each apply-path run, and A B pairs.
    apply_run: Duration,
    apply_pairs: usize,
}

impl Settings {
    fn new(quick: bool) -> Self {
        let ms = Duration::from_millis;
        let point = if quick { ms(600) } else { ms(3000) };
        let timings = Timings {
            s_window: ms(100),
            s_windows: 1,
            c_warmup: ms(100),
            c_window: ms(100),
            c_rate: 50_000.0,
            mu_warmup: ms(100),
            mu_resume: ms(100),
            mu_window: ms(100),
            mu_windows: 1,
            point,
            point_messages: 4_000_000,
            hiccup: ms(0),
        };
        if quick {
            Self {
                quick,
                timings,
                capacity: ms(1000),
                rtt_samples: 3_000,
                push_warmup: ms(200),
                push_phase: ms(700),
                apply_run: ms(800),
                apply_pairs: 2,
            }
        } else {
            Self {
                quick,
                timings,
                capacity: ms(3000),
                rtt_samples: 100_002,
                push_warmup: ms(500),
                push_phase: ms(3000),
                apply_run: ms(3000),
                apply_pairs: 3,
            }
        }
    }
}

/// This host's wall clock, epoch nanoseconds: the clock the leader stamps entries with (`NanoClock::epoch_ns`).
fn epoch_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// Nanoseconds `later - earlier`, at least 1 (a histogram records no zero).
fn ns_between(later: i64, earlier: i64) -> u64 {
    later.saturating_sub(earlier).max(1) as u64
}

/// Reads `N` little-endian words.
fn read_words<const N: usize>(reader: &mut dyn Read) -> std::io::Result<[u64; N]> {
    let mut words = [0u64; N];
    for word in &mut words {
        let mut bytes = [0; 8];
        reader.read_exact(&mut bytes)?;
        *word = u64::from_le_bytes(bytes);
    }
    Ok(words)
}

// ---------------------------------------------------------------------------------------------------
// The run.

/// Everything measured.
#[derive(Debug)]
struct Results {
    capacity: ClientReport,
    floor: RttReport,
    timer_points: Vec<TimerPoint>,
    pushes: Vec<PushRun>,
    push_failures: Vec<(usize, String)>,
    apply: ApplyCost,
    warnings: Vec<String>,
}

/// A closed-loop `qc-client` run for `duration`: 4096 in flight.
fn closed_loop(
    cluster: &mut LoadCluster,
    client: &ClientProcess,
    duration: Duration,
    json: &Path,
) -> Result<ClientReport, SweepError> {
    let load = ClientLoadSpec {
        // A cap well above what the duration can carry: the duration ends the offers.
        messages: 100_000_000,
        warmup: 0,
        msg_size: MESSAGE,
        rate: None,
        window: MAX_WINDOW,
        mtu: MTU,
        duration: Some(duration),
        timeout: duration + Duration::from_secs(30),
        json: json.to_path_buf(),
        hgrm: None,
        service_hgrm: None,
    };
    client.load(cluster, &load)
}

fn run(
    cli: &Cli,
    settings: &Settings,
    client: &ClientProcess,
    layout: Layout,
    dir: &Path,
) -> Result<Results, SweepError> {
    let spec = ClusterSpec {
        clients: true,
        sender_idle: SENDER_IDLE.parse().expect("a valid idle strategy"),
        ..ClusterSpec::new(MTU, MESSAGE, layout)
    };
    let push_core = layout.client_core();
    let period = Duration::from_millis(cli.timer_period_ms.max(1));
    let (results, warnings) = on_harness_thread(|| {
        let mut cluster = LoadCluster::start(&spec)?;
        let warnings = cluster.warnings().to_vec();
        let outcome = (|| -> Result<Results, SweepError> {
            // The floor first: it parks the cluster's agents, and a timer due meanwhile would fire late in
            // the next run (the first smoke run's rho 0.1 point had a 120 ms timer so).
            let floor = client.udp_rtt(
                &mut cluster,
                settings.rtt_samples,
                settings.rtt_samples / 10,
                MESSAGE,
                &dir.join("udp-rtt.json"),
            )?;
            println!(
                "floor: UDP round trip between two processes p50 {:.1} p99 {:.1} us",
                floor.rtt_us.p50, floor.rtt_us.p99
            );
            // Part 1: timers, capacity first.
            let record = Arc::new(Mutex::new(TimerRecord::new()));
            let services: Vec<Box<dyn StateMachine + Send>> = (0..cluster.size())
                .map(|i| {
                    Box::new(TimerService::new(period, (i == 0).then(|| Arc::clone(&record))))
                        as Box<dyn StateMachine + Send>
                })
                .collect();
            cluster.set_services(services)?;
            let capacity = closed_loop(&mut cluster, client, settings.capacity, &dir.join("capacity.client.json"))?;
            println!(
                "capacity: qc-client closed loop ({MAX_WINDOW} in flight) committed {} msg/s, p50 {:.1} p99 {:.1} us; \
                 CPU us/msg client {} cluster {}",
                si(capacity.rate),
                capacity.latency_us.p50,
                capacity.latency_us.p99,
                figure(capacity.client_cpu_us_per_msg()),
                figure(capacity.cluster_cpu_us_per_msg()),
            );
            let mut timer_points = Vec::new();
            for &rho in &cli.rho {
                *record.lock().unwrap_or_else(|e| e.into_inner()) = TimerRecord::new();
                let json = dir.join(format!("timers-rho{rho:.2}.client.json"));
                let point = remote::client_point(
                    &mut cluster,
                    client,
                    rho,
                    capacity.rate,
                    (MESSAGE, MTU),
                    &settings.timings,
                    json,
                    None,
                )?;
                let r = std::mem::replace(&mut *record.lock().unwrap_or_else(|e| e.into_inner()), TimerRecord::new());
                let p = TimerPoint {
                    rho,
                    lateness: Percentiles::from_histogram(&r.lateness, NS_PER_US),
                    stamped: Percentiles::from_histogram(&r.stamped, NS_PER_US),
                    timers: r.lateness.len(),
                    early: r.early,
                    client: point,
                };
                println!(
                    "timers rho {rho:.2}: lambda {} achieved {} msg/s; commit p50 {:.1} p99 {:.1} us; {} timers late p50 \
                     {:.1} p99 {:.1} max {:.1} us (stamped late p50 {:.1} p99 {:.1} us)",
                    si(p.client.lambda),
                    si(p.client.report.rate),
                    p.client.report.latency_us.p50,
                    p.client.report.latency_us.p99,
                    p.timers,
                    p.lateness.p50,
                    p.lateness.p99,
                    p.lateness.max,
                    p.stamped.p50,
                    p.stamped.p99,
                );
                timer_points.push(p);
            }
            cluster.take_services();
            // Part 2: pushes. A failed N is reported and the others still run.
            let mut pushes = Vec::new();
            let mut push_failures = Vec::new();
            for &n in &cli.sessions {
                match push_run(&mut cluster, n, settings, push_core) {
                    Ok(r) => {
                        print_push(&r);
                        pushes.push(r);
                    }
                    Err(e) => {
                        println!("pushes to {n} sessions: FAILED: {e}");
                        cluster.take_services();
                        push_failures.push((n, e.to_string()));
                    }
                }
            }
            // Part 3: the apply path, A B A B on this cluster.
            let mut runs = Vec::new();
            for pair in 0..settings.apply_pairs {
                for interface in [false, true] {
                    let services: Vec<Box<dyn StateMachine + Send>> = (0..cluster.size())
                        .map(|_| {
                            if interface {
                                Box::new(InterfaceService::default()) as Box<dyn StateMachine + Send>
                            } else {
                                Box::new(PlainService::default()) as Box<dyn StateMachine + Send>
                            }
                        })
                        .collect();
                    cluster.set_services(services)?;
                    let name = if interface { "on_message" } else { "apply" };
                    let json = dir.join(format!("apply-{pair}-{name}.client.json"));
                    let report = closed_loop(&mut cluster, client, settings.apply_run, &json)?;
                    println!(
                        "apply path {pair} {name:>10}: committed {} msg/s, cluster CPU {} us/msg",
                        si(report.rate),
                        figure(report.cluster_cpu_us_per_msg())
                    );
                    runs.push(ApplyRun { interface, report });
                    cluster.take_services();
                }
            }
            Ok(Results {
                capacity,
                floor,
                timer_points,
                pushes,
                push_failures,
                apply: ApplyCost { runs },
                warnings: Vec::new(),
            })
        })();
        let closed = cluster.close();
        let results = outcome?;
        closed?;
        Ok((results, warnings))
    })?;
    Ok(Results { warnings, ..results })
}

/// A figure, or `?` where unmeasured.
fn figure(value: Option<f64>) -> String {
    value.map_or("?".into(), |v| format!("{v:.2}"))
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn percentiles(h: &Option<Histogram<u64>>) -> Percentiles {
    h.as_ref().map_or_else(
        || Percentiles::from_histogram(&new_histogram(), NS_PER_US),
        |h| Percentiles::from_histogram(h, NS_PER_US),
    )
}

fn print_push(r: &PushRun) {
    let (s, p) = (&r.saturated, &r.paced);
    let (sd, pd, pr) = (percentiles(&s.delivery), percentiles(&p.delivery), percentiles(&p.response));
    println!(
        "pushes to {} sessions: saturated {} pushes/s ({} msg/s published; delivery p50 {:.1} p99 {:.1} us); paced at \
         {} pushes/s: delivery p50 {:.1} p99 {:.1} max {:.1} us, response p50 {:.1} p99 {:.1} us; {} refused, {} untimed",
        r.sessions,
        si(s.pushes_per_s()),
        si(s.published as f64 / s.seconds.max(f64::MIN_POSITIVE)),
        sd.p50,
        sd.p99,
        si(p.pushes_per_s()),
        pd.p50,
        pd.p99,
        pd.max,
        pr.p50,
        pr.p99,
        r.refused,
        s.untimed + p.untimed,
    );
}

fn print_table(r: &Results) {
    println!("\nservice bench · {MESSAGE} B · MTU {MTU} · 3 members");
    println!(
        "  capacity (qc-client closed loop): {} msg/s · UDP RTT floor p50 {:.1} p99 {:.1} us",
        si(r.capacity.rate),
        r.floor.rtt_us.p50,
        r.floor.rtt_us.p99
    );
    println!(
        "  timers: lateness = leader wall clock at on_timer - deadline; target p99 <= commit p99 + tick interval {} ms",
        TICK_INTERVAL.as_millis()
    );
    println!(
        "  {:>5} {:>8} | {:>20} | {:>28} | {:>18} | {:>7} | target",
        "rho", "achieved", "commit p50/p99 us", "timer late p50/p99/max us", "stamped p50/p99 us", "timers"
    );
    for p in &r.timer_points {
        let c = &p.client.report.latency_us;
        println!(
            "  {:>5.2} {:>8} | {:>20} | {:>28} | {:>18} | {:>7} | {} (p99 {:.1} <= {:.1}; excess over commit p99 {:+.1} us)",
            p.rho,
            si(p.client.report.rate),
            format!("{:.1} / {:.1}", c.p50, c.p99),
            format!("{:.1} / {:.1} / {:.1}", p.lateness.p50, p.lateness.p99, p.lateness.max),
            format!("{:.1} / {:.1}", p.stamped.p50, p.stamped.p99),
            p.timers,
            met(p.met()),
            p.lateness.p99,
            p.bound_us(),
            p.lateness.p99 - c.p99,
        );
    }
    println!("  pushes: delivery = subscriber wall clock at Event::Pushed - leader wall clock at the push; response = publisher's");
    println!("  intended send time to Event::Committed with its response; paced at half the saturated push rate");
    println!(
        "  {:>8} | {:>10} | {:>22} | {:>10} | {:>24} | {:>18} | {:>28}",
        "sessions",
        "sat push/s",
        "sat CPU us, egress dg",
        "paced /s",
        "delivery p50/p99/max us",
        "response p50/p99",
        "paced CPU us, dg, recv calls"
    );
    for run in &r.pushes {
        let (s, p) = (&run.saturated, &run.paced);
        let (pd, pr) = (percentiles(&p.delivery), percentiles(&p.response));
        println!(
            "  {:>8} | {:>10} | {:>22} | {:>10} | {:>24} | {:>18} | {:>28}",
            run.sessions,
            si(s.pushes_per_s()),
            format!("{} / {:.3}", figure(run.costs[0].0), run.costs[0].1),
            si(p.pushes_per_s()),
            format!("{:.1} / {:.1} / {:.1}", pd.p50, pd.p99, pd.max),
            format!("{:.1} / {:.1}", pr.p50, pr.p99),
            format!(
                "{} / {:.3} / {:.3}",
                figure(run.costs[1].0),
                run.costs[1].1,
                p.receive_calls as f64 / p.delivered.max(1) as f64
            ),
        );
    }
    for (n, e) in &r.push_failures {
        println!("  {n:>8} | FAILED: {e}");
    }
    let a = &r.apply;
    println!(
        "  apply path (qc-client closed loop, A B interleaved x{}): apply {} msg/s (cluster CPU {} us/msg) · on_message {} \
         msg/s (cluster CPU {} us/msg) · ratio {:.3} (target >= {APPLY_TARGET:.2}: {}) · CPU per msg ratio {}",
        a.runs.len() / 2,
        si(a.mean(false)),
        figure(a.cpu(false)),
        si(a.mean(true)),
        figure(a.cpu(true)),
        a.ratio(),
        met(a.ratio() >= APPLY_TARGET),
        a.cpu_ratio().map_or("?".into(), |r| format!("{r:.3}"))
    );
    println!(
        "  runs in order: {}",
        a.runs
            .iter()
            .map(|r| format!("{} {}", if r.interface { "B" } else { "A" }, si(r.report.rate)))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn summary_json(r: &Results) -> Value {
    json!({
        "capacity": {
            "committed_msgs_per_s": r.capacity.rate,
            "latency_us": r.capacity.latency_us,
            "cpu_us_per_msg": { "client": r.capacity.client_cpu_us_per_msg(), "cluster": r.capacity.cluster_cpu_us_per_msg() },
        },
        "udp_rtt": { "samples": r.floor.samples, "lost": r.floor.lost, "rtt_us": r.floor.rtt_us },
        "timers": {
            "tick_interval_ms": TICK_INTERVAL.as_millis() as u64,
            "points": r.timer_points.iter().map(|p| json!({
                "rho": p.rho,
                "lambda": p.client.lambda,
                "achieved": p.client.report.rate,
                "commit_latency_us": p.client.report.latency_us,
                "timers": p.timers,
                "early": p.early,
                "lateness_us": p.lateness,
                "stamped_late_us": p.stamped,
                "bound_us": p.bound_us(),
                "met": p.met(),
                "cpu_us_per_msg": {
                    "client": p.client.report.client_cpu_us_per_msg(),
                    "cluster": p.client.report.cluster_cpu_us_per_msg(),
                },
            })).collect::<Vec<_>>(),
        },
        "pushes": r.pushes.iter().map(|run| {
            let phase = |p: &PushPhase, cost: (Option<f64>, f64)| json!({
                "seconds": p.seconds,
                "published": p.published,
                "delivered": p.delivered,
                "pushes_per_s": p.pushes_per_s(),
                "publisher_rate": p.rate,
                "delivery_us": percentiles(&p.delivery),
                "response_us": percentiles(&p.response),
                "untimed": p.untimed,
                "cpu_us_per_push": cost.0,
                "egress_datagrams_per_push": cost.1,
                "receive_calls_per_push": p.receive_calls as f64 / p.delivered.max(1) as f64,
            });
            json!({
                "sessions": run.sessions,
                "refused": run.refused,
                "saturated": phase(&run.saturated, run.costs[0]),
                "paced": phase(&run.paced, run.costs[1]),
            })
        }).collect::<Vec<_>>(),
        "push_failures": r.push_failures.iter().map(|(n, e)| json!({ "sessions": n, "error": e })).collect::<Vec<_>>(),
        "apply_path": {
            "apply_msgs_per_s": r.apply.mean(false),
            "on_message_msgs_per_s": r.apply.mean(true),
            "ratio": r.apply.ratio(),
            "cpu_per_msg_ratio": r.apply.cpu_ratio(),
            "target_ratio": APPLY_TARGET,
            "met": r.apply.ratio() >= APPLY_TARGET,
            "runs": r.apply.runs.iter().map(|run| json!({
                "service": if run.interface { "on_message" } else { "apply" },
                "committed_msgs_per_s": run.report.rate,
                "cluster_cpu_us_per_msg": run.report.cluster_cpu_us_per_msg(),
                "client_cpu_us_per_msg": run.report.client_cpu_us_per_msg(),
            })).collect::<Vec<_>>(),
        },
        "warnings": r.warnings,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(bad) = cli.rho.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        eprintln!("--rho {bad}: every rho must be a positive number");
        return ExitCode::from(2);
    }
    if let Some(bad) = cli.sessions.iter().find(|&&n| n == 0 || n > 256) {
        eprintln!("--sessions {bad}: from 1 to 256 (one address's `max_sessions_per_address`)");
        return ExitCode::from(2);
    }
    let settings = Settings::new(cli.quick);
    let layout = Layout::for_host();
    let client = match ClientProcess::find(env!("CARGO_BIN_EXE_qc-client")) {
        Ok(client) => ClientProcess { core: layout.client_core(), ..client },
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let started = SystemTime::now();
    let clock = Instant::now();
    let dir = target_dir().join("service").join(report::utc_dir_name(started));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let sender_idle: IdleStrategyConfig = SENDER_IDLE.parse().expect("a valid idle strategy");
    println!(
        "service bench{}: 3 nodes over UDP loopback in this process, qc-client and the push clients on core {}, {} cores",
        if settings.quick { " (quick)" } else { "" },
        client.core.map_or_else(|| "any".to_string(), |c| c.to_string()),
        quorumcast_driver::agent::available_cores()
    );
    println!("layout: {}", layout.describe(sender_idle));
    let outcome = run(&cli, &settings, &client, layout, &dir);
    let (summary, ok) = match &outcome {
        Ok(r) => {
            for warning in &r.warnings {
                println!("   warning: {warning}");
            }
            print_table(r);
            (summary_json(r), r.push_failures.is_empty())
        }
        Err(e) => {
            println!("FAILED: {e}");
            (json!({ "error": e.to_string() }), false)
        }
    };
    let summary = json!({
        "bench": "service",
        "quick": settings.quick,
        "timestamp": report::utc_timestamp(started),
        "host": host(),
        "layout": layout.describe(sender_idle),
        "message_bytes": MESSAGE,
        "mtu": MTU,
        "timer_period_ms": cli.timer_period_ms,
        "settings": {
            "point_s": settings.timings.point.as_secs_f64(),
            "capacity_s": settings.capacity.as_secs_f64(),
            "rtt_samples": settings.rtt_samples,
            "push_phase_s": settings.push_phase.as_secs_f64(),
            "apply_run_s": settings.apply_run.as_secs_f64(),
            "apply_pairs": settings.apply_pairs,
        },
        "results": summary,
    });
    let path = dir.join("summary.json");
    let written = std::fs::write(&path, serde_json::to_string_pretty(&summary).unwrap_or_default() + "\n")
        .map_err(|e| e.to_string())
        .and_then(|()| report::link_latest(&dir).map_err(|e| e.to_string()));
    match written {
        Ok(()) => println!("\nsummary: {} ({:.0} s)", path.display(), clock.elapsed().as_secs_f64()),
        Err(e) => println!("\nsummary not written: {e}"),
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
