//! The report's tables as plain data, rendered by both `summary.md` and `report.html`, so that the two
//! always show the same numbers.

use super::schema::{
    ConfigResult, PointResult, SweepReport, WakeLateness, OTHER_CPU_FLAG_SHARE, OTHER_CPU_MIN_TICKS, SATURATED_BELOW,
    TAIL_TARGET_MAX_RHO, TAIL_TARGET_P50_FACTOR,
};
use crate::model::regime;

/// One table: a title, an optional one-line note, column headers, and rows of already formatted cells.
/// Invariant: every row has as many cells as there are headers.
pub(crate) struct Table {
    /// The table's heading.
    pub title: String,
    /// A sentence under the heading, or empty.
    pub note: String,
    /// Column headers.
    pub headers: Vec<&'static str>,
    /// Whether each column holds numbers (right-aligned).
    pub numeric: Vec<bool>,
    /// The rows, one cell per header.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(title: impl Into<String>, note: impl Into<String>, columns: &[(&'static str, bool)]) -> Self {
        Self {
            title: title.into(),
            note: note.into(),
            headers: columns.iter().map(|c| c.0).collect(),
            numeric: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.headers.len());
        self.rows.push(row);
    }
}

/// The header of every per-configuration latency table (the first cells of its header row).
pub(crate) const LATENCY_COLUMNS: &[(&str, bool)] = &[
    ("rho", true),
    ("regime", false),
    ("lambda/s", true),
    ("achieved/s", true),
    ("p50 us", true),
    ("p90 us", true),
    ("p99 us", true),
    ("p99.9 us", true),
    ("max us", true),
    ("mean us", true),
    ("stddev us", true),
    ("svc p50 us", true),
    ("svc p99 us", true),
    ("past 1 ms %", true),
    ("steal %", true),
    ("flags", false),
    ("hgrm", false),
];

/// The header of every per-configuration table of tails against the host's stalls.
pub(crate) const TAIL_COLUMNS: &[(&str, bool)] = &[
    ("rho", true),
    ("achieved rho", true),
    ("p50 us", true),
    ("p99 us", true),
    ("p99.9 us", true),
    ("probe p99 us", true),
    ("probe p99.9 us", true),
    ("probe max us", true),
    ("probe p99 per thread us", false),
    ("limit us", true),
    ("target", false),
    ("other CPU % core", true),
    ("host's tasks ran, ms", false),
    ("waited for a core, ms", false),
    ("flags", false),
];

/// The host and the core layout, as key/value rows.
pub(crate) fn host_table(r: &SweepReport) -> Table {
    let mut t = Table::new("Host", "", &[("what", false), ("value", false)]);
    t.push(vec!["cpu".into(), r.host.cpu.clone()]);
    t.push(vec!["cores".into(), r.host.cores.to_string()]);
    t.push(vec!["kernel".into(), r.host.kernel.clone()]);
    t.push(vec!["profile".into(), r.profile.clone()]);
    t.push(vec!["started (UTC)".into(), r.timestamp.clone()]);
    t.push(vec!["core layout".into(), r.layout.clone()]);
    if let Some(h) = &r.hiccups {
        t.push(vec!["host stalls".into(), h.describe()]);
    }
    t
}

/// S per datagram size and send mode.
pub(crate) fn s_table(r: &SweepReport) -> Table {
    let note = format!("Single-thread send calls per second to D = {} destinations, alternated.", r.s_probe.d);
    let mut t = Table::new(
        "S probe",
        note,
        &[("datagram B", true), ("send mode", false), ("S /s", true), ("us per call", true)],
    );
    for e in &r.s_probe.sizes {
        let per_call = if e.s > 0.0 { format!("{:.2}", 1e6 / e.s) } else { "-".into() };
        t.push(vec![e.datagram.to_string(), e.send_mode.clone(), rate(e.s), per_call]);
    }
    t
}

