//! Agent runners, invokers and composites: lifecycle, counters, failures and panics.
//!
//! Every runner here idles with `yield`, `sleep-ns` or `backoff` (the test machine has 2 cores), and no test
//! asserts on timing: waits poll a condition and only give up after a generous deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumcast_driver::agent::idle::{Idle, IdleStrategyConfig};
use quorumcast_driver::agent::{
    Agent, AgentCounters, AgentError, AgentInvoker, AgentPhase, AgentRunner, CompositeAgent, FailureCause,
    RunnerStatus, Warning,
};
use quorumcast_testkit::wait_until;

/// How long a wait may take before the test fails: far beyond any normal run.
const WAIT: Duration = Duration::from_secs(30);

fn idle(text: &str) -> Idle {
    text.parse::<IdleStrategyConfig>().unwrap().to_idle().unwrap()
}

/// A log of lifecycle events shared between a test and its agents.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, event: String) {
        self.0.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn contains(&self, event: &str) -> bool {
        self.events().iter().any(|e| e == event)
    }
}

/// What a scripted agent does on a given cycle.
#[derive(Clone, Copy)]
enum Ending {
    /// Runs until stopped.
    Never,
    /// Returns an error on cycle n.
    Fail(usize),
    /// Panics on cycle n.
    Panic(usize),
    /// Asks to terminate on cycle n.
    Terminate(usize),
}

/// An agent that does one unit of work on odd cycles, logs its lifecycle, and ends as scripted.
struct Scripted {
    name: String,
    log: Log,
    ending: Ending,
    fail_start: bool,
    cycles: Arc<AtomicUsize>,
    work_done: Arc<AtomicUsize>,
    log_work: bool,
}

impl Scripted {
    fn new(name: &str, log: &Log, ending: Ending) -> Self {
        Self {
            name: name.to_owned(),
            log: log.clone(),
            ending,
            fail_start: false,
            cycles: Arc::default(),
            work_done: Arc::default(),
            log_work: false,
        }
    }
}

impl Agent for Scripted {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_start(&mut self) -> Result<(), AgentError> {
        self.log.push(format!("{}:start", self.name));
        if self.fail_start {
            return Err(AgentError::msg("no socket"));
        }
        Ok(())
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        let cycle = self.cycles.fetch_add(1, Ordering::Relaxed) + 1;
        if self.log_work {
            self.log.push(format!("{}:work", self.name));
        }
        match self.ending {
            Ending::Fail(n) if cycle == n => return Err(AgentError::msg(format!("broke on cycle {n}"))),
            Ending::Panic(n) if cycle == n => panic!("panicked on cycle {n}"),
            Ending::Terminate(n) if cycle == n => return Err(AgentError::Terminate),
            _ => {}
        }
        let work = cycle % 2;
        self.work_done.fetch_add(work, Ordering::Relaxed);
        Ok(work)
    }

    fn on_close(&mut self) {
        self.log.push(format!("{}:close", self.name));
    }
}

#[test]
fn runner_runs_until_stopped_and_counts() {
    let log = Log::default();
    let agent = Scripted::new("counted", &log, Ending::Never);
    let (cycles, work_done) = (Arc::clone(&agent.cycles), Arc::clone(&agent.work_done));
    let runner = AgentRunner::start(agent, idle("yield"), None, AgentCounters::detached()).unwrap();
    assert_eq!(runner.name(), "counted");
    assert!(runner.warnings().is_empty(), "{:?}", runner.warnings());
    let counters = runner.counters().clone();
    wait_until("1000 duty cycles ran", WAIT, || counters.duty_cycles.get() >= 1000);
    assert!(runner.is_running());
    assert!(matches!(runner.status(), RunnerStatus::Running));
    runner.close().unwrap();

    let cycles = cycles.load(Ordering::Relaxed) as i64;
    let work_done = work_done.load(Ordering::Relaxed) as i64;
    assert_eq!(counters.duty_cycles.get(), cycles);
    assert_eq!(counters.work.get(), work_done);
    assert_eq!(counters.idle_cycles.get(), cycles - work_done);
    assert!(counters.max_cycle_ns.get() > 0);
    assert_eq!(log.events(), ["counted:start", "counted:close"]);
}

