//! An agent run one duty cycle at a time by the application's own thread.

use std::time::Instant;

use super::{catch_panic, Agent, AgentCounters, AgentError, AgentFailure, AgentPhase};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    New,
    Started,
    Closed,
}

/// Runs an agent on the caller's thread ([`ThreadingMode::Invoker`](super::ThreadingMode::Invoker)): the
/// application calls [`invoke`](Self::invoke) from its own loop and idles as it sees fit.
///
/// States: new → started ([`start`](Self::start)) → closed ([`close`](Self::close), a failure, or
/// [`AgentError::Terminate`]). `invoke` runs a cycle only when started and returns 0 otherwise. A failure or
/// panic closes the agent and is returned once by the call that met it, then kept in
/// [`failure`](Self::failure). Counters are kept as by a runner, except that `max_cycle_ns` measures
/// `do_work` alone (two clock reads per call). Dropping a started invoker closes it.
#[derive(Debug)]
pub struct AgentInvoker<A: Agent = Box<dyn Agent>> {
    agent: A,
    counters: AgentCounters,
    state: State,
    failure: Option<AgentFailure>,
}

impl<A: Agent> AgentInvoker<A> {
    /// An invoker for `agent`, not started.
    pub fn new(agent: A, counters: AgentCounters) -> Self {
        Self { agent, counters, state: State::New, failure: None }
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        self.agent.name()
    }

    /// The agent's counters.
    pub fn counters(&self) -> &AgentCounters {
        &self.counters
    }

    /// Calls `on_start` (once; later calls do nothing). On failure the agent is closed.
    pub fn start(&mut self) -> Result<(), AgentFailure> {
        if self.state != State::New {
            return Ok(());
        }
        self.state = State::Started;
        let name = self.agent.name().to_owned();
        let outcome = catch_panic(&name, AgentPhase::Start, || self.agent.on_start());
        self.settle(AgentPhase::Start, outcome.map(|r| r.map(|()| 0))).map(|_| ())
    }

    /// Runs one duty cycle and returns its work count (0 when not started or closed).
    #[inline]
    pub fn invoke(&mut self) -> Result<usize, AgentFailure> {
        if self.state != State::Started {
            return Ok(0);
        }
        let start = Instant::now();
        let outcome = catch_panic_work(&mut self.agent);
        let end = Instant::now();
        let work = self.settle(AgentPhase::Work, outcome)?;
        self.counters.record_cycle(work);
        self.counters.record_duration(start, end, work > 0);
        Ok(work)
    }

    /// Closes the agent (once) and returns its failure, if it ever failed.
    pub fn close(&mut self) -> Result<(), AgentFailure> {
        if self.state == State::Started {
            self.close_agent();
        }
        self.state = State::Closed;
        self.failure.clone().map_or(Ok(()), Err)
    }

    /// True between a successful [`start`](Self::start) and closing.
    pub fn is_running(&self) -> bool {
        self.state == State::Started
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The agent's failure, if it failed.
    pub fn failure(&self) -> Option<&AgentFailure> {
        self.failure.as_ref()
    }

    /// Turns the outcome of an agent call into a work count, closing the agent on terminate or failure.
    fn settle(
        &mut self,
        phase: AgentPhase,
        outcome: Result<Result<usize, AgentError>, AgentFailure>,
    ) -> Result<usize, AgentFailure> {
        let failure = match outcome {
            Ok(Ok(work)) => return Ok(work),
            Ok(Err(AgentError::Terminate)) => None,
            Ok(Err(AgentError::Failed(error))) => Some(AgentFailure::error(self.agent.name(), phase, error)),
            Err(panic) => Some(panic),
        };
        if let Some(failure) = &failure {
            self.failure = Some(failure.clone());
        }
        self.close_agent();
        self.state = State::Closed;
        failure.map_or(Ok(0), Err)
    }

    fn close_agent(&mut self) {
        let name = self.agent.name().to_owned();
        if let Err(failure) = catch_panic(&name, AgentPhase::Close, || self.agent.on_close()) {
            self.failure.get_or_insert(failure);
        }
        self.state = State::Closed;
    }
}

#[inline]
fn catch_panic_work<A: Agent>(agent: &mut A) -> Result<Result<usize, AgentError>, AgentFailure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| agent.do_work())) {
        Ok(result) => Ok(result),
        Err(payload) => Err(AgentFailure::panic(agent.name(), AgentPhase::Work, &*payload)),
    }
}

impl<A: Agent> Drop for AgentInvoker<A> {
    fn drop(&mut self) {
        if self.state == State::Started {
            self.close_agent();
        }
    }
}
