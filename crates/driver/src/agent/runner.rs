//! An agent on a thread of its own.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{catch_panic, Agent, AgentCounters, AgentError, AgentFailure, AgentPhase, Warning};
use crate::agent::idle::{set_timer_slack, Idle, IdleStrategy};

/// The timer slack set on threads whose idle strategy sleeps.
const SLEEPING_TIMER_SLACK: Duration = Duration::from_nanos(1);

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const FAILED: u8 = 2;

/// The owner's command to the thread, read once per duty cycle.
const RUN: u8 = 0;
const PAUSE: u8 = 1;
const STOP: u8 = 2;

/// What a runner's thread is doing, as seen from its owner.
#[derive(Clone, Debug)]
pub enum RunnerStatus {
    /// The thread is alive: starting, running duty cycles, or closing after a stop request.
    Running,
    /// The agent stopped cleanly (stop request or [`AgentError::Terminate`]).
    Stopped,
    /// The agent failed; the thread closes it (if it has not yet) and ends.
    Failed(AgentFailure),
}

/// State shared between a runner's owner and its thread.
#[derive(Debug)]
struct Shared {
    /// RUN, PAUSE or STOP, set by the owner; read once per duty cycle. STOP is final.
    command: AtomicU8,
    /// True while the thread is parked at a pause point (between duty cycles), so that its core is free.
    paused: Mutex<bool>,
    /// Signalled when `paused` changes.
    paused_changed: Condvar,
    /// RUNNING, then STOPPED or FAILED. FAILED is stored after `failure` is filled in.
    state: AtomicU8,
    /// The failure, once there is one. Never locked while agent code runs, so never poisoned by it.
    failure: Mutex<Option<AgentFailure>>,
}

impl Shared {
    fn paused(&self) -> MutexGuard<'_, bool> {
        self.paused.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The thread's pause point: parks while the command is PAUSE, saying so through `paused`. Returns
    /// false when the thread must stop.
    fn pause_point(&self) -> bool {
        self.set_paused(true);
        while self.command.load(Ordering::Acquire) == PAUSE {
            thread::park();
        }
        self.set_paused(false);
        self.command.load(Ordering::Acquire) != STOP
    }

    fn set_paused(&self, paused: bool) {
        *self.paused() = paused;
        self.paused_changed.notify_all();
    }

    fn failure(&self) -> MutexGuard<'_, Option<AgentFailure>> {
        self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the first failure and publishes the FAILED state.
    fn fail(&self, failure: AgentFailure) {
        let mut slot = self.failure();
        if slot.is_none() {
            *slot = Some(failure);
        }
        drop(slot);
        self.state.store(FAILED, Ordering::Release);
    }
}

/// Runs an agent's duty cycle on a thread of its own: `while running { idle.idle(agent.do_work()?) }`.
///
/// On the thread, in order: pin to the core (if one is given), lower the timer slack (if the idle strategy
/// sleeps), `on_start`, the duty loop until [`stop`](Self::stop) or an error, then `on_close`. A panic in
/// any agent call is caught and reported like an error (see the [module](super) lifecycle invariants).
///
/// Counters: each cycle increments `duty_cycles`, adds the work count to `work` or increments `idle_cycles`,
/// and raises `max_cycle_ns` to the cycle's length. The length of a cycle that did work is measured from the
/// end of the previous cycle to the end of this one (one clock read per busy cycle, ~31 ns here); an idle
/// cycle reads the clock once more before idling, so that the idle period is never counted.
///
/// Dropping a runner stops and joins it.
#[derive(Debug)]
pub struct AgentRunner {
    name: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    warnings: Vec<Warning>,
    counters: AgentCounters,
}

