//! The throughput model of a single-threaded sender (`docs/MODEL.md` of the project), as pure functions.
//!
//! ```text
//! framed     = align32(msg + 32)                      bytes a message takes in the log
//! usable     = MTU - 40                               the model's room for frames in one datagram
//! M_pkt      = floor(usable / framed)                 messages per datagram (1/k when fragmented)
//! mu         = (S - C) / D x M_pkt                    capacity, the peak messages/s
//! rho        = lambda / mu                            utilisation: a ratio, not a rate
//! regime     = Safe (rho < 0.7) | Knee (0.7 ..= 1.0) | Saturated (rho > 1.0)
//! worst wait = (term_length / 2) / (mu x framed)      the saturated latency bound
//! ```
//!
//! `S` is the sender thread's peak `sendmsg` calls per second (measured per platform), `C` the calls per
//! second consensus control traffic takes from that budget, `D` the followers each log datagram is
//! sent to (one call each). Every function checks its inputs and reports bad ones as a [`ModelError`];
//! none panics. Rates are `f64` messages (or bytes, or calls) per second.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use quorumcast_driver::frame::{self, DATA_HEADER_LENGTH, MAX_UDP_PAYLOAD_LENGTH};
use quorumcast_driver::media::channel::{MTU_1408, MTU_8192, TERM_MAX_LENGTH};

/// Bytes of each datagram the model takes off the MTU before packing frames: `docs/MODEL.md`'s
/// "~40 (UDP/Aeron header)", an allowance for per-datagram header and packing overhead. It makes `M_pkt`
/// conservative: this crate's datagrams carry up to the full MTU of frames.
pub const MODEL_HEADER_OVERHEAD: usize = 40;
/// Smallest MTU the model takes: the overhead plus one empty data frame, so `M_pkt >= 1` for `msg = 0`.
pub const MIN_MODEL_MTU: usize = MODEL_HEADER_OVERHEAD + DATA_HEADER_LENGTH;
/// Largest MTU the model takes: the largest UDP payload a datagram of frames can fill.
pub const MAX_MODEL_MTU: usize = MAX_UDP_PAYLOAD_LENGTH;
/// Largest message the model takes: `term_length / 8` of the longest term (1 GiB), the crate's limit.
pub const MAX_MODEL_MESSAGE: usize = TERM_MAX_LENGTH / 8;
/// Utilisation where the knee starts: below it latency is the fixed pipeline time (`docs/MODEL.md`: design
/// for `rho < 0.7`).
pub const KNEE_START: f64 = 0.7;
/// Utilisation where saturation starts: above it the load exceeds capacity and the queue fills.
pub const SATURATION_START: f64 = 1.0;
/// Below this utilisation at MTU 1408, and with doubtful jumbo frames, the decision rule stays at 1408.
pub const STAY_BELOW: f64 = 0.5;
/// The message sizes of `docs/MODEL.md`'s measured table, in bytes.
pub const TABLE_MESSAGE_SIZES: [usize; 5] = [32, 128, 224, 512, 1344];
/// The MTUs of `docs/MODEL.md`'s measured table.
pub const TABLE_MTUS: [usize; 2] = [MTU_1408, MTU_8192];

