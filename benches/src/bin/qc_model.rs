//! `qc-model`: the throughput model of `docs/MODEL.md` as a calculator.
//!
//! ```text
//! qc-model --s S --c C [--d 2] --mtu MTU --msg BYTES [--lambda MSGS_PER_S] [--term-length BYTES] [--json]
//! qc-model --s S --c C [--d 2] --table [--json]
//! ```
//!
//! The first form prints the framed size, usable MTU, `M_pkt` and `mu` of one configuration; with
//! `--lambda`, the utilisation `rho` and its regime; with `--term-length`, the saturated latency bound
//! `(term_length / 2) / (mu x framed)`. `--table` prints `docs/MODEL.md`'s table: message sizes 32, 128, 224,
//! 512 and 1344 B at MTU 1408 and 8192. `--json` prints the same as one JSON object.
//!
//! Exit status: 0 on success, 1 when the model rejects an input (the message says what to change),
//! 2 on bad arguments.

use std::process::ExitCode;

use clap::Parser;
use quorumcast_bench::model::{
    regime, saturation_latency, utilization, Capacity, Model, ModelError, Regime, TABLE_MESSAGE_SIZES, TABLE_MTUS,
};
use serde::Serialize;

/// Command line of qc-model.
#[derive(Debug, Parser)]
#[command(
    name = "qc-model",
    version,
    about = "Peak TPS, utilisation and saturated latency of a single-threaded sender"
)]
struct Args {
    /// S: the sender thread's peak sendmsg calls per second, measured on the target platform.
    #[arg(long)]
    s: f64,
    /// C: calls per second consensus control traffic takes from S.
    #[arg(long)]
    c: f64,
    /// D: followers each log datagram is sent to (one call each).
    #[arg(long, default_value_t = 2)]
    d: u32,
    /// MTU in bytes.
    #[arg(long, required_unless_present = "table")]
    mtu: Option<usize>,
    /// Message length in bytes.
    #[arg(long, required_unless_present = "table")]
    msg: Option<usize>,
    /// lambda: the offered load, messages per second.
    #[arg(long, conflicts_with = "table")]
    lambda: Option<f64>,
    /// The log's term length in bytes, for the saturated latency bound.
    #[arg(long, conflicts_with = "table")]
    term_length: Option<usize>,
    /// Print docs/MODEL.md's table (32..1344 B at MTU 1408 and 8192) instead of one configuration.
    #[arg(long, conflicts_with_all = ["mtu", "msg"])]
    table: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One configuration, with the load and latency terms when asked for.
#[derive(Debug, Serialize)]
struct Report {
    model: Model,
    capacity: Capacity,
    #[serde(skip_serializing_if = "Option::is_none")]
    load: Option<Load>,
    #[serde(skip_serializing_if = "Option::is_none")]
    saturation: Option<Saturation>,
}

/// `rho` and its regime at an offered load.
#[derive(Debug, Serialize)]
struct Load {
    lambda: f64,
    rho: f64,
    regime: Regime,
}

/// The saturated latency bound for a term length.
#[derive(Debug, Serialize)]
struct Saturation {
    term_length: usize,
    latency_s: f64,
}

/// docs/MODEL.md's table: one row per message size, one column per MTU.
#[derive(Debug, Serialize)]
struct Table {
    model: Model,
    rows: Vec<Vec<Capacity>>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("qc-model: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Computes what the arguments ask for and renders it.
fn run(args: &Args) -> Result<String, ModelError> {
    let model = Model::new(args.s, args.c, args.d)?;
    if args.table {
        let table = table(model)?;
        return Ok(if args.json { to_json(&table) } else { render_table(&table) });
    }
    // clap requires both unless --table.
    let (Some(mtu), Some(msg)) = (args.mtu, args.msg) else { unreachable!("clap requires --mtu and --msg") };
    let capacity = model.analyze(mtu, msg)?;
    let load = match args.lambda {
        Some(lambda) => {
            let rho = utilization(lambda, capacity.mu)?;
            Some(Load { lambda, rho, regime: regime(rho) })
        }
        None => None,
    };
    let saturation = match args.term_length {
        Some(term_length) => {
            let latency = saturation_latency(term_length, capacity.drain_bytes_per_s)?;
            Some(Saturation { term_length, latency_s: latency.as_secs_f64() })
        }
        None => None,
    };
    let report = Report { model, capacity, load, saturation };
    Ok(if args.json { to_json(&report) } else { render_report(&report) })
}

fn table(model: Model) -> Result<Table, ModelError> {
    let rows = TABLE_MESSAGE_SIZES
        .iter()
        .map(|&msg| TABLE_MTUS.iter().map(|&mtu| model.analyze(mtu, msg)).collect())
        .collect::<Result<_, _>>()?;
    Ok(Table { model, rows })
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("model reports hold only finite numbers and strings")
}

fn render_report(r: &Report) -> String {
    let c = &r.capacity;
    let mut out = format!(
        "S = {}/s, C = {}/s, D = {}: {} log datagrams/s\n\
         msg {} B -> framed {} B; MTU {} -> usable {} B\n\
         M_pkt = {} ({:.3} per datagram)\n\
         mu (peak) = {} msg/s, drain {} B/s",
        human(r.model.s()),
        human(r.model.c()),
        r.model.d(),
        human(c.datagrams_per_s),
        c.msg,
        c.framed,
        c.mtu,
        c.usable_mtu,
        c.packing,
        c.packing.per_datagram(),
        human(c.mu),
        human(c.drain_bytes_per_s),
    );
    if let Some(l) = &r.load {
        out += &format!("\nlambda = {} msg/s -> rho = {:.3}: {}", human(l.lambda), l.rho, l.regime);
    }
    if let Some(s) = &r.saturation {
        out += &format!(
            "\nterm length {} B -> saturated latency bound {:.1} ms (term_length / 2 / drain)",
            s.term_length,
            s.latency_s * 1e3
        );
    }
    out
}

fn render_table(t: &Table) -> String {
    let mut out = format!(
        "S = {}/s, C = {}/s, D = {}: {} log datagrams/s\n",
        human(t.model.s()),
        human(t.model.c()),
        t.model.d(),
        human(t.model.datagrams_per_s())
    );
    out += &format!("{:>6} {:>7}", "msg", "framed");
    for mtu in TABLE_MTUS {
        out += &format!("  {:>20}", format!("MTU {mtu}: M_pkt peak"));
    }
    for row in &t.rows {
        out += &format!("\n{:>5}B {:>6}B", row[0].msg, row[0].framed);
        for c in row {
            out += &format!("  {:>12} {:>7}", c.packing.to_string(), human(c.mu));
        }
    }
    out
}

/// A rate with a K or M suffix and three significant figures (960K, 2.52M, 15.2M).
fn human(x: f64) -> String {
    let (v, suffix) = if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "K")
    } else {
        (x, "")
    };
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$}{suffix}")
}
