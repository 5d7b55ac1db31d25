//! A snapshot file's format: its name, its header (magic, version, the cluster's identity, the position,
//! the state's length and hash, a checksum of the header) and the checks a header passes.

use std::fmt;
use std::path::PathBuf;

use bytemuck::{Pod, Zeroable};

use super::SnapshotInfo;

/// The length of a snapshot file's header; its state bytes follow.
pub const HEADER_LENGTH: u64 = 88;

/// The header's first 8 bytes.
const MAGIC: u64 = u64::from_le_bytes(*b"qcsnap\0\0");
/// The format this build writes and reads.
const VERSION: u32 = 1;
pub(super) const PREFIX: &str = "snapshot-";
pub(super) const SUFFIX: &str = ".qcsnap";
pub(super) const TEMP_SUFFIX: &str = ".tmp";

/// A snapshot file's header, as laid out on disk (little-endian, the only byte order quorumcast runs on).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct Header {
    magic: u64,
    version: u32,
    stream_id: i32,
    membership: i64,
    /// The log position the state includes every entry up to.
    pub(super) position: i64,
    leadership_term_id: i64,
    /// How many state bytes follow the header.
    pub(super) length: u64,
    /// BLAKE3 of the state bytes.
    pub(super) state_checksum: [u8; 32],
    /// The first 8 bytes of BLAKE3 over every field before it.
    header_checksum: u64,
}

const _: () = assert!(std::mem::size_of::<Header>() as u64 == HEADER_LENGTH);

impl Header {
    /// A sealed header (its checksum set) for `length` state bytes hashing to `state`.
    pub(super) fn new(
        identity: SnapshotIdentity,
        position: i64,
        leadership_term_id: i64,
        length: u64,
        state: blake3::Hash,
    ) -> Self {
        let mut header = Self {
            magic: MAGIC,
            version: VERSION,
            stream_id: identity.stream_id,
            membership: identity.membership,
            position,
            leadership_term_id,
            length,
            state_checksum: *state.as_bytes(),
            header_checksum: 0,
        };
        header.header_checksum = header.checksum_of();
        header
    }

    fn checksum_of(&self) -> u64 {
        let bytes = bytemuck::bytes_of(self);
        let hash = blake3::hash(&bytes[..bytes.len() - 8]);
        u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
    }

    /// The header `bytes` hold if it is one this build wrote, whole; otherwise what is wrong with it.
    pub(super) fn parse(bytes: &[u8; HEADER_LENGTH as usize]) -> Result<Self, String> {
        let header: Self = bytemuck::pod_read_unaligned(bytes);
        if header.magic != MAGIC {
            return Err("is not a quorumcast snapshot (wrong magic)".into());
        }
        if header.version != VERSION {
            return Err(format!(
                "has format version {}, this build reads version {VERSION} (another build of quorumcast wrote it)",
                header.version
            ));
        }
        if header.header_checksum != header.checksum_of() {
            return Err("fails its header checksum (the header is damaged)".into());
        }
        if header.position < 0 {
            return Err(format!("has a negative position ({})", header.position));
        }
        Ok(header)
    }

    /// [`Header::parse`], then the identity: a header of another cluster or stream is [`Defect::Foreign`].
    pub(super) fn check(bytes: &[u8; HEADER_LENGTH as usize], identity: SnapshotIdentity) -> Result<Self, Defect> {
        let header = Self::parse(bytes).map_err(Defect::Damaged)?;
        let found = SnapshotIdentity { membership: header.membership, stream_id: header.stream_id };
        if found != identity {
            return Err(Defect::Foreign(found));
        }
        Ok(header)
    }

    pub(super) fn info(&self, path: PathBuf) -> SnapshotInfo {
        SnapshotInfo { position: self.position, leadership_term_id: self.leadership_term_id, length: self.length, path }
    }
}

/// Why a snapshot's bytes are not used.
pub(super) enum Defect {
    /// Damaged, truncated or not a snapshot at all: what is wrong.
    Damaged(String),
    /// A whole snapshot of another cluster or stream: whose it is.
    Foreign(SnapshotIdentity),
}

/// Which cluster a snapshot belongs to: a snapshot of another cluster or stream is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotIdentity {
    /// The cluster's member-list tag ([`crate::media::channel::membership_tag`]).
    pub membership: i64,
    /// The replicated log's stream.
    pub stream_id: i32,
}

impl fmt::Display for SnapshotIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cluster {:#018x} stream {}", self.membership, self.stream_id)
    }
}

/// The position a snapshot file's name says: `snapshot-<20 digits>.qcsnap`, nothing else.
pub(super) fn parse_name(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
