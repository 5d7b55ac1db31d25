//! The fault schedule: which fault is drawn and when, how each is put in force and ended, and the
//! restarts, crashes and power losses of members (each checked to keep what it synced).

use super::*;

/// A fault in force and when it ends.
#[derive(Clone, Debug)]
pub(super) enum Fault {
    /// Loss, duplication and delay on every link.
    Lossy(LinkFaults),
    /// Links cut from one host to another, one way or both.
    Cut { from: usize, to: usize, both: bool },
    /// A member split from all the others, both ways.
    Isolate(usize),
    /// A member paused.
    Pause(usize),
    /// The path carries less than the MTU.
    ClampMtu(usize),
    /// A member's process stops and starts again (once, when drawn).
    Restart(usize),
    /// A member's process is killed (no close) and started again (once, when drawn).
    Crash(usize),
    /// These members' machines lose power at once and start again (once, when drawn).
    PowerLoss(Vec<usize>),
    /// A member's disk fails at these rates.
    FailingDisk(usize, DiskFaults),
    /// The leader is asked to hand its leadership to this member (or to the follower furthest along).
    Transfer(Option<usize>),
    /// A member's clocks jump (once, when drawn): its monotonic clock forward by `monotonic_ns` (as after
    /// the host stopped it), its wall clock by `wall_ns` either way (as NTP steps it).
    ClockJump { member: usize, monotonic_ns: u64, wall_ns: i64 },
}

/// How a member's process stops before it starts again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// Closed, as on a clean shutdown.
    Clean,
    /// Killed: nothing of its close path reaches the disk.
    Crash,
    /// Its machine lost power (its disk already lost what was not synced).
    PowerLoss,
}

impl Simulation {
    /// Starts a drawn fault, now and then, while fewer than two are in force.
    pub(super) fn maybe_start_fault(&mut self) -> Result<(), SimFailure> {
        if self.faults.len() >= 2 || !self.prng.chance(0.002) {
            return Ok(());
        }
        let n = self.nodes.len();
        let duration = self.prng.between(50_000_000, 600_000_000);
        let kinds = match self.config.schedule {
            Schedule::Network => 5,
            Schedule::Full => 7,
            Schedule::Disk => 12,
        };
        let batch = self.config.storage == Some(SyncPolicy::Batch);
        let fault = match self.prng.below(kinds) {
            0 => Fault::Lossy(LinkFaults {
                loss: self.prng.between(1, 20) as f64 / 100.0,
                duplicate: self.prng.between(0, 10) as f64 / 100.0,
                min_delay_ns: 10_000,
                max_delay_ns: self.prng.between(50_000, 5_000_000),
            }),
            1 => {
                let from = self.prng.below(n);
                let to = (from + 1 + self.prng.below(n - 1)) % n;
                Fault::Cut { from, to, both: self.prng.chance(0.5) }
            }
            2 => Fault::Isolate(self.prng.below(n)),
            3 => Fault::Pause(self.prng.below(n)),
            // A path that carries exactly the MTU's datagrams (a smaller one stops the Sender's channel with an
            // error naming the MTU that fits, by design: tests/path_mtu.rs).
            // With a key, the tag rides after the MTU's bytes.
            4 => Fault::ClampMtu(1408 + if self.config.auth { quorumcast_driver::media::auth::TAG_LENGTH } else { 0 }),
            5 => Fault::Restart(self.prng.below(n)),
            6 => Fault::ClockJump {
                member: self.prng.below(n),
                monotonic_ns: self.prng.between(0, 2_000_000_000),
                wall_ns: self.prng.between(0, 20_000_000_000) as i64 - 10_000_000_000,
            },
            7 => Fault::Crash(self.prng.below(n)),
            8 if batch => Fault::PowerLoss(vec![self.prng.below(n)]),
            9 if batch => {
                let mut all: Vec<usize> = (0..n).collect();
                self.prng.shuffle(&mut all);
                all.truncate(n / 2 + 1);
                all.sort_unstable();
                Fault::PowerLoss(all)
            }
            8 | 9 => Fault::Crash(self.prng.below(n)),
            11 => Fault::Transfer(self.prng.chance(0.5).then(|| self.prng.below(n))),
            _ => {
                let member = self.prng.below(n);
                let rate = self.prng.between(1, 30) as f64 / 100.0;
                let faults = match self.prng.below(if self.config.misdirect { 5 } else { 4 }) {
                    0 => DiskFaults { write_error: rate, ..DiskFaults::default() },
                    1 => DiskFaults { write_error: rate, full: true, ..DiskFaults::default() },
                    // Under `none` a failed writeback loses acknowledged bytes as a power loss does, which
                    // that policy does not protect against (its docs say so): syncs fail only under `batch`.
                    2 if batch => DiskFaults { sync_error: rate, ..DiskFaults::default() },
                    2 => DiskFaults { write_error: rate, ..DiskFaults::default() },
                    3 => DiskFaults { read_flip: rate, ..DiskFaults::default() },
                    // Misdirected writes at a tenth of the rate (each one damages what was written before).
                    _ => DiskFaults { misdirect: rate / 10.0, ..DiskFaults::default() },
                };
                Fault::FailingDisk(member, faults)
            }
        };
        if let Fault::Restart(m) | Fault::Crash(m) = fault {
            if self.nodes[m].disk_failing || self.nodes[m].down {
                return Ok(());
            }
        }
        if let Fault::PowerLoss(members) = &fault {
            if members.iter().any(|&m| self.nodes[m].disk_failing || self.nodes[m].down) {
                return Ok(());
            }
        }
        if let Fault::FailingDisk(m, _) = fault {
            if self.faults.iter().any(|(f, _)| matches!(f, Fault::FailingDisk(o, _) if *o == m)) {
                return Ok(());
            }
        }
        let once = matches!(fault, Fault::Restart(_) | Fault::Crash(_) | Fault::PowerLoss(_) | Fault::Transfer(_));
        if once || matches!(fault, Fault::ClockJump { .. }) {
            // Done once, now: nothing to heal.
            self.trace(|| format!("fault: {fault:?}"));
            self.report.faults += 1;
            return self.apply_fault(&fault);
        }
        self.apply_fault(&fault)?;
        self.report.faults += 1;
        let until = self.now_ns + duration;
        self.trace(|| format!("fault until {} ms: {fault:?}", until / 1_000_000));
        self.faults.push((fault, until));
        Ok(())
    }

