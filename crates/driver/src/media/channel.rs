//! Configuration of a network channel: destinations, MTU, term length, socket buffers, send mode,
//! timers and fault injection, validated at start with messages that name the value and the rule.

use std::net::SocketAddr;
use std::time::Duration;

use crate::frame::{DATA_HEADER_LENGTH, MAX_UDP_PAYLOAD_LENGTH};
use crate::media::auth::{AuthKey, TAG_LENGTH};
use crate::media::flow_control::FlowControlMode;
use crate::media::transport::faulty::FaultConfig;
use crate::media::transport::{Binding, SendMode, SocketOptions, MAX_GSO_SEGMENTS};
use crate::setting::{Setting, SettingError};

/// The conservative MTU that crosses Ethernet with PPPoE, and the clouds, unfragmented.
pub const MTU_1408: usize = 1408;
/// The MTU for jumbo-frame paths (an MTU of 9001 on every hop); the model's `M_pkt` multiplier is ~6x 1408's.
pub const MTU_8192: usize = 8192;
/// Smallest MTU accepted: a data header plus one 32-byte aligned payload.
pub const MIN_MTU: usize = 64;
/// The term lengths a log takes (64 KiB to 1 GiB), as the log buffer defines them.
pub use crate::shm::log_buffer::descriptor::{TERM_MAX_LENGTH, TERM_MIN_LENGTH};
/// Default term length of a network log (16 MiB, as Aeron's UDP default).
pub const DEFAULT_TERM_LENGTH: usize = 16 * 1024 * 1024;

