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
//! commit (or fail), the others once the node took them.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use crate::cluster::configuration::MemberEndpoints;
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
}
