//! The terms of the local log: for each leadership term that has bytes in the log, its id and the
//! position where its bytes start (its base). The log's entries themselves stay with the driver.
//!
//! Two logs that both hold bytes of a term agree on everything before that term's base and on the
//! term's bytes as far as both reach (one leader per term writes them, append-only, and followers copy
//! its prefix). So the position where two logs stop agreeing follows from their term histories alone,
//! which is how a follower finds what to truncate.

/// Where one leadership term's bytes start in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermBase {
    /// The leadership term.
    pub leadership_term_id: i64,
    /// The log position of its first byte.
    pub base_position: i64,
}

/// The terms of the local log, oldest first.
///
/// Invariants: term ids and base positions both strictly increase, the first base is at least 0, and
/// every term holds at least one byte (the last base is below the log's append position). A term with no
/// bytes in the log has no entry, so the last entry is the term of the log's last byte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TermHistory {
    terms: Vec<TermBase>,
}

impl TermHistory {
    /// An empty log's history.
    pub const fn new() -> Self {
        Self { terms: Vec::new() }
    }

    /// The history of a log ending at `append_position` whose terms start at `terms`; `None` unless
    /// `terms` keep the invariants.
    pub fn from_terms(terms: Vec<TermBase>, append_position: i64) -> Option<Self> {
        let ordered = terms
            .windows(2)
            .all(|w| w[0].leadership_term_id < w[1].leadership_term_id && w[0].base_position < w[1].base_position);
        let first_ok = terms.first().is_none_or(|t| t.base_position >= 0 && t.leadership_term_id > 0);
        let last_ok = terms.last().is_none_or(|t| t.base_position < append_position);
        (ordered && first_ok && last_ok).then_some(Self { terms })
    }

    /// The terms, oldest first.
    pub fn terms(&self) -> &[TermBase] {
        &self.terms
    }

    /// The term of the log's last byte; 0 for an empty log (no leader ever has term 0).
    pub fn last_term_id(&self) -> i64 {
        self.terms.last().map_or(0, |t| t.leadership_term_id)
    }

    /// Records that bytes of `leadership_term_id` were appended from `from_position`. A term already
    /// last is not recorded again; returns false (and changes nothing) for a term older than the last.
    pub fn append(&mut self, leadership_term_id: i64, from_position: i64) -> bool {
        let last = self.last_term_id();
        if leadership_term_id > last {
            self.terms.push(TermBase { leadership_term_id, base_position: from_position });
        }
        leadership_term_id >= last
    }

    /// Forgets the terms whose bytes all lie at or beyond `position` (the log was truncated there).
    pub fn truncate(&mut self, position: i64) {
        while self.terms.last().is_some_and(|t| t.base_position >= position) {
            self.terms.pop();
        }
    }

    /// Where `leadership_term_id` starts, if the log holds it.
    pub fn base_of(&self, leadership_term_id: i64) -> Option<i64> {
        self.find(leadership_term_id).map(|i| self.terms[i].base_position)
    }

    /// Where the term at or before `leadership_term_id` that the log holds ends, and the term after it:
    /// `(term, end, next_term)`. The log holds no term between `term` and `next_term`; `next_term` is
    /// `current_term` when `term` is the log's last, and its end is then `append_position`. An empty
    /// prefix answers `(0, base of the first term, first term)`.
    pub fn floor(&self, leadership_term_id: i64, append_position: i64, current_term: i64) -> (i64, i64, i64) {
        let after = self.terms.partition_point(|t| t.leadership_term_id <= leadership_term_id);
        let term = after.checked_sub(1).map_or(0, |i| self.terms[i].leadership_term_id);
        match self.terms.get(after) {
            Some(next) => (term, next.base_position, next.leadership_term_id),
            None => (term, append_position, current_term),
        }
    }

    fn find(&self, leadership_term_id: i64) -> Option<usize> {
        self.terms.binary_search_by_key(&leadership_term_id, |t| t.leadership_term_id).ok()
    }
}

/// What the leader's log says about one of its terms: `log_term` is followed directly by `next_term`,
/// which starts at `next_base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LeaderTerm {
    pub(super) log_term: i64,
    pub(super) next_term: i64,
    pub(super) next_base: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> TermHistory {
        let terms = vec![
            TermBase { leadership_term_id: 1, base_position: 0 },
            TermBase { leadership_term_id: 3, base_position: 100 },
            TermBase { leadership_term_id: 4, base_position: 160 },
        ];
        TermHistory::from_terms(terms, 200).unwrap()
    }

    #[test]
    fn floor_names_the_term_at_or_before_and_where_it_ends() {
        let h = history();
        assert_eq!(h.floor(1, 200, 6), (1, 100, 3));
        assert_eq!(h.floor(2, 200, 6), (1, 100, 3), "no term 2: term 1 then 3");
        assert_eq!(h.floor(4, 200, 6), (4, 200, 6), "the last term ends at the append position");
        assert_eq!(h.floor(0, 200, 6), (0, 0, 1));
        assert_eq!(TermHistory::new().floor(5, 0, 6), (0, 0, 6));
    }

    #[test]
    fn truncation_forgets_only_terms_wholly_past_the_position() {
        let mut h = history();
        h.truncate(161);
        assert_eq!(h.last_term_id(), 4);
        h.truncate(160);
        assert_eq!(h.last_term_id(), 3);
        h.truncate(0);
        assert_eq!(h.last_term_id(), 0);
    }

    #[test]
    fn append_records_new_terms_and_refuses_older_ones() {
        let mut h = history();
        assert!(h.append(4, 200));
        assert_eq!(h.terms().len(), 3);
        assert!(h.append(6, 220));
        assert_eq!(h.base_of(6), Some(220));
        assert!(!h.append(5, 230));
    }

    #[test]
    fn invalid_histories_are_refused() {
        let t = |leadership_term_id, base_position| TermBase { leadership_term_id, base_position };
        assert!(TermHistory::from_terms(vec![t(2, 0), t(1, 10)], 20).is_none());
        assert!(TermHistory::from_terms(vec![t(1, 0), t(2, 0)], 20).is_none());
        assert!(TermHistory::from_terms(vec![t(1, 0)], 0).is_none(), "a term with no bytes");
        assert!(TermHistory::from_terms(vec![t(0, 0)], 10).is_none(), "term 0 has no leader");
    }
}
