//! The data path: scanning the log for whole frames up to the flow-control window, and sending them in
//! the channel's send mode (`classic`: one `sendmsg` per datagram per destination; `mmsg`: one
//! `sendmmsg` per batch; `gso`: one segmented send per run per destination).

use super::*;

/// One datagram found by a scan: `length` bytes at `offset` of term `partition`, after which the sender
/// position moves by `advance` (the length plus any padding it ends with).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Run {
    partition: usize,
    offset: usize,
    length: usize,
    advance: usize,
}

/// Counts the outcome of a data send of `count` datagrams of `length` bytes; a path-MTU refusal stops the
/// channel. Returns whether the kernel took the data.
pub(super) fn account(
    outcome: SendOutcome,
    length: usize,
    count: usize,
    destination: SocketAddr,
    config: &ChannelConfig,
    counters: &SenderCounters,
    failure: &mut Option<PublicationError>,
) -> bool {
    match outcome {
        SendOutcome::Sent(n) => {
            counters.datagrams.add(n.max(count) as i64);
            counters.bytes.add((length * n.max(count)) as i64);
            true
        }
        SendOutcome::WouldBlock => {
            counters.short_sends.increment();
            false
        }
        SendOutcome::TooLarge { path_mtu, .. } => {
            counters.send_errors.increment();
            let path_mtu = path_mtu.or_else(|| probe_path_mtu(destination, config));
            let tag = if config.auth.is_some() { crate::media::auth::TAG_LENGTH } else { 0 };
            failure.get_or_insert(PublicationError::PathMtu { destination, mtu: config.mtu, tag, path_mtu });
            false
        }
        SendOutcome::Failed(_) => {
            counters.send_errors.increment();
            false
        }
    }
}

impl<T: Transport> NetworkPublication<T> {
    pub(super) fn send_data(&mut self, now_ns: u64) -> usize {
        let window = self.window(now_ns);
        self.counters.limit.set(self.progress.sender_position + window.max(0));
        if window <= 0 {
            self.note_window_closed();
            return 0;
        }
        let batch = self.collect_runs(window as usize);
        if batch == 0 {
            // A committed frame is at most one MTU, so a window of a whole MTU takes it: found nothing then
            // means caught up (or the next frame is still being written); a smaller window may not fit it.
            if (window as usize) < self.config.mtu && self.log.producer_position() > self.progress.sender_position {
                self.note_window_closed();
            } else {
                self.counters.caught_up_cycles.increment();
            }
            return 0;
        }
        let (delivered, advance) = match self.mode {
            SendMode::Classic => self.send_runs_classic(batch),
            SendMode::Mmsg => self.send_runs_mmsg(batch),
            SendMode::Gso => self.send_runs_gso(batch),
        };
        if delivered == 0 {
            return 0; // every live socket was full: try the same bytes next cycle
        }
        let position = self.progress.advance(advance, now_ns);
        self.consumer.set(position);
        self.counters.position.set(position);
        advance
    }

    /// Counts a cycle the flow-control window kept from sending data that waits (none waiting: nothing to
    /// count), and the first of a run of such cycles as a stall.
    pub(super) fn note_window_closed(&mut self) {
        if self.log.producer_position() <= self.progress.sender_position {
            return;
        }
        self.counters.window_closed_cycles.increment();
        if !self.progress.stalled && self.flow_control.live_count() > 0 {
            self.progress.stalled = true;
            self.counters.flow_control_stalls.increment();
        }
    }

    /// Scans up to `batch_limit` datagrams of at most one MTU each, within `window` bytes, into `runs`;
    /// returns how many it found.
    pub(super) fn collect_runs(&mut self, window: usize) -> usize {
        let mtu = self.config.mtu;
        let term_length = self.log.term_length();
        let bits = self.log.position_bits_to_shift();
        let mut position = self.progress.sender_position;
        let mut remaining = window;
        self.prefetch_batch(window);
        let mut count = 0;
        while count < self.config.batch_limit && remaining > 0 {
            let found = scan(&self.log, position, remaining.min(mtu));
            if found.available == 0 {
                break;
            }
            self.batch.runs[count] = Run {
                partition: partition_index(position, bits),
                offset: term_offset(position, term_length),
                length: found.available,
                advance: found.advance(),
            };
            remaining = remaining.saturating_sub(found.advance());
            position += found.advance() as i64;
            count += 1;
        }
        count
    }