#[test]
fn stop_wakes_a_parked_thread() {
    // With a 100 s sleep, close() only returns promptly because stop() unparks the thread.
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("sleepy", &log, Ending::Never),
        idle("sleep-ns:100s"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    let counters = runner.counters().clone();
    wait_until("the first cycle ran", WAIT, || counters.duty_cycles.get() >= 1);
    runner.close().unwrap();
    assert!(log.contains("sleepy:close"));
}

#[test]
fn a_paused_runner_runs_no_cycle_until_resumed() {
    let log = Log::default();
    let agent = Scripted::new("pausable", &log, Ending::Never);
    let cycles = Arc::clone(&agent.cycles);
    let runner = AgentRunner::start(agent, idle("sleep-ns:100s"), None, AgentCounters::detached()).unwrap();
    let counters = runner.counters().clone();
    wait_until("the first cycle ran", WAIT, || counters.duty_cycles.get() >= 1);
    // The 100 s sleep ends early only because pause() wakes the thread.
    assert!(runner.pause(Duration::from_secs(30)), "the thread parked at its pause point");
    assert!(runner.is_paused());
    let frozen = cycles.load(Ordering::Relaxed);
    for _ in 0..1000 {
        std::thread::yield_now();
    }
    assert_eq!(cycles.load(Ordering::Relaxed), frozen, "no duty cycle while paused");
    assert!(runner.pause(Duration::from_secs(30)), "pausing a paused runner holds");
    assert!(matches!(runner.status(), RunnerStatus::Running));

    runner.resume();
    wait_until("a cycle ran after resume", WAIT, || cycles.load(Ordering::Relaxed) > frozen);
    assert!(!runner.is_paused());
    runner.close().unwrap();
    assert_eq!(log.events(), ["pausable:start", "pausable:close"]);
}

#[test]
fn a_paused_runner_stops_and_a_stopped_one_does_not_pause() {
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("parked", &log, Ending::Never),
        idle("yield"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    assert!(runner.pause(Duration::from_secs(30)));
    runner.stop();
    wait_until("the paused thread stopped", WAIT, || matches!(runner.status(), RunnerStatus::Stopped));
    assert!(!runner.pause(Duration::from_secs(30)), "a stopped runner cannot pause");
    runner.resume();
    runner.join().unwrap();
    assert!(log.contains("parked:close"));
}

#[test]
fn an_error_is_reported_by_status_and_join() {
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("faulty", &log, Ending::Fail(50)),
        idle("backoff:2,2,1us,10us"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    wait_until("the agent failed", WAIT, || !runner.is_running());
    let RunnerStatus::Failed(failure) = runner.status() else {
        panic!("expected a failure, got {:?}", runner.status())
    };
    assert_eq!(failure.agent, "faulty");
    assert_eq!(failure.phase, AgentPhase::Work);
    assert!(!failure.is_panic());
    assert_eq!(failure.to_string(), "agent `faulty` failed in do_work: broke on cycle 50");
    assert!(runner.failure().is_some());
    let joined = runner.join().unwrap_err();
    assert_eq!(joined.to_string(), failure.to_string());
    assert_eq!(log.events(), ["faulty:start", "faulty:close"]);
}

#[test]
fn a_panic_is_reported_and_the_agent_closed() {
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("panicky", &log, Ending::Panic(20)),
        idle("yield"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    wait_until("the agent failed", WAIT, || runner.failure().is_some());
    let failure = runner.join().unwrap_err();
    assert!(failure.is_panic());
    assert_eq!(failure.phase, AgentPhase::Work);
    assert!(matches!(&failure.cause, FailureCause::Panic(m) if m == "panicked on cycle 20"), "{failure}");
    assert_eq!(log.events(), ["panicky:start", "panicky:close"]);
}

#[test]
fn a_failed_start_is_reported_and_closed_without_work() {
    let log = Log::default();
    let mut agent = Scripted::new("unstartable", &log, Ending::Never);
    agent.fail_start = true;
    let cycles = Arc::clone(&agent.cycles);
    let runner = AgentRunner::start(agent, idle("yield"), None, AgentCounters::detached()).unwrap();
    let failure = runner.join().unwrap_err();
    assert_eq!(failure.phase, AgentPhase::Start);
    assert!(failure.to_string().contains("no socket"), "{failure}");
    assert_eq!(cycles.load(Ordering::Relaxed), 0);
    assert_eq!(log.events(), ["unstartable:start", "unstartable:close"]);
}

#[test]
fn terminate_stops_cleanly() {
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("finite", &log, Ending::Terminate(30)),
        idle("yield"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    let counters = runner.counters().clone();
    wait_until("the agent stopped", WAIT, || !runner.is_running());
    assert!(matches!(runner.status(), RunnerStatus::Stopped));
    runner.join().unwrap();
    // The terminating cycle ends the loop before it is counted.
    assert_eq!(counters.duty_cycles.get(), 29);
    assert_eq!(log.events(), ["finite:start", "finite:close"]);
}

#[test]
fn dropping_a_runner_stops_and_joins_it() {
    let log = Log::default();
    let runner = AgentRunner::start(
        Scripted::new("dropped", &log, Ending::Never),
        idle("sleep-ns:1ms"),
        None,
        AgentCounters::detached(),
    )
    .unwrap();
    let counters = runner.counters().clone();
    wait_until("a cycle ran", WAIT, || counters.duty_cycles.get() >= 1);
    drop(runner);
    assert_eq!(log.events(), ["dropped:start", "dropped:close"]);
}

/// Reads the calling thread's allowed CPU list from /proc.
fn allowed_cpus() -> String {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_owned()
}

/// Records the CPUs it may run on, in `on_start`.
struct AffinityProbe(Arc<Mutex<Option<String>>>);

impl Agent for AffinityProbe {
    fn name(&self) -> &str {
        "probe"
    }

    fn on_start(&mut self) -> Result<(), AgentError> {
        *self.0.lock().unwrap() = Some(allowed_cpus());
        Err(AgentError::Terminate)
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        Ok(0)
    }
}

#[test]
fn a_runner_pinned_to_the_first_core_runs_there() {
    let Some(core) = core_affinity::get_core_ids().and_then(|ids| ids.first().copied()) else {
        eprintln!("skipped: core_affinity lists no cores here");
        return;
    };
    if !cfg!(target_os = "linux") {
        return;
    }
    let seen = Arc::new(Mutex::new(None));
    let runner =
        AgentRunner::start(AffinityProbe(Arc::clone(&seen)), idle("yield"), Some(core.id), AgentCounters::detached())
            .unwrap();
    assert!(runner.warnings().is_empty(), "{:?}", runner.warnings());
    runner.join().unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some(core.id.to_string().as_str()));
}

/// The bug this guards against: a thread inherits its creator's affinity mask, so a check against the
/// calling thread's mask refused every other core once the caller was pinned (the sweep's S probe then ran
/// beside its drainer on the harness core, unnoticed).
#[test]
fn a_runner_started_from_a_pinned_thread_is_pinned_to_another_core() {
    let Some(ids) = core_affinity::get_core_ids().filter(|ids| ids.len() >= 2) else {
        eprintln!("skipped: fewer than 2 cores to pin to here");
        return;
    };
    if !cfg!(target_os = "linux") {
        return;
    }
    let (first, last) = (ids[0].id, ids[ids.len() - 1].id);
    let seen = Arc::new(Mutex::new(None));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            quorumcast_driver::agent::pin_current_thread(first).unwrap();
            assert_eq!(allowed_cpus(), first.to_string());
            let runner = AgentRunner::start(
                AffinityProbe(Arc::clone(&seen)),
                idle("yield"),
                Some(last),
                AgentCounters::detached(),
            )
            .unwrap();
            assert!(runner.warnings().is_empty(), "{:?}", runner.warnings());
            runner.join().unwrap();
        });
    });
    assert_eq!(seen.lock().unwrap().as_deref(), Some(last.to_string().as_str()));
}

