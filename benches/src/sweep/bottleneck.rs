//! Which stage saturated first, from the counters of a saturating run.
//!
//! The stages, in pipeline order: the load generator (the harness thread offering into the leader's
//! ingress), the consensus append (the leader's consensus agent copying the ingress into the log), the
//! Sender (the leader's sender thread), the receivers (the followers). The Sender's own time says first
//! whether it is the bottleneck: a saturated Sender spends nearly all its time in duty cycles that send.
//! When it does not, its cycles that sent nothing say what it waited for: a closed flow-control window
//! (the followers), or nothing to send (a stage upstream, which back pressure then names: a full ingress
//! means the load generator outruns the append stage; a back-pressured log with the Sender caught up
//! means the log waited on the commit, which waits on the followers' acknowledgements).

use std::fmt;

/// A stage of the replication pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The load generator could not offer faster (the ingress was rarely full).
    Load,
    /// The leader's consensus agent (append from ingress into the log).
    Append,
    /// The leader's Sender: the model's bottleneck.
    Sender,
    /// The followers' receivers (flow control held the Sender back).
    Receiver,
}

impl Stage {
    /// The name the report uses: `load`, `append`, `sender`, `receiver`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::Append => "append",
            Self::Sender => "sender",
            Self::Receiver => "receiver",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The counter evidence of one saturating run, as fractions and rates over its windows.
///
/// The queues are mean byte gaps between the leader's log positions, sampled through the windows: at
/// saturation the queue builds in front of the slowest stage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageEvidence {
    /// Fraction of the harness's offer bursts that found the ingress full.
    pub ingress_full: f64,
    /// Fraction of the leader consensus thread's duty cycles that did no work.
    pub consensus_idle: f64,
    /// Fraction of the consensus agent's duty cycles whose append met a full log window.
    pub log_back_pressured: f64,
    /// Fraction of the leader sender thread's duty cycles that did no work.
    pub sender_idle: f64,
    /// Fraction of the window time the leader's sender thread spent in duty cycles that did work.
    pub sender_busy: f64,
    /// The Sender's duty cycles per second that sent nothing because it had caught up with the appender.
    pub sender_caught_up_per_s: f64,
    /// The Sender's duty cycles per second that sent nothing because the flow-control window was closed
    /// with data waiting.
    pub sender_window_closed_per_s: f64,
    /// The Sender's data datagrams per second (each follower's copy counted) over the probe's S for its
    /// mode and MTU: the share of S the log took.
    pub sender_share: f64,
    /// Fraction of samples in which data waited but the flow-control window was closed: the followers held
    /// the Sender back (what they had received, or their log's bound past what they had applied).
    pub window_closed: f64,
    /// Fraction of the busier follower thread's duty cycles that did no work.
    pub receiver_idle: f64,
    /// NAKs the leader's Sender received per second: loss recovery, which stalls the followers' windows.
    pub naks_per_s: f64,
    /// Mean bytes appended but not yet sent: the queue in front of the Sender.
    pub sender_queue: f64,
    /// Mean bytes sent but not yet committed: the queue in the network and the followers.
    pub receiver_queue: f64,
    /// Mean bytes committed but not yet applied by the harness: the queue in front of the load generator's
    /// own apply loop.
    pub apply_queue: f64,
    /// The harness thread also runs the leader's consensus agent and both followers (the layout of a host
    /// with fewer than 4 cores), so a saturated harness is all of those stages at once.
    pub harness_runs_agents: bool,
}

/// Above this fraction of bursts finding the ingress full, the load generator is not the bottleneck.
pub const INGRESS_FULL: f64 = 0.05;
/// Above this fraction of consensus cycles back-pressured, the log is held back downstream of the append.
pub const LOG_BACK_PRESSURED: f64 = 0.02;
/// Above this fraction of samples with the flow-control window closed while data waited, the Sender
/// spent too much of the run held back to be the bottleneck: the followers' consumption was.
pub const WINDOW_CLOSED: f64 = 0.25;

/// At or above this fraction of its time in duty cycles that sent, the Sender counts as saturated.
pub const SENDER_BUSY_SATURATED: f64 = 0.9;

/// The stage that saturated first, and the evidence as one line.
#[derive(Clone, Debug, PartialEq)]
pub struct Bottleneck {
    /// The stage.
    pub stage: Stage,
    /// e.g. `sender: data waited for the Sender with its window open (ingress full in ...)`: the stage,
    /// why, then the evidence.
    pub text: String,
}

