//! The sweep report writer on a synthetic run: made-up configurations and histograms filled with generated
//! latencies, written to a temporary directory and read back the way a person or a tool would.
//!
//! Set `QC_KEEP=1` to keep the directories (their paths are printed) and look at `report.html`.

use std::collections::BTreeSet;
use std::path::Path;

use hdrhistogram::Histogram;
use quorumcast_bench::budget::{SeedInputs, SenderBudget, SenderWindow};
use quorumcast_bench::hiccup::{CoreHiccups, Hiccups, HostTaskRan, HostTasksRan};
use quorumcast_bench::report::{
    link_latest, write_point_histograms, write_report, AgentDutyCycles, CProbe, ConfigResult, CoreLateness,
    CycleQuantiles, Host, OtherCpu, Percentiles, PointHistograms, PointResult, ReportError, SProbe, SProbeEntry,
    SweepReport, WakeLateness, C_ALONE, C_SHARED, LATEST, NS_PER_US,
};
use serde_json::Value;

use quorumcast_testkit::ScratchDir;

mod support;
use support::SWEEP_CONFIG_KEYS;

/// A small deterministic generator (xorshift64*), so the synthetic run is the same every time.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential variate with the given mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }
}

/// Latencies in ns shaped like docs/MODEL.md's regimes: a fixed pipeline time, queueing that grows as
/// rho / (1 - rho), and a plateau at the bounded window's drain time once saturated.
fn latency_histograms(rng: &mut Rng, rho: f64, samples: usize) -> (Histogram<u64>, Histogram<u64>) {
    let mut intended = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let mut service = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let plateau_ns = 220_000_000.0;
    for _ in 0..samples {
        let pipeline = 150_000.0 + rng.exp(8_000.0);
        let queue = if rho < 1.0 {
            rng.exp(20_000.0 * rho / (1.0 - rho)).min(plateau_ns)
        } else {
            plateau_ns * (0.97 + 0.03 * rng.next_f64())
        };
        let offer_delay = if rho < 1.0 { rng.exp(2_000.0) } else { rng.exp(40_000_000.0) };
        intended.record((pipeline + queue + offer_delay) as u64).unwrap();
        service.record((pipeline + queue) as u64).unwrap();
    }
    (intended, service)
}

/// One synthetic configuration with its points and histograms.
fn config(
    mtu: u32,
    idle: &str,
    msg: u32,
    c: f64,
    rhos: &[f64],
    rng: &mut Rng,
    hist: &mut Vec<PointHistograms>,
) -> ConfigResult {
    let (s, d) = (if mtu > 4000 { 110_000.0 } else { 230_000.0 }, 2);
    let framed = (msg + 32).div_ceil(32) * 32;
    let m_pkt = (mtu - 40) / framed;
    let mu_predicted = (s - c) / f64::from(d) * f64::from(m_pkt);
    let mut cfg = ConfigResult {
        mtu,
        idle: idle.into(),
        msg,
        send_mode: "classic".into(),
        control: "separate".into(),
        s,
        s_before: s * 0.95,
        s_after: s * 1.05,
        s_slices: vec![s * 0.95, s * 0.98, s * 1.05],
        c,
        c_probe: c * 1.5,
        mu_predicted_probe_c: (s - c * 1.5) / f64::from(d) * f64::from(m_pkt),
        sender_share: 0.9,
        d,
        m_pkt,
        mu_predicted,
        mu_measured: mu_predicted * (0.88 + 0.2 * rng.next_f64()),
        bottleneck: if mtu > 4000 { "append".into() } else { "sender".into() },
        sender_budget: None,
        points: Vec::new(),
        agents: Vec::new(),
        latency_source: None,
    };
    // A Sender busy all but 2% of the windows (1 s), its datagrams full.
    let datagrams = cfg.mu_measured / f64::from(m_pkt) * f64::from(d);
    let window = SenderWindow {
        seconds: 1.0,
        data_ns: 0.8e9,
        control_ns: 0.05e9,
        own_ns: 0.13e9,
        idle_ns: 0.01e9,
        between_ns: 0.01e9,
        data_calls: datagrams,
        control_calls: c,
        cycles: datagrams / 16.0,
        datagrams,
        appended: cfg.mu_measured * 0.98,
        committed: cfg.mu_measured,
    };
    let seed = SeedInputs { s, c, d, m_pkt: f64::from(m_pkt) };
    cfg.sender_budget = SenderBudget::of(&window, &seed, 25.0);
    for &rho in rhos {
        let stem = cfg.point_stem(rho);
        let (intended, service) = latency_histograms(rng, rho, 4000);
        let lambda = rho * cfg.mu_measured;
        let achieved = lambda.min(cfg.mu_measured * 0.99);
        let mut point = PointResult::from_histograms(&stem, rho, lambda, achieved, &intended, &service, NS_PER_US);
        point.wake_probe = Some(wake_probe(25.0, 60.0, 900.0));
        point.other_cpu = Some(OtherCpu::from_ticks((rng.next_f64() * 4.0) as u64, 1, 1.5, 100));
        point.assess();
        cfg.points.push(point);
        hist.push((stem, intended, service));
    }
    cfg
}

