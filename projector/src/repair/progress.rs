//! How far a long command has read: a progress bar on a terminal, a log line every few
//! seconds otherwise (a job's log, a container's).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often a log line reports progress when there is no terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Events read of a known total.
pub struct Progress {
    what: &'static str,
    total: u64,
    done: u64,
    started: Instant,
    shown: Shown,
}

enum Shown {
    Bar(ProgressBar),
    Log { last: Instant },
}

impl Progress {
    /// `what` names the work ("verify", "rebuild") in the log lines.
    pub fn new(what: &'static str, total: u64) -> Self {
        let shown = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:40}] {human_pos}/{human_len} events, {per_sec}, {eta} left",
            )
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(what);
            Shown::Bar(bar)
        } else {
            Shown::Log { last: Instant::now() }
        };
        Self { what, total, done: 0, started: Instant::now(), shown }
    }

    /// `events` more were read.
    pub fn advance(&mut self, events: u64) {
        self.done += events;
        match &mut self.shown {
            Shown::Bar(bar) => bar.inc(events),
            Shown::Log { last } if last.elapsed() >= LOG_EVERY => {
                *last = Instant::now();
                let rate = self.rate();
                let left = self.total.saturating_sub(self.done);
                let seconds_left = if rate > 0.0 { (left as f64 / rate).round() } else { f64::NAN };
                tracing::info!(
                    read = self.done,
                    total = self.total,
                    events_per_second = rate.round(),
                    seconds_left,
                    "{} reading the stream",
                    self.what
                );
            }
            Shown::Log { .. } => {}
        }
    }

    /// Events read per second so far.
    pub fn rate(&self) -> f64 {
        self.done as f64 / self.started.elapsed().as_secs_f64().max(f64::EPSILON)
    }

    /// Events read so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Clears the bar; what follows is the command's own output.
    pub fn finish(&self) {
        if let Shown::Bar(bar) = &self.shown {
            bar.finish_and_clear();
        }
    }
}