    fn apply_fault(&mut self, fault: &Fault) -> Result<(), SimFailure> {
        let host = |i: usize| address(i as i32, 0).ip();
        match fault {
            Fault::Lossy(faults) => self.network.set_faults(*faults),
            &Fault::Cut { from, to, both } => {
                self.network.cut(host(from), host(to));
                if both {
                    self.network.cut(host(to), host(from));
                }
            }
            &Fault::Isolate(member) => {
                for other in (0..self.nodes.len()).filter(|&o| o != member) {
                    self.network.cut(host(member), host(other));
                    self.network.cut(host(other), host(member));
                }
            }
            &Fault::Pause(member) => self.nodes[member].paused_until_ns = u64::MAX,
            &Fault::ClampMtu(payload) => self.network.clamp_payload(payload),
            // A member whose log is only in memory forgets what it acknowledged: Raft needs it kept.
            &Fault::Restart(member) if self.config.storage.is_some() => {
                self.restart_holding(member, Stop::Clean, self.synced_position(member))?
            }
            &Fault::Crash(member) if self.config.storage.is_some() => {
                self.restart_holding(member, Stop::Crash, self.synced_position(member))?
            }
            Fault::PowerLoss(members) if self.config.storage.is_some() => {
                let synced: Vec<Option<i64>> = members.iter().map(|&m| self.synced_position(m)).collect();
                for &member in members {
                    self.nodes[member].disk.power_loss();
                    self.report.power_losses += 1;
                }
                for (&member, synced) in members.iter().zip(synced) {
                    self.restart_holding(member, Stop::PowerLoss, synced)?;
                }
            }
            Fault::Restart(_) | Fault::Crash(_) | Fault::PowerLoss(_) => {}
            &Fault::Transfer(to) => {
                let leader = self.nodes.iter().position(|n| n.node.role() == Role::Leader && !n.down);
                if let Some(leader) = leader {
                    let result = self.nodes[leader].node.transfer_leadership(to.map(|t| t as i32));
                    self.trace(|| format!("member {leader} asked to hand its leadership to {to:?}: {result:?}"));
                }
            }
            &Fault::FailingDisk(member, faults) => {
                self.nodes[member].disk.set_faults(faults);
                self.nodes[member].disk_failing = true;
            }
            &Fault::ClockJump { member, monotonic_ns, wall_ns } => {
                let node = &mut self.nodes[member];
                node.skew_ns += monotonic_ns;
                node.time.jump_wall_clock(wall_ns);
            }
        }
        Ok(())
    }

    /// Member `i`'s recorder's synced position: what it may acknowledge, and must hold after any restart
    /// (`batch` only: under `none` it is what was written, which a failed writeback may lose).
    pub(super) fn synced_position(&self, i: usize) -> Option<i64> {
        let batch = self.config.storage == Some(SyncPolicy::Batch);
        batch.then(|| crate::cluster::counter_value(&self.nodes[i].node, "recorder synced position")).flatten()
    }

    /// Restarts member `i` (as [`restart`](Self::restart)) and checks that its recorded log still reaches
    /// `synced`, what it reported synced before it stopped.
    pub(super) fn restart_holding(&mut self, i: usize, stop: Stop, synced: Option<i64>) -> Result<(), SimFailure> {
        self.restart(i, stop)?;
        let recovered = crate::cluster::counter_value(&self.nodes[i].node, "recorder position");
        let repairing_to = crate::cluster::counter_value(&self.nodes[i].node, REPAIRING_TO).unwrap_or(0);
        if repairing_to > 0 {
            self.report.repairs += 1;
            self.trace(|| format!("member {i} repairs its log: it held up to {repairing_to}, now {recovered:?}"));
        }
        match (synced, recovered) {
            // A loss the member knows of: it repairs, and neither stands nor votes for a shorter log until
            // it holds what it synced again (checked at every step).
            (Some(synced), Some(_)) if repairing_to >= synced => Ok(()),
            (Some(synced), Some(recovered)) if recovered < synced => {
                Err(self.failure(Violation::LostDurable { member: i, synced, recovered }))
            }
            _ => Ok(()),
        }
    }

