//! The Sender's capacity as a measured budget: from its time split over a saturating run (the engine's
//! [`quorumcast_driver::media::time_split`], on with `NodeBuilder::sender_time_split`), the time it spends per
//! datagram in data calls, control calls and its own code, the capacity that budget gives, and the seed
//! model's `(S - C) / D x M_pkt` beside it with its error taken apart term by term.
//!
//! The arithmetic, over a window of `T` seconds in which the Sender put out `N` datagrams (each
//! follower's copy counted) carrying `A` appended messages, and spent `data`, `control`, `own`, `idle` and
//! `between` nanoseconds in the five classes:
//!
//! ```text
//! busy           = data + control + own                     the Sender's time that was not waiting
//! t_d, t_c, t_o  = data / N, control / N, own / N           ns per datagram in each busy class
//! m              = D x A / N                                messages per datagram (copies counted once)
//! mu_budget      = 1e9 / (t_d + t_c + t_o) / D x m          = A / busy: what the Sender could carry busy all the time
//! ```
//!
//! `mu_budget` is the measured mu divided by the share of the Sender's time that was busy (and by the
//! committed-to-appended ratio), so it is within 5% of mu exactly when the Sender was busy at least about
//! 95% of the run and the classes account for its time: the check says the row is Sender-bound and the
//! split is complete, and the per-datagram times say what each message costs.
//!
//! The seed model, in the same terms, assumes that every syscall costs the probe's `1/S` (a data call
//! moving one datagram), that control calls (`C` per second) take `C/S` of the time, and that the rest
//! goes to data: no own code, no idle time, full datagrams (`M_pkt`). Hence, exactly,
//!
//! ```text
//! mu_seed / mu_measured = (t_d x S) x (g_seed / g) x (M_pkt / m) x (mu_budget / mu_measured)
//!     g      = data / busy         the share of busy time in data calls
//!     g_seed = 1 - C / S           the seed's share
//!     g_seed / g = 1 + (control / busy - C / S) / g + (own / busy) / g
//! ```
//!
//! so the seed's error is the product of five factors, each reported as its own percentage: **data
//! calls** (a data call's cost under load against the probe's), **control calls** (their measured share
//! of busy time against `C/S`), **own code** (the Sender's code outside calls, which the probe's loop
//! hardly has), **fill** (`M_pkt` against the messages a datagram carried) and **idle** (the time the
//! Sender waited). The largest names the term the seed model gets wrong.

use std::time::Instant;

use quorumcast_driver::agent::clock::NanoClock;
use quorumcast_driver::shm::stats::{ConsensusStats, SenderStats};
use serde::{Deserialize, Serialize};

/// The budget prediction must be within this share of measured mu.
pub const BUDGET_TOLERANCE: f64 = 0.05;

/// What one saturating window measured of the leader Sender (counter changes and the window's length).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SenderWindow {
    /// The window, seconds.
    pub seconds: f64,
    /// Nanoseconds in each class of the time split: data calls, control calls, own code, idle, between
    /// cycles.
    pub data_ns: f64,
    /// See `data_ns`.
    pub control_ns: f64,
    /// See `data_ns`.
    pub own_ns: f64,
    /// See `data_ns`.
    pub idle_ns: f64,
    /// See `data_ns`.
    pub between_ns: f64,
    /// Data send calls.
    pub data_calls: f64,
    /// Every control call (sends and polls, idle polls included): what the timing's clock reads wrap.
    pub control_calls: f64,
    /// Duty cycles (each reads the clock once more for its end).
    pub cycles: f64,
    /// Data datagrams, each follower's copy counted.
    pub datagrams: f64,
    /// Messages appended to the log.
    pub appended: f64,
    /// Messages committed: `mu_measured x seconds`.
    pub committed: f64,
}

impl SenderWindow {
    /// The window read from the changes of the leader's counters over `seconds`: the Sender's (its time
    /// split on) and the consensus stage's; `cycles` is the Sender's duty cycles and `committed` the
    /// messages committed in the window, as the harness counts them.
    pub fn from_counters(
        seconds: f64,
        sender: SenderStats<'_>,
        consensus: ConsensusStats<'_>,
        cycles: f64,
        committed: f64,
    ) -> Self {
        Self {
            seconds,
            data_ns: sender.data_call_ns() as f64,
            control_ns: sender.control_call_ns() as f64,
            own_ns: sender.own_code_ns() as f64,
            idle_ns: sender.idle_ns() as f64,
            between_ns: sender.between_cycles_ns() as f64,
            data_calls: sender.data_syscalls() as f64,
            control_calls: sender.control_syscalls() as f64,
            cycles,
            datagrams: sender.data_datagrams() as f64,
            appended: consensus.messages_appended() as f64,
            committed,
        }
    }

