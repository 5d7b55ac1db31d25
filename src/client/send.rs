//! Sending: offers into the window of messages in flight, the datagrams they are batched into, sealed
//! with the session's token (or the client key) and sent in one `sendmmsg`, and resends.

use std::time::Duration;

use super::credentials::ClientKey;
use super::wire::{self, RecordHeader, Seal};
use super::{ClientOfferError, ClusterClient, Committed, Event, Pending, State, WaitError};
use crate::media::auth::AuthKey;

impl ClusterClient {
    /// Offers `message`; returns its correlation id. It is sent by the next [`poll`](Self::poll) (or
    /// sooner, when `SEND_BATCH` datagrams are full). Never blocks.
    pub fn offer(&mut self, message: &[u8]) -> Result<u64, ClientOfferError> {
        if self.state != State::Connected {
            return Err(ClientOfferError::NotConnected);
        }
        if message.len() > self.link.out.max_payload() {
            return Err(ClientOfferError::TooLong { max: self.link.out.max_payload() });
        }
        if self.in_flight.pending.len() >= self.config.window {
            return Err(ClientOfferError::BackPressured);
        }
        let correlation_id = self.in_flight.next_correlation;
        self.in_flight.next_correlation += 1;
        let mut bytes = self.in_flight.free.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(message);
        // The clock is read once per run of offers that waits to be sent (the first of them), not per
        // offer: it was a tenth of a saturating client's CPU. A message's resend timer then runs from
        // the first offer of its run, at most that much early (it is sent later still, at the poll).
        if self.link.out.is_empty() {
            self.link.out_since_ns = self.clock.now_ns();
        }
        let now = self.link.out_since_ns;
        self.push_message(correlation_id, message);
        self.in_flight.pending.push_back(Pending { correlation_id, bytes, sent_ns: now });
        Ok(correlation_id)
    }

    /// Offers `message` and waits, polling, until its outcome is known or `timeout` passes: the blocking
    /// form of [`offer`](Self::offer) then [`poll`](Self::poll) for its [`Event::Committed`].
    ///
    /// Back-pressure (a full window) and a session between leaders are waited out within the timeout, as
    /// a caller's loop would. Returns the service's response. Events of other messages in flight that
    /// arrive meanwhile are reported to nobody: use `offer` and `poll` when several are in flight.
    pub fn offer_and_wait(&mut self, message: &[u8], timeout: Duration) -> Result<Committed, WaitError> {
        let deadline = self.clock.now_ns() + timeout.as_nanos() as u64;
        let correlation_id = loop {
            match self.offer(message) {
                Ok(id) => break id,
                Err(ClientOfferError::TooLong { max }) => return Err(WaitError::TooLong { max }),
                Err(ClientOfferError::NotConnected | ClientOfferError::BackPressured) => {}
            }
            if self.clock.now_ns() >= deadline {
                return Err(WaitError::TimedOut { offered: false });
            }
            if self.poll(|_| {}) == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        };
        let mut outcome = None;
        let mut response_too_long = false;
        loop {
            let work = self.poll(|event| match event {
                Event::ResponseTooLong { correlation_id: id } if id == correlation_id => response_too_long = true,
                Event::Committed { correlation_id: id, position, response, duplicate } if id == correlation_id => {
                    let response = response.to_vec();
                    outcome = Some(Ok(Committed { position, response, duplicate, response_too_long }));
                }
                Event::NotApplied { correlation_id: id, reason } if id == correlation_id => {
                    outcome = Some(Err(WaitError::NotApplied(reason)));
                }
                Event::OutcomeUnknown { correlation_id: id } if id == correlation_id => {
                    outcome = Some(Err(WaitError::OutcomeUnknown));
                }
                _ => {}
            });
            if let Some(outcome) = outcome.take() {
                return outcome;
            }
            if self.clock.now_ns() >= deadline {
                return Err(WaitError::TimedOut { offered: true });
            }
            if work == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Closes the session (the leader is told; nothing in flight is resent after this).
    pub fn close(&mut self) {
        if self.state == State::Connected {
            self.push(RecordHeader::new(wire::CLOSE, self.session.id), &[]);
            self.flush();
        }
        self.state = State::Idle;
    }

    /// Resends every message in flight from `from` on; returns the datagrams sent.
    pub(super) fn resend_from(&mut self, from: u64, now: u64) -> usize {
        let session = self.session.id;
        for i in 0..self.in_flight.pending.len() {
            if self.in_flight.pending[i].correlation_id < from {
                continue;
            }
            let record =
                RecordHeader::new(wire::MESSAGE, session).correlation(self.in_flight.pending[i].correlation_id);
            let bytes = std::mem::take(&mut self.in_flight.pending[i].bytes);
            self.push(record, &bytes);
            self.in_flight.pending[i].bytes = bytes;
            self.in_flight.pending[i].sent_ns = now;
            self.stats.messages_sent += 1;
        }
        self.flush()
    }

    fn push_message(&mut self, correlation_id: u64, message: &[u8]) {
        self.stats.messages_sent += 1;
        self.push(RecordHeader::new(wire::MESSAGE, self.session.id).correlation(correlation_id), message);
    }

    /// Adds a record to the datagram being filled; when it does not fit, that datagram is sealed first
    /// (and the sealed ones sent first when they are [`SEND_BATCH`](super::outbox::SEND_BATCH)).
    pub(super) fn push(&mut self, record: RecordHeader, payload: &[u8]) {
        if !self.link.out.fits(payload.len()) {
            self.seal_current();
        }
        self.link.out.push(record, payload);
    }

    /// Seals the datagram being filled with the session's token (or, opening, with the client key); the
    /// sealed ones are sent first when they are [`SEND_BATCH`](super::outbox::SEND_BATCH) less one.
    fn seal_current(&mut self) {
        if self.link.out.is_full() {
            self.send_sealed();
        }
        let (token, key, state, session_id) =
            (&self.session.token, self.config.key.as_ref(), self.state, self.session.id);
        let sequence = &mut self.session.sequence;
        self.link.out.seal(|| seal(token, key, state, session_id, sequence));
    }

    /// Sends the sealed datagrams to the member asked or connected to, in one `sendmmsg`; returns the
    /// datagrams sent.
    fn send_sealed(&mut self) -> usize {
        let sent = self.link.out.send(&mut *self.link.socket, &self.link.addrs[self.search.target]);
        if sent > 0 {
            self.last_sent_ns = self.clock.now_ns();
            self.stats.datagrams_sent += sent as u64;
            self.stats.send_calls += 1;
        }
        sent
    }

    /// Seals the datagram being filled and sends it with those sealed before it to the member asked or
    /// connected to; returns the datagrams sent.
    pub(super) fn flush(&mut self) -> usize {
        if self.link.out.is_empty() {
            return 0;
        }
        self.seal_current();
        self.send_sealed()
    }
}

/// How a client datagram is sealed: with the session's token (its next sequence), or, opening, with the
/// client key (or untagged, without one).
pub(super) fn seal<'a>(
    token: &'a Option<AuthKey>,
    key: Option<&'a ClientKey>,
    state: State,
    session_id: u64,
    sequence: &mut u64,
) -> Seal<'a> {
    let key_id = key.map_or(0, ClientKey::id);
    match token {
        Some(token) if state != State::Opening => {
            *sequence += 1;
            Seal { session_id, key_id, sequence: *sequence, key: Some(token) }
        }
        _ => Seal { session_id: 0, key_id, sequence: 0, key: key.map(ClientKey::key) },
    }
}