    /// Stops member `i`'s process as `stop` says (closed, killed, or its machine's power lost: then its
    /// disk already lost what was not synced), and starts it again on the same directories, disk and
    /// clock. A node that refuses to start on a healthy disk is a violation.
    fn restart(&mut self, i: usize, stop: Stop) -> Result<(), SimFailure> {
        let id = i as i32;
        if stop == Stop::Crash {
            self.nodes[i].disk.crash();
        }
        let time = Arc::clone(&self.nodes[i].time);
        let busy_ns = Arc::clone(&self.nodes[i].busy_ns);
        let disk = self.nodes[i].disk.clone();
        // The old process goes first: its endpoints and directory are free for the new one. Killed, its
        // close path runs but writes nothing: its disk handles fail.
        let builder = node_builder(&self.scratch, id, node_file(&self.members, id, &self.config), &self.config);
        let SimNode { node: old, skew_ns, .. } = self.nodes.remove(i);
        self.report.catch_ups += crate::cluster::counter_value(&old, "recorder catch-ups made").unwrap_or(0) as u64;
        drop(old);
        let env = environment(&self.config, &self.network, id, &time, &busy_ns, &disk, self.prng.next_u64());
        let node = match builder.start_in(env) {
            Ok(node) => node,
            Err(e) => {
                let failure = self.failure(Violation::RefusedStart { member: i, error: e.to_string() });
                return Err(failure);
            }
        };
        let seen = (Role::Follower, -1, None);
        let (disk_failing, down, mut state) = (false, false, state::SimState::new(self.config.service));
        let mut node = node;
        let restored = match self.config.snapshots {
            true => node.restore(&mut state),
            false => Ok(None),
        };
        let restarted =
            SimNode { node, time, paused_until_ns: 0, seen, skew_ns, busy_ns, disk, disk_failing, down, state };
        self.nodes.insert(i, restarted);
        self.checker.restarted(i);
        match restored {
            Ok(_) => self.check_loaded(i)?,
            Err(e) => {
                let error = format!("restoring its snapshot: {e}");
                return Err(self.failure(Violation::RefusedStart { member: i, error }));
            }
        }
        self.report.restarts += 1;
        Ok(())
    }

    /// Now and then, a host outside the cluster sends a member random bytes, or a member's datagram it
    /// saw, from its own address: every member must count and drop it.
    pub(super) fn maybe_forge(&mut self) {
        if !self.prng.chance(0.01) {
            return;
        }
        let outsider = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 200)), 40_100);
        let member = self.prng.below(self.nodes.len()) as i32;
        let port = [40_100, 40_200][self.prng.below(2)];
        let to = address(member, port);
        let bytes = match self.network.recent(self.prng.below(64)) {
            Some(seen) if self.prng.chance(0.7) => seen,
            _ => (0..self.prng.between(1, 1400)).map(|_| self.prng.next_u64() as u8).collect(),
        };
        self.network.inject(outsider, to, &bytes);
        self.report.forged += 1;
    }

    /// Ends the faults whose time is up (all of them with `all`): the network heals, a failing disk is
    /// healthy again (its member started again if it stopped), then the faults still in force are put back.
    pub(super) fn end_faults(&mut self, all: bool) -> Result<(), SimFailure> {
        let now = self.now_ns;
        let ended: Vec<Fault> =
            self.faults.iter().filter(|(_, until)| all || *until <= now).map(|(f, _)| f.clone()).collect();
        if ended.is_empty() {
            return Ok(());
        }
        self.faults.retain(|(_, until)| !all && *until > now);
        for fault in &ended {
            self.trace(|| format!("fault over: {fault:?}"));
            match *fault {
                Fault::Pause(member) => self.nodes[member].paused_until_ns = 0,
                Fault::FailingDisk(member, _) => {
                    self.nodes[member].disk.set_faults(DiskFaults::default());
                    self.nodes[member].disk_failing = false;
                    if self.nodes[member].down {
                        self.trace(|| format!("member {member} starts again on its healthy disk"));
                        let synced = self.synced_position(member);
                        self.restart_holding(member, Stop::Crash, synced)?;
                    }
                }
                _ => {}
            }
        }
        self.network.heal();
        self.network.set_faults(LinkFaults::QUIET);
        self.network.clamp_payload(quorumcast_driver::frame::MAX_UDP_PAYLOAD_LENGTH);
        let still: Vec<Fault> = self.faults.iter().map(|(f, _)| f.clone()).collect();
        for fault in &still {
            if !matches!(fault, Fault::FailingDisk(..)) {
                self.apply_fault(fault)?;
            }
        }
        Ok(())
    }
}
