//! The async face of the remote client: `AsyncClient`s over UDP loopback, awaited from tokio tasks,
//! against a 3-node cluster in invoker mode driven by one thread that idles with a backoff (so the busy
//! threads, that one and the client's driver, which blocks on its socket, never outnumber two cores).
//! Every node echoes a client message's bytes as its response, so a future's response names its own
//! message. Every check is on what was answered and applied, never on time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quorumcast::{
    AsyncClient, AsyncConfig, ClientConfig, ClientEndpointConfig, ClusterClient, CommitError, Idle, Member, Node,
};
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel};
use quorumcast_testkit::{dump_each, ScratchDir};

/// What one node applied of the clients' messages: per session, the payloads in order.
#[derive(Clone, Debug, Default)]
struct Applied {
    sessions: BTreeMap<u64, Vec<Vec<u8>>>,
}

impl Applied {
    fn count(&self) -> usize {
        self.sessions.values().map(Vec::len).sum()
    }
}

/// A 3-node cluster run by a thread of its own; member 0 leads first.
struct Cluster {
    members: Vec<Member>,
    stop: Arc<AtomicBool>,
    kill_leader: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Option<Applied>>>>,
    _scratch: ScratchDir,
}

impl Cluster {
    fn start(name: &str) -> Self {
        let scratch = ScratchDir::new(name);
        let members = members(3);
        let clients = ClientEndpointConfig::enabled(AuthKey::new([0x5e; 32]));
        let mut nodes: Vec<Node> = (0..3)
            .map(|id| {
                test_builder(&scratch, id, &members, test_channel())
                    .memory_log()
                    .clients(clients.clone())
                    .start()
                    .unwrap()
            })
            .collect();
        elect(&mut nodes, 0, Duration::from_secs(60));
        let (stop, kill_leader) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (s, k) = (Arc::clone(&stop), Arc::clone(&kill_leader));
        let thread = std::thread::spawn(move || run_nodes(nodes, &s, &k));
        Self { members, stop, kill_leader, thread: Some(thread), _scratch: scratch }
    }

    fn client(&self) -> ClusterClient {
        let mut config = ClientConfig::new(self.members.iter().map(|m| (m.id, m.client)).collect());
        // Within the nodes' heartbeat timeout: a dead leader is looked for again well before a new one
        // is elected.
        config.leader_timeout = Duration::from_millis(500);
        ClusterClient::new(config).unwrap()
    }

    /// Stops the nodes once the live ones have applied the same messages; what each applied (`None` for
    /// a node killed).
    fn stop(mut self) -> Vec<Option<Applied>> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Runs the nodes, echoing each client message as its response, until `stop` and the live nodes agree;
/// closes member 0 (the first leader) when `kill_leader` is set.
fn run_nodes(nodes: Vec<Node>, stop: &AtomicBool, kill_leader: &AtomicBool) -> Vec<Option<Applied>> {
    let mut nodes: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    let mut applied: Vec<Option<Applied>> = vec![Some(Applied::default()); 3];
    let mut idle = Idle::backoff();
    let mut stopping_since: Option<Instant> = None;
    loop {
        if kill_leader.load(Ordering::SeqCst) && nodes[0].is_some() {
            let _ = nodes[0].take().unwrap().close();
            applied[0] = None;
        }
        let mut work = 0;
        for (node, applied) in nodes.iter_mut().zip(applied.iter_mut()) {
            let (Some(node), Some(applied)) = (node.as_mut(), applied.as_mut()) else { continue };
            work += node.invoke().unwrap();
            work += node.poll_service(1024, |entry, out| {
                if let Some(client) = entry.client {
                    applied.sessions.entry(client.session_id).or_default().push(entry.payload.to_vec());
                    out.extend_from_slice(entry.payload);
                }
            });
        }
        if stop.load(Ordering::SeqCst) {
            let since = *stopping_since.get_or_insert_with(Instant::now);
            let counts: BTreeSet<usize> = applied.iter().flatten().map(Applied::count).collect();
            let live: Vec<&Node> = nodes.iter().flatten().collect();
            if counts.len() == 1 {
                return applied;
            }
            assert!(since.elapsed() < Duration::from_secs(60), "the live nodes never agreed\n{}", {
                dump_each(live.into_iter())
            });
        }
        idle.idle(work);
    }
}

/// The payload of message `seq` of task `task`: unique in the test, of varied length.
fn payload(task: u32, seq: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(64);
    bytes.extend_from_slice(&task.to_le_bytes());
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.resize(8 + (seq % 57) as usize, task as u8);
    bytes
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap()
}

/// The payloads of `applied` (one node's), with how many times each was applied.
fn times_applied(applied: &Applied) -> BTreeMap<Vec<u8>, usize> {
    let mut times = BTreeMap::new();
    for payload in applied.sessions.values().flatten() {
        *times.entry(payload.clone()).or_default() += 1;
    }
    times
}

#[test]
fn many_tasks_each_get_their_own_response_exactly_once() {
    let cluster = Cluster::start("async-many-tasks");
    let client = AsyncClient::spawn(cluster.client(), AsyncConfig::default()).unwrap();
    const TASKS: u32 = 8;
    const PER_TASK: u32 = 1_000;
    const CONCURRENT: u32 = 64;
    let rt = runtime();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let client = client.clone();
            rt.spawn(async move {
                let mut answered = 0;
                for batch in (0..PER_TASK).step_by(CONCURRENT as usize) {
                    // Offered together (queued in this order), then awaited one by one.
                    let futures: Vec<_> = (batch..(batch + CONCURRENT).min(PER_TASK))
                        .map(|seq| (seq, client.offer(&payload(task, seq))))
                        .collect();
                    for (seq, future) in futures {
                        let committed = future.await.unwrap_or_else(|e| panic!("task {task} message {seq}: {e}"));
                        assert_eq!(committed.response, payload(task, seq), "task {task} message {seq}'s own response");
                        assert!(!committed.duplicate && committed.position.is_some());
                        answered += 1;
                    }
                }
                answered
            })
        })
        .collect();
    let answered: u32 = rt.block_on(async {
        let mut total = 0;
        for task in tasks {
            total += tokio::time::timeout(Duration::from_secs(120), task).await.expect("stalled").unwrap();
        }
        total
    });
    assert_eq!(answered, TASKS * PER_TASK);
    assert_eq!(client.pending(), 0);
    drop(client);
    // Every node applied each message once, in each task's order.
    let applied = cluster.stop();
    for node in applied.iter().flatten() {
        assert_eq!(node.sessions.len(), 1, "one session for every task");
        let times = times_applied(node);
        assert_eq!(times.len(), (TASKS * PER_TASK) as usize);
        assert!(times.values().all(|&n| n == 1), "a message applied twice");
        for task in 0..TASKS {
            let order: Vec<u32> = node
                .sessions
                .values()
                .flatten()
                .filter(|p| p[..4] == task.to_le_bytes())
                .map(|p| u32::from_le_bytes(p[4..8].try_into().unwrap()))
                .collect();
            assert_eq!(order, (0..PER_TASK).collect::<Vec<_>>(), "task {task}'s messages in its order");
        }
    }
}

