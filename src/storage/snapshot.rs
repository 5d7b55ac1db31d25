//! Snapshots of an application's replicated state machine, so that the log before one can be deleted and a
//! restarted member rebuilds its state from the newest snapshot plus a replay of the log after it.
//!
//! A [`StateMachine`] is snapshotted at a log position `P`: its state after applying every committed entry
//! that ends at or before `P`, so a restore followed by a replay of the log from `P` rebuilds it. The
//! [`SnapshotStore`] keeps such snapshots in one directory (e.g. `<data dir>/snapshots`) and holds these
//! invariants:
//!
//! - **One file per snapshot, whole or absent.** A snapshot is `snapshot-<P, 20 digits>.qcsnap`: an
//!   [`HEADER_LENGTH`]-byte header (magic, format version, the cluster's [`SnapshotIdentity`], `P`, the
//!   leadership term, the state's length, the BLAKE3 hash of the state, and a checksum of the header
//!   itself) followed by exactly that many state bytes, as the application wrote them. Both
//!   [`SnapshotStore::write`] and [`SnapshotStore::install`] stream into a temporary file (`….tmp`), sync
//!   it, rename it into place and sync the directory, so a crash at any moment leaves either no snapshot
//!   at `P` or a whole one; a leftover temporary file is removed at the next [`SnapshotStore::open`]. A
//!   file under its final name is never modified afterwards; only [`SnapshotStore::retain`] deletes.
//! - **Nothing unverified reaches the application.** [`SnapshotStore::restore`] first checks a file's
//!   header, identity, length and state hash in one pass, then hands the application a second pass limited
//!   to the verified length. A snapshot that fails is skipped for the next older one and reported (the
//!   file, why, what to do); a damaged or foreign file is never fatal and never a panic.
//! - **A snapshot from another member is checked before it exists here.** [`SnapshotStore::install`]
//!   checks the header, the identity and a length bound before it writes or allocates anything, and
//!   hashes the state as it streams it to a temporary file that is renamed into place only if the hash
//!   matches; a refused one leaves nothing behind. [`SnapshotStore::open_for_send`] gives the bytes it
//!   takes: a verified snapshot file, header included.
//! - **Memory is bounded.** Files and streams pass through one fixed 64 KiB buffer whatever their length
//!   (snapshots may be GiBs); no allocation is sized by a length read from a file or the network.
//!
//! One store per directory at a time: two processes writing the same directory could remove each other's
//! temporary files at open. What the store does not decide: when to snapshot, how many to keep (keep two
//! or more, so that a snapshot damaged on disk still has an older one to fall back to with the log after
//! it), and when to delete the log before [`SnapshotStore::retain`]'s oldest kept position.
//!
//! ```
//! use std::io::{Read, Write};
//! use quorumcast::unstable::snapshot::{SnapshotIdentity, SnapshotStore};
//! use quorumcast::StateMachine;
//!
//! /// A state machine that sums its entries' bytes.
//! #[derive(Default)]
//! struct Sum(u64);
//!
//! impl StateMachine for Sum {
//!     fn apply(&mut self, _position: i64, entry: &[u8]) {
//!         self.0 += entry.iter().map(|&b| u64::from(b)).sum::<u64>();
//!     }
//!     fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
//!         writer.write_all(&self.0.to_le_bytes())
//!     }
//!     fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
//!         let mut bytes = [0; 8];
//!         reader.read_exact(&mut bytes)?;
//!         self.0 = u64::from_le_bytes(bytes);
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("qc-snapshot-doc-{}", std::process::id()));
//! let identity = SnapshotIdentity { membership: 0x5eed, stream_id: 10 };
//! let store = SnapshotStore::open(&dir, identity)?;
//!
//! let mut machine = Sum::default();
//! machine.apply(64, &[1, 2, 3]);
//! store.write(64, 1, |w| machine.take_snapshot(w))?;
//!
//! // After a restart: the newest snapshot that verifies, then the log replayed from its position.
//! let mut restarted = Sum::default();
//! let restored = store.restore(|r| restarted.load_snapshot(r))?;
//! assert_eq!(restored.info.map(|info| info.position), Some(64));
//! assert!(restored.skipped.is_empty());
//! assert_eq!(restarted.0, 6);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

