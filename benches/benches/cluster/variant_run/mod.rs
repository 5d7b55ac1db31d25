//! One variant in the invoker layout (thread 0 drives the leader and offers, thread 1 drives the
//! followers: the harness's `Layout::split`): its saturation run, its serial and pipelined latency, and
//! for the five-member rows the model beside the committed rate, with S probed for their D.

mod saturation;

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quorumcast_bench::budget::{SeedInputs, SenderBudget};
use quorumcast_bench::model::Model;
use quorumcast_bench::sweep::bottleneck::{classify_split, Bottleneck, SplitEvidence, Stage};
use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_bench::sweep::SweepError;

pub use saturation::Saturation;

use crate::{histogram, offer, rate, remove_data, spec, us, Settings, Variant, MESSAGE, PIPELINE_WINDOW};
use saturation::saturate;

/// One message at a time: offer, then drive the leader until it applies that message.
fn serial(cluster: &mut LoadCluster, samples: usize, time: Duration) -> Histogram<u64> {
    let mut histogram = histogram();
    let end = Instant::now() + time;
    for _ in 0..samples {
        if Instant::now() > end {
            break;
        }
        let start = Instant::now();
        while !offer(cluster) {
            cluster.cycle(|_| {});
        }
        let target = cluster.offered();
        while cluster.committed() < target {
            cluster.cycle(|_| {});
        }
        let _ = histogram.record(start.elapsed().as_nanos() as u64);
    }
    histogram
}

/// Up to `PIPELINE_WINDOW` messages in flight; records each message's offer-to-apply latency.
fn pipeline(cluster: &mut LoadCluster, time: Duration) -> (Histogram<u64>, f64) {
    let mut histogram = histogram();
    let mut offered_at = [Instant::now(); PIPELINE_WINDOW];
    let first = cluster.committed();
    let start = Instant::now();
    let end = start + time;
    while Instant::now() < end {
        while cluster.offered() - cluster.committed() < PIPELINE_WINDOW as u64 {
            let seq = cluster.offered();
            let now = Instant::now();
            if !offer(cluster) {
                break;
            }
            offered_at[seq as usize % PIPELINE_WINDOW] = now;
        }
        let (h, at) = (&mut histogram, &offered_at);
        cluster.cycle(|seq| {
            let _ = h.record(at[seq as usize % PIPELINE_WINDOW].elapsed().as_nanos() as u64);
        });
    }
    let rate = (cluster.committed() - first) as f64 / start.elapsed().as_secs_f64();
    (histogram, rate)
}

/// Everything measured for one variant in the invoker layout.
#[derive(Clone, Debug)]
pub struct VariantResult {
    pub variant: Variant,
    pub saturation: Saturation,
    pub serial: (f64, f64, u64),
    /// The leader's recorder's `fdatasync` calls per serial message.
    pub serial_fsyncs_per_msg: f64,
    pub pipeline: (f64, f64, f64),
    pub warnings: Vec<String>,
    pub out_of_order: u64,
    /// Five-member rows: the model beside the measured rate, and the stage that saturated first.
    pub model: Option<ModelCheck>,
}

impl VariantResult {
    /// The leader Sender's budget over the saturation windows (none with `--no-split`), beside the model
    /// where the row has one (the five-member rows probe S; the others have no seed figure), and whether
    /// it is held to mu: only where the Sender saturated first.
    pub fn budget(&self, clock_read_ns: f64) -> Option<(SenderBudget, bool)> {
        let d = self.variant.followers() as u32;
        let seed =
            self.model.as_ref().map_or(SeedInputs { s: 0.0, c: self.saturation.model_c_per_s, d, m_pkt: 0.0 }, |m| {
                SeedInputs { s: m.s, c: m.c, d, m_pkt: m.m_pkt }
            });
        let compared = self.model.as_ref().is_some_and(ModelCheck::comparable);
        SenderBudget::of(&self.saturation.sender, &seed, clock_read_ns).map(|b| (b, compared))
    }
}

/// The model's `(S - C) / D x M_pkt` for a row, with S probed in the same run for its D, and the stage
/// that saturated first: the model's figure is the one to compare with only when it was the Sender.
#[derive(Clone, Debug)]
pub struct ModelCheck {
    /// S: datagrams per second one thread puts out to D loopback destinations at the row's mode and MTU.
    pub s: f64,
    /// C: the leader Sender's control syscalls per second at saturation, less its idle polls.
    pub c: f64,
    /// D: followers.
    pub d: usize,
    /// M_pkt: messages per datagram at the row's MTU.
    pub m_pkt: f64,
    /// The model's mu, messages per second (0 when it cannot predict: `error` says why).
    pub mu: f64,
    pub error: Option<String>,
    pub bottleneck: Bottleneck,
}

impl ModelCheck {
    /// Whether the measured rate is to be set against the model: the Sender saturated first.
    pub fn comparable(&self) -> bool {
        self.bottleneck.stage == Stage::Sender && self.mu > 0.0
    }

