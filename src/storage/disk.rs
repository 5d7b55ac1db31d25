//! The disk a node keeps its durable state on: the recorded log's segments and index, the vote file and the
//! application's snapshots.
//!
//! Everything the storage layer does to files goes through a [`Disk`], so that the same code runs on the
//! operating system's file system in production ([`SharedDisk::os`], one virtual call beside each system
//! call) and on a simulated disk in the node simulator, which loses what was not synced on power loss,
//! tears writes and fails them.
//!
//! # The contract a [`Disk`] keeps, and the storage layer relies on
//!
//! - [`DiskFile::write_all_at`] and the metadata operations ([`Disk::create`], [`Disk::rename`],
//!   [`Disk::remove_file`]) take effect at once for every later read of this process, but survive a power
//!   loss only once synced: a file's bytes by [`DiskFile::sync_data`], a name made, renamed or removed by
//!   [`Disk::sync_dir`] of its directory. Unsynced writes may survive a power loss in part, the last of
//!   them torn.
//! - An error from a write or a sync means nothing about what reached the disk: the caller must not count
//!   anything it wrote since its last successful sync as durable (a node stops).
//!
//! Snapshots (`storage::snapshot`) are on the same disk, read and written through [`FileCursor`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::shm::directory::{DirectoryError, DirectoryLock};

/// A file open on a [`Disk`], for reading and writing at offsets.
pub trait DiskFile: Send + Sync + fmt::Debug {
    /// Fills `buf` from `offset`, or fails (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`, extending the file as needed. Not durable until synced.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `parts` one after the other from `offset`, as [`write_all_at`](Self::write_all_at) would
    /// each (a file on the operating system's disk in one `pwritev`). Not durable until synced.
    fn write_parts_at(&self, parts: &[&[u8]], mut offset: u64) -> io::Result<()> {
        for part in parts {
            self.write_all_at(part, offset)?;
            offset += part.len() as u64;
        }
        Ok(())
    }
    /// The file's length.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cuts or extends the file to `length`. Not durable until synced.
    fn set_len(&self, length: u64) -> io::Result<()>;
    /// Makes the file's bytes durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Reserves disk space for the first `length` bytes without changing the file's length; best
    /// effort, and a no-op where a disk has nothing to reserve.
    fn reserve(&self, _length: u64) {}
    /// Drops the file's clean cached pages, so that the next reads see what is on the disk. After a
    /// failed `fdatasync` the kernel marks the pages it could not write clean: they still show the bytes
    /// a crashed process wrote, and a later sync succeeds without writing them. Recovery drops them before
    /// it trusts a file. Best effort.
    fn drop_cache(&self) {}
    /// Starts writing the file's dirty bytes to the disk without waiting for them (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`), so that a `sync_data` soon after has less to wait for. Makes nothing
    /// durable; best effort, and a no-op where a disk has nothing to start.
    fn start_writeback(&self) {}
    /// Starts writing the dirty bytes of `length` bytes from `offset` to the disk without waiting for them,
    /// as [`start_writeback`](Self::start_writeback) does for the whole file. Best effort.
    fn start_writeback_of(&self, _offset: u64, _length: u64) {}
    /// Drops the clean cached pages of `length` bytes from `offset` (`POSIX_FADV_DONTNEED`; dirty pages
    /// and pages being written stay), so that the memory goes back to the page cache's free pages rather
    /// than staying cached until reclaimed. Changes no byte of the file. Best effort.
    fn drop_cached(&self, _offset: u64, _length: u64) {}
}

/// A file system: files by path, and the directory operations the storage layer uses.
pub trait Disk: Send + Sync + fmt::Debug {
    /// Creates `path` empty (truncating a file there), open for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// Opens the file at `path` for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// Opens the file at `path` for reading only.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// Reads the whole file at `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open_read(path)?;
        let mut bytes = vec![0; file.len()? as usize];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }
    /// Renames `from` over `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file at `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates `dir` and its parents where missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Makes the names made, renamed or removed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes the lock of the data directory `dir` ([`DATA_LOCK_FILE`]) for as long as the result lives,
    /// refusing while another holds it: one node per data directory, and a reader (`qc-cluster
    /// recovery-plan`) can tell a running member's directory. `None` where there is no other process to
    /// keep out (a simulated disk, the default).
    fn lock_dir(&self, _dir: &Path) -> Result<Option<DirectoryLock>, DirectoryError> {
        Ok(None)
    }
}

/// The lock file a node holds in its data directory while it runs ([`Disk::lock_dir`]).
pub const DATA_LOCK_FILE: &str = "data.lock";

/// A file read or written in order, from an offset on: `Read` and `Write` over [`DiskFile`]'s positioned
/// calls, for the streams (snapshots) that are copied through a buffer. Reads stop at `end`.
#[derive(Debug)]
pub struct FileCursor {
    file: Box<dyn DiskFile>,
    offset: u64,
    end: u64,
}

