//! Threading modes, layouts and the core check.
//!
//! Layouts with busy-spinning strategies are only planned and checked here, never started (2-core machine).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::agent::{
    check_cores, Agent, AgentCounters, AgentError, AgentLayout, AgentRole, AgentSpec, CoreProblem, LayoutError,
    ThreadingMode, Warning,
};
use quorumcast_testkit::wait_until;

/// How long a wait may take before the test fails: far beyond any normal run.
const WAIT: Duration = Duration::from_secs(30);

/// Counts its duty cycles; does no work (so backoff strategies back off).
struct Ticker {
    name: &'static str,
    cycles: Arc<AtomicUsize>,
}

impl Agent for Ticker {
    fn name(&self) -> &str {
        self.name
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        self.cycles.fetch_add(1, Ordering::Relaxed);
        Ok(0)
    }
}

const ROLES: [(AgentRole, &str); 3] =
    [(AgentRole::Consensus, "consensus"), (AgentRole::Sender, "sender"), (AgentRole::Receiver, "receiver")];

/// The node's three agents, each with `idle` and the given cores, plus their cycle counters.
fn node(idle: &str, cores: [Option<usize>; 3]) -> (Vec<AgentSpec>, Vec<Arc<AtomicUsize>>) {
    let idle: IdleStrategyConfig = idle.parse().unwrap();
    let mut specs = Vec::new();
    let mut cycles = Vec::new();
    for ((role, name), core) in ROLES.into_iter().zip(cores) {
        let counter = Arc::new(AtomicUsize::new(0));
        cycles.push(Arc::clone(&counter));
        specs.push(AgentSpec { role, agent: Box::new(Ticker { name, cycles: counter }), idle, core });
    }
    (specs, cycles)
}

fn thread_names(layout: &AgentLayout) -> Vec<&str> {
    layout.threads().iter().map(|t| t.name()).collect()
}

#[test]
fn threading_modes_parse_and_print() {
    for text in ["dedicated", "shared-network", "shared", "invoker", "shared-network-invoker"] {
        let mode: ThreadingMode = text.parse().unwrap();
        assert_eq!(mode.to_string(), text);
    }
    assert_eq!(ThreadingMode::default(), ThreadingMode::Dedicated);
    let error = "SHARED".parse::<ThreadingMode>().unwrap_err();
    assert!(
        error.to_string().contains("dedicated, shared-network, shared, invoker or shared-network-invoker"),
        "{error}"
    );
}

#[test]
fn each_mode_plans_its_threads() {
    let plan = |mode| AgentLayout::plan(mode, node("yield", [None; 3]).0).unwrap();

    let dedicated = plan(ThreadingMode::Dedicated);
    assert_eq!(thread_names(&dedicated), ["consensus", "sender", "receiver"]);
    assert_eq!(dedicated.threads()[1].roles(), [AgentRole::Sender]);

    let shared_network = plan(ThreadingMode::SharedNetwork);
    assert_eq!(thread_names(&shared_network), ["consensus", "sender+receiver"]);
    assert_eq!(shared_network.threads()[1].roles(), [AgentRole::Sender, AgentRole::Receiver]);

    let shared = plan(ThreadingMode::Shared);
    assert_eq!(thread_names(&shared), ["consensus+sender+receiver"]);

    let invoker = plan(ThreadingMode::Invoker);
    assert_eq!(invoker.thread_count(), 0);
    assert_eq!(invoker.invoked_name(), Some("consensus+sender+receiver"));

    let network_thread = plan(ThreadingMode::SharedNetworkInvoker);
    assert_eq!(thread_names(&network_thread), ["sender+receiver"]);
    assert_eq!(network_thread.invoked_name(), Some("consensus"));
    assert!(ThreadingMode::SharedNetworkInvoker.invokes() && ThreadingMode::Invoker.invokes());
    assert!(!ThreadingMode::SharedNetwork.invokes());
}

#[test]
fn a_shared_thread_takes_the_first_agents_settings() {
    let (mut specs, _) = node("yield", [Some(1), Some(0), None]);
    specs[0].idle = "backoff".parse().unwrap();
    specs[2].idle = "sleep-ns:5000".parse().unwrap();
    // Network agents first: the composite goes where the sender was.
    specs.rotate_left(1);
    let layout = AgentLayout::plan(ThreadingMode::SharedNetwork, specs).unwrap();
    assert_eq!(thread_names(&layout), ["sender+receiver", "consensus"]);
    let network = &layout.threads()[0];
    assert_eq!((network.idle().to_string(), network.core()), ("yield".to_owned(), Some(0)));
    assert_eq!(layout.threads()[1].core(), Some(1));
}

#[test]
fn a_role_given_twice_is_refused() {
    let (mut specs, _) = node("yield", [None; 3]);
    specs[2].role = AgentRole::Sender;
    let error = AgentLayout::plan(ThreadingMode::Dedicated, specs).unwrap_err();
    assert_eq!(error, LayoutError::DuplicateRole(AgentRole::Sender));
}

#[test]
fn an_invalid_idle_strategy_is_refused() {
    let (mut specs, _) = node("yield", [None; 3]);
    specs[1].idle = IdleStrategyConfig::SleepNs { period: Duration::ZERO };
    let error = AgentLayout::plan(ThreadingMode::Dedicated, specs).unwrap_err();
    assert!(matches!(&error, LayoutError::InvalidIdle { agent, .. } if agent == "sender"), "{error}");
}

