//! The charts of `report.html`, drawn with plotters' SVG backend into strings (no fonts or system
//! libraries needed: text stays SVG `<text>`, laid out by the browser).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::schema::{CProbe, ConfigResult, PointResult, C_ALONE};
use super::ReportError;
use crate::model::{Regime, KNEE_START, SATURATION_START};

/// Width of every chart, in SVG pixels.
const WIDTH: u32 = 600;
/// Height of every chart, in SVG pixels.
const HEIGHT: u32 = 380;
/// The font family of every chart's text.
const FONT: &str = "sans-serif";

/// The colors of the latency series and of the MTUs, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(110, 110, 110),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// The fills of the safe, knee and saturated regions.
const REGION_FILLS: [(Regime, RGBColor, f64); 3] = [
    (Regime::Safe, RGBColor(44, 160, 44), 0.10),
    (Regime::Knee, RGBColor(255, 170, 0), 0.16),
    (Regime::Saturated, RGBColor(214, 39, 40), 0.10),
];

fn chart_error<E: std::fmt::Debug>(e: E) -> ReportError {
    ReportError::Chart(format!("{e:?}"))
}

/// How a series of the rho chart is stroked.
#[derive(Clone, Copy)]
enum Stroke {
    Solid,
    /// Dashes of this many pixels, with this many between them.
    Dashed(u32, u32),
}

/// A series of the rho chart: its name, color index, stroke, and how to read it from a point (`None`
/// where the point lacks it, as a point without a wake probe).
struct RhoSeries {
    name: &'static str,
    color: usize,
    stroke: Stroke,
    read: fn(&PointResult) -> Option<f64>,
}

/// The latency percentiles and, dashed beside them, the host probe's over the same windows.
const RHO_SERIES: [RhoSeries; 6] = [
    RhoSeries { name: "p50", color: 0, stroke: Stroke::Solid, read: |p| Some(p.latency_us.p50) },
    RhoSeries { name: "p99", color: 1, stroke: Stroke::Solid, read: |p| Some(p.latency_us.p99) },
    RhoSeries { name: "p99.9", color: 2, stroke: Stroke::Solid, read: |p| Some(p.latency_us.p999) },
    RhoSeries { name: "max", color: 3, stroke: Stroke::Dashed(6, 4), read: |p| Some(p.latency_us.max) },
    RhoSeries {
        name: "host probe p99",
        color: 4,
        stroke: Stroke::Dashed(3, 3),
        read: |p| p.wake_probe.as_ref().map(|w| w.late_us.p99),
    },
    RhoSeries {
        name: "host probe p99.9",
        color: 5,
        stroke: Stroke::Dashed(3, 3),
        read: |p| p.wake_probe.as_ref().map(|w| w.late_us.p999),
    },
];

/// Where a point goes along rho: its nominal rho, or its achieved one when it was saturated.
fn plotted_rho(c: &ConfigResult, p: &PointResult) -> f64 {
    if p.saturated {
        c.achieved_rho(p)
    } else {
        p.rho
    }
}

/// Latency percentiles (p50, p99, p99.9, max; log scale, microseconds) of one configuration against rho,
/// over the shaded safe, knee and saturated regions, with the host probe's p99 and p99.9 over the same
/// windows beside them. Saturated points ([`PointResult::saturated`]) are left off the lines and drawn as
/// crosses at their achieved rho; a ring marks the p50 of a point during which the host was busy
/// ([`PointResult::host_busy`]).
pub(crate) fn latency_vs_rho(c: &ConfigResult) -> Result<String, ReportError> {
    let mut points: Vec<&PointResult> = c.points.iter().collect();
    points.sort_by(|a, b| a.rho.total_cmp(&b.rho));
    let values = points.iter().flat_map(|p| RHO_SERIES.iter().filter_map(|s| (s.read)(p)));
    let (y_lo, y_hi) = log_bounds(values, 8.0);
    let x_hi = points.iter().map(|p| p.rho.max(plotted_rho(c, p))).fold(1.2_f64, f64::max) * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(c.label(), (FONT, 21))
            .margin(12)
            .x_label_area_size(46)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_hi, (y_lo..y_hi).log_scale())
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc("rho = lambda / mu measured")
            .y_desc("latency (log scale)")
            .y_labels(decade_labels(y_lo, y_hi))
            .y_label_formatter(&|v| duration_label(*v))
            .x_label_formatter(&|v| format!("{v:.1}"))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .draw()
            .map_err(chart_error)?;
        let bands = [(0.0, KNEE_START), (KNEE_START, SATURATION_START), (SATURATION_START, x_hi)];
        for ((lo, hi), (regime, color, alpha)) in bands.into_iter().zip(REGION_FILLS) {
            chart
                .draw_series([Rectangle::new([(lo, y_lo), (hi, y_hi)], color.mix(alpha).filled())])
                .map_err(chart_error)?;
            let label_style = (FONT, 15).into_font().color(&color.mix(0.9)).pos(Pos::new(HPos::Center, VPos::Top));
            chart
                .draw_series([Text::new(regime.to_string(), ((lo + hi) / 2.0, y_hi / 1.15), label_style)])
                .map_err(chart_error)?;
        }
        let (on_line, apart): (Vec<&PointResult>, Vec<&PointResult>) = points.iter().partition(|p| !p.saturated);
        for series in &RHO_SERIES {
            let at = |p: &&PointResult, x: f64| (series.read)(p).map(|v| (x, v.max(y_lo)));
            let line: Vec<(f64, f64)> = on_line.iter().filter_map(|p| at(p, p.rho)).collect();
            let crosses: Vec<(f64, f64)> = apart.iter().filter_map(|p| at(p, c.achieved_rho(p))).collect();
            if line.is_empty() && crosses.is_empty() {
                continue;
            }
            draw_rho_series(&mut chart, series, &line, &crosses)?;
        }
        draw_rho_marks(&mut chart, c, &points, y_lo)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(chart_error)?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