impl FileCursor {
    /// `file` from `offset`, readable up to `end` (`u64::MAX`: its length when read).
    pub fn new(file: Box<dyn DiskFile>, offset: u64, end: u64) -> Self {
        Self { file, offset, end }
    }

    /// Where the next read or write goes.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Moves to `offset`, readable up to `end`.
    pub fn seek(&mut self, offset: u64, end: u64) {
        (self.offset, self.end) = (offset, end);
    }

    /// The file.
    pub fn file(&self) -> &dyn DiskFile {
        &*self.file
    }

    /// The file, closed for streaming.
    pub fn into_file(self) -> Box<dyn DiskFile> {
        self.file
    }
}

impl io::Read for FileCursor {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let end = self.end.min(self.file.len()?);
        let n = usize::try_from(end.saturating_sub(self.offset)).map_or(buf.len(), |left| left.min(buf.len()));
        if n == 0 {
            return Ok(0);
        }
        self.file.read_exact_at(&mut buf[..n], self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

impl io::Write for FileCursor {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all_at(buf, self.offset)?;
        self.offset += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A `Disk` shared by the parts of a node (cheap to clone).
#[derive(Clone, Debug)]
pub struct SharedDisk(Arc<dyn Disk>);

impl SharedDisk {
    /// The operating system's file system.
    pub fn os() -> Self {
        Self(Arc::new(OsDisk))
    }

    /// Any other disk (a simulated one).
    pub fn new(disk: impl Disk + 'static) -> Self {
        Self(Arc::new(disk))
    }
}

impl Default for SharedDisk {
    fn default() -> Self {
        Self::os()
    }
}

impl std::ops::Deref for SharedDisk {
    type Target = dyn Disk;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsDisk;

#[derive(Debug)]
struct OsFile(File);

/// Parts one `pwritev` takes (more go in several): a block header and its payload, with room to spare.
const MAX_PARTS: usize = 8;

impl DiskFile for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut iovecs = [io::IoSlice::new(&[]); MAX_PARTS];
        if parts.len() > MAX_PARTS {
            return parts
                .chunks(MAX_PARTS)
                .try_fold(offset, |at, chunk| {
                    self.write_parts_at(chunk, at).map(|()| at + chunk.iter().map(|p| p.len() as u64).sum::<u64>())
                })
                .map(|_| ());
        }
        for (iovec, part) in iovecs.iter_mut().zip(parts) {
            *iovec = io::IoSlice::new(part);
        }
        let mut slices = &mut iovecs[..parts.len()];
        let mut at = offset;
        while !slices.is_empty() {
            let Ok(position) = libc::off_t::try_from(at) else {
                return Err(io::Error::from(io::ErrorKind::InvalidInput));
            };
            // SAFETY: `IoSlice` is ABI-compatible with `iovec` and every slice borrows live memory for the
            // call; the file descriptor is this file's own.
            let written = unsafe {
                libc::pwritev(self.0.as_raw_fd(), slices.as_ptr().cast(), slices.len() as libc::c_int, position)
            };
            match written {
                -1 => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                n => {
                    at += n as u64;
                    io::IoSlice::advance_slices(&mut slices, n as usize);
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.0.set_len(length)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn reserve(&self, length: u64) {
        use std::os::fd::AsRawFd;
        let Ok(length) = libc::off_t::try_from(length) else { return };
        // SAFETY: a plain syscall on an open file descriptor this file owns; it touches no memory.
        let _ = unsafe { libc::fallocate(self.0.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, length) };
    }

    fn drop_cache(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on an open file descriptor this file owns; it touches no memory.
        let _ = unsafe { libc::posix_fadvise(self.0.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }

    fn start_writeback(&self) {
        self.start_writeback_of(0, 0); // a length of 0: to the end of the file
    }

    fn start_writeback_of(&self, offset: u64, length: u64) {
        use std::os::fd::AsRawFd;
        let (offset, length) = (offset as libc::off64_t, length as libc::off64_t);
        // SAFETY: a plain syscall on an open file descriptor this file owns; it touches no memory.
        let _ = unsafe { libc::sync_file_range(self.0.as_raw_fd(), offset, length, libc::SYNC_FILE_RANGE_WRITE) };
    }

    fn drop_cached(&self, offset: u64, length: u64) {
        use std::os::fd::AsRawFd;
        let (offset, length) = (offset as libc::off_t, length as libc::off_t);
        // SAFETY: a plain syscall on an open file descriptor this file owns; it touches no memory.
        let _ = unsafe { libc::posix_fadvise(self.0.as_raw_fd(), offset, length, libc::POSIX_FADV_DONTNEED) };
    }
}

impl Disk for OsDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(OsFile(file)))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(OsFile(OpenOptions::new().read(true).write(true).open(path)?)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(OsFile(File::open(path)?)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock_dir(&self, dir: &Path) -> Result<Option<DirectoryLock>, DirectoryError> {
        DirectoryLock::acquire(dir, DATA_LOCK_FILE).map(Some)
    }
}
