//! A member's persisted leadership term and vote: what [`Output::Persist`] asks a driver to make durable
//! before it sends the vote that follows.
//!
//! [`Output::Persist`]: crate::cluster::consensus_core::Output::Persist
//!
//! One small file, `vote.dat` in a directory the node keeps across restarts, replaced atomically on every
//! store: the new record goes to `vote.dat.tmp`, is synced (`fdatasync`), renamed over `vote.dat`, and the
//! directory is synced, so that after a crash at any moment the file holds either the old record or the
//! new one, whole. Each record carries a keyed checksum of its fields (BLAKE3, truncated), so a file that
//! was damaged, or written by something else, is refused with an error that names it, never read as a
//! term. A store that fails is an error the node must stop on: a member that cannot make its vote durable
//! must not vote.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use bytemuck::{Pod, Zeroable};

use super::disk::{Disk, SharedDisk};

/// The record's first 8 bytes: `qcvote01`, little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"qcvote01");

/// The persisted term and vote, as laid out on disk (little-endian, 40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct VoteRecord {
    magic: u64,
    member_id: i32,
    /// The member voted for in `leadership_term_id`, or -1 for no vote.
    voted_for: i32,
    leadership_term_id: i64,
    /// Which cluster wrote it: the member-list tag, so a directory of another cluster is refused.
    membership: i64,
    /// The first 8 bytes of BLAKE3 over every field before it.
    checksum: u64,
}

const _: () = assert!(std::mem::size_of::<VoteRecord>() == 40);

impl VoteRecord {
    fn checksum_of(&self) -> u64 {
        let bytes = bytemuck::bytes_of(self);
        let hash = blake3::hash(&bytes[..bytes.len() - 8]);
        u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
    }
}

/// A persisted term and vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermVote {
    /// The leadership term.
    pub leadership_term_id: i64,
    /// The member voted for in that term, if any.
    pub voted_for: Option<i32>,
}

/// A vote record as stored, with the member and cluster that wrote it ([`VoteFile::read_stored`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredVote {
    /// The member that wrote it.
    pub member_id: i32,
    /// The member-list tag of its cluster.
    pub membership: i64,
    /// Its term and vote.
    pub vote: TermVote,
}

/// Why the vote file could not be read or written; every message names the file.
#[derive(Debug)]
pub enum VoteFileError {
    /// Reading, writing, syncing or renaming failed.
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The file is not a whole vote record of this member and cluster, or its checksum is wrong.
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for VoteFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, action, source } => write!(f, "vote file {}: cannot {action}: {source}", path.display()),
            Self::Invalid { path, reason } => write!(
                f,
                "vote file {}: {reason}; if this directory belongs to another member or cluster, give the node its own",
                path.display()
            ),
        }
    }
}

impl std::error::Error for VoteFileError {}

/// The vote file of one member of one cluster, in a directory.
#[derive(Clone, Debug)]
pub struct VoteFile {
    disk: SharedDisk,
    path: PathBuf,
    member_id: i32,
    membership: i64,
}

impl VoteFile {
    /// The vote file of member `member_id` of the cluster whose member-list tag is `membership`, in `dir`.
    pub fn new(dir: &Path, member_id: i32, membership: i64) -> Self {
        Self::on(SharedDisk::os(), dir, member_id, membership)
    }

    /// The same, on `disk`.
    pub fn on(disk: SharedDisk, dir: &Path, member_id: i32, membership: i64) -> Self {
        Self { disk, path: dir.join("vote.dat"), member_id, membership }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The persisted term and vote, or `None` when nothing was ever stored (a new member).
    pub fn load(&self) -> Result<Option<TermVote>, VoteFileError> {
        let Some(stored) = Self::read_stored(&*self.disk, &self.path)? else {
            return Ok(None);
        };
        if stored.member_id != self.member_id || stored.membership != self.membership {
            return Err(VoteFileError::Invalid {
                path: self.path.clone(),
                reason: format!(
                    "written by member {} of cluster {:#018x}, this is member {} of cluster {:#018x}",
                    stored.member_id, stored.membership, self.member_id, self.membership
                ),
            });
        }
        Ok(Some(stored.vote))
    }

    /// The record in the vote file at `path` (`<data dir>/vote.dat`), whole and checksummed, whichever
    /// member and cluster wrote it (for a reader that does not know them: an operator's tool; the node
    /// loads with [`load`](Self::load), which checks them too); `None` when there is none. Reads only.
    pub fn read_stored(disk: &dyn Disk, path: &Path) -> Result<Option<StoredVote>, VoteFileError> {
        let bytes = match disk.read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(VoteFileError::Io { path: path.to_path_buf(), action: "read it", source }),
        };
        let invalid = |reason: String| VoteFileError::Invalid { path: path.to_path_buf(), reason };
        if bytes.len() != std::mem::size_of::<VoteRecord>() {
            return Err(invalid(format!("{} bytes, a vote record has 40", bytes.len())));
        }
        let record: VoteRecord = bytemuck::pod_read_unaligned(&bytes);
        if record.magic != MAGIC {
            return Err(invalid("not a vote record (wrong magic)".into()));
        }
        if record.checksum != record.checksum_of() {
            return Err(invalid("its checksum does not match: the file is damaged".into()));
        }
        Ok(Some(StoredVote {
            member_id: record.member_id,
            membership: record.membership,
            vote: TermVote {
                leadership_term_id: record.leadership_term_id,
                voted_for: (record.voted_for >= 0).then_some(record.voted_for),
            },
        }))
    }