/// A wake probe's figures: how late a 1 ms sleeper woke, p99, p99.9 and max (us).
fn wake_probe(p99: f64, p999: f64, max: f64) -> WakeLateness {
    let late_us = Percentiles { p50: 4.0, p90: p99 / 2.0, p99, p999, max, mean: 6.0, stddev: 9.0 };
    let core = |core, late_us| CoreLateness { core, realtime: true, wakeups: 725, late_us };
    WakeLateness {
        interval_us: 1000.0,
        wakeups: 1450,
        recorded: 1462,
        late_us,
        reference: "every core".into(),
        any_core_us: Some(Percentiles { p99: p99 / 3.0, ..late_us }),
        cores: vec![core(0, Percentiles { p99: p99 / 2.0, ..late_us }), core(1, late_us)],
    }
}

/// A synthetic sweep of the given configurations (MTU, idle, msg) and rho points.
fn synthetic(grid: &[(u32, &str, u32)], rhos: &[f64]) -> (SweepReport, Vec<PointHistograms>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut hist = Vec::new();
    let c_probe = vec![
        CProbe {
            idle: "noop".into(),
            layout: C_ALONE.into(),
            c_per_s: 21_500.0,
            data_syscalls_per_s: 96_000.0,
            loads: vec![],
        },
        CProbe {
            idle: "sleep-ns:1000".into(),
            layout: C_ALONE.into(),
            c_per_s: 9_800.0,
            data_syscalls_per_s: 101_000.0,
            loads: vec![],
        },
        CProbe {
            idle: "backoff".into(),
            layout: C_ALONE.into(),
            c_per_s: 12_300.0,
            data_syscalls_per_s: 99_500.0,
            loads: vec![],
        },
        CProbe {
            idle: "noop".into(),
            layout: C_SHARED.into(),
            c_per_s: 73_000.0,
            data_syscalls_per_s: 90_000.0,
            loads: vec![],
        },
    ];
    let c_of = |idle: &str| c_probe.iter().find(|p| p.idle == idle && p.layout == C_ALONE).map_or(0.0, |p| p.c_per_s);
    let configs =
        grid.iter().map(|&(mtu, idle, msg)| config(mtu, idle, msg, c_of(idle), rhos, &mut rng, &mut hist)).collect();
    let report = SweepReport {
        profile: "quick".into(),
        timestamp: "2026-12-01T10:20:30Z".into(),
        host: Host { cpu: "AMD EPYC 7R13 Processor <synthetic>".into(), cores: 2, kernel: "6.18.0-test".into() },
        layout: "core 0: client + leader append; core 1: leader sender + followers (shared)".into(),
        s_probe: SProbe {
            d: 2,
            sizes: vec![
                SProbeEntry { datagram: 1408, send_mode: "classic".into(), s: 230_000.0 },
                SProbeEntry { datagram: 8192, send_mode: "classic".into(), s: 110_000.0 },
                SProbeEntry { datagram: 1408, send_mode: "gso".into(), s: 1_150_000.0 },
            ],
        },
        c_probe,
        configs,
        hiccups: Some(Hiccups {
            seconds: 2.0,
            cores: vec![CoreHiccups {
                core: Some(0),
                gaps_per_s: 150.0,
                lost_share: 0.02,
                long_gaps_per_s: 2.5,
                long_gap_share: 0.008,
                past_long_share: 0.005,
                longest_ns: 9_250_000,
            }],
            steal_share: 0.004,
        }),
    };
    (report, hist)
}

