//! A replicated key-value map: three quorumcast nodes in one process, each applying the committed log of
//! SET and DEL commands to its own `HashMap`, which implements [`StateMachine`]: the nodes record the log
//! on disk and snapshot their maps as they go. Halfway, all three stop; started again, each restores its
//! newest snapshot, replays the log recorded after it, and goes on. At the end the three maps are equal,
//! and printed.
//!
//! ```text
//! cargo run --example kv_store
//! ```
//!
//! The nodes run in invoker mode: this one thread drives every node's agents (`Node::invoke`), offers
//! commands through the leader's client and applies what each node has committed (`Node::poll_committed`).
//! Nothing spins: an idle round backs off (`Idle::backoff`). In a real deployment each node would be its own process (see
//! `qc-node` and `tuning/`), with the same apply code.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quorumcast::{Idle, LocalOfferError, Member, Node, NodeBuilder, Role, StateMachine, StorageConfig, ThreadingMode};
use std::io::{Read, Write};

/// Commands offered by the leader.
const COMMANDS: u32 = 20_000;
/// Distinct keys they touch.
const KEYS: u32 = 64;

/// A command of the replicated map.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Command {
    /// Sets `key` to `value`.
    Set { key: String, value: String },
    /// Removes `key`.
    Del { key: String },
}

/// Why bytes are not a command.
#[derive(Debug, PartialEq, Eq)]
enum DecodeError {
    /// Shorter than its header or its key length says.
    Truncated,
    /// An opcode other than SET (1) or DEL (2).
    UnknownOpcode(u8),
    /// Key or value bytes that are not UTF-8.
    NotUtf8,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("command truncated"),
            Self::UnknownOpcode(op) => write!(f, "unknown opcode {op}: 1 is SET, 2 is DEL"),
            Self::NotUtf8 => f.write_str("key or value is not UTF-8"),
        }
    }
}

impl std::error::Error for DecodeError {}

const SET: u8 = 1;
const DEL: u8 = 2;

impl Command {
    /// Encoding: opcode (1 byte), key length (2 bytes, little-endian), key, then the value (the rest).
    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let (op, key, value) = match self {
            Command::Set { key, value } => (SET, key, value.as_str()),
            Command::Del { key } => (DEL, key, ""),
        };
        out.push(op);
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(value.as_bytes());
    }

    fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        let [op, k0, k1, rest @ ..] = bytes else {
            return Err(DecodeError::Truncated);
        };
        let key_len = u16::from_le_bytes([*k0, *k1]) as usize;
        if rest.len() < key_len {
            return Err(DecodeError::Truncated);
        }
        let (key, value) = rest.split_at(key_len);
        let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| DecodeError::NotUtf8);
        match *op {
            SET => Ok(Command::Set { key: text(key)?, value: text(value)? }),
            DEL => Ok(Command::Del { key: text(key)? }),
            other => Err(DecodeError::UnknownOpcode(other)),
        }
    }
}

/// One node's state machine: the map, how many commands it applied, and how many it refused.
#[derive(Default)]
struct KvStore {
    map: HashMap<String, String>,
    applied: u32,
    refused: u32,
}

/// The longest key or value a snapshot may hold: a damaged length cannot make a load allocate more.
const MAX_FIELD: usize = 1 << 20;

impl StateMachine for KvStore {
    fn apply(&mut self, _position: i64, entry: &[u8]) {
        match Command::decode(entry) {
            Ok(Command::Set { key, value }) => {
                self.map.insert(key, value);
            }
            Ok(Command::Del { key }) => {
                self.map.remove(&key);
            }
            // Every node refuses the same bytes the same way, so the maps stay equal.
            Err(_) => self.refused += 1,
        }
        self.applied += 1;
    }

    /// The counts, then each pair as key length, key, value length, value (lengths little-endian u32).
    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.applied.to_le_bytes())?;
        writer.write_all(&self.refused.to_le_bytes())?;
        writer.write_all(&(self.map.len() as u32).to_le_bytes())?;
        for (key, value) in self.sorted() {
            for field in [key, value] {
                writer.write_all(&(field.len() as u32).to_le_bytes())?;
                writer.write_all(field.as_bytes())?;
            }
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let word = |reader: &mut dyn Read| -> std::io::Result<u32> {
            let mut bytes = [0u8; 4];
            reader.read_exact(&mut bytes)?;
            Ok(u32::from_le_bytes(bytes))
        };
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        self.applied = word(reader)?;
        self.refused = word(reader)?;
        let pairs = word(reader)?;
        self.map.clear();
        for _ in 0..pairs {
            let field = |reader: &mut dyn Read| -> std::io::Result<String> {
                let length = word(reader)? as usize;
                if length > MAX_FIELD {
                    return Err(bad("a field longer than 1 MiB"));
                }
                let mut bytes = vec![0u8; length];
                reader.read_exact(&mut bytes)?;
                String::from_utf8(bytes).map_err(|_| bad("a field that is not UTF-8"))
            };
            let key = field(reader)?;
            let value = field(reader)?;
            self.map.insert(key, value);
        }
        Ok(())
    }
}

