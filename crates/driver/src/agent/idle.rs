//! Idle strategies for duty-cycle agents.
//!
//! An agent thread runs `loop { let work = agent.do_work(); idle.idle(work) }`. The idle strategy decides
//! what the thread does with a cycle that found no work: spin on the CPU, give the CPU to another thread,
//! or sleep. The contract, shared by every strategy here:
//!
//! - call [`IdleStrategy::idle`] once per duty cycle with that cycle's work count;
//! - a work count above zero returns at once and resets any backoff state, so a busy agent never idles;
//! - [`IdleStrategy::reset`] puts the strategy back into its not-idle state.
//!
//! The strategies, with the text form that [`IdleStrategyConfig`] parses and prints:
//!
//! | form | strategy | gives up the CPU |
//! |---|---|---|
//! | `busy-spin` | [`BusySpin`]: one `spin_loop` hint (x86 `PAUSE`) per idle cycle | no |
//! | `noop` | [`NoOp`]: nothing at all | no |
//! | `yield` | [`Yield`]: `sched_yield` | only to runnable threads |
//! | `sleep-ns:<ns>` | [`SleepNs`]: parks for the period | yes |
//! | `backoff:<spins>,<yields>,<min-park>,<max-park>` | [`Backoff`]: spins, then yields, then parks with a doubling period | yes, after a while |
//!
//! Sleeping strategies park with [`std::thread::park_timeout`] rather than `sleep`, so that a runner that is
//! asked to stop can wake its thread at once with `unpark`; a spurious wake-up only ends an idle period early.
//!
//! **Timer slack.** Linux rounds the sleeps of ordinary threads up within a per-thread *timer slack* window,
//! 50 µs by default, so `sleep-ns:1000` really sleeps about 50-60 µs. [`set_timer_slack`] lowers the window
//! for the calling thread; the agent runner does this (to 1 ns) on threads whose strategy sleeps
//! ([`IdleStrategyConfig::sleeps`]). The window can be read in `/proc/<pid>/task/<tid>/timerslack_ns`.

use std::fmt;
use std::io;
use std::str::FromStr;
use std::thread;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::agent::clock::{parse_duration, BareNumber};

/// The wait of a parking idle strategy.
///
/// Invariant: `park(timeout)` returns within about `timeout` (it may return earlier: a wake-up, readiness).
pub trait Park {
    /// Waits for at most `timeout`.
    fn park(&mut self, timeout: Duration);
}

/// Parks the thread with [`thread::park_timeout`], so that `unpark` (a runner asked to stop) ends it early.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadPark;

impl Park for ThreadPark {
    #[inline]
    fn park(&mut self, timeout: Duration) {
        thread::park_timeout(timeout);
    }
}

/// What an agent thread does with a duty cycle that found no work.
///
/// Invariants: `idle(n)` with `n > 0` returns without waiting and leaves the strategy in its not-idle
/// state; `idle(0)` never blocks for longer than the strategy's longest period.
pub trait IdleStrategy: Send {
    /// Idles according to the work count of the duty cycle just run (a count above zero resets the state),
    /// parking the thread when the strategy parks.
    #[inline]
    fn idle(&mut self, work_count: usize) {
        self.idle_with(work_count, &mut ThreadPark)
    }

    /// As [`idle`](Self::idle), with the park step done by `park`: an agent that waits on I/O readiness
    /// (the Receiver) parks in `epoll_wait` instead, so that a datagram ends the wait at once.
    fn idle_with(&mut self, work_count: usize, park: &mut dyn Park);

    /// Puts the strategy back into its not-idle state.
    fn reset(&mut self);

    /// The configuration that builds this strategy (its [`fmt::Display`] is the strategy's text form).
    fn config(&self) -> IdleStrategyConfig;

    /// The strategy's short name: `busy-spin`, `noop`, `yield`, `sleep-ns` or `backoff`.
    fn alias(&self) -> &'static str {
        self.config().alias()
    }

    /// True when the strategy never gives up the CPU, so that its thread needs a core of its own.
    fn is_busy(&self) -> bool {
        self.config().is_busy()
    }
}

impl fmt::Display for dyn IdleStrategy + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config().fmt(f)
    }
}

/// Spins with one [`std::hint::spin_loop`] hint per idle cycle: the lowest wake-up latency, a whole core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusySpin;

