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
//!    not see); the point is then judged ([`PointResult::assess`](report::PointResult::assess)): saturated
//!    when it carried less than 95% of its offered load, and at rho <= 0.5 held to the tail target
//!    `p99 <= probe p99 + 3 x p50`, a miss naming the agent whose longest duty cycle outlasted the host's
//!    longest stall plus all its tasks' run time. The report's summary line counts the points flagged
//!    (other processes past 5% of a core), saturated, and meeting or missing the target.
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

mod c_probe;
mod config;
mod points;
mod progress;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use crate::budget;
use crate::hiccup;
use crate::model::ModelError;
use crate::report::{self, Host, ReportError, SProbe, SProbeEntry, SweepReport, OTHER_CPU_FLAG_SHARE};
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::transport::SendMode;

use c_probe::probe_c;
use cluster::Layout;
use config::{run_config, HostProbes};
use measure::{SendTimes, D};
use profile::{Control, Profile};
use progress::{rate, Progress};

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

#[cfg(test)]
mod tests;
