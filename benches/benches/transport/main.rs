//! Transport benchmark: the segments of `docs/BASELINE.md` over our UDP stream and our IPC medium, the raw
//! datagram rate of our Sender in each send mode next to bare `sendmsg`, our request round trip next to a
//! bare UDP ping-pong, and one publication streaming to one subscriber next to the model, all in one run.
//!
//! Run with `cargo bench --bench transport` (`-- --help` lists the options: `--part segments,rates,stream`
//! picks parts, `--mtu`, `--msg`, `--send-mode` and `--seconds` shape the stream; `--quick` cuts every count
//! and window by 10x for a smoke run). Exactly two busy threads, pinned to cores 0 and 1 when the host
//! allows. Prints the segment table in docs/BASELINE.md's layout (BASELINE's figures are another system on
//! another machine: reference only), the round-trip table, the sender-rate table, the stream table and the
//! targets, and writes `target/transport/<timestamp>/summary.json`, pointed at by `target/transport/latest`.
//!
//! How a segment runs over UDP: two nodes in one process, A and B, each with a Sender (one network
//! publication to the other node), a Receiver (one channel from the other node) and a subscription. Thread
//! 1 drives node A in invoker style (its Sender and Receiver duty cycles, then the application: offer and
//! poll), thread 2 drives node B the same way. One-way segments offer on A and read on B; the clock runs
//! from the first offer to the receipt of the last message. Request segments send requests A -> B and
//! responses B -> A. Each throughput segment runs once to warm up, then three times; the median is
//! reported. The invoker runs once per MTU of offered bytes, and whenever the appender is back-pressured.
//! The "datagram" and "stream" segments are the same publication -> subscription path (our log is a
//! message stream either way); they differ only in sizes and counts, as in BASELINE.
//!
//! Round trips: every RTT figure (our UDP and IPC request round trips, and the bare UDP ping-pong floor)
//! rests on [`RTT_ROUND_TRIPS`] (100k) round trips, in three runs, each of ours after one of the floor's,
//! merged into one histogram; the table gives p50, p99, p99.9, max and mean. `--quick` takes 10k and says
//! so.
//!
//! Sender rate: one publication per send mode and size, to two plain sockets that the second thread
//! drains with `recvmmsg`; the bench thread keeps the log topped up with one frame of exactly the datagram
//! size per message and acknowledges the Sender's own position about once a millisecond; both are kept
//! out of the measured time. Windows of bare `sendmsg` (two connected sockets, alternated) run in the
//! same rounds, so each point is read against the bare rate of its own round.
//!
//! Stream: see `stream/` (one row per MTU x message size x send mode, about 1.5 s each).
//!
//! Exploration knobs: `QC_BENCH_ONLY=<substring>` runs only the matching segments (and `QC_BENCH_RATES=1`
//! adds the sender-rate and stream parts); `QC_BENCH_DIAG=1` prints counters after each segment and rate
//! window.

mod segments;
mod sender_rate;
mod stream;

use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use quorumcast_bench::bench::{self, Cores};
use quorumcast_driver::media::transport::SendMode;
use segments::{print_rtt_table, print_segment_table, run_segments, segments_json, Row, Shape};
use sender_rate::{print_rate_table, sender_rate_json, sender_rates};
use serde_json::json;
use stream::StreamPlan;

/// Stream id of every bench stream.
const STREAM: i32 = 1001;
/// Fragments one subscription poll may read.
const FRAGMENT_LIMIT: usize = 1024;
/// Requests in flight in the pipelined segment.
const PIPELINE_WINDOW: usize = 256;
/// Measured repetitions of each segment (the median is reported).
const REPEATS: usize = 3;
/// Longest any one segment run may take before the bench gives up with a diagnosis.
const STALL: Duration = Duration::from_secs(30);
/// Rounds of sender-rate windows (each round: bare, classic, mmsg, gso, one window each).
const RATE_ROUNDS: usize = 5;
/// Round trips behind every RTT figure (ours and the bare UDP ping-pong floor's), in [`REPEATS`] runs
/// interleaved with the floor's; `--quick` takes a tenth and says so.
const RTT_ROUND_TRIPS: usize = 100_000;
/// Targets.
const TARGET_CLASSIC_OVER_BARE: f64 = 0.90;
const TARGET_RTT_OVER_FLOOR: f64 = 1.5;

/// The parts of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// docs/BASELINE.md's segments over UDP and IPC, with the RTT figures and the bare UDP ping-pong floor.
    Segments,
    /// The Sender's raw datagram rate in each send mode beside bare `sendmsg`.
    Rates,
    /// One publication streaming to one subscriber (D = 1) beside the model's (S - C) / 1 x M_pkt.
    Stream,
}