    /// Prefetches what the next batch can hold from the sender position, within `window`, the active term
    /// and the producer position (never lines the appender is still writing), skipping the lines an
    /// earlier cycle already prefetched. The log was written by another core: without this, the scan
    /// fetches it one dependent frame header at a time; prefetching a line twice costs a fill-buffer slot
    /// for nothing (it was 5% of a saturated Sender's time when every cycle prefetched the whole batch).
    pub(super) fn prefetch_batch(&mut self, window: usize) {
        let term_length = self.log.term_length();
        let offset = term_offset(self.progress.sender_position, term_length);
        let produced = (self.log.producer_position() - self.progress.sender_position).max(0) as usize;
        let length = (self.config.batch_limit * self.config.mtu).min(window).min(produced).min(term_length - offset);
        let end = self.progress.sender_position + length as i64;
        let start = self.progress.prefetched.max(self.progress.sender_position);
        if start < end {
            let partition = partition_index(self.progress.sender_position, self.log.position_bits_to_shift());
            let skip = (start - self.progress.sender_position) as usize;
            self.log.term(partition).prefetch_range(offset + skip, length - skip);
            self.progress.prefetched = end;
        }
    }

    /// `classic`: one `sendmsg` per datagram per live destination. Returns (datagrams that at least one
    /// destination took, bytes of position to advance over them).
    pub(super) fn send_runs_classic(&mut self, count: usize) -> (usize, usize) {
        let mut delivered = 0;
        let mut advance = 0;
        for run in &self.batch.runs[..count] {
            let bytes = self.log.term(run.partition).bytes(run.offset, run.length);
            // With a key, the datagram is hashed once for every destination.
            let tag = self.config.auth.map(|key| key.tag(bytes));
            let mut taken = false;
            for (d, dest) in self.destinations.iter().enumerate() {
                if self.flow_control.is_live(d) {
                    let call = (&self.counters.data_syscalls, CallClass::Data);
                    let outcome = transmit(&mut self.sockets, d, bytes, tag.as_ref(), call, &mut self.calls);
                    taken |=
                        account(outcome, bytes.len(), 1, dest.addr, &self.config, &self.counters, &mut self.failure);
                }
            }
            if !taken {
                break;
            }
            delivered += 1;
            advance += run.advance;
        }
        (delivered, advance)
    }

    /// `mmsg`: one `sendmmsg` carries every datagram of the batch to every live destination.
    pub(super) fn send_runs_mmsg(&mut self, count: usize) -> (usize, usize) {
        let Sockets::Shared { endpoint, addrs } = &mut self.sockets else {
            unreachable!("mmsg mode always has a shared socket");
        };
        self.batch.live_addrs.clear();
        for (d, addr) in addrs.iter().enumerate() {
            if self.flow_control.is_live(d) {
                self.batch.live_addrs.push(addr.clone());
            }
        }
        let mut datagrams: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (slot, run) in datagrams.iter_mut().zip(&self.batch.runs[..count]) {
            *slot = self.log.term(run.partition).bytes(run.offset, run.length);
        }
        let (outcome, calls) = self.calls.time(CallClass::Data, || {
            endpoint.send_mmsg(&datagrams[..count], &self.batch.live_addrs, &mut self.batch.mmsg)
        });
        self.counters.data_syscalls.add(calls as i64);
        let fan = self.batch.live_addrs.len();
        let messages = match outcome {
            SendOutcome::Sent(n) => n,
            other => {
                // A failed sendmmsg sent nothing: its first message, to the first live destination, failed.
                let first_live = (0..self.destinations.len()).find(|&d| self.flow_control.is_live(d)).unwrap_or(0);
                let addr = self.destinations[first_live].addr;
                account(other, datagrams[0].len(), 0, addr, &self.config, &self.counters, &mut self.failure);
                0
            }
        };
        // A datagram counts as sent once any destination took it; the others recover it by NAK.
        let delivered = messages.div_ceil(fan).min(count);
        self.counters.short_sends.add((count * fan - messages.min(count * fan)) as i64);
        self.counters.datagrams.add(messages as i64);
        let mut advance = 0;
        for (k, run) in self.batch.runs[..delivered].iter().enumerate() {
            let copies = messages.saturating_sub(k * fan).min(fan);
            self.counters.bytes.add((run.length * copies) as i64);
            advance += run.advance;
        }
        (delivered, advance)
    }

