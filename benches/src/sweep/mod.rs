//! The sweep: measure this host's S and C, then, for each configuration, a 3-node loopback
//! cluster's sustained capacity mu beside the model's `(S - C) / D x M_pkt`, the stage that saturated
//! first, and the latency at paced fractions of mu; written as a report (see [`crate::report`]).
//!
//! `cargo bench --bench sweep -- [--quick|--full|--tiny] [--mtu 1408,8192] [--idle noop,sleep-ns:1000,backoff]
//! [--msg 32,128] [--send-mode classic,mmsg,gso] [--control separate,piggyback] [--rho 0.1,0.5] [--out DIR]`
//! runs [`run`] with [`parse_args`]; the test suite runs the `tiny` profile the same way.
//!
//! Order of work:
//! 1. S ([`measure::probe_send_rates`]): one thread's datagrams per second to D = 2 loopback destinations,
//!    datagram = MTU, per send mode (the effective datagrams/s for mmsg and gso).
//! 2. C ([`measure::probe_control`]): per consensus idle strategy, the leader Sender's consensus control
//!    syscalls per second (commit frames x D, from the counters) while the cluster carries a moderate fixed
//!    load (classic, separate commit frames). The Sender's "control syscalls" counter also counts its polls
//!    of the control socket, one per duty cycle, which at a moderate load are mostly idle cycles and take
//!    nothing from the data budget; the report (and `--verbose`) shows that total beside C.
//! 3. Per configuration: start a cluster ([`cluster::LoadCluster`], layout in the report), measure mu under a
//!    saturating load in windows, with S for the configuration's mode and MTU probed in slices between
//!    them while the cluster's threads are paused (S drifts on a shared host), and name the bottleneck
//!    ([`bottleneck::classify`]); then, on a fresh cluster, per rho offer `lambda = rho x mu` open loop and
//!    record latency histograms ([`measure::run_point`]). During each point threads sleeping 1 ms at a
//!    time, one pinned to each core at real-time priority and one free, record how late they wake
//!    ([`hiccup::WakeProbe`]: the host's own stalls over the same window, on every core),
//!    and the CPU time other processes took is counted from `/proc` ([`hiccup::HostCpu`]), task by task
//!    ([`hiccup::HostTasks`]: the kernel's threads too, which the real-time probe preempts and so does
//!    not see); the point is then judged ([`PointResult::assess`]): saturated when it carried less than
//!    95% of its offered load, and at rho <= 0.5 held to the tail target `p99 <= probe p99 + 3 x p50`, a
//!    miss naming the agent whose longest duty cycle outlasted the host's longest stall plus all its
//!    tasks' run time. The report's summary line counts the points
//!    flagged (other processes past 5% of a core), saturated, and meeting or missing the target.
//! 4. Write `summary.json`, `summary.md`, `report.html`, the `.hgrm` files and one SVG chart per
//!    configuration into `<out>/<timestamp>/`, and point `<out>/latest` at it.
//!
//! The console speaks to a person: a progress bar over the points (on a terminal), warnings that need
//! one (host settings, refused pinning; each once), a failed configuration, and at the end one table
//! ([`report::console_table`]: per configuration mu measured against the prediction, the latency at rho
//! 0.5, the flags) and where the report is. [`SweepOptions::verbose`] (`--verbose`) adds every probe's
//! and point's detail as it is measured, as before; the report holds it either way.
//!
//! With [`SweepOptions::client`] (`cargo bench --bench sweep -- --client-process`), step 3's points take
//! their load from a `qc-client` process instead ([`remote::client_point`]): mu is still measured
//! in-process (the model comparison is unchanged), then each point's cluster takes remote clients and a
//! spawned client offers `lambda = rho x mu` open loop; the point's latency is the client's round trip
//! (intended send time to commit acknowledgement at the client), its `.hgrm` files the client's, and the
//! report says so (`latency_source`, the profile's name ends in `-client`). That cluster's Sender backs off
//! instead of spinning, so that the client process finds a core.
//!
//! The mu cluster's leader Sender splits its time (`NodeBuilder::sender_time_split`; the points' clusters
//! run without it): over the mu windows, its wall time in data calls, control calls, own code, idle and
//! between cycles gives its budget ([`crate::budget`]): the capacity its measured time per datagram pays
//! for, held within 5% of mu where the Sender saturated first, and the seed model's error taken apart by
//! term (a data call's cost under load against the probe's, control calls, own code, fill, idle). The
//! sweep measures a clock read's cost first and reports the share of the Sender's time the timing took.
//!
//! The prediction: S the mean of the slices probed between the mu windows; C the leader Sender's control syscalls
//! per second during the configuration's own saturated run, less its polls on duty cycles that sent
//! nothing (commit frames to each follower, acknowledgement reads, heartbeats: what control traffic took
//! from the data budget while mu was measured). The C probe's value, at a moderate load, gives a second
//! prediction beside it (`mu_predicted_probe_c`).

pub mod bottleneck;
pub mod cluster;
pub mod measure;
pub mod profile;
pub mod remote;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

use crate::budget::{self, SeedInputs, SenderBudget};
use crate::hiccup::{self, Hiccups, HostCpu, WakeProbe};
use crate::model::{Model, ModelError};
use crate::probe::SendRate;
use crate::report::{
    self, AgentDutyCycles, CProbe, CProbeLoad, ConfigResult, CycleQuantiles, Host, OtherCpu, PointResult, ReportError,
    SProbe, SProbeEntry, SweepReport, WakeLateness, C_ALONE, C_SHARED, NS_PER_US, OTHER_CPU_FLAG_SHARE,
};
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::transport::SendMode;

use cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use measure::{SendTimes, D};
use profile::{ConfigSpec, Control, Profile, C_PROBE_RHOS};

