//! The counters of a member's client endpoint.

use crate::shm::counters::Counter;
use crate::shm::stats::{kinds, CounterKind};

/// The counters of a member's client endpoint (see [`kinds::clients`]).
#[derive(Clone, Debug)]
pub(crate) struct IngressCounters {
    pub(super) datagrams_received: Counter,
    pub(super) receive_calls: Counter,
    pub(super) records_received: Counter,
    pub(crate) malformed_dropped: Counter,
    pub(super) address_refused: Counter,
    pub(super) unknown_session: Counter,
    pub(super) source_mismatch: Counter,
    pub(super) sessions_opened: Counter,
    pub(super) sessions_refused: Counter,
    pub(super) messages_appended: Counter,
    pub(super) window_exceeded: Counter,
    pub(super) gaps: Counter,
    pub(super) back_pressured: Counter,
    pub(super) suspended_refused: Counter,
    pub(super) redirects: Counter,
    pub(super) egress_datagrams: Counter,
    pub(super) egress_records: Counter,
    pub(crate) egress_dropped: Counter,
    pub(super) connections: Counter,
    pub(super) forged_dropped: Counter,
    pub(super) replayed_dropped: Counter,
    pub(super) challenges_sent: Counter,
    pub(super) displaced: Counter,
    pub(super) rate_limited: Counter,
    pub(super) address_sessions_refused: Counter,
    pub(super) evicted: Counter,
}

impl IngressCounters {
    pub(crate) fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        use kinds::clients as k;
        Self {
            datagrams_received: allocate(&k::datagrams_received),
            receive_calls: allocate(&k::receive_calls),
            records_received: allocate(&k::records_received),
            malformed_dropped: allocate(&k::malformed_dropped),
            address_refused: allocate(&k::address_refused),
            unknown_session: allocate(&k::unknown_session),
            source_mismatch: allocate(&k::source_mismatch),
            sessions_opened: allocate(&k::sessions_opened),
            sessions_refused: allocate(&k::sessions_refused),
            messages_appended: allocate(&k::messages_appended),
            window_exceeded: allocate(&k::window_exceeded),
            gaps: allocate(&k::gaps),
            back_pressured: allocate(&k::back_pressured),
            suspended_refused: allocate(&k::suspended_refused),
            redirects: allocate(&k::redirects),
            egress_datagrams: allocate(&k::egress_datagrams),
            egress_records: allocate(&k::egress_records),
            egress_dropped: allocate(&k::egress_dropped),
            connections: allocate(&k::connections),
            forged_dropped: allocate(&k::forged_dropped),
            replayed_dropped: allocate(&k::replayed_dropped),
            challenges_sent: allocate(&k::challenges_sent),
            displaced: allocate(&k::displaced),
            rate_limited: allocate(&k::rate_limited),
            address_sessions_refused: allocate(&k::address_sessions_refused),
            evicted: allocate(&k::evicted),
        }
    }
}
