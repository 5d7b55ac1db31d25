//! The service bench's part 2: the push service, the push clients' thread (a publisher and its
//! subscribers) and the harness side of a push run.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quorumcast::{ClientConfig, CloseReason, Cluster, ClusterClient, Entry, Event, Idle, Role, StateMachine};
use quorumcast_bench::bench::new_histogram;
use quorumcast_bench::hiccup::ProcessTimes;
use quorumcast_bench::sweep::cluster::LoadCluster;
use quorumcast_bench::sweep::remote::MAX_WINDOW;
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::shm::stats::Stats;

use crate::{epoch_ns, ns_between, read_words, Settings, MESSAGE, MTU, PUSH_LAG, PUSH_LAG_TOTAL, PUSH_SLOTS};

/// The leader's wall clock at each push, by publisher message number (0: not pushed yet).
struct PushTimes(Vec<AtomicI64>);

/// Subscribers and the pushes to them, replicated.
struct PushService {
    subscribers: BTreeSet<u64>,
    published: u64,
    pushes: u64,
    /// Pushes refused (a full backlog, a session closing): must stay 0 for the run to count.
    refused: u64,
    times: Option<Arc<PushTimes>>,
}

impl PushService {
    fn new(times: Option<Arc<PushTimes>>) -> Self {
        Self { subscribers: BTreeSet::new(), published: 0, pushes: 0, refused: 0, times }
    }
}

impl StateMachine for PushService {
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        let Some(client) = entry.client else {
            return;
        };
        match entry.payload.first() {
            Some(b'S') => {
                self.subscribers.insert(client.session_id);
            }
            Some(b'P') if entry.payload.len() >= 9 => {
                let k = u64::from_le_bytes(entry.payload[1..9].try_into().expect("8 bytes"));
                if let (Some(times), Role::Leader) = (&self.times, cluster.role()) {
                    // Stored before the pushes are made (they are sent after this callback returns), so a
                    // subscriber that receives push k finds its time.
                    if let Some(slot) = times.0.get(k as usize) {
                        slot.store(epoch_ns(), Ordering::Release);
                    }
                }
                self.published += 1;
                for &session in &self.subscribers {
                    match cluster.push(session, entry.payload) {
                        Ok(_) => self.pushes += 1,
                        Err(_) => self.refused += 1,
                    }
                }
                // 8 bytes, far below `max_response_length`: never refused.
                let _ = cluster.respond(&k.to_le_bytes());
            }
            _ => {}
        }
    }

    fn on_session_close(&mut self, session_id: u64, _reason: CloseReason, _cluster: &mut Cluster<'_>) {
        self.subscribers.remove(&session_id);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        for word in [self.published, self.pushes, self.refused, self.subscribers.len() as u64] {
            writer.write_all(&word.to_le_bytes())?;
        }
        for id in &self.subscribers {
            writer.write_all(&id.to_le_bytes())?;
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let [published, pushes, refused, subscribers] = read_words(reader)?;
        (self.published, self.pushes, self.refused) = (published, pushes, refused);
        self.subscribers.clear();
        for _ in 0..subscribers {
            let [id] = read_words(reader)?;
            self.subscribers.insert(id);
        }
        Ok(())
    }
}

/// The push clients' thread's phases, which the harness thread follows to read the members' counters
/// and this process's CPU at each boundary.
mod phase {
    pub const CONNECTING: usize = 0;
    pub const SATURATED: usize = 1;
    pub const BETWEEN: usize = 2;
    pub const PACED: usize = 3;
    pub const DONE: usize = 4;
}

/// One phase of a push run, as the clients' thread measured it.
#[derive(Debug, Default)]
pub struct PushPhase {
    pub seconds: f64,
    pub published: u64,
    pub delivered: u64,
    pub delivery: Option<Histogram<u64>>,
    pub response: Option<Histogram<u64>>,
    /// The subscribers' receive calls.
    pub receive_calls: u64,
    /// Pushes whose leader time was not found (0 if all went well).
    pub untimed: u64,
    /// The publisher's paced rate, messages a second (`None`: saturated).
    pub rate: Option<f64>,
}