/// Why a sweep could not run or finish.
#[derive(Debug)]
pub enum SweepError {
    /// A bad argument or profile; the message says what to change.
    Config(String),
    /// An I/O error (sockets, files).
    Io(std::io::Error),
    /// The S probe failed.
    Probe(String),
    /// A cluster did not start, stalled, or an agent failed.
    Cluster(String),
    /// The model refused its inputs.
    Model(ModelError),
    /// The report could not be written.
    Report(ReportError),
}

impl fmt::Display for SweepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "bad sweep arguments: {e}"),
            Self::Io(e) => write!(f, "I/O error: {e}"),
            Self::Probe(e) => write!(f, "{e}"),
            Self::Cluster(e) => write!(f, "cluster: {e}"),
            Self::Model(e) => write!(f, "model: {e}"),
            Self::Report(e) => write!(f, "report: {e}"),
        }
    }
}

impl std::error::Error for SweepError {}

impl From<std::io::Error> for SweepError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<ReportError> for SweepError {
    fn from(e: ReportError) -> Self {
        Self::Report(e)
    }
}

/// What to run and where to write it.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepOptions {
    /// The grid and timings.
    pub profile: Profile,
    /// The directory that holds report directories and the `latest` link (default `target/sweep`).
    pub out: PathBuf,
    /// Where the cluster's threads go.
    pub layout: Layout,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    /// Print every probe's and point's detail as it is measured (`--verbose`); without it the console
    /// shows the progress bar, each warning once, and the closing table (the detail is in the report).
    pub verbose: bool,
    /// Offer each utilisation point's load from this client process instead of the harness (see the
    /// module documentation); `None`: the in-process load generator.
    pub client: Option<remote::ClientProcess>,
}

const USAGE: &str =
    "usage: sweep [--quick|--full|--tiny] [--verbose] [--mtu 1408,8192] [--idle noop,sleep-ns:1000,backoff] \
     [--msg 32,128,224,512,1344] [--send-mode classic,mmsg,gso] [--control separate,piggyback] \
     [--rho 0.1,0.3,0.5,0.7,0.9] [--out DIR]";

fn list<T>(flag: &str, value: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, SweepError> {
    value
        .split(',')
        .filter(|v| !v.is_empty())
        .map(|v| parse(v.trim()).ok_or_else(|| SweepError::Config(format!("{flag} {v:?} is not valid; {USAGE}"))))
        .collect()
}

/// Parses the sweep's arguments (those after `--`; cargo's own `--bench` is ignored). The profile flag
/// picks the base (quick by default); every list flag then replaces that list. `default_out` is used when
/// there is no `--out`.
pub fn parse_args(args: &[String], default_out: &Path) -> Result<SweepOptions, SweepError> {
    let mut profile = Profile::quick();
    for arg in args {
        if let Some(named) = arg.strip_prefix("--").and_then(Profile::named) {
            profile = named;
        }
    }
    let mut out = default_out.to_path_buf();
    let mut custom = false;
    let mut verbose = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        verbose |= flag == "--verbose";
        if matches!(flag, "--quick" | "--full" | "--tiny" | "--bench" | "--verbose") {
            i += 1;
            continue;
        }
        let value = args.get(i + 1).ok_or_else(|| SweepError::Config(format!("{flag} needs a value; {USAGE}")))?;
        custom |= flag != "--out";
        match flag {
            "--mtu" => profile.mtus = list(flag, value, |v| v.parse().ok())?,
            "--idle" => profile.idles = list(flag, value, |v| v.parse::<IdleStrategyConfig>().ok())?,
            "--msg" => profile.msgs = list(flag, value, |v| v.parse().ok())?,
            "--send-mode" => profile.send_modes = list(flag, value, |v| v.parse::<SendMode>().ok())?,
            "--control" => profile.controls = list(flag, value, Control::parse)?,
            "--rho" => profile.rhos = list(flag, value, |v| v.parse().ok())?,
            "--out" => out = PathBuf::from(value),
            _ => return Err(SweepError::Config(format!("unknown argument {flag:?}; {USAGE}"))),
        }
        i += 2;
    }
    if custom {
        profile.name = format!("{}-custom", profile.name);
    }
    profile.validate().map_err(SweepError::Config)?;
    Ok(SweepOptions { profile, out, layout: Layout::for_host(), progress: true, verbose, client: None })
}

/// The machine: CPU model, usable cores, kernel release.
pub fn host() -> Host {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(|| "unknown".to_string(), |(_, v)| v.trim().to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    Host { cpu, cores: quorumcast_driver::agent::available_cores() as u32, kernel }
}

/// What a finished sweep left.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The report directory (`<out>/<timestamp>`).
    pub dir: PathBuf,
    /// What `summary.json` holds.
    pub report: SweepReport,
    /// Configurations that failed (cluster error), each with its error; they are not in the report.
    pub failures: Vec<String>,
}

/// The sweep's console: a progress bar over the sweep's points (on a terminal; indicatif hides it
/// elsewhere) whose message names the probe or configuration running, and the lines printed above it, or
/// plainly when it is hidden. The bar is redrawn when it moves or its message changes, never by a
/// ticker thread of its own, which would wake on the cores being measured.
///
/// Without `verbose` only what a person needs is printed: warnings (each text once), failures, and the
/// closing table; the probes' and points' detail ([`detail`](Self::detail)) goes to the report alone.
struct Progress {
    bar: ProgressBar,
    verbose: bool,
    /// The warnings printed so far (without `verbose`, a repeated one is not printed again).
    warned: Mutex<HashSet<String>>,
    /// The configuration running, `[3/12] MTU 1408 128 B backoff classic/separate`, for the bar's message.
    at: Mutex<String>,
}