#[test]
fn three_busy_threads_on_two_cores_are_refused_naming_the_agents() {
    let layout = AgentLayout::plan(ThreadingMode::Dedicated, node("busy-spin", [None; 3]).0).unwrap();
    let error = check_cores(&layout, 2, false).unwrap_err();
    let LayoutError::Oversubscribed(problems) = &error else { panic!("{error}") };
    assert!(matches!(&problems[..], [CoreProblem::TooManyBusyThreads { threads, cores: 2 }] if threads.len() == 3));
    let message = error.to_string();
    for needle in [
        "3 busy-spinning agent threads but only 2 cores",
        "`consensus`",
        "`sender`",
        "`receiver`",
        "backoff",
        "shared-network",
    ] {
        assert!(message.contains(needle), "`{needle}` missing from: {message}");
    }

    let warnings = check_cores(&layout, 2, true).unwrap();
    assert!(
        warnings.iter().any(|w| matches!(w, Warning::Oversubscribed(CoreProblem::TooManyBusyThreads { .. }))),
        "{warnings:?}"
    );
    // The same agents fit when they share threads.
    let shared = AgentLayout::plan(ThreadingMode::SharedNetwork, node("noop", [None; 3]).0).unwrap();
    assert!(matches!(&check_cores(&shared, 2, false).unwrap()[..], [Warning::NoSpareCore { busy: 2, cores: 2 }]));
    let shared = AgentLayout::plan(ThreadingMode::Shared, node("noop", [None; 3]).0).unwrap();
    assert_eq!(check_cores(&shared, 2, false).unwrap(), []);
}

#[test]
fn busy_threads_pinned_to_one_core_are_refused_naming_the_core() {
    let layout = AgentLayout::plan(ThreadingMode::Dedicated, node("noop", [Some(0), Some(3), Some(3)]).0).unwrap();
    let error = layout.check_cores(8, false).unwrap_err();
    let LayoutError::Oversubscribed(problems) = &error else { panic!("{error}") };
    let [CoreProblem::SharedCore { core: 3, threads }] = &problems[..] else { panic!("{problems:?}") };
    let names: Vec<&str> = threads.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["sender", "receiver"]);
    assert!(error.to_string().contains("share core 3: `sender` (noop, core 3), `receiver` (noop, core 3)"), "{error}");
    assert_eq!(layout.check_cores(8, true).unwrap().len(), 1);
}

#[test]
fn sleeping_threads_pass_and_are_warned_when_pinned_beside_a_busy_one() {
    let layout = AgentLayout::plan(ThreadingMode::Dedicated, node("backoff", [Some(0), Some(0), Some(0)]).0).unwrap();
    assert_eq!(layout.check_cores(2, false).unwrap(), []);

    let (mut specs, _) = node("yield", [Some(1), Some(0), None]);
    specs[0].idle = IdleStrategyConfig::BusySpin;
    let layout = AgentLayout::plan(ThreadingMode::Dedicated, specs).unwrap();
    let warnings = layout.check_cores(4, false).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");

    let (mut specs, _) = node("yield", [Some(1), Some(1), None]);
    specs[0].idle = IdleStrategyConfig::BusySpin;
    let layout = AgentLayout::plan(ThreadingMode::Dedicated, specs).unwrap();
    let warnings = layout.check_cores(4, false).unwrap();
    assert_eq!(
        warnings,
        [Warning::SharesCoreWithBusyThread { core: 1, busy: "consensus".into(), other: "sender".into() }]
    );
}

#[test]
fn a_started_layout_runs_every_agent_and_closes() {
    let (specs, cycles) = node("backoff:1,1,1us,100us", [None; 3]);
    let layout = AgentLayout::plan(ThreadingMode::SharedNetwork, specs).unwrap();
    let mut names = Vec::new();
    let handles = layout
        .start(|name| {
            names.push(name.to_owned());
            AgentCounters::detached()
        })
        .unwrap();
    assert_eq!(names, ["consensus", "sender+receiver"]);
    assert_eq!(handles.runners.len(), 2);
    assert!(handles.invoker.is_none());
    wait_until("every agent ran", WAIT, || cycles.iter().all(|c| c.load(Ordering::Relaxed) >= 10));
    assert!(handles.failures().is_empty());
    handles.close().unwrap();
}

#[test]
fn an_invoker_layout_starts_no_thread() {
    let (specs, cycles) = node("busy-spin", [Some(0); 3]);
    let layout = AgentLayout::plan(ThreadingMode::Invoker, specs).unwrap();
    assert_eq!(layout.check_cores(1, false).unwrap(), [], "an invoker has no agent threads to check");
    let mut handles = layout.start(|_| AgentCounters::detached()).unwrap();
    assert!(handles.runners.is_empty());
    let invoker = handles.invoker.as_mut().unwrap();
    invoker.start().unwrap();
    for _ in 0..5 {
        assert_eq!(invoker.invoke().unwrap(), 0);
    }
    assert!(cycles.iter().all(|c| c.load(Ordering::Relaxed) == 5));
    assert_eq!(invoker.counters().idle_cycles.get(), 5);
    handles.close().unwrap();
}
