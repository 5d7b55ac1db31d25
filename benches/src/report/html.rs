//! `report.html`: one self-contained page (inline CSS and SVG; no script, no external resource).

use std::fmt::Write as _;

use super::charts;
use super::schema::{ConfigResult, SweepReport};
use super::tables::{self, rate, Table};
use super::ReportError;

/// The page's style sheet.
const STYLE: &str = r#"
:root { --ink: #1d2330; --muted: #5b6475; --line: #dde1e8; --bg: #f5f6f8; --card: #fff; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1260px; margin: 0 auto; padding: 28px 24px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 0 0 8px; }
p { margin: 6px 0 12px; }
.sub, .note { color: var(--muted); }
.note { font-size: 13px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 16px; margin-top: 18px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px; }
.formula { font: 600 20px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; margin: 6px 0 10px;
  padding: 10px 14px; background: #f0f5fb; border-left: 4px solid var(--accent); border-radius: 4px; }
.formula small { display: block; font-weight: 400; font-size: 14px; color: var(--muted); }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
figure { margin: 0; background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: 13px; color: var(--muted); padding: 4px 8px 2px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -1px; margin: 0 4px 0 10px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; width: 100%; background: var(--card); }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafbfc; }
td.wrap { white-space: pre-wrap; }
.kv th { width: 9em; background: none; color: var(--muted); font-weight: 500; }
.met { color: #1e7b1e; } .miss, .flag { color: #b3191c; font-weight: 600; }
.regime-safe { color: #1e7b1e; } .regime-knee { color: #a35f00; font-weight: 600; } .regime-saturated { color: #b3191c; font-weight: 600; }
.tablewrap { margin: 14px 0 22px; }
a { color: var(--accent); }
"#;

/// Renders the whole page.
pub(crate) fn render(r: &SweepReport) -> Result<String, ReportError> {
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("quorumcast sweep — {} profile, {}", r.profile, r.timestamp);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n\
         </head>\n<body>\n<main>\n",
        escape(&title)
    );
    let _ = writeln!(out, "<h1>quorumcast sweep report</h1>");
    let _ = writeln!(
        out,
        "<p class=\"sub\">{} profile · started {} · {} configurations · {} points · {}</p>",
        escape(&r.profile),
        escape(&r.timestamp),
        r.configs.len(),
        r.configs.iter().map(|c| c.points.len()).sum::<usize>(),
        escape(&r.host.cpu)
    );
    let flags = r.flags();
    let class = if flags.host_busy > 0 || flags.target_missed > 0 { "flag" } else { "sub" };
    let _ = writeln!(out, "<p class=\"{class}\">{}</p>", escape(&flags.describe()));
    out.push_str("<div class=\"cards\">\n");
    model_card(&mut out, r);
    let _ = writeln!(out, "<div class=\"card\"><h3>Host</h3>{}</div>", kv_table(&tables::host_table(r)));
    let _ = writeln!(out, "<div class=\"card\">{}</div>", table_html(&tables::s_table(r), "h3"));
    let _ = writeln!(out, "<div class=\"card\">{}</div>", table_html(&tables::c_table(r), "h3"));
    out.push_str("</div>\n");

    latency_section(&mut out, r)?;
    capacity_section(&mut out, r)?;
    c_section(&mut out, r)?;

    out.push_str("<h2>Tables</h2>\n<p class=\"note\">The same tables as summary.md. Latencies in microseconds, rates per second.</p>\n");
    let _ = writeln!(out, "<div class=\"tablewrap\">{}</div>", table_html(&tables::capacity_table(r), "h3"));
    let _ = writeln!(out, "<div class=\"tablewrap\">{}</div>", table_html(&tables::budget_table(r), "h3"));
    for c in &r.configs {
        let _ = writeln!(out, "<div class=\"tablewrap\">{}</div>", table_html(&tables::latency_table(c), "h3"));
        let _ = writeln!(out, "<div class=\"tablewrap\">{}</div>", table_html(&tables::tail_table(c), "h3"));
    }
    out.push_str("</main>\n</body>\n</html>\n");
    Ok(out)
}

/// The model's formula, with this run's measured S, C and D, and one configuration worked through.
fn model_card(out: &mut String, r: &SweepReport) {
    out.push_str("<div class=\"card\"><h3>The model</h3>\n");
    out.push_str(
        "<div class=\"formula\">peak_TPS = μ = (S − C) / D × M_pkt<small>ρ = λ / μ · \
         M_pkt = ⌊(MTU − 40) / align32(msg + 32)⌋</small></div>\n",
    );
    let s_list: Vec<String> = r
        .s_probe
        .sizes
        .iter()
        .filter(|e| e.send_mode == "classic")
        .map(|e| format!("{}/s at {} B", rate(e.s), e.datagram))
        .collect();
    let c_list: Vec<String> =
        r.c_probe.iter().map(|c| format!("{}/s with {}", rate(c.c_per_s), escape(&c.idle))).collect();
    let _ = writeln!(
        out,
        "<p><b>S</b> (single-thread sendmsg/s, measured first; each configuration probes it again in slices \
         between its mu windows, with the cluster paused, and predicts with their mean): {}.<br><b>C</b> (the Sender's control syscalls/s; the C probe at a moderate load): {}. Each \
         configuration's prediction takes the C of its own saturated run, the control syscalls that really took \
         from the data budget.<br><b>D</b> = {} followers.</p>",
        or_none(&s_list),
        or_none(&c_list),
        r.s_probe.d
    );
    if let Some(c) = r.configs.first() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", worked_example(c));
    }
    out.push_str(
        "<p class=\"note\">Latency regimes: <span class=\"swatch\" style=\"background:#c9e8c9\"></span>safe ρ &lt; 0.7 \
         <span class=\"swatch\" style=\"background:#ffe3ad\"></span>knee 0.7–1.0 \
         <span class=\"swatch\" style=\"background:#f4c4c4\"></span>saturated ρ &gt; 1.0</p>\n</div>\n",
    );
}

/// `MTU 1408 · 128 B · noop: (S − C) / D × M_pkt = (...) = ... msg/s predicted, ... measured (+x%).`
fn worked_example(c: &ConfigResult) -> String {
    let error = c.mu_error_percent().map_or_else(String::new, |e| format!(" ({e:+.1}%)"));
    format!(
        "{}: ({} − {}) / {} × {} = {} msg/s predicted; {} measured{}; bottleneck: {}.",
        escape(&c.label()),
        rate(c.s),
        rate(c.c),
        c.d,
        c.m_pkt,
        rate(c.mu_predicted),
        rate(c.mu_measured),
        error,
        escape(&c.bottleneck)
    )
}

fn latency_section(out: &mut String, r: &SweepReport) -> Result<(), ReportError> {
    out.push_str("<h2>Latency against utilization</h2>\n");
    out.push_str(
        "<p>For each configuration: p50, p99, p99.9 and max latency (from each message's intended send time, so \
         coordinated omission is corrected), on a log scale, against ρ = λ / μ measured. Below ρ ≈ 0.7 latency is the \
         fixed pipeline time; in the knee the tail detaches; past ρ = 1 every message waits the bounded window's drain \
         time and the curves flatten into a plateau. Beside them, dashed, the host probe's p99 and p99.9 over the \
         same windows: how late a thread sleeping 1 ms at a time woke while the point ran. A point that carried less \
         than its offered load is left off the lines and drawn as crosses at the ρ it achieved; a ring marks a point \
         during which other processes took more than a few percent of a core.</p>\n<div class=\"charts\">\n",
    );
    for c in &r.configs {
        let svg = charts::latency_vs_rho(c)?;
        let _ = writeln!(
            out,
            "<figure>{svg}<figcaption>{} · μ measured {} msg/s · bottleneck {}{}</figcaption></figure>",
            escape(&c.label()),
            rate(c.mu_measured),
            escape(&c.bottleneck),
            escape(&caption_flags(c))
        );
    }
    out.push_str("</div>\n");
    Ok(())
}

/// ` · 1 saturated · 2 host busy · tail target 2 of 3 met`, the parts that apply (empty when none).
fn caption_flags(c: &ConfigResult) -> String {
    let saturated = c.points.iter().filter(|p| p.saturated).count();
    let busy = c.points.iter().filter(|p| p.host_busy()).count();
    let targets: Vec<bool> = c.points.iter().filter_map(|p| p.tail_target.as_ref().map(|t| t.met)).collect();
    let mut parts = Vec::new();
    if saturated > 0 {
        parts.push(format!("{saturated} saturated"));
    }
    if busy > 0 {
        parts.push(format!("{busy} host busy"));
    }
    if !targets.is_empty() {
        parts.push(format!("tail target {} of {} met", targets.iter().filter(|m| **m).count(), targets.len()));
    }
    parts.iter().map(|p| format!(" · {p}")).collect()
}

fn capacity_section(out: &mut String, r: &SweepReport) -> Result<(), ReportError> {
    out.push_str("<h2>Capacity: μ predicted against measured</h2>\n");
    out.push_str(
        "<p>For each message size and MTU, the model's (S − C) / D × M_pkt (light) beside the sustained committed \
         rate under a saturating load (solid), with the model's error above. A stage other than the Sender that \
         saturates first is named in the capacity table.</p>\n<div class=\"charts\">\n",
    );
    let mut groups: Vec<(String, Vec<&ConfigResult>)> = Vec::new();
    for c in &r.configs {
        let key = format!("{} · {}/{}", c.idle, c.send_mode, c.control);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    for (key, configs) in &groups {
        let svg = charts::mu_chart(&format!("μ: {key}"), configs)?;
        let _ = writeln!(out, "<figure>{svg}<figcaption>idle {}</figcaption></figure>", escape(key));
    }
    out.push_str("</div>\n");
    Ok(())
}

fn c_section(out: &mut String, r: &SweepReport) -> Result<(), ReportError> {
    out.push_str("<h2>C per idle strategy</h2>\n");
    if r.c_probe.is_empty() {
        out.push_str("<p class=\"note\">No C probe in this run.</p>\n");
        return Ok(());
    }
    out.push_str(
        "<p>The control syscalls a leader's Sender makes per second while a cluster runs at a moderate fixed load \
         (the model's C, subtracted from S), beside its data syscalls in the same window.</p>\n<div class=\"charts\">\n",
    );
    let svg = charts::c_chart(&r.c_probe)?;
    let _ = writeln!(out, "<figure>{svg}<figcaption>C per idle strategy</figcaption></figure>\n</div>");
    Ok(())
}

/// A table with its heading (`tag`, e.g. `h3`) and note.
fn table_html(t: &Table, tag: &str) -> String {
    let mut out = format!("<{tag}>{}</{tag}>\n", escape(&t.title));
    if !t.note.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&t.note));
    }
    out.push_str("<div class=\"scroll\"><table>\n<thead><tr>");
    for (h, numeric) in t.headers.iter().zip(&t.numeric) {
        let _ = write!(out, "<th{}>{}</th>", class(*numeric), escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let regime = matches!(cell.as_str(), "safe" | "knee" | "saturated") && t.headers[i] == "regime";
            if regime {
                let _ = write!(out, "<td class=\"regime-{cell}\">{cell}</td>");
            } else if t.headers[i] == "target" && cell != "-" {
                let verdict = if cell == "met" { "met" } else { "miss" };
                let _ = write!(out, "<td class=\"{verdict}\">{}</td>", escape(cell));
            } else if t.headers[i] == "flags" && !cell.is_empty() {
                let _ = write!(out, "<td class=\"flag\">{}</td>", escape(cell));
            } else if t.headers[i] == "hgrm" {
                // A relative link to the point's file beside the page (the full name is in summary.md).
                let _ = write!(out, "<td><a href=\"{}\" title=\"{0}\">.hgrm</a></td>", escape(cell));
            } else {
                let _ = write!(out, "<td{}>{}</td>", class(t.numeric[i]), escape(cell));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// A two-column key/value table (the first cell of each row is the key).
fn kv_table(t: &Table) -> String {
    let mut out = String::from("<table class=\"kv\"><tbody>\n");
    for row in &t.rows {
        let value = row.get(1).map_or("", String::as_str);
        let _ = writeln!(out, "<tr><th>{}</th><td class=\"wrap\">{}</td></tr>", escape(&row[0]), escape(value));
    }
    out.push_str("</tbody></table>\n");
    out
}

fn class(numeric: bool) -> &'static str {
    if numeric {
        " class=\"num\""
    } else {
        ""
    }
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "not measured".into()
    } else {
        items.join(", ")
    }
}

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }
}
