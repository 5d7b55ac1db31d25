//! `summary.md`: the report's tables as Markdown, padded so that the columns line up in a terminal.

use std::fmt::Write as _;

use super::schema::SweepReport;
use super::tables::{self, Table};

/// Renders the whole `summary.md`.
pub(crate) fn render(r: &SweepReport) -> String {
    let mut out = format!("# quorumcast sweep ({}, {})\n\n", r.profile, r.timestamp);
    out.push_str("Model: `peak_TPS = mu = (S - C) / D x M_pkt`; `rho = lambda / mu`. ");
    out.push_str("Regimes: safe rho < 0.7, knee 0.7-1.0, saturated > 1.0.\n\n");
    let _ = writeln!(out, "Points: {}.", r.flags().describe());
    for t in tables::all(r) {
        out.push('\n');
        out.push_str(&table(&t));
    }
    out
}

/// One table: a `##` heading, its note, then a pipe table with padded columns.
fn table(t: &Table) -> String {
    let mut out = format!("## {}\n\n", t.title);
    if !t.note.is_empty() {
        let _ = write!(out, "{}\n\n", t.note);
    }
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let rows: Vec<Vec<String>> = t.rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()).collect();
    let widths: Vec<usize> = (0..t.headers.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).chain([t.headers[i].chars().count(), 3]).max().unwrap_or(3))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(
                |(i, c)| {
                    if t.numeric[i] {
                        format!("{c:>w$}", w = widths[i])
                    } else {
                        format!("{c:<w$}", w = widths[i])
                    }
                },
            )
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let headers: Vec<String> = t.headers.iter().map(|h| h.to_string()).collect();
    out.push_str(&line(&headers));
    let rule: Vec<String> = widths
        .iter()
        .zip(&t.numeric)
        .map(|(w, n)| if *n { format!("{}:", "-".repeat(w - 1)) } else { "-".repeat(*w) })
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}