impl PushPhase {
    pub fn pushes_per_s(&self) -> f64 {
        self.delivered as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// What the harness thread read at the phase boundaries: members' counters and this process's CPU.
#[derive(Default)]
struct Boundary {
    stats: Vec<Stats>,
    cpu: Option<ProcessTimes>,
}

/// A push run to N subscribers.
#[derive(Debug)]
pub struct PushRun {
    pub sessions: usize,
    pub saturated: PushPhase,
    pub paced: PushPhase,
    /// Per phase: this process's CPU us per push delivered, members' egress datagrams per push.
    pub costs: [(Option<f64>, f64); 2],
    pub refused: u64,
}

/// A client of the push run.
struct Client {
    client: ClusterClient,
    /// Pushes received (subscribers) or responses (the publisher).
    received: u64,
}

fn new_client(members: &[(i32, SocketAddr)], bind: Ipv4Addr) -> Result<Client, String> {
    let config = ClientConfig {
        mtu: MTU,
        window: MAX_WINDOW,
        bind: Some(SocketAddr::from((bind, 0))),
        ..ClientConfig::new(members.to_vec())
    };
    let mut client = ClusterClient::new(config).map_err(|e| format!("client: {e}"))?;
    client.start_connect();
    Ok(Client { client, received: 0 })
}

/// The clients' thread of a push run: connects a publisher and `n` subscribers, runs the saturated
/// phase then the paced one, moving `phase` at each boundary, and closes every session.
fn push_clients(
    members: &[(i32, SocketAddr)],
    n: usize,
    settings: &Settings,
    times: &PushTimes,
    phase_now: &AtomicUsize,
    core: Option<usize>,
) -> Result<(PushPhase, PushPhase), String> {
    if let Some(core) = core {
        // Best effort: unpinned, the thread still runs (the scheduler places it).
        let _ = quorumcast_driver::agent::pin_current_thread(core);
    }
    let mut subscribers: Vec<Client> =
        (0..n).map(|_| new_client(members, Ipv4Addr::LOCALHOST)).collect::<Result<_, _>>()?;
    // Another /24 than the subscribers: 256 of them fill `max_sessions_per_prefix` of theirs.
    let mut publisher = new_client(members, Ipv4Addr::new(127, 0, 1, 1))?;
    let mut idle = Idle::backoff();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Connect all, then subscribe each and wait for every subscription's commit.
    let mut subscribed = vec![false; n];
    loop {
        if Instant::now() > deadline {
            return Err(format!("{n} subscribers did not connect and subscribe within 30 s"));
        }
        let mut work = 0;
        for (i, s) in subscribers.iter_mut().enumerate() {
            let mut committed = false;
            work += s.client.poll(|event| committed |= matches!(event, Event::Committed { .. }));
            subscribed[i] |= committed;
            if s.client.session_id().is_some() && s.client.in_flight() == 0 && !subscribed[i] {
                let _ = s.client.offer(b"S");
            }
        }
        work += publisher.client.poll(|_| {});
        if subscribed.iter().all(|&s| s) && publisher.client.session_id().is_some() {
            break;
        }
        idle.idle(work);
    }
    let mut next_k = 1u64;
    let mut sent_ns: Vec<i64> = vec![0; PUSH_SLOTS];
    let mut run = |rate: Option<f64>, length: Duration, mark: usize| -> Result<PushPhase, String> {
        let start = Instant::now();
        let warm_until = start + settings.push_warmup;
        let end = warm_until + length;
        let mut phase = PushPhase { rate, ..PushPhase::default() };
        let mut delivery = new_histogram();
        let mut response = new_histogram();
        let mut recording = false;
        let mut recorded_from = (next_k, Instant::now(), 0u64);
        let mut receive_calls_from = 0u64;
        let mut offered = 0u64;
        loop {
            let now = Instant::now();
            if !recording && now >= warm_until {
                recording = true;
                phase_now.store(mark, Ordering::Release);
                delivery.reset();
                response.reset();
                phase.untimed = 0;
                let delivered: u64 = subscribers.iter().map(|s| s.received).sum();
                receive_calls_from = subscribers.iter().map(|s| s.client.stats().receive_calls).sum();
                recorded_from = (next_k, now, delivered);
            }
            if now >= end {
                break;
            }
            let mut work = 0;
            for s in &mut subscribers {
                let received = &mut s.received;
                let untimed = &mut phase.untimed;
                work += s.client.poll(|event| {
                    if let Event::Pushed { payload, .. } = event {
                        let at = epoch_ns();
                        *received += 1;
                        let k = payload.get(1..9).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                        match times.0.get(k as usize).map(|t| t.load(Ordering::Acquire)) {
                            Some(pushed) if pushed > 0 => {
                                delivery.saturating_record(ns_between(at, pushed));
                            }
                            _ => *untimed += 1,
                        }
                    }
                });
            }
            let received = &mut publisher.received;
            work += publisher.client.poll(|event| {
                if let Event::Committed { response: answer, .. } = event {
                    let at = epoch_ns();
                    *received += 1;
                    let k = answer.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                    if let Some(&sent) = sent_ns.get(k as usize).filter(|&&t| t > 0) {
                        response.saturating_record(ns_between(at, sent));
                    }
                }
            });
            // Offer while the window has room, no subscriber is PUSH_LAG pushes behind (every subscriber
            // subscribed before message 1, so each is to receive every message: its lag is the messages
            // offered, `next_k - 1`, less the pushes it received), and (paced) the next message's intended
            // time has come; its latency runs from that intended time.
            let slowest = subscribers.iter().map(|s| s.received).min().unwrap_or(0);
            let lag = PUSH_LAG.min(PUSH_LAG_TOTAL / n.max(1) as u64).max(1);
            loop {
                let intended = match rate {
                    Some(r) => start + Duration::from_secs_f64(offered as f64 / r),
                    None => Instant::now(),
                };
                if intended > Instant::now()
                    || (next_k - 1).saturating_sub(slowest) >= lag
                    || publisher.client.in_flight() >= MAX_WINDOW
                    || next_k as usize >= PUSH_SLOTS
                {
                    break;
                }
                let mut message = vec![0x5A; MESSAGE];
                message[0] = b'P';
                message[1..9].copy_from_slice(&next_k.to_le_bytes());
                // The intended time, on the wall clock the response is read on.
                let late = Instant::now().saturating_duration_since(intended);
                sent_ns[next_k as usize] = epoch_ns() - late.as_nanos() as i64;
                match publisher.client.offer(&message) {
                    Ok(_) => {
                        next_k += 1;
                        offered += 1;
                        work += 1;
                    }
                    Err(_) => break,
                }
            }
            idle.idle(work);
        }
        let (k0, t0, delivered0) = recorded_from;
        let delivered: u64 = subscribers.iter().map(|s| s.received).sum();
        phase.seconds = t0.elapsed().as_secs_f64();
        phase.published = next_k - k0;
        phase.delivered = delivered - delivered0;
        phase.receive_calls =
            subscribers.iter().map(|s| s.client.stats().receive_calls).sum::<u64>() - receive_calls_from;
        phase.delivery = Some(delivery);
        phase.response = Some(response);
        Ok(phase)
    };
    let saturated = run(None, settings.push_phase, phase::SATURATED)?;
    phase_now.store(phase::BETWEEN, Ordering::Release);
    // Paced at half the saturated push rate: the publisher's messages a second.
    let rate = (saturated.pushes_per_s() / 2.0 / n.max(1) as f64).max(100.0);
    let paced = run(Some(rate), settings.push_phase, phase::PACED)?;
    phase_now.store(phase::DONE, Ordering::Release);
    for s in &mut subscribers {
        s.client.close();
    }
    publisher.client.close();
    // A few polls so the closes go out (best effort: a session not closed times out).
    for _ in 0..100 {
        for s in &mut subscribers {
            s.client.poll(|_| {});
        }
        publisher.client.poll(|_| {});
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((saturated, paced))
}

/// Runs a push run to `n` subscribers on `cluster`: the clients on a thread of their own, the harness
/// (this thread) cycling the cluster and reading its counters and this process's CPU at each boundary.
pub fn push_run(
    cluster: &mut LoadCluster,
    n: usize,
    settings: &Settings,
    core: Option<usize>,
) -> Result<PushRun, SweepError> {
    let times = Arc::new(PushTimes((0..PUSH_SLOTS).map(|_| AtomicI64::new(0)).collect()));
    let services: Vec<Box<dyn StateMachine + Send>> = (0..cluster.size())
        .map(|i| Box::new(PushService::new((i == 0).then(|| Arc::clone(&times)))) as Box<dyn StateMachine + Send>)
        .collect();
    cluster.set_services(services)?;
    let members = cluster.client_endpoints();
    let phase_now = AtomicUsize::new(phase::CONNECTING);
    let done = AtomicBool::new(false);
    let mut boundaries: Vec<Boundary> = Vec::new();
    let outcome = std::thread::scope(|scope| {
        let clients = std::thread::Builder::new()
            .name("push-clients".into())
            .spawn_scoped(scope, || {
                let _done = quorumcast_bench::bench::SetOnDrop(&done);
                push_clients(&members, n, settings, &times, &phase_now, core)
            })
            .map_err(SweepError::Io)?;
        let mut seen = phase::CONNECTING;
        let mut checked = Instant::now();
        while !done.load(Ordering::Acquire) {
            let now_phase = phase_now.load(Ordering::Acquire);
            if now_phase != seen {
                seen = now_phase;
                boundaries.push(Boundary { stats: cluster.stats(), cpu: ProcessTimes::read() });
            }
            if checked.elapsed() > Duration::from_millis(1) {
                cluster.failure()?;
                checked = Instant::now();
            }
            cluster.cycle(|_| {});
        }
        clients
            .join()
            .map_err(|_| SweepError::Cluster("the push clients' thread panicked".into()))?
            .map_err(SweepError::Cluster)
    });
    let (saturated, paced) = outcome?;
    // Let the closes be applied, then take the services back to read what the leader's refused.
    cluster.drain(Duration::from_secs(5))?;
    let refused = {
        let mut services = cluster.take_services();
        let mut refused = 0;
        if let Some(leader) = services.first_mut() {
            let mut snapshot = Vec::new();
            // The service's own snapshot carries its counts: (published, pushes, refused, ...).
            leader.take_snapshot(&mut snapshot)?;
            refused = snapshot.get(16..24).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        }
        refused
    };
    // Boundaries: [SATURATED, BETWEEN, PACED, DONE], each read when the harness saw the phase change.
    let cost = |from: usize, to: usize, delivered: u64| -> (Option<f64>, f64) {
        let (Some(a), Some(b)) = (boundaries.get(from), boundaries.get(to)) else {
            return (None, 0.0);
        };
        let cpu = a.cpu.zip(b.cpu).map(|(a, b)| ProcessTimes::seconds(b.since(&a).own) * 1e6 / delivered.max(1) as f64);
        let datagrams: i64 = b.stats.iter().zip(&a.stats).map(|(b, a)| b.since(a).clients().egress_datagrams()).sum();
        (cpu, datagrams as f64 / delivered.max(1) as f64)
    };
    let costs = [cost(0, 1, saturated.delivered), cost(2, 3, paced.delivered)];
    Ok(PushRun { sessions: n, saturated, paced, costs, refused })
}