type RhoChart<'a, 'b> = Chart<'a, 'b, plotters::coord::types::RangedCoordf64, LogCoord<f64>>;

/// One series of the rho chart: its line and dots through `line`, crosses at `crosses` (saturated
/// points, at their achieved rho), and its legend entry.
fn draw_rho_series(
    chart: &mut RhoChart<'_, '_>,
    series: &RhoSeries,
    line: &[(f64, f64)],
    crosses: &[(f64, f64)],
) -> Result<(), ReportError> {
    let color = PALETTE[series.color % PALETTE.len()];
    let style = color.stroke_width(2);
    let drawn = match series.stroke {
        Stroke::Solid => chart.draw_series(LineSeries::new(line.to_vec(), style)),
        Stroke::Dashed(size, spacing) => chart.draw_series(DashedLineSeries::new(line.to_vec(), size, spacing, style)),
    };
    drawn
        .map_err(chart_error)?
        .label(series.name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(chart_error)?;
    chart.draw_series(crosses.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2)))).map_err(chart_error)?;
    Ok(())
}

/// The legend entry for saturated points (when there are any) and a ring around the p50 of each point
/// during which the host was busy.
fn draw_rho_marks(
    chart: &mut RhoChart<'_, '_>,
    c: &ConfigResult,
    points: &[&PointResult],
    y_lo: f64,
) -> Result<(), ReportError> {
    let grey = BLACK.mix(0.7);
    if points.iter().any(|p| p.saturated) {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(chart_error)?
            .label("saturated: at achieved rho")
            .legend(move |(x, y)| Cross::new((x + 9, y), 5, grey.stroke_width(2)));
    }
    let busy: Vec<(f64, f64)> =
        points.iter().filter(|p| p.host_busy()).map(|p| (plotted_rho(c, p), p.latency_us.p50.max(y_lo))).collect();
    if !busy.is_empty() {
        let ring = BLACK.stroke_width(1);
        chart
            .draw_series(busy.into_iter().map(|p| Circle::new(p, 8, ring)))
            .map_err(chart_error)?
            .label("host busy (other CPU)")
            .legend(move |(x, y)| Circle::new((x + 9, y), 6, ring));
    }
    Ok(())
}

/// One bar of a grouped bar chart: its slot (category index), offset and width within the slot, value,
/// and style.
struct Bar {
    center: f64,
    width: f64,
    value: f64,
    fill: ShapeStyle,
    outline: ShapeStyle,
    /// Text above the bar, or empty.
    note: String,
}

/// A grouped bar chart: categories along x, bars within each, and a legend of (name, fill) pairs.
struct BarChart<'a> {
    title: &'a str,
    categories: Vec<String>,
    bars: Vec<Bar>,
    legend: Vec<(String, ShapeStyle)>,
    y_desc: &'a str,
    log: bool,
}

