//! Remote clients in one process: `ClusterClient`s over UDP loopback against a 3-node cluster in invoker
//! mode, driven by the test thread (nothing busy-spins). Every node applies through `poll_service`, and
//! every check is on what was applied and answered, never on time: a session timeout is reached by
//! letting the wall clock pass, and the test waits for its effect.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quorumcast::unstable::credentials::{open_token, ClientKey, Ephemeral};
use quorumcast::unstable::wire::{self, Datagram, DatagramWriter, RecordHeader, Seal};
use quorumcast::{ClientConfig, ClientOfferError, ClusterClient, Event};
use quorumcast::{ClientEndpointConfig, Member, Node};
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel};
use quorumcast_testkit::{dump, ScratchDir};

/// What one node applied: per session, the correlation ids in order, and a digest of the payloads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Applied {
    sessions: BTreeMap<u64, Vec<u64>>,
    plain: u64,
    digest: u64,
}

impl Applied {
    fn record(&mut self, entry: &quorumcast::Entry<'_>) {
        for &b in entry.payload {
            self.digest = (self.digest ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        match entry.client {
            Some(client) => self.sessions.entry(client.session_id).or_default().push(client.correlation_id),
            None => self.plain += 1,
        }
    }
}

/// The members' session key in these tests.
const SESSION_KEY: AuthKey = AuthKey::new([0x5e; 32]);

/// Clients enabled with the tests' session key and the other settings `ClientEndpointConfig`'s defaults.
fn clients_config() -> ClientEndpointConfig {
    ClientEndpointConfig::enabled(SESSION_KEY)
}

/// A 3-node cluster in `scratch` taking clients with `clients`, member 0 elected, nothing applied yet.
fn start(scratch: &ScratchDir, clients: ClientEndpointConfig) -> (Vec<Member>, Vec<Node>, Vec<Applied>) {
    let members = members(3);
    let mut nodes: Vec<Node> = (0..3)
        .map(|id| {
            test_builder(scratch, id, &members, test_channel()).memory_log().clients(clients.clone()).start().unwrap()
        })
        .collect();
    elect(&mut nodes, 0, Duration::from_secs(60));
    (members, nodes, vec![Applied::default(); 3])
}

fn client_config(members: &[Member], order: &[usize]) -> ClientConfig {
    let mut config = ClientConfig::new(order.iter().map(|&i| (members[i].id, members[i].client)).collect());
    config.leader_timeout = Duration::from_secs(5);
    config
}

/// The response a node writes for a message: its correlation id and length, for one message in ten
/// (and the first); the others are committed without one, so their answers travel in runs.
fn response(entry: &quorumcast::Entry<'_>, out: &mut Vec<u8>) {
    if let Some(client) = entry.client.filter(|c| answered(c.correlation_id)) {
        out.extend_from_slice(&client.correlation_id.to_le_bytes());
        out.extend_from_slice(&(entry.payload.len() as u32).to_le_bytes());
    }
}

/// Whether message `id` gets a response.
fn answered(id: u64) -> bool {
    id == 1 || id % 10 == 0
}

/// How a commit of message `id` is described, with or without its response.
fn committed(id: u64) -> String {
    let response = if answered(id) { format!("Some({id})") } else { "None".into() };
    format!("committed {id} response {response}")
}

/// One round: every node invoked and polled (applying into `applied`).
fn run_nodes(nodes: &mut [Node], applied: &mut [Applied]) -> usize {
    let mut work = 0;
    for (node, applied) in nodes.iter_mut().zip(applied.iter_mut()) {
        work += node.invoke().unwrap();
        work += node.poll_service(1024, |entry, out| {
            applied.record(entry);
            response(entry, out);
        });
    }
    work
}

/// Runs nodes and polls `client` until `done` says so, collecting its events.
fn drive(
    nodes: &mut [Node],
    applied: &mut [Applied],
    clients: &mut [&mut ClusterClient],
    events: &mut [Vec<String>],
    mut done: impl FnMut(&[&mut ClusterClient], &[Vec<String>]) -> bool,
    what: &str,
) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done(clients, events) {
        assert!(Instant::now() < until, "{what}: stalled\n{}", dump(nodes));
        let mut work = run_nodes(nodes, applied);
        for (client, events) in clients.iter_mut().zip(events.iter_mut()) {
            work += client.poll(|event| events.push(describe(&event)));
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

fn describe(event: &Event<'_>) -> String {
    match event {
        Event::Committed { correlation_id, response, .. } => {
            let echoed = response.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
            format!("committed {correlation_id} response {echoed:?}")
        }
        other => format!("{other:?}"),
    }
}

/// Runs the nodes until every one's applied messages satisfy `done`.
fn await_applied(nodes: &mut [Node], applied: &mut [Applied], done: impl Fn(&Applied) -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !applied.iter().all(&done) {
        assert!(Instant::now() < until, "followers stalled\n{}", dump(nodes));
        if run_nodes(nodes, applied) == 0 {
            std::thread::yield_now();
        }
    }
}

fn connect(nodes: &mut [Node], applied: &mut [Applied], client: &mut ClusterClient) -> u64 {
    client.start_connect();
    let mut events = vec![Vec::new()];
    drive(nodes, applied, &mut [client], &mut events, |c, _| c[0].session_id().is_some(), "connect");
    client.session_id().unwrap()
}

#[test]
fn two_clients_messages_commit_once_each_with_their_responses() {
    let scratch = ScratchDir::new("clients-exactly-once");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let mut a = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    let mut b = ClusterClient::new(client_config(&members, &[2, 1, 0])).unwrap();
    let sa = connect(&mut nodes, &mut applied, &mut a);
    let sb = connect(&mut nodes, &mut applied, &mut b);
    assert_ne!(sa, sb);
    assert_eq!(b.leader(), Some(0), "b asked member 2 first and was redirected to the leader");
    assert!(nodes[2].stats().clients().redirects() > 0, "{}", dump(&nodes));
    // What scrapers label and read: the member id, the role (3: leader) and the leader known.
    let (leader, follower) = (nodes[0].stats(), nodes[2].stats());
    assert_eq!((leader.election().member_id(), leader.election().role()), (0, 3));
    assert_eq!((follower.election().member_id(), follower.election().role()), (2, 0));
    assert_eq!(follower.election().leader_member_id(), 0);

    const N: u64 = 5_000;
    let mut events = vec![Vec::new(), Vec::new()];
    let mut offered = [0u64; 2];
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let committed = |e: &Vec<String>| e.iter().filter(|s| s.starts_with("committed")).count() as u64;
        if committed(&events[0]) == N && committed(&events[1]) == N {
            break;
        }
        assert!(Instant::now() < until, "stalled at {offered:?}\n{}", dump(&nodes));
        for (i, client) in [&mut a, &mut b].into_iter().enumerate() {
            while offered[i] < N {
                let size = 16 + (offered[i] % 200) as usize;
                match client.offer(&vec![i as u8; size]) {
                    Ok(id) => {
                        offered[i] += 1;
                        assert_eq!(id, offered[i]);
                    }
                    Err(ClientOfferError::BackPressured) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let mut work = run_nodes(&mut nodes, &mut applied);
        for (client, events) in [&mut a, &mut b].into_iter().zip(events.iter_mut()) {
            work += client.poll(|event| events.push(describe(&event)));
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
    // Every message answered once, in order, with its own response.
    for events in &events {
        let expected: Vec<String> = (1..=N).map(committed).collect();
        assert_eq!(events, &expected);
    }
    // Every node applied each message exactly once, in order.
    await_applied(&mut nodes, &mut applied, |a| a.sessions.values().map(Vec::len).sum::<usize>() >= 2 * N as usize);
    for node_applied in &applied {
        assert_eq!(node_applied.sessions[&sa], (1..=N).collect::<Vec<_>>());
        assert_eq!(node_applied.sessions[&sb], (1..=N).collect::<Vec<_>>());
        assert_eq!(node_applied, &applied[0]);
    }
    eprintln!("leader: {}", dump(&nodes[..1]));
}

#[test]
fn a_silent_session_times_out_its_client_is_told_and_opens_another() {
    let scratch = ScratchDir::new("clients-timeout");
    let clients = ClientEndpointConfig { session_timeout: Duration::from_millis(300), ..clients_config() };
    let (members, mut nodes, mut applied) = start(&scratch, clients);
    let mut quiet = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    let mut busy = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    let mut alive = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    let first = connect(&mut nodes, &mut applied, &mut quiet);
    connect(&mut nodes, &mut applied, &mut busy);
    let kept = connect(&mut nodes, &mut applied, &mut alive);
    quiet.offer(b"before").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut quiet], &mut events, |c, _| c[0].in_flight() == 0, "first");

    // `quiet` stops polling (no keep-alives) while `busy` keeps entries flowing: the table closes the
    // silent session at the first entry past the timeout, by the leader's clock in the log.
    let silent_from = Instant::now();
    let mut offered = 0;
    while silent_from.elapsed() < Duration::from_millis(900) || offered < 3 {
        if busy.offer(b"tick").is_ok() {
            offered += 1;
        }
        run_nodes(&mut nodes, &mut applied);
        busy.poll(|_| {});
        // `alive` offers nothing but polls: its keep-alives keep its session open.
        alive.poll(|event| panic!("the polling client's session must stay open: {event:?}"));
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut events = vec![Vec::new()];
    drive(
        &mut nodes,
        &mut applied,
        &mut [&mut quiet],
        &mut events,
        |_, e| e[0].iter().any(|s| s.contains("SessionClosed")),
        "told of the close",
    );
    assert!(events[0].contains(&"SessionClosed { reason: TimedOut }".to_string()), "{:?}", events[0]);
    assert_eq!(quiet.offer(b"after"), Err(ClientOfferError::NotConnected));
    let second = connect(&mut nodes, &mut applied, &mut quiet);
    assert_ne!(first, second, "a new session");
    quiet.offer(b"after").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut quiet], &mut events, |c, _| c[0].in_flight() == 0, "second");
    assert_eq!(events[0], vec!["committed 1 response Some(1)".to_string()]);
    assert_eq!(alive.session_id(), Some(kept));
    alive.offer(b"still here").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut alive], &mut events, |c, _| c[0].in_flight() == 0, "kept alive");
    assert_eq!(events[0], vec!["committed 1 response Some(1)".to_string()]);
}

/// A client made of a plain socket and the wire format alone: what a hostile neighbour (or a client
/// that holds its session's token) can send. It reads answers without checking their tags: a test's view.
struct RawClient {
    socket: UdpSocket,
    key: Option<ClientKey>,
    session: u64,
    token: Option<AuthKey>,
    sequence: u64,
}

impl RawClient {
    /// A raw client bound to `ip` (any port), without a client key.
    fn new(ip: &str) -> Self {
        let socket = UdpSocket::bind((ip, 0)).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        Self { socket, key: None, session: 0, token: None, sequence: 1 }
    }

    /// The datagram of `records`: of the session, tagged with its token, when the client has one;
    /// else of no session, tagged with its client key when it has one.
    fn datagram(&mut self, records: &[(RecordHeader, &[u8])]) -> Vec<u8> {
        let mut writer = DatagramWriter::new(1408);
        for (record, payload) in records {
            assert!(writer.push(*record, payload));
        }
        let key_id = self.key.as_ref().map_or(0, ClientKey::id);
        let seal = match &self.token {
            Some(token) => {
                self.sequence += 1;
                Seal { session_id: self.session, key_id, sequence: self.sequence, key: Some(token) }
            }
            None => Seal { key_id, key: self.key.as_ref().map(ClientKey::key), ..Seal::default() },
        };
        writer.finish(seal).to_vec()
    }

    /// Sends `records` (see [`datagram`](Self::datagram)) to `to`; returns the bytes sent.
    fn send(&mut self, to: SocketAddr, records: &[(RecordHeader, &[u8])]) -> Vec<u8> {
        let bytes = self.datagram(records);
        self.socket.send_to(&bytes, to).unwrap();
        bytes
    }

    /// Runs the nodes until this client receives a record of `kind` (for `COMMITTED`, or a run of them);
    /// returns it and its payload.
    fn await_record(
        &self,
        nodes: &mut [Node],
        applied: &mut [Applied],
        kind: u8,
        what: &str,
    ) -> (RecordHeader, Vec<u8>) {
        let mut buffer = [0u8; 65_536];
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < until, "no record of kind {kind} in answer to {what}\n{}", dump(nodes));
            run_nodes(nodes, applied);
            let Ok(length) = self.socket.recv(&mut buffer) else { continue };
            let datagram = Datagram::parse(&buffer[..length]).unwrap();
            let wanted = |k: u8| k == kind || (kind == wire::COMMITTED && k == wire::COMMITTED_RUN);
            if let Some((record, payload)) = datagram.records().unwrap().find(|(r, _)| wanted(r.kind)) {
                return (record, payload.to_vec());
            }
        }
    }

    /// The ephemeral pair this raw client uses for the open with `nonce`.
    fn ephemeral(nonce: u64) -> Ephemeral {
        // Each nonce its own key (X25519 ignores a secret's low three bits: they must not be all that differs).
        Ephemeral::from_random(AuthKey::derive("raw client ephemeral", &nonce.to_le_bytes()).keyed_hash(&[b"x"]))
    }

    /// The open with `nonce`, with the cookie `leader` gives this address for it (as a client makes it
    /// after the first round trip).
    fn open_with_cookie(
        &mut self,
        nodes: &mut [Node],
        applied: &mut [Applied],
        leader: SocketAddr,
        nonce: u64,
    ) -> Vec<u8> {
        let public = Self::ephemeral(nonce).public();
        self.send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(nonce), &public)]);
        let (cookie, payload) = self.await_record(nodes, applied, wire::COOKIE, "an open without a cookie");
        assert_eq!(cookie.correlation_id, nonce);
        [&public[..], &payload[..]].concat()
    }

    /// Opens a session at `leader` (nonce `nonce`) and keeps its token.
    fn open(&mut self, nodes: &mut [Node], applied: &mut [Applied], leader: SocketAddr, nonce: u64) -> u64 {
        let payload = self.open_with_cookie(nodes, applied, leader, nonce);
        self.send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(nonce), &payload)]);
        let (opened, sealed) = self.await_record(nodes, applied, wire::OPENED, "an open");
        self.session = opened.session_id;
        self.token = Some(open_token(&sealed, &Self::ephemeral(nonce), self.session, nonce).expect("the token opens"));
        self.session
    }
}

