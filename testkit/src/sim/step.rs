//! One step of a run: time moves, the network delivers, every running member is invoked and its
//! committed entries handed to the checker, the client offers; and what is checked at each step.

use super::*;

impl Simulation {
    /// One step: time moves, the network delivers, every running node is invoked in a drawn order, the
    /// client offers, the checker reads what every node applied.
    pub(super) fn step(&mut self) -> Result<(), SimFailure> {
        self.step += 1;
        self.now_ns += self.prng.between(20_000, 400_000);
        for node in &self.nodes {
            node.time.advance_to(self.now_ns + node.skew_ns);
        }
        self.network.pump(self.now_ns);
        if self.config.schedule == Schedule::Full {
            self.maybe_forge();
        }
        if let Some(forger) = self.outside.forger.as_mut() {
            forger.step(&self.network, self.now_ns);
            if self.step % 512 == 0 {
                self.check_bounds()?;
            }
        }
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        self.prng.shuffle(&mut order);
        for i in order {
            if self.nodes[i].paused_until_ns > self.now_ns {
                continue;
            }
            for _ in 0..self.prng.between(1, 3) {
                if let Err(e) = self.nodes[i].node.invoke() {
                    if self.nodes[i].disk_failing {
                        // What it must do: stop rather than go on over writes it cannot make durable.
                        self.trace(|| format!("member {i} stopped on its failing disk: {e}"));
                        self.nodes[i].down = true;
                        self.nodes[i].paused_until_ns = u64::MAX;
                        self.report.stopped_by_disk += 1;
                        break;
                    }
                    let error = e.to_string();
                    if self.damage_found(i, &error) {
                        self.trace(|| format!("member {i} stopped on its damaged recording, restarted: {error}"));
                        self.report.damage_restarts += 1;
                        let synced = self.synced_position(i);
                        self.restart_holding(i, Stop::Crash, synced)?;
                        break;
                    }
                    return Err(self.failure(Violation::AgentFailed { member: i, error }));
                }
                let busy = self.nodes[i].busy_ns.swap(0, std::sync::atomic::Ordering::Relaxed);
                if busy > 0 {
                    self.nodes[i].paused_until_ns = self.now_ns + busy;
                    self.trace(|| format!("member {i} busy {} ms making a log file", busy / 1_000_000));
                    break;
                }
            }
            self.apply(i)?;
            self.trace_role(i);
            self.check_repairing(i)?;
        }
        self.offer();
        self.settle_membership_change();
        self.outside.client_time.advance_to(self.now_ns);
        if let Some(remote) = self.outside.remote.as_mut() {
            if let Err(violation) = remote.step(&mut self.checker, &mut self.report.clients) {
                return Err(self.failure(violation));
            }
        }
        Ok(())
    }

    /// What the network and the members hold stays bounded under forged traffic: datagrams waiting (a
    /// socket buffer's worth per endpoint), streams open (a member accepts a bounded number at once, and the
    /// forger holds some more), files in a node's directory (an image per log, never one per forged SETUP).
    fn check_bounds(&mut self) -> Result<(), SimFailure> {
        let n = self.nodes.len();
        let datagrams = (self.network.held(), 4096 * 8 * n);
        let streams = (self.network.streams(), 64 + 24 + 2 * n);
        if datagrams.0 > datagrams.1 {
            let what = "datagrams held by the network".to_string();
            return Err(self.failure(Violation::Unbounded { what, held: datagrams.0, bound: datagrams.1 }));
        }
        if streams.0 > streams.1 {
            let what = "streams open".to_string();
            return Err(self.failure(Violation::Unbounded { what, held: streams.0, bound: streams.1 }));
        }
        for i in 0..n {
            let sessions = self.nodes[i].node.client_sessions();
            let most = ClientEndpointConfig::default().max_sessions;
            if sessions > most {
                let what = format!("remote client sessions in member {i}'s table");
                return Err(self.failure(Violation::Unbounded { what, held: sessions, bound: most }));
            }
            let dir = self.scratch.join(format!("node-{i}"));
            let files = std::fs::read_dir(&dir).map_or(0, Iterator::count);
            if files > 24 {
                let what = format!("files in member {i}'s node directory");
                return Err(self.failure(Violation::Unbounded { what, held: files, bound: 24 }));
            }
        }
        Ok(())
    }