impl Progress {
    fn new(enabled: bool, verbose: bool, points: usize) -> Self {
        // A sweep that fails part way leaves no bar behind its error.
        let bar = if enabled {
            ProgressBar::new(points as u64).with_finish(ProgressFinish::AndClear)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(Self::style(false));
        Self { bar, verbose, warned: Mutex::new(HashSet::new()), at: Mutex::new(String::new()) }
    }

    /// The bar's look; `eta` once a point has finished (before, the time left is not known).
    fn style(eta: bool) -> ProgressStyle {
        // `wide_msg` is cut to the terminal's width: a line that wrapped would not be cleared on redraw.
        let template = if eta {
            "{elapsed_precise} [{bar:20}] {pos}/{len} points, ~{eta} left  {wide_msg}"
        } else {
            "{elapsed_precise} [{bar:20}] {pos}/{len} points  {wide_msg}"
        };
        ProgressStyle::with_template(template)
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
    }

    /// Prints `text` (above the bar while it is drawn).
    fn line(&self, text: &str) {
        if self.bar.is_hidden() || self.bar.is_finished() {
            println!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    /// Prints `text` under `--verbose` only: the probes' and points' measurements, which the report holds.
    fn detail(&self, text: &str) {
        if self.verbose {
            self.line(text);
        }
    }

    /// Prints `warning: {text}`: under `--verbose` every time, indented by `indent` beside the detail it
    /// belongs to; otherwise once per distinct text, on one line.
    fn warn(&self, indent: &str, text: &str) {
        if self.verbose {
            self.line(&format!("{indent}warning: {text}"));
        } else if self.warned.lock().unwrap_or_else(|e| e.into_inner()).insert(text.to_string()) {
            self.line(&format!("warning: {text}"));
        }
    }

    /// Whether the console shows neither the bar nor the detail (output not a terminal, no `--verbose`):
    /// then one plain line per configuration says how far the sweep is.
    fn plain(&self) -> bool {
        !self.verbose && self.bar.is_hidden()
    }

    /// Names the configuration now running, for the bar's messages ([`phase`](Self::phase)).
    fn set_config(&self, label: String) {
        *self.at.lock().unwrap_or_else(|e| e.into_inner()) = label;
    }

    /// Shows `{configuration}: {what}` on the bar.
    fn phase(&self, what: &str) {
        let at = self.at.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.bar.set_message(if at.is_empty() { what.to_string() } else { format!("{at}: {what}") });
    }

    /// Moves the bar to `done` points (a failed configuration's points count as done); the time left is
    /// estimated from the points' pace alone, not the host probes before them.
    fn points_done(&self, done: usize) {
        if self.bar.position() == 0 && done > 0 {
            self.bar.set_style(Self::style(true));
            self.bar.reset_eta();
        }
        self.bar.set_position(done as u64);
    }
}

fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// Runs the sweep of `options` and writes its report; returns the report directory and the report.
pub fn run(options: &SweepOptions) -> Result<SweepOutcome, SweepError> {
    let profile = &options.profile;
    profile.validate().map_err(SweepError::Config)?;
    let started = SystemTime::now();
    let dir = options.out.join(report::utc_dir_name(started));
    std::fs::create_dir_all(&dir)?;
    let configs = profile.configs();
    let progress = Progress::new(options.progress, options.verbose, configs.len() * profile.rhos.len());
    let mut layout = options.layout.describe(profile.sender_idle);
    if let Some(client) = &options.client {
        layout += &format!(" {}", client_note(client));
    }
    progress.line(&format!(
        "sweep ({}): {} configurations x {} rho points, estimate {:.0} s; report in {}",
        profile.name,
        configs.len(),
        profile.rhos.len(),
        profile.estimate().as_secs_f64(),
        dir.display()
    ));
    progress.detail(&format!("layout: {layout}"));
    for warning in cluster::window_warning().into_iter().chain(hiccup::damon_warning()) {
        progress.warn("", &warning);
    }
    let clock = Instant::now();

    progress.phase("S probe");
    let rates =
        measure::probe_send_rates(&profile.mtus, &profile.send_modes, &profile.timings, options.layout.probe_cores())?;
    for r in &rates {
        progress.detail(&format!(
            "S  {:>5} B {:<7} {:>8} datagrams/s in {:>8} syscalls/s (D = {D})",
            r.datagram_bytes,
            r.send_mode.as_str(),
            rate(r.datagrams_per_s),
            rate(r.syscalls_per_s)
        ));
    }
    let t = &profile.timings;

    progress.phase("hiccup probe");
    let hiccups = hiccup::probe(&options.layout.busy_cores(), t.hiccup);
    progress.detail(&format!("host stalls: {}", hiccups.describe()));

    let c_probe = probe_c(options, profile, &rates, &progress)?;
    let clock_read_ns = budget::clock_read_ns();
    progress.detail(&format!(
        "clock: {clock_read_ns:.1} ns per read (the Sender's time split reads it twice per send or poll call and once \
         per duty cycle, in the mu runs only)"
    ));

    let mut results = Vec::with_capacity(configs.len());
    let mut failures = Vec::new();
    let mut times = SendTimes::new();
    if progress.plain() {
        progress.line(&format!("host probes done ({:.0} s)", clock.elapsed().as_secs_f64()));
    }
    let configs_clock = Instant::now();
    for (index, config) in configs.iter().enumerate() {
        let remaining = profile.config_estimate() * (configs.len() - index) as u32;
        let at = format!("[{}/{}] {config}", index + 1, configs.len());
        progress.set_config(at.clone());
        progress.phase("mu");
        let times = &mut times;
        let probes = HostProbes { rates: &rates, c: &c_probe, hiccups: &hiccups, clock_read_ns };
        let outcome = match run_config(options, config, &probes, times, &dir, &progress) {
            Ok(result) => {
                results.push(result);
                "done"
            }
            Err(e) => {
                progress.line(&format!("{config}: FAILED, left out of the report: {e}"));
                failures.push(format!("{config}: {e}"));
                "failed"
            }
        };
        progress.points_done((index + 1) * profile.rhos.len());
        let (elapsed, left) =
            (clock.elapsed().as_secs_f64(), remaining.saturating_sub(profile.config_estimate()).as_secs_f64());
        progress.detail(&format!("   elapsed {elapsed:.0} s, about {left:.0} s left"));
        if progress.plain() {
            // The time left at the pace of the configurations so far.
            let pace = configs_clock.elapsed().as_secs_f64() / (index + 1) as f64;
            let left = pace * (configs.len() - index - 1) as f64;
            progress.line(&format!("{at}: {outcome} ({elapsed:.0} s elapsed, about {left:.0} s left)"));
        }
    }
    progress.set_config(String::new());
    progress.phase("writing the report");

    let report = SweepReport {
        profile: if options.client.is_some() { format!("{}-client", profile.name) } else { profile.name.clone() },
        timestamp: report::utc_timestamp(started),
        host: host(),
        layout,
        s_probe: SProbe {
            d: D as u32,
            sizes: rates
                .iter()
                .map(|r| SProbeEntry {
                    datagram: r.datagram_bytes as u32,
                    send_mode: r.send_mode.as_str().to_string(),
                    s: r.datagrams_per_s,
                })
                .collect(),
        },
        c_probe,
        configs: results,
        hiccups: Some(hiccups),
    };
    report::write_report(&dir, &report, &[])?;
    report::link_latest(&dir)?;
    progress.bar.finish_and_clear();
    let flags = report.flags();
    progress.detail(&format!(
        "report: {} ({:.0} s); {}",
        dir.display(),
        clock.elapsed().as_secs_f64(),
        flags.describe()
    ));
    progress.line("");
    progress.line(report::console_table(&report).trim_end());
    if flags.host_busy > 0 {
        progress.warn(
            "",
            &format!(
                "{} of {} points ran while other processes took more than {:.0}% of a core: their latency is not \
                 the engine's alone (the report's \"other CPU\" column)",
                flags.host_busy,
                flags.points,
                100.0 * OTHER_CPU_FLAG_SHARE
            ),
        );
    }
    for failure in &failures {
        progress.line(&format!("failed configuration: {failure}"));
    }
    let latest = options.out.join(report::LATEST);
    progress.line(&format!(
        "report: {} and {} ({:.0} s)",
        latest.join("report.html").display(),
        latest.join("summary.md").display(),
        clock.elapsed().as_secs_f64()
    ));
    Ok(SweepOutcome { dir, report, failures })
}

/// What the client-process mode changes, for the layout line.
fn client_note(client: &remote::ClientProcess) -> String {
    format!(
        "Latency points: load from a qc-client process ({}, idle {}), latency = client round trip (offer to commit \
         acknowledgement at the client); their clusters take remote clients, and their Sender backs off instead of \
         spinning so that the client process finds a core.",
        client.binary.display(),
        client.idle.map_or_else(|| "sched_yield".to_string(), |i| i.to_string())
    )
}

/// The C probe: for each consensus idle strategy, a cluster whose consensus agent runs its own duty cycle
/// on a core of its own ([`Layout::for_c_probe`]), paced at [`C_PROBE_RHOS`] of the model's capacity for
/// MTU 1408, 128 B, classic (from this host's S probe), counting commit frames, the Sender's control
/// syscalls and idle polls, and the consensus agent's duty cycles; then the same with the leader's
/// consensus agent, Sender and Receiver on one thread ([`Layout::for_c_probe_shared`]).
fn probe_c(
    options: &SweepOptions,
    profile: &Profile,
    rates: &[crate::probe::SendRate],
    progress: &Progress,
) -> Result<Vec<CProbe>, SweepError> {
    let t = &profile.timings;
    let (mtu, msg) = (1408, 128);
    let s = measure::rate_for(rates, SendMode::Classic, mtu).map_or(0.0, |r| r.datagrams_per_s);
    let capacity = predict(&ConfigSpec::c_probe(mtu, msg), s, 0.0).1;
    let capacity = if capacity > 0.0 { capacity } else { t.c_rate / C_PROBE_RHOS[1] };
    let idles = profile.c_probe_idles();
    let layouts = [(C_ALONE, options.layout.for_c_probe()), (C_SHARED, options.layout.for_c_probe_shared())];
    for (name, layout) in &layouts {
        progress.detail(&format!("C probe layout {name}: {}", layout.describe(IdleStrategyConfig::default())));
    }
    let mut probes = Vec::new();
    let count = layouts.len() * idles.len();
    for (name, layout) in layouts {
        for &idle in &idles {
            progress.phase(&format!("C probe {}/{count}: {name}, consensus idle {idle}", probes.len() + 1));
            probes.push(probe_c_with(layout, name, idle, (mtu, msg, capacity), t, progress)?);
        }
    }
    Ok(probes)
}

/// The C probe of one layout (`name`) and consensus idle strategy: a cluster of `msg`-byte messages at MTU
/// `mtu`, paced at [`C_PROBE_RHOS`] of `capacity`.
fn probe_c_with(
    layout: Layout,
    name: &str,
    idle: IdleStrategyConfig,
    (mtu, msg, capacity): (usize, usize, f64),
    t: &profile::Timings,
    progress: &Progress,
) -> Result<CProbe, SweepError> {
    let spec = ClusterSpec { consensus_idle: idle, ..ClusterSpec::new(mtu, msg, layout) };
    let loads = on_harness_thread(|| {
        let mut cluster = LoadCluster::start(&spec)?;
        let loads: Result<Vec<_>, _> =
            C_PROBE_RHOS.iter().map(|&rho| measure::probe_control(&mut cluster, t, rho * capacity)).collect();
        cluster.close()?;
        loads
    })?;
    for (rho, c) in C_PROBE_RHOS.iter().zip(&loads) {
        progress.detail(&format!(
            "C  {name:<15} consensus idle {:<20} rho {rho:.1} ({:>6}/s offered, {:>6}/s committed): commit frames {:>6}/s \
             (C = {:>6}/s), control syscalls {:>7}/s of which idle polls {:>7}/s, consensus cycles {:>7}/s",
            idle.to_string(),
            rate(c.offered_per_s),
            rate(c.committed_per_s),
            rate(c.commit_frames_per_s),
            rate(c.c_per_s),
            rate(c.control_per_s),
            rate(c.idle_polls_per_s),
            rate(c.consensus_cycles_per_s)
        ));
        if c.committed_per_s < 0.5 * c.offered_per_s {
            progress.detail(
                "   warning: the cluster carried under half the load it was offered; this C is not at that load",
            );
        }
    }
    let middle = &loads[1];
    let probe = CProbe {
        idle: idle.to_string(),
        layout: name.to_string(),
        c_per_s: middle.c_per_s,
        data_syscalls_per_s: middle.data_per_s,
        loads: C_PROBE_RHOS
            .iter()
            .zip(&loads)
            .map(|(&rho, c)| CProbeLoad {
                rho,
                offered_msgs_per_s: c.offered_per_s,
                committed_msgs_per_s: c.committed_per_s,
                commit_frames_per_s: c.commit_frames_per_s,
                control_syscalls_per_s: c.control_per_s,
                idle_polls_per_s: c.idle_polls_per_s,
                consensus_cycles_per_s: c.consensus_cycles_per_s,
            })
            .collect(),
    };
    Ok(probe)
}

/// The C probe's value for `config`'s idle strategy (0 when not probed).
fn probe_c_for(config: &ConfigSpec, c_probe: &[CProbe]) -> f64 {
    let idle = config.idle.to_string();
    c_probe.iter().find(|c| c.idle == idle && c.layout == C_ALONE).map_or(0.0, |c| c.c_per_s)
}

/// The model's mu and M_pkt for `config` with `s` and `c`; mu is 0 (and `why` says why) when the model
/// cannot predict.
fn predict(config: &ConfigSpec, s: f64, c: f64) -> (u32, f64, Option<String>) {
    match Model::new(s, c, D as u32).and_then(|m| m.analyze(config.mtu, config.msg)) {
        Ok(capacity) => (capacity.packing.per_datagram().floor() as u32, capacity.mu, None),
        Err(e) => {
            let m_pkt = crate::model::messages_per_datagram(config.mtu, config.msg).map_or(0, |p| p.messages as u32);
            (m_pkt, 0.0, Some(e.to_string()))
        }
    }
}

/// What the sweep measured of the host before the clusters ran.
struct HostProbes<'a> {
    /// S per MTU and send mode.
    rates: &'a [SendRate],
    /// C per idle strategy.
    c: &'a [CProbe],
    /// The host's own stalls.
    hiccups: &'a Hiccups,
    /// Nanoseconds one read of the clock the Sender's time split uses takes ([`budget::clock_read_ns`]).
    clock_read_ns: f64,
}

fn run_config(
    options: &SweepOptions,
    config: &ConfigSpec,
    probes: &HostProbes<'_>,
    times: &mut SendTimes,
    dir: &Path,
    progress: &Progress,
) -> Result<ConfigResult, SweepError> {
    let profile = &options.profile;
    let t = &profile.timings;
    // S drifts on a shared host (by a third within seconds, on a small VM): probe it for this mode and MTU
    // in slices between the mu windows, with the cluster paused, and predict with the slices' mean, so
    // that the prediction and mu see the same machine; the slices stay in the report.
    // A slice that measured nothing (a probe that found no rate) takes the sweep's first probe.
    let cores = options.layout.probe_cores();
    let first = measure::rate_for(probes.rates, config.send_mode, config.mtu).map(|r| r.datagrams_per_s);
    let probe = || -> Result<Option<f64>, SweepError> {
        let fresh = measure::probe_send_rates(&[config.mtu], &[config.send_mode], t, cores)?;
        Ok(measure::rate_for(&fresh, config.send_mode, config.mtu).map(|r| r.datagrams_per_s).or(first))
    };
    let spec = ClusterSpec {
        send_mode: config.send_mode,
        control: config.control,
        consensus_idle: config.idle,
        sender_idle: profile.sender_idle,
        ..ClusterSpec::new(config.mtu, config.msg, options.layout)
    };
    // The mu cluster's Sender splits its time (its budget); the points' clusters run without the timing.
    let mu_spec = ClusterSpec { time_split: true, ..spec.clone() };
    let mu = with_cluster(&mu_spec, progress, |cluster| measure::measure_mu(cluster, t, probe))?;
    let mut result = summarize(config, probes, &mu, progress);
    let client = options.client.as_ref();
    let points_spec = match client {
        None => spec,
        Some(_) => ClusterSpec {
            clients: true,
            sender_idle: if spec.sender_idle.is_busy() { IdleStrategyConfig::default() } else { spec.sender_idle },
            ..spec.clone()
        },
    };
    if let Some(client) = client {
        result.latency_source = Some(format!(
            "client round trip (a qc-client process, idle {}, to the commit acknowledgement)",
            client.idle.map_or_else(|| "sched_yield".to_string(), |i| i.to_string())
        ));
    }
    with_cluster(&points_spec, progress, |cluster| {
        measure_points(cluster, profile, &mut result, mu.mu, times, probes.hiccups, dir, progress, client)
    })?;
    Ok(result)
}

/// Starts a cluster for `spec` on a fresh harness thread ([`on_harness_thread`]: the nodes start with the
/// whole affinity mask, then the thread pins itself), runs `work` on it, and closes it; an error of `work`
/// comes first, then one of closing.
fn with_cluster<T: Send>(
    spec: &ClusterSpec,
    progress: &Progress,
    work: impl FnOnce(&mut LoadCluster) -> Result<T, SweepError> + Send,
) -> Result<T, SweepError> {
    on_harness_thread(|| {
        let mut cluster = LoadCluster::start(spec)?;
        for warning in cluster.warnings() {
            progress.warn("   ", warning);
        }
        let outcome = work(&mut cluster);
        let closed = cluster.close();
        let value = outcome?;
        closed?;
        Ok(value)
    })
}

/// The configuration's result without its points: the prediction from the mean of the S slices probed
/// around the mu windows and the C of the saturated run, beside the measured mu; printed under `--verbose`.
fn summarize(config: &ConfigSpec, probes: &HostProbes<'_>, mu: &measure::MuRun, progress: &Progress) -> ConfigResult {
    let s = mu.s();
    let c_probe = probe_c_for(config, probes.c);
    let c = mu.control_per_s;
    let (m_pkt, mu_predicted, why) = predict(config, s, c);
    if let Some(why) = why {
        progress.detail(&format!("   no prediction: {why}"));
    }
    let mu_predicted_probe_c = if c_probe > 0.0 { predict(config, s, c_probe).1 } else { 0.0 };
    let sender_share = mu.evidence.sender_share;
    let result = ConfigResult {
        mtu: config.mtu as u32,
        idle: config.idle.to_string(),
        msg: config.msg as u32,
        send_mode: config.send_mode.as_str().to_string(),
        control: config.control.as_str().to_string(),
        s,
        s_before: mu.s_slices.first().copied().unwrap_or(0.0),
        s_after: mu.s_slices.last().copied().unwrap_or(0.0),
        s_slices: mu.s_slices.clone(),
        c,
        c_probe,
        mu_predicted_probe_c,
        sender_share,
        d: D as u32,
        m_pkt,
        mu_predicted,
        mu_measured: mu.mu,
        bottleneck: bottleneck::classify(&mu.evidence).text,
        sender_budget: SenderBudget::of(
            &mu.sender,
            &SeedInputs { s, c, d: D as u32, m_pkt: f64::from(m_pkt) },
            probes.clock_read_ns,
        ),
        points: Vec::new(),
        agents: Vec::new(),
        latency_source: None,
    };
    let (s_min, s_max) = result.s_band();
    let error = result.mu_error_percent().map_or("n/a".to_string(), |e| format!("{e:+.1}%"));
    progress.detail(&format!(
        "{config}: mu measured {} msg/s (windows {}), predicted ({} - {}) / {D} x {m_pkt} = {} msg/s, error {error} \
         (S {} slices {}-{}; with the C probe's {}/s: {}); sender {} data syscalls/s ({:.0}% of S) + {} \
         control ({}/s commit frames x {D}; {} idle polls/s left out), {:.1} msgs/datagram; bottleneck: {}",
        rate(mu.mu),
        mu.windows.iter().map(|&w| rate(w)).collect::<Vec<_>>().join(" "),
        rate(s),
        rate(c),
        rate(mu_predicted),
        mu.s_slices.len(),
        rate(s_min),
        rate(s_max),
        rate(c_probe),
        rate(mu_predicted_probe_c),
        rate(mu.data_per_s),
        result.sender_share * 100.0,
        rate(mu.control_per_s),
        rate(mu.c_per_s / D as f64),
        rate(mu.idle_polls_per_s),
        mu.messages_per_datagram,
        result.bottleneck
    ));
    match &result.sender_budget {
        Some(b) => {
            progress.detail(&format!("   {}", b.describe(mu.mu)));
            if !result.sender_bound() {
                progress
                    .detail("   (the budget is held to mu only where the Sender saturated first: not compared here)");
            }
        }
        None => progress.detail("   sender time: not split (no data sent, or the split was off)"),
    }
    result
}

/// Runs every utilisation point of the profile at `rho x mu` on `cluster`, writing each point's
/// histograms under `dir` and adding it to `result`; with `client`, each point's load comes from that
/// client process (see [`remote::client_point`]). Under `--verbose` each point is printed beside
/// `hiccups`, the host's own stalls.
#[allow(clippy::too_many_arguments)]
fn measure_points(
    cluster: &mut LoadCluster,
    profile: &Profile,
    result: &mut ConfigResult,
    mu: f64,
    times: &mut SendTimes,
    hiccups: &Hiccups,
    dir: &Path,
    progress: &Progress,
    client: Option<&remote::ClientProcess>,
) -> Result<(), SweepError> {
    let t = &profile.timings;
    for &rho in &profile.rhos {
        progress.phase(&format!("rho {rho:.2}"));
        let stem = result.point_stem(rho);
        let watch = HostWatch::start(progress);
        let mut entry = match client {
            None => in_process_point(cluster, rho, mu, t, times, dir, &stem, progress)?,
            Some(client) => {
                let files = (dir.join(PointResult::hgrm_path(&stem)), dir.join(PointResult::service_hgrm_path(&stem)));
                let json = dir.join("client").join(format!("{stem}.json"));
                let sizes = (result.msg as usize, result.mtu as usize);
                let point = remote::client_point(cluster, client, rho, mu, sizes, t, json, Some(files))?;
                let report = &point.report;
                progress.detail(&format!(
                    "   rho {rho:.2}: client process: lambda {} achieved {} msg/s; from intended p50 {:.1} p99 {:.1} \
                     p99.9 {:.1} max {:.0} us; from offer p50 {:.1} p99 {:.1} us ({} messages after {} of warm-up)",
                    rate(point.lambda),
                    rate(report.rate),
                    report.latency_us.p50,
                    report.latency_us.p99,
                    report.latency_us.p999,
                    report.latency_us.max,
                    report.service_latency_us.p50,
                    report.service_latency_us.p99,
                    point.messages,
                    point.warmup
                ));
                PointResult {
                    rho,
                    lambda: point.lambda,
                    achieved: report.rate,
                    latency_us: report.latency_us,
                    service_latency_us: report.service_latency_us,
                    hgrm: PointResult::hgrm_path(&stem),
                    service_hgrm: PointResult::service_hgrm_path(&stem),
                    agents: point.agents.iter().map(duty_cycles).collect(),
                    past_1ms_share: None,
                    steal_share: 0.0,
                    wake_probe: None,
                    tail_target: None,
                    other_cpu: None,
                    thread_waits: Vec::new(),
                    host_tasks: None,
                    saturated: false,
                }
            }
        };
        watch.finish(&mut entry);
        if let Some(worst) = entry.agents.iter().max_by_key(|a| a.duty_cycle_ns.max) {
            progress.detail(&format!(
                "            longest agent duty cycle: {} up to {} us (its p99 {} us, p99.9 {} us)",
                worst.name,
                worst.duty_cycle_ns.max / 1000,
                worst.duty_cycle_ns.p99 / 1000,
                worst.duty_cycle_ns.p999 / 1000
            ));
        }
        let measured = entry.past_1ms_share.map_or_else(|| "not known".into(), |s| format!("{:.2}%", 100.0 * s));
        progress.detail(&format!(
            "            past 1 ms: {measured} of messages (the host alone: {:.2}% of the worst core's time was more \
             than 1 ms into a stall in the hiccup probe); steal {:.2}% of the CPUs' time",
            100.0 * hiccups.past_long_share(),
            100.0 * entry.steal_share
        ));
        progress.detail(&format!("            {}", host_during(&entry, result.achieved_rho(&entry))));
        let nearest_half = result.points.iter().all(|p| (p.rho - 0.5).abs() > (rho - 0.5).abs());
        if nearest_half {
            result.agents = entry.agents.clone();
        }
        result.points.push(entry);
        progress.points_done(progress.bar.position() as usize + 1);
    }
    Ok(())
}

/// What watches the host while one point runs: the wake probe (threads sleeping 1 ms at a time) and
/// the CPU ticks at the point's start. Both cost next to nothing, so they run during the point.
struct HostWatch {
    probe: Option<WakeProbe>,
    cpu: Option<HostCpu>,
    waits: Option<hiccup::ThreadWaits>,
    tasks: Option<hiccup::HostTasks>,
    started: Instant,
}

impl HostWatch {
    /// Starts the probe (a warning, and no probe, when its thread cannot start) and reads the ticks.
    fn start(progress: &Progress) -> Self {
        let probe =
            WakeProbe::start().map_err(|e| progress.warn("   ", &format!("no wake probe for this point: {e}"))).ok();
        let tasks = hiccup::HostTasks::read();
        Self { probe, cpu: HostCpu::read(), waits: hiccup::ThreadWaits::read(), tasks, started: Instant::now() }
    }

    /// Stops the probe and fills in `entry`'s host fields over the window since [`start`](Self::start):
    /// the probe's lateness, the steal, the other processes' CPU, the host's tasks; then its judgements
    /// ([`PointResult::assess`]).
    fn finish(self, entry: &mut PointResult) {
        let seconds = self.started.elapsed().as_secs_f64();
        entry.wake_probe = self.probe.map(|p| WakeLateness::from_records(&p.stop()));
        if let (Some(before), Some(after)) = (&self.waits, hiccup::ThreadWaits::read()) {
            entry.thread_waits = after.since(before, report::THREAD_WAIT_MIN_MS, &["wake-probe"]);
        }
        if let (Some(before), Some(after)) = (&self.tasks, hiccup::HostTasks::read()) {
            entry.host_tasks = Some(after.since(before));
        }
        if let (Some(before), Some(after)) = (self.cpu, HostCpu::read()) {
            let delta = after.since(&before);
            entry.steal_share = delta.cpu.steal_share();
            let ticks_per_s = hiccup::clock_ticks_per_s();
            entry.other_cpu = Some(OtherCpu::from_ticks(delta.other_ticks(), delta.cpu.irq, seconds, ticks_per_s));
        }
        entry.assess();
    }
}

/// One line on the host during a point: the wake probe beside the latency, the tail target, the other
/// processes' CPU, and whether the point fell short of its load (at `achieved_rho`).
fn host_during(entry: &PointResult, achieved_rho: f64) -> String {
    let probe = entry.wake_probe.as_ref().map_or_else(
        || "no wake probe".to_string(),
        |w| {
            let mut threads: Vec<String> = w
                .cores
                .iter()
                .map(|c| {
                    let rt = if c.realtime { "" } else { ", not real-time" };
                    format!("core {} p99 {:.1}, max {:.0}{rt}", c.core, c.late_us.p99, c.late_us.max)
                })
                .collect();
            if let Some(any) = &w.any_core_us {
                threads.push(format!("any core p99 {:.1}, max {:.0}", any.p99, any.max));
            }
            format!(
                "1 ms sleepers ({}) woke late p99 {:.1} us, p99.9 {:.1} us, max {:.0} us ({} wake-ups; {} us; latency \
                 p99 {:.1} us, p99.9 {:.1} us)",
                w.reference,
                w.late_us.p99,
                w.late_us.p999,
                w.late_us.max,
                w.wakeups,
                threads.join("; "),
                entry.latency_us.p99,
                entry.latency_us.p999
            )
        },
    );
    let target = entry
        .tail_target
        .as_ref()
        .map_or_else(String::new, |t| format!("; tail target {:.1} us: {}", t.limit_us, t.verdict()));
    let other = entry.other_cpu.map_or_else(
        || "; other processes: not known".to_string(),
        |o| {
            format!(
                "; other processes {:.1}% of a core ({}){}",
                100.0 * o.core_share,
                o.ticks_text(),
                if o.flagged { " (FLAGGED: the host was not quiet)" } else { "" }
            )
        },
    );
    let tasks =
        entry.host_tasks.as_ref().map_or_else(String::new, |t| format!("; the host's tasks ran {}", t.describe()));
    let saturated = if entry.saturated { format!("; SATURATED: ran at rho {achieved_rho:.2}") } else { String::new() };
    format!("host: {probe}{target}{other}{tasks}{saturated}; {}", thread_waits_text(&entry.thread_waits))
}

/// The threads that waited for a CPU during a point: `waited for a core: sender+receiver 11.2 ms, ...`.
fn thread_waits_text(waits: &[hiccup::ThreadWait]) -> String {
    if waits.is_empty() {
        return format!("no thread of this process waited {} ms or more for a core", report::THREAD_WAIT_MIN_MS);
    }
    let each: Vec<String> = waits.iter().map(|w| format!("{} {:.1} ms", w.thread, w.waited_ms)).collect();
    format!("waited for a core: {}", each.join(", "))
}

/// One utilisation point with the in-process load generator ([`measure::run_point`]), its histograms
/// written under `dir`.
#[allow(clippy::too_many_arguments)]
fn in_process_point(
    cluster: &mut LoadCluster,
    rho: f64,
    mu: f64,
    t: &profile::Timings,
    times: &mut SendTimes,
    dir: &Path,
    stem: &str,
    progress: &Progress,
) -> Result<PointResult, SweepError> {
    let point = measure::run_point(cluster, rho, mu, t, times)?;
    report::write_point_histograms(dir, stem, &point.latency, &point.service)?;
    let mut entry = PointResult::from_histograms(
        stem,
        rho,
        point.lambda,
        point.achieved,
        &point.latency,
        &point.service,
        NS_PER_US,
    );
    entry.agents = point.agents.iter().map(duty_cycles).collect();
    progress.detail(&format!(
        "   rho {rho:.2}: lambda {} achieved {} msg/s; from intended p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.0} us; \
         from offer p50 {:.1} p99 {:.1} us; {} back-pressured offers, max offer lag {:.0} us",
        rate(point.lambda),
        rate(point.achieved),
        entry.latency_us.p50,
        entry.latency_us.p99,
        entry.latency_us.p999,
        entry.latency_us.max,
        entry.service_latency_us.p50,
        entry.service_latency_us.p99,
        point.back_pressured,
        point.max_offer_lag_ns as f64 / 1e3
    ));
    Ok(entry)
}

/// The report's form of one agent's cycle distribution.
fn duty_cycles(a: &measure::AgentCycles) -> AgentDutyCycles {
    AgentDutyCycles {
        name: a.name.clone(),
        cycles: a.cycles,
        duty_cycle_ns: CycleQuantiles { p50: a.p50_ns, p99: a.p99_ns, p999: a.p999_ns, max: a.max_ns },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn no_arguments_run_the_quick_profile() {
        let o = parse_args(&args("--bench"), Path::new("target/sweep")).unwrap();
        assert_eq!(o.profile, Profile::quick());
        assert_eq!(o.out, PathBuf::from("target/sweep"));
    }

    #[test]
    fn lists_replace_the_profiles() {
        let o = parse_args(
            &args("--full --mtu 1408 --idle noop,sleep-ns:1000 --msg 32,128 --send-mode gso --rho 0.5 --out /tmp/x"),
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(o.profile.name, "full-custom");
        assert_eq!(o.profile.mtus, vec![1408]);
        assert_eq!(o.profile.idles.len(), 2);
        assert_eq!(o.profile.msgs, vec![32, 128]);
        assert_eq!(o.profile.send_modes, vec![SendMode::Gso]);
        assert_eq!(o.profile.rhos, vec![0.5]);
        assert_eq!(o.profile.timings, Profile::full().timings);
        assert_eq!(o.out, PathBuf::from("/tmp/x"));
    }

    #[test]
    fn verbose_is_a_switch_that_leaves_the_profile_alone() {
        let o = parse_args(&args("--tiny --verbose"), Path::new("t")).unwrap();
        assert!(o.verbose);
        assert_eq!(o.profile, Profile::tiny(), "not a custom grid");
        assert!(!parse_args(&args("--tiny"), Path::new("t")).unwrap().verbose);
    }

    #[test]
    fn bad_arguments_say_what_to_change() {
        let e = parse_args(&args("--mtu abc"), Path::new("t")).unwrap_err().to_string();
        assert!(e.contains("--mtu \"abc\"") && e.contains("usage"), "{e}");
        assert!(parse_args(&args("--rho"), Path::new("t")).unwrap_err().to_string().contains("needs a value"));
        assert!(parse_args(&args("--wat 1"), Path::new("t")).unwrap_err().to_string().contains("unknown"));
        assert!(parse_args(&args("--msg 4"), Path::new("t")).unwrap_err().to_string().contains("8-byte"));
    }

    #[test]
    fn predictions_take_the_probe_c_for_the_idle_strategy() {
        let c_probe = [
            CProbe {
                idle: "noop".into(),
                layout: C_SHARED.into(),
                c_per_s: 9.0,
                data_syscalls_per_s: 1.0,
                loads: vec![],
            },
            CProbe {
                idle: "noop".into(),
                layout: C_ALONE.into(),
                c_per_s: 40_000.0,
                data_syscalls_per_s: 1.0,
                loads: vec![],
            },
        ];
        let mut config = ConfigSpec {
            mtu: 1408,
            idle: IdleStrategyConfig::NoOp,
            msg: 128,
            send_mode: SendMode::Classic,
            control: Control::Separate,
        };
        assert_eq!(probe_c_for(&config, &c_probe), 40_000.0);
        let (m_pkt, mu, why) = predict(&config, 200_000.0, 40_000.0);
        assert_eq!((m_pkt, why), (8, None));
        assert!((mu - 640_000.0).abs() < 1.0, "{mu}");
        config.idle = IdleStrategyConfig::Yield;
        assert_eq!(probe_c_for(&config, &c_probe), 0.0);
        assert!(predict(&config, 0.0, 0.0).2.is_some(), "no S, no prediction");
    }
}