/// A model input out of range; the message says which value and what to change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ModelError {
    /// The MTU is outside `MIN_MODEL_MTU..=MAX_MODEL_MTU`.
    MtuOutOfRange {
        /// The MTU given.
        mtu: usize,
    },
    /// The message is longer than [`MAX_MODEL_MESSAGE`].
    MessageTooLong {
        /// The message length given.
        msg: usize,
    },
    /// A rate (or utilisation) is negative, not finite, or zero where it divides.
    InvalidRate {
        /// Which input: `"S"`, `"C"`, `"lambda"`, `"mu"`, `"drain"` or `"rho"`.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// `C >= S`: consensus control traffic leaves no syscall budget for the log.
    NoLogBudget {
        /// The sender's peak syscall rate.
        s: f64,
        /// The control syscall rate.
        c: f64,
    },
    /// `D = 0`: a log with no follower sends nothing.
    NoFollowers,
    /// A term length of 0 bytes.
    EmptyTerm,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::MtuOutOfRange { mtu } => {
                write!(f, "MTU {mtu} is out of range: use an MTU in {MIN_MODEL_MTU}..={MAX_MODEL_MTU} (1408 or 8192)")
            }
            Self::MessageTooLong { msg } => {
                write!(f, "message length {msg} is too long: use at most {MAX_MODEL_MESSAGE} bytes (term_length / 8)")
            }
            Self::InvalidRate { name, value } => {
                write!(f, "{name} = {value} is not a valid rate: give a finite, non-negative number (positive for mu and drain)")
            }
            Self::NoLogBudget { s, c } => {
                write!(f, "C = {c} is not below S = {s}: control traffic leaves no budget for the log; lower C or measure S again")
            }
            Self::NoFollowers => {
                write!(f, "D = 0: give the number of followers each log datagram goes to (2 in a 3-node cluster)")
            }
            Self::EmptyTerm => {
                write!(f, "term length 0: give the log's term length in bytes (a power of two, 64 KiB ..= 1 GiB)")
            }
        }
    }
}

impl std::error::Error for ModelError {}

/// `align32(msg + 32)`: the bytes a message of `msg` bytes takes in the log, unfragmented
/// ([`frame::framed_length`]). Errors when `msg > MAX_MODEL_MESSAGE`.
pub fn framed_length(msg: usize) -> Result<usize, ModelError> {
    check_message(msg)?;
    Ok(frame::framed_length(msg))
}

/// `mtu - MODEL_HEADER_OVERHEAD`: the model's room for frames in one datagram. Errors when the MTU is
/// outside `MIN_MODEL_MTU..=MAX_MODEL_MTU`; the result is then at least 32.
pub fn usable_mtu(mtu: usize) -> Result<usize, ModelError> {
    check_mtu(mtu)?;
    Ok(mtu - MODEL_HEADER_OVERHEAD)
}

/// `M_pkt` as an exact ratio: `messages` messages per `datagrams` datagrams.
///
/// Invariant: either `datagrams == 1` and `messages >= 1` (the message fits), or `messages == 1` and
/// `datagrams >= 2` (the message is fragmented over `datagrams` datagrams).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Packing {
    /// Messages carried by `datagrams` datagrams.
    pub messages: usize,
    /// Datagrams (per destination) that carry `messages` messages.
    pub datagrams: usize,
}

impl Packing {
    /// `M_pkt` as a number: `messages / datagrams` (a fraction `1/k` for a message in `k` datagrams).
    pub fn per_datagram(&self) -> f64 {
        self.messages as f64 / self.datagrams as f64
    }
}

impl fmt::Display for Packing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.datagrams == 1 {
            write!(f, "{}", self.messages)
        } else {
            write!(f, "{}/{}", self.messages, self.datagrams)
        }
    }
}

/// `M_pkt`, messages per datagram.
///
/// - When `framed <= usable`: `floor(usable / framed)` messages in one datagram (`docs/MODEL.md`'s formula).
/// - Otherwise the message does not share a datagram. The sender fragments it as the log appender does,
///   into frames of at most `mtu - 32` payload bytes, one datagram each, so it takes
///   `k = ceil(msg / (mtu - 32))` datagrams and `M_pkt = 1/k`. A message whose frame exceeds the model's
///   usable MTU but not the MTU itself (`k = 1`, e.g. 1344 B at 1408: 1376 > 1368) thus gets
///   `M_pkt = 1`, the table's "~1". (The last fragment may share its datagram; the model charges `k`.)
pub fn messages_per_datagram(mtu: usize, msg: usize) -> Result<Packing, ModelError> {
    let usable = usable_mtu(mtu)?;
    let framed = framed_length(msg)?;
    if framed <= usable {
        return Ok(Packing { messages: usable / framed, datagrams: 1 });
    }
    let max_payload = mtu - DATA_HEADER_LENGTH;
    Ok(Packing { messages: 1, datagrams: msg.div_ceil(max_payload) })
}