    /// `gso`: the longest prefix of the batch whose datagrams are contiguous and of one length (the last
    /// may be shorter) goes to each live destination in one `sendmsg` with `UDP_SEGMENT`.
    ///
    /// The kernel refuses (`EMSGSIZE`) a GSO send whose bytes exceed one UDP datagram's payload, so a run
    /// stops before 64 KiB (7 full segments at MTU 8192).
    pub(super) fn send_runs_gso(&mut self, count: usize) -> (usize, usize) {
        let first = self.batch.runs[0];
        let segment = first.length;
        let mut segments = 1;
        let mut end = first.offset + first.advance;
        while segments < count {
            let next = self.batch.runs[segments];
            let contiguous = next.partition == first.partition && next.offset == end && first.advance == first.length;
            // One GSO send is one UDP datagram to the kernel: its whole payload must fit 64 KiB.
            let fits = end + next.length - first.offset <= frame::MAX_UDP_PAYLOAD_LENGTH;
            if !contiguous || !fits || next.length > segment {
                break;
            }
            segments += 1;
            end = next.offset + next.advance;
            if next.length < segment || next.advance != next.length {
                break; // a shorter segment, or padding, can only be the last
            }
        }
        let length = self.batch.runs[segments - 1].offset + self.batch.runs[segments - 1].length - first.offset;
        let bytes = self.log.term(first.partition).bytes(first.offset, length);
        let Sockets::PerDestination(endpoints) = &mut self.sockets else {
            unreachable!("gso mode always has per-destination sockets");
        };
        let mut taken = false;
        let mut refused = None;
        for (d, dest) in self.destinations.iter().enumerate() {
            if self.flow_control.is_live(d) {
                self.counters.data_syscalls.increment();
                let outcome = self.calls.time(CallClass::Data, || endpoints[d].send_gso(bytes, segment));
                if let SendOutcome::Failed(e) = &outcome {
                    if is_gso_refusal(e) {
                        refused = Some((dest.addr, e.to_string()));
                    }
                }
                taken |=
                    account(outcome, segment, segments, dest.addr, &self.config, &self.counters, &mut self.failure);
            }
        }
        if let Some((addr, error)) = refused {
            // The probe at start passed, but this path refuses segmentation (a device without checksum
            // offload, a tunnel): fall back to classic once, for good, and say so.
            self.mode = SendMode::Classic;
            self.counters.gso_fallbacks.increment();
            log::warn!("GSO send to {addr} refused by the kernel ({error}): falling back to classic sends");
        }
        if !taken {
            return (0, 0);
        }
        (segments, self.batch.runs[..segments].iter().map(|r| r.advance).sum())
    }

    /// Sends a control frame to destination `d`, counted as a control syscall; true when it went.
    pub(super) fn send_counted(&mut self, d: usize, bytes: &[u8]) -> bool {
        let call = (&self.counters.control_syscalls, CallClass::Control);
        let outcome = transmit(&mut self.sockets, d, bytes, None, call, &mut self.calls);
        match outcome {
            SendOutcome::Sent(_) => true,
            SendOutcome::WouldBlock => {
                self.counters.short_sends.increment();
                false
            }
            other => {
                let addr = self.destinations[d].addr;
                account(other, bytes.len(), 0, addr, &self.config, &self.counters, &mut self.failure);
                false
            }
        }
    }

    /// Lets the transports send what they held back (on a cycle that sent no data; see
    /// [`Transport::flush`]).
    pub(super) fn flush_held(&mut self) {
        for endpoint in self.sockets.endpoints_mut() {
            let sent = endpoint.flush();
            if sent > 0 {
                self.counters.control_syscalls.add(sent as i64);
            }
        }
    }
}
