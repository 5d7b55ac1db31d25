//! Threading modes: which agents share which thread, and whether the cores can take it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{Agent, AgentCounters, AgentFailure, AgentInvoker, AgentRunner, CompositeAgent, Warning};
use crate::agent::idle::{IdleConfigError, IdleStrategyConfig};

/// How a node's agents are spread over threads (Aeron's `aeron.threading.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ThreadingMode {
    /// `dedicated`: one thread per agent (three for a node). The default.
    #[default]
    Dedicated,
    /// `shared-network`: the sender and receiver share a thread; every other agent has its own.
    SharedNetwork,
    /// `shared`: every agent on one thread.
    Shared,
    /// `invoker`: no threads; the application runs every agent through one [`AgentInvoker`].
    Invoker,
    /// `shared-network-invoker`: the sender and receiver share a thread, as in `shared-network`; the
    /// application runs every other agent (the consensus agent) through one [`AgentInvoker`]. For a host
    /// that can give the Sender a core of its own and wants everything else on one more thread, with no
    /// context switch between them.
    SharedNetworkInvoker,
}

const MODE_NAMES: [(ThreadingMode, &str); 5] = [
    (ThreadingMode::Dedicated, "dedicated"),
    (ThreadingMode::SharedNetwork, "shared-network"),
    (ThreadingMode::Shared, "shared"),
    (ThreadingMode::Invoker, "invoker"),
    (ThreadingMode::SharedNetworkInvoker, "shared-network-invoker"),
];

impl ThreadingMode {
    /// True when the application runs some agents through an [`AgentInvoker`] (`invoker` and
    /// `shared-network-invoker`).
    pub fn invokes(self) -> bool {
        matches!(self, Self::Invoker | Self::SharedNetworkInvoker)
    }
}

impl fmt::Display for ThreadingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = MODE_NAMES.iter().find(|(mode, _)| mode == self).map_or("?", |(_, name)| name);
        f.write_str(name)
    }
}

impl FromStr for ThreadingMode {
    type Err = ThreadingModeParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        MODE_NAMES
            .iter()
            .find(|(_, name)| *name == text)
            .map(|(mode, _)| *mode)
            .ok_or_else(|| ThreadingModeParseError { input: text.to_owned() })
    }
}

/// A threading mode name that is not one of the four.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadingModeParseError {
    /// The rejected text.
    pub input: String,
}

impl fmt::Display for ThreadingModeParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown threading mode `{}`; use dedicated, shared-network, shared, invoker or shared-network-invoker",
            self.input
        )
    }
}

impl std::error::Error for ThreadingModeParseError {}

/// The part an agent plays in a node; it decides which agents [`ThreadingMode::SharedNetwork`] groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentRole {
    /// The conductor / consensus agent.
    Consensus,
    /// The network send agent.
    Sender,
    /// The network receive agent.
    Receiver,
    /// The recorder of the log on disk.
    Recorder,
}

impl AgentRole {
    /// True for the roles that `shared-network` puts on one thread.
    pub fn is_network(self) -> bool {
        matches!(self, AgentRole::Sender | AgentRole::Receiver)
    }
}

impl fmt::Display for AgentRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AgentRole::Consensus => "consensus",
            AgentRole::Sender => "sender",
            AgentRole::Receiver => "receiver",
            AgentRole::Recorder => "recorder",
        })
    }
}

/// One agent of a node, with the idle strategy and core it asks for when it gets a thread of its own.
pub struct AgentSpec {
    /// Its role (each role at most once per layout).
    pub role: AgentRole,
    /// The agent.
    pub agent: Box<dyn Agent>,
    /// Its idle strategy.
    pub idle: IdleStrategyConfig,
    /// The core to pin its thread to, if any.
    pub core: Option<usize>,
}

impl fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentSpec")
            .field("role", &self.role)
            .field("agent", &self.agent.name())
            .field("idle", &self.idle)
            .field("core", &self.core)
            .finish()
    }
}

/// One planned thread: its agent (a [`CompositeAgent`] when it runs several), idle strategy and core.
pub struct ThreadPlan {
    agent: Box<dyn Agent>,
    roles: Vec<AgentRole>,
    idle: IdleStrategyConfig,
    core: Option<usize>,
}

impl ThreadPlan {
    /// The thread's name: its agents' names joined with `+`.
    pub fn name(&self) -> &str {
        self.agent.name()
    }

    /// The roles of its agents, in run order.
    pub fn roles(&self) -> &[AgentRole] {
        &self.roles
    }

    /// Its idle strategy.
    pub fn idle(&self) -> &IdleStrategyConfig {
        &self.idle
    }

    /// Its core, if pinned.
    pub fn core(&self) -> Option<usize> {
        self.core
    }