impl IdleStrategy for BusySpin {
    #[inline]
    fn idle_with(&mut self, work_count: usize, _park: &mut dyn Park) {
        if work_count == 0 {
            std::hint::spin_loop();
        }
    }

    fn reset(&mut self) {}

    fn config(&self) -> IdleStrategyConfig {
        IdleStrategyConfig::BusySpin
    }
}

/// Does nothing at all: a whole core, and no `PAUSE` to spare the hyper-sibling. Suits loops whose
/// `do_work` makes a syscall every cycle anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoOp;

impl IdleStrategy for NoOp {
    #[inline]
    fn idle_with(&mut self, _work_count: usize, _park: &mut dyn Park) {}

    fn reset(&mut self) {}

    fn config(&self) -> IdleStrategyConfig {
        IdleStrategyConfig::NoOp
    }
}

/// Calls [`std::thread::yield_now`] (`sched_yield`) per idle cycle: gives the core to other runnable
/// threads, but still shows as 100 % CPU when nothing else wants it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Yield;

impl IdleStrategy for Yield {
    #[inline]
    fn idle_with(&mut self, work_count: usize, _park: &mut dyn Park) {
        if work_count == 0 {
            thread::yield_now();
        }
    }

    fn reset(&mut self) {}

    fn config(&self) -> IdleStrategyConfig {
        IdleStrategyConfig::Yield
    }
}

/// Parks the thread for `period` per idle cycle (see the module notes on timer slack).
///
/// Invariant: `period` is above zero (a zero period would be a busy loop that claims not to be one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SleepNs {
    period: Duration,
}

impl SleepNs {
    /// A strategy that parks for `period` per idle cycle, or an error when `period` is zero.
    pub fn new(period: Duration) -> Result<Self, IdleConfigError> {
        if period.is_zero() {
            return Err(IdleConfigError::new(
                format!("sleep-ns:{}", period.as_nanos()),
                "the period must be above zero",
            ));
        }
        Ok(Self { period })
    }

    /// The sleep period.
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl IdleStrategy for SleepNs {
    #[inline]
    fn idle_with(&mut self, work_count: usize, park: &mut dyn Park) {
        if work_count == 0 {
            park.park(self.period);
        }
    }

    fn reset(&mut self) {}

    fn config(&self) -> IdleStrategyConfig {
        IdleStrategyConfig::SleepNs { period: self.period }
    }
}

/// The phase a [`Backoff`] strategy is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffState {
    /// The last cycle did work (or the strategy was reset).
    NotIdle,
    /// Spinning with `spin_loop` hints, up to `max_spins` idle cycles.
    Spinning,
    /// Yielding, up to `max_yields` idle cycles.
    Yielding,
    /// Parking, with a period that doubles from `min_park` up to `max_park`.
    Parking,
}

/// The parameters of a [`Backoff`] strategy.
///
/// Invariant (checked by [`BackoffParams::validate`]): `0 < min_park <= max_park`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffParams {
    /// Idle cycles spent spinning before yielding.
    pub max_spins: u32,
    /// Idle cycles spent yielding before parking.
    pub max_yields: u32,
    /// The first park period.
    pub min_park: Duration,
    /// The longest park period.
    pub max_park: Duration,
}

impl BackoffParams {
    /// Agrona's defaults: 10 spins, 5 yields, parks from 1 µs to 1 ms.
    pub const DEFAULT: Self =
        Self { max_spins: 10, max_yields: 5, min_park: Duration::from_micros(1), max_park: Duration::from_millis(1) };

    /// Checks the invariant `0 < min_park <= max_park`.
    pub fn validate(&self) -> Result<(), IdleConfigError> {
        let text = || IdleStrategyConfig::Backoff(*self).to_string();
        if self.min_park.is_zero() {
            return Err(IdleConfigError::new(text(), "the minimum park period must be above zero"));
        }
        if self.min_park > self.max_park {
            return Err(IdleConfigError::new(text(), "the minimum park period must not exceed the maximum"));
        }
        Ok(())
    }
}

impl Default for BackoffParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The mutable part of a [`Backoff`], written on every idle cycle.
#[derive(Clone, Copy, Debug)]
struct BackoffCursor {
    state: BackoffState,
    spins: u32,
    yields: u32,
    park: Duration,
}

