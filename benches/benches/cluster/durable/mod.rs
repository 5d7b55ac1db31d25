//! The log on disk beside the log in memory: each durable row against its memory twin of the same run,
//! the disk's floor measured right after them, issue 28's targets met or missed, and their tables.

use std::time::Duration;

use quorumcast::SyncPolicy;
use quorumcast_bench::disk_floor::{self, SyncLatency, WriteRate};
use quorumcast_bench::host_memory::FreePageReporting;

use crate::variant_run::VariantResult;
use crate::{data_root, rate, remove_data, Settings, Storage, Variant};

/// The memory twin measured in the same run, of a durable row.
fn twin_of<'a>(results: &'a [VariantResult], variant: &Variant) -> Option<&'a VariantResult> {
    results.iter().find(|t| t.variant == variant.memory_twin())
}

/// A durable row's committed rate over its memory twin's.
pub fn ratio_to_memory(results: &[VariantResult], r: &VariantResult) -> Option<f64> {
    twin_of(results, &r.variant).map(|t| r.saturation.median() / t.saturation.median())
}

/// This disk's floors, measured right after the durable rows, in the same run.
#[derive(Clone, Debug)]
pub struct DiskFloor {
    /// `fdatasync` after a 4 KiB append, one writer: the target's floor.
    pub sync: SyncLatency,
    /// The same by three writers at once (each its own file), as three recorders on one disk sync.
    pub sync_three: SyncLatency,
    /// Three writers appending 1 MiB at a time through the page cache, synced once at the end.
    pub sequential: WriteRate,
    /// Per `batch` row: three writers each appending that row's mean bytes per `fdatasync` and syncing
    /// each, one sync in flight per writer (what three recorders on this disk can do at best).
    pub synced: Vec<(Variant, WriteRate)>,
    /// Per `none` row: one writer appending that row's mean bytes per write call through the page cache,
    /// for its CPU per byte (what the recorders' writes cost at best).
    pub page_cache: Vec<(Variant, WriteRate)>,
    /// Whether the hypervisor took freed memory back, at the bench's start and at the floor: where it
    /// does, the rows' page cache may have paid a hypervisor fault per new page that the floor, writing
    /// into memory the rows had just freed, did not.
    pub reporting: Option<(Option<FreePageReporting>, FreePageReporting)>,
}

/// Appended before each `fdatasync` of the floor's latency.
const FLOOR_APPEND: usize = 4096;
/// Writers of the floor's write rates: one per recorder.
const FLOOR_WRITERS: usize = 3;

/// Measures the disk's floor when durable rows ran, under `<target>/cluster-data` (where they wrote).
pub fn measure_floor(
    results: &[VariantResult],
    settings: &Settings,
    reporting_at_start: Option<FreePageReporting>,
) -> Result<Option<DiskFloor>, String> {
    if !results.iter().any(|r| r.variant.storage.durable()) {
        return Ok(None);
    }
    let dir = data_root("floor");
    let time = if settings.quick { Duration::from_millis(300) } else { Duration::from_secs(1) };
    let measured = (|| -> std::io::Result<DiskFloor> {
        let sync = disk_floor::sync_latency(&dir, FLOOR_APPEND, 1, 2_000, time)?;
        let sync_three = disk_floor::sync_latency(&dir, FLOOR_APPEND, FLOOR_WRITERS, 2_000, time)?;
        let sequential = disk_floor::write_rate(&dir, FLOOR_WRITERS, 1 << 20, false, time)?;
        let mut synced = Vec::new();
        for r in results.iter().filter(|r| r.variant.storage == Storage::Disk(SyncPolicy::Batch)) {
            let Some(batch) = r.saturation.recorder.all.bytes_per_fsync() else { continue };
            let block = (batch as usize).next_multiple_of(32).max(32);
            synced.push((r.variant, disk_floor::write_rate(&dir, FLOOR_WRITERS, block, true, time)?));
        }
        let mut page_cache = Vec::new();
        for r in results.iter().filter(|r| r.variant.storage == Storage::Disk(SyncPolicy::None)) {
            let block = (r.saturation.recorder.all.bytes_per_write() as usize).next_multiple_of(32).max(32);
            page_cache.push((r.variant, disk_floor::write_rate(&dir, 1, block, false, time)?));
        }
        let reporting = FreePageReporting::read().map(|now| (reporting_at_start, now));
        Ok(DiskFloor { sync, sync_three, sequential, synced, page_cache, reporting })
    })();
    remove_data("floor");
    measured.map(Some).map_err(|e| format!("the disk floor: {e}"))
}

