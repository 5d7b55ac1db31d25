//! The Sender's time split: where its thread's time goes, measured in the run, so that its capacity is a
//! budget (time per datagram in each class) rather than a guess from a probe.
//!
//! Five classes tile the Sender thread's wall time, each a counter in nanoseconds ([`TimeSplitCounters`]):
//!
//! - **data calls**: inside the `sendmsg`/`sendmmsg` calls that carry first-time data;
//! - **control calls**: inside every other send (commit frames, SETUPs, heartbeats, retransmits), and inside
//!   the control polls (`recvmmsg` of status messages, NAKs, acknowledgements) of duty cycles that sent: what
//!   the model's C counts (the Sender's control syscalls less its idle polls);
//! - **own code**: the rest of the duty cycles that sent something (scanning the log, flow control,
//!   bookkeeping, counters);
//! - **idle**: duty cycles that sent nothing (their polls of empty sockets included), less any send in them;
//! - **between cycles**: from the end of one duty cycle to the start of the next: the runner and its idle
//!   strategy, and, where the Sender shares its thread (invoker or shared threading), the other agents' work.
//!
//! Cost, when on: two clock reads around each send or poll call and one more per duty cycle (the cycle's
//! start is the clock read the duty cycle makes anyway), plus five counter adds per cycle; no allocation,
//! no lock, no syscall (the monotonic clock is read through the vDSO). Off (the default), a publication
//! tests one `Option` per call and the Sender one per cycle. Turned on per node with
//! `NodeBuilder::sender_time_split`.
//!
//! Invariant: over any window, `data + control + own + idle + between` is the window's wall time, up to
//! the one cycle at each end that the window cuts (a cycle is booked when it ends). Classes are wall time:
//! a thread preempted inside a call or its own code has that time counted in the class it was in.

use crate::agent::clock::NanoClock;
use crate::shm::counters::Counter;
use crate::shm::stats::{kinds, CounterKind};

/// Which class a timed call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallClass {
    /// A send of first-time data.
    Data,
    /// Any other send (commit frames, SETUPs, heartbeats, retransmits).
    Control,
    /// A poll of the control sockets: control time on a cycle that sent, idle time on one that did not.
    Poll,
}

/// Nanoseconds spent inside calls of each class during one duty cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallNs {
    /// Inside data sends.
    pub data: u64,
    /// Inside control sends.
    pub control: u64,
    /// Inside control polls.
    pub poll: u64,
}

impl CallNs {
    /// Adds `other`'s nanoseconds to these.
    pub fn add(&mut self, other: CallNs) {
        self.data += other.data;
        self.control += other.control;
        self.poll += other.poll;
    }
}

/// A publication's timer of its calls: off (no clock) by default; on, it adds each call's duration to its
/// class until the Sender [takes](Self::take) the cycle's sums.
#[derive(Clone, Debug, Default)]
pub struct CallTimer {
    clock: Option<NanoClock>,
    ns: CallNs,
}

impl CallTimer {
    /// Times calls with `clock` from now on (`None`: stops timing).
    pub fn set_clock(&mut self, clock: Option<NanoClock>) {
        self.clock = clock;
    }

    /// Whether calls are timed.
    pub fn is_on(&self) -> bool {
        self.clock.is_some()
    }

    /// The time before a call (0 when off: no clock read).
    #[inline]
    pub fn start(&self) -> u64 {
        self.clock.as_ref().map_or(0, NanoClock::now_ns)
    }

    /// Adds the time since `started` (from [`start`](Self::start)) to `class` (nothing when off).
    #[inline]
    pub fn stop(&mut self, class: CallClass, started: u64) {
        if let Some(clock) = &self.clock {
            let ns = clock.now_ns().saturating_sub(started);
            match class {
                CallClass::Data => self.ns.data += ns,
                CallClass::Control => self.ns.control += ns,
                CallClass::Poll => self.ns.poll += ns,
            }
        }
    }

    /// Runs `call`, its time added to `class`.
    #[inline]
    pub fn time<R>(&mut self, class: CallClass, call: impl FnOnce() -> R) -> R {
        let started = self.start();
        let result = call();
        self.stop(class, started);
        result
    }

    /// The sums since the last take, and zeroes them.
    pub fn take(&mut self) -> CallNs {
        std::mem::take(&mut self.ns)
    }
}

/// The Sender's five time counters, nanoseconds (see the [module](self) for the classes).
#[derive(Clone, Debug)]
pub struct TimeSplitCounters {
    /// Inside data sends.
    pub data_call_ns: Counter,
    /// Inside control sends, and control polls on cycles that sent.
    pub control_call_ns: Counter,
    /// The rest of the cycles that sent.
    pub own_code_ns: Counter,
    /// Cycles that sent nothing, less their sends.
    pub idle_ns: Counter,
    /// Between the end of one cycle and the start of the next.
    pub between_cycles_ns: Counter,
}

impl TimeSplitCounters {
    /// Allocates each counter with `allocate(kind)`, its kind from the [catalogue](crate::shm::stats::kinds).
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            data_call_ns: allocate(&kinds::sender::data_call_ns),
            control_call_ns: allocate(&kinds::sender::control_call_ns),
            own_code_ns: allocate(&kinds::sender::own_code_ns),
            idle_ns: allocate(&kinds::sender::idle_ns),
            between_cycles_ns: allocate(&kinds::sender::between_cycles_ns),
        }
    }

    /// Counters in private memory, for tests.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }

    fn add(&self, split: &CycleSplit) {
        let add = |counter: &Counter, ns: u64| counter.add(i64::try_from(ns).unwrap_or(i64::MAX));
        add(&self.data_call_ns, split.data);
        add(&self.control_call_ns, split.control);
        add(&self.own_code_ns, split.own);
        add(&self.idle_ns, split.idle);
        add(&self.between_cycles_ns, split.between);
    }
}

