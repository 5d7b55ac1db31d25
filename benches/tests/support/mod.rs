//! What the tools' integration tests share beyond `quorumcast_testkit`.

/// The keys every entry of `configs` in a sweep's summary.json has (the report schema, kept here apart
/// from the code that writes it).
pub const SWEEP_CONFIG_KEYS: &[&str] = &[
    "mtu",
    "idle",
    "msg",
    "send_mode",
    "control",
    "s",
    "c",
    "d",
    "m_pkt",
    "mu_predicted",
    "mu_measured",
    "bottleneck",
    "points",
];
