//! A replicated order book with remote traders: three quorumcast nodes in one process, each applying the
//! committed log to its own `Book` (a `StateMachine` using the service interface), and two traders that
//! are `ClusterClient`s over UDP, as they would be on other hosts.
//!
//! ```text
//! cargo run --example order_book
//! ```
//!
//! What it shows, each deterministic on every member and kept in every snapshot:
//! - a trader is greeted when its session opens (a push: `Cluster::push` in `on_session_open`);
//! - an order that crosses fills; the taker gets its response, the resting order's owner a pushed fill;
//! - an order rests with a time to live: a timer (`Cluster::schedule_timer`, in cluster time) expires it
//!   and tells its owner;
//! - a trader whose session closes has its resting orders cancelled (`on_session_close`);
//! - every node snapshots its book, all three restart from their snapshots, and the books are equal.
//!
//! The nodes run in invoker mode: this thread drives every node's agents and the traders' clients, and
//! backs off when a round did nothing. In a deployment each node is its own process (`qc-node`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quorumcast::{
    AuthKey, ClientConfig, ClientEndpointConfig, CloseReason, Cluster, ClusterClient, Entry, Event, Idle, Member, Node,
    NodeBuilder, SessionRefused, StateMachine, ThreadingMode,
};

/// A resting order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Order {
    owner: u64,
    buy: bool,
    price: u64,
    quantity: u64,
}

/// The replicated book: resting orders by id (ids in arrival order give time priority).
#[derive(Debug, Default, PartialEq, Eq)]
struct Book {
    orders: BTreeMap<u64, Order>,
    next_id: u64,
}

impl StateMachine for Book {
    /// `BUY|SELL price quantity ttl_ms` from a trader.
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        let Some(owner) = entry.client.map(|c| c.session_id) else {
            return;
        };
        let text = String::from_utf8_lossy(entry.payload);
        let words: Vec<&str> = text.split_whitespace().collect();
        let (buy, numbers) = match words.as_slice() {
            ["BUY", rest @ ..] => (true, rest),
            ["SELL", rest @ ..] => (false, rest),
            _ => return cluster.response().extend_from_slice(b"REJECTED: BUY|SELL price quantity ttl_ms"),
        };
        let Ok([price, mut quantity, ttl_ms]) =
            <[&str; 3]>::try_from(numbers.to_vec()).map(|n| n.map(|n| n.parse::<u64>().unwrap_or(0)))
        else {
            return cluster.response().extend_from_slice(b"REJECTED: three numbers");
        };
        self.next_id += 1;
        let id = self.next_id;
        let mut filled = 0;
        // Match against the other side, best price first, then time.
        while quantity > 0 {
            let best = self
                .orders
                .iter()
                .filter(|(_, o)| o.buy != buy && if buy { o.price <= price } else { o.price >= price })
                .min_by_key(|(&id, o)| (if buy { o.price } else { u64::MAX - o.price }, id))
                .map(|(&id, o)| (id, o.clone()));
            let Some((maker_id, maker)) = best else {
                break;
            };
            let traded = quantity.min(maker.quantity);
            quantity -= traded;
            filled += traded;
            let fill = format!("FILL order {maker_id}: {traded} at {}", maker.price);
            // The maker did not ask: its fill is pushed, once, in order, across failovers.
            let _ = cluster.push(maker.owner, fill.as_bytes());
            let rest = maker.quantity - traded;
            if rest == 0 {
                self.orders.remove(&maker_id);
                cluster.cancel_timer(maker_id);
            } else {
                self.orders.get_mut(&maker_id).expect("resting").quantity = rest;
            }
        }
        if quantity > 0 {
            self.orders.insert(id, Order { owner, buy, price, quantity });
            // Expires in cluster time: the same entry on every member, whatever their clocks.
            let _ = cluster.schedule_timer(id, cluster.time() + Duration::from_millis(ttl_ms));
        }
        let answer = format!("ORDER {id}: filled {filled}, resting {quantity}");
        cluster.response().extend_from_slice(answer.as_bytes());
    }

    fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        let _ = cluster.push(session_id, format!("WELCOME, trader {session_id}").as_bytes());
        Ok(())
    }

    /// A trader that leaves takes its resting orders with it.
    fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        let theirs: Vec<u64> = self.orders.iter().filter(|(_, o)| o.owner == session_id).map(|(&id, _)| id).collect();
        for id in &theirs {
            self.orders.remove(id);
            cluster.cancel_timer(*id);
        }
        if cluster.member_id() == 0 {
            println!("  [member 0] session {session_id} closed ({reason:?}): cancelled orders {theirs:?}");
        }
    }

    fn on_timer(&mut self, order_id: u64, cluster: &mut Cluster<'_>) {
        if let Some(order) = self.orders.remove(&order_id) {
            let expired = format!("EXPIRED order {order_id}: {} unfilled", order.quantity);
            let _ = cluster.push(order.owner, expired.as_bytes());
        }
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.next_id.to_le_bytes())?;
        writer.write_all(&(self.orders.len() as u64).to_le_bytes())?;
        for (id, o) in &self.orders {
            for word in [*id, o.owner, u64::from(o.buy), o.price, o.quantity] {
                writer.write_all(&word.to_le_bytes())?;
            }
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let mut word = || -> std::io::Result<u64> {
            let mut bytes = [0; 8];
            reader.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        self.next_id = word()?;
        self.orders.clear();
        for _ in 0..word()? {
            let (id, owner, buy, price, quantity) = (word()?, word()?, word()? == 1, word()?, word()?);
            self.orders.insert(id, Order { owner, buy, price, quantity });
        }
        Ok(())
    }
}

