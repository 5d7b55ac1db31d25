//! The host-stall figures from made-up inputs: gaps tallied from a sequence of clock reads, `/proc/stat`,
//! `/proc/<pid>/stat` and `schedstat` lines parsed, a late wake-up's corrected recording, thread waits and
//! host tasks summed by name; and the probes run for real for a moment (the spinning threads, the wake
//! probe's start and stop).

use super::*;

#[test]
fn gaps_under_the_threshold_are_the_loop_and_longer_ones_are_lost_time() {
    // Reads every 100 ns, then a 50 us gap, a 3 ms gap, and on to 10 ms.
    let mut reads = vec![0u64];
    let mut t = 0;
    while t < 10_000_000 {
        t += match t {
            1_000_000 => 50_000,
            5_000_000 => 3_000_000,
            _ => 100,
        };
        reads.push(t);
    }
    let mut it = reads.into_iter();
    let (tally, elapsed) = spin(|| it.next().unwrap_or(u64::MAX), 10_000_000);
    assert_eq!(elapsed, 10_000_000);
    assert_eq!((tally.gaps, tally.lost_ns), (2, 3_050_000));
    assert_eq!((tally.long_gaps, tally.past_long_ns, tally.longest_ns), (1, 2_000_000, 3_000_000));
    let core = tally.summarize(Some(1), elapsed);
    assert!((core.gaps_per_s - 200.0).abs() < 1e-9);
    assert!((core.lost_share - 0.305).abs() < 1e-9);
    assert!((core.long_gap_share - 0.3).abs() < 1e-9);
    assert!((core.long_gaps_per_s - 100.0).abs() < 1e-9);
    assert!((core.past_long_share - 0.2).abs() < 1e-9);
    let calm = CoreHiccups { past_long_share: 0.01, ..core };
    let h = Hiccups { seconds: 0.01, cores: vec![calm, core], steal_share: 0.0 };
    assert!((h.past_long_share() - 0.2).abs() < 1e-9, "the worst core");
}

#[test]
fn proc_stat_gives_total_and_steal() {
    let text = "cpu  3901788 709552 1903219 1686519 48565 0 232666 29902 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
    let t = CpuTimes::parse(text).unwrap();
    assert_eq!(t.steal, 29902);
    assert_eq!(t.total, 3901788 + 709552 + 1903219 + 1686519 + 48565 + 232666 + 29902);
    // Busy: user, nice, system, irq, softirq; idle, iowait and steal are not.
    // irq is 0 in this line, softirq 232666.
    assert_eq!(t.busy, 3901788 + 709552 + 1903219 + 232666);
    assert_eq!(t.irq, 232666);
    let later = CpuTimes { total: t.total + 1000, steal: t.steal + 25, busy: t.busy + 300, ..t };
    assert!((later.since(&t).steal_share() - 0.025).abs() < 1e-12);
    assert_eq!((later.since(&t).busy, later.since(&t).irq), (300, 0));
    // An old kernel's shorter line has no steal; garbage has no line.
    assert_eq!(CpuTimes::parse("cpu  1 2 3 4\n").map(|t| (t.total, t.steal, t.busy)), Some((10, 0, 6)));
    assert_eq!(CpuTimes::parse("cpu  1 2 3\n"), None);
    assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
    assert_eq!(CpuTimes::default().steal_share(), 0.0);
}

#[test]
fn proc_self_stat_gives_own_and_children_times() {
    // A command name with a space and parentheses: the fields count from the last `)`.
    let line = "4242 (qc (x) y) R 1 4242 4242 0 -1 4194304 100 0 0 0 1234 567 89 10 20 0 9 0 123 456 789";
    let t = ProcessTimes::parse(line).unwrap();
    assert_eq!((t.own, t.children, t.total()), (1234 + 567, 89 + 10, 1234 + 567 + 89 + 10));
    let earlier = ProcessTimes { own: 1000, children: 99 };
    assert_eq!(t.since(&earlier), ProcessTimes { own: 801, children: 0 });
    // A negative child time reads 0; a cut line, a word for a number or no parenthesis is no figure.
    let negative = "1 (a) S 0 0 0 0 0 0 0 0 0 0 5 6 -7 8";
    assert_eq!(ProcessTimes::parse(negative), Some(ProcessTimes { own: 11, children: 8 }));
    assert_eq!(ProcessTimes::parse("1 (a) S 0 0 0 0 0 0 0 0 0 0 5 6"), None);
    assert_eq!(ProcessTimes::parse("1 (a) S 0 0 0 0 0 0 0 0 0 0 five 6 7 8"), None);
    assert_eq!(ProcessTimes::parse("no parenthesis 1 2 3"), None);
    assert_eq!(ProcessTimes::parse(""), None);
}

