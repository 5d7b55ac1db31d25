//! Membership bench: a learner added 1 GiB behind, and how fast it catches up (issue 27).
//!
//! `cargo bench --bench membership` (1 GiB, a minute or two), `cargo bench --bench membership -- --quick`
//! (256 MiB), `-- --size-mib N` for another size, `-- --warm` to leave the page cache as it is before the
//! add.
//!
//! What it does, in one process over UDP loopback (MTU 8192, 8,160-byte messages: one frame each, so the
//! log grows fast):
//! 1. a 3-member cluster whose log is recorded on disk (sync `none`, no snapshots: the learner fetches
//!    the log itself) appends the size asked, applied on every member;
//! 2. the floors, measured on the same machine in the same run: the disk's sequential read rate of the
//!    leader's recording files (1 MiB reads) with the page cache dropped first (`echo 3 >
//!    /proc/sys/vm/drop_caches`, which needs root; the run says when it could not, and the rate is then
//!    the page cache's), and a loopback TCP rate (a plain `TcpStream` pair copying the same size);
//! 3. the page cache is dropped again (unless `--warm`), a 4th member starts from an empty data directory
//!    and is added as a learner (`Node::propose_membership`); the time from the add to caught up (its
//!    applied position reaching the leader's commit position) and its catch-up rate (the log's bytes over
//!    that time, in MB/s) are reported beside both floors. A learner further behind than the leader holds
//!    in memory fetches the log from the leader's recording over TCP (see the engine's
//!    `storage::recording::catch_up`), so it can go no faster than the slower floor; the share of it is
//!    what the run says.
//!
//! Thread layout: every node in `dedicated` mode (each agent a thread of its own) idling with `backoff`,
//! so nothing busy-spins; the bench thread offers through the leader and applies on every node (checking
//! every entry's number: each node applies each message once, in order).
//!
//! Data directories go under `<target>/membership-data` (on the target directory's disk, not /dev/shm),
//! removed after the run. Results: `target/membership/<timestamp>/summary.json` (`target/membership/latest`
//! points at the newest).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use quorumcast::SyncPolicy;
use quorumcast::{Member, Node, NodeBuilder, StorageConfig};
use quorumcast_bench::bench::{host, target_dir, write_summary};
use quorumcast_consensus::consensus_core::{MembershipChange, Role};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::SocketOptions;
use quorumcast_testkit::load::drive_until;
use quorumcast_testkit::{Driver, Messages};
use serde_json::json;

/// The log channel's MTU: large, so that each datagram carries a whole message.
const MTU: usize = 8192;
/// Message length: one frame's payload at [`MTU`] (`mtu - 32`).
const MESSAGE: usize = MTU - 32;
/// Term length of the members' logs: 16 MiB, so the learner starts far beyond what the leader holds in
/// memory and catches up from its recording.
const TERM_LENGTH: usize = 16 << 20;
/// Block of the floors' reads and copies.
const BLOCK: usize = 1 << 20;
/// How long any one step may take before the run gives up.
const DEADLINE: Duration = Duration::from_secs(600);

/// A learner 1 GiB behind: its time to caught-up and catch-up rate beside the disk's sequential read rate
/// (page cache dropped first) and a loopback TCP rate, measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "membership", bin_name = "cargo bench --bench membership --", args_override_self = true)]
struct Cli {
    /// A fast check: 256 MiB instead of 1 GiB.
    #[arg(long)]
    quick: bool,
    /// The log's size before the learner is added, MiB (overrides `--quick`).
    #[arg(long, value_name = "MIB")]
    size_mib: Option<u64>,
    /// Leaves the page cache as it is before the add (the leader's recording is then read from memory).
    #[arg(long)]
    warm: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The data directories' parent, one per process: on the target directory's disk.
fn data_root() -> PathBuf {
    target_dir().join("membership-data").join(std::process::id().to_string())
}

fn channel() -> ChannelConfig {
    ChannelConfig {
        mtu: MTU,
        term_length: TERM_LENGTH,
        receiver_window: 2 << 20,
        socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(4 << 20) },
        ..ChannelConfig::default()
    }
}

