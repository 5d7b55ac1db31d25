//! Control traffic: SETUPs and heartbeats out; status messages, NAKs and the layer above's frames in;
//! retransmits and the receivers told they are behind the retained log.

use super::*;

/// The layer above a leader's publication: handed, on the Sender's thread, each control frame that is not
/// for the send path itself (acknowledgements and commit frames of a replicated log), with the index of
/// the destination it came from. The media layer does not interpret them.
pub trait ControlHandler: Send {
    /// A control frame from destination `destination` (its index in the channel's `destinations`).
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>);
}

impl<F: FnMut(usize, &Frame<'_>) + Send> ControlHandler for F {
    fn on_control(&mut self, destination: usize, frame: &Frame<'_>) {
        self(destination, frame)
    }
}

impl<T: Transport> NetworkPublication<T> {
    pub(super) fn setup_check(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        for d in 0..self.destinations.len() {
            let dest = &self.destinations[d];
            let due = !self.flow_control.is_live(d) && now_ns >= dest.next_setup_ns;
            if due || dest.setup_requested {
                let setup = self.setup_frame();
                let mut bytes = [0u8; SETUP_WITH_MEMBERSHIP_LENGTH];
                let length = match self.config.membership {
                    Some(tag) => setup.encode_with_membership(&mut bytes, tag),
                    None => setup.encode(&mut bytes),
                };
                let length = length.expect("a setup frame fits its own length");
                self.send_counted(d, &bytes[..length]);
                self.counters.setups.increment();
                let dest = &mut self.destinations[d];
                dest.setup_requested = false;
                let interval = nanos(self.config.setup_interval);
                dest.next_setup_ns = now_ns + dest.setup_retry_ns.min(interval);
                dest.setup_retry_ns = (dest.setup_retry_ns * 2).min(interval);
                work += 1;
            }
        }
        work
    }

    pub(super) fn setup_frame(&self) -> SetupFrame {
        let c = self.log.config();
        let bits = self.log.position_bits_to_shift();
        SetupFrame {
            term_offset: term_offset(self.progress.sender_position, c.term_length) as i32,
            session_id: c.session_id,
            stream_id: c.stream_id,
            initial_term_id: c.initial_term_id,
            active_term_id: term_id(self.progress.sender_position, c.initial_term_id, bits),
            term_length: c.term_length as i32,
            mtu: c.mtu as i32,
            ..SetupFrame::default()
        }
    }

    pub(super) fn heartbeat_check(&mut self, now_ns: u64) -> usize {
        if self.flow_control.live_count() == 0
            || now_ns < self.progress.last_data_or_heartbeat_ns + nanos(self.config.heartbeat_interval)
        {
            return 0;
        }
        let c = self.log.config();
        let bits = self.log.position_bits_to_shift();
        let header = DataHeader::new(
            c.session_id,
            c.stream_id,
            term_id(self.progress.sender_position, c.initial_term_id, bits),
            term_offset(self.progress.sender_position, c.term_length) as i32,
            UNFRAGMENTED,
        );
        let mut bytes = [0u8; DATA_HEADER_LENGTH];
        frame::encode_heartbeat(&mut bytes, &header).expect("a heartbeat fits 32 bytes");
        self.send_control(&bytes);
        self.counters.heartbeats.increment();
        self.progress.last_data_or_heartbeat_ns = now_ns;
        1
    }

    /// Reads the control traffic waiting on the publication's sockets (status messages, NAKs, and frames
    /// for the control handler); returns the number of datagrams read. `idle_cycle`: the Sender's duty cycle
    /// sent nothing, so the polls are counted as idle polls too.
    pub fn poll_control(&mut self, now_ns: u64, batch: &mut RecvBatch, idle_cycle: bool) -> usize {
        let mut work = 0;
        for s in 0..self.sockets.endpoints().len() {
            self.counters.control_syscalls.increment();
            if idle_cycle {
                self.counters.idle_polls.increment();
            }
            let endpoint = &mut self.sockets.endpoints_mut()[s];
            let received = match self.calls.time(CallClass::Poll, || endpoint.recv_batch(batch)) {
                Ok(n) => n,
                Err(_) => {
                    self.counters.recv_errors.increment();
                    0
                }
            };
            for i in 0..received {
                let datagram = batch.datagram(i);
                let Some(d) = self.destination_of(s, datagram.source) else {
                    self.counters.invalid_packets.increment();
                    self.counters.foreign.increment();
                    continue;
                };
                if datagram.forged {
                    self.counters.invalid_packets.increment();
                    self.counters.forged.increment();
                    continue;
                }
                if datagram.truncated {
                    self.counters.invalid_packets.increment();
                    continue;
                }
                self.on_control(d, datagram.bytes, now_ns);
            }
            work += received;
        }
        work
    }