/// Spins, then yields, then parks with a doubling period: Agrona's `BackoffIdleStrategy`.
///
/// Each `idle(0)` does exactly one thing: the first `max_spins` idle cycles after work spin once each,
/// the next `max_yields` yield once each, and every later one parks, for `min_park` first and twice as
/// long each time up to `max_park`. Any `idle(n > 0)` goes back to [`BackoffState::NotIdle`].
///
/// No park is shorter than the host's [`short_wait`](crate::agent::timed_wait::short_wait) (nor longer
/// than `max_park`): a shorter one costs more CPU than it spares and does not give up the core. On the KVM
/// guests this project is measured on (25 us of CPU per timed wait) the parks of `backoff:10,5,1us,1ms`
/// begin at about 50 us, and the in-process cluster's CPU per committed message at saturation fell 6-19%
/// (client bench, MTU 1408 and 8192); on bare metal the floor is a few microseconds.
///
/// The cursor is cache-padded: it is written on every idle cycle, and a strategy boxed on the heap could
/// otherwise share a line with another thread's data.
#[derive(Clone, Debug)]
pub struct Backoff {
    params: BackoffParams,
    /// The shortest park: the host's short wait, at most `max_park`.
    park_floor: Duration,
    cursor: CachePadded<BackoffCursor>,
}

impl Backoff {
    /// A backoff strategy, or an error when the parameters break `0 < min_park <= max_park`.
    pub fn new(params: BackoffParams) -> Result<Self, IdleConfigError> {
        params.validate()?;
        Ok(Self::from_valid(params))
    }

    fn from_valid(params: BackoffParams) -> Self {
        Self::with_park_floor(params, crate::agent::timed_wait::short_wait())
    }

    /// A strategy of valid `params` that parks no shorter than `floor` (nor longer than `max_park`).
    fn with_park_floor(params: BackoffParams, floor: Duration) -> Self {
        let cursor = BackoffCursor { state: BackoffState::NotIdle, spins: 0, yields: 0, park: params.min_park };
        Self { params, park_floor: floor.min(params.max_park), cursor: CachePadded::new(cursor) }
    }

    /// The parameters.
    pub fn params(&self) -> BackoffParams {
        self.params
    }

    /// The current phase.
    pub fn state(&self) -> BackoffState {
        self.cursor.state
    }

    /// Spins done since the last work.
    pub fn spins(&self) -> u32 {
        self.cursor.spins
    }

    /// Yields done since the last work.
    pub fn yields(&self) -> u32 {
        self.cursor.yields
    }

    /// The period the next park will use.
    pub fn park_period(&self) -> Duration {
        self.cursor.park.max(self.park_floor)
    }

    #[inline]
    fn idle_once(&mut self, park: &mut dyn Park) {
        let params = &self.params;
        let cursor = &mut *self.cursor;
        if cursor.state == BackoffState::NotIdle {
            cursor.state = BackoffState::Spinning;
        }
        if cursor.state == BackoffState::Spinning {
            if cursor.spins < params.max_spins {
                cursor.spins += 1;
                std::hint::spin_loop();
                return;
            }
            cursor.state = BackoffState::Yielding;
        }
        if cursor.state == BackoffState::Yielding {
            if cursor.yields < params.max_yields {
                cursor.yields += 1;
                thread::yield_now();
                return;
            }
            cursor.state = BackoffState::Parking;
        }
        let period = cursor.park.max(self.park_floor);
        park.park(period);
        cursor.park = period.saturating_mul(2).min(params.max_park);
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::from_valid(BackoffParams::DEFAULT)
    }
}

impl IdleStrategy for Backoff {
    #[inline]
    fn idle_with(&mut self, work_count: usize, park: &mut dyn Park) {
        if work_count > 0 {
            if self.cursor.state != BackoffState::NotIdle {
                self.reset();
            }
        } else {
            self.idle_once(park);
        }
    }

    fn reset(&mut self) {
        *self.cursor = BackoffCursor { state: BackoffState::NotIdle, spins: 0, yields: 0, park: self.params.min_park };
    }

    fn config(&self) -> IdleStrategyConfig {
        IdleStrategyConfig::Backoff(self.params)
    }
}