    /// The busy nanoseconds: data calls, control calls and own code.
    pub fn busy_ns(&self) -> f64 {
        self.data_ns + self.control_ns + self.own_ns
    }

    /// The five classes' sum.
    pub fn accounted_ns(&self) -> f64 {
        self.busy_ns() + self.idle_ns + self.between_ns
    }
}

/// The seed model's inputs: `S` (datagrams per second, the probe's), `C` (control calls per second that
/// took from the data budget), `D` and `M_pkt`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedInputs {
    /// S, per second.
    pub s: f64,
    /// C, per second.
    pub c: f64,
    /// D, followers.
    pub d: u32,
    /// M_pkt, messages per datagram.
    pub m_pkt: f64,
}

impl SeedInputs {
    /// `(S - C) / D x M_pkt` (0 when `C >= S` or an input is not positive).
    pub fn mu(&self) -> f64 {
        if self.s > self.c && self.d > 0 && self.m_pkt > 0.0 {
            (self.s - self.c) / f64::from(self.d) * self.m_pkt
        } else {
            0.0
        }
    }
}

/// The seed model's error taken apart: each factor of `mu_seed / mu_measured` less 1 (see the module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeedTerms {
    /// `t_d x S - 1`: a data call under load against the probe's cost (positive: dearer under load).
    pub data_calls: f64,
    /// `(control / busy - C / S) / g`: control calls' measured share of busy time against the seed's.
    pub control_calls: f64,
    /// `(own / busy) / g`: the Sender's own code, which the seed model leaves out.
    pub own_code: f64,
    /// `M_pkt / m - 1`: the datagrams' fill against the model's.
    pub fill: f64,
    /// `mu_budget / mu_measured - 1`: the time the Sender did not work (idle, between cycles).
    pub idle: f64,
}

impl SeedTerms {
    /// The terms with their names, in the report's order.
    pub fn named(&self) -> [(&'static str, f64); 5] {
        [
            ("data calls", self.data_calls),
            ("control calls", self.control_calls),
            ("own code", self.own_code),
            ("fill", self.fill),
            ("idle", self.idle),
        ]
    }

    /// The product of the factors less 1: the seed's whole error.
    pub fn total(&self) -> f64 {
        (1.0 + self.data_calls) * (1.0 + self.control_calls + self.own_code) * (1.0 + self.fill) * (1.0 + self.idle)
            - 1.0
    }

    /// The term with the largest effect (by the size of its factor's logarithm).
    pub fn main(&self) -> &'static str {
        let size = |x: f64| (1.0 + x).max(f64::MIN_POSITIVE).ln().abs();
        self.named().into_iter().max_by(|a, b| size(a.1).total_cmp(&size(b.1))).map_or("none", |(name, _)| name)
    }
}

/// What the timing itself cost: clock reads per second on the Sender's thread times one read's cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingOverhead {
    /// Nanoseconds one clock read took on this host (the fastest of several runs of many reads).
    pub clock_read_ns: f64,
    /// Clock reads the split made per second: two per call, one per duty cycle.
    pub reads_per_s: f64,
    /// `reads_per_s x clock_read_ns / 1e9`: the share of the Sender's time the timing took.
    pub share: f64,
}