/// Runs the nodes until `done` holds of the leader's stats.
fn await_stats(
    nodes: &mut [Node],
    applied: &mut [Applied],
    what: &str,
    mut done: impl FnMut(&quorumcast_driver::shm::stats::Stats) -> bool,
) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done(&nodes[0].stats()) {
        assert!(Instant::now() < until, "{what}\n{}", dump(nodes));
        if run_nodes(nodes, applied) == 0 {
            std::thread::yield_now();
        }
    }
}

/// The digest a node's `Applied` has after the messages `payloads` of one session.
fn digest_of(session: u64, payloads: impl IntoIterator<Item = Vec<u8>>) -> u64 {
    let mut digest = Applied::default();
    for (i, payload) in payloads.into_iter().enumerate() {
        digest.record(&quorumcast::Entry {
            payload: &payload,
            position: 0,
            client: Some(quorumcast::unstable::session::ClientMessage {
                session_id: session,
                correlation_id: i as u64 + 1,
                timestamp_ns: 0,
            }),
        });
    }
    digest.digest
}

#[test]
fn malformed_and_foreign_client_datagrams_are_counted_and_change_nothing() {
    let scratch = ScratchDir::new("clients-malformed");
    let allow = vec!["127.0.0.1".parse().unwrap()];
    let (members, mut nodes, mut applied) = start(&scratch, ClientEndpointConfig { allow, ..clients_config() });
    let mut client = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    let session = connect(&mut nodes, &mut applied, &mut client);
    let leader = members[0].client;

    // Garbage, another protocol, a truncated record, a record running past the datagram, an unknown
    // kind, and a datagram from an address outside `clients.allow`.
    let mut rogue = RawClient::new("127.0.0.1");
    rogue.socket.send_to(b"garbage", leader).unwrap();
    rogue.socket.send_to(&[0u8; 64], leader).unwrap();
    let good = rogue.datagram(&[(RecordHeader::new(wire::OPEN, 0).correlation(3), &[7; 32])]);
    rogue.socket.send_to(&good[..good.len() - 12], leader).unwrap();
    let mut long = good.clone();
    long[32 + 4..32 + 8].copy_from_slice(&1_000_000u32.to_le_bytes());
    rogue.socket.send_to(&long, leader).unwrap();
    rogue.send(leader, &[(RecordHeader::new(99, 0), &[])]);
    let outside = UdpSocket::bind("127.0.0.2:0").unwrap();
    outside.send_to(&good, leader).unwrap();
    // A session of the rogue's own, whose message is numbered far past the window: refused with a NAK
    // naming the message expected, never appended.
    let rogue_session = rogue.open(&mut nodes, &mut applied, leader, 7);
    rogue.send(leader, &[(RecordHeader::new(wire::MESSAGE, rogue_session).correlation(1_000_000), b"far ahead")]);
    let (nak, _) = rogue.await_record(&mut nodes, &mut applied, wire::NAK, "the message past the window");
    assert_eq!(nak.value, 1, "the NAK names the message the session takes next");
    assert_eq!(nodes[0].stats().clients().window_exceeded(), 1);
    await_stats(&mut nodes, &mut applied, "not all counted", |s| {
        s.clients().address_refused() >= 1 && s.clients().malformed_dropped() >= 5
    });

    // The real client's messages still commit, once each, and nothing else was applied anywhere.
    for i in 0..100u8 {
        client.offer(&[i; 32]).unwrap();
    }
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |c, _| c[0].in_flight() == 0, "real");
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).map_or(0, Vec::len) >= 100);
    let clients = nodes[0].stats();
    let clients = clients.clients();
    assert!(clients.malformed_dropped() >= 5, "garbage, foreign, truncated, past the end, unknown kind");
    assert_eq!(clients.address_refused(), 1, "the datagram from outside clients.allow");
    let digest = digest_of(session, (0..100u8).map(|i| vec![i; 32]));
    for node_applied in &applied {
        assert_eq!(node_applied.sessions.len(), 1, "only the real session applied messages");
        assert!(!node_applied.sessions.contains_key(&rogue_session));
        assert_eq!(node_applied.digest, digest, "the applied digest is the real client's alone");
    }
}

