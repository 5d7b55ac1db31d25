//! The sweep report: what `cargo bench --bench sweep` leaves in `target/sweep/<timestamp>/`.
//!
//! A report directory holds:
//!
//! - `hgrm/<point>.hgrm` and `hgrm/<point>.service.hgrm`: each point's latency histograms (from intended and
//!   from actual offer time) in HdrHistogram's percentile-distribution text, in microseconds ([`hgrm`]);
//! - `summary.json`: the [`SweepReport`], its field names the report schema's keys;
//! - `summary.md`: the tables a person reads in a terminal;
//! - `report.html`: one self-contained page (inline CSS and SVG, nothing fetched) with the charts.
//!
//! The sweep's console ends with [`console_table`], which is written to no file.
//!
//! The sweep records latencies in nanoseconds; the report divides by [`NS_PER_US`]. A runner that cannot
//! hold every histogram until the end writes each point's pair as it finishes with
//! [`write_point_histograms`] and passes no histograms to [`write_report`], which checks that every point's
//! `.hgrm` files are there either way. [`link_latest`] then points `target/sweep/latest` at the directory.

mod charts;
mod console;
pub mod hgrm;
mod html;
mod markdown;
pub mod schema;
mod tables;

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

pub use console::{console_table, CONSOLE_RHO};
pub use hgrm::{format_hgrm, write_hgrm, TICKS_PER_HALF_DISTANCE};
pub use schema::{
    AgentDutyCycles, CProbe, CProbeLoad, ConfigResult, CoreLateness, CycleQuantiles, Host, LateStage, OtherCpu,
    Percentiles, PointFlags, PointResult, SProbe, SProbeEntry, SweepReport, TailTarget, WakeLateness, C_ALONE,
    C_SHARED, OTHER_CPU_FLAG_SHARE, OTHER_CPU_MIN_TICKS, SATURATED_BELOW, TAIL_TARGET_MAX_RHO, TAIL_TARGET_P50_FACTOR,
    THREAD_WAIT_MIN_MS,
};

/// Histogram units per reported microsecond: the sweep records nanoseconds.
pub const NS_PER_US: f64 = 1000.0;

/// The name of the link, beside the report directories, that points at the newest one.
pub const LATEST: &str = "latest";

/// Why a report could not be written.
#[derive(Debug)]
pub enum ReportError {
    /// A file or directory operation failed.
    Io {
        /// The path the operation was on.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// `summary.json` could not be serialized.
    Json(serde_json::Error),
    /// A chart could not be drawn.
    Chart(String),
    /// A point names an `.hgrm` file that no histogram was given for and that is not in the directory.
    MissingHistogram {
        /// The point's file, relative to the report.
        hgrm: String,
    },
    /// A point's `.hgrm` path or a histogram's point stem would leave the report directory.
    UnsafePath {
        /// The offending path or stem.
        path: String,
    },
    /// The report directory has no parent or no name, so `latest` cannot point at it.
    NoParent {
        /// The directory given.
        dir: PathBuf,
    },
}

impl ReportError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_path_buf(), source }
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "cannot write {}: {source}; check the path and its permissions", path.display()),
            Self::Json(e) => write!(f, "cannot serialize summary.json: {e}"),
            Self::Chart(e) => write!(f, "cannot draw a chart of report.html: {e}"),
            Self::MissingHistogram { hgrm } => write!(
                f,
                "point file {hgrm} is missing: pass its histograms to write_report or write them first with write_point_histograms"
            ),
            Self::UnsafePath { path } => write!(
                f,
                "{path:?} is not a plain relative path inside the report: use ConfigResult::point_stem and PointResult::hgrm_path"
            ),
            Self::NoParent { dir } => {
                write!(f, "{} has no parent directory or name: give the report a directory like target/sweep/<timestamp>", dir.display())
            }
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Json(e) => Some(e),
            _ => None,
        }
    }
}

/// One point's histograms: its stem (see [`ConfigResult::point_stem`]), then the latency from intended
/// send time and the latency from actual offer time, both recorded in nanoseconds.
pub type PointHistograms = (String, Histogram<u64>, Histogram<u64>);

/// Writes one point's two histograms into `dir` as `hgrm/<stem>.hgrm` and `hgrm/<stem>.service.hgrm`
/// (see [`PointResult::hgrm_path`]), in microseconds. The stem must be a plain file name.
pub fn write_point_histograms(
    dir: &Path,
    stem: &str,
    latency: &Histogram<u64>,
    service: &Histogram<u64>,
) -> Result<(), ReportError> {
    let latency_path = PointResult::hgrm_path(stem);
    let service_path = PointResult::service_hgrm_path(stem);
    if stem.is_empty() || stem.contains(['/', '\\']) || !is_inside(&latency_path) {
        return Err(ReportError::UnsafePath { path: stem.to_string() });
    }
    write_hgrm(latency, &dir.join(latency_path), NS_PER_US)?;
    write_hgrm(service, &dir.join(service_path), NS_PER_US)
}

