//! The transport bench's segments part: docs/BASELINE.md's segments (one way, request round trips,
//! a request pipeline), each over a UDP pair and an IPC pair of nodes, with the bare UDP ping-pong floor
//! beside the UDP round trips; their tables and their `summary.json` entries.

mod drivers;
mod side;

use std::time::Instant;

use quorumcast_bench::bench::{median, new_histogram, si, Cores, Percentiles};
use serde_json::json;

use crate::{REPEATS, RTT_ROUND_TRIPS};
use drivers::{one_way, pipeline, rtt, udp_floor};
use side::{ipc_pair, udp_pair, Side};

/// What a segment does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `count` messages of `size` bytes offered on A, read on B.
    OneWay,
    /// One request of `size` bytes at a time A -> B, its response B -> A; latency per round trip.
    Rtt,
    /// Up to [`PIPELINE_WINDOW`] requests outstanding.
    Pipeline,
}

/// Which node pair (MTU and term length) a segment uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Geometry {
    /// MTU 1408 (the conservative preset), term 1 MiB: 64-byte messages.
    Small,
    /// MTU 8192, term 4 MiB (a 64 KiB message needs term >= 512 KiB): 1 KiB and 64 KiB messages.
    Large,
}

impl Geometry {
    fn mtu(self) -> usize {
        match self {
            Geometry::Small => 1408,
            Geometry::Large => 8192,
        }
    }

    fn term_length(self) -> usize {
        match self {
            Geometry::Small => 1 << 20,
            Geometry::Large => 4 << 20,
        }
    }
}

/// One of docs/BASELINE.md's segments, with BASELINE's figures (another system, another machine) beside it.
pub struct Segment {
    name: &'static str,
    pub shape: Shape,
    size: usize,
    count: usize,
    geometry: Geometry,
    baseline_tcp: &'static str,
    baseline_inprocess: &'static str,
}

const SEGMENTS: [Segment; 6] = [
    Segment {
        name: "datagram 64B x 100k (serial, one way)",
        shape: Shape::OneWay,
        size: 64,
        count: 100_000,
        geometry: Geometry::Small,
        baseline_tcp: "47.7k msg/s",
        baseline_inprocess: "5.75M msg/s",
    },
    Segment {
        name: "datagram 64KiB x 2k",
        shape: Shape::OneWay,
        size: 64 * 1024,
        count: 2_000,
        geometry: Geometry::Large,
        baseline_tcp: "5.07k msg/s (317 MB/s)",
        baseline_inprocess: "5.77M msg/s (by reference)",
    },
    Segment {
        name: "request RTT 64B x 100k",
        shape: Shape::Rtt,
        size: 64,
        count: RTT_ROUND_TRIPS,
        geometry: Geometry::Small,
        baseline_tcp: "mean 86 · p50 81 · p99 165 us",
        baseline_inprocess: "mean 2 us",
    },
    Segment {
        name: "request pipeline 64B window 256 x 50k",
        shape: Shape::Pipeline,
        size: 64,
        count: 50_000,
        geometry: Geometry::Small,
        baseline_tcp: "49.4k op/s",
        baseline_inprocess: "812k op/s",
    },
    Segment {
        name: "stream 64KiB frames x 2k (125MB)",
        shape: Shape::OneWay,
        size: 64 * 1024,
        count: 2_000,
        geometry: Geometry::Large,
        baseline_tcp: "308 MB/s (4.9k frames/s)",
        baseline_inprocess: "~118 GB/s (pass-through)",
    },
    Segment {
        name: "stream 1KiB frames x 20k (20MB)",
        shape: Shape::OneWay,
        size: 1024,
        count: 20_000,
        geometry: Geometry::Large,
        baseline_tcp: "45 MB/s (45.8k frames/s)",
        baseline_inprocess: "4.5 GB/s",
    },
];

/// A segment's measured figures.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    msgs_per_s: f64,
    mb_per_s: f64,
    /// Round trips, for the RTT segment.
    pub rtt: Option<Percentiles>,
    /// The bare UDP ping-pong's round trips, beside the UDP RTT segment.
    pub floor: Option<Percentiles>,
}

