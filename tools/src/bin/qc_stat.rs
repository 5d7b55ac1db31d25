//! `qc-stat`: prints the counters of a quorumcast node, like Aeron's AeronStat.
//!
//! ```text
//! qc-stat [--once] [--json] [--interval-ms 1000] [--allow-stale] (--dir PATH | NAME)
//! qc-stat --prometheus ADDR [--allow-stale] (--dir PATH | NAME)
//! ```
//!
//! Attaches to the node directory (`NAME` means `/dev/shm/quorumcast/NAME`, or the temp-dir fallback),
//! reads its `counters.dat` and prints, every interval, each counter's id, value, rate per second since
//! the previous sample (blank on the first sample) and label. It never writes to the node's files.
//!
//! `--json` prints each sample as one JSON object on one line instead, for scripts:
//! `{"node", "state", "unix_ms", "interval_s", "counters": [{"id", "type_id", "owner_id", "key", "label",
//! "value", "rate"}]}`, where `key` names a node counter's typed reader (`sender.naks_received`; null for
//! agent and application counters) and `interval_s` and `rate` are null on the first sample.
//!
//! `--once` takes two samples 100 ms apart and prints the second, with rates over those 100 ms, then
//! exits: a single print still shows what is moving. Rates over 100 ms are coarse for slow counters.
//!
//! `--prometheus ADDR` serves the counters instead, in the Prometheus text format, at
//! `http://ADDR/metrics` (read at each scrape; names and labels in `quorumcast_tools::prometheus`). It
//! prints the address it listens on (`ADDR` may give port 0), answers 503 while the node is stale (unless
//! `--allow-stale`), and exits once a scrape finds the node shut down.
//!
//! Exit status: 0 after `--once`, or when the node shuts down (its directory disappears); 1 when the
//! directory or counters file is missing, unreadable or stale (the node died), 2 on bad arguments.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{ArgGroup, Parser};
use quorumcast_driver::shm::counters::{CounterSnapshot, CountersReader, COUNTERS_FILE_NAME};
use quorumcast_driver::shm::directory::{DirectoryStatus, NodeDirectory};
use quorumcast_driver::shm::stats::CounterKind;
use quorumcast_tools::prometheus;
use serde_json::{json, Value};