/// Any of the strategies, dispatched by `match`: what agent runners hold, so the hot path has no box and
/// no virtual call.
///
/// The backoff variant is large (its cursor is cache-padded); that is fine for a value that lives on its
/// agent thread's stack, and boxing it would add a pointer chase to every idle cycle.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Idle {
    /// [`BusySpin`].
    BusySpin(BusySpin),
    /// [`NoOp`].
    NoOp(NoOp),
    /// [`Yield`].
    Yield(Yield),
    /// [`SleepNs`].
    SleepNs(SleepNs),
    /// [`Backoff`].
    Backoff(Backoff),
}

impl Idle {
    /// The default strategy (`backoff:10,5,1us,1ms`), for an application's own loop around
    /// `Node::invoke`: a few spins and yields, then sleeps growing to a
    /// millisecond, so an idle loop does not take a core (as `std::thread::yield_now` in a loop does).
    ///
    /// ```
    /// let mut idle = quorumcast_driver::agent::idle::Idle::backoff();
    /// for work in [3, 0, 0] {
    ///     idle.idle(work); // 0: nothing was done this round; the strategy waits a little
    /// }
    /// ```
    pub fn backoff() -> Self {
        Idle::Backoff(Backoff::new(BackoffParams::DEFAULT).expect("the default backoff parameters are valid"))
    }

    /// Idles after a round that did `work_count` units of work (0: none): the strategy's wait, or none
    /// and a reset when there was work. The same as [`IdleStrategy::idle`], without importing the trait.
    #[inline]
    pub fn idle(&mut self, work_count: usize) {
        IdleStrategy::idle(self, work_count)
    }

    /// The strategy a (valid) configuration describes.
    pub fn new(config: &IdleStrategyConfig) -> Result<Self, IdleConfigError> {
        config.validate()?;
        Ok(match *config {
            IdleStrategyConfig::BusySpin => Idle::BusySpin(BusySpin),
            IdleStrategyConfig::NoOp => Idle::NoOp(NoOp),
            IdleStrategyConfig::Yield => Idle::Yield(Yield),
            IdleStrategyConfig::SleepNs { period } => Idle::SleepNs(SleepNs { period }),
            IdleStrategyConfig::Backoff(params) => Idle::Backoff(Backoff::from_valid(params)),
        })
    }
}

impl IdleStrategy for Idle {
    #[inline]
    fn idle_with(&mut self, work_count: usize, park: &mut dyn Park) {
        match self {
            Idle::BusySpin(s) => s.idle_with(work_count, park),
            Idle::NoOp(s) => s.idle_with(work_count, park),
            Idle::Yield(s) => s.idle_with(work_count, park),
            Idle::SleepNs(s) => s.idle_with(work_count, park),
            Idle::Backoff(s) => s.idle_with(work_count, park),
        }
    }

    fn reset(&mut self) {
        match self {
            Idle::BusySpin(s) => s.reset(),
            Idle::NoOp(s) => s.reset(),
            Idle::Yield(s) => s.reset(),
            Idle::SleepNs(s) => s.reset(),
            Idle::Backoff(s) => s.reset(),
        }
    }

    fn config(&self) -> IdleStrategyConfig {
        match self {
            Idle::BusySpin(s) => s.config(),
            Idle::NoOp(s) => s.config(),
            Idle::Yield(s) => s.config(),
            Idle::SleepNs(s) => s.config(),
            Idle::Backoff(s) => s.config(),
        }
    }
}

impl fmt::Display for Idle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config().fmt(f)
    }
}

/// A description of an idle strategy, parsed from and printed as its text form.
///
/// Forms (printing gives the canonical form, which parses back to an equal value):
///
/// - `busy-spin`, `noop`, `yield`;
/// - `sleep-ns:<period>`: `<period>` in nanoseconds, or a duration with a suffix (`ns`, `us`, `ms`, `s`).
///   Printed as bare nanoseconds: `sleep-ns:1000`. `sleep-ns` alone means 1000 ns (Agrona's Java default;
///   note that Aeron's C driver takes 1 ns for a bare `sleep-ns`);
/// - `backoff:<max-spins>,<max-yields>,<min-park>,<max-park>`, with durations as above (a bare number is
///   nanoseconds). Printed with the largest suffix that divides the value: `backoff:10,5,1us,1ms`.
///   `backoff` alone means Agrona's defaults and prints as `backoff:10,5,1us,1ms`.
///
/// Invariants of a valid configuration ([`IdleStrategyConfig::validate`]): the sleep period is above zero;
/// `0 < min_park <= max_park`. Parsing only produces valid configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStrategyConfig {
    /// [`BusySpin`]: `busy-spin`.
    BusySpin,
    /// [`NoOp`]: `noop`.
    NoOp,
    /// [`Yield`]: `yield`.
    Yield,
    /// [`SleepNs`]: `sleep-ns:<ns>`.
    SleepNs {
        /// The sleep period.
        period: Duration,
    },
    /// [`Backoff`]: `backoff:<spins>,<yields>,<min-park>,<max-park>`.
    Backoff(BackoffParams),
}

