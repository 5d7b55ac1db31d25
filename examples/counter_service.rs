//! A replicated counter with a remote command-line client: the shape of a real service.
//!
//! Three members, each its own process (on one host here; on three hosts, give each its own address):
//!
//! ```text
//! export COUNTER_SECRET=change-me     # the members' shared secret, the same for every member
//! cargo run --example counter_service -- member 0 &
//! cargo run --example counter_service -- member 1 &
//! cargo run --example counter_service -- member 2 &
//! cargo run --example counter_service -- add 5    # prints the new total, committed by a majority
//! ```
//!
//! Kill any member with `kill -9` and start it again: it comes back (`clean_stale`), restores its
//! snapshot, replays its recorded log and catches up; kill the leader and the other two elect another,
//! which the client finds. Each `add` is applied exactly once, whatever the client resends.
//!
//! Each member runs in invoker mode with a backoff idle strategy: one thread, which idles cheaply, so
//! three members share a 2-core host.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use quorumcast::{
    AuthKey, ClientConfig, ClientEndpointConfig, ClusterClient, Entry, Idle, Member, NodeBuilder, StateMachine,
    ThreadingMode,
};

/// The members: id and log endpoint (the consensus endpoint is its port + 100, the client endpoint + 200).
fn members() -> Vec<Member> {
    (0..3).map(|id| Member::new(id, SocketAddr::from(([127, 0, 0, 1], 40100 + id as u16)))).collect()
}

/// The members' keys, from the shared secret: the log channel's and the client sessions'.
fn keys() -> Result<(AuthKey, AuthKey), Box<dyn std::error::Error>> {
    let secret = std::env::var("COUNTER_SECRET").map_err(|_| "set COUNTER_SECRET to the members' shared secret")?;
    Ok((
        AuthKey::derive("counter-service log", secret.as_bytes()),
        AuthKey::derive("counter-service clients", secret.as_bytes()),
    ))
}

/// The replicated state: one total. Every member applies the same `add`s in the same order.
#[derive(Default)]
struct Counter {
    total: i64,
}

impl StateMachine for Counter {
    fn apply_entry(&mut self, entry: &Entry<'_>, response: &mut Vec<u8>) {
        // A malformed command is applied as nothing (every member decides the same way).
        if let Ok(bytes) = <[u8; 8]>::try_from(entry.payload) {
            self.total += i64::from_le_bytes(bytes);
        }
        response.extend_from_slice(&self.total.to_le_bytes());
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.total.to_le_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let mut bytes = [0; 8];
        reader.read_exact(&mut bytes)?;
        self.total = i64::from_le_bytes(bytes);
        Ok(())
    }
}

fn member(id: i32) -> Result<(), Box<dyn std::error::Error>> {
    let (log_key, session_key) = keys()?;
    let data = PathBuf::from(format!("counter-service-data/member-{id}"));
    let mut node = NodeBuilder::new(id, members())
        .data_dir(data) // the recorded log, the vote and the snapshots: keep it on a disk that survives
        .clean_stale(true) // after a kill -9, start over the dead run's node directory
        .auth_key(log_key)
        .clients(ClientEndpointConfig::enabled(session_key))
        .threading(ThreadingMode::Invoker)
        .start()?;
    for warning in node.warnings() {
        log::warn!("{warning}");
    }
    let mut counter = Counter::default();
    if let Some(position) = node.restore(&mut counter)? {
        log::info!("member {id}: restored the snapshot at {position}, total {}", counter.total);
    }
    node.on_role_change(move |change| {
        log::info!("member {id}: {:?} in term {}", change.role, change.leadership_term_id)
    });
    let mut idle = Idle::backoff();
    loop {
        // One round: the node's agents, then what is committed; idle only when neither did anything.
        let work = node.invoke()? + node.poll_state(&mut counter, 256)?;
        idle.idle(work);
    }
}

fn add(amount: i64) -> Result<(), Box<dyn std::error::Error>> {
    // The session key stays with the members: a client proves its session with the token it is given.
    let endpoints = members().iter().map(|m| (m.id, m.client)).collect();
    let mut client = ClusterClient::new(ClientConfig::new(endpoints))?;
    client.connect(Duration::from_secs(10))?;
    let committed = client.offer_and_wait(&amount.to_le_bytes(), Duration::from_secs(10))?;
    let total = <[u8; 8]>::try_from(committed.response.as_slice()).map(i64::from_le_bytes)?;
    println!("{total}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without a logger quorumcast's warnings and role changes go nowhere.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["member", id] => member(id.parse()?),
        ["add", amount] => add(amount.parse()?),
        _ => Err("usage: counter_service member <0|1|2> | add <amount>".into()),
    }
}