/// Window of the double sample taken by `--once`.
const ONCE_WINDOW: Duration = Duration::from_millis(100);
/// How long a scraper may take to send its request or read the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read from a scraper.
const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Command line of qc-stat.
#[derive(Debug, Parser)]
#[command(name = "qc-stat", version, about = "Print the counters of a running quorumcast node")]
#[command(group(ArgGroup::new("node").required(true).args(["dir", "name"])))]
struct Args {
    /// Print once (rates over a 100 ms double sample) and exit.
    #[arg(long)]
    once: bool,
    /// Print each sample as one JSON object on a line (see the tool's documentation for the keys).
    #[arg(long)]
    json: bool,
    /// Milliseconds between samples.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
    /// Show the last values of a node that died (a stale directory) instead of refusing.
    #[arg(long)]
    allow_stale: bool,
    /// Serve the counters in the Prometheus text format at http://ADDR/metrics instead of printing them.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["once", "json"])]
    prometheus: Option<String>,
    /// The node directory.
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// The node's name, looked up under /dev/shm/quorumcast (or the temp-dir fallback).
    #[arg(value_name = "NAME")]
    name: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let path = match (&args.dir, &args.name) {
        (Some(dir), _) => dir.clone(),
        (None, Some(name)) => NodeDirectory::default_path(name),
        (None, None) => unreachable!("clap requires --dir or NAME"),
    };
    match run(&args, &path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("qc-stat: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Checks the node, opens its counters and prints them until done.
fn run(args: &Args, path: &Path) -> Result<(), String> {
    let status = NodeDirectory::status(path);
    let state = describe(&status, path, args.allow_stale)?;
    let directory = NodeDirectory::attach(path).map_err(|e| e.to_string())?;
    let reader = CountersReader::open(directory.file(COUNTERS_FILE_NAME))
        .map_err(|e| format!("cannot read the counters of {} (node {state}): {e}", path.display()))?;
    if let Some(addr) = &args.prometheus {
        return serve_prometheus(args, path, &reader, addr);
    }
    if args.once {
        let first = Sample::take(&reader);
        thread::sleep(ONCE_WINDOW);
        let second = Sample::take(&reader);
        print(&output(args, path, &state, &reader, &second, Some(&first)), false);
        return Ok(());
    }
    sample_forever(args, path, &reader, state)
}

/// Prints a sample every interval until the node directory goes away.
fn sample_forever(args: &Args, path: &Path, reader: &CountersReader, mut state: String) -> Result<(), String> {
    let interval = Duration::from_millis(args.interval_ms);
    let clear = !args.json && std::io::stdout().is_terminal();
    let mut previous: Option<Sample> = None;
    loop {
        let sample = Sample::take(reader);
        print(&output(args, path, &state, reader, &sample, previous.as_ref()), clear);
        previous = Some(sample);
        thread::sleep(interval);
        match NodeDirectory::status(path) {
            DirectoryStatus::Missing => {
                let message = format!("node in {} has shut down", path.display());
                if args.json {
                    eprintln!("qc-stat: {message}");
                } else {
                    println!("{message}");
                }
                return Ok(());
            }
            DirectoryStatus::Stale(owner) if !args.allow_stale => {
                return Err(format!("the node in {} ({owner}) died without shutting down", path.display()));
            }
            status => state = describe(&status, path, true)?,
        }
    }
}

/// Answers scrapes at `addr` until one finds the node shut down.
fn serve_prometheus(args: &Args, path: &Path, reader: &CountersReader, addr: &str) -> Result<(), String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    print(&format!("serving the counters of {} at http://{local}/metrics", path.display()), false);
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let status = NodeDirectory::status(path);
        let answer = match &status {
            DirectoryStatus::Missing => Err("the node has shut down"),
            DirectoryStatus::Stale(_) if !args.allow_stale => Err("the node died without shutting down"),
            _ => Ok(()),
        };
        // A client that goes away mid-answer costs only its own scrape.
        let _ = answer_scrape(&mut stream, reader, answer);
        if matches!(status, DirectoryStatus::Missing) {
            print(&format!("node in {} has shut down", path.display()), false);
            return Ok(());
        }
    }
    Ok(())
}

/// Reads one HTTP request head (bounded, with a time-out) and answers it: the exposition for `GET
/// /metrics` (or `/`), 404 for another path, 503 with `unavailable`'s reason.
fn answer_scrape(
    stream: &mut TcpStream,
    reader: &CountersReader,
    unavailable: Result<(), &str>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let request = String::from_utf8_lossy(&head);
    let mut words = request.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, content_type, body) = match unavailable {
        Err(reason) => ("503 Service Unavailable", "text/plain", format!("{reason}\n")),
        Ok(()) if method == "GET" && (target == "/metrics" || target == "/") => {
            ("200 OK", prometheus::CONTENT_TYPE, prometheus::exposition(&reader.snapshot()))
        }
        Ok(()) => ("404 Not Found", "text/plain", "the counters are at /metrics\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// A one-line description of the node's state, or the error to report for a missing or stale directory.
fn describe(status: &DirectoryStatus, path: &Path, allow_stale: bool) -> Result<String, String> {
    match status {
        DirectoryStatus::Missing => Err(format!(
            "no node directory at {}: no node is running there (check the node name, or pass --dir)",
            path.display()
        )),
        DirectoryStatus::Stale(owner) if !allow_stale => Err(format!(
            "{} is stale: its node ({owner}) is not running and left it behind; pass --allow-stale to see \
             the values it left, or remove the directory",
            path.display()
        )),
        DirectoryStatus::Stale(owner) => Ok(format!("NOT RUNNING, stale: {owner}")),
        DirectoryStatus::NoLockFile => Ok("state unknown: no lock file".to_owned()),
        DirectoryStatus::Running(owner) => Ok(format!("running: {owner}")),
    }
}

/// The counters at one instant.
struct Sample {
    at: Instant,
    unix_ms: u128,
    counters: Vec<CounterSnapshot>,
}

impl Sample {
    fn take(reader: &CountersReader) -> Self {
        let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        Self { at: Instant::now(), unix_ms, counters: reader.snapshot() }
    }

    /// Each counter with its rate per second since `previous` (None on the first sample), and the
    /// seconds between the two.
    fn rates<'a>(
        &'a self,
        previous: Option<&Sample>,
    ) -> (Option<f64>, impl Iterator<Item = (&'a CounterSnapshot, Option<f64>)>) {
        let before: HashMap<i32, i64> =
            previous.map(|p| p.counters.iter().map(|c| (c.id, c.value)).collect()).unwrap_or_default();
        let seconds = previous.map(|p| self.at.duration_since(p.at).as_secs_f64()).filter(|s| *s > 0.0);
        let rates = self.counters.iter().map(move |counter| {
            let rate = seconds.zip(before.get(&counter.id)).map(|(s, &old)| counter.value.wrapping_sub(old) as f64 / s);
            (counter, rate)
        });
        (seconds, rates)
    }
}

/// The sample as `--json` or the table asks.
fn output(
    args: &Args,
    path: &Path,
    state: &str,
    reader: &CountersReader,
    sample: &Sample,
    previous: Option<&Sample>,
) -> String {
    if args.json {
        render_json(path, state, sample, previous)
    } else {
        render(path, state, reader, sample, previous)
    }
}

/// The sample as one line of JSON.
fn render_json(path: &Path, state: &str, sample: &Sample, previous: Option<&Sample>) -> String {
    let (seconds, rates) = sample.rates(previous);
    let counters: Vec<Value> = rates
        .map(|(c, rate)| {
            json!({
                "id": c.id,
                "type_id": c.type_id,
                "owner_id": c.owner_id,
                "key": CounterKind::of_type(c.type_id).map(|kind| kind.key),
                "label": c.label,
                "value": c.value,
                "rate": rate,
            })
        })
        .collect();
    let object = json!({
        "node": path.display().to_string(),
        "state": state,
        "unix_ms": sample.unix_ms as u64,
        "interval_s": seconds,
        "counters": counters,
    });
    object.to_string()
}

/// The table for `sample`, with rates against `previous` when given.
fn render(path: &Path, state: &str, reader: &CountersReader, sample: &Sample, previous: Option<&Sample>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "quorumcast node {} ({state}); {} of {} counters",
        path.display(),
        sample.counters.len(),
        reader.capacity()
    );
    let _ = writeln!(out, "{:>5}  {:>26}  {:>22}  label", "id", "value", "rate/s");
    for (counter, rate) in sample.rates(previous).1 {
        let rate = rate.map(format_rate).unwrap_or_default();
        let _ =
            writeln!(out, "{:>5}  {:>26}  {:>22}  {}", counter.id, group_digits(counter.value), rate, counter.label);
    }
    out
}

/// Writes `text` to stdout, after clearing the terminal when `clear`; a closed stdout ends quietly.
fn print(text: &str, clear: bool) {
    let mut stdout = std::io::stdout().lock();
    let written = if clear { write!(stdout, "\x1b[H\x1b[2J{text}") } else { writeln!(stdout, "{text}") };
    if written.and_then(|()| stdout.flush()).is_err() {
        std::process::exit(0);
    }
}

/// `1234567` as `1,234,567`.
fn group_digits(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if value < 0 {
        out.push('-');
    }
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A rate with grouped digits and one decimal.
fn format_rate(rate: f64) -> String {
    let tenths = (rate.abs() * 10.0).round() as i64;
    let sign = if rate < 0.0 && tenths != 0 { "-" } else { "" };
    format!("{sign}{}.{}", group_digits(tenths / 10), tenths % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped_by_thousands() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(-1_234_567), "-1,234,567");
        assert_eq!(group_digits(i64::MIN), "-9,223,372,036,854,775,808");
    }

    #[test]
    fn rates_have_one_decimal() {
        assert_eq!(format_rate(0.0), "0.0");
        assert_eq!(format_rate(1234.56), "1,234.6");
        assert_eq!(format_rate(-0.5), "-0.5");
        assert_eq!(format_rate(-0.01), "0.0");
    }

    #[test]
    fn rates_are_blank_on_the_first_sample_and_per_second_after() {
        let manager = quorumcast_driver::shm::counters::CountersManager::anonymous(4).unwrap();
        let counter = manager.allocate("work", 2).unwrap();
        let reader = manager.reader();
        let first = Sample::take(&reader);
        counter.add(500);
        let second = Sample { at: first.at + Duration::from_millis(500), unix_ms: 0, counters: reader.snapshot() };
        let table = render(Path::new("/n"), "running", &reader, &first, None);
        let row = table.lines().nth(2).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["0", "0", "work"]);
        let table = render(Path::new("/n"), "running", &reader, &second, Some(&first));
        let row = table.lines().nth(2).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["0", "500", "1,000.0", "work"]);
        assert!(table.starts_with("quorumcast node /n (running); 1 of 4 counters"));
    }

