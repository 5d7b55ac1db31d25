//! The sweep's client-process mode end to end with the `tiny` profile: mu measured in-process, then each
//! utilisation point's load from a spawned `qc-client` (idling with `backoff`, so nothing busy-spins), and
//! the report says its latency is the client's round trip. Seconds.

use std::path::PathBuf;

use quorumcast_bench::sweep::cluster::Layout;
use quorumcast_bench::sweep::profile::Profile;
use quorumcast_bench::sweep::remote::ClientProcess;
use quorumcast_bench::sweep::{run, SweepOptions};
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use serde_json::Value;

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("qc-test-{}-sweep-client", std::process::id()))
}

#[test]
fn the_tiny_sweep_takes_its_points_from_a_client_process() {
    let out = out_dir();
    let _ = std::fs::remove_dir_all(&out);
    let client = ClientProcess {
        binary: PathBuf::from(env!("CARGO_BIN_EXE_qc-client")),
        idle: Some(IdleStrategyConfig::default()),
        linger: std::time::Duration::ZERO,
        wait: false,
        core: None,
        sched_idle: false,
    };
    let options = SweepOptions {
        profile: Profile::tiny(),
        out: out.clone(),
        layout: Layout::unpinned(),
        progress: false,
        // The detail lines too (the client points have their own), as `--verbose` prints them.
        verbose: true,
        client: Some(client),
    };
    let outcome = run(&options).expect("the tiny sweep runs");
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(outcome.dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["profile"], "tiny-client");
    assert!(summary["layout"].as_str().unwrap().contains("qc-client process"), "{}", summary["layout"]);
    let config = &summary["configs"][0];
    assert!(config["mu_measured"].as_f64().unwrap() > 0.0, "mu is still measured in-process");
    let source = config["latency_source"].as_str().expect("the report says where latency comes from");
    assert!(source.starts_with("client round trip"), "{source}");
    let points = config["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for (point, rho) in points.iter().zip([0.2, 0.5]) {
        assert_eq!(point["rho"].as_f64(), Some(rho));
        assert!(point["achieved"].as_f64().unwrap() > 0.0, "{point}");
        for key in ["latency_us", "service_latency_us"] {
            let p = &point[key];
            let (p50, max) = (p["p50"].as_f64().unwrap(), p["max"].as_f64().unwrap());
            assert!(p50 > 0.0 && p50 <= max, "{key}: {p}");
        }
        for file in ["hgrm", "service_hgrm"] {
            let path = outcome.dir.join(point[file].as_str().unwrap());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(text.contains("Percentile"), "{} is no percentile distribution", path.display());
        }
        // The host is watched during a client's point too: the wake probe, the other processes' CPU (the
        // client, a reaped child, counts as this process's), and the tail target at rho <= 0.5.
        assert!(point["wake_probe"]["wakeups"].as_u64().unwrap() > 0, "{point}");
        assert!(point["other_cpu"]["core_share"].as_f64().unwrap() >= 0.0, "{point}");
        assert!(point["tail_target"]["met"].is_boolean() && point["saturated"].is_boolean(), "{point}");
        let stem = point["hgrm"].as_str().unwrap().trim_start_matches("hgrm/").trim_end_matches(".hgrm");
        let json = outcome.dir.join("client").join(format!("{stem}.json"));
        let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
        let client: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(client["committed"], client["messages"], "{client}");
        assert_eq!(client["reported_twice"].as_u64(), Some(0), "{client}");
    }
    let markdown = std::fs::read_to_string(outcome.dir.join("summary.md")).unwrap();
    assert!(markdown.contains("client round trip"), "{markdown}");
    std::fs::remove_dir_all(&out).unwrap();
}
