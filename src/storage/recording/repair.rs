//! `repair.dat`: the end of the log a member held before recovery found its recording damaged below what
//! it had synced. While the file is there the member repairs (`consensus_core::repair`): it votes only for
//! logs as up to date as the one it held, and never stands, until its log holds that end again or a leader
//! cuts it back. The file survives restarts during the repair (the recording no longer shows the damage
//! once cut), and goes once the recording is synced up to the end, or cut back.
//!
//! One record, replaced whole and synced (`atomic_file`), with a checksum: a file that fails it is refused
//! at start, naming it (the member cannot tell what it held).

use std::io;
use std::path::Path;

use bytemuck::{Pod, Zeroable};

use crate::storage::disk::Disk;

/// The file's name, in the recording's directory.
pub(super) const REPAIR_FILE: &str = "repair.dat";
const MAGIC: u64 = u64::from_le_bytes(*b"qcrep001");

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct RepairRecord {
    magic: u64,
    /// The end of the log held before the loss.
    held: i64,
    /// The first 8 bytes of BLAKE3 over the fields before it.
    checksum: u64,
}

const _: () = assert!(std::mem::size_of::<RepairRecord>() == 24);

fn checksum(record: &RepairRecord) -> u64 {
    let hash = blake3::hash(&bytemuck::bytes_of(record)[..16]);
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The end held before a loss being repaired, if `dir` has the file; `Err` with what is wrong with one
/// that does not verify.
pub(super) fn load(disk: &dyn Disk, dir: &Path) -> Result<Option<i64>, String> {
    let bytes = match disk.read(&dir.join(REPAIR_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if bytes.len() != std::mem::size_of::<RepairRecord>() {
        return Err(format!("is {} bytes, not one repair record", bytes.len()));
    }
    let record: RepairRecord = bytemuck::pod_read_unaligned(&bytes);
    if record.magic != MAGIC || record.checksum != checksum(&record) || record.held < 0 {
        return Err("is not a whole repair record (its magic number or checksum is wrong)".into());
    }
    Ok(Some(record.held))
}

/// Makes `held` the end to repair up to, durably (file and directory synced).
pub(super) fn store(disk: &dyn Disk, dir: &Path, held: i64) -> io::Result<()> {
    let mut record = RepairRecord { magic: MAGIC, held, checksum: 0 };
    record.checksum = checksum(&record);
    crate::storage::atomic_file::replace(disk, &dir.join(REPAIR_FILE), bytemuck::bytes_of(&record), true)
        .map_err(|f| io::Error::new(f.source.kind(), format!("{} {}: {}", f.action, f.path.display(), f.source)))
}

/// The repair is over: the file goes (a missing one is no error), durably.
pub(super) fn remove(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    match disk.remove_file(&dir.join(REPAIR_FILE)) {
        Ok(()) => disk.sync_dir(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
