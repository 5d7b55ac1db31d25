//! Agents, their runners, and threading modes.
//!
//! An [`Agent`] is a unit of duty-cycle work: a node's consensus (conductor), sender and receiver are each
//! one. Something has to call its [`Agent::do_work`] over and over:
//!
//! - an [`AgentRunner`] does it on a thread of its own, idling between cycles with an
//!   [`Idle`](crate::agent::idle::Idle) strategy, optionally pinned to a core;
//! - an [`AgentInvoker`] lets the application thread run one cycle at a time ([`ThreadingMode::Invoker`]);
//! - a [`CompositeAgent`] puts several agents behind one, so that one thread runs them all.
//!
//! [`AgentLayout`] turns a [`ThreadingMode`] and the node's agents into threads, and [`check_cores`] refuses
//! layouts whose busy-spinning threads would fight over cores (the cause of many "Aeron is slow on my VM"
//! reports: a dedicated driver wants three busy cores plus one for the application).
//!
//! Lifecycle invariants, for every runner and invoker:
//!
//! - `on_start` is called once, before the first `do_work`, on the thread that runs the agent;
//! - `on_close` is called exactly once for every agent whose `on_start` was called, even when `on_start`
//!   or `do_work` failed or panicked (unless `on_close` itself is what panicked);
//! - an agent that fails (an [`AgentError::Failed`] or a panic) stops its thread, and the failure is kept
//!   for the owner ([`AgentRunner::status`], [`AgentRunner::failure`], [`AgentRunner::join`]): no thread dies
//!   silently. [`AgentError::Terminate`] stops it cleanly instead.

mod composite;
mod invoker;
mod layout;
mod runner;

pub mod clock;
pub mod idle;
pub mod timed_wait;

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::agent::idle::Park;
use crate::shm::counters::Counter;

pub use composite::{AgentOrder, CompositeAgent};
pub use invoker::AgentInvoker;
pub use layout::{
    available_cores, check_cores, AgentHandles, AgentLayout, AgentRole, AgentSpec, BusyThread, CoreProblem,
    LayoutError, ThreadPlan, ThreadingMode, ThreadingModeParseError,
};
pub use runner::{pin_current_thread, AgentRunner, RunnerStatus};

/// A unit of duty-cycle work.
///
/// `do_work` must not block: it does what there is to do and returns how much that was (0 when there was
/// nothing), so the idle strategy can back off. Returning a non-zero count on a cycle that did nothing
/// keeps a backoff strategy spinning for ever.
pub trait Agent: Send {
    /// The agent's name, used for its thread, its counters and its failures.
    fn name(&self) -> &str;

    /// Called once on the agent's thread before the first duty cycle.
    fn on_start(&mut self) -> Result<(), AgentError> {
        Ok(())
    }

    /// One duty cycle: does the work there is and returns its amount (0 for none).
    fn do_work(&mut self) -> Result<usize, AgentError>;

    /// Called once on the agent's thread after the last duty cycle (see the module's lifecycle invariants).
    fn on_close(&mut self) {}

    /// Where the idle strategy's park step should wait, if not on the thread's park: an agent that waits
    /// on I/O readiness returns its poller, so that the first datagram ends an idle park at once.
    fn parker(&mut self) -> Option<&mut dyn Park> {
        None
    }
}

impl fmt::Debug for dyn Agent + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent").field("name", &self.name()).finish_non_exhaustive()
    }
}

impl<A: Agent + ?Sized> Agent for Box<A> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn on_start(&mut self) -> Result<(), AgentError> {
        (**self).on_start()
    }

    #[inline]
    fn do_work(&mut self) -> Result<usize, AgentError> {
        (**self).do_work()
    }

    fn on_close(&mut self) {
        (**self).on_close()
    }

    fn parker(&mut self) -> Option<&mut dyn Park> {
        (**self).parker()
    }
}