/// docs/BASELINE.md's segments over our UDP stream and our IPC medium, the Sender's raw datagram rate beside
/// bare `sendmsg`, and a publication streaming to one subscriber beside the model, in one run.
#[derive(Debug, Parser)]
#[command(name = "transport", bin_name = "cargo bench --bench transport --", args_override_self = true)]
struct Cli {
    /// A smoke run: a tenth of every count and window (an RTT figure then rests on 10k round trips, not
    /// the 100k of a result) and 0.2 s per stream row.
    #[arg(long)]
    quick: bool,
    /// The parts to run, comma-separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    part: Vec<Part>,
    /// Stream: MTUs (bytes).
    #[arg(long, value_delimiter = ',', value_name = "LIST", default_value = "1408,8192")]
    mtu: Vec<usize>,
    /// Stream: message sizes (bytes, at least 8).
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = message_size,
          default_value = "32,128,224,512,1344")]
    msg: Vec<usize>,
    /// Stream: send modes (`classic`, `mmsg`, `gso`) [default: classic and the best this kernel supports:
    /// gso, else mmsg].
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = str::parse::<SendMode>)]
    send_mode: Vec<SendMode>,
    /// Stream: seconds each row streams [default: 1, or 0.2 with --quick].
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    seconds: Option<f64>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Cli {
    fn runs(&self, part: Part) -> bool {
        self.part.is_empty() || self.part.contains(&part)
    }

    fn stream_plan(&self) -> StreamPlan {
        let seconds = self.seconds.unwrap_or(if self.quick { 0.2 } else { 1.0 });
        StreamPlan {
            mtus: self.mtu.clone(),
            msgs: self.msg.clone(),
            modes: if self.send_mode.is_empty() { StreamPlan::default_modes() } else { self.send_mode.clone() },
            window: Duration::from_secs_f64(seconds),
            s_window: Duration::from_millis(if self.quick { 30 } else { 100 }),
            s_windows: if self.quick { 1 } else { 3 },
        }
    }
}

/// A message size the stream can number: at least 8 bytes.
fn message_size(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(size) if size >= 8 => Ok(size),
        Ok(_) => Err("messages carry an 8-byte sequence number: use 8 or more".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A positive number of seconds.
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        Ok(_) => Err("give a positive number of seconds".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The PASS/MISS lines of the targets the run measured.
fn print_targets(rows: &[Row<'_>], rates_pass: Option<bool>) {
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    println!();
    if let Some(pass) = rates_pass {
        println!(
            "target: classic Sender >= {:.0}% of bare sendmsg at every size: {}",
            TARGET_CLASSIC_OVER_BARE * 100.0,
            verdict(pass)
        );
    }
    if let Some(rtt_row) = rows.iter().find(|r| r.segment.shape == Shape::Rtt) {
        let (ours, floor) = (rtt_row.udp.rtt.expect("RTT figures").p50, rtt_row.udp.floor.expect("a floor").p50);
        let rtt_ratio = ours / floor;
        println!(
            "target: request RTT p50 within {TARGET_RTT_OVER_FLOOR}x of the bare UDP ping-pong: {ours:.1} us vs floor {floor:.1} us = {rtt_ratio:.2}x  {}",
            verdict(rtt_ratio <= TARGET_RTT_OVER_FLOOR)
        );
    }
}

fn main() {
    let cli = Cli::parse();
    let scale = if cli.quick { 10 } else { 1 };
    let cores = Cores::detect();
    let started = Instant::now();
    println!("transport bench{}: {}", if cli.quick { " (quick)" } else { "" }, cores.describe());

    let only = std::env::var("QC_BENCH_ONLY").ok();
    let rows = if cli.runs(Part::Segments) { run_segments(&cores, scale, only.as_deref()) } else { Vec::new() };
    if only.is_some() && std::env::var_os("QC_BENCH_RATES").is_none() {
        return;
    }
    let points = if cli.runs(Part::Rates) {
        sender_rates(&cores, if cli.quick { 0.1 } else { 1.0 }, RATE_ROUNDS)
    } else {
        Vec::new()
    };
    let stream_rows = if cli.runs(Part::Stream) { stream::run(&cores, &cli.stream_plan()) } else { Vec::new() };

    if !rows.is_empty() {
        print_segment_table(&rows);
        print_rtt_table(&rows, cli.quick);
    }
    let rates_pass = (!points.is_empty()).then(|| print_rate_table(&points));
    if !stream_rows.is_empty() {
        stream::print_table(&stream_rows, &cores);
    }
    print_targets(&rows, rates_pass);

    let summary = json!({
        "quick": cli.quick,
        "segments": segments_json(&rows),
        "sender_rate": sender_rate_json(&points),
        "stream": stream::to_json(&stream_rows),
        "host": bench::host(),
    });
    match bench::write_summary("transport", &summary) {
        Ok(path) => println!("wrote {} ({:.0} s in all)", path.display(), started.elapsed().as_secs_f64()),
        Err(e) => eprintln!("could not write the summary: {e}"),
    }
}