/// The sender's syscall budget: `S`, `C` and `D` of `docs/MODEL.md`.
///
/// Invariants (checked by [`Model::new`]): `S` and `C` are finite, `0 <= C < S`, and `D >= 1`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Model {
    s: f64,
    c: f64,
    d: u32,
}

/// What the model says about one message size at one MTU.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Capacity {
    /// Message length, bytes.
    pub msg: usize,
    /// MTU, bytes.
    pub mtu: usize,
    /// `align32(msg + 32)`, bytes.
    pub framed: usize,
    /// `mtu - 40`, bytes.
    pub usable_mtu: usize,
    /// `M_pkt`.
    pub packing: Packing,
    /// `(S - C) / D`: log datagrams per second the sender can put out to every follower.
    pub datagrams_per_s: f64,
    /// `mu = (S - C) / D x M_pkt`: peak messages per second.
    pub mu: f64,
    /// `mu x framed`: log bytes per second the sender drains at capacity (see [`drain_rate`]).
    pub drain_bytes_per_s: f64,
}

impl Model {
    /// A model of a sender with peak `s` syscalls/s, `c` of them taken by control traffic, sending each
    /// log datagram to `d` followers. Errors unless `0 <= c < s` (both finite) and `d >= 1`.
    pub fn new(s: f64, c: f64, d: u32) -> Result<Self, ModelError> {
        check_rate("S", s)?;
        check_rate("C", c)?;
        if c >= s {
            return Err(ModelError::NoLogBudget { s, c });
        }
        if d == 0 {
            return Err(ModelError::NoFollowers);
        }
        Ok(Self { s, c, d })
    }

    /// `S`: the sender thread's peak syscalls per second.
    pub fn s(&self) -> f64 {
        self.s
    }

    /// `C`: syscalls per second taken by consensus control traffic.
    pub fn c(&self) -> f64 {
        self.c
    }

    /// `D`: followers each log datagram is sent to (one syscall each).
    pub fn d(&self) -> u32 {
        self.d
    }

    /// `(S - C) / D`: log datagrams per second, always positive.
    pub fn datagrams_per_s(&self) -> f64 {
        (self.s - self.c) / f64::from(self.d)
    }

    /// `mu = (S - C) / D x M_pkt`: the peak messages per second for `msg`-byte messages at `mtu`.
    pub fn capacity(&self, mtu: usize, msg: usize) -> Result<f64, ModelError> {
        Ok(self.analyze(mtu, msg)?.mu)
    }

    /// Every term of the model for `msg`-byte messages at `mtu`: framed size, usable MTU, `M_pkt`, `mu`
    /// and the drain rate.
    pub fn analyze(&self, mtu: usize, msg: usize) -> Result<Capacity, ModelError> {
        let packing = messages_per_datagram(mtu, msg)?;
        let framed = framed_length(msg)?;
        let datagrams_per_s = self.datagrams_per_s();
        let mu = datagrams_per_s * packing.per_datagram();
        Ok(Capacity {
            msg,
            mtu,
            framed,
            usable_mtu: usable_mtu(mtu)?,
            packing,
            datagrams_per_s,
            mu,
            drain_bytes_per_s: drain_rate(mu, framed),
        })
    }
}

/// `rho = lambda / mu`: the operating point as a fraction of capacity. Errors unless `lambda` is finite
/// and non-negative and `mu` finite and positive.
pub fn utilization(lambda: f64, mu: f64) -> Result<f64, ModelError> {
    check_rate("lambda", lambda)?;
    check_positive("mu", mu)?;
    Ok(lambda / mu)
}

