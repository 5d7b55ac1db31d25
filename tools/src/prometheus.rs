//! A node's counters in the Prometheus text exposition format (version 0.0.4), as `qc-stat --prometheus`
//! serves them.
//!
//! - every counter of the node catalogue becomes `quorumcast_<key>` (its typed reader's name, dots as
//!   underscores: `quorumcast_sender_naks_received`), with its label as the help text;
//! - the leader's record of each follower's acknowledged position becomes
//!   `quorumcast_ack_position{follower="ID"}`;
//! - any other counter (agents', the application's) becomes `quorumcast_counter{id, type_id, label}`;
//! - every sample carries `member="ID"`, read from the node's `election member id` counter (absent on a
//!   node that has none).
//!
//! Counters and positions alike are exposed as `untyped`: the catalogue does not say which values only
//! grow, and `rate()` works on untyped series.

use std::fmt::Write as _;

use quorumcast_driver::shm::counters::CounterSnapshot;
use quorumcast_driver::shm::stats::{kinds, CounterKind, TYPE_ACK_POSITION};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The node's member id, if it publishes one.
pub fn member_id(counters: &[CounterSnapshot]) -> Option<i64> {
    counters.iter().find(|c| c.type_id == kinds::election::member_id.type_id).map(|c| c.value)
}

/// The exposition of `counters`.
pub fn exposition(counters: &[CounterSnapshot]) -> String {
    let member = member_id(counters).map(|id| format!("member=\"{id}\""));
    let labels = |extra: &str| -> String {
        let parts: Vec<&str> = member.iter().map(String::as_str).chain((!extra.is_empty()).then_some(extra)).collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", parts.join(","))
        }
    };
    let mut out = String::new();
    for counter in counters {
        if let Some(kind) = CounterKind::of_type(counter.type_id) {
            let name = metric_name(kind.key);
            let _ = writeln!(out, "# HELP {name} {}", escape_help(kind.label));
            let _ = writeln!(out, "# TYPE {name} untyped");
            let _ = writeln!(out, "{name}{} {}", labels(""), counter.value);
        }
    }
    let acks: Vec<&CounterSnapshot> = counters.iter().filter(|c| c.type_id == TYPE_ACK_POSITION).collect();
    if !acks.is_empty() {
        out.push_str(
            "# HELP quorumcast_ack_position The leader's record of how far each follower acknowledged the log.\n",
        );
        out.push_str("# TYPE quorumcast_ack_position untyped\n");
        for ack in acks {
            let _ = writeln!(
                out,
                "quorumcast_ack_position{} {}",
                labels(&format!("follower=\"{}\"", ack.owner_id)),
                ack.value
            );
        }
    }
    let others: Vec<&CounterSnapshot> = counters
        .iter()
        .filter(|c| CounterKind::of_type(c.type_id).is_none() && c.type_id != TYPE_ACK_POSITION)
        .collect();
    if !others.is_empty() {
        out.push_str("# HELP quorumcast_counter Counters outside the node catalogue (agents', the application's).\n");
        out.push_str("# TYPE quorumcast_counter untyped\n");
        for c in others {
            let extra = format!("id=\"{}\",type_id=\"{}\",label=\"{}\"", c.id, c.type_id, escape_label(&c.label));
            let _ = writeln!(out, "quorumcast_counter{} {}", labels(&extra), c.value);
        }
    }
    out
}

/// `sender.naks_received` as `quorumcast_sender_naks_received`: only `[a-zA-Z0-9_]` stay.
fn metric_name(key: &str) -> String {
    let body: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("quorumcast_{body}")
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Help text: backslash and line feed escaped.
fn escape_help(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(id: i32, type_id: i32, owner_id: i64, label: &str, value: i64) -> CounterSnapshot {
        CounterSnapshot { id, type_id, owner_id, label: label.into(), value }
    }

    #[test]
    fn catalogue_counters_are_named_by_key_and_labelled_by_member() {
        let naks = kinds::sender::naks_received;
        let counters = [
            snapshot(0, kinds::election::member_id.type_id, 0, kinds::election::member_id.label, 2),
            snapshot(1, naks.type_id, 0, naks.label, 17),
            snapshot(2, TYPE_ACK_POSITION, 3, "ack position of member 3", 4096),
            snapshot(3, 1, 0, "app \"orders\"\nqueue", -5),
        ];
        let text = exposition(&counters);
        assert!(text.contains("# TYPE quorumcast_sender_naks_received untyped\n"), "{text}");
        assert!(text.contains("quorumcast_sender_naks_received{member=\"2\"} 17\n"), "{text}");
        assert!(text.contains("quorumcast_ack_position{member=\"2\",follower=\"3\"} 4096\n"), "{text}");
        assert!(
            text.contains(r#"quorumcast_counter{member="2",id="3",type_id="1",label="app \"orders\"\nqueue"} -5"#),
            "{text}"
        );
    }

    #[test]
    fn a_node_without_a_member_id_has_no_member_label() {
        let naks = kinds::sender::naks_received;
        let text = exposition(&[snapshot(0, naks.type_id, 0, naks.label, 1)]);
        assert!(text.contains("quorumcast_sender_naks_received 1\n"), "{text}");
    }
}