/// Names the bottleneck stage from `e`:
///
/// 1. the Sender was busy at least [`SENDER_BUSY_SATURATED`] of the time → `sender`;
/// 2. else, if more of its empty cycles met a closed flow-control window than found nothing to send, or
///    the window was closed in more than [`WINDOW_CLOSED`] of the samples → `receiver`;
/// 3. else the Sender caught up with the appender, and upstream is named: the ingress was rarely full →
///    `load` (the load generator, or on a small host the harness thread that also runs the consensus
///    append and the followers); the ingress filled but the log was rarely back-pressured → `append`;
///    the log was back-pressured (its limit is half a term past the leader's applied position) → the
///    larger queue behind the Sender: sent but uncommitted → `receiver`, committed but unapplied → `load`
///    (the harness's apply loop).
pub fn classify(e: &StageEvidence) -> Bottleneck {
    let (stage, why) = if e.sender_busy >= SENDER_BUSY_SATURATED {
        (Stage::Sender, "data waited for the Sender, busy sending nearly all the time")
    } else if e.sender_window_closed_per_s > e.sender_caught_up_per_s || e.window_closed > WINDOW_CLOSED {
        (Stage::Receiver, "the Sender waited on the followers' flow-control window")
    } else if e.ingress_full < INGRESS_FULL && e.harness_runs_agents {
        (
            Stage::Load,
            "the harness thread, which on this host also runs the consensus append and both followers, could not \
             keep the log ahead of the Sender",
        )
    } else if e.ingress_full < INGRESS_FULL {
        (Stage::Load, "the load generator could not fill the ingress")
    } else if e.log_back_pressured < LOG_BACK_PRESSURED {
        (Stage::Append, "the consensus agent could not drain the ingress into the log as fast as the Sender sent it")
    } else if e.receiver_queue >= e.apply_queue {
        (Stage::Receiver, "the log waited for the commit, which waited for the followers' acknowledgements")
    } else {
        (Stage::Load, "the log waited for the harness to apply committed entries")
    };
    // On a small host the followers are no stage of their own: they lag because the thread they run on
    // also offers the load, appends and applies, and the reader is told so.
    let shared = if stage == Stage::Receiver && e.harness_runs_agents {
        ", and the followers run on the harness thread, which also offers the load, runs the consensus append \
         and applies on every node"
    } else {
        ""
    };
    Bottleneck { stage, text: format!("{stage}: {why}{shared} ({})", describe(e)) }
}

/// The counter evidence of one saturating run in the cluster bench's split layout ([`super::cluster::Layout::split`]):
/// the load generator and the whole leader (consensus, Sender, Receiver) run on one harness thread, every
/// follower on a second. The Sender has no thread of its own there, so its busy time is not counted apart;
/// what it sent is set against the S probed for its datagram size and follower count instead.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplitEvidence {
    /// Followers each log datagram goes to (the model's `D`).
    pub followers: usize,
    /// The Sender's data datagrams per second (each follower's copy counted) over the S probed for `D`
    /// destinations at its mode and MTU.
    pub sender_share: f64,
    /// The Sender's duty cycles per second that sent nothing with the flow-control window closed and data
    /// waiting.
    pub window_closed_per_s: f64,
    /// The Sender's duty cycles per second that sent nothing because it had caught up with the appender.
    pub caught_up_per_s: f64,
    /// Fraction of the load generator's offer bursts that found the ingress full.
    pub ingress_full: f64,
    /// The consensus agent's appends that met a full log window, per loop of the leader's thread.
    pub log_back_pressured: f64,
    /// Fraction of the leader's thread's loops that found no work.
    pub leader_thread_idle: f64,
    /// Fraction of the followers' thread's loops that found no work.
    pub followers_thread_idle: f64,
}

