//! What a member keeps across a restart, and gives back to a new core.

use super::config::CoreConfigError;
use super::membership::Membership;
use super::term_history::TermHistory;
use super::MemberId;

/// The durable state a core starts from: the last [`Output::Persist`](super::Output::Persist) and the
/// local log's terms and positions. A new member starts from [`DurableState::default`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableState {
    /// The last persisted leadership term.
    pub leadership_term_id: i64,
    /// The last persisted vote, cast in that term.
    pub voted_for: Option<MemberId>,
    /// The terms of the local log.
    pub term_history: TermHistory,
    /// The end of the local log.
    pub append_position: i64,
    /// A position known to be committed (what the driver applied), or 0.
    pub commit_position: i64,
    /// The configuration entries of the local log, oldest first, with where each ends (empty: the
    /// initial configuration is in effect).
    pub memberships: Vec<(i64, Membership)>,
}

impl DurableState {
    /// Checks the state is consistent; the error names the offending field.
    pub fn validate(&self) -> Result<(), CoreConfigError> {
        let last_term = self.term_history.last_term_id();
        if !(0..i64::MAX).contains(&self.leadership_term_id) {
            let message = format!("({}) must be in 0..i64::MAX", self.leadership_term_id);
            return Err(CoreConfigError::new("durable.leadership_term_id", message));
        }
        if self.leadership_term_id < last_term {
            let message = format!("({}) is below the log's last term {last_term}", self.leadership_term_id);
            return Err(CoreConfigError::new("durable.leadership_term_id", message));
        }
        let last_base = self.term_history.terms().last().map_or(-1, |t| t.base_position);
        if self.append_position < 0 || self.append_position <= last_base {
            let message = format!("({}) must be past the last term's base {last_base}", self.append_position);
            return Err(CoreConfigError::new("durable.append_position", message));
        }
        if self.term_history.terms().is_empty() && self.append_position != 0 {
            let message = format!("({}) must be 0 for a log without terms", self.append_position);
            return Err(CoreConfigError::new("durable.append_position", message));
        }
        if let Some((end, _)) = self.memberships.iter().find(|(end, _)| *end > self.append_position) {
            let message = format!("hold an entry ending at {end}, past the log's end {}", self.append_position);
            return Err(CoreConfigError::new("durable.memberships", message));
        }
        if self.commit_position < 0 || self.commit_position > self.append_position {
            let message = format!("({}) must be in 0..={}", self.commit_position, self.append_position);
            return Err(CoreConfigError::new("durable.commit_position", message));
        }
        Ok(())
    }
}