#[test]
fn a_leader_change_mid_flight_ends_every_future_committed_or_with_a_reason() {
    let cluster = Cluster::start("async-leader-change");
    let client = AsyncClient::spawn(cluster.client(), AsyncConfig::default()).unwrap();
    const TASKS: u32 = 4;
    const PER_TASK: u32 = 600;
    const CONCURRENT: u32 = 32;
    let committed = Arc::new(AtomicU64::new(0));
    let rt = runtime();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (client, committed) = (client.clone(), Arc::clone(&committed));
            rt.spawn(async move {
                let mut outcomes = Vec::new();
                for batch in (0..PER_TASK).step_by(CONCURRENT as usize) {
                    let futures: Vec<_> = (batch..(batch + CONCURRENT).min(PER_TASK))
                        .map(|seq| (payload(task, seq), client.offer(&payload(task, seq))))
                        .collect();
                    for (payload, future) in futures {
                        let outcome = future.await;
                        if outcome.is_ok() {
                            committed.fetch_add(1, Ordering::SeqCst);
                        }
                        outcomes.push((payload, outcome));
                    }
                }
                outcomes
            })
        })
        .collect();
    // The leader dies once a fifth of the messages are committed, with others in flight.
    let until = Instant::now() + Duration::from_secs(60);
    while committed.load(Ordering::SeqCst) < u64::from(TASKS * PER_TASK / 5) {
        assert!(Instant::now() < until, "nothing committed before the leader change");
        std::thread::sleep(Duration::from_millis(1));
    }
    cluster.kill_leader.store(true, Ordering::SeqCst);
    let at_kill = committed.load(Ordering::SeqCst);
    let outcomes: Vec<_> = rt.block_on(async {
        let mut all = Vec::new();
        for task in tasks {
            all.extend(tokio::time::timeout(Duration::from_secs(120), task).await.expect("stalled").unwrap());
        }
        all
    });
    assert_eq!(outcomes.len(), (TASKS * PER_TASK) as usize, "every future resolved");
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost_responses = 0;
    for (payload, outcome) in &outcomes {
        match outcome {
            Ok(c) if c.response == *payload => {}
            // Committed, and known only from a later answer or a resend (its own was lost with the
            // leader): said so.
            Ok(c) if c.response.is_empty() && c.duplicate => lost_responses += 1,
            Ok(c) => panic!("another message's response: {:?} for {payload:?}", c.response),
            Err(e @ (CommitError::NotApplied(_) | CommitError::OutcomeUnknown | CommitError::SessionClosed(_))) => {
                *errors.entry(format!("{e:?}")).or_default() += 1;
            }
            Err(e) => panic!("an error that a leader change does not explain: {e}"),
        }
    }
    let ok = outcomes.iter().filter(|(_, o)| o.is_ok()).count();
    eprintln!(
        "{ok} committed ({lost_responses} with the response lost at the leader change; {at_kill} before it), \
         errors {errors:?}"
    );
    assert!(ok as u64 > at_kill, "messages committed after the leader change");
    drop(client);
    let applied = cluster.stop();
    assert!(applied[0].is_none());
    for node in applied.iter().flatten() {
        let times = times_applied(node);
        assert!(times.values().all(|&n| n == 1), "a message applied twice");
        for (payload, outcome) in &outcomes {
            if outcome.is_ok() {
                assert_eq!(times.get(payload), Some(&1), "a committed message is applied on the survivors");
            }
            if let Err(CommitError::NotApplied(_) | CommitError::SessionClosed(_)) = outcome {
                assert_eq!(times.get(payload), None, "a message said not applied was applied");
            }
        }
    }
}

