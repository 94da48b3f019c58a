//! End-to-end tests of lectern-api: the real app over HTTP against a real PostgreSQL.
//! Each test creates its own database, so they run in parallel.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "in tests, a failed expectation is the test failing, with its message"
)]

mod auth;
mod changes;
mod cli;
mod columns;
mod connections;
mod contract;
mod first_pages;
mod fleet_rotation;
mod isolation;
mod items;
mod listener;
mod listing;
mod lookups;
mod openapi;
mod operations;
mod outage;
mod params;
mod pepper_rotation;
mod plan_cache;
mod plans;
mod rate_limits;
mod resources;
mod retrieve;
mod rotation;
mod roundtrips;
mod search;
mod shutdown;
mod statements;
mod values;
mod walks;
mod workspace_shares;
