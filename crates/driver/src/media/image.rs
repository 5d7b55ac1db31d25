//! A publication image: the receiver's copy of a remote log, rebuilt from datagrams in any order.
//!
//! The image is a [`LogBuffer`] written only by the Receiver thread through a [`TermRebuilder`] and read by
//! subscriptions with the ordinary [`LogReader`](crate::shm::log_buffer::LogReader). Its positions:
//!
//! - `rebuild_position`: everything before it has arrived, contiguously;
//! - `hwm`: the highest position any datagram (or heartbeat) reached;
//! - the consumption position: the slowest subscription's position, read from the log's consumer slots.
//!
//! Status messages report the rebuild position with the window `min(receiver window, consumption +
//! term_length / 2 - rebuild_position)`, so the sender's limit (position + window) is the tighter of two
//! bounds: the receiver window beyond what has arrived (the socket buffer it protects is drained by the
//! receiver, not by the subscriptions), and half a term beyond the slowest subscription (what the log can
//! hold). Aeron reports the consumption position with the whole window, which ties the sender to its
//! slowest subscription's pace even when the log has room: for a cluster follower, whose subscription
//! reads only committed entries, to the whole commit round trip (aeron-io/aeron#1601).
//!
//! Invariants: a datagram is inserted only if it ends within `consumption + term_length / 2` (so the
//! rebuilder never writes a partition that is still being read or not yet cleaned) and does not end at or
//! before `rebuild_position` (a duplicate). A gap is NAKed `nak_delay` after it is first seen, and again
//! every `nak_retry_delay` until it is filled; the first gap's timer governs, and when it fires the next
//! few gaps in the term are NAKed with it (Aeron NAKs only the first gap, which serialises the repair of
//! burst loss: one round trip per gap).

use std::net::SocketAddr;

use crate::frame::{self, DataHeader, DataRun};
use crate::shm::log_buffer::descriptor::{position, position_bits_to_shift, term_id, term_offset};
use crate::shm::log_buffer::{ConsumerPosition, Gap, LogBuffer, TermRebuilder};

/// Most gaps NAKed after the first one in a single loss check.
pub const MAX_EXTRA_NAKS: usize = 7;

/// Why a datagram was not inserted into an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Written (possibly partly a duplicate of frames already there).
    Inserted,
    /// Everything in it had already arrived.
    Duplicate,
    /// It ends beyond what the window allows (`consumption + term_length / 2`).
    OutOfWindow,
    /// Its frames do not fit the term or contradict their own headers.
    Malformed,
}

/// What to send the publisher after a duty cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feedback {
    /// A status message: consumption position and window.
    Status {
        /// Term of the consumption position.
        term_id: i32,
        /// Offset of the consumption position in that term.
        term_offset: i32,
        /// The receiver window in bytes.
        window: i32,
    },
    /// A NAK for a gap.
    Nak(Gap),
    /// A follower's acknowledgement of its append position (the rebuild position).
    Ack {
        /// Everything before it has arrived.
        position: i64,
    },
}

/// Timers and window of an image (from the channel configuration).
#[derive(Clone, Copy, Debug)]
pub struct ImageTimers {
    /// Delay before a new gap is NAKed.
    pub nak_delay_ns: u64,
    /// Delay between NAKs of the same gap.
    pub nak_retry_ns: u64,
    /// Longest time between status messages.
    pub status_interval_ns: u64,
    /// Receiver window advertised.
    pub window: i64,
}

/// The receiver's state of one remote publication (one session of one stream from one source).
///
/// Its parts by concern: the stream's constants (`StreamShape`), the status messages it sends
/// (`StatusState`), its loss detection and NAKs (`LossState`), and a follower's acknowledgements
/// (`Acknowledgements`); beside them the log, its rebuilder and the positions of the module
/// documentation. The parts are held by value: the receive path reaches every field at a fixed offset
/// from `self`, as it did when they were flat.
#[derive(Debug)]
pub struct PublicationImage {
    log: LogBuffer,
    rebuilder: TermRebuilder,
    stream: StreamShape,
    source: SocketAddr,
    join_position: i64,
    rebuild_position: i64,
    hwm: i64,
    /// Highest end of data (or heartbeat position) seen beyond the window: the image is catching up.
    seen: i64,
    timers: ImageTimers,
    status: StatusState,
    loss: LossState,
    acks: Acknowledgements,
}

