//! The nemesis: random schedules of faults against a private deployment while publishers
//! and feed clients run, then a check of every promise once the stack settles.
//!
//! Built so far: the catalogue of faults ([`faults`], written once as data) and the
//! schedules drawn from a seed ([`schedule`]), replayable schedule by schedule. The
//! deployment, the runner that strikes each fault and the checker follow; until they land
//! there is no `--nemesis` command.

pub mod faults;
pub mod schedule;
