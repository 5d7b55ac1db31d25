//! Where the measuring cluster's threads go: the [`Layout`] of the harness, the leader's Sender and
//! consensus agent and the followers on this host's cores, which agents the harness invokes itself, and
//! the idle strategies that keep busy-spinning threads from outnumbering the cores.

use quorumcast_driver::agent::idle::IdleStrategyConfig;

use crate::probe::ProbeCores;

/// Which core each thread of the harness runs on, and which agents the harness runs itself.
///
/// Invariant: busy-spinning threads never outnumber the host's cores. The Sender busy-spins (`noop`) only
/// when it gets a core of its own. When `invoked`, the harness is the only other thread and idles with the
/// consensus idle strategy under test (two busy threads at most, on two cores). Otherwise every other
/// thread yields or parks when idle, except a consensus agent whose idle strategy under test spins, which
/// has a core of its own (4 cores or more) or, in an explicit layout, shares one as
/// [`Layout::describe`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Cores the process may run on.
    pub cores: usize,
    /// The harness thread runs the leader's consensus agent and both followers through their invokers.
    pub invoked: bool,
    /// Core of the harness thread (load generator and appliers).
    pub harness: Option<usize>,
    /// Core of the leader's sender+receiver thread.
    pub sender: Option<usize>,
    /// Core of the leader's consensus thread.
    pub consensus: Option<usize>,
    /// Core of both followers' threads.
    pub followers: Option<usize>,
    /// The harness runs the whole leader (its Sender too) through its invoker, and a second harness thread
    /// (on the `followers` core) runs both followers through theirs: two threads, no agent thread. The
    /// cluster bench's layout ([`split`](Self::split)); implies `invoked`.
    pub split: bool,
    /// The leader's agents (consensus, Sender, Receiver) share one thread on the `sender` core, idling with
    /// the consensus idle strategy under test, as Aeron's shared threading mode runs them; the harness
    /// yields instead of idling with that strategy. The C probe's second layout
    /// ([`for_c_probe_shared`](Self::for_c_probe_shared)).
    pub leader_shared: bool,
    /// The harness thread runs every member whole (the leader's Sender and Receiver too) through their
    /// invokers on the `harness` core: one thread for the whole cluster, and the process's other cores left
    /// to a client process ([`whole_on`](Self::whole_on)); implies `invoked`.
    pub whole: bool,
}

/// The ids of the cores this process may run on, in order (none where they cannot be read).
fn process_core_ids() -> Vec<usize> {
    core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect()
}

impl Layout {
    /// The layout that suits `cores` cores: the Sender alone on core 1 and the harness on core 0; with 4
    /// cores or more, the consensus agent on core 2 and the followers on core 3, else all of them invoked
    /// by the harness on core 0. One core: nothing pinned, everything but the Sender invoked. The cores are
    /// counted from 0 here; [`on_cores`](Self::on_cores) puts them on a process's own cores.
    pub fn for_cores(cores: usize) -> Self {
        match cores {
            0 | 1 => Self {
                cores,
                invoked: true,
                harness: None,
                sender: None,
                consensus: None,
                followers: None,
                split: false,
                leader_shared: false,
                whole: false,
            },
            2 | 3 => Self {
                cores,
                invoked: true,
                harness: Some(0),
                sender: Some(1),
                consensus: Some(0),
                followers: Some(0),
                split: false,
                leader_shared: false,
                whole: false,
            },
            _ => Self {
                cores,
                invoked: false,
                harness: Some(0),
                sender: Some(1),
                consensus: Some(2),
                followers: Some(3),
                split: false,
                leader_shared: false,
                whole: false,
            },
        }
    }

    /// This host's layout, on the cores this process may run on (a cpuset of cores 2 and 3 puts the
    /// harness on core 2 and the Sender on core 3, where pinning them to cores 0 and 1 would be refused).
    pub fn for_host() -> Self {
        Self::for_cores(quorumcast_driver::agent::available_cores()).on_cores(&process_core_ids())
    }