/// A relay that passes every datagram between one client and the leader's client endpoint and keeps a
/// copy of each the client sent: what a host that can read the client's traffic captures.
struct Tap {
    front: UdpSocket,
    back: UdpSocket,
    leader: SocketAddr,
    client: Option<SocketAddr>,
    captured: Vec<Vec<u8>>,
}

impl Tap {
    fn new(leader: SocketAddr) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        Self { front, back, leader, client: None, captured: Vec::new() }
    }

    fn pump(&mut self) -> usize {
        let mut buffer = [0u8; 65_536];
        let mut moved = 0;
        while let Ok((length, from)) = self.front.recv_from(&mut buffer) {
            self.client = Some(from);
            self.captured.push(buffer[..length].to_vec());
            let _ = self.back.send_to(&buffer[..length], self.leader);
            moved += 1;
        }
        while let Ok((length, _)) = self.back.recv_from(&mut buffer) {
            if let Some(client) = self.client {
                let _ = self.front.send_to(&buffer[..length], client);
            }
            moved += 1;
        }
        moved
    }
}

#[test]
fn a_stolen_session_id_without_its_token_cannot_reconnect_send_or_replay() {
    let scratch = ScratchDir::new("clients-stolen");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let leader = members[0].client;
    let mut tap = Tap::new(leader);
    let mut config = client_config(&members, &[0, 1, 2]);
    config.members[0].1 = tap.front.local_addr().unwrap();
    let mut victim = ClusterClient::new(config).unwrap();
    victim.start_connect();
    let until = Instant::now() + Duration::from_secs(60);
    while victim.session_id().is_none() {
        assert!(Instant::now() < until, "no session through the tap\n{}", dump(&nodes));
        run_nodes(&mut nodes, &mut applied);
        tap.pump();
        victim.poll(|_| {});
    }
    let session = victim.session_id().unwrap();
    let mut events = Vec::new();
    let mut run = |nodes: &mut [Node], applied: &mut [Applied], victim: &mut ClusterClient, tap: &mut Tap| {
        let mut work = run_nodes(nodes, applied) + tap.pump();
        work += victim.poll(|event| events.push(describe(&event)));
        if work == 0 {
            std::thread::yield_now();
        }
    };
    let payload = |id: u64| format!("victim message {id}").into_bytes();
    for id in 1..=10 {
        assert_eq!(victim.offer(&payload(id)), Ok(id));
    }
    let until = Instant::now() + Duration::from_secs(60);
    while victim.in_flight() > 0 {
        assert!(Instant::now() < until, "the victim's first messages\n{}", dump(&nodes));
        run(&mut nodes, &mut applied, &mut victim, &mut tap);
    }

    // The attacker knows the session id (it read it off the network) but not the token: a RECONNECT
    // and messages in the victim's name, untagged and tagged with a key of its own.
    let mut attacker = RawClient::new("127.0.0.1");
    attacker.session = session;
    for (token, sequence) in [(None, 0), (Some(AuthKey::new([1; 32])), u64::MAX - 8)] {
        attacker.token = token;
        attacker.sequence = sequence;
        let records: [(RecordHeader, &[u8]); 1] = [(RecordHeader::new(wire::RECONNECT, session), &[])];
        if token.is_some() {
            attacker.send(leader, &records);
        } else {
            let mut writer = DatagramWriter::new(1408);
            writer.push(records[0].0, records[0].1);
            attacker.socket.send_to(writer.finish(Seal { session_id: session, ..Seal::default() }), leader).unwrap();
        }
        attacker.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(11), b"forged 11")]);
    }
    // A RECONNECT naming a session that does not exist appends nothing and takes no slot.
    attacker.session = 0x1234_5678;
    attacker.token = Some(AuthKey::new([2; 32]));
    attacker.send(leader, &[(RecordHeader::new(wire::RECONNECT, 0x1234_5678), &[])]);
    // Replays of what the victim sent in its session, from the attacker's own socket and then from the
    // session's own address (through the tap's socket): each dropped as already seen, never taken. (The
    // victim's OPEN is no secret: replayed, it would open a session of the attacker's own.)
    let captured: Vec<Vec<u8>> =
        tap.captured.iter().filter(|b| Datagram::parse(b).unwrap().header.session_id == session).cloned().collect();
    assert!(!captured.is_empty());
    let position = nodes[0].commit_position();
    for bytes in &captured {
        attacker.socket.send_to(bytes, leader).unwrap();
    }
    await_stats(&mut nodes, &mut applied, "the forgeries were not all counted", |s| {
        s.clients().forged_dropped() >= 5 && s.clients().replayed_dropped() >= captured.len() as i64
    });
    for bytes in &captured {
        tap.back.send_to(bytes, leader).unwrap();
    }
    await_stats(&mut nodes, &mut applied, "the replays were not dropped", |s| {
        s.clients().replayed_dropped() >= 2 * captured.len() as i64
    });
    assert_eq!(nodes[0].stats().clients().displaced(), 0);
    assert_eq!(nodes[0].commit_position(), position, "nothing of the attacker's was appended");
    assert_eq!(nodes[0].stats().clients().connections(), 1, "the attacker took no slot");

    // The victim's session goes on, undisturbed: its next messages commit once each with their own
    // content, on every member, and the victim hears of no duplicate, close or displacement.
    for id in 11..=20 {
        assert_eq!(victim.offer(&payload(id)), Ok(id));
    }
    let until = Instant::now() + Duration::from_secs(60);
    while victim.in_flight() > 0 {
        assert!(Instant::now() < until, "the victim's next messages\n{}", dump(&nodes));
        run(&mut nodes, &mut applied, &mut victim, &mut tap);
    }
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).map_or(0, Vec::len) >= 20);
    let digest = digest_of(session, (1..=20).map(payload));
    for node_applied in &applied {
        assert_eq!(node_applied.sessions[&session], (1..=20).collect::<Vec<_>>(), "applied once each, in order");
        assert_eq!(node_applied.sessions.len(), 1);
        assert_eq!(node_applied.digest, digest, "with the victim's own content");
    }
    let expected: Vec<String> = (11..=20).map(committed).collect();
    let reported: Vec<String> = events.iter().filter(|e| e.starts_with("committed")).cloned().collect();
    assert_eq!(reported[reported.len() - 10..], expected[..]);
    assert!(events.iter().all(|e| e.starts_with("committed")), "{events:?}");
}