#[test]
fn other_ticks_are_the_busy_ticks_not_this_processes() {
    let before = HostCpu {
        cpu: CpuTimes { total: 1000, steal: 0, busy: 400, irq: 10 },
        process: ProcessTimes { own: 300, children: 5 },
    };
    let after = HostCpu {
        cpu: CpuTimes { total: 1200, steal: 4, busy: 580, irq: 14 },
        process: ProcessTimes { own: 450, children: 15 },
    };
    let d = after.since(&before);
    assert_eq!(d.other_ticks(), 180 - 150 - 10);
    // Sampling noise may make this process look busier than the machine: that reads 0, not a wrap.
    let noisy = HostCpu { process: ProcessTimes { own: 600, children: 5 }, ..after };
    assert_eq!(noisy.since(&before).other_ticks(), 0);
    assert!(clock_ticks_per_s() > 0);
}

#[test]
fn a_late_wake_up_counts_the_intervals_it_swallowed() {
    let mut r = WakeRecord::new();
    // On time, 30 us late, early (a signal), then 5 ms late: 1 ms asked, 6 ms slept.
    for slept in [WAKE_INTERVAL_NS, WAKE_INTERVAL_NS + 30_000, 400_000, 6 * WAKE_INTERVAL_NS] {
        r.record_sleep(slept);
    }
    assert_eq!(r.wakeups, 4);
    // The 5 ms one is recorded as 5, 4, 3, 2 and 1 ms: 3 + 5 values in all.
    assert_eq!(r.late_ns.len(), 8);
    assert_eq!(r.late_ns.count_between(0, 0), 2, "on time and early are 0 late");
    for ms in 1..=5u64 {
        assert_eq!(r.late_ns.count_at(ms * WAKE_INTERVAL_NS), 1, "{ms} ms");
    }
    assert!(r.late_ns.equivalent(r.late_ns.max(), 5 * WAKE_INTERVAL_NS));
    // Beyond the histogram's range: clamped, not lost.
    r.record_sleep(u64::MAX);
    assert_eq!(r.wakeups, 5);
    assert!(r.late_ns.equivalent(r.late_ns.max(), MAX_LATENESS_NS));
}

#[test]
fn thread_waits_are_summed_by_name_from_the_earlier_reading() {
    assert_eq!(TaskSched::parse("123 456 7\n"), Some((123, 456, 7)));
    assert_eq!(TaskSched::parse("123 456"), None);
    let reading = |entries: &[(u32, &str, u64)]| {
        ThreadWaits(entries.iter().map(|&(tid, name, ns)| (tid, task(name, 0, ns, 0))).collect())
    };
    let before = reading(&[(1, "sender+receiver", 1_000_000), (2, "sweep-harness", 5_000_000)]);
    let after = reading(&[
        (1, "sender+receiver", 12_000_000),
        (2, "sweep-harness", 5_400_000),
        (3, "sender+receiver", 2_000_000),
        (4, "wake-probe-1", 9_000_000),
    ]);
    let waits = after.since(&before, 0.5, &["wake-probe"]);
    assert_eq!(waits, vec![ThreadWait { thread: "sender+receiver".into(), threads: 2, waited_ms: 13.0 }]);
    assert_eq!(after.since(&before, 0.0, &[]).len(), 3);
    // This process's own threads can be read where the kernel keeps the statistics.
    if let Some(now) = ThreadWaits::read() {
        assert!(!now.0.is_empty());
    }
}

fn task(name: &str, ran_ns: u64, waited_ns: u64, turns: u64) -> TaskSched {
    TaskSched { name: name.into(), ran_ns, waited_ns, turns }
}

