//! The catch-up's wire protocol: the handshake's messages (hello, challenge, request), the answer and its
//! terms, the sealed frames everything after the handshake travels in, the key both ends prove and where
//! their nonces come from.

use std::io;
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::media::auth::{fill_random, AuthKey, TAG_LENGTH};
use crate::storage::recording::segment::MAX_BLOCK_LENGTH;
use crate::storage::snapshot::HEADER_LENGTH;

/// A snapshot file's header, which a catch-up reads whole before it installs the rest.
pub(super) const SNAPSHOT_HEADER_LENGTH: usize = HEADER_LENGTH as usize;

pub(super) const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"qccuhel2");
pub(super) const CHALLENGE_MAGIC: u64 = u64::from_le_bytes(*b"qccuchl2");
pub(super) const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"qccureq2");
/// Version 3: the answer lists every term of the leader's log before its end, not only those in the
/// range sent (a follower that installs the snapshot needs the history below it).
pub(super) const RESPONSE_MAGIC: u64 = u64::from_le_bytes(*b"qccures4");
/// Terms a response may list: a bound on what a damaged count can make a follower allocate.
pub(super) const MAX_TERMS: u32 = 1 << 16;
/// A frame's payload, at most: a block and its header, or a response and its terms.
pub(super) const MAX_FRAME: usize = MAX_BLOCK_LENGTH + 4096;
/// Bytes of a nonce.
pub(super) const NONCE_LENGTH: usize = 16;

/// What a follower asks for: the log from `from`, as member `member_id` of cluster `membership`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUpRequest {
    /// The follower's cluster (member-list tag).
    pub membership: i64,
    /// The follower's member id.
    pub member_id: i32,
    /// Where its log ends.
    pub from: i64,
}

impl CatchUpRequest {
    /// A request of member `member_id` of cluster `membership` for the log from `from`.
    pub fn new(membership: i64, member_id: i32, from: i64) -> Self {
        Self { membership, member_id, from }
    }
}

/// The key both ends of a catch-up prove they hold.
#[derive(Clone, Copy, Debug)]
pub struct CatchUpKey {
    key: AuthKey,
    secret: bool,
}

impl CatchUpKey {
    /// The catch-up key of cluster `membership`: derived from the channel's `auth_key` when there is one
    /// (only members can prove it), else from the membership (public: integrity only).
    pub fn new(auth_key: Option<&AuthKey>, membership: i64) -> Self {
        match auth_key {
            Some(key) => Self { key: AuthKey::new(key.keyed_hash(&[b"quorumcast catch-up key"])), secret: true },
            None => Self {
                key: AuthKey::derive("quorumcast catch-up key (public)", &membership.to_le_bytes()),
                secret: false,
            },
        }
    }

    /// True when it derives from a secret (an `auth_key`).
    pub fn is_secret(&self) -> bool {
        self.secret
    }

    fn proof(&self, who: &[u8], hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH], from: i64) -> [u8; TAG_LENGTH] {
        let hash = self.key.keyed_hash(&[
            who,
            &hello.membership.to_le_bytes(),
            &hello.member_id.to_le_bytes(),
            &hello.nonce,
            leader_nonce,
            &from.to_le_bytes(),
        ]);
        hash[..TAG_LENGTH].try_into().expect("a tag's length")
    }

    pub(super) fn leader_proof(&self, hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH]) -> [u8; TAG_LENGTH] {
        self.proof(b"leader", hello, leader_nonce, 0)
    }

    pub(super) fn follower_proof(
        &self,
        hello: &Hello,
        leader_nonce: &[u8; NONCE_LENGTH],
        from: i64,
    ) -> [u8; TAG_LENGTH] {
        self.proof(b"follower", hello, leader_nonce, from)
    }

    pub(super) fn stream_key(&self, hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH]) -> AuthKey {
        AuthKey::new(self.key.keyed_hash(&[
            b"stream",
            &hello.membership.to_le_bytes(),
            &hello.member_id.to_le_bytes(),
            &hello.nonce,
            leader_nonce,
        ]))
    }
}

/// The follower's first message.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct Hello {
    pub(super) magic: u64,
    pub(super) membership: i64,
    pub(super) member_id: i32,
    pub(super) reserved: i32,
    pub(super) nonce: [u8; NONCE_LENGTH],
}