impl Figures {
    fn describe(&self, shape: Shape) -> String {
        match (shape, &self.rtt) {
            (Shape::Rtt, Some(rtt)) => rtt.describe(),
            (Shape::Pipeline, _) => format!("{} op/s", si(self.msgs_per_s)),
            _ => format!("{} msg/s ({:.0} MB/s)", si(self.msgs_per_s), self.mb_per_s),
        }
    }
}

/// Runs one segment over one pair. Throughput: a warm-up run, then [`REPEATS`] measured ones; the median.
/// RTT: [`REPEATS`] runs of a third of the count each, every one preceded by as long a bare UDP ping-pong
/// floor run when `with_floor` (the host drifts: both see it), their histograms merged, so each figure
/// rests on the whole count.
fn run_segment(
    cores: &Cores,
    segment: &Segment,
    a: &mut dyn Side,
    b: &mut dyn Side,
    mtu: usize,
    scale: usize,
    with_floor: bool,
) -> Figures {
    let count = (segment.count / scale).max(10);
    let size = segment.size;
    match segment.shape {
        Shape::OneWay => {
            one_way(cores, a, b, size, (count / 10).max(10), mtu);
            let rates: Vec<f64> = (0..REPEATS).map(|_| one_way(cores, a, b, size, count, mtu)).collect();
            let rate = median(rates);
            Figures { msgs_per_s: rate, mb_per_s: rate * size as f64 / 1e6, ..Figures::default() }
        }
        Shape::Rtt => {
            let per_run = count.div_ceil(REPEATS);
            let (mut ours, mut floor) = (new_histogram(), new_histogram());
            let mut rates = Vec::with_capacity(REPEATS);
            for _ in 0..REPEATS {
                if with_floor {
                    floor.add(udp_floor(cores, size, per_run)).expect("histograms of the same bounds");
                }
                let (histogram, rate) = rtt(cores, a, b, size, per_run);
                ours.add(histogram).expect("histograms of the same bounds");
                rates.push(rate);
            }
            let rate = median(rates);
            Figures {
                msgs_per_s: rate,
                mb_per_s: rate * size as f64 / 1e6,
                rtt: Some(Percentiles::of(&ours)),
                floor: with_floor.then(|| Percentiles::of(&floor)),
            }
        }
        Shape::Pipeline => {
            pipeline(cores, a, b, size, (count / 10).max(10));
            let rate = median((0..REPEATS).map(|_| pipeline(cores, a, b, size, count)).collect());
            Figures { msgs_per_s: rate, mb_per_s: rate * size as f64 / 1e6, ..Figures::default() }
        }
    }
}

/// The figures of one segment on each medium.
pub struct Row<'a> {
    pub segment: &'a Segment,
    pub udp: Figures,
    pub ipc: Option<Figures>,
}

