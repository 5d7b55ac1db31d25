//! HdrHistogram's percentile-distribution text (`.hgrm`), as the Java and C libraries print it and as the
//! standard HdrHistogram plotter loads it.
//!
//! The layout, column for column:
//!
//! ```text
//!        Value     Percentile TotalCount 1/(1-Percentile)
//!
//!        1.000 0.000000000000          1           1.00
//!        ...
//!        4.000 1.000000000000          4
//! #[Mean    =        2.500, StdDeviation   =        1.118]
//! #[Max     =        4.000, Total count    =            4]
//! #[Buckets =            4, SubBuckets     =         2048]
//! ```
//!
//! Values are printed with as many decimals as the histogram has significant digits, after dividing by the
//! unit scaling (1000.0 turns nanoseconds into microseconds). Percentile rows follow HdrHistogram's
//! percentile iteration with a fixed number of ticks per half-distance to 100%; the last row (percentile
//! 1.0) has no `1/(1-Percentile)` column.

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;

use super::ReportError;

/// The ticks per half-distance HdrHistogram's tools use by default, and the ones the report uses.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Renders `histogram` as percentile-distribution text, dividing values by `value_unit_scaling` (1000.0
/// for nanoseconds to microseconds) with `ticks_per_half_distance` percentile ticks per half-distance.
/// A scaling that is not a positive finite number is treated as 1; zero ticks as one tick. An empty
/// histogram gives the header and the footer only.
pub fn format_hgrm(histogram: &Histogram<u64>, value_unit_scaling: f64, ticks_per_half_distance: u32) -> String {
    let scale = if value_unit_scaling.is_finite() && value_unit_scaling > 0.0 { value_unit_scaling } else { 1.0 };
    let digits = usize::from(histogram.sigfig());
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored on purpose below.
    let _ = write!(out, "{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let total = histogram.len();
    if total > 0 {
        for row in percentile_rows(histogram, ticks_per_half_distance.max(1)) {
            let value = row.value as f64 / scale;
            let fraction = row.percentile / 100.0;
            if row.percentile < 100.0 {
                let inverse = 1.0 / (1.0 - fraction);
                let _ = writeln!(out, "{value:12.digits$} {fraction:2.12} {:10} {inverse:14.2}", row.total_count);
            } else {
                let _ = writeln!(out, "{value:12.digits$} {fraction:2.12} {:10}", row.total_count);
            }
        }
    }
    let (mean, stddev) = mean_and_stddev(histogram);
    let (mean, stddev) = (mean / scale, stddev / scale);
    let max = if total == 0 { 0.0 } else { histogram.max() as f64 / scale };
    let _ = writeln!(out, "#[Mean    = {mean:12.digits$}, StdDeviation   = {stddev:12.digits$}]");
    let _ = writeln!(out, "#[Max     = {max:12.digits$}, Total count    = {:12}]", histogram.len());
    let _ =
        writeln!(out, "#[Buckets = {:12}, SubBuckets     = {:12}]", histogram.buckets(), sub_bucket_count(histogram));
    out
}

/// Writes `histogram` to `path` as percentile-distribution text with [`TICKS_PER_HALF_DISTANCE`] (see
/// [`format_hgrm`]); values are divided by `value_unit_scaling`. Creates missing parent directories.
pub fn write_hgrm(histogram: &Histogram<u64>, path: &Path, value_unit_scaling: f64) -> Result<(), ReportError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| ReportError::io(parent, e))?;
    }
    let text = format_hgrm(histogram, value_unit_scaling, TICKS_PER_HALF_DISTANCE);
    std::fs::write(path, text).map_err(|e| ReportError::io(path, e))
}

/// One row of the percentile distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    /// The highest value equivalent to the recorded value the row stopped at.
    value: u64,
    /// The percentile level (0 to 100) the row reports.
    percentile: f64,
    /// Values recorded at or below `value`.
    total_count: u64,
}

/// HdrHistogram's percentile iteration, kept in percent as the Java library keeps it (so that levels such
/// as 75% are exact and land on the same values): starting at 0%, every recorded value emits a row for
/// each level its cumulative percentile reaches, the level climbing by `100 / (ticks x 2^(h + 1))` where
/// `h` is how many times the distance to 100% has been halved. Once the last recorded value has emitted
/// its first row, one final row at 100% follows. Requires a non-empty histogram.
fn percentile_rows(histogram: &Histogram<u64>, ticks_per_half_distance: u32) -> Vec<Row> {
    let total = histogram.len();
    let mut rows = Vec::new();
    let mut level = 0.0_f64;
    let mut cumulative = 0_u64;
    for step in histogram.iter_recorded() {
        cumulative += step.count_at_value();
        let value = step.value_iterated_to();
        while 100.0 * cumulative as f64 / total as f64 >= level {
            rows.push(Row { value, percentile: level, total_count: cumulative });
            if cumulative == total {
                rows.push(Row { value, percentile: 100.0, total_count: cumulative });
                return rows;
            }
            level += 100.0 / ticks_at(level, ticks_per_half_distance);
        }
    }
    rows
}