    /// The core for a client process beside this layout (the client bench's `qc-client`): the first of
    /// this process's cores that no thread of the layout is pinned to, else the Sender's. On 2 cores that
    /// is the Sender's: the harness's core is the one the cluster saturates, and the client, left to the
    /// scheduler, ran there for long stretches while the Sender's core idled. `None` with nothing pinned.
    pub fn client_core(&self) -> Option<usize> {
        let used = [self.harness, self.sender, self.consensus, self.followers];
        process_core_ids().into_iter().find(|id| !used.contains(&Some(*id))).or(self.sender)
    }

    /// This layout with its `i`-th core replaced by `ids[i]` (a core beyond `ids` stays as it is).
    pub fn on_cores(self, ids: &[usize]) -> Self {
        let map = |core: Option<usize>| core.map(|i| ids.get(i).copied().unwrap_or(i));
        Self {
            harness: map(self.harness),
            sender: map(self.sender),
            consensus: map(self.consensus),
            followers: map(self.followers),
            ..self
        }
    }

    /// No pinning at all, everything but the Sender invoked by the harness (the test suite's layout: it
    /// shares the machine with other tests).
    pub fn unpinned() -> Self {
        Self { cores: quorumcast_driver::agent::available_cores(), ..Self::for_cores(1) }
    }

    /// The cluster bench's layout: the harness thread (core 0 when `pinned`) runs the whole leader through
    /// its invoker and offers and applies on it; a second harness thread (core 1 when `pinned`) runs both
    /// followers through their invokers and applies on them. Both yield when a cycle found no work.
    pub fn split(pinned: bool) -> Self {
        let (harness, followers) = if pinned { (Some(0), Some(1)) } else { (None, None) };
        Self {
            cores: quorumcast_driver::agent::available_cores(),
            invoked: true,
            harness,
            sender: harness,
            consensus: harness,
            followers,
            split: true,
            leader_shared: false,
            whole: false,
        }
    }

    /// The whole cluster on one thread pinned to `core` (the harness's: it offers, applies and runs every
    /// member through its invoker, idling with the consensus idle strategy), nothing else pinned: the
    /// client bench's layout for a client process with a core of its own, as a client on another host has
    /// (`--cluster-core`). Every agent is one duty cycle of that thread, so the cluster's capacity is one
    /// core's.
    pub fn whole_on(core: usize) -> Self {
        Self {
            cores: quorumcast_driver::agent::available_cores(),
            invoked: true,
            harness: Some(core),
            sender: Some(core),
            consensus: Some(core),
            followers: Some(core),
            split: false,
            leader_shared: false,
            whole: true,
        }
    }

    /// This layout with no thread pinned.
    pub fn without_pinning(self) -> Self {
        Self { harness: None, sender: None, consensus: None, followers: None, ..self }
    }

    /// The C probe's layout: the leader's consensus agent on a thread and a core of its own, running its
    /// own duty cycle with the idle strategy under test (so C follows that strategy), and nothing else
    /// busy-spinning. With 4 cores or more, this layout already is such; on 2 or 3, the consensus agent
    /// takes the Sender's core and the Sender, the followers and the harness share the other, none of them
    /// spinning (the load is paced, well below capacity).
    pub fn for_c_probe(&self) -> Self {
        if !self.invoked || self.split || self.whole || self.sender.is_none() {
            return *self;
        }
        Self { invoked: false, consensus: self.sender, sender: self.harness, followers: self.harness, ..*self }
    }

    /// The C probe's second layout: the leader's consensus agent, Sender and Receiver on one thread on the
    /// Sender's core, idling with the strategy under test, and the followers where this layout puts them
    /// (on 2 or 3 cores, run through their invokers by the harness, which yields): nothing else spins, and
    /// the followers acknowledge at the harness's pace rather than a backing-off thread's. The split
    /// and the whole layouts are left as they are (their leader is invoked whole already).
    pub fn for_c_probe_shared(&self) -> Self {
        if self.split || self.whole {
            return *self;
        }
        Self { leader_shared: true, ..*self }
    }