/// C per idle strategy and paced load.
pub(crate) fn c_table(r: &SweepReport) -> Table {
    let note = "Per layout and strategy, at paced loads (rho of the model's capacity for MTU 1408, 128 B, classic): \
                consensus-alone, the leader's consensus agent alone on a core, running its own duty cycle with the \
                strategy under test (the C the predictions take); shared, the leader's consensus agent, Sender and \
                Receiver on one thread with that strategy. C = commit frames x D; control syscalls include the \
                Sender's polls of empty control sockets (idle polls, apart).";
    let columns = [
        ("layout", false),
        ("idle", false),
        ("rho", true),
        ("offered /s", true),
        ("committed /s", true),
        ("commit frames /s", true),
        ("C /s", true),
        ("control syscalls /s", true),
        ("idle polls /s", true),
        ("consensus cycles /s", true),
    ];
    let mut t = Table::new("C probe", note, &columns);
    for c in &r.c_probe {
        if c.loads.is_empty() {
            let blank = || "-".to_string();
            t.push(vec![
                c.layout.clone(),
                c.idle.clone(),
                blank(),
                blank(),
                blank(),
                blank(),
                rate(c.c_per_s),
                blank(),
                blank(),
                blank(),
            ]);
        }
        for l in &c.loads {
            t.push(vec![
                c.layout.clone(),
                c.idle.clone(),
                format!("{:.1}", l.rho),
                rate(l.offered_msgs_per_s),
                rate(l.committed_msgs_per_s),
                rate(l.commit_frames_per_s),
                rate(l.commit_frames_per_s * r.s_probe.d as f64),
                rate(l.control_syscalls_per_s),
                rate(l.idle_polls_per_s),
                rate(l.consensus_cycles_per_s),
            ]);
        }
    }
    t
}

/// The model's capacity against the measured one, a row per configuration.
pub(crate) fn capacity_table(r: &SweepReport) -> Table {
    let note = "mu predicted = (S - C) / D x M_pkt, with S the mean of the S slices probed between the mu \
                windows with the cluster paused (lowest and highest under S band) and C the leader Sender's control syscalls/s during the saturated run (less its polls on cycles that \
                sent nothing); with probe C: the same with the C probe's value (moderate load). mu measured = sustained committed messages/s under saturating load, over the windows. S used: the Sender's \
                data syscalls/s in that run as a share of S.";
    let mut t = Table::new(
        "Capacity: model against measurement",
        note,
        &[
            ("MTU", true),
            ("msg B", true),
            ("idle", false),
            ("send mode", false),
            ("control", false),
            ("S /s", true),
            ("S band", true),
            ("C /s", true),
            ("D", true),
            ("M_pkt", true),
            ("mu predicted", true),
            ("mu measured", true),
            ("error", true),
            ("S used", true),
            ("probe C /s", true),
            ("with probe C", true),
            ("bottleneck", false),
        ],
    );
    for c in &r.configs {
        let error = c.mu_error_percent().map_or_else(|| "-".into(), |e| format!("{e:+.1}%"));
        t.push(vec![
            c.mtu.to_string(),
            c.msg.to_string(),
            c.idle.clone(),
            c.send_mode.clone(),
            c.control.clone(),
            rate(c.s),
            {
                let (lowest, highest) = c.s_band();
                format!("{} - {}", rate(lowest), rate(highest))
            },
            rate(c.c),
            c.d.to_string(),
            c.m_pkt.to_string(),
            rate(c.mu_predicted),
            rate(c.mu_measured),
            error,
            format!("{:.0}%", c.sender_share * 100.0),
            rate(c.c_probe),
            rate(c.mu_predicted_probe_c),
            c.bottleneck.clone(),
        ]);
    }
    t
}

/// The leader Sender's time split over the mu windows, the capacity that budget gives, and the seed
/// model's error by term, a row per configuration (see [`crate::budget`]).
pub(crate) fn budget_table(r: &SweepReport) -> Table {
    let note = "The leader Sender's wall time over the mu windows, in data calls, control calls (sends, and polls \
                on cycles that sent: what C counts), its own code, idle (cycles that sent nothing) and between \
                cycles; per datagram (each follower's copy); budget mu = 1e9 / (data + control + own ns per \
                datagram) / D x msgs per datagram, checked against mu measured within 5% where the Sender was the \
                bottleneck. The seed model (S - C) / D x M_pkt beside it, its error as factors: data calls (a call \
                under load against the probe's 1/S), control calls, own code, fill (M_pkt against msgs per \
                datagram), idle. Timing: the share of the Sender's time its clock reads took.";
    let mut t = Table::new(
        "Sender budget: the measured split against the seed model",
        note,
        &[
            ("MTU", true),
            ("msg B", true),
            ("idle", false),
            ("send mode", false),
            ("control", false),
            ("data %", true),
            ("control %", true),
            ("own %", true),
            ("idle %", true),
            ("between %", true),
            ("data ns/dgram", true),
            ("ns/call", true),
            ("probe ns", true),
            ("control ns/dgram", true),
            ("own ns/dgram", true),
            ("msgs/dgram", true),
            ("mu budget", true),
            ("mu measured", true),
            ("budget error", true),
            ("within 5%", false),
            ("seed mu", true),
            ("seed error", true),
            ("seed error by term", false),
            ("mainly", false),
            ("timing %", true),
        ],
    );
    for c in &r.configs {
        let Some(b) = &c.sender_budget else { continue };
        let percent = |x: f64| format!("{:.1}", 100.0 * x);
        let ns = |x: f64| format!("{x:.0}");
        let check = match (c.sender_bound(), b.within_tolerance) {
            (true, true) => "yes".to_string(),
            (true, false) => "NO".to_string(),
            (false, _) => format!("not compared ({})", c.bottleneck.split(':').next().unwrap_or("?")),
        };
        t.push(vec![
            c.mtu.to_string(),
            c.msg.to_string(),
            c.idle.clone(),
            c.send_mode.clone(),
            c.control.clone(),
            percent(b.data_share),
            percent(b.control_share),
            percent(b.own_share),
            percent(b.idle_share),
            percent(b.between_share),
            ns(b.data_ns_per_datagram),
            ns(b.data_ns_per_call),
            ns(b.probe_ns_per_datagram),
            ns(b.control_ns_per_datagram),
            ns(b.own_ns_per_datagram),
            format!("{:.2}", b.messages_per_datagram),
            rate(b.mu_budget),
            rate(c.mu_measured),
            format!("{:+.1}%", 100.0 * b.budget_error),
            check,
            rate(b.mu_seed),
            format!("{:+.1}%", 100.0 * b.seed_error),
            b.terms_text(),
            b.seed_main_term.clone(),
            format!("{:.2}", 100.0 * b.overhead.share),
        ]);
    }
    t
}

