//! A node's counters by what they count, not by their labels.
//!
//! Every counter a node allocates has a type id from [`CATALOGUE`] (below [`TYPE_USER_MIN`], which stays
//! free for applications) and, where it belongs to one, an owner: the follower an acknowledgement position
//! is of. Labels stay as they were, for people (`qc-stat`) and for scripts that match them. Allocators take
//! a [`kinds`] entry (`allocate(&kinds::sender::naks_received)`), so a counter's label and type id are
//! written once, in the catalogue, and a counter outside it cannot be allocated by mistake.
//!
//! [`Stats`] is the node's counters as read at one instant: `node.stats().sender().naks_received()`, or,
//! from another process, `Stats::read(&CountersReader::open(path)?)`. Two readings give deltas
//! ([`Stats::since`]), and deltas over several windows add up ([`Stats::accumulate`]).
//!
//! [`TYPE_USER_MIN`]: crate::shm::counters::TYPE_USER_MIN

use crate::shm::counters::{
    CounterSnapshot, CountersReader, TYPE_AGENT_DUTY_CYCLES, TYPE_AGENT_IDLE_CYCLES, TYPE_AGENT_MAX_CYCLE_NS,
    TYPE_AGENT_WORK, TYPE_COMMIT_POSITION, TYPE_SENDER_LIMIT, TYPE_SENDER_POSITION,
};

/// Type id of the leader's record of one follower's acknowledged position; the owner is the follower's id.
pub const TYPE_ACK_POSITION: i32 = 300;

/// Type id of an agent's nanoseconds in duty cycles that did work.
pub const TYPE_AGENT_WORK_NS: i32 = 5;

/// Type id of an agent counter that has no type of its own here (its label says what it counts).
pub const TYPE_AGENT_OTHER: i32 = 9;

