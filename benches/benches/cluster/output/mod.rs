//! What the bench prints at the end and the summary's rows: the raft table beside docs/BASELINE.md's
//! figures, the saturation detail, the five-member and C tables, the layouts' descriptions, and one JSON
//! row per variant and per C run.

use quorumcast_bench::bench::target_dir;
use serde_json::{json, Value};

use crate::c_runs::CResult;
use crate::durable::{print_durable, ratio_to_memory};
use crate::variant_run::{ModelCheck, VariantResult};
use crate::{rate, Settings, Storage, Variant, C_RATE, MESSAGE, PIPELINE_WINDOW};

pub fn print_tables(results: &[VariantResult], c_results: &[CResult], clock_read_ns: f64) {
    println!();
    println!(
        "## Raft table (layout of docs/BASELINE.md): 3 nodes (5 where said) in one process, 128 B messages, committed = applied on all"
    );
    println!();
    println!("| Engine | Variant / completion level | Serial p50 | Serial p99 | Pipeline (window 256) sustained, p50 / p99 | Saturation sustained, median (min / max of 3 windows) | Allocation/entry |");
    println!("|---|---|---|---|---|---|---|");
    for r in results {
        let s = &r.saturation;
        let min = s.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = s.rates.iter().copied().fold(0.0, f64::max);
        println!(
            "| quorumcast | UDP loopback · MTU {} · {} · commit {}{}{} · applied | {:.1}us | {:.1}us | {} op/s, {:.0}us / {:.0}us | {} ({} / {}) | {:.1} B |",
            r.variant.mtu,
            r.variant.mode.as_str(),
            r.variant.control(),
            match r.variant.storage {
                Storage::Memory => String::new(),
                storage => format!(" · log on disk, sync {}", storage.as_str()),
            },
            if r.variant.is_five() { " · 5 members" } else { "" },
            r.serial.0,
            r.serial.1,
            rate(r.pipeline.2),
            r.pipeline.0,
            r.pipeline.1,
            rate(s.median()),
            rate(min),
            rate(max),
            s.alloc_bytes_per_entry,
        );
    }
    let other = "TC.Tier Core.Net (another system: .NET 8, i5-12400, 12 cores, Windows 11; docs/BASELINE.md)";
    println!("| {other} | InProcess · applied | 90us | — | 606k op/s (800 in flight) | 1.18M (308k / 1.60M, round p10/p90) | ~2.0KB |");
    println!("| {other} | TCP · applied | 250us | — | 142k op/s (800 in flight) | 397k (155k / 497k, round p10/p90) | ~12.5KB |");
    println!("| {other} | TCP · committed | 220us | — | 147k op/s (800 in flight) | 517k (174k / 635k, round p10/p90) | ~12.7KB |");
    println!();
    println!("Saturation detail (leader Sender at saturation):");
    println!();
    println!(
        "| Variant | committed msg/s | data syscalls/s | control syscalls/s (C) | commit frames/s | sender time: data / \
         control / own / idle / between cycles | ns per datagram: data / control / own | budget mu (vs committed) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        let s = &r.saturation;
        let (split, per_datagram, mu) = match r.budget(clock_read_ns) {
            Some((b, compared)) => (
                format!(
                    "{:.0}% / {:.0}% / {:.0}% / {:.0}% / {:.0}%",
                    100.0 * b.data_share,
                    100.0 * b.control_share,
                    100.0 * b.own_share,
                    100.0 * b.idle_share,
                    100.0 * b.between_share
                ),
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    b.data_ns_per_datagram, b.control_ns_per_datagram, b.own_ns_per_datagram
                ),
                format!(
                    "{} ({:+.1}%{})",
                    rate(b.mu_budget),
                    100.0 * b.budget_error,
                    if compared { "" } else { ", not compared" }
                ),
            ),
            None => ("not split".into(), "-".into(), "-".into()),
        };
        println!(
            "| {} | {} | {} | {} | {} | {split} | {per_datagram} | {mu} |",
            r.variant.name(),
            rate(s.median()),
            rate(s.data_per_s),
            rate(s.control_per_s),
            rate(s.commit_frames_per_s)
        );
    }
    print_durable(results);
    print_five(results);
    if !c_results.is_empty() {
        println!();
        println!(
            "## C per consensus idle strategy, paced at {} msg/s (leader's consensus on its own thread with the strategy; every other agent backoff)",
            rate(C_RATE as f64)
        );
        println!();
        println!("| Variant | Consensus idle | achieved msg/s | C: sender control syscalls/s | of which commit frames (2 x frames/s) | data syscalls/s | consensus cycles/s | serial p50 / p99 |");
        println!("|---|---|---|---|---|---|---|---|");
        for c in c_results {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.0}us / {:.0}us |",
                c.variant.name(),
                c.idle,
                rate(c.achieved),
                rate(c.control_per_s),
                rate(2.0 * c.commit_frames_per_s),
                rate(c.data_per_s),
                rate(c.consensus_cycles_per_s),
                c.serial.0,
                c.serial.1
            );
        }
    }
}

