//! Several agents run as one.

use std::error::Error;
use std::fmt;

use super::{Agent, AgentError};
use crate::agent::idle::Park;

/// Several agents behind one [`Agent`], run in order on one thread.
///
/// - `name` is the agents' names joined with `+`, in order (`sender+receiver`);
/// - `on_start` starts them in order; if one fails, the ones already started and the failing one are
///   closed in reverse order and the error is returned (so a later `on_close` does nothing);
/// - `do_work` runs each once, in order, and returns the sum of the work counts. The first error stops the
///   cycle and is returned, its message prefixed with the failing agent's name. [`AgentError::Terminate`]
///   from any one terminates the whole composite;
/// - `on_close` closes the started agents in reverse order, once.
///
/// With an [`AgentOrder`] (the node simulator's), each duty cycle runs the agents in the order it draws.
pub struct CompositeAgent {
    agents: Vec<Box<dyn Agent>>,
    name: String,
    /// How many agents (a prefix of `agents`) have had `on_start` called and not yet `on_close`.
    started: usize,
    /// Draws each cycle's order, when set; `order` holds it.
    shuffle: Option<AgentOrder>,
    order: Vec<usize>,
}

/// Permutes the indices of a composite's agents (given in their order) into the order of one duty cycle:
/// a seeded draw under the node simulator, so that the interleaving of a node's own agents is explored
/// as a multi-threaded node's would be, and replayed by its seed.
pub type AgentOrder = std::sync::Arc<dyn Fn(&mut [usize]) + Send + Sync>;

impl CompositeAgent {
    /// A composite of `agents`, run in the given order.
    pub fn new(agents: Vec<Box<dyn Agent>>) -> Self {
        let name = agents.iter().map(|a| a.name()).collect::<Vec<_>>().join("+");
        let order = (0..agents.len()).collect();
        Self { agents, name, started: 0, shuffle: None, order }
    }

    /// This composite, running its agents in the order `shuffle` draws for each duty cycle.
    pub fn with_order(mut self, shuffle: AgentOrder) -> Self {
        self.shuffle = Some(shuffle);
        self
    }

    /// The number of agents.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True when there are no agents.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    fn close_started(&mut self) {
        while self.started > 0 {
            self.started -= 1;
            self.agents[self.started].on_close();
        }
    }
}

impl fmt::Debug for CompositeAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompositeAgent").field("name", &self.name).field("started", &self.started).finish()
    }
}

impl Agent for CompositeAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_start(&mut self) -> Result<(), AgentError> {
        while self.started < self.agents.len() {
            let index = self.started;
            // Counted as started before the call: a failing on_start is still followed by its on_close.
            self.started += 1;
            if let Err(error) = self.agents[index].on_start() {
                let error = name_error(self.agents[index].name(), error);
                self.close_started();
                return Err(error);
            }
        }
        Ok(())
    }

    #[inline]
    fn do_work(&mut self) -> Result<usize, AgentError> {
        if let Some(shuffle) = &self.shuffle {
            return do_work_in(&mut self.agents, &mut self.order, shuffle);
        }
        let mut work = 0usize;
        for agent in &mut self.agents {
            match agent.do_work() {
                Ok(count) => work = work.saturating_add(count),
                Err(error) => return Err(name_error(agent.name(), error)),
            }
        }
        Ok(work)
    }

    fn on_close(&mut self) {
        self.close_started();
    }

    /// The first member's parker: a shared thread parks where its I/O-bound member waits (parks are short,
    /// so the other members are not kept waiting longer than the idle strategy's longest period).
    fn parker(&mut self) -> Option<&mut dyn Park> {
        self.agents.iter_mut().find_map(|a| a.parker())
    }
}

/// One duty cycle of `agents` in the order `shuffle` draws.
fn do_work_in(agents: &mut [Box<dyn Agent>], order: &mut [usize], shuffle: &AgentOrder) -> Result<usize, AgentError> {
    for (i, slot) in order.iter_mut().enumerate() {
        *slot = i;
    }
    shuffle(order);
    let mut work = 0usize;
    for &i in order.iter() {
        match agents[i].do_work() {
            Ok(count) => work = work.saturating_add(count),
            Err(error) => return Err(name_error(agents[i].name(), error)),
        }
    }
    Ok(work)
}

/// Prefixes a failure with the name of the agent (within a composite) that raised it.
fn name_error(agent: &str, error: AgentError) -> AgentError {
    match error {
        AgentError::Terminate => AgentError::Terminate,
        AgentError::Failed(source) => AgentError::Failed(Box::new(InAgent { agent: agent.to_owned(), source })),
    }
}

/// An error raised by one agent of a composite.
#[derive(Debug)]
struct InAgent {
    agent: String,
    source: Box<dyn Error + Send + Sync>,
}

impl fmt::Display for InAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.agent, self.source)
    }
}

impl Error for InAgent {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}
