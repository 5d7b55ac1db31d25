//! A node's settings as each front end names them: one structured key for each setting a rule checks,
//! rendered as the key of a node file (`[consensus] heartbeat_timeout`) or as the builder method and
//! field an embedder sets (`NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })`).
//!
//! A rule's refusal is a [`SettingError`]: the setting it refuses and the problem, in which every
//! setting it mentions is a placeholder (`{consensus.election_timeout_min}`) that each front end renders
//! in its own terms. So an embedder never reads a file key it has no file for, and an operator never
//! reads a field name the file does not have.

use std::fmt;

/// How a front end names settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontEnd {
    /// A node file (`qc-node --config`, `NodeFile`, feature `config`).
    NodeFile,
    /// The embedding API (`quorumcast::NodeBuilder`).
    Builder,
}

/// A setting a rule checks, in its three spellings: its placeholder id (`consensus.heartbeat_timeout`),
/// its node-file key (`[consensus] heartbeat_timeout`) and its builder spelling
/// (`NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })`).
///
/// The settings of the layers below the node (the channel, the consensus timers) and the node's own not
/// yet declared with their section are the associated constants here; a section the node declares in one
/// place (`quorumcast`'s `[clients]` and `[storage]`) makes its own with [`Setting::new`], from the same
/// declaration as its field, file key, default and rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Setting {
    id: &'static str,
    file: &'static str,
    builder: &'static str,
}

impl Setting {
    /// The setting with placeholder `id`, node-file key `file` and builder spelling `builder`.
    pub const fn new(id: &'static str, file: &'static str, builder: &'static str) -> Self {
        Self { id, file, builder }
    }

    /// Its placeholder name in a [`SettingError`]'s problem (`{` id `}`).
    pub fn id(self) -> &'static str {
        self.id
    }

    /// Its name in `front`'s terms.
    pub fn name(self, front: FrontEnd) -> &'static str {
        match front {
            FrontEnd::NodeFile => self.file,
            FrontEnd::Builder => self.builder,
        }
    }
}

macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $file:literal, $builder:literal;)*) => {
        #[allow(non_upper_case_globals)]
        impl Setting {
            $($(#[$doc])* pub const $name: Setting = Setting::new($id, $file, $builder);)*

            /// Every setting declared here: a [`SettingError`] resolves its placeholders among them, and
            /// among the ones it was given with [`SettingError::among`].
            const ALL: &'static [Setting] = &[$(Setting::$name),*];
        }
    };
}

settings! {
    /// The leader's heartbeat interval (consensus).
    HeartbeatInterval = "consensus.heartbeat_interval", "[consensus] heartbeat_interval",
        "NodeBuilder::timers(Timers { heartbeat_interval_ns, .. })";
    /// How long a follower waits for its leader.
    HeartbeatTimeout = "consensus.heartbeat_timeout", "[consensus] heartbeat_timeout",
        "NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })";
    /// The election timeout's lower bound.
    ElectionTimeoutMin = "consensus.election_timeout_min", "[consensus] election_timeout_min",
        "NodeBuilder::timers(Timers { election_timeout_min_ns, .. })";
    /// The election timeout's upper bound.
    ElectionTimeoutMax = "consensus.election_timeout_max", "[consensus] election_timeout_max",
        "NodeBuilder::timers(Timers { election_timeout_max_ns, .. })";
    /// The commit heartbeat.
    CommitHeartbeat = "timers.commit_heartbeat", "[timers] commit_heartbeat",
        "NodeBuilder::from_config(NodeConfig { commit_heartbeat, .. })";
    /// The followers' acknowledgement interval.
    AckInterval = "timers.ack_interval", "[timers] ack_interval",
        "NodeBuilder::from_config(NodeConfig { ack_interval, .. })";
    /// The shortest time between two of a follower's acknowledgements.
    AckGap = "timers.ack_gap", "[timers] ack_gap",
        "NodeBuilder::from_config(NodeConfig { ack_gap, .. })";
    /// The log channel's shared key.
    ChannelAuthKey = "channel.auth_key", "[channel] auth_key", "NodeBuilder::auth_key";
    /// The operator key of administrative commands over the network.
    AdminKey = "admin.key", "[admin] key", "NodeBuilder::admin_key";
    /// The log channel's MTU.
    Mtu = "channel.mtu", "[channel] mtu", "NodeBuilder::mtu";
    /// The length of one term buffer of the log (Aeron's `term-length`; not a leadership term).
    TermLength = "channel.term_buffer_length", "[channel] term_buffer_length", "NodeBuilder::term_buffer_length";
    /// The receiver window.
    ReceiverWindow = "channel.receiver_window", "[channel] receiver_window", "ChannelConfig::receiver_window";
    /// The socket receive buffer.
    ReceiveBuffer = "channel.receive_buffer", "[channel] receive_buffer", "ChannelConfig::socket.receive_buffer";
    /// Datagrams per send call at most.
    BatchLimit = "channel.batch_limit", "[channel] batch_limit", "ChannelConfig::batch_limit";
    /// Faults injected on sends.
    SendFaults = "channel.send_faults", "[channel] send_faults", "ChannelConfig::send_faults";
    /// Faults injected on receives.
    ReceiveFaults = "channel.receive_faults", "[channel] receive_faults", "ChannelConfig::receive_faults";
    /// Where the channel sends.
    Destinations = "channel.destinations", "members", "ChannelConfig::destinations";
    /// The receivers' status interval.
    StatusInterval = "timers.status_interval", "[timers] status_interval", "ChannelConfig::status_interval";
    /// The first NAK's delay.
    NakDelay = "timers.nak_delay", "[timers] nak_delay", "ChannelConfig::nak_delay";
    /// A repeated NAK's delay.
    NakRetryDelay = "timers.nak_retry_delay", "[timers] nak_retry_delay", "ChannelConfig::nak_retry_delay";
    /// How long a resent range is not resent again.
    RetransmitLinger = "timers.retransmit_linger", "[timers] retransmit_linger", "ChannelConfig::retransmit_linger";
    /// How long a silent receiver counts for flow control.
    ReceiverTimeout = "timers.receiver_timeout", "[timers] receiver_timeout", "ChannelConfig::receiver_timeout";
    /// The publication's heartbeat interval.
    ChannelHeartbeat = "timers.heartbeat_interval", "[timers] heartbeat_interval", "ChannelConfig::heartbeat_interval";
    /// The publication's SETUP interval.
    SetupInterval = "timers.setup_interval", "[timers] setup_interval", "ChannelConfig::setup_interval";
    /// Whether a crashed run's node directory is removed at start.
    CleanStale = "node.clean_stale", "clean_stale", "NodeBuilder::clean_stale";
}

/// A setting refused by a rule: which one, and the problem, with every setting it names as a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    /// The setting to change.
    pub setting: Setting,
    /// What is wrong and what to do, settings written `{id}` ([`Setting::id`]).
    pub problem: String,
    /// Settings declared outside this module that the problem may name (a section's own).
    among: &'static [Setting],
}

impl SettingError {
    /// A refusal of `setting`; `problem` names settings as `{id}`.
    pub fn new(setting: Setting, problem: impl Into<String>) -> Self {
        Self { setting, problem: problem.into(), among: &[] }
    }

    /// This refusal, its problem's placeholders also resolved among `settings` (a section's own, declared
    /// where the section is, beside the ones declared here).
    pub fn among(self, settings: &'static [Setting]) -> Self {
        Self { among: settings, ..self }
    }

    /// The refusal in `front`'s terms: `<setting>: <problem>`.
    pub fn render(&self, front: FrontEnd) -> String {
        let mut problem = self.problem.clone();
        for setting in Setting::ALL.iter().chain(self.among).chain([&self.setting]) {
            problem = problem.replace(&format!("{{{}}}", setting.id()), setting.name(front));
        }
        format!("{}: {problem}", self.setting.name(front))
    }
}

impl fmt::Display for SettingError {
    /// In the embedder's terms (a node file's front end renders it itself).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(FrontEnd::Builder))
    }
}

impl std::error::Error for SettingError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_every_setting_in_the_front_ends_terms() {
        let e =
            SettingError::new(Setting::HeartbeatTimeout, "(1s) must be below {consensus.election_timeout_min} (1s)");
        assert_eq!(
            e.render(FrontEnd::NodeFile),
            "[consensus] heartbeat_timeout: (1s) must be below [consensus] election_timeout_min (1s)"
        );
        let builder = e.render(FrontEnd::Builder);
        assert!(builder.starts_with("NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })"), "{builder}");
        assert!(builder.contains("election_timeout_min_ns"), "{builder}");
        assert!(!builder.contains("[consensus]"), "{builder}");
    }

    #[test]
    fn every_setting_has_a_distinct_id_and_file_key() {
        let mut ids: Vec<_> = Setting::ALL.iter().map(|s| s.id()).collect();
        let mut keys: Vec<_> = Setting::ALL.iter().map(|s| s.name(FrontEnd::NodeFile)).collect();
        ids.sort();
        ids.dedup();
        keys.sort();
        keys.dedup();
        assert_eq!(ids.len(), Setting::ALL.len());
        assert_eq!(keys.len(), Setting::ALL.len());
    }
}

