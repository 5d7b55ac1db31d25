//! Cluster benchmark: a 3-node quorumcast cluster over UDP loopback in one process.
//!
//! `cargo bench --bench cluster` (about 3 minutes), `cargo bench --bench cluster -- --quick` (a smoke run),
//! `-- --only <text>` runs the variants whose name contains the text (`-- --only durable` the log on disk
//! with its memory twins), `-- --no-c` skips the C runs, `-- --pin` pins threads (see below);
//! `QC_BENCH_DEBUG=1` prints every counter that moved during each serial run.
//!
//! What it measures, for 128-byte messages at MTU 1408 and 8192, in every send mode with separate commit
//! frames and with the commit piggybacked, with the log in memory (`NodeBuilder::memory_log`) unless said
//! otherwise:
//! - sustained committed messages per second at saturation: the load generator offers as fast as the
//!   leader's ingress takes (retrying on back pressure) and the rate is the slowest node's applied entries
//!   per second, median of 3 windows;
//! - serial offer-to-apply latency (one message at a time, until the leader applies it);
//! - pipelined offer-to-apply latency with 256 messages in flight;
//! - with authentication (`auth` rows: every datagram carries a keyed BLAKE3 tag), classic and mmsg (GSO
//!   cannot tag each datagram) beside the same rows without, in the same run;
//! - with the log recorded on disk (`durable none` and `durable batch` rows, classic with separate commit
//!   frames, each right after its memory twin): every node's recorder agent writes its log to a fresh data
//!   directory under `<target>/cluster-data` (on the target directory's disk, not /dev/shm; removed after
//!   the run). `none` leaves the bytes in the page cache; `batch` makes them durable by group commit (each
//!   recorder's committer thread keeps one `fdatasync` in flight while the recorder writes the next batch),
//!   and a follower acknowledges (the leader counts itself) only up to the synced position. Reported beside
//!   the memory twin: committed msg/s and its ratio to memory, serial p50/p99, the leader recorder's fsyncs
//!   per second and entries (frames recorded) per fsync, the followers' fsyncs, fsyncs per serial message,
//!   the process's CPU per committed message (the recorders' copy into the page cache and checksums are CPU
//!   the 2 cores no longer give the data path), and the three recorders' cost per byte they wrote
//!   (checksum and write calls, wall time from their counters), bytes per write call and mean fsync time.
//!   The summary's rows say `storage`: `memory`, `none` or `batch`;
//! - the disk's floor, right after the durable rows (same run, same directory): `fdatasync` after a 4 KiB
//!   append (p50/p99; by one writer, and by three at once, as three recorders on one disk), three writers appending 1 MiB through the page cache, for each `none` row one writer
//!   appending that row's mean bytes per write call (its CPU per byte: the page cache's copy at best), and
//!   for each `batch` row three writers each appending that row's mean bytes per fsync and syncing every
//!   batch; then issue 28's targets for the log on disk, met or missed (`durable_targets` in the summary);
//! - the stall of a stopped follower: at a paced 200k msg/s, member 2 is not run for 2 s, and the longest
//!   time the leader's commit position stood still is reported before, during and after (`--no-stall`
//!   skips it; `--only stall` runs only it);
//! - the leader Sender's time split over the saturation windows (`--no-split` turns it off): its wall time
//!   in data calls, control calls, its own code, idle and between its duty cycles (on bench thread 0 the
//!   load and the leader's other agents run there), the nanoseconds per datagram in each busy class, and
//!   the capacity that budget gives (`quorumcast_bench::budget`), beside the model in the five-member rows
//!   (`sender_budget` in the summary's rows; held to the committed rate only where the Sender saturated
//!   first). The clock reads it costs are printed beside it;
//! - the model's C: for each idle strategy of the leader's consensus agent, at a paced moderate load, the
//!   leader Sender's control syscalls per second (and data syscalls, commit frames) per second.
//! - five members (`five members` rows, `--only five` runs only them; MTU 1408 and 8192, classic, separate
//!   commit frames, the log in memory, the same layout with all four followers on bench thread 1): the same
//!   figures, and the committed rate beside the model's `(S - C) / 4 x M_pkt` (issue 27), with S probed
//!   for D = 4 destinations at the row's mode and MTU just before its cluster starts (one sending thread,
//!   one draining, placed as the layout places the leader and the followers) and C the leader Sender's
//!   control syscalls at saturation less its idle polls (as the sweep takes them). The stage that saturated
//!   first is named (`sweep::bottleneck::classify_split`): the Sender only when it put out at least 90% of
//!   that S; the followers (`receiver`) when its empty cycles met a closed flow-control window more often
//!   than they found nothing to send, or when it caught up with a log that waited for the commit (on two
//!   cores the four followers share one thread and may saturate before the Sender); else the load
//!   generator or the consensus append, which share the leader's thread. Only a Sender-bound row is set
//!   against the model; the others say which stage held them and are "not compared". Each row also shows
//!   the leader's and each follower's agents' busy time (`work ns` over the wall time) and both threads'
//!   idle loops, and its ratio to the 3-member row of the same variant when that ran.
//!
//! Thread layouts (this machine has 2 cores; busy-spinning threads never outnumber them):
//! - throughput and latency: every node in invoker mode. Bench thread 0 is the load generator and drives
//!   the leader (its consensus, sender and receiver agents, and its recorder with a log on disk: an
//!   `fdatasync` under `batch` blocks that thread) and the leader's apply; bench thread 1 drives both
//!   followers (their recorders too) and their apply. Two spinning threads. With `--pin`, thread 0 is
//!   pinned to core 0 and thread 1 to core 1; by default nothing is pinned (on a machine shared with other
//!   busy processes a pinned thread cannot move away from a spinning neighbour, and every round trip then
//!   waits for scheduler slices of milliseconds).
//! - C per idle strategy: the leader in `shared-network` mode, its consensus agent on a thread of its own
//!   with the strategy under test, its sender+receiver thread with `backoff`; each follower in `shared`
//!   mode (one thread) with `backoff`; the bench thread (pacer and apply of every node) sleeping between
//!   bursts. At most one busy-spinning thread. With `--pin`, the consensus thread is on core 1 and every
//!   other thread on core 0.
//!
//! Results: a table beside docs/BASELINE.md's raft figures, a durable table (disk beside memory), a C
//! table, and `target/cluster/<timestamp>/summary.json` (`target/cluster/latest` points at the newest).

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use quorumcast::SyncPolicy;
use quorumcast_bench::sweep::bottleneck::{classify_split, Bottleneck, SplitEvidence, Stage};
use quorumcast_bench::sweep::cluster::{
    on_harness_thread, ClusterSpec, Layout, LoadCluster, Storage as ClusterStorage,
};
use quorumcast_bench::sweep::profile::Control;
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::{SendMode, SocketOptions};
use quorumcast_driver::shm::stats::Stats;
use serde_json::{json, Value};

use quorumcast_bench::bench::{host, target_dir, write_summary};
use quorumcast_bench::budget::{self, SeedInputs, SenderBudget, SenderWindow};
use quorumcast_bench::disk_floor::{self, SyncLatency, WriteRate};
use quorumcast_bench::host_memory::FreePageReporting;
use quorumcast_bench::model::Model;

/// Counts the bytes the process allocates, to report allocation per committed entry.
struct CountingAllocator;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds GlobalAlloc's contract;
// the only addition is a relaxed counter increment.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout is passed through as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        // SAFETY: `ptr` was allocated by System with `layout` (every allocation goes through `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from System with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Message length of every run.
const MESSAGE: usize = 128;
/// Messages in flight in the pipelined latency run (a power of two: the offer times live in a ring).
const PIPELINE_WINDOW: usize = 256;
/// Paced load of the C runs.
const C_RATE: u64 = 100_000;
/// Consensus idle strategies of the C runs.
const C_IDLES: [&str; 5] = ["noop", "busy-spin", "yield", "sleep-ns:1000", "backoff"];

/// How long each part runs.
#[derive(Clone, Debug)]
struct Settings {
    quick: bool,
    only: Option<String>,
    skip_c: bool,
    skip_stall: bool,
    warmup: Duration,
    window: Duration,
    windows: usize,
    serial_samples: usize,
    /// The serial runs stop after this long even with fewer samples (a contended machine makes each
    /// sample take milliseconds).
    serial_time: Duration,
    /// Pin the bench and agent threads to cores (`--pin`).
    pin: bool,
    pipeline_time: Duration,
    c_time: Duration,
    c_serial_samples: usize,
    /// The leader Sender splits its time in the saturation runs (not with `--no-split`).
    split: bool,
    /// Nanoseconds one clock read of the split takes here ([`budget::clock_read_ns`]).
    clock_read_ns: f64,
}