/// Declares the catalogue (type id and label of every counter kind) and a typed view per part of the node.
macro_rules! catalogue {
    ($(
        $(#[$view_doc:meta])*
        $part:ident: $view:ident {
            $( $(#[$doc:meta])* $name:ident = $type_id:expr, $label:literal; )*
        }
    )*) => {
        /// Every counter kind a node allocates, by part: what allocators take, so that a label and its type
        /// id are written once, here (`allocate(&kinds::sender::naks_received)`).
        pub mod kinds {
            use super::*;
            $(
                #[doc = concat!("The `", stringify!($part), "` counters.")]
                #[allow(non_upper_case_globals)]
                pub mod $part {
                    use super::*;
                    $(
                        $(#[$doc])*
                        pub const $name: CounterKind = CounterKind {
                            type_id: $type_id,
                            key: concat!(stringify!($part), ".", stringify!($name)),
                            label: $label,
                        };
                    )*
                }
            )*
        }

        /// Every counter kind a node allocates once: its type id, its key and its label.
        pub const CATALOGUE: &[CounterKind] = &[ $( $( kinds::$part::$name, )* )* ];

        impl Stats {
            $(
                $(#[$view_doc])*
                pub fn $part(&self) -> $view<'_> {
                    $view(self)
                }
            )*
        }

        $(
            $(#[$view_doc])*
            #[derive(Clone, Copy, Debug)]
            pub struct $view<'a>(&'a Stats);

            impl $view<'_> {
                $(
                    $(#[$doc])*
                    pub fn $name(&self) -> i64 {
                        self.0.of_type($type_id)
                    }
                )*
            }
        )*
    };
}

catalogue! {
    /// The leader's Sender (every node allocates them; on a follower they stay 0).
    sender: SenderStats {
        /// Data `sendmsg`/`sendmmsg` calls.
        data_syscalls = 100, "sender data syscalls";
        /// Control syscalls: commit frames, acknowledgement reads, heartbeats, control polls.
        control_syscalls = 101, "sender control syscalls";
        /// Data datagrams sent, counted once per destination.
        data_datagrams = 102, "sender data datagrams";
        /// Data bytes sent.
        data_bytes = 103, "sender data bytes";
        /// Retransmits sent.
        retransmits = 104, "sender retransmits";
        /// Bytes retransmitted.
        retransmitted_bytes = 105, "sender retransmitted bytes";
        /// NAKs received.
        naks_received = 106, "sender NAKs received";
        /// Status messages received.
        status_messages_received = 107, "sender status messages received";
        /// Times data was waiting but the flow-control window was closed.
        flow_control_stalls = 108, "sender flow control stalls";
        /// Sends the kernel did not take (socket full, peer refused), per destination.
        short_sends = 109, "sender short sends";
        /// Sends that failed with an unexpected error.
        send_errors = 110, "sender send errors";
        /// Heartbeats sent.
        heartbeats = 111, "sender heartbeats";
        /// SETUP frames sent.
        setups = 112, "sender setups";
        /// Receivers dropped from flow control for silence.
        receivers_timed_out = 113, "sender receivers timed out";
        /// Control datagrams that were malformed, foreign or for another stream.
        invalid_packets = 114, "sender invalid packets";
        /// Control datagrams from a source that is not a destination.
        foreign_control_dropped = 115, "sender foreign control dropped";
        /// Status messages refused for carrying another member list's tag.
        membership_refused = 116, "sender membership refused";
        /// Control datagrams whose authentication tag was missing or wrong.
        forged_control_dropped = 117, "sender forged control dropped";
        /// NAKs not acted on because the receiver's retransmit budget was spent.
        retransmits_throttled = 118, "sender retransmits throttled";
        /// NAKs for positions the log no longer retains.
        naks_behind_retained = 119, "sender NAKs behind retained log";
        /// BEHIND_RETAINED frames sent.
        behind_retained_sent = 120, "sender behind-retained sent";
        /// Control polls on duty cycles that sent nothing.
        idle_control_polls = 121, "sender idle control polls";
        /// Duty cycles that sent no data because the flow-control window was closed with data waiting.
        window_closed_cycles = 122, "sender window-closed cycles";
        /// Duty cycles that sent no data with the window open (caught up with the appender).
        caught_up_cycles = 123, "sender caught-up cycles";
        /// Control receives that failed with an unexpected error.
        recv_errors = 124, "sender recv errors";
        /// GSO sends the kernel refused at run time, after which the Sender sends `classic`.
        gso_fallbacks = 125, "sender gso fallbacks";
        /// Nanoseconds inside data sends (with the time split on: `NodeBuilder::sender_time_split`).
        data_call_ns = 126, "sender data call ns";
        /// Nanoseconds inside control sends, and control polls on duty cycles that sent (the model's C).
        control_call_ns = 127, "sender control call ns";
        /// Nanoseconds of duty cycles that sent, outside calls: the Sender's own code.
        own_code_ns = 128, "sender own code ns";
        /// Nanoseconds of duty cycles that sent nothing, less their sends.
        idle_ns = 129, "sender idle ns";
        /// Nanoseconds between the end of a duty cycle and the start of the next (runner, idle strategy,
        /// agents sharing the thread).
        between_cycles_ns = 130, "sender between cycles ns";
        /// The sender position (`snd-pos`), in bytes of the log.
        position = TYPE_SENDER_POSITION, "snd-pos";
        /// The flow-control limit (`snd-lmt`), in bytes of the log.
        limit = TYPE_SENDER_LIMIT, "snd-lmt";
    }

    /// The Receiver (a follower's log; on the leader, its receive side for control traffic).
    receiver: ReceiverStats {
        /// Datagrams received (before any check).
        datagrams = 150, "receiver datagrams";
        /// Bytes received.
        bytes = 151, "receiver bytes";
        /// `recvmmsg` calls.
        recv_syscalls = 152, "receiver recv syscalls";
        /// Status messages sent.
        status_messages_sent = 153, "receiver status messages sent";
        /// NAKs sent.
        naks_sent = 154, "receiver NAKs sent";
        /// SETUP frames received.
        setups_received = 155, "receiver setups received";
        /// Heartbeats received.
        heartbeats_received = 156, "receiver heartbeats received";
        /// Datagrams that had all arrived before.
        duplicates_dropped = 157, "receiver duplicates dropped";
        /// Datagrams beyond the window.
        out_of_window_dropped = 158, "receiver out-of-window dropped";
        /// Malformed or truncated datagrams.
        malformed_dropped = 159, "receiver malformed dropped";
        /// Datagrams from sources that are not configured peers.
        foreign_source_dropped = 160, "receiver foreign source dropped";
        /// Of those, from a configured member that is not a peer (a member claiming to lead).
        foreign_member_dropped = 161, "receiver foreign member dropped";
        /// Of those, data, pad and heartbeat frames.
        foreign_data_dropped = 162, "receiver foreign data dropped";
        /// Of those, SETUP frames.
        foreign_setups_dropped = 163, "receiver foreign setups dropped";
        /// Of those, commit-position frames.
        foreign_commits_dropped = 164, "receiver foreign commits dropped";
        /// SETUPs refused: another term length, MTU or member list.
        setups_refused = 165, "receiver setups refused";
        /// SETUPs of a new session refused over a log that holds another session's data.
        new_sessions_refused = 166, "receiver new sessions refused";
        /// Commit-position frames for a session other than the image's.
        commits_refused = 167, "receiver commits refused";
        /// Image log files removed because a newer image replaced them.
        images_removed = 168, "receiver images removed";
        /// Datagrams whose authentication tag was missing or wrong.
        forged_dropped = 169, "receiver forged dropped";
        /// BEHIND_RETAINED frames received.
        behind_retained_received = 170, "receiver behind-retained received";
        /// Datagrams for another stream or a session without an image.
        unknown_stream_dropped = 171, "receiver unknown stream or session dropped";
        /// Images created.
        images = 172, "receiver images";
        /// Receive calls that failed with an unexpected error.
        recv_errors = 173, "receiver recv errors";
        /// Commit-position frames received.
        commit_frames_received = 174, "receiver commit frames received";
        /// Status messages, NAKs and acknowledgements that could not be sent.
        feedback_send_failures = 175, "receiver feedback send failures";
        /// Acknowledgements (append positions) sent to the leader.
        acknowledgements_sent = 176, "receiver acknowledgements sent";
    }

    /// The consensus agent (the append stage and quorum commit on the leader).
    consensus: ConsensusStats {
        /// The commit position: what the state machine may apply up to.
        commit_position = TYPE_COMMIT_POSITION, "consensus commit position";
        /// The leader's append position.
        append_position = 200, "consensus append position";
        /// Client messages appended.
        messages_appended = 201, "consensus messages appended";
        /// Client messages refused by the log (longer than the largest message).
        messages_rejected = 202, "consensus messages rejected";
        /// Duty cycles on which the log was full and ingress had to wait.
        back_pressure = 203, "consensus back pressure";
        /// Commit-position frames handed to the Sender.
        commit_frames = 204, "consensus commit frames";
    }

    /// The consensus agent's elections: frames on the consensus endpoint, role changes, what was dropped.
    election: ElectionStats {
        /// Frames received on the consensus endpoint.
        frames_received = 400, "election frames received";
        /// Frames sent from the consensus endpoint (once per recipient).
        frames_sent = 401, "election frames sent";
        /// Frames from an address that is not a member's consensus endpoint, or forged, or naming another
        /// member than the one at their source.
        foreign_dropped = 402, "election frames from non-members dropped";
        /// Frames that do not decode.
        malformed_dropped = 403, "election frames malformed";
        /// Changes of role, term or known leader.
        role_changes = 404, "election role changes";
        /// The leadership term this node is in.
        leadership_term = 405, "election leadership term";
        /// Client messages in the ingress ring when this node stopped leading: dropped, never appended.
        ingress_dropped = 406, "election ingress dropped on step-down";
        /// Outputs the consensus core refused (an invariant it was asked to break).
        core_errors = 407, "election refused outputs";
        /// Frames of an older term, repeated, or out of place: dropped by the core.
        stale_dropped = 408, "election stale or duplicate dropped";
        /// Canvass and vote requests from a member configured with another member list: refused.
        refused_membership = 409, "election other member list refused";
        /// Elections this node stood in as a candidate.
        elections = 410, "election elections";
        /// This node's member id (set at start): what scrapers label its counters with.
        member_id = 412, "election member id";
        /// This node's role: 0 follower, 1 canvass, 2 candidate, 3 leader.
        role = 413, "election role";
        /// The leader this node knows of in its term; -1 while it knows none.
        leader_member_id = 414, "election leader member id";
        /// The id of the configuration in effect on this node (0: the initial one; one more per change).
        configuration_id = 415, "election configuration id";
        /// Truncations of this node's log (bytes it held that were never committed).
        truncations = 411, "election truncations";
        /// The end of the log this node held before its recording was found damaged below it, while it
        /// repairs (it neither stands nor votes for a less up-to-date log); 0 otherwise.
        repairing_to = 419, "election repairing to";
        /// Administrative commands taken over the network (their operator-key tag verified).
        admin_taken = 416, "election admin commands taken over the network";
        /// Administrative frames dropped: a tag that does not verify, a replay, malformed, of an unknown
        /// version, or sent to a member without an operator key (answered with why).
        admin_refused = 417, "election admin frames refused";
        /// Introductions of this member's leader sent to a member that canvassed it (see
        /// `cluster::introduction`).
        introductions_sent = 420, "election leader introductions sent";
        /// Leaders' endpoints learnt from another member's introduction (this member knew none of them).
        introductions_taken = 421, "election leader introductions taken";
    }

    /// The node's role-specific counters outside the agents.
    membership: MembershipStats {
        /// Acknowledgements the leader refused (another log, or a follower speaking for another).
        acknowledgements_refused = 301, "leader acknowledgements refused";
        /// The commit position a follower has learned.
        follower_commit_position = 302, "follower commit position";
    }

    /// The recorder: the log on disk (every node allocates them; they stay 0 with the in-memory log).
    recorder: RecorderStats {
        /// The position recorded up to (written to the segment files).
        position = 500, "recorder position";
        /// The position made durable: under `batch`, what `fdatasync` covered; under `none`, as `position`.
        synced_position = 501, "recorder synced position";
        /// Bytes of log recorded.
        bytes = 502, "recorder bytes";
        /// Frames recorded (messages and term-start markers).
        frames = 503, "recorder frames";
        /// `fdatasync` calls made for the recording (group commits under `batch`).
        fsyncs = 504, "recorder fsyncs";
        /// Cuts of the recording back to where this member's log agrees with a new leader's.
        truncations = 505, "recorder truncations";
        /// Bytes found torn or damaged at the end of the last segment at start, and cut.
        torn_bytes = 506, "recorder torn bytes cut at start";
        /// Segments deleted below the oldest snapshot kept.
        segments_deleted = 507, "recorder segments deleted";
        /// Where the recording starts (moves up as segments are deleted).
        start_position = 508, "recorder start position";
        /// Catch-ups this member made from its leader's recording (a snapshot first, or not).
        catch_ups = 509, "recorder catch-ups made";
        /// Catch-ups that failed (the leader refused, went away or sent what does not verify); retried.
        catch_ups_failed = 510, "recorder catch-ups failed";
        /// Catch-ups this member served to others from its recording.
        catch_ups_served = 511, "recorder catch-ups served";
        /// Catch-up connections refused: not from a member's address, of another cluster, naming a member
        /// not at its address, without a proof of the catch-up key, or for a position not held.
        catch_ups_refused = 512, "recorder catch-ups refused";
        /// Catch-up connections closed for not proving themselves in time, for moving nothing for too
        /// long, or evicted by a newer handshake.
        catch_ups_timed_out = 513, "recorder catch-ups timed out";
        /// Write calls to the segment files (one per block).
        writes = 514, "recorder write calls";
        /// Nanoseconds computing block checksums (wall time).
        checksum_ns = 515, "recorder checksum ns";
        /// Nanoseconds in write calls to the segment files (wall time: the copy into the page cache).
        write_ns = 516, "recorder write ns";
        /// Nanoseconds in `fdatasync` calls of group commits (wall time, on whichever thread makes them).
        sync_ns = 517, "recorder fsync ns";
        /// Bytes of zeros written ahead of the blocks (under `batch` while syncs are small, so that the
        /// blocks' syncs change no file length): each is written to the disk twice.
        zeros_ahead = 518, "recorder zeros written ahead";
    }
    /// The application's side of the node: what its state machine (or reader) has consumed, and the
    /// newest snapshot it has.
    state: StateStats {
        /// Where the last committed message handed to the application ends (`Node::applied_position`):
        /// set as it polls, and at a restore (to the snapshot's position).
        applied_position = 700, "state applied position";
        /// The position of the newest snapshot this member took, restored at start or loaded from a
        /// catch-up's install; 0 while it has none.
        snapshot_position = 701, "state snapshot position";
    }
    /// Remote clients: a member's client endpoint and its sessions' answers.
    clients: ClientStats {
        /// Client datagrams received.
        datagrams_received = 600, "client datagrams received";
        /// Client records received.
        records_received = 601, "client records received";
        /// Client datagrams dropped as malformed or foreign (another protocol or version), and records of
        /// no known kind.
        malformed_dropped = 602, "client datagrams malformed";
        /// Client datagrams dropped for coming from an address outside `clients.allow`.
        address_refused = 603, "client datagrams from refused addresses";
        /// Records for a session this leader does not know, answered "not connected".
        unknown_session = 604, "client records of unknown sessions";
        /// Records for a session from another address than its own, dropped.
        source_mismatch = 605, "client records from another address";
        /// Session opens appended to the log.
        sessions_opened = 606, "client sessions opened";
        /// Session opens refused (`clients.max_sessions` reached).
        sessions_refused = 607, "client sessions refused";
        /// Client messages appended to the log.
        messages_appended = 608, "client messages appended";
        /// Messages refused for being further ahead than `clients.window`.
        window_exceeded = 609, "client messages past the window";
        /// Gaps found in a session's messages, each answered with a NAK.
        gaps = 610, "client message gaps";
        /// Client records not appended because the log had no room.
        back_pressured = 611, "client records back-pressured";
        /// Redirects sent by a member that does not lead.
        redirects = 612, "client redirects";
        /// Egress datagrams sent to clients.
        egress_datagrams = 613, "client egress datagrams";
        /// Egress records sent to clients.
        egress_records = 614, "client egress records";
        /// Egress records dropped: the egress ring was full, or the session had no address here.
        egress_dropped = 615, "client egress dropped";
        /// Sessions this member's client endpoint holds (on the leader).
        connections = 616, "client connections";
        /// Resent messages answered as duplicates (applied before, not again).
        duplicates = 617, "client duplicates";
        /// Responses longer than an egress record can carry, not sent (the commit is).
        responses_too_long = 618, "client responses too long";
        /// Client datagrams dropped before their records were read: a tag that is missing or wrong (not the
        /// session's token, or no client key the cluster has).
        forged_dropped = 619, "client datagrams forged";
        /// Client datagrams of a session dropped for a sequence number already seen (a replay).
        replayed_dropped = 620, "client datagrams replayed";
        /// Challenges and cookies sent: a session's datagram came from an address that is not the
        /// session's, or an open came without a good cookie of its address.
        challenges_sent = 621, "client challenges sent";
        /// Sessions moved to a new address whose client answered a challenge (the old address is told).
        displaced = 622, "client sessions displaced";
        /// Opens, reconnects and challenges refused for an address past `clients.opens_per_second`.
        rate_limited = 623, "client opens rate-limited";
        /// Opens and reconnects refused for an address holding `clients.max_sessions_per_address`, and opens
        /// for a network holding `clients.max_sessions_per_prefix`.
        address_sessions_refused = 624, "client sessions refused per address";
        /// Receive calls on the client endpoint that found datagrams (each a `recvmmsg` of up to 16): with
        /// `datagrams_received`, how well the endpoint's reads are batched.
        receive_calls = 625, "client receive calls";
        /// Opens and messages refused while an operator suspended the cluster (`qc-cluster suspend`).
        suspended_refused = 626, "client records refused while suspended";
        /// Sessions closed to let a client of another address in: the endpoint was full, and their address
        /// held at least two more sessions than the one asking.
        evicted = 627, "client sessions evicted";
    }
    /// Log files: the spare each member keeps ready so that a new term (its leader's log, a follower's
    /// image) need not make one in its path.
    log_files: LogFileStats {
        /// 1 while a spare log file is ready for the next term, 0 while none is (taken by a term, and the
        /// next not made yet: a term begun now would make its own). A tool waiting for a member to be
        /// settled after a term change waits for 1.
        spare_ready = 800, "log spare ready";
        /// Spare log files made, reserved and written (at start on the consensus thread, then off it).
        spares_made = 801, "log spares made";
        /// Terms that found no spare ready (a leader's log or a follower's image): made in the term's
        /// path, tens of milliseconds for a large log.
        terms_without_spare = 802, "log terms begun without a spare";
    }
}

/// One kind of node counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterKind {
    /// The type id its counter is allocated with.
    pub type_id: i32,
    /// A stable name for scripts: the typed reader that reads it, `sender.naks_received` for
    /// `stats.sender().naks_received()`.
    pub key: &'static str,
    /// The label its counter carries.
    pub label: &'static str,
}

impl CounterKind {
    /// The kind whose counters have `type_id`, if a node allocates one.
    pub fn of_type(type_id: i32) -> Option<&'static CounterKind> {
        CATALOGUE.iter().find(|kind| kind.type_id == type_id)
    }
}

/// A node's counters as read at one instant (or the difference of two readings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    counters: Vec<CounterSnapshot>,
}

impl Stats {
    /// Every counter `reader` lists, now.
    pub fn read(reader: &CountersReader) -> Self {
        Self { counters: reader.snapshot() }
    }

    /// Every counter, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &CounterSnapshot> {
        self.counters.iter()
    }

    /// The leader's record of how far follower `member` has acknowledged the log, if this node leads
    /// and `member` follows.
    pub fn ack_position(&self, member: i32) -> Option<i64> {
        self.counters
            .iter()
            .find(|c| c.type_id == TYPE_ACK_POSITION && c.owner_id == i64::from(member))
            .map(|c| c.value)
    }

    /// The lowest position the followers have acknowledged (what the slowest follower has), on the leader.
    pub fn slowest_ack_position(&self) -> Option<i64> {
        self.counters.iter().filter(|c| c.type_id == TYPE_ACK_POSITION).map(|c| c.value).min()
    }

    /// The value of the counter labelled `label`, 0 when there is none: for counters whose label names
    /// their thread (`"<thread> duty cycles"`, of a layout's threads), and for an application's own.
    pub fn labelled(&self, label: &str) -> i64 {
        self.counters.iter().find(|c| c.label == label).map_or(0, |c| c.value)
    }

    /// What changed from `earlier` to this reading, counter by counter (counters `earlier` lacks count
    /// from 0).
    pub fn since(&self, earlier: &Stats) -> Stats {
        let counters = self
            .counters
            .iter()
            .map(|c| CounterSnapshot { value: c.value - earlier.value_of(c.id), ..c.clone() })
            .collect();
        Stats { counters }
    }

    /// Adds `window` (a [`Stats::since`] delta) to this sum of deltas, counter by counter.
    pub fn accumulate(&mut self, window: &Stats) {
        for c in &window.counters {
            match self.counters.iter_mut().find(|mine| mine.id == c.id) {
                Some(mine) => mine.value += c.value,
                None => self.counters.push(c.clone()),
            }
        }
    }

    fn value_of(&self, id: i32) -> i64 {
        self.counters.iter().find(|c| c.id == id).map_or(0, |c| c.value)
    }

    /// The value of the node's one counter of `type_id` (0 when the node has none).
    fn of_type(&self, type_id: i32) -> i64 {
        self.counters.iter().find(|c| c.type_id == type_id).map_or(0, |c| c.value)
    }
}