#[test]
fn a_session_moves_to_a_new_address_only_with_its_token_and_the_old_one_is_told() {
    let scratch = ScratchDir::new("clients-displaced");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let leader = members[0].client;
    let mut first = RawClient::new("127.0.0.1");
    let session = first.open(&mut nodes, &mut applied, leader, 1);
    first.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(1), b"from the first")]);
    first.await_record(&mut nodes, &mut applied, wire::COMMITTED, "the first address's message");

    // The same token from another socket (the client moved, or its token was copied): challenged first;
    // its answer moves the session, and the first address is told it was displaced.
    let mut second = RawClient::new("127.0.0.1");
    (second.session, second.token, second.sequence) = (session, first.token, first.sequence + 100);
    second.send(leader, &[(RecordHeader::new(wire::RECONNECT, session), &[])]);
    let (challenge, _) = second.await_record(&mut nodes, &mut applied, wire::CHALLENGE, "a reconnect from elsewhere");
    assert_eq!(nodes[0].stats().clients().displaced(), 0, "a datagram alone moves nothing");
    second.send(leader, &[(RecordHeader::new(wire::RECONNECT, session).correlation(challenge.correlation_id), &[])]);
    let (reconnected, _) = second.await_record(&mut nodes, &mut applied, wire::RECONNECTED, "the answer");
    assert_eq!(reconnected.value, 1, "the session's last message applied");
    let (displaced, _) = first.await_record(&mut nodes, &mut applied, wire::REFUSED, "the displacement");
    assert_eq!(wire::RefusalCode::from_u8(displaced.code), Some(wire::RefusalCode::Displaced));
    second.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(2), b"from the second")]);
    second.await_record(&mut nodes, &mut applied, wire::COMMITTED, "the second address's message");
    // A challenge answered for another address is no proof.
    let mut third = RawClient::new("127.0.0.1");
    (third.session, third.token, third.sequence) = (session, first.token, second.sequence + 100);
    third.send(leader, &[(RecordHeader::new(wire::RECONNECT, session).correlation(challenge.correlation_id), &[])]);
    third.await_record(&mut nodes, &mut applied, wire::CHALLENGE, "a stale answer");
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).map_or(0, Vec::len) >= 2);
    assert_eq!(nodes[0].stats().clients().displaced(), 1);
    for node_applied in &applied {
        assert_eq!(node_applied.sessions[&session], vec![1, 2]);
    }
}

#[test]
fn a_flood_of_opens_from_one_address_leaves_room_for_other_addresses() {
    let scratch = ScratchDir::new("clients-flood");
    let clients = ClientEndpointConfig { max_sessions: 64, max_sessions_per_address: 16, ..clients_config() };
    let (members, mut nodes, mut applied) = start(&scratch, clients);
    let leader = members[0].client;
    let mut flooder = RawClient::new("127.0.0.1");
    // Each open with the cookie of its address (the flooder receives at its address: the cookie round
    // trip does not stop it, the limits must).
    let opens: Vec<(u64, Vec<u8>)> =
        (0..1100u64).map(|nonce| (nonce, flooder.open_with_cookie(&mut nodes, &mut applied, leader, nonce))).collect();
    for (nonce, payload) in &opens {
        flooder.send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(*nonce), payload)]);
        if nonce % 64 == 0 {
            run_nodes(&mut nodes, &mut applied);
        }
    }
    await_stats(&mut nodes, &mut applied, "the flood was not refused", |s| {
        s.clients().address_sessions_refused() + s.clients().rate_limited() >= 1000
    });
    assert!(nodes[0].stats().clients().connections() <= 16, "one address holds at most its share");
    // A client on another address opens and commits.
    let mut config = client_config(&members, &[0, 1, 2]);
    config.bind = Some("127.0.0.2:0".parse().unwrap());
    let mut other = ClusterClient::new(config).unwrap();
    let session = connect(&mut nodes, &mut applied, &mut other);
    other.offer(b"still room").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut other], &mut events, |c, _| c[0].in_flight() == 0, "other");
    assert_eq!(events[0], vec![committed(1)]);
    await_applied(&mut nodes, &mut applied, |a| a.sessions.contains_key(&session));
    // The flooder's own address is told why, and a RECONNECT flood with forged tags takes nothing.
    let (refused, _) = flooder.await_record(&mut nodes, &mut applied, wire::REFUSED, "the flood");
    let code = wire::RefusalCode::from_u8(refused.code);
    assert!(matches!(code, Some(wire::RefusalCode::TooManyFromAddress | wire::RefusalCode::RateLimited)), "{code:?}");
    let connections = nodes[0].stats().clients().connections();
    for session in 1..500u64 {
        flooder.session = session;
        flooder.token = Some(AuthKey::new([9; 32]));
        flooder.send(leader, &[(RecordHeader::new(wire::RECONNECT, session), &[])]);
    }
    await_stats(&mut nodes, &mut applied, "the reconnects were not counted", |s| s.clients().forged_dropped() >= 499);
    assert_eq!(nodes[0].stats().clients().connections(), connections);
}

