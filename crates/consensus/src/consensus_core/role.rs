//! A member's role: what the consensus core reports with every change of it.

use std::fmt;

/// A member's role in the current leadership term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Replicates a leader's log, or waits for one.
    Follower,
    /// Asks the others whether they would vote for it (pre-vote), without changing its term.
    Canvass,
    /// Stands for election in its current term, having voted for itself.
    Candidate,
    /// Leads the current term: appends, replicates and commits.
    Leader,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Follower => "follower",
            Role::Canvass => "canvass",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
        })
    }
}
