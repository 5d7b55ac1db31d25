//! The service interface end to end, in one process: a 3-node cluster in invoker mode driven by the test
//! thread, a `StateMachine` that uses cluster time, timers, session events and entries of its own, and
//! remote clients over UDP loopback. Every check is on what the members applied (the same sequence of
//! callbacks, at the same positions, on every member), never on time: a timer is reached by letting the
//! wall clock pass, and the test waits for its effect.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use quorumcast::{AuthKey, ClientEndpointConfig, Member};
use quorumcast::{
    ClientConfig, CloseReason, ClosedReason, Cluster, ClusterClient, ConnectError, Entry, Node, Role, SessionRefused,
    StateMachine,
};
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel};
use quorumcast_testkit::{dump, ScratchDir};

/// A service that does what its messages say, and logs every callback with its position and cluster time.
///
/// Messages: `timer ID MS` (a timer MS ms of cluster time from now), `cancel ID`, `close` (closes the
/// sender's session), `refuse` (the next session to open is refused). A fired timer offers an entry of
/// the service's own, `fired ID`.
#[derive(Default)]
struct Service {
    /// Every callback: what, where, and at what cluster time (the same on every member).
    log: Vec<String>,
    /// Each timer's deadline, to check none fires before it.
    deadlines: std::collections::BTreeMap<u64, i64>,
    refuse_next: bool,
    roles: Vec<Role>,
    /// Pushes made (numbering their payloads).
    pushes: u64,
    /// The session `push-later` pushes to.
    later: u64,
}

/// Timers from this id on push (id - LATER) messages when they fire.
const LATER: u64 = 1 << 32;

impl StateMachine for Service {
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        let text = String::from_utf8_lossy(entry.payload).into_owned();
        let from = entry.client.map_or(0, |c| c.session_id);
        self.log.push(format!("{} message {text:?} from {from} at {}", cluster.position(), cluster.time().as_nanos()));
        let words: Vec<&str> = text.split(' ').collect();
        match words[..] {
            ["timer", id, ms] => {
                let (id, deadline) = (id.parse().unwrap(), cluster.time() + Duration::from_millis(ms.parse().unwrap()));
                cluster.schedule_timer(id, deadline).unwrap();
                self.deadlines.insert(id, deadline.as_nanos());
            }
            ["cancel", id] => {
                cluster.cancel_timer(id.parse().unwrap());
            }
            ["close"] => cluster.close_session(from),
            ["push-me", count] => self.push(cluster, from, count.parse().unwrap()),
            ["push-later", count] => {
                // From a timer: pushes made with no client message to answer.
                self.later = from;
                let deadline = cluster.time() + Duration::from_millis(1);
                cluster.schedule_timer(LATER + count.parse::<u64>().unwrap(), deadline).unwrap();
                self.deadlines.insert(LATER + count.parse::<u64>().unwrap(), deadline.as_nanos());
            }
            ["refuse"] => self.refuse_next = true,
            ["big", n] => {
                let n: usize = n.parse().unwrap();
                let response: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                // `respond` refuses what `response()` would only find out when sending it.
                let refused = cluster.respond(&response).is_err();
                assert_eq!(refused, n > cluster.max_response_length());
                if refused {
                    cluster.response().extend_from_slice(&response);
                }
                return;
            }
            ["push-big", n] => {
                let n: usize = n.parse().unwrap();
                cluster.push(from, &(0..n).map(|i| (i % 241) as u8).collect::<Vec<u8>>()).unwrap();
            }
            _ => {}
        }
        cluster.response().extend_from_slice(b"ok");
    }

    fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        self.log.push(format!("{} open {session_id} at {}", cluster.position(), cluster.time().as_nanos()));
        if std::mem::take(&mut self.refuse_next) {
            return Err(SessionRefused { code: 42 });
        }
        Ok(())
    }

    fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        self.log.push(format!("{} close {session_id} {reason:?}", cluster.position()));
    }

    fn on_timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        let now = cluster.time().as_nanos();
        assert!(now >= self.deadlines[&correlation_id], "timer {correlation_id} fired before its deadline");
        self.log.push(format!("{} timer {correlation_id} at {now}", cluster.position()));
        if correlation_id >= LATER {
            let session = self.later;
            self.push(cluster, session, correlation_id - LATER);
            return;
        }
        cluster.offer(format!("fired {correlation_id}").as_bytes()).unwrap();
    }

    fn on_role_change(&mut self, role: Role) {
        self.roles.push(role);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        let log = self.log.join("\n");
        writer.write_all(&(log.len() as u64).to_le_bytes())?;
        writer.write_all(log.as_bytes())?;
        let deadlines: Vec<String> = self.deadlines.iter().map(|(id, d)| format!("{id}={d}")).collect();
        let deadlines = deadlines.join(",");
        writer.write_all(&(deadlines.len() as u64).to_le_bytes())?;
        writer.write_all(deadlines.as_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let mut read_string = || -> std::io::Result<String> {
            let mut length = [0; 8];
            reader.read_exact(&mut length)?;
            let mut bytes = vec![0; u64::from_le_bytes(length) as usize];
            reader.read_exact(&mut bytes)?;
            Ok(String::from_utf8(bytes).unwrap())
        };
        let log = read_string()?;
        self.log = if log.is_empty() { Vec::new() } else { log.split('\n').map(String::from).collect() };
        self.deadlines = read_string()?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|pair| {
                let (id, deadline) = pair.split_once('=').unwrap();
                (id.parse().unwrap(), deadline.parse().unwrap())
            })
            .collect();
        Ok(())
    }
}

