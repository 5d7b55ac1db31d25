//! The sweep end to end with the `tiny` profile (one configuration, a few thousand messages, two rho
//! points) into a temporary directory: every file of the report is there and `summary.json` has the
//! schema's keys and sane numbers, and the console's closing table has its row.

use std::path::PathBuf;

use quorumcast_bench::sweep::cluster::Layout;
use quorumcast_bench::sweep::profile::Profile;
use quorumcast_bench::sweep::{run, SweepOptions};
use serde_json::Value;

mod support;
use support::SWEEP_CONFIG_KEYS;

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("qc-test-{}-sweep-tiny", std::process::id()))
}

#[test]
fn the_tiny_sweep_writes_a_whole_report() {
    let out = out_dir();
    let _ = std::fs::remove_dir_all(&out);
    let options = SweepOptions {
        profile: Profile::tiny(),
        out: out.clone(),
        layout: Layout::unpinned(),
        progress: false,
        verbose: false,
        client: None,
    };
    let outcome = run(&options).expect("the tiny sweep runs");
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert!(outcome.dir.starts_with(&out));
    let latest = std::fs::read_link(out.join("latest")).expect("latest is a link");
    assert_eq!(out.join(latest), outcome.dir);

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(outcome.dir.join("summary.json")).unwrap()).unwrap();
    for key in ["profile", "timestamp", "host", "layout", "s_probe", "c_probe", "configs", "hiccups"] {
        assert!(summary.get(key).is_some(), "summary.json lacks {key}");
    }
    // The host's stalls: one spinning thread where nothing is pinned, its lost share a share.
    let hiccups = &summary["hiccups"];
    assert_eq!(hiccups["cores"].as_array().map(Vec::len), Some(1), "{hiccups}");
    let lost = hiccups["cores"][0]["lost_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&lost), "{hiccups}");
    assert_eq!(summary["profile"], "tiny");
    assert_eq!(summary["s_probe"]["d"], 2);
    assert!(summary["s_probe"]["sizes"][0]["s"].as_f64().unwrap() > 0.0);
    // C per strategy (the profile's, and noop, sleep-ns and backoff to compare), at three paced loads.
    let c_probe = summary["c_probe"].as_array().unwrap();
    let idles: Vec<&str> = c_probe.iter().map(|c| c["idle"].as_str().unwrap()).collect();
    assert!(idles.contains(&"backoff:10,5,1us,1ms") && idles.contains(&"noop"), "{idles:?}");
    // Each strategy in both layouts: the consensus agent alone, and on one thread with the Sender.
    for layout in ["consensus-alone", "shared"] {
        let of_layout: Vec<&str> =
            c_probe.iter().filter(|c| c["layout"] == layout).map(|c| c["idle"].as_str().unwrap()).collect();
        assert_eq!(of_layout.len() * 2, c_probe.len(), "{layout}: {of_layout:?}");
    }
    for c in c_probe {
        let loads = c["loads"].as_array().unwrap();
        assert_eq!(loads.len(), 3, "{c}");
        for key in
            ["rho", "commit_frames_per_s", "control_syscalls_per_s", "idle_polls_per_s", "consensus_cycles_per_s"]
        {
            assert!(loads.iter().all(|l| l[key].as_f64().is_some()), "c_probe load lacks {key}: {c}");
        }
        assert!(loads.iter().all(|l| l["consensus_cycles_per_s"].as_f64().unwrap() > 0.0), "{c}");
    }
    let configs = summary["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 1);
    let config = &configs[0];
    for &key in SWEEP_CONFIG_KEYS {
        assert!(config.get(key).is_some(), "config lacks {key}");
    }
    assert_eq!(
        (config["mtu"].as_u64(), config["msg"].as_u64(), config["m_pkt"].as_u64()),
        (Some(1408), Some(128), Some(8))
    );
    assert!(config["mu_measured"].as_f64().unwrap() > 0.0);
    assert!(config["mu_predicted"].as_f64().unwrap() > 0.0);
    // S was probed in a slice before each mu window and after the last (the tiny profile has two), with the
    // cluster paused, and the prediction took their mean.
    let slices: Vec<f64> = config["s_slices"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(slices.len(), 3, "{slices:?}");
    assert!(slices.iter().all(|&s| s > 0.0), "{slices:?}");
    let s = config["s"].as_f64().unwrap();
    assert!((s - slices.iter().sum::<f64>() / 3.0).abs() < 1e-6 * s, "{s} {slices:?}");
    assert_eq!((config["s_before"].as_f64(), config["s_after"].as_f64()), (Some(slices[0]), Some(slices[2])));
    // Each agent thread's duty-cycle distribution, per configuration (at the point nearest rho 0.5).
    let agents = config["agents"].as_array().unwrap();
    assert!(agents.iter().any(|a| a["name"].as_str().unwrap().starts_with("node 0 ")), "{agents:?}");
    for a in agents {
        let q = &a["duty_cycle_ns"];
        let (p50, p99, max) = (q["p50"].as_u64().unwrap(), q["p99"].as_u64().unwrap(), q["max"].as_u64().unwrap());
        assert!(p50 <= p99 && p99 <= max, "{a}");
    }
    let stage = config["bottleneck"].as_str().unwrap();
    assert!(["load", "append", "sender", "receiver"].iter().any(|s| stage.starts_with(s)), "{stage}");
    // The mu cluster's Sender split its time: the budget is there, its shares and times not negative, and
    // the seed model's error is the product of its terms.
    let budget = &config["sender_budget"];
    for key in ["data_share", "control_share", "own_share", "idle_share", "between_share", "data_ns_per_datagram"] {
        assert!(budget[key].as_f64().is_some_and(|x| x >= 0.0), "sender_budget.{key}: {budget}");
    }
    assert!(budget["data_share"].as_f64().unwrap() > 0.0, "the Sender sent data in calls it timed: {budget}");
    assert!(budget["mu_budget"].as_f64().unwrap() > 0.0, "{budget}");
    let terms = &budget["seed_terms"];
    let factor = |k: &str| 1.0 + terms[k].as_f64().unwrap();
    let product = factor("data_calls")
        * (factor("control_calls") + terms["own_code"].as_f64().unwrap())
        * factor("fill")
        * factor("idle");
    let seed_error = budget["seed_error"].as_f64().unwrap();
    assert!((product - 1.0 - seed_error).abs() < 1e-6 * (1.0 + seed_error.abs()), "{budget}");

    let points = config["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for (point, rho) in points.iter().zip([0.2, 0.5]) {
        assert_eq!(point["rho"].as_f64(), Some(rho));
        assert!(point["achieved"].as_f64().unwrap() > 0.0);
        for key in ["latency_us", "service_latency_us"] {
            let p = &point[key];
            let (p50, max) = (p["p50"].as_f64().unwrap(), p["max"].as_f64().unwrap());
            assert!(p50 > 0.0 && p50 <= max, "{key}: {p}");
        }
        let past = point["past_1ms_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&past), "{point}");
        // The wake probe ran during the point (a 300 ms point has room for many 1 ms sleeps) and the
        // tail target is judged at both points (rho <= 0.5); whether it is met depends on the host.
        let probe = &point["wake_probe"];
        assert!(probe["wakeups"].as_u64().unwrap() > 0, "{point}");
        assert!(probe["recorded"].as_u64() >= probe["wakeups"].as_u64(), "{point}");
        let late = &probe["late_us"];
        assert!(late["p99"].as_f64() <= late["p999"].as_f64() && late["p999"].as_f64() <= late["max"].as_f64());
        let target = &point["tail_target"];
        let limit = late["p99"].as_f64().unwrap() + 3.0 * point["latency_us"]["p50"].as_f64().unwrap();
        assert!((target["limit_us"].as_f64().unwrap() - limit).abs() < 1e-9, "{point}");
        assert_eq!(target["met"].as_bool(), Some(point["latency_us"]["p99"].as_f64().unwrap() <= limit), "{point}");
        // Other processes' CPU over the point, as a share of a core, and the saturation mark.
        let other = &point["other_cpu"];
        assert!(other["core_share"].as_f64().unwrap() >= 0.0 && other["seconds"].as_f64().unwrap() > 0.0, "{point}");
        assert!(other["flagged"].is_boolean() && point["saturated"].is_boolean(), "{point}");
        // From the intended time is never shorter than from the actual offer.
        assert!(point["latency_us"]["max"].as_f64() >= point["service_latency_us"]["max"].as_f64());
        for file in ["hgrm", "service_hgrm"] {
            let path = outcome.dir.join(point[file].as_str().unwrap());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(text.contains("Percentile"), "{} is no percentile distribution", path.display());
        }
    }
    // The console's closing table: a row for the configuration with its latency at rho 0.5, then the totals.
    let table = quorumcast_bench::report::console_table(&outcome.report);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..5], ["1408", "128", "backoff:10,5,1us,1ms", "classic", "separate"], "{table}");
    assert_eq!(row[8], "0.50", "{table}");
    assert!(lines[2].starts_with("2 points: "), "{table}");
    assert!(outcome.dir.join("report.html").is_file());
    let md = std::fs::read_to_string(outcome.dir.join("summary.md")).unwrap();
    assert!(md.contains("## Tails against the host: ") && md.contains("Points: 2 points: "), "{md}");
    std::fs::remove_dir_all(&out).unwrap();
}
