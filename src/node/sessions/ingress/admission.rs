//! The leader's admission of sessions at its client endpoint: an open (the cookie of its address, each
//! open taken once, the shares of an address and of a network, an eviction when the endpoint is full,
//! the token sealed for the client alone) and a reconnect from a new address (after its challenge).

use super::*;

impl ClientIngress {
    /// A client asks to open a session (`nonce` tells its repeats apart from a second open), with its
    /// ephemeral public key and, once it has one, the cookie of its address. Without a good cookie it is
    /// answered with one and nothing is kept; with one, each open is taken once.
    pub(super) fn on_open(&mut self, from: &Arrival, nonce: u64, payload: &[u8], append: &mut Appending<'_>) {
        let refuse = |reply: &mut DatagramWriter, code: RefusalCode| {
            reply.push(RecordHeader::new(wire::REFUSED, 0).correlation(nonce).code(code as u8), &[]);
        };
        let (Some(client), cookie) = (payload.get(..PUBLIC_KEY_LENGTH), payload.get(PUBLIC_KEY_LENGTH..)) else {
            self.counters.malformed_dropped.increment();
            return;
        };
        let client: [u8; PUBLIC_KEY_LENGTH] = client.try_into().expect("32 bytes");
        let cookie = cookie.unwrap_or_default();
        let has_cookie = match cookie.len() {
            0 => false,
            COOKIE_LENGTH => self.admission.secret.accepts_cookie(from.source, &client, nonce, from.now_ns, cookie),
            _ => {
                self.counters.malformed_dropped.increment();
                return;
            }
        };
        if !has_cookie {
            // Stateless, and no larger than the open it answers: a spoofed source gets nothing to amplify.
            self.counters.challenges_sent.increment();
            let cookie = self.admission.secret.cookie(from.source, &client, nonce, from.now_ns);
            self.reply.writer.push(RecordHeader::new(wire::COOKIE, 0).correlation(nonce), &cookie);
            return;
        }
        let repeat = self
            .connections
            .by_session
            .values()
            .any(|c| c.addr == from.source && c.nonce == nonce && c.state == State::Opening);
        if repeat {
            // Its open is in the log: the answer comes when it is applied.
            return;
        }
        let period = from.now_ns / CHALLENGE_PERIOD_NS;
        if self.admission.used_opens.seen(&client, period) {
            self.counters.replayed_dropped.increment();
            return refuse(&mut self.reply.writer, RefusalCode::Replayed);
        }
        let address = AddressKey::of(from.source.ip());
        if !self.admission.open_rate.take(address, from.now_ns)
            || self.admission.used_opens.len() >= self.config.max_sessions * 4
        {
            self.counters.rate_limited.increment();
            return refuse(&mut self.reply.writer, RefusalCode::RateLimited);
        }
        if append.suspended {
            self.counters.suspended_refused.increment();
            return refuse(&mut self.reply.writer, RefusalCode::Suspended);
        }
        if self.connections.per_address.of(address) >= self.config.max_sessions_per_address {
            self.counters.address_sessions_refused.increment();
            return refuse(&mut self.reply.writer, RefusalCode::TooManyFromAddress);
        }
        if self.connections.per_prefix.of(AddressKey::prefix_of(from.source.ip()))
            >= self.config.max_sessions_per_prefix
        {
            self.counters.address_sessions_refused.increment();
            return refuse(&mut self.reply.writer, RefusalCode::TooManyFromNetwork);
        }
        if self.connections.len() >= self.config.max_sessions && !self.evict_for(address, from.epoch_ns, append) {
            self.counters.sessions_refused.increment();
            return refuse(&mut self.reply.writer, RefusalCode::TooManySessions);
        }
        self.term.sessions_opened += 1;
        let session_id = self.admission.secret.session_id(self.term.id, append.clock.nonce, self.term.sessions_opened);
        let token = self.admission.secret.token(session_id, self.config.key(from.header.key_id));
        let mut leader_secret = [0u8; 32];
        if self.term.entropy.fill(&mut leader_secret).is_err() {
            return refuse(&mut self.reply.writer, RefusalCode::BackPressured);
        }
        let Some(opened) = seal_token(&token, &Ephemeral::from_random(leader_secret), &client, session_id, nonce)
        else {
            // A key of small order: anyone could compute the exchange's secret.
            self.counters.malformed_dropped.increment();
            return;
        };
        let entry = SessionEntry::Open { session_id, timestamp_ns: from.epoch_ns };
        match append_entry(append, &self.counters, &entry, &[]) {
            Ok(()) => {
                self.counters.sessions_opened.increment();
                self.admission.used_opens.insert(client, period);
                let mut connection = self.connection(from, State::Opening, token);
                connection.nonce = nonce;
                connection.opened = Some(Box::new(opened));
                self.connections.insert(session_id, connection);
                self.counters.connections.set(self.connections.len() as i64);
            }
            Err(_) => refuse(&mut self.reply.writer, RefusalCode::BackPressured),
        }
    }

