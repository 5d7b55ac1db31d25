//! `qc-cluster`: the operator's view of a cluster.
//!
//! ```text
//! qc-cluster describe [--json] [--window-ms 200] (--dir PATH)... | NAME...
//! qc-cluster add-member --id ID --log ADDR [--consensus ADDR] [--client ADDR] MEMBERS
//! qc-cluster promote --id ID MEMBERS
//! qc-cluster remove-member --id ID MEMBERS
//! qc-cluster transfer-leadership [--to ID] MEMBERS
//! qc-cluster step-down MEMBERS          (transfer-leadership to the follower furthest along)
//! qc-cluster snapshot MEMBERS           (every member takes one at its application's next poll)
//! qc-cluster suspend | resume MEMBERS   (the leader stops / starts again taking client entries)
//! ```
//!
//! MEMBERS are the node directories of members on this host (`--dir PATH` or `NAME`, as for `describe`);
//! a command goes to the one that leads (a snapshot to each), through the directory's admin ring: the
//! directory's file permissions are the credential. Or, from any host, MEMBERS are members' consensus
//! endpoints (`--connect ADDR`, once per member) with `--admin-key-file PATH` (the members' `[admin] key`,
//! 64 hexadecimal digits): the commands travel as admin frames tagged with that operator key, and a member
//! configured without one refuses them. Membership changes wait until they commit, a transfer until
//! another member leads, each at most `--timeout-ms` (default 10000).
//!
//! `describe --connect ADDR... --admin-key-file PATH` asks each member over the network instead (twice,
//! `--window-ms` apart): its role, term, leader, configuration, append, commit and applied positions, its
//! newest snapshot's position, and its commit's lag behind the leader's in bytes and in time; `--json`
//! prints `{"members": [{member_id, endpoint, role, leadership_term_id, leader, configuration_id,
//! append_position, commit_position, applied_position, snapshot_position, lag_bytes, lag_ms}]}`.
//!
//! `describe` reads the counters of the members running on this host (their node directories: `NAME` means
//! `/dev/shm/quorumcast/NAME`) and prints each member's role, leadership term, leader, commit position,
//! applied position (what its state machine has consumed), recorded and synced positions, its newest
//! snapshot's position, and how far it is behind the leader's commit position, in bytes and in time at
//! the leader's commit rate (measured over `--window-ms`). `--json` prints one object,
//! `{"members": [{member_id, dir, role, leadership_term_id, leader, configuration_id, commit_position, append_position,
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

use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use quorumcast::unstable::admin::AdminCommand;
use quorumcast::{CLIENT_PORT_OFFSET, CONSENSUS_PORT_OFFSET};
use quorumcast_consensus::configuration::MemberEndpoints;
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_driver::shm::directory::NodeDirectory;
use quorumcast_tools::{admin, cluster_view, recovery_plan};

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
        #[command(flatten)]
        remote: Remote,
    },
    /// Adds a member (a node started with itself outside `initial_members`) as a learner.
    AddMember {
        /// The new member's id.
        #[arg(long)]
        id: i32,
        /// Its log endpoint.
        #[arg(long)]
        log: SocketAddr,
        /// Its consensus endpoint (default: the log port + 100).
        #[arg(long)]
        consensus: Option<SocketAddr>,
        /// Its client endpoint (default: the log port + 200).
        #[arg(long)]
        client: Option<SocketAddr>,
        #[command(flatten)]
        members: Members,
    },
    /// Makes a learner a voter (once it is close enough to the leader's log).
    Promote {
        /// The learner's id.
        #[arg(long)]
        id: i32,
        #[command(flatten)]
        members: Members,
    },
    /// Removes a member (a removed leader steps down once the change commits).
    RemoveMember {
        /// The member's id.
        #[arg(long)]
        id: i32,
        #[command(flatten)]
        members: Members,
    },
    /// Hands the leadership to a member (default: the follower furthest along).
    TransferLeadership {
        /// The member to lead.
        #[arg(long)]
        to: Option<i32>,
        #[command(flatten)]
        members: Members,
    },
    /// The leader hands its leadership to the follower furthest along.
    StepDown {
        #[command(flatten)]
        members: Members,
    },
    /// Every member takes a snapshot at its application's next poll.
    Snapshot {
        #[command(flatten)]
        members: Members,
    },
    /// The leader stops taking client entries.
    Suspend {
        #[command(flatten)]
        members: Members,
    },
    /// The leader takes client entries again.
    Resume {
        #[command(flatten)]
        members: Members,
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

/// The members a command may go to.
#[derive(Debug, clap::Args)]
struct Members {
    /// A member's node directory (repeat for each member).
    #[arg(long, value_name = "PATH")]
    dir: Vec<PathBuf>,
    /// A member's node name, looked up under /dev/shm/quorumcast (or the temp-dir fallback).
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// The most milliseconds to wait for the answer (and the commit, or the new leader).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    timeout_ms: u64,
    #[command(flatten)]
    remote: Remote,
}

/// Members reached over the network.
#[derive(Debug, clap::Args)]
struct Remote {
    /// A member's consensus endpoint (repeat for each member): commands go over the network, tagged with
    /// the operator key of `--admin-key-file`.
    #[arg(long, value_name = "ADDR")]
    connect: Vec<SocketAddr>,
    /// A file holding the operator key (the members' `[admin] key`: 64 hexadecimal digits).
    #[arg(long, value_name = "PATH")]
    admin_key_file: Option<PathBuf>,
}

impl Remote {
    /// The operator key, when members are given by endpoint; an error naming what is missing or wrong.
    fn key(&self) -> Result<AuthKey, String> {
        let path = self.admin_key_file.as_ref().ok_or(
            "--connect needs --admin-key-file PATH: the members' operator key ([admin] key in their node files)",
        )?;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        text.trim().parse().map_err(|e| format!("{}: {e} (64 hexadecimal digits, as [admin] key)", path.display()))
    }
}

impl Members {
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.dir.clone();
        dirs.extend(self.names.iter().map(|name| NodeDirectory::default_path(name)));
        dirs
    }
}

