//! The Sender agent: one thread for every network publication of a node.
//!
//! Its duty cycle, after Aeron's: send each publication's due data (round-robin, starting one later each
//! cycle for fairness), then read control traffic (status messages and NAKs) only when nothing was sent,
//! or every [`CONTROL_POLL_RATIO`] cycles, or when [`CONTROL_POLL_INTERVAL`] has passed, so that a
//! saturated Sender spends its syscalls on data. The work count it returns (bytes sent plus frames read)
//! drives its idle strategy.
//!
//! With its [time split](crate::media::time_split) on ([`Sender::split_time`]), each duty cycle is booked
//! into data calls, control calls, own code, idle and the time between cycles: one more clock read per
//! cycle (its end), and two around each call in its publications.

use std::time::Duration;

use crate::agent::clock::{nanos, NanoClock};
use crate::agent::{Agent, AgentError};
use crate::media::network_publication::NetworkPublication;
use crate::media::time_split::{CallNs, TimeSplit, TimeSplitCounters};
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
    /// Where each duty cycle's time goes, when asked for (`None`: not measured, no clock read for it).
    split: Option<TimeSplit>,
}

impl<T: Transport> Sender<T> {
    /// Reads `clock` from now on (a simulated one, under the node simulator).
    pub fn set_clock(&mut self, clock: NanoClock) {
        self.clock = clock;
        if self.split.is_some() {
            self.time_publications();
        }
    }

    /// Splits the Sender's time into `counters` from now on: its publications time their calls with its
    /// clock, and each duty cycle is booked when it ends (see [`crate::media::time_split`]).
    pub fn split_time(&mut self, counters: TimeSplitCounters) {
        self.split = Some(TimeSplit::new(counters));
        self.time_publications();
    }

    fn time_publications(&mut self) {
        for publication in &mut self.publications {
            publication.time_calls(Some(self.clock.clone()));
        }
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
            split: None,
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

    /// One duty cycle at the clock's time; returns the work done. With the time split on, the cycle is
    /// booked into it (from this clock read to one at its end).
    pub fn poll_once(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        let (sent, read) = self.cycle(now_ns);
        if self.split.is_some() {
            self.book_cycle(now_ns, sent > 0);
        }
        sent + read
    }

    /// One duty cycle at `now_ns` (a time the caller keeps, never booked into the time split).
    pub fn poll_at(&mut self, now_ns: u64) -> usize {
        let (sent, read) = self.cycle(now_ns);
        sent + read
    }

    /// One duty cycle at `now_ns`: returns the work of sending (bytes, commit frames, heartbeats, SETUPs)
    /// and of reading control frames.
    fn cycle(&mut self, now_ns: u64) -> (usize, usize) {
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
        (sent, read)
    }

    /// Books the cycle that started at `start_ns` into the time split (which is on).
    #[inline(never)]
    fn book_cycle(&mut self, start_ns: u64, sent: bool) {
        let mut calls = CallNs::default();
        for publication in &mut self.publications {
            calls.add(publication.take_call_ns());
        }
        let end_ns = self.clock.now_ns();
        if let Some(split) = &mut self.split {
            split.book(start_ns, end_ns, sent, calls);
        }
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
