//! A snapshot received from another member, installed in pieces, and the temporary file every new
//! snapshot is written to before it is made durable under its name.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::format::Header;
use super::{io_error, SnapshotError, SnapshotInfo};
use crate::storage::disk::{FileCursor, SharedDisk};

/// Makes the whole temporary file `file` durable under `path` in `dir`: sync, rename, sync of the directory.
pub(super) fn commit(
    disk: &SharedDisk,
    dir: &Path,
    mut temp: TempFile,
    file: FileCursor,
    path: &Path,
) -> Result<(), SnapshotError> {
    file.file().sync_data().map_err(io_error(&temp.path, "sync it"))?;
    drop(file);
    disk.rename(&temp.path, path).map_err(io_error(path, "rename its temporary file into place"))?;
    temp.committed = true;
    disk.sync_dir(dir).map_err(io_error(dir, "sync the directory"))
}

/// A snapshot being installed in pieces ([`SnapshotStore::begin_install`](super::SnapshotStore::begin_install)):
/// its checked header, and its temporary file, which is removed if this is dropped before
/// [`finish`](Self::finish) stored it.
#[derive(Debug)]
pub struct SnapshotInstall {
    header: Header,
    path: PathBuf,
    dir: PathBuf,
    disk: SharedDisk,
    temp: TempFile,
    file: FileCursor,
    hasher: blake3::Hasher,
    copied: u64,
}

impl SnapshotInstall {
    /// An install of the snapshot `header` checked, to be stored as `path` in `dir`, whose header is
    /// already written to `file`, the temporary file `temp`.
    pub(super) fn new(
        header: Header,
        path: PathBuf,
        dir: PathBuf,
        disk: SharedDisk,
        temp: TempFile,
        file: FileCursor,
    ) -> Self {
        Self { header, path, dir, disk, temp, file, hasher: blake3::Hasher::new(), copied: 0 }
    }

    /// The position of the snapshot being installed.
    pub fn position(&self) -> i64 {
        self.header.position
    }

    /// State bytes still to come.
    pub fn remaining(&self) -> u64 {
        self.header.length - self.copied
    }

    /// Takes the next `bytes` of the state: refused if they run past its length.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        if bytes.len() as u64 > self.remaining() {
            return Err(SnapshotError::Refused {
                reason: format!(
                    "more state came than the {} bytes its header says; have it sent again",
                    self.header.length
                ),
            });
        }
        self.hasher.update(bytes);
        self.file.write_all(bytes).map_err(io_error(&self.temp.path, "write it"))?;
        self.copied += bytes.len() as u64;
        Ok(())
    }

    /// Stores the snapshot, durable when it returns, if all of its state came and its hash matches;
    /// otherwise refuses it and leaves nothing behind.
    pub fn finish(self) -> Result<SnapshotInfo, SnapshotError> {
        if self.copied != self.header.length {
            return Err(SnapshotError::Refused {
                reason: format!(
                    "the stream ended after {} of its {} bytes of state; have it sent again",
                    self.copied, self.header.length
                ),
            });
        }
        if self.hasher.finalize() != self.header.state_checksum {
            return Err(SnapshotError::Refused {
                reason: "it fails its checksum (damaged in transit or at the sender); have it sent again".into(),
            });
        }
        commit(&self.disk, &self.dir, self.temp, self.file, &self.path)?;
        Ok(self.header.info(self.path))
    }
}

/// A temporary snapshot file, removed when dropped unless it was renamed into place.
#[derive(Debug)]
pub(super) struct TempFile {
    pub(super) path: PathBuf,
    disk: SharedDisk,
    committed: bool,
}

impl TempFile {
    /// The temporary file `path` on `disk`, created by the caller, removed when dropped unless committed.
    pub(super) fn new(path: PathBuf, disk: SharedDisk) -> Self {
        Self { path, disk, committed: false }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.disk.remove_file(&self.path);
        }
    }
}