    #[test]
    fn json_is_one_object_a_sample_with_typed_keys_and_rates_after_the_first() {
        let manager = quorumcast_driver::shm::counters::CountersManager::anonymous(4).unwrap();
        let label = "sender NAKs received";
        let kind = quorumcast_driver::shm::stats::CATALOGUE.iter().find(|kind| kind.label == label).unwrap();
        let naks = manager.allocate(label, kind.type_id).unwrap();
        manager.allocate("consensus work", 2).unwrap();
        let reader = manager.reader();
        let first = Sample::take(&reader);
        naks.add(50);
        let second = Sample { at: first.at + Duration::from_millis(500), unix_ms: 7, counters: reader.snapshot() };
        let line = render_json(Path::new("/n"), "running", &first, None);
        assert_eq!(line.lines().count(), 1);
        let object: Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&object["node"], &object["interval_s"]), (&json!("/n"), &Value::Null));
        assert_eq!(object["counters"][0]["key"], "sender.naks_received");
        assert_eq!((&object["counters"][0]["rate"], &object["counters"][1]["key"]), (&Value::Null, &Value::Null));
        let object: Value =
            serde_json::from_str(&render_json(Path::new("/n"), "running", &second, Some(&first))).unwrap();
        assert_eq!((&object["unix_ms"], &object["interval_s"]), (&json!(7), &json!(0.5)));
        assert_eq!((&object["counters"][0]["value"], &object["counters"][0]["rate"]), (&json!(50), &json!(100.0)));
    }
}