crate::section! {
    /// Everything a network publication (the Sender side) and its subscriptions (the Receiver side) agree on.
    ///
    /// The rules, checked by [`validate`](Self::validate) in this order, are each setting's below; the first
    /// refusal names the setting and says what to change.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ChannelConfig in pub mod settings, built as ("ChannelConfig::", ""), checked with () {
        /// Length of each of the log's three terms (Aeron's term length; a log-buffer term, not a
        /// leadership term): a power of two in 64 KiB ..= 1 GiB.
        pub term_length: usize = DEFAULT_TERM_LENGTH, shown "16777216", unit "bytes",
            key [channel] term_buffer_length or term_length, file Size,
            check |c, _| validate_term_length(c.term_length).err().map(|e| e.0.problem);
        /// Largest datagram, header included: a multiple of 32 in `64..=65504`, at most `term_length / 8`
        /// (and, with `auth`, small enough for its tag to fit the largest UDP payload too).
        pub mtu: usize = MTU_1408, shown "1408", unit "bytes",
            key [channel] mtu, file Plain,
            check |c: &ChannelConfig, _| {
                validate_mtu(c.mtu, c.term_length).err().map(|e| e.0.problem).or_else(|| {
                    (c.auth.is_some() && c.mtu + TAG_LENGTH > MAX_UDP_PAYLOAD_LENGTH + 3).then(|| {
                        format!(
                            "is {}; with authentication every datagram carries a {TAG_LENGTH}-byte tag, and MTU + \
                             tag must fit the largest UDP payload (65507); lower the MTU",
                            c.mtu
                        )
                    })
                })
            };
        /// Receiver window advertised in status messages; at most `term_length / 2` and at most `SO_RCVBUF`.
        /// Keep it at half of `SO_RCVBUF` or less: the kernel charges each queued datagram its whole
        /// allocation (2,304 B for 1,088 B of data), which only the doubling of `SO_RCVBUF` covers, and not
        /// for datagrams less than half full (see `tuning/README.md`).
        pub receiver_window: usize = 128 * 1024, shown "131072", unit "bytes",
            key [channel] receiver_window, file Size,
            check |c: &ChannelConfig, _| {
                if c.receiver_window < c.mtu || c.receiver_window > c.term_length / 2 {
                    return Some(format!(
                        "is {}; the receiver window must be at least the MTU ({}) and at most term length / 2 ({})",
                        c.receiver_window,
                        c.mtu,
                        c.term_length / 2
                    ));
                }
                let rcvbuf = c.socket.receive_buffer.filter(|&rcvbuf| c.receiver_window > rcvbuf)?;
                Some(format!(
                    "is {}, larger than SO_RCVBUF {rcvbuf}: a full window would overflow the socket; raise \
                     {{channel.receive_buffer}} or lower the window",
                    c.receiver_window
                ))
            };
        /// Most datagrams (per destination) one `mmsg` or `gso` call carries: 1 to 64.
        pub batch_limit: usize = 16, shown "16", unit "datagrams",
            key [channel] batch_limit, file Plain,
            check |c, _| {
                (!(1..=MAX_GSO_SEGMENTS).contains(&c.batch_limit))
                    .then(|| format!("is {}; must be from 1 to {MAX_GSO_SEGMENTS}", c.batch_limit))
            };
        /// Faults injected on the datagrams this side sends (for tests).
        pub send_faults: FaultConfig = FaultConfig::default(),
            shown "FaultConfig { drop: 0.0, duplicate: 0.0, reorder: 0.0, seed: 0 }",
            key [channel] send_faults, file Text,
            check |c, _| c.send_faults.validate().err();
        /// Faults injected on the datagrams this side receives (for tests).
        pub receive_faults: FaultConfig = FaultConfig::default(),
            shown "FaultConfig { drop: 0.0, duplicate: 0.0, reorder: 0.0, seed: 0 }",
            key [channel] receive_faults, file Text,
            check |c, _| c.receive_faults.validate().err();
        /// Where the Sender sends each datagram: one entry per follower (multi-destination cast). A node
        /// fills it in from its file's `members`.
        pub destinations: Vec<SocketAddr> = Vec::new(), shown "[]",
            key [] members, file Elsewhere,
            check |c, _| {
                c.destinations.iter().any(|d| d.port() == 0).then(|| "a destination needs a port other than 0".into())
            };
        /// A status message is sent at least this often.
        pub status_interval: Duration = Duration::from_millis(200), shown "200ms",
            key [timers] status_interval, file Duration,
            check |c, _| timer_rule(c.status_interval);
        /// Delay before a gap is NAKed.
        pub nak_delay: Duration = Duration::from_micros(100), shown "100µs",
            key [timers] nak_delay, file Duration,
            check |c, _| timer_rule(c.nak_delay);
        /// Delay before a gap that is still open is NAKed again (Aeron's unicast default: 100 x 100 us).
        pub nak_retry_delay: Duration = Duration::from_millis(10), shown "10ms",
            key [timers] nak_retry_delay, file Duration,
            check |c, _| timer_rule(c.nak_retry_delay);
        /// NAKs for a range already retransmitted are ignored for this long.
        pub retransmit_linger: Duration = Duration::from_millis(10), shown "10ms",
            key [timers] retransmit_linger, file Duration,
            check |c, _| timer_rule(c.retransmit_linger);
        /// A heartbeat goes out after this long without data.
        pub heartbeat_interval: Duration = Duration::from_millis(100), shown "100ms",
            key [timers] heartbeat_interval, file Duration,
            check |c, _| timer_rule(c.heartbeat_interval);
        /// Setup frames repeat this often until a receiver answers.
        pub setup_interval: Duration = Duration::from_millis(100), shown "100ms",
            key [timers] setup_interval, file Duration,
            check |c, _| timer_rule(c.setup_interval);
        /// A receiver silent for this long is dropped from flow control: at least twice `status_interval`
        /// (else live receivers time out between their status messages, and the Sender re-sends SETUPs in a
        /// loop).
        pub receiver_timeout: Duration = Duration::from_secs(5), shown "5s",
            key [timers] receiver_timeout, file Duration,
            check |c: &ChannelConfig, _| {
                timer_rule(c.receiver_timeout).or_else(|| {
                    (c.receiver_timeout < c.status_interval * 2).then(|| {
                        format!(
                            "is {:?}; must be at least twice {{timers.status_interval}} ({:?}), or receivers \
                             time out between their status messages; raise it",
                            c.receiver_timeout, c.status_interval
                        )
                    })
                })
            };
        /// The shared key that tags and checks every datagram ([`crate::media::auth`]); `None` on isolated
        /// networks.
        pub auth: Option<AuthKey> = None, shown "None",
            key [channel] auth_key, file SomeText;
        /// How datagrams are put on the wire.
        pub send_mode: SendMode = SendMode::Classic, shown "Classic",
            key [channel] send_mode, file Text;
        /// Socket buffer sizes.
        pub socket: SocketOptions = SocketOptions { send_buffer: Some(2 << 20), receive_buffer: Some(2 << 20) },
            shown "SocketOptions { send_buffer: Some(2097152), receive_buffer: Some(2097152) }";
        /// Most bytes retransmitted to one receiver per second (NAK repair), so that NAKs, forged or not,
        /// cannot make the Sender resend without bound; 0 means unlimited.
        pub max_retransmit_rate: u64 = 64 << 20, shown "67108864", unit "bytes per second",
            key [channel] max_retransmit_rate, file Size;
        /// The local address every datagram of a publication is sent from: a node's member endpoint, the one
        /// source its followers accept (bound with `SO_REUSEPORT`, one socket per destination). `None` sends
        /// from an ephemeral port, for streams whose receivers accept any source.
        pub source: Option<SocketAddr> = None, shown "None";
        /// A hash of the cluster's member list ([`membership_tag`]), carried in SETUPs and status messages: a
        /// peer whose tag differs is refused, counted and logged. `None` for plain streams.
        pub membership: Option<i64> = None, shown "None";
        /// Which receivers' windows the Sender waits for: all of them (a stream), or a quorum (a cluster
        /// leader).
        pub flow_control: FlowControlMode = FlowControlMode::Min, shown "Min";
    }
}

