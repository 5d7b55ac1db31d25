//! Remote-client benchmark: a 3-node quorumcast cluster over UDP loopback in this process, driven by a
//! client in another process (`qc-client`, spawned), beside the same cluster driven in-process.
//!
//! `cargo bench --bench client` (about 40 s on 2 cores, once built), `cargo bench --bench client -- --quick` (a
//! smoke run, about 10 s), `-- --mtu 1408` / `-- --rho 0.1,0.3,0.5` to change the grid, `-- --client-idle
//! sleep-ns:1000` to change how the client waits (`-- --help` lists the options).
//!
//! `qc-client` is a binary target of the same package, so cargo builds it (with the bench profile) before
//! it builds this bench, and hands its path to the bench at compile time (`CARGO_BIN_EXE_qc-client`): a
//! clean clone needs nothing but `cargo bench --bench client`. Should that file be gone, the bench looks
//! for `qc-client` next to its own directory (`target/<profile>/`).
//!
//! What it measures, for 128-byte messages at MTU 1408 and 8192, in one run:
//! - in-process capacity mu: on a fresh cluster, the harness offers through the leader's in-process
//!   `LocalClient` as fast as its ingress takes (the sweep's `measure_mu`, without S slices); committed
//!   messages per second over the windows;
//! - then on a second fresh cluster, in this order:
//!   - in-process latency at rho 0.1 and 0.5 of mu (the sweep's `run_point`: open loop at `lambda = rho x
//!     mu`, from each message's intended send time until the harness applies it on the leader);
//!   - the UDP round-trip floor between two processes, with the cluster's agent threads parked:
//!     `qc-client --udp-rtt` ping-pongs 128-byte datagrams with an echo socket on the harness thread,
//!     both polling non-blocking sockets;
//!   - the remote client's latency at the same lambdas: `qc-client --rate lambda`, open loop, as many
//!     messages as the in-process point plus a tenth more first as a warm-up (not recorded), from each
//!     message's intended send time until its commit acknowledgement reaches the client;
//!   - the remote client's sustained rate: `qc-client` closed loop with 4096 messages in flight (the
//!     cluster's session window), offering for a fixed time, committed messages per second until the
//!     last acknowledgement.
//!
//! Every cluster takes remote clients (`ClientEndpointConfig::enabled` on every node, a fresh session key), so the in-process figures
//! include the cost of polling the client endpoints. While a client process runs, the harness thread keeps
//! invoking and applying the nodes: the leader acknowledges a client's message when its application polls
//! it. The harness applies client messages beside its own numbered ones and leaves them out of its counts.
//!
//! - then on a third fresh cluster, one that requires a client key (`ClientEndpointConfig::keys`, which the
//!   client holds: `qc-client --client-key-file`), the same client points and closed loop: the cost of
//!   client credentials beside session tags alone (every client datagram is tagged either way).
//!
//! Beside each rate, CPU microseconds per committed message (user + system time from `/proc/<pid>/stat`,
//! every thread): in process, this process's over the capacity windows and over each latency point (the
//! cluster and the harness that offers and applies); remote, the client process's and this (the cluster's) process's over the client's
//! run from its first offer to its last acknowledgement, as the client reads both. A figure that the
//! sharing of two cores moves much less than a rate.
//!
//! Checks, printed as met or missed: client rate / in-process rate at least 0.80; per rho, client p50 at
//! most in-process p50 + UDP round-trip p50; closed-loop rate with a client key / without at least 0.90;
//! remote CPU per committed message (client + cluster) / in-process at most 1.5.
//!
//! Thread layout (the sweep's, `Layout::for_host`; busy-spinning threads never outnumber the cores): on 2
//! cores, the leader's Sender (with its receiver) on core 1 and the harness thread on core 0, invoking the
//! leader's consensus agent and both followers and idling with `backoff`. Unlike the sweep's, the Sender
//! idles with `backoff` rather than spinning, so that the client process finds a core, and without its
//! yields when the client shares its core (`SENDER_IDLE_BESIDE_CLIENT`; `--sender-idle` changes it: a
//! yield hands a busy client the rest of its scheduler slice): the client runs on
//! the Sender's core (`Layout::client_core`: a core no thread of the layout is pinned to where there is
//! one; `--client-core` changes it) and idles with `sched_yield` (qc-client's default; `--client-idle`
//! changes it), which spins only on an idle core. Left to the scheduler, the client ran for long stretches
//! on the harness's core, the saturated one, while the Sender's idled. `--client-sched-idle` runs the
//! client under `SCHED_IDLE` there, so that the Sender, woken from a park, need not wait out the client's
//! scheduler slice (up to 3.7 ms, measured): lower client latency at 8192, a lower closed-loop rate at
//! 1408, where the Sender is the busy thread; off by default.
//! During the floor, the harness spins on its echo socket and the client on its own, with the cluster
//! parked: two spinners, two cores.
//!
//! `--cluster-core N` gives the client a core of its own instead, as a client on another host has: the
//! whole cluster runs on one thread on core N (`Layout::whole_on`: every member through its invoker, the
//! leader's Sender too), both in process and beside the client, and the client on a core it leaves free.
//! The in-process figures are then those of a one-core cluster, and the ratios compare the remote path
//! with the in-process one on the same cluster.
//!
//! Results: a table per MTU, and `target/client/<UTC timestamp>/summary.json` (`target/client/latest`
//! points at the newest), with each client run's JSON and the latency distributions (`hgrm/`) beside it.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use quorumcast_bench::hiccup::ProcessTimes;
use quorumcast_bench::report::{self, Percentiles, NS_PER_US};
use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_bench::sweep::measure::{self, SendTimes};
use quorumcast_bench::sweep::profile::Timings;
use quorumcast_bench::sweep::remote::{self, ClientLoadSpec, ClientProcess, RttReport, MAX_WINDOW};
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use serde_json::{json, Value};