/// The constants of the stream an image rebuilds, copied from its log's configuration so that the receive
/// path does not reach through the log for them.
///
/// Invariant: fixed at [`PublicationImage::new`]; `bits` is `position_bits_to_shift(term_length)`.
#[derive(Clone, Copy, Debug)]
struct StreamShape {
    session_id: i32,
    stream_id: i32,
    initial_term_id: i32,
    term_length: usize,
    bits: u32,
}

/// When the image next tells the sender its position and window.
///
/// Invariant: a status message goes out when asked for (`requested`), when the limit it would give has
/// moved a quarter of the window past `last_limit`, or at `next_ns` at the latest.
#[derive(Clone, Copy, Debug)]
struct StatusState {
    /// The limit (position + window) the last status message gave the sender.
    last_limit: i64,
    next_ns: u64,
    requested: bool,
}

/// The gap the image is NAKing, and whether it may NAK at all.
///
/// Invariant: `gap` is the first gap as last seen; its NAK is due at `next_nak_ns`, set `nak_delay` after
/// it was first seen and `nak_retry_delay` after each NAK. While `behind_retained`, nothing is NAKed.
#[derive(Clone, Copy, Debug)]
struct LossState {
    gap: Option<Gap>,
    next_nak_ns: u64,
    /// The publisher said it no longer retains this image's rebuild position: its gaps cannot be repaired,
    /// so they are no longer NAKed.
    behind_retained: bool,
}

/// A follower's acknowledgements of its append position: when they go out (`timer`, `None`: the image
/// does not acknowledge) and how far they may report (`bound`).
#[derive(Clone, Debug, Default)]
struct Acknowledgements {
    timer: Option<AckTimer>,
    bound: AckBound,
}

impl Acknowledgements {
    /// The position an acknowledgement reports, of an image rebuilt to `rebuild_position`: that, bounded by
    /// the durable position when there is one.
    #[inline]
    fn position(&self, rebuild_position: i64) -> i64 {
        self.bound.0.as_ref().map_or(rebuild_position, |d| d.get().min(rebuild_position))
    }
}

/// When a follower's image acknowledges its append position.
///
/// Invariant: an acknowledgement goes out at least every `interval_ns`; a position that moved goes out at
/// the first check at least `gap_ns` after the last acknowledgement (at once when that one is older).
#[derive(Clone, Copy, Debug)]
struct AckTimer {
    interval_ns: u64,
    gap_ns: u64,
    last_position: i64,
    /// When the last acknowledgement went out; `None` before the first.
    last_sent_ns: Option<u64>,
    next_ns: u64,
}

impl AckTimer {
    /// Whether an acknowledgement of `position` is due at `now_ns`.
    fn due(&self, position: i64, now_ns: u64) -> bool {
        let gap_over = self.last_sent_ns.is_none_or(|sent| now_ns >= sent.saturating_add(self.gap_ns));
        now_ns >= self.next_ns || (position > self.last_position && gap_over)
    }
}

/// What an acknowledgement may report: the rebuild position, or (under a `batch` sync policy) no more than
/// what the recorder has made durable.
#[derive(Clone, Debug, Default)]
struct AckBound(Option<crate::shm::counters::Counter>);

impl PublicationImage {
    /// An image of the publication that sent a SETUP from `source`, starting at `join_position`.
    ///
    /// `log` must have the publication's term length, MTU and initial term id.
    pub fn new(log: LogBuffer, source: SocketAddr, join_position: i64, timers: ImageTimers, now_ns: u64) -> Self {
        let config = *log.config();
        let rebuilder = TermRebuilder::joining_at(&log, join_position);
        Self {
            stream: StreamShape {
                session_id: config.session_id,
                stream_id: config.stream_id,
                initial_term_id: config.initial_term_id,
                term_length: config.term_length,
                bits: position_bits_to_shift(config.term_length),
            },
            rebuilder,
            log,
            source,
            join_position,
            rebuild_position: join_position,
            hwm: join_position,
            seen: join_position,
            timers,
            status: StatusState { last_limit: join_position, next_ns: now_ns, requested: true },
            loss: LossState { gap: None, next_nak_ns: 0, behind_retained: false },
            acks: Acknowledgements::default(),
        }
    }

