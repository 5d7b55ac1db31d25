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
//! - Configuration entries (`crate::cluster::configuration`) are kept the same way, each with the
//!   position where it ends and its payload, after the terms (format `qcidx002`; a `qcidx001` index,
//!   which holds none, is still read). One ending at or below the recording's start is kept (the
//!   configuration in effect there); those below it go.

use std::io;
use std::path::Path;

use bytemuck::{Pod, Zeroable};

use super::RecordingIdentity;
use crate::storage::disk::Disk;

/// The index file's name.
pub(super) const INDEX_FILE: &str = "index.dat";
/// The index file's first 8 bytes: its format and version, `qcidx002`.
const MAGIC_BYTES: [u8; 8] = *b"qcidx002";
const MAGIC: u64 = u64::from_le_bytes(MAGIC_BYTES);
/// The index format this version writes, as its magic number spells it.
pub const INDEX_FORMAT: &str = match std::str::from_utf8(&MAGIC_BYTES) {
    Ok(format) => format,
    Err(_) => panic!("the magic number is ASCII"),
};
/// The format before configuration entries were kept (read, never written).
const MAGIC_V1: u64 = u64::from_le_bytes(*b"qcidx001");
/// The most configuration entries an index holds, and the longest one: bounds on what a damaged file can
/// make a reader allocate.
const MAX_CONFIGURATIONS: u32 = 4096;
const MAX_CONFIGURATION_LENGTH: usize = 64 * 1024;
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
    /// Configuration entries after the terms, each `end: i64, length: u32, 0: u32` and its payload padded
    /// to 8 bytes.
    configuration_count: u32,
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
    /// The configuration entries recorded, in order: where each ends, and its payload.
    pub configurations: Vec<RecordedConfiguration>,
}

/// A configuration entry of the recording: where it ends, and its payload.
pub type RecordedConfiguration = (i64, Vec<u8>);

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

    /// Adds the configuration entry `payload` ending at `end`; one already known is no change. Returns
    /// true when the index changed.
    pub fn add_configuration(&mut self, end: i64, payload: &[u8]) -> bool {
        if self.configurations.last().is_some_and(|(last, _)| *last >= end) || payload.len() > MAX_CONFIGURATION_LENGTH
        {
            return false;
        }
        self.configurations.push((end, payload.to_vec()));
        true
    }

    /// Forgets the terms that start, and the configuration entries that end, past `position` (the log was
    /// cut there); true when any went.
    pub fn cut(&mut self, position: i64) -> bool {
        let before = (self.terms.len(), self.configurations.len());
        self.terms.retain(|t| t.base_position < position);
        self.configurations.retain(|(end, _)| *end <= position);
        (self.terms.len(), self.configurations.len()) != before
    }

    /// The recording starts at `start` from now on: configuration entries below the one in effect there
    /// go.
    pub fn forget_configurations_below(&mut self, start: i64) {
        let in_effect = self.configurations.iter().rposition(|(end, _)| *end <= start);
        if let Some(at) = in_effect {
            self.configurations.drain(..at);
        }
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

    fn checksum(header: &IndexHeader, entries: &[TermEntry], configurations: &[u8]) -> u64 {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&bytemuck::bytes_of(header)[..48]);
        hasher.update(bytemuck::cast_slice(entries));
        hasher.update(configurations);
        u64::from_le_bytes(hasher.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
    }

    /// The configuration section's bytes.
    fn encode_configurations(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (end, payload) in &self.configurations {
            bytes.extend_from_slice(&end.to_le_bytes());
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&0u32.to_le_bytes());
            bytes.extend_from_slice(payload);
            bytes.resize(bytes.len().next_multiple_of(8), 0);
        }
        bytes
    }

    /// Reads `count` configuration entries from the start of `bytes`; returns them and the bytes read.
    fn decode_configurations(bytes: &[u8], count: u32) -> Result<(Vec<RecordedConfiguration>, usize), String> {
        if count > MAX_CONFIGURATIONS {
            return Err(format!("says it holds {count} configuration entries, more than {MAX_CONFIGURATIONS}"));
        }
        let (mut entries, mut at) = (Vec::new(), 0usize);
        for _ in 0..count {
            let head = bytes.get(at..at + 16).ok_or("ends inside a configuration entry")?;
            let end = i64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
            let length = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
            if length > MAX_CONFIGURATION_LENGTH {
                return Err(format!("holds a configuration entry of {length} bytes"));
            }
            let payload = bytes.get(at + 16..at + 16 + length).ok_or("ends inside a configuration entry")?;
            if entries.last().is_some_and(|(last, _)| *last >= end) {
                return Err("holds configuration entries out of order".into());
            }
            entries.push((end, payload.to_vec()));
            at = (at + 16 + length).next_multiple_of(8);
        }
        Ok((entries, at.min(bytes.len())))
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
        let configuration_count = match header.magic {
            MAGIC => header.configuration_count,
            MAGIC_V1 if header.configuration_count == 0 => 0,
            _ => return Err("is not a recording index of a format this build reads (qcidx001 or qcidx002)".into()),
        };
        let count = header.term_count.min(MAX_TERMS) as usize;
        let entry_length = std::mem::size_of::<TermEntry>();
        let terms_end = header_length + count * entry_length;
        if bytes.len() < terms_end {
            return Err(format!("is {} bytes where its header says {count} terms", bytes.len()));
        }
        let entries: Vec<TermEntry> =
            bytes[header_length..terms_end].chunks_exact(entry_length).map(bytemuck::pod_read_unaligned).collect();
        let (configurations, length) = Self::decode_configurations(&bytes[terms_end..], configuration_count)?;
        if terms_end + length != bytes.len() {
            return Err(format!(
                "is {} bytes where its header says {count} terms and {configuration_count} configuration entries",
                bytes.len()
            ));
        }
        if header.checksum != Self::checksum(&header, &entries, &bytes[terms_end..]) {
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
        Ok(Some(Index { start_position: header.start_position, start_term: header.start_term, terms, configurations }))
    }

    /// The identity `dir/index.dat`'s header names, when there is one with the index's magic number
    /// (unchecked otherwise: [`load`](Self::load) checks it), for a reader that does not know whose
    /// recording it looks at.
    pub(super) fn stored_identity(disk: &dyn Disk, dir: &Path) -> Option<RecordingIdentity> {
        let bytes = disk.read(&dir.join(INDEX_FILE)).ok()?;
        let header: IndexHeader = bytemuck::pod_read_unaligned(bytes.get(..std::mem::size_of::<IndexHeader>())?);
        (header.magic == MAGIC || header.magic == MAGIC_V1).then_some(RecordingIdentity {
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
            configuration_count: self.configurations.len() as u32,
            checksum: 0,
        };
        let configurations = self.encode_configurations();
        header.checksum = Self::checksum(&header, &entries, &configurations);
        let mut bytes = bytemuck::bytes_of(&header).to_vec();
        bytes.extend_from_slice(bytemuck::cast_slice(&entries));
        bytes.extend_from_slice(&configurations);
        crate::storage::atomic_file::replace(disk, &dir.join(INDEX_FILE), &bytes, sync)
            .map_err(|f| io::Error::new(f.source.kind(), format!("{} {}: {}", f.action, f.path.display(), f.source)))
    }
}
