//! What a sweep runs: the grid of configurations and how long each measurement takes.
//!
//! Three built-in profiles:
//!
//! - `quick` (the default of `cargo bench --bench sweep`): 128 B messages at MTU 1408 and 8192, the
//!   consensus idle strategy `backoff`, classic send mode with separate commit frames (the model's case) and,
//!   beside it, every send mode with separate and piggybacked commits (12 configurations); five utilisation
//!   points. About 2 minutes on a 2-core machine (at most 4).
//! - `full`: every message size of `docs/MODEL.md`'s table (32, 128, 224, 512, 1344 B) at both MTUs, the idle
//!   strategies `noop`, `sleep-ns:1000` and `backoff` in classic/separate, and the other send modes and
//!   piggyback beside them at the first idle strategy; nine utilisation points and longer windows. About
//!   80 configurations of ~24 s: 35 minutes.
//! - `tiny` (the test suite's): one configuration, a few thousand messages, two utilisation points; seconds.

use std::fmt;
use std::time::Duration;

use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::transport::SendMode;

/// How commit positions travel from the leader to the followers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Commit frames of their own (the model's `C`).
    Separate,
    /// The commit position rides in data frames while data flows.
    Piggyback,
}

impl Control {
    /// The name the report uses: `separate` or `piggyback`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Separate => "separate",
            Self::Piggyback => "piggyback",
        }
    }

    /// Parses `separate` or `piggyback`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "separate" => Some(Self::Separate),
            "piggyback" => Some(Self::Piggyback),
            _ => None,
        }
    }
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long each kind of measurement runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timings {
    /// One window of the S probe.
    pub s_window: Duration,
    /// Windows of one S probe (the median is kept): the sweep's first probe, and each slice probed between
    /// two mu windows.
    pub s_windows: usize,
    /// Warm-up before the C window.
    pub c_warmup: Duration,
    /// The C window: control syscalls are counted over it.
    pub c_window: Duration,
    /// The moderate fixed load of the C probe, messages per second.
    pub c_rate: f64,
    /// Saturating load before the first mu window.
    pub mu_warmup: Duration,
    /// Saturating load after each S slice, before the next mu window (the pipeline refills).
    pub mu_resume: Duration,
    /// One mu window.
    pub mu_window: Duration,
    /// mu windows, each between two S slices (mu is their mean).
    pub mu_windows: usize,
    /// How long each utilisation point offers its paced load.
    pub point: Duration,
    /// At most this many messages per utilisation point (the point ends early when they are offered).
    pub point_messages: u64,
    /// The hiccup probe: a spinning thread per core of the layout, all at once (the host's own stalls).
    pub hiccup: Duration,
}

impl Timings {
    /// A rough estimate of one configuration's run time before its utilisation points: two cluster starts,
    /// the warm-up, and the mu windows with the S slices around them.
    pub fn mu_phase_estimate(&self) -> Duration {
        Duration::from_millis(1000)
            + self.s_window * ((self.mu_windows + 1) * self.s_windows) as u32
            + self.mu_warmup
            + (self.mu_resume + self.mu_window) * self.mu_windows as u32
    }
}

/// A sweep's grid and timings.
///
/// Invariant (checked by [`Profile::validate`]): every list is non-empty, every message is at least
/// [`MIN_MESSAGE`] bytes, every rho is finite and positive.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The profile's name in the report: `quick`, `full`, `tiny`, or `custom`.
    pub name: String,
    /// MTUs, bytes.
    pub mtus: Vec<usize>,
    /// Idle strategies of the leader's consensus agent (they set C).
    pub idles: Vec<IdleStrategyConfig>,
    /// Message sizes, bytes.
    pub msgs: Vec<usize>,
    /// Send modes.
    pub send_modes: Vec<SendMode>,
    /// Commit transports.
    pub controls: Vec<Control>,
    /// Utilisation points, fractions of the measured mu.
    pub rhos: Vec<f64>,
    /// How long each measurement runs.
    pub timings: Timings,
    /// The idle strategy of the leader's Sender thread: `noop` (a core of its own, as the model assumes)
    /// except in the test suite's `tiny` profile, which must not busy-spin.
    pub sender_idle: IdleStrategyConfig,
}

/// The consensus idle strategies every C probe compares (the profile's own are added): the model's lever
/// is that a sleeping or backing-off consensus agent coalesces commit updates, so it sends fewer control
/// packets than a spinning one.
pub const C_PROBE_IDLES: [&str; 3] = ["noop", "sleep-ns:1000", "backoff"];

/// The paced loads of the C probe, as shares of the model's capacity for MTU 1408, 128 B, classic.
pub const C_PROBE_RHOS: [f64; 3] = [0.1, 0.3, 0.5];