/// Ticks in the whole 0-100% span at `level`: the ticks per half-distance times `2^(h + 1)`, `h` being the
/// halvings of the distance to 100% so far (computed as the Java library does, through natural logs).
fn ticks_at(level: f64, ticks_per_half_distance: u32) -> f64 {
    let halvings = ((100.0 / (100.0 - level)).ln() / 2f64.ln()) as i32;
    f64::from(ticks_per_half_distance) * 2f64.powi(halvings.saturating_add(1))
}

/// The mean and standard deviation of `histogram` in its own units, as HdrHistogram's Java library
/// computes them: every recorded value counts as the middle of its equivalence range, the total is summed
/// before dividing. Zeros for an empty histogram.
pub(crate) fn mean_and_stddev(histogram: &Histogram<u64>) -> (f64, f64) {
    let total = histogram.len();
    if total == 0 {
        return (0.0, 0.0);
    }
    let middle = |v: u64| histogram.median_equivalent(v) as f64;
    let sum: f64 = histogram.iter_recorded().map(|s| middle(s.value_iterated_to()) * s.count_at_value() as f64).sum();
    let mean = sum / total as f64;
    let squares: f64 = histogram
        .iter_recorded()
        .map(|s| {
            let deviation = middle(s.value_iterated_to()) - mean;
            deviation * deviation * s.count_at_value() as f64
        })
        .sum();
    (mean, (squares / total as f64).sqrt())
}

/// The histogram's sub-buckets per bucket: the power of two that gives unit resolution up to
/// `2 x 10^significant_digits`, as HdrHistogram sizes it.
fn sub_bucket_count(histogram: &Histogram<u64>) -> u64 {
    let largest_single_unit = 2 * 10u64.pow(u32::from(histogram.sigfig()));
    largest_single_unit.next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The four values 1, 2, 3, 4, reasoned through HdrHistogram's percentile iteration by hand: ticks of
    /// 10% up to 50%, of 5% up to 75%, then 2.5%; value 4 holds the last count, so after the tick that
    /// reaches it (77.5%) the iteration jumps to 100%.
    #[test]
    fn four_values_print_like_the_java_tool() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 10_000, 3).unwrap();
        for v in 1..=4 {
            h.record(v).unwrap();
        }
        let expected = "       Value     Percentile TotalCount 1/(1-Percentile)\n\
                        \n\
                        \x20      1.000 0.000000000000          1           1.00\n\
                        \x20      1.000 0.100000000000          1           1.11\n\
                        \x20      1.000 0.200000000000          1           1.25\n\
                        \x20      2.000 0.300000000000          2           1.43\n\
                        \x20      2.000 0.400000000000          2           1.67\n\
                        \x20      2.000 0.500000000000          2           2.00\n\
                        \x20      3.000 0.550000000000          3           2.22\n\
                        \x20      3.000 0.600000000000          3           2.50\n\
                        \x20      3.000 0.650000000000          3           2.86\n\
                        \x20      3.000 0.700000000000          3           3.33\n\
                        \x20      3.000 0.750000000000          3           4.00\n\
                        \x20      4.000 0.775000000000          4           4.44\n\
                        \x20      4.000 1.000000000000          4\n\
                        #[Mean    =        2.500, StdDeviation   =        1.118]\n\
                        #[Max     =        4.000, Total count    =            4]\n\
                        #[Buckets =            4, SubBuckets     =         2048]\n";
        assert_eq!(format_hgrm(&h, 1.0, 5), expected);
    }

    #[test]
    fn values_are_scaled_to_the_output_unit() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record(1500).unwrap();
        let text = format_hgrm(&h, 1000.0, 5);
        let rows: Vec<&str> = text.lines().skip(2).filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(rows[0].starts_with("       1.500 0.000000000000          1"), "{text}");
        assert!(rows[1].starts_with("       1.500 1.000000000000          1"), "{text}");
        assert!(text.contains("#[Max     =        1.500, Total count    =            1]"), "{text}");
        // 2048 sub-buckets cover up to 2047; 60e9 needs 25 doublings more.
        assert!(text.contains("#[Buckets =           26, SubBuckets     =         2048]"), "{text}");
    }

    #[test]
    fn empty_histogram_has_header_and_footer_only() {
        let h = Histogram::<u64>::new_with_bounds(1, 10_000, 2).unwrap();
        let text = format_hgrm(&h, 1000.0, 5);
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains("Total count    =            0]"));
        assert!(text.contains("SubBuckets     =          256]"));
    }
}