/// A 3-node quorumcast cluster over UDP loopback in one process: committed messages per second at
/// saturation, serial and pipelined offer-to-apply latency, and the model's C per consensus idle strategy
/// (about 3 minutes; `--quick` for a smoke run).
#[derive(Debug, Parser)]
#[command(name = "cluster", bin_name = "cargo bench --bench cluster --", args_override_self = true)]
struct Cli {
    /// A smoke run: shorter windows and fewer samples.
    #[arg(long)]
    quick: bool,
    /// Runs only the variants whose name contains TEXT (e.g. `mtu1408 classic`).
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Skips the C runs (control syscalls per consensus idle strategy).
    #[arg(long = "no-c")]
    no_c: bool,
    /// Skips the stopped-follower run (the longest gap between commits while one follower is stopped).
    #[arg(long = "no-stall")]
    no_stall: bool,
    /// Pins the bench and agent threads to cores 0 and 1 (see the layouts in the bench's docs).
    #[arg(long)]
    pin: bool,
    /// Runs the saturation rows without the leader Sender's time split (on by default: two clock reads
    /// per send or poll call and one per duty cycle; the rows print what they cost).
    #[arg(long = "no-split")]
    no_split: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Settings {
    /// The settings the command line asks for.
    fn from_args() -> Self {
        let Cli { quick, only, no_c: skip_c, no_stall: skip_stall, pin, no_split, bench: _ } = Cli::parse();
        let (split, clock_read_ns) = (!no_split, budget::clock_read_ns());
        if quick {
            Self {
                quick,
                only,
                skip_c,
                skip_stall,
                warmup: Duration::from_millis(200),
                window: Duration::from_millis(300),
                windows: 3,
                serial_samples: 1_000,
                serial_time: Duration::from_millis(300),
                pin,
                pipeline_time: Duration::from_millis(300),
                c_time: Duration::from_millis(500),
                c_serial_samples: 200,
                split,
                clock_read_ns,
            }
        } else {
            Self {
                quick,
                only,
                skip_c,
                skip_stall,
                warmup: Duration::from_millis(500),
                window: Duration::from_secs(1),
                windows: 3,
                serial_samples: 5_000,
                serial_time: Duration::from_millis(1500),
                pin,
                pipeline_time: Duration::from_secs(1),
                c_time: Duration::from_secs(2),
                c_serial_samples: 1_000,
                split,
                clock_read_ns,
            }
        }
    }
}

/// Where every node of a run keeps its log.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Storage {
    /// In memory only (`NodeBuilder::memory_log`): no recorder agent.
    Memory,
    /// Recorded on disk by the recorder agent with this sync policy, in a fresh data directory under
    /// `<target>/cluster-data`.
    Disk(SyncPolicy),
}

impl Storage {
    /// `memory`, `none` or `batch`: the summary's `storage`.
    fn as_str(self) -> &'static str {
        match self {
            Storage::Memory => "memory",
            Storage::Disk(SyncPolicy::None) => "none",
            Storage::Disk(SyncPolicy::Batch) => "batch",
        }
    }

    fn durable(self) -> bool {
        self != Storage::Memory
    }
}

/// One configuration of the log channel, and where the log is kept.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Variant {
    mtu: usize,
    mode: SendMode,
    piggyback: bool,
    /// Every datagram tagged with a keyed BLAKE3 (`[channel] auth_key`).
    auth: bool,
    /// Status messages every 10 ms instead of 200 ms (as `tuning/cluster`): a stopped follower is noticed
    /// after 30 ms.
    fast_status: bool,
    /// In memory, or recorded on disk with a sync policy.
    storage: Storage,
    /// Members of the cluster: 3, or 5 for the five-member rows (each log datagram to `members - 1`
    /// followers, the model's D).
    members: usize,
}

impl Variant {
    fn control(&self) -> &'static str {
        if self.piggyback {
            "piggyback"
        } else {
            "separate"
        }
    }

    /// `mtu1408 classic separate`, with ` auth` when authenticated, ` durable none` / ` durable batch`
    /// when the log is recorded on disk (`--only durable` selects those, and their memory twins run too),
    /// and ` five members` for a 5-member cluster (`--only five`).
    fn name(&self) -> String {
        let auth = if self.auth { " auth" } else { "" };
        let storage =
            if self.storage.durable() { format!(" durable {}", self.storage.as_str()) } else { String::new() };
        let members = if self.is_five() { " five members" } else { "" };
        format!("mtu{} {} {}{auth}{storage}{members}", self.mtu, self.mode.as_str(), self.control())
    }

    /// A plain variant: no authentication, the log in memory, 3 members.
    const fn plain(mtu: usize, mode: SendMode, piggyback: bool) -> Self {
        Self { mtu, mode, piggyback, auth: false, fast_status: false, storage: Storage::Memory, members: 3 }
    }

    /// A 5-member row (D = 4): classic sends, separate commit frames, the log in memory.
    const fn five(mtu: usize) -> Self {
        Self { members: 5, ..Self::plain(mtu, SendMode::Classic, false) }
    }

    /// Whether this is a 5-member row.
    fn is_five(&self) -> bool {
        self.members == 5
    }

    /// Followers each log datagram goes to: the model's D.
    fn followers(&self) -> usize {
        self.members - 1
    }

    /// The same variant with the log in memory: what a durable row is compared with.
    fn memory_twin(&self) -> Self {
        Self { storage: Storage::Memory, ..*self }
    }
}

/// The shared key of the authenticated variants (any 32 bytes; the bench measures the tag's cost).
const AUTH_KEY: &str = "6a09e667bb67ae853c6ef372a54ff53a510e527f9b05688c1f83d9ab5be0cd19";

fn channel(variant: &Variant) -> ChannelConfig {
    let term_length = 16 << 20;
    ChannelConfig {
        mtu: variant.mtu,
        term_length,
        send_mode: variant.mode,
        receiver_window: 2 << 20,
        socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(4 << 20) },
        auth: variant.auth.then(|| AUTH_KEY.parse().expect("a valid key")),
        status_interval: Duration::from_millis(if variant.fast_status { 10 } else { 200 }),
        ..ChannelConfig::default()
    }
}

/// Where the runs' data directories live: on the target directory's disk (a recording in /dev/shm would
/// measure memory, not the disk), one directory per process and run, removed after the run.
fn data_root(run: &str) -> std::path::PathBuf {
    target_dir().join("cluster-data").join(format!("{}-{run}", std::process::id()))
}

/// Removes a run's data directories (the recordings, the votes).
fn remove_data(run: &str) {
    let root = data_root(run);
    if let Err(e) = std::fs::remove_dir_all(&root) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("warning: could not remove {}: {e}", root.display());
        }
    }
}

/// CPU seconds this process has used (user + system), from `/proc/self/stat`; 0 where unreadable.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // After the command: state is field 3, utime and stime are fields 14 and 15, in clock ticks (100/s).
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(14) + ticks(15)) / 100.0
}

/// The 1-minute load average (other processes competing for the 2 cores make every figure worse).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

// ---------------------------------------------------------------------------------------------------------
// Invoker layout: thread 0 drives the leader and offers, thread 1 drives the followers (the harness's
// `Layout::split`).

/// The cluster of `variant`, its data (when on disk) under [`data_root`] of `run`, its threads placed by
/// `layout`.
fn spec(run: &str, variant: &Variant, layout: Layout) -> ClusterSpec {
    ClusterSpec {
        send_mode: variant.mode,
        control: if variant.piggyback { Control::Piggyback } else { Control::Separate },
        storage: match variant.storage {
            Storage::Memory => ClusterStorage::Memory,
            Storage::Disk(sync) => ClusterStorage::Disk { root: data_root(run), sync },
        },
        channel: Some(channel(variant)),
        members: variant.members,
        ..ClusterSpec::new(variant.mtu, MESSAGE, layout)
    }
}

/// Offers the next message; false when back-pressured.
fn offer(cluster: &mut LoadCluster) -> bool {
    cluster.offer().unwrap_or_else(|e| panic!("{e}"))
}

/// The stall a stopped follower causes: the longest time the leader's commit position stood still in
/// each phase of a paced run (before, while member 2 is stopped, after it runs again).
#[derive(Clone, Debug)]
struct StallResult {
    offered_per_s: f64,
    /// Longest gap between commit advances on the leader, in ms: before, stopped, after.
    gaps_ms: [f64; 3],
    /// Committed messages per second in each phase.
    committed_per_s: [f64; 3],
    /// Whether member 2 was told it is behind the retained log (it was stopped long enough to be).
    told_behind: bool,
}

/// Phases of the stall run: before, member 2 stopped for 2 s, after.
const STALL_PHASES: [(&str, Duration); 3] =
    [("before", Duration::from_secs(1)), ("stopped", Duration::from_secs(2)), ("after", Duration::from_secs(1))];

/// Offered load of the stall run, messages per second: moderate, well below saturation.
const STALL_RATE: f64 = 200_000.0;

fn run_stall(pinned: bool) -> Result<StallResult, String> {
    let variant = Variant { fast_status: true, ..Variant::plain(1408, SendMode::Classic, false) };
    let mut cluster = LoadCluster::start(&spec("stall", &variant, Layout::split(pinned))).map_err(|e| e.to_string())?;
    let mut gaps_ms = [0f64; 3];
    let mut committed_per_s = [0f64; 3];
    for (phase, (_, length)) in STALL_PHASES.iter().enumerate() {
        cluster.pause_member(2, phase == 1).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let (offered_at_start, committed_at_start) = (cluster.offered(), cluster.commit_position());
        let (mut commit, mut last_advance) = (committed_at_start, started);
        let applied_at_start = cluster.committed();
        while started.elapsed() < *length {
            let due = offered_at_start + (started.elapsed().as_secs_f64() * STALL_RATE) as u64;
            while cluster.offered() < due && offer(&mut cluster) {}
            cluster.cycle(|_| {});
            let now = Instant::now();
            let c = cluster.commit_position();
            if c > commit {
                commit = c;
                last_advance = now;
            } else if cluster.offered() > cluster.committed() {
                gaps_ms[phase] = gaps_ms[phase].max((now - last_advance).as_secs_f64() * 1e3);
            }
        }
        committed_per_s[phase] = (cluster.committed() - applied_at_start) as f64 / length.as_secs_f64();
    }
    let told_behind = cluster.stats()[2].receiver().behind_retained_received() > 0;
    if std::env::var_os("QC_BENCH_DEBUG").is_some() {
        for (id, snapshot) in cluster.stats().iter().enumerate() {
            let moved: Vec<_> = snapshot.iter().filter(|c| c.value != 0).map(|c| (&c.label, c.value)).collect();
            println!("node {id}: {moved:?}");
        }
    }
    cluster.close().map_err(|e| e.to_string())?;
    Ok(StallResult { offered_per_s: STALL_RATE, gaps_ms, committed_per_s, told_behind })
}

