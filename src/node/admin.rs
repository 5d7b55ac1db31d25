//! Administrative commands through a running node's directory: membership changes, a leadership
//! transfer, a snapshot taken now, and suspending or resuming client entries, as `qc-cluster` sends them.
//!
//! Two rings in the node directory carry them: `admin.ring`, written by tools and read by the node's
//! consensus agent, and `admin-answers.ring`, written by the agent and read by the tool waiting (which
//! skips answers to other correlation ids). Only a process that can open the directory's files can
//! administer the node: the directory's permissions are the credential, as the issue of an operator key
//! for commands over the network is left to that path. A command is one line of text (an administrative
//! path, not a hot one), its correlation id first:
//!
//! ```text
//! 17 add-member 3 127.0.0.1:40504 127.0.0.1:40604 127.0.0.1:40704   (id, log, consensus, client)
//! 18 promote 3
//! 19 remove-member 0
//! 20 transfer-leadership 2        (or `transfer-leadership` alone: the follower furthest along)
//! 21 snapshot
//! 22 suspend
//! 23 resume
//! ```
//!
//! An answer is `17 ok <what happened>` or `17 error <why>`; membership changes are answered once they
//! commit (or fail), the others once the node took them. `24 status` answers at once with the member's
//! view: `member=0 role=leader term=2 leader=0 append=4096 commit=4096 applied=4096 snapshot=0
//! configuration=1 voters=[0,1,2] learners=[]` (`applied` and `snapshot` are the application's: what its
//! node last applied, and its newest snapshot's position).
//!
//! # Over the network
//!
//! The same commands reach a member over its consensus endpoint as [admin frames](AdminFrame), each
//! request and answer tagged with the **operator key** (`[admin] key`, [`AuthKey`]; a key of its own,
//! distinct from the members' `auth_key`, so an operator need not hold the members' key and a member's key
//! does not administer). A member without an operator key takes no command over the network: it answers
//! a well-formed request with an error saying so (no larger than the request), and counts it. A request
//! whose tag is wrong is dropped and counted, unanswered. A request carries the wall-clock time it was
//! sent: one older or newer than [`ADMIN_REQUEST_LIFETIME_MS`], or whose correlation id the member took
//! within that time, is a replay and is dropped ([`AdminReplayGuard`], bounded).

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use bytemuck::{Pod, Zeroable};

use crate::cluster::configuration::MemberEndpoints;
use crate::frame::CURRENT_VERSION;
use crate::media::auth::{AuthKey, TAG_LENGTH};
use crate::shm::buffer::{AtomicBuffer, Region};
use crate::shm::ring_buffer::{self, ManyToOneRingBuffer};

/// The ring tools write commands into, in the node directory.
pub const ADMIN_RING: &str = "admin.ring";
/// The ring the node writes answers into, in the node directory.
pub const ADMIN_ANSWERS_RING: &str = "admin-answers.ring";
/// Bytes of each ring's data area.
const ADMIN_RING_CAPACITY: usize = 64 * 1024;
/// The message type of a command and of an answer.
const ADMIN_MESSAGE: i32 = 1;

/// One administrative command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// Add this member as a learner.
    AddMember(MemberEndpoints),
    /// Promote this learner to voter.
    Promote(i32),
    /// Remove this member.
    RemoveMember(i32),
    /// Hand the leadership to this member (`None`: the follower furthest along).
    TransferLeadership(Option<i32>),
    /// Take a snapshot at the application's next poll.
    Snapshot,
    /// Stop taking client entries.
    Suspend,
    /// Take client entries again.
    Resume,
    /// The member's view: role, term, leader, positions, configuration (answered at once).
    Status,
}