#[test]
fn with_client_keys_only_a_holder_of_one_opens_a_session() {
    let scratch = ScratchDir::new("clients-keys");
    let alice = ClientKey::new("alice", AuthKey::new([0xa1; 32]));
    let clients = ClientEndpointConfig { keys: vec![alice.clone()], ..clients_config() };
    let (members, mut nodes, mut applied) = start(&scratch, clients);
    // Without a key, and with a wrong one under alice's name: nothing is answered, all counted.
    for key in [None, Some(ClientKey::new("alice", AuthKey::new([0xbb; 32])))] {
        let mut config = client_config(&members, &[0, 1, 2]);
        config.key = key;
        config.connect_retry = Duration::from_millis(5);
        let mut stranger = ClusterClient::new(config).unwrap();
        stranger.start_connect();
        let forged = nodes[0].stats().clients().forged_dropped();
        await_stats(&mut nodes, &mut applied, "the stranger's opens were not dropped", |s| {
            stranger.poll(|_| {});
            s.clients().forged_dropped() >= forged + 3
        });
        assert_eq!(stranger.session_id(), None);
    }
    // An open tagged with alice's key but naming no key, and one naming alice's key untagged.
    let mut raw = RawClient::new("127.0.0.1");
    let mut writer = DatagramWriter::new(1408);
    writer.push(RecordHeader::new(wire::OPEN, 0).correlation(1), &[7; 32]);
    let forged = nodes[0].stats().clients().forged_dropped();
    for seal in [Seal { key: Some(alice.key()), ..Seal::default() }, Seal { key_id: alice.id(), ..Seal::default() }] {
        raw.socket.send_to(writer.finish(seal), members[0].client).unwrap();
    }
    await_stats(&mut nodes, &mut applied, "mislabelled opens", |s| s.clients().forged_dropped() >= forged + 2);
    assert_eq!(nodes[0].stats().clients().sessions_opened(), 0);
    // With alice's key: a session, and its messages commit.
    let mut config = client_config(&members, &[1, 0, 2]);
    config.key = Some(alice.clone());
    let mut client = ClusterClient::new(config).unwrap();
    let session = connect(&mut nodes, &mut applied, &mut client);
    client.offer(b"alice's").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |c, _| c[0].in_flight() == 0, "alice");
    assert_eq!(events[0], vec![committed(1)]);
    await_applied(&mut nodes, &mut applied, |a| a.sessions.contains_key(&session));
    // Her token is wrapped with her key: a raw client that reads the OPENED without the key cannot use it.
    raw.key = Some(alice.clone());
    let session = raw.open(&mut nodes, &mut applied, members[0].client, 2);
    let mut eavesdropper = RawClient::new("127.0.0.1");
    eavesdropper.key = Some(ClientKey::new("alice", AuthKey::new([0xcc; 32])));
    eavesdropper.session = session;
    eavesdropper.token = raw.token.map(|_| AuthKey::new([0; 32]));
    let forged = nodes[0].stats().clients().forged_dropped();
    eavesdropper.send(members[0].client, &[(RecordHeader::new(wire::MESSAGE, session).correlation(1), b"x")]);
    await_stats(&mut nodes, &mut applied, "the eavesdropper", |s| s.clients().forged_dropped() > forged);
}

/// A UDP relay between one client and the leader's client endpoint that loses, duplicates and delays
/// datagrams by a fixed pseudo-random sequence (the same on every run).
struct LossyRelay {
    /// The client sends here (it stands for member 0's client endpoint).
    front: UdpSocket,
    /// The relay sends to the leader from here.
    back: UdpSocket,
    leader: SocketAddr,
    client: Option<SocketAddr>,
    state: u64,
    /// A datagram held back, released after the next one (reordering).
    held: Option<(bool, Vec<u8>)>,
    dropped: u64,
    duplicated: u64,
    reordered: u64,
}

impl LossyRelay {
    fn new(leader: SocketAddr) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        Self {
            front,
            back,
            leader,
            client: None,
            state: 0x9E37_79B9_7F4A_7C15,
            held: None,
            dropped: 0,
            duplicated: 0,
            reordered: 0,
        }
    }

    fn roll(&mut self) -> u64 {
        // xorshift64*: deterministic.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100
    }

    fn forward(&mut self, to_leader: bool, bytes: &[u8]) {
        let (socket, to) = if to_leader { (&self.back, self.leader) } else { (&self.front, self.client.unwrap()) };
        let _ = socket.send_to(bytes, to);
    }

    /// Moves what is waiting each way: 5% lost, 3% sent twice, 3% held back behind the next.
    fn pump(&mut self) -> usize {
        let mut buffer = [0u8; 65_536];
        let mut moved = 0;
        loop {
            let (to_leader, length) = match self.front.recv_from(&mut buffer) {
                Ok((length, from)) => {
                    self.client = Some(from);
                    (true, length)
                }
                Err(_) => match self.back.recv_from(&mut buffer) {
                    Ok((length, _)) if self.client.is_some() => (false, length),
                    Ok(_) => continue,
                    Err(_) => return moved,
                },
            };
            moved += 1;
            let bytes = buffer[..length].to_vec();
            match self.roll() {
                0..5 => self.dropped += 1,
                5..8 => {
                    self.duplicated += 1;
                    self.forward(to_leader, &bytes);
                    self.forward(to_leader, &bytes);
                }
                8..11 if self.held.is_none() => {
                    self.reordered += 1;
                    self.held = Some((to_leader, bytes));
                }
                _ => {
                    self.forward(to_leader, &bytes);
                    if let Some((way, held)) = self.held.take() {
                        self.forward(way, &held);
                    }
                }
            }
        }
    }
}

#[test]
fn a_client_behind_a_lossy_path_still_has_each_message_applied_once() {
    let scratch = ScratchDir::new("clients-lossy");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let mut relay = LossyRelay::new(members[0].client);
    let mut config = client_config(&members, &[0, 1, 2]);
    config.members[0].1 = relay.front.local_addr().unwrap();
    config.resend_timeout = Duration::from_millis(20);
    // A small window: many datagrams, so the relay's losses hit all kinds of them.
    config.window = 4;
    let mut client = ClusterClient::new(config).unwrap();
    client.start_connect();
    let until = Instant::now() + Duration::from_secs(60);
    while client.session_id().is_none() {
        assert!(Instant::now() < until, "no session through the relay\n{}", dump(&nodes));
        run_nodes(&mut nodes, &mut applied);
        relay.pump();
        client.poll(|_| {});
    }
    let session = client.session_id().unwrap();

    const N: u64 = 3_000;
    let (mut offered, mut events) = (0u64, Vec::new());
    let until = Instant::now() + Duration::from_secs(120);
    while events.iter().filter(|e: &&String| e.starts_with("committed")).count() < N as usize {
        assert!(Instant::now() < until, "stalled at {offered}, {} reported\n{}", events.len(), dump(&nodes));
        while offered < N && client.offer(&(offered + 1).to_le_bytes()).is_ok() {
            offered += 1;
        }
        let mut work = run_nodes(&mut nodes, &mut applied) + relay.pump();
        work += client.poll(|event| {
            if let Event::Committed { correlation_id, .. } = event {
                events.push(format!("committed {correlation_id}"));
            } else {
                events.push(format!("{event:?}"));
            }
        });
        if work == 0 {
            std::thread::yield_now();
        }
    }
    let expected: Vec<String> = (1..=N).map(|id| format!("committed {id}")).collect();
    assert_eq!(events, expected, "every message reported committed once, in order");
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).map_or(0, Vec::len) >= N as usize);
    for node_applied in &applied {
        assert_eq!(node_applied.sessions[&session], (1..=N).collect::<Vec<_>>(), "applied once each, in order");
    }
    let stats = nodes[0].stats();
    eprintln!(
        "relay dropped {}, duplicated {}, reordered {}; leader: gaps {}, duplicates {}",
        relay.dropped,
        relay.duplicated,
        relay.reordered,
        stats.clients().gaps(),
        stats.clients().duplicates()
    );
    assert!(relay.dropped > 0 && relay.duplicated > 0 && relay.reordered > 0);
    assert!(stats.clients().gaps() + stats.clients().duplicates() > 0, "losses were repaired by resends");
}

/// A state machine that keeps every client message it applied, and snapshots them.
#[derive(Default)]
struct Messages(Vec<(u64, u64)>);

impl quorumcast::StateMachine for Messages {
    fn apply(&mut self, _: i64, _: &[u8]) {}

    fn apply_entry(&mut self, entry: &quorumcast::Entry<'_>, response: &mut Vec<u8>) {
        if let Some(client) = entry.client {
            self.0.push((client.session_id, client.correlation_id));
            response.extend_from_slice(&client.correlation_id.to_le_bytes());
        }
    }