/// The sleep period of a bare `sleep-ns`.
pub const DEFAULT_SLEEP_PERIOD: Duration = Duration::from_nanos(1000);

/// The accepted text forms, for error messages.
const ACCEPTED_FORMS: &str = "busy-spin, noop, yield, sleep-ns[:<period>] (e.g. sleep-ns:1000), \
     backoff[:<max-spins>,<max-yields>,<min-park>,<max-park>] (e.g. backoff:10,5,1us,1ms); \
     durations are nanoseconds or take an ns, us, ms or s suffix";

impl IdleStrategyConfig {
    /// The strategy's short name: `busy-spin`, `noop`, `yield`, `sleep-ns` or `backoff`.
    pub fn alias(&self) -> &'static str {
        match self {
            IdleStrategyConfig::BusySpin => "busy-spin",
            IdleStrategyConfig::NoOp => "noop",
            IdleStrategyConfig::Yield => "yield",
            IdleStrategyConfig::SleepNs { .. } => "sleep-ns",
            IdleStrategyConfig::Backoff(_) => "backoff",
        }
    }

    /// True when the strategy never gives up the CPU (`busy-spin`, `noop`), so its thread needs a core.
    pub fn is_busy(&self) -> bool {
        matches!(self, IdleStrategyConfig::BusySpin | IdleStrategyConfig::NoOp)
    }

    /// True when the strategy sleeps, so that its thread benefits from a small timer slack.
    pub fn sleeps(&self) -> bool {
        matches!(self, IdleStrategyConfig::SleepNs { .. } | IdleStrategyConfig::Backoff(_))
    }

    /// Checks the invariants of the parameters (see the type's documentation).
    pub fn validate(&self) -> Result<(), IdleConfigError> {
        match self {
            IdleStrategyConfig::SleepNs { period } => SleepNs::new(*period).map(|_| ()),
            IdleStrategyConfig::Backoff(params) => params.validate(),
            _ => Ok(()),
        }
    }

    /// Builds the strategy behind a box (for callers that want a trait object; runners use [`Idle`]).
    pub fn build(&self) -> Result<Box<dyn IdleStrategy>, IdleConfigError> {
        Ok(match Idle::new(self)? {
            Idle::BusySpin(s) => Box::new(s),
            Idle::NoOp(s) => Box::new(s),
            Idle::Yield(s) => Box::new(s),
            Idle::SleepNs(s) => Box::new(s),
            Idle::Backoff(s) => Box::new(s),
        })
    }

    /// Builds the strategy as an [`Idle`] (static dispatch).
    pub fn to_idle(&self) -> Result<Idle, IdleConfigError> {
        Idle::new(self)
    }
}

impl Default for IdleStrategyConfig {
    /// `backoff:10,5,1us,1ms`: a safe default that does not take a whole core when idle.
    fn default() -> Self {
        IdleStrategyConfig::Backoff(BackoffParams::DEFAULT)
    }
}

impl fmt::Display for IdleStrategyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleStrategyConfig::SleepNs { period } => write!(f, "sleep-ns:{}", period.as_nanos()),
            IdleStrategyConfig::Backoff(p) => write!(
                f,
                "backoff:{},{},{},{}",
                p.max_spins,
                p.max_yields,
                DurationText(p.min_park),
                DurationText(p.max_park)
            ),
            other => f.write_str(other.alias()),
        }
    }
}

/// Prints a duration with the largest of the suffixes `s`, `ms`, `us`, `ns` that divides it exactly.
struct DurationText(Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        for (unit, suffix) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
            if ns != 0 && ns % unit == 0 {
                return write!(f, "{}{}", ns / unit, suffix);
            }
        }
        write!(f, "{ns}ns")
    }
}