/// The membership tag of a cluster: an FNV-1a hash of its `(member id, endpoint)` pairs in id order, the
/// same on every node configured with the same members, whatever order its file lists them in.
pub fn membership_tag(members: &[(i32, SocketAddr)]) -> i64 {
    let mut sorted = members.to_vec();
    sorted.sort_by_key(|(id, _)| *id);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (id, endpoint) in sorted {
        for byte in format!("{id}={endpoint};").bytes() {
            hash = (hash ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash as i64
}

/// A configuration value that breaks a rule; the message names both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConfigError(pub SettingError);

impl std::fmt::Display for ChannelConfigError {
    /// In an embedder's terms; a node file's front end renders the setting itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ChannelConfigError {}

fn refuse(setting: Setting, problem: String) -> Result<(), ChannelConfigError> {
    Err(ChannelConfigError(SettingError::new(setting, problem)))
}

/// The longest timer accepted: longer is a typo, not a choice.
pub const MAX_TIMER: Duration = Duration::from_secs(3600);

/// A timer's rule as a section declares it: its problem, with its value, if it breaks the rule every timer
/// follows.
pub fn timer_rule(value: Duration) -> Option<String> {
    timer_problem(value).map(|problem| format!("({value:?}) {problem}"))
}

/// Checks the timer `setting`: more than zero and at most [`MAX_TIMER`].
pub fn validate_timer(setting: Setting, value: Duration) -> Result<(), ChannelConfigError> {
    match timer_rule(value) {
        Some(problem) => refuse(setting, problem),
        None => Ok(()),
    }
}

/// What is wrong with a timer of `value`, if anything: it must be more than zero and at most
/// [`MAX_TIMER`]. The one rule for every timer, however its setting is named.
fn timer_problem(value: Duration) -> Option<&'static str> {
    (value.is_zero() || value > MAX_TIMER).then_some(
        "must be more than 0 and at most 1 hour (a zero interval sends or checks in every duty cycle, a flood)",
    )
}

/// Checks a term length: a power of two from 64 KiB to 1 GiB.
pub fn validate_term_length(term_length: usize) -> Result<(), ChannelConfigError> {
    if !term_length.is_power_of_two() || !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&term_length) {
        return refuse(
            settings::term_length,
            format!("is {term_length}; a term length must be a power of two from 65536 (64 KiB) to 1073741824 (1 GiB)"),
        );
    }
    Ok(())
}

/// Checks an MTU against the UDP limits and the term length.
pub fn validate_mtu(mtu: usize, term_length: usize) -> Result<(), ChannelConfigError> {
    if mtu % 32 != 0 || !(MIN_MTU..=MAX_UDP_PAYLOAD_LENGTH).contains(&mtu) {
        return refuse(settings::mtu, format!(
            "is {mtu}; the MTU must be a multiple of 32 from {MIN_MTU} to {MAX_UDP_PAYLOAD_LENGTH} (the largest UDP payload); the presets are 1408 and 8192"
        ));
    }
    if mtu > term_length / 8 {
        return refuse(settings::mtu, format!(
            "is {mtu}, larger than term length / 8 = {} (term length {term_length}); lower the MTU or raise the term length to at least {}",
            term_length / 8,
            (mtu * 8).next_power_of_two()
        ));
    }
    Ok(())
}

impl ChannelConfig {
    /// The largest payload of one frame: `mtu - 32`.
    pub fn max_payload(&self) -> usize {
        self.mtu - DATA_HEADER_LENGTH
    }

    /// How this channel's endpoints are bound: its socket options and key; `shared` lets several endpoints
    /// of this process share the address.
    pub fn binding(&self, shared: bool) -> Binding<'_> {
        Binding { socket: &self.socket, auth: self.auth, shared }
    }

    /// Whether fault injection is configured on either side (it needs a [`Faulty`] network:
    /// [`Faulty::new`]`(inner, self.send_faults, self.receive_faults)`).
    ///
    /// [`Faulty`]: crate::media::transport::faulty::Faulty
    /// [`Faulty::new`]: crate::media::transport::faulty::Faulty::new
    pub fn has_faults(&self) -> bool {
        self.send_faults.is_active() || self.receive_faults.is_active()
    }

    /// Checks every rule (each setting's, in declaration order); the first broken one is returned with a
    /// message that says what to change.
    pub fn validate(&self) -> Result<(), ChannelConfigError> {
        self.check(&()).map_err(|e| ChannelConfigError(e.among(SocketOptions::SETTINGS)))
    }

    /// Checks that the MTU fits the path to a destination whose largest unfragmented UDP payload is
    /// `path_max_payload` (read from the kernel after connecting, see `UdpEndpoint::path_max_payload`).
    pub fn validate_path(&self, destination: SocketAddr, path_max_payload: usize) -> Result<(), ChannelConfigError> {
        let tag = if self.auth.is_some() { TAG_LENGTH } else { 0 };
        if self.mtu + tag > path_max_payload {
            // IP and UDP headers: 20 + 8 bytes over IPv4, 40 + 8 over IPv6.
            let overhead = if destination.is_ipv6() { 48 } else { 28 };
            return refuse(settings::mtu, format!(
                "MTU {} does not fit the path to {destination}: its path MTU {} carries at most {path_max_payload} bytes of UDP payload unfragmented; use MTU 1408, or enable jumbo frames (MTU >= {}) on every hop",
                self.mtu,
                path_max_payload + overhead,
                self.mtu + overhead
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ChannelConfig {
        ChannelConfig { destinations: vec!["127.0.0.1:40001".parse().unwrap()], ..Default::default() }
    }

    #[test]
    fn defaults_and_presets_are_valid() {
        config().validate().unwrap();
        ChannelConfig { mtu: MTU_8192, ..config() }.validate().unwrap();
        ChannelConfig { mtu: MTU_8192, term_length: TERM_MIN_LENGTH, receiver_window: 32 * 1024, ..config() }
            .validate()
            .unwrap();
    }

    #[test]
    fn bad_mtus_are_refused_with_the_rule() {
        let err = |mtu, term_length| validate_mtu(mtu, term_length).unwrap_err().to_string();
        assert!(err(1400, DEFAULT_TERM_LENGTH).contains("multiple of 32"));
        assert!(err(32, DEFAULT_TERM_LENGTH).contains("from 64"));
        assert!(err(65536, 1 << 30).contains("65504"));
        let e = err(16384, TERM_MIN_LENGTH);
        assert!(e.contains("term length / 8 = 8192") && e.contains("131072"), "{e}");
        validate_mtu(65504, 1 << 20).unwrap();
    }

    #[test]
    fn bad_term_lengths_and_windows_are_refused() {
        assert!(validate_term_length(100_000).unwrap_err().to_string().contains("power of two"));
        assert!(validate_term_length(32 * 1024).is_err());
        assert!(validate_term_length(2 << 30).is_err());
        let e = ChannelConfig { receiver_window: 64 << 20, ..config() }.validate().unwrap_err().to_string();
        assert!(e.contains("term length / 2"), "{e}");
        let e = ChannelConfig { socket: SocketOptions { send_buffer: None, receive_buffer: Some(4096) }, ..config() }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("SO_RCVBUF"), "{e}");
    }

    #[test]
    fn zero_absurd_and_inconsistent_timers_are_refused_with_their_key() {
        use crate::setting::FrontEnd;
        let e = ChannelConfig { receiver_timeout: Duration::ZERO, ..config() }
            .validate()
            .unwrap_err()
            .0
            .render(FrontEnd::NodeFile);
        assert!(e.contains("[timers] receiver_timeout"), "{e}");
        let e = ChannelConfig { status_interval: Duration::ZERO, ..config() }
            .validate()
            .unwrap_err()
            .0
            .render(FrontEnd::NodeFile);
        assert!(e.contains("[timers] status_interval"), "{e}");
        let e = ChannelConfig { heartbeat_interval: Duration::from_secs(7200), ..config() }
            .validate()
            .unwrap_err()
            .0
            .render(FrontEnd::NodeFile);
        assert!(e.contains("[timers] heartbeat_interval") && e.contains("1 hour"), "{e}");
        let e = ChannelConfig { receiver_timeout: Duration::from_millis(300), ..config() }
            .validate()
            .unwrap_err()
            .0
            .render(FrontEnd::NodeFile);
        assert!(e.contains("twice [timers] status_interval"), "{e}");
    }

    #[test]
    fn the_membership_tag_ignores_order_and_tells_lists_apart() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_eq!(membership_tag(&[(0, a), (1, b)]), membership_tag(&[(1, b), (0, a)]));
        assert_ne!(membership_tag(&[(0, a), (1, b)]), membership_tag(&[(0, b), (1, a)]));
        assert_ne!(membership_tag(&[(0, a)]), membership_tag(&[(0, a), (1, b)]));
    }

    #[test]
    fn a_path_that_cannot_carry_the_mtu_is_named() {
        let c = ChannelConfig { mtu: MTU_8192, ..config() };
        let e = c.validate_path(c.destinations[0], 1472).unwrap_err().to_string();
        assert!(
            e.contains("MTU 8192") && e.contains("path MTU 1500") && e.contains("1472") && e.contains("1408"),
            "{e}"
        );
        ChannelConfig { mtu: MTU_1408, ..config() }.validate_path(c.destinations[0], 1472).unwrap();
    }
}