    fn take_snapshot(&mut self, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
        writer.write_all(&(self.0.len() as u64).to_le_bytes())?;
        for (session, id) in &self.0 {
            writer.write_all(&session.to_le_bytes())?;
            writer.write_all(&id.to_le_bytes())?;
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn std::io::Read) -> std::io::Result<()> {
        let mut word = || -> std::io::Result<u64> {
            let mut bytes = [0u8; 8];
            reader.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        let count = word()?;
        self.0 = (0..count).map(|_| Ok((word()?, word()?))).collect::<std::io::Result<_>>()?;
        Ok(())
    }
}

/// Runs nodes (applying to `machines`) and the client until `done`.
fn drive_state(
    nodes: &mut [Node],
    machines: &mut [Messages],
    client: &mut ClusterClient,
    events: &mut Vec<String>,
    what: &str,
    mut done: impl FnMut(&[Node], &[Messages], &ClusterClient) -> bool,
) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done(nodes, machines, client) {
        assert!(Instant::now() < until, "{what}: stalled, client {client:?}, events {events:?}\n{}", dump(nodes));
        let mut work = 0;
        for (node, machine) in nodes.iter_mut().zip(machines.iter_mut()) {
            work += node.invoke().unwrap();
            work += node.poll_state(machine, 1024).unwrap();
        }
        work += client.poll(|event| events.push(describe(&event)));
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

#[test]
fn the_session_table_survives_a_restart_through_the_snapshot_and_the_recorded_log() {
    let scratch = ScratchDir::new("clients-restart");
    let members = members(3);
    let builder = |id: i32| test_builder(&scratch, id, &members, test_channel()).clients(clients_config());
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(id).start().unwrap()).collect();
    let mut machines: Vec<Messages> = (0..3).map(|_| Messages::default()).collect();
    let mut client = ClusterClient::new(client_config(&members, &[1, 0, 2])).unwrap();
    let mut events = Vec::new();
    client.start_connect();
    drive_state(&mut nodes, &mut machines, &mut client, &mut events, "connect", |_, _, c| c.session_id().is_some());
    let session = client.session_id().unwrap();
    let offer = |client: &mut ClusterClient, from: u64, to: u64| {
        for id in from..=to {
            assert_eq!(client.offer(&id.to_le_bytes()), Ok(id));
        }
    };
    let applied_all = |n: usize| {
        move |_: &[Node], m: &[Messages], c: &ClusterClient| c.in_flight() == 0 && m.iter().all(|m| m.0.len() >= n)
    };
    offer(&mut client, 1, 50);
    drive_state(&mut nodes, &mut machines, &mut client, &mut events, "first 50", applied_all(50));
    for (node, machine) in nodes.iter_mut().zip(machines.iter_mut()) {
        node.take_snapshot(machine).unwrap();
    }
    offer(&mut client, 51, 100);
    drive_state(&mut nodes, &mut machines, &mut client, &mut events, "next 50", applied_all(100));
    for node in nodes {
        node.close().unwrap();
    }

    // Every member again, from its snapshot (50 messages and the session table) and its recorded log
    // (the next 50, and the table's entries after the snapshot): the client's session goes on with its
    // next message, 101, which only a table that knows the session and its last message takes.
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(id).start().unwrap()).collect();
    let mut machines: Vec<Messages> = (0..3).map(|_| Messages::default()).collect();
    for (node, machine) in nodes.iter_mut().zip(machines.iter_mut()) {
        assert!(node.restore(machine).unwrap().is_some(), "node {} restores its snapshot", node.id());
        assert_eq!(machine.0.len(), 50);
    }
    events.clear();
    // The client still has its session; a new leader does not know it: it reconnects.
    client.offer(&101u64.to_le_bytes()).unwrap();
    drive_state(&mut nodes, &mut machines, &mut client, &mut events, "reconnected", applied_all(101));
    offer(&mut client, 102, 150);
    drive_state(&mut nodes, &mut machines, &mut client, &mut events, "last 49", applied_all(150));
    let expected: Vec<(u64, u64)> = (1..=150).map(|id| (session, id)).collect();
    for machine in &machines {
        assert_eq!(machine.0, expected, "every member applied each message once, across the restart");
    }
    assert!(events.iter().any(|e| e.starts_with("Connected")), "the client reconnected: {events:?}");
    assert!(events.iter().all(|e| !e.contains("SessionClosed") && !e.contains("NotApplied")), "{events:?}");
}

#[test]
fn a_closed_session_is_gone_from_the_leader_and_its_id_is_refused() {
    let scratch = ScratchDir::new("clients-close");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let mut client = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    connect(&mut nodes, &mut applied, &mut client);
    client.offer(b"one").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |c, _| c[0].in_flight() == 0, "one");
    assert_eq!(nodes[0].stats().clients().connections(), 1);
    client.close();
    assert_eq!(client.offer(b"two"), Err(ClientOfferError::NotConnected));
    await_stats(&mut nodes, &mut applied, "the close never reached the leader's table", |s| {
        s.clients().connections() == 0
    });
    // A session closed by a client that still holds its token: a reconnect of it (proven, from its own
    // address) is refused as unknown, and nothing of it is applied.
    let leader = members[0].client;
    let mut raw = RawClient::new("127.0.0.1");
    let session = raw.open(&mut nodes, &mut applied, leader, 5);
    raw.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(1), b"before")]);
    raw.await_record(&mut nodes, &mut applied, wire::COMMITTED, "the message before the close");
    raw.send(leader, &[(RecordHeader::new(wire::CLOSE, session), &[])]);
    raw.await_record(&mut nodes, &mut applied, wire::CLOSED, "the close");
    raw.send(leader, &[(RecordHeader::new(wire::RECONNECT, session), &[])]);
    let (challenge, _) = raw.await_record(&mut nodes, &mut applied, wire::CHALLENGE, "a reconnect of a closed session");
    raw.send(leader, &[(RecordHeader::new(wire::RECONNECT, session).correlation(challenge.correlation_id), &[])]);
    let (refused, _) = raw.await_record(&mut nodes, &mut applied, wire::REFUSED, "the reconnect of a closed session");
    assert_eq!(wire::RefusalCode::from_u8(refused.code), Some(wire::RefusalCode::UnknownSession));
    raw.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(2), b"after")]);
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).is_some_and(|s| s == &[1]));
    assert_eq!(applied[0].sessions[&session], vec![1], "only the message before the close was applied");
}

#[test]
fn offer_and_wait_returns_each_messages_response_once_it_is_applied() {
    let scratch = ScratchDir::new("clients-offer-and-wait");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let config = client_config(&members, &[1, 0, 2]);
    // The nodes run on this thread; the client blocks on another, as an application's request thread.
    let client = std::thread::spawn(move || {
        let mut client = ClusterClient::new(config).unwrap();
        client.connect(Duration::from_secs(60)).unwrap();
        let outcomes: Vec<_> =
            (1..=20u64).map(|i| client.offer_and_wait(&[i as u8; 100], Duration::from_secs(60))).collect();
        (client.session_id().unwrap(), outcomes)
    });
    while !client.is_finished() {
        if run_nodes(&mut nodes, &mut applied) == 0 {
            std::thread::yield_now();
        }
    }
    let (session, outcomes) = client.join().unwrap();
    for (id, outcome) in (1..=20u64).zip(outcomes) {
        let committed = outcome.unwrap_or_else(|e| panic!("message {id}: {e}"));
        let echoed = committed.response.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        assert_eq!(echoed, answered(id).then_some(id), "message {id}'s response");
        assert!(!committed.duplicate);
    }
    // Returned only once applied at the leader, which answers: every message is there, once.
    let at_leader = applied[0].sessions.get(&session).cloned().unwrap_or_default();
    assert_eq!(at_leader, (1..=20).collect::<Vec<u64>>(), "{}", dump(&nodes));
}

/// Members 1 and 2 of a 3-member cluster, member 1 elected; member 0 is dead: its client endpoint is a
/// socket nobody reads (returned, to keep it bound), and it never ran.
fn start_without_member_0(scratch: &ScratchDir) -> (Vec<Member>, Vec<Node>, Vec<Applied>, UdpSocket) {
    let members = members(3);
    let dead = UdpSocket::bind(members[0].client).expect("member 0's client endpoint is free");
    let mut nodes: Vec<Node> = (1..3)
        .map(|id| {
            test_builder(scratch, id, &members, test_channel())
                .leader(1)
                .memory_log()
                .clients(clients_config())
                .start()
                .unwrap()
        })
        .collect();
    elect(&mut nodes, 0, Duration::from_secs(60));
    (members, nodes, vec![Applied::default(); 2], dead)
}

