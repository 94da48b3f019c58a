//! End-to-end tests of the one-command local stack, `lectern-dev`: the real binary
//! against a private nats-server and a database of its own per test, run as a
//! newcomer runs it and stopped as Ctrl-C or a supervisor stops it.

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod demo;
mod lifecycle;
mod serving;
mod support;
