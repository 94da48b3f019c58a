//! `lectern-projector run`: the always-running loop and what runs beside it. Everything an
//! operator's one-off command needs lives in [`crate::repair`] instead; what both need
//! (reading the stream's history back, the tables they both read) lives below both, and
//! neither imports the other.
//!
//! # Layout
//! - [`consumer`]: the run loop: pull, apply, acknowledge; retries; graceful shutdown.
//! - [`pull`]: one pull from the consumer, and when to stop waiting for it.
//! - [`durable_acks`]: acknowledging batches once their commits are flushed.
//! - [`in_hand`]: keeping the messages of a slow batch from being redelivered.
//! - [`stuck`]: batches that do not commit, shown to readiness, metrics and `status`.
//! - [`ledger`]: what the read model holds of the stream, and the events it lost applied again.
//! - [`pending_lists`]: merging the search indexes' pending lists beside the commits.
//! - [`workspace_indexes`]: a search index of its own for each large workspace.
//! - [`staleness`]: how far the read model is behind the stream, even while NATS is away.
//! - [`operations`]: readiness, and the operations listener's wiring.

pub mod consumer;
pub mod durable_acks;
pub mod in_hand;
pub mod ledger;
pub mod operations;
pub mod pending_lists;
pub mod pull;
pub mod staleness;
pub mod stuck;
pub mod workspace_indexes;
