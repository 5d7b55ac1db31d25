//! The faults of the chaos phase (process crashes, power losses, partitions, clock jumps, junk
//! messages), the restarts, and the end of the faults.

use quorumcast_consensus::consensus_core::{
    wire, ConsensusCore, CoreConfig, CoreCounters, DurableState, MemberId, Message,
};

use super::super::checker::Check;
use super::super::network::Faults;
use super::super::prng::Rng;
use super::{Simulation, SyncPolicy, MS};

/// How often each fault strikes during the chaos phase, per step.
#[derive(Clone, Copy, Debug)]
pub(super) struct FaultRates {
    pub(super) crash_per_million: u64,
    pub(super) max_down_ns: u64,
    pub(super) partition_per_million: u64,
    pub(super) heal_per_million: u64,
    pub(super) clock_jump_per_million: u64,
    pub(super) junk_per_million: u64,
    /// A member that just persisted a vote for another crashes once the input is done (power lost
    /// right after the sync), and restarts at once or within 30 ms: where a forgotten vote would count twice.
    pub(super) crash_after_vote_per_million: u64,
    /// A leader whose commit position just advanced crashes once the input is done: where a leader
    /// that committed an earlier term's entries by counting replicas would leave them to be lost.
    pub(super) crash_after_commit_per_million: u64,
    /// A member that just won an election crashes once the input is done, before its term-start
    /// marker reaches anyone: its term's bytes then live in its log alone.
    pub(super) crash_after_election_per_million: u64,
    /// A follower that just acknowledged a position crashes once the input is done: as a power loss,
    /// where a member that acknowledged what it had not synced would take the acknowledged entries
    /// with it.
    pub(super) crash_after_ack_per_million: u64,
}

impl FaultRates {
    /// This run's rates, drawn from the setup generator.
    pub(super) fn draw(setup: &mut Rng) -> Self {
        Self {
            crash_per_million: setup.pick(&[0, 1_000, 3_000, 10_000]),
            max_down_ns: setup.pick(&[20, 300, 1_000]) * MS,
            partition_per_million: setup.pick(&[0, 1_000, 4_000]),
            heal_per_million: setup.pick(&[2_000, 10_000]),
            clock_jump_per_million: setup.pick(&[0, 500, 2_000]),
            junk_per_million: setup.pick(&[0, 2_000]),
            crash_after_vote_per_million: setup.pick(&[0, 200_000, 1_000_000]),
            crash_after_commit_per_million: setup.pick(&[0, 2_000, 20_000]),
            crash_after_election_per_million: setup.pick(&[0, 100_000, 300_000]),
            crash_after_ack_per_million: setup.pick(&[0, 500, 5_000]),
        }
    }
}

impl Simulation {
    pub(super) fn inject_faults(&mut self) -> Check {
        let rates = self.rates;
        let storage = self.config.storage;
        if self.faults.chance(rates.crash_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let down = self.faults.between(MS, rates.max_down_ns);
            if self.faults.chance(storage.power_crash_share_per_million) {
                self.power_loss(&[index], self.now_ns + down)?;
            } else {
                self.crash(index, self.now_ns + down);
            }
        }
        if self.faults.chance(storage.power_loss_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let down = self.faults.between(MS, rates.max_down_ns);
            self.power_loss(&[index], self.now_ns + down)?;
        }
        if self.faults.chance(storage.majority_power_loss_per_million) {
            let members = self.nodes.len();
            let count = if self.faults.below(2) == 0 { members } else { members / 2 + 1 };
            let mut indexes: Vec<usize> = (0..members).collect();
            for i in 0..count {
                let j = i + self.faults.below((members - i) as u64) as usize;
                indexes.swap(i, j);
            }
            let down = self.faults.between(MS, rates.max_down_ns);
            self.summary.majority_power_losses += 1;
            self.power_loss(&indexes[..count], self.now_ns + down)?;
        }
        if self.network.partitioned() {
            if self.faults.chance(rates.heal_per_million) {
                self.network.heal();
            }
        } else if self.faults.chance(rates.partition_per_million) {
            self.summary.partitions += 1;
            self.network.partition(&mut self.faults);
        }
        if self.faults.chance(rates.clock_jump_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let jump = self.faults.between(10, 1_000) * MS;
            self.nodes[index].clock_offset_ns += jump;
            self.trace(format_args!("member {}'s clock jumps {} ms forward", index + 1, jump / MS));
        }
        if self.faults.chance(rates.junk_per_million) {
            self.inject_junk()?;
        }
        Ok(())
    }