/// The five-member rows beside the model and beside the same variant with 3 members, when it ran.
fn print_five(results: &[VariantResult]) {
    let five: Vec<(&VariantResult, &ModelCheck)> =
        results.iter().filter_map(|r| r.model.as_ref().map(|m| (r, m))).collect();
    if five.is_empty() {
        return;
    }
    println!();
    println!(
        "## Five members (D = 4, in memory, classic, separate commit frames): committed msg/s beside the model's (S - C) / 4 x M_pkt"
    );
    println!();
    println!("| Variant | committed msg/s, median | vs 3 members | S (D = 4) | C | M_pkt | model (S - C) / 4 x M_pkt | vs model | stage that saturated first |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (r, m) in five {
        let committed = r.saturation.median();
        let three = Variant { members: 3, ..r.variant };
        let vs_three = results
            .iter()
            .find(|t| t.variant == three)
            .map_or("not run".into(), |t| format!("{:.2}x", committed / t.saturation.median()));
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
            r.variant.name(),
            rate(committed),
            vs_three,
            rate(m.s),
            rate(m.c),
            m.m_pkt,
            rate(m.mu),
            if m.comparable() { format!("{:.2}x", committed / m.mu) } else { "not compared".into() },
            m.bottleneck.text
        );
    }
}

pub fn invoker_layout(settings: &Settings) -> String {
    let (a, b) = if settings.pin { (" (pinned to core 0)", " (pinned to core 1)") } else { ("", "") };
    format!(
        "every node in invoker mode; bench thread 0{a} = load generator + leader's agents + leader's apply; \
         bench thread 1{b} = every follower's agents + their apply (2 followers; 4 in the five-member rows); 2 \
         spinning threads on 2 cores"
    )
}

pub fn c_layout(settings: &Settings) -> String {
    let (a, b) = if settings.pin { (" (core 1)", " (core 0)") } else { ("", "") };
    format!(
        "leader in shared-network mode: its consensus agent on a thread of its own{a} with the strategy under \
         test, its sender+receiver thread{b} with backoff; each follower in shared mode (one thread{b}) with \
         backoff; bench thread{b} = pacer + apply of every node, sleeping 50 us between bursts"
    )
}