/// The latency regime of an operating point (`docs/MODEL.md`, "Peak TPS is not latency").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Regime {
    /// `rho < 0.7`: latency is the fixed pipeline time, with a tight tail.
    Safe,
    /// `0.7 <= rho <= 1.0`: queueing delay climbs steeply toward the saturation bound; the tail detaches.
    Knee,
    /// `rho > 1.0`: the load exceeds capacity; every message waits about the saturation bound.
    Saturated,
}

impl fmt::Display for Regime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Safe => "safe",
            Self::Knee => "knee",
            Self::Saturated => "saturated",
        })
    }
}

/// The regime of utilisation `rho`: [`Regime::Safe`] below [`KNEE_START`] (0.7), [`Regime::Knee`] from
/// 0.7 up to and including [`SATURATION_START`] (1.0, the load equals capacity), [`Regime::Saturated`]
/// above 1.0. A NaN `rho` claims no headroom and is saturated.
pub fn regime(rho: f64) -> Regime {
    if rho < KNEE_START {
        Regime::Safe
    } else if rho <= SATURATION_START {
        Regime::Knee
    } else {
        Regime::Saturated
    }
}

/// `mu x framed`: the log bytes per second a sender at capacity `mu` moves for messages of `framed`
/// bytes in the log. This, not the message payload rate, is what drains the publication window.
pub fn drain_rate(mu: f64, framed: usize) -> f64 {
    mu * framed as f64
}

/// `(term_length / 2) / drain`: the latency of every message once saturated. The appender may run at
/// most `term_length / 2` bytes ahead of the slowest consumer (the publication window); a full window
/// drains at `drain_bytes_per_s` (see [`drain_rate`]). Errors when `term_length` is 0 or the drain rate
/// is not finite and positive.
pub fn saturation_latency(term_length: usize, drain_bytes_per_s: f64) -> Result<Duration, ModelError> {
    if term_length == 0 {
        return Err(ModelError::EmptyTerm);
    }
    check_positive("drain", drain_bytes_per_s)?;
    let seconds = (term_length / 2) as f64 / drain_bytes_per_s;
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| ModelError::InvalidRate { name: "drain", value: drain_bytes_per_s })
}

/// The MTU `docs/MODEL.md`'s decision rule picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MtuChoice {
    /// Switch to MTU 8192 (jumbo frames on every hop).
    Switch8192,
    /// Stay at MTU 1408.
    Stay1408,
}

/// The decision rule's answer and the rule that gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MtuRecommendation {
    /// The MTU to use.
    pub choice: MtuChoice,
    /// Why, in one sentence.
    pub reason: &'static str,
}

/// `docs/MODEL.md`'s MTU decision rule, from the utilisation at MTU 1408 and whether jumbo frames
/// (NIC MTU >= 9001) are reliable on every hop:
///
/// 1. jumbo frames reliable → 8192 (headroom and a lower tail at little risk);
/// 2. `rho >= 0.7` (at or past the knee) → 8192, after making jumbo frames reliable on every hop;
/// 3. `rho < 0.5` → 1408 (already safe; 8192's gain is negligible, its black-hole risk is not);
/// 4. `0.5 <= rho < 0.7` (which `docs/MODEL.md` leaves open) → 1408, still safe, with a reason that says the
///    headroom is thin.
///
/// Errors when `rho_at_1408` is negative or not finite.
pub fn recommend_mtu(rho_at_1408: f64, jumbo_reliable: bool) -> Result<MtuRecommendation, ModelError> {
    check_rate("rho", rho_at_1408)?;
    let (choice, reason) = if jumbo_reliable {
        (
            MtuChoice::Switch8192,
            "jumbo frames are reliable on every hop: 8192 gives ~6x headroom and a lower tail at little risk",
        )
    } else if rho_at_1408 >= KNEE_START {
        (
            MtuChoice::Switch8192,
            "rho at 1408 is at or past the knee (>= 0.7): switch to 8192, after making jumbo frames reliable on every hop",
        )
    } else if rho_at_1408 < STAY_BELOW {
        (
            MtuChoice::Stay1408,
            "rho at 1408 is below 0.5 and jumbo frames are doubtful: 1408 is already safe and has no black-hole risk",
        )
    } else {
        (
            MtuChoice::Stay1408,
            "rho at 1408 is 0.5..0.7, still safe but with thin headroom: stay at 1408 and verify jumbo frames before load grows",
        )
    };
    Ok(MtuRecommendation { choice, reason })
}