/// Names the stage that saturated first in the split layout, from `e`, as [`classify`] does where the
/// Sender's own time is not counted:
///
/// 1. the Sender put out at least [`SENDER_BUSY_SATURATED`] of S → `sender` (the model's stage: its
///    prediction applies);
/// 2. else, if more of the Sender's empty cycles met a closed flow-control window than found nothing to
///    send → `receiver`: the followers, all on one thread, could not take the log as fast as the Sender
///    could send it;
/// 3. else the Sender caught up with the log: a log back-pressured in more than [`LOG_BACK_PRESSURED`]
///    of the leader's loops waited for the commit, so for the followers' acknowledgements → `receiver`
///    (the text says whether the followers' thread was busy, or idle in most loops, when the
///    acknowledgements' cadence rather than the followers' CPU held the commit); an ingress rarely full →
///    `load` (the load generator, on the leader's thread); else → `append`.
///
/// Only under 1 is the model's `(S - C) / D x M_pkt` the figure to compare with.
pub fn classify_split(e: &SplitEvidence) -> Bottleneck {
    let followers = e.followers;
    let (stage, why) = if e.sender_share >= SENDER_BUSY_SATURATED {
        (Stage::Sender, "the Sender put out nearly S: the model's stage".to_string())
    } else if e.window_closed_per_s > e.caught_up_per_s {
        (
            Stage::Receiver,
            format!(
                "the {followers} followers, all on one thread, saturated before the Sender: it waited on their \
                 flow-control window"
            ),
        )
    } else if e.log_back_pressured > LOG_BACK_PRESSURED {
        let held_by = if e.followers_thread_idle >= 0.5 {
            ", though their thread found no work in most loops: the acknowledgements' cadence, not the followers' \
             CPU, held the commit"
        } else {
            ", all on one thread"
        };
        (
            Stage::Receiver,
            format!(
                "the Sender caught up with a log that waited for the commit, which waited for the acknowledgements \
                 of the {followers} followers{held_by}"
            ),
        )
    } else if e.ingress_full < INGRESS_FULL {
        (Stage::Load, "the load generator, on the leader's thread, could not keep the Sender busy".to_string())
    } else {
        (
            Stage::Append,
            "the consensus append, on the leader's thread, could not drain the ingress as fast as the Sender sent"
                .to_string(),
        )
    };
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let text = format!(
        "{stage}: {why} (sender data at {} of S for D = {followers}; its empty cycles {:.0}/s window closed, {:.0}/s \
         caught up; ingress full in {} of bursts; log back-pressured in {} of the leader's loops; idle loops: \
         leader's thread {}, followers' thread {})",
        pct(e.sender_share),
        e.window_closed_per_s,
        e.caught_up_per_s,
        pct(e.ingress_full),
        pct(e.log_back_pressured),
        pct(e.leader_thread_idle),
        pct(e.followers_thread_idle)
    );
    Bottleneck { stage, text }
}

