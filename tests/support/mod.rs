//! What several integration tests share.
#![allow(dead_code)] // each test crate uses its own subset

pub mod cluster;

// The harness the sweep and the benches use too (ports, scratch directories, waits, the load and its
// driver), compiled in here so that the engine's tests do not depend on the tools crate.
#[path = "../../tools/src/harness/mod.rs"]
mod harness;
#[allow(unused_imports)] // as `dead_code` above: each test crate uses its own subset
pub use harness::cluster::dump;
#[allow(unused_imports)]
pub use harness::{free_loopback_port, free_port, patient_timers, wait_until, ScratchDir};