/// The smallest message the sweep sends: its sequence number takes 8 bytes.
pub const MIN_MESSAGE: usize = 8;

fn idle(text: &str) -> IdleStrategyConfig {
    text.parse().expect("a built-in idle strategy")
}

impl Profile {
    /// The default profile: at most 4 minutes on a 2-core machine.
    pub fn quick() -> Self {
        Self {
            name: "quick".into(),
            mtus: vec![1408, 8192],
            idles: vec![idle("backoff")],
            msgs: vec![128],
            send_modes: SendMode::ALL.to_vec(),
            controls: vec![Control::Separate, Control::Piggyback],
            rhos: vec![0.1, 0.3, 0.5, 0.7, 0.9],
            timings: Timings {
                s_window: Duration::from_millis(100),
                s_windows: 3,
                c_warmup: Duration::from_millis(300),
                c_window: Duration::from_millis(1000),
                c_rate: 50_000.0,
                mu_warmup: Duration::from_millis(400),
                mu_resume: Duration::from_millis(100),
                mu_window: Duration::from_millis(500),
                mu_windows: 3,
                point: Duration::from_millis(1500),
                point_messages: 4_000_000,
                hiccup: Duration::from_secs(2),
            },
            sender_idle: IdleStrategyConfig::NoOp,
        }
    }

    /// The whole table of `docs/MODEL.md`, every idle strategy, every send mode (about 35 minutes).
    pub fn full() -> Self {
        Self {
            name: "full".into(),
            mtus: vec![1408, 8192],
            idles: vec![idle("noop"), idle("sleep-ns:1000"), idle("backoff")],
            msgs: crate::model::TABLE_MESSAGE_SIZES.to_vec(),
            send_modes: SendMode::ALL.to_vec(),
            controls: vec![Control::Separate, Control::Piggyback],
            rhos: vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
            timings: Timings {
                s_window: Duration::from_millis(150),
                s_windows: 3,
                c_warmup: Duration::from_millis(500),
                c_window: Duration::from_secs(2),
                c_rate: 50_000.0,
                mu_warmup: Duration::from_millis(500),
                mu_resume: Duration::from_millis(200),
                mu_window: Duration::from_secs(1),
                mu_windows: 4,
                point: Duration::from_secs(2),
                point_messages: 10_000_000,
                hiccup: Duration::from_secs(5),
            },
            sender_idle: IdleStrategyConfig::NoOp,
        }
    }

    /// The test suite's profile: one configuration, a few thousand messages, two points, no busy spin.
    pub fn tiny() -> Self {
        Self {
            name: "tiny".into(),
            mtus: vec![1408],
            idles: vec![idle("backoff")],
            msgs: vec![128],
            send_modes: vec![SendMode::Classic],
            controls: vec![Control::Separate],
            rhos: vec![0.2, 0.5],
            timings: Timings {
                s_window: Duration::from_millis(20),
                s_windows: 1,
                c_warmup: Duration::from_millis(20),
                c_window: Duration::from_millis(100),
                c_rate: 10_000.0,
                mu_warmup: Duration::from_millis(50),
                mu_resume: Duration::from_millis(20),
                mu_window: Duration::from_millis(100),
                mu_windows: 2,
                point: Duration::from_millis(300),
                point_messages: 3_000,
                hiccup: Duration::from_millis(50),
            },
            sender_idle: idle("backoff"),
        }
    }

    /// The built-in profile called `name` (`quick`, `full` or `tiny`).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "quick" => Some(Self::quick()),
            "full" => Some(Self::full()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    /// Checks the invariant; the message says which list to fix.
    pub fn validate(&self) -> Result<(), String> {
        let empty = [
            ("--mtu", self.mtus.is_empty()),
            ("--idle", self.idles.is_empty()),
            ("--msg", self.msgs.is_empty()),
            ("--send-mode", self.send_modes.is_empty()),
            ("--control", self.controls.is_empty()),
            ("--rho", self.rhos.is_empty()),
        ];
        if let Some((flag, _)) = empty.iter().find(|(_, e)| *e) {
            return Err(format!("{flag} lists nothing: give at least one value"));
        }
        if let Some(msg) = self.msgs.iter().find(|&&m| m < MIN_MESSAGE) {
            return Err(format!(
                "--msg {msg} is too small: messages carry an 8-byte sequence number, use >= {MIN_MESSAGE}"
            ));
        }
        if let Some(rho) = self.rhos.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(format!("--rho {rho} is not a utilisation: give positive fractions like 0.1,0.5,0.9"));
        }
        Ok(())
    }

