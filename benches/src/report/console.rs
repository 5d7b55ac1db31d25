//! What the sweep prints when it ends: one short table a person reads in a terminal, a row per
//! configuration (the model's mu beside the measured one, the latency near rho 0.5, the flags), and a
//! line of totals. The detail stays in the report's files (and under the sweep's `--verbose`); nothing
//! here is written to them.

use std::fmt::Write as _;

use super::schema::{
    ConfigResult, PointResult, SweepReport, OTHER_CPU_FLAG_SHARE, SATURATED_BELOW, TAIL_TARGET_MAX_RHO,
};
use super::tables::{micros, rate};

/// The rho whose latency the table shows (or the measured one nearest it).
pub const CONSOLE_RHO: f64 = 0.5;

const COLUMNS: &[(&str, bool)] = &[
    ("MTU", true),
    ("msg B", true),
    ("idle", false),
    ("send mode", false),
    ("control", false),
    ("mu measured", true),
    ("mu predicted", true),
    ("ratio", true),
    ("rho", true),
    ("p50 us", true),
    ("p99 us", true),
    ("flags", false),
];

/// The closing table of a sweep, a row per configuration, then one line of totals; each line ends in a
/// newline. `ratio` is mu measured over mu predicted; `rho`, `p50` and `p99` are the latency (from
/// intended send time) of the point nearest [`CONSOLE_RHO`].
pub fn console_table(report: &SweepReport) -> String {
    if report.configs.is_empty() {
        return "no configuration finished: nothing to tabulate\n".into();
    }
    let rows: Vec<Vec<String>> = report.configs.iter().map(row).collect();
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (header, _))| rows.iter().map(|r| r[i].chars().count()).chain([header.len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(COLUMNS.iter().zip(&widths))
            .map(|(c, ((_, numeric), &w))| if *numeric { format!("{c:>w$}") } else { format!("{c:<w$}") })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let headers: Vec<String> = COLUMNS.iter().map(|(h, _)| h.to_string()).collect();
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(&headers));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out, "{}", console_totals(report));
    out
}

/// One line of totals over every point: `30 points: 1 saturated (...), 2 on a busy host (...); tail target
/// (rho <= 0.5): 18 met, 2 missed`.
fn console_totals(report: &SweepReport) -> String {
    let f = report.flags();
    format!(
        "{} points: {} saturated (achieved < {:.0}% of offered), {} on a busy host (others > {:.0}% of a core); \
         tail target (rho <= {TAIL_TARGET_MAX_RHO}): {} met, {} missed",
        f.points,
        f.saturated,
        100.0 * SATURATED_BELOW,
        f.host_busy,
        100.0 * OTHER_CPU_FLAG_SHARE,
        f.target_met,
        f.target_missed
    )
}

/// One configuration's row.
fn row(c: &ConfigResult) -> Vec<String> {
    let dash = || "-".to_string();
    let predicted = c.mu_predicted > 0.0;
    let point = nearest(&c.points, CONSOLE_RHO);
    vec![
        c.mtu.to_string(),
        c.msg.to_string(),
        c.idle.clone(),
        c.send_mode.clone(),
        c.control.clone(),
        rate(c.mu_measured),
        if predicted { rate(c.mu_predicted) } else { dash() },
        if predicted { format!("{:.2}", c.mu_measured / c.mu_predicted) } else { dash() },
        point.map_or_else(dash, |p| format!("{:.2}", p.rho)),
        point.map_or_else(dash, |p| micros(p.latency_us.p50)),
        point.map_or_else(dash, |p| micros(p.latency_us.p99)),
        config_flags(c),
    ]
}

/// The point whose rho is nearest `rho` (the first of two as near), as the sweep keeps its agents'.
fn nearest(points: &[PointResult], rho: f64) -> Option<&PointResult> {
    points.iter().fold(None, |best, p| match best {
        Some(b) if (b.rho - rho).abs() <= (p.rho - rho).abs() => Some(b),
        _ => Some(p),
    })
}

