//! The sweep's console: the progress bar over the points, the lines printed above it, each warning once,
//! and the detail printed only under `--verbose`; and how a rate is written in those lines.

use std::collections::HashSet;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

/// The sweep's console: a progress bar over the sweep's points (on a terminal; indicatif hides it
/// elsewhere) whose message names the probe or configuration running, and the lines printed above it, or
/// plainly when it is hidden. The bar is redrawn when it moves or its message changes, never by a
/// ticker thread of its own, which would wake on the cores being measured.
///
/// Without `verbose` only what a person needs is printed: warnings (each text once), failures, and the
/// closing table; the probes' and points' detail ([`detail`](Self::detail)) goes to the report alone.
pub(super) struct Progress {
    pub(super) bar: ProgressBar,
    verbose: bool,
    /// The warnings printed so far (without `verbose`, a repeated one is not printed again).
    warned: Mutex<HashSet<String>>,
    /// The configuration running, `[3/12] MTU 1408 128 B backoff classic/separate`, for the bar's message.
    at: Mutex<String>,
}

impl Progress {
    pub(super) fn new(enabled: bool, verbose: bool, points: usize) -> Self {
        // A sweep that fails part way leaves no bar behind its error.
        let bar = if enabled {
            ProgressBar::new(points as u64).with_finish(ProgressFinish::AndClear)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(Self::style(false));
        Self { bar, verbose, warned: Mutex::new(HashSet::new()), at: Mutex::new(String::new()) }
    }

    /// The bar's look; `eta` once a point has finished (before, the time left is not known).
    fn style(eta: bool) -> ProgressStyle {
        // `wide_msg` is cut to the terminal's width: a line that wrapped would not be cleared on redraw.
        let template = if eta {
            "{elapsed_precise} [{bar:20}] {pos}/{len} points, ~{eta} left  {wide_msg}"
        } else {
            "{elapsed_precise} [{bar:20}] {pos}/{len} points  {wide_msg}"
        };
        ProgressStyle::with_template(template)
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
    }

    /// Prints `text` (above the bar while it is drawn).
    pub(super) fn line(&self, text: &str) {
        if self.bar.is_hidden() || self.bar.is_finished() {
            println!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    /// Prints `text` under `--verbose` only: the probes' and points' measurements, which the report holds.
    pub(super) fn detail(&self, text: &str) {
        if self.verbose {
            self.line(text);
        }
    }

    /// Prints `warning: {text}`: under `--verbose` every time, indented by `indent` beside the detail it
    /// belongs to; otherwise once per distinct text, on one line.
    pub(super) fn warn(&self, indent: &str, text: &str) {
        if self.verbose {
            self.line(&format!("{indent}warning: {text}"));
        } else if self.warned.lock().unwrap_or_else(|e| e.into_inner()).insert(text.to_string()) {
            self.line(&format!("warning: {text}"));
        }
    }

    /// Whether the console shows neither the bar nor the detail (output not a terminal, no `--verbose`):
    /// then one plain line per configuration says how far the sweep is.
    pub(super) fn plain(&self) -> bool {
        !self.verbose && self.bar.is_hidden()
    }

    /// Names the configuration now running, for the bar's messages ([`phase`](Self::phase)).
    pub(super) fn set_config(&self, label: String) {
        *self.at.lock().unwrap_or_else(|e| e.into_inner()) = label;
    }

    /// Shows `{configuration}: {what}` on the bar.
    pub(super) fn phase(&self, what: &str) {
        let at = self.at.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.bar.set_message(if at.is_empty() { what.to_string() } else { format!("{at}: {what}") });
    }

    /// Moves the bar to `done` points (a failed configuration's points count as done); the time left is
    /// estimated from the points' pace alone, not the host probes before them.
    pub(super) fn points_done(&self, done: usize) {
        if self.bar.position() == 0 && done > 0 {
            self.bar.set_style(Self::style(true));
            self.bar.reset_eta();
        }
        self.bar.set_position(done as u64);
    }
}

pub(super) fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}