impl FromStr for IdleStrategyConfig {
    type Err = IdleConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, args) = match text.split_once(':') {
            Some((name, args)) => (name, Some(args)),
            None => (text, None),
        };
        let err = |reason: String| IdleConfigError::new(text, reason);
        let config = match (name, args) {
            ("busy-spin", None) => IdleStrategyConfig::BusySpin,
            ("noop", None) => IdleStrategyConfig::NoOp,
            ("yield", None) => IdleStrategyConfig::Yield,
            ("sleep-ns", None) => IdleStrategyConfig::SleepNs { period: DEFAULT_SLEEP_PERIOD },
            ("sleep-ns", Some(arg)) => {
                IdleStrategyConfig::SleepNs { period: parse_duration(arg, BareNumber::Nanos).map_err(err)? }
            }
            ("backoff", None) => IdleStrategyConfig::Backoff(BackoffParams::DEFAULT),
            ("backoff", Some(args)) => IdleStrategyConfig::Backoff(parse_backoff(args).map_err(err)?),
            ("busy-spin" | "noop" | "yield", Some(_)) => return Err(err(format!("`{name}` takes no arguments"))),
            _ => return Err(err(format!("unknown idle strategy `{name}`"))),
        };
        config.validate().map_err(|e| IdleConfigError::new(text, e.reason))?;
        Ok(config)
    }
}

fn parse_backoff(args: &str) -> Result<BackoffParams, String> {
    let parts: Vec<&str> = args.split(',').collect();
    let [spins, yields, min_park, max_park] = parts[..] else {
        return Err(format!("backoff takes 4 arguments, got {}", parts.len()));
    };
    let count = |what: &str, s: &str| {
        s.trim().parse::<u32>().map_err(|_| format!("{what} `{s}` is not a whole number from 0 to {}", u32::MAX))
    };
    Ok(BackoffParams {
        max_spins: count("max-spins", spins)?,
        max_yields: count("max-yields", yields)?,
        min_park: parse_duration(min_park, BareNumber::Nanos)?,
        max_park: parse_duration(max_park, BareNumber::Nanos)?,
    })
}

/// An idle strategy text or parameters that do not describe a valid strategy. The message names the
/// input, what is wrong with it, and lists the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleConfigError {
    /// The text (or the printed configuration) that was rejected.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl IdleConfigError {
    fn new(input: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { input: input.into(), reason: reason.into() }
    }
}

impl fmt::Display for IdleConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid idle strategy `{}`: {}; accepted forms: {ACCEPTED_FORMS}", self.input, self.reason)
    }
}

impl std::error::Error for IdleConfigError {}

