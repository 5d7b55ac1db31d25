//! Node files: a node's configuration in TOML, and profiles laid over it (the `config` feature).
//!
//! `qc-node` starts a node from one; an application that embeds a node may too, or may build its
//! [`NodeConfig`] with [`NodeBuilder`] and have no file at all.
//!
//! A file is read through the declarations of its settings (`quorumcast_driver::section!`): each
//! section's `read_file` asks for its settings' keys in declaration order and reads each value in the form
//! its declaration gives (a size, a duration, a string its type parses, ...). The keys no section asks for
//! are refused, by name. Only what is not one setting per key is read here: `members`, the agents' entries
//! and the clients' `auth_key`.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::agent::clock::{parse_duration, BareNumber};
use crate::agent::idle::IdleStrategyConfig;
use crate::client::credentials::{ClientKey, DEFAULT_CLIENT_KEY_NAME};
use crate::media::auth::AuthKey;
use crate::node::{Member, NodeBuilder, NodeConfig, NodeError};
use crate::setting::{form, FrontEnd, ReadValue, Setting, SettingError};

/// A node configuration file in TOML, or a profile to merge over one.
///
/// Every key is optional in a file, so that a node file (identity, membership, channel) and a profile
/// (threading, idle strategies, cores) can each hold only their part: [`NodeFile::merge`] lays a profile
/// over a node file, and [`NodeFile::into_config`] demands the keys a node needs (`id`, `members`) and
/// takes [`NodeBuilder::new`]'s defaults for the rest. Unknown keys are an error that names the key and
/// its table. Every key, each at its default where it has one (the settings' docs, on [`NodeConfig`] and
/// the types of its sections, give each key's meaning, default and unit):
///
#[doc = concat!("```toml\n", include_str!("node_file.toml"), "```")]
///
/// `agents.application` is not part of [`NodeConfig`]: it describes the thread of the program that embeds
/// the node (in `qc-node`, its main thread, which offers, applies, and in invoker mode runs the agents);
/// read it with [`NodeFile::application_idle`] and [`NodeFile::application_core`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFile {
    /// The file's keys, each known and each value readable (checked when parsed).
    table: toml::Table,
}

impl<'de> serde::Deserialize<'de> for NodeFile {
    /// A file's table, refused as [`NodeFile::parse`] refuses it.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let file = NodeFile { table: toml::Table::deserialize(deserializer)? };
        file.read_into(&mut NodeConfig::defaults()).map_err(serde::de::Error::custom)?;
        Ok(file)
    }
}

/// A `[[clients.keys]]` entry: a client key and the name its clients give.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientKeyEntry {
    name: String,
    key: Parsed<AuthKey>,
}

/// A size in a file, or `off` (a snapshot interval, a page cache window).
#[derive(Clone, Copy, Debug, PartialEq)]
struct SizeOrOff(Option<u64>);

impl std::str::FromStr for SizeOrOff {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "off" {
            return Ok(SizeOrOff(None));
        }
        let size = parse_size_text(text).map_err(|e| format!("{e}, or off"))?;
        Ok(SizeOrOff(Some(size as u64)))
    }
}

/// A `members` entry.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberEntry {
    id: i32,
    /// The log endpoint (`endpoint`, its name before 0.1, is still read).
    #[serde(alias = "endpoint")]
    log: SocketAddr,
    consensus: Option<SocketAddr>,
    client: Option<SocketAddr>,
}

/// One agent's (or the application thread's) idle strategy and core: `[agents] <agent> = { idle, core }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    idle: Option<Parsed<IdleStrategyConfig>>,
    core: Option<usize>,
}

/// The agents a node runs, as `[agents]` names their entries (in [`PerAgent`](crate::PerAgent)'s order),
/// and the embedding application's thread.
const AGENTS: [&str; 4] = ["consensus", "sender", "receiver", "recorder"];
const APPLICATION: &str = "application";

/// The keys read here rather than by a section's declaration (each is more than one setting, or adds to
/// one): `members`, `[agents] idle` and each agent's entry, and the clients' `auth_key`.
const READ_HERE: [&str; 8] = [
    "members",
    "[agents] idle",
    "[agents] consensus",
    "[agents] sender",
    "[agents] receiver",
    "[agents] recorder",
    "[agents] application",
    "[clients] auth_key",
];

/// A node file's key name (a [`Setting`]'s in node-file terms) as its table, if any, and its key:
/// `[channel] mtu` is `(Some("channel"), "mtu")`, `clean_stale` is `(None, "clean_stale")`.
fn file_path(name: &str) -> (Option<&str>, &str) {
    match name.strip_prefix('[').and_then(|rest| rest.split_once("] ")) {
        Some((table, key)) => (Some(table), key),
        None => (None, name),
    }
}

