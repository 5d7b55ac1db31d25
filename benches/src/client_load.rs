//! A load generator for a cluster's remote clients: drives one [`ClusterClient`] closed loop (a fixed
//! window of messages in flight) or open loop (a fixed rate, latency from each message's intended send
//! time, so a stall counts against every message it delays), and records offer-to-commit-acknowledgement
//! latency in an HDR histogram. `qc-client`, the client bench and the sweep's client option run it.
//!
//! Each message leads with its correlation id (8 bytes, little-endian); a service that answers with
//! those 8 bytes (qc-node does) has its responses checked against the message they answer.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quorumcast::{ClientOfferError, ClientStats, ClosedReason, ClusterClient, Event};
use quorumcast_testkit::fill_numbered;

use crate::hiccup::ProcessTimes;

/// What to offer.
#[derive(Clone, Debug)]
pub struct ClientLoad {
    /// Messages to have committed (at most, with a `duration`).
    pub messages: u64,
    /// Bytes of each (at least 8).
    pub msg_size: usize,
    /// Messages a second (open loop); `None`: closed loop, as fast as the window allows.
    pub rate: Option<f64>,
    /// Messages in flight at most.
    pub window: usize,
    /// Stop offering after this long, and end when everything offered is acknowledged (a closed loop
    /// that lasts a given time, whatever rate it finds).
    pub duration: Option<Duration>,
    /// Give up after this long.
    pub timeout: Duration,
    /// Messages before latency is recorded (the first connections, caches).
    pub warmup: u64,
    /// A process whose CPU time over the run is measured beside the client's own (the cluster's).
    pub cluster_pid: Option<u32>,
    /// On a duty cycle without work, block in [`ClusterClient::wait`] until an answer arrives or the
    /// next message is due (at most 1 ms), instead of calling the `idle` of [`drive`]. (A cycle that can
    /// offer nothing until an answer comes, a full window or everything offered, blocks either way.)
    pub wait: bool,
}

/// What a run measured.
#[derive(Debug)]
pub struct ClientRun {
    /// The session the messages went through (the same across a change of leader).
    pub session_id: u64,
    /// Messages offered (all of them, unless a `duration` ended the offers first).
    pub offered: u64,
    /// Messages reported committed.
    pub committed: u64,
    /// Of those, found committed by a resend (after a loss or a change of leader).
    pub duplicates: u64,
    /// Messages reported not applied (their session closed).
    pub not_applied: u64,
    /// Responses that matched the message they answered.
    pub responses: u64,
    /// Responses that did not.
    pub bad_responses: u64,
    /// Times the client connected to a leader after the first.
    pub reconnects: u64,
    /// From the first offer to the last commit acknowledgement.
    pub elapsed: Duration,
    /// Offer (or intended offer) to commit acknowledgement, in nanoseconds, after the warm-up.
    pub latency_ns: Histogram<u64>,
    /// Actual offer to commit acknowledgement, in nanoseconds, after the warm-up: the same as
    /// `latency_ns` closed loop; open loop, without the time a message waited behind its intended send
    /// time (a full window, a slow duty cycle).
    pub service_ns: Histogram<u64>,
    /// Correlation ids reported committed more than once (must stay 0).
    pub reported_twice: u64,
    /// This process's CPU time over the run (user + system, every thread), in the kernel's ticks
    /// ([`ProcessTimes::seconds`]); `None` where `/proc` cannot be read.
    pub cpu_ticks: Option<u64>,
    /// The [`ClientLoad::cluster_pid`] process's over the same time.
    pub cluster_cpu_ticks: Option<u64>,
    /// What the client did over the run (its counters' change).
    pub stats: ClientStats,
}