fn check_mtu(mtu: usize) -> Result<(), ModelError> {
    if (MIN_MODEL_MTU..=MAX_MODEL_MTU).contains(&mtu) {
        Ok(())
    } else {
        Err(ModelError::MtuOutOfRange { mtu })
    }
}

fn check_message(msg: usize) -> Result<(), ModelError> {
    if msg <= MAX_MODEL_MESSAGE {
        Ok(())
    } else {
        Err(ModelError::MessageTooLong { msg })
    }
}

/// Finite and non-negative.
fn check_rate(name: &'static str, value: f64) -> Result<(), ModelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ModelError::InvalidRate { name, value })
    }
}

/// Finite and positive.
fn check_positive(name: &'static str, value: f64) -> Result<(), ModelError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ModelError::InvalidRate { name, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m7i() -> Model {
        Model::new(400_000.0, 160_000.0, 2).unwrap()
    }

    #[test]
    fn framing_and_usable_mtu() {
        assert_eq!(framed_length(0), Ok(32));
        assert_eq!(framed_length(1), Ok(64));
        assert_eq!(framed_length(128), Ok(160));
        assert_eq!(framed_length(224), Ok(256));
        assert_eq!(framed_length(1344), Ok(1376));
        assert_eq!(
            framed_length(MAX_MODEL_MESSAGE + 1),
            Err(ModelError::MessageTooLong { msg: MAX_MODEL_MESSAGE + 1 })
        );
        assert_eq!(usable_mtu(1408), Ok(1368));
        assert_eq!(usable_mtu(8192), Ok(8152));
        assert_eq!(usable_mtu(MIN_MODEL_MTU), Ok(32));
        assert_eq!(usable_mtu(MIN_MODEL_MTU - 1), Err(ModelError::MtuOutOfRange { mtu: MIN_MODEL_MTU - 1 }));
        assert_eq!(usable_mtu(MAX_MODEL_MTU + 1), Err(ModelError::MtuOutOfRange { mtu: MAX_MODEL_MTU + 1 }));
    }

    #[test]
    fn packing_fits_and_fragments() {
        assert_eq!(messages_per_datagram(1408, 128), Ok(Packing { messages: 8, datagrams: 1 }));
        assert_eq!(messages_per_datagram(MIN_MODEL_MTU, 0), Ok(Packing { messages: 1, datagrams: 1 }));
        // 1376 B framed > 1368 usable, but fits one frame of at most 1408 - 32 = 1376 payload bytes.
        assert_eq!(messages_per_datagram(1408, 1344), Ok(Packing { messages: 1, datagrams: 1 }));
        assert_eq!(messages_per_datagram(1408, 1376), Ok(Packing { messages: 1, datagrams: 1 }));
        assert_eq!(messages_per_datagram(1408, 1377), Ok(Packing { messages: 1, datagrams: 2 }));
        assert_eq!(messages_per_datagram(1408, 3 * 1376), Ok(Packing { messages: 1, datagrams: 3 }));
        let half = messages_per_datagram(1408, 2000).unwrap();
        assert_eq!(half.per_datagram(), 0.5);
        assert_eq!(half.to_string(), "1/2");
        assert_eq!(m7i().capacity(1408, 2000), Ok(60_000.0));
    }

    #[test]
    fn model_rejects_bad_budgets() {
        assert_eq!(Model::new(100.0, 100.0, 2), Err(ModelError::NoLogBudget { s: 100.0, c: 100.0 }));
        assert_eq!(Model::new(100.0, 0.0, 0), Err(ModelError::NoFollowers));
        assert!(matches!(Model::new(f64::NAN, 0.0, 1), Err(ModelError::InvalidRate { name: "S", .. })));
        assert!(matches!(Model::new(100.0, -1.0, 1), Err(ModelError::InvalidRate { name: "C", .. })));
        assert_eq!(Model::new(100.0, 0.0, 1).unwrap().datagrams_per_s(), 100.0);
        assert_eq!(m7i().datagrams_per_s(), 120_000.0);
    }

    #[test]
    fn capacity_is_budget_times_packing() {
        let a = m7i().analyze(1408, 128).unwrap();
        assert_eq!((a.framed, a.usable_mtu, a.packing.messages), (160, 1368, 8));
        assert_eq!(a.mu, 960_000.0);
        assert_eq!(a.drain_bytes_per_s, 960_000.0 * 160.0);
        // D divides: one follower doubles capacity.
        assert_eq!(Model::new(400_000.0, 160_000.0, 1).unwrap().capacity(1408, 128), Ok(1_920_000.0));
    }

    #[test]
    fn utilization_checks_inputs() {
        assert_eq!(utilization(480_000.0, 960_000.0), Ok(0.5));
        assert_eq!(utilization(0.0, 1.0), Ok(0.0));
        assert!(matches!(utilization(1.0, 0.0), Err(ModelError::InvalidRate { name: "mu", .. })));
        assert!(matches!(utilization(-1.0, 1.0), Err(ModelError::InvalidRate { name: "lambda", .. })));
        assert!(matches!(utilization(f64::INFINITY, 1.0), Err(ModelError::InvalidRate { name: "lambda", .. })));
    }

    #[test]
    fn regime_boundaries() {
        assert_eq!(regime(0.0), Regime::Safe);
        assert_eq!(regime(0.6999), Regime::Safe);
        assert_eq!(regime(0.7), Regime::Knee);
        assert_eq!(regime(1.0), Regime::Knee);
        assert_eq!(regime(1.0001), Regime::Saturated);
        assert_eq!(regime(f64::NAN), Regime::Saturated);
    }

    #[test]
    fn saturation_latency_is_half_term_over_drain() {
        assert_eq!(saturation_latency(2_000, 1_000.0), Ok(Duration::from_secs(1)));
        assert_eq!(saturation_latency(0, 1.0), Err(ModelError::EmptyTerm));
        assert!(matches!(saturation_latency(1, 0.0), Err(ModelError::InvalidRate { name: "drain", .. })));
        assert!(matches!(saturation_latency(1 << 30, f64::MIN_POSITIVE), Err(ModelError::InvalidRate { .. })));
    }

    #[test]
    fn decision_rule_branches() {
        let choice = |rho, jumbo| recommend_mtu(rho, jumbo).unwrap().choice;
        assert_eq!(choice(0.1, true), MtuChoice::Switch8192);
        assert_eq!(choice(0.49, false), MtuChoice::Stay1408);
        assert_eq!(choice(0.5, false), MtuChoice::Stay1408);
        assert_eq!(choice(0.7, false), MtuChoice::Switch8192);
        assert_eq!(choice(1.2, false), MtuChoice::Switch8192);
        assert_ne!(recommend_mtu(0.49, false).unwrap().reason, recommend_mtu(0.5, false).unwrap().reason);
        assert!(recommend_mtu(f64::NAN, true).is_err());
    }

    #[test]
    fn errors_say_what_to_change() {
        assert!(ModelError::MtuOutOfRange { mtu: 10 }.to_string().contains("1408 or 8192"));
        assert!(ModelError::NoFollowers.to_string().contains("followers"));
    }
}