/// Lays `over` on `base`: tables merge key by key, any other value (arrays included) replaces.
fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match value {
            toml::Value::Table(over) if base.get(&key).is_some_and(toml::Value::is_table) => {
                if let Some(toml::Value::Table(base)) = base.get_mut(&key) {
                    merge_tables(base, over);
                }
            }
            value => {
                base.insert(key, value);
            }
        }
    }
}

impl NodeFile {
    /// Parses a node file or profile from TOML text. Fails on bad TOML (with its line and column), an
    /// unknown key (named with its table), or a value that does not read (an idle strategy, duration, size,
    /// address, mode; named by its key).
    pub fn parse(text: &str) -> Result<Self, NodeError> {
        let file = NodeFile { table: toml::from_str(text).map_err(|e| NodeError::Config(e.to_string()))? };
        file.read_into(&mut NodeConfig::defaults()).map_err(NodeError::Config)?;
        Ok(file)
    }

    /// Reads and parses the file at `path`; errors name the file.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, NodeError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| NodeError::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))
    }

    /// This file with every key that `over` sets replaced by `over`'s value (tables merge key by key,
    /// `members` is replaced whole). So `node.merge(profile)`: the profile wins where both set a key.
    pub fn merge(mut self, over: NodeFile) -> NodeFile {
        merge_tables(&mut self.table, over.table);
        self
    }

    /// The idle strategy of the application thread: `agents.application.idle`, else `agents.idle`, else
    /// the default backoff.
    pub fn application_idle(&self) -> IdleStrategyConfig {
        self.agent_entry(APPLICATION).ok().and_then(|entry| entry.idle).map_or_else(|| self.agents_idle(), |p| p.0)
    }

    /// The core of the application thread (`agents.application.core`), if set.
    pub fn application_core(&self) -> Option<usize> {
        self.agent_entry(APPLICATION).ok().and_then(|entry| entry.core)
    }

    /// The value at `name` (a node-file key name, `[table] key` or `key`), if the file has it.
    fn value(&self, name: &str) -> Option<&toml::Value> {
        let (table, key) = file_path(name);
        match table {
            Some(table) => self.table.get(table)?.as_table()?.get(key),
            None => self.table.get(key),
        }
    }

    /// The value at `name` read as a `T` through its `Deserialize`; the error names the key.
    fn read<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, String> {
        self.value(name).map(|value| value.clone().try_into().map_err(|e| format!("{name}: {e}"))).transpose()
    }

    /// `[agents] <agent>`'s entry (empty when the file has none).
    fn agent_entry(&self, agent: &str) -> Result<AgentEntry, String> {
        Ok(self.read(&format!("[agents] {agent}"))?.unwrap_or_default())
    }

    /// `[agents] idle`, else the default backoff.
    fn agents_idle(&self) -> IdleStrategyConfig {
        self.read::<Parsed<IdleStrategyConfig>>("[agents] idle")
            .ok()
            .flatten()
            .map_or_else(IdleStrategyConfig::default, |p| p.0)
    }

    /// Sets in `config` every setting this file gives, each section's through its declaration, and refuses
    /// a key no section (nor this reader) asks for and a value that does not read. Does not check the
    /// rules (see [`into_config`](Self::into_config)).
    fn read_into(&self, config: &mut NodeConfig) -> Result<(), String> {
        let mut asked: Vec<&'static str> = READ_HERE.to_vec();
        let mut lookup = |_: Setting, names: &[&'static str]| {
            asked.extend_from_slice(names);
            names.iter().find_map(|name| self.value(name)).map(FileValue)
        };
        let named = |e: SettingError| e.render(FrontEnd::NodeFile);
        config.read_file(&mut lookup).map_err(named)?;
        config.channel.read_file(&mut lookup).map_err(named)?;
        config.channel.socket.read_file(&mut lookup).map_err(named)?;
        config.timers.read_file(&mut lookup).map_err(named)?;
        config.storage.read_file(&mut lookup).map_err(named)?;
        config.service.read_file(&mut lookup).map_err(named)?;
        config.clients.read_file(&mut lookup).map_err(named)?;
        self.refuse_unknown_keys(&asked)?;

        // As NodeBuilder::term_buffer_length: a small term shrinks the default window to fit.
        if self.value("[channel] term_buffer_length").or(self.value("[channel] term_length")).is_some()
            && self.value("[channel] receiver_window").is_none()
        {
            config.channel.receiver_window = config.channel.receiver_window.min(config.channel.term_length / 2);
        }
        if let Some(members) = self.read::<Vec<MemberEntry>>("members")? {
            config.members = members
                .iter()
                .map(|m| Member {
                    consensus: m.consensus.unwrap_or(Member::new(m.id, m.log).consensus),
                    client: m.client.unwrap_or(Member::new(m.id, m.log).client),
                    ..Member::new(m.id, m.log)
                })
                .collect();
        }
        let idle = match self.read::<Parsed<IdleStrategyConfig>>("[agents] idle")? {
            Some(idle) => idle.0,
            None => IdleStrategyConfig::default(),
        };
        let mut entries = [AgentEntry::default(); 4];
        for (entry, agent) in entries.iter_mut().zip(AGENTS) {
            *entry = self.agent_entry(agent)?;
        }
        self.agent_entry(APPLICATION)?;
        config.idle = entries.map(|entry| entry.idle.map_or(idle, |p| p.0)).into();
        config.cores = entries.map(|entry| entry.core).into();
        if let Some(key) = self.read::<Parsed<AuthKey>>("[clients] auth_key")? {
            // A key its clients give as `default`, listed before the named `keys`.
            config.clients.keys.insert(0, ClientKey::new(DEFAULT_CLIENT_KEY_NAME, key.0));
        }
        Ok(())
    }

    /// Refuses a key of this file that is not among `asked` (every key the sections and this reader know),
    /// naming it, its table and the keys the table has.
    fn refuse_unknown_keys(&self, asked: &[&'static str]) -> Result<(), String> {
        let known = |table: Option<&str>, key: &str| asked.iter().any(|name| file_path(name) == (table, key));
        let keys_of = |table: Option<&str>| {
            let mut keys: Vec<&str> =
                asked.iter().map(|name| file_path(name)).filter(|(t, _)| *t == table).map(|(_, key)| key).collect();
            if table.is_none() {
                keys.extend(asked.iter().filter_map(|name| file_path(name).0));
            }
            keys.sort_unstable();
            keys.dedup();
            keys.join(", ")
        };
        for (key, value) in &self.table {
            let is_table = asked.iter().any(|name| file_path(name).0 == Some(key.as_str()));
            if !is_table {
                if !known(None, key) {
                    return Err(format!(
                        "unknown key `{key}` at the top of the file; the keys there: {}",
                        keys_of(None)
                    ));
                }
                continue;
            }
            let Some(inner) = value.as_table() else {
                return Err(format!("`{key}` must be a table ([{key}]), not a value"));
            };
            if let Some(unknown) = inner.keys().find(|k| !known(Some(key), k)) {
                return Err(format!("unknown key `{unknown}` in [{key}]; the keys there: {}", keys_of(Some(key))));
            }
        }
        Ok(())
    }

    /// The node configuration this file describes; fails when `id` or `members` is missing, or
    /// when the configuration breaks a rule of [`Node::start`](crate::node::Node::start) (checked here so a file is refused early).
    pub fn into_config(self) -> Result<NodeConfig, NodeError> {
        let missing = |key: &str, what: &str| NodeError::Config(format!("missing key `{key}` ({what})"));
        if self.value("id").is_none() {
            return Err(missing("id", "this node's member id"));
        }
        if self.value("members").is_none() {
            return Err(missing(
                "members",
                "every member's id and log endpoint, e.g. members = [{ id = 0, log = \"127.0.0.1:40501\" }]",
            ));
        }
        let mut config = NodeBuilder::new(0, Vec::new()).config().clone();
        self.read_into(&mut config).map_err(NodeError::Config)?;
        if !config.ingress_capacity.is_power_of_two() {
            return Err(NodeError::Config(format!(
                "ingress_capacity {} must be a power of two",
                config.ingress_capacity
            )));
        }
        config.validate().map_err(in_file_terms)?;
        config.channel.validate().map_err(|e| in_file_terms(e.into()))?;
        Ok(config)
    }
}

