//! The faults of the chaos phase (crashes, partitions, clock jumps, junk messages), the restarts, and
//! the end of the faults.

use quorumcast::consensus_core::{wire, ConsensusCore, CoreConfig, CoreCounters, DurableState, MemberId, Message};

use super::super::checker::Check;
use super::super::network::Faults;
use super::super::prng::Rng;
use super::{Simulation, MS};

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
        }
    }
}

impl Simulation {
    pub(super) fn inject_faults(&mut self) -> Check {
        let rates = self.rates;
        if self.faults.chance(rates.crash_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let down = self.faults.between(MS, rates.max_down_ns);
            self.crash(index, self.now_ns + down);
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

    /// The faults stop: the network heals and loses nothing, clocks stop jumping, and every member
    /// restarts, except (in half the runs) a minority that stays down.
    pub(super) fn heal(&mut self) {
        self.network.heal();
        self.network.faults = Faults::NONE;
        let minority = (self.nodes.len() - 1) / 2;
        let stay_down = if self.faults.below(2) == 0 { self.faults.between(0, minority as u64) as usize } else { 0 };
        for index in 0..self.nodes.len() {
            if index < stay_down {
                self.crash(index, u64::MAX);
            } else if self.nodes[index].down_until.is_some() {
                self.nodes[index].down_until = Some(self.now_ns);
            }
        }
        self.healed = Some(self.next_entry_id);
        self.trace(format_args!("faults stop; {stay_down} member(s) stay down; timers {:?}", self.timers));
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
    pub(super) fn restart(&mut self, index: usize) -> Check {
        let now = self.local_now(index);
        let node = &mut self.nodes[index];
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
        };
        let core = ConsensusCore::new(config, durable, now).map_err(|e| format!("member {} restart: {e}", node.id))?;
        node.core = Some(core);
        Ok(())
    }

    /// Junk a correct core must drop: undecodable bytes, messages from non-members, requests from a
    /// member configured with another member list.
    pub(super) fn inject_junk(&mut self) -> Check {
        let index = self.faults.below(self.nodes.len() as u64) as usize;
        let Some(core) = &self.nodes[index].core else { return Ok(()) };
        let term = core.leadership_term_id();
        let members = self.config.members as MemberId;
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
                let stranger = members + 1 + self.faults.below(100) as MemberId;
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
                let member = 1 + self.faults.below(members as u64) as MemberId;
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
