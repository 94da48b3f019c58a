//! `lectern-api`: serves workspace-scoped, scope-checked, cursor-paginated reads of
//! the active records in Lectern's PostgreSQL read model, to integrations holding API
//! keys. The contract, in our words, is `docs/api.md`; the served OpenAPI document
//! states it for machines.
//!
//! # Layout
//! - [`cli`]: the command line (`serve`, `migrate`, `keys`, `healthcheck`, `openapi`).
//! - [`config`]: settings, each a flag with an environment twin.
//! - [`http`]: routes, the envelope layer, auth, the strict query gate, OpenAPI.
//! - [`listing`]: what every collection shares: parameters, positions, cursors, pages.
//! - [`feed`]: the changes feed: sync tokens, feed heads, long polls.
//! - [`db`]: the pool, migrations, and one query module per resource.
//! - [`keys`]: key format, peppered hashes, the caching authenticator.
//! - [`memory`]: the process's heap kept in small pages.
//! - [`error`]: the one error type of a request, and that of a command.
//! - [`operations`]: readiness, metrics, the operations listener's wiring.
//! - [`rate_limit`]: per-key and per-address token buckets.
//! - [`telemetry`]: logging set-up.

pub mod cli;
pub mod config;
pub mod db;
pub mod error;
pub mod feed;
pub mod http;
pub mod keys;
pub mod listing;
pub mod memory;
pub mod operations;
pub mod rate_limit;
pub mod telemetry;