pub fn rows(settings: &Settings, results: &[VariantResult], c_results: &[CResult]) -> Vec<Value> {
    let mut rows: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut row = json!({
                "mtu": r.variant.mtu,
                "msg": MESSAGE,
                "send_mode": r.variant.mode.as_str(),
                "control": r.variant.control(),
                "auth": r.variant.auth,
                "storage": r.variant.storage.as_str(),
                "idle": "invoker: spin, yield when idle",
                "layout": invoker_layout(settings),
                "committed_msgs_per_s": r.saturation.median(),
                "committed_msgs_per_s_windows": r.saturation.rates,
                "serial_us": { "p50": r.serial.0, "p99": r.serial.1, "samples": r.serial.2 },
                "pipeline": { "window": PIPELINE_WINDOW, "msgs_per_s": r.pipeline.2, "p50_us": r.pipeline.0, "p99_us": r.pipeline.1 },
                "c_per_s": r.saturation.control_per_s,
                "data_syscalls_per_s": r.saturation.data_per_s,
                "commit_frames_per_s": r.saturation.commit_frames_per_s,
                "alloc_bytes_per_entry": r.saturation.alloc_bytes_per_entry,
                "cpu_cores_used": r.saturation.cpu_util,
                "cpu_us_per_committed_msg": r.saturation.cpu_per_entry_us(),
                "out_of_order": r.out_of_order,
                "members": r.variant.members,
            });
            if let Some((b, compared)) = r.budget(settings.clock_read_ns) {
                row["sender_budget"] = json!(b);
                row["sender_budget_compared"] = json!(compared);
            }
            if let Some(m) = &r.model {
                row["model"] = json!({
                    "s_datagrams_per_s": m.s,
                    "s_destinations": m.d,
                    "c_per_s": m.c,
                    "d": m.d,
                    "m_pkt": m.m_pkt,
                    "mu_predicted": m.mu,
                    "error": m.error,
                    "stage": m.bottleneck.stage.as_str(),
                    "stage_evidence": m.bottleneck.text,
                    "compared": m.comparable(),
                    "committed_vs_model": m.comparable().then(|| r.saturation.median() / m.mu),
                });
            }
            if r.variant.storage.durable() {
                let rec = &r.saturation.recorder;
                row["recorder"] = json!({
                    "leader_fsyncs_per_s": rec.fsyncs_per_s,
                    "entries_per_fsync": rec.entries_per_fsync(),
                    "leader_frames_per_s": rec.frames_per_s,
                    "leader_bytes_per_s": rec.bytes_per_s,
                    "follower_fsyncs_per_s": rec.follower_fsyncs_per_s,
                    "serial_fsyncs_per_msg": r.serial_fsyncs_per_msg,
                    "all_three": {
                        "bytes_per_s": rec.all.bytes_per_s,
                        "bytes_per_write": rec.all.bytes_per_write(),
                        "checksum_ns_per_byte": rec.all.checksum_ns_per_byte,
                        "write_ns_per_byte": rec.all.write_ns_per_byte,
                        "fsyncs_per_s": rec.all.fsyncs_per_s,
                        "bytes_per_fsync": rec.all.bytes_per_fsync(),
                        "mean_fsync_us": rec.all.fsync_us,
                    },
                    "data_dir": target_dir().join("cluster-data").display().to_string(),
                });
                row["committed_vs_memory"] = json!(ratio_to_memory(results, r));
            }
            row
        })
        .collect();
    rows.extend(c_results.iter().map(|c| {
        json!({
            "mtu": c.variant.mtu,
            "msg": MESSAGE,
            "send_mode": c.variant.mode.as_str(),
            "control": c.variant.control(),
            "storage": c.variant.storage.as_str(),
            "idle": c.idle,
            "layout": c_layout(settings),
            "offered_msgs_per_s": C_RATE,
            "committed_msgs_per_s": c.achieved,
            "serial_us": { "p50": c.serial.0, "p99": c.serial.1, "samples": c.serial.2 },
            "c_per_s": c.control_per_s,
            "data_syscalls_per_s": c.data_per_s,
            "commit_frames_per_s": c.commit_frames_per_s,
            "commit_frame_syscalls_per_s": 2.0 * c.commit_frames_per_s,
            "consensus_cycles_per_s": c.consensus_cycles_per_s,
        })
    }));
    rows
}