/// What the saturation run found.
#[derive(Clone, Debug, Default)]
struct Saturation {
    /// Committed (applied on every node) messages per second of each window.
    rates: Vec<f64>,
    /// Leader Sender control and data syscalls per second over all windows.
    control_per_s: f64,
    data_per_s: f64,
    commit_frames_per_s: f64,
    alloc_bytes_per_entry: f64,
    /// CPU seconds the process used per wall second (2.0 = both cores).
    cpu_util: f64,
    /// The recorders (all 0 with the log in memory).
    recorder: RecorderRates,
    /// The leader Sender's control syscalls per second less its polls on cycles that sent nothing: the C
    /// of the model (as the sweep takes it).
    model_c_per_s: f64,
    /// The leader Sender's data datagrams per second, every follower's copy counted.
    datagrams_per_s: f64,
    /// What names the stage that saturated first (its `sender_share` is set once S is known).
    evidence: SplitEvidence,
    diagnosis: Vec<String>,
    /// The leader Sender over the windows: its time split (0 with `--no-split`) and its counts.
    sender: SenderWindow,
}

/// What the recorders did over the saturation windows.
#[derive(Clone, Copy, Debug, Default)]
struct RecorderRates {
    /// The leader's recorder's `fdatasync` calls per second (0 under `none`).
    fsyncs_per_s: f64,
    /// Frames (entries, and the odd padding frame) the leader's recorder recorded per second.
    frames_per_s: f64,
    /// Bytes the leader's recorder wrote per second (block headers not counted).
    bytes_per_s: f64,
    /// The followers' recorders' `fdatasync` calls per second, each (the mean of the two).
    follower_fsyncs_per_s: f64,
    /// The three recorders together: what they cost per byte they wrote.
    all: RecorderCost,
}

/// The three recorders' counters added up over the saturation windows: their cost per byte.
#[derive(Clone, Copy, Debug, Default)]
struct RecorderCost {
    /// Bytes written per second, the three together.
    bytes_per_s: f64,
    /// Write calls per second.
    writes_per_s: f64,
    /// `fdatasync` calls per second.
    fsyncs_per_s: f64,
    /// Nanoseconds checksumming, per byte written.
    checksum_ns_per_byte: f64,
    /// Nanoseconds in write calls, per byte written.
    write_ns_per_byte: f64,
    /// Mean `fdatasync` time, microseconds.
    fsync_us: f64,
    /// Zeros written ahead of the blocks, per byte written (each is written to the disk twice).
    zeros_ahead_per_byte: f64,
}

impl RecorderCost {
    fn of(recorders: &[quorumcast_driver::shm::stats::RecorderStats<'_>], seconds: f64) -> Self {
        let sum = |f: &dyn Fn(&quorumcast_driver::shm::stats::RecorderStats<'_>) -> i64| {
            recorders.iter().map(|r| f(r) as f64).sum::<f64>()
        };
        let (bytes, writes, fsyncs) = (sum(&|r| r.bytes()), sum(&|r| r.writes()), sum(&|r| r.fsyncs()));
        let per_byte = |ns: f64| if bytes > 0.0 { ns / bytes } else { 0.0 };
        Self {
            bytes_per_s: bytes / seconds,
            writes_per_s: writes / seconds,
            fsyncs_per_s: fsyncs / seconds,
            checksum_ns_per_byte: per_byte(sum(&|r| r.checksum_ns())),
            write_ns_per_byte: per_byte(sum(&|r| r.write_ns())),
            fsync_us: if fsyncs > 0.0 { sum(&|r| r.sync_ns()) / fsyncs / 1e3 } else { 0.0 },
            zeros_ahead_per_byte: per_byte(sum(&|r| r.zeros_ahead())),
        }
    }

    /// Bytes per write call.
    fn bytes_per_write(&self) -> f64 {
        if self.writes_per_s > 0.0 {
            self.bytes_per_s / self.writes_per_s
        } else {
            0.0
        }
    }

    /// Bytes per `fdatasync`: the batch a group commit covered, on average.
    fn bytes_per_fsync(&self) -> Option<f64> {
        (self.fsyncs_per_s > 0.0).then(|| self.bytes_per_s / self.fsyncs_per_s)
    }
}

impl RecorderRates {
    /// Entries the leader's recorder made durable per `fdatasync`; `None` when it made none.
    fn entries_per_fsync(&self) -> Option<f64> {
        (self.fsyncs_per_s > 0.0).then(|| self.frames_per_s / self.fsyncs_per_s)
    }
}

impl Saturation {
    /// Process CPU microseconds per committed message over the windows (spinning idle loops included):
    /// what each message costs, whatever share of the cores the process got.
    fn cpu_per_entry_us(&self) -> f64 {
        let rate = self.rates.iter().sum::<f64>() / self.rates.len().max(1) as f64;
        if rate > 0.0 {
            1e6 * self.cpu_util / rate
        } else {
            0.0
        }
    }

