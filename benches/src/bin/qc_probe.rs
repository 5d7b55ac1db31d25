//! `qc-probe`: this host's S and C, measured with the engine's own code.
//!
//! ```text
//! qc-probe [--mtu 1408,8192] [--send-mode classic,mmsg,gso] [--idle noop,sleep-ns:1000,backoff] [--quick] [--json]
//!          [--hiccups SECONDS]
//! ```
//!
//! Hiccups (with `--hiccups`, first): this host's own stalls, a spinning thread on each core the cluster
//! would use, all at once, counting the gaps in its clock reads (see `quorumcast_bench::hiccup`).
//!
//! S: one thread's `sendmsg` calls per second to D = 2 loopback destinations, datagram = MTU (the effective
//! datagrams per second in the mmsg and gso modes). C: the leader Sender's consensus control syscalls per
//! second (commit frames x D), per consensus idle strategy, while a 3-node loopback cluster carries a
//! moderate fixed load (classic send mode, separate commit frames), read from its counters; beside it every
//! control syscall of the Sender (which adds its polls of the control socket, one per duty cycle). Exit status 0, 1 when a probe fails, 2 on bad arguments.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use quorumcast_bench::hiccup;
use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_bench::sweep::measure::{probe_control, probe_send_rates, D};
use quorumcast_bench::sweep::profile::Profile;
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::transport::SendMode;
use serde_json::json;

/// Command line of qc-probe.
#[derive(Debug, Parser)]
#[command(name = "qc-probe", version, about = "Measure this host's S (send path) and C (control syscalls)")]
struct Args {
    /// MTUs (datagram sizes) to probe S at.
    #[arg(long, value_delimiter = ',', default_values_t = [1408usize, 8192])]
    mtu: Vec<usize>,
    /// Send modes to probe S in.
    #[arg(long = "send-mode", value_delimiter = ',', default_values_t = SendMode::ALL)]
    send_mode: Vec<SendMode>,
    /// Consensus idle strategies to probe C for.
    #[arg(long, value_delimiter = ',', default_values = ["noop", "sleep-ns:1000", "backoff"])]
    idle: Vec<IdleStrategyConfig>,
    /// Shorter windows (the quick sweep's instead of the full sweep's).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
    /// Also measure the host's own stalls for this many seconds (a spinning thread per core), first.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    hiccups: Option<Duration>,
}

fn probe(args: &Args) -> Result<serde_json::Value, SweepError> {
    let profile = if args.quick { Profile::quick() } else { Profile::full() };
    let timings = profile.timings;
    let layout = Layout::for_host();
    let hiccups = args.hiccups.map(|duration| hiccup::probe(&layout.busy_cores(), duration));
    if let (Some(h), false) = (&hiccups, args.json) {
        println!("host stalls: {}", h.describe());
    }
    let rates = probe_send_rates(&args.mtu, &args.send_mode, &timings, layout.probe_cores())?;
    if !args.json {
        println!("layout: {}", layout.describe(profile.sender_idle));
        for r in &rates {
            println!(
                "S  {:>5} B  {:<7}  {:>10.0} datagrams/s  {:>10.0} syscalls/s  (D = {D})",
                r.datagram_bytes,
                r.send_mode.as_str(),
                r.datagrams_per_s,
                r.syscalls_per_s
            );
        }
    }
    let mut c_rows = Vec::new();
    for &idle in &args.idle {
        let mtu = args.mtu.first().copied().unwrap_or(1408);
        let spec = ClusterSpec {
            consensus_idle: idle,
            sender_idle: profile.sender_idle,
            ..ClusterSpec::new(mtu, 128, layout.for_c_probe())
        };
        let c = on_harness_thread(|| {
            let mut cluster = LoadCluster::start(&spec)?;
            let c = probe_control(&mut cluster, &timings, timings.c_rate);
            cluster.close()?;
            c
        })?;
        if !args.json {
            println!(
                "C  consensus idle {:<20}  C = {:>8.0}/s ({:.0} commit frames/s x {D})  all control syscalls {:.0}/s  data syscalls {:.0}/s  at {:.0} msg/s",
                idle.to_string(),
                c.c_per_s,
                c.commit_frames_per_s,
                c.control_per_s,
                c.data_per_s,
                c.committed_per_s
            );
        }
        c_rows.push(json!({
            "idle": idle.to_string(),
            "c_per_s": c.c_per_s,
            "control_syscalls_per_s": c.control_per_s,
            "commit_frames_per_s": c.commit_frames_per_s,
            "data_syscalls_per_s": c.data_per_s,
            "idle_polls_per_s": c.idle_polls_per_s,
            "consensus_cycles_per_s": c.consensus_cycles_per_s,
            "load_msgs_per_s": c.committed_per_s,
        }));
    }
    Ok(json!({
        "host": quorumcast_bench::sweep::host(),
        "layout": layout.describe(profile.sender_idle),
        "s_probe": rates,
        "c_probe": c_rows,
        "hiccups": hiccups,
    }))
}

/// A probe's length: seconds above 0, at most an hour.
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 3600.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds above 0 and at most 3600")),
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match probe(&args) {
        Ok(value) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("qc-probe: {e}");
            ExitCode::from(1)
        }
    }
}
