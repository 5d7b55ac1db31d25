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

mod c_runs;
mod durable;
mod output;
mod stopped_follower;
mod variant_run;

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use quorumcast::SyncPolicy;
use quorumcast_bench::sweep::cluster::{
    on_harness_thread, ClusterSpec, Layout, LoadCluster, Storage as ClusterStorage,
};
use quorumcast_bench::sweep::profile::Control;
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::{SendMode, SocketOptions};
use serde_json::json;

use quorumcast_bench::bench::{host, target_dir, write_summary};
use quorumcast_bench::budget;
use quorumcast_bench::host_memory::FreePageReporting;

use c_runs::run_c;
use durable::{measure_floor, print_floor, verdicts};
use output::{c_layout, invoker_layout, print_tables, rows};
use stopped_follower::{print_stall, run_stall, STALL_PHASES};
use variant_run::run_variant;

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

fn us(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.0}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
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