/// The leader Sender's measured budget for one saturating run, and the seed model beside it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderBudget {
    /// Shares of the window's wall time (0 to 1) in data calls, control calls, own code, idle and between
    /// cycles.
    pub data_share: f64,
    /// See `data_share`.
    pub control_share: f64,
    /// See `data_share`.
    pub own_share: f64,
    /// See `data_share`.
    pub idle_share: f64,
    /// See `data_share`.
    pub between_share: f64,
    /// The five classes' sum over the window's wall time (1 when they account for all of it).
    pub accounted: f64,
    /// Nanoseconds per datagram (each follower's copy counted) in data calls, control calls and own code.
    pub data_ns_per_datagram: f64,
    /// See `data_ns_per_datagram`.
    pub control_ns_per_datagram: f64,
    /// See `data_ns_per_datagram`.
    pub own_ns_per_datagram: f64,
    /// Nanoseconds per data call (per datagram in classic mode; a call moves several in mmsg and gso).
    pub data_ns_per_call: f64,
    /// The probe's nanoseconds per datagram, `1e9 / S`: what the seed model takes a data call to cost.
    pub probe_ns_per_datagram: f64,
    /// Messages per datagram the Sender achieved (`m`).
    pub messages_per_datagram: f64,
    /// The budget's capacity, `1e9 / (t_d + t_c + t_o) / D x m`, messages per second.
    pub mu_budget: f64,
    /// `mu_budget / mu_measured - 1`.
    pub budget_error: f64,
    /// `|budget_error| <= 5%`.
    pub within_tolerance: bool,
    /// The seed model's `(S - C) / D x M_pkt` with the same S and C as the configuration's prediction.
    pub mu_seed: f64,
    /// `mu_seed / mu_measured - 1` (0 without a seed model).
    pub seed_error: f64,
    /// The seed's error, factor by factor (without a seed model, only `idle`).
    pub seed_terms: SeedTerms,
    /// The term of `seed_terms` with the largest effect, or `no seed model` (no S was probed for the row).
    pub seed_main_term: String,
    /// What the timing cost.
    pub overhead: TimingOverhead,
}

impl SenderBudget {
    /// The budget of `window`, beside the seed model of `seed`, with the timing's cost from
    /// `clock_read_ns`; `None` when the window has no time split (the split was off) or sent nothing.
    pub fn of(window: &SenderWindow, seed: &SeedInputs, clock_read_ns: f64) -> Option<Self> {
        let w = window;
        let (busy, wall) = (w.busy_ns(), w.seconds * 1e9);
        if w.datagrams <= 0.0 || w.data_ns <= 0.0 || busy <= 0.0 || wall <= 0.0 || w.committed <= 0.0 {
            return None;
        }
        let d = f64::from(seed.d.max(1));
        let per = |ns: f64| ns / w.datagrams;
        let m = d * w.appended / w.datagrams;
        let mu_budget = 1e9 / per(busy) / d * m;
        let mu_measured = w.committed / w.seconds;
        let mu_seed = seed.mu();
        let g = w.data_ns / busy;
        let seed_terms = if mu_seed <= 0.0 {
            SeedTerms { idle: mu_budget / mu_measured - 1.0, ..SeedTerms::default() }
        } else {
            SeedTerms {
                data_calls: per(w.data_ns) * seed.s / 1e9 - 1.0,
                control_calls: if seed.s > 0.0 { (w.control_ns / busy - seed.c / seed.s) / g } else { 0.0 },
                own_code: w.own_ns / busy / g,
                fill: if m > 0.0 { seed.m_pkt / m - 1.0 } else { 0.0 },
                idle: mu_budget / mu_measured - 1.0,
            }
        };
        let reads_per_s = (2.0 * (w.data_calls + w.control_calls) + w.cycles) / w.seconds;
        let budget_error = mu_budget / mu_measured - 1.0;
        Some(Self {
            data_share: w.data_ns / wall,
            control_share: w.control_ns / wall,
            own_share: w.own_ns / wall,
            idle_share: w.idle_ns / wall,
            between_share: w.between_ns / wall,
            accounted: w.accounted_ns() / wall,
            data_ns_per_datagram: per(w.data_ns),
            control_ns_per_datagram: per(w.control_ns),
            own_ns_per_datagram: per(w.own_ns),
            data_ns_per_call: if w.data_calls > 0.0 { w.data_ns / w.data_calls } else { 0.0 },
            probe_ns_per_datagram: if seed.s > 0.0 { 1e9 / seed.s } else { 0.0 },
            messages_per_datagram: m,
            mu_budget,
            budget_error,
            within_tolerance: budget_error.abs() <= BUDGET_TOLERANCE,
            mu_seed,
            seed_error: if mu_seed > 0.0 { mu_seed / mu_measured - 1.0 } else { 0.0 },
            seed_main_term: if mu_seed > 0.0 { seed_terms.main().to_string() } else { "no seed model".to_string() },
            seed_terms,
            overhead: TimingOverhead { clock_read_ns, reads_per_s, share: reads_per_s * clock_read_ns / 1e9 },
        })
    }