use quorumcast_bench::bench::{host, si, target_dir};

/// Message length of every run.
const MESSAGE: usize = 128;
/// The client's rate over the in-process rate that the remote path should reach.
const TARGET_RATIO: f64 = 0.80;
/// The closed-loop rate with a client key over the rate with session tags only that it should reach.
const KEYED_TARGET: f64 = 0.90;
/// Remote CPU per committed message (client process and cluster process) over in-process CPU per
/// committed message (the cluster's process, its harness offering), at most.
const CPU_TARGET: f64 = 1.5;

/// A 3-node cluster in this process driven by a `qc-client` process, beside the same cluster driven
/// in-process: committed msg/s at saturation, latency at rho x the in-process capacity, and the UDP
/// round-trip floor between two processes (about 40 s; `--quick` for a smoke run of about 10 s).
#[derive(Debug, Parser)]
#[command(name = "client", bin_name = "cargo bench --bench client --", args_override_self = true)]
struct Cli {
    /// A smoke run: shorter windows, points and floor.
    #[arg(long)]
    quick: bool,
    /// MTUs (bytes), e.g. `1408,8192`.
    #[arg(long, value_name = "LIST", default_value = "1408,8192", value_delimiter = ',')]
    mtu: Vec<usize>,
    /// Utilizations of the latency points, fractions of the in-process capacity, e.g. `0.1,0.5`.
    #[arg(long, value_name = "LIST", default_value = "0.1,0.5", value_delimiter = ',')]
    rho: Vec<f64>,
    /// The client process's idle strategy (`yield`, `sleep-ns:1000`, `backoff`, ...) [default:
    /// qc-client's, sched_yield].
    #[arg(long, value_name = "STRATEGY")]
    client_idle: Option<IdleStrategyConfig>,
    /// The cluster's consensus idle strategy, which is also the harness thread's (it invokes the leader's
    /// consensus agent and the followers): e.g. `yield`, which never parks [default: the default backoff,
    /// which parks up to 1 ms after cycles without work].
    #[arg(long, value_name = "STRATEGY")]
    consensus_idle: Option<IdleStrategyConfig>,
    /// The leader's Sender (and Receiver) thread's idle strategy, e.g. `backoff:10,0,1us,1ms` (no
    /// yields) [default: the default backoff; a spinning one is replaced by it, as the layout allows].
    #[arg(long, value_name = "STRATEGY")]
    sender_idle: Option<IdleStrategyConfig>,
    /// The client process blocks on its socket when idle (`qc-client --wait`: no CPU spent waiting,
    /// woken by the answer) instead of its idle strategy.
    #[arg(long, conflicts_with = "client_idle")]
    client_wait: bool,
    /// Microseconds an offered message may wait in the client for more to share its datagram
    /// (`ClientConfig::linger`; 0 sends at every poll).
    #[arg(long, value_name = "US", default_value_t = 0)]
    client_linger_us: u64,
    /// The one CPU the client process runs on [default: one the layout leaves free, else the Sender's].
    #[arg(long, value_name = "CPU")]
    client_core: Option<usize>,
    /// Run the whole cluster on one thread pinned to this core (every member through its invoker, the
    /// leader's Sender too), in process and beside the client alike, and the client process on a core the
    /// cluster leaves free: a client with a core of its own, as one on another host has, against the same
    /// one-core cluster driven in process [default: the sweep's layout, which gives the cluster every core].
    #[arg(long, value_name = "CPU")]
    cluster_core: Option<usize>,
    /// Run the client process under `SCHED_IDLE`: on the core it shares with the Sender (2 cores), the
    /// Sender, woken, no longer waits out the client's scheduler slice, and the client gets only what the
    /// Sender leaves. Measured on the AMD guest of 2026-12-05: client p50 at rho 0.1 and MTU 8192 210-355 us
    /// against 377-746 at normal priority, and the closed loop at 1408 468-571k msg/s against 689-745k
    /// (the Sender is the busy thread there). Off by default: it trades the client's rate for its latency.
    #[arg(long)]
    client_sched_idle: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// How long each part runs.
#[derive(Clone, Debug)]
struct Settings {
    quick: bool,
    /// The in-process capacity's windows and the in-process points' length.
    timings: Timings,
    /// Round trips of the floor.
    rtt_samples: u64,
    /// How long the closed-loop client offers.
    client_duration: Duration,
}

impl Settings {
    fn new(quick: bool) -> Self {
        let ms = Duration::from_millis;
        let timings = |mu_warmup, mu_window, mu_windows, point| Timings {
            // The S probe, the C window and the hiccup probe are the sweep's; this bench measures none of them.
            s_window: ms(100),
            s_windows: 1,
            c_warmup: ms(100),
            c_window: ms(100),
            c_rate: 50_000.0,
            mu_warmup,
            mu_resume: ms(100),
            mu_window,
            mu_windows,
            point,
            point_messages: 4_000_000,
            hiccup: ms(0),
        };
        if quick {
            Self {
                quick,
                timings: timings(ms(200), ms(300), 2, ms(500)),
                rtt_samples: 3_000,
                client_duration: ms(1000),
            }
        } else {
            Self {
                quick,
                timings: timings(ms(400), ms(1000), 3, ms(3000)),
                // As every RTT figure of the transport bench: enough round trips for a p99.9.
                rtt_samples: 100_002,
                client_duration: ms(3000),
            }
        }
    }
}

/// One latency point: in-process and from the client at the same lambda.
#[derive(Debug)]
struct Point {
    rho: f64,
    lambda: f64,
    in_process: Percentiles,
    in_process_achieved: f64,
    in_process_back_pressured: u64,
    /// This (the cluster's and its harness's) process's CPU microseconds per committed message over the
    /// in-process point.
    in_process_cpu: Option<f64>,
    client: remote::ClientPoint,
}

impl Point {
    /// The check: client p50 at most in-process p50 + the floor's p50.
    fn met(&self, floor: &RttReport) -> bool {
        self.client.report.latency_us.p50 <= self.in_process.p50 + floor.rtt_us.p50
    }

