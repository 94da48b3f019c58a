//! Test harness for Lectern's end-to-end tests: a fresh, migrated PostgreSQL database
//! per test, the real HTTP app on a free port, API keys, seeded records, and the real
//! binaries for command-line tests.
//!
//! # Layout
//! - [`database`]: per-test databases (created from `LECTERN_TEST_DATABASE_URL`'s
//!   server, default `postgres://postgres@127.0.0.1:5432/postgres`), swept when stale.
//! - [`app`]: [`app::TestApp`], the app over HTTP, and [`app::Reply`] with the
//!   contract's assertions.
//! - [`seed`]: records and keys written the way the projector and `keys create` would.
//! - [`binaries`]: paths to the workspace's built binaries, and what a finished run left.
//! - [`history`]: random histories of contacts and items, for the convergence tests.
//! - [`nats`]: a private nats-server with JetStream per test.
//! - [`projector`]: the projector's run loop in-process or as a `run` process, and
//!   publishing events.
//! - [`process`]: the one way a binary is started under test ([`process::Launch`]): run
//!   to its end, or long-running with its logs and its signals.
//! - [`serve`]: `lectern-api serve` as a process, on free ports.
//! - [`postgres`]: a private PostgreSQL server per test, to stop, crash and restart.
//! - [`forwarder`]: a TCP forwarder standing for a stable database address.
//! - [`webhooks`]: a webhook receiver on loopback, and the official library's verdict.

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

pub mod app;
pub mod binaries;
pub mod database;
pub mod forwarder;
pub mod history;
pub mod nats;
pub mod postgres;
pub mod process;
pub mod projector;
pub mod seed;
pub mod serve;
pub mod webhooks;

pub use app::{Reply, TestApp};
pub use database::TestDatabase;
pub use seed::ContactSeed;