    /// Makes `vote` durable, replacing the file atomically; returns only once it is on stable storage.
    pub fn store(&self, vote: TermVote) -> Result<(), VoteFileError> {
        let mut record = VoteRecord {
            magic: MAGIC,
            member_id: self.member_id,
            voted_for: vote.voted_for.unwrap_or(-1),
            leadership_term_id: vote.leadership_term_id,
            membership: self.membership,
            checksum: 0,
        };
        record.checksum = record.checksum_of();
        crate::storage::atomic_file::replace(&*self.disk, &self.path, bytemuck::bytes_of(&record), true)
            .map_err(|f| VoteFileError::Io { path: f.path, action: f.action, source: f.source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qc-vote-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_stored_vote_is_loaded_back_and_a_new_member_has_none() {
        let dir = scratch("roundtrip");
        let file = VoteFile::new(&dir, 2, 77);
        assert_eq!(file.load().unwrap(), None);
        let vote = TermVote { leadership_term_id: 5, voted_for: Some(1) };
        file.store(vote).unwrap();
        assert_eq!(file.load().unwrap(), Some(vote));
        let later = TermVote { leadership_term_id: 6, voted_for: None };
        file.store(later).unwrap();
        assert_eq!(file.load().unwrap(), Some(later));
        assert!(!dir.join("vote.dat.tmp").exists(), "the temporary copy is renamed away");
        // A reader that does not know the member learns it from the record.
        let stored = VoteFile::read_stored(&crate::storage::disk::OsDisk, file.path()).unwrap();
        assert_eq!(stored, Some(StoredVote { member_id: 2, membership: 77, vote: later }));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crash_before_the_rename_leaves_the_old_vote() {
        let dir = scratch("crash");
        let file = VoteFile::new(&dir, 0, 9);
        let vote = TermVote { leadership_term_id: 3, voted_for: Some(0) };
        file.store(vote).unwrap();
        // A crash after writing half of the next record's temporary copy.
        std::fs::write(dir.join("vote.dat.tmp"), [0xAB; 17]).unwrap();
        assert_eq!(file.load().unwrap(), Some(vote));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused_naming_it() {
        let dir = scratch("damaged");
        let file = VoteFile::new(&dir, 1, 42);
        file.store(TermVote { leadership_term_id: 8, voted_for: Some(2) }).unwrap();
        let mut bytes = std::fs::read(file.path()).unwrap();
        bytes[16] ^= 1; // the term
        std::fs::write(file.path(), &bytes).unwrap();
        let e = file.load().unwrap_err().to_string();
        assert!(e.contains("checksum") && e.contains("vote.dat"), "{e}");
        std::fs::write(file.path(), &bytes[..30]).unwrap();
        assert!(file.load().unwrap_err().to_string().contains("30 bytes"));
        file.store(TermVote { leadership_term_id: 8, voted_for: None }).unwrap();
        let e = VoteFile::new(&dir, 1, 43).load().unwrap_err().to_string();
        assert!(e.contains("cluster"), "another cluster's directory: {e}");
        let e = VoteFile::new(&dir, 0, 42).load().unwrap_err().to_string();
        assert!(e.contains("member 1"), "another member's directory: {e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_vote_that_cannot_be_made_durable_is_an_error() {
        let dir = scratch("unwritable");
        let not_a_dir = dir.join("plain-file");
        std::fs::write(&not_a_dir, b"x").unwrap();
        let file = VoteFile::new(&not_a_dir, 0, 1);
        let e = file.store(TermVote { leadership_term_id: 1, voted_for: Some(0) }).unwrap_err().to_string();
        assert!(e.contains("vote.dat") && e.contains("cannot"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
