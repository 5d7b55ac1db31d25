//! `qc-client`: a remote client of a quorumcast cluster, from another process or host.
//!
//! ```text
//! qc-client --cluster tuning/cluster/node0.toml [--member ID=ADDR]... --offer N [--msg-size BYTES]
//!           [--rate MSGS] [--window K] [--warmup N] [--timeout SECS] [--hgrm FILE] [--json FILE]
//! ```
//!
//! It finds the leader among the members' client endpoints (those of a node file given with `--cluster`,
//! or each `--member id=host:port`), opens a session, and has `--offer N` messages of `--msg-size` bytes
//! committed: closed loop with at most `--window` in flight (the default), or open loop at `--rate`
//! messages a second, latency then counted from each message's intended send time. Across a change of
//! leader it reconnects and resends what it was not told was committed; each message is applied once.
//!
//! It prints on stdout the session, the counts (committed, duplicates found by resends, responses and
//! whether they matched their messages) and the offer-to-commit-acknowledgement latency percentiles;
//! `--hgrm` writes the whole HDR percentile distribution, `--json` the figures for scripts.
//! Exit status: 0 when every message was committed exactly once, 1 otherwise, 2 on bad arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use quorumcast::cluster_client::{ClientConfig, ClusterClient};
use quorumcast::config::NodeFile;
use quorumcast_tools::client_load::{drive, summary, ClientLoad};

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
    /// Messages to have committed.
    #[arg(long, value_name = "N")]
    offer: u64,
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
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    timeout: f64,
    /// Seconds of silence from the leader before looking for another.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    leader_timeout: f64,
    /// Write the HDR percentile distribution (microseconds) here.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the figures as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
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

fn run(args: &Args) -> Result<bool, Usage> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Usage(format!("--timeout {} must be a positive number of seconds", args.timeout)));
    }
    if args.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(Usage("--rate must be a positive number of messages a second".into()));
    }
    let mut config = ClientConfig::new(members(args)?);
    config.mtu = args.mtu;
    config.window = args.window.max(1);
    config.leader_timeout = Duration::from_secs_f64(args.leader_timeout.max(0.01));
    let mut client = ClusterClient::new(config).map_err(|e| Usage(format!("client socket: {e}")))?;
    let timeout = Duration::from_secs_f64(args.timeout);
    if let Err(e) = client.connect(timeout) {
        eprintln!("qc-client: {e}");
        return Ok(false);
    }
    eprintln!("qc-client: session {} at member {:?}", client.session_id().unwrap_or(0), client.leader());
    let load = ClientLoad {
        messages: args.offer,
        msg_size: args.msg_size as usize,
        rate: args.rate,
        window: args.window.max(1),
        timeout,
        warmup: args.warmup,
    };
    let run = match drive(&mut client, &load, std::thread::yield_now) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("qc-client: {e}");
            return Ok(false);
        }
    };
    client.close();
    println!("{}", summary(&run));
    if let Some(path) = &args.hgrm {
        if let Err(e) = quorumcast_tools::report::write_hgrm(&run.latency_ns, path, 1e3) {
            eprintln!("qc-client: cannot write {}: {e}", path.display());
        }
    }
    if let Some(path) = &args.json {
        let h = &run.latency_ns;
        let json = serde_json::json!({
            "session_id": run.session_id,
            "committed": run.committed,
            "duplicates": run.duplicates,
            "not_applied": run.not_applied,
            "responses": run.responses,
            "bad_responses": run.bad_responses,
            "reported_twice": run.reported_twice,
            "reconnects": run.reconnects,
            "rate": run.rate(),
            "elapsed_s": run.elapsed.as_secs_f64(),
            "latency_us": {
                "p50": h.value_at_quantile(0.5) as f64 / 1e3,
                "p90": h.value_at_quantile(0.9) as f64 / 1e3,
                "p99": h.value_at_quantile(0.99) as f64 / 1e3,
                "p999": h.value_at_quantile(0.999) as f64 / 1e3,
                "max": h.max() as f64 / 1e3,
            },
        });
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&json).unwrap_or_default()) {
            eprintln!("qc-client: cannot write {}: {e}", path.display());
        }
    }
    Ok(run.committed == args.offer && run.reported_twice == 0 && run.bad_responses == 0 && run.not_applied == 0)
}