impl Service {
    fn push(&mut self, cluster: &mut Cluster<'_>, session: u64, count: u64) {
        for _ in 0..count {
            self.pushes += 1;
            cluster.push(session, format!("push {}", self.pushes).as_bytes()).unwrap();
        }
    }

    fn count(&self, what: &str) -> usize {
        self.log.iter().filter(|line| line.contains(what)).count()
    }
}

const SESSION_KEY: AuthKey = AuthKey::new([0x5e; 32]);

fn start(scratch: &ScratchDir, members: &[Member], clients: bool) -> Vec<Node> {
    (0..3)
        .map(|id| {
            let builder = test_builder(scratch, id, members, test_channel());
            let builder = if clients { builder.clients(ClientEndpointConfig::enabled(SESSION_KEY)) } else { builder };
            builder.start().unwrap()
        })
        .collect()
}

fn client(members: &[Member]) -> ClusterClient {
    let mut config = ClientConfig::new(members.iter().map(|m| (m.id, m.client)).collect());
    config.leader_timeout = Duration::from_secs(5);
    ClusterClient::new(config).unwrap()
}

/// Runs the nodes (applying to `services`) and `clients` until `done`, collecting the clients' events.
fn drive(
    nodes: &mut [Node],
    services: &mut [Service],
    clients: &mut [&mut ClusterClient],
    events: &mut Vec<String>,
    what: &str,
    mut done: impl FnMut(&[Service], &[&mut ClusterClient], &[String]) -> bool,
) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done(services, clients, events) {
        assert!(Instant::now() < until, "{what}: stalled; events {events:?}\n{}", dump(nodes));
        let mut work = 0;
        for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
            work += node.invoke().unwrap();
            work += node.poll_state(service, 1024).unwrap();
        }
        for client in clients.iter_mut() {
            work += client.poll(|event| events.push(format!("{event:?}")));
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

/// A cluster taking clients, member 0 elected, and alice connected to it.
struct Started {
    members: Vec<Member>,
    nodes: Vec<Node>,
    services: Vec<Service>,
    events: Vec<String>,
    alice: ClusterClient,
}

fn start_with_alice(scratch: &ScratchDir) -> Started {
    let members = members(3);
    let mut nodes = start(scratch, &members, true);
    elect(&mut nodes, 0, Duration::from_secs(60));
    let mut services: Vec<Service> = (0..3).map(|_| Service::default()).collect();
    let mut events = Vec::new();
    let mut alice = client(&members);
    alice.start_connect();
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "alice connects", |_, c, _| {
        c[0].session_id().is_some()
    });
    Started { members, nodes, services, events, alice }
}

fn same_everywhere(services: &[Service]) {
    for (i, service) in services.iter().enumerate().skip(1) {
        assert_eq!(service.log, services[0].log, "member {i} applied another sequence of callbacks than member 0");
    }
}