/// A client of `order` that would wait an hour at each member that does not answer: reaching the leader
/// at all shows that no connect retry was waited (the counts say how).
fn patient_client(members: &[Member], order: &[usize], fanout: usize) -> ClusterClient {
    let mut config = client_config(members, order);
    config.connect_retry = Duration::from_secs(3600);
    config.connect_fanout = fanout;
    ClusterClient::new(config).unwrap()
}

#[test]
fn a_dead_first_member_costs_a_new_client_no_connect_retry() {
    let scratch = ScratchDir::new("clients-dead-first");
    let (members, mut nodes, mut applied, _dead) = start_without_member_0(&scratch);
    // The default fan-out: one round to every member; the dead one's silence costs nothing.
    for _ in 0..3 {
        let mut client = patient_client(&members, &[0, 1, 2], ClientConfig::new(Vec::new()).connect_fanout);
        connect(&mut nodes, &mut applied, &mut client);
        assert_eq!(client.leader(), Some(1));
        let stats = client.stats();
        assert_eq!((stats.ask_rounds, stats.asks, stats.cookies), (1, 3, 1), "{stats:?}");
        let mut events = vec![Vec::new()];
        let id = client.offer(b"one-shot").unwrap();
        drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |c, _| c[0].in_flight() == 0, "commit");
        assert_eq!(events[0], vec![format!("committed {id} response Some({id})")]);
        client.close();
    }
}

#[test]
fn a_redirect_is_followed_at_once_and_the_known_leader_is_asked_first() {
    let scratch = ScratchDir::new("clients-redirect-hint");
    let (members, mut nodes, mut applied, _dead) = start_without_member_0(&scratch);
    // One member at a time: member 2 names member 1, which is asked at once, in the same round.
    let mut client = patient_client(&members, &[2, 0, 1], 1);
    connect(&mut nodes, &mut applied, &mut client);
    assert_eq!(client.leader(), Some(1));
    let stats = client.stats();
    assert_eq!((stats.ask_rounds, stats.asks, stats.redirects_followed), (1, 2, 1), "{stats:?}");
    // A new session goes to the leader it knows first, past the dead member 0 the list would try next.
    client.close();
    connect(&mut nodes, &mut applied, &mut client);
    assert_eq!(client.leader(), Some(1));
    let stats = client.stats();
    assert_eq!((stats.ask_rounds, stats.asks, stats.redirects_followed), (2, 3, 1), "{stats:?}");
}

#[test]
fn a_new_client_seeded_with_the_known_leader_asks_it_first() {
    let scratch = ScratchDir::new("clients-leader-hint");
    let (members, mut nodes, mut applied, _dead) = start_without_member_0(&scratch);
    let mut first = patient_client(&members, &[1, 2, 0], 1);
    connect(&mut nodes, &mut applied, &mut first);
    assert_eq!(first.known_leader(), Some(1));
    // One member at a time, the dead member 0 first in the list: unseeded, this client would wait its
    // hour-long connect retry there; seeded, its first and only ask goes to the leader.
    let mut config = client_config(&members, &[0, 2, 1]);
    config.connect_retry = Duration::from_secs(3600);
    config.connect_fanout = 1;
    config.leader_hint = first.known_leader();
    let mut seeded = ClusterClient::new(config).unwrap();
    connect(&mut nodes, &mut applied, &mut seeded);
    assert_eq!(seeded.leader(), Some(1));
    let stats = seeded.stats();
    assert_eq!((stats.ask_rounds, stats.asks, stats.redirects_followed), (1, 1, 0), "{stats:?}");
}

#[test]
fn wait_returns_when_a_datagram_arrives_or_the_next_timer_is_due() {
    // A stand-in member that never answers as a cluster would: it only echoes bytes back.
    let member = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut config = ClientConfig::new(vec![(0, member.local_addr().unwrap())]);
    config.connect_retry = Duration::from_millis(1);
    let mut client = ClusterClient::new(config).unwrap();
    // Idle, nothing to read: a zero timeout returns at once.
    assert!(!client.wait(Duration::ZERO).unwrap());
    // Opening: the next ask bounds an hour's wait (it returns, with nothing read).
    client.start_connect();
    client.poll(|_| {});
    assert_eq!(client.stats().asks, 1);
    assert!(!client.wait(Duration::from_secs(3600)).unwrap());
    // A datagram from the member: an hour's wait ends with it there (the retry is pushed off first).
    let mut buffer = [0u8; 2048];
    let (_, from) = member.recv_from(&mut buffer).unwrap();
    member.send_to(b"not a client datagram", from).unwrap();
    let mut config = ClientConfig::new(vec![(0, member.local_addr().unwrap())]);
    config.connect_retry = Duration::from_secs(3600);
    let mut patient = ClusterClient::new(config).unwrap();
    patient.start_connect();
    patient.poll(|_| {});
    let (_, from) = member.recv_from(&mut buffer).unwrap();
    member.send_to(b"not a client datagram", from).unwrap();
    assert!(patient.wait(Duration::from_secs(3600)).unwrap());
    // It is read, and dropped as malformed: nothing reported.
    let mut events = 0;
    patient.poll(|_| events += 1);
    assert_eq!((events, patient.stats().datagrams_received), (0, 1));
}

/// Issue 27, item 6: a client started with member 0 alone learns the others from the leader (`MEMBERS`
/// after `OPENED`); while an operator suspends the cluster its messages are refused with a distinct event
/// and its session lives on; once resumed they are sent again and committed, each once.
#[test]
fn a_client_learns_the_members_and_a_suspended_cluster_refuses_its_messages_until_it_resumes() {
    use quorumcast::unstable::admin::{AdminCommand, AdminRings};

    let scratch = ScratchDir::new("clients-suspended");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let mut config = client_config(&members, &[0]);
    config.resend_timeout = Duration::from_millis(50);
    let mut client = ClusterClient::new(config).unwrap();
    let session = connect(&mut nodes, &mut applied, &mut client);
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |c, _| c[0].stats().members_learnt == 2, "learn");

    let admin = AdminRings::attach(nodes[0].directory().unwrap()).unwrap();
    admin.send(1, &AdminCommand::Suspend).unwrap();
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |_, _| admin.answer(1).is_some(), "suspend");
    let first = client.offer(b"while suspended").unwrap();
    let second = client.offer(b"and another").unwrap();
    let refused = format!("{:?}", Event::Suspended { correlation_id: first });
    drive(&mut nodes, &mut applied, &mut [&mut client], &mut events, |_, e| e[0].contains(&refused), "refused");
    assert!(!events[0].iter().any(|e| e.starts_with("committed")), "nothing committed while suspended: {events:?}");
    assert_eq!(client.session_id(), Some(session), "the session lives on");

    admin.send(2, &AdminCommand::Resume).unwrap();
    let done = [committed(first), committed(second)];
    drive(
        &mut nodes,
        &mut applied,
        &mut [&mut client],
        &mut events,
        |_, e| done.iter().all(|d| e[0].contains(d)),
        "resumed",
    );
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).is_some_and(|m| m[..] == [first, second]));
    assert!(quorumcast_testkit::cluster::counter(&nodes[0], "client records refused while suspended") >= 1);
}

