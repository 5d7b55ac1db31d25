//! What several integration tests share.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};

use quorumcast::node::Node;

pub mod cluster;

/// A scratch directory unique to this process and test, emptied at creation and removed on drop (kept
/// when `QC_KEEP` is set, for looking at what a failing test left).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `<temp>/qc-test-<pid>-<name>`, fresh.
    pub fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("qc-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::env::var_os("QC_KEEP").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

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

/// The keys every entry of `configs` in a sweep's summary.json has (the report schema, kept here apart
/// from the code that writes it).
pub const SWEEP_CONFIG_KEYS: &[&str] = &[
    "mtu",
    "idle",
    "msg",
    "send_mode",
    "control",
    "s",
    "c",
    "d",
    "m_pkt",
    "mu_predicted",
    "mu_measured",
    "bottleneck",
    "points",
];
