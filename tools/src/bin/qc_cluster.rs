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
//! ```text
//! qc-cluster recovery-plan --data-dir PATH [--recording-dir PATH] [--json]
//! ```
//!
//! `recovery-plan` reads the data directory of a STOPPED member (one whose node runs is refused: it holds
//! the directory's `data.lock`) and says what a restart of it would read, replay and catch up: its vote
//! file (term, voted for), its recording's index (format, term history, start), each segment (positions,
//! size, blocks valid, where damage or a torn tail is and how many bytes a restart cuts), its snapshots
//! (the newest that verifies, and why newer ones do not), the term and position it restarts at, what it
//! replays into its state machine (from the snapshot to the end of the recording), and that anything past
//! comes from the leader. It changes nothing in the directory. `--json` prints one object (see
//! `quorumcast_tools::recovery_plan::render_json`).
//!
//! Exit status: 0; 1 when a member's directory is missing or stale (`describe`), or missing, in use or
//! unreadable (`recovery-plan`); 3 when the plan finds the member would refuse to start or restore (the
//! reasons are printed); 2 on bad arguments.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use quorumcast::shm::directory::NodeDirectory;
use quorumcast_tools::{cluster_view, recovery_plan};

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
    /// What a restart of a stopped member would read, replay and catch up, from its data directory.
    RecoveryPlan {
        /// The member's data directory (`data_dir` in its node file).
        #[arg(long, value_name = "PATH")]
        data_dir: PathBuf,
        /// Its recording's directory, when `storage.recording_dir` moved it out of `<data dir>/recording`.
        #[arg(long, value_name = "PATH")]
        recording_dir: Option<PathBuf>,
        /// One JSON object instead of the text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match Args::parse().command {
        Command::Describe { json, window_ms, dir, names } => describe(json, window_ms, dir, &names),
        Command::RecoveryPlan { data_dir, recording_dir, json } => recovery_plan(&data_dir, recording_dir, json),
    }
}

fn describe(json: bool, window_ms: u64, mut dirs: Vec<PathBuf>, names: &[String]) -> ExitCode {
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

fn recovery_plan(data_dir: &Path, recording_dir: Option<PathBuf>, json: bool) -> ExitCode {
    let plan = match recovery_plan::plan(data_dir, recording_dir.as_deref()) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("qc-cluster: {message}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!("{}", recovery_plan::render_json(&plan));
    } else {
        print!("{}", recovery_plan::render(&plan));
    }
    if plan.refusals.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}
