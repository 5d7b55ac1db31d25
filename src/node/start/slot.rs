//! A place in the agent layout whose agent the consensus agent replaces when the role changes.
//!
//! A node's threads are laid out once, at start. What runs on the Sender's and the Receiver's place
//! depends on the role: the leader's Sender with its publication, or a follower's Receiver with its image,
//! or nothing while an election runs. The consensus agent builds the next agent off their threads and
//! hands it over through a [`SlotHandle`]; the slot swaps it in at the start of its next duty cycle, on
//! its own thread, and drops the old one there. The duty cycle pays one relaxed atomic load for this;
//! the lock is taken only when a hand-over is pending.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::agent::idle::Park;
use crate::agent::{Agent, AgentError};

/// What a slot and its handle share.
struct Exchange<A> {
    pending: AtomicBool,
    next: Mutex<Option<Option<A>>>,
}

/// An agent place whose agent can be replaced from another thread.
pub(crate) struct Slot<A> {
    name: &'static str,
    current: Option<A>,
    exchange: Arc<Exchange<A>>,
}

/// Replaces the agent of a [`Slot`] from another thread.
pub(crate) struct SlotHandle<A> {
    exchange: Arc<Exchange<A>>,
}

impl<A> Clone for SlotHandle<A> {
    fn clone(&self) -> Self {
        Self { exchange: Arc::clone(&self.exchange) }
    }
}

impl<A> std::fmt::Debug for SlotHandle<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotHandle").field("pending", &self.exchange.pending.load(Ordering::Relaxed)).finish()
    }
}

impl<A: Agent> Slot<A> {
    /// An empty slot named `name` (the name its thread's counters carry), and its handle.
    pub(crate) fn new(name: &'static str) -> (Self, SlotHandle<A>) {
        let exchange = Arc::new(Exchange { pending: AtomicBool::new(false), next: Mutex::new(None) });
        (Self { name, current: None, exchange: Arc::clone(&exchange) }, SlotHandle { exchange })
    }

    fn swap_if_pending(&mut self) {
        if !self.exchange.pending.load(Ordering::Acquire) {
            return;
        }
        let next = self.exchange.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.exchange.pending.store(false, Ordering::Release);
        if let Some(next) = next {
            // The old agent (its sockets, its log mapping) goes here, on this thread.
            self.current = next;
        }
    }
}

impl<A> SlotHandle<A> {
    /// Hands `agent` (or nothing) to the slot; it runs from the slot's next duty cycle on. A hand-over not
    /// yet taken is replaced.
    pub(crate) fn replace(&self, agent: Option<A>) {
        *self.exchange.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(agent);
        self.exchange.pending.store(true, Ordering::Release);
    }
}

impl<A: Agent> Agent for Slot<A> {
    fn name(&self) -> &str {
        self.name
    }

    fn do_work(&mut self) -> Result<usize, AgentError> {
        self.swap_if_pending();
        match self.current.as_mut() {
            Some(agent) => agent.do_work(),
            None => Ok(0),
        }
    }

    fn on_close(&mut self) {
        if let Some(agent) = self.current.as_mut() {
            agent.on_close();
        }
    }

    fn parker(&mut self) -> Option<&mut dyn Park> {
        self.current.as_mut().and_then(|agent| agent.parker())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting(usize);

    impl Agent for Counting {
        fn name(&self) -> &str {
            "counting"
        }

        fn do_work(&mut self) -> Result<usize, AgentError> {
            self.0 += 1;
            Ok(self.0)
        }
    }

    #[test]
    fn a_handed_over_agent_runs_from_the_next_cycle_and_nothing_runs_an_empty_slot() {
        let (mut slot, handle) = Slot::new("sender");
        assert_eq!(slot.do_work().unwrap(), 0);
        handle.replace(Some(Counting(10)));
        assert_eq!(slot.do_work().unwrap(), 11);
        assert_eq!(slot.do_work().unwrap(), 12);
        handle.replace(Some(Counting(0)));
        handle.replace(None);
        assert_eq!(slot.do_work().unwrap(), 0, "the newest hand-over wins");
        assert_eq!(slot.name(), "sender");
    }
}