    /// Hands member `i`'s committed entries to the checker.
    fn apply(&mut self, i: usize) -> Result<(), SimFailure> {
        let mut applied = Vec::new();
        if self.config.snapshots {
            let member = &mut self.nodes[i];
            if let Err(e) = member.node.poll_state(&mut member.state, self.config.apply_per_step) {
                if !member.disk_failing {
                    let error = format!("poll_state: {e}");
                    return Err(self.failure(Violation::AgentFailed { member: i, error }));
                }
                // A snapshot it could not write (or load) on its failing disk: it stops, as it must, and a
                // state it was loading when the load failed is not used (the node said so).
                self.trace(|| format!("member {i} stopped on its failing disk: {e}"));
                self.nodes[i].state.loaded = None;
                if let Some(service) = self.nodes[i].state.service.as_mut() {
                    service.loaded = None;
                }
                self.nodes[i].down = true;
                self.nodes[i].paused_until_ns = u64::MAX;
                self.report.stopped_by_disk += 1;
            }
            if self.nodes[i].state.loaded.is_some() {
                self.report.snapshots_loaded += 1;
                self.check_loaded(i)?;
            }
            self.check_service(i)?;
            applied = std::mem::take(&mut self.nodes[i].state.applied);
            if let Some((session, got, expected)) = self.nodes[i].state.out_of_order.take() {
                return Err(self.failure(Violation::SessionOrder { member: i, session, got, expected }));
            }
        } else {
            self.nodes[i]
                .node
                .poll_positions(self.config.apply_per_step, |entry, end| applied.push((end, entry.to_vec())));
        }
        for (end, entry) in applied {
            if let Err(violation) = self.checker.on_applied(i, end, &entry) {
                return Err(self.failure(violation));
            }
        }
        if let Some(e) = self.nodes[i].node.recording_error() {
            // The reader of committed entries gave up on the recorded log: this member applies nothing more.
            let error = format!("its replay of the recorded log stopped: {e}");
            if self.nodes[i].disk_failing {
                // Its disk fails reads for longer than the replay waits: it stops applying and says so, as
                // it must; started again once the disk is healthy.
                self.trace(|| format!("member {i} stopped on its failing disk: {error}"));
                self.nodes[i].down = true;
                self.nodes[i].paused_until_ns = u64::MAX;
                self.report.stopped_by_disk += 1;
                return Ok(());
            }
            if !self.damage_found(i, &error) {
                return Err(self.failure(Violation::AgentFailed { member: i, error }));
            }
            // Its disk misdirected writes: the damage is real, and the node said so. Its operator starts it
            // again, and it repairs (it must not have lost what it synced without knowing it).
            self.trace(|| format!("member {i} restarted to repair its damaged recording: {error}"));
            self.report.damage_restarts += 1;
            let synced = self.synced_position(i);
            return self.restart_holding(i, Stop::Crash, synced);
        }
        Ok(())
    }

    /// The snapshot member `i`'s application loaded, if it loaded one: its state (and its service's) is
    /// the committed order's at its position.
    pub(super) fn check_loaded(&mut self, i: usize) -> Result<(), SimFailure> {
        let Some((position, digest)) = self.nodes[i].state.loaded.take() else {
            return Ok(());
        };
        let mut checked = self.checker.on_snapshot(i, position, digest);
        if let Some((at, state)) = self.nodes[i].state.service.as_mut().and_then(|s| s.loaded.take()) {
            checked = checked.and_then(|()| self.checker.on_service_snapshot(i, at, state));
        }
        checked.map_err(|violation| self.failure(violation))
    }