/// One configuration's latency points, a row per rho.
pub(crate) fn latency_table(c: &ConfigResult) -> Table {
    let note = match &c.latency_source {
        None => format!(
            "mu measured {} msg/s; latency from intended send time, svc = from actual offer time.",
            rate(c.mu_measured)
        ),
        Some(source) => format!(
            "mu measured {} msg/s (in-process); latency: {source}, from intended send time, svc = from actual \
             offer time; achieved = the client's committed msg/s.",
            rate(c.mu_measured)
        ),
    };
    let mut t = Table::new(format!("Latency: {}", c.label()), note, LATENCY_COLUMNS);
    for p in &c.points {
        let (l, s) = (&p.latency_us, &p.service_latency_us);
        t.push(vec![
            format!("{:.2}", p.rho),
            regime(p.rho).to_string(),
            rate(p.lambda),
            rate(p.achieved),
            micros(l.p50),
            micros(l.p90),
            micros(l.p99),
            micros(l.p999),
            micros(l.max),
            micros(l.mean),
            micros(l.stddev),
            micros(s.p50),
            micros(s.p99),
            p.past_1ms_share.map_or_else(|| "-".into(), |s| format!("{:.2}", 100.0 * s)),
            format!("{:.2}", 100.0 * p.steal_share),
            flags(c, p),
            p.hgrm.clone(),
        ]);
    }
    t
}

/// A point's flags: `saturated (rho 0.62)` when it carried under [`SATURATED_BELOW`] of its load (at
/// its achieved rho), `host busy` when other processes took more than [`OTHER_CPU_FLAG_SHARE`] of a
/// core; empty when neither.
pub(crate) fn flags(c: &ConfigResult, p: &PointResult) -> String {
    let mut flags = Vec::new();
    if p.saturated {
        flags.push(format!("saturated (rho {:.2})", c.achieved_rho(p)));
    }
    if p.host_busy() {
        flags.push("host busy".to_string());
    }
    flags.join(", ")
}

