//! Configuration of a network channel: destinations, MTU, term length, socket buffers, send mode,
//! timers and fault injection, validated at start with messages that name the value and the rule.

use std::net::SocketAddr;
use std::time::Duration;

use crate::fault::FaultConfig;
use crate::frame::DATA_HEADER_LENGTH;
use crate::transport::{SendMode, SocketOptions, MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD};

/// The conservative MTU that crosses Ethernet with PPPoE, and the clouds, unfragmented.
pub const MTU_1408: usize = 1408;
/// The MTU for jumbo-frame paths (an MTU of 9001 on every hop); the model's `M_pkt` multiplier is ~6x 1408's.
pub const MTU_8192: usize = 8192;
/// Smallest MTU accepted: a data header plus one 32-byte aligned payload.
pub const MIN_MTU: usize = 64;
/// Smallest term length (64 KiB).
pub const TERM_MIN_LENGTH: usize = 64 * 1024;
/// Largest term length (1 GiB).
pub const TERM_MAX_LENGTH: usize = 1024 * 1024 * 1024;
/// Default term length of a network log (16 MiB, as Aeron's UDP default).
pub const DEFAULT_TERM_LENGTH: usize = 16 * 1024 * 1024;

/// Everything a network publication (the Sender side) and its subscriptions (the Receiver side) agree on.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelConfig {
    /// Where the Sender sends each datagram: one entry per follower (multi-destination cast).
    pub destinations: Vec<SocketAddr>,
    /// Largest datagram, header included: a multiple of 32 in `64..=65504`, at most `term_length / 8`.
    pub mtu: usize,
    /// Length of each of the log's three terms: a power of two in 64 KiB ..= 1 GiB.
    pub term_length: usize,
    /// How datagrams are put on the wire.
    pub send_mode: SendMode,
    /// Most datagrams (per destination) one `mmsg` or `gso` call carries.
    pub batch_limit: usize,
    /// Socket buffer sizes.
    pub socket: SocketOptions,
    /// Receiver window advertised in status messages; at most `term_length / 2` and at most `SO_RCVBUF`.
    /// Keep it at half of `SO_RCVBUF` or less: the kernel charges each queued datagram its whole
    /// allocation (2,304 B for 1,088 B of data), which only the doubling of `SO_RCVBUF` covers, and not
    /// for datagrams less than half full (see `tuning/README.md`).
    pub receiver_window: usize,
    /// A receiver silent for this long is dropped from flow control.
    pub receiver_timeout: Duration,
    /// Delay before a gap is NAKed.
    pub nak_delay: Duration,
    /// Delay before a gap that is still open is NAKed again (Aeron's unicast default: 100 x 100 us).
    pub nak_retry_delay: Duration,
    /// A status message is sent at least this often.
    pub status_interval: Duration,
    /// A heartbeat goes out after this long without data.
    pub heartbeat_interval: Duration,
    /// Setup frames repeat this often until a receiver answers.
    pub setup_interval: Duration,
    /// NAKs for a range already retransmitted are ignored for this long.
    pub retransmit_linger: Duration,
    /// Faults injected on the datagrams this side sends.
    pub send_faults: FaultConfig,
    /// Faults injected on the datagrams this side receives.
    pub receive_faults: FaultConfig,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            destinations: Vec::new(),
            mtu: MTU_1408,
            term_length: DEFAULT_TERM_LENGTH,
            send_mode: SendMode::Classic,
            batch_limit: 16,
            socket: SocketOptions { send_buffer: Some(2 << 20), receive_buffer: Some(2 << 20) },
            receiver_window: 128 * 1024,
            receiver_timeout: Duration::from_secs(5),
            nak_delay: Duration::from_micros(100),
            nak_retry_delay: Duration::from_millis(10),
            status_interval: Duration::from_millis(200),
            heartbeat_interval: Duration::from_millis(100),
            setup_interval: Duration::from_millis(100),
            retransmit_linger: Duration::from_millis(10),
            send_faults: FaultConfig::default(),
            receive_faults: FaultConfig::default(),
        }
    }
}

/// A configuration value that breaks a rule; the message names both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn refuse(message: String) -> Result<(), ConfigError> {
    Err(ConfigError(message))
}

/// Checks a term length: a power of two from 64 KiB to 1 GiB.
pub fn validate_term_length(term_length: usize) -> Result<(), ConfigError> {
    if !term_length.is_power_of_two() || !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&term_length) {
        return refuse(format!(
            "term length {term_length} must be a power of two from 65536 (64 KiB) to 1073741824 (1 GiB)"
        ));
    }
    Ok(())
}