pub fn print_segment_table(rows: &[Row<'_>]) {
    println!();
    println!(
        "Segments (ours: this host, median of {REPEATS}; BASELINE: another system on another machine, reference only)"
    );
    println!(
        "| {:<40} | {:<56} | {:<56} | {:<30} | {:<28} |",
        "segment", "our UDP", "our IPC", "BASELINE TCP loopback (ref)", "BASELINE InProcess (ref)"
    );
    println!("|{:-<42}|{:-<58}|{:-<58}|{:-<32}|{:-<30}|", "", "", "", "", "");
    for row in rows {
        let ipc = row.ipc.as_ref().map_or("n/a (IPC not on main yet)".to_string(), |f| f.describe(row.segment.shape));
        println!(
            "| {:<40} | {:<56} | {:<56} | {:<30} | {:<28} |",
            row.segment.name,
            row.udp.describe(row.segment.shape),
            ipc,
            row.segment.baseline_tcp,
            row.segment.baseline_inprocess
        );
    }
}

/// Every round-trip figure: ours over UDP and IPC, and the bare UDP ping-pong floor.
pub fn print_rtt_table(rows: &[Row<'_>], quick: bool) {
    let mut figures = Vec::new();
    for row in rows.iter().filter(|r| r.segment.shape == Shape::Rtt) {
        figures.extend(row.udp.rtt.map(|p| ("our UDP request", p)));
        figures.extend(row.ipc.as_ref().and_then(|f| f.rtt).map(|p| ("our IPC request", p)));
        figures.extend(row.udp.floor.map(|p| ("bare UDP ping-pong (floor)", p)));
    }
    if figures.is_empty() {
        return;
    }
    println!();
    println!(
        "Round trips, {} B, one at a time ({} runs interleaved with the floor's, merged){}",
        SEGMENTS.iter().find(|s| s.shape == Shape::Rtt).map_or(0, |s| s.size),
        REPEATS,
        if quick { "; quick: fewer round trips than the 100k a figure needs, not a result" } else { "" }
    );
    println!(
        "| {:<28} | {:>11} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "round trip", "round trips", "p50 us", "p99 us", "p99.9 us", "max us", "mean us"
    );
    println!("|{:-<30}|{:->13}|{:->11}|{:->11}|{:->11}|{:->11}|{:->11}|", "", ":", ":", ":", ":", ":", ":");
    for (name, p) in figures {
        println!(
            "| {name:<28} | {:>11} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
            p.count, p.p50, p.p99, p.p999, p.max, p.mean
        );
    }
}

/// Runs every segment over UDP, then over IPC (in the same round, as BASELINE runs TCP then InProcess),
/// the bare UDP ping-pong floor beside the UDP RTT segment; `only` keeps the segments whose name
/// contains it.
pub fn run_segments(cores: &Cores, scale: usize, only: Option<&str>) -> Vec<Row<'static>> {
    let (mut small_a, mut small_b) = udp_pair(Geometry::Small);
    let (mut large_a, mut large_b) = udp_pair(Geometry::Large);
    let (mut ipc_small_a, mut ipc_small_b) = ipc_pair(Geometry::Small);
    let (mut ipc_large_a, mut ipc_large_b) = ipc_pair(Geometry::Large);
    let mut rows = Vec::new();
    let diagnose = std::env::var_os("QC_BENCH_DIAG").is_some();
    for segment in SEGMENTS.iter().filter(|s| only.is_none_or(|o| s.name.contains(o))) {
        let mtu = segment.geometry.mtu();
        let (a, b): (&mut dyn Side, &mut dyn Side) = match segment.geometry {
            Geometry::Small => (&mut small_a, &mut small_b),
            Geometry::Large => (&mut large_a, &mut large_b),
        };
        let t = Instant::now();
        let udp = run_segment(cores, segment, a, b, mtu, scale, segment.shape == Shape::Rtt);
        let trips = udp.rtt.map_or(String::new(), |p| format!(", {} round trips", p.count));
        let floor = udp.floor.map_or(String::new(), |f| format!(", bare UDP ping-pong {}", f.describe()));
        println!(
            "udp  {:<40} {:<48} ({:.1} s{trips}{floor})",
            segment.name,
            udp.describe(segment.shape),
            t.elapsed().as_secs_f64()
        );
        if diagnose {
            println!("     A: {}\n     B: {}", a.diagnose(), b.diagnose());
        }
        let (a, b): (&mut dyn Side, &mut dyn Side) = match segment.geometry {
            Geometry::Small => (&mut ipc_small_a, &mut ipc_small_b),
            Geometry::Large => (&mut ipc_large_a, &mut ipc_large_b),
        };
        let t = Instant::now();
        let ipc = run_segment(cores, segment, a, b, mtu, scale, false);
        println!("ipc  {:<40} {:<48} ({:.1} s)", segment.name, ipc.describe(segment.shape), t.elapsed().as_secs_f64());
        rows.push(Row { segment, udp, ipc: Some(ipc) });
    }
    rows
}

/// The segments as `summary.json`'s `segments` array.
pub fn segments_json(rows: &[Row<'_>]) -> serde_json::Value {
    let mut segments = Vec::new();
    for row in rows {
        for (medium, figures) in [("udp", Some(&row.udp)), ("ipc", row.ipc.as_ref())] {
            let Some(f) = figures else { continue };
            let mut entry = json!({
                "name": row.segment.name,
                "medium": medium,
                "msgs_per_s": f.msgs_per_s,
                "mb_per_s": f.mb_per_s,
            });
            if let Some(rtt) = f.rtt {
                entry["rtt_us"] = rtt.to_json();
            }
            if let Some(floor) = f.floor {
                entry["rtt_us"]["floor_p50"] = json!(floor.p50);
                entry["floor_rtt_us"] = floor.to_json();
            }
            segments.push(entry);
        }
    }
    segments.into()
}