impl KvStore {
    fn sorted(&self) -> BTreeMap<&str, &str> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
}

/// Command `n` of the workload: mostly SETs, every fifth a DEL, over `KEYS` keys picked pseudo-randomly.
fn command(n: u32) -> Command {
    let mixed = n.wrapping_mul(2_654_435_761);
    let key = format!("key-{:02}", mixed % KEYS);
    if n % 5 == 4 {
        Command::Del { key }
    } else {
        Command::Set { key, value: format!("value-{n}") }
    }
}

fn free_endpoint() -> Result<SocketAddr, std::io::Error> {
    UdpSocket::bind("127.0.0.1:0")?.local_addr()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let members: Vec<Member> = (0..3)
        .map(|id| Ok(Member::new(id, free_endpoint()?).with_consensus(free_endpoint()?)))
        .collect::<Result<_, std::io::Error>>()?;
    let base = std::env::temp_dir().join(format!("qc-kv-store-{}", std::process::id()));
    // Small segments and frequent snapshots, so that this short run shows both at work.
    let storage =
        StorageConfig { segment_length: 256 << 10, snapshot_interval: Some(256 << 10), ..StorageConfig::default() };
    let start = |id: i32| {
        NodeBuilder::new(id, members.clone())
            .leader(0)
            .directory(base.join(format!("node-{id}")))
            .data_dir(base.join(format!("data-{id}")))
            .storage(storage.clone())
            .clean_stale(true)
            .mtu(8192)
            .term_buffer_length(1 << 20)
            .threading(ThreadingMode::Invoker)
            .commit_piggyback(true)
            .start()
    };

    // First run: the first half of the commands. Each node records the log and snapshots its map.
    let mut nodes: Vec<Node> = (0..3).map(start).collect::<Result<_, _>>()?;
    let mut stores: Vec<KvStore> = (0..3).map(|_| KvStore::default()).collect();
    let mut offered = 0;
    run(&mut nodes, &mut stores, &mut offered, COMMANDS / 2)?;
    for node in nodes {
        node.close()?;
    }
    println!("stopped all three nodes after {} commands", COMMANDS / 2);

    // Second run: each node restores its newest snapshot, replays the log recorded after it, and goes on.
    let mut nodes: Vec<Node> = (0..3).map(start).collect::<Result<_, _>>()?;
    let mut stores: Vec<KvStore> = (0..3).map(|_| KvStore::default()).collect();
    for (node, store) in nodes.iter_mut().zip(stores.iter_mut()) {
        let at = node.restore(store)?;
        println!("node {} restored a snapshot at {at:?}: {} commands applied before it", node.id(), store.applied);
    }
    run(&mut nodes, &mut stores, &mut offered, COMMANDS)?;
    for node in nodes {
        node.close()?;
    }
    let _ = std::fs::remove_dir_all(&base);

    let maps: Vec<BTreeMap<&str, &str>> = stores.iter().map(KvStore::sorted).collect();
    println!("applied {:?} commands; {} keys remain on each node:", applied(&stores), maps[0].len());
    for (key, value) in &maps[0] {
        let everywhere = maps[1..].iter().all(|m| m.get(key) == Some(value));
        println!("  {key} = {value:<14} {}", if everywhere { "(on all three)" } else { "(differs)" });
    }
    if maps[0] != maps[1] || maps[0] != maps[2] {
        return Err("the three maps differ".into());
    }
    println!("the three maps are equal");
    Ok(())
}

/// Offers commands up to `target` through whichever node leads, and applies on every node until each has
/// applied `target`.
fn run(
    nodes: &mut [Node],
    stores: &mut [KvStore],
    offered: &mut u32,
    target: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut encoded = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Not `yield_now` when idle: it would take a whole core whenever nothing else wants one.
    let mut idle = Idle::backoff();
    while stores.iter().any(|s| s.applied < target) {
        if Instant::now() > deadline {
            return Err(format!("stalled: offered {offered}, applied {:?}", applied(stores)).into());
        }
        let mut work = 0;
        // The members elect their leader (member 0 is preferred): offers go to whichever leads, and wait
        // while none does.
        let leader = nodes.iter().find(|n| n.role() == Role::Leader).map(Node::client);
        while let (true, Some(client)) = (*offered < target, leader.as_ref()) {
            command(*offered).encode(&mut encoded);
            match client.offer(&encoded) {
                Ok(_) => *offered += 1,
                Err(LocalOfferError::BackPressured | LocalOfferError::NotLeader { .. }) => break,
                Err(e) => return Err(e.into()),
            }
            work += 1;
        }
        for (node, store) in nodes.iter_mut().zip(stores.iter_mut()) {
            work += node.invoke()?;
            work += node.poll_state(store, 1024)?;
        }
        idle.idle(work);
    }
    Ok(())
}

fn applied(stores: &[KvStore]) -> Vec<u32> {
    stores.iter().map(|s| s.applied).collect()
}
