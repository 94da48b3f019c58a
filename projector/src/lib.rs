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
//! - [`cli`]: the command line (`run`, `status`, `verify`, `rebuild`, `dead-letters`, `lost-events`, `publish`, `healthcheck`).
//! - [`daemon`]: `run`, the always-running loop, and what runs beside it.
//! - [`repair`]: the operator's tools: `verify`, `rebuild`, the dead letters.
//!
//! What both sides share, knowing neither:
//! - [`apply`]: one batch into the read model, in one transaction (both sides write through it).
//! - [`history`]: the stream's events read back apart from the consumer, and whether it holds them all.
//! - [`lost_events`]: acknowledged events the database lost and the stream no longer holds.
//! - [`verifications`]: the verifies recorded, as the metrics and `status` read them.
//! - [`dead_letters`]: storing dead letters whatever their bytes, and counting them.
//! - [`stream`]: the `CHANGES` stream and the durable consumer.
//! - [`connections`]: NATS and PostgreSQL lost and back, in the log and a gauge.
//! - [`message`]: a message as received, and one refused.
//! - [`error`]: the crate's error type.
//! - [`metrics`]: what the projector counts and times.
//!
//! Every import points down this list: the layers are held by `tests/tests/ops/layers.rs`.

pub mod apply;
pub mod cli;
pub mod connections;
pub mod daemon;
pub mod dead_letters;
pub mod error;
pub mod history;
pub mod lost_events;
pub mod message;
pub mod metrics;
pub mod repair;
pub mod stream;
pub mod verifications;
