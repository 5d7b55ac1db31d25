//! `cargo bench --bench sweep -- [--quick|--full|--tiny] [--verbose] [--mtu 1408,8192] [--idle noop,sleep-ns:1000,backoff]
//! [--msg 32,128,224,512,1344] [--send-mode classic,mmsg,gso] [--control separate,piggyback]
//! [--rho 0.1,0.3,0.5,0.7,0.9] [--out DIR] [--client-process]` (`-- --help` lists them).
//!
//! The model against a running 3-node loopback cluster (see `quorumcast_bench::sweep`). With no arguments it runs
//! the quick profile (about 2 minutes on a 2-core machine); `--full` runs docs/MODEL.md's whole table (about
//! 35 minutes). The report goes to `<out>/<timestamp>/` (default `target/sweep`), and `<out>/latest`
//! points at it.
//!
//! The console shows a progress bar (on a terminal), warnings that need a person (each once), and at the
//! end one table: a row per configuration with mu measured against the model, the latency p50 and p99 at
//! rho 0.5 and the flags, then where the report is. `--verbose` prints every probe's and point's detail as
//! it is measured, as the report holds it.
//!
//! `--client-process` offers each latency point's load from a `qc-client` process (built by cargo with this
//! bench) instead of the in-process load generator: mu is measured in-process as always, and the points'
//! latency is the client's round trip to the commit acknowledgement (the report says so).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use quorumcast_bench::sweep::remote::ClientProcess;
use quorumcast_bench::sweep::{parse_args, run};

/// The model `(S - C) / D x M_pkt` against a running 3-node loopback cluster: this host's S and C, then
/// per configuration the cluster's capacity mu beside the prediction, the stage that saturated first, and
/// the latency at each utilization rho.
///
/// A profile picks the grid and the timings (quick when none is given; the last one given wins); each list
/// then replaces that axis of the grid.
#[derive(Debug, Parser)]
#[command(name = "sweep", bin_name = "cargo bench --bench sweep --", args_override_self = true)]
struct Cli {
    /// The quick profile (the default): MTU 1408 and 8192, backoff, 128 B, every send mode and commit
    /// mode, rho 0.1-0.9 in steps of 0.2; a few minutes on 2 cores.
    #[arg(long, overrides_with_all = ["full", "tiny"])]
    quick: bool,
    /// docs/MODEL.md's whole table: 3 idle strategies, all 5 message sizes, rho 0.1-0.9 in steps of 0.1.
    #[arg(long, overrides_with_all = ["quick", "tiny"])]
    full: bool,
    /// The test suite's profile: one configuration, two points, a few seconds.
    #[arg(long, overrides_with_all = ["quick", "full"])]
    tiny: bool,
    /// MTUs (bytes), e.g. `1408,8192`.
    #[arg(long, value_name = "LIST")]
    mtu: Option<String>,
    /// Consensus idle strategies, e.g. `noop,sleep-ns:1000,backoff`.
    #[arg(long, value_name = "LIST")]
    idle: Option<String>,
    /// Message sizes (bytes), e.g. `32,128,224,512,1344`.
    #[arg(long, value_name = "LIST")]
    msg: Option<String>,
    /// Send modes: `classic`, `mmsg`, `gso`.
    #[arg(long, value_name = "LIST")]
    send_mode: Option<String>,
    /// Commit frames: `separate`, `piggyback`.
    #[arg(long, value_name = "LIST")]
    control: Option<String>,
    /// Utilizations of the latency points, e.g. `0.1,0.3,0.5,0.7,0.9`.
    #[arg(long, value_name = "LIST")]
    rho: Option<String>,
    /// Where the report directories and the `latest` link go [default: target/sweep].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print every probe's and point's measurements as they come (S, C, the host's stalls, each
    /// configuration's mu and budget, each point's latency and host), besides the closing table.
    #[arg(long, short)]
    verbose: bool,
    /// Offer each latency point's load from a `qc-client` process (open loop at rho x mu, mu still measured
    /// in-process); the points' latency is then the client's round trip to the commit acknowledgement.
    #[arg(long)]
    client_process: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Cli {
    /// The arguments in the spelling of [`parse_args`], which turns them into the sweep's options (the
    /// one reading of the lists, the one the tests check): clap owns the syntax (`--mtu=1408`, `--help`,
    /// misspelt flags), the library the meaning.
    fn to_args(&self) -> Vec<String> {
        let switches =
            [("--quick", self.quick), ("--full", self.full), ("--tiny", self.tiny), ("--verbose", self.verbose)];
        let lists = [
            ("--mtu", &self.mtu),
            ("--idle", &self.idle),
            ("--msg", &self.msg),
            ("--send-mode", &self.send_mode),
            ("--control", &self.control),
            ("--rho", &self.rho),
        ];
        let out = self.out.as_ref().map(|dir| dir.to_string_lossy().into_owned());
        let mut args: Vec<String> = switches.iter().filter(|(_, on)| *on).map(|(flag, _)| flag.to_string()).collect();
        for (flag, value) in lists.into_iter().chain([("--out", &out)]) {
            if let Some(value) = value {
                args.extend([flag.to_string(), value.clone()]);
            }
        }
        args
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = quorumcast_bench::bench::target_dir();
    let options = match parse_args(&cli.to_args(), &target.join("sweep")) {
        Ok(options) if cli.client_process => {
            let client = match ClientProcess::find(env!("CARGO_BIN_EXE_qc-client")) {
                Ok(client) => client,
                Err(e) => {
                    eprintln!("--client-process: {e}");
                    return ExitCode::from(2);
                }
            };
            quorumcast_bench::sweep::SweepOptions { client: Some(client), ..options }
        }
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        // The sweep printed its table and where the report is.
        Ok(outcome) => {
            if outcome.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!("{} configurations failed (see above); the report has the others", outcome.failures.len());
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("sweep failed: {e}");
            ExitCode::FAILURE
        }
    }
}