/// mu predicted against measured for one group of configurations sharing idle strategy, send mode and
/// control: message sizes along x, a pair of bars (model, measured) per MTU, the error above each pair.
pub(crate) fn mu_chart(title: &str, configs: &[&ConfigResult]) -> Result<String, ReportError> {
    let mut msgs: Vec<u32> = configs.iter().map(|c| c.msg).collect();
    msgs.sort_unstable();
    msgs.dedup();
    let mut mtus: Vec<u32> = configs.iter().map(|c| c.mtu).collect();
    mtus.sort_unstable();
    mtus.dedup();
    let slot = 0.8 / (2 * mtus.len()) as f64;
    let mut bars = Vec::new();
    let mut legend = Vec::new();
    for (j, mtu) in mtus.iter().enumerate() {
        let color = PALETTE[j % PALETTE.len()];
        let (model_fill, measured_fill) = (color.mix(0.22).filled(), color.filled());
        legend.push((format!("MTU {mtu} model"), model_fill));
        legend.push((format!("MTU {mtu} measured"), measured_fill));
        for c in configs.iter().filter(|c| c.mtu == *mtu) {
            let i = msgs.iter().position(|m| *m == c.msg).unwrap_or(0) as f64;
            let left = i - 0.4 + slot * (2 * j) as f64;
            let note = c.mu_error_percent().map_or_else(String::new, |e| format!("{e:+.0}%"));
            let outline = color.stroke_width(1);
            bars.push(Bar {
                center: left + slot / 2.0,
                width: slot,
                value: c.mu_predicted,
                fill: model_fill,
                outline,
                note: String::new(),
            });
            bars.push(Bar {
                center: left + slot * 1.5,
                width: slot,
                value: c.mu_measured,
                fill: measured_fill,
                outline,
                note,
            });
        }
    }
    let categories = msgs.iter().map(|m| format!("{m} B")).collect();
    bar_chart(&BarChart { title, categories, bars, legend, y_desc: "messages / s (log)", log: true })
}

/// C per idle strategy: a pair of bars per strategy, control syscalls/s (C) and data syscalls/s.
pub(crate) fn c_chart(probes: &[CProbe]) -> Result<String, ReportError> {
    let c_fill = PALETTE[2].filled();
    let data_fill = PALETTE[0].mix(0.35).filled();
    let mut bars = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let i = i as f64;
        bars.push(Bar {
            center: i - 0.15,
            width: 0.3,
            value: p.c_per_s,
            fill: c_fill,
            outline: PALETTE[2].stroke_width(1),
            note: short_number(p.c_per_s),
        });
        bars.push(Bar {
            center: i + 0.15,
            width: 0.3,
            value: p.data_syscalls_per_s,
            fill: data_fill,
            outline: PALETTE[0].stroke_width(1),
            note: short_number(p.data_syscalls_per_s),
        });
    }
    bar_chart(&BarChart {
        title: "Leader Sender syscalls per idle strategy",
        categories: probes
            .iter()
            .map(|p| if p.layout == C_ALONE { p.idle.clone() } else { format!("{} ({})", p.idle, p.layout) })
            .collect(),
        bars,
        legend: vec![("C: control syscalls/s".into(), c_fill), ("data syscalls/s".into(), data_fill)],
        y_desc: "syscalls / s",
        log: false,
    })
}

/// Draws a grouped bar chart on a linear or log y axis.
fn bar_chart(spec: &BarChart<'_>) -> Result<String, ReportError> {
    let n = spec.categories.len().max(1);
    let x_range = CategoryAxis { count: n };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(spec.title, (FONT, 21)).margin(12).x_label_area_size(36).y_label_area_size(70);
        let category = |v: &f64| spec.categories.get(v.round().max(0.0) as usize).cloned().unwrap_or_default();
        if spec.log {
            let (lo, hi) = log_bounds(spec.bars.iter().map(|b| b.value), 6.0);
            let mut chart = builder.build_cartesian_2d(x_range, (lo..hi).log_scale()).map_err(chart_error)?;
            draw_mesh(&mut chart, spec.y_desc, &category, decade_labels(lo, hi))?;
            draw_bars(&mut chart, &spec.bars, lo, 1.12)?;
            draw_legend(&mut chart, &spec.legend)?;
        } else {
            let hi = spec.bars.iter().map(|b| b.value).fold(0.0_f64, f64::max).max(1.0) * 1.25;
            let mut chart = builder.build_cartesian_2d(x_range, 0f64..hi).map_err(chart_error)?;
            draw_mesh(&mut chart, spec.y_desc, &category, 8)?;
            draw_bars(&mut chart, &spec.bars, 0.0, 1.0)?;
            draw_legend(&mut chart, &spec.legend)?;
        }
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// An x axis of `count` categories centered on 0, 1, ... with a tick (and label) at each.
#[derive(Clone, Copy)]
struct CategoryAxis {
    count: usize,
}

impl Ranged for CategoryAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.count as f64;
        let fraction = (value + 0.5) / span;
        limit.0 + (fraction * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.count).map(|i| i as f64).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        -0.5..self.count as f64 - 0.5
    }
}

