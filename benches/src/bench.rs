//! Helpers shared by the benches (`benches/benches/`): pinned thread pairs, host description, medians and
//! percentiles, and the `target/<bench>/<timestamp>/summary.json` + `target/<bench>/latest` output
//! convention. Each bench uses the part it needs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde_json::json;

/// The two cores the bench threads are pinned to, when the host lets us pin.
pub struct Cores(Option<[core_affinity::CoreId; 2]>);

impl Cores {
    /// The first two cores the host reports, or none (threads then run unpinned).
    pub fn detect() -> Self {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        Self((ids.len() >= 2).then(|| [ids[0], ids[1]]))
    }

    /// One line saying how the threads are placed.
    pub fn describe(&self) -> String {
        match &self.0 {
            Some([a, b]) => format!("threads pinned to cores {} and {}", a.id, b.id),
            None => "threads not pinned (core ids unavailable)".into(),
        }
    }

    /// The two core ids, when the threads are pinned.
    pub fn ids(&self) -> Option<[usize; 2]> {
        self.0.map(|[a, b]| [a.id, b.id])
    }

    /// Runs `a` on core 0 and `b` on core 1 (scoped threads) and returns both results. A pin the kernel
    /// refuses is reported, and that thread runs unpinned.
    pub fn run<RA: Send, RB: Send>(&self, a: impl FnOnce() -> RA + Send, b: impl FnOnce() -> RB + Send) -> (RA, RB) {
        let pin = |i: usize| {
            if let Some(ids) = self.ids() {
                if let Err(e) = quorumcast_driver::agent::pin_current_thread(ids[i]) {
                    eprintln!("warning: bench thread {}: {e}; it runs unpinned", i + 1);
                }
            }
        };
        std::thread::scope(|s| {
            let ha = s.spawn(|| {
                pin(0);
                a()
            });
            let hb = s.spawn(|| {
                pin(1);
                b()
            });
            (ha.join().expect("bench thread 1 panicked"), hb.join().expect("bench thread 2 panicked"))
        })
    }
}

/// Sets its flag when dropped: a thread that holds one tells the other it has stopped however it ends (a
/// panic included), so that the other never waits forever.
pub struct SetOnDrop<'a>(pub &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A histogram of nanoseconds from 1 ns to 60 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Records `elapsed` in nanoseconds (saturating at the top bound).
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    histogram.saturating_record(elapsed.as_nanos() as u64);
}

/// Latency summary of a histogram of nanoseconds, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Percentiles {
    /// Median, us.
    pub p50: f64,
    /// 99th percentile, us.
    pub p99: f64,
    /// 99.9th percentile, us.
    pub p999: f64,
    /// Largest sample, us.
    pub max: f64,
    /// Mean, us.
    pub mean: f64,
    /// Samples.
    pub count: u64,
}

impl Percentiles {
    /// The summary of a histogram recorded in nanoseconds.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
        Self {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
            max: histogram.max() as f64 / 1e3,
            mean: histogram.mean() / 1e3,
            count: histogram.len(),
        }
    }

    /// `p50 8.1 · p99 20.3 · p99.9 41.0 · max 230.4 us`.
    pub fn describe(&self) -> String {
        format!("p50 {:.1} · p99 {:.1} · p99.9 {:.1} · max {:.1} us", self.p50, self.p99, self.p999, self.max)
    }

    /// `{p50, p99, p999, max, mean, round_trips}`, microseconds.
    pub fn to_json(self) -> serde_json::Value {
        json!({
            "p50": self.p50, "p99": self.p99, "p999": self.p999, "max": self.max, "mean": self.mean,
            "round_trips": self.count,
        })
    }
}

/// The median of `values` (the upper one of an even count); 0 for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A rate with a k/M/G suffix: `47.7k`, `5.75M`.
pub fn si(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    if scaled >= 100.0 {
        format!("{scaled:.0}{suffix}")
    } else if scaled >= 10.0 {
        format!("{scaled:.1}{suffix}")
    } else {
        format!("{scaled:.2}{suffix}")
    }
}

/// `{cpu, cores, kernel}` of this host.
pub fn host() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    json!({ "cpu": cpu, "cores": cores, "kernel": kernel })
}

/// The cargo target directory: `CARGO_TARGET_DIR`, else the workspace's `target/` (this crate, whose
/// targets the benches are, is `tools/`, one level below the workspace root).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ is in the workspace").join("target")
    })
}

/// Writes `target/<bench>/<UTC timestamp>/summary.json` and points `target/<bench>/latest` at that
/// directory; returns the summary's path.
pub fn write_summary(bench: &str, summary: &serde_json::Value) -> std::io::Result<PathBuf> {
    let root = target_dir().join(bench);
    let stamp = utc_timestamp();
    let dir = root.join(&stamp);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(summary)? + "\n")?;
    let latest = root.join("latest");
    if latest.symlink_metadata().is_ok() {
        std::fs::remove_file(&latest)?;
    }
    std::os::unix::fs::symlink(&stamp, &latest)?;
    Ok(path)
}

/// `YYYYMMDDTHHMMSSZ` of now, UTC.
pub fn utc_timestamp() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's days-from-civil, inverted).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}
