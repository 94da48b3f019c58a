//! The nemesis run's report, as `bench/nemesis.md` keeps it: the command that replays it,
//! the faults struck, the traffic the promises were checked against, and every violation
//! with its seed and schedule.

use std::fmt::Write;

use super::faults::CATALOGUE;
use super::{Outcome, Settings};

pub fn markdown(settings: &Settings, outcome: &Outcome, command_line: &str, machine: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Nemesis run\n");
    let _ = writeln!(out, "```sh\n{command_line}\n```\n");
    let _ = writeln!(out, "{machine}\n");
    let _ = writeln!(
        out,
        "Seed {}, topology `{}`, {:.1} minutes, a window of {} s per schedule.\n",
        settings.seed,
        settings.topology.as_str(),
        outcome.elapsed.as_secs_f64() / 60.0,
        settings.window.as_secs()
    );
    let _ = writeln!(out, "| | |\n|---|---:|");
    let rows = [
        ("schedules run", outcome.schedules.to_string()),
        ("faults struck", outcome.struck.values().sum::<u64>().to_string()),
        ("events published and acknowledged", outcome.events.to_string()),
        ("of which redelivered", outcome.redelivered.to_string()),
        ("pairs of versions sent newest first", outcome.out_of_order.to_string()),
        ("records", outcome.records.to_string()),
        ("client syncs to the feed's head", outcome.syncs.to_string()),
        ("client start-overs (after a fault that forks the history)", outcome.start_overs.to_string()),
        ("of which with no such fault underway since the token was handed out", outcome.late_start_overs.to_string()),
        ("client answers 503 or 429 (during faults)", outcome.unavailable.to_string()),
        ("webhook deliveries received (each followed by a pull)", outcome.deliveries.to_string()),
        (
            "records with an event the projector counted lost (aged out of the stream before it was applied again)",
            outcome.lost_records.to_string(),
        ),
        ("**violations**", format!("**{}**", outcome.violations.len())),
    ];
    for (what, value) in rows {
        let _ = writeln!(out, "| {what} | {value} |");
    }
    let _ = writeln!(out, "\n| fault | struck |\n|---|---:|");
    for fault in CATALOGUE.iter().filter(|fault| fault.drawn_on(settings.topology)) {
        let _ = writeln!(out, "| `{}` | {} |", fault.name, outcome.struck.get(&fault.kind).copied().unwrap_or(0));
    }
    if !outcome.violations.is_empty() {
        let _ = writeln!(out, "\n## Violations\n");
        for violation in &outcome.violations {
            let _ = writeln!(out, "- seed {}, {}: {}", settings.seed, violation.schedule, violation.finding);
        }
    }
    out
}