#[test]
fn a_core_that_cannot_be_pinned_is_a_warning() {
    let seen = Arc::new(Mutex::new(None));
    let runner =
        AgentRunner::start(AffinityProbe(Arc::clone(&seen)), idle("yield"), Some(100_000), AgentCounters::detached())
            .unwrap();
    let [Warning::PinFailed { agent, core, .. }] = runner.warnings() else { panic!("{:?}", runner.warnings()) };
    assert_eq!((agent.as_str(), *core), ("probe", 100_000));
    runner.join().unwrap();
    assert!(seen.lock().unwrap().is_some(), "the agent still ran");
}

fn boxed(agent: Scripted) -> Box<dyn Agent> {
    Box::new(agent)
}

#[test]
fn composite_runs_in_order_and_closes_in_reverse() {
    let log = Log::default();
    let mut agents = Vec::new();
    for name in ["a", "b"] {
        let mut agent = Scripted::new(name, &log, Ending::Never);
        agent.log_work = true;
        agents.push(boxed(agent));
    }
    let mut composite = CompositeAgent::new(agents);
    assert_eq!(composite.name(), "a+b");
    assert_eq!(composite.len(), 2);
    composite.on_start().unwrap();
    // Each agent works on its odd cycles: cycle 1 gives 1 + 1, cycle 2 gives 0 + 0.
    assert_eq!(composite.do_work().unwrap(), 2);
    assert_eq!(composite.do_work().unwrap(), 0);
    composite.on_close();
    composite.on_close();
    assert_eq!(log.events(), ["a:start", "b:start", "a:work", "b:work", "a:work", "b:work", "b:close", "a:close"]);
}

