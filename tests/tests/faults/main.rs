//! Lectern under load, faults and hostile input: its own PostgreSQL stopped, slowed,
//! saturated and crashed under the API; NATS gone under the projector; hostile TCP
//! clients against the real `lectern-api serve`; schemathesis generating thousands
//! of requests from the served OpenAPI document; and the integrators' OpenAPI tools
//! (validator, client generator, response validation) run on that document.
//!
//! Each test that breaks a database has a private PostgreSQL server of its own
//! ([`lectern_tests::postgres::TestPostgres`]): the shared one is never touched.
//! Timeouts are generous (the machine is small and shared with other suites): they
//! catch hangs, never measure speed.

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod catch_up;
mod connections;
mod database;
mod history;
mod mirror;
mod nats;
mod openapi_tools;
mod replicas;
mod restore;
mod same_address;
mod schemathesis;
mod siblings;
mod support;
