//! A simulated disk with the semantics of a real one, for one simulated machine.
//!
//! Files live in memory. What a process writes is visible at once to every read (the page cache), and
//! becomes durable only when synced: a file's bytes by `sync_data`, a name made, renamed or removed by
//! `sync_dir` of its directory (directories themselves are durable once made). On a power loss
//! ([`SimDisk::power_loss`]) every file keeps what was synced plus a random prefix of the writes made since,
//! the last of them torn at a random byte, and the names go back to what was last synced. A process crash
//! ([`SimDisk::crash`]) loses nothing written, but the dead process's handles fail from then on: what its
//! close path would have written never lands.
//!
//! Faults while [`DiskFaults`] are set: writes and syncs fail (`EIO`, or `ENOSPC` for writes) at a drawn
//! rate, and a failed sync loses the writes it was to make durable for good (Linux marks the pages clean
//! after a failed writeback: a later successful sync does not bring them back), so a node that goes on as
//! if it had synced is caught after the next power loss (and [`DiskFile::drop_cache`] shows the disk's
//! bytes again, as `POSIX_FADV_DONTNEED` does); reads return a flipped bit at a drawn rate; a write lands
//! at the wrong offset (a misdirected write) at a drawn rate: it succeeds, its bytes go to another
//! sector-aligned offset below the one asked for in the same file (never the file's first sector, where a
//! file's own header is, whose damage is another fault), and the range asked for keeps what it had. Such
//! a write is synced, lost or torn as any other.
//!
//! Not simulated: writes that persist out of order, and misdirected writes across files.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use quorumcast::unstable::disk::{Disk, DiskFile, SharedDisk};

use super::prng::Prng;

/// The fault rates of a failing disk (all 0: a healthy one).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DiskFaults {
    /// The chance a write fails.
    pub write_error: f64,
    /// Failed writes say `ENOSPC` (the disk is full) rather than `EIO`.
    pub full: bool,
    /// The chance a sync (`sync_data`, `sync_dir`) fails with `EIO`.
    pub sync_error: f64,
    /// The chance a read returns one bit flipped.
    pub read_flip: f64,
    /// The chance a write (of bytes, at an offset past the file's first two sectors) lands at another
    /// offset of the same file.
    pub misdirect: f64,
}

/// The granularity at which a misdirected write lands: a disk sector.
pub const SECTOR: u64 = 512;

/// What the simulated disk did (for traces and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Writes made.
    pub writes: u64,
    /// Syncs that succeeded.
    pub syncs: u64,
    /// Writes and syncs failed on purpose.
    pub failed: u64,
    /// Reads with a bit flipped.
    pub flipped: u64,
    /// Writes that landed at another offset than the one asked for.
    pub misdirected: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Unsynced writes lost to power losses (and torn ones counted once).
    pub lost_writes: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl Op {
    fn apply(&self, data: &mut Vec<u8>) {
        match self {
            Op::Write { offset, bytes } => {
                let (at, end) = (*offset as usize, *offset as usize + bytes.len());
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[at..end].copy_from_slice(bytes);
            }
            Op::SetLen(length) => data.resize(*length as usize, 0),
        }
    }
}

#[derive(Debug, Default)]
struct Inode {
    /// What reads see.
    data: Vec<u8>,
    /// What survives a power loss.
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    pending: Vec<Op>,
}

#[derive(Debug)]
struct State {
    /// Names as reads see them.
    names: BTreeMap<PathBuf, u64>,
    /// Names as a power loss leaves them.
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// The running process's generation: handles of an older one fail.
    generation: u64,
    faults: DiskFaults,
    prng: Prng,
    stats: DiskStats,
}

