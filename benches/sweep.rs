//! `cargo bench --bench sweep -- [--quick|--full] [--mtu 1408,8192] [--idle noop,sleep-ns:1000,backoff]
//! [--msg 32,128,224,512,1344] [--send-mode classic,mmsg,gso] [--control separate,piggyback]
//! [--rho 0.1,0.3,0.5,0.7,0.9] [--out DIR]`
//!
//! The model against a running 3-node loopback cluster (see `quorumcast::sweep`). With no arguments it runs
//! the quick profile (about 2 minutes on a 2-core machine); `--full` runs MODEL.md's whole table (about
//! 35 minutes). The report goes to `<out>/<timestamp>/` (default `target/sweep`), and `<out>/latest`
//! points at it.

use std::path::PathBuf;
use std::process::ExitCode;

use quorumcast::sweep::{parse_args, run};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let options = match parse_args(&args, &target.join("sweep")) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(outcome) => {
            println!("summary: {}", outcome.dir.join("summary.json").display());
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