/// Issue 51, item 3: an observer of the whole open (the victim's `OPEN`, with its cookie, and the
/// `OPENED` answer), holding the same client key as the victim, cannot take the session: the token in
/// `OPENED` does not open with its own exchange nor read as the token in clear, so a reconnect or a
/// message under anything it derives is dropped as forged; its replay of the victim's `OPEN` (from its
/// own address) opens nothing; and the victim's session goes on.
#[test]
fn an_observer_holding_the_client_key_cannot_unwrap_a_token_or_take_the_session() {
    // With client keys (the observer holds the victim's), and without any (the token was in clear before).
    for keyed in [true, false] {
        observer_cannot_take_a_session(keyed);
    }
}

fn observer_cannot_take_a_session(keyed: bool) {
    let scratch = ScratchDir::new("clients-observer");
    let shared = keyed.then(|| ClientKey::new("traders", AuthKey::new([0x7e; 32])));
    let clients = ClientEndpointConfig { keys: shared.iter().cloned().collect(), ..clients_config() };
    let (members, mut nodes, mut applied) = start(&scratch, clients);
    let leader = members[0].client;
    let mut victim = RawClient::new("127.0.0.1");
    victim.key = shared.clone();
    let open = victim.open_with_cookie(&mut nodes, &mut applied, leader, 41);
    let captured_open = victim.send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(41), &open)]);
    let (opened, sealed) = victim.await_record(&mut nodes, &mut applied, wire::OPENED, "the victim's open");
    let session = opened.session_id;
    victim.session = session;
    victim.token = open_token(&sealed, &RawClient::ephemeral(41), session, 41);
    assert!(victim.token.is_some());
    victim.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(1), b"the victim's")]);
    victim.await_record(&mut nodes, &mut applied, wire::COMMITTED, "the victim's message");

    let mut observer = RawClient::new("127.0.0.1");
    observer.key = shared.clone();
    // Unwrapping: with its own exchange, and as if the bytes were the token itself.
    let own = Ephemeral::from_random([0x33; 32]);
    assert_eq!(open_token(&sealed, &own, session, 41), None);
    let guesses = [AuthKey::new(sealed[32..64].try_into().unwrap()), AuthKey::new(sealed[..32].try_into().unwrap())];
    let forged = nodes[0].stats().clients().forged_dropped();
    for guess in guesses {
        observer.session = session;
        observer.token = Some(guess);
        observer.sequence = u64::MAX / 2;
        observer.send(leader, &[(RecordHeader::new(wire::RECONNECT, session), &[])]);
        observer.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(2), b"the observer's")]);
    }
    await_stats(&mut nodes, &mut applied, "the observer's datagrams", |s| s.clients().forged_dropped() >= forged + 4);
    // The victim's captured OPEN, replayed from the observer's address: its cookie is not this address's.
    let opened_before = nodes[0].stats().clients().sessions_opened();
    observer.socket.send_to(&captured_open, leader).unwrap();
    observer.token = None;
    let (cookie, _) = observer.await_record(&mut nodes, &mut applied, wire::COOKIE, "the replayed open");
    assert_eq!(cookie.correlation_id, 41);
    assert_eq!(nodes[0].stats().clients().sessions_opened(), opened_before, "the replay opened nothing");
    assert_eq!(nodes[0].stats().clients().displaced(), 0);
    // The victim goes on, alone in its session.
    victim.send(leader, &[(RecordHeader::new(wire::MESSAGE, session).correlation(2), b"the victim's second")]);
    victim.await_record(&mut nodes, &mut applied, wire::COMMITTED, "the victim's second message");
    await_applied(&mut nodes, &mut applied, |a| a.sessions.get(&session).map_or(0, Vec::len) >= 2);
    for node_applied in &applied {
        assert_eq!(node_applied.sessions[&session], vec![1, 2]);
    }
}

/// Issue 51, item 4: 200 addresses flood opens (each open with the cookie of its address: they receive
/// there) and hold every session they get, filling the table; a real client of another address still
/// gets a session, evicting one of an address that holds more. The time it took is printed (a figure,
/// not a bound: the test waits for the event).
#[test]
fn two_hundred_flooding_addresses_cannot_lock_a_real_client_out() {
    let scratch = ScratchDir::new("clients-lockout");
    let (members, mut nodes, mut applied) = start(&scratch, clients_config());
    let leader = members[0].client;
    let max = clients_config().max_sessions;
    let mut attackers: Vec<RawClient> = (0..200).map(|i| RawClient::new(&format!("127.1.{i}.1"))).collect();
    let per_address = max.div_ceil(attackers.len()) as u64 + 2;
    let mut opens = Vec::new();
    for (a, attacker) in attackers.iter_mut().enumerate() {
        for k in 0..per_address {
            let nonce = (a as u64) << 16 | k;
            opens.push((a, nonce, attacker.open_with_cookie(&mut nodes, &mut applied, leader, nonce)));
        }
    }
    for (i, (a, nonce, payload)) in opens.iter().enumerate() {
        attackers[*a].send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(*nonce), payload)]);
        if i % 32 == 0 {
            run_nodes(&mut nodes, &mut applied);
        }
    }
    await_stats(&mut nodes, &mut applied, "the attackers did not fill the table", |s| {
        s.clients().connections() as usize >= max
    });
    assert!(nodes[0].stats().clients().sessions_refused() > 0, "more opens than room: {}", dump(&nodes));
    let mut config = client_config(&members, &[0, 1, 2]);
    config.bind = Some("127.0.0.1:0".parse().unwrap());
    let mut real = ClusterClient::new(config).unwrap();
    let started = Instant::now();
    let session = connect(&mut nodes, &mut applied, &mut real);
    eprintln!("the real client had a session {:?} after asking, the table full of 200 addresses'", started.elapsed());
    real.offer(b"in").unwrap();
    let mut events = vec![Vec::new()];
    drive(&mut nodes, &mut applied, &mut [&mut real], &mut events, |c, _| c[0].in_flight() == 0, "real");
    assert_eq!(events[0], vec![committed(1)]);
    await_applied(&mut nodes, &mut applied, |a| a.sessions.contains_key(&session));
    let stats = nodes[0].stats();
    // Attackers' late opens evict too (sessions are shared among the addresses that ask): at least one did.
    assert!(stats.clients().evicted() > 0, "sessions of the heaviest addresses made room");
    assert!(stats.clients().connections() as usize <= max);
}

/// Issue 51, item 4: the addresses of one network (an IPv4 /24) hold at most
/// `clients.max_sessions_per_prefix` sessions together, each told why past it; another network's
/// client still gets in.
#[test]
fn the_addresses_of_one_network_share_its_sessions() {
    let scratch = ScratchDir::new("clients-prefix");
    let config = ClientEndpointConfig { max_sessions_per_address: 3, max_sessions_per_prefix: 4, ..clients_config() };
    let (members, mut nodes, mut applied) = start(&scratch, config);
    let leader = members[0].client;
    // Two hosts of 127.3.3.0/24 open two sessions each: the network's four.
    let mut open = |host: &str, nonce: u64, kind: u8| {
        let mut raw = RawClient::new(host);
        let payload = raw.open_with_cookie(&mut nodes, &mut applied, leader, nonce);
        raw.send(leader, &[(RecordHeader::new(wire::OPEN, 0).correlation(nonce), &payload)]);
        raw.await_record(&mut nodes, &mut applied, kind, "an open in the network").0
    };
    for (host, nonce) in [("127.3.3.1", 1), ("127.3.3.1", 2), ("127.3.3.2", 3), ("127.3.3.2", 4)] {
        open(host, nonce, wire::OPENED);
    }
    // A third host of the network is refused, with the reason.
    let refused = open("127.3.3.9", 5, wire::REFUSED);
    let refusals = vec![wire::RefusalCode::from_u8(refused.code)];
    assert_eq!(refusals, vec![Some(wire::RefusalCode::TooManyFromNetwork)]);
    let mut other = ClusterClient::new(client_config(&members, &[0, 1, 2])).unwrap();
    connect(&mut nodes, &mut applied, &mut other);
    assert_eq!(nodes[0].stats().clients().connections(), 5);
}
