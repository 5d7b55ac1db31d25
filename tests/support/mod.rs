//! What several integration tests share.
#![allow(dead_code)] // each test crate uses its own subset

use quorumcast::node::Node;

pub mod cluster;

// The harness the sweep and the benches use too (ports, scratch directories, waits), compiled in here so
// that the engine's tests do not depend on the tools crate.
#[path = "../../tools/src/harness.rs"]
mod harness;
#[allow(unused_imports)] // as `dead_code` above: each test crate uses its own subset
pub use harness::{free_loopback_port, free_port, wait_until, ScratchDir};

/// Every non-zero counter of every node, for a failure message.
pub fn dump(nodes: &[Node]) -> String {
    let mut out = String::new();
    for node in nodes {
        out += &format!("node {}:\n", node.id());
        node.counters().reader().for_each(|_, _, label, value| {
            if value != 0 {
                out += &format!("  {label}: {value}\n");
            }
        });
    }
    out
}
