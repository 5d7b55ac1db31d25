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
    /// The embedding API ([`crate::node::NodeBuilder`]).
    Builder,
}

macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $file:literal, $builder:literal;)*) => {
        /// A setting a rule of [`crate::node::NodeConfig`] checks.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Setting {
            $($(#[$doc])* $name,)*
        }

        impl Setting {
            const ALL: &'static [Setting] = &[$(Setting::$name),*];

            /// Its placeholder name in a [`SettingError`]'s problem (`{` id `}`).
            pub fn id(self) -> &'static str {
                match self { $(Setting::$name => $id,)* }
            }

            /// Its name in `front`'s terms.
            pub fn name(self, front: FrontEnd) -> &'static str {
                match (self, front) {
                    $((Setting::$name, FrontEnd::NodeFile) => $file,
                      (Setting::$name, FrontEnd::Builder) => $builder,)*
                }
            }
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
    CommitHeartbeat = "timers.commit_heartbeat", "[timers] commit_heartbeat", "NodeBuilder::commit_heartbeat";
    /// The followers' acknowledgement interval.
    AckInterval = "timers.ack_interval", "[timers] ack_interval", "NodeBuilder::ack_interval";
    /// The session key of the client endpoint.
    SessionKey = "clients.session_key", "[clients] session_key", "ClientEndpointConfig::session_key";
    /// The log channel's shared key.
    ChannelAuthKey = "channel.auth_key", "[channel] auth_key", "NodeBuilder::auth_key";
    /// Sessions the cluster holds at most.
    MaxSessions = "clients.max_sessions", "[clients] max_sessions", "ClientEndpointConfig::max_sessions";
    /// Sessions one address holds at most.
    MaxSessionsPerAddress = "clients.max_sessions_per_address", "[clients] max_sessions_per_address",
        "ClientEndpointConfig::max_sessions_per_address";
    /// Opens and reconnects per address per second.
    OpensPerSecond = "clients.opens_per_second", "[clients] opens_per_second", "ClientEndpointConfig::opens_per_second";
    /// The named client keys.
    ClientKeys = "clients.keys", "[clients] keys", "ClientEndpointConfig::keys";
    /// Messages in flight per session.
    ClientWindow = "clients.window", "[clients] window", "ClientEndpointConfig::window";
    /// How long a silent session lives.
    SessionTimeout = "clients.session_timeout", "[clients] session_timeout", "ClientEndpointConfig::session_timeout";
    /// Whether a crashed run's node directory is removed at start.
    CleanStale = "node.clean_stale", "clean_stale", "NodeBuilder::clean_stale";
    /// The recording's segment length.
    SegmentLength = "storage.segment_length", "[storage] segment_length", "StorageConfig::segment_length";
    /// Snapshots kept.
    SnapshotsKept = "storage.snapshots_kept", "[storage] snapshots_kept", "StorageConfig::snapshots_kept";
    /// Log bytes between snapshots.
    SnapshotInterval = "storage.snapshot_interval", "[storage] snapshot_interval", "StorageConfig::snapshot_interval";
}

/// A setting refused by a rule: which one, and the problem, with every setting it names as a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    /// The setting to change.
    pub setting: Setting,
    /// What is wrong and what to do, settings written `{id}` ([`Setting::id`]).
    pub problem: String,
}

impl SettingError {
    /// A refusal of `setting`; `problem` names settings as `{id}`.
    pub fn new(setting: Setting, problem: impl Into<String>) -> Self {
        Self { setting, problem: problem.into() }
    }

    /// The refusal in `front`'s terms: `<setting>: <problem>`.
    pub fn render(&self, front: FrontEnd) -> String {
        let mut problem = self.problem.clone();
        for setting in Setting::ALL {
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