    /// A process crash: the member's core stops, and everything it wrote stays in the page cache.
    pub(super) fn crash(&mut self, index: usize, until_ns: u64) {
        self.trace(format_args!("member {} crashes until {} ms", index + 1, until_ns / MS));
        let node = &mut self.nodes[index];
        if node.core.take().is_some() {
            self.summary.crashes += 1;
        }
        node.replicate_from = None;
        node.down_until = Some(node.down_until.map_or(until_ns, |at| at.max(until_ns)));
        self.checker.forget_leader_log(node.id);
    }

    /// The members at `indexes` lose power at once, running or not. Each log keeps what it synced and,
    /// in half the cases, a random run of entries after that (what the operating system happened to write
    /// back; a torn entry is cut when the log is read back). The term and vote were synced, so they stay.
    /// The state machine keeps what the surviving log holds: under `batch` that is everything it applied
    /// (a member applies only what it synced), under `none` maybe less. Then every committed entry must
    /// still be held by a majority.
    pub(super) fn power_loss(&mut self, indexes: &[usize], until_ns: u64) -> Check {
        let mut cut_from = usize::MAX;
        for &index in indexes {
            self.crash(index, until_ns);
            self.summary.power_losses += 1;
            let unsynced = self.nodes[index].log.unsynced_entries();
            let kept = if self.faults.below(2) == 0 { 0 } else { self.faults.below(unsynced as u64 + 1) as usize };
            self.nodes[index].log.lose_unsynced(kept);
            self.summary.lost_entries += (unsynced - kept) as u64;
            let lost = unsynced - kept;
            self.trace(format_args!("member {} loses power: {lost} of {unsynced} un-synced entries lost", index + 1));
            let node = &mut self.nodes[index];
            let count = node.log.entries().len();
            if node.applied > count {
                if self.config.storage.policy == SyncPolicy::Batch && self.config.check_durability {
                    return Err(format!(
                        "member {} applied {} entries, but only {count} survived its power loss under batch",
                        node.id, node.applied
                    ));
                }
                node.applied = count;
                node.applied_position = node.log.end();
            }
            cut_from = cut_from.min(count);
        }
        let ids: Vec<_> = indexes.iter().map(|&index| self.nodes[index].id).collect();
        self.check_held(cut_from, &format!("a power loss of members {ids:?}"))
    }

    /// The faults stop: the network heals and loses nothing, clocks stop jumping, and every member
    /// restarts, except (in half the runs) a minority that stays down (crashed, or without power in the
    /// run's share of crashes).
    pub(super) fn heal(&mut self) -> Check {
        self.network.heal();
        self.network.faults = Faults::NONE;
        let minority = (self.nodes.len() - 1) / 2;
        let mut stay_down =
            if self.faults.below(2) == 0 { self.faults.between(0, minority as u64) as usize } else { 0 };
        if self.config.membership {
            // Which members a minority is depends on the configuration in effect: all of them come back.
            stay_down = 0;
        }
        for index in 0..self.nodes.len() {
            if index < stay_down {
                if self.faults.chance(self.config.storage.power_crash_share_per_million) {
                    self.power_loss(&[index], u64::MAX)?;
                } else {
                    self.crash(index, u64::MAX);
                }
            } else if self.nodes[index].down_until.is_some() {
                self.nodes[index].down_until = Some(self.now_ns);
            }
        }
        self.healed = Some(self.next_entry_id);
        self.trace(format_args!("faults stop; {stay_down} member(s) stay down; timers {:?}", self.timers));
        Ok(())
    }

    pub(super) fn restart_due(&mut self) -> Check {
        for index in 0..self.nodes.len() {
            if self.nodes[index].down_until.is_some_and(|at| at <= self.now_ns) {
                self.restart(index)?;
            }
        }
        Ok(())
    }