    /// Makes this image acknowledge its rebuild position whenever it advances, but no sooner than `gap_ns`
    /// after its last acknowledgement (an advance within the gap goes out when the gap ends), and every
    /// `interval_ns` when it does not advance (a follower's append position, for the leader's quorum).
    ///
    /// The gap bounds the acknowledgements of a busy follower to one per gap (each is a send call on the
    /// follower and a receive on the leader's Sender); an advance after a quiet spell longer than the
    /// gap is acknowledged at once, so light load waits for nothing.
    pub fn acknowledge_every(&mut self, interval_ns: u64, gap_ns: u64) {
        self.acks.timer =
            Some(AckTimer { interval_ns, gap_ns, last_position: i64::MIN, last_sent_ns: None, next_ns: 0 });
    }

    /// Whether the rebuild position moved past the last acknowledgement, which waits for the gap to end
    /// ([`acknowledge_every`](Self::acknowledge_every)): the receiver keeps polling rather than parking.
    pub fn ack_deferred(&self) -> bool {
        self.acks.timer.as_ref().is_some_and(|ack| self.ack_position() > ack.last_position)
    }

    /// The position an acknowledgement reports: the rebuild position, bounded by the durable one.
    fn ack_position(&self) -> i64 {
        self.acks.position(self.rebuild_position)
    }

    /// Makes this image acknowledge no more than `durable` says (the position a recorder has synced):
    /// a member counts toward a commit only with bytes that survive its power loss.
    pub fn acknowledge_up_to(&mut self, durable: crate::shm::counters::Counter) {
        self.acks.bound = AckBound(Some(durable));
    }

    /// The image log (subscriptions read it).
    pub fn log(&self) -> &LogBuffer {
        &self.log
    }

    /// Session of the remote publication.
    pub fn session_id(&self) -> i32 {
        self.stream.session_id
    }

    /// Stream of the remote publication.
    pub fn stream_id(&self) -> i32 {
        self.stream.stream_id
    }

    /// Where its datagrams come from, and where status messages and NAKs go.
    pub fn source(&self) -> SocketAddr {
        self.source
    }

    /// The position the image started at.
    pub fn join_position(&self) -> i64 {
        self.join_position
    }

    /// Everything before this position has arrived.
    pub fn rebuild_position(&self) -> i64 {
        self.rebuild_position
    }

    /// The highest position received.
    pub fn hwm(&self) -> i64 {
        self.hwm
    }

    /// Registers a consumer (a subscription) at the join position.
    pub fn register_consumer(&self) -> Option<ConsumerPosition> {
        self.log.register_consumer(self.join_position).ok()
    }

    /// The slowest subscription's position (the rebuild position when none is registered).
    pub fn consumption_position(&self) -> i64 {
        self.log.min_consumer_position().unwrap_or(self.rebuild_position)
    }

    /// Takes the publisher's word that it retains its log only from `oldest_retained`: when that is past the
    /// rebuild position, the gap can never be repaired, so this image stops NAKing (a publisher would refuse
    /// every NAK) and returns true. Status messages go on, so the publisher still knows where it is.
    pub fn on_behind_retained(&mut self, oldest_retained: i64) -> bool {
        if oldest_retained > self.rebuild_position {
            self.loss.behind_retained = true;
        }
        self.loss.behind_retained
    }

    /// Whether the publisher has left this image behind its retained log.
    pub fn is_behind_retained(&self) -> bool {
        self.loss.behind_retained
    }

    /// Asks for a status message on the next [`feedback`](Self::feedback) (on a new SETUP).
    pub fn request_status(&mut self) {
        self.status.requested = true;
    }