/// Issue 28's targets for the log on disk, against the memory twin and the disk's floor of the same run:
/// a verdict per durable row.
pub fn verdicts(results: &[VariantResult], floor: Option<&DiskFloor>) -> Vec<(Variant, String)> {
    let mut out = Vec::new();
    for r in results.iter().filter(|r| r.variant.storage.durable()) {
        let (Some(twin), Some(ratio)) = (twin_of(results, &r.variant), ratio_to_memory(results, r)) else {
            continue;
        };
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        let verdict = match r.variant.storage {
            Storage::Disk(SyncPolicy::None) => {
                let mut verdict = format!("committed {:.2}x memory (target >= 0.9x): {}", ratio, met(ratio >= 0.9));
                if let Some((_, floor_rate)) = floor.and_then(|f| f.page_cache.iter().find(|(v, _)| *v == r.variant)) {
                    let all = &r.saturation.recorder.all;
                    verdict.push_str(&format!(
                        "; the recorders' write calls {:.3} ns/B (wall) against the page cache's {:.3} ns/B (CPU, \
                         one writer of {:.0} KB writes), checksum {:.3} ns/B",
                        all.write_ns_per_byte,
                        floor_rate.cpu_ns_per_byte,
                        floor_rate.block as f64 / 1e3,
                        all.checksum_ns_per_byte
                    ));
                    let reporting = floor.and_then(|f| f.reporting).is_some_and(|(_, now)| now.on);
                    if reporting && all.write_ns_per_byte > 1.5 * floor_rate.cpu_ns_per_byte {
                        verdict.push_str(
                            "; free page reporting is on: the write calls' excess may be hypervisor faults on \
                             new page-cache pages (see the host memory line)",
                        );
                    }
                }
                verdict
            }
            _ => {
                let mut parts = vec![format!("committed {:.2}x memory (target >= 0.5x): {}", ratio, met(ratio >= 0.5))];
                if let Some((_, floor_rate)) = floor.and_then(|f| f.synced.iter().find(|(v, _)| *v == r.variant)) {
                    let share = r.saturation.recorder.all.bytes_per_s / floor_rate.bytes_per_s;
                    parts.push(format!(
                        "or the three recorders' {:.0} MB/s {:.2}x the disk's {:.0} MB/s with {} writers of {:.0} KB \
                         batches each synced (target >= 0.8x): {}",
                        r.saturation.recorder.all.bytes_per_s / 1e6,
                        share,
                        floor_rate.bytes_per_s / 1e6,
                        floor_rate.writers,
                        floor_rate.block as f64 / 1e3,
                        met(share >= 0.8)
                    ));
                }
                if let Some(floor) = floor {
                    let bound = floor.sync.p50_us + 1.5 * twin.serial.0;
                    parts.push(format!(
                        "serial p50 {:.0} us against fdatasync p50 {:.0} us + 1.5 x memory's {:.1} us = {:.0} us: {} \
                         (three writers syncing at once: fdatasync p50 {:.0} us)",
                        r.serial.0,
                        floor.sync.p50_us,
                        twin.serial.0,
                        bound,
                        met(r.serial.0 <= bound),
                        floor.sync_three.p50_us
                    ));
                }
                parts.join("; ")
            }
        };
        out.push((r.variant, verdict));
    }
    out
}