impl AgentRunner {
    /// Spawns a thread named after the agent, pins it to `core` when given, and runs `agent` on it.
    ///
    /// Returns once the thread is set up (pinned), not waiting for `on_start`; a core that could not be
    /// pinned is a [`Warning`] in [`warnings`](Self::warnings), not an error. Fails only when the thread
    /// cannot be spawned.
    pub fn start<A: Agent + 'static>(
        agent: A,
        idle: Idle,
        core: Option<usize>,
        counters: AgentCounters,
    ) -> io::Result<AgentRunner> {
        let name = agent.name().to_owned();
        let shared = Arc::new(Shared {
            command: AtomicU8::new(RUN),
            paused: Mutex::new(false),
            paused_changed: Condvar::new(),
            state: AtomicU8::new(RUNNING),
            failure: Mutex::new(None),
        });
        let (setup_tx, setup_rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread_counters = counters.clone();
        let thread = thread::Builder::new().name(name.replace('\0', " ")).spawn(move || {
            let warnings = set_up_thread(&agent, &idle, core);
            // The owner may have given up waiting; nothing to do then.
            let _ = setup_tx.send(warnings);
            run(agent, idle, &thread_shared, &thread_counters);
        })?;
        // An Err means the thread ended before sending, which `run` cannot do: no warnings to report.
        let warnings = setup_rx.recv().unwrap_or_default();
        Ok(AgentRunner { name, shared, thread: Some(thread), warnings, counters })
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Problems met while setting up the thread (pinning, timer slack).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The agent's counters.
    pub fn counters(&self) -> &AgentCounters {
        &self.counters
    }

    /// Asks the thread to stop after its current duty cycle, and wakes it if it is parked. Returns at once.
    pub fn stop(&self) {
        self.shared.command.store(STOP, Ordering::Release);
        self.wake();
    }

    /// Asks the thread to park after its current duty cycle, and waits up to `timeout` until it has: then
    /// it runs no agent code and takes no CPU until [`resume`](Self::resume). For a measurement that needs
    /// the thread's core, or for maintenance; peers see the agent fall silent, so keep a pause well inside
    /// their liveness timeouts (a channel's `receiver_timeout`). Returns false when the thread did not park
    /// in time (it is still asked to) or has ended.
    pub fn pause(&self, timeout: Duration) -> bool {
        if self.shared.command.compare_exchange(RUN, PAUSE, Ordering::AcqRel, Ordering::Acquire) == Err(STOP) {
            return false;
        }
        self.wake();
        let deadline = Instant::now() + timeout;
        let mut paused = self.shared.paused();
        while !*paused && self.is_running() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            paused = self
                .shared
                .paused_changed
                .wait_timeout(paused, left.min(Duration::from_millis(10)))
                .map_or_else(|poisoned| poisoned.into_inner().0, |(guard, _)| guard);
        }
        *paused
    }

    /// Lets a paused thread go on with its duty cycles (nothing when it is not paused or is stopping).
    pub fn resume(&self) {
        if self.shared.command.compare_exchange(PAUSE, RUN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.wake();
        }
    }

    /// True while the thread is parked at its pause point.
    pub fn is_paused(&self) -> bool {
        *self.shared.paused()
    }

    fn wake(&self) {
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }

    /// True while the thread is alive and has not failed.
    pub fn is_running(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == RUNNING
    }

    /// The thread's status, without waiting.
    pub fn status(&self) -> RunnerStatus {
        match self.shared.state.load(Ordering::Acquire) {
            RUNNING => RunnerStatus::Running,
            STOPPED => RunnerStatus::Stopped,
            _ => self.failure().map_or(RunnerStatus::Stopped, RunnerStatus::Failed),
        }
    }

    /// The agent's failure, if it failed.
    pub fn failure(&self) -> Option<AgentFailure> {
        self.shared.failure().clone()
    }

    /// Waits for the thread to end and returns the agent's failure, if any. Does not ask it to stop: call
    /// [`stop`](Self::stop) first (or use [`close`](Self::close)) unless the agent ends by itself.
    pub fn join(mut self) -> Result<(), AgentFailure> {
        self.join_thread()
    }

    /// Stops the thread and waits for it: [`stop`](Self::stop) then [`join`](Self::join).
    pub fn close(self) -> Result<(), AgentFailure> {
        self.stop();
        self.join()
    }

    fn join_thread(&mut self) -> Result<(), AgentFailure> {
        if let Some(thread) = self.thread.take() {
            if let Err(payload) = thread.join() {
                // Only a panic outside the agent's calls (a bug in the runner itself) gets here.
                self.shared.fail(AgentFailure::panic(&self.name, AgentPhase::Work, &*payload));
            }
        }
        self.failure().map_or(Ok(()), Err)
    }
}