/// A node's refusal in a node file's terms: a setting is named by its table and key.
fn in_file_terms(error: NodeError) -> NodeError {
    match error {
        NodeError::Setting(e) => NodeError::Config(e.render(FrontEnd::NodeFile)),
        other => other,
    }
}

/// A value of a node file, read in the form a setting's declaration gives ([`form`]).
struct FileValue<'a>(&'a toml::Value);

impl FileValue<'_> {
    /// The value through `T`'s `Deserialize` (the file's value types: sizes, durations, parsed strings).
    fn de<T: DeserializeOwned>(&self) -> Result<T, String> {
        self.0.clone().try_into().map_err(|e: toml::de::Error| e.message().to_string())
    }
}

impl<T: DeserializeOwned> ReadValue<T, form::Plain> for FileValue<'_> {
    fn read_value(&self) -> Result<T, String> {
        self.de()
    }
}

/// A field a size in bytes sets.
trait FromBytes {
    fn from_bytes(bytes: usize) -> Self;
}

impl FromBytes for usize {
    fn from_bytes(bytes: usize) -> Self {
        bytes
    }
}

impl FromBytes for u64 {
    fn from_bytes(bytes: usize) -> Self {
        bytes as u64
    }
}

impl FromBytes for i64 {
    fn from_bytes(bytes: usize) -> Self {
        bytes as i64
    }
}

