//! What a run did ([`SimReport`]), or the property it broke ([`SimFailure`]).

use super::*;

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Steps taken.
    pub steps: u64,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Messages offered and taken by a leader.
    pub offered: u64,
    /// Entries in the committed order.
    pub committed: u64,
    /// Leaders seen (one per term).
    pub leaderships: u64,
    /// Faults started.
    pub faults: u64,
    /// Members restarted.
    pub restarts: u64,
    /// Members stopped by a failing disk (and started again once it was healthy).
    pub stopped_by_disk: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Writes that landed at another offset than asked (every member's disk, this process's and before).
    pub misdirected: u64,
    /// Restarts after which a member repaired its log: recovery found it damaged below what it had synced.
    pub repairs: u64,
    /// Members started again because they found their recording damaged while running (a replay, a cut).
    pub damage_restarts: u64,
    /// Runs that ended with a majority of the members repairing: damage to the disks of a majority lost
    /// what they had acknowledged, and the cluster refused to elect a leader that might lack a committed
    /// entry, as it must (liveness is promised only while a majority holds what it acknowledged).
    pub majority_damaged: u64,
    /// Datagrams a host outside the cluster sent.
    pub forged: u64,
    /// What the hostile host sent.
    pub hostile: forge::Forged,
    /// Catch-ups from a leader's recording that members finished.
    pub catch_ups: u64,
    /// Snapshots members loaded while running (installed by a catch-up; restores at restarts aside).
    pub snapshots_loaded: u64,
    /// What the remote clients did.
    pub clients: clients::ClientReport,
    /// Membership changes that committed, and those refused or given up on.
    pub membership_changes: u64,
    /// Membership changes refused (by the leader's rules) or given up on (no commit in time).
    pub membership_refused: u64,
    /// What the service did (with [`SimConfig::service`]): the most any member's application counted
    /// since its last start.
    pub service: service::ServiceCounts,
    /// How late each timer fired (once per firing; see [`service::ServiceAt::lateness_ns`]), ns, sorted.
    pub timer_lateness_ns: Vec<i64>,
    /// What happened, when traced.
    pub trace: String,
}

/// A run that broke a checked property: which, at which step, and the trace so far.
#[derive(Debug)]
pub struct SimFailure {
    /// The seed (replay it with `QC_NODE_SIM_SEED`).
    pub seed: u64,
    /// What was broken.
    pub violation: Violation,
    /// The step it was seen at.
    pub step: u64,
    /// Simulated time, ns.
    pub now_ns: u64,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed at step {} ({} ms simulated): {} (replay: QC_NODE_SIM_SEED={} QC_NODE_SIM_TRACE=1)",
            self.seed,
            self.step,
            self.now_ns / 1_000_000,
            self.violation,
            self.seed
        )
    }
}