impl fmt::Display for AdminCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AddMember(m) => write!(f, "add-member {} {} {} {}", m.id, m.log, m.consensus, m.client),
            Self::Promote(id) => write!(f, "promote {id}"),
            Self::RemoveMember(id) => write!(f, "remove-member {id}"),
            Self::TransferLeadership(Some(id)) => write!(f, "transfer-leadership {id}"),
            Self::TransferLeadership(None) => f.write_str("transfer-leadership"),
            Self::Snapshot => f.write_str("snapshot"),
            Self::Suspend => f.write_str("suspend"),
            Self::Resume => f.write_str("resume"),
            Self::Status => f.write_str("status"),
        }
    }
}

impl AdminCommand {
    /// Parses a command line (without its correlation id).
    pub fn parse(line: &str) -> Result<Self, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let id = |i: usize| -> Result<i32, String> {
            let word = words.get(i).ok_or_else(|| format!("`{line}`: a member id is missing"))?;
            word.parse().map_err(|_| format!("`{line}`: `{word}` is not a member id"))
        };
        let addr = |i: usize| -> Result<SocketAddr, String> {
            let word = words.get(i).ok_or_else(|| format!("`{line}`: an endpoint is missing"))?;
            word.parse().map_err(|_| format!("`{line}`: `{word}` is not an address:port"))
        };
        match words.first().copied() {
            Some("add-member") => Ok(Self::AddMember(MemberEndpoints {
                id: id(1)?,
                log: addr(2)?,
                consensus: addr(3)?,
                client: addr(4)?,
            })),
            Some("promote") => Ok(Self::Promote(id(1)?)),
            Some("remove-member") => Ok(Self::RemoveMember(id(1)?)),
            Some("transfer-leadership") if words.len() == 1 => Ok(Self::TransferLeadership(None)),
            Some("transfer-leadership") => Ok(Self::TransferLeadership(Some(id(1)?))),
            Some("snapshot") => Ok(Self::Snapshot),
            Some("suspend") => Ok(Self::Suspend),
            Some("resume") => Ok(Self::Resume),
            Some("status") => Ok(Self::Status),
            _ => Err(format!("`{line}` is not an administrative command")),
        }
    }
}

/// The two rings of a node's directory, from either side.
#[derive(Debug)]
pub struct AdminRings {
    commands: ManyToOneRingBuffer,
    answers: ManyToOneRingBuffer,
}

impl AdminRings {
    /// Creates the rings in `directory` (the node's side, at start).
    pub(crate) fn create(directory: &Path) -> std::io::Result<Self> {
        let ring = |name: &str| -> std::io::Result<ManyToOneRingBuffer> {
            let region =
                Region::create_file(&directory.join(name), ring_buffer::required_length(ADMIN_RING_CAPACITY), true)?;
            ManyToOneRingBuffer::new(AtomicBuffer::new(region)).map_err(|e| std::io::Error::other(e.to_string()))
        };
        Ok(Self { commands: ring(ADMIN_RING)?, answers: ring(ADMIN_ANSWERS_RING)? })
    }

    /// Opens the rings of a running node's `directory` (a tool's side).
    pub fn attach(directory: &Path) -> Result<Self, String> {
        let ring = |name: &str| -> Result<ManyToOneRingBuffer, String> {
            let path = directory.join(name);
            let region = Region::open_file(&path).map_err(|e| {
                format!("cannot open {}: {e} (is the node running, and is this its directory?)", path.display())
            })?;
            ManyToOneRingBuffer::new(AtomicBuffer::new(region)).map_err(|e| format!("{}: {e}", path.display()))
        };
        Ok(Self { commands: ring(ADMIN_RING)?, answers: ring(ADMIN_ANSWERS_RING)? })
    }

    /// Sends `command` with `correlation` (a tool's side).
    pub fn send(&self, correlation: u64, command: &AdminCommand) -> Result<(), String> {
        let line = format!("{correlation} {command}");
        self.commands.write(ADMIN_MESSAGE, line.as_bytes()).map_err(|e| format!("the node's admin ring: {e}"))
    }