    fn median(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Offers as fast as the leader's ingress takes, for the warm-up and then `windows` windows.
fn saturate(cluster: &mut LoadCluster, settings: &Settings) -> Saturation {
    let end_warmup = Instant::now() + settings.warmup;
    while Instant::now() < end_warmup {
        offer_burst(cluster);
        cluster.cycle(|_| {});
    }
    let mut result = Saturation::default();
    let first_counters = cluster.stats();
    let follower_loops = cluster.follower_loops();
    let alloc_start = ALLOCATED.load(Ordering::Relaxed);
    let cpu_start = cpu_seconds();
    let (mut loops, mut idle_loops, mut refused) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let first_applied = cluster.applied();
    let mut window_start = (started, first_applied.clone());
    for _ in 0..settings.windows {
        let end = window_start.0 + settings.window;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let offered = offer_burst(cluster);
            if offered < 1024 {
                refused += 1;
            }
            let work = cluster.cycle(|_| {});
            loops += 1;
            if work == 0 {
                idle_loops += 1;
            }
        }
        let now = Instant::now();
        let applied = cluster.applied();
        let seconds = (now - window_start.0).as_secs_f64();
        let slowest = applied.iter().zip(&window_start.1).map(|(a, b)| a - b).min().unwrap_or(0);
        result.rates.push(slowest as f64 / seconds);
        window_start = (now, applied);
    }
    let seconds = started.elapsed().as_secs_f64();
    result.cpu_util = (cpu_seconds() - cpu_start) / seconds;
    let last_applied = cluster.applied();
    let entries = last_applied[0] - first_applied[0];
    result.alloc_bytes_per_entry = (ALLOCATED.load(Ordering::Relaxed) - alloc_start) as f64 / entries.max(1) as f64;
    let last = cluster.stats();
    let deltas: Vec<Stats> = last.iter().zip(&first_counters).map(|(l, f)| l.since(f)).collect();
    let (leader, followers) = deltas.split_first().expect("the leader's counters");
    let (sender, consensus) = (leader.sender(), leader.consensus());
    let per_s = |count: i64| count as f64 / seconds;
    result.control_per_s = per_s(sender.control_syscalls());
    result.data_per_s = per_s(sender.data_syscalls());
    result.commit_frames_per_s = per_s(consensus.commit_frames());
    result.model_c_per_s = per_s(sender.control_syscalls() - sender.idle_control_polls());
    let recorders: Vec<_> = deltas.iter().map(|d| d.recorder()).collect();
    result.recorder = RecorderRates {
        fsyncs_per_s: per_s(leader.recorder().fsyncs()),
        frames_per_s: per_s(leader.recorder().frames()),
        bytes_per_s: per_s(leader.recorder().bytes()),
        follower_fsyncs_per_s: per_s(followers.iter().map(|f| f.recorder().fsyncs()).sum())
            / followers.len().max(1) as f64,
        all: RecorderCost::of(&recorders, seconds),
    };
    let follower_loops = {
        let (loops, idle_loops) = cluster.follower_loops();
        (loops - follower_loops.0, idle_loops - follower_loops.1)
    };
    let datagrams = per_s(sender.data_datagrams());
    result.datagrams_per_s = datagrams;
    result.sender = SenderWindow::from_counters(
        seconds,
        sender,
        consensus,
        // The leader's agents run as one invoked composite: its duty cycles are the Sender's.
        leader.iter().filter(|c| c.label.ends_with(" duty cycles")).map(|c| c.value as f64).sum(),
        result.rates.iter().sum::<f64>() / result.rates.len().max(1) as f64 * seconds,
    );
    result.evidence = SplitEvidence {
        followers: followers.len(),
        sender_share: 0.0,
        window_closed_per_s: per_s(sender.window_closed_cycles()),
        caught_up_per_s: per_s(sender.caught_up_cycles()),
        ingress_full: refused as f64 / loops.max(1) as f64,
        log_back_pressured: consensus.back_pressure() as f64 / loops.max(1) as f64,
        leader_thread_idle: idle_loops as f64 / loops.max(1) as f64,
        followers_thread_idle: follower_loops.1 as f64 / follower_loops.0.max(1) as f64,
    };
    // Each node's agents' time in duty cycles that did work (their `work ns` counters) over the wall time.
    let busy = |d: &Stats| {
        d.iter().filter(|c| c.label.ends_with(" work ns")).map(|c| c.value as f64).sum::<f64>() / (seconds * 1e9)
    };
    result.diagnosis = vec![
        format!(
            "process CPU {:.2} cores of 2 (load average {:.1}); thread 0 (load + leader): {:.0} loops/s, {:.1}% idle, {:.1}% of loops the ingress was full; appended {:.0}/s, \
             log back pressure {:.0}/s, flow-control stalls {:.0}/s",
            result.cpu_util,
            load_average(),
            loops as f64 / seconds,
            100.0 * idle_loops as f64 / loops.max(1) as f64,
            100.0 * refused as f64 / loops.max(1) as f64,
            per_s(consensus.messages_appended()),
            per_s(consensus.back_pressure()),
            per_s(sender.flow_control_stalls()),
        ),
        format!(
            "leader sender: {:.0} data syscalls/s, {:.0} datagrams/s (all {} followers), {:.1} msgs/datagram, \
             {:.0} control syscalls/s, {:.0} commit frames/s, {:.0} status msgs/s in, short sends {:.0}/s, \
             empty cycles {:.0}/s window closed and {:.0}/s caught up",
            result.data_per_s,
            datagrams,
            followers.len(),
            followers.len() as f64 * per_s(consensus.messages_appended()) / datagrams.max(1.0),
            result.control_per_s,
            result.commit_frames_per_s,
            per_s(sender.status_messages_received()),
            per_s(sender.short_sends()),
            result.evidence.window_closed_per_s,
            result.evidence.caught_up_per_s,
        ),
        format!(
            "thread 1 ({} followers): {:.0} loops/s, {:.1}% idle; follower 1 receives {:.0} datagrams/s in {:.0} recv \
             syscalls/s, NAKs {:.0}/s; datagrams/s of the others {}",
            followers.len(),
            follower_loops.0 as f64 / seconds,
            100.0 * result.evidence.followers_thread_idle,
            per_s(followers[0].receiver().datagrams()),
            per_s(followers[0].receiver().recv_syscalls()),
            per_s(followers[0].receiver().naks_sent()),
            followers[1..].iter().map(|f| rate(per_s(f.receiver().datagrams()))).collect::<Vec<_>>().join(" "),
        ),
        format!(
            "agents busy (work ns / wall time): leader {:.0}% (on thread 0), followers {} (on thread 1)",
            100.0 * busy(leader),
            followers.iter().map(|f| format!("{:.0}%", 100.0 * busy(f))).collect::<Vec<_>>().join(" "),
        ),
    ];
    if result.recorder.frames_per_s > 0.0 {
        let r = &result.recorder;
        result.diagnosis.push(format!(
            "recorders: leader {:.0} MB/s, {:.0} frames/s, {:.0} fsyncs/s ({} entries/fsync); followers {:.0} fsyncs/s each; \
             at the end the leader's recorder was {} bytes behind its log, its synced position {} behind that",
            r.bytes_per_s / 1e6,
            r.frames_per_s,
            r.fsyncs_per_s,
            r.entries_per_fsync().map_or("-".into(), |e| format!("{e:.0}")),
            r.follower_fsyncs_per_s,
            last[0].consensus().append_position() - last[0].recorder().position(),
            last[0].recorder().position() - last[0].recorder().synced_position(),
        ));
        let all = &r.all;
        result.diagnosis.push(format!(
            "recorders' cost (all three): {:.0} MB/s in {:.0} B writes, checksum {:.3} ns/B, write calls {:.3} ns/B \
             (wall time), {:.0} fsyncs/s of {:.0} KB, mean fsync {:.0} us, zeros written ahead {:.1}% of the bytes",
            all.bytes_per_s / 1e6,
            all.bytes_per_write(),
            all.checksum_ns_per_byte,
            all.write_ns_per_byte,
            all.fsyncs_per_s,
            all.bytes_per_fsync().unwrap_or(0.0) / 1e3,
            all.fsync_us,
            all.zeros_ahead_per_byte * 100.0,
        ));
    }
    result
}

/// Offers up to one consensus drain's worth of messages; returns how many were taken.
fn offer_burst(cluster: &mut LoadCluster) -> usize {
    let mut taken = 0;
    while taken < 1024 && offer(cluster) {
        taken += 1;
    }
    taken
}

/// One message at a time: offer, then drive the leader until it applies that message.
fn serial(cluster: &mut LoadCluster, samples: usize, time: Duration) -> Histogram<u64> {
    let mut histogram = histogram();
    let end = Instant::now() + time;
    for _ in 0..samples {
        if Instant::now() > end {
            break;
        }
        let start = Instant::now();
        while !offer(cluster) {
            cluster.cycle(|_| {});
        }
        let target = cluster.offered();
        while cluster.committed() < target {
            cluster.cycle(|_| {});
        }
        let _ = histogram.record(start.elapsed().as_nanos() as u64);
    }
    histogram
}

/// Up to `PIPELINE_WINDOW` messages in flight; records each message's offer-to-apply latency.
fn pipeline(cluster: &mut LoadCluster, time: Duration) -> (Histogram<u64>, f64) {
    let mut histogram = histogram();
    let mut offered_at = [Instant::now(); PIPELINE_WINDOW];
    let first = cluster.committed();
    let start = Instant::now();
    let end = start + time;
    while Instant::now() < end {
        while cluster.offered() - cluster.committed() < PIPELINE_WINDOW as u64 {
            let seq = cluster.offered();
            let now = Instant::now();
            if !offer(cluster) {
                break;
            }
            offered_at[seq as usize % PIPELINE_WINDOW] = now;
        }
        let (h, at) = (&mut histogram, &offered_at);
        cluster.cycle(|seq| {
            let _ = h.record(at[seq as usize % PIPELINE_WINDOW].elapsed().as_nanos() as u64);
        });
    }
    let rate = (cluster.committed() - first) as f64 / start.elapsed().as_secs_f64();
    (histogram, rate)
}

/// Everything measured for one variant in the invoker layout.
#[derive(Clone, Debug)]
struct VariantResult {
    variant: Variant,
    saturation: Saturation,
    serial: (f64, f64, u64),
    /// The leader's recorder's `fdatasync` calls per serial message.
    serial_fsyncs_per_msg: f64,
    pipeline: (f64, f64, f64),
    warnings: Vec<String>,
    out_of_order: u64,
    /// Five-member rows: the model beside the measured rate, and the stage that saturated first.
    model: Option<ModelCheck>,
}

impl VariantResult {
    /// The leader Sender's budget over the saturation windows (none with `--no-split`), beside the model
    /// where the row has one (the five-member rows probe S; the others have no seed figure), and whether
    /// it is held to mu: only where the Sender saturated first.
    fn budget(&self, clock_read_ns: f64) -> Option<(SenderBudget, bool)> {
        let d = self.variant.followers() as u32;
        let seed =
            self.model.as_ref().map_or(SeedInputs { s: 0.0, c: self.saturation.model_c_per_s, d, m_pkt: 0.0 }, |m| {
                SeedInputs { s: m.s, c: m.c, d, m_pkt: m.m_pkt }
            });
        let compared = self.model.as_ref().is_some_and(ModelCheck::comparable);
        SenderBudget::of(&self.saturation.sender, &seed, clock_read_ns).map(|b| (b, compared))
    }
}

/// The model's `(S - C) / D x M_pkt` for a row, with S probed in the same run for its D, and the stage
/// that saturated first: the model's figure is the one to compare with only when it was the Sender.
#[derive(Clone, Debug)]
struct ModelCheck {
    /// S: datagrams per second one thread puts out to D loopback destinations at the row's mode and MTU.
    s: f64,
    /// C: the leader Sender's control syscalls per second at saturation, less its idle polls.
    c: f64,
    /// D: followers.
    d: usize,
    /// M_pkt: messages per datagram at the row's MTU.
    m_pkt: f64,
    /// The model's mu, messages per second (0 when it cannot predict: `error` says why).
    mu: f64,
    error: Option<String>,
    bottleneck: Bottleneck,
}

impl ModelCheck {
    /// Whether the measured rate is to be set against the model: the Sender saturated first.
    fn comparable(&self) -> bool {
        self.bottleneck.stage == Stage::Sender && self.mu > 0.0
    }