/// A configuration's flags, from what the sweep judged of its points: `no prediction`, `saturated at rho
/// 0.90`, `tail missed at rho 0.10, 0.30`, `host busy at rho 0.50`; `-` for none.
fn config_flags(c: &ConfigResult) -> String {
    let at = |what: &str, pick: &dyn Fn(&PointResult) -> bool| {
        let rhos: Vec<String> = c.points.iter().filter(|p| pick(p)).map(|p| format!("{:.2}", p.rho)).collect();
        (!rhos.is_empty()).then(|| format!("{what} at rho {}", rhos.join(", ")))
    };
    let flags: Vec<String> = [
        (c.mu_predicted <= 0.0).then(|| "no prediction".to_string()),
        at("saturated", &|p| p.saturated),
        at("tail missed", &|p| p.tail_target.as_ref().is_some_and(|t| !t.met)),
        at("host busy", &|p| p.host_busy()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if flags.is_empty() {
        "-".into()
    } else {
        flags.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn point(rho: f64, p50: f64, p99: f64) -> serde_json::Value {
        let latency = json!({"p50": p50, "p90": p99, "p99": p99, "p999": p99, "max": p99, "mean": p50, "stddev": 1.0});
        json!({
            "rho": rho, "lambda": 1000.0, "achieved": 1000.0, "latency_us": latency, "service_latency_us": latency,
            "hgrm": "hgrm/x.hgrm", "service_hgrm": "hgrm/x.service.hgrm",
        })
    }

    fn config(mtu: u32, predicted: f64, points: Vec<serde_json::Value>) -> serde_json::Value {
        json!({
            "mtu": mtu, "idle": "backoff", "msg": 128, "send_mode": "classic", "control": "separate",
            "s": 200000.0, "c": 1000.0, "d": 2, "m_pkt": 8, "mu_predicted": predicted, "mu_measured": 512345.0,
            "bottleneck": "sender", "points": points,
        })
    }

    fn report(configs: Vec<serde_json::Value>) -> SweepReport {
        serde_json::from_value(json!({
            "profile": "tiny", "timestamp": "2026-12-05T00:00:00Z",
            "host": {"cpu": "x", "cores": 2, "kernel": "6"}, "layout": "l",
            "s_probe": {"d": 2, "sizes": []}, "c_probe": [], "configs": configs,
        }))
        .unwrap()
    }

    #[test]
    fn a_row_per_configuration_with_the_point_nearest_half() {
        let mut saturated = point(0.9, 80.0, 900.0);
        saturated["saturated"] = json!(true);
        let r = report(vec![
            config(1408, 480_000.0, vec![point(0.3, 10.0, 20.0), point(0.5, 45.24, 120.3), saturated]),
            config(8192, 0.0, vec![point(0.2, 11.0, 30.0), point(0.7, 12.0, 40.0)]),
        ]);
        let text = console_table(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with(" MTU  msg B  idle") && lines[0].ends_with("flags"), "{text}");
        let first: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            first,
            [
                "1408",
                "128",
                "backoff",
                "classic",
                "separate",
                "512,345",
                "480,000",
                "1.07",
                "0.50",
                "45.2",
                "120.3",
                "saturated",
                "at",
                "rho",
                "0.90"
            ],
            "{text}"
        );
        // No prediction: no ratio; of 0.2 and 0.7 the nearer to 0.5 is 0.7.
        let second: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&second[5..11], ["512,345", "-", "-", "0.70", "12.0", "40.0"], "{text}");
        assert!(lines[2].ends_with("no prediction"), "{text}");
        assert!(lines[3].starts_with("5 points: 1 saturated"), "{text}");
    }

    #[test]
    fn ties_take_the_first_point_and_no_points_leave_dashes() {
        let r = report(vec![config(1408, 1.0, vec![point(0.4, 1.0, 2.0), point(0.6, 3.0, 4.0)])]);
        assert!(console_table(&r).lines().nth(1).unwrap().contains("0.40"));
        let r = report(vec![config(1408, 1.0, vec![])]);
        let row: Vec<String> = console_table(&r).lines().nth(1).unwrap().split_whitespace().map(String::from).collect();
        assert_eq!(&row[8..], ["-", "-", "-", "-"]);
        assert!(console_table(&report(vec![])).starts_with("no configuration finished"));
    }
}