/// The leader's answer to a hello: its nonce, and its proof of the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct Challenge {
    pub(super) magic: u64,
    pub(super) membership: i64,
    pub(super) nonce: [u8; NONCE_LENGTH],
    pub(super) proof: [u8; TAG_LENGTH],
}

/// The follower's request, with its proof of the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct Request {
    pub(super) magic: u64,
    pub(super) membership: i64,
    pub(super) member_id: i32,
    pub(super) reserved: i32,
    pub(super) from: i64,
    pub(super) proof: [u8; TAG_LENGTH],
}

/// The leader's answer, the first sealed frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct CatchUpResponse {
    pub(super) magic: u64,
    pub(super) membership: i64,
    /// 1 when refused (the reason is logged on the leader; the follower retries).
    pub(super) refused: u32,
    /// 1 when a snapshot precedes the blocks.
    pub(super) snapshot: u32,
    /// Where the blocks start: the request's position, or the snapshot's.
    pub(super) from: i64,
    /// Where they end: the leader's recording's end when it answered.
    pub(super) end: i64,
    /// The leadership term of the byte at `from`.
    pub(super) start_term: i64,
    pub(super) term_count: u32,
    /// Bytes of the configuration entry in effect at `from` (the leader's), sent after the terms; 0 when
    /// the initial configuration is.
    pub(super) configuration_length: u32,
}

/// The longest configuration entry a catch-up answer carries (a bound on what a follower allocates).
pub(super) const MAX_CONFIGURATION_LENGTH: u32 = 64 * 1024;

/// A term that starts within the fetched range.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct TermRecord {
    pub(super) leadership_term_id: i64,
    pub(super) base_position: i64,
}

/// What precedes a sealed frame's payload; its tag follows the payload.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(super) struct FrameHeader {
    pub(super) length: u32,
    pub(super) reserved: u32,
}

const _: () = assert!(std::mem::size_of::<Hello>() == 40);
const _: () = assert!(std::mem::size_of::<Challenge>() == 48);
const _: () = assert!(std::mem::size_of::<Request>() == 48);
const _: () = assert!(std::mem::size_of::<CatchUpResponse>() == 56);
const _: () = assert!(std::mem::size_of::<FrameHeader>() == 8);

/// The tag of frame `index` (its header and payload) under `key`.
pub(super) fn frame_tag(key: &AuthKey, index: u64, header: &FrameHeader, payload: &[u8]) -> [u8; TAG_LENGTH] {
    let hash = key.keyed_hash(&[&index.to_le_bytes(), bytemuck::bytes_of(header), payload]);
    hash[..TAG_LENGTH].try_into().expect("a tag's length")
}

/// Appends frame `index` of `payload` to `out`, sealed with `key`.
pub(super) fn seal_frame(out: &mut Vec<u8>, key: &AuthKey, index: u64, payload: &[u8]) {
    let header = FrameHeader { length: payload.len() as u32, reserved: 0 };
    out.extend_from_slice(bytemuck::bytes_of(&header));
    out.extend_from_slice(payload);
    out.extend_from_slice(&frame_tag(key, index, &header, payload));
}

/// Where a catch-up's nonces come from: the operating system's randomness (production), or a seeded
/// sequence (the node simulator, which must replay a seed exactly).
#[derive(Clone, Default)]
pub enum Nonces {
    /// `getrandom`.
    #[default]
    Os,
    /// Each nonce from two calls of this function.
    Seeded(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Os => "Nonces::Os",
            Self::Seeded(_) => "Nonces::Seeded(..)",
        })
    }
}

impl Nonces {
    /// Fills `out` with random bytes (from the seed's draws, 8 at a time, when seeded).
    pub fn fill(&self, out: &mut [u8]) -> io::Result<()> {
        match self {
            Self::Os => fill_random(out),
            Self::Seeded(draw) => {
                for chunk in out.chunks_mut(8) {
                    chunk.copy_from_slice(&draw().to_le_bytes()[..chunk.len()]);
                }
                Ok(())
            }
        }
    }

    /// A random 64-bit value; should the kernel refuse its randomness (it does not, once booted), one
    /// from the wall clock, which is unique though not secret.
    pub fn next_u64(&self) -> u64 {
        let mut bytes = [0u8; 8];
        match self.fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(_) => {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            }
        }
    }
}