impl ClientRun {
    /// Committed messages a second over the run.
    pub fn rate(&self) -> f64 {
        self.committed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The longest [`ClientLoad::wait`] blocks at a time (the run's deadline and end of offers are checked
/// between).
const MAX_WAIT_NS: u64 = 1_000_000;

/// Runs `load` through `client`, which must be connected; `idle` is called on a duty cycle without work
/// that could offer (open loop, before the next message is due); one that cannot offer until an answer
/// comes blocks on the client's socket ([`ClusterClient::wait`]).
pub fn drive(client: &mut ClusterClient, load: &ClientLoad, mut idle: impl FnMut()) -> Result<ClientRun, String> {
    let session_id = client.session_id().ok_or("the client is not connected")?;
    let mut message = vec![0u8; load.msg_size.max(8)];
    // Intended send times of the messages in flight, by correlation id modulo the ring's size.
    let ring = load.window.next_power_of_two().max(1);
    let mut sent_at = vec![0u64; ring];
    let mut offered_at = vec![0u64; ring];
    let mut reported = vec![false; ring];
    let mut run = ClientRun {
        session_id,
        offered: 0,
        committed: 0,
        duplicates: 0,
        not_applied: 0,
        responses: 0,
        bad_responses: 0,
        reconnects: 0,
        elapsed: Duration::ZERO,
        latency_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
        service_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
        reported_twice: 0,
        cpu_ticks: None,
        cluster_cpu_ticks: None,
        stats: ClientStats::default(),
    };
    let cluster_times = || load.cluster_pid.and_then(ProcessTimes::read_pid);
    let (cpu_before, cluster_before, stats_before) = (ProcessTimes::read(), cluster_times(), client.stats());
    let start = Instant::now();
    let deadline = start + load.timeout;
    let ns = |at: Instant| at.duration_since(start).as_nanos() as u64;
    let interval_ns = load.rate.map(|r| 1e9 / r.max(1e-3));
    let stop_offering = load.duration.map(|d| start + d);
    let mut offered = 0u64;
    let mut target = load.messages;
    while run.committed + run.not_applied < target {
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "timed out: {} of {target} committed, {} in flight",
                run.committed,
                client.in_flight()
            ));
        }
        if stop_offering.is_some_and(|at| now >= at) {
            target = target.min(offered);
        }
        let mut work = 0;
        // One clock read for the offers of this cycle (they take well under a microsecond each): the
        // clock was the load generator's largest cost after the sends.
        let actual = ns(now);
        while offered < target && client.in_flight() < load.window {
            let intended = match interval_ns {
                Some(interval) => {
                    let at = (offered as f64 * interval) as u64;
                    if at > actual {
                        break;
                    }
                    at
                }
                None => actual,
            };
            fill_numbered(&mut message, client.next_correlation_id());
            match client.offer(&message) {
                Ok(correlation_id) => {
                    let slot = (correlation_id as usize) & (ring - 1);
                    sent_at[slot] = intended;
                    offered_at[slot] = actual;
                    reported[slot] = false;
                    offered += 1;
                    work += 1;
                }
                Err(ClientOfferError::NotConnected | ClientOfferError::BackPressured) => break,
                Err(e) => return Err(format!("offer: {e}")),
            }
        }
        // Acknowledgements are timed when the poll hands out the first of them (after the datagram was
        // read), once per poll: each would cost a clock read, and one datagram holds many.
        let mut polled_at = None;
        let mut closed: Option<ClosedReason> = None;
        work += client.poll(|event| match event {
            Event::Committed { correlation_id, response, duplicate, .. } => {
                let now = *polled_at.get_or_insert_with(|| ns(Instant::now()));
                let slot = (correlation_id as usize) & (ring - 1);
                if std::mem::replace(&mut reported[slot], true) {
                    run.reported_twice += 1;
                    return;
                }
                run.committed += 1;
                run.duplicates += u64::from(duplicate);
                if !response.is_empty() {
                    if response.get(..8) == Some(&correlation_id.to_le_bytes()[..]) {
                        run.responses += 1;
                    } else {
                        run.bad_responses += 1;
                    }
                }
                if correlation_id > load.warmup {
                    let _ = run.latency_ns.record(now.saturating_sub(sent_at[slot]).max(1));
                    let _ = run.service_ns.record(now.saturating_sub(offered_at[slot]).max(1));
                }
            }
            // A message whose session moved to another holder of its token: not known applied here.
            Event::NotApplied { .. } | Event::OutcomeUnknown { .. } => run.not_applied += 1,
            Event::Connected { .. } => run.reconnects += 1,
            Event::SessionClosed { reason } => closed = Some(reason),
            _ => {}
        });
        if let Some(reason) = closed {
            // A closed session takes no more offers: say so now rather than wait out the timeout.
            return Err(format!(
                "the cluster closed the session ({reason:?}) after {} committed and {} not known applied, {} \
                 offered of {target}",
                run.committed, run.not_applied, offered
            ));
        }
        if work == 0 {
            let can_offer = offered < target && client.in_flight() < load.window;
            if !can_offer {
                // Nothing to do until an answer comes (a full window, or the last ones offered): block on
                // the socket, woken by the answer, rather than spin, whatever the idle strategy, so that
                // the CPU goes to the cluster.
                let _ = client.wait(Duration::from_nanos(MAX_WAIT_NS));
            } else if load.wait {
                // It can offer: wait until the next message is due (none in a closed loop).
                let until_ns = interval_ns
                    .map_or(0, |interval| ((offered as f64 * interval) as u64).saturating_sub(ns(Instant::now())));
                if until_ns > 0 {
                    let _ = client.wait(Duration::from_nanos(until_ns.min(MAX_WAIT_NS)));
                }
            } else {
                idle();
            }
        }
    }
    run.elapsed = start.elapsed();
    let since = |after: Option<ProcessTimes>, before: Option<ProcessTimes>| Some(after?.since(&before?).own);
    run.cpu_ticks = since(ProcessTimes::read(), cpu_before);
    run.cluster_cpu_ticks = since(cluster_times(), cluster_before);
    run.stats = stats_delta(&client.stats(), &stats_before);
    run.offered = offered;
    Ok(run)
}