impl Drop for AgentRunner {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
            // The failure stays visible to anyone who looked; a drop has no one left to report it to.
            let _ = self.join_thread();
        }
    }
}

/// Pins the thread and lowers its timer slack, returning what could not be done.
fn set_up_thread<A: Agent>(agent: &A, idle: &Idle, core: Option<usize>) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if let Some(core) = core {
        if let Err(reason) = pin_current_thread(core) {
            warnings.push(Warning::PinFailed { agent: agent.name().to_owned(), core, reason });
        }
    }
    if idle.config().sleeps() {
        if let Err(error) = set_timer_slack(SLEEPING_TIMER_SLACK) {
            warnings.push(Warning::TimerSlackNotSet { agent: agent.name().to_owned(), reason: error.to_string() });
        }
    }
    warnings
}

/// Pins the calling thread to `core`, or says why not.
///
/// The kernel decides whether `core` is allowed, not the calling thread's current affinity mask: a thread
/// inherits the mask of the thread that spawned it, so one spawned by a thread pinned to core 0 lists only
/// core 0 (which is all `core_affinity::get_core_ids` reports), yet may still move to core 1.
pub fn pin_current_thread(core: usize) -> Result<(), String> {
    // `CPU_SET` indexes a fixed-size set: a core beyond it is refused here rather than out of bounds there.
    if core >= libc::CPU_SETSIZE as usize {
        return Err(format!("core {core} is beyond the {} cores an affinity mask holds", libc::CPU_SETSIZE));
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(format!(
            "the kernel refused to run this thread on core {core} (offline, or outside this process's cpuset: see \
             `taskset -p {}`)",
            std::process::id()
        ))
    }
}

/// The thread body after setup: start, loop, close, and report.
fn run<A: Agent>(mut agent: A, mut idle: Idle, shared: &Shared, counters: &AgentCounters) {
    let name = agent.name().to_owned();
    let outcome = start_and_loop(&mut agent, &mut idle, shared, counters, &name);
    let failed = outcome.is_err();
    if let Err(failure) = outcome {
        shared.fail(failure);
    }
    match catch_panic(&name, AgentPhase::Close, || agent.on_close()) {
        Err(failure) => shared.fail(failure),
        Ok(()) if !failed => shared.state.store(STOPPED, Ordering::Release),
        Ok(()) => {}
    }
}

fn start_and_loop<A: Agent>(
    agent: &mut A,
    idle: &mut Idle,
    shared: &Shared,
    counters: &AgentCounters,
    name: &str,
) -> Result<(), AgentFailure> {
    match catch_panic(name, AgentPhase::Start, || agent.on_start())? {
        Ok(()) => {}
        Err(AgentError::Terminate) => return Ok(()),
        Err(AgentError::Failed(error)) => return Err(AgentFailure::error(name, AgentPhase::Start, error)),
    }
    match catch_panic(name, AgentPhase::Work, || duty_loop(agent, idle, shared, counters))? {
        Ok(()) | Err(AgentError::Terminate) => Ok(()),
        Err(AgentError::Failed(error)) => Err(AgentFailure::error(name, AgentPhase::Work, error)),
    }
}

/// The hot loop: no allocation, no lock, no syscall of its own beyond what the idle strategy does.
fn duty_loop<A: Agent>(
    agent: &mut A,
    idle: &mut Idle,
    shared: &Shared,
    counters: &AgentCounters,
) -> Result<(), AgentError> {
    let mut cycle_start = Instant::now();
    loop {
        match shared.command.load(Ordering::Acquire) {
            RUN => {}
            PAUSE => {
                if !shared.pause_point() {
                    return Ok(());
                }
                cycle_start = Instant::now();
                continue;
            }
            _ => return Ok(()),
        }
        let work = agent.do_work()?;
        counters.record_cycle(work);
        if work == 0 {
            counters.record_duration(cycle_start, Instant::now(), false);
            match agent.parker() {
                Some(park) => idle.idle_with(0, park),
                None => idle.idle(0),
            }
            cycle_start = Instant::now();
        } else {
            idle.idle(work);
            let cycle_end = Instant::now();
            counters.record_duration(cycle_start, cycle_end, true);
            cycle_start = cycle_end;
        }
    }
}
