//! The stand-ins for the Sender and Receiver (followers fetch the leader's log, the leader answers)
//! and the clients (which append at a leader).

use quorumcast_consensus::consensus_core::{MemberId, Role};

use super::super::checker::Check;
use super::super::log::Entry;
use super::super::network::{Packet, Payload};
use super::{Simulation, FETCH_BATCHES};

impl Simulation {
    /// Each replicating follower asks its leader for the log past its end (the Receiver's stand-in).
    pub(super) fn fetch(&mut self) {
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            if let (Some(_), Some((leader, term))) = (&node.core, node.replicate_from) {
                let fetch = Payload::Fetch { term, position: node.log.end() };
                let packet = Packet { from: node.id, to: leader, payload: fetch };
                self.network.send(packet, self.now_ns);
            }
        }
    }

    /// The leader of `term` sends its log from `position` (the Sender's stand-in).
    pub(super) fn serve_fetch(&mut self, index: usize, to: MemberId, term: i64, position: i64) {
        let most = self.faults.pick(&FETCH_BATCHES);
        let batch = self.faults.between(1, most) as usize;
        let node = &self.nodes[index];
        let Some(core) = &node.core else { return };
        if core.role() != Role::Leader || core.leadership_term_id() != term {
            return;
        }
        if let Some(entries) = node.log.entries_from(position, batch).filter(|e| !e.is_empty()) {
            let payload = Payload::Data { term, position, entries: entries.to_vec() };
            let packet = Packet { from: node.id, to, payload };
            self.network.send(packet, self.now_ns);
        }
    }

    /// A follower appends its leader's log data, one term's run at a time, if it continues its log.
    pub(super) fn accept_data(
        &mut self,
        index: usize,
        from: MemberId,
        term: i64,
        position: i64,
        entries: Vec<Entry>,
    ) -> Check {
        if self.nodes[index].replicate_from != Some((from, term)) || self.nodes[index].log.end() != position {
            return Ok(());
        }
        let mut rest = &entries[..];
        while let Some(first) = rest.first() {
            if self.nodes[index].replicate_from != Some((from, term)) {
                break;
            }
            let run = rest.iter().take_while(|e| e.term == first.term).count();
            let run_term = first.term;
            for &entry in &rest[..run] {
                self.nodes[index].log.push(entry);
                let end = self.nodes[index].log.end();
                self.received(index, entry, end)?;
            }
            rest = &rest[run..];
            self.written(index, run_term)?;
        }
        Ok(())
    }

    /// Half the steps, a client appends an entry at a member that leads and has started its term.
    pub(super) fn client_append(&mut self) -> Check {
        if self.clients.below(2) == 0 {
            return Ok(());
        }
        let Some(index) = self.started_leader() else {
            return Ok(());
        };
        let term = self.nodes[index].core.as_ref().map_or(0, |c| c.leadership_term_id());
        let length = self.clients.between(1, 16) as i64 * 32;
        self.nodes[index].log.push(Entry::plain(term, self.next_entry_id, length, true));
        self.next_entry_id += 1;
        self.written(index, term)
    }

    /// A member that leads and has started its term (its log ends in its term), picked by the clients'
    /// generator; `None` while there is none.
    pub(super) fn started_leader(&mut self) -> Option<usize> {
        let leaders = self.started_leaders();
        (!leaders.is_empty()).then(|| leaders[self.clients.below(leaders.len() as u64) as usize])
    }

    /// The members that lead and have started their term (their log ends in it).
    pub(super) fn started_leaders(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let node = &self.nodes[i];
                node.core.as_ref().is_some_and(|c| {
                    c.role() == Role::Leader
                        && node.log.entries().last().map(|e| e.term) == Some(c.leadership_term_id())
                })
            })
            .collect()
    }
}