/// A trader: its client and what it heard.
struct Trader {
    name: &'static str,
    client: ClusterClient,
    heard: Vec<String>,
}

/// The cluster and its traders, driven by this thread.
struct Market {
    nodes: Vec<Node>,
    books: Vec<Book>,
    traders: Vec<Trader>,
}

impl Market {
    /// Runs everything until `done`, printing what the traders hear.
    fn run_until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Market) -> bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut idle = Idle::backoff();
        while !done(self) {
            if Instant::now() > deadline {
                return Err(format!("stalled waiting for {what}").into());
            }
            let mut work = 0;
            for (node, book) in self.nodes.iter_mut().zip(self.books.iter_mut()) {
                work += node.invoke()?;
                work += node.poll_state(book, 256)?;
            }
            for trader in &mut self.traders {
                let name = trader.name;
                let heard = &mut trader.heard;
                work += trader.client.poll(|event| {
                    let line = match event {
                        Event::Pushed { payload, .. } => format!("pushed: {}", String::from_utf8_lossy(payload)),
                        Event::Committed { response, .. } => format!("answer: {}", String::from_utf8_lossy(response)),
                        other => format!("{other:?}"),
                    };
                    println!("  {name} <- {line}");
                    heard.push(line);
                });
            }
            idle.idle(work);
        }
        Ok(())
    }

    fn heard(&self, trader: usize, what: &str) -> bool {
        self.traders[trader].heard.iter().any(|line| line.contains(what))
    }

    fn order(&mut self, trader: usize, order: &str) -> Result<(), Box<dyn std::error::Error>> {
        println!("{} -> {order}", self.traders[trader].name);
        self.traders[trader].client.offer(order.as_bytes())?;
        self.run_until(order, |m| m.traders[trader].client.in_flight() == 0)
    }
}

fn free_endpoint() -> Result<SocketAddr, std::io::Error> {
    UdpSocket::bind("127.0.0.1:0")?.local_addr()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let members: Vec<Member> = (0..3)
        .map(|id| Ok(Member::new(id, free_endpoint()?).with_consensus(free_endpoint()?).with_client(free_endpoint()?)))
        .collect::<Result<_, std::io::Error>>()?;
    let base = std::env::temp_dir().join(format!("qc-order-book-{}", std::process::id()));
    // Every member holds the same session key: a production cluster reads it from a file (`[clients]`).
    let clients = ClientEndpointConfig::enabled(AuthKey::new([7; 32]));
    let start = |id: i32| {
        NodeBuilder::new(id, members.clone())
            .leader(0)
            .directory(base.join(format!("node-{id}")))
            .data_dir(base.join(format!("data-{id}")))
            .clean_stale(true)
            .threading(ThreadingMode::Invoker)
            .clients(clients.clone())
            .start()
    };
    let trader = |name| -> Result<Trader, Box<dyn std::error::Error>> {
        let config = ClientConfig::new(members.iter().map(|m| (m.id, m.client)).collect());
        Ok(Trader { name, client: ClusterClient::new(config)?, heard: Vec::new() })
    };
    let mut market = Market {
        nodes: (0..3).map(start).collect::<Result<_, _>>()?,
        books: (0..3).map(|_| Book::default()).collect(),
        traders: vec![trader("alice")?, trader("bob")?],
    };
    for i in 0..market.traders.len() {
        println!("{} connects", market.traders[i].name);
        market.traders[i].client.start_connect();
        market.run_until("a session", |m| m.traders[i].client.session_id().is_some())?;
    }

    market.order(0, "SELL 100 10 60000")?; // rests for a minute
    market.order(1, "BUY 100 4 60000")?; // crosses: bob is answered, alice is pushed her fill
    market.run_until("alice's fill", |m| m.heard(0, "FILL order 1: 4 at 100"))?;
    market.order(0, "SELL 105 5 100")?; // rests for 100 ms of cluster time, then expires
    market.run_until("the expiry", |m| m.heard(0, "EXPIRED order 3"))?;
    market.order(1, "BUY 95 3 60000")?; // rests, until bob leaves
    println!("bob closes his session");
    market.traders[1].client.close();
    market.run_until("bob's orders cancelled", |m| m.books.iter().all(|b| b.orders.values().all(|o| !o.buy)))?;

    for (node, book) in market.nodes.iter_mut().zip(market.books.iter_mut()) {
        node.take_snapshot(book)?;
    }
    let before = std::mem::take(&mut market.books);
    for node in std::mem::take(&mut market.nodes) {
        node.close()?;
    }
    println!("all three nodes stopped; starting them again from their snapshots");
    market.nodes = (0..3).map(start).collect::<Result<_, _>>()?;
    market.books = (0..3).map(|_| Book::default()).collect();
    for (node, book) in market.nodes.iter_mut().zip(market.books.iter_mut()) {
        node.restore(book)?;
    }
    let _ = std::fs::remove_dir_all(&base);
    println!("book on each member: {:?}", market.books[0].orders);
    if market.books.iter().any(|b| *b != before[0]) || before.iter().any(|b| *b != before[0]) {
        return Err("the books differ".into());
    }
    println!("the three books are equal, before and after the restart");
    Ok(())
}