#[test]
fn a_task_s_name_and_policy_are_read_past_a_name_with_spaces_and_parentheses() {
    let fields: Vec<String> = (3..=52).map(|f| if f == 41 { "5".into() } else { f.to_string() }).collect();
    let stat = format!("105 (kd (a) mond.0) {}\n", fields.join(" "));
    assert_eq!(name_and_policy(&stat), Some(("kd (a) mond.0", 5)));
    assert_eq!(name_and_policy("105 (x) S 1"), None);
    // This process's own line: a normal policy (0) unless the tests run under another.
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(name_and_policy(&own).is_some(), "{own}");
}

#[test]
fn host_tasks_are_summed_by_name_and_the_largest_named() {
    let reading = |entries: &[(u32, &str, u64, u64)]| {
        HostTasks(entries.iter().map(|&(tid, n, ns, t)| (tid, task(n, ns, 0, t))).collect())
    };
    let before = reading(&[(10, "kdamond.0", 5_000_000, 100), (11, "sshd", 1_000_000, 10)]);
    let after = reading(&[
        (10, "kdamond.0", 16_000_000, 111),
        (11, "sshd", 1_200_000, 14),
        (12, "kworker/1:2-events", 300_000, 30),
        (13, "kworker/1:2-events", 400_000, 20),
    ]);
    let ran = after.since(&before);
    assert!((ran.ran_ms - 11.9).abs() < 1e-9, "{}", ran.ran_ms);
    assert_eq!(ran.turns, 11 + 4 + 50);
    // sshd's 0.2 ms is counted but not named; the two kworkers of one name are one entry (0.7 ms).
    let named: Vec<(&str, u64)> = ran.largest.iter().map(|t| (t.task.as_str(), t.turns)).collect();
    assert_eq!(named, [("kdamond.0", 11), ("kworker/1:2-events", 50)]);
    assert_eq!(ran.describe(), "11.9 ms in 65 turns (kdamond.0 11.0 ms in 11, kworker/1:2-events 0.7 ms in 50)");
    // The machine's other tasks can be read where the kernel keeps the statistics; none is this
    // process's.
    if let Some(now) = HostTasks::read() {
        let mine = ThreadWaits::read().map(|w| w.0.into_keys().collect::<Vec<_>>()).unwrap_or_default();
        assert!(mine.iter().all(|tid| !now.0.contains_key(tid)));
    }
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert_eq!(parent(&own), Some(std::os::unix::process::parent_id()));
    assert!(processes().unwrap().any(|(pid, _, _)| pid == std::process::id()));
}

#[test]
fn the_wake_probe_stops_and_hands_back_its_record() {
    let probe = WakeProbe::start().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let records = probe.stop();
    // One pinned thread per core of the process, each on its own core.
    let cores: Vec<usize> = records.cores.iter().map(|c| c.core).collect();
    assert_eq!(cores, process_cpu_list());
    // However late the host woke them, each woke at least once (start waits for every loop, which
    // checks for the stop after each sleep), and every recorded value is a wake-up or one it swallowed.
    for record in std::iter::once(&records.any_core).chain(records.cores.iter().map(|c| &c.record)) {
        assert!(record.wakeups >= 1);
        assert!(record.late_ns.len() >= record.wakeups);
    }
    // The host's stalls are read from the pinned threads only when all ran at real-time priority.
    let read = records.host_stalls();
    if records.every_core_realtime() {
        assert_eq!(read.len(), records.cores.len());
    } else {
        assert!(read.len() == 1 && std::ptr::eq(read[0], &records.any_core));
    }
    // Dropped without stop: the thread still ends (the test would hang on a leak only at exit).
    drop(WakeProbe::start().unwrap());
}

#[test]
fn the_probe_runs_one_thread_per_core_and_accounts_for_its_time() {
    // One thread: the tests beside it may be spinning on the other core.
    let h = probe(&[None], Duration::from_millis(20));
    assert_eq!(h.cores.len(), 1);
    for core in &h.cores {
        // Whatever the host did, a thread cannot have lost more than all of its time.
        assert!((0.0..=1.0).contains(&core.lost_share), "{core:?}");
        assert!(core.long_gap_share <= core.lost_share);
    }
    assert!((0.0..=1.0).contains(&h.steal_share));
    assert!(h.describe().contains("core ?: "), "{}", h.describe());
}
