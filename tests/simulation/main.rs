//! Deterministic simulation of the consensus core, after TigerBeetle's VOPR and FoundationDB's
//! simulation testing: 3- and 5-member clusters of `ConsensusCore`s over a simulated network (loss,
//! duplication, reordering, delay, partitions (some one-way) that heal), simulated clocks (with jumps forward),
//! simulated storage, and process crashes and power losses of any member, leader included, or of a
//! majority at once, with restarts, all from one `u64` seed per run. No wall clock and no other
//! randomness: a seed replays exactly.
//!
//! After every step the checker (`checker.rs`) checks election safety, one vote per term,
//! commit positions never moving back, leader completeness and state machine safety, and that no
//! committed entry is lost (each stays in a majority of the logs: their synced parts under `batch`).
//! Each run ends with a liveness check: faults run for 3 to 5 simulated seconds, then stop (the network
//! heals and loses nothing, clocks stop jumping, every member restarts but, in half the runs, a minority
//! that stays down), and from then on a leader must be elected and commit a client entry appended after
//! the faults stopped within `150 ms + heartbeat_timeout + 10 x election_timeout_max` of simulated time
//! (3.25 s with the default timers, 0.54 s with the fast profile; 150 ms is the longest a packet sent
//! before the faults stopped may still be in flight).
//!
//! Storage: each member's log has a synced position, and each run one of the product's sync policies
//! (half the seeds each):
//!
//! - `none`: writes stay in the page cache (Aeron Archive's default); a member counts (as leader) and
//!   acknowledges (as follower) its log's end as soon as the bytes are in its log;
//! - `batch`: group commit: one fsync at a time, taking 0.1 ms up to 0.3, 1, 3 or 20 ms of simulated time
//!   (by seed), makes durable everything written before it started. The core is handed `min(log end,
//!   synced)` as its append position, again each time a sync completes, so a member counts, acknowledges,
//!   commits and applies only what it synced. The leader still sends what it has not synced. Where the
//!   core names its log's end (a term start, where to replicate from), the driver cuts the un-synced tail
//!   past it that the core never knew of.
//!
//! A truncation is durable at once (a driver syncs it before writing past it), and so is a persisted
//! term and vote (`Persist`). Crashes are of two kinds:
//!
//! - a process crash keeps the page cache, so the member's whole log under both policies (an
//!   uncommitted suffix too, which a later leader may have truncated); under `batch` the restarted
//!   driver syncs the log it reads back before its core starts;
//! - a power loss keeps what was synced and, in half the cases, a random run of entries past it (what
//!   the operating system happened to write back; a torn entry is cut when the log is read back).
//!
//! Either kind keeps the term and vote and what the state machine applied, as far as the surviving log
//! holds it (after a power loss the application rebuilds from its log: under `batch` that is everything
//! it applied, under `none` maybe not), given back to the core as a known commit position. Power losses
//! strike one member, or a majority at once (every member in half of those), and a share of the other
//! crashes are power losses. The default run gives them to the `batch` seeds only: `none` promises
//! nothing across a power loss, and `none_loses_committed_entries_when_a_majority_loses_power` shows it
//! losing commits when a majority loses power, and the checker catching it.
//!
//! Remote clients' sessions (`cluster/sessions.rs`, seeds 0..500 with `SimConfig::sessions`): clients
//! open sessions and send numbered messages at whichever member leads, resend what was not acknowledged
//! whenever their leader changes, and every member applies the session entries of its committed log to
//! the product's `SessionTable`: each session's messages must be delivered exactly once and in order on
//! every member, and every message a leader acknowledged delivered. A member that skips the table is
//! caught.
//!
//! - `cargo test --test simulation` runs seeds 0..2000 (even: 3 members, odd: 5), and seeds 0..500 of
//!   `batch` with every crash a power loss, and of sessions, about 15 s on two cores;
//! - `QC_SIM_SEED=<n> cargo test --test simulation` replays seed `n` alone (in both);
//! - `QC_SIM_SOAK=<count> cargo test --test simulation` runs seeds 0..count (in both), or from
//!   `QC_SIM_FIRST_SEED=<n>` on.