    /// `committed 1.23M/s = 0.95x the model's 1.29M/s (S ..., C ..., D 4, M_pkt 8)`, or why it is not
    /// compared.
    fn describe(&self, committed: f64) -> String {
        let inputs = format!(
            "S {}/s for D = {}, C {}/s, M_pkt {:.0}: (S - C) / {} x M_pkt = {}/s",
            rate(self.s),
            self.d,
            rate(self.c),
            self.m_pkt,
            self.d,
            rate(self.mu)
        );
        match (&self.error, self.comparable()) {
            (Some(e), _) => format!("the model cannot predict: {e}"),
            (None, true) => {
                format!("committed {}/s = {:.2}x the model's ({inputs})", rate(committed), committed / self.mu)
            }
            (None, false) => format!(
                "not compared with the model ({inputs}): the Sender was not the stage that saturated; {}",
                self.bottleneck.text
            ),
        }
    }
}

/// How long the S probe of a five-member row runs: `windows` windows of `window`.
fn s_probe_timing(settings: &Settings) -> (Duration, usize) {
    if settings.quick {
        (Duration::from_millis(200), 3)
    } else {
        (Duration::from_millis(500), 5)
    }
}

/// S for `variant`'s D, mode and MTU, probed before its cluster starts (nothing else of the bench runs).
fn probe_s_for(variant: &Variant, settings: &Settings) -> Result<f64, String> {
    let (window, windows) = s_probe_timing(settings);
    let cores = Layout::split(settings.pin).probe_cores();
    quorumcast_bench::probe::probe_s(variant.mode, variant.mtu, variant.followers(), window, windows, cores)
        .map(|r| r.datagrams_per_s)
        .map_err(|e| format!("the S probe for D = {}: {e}", variant.followers()))
}

/// The model and the stage that saturated for a row measured with `saturation`, given its probed `s`.
fn model_check(variant: &Variant, saturation: &Saturation, s: f64) -> ModelCheck {
    let evidence = SplitEvidence {
        sender_share: if s > 0.0 { saturation.datagrams_per_s / s } else { 0.0 },
        ..saturation.evidence
    };
    let c = saturation.model_c_per_s.max(0.0);
    let analysis = Model::new(s, c, variant.followers() as u32).and_then(|m| m.analyze(variant.mtu, MESSAGE));
    let (m_pkt, mu, error) = match analysis {
        Ok(capacity) => (capacity.packing.per_datagram(), capacity.mu, None),
        Err(e) => (0.0, 0.0, Some(e.to_string())),
    };
    ModelCheck { s, c, d: variant.followers(), m_pkt, mu, error, bottleneck: classify_split(&evidence) }
}

fn us(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

fn run_variant(variant: Variant, settings: &Settings, index: usize) -> Result<VariantResult, String> {
    let run = format!("v{index}");
    remove_data(&run);
    let s = if variant.is_five() { Some(probe_s_for(&variant, settings)?) } else { None };
    let result = on_harness_thread(|| measure_variant(&run, variant, settings).map_err(SweepError::Cluster))
        .map_err(|e| e.to_string());
    remove_data(&run);
    let mut result = result?;
    result.model = s.map(|s| model_check(&variant, &result.saturation, s));
    Ok(result)
}

fn measure_variant(run: &str, variant: Variant, settings: &Settings) -> Result<VariantResult, String> {
    let layout = Layout::split(settings.pin);
    let spec = ClusterSpec { time_split: settings.split, ..spec(run, &variant, layout) };
    let mut cluster = LoadCluster::start(&spec).map_err(|e| e.to_string())?;
    let warnings = cluster.warnings().to_vec();
    let saturation = saturate(&mut cluster, settings);
    cluster.drain(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let before = cluster.stats();
    let serial_histogram = serial(&mut cluster, settings.serial_samples, settings.serial_time);
    let after = cluster.stats();
    let serial_fsyncs_per_msg =
        after[0].since(&before[0]).recorder().fsyncs() as f64 / serial_histogram.len().max(1) as f64;
    if std::env::var_os("QC_BENCH_DEBUG").is_some() {
        println!("serial samples {}", serial_histogram.len());
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            for counter in a.since(b).iter().filter(|c| c.value != 0) {
                println!("  node {i} {}: {}", counter.label, counter.value);
            }
        }
    }
    let (pipeline_histogram, pipeline_rate) = pipeline(&mut cluster, settings.pipeline_time);
    cluster.drain(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let out_of_order = cluster.out_of_order();
    cluster.close().map_err(|e| e.to_string())?;
    Ok(VariantResult {
        variant,
        saturation,
        serial: (us(&serial_histogram, 0.5), us(&serial_histogram, 0.99), serial_histogram.len()),
        serial_fsyncs_per_msg,
        pipeline: (us(&pipeline_histogram, 0.5), us(&pipeline_histogram, 0.99), pipeline_rate),
        warnings,
        out_of_order,
        model: None,
    })
}

// ---------------------------------------------------------------------------------------------------------
// Threaded layout for C: the leader's consensus agent on its own thread with the strategy under test.

/// What one C run found.
#[derive(Clone, Debug)]
struct CResult {
    variant: Variant,
    idle: String,
    achieved: f64,
    control_per_s: f64,
    data_per_s: f64,
    commit_frames_per_s: f64,
    consensus_cycles_per_s: f64,
    serial: (f64, f64, u64),
}

fn run_c(variant: Variant, idle: &str, settings: &Settings, index: usize) -> Result<CResult, String> {
    let run = format!("c{index}");
    remove_data(&run);
    let result = on_harness_thread(|| measure_c(&run, variant, idle, settings).map_err(SweepError::Cluster))
        .map_err(|e| e.to_string());
    remove_data(&run);
    result
}

fn measure_c(run: &str, variant: Variant, idle: &str, settings: &Settings) -> Result<CResult, String> {
    let consensus: IdleStrategyConfig = idle.parse().map_err(|e| format!("{e}"))?;
    let layout = Layout::for_cores(2).for_c_probe();
    let layout = if settings.pin { layout } else { layout.without_pinning() };
    let spec = ClusterSpec { consensus_idle: consensus, ..spec(run, &variant, layout) };
    let mut cluster = LoadCluster::start(&spec).map_err(|e| format!("C run {idle}: {e}"))?;
    // Paced load: the warm-up third of the time, then the measured window.
    let warmup = settings.c_time / 3;
    let start = Instant::now();
    let base = cluster.offered();
    let mut first: Option<(Instant, Stats, Vec<u64>)> = None;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= warmup + settings.c_time {
            break;
        }
        if first.is_none() && elapsed >= warmup {
            let leader = cluster.stats().swap_remove(0);
            first = Some((Instant::now(), leader, cluster.applied()));
        }
        let due = base + (C_RATE as u128 * elapsed.as_nanos() / 1_000_000_000) as u64;
        while cluster.offered() < due && offer(&mut cluster) {}
        cluster.poll(|_| {});
        std::thread::sleep(Duration::from_micros(50));
    }
    let (t0, s0, a0) = first.expect("the warm-up ends before the window");
    let seconds = t0.elapsed().as_secs_f64();
    let applied = cluster.applied();
    let leader = cluster.stats().swap_remove(0).since(&s0);
    let rate = |count: i64| count as f64 / seconds;
    let achieved = applied.iter().zip(&a0).map(|(a, b)| a - b).min().unwrap_or(0) as f64 / seconds;
    let (control_per_s, data_per_s) = (rate(leader.sender().control_syscalls()), rate(leader.sender().data_syscalls()));
    let (commit_frames_per_s, consensus_cycles_per_s) =
        (rate(leader.consensus().commit_frames()), rate(leader.labelled("consensus duty cycles")));
    // Serial latency in this layout.
    cluster.drain(Duration::from_secs(10)).map_err(|e| format!("C run {idle}: {e}"))?;
    let mut histogram = histogram();
    let end = Instant::now() + settings.serial_time;
    for _ in 0..settings.c_serial_samples {
        if Instant::now() > end {
            break;
        }
        let t = Instant::now();
        while !offer(&mut cluster) {
            std::thread::yield_now();
        }
        while cluster.committed() < cluster.offered() {
            if cluster.poll(|_| {}) == 0 {
                std::thread::yield_now();
            }
        }
        let _ = histogram.record(t.elapsed().as_nanos() as u64);
    }
    cluster.close().map_err(|e| format!("C run {idle}: {e}"))?;
    Ok(CResult {
        variant,
        idle: idle.to_owned(),
        achieved,
        control_per_s,
        data_per_s,
        commit_frames_per_s,
        consensus_cycles_per_s,
        serial: (us(&histogram, 0.5), us(&histogram, 0.99), histogram.len()),
    })
}

// ---------------------------------------------------------------------------------------------------------
// Output.

fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.0}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

fn print_tables(results: &[VariantResult], c_results: &[CResult], clock_read_ns: f64) {
    println!();
    println!(
        "## Raft table (layout of docs/BASELINE.md): 3 nodes (5 where said) in one process, 128 B messages, committed = applied on all"
    );
    println!();
    println!("| Engine | Variant / completion level | Serial p50 | Serial p99 | Pipeline (window 256) sustained, p50 / p99 | Saturation sustained, median (min / max of 3 windows) | Allocation/entry |");
    println!("|---|---|---|---|---|---|---|");
    for r in results {
        let s = &r.saturation;
        let min = s.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = s.rates.iter().copied().fold(0.0, f64::max);
        println!(
            "| quorumcast | UDP loopback · MTU {} · {} · commit {}{}{} · applied | {:.1}us | {:.1}us | {} op/s, {:.0}us / {:.0}us | {} ({} / {}) | {:.1} B |",
            r.variant.mtu,
            r.variant.mode.as_str(),
            r.variant.control(),
            match r.variant.storage {
                Storage::Memory => String::new(),
                storage => format!(" · log on disk, sync {}", storage.as_str()),
            },
            if r.variant.is_five() { " · 5 members" } else { "" },
            r.serial.0,
            r.serial.1,
            rate(r.pipeline.2),
            r.pipeline.0,
            r.pipeline.1,
            rate(s.median()),
            rate(min),
            rate(max),
            s.alloc_bytes_per_entry,
        );
    }
    let other = "TC.Tier Core.Net (another system: .NET 8, i5-12400, 12 cores, Windows 11; docs/BASELINE.md)";
    println!("| {other} | InProcess · applied | 90us | — | 606k op/s (800 in flight) | 1.18M (308k / 1.60M, round p10/p90) | ~2.0KB |");
    println!("| {other} | TCP · applied | 250us | — | 142k op/s (800 in flight) | 397k (155k / 497k, round p10/p90) | ~12.5KB |");
    println!("| {other} | TCP · committed | 220us | — | 147k op/s (800 in flight) | 517k (174k / 635k, round p10/p90) | ~12.7KB |");
    println!();
    println!("Saturation detail (leader Sender at saturation):");
    println!();
    println!(
        "| Variant | committed msg/s | data syscalls/s | control syscalls/s (C) | commit frames/s | sender time: data / \
         control / own / idle / between cycles | ns per datagram: data / control / own | budget mu (vs committed) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        let s = &r.saturation;
        let (split, per_datagram, mu) = match r.budget(clock_read_ns) {
            Some((b, compared)) => (
                format!(
                    "{:.0}% / {:.0}% / {:.0}% / {:.0}% / {:.0}%",
                    100.0 * b.data_share,
                    100.0 * b.control_share,
                    100.0 * b.own_share,
                    100.0 * b.idle_share,
                    100.0 * b.between_share
                ),
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    b.data_ns_per_datagram, b.control_ns_per_datagram, b.own_ns_per_datagram
                ),
                format!(
                    "{} ({:+.1}%{})",
                    rate(b.mu_budget),
                    100.0 * b.budget_error,
                    if compared { "" } else { ", not compared" }
                ),
            ),
            None => ("not split".into(), "-".into(), "-".into()),
        };
        println!(
            "| {} | {} | {} | {} | {} | {split} | {per_datagram} | {mu} |",
            r.variant.name(),
            rate(s.median()),
            rate(s.data_per_s),
            rate(s.control_per_s),
            rate(s.commit_frames_per_s)
        );
    }
    print_durable(results);
    print_five(results);
    if !c_results.is_empty() {
        println!();
        println!(
            "## C per consensus idle strategy, paced at {} msg/s (leader's consensus on its own thread with the strategy; every other agent backoff)",
            rate(C_RATE as f64)
        );
        println!();
        println!("| Variant | Consensus idle | achieved msg/s | C: sender control syscalls/s | of which commit frames (2 x frames/s) | data syscalls/s | consensus cycles/s | serial p50 / p99 |");
        println!("|---|---|---|---|---|---|---|---|");
        for c in c_results {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.0}us / {:.0}us |",
                c.variant.name(),
                c.idle,
                rate(c.achieved),
                rate(c.control_per_s),
                rate(2.0 * c.commit_frames_per_s),
                rate(c.data_per_s),
                rate(c.consensus_cycles_per_s),
                c.serial.0,
                c.serial.1
            );
        }
    }
}