    /// Checks the frames of one data datagram ([`frame::data_run`]) and inserts them; a datagram that
    /// breaks a rule is [`InsertOutcome::Malformed`] and nothing of it is written.
    pub fn insert(&mut self, datagram: &[u8]) -> InsertOutcome {
        match frame::data_run(datagram) {
            Ok(run) => self.insert_run(&run, datagram),
            Err(_) => InsertOutcome::Malformed,
        }
    }

    /// Inserts a datagram whose frames [`frame::data_run`] has checked, as `run` describes them: one copy
    /// into the image, unless the datagram is a duplicate, impossible, or beyond the window.
    pub fn insert_run(&mut self, run: &DataRun, datagram: &[u8]) -> InsertOutcome {
        let header = &run.first;
        // Frames never cross a term's end (padding fills it): a datagram that does is impossible, not
        // merely ahead of the window or behind the rebuild position (which its aliased position may be).
        let Ok(term_offset) = usize::try_from(header.term_offset) else {
            return InsertOutcome::Malformed;
        };
        if run.span > self.stream.term_length.saturating_sub(term_offset) {
            return InsertOutcome::Malformed;
        }
        let start = position(header.term_id, term_offset, self.stream.initial_term_id, self.stream.bits);
        let end = start + run.span as i64;
        if end <= self.rebuild_position || start < self.join_position {
            return InsertOutcome::Duplicate;
        }
        // The window bounds the bytes written; a PAD header may cover padding beyond it, which is not written.
        if start + datagram.len() as i64 > self.consumption_position() + (self.stream.term_length / 2) as i64 {
            self.seen = self.seen.max(end);
            return InsertOutcome::OutOfWindow;
        }
        if self.rebuilder.insert_run(header.term_id, term_offset, datagram).is_err() {
            return InsertOutcome::Malformed;
        }
        self.hwm = self.hwm.max(end);
        InsertOutcome::Inserted
    }

    /// Takes a heartbeat: the publisher's position is at least `(term_id, term_offset)`, so anything
    /// below it that is missing is lost (the tail of a burst).
    pub fn on_heartbeat(&mut self, header: &DataHeader) -> bool {
        if header.term_offset < 0 || header.term_offset as usize >= self.stream.term_length {
            return false;
        }
        let at = position(header.term_id, header.term_offset as usize, self.stream.initial_term_id, self.stream.bits);
        if at > self.hwm && at <= self.consumption_position() + (self.stream.term_length / 2) as i64 {
            self.hwm = at;
        }
        self.seen = self.seen.max(at);
        true
    }

    /// Advances the rebuild position over what has arrived and cleans terms no subscription reads any more.
    pub fn track_rebuild(&mut self) -> bool {
        let before = self.rebuild_position;
        self.rebuild_position = self.rebuilder.rebuild_position(self.rebuild_position, self.hwm);
        let consumed = self.consumption_position();
        self.rebuilder.clean_behind(consumed);
        self.rebuild_position != before
    }

    /// The status message or NAK due at `now_ns`, at most one of each per call (status first).
    pub fn feedback(&mut self, now_ns: u64, mut send: impl FnMut(Feedback)) -> usize {
        let mut sent = 0;
        let (position, window) = self.advertised();
        let threshold = self.status.last_limit + self.timers.window / 4;
        if self.status.requested || position + window >= threshold || now_ns >= self.status.next_ns {
            send(Feedback::Status {
                term_id: term_id(position, self.stream.initial_term_id, self.stream.bits),
                term_offset: term_offset(position, self.stream.term_length) as i32,
                window: window as i32,
            });
            self.status.last_limit = position + window;
            self.status.next_ns = now_ns + self.timers.status_interval_ns;
            self.status.requested = false;
            sent += 1;
        }
        sent += self.ack_check(now_ns, &mut send);
        sent + self.loss_check(now_ns, send)
    }