/// Writes the whole report into `dir` (created if missing): the `.hgrm` files of `histograms`, then
/// `summary.json`, `summary.md` and `report.html`.
///
/// Every point's `hgrm` and `service_hgrm` must be plain relative paths, and each file must exist once the
/// given histograms are written (points written earlier with [`write_point_histograms`] need none here);
/// otherwise nothing but the `.hgrm` files is written and the error says which file is missing.
pub fn write_report(dir: &Path, report: &SweepReport, histograms: &[PointHistograms]) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
    for (stem, latency, service) in histograms {
        write_point_histograms(dir, stem, latency, service)?;
    }
    check_point_files(dir, report)?;
    let json = serde_json::to_string_pretty(report).map_err(ReportError::Json)?;
    write_file(&dir.join("summary.json"), json + "\n")?;
    write_file(&dir.join("summary.md"), markdown::render(report))?;
    write_file(&dir.join("report.html"), html::render(report)?)?;
    write_latency_charts(dir, report)
}

/// Writes each configuration's latency-against-rho chart as `charts/<config>.svg` too, for pages that
/// embed one picture.
fn write_latency_charts(dir: &Path, report: &SweepReport) -> Result<(), ReportError> {
    let charts_dir = dir.join("charts");
    for config in report.configs.iter().filter(|c| !c.points.is_empty()) {
        std::fs::create_dir_all(&charts_dir).map_err(|e| ReportError::io(&charts_dir, e))?;
        let stem = config.point_stem(0.0);
        let name = stem.strip_suffix("-rho0.00").unwrap_or(&stem);
        write_file(&charts_dir.join(format!("{name}.svg")), charts::latency_vs_rho(config)?)?;
    }
    Ok(())
}

/// Points `<parent of dir>/latest` at `dir`, as a relative symbolic link (just the directory's name), and
/// replaces an existing link atomically (a new link is renamed over it). Fails if `latest` exists and is
/// a real directory.
pub fn link_latest(dir: &Path) -> Result<(), ReportError> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(ReportError::NoParent { dir: dir.to_path_buf() });
    };
    let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    let link = parent.join(LATEST);
    let staging = parent.join(format!(".{LATEST}.{}.tmp", std::process::id()));
    // A leftover from a crashed run of the same pid is stale; ignore its absence.
    let _ = std::fs::remove_file(&staging);
    std::os::unix::fs::symlink(name, &staging).map_err(|e| ReportError::io(&staging, e))?;
    std::fs::rename(&staging, &link).map_err(|e| {
        let _ = std::fs::remove_file(&staging);
        ReportError::io(&link, e)
    })
}

/// Formats `time` as a UTC timestamp, `YYYY-MM-DDTHH:MM:SSZ`, for the report's `timestamp`. Times before
/// 1970 print as the epoch.
pub fn utc_timestamp(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(time);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Formats `time` as a UTC timestamp fit for a directory name, `YYYYMMDD-HHMMSS`, so that report
/// directories sort by time.
pub fn utc_dir_name(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(time);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// Year, month, day, hour, minute, second of `time` in UTC (the proleptic Gregorian calendar).
fn utc_fields(time: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = (secs % 86_400) as u32;
    let (y, mo, d) = civil_from_days(days);
    (y, mo, d, rem / 3600, rem / 60 % 60, rem % 60)
}

/// The calendar date `days` after 1970-01-01: shift to eras of 400 years starting on March 1st, where
/// leap days fall at the end of each year, then map back to January-based months.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Checks that every point's files are plain relative paths and exist under `dir`.
fn check_point_files(dir: &Path, report: &SweepReport) -> Result<(), ReportError> {
    for point in report.configs.iter().flat_map(|c| &c.points) {
        for file in [&point.hgrm, &point.service_hgrm] {
            if !is_inside(file) {
                return Err(ReportError::UnsafePath { path: file.clone() });
            }
            if !dir.join(file).is_file() {
                return Err(ReportError::MissingHistogram { hgrm: file.clone() });
            }
        }
    }
    Ok(())
}

/// Whether `relative` is a non-empty relative path of plain names (no `..`, no root, no `.`).
fn is_inside(relative: &str) -> bool {
    let path = Path::new(relative);
    !relative.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

fn write_file(path: &Path, contents: String) -> Result<(), ReportError> {
    std::fs::write(path, contents).map_err(|e| ReportError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_match_known_dates() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(utc_timestamp(at(0)), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century divisible by 400) 12:34:56.
        assert_eq!(utc_timestamp(at(951_827_696)), "2000-02-29T12:34:56Z");
        // 2024-12-31 23:59:59, the last second of a leap year.
        assert_eq!(utc_timestamp(at(1_735_689_599)), "2024-12-31T23:59:59Z");
        assert_eq!(utc_dir_name(at(1_735_689_600)), "20250101-000000");
        // 2100-03-01, after a century year that is not a leap year.
        assert_eq!(utc_timestamp(at(4_107_542_400)), "2100-03-01T00:00:00Z");
    }

    #[test]
    fn only_plain_relative_paths_are_inside() {
        assert!(is_inside("hgrm/a.hgrm"));
        assert!(!is_inside("../a.hgrm"));
        assert!(!is_inside("/etc/passwd"));
        assert!(!is_inside("hgrm/../../a"));
        assert!(!is_inside(""));
    }
}