/// The five-member rows beside the model and beside the same variant with 3 members, when it ran.
fn print_five(results: &[VariantResult]) {
    let five: Vec<(&VariantResult, &ModelCheck)> =
        results.iter().filter_map(|r| r.model.as_ref().map(|m| (r, m))).collect();
    if five.is_empty() {
        return;
    }
    println!();
    println!(
        "## Five members (D = 4, in memory, classic, separate commit frames): committed msg/s beside the model's (S - C) / 4 x M_pkt"
    );
    println!();
    println!("| Variant | committed msg/s, median | vs 3 members | S (D = 4) | C | M_pkt | model (S - C) / 4 x M_pkt | vs model | stage that saturated first |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (r, m) in five {
        let committed = r.saturation.median();
        let three = Variant { members: 3, ..r.variant };
        let vs_three = results
            .iter()
            .find(|t| t.variant == three)
            .map_or("not run".into(), |t| format!("{:.2}x", committed / t.saturation.median()));
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
            r.variant.name(),
            rate(committed),
            vs_three,
            rate(m.s),
            rate(m.c),
            m.m_pkt,
            rate(m.mu),
            if m.comparable() { format!("{:.2}x", committed / m.mu) } else { "not compared".into() },
            m.bottleneck.text
        );
    }
}

/// The memory twin measured in the same run, of a durable row.
fn twin_of<'a>(results: &'a [VariantResult], variant: &Variant) -> Option<&'a VariantResult> {
    results.iter().find(|t| t.variant == variant.memory_twin())
}

/// A durable row's committed rate over its memory twin's.
fn ratio_to_memory(results: &[VariantResult], r: &VariantResult) -> Option<f64> {
    twin_of(results, &r.variant).map(|t| r.saturation.median() / t.saturation.median())
}

/// This disk's floors, measured right after the durable rows, in the same run.
#[derive(Clone, Debug)]
struct DiskFloor {
    /// `fdatasync` after a 4 KiB append, one writer: the target's floor.
    sync: SyncLatency,
    /// The same by three writers at once (each its own file), as three recorders on one disk sync.
    sync_three: SyncLatency,
    /// Three writers appending 1 MiB at a time through the page cache, synced once at the end.
    sequential: WriteRate,
    /// Per `batch` row: three writers each appending that row's mean bytes per `fdatasync` and syncing
    /// each, one sync in flight per writer (what three recorders on this disk can do at best).
    synced: Vec<(Variant, WriteRate)>,
    /// Per `none` row: one writer appending that row's mean bytes per write call through the page cache,
    /// for its CPU per byte (what the recorders' writes cost at best).
    page_cache: Vec<(Variant, WriteRate)>,
    /// Whether the hypervisor took freed memory back, at the bench's start and at the floor: where it
    /// does, the rows' page cache may have paid a hypervisor fault per new page that the floor, writing
    /// into memory the rows had just freed, did not.
    reporting: Option<(Option<FreePageReporting>, FreePageReporting)>,
}

/// Appended before each `fdatasync` of the floor's latency.
const FLOOR_APPEND: usize = 4096;
/// Writers of the floor's write rates: one per recorder.
const FLOOR_WRITERS: usize = 3;

/// Measures the disk's floor when durable rows ran, under `<target>/cluster-data` (where they wrote).
fn measure_floor(
    results: &[VariantResult],
    settings: &Settings,
    reporting_at_start: Option<FreePageReporting>,
) -> Result<Option<DiskFloor>, String> {
    if !results.iter().any(|r| r.variant.storage.durable()) {
        return Ok(None);
    }
    let dir = data_root("floor");
    let time = if settings.quick { Duration::from_millis(300) } else { Duration::from_secs(1) };
    let measured = (|| -> std::io::Result<DiskFloor> {
        let sync = disk_floor::sync_latency(&dir, FLOOR_APPEND, 1, 2_000, time)?;
        let sync_three = disk_floor::sync_latency(&dir, FLOOR_APPEND, FLOOR_WRITERS, 2_000, time)?;
        let sequential = disk_floor::write_rate(&dir, FLOOR_WRITERS, 1 << 20, false, time)?;
        let mut synced = Vec::new();
        for r in results.iter().filter(|r| r.variant.storage == Storage::Disk(SyncPolicy::Batch)) {
            let Some(batch) = r.saturation.recorder.all.bytes_per_fsync() else { continue };
            let block = (batch as usize).next_multiple_of(32).max(32);
            synced.push((r.variant, disk_floor::write_rate(&dir, FLOOR_WRITERS, block, true, time)?));
        }
        let mut page_cache = Vec::new();
        for r in results.iter().filter(|r| r.variant.storage == Storage::Disk(SyncPolicy::None)) {
            let block = (r.saturation.recorder.all.bytes_per_write() as usize).next_multiple_of(32).max(32);
            page_cache.push((r.variant, disk_floor::write_rate(&dir, 1, block, false, time)?));
        }
        let reporting = FreePageReporting::read().map(|now| (reporting_at_start, now));
        Ok(DiskFloor { sync, sync_three, sequential, synced, page_cache, reporting })
    })();
    remove_data("floor");
    measured.map(Some).map_err(|e| format!("the disk floor: {e}"))
}

/// Issue 28's targets for the log on disk, against the memory twin and the disk's floor of the same run:
/// a verdict per durable row.
fn verdicts(results: &[VariantResult], floor: Option<&DiskFloor>) -> Vec<(Variant, String)> {
    let mut out = Vec::new();
    for r in results.iter().filter(|r| r.variant.storage.durable()) {
        let (Some(twin), Some(ratio)) = (twin_of(results, &r.variant), ratio_to_memory(results, r)) else {
            continue;
        };
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        let verdict = match r.variant.storage {
            Storage::Disk(SyncPolicy::None) => {
                let mut verdict = format!("committed {:.2}x memory (target >= 0.9x): {}", ratio, met(ratio >= 0.9));
                if let Some((_, floor_rate)) = floor.and_then(|f| f.page_cache.iter().find(|(v, _)| *v == r.variant)) {
                    let all = &r.saturation.recorder.all;
                    verdict.push_str(&format!(
                        "; the recorders' write calls {:.3} ns/B (wall) against the page cache's {:.3} ns/B (CPU, \
                         one writer of {:.0} KB writes), checksum {:.3} ns/B",
                        all.write_ns_per_byte,
                        floor_rate.cpu_ns_per_byte,
                        floor_rate.block as f64 / 1e3,
                        all.checksum_ns_per_byte
                    ));
                    let reporting = floor.and_then(|f| f.reporting).is_some_and(|(_, now)| now.on);
                    if reporting && all.write_ns_per_byte > 1.5 * floor_rate.cpu_ns_per_byte {
                        verdict.push_str(
                            "; free page reporting is on: the write calls' excess may be hypervisor faults on \
                             new page-cache pages (see the host memory line)",
                        );
                    }
                }
                verdict
            }
            _ => {
                let mut parts = vec![format!("committed {:.2}x memory (target >= 0.5x): {}", ratio, met(ratio >= 0.5))];
                if let Some((_, floor_rate)) = floor.and_then(|f| f.synced.iter().find(|(v, _)| *v == r.variant)) {
                    let share = r.saturation.recorder.all.bytes_per_s / floor_rate.bytes_per_s;
                    parts.push(format!(
                        "or the three recorders' {:.0} MB/s {:.2}x the disk's {:.0} MB/s with {} writers of {:.0} KB \
                         batches each synced (target >= 0.8x): {}",
                        r.saturation.recorder.all.bytes_per_s / 1e6,
                        share,
                        floor_rate.bytes_per_s / 1e6,
                        floor_rate.writers,
                        floor_rate.block as f64 / 1e3,
                        met(share >= 0.8)
                    ));
                }
                if let Some(floor) = floor {
                    let bound = floor.sync.p50_us + 1.5 * twin.serial.0;
                    parts.push(format!(
                        "serial p50 {:.0} us against fdatasync p50 {:.0} us + 1.5 x memory's {:.1} us = {:.0} us: {} \
                         (three writers syncing at once: fdatasync p50 {:.0} us)",
                        r.serial.0,
                        floor.sync.p50_us,
                        twin.serial.0,
                        bound,
                        met(r.serial.0 <= bound),
                        floor.sync_three.p50_us
                    ));
                }
                parts.join("; ")
            }
        };
        out.push((r.variant, verdict));
    }
    out
}