    /// The configurations to run, in order. The idle dimension sets C, which the model's case (classic
    /// send mode, separate commit frames) validates; the other send modes and piggyback are measured beside
    /// it at the first idle strategy only, which keeps the full grid to ~80 configurations.
    pub fn configs(&self) -> Vec<ConfigSpec> {
        let mut all = Vec::new();
        for &mtu in &self.mtus {
            for &msg in &self.msgs {
                for (i, &idle) in self.idles.iter().enumerate() {
                    for &send_mode in &self.send_modes {
                        for &control in &self.controls {
                            let model_case = send_mode == SendMode::Classic && control == Control::Separate;
                            if model_case || i == 0 {
                                all.push(ConfigSpec { mtu, idle, msg, send_mode, control });
                            }
                        }
                    }
                }
            }
        }
        all
    }

    /// The consensus idle strategies the C probe runs: [`C_PROBE_IDLES`], then the profile's others.
    pub fn c_probe_idles(&self) -> Vec<IdleStrategyConfig> {
        let mut idles: Vec<IdleStrategyConfig> = C_PROBE_IDLES.iter().map(|i| idle(i)).collect();
        idles.extend(self.idles.iter().filter(|i| !idles.contains(i)).copied().collect::<Vec<_>>());
        idles
    }

    /// A rough estimate of the run time: probes plus each configuration's start, mu windows and points.
    pub fn estimate(&self) -> Duration {
        let t = &self.timings;
        let s = (t.s_window * t.s_windows as u32) * (self.mtus.len() * self.send_modes.len()) as u32;
        // Each strategy the C probe runs, in its two layouts: a cluster start and a load per rho.
        let c_probes = 2 * self.c_probe_idles().len() as u32;
        let c = (Duration::from_millis(400) + (t.c_warmup + t.c_window) * C_PROBE_RHOS.len() as u32) * c_probes;
        s + t.hiccup + c + self.config_estimate() * self.configs().len() as u32
    }

    /// A rough estimate of one configuration's run time.
    pub fn config_estimate(&self) -> Duration {
        self.timings.mu_phase_estimate() + (self.timings.point + Duration::from_millis(100)) * self.rhos.len() as u32
    }
}

/// One configuration of the sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConfigSpec {
    /// MTU, bytes.
    pub mtu: usize,
    /// The leader's consensus idle strategy.
    pub idle: IdleStrategyConfig,
    /// Message size, bytes.
    pub msg: usize,
    /// Send mode of the log channel.
    pub send_mode: SendMode,
    /// How commits travel.
    pub control: Control,
}

impl ConfigSpec {
    /// The model's case at `mtu` and `msg` (the idle strategy does not change the prediction).
    pub fn c_probe(mtu: usize, msg: usize) -> Self {
        Self { mtu, idle: IdleStrategyConfig::default(), msg, send_mode: SendMode::Classic, control: Control::Separate }
    }

    /// True for the model's case: classic send mode with separate commit frames.
    pub fn is_model_case(&self) -> bool {
        self.send_mode == SendMode::Classic && self.control == Control::Separate
    }
}

impl fmt::Display for ConfigSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MTU {} {} B {} {}/{}", self.mtu, self.msg, self.idle, self.send_mode, self.control)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_covers_128_bytes_at_both_mtus_in_the_model_case() {
        let quick = Profile::quick();
        quick.validate().unwrap();
        let configs = quick.configs();
        for mtu in [1408, 8192] {
            assert!(configs.iter().any(|c| c.mtu == mtu && c.msg == 128 && c.is_model_case()));
        }
        assert_eq!(configs.len(), 2 * 6);
        assert!(quick.estimate() < Duration::from_secs(240), "{:?}", quick.estimate());
    }

    #[test]
    fn full_runs_every_idle_only_in_the_model_case() {
        let full = Profile::full();
        let configs = full.configs();
        // Per (mtu, msg): 3 idles in classic/separate plus 5 other combinations at the first idle.
        assert_eq!(configs.len(), 2 * 5 * (3 + 5));
        let other_idles = configs.iter().filter(|c| !c.is_model_case() && c.idle != full.idles[0]).count();
        assert_eq!(other_idles, 0);
        for msg in crate::model::TABLE_MESSAGE_SIZES {
            assert_eq!(configs.iter().filter(|c| c.msg == msg && c.is_model_case()).count(), 2 * 3);
        }
    }

    #[test]
    fn validate_names_the_bad_list() {
        let mut p = Profile::tiny();
        p.rhos.clear();
        assert!(p.validate().unwrap_err().contains("--rho"));
        let mut p = Profile::tiny();
        p.msgs = vec![4];
        assert!(p.validate().unwrap_err().contains("--msg 4"));
        let mut p = Profile::tiny();
        p.rhos = vec![f64::NAN];
        assert!(p.validate().is_err());
        assert_eq!(Control::parse("piggyback"), Some(Control::Piggyback));
        assert_eq!(Control::parse("x"), None);
    }
}