    /// The answer to `correlation`, if it came (a tool's side; answers to other ids are dropped).
    pub fn answer(&self, correlation: u64) -> Option<Result<String, String>> {
        let mut found = None;
        self.answers.read(
            |_, bytes| {
                let text = String::from_utf8_lossy(bytes);
                let mut parts = text.splitn(3, ' ');
                let id = parts.next().and_then(|id| id.parse::<u64>().ok());
                let (kind, rest) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").to_string());
                if id == Some(correlation) {
                    found = Some(if kind == "ok" { Ok(rest) } else { Err(rest) });
                }
            },
            usize::MAX,
        );
        found
    }

    /// The next command waiting, with its correlation id, or why a line was not one (the node's side).
    pub(crate) fn take(&self) -> Option<(u64, Result<AdminCommand, String>)> {
        let mut taken = None;
        self.commands.read(
            |_, bytes| {
                let text = String::from_utf8_lossy(bytes);
                let (id, rest) = text.split_once(' ').unwrap_or((&text, ""));
                let correlation = id.parse().unwrap_or(0);
                taken = Some((correlation, AdminCommand::parse(rest)));
            },
            1,
        );
        taken
    }

    /// Answers `correlation` (the node's side; an answer that does not fit is dropped: the tool times out).
    pub(crate) fn answer_with(&self, correlation: u64, result: Result<String, String>) {
        let line = match result {
            Ok(what) => format!("{correlation} ok {what}"),
            Err(why) => format!("{correlation} error {why}"),
        };
        let _ = self.answers.write(ADMIN_MESSAGE, line.as_bytes());
    }
}

/// Frame type of an administrative request on the consensus endpoint (after the consensus frames' 0x48).
pub const TYPE_ADMIN_REQUEST: u16 = 0x49;
/// Frame type of an administrative answer.
pub const TYPE_ADMIN_ANSWER: u16 = 0x4A;
/// The admin frames' own version (their `admin_version`): a member refuses another, naming it.
pub const ADMIN_FRAME_VERSION: u8 = 1;
/// The longest command or answer text an admin frame carries (a longer answer is cut).
pub const MAX_ADMIN_TEXT: usize = 1024;
/// How far a request's send time may be from the member's wall clock, either way.
pub const ADMIN_REQUEST_LIFETIME_MS: i64 = 30_000;
/// Answer flag: the command was carried out (else the text says why not).
const OK_FLAG: u8 = 0x80;
/// BLAKE3 key-derivation context of the tag key, so an operator key tags nothing but admin frames.
const TAG_CONTEXT: &str = "quorumcast admin frame tag v1";

/// An admin frame's fixed part, little-endian; the text follows, then a [`TAG_LENGTH`]-byte tag (keyed
/// BLAKE3, with a key derived from the operator key) over both.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct AdminHeader {
    frame_length: i32,
    version: u8,
    flags: u8,
    frame_type: u16,
    admin_version: u8,
    reserved: [u8; 3],
    text_length: u32,
    correlation: u64,
    /// Requests: the sender's wall clock, milliseconds since the Unix epoch. Answers: the request's.
    sent_unix_ms: i64,
    /// Answers: the answering member. Requests: -1.
    member_id: i32,
    reserved2: i32,
}

const ADMIN_HEADER_LENGTH: usize = std::mem::size_of::<AdminHeader>();
const _: () = assert!(ADMIN_HEADER_LENGTH == 40);
/// The longest admin frame.
pub const MAX_ADMIN_FRAME_LENGTH: usize = ADMIN_HEADER_LENGTH + MAX_ADMIN_TEXT + TAG_LENGTH;

/// An admin frame read off the network, its tag checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminFrame {
    /// Ties an answer to its request.
    pub correlation: u64,
    /// The request's send time (milliseconds since the Unix epoch).
    pub sent_unix_ms: i64,
    /// A request's command line, or an answer.
    pub body: AdminBody,
}