    /// True when its idle strategy never gives up the CPU.
    pub fn is_busy(&self) -> bool {
        self.idle.is_busy()
    }

    fn describe(&self) -> BusyThread {
        BusyThread { name: self.name().to_owned(), idle: self.idle, core: self.core }
    }
}

impl fmt::Debug for ThreadPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPlan")
            .field("name", &self.name())
            .field("roles", &self.roles)
            .field("idle", &self.idle)
            .field("core", &self.core)
            .finish()
    }
}

/// A node's agents arranged into threads for a [`ThreadingMode`], ready to [`start`](Self::start).
///
/// Agents are identified by [`AgentRole`]. The rules:
///
/// - `dedicated`: one thread per agent, with the agent's own idle strategy and core;
/// - `shared-network`: the sender and receiver run as one composite thread (in the order given), placed
///   where the first of them appears; every other agent gets a thread of its own;
/// - `shared`: one composite thread of every agent, in the order given;
/// - `invoker`: no thread; one composite of every agent for an [`AgentInvoker`]. Idle strategies and cores
///   are ignored (the application idles and pins its own thread).
/// - `shared-network-invoker`: the network agents on one thread, as in `shared-network`; the others in one
///   composite for an [`AgentInvoker`], whose idle strategies and cores are ignored as in `invoker`.
///
/// A thread that runs several agents takes the idle strategy and core of the first of them in the order
/// given; the others' settings are not used.
///
/// Check the plan with [`check_cores`] before starting it.
#[derive(Debug)]
pub struct AgentLayout {
    mode: ThreadingMode,
    threads: Vec<ThreadPlan>,
    invoked: Option<Box<dyn Agent>>,
}

impl AgentLayout {
    /// Arranges `agents` for `mode` (see the type's rules). Fails when a role appears twice or an idle
    /// strategy is invalid.
    pub fn plan(mode: ThreadingMode, agents: Vec<AgentSpec>) -> Result<Self, LayoutError> {
        Self::plan_ordered(mode, agents, None)
    }

    /// As [`plan`](Self::plan), the invoked agents of an invoker mode run in the order `order` draws for
    /// each duty cycle (the node simulator's).
    pub fn plan_ordered(
        mode: ThreadingMode,
        agents: Vec<AgentSpec>,
        order: Option<super::AgentOrder>,
    ) -> Result<Self, LayoutError> {
        validate(&agents)?;
        let mut layout = Self { mode, threads: Vec::new(), invoked: None };
        match mode {
            ThreadingMode::Dedicated => layout.threads = agents.into_iter().map(|a| group(vec![a])).collect(),
            ThreadingMode::SharedNetwork => layout.threads = group_network(agents),
            ThreadingMode::Shared if !agents.is_empty() => layout.threads = vec![group(agents)],
            ThreadingMode::Shared => {}
            ThreadingMode::Invoker if !agents.is_empty() => layout.invoked = Some(group_ordered(agents, order)),
            ThreadingMode::Invoker => {}
            ThreadingMode::SharedNetworkInvoker => {
                let (network, others): (Vec<_>, Vec<_>) = agents.into_iter().partition(|a| a.role.is_network());
                if !network.is_empty() {
                    layout.threads = vec![group(network)];
                }
                if !others.is_empty() {
                    layout.invoked = Some(group_ordered(others, order));
                }
            }
        }
        Ok(layout)
    }

    /// The threading mode.
    pub fn mode(&self) -> ThreadingMode {
        self.mode
    }

    /// The planned threads.
    pub fn threads(&self) -> &[ThreadPlan] {
        &self.threads
    }

    /// The number of threads [`start`](Self::start) will spawn.
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// The name of the agent an invoker will run (a mode that [invokes](ThreadingMode::invokes) agents,
    /// with at least one agent to invoke).
    pub fn invoked_name(&self) -> Option<&str> {
        self.invoked.as_ref().map(|a| a.name())
    }

    /// [`check_cores`] for this layout.
    pub fn check_cores(&self, available_cores: usize, force: bool) -> Result<Vec<Warning>, LayoutError> {
        check_cores(self, available_cores, force)
    }

    /// Spawns one [`AgentRunner`] per planned thread, with the counters `counters` gives for each thread's
    /// name, and builds the [`AgentInvoker`] of invoker mode (not started: call its `start` from the
    /// thread that will invoke it). If a thread cannot be spawned, those already running are stopped.
    pub fn start(self, mut counters: impl FnMut(&str) -> AgentCounters) -> Result<AgentHandles, LayoutError> {
        let mut handles = AgentHandles { runners: Vec::new(), invoker: None, warnings: Vec::new() };
        for thread in self.threads {
            let name = thread.name().to_owned();
            let idle =
                thread.idle.to_idle().map_err(|error| LayoutError::InvalidIdle { agent: name.clone(), error })?;
            let agent_counters = counters(&name);
            let runner = AgentRunner::start(thread.agent, idle, thread.core, agent_counters)
                .map_err(|error| LayoutError::Spawn { thread: name, reason: error.to_string() })?;
            handles.warnings.extend_from_slice(runner.warnings());
            handles.runners.push(runner);
        }
        if let Some(agent) = self.invoked {
            let agent_counters = counters(agent.name());
            handles.invoker = Some(AgentInvoker::new(agent, agent_counters));
        }
        Ok(handles)
    }
}

