//! IPC benchmark: throughput and ping-pong round trip of the IPC medium, read against floors measured in
//! the same run on the same two threads (a raw one-cache-line handoff, a plain SPSC ring, and memcpy
//! bandwidth).
//!
//! Run with `cargo bench --bench ipc` (`-- --quick` for a smoke run with a tenth of every count, `-- --help`
//! for the options). Two threads, pinned to cores 0 and 1 when the host allows, busy-spin for the whole run
//! (this is a bench; the machine has 2 cores). Prints a table with each figure, its ratio to the floor and
//! the targets (IPC RTT p50 within 2x the raw handoff floor; >= 30M msg/s of 32 bytes; 32-byte throughput
//! at least 0.8x the SPSC ring's of the same run), and writes `target/ipc/<timestamp>/summary.json`,
//! pointed at by the symlink `target/ipc/latest`.
//!
//! Throughput: for each message size, [`RUNS`] runs over the IPC log alternate with as many over the SPSC
//! ring (`spsc/`, a ring of one term's bytes; the same two threads, the same subscriber
//! idling), so both see the same host. Each figure is the median of its runs; the slowest run is reported
//! beside it (slowest / median), each IPC run's rate over the ring run after it, and the CPU time other
//! processes took during each run (`/proc`, as a share of a core). A run where others took more than
//! [`QUIET_OTHERS`] of a core is not quiet, and the bench says so: a pinned spinning thread that shares
//! its core with another process loses whole time slices, and the two media react to that differently
//! (the ring's consumer re-reads the producer's index on every drain and falls to a few messages per
//! drain; the log's subscriber chases frames), so their ratio then moves far more than either figure.
//!
//! Knobs for exploring (not needed for the standard run): `QC_BENCH_TERM` (bytes, a power of two) overrides
//! the term length of the throughput logs; `QC_BENCH_IDLE` the `PAUSE`s a throughput subscriber spends after
//! an empty poll; `QC_BENCH_ONLY=32,1344` runs only the throughput of those sizes and writes nothing.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use quorumcast_driver::media::ipc::{IpcOfferError, IpcPublication, IpcSubscription};
use quorumcast_driver::shm::log_buffer::LogConfig;
use serde_json::json;

mod spsc;
use quorumcast_bench::bench::{host, median, new_histogram, record, write_summary, Cores};
use quorumcast_bench::hiccup::{clock_ticks_per_s, HostCpu};
use spsc::{Consumer, Producer, SpscRing};

/// Message sizes of the throughput runs, how many messages each run sends, and the term length of its log.
///
/// 1344-byte messages use a 256 KiB term so that the whole log (3 terms) stays in a core's 2 MiB L2; with
/// 1 MiB terms they ran at half the rate. Small messages do better with 1 MiB terms (fewer rotations).
const THROUGHPUT: [(usize, u64, usize); 3] =
    [(32, 20_000_000, 1 << 20), (128, 10_000_000, 1 << 20), (1344, 2_000_000, 1 << 18)];
/// Measured throughput runs per size and medium; the median is reported, and the slowest beside it.
const RUNS: usize = 5;
/// `PAUSE`s (~14 ns each here) a throughput subscriber spends after a poll that found nothing.
///
/// A subscriber that re-reads the publisher's tail counter every few nanoseconds takes its cache line away
/// from the publisher before nearly every append, and both sides then run at the speed of cache-line
/// transfers (measured: 2-20M msg/s of 32 bytes with 0-1 pause, 40-95M with 8-32). Waiting about one
/// line transfer before polling again lets messages accumulate into batches. Agrona's busy-spin strategy
/// would be a single pause.
const SUBSCRIBER_IDLE_PAUSES: u32 = 16;
/// Term length of the ping and pong logs.
const RTT_TERM: usize = 1 << 16;
/// MTU of every log: a 1344-byte message is one frame.
const MTU: usize = 1408;
/// Round trips measured, after the warm-up ones.
const ROUND_TRIPS: usize = 1_000_000;
const WARM_UP_ROUND_TRIPS: usize = 100_000;
/// Size of the ping-pong messages.
const RTT_MESSAGE: usize = 32;
/// Targets.
const TARGET_RTT_RATIO: f64 = 2.0;
const TARGET_MSGS_PER_S_32: f64 = 30e6;
/// Target of the 32-byte throughput beside the SPSC ring floor of the same run (median over median).
const TARGET_SPSC_RATIO_32: f64 = 0.8;

