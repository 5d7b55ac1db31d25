//! The contract an application's replicated service implements to be applied, snapshotted and restored
//! (quorumcast's form of Aeron Cluster's `ClusteredService`).

use std::io::{self, Read, Write};

use crate::client::session::Entry;
use crate::cluster::consensus_core::Role;
use crate::service::{CloseReason, Cluster, SessionRefused};

/// What an application's replicated service implements: it applies committed entries, and is
/// snapshotted and restored. Every member runs the same callbacks at the same entries of the log, so a
/// service whose callbacks depend only on their arguments (and on [`Cluster::time`], never a clock of its
/// own) is the same on every member.
///
/// The least a service writes is [`apply`](StateMachine::apply) and the two snapshot methods. A service of
/// remote clients writes [`on_message`](StateMachine::on_message) (or the older
/// [`apply_entry`](StateMachine::apply_entry)) to answer them; the session and timer callbacks are there
/// when it needs them, each doing nothing by default. The callbacks are called one at a time, never from
/// within one another: what a callback asks of the [`Cluster`] (a session closed) happens after it returns.
pub trait StateMachine {
    /// Applies one committed entry (the log's message payload) that ends at log `position`.
    ///
    /// Implement this, [`apply_entry`](StateMachine::apply_entry) or
    /// [`on_message`](StateMachine::on_message) (each calls the one before it by default).
    fn apply(&mut self, position: i64, entry: &[u8]) {
        let _ = (position, entry);
        panic!("StateMachine: implement `apply`, `apply_entry` or `on_message`");
    }

    /// Applies one committed entry, which may be a remote client's message ([`Entry::client`]); what it
    /// writes to `response` goes back to that client with the message's commit (on the leader). By
    /// default the entry's payload goes to [`apply`](StateMachine::apply) and there is no response.
    fn apply_entry(&mut self, entry: &Entry<'_>, response: &mut Vec<u8>) {
        let _ = response;
        self.apply(entry.position, entry.payload);
    }

    /// Applies one committed entry with the cluster at hand: its time, timers, the response to a client's
    /// message ([`Cluster::response`]), the service's own entries. By default, [`apply_entry`] with the
    /// response buffer.
    ///
    /// [`apply_entry`]: StateMachine::apply_entry
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        self.apply_entry(entry, cluster.response());
    }

    /// A client's session opened (Aeron's `onSessionOpen`). An error refuses it: the session closes at
    /// this entry on every member, and the client's connect fails with the error's code.
    fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        let _ = (session_id, cluster);
        Ok(())
    }

    /// A client's session closed, and why (Aeron's `onSessionClose`): its client closed it, it timed out,
    /// it was evicted, or the service closed it. Not called for a session refused at its open.
    fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        let _ = (session_id, reason, cluster);
    }

    /// Timer `correlation_id` fired ([`Cluster::schedule_timer`]; Aeron's `onTimerEvent`): at the first
    /// entry whose cluster time is at or past its deadline, the same entry on every member.
    fn on_timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        let _ = (correlation_id, cluster);
    }

    /// This member's role changed (Aeron's `onRoleChange`): to start or stop work that only the leader
    /// does. Called before the entries of the poll that sees the change; not part of the replicated state
    /// (each member sees its own roles, at its own times).
    fn on_role_change(&mut self, role: Role) {
        let _ = role;
    }

    /// Writes the whole state to `writer`.
    fn take_snapshot(&mut self, writer: &mut dyn Write) -> io::Result<()>;

    /// Replaces the whole state with the one `reader` holds (as written by [`take_snapshot`]); the reader
    /// ends where that state does.
    ///
    /// [`take_snapshot`]: StateMachine::take_snapshot
    fn load_snapshot(&mut self, reader: &mut dyn Read) -> io::Result<()>;
}