fn validate(agents: &[AgentSpec]) -> Result<(), LayoutError> {
    for (index, spec) in agents.iter().enumerate() {
        if agents[..index].iter().any(|other| other.role == spec.role) {
            return Err(LayoutError::DuplicateRole(spec.role));
        }
        spec.idle
            .validate()
            .map_err(|error| LayoutError::InvalidIdle { agent: spec.agent.name().to_owned(), error })?;
    }
    Ok(())
}

/// One thread for `agents` (non-empty), with the first agent's settings.
fn group(agents: Vec<AgentSpec>) -> ThreadPlan {
    let (idle, core) = (agents[0].idle, agents[0].core);
    let roles = agents.iter().map(|a| a.role).collect();
    let mut boxed: Vec<Box<dyn Agent>> = agents.into_iter().map(|a| a.agent).collect();
    let agent = if boxed.len() == 1 { boxed.remove(0) } else { Box::new(CompositeAgent::new(boxed)) };
    ThreadPlan { agent, roles, idle, core }
}

/// The agents of an invoker, run in the order `order` draws when there is one.
fn group_ordered(agents: Vec<AgentSpec>, order: Option<super::AgentOrder>) -> Box<dyn Agent> {
    match order {
        Some(order) if agents.len() > 1 => {
            Box::new(CompositeAgent::new(agents.into_iter().map(|a| a.agent).collect()).with_order(order))
        }
        _ => group(agents).agent,
    }
}

/// `shared-network`: the network agents on one thread, at the place of the first of them.
fn group_network(agents: Vec<AgentSpec>) -> Vec<ThreadPlan> {
    let first_network = agents.iter().position(|a| a.role.is_network());
    let (network, others): (Vec<_>, Vec<_>) = agents.into_iter().partition(|a| a.role.is_network());
    let mut threads: Vec<ThreadPlan> = others.into_iter().map(|a| group(vec![a])).collect();
    if let Some(position) = first_network {
        threads.insert(position.min(threads.len()), group(network));
    }
    threads
}

/// The threads of a running layout, and what went wrong on the way.
#[derive(Debug)]
pub struct AgentHandles {
    /// One runner per planned thread, in plan order.
    pub runners: Vec<AgentRunner>,
    /// The invoker of invoker mode (not started).
    pub invoker: Option<AgentInvoker>,
    /// Warnings from starting the threads (pinning, timer slack).
    pub warnings: Vec<Warning>,
}

impl AgentHandles {
    /// Asks every runner to stop.
    pub fn stop(&self) {
        for runner in &self.runners {
            runner.stop();
        }
    }

    /// Parks every runner at its pause point (see [`AgentRunner::pause`]), each waiting up to `timeout`;
    /// true when all parked. The invoker, driven by its caller, needs no pausing.
    pub fn pause(&self, timeout: Duration) -> bool {
        self.runners.iter().filter(|runner| !runner.pause(timeout)).count() == 0
    }

    /// Lets every paused runner go on.
    pub fn resume(&self) {
        for runner in &self.runners {
            runner.resume();
        }
    }

    /// The failures seen so far, without waiting.
    pub fn failures(&self) -> Vec<AgentFailure> {
        let mut failures: Vec<AgentFailure> = self.runners.iter().filter_map(AgentRunner::failure).collect();
        failures.extend(self.invoker.as_ref().and_then(|i| i.failure().cloned()));
        failures
    }

    /// Stops and joins every runner and closes the invoker; returns every failure.
    pub fn close(mut self) -> Result<(), Vec<AgentFailure>> {
        self.stop();
        let mut failures: Vec<AgentFailure> = self.runners.drain(..).filter_map(|r| r.join().err()).collect();
        if let Some(mut invoker) = self.invoker.take() {
            failures.extend(invoker.close().err());
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures)
        }
    }
}

/// The number of cores this process may run on (its affinity mask), at least 1.
pub fn available_cores() -> usize {
    match core_affinity::get_core_ids() {
        Some(cores) if !cores.is_empty() => cores.len(),
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// A busy-spinning thread named in a [`CoreProblem`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusyThread {
    /// The thread's agent name(s).
    pub name: String,
    /// Its idle strategy.
    pub idle: IdleStrategyConfig,
    /// Its core, if pinned.
    pub core: Option<usize>,
}

impl fmt::Display for BusyThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.core {
            Some(core) => write!(f, "`{}` ({}, core {core})", self.name, self.idle),
            None => write!(f, "`{}` ({}, unpinned)", self.name, self.idle),
        }
    }
}