/// IPC throughput and ping-pong round trip beside floors measured in the same run on the same two threads:
/// a raw one-cache-line handoff (round trip), a plain SPSC ring (throughput) and memcpy (bandwidth).
#[derive(Debug, Parser)]
#[command(name = "ipc", bin_name = "cargo bench --bench ipc --", args_override_self = true)]
struct Cli {
    /// A smoke run: a tenth of the messages, round trips and copies (its figures are not results).
    #[arg(long)]
    quick: bool,
    /// Instead of the timed runs: on one thread, offer `--batch` messages of `--size` bytes and then poll
    /// them, `--count` messages in all, over the IPC log and then over the SPSC ring, for an instruction
    /// count per message that the host's load does not move. Run the bench binary under
    /// `valgrind --tool=callgrind --toggle-collect='*instructions_over*'` and divide each function's
    /// inclusive count by `--count`. Take the IPC log's `__memset_*` (the zeroing of the next partition, a
    /// `rep stosb` of 4 KiB that callgrind counts once per byte) out of its count first: on the CPU it is
    /// a few instructions per 64 messages.
    #[arg(long)]
    instructions: bool,
    /// Messages of the `--instructions` run (each medium).
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Messages offered between two polls in the `--instructions` run.
    #[arg(long, default_value_t = 64)]
    batch: u64,
    /// Message size of the `--instructions` run, bytes.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let cli = Cli::parse();
    if cli.instructions {
        return instructions(cli.size, cli.count, cli.batch);
    }
    let scale = if cli.quick { 10 } else { 1 };
    let cores = Cores::detect();
    println!("ipc bench{}: {}", if cli.quick { " (quick: a tenth of every count)" } else { "" }, cores.describe());
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        // Other work on the two cores distorts every figure here: say so when there is some.
        println!("load average before the run: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    }

    if let Ok(only) = std::env::var("QC_BENCH_ONLY") {
        for &(size, count, term) in THROUGHPUT.iter().filter(|(size, ..)| only.contains(&size.to_string())) {
            throughput(&cores, size, count / scale, term_override().unwrap_or(term));
        }
        return;
    }
    let memcpy_8k = memcpy_gbps(8 * 1024, scale);
    let memcpy_64k = memcpy_gbps(64 * 1024, scale);
    let round_trips = ROUND_TRIPS / scale as usize;
    let floor_rtt = raw_handoff_rtt(&cores, round_trips);
    let ipc_rtt = ipc_rtt(&cores, round_trips);
    let throughput: Vec<Throughput> = THROUGHPUT
        .iter()
        .map(|&(size, count, term)| throughput(&cores, size, count / scale, term_override().unwrap_or(term)))
        .collect();

    let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    let floor_p50 = p(&floor_rtt, 0.5);
    let rtt_ratio = p(&ipc_rtt, 0.5) as f64 / floor_p50 as f64;

    println!();
    println!("{:<34} {:>14} {:>16}", "figure", "value", "vs floor");
    println!("{:<34} {:>11.1} GB/s {:>16}", "floor: memcpy 8 KiB (hot)", memcpy_8k, "");
    println!("{:<34} {:>11.1} GB/s {:>16}", "floor: memcpy 64 KiB (hot)", memcpy_64k, "");
    println!("{:<34} {:>11} ns {:>16}", "floor: raw handoff RTT p50", floor_p50, "1.00x");
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)] {
        let v = p(&ipc_rtt, q);
        let floor = p(&floor_rtt, q);
        println!(
            "{:<34} {:>11} ns {:>9.2}x {:>6}",
            format!("IPC RTT {name} (floor {floor} ns)"),
            v,
            v as f64 / floor as f64,
            ""
        );
    }
    for t in &throughput {
        print_throughput(t, memcpy_64k);
    }
    println!();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    // A throughput verdict from runs that were not quiet is no result either way. The 32-byte verdicts
    // read the 32-byte runs only: another size's noisy run says nothing of them.
    let busiest = throughput.iter().map(|t| t.others_max).fold(0.0, f64::max);
    let quiet = busiest <= QUIET_OTHERS;
    let quiet_32 = throughput[0].others_max <= QUIET_OTHERS;
    let throughput_verdict = |ok: bool| if quiet_32 { verdict(ok) } else { "(32-byte runs not quiet: no verdict)" };
    println!(
        "target: IPC RTT p50 within {TARGET_RTT_RATIO}x of the raw handoff: {:.2}x  {}",
        rtt_ratio,
        verdict(rtt_ratio <= TARGET_RTT_RATIO)
    );
    let t32 = &throughput[0];
    println!(
        "target: 32-byte throughput >= {:.0}M msg/s: {:.2}M (median of {RUNS}; slowest {:.2}M, {:.2}x the median)  {}",
        TARGET_MSGS_PER_S_32 / 1e6,
        t32.ipc.median() / 1e6,
        t32.ipc.slowest() / 1e6,
        t32.ipc.slowest_over_median(),
        throughput_verdict(t32.ipc.median() >= TARGET_MSGS_PER_S_32)
    );
    println!(
        "target: 32-byte throughput >= {TARGET_SPSC_RATIO_32}x the SPSC ring floor of the same run: {:.2}x ({:.2}M / {:.2}M, medians of {RUNS})  {}",
        t32.ratio(),
        t32.ipc.median() / 1e6,
        t32.spsc.median() / 1e6,
        throughput_verdict(t32.ratio() >= TARGET_SPSC_RATIO_32)
    );
    println!(
        "other processes took up to {:.0}% of a core during a throughput run ({:.0}% during a 32-byte one){}",
        100.0 * busiest,
        100.0 * throughput[0].others_max,
        if quiet { "" } else { ": not a quiet run; the figures of a size whose runs were not quiet are not results" }
    );

    let by_size = |f: &dyn Fn(&Throughput) -> serde_json::Value| -> serde_json::Map<String, serde_json::Value> {
        throughput.iter().map(|t| (t.size.to_string(), f(t))).collect()
    };
    let summary = json!({
        "quick": cli.quick,
        "quiet": quiet,
        "quiet_32": quiet_32,
        "others_max_core_share": busiest,
        "throughput_msgs_per_s": by_size(&|t| json!(t.ipc.median())),
        "mb_per_s": by_size(&|t| json!(t.ipc.median() * t.size as f64 / 1e6)),
        "throughput": by_size(&Throughput::to_json),
        "rtt_ns": {
            "p50": p(&ipc_rtt, 0.5), "p90": p(&ipc_rtt, 0.9), "p99": p(&ipc_rtt, 0.99),
            "p999": p(&ipc_rtt, 0.999), "max": p(&ipc_rtt, 1.0), "round_trips": ipc_rtt.len(),
        },
        "floor": {
            "rtt_ns_p50": floor_p50,
            "memcpy_gbps": memcpy_64k,
            "spsc_msgs_per_s": by_size(&|t| json!(t.spsc.median())),
        },
        "host": host(),
    });
    match write_summary("ipc", &summary) {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write the summary: {e}"),
    }
}