    /// CPU microseconds per committed message at this point: in process; remote (client process +
    /// cluster process); remote over in process.
    fn cpu(&self) -> Option<(f64, f64, f64)> {
        let in_process = self.in_process_cpu?;
        let remote = self.client.report.client_cpu_us_per_msg()? + self.client.report.cluster_cpu_us_per_msg()?;
        Some((in_process, remote, remote / in_process.max(f64::MIN_POSITIVE)))
    }
}

/// Everything measured at one MTU.
#[derive(Debug)]
struct MtuResult {
    mtu: usize,
    mu: measure::MuRun,
    points: Vec<Point>,
    floor: RttReport,
    client: remote::ClientReport,
    /// The same client runs on a cluster that requires a client key: its points (by rho, as `points`)
    /// and its closed loop.
    keyed: (Vec<remote::ClientPoint>, remote::ClientReport),
    warnings: Vec<String>,
}

impl MtuResult {
    fn ratio(&self) -> f64 {
        self.client.rate / self.mu.mu.max(f64::MIN_POSITIVE)
    }

    /// The closed-loop rate with a client key over the rate with session tags only.
    fn keyed_ratio(&self) -> f64 {
        self.keyed.1.rate / self.client.rate.max(f64::MIN_POSITIVE)
    }

    /// CPU microseconds per committed message: in process; remote (client process, cluster process);
    /// remote (both) over in process.
    fn cpu(&self) -> Option<(f64, f64, f64, f64)> {
        let in_process = self.mu.cpu_us_per_msg()?;
        let client = self.client.client_cpu_us_per_msg()?;
        let cluster = self.client.cluster_cpu_us_per_msg()?;
        Some((in_process, client, cluster, (client + cluster) / in_process.max(f64::MIN_POSITIVE)))
    }
}

/// The Sender's idle strategy when the client process runs on its core (the default layout on 2 cores):
/// the default backoff without its yields. A `sched_yield` while the client is runnable hands the client
/// the core for the rest of its scheduler slice: on the AMD guest of 2026-12-05 (`perf sched timehist`,
/// MTU 8192, rho 0.1) the Sender and the client took turns of 0.8-1 ms, the Sender yielding while its log
/// was 150 KB unsent, and the client's p50 was 2.6-2.9 ms; with parks only (woken within 15 us) 392 us.
const SENDER_IDLE_BESIDE_CLIENT: &str = "backoff:10,0,1us,1ms";

/// The cluster's thread layout: the sweep's for this host, or the whole cluster on `--cluster-core`.
fn layout(cli: &Cli) -> Layout {
    cli.cluster_core.map_or_else(Layout::for_host, Layout::whole_on)
}

/// The Sender's idle strategy: `--sender-idle`, else [`SENDER_IDLE_BESIDE_CLIENT`] when the client
/// process shares the Sender's core, else the default.
fn sender_idle(cli: &Cli, client: &ClientProcess) -> IdleStrategyConfig {
    cli.sender_idle.unwrap_or_else(|| {
        if client.core.is_some() && client.core == layout(cli).sender {
            SENDER_IDLE_BESIDE_CLIENT.parse().expect("a valid idle strategy")
        } else {
            IdleStrategyConfig::default()
        }
    })
}

fn spec(mtu: usize, layout: Layout) -> ClusterSpec {
    // The Sender backs off rather than spins (the default): the client process needs a core (see the
    // module doc).
    ClusterSpec { clients: true, ..ClusterSpec::new(mtu, MESSAGE, layout) }
}

/// Starts a cluster on a fresh harness thread, runs `work` on it and closes it (an error of `work`
/// first, then one of closing); the start's warnings go to `warnings`.
fn with_cluster<T: Send>(
    spec: &ClusterSpec,
    warnings: &mut Vec<String>,
    work: impl FnOnce(&mut LoadCluster) -> Result<T, SweepError> + Send,
) -> Result<T, SweepError> {
    let (value, started) = on_harness_thread(|| {
        let mut cluster = LoadCluster::start(spec)?;
        let started = cluster.warnings().to_vec();
        let outcome = work(&mut cluster);
        let closed = cluster.close();
        let value = outcome?;
        closed?;
        Ok((value, started))
    })?;
    for warning in started {
        if !warnings.contains(&warning) {
            println!("   warning: {warning}");
            warnings.push(warning);
        }
    }
    Ok(value)
}

fn run_mtu(
    mtu: usize,
    cli: &Cli,
    settings: &Settings,
    client: &ClientProcess,
    dir: &Path,
) -> Result<MtuResult, SweepError> {
    let mut spec = spec(mtu, layout(cli));
    if let Some(idle) = cli.consensus_idle {
        spec.consensus_idle = idle;
    }
    spec.sender_idle = sender_idle(cli, client);
    let t = &settings.timings;
    let mut warnings = Vec::new();
    let mu = with_cluster(&spec, &mut warnings, |cluster| measure::measure_mu(cluster, t, || Ok(None)))?;
    println!(
        "MTU {mtu}: in-process committed {} msg/s (windows {}), CPU {} us/msg",
        si(mu.mu),
        mu.windows.iter().map(|&w| si(w)).collect::<Vec<_>>().join(" "),
        mu.cpu_us_per_msg().map_or("?".into(), |c| format!("{c:.2}"))
    );
    let (points, floor, client_report) = with_cluster(&spec, &mut warnings, |cluster| {
        let mut times = SendTimes::new();
        let mut in_process = Vec::new();
        for &rho in &cli.rho {
            let cpu_before = ProcessTimes::read();
            let point = measure::run_point(cluster, rho, mu.mu, t, &mut times)?;
            let cpu = ProcessTimes::read().zip(cpu_before).map(|(after, before)| {
                ProcessTimes::seconds(after.since(&before).own) * 1e6 / point.messages.max(1) as f64
            });
            report::write_hgrm(
                &point.latency,
                &dir.join(format!("hgrm/mtu{mtu}-rho{rho:.2}.in-process.hgrm")),
                NS_PER_US,
            )?;
            let p = Percentiles::from_histogram(&point.latency, NS_PER_US);
            println!(
                "MTU {mtu}: in-process rho {rho:.2}: lambda {} achieved {} msg/s, p50 {:.1} p99 {:.1} p99.9 {:.1} us, \
                 {} back-pressured offers; CPU us/msg {}",
                si(point.lambda),
                si(point.achieved),
                p.p50,
                p.p99,
                p.p999,
                point.back_pressured,
                cpu_figure(cpu)
            );
            in_process.push((rho, point.lambda, p, point.achieved, point.back_pressured, cpu));
        }
        let floor = client.udp_rtt(
            cluster,
            settings.rtt_samples,
            settings.rtt_samples / 10,
            MESSAGE,
            &dir.join(format!("mtu{mtu}-udp-rtt.json")),
        )?;
        println!(
            "MTU {mtu}: UDP round trip between two processes ({} samples, {} lost): p50 {:.1} p99 {:.1} us",
            floor.samples, floor.lost, floor.rtt_us.p50, floor.rtt_us.p99
        );
        let lambdas: Vec<(f64, f64)> = in_process.iter().map(|&(rho, lambda, ..)| (rho, lambda)).collect();
        let (clients, report) = client_runs(cluster, client, settings, (mtu, mu.mu), &lambdas, dir, "")?;
        let points: Vec<Point> = in_process
            .into_iter()
            .zip(clients)
            .map(|((rho, lambda, p, achieved, back_pressured, cpu), c)| Point {
                rho,
                lambda,
                in_process: p,
                in_process_achieved: achieved,
                in_process_back_pressured: back_pressured,
                in_process_cpu: cpu,
                client: c,
            })
            .collect();
        Ok((points, floor, report))
    })?;
    // The same client runs on a cluster that requires a client key (the client holds it): the cost of
    // client credentials beside session tags alone.
    let key = quorumcast_driver::media::auth::AuthKey::generate()?;
    let keyed_spec = ClusterSpec { client_key: Some(key), ..spec.clone() };
    let lambdas: Vec<(f64, f64)> = points.iter().map(|p| (p.rho, p.lambda)).collect();
    let keyed = with_cluster(&keyed_spec, &mut warnings, |cluster| {
        client_runs(cluster, client, settings, (mtu, mu.mu), &lambdas, dir, ".keyed")
    })?;
    for (point, c) in points.iter().zip(&keyed.0) {
        let l = &c.report.latency_us;
        println!(
            "MTU {mtu}: client with a client key rho {:.2}: achieved {} msg/s, p50 {:.1} p99 {:.1} us (session tags \
             only: p50 {:.1} p99 {:.1} us)",
            point.rho,
            si(c.report.rate),
            l.p50,
            l.p99,
            point.client.report.latency_us.p50,
            point.client.report.latency_us.p99
        );
    }
    println!(
        "MTU {mtu}: client with a client key, closed loop: committed {} msg/s (session tags only: {} msg/s)",
        si(keyed.1.rate),
        si(client_report.rate)
    );
    Ok(MtuResult { mtu, mu, points, floor, client: client_report, keyed, warnings })
}

/// The remote client's runs on `cluster`: a latency point at each `(rho, lambda)` of `lambdas`, then the
/// closed loop; `tag` tells their files apart from another cluster's.
fn client_runs(
    cluster: &mut LoadCluster,
    client: &ClientProcess,
    settings: &Settings,
    (mtu, mu): (usize, f64),
    lambdas: &[(f64, f64)],
    dir: &Path,
    tag: &str,
) -> Result<(Vec<remote::ClientPoint>, remote::ClientReport), SweepError> {
    let t = &settings.timings;
    let mut points = Vec::new();
    for &(rho, _) in lambdas {
        let stem = format!("mtu{mtu}-rho{rho:.2}.client{tag}");
        let hgrm = (dir.join(format!("hgrm/{stem}.hgrm")), dir.join(format!("hgrm/{stem}.service.hgrm")));
        let json = dir.join(format!("{stem}.json"));
        let c = remote::client_point(cluster, client, rho, mu, (MESSAGE, mtu), t, json, Some(hgrm))?;
        let stage_counts = stages(&c.report);
        let l = &c.report.latency_us;
        println!(
            "MTU {mtu}: client{tag} rho {rho:.2}: lambda {} achieved {} msg/s, p50 {:.1} p99 {:.1} p99.9 {:.1} us (from \
             offer p50 {:.1} p99 {:.1} us)",
            si(c.lambda),
            si(c.report.rate),
            l.p50,
            l.p99,
            l.p999,
            c.report.service_latency_us.p50,
            c.report.service_latency_us.p99,
        );
        println!(
            "MTU {mtu}: client{tag} rho {rho:.2}: CPU us/msg client {} cluster {}; {stage_counts}",
            cpu_figure(c.report.client_cpu_us_per_msg()),
            cpu_figure(c.report.cluster_cpu_us_per_msg()),
        );
        points.push(c);
    }
    let seconds = settings.client_duration.as_secs_f64();
    let saturation = ClientLoadSpec {
        // A cap well above what the duration can carry: the duration ends the offers.
        messages: ((mu * seconds * 4.0) as u64).max(1_000_000),
        warmup: 0,
        msg_size: MESSAGE,
        rate: None,
        window: MAX_WINDOW,
        mtu,
        duration: Some(settings.client_duration),
        timeout: settings.client_duration + Duration::from_secs(30),
        json: dir.join(format!("mtu{mtu}-closed-loop.client{tag}.json")),
        hgrm: None,
        service_hgrm: None,
    };
    let report = client.load(cluster, &saturation)?;
    let stage_counts = stages(&report);
    println!(
        "MTU {mtu}: client{tag} closed loop ({MAX_WINDOW} in flight): committed {} msg/s ({} in {:.2} s), p50 {:.1} \
         p99 {:.1} us; CPU us/msg client {} cluster {}; {stage_counts}",
        si(report.rate),
        report.committed,
        report.elapsed_s,
        report.latency_us.p50,
        report.latency_us.p99,
        cpu_figure(report.client_cpu_us_per_msg()),
        cpu_figure(report.cluster_cpu_us_per_msg()),
    );
    Ok((points, report))
}

/// The counts of one client run at each stage of a message's way, per committed message: the client's
/// send calls and datagrams, the members' receive calls, datagrams and records, their egress datagrams
/// and records, and the client's receive calls.
fn stages(report: &remote::ClientReport) -> String {
    let per = |n: f64| n / report.committed.max(1) as f64;
    let (client, members) = (&report.client_stats, &report.endpoints);
    format!(
        "stages per committed msg: client {} send calls, {:.4} datagrams -> members {:.4} receive calls, {:.4} \
         datagrams, {:.3} records -> egress {:.4} datagrams, {:.3} records -> client {:.4} receive calls",
        client.send_calls.map_or("?".into(), |n| format!("{:.4}", per(n as f64))),
        per(client.datagrams_sent as f64),
        per(members.receive_calls as f64),
        per(members.datagrams_in as f64),
        per(members.records_in as f64),
        per(members.datagrams_out as f64),
        per(members.records_out as f64),
        per(client.receive_calls as f64)
    )
}

/// How the client process idles.
fn client_idle_name(client: &ClientProcess) -> String {
    if client.wait {
        return "wait (ppoll on its socket)".into();
    }
    client.idle.map_or_else(|| "sched_yield".to_string(), |i| i.to_string())
}

/// A CPU figure, or `?` where unmeasured.
fn cpu_figure(us: Option<f64>) -> String {
    us.map_or("?".into(), |c| format!("{c:.2}"))
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}

fn print_table(r: &MtuResult) {
    println!("\nMTU {} · {MESSAGE} B · classic/separate", r.mtu);
    println!(
        "  committed msg/s: in-process {}  client {}  ratio {:.2} (target >= {TARGET_RATIO:.2}: {})",
        si(r.mu.mu),
        si(r.client.rate),
        r.ratio(),
        met(r.ratio() >= TARGET_RATIO)
    );
    if let Some((in_process, client, cluster, ratio)) = r.cpu() {
        println!(
            "  CPU us per committed msg: in-process {in_process:.2}  remote {:.2} (client {client:.2} + cluster \
             {cluster:.2})  ratio {ratio:.2} (target <= {CPU_TARGET:.1}: {})",
            client + cluster,
            met(ratio <= CPU_TARGET)
        );
    }
    println!(
        "  {:>5} {:>8} | {:>22} | {:>22} | {:>14} | client p50 <= in-process p50 + floor p50",
        "rho", "lambda", "in-process p50/p99 us", "client p50/p99 us", "UDP RTT p50 us"
    );
    for p in &r.points {
        let c = &p.client.report.latency_us;
        println!(
            "  {:>5.2} {:>8} | {:>22} | {:>22} | {:>14.1} | {} ({:.1} <= {:.1})",
            p.rho,
            si(p.lambda),
            format!("{:.1} / {:.1}", p.in_process.p50, p.in_process.p99),
            format!("{:.1} / {:.1}", c.p50, c.p99),
            r.floor.rtt_us.p50,
            met(p.met(&r.floor)),
            c.p50,
            p.in_process.p50 + r.floor.rtt_us.p50
        );
    }
    for p in &r.points {
        if let Some((in_process, remote, ratio)) = p.cpu() {
            println!(
                "  {:>5.2} CPU us per committed msg: in-process {in_process:.2}  remote {remote:.2} (client {} + cluster \
                 {})  ratio {ratio:.2} (idle polling counts: at low rho it is mostly that)",
                p.rho,
                cpu_figure(p.client.report.client_cpu_us_per_msg()),
                cpu_figure(p.client.report.cluster_cpu_us_per_msg())
            );
        }
    }
    println!(
        "  client key on: closed loop {} msg/s, {:.2} of session tags only (target >= {KEYED_TARGET:.2}: {})",
        si(r.keyed.1.rate),
        r.keyed_ratio(),
        met(r.keyed_ratio() >= KEYED_TARGET)
    );
    for (p, k) in r.points.iter().zip(&r.keyed.0) {
        let (c, k) = (&p.client.report.latency_us, &k.report.latency_us);
        println!(
            "  {:>5.2} {:>8} | client key on p50/p99 {:.1} / {:.1} us | session tags only {:.1} / {:.1} us",
            p.rho,
            si(p.lambda),
            k.p50,
            k.p99,
            c.p50,
            c.p99
        );
    }
}

fn mtu_json(r: &MtuResult) -> Value {
    json!({
        "mtu": r.mtu,
        "in_process": {
            "committed_msgs_per_s": r.mu.mu,
            "windows": r.mu.windows,
            "cpu_us_per_msg": r.mu.cpu_us_per_msg(),
        },
        "cpu_us_per_msg": r.cpu().map(|(in_process, client, cluster, ratio)| json!({
            "in_process": in_process,
            "remote_client": client,
            "remote_cluster": cluster,
            "remote_total": client + cluster,
            "ratio": ratio,
            "target_ratio": CPU_TARGET,
            "ratio_met": ratio <= CPU_TARGET,
        })),
        "client": {
            "committed_msgs_per_s": r.client.rate,
            "committed": r.client.committed,
            "elapsed_s": r.client.elapsed_s,
            "window": MAX_WINDOW,
            "latency_us": r.client.latency_us,
            "duplicates": r.client.duplicates,
            "reconnects": r.client.reconnects,
            "client_endpoints": r.client.endpoints,
            "cpu_us_per_msg": { "client": r.client.client_cpu_us_per_msg(), "cluster": r.client.cluster_cpu_us_per_msg() },
            "client_counts": r.client.client_stats,
        },
        "ratio": r.ratio(),
        "target_ratio": TARGET_RATIO,
        "ratio_met": r.ratio() >= TARGET_RATIO,
        "client_key": {
            "committed_msgs_per_s": r.keyed.1.rate,
            "latency_us": r.keyed.1.latency_us,
            "ratio_to_session_tags_only": r.keyed_ratio(),
            "target_ratio": KEYED_TARGET,
            "ratio_met": r.keyed_ratio() >= KEYED_TARGET,
            "points": r.keyed.0.iter().map(|k| json!({
                "rho": k.rho,
                "achieved": k.report.rate,
                "latency_us": k.report.latency_us,
            })).collect::<Vec<_>>(),
        },
        "udp_rtt": { "samples": r.floor.samples, "lost": r.floor.lost, "rtt_us": r.floor.rtt_us },
        "points": r.points.iter().map(|p| json!({
            "rho": p.rho,
            "lambda": p.lambda,
            "in_process": {
                "achieved": p.in_process_achieved,
                "back_pressured_offers": p.in_process_back_pressured,
                "latency_us": p.in_process,
                "cpu_us_per_msg": p.in_process_cpu,
            },
            "client": {
                "achieved": p.client.report.rate,
                "messages": p.client.messages,
                "warmup": p.client.warmup,
                "latency_us": p.client.report.latency_us,
                "service_latency_us": p.client.report.service_latency_us,
                "client_endpoints": p.client.report.endpoints,
                "cpu_us_per_msg": {
                    "client": p.client.report.client_cpu_us_per_msg(),
                    "cluster": p.client.report.cluster_cpu_us_per_msg(),
                },
                "client_counts": p.client.report.client_stats,
            },
            "floor_p50_us": r.floor.rtt_us.p50,
            "client_p50_within_in_process_plus_floor": p.met(&r.floor),
        })).collect::<Vec<_>>(),
        "warnings": r.warnings,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(bad) = cli.rho.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        eprintln!("--rho {bad}: every rho must be a positive number");
        return ExitCode::from(2);
    }
    let settings = Settings::new(cli.quick);
    let client = match ClientProcess::find(env!("CARGO_BIN_EXE_qc-client")) {
        Ok(client) => ClientProcess {
            idle: cli.client_idle,
            linger: Duration::from_micros(cli.client_linger_us),
            wait: cli.client_wait,
            core: cli.client_core.or_else(|| layout(&cli).client_core()),
            sched_idle: cli.client_sched_idle,
            ..client
        },
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let started = SystemTime::now();
    let clock = Instant::now();
    let dir = target_dir().join("client").join(report::utc_dir_name(started));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let layout = layout(&cli).describe(sender_idle(&cli, &client));
    println!(
        "client bench{}: 3 nodes over UDP loopback in this process, a qc-client process ({}, idle {}, {}{}), \
         {MESSAGE} B messages, {} cores",
        if settings.quick { " (quick)" } else { "" },
        client.binary.display(),
        client_idle_name(&client),
        client.core.map_or_else(|| "on any core".to_string(), |c| format!("on core {c}")),
        if client.sched_idle { " under SCHED_IDLE" } else { "" },
        quorumcast_driver::agent::available_cores()
    );
    println!("layout: {layout}");
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &mtu in &cli.mtu {
        match run_mtu(mtu, &cli, &settings, &client, &dir) {
            Ok(r) => results.push(r),
            Err(e) => {
                println!("MTU {mtu}: FAILED: {e}");
                failures.push(json!({ "mtu": mtu, "error": e.to_string() }));
            }
        }
    }
    for r in &results {
        print_table(r);
    }
    let summary = json!({
        "bench": "client",
        "quick": settings.quick,
        "timestamp": report::utc_timestamp(started),
        "host": host(),
        "layout": layout,
        "message_bytes": MESSAGE,
        "client": {
            "binary": client.binary,
            "idle": client_idle_name(&client),
            "core": client.core,
        },
        "settings": {
            "mu_windows": settings.timings.mu_windows,
            "mu_window_s": settings.timings.mu_window.as_secs_f64(),
            "point_s": settings.timings.point.as_secs_f64(),
            "rtt_samples": settings.rtt_samples,
            "client_closed_loop_s": settings.client_duration.as_secs_f64(),
        },
        "mtus": results.iter().map(mtu_json).collect::<Vec<_>>(),
        "failures": failures,
    });
    let path = dir.join("summary.json");
    let written = std::fs::write(&path, serde_json::to_string_pretty(&summary).unwrap_or_default() + "\n")
        .map_err(|e| e.to_string())
        .and_then(|()| report::link_latest(&dir).map_err(|e| e.to_string()));
    match written {
        Ok(()) => println!("\nsummary: {} ({:.0} s)", path.display(), clock.elapsed().as_secs_f64()),
        Err(e) => println!("\nsummary not written: {e}"),
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