    /// Which destination a control datagram on socket `s` came from.
    pub(super) fn destination_of(&self, s: usize, source: Option<SocketAddr>) -> Option<usize> {
        match &self.sockets {
            Sockets::PerDestination(_) => Some(s), // connected: the kernel only delivers the peer's datagrams
            Sockets::Shared { .. } => {
                let source = source?;
                self.destinations.iter().position(|d| d.addr == source)
            }
        }
    }

    pub(super) fn on_control(&mut self, d: usize, datagram: &[u8], now_ns: u64) {
        let c = *self.log.config();
        match frame::parse(datagram) {
            Ok(Frame::StatusMessage { frame, group_tag })
                if frame.session_id == c.session_id && frame.stream_id == c.stream_id =>
            {
                self.counters.status_messages.increment();
                if self.config.membership.is_some_and(|mine| group_tag != Some(mine)) {
                    self.counters.membership_refused.increment();
                    let (addr, mine) = (self.destinations[d].addr, self.config.membership.unwrap_or(0));
                    self.logs.membership.warn(now_ns, || {
                        format!(
                            "status message from {addr} refused: it carries member-list tag {}, this node's is \
                             {mine:#018x}: the two nodes are configured with different `members`; give every node \
                             the same list",
                            group_tag.map_or("none".to_string(), |t| format!("{t:#018x}"))
                        )
                    });
                    return;
                }
                if frame.flags & frame::SM_SEND_SETUP_FLAG != 0 {
                    // A receiver without an image asks for a SETUP; its position and window mean nothing yet.
                    self.destinations[d].setup_requested = true;
                    return;
                }
                let bits = self.log.position_bits_to_shift();
                let pos = position(
                    frame.consumption_term_id,
                    frame.consumption_term_offset as usize,
                    c.initial_term_id,
                    bits,
                );
                let window = frame.receiver_window as i64;
                let change = self.flow_control.on_status_message(d, frame.receiver_id(), pos, window, now_ns);
                if pos < self.oldest_retained() {
                    self.tell_behind(d, pos, now_ns);
                }
                if change == StatusChange::Joined && pos + window < self.progress.sender_position {
                    // Its SETUP went out a while ago and the stream has moved on past its window: tell it
                    // where the stream is now, so an image that has received nothing can join there.
                    self.destinations[d].setup_requested = true;
                }
            }
            Ok(Frame::Nak(nak)) if nak.session_id == c.session_id && nak.stream_id == c.stream_id => {
                self.counters.naks_received.increment();
                self.on_nak(d, nak.term_id, nak.term_offset, nak.length, now_ns);
            }
            Ok(other @ Frame::Extension { .. }) => match self.control_handler.as_mut() {
                Some(handler) => handler.on_control(d, &other),
                None => self.counters.invalid_packets.increment(),
            },
            _ => self.counters.invalid_packets.increment(),
        }
    }

    /// Answers a NAK: only for a range the log retains and the sender has sent, at most once per range
    /// per linger, at most a window per resend and within the receiver's byte budget (see
    /// [`RetransmitHandler`]). A receiver that NAKs what the log no longer holds is told so instead.
    pub(super) fn on_nak(&mut self, d: usize, nak_term_id: i32, nak_offset: i32, length: i32, now_ns: u64) {
        let c = *self.log.config();
        let bits = self.log.position_bits_to_shift();
        if nak_offset < 0 || length <= 0 || nak_offset as usize >= c.term_length {
            self.counters.invalid_packets.increment();
            return;
        }
        let from = position(nak_term_id, nak_offset as usize, c.initial_term_id, bits);
        if from >= self.progress.sender_position {
            self.counters.invalid_packets.increment();
            return;
        }
        if !self.is_retained(from) {
            self.counters.naks_behind_retained.increment();
            self.tell_behind(d, from, now_ns);
            return;
        }
        match self.retransmit.on_nak(d, nak_term_id, nak_offset, length, now_ns) {
            NakOutcome::Resend { length } => {
                let end = (from + length as i64).min(self.progress.sender_position);
                let term_end = from - nak_offset as i64 + c.term_length as i64;
                let sent = self.resend(d, from, end.min(term_end));
                self.retransmit.spent(d, sent);
            }
            NakOutcome::Lingering => {}
            NakOutcome::Throttled => self.counters.retransmits_throttled.increment(),
        }
    }