/// Member `id` of a cluster whose initial configuration is members 0, 1 and 2 and which knows `members`
/// (the learner knows itself; the first three do not know it).
fn start_node(id: i32, members: &[Member]) -> Result<Node, String> {
    NodeBuilder::new(id, members.to_vec())
        .initial_members(vec![0, 1, 2])
        .leader(0)
        .timers(quorumcast_testkit::patient_timers())
        .directory(quorumcast_testkit::node_dir("membership", "bench", id))
        .clean_stale(true)
        .data_dir(data_root().join(id.to_string()))
        .storage(StorageConfig { sync: SyncPolicy::None, snapshot_interval: None, ..StorageConfig::default() })
        .channel(channel())
        .threading(ThreadingMode::Dedicated)
        .idle_all("backoff")
        .start()
        .map_err(|e| format!("member {id} did not start: {e}"))
}

/// The nodes and the bench thread's driver (offers through member 0, applies on every member).
struct Cluster {
    nodes: Vec<Node>,
    driver: Driver,
}

impl Cluster {
    /// Applies what each node committed; returns the entries applied.
    fn apply(&mut self) -> usize {
        let Self { nodes, driver } = self;
        nodes.iter_mut().enumerate().map(|(i, node)| driver.apply(i, node, 4096, |_| {})).sum()
    }

    /// Applies on every node until `done` holds, or an error naming `what` after [`DEADLINE`].
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) -> Result<(), String> {
        drive_until(what, DEADLINE, self, |c| {
            if let Some(failure) = c.nodes.iter().flat_map(|n| n.failures()).next() {
                return Err(format!("an agent failed: {failure}"));
            }
            if done(c) {
                return Ok(None);
            }
            Ok(Some(c.apply()))
        })
    }

    /// Offers messages until the leader's log holds `bytes`, applying on every node, then waits until
    /// every node applied them all.
    fn append(&mut self, bytes: i64) -> Result<(), String> {
        let client = self.nodes[0].client();
        self.until("the leader's log holds the size asked", |c| {
            while c.nodes[0].stats().consensus().append_position() < bytes {
                match c.driver.offer(&client) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => panic!("offer refused: {e}"),
                }
            }
            c.nodes[0].stats().consensus().append_position() >= bytes
        })?;
        let offered = self.driver.offered();
        self.until("every member applied what was offered", |c| {
            (0..c.nodes.len()).all(|i| c.driver.applied(i) >= offered)
        })
    }
}

/// What the run measured.
struct Outcome {
    log_bytes: i64,
    append_seconds: f64,
    add_to_committed_s: f64,
    add_to_caught_up_s: f64,
    catch_ups: i64,
    /// Where the learner's recording ends once caught up: the log it fetched and recorded.
    learner_recording_position: i64,
    cold: bool,
}

/// A floor: bytes per second, and how it was measured.
struct Floor {
    bytes_per_s: f64,
    bytes: u64,
    note: String,
}