/// The type id of an agent counter, from the suffix [`AgentCounters`](crate::agent::AgentCounters) gives it.
pub fn agent_type_of(what: &str) -> i32 {
    match what {
        "duty cycles" => TYPE_AGENT_DUTY_CYCLES,
        "work" => TYPE_AGENT_WORK,
        "idle cycles" => TYPE_AGENT_IDLE_CYCLES,
        "max cycle ns" => TYPE_AGENT_MAX_CYCLE_NS,
        "work ns" => TYPE_AGENT_WORK_NS,
        _ => TYPE_AGENT_OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_and_labels_are_unique_and_below_the_applications_range() {
        let mut ids: Vec<i32> = CATALOGUE.iter().map(|kind| kind.type_id).collect();
        let mut labels: Vec<&str> = CATALOGUE.iter().map(|kind| kind.label).collect();
        ids.sort_unstable();
        ids.dedup();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!((ids.len(), labels.len()), (CATALOGUE.len(), CATALOGUE.len()));
        assert!(ids.iter().all(|&id| id > TYPE_AGENT_OTHER && id < crate::shm::counters::TYPE_USER_MIN));
        assert_ne!(TYPE_ACK_POSITION, crate::shm::counters::TYPE_SYSTEM);
        assert!(!ids.contains(&TYPE_ACK_POSITION));
    }

    #[test]
    fn deltas_follow_counters_by_id_and_add_up_over_windows() {
        let manager = crate::shm::counters::CountersManager::anonymous(8).unwrap();
        let kind = kinds::sender::naks_received;
        let naks = manager.allocate(kind.label, kind.type_id).unwrap();
        let ack = manager.allocate_owned("ack position of member 2", TYPE_ACK_POSITION, 2).unwrap();
        naks.set(5);
        ack.set(4096);
        let first = Stats::read(&manager.reader());
        naks.add(3);
        let second = Stats::read(&manager.reader());
        assert_eq!((second.sender().naks_received(), second.ack_position(2)), (8, Some(4096)));
        assert_eq!(second.ack_position(1), None);
        let mut sum = Stats::default();
        sum.accumulate(&second.since(&first));
        sum.accumulate(&second.since(&first));
        assert_eq!(sum.sender().naks_received(), 6);
        assert_eq!(sum.labelled("sender NAKs received"), 6);
        assert_eq!(sum.receiver().datagrams(), 0, "a counter the node lacks reads 0");
        let kind = CounterKind::of_type(kinds::sender::naks_received.type_id).unwrap();
        assert_eq!((kind.key, kind.label), ("sender.naks_received", "sender NAKs received"));
    }
}