/// Above this share of a core taken by other processes during a throughput run, the run is not quiet: a
/// spinning bench thread pinned to a core that another process also wants loses whole time slices.
const QUIET_OTHERS: f64 = 0.05;

/// One line of the table: the IPC log's median beside the SPSC ring's, and its slowest run.
fn print_throughput(t: &Throughput, memcpy_64k: f64) {
    let (ipc, spsc) = (t.ipc.median(), t.spsc.median());
    println!("{:<34} {:>9.2} M/s {:>9.2}x", format!("floor: SPSC ring {} B", t.size), spsc / 1e6, 1.0);
    let mb = ipc * t.size as f64 / 1e6;
    println!(
        "{:<34} {:>9.2} M/s {:>9.2}x  slowest of {RUNS} {:.2}M ({:.2}x the median); {:.0} MB/s, {:.1}% of memcpy 64 KiB",
        format!("IPC throughput {} B", t.size),
        ipc / 1e6,
        ipc / spsc,
        t.ipc.slowest() / 1e6,
        t.ipc.slowest_over_median(),
        mb,
        100.0 * mb / 1e3 / memcpy_64k
    );
}

// ---------------------------------------------------------------------------------------------------
// Floors
// ---------------------------------------------------------------------------------------------------

/// A 64-byte-aligned block, for copy buffers.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// Hot copy bandwidth between two 64-byte-aligned buffers of `length` bytes, GB/s (median of 5 runs of
/// 4 GiB each, divided by `scale`).
fn memcpy_gbps(length: usize, scale: u64) -> f64 {
    let mut src = vec![Block([1; 64]); length / 64];
    let mut dst = vec![Block([0; 64]); length / 64];
    let mut runs = Vec::new();
    for _ in 0..5 {
        let copies = (1usize << 32) / length / scale as usize; // 4 GiB per run
        let start = Instant::now();
        for i in 0..copies {
            let n = src.len();
            src[i % n].0[0] = i as u8;
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        runs.push((copies * length) as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    median(runs)
}

/// One direction of the raw handoff: a sequence number and 32 bytes in one cache line.
#[derive(Default)]
struct Slot {
    sequence: AtomicU64,
    payload: [AtomicU64; 4],
}

/// Ping-pong of 32 bytes through one cache line per direction, the floor of any handoff between the two
/// threads: write the payload, release-store the sequence; the other side spins on the sequence, reads
/// the payload and answers the same way.
fn raw_handoff_rtt(cores: &Cores, round_trips: usize) -> Histogram<u64> {
    let ping = CachePadded::new(Slot::default());
    let pong = CachePadded::new(Slot::default());
    let total = (WARM_UP_ROUND_TRIPS + round_trips) as u64;
    let (histogram, ()) = cores.run(
        || {
            let mut histogram = new_histogram();
            for seq in 1..=total {
                let start = Instant::now();
                for (i, word) in ping.payload.iter().enumerate() {
                    word.store(seq + i as u64, Ordering::Relaxed);
                }
                ping.sequence.store(seq, Ordering::Release);
                while pong.sequence.load(Ordering::Acquire) != seq {
                    std::hint::spin_loop();
                }
                black_box(pong.payload[0].load(Ordering::Relaxed));
                if seq > WARM_UP_ROUND_TRIPS as u64 {
                    record(&mut histogram, start.elapsed());
                }
            }
            histogram
        },
        || {
            for seq in 1..=total {
                while ping.sequence.load(Ordering::Acquire) != seq {
                    std::hint::spin_loop();
                }
                for (theirs, mine) in ping.payload.iter().zip(&pong.payload) {
                    mine.store(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                pong.sequence.store(seq, Ordering::Release);
            }
        },
    );
    histogram
}

// ---------------------------------------------------------------------------------------------------
// IPC
// ---------------------------------------------------------------------------------------------------

fn log_config(term_length: usize, stream_id: i32) -> LogConfig {
    LogConfig { stream_id, ..LogConfig::new(term_length, MTU) }
}

/// Offers `message` until it is taken, spinning. Inlined into the caller's loop, as the ring's `push`
/// is, so that the two media are read against each other without a call the ring does not pay.
#[inline(always)]
fn offer_spinning(publication: &mut IpcPublication, message: &[u8]) {
    loop {
        match publication.offer(message) {
            Ok(_) => return,
            Err(IpcOfferError::BackPressured) => std::hint::spin_loop(),
            Err(e) => panic!("offer failed: {e}"),
        }
    }
}

/// Ping-pong RTT of 32-byte messages over two IPC logs, busy-polling both sides: `round_trips` measured
/// after the warm-up.
fn ipc_rtt(cores: &Cores, round_trips: usize) -> Histogram<u64> {
    let mut ping = IpcPublication::create_anonymous(log_config(RTT_TERM, 1)).unwrap();
    let mut ping_sub = ping.subscribe().unwrap();
    let mut pong = IpcPublication::create_anonymous(log_config(RTT_TERM, 2)).unwrap();
    let mut pong_sub = pong.subscribe().unwrap();
    let total = WARM_UP_ROUND_TRIPS + round_trips;
    let (histogram, ()) = cores.run(
        || {
            let mut histogram = new_histogram();
            let mut message = [0u8; RTT_MESSAGE];
            for i in 0..total {
                message[..8].copy_from_slice(&(i as u64).to_le_bytes());
                let start = Instant::now();
                offer_spinning(&mut ping, &message);
                let mut answered = false;
                while !answered {
                    pong_sub.poll(|m| answered = m[..8] == message[..8], 1);
                }
                if i >= WARM_UP_ROUND_TRIPS {
                    record(&mut histogram, start.elapsed());
                }
            }
            histogram
        },
        || {
            let mut echoed = 0;
            while echoed < total {
                echoed += ping_sub.poll(|m| offer_spinning(&mut pong, m), 16);
            }
        },
    );
    histogram
}

// ---------------------------------------------------------------------------------------------------
// Throughput: the IPC log beside the SPSC ring
// ---------------------------------------------------------------------------------------------------

/// The rates of the measured runs of one throughput figure, messages per second.
struct Runs(Vec<f64>);

impl Runs {
    fn median(&self) -> f64 {
        median(self.0.clone())
    }

    fn slowest(&self) -> f64 {
        self.0.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// The slowest run over the median: how far one run can fall on this host now.
    fn slowest_over_median(&self) -> f64 {
        self.slowest() / self.median()
    }

    /// `35.10M 36.02M ...`, in run order.
    fn describe(&self) -> String {
        self.0.iter().map(|r| format!("{:.2}M", r / 1e6)).collect::<Vec<_>>().join(" ")
    }
}

/// The throughput of one message size over the IPC log and over the SPSC ring, run for run.
struct Throughput {
    size: usize,
    ipc: Runs,
    spsc: Runs,
    /// The largest share of a core other processes took during one of its runs (either medium).
    others_max: f64,
}

impl Throughput {
    /// IPC median over the SPSC ring median.
    fn ratio(&self) -> f64 {
        self.ipc.median() / self.spsc.median()
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "median_msgs_per_s": self.ipc.median(),
            "slowest_msgs_per_s": self.ipc.slowest(),
            "slowest_over_median": self.ipc.slowest_over_median(),
            "runs": self.ipc.0,
            "spsc_median_msgs_per_s": self.spsc.median(),
            "spsc_runs": self.spsc.0,
            "ratio_to_spsc": self.ratio(),
            "others_max_core_share": self.others_max,
        })
    }
}

/// The publishing end of a throughput run.
trait Sink: Send {
    /// Hands `message` over, spinning while the medium is full.
    fn offer_spinning(&mut self, message: &[u8]);
}

/// The subscribing end of a throughput run.
trait Source: Send {
    /// Hands every message available (up to a large limit) to `handler`; returns how many.
    fn poll(&mut self, handler: impl FnMut(&[u8])) -> usize;
}

// Every medium's ends are inlined into the run's loops alike (a plain `#[inline]` left the IPC offer a
// call per message, 20 instructions of a call and its saved registers that the ring's push did not pay).
impl Sink for IpcPublication {
    #[inline(always)]
    fn offer_spinning(&mut self, message: &[u8]) {
        offer_spinning(self, message);
    }
}

impl Source for IpcSubscription {
    #[inline(always)]
    fn poll(&mut self, handler: impl FnMut(&[u8])) -> usize {
        IpcSubscription::poll(self, handler, 1 << 20)
    }
}

impl Sink for Producer<'_> {
    #[inline(always)]
    fn offer_spinning(&mut self, message: &[u8]) {
        while !self.push(message) {
            std::hint::spin_loop();
        }
    }
}

impl Source for Consumer<'_> {
    #[inline(always)]
    fn poll(&mut self, handler: impl FnMut(&[u8])) -> usize {
        self.drain(handler)
    }
}

/// [`RUNS`] runs of `count` messages of `size` bytes over the IPC log (term `term_length`) and, in
/// alternation (the host drifts), over an SPSC ring of as many bytes as one term; each after one warm-up
/// run of a tenth of the count that also faults its memory in. Prints the runs.
fn throughput(cores: &Cores, size: usize, count: u64, term_length: usize) -> Throughput {
    let mut publication = IpcPublication::create_anonymous(log_config(term_length, 3)).unwrap();
    let mut subscription = publication.subscribe().unwrap();
    let mut ring = SpscRing::new(size, term_length);
    let mut ipc_run = |count| run_once(cores, &mut publication, &mut subscription, size, count);
    let mut spsc_run = |count| {
        let (mut producer, mut consumer) = ring.split();
        run_once(cores, &mut producer, &mut consumer, size, count)
    };
    ipc_run((count / 10).max(1));
    spsc_run((count / 10).max(1));
    let (mut ipc, mut spsc) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    for _ in 0..RUNS {
        ipc.push(ipc_run(count));
        spsc.push(spsc_run(count));
    }
    let polls = |runs: &[Run]| -> String {
        let describe = |r: &Run| {
            format!(
                "{:.1}/{:.0}%",
                r.batch(count),
                100.0 * r.empty_polls as f64 / (r.busy_polls + r.empty_polls) as f64
            )
        };
        runs.iter().map(describe).collect::<Vec<_>>().join(" ")
    };
    println!(
        "throughput {size:>4} B, term {term_length}: messages per busy poll / empty polls: IPC {}; SPSC ring {}",
        polls(&ipc),
        polls(&spsc)
    );
    let others = |runs: &[Run]| runs.iter().map(|r| format!("{:.0}%", 100.0 * r.others)).collect::<Vec<_>>().join(" ");
    println!(
        "throughput {size:>4} B, term {term_length}: other processes' CPU (share of a core): IPC {}; SPSC ring {}",
        others(&ipc),
        others(&spsc)
    );
    let others_max = ipc.iter().chain(&spsc).map(|r| r.others).fold(0.0, f64::max);
    let rates = |runs: &[Run]| Runs(runs.iter().map(|r| r.rate).collect());
    let (ipc, spsc) = (rates(&ipc), rates(&spsc));
    println!("throughput {size:>4} B, term {term_length}: IPC {} msg/s; SPSC ring {}", ipc.describe(), spsc.describe());
    // Each IPC run beside the ring run right after it: a spread here that the medians hide says the host
    // changed under the runs (the two media react differently to a thread losing its core).
    let pairs: Vec<String> = ipc.0.iter().zip(&spsc.0).map(|(i, s)| format!("{:.2}", i / s)).collect();
    println!("throughput {size:>4} B, term {term_length}: IPC / SPSC ring, run by run: {}", pairs.join(" "));
    Throughput { size, ipc, spsc, others_max }
}

/// One timed run: its rate and how the subscriber's polls went.
struct Run {
    /// Messages per second.
    rate: f64,
    /// Polls that found at least one message.
    busy_polls: u64,
    /// Polls that found none.
    empty_polls: u64,
    /// CPU time other processes took during the run, as a share of one core (from `/proc`; 0 unknown).
    others: f64,
}

impl Run {
    /// Messages per poll that found any: how far the subscriber fell behind between polls.
    fn batch(&self, count: u64) -> f64 {
        count as f64 / self.busy_polls.max(1) as f64
    }
}

/// Messages per second from `sink`, offering `count` messages of `size` bytes as fast as it can on the
/// first thread, to `source`, polled on the second; from the first offer to the receipt of the last.
fn run_once(cores: &Cores, sink: &mut impl Sink, source: &mut impl Source, size: usize, count: u64) -> Run {
    let idle: u32 = std::env::var("QC_BENCH_IDLE").ok().and_then(|t| t.parse().ok()).unwrap_or(SUBSCRIBER_IDLE_PAUSES);
    let cpu_before = HostCpu::read();
    let (start, (end, checksum, busy_polls, empty_polls)) = cores.run(
        || {
            let mut message = vec![0u8; size];
            let start = Instant::now();
            for i in 0..count {
                message[0] = i as u8;
                sink.offer_spinning(&message);
            }
            start
        },
        || {
            let mut received = 0u64;
            let mut checksum = 0u64;
            let (mut busy, mut empty) = (0u64, 0u64);
            while received < count {
                let polled = source.poll(|m| {
                    received += 1;
                    checksum = checksum.wrapping_add(m[0] as u64 + m.len() as u64);
                });
                if polled == 0 {
                    empty += 1;
                    for _ in 0..idle {
                        std::hint::spin_loop();
                    }
                } else {
                    busy += 1;
                }
            }
            (Instant::now(), checksum, busy, empty)
        },
    );
    black_box(checksum);
    let elapsed = end.duration_since(start).as_secs_f64();
    let others = match (cpu_before, HostCpu::read()) {
        (Some(before), Some(after)) => {
            after.since(&before).other_ticks() as f64 / clock_ticks_per_s() as f64 / elapsed.max(1e-9)
        }
        _ => 0.0,
    };
    Run { rate: count as f64 / elapsed, busy_polls, empty_polls, others }
}

// ---------------------------------------------------------------------------------------------------
// Instruction counts: both media on one thread
// ---------------------------------------------------------------------------------------------------

/// `count` messages of `size` bytes over the IPC log and then over the SPSC ring (a term's bytes, 1 MiB as
/// in the 32-byte throughput run), `batch` offers then one drain at a time, on this thread. The two
/// `instructions_over_*` functions hold nothing else, so callgrind's inclusive count of each, divided by
/// `count`, is what the medium costs per message, the offer and the poll together.
fn instructions(size: usize, count: u64, batch: u64) {
    let term_length = 1 << 20;
    let mut publication = IpcPublication::create_anonymous(log_config(term_length, 3)).unwrap();
    let mut subscription = publication.subscribe().unwrap();
    let mut ring = SpscRing::new(size, term_length);
    let ipc = instructions_over_ipc(&mut publication, &mut subscription, size, count, batch);
    let (mut producer, mut consumer) = ring.split();
    let spsc = instructions_over_spsc(&mut producer, &mut consumer, size, count, batch);
    assert_eq!(ipc, spsc, "both media delivered the same messages");
    println!("{count} messages of {size} B in batches of {batch} over each medium (checksum {ipc})");
}

#[inline(never)]
fn instructions_over_ipc(
    publication: &mut IpcPublication,
    subscription: &mut IpcSubscription,
    size: usize,
    count: u64,
    batch: u64,
) -> u64 {
    batches(publication, subscription, size, count, batch)
}

#[inline(never)]
fn instructions_over_spsc(
    producer: &mut Producer<'_>,
    consumer: &mut Consumer<'_>,
    size: usize,
    count: u64,
    batch: u64,
) -> u64 {
    batches(producer, consumer, size, count, batch)
}

/// Offers `batch` messages, drains them, and again until `count` have gone through; returns a checksum.
#[inline(always)]
fn batches(sink: &mut impl Sink, source: &mut impl Source, size: usize, count: u64, batch: u64) -> u64 {
    let mut message = vec![0u8; size];
    let (mut sent, mut checksum) = (0, 0u64);
    while sent < count {
        let n = batch.min(count - sent);
        for i in sent..sent + n {
            message[0] = i as u8;
            sink.offer_spinning(&message);
        }
        sent += n;
        let mut received = 0;
        while received < n {
            received += source.poll(|m| checksum = checksum.wrapping_add(m[0] as u64 + m.len() as u64)) as u64;
        }
    }
    checksum
}

// ---------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------

fn term_override() -> Option<usize> {
    std::env::var("QC_BENCH_TERM").ok().and_then(|t| t.parse().ok())
}