    /// The endpoint is full and `address` asks for a session: when some address holds at least two more
    /// sessions than it, that address's longest silent session is closed (a close in the log, and the
    /// news to its client) to make room. True when one was. So a few addresses cannot keep every other
    /// out: sessions are shared among the addresses that ask, and one client of a new address gets in.
    fn evict_for(&mut self, address: AddressKey, epoch_ns: i64, append: &mut Appending<'_>) -> bool {
        let held = self.connections.per_address.of(address);
        let Some((heaviest, most)) = self.connections.per_address.heaviest() else {
            return false;
        };
        if most < held + 2 {
            return false;
        }
        let victim = self
            .connections
            .by_session
            .iter()
            .filter(|(_, c)| c.state == State::Open && AddressKey::of(c.addr.ip()) == heaviest)
            .min_by_key(|(&id, c)| (c.last_logged_ns, id))
            .map(|(&id, _)| id);
        let Some(victim) = victim else {
            return false;
        };
        let entry = SessionEntry::Evict { session_id: victim, timestamp_ns: epoch_ns };
        if append_entry(append, &self.counters, &entry, &[]).is_err() {
            return false;
        }
        if let Some(mut old) = self.connections.remove(&victim) {
            self.counters.evicted.increment();
            self.send_last(&mut old, victim, RefusalCode::Evicted);
        }
        true
    }

    /// Sends what waited for a connection this endpoint has let go, and then why (`code`).
    fn send_last(&mut self, old: &mut Connection, session: u64, code: RefusalCode) {
        let record = RecordHeader::new(wire::REFUSED, session).code(code as u8);
        let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
        queue(old, out, &mut self.dirty, session, record, &[]);
        let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
        flush_connection(old, session, out);
    }

    /// The client of `from`'s session proved it holds the token from `from.source`: the session goes on
    /// here, at that address. A keep-alive goes into the log, and its application answers with the
    /// session's last applied message (or that the session is gone).
    pub(super) fn on_reconnect(&mut self, from: &Arrival, token: AuthKey, append: &mut Appending<'_>) {
        let session = from.header.session_id;
        let address = AddressKey::of(from.source.ip());
        let old_address = self.connections.by_session.get(&session).map(|c| AddressKey::of(c.addr.ip()));
        if old_address.is_none() && self.connections.len() >= self.config.max_sessions {
            self.counters.sessions_refused.increment();
            let refusal = RecordHeader::new(wire::REFUSED, session).code(RefusalCode::TooManySessions as u8);
            self.reply.writer.push(refusal, &[]);
            return;
        }
        let held = self.connections.per_address.of(address) - usize::from(old_address == Some(address));
        if held >= self.config.max_sessions_per_address {
            self.counters.address_sessions_refused.increment();
            let refusal = RecordHeader::new(wire::REFUSED, session).code(RefusalCode::TooManyFromAddress as u8);
            self.reply.writer.push(refusal, &[]);
            return;
        }
        let entry = SessionEntry::KeepAlive { session_id: session, timestamp_ns: from.epoch_ns };
        if append_entry(append, &self.counters, &entry, &[]).is_err() {
            let refusal = RecordHeader::new(wire::REFUSED, session).code(RefusalCode::BackPressured as u8);
            self.reply.writer.push(refusal, &[]);
            return;
        }
        let mut connection = self.connection(from, State::Reconnecting, token);
        if let Some(mut old) = self.connections.remove(&session) {
            connection.nonce = old.nonce;
            // Whatever was waiting for the old address goes there, and then the news that it was displaced.
            self.counters.displaced.increment();
            self.send_last(&mut old, session, RefusalCode::Displaced);
        }
        self.connections.insert(session, connection);
        self.counters.connections.set(self.connections.len() as i64);
    }
}