mod checker;
mod cluster;
mod log;
mod network;
mod prng;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use quorumcast_consensus::consensus_core::Bugs;

use cluster::{SimConfig, Simulation, Storage, Summary, SyncPolicy, Violation};
use log::{Entry, SimLog};

/// Seeds `cargo test` runs.
const DEFAULT_SEEDS: u64 = 2000;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.trim().parse().unwrap_or_else(|_| panic!("{name}={value} is not a seed count or number")))
}

/// Runs `seeds` on every core, stopping at the first violation when `stop_at_first`; returns the
/// violations found and the summaries of the runs that held.
fn run_seeds(
    seeds: std::ops::Range<u64>,
    configure: impl Fn(SimConfig) -> SimConfig + Sync,
    stop_at_first: bool,
) -> (Vec<Violation>, Vec<Summary>) {
    let next = AtomicU64::new(seeds.start);
    let stop = AtomicBool::new(false);
    let violations = Mutex::new(Vec::new());
    let summaries = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end || stop.load(Ordering::Relaxed) {
                    break;
                }
                match Simulation::new(configure(SimConfig::for_seed(seed))).run() {
                    Ok(summary) => summaries.lock().unwrap().push(summary),
                    Err(violation) => {
                        stop.store(stop_at_first, Ordering::Relaxed);
                        violations.lock().unwrap().push(violation);
                    }
                }
            });
        }
    });
    let mut violations = violations.into_inner().unwrap();
    violations.sort_by_key(|v| v.seed);
    (violations, summaries.into_inner().unwrap())
}

fn assert_no_violations(seeds: std::ops::Range<u64>) {
    assert_none_broken(seeds, |config| config);
}

/// Runs `seeds` as `configure` sets them up, and asserts every property held on every one; returns the
/// runs' summaries.
fn assert_none_broken(seeds: std::ops::Range<u64>, configure: impl Fn(SimConfig) -> SimConfig + Sync) -> Vec<Summary> {
    let count = seeds.end - seeds.start;
    let (violations, summaries) = run_seeds(seeds, configure, false);
    for violation in &violations {
        eprintln!("VIOLATION {violation}");
    }
    assert!(violations.is_empty(), "{} of {count} seeds broke a property; first: {}", violations.len(), violations[0]);
    let simulated: u64 = summaries.iter().map(|s| s.simulated_ns).sum();
    let leaderships: u64 = summaries.iter().map(|s| s.leaderships).sum();
    let crashes: u64 = summaries.iter().map(|s| s.crashes).sum();
    let partitions: u64 = summaries.iter().map(|s| s.partitions).sum();
    let committed: usize = summaries.iter().map(|s| s.committed).sum();
    let candidacies: u64 = summaries.iter().map(|s| s.candidacies).sum();
    let contested: u64 = summaries.iter().map(|s| s.contested_terms).sum();
    let truncations: u64 = summaries.iter().map(|s| s.truncations).sum();
    let batch = summaries.iter().filter(|s| s.batch).count();
    let power_losses: u64 = summaries.iter().map(|s| s.power_losses).sum();
    let majority_power_losses: u64 = summaries.iter().map(|s| s.majority_power_losses).sum();
    let lost_entries: u64 = summaries.iter().map(|s| s.lost_entries).sum();
    let syncs: u64 = summaries.iter().map(|s| s.syncs).sum();
    let cut_tails: u64 = summaries.iter().map(|s| s.cut_tails).sum();
    eprintln!(
        "{count} seeds held: {} simulated s, {leaderships} leaderships, {crashes} crashes, {partitions} partitions, \
         {committed} entries committed, {candidacies} candidacies, {contested} contested terms, {truncations} truncations; \
         {batch} seeds sync in batches ({syncs} syncs, {cut_tails} un-synced tails cut), {} keep the page cache; \
         {power_losses} power losses ({majority_power_losses} of a majority at once) took {lost_entries} un-synced \
         entries",
        simulated / 1_000_000_000,
        summaries.len() - batch
    );
    summaries
}