    /// Tells receiver `d`, at most once per status interval (and logs it at most once a second), that its
    /// position `at` is older than anything the log
    /// retains: its NAKs cannot be answered, and it does not hold the stream back (see
    /// [`FlowControl::limit`]). Logged here too, naming the positions.
    pub(super) fn tell_behind(&mut self, d: usize, at: i64, now_ns: u64) {
        if now_ns < self.destinations[d].next_behind_ns {
            return;
        }
        self.destinations[d].next_behind_ns = now_ns + nanos(self.config.status_interval);
        let c = *self.log.config();
        let (oldest, sender) = (self.oldest_retained(), self.progress.sender_position);
        let frame = frame::BehindRetainedFrame {
            session_id: c.session_id,
            stream_id: c.stream_id,
            receiver_position: at,
            oldest_retained: oldest,
            sender_position: sender,
            ..frame::BehindRetainedFrame::default()
        };
        let mut bytes = [0u8; frame::BEHIND_RETAINED_LENGTH];
        if frame.encode(&mut bytes).is_ok() && self.send_counted(d, &bytes) {
            self.counters.behind_retained_sent.increment();
        }
        let addr = self.destinations[d].addr;
        self.logs.behind.warn(now_ns, || {
            format!(
                "receiver {addr} is at position {at}, behind the oldest position this log retains ({oldest}; sent \
                 up to {sender}): it cannot catch up from memory and no longer holds the stream back"
            )
        });
    }

    /// Whether the log still holds `position` intact, now and for as long as the sender is busy with it.
    ///
    /// The appender zeroes the partition of term `T - 1` when it rotates into `T + 1`, and it stays within
    /// `term_length / 2` of the sender position, which does not move during a resend. So terms from
    /// `term(sender_position + term_length / 2) - 1` on are intact. (This is at least `term_length / 2`
    /// of history, more than Aeron's bound, and it stays correct when the sender position has jumped over
    /// padding to a term boundary.)
    pub(super) fn is_retained(&self, position: i64) -> bool {
        position >= self.oldest_retained()
    }

    /// The oldest position [`Self::is_retained`] accepts: the start of the term before the one the appender
    /// can reach while the sender position stays where it is.
    ///
    /// Never below the log's first byte ([`Self::set_log_start`]): a continued log holds nothing before it,
    /// so a receiver there could NAK forever, never be answered and, being responsive, hold the stream
    /// (and every commit) back by the lag bound.
    pub(super) fn oldest_retained(&self) -> i64 {
        let bits = self.log.position_bits_to_shift();
        let furthest_producer = self.progress.sender_position + (self.log.term_length() / 2) as i64;
        (((term_count(furthest_producer, bits) - 1).max(0)) << bits).max(self.progress.log_start)
    }

    /// Resends `[from, to)` of the log to destination `d`, in datagrams of whole frames up to the MTU;
    /// returns the bytes sent.
    pub(super) fn resend(&mut self, d: usize, mut from: i64, to: i64) -> usize {
        let start = from;
        let term_length = self.log.term_length();
        let bits = self.log.position_bits_to_shift();
        while from < to {
            let found =
                scan(&self.log, from, ((to - from) as usize).min(self.config.mtu).max(crate::frame::FRAME_ALIGNMENT));
            if found.available == 0 {
                break;
            }
            let partition = partition_index(from, bits);
            let bytes = self.log.term(partition).bytes(term_offset(from, term_length), found.available);
            let call = (&self.counters.control_syscalls, CallClass::Control);
            let outcome = transmit(&mut self.sockets, d, bytes, None, call, &mut self.calls);
            if !matches!(outcome, SendOutcome::Sent(_)) {
                self.counters.short_sends.increment();
                break;
            }
            self.counters.retransmits.increment();
            self.counters.retransmitted_bytes.add(found.available as i64);
            from += found.advance() as i64;
        }
        (from - start) as usize
    }
}
