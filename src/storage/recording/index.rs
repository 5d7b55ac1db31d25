//! The recording index, `index.dat`: where the recording starts and, for each leadership term of the
//! recorded log, its id, base position and end position (Aeron Cluster's RecordingLog).
//!
//! # Invariants
//!
//! - The file is replaced whole, atomically (written to `index.dat.tmp`, synced when asked, renamed,
//!   directory synced), on every change: a new term, a cut, a compaction. It is read whole and checked
//!   against one checksum over every byte before it, so it is either the old index or the new one.
//! - Terms are in increasing order of id and base position; each term ends where the next begins; the
//!   last term's end is `OPEN` in the file (the recording's end is found from the segments).
//! - The index is written after the block holding a term's marker: a crash between the two leaves a
//!   marker the index lacks, which recovery finds in the last segment (it is never the other way round).

use std::io;
use std::path::Path;

use bytemuck::{Pod, Zeroable};

use super::RecordingIdentity;
use crate::storage::disk::Disk;

/// The index file's name.
pub(super) const INDEX_FILE: &str = "index.dat";
/// The index file's first 8 bytes: its format and version, `qcidx001`.
const MAGIC_BYTES: [u8; 8] = *b"qcidx001";
const MAGIC: u64 = u64::from_le_bytes(MAGIC_BYTES);
/// The index format this version writes and reads, as its magic number spells it.
pub const INDEX_FORMAT: &str = match std::str::from_utf8(&MAGIC_BYTES) {
    Ok(format) => format,
    Err(_) => panic!("the magic number is ASCII"),
};
/// The end of a term the recording is still in.
const OPEN: i64 = -1;
/// The most terms an index holds: a bound on what a damaged count can make a reader allocate.
const MAX_TERMS: u32 = 1 << 20;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct IndexHeader {
    magic: u64,
    membership: i64,
    stream_id: i32,
    term_length: u32,
    /// The first byte still recorded (0, or later once compacted).
    start_position: i64,
    /// The leadership term of the byte at `start_position` when it is not a term's first byte (else 0).
    start_term: i64,
    term_count: u32,
    reserved: u32,
    /// The first 8 bytes of BLAKE3 over the header's other fields and every entry.
    checksum: u64,
}

const _: () = assert!(std::mem::size_of::<IndexHeader>() == 56);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct TermEntry {
    leadership_term_id: i64,
    base_position: i64,
    end_position: i64,
    reserved: i64,
}

/// One leadership term of the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedTerm {
    /// The term's id.
    pub leadership_term_id: i64,
    /// Where the term's first byte (its term-start marker) is.
    pub base_position: i64,
}

/// What `index.dat` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    /// The first byte still recorded.
    pub start_position: i64,
    /// The term of the byte at `start_position`, when the recording starts inside a term (after a
    /// compaction or a snapshot install); 0 otherwise.
    pub start_term: i64,
    /// The terms whose markers are recorded, in order.
    pub terms: Vec<RecordedTerm>,
}

impl Index {
    /// Adds a term found at `base_position`; a marker already known (a block recorded again) is no change.
    /// Returns true when the index changed.
    pub fn add_term(&mut self, leadership_term_id: i64, base_position: i64) -> bool {
        if self.terms.last().is_some_and(|t| t.base_position >= base_position) {
            return false;
        }
        self.terms.push(RecordedTerm { leadership_term_id, base_position });
        true
    }

    /// Forgets the terms that start at or after `position` (the log was cut there); true when any went.
    pub fn cut(&mut self, position: i64) -> bool {
        let before = self.terms.len();
        self.terms.retain(|t| t.base_position < position);
        self.terms.len() != before
    }

    /// The term of the byte at `position`: the last term that starts at or before it.
    pub fn term_at(&self, position: i64) -> i64 {
        let listed = self.terms.iter().take_while(|t| t.base_position <= position).last();
        match listed {
            // An index whose terms stop below its start (written before they were kept whole) still knows
            // the term at its start: no term listed below it is newer.
            Some(t) if position >= self.start_position && t.base_position < self.start_position => {
                t.leadership_term_id.max(self.start_term)
            }
            Some(t) => t.leadership_term_id,
            None => self.start_term,
        }
    }

    fn checksum(header: &IndexHeader, entries: &[TermEntry]) -> u64 {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&bytemuck::bytes_of(header)[..48]);
        hasher.update(bytemuck::cast_slice(entries));
        u64::from_le_bytes(hasher.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
    }

