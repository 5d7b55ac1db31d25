//! `qc-client --udp-rtt`: ping-pongs with an echo socket (a blocking thread here) and writes its figures;
//! without an echo it reports every datagram lost and fails. No timing is asserted.

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumcast_testkit::ScratchDir;
use serde_json::Value;

const QC_CLIENT: &str = env!("CARGO_BIN_EXE_qc-client");

#[test]
fn udp_rtt_ping_pongs_with_an_echo_and_writes_its_percentiles() {
    let scratch = ScratchDir::new("qc-client-udp-rtt");
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    echo.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let addr = echo.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echoing = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buffer) {
                    echo.send_to(&buffer[..n], from).unwrap();
                }
            }
        })
    };
    let json = scratch.join("rtt.json");
    let output = Command::new(QC_CLIENT)
        .args(["--udp-rtt", &addr.to_string(), "--samples", "200", "--warmup", "20", "--idle", "backoff"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    echoing.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("udp_rtt samples 200 lost 0") && stdout.contains("rtt_us p50"), "{stdout}");
    let figures: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((figures["mode"].as_str(), figures["samples"].as_u64()), (Some("udp-rtt"), Some(200)));
    assert_eq!((figures["lost"].as_u64(), figures["msg_size"].as_u64()), (Some(0), Some(128)));
    let rtt = &figures["rtt_us"];
    for key in ["p50", "p90", "p99", "p999", "max", "mean", "stddev"] {
        assert!(rtt[key].as_f64().is_some(), "rtt_us lacks {key}: {rtt}");
    }
    assert!(rtt["p50"].as_f64() <= rtt["max"].as_f64() && rtt["p50"].as_f64().unwrap() > 0.0, "{rtt}");
}

#[test]
fn udp_rtt_without_an_echo_counts_its_datagrams_lost_and_fails() {
    // A bound socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let output = Command::new(QC_CLIENT)
        .args(["--udp-rtt", &addr.to_string(), "--samples", "2", "--idle", "sleep-ns:100000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("lost 2"), "{stdout}");
}

#[test]
fn a_load_needs_offer_and_udp_rtt_takes_no_cluster() {
    let no_offer = Command::new(QC_CLIENT).args(["--member", "0=127.0.0.1:1"]).output().unwrap();
    assert_eq!(no_offer.status.code(), Some(2));
    let both = Command::new(QC_CLIENT).args(["--udp-rtt", "127.0.0.1:1", "--offer", "5"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
}