impl FromBytes for Option<usize> {
    fn from_bytes(bytes: usize) -> Self {
        Some(bytes)
    }
}

impl<T: FromBytes> ReadValue<T, form::Size> for FileValue<'_> {
    fn read_value(&self) -> Result<T, String> {
        self.de::<FileSize>().map(|size| T::from_bytes(size.0))
    }
}

impl ReadValue<Option<u64>, form::SizeOrOff> for FileValue<'_> {
    fn read_value(&self) -> Result<Option<u64>, String> {
        self.de::<Parsed<SizeOrOff>>().map(|size| size.0 .0)
    }
}

impl ReadValue<Duration, form::Duration> for FileValue<'_> {
    fn read_value(&self) -> Result<Duration, String> {
        self.de::<FileDuration>().map(|d| d.0)
    }
}

impl ReadValue<u64, form::Nanos> for FileValue<'_> {
    fn read_value(&self) -> Result<u64, String> {
        self.de::<FileDuration>().map(|d| crate::agent::clock::nanos(d.0))
    }
}

impl<T: std::str::FromStr<Err: fmt::Display>> ReadValue<T, form::Text> for FileValue<'_> {
    fn read_value(&self) -> Result<T, String> {
        self.de::<Parsed<T>>().map(|p| p.0)
    }
}

impl<T: std::str::FromStr<Err: fmt::Display>> ReadValue<Option<T>, form::SomeText> for FileValue<'_> {
    fn read_value(&self) -> Result<Option<T>, String> {
        self.de::<Parsed<T>>().map(|p| Some(p.0))
    }
}

impl<T: std::str::FromStr<Err: fmt::Display>> ReadValue<Vec<T>, form::TextList> for FileValue<'_> {
    fn read_value(&self) -> Result<Vec<T>, String> {
        self.de::<Vec<Parsed<T>>>().map(|list| list.into_iter().map(|p| p.0).collect())
    }
}

impl ReadValue<Vec<ClientKey>, form::Entries> for FileValue<'_> {
    fn read_value(&self) -> Result<Vec<ClientKey>, String> {
        let entries = self.de::<Vec<ClientKeyEntry>>()?;
        Ok(entries.into_iter().map(|entry| ClientKey::new(entry.name, entry.key.0)).collect())
    }
}

impl NodeConfig {
    /// The configuration a TOML node file describes (see [`NodeFile`] for the keys).
    pub fn from_toml(text: &str) -> Result<NodeConfig, NodeError> {
        NodeFile::parse(text)?.into_config()
    }
}

/// A value a file gives as a string in the form its type's `FromStr` takes (idle strategies, modes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Parsed<T>(pub(crate) T);

impl<'de, T> serde::Deserialize<'de> for Parsed<T>
where
    T: std::str::FromStr,
    T::Err: fmt::Display,
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(Parsed).map_err(serde::de::Error::custom)
    }
}

/// A duration written as a number with a unit: `100us`, `10ms`, `5s`, `500ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FileDuration(Duration);

impl<'de> serde::Deserialize<'de> for FileDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text, BareNumber::Refused).map(FileDuration).map_err(serde::de::Error::custom)
    }
}

/// A size in bytes: a whole number, or a string with a unit: `"16MiB"`, `"128KiB"`, `"1GiB"`, `"4096B"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FileSize(usize);

impl<'de> serde::Deserialize<'de> for FileSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SizeVisitor)
    }
}

struct SizeVisitor;