/// One configuration's points beside the host's own stalls over the same windows, a row per rho: the
/// latency tail, the wake probe's, the tail target and the CPU other processes took.
pub(crate) fn tail_table(c: &ConfigResult) -> Table {
    let note = format!(
        "probe = how late threads sleeping 1 ms at a time woke during the point (clock_nanosleep, recorded with the \
         expected-interval correction, as jHiccup does): the host's own stalls over the same window. One thread is pinned \
         to each core at real-time priority, so that only what no thread of this process could get past keeps it waiting \
         (the hypervisor, interrupts, kernel work that does not yield) and a stall of a busy agent's core is seen; the \
         probe columns are the worst core's, percentile by percentile (where real-time priority was refused, the free \
         thread's alone, as jHiccup runs it: it wakes on the idle core and waits for this process's threads too). Per \
         thread: c<core> for the pinned ones, any for the free one. Target at rho <= \
         {TAIL_TARGET_MAX_RHO}: latency p99 <= limit = probe p99 + {TAIL_TARGET_P50_FACTOR} x latency p50; a miss names the \
         agent thread whose longest duty cycle was surely longer than the host's longest stall plus all its tasks' run \
         time (what the host can have taken from one cycle). other CPU = busy ticks of \
         /proc/stat not this process's nor its children's, as a share of one core (flagged past {:.0}%, from {OTHER_CPU_MIN_TICKS} \
         ticks of 10 ms up; irq and softirq work counts, which may be this process's own traffic on some kernels). \
         Host's tasks ran = the CPU time of every task not of this process nor its children (kernel threads such as \
         kdamond, kworker, ksoftirqd, and other processes) during the point, from /proc/*/task/*/schedstat, in ms, the \
         two largest by name with ms/turns: time the real-time probe, which preempts them, does not see. \
         Saturated: achieved < {:.0}% of offered; its achieved rho is achieved / mu measured. Waited for a core = the time \
         the sweep's threads stood runnable while other threads held their cores during the point \
         (/proc/self/task/*/schedstat; from 0.5 ms): a late stage whose thread waited was kept off its core.",
        100.0 * OTHER_CPU_FLAG_SHARE,
        100.0 * SATURATED_BELOW
    );
    let mut t = Table::new(format!("Tails against the host: {}", c.label()), note, TAIL_COLUMNS);
    let dash = || "-".to_string();
    for p in &c.points {
        let (l, probe) = (&p.latency_us, p.wake_probe.as_ref().map(|w| &w.late_us));
        t.push(vec![
            format!("{:.2}", p.rho),
            format!("{:.2}", c.achieved_rho(p)),
            micros(l.p50),
            micros(l.p99),
            micros(l.p999),
            probe.map_or_else(dash, |w| micros(w.p99)),
            probe.map_or_else(dash, |w| micros(w.p999)),
            probe.map_or_else(dash, |w| micros(w.max)),
            p.wake_probe.as_ref().map_or_else(dash, probe_threads),
            p.tail_target.as_ref().map_or_else(dash, |t| micros(t.limit_us)),
            p.tail_target.as_ref().map_or_else(dash, |t| t.verdict()),
            p.other_cpu.map_or_else(dash, |o| format!("{:.1} ({})", 100.0 * o.core_share, o.ticks_text())),
            p.host_tasks.as_ref().map_or_else(dash, host_tasks),
            thread_waits(p),
            flags(c, p),
        ]);
    }
    t
}

/// The threads of the sweep that stood runnable while others held their cores during the point (at
/// most three): `sender+receiver 11.2, sweep-harness 0.6`; `-` for none.
fn thread_waits(p: &PointResult) -> String {
    if p.thread_waits.is_empty() {
        return "-".into();
    }
    let each: Vec<String> = p.thread_waits.iter().take(3).map(|w| format!("{} {:.1}", w.thread, w.waited_ms)).collect();
    each.join(", ")
}

/// The host's tasks over a point, the two that ran most named: `11.9 (kdamond.0 11.0/11, kworker/1:2 0.7/50)`
/// (milliseconds / turns).
fn host_tasks(t: &crate::hiccup::HostTasksRan) -> String {
    let each: Vec<String> =
        t.largest.iter().take(2).map(|n| format!("{} {:.1}/{}", n.task, n.ran_ms, n.turns)).collect();
    if each.is_empty() {
        format!("{:.1}", t.ran_ms)
    } else {
        format!("{:.1} ({})", t.ran_ms, each.join(", "))
    }
}

/// Each wake-probe thread's p99: `c0 36.2, c1 44.1, any 58.2` (a pinned thread not at real-time priority
/// is marked `*`).
fn probe_threads(w: &WakeLateness) -> String {
    let cores =
        w.cores.iter().map(|c| format!("c{}{} {}", c.core, if c.realtime { "" } else { "*" }, micros(c.late_us.p99)));
    let any = w.any_core_us.iter().map(|a| format!("any {}", micros(a.p99)));
    cores.chain(any).collect::<Vec<_>>().join(", ")
}

/// Every table of the report, in reading order.
pub(crate) fn all(r: &SweepReport) -> Vec<Table> {
    let mut tables = vec![host_table(r), s_table(r), c_table(r), capacity_table(r), budget_table(r)];
    tables.extend(r.configs.iter().flat_map(|c| [latency_table(c), tail_table(c)]));
    tables
}

/// A rate as a whole number with thousands separators: `1,234,567`.
pub(crate) fn rate(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let whole = x.round().abs() as u64;
    let digits = whole.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if x.round() < 0.0 {
        out.push('-');
    }
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A latency in microseconds with the decimals that matter at its size: `3.25`, `152.4`, `173,015`.
pub(crate) fn micros(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 1000.0 {
        rate(x)
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_group_thousands() {
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(999.4), "999");
        assert_eq!(rate(1000.0), "1,000");
        assert_eq!(rate(1_234_567.0), "1,234,567");
        assert_eq!(rate(-12_345.0), "-12,345");
        assert_eq!(rate(f64::NAN), "-");
    }

    #[test]
    fn micros_keep_useful_decimals() {
        assert_eq!(micros(3.254), "3.25");
        assert_eq!(micros(152.44), "152.4");
        assert_eq!(micros(173_015.2), "173,015");
    }
}