/// One parsed `.hgrm` file: its rows (value, percentile, total count) and the footer's numbers.
struct Hgrm {
    rows: Vec<(f64, f64, u64)>,
    mean: f64,
    max: f64,
    total: u64,
}

/// Parses HdrHistogram's percentile-distribution text the way the standard plotter reads it: a header
/// line, a blank line, whitespace-separated rows, and `#[...]` footer lines.
fn parse_hgrm(text: &str) -> Hgrm {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("       Value     Percentile TotalCount 1/(1-Percentile)"));
    assert_eq!(lines.next(), Some(""));
    let (mut rows, mut footer) = (Vec::new(), Vec::new());
    for line in lines {
        if let Some(rest) = line.strip_prefix("#[") {
            footer.push(rest.trim_end_matches(']').to_string());
            continue;
        }
        assert!(footer.is_empty(), "a row after the footer: {line}");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() == 4 || cols.len() == 3, "bad row {line:?}");
        let percentile: f64 = cols[1].parse().unwrap();
        if cols.len() == 4 {
            let inverse: f64 = cols[3].parse().unwrap();
            assert!((inverse - 1.0 / (1.0 - percentile)).abs() < 0.01 * inverse.max(1.0), "{line}");
        } else {
            assert_eq!(percentile, 1.0, "only the last row lacks 1/(1-Percentile): {line}");
        }
        rows.push((cols[0].parse().unwrap(), percentile, cols[2].parse().unwrap()));
    }
    assert_eq!(footer.len(), 3, "{footer:?}");
    let field = |line: &str, key: &str| -> String {
        let part = line.split(',').find(|p| p.trim_start().starts_with(key)).unwrap();
        part.split('=').nth(1).unwrap().trim().to_string()
    };
    Hgrm {
        rows,
        mean: field(&footer[0], "Mean").parse().unwrap(),
        max: field(&footer[1], "Max").parse().unwrap(),
        total: field(&footer[1], "Total count").parse().unwrap(),
    }
}

