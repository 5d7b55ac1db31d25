//! # quorumcast-testkit
//!
//! What every in-process cluster needs around it, whoever drives it (the sweep, the benches, the tests):
//! loopback ports that two callers are never given twice, a scratch directory, node directories in shared
//! memory and a bounded wait; in [`load`], the load every harness offers and applies (numbered messages,
//! applied in sequence on every node) and its [`Driver`]; in [`cluster`], the cluster the engine's
//! integration tests build (nodes in invoker mode with fast channel timers) and the election they wait for.
//!
//! Only `std` and the engine: a dev-dependency of `quorumcast` (its integration tests) and a dependency of
//! `quorumcast-bench` (the sweep, the benches, `qc-client`) and `quorumcast-tools` (`qc-node`), so that all
//! use the very same code. The node simulator (`sim`) is behind the kit's `sim` feature, which only the
//! engine's tests turn on.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use quorumcast::Member;
use quorumcast_consensus::consensus_core::Timers;

pub mod cluster;
pub mod load;
#[cfg(feature = "sim")]
pub mod sim;
pub use load::{dump, dump_each, Applier, Driver, Messages};

/// Ports handed out so far by this process.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// The first port [`free_port`] hands out from; the range ends where the kernel's ephemeral range starts.
const FIRST_PORT: u16 = 10_000;

/// A UDP port on `ip` for a node to bind, that no other caller in this process is given and that no
/// port-0 bind anywhere on the host can take in the meantime.
///
/// Binding port 0 and releasing the socket, the usual way, races: the kernel may give the same port to the
/// next port-0 bind (another test's, in parallel) before the node binds it. So the ports come from below
/// the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), which port-0 binds never use, each one
/// at most once per process, from a start that depends on the process id so that concurrent processes
/// start apart; a port something holds now is skipped.
pub fn free_port(ip: IpAddr) -> std::io::Result<u16> {
    let end = ephemeral_start().max(FIRST_PORT + 1_000);
    let span = u32::from(end - FIRST_PORT);
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST_PORT + ((start + n) % span) as u16;
        if UdpSocket::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, format!("no free UDP port on {ip} below {end}")))
}

/// A free loopback (`127.0.0.1`) port; panics when there is none (see [`free_port`]).
pub fn free_loopback_port() -> u16 {
    free_port(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("a free loopback port")
}

/// `n` members with ids `0..n`, each on its own [`free_port`] of `ip` (`127.0.0.1`, or `::1`).
pub fn members_on(ip: IpAddr, n: i32) -> std::io::Result<Vec<Member>> {
    (0..n)
        .map(|id| {
            let endpoint = SocketAddr::new(ip, free_port(ip)?);
            Ok(Member::new(id, endpoint)
                .with_consensus(SocketAddr::new(ip, free_port(ip)?))
                .with_client(SocketAddr::new(ip, free_port(ip)?)))
        })
        .collect()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Polls `condition` (yielding) until it holds; panics naming `what` after `deadline`.
pub fn wait_until(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    if let Err(e) = load::drive_until(what, deadline, &mut (), |_| Ok((!condition()).then_some(0))) {
        panic!("{e}");
    }
}

/// Where node directories of a measured cluster go: `/dev/shm` where there is one (so logs never touch a
/// disk), else the temporary directory.
pub fn shared_memory() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The directory of member `id` in run `run` of a measuring harness (`kind`: `bench`, `sweep`): in
/// [`shared_memory`], unique to this process.
pub fn node_dir(kind: &str, run: impl std::fmt::Display, id: i32) -> PathBuf {
    shared_memory().join(format!("qc-{kind}-{}-{run}-{id}", std::process::id()))
}

/// Numbers `message` (at least 8 bytes) with `seq`: its first 8 bytes, little-endian.
pub fn number(message: &mut [u8], seq: u64) {
    message[..8].copy_from_slice(&seq.to_le_bytes());
}

/// Numbers `message` (at least 8 bytes) with `seq` as [`number`] does, and fills the rest with bytes
/// derived from `seq`, so a reader can check every byte: what qc-node's `--offer` and qc-client send.
pub fn fill_numbered(message: &mut [u8], seq: u64) {
    number(message, seq);
    for (i, byte) in message.iter_mut().enumerate().skip(8) {
        *byte = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
}

/// The number [`number`] wrote into `entry`; `u64::MAX` for an entry shorter than 8 bytes.
pub fn seq_of(entry: &[u8]) -> u64 {
    entry.get(..8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// A scratch directory unique to this process and name, emptied at creation and removed on drop (kept
/// when `QC_KEEP` is set, for looking at what a failing run left).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `<temp>/qc-test-<pid>-<name>`, fresh.
    pub fn new(name: &str) -> Self {
        Self::under(&std::env::temp_dir(), &format!("qc-test-{}-{name}", std::process::id()))
    }

    /// `/dev/shm/qc-<pid>-<name>` where there is a `/dev/shm` (so node logs never touch a disk), else
    /// under the temporary directory; fresh.
    pub fn in_shared_memory(name: &str) -> Self {
        Self::under(&shared_memory(), &format!("qc-{}-{name}", std::process::id()))
    }

    fn under(base: &Path, name: &str) -> Self {
        let path = base.join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
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

/// Consensus timers for clusters whose threads stall by design (a test thread invoking every node in
/// turn, a bench harness thread that offers, applies and runs the followers at saturation, for hundreds of
/// milliseconds behind at rho 0.9): a leader is replaced only after seconds of silence, so what they
/// measure is never an election they did not cause. Elections are measured by `cargo bench --bench
/// failover`, with the default timers and the `latency` profile's.
pub fn patient_timers() -> Timers {
    Timers {
        heartbeat_interval_ns: 20_000_000,
        heartbeat_timeout_ns: 3_000_000_000,
        election_timeout_min_ns: 4_000_000_000,
        election_timeout_max_ns: 6_000_000_000,
    }
}

/// FNV-1a, 64 bits: the running digest of applied entries that `qc-node`, its tests and the failover
/// bench compare across members (equal digests after N entries: the same N entries in the same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The digest of nothing.
    pub fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(Self::PRIME);
        }
    }

    /// The digest so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}