/// What an admin frame says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminBody {
    /// A command line ([`AdminCommand::parse`] reads it).
    Request(String),
    /// Member `member_id`'s answer.
    Answer {
        /// The answering member.
        member_id: i32,
        /// What happened, or why not.
        result: Result<String, String>,
    },
}

/// Why bytes are not an admin frame to take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminFrameError {
    /// Not an admin frame at all (another frame type).
    NotAdmin,
    /// Too short, or lengths that do not add up.
    Malformed,
    /// An admin frame version this member does not read.
    UnknownVersion(u8),
    /// The tag does not verify with the operator key.
    BadTag,
}

impl fmt::Display for AdminFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAdmin => f.write_str("not an admin frame"),
            Self::Malformed => f.write_str("a malformed admin frame"),
            Self::UnknownVersion(v) => {
                write!(
                    f,
                    "admin frame version {v}, which this version (admin frames v{ADMIN_FRAME_VERSION}) does not read"
                )
            }
            Self::BadTag => f.write_str("an admin frame whose tag does not verify with the operator key"),
        }
    }
}

/// Whether `bytes` begin as an admin request (the frame type alone: nothing is checked yet).
pub fn is_admin_request(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && u16::from_le_bytes([bytes[6], bytes[7]]) == TYPE_ADMIN_REQUEST
}

fn tag(key: &AuthKey, bytes: &[u8]) -> [u8; TAG_LENGTH] {
    AuthKey::derive(TAG_CONTEXT, &key.to_bytes()).tag(bytes)
}

fn encode(
    key: &AuthKey,
    frame_type: u16,
    flags: u8,
    correlation: u64,
    sent_unix_ms: i64,
    member_id: i32,
    text: &str,
) -> Vec<u8> {
    let mut cut = text.len().min(MAX_ADMIN_TEXT);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let text = &text.as_bytes()[..cut];
    let header = AdminHeader {
        frame_length: (ADMIN_HEADER_LENGTH + text.len() + TAG_LENGTH) as i32,
        version: CURRENT_VERSION,
        flags,
        frame_type,
        admin_version: ADMIN_FRAME_VERSION,
        reserved: [0; 3],
        text_length: text.len() as u32,
        correlation,
        sent_unix_ms,
        member_id,
        reserved2: 0,
    };
    let mut bytes = Vec::with_capacity(header.frame_length as usize);
    bytes.extend_from_slice(bytemuck::bytes_of(&header));
    bytes.extend_from_slice(text);
    let tag = tag(key, &bytes);
    bytes.extend_from_slice(&tag);
    bytes
}

/// A request for `command`, sent at `sent_unix_ms`, tagged with the operator key.
pub fn encode_request(key: &AuthKey, correlation: u64, sent_unix_ms: i64, command: &AdminCommand) -> Vec<u8> {
    encode(key, TYPE_ADMIN_REQUEST, 0, correlation, sent_unix_ms, -1, &command.to_string())
}

/// Member `member_id`'s answer to the request `correlation` sent at `sent_unix_ms` (text cut at
/// [`MAX_ADMIN_TEXT`] bytes).
pub fn encode_answer(
    key: &AuthKey,
    correlation: u64,
    sent_unix_ms: i64,
    member_id: i32,
    result: &Result<String, String>,
) -> Vec<u8> {
    let (flags, text) = match result {
        Ok(what) => (OK_FLAG, what.as_str()),
        Err(why) => (0, why.as_str()),
    };
    encode(key, TYPE_ADMIN_ANSWER, flags, correlation, sent_unix_ms, member_id, text)
}