/// What the client counted from `before` to `after`.
fn stats_delta(after: &ClientStats, before: &ClientStats) -> ClientStats {
    ClientStats {
        ask_rounds: after.ask_rounds - before.ask_rounds,
        asks: after.asks - before.asks,
        cookies: after.cookies - before.cookies,
        redirects_followed: after.redirects_followed - before.redirects_followed,
        members_learnt: after.members_learnt - before.members_learnt,
        datagrams_sent: after.datagrams_sent - before.datagrams_sent,
        messages_sent: after.messages_sent - before.messages_sent,
        datagrams_received: after.datagrams_received - before.datagrams_received,
        receive_calls: after.receive_calls - before.receive_calls,
        send_calls: after.send_calls - before.send_calls,
        pushes_duplicate: after.pushes_duplicate - before.pushes_duplicate,
        push_resends_asked: after.push_resends_asked - before.push_resends_asked,
    }
}

/// The run as lines of `key value` pairs: counts, rate, and its latency percentiles in microseconds (from
/// intended send time, then `service_us` from actual offer).
pub fn summary(run: &ClientRun) -> String {
    let h = &run.latency_ns;
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    let service = |q: f64| run.service_ns.value_at_quantile(q) as f64 / 1e3;
    format!(
        "session {} offered {} committed {} duplicates {} not_applied {} responses {} bad_responses {} \
         reported_twice {} reconnects {}\nrate {:.0} msg/s over {:.3} s\nlatency_us p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}\n\
         service_us p50 {:.1} p99 {:.1}",
        run.session_id,
        run.offered,
        run.committed,
        run.duplicates,
        run.not_applied,
        run.responses,
        run.bad_responses,
        run.reported_twice,
        run.reconnects,
        run.rate(),
        run.elapsed.as_secs_f64(),
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1e3,
        service(0.5),
        service(0.99)
    )
}
