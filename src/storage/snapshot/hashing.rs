//! Copies, readers and writers that hash the state as it passes, through one fixed buffer.

use std::io::{self, Read, Write};

use super::BUFFER;
use crate::storage::disk::FileCursor;

/// Which side of [`copy_hashed`] failed.
pub(super) enum Failed {
    Read(io::Error),
    Write(io::Error),
}

/// Copies up to `length` bytes from `from` to `to` through one fixed buffer, hashing them; returns how many
/// were copied (fewer than `length` only if `from` ended) and their BLAKE3 hash.
pub(super) fn copy_hashed(from: &mut dyn Read, to: &mut dyn Write, length: u64) -> Result<(u64, blake3::Hash), Failed> {
    let mut buffer = vec![0; BUFFER];
    let mut hasher = blake3::Hasher::new();
    let mut copied = 0;
    while copied < length {
        let want = usize::try_from(length - copied).map_or(BUFFER, |left| left.min(BUFFER));
        let n = match from.read(&mut buffer[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failed::Read(e)),
        };
        hasher.update(&buffer[..n]);
        to.write_all(&buffer[..n]).map_err(Failed::Write)?;
        copied += n as u64;
    }
    Ok((copied, hasher.finalize()))
}

/// A reader that hashes what it yields, so that what an application loaded can be checked against the
/// checksum the first pass verified.
pub(super) struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> HashingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        Self { inner, hasher: blake3::Hasher::new() }
    }

    /// Reads what is left and compares the hash of everything read with `expected`.
    pub(super) fn finish(mut self, expected: blake3::Hash) -> io::Result<()> {
        io::copy(&mut self, &mut io::sink())?;
        if self.hasher.finalize() == expected {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "its state read differently than when it was checked (the disk returned other bytes)",
            ))
        }
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// A file writer that counts and hashes what it writes: the state, after the header's placeholder.
pub(super) struct HashingWriter {
    file: FileCursor,
    hasher: blake3::Hasher,
    written: u64,
}

impl HashingWriter {
    pub(super) fn new(file: FileCursor) -> Self {
        Self { file, hasher: blake3::Hasher::new(), written: 0 }
    }

    /// The file, the state's length, and its hash.
    pub(super) fn finish(self) -> (FileCursor, u64, blake3::Hash) {
        (self.file, self.written, self.hasher.finalize())
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}