/// One machine's disk. Clones share it.
#[derive(Clone, Debug)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl SimDisk {
    /// An empty disk whose draws (faults, what a power loss keeps) come from `seed`.
    pub fn new(seed: u64) -> Self {
        let state = State {
            names: BTreeMap::new(),
            durable_names: BTreeMap::new(),
            dirs: BTreeSet::new(),
            inodes: BTreeMap::new(),
            next_inode: 1,
            generation: 0,
            faults: DiskFaults::default(),
            prng: Prng::new(seed),
            stats: DiskStats::default(),
        };
        Self { state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The disk as the process running now sees it: a [`SharedDisk`] for its environment.
    pub fn process(&self) -> SharedDisk {
        let generation = self.lock().generation;
        SharedDisk::new(ProcessDisk { disk: self.clone(), generation })
    }

    /// The running process died (`kill -9`): its handles fail from now on; what it wrote stays.
    pub fn crash(&self) {
        self.lock().generation += 1;
    }

    /// The machine lost power: the process is gone (as by [`crash`](Self::crash)), and every file keeps
    /// what was synced and a drawn prefix of what was written since (the last write kept torn at a drawn
    /// byte); names go back to those last synced.
    pub fn power_loss(&self) {
        let mut state = self.lock();
        let state = &mut *state;
        state.generation += 1;
        state.stats.power_losses += 1;
        for inode in state.inodes.values_mut() {
            let pending = std::mem::take(&mut inode.pending);
            let kept = state.prng.below(pending.len() + 1);
            state.stats.lost_writes += (pending.len() - kept) as u64;
            for (i, op) in pending.iter().take(kept).enumerate() {
                match op {
                    Op::Write { offset, bytes } if i + 1 == kept && state.prng.chance(0.5) => {
                        let torn = state.prng.below(bytes.len() + 1);
                        Op::Write { offset: *offset, bytes: bytes[..torn].to_vec() }.apply(&mut inode.durable);
                        state.stats.lost_writes += 1;
                    }
                    op => op.apply(&mut inode.durable),
                }
            }
            inode.data = inode.durable.clone();
        }
        state.names = state.durable_names.clone();
        let named: BTreeSet<u64> = state.names.values().copied().collect();
        state.inodes.retain(|ino, _| named.contains(ino));
    }

    /// Sets the fault rates (a healthy disk: `DiskFaults::default()`).
    pub fn set_faults(&self, faults: DiskFaults) {
        self.lock().faults = faults;
    }

    /// What it did.
    pub fn stats(&self) -> DiskStats {
        self.lock().stats
    }
}

fn gone() -> io::Error {
    io::Error::other("the process that opened this file is gone")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display()))
}

impl State {
    fn check(&self, generation: u64) -> io::Result<()> {
        if generation == self.generation {
            Ok(())
        } else {
            Err(gone())
        }
    }

    fn fail_write(&mut self) -> io::Result<()> {
        if self.faults.write_error > 0.0 && self.prng.chance(self.faults.write_error) {
            self.stats.failed += 1;
            let code = if self.faults.full { libc::ENOSPC } else { libc::EIO };
            return Err(io::Error::from_raw_os_error(code));
        }
        Ok(())
    }

    fn fail_sync(&mut self) -> io::Result<()> {
        if self.faults.sync_error > 0.0 && self.prng.chance(self.faults.sync_error) {
            self.stats.failed += 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    /// Where a write asked at `offset` lands: there, or (at the misdirect rate) a drawn sector-aligned
    /// offset in `[SECTOR, offset)`, counted.
    fn landing(&mut self, offset: u64) -> u64 {
        if self.faults.misdirect <= 0.0 || offset < 2 * SECTOR || !self.prng.chance(self.faults.misdirect) {
            return offset;
        }
        let sectors = (offset - 1) / SECTOR;
        let at = SECTOR * (1 + self.prng.below(sectors as usize) as u64);
        self.stats.misdirected += 1;
        at
    }

    fn inode(&mut self, ino: u64) -> &mut Inode {
        self.inodes.entry(ino).or_default()
    }

    fn parent_exists(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() && !self.dirs.contains(dir) => Err(not_found(dir)),
            _ => Ok(()),
        }
    }
}

/// The disk as one process sees it.
#[derive(Debug)]
struct ProcessDisk {
    disk: SimDisk,
    generation: u64,
}

#[derive(Debug)]
struct SimFile {
    disk: SimDisk,
    generation: u64,
    ino: u64,
    writable: bool,
}

impl ProcessDisk {
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.disk.lock();
        state.check(self.generation)?;
        Ok(state)
    }

