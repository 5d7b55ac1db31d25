//! A member's introduction of its leader: what a follower sends a member that canvasses it, so that a
//! member whose log stops before the configuration entry that added the leader (and whose node file
//! does not name it) learns where the leader is, hears it, and follows it.
//!
//! A member hears only the members whose endpoints it knows (its node file's and those of every
//! configuration entry its log held). The leader sends it heartbeats, but from an address it drops as a
//! non-member's; it canvasses the members it knows, and they, following the leader, refuse it. An
//! introduction comes only from a member it already hears (its source address and, with an `auth_key`,
//! its tag checked by the transport as every consensus frame's), so it trusts the endpoints as it trusts
//! a configuration entry that member would have replicated: the consensus core then judges every frame of
//! the introduced leader as any other member's.
//!
//! ```text
//! 0   frame_length   i32   of the whole frame
//! 4   version        u8    INTRODUCTION_VERSION
//! 5   flags          u8    0
//! 6   frame_type     u16   TYPE_INTRODUCTION (0x4B, in the extension range)
//! 8   sender         i32   the introducing member
//! 12  term           i64   the leader's term, as the sender knows it
//! 20  leader               the member it follows, as a configuration entry carries each member
//!                          (`configuration::encode_endpoints`): its id (i32), then its log, consensus
//!                          and client addresses (family u8 4 or 6, the address's 4 or 16 bytes, port u16)
//! ```
//!
//! Little-endian. [`decode`] refuses, never panics on, any other bytes.

use super::configuration::{decode_endpoints, encode_endpoints, MemberEndpoints};
use super::consensus_core::MemberId;

/// The frame type of an introduction.
pub const TYPE_INTRODUCTION: u16 = 0x4B;
/// The format this build writes and reads.
pub const INTRODUCTION_VERSION: u8 = 1;
/// Where the leader's endpoints start.
const HEADER_LENGTH: usize = 20;
/// The longest introduction: the leader's id and three IPv6 addresses.
pub const MAX_INTRODUCTION_LENGTH: usize = HEADER_LENGTH + 4 + 3 * 19;

/// What an introduction says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Introduction {
    /// The introducing member.
    pub sender: MemberId,
    /// The term in which the sender follows the leader.
    pub term: i64,
    /// The leader and its endpoints.
    pub leader: MemberEndpoints,
}

/// Whether `bytes` begin as an introduction (the frame type alone: nothing is checked yet).
pub fn is_introduction(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && u16::from_le_bytes([bytes[6], bytes[7]]) == TYPE_INTRODUCTION
}

/// Writes `introduction` into `out` (cleared first).
pub fn encode(introduction: &Introduction, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&0i32.to_le_bytes());
    out.push(INTRODUCTION_VERSION);
    out.push(0);
    out.extend_from_slice(&TYPE_INTRODUCTION.to_le_bytes());
    out.extend_from_slice(&introduction.sender.to_le_bytes());
    out.extend_from_slice(&introduction.term.to_le_bytes());
    encode_endpoints(&introduction.leader, out);
    let length = out.len() as i32;
    out[..4].copy_from_slice(&length.to_le_bytes());
}

/// The introduction `bytes` hold, or why they hold none.
pub fn decode(bytes: &[u8]) -> Result<Introduction, String> {
    let header = bytes.get(..HEADER_LENGTH).ok_or("shorter than an introduction's header")?;
    let i32_at = |at: usize| i32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if i32_at(0) as usize != bytes.len() {
        return Err(format!("frame length {} in a datagram of {} bytes", i32_at(0), bytes.len()));
    }
    if header[4] != INTRODUCTION_VERSION {
        return Err(format!("introduction version {}, this build reads {INTRODUCTION_VERSION}", header[4]));
    }
    if !is_introduction(bytes) {
        return Err("not an introduction".into());
    }
    let term = i64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
    let (leader, length) = decode_endpoints(&bytes[HEADER_LENGTH..], "an introduction")?;
    if HEADER_LENGTH + length != bytes.len() {
        return Err("bytes after the endpoints".into());
    }
    if term < 0 {
        return Err(format!("term {term}"));
    }
    Ok(Introduction { sender: i32_at(8), term, leader })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn introduction(v6: bool) -> Introduction {
        let ip: std::net::IpAddr = if v6 { "fd00::7".parse().unwrap() } else { "10.1.2.3".parse().unwrap() };
        let at = |port| std::net::SocketAddr::new(ip, port);
        Introduction {
            sender: 2,
            term: 9,
            leader: MemberEndpoints { id: 3, log: at(40501), consensus: at(40502), client: at(40503) },
        }
    }

    #[test]
    fn an_introduction_round_trips() {
        let mut out = Vec::new();
        for v6 in [false, true] {
            encode(&introduction(v6), &mut out);
            assert!(is_introduction(&out) && out.len() <= MAX_INTRODUCTION_LENGTH);
            assert_eq!(decode(&out), Ok(introduction(v6)));
        }
    }

    #[test]
    fn bad_introductions_are_refused_never_a_panic() {
        let mut good = Vec::new();
        encode(&introduction(true), &mut good);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut version = good.clone();
        version[4] = 2;
        assert!(decode(&version).unwrap_err().contains("version 2"));
        let mut family = good.clone();
        family[HEADER_LENGTH + 4] = 5; // the log address's family, after the leader's id
        assert!(decode(&family).is_err());
        for byte in 0..good.len() {
            let mut flipped = good.clone();
            flipped[byte] ^= 0xff;
            let _ = decode(&flipped);
        }
    }
}