/// One duty cycle's time, by class, nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleSplit {
    /// Inside data sends.
    pub data: u64,
    /// Inside control sends (and polls, on a cycle that sent).
    pub control: u64,
    /// The rest of a cycle that sent.
    pub own: u64,
    /// A cycle that sent nothing, less its sends.
    pub idle: u64,
    /// Since the previous cycle ended.
    pub between: u64,
}

/// Splits a duty cycle that ran from `start_ns` to `end_ns` (the previous one ended at `previous_end_ns`,
/// `None` for the first), spent `calls` inside calls, and `sent` something (data, a commit frame, a
/// heartbeat or a SETUP):
///
/// - a cycle that sent: data and control are its sends, control also its polls, own the rest;
/// - a cycle that sent nothing: data and control are its sends (a send the kernel refused, a commit frame
///   that found no live receiver), the rest idle, its polls included (the model's C leaves idle polls out);
/// - between: `start_ns - previous_end_ns`.
///
/// Calls are measured inside the cycle, so they never exceed it; should a clock disagree, own and idle
/// are 0 rather than negative, and the classes still sum to the calls.
pub fn split_cycle(previous_end_ns: Option<u64>, start_ns: u64, end_ns: u64, sent: bool, calls: CallNs) -> CycleSplit {
    let length = end_ns.saturating_sub(start_ns);
    let between = previous_end_ns.map_or(0, |end| start_ns.saturating_sub(end));
    if sent {
        let control = calls.control + calls.poll;
        CycleSplit { data: calls.data, control, own: length.saturating_sub(calls.data + control), idle: 0, between }
    } else {
        let sends = calls.data + calls.control;
        CycleSplit { data: calls.data, control: calls.control, own: 0, idle: length.saturating_sub(sends), between }
    }
}

/// The Sender's side of the split: its counters and where its last cycle ended.
#[derive(Debug)]
pub struct TimeSplit {
    counters: TimeSplitCounters,
    previous_end_ns: Option<u64>,
}

impl TimeSplit {
    /// A split into `counters`, before any cycle.
    pub fn new(counters: TimeSplitCounters) -> Self {
        Self { counters, previous_end_ns: None }
    }

    /// Books a cycle from `start_ns` to `end_ns` that spent `calls` inside calls and `sent` something.
    #[inline]
    pub fn book(&mut self, start_ns: u64, end_ns: u64, sent: bool, calls: CallNs) {
        self.counters.add(&split_cycle(self.previous_end_ns, start_ns, end_ns, sent, calls));
        self.previous_end_ns = Some(end_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(data: u64, control: u64, poll: u64) -> CallNs {
        CallNs { data, control, poll }
    }

    #[test]
    fn a_cycle_that_sent_splits_into_calls_and_own_code() {
        let split = split_cycle(Some(900), 1_000, 11_000, true, calls(6_000, 1_000, 500));
        assert_eq!(split, CycleSplit { data: 6_000, control: 1_500, own: 2_500, idle: 0, between: 100 });
        let total = split.data + split.control + split.own + split.idle + split.between;
        assert_eq!(total, 11_000 - 900, "the classes tile the time since the previous cycle ended");
    }

    #[test]
    fn a_cycle_that_sent_nothing_is_idle_its_polls_included() {
        let split = split_cycle(Some(1_000), 1_000, 3_000, false, calls(0, 400, 900));
        assert_eq!(split, CycleSplit { data: 0, control: 400, own: 0, idle: 1_600, between: 0 });
    }

    #[test]
    fn the_first_cycle_has_nothing_between_and_a_disagreeing_clock_gives_no_negative_time() {
        assert_eq!(split_cycle(None, 5_000, 6_000, true, calls(1_000, 0, 0)).between, 0);
        let split = split_cycle(Some(10), 5, 4, true, calls(30, 20, 0));
        assert_eq!((split.own, split.between, split.data, split.control), (0, 0, 30, 20));
    }

    #[test]
    fn the_timer_adds_nothing_when_off_and_each_call_to_its_class_when_on() {
        let mut timer = CallTimer::default();
        assert_eq!(timer.time(CallClass::Data, || 7), 7);
        assert_eq!((timer.start(), timer.take()), (0, CallNs::default()), "off: no clock read, nothing added");
        let time = crate::agent::clock::SimulatedTime::new(0);
        timer.set_clock(Some(NanoClock::simulated(std::sync::Arc::clone(&time))));
        timer.time(CallClass::Data, || time.advance_to(300));
        timer.time(CallClass::Poll, || time.advance_to(350));
        timer.time(CallClass::Data, || time.advance_to(550));
        assert_eq!(timer.take(), calls(500, 0, 50));
        assert_eq!(timer.take(), CallNs::default(), "a take zeroes the sums");
    }

    #[test]
    fn booking_adds_each_cycle_to_the_counters() {
        let counters = TimeSplitCounters::detached();
        let mut split = TimeSplit::new(counters.clone());
        split.book(100, 1_100, true, calls(600, 100, 0));
        split.book(1_300, 1_800, false, calls(0, 0, 200));
        let values = [
            counters.data_call_ns.get(),
            counters.control_call_ns.get(),
            counters.own_code_ns.get(),
            counters.idle_ns.get(),
            counters.between_cycles_ns.get(),
        ];
        assert_eq!(values, [600, 100, 300, 500, 200]);
    }
}