mod error;
mod format;
mod hashing;
mod install;
mod state_machine;

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::SnapshotError;
pub use format::{SnapshotIdentity, HEADER_LENGTH};
pub use install::SnapshotInstall;
pub use state_machine::StateMachine;

use crate::storage::disk::{FileCursor, SharedDisk};
use error::{io_error, skip_reason};
use format::{parse_name, Defect, Header, PREFIX, SUFFIX, TEMP_SUFFIX};
use hashing::{copy_hashed, Failed, HashingReader, HashingWriter};
use install::{commit, TempFile};

/// The longest state [`SnapshotStore::install`] accepts unless [`SnapshotStore::with_max_install_length`]
/// says otherwise: 64 GiB.
pub const DEFAULT_MAX_INSTALL_LENGTH: u64 = 64 << 30;

/// The one buffer files and streams are copied through.
const BUFFER: usize = 64 * 1024;

/// One snapshot file and what its header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The log position the state includes every entry up to: the log is replayed from here.
    pub position: i64,
    /// The leadership term at `position`.
    pub leadership_term_id: i64,
    /// How many bytes of state the file holds after its header.
    pub length: u64,
    /// The file.
    pub path: PathBuf,
}

impl SnapshotInfo {
    /// The whole file's length, header included: what `SnapshotStore::open_for_send`'s reader yields.
    pub fn file_length(&self) -> u64 {
        HEADER_LENGTH.saturating_add(self.length)
    }
}

/// What [`SnapshotStore::restore`] did.
#[derive(Debug)]
pub struct Restored {
    /// The snapshot loaded, or `None` when none verified (the state machine was not called: replay the
    /// log from its start, if the log still has it).
    pub info: Option<SnapshotInfo>,
    /// Each newer snapshot skipped because it failed: the file, why, and what to do.
    pub skipped: Vec<String>,
}

/// What [`SnapshotStore::open_for_send`] found.
#[derive(Debug)]
pub struct ToSend {
    /// The newest snapshot that verifies, opened, or `None` when none does.
    pub snapshot: Option<SnapshotReader>,
    /// Each newer snapshot skipped because it failed: the file, why, and what to do.
    pub skipped: Vec<String>,
}

/// A verified snapshot file opened for sending to another member: reads its whole bytes, header included,
/// which that member's [`SnapshotStore::install`] takes.
#[derive(Debug)]
pub struct SnapshotReader {
    info: SnapshotInfo,
    file: FileCursor,
}

impl SnapshotReader {
    /// The snapshot being read.
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }
}

impl Read for SnapshotReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}
/// The snapshots of one cluster's replicated state machine, in one directory.
#[derive(Debug)]
pub struct SnapshotStore {
    disk: SharedDisk,
    dir: PathBuf,
    identity: SnapshotIdentity,
    max_install_length: u64,
    /// Makes each temporary file's name unique within the store.
    temp_sequence: AtomicU64,
}

impl SnapshotStore {
    /// Opens the store in `dir` (e.g. `<data dir>/snapshots`), creating the directory if needed, for the
    /// snapshots of `identity`; removes the temporary files a crash mid-write left behind.
    pub fn open(dir: &Path, identity: SnapshotIdentity) -> Result<Self, SnapshotError> {
        Self::open_on(SharedDisk::os(), dir, identity)
    }