    /// `committed 1.23M/s = 0.95x the model's 1.29M/s (S ..., C ..., D 4, M_pkt 8)`, or why it is not
    /// compared.
    pub fn describe(&self, committed: f64) -> String {
        let inputs = format!(
            "S {}/s for D = {}, C {}/s, M_pkt {:.0}: (S - C) / {} x M_pkt = {}/s",
            rate(self.s),
            self.d,
            rate(self.c),
            self.m_pkt,
            self.d,
            rate(self.mu)
        );
        match (&self.error, self.comparable()) {
            (Some(e), _) => format!("the model cannot predict: {e}"),
            (None, true) => {
                format!("committed {}/s = {:.2}x the model's ({inputs})", rate(committed), committed / self.mu)
            }
            (None, false) => format!(
                "not compared with the model ({inputs}): the Sender was not the stage that saturated; {}",
                self.bottleneck.text
            ),
        }
    }
}

/// How long the S probe of a five-member row runs: `windows` windows of `window`.
fn s_probe_timing(settings: &Settings) -> (Duration, usize) {
    if settings.quick {
        (Duration::from_millis(200), 3)
    } else {
        (Duration::from_millis(500), 5)
    }
}

/// S for `variant`'s D, mode and MTU, probed before its cluster starts (nothing else of the bench runs).
fn probe_s_for(variant: &Variant, settings: &Settings) -> Result<f64, String> {
    let (window, windows) = s_probe_timing(settings);
    let cores = Layout::split(settings.pin).probe_cores();
    quorumcast_bench::probe::probe_s(variant.mode, variant.mtu, variant.followers(), window, windows, cores)
        .map(|r| r.datagrams_per_s)
        .map_err(|e| format!("the S probe for D = {}: {e}", variant.followers()))
}

/// The model and the stage that saturated for a row measured with `saturation`, given its probed `s`.
fn model_check(variant: &Variant, saturation: &Saturation, s: f64) -> ModelCheck {
    let evidence = SplitEvidence {
        sender_share: if s > 0.0 { saturation.datagrams_per_s / s } else { 0.0 },
        ..saturation.evidence
    };
    let c = saturation.model_c_per_s.max(0.0);
    let analysis = Model::new(s, c, variant.followers() as u32).and_then(|m| m.analyze(variant.mtu, MESSAGE));
    let (m_pkt, mu, error) = match analysis {
        Ok(capacity) => (capacity.packing.per_datagram(), capacity.mu, None),
        Err(e) => (0.0, 0.0, Some(e.to_string())),
    };
    ModelCheck { s, c, d: variant.followers(), m_pkt, mu, error, bottleneck: classify_split(&evidence) }
}

pub fn run_variant(variant: Variant, settings: &Settings, index: usize) -> Result<VariantResult, String> {
    let run = format!("v{index}");
    remove_data(&run);
    let s = if variant.is_five() { Some(probe_s_for(&variant, settings)?) } else { None };
    let result = on_harness_thread(|| measure_variant(&run, variant, settings).map_err(SweepError::Cluster))
        .map_err(|e| e.to_string());
    remove_data(&run);
    let mut result = result?;
    result.model = s.map(|s| model_check(&variant, &result.saturation, s));
    Ok(result)
}

fn measure_variant(run: &str, variant: Variant, settings: &Settings) -> Result<VariantResult, String> {
    let layout = Layout::split(settings.pin);
    let spec = ClusterSpec { time_split: settings.split, ..spec(run, &variant, layout) };
    let mut cluster = LoadCluster::start(&spec).map_err(|e| e.to_string())?;
    let warnings = cluster.warnings().to_vec();
    let saturation = saturate(&mut cluster, settings);
    cluster.drain(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let before = cluster.stats();
    let serial_histogram = serial(&mut cluster, settings.serial_samples, settings.serial_time);
    let after = cluster.stats();
    let serial_fsyncs_per_msg =
        after[0].since(&before[0]).recorder().fsyncs() as f64 / serial_histogram.len().max(1) as f64;
    if std::env::var_os("QC_BENCH_DEBUG").is_some() {
        println!("serial samples {}", serial_histogram.len());
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            for counter in a.since(b).iter().filter(|c| c.value != 0) {
                println!("  node {i} {}: {}", counter.label, counter.value);
            }
        }
    }
    let (pipeline_histogram, pipeline_rate) = pipeline(&mut cluster, settings.pipeline_time);
    cluster.drain(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let out_of_order = cluster.out_of_order();
    cluster.close().map_err(|e| e.to_string())?;
    Ok(VariantResult {
        variant,
        saturation,
        serial: (us(&serial_histogram, 0.5), us(&serial_histogram, 0.99), serial_histogram.len()),
        serial_fsyncs_per_msg,
        pipeline: (us(&pipeline_histogram, 0.5), us(&pipeline_histogram, 0.99), pipeline_rate),
        warnings,
        out_of_order,
        model: None,
    })
}
