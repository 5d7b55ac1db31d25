//! The contract an application's replicated state machine implements to be applied, snapshotted and
//! restored.

use std::io::{self, Read, Write};

/// What an application's replicated state machine implements to be snapshotted and restored.
pub trait StateMachine {
    /// Applies one committed entry (the log's message payload) that ends at log `position`.
    ///
    /// Implement this or [`apply_entry`](StateMachine::apply_entry) (which calls it by default); a machine
    /// that implements `apply_entry` need not write this one.
    fn apply(&mut self, position: i64, entry: &[u8]) {
        let _ = (position, entry);
        panic!("StateMachine: implement `apply`, or `apply_entry` (which replaces it)");
    }
    /// Applies one committed entry, which may be a remote client's message ([`Entry::client`]); what it
    /// writes to `response` goes back to that client with the message's commit (on the leader). By
    /// default the entry's payload goes to [`apply`](StateMachine::apply) and there is no response.
    ///
    /// [`Entry::client`]: crate::client::session::Entry::client
    fn apply_entry(&mut self, entry: &crate::client::session::Entry<'_>, response: &mut Vec<u8>) {
        let _ = response;
        self.apply(entry.position, entry.payload);
    }
    /// Writes the whole state to `writer`.
    fn take_snapshot(&mut self, writer: &mut dyn Write) -> io::Result<()>;
    /// Replaces the whole state with the one `reader` holds (as written by [`take_snapshot`]); the reader
    /// ends where that state does.
    ///
    /// [`take_snapshot`]: StateMachine::take_snapshot
    fn load_snapshot(&mut self, reader: &mut dyn Read) -> io::Result<()>;
}