/// Sets the calling thread's timer slack: the window within which Linux may delay its timed sleeps to
/// coalesce wake-ups (50 µs by default for ordinary threads). `slack` must be at least 1 ns; 0 would
/// mean "back to the default". Returns an error where unsupported (not Linux) or refused.
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = slack.as_nanos();
    if ns == 0 || ns > libc::c_ulong::MAX as u128 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "timer slack must be from 1 ns to c_ulong::MAX ns"));
    }
    set_timer_slack_ns(ns as libc::c_ulong)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_timer_slack_ns(ns: libc::c_ulong) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument by value and touches no memory of ours; it
    // only changes an attribute of the calling thread.
    let rc =
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn set_timer_slack_ns(_ns: libc::c_ulong) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "timer slack can only be set on Linux"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(max_spins: u32, max_yields: u32, min_ns: u64, max_ns: u64) -> BackoffParams {
        BackoffParams {
            max_spins,
            max_yields,
            min_park: Duration::from_nanos(min_ns),
            max_park: Duration::from_nanos(max_ns),
        }
    }

    #[test]
    fn canonical_forms_round_trip() {
        for text in
            ["busy-spin", "noop", "yield", "sleep-ns:1000", "sleep-ns:1", "backoff:10,5,1us,1ms", "backoff:0,0,1ns,1s"]
        {
            let config: IdleStrategyConfig = text.parse().unwrap();
            assert_eq!(config.to_string(), text);
            assert_eq!(config.to_string().parse::<IdleStrategyConfig>().unwrap(), config);
        }
    }

    #[test]
    fn short_forms_mean_defaults() {
        assert_eq!(
            "sleep-ns".parse::<IdleStrategyConfig>().unwrap(),
            IdleStrategyConfig::SleepNs { period: DEFAULT_SLEEP_PERIOD }
        );
        let backoff: IdleStrategyConfig = "backoff".parse().unwrap();
        assert_eq!(backoff, IdleStrategyConfig::Backoff(BackoffParams::DEFAULT));
        assert_eq!(backoff.to_string(), "backoff:10,5,1us,1ms");
    }

    #[test]
    fn durations_accept_every_suffix() {
        let parsed: IdleStrategyConfig = "backoff:1,2,1500ns,2s".parse().unwrap();
        assert_eq!(parsed, IdleStrategyConfig::Backoff(params(1, 2, 1500, 2_000_000_000)));
        assert_eq!(parsed.to_string(), "backoff:1,2,1500ns,2s");
        let parsed: IdleStrategyConfig = "backoff:3,4,250,3ms".parse().unwrap();
        assert_eq!(parsed, IdleStrategyConfig::Backoff(params(3, 4, 250, 3_000_000)));
        let parsed: IdleStrategyConfig = "sleep-ns:2us".parse().unwrap();
        assert_eq!(parsed.to_string(), "sleep-ns:2000");
    }

    #[test]
    fn bad_forms_are_rejected_with_the_accepted_forms() {
        for text in [
            "",
            "spin",
            "Busy-Spin",
            "yield:1",
            "sleep-ns:",
            "sleep-ns:0",
            "sleep-ns:10xs",
            "sleep-ns:-5",
            "backoff:",
            "backoff:1,2,3",
            "backoff:1,2,3us,4us,5",
            "backoff:a,2,1us,1ms",
            "backoff:1,2,2ms,1ms",
            "backoff:1,2,0ns,1ms",
            "backoff:1,2,1us,99999999999999999999s",
        ] {
            let error = text.parse::<IdleStrategyConfig>().unwrap_err();
            let message = error.to_string();
            assert_eq!(error.input, text);
            assert!(message.contains("accepted forms: busy-spin, noop, yield, sleep-ns"), "{message}");
            assert!(message.contains("backoff:10,5,1us,1ms"), "{message}");
        }
    }

    #[test]
    fn busy_and_sleeping_strategies_are_told_apart() {
        let busy: Vec<bool> = ["busy-spin", "noop", "yield", "sleep-ns", "backoff"]
            .iter()
            .map(|t| t.parse::<IdleStrategyConfig>().unwrap().is_busy())
            .collect();
        assert_eq!(busy, [true, true, false, false, false]);
        assert!(IdleStrategyConfig::default().sleeps());
        assert!(!IdleStrategyConfig::Yield.sleeps());
    }

    #[test]
    fn built_strategies_report_their_config() {
        for text in ["busy-spin", "noop", "yield", "sleep-ns:1000", "backoff:10,5,1us,1ms"] {
            let config: IdleStrategyConfig = text.parse().unwrap();
            let boxed = config.build().unwrap();
            assert_eq!(boxed.to_string(), text);
            assert_eq!(boxed.alias(), config.alias());
            assert_eq!(boxed.is_busy(), config.is_busy());
            let idle = config.to_idle().unwrap();
            assert_eq!(idle.to_string(), text);
        }
    }

    #[test]
    fn invalid_configs_do_not_build() {
        assert!(IdleStrategyConfig::SleepNs { period: Duration::ZERO }.build().is_err());
        assert!(Backoff::new(params(1, 1, 10, 5)).is_err());
        assert!(Idle::new(&IdleStrategyConfig::Backoff(params(1, 1, 0, 5))).is_err());
    }

    #[test]
    fn backoff_spins_then_yields_then_parks_doubling() {
        let mut backoff = Backoff::with_park_floor(params(3, 2, 1, 5), Duration::ZERO);
        assert_eq!(backoff.state(), BackoffState::NotIdle);
        for spin in 1..=3 {
            backoff.idle(0);
            assert_eq!((backoff.state(), backoff.spins(), backoff.yields()), (BackoffState::Spinning, spin, 0));
        }
        for yielded in 1..=2 {
            backoff.idle(0);
            assert_eq!((backoff.state(), backoff.spins(), backoff.yields()), (BackoffState::Yielding, 3, yielded));
        }
        assert_eq!(backoff.park_period(), Duration::from_nanos(1));
        let mut periods = Vec::new();
        for _ in 0..5 {
            backoff.idle(0);
            assert_eq!(backoff.state(), BackoffState::Parking);
            periods.push(backoff.park_period().as_nanos());
        }
        assert_eq!(periods, [2, 4, 5, 5, 5]);
    }

    #[test]
    fn no_park_is_shorter_than_the_floor_nor_longer_than_the_longest() {
        let us = Duration::from_micros;
        let IdleStrategyConfig::Backoff(params) = "backoff:0,0,1us,1ms".parse().unwrap() else { unreachable!() };
        let mut park = RecordingPark::default();
        let mut backoff = Backoff::with_park_floor(params, us(50));
        assert_eq!(backoff.park_period(), us(50));
        for _ in 0..7 {
            backoff.idle_with(0, &mut park);
        }
        assert_eq!(park.0, [50, 100, 200, 400, 800, 1000, 1000].map(us), "from the floor, doubling");
        backoff.idle(1);
        assert_eq!(backoff.park_period(), us(50), "work starts over at the floor");
        let mut capped = Backoff::with_park_floor(params, us(5000));
        capped.idle_with(0, &mut park);
        assert_eq!(park.0.last(), Some(&us(1000)), "a floor above the longest park is the longest");
    }

    #[test]
    fn work_resets_backoff() {
        let mut backoff = Backoff::with_park_floor(params(1, 1, 1, 8), Duration::ZERO);
        for _ in 0..4 {
            backoff.idle(0);
        }
        assert_eq!(backoff.state(), BackoffState::Parking);
        backoff.idle(1);
        assert_eq!((backoff.state(), backoff.spins(), backoff.yields()), (BackoffState::NotIdle, 0, 0));
        assert_eq!(backoff.park_period(), Duration::from_nanos(1));
        backoff.idle(0);
        assert_eq!(backoff.state(), BackoffState::Spinning);
        backoff.reset();
        assert_eq!(backoff.state(), BackoffState::NotIdle);
    }

    #[test]
    fn backoff_without_spins_or_yields_parks_at_once() {
        let mut backoff = Backoff::new(params(0, 0, 1, 1)).unwrap();
        backoff.idle(0);
        assert_eq!((backoff.state(), backoff.spins(), backoff.yields()), (BackoffState::Parking, 0, 0));
    }

    #[test]
    fn idle_enum_dispatches_to_the_backoff_state() {
        let mut idle = Idle::new(&IdleStrategyConfig::Backoff(params(1, 0, 1, 1))).unwrap();
        idle.idle(0);
        idle.idle(0);
        let Idle::Backoff(backoff) = &idle else { panic!("expected a backoff") };
        assert_eq!(backoff.state(), BackoffState::Parking);
        idle.reset();
        let Idle::Backoff(backoff) = &idle else { panic!("expected a backoff") };
        assert_eq!(backoff.state(), BackoffState::NotIdle);
    }

    #[test]
    fn timer_slack_is_set_or_unsupported() {
        assert!(set_timer_slack(Duration::ZERO).is_err());
        let result = thread::spawn(|| set_timer_slack(Duration::from_nanos(1))).join().unwrap();
        if cfg!(target_os = "linux") {
            result.unwrap();
        }
    }

    /// Records the park periods asked of it instead of waiting.
    #[derive(Default)]
    struct RecordingPark(Vec<Duration>);

    impl Park for RecordingPark {
        fn park(&mut self, timeout: Duration) {
            self.0.push(timeout);
        }
    }

    #[test]
    fn parking_strategies_park_where_they_are_told() {
        let mut park = RecordingPark::default();
        let IdleStrategyConfig::Backoff(params) = "backoff:1,1,1us,4us".parse().unwrap() else { unreachable!() };
        let mut backoff = Idle::Backoff(Backoff::with_park_floor(params, Duration::ZERO));
        for _ in 0..6 {
            backoff.idle_with(0, &mut park);
        }
        let us = Duration::from_micros;
        assert_eq!(park.0, vec![us(1), us(2), us(4), us(4)], "one spin, one yield, then parks that double");
        let mut sleep = Idle::new(&"sleep-ns:500".parse().unwrap()).unwrap();
        sleep.idle_with(0, &mut park);
        sleep.idle_with(3, &mut park);
        assert_eq!(park.0.last(), Some(&Duration::from_nanos(500)));
        assert_eq!(park.0.len(), 5, "work never parks");
        let mut spin = Idle::new(&"busy-spin".parse().unwrap()).unwrap();
        spin.idle_with(0, &mut park);
        assert_eq!(park.0.len(), 5, "spinning never parks");
    }
}