/// The check that keeps every config type's documented defaults equal to its `Default` (or builder)
/// value: each public field's doc ends with ``Default: `<its Debug form>`.``, read from the source and
/// compared with the value, so a changed default fails a test until its doc says so. Called from the unit
/// tests of every crate that has config types.
pub mod documented_defaults {
    /// What a field whose value is a config type of its own says (that type's docs give each default).
    const NESTED_DOC: &str = "Default: as its type documents.";
    const NESTED: &str = "as its type documents";

    /// The top-level fields of a `Debug` form `Name { a: 1, b: Some(2), c: C { .. } }`, as (name, value).
    fn debug_fields(debug: &str) -> Vec<(String, String)> {
        let body = &debug[debug.find('{').expect("a struct's Debug form") + 1..debug.rfind('}').unwrap()];
        let (mut fields, mut depth, mut start, mut quoted) = (Vec::new(), 0, 0, false);
        let bytes = body.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'"' if i == 0 || bytes[i - 1] != b'\\' => quoted = !quoted,
                b'{' | b'[' | b'(' if !quoted => depth += 1,
                b'}' | b']' | b')' if !quoted => depth -= 1,
                b',' if depth == 0 && !quoted => {
                    fields.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        fields.push(&body[start..]);
        fields
            .into_iter()
            .filter_map(|f| f.split_once(':').map(|(name, value)| (name.trim().to_string(), value.trim().to_string())))
            .collect()
    }

    /// The public fields of `pub struct type_name` in `source`, each with its documented default.
    fn documented(source: &str, type_name: &str) -> Vec<(String, Option<String>)> {
        let start = source.find(&format!("pub struct {type_name} {{")).expect("the struct in its source");
        let mut fields = Vec::new();
        let mut doc = String::new();
        for line in source[start..].lines().skip(1) {
            let line = line.trim();
            if line == "}" {
                break;
            }
            if let Some(text) = line.strip_prefix("///") {
                doc.push_str(text);
                doc.push(' ');
            } else if let Some(rest) = line.strip_prefix("pub ") {
                let name = rest.split(':').next().unwrap().trim().to_string();
                let default = doc.find("Default: `").map(|at| {
                    let value = &doc[at + "Default: `".len()..];
                    value[..value.find('`').unwrap()].to_string()
                });
                let default = default.or_else(|| doc.contains(NESTED_DOC).then(|| NESTED.to_string()));
                fields.push((name, default));
                doc.clear();
            } else if !line.starts_with("#[") {
                doc.clear();
            }
        }
        fields
    }

    /// Checks `type_name`'s field docs in `source` against `value` (its default); fields in `exempt`
    /// (required settings with no default) need no note.
    pub fn check(source: &str, type_name: &str, value: &impl std::fmt::Debug, exempt: &[&str]) {
        let actual = debug_fields(&format!("{value:?}"));
        let mut wrong = Vec::new();
        for (field, documented) in documented(source, type_name) {
            if exempt.contains(&field.as_str()) {
                continue;
            }
            let Some((_, actual)) = actual.iter().find(|(name, _)| *name == field) else {
                continue; // not in the Debug form (skipped there): nothing to compare
            };
            if documented.as_deref() == Some(NESTED) && actual.contains('{') {
                continue; // a config type of its own, checked against its own docs
            }
            if documented.as_deref() != Some(actual.as_str()) {
                wrong.push(format!("{type_name}::{field}: documented {documented:?}, default `{actual}`"));
            }
        }
        assert!(wrong.is_empty(), "end each field's doc with \"Default: `<value>`.\":\n{}", wrong.join("\n"));
    }

    #[test]
    fn reads_docs_and_debug_forms() {
        let source =
            "pub struct T {\n    /// A. Default: `1`.\n    pub a: u8,\n    /// B.\n    pub b: Option<u8>,\n}\n";
        assert_eq!(documented(source, "T"), vec![("a".into(), Some("1".into())), ("b".into(), None)]);
        assert_eq!(
            debug_fields("T { a: 1, b: Some(S { x: [1, 2] }), c: \"a, b\" }"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "Some(S { x: [1, 2] })".into()),
                ("c".into(), "\"a, b\"".into())
            ]
        );
    }
}