/// The disk's floor and the targets' verdicts.
fn print_floor(results: &[VariantResult], floor: Option<&DiskFloor>) {
    if let Some(floor) = floor {
        println!();
        println!(
            "Floor (this disk, same run): fdatasync after a {} B append p50 {:.0} us, p99 {:.0} us ({} syncs); \
             by {} writers at once p50 {:.0} us, p99 {:.0} us; {} writers appending 1 MiB through the page cache \
             {:.0} MB/s",
            floor.sync.append,
            floor.sync.p50_us,
            floor.sync.p99_us,
            floor.sync.samples,
            floor.sync_three.writers,
            floor.sync_three.p50_us,
            floor.sync_three.p99_us,
            floor.sequential.writers,
            floor.sequential.bytes_per_s / 1e6
        );
        if let Some((before, now)) = &floor.reporting {
            println!("Host memory: {}", now.describe(before.as_ref()));
        }
        for (variant, rate) in &floor.page_cache {
            println!(
                "  for {}: one writer appending {:.0} KB through the page cache: {:.3} ns/B of CPU, {:.0} MB/s",
                variant.name(),
                rate.block as f64 / 1e3,
                rate.cpu_ns_per_byte,
                rate.bytes_per_s / 1e6
            );
        }
        for (variant, rate) in &floor.synced {
            println!(
                "  for {}: {} writers each appending {:.0} KB and syncing it: {:.0} MB/s, {:.0} fsyncs/s each",
                variant.name(),
                rate.writers,
                rate.block as f64 / 1e3,
                rate.bytes_per_s / 1e6,
                rate.syncs_per_s_each
            );
        }
    }
    for (variant, verdict) in verdicts(results, floor) {
        println!("Target, {}: {verdict}", variant.name());
    }
}

/// The log on disk beside the same variant in memory, measured in this run.
fn print_durable(results: &[VariantResult]) {
    if !results.iter().any(|r| r.variant.storage.durable()) {
        return;
    }
    println!();
    println!(
        "## The log on disk (recorder agent; `none` = page cache only, `batch` = group commit, one fdatasync in flight per recorder, \
         acknowledged and counted only once synced), beside the log in memory, same run"
    );
    println!();
    println!("| Variant | storage | committed msg/s, median (min / max) | vs memory | serial p50 | serial p99 | leader fsyncs/s | entries/fsync | follower fsyncs/s (each) | leader recorded MB/s | fsyncs per serial msg | process CPU | CPU us per committed msg | recorders' MB/s (3) | B per write | checksum ns/B | write ns/B | mean fsync |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let groups = results.iter().filter(|r| r.variant.storage.durable()).map(|r| r.variant.memory_twin());
    let mut twins: Vec<Variant> = Vec::new();
    for twin in groups {
        if !twins.contains(&twin) {
            twins.push(twin);
        }
    }
    for twin in twins {
        for r in results.iter().filter(|r| r.variant.memory_twin() == twin) {
            let s = &r.saturation;
            let min = s.rates.iter().copied().fold(f64::INFINITY, f64::min);
            let max = s.rates.iter().copied().fold(0.0, f64::max);
            let durable = r.variant.storage.durable();
            let rec = &s.recorder;
            println!(
                "| {} | {} | {} ({} / {}) | {} | {:.1}us | {:.1}us | {} | {} | {} | {} | {} | {:.2} cores | {:.2} | {} |",
                twin.name(),
                r.variant.storage.as_str(),
                rate(s.median()),
                rate(min),
                rate(max),
                if durable {
                    ratio_to_memory(results, r).map_or("no twin".into(), |x| format!("{:.0}%", 100.0 * x))
                } else {
                    "100%".into()
                },
                r.serial.0,
                r.serial.1,
                if durable { rate(rec.fsyncs_per_s) } else { "—".into() },
                rec.entries_per_fsync().map_or("—".into(), |e| format!("{e:.0}")),
                if durable { rate(rec.follower_fsyncs_per_s) } else { "—".into() },
                if durable { format!("{:.0}", rec.bytes_per_s / 1e6) } else { "—".into() },
                if durable { format!("{:.2}", r.serial_fsyncs_per_msg) } else { "—".into() },
                s.cpu_util,
                s.cpu_per_entry_us(),
                if durable {
                    let all = &rec.all;
                    format!(
                        "{:.0} | {:.0} | {:.3} | {:.3} | {}",
                        all.bytes_per_s / 1e6,
                        all.bytes_per_write(),
                        all.checksum_ns_per_byte,
                        all.write_ns_per_byte,
                        if all.fsyncs_per_s > 0.0 { format!("{:.0}us", all.fsync_us) } else { "—".into() }
                    )
                } else {
                    "— | — | — | — | —".into()
                },
            );
        }
    }
}

fn invoker_layout(settings: &Settings) -> String {
    let (a, b) = if settings.pin { (" (pinned to core 0)", " (pinned to core 1)") } else { ("", "") };
    format!(
        "every node in invoker mode; bench thread 0{a} = load generator + leader's agents + leader's apply; \
         bench thread 1{b} = every follower's agents + their apply (2 followers; 4 in the five-member rows); 2 \
         spinning threads on 2 cores"
    )
}

fn c_layout(settings: &Settings) -> String {
    let (a, b) = if settings.pin { (" (core 1)", " (core 0)") } else { ("", "") };
    format!(
        "leader in shared-network mode: its consensus agent on a thread of its own{a} with the strategy under \
         test, its sender+receiver thread{b} with backoff; each follower in shared mode (one thread{b}) with \
         backoff; bench thread{b} = pacer + apply of every node, sleeping 50 us between bursts"
    )
}

fn rows(settings: &Settings, results: &[VariantResult], c_results: &[CResult]) -> Vec<Value> {
    let mut rows: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut row = json!({
                "mtu": r.variant.mtu,
                "msg": MESSAGE,
                "send_mode": r.variant.mode.as_str(),
                "control": r.variant.control(),
                "auth": r.variant.auth,
                "storage": r.variant.storage.as_str(),
                "idle": "invoker: spin, yield when idle",
                "layout": invoker_layout(settings),
                "committed_msgs_per_s": r.saturation.median(),
                "committed_msgs_per_s_windows": r.saturation.rates,
                "serial_us": { "p50": r.serial.0, "p99": r.serial.1, "samples": r.serial.2 },
                "pipeline": { "window": PIPELINE_WINDOW, "msgs_per_s": r.pipeline.2, "p50_us": r.pipeline.0, "p99_us": r.pipeline.1 },
                "c_per_s": r.saturation.control_per_s,
                "data_syscalls_per_s": r.saturation.data_per_s,
                "commit_frames_per_s": r.saturation.commit_frames_per_s,
                "alloc_bytes_per_entry": r.saturation.alloc_bytes_per_entry,
                "cpu_cores_used": r.saturation.cpu_util,
                "cpu_us_per_committed_msg": r.saturation.cpu_per_entry_us(),
                "out_of_order": r.out_of_order,
                "members": r.variant.members,
            });
            if let Some((b, compared)) = r.budget(settings.clock_read_ns) {
                row["sender_budget"] = json!(b);
                row["sender_budget_compared"] = json!(compared);
            }
            if let Some(m) = &r.model {
                row["model"] = json!({
                    "s_datagrams_per_s": m.s,
                    "s_destinations": m.d,
                    "c_per_s": m.c,
                    "d": m.d,
                    "m_pkt": m.m_pkt,
                    "mu_predicted": m.mu,
                    "error": m.error,
                    "stage": m.bottleneck.stage.as_str(),
                    "stage_evidence": m.bottleneck.text,
                    "compared": m.comparable(),
                    "committed_vs_model": m.comparable().then(|| r.saturation.median() / m.mu),
                });
            }
            if r.variant.storage.durable() {
                let rec = &r.saturation.recorder;
                row["recorder"] = json!({
                    "leader_fsyncs_per_s": rec.fsyncs_per_s,
                    "entries_per_fsync": rec.entries_per_fsync(),
                    "leader_frames_per_s": rec.frames_per_s,
                    "leader_bytes_per_s": rec.bytes_per_s,
                    "follower_fsyncs_per_s": rec.follower_fsyncs_per_s,
                    "serial_fsyncs_per_msg": r.serial_fsyncs_per_msg,
                    "all_three": {
                        "bytes_per_s": rec.all.bytes_per_s,
                        "bytes_per_write": rec.all.bytes_per_write(),
                        "checksum_ns_per_byte": rec.all.checksum_ns_per_byte,
                        "write_ns_per_byte": rec.all.write_ns_per_byte,
                        "fsyncs_per_s": rec.all.fsyncs_per_s,
                        "bytes_per_fsync": rec.all.bytes_per_fsync(),
                        "mean_fsync_us": rec.all.fsync_us,
                    },
                    "data_dir": target_dir().join("cluster-data").display().to_string(),
                });
                row["committed_vs_memory"] = json!(ratio_to_memory(results, r));
            }
            row
        })
        .collect();
    rows.extend(c_results.iter().map(|c| {
        json!({
            "mtu": c.variant.mtu,
            "msg": MESSAGE,
            "send_mode": c.variant.mode.as_str(),
            "control": c.variant.control(),
            "storage": c.variant.storage.as_str(),
            "idle": c.idle,
            "layout": c_layout(settings),
            "offered_msgs_per_s": C_RATE,
            "committed_msgs_per_s": c.achieved,
            "serial_us": { "p50": c.serial.0, "p99": c.serial.1, "samples": c.serial.2 },
            "c_per_s": c.control_per_s,
            "data_syscalls_per_s": c.data_per_s,
            "commit_frames_per_s": c.commit_frames_per_s,
            "commit_frame_syscalls_per_s": 2.0 * c.commit_frames_per_s,
            "consensus_cycles_per_s": c.consensus_cycles_per_s,
        })
    }));
    rows
}