    /// The Sender's idle strategy this layout allows: `wanted` when the Sender has a core of its own or
    /// `wanted` does not spin, else `backoff`.
    pub fn sender_idle(&self, wanted: IdleStrategyConfig) -> IdleStrategyConfig {
        let shares_its_core = [self.harness, self.consensus, self.followers].contains(&self.sender);
        if wanted.is_busy() && (self.sender.is_none() || shares_its_core) {
            IdleStrategyConfig::default()
        } else {
            wanted
        }
    }

    /// The distinct cores this layout's threads are pinned to, in order (one `None` when none is): where
    /// the hiccup probe spins a thread each.
    pub fn busy_cores(&self) -> Vec<Option<usize>> {
        let mut cores = Vec::new();
        for core in [self.harness, self.sender, self.consensus, self.followers].into_iter().flatten() {
            if !cores.contains(&Some(core)) {
                cores.push(Some(core));
            }
        }
        if cores.is_empty() {
            cores.push(None);
        }
        cores
    }

    /// The cores of the S probe's threads: sending where the Sender runs, draining where the harness
    /// (which runs the followers' receivers when invoked) runs.
    pub fn probe_cores(&self) -> ProbeCores {
        let drain = if self.invoked && !self.split { self.harness } else { self.followers };
        ProbeCores { sender: self.sender, drain }
    }

    /// One line per thread, and what the layout implies for S.
    pub fn describe(&self, sender_idle: IdleStrategyConfig) -> String {
        let core = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("core {c}"));
        let others = [self.harness, self.consensus, self.followers];
        let sender_alone = self.sender.is_some() && !others.contains(&self.sender);
        let sender = format!(
            "leader sender+receiver thread ({}): {}{}",
            self.sender_idle(sender_idle),
            core(self.sender),
            if sender_alone { " alone" } else { "" }
        );
        if self.leader_shared {
            let followers = if self.invoked {
                format!("both followers run through their invokers by the harness thread: {}", core(self.harness))
            } else {
                format!("followers (shared mode, backoff, one thread each): {}", core(self.followers))
            };
            return format!(
                "{} cores; leader consensus+sender+receiver thread (one thread, idle under test): {}; harness (load \
                 generator + apply of all 3 nodes, yielding): {}; {followers}",
                self.cores,
                core(self.sender),
                core(self.harness)
            );
        }
        if self.whole {
            return format!(
                "{} cores; one harness thread: {}: load generator, apply of all 3 nodes, and every member whole \
                 (the leader's consensus agent, Sender and Receiver, both followers) run through their invokers, \
                 idling with the consensus idle strategy; no other thread of the cluster",
                self.cores,
                core(self.harness)
            );
        }
        let rest = if self.split {
            format!(
                "harness thread: {}: load generator, and the whole leader (consensus, Sender, Receiver) run through \
                 its invoker and applied; followers thread: {}: both followers run through their invokers and \
                 applied; both yield when a cycle found no work",
                core(self.harness),
                core(self.followers)
            )
        } else if self.invoked {
            format!(
                "harness thread: {}: load generator, apply of all 3 nodes, and the leader's consensus agent and \
                 both followers run through their invokers, idling with the consensus idle strategy under test \
                 (so C comes from one consensus cycle per harness cycle)",
                core(self.harness)
            )
        } else {
            format!(
                "harness (load generator + apply of all 3 nodes): {}; leader consensus thread (idle under test): \
                 {}; followers (shared mode, backoff, one thread each): {}",
                core(self.harness),
                core(self.consensus),
                core(self.followers)
            )
        };
        format!(
            "{} cores; {sender}; {rest}. S is probed with one sending thread and one draining thread; in the \
             cluster the Sender {}, and on loopback each sendmsg also runs the receive path on the Sender's CPU, \
             as in the probe.",
            self.cores,
            if sender_alone {
                "has its core to itself, so the probe's S applies"
            } else {
                "shares its CPU with other threads, so it gets less than the probe's S"
            },
        )
    }
}