/// Asserts that two JSON values are equal, numbers to 1e-12 relative (JSON text need not round-trip the
/// last bit of a float).
fn assert_json_close(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= 1e-12 * x.abs().max(y.abs()), "{at}: {x} != {y}");
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths differ");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_json_close(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(keys(a), keys(b), "{at}: keys differ");
            for (k, v) in x {
                assert_json_close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

fn assert_has_keys(v: &Value, expected: &[&str], what: &str) {
    let present = keys(v);
    for k in expected {
        assert!(present.contains(*k), "{what} lacks key {k:?}; it has {present:?}");
    }
}

const PERCENTILE_KEYS: &[&str] = &["p50", "p90", "p99", "p999", "max", "mean", "stddev"];

#[test]
fn synthetic_run_writes_a_complete_report() {
    let scratch = ScratchDir::new("report-writer");
    let (report, histograms) = synthetic(&[(1408, "noop", 128), (8192, "noop", 128)], &[0.3, 0.8, 1.2]);
    let dir = scratch.join("20261201-102030");
    write_report(&dir, &report, &histograms).unwrap();
    link_latest(&dir).unwrap();

    // summary.json parses back into the same report, and carries every key of the schema.
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let parsed: SweepReport = serde_json::from_str(&text).unwrap();
    let raw: Value = serde_json::from_str(&text).unwrap();
    assert_json_close(&serde_json::to_value(&parsed).unwrap(), &serde_json::to_value(&report).unwrap(), "$");
    assert_json_close(&raw, &serde_json::to_value(&report).unwrap(), "$");
    assert_has_keys(&raw, &["host", "s_probe", "configs", "layout", "c_probe", "profile"], "the report");
    assert_has_keys(&raw["host"], &["cpu", "cores", "kernel"], "host");
    assert_has_keys(&raw["s_probe"], &["d", "sizes"], "s_probe");
    assert_has_keys(&raw["s_probe"]["sizes"][0], &["datagram", "send_mode", "s"], "an S entry");
    assert_has_keys(&raw["c_probe"][0], &["idle", "layout", "c_per_s", "data_syscalls_per_s"], "a C entry");
    // A report from before the C probe's shared layout reads as the consensus agent alone.
    let mut old = raw["c_probe"][0].clone();
    old.as_object_mut().unwrap().remove("layout");
    assert_eq!(serde_json::from_value::<CProbe>(old).unwrap().layout, C_ALONE);
    assert_has_keys(&raw["hiccups"], &["seconds", "cores", "steal_share"], "hiccups");
    let core_keys = ["core", "lost_share", "long_gaps_per_s", "past_long_share", "longest_ns"];
    assert_has_keys(&raw["hiccups"]["cores"][0], &core_keys, "a core's hiccups");
    let configs = raw["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2);
    for c in configs {
        assert_has_keys(c, SWEEP_CONFIG_KEYS, "a config");
        let points = c["points"].as_array().unwrap();
        assert_eq!(points.len(), 3);
        for p in points {
            let point_keys = ["rho", "lambda", "achieved", "latency_us", "service_latency_us", "hgrm"];
            assert_has_keys(p, &point_keys, "a point");
            assert_has_keys(&p["latency_us"], PERCENTILE_KEYS, "latency_us");
            assert_has_keys(&p["service_latency_us"], PERCENTILE_KEYS, "service_latency_us");
            assert!(p["hgrm"].as_str().unwrap().ends_with(".hgrm"));
            assert_has_keys(p, &["past_1ms_share", "steal_share", "wake_probe", "other_cpu", "saturated"], "a point");
            assert_has_keys(&p["wake_probe"], &["interval_us", "wakeups", "recorded", "late_us"], "wake_probe");
            assert_has_keys(&p["wake_probe"]["late_us"], PERCENTILE_KEYS, "wake_probe.late_us");
            assert_has_keys(&p["other_cpu"], &["seconds", "ticks", "irq_ticks", "core_share", "flagged"], "other_cpu");
            // The tail target is judged at rho <= 0.5 only; the synthetic tails are short, so they meet it.
            let rho = p["rho"].as_f64().unwrap();
            assert_eq!(p.get("tail_target").is_some(), rho <= 0.5, "{p}");
            if rho <= 0.5 {
                assert_has_keys(&p["tail_target"], &["limit_us", "met"], "tail_target");
                assert_eq!(p["tail_target"]["met"], true, "{p}");
            }
            // The synthetic rho 1.2 point carries 0.99 mu of its 1.2 mu: saturated; the others are not.
            assert_eq!(p["saturated"], rho > 1.0, "{p}");
        }
    }
    // A point's share past 1 ms is its intended-time histogram's, counted here independently.
    for (p, (_, intended, _)) in report.configs.iter().flat_map(|c| &c.points).zip(&histograms) {
        let past = intended.iter_recorded().filter(|v| v.value_iterated_to() >= 1_000_000).map(|v| v.count_at_value());
        let expected = past.sum::<u64>() as f64 / intended.len() as f64;
        let share = p.past_1ms_share.unwrap();
        assert!((share - expected).abs() < 1e-9, "past 1 ms {share} against {expected} counted");
    }
    let shares = report.configs.iter().flat_map(|c| &c.points).map(|p| p.past_1ms_share.unwrap());
    assert!(shares.clone().any(|s| s > 0.0) && shares.clone().any(|s| s < 1.0), "a point on each side of 1 ms");

    // Every point's .hgrm files exist, parse, are monotonic, and agree with the summary.
    let mut files = 0;
    for (p, (stem, intended, _)) in report.configs.iter().flat_map(|c| &c.points).zip(&histograms) {
        assert_eq!(p.hgrm, PointResult::hgrm_path(stem));
        for (file, summary, recorded) in
            [(&p.hgrm, &p.latency_us, intended.len()), (&p.service_hgrm, &p.service_latency_us, 4000)]
        {
            let h = parse_hgrm(&std::fs::read_to_string(dir.join(file)).unwrap());
            files += 1;
            assert!(h.rows.len() > 20, "{file}: only {} rows", h.rows.len());
            for pair in h.rows.windows(2) {
                assert!(pair[0].0 <= pair[1].0, "{file}: values go down: {pair:?}");
                assert!(pair[0].1 < pair[1].1, "{file}: percentiles do not climb: {pair:?}");
                assert!(pair[0].2 <= pair[1].2, "{file}: counts go down: {pair:?}");
            }
            let last = h.rows.last().unwrap();
            assert_eq!(h.rows[0].1, 0.0);
            assert_eq!(last.1, 1.0);
            assert_eq!(last.2, h.total, "{file}: the last row's count is not the footer's total");
            assert_eq!(h.total, recorded, "{file}");
            assert!(
                (h.max - summary.max).abs() <= 0.001 * summary.max.max(1.0),
                "{file}: max {} vs {}",
                h.max,
                summary.max
            );
            assert!(
                (h.mean - summary.mean).abs() <= 0.001 * summary.mean.max(1.0),
                "{file}: mean {} vs {}",
                h.mean,
                summary.mean
            );
            assert!((last.0 - summary.max).abs() <= 0.001 * summary.max, "{file}");
        }
    }
    assert_eq!(files, 12);

    // summary.md has the latency table header and exactly one row per point.
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let header_lines = md
        .lines()
        .filter(|l| l.split('|').nth(1).map(str::trim) == Some("rho") && l.contains("p99.9 us") && l.contains("hgrm"))
        .count();
    assert_eq!(header_lines, 2, "{md}");
    assert!(md.contains("host stalls") && md.contains("longest 9.25 ms"), "{md}");
    // Beside each latency table, the tails against the host's own stalls, a row per point.
    let tail_headers = md
        .lines()
        .filter(|l| l.split('|').nth(1).map(str::trim) == Some("rho") && l.contains("probe p99.9 us"))
        .count();
    assert_eq!(tail_headers, 2, "{md}");
    assert!(md.contains("## Tails against the host: MTU 1408"), "{md}");
    assert!(md.contains("saturated (rho 0.99)"), "{md}");
    assert!(md.contains("Points: 6 points: 0 flagged") && md.contains("2 saturated"), "{md}");
    let capacity_header =
        |l: &&str| l.starts_with('|') && l.contains(" MTU ") && l.contains("mu predicted") && l.contains("mu measured");
    assert_eq!(md.lines().filter(capacity_header).count(), 1, "{md}");
    // The Sender's budget: a row per configuration, its split, the check and the seed's terms.
    assert!(md.contains("## Sender budget: the measured split against the seed model"), "{md}");
    let budget_rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|') && l.contains("data calls ")).collect();
    assert_eq!(budget_rows.len(), report.configs.len(), "{md}");
    assert!(budget_rows.iter().any(|l| l.contains("| yes ")), "a Sender-bound row within 5%: {md}");
    assert!(budget_rows.iter().any(|l| l.contains("not compared (append)")), "{md}");
    for p in report.configs.iter().flat_map(|c| &c.points) {
        let rows = md.lines().filter(|l| l.starts_with('|') && l.contains(&p.hgrm)).count();
        assert_eq!(rows, 1, "{} rows name {}", rows, p.hgrm);
    }

    // report.html: a chart per configuration, one for mu, one for C; nothing fetched from elsewhere.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 2 + 1 + 1, "charts in report.html");
    assert_self_contained(&html);
    assert!(html.contains("(S − C) / D × M_pkt"));
    assert!(html.contains("Sender budget: the measured split against the seed model"));
    assert!(html.contains("&lt;synthetic&gt;"), "the host's text is escaped");

    // Each configuration's latency chart is also a file of its own, named for the configuration.
    let charts: Vec<String> = std::fs::read_dir(dir.join("charts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(charts.len(), report.configs.len(), "{charts:?}");
    let first = &report.configs[0];
    let name = format!("mtu{}-{}-msg{}-classic-separate.svg", first.mtu, first.idle.replace(':', "_"), first.msg);
    let svg = std::fs::read_to_string(dir.join("charts").join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{name}");

    // latest points at the report, relatively, and moves to a newer one.
    let latest = scratch.join(LATEST);
    assert_eq!(std::fs::read_link(&latest).unwrap(), Path::new("20261201-102030"));
    assert_eq!(std::fs::canonicalize(&latest).unwrap(), std::fs::canonicalize(&dir).unwrap());
    let newer = scratch.join("20261201-113000");
    std::fs::create_dir_all(&newer).unwrap();
    link_latest(&newer).unwrap();
    assert_eq!(std::fs::read_link(&latest).unwrap(), Path::new("20261201-113000"));
    let leftovers = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"))
        .count();
    assert_eq!(leftovers, 0, "no staging link left behind");
}

/// Asserts that the page loads nothing: no script, no stylesheet link, no http(s) reference other than
/// the SVG namespace names (which browsers never fetch).
fn assert_self_contained(html: &str) {
    let without_namespaces = html
        .replace("xmlns=\"http://www.w3.org/2000/svg\"", "")
        .replace("xmlns:xlink=\"http://www.w3.org/1999/xlink\"", "");
    assert!(!without_namespaces.contains("http://"), "an http reference");
    assert!(!without_namespaces.contains("https://"), "an https reference");
    for tag in ["<script", "<link", "<img", "@import", "<iframe"] {
        assert!(!html.contains(tag), "report.html contains {tag}");
    }
}

/// One agent thread's duty cycles, its longest `max_ns` (a bucket's upper bound).
fn agent(name: &str, max_ns: u64) -> AgentDutyCycles {
    AgentDutyCycles {
        name: name.into(),
        cycles: 10_000,
        duty_cycle_ns: CycleQuantiles { p50: 1024, p99: 4096, p999: 65_536, max: max_ns },
    }
}

#[test]
fn tails_against_the_host_are_judged_tabled_and_drawn() {
    let scratch = ScratchDir::new("report-writer-tails");
    let (mut report, histograms) = synthetic(&[(1408, "noop", 128)], &[0.1, 0.3, 0.5, 0.9]);
    let points = &mut report.configs[0].points;
    // rho 0.1: a tail far past the limit while the host stayed under 300 us and the Sender ran a cycle of
    // more than 2 ms: the Sender is named.
    points[0].latency_us.p99 = 5_000.0;
    points[0].wake_probe = Some(wake_probe(40.0, 120.0, 300.0));
    points[0].agents = vec![agent("node 0 consensus", 262_144), agent("node 0 sender+receiver", 4_194_304)];
    // rho 0.3: the same tail, but the host itself stalled 9 ms: no stage is named.
    points[1].latency_us.p99 = 5_000.0;
    points[1].wake_probe = Some(wake_probe(40.0, 3_000.0, 9_000.0));
    points[1].agents = points[0].agents.clone();
    // The host's tasks ran 1.2 ms of it: still short of the Sender's cycle (from 2.1 ms), which stays named.
    let kdamond = HostTaskRan { task: "kdamond.0".into(), ran_ms: 1.0, turns: 1 };
    points[0].host_tasks = Some(HostTasksRan { ran_ms: 1.2, turns: 9, largest: vec![kdamond.clone()] });
    // rho 0.3, once more: the host's tasks ran 11 ms, as long as any cycle: the host, not a stage, again.
    points[1].host_tasks = Some(HostTasksRan { ran_ms: 11.0, turns: 20, largest: vec![kdamond] });
    // rho 0.5: met, but other processes took 40% of a core.
    points[2].other_cpu = Some(OtherCpu::from_ticks(60, 2, 1.5, 100));
    // rho 0.9: carried half its load.
    points[3].achieved = points[3].lambda / 2.0;
    for p in points.iter_mut() {
        p.assess();
    }
    let dir = scratch.join("run");
    write_report(&dir, &report, &histograms).unwrap();

    let raw: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let json_points = raw["configs"][0]["points"].as_array().unwrap();
    assert_eq!(json_points[0]["tail_target"]["met"], false);
    assert_eq!(json_points[0]["tail_target"]["late_stage"]["name"], "node 0 sender+receiver");
    assert_eq!(json_points[0]["tail_target"]["host_max_us"], 300.0);
    assert_eq!(json_points[1]["tail_target"]["met"], false);
    assert!(json_points[1]["tail_target"].get("late_stage").is_none(), "{}", json_points[1]);
    assert_eq!(json_points[2]["tail_target"]["met"], true);
    assert_eq!(json_points[2]["other_cpu"]["flagged"], true);
    assert!(json_points[3].get("tail_target").is_none(), "rho 0.9 is not judged");
    assert_eq!(json_points[3]["saturated"], true);
    let flags = report.flags();
    assert_eq!((flags.points, flags.host_busy, flags.saturated), (4, 1, 1));
    assert_eq!((flags.target_met, flags.target_missed), (1, 2));

    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let row = |rho: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {rho} ")) && !l.contains("hgrm/"))
            .unwrap_or_else(|| panic!("no tail row for rho {rho}: {md}"))
            .to_string()
    };
    assert!(row("0.10").contains("missed: node 0 sender+receiver late (cycles up to 4.2 ms"), "{}", row("0.10"));
    assert!(row("0.10").contains("the host's longest stall 300 us, its tasks 1.2 ms"), "{}", row("0.10"));
    assert!(row("0.10").contains("| 1.2 (kdamond.0 1.0/1) "), "{}", row("0.10"));
    assert!(
        row("0.30")
            .contains("missed: no stage's cycle outlasted what the host took (longest stall 9 ms, its tasks 11 ms)"),
        "{}",
        row("0.30")
    );
    assert!(row("0.50").contains("| met ") && row("0.50").contains("host busy"), "{}", row("0.50"));
    assert!(row("0.90").contains("saturated (rho 0.45)"), "{}", row("0.90"));
    assert!(md.contains("4 points: 1 flagged") && md.contains("1 met, 2 missed"), "{md}");

    // The chart draws the probe beside the latency, crosses for the saturated point, a ring for the busy one.
    let svg = std::fs::read_to_string(dir.join("charts/mtu1408-noop-msg128-classic-separate.svg")).unwrap();
    for label in ["host probe p99", "host probe p99.9", "saturated: at achieved rho", "host busy (other CPU)"] {
        assert!(svg.contains(label), "the chart lacks {label:?}");
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("class=\"miss\"") && html.contains("class=\"flag\""), "report.html marks misses and flags");
    assert!(html.contains("1 saturated · 1 host busy · tail target 1 of 3 met"), "the chart's caption counts them");
    assert_self_contained(&html);
}

#[test]
fn a_larger_run_draws_every_chart_group() {
    let scratch = ScratchDir::new("report-writer-large");
    let grid = [
        (1408, "noop", 128),
        (8192, "noop", 128),
        (1408, "noop", 512),
        (8192, "noop", 512),
        (1408, "sleep-ns:1000", 128),
        (8192, "sleep-ns:1000", 128),
    ];
    let (report, histograms) = synthetic(&grid, &[0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.1, 1.3]);
    let dir = scratch.join("run");
    // Half of the points written as they finish, the rest handed over at the end.
    let (early, late) = histograms.split_at(histograms.len() / 2);
    for (stem, a, b) in early {
        write_point_histograms(&dir, stem, a, b).unwrap();
    }
    write_report(&dir, &report, late).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    // 6 latency charts, 2 mu groups (noop, sleep-ns:1000), 1 C chart.
    assert_eq!(html.matches("<svg").count(), 6 + 2 + 1);
    assert_self_contained(&html);
    for regime in ["safe", "knee", "saturated"] {
        let label = format!(">\n{regime}\n</text>");
        assert_eq!(html.matches(&label).count(), 6, "the {regime} region is labelled on each latency chart");
    }
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert_eq!(md.lines().filter(|l| l.starts_with('|') && l.contains("hgrm/")).count(), 60);
}

#[test]
fn missing_or_unsafe_point_files_are_refused() {
    let scratch = ScratchDir::new("report-writer-errors");
    let (report, histograms) = synthetic(&[(1408, "noop", 128)], &[0.5, 0.9]);
    let dir = scratch.join("run");
    let err = write_report(&dir, &report, &histograms[..1]).unwrap_err();
    assert!(
        matches!(&err, ReportError::MissingHistogram { hgrm } if hgrm == &report.configs[0].points[1].hgrm),
        "{err}"
    );
    assert!(!dir.join("summary.json").exists(), "no summary for an incomplete report");

    let mut escaping = report.clone();
    escaping.configs[0].points[0].hgrm = "../outside.hgrm".into();
    let err = write_report(&dir, &escaping, &histograms).unwrap_err();
    assert!(matches!(err, ReportError::UnsafePath { .. }), "{err}");

    let (stem, a, b) = &histograms[0];
    assert!(matches!(write_point_histograms(&dir, "../x", a, b), Err(ReportError::UnsafePath { .. })));
    write_point_histograms(&dir, stem, a, b).unwrap();
    assert!(link_latest(Path::new("/")).is_err());
}
