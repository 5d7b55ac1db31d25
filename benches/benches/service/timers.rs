//! The service bench's part 1: the timer service whose lateness the leader records, and what one timer
//! point measured.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use quorumcast::{Cluster, ClusterTime, Entry, Role, StateMachine};
use quorumcast_bench::bench::new_histogram;
use quorumcast_bench::report::Percentiles;
use quorumcast_bench::sweep::remote;

use crate::{epoch_ns, ns_between, read_words, TICK_INTERVAL};

/// What the leader's timer service records (only the leader's has one).
pub struct TimerRecord {
    /// Leader wall clock at `on_timer` minus the deadline.
    pub lateness: Histogram<u64>,
    /// Cluster time of the entry that fired the timer minus the deadline: how late it was in the log.
    pub stamped: Histogram<u64>,
    /// Timers whose wall-clock lateness came out negative (the clock stepped back): recorded as 1 ns.
    pub early: u64,
}

impl TimerRecord {
    pub fn new() -> Self {
        Self { lateness: new_histogram(), stamped: new_histogram(), early: 0 }
    }
}

/// One timer, always running: its state (deadline, counts) is replicated, the same on every member.
pub struct TimerService {
    period: Duration,
    /// The deadline of timer 1 while it is scheduled.
    deadline: Option<ClusterTime>,
    fired: u64,
    messages: u64,
    record: Option<Arc<Mutex<TimerRecord>>>,
}

impl TimerService {
    pub fn new(period: Duration, record: Option<Arc<Mutex<TimerRecord>>>) -> Self {
        Self { period, deadline: None, fired: 0, messages: 0, record }
    }

    fn schedule(&mut self, cluster: &mut Cluster<'_>) {
        let deadline = cluster.time() + self.period;
        // One timer: far below `max_timers`, so never refused (and refused alike everywhere if it were).
        if cluster.schedule_timer(1, deadline).is_ok() {
            self.deadline = Some(deadline);
        }
    }
}

impl StateMachine for TimerService {
    fn on_message(&mut self, _entry: &Entry<'_>, _cluster: &mut Cluster<'_>) {
        self.messages += 1;
    }

    fn on_session_open(
        &mut self,
        _session_id: u64,
        cluster: &mut Cluster<'_>,
    ) -> Result<(), quorumcast::SessionRefused> {
        if self.deadline.is_none() {
            self.schedule(cluster);
        }
        Ok(())
    }

    fn on_timer(&mut self, _id: u64, cluster: &mut Cluster<'_>) {
        let now = epoch_ns();
        self.fired += 1;
        if let (Some(record), Some(deadline), Role::Leader) = (&self.record, self.deadline, cluster.role()) {
            let mut record = record.lock().unwrap_or_else(|e| e.into_inner());
            if now < deadline.as_nanos() {
                record.early += 1;
            }
            record.lateness.saturating_record(ns_between(now, deadline.as_nanos()));
            record.stamped.saturating_record(ns_between(cluster.time().as_nanos(), deadline.as_nanos()));
        }
        self.schedule(cluster);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        let deadline = self.deadline.map_or(-1, ClusterTime::as_nanos);
        for word in [deadline as u64, self.fired, self.messages] {
            writer.write_all(&word.to_le_bytes())?;
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let [deadline, fired, messages] = read_words(reader)?;
        self.deadline = (deadline as i64 >= 0).then(|| ClusterTime::from_nanos(deadline as i64));
        (self.fired, self.messages) = (fired, messages);
        Ok(())
    }
}

/// One timer point: a client's open-loop load and the timers that fired during it.
#[derive(Debug)]
pub struct TimerPoint {
    pub rho: f64,
    pub client: remote::ClientPoint,
    pub lateness: Percentiles,
    pub stamped: Percentiles,
    pub timers: u64,
    pub early: u64,
}

impl TimerPoint {
    /// The target's bound: the point's commit p99 + one tick interval, microseconds.
    pub fn bound_us(&self) -> f64 {
        self.client.report.latency_us.p99 + TICK_INTERVAL.as_secs_f64() * 1e6
    }

    pub fn met(&self) -> bool {
        self.timers > 0 && self.lateness.p99 <= self.bound_us()
    }
}