#[test]
fn timers_session_events_and_the_services_own_entries_happen_at_the_same_entries_on_every_member() {
    let scratch = ScratchDir::new("service-callbacks");
    let Started { members, mut nodes, mut services, mut events, mut alice } = start_with_alice(&scratch);
    for message in ["timer 1 30", "timer 2 10", "timer 3 20", "cancel 3", "refuse"] {
        alice.offer(message.as_bytes()).unwrap();
    }
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "timers fire", |s, c, _| {
        c[0].in_flight() == 0 && s.iter().all(|s| s.count("message \"fired") == 2)
    });
    let mut bob = client(&members);
    assert!(
        matches!(bob.connect(Duration::from_millis(1)), Err(ConnectError::TimedOut)),
        "the connect needs the nodes driven"
    );
    bob.start_connect();
    drive(&mut nodes, &mut services, &mut [&mut bob], &mut events, "bob refused", |_, _, e| {
        e.iter().any(|e| e.contains("RefusedByService { code: 42 }"))
    });
    alice.offer(b"close").unwrap();
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "alice closed", |s, _, e| {
        e.iter().any(|e| e.contains("ClosedByService")) && s.iter().all(|s| s.count(" close ") == 1)
    });
    same_everywhere(&services);
    let log = &services[0].log;
    let alice_id = log.iter().find(|l| l.contains(" open ")).unwrap().split(' ').nth(2).unwrap().to_string();
    let timers: Vec<&String> = log.iter().filter(|l| l.contains(" timer ") && !l.contains("message")).collect();
    assert_eq!(timers.len(), 2, "timers 2 and 1 fire once each, 3 was cancelled: {log:#?}");
    assert!(timers[0].contains("timer 2 ") && timers[1].contains("timer 1 "), "in deadline order: {timers:?}");
    assert_eq!(services[0].count("message \"fired 2\""), 1, "the leader's own entry, applied once: {log:#?}");
    assert_eq!(services[0].count("message \"fired 1\""), 1);
    assert_eq!(services[0].count(" open "), 2, "alice's open, and bob's, refused: {log:#?}");
    assert!(log.iter().any(|l| l.ends_with(&format!("close {alice_id} Service"))), "{log:#?}");
    assert!(!events.iter().any(|e| e.contains("OutcomeUnknown")), "{events:?}");
    let _ = ClosedReason::ClosedByService;
}

#[test]
fn timers_fire_without_remote_clients_and_survive_a_restart_of_every_member_through_the_snapshot() {
    let scratch = ScratchDir::new("service-restart");
    let members = members(3);
    let mut nodes = start(&scratch, &members, false);
    elect(&mut nodes, 0, Duration::from_secs(60));
    let mut services: Vec<Service> = (0..3).map(|_| Service::default()).collect();
    let mut events = Vec::new();
    let local = nodes[0].client();
    local.offer(b"timer 1 1").unwrap();
    local.offer(b"timer 2 400").unwrap();
    drive(&mut nodes, &mut services, &mut [], &mut events, "the first timer", |s, _, _| {
        s.iter().all(|s| s.count("message \"fired 1\"") == 1)
    });
    assert_eq!(services[0].count("message \"fired 2\""), 0, "timer 2 is 400 ms of cluster time away");
    for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
        node.take_snapshot(service).unwrap();
    }
    same_everywhere(&services);
    for node in nodes {
        node.close().unwrap();
    }
    // Every member again, from its snapshot (timer 2 pending in it): the timer fires once, after the restart.
    let mut nodes = start(&scratch, &members, false);
    let mut services: Vec<Service> = (0..3).map(|_| Service::default()).collect();
    for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
        assert!(node.restore(service).unwrap().is_some());
    }
    // The members elect member 0 again (it stands first), each service told its role as it polls.
    drive(&mut nodes, &mut services, &mut [], &mut events, "roles after the restart", |s, _, _| {
        s[0].roles.last() == Some(&Role::Leader) && s[1..].iter().all(|s| s.roles.last() == Some(&Role::Follower))
    });
    drive(&mut nodes, &mut services, &mut [], &mut events, "the second timer after the restart", |s, _, _| {
        s.iter().all(|s| s.count("message \"fired 2\"") == 1)
    });
    same_everywhere(&services);
    assert_eq!(services[0].count(" timer 1 at"), 1, "timer 1 fired once, before the restart");
    assert_eq!(services[0].count(" timer 2 at"), 1, "timer 2 fired once, after it");
}