    /// Reads `dir/index.dat`: `Ok(None)` when there is none, `Err` naming what is wrong with one that is
    /// there.
    pub fn load(disk: &dyn Disk, dir: &Path, identity: &RecordingIdentity) -> Result<Option<Index>, String> {
        let path = dir.join(INDEX_FILE);
        let bytes = match disk.read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot be read: {e}")),
        };
        let header_length = std::mem::size_of::<IndexHeader>();
        if bytes.len() < header_length {
            return Err(format!("is {} bytes, shorter than its header", bytes.len()));
        }
        let header: IndexHeader = bytemuck::pod_read_unaligned(&bytes[..header_length]);
        if header.magic != MAGIC {
            return Err("is not a recording index (no magic number)".into());
        }
        let count = header.term_count.min(MAX_TERMS) as usize;
        let entry_length = std::mem::size_of::<TermEntry>();
        if bytes.len() != header_length + count * entry_length {
            return Err(format!("is {} bytes where its header says {count} terms", bytes.len()));
        }
        let entries: Vec<TermEntry> =
            bytes[header_length..].chunks_exact(entry_length).map(bytemuck::pod_read_unaligned).collect();
        if header.checksum != Self::checksum(&header, &entries) {
            return Err("fails its checksum".into());
        }
        if header.membership != identity.membership
            || header.stream_id != identity.stream_id
            || header.term_length != identity.term_length
        {
            return Err(format!(
                "was written by another cluster or configuration (member-list tag {:#x}, stream {}, term length \
                 {}; this node's: {:#x}, {}, {})",
                header.membership,
                header.stream_id,
                header.term_length,
                identity.membership,
                identity.stream_id,
                identity.term_length
            ));
        }
        let terms: Vec<RecordedTerm> = entries
            .iter()
            .map(|e| RecordedTerm { leadership_term_id: e.leadership_term_id, base_position: e.base_position })
            .collect();
        let ordered = terms
            .windows(2)
            .all(|w| w[0].leadership_term_id < w[1].leadership_term_id && w[0].base_position < w[1].base_position);
        if !ordered || header.start_position < 0 {
            return Err("holds terms out of order".into());
        }
        Ok(Some(Index { start_position: header.start_position, start_term: header.start_term, terms }))
    }

    /// The identity `dir/index.dat`'s header names, when there is one with the index's magic number
    /// (unchecked otherwise: [`load`](Self::load) checks it), for a reader that does not know whose
    /// recording it looks at.
    pub(super) fn stored_identity(disk: &dyn Disk, dir: &Path) -> Option<RecordingIdentity> {
        let bytes = disk.read(&dir.join(INDEX_FILE)).ok()?;
        let header: IndexHeader = bytemuck::pod_read_unaligned(bytes.get(..std::mem::size_of::<IndexHeader>())?);
        (header.magic == MAGIC).then_some(RecordingIdentity {
            membership: header.membership,
            stream_id: header.stream_id,
            term_length: header.term_length,
        })
    }

    /// Replaces `dir/index.dat` with this index, atomically; synced (file and directory) when `sync`.
    pub fn store(&self, disk: &dyn Disk, dir: &Path, identity: &RecordingIdentity, sync: bool) -> io::Result<()> {
        let entries: Vec<TermEntry> = self
            .terms
            .iter()
            .enumerate()
            .map(|(i, t)| TermEntry {
                leadership_term_id: t.leadership_term_id,
                base_position: t.base_position,
                end_position: self.terms.get(i + 1).map_or(OPEN, |next| next.base_position),
                reserved: 0,
            })
            .collect();
        let mut header = IndexHeader {
            magic: MAGIC,
            membership: identity.membership,
            stream_id: identity.stream_id,
            term_length: identity.term_length,
            start_position: self.start_position,
            start_term: self.start_term,
            term_count: entries.len() as u32,
            reserved: 0,
            checksum: 0,
        };
        header.checksum = Self::checksum(&header, &entries);
        let mut bytes = bytemuck::bytes_of(&header).to_vec();
        bytes.extend_from_slice(bytemuck::cast_slice(&entries));
        crate::storage::atomic_file::replace(disk, &dir.join(INDEX_FILE), &bytes, sync)
            .map_err(|f| io::Error::new(f.source.kind(), format!("{} {}: {}", f.action, f.path.display(), f.source)))
    }
}
