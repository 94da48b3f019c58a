//! End-to-end tests of lectern-projector: real nats-server (a private one per test) and
//! real PostgreSQL (a database per test).

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod alerts;
mod apply_rules;
mod cluster;
mod commands;
mod commit_modes;
mod concurrency;
mod convergence;
mod dead_letter_bytes;
mod dead_letters;
mod durable_acks;
mod end_to_end;
mod feed_convergence;
mod lost_events;
mod operations;
mod outages;
mod pending_lists;
mod process;
mod rebuild;
mod redelivery;
mod stuck_batches;
mod verify;
mod workspace_indexes;