/// The seeds to run: `QC_SIM_SEED` alone, or `QC_SIM_SOAK` of them (else `count`) from `QC_SIM_FIRST_SEED`
/// (else 0).
fn seeds(count: u64) -> std::ops::Range<u64> {
    if let Some(seed) = env_u64("QC_SIM_SEED") {
        seed..seed + 1
    } else {
        let first = env_u64("QC_SIM_FIRST_SEED").unwrap_or(0);
        first..first + env_u64("QC_SIM_SOAK").unwrap_or(count)
    }
}

#[test]
fn every_property_holds_on_every_seed() {
    assert_no_violations(seeds(DEFAULT_SEEDS));
}

/// Remote clients' sessions (`cluster/sessions.rs`): clients resend after every change of leader, and
/// every member applies each session's messages exactly once and in order, through the product's session
/// table, across truncations, crashes and (under `batch`) power losses. Seeds 0..500, or as
/// `QC_SIM_SEED`, `QC_SIM_SOAK` and `QC_SIM_FIRST_SEED` say.
#[test]
fn every_session_message_is_applied_once_on_every_member() {
    let summaries = assert_none_broken(seeds(DEFAULT_SEEDS / 4), |config| SimConfig { sessions: true, ..config });
    let delivered: u64 = summaries.iter().map(|s| s.session_delivered).sum();
    let duplicates: u64 = summaries.iter().map(|s| s.session_duplicates).sum();
    eprintln!("sessions: {delivered} messages delivered on the members, {duplicates} resends answered as duplicates");
    assert!(duplicates > 0, "the runs resent messages that had been applied");
}

/// Membership changes one member at a time among the faults (`cluster/membership.rs`): learners added
/// from two spares, promoted, members removed (leaders included). Seeds 0..500, or as `QC_SIM_SEED`,
/// `QC_SIM_SOAK` and `QC_SIM_FIRST_SEED` say.
#[test]
fn membership_changes_keep_every_property() {
    let summaries = assert_none_broken(seeds(DEFAULT_SEEDS / 4), |config| SimConfig { membership: true, ..config });
    let appended: u64 = summaries.iter().map(|s| s.membership_changes).sum();
    let committed: u64 = summaries.iter().map(|s| s.committed_configurations).sum();
    eprintln!("membership: {appended} configuration entries appended, {committed} committed");
    assert!(committed > 0, "the runs changed the membership");
}

/// A leader that counts learners and removed members toward a commit is caught: proof that the test
/// above can fail.
#[test]
fn the_checker_catches_a_leader_that_counts_non_voters() {
    let bugs = Bugs { count_non_voters: true, ..Bugs::default() };
    let configure = |config| SimConfig { membership: true, bugs, ..config };
    let (violations, _) = run_seeds(0..DEFAULT_SEEDS / 4, configure, true);
    let first = violations.into_iter().next().expect("no seed caught a leader counting non-voters");
    eprintln!("caught: {first}");
}

/// A member that applies resends again is caught: proof that the test above can fail.
#[test]
fn the_checker_catches_a_member_that_applies_a_resend_again() {
    let configure = |config| SimConfig { sessions: true, sessions_without_table: true, ..config };
    let (violations, _) = run_seeds(0..DEFAULT_SEEDS / 4, configure, true);
    let first = violations.into_iter().next().expect("no seed caught a member applying resends again");
    eprintln!("caught: {first}");
    assert!(first.what.contains("delivered message"), "{first}");
}

/// Asserts that the default seeds catch a core broken by `bugs`; prints what caught it.
fn assert_caught(bugs: Bugs, check_votes: bool) -> Violation {
    let (violations, _) = run_seeds(0..DEFAULT_SEEDS, |config| SimConfig { bugs, check_votes, ..config }, true);
    let first = violations.into_iter().next().unwrap_or_else(|| panic!("{bugs:?}: no seed caught the broken core"));
    eprintln!("caught: {first}");
    first
}