/// The evidence as one line.
fn describe(e: &StageEvidence) -> String {
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let kib = |x: f64| format!("{:.0} KiB", x / 1024.0);
    format!(
        "ingress full in {} of bursts; log back-pressured in {} of consensus cycles; queues: unsent {}, uncommitted {}, \
         unapplied {}; flow-control window closed in {} of samples; {:.0} NAKs/s; idle: consensus {}, sender {}, \
         followers {}; sender busy {} of the time, empty cycles {:.0}/s caught up and {:.0}/s window closed; sender \
         data at {} of S",
        pct(e.ingress_full),
        pct(e.log_back_pressured),
        kib(e.sender_queue),
        kib(e.receiver_queue),
        kib(e.apply_queue),
        pct(e.window_closed),
        e.naks_per_s,
        pct(e.consensus_idle),
        pct(e.sender_idle),
        pct(e.receiver_idle),
        pct(e.sender_busy),
        e.sender_caught_up_per_s,
        e.sender_window_closed_per_s,
        pct(e.sender_share)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> StageEvidence {
        StageEvidence {
            ingress_full: 0.9,
            consensus_idle: 0.5,
            log_back_pressured: 0.4,
            sender_idle: 0.02,
            sender_busy: 0.97,
            sender_caught_up_per_s: 100.0,
            sender_window_closed_per_s: 0.0,
            sender_share: 0.97,
            window_closed: 0.0,
            naks_per_s: 0.0,
            receiver_idle: 0.4,
            sender_queue: 8.0 * 1024.0 * 1024.0,
            receiver_queue: 64.0 * 1024.0,
            apply_queue: 1024.0,
            harness_runs_agents: false,
        }
    }

    #[test]
    fn a_queue_in_front_of_a_busy_sender_names_the_sender() {
        let b = classify(&base());
        assert_eq!(b.stage, Stage::Sender);
        assert!(b.text.starts_with("sender: data waited for the Sender, busy sending nearly all the time (ingress full in 90% of bursts; log back-pressured in 40%"), "{}", b.text);
        assert!(
            b.text.contains("sender busy 97% of the time, empty cycles 100/s caught up and 0/s window closed"),
            "{}",
            b.text
        );
        assert!(b.text.contains("unsent 8192 KiB, uncommitted 64 KiB, unapplied 1 KiB"), "{}", b.text);
        assert!(b.text.contains("sender data at 97% of S"), "{}", b.text);
    }

    /// The Sender waited (busy 50%) having caught up with the appender.
    fn caught_up() -> StageEvidence {
        StageEvidence { sender_busy: 0.5, sender_caught_up_per_s: 50_000.0, ..base() }
    }

    #[test]
    fn an_ingress_that_never_fills_blames_the_load_generator() {
        assert_eq!(classify(&StageEvidence { ingress_full: 0.01, ..caught_up() }).stage, Stage::Load);
        assert_eq!(
            classify(&StageEvidence { ingress_full: 0.01, ..base() }).stage,
            Stage::Sender,
            "a busy Sender is the bottleneck whatever the load did"
        );
    }

    #[test]
    fn a_full_ingress_without_log_back_pressure_blames_the_append() {
        assert_eq!(classify(&StageEvidence { log_back_pressured: 0.0, ..caught_up() }).stage, Stage::Append);
    }

    #[test]
    fn a_sender_that_waited_names_what_it_waited_for() {
        let e = StageEvidence { sender_window_closed_per_s: 60_000.0, ..caught_up() };
        assert_eq!(classify(&e).stage, Stage::Receiver);
        assert!(classify(&e).text.starts_with("receiver: the Sender waited on the followers' flow-control window"));
        let e = StageEvidence { window_closed: 0.3, ..caught_up() };
        assert_eq!(classify(&e).stage, Stage::Receiver, "the sampled window agrees");
        // Caught up with a back-pressured log: the log waited on the commit; the larger queue names why.
        let e = StageEvidence { receiver_queue: 9e6, ..caught_up() };
        assert_eq!(classify(&e).stage, Stage::Receiver);
        let e = StageEvidence { apply_queue: 9e6, ..caught_up() };
        assert_eq!(classify(&e).stage, Stage::Load);
        let e = StageEvidence { sender_busy: 0.95, sender_window_closed_per_s: 60_000.0, ..base() };
        assert_eq!(classify(&e).stage, Stage::Sender, "empty cycles are short: a Sender busy 95% is saturated");
    }

    #[test]
    fn the_split_layout_names_the_sender_only_when_it_put_out_nearly_s() {
        let busy = SplitEvidence {
            followers: 4,
            sender_share: 0.95,
            window_closed_per_s: 9e4,
            caught_up_per_s: 10.0,
            ingress_full: 0.9,
            log_back_pressured: 0.5,
            leader_thread_idle: 0.0,
            followers_thread_idle: 0.0,
        };
        let b = classify_split(&busy);
        assert_eq!(b.stage, Stage::Sender);
        assert!(b.text.contains("sender data at 95% of S for D = 4"), "{}", b.text);
        let held = SplitEvidence { sender_share: 0.4, ..busy };
        let b = classify_split(&held);
        assert_eq!(b.stage, Stage::Receiver);
        assert!(
            b.text.starts_with("receiver: the 4 followers, all on one thread, saturated before the Sender"),
            "{}",
            b.text
        );
        // The Sender caught up: the log's back pressure, then the ingress, say what it waited for.
        let caught_up = SplitEvidence { window_closed_per_s: 5.0, caught_up_per_s: 7e4, ..held };
        let b = classify_split(&caught_up);
        assert_eq!(b.stage, Stage::Receiver);
        assert!(b.text.contains("waited for the commit") && b.text.contains("all on one thread"), "{}", b.text);
        let idle_followers = SplitEvidence { followers_thread_idle: 0.9, ..caught_up };
        let b = classify_split(&idle_followers);
        assert_eq!(b.stage, Stage::Receiver);
        assert!(b.text.contains("the acknowledgements' cadence, not the followers' CPU"), "{}", b.text);
        let free = SplitEvidence { log_back_pressured: 0.0, ..caught_up };
        assert_eq!(classify_split(&free).stage, Stage::Append);
        assert_eq!(classify_split(&SplitEvidence { ingress_full: 0.01, ..free }).stage, Stage::Load);
    }

    #[test]
    fn a_harness_that_runs_the_agents_is_named_as_such() {
        let b = classify(&StageEvidence { ingress_full: 0.0, harness_runs_agents: true, ..caught_up() });
        assert_eq!(b.stage, Stage::Load);
        assert!(b.text.contains("also runs the consensus append and both followers"), "{}", b.text);
        let e = StageEvidence { sender_window_closed_per_s: 60_000.0, harness_runs_agents: true, ..caught_up() };
        let b = classify(&e);
        assert_eq!(b.stage, Stage::Receiver);
        assert!(
            b.text.starts_with(
                "receiver: the Sender waited on the followers' flow-control window, and the followers run on the \
                 harness thread"
            ),
            "{}",
            b.text
        );
        let alone = classify(&StageEvidence { sender_window_closed_per_s: 60_000.0, ..caught_up() });
        assert!(!alone.text.contains("harness thread"), "followers with threads of their own: {}", alone.text);
    }
}
