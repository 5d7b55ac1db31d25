//! The service bench's part 3: the apply path's two services (plain `apply`, and the same work through
//! `on_message`) and their A B comparison.

use std::io::{Read, Write};

use quorumcast::{Cluster, Entry, StateMachine};
use quorumcast_bench::sweep::remote::ClientReport;

use crate::read_words;

/// The plain path: `apply` only (the least a service writes).
#[derive(Default)]
pub struct PlainService {
    applied: u64,
    digest: u64,
}

impl StateMachine for PlainService {
    fn apply(&mut self, position: i64, entry: &[u8]) {
        self.applied += 1;
        self.digest = fold(self.digest ^ position as u64, entry);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.applied.to_le_bytes())?;
        writer.write_all(&self.digest.to_le_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        [self.applied, self.digest] = read_words(reader)?;
        Ok(())
    }
}

/// The same work through `on_message`, reading the cluster's time and response for every entry.
#[derive(Default)]
pub struct InterfaceService {
    applied: u64,
    digest: u64,
}

impl StateMachine for InterfaceService {
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        self.applied += 1;
        let time = cluster.time().as_nanos() as u64;
        // The response buffer is looked at, not written (see the module doc).
        let response = cluster.response().len() as u64;
        self.digest = fold(self.digest ^ entry.position as u64 ^ time ^ response, entry.payload);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.applied.to_le_bytes())?;
        writer.write_all(&self.digest.to_le_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        [self.applied, self.digest] = read_words(reader)?;
        Ok(())
    }
}

/// FNV-1a over the first 16 bytes of `bytes`, from `seed`: a little work per entry that reads it.
fn fold(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().take(16).fold(seed, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// One closed-loop run of the apply-path comparison.
#[derive(Debug)]
pub struct ApplyRun {
    pub interface: bool,
    pub report: ClientReport,
}

/// The comparison's runs, in the order they ran.
#[derive(Debug)]
pub struct ApplyCost {
    pub runs: Vec<ApplyRun>,
}

impl ApplyCost {
    pub fn mean(&self, interface: bool) -> f64 {
        let rates: Vec<f64> = self.runs.iter().filter(|r| r.interface == interface).map(|r| r.report.rate).collect();
        rates.iter().sum::<f64>() / rates.len().max(1) as f64
    }

    pub fn cpu(&self, interface: bool) -> Option<f64> {
        let cpu: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.interface == interface)
            .filter_map(|r| r.report.cluster_cpu_us_per_msg())
            .collect();
        (!cpu.is_empty()).then(|| cpu.iter().sum::<f64>() / cpu.len() as f64)
    }

    pub fn ratio(&self) -> f64 {
        self.mean(true) / self.mean(false).max(f64::MIN_POSITIVE)
    }

    /// The cluster's CPU per message through `on_message` over through `apply`: steadier than the rates
    /// on a shared host (a rate moves with what else runs; the CPU a message costs much less).
    pub fn cpu_ratio(&self) -> Option<f64> {
        Some(self.cpu(true)? / self.cpu(false)?.max(f64::MIN_POSITIVE))
    }
}