    /// What member `i`'s service did since the last look: the entries it offered itself are known to the
    /// checker as offered, what it found broken fails the run, and what each entry's callbacks left is
    /// compared with the other members'.
    fn check_service(&mut self, i: usize) -> Result<(), SimFailure> {
        let Some(service) = self.nodes[i].state.service.as_mut() else {
            return Ok(());
        };
        for payload in std::mem::take(&mut service.offered) {
            self.checker.offered(service::own_seq(&payload), &payload);
        }
        if let Some(detail) = service.violation.take() {
            return Err(self.failure(Violation::Service { member: i, detail }));
        }
        let reports = std::mem::take(&mut service.reports);
        for report in &reports {
            if let Err(violation) = self.checker.on_service(i, report) {
                return Err(self.failure(violation));
            }
        }
        Ok(())
    }

    /// Whether member `i` stopped (or stopped applying) on a block of its recording that does not verify,
    /// on a disk that misdirected writes: damage it must report and stop on (as it must on a failing
    /// disk), and repair once started again.
    fn damage_found(&self, i: usize, error: &str) -> bool {
        const DAMAGE: [&str; 6] = [
            "fails its checksum",
            "was expected",
            "no block header",
            "a block length of",
            "a block covering",
            "left in the file",
        ];
        self.nodes[i].disk.stats().misdirected > 0 && DAMAGE.iter().any(|why| error.contains(why))
    }

    /// Whether a majority of the members repair their logs (each lost bytes it had synced and may have
    /// acknowledged toward a commit).
    pub(super) fn majority_repairing(&self) -> bool {
        let repairing = self
            .nodes
            .iter()
            .filter(|n| crate::cluster::counter_value(&n.node, REPAIRING_TO).is_some_and(|held| held > 0))
            .count();
        repairing > self.nodes.len() / 2
    }

    /// A member repairing its log (it lost bytes it had synced) never stands or leads: its votes and its
    /// log no longer hold what it acknowledged.
    fn check_repairing(&self, i: usize) -> Result<(), SimFailure> {
        let node = &self.nodes[i].node;
        let role = node.role();
        if !matches!(role, Role::Candidate | Role::Leader) {
            return Ok(());
        }
        match crate::cluster::counter_value(node, REPAIRING_TO) {
            Some(held) if held > 0 => Err(self.failure(Violation::StoodWhileRepairing { member: i, role, held })),
            _ => Ok(()),
        }
    }

    /// Traces member `i`'s role, term or leader when one changed.
    fn trace_role(&mut self, i: usize) {
        if !self.config.trace {
            return;
        }
        let node = &self.nodes[i].node;
        let now = (node.role(), node.leadership_term_id(), node.leader_id());
        let (commit, applied) = (node.commit_position(), node.applied_position());
        if now != self.nodes[i].seen {
            self.nodes[i].seen = now;
            self.trace(|| {
                format!(
                    "member {i}: {} in term {} (leader {:?}), commit {commit} applied {applied}",
                    now.0, now.1, now.2
                )
            });
        }
    }

    /// Offers the next numbered message to whichever node leads, now and then.
    fn offer(&mut self) {
        if !self.prng.chance(0.3) {
            return;
        }
        let Some(leader) =
            self.nodes.iter().position(|n| n.node.role() == Role::Leader && n.paused_until_ns <= self.now_ns)
        else {
            return;
        };
        let message = crate::load::derived_message(self.next_message);
        match self.nodes[leader].node.client().offer(&message) {
            Ok(_) => {
                self.checker.offered(self.next_message, &message);
                self.next_message += 1;
                self.report.offered += 1;
            }
            Err(e) => {
                self.refused += 1;
                if self.refused.is_power_of_two() {
                    let seq = self.next_message;
                    self.trace(|| format!("member {leader} refused message {seq}: {e} ({} refusals)", seq));
                }
            }
        }
    }
}