impl serde::de::Visitor<'_> for SizeVisitor {
    type Value = FileSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size: a whole number of bytes, or a string such as \"16MiB\", \"128KiB\", \"4096B\"")
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<FileSize, E> {
        usize::try_from(value).map(FileSize).map_err(|_| E::custom(format!("size {value} is too large")))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<FileSize, E> {
        u64::try_from(value).map_err(|_| E::custom(format!("size {value} is negative"))).and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FileSize, E> {
        parse_size_text(text).map(FileSize).map_err(E::custom)
    }
}

/// Parses `<whole number>[B|KiB|MiB|GiB]`.
fn parse_size_text(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("size `{text}` must be a whole number with an optional unit B, KiB, MiB or GiB");
    let value: usize = digits.parse().map_err(|_| bad())?;
    let per_unit: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    value.checked_mul(per_unit).ok_or_else(|| format!("size `{text}` is too large"))
}

#[cfg(test)]
mod file_tests {
    use super::*;
    use crate::agent::ThreadingMode;

    const NODE: &str = r#"
        id = 1
        leader = 0
        clean_stale = true
        members = [
            { id = 0, log = "127.0.0.1:40501" },
            { id = 1, log = "127.0.0.1:40502" },
            { id = 2, log = "127.0.0.1:40503" },
        ]
        [channel]
        mtu = 8192
        term_buffer_length = "16MiB"
        receive_buffer = 4194304
        [timers]
        status_interval = "10ms"
        nak_delay = "100us"
        [agents]
        threading = "dedicated"
        idle = "noop"
        sender = { idle = "busy-spin", core = 1 }
    "#;

    #[test]
    fn a_node_file_sets_every_part_of_the_config() {
        let config = NodeConfig::from_toml(NODE).unwrap();
        assert_eq!((config.id, config.leader, config.members.len()), (1, Some(0), 3));
        assert_eq!(config.members[2].log, "127.0.0.1:40503".parse().unwrap());
        assert!(config.clean_stale);
        assert_eq!((config.channel.mtu, config.channel.term_length), (8192, 16 << 20));
        assert_eq!(config.channel.socket.receive_buffer, Some(4 << 20));
        assert_eq!(config.channel.status_interval, Duration::from_millis(10));
        assert_eq!(config.channel.nak_delay, Duration::from_micros(100));
        assert_eq!(config.threading, ThreadingMode::Dedicated);
        assert_eq!(
            config.idle,
            [
                IdleStrategyConfig::NoOp,
                IdleStrategyConfig::BusySpin,
                IdleStrategyConfig::NoOp,
                IdleStrategyConfig::NoOp
            ]
            .into()
        );
        assert_eq!(config.cores, [None, Some(1), None, None].into());
    }

    #[test]
    fn a_profile_overrides_the_keys_it_sets_and_keeps_the_rest() {
        let profile = NodeFile::parse(
            r#"
            [agents]
            threading = "shared"
            idle = "backoff:10,5,1us,1ms"
            sender = { core = 0 }
            application = { idle = "yield" }
            "#,
        )
        .unwrap();
        let merged = NodeFile::parse(NODE).unwrap().merge(profile);
        assert_eq!(merged.application_idle(), IdleStrategyConfig::Yield);
        let config = merged.into_config().unwrap();
        assert_eq!(config.threading, ThreadingMode::Shared);
        let backoff: IdleStrategyConfig = "backoff:10,5,1us,1ms".parse().unwrap();
        // The sender's own idle from the node file stays (the profile set only its core).
        assert_eq!(config.idle, [backoff, IdleStrategyConfig::BusySpin, backoff, backoff].into());
        assert_eq!(config.cores, [None, Some(0), None, None].into());
        assert_eq!((config.id, config.channel.mtu), (1, 8192));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = NodeFile::parse("id = 0\nmtu = 1408\n").unwrap_err().to_string();
        assert!(e.contains("`mtu`"), "{e}");
        let e = NodeFile::parse("[agents]\nthreads = \"shared\"\n").unwrap_err().to_string();
        assert!(e.contains("`threads`"), "{e}");
        let e = NodeFile::parse("[agents.sender]\ncores = 1\n").unwrap_err().to_string();
        assert!(e.contains("`cores`"), "{e}");
        let e = NodeFile::parse("[timers]\nnak_dealy = \"1ms\"\n").unwrap_err().to_string();
        assert!(e.contains("unknown key `nak_dealy` in [timers]") && e.contains("nak_delay"), "{e}");
        let e = NodeFile::parse("[channle]\nmtu = 1408\n").unwrap_err().to_string();
        assert!(e.contains("`channle`") && e.contains("channel"), "{e}");
        let e = NodeFile::parse("[channel]\nmtu = \"big\"\n").unwrap_err().to_string();
        assert!(e.contains("[channel] mtu: invalid type"), "{e}");
    }

    #[test]
    fn bad_values_and_missing_keys_say_what_to_write() {
        let e = NodeFile::parse("[timers]\nnak_delay = \"100\"\n").unwrap_err().to_string();
        assert!(e.contains("ns, us, ms or s"), "{e}");
        let e = NodeFile::parse("[agents]\nidle = \"sleepy\"\n").unwrap_err().to_string();
        assert!(e.contains("sleepy"), "{e}");
        let e = NodeFile::parse("[channel]\nterm_length = \"16MB\"\n").unwrap_err().to_string();
        assert!(e.contains("MiB"), "{e}");
        let e = NodeFile::parse("[agents]\nthreading = \"pooled\"\n").unwrap_err().to_string();
        assert!(e.contains("pooled"), "{e}");
        let e = NodeConfig::from_toml("id = 0\nleader = 0\n").unwrap_err().to_string();
        assert!(e.contains("`members`"), "{e}");
        let e = NodeConfig::from_toml(&NODE.replace("leader = 0", "leader = 7")).unwrap_err().to_string();
        assert!(e.contains("leader id 7"), "{e}");
        let e = NodeConfig::from_toml(&NODE.replace("mtu = 8192", "mtu = 1400")).unwrap_err().to_string();
        assert!(e.contains("multiple of 32"), "{e}");
    }

    #[test]
    fn the_acknowledgement_gap_is_set_in_timers_and_refused_past_the_interval() {
        let gap = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"50us\"");
        assert_eq!(NodeConfig::from_toml(&gap).unwrap().ack_gap, Duration::from_micros(50));
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().ack_gap, Duration::from_micros(20), "the default");
        let none = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"0us\"");
        assert_eq!(NodeConfig::from_toml(&none).unwrap().ack_gap, Duration::ZERO, "zero: every advance");
        let long = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"300ms\"");
        let e = NodeConfig::from_toml(&long).unwrap_err().to_string();
        assert!(e.contains("[timers] ack_gap: (300ms) must be at most [timers] ack_interval (200ms)"), "{e}");
    }

    #[test]
    fn a_refused_setting_is_named_by_its_table_and_key_in_the_file() {
        let timers = format!("{NODE}\n[consensus]\nheartbeat_timeout = \"200ms\"\nelection_timeout_min = \"150ms\"\n");
        let e = NodeConfig::from_toml(&timers).unwrap_err().to_string();
        assert!(
            e.contains("[consensus] heartbeat_timeout: (200ms) must be below [consensus] election_timeout_min"),
            "{e}"
        );
        assert!(!e.contains("_ns") && !e.contains("NodeBuilder"), "{e}");
        let clients = format!(
            "{NODE}\n[clients]\nenabled = true\nsession_key = \"{}\"\nsession_timeout = \"0s\"\n",
            "5".repeat(64)
        );
        let e = NodeConfig::from_toml(&clients).unwrap_err().to_string();
        assert!(e.contains("[clients] session_timeout: (0ns) must be more than 0"), "{e}");
        let e = NodeConfig::from_toml(&format!("{NODE}\n[clients]\nenabled = true\n")).unwrap_err().to_string();
        assert!(e.contains("[clients] session_key: is not set and [channel] auth_key is not either"), "{e}");
        // The same rule, broken through the builder, names the builder's method and field.
        let timers = crate::cluster::consensus_core::Timers { heartbeat_timeout_ns: 200_000_000, ..Default::default() };
        let members = vec![crate::node::Member::new(0, "127.0.0.1:40501".parse().unwrap())];
        let e = NodeBuilder::new(0, members).timers(timers).config().validate().unwrap_err().to_string();
        assert!(e.contains("NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. }): (200ms) must be below"), "{e}");
        assert!(e.contains("election_timeout_min_ns") && !e.contains("[consensus]"), "{e}");
    }

    #[test]
    fn the_page_cache_window_is_a_size_or_off_and_too_small_a_one_is_refused_by_name() {
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().storage.page_cache_window, Some(64 << 20));
        let with =
            |value: &str| NodeConfig::from_toml(&format!("{NODE}\n[storage]\npage_cache_window = \"{value}\"\n"));
        assert_eq!(with("256MiB").unwrap().storage.page_cache_window, Some(256 << 20));
        assert_eq!(with("off").unwrap().storage.page_cache_window, None);
        let e = with("4MiB").unwrap_err().to_string();
        assert!(e.contains("[storage] page_cache_window: (4194304) must be at least 8 MiB"), "{e}");
        let e = with("lots").unwrap_err().to_string();
        assert!(e.contains("page_cache_window") && e.contains("or off"), "{e}");
    }

    #[test]
    fn the_clients_table_sets_the_client_endpoint_and_its_limits() {
        let text = NODE.replace("{ id = 2, log = \"127.0.0.1:40503\" }", "{ id = 2, log = \"127.0.0.1:40503\", client = \"127.0.0.1:49000\" }")
            + "[clients]\nenabled = true\nsession_key = \"5555555555555555555555555555555555555555555555555555555555555555\"\nmax_sessions = 16\nsession_timeout = \"2s\"\nwindow = 64\nallow = [\"10.0.0.0/8\", \"::1\"]\n";
        let config = NodeConfig::from_toml(&text).unwrap();
        let clients = &config.clients;
        assert!(clients.enabled);
        assert_eq!((clients.max_sessions, clients.window), (16, 64));
        assert_eq!(clients.session_timeout, Duration::from_secs(2));
        assert!(clients.allows("10.1.2.3".parse().unwrap()));
        assert!(clients.allows("::1".parse().unwrap()));
        assert!(!clients.allows("11.0.0.1".parse().unwrap()));
        assert!(!clients.allows("127.0.0.1".parse().unwrap()));
        assert_eq!(config.members[2].client, "127.0.0.1:49000".parse().unwrap());
        assert_eq!(config.members[0].client, "127.0.0.1:40701".parse().unwrap(), "default: the log port + 200");
        // A profile may set the table too, and wins where it does.
        let profile = NodeFile::parse("[clients]\nmax_sessions = 8\n").unwrap();
        let merged = NodeFile::parse(&text).unwrap().merge(profile).into_config().unwrap();
        assert_eq!((merged.clients.enabled, merged.clients.max_sessions), (true, 8));
        let e = NodeConfig::from_toml(&(text.clone() + "max_sessions = 0\n").replace("max_sessions = 16\n", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[clients] max_sessions: must be at least 1"), "{e}");
        let e = NodeFile::parse("[clients]\nallow = [\"10.0.0.0/40\"]\n").unwrap_err().to_string();
        assert!(e.contains("prefix"), "{e}");
        let session_key = format!("session_key = \"{}\"\n", "5".repeat(64));
        let e = NodeConfig::from_toml(&(NODE.to_string() + "[clients]\nenabled = true\n" + &session_key))
            .map(|_| ())
            .and_then(|_| {
                let clash = NODE.replace(
                    "{ id = 2, log = \"127.0.0.1:40503\" }",
                    "{ id = 2, log = \"127.0.0.1:40503\", client = \"127.0.0.1:40502\" }",
                ) + "[clients]\nenabled = true\n"
                    + &session_key;
                NodeConfig::from_toml(&clash).map(|_| ())
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("127.0.0.1:40502") && e.contains("client"), "{e}");
    }

    #[test]
    fn the_clients_table_takes_the_session_key_client_keys_and_per_address_limits() {
        let key = |digit: char| std::iter::repeat_n(digit, 64).collect::<String>();
        let text = format!(
            "{NODE}[clients]\nenabled = true\nsession_key = \"{}\"\nauth_key = \"{}\"\n\
             keys = [{{ name = \"billing\", key = \"{}\" }}]\nmax_sessions_per_address = 4\nopens_per_second = 20\n\
             max_sessions_per_prefix = 8\n",
            key('1'),
            key('2'),
            key('3')
        );
        let config = NodeConfig::from_toml(&text).unwrap();
        let clients = &config.clients;
        assert_eq!(clients.session_key, Some(key('1').parse().unwrap()));
        let names: Vec<_> = clients.keys.iter().map(ClientKey::name).collect();
        assert_eq!(names, [DEFAULT_CLIENT_KEY_NAME, "billing"]);
        assert_eq!(clients.keys[1].key(), &key('3').parse().unwrap());
        assert_eq!((clients.max_sessions_per_address, clients.opens_per_second), (4, 20));
        assert_eq!(clients.max_sessions_per_prefix, 8);
        // A network's share below one address's is refused, naming both keys.
        let e = NodeConfig::from_toml(&text.replace("max_sessions_per_prefix = 8", "max_sessions_per_prefix = 2"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[clients] max_sessions_per_prefix") && e.contains("max_sessions_per_address"), "{e}");
        // Clients without a session key (nor the channel's auth_key) are refused, naming both keys.
        let e = NodeConfig::from_toml(&(NODE.to_string() + "[clients]\nenabled = true\n")).unwrap_err().to_string();
        assert!(e.contains("[clients] session_key") && e.contains("[channel] auth_key"), "{e}");
        let e = NodeFile::parse("[clients]\nauth_key = \"12\"\n").unwrap_err().to_string();
        assert!(e.contains("auth_key"), "{e}");
    }

    #[test]
    fn the_admin_table_takes_the_operator_key_which_must_not_be_the_channels() {
        let key = |digit: char| std::iter::repeat_n(digit, 64).collect::<String>();
        let config = NodeConfig::from_toml(&format!("{NODE}[admin]\nkey = \"{}\"\n", key('4'))).unwrap();
        assert_eq!(config.admin_key, Some(key('4').parse().unwrap()));
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().admin_key, None, "none by default");
        let one = "id = 0\nmembers = [{ id = 0, log = \"127.0.0.1:40501\" }]\n";
        let same = format!("{one}[channel]\nauth_key = \"{}\"\n[admin]\nkey = \"{}\"\n", key('5'), key('5'));
        let e = NodeConfig::from_toml(&same).unwrap_err().to_string();
        assert!(e.contains("[admin] key") && e.contains("[channel] auth_key") && e.contains("a key of its own"), "{e}");
        let e = NodeFile::parse("[admin]\nkey = \"12\"\n").unwrap_err().to_string();
        assert!(e.contains("key"), "{e}");
    }

    /// The example in [`NodeFile`]'s doc, with a distinct key where it shows `<64 hex digits>`.
    fn documented_example() -> String {
        let mut text = include_str!("node_file.toml").to_string();
        for digit in '1'..='9' {
            text = text.replacen("<64 hex digits>", &digit.to_string().repeat(64), 1);
        }
        assert!(!text.contains("<64 hex digits>"), "more keys in the example than digits");
        text
    }

    #[test]
    fn the_documented_example_names_every_key_and_reads_as_the_defaults() {
        let file = NodeFile::parse(&documented_example()).unwrap();
        let every_key = crate::node::builder::EVERY_SECTION.concat();
        let every_key = every_key.iter().map(|s| s.name(FrontEnd::NodeFile)).chain(READ_HERE);
        let missing: Vec<&str> = every_key.filter(|name| file.value(name).is_none()).collect();
        assert!(missing.is_empty(), "the example in NodeFile's doc does not show {missing:?}");

        let config = file.into_config().unwrap();
        // Every setting the example shows is at its default, except the ones with none (the keys, the
        // members) and the ones it shows set (what the comments call the defaults instead).
        let key = |digit: char| Some(digit.to_string().repeat(64).parse::<AuthKey>().unwrap());
        let mut expected = NodeBuilder::new(0, config.members.clone()).config().clone();
        expected.leader = Some(0);
        expected.directory = Some("/dev/shm/quorumcast/node-0".into());
        expected.data_dir = Some("/var/lib/quorumcast/node-0".into());
        expected.initial_members = Some(vec![0, 1]);
        expected.channel.auth = key('1');
        expected.storage.recording_dir = Some("/var/lib/quorumcast/node-0/recording".into());
        expected.clients.enabled = true;
        expected.clients.allow = vec!["10.0.0.0/8".parse().unwrap(), "127.0.0.1".parse().unwrap()];
        expected.clients.session_key = key('2');
        expected.clients.keys = vec![
            ClientKey::new(DEFAULT_CLIENT_KEY_NAME, key('3').unwrap()),
            ClientKey::new("billing", key('4').unwrap()),
        ];
        expected.admin_key = key('5');
        let noop = IdleStrategyConfig::NoOp;
        expected.idle = [noop, noop, noop, "backoff".parse().unwrap()].into();
        expected.cores = [Some(1), Some(2), Some(3), Some(4)].into();
        assert_eq!(format!("{config:#?}"), format!("{expected:#?}"));
    }

    #[test]
    fn the_shipped_node_files_and_profiles_are_read() {
        let profiles = [
            include_str!("../../tuning/profiles/balanced.toml"),
            include_str!("../../tuning/profiles/latency.toml"),
            include_str!("../../tuning/profiles/small-host.toml"),
        ];
        for node in [
            include_str!("../../tuning/cluster/node0.toml"),
            include_str!("../../tuning/cluster/node1.toml"),
            include_str!("../../tuning/cluster/node2.toml"),
        ] {
            NodeConfig::from_toml(node).unwrap();
            for profile in profiles {
                NodeFile::parse(node).unwrap().merge(NodeFile::parse(profile).unwrap()).into_config().unwrap();
            }
        }
    }

    #[test]
    fn a_small_term_shrinks_the_default_window_and_refuses_a_given_one_too_large() {
        let small = NODE
            .replace("term_buffer_length = \"16MiB\"", "term_buffer_length = \"64KiB\"")
            .replace("mtu = 8192", "mtu = 1408");
        assert_eq!(NodeConfig::from_toml(&small).unwrap().channel.receiver_window, 32 << 10);
        let old_name = small.replace("term_buffer_length", "term_length");
        assert_eq!(NodeConfig::from_toml(&old_name).unwrap().channel.term_length, 64 << 10);
        let given = small.replace("[timers]", "receiver_window = \"128KiB\"\n[timers]");
        let e = NodeConfig::from_toml(&given).unwrap_err().to_string();
        assert!(e.contains("[channel] receiver_window"), "{e}");
    }

    #[test]
    fn durations_and_sizes_take_their_units() {
        assert_eq!(parse_duration("250us", BareNumber::Refused), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("3s", BareNumber::Refused), Ok(Duration::from_secs(3)));
        assert!(parse_duration("1.5ms", BareNumber::Refused).is_err());
        assert_eq!(parse_size_text("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size_text("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size_text("4096"), Ok(4096));
        assert!(parse_size_text("-1").is_err());
    }
}