    /// The position and window a status message reports (see the [module](self) docs): the rebuild
    /// position, and the receiver window cut to what the log holds beyond the slowest subscription.
    fn advertised(&self) -> (i64, i64) {
        let log_end = self.consumption_position() + (self.stream.term_length / 2) as i64;
        (self.rebuild_position, self.timers.window.min(log_end - self.rebuild_position).max(0))
    }

    fn ack_check(&mut self, now_ns: u64, send: &mut impl FnMut(Feedback)) -> usize {
        let position = self.ack_position();
        let Some(ack) = self.acks.timer.as_mut() else {
            return 0;
        };
        if ack.due(position, now_ns) {
            ack.last_position = position;
            ack.last_sent_ns = Some(now_ns);
            ack.next_ns = now_ns + ack.interval_ns;
            send(Feedback::Ack { position });
            return 1;
        }
        0
    }

    /// The range a catching-up image asks for when everything up to its hwm has arrived but the publisher
    /// is already beyond its window: from the hwm to what the window allows, within the hwm's term.
    fn catch_up_gap(&self) -> Option<Gap> {
        let window_end = self.consumption_position() + (self.stream.term_length / 2) as i64;
        let term_end = (self.hwm | (self.stream.term_length as i64 - 1)) + 1;
        let end = self.seen.min(window_end).min(term_end);
        (end > self.hwm).then(|| Gap {
            term_id: term_id(self.hwm, self.stream.initial_term_id, self.stream.bits),
            term_offset: term_offset(self.hwm, self.stream.term_length),
            length: (end - self.hwm) as usize,
        })
    }

    /// NAKs up to [`MAX_EXTRA_NAKS`] gaps after `first` in the same term, so that burst loss inside the
    /// window is repaired in one round trip instead of one round trip per gap (the complaint of
    /// aeron-io/aeron#1958). A later gap may be data still in flight out of order; NAKing it early costs
    /// one redundant retransmit.
    fn nak_later_gaps(&mut self, first: Gap, send: &mut impl FnMut(Feedback)) -> usize {
        let mut from =
            position(first.term_id, first.term_offset + first.length, self.stream.initial_term_id, self.stream.bits);
        let mut sent = 0;
        while sent < MAX_EXTRA_NAKS && from < self.hwm {
            match self.rebuilder.scan_for_gap(from, self.hwm) {
                Some(gap) if gap.term_id == first.term_id => {
                    send(Feedback::Nak(gap));
                    sent += 1;
                    from = position(
                        gap.term_id,
                        gap.term_offset + gap.length,
                        self.stream.initial_term_id,
                        self.stream.bits,
                    );
                }
                _ => break,
            }
        }
        sent
    }