    /// As [`open`](Self::open), on `disk`.
    pub fn open_on(disk: SharedDisk, dir: &Path, identity: SnapshotIdentity) -> Result<Self, SnapshotError> {
        disk.create_dir_all(dir).map_err(io_error(dir, "create the directory"))?;
        let names = disk.list(dir).map_err(io_error(dir, "list the directory"))?;
        let store = Self {
            disk,
            dir: dir.to_path_buf(),
            identity,
            max_install_length: DEFAULT_MAX_INSTALL_LENGTH,
            temp_sequence: AtomicU64::new(0),
        };
        for name in names {
            if name.starts_with(PREFIX) && name.ends_with(TEMP_SUFFIX) {
                let path = dir.join(&name);
                match store.disk.remove_file(&path) {
                    Ok(()) => log::info!("removed {}, a snapshot left unfinished by a crash", path.display()),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(&path, "remove this unfinished snapshot")(e)),
                }
            }
        }
        Ok(store)
    }

    /// The store in `dir` on `disk` for reading only (a stopped member's snapshots, inspected): unlike
    /// [`open_on`](Self::open_on) it creates nothing and removes nothing (an unfinished temporary file
    /// stays), and a directory that does not exist holds no snapshot. Only the reading calls
    /// ([`list`](Self::list), [`newest`](Self::newest)) are for it.
    pub fn open_read_only(disk: SharedDisk, dir: &Path, identity: SnapshotIdentity) -> Self {
        Self {
            disk,
            dir: dir.to_path_buf(),
            identity,
            max_install_length: DEFAULT_MAX_INSTALL_LENGTH,
            temp_sequence: AtomicU64::new(0),
        }
    }

    /// The newest snapshot that verifies entirely (header, identity, length and state checksum): the one
    /// [`restore`](Self::restore) would load, and why each newer one would be skipped. Reads only.
    pub fn newest(&self) -> Result<(Option<SnapshotInfo>, Vec<String>), SnapshotError> {
        let (found, skipped) = self.newest_verified()?;
        Ok((found.map(|(info, _, _)| info), skipped))
    }

    /// The store with [`install`](Self::install) refusing a state longer than `bytes` (default
    /// [`DEFAULT_MAX_INSTALL_LENGTH`]).
    pub fn with_max_install_length(mut self, bytes: u64) -> Self {
        self.max_install_length = bytes;
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whose snapshots the store holds.
    pub fn identity(&self) -> SnapshotIdentity {
        self.identity
    }

    /// The longest state [`install`](Self::install) accepts.
    pub fn max_install_length(&self) -> u64 {
        self.max_install_length
    }

    /// The file of the snapshot at `position`.
    pub fn path_of(&self, position: i64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{position:020}{SUFFIX}"))
    }

    /// Stores a snapshot at `position` of leadership term `leadership_term_id`, whose state `write`
    /// streams (e.g. `|w| machine.take_snapshot(w)`), replacing any snapshot at that position.
    ///
    /// Durable when it returns: the state goes to a temporary file that is synced, renamed into place, and
    /// its directory synced. If `write` fails (or panics), or the file system does, no snapshot is stored
    /// and no temporary file is left.
    pub fn write(
        &self,
        position: i64,
        leadership_term_id: i64,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<SnapshotInfo, SnapshotError> {
        if position < 0 {
            return Err(SnapshotError::InvalidArgument {
                reason: format!("a snapshot's position is >= 0, not {position}"),
            });
        }
        let (temp, mut file) = self.create_temp(position)?;
        // A placeholder, overwritten once the state's length and hash are known.
        file.write_all(&[0; HEADER_LENGTH as usize]).map_err(io_error(&temp.path, "write it"))?;
        let mut writer = BufWriter::with_capacity(BUFFER, HashingWriter::new(file));
        let path = self.path_of(position);
        write(&mut writer).map_err(|source| SnapshotError::State {
            path: path.clone(),
            action: "write its state (nothing was stored)",
            source,
        })?;
        let hashing = writer.into_inner().map_err(|e| io_error(&temp.path, "write it")(e.into_error()))?;
        let (file, length, state) = hashing.finish();
        let header = Header::new(self.identity, position, leadership_term_id, length, state);
        file.file().write_all_at(bytemuck::bytes_of(&header), 0).map_err(io_error(&temp.path, "write its header"))?;
        self.commit(temp, file, &path)?;
        Ok(header.info(path))
    }

    /// Every snapshot file in the directory, oldest first, as its header describes it, without verifying
    /// its state: a file whose header does not read back whole is listed with `leadership_term_id` -1 and
    /// `length` the bytes after where its header would be. The position is always the file name's.
    pub fn list(&self) -> Result<Vec<SnapshotInfo>, SnapshotError> {
        let mut infos = Vec::new();
        for (position, path) in self.names()? {
            if let Some(info) = self.describe(position, path)? {
                infos.push(info);
            }
        }
        Ok(infos)
    }

    /// Loads the newest snapshot that verifies (header, identity, length and state checksum, in a first
    /// pass over the file) by calling `load` (e.g. `|r| machine.load_snapshot(r)`) with a reader of exactly
    /// its state bytes (a second pass). Each newer snapshot that fails is skipped for the next older one
    /// and reported in [`Restored::skipped`]; when none verifies, `load` is not called.
    ///
    /// If `load` fails, the error is returned and no older snapshot is tried: the state machine may be
    /// partly loaded, and a snapshot that verifies but does not load is the application's to fix.
    pub fn restore(&self, load: impl FnOnce(&mut dyn Read) -> io::Result<()>) -> Result<Restored, SnapshotError> {
        let (found, skipped) = self.newest_verified()?;
        let Some((info, mut file, expected)) = found else {
            return Ok(Restored { info: None, skipped });
        };
        file.seek(HEADER_LENGTH, info.file_length());
        let mut reader = HashingReader::new(BufReader::with_capacity(BUFFER, file));
        let state_error = |source| SnapshotError::State {
            path: info.path.clone(),
            action: "load its state (the state machine may be partly loaded: do not use it)",
            source,
        };
        load(&mut reader).map_err(state_error)?;
        // The bytes handed to `load` must be the ones checked: a disk that reads differently the second time
        // (a flipped bit) would load a state that is not the snapshot's. What `load` left unread is read here
        // to finish the hash.
        reader.finish(expected).map_err(state_error)?;
        Ok(Restored { info: Some(info), skipped })
    }

    /// Deletes all but the newest `keep` (at least 1) snapshot files, by position, without verifying them;
    /// returns the position of the oldest kept (the log before it may be deleted: each kept snapshot can be
    /// replayed from), or `None` if there is no snapshot.
    pub fn retain(&self, keep: usize) -> Result<Option<i64>, SnapshotError> {
        if keep == 0 {
            return Err(SnapshotError::InvalidArgument { reason: "retain keeps at least 1 snapshot, not 0".into() });
        }
        let names = self.names()?;
        let cut = names.len().saturating_sub(keep);
        for (_, path) in &names[..cut] {
            match self.disk.remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(path, "delete it")(e)),
            }
        }
        if cut > 0 {
            self.sync_dir()?;
        }
        Ok(names.get(cut).map(|(position, _)| *position))
    }

    /// Opens the newest snapshot that verifies (as [`restore`](Self::restore) checks it) for sending to
    /// another member catching up: its reader yields the whole file, header included, for that member's
    /// [`install`](Self::install). Each newer snapshot that fails is skipped and reported.
    pub fn open_for_send(&self) -> Result<ToSend, SnapshotError> {
        let (found, skipped) = self.newest_verified()?;
        let Some((info, mut file, _)) = found else {
            return Ok(ToSend { snapshot: None, skipped });
        };
        file.seek(0, info.file_length());
        Ok(ToSend { snapshot: Some(SnapshotReader { info, file }), skipped })
    }

    /// Installs a snapshot received from another member: reads exactly one snapshot's bytes from `reader`
    /// (as an [`open_for_send`](Self::open_for_send) reader yields them; what follows is left unread) and
    /// stores it as [`write`](Self::write) does, replacing any snapshot at its position.
    ///
    /// The header is checked (whole, this build's format, this store's identity, a state no longer than
    /// [`max_install_length`](Self::max_install_length)) before anything is written or allocated; the
    /// state is hashed as it streams to a temporary file, which is renamed into place only if the hash
    /// matches. A refused snapshot ([`SnapshotError::Refused`]) or a failed one leaves nothing behind.
    pub fn install(&self, mut reader: impl Read) -> Result<SnapshotInfo, SnapshotError> {
        let mut bytes = [0; HEADER_LENGTH as usize];
        if let Err(e) = reader.read_exact(&mut bytes) {
            return Err(SnapshotError::Refused {
                reason: format!("its header could not be read whole ({e}); have it sent again"),
            });
        }
        let mut install = self.begin_install(&bytes)?;
        let mut buffer = vec![0; BUFFER];
        while install.remaining() > 0 {
            let want = usize::try_from(install.remaining()).map_or(BUFFER, |left| left.min(BUFFER));
            let n = match reader.read(&mut buffer[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(SnapshotError::Refused {
                        reason: format!("the stream failed ({e}); have it sent again"),
                    })
                }
            };
            install.write(&buffer[..n])?;
        }
        install.finish()
    }

    /// Starts installing a snapshot received from another member in pieces, as [`install`](Self::install)
    /// does from a reader: `header` is checked (whole, this build's format, this store's identity, a state no
    /// longer than [`max_install_length`](Self::max_install_length)) before anything is written; the state
    /// follows through [`SnapshotInstall::write`], and [`SnapshotInstall::finish`] stores it if it is whole
    /// and its hash matches. Dropped unfinished, it leaves nothing behind.
    pub fn begin_install(&self, header: &[u8; HEADER_LENGTH as usize]) -> Result<SnapshotInstall, SnapshotError> {
        let refused = |reason: String| SnapshotError::Refused { reason };
        let checked = Header::check(header, self.identity).map_err(|defect| match defect {
            Defect::Damaged(reason) => {
                refused(format!("it {reason}; have it sent again, from a member whose snapshot verifies"))
            }
            Defect::Foreign(found) => refused(format!(
                "it belongs to {found}, this node's is {}; check that both members are configured as one cluster",
                self.identity
            )),
        })?;
        if checked.length > self.max_install_length {
            return Err(refused(format!(
                "its state is {} bytes, more than the {} this store accepts (SnapshotStore::with_max_install_length)",
                checked.length, self.max_install_length
            )));
        }
        let (temp, mut file) = self.create_temp(checked.position)?;
        file.write_all(header).map_err(io_error(&temp.path, "write it"))?;
        Ok(SnapshotInstall::new(
            checked,
            self.path_of(checked.position),
            self.dir.clone(),
            self.disk.clone(),
            temp,
            file,
        ))
    }

    /// The snapshot files by name (`snapshot-<position>.qcsnap`, nothing else), oldest first.
    fn names(&self) -> Result<Vec<(i64, PathBuf)>, SnapshotError> {
        let mut names = Vec::new();
        let listed = match self.disk.list(&self.dir) {
            // Only a store opened read-only can lack its directory: no snapshot there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            listed => listed.map_err(io_error(&self.dir, "list the directory"))?,
        };
        for name in listed {
            if let Some(position) = parse_name(&name) {
                names.push((position, self.dir.join(name)));
            }
        }
        names.sort_unstable_by_key(|(position, _)| *position);
        Ok(names)
    }

    /// The newest snapshot that verifies, opened, and the reasons each newer one was skipped.
    fn newest_verified(&self) -> Result<(Option<Verified>, Vec<String>), SnapshotError> {
        let mut skipped = Vec::new();
        for (position, path) in self.names()?.into_iter().rev() {
            match self.verify(&path, position) {
                Ok(found) => return Ok((Some(found), skipped)),
                Err(e) => skipped.push(skip_reason(e)),
            }
        }
        Ok((None, skipped))
    }

    /// Checks the snapshot file `path`, named for `position`, entirely: header, identity, name, length and
    /// state checksum. Returns what it holds and the file, opened.
    fn verify(&self, path: &Path, position: i64) -> Result<Verified, SnapshotError> {
        let invalid = |reason: String| SnapshotError::Invalid { path: path.to_path_buf(), reason };
        let file = self.disk.open_read(path).map_err(io_error(path, "open it"))?;
        let size = file.len().map_err(io_error(path, "read its metadata"))?;
        if size < HEADER_LENGTH {
            return Err(invalid(format!("is {size} bytes, shorter than its {HEADER_LENGTH}-byte header (truncated)")));
        }
        let mut bytes = [0; HEADER_LENGTH as usize];
        file.read_exact_at(&mut bytes, 0).map_err(io_error(path, "read its header"))?;
        let mut file = FileCursor::new(file, HEADER_LENGTH, size);
        let header = Header::check(&bytes, self.identity).map_err(|defect| match defect {
            Defect::Damaged(reason) => invalid(reason),
            Defect::Foreign(found) => {
                SnapshotError::Foreign { path: path.to_path_buf(), found, expected: self.identity }
            }
        })?;
        if header.position != position {
            return Err(invalid(format!("is named for position {position}, its header says {}", header.position)));
        }
        let held = size - HEADER_LENGTH;
        if held != header.length {
            let what = if held < header.length { "truncated" } else { "damaged" };
            return Err(invalid(format!("holds {held} bytes of state, its header says {} ({what})", header.length)));
        }
        let (copied, state) =
            copy_hashed(&mut file, &mut io::sink(), header.length).map_err(|failed| match failed {
                Failed::Read(e) | Failed::Write(e) => io_error(path, "read its state")(e),
            })?;
        if copied != header.length {
            return Err(invalid(format!("ended after {copied} of its {} bytes of state (truncated)", header.length)));
        }
        if state != header.state_checksum {
            return Err(invalid("fails its checksum (the state is damaged)".into()));
        }
        Ok((header.info(path.to_path_buf()), file, state))
    }

    /// A new temporary file for a snapshot at `position`, removed when the guard drops unless committed.
    fn create_temp(&self, position: i64) -> Result<(TempFile, FileCursor), SnapshotError> {
        let sequence = self.temp_sequence.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{PREFIX}{position:020}{SUFFIX}.{sequence}{TEMP_SUFFIX}"));
        let file = self.disk.create(&path).map_err(io_error(&path, "create a temporary file"))?;
        Ok((TempFile::new(path, self.disk.clone()), FileCursor::new(file, 0, u64::MAX)))
    }

    /// Makes the whole temporary file `file` durable under `path`: sync, rename, sync of the directory.
    fn commit(&self, temp: TempFile, file: FileCursor, path: &Path) -> Result<(), SnapshotError> {
        commit(&self.disk, &self.dir, temp, file, path)
    }

    fn sync_dir(&self) -> Result<(), SnapshotError> {
        self.disk.sync_dir(&self.dir).map_err(io_error(&self.dir, "sync the directory"))
    }

    /// What [`list`](Self::list) says of the file `path` named for `position`, or `None` if it is gone.
    fn describe(&self, position: i64, path: PathBuf) -> Result<Option<SnapshotInfo>, SnapshotError> {
        let file = match self.disk.open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, "open it")(e)),
        };
        let size = file.len().map_err(io_error(&path, "read its metadata"))?;
        let mut bytes = [0; HEADER_LENGTH as usize];
        let header = if size >= HEADER_LENGTH {
            file.read_exact_at(&mut bytes, 0).map_err(io_error(&path, "read its header"))?;
            Header::parse(&bytes).ok()
        } else {
            None
        };
        Ok(Some(match header {
            Some(header) => SnapshotInfo { position, ..header.info(path) },
            None => SnapshotInfo { position, leadership_term_id: -1, length: size.saturating_sub(HEADER_LENGTH), path },
        }))
    }
}

/// A snapshot that verified: what it holds, its file, and its state's checksum.
type Verified = (SnapshotInfo, FileCursor, blake3::Hash);

#[cfg(test)]
mod tests;