    /// Starts a core from what the member persisted: its term and vote, its log, and what it applied.
    /// Under `batch` the driver first syncs the log it reads back (after a process crash the page cache
    /// may hold writes never synced), so the core may count all of it.
    pub(super) fn restart(&mut self, index: usize) -> Check {
        let now = self.local_now(index);
        let batch = self.config.storage.policy == SyncPolicy::Batch;
        let node = &mut self.nodes[index];
        if batch {
            node.log.sync_all();
        }
        node.down_until = None;
        node.incarnation += 1;
        let config = CoreConfig {
            member_id: node.id,
            members: (1..=self.config.members as MemberId).collect(),
            timers: self.timers,
            seed: Rng::derive(self.config.seed, 1000 * node.id as u64 + node.incarnation).next_u64(),
            bugs: self.config.bugs,
        };
        let durable = DurableState {
            leadership_term_id: node.term,
            voted_for: node.vote,
            term_history: node.log.term_history(),
            append_position: node.log.end(),
            commit_position: node.applied_position,
            memberships: node
                .log
                .membership_entries()
                .map(|(id, end)| (end, self.configurations[&id].clone()))
                .collect(),
        };
        let core = ConsensusCore::new(config, durable, now).map_err(|e| format!("member {} restart: {e}", node.id))?;
        node.core = Some(core);
        Ok(())
    }

    /// Junk a correct core must drop: undecodable bytes, messages claiming its own id, requests from a
    /// member configured with another member list.
    pub(super) fn inject_junk(&mut self) -> Check {
        let index = self.faults.below(self.nodes.len() as u64) as usize;
        let Some(core) = &self.nodes[index].core else { return Ok(()) };
        let term = core.leadership_term_id();
        let members = self.nodes.len() as MemberId;
        let before = *core.counters();
        match self.faults.below(3) {
            0 => {
                let length = self.faults.below(64) as usize;
                let bytes: Vec<u8> = (0..length).map(|_| self.faults.next_u64() as u8).collect();
                if let Ok((sender, message)) = wire::decode(&bytes) {
                    if !(1..=members).contains(&sender) {
                        self.input(index, |core, now, out| core.on_message(sender, message, now, out))?;
                    }
                }
            }
            1 => {
                // A message claiming to be the target's own (the driver vouches for every other sender).
                let stranger = self.nodes[index].id;
                let message = Message::NewLeadershipTerm {
                    leadership_term_id: term + 1,
                    log_leadership_term_id: 0,
                    next_leadership_term_id: term + 1,
                    next_term_base_position: 0,
                    commit_position: 0,
                };
                self.input(index, |core, now, out| core.on_message(stranger, message, now, out))?;
                self.expect_counted(index, before.non_member, |c| c.non_member)?;
            }
            _ => {
                // A member the target knows (the run's members, unless the membership changed).
                let known: Vec<MemberId> = core.membership().members().collect();
                let member = known[self.faults.below(known.len() as u64) as usize];
                if member != self.nodes[index].id {
                    let message = Message::RequestVote {
                        candidate_term_id: term + 1,
                        log_leadership_term_id: i64::MAX / 2,
                        log_position: i64::MAX / 2,
                        membership_hash: 0xbad,
                    };
                    self.input(index, |core, now, out| core.on_message(member, message, now, out))?;
                    self.expect_counted(index, before.membership_mismatch, |c| c.membership_mismatch)?;
                    let after = self.nodes[index].core.as_ref().map_or(term, |c| c.leadership_term_id());
                    if after != term {
                        return Err(format!("a foreign vote request moved member {member}'s term to {after}"));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn expect_counted(&self, index: usize, before: u64, counter: impl Fn(&CoreCounters) -> u64) -> Check {
        let after = self.nodes[index].core.as_ref().map_or(before + 1, |c| counter(c.counters()));
        if after == before + 1 {
            Ok(())
        } else {
            Err(format!("member {} did not count a junk message ({before} -> {after})", index + 1))
        }
    }
}