#[test]
fn the_checker_catches_a_core_that_forgets_its_vote() {
    let bugs = Bugs { forget_vote_on_restart: true, ..Bugs::default() };
    assert_caught(bugs, true);
    // Without the direct vote check, the end-to-end properties must still catch it.
    let violation = assert_caught(bugs, false);
    assert!(!violation.what.contains("voted for"), "{violation}");
}

#[test]
fn the_checker_catches_a_core_that_skips_the_up_to_date_check() {
    assert_caught(Bugs { skip_up_to_date_check: true, ..Bugs::default() }, true);
}

/// Runs `seeds` with `storage` (each seed keeping its own sync latency) until one loses a committed
/// entry; panics when none does.
fn find_loss(seeds: std::ops::Range<u64>, storage: Storage, check_durability: bool, ack_unsynced: bool) -> Violation {
    let configure = |config: SimConfig| SimConfig {
        storage: Storage { max_sync_ns: config.storage.max_sync_ns, ..storage },
        check_durability,
        ack_unsynced,
        ..config
    };
    let (violations, _) = run_seeds(seeds.clone(), configure, true);
    let first = violations.into_iter().next().unwrap_or_else(|| {
        panic!("no seed of {seeds:?} lost a committed entry with {storage:?} (ack_unsynced: {ack_unsynced})")
    });
    eprintln!("lost: {first}");
    assert!(!first.what.starts_with("liveness"), "a liveness failure, not a loss: {first}");
    first
}

/// Majority power losses, the fault `none` does not survive and `batch` does.
const MAJORITY_POWER_LOSSES: Storage = Storage {
    policy: SyncPolicy::None,
    max_sync_ns: 1_000_000,
    power_loss_per_million: 0,
    majority_power_loss_per_million: 2_000,
    power_crash_share_per_million: 0,
};

/// Under `none` a write is in the page cache only, and a member counts and acknowledges it at once: when a
/// majority loses power, committed entries are lost. The checker must find such a loss within a few
/// hundred seeds, directly (a committed entry no longer held by a majority) and end to end.
#[test]
fn none_loses_committed_entries_when_a_majority_loses_power() {
    let violation = find_loss(0..400, MAJORITY_POWER_LOSSES, true, false);
    assert!(violation.what.contains(" lost: held by ") && violation.what.contains("power loss"), "{violation}");
    // Without the direct check, the end-to-end properties (state machine safety, leader completeness,
    // a core refusing to truncate below its commit) must still catch the loss.
    let violation = find_loss(0..400, MAJORITY_POWER_LOSSES, false, false);
    assert!(!violation.what.contains(" lost: held by "), "{violation}");
}

/// Under `batch` a member counts and acknowledges only what it synced: no power loss, of any number of
/// members, at any moment, loses a committed entry. Every crash is a power loss, a single member's or a
/// majority's. Seeds 0..500, or as `QC_SIM_SEED`, `QC_SIM_SOAK` and `QC_SIM_FIRST_SEED` say.
#[test]
fn batch_loses_nothing_committed_to_power_losses() {
    let storage = Storage {
        policy: SyncPolicy::Batch,
        max_sync_ns: 0,
        power_loss_per_million: 5_000,
        majority_power_loss_per_million: 2_000,
        power_crash_share_per_million: 1_000_000,
    };
    assert_none_broken(seeds(DEFAULT_SEEDS / 4), |config| SimConfig {
        storage: Storage { max_sync_ns: config.storage.max_sync_ns, ..storage },
        ..config
    });
}

/// The same faults catch a `batch` driver that acknowledges writes before they are synced, directly and
/// end to end: proof that the test above can fail.
#[test]
fn the_checker_catches_a_driver_that_acknowledges_unsynced_writes() {
    let storage = Storage { policy: SyncPolicy::Batch, ..MAJORITY_POWER_LOSSES };
    find_loss(0..400, storage, true, true);
    let violation = find_loss(0..400, storage, false, true);
    assert!(!violation.what.contains(" lost: held by "), "{violation}");
}

