//! The Sender agent: one thread for every network publication of a node.
//!
//! Its duty cycle, after Aeron's: send each publication's due data (round-robin, starting one later each
//! cycle for fairness), then read control traffic (status messages and NAKs) only when nothing was sent,
//! or every [`CONTROL_POLL_RATIO`] cycles, or when [`CONTROL_POLL_INTERVAL`] has passed, so that a
//! saturated Sender spends its syscalls on data. The work count it returns (bytes sent plus frames read)
//! drives its idle strategy.

use std::time::Duration;

use crate::agent::clock::{nanos, NanoClock};
use crate::agent::{Agent, AgentError};
use crate::media::network_publication::NetworkPublication;
use crate::media::transport::{RecvBatch, Transport, UdpEndpoint};
use crate::shm::ring_buffer::OneToOneRingBuffer;

/// Most control frames taken from a command ring per duty cycle.
pub const COMMAND_DRAIN_LIMIT: usize = 64;

/// Control is polled at least every this many duty cycles that sent data.
pub const CONTROL_POLL_RATIO: u32 = 6;

/// Control is polled at least this often.
pub const CONTROL_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The Sender agent, over transport `T` (see [`crate::media::transport`]).
#[derive(Debug)]
pub struct Sender<T: Transport = UdpEndpoint> {
    publications: Vec<NetworkPublication<T>>,
    batch: RecvBatch,
    clock: NanoClock,
    cycles_since_poll: u32,
    next_poll_ns: u64,
    round_robin: usize,
    commands: Vec<(OneToOneRingBuffer, usize)>,
}

impl<T: Transport> Sender<T> {
    /// Reads `clock` from now on (a simulated one, under the node simulator).
    pub fn set_clock(&mut self, clock: NanoClock) {
        self.clock = clock;
    }

    /// A Sender of `publications`.
    pub fn new(publications: Vec<NetworkPublication<T>>) -> Self {
        Self {
            publications,
            batch: RecvBatch::new(16, 1024),
            clock: NanoClock::new(),
            cycles_since_poll: 0,
            next_poll_ns: 0,
            round_robin: 0,
            commands: Vec::new(),
        }
    }

    /// Sends every frame another agent writes into `ring` (its bytes, verbatim) to the live destinations
    /// of publication `publication`: how the consensus agent's commit-position frames go out through this
    /// one thread and spend its syscall budget (the model's C).
    pub fn add_command_ring(&mut self, ring: OneToOneRingBuffer, publication: usize) {
        assert!(publication < self.publications.len(), "no publication {publication}");
        self.commands.push((ring, publication));
    }

    /// The publications, in the order given.
    pub fn publications(&self) -> &[NetworkPublication<T>] {
        &self.publications
    }

    /// The publications, to send control frames through (the consensus layer).
    pub fn publications_mut(&mut self) -> &mut [NetworkPublication<T>] {
        &mut self.publications
    }

    /// One duty cycle; returns the work done.
    pub fn poll_once(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        self.poll_at(now_ns)
    }

    /// One duty cycle at `now_ns`.
    pub fn poll_at(&mut self, now_ns: u64) -> usize {
        let count = self.publications.len();
        let mut sent = self.drain_commands();
        for i in 0..count {
            sent += self.publications[(self.round_robin + i) % count].send(now_ns);
        }
        if count > 0 {
            self.round_robin = (self.round_robin + 1) % count;
        }
        self.cycles_since_poll += 1;
        let mut read = 0;
        if sent == 0 || self.cycles_since_poll >= CONTROL_POLL_RATIO || now_ns >= self.next_poll_ns {
            for publication in &mut self.publications {
                read += publication.poll_control(now_ns, &mut self.batch, sent == 0);
                publication.on_idle(now_ns);
            }
            self.cycles_since_poll = 0;
            self.next_poll_ns = now_ns + nanos(CONTROL_POLL_INTERVAL);
        }
        sent + read
    }
}

impl<T: Transport> Sender<T> {
    fn drain_commands(&mut self) -> usize {
        let mut work = 0;
        for (ring, index) in &self.commands {
            let publication = &mut self.publications[*index];
            work += ring.read(
                |_, frame| {
                    publication.send_control(frame);
                },
                COMMAND_DRAIN_LIMIT,
            );
        }
        work
    }
}

impl<T: Transport> Agent for Sender<T> {
    fn name(&self) -> &str {
        "sender"
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        let work = self.poll_once();
        if let Some(failure) = self.publications.iter().find_map(|p| p.failure()) {
            if self.publications.iter().all(|p| p.failure().is_some()) {
                return Err(AgentError::msg(failure.to_string()));
            }
        }
        Ok(work)
    }
}