/// Reads an admin frame (request or answer) from `bytes` (trailing bytes past its length, such as a channel
/// tag, are ignored), checking its tag with `key`; `None` for the key: the tag is not checked (only to
/// answer a member without an operator key, which takes nothing).
pub fn decode(key: Option<&AuthKey>, bytes: &[u8]) -> Result<AdminFrame, AdminFrameError> {
    if bytes.len() < 8 {
        return Err(AdminFrameError::NotAdmin);
    }
    let frame_type = u16::from_le_bytes([bytes[6], bytes[7]]);
    if frame_type != TYPE_ADMIN_REQUEST && frame_type != TYPE_ADMIN_ANSWER {
        return Err(AdminFrameError::NotAdmin);
    }
    let header: AdminHeader =
        bytemuck::pod_read_unaligned(bytes.get(..ADMIN_HEADER_LENGTH).ok_or(AdminFrameError::Malformed)?);
    if header.admin_version != ADMIN_FRAME_VERSION {
        return Err(AdminFrameError::UnknownVersion(header.admin_version));
    }
    let text_length = header.text_length as usize;
    let length = ADMIN_HEADER_LENGTH + text_length + TAG_LENGTH;
    if text_length > MAX_ADMIN_TEXT || header.frame_length as usize != length || bytes.len() < length {
        return Err(AdminFrameError::Malformed);
    }
    let (body, tail) = bytes[..length].split_at(length - TAG_LENGTH);
    if let Some(key) = key {
        if !constant_time_eq(&tag(key, body), tail) {
            return Err(AdminFrameError::BadTag);
        }
    }
    let text = String::from_utf8_lossy(&body[ADMIN_HEADER_LENGTH..]).into_owned();
    let body = if frame_type == TYPE_ADMIN_REQUEST {
        AdminBody::Request(text)
    } else {
        let result = if header.flags & OK_FLAG != 0 { Ok(text) } else { Err(text) };
        AdminBody::Answer { member_id: header.member_id, result }
    };
    Ok(AdminFrame { correlation: header.correlation, sent_unix_ms: header.sent_unix_ms, body })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The requests a member took lately, so that a replayed one is dropped: bounded, and a request older than
/// [`ADMIN_REQUEST_LIFETIME_MS`] is refused anyway, so the ids of the last [`AdminReplayGuard::CAPACITY`]
/// suffice unless an operator sends more than that many within the lifetime (then the oldest ids are
/// forgotten early: a replay of one within the rest of its lifetime would be taken).
#[derive(Debug, Default)]
pub struct AdminReplayGuard {
    recent: VecDeque<u64>,
}

impl AdminReplayGuard {
    /// Correlation ids remembered.
    pub const CAPACITY: usize = 1024;

    /// Whether a request `correlation` sent at `sent_unix_ms` is to be taken at `now_unix_ms` (and, if so,
    /// remembers it): within the lifetime, and not taken before.
    pub fn admit(&mut self, correlation: u64, sent_unix_ms: i64, now_unix_ms: i64) -> bool {
        if (now_unix_ms - sent_unix_ms).abs() > ADMIN_REQUEST_LIFETIME_MS || self.recent.contains(&correlation) {
            return false;
        }
        if self.recent.len() == Self::CAPACITY {
            self.recent.pop_front();
        }
        self.recent.push_back(correlation);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_through_their_text() {
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let commands = [
            AdminCommand::AddMember(MemberEndpoints { id: 3, log: at(1), consensus: at(2), client: at(3) }),
            AdminCommand::Promote(3),
            AdminCommand::RemoveMember(0),
            AdminCommand::TransferLeadership(Some(2)),
            AdminCommand::TransferLeadership(None),
            AdminCommand::Snapshot,
            AdminCommand::Suspend,
            AdminCommand::Resume,
            AdminCommand::Status,
        ];
        for command in commands {
            assert_eq!(AdminCommand::parse(&command.to_string()), Ok(command));
        }
        assert!(AdminCommand::parse("promote x").unwrap_err().contains("not a member id"));
        assert!(AdminCommand::parse("add-member 3 127.0.0.1:1").unwrap_err().contains("endpoint is missing"));
        assert!(AdminCommand::parse("reboot").is_err());
    }

    #[test]
    fn a_tool_and_a_node_talk_through_the_directory() {
        let dir = std::env::temp_dir().join(format!("qc-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let node = AdminRings::create(&dir).unwrap();
        let tool = AdminRings::attach(&dir).unwrap();
        tool.send(7, &AdminCommand::Promote(3)).unwrap();
        assert_eq!(node.take(), Some((7, Ok(AdminCommand::Promote(3)))));
        assert_eq!(node.take(), None);
        node.answer_with(6, Ok("someone else's".into()));
        node.answer_with(7, Err("member 3 is not a learner".into()));
        assert_eq!(tool.answer(7), Some(Err("member 3 is not a learner".into())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn admin_frames_round_trip_tagged_with_the_operator_key_and_refuse_the_rest() {
        let key = AuthKey::new([7; 32]);
        let request = encode_request(&key, 42, 1_000, &AdminCommand::Promote(3));
        assert!(is_admin_request(&request));
        let mut with_channel_tag = request.clone();
        with_channel_tag.extend_from_slice(&[0xEE; TAG_LENGTH]);
        let frame = decode(Some(&key), &with_channel_tag).unwrap();
        assert_eq!(
            frame,
            AdminFrame { correlation: 42, sent_unix_ms: 1_000, body: AdminBody::Request("promote 3".into()) }
        );
        assert_eq!(decode(Some(&AuthKey::new([8; 32])), &request), Err(AdminFrameError::BadTag), "another key");
        assert_eq!(decode(None, &request).unwrap().correlation, 42, "unchecked: to say no key is configured");
        let mut altered = request.clone();
        altered[ADMIN_HEADER_LENGTH] ^= 1;
        assert_eq!(decode(Some(&key), &altered), Err(AdminFrameError::BadTag));
        let mut newer = request.clone();
        newer[8] = 2;
        assert_eq!(decode(Some(&key), &newer), Err(AdminFrameError::UnknownVersion(2)));
        assert!(decode(Some(&key), &newer).unwrap_err().to_string().contains("version 2"));
        for cut in [0, 7, 39, request.len() - 1] {
            assert!(decode(Some(&key), &request[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = request.clone();
        long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(Some(&key), &long), Err(AdminFrameError::Malformed), "no length past the datagram");
        assert_eq!(decode(Some(&key), &[0u8; 64]), Err(AdminFrameError::NotAdmin));

        let long_answer = Ok("é".repeat(MAX_ADMIN_TEXT));
        let answer = encode_answer(&key, 42, 1_000, 2, &long_answer);
        assert!(answer.len() <= MAX_ADMIN_FRAME_LENGTH);
        let AdminBody::Answer { member_id, result } = decode(Some(&key), &answer).unwrap().body else { panic!() };
        assert_eq!(member_id, 2);
        assert_eq!(result.unwrap().len(), MAX_ADMIN_TEXT, "cut on a character boundary");
        let refused = encode_answer(&key, 43, 1_000, 2, &Err("no".into()));
        assert!(matches!(decode(Some(&key), &refused).unwrap().body, AdminBody::Answer { result: Err(_), .. }));
    }

    #[test]
    fn a_replayed_or_stale_request_is_refused() {
        let mut guard = AdminReplayGuard::default();
        assert!(guard.admit(1, 100_000, 100_500));
        assert!(!guard.admit(1, 100_000, 100_600), "taken before");
        assert!(!guard.admit(2, 100_000, 100_000 + ADMIN_REQUEST_LIFETIME_MS + 1), "too old");
        assert!(!guard.admit(3, 200_000, 100_000), "from the future");
        for id in 10..10 + AdminReplayGuard::CAPACITY as u64 {
            assert!(guard.admit(id, 100_000, 100_000));
        }
        assert_eq!(guard.recent.len(), AdminReplayGuard::CAPACITY, "bounded");
    }
}