    fn file(&self, ino: u64, writable: bool) -> Box<dyn DiskFile> {
        Box::new(SimFile { disk: self.disk.clone(), generation: self.generation, ino, writable })
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        self.state()?.names.get(path).copied().ok_or_else(|| not_found(path))
    }
}

impl Disk for ProcessDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.state()?;
        state.parent_exists(path)?;
        state.fail_write()?;
        let ino = match state.names.get(path) {
            Some(&ino) => {
                let inode = state.inode(ino);
                inode.data.clear();
                inode.pending.push(Op::SetLen(0));
                ino
            }
            None => {
                let ino = state.next_inode;
                state.next_inode += 1;
                state.inodes.insert(ino, Inode::default());
                state.names.insert(path.to_path_buf(), ino);
                ino
            }
        };
        Ok(self.file(ino, true))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        Ok(self.file(self.lookup(path)?, true))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        Ok(self.file(self.lookup(path)?, false))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        let ino = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.names.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        state.names.remove(path).map(drop).ok_or_else(|| not_found(path))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state()?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let names = state.names.keys().filter(|p| p.parent() == Some(dir));
        Ok(names.filter_map(|p| p.file_name()?.to_str().map(str::to_owned)).collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        state.fail_sync()?;
        let state = &mut *state;
        state.durable_names.retain(|p, _| p.parent() != Some(dir));
        for (path, &ino) in state.names.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            state.durable_names.insert(path.clone(), ino);
        }
        state.stats.syncs += 1;
        Ok(())
    }
}

impl SimFile {
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.disk.lock();
        state.check(self.generation)?;
        Ok(state)
    }

    fn write_op(&self, op: Op) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let mut state = self.state()?;
        state.fail_write()?;
        state.stats.writes += 1;
        let op = match op {
            Op::Write { offset, bytes } => Op::Write { offset: state.landing(offset), bytes },
            op => op,
        };
        let inode = state.inode(self.ino);
        op.apply(&mut inode.data);
        inode.pending.push(op);
        Ok(())
    }
}