    fn loss_check(&mut self, now_ns: u64, mut send: impl FnMut(Feedback)) -> usize {
        let gap = if self.loss.behind_retained {
            None
        } else if self.rebuild_position < self.hwm {
            self.rebuilder.scan_for_gap(self.rebuild_position, self.hwm)
        } else if self.seen > self.hwm {
            self.catch_up_gap()
        } else {
            None
        };
        match gap {
            None => {
                self.loss.gap = None;
                0
            }
            Some(gap) if self.loss.gap.map(|g| (g.term_id, g.term_offset)) != Some((gap.term_id, gap.term_offset)) => {
                self.loss.gap = Some(gap);
                self.loss.next_nak_ns = now_ns + self.timers.nak_delay_ns;
                0
            }
            Some(gap) if now_ns >= self.loss.next_nak_ns => {
                self.loss.gap = Some(gap);
                self.loss.next_nak_ns = now_ns + self.timers.nak_retry_ns;
                send(Feedback::Nak(gap));
                1 + self.nak_later_gaps(gap, &mut send)
            }
            Some(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::log_buffer::{scan, LogConfig, LogReader};

    const TIMERS: ImageTimers =
        ImageTimers { nak_delay_ns: 100, nak_retry_ns: 10_000, status_interval_ns: 1_000_000, window: 16 * 1024 };

    fn logs() -> (LogBuffer, LogBuffer) {
        let config = LogConfig { initial_term_id: 7, session_id: 3, ..LogConfig::new(65536, 1408) };
        (LogBuffer::create_anonymous(config).unwrap(), LogBuffer::create_anonymous(config).unwrap())
    }

    /// The datagrams a sender would send for everything appended to `log`.
    fn datagrams(log: &LogBuffer, end: i64) -> Vec<(DataHeader, Vec<u8>)> {
        let mut out = Vec::new();
        let mut position = 0;
        while position < end {
            let s = scan(log, position, 1408);
            let bits = log.position_bits_to_shift();
            let offset = term_offset(position, log.term_length());
            let bytes = log
                .term(crate::shm::log_buffer::descriptor::partition_index(position, bits))
                .bytes(offset, s.available);
            let header: DataHeader = bytemuck::pod_read_unaligned(&bytes[..32]);
            out.push((header, bytes.to_vec()));
            position += s.advance() as i64;
        }
        out
    }

    /// Appends `count` messages of `length` bytes, message `i` filled with `i`; returns the end position.
    fn append_numbered(log: &LogBuffer, count: u8, length: usize) -> i64 {
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        for i in 0..count {
            appender.append(&vec![i; length]).unwrap();
        }
        appender.position()
    }

    fn source() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn loss_is_naked_after_the_delay_and_filled_by_the_resend() {
        let (log, image_log) = logs();
        let all = datagrams(&log, append_numbered(&log, 20, 300));
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let consumer = image.register_consumer().unwrap();
        for (i, (_, d)) in all.iter().enumerate() {
            if i != 1 {
                assert_eq!(image.insert(d), InsertOutcome::Inserted);
            }
        }
        image.track_rebuild();
        assert_eq!(image.rebuild_position(), all[1].0.term_offset as i64);
        let mut out = Vec::new();
        assert_eq!(image.feedback(0, |f| out.push(f)), 1, "the status message answering the setup only");
        assert_eq!(image.feedback(99, |f| out.push(f)), 0, "a new gap waits for the NAK delay");
        assert_eq!(image.feedback(100, |f| out.push(f)), 1);
        let Feedback::Nak(gap) = out[1] else { panic!("{out:?}") };
        assert_eq!((gap.term_id, gap.term_offset as i32, gap.length), (7, all[1].0.term_offset, all[1].1.len()));
        assert_eq!(image.feedback(5_000, |f| out.push(f)), 0, "no repeat before the retry delay");
        assert_eq!(image.feedback(10_100, |f| out.push(f)), 1, "repeated until filled");
        assert_eq!(image.insert(&all[1].1), InsertOutcome::Inserted);
        assert_eq!(image.insert(&all[1].1), InsertOutcome::Inserted, "a late copy inside the hwm");
        image.track_rebuild();
        assert_eq!(image.rebuild_position(), image.hwm());
        assert_eq!(image.insert(&all[0].1), InsertOutcome::Duplicate);
        let reader = LogReader::new(image.log());
        let mut got = Vec::new();
        reader.poll(0, 100, |payload, _| got.push(payload[0]));
        assert_eq!(got, (0..20).collect::<Vec<u8>>());
        drop(consumer);
    }

    /// The acknowledgements (time, position) `feedback` gives over `steps`: at each `(now_ns, datagrams)`,
    /// the datagrams are inserted, then feedback is asked for at `now_ns`.
    fn acks_at(image: &mut PublicationImage, steps: &[(u64, &[Vec<u8>])]) -> Vec<(u64, i64)> {
        let mut acks = Vec::new();
        for &(now_ns, datagrams) in steps {
            for d in datagrams {
                assert_eq!(image.insert(d), InsertOutcome::Inserted);
            }
            image.track_rebuild();
            image.feedback(now_ns, |f| {
                if let Feedback::Ack { position } = f {
                    acks.push((now_ns, position));
                }
            });
        }
        acks
    }

    #[test]
    fn a_follower_acknowledges_each_advance_but_no_sooner_than_the_gap_after_the_last() {
        let (log, image_log) = logs();
        let all: Vec<Vec<u8>> = datagrams(&log, append_numbered(&log, 4, 1000)).into_iter().map(|(_, d)| d).collect();
        let end = |i: usize| all[..=i].iter().map(|d| crate::frame::align_frame(d.len()) as i64).sum::<i64>();
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        // A gap of 20 us, an interval of 1 ms.
        image.acknowledge_every(1_000_000, 20_000);
        let acks = acks_at(
            &mut image,
            &[
                (0, &all[..1]),       // the first: at once
                (5_000, &all[1..2]),  // within the gap: waits...
                (15_000, &[]),        // ...still within it
                (20_000, &[]),        // ...and goes out when it ends, with everything since
                (25_000, &all[2..3]), // within the next gap
                (45_000, &[]),
                (200_000, &all[3..4]), // after a quiet spell longer than the gap: at once
                (1_199_999, &[]),      // nothing moved: nothing until the interval is up
                (1_200_000, &[]),
            ],
        );
        assert_eq!(
            acks,
            [(0, end(0)), (20_000, end(1)), (45_000, end(2)), (200_000, end(3)), (1_200_000, end(3))],
            "{acks:?}"
        );
        assert!(!image.ack_deferred());

        // Without a gap, every advance at once.
        let (log, image_log) = logs();
        let all: Vec<Vec<u8>> = datagrams(&log, append_numbered(&log, 3, 1000)).into_iter().map(|(_, d)| d).collect();
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        image.acknowledge_every(1_000_000, 0);
        let acks = acks_at(&mut image, &[(0, &all[..1]), (1, &all[1..2]), (2, &all[2..3])]);
        assert_eq!(acks.iter().map(|&(t, _)| t).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn an_acknowledgement_waiting_for_its_gap_is_deferred() {
        let (log, image_log) = logs();
        let all: Vec<Vec<u8>> = datagrams(&log, append_numbered(&log, 2, 1000)).into_iter().map(|(_, d)| d).collect();
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        assert!(!image.ack_deferred(), "an image that does not acknowledge defers nothing");
        image.acknowledge_every(1_000_000, 20_000);
        acks_at(&mut image, &[(0, &all[..1])]);
        assert!(!image.ack_deferred());
        acks_at(&mut image, &[(1_000, &all[1..2])]);
        assert!(image.ack_deferred(), "moved within the gap");
        acks_at(&mut image, &[(20_000, &[])]);
        assert!(!image.ack_deferred());
    }

    #[test]
    fn told_it_is_behind_the_retained_log_an_image_stops_naking_and_goes_on_with_status() {
        let (log, image_log) = logs();
        let all = datagrams(&log, append_numbered(&log, 20, 300));
        assert_eq!(all.len(), 5, "four messages per datagram");
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        for (_, d) in &all[2..] {
            assert_eq!(image.insert(d), InsertOutcome::Inserted);
        }
        image.track_rebuild();
        let mut out = Vec::new();
        image.feedback(0, |f| out.push(f));
        image.feedback(100, |f| out.push(f));
        assert!(matches!(out.last(), Some(Feedback::Nak(_))), "the gap before the first datagram is NAKed: {out:?}");
        assert!(!image.on_behind_retained(0), "a publisher that still holds the gap: NAKs go on");
        out.clear();
        image.feedback(10_100, |f| out.push(f));
        assert!(matches!(out.last(), Some(Feedback::Nak(_))), "{out:?}");

        let oldest = all[1].0.term_offset as i64;
        assert!(image.on_behind_retained(oldest), "the publisher retains only from past the rebuild position");
        assert!(image.is_behind_retained());
        out.clear();
        for now in [20_100, 30_100, 1_000_000, 2_000_000] {
            image.feedback(now, |f| out.push(f));
        }
        assert!(out.iter().all(|f| !matches!(f, Feedback::Nak(_))), "no NAK the publisher would refuse: {out:?}");
        assert!(out.iter().any(|f| matches!(f, Feedback::Status { .. })), "status messages go on: {out:?}");
    }

    #[test]
    fn datagrams_beyond_the_window_are_refused() {
        let (log, image_log) = logs();
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        while appender.position() < 40_000 {
            appender.append(&[1; 1000]).unwrap();
        }
        let all = datagrams(&log, appender.position());
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        let beyond = all.iter().find(|(h, d)| h.term_offset as usize + d.len() > 32 * 1024).unwrap();
        assert_eq!(image.insert(&beyond.1), InsertOutcome::OutOfWindow);
        assert_eq!(image.hwm(), 0);
    }

    #[test]
    fn frames_at_or_across_the_term_end_are_malformed_wherever_the_window_is() {
        let (_, image_log) = logs();
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let _consumer = image.register_consumer().unwrap();
        let frame = |term_id, term_offset: i32| {
            let mut bytes = vec![0u8; 64];
            let header = DataHeader::new(3, 1, term_id, term_offset, crate::frame::UNFRAGMENTED);
            crate::frame::encode_data(&mut bytes, &header, &[1; 32]).unwrap();
            (bytemuck::pod_read_unaligned::<DataHeader>(&bytes[..32]), bytes)
        };
        let (_, d) = frame(7, 0);
        assert_eq!(image.insert(&d), InsertOutcome::Inserted);
        image.track_rebuild();
        // Offsets at or across the end of the first term (7) alias positions beyond the window, and the end
        // of the term before it aliases position 0, already rebuilt: all are impossible frames, counted as
        // such, not as "out of window" or "duplicate".
        for (term_id, offset) in [(7, 65536), (7, 65536 - 32), (7, 1 << 30), (6, 65536)] {
            let (_, d) = frame(term_id, offset);
            assert_eq!(image.insert(&d), InsertOutcome::Malformed, "term {term_id} offset {offset}");
        }
        assert_eq!(image.hwm(), 64);
    }

    #[test]
    fn heartbeats_reveal_tail_loss() {
        let (log, image_log) = logs();
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        appender.append(&[1; 100]).unwrap();
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let consumer = image.register_consumer().unwrap();
        let heartbeat = DataHeader::new(3, 1, 7, 160, crate::frame::UNFRAGMENTED);
        assert!(image.on_heartbeat(&heartbeat));
        assert_eq!(image.hwm(), 160);
        let mut out = Vec::new();
        image.feedback(0, |f| out.push(f));
        image.feedback(1_000, |f| out.push(f));
        assert!(matches!(out.last(), Some(Feedback::Nak(Gap { term_offset: 0, length: 160, .. }))), "{out:?}");
        drop(consumer);
        assert!(crate::frame::data_run(&[0u8; 40]).is_err(), "a zero frame length is malformed");
    }

    #[test]
    fn status_reports_what_arrived_with_the_window_cut_to_what_the_log_holds() {
        // Term 64 KiB: the log holds half a term (32 KiB) beyond the slowest subscription; window 16 KiB.
        let (log, image_log) = logs();
        let end = append_numbered(&log, 30, 1000);
        let mut image = PublicationImage::new(image_log, source(), 0, TIMERS, 0);
        let consumer = image.register_consumer().unwrap();
        for (_, d) in datagrams(&log, end) {
            assert_eq!(image.insert(&d), InsertOutcome::Inserted);
        }
        image.track_rebuild();
        assert_eq!(image.rebuild_position(), end);
        let status = |image: &mut PublicationImage, now_ns| {
            let mut out = Vec::new();
            image.feedback(now_ns, |f| out.push(f));
            out.into_iter().find_map(|f| match f {
                Feedback::Status { term_offset, window, .. } => Some((i64::from(term_offset), i64::from(window))),
                _ => None,
            })
        };
        // Nothing consumed: the sender may go to half a term beyond it, less than a window past the data.
        assert_eq!(status(&mut image, 0), Some((end, 32 * 1024 - end)), "answering the setup");
        assert_eq!(status(&mut image, 10), None, "nothing moved, the interval has not passed");
        // The subscription read everything: the whole window beyond the data, at once (the limit moved
        // by more than a quarter window).
        consumer.set(end);
        assert_eq!(status(&mut image, 20), Some((end, 16 * 1024)));
        assert_eq!(status(&mut image, 30), None);
        assert_eq!(status(&mut image, 1_000_030), Some((end, 16 * 1024)), "the interval");
    }
}
