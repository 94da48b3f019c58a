//! Fault schedules drawn from a seed: the same seed and topology give the same schedules
//! on every machine and build (`lectern_fixtures::prng`), so a violation's seed replays
//! the schedule that found it.
//!
//! A schedule is a short sequence of faults (one alone, or two or three overlapping or in
//! a row) at moments within its window, while the publishers and clients run; after the
//! window the stack settles and the checker runs.

use std::fmt;
use std::time::Duration;

use lectern_fixtures::prng::Prng;

use super::faults::{Fault, FaultKind, Topology, CATALOGUE};

/// Faults in one schedule at most.
pub const MOST_FAULTS: usize = 3;

/// One fault at its moment, measured from the schedule's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub fault: FaultKind,
}

/// The faults of one schedule, in the order they strike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Its place in the run: with the run's seed, it names the schedule for a replay.
    pub index: u64,
    pub steps: Vec<Step>,
}

/// Draws the run's schedules.
pub struct Schedules {
    seed: u64,
    topology: Topology,
    window: Duration,
    next: u64,
}

impl Schedules {
    /// The schedules of the run `seed` on `topology`, each striking within `window`.
    pub fn new(seed: u64, topology: Topology, window: Duration) -> Self {
        Self { seed, topology, window, next: 0 }
    }
}

impl Iterator for Schedules {
    type Item = Schedule;

    fn next(&mut self) -> Option<Schedule> {
        let index = self.next;
        self.next += 1;
        // A generator of the schedule's own: schedule N is the same whatever ran before it.
        let mut prng = Prng::new(&[self.seed, topology_code(self.topology), index]);
        let drawable: Vec<&Fault> = CATALOGUE.iter().filter(|fault| fault.drawn_on(self.topology)).collect();
        let faults = 1 + prng.below(MOST_FAULTS);
        let window_ms = usize::try_from(self.window.as_millis()).unwrap_or(usize::MAX).max(1);
        let mut steps: Vec<Step> = (0..faults)
            .map(|_| Step {
                at: Duration::from_millis(prng.below(window_ms) as u64),
                fault: drawable[prng.below(drawable.len())].kind,
            })
            .collect();
        steps.sort_by_key(|step| step.at);
        Some(Schedule { index, steps })
    }
}

fn topology_code(topology: Topology) -> u64 {
    match topology {
        Topology::Single => 1,
        Topology::Scale => 2,
    }
}

impl Schedule {
    /// A schedule as a violation prints it (`schedule 7: 1.200s postgres-crash, 4.031s
    /// api-kill-9`, the `schedule N:` optional): what `--replay` strikes again. Schedules
    /// drawn from a seed change when the catalogue does; the text does not.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (index, steps) = match text.trim().strip_prefix("schedule ") {
            Some(rest) => {
                let (index, steps) =
                    rest.split_once(':').ok_or_else(|| format!("no `:` after the index in {text:?}"))?;
                (index.trim().parse().map_err(|_| format!("{index:?} is not a schedule's index"))?, steps)
            }
            None => (0, text),
        };
        let steps = steps
            .split(',')
            .map(|step| {
                let (at, name) =
                    step.trim().split_once("s ").ok_or_else(|| format!("{step:?} is not `<seconds>s <fault>`"))?;
                let at: f64 = at.parse().map_err(|_| format!("{at:?} is not a number of seconds"))?;
                let fault = CATALOGUE
                    .iter()
                    .find(|fault| fault.name == name.trim())
                    .ok_or_else(|| format!("{name:?} is no fault of the catalogue"))?;
                Ok(Step { at: Duration::from_secs_f64(at.max(0.0)), fault: fault.kind })
            })
            .collect::<Result<Vec<Step>, String>>()?;
        Ok(Self { index, steps })
    }
}

impl fmt::Display for Schedule {
    /// `schedule 7: 1.200s postgres-crash, 4.031s api-kill-9`: what a violation prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "schedule {}:", self.index)?;
        for (index, step) in self.steps.iter().enumerate() {
            let separator = if index == 0 { " " } else { ", " };
            write!(f, "{separator}{:.3}s {}", step.at.as_secs_f64(), step.fault)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const WINDOW: Duration = Duration::from_secs(20);

    #[test]
    fn a_seed_replays_the_same_schedules() {
        let first: Vec<Schedule> = Schedules::new(42, Topology::Scale, WINDOW).take(50).collect();
        let again: Vec<Schedule> = Schedules::new(42, Topology::Scale, WINDOW).take(50).collect();
        assert_eq!(first, again);
        let other: Vec<Schedule> = Schedules::new(43, Topology::Scale, WINDOW).take(50).collect();
        assert_ne!(first, other, "another seed draws other schedules");
    }

    #[test]
    fn a_schedule_is_the_same_whatever_ran_before_it() {
        let tenth = Schedules::new(7, Topology::Single, WINDOW).nth(9);
        let mut replay = Schedules::new(7, Topology::Single, WINDOW);
        replay.next = 9;
        assert_eq!(replay.next(), tenth);
    }

    #[test]
    fn schedules_hold_one_to_three_faults_in_order_within_the_window() {
        for schedule in Schedules::new(1, Topology::Single, WINDOW).take(500) {
            assert!((1..=MOST_FAULTS).contains(&schedule.steps.len()), "{schedule}");
            assert!(schedule.steps.windows(2).all(|pair| pair[0].at <= pair[1].at), "{schedule}");
            assert!(schedule.steps.iter().all(|step| step.at < WINDOW), "{schedule}");
        }
    }

    #[test]
    fn every_fault_a_topology_has_is_drawn_and_no_other() {
        for topology in [Topology::Single, Topology::Scale] {
            let drawn: BTreeSet<FaultKind> = Schedules::new(3, topology, WINDOW)
                .take(500)
                .flat_map(|schedule| schedule.steps.into_iter().map(|step| step.fault))
                .collect();
            let drawable: BTreeSet<FaultKind> =
                CATALOGUE.iter().filter(|fault| fault.drawn_on(topology)).map(|fault| fault.kind).collect();
            assert_eq!(drawn, drawable, "{}", topology.as_str());
        }
    }

    #[test]
    fn a_printed_schedule_parses_back_into_itself() {
        for schedule in Schedules::new(5, Topology::Single, WINDOW).take(50) {
            assert_eq!(Schedule::parse(&schedule.to_string()), Ok(schedule.clone()));
        }
        let bare =
            Schedule::parse("0.053s postgres-crash, 6.429s cursor-secret-rotation").map(|schedule| schedule.steps);
        assert_eq!(bare.map(|steps| steps.len()), Ok(2));
        assert!(Schedule::parse("1.0s no-such-fault").is_err());
        assert!(Schedule::parse("soon postgres-crash").is_err());
    }

    #[test]
    fn a_schedule_prints_as_it_replays() {
        let schedule = Schedule {
            index: 7,
            steps: vec![
                Step { at: Duration::from_millis(1200), fault: FaultKind::PostgresCrash },
                Step { at: Duration::from_millis(4031), fault: FaultKind::ApiKill },
            ],
        };
        assert_eq!(schedule.to_string(), "schedule 7: 1.200s postgres-crash, 4.031s api-kill-9");
    }
}
