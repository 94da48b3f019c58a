//! `lectern-projector`: consumes contact and item change events from NATS JetStream
//! into the PostgreSQL read model that `lectern-api` serves.
//!
//! Messages are pulled in batches from a durable consumer; each batch is applied in
//! one transaction with set-based upserts guarded by the records' versions, and
//! acknowledged only once the commit is flushed to disk. Messages that break the contract are stored as
//! dead letters in the same transaction, then acknowledged too, so they never block
//! what follows. Any number of projectors can share the consumer.
//!
//! # Layout
//! - [`cli`]: the command line (`run`, `status`, `verify`, `rebuild`, `dead-letters`, `publish`, `healthcheck`).
//! - [`stream`]: the `CHANGES` stream and the durable consumer.
//! - [`consumer`]: the run loop: fetch, apply, ack; retries; graceful shutdown.
//! - [`pull`]: one pull from the consumer, and when to stop waiting for it.
//! - [`apply`]: one batch into the read model, in one transaction.
//! - [`durable_acks`]: acknowledging batches once their commits are flushed.
//! - [`ledger`]: what the read model holds of the stream, and the events it lost applied again.
//! - [`in_hand`]: keeping the messages of a slow batch from being redelivered.
//! - [`stuck`]: batches that do not commit, shown to readiness, metrics and `status`.
//! - [`pending_lists`]: merging the search indexes' pending lists beside the commits.
//! - [`workspace_indexes`]: a search index of its own for each large workspace.
//! - [`dead_letters`]: storing dead letters whatever their bytes, listing and retrying them.
//! - [`history`]: the stream read from its first event, once its history is known whole.
//! - [`verify`]: the read model against the stream (`verify`).
//! - [`rebuild`]: the read model built again from the stream and folded in (`rebuild`).
//! - [`progress`]: a long command's progress, on a terminal or in its log.
//! - [`error`]: the crate's error type.
//! - [`metrics`]: what the projector counts and times.
//! - [`operations`]: readiness, and the operations listener's wiring.

pub mod apply;
pub mod cli;
pub mod consumer;
pub mod dead_letters;
pub mod durable_acks;
pub mod error;
pub mod history;
pub mod in_hand;
pub mod ledger;
pub mod metrics;
pub mod operations;
pub mod pending_lists;
pub mod progress;
pub mod pull;
pub mod rebuild;
pub mod stream;
pub mod stuck;
pub mod verify;
pub mod workspace_indexes;