#[test]
fn pushes_reach_their_client_once_and_in_order_across_a_change_of_leader() {
    let scratch = ScratchDir::new("service-pushes");
    let Started { members: _, mut nodes, mut services, mut events, mut alice } = start_with_alice(&scratch);
    let pushed = |events: &[String]| events.iter().filter(|e| e.starts_with("Pushed")).count();
    alice.offer(b"push-me 50").unwrap();
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "the first 50 pushes", |_, _, e| pushed(e) == 50);
    // 30 more pushes, from a timer, while alice does not read; then the leadership moves to member 1. The
    // new leader has every push alice has not acknowledged (they are replicated), and sends them again once
    // alice reconnects; alice drops those the old leader's datagrams already brought.
    alice.offer(b"push-later 30").unwrap();
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "push-later committed", |_, c, _| {
        c[0].in_flight() == 0
    });
    let until = Instant::now() + Duration::from_secs(60);
    while services.iter().any(|s| s.pushes < 80) {
        assert!(Instant::now() < until, "the timer's 30 pushes were never applied\n{}", dump(&nodes));
        for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
            node.invoke().unwrap();
            node.poll_state(service, 1024).unwrap();
        }
    }
    nodes[0].transfer_leadership(Some(1)).unwrap();
    // Alice reads nothing until member 1 leads: she has not acknowledged the timer's pushes in the log.
    let until = Instant::now() + Duration::from_secs(60);
    while nodes[1].role() != Role::Leader || nodes[0].role() == Role::Leader {
        assert!(Instant::now() < until, "the transfer never completed\n{}", dump(&nodes));
        for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
            node.invoke().unwrap();
            node.poll_state(service, 1024).unwrap();
        }
    }
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "alice at the new leader", |_, c, e| {
        pushed(e) >= 80
            && c[0].in_flight() == 0
            && e.iter().any(|e| e.starts_with("Connected") && e.ends_with("leader: 1 }"))
    });
    alice.offer(b"push-me 20").unwrap();
    drive(&mut nodes, &mut services, &mut [&mut alice], &mut events, "pushes from the new leader", |_, _, e| {
        pushed(e) >= 100
    });
    let received: Vec<String> = events.iter().filter(|e| e.starts_with("Pushed")).cloned().collect();
    let expected: Vec<String> = (1..=100u64)
        .map(|n| format!("Pushed {{ number: {n}, payload: {:?} }}", format!("push {n}").as_bytes()))
        .collect();
    assert_eq!(received, expected, "every push once, in order");
    assert_eq!(nodes[1].role(), Role::Leader);
    // Pushes 51-80 reached alice either in the old leader's datagrams (then the new leader's resend was
    // dropped as seen) or only in the new leader's resend (a deposed leader drops its egress): once each, in
    // order, either way.
    let stats = alice.stats();
    assert_eq!(stats.push_resends_asked, 0, "no gap on a loss-free path: {stats:?}");
}

#[test]
fn responses_and_pushes_longer_than_a_datagram_arrive_whole_and_one_past_the_limit_is_said_so() {
    let scratch = ScratchDir::new("service-long");
    let Started { mut nodes, mut services, mut alice, .. } = start_with_alice(&scratch);
    // Answers and pushes as lengths and checksums: (what, length, sum of bytes).
    let mut heard: Vec<(String, usize, u64)> = Vec::new();
    let expected = |n: usize, modulus: usize| (0..n).map(|i| (i % modulus) as u64).sum::<u64>();
    for message in ["big 10000", "push-big 20000", "big 65536", "big 65537"] {
        alice.offer(message.as_bytes()).unwrap();
    }
    let until = Instant::now() + Duration::from_secs(60);
    while heard.iter().filter(|h| h.0 == "committed").count() < 4 || !heard.iter().any(|h| h.0 == "pushed") {
        assert!(Instant::now() < until, "stalled: heard {heard:?}\n{}", dump(&nodes));
        for (node, service) in nodes.iter_mut().zip(services.iter_mut()) {
            node.invoke().unwrap();
            node.poll_state(service, 1024).unwrap();
        }
        alice.poll(|event| match event {
            quorumcast::Event::Committed { response, .. } => {
                heard.push(("committed".into(), response.len(), response.iter().map(|&b| u64::from(b)).sum()))
            }
            quorumcast::Event::Pushed { payload, .. } => {
                heard.push(("pushed".into(), payload.len(), payload.iter().map(|&b| u64::from(b)).sum()))
            }
            quorumcast::Event::ResponseTooLong { .. } => heard.push(("too long".into(), 0, 0)),
            _ => {}
        });
    }
    let committed: Vec<&(String, usize, u64)> = heard.iter().filter(|h| h.0 != "pushed").collect();
    assert_eq!(committed[0], &("committed".to_string(), 10000, expected(10000, 251)));
    assert_eq!(committed[1].1, 2, "the push's message is answered \"ok\"");
    assert_eq!(committed[2], &("committed".to_string(), 65536, expected(65536, 251)), "the longest response");
    assert_eq!(committed[3], &("too long".to_string(), 0, 0), "one byte more: said so, before its commit");
    assert_eq!(committed[4].1, 0);
    let pushed: Vec<&(String, usize, u64)> = heard.iter().filter(|h| h.0 == "pushed").collect();
    assert_eq!(pushed, [&("pushed".to_string(), 20000, expected(20000, 241))]);
}