/// A way in which busy-spinning threads would fight over cores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoreProblem {
    /// More busy-spinning threads than cores.
    TooManyBusyThreads {
        /// The busy threads.
        threads: Vec<BusyThread>,
        /// The cores available.
        cores: usize,
    },
    /// Several busy-spinning threads pinned to one core.
    SharedCore {
        /// The core.
        core: usize,
        /// The busy threads pinned to it.
        threads: Vec<BusyThread>,
    },
}

impl fmt::Display for CoreProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |threads: &[BusyThread]| threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        match self {
            CoreProblem::TooManyBusyThreads { threads, cores } => {
                write!(f, "{} busy-spinning agent threads but only {cores} cores: {}", threads.len(), list(threads))
            }
            CoreProblem::SharedCore { core, threads } => {
                write!(f, "busy-spinning agent threads share core {core}: {}", list(threads))
            }
        }
    }
}

/// A layout that cannot be planned or started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Busy-spinning threads would fight over cores (see [`check_cores`]).
    Oversubscribed(Vec<CoreProblem>),
    /// Two agents with one role.
    DuplicateRole(AgentRole),
    /// An agent's idle strategy is invalid.
    InvalidIdle {
        /// The agent.
        agent: String,
        /// What is wrong.
        error: IdleConfigError,
    },
    /// A thread could not be spawned.
    Spawn {
        /// The thread's name.
        thread: String,
        /// The OS error.
        reason: String,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Oversubscribed(problems) => {
                f.write_str("refusing a layout whose busy-spinning threads would fight over cores: ")?;
                let problems: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                write!(
                    f,
                    "{}. To fix it, give some of these agents a backoff, yield or sleep-ns idle strategy, or use \
                     threading mode shared or shared-network, or pin at most one busy agent per core \
                     (or force the layout to run anyway)",
                    problems.join("; ")
                )
            }
            LayoutError::DuplicateRole(role) => write!(f, "two agents have the role {role}; give each role one agent"),
            LayoutError::InvalidIdle { agent, error } => write!(f, "agent `{agent}`: {error}"),
            LayoutError::Spawn { thread, reason } => write!(f, "cannot spawn the thread of agent `{thread}`: {reason}"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Checks that the busy-spinning threads of `layout` (idle strategy `busy-spin` or `noop`) fit on
/// `available_cores` cores ([`available_cores`] gives this host's).
///
/// Refused (an [`LayoutError::Oversubscribed`] listing every problem), or with `force` returned as
/// [`Warning::Oversubscribed`]: more busy threads than cores; two busy threads pinned to one core.
/// Always only warned about: busy threads taking every core; another thread pinned to a busy thread's core.
pub fn check_cores(layout: &AgentLayout, available_cores: usize, force: bool) -> Result<Vec<Warning>, LayoutError> {
    let busy: Vec<&ThreadPlan> = layout.threads.iter().filter(|t| t.is_busy()).collect();
    let mut problems = Vec::new();
    if busy.len() > available_cores {
        let threads = busy.iter().map(|t| t.describe()).collect();
        problems.push(CoreProblem::TooManyBusyThreads { threads, cores: available_cores });
    }
    let mut busy_by_core: BTreeMap<usize, Vec<BusyThread>> = BTreeMap::new();
    for thread in &busy {
        if let Some(core) = thread.core {
            busy_by_core.entry(core).or_default().push(thread.describe());
        }
    }
    for (core, threads) in &busy_by_core {
        if threads.len() > 1 {
            problems.push(CoreProblem::SharedCore { core: *core, threads: threads.clone() });
        }
    }
    let mut warnings = Vec::new();
    if !busy.is_empty() && busy.len() == available_cores {
        warnings.push(Warning::NoSpareCore { busy: busy.len(), cores: available_cores });
    }
    for other in layout.threads.iter().filter(|t| !t.is_busy()) {
        if let Some(threads) = other.core.and_then(|core| busy_by_core.get(&core)) {
            warnings.push(Warning::SharesCoreWithBusyThread {
                core: threads[0].core.unwrap_or_default(),
                busy: threads[0].name.clone(),
                other: other.name().to_owned(),
            });
        }
    }
    if problems.is_empty() {
        Ok(warnings)
    } else if force {
        warnings.extend(problems.into_iter().map(Warning::Oversubscribed));
        Ok(warnings)
    } else {
        Err(LayoutError::Oversubscribed(problems))
    }
}