type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

/// Draws the axes of a bar chart: category names along x, `y_labels` labels along y, no vertical grid.
fn draw_mesh<X, Y>(
    chart: &mut Chart<'_, '_, X, Y>,
    y_desc: &str,
    category: &dyn Fn(&f64) -> String,
    y_labels: usize,
) -> Result<(), ReportError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .y_labels(y_labels)
        .x_label_formatter(category)
        .y_label_formatter(&|v| short_number(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(chart_error)
}

/// Draws the bars from `base` up, each with its note just above it (at the bar's top times `note_lift`).
fn draw_bars<X, Y>(chart: &mut Chart<'_, '_, X, Y>, bars: &[Bar], base: f64, note_lift: f64) -> Result<(), ReportError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for b in bars {
        let (x0, x1) = (b.center - b.width / 2.0, b.center + b.width / 2.0);
        let top = b.value.max(base);
        chart.draw_series([Rectangle::new([(x0, base), (x1, top)], b.fill)]).map_err(chart_error)?;
        chart.draw_series([Rectangle::new([(x0, base), (x1, top)], b.outline)]).map_err(chart_error)?;
        if !b.note.is_empty() {
            let style = (FONT, 14).into_font().color(&BLACK.mix(0.75)).pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series([Text::new(b.note.clone(), (b.center, top * note_lift), style)]).map_err(chart_error)?;
        }
    }
    Ok(())
}

/// Draws a legend of filled squares in the upper left corner.
fn draw_legend<'a, 'b: 'a, X, Y>(
    chart: &mut Chart<'a, 'b, X, Y>,
    entries: &[(String, ShapeStyle)],
) -> Result<(), ReportError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (name, fill) in entries {
        let fill = *fill;
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(chart_error)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fill));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(chart_error)
}

/// The label count to ask of a log axis from `lo` to `hi` so that plotters labels the decades only: one
/// more than the decades spanned (plotters adds 2x..9x labels when asked for many more than that).
fn decade_labels(lo: f64, hi: f64) -> usize {
    (hi / lo).log10().floor().max(1.0) as usize + 1
}

/// Log-axis bounds around the positive `values`: the decade below the smallest (so the bottom is
/// labelled) and `headroom` times above the largest, at least two decades apart (so the axis is labelled by decades); (1, 100) when there is no
/// positive value.
fn log_bounds(values: impl Iterator<Item = f64>, headroom: f64) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return (1.0, 100.0);
    }
    let lo = 10f64.powf((lo / 1.1).log10().floor());
    (lo, (hi * headroom).max(lo * 100.0))
}

/// A latency in microseconds as an axis label in the unit that reads best: `150 us`, `2.5 ms`, `1 s`.
pub(crate) fn duration_label(us: f64) -> String {
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if us >= 1e6 {
        trim(format!("{:.1}", us / 1e6)) + " s"
    } else if us >= 1e3 {
        trim(format!("{:.1}", us / 1e3)) + " ms"
    } else if us >= 1.0 {
        trim(format!("{us:.1}")) + " us"
    } else {
        trim(format!("{:.0}", us * 1e3)) + " ns"
    }
}

/// A compact axis label: `850`, `12K`, `1.5M`, `0.25`.
pub(crate) fn short_number(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if a >= 1e9 {
        trim(format!("{:.1}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "K"
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers_are_compact() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(850.0), "850");
        assert_eq!(short_number(12_000.0), "12K");
        assert_eq!(short_number(1_500_000.0), "1.5M");
        assert_eq!(short_number(0.25), "0.25");
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration_label(150.0), "150 us");
        assert_eq!(duration_label(2500.0), "2.5 ms");
        assert_eq!(duration_label(1e6), "1 s");
        assert_eq!(duration_label(0.25), "250 ns");
    }

    #[test]
    fn log_bounds_span_the_values() {
        let (lo, hi) = log_bounds([0.0, 150.0, 5000.0].into_iter(), 4.0);
        assert_eq!(lo, 100.0);
        assert!(hi >= 20_000.0);
        assert_eq!(log_bounds(std::iter::empty(), 2.0), (1.0, 100.0));
        let (lo, hi) = log_bounds([1000.0, 2000.0].into_iter(), 2.0);
        assert!(hi / lo >= 100.0);
    }
}
