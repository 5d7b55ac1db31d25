//! # quorumcast-tools
//!
//! The operators' tools: what runs and watches the members of a cluster. The binaries: `qc-node` (one
//! member from a TOML node file), `qc-cluster` (the cluster as an operator sees it: describe, add,
//! promote and remove members, transfer leadership, snapshot, plan a recovery) and `qc-stat` (a running
//! node's counters, as a table, JSON or Prometheus text). What measures the engine (the sweep, its
//! report, the benches, `qc-client`, `qc-probe`, `qc-model`) is the crate `quorumcast-bench`, in
//! `benches/`.
//!
//! - [`admin`]: the admin requests `qc-cluster` sends a running member over its shared-memory rings;
//! - [`cluster_view`]: the members on this host as their counters say (`qc-cluster describe`);
//! - [`prometheus`]: the counters in Prometheus' text format (`qc-stat --prometheus`);
//! - [`recovery_plan`]: what a restart of a stopped member would read, replay and catch up, from its data
//!   directory (`qc-cluster recovery-plan`).

pub mod admin;
pub mod cluster_view;
pub mod prometheus;
pub mod recovery_plan;