fn variants(settings: &Settings) -> Vec<Variant> {
    let mut all = Vec::new();
    for mtu in [1408, 8192] {
        // The log on disk, `none` and `batch`, right after their memory twin (classic, separate commit
        // frames): the three are compared with each other, measured seconds apart.
        let durable = [SyncPolicy::None, SyncPolicy::Batch]
            .map(|sync| Variant { storage: Storage::Disk(sync), ..Variant::plain(mtu, SendMode::Classic, false) });
        if settings.quick && settings.only.is_none() {
            all.push(Variant::plain(mtu, SendMode::Classic, false));
            all.extend(durable);
            all.push(Variant::plain(mtu, SendMode::Gso, true));
            all.push(Variant { auth: true, ..Variant::plain(mtu, SendMode::Classic, false) });
            continue;
        }
        for mode in SendMode::ALL {
            for piggyback in [false, true] {
                all.push(Variant::plain(mtu, mode, piggyback));
                if mode == SendMode::Classic && !piggyback {
                    all.extend(durable);
                }
            }
        }
        // With authentication: classic, and the best mode that can tag each datagram (GSO cannot: mmsg).
        for mode in [SendMode::Classic, SendMode::Mmsg] {
            all.push(Variant { auth: true, ..Variant::plain(mtu, mode, false) });
        }
    }
    // Five members (D = 4), classic with separate commit frames, in memory: beside the model.
    all.extend([1408, 8192].map(Variant::five));
    all
}

fn print_stall(s: &StallResult) {
    println!(
        "\nStopped follower (mtu1408 classic separate, status interval 10 ms), paced at {}/s:",
        rate(s.offered_per_s)
    );
    println!("| phase | seconds | committed /s | longest gap between commits on the leader |");
    println!("|---|---:|---:|---:|");
    for (i, (name, length)) in STALL_PHASES.iter().enumerate() {
        println!("| {name} | {:.0} | {} | {:.2} ms |", length.as_secs_f64(), rate(s.committed_per_s[i]), s.gaps_ms[i]);
    }
    println!("member 2 told it is behind the retained log when it ran again: {}", s.told_behind);
}

fn selected(settings: &Settings, name: &str) -> bool {
    settings.only.as_deref().is_none_or(|only| name.contains(only))
}

/// Whether to run `variant` of `all`: selected by name, or the memory twin of a durable row that is (a
/// durable row is always compared with its twin measured in the same run).
fn wanted(settings: &Settings, variant: &Variant, all: &[Variant]) -> bool {
    selected(settings, &variant.name())
        || all.iter().any(|v| v.storage.durable() && v.memory_twin() == *variant && selected(settings, &v.name()))
}

fn main() {
    let settings = Settings::from_args();
    let started = Instant::now();
    let load_at_start = load_average();
    let reporting_at_start = FreePageReporting::read();
    println!(
        "cluster bench{}: 3 nodes (5 in the `five members` rows) over UDP loopback in one process, {MESSAGE} B messages, {} cores",
        if settings.quick && settings.only.is_none() { " (quick)" } else { "" },
        quorumcast_driver::agent::available_cores()
    );
    println!("throughput/latency layout: {}", invoker_layout(&settings));
    let mut results = Vec::new();
    let all = variants(&settings);
    for (index, &variant) in all.iter().enumerate() {
        if !wanted(&settings, &variant, &all) {
            continue;
        }
        match run_variant(variant, &settings, index) {
            Ok(r) => {
                println!(
                    "{:<38} committed {:>7}/s (windows {}), serial p50 {:.1}us p99 {:.1}us, pipeline {} op/s p50 {:.0}us p99 {:.0}us",
                    variant.name(),
                    rate(r.saturation.median()),
                    r.saturation.rates.iter().map(|&x| rate(x)).collect::<Vec<_>>().join(" "),
                    r.serial.0,
                    r.serial.1,
                    rate(r.pipeline.2),
                    r.pipeline.0,
                    r.pipeline.1
                );
                for line in &r.saturation.diagnosis {
                    println!("    {line}");
                }
                if let Some(model) = &r.model {
                    println!("    {} members: {}", variant.members, model.describe(r.saturation.median()));
                }
                if let Some((b, compared)) = r.budget(settings.clock_read_ns) {
                    println!("    {}", b.describe(r.saturation.sender.committed / r.saturation.sender.seconds));
                    if !compared {
                        println!(
                            "    (the budget is not held to mu here: the Sender was not found to be the stage that \
                             saturated first; it shares bench thread 0 with the load and the leader's other agents)"
                        );
                    }
                }
                for w in &r.warnings {
                    println!("    warning: {w}");
                }
                if r.out_of_order > 0 {
                    println!("    ERROR: {} entries applied out of order", r.out_of_order);
                }
                results.push(r);
            }
            Err(e) => println!("{:<38} FAILED: {e}", variant.name()),
        }
    }
    let best = results
        .iter()
        .filter(|r| r.variant.mtu == 8192 && !r.variant.auth && !r.variant.storage.durable() && !r.variant.is_five())
        .max_by(|a, b| a.saturation.median().total_cmp(&b.saturation.median()))
        .map(|r| r.variant);
    let mut c_variants = vec![Variant::plain(1408, SendMode::Classic, false)];
    c_variants.extend(best.filter(|b| b.mode != SendMode::Classic || b.piggyback));
    println!("C layout: {}; paced at {C_RATE} msg/s", c_layout(&settings));
    let mut c_results = Vec::new();
    let mut index = 0;
    if settings.skip_c {
        c_variants.clear();
    }
    for variant in c_variants {
        for idle in C_IDLES {
            index += 1;
            if !selected(&settings, &format!("C {} {idle}", variant.name())) {
                continue;
            }
            match run_c(variant, idle, &settings, index) {
                Ok(c) => {
                    println!(
                        "C {:<28} {:<14} achieved {:>6}/s, control {:>6}/s, data {:>6}/s, commit frames {:>6}/s, consensus cycles {:>6}/s, serial p50 {:.0}us p99 {:.0}us",
                        variant.name(),
                        idle,
                        rate(c.achieved),
                        rate(c.control_per_s),
                        rate(c.data_per_s),
                        rate(c.commit_frames_per_s),
                        rate(c.consensus_cycles_per_s),
                        c.serial.0,
                        c.serial.1
                    );
                    c_results.push(c);
                }
                Err(e) => println!("C {} {idle} FAILED: {e}", variant.name()),
            }
        }
    }
    let floor = measure_floor(&results, &settings, reporting_at_start).unwrap_or_else(|e| {
        println!("FAILED: {e}");
        None
    });
    print_tables(&results, &c_results, settings.clock_read_ns);
    print_floor(&results, floor.as_ref());
    let stall = if settings.skip_stall || !selected(&settings, "stall") {
        None
    } else {
        let stall =
            on_harness_thread(|| run_stall(settings.pin).map_err(SweepError::Cluster)).map_err(|e| e.to_string());
        remove_data("stall");
        match stall {
            Ok(stall) => {
                print_stall(&stall);
                Some(stall)
            }
            Err(e) => {
                println!("stall FAILED: {e}");
                None
            }
        }
    };
    let summary = json!({
        "bench": "cluster",
        "quick": settings.quick,
        "host": host(),
        "load_average_1m_at_start": load_at_start,
        "message_bytes": MESSAGE,
        "pinned": settings.pin,
        "rows": rows(&settings, &results, &c_results),
        "disk_floor": floor.as_ref().map(|f| json!({
            "dir": target_dir().join("cluster-data").display().to_string(),
            "fdatasync_after_append": { "append_bytes": f.sync.append, "p50_us": f.sync.p50_us, "p99_us": f.sync.p99_us, "samples": f.sync.samples },
            "fdatasync_after_append_three_writers": { "append_bytes": f.sync_three.append, "writers": f.sync_three.writers, "p50_us": f.sync_three.p50_us, "p99_us": f.sync_three.p99_us, "samples": f.sync_three.samples },
            "sequential_page_cache": { "writers": f.sequential.writers, "block_bytes": f.sequential.block, "bytes_per_s": f.sequential.bytes_per_s },
            "synced_batches": f.synced.iter().map(|(v, w)| json!({
                "variant": v.name(), "writers": w.writers, "block_bytes": w.block, "bytes_per_s": w.bytes_per_s, "fsyncs_per_s_each": w.syncs_per_s_each,
            })).collect::<Vec<_>>(),
            "free_page_reporting": f.reporting.map(|(before, now)| json!({
                "on": now.on,
                "order": now.order,
                "reported_kib_during_run": now.reported_kib.zip(before.and_then(|b| b.reported_kib)).map(|(n, b)| n.saturating_sub(b)),
            })),
            "page_cache_writes": f.page_cache.iter().map(|(v, w)| json!({
                "variant": v.name(), "writers": w.writers, "block_bytes": w.block, "cpu_ns_per_byte": w.cpu_ns_per_byte, "bytes_per_s": w.bytes_per_s,
            })).collect::<Vec<_>>(),
        })),
        "durable_targets": verdicts(&results, floor.as_ref()).into_iter().map(|(v, verdict)| json!({"variant": v.name(), "verdict": verdict})).collect::<Vec<_>>(),
        "stopped_follower": stall.map(|s| json!({
            "variant": "mtu1408 classic separate, status_interval 10ms",
            "offered_msgs_per_s": s.offered_per_s,
            "phases": STALL_PHASES.iter().map(|(name, length)| json!({"phase": name, "seconds": length.as_secs_f64()})).collect::<Vec<_>>(),
            "longest_commit_gap_ms": { "before": s.gaps_ms[0], "stopped": s.gaps_ms[1], "after": s.gaps_ms[2] },
            "committed_msgs_per_s": { "before": s.committed_per_s[0], "stopped": s.committed_per_s[1], "after": s.committed_per_s[2] },
            "told_behind_retained": s.told_behind,
        })),
    });
    match write_summary("cluster", &summary) {
        Ok(path) => println!("\nsummary: {} ({:.0} s)", path.display(), started.elapsed().as_secs_f64()),
        Err(e) => println!("\nsummary not written: {e}"),
    }
}