/// Why an agent's `on_start` or `do_work` stopped it.
#[derive(Debug)]
pub enum AgentError {
    /// The agent asks to stop cleanly: its runner closes it and reports no failure.
    Terminate,
    /// The agent failed: its runner closes it and reports the error as an [`AgentFailure`].
    Failed(Box<dyn Error + Send + Sync>),
}

impl AgentError {
    /// A failure carrying `error`.
    pub fn new(error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        AgentError::Failed(error.into())
    }

    /// A failure carrying a plain message.
    pub fn msg(message: impl Into<String>) -> Self {
        AgentError::Failed(message.into().into())
    }

    /// True for [`AgentError::Terminate`].
    pub fn is_terminate(&self) -> bool {
        matches!(self, AgentError::Terminate)
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Terminate => f.write_str("the agent asked to terminate"),
            AgentError::Failed(error) => error.fmt(f),
        }
    }
}

impl Error for AgentError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AgentError::Terminate => None,
            AgentError::Failed(error) => Some(&**error),
        }
    }
}

impl From<std::io::Error> for AgentError {
    fn from(error: std::io::Error) -> Self {
        AgentError::new(error)
    }
}

/// The lifecycle step an agent failed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentPhase {
    /// `on_start`.
    Start,
    /// `do_work` (or the idle strategy between cycles).
    Work,
    /// `on_close`.
    Close,
}

impl fmt::Display for AgentPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AgentPhase::Start => "on_start",
            AgentPhase::Work => "do_work",
            AgentPhase::Close => "on_close",
        })
    }
}

/// What went wrong in a failed agent.
#[derive(Clone, Debug)]
pub enum FailureCause {
    /// The agent returned [`AgentError::Failed`].
    Error(Arc<dyn Error + Send + Sync>),
    /// The agent panicked; the panic message when it was a string.
    Panic(String),
}

/// An agent that stopped because it failed: which agent, in which step, and why.
#[derive(Clone, Debug)]
pub struct AgentFailure {
    /// The agent's name (for a composite, the joined names).
    pub agent: String,
    /// The step it failed in.
    pub phase: AgentPhase,
    /// The error or panic.
    pub cause: FailureCause,
}

impl AgentFailure {
    fn error(agent: &str, phase: AgentPhase, error: Box<dyn Error + Send + Sync>) -> Self {
        Self { agent: agent.to_owned(), phase, cause: FailureCause::Error(Arc::from(error)) }
    }

    fn panic(agent: &str, phase: AgentPhase, payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic with a non-string payload".to_owned()
        };
        Self { agent: agent.to_owned(), phase, cause: FailureCause::Panic(message) }
    }

    /// True when the agent panicked (rather than returned an error).
    pub fn is_panic(&self) -> bool {
        matches!(self.cause, FailureCause::Panic(_))
    }
}

impl fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            FailureCause::Error(error) => write!(f, "agent `{}` failed in {}: {error}", self.agent, self.phase),
            FailureCause::Panic(message) => write!(f, "agent `{}` panicked in {}: {message}", self.agent, self.phase),
        }
    }
}

impl Error for AgentFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match &self.cause {
            FailureCause::Error(error) => Some(&**error),
            FailureCause::Panic(_) => None,
        }
    }
}