#[test]
fn composite_closes_started_agents_when_one_fails_to_start() {
    let log = Log::default();
    let mut failing = Scripted::new("b", &log, Ending::Never);
    failing.fail_start = true;
    let agents = vec![
        boxed(Scripted::new("a", &log, Ending::Never)),
        boxed(failing),
        boxed(Scripted::new("c", &log, Ending::Never)),
    ];
    let mut composite = CompositeAgent::new(agents);
    let error = composite.on_start().unwrap_err();
    assert_eq!(error.to_string(), "b: no socket");
    composite.on_close();
    assert_eq!(log.events(), ["a:start", "b:start", "b:close", "a:close"]);
}

#[test]
fn composite_errors_name_the_failing_agent_and_stop_the_runner() {
    let log = Log::default();
    let agents = vec![
        boxed(Scripted::new("sender", &log, Ending::Never)),
        boxed(Scripted::new("receiver", &log, Ending::Fail(7))),
    ];
    let runner =
        AgentRunner::start(CompositeAgent::new(agents), idle("yield"), None, AgentCounters::detached()).unwrap();
    let failure = runner.join().unwrap_err();
    assert_eq!(failure.agent, "sender+receiver");
    assert_eq!(failure.to_string(), "agent `sender+receiver` failed in do_work: receiver: broke on cycle 7");
    assert_eq!(log.events(), ["sender:start", "receiver:start", "receiver:close", "sender:close"]);
}

#[test]
fn invoker_runs_cycles_on_the_calling_thread() {
    let log = Log::default();
    let agent = Scripted::new("invoked", &log, Ending::Fail(4));
    let cycles = Arc::clone(&agent.cycles);
    let mut invoker = AgentInvoker::new(agent, AgentCounters::detached());
    assert_eq!(invoker.invoke().unwrap(), 0, "not started yet");
    assert_eq!(cycles.load(Ordering::Relaxed), 0);
    invoker.start().unwrap();
    assert!(invoker.is_running());
    assert_eq!(invoker.invoke().unwrap(), 1);
    assert_eq!(invoker.invoke().unwrap(), 0);
    assert_eq!(invoker.invoke().unwrap(), 1);
    let counters = invoker.counters().clone();
    assert_eq!((counters.duty_cycles.get(), counters.work.get(), counters.idle_cycles.get()), (3, 2, 1));

    let failure = invoker.invoke().unwrap_err();
    assert_eq!(failure.to_string(), "agent `invoked` failed in do_work: broke on cycle 4");
    assert!(invoker.is_closed());
    assert_eq!(invoker.invoke().unwrap(), 0, "closed");
    assert_eq!(cycles.load(Ordering::Relaxed), 4);
    assert!(invoker.close().is_err(), "close reports the failure");
    assert_eq!(log.events(), ["invoked:start", "invoked:close"]);
}

#[test]
fn invoker_catches_panics_and_honours_terminate() {
    let log = Log::default();
    let mut invoker = AgentInvoker::new(Scripted::new("p", &log, Ending::Panic(1)), AgentCounters::detached());
    invoker.start().unwrap();
    assert!(invoker.invoke().unwrap_err().is_panic());
    assert!(invoker.failure().is_some());

    let mut invoker = AgentInvoker::new(Scripted::new("t", &log, Ending::Terminate(2)), AgentCounters::detached());
    invoker.start().unwrap();
    assert_eq!(invoker.invoke().unwrap(), 1);
    assert_eq!(invoker.invoke().unwrap(), 0);
    assert!(invoker.is_closed());
    invoker.close().unwrap();

    let mut invoker = AgentInvoker::new(Scripted::new("d", &log, Ending::Never), AgentCounters::detached());
    invoker.start().unwrap();
    drop(invoker);
    assert_eq!(log.events(), ["p:start", "p:close", "t:start", "t:close", "d:start", "d:close"]);
}