/// Carries out an administrative command; the exit status.
fn administer(members: &Members, command: AdminCommand) -> ExitCode {
    let dirs = members.dirs();
    let timeout = Duration::from_millis(members.timeout_ms);
    let result = match (&dirs[..], &members.remote.connect[..]) {
        ([], []) => {
            eprintln!(
                "qc-cluster: `{command}` needs the members: --dir PATH or NAME, or --connect ADDR, once per member"
            );
            return ExitCode::from(2);
        }
        ([], endpoints) => match members.remote.key() {
            Ok(key) => admin::remote::run(endpoints, &key, &command, timeout),
            Err(why) => {
                eprintln!("qc-cluster: {why}");
                return ExitCode::from(2);
            }
        },
        (_, []) => admin::run(&dirs, &command, timeout),
        _ => {
            eprintln!("qc-cluster: give the members either by directory or by --connect, not both");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("qc-cluster: {command}: {message}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let offset = |addr: SocketAddr, by: u16| SocketAddr::new(addr.ip(), addr.port().wrapping_add(by));
    match Args::parse().command {
        Command::Describe { json, window_ms, remote, .. } if !remote.connect.is_empty() => {
            describe_remote(json, window_ms, &remote)
        }
        Command::Describe { json, window_ms, dir, names, .. } => describe(json, window_ms, dir, &names),
        Command::RecoveryPlan { data_dir, recording_dir, json } => recovery_plan(&data_dir, recording_dir, json),
        Command::AddMember { id, log, consensus, client, members } => {
            let consensus = consensus.unwrap_or(offset(log, CONSENSUS_PORT_OFFSET));
            let client = client.unwrap_or(offset(log, CLIENT_PORT_OFFSET));
            administer(&members, AdminCommand::AddMember(MemberEndpoints { id, log, consensus, client }))
        }
        Command::Promote { id, members } => administer(&members, AdminCommand::Promote(id)),
        Command::RemoveMember { id, members } => administer(&members, AdminCommand::RemoveMember(id)),
        Command::TransferLeadership { to, members } => administer(&members, AdminCommand::TransferLeadership(to)),
        Command::StepDown { members } => administer(&members, AdminCommand::TransferLeadership(None)),
        Command::Snapshot { members } => administer(&members, AdminCommand::Snapshot),
        Command::Suspend { members } => administer(&members, AdminCommand::Suspend),
        Command::Resume { members } => administer(&members, AdminCommand::Resume),
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

fn describe_remote(json: bool, window_ms: u64, remote: &Remote) -> ExitCode {
    let key = match remote.key() {
        Ok(key) => key,
        Err(why) => {
            eprintln!("qc-cluster: {why}");
            return ExitCode::from(2);
        }
    };
    let window = Duration::from_millis(window_ms);
    let deadline = std::time::Instant::now() + window + Duration::from_secs(5);
    match admin::remote::describe(&remote.connect, &key, window, deadline) {
        Ok(statuses) if json => println!("{}", admin::remote::render_json(&statuses)),
        Ok(statuses) => print!("{}", admin::remote::render(&statuses)),
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