/// Something worth telling the operator that did not stop anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// An agent thread could not be pinned to its core; it runs unpinned.
    PinFailed {
        /// The thread's agent name.
        agent: String,
        /// The core asked for.
        core: usize,
        /// Why it failed.
        reason: String,
    },
    /// The timer slack of a sleeping agent thread could not be lowered; its sleeps may overshoot by ~50 µs.
    TimerSlackNotSet {
        /// The thread's agent name.
        agent: String,
        /// Why it failed.
        reason: String,
    },
    /// A core problem that [`check_cores`] would refuse, accepted because it was forced.
    Oversubscribed(CoreProblem),
    /// Busy threads take every core, leaving none for the application and the kernel.
    NoSpareCore {
        /// Busy-spinning threads.
        busy: usize,
        /// Cores available.
        cores: usize,
    },
    /// A thread shares its pinned core with a busy-spinning thread and gets little of it.
    SharesCoreWithBusyThread {
        /// The core.
        core: usize,
        /// The busy thread.
        busy: String,
        /// The other thread.
        other: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::PinFailed { agent, core, reason } => {
                write!(f, "agent `{agent}` could not be pinned to core {core} and runs unpinned: {reason}")
            }
            Warning::TimerSlackNotSet { agent, reason } => write!(
                f,
                "could not lower the timer slack of agent `{agent}`, its sleeps may overshoot by ~50 us: {reason}"
            ),
            Warning::Oversubscribed(problem) => write!(f, "forced despite: {problem}"),
            Warning::NoSpareCore { busy, cores } => write!(
                f,
                "{busy} busy-spinning agent threads take all {cores} cores, leaving none for the application \
                 and the kernel; expect latency spikes (use a backoff, yield or sleep-ns strategy for one of them)"
            ),
            Warning::SharesCoreWithBusyThread { core, busy, other } => write!(
                f,
                "agent `{other}` is pinned to core {core} with busy-spinning agent `{busy}` and will get little \
                 of it; pin it elsewhere or give `{busy}` a backoff strategy"
            ),
        }
    }
}

/// The counters a runner keeps for its agent, each a [`Counter`] with this runner as its only writer.
#[derive(Clone, Debug)]
pub struct AgentCounters {
    /// Duty cycles run.
    pub duty_cycles: Counter,
    /// Sum of the work counts returned.
    pub work: Counter,
    /// Duty cycles that did no work (work count 0).
    pub idle_cycles: Counter,
    /// The longest duty cycle seen, in nanoseconds (see [`AgentRunner`] for what is measured).
    pub max_cycle_ns: Counter,
    /// Nanoseconds spent in duty cycles that did work: over a window, the share of the thread's time it
    /// was busy (what is left went to idle cycles and idling).
    pub work_ns: Counter,
    /// Duty cycles by length, in powers of two: bucket `i` counts cycles of at most
    /// [`cycle_bucket_ns`]`(i)` (the first from 0, the last also every longer one). Deltas over a window give
    /// the distribution of the agent's cycle times ([`cycle_quantile_ns`]), so a stall names its stage.
    pub cycle_buckets: [Counter; CYCLE_BUCKETS],
}

/// How many duty-cycle length buckets an agent has: from 1 us (2^10 ns) to 2 s (2^31 ns).
pub const CYCLE_BUCKETS: usize = 22;

/// The longest cycle (ns) bucket `i` counts: `2^(10 + i)`.
pub const fn cycle_bucket_ns(i: usize) -> u64 {
    1 << (10 + i)
}

/// The bucket of a cycle of `ns` nanoseconds.
#[inline]
fn cycle_bucket(ns: u64) -> usize {
    let log2_ceiling = 64 - ns.saturating_sub(1).leading_zeros() as usize;
    log2_ceiling.clamp(10, 10 + CYCLE_BUCKETS - 1) - 10
}

/// The `q` quantile (0..=1) of the cycles counted in `counts` (per bucket, e.g. deltas over a window), as
/// the upper bound of the bucket it falls in; 0 when nothing was counted.
pub fn cycle_quantile_ns(counts: &[i64; CYCLE_BUCKETS], q: f64) -> u64 {
    let total: i64 = counts.iter().sum();
    if total <= 0 {
        return 0;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as i64).max(1);
    let mut seen = 0;
    for (i, &count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return cycle_bucket_ns(i);
        }
    }
    cycle_bucket_ns(CYCLE_BUCKETS - 1)
}

impl AgentCounters {
    /// Counters allocated with `allocate(suffix)`: `duty cycles`, `work`, `idle cycles`, `max cycle ns`,
    /// `work ns`, and `cycles to <n> ns` for each bucket.
    pub fn new(mut allocate: impl FnMut(&str) -> Counter) -> Self {
        Self {
            duty_cycles: allocate("duty cycles"),
            work: allocate("work"),
            idle_cycles: allocate("idle cycles"),
            max_cycle_ns: allocate("max cycle ns"),
            work_ns: allocate("work ns"),
            cycle_buckets: std::array::from_fn(|i| allocate(&format!("cycles to {} ns", cycle_bucket_ns(i)))),
        }
    }