/// `echo 3 > /proc/sys/vm/drop_caches` after a `sync`: `Ok` when the page cache was dropped, else why not.
fn drop_page_cache() -> Result<(), String> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|e| format!("could not drop the page cache: {e}"))
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            files_under(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// The disk's sequential read rate of every file under `dir` (the leader's data directory: its
/// recording), in [`BLOCK`] reads, after dropping the page cache when this process may.
fn disk_read_floor(dir: &Path) -> Result<Floor, String> {
    let mut files = Vec::new();
    files_under(dir, &mut files).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    files.sort();
    let dropped = drop_page_cache();
    let mut buffer = vec![0u8; BLOCK];
    let mut bytes = 0u64;
    let started = Instant::now();
    for path in &files {
        let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        loop {
            let n = file.read(&mut buffer).map_err(|e| format!("{}: {e}", path.display()))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let note = match dropped {
        Ok(()) => format!("{} files, 1 MiB reads, page cache dropped first", files.len()),
        Err(why) => format!("{} files, 1 MiB reads; {why}: this is the page cache's rate, not the disk's", files.len()),
    };
    Ok(Floor { bytes_per_s: bytes as f64 / seconds, bytes, note })
}

/// A plain loopback `TcpStream` pair copying `bytes` in [`BLOCK`] writes (the reader on a thread of its
/// own): what TCP on this host carries, with no protocol on top.
fn tcp_floor(bytes: u64) -> Result<Floor, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; BLOCK];
        let mut total = 0u64;
        loop {
            let n = stream.read(&mut buffer)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let block = vec![0x5au8; BLOCK];
    let started = Instant::now();
    let written = (|| -> std::io::Result<()> {
        let mut stream = TcpStream::connect(address)?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(BLOCK as u64) as usize;
            stream.write_all(&block[..n])?;
            left -= n as u64;
        }
        stream.shutdown(std::net::Shutdown::Write)
    })();
    let read = reader.join().map_err(|_| "the TCP reader panicked".to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    written.map_err(|e| format!("TCP writer: {e}"))?;
    let read = read.map_err(|e| format!("TCP reader: {e}"))?;
    Ok(Floor { bytes_per_s: read as f64 / seconds, bytes: read, note: "one TcpStream pair, 1 MiB writes".into() })
}

/// The run: the cluster, its log, the floors, then the learner.
fn run(size: i64, warm: bool) -> Result<(Outcome, Floor, Floor), String> {
    let all = quorumcast_testkit::members_on(Ipv4Addr::LOCALHOST.into(), 4).map_err(|e| e.to_string())?;
    let mut nodes = Vec::new();
    for id in 0..3 {
        nodes.push(start_node(id, &all[..3])?);
    }
    let mut cluster = Cluster { nodes, driver: Driver::new(4, Messages::Fixed(MESSAGE)) };
    cluster.until("member 0 leads and the others follow it", |c| {
        c.nodes[0].role() == Role::Leader && c.nodes.iter().all(|n| n.leader_id() == Some(0))
    })?;
    let started = Instant::now();
    cluster.append(size)?;
    let append_seconds = started.elapsed().as_secs_f64();
    let log_bytes = cluster.nodes[0].commit_position();
    println!(
        "appended {:.0} MiB ({} messages of {MESSAGE} B) in {:.1} s: {:.0} MB/s",
        log_bytes as f64 / (1 << 20) as f64,
        cluster.driver.offered(),
        append_seconds,
        log_bytes as f64 / append_seconds / 1e6
    );

    let disk = disk_read_floor(&data_root().join("0"))?;
    println!(
        "floor: disk sequential read {:.0} MB/s ({:.0} MiB; {})",
        disk.bytes_per_s / 1e6,
        mib(disk.bytes),
        disk.note
    );
    let tcp = tcp_floor(log_bytes as u64)?;
    println!("floor: loopback TCP {:.0} MB/s ({:.0} MiB; {})", tcp.bytes_per_s / 1e6, mib(tcp.bytes), tcp.note);

    let cold = if warm {
        false
    } else {
        match drop_page_cache() {
            Ok(()) => true,
            Err(why) => {
                println!("warning: {why}; the learner reads the leader's recording from the page cache");
                false
            }
        }
    };
    cluster.nodes.push(start_node(3, &all)?);
    let added = Instant::now();
    let mut change = cluster.nodes[0].propose_membership(MembershipChange::AddLearner(3), Some(&all[3]));
    let mut committed_after = None;
    cluster.until("the learner is added and applied everything the leader committed", |c| {
        if committed_after.is_none() {
            match change.poll(&c.nodes[0]) {
                Some(Ok(_)) => committed_after = Some(added.elapsed()),
                Some(Err(e)) => panic!("the leader refused to add the learner: {e}"),
                None => return false,
            }
        }
        c.nodes[3].applied_position() >= c.nodes[0].commit_position()
    })?;
    let caught_up = added.elapsed();
    let learner = cluster.nodes[3].stats();
    let outcome = Outcome {
        log_bytes,
        append_seconds,
        add_to_committed_s: committed_after.unwrap_or_default().as_secs_f64(),
        add_to_caught_up_s: caught_up.as_secs_f64(),
        catch_ups: learner.recorder().catch_ups(),
        learner_recording_position: learner.recorder().position(),
        cold,
    };
    let bad = cluster.driver.bad_entries();
    let applied = cluster.driver.applied(3);
    for node in cluster.nodes {
        node.close().map_err(|e| e.to_string())?;
    }
    if bad > 0 {
        return Err(format!("{bad} entries were applied out of order or corrupted"));
    }
    if applied != cluster.driver.offered() {
        return Err(format!("the learner applied {applied} of {} messages", cluster.driver.offered()));
    }
    Ok((outcome, disk, tcp))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() {
    let Cli { quick, size_mib, warm, bench: _ } = Cli::parse();
    let size_mib = size_mib.unwrap_or(if quick { 256 } else { 1024 });
    println!(
        "membership bench: a learner {size_mib} MiB behind; 3 members + 1 over UDP loopback in one process, MTU {MTU}, \
         {MESSAGE} B messages, log recorded (sync none) under {}",
        data_root().display()
    );
    let _ = std::fs::remove_dir_all(data_root());
    let result = run((size_mib as i64) << 20, warm);
    if let Err(e) = std::fs::remove_dir_all(data_root()) {
        eprintln!("warning: could not remove {}: {e}", data_root().display());
    }
    let (outcome, disk, tcp) = match result {
        Ok(r) => r,
        Err(e) => {
            println!("FAILED: {e}");
            std::process::exit(1);
        }
    };
    let rate = outcome.log_bytes as f64 / outcome.add_to_caught_up_s;
    let slower = disk.bytes_per_s.min(tcp.bytes_per_s);
    println!();
    println!("| learner behind | add to committed | add to caught up | catch-up rate | disk read floor | loopback TCP floor | rate / slower floor | catch-ups | page cache before the add |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    println!(
        "| {:.0} MiB | {:.3} s | {:.2} s | {:.0} MB/s | {:.0} MB/s | {:.0} MB/s | {:.2} | {} | {} |",
        mib(outcome.log_bytes as u64),
        outcome.add_to_committed_s,
        outcome.add_to_caught_up_s,
        rate / 1e6,
        disk.bytes_per_s / 1e6,
        tcp.bytes_per_s / 1e6,
        rate / slower,
        outcome.catch_ups,
        if outcome.cold { "dropped" } else { "warm" }
    );
    println!(
        "the learner's recording ends at {:.0} MiB (the leader's log: {:.0} MiB)",
        mib(outcome.learner_recording_position.max(0) as u64),
        mib(outcome.log_bytes as u64)
    );
    println!(
        "(issue 27 sets no target for this figure: it is reported beside its floors; a catch-up cannot beat the \
         slower of the two)"
    );
    let summary = json!({
        "bench": "membership",
        "quick": quick,
        "host": host(),
        "mtu": MTU,
        "message_bytes": MESSAGE,
        "layout": "every node in dedicated mode (an agent per thread), backoff; the bench thread offers and applies on every node",
        "learner": {
            "behind_bytes": outcome.log_bytes,
            "append_seconds": outcome.append_seconds,
            "add_to_committed_s": outcome.add_to_committed_s,
            "add_to_caught_up_s": outcome.add_to_caught_up_s,
            "catch_up_bytes_per_s": rate,
            "catch_ups": outcome.catch_ups,
            "recording_position": outcome.learner_recording_position,
            "page_cache_dropped_before_add": outcome.cold,
            "share_of_slower_floor": rate / slower,
        },
        "floors": {
            "disk_sequential_read": { "bytes_per_s": disk.bytes_per_s, "bytes": disk.bytes, "how": disk.note },
            "loopback_tcp": { "bytes_per_s": tcp.bytes_per_s, "bytes": tcp.bytes, "how": tcp.note },
        },
        "data_dir": target_dir().join("membership-data").display().to_string(),
    });
    match write_summary("membership", &summary) {
        Ok(path) => println!("\nsummary: {}", path.display()),
        Err(e) => println!("\nsummary not written: {e}"),
    }
}