/// The disk's floor and the targets' verdicts.
pub fn print_floor(results: &[VariantResult], floor: Option<&DiskFloor>) {
    if let Some(floor) = floor {
        println!();
        println!(
            "Floor (this disk, same run): fdatasync after a {} B append p50 {:.0} us, p99 {:.0} us ({} syncs); \
             by {} writers at once p50 {:.0} us, p99 {:.0} us; {} writers appending 1 MiB through the page cache \
             {:.0} MB/s",
            floor.sync.append,
            floor.sync.p50_us,
            floor.sync.p99_us,
            floor.sync.samples,
            floor.sync_three.writers,
            floor.sync_three.p50_us,
            floor.sync_three.p99_us,
            floor.sequential.writers,
            floor.sequential.bytes_per_s / 1e6
        );
        if let Some((before, now)) = &floor.reporting {
            println!("Host memory: {}", now.describe(before.as_ref()));
        }
        for (variant, rate) in &floor.page_cache {
            println!(
                "  for {}: one writer appending {:.0} KB through the page cache: {:.3} ns/B of CPU, {:.0} MB/s",
                variant.name(),
                rate.block as f64 / 1e3,
                rate.cpu_ns_per_byte,
                rate.bytes_per_s / 1e6
            );
        }
        for (variant, rate) in &floor.synced {
            println!(
                "  for {}: {} writers each appending {:.0} KB and syncing it: {:.0} MB/s, {:.0} fsyncs/s each",
                variant.name(),
                rate.writers,
                rate.block as f64 / 1e3,
                rate.bytes_per_s / 1e6,
                rate.syncs_per_s_each
            );
        }
    }
    for (variant, verdict) in verdicts(results, floor) {
        println!("Target, {}: {verdict}", variant.name());
    }
}

/// The log on disk beside the same variant in memory, measured in this run.
pub fn print_durable(results: &[VariantResult]) {
    if !results.iter().any(|r| r.variant.storage.durable()) {
        return;
    }
    println!();
    println!(
        "## The log on disk (recorder agent; `none` = page cache only, `batch` = group commit, one fdatasync in flight per recorder, \
         acknowledged and counted only once synced), beside the log in memory, same run"
    );
    println!();
    println!("| Variant | storage | committed msg/s, median (min / max) | vs memory | serial p50 | serial p99 | leader fsyncs/s | entries/fsync | follower fsyncs/s (each) | leader recorded MB/s | fsyncs per serial msg | process CPU | CPU us per committed msg | recorders' MB/s (3) | B per write | checksum ns/B | write ns/B | mean fsync |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let groups = results.iter().filter(|r| r.variant.storage.durable()).map(|r| r.variant.memory_twin());
    let mut twins: Vec<Variant> = Vec::new();
    for twin in groups {
        if !twins.contains(&twin) {
            twins.push(twin);
        }
    }
    for twin in twins {
        for r in results.iter().filter(|r| r.variant.memory_twin() == twin) {
            let s = &r.saturation;
            let min = s.rates.iter().copied().fold(f64::INFINITY, f64::min);
            let max = s.rates.iter().copied().fold(0.0, f64::max);
            let durable = r.variant.storage.durable();
            let rec = &s.recorder;
            println!(
                "| {} | {} | {} ({} / {}) | {} | {:.1}us | {:.1}us | {} | {} | {} | {} | {} | {:.2} cores | {:.2} | {} |",
                twin.name(),
                r.variant.storage.as_str(),
                rate(s.median()),
                rate(min),
                rate(max),
                if durable {
                    ratio_to_memory(results, r).map_or("no twin".into(), |x| format!("{:.0}%", 100.0 * x))
                } else {
                    "100%".into()
                },
                r.serial.0,
                r.serial.1,
                if durable { rate(rec.fsyncs_per_s) } else { "—".into() },
                rec.entries_per_fsync().map_or("—".into(), |e| format!("{e:.0}")),
                if durable { rate(rec.follower_fsyncs_per_s) } else { "—".into() },
                if durable { format!("{:.0}", rec.bytes_per_s / 1e6) } else { "—".into() },
                if durable { format!("{:.2}", r.serial_fsyncs_per_msg) } else { "—".into() },
                s.cpu_util,
                s.cpu_per_entry_us(),
                if durable {
                    let all = &rec.all;
                    format!(
                        "{:.0} | {:.0} | {:.3} | {:.3} | {}",
                        all.bytes_per_s / 1e6,
                        all.bytes_per_write(),
                        all.checksum_ns_per_byte,
                        all.write_ns_per_byte,
                        if all.fsyncs_per_s > 0.0 { format!("{:.0}us", all.fsync_us) } else { "—".into() }
                    )
                } else {
                    "— | — | — | — | —".into()
                },
            );
        }
    }
}