/// Checks an MTU against the UDP limits and the term length.
pub fn validate_mtu(mtu: usize, term_length: usize) -> Result<(), ConfigError> {
    if mtu % 32 != 0 || !(MIN_MTU..=MAX_UDP_PAYLOAD).contains(&mtu) {
        return refuse(format!(
            "MTU {mtu} must be a multiple of 32 from {MIN_MTU} to {MAX_UDP_PAYLOAD} (the largest UDP payload); the presets are 1408 and 8192"
        ));
    }
    if mtu > term_length / 8 {
        return refuse(format!(
            "MTU {mtu} is larger than term length / 8 = {} (term length {term_length}); lower the MTU or raise the term length to at least {}",
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

    /// Checks every rule; the first broken one is returned with a message that says what to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_term_length(self.term_length)?;
        validate_mtu(self.mtu, self.term_length)?;
        if self.receiver_window < self.mtu || self.receiver_window > self.term_length / 2 {
            return refuse(format!(
                "receiver window {} must be at least the MTU ({}) and at most term length / 2 ({})",
                self.receiver_window,
                self.mtu,
                self.term_length / 2
            ));
        }
        if let Some(rcvbuf) = self.socket.receive_buffer {
            if self.receiver_window > rcvbuf {
                return refuse(format!(
                    "receiver window {} is larger than SO_RCVBUF {rcvbuf}: a full window would overflow the socket; raise receive_buffer or lower the window",
                    self.receiver_window
                ));
            }
        }
        if !(1..=MAX_GSO_SEGMENTS).contains(&self.batch_limit) {
            return refuse(format!("batch limit {} must be from 1 to {MAX_GSO_SEGMENTS}", self.batch_limit));
        }
        for faults in [&self.send_faults, &self.receive_faults] {
            faults.validate().map_err(ConfigError)?;
        }
        if self.destinations.iter().any(|d| d.port() == 0) {
            return refuse("a destination needs a port other than 0".into());
        }
        Ok(())
    }

    /// Checks that the MTU fits the path to a destination whose largest unfragmented UDP payload is
    /// `path_max_payload` (read from the kernel after connecting, see `UdpEndpoint::path_max_payload`).
    pub fn validate_path(&self, destination: SocketAddr, path_max_payload: usize) -> Result<(), ConfigError> {
        if self.mtu > path_max_payload {
            // IP and UDP headers: 20 + 8 bytes over IPv4, 40 + 8 over IPv6.
            let overhead = if destination.is_ipv6() { 48 } else { 28 };
            return refuse(format!(
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
        let err = |mtu, term_length| validate_mtu(mtu, term_length).unwrap_err().0;
        assert!(err(1400, DEFAULT_TERM_LENGTH).contains("multiple of 32"));
        assert!(err(32, DEFAULT_TERM_LENGTH).contains("from 64"));
        assert!(err(65536, 1 << 30).contains("65504"));
        let e = err(16384, TERM_MIN_LENGTH);
        assert!(e.contains("term length / 8 = 8192") && e.contains("131072"), "{e}");
        validate_mtu(65504, 1 << 20).unwrap();
    }

    #[test]
    fn bad_term_lengths_and_windows_are_refused() {
        assert!(validate_term_length(100_000).unwrap_err().0.contains("power of two"));
        assert!(validate_term_length(32 * 1024).is_err());
        assert!(validate_term_length(2 << 30).is_err());
        let e = ChannelConfig { receiver_window: 64 << 20, ..config() }.validate().unwrap_err().0;
        assert!(e.contains("term length / 2"), "{e}");
        let e = ChannelConfig { socket: SocketOptions { send_buffer: None, receive_buffer: Some(4096) }, ..config() }
            .validate()
            .unwrap_err()
            .0;
        assert!(e.contains("SO_RCVBUF"), "{e}");
    }

    #[test]
    fn a_path_that_cannot_carry_the_mtu_is_named() {
        let c = ChannelConfig { mtu: MTU_8192, ..config() };
        let e = c.validate_path(c.destinations[0], 1472).unwrap_err().0;
        assert!(
            e.contains("MTU 8192") && e.contains("path MTU 1500") && e.contains("1472") && e.contains("1408"),
            "{e}"
        );
        ChannelConfig { mtu: MTU_1408, ..config() }.validate_path(c.destinations[0], 1472).unwrap();
    }
}
