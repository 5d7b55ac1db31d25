//! The driver's storage: what a write hands the core under each sync policy, the syncs (group commit,
//! one in flight per member), the cut of an un-synced tail the core never knew of, and the check that no
//! committed entry is lost.

use quorumcast_consensus::consensus_core::MemberId;

use super::super::checker::Check;
use super::{Node, Simulation, SyncPolicy};

impl Simulation {
    /// Where the core's view of the member's log ends: the log's end under `none`, its synced position
    /// under `batch` (what the member may count and acknowledge).
    pub(super) fn known_end(&self, node: &Node) -> i64 {
        if self.config.ack_unsynced {
            node.log.end()
        } else {
            self.counted_end(node)
        }
    }

    /// Where the part of the member's log that may count toward a commit ends: the log's end under
    /// `none`, its synced position under `batch`.
    fn counted_end(&self, node: &Node) -> i64 {
        match self.config.storage.policy {
            SyncPolicy::None => node.log.end(),
            SyncPolicy::Batch => node.log.synced(),
        }
    }

    /// The member wrote entries of `term` at its log's end: under `none` its core learns the new end at
    /// once; under `batch` a sync starts unless one is in flight, and the core learns of the entries when
    /// a sync that covers them completes.
    pub(super) fn written(&mut self, index: usize, term: i64) -> Check {
        self.start_sync(index);
        // Under `batch` the write is not synced yet (an entry is never empty), unless the driver is broken.
        if self.known_end(&self.nodes[index]) == self.nodes[index].log.end() {
            let end = self.nodes[index].log.end();
            self.input(index, |core, now, out| core.on_append_position(term, end, now, out))?;
        }
        Ok(())
    }

    /// A running member under `batch` syncs what it wrote, one sync at a time.
    fn start_sync(&mut self, index: usize) {
        let log = &self.nodes[index].log;
        let idle = log.syncing().is_none() && log.synced() < log.end();
        if self.config.storage.policy == SyncPolicy::None || self.nodes[index].core.is_none() || !idle {
            return;
        }
        let done_at = self.now_ns + self.sync_latency.between(100_000, self.config.storage.max_sync_ns);
        self.nodes[index].log.start_sync(done_at);
        self.summary.syncs += 1;
    }

    /// Completes the syncs due: each member's core learns its new synced position, and the next sync
    /// starts for what was written meanwhile.
    pub(super) fn complete_syncs(&mut self) -> Check {
        if self.config.storage.policy == SyncPolicy::None {
            return Ok(());
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].log.complete_sync(self.now_ns) {
                self.hand_synced(index)?;
                self.start_sync(index);
            }
        }
        Ok(())
    }

    /// Hands the core the synced entries it does not know yet, one term's run at a time (as
    /// `on_append_position` asks).
    fn hand_synced(&mut self, index: usize) -> Check {
        loop {
            let node = &self.nodes[index];
            let Some(core) = &node.core else { return Ok(()) };
            let Some((term, end)) = node.log.term_run(core.append_position(), node.log.synced()) else {
                return Ok(());
            };
            self.input(index, |core, now, out| core.on_append_position(term, end, now, out))?;
        }
    }

    /// The core names `position` as its log's end (a term start, or where to replicate from). Under
    /// `batch` the log may go on past it with un-synced entries the core never knew of (they may not
    /// even agree with the new leader's log): the driver cuts them, durably. Anything else is a driver
    /// bug.
    pub(super) fn cut_unknown_tail(&mut self, index: usize, position: i64, what: &str) -> Check {
        let node = &self.nodes[index];
        let known = self.known_end(node);
        if position != known {
            let (id, end, synced) = (node.id, node.log.end(), node.log.synced());
            return Err(format!(
                "member {id}: {what} at {position}, but its core's log ends at {known} (log end {end}, synced {synced})"
            ));
        }
        if position < node.log.end() {
            self.nodes[index].log.truncate(position);
            self.summary.cut_tails += 1;
            self.check_held_after_cut(index, "an un-synced tail was cut")?;
        }
        Ok(())
    }

    /// No committed entry lost: every committed entry from index `from` on is held by a majority of the
    /// members' logs, running or not (under `batch`: within what they synced).
    pub(super) fn check_held(&self, from: usize, after: &str) -> Check {
        if !self.config.check_durability || from >= self.checker.committed.len() {
            return Ok(());
        }
        if self.config.membership {
            let groups: Vec<Vec<_>> = self
                .voter_groups()
                .iter()
                .map(|voters| voters.iter().map(|&id| self.durable_entries(&self.nodes[id as usize - 1])).collect())
                .collect();
            return self.checker.check_held_by_any(from, &groups).map_err(|lost| format!("{lost}, after {after}"));
        }
        let logs: Vec<_> = self.nodes.iter().map(|node| self.durable_entries(node)).collect();
        self.checker.check_held(from, &logs).map_err(|lost| format!("{lost}, after {after}"))
    }

    /// After member `index`'s log lost entries: the committed entries it may have held.
    pub(super) fn check_held_after_cut(&self, index: usize, after: &str) -> Check {
        let from = self.durable_entries(&self.nodes[index]).len();
        let id: MemberId = self.nodes[index].id;
        self.check_held(from, &format!("{after} on member {id}"))
    }

    /// The entries of a member's log that count toward a commit's majority.
    pub(super) fn durable_entries<'a>(&self, node: &'a Node) -> &'a [super::Entry] {
        let count = node.log.count_at(self.counted_end(node)).expect("the counted end is an entry boundary");
        &node.log.entries()[..count]
    }
}