#[test]
fn dropped_futures_leave_the_client_working_and_their_messages_applied_at_most_once() {
    let cluster = Cluster::start("async-dropped");
    let client = AsyncClient::spawn(cluster.client(), AsyncConfig::default()).unwrap();
    let rt = runtime();
    let kept: Vec<u32> = rt.block_on(async {
        let mut kept = Vec::new();
        for round in 0..20u32 {
            let futures: Vec<_> =
                (0..50).map(|i| (round * 50 + i, client.offer(&payload(0, round * 50 + i)))).collect();
            // Every third is dropped at once (before or after it is sent), the others awaited.
            for (seq, future) in futures {
                if seq % 3 == 0 {
                    drop(future);
                    continue;
                }
                let committed = tokio::time::timeout(Duration::from_secs(60), future).await.expect("stalled").unwrap();
                assert_eq!(committed.response, payload(0, seq));
                kept.push(seq);
            }
        }
        // A future dropped from a runtime's timeout, unresolved: the client goes on.
        let _ = tokio::time::timeout(Duration::ZERO, client.offer(&payload(1, 0))).await;
        let last = client.offer(&payload(1, 1)).await.unwrap();
        assert_eq!(last.response, payload(1, 1));
        kept
    });
    assert_eq!(kept.len(), 1000 - 334);
    drop(client);
    let applied = cluster.stop();
    for node in applied.iter().flatten() {
        let times = times_applied(node);
        assert!(times.values().all(|&n| n == 1), "a message applied twice");
        for &seq in &kept {
            assert_eq!(times.get(&payload(0, seq)), Some(&1));
        }
        assert_eq!(times.get(&payload(1, 1)), Some(&1));
    }
}

/// A client of a member nobody runs: a socket bound and never read, so nothing ever answers.
fn client_of_nobody() -> (ClusterClient, UdpSocket) {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client = ClusterClient::new(ClientConfig::new(vec![(0, silent.local_addr().unwrap())])).unwrap();
    (client, silent)
}

#[test]
fn offers_past_max_pending_or_too_long_are_refused_at_once_and_a_close_resolves_the_rest() {
    let (client, _silent) = client_of_nobody();
    let max = client.max_message_length();
    // The application drives: until it does, nothing leaves the queue.
    let (handle, mut driver) = AsyncClient::with_driver(client, AsyncConfig { max_pending: 4, timeout: None }).unwrap();
    let rt = runtime();
    let held: Vec<_> = (0..4u32).map(|i| handle.offer(&payload(0, i))).collect();
    assert_eq!(handle.pending(), 4);
    assert_eq!(rt.block_on(handle.offer(b"fifth")), Err(CommitError::Full { max_pending: 4 }));
    assert_eq!(rt.block_on(handle.offer(&vec![0; max + 1])), Err(CommitError::TooLong { max }));
    // A dropped future frees its place once the driver reaches it in the queue, never sent.
    let mut held = held;
    drop(held.remove(0));
    driver.drive();
    assert_eq!(handle.pending(), 3, "{driver:?}");
    let again = handle.offer(&payload(0, 9));
    assert_eq!(handle.pending(), 4);
    handle.close();
    driver.drive();
    assert!(driver.is_finished() && handle.is_closed());
    for future in held.into_iter().chain([again]) {
        assert_eq!(rt.block_on(future), Err(CommitError::Closed { offered: false }));
    }
    assert_eq!(handle.pending(), 0);
    assert_eq!(rt.block_on(handle.offer(b"after")), Err(CommitError::Closed { offered: false }));
}

#[test]
fn a_message_nobody_answers_resolves_to_timed_out_when_a_timeout_is_set() {
    let (client, _silent) = client_of_nobody();
    let config = AsyncConfig { timeout: Some(Duration::from_millis(200)), ..AsyncConfig::default() };
    let handle = AsyncClient::spawn(client, config).unwrap();
    let rt = runtime();
    // Never connected, so never sent.
    assert_eq!(rt.block_on(handle.offer(b"anyone?")), Err(CommitError::TimedOut { offered: false }));
    assert_eq!(handle.pending(), 0);
}
