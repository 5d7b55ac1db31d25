//! # quorumcast-bench
//!
//! What holds quorumcast to its throughput model `peak_TPS = (S - C) / D x M_pkt`: the measurements, the
//! benches (`benches/benches/`) and the sizing tools. `cargo bench --bench sweep` at the top level runs the
//! main job.
//!
//! - [`model`]: the throughput model as pure functions (the calculator behind `qc-model`);
//! - [`probe`]: this host's S, measured with the engine's own sockets (behind `qc-probe`);
//! - [`hiccup`]: this host's own stalls, the floor under every latency tail (`qc-probe --hiccups`, and the
//!   sweep's first line of figures);
//! - [`sweep`]: the model against a running 3-node loopback cluster (`cargo bench --bench sweep`), with
//!   [`sweep::cluster`] the in-process cluster the sweep and the benches drive;
//! - [`report`]: the sweep report (JSON, `.hgrm`, Markdown and HTML) and its console;
//! - [`budget`]: the leader Sender's capacity as a measured budget (its time split: data calls, control
//!   calls, own code, idle) beside the seed model, whose error it takes apart term by term;
//! - [`disk_floor`]: this disk's `fdatasync` latency and write rates, the floor under the recorded log's
//!   figures (the cluster bench's floor row);
//! - [`host_memory`]: whether the hypervisor takes freed guest memory back (free page reporting), which a
//!   recorder's page cache then pays for on every new page;
//! - [`bench`](mod@bench): what the benches share: pinned thread pairs, percentiles, the host's
//!   description and their `target/<bench>/latest/summary.json`;
//! - [`client_load`]: the load of a remote client (behind `qc-client`), and [`sweep::remote`], a
//!   `qc-client` process driving an in-process cluster (`cargo bench --bench client`, the sweep's
//!   `--client-process`).
//!
//! The binaries: `qc-client` (a remote client's load and latency, or the UDP round trip to an echo),
//! `qc-probe` (this host's S and stalls) and `qc-model` (the model's table for a deployment). The harness
//! around an in-process cluster (ports, scratch directories, waits, the numbered load and its driver) is
//! the crate `quorumcast-testkit`, which the engine's integration tests use too; the operators' tools are
//! `quorumcast-tools`, in `tools/`.

pub mod bench;
pub mod budget;
pub mod client_load;
pub mod disk_floor;
pub mod hiccup;
pub mod host_memory;
pub mod model;
pub mod probe;
pub mod report;
pub mod sweep;