    /// Counters in private memory, for agents run without a counters file.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }

    /// Records one duty cycle that did `work`.
    #[inline]
    fn record_cycle(&self, work: usize) {
        self.duty_cycles.increment();
        if work == 0 {
            self.idle_cycles.increment();
        } else {
            self.work.add(work as i64);
        }
    }

    /// Records a duty cycle that ran from `start` to `end`; `worked`: it did work.
    #[inline]
    fn record_duration(&self, start: Instant, end: Instant, worked: bool) {
        let ns = i64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(i64::MAX);
        self.max_cycle_ns.set_max(ns);
        self.cycle_buckets[cycle_bucket(ns as u64)].increment();
        if worked {
            self.work_ns.add(ns);
        }
    }
}

/// Runs `f`, turning a panic into an [`AgentFailure`] of `agent` in `phase`.
fn catch_panic<T>(agent: &str, phase: AgentPhase, f: impl FnOnce() -> T) -> Result<T, AgentFailure> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|payload| AgentFailure::panic(agent, phase, &*payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_lengths_fall_in_power_of_two_buckets_and_quantiles_read_them_back() {
        assert_eq!([0, 1, 1024, 1025, 2048, 1 << 40].map(cycle_bucket), [0, 0, 0, 1, 1, CYCLE_BUCKETS - 1]);
        let mut counts = [0i64; CYCLE_BUCKETS];
        counts[0] = 990; // 990 cycles of at most 1 us
        counts[5] = 9; // 9 of at most 32 us
        counts[10] = 1; // one of at most 1 ms
        assert_eq!(cycle_quantile_ns(&counts, 0.5), 1024);
        assert_eq!(cycle_quantile_ns(&counts, 0.99), 1024);
        assert_eq!(cycle_quantile_ns(&counts, 0.995), 32 * 1024);
        assert_eq!(cycle_quantile_ns(&counts, 1.0), 1 << 20);
        assert_eq!(cycle_quantile_ns(&[0; CYCLE_BUCKETS], 0.5), 0);
    }

    #[test]
    fn failure_messages_name_agent_phase_and_cause() {
        let failure = AgentFailure::error("sender", AgentPhase::Work, "socket closed".into());
        assert_eq!(failure.to_string(), "agent `sender` failed in do_work: socket closed");
        assert!(!failure.is_panic());
        assert!(failure.source().is_some());
        let panic = catch_panic("receiver", AgentPhase::Start, || panic!("boom {}", 7)).unwrap_err();
        assert_eq!(panic.to_string(), "agent `receiver` panicked in on_start: boom 7");
        assert!(panic.is_panic());
    }

    #[test]
    fn counters_record_work_idle_and_max() {
        let counters = AgentCounters::detached();
        counters.record_cycle(3);
        counters.record_cycle(0);
        counters.record_cycle(2);
        let start = Instant::now();
        counters.record_duration(start, start + std::time::Duration::from_nanos(500), true);
        counters.record_duration(start, start + std::time::Duration::from_nanos(900), false);
        counters.record_duration(start, start + std::time::Duration::from_nanos(200), true);
        assert_eq!(counters.duty_cycles.get(), 3);
        assert_eq!(counters.work.get(), 5);
        assert_eq!(counters.idle_cycles.get(), 1);
        assert_eq!(counters.max_cycle_ns.get(), 900);
        assert_eq!(counters.work_ns.get(), 700, "only the cycles that worked");
    }

    #[test]
    fn agent_error_forms() {
        assert!(AgentError::Terminate.is_terminate());
        assert_eq!(AgentError::msg("bad").to_string(), "bad");
        let io: AgentError = std::io::Error::other("disk").into();
        assert!(io.source().is_some());
    }
}