    /// The seed's error by term, e.g. `data calls +31%, control calls +2%, own code +9%, fill +0%, idle
    /// +1%`.
    pub fn terms_text(&self) -> String {
        self.seed_terms
            .named()
            .iter()
            .map(|(name, x)| format!("{name} {:+.0}%", 100.0 * x))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line: the split, the budget against mu, the seed and its terms.
    pub fn describe(&self, mu_measured: f64) -> String {
        let (probe, seed) = if self.mu_seed > 0.0 {
            (
                format!("the probe's 1/S {:.0} ns", self.probe_ns_per_datagram),
                format!(
                    "seed model {:.0} ({:+.1}%: {}; mainly {})",
                    self.mu_seed,
                    100.0 * self.seed_error,
                    self.terms_text(),
                    self.seed_main_term
                ),
            )
        } else {
            ("no S probed".to_string(), "no seed model (no S probed for this row)".to_string())
        };
        format!(
            "sender time: data calls {:.1}%, control calls {:.1}%, own code {:.1}%, idle {:.1}%, between cycles {:.1}% \
             ({:.1}% accounted); per datagram {:.0} ns data ({:.0} ns per call; {probe}) + {:.0} ns \
             control + {:.0} ns own code, {:.2} msgs/datagram: budget mu {:.0} msg/s against measured {:.0} ({:+.1}%, {}); \
             {seed}; timing {:.1}M clock reads/s x {:.1} ns = {:.2}% of the thread",            100.0 * self.data_share,
            100.0 * self.control_share,
            100.0 * self.own_share,
            100.0 * self.idle_share,
            100.0 * self.between_share,
            100.0 * self.accounted,
            self.data_ns_per_datagram,
            self.data_ns_per_call,
            self.control_ns_per_datagram,
            self.own_ns_per_datagram,
            self.messages_per_datagram,
            self.mu_budget,
            mu_measured,
            100.0 * self.budget_error,
            if self.within_tolerance { "within 5%" } else { "OUTSIDE 5%" },
            self.overhead.reads_per_s / 1e6,
            self.overhead.clock_read_ns,
            100.0 * self.overhead.share
        )
    }
}

/// Nanoseconds one read of the clock the split uses ([`NanoClock::now_ns`]) takes on this thread: the
/// fastest of 5 runs of 100,000 reads (a shared host only ever makes a run slower).
pub fn clock_read_ns() -> f64 {
    let clock = NanoClock::new();
    const READS: u32 = 100_000;
    (0..5)
        .map(|_| {
            let started = Instant::now();
            let mut sink = 0u64;
            for _ in 0..READS {
                sink = sink.wrapping_add(std::hint::black_box(clock.now_ns()));
            }
            std::hint::black_box(sink);
            started.elapsed().as_nanos() as f64 / f64::from(READS)
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One second of a classic Sender at MTU 1408, 128 B messages (8 to a datagram), D = 2: 200k datagrams
    /// (100k each follower) in 200k data calls of 3 us, 20k control calls taking 40 ms, 100 ms of own code,
    /// 30 ms idle and 30 ms between cycles; 800k messages appended, 792k committed.
    fn window() -> SenderWindow {
        SenderWindow {
            seconds: 1.0,
            data_ns: 0.6e9,
            control_ns: 0.04e9,
            own_ns: 0.1e9,
            idle_ns: 0.03e9,
            between_ns: 0.03e9,
            data_calls: 200_000.0,
            control_calls: 30_000.0,
            cycles: 20_000.0,
            datagrams: 200_000.0,
            appended: 800_000.0,
            committed: 792_000.0,
        }
    }

    fn seed() -> SeedInputs {
        SeedInputs { s: 400_000.0, c: 20_000.0, d: 2, m_pkt: 8.0 }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_budget_is_the_datagrams_the_busy_time_pays_for() {
        let b = SenderBudget::of(&window(), &seed(), 25.0).unwrap();
        assert!(close(b.data_ns_per_datagram, 3_000.0) && close(b.control_ns_per_datagram, 200.0));
        assert!(close(b.own_ns_per_datagram, 500.0) && close(b.data_ns_per_call, 3_000.0));
        assert!(close(b.messages_per_datagram, 8.0));
        // 1e9 / 3700 ns per datagram / 2 followers x 8 messages = 1.081M msg/s = 800k appended / 0.74 s busy.
        assert!(close(b.mu_budget, 1e9 / 3_700.0 / 2.0 * 8.0), "{}", b.mu_budget);
        assert!(close(b.mu_budget, 800_000.0 / 0.74));
        assert!(close(b.accounted, 0.8) && close(b.data_share, 0.6) && close(b.idle_share, 0.03));
        assert!(close(b.budget_error, b.mu_budget / 792_000.0 - 1.0));
        assert!(!b.within_tolerance, "a Sender busy 74% of the time is no bottleneck: the budget is 36% above mu");
        assert!(close(b.overhead.reads_per_s, 2.0 * 230_000.0 + 20_000.0));
        assert!(close(b.overhead.share, 480_000.0 * 25.0 / 1e9));
    }

    #[test]
    fn a_busy_sender_s_budget_is_within_tolerance_of_mu() {
        let w = SenderWindow { idle_ns: 0.0, between_ns: 0.0, own_ns: 0.36e9, committed: 800_000.0, ..window() };
        let b = SenderBudget::of(&w, &seed(), 25.0).unwrap();
        assert!(close(b.mu_budget, 800_000.0) && b.budget_error.abs() < 1e-12 && b.within_tolerance);
        let just_outside = SenderWindow { committed: 800_000.0 / 1.051, ..w };
        assert!(!SenderBudget::of(&just_outside, &seed(), 25.0).unwrap().within_tolerance);
    }

    #[test]
    fn the_seed_s_error_is_the_product_of_its_terms() {
        let b = SenderBudget::of(&window(), &seed(), 25.0).unwrap();
        let t = b.seed_terms;
        // Seed: (400k - 20k) / 2 x 8 = 1.52M.
        assert!(close(b.mu_seed, 1_520_000.0));
        assert!(close(t.data_calls, 3_000.0 * 400_000.0 / 1e9 - 1.0), "a call costs 3 us against the probe's 2.5 us");
        let g = 0.6 / 0.74;
        assert!(close(t.control_calls, (0.04 / 0.74 - 0.05) / g));
        assert!(close(t.own_code, (0.1 / 0.74) / g));
        assert!(close(t.fill, 0.0));
        assert!(close(t.total(), b.seed_error), "{} against {}", t.total(), b.seed_error);
        assert_eq!(t.main(), "idle");
        let busier = SenderWindow { idle_ns: 0.0, between_ns: 0.0, committed: 800_000.0 / 0.74 * 0.99, ..window() };
        assert_eq!(SenderBudget::of(&busier, &seed(), 25.0).unwrap().seed_main_term, "data calls");
    }

    #[test]
    fn no_split_or_no_data_gives_no_budget() {
        assert!(SenderBudget::of(&SenderWindow { data_ns: 0.0, ..window() }, &seed(), 25.0).is_none());
        assert!(SenderBudget::of(&SenderWindow { datagrams: 0.0, ..window() }, &seed(), 25.0).is_none());
        let no_seed = SeedInputs { s: 0.0, ..seed() };
        let b = SenderBudget::of(&window(), &no_seed, 25.0).unwrap();
        assert_eq!((b.mu_seed, b.seed_error, b.probe_ns_per_datagram), (0.0, 0.0, 0.0));
        assert_eq!(
            (b.seed_terms.data_calls, b.seed_terms.fill, b.seed_main_term.as_str()),
            (0.0, 0.0, "no seed model")
        );
    }

    #[test]
    fn the_line_names_the_split_the_check_and_the_seed_s_main_term() {
        let line = SenderBudget::of(&window(), &seed(), 25.0).unwrap().describe(792_000.0);
        assert!(
            line.contains("data calls 60.0%") && line.contains("OUTSIDE 5%") && line.contains("mainly idle"),
            "{line}"
        );
        let no_seed = SenderBudget::of(&window(), &SeedInputs { s: 0.0, ..seed() }, 25.0).unwrap();
        assert!(no_seed.describe(792_000.0).contains("no seed model (no S probed for this row)"));
    }

    #[test]
    fn a_clock_read_costs_something_finite() {
        let ns = clock_read_ns();
        assert!(ns.is_finite() && ns >= 0.0, "{ns}");
    }
}
