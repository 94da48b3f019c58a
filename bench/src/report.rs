//! The markdown the benchmark writes and prints: a header naming the machine and the
//! data, one table, the targets checked, and notes on method.

use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Debug, Default)]
pub struct Row {
    pub scenario: String,
    pub lectern: String,
    pub baseline: String,
    pub ratio: Option<f64>,
    pub p50: String,
    pub p99: String,
    pub rss: String,
}

impl Row {
    /// A row with nothing in any column: "–" where a figure does not apply.
    pub fn dashes() -> Self {
        let none = || "–".to_owned();
        Self { scenario: none(), lectern: none(), baseline: none(), ratio: None, p50: none(), p99: none(), rss: none() }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub title: &'static str,
    /// Whose targets the list of targets checks.
    pub targets_heading: &'static str,
    pub header: Vec<String>,
    pub rows: Vec<Row>,
    /// Per API scenario: name, wrk's mean, the API's own mean, API CPU and PostgreSQL CPU per request.
    pub breakdown: Vec<[String; 5]>,
    /// (target, met, what was measured)
    pub targets: Vec<(String, bool, String)>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(title: &'static str, targets_heading: &'static str) -> Self {
        Self { title, targets_heading, ..Self::default() }
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("# {}\n\n", self.title);
        for line in &self.header {
            let _ = writeln!(out, "{line}  ");
        }
        out.push_str(
            "\n| scenario | Lectern | baseline | ratio | p50 | p99 | RSS |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for row in &self.rows {
            let ratio = row.ratio.map_or_else(|| "–".to_owned(), |ratio| format!("{ratio:.2}"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {ratio} | {} | {} | {} |",
                row.scenario, row.lectern, row.baseline, row.p50, row.p99, row.rss
            );
        }
        if !self.breakdown.is_empty() {
            out.push_str(
                "\nWhere the API's time goes:\n\n| scenario | mean seen by wrk | mean inside the API | API CPU / request | PostgreSQL CPU / request |\n|---|---:|---:|---:|---:|\n",
            );
            for [scenario, wrk, inside, api, db] in &self.breakdown {
                let _ = writeln!(out, "| {scenario} | {wrk} | {inside} | {api} | {db} |");
            }
        }
        if !self.targets.is_empty() {
            let _ = write!(out, "\n{}:\n\n", self.targets_heading);
            for (target, met, measured) in &self.targets {
                let _ = writeln!(out, "- {} {target}: {measured}", if *met { "met:" } else { "**missed:**" });
            }
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }
}

/// 12345.6 → "12,346".
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (position, digit) in digits.chars().enumerate() {
        if position > 0 && (digits.len() - position) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// 1.234 ms, 12.3 ms, 123 ms.
pub fn millis(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}
