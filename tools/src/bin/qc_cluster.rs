//! `qc-cluster`: the operator's view of a cluster.
//!
//! ```text
//! qc-cluster describe [--json] [--window-ms 200] (--dir PATH)... | NAME...
//! ```
//!
//! `describe` reads the counters of the members running on this host (their node directories: `NAME` means
//! `/dev/shm/quorumcast/NAME`) and prints each member's role, leadership term, leader, commit position,
//! applied position (what its state machine has consumed), recorded and synced positions, its newest
//! snapshot's position, and how far it is behind the leader's commit position, in bytes and in time at
//! the leader's commit rate (measured over `--window-ms`). `--json` prints one object,
//! `{"members": [{member_id, dir, role, leadership_term_id, leader, commit_position, append_position,
//! recorded_position, synced_position, recording_start, applied_position, snapshot_position, lag_bytes,
//! lag_ms}]}`, for scripts.
//!
//! Exit status: 0, 1 when a member's directory is missing or stale, 2 on bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use quorumcast::shm::directory::NodeDirectory;
use quorumcast_tools::cluster_view;

/// Command line of qc-cluster.
#[derive(Debug, Parser)]
#[command(name = "qc-cluster", version, about = "Operate a quorumcast cluster")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every member with its role, term, positions and lag behind the leader.
    Describe {
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Milliseconds between the two readings the commit rate (and so the lag in time) comes from.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        window_ms: u64,
        /// A member's node directory (repeat for each member).
        #[arg(long, value_name = "PATH")]
        dir: Vec<PathBuf>,
        /// A member's node name, looked up under /dev/shm/quorumcast (or the temp-dir fallback).
        #[arg(value_name = "NAME")]
        names: Vec<String>,
    },
}

fn main() -> ExitCode {
    let Command::Describe { json, window_ms, dir, names } = Args::parse().command;
    let mut dirs = dir;
    dirs.extend(names.iter().map(|name| NodeDirectory::default_path(name)));
    if dirs.is_empty() {
        eprintln!("qc-cluster: describe needs the members: --dir PATH or NAME, once per member");
        return ExitCode::from(2);
    }
    match cluster_view::describe(&dirs, Duration::from_millis(window_ms)) {
        Ok(views) if json => println!("{}", cluster_view::render_json(&views)),
        Ok(views) => print!("{}", cluster_view::render(&views)),
        Err(message) => {
            eprintln!("qc-cluster: {message}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