impl DiskFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut state = self.state()?;
        let state = &mut *state;
        let data = &state.inodes.entry(self.ino).or_default().data;
        let end = offset as usize + buf.len();
        if end > data.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file"));
        }
        buf.copy_from_slice(&data[offset as usize..end]);
        if !buf.is_empty() && state.faults.read_flip > 0.0 && state.prng.chance(state.faults.read_flip) {
            let bit = state.prng.below(buf.len() * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
            state.stats.flipped += 1;
        }
        Ok(())
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_op(Op::Write { offset, bytes: bytes.to_vec() })
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.state()?.inode(self.ino).data.len() as u64)
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.write_op(Op::SetLen(length))
    }

    fn drop_cache(&self) {
        let Ok(mut state) = self.state() else { return };
        let inode = state.inode(self.ino);
        // Pages written since the last sync are dirty and stay; the rest are read from the disk again.
        let mut data = inode.durable.clone();
        for op in &inode.pending {
            op.apply(&mut data);
        }
        inode.data = data;
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state()?;
        let failed = state.fail_sync();
        let inode = state.inode(self.ino);
        let pending = std::mem::take(&mut inode.pending);
        // On a failure the kernel drops the dirty pages' state: those writes are never made durable.
        failed?;
        for op in &pending {
            op.apply(&mut inode.durable);
        }
        state.stats.syncs += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> PathBuf {
        PathBuf::from(p)
    }

    #[test]
    fn a_power_loss_keeps_what_was_synced_and_names_synced_in_their_directory() {
        let disk = SimDisk::new(1);
        let process = disk.process();
        process.create_dir_all(&path("/d")).unwrap();
        let file = process.create(&path("/d/a")).unwrap();
        file.write_all_at(b"synced", 0).unwrap();
        file.sync_data().unwrap();
        process.sync_dir(&path("/d")).unwrap();
        let unsynced_name = process.create(&path("/d/b")).unwrap();
        unsynced_name.write_all_at(b"x", 0).unwrap();
        unsynced_name.sync_data().unwrap();
        for _ in 0..8 {
            file.write_all_at(b"more", 6).unwrap();
        }
        disk.power_loss();
        assert!(file.len().is_err(), "the dead process's handle must fail");
        let after = disk.process();
        let bytes = after.read(&path("/d/a")).unwrap();
        assert!(bytes.starts_with(b"synced") && bytes.len() <= 10, "{bytes:?}");
        assert_eq!(after.list(&path("/d")).unwrap(), vec!["a".to_string()]);
    }

    #[test]
    fn a_failed_sync_loses_its_writes_for_good() {
        let disk = SimDisk::new(2);
        let process = disk.process();
        process.create_dir_all(&path("/d")).unwrap();
        let file = process.create(&path("/d/a")).unwrap();
        process.sync_dir(&path("/d")).unwrap();
        file.write_all_at(b"lost", 0).unwrap();
        disk.set_faults(DiskFaults { sync_error: 1.0, ..DiskFaults::default() });
        assert!(file.sync_data().is_err());
        disk.set_faults(DiskFaults::default());
        file.sync_data().unwrap();
        assert_eq!(process.read(&path("/d/a")).unwrap(), b"lost", "the page cache still has it");
        let reopened = process.open(&path("/d/a")).unwrap();
        reopened.drop_cache();
        assert_eq!(process.read(&path("/d/a")).unwrap(), b"", "read from the disk again, it is gone");
        disk.power_loss();
        assert_eq!(disk.process().read(&path("/d/a")).unwrap(), b"", "but the disk never did");
    }

    #[test]
    fn a_misdirected_write_lands_on_a_sector_below_and_leaves_the_range_asked_for_as_it_was() {
        let disk = SimDisk::new(4);
        let process = disk.process();
        process.create_dir_all(&path("/d")).unwrap();
        let file = process.create(&path("/d/a")).unwrap();
        process.sync_dir(&path("/d")).unwrap();
        let old = vec![7u8; 4 * SECTOR as usize];
        file.write_all_at(&old, 0).unwrap();
        disk.set_faults(DiskFaults { misdirect: 1.0, ..DiskFaults::default() });
        file.write_all_at(&[9u8; 8], 3 * SECTOR).unwrap();
        // Too near the start to have a sector below it other than the first: written where asked.
        file.write_all_at(b"near", SECTOR).unwrap();
        file.sync_data().unwrap();
        assert_eq!(disk.stats().misdirected, 1);
        disk.power_loss();
        let bytes = disk.process().read(&path("/d/a")).unwrap();
        assert_eq!(&bytes[SECTOR as usize..SECTOR as usize + 4], b"near");
        assert_eq!(&bytes[3 * SECTOR as usize..3 * SECTOR as usize + 8], &[7u8; 8], "the range asked for is as it was");
        let landed = (1..3).map(|s| s * SECTOR as usize).filter(|&at| bytes[at + 4..at + 8] == [9u8; 4]).count();
        assert_eq!(landed, 1, "the bytes are on one sector below, synced");
    }

    #[test]
    fn a_crash_keeps_every_write_and_fails_the_old_handles() {
        let disk = SimDisk::new(3);
        let process = disk.process();
        process.create_dir_all(&path("/d")).unwrap();
        let file = process.create(&path("/d/a")).unwrap();
        file.write_all_at(b"cached", 0).unwrap();
        disk.crash();
        assert!(file.write_all_at(b"late", 0).is_err());
        assert_eq!(disk.process().read(&path("/d/a")).unwrap(), b"cached");
    }
}