/// The storage model alone: a sync covers what was written before it started, a truncation brings the
/// synced position (and a sync in flight) down with it, and a power loss keeps what was synced.
#[test]
fn a_power_loss_keeps_what_was_synced() {
    let entry = |id| Entry::plain(1, id, 32, true);
    let mut log = SimLog::default();
    (1..=3).for_each(|id| log.push(entry(id)));
    assert!(log.start_sync(10));
    log.push(entry(4));
    assert!(!log.start_sync(11), "one sync in flight at a time");
    assert!(!log.complete_sync(9));
    assert!(log.complete_sync(10));
    assert_eq!((log.synced(), log.unsynced_entries()), (96, 1));
    assert!(log.start_sync(20));
    assert!(log.truncate(64));
    log.push(entry(5));
    assert!(log.complete_sync(20));
    assert_eq!((log.synced(), log.unsynced_entries()), (64, 1), "the truncation capped the sync in flight");
    log.push(entry(6));
    log.lose_unsynced(1);
    let ids: Vec<u64> = log.entries().iter().map(|e| e.id).collect();
    assert_eq!((ids, log.synced()), (vec![1, 2, 5], 96), "the synced entries and the first un-synced one kept");
    assert_eq!(log.term_run(0, 96), Some((1, 96)));
    assert_eq!(log.term_run(0, 80), Some((1, 64)));
}

#[test]
fn a_seed_replays_exactly() {
    let run = || format!("{:?}", Simulation::new(SimConfig::for_seed(12_345)).run().map_err(|v| v.to_string()));
    assert_eq!(run(), run());
}

/// Seed 32 with membership changes: leader 4 removed itself (voters [2] left), lost its majority before
/// the removal committed, and alone held the entry; it did not vote in it so it never stood, and member
/// 2's log was not up to date enough to win. A member whose removal is uncommitted now stands.
#[test]
fn regression_membership_seed_32_a_member_being_removed_stands() {
    run_membership_seed(32);
}

/// Runs `seed` with membership changes; panics with the property it broke, if it broke one.
fn run_membership_seed(seed: u64) {
    let config = SimConfig { membership: true, ..SimConfig::for_seed(seed) };
    if let Err(violation) = Simulation::new(config).run() {
        panic!("{violation}");
    }
}

/// Seeds 500574 (3 members) and 501639 (5), found by a soak of seeds 500000..503000 (2026-12-05): a new
/// leader took a follower's commit past its own (`adopt_commit`: committed by the leader before, under
/// the configuration then, [1, 3, 4]), and the checker, which held every leader's commit to a majority of
/// its own configuration's voters ([1, 3], of which the leader had not synced it yet), called that
/// counting non-voters. What was committed before is held to what `check_held` asks (a majority of a
/// configuration it was committed under, durably), not to the new leader's count.
#[test]
fn regression_membership_seeds_500574_and_501639_a_commit_taken_from_a_follower_is_no_count() {
    for seed in [500_574, 501_639] {
        run_membership_seed(seed);
    }
}

/// Seed 506439, found by the soak of seeds 503000..518000 (2026-12-05; the same on `13ffcec`): 5 members,
/// `batch`, membership changes. Leader 5 of term 2 promoted member 4 (configuration 6, voters
/// [1, 3, 4, 5, 6], appended on 4 and 5 only) and, counting with it from its append, committed entry 153
/// held by 1, 4 and 5; member 1 then led term 3 and configuration 6 was cut away. Under configuration 5
/// (voters [1, 3, 5, 6]) the entry is held by 1 and 5: half, not a majority, which the checker called a
/// loss. It is not one: every majority of [1, 3, 5, 6] includes 1 or 5 (single-server changes: the
/// majorities of two configurations one change apart overlap), so no leader without it can be elected.
/// The checker now asks exactly that of each configuration (`check_held_at`).
#[test]
fn regression_membership_seed_506439_an_entry_committed_under_a_configuration_cut_away_stays_safe() {
    run_membership_seed(506_439);
}
