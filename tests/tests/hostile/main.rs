//! Hostile input: what an attacker, a broken client or a broken upstream can send.
//! Property tests (proptest) over cursors, query strings, paths and change events,
//! each with a committed corpus of hand-picked cases (`tests/corpus/`) replayed by a
//! plain test, and failures kept in `tests/proptest-regressions/hostile/`.
//!
//! `PROPTEST_CASES` sets the number of cases per property (default 256).

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod cursor;
mod events;
mod feed;
mod query;
mod world;
