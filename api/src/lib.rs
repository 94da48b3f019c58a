//! `lectern-api`: serves workspace-scoped, scope-checked, cursor-paginated reads of
//! the active records in Lectern's PostgreSQL read model, to integrations holding API
//! keys. The contract, in our words, is `docs/api.md`; the served OpenAPI document
//! states it for machines. `docs/architecture.md` maps the crate.
//!
//! # Layout
//! Each feature is a folder with its parameters, its SQL, its cache and its body:
//! - [`listing`]: one page of a workspace's active records, with cursors.
//! - [`feed`]: the changes feed: sync tokens, the bound, feed heads, long polls.
//! - [`retrieve`]: one record by id, read in batches.
//! - [`resources`]: contacts and items, as every feature reads them.
//! - [`keys`]: key format, peppered hashes, the caching authenticator.
//! - [`webhooks`]: signed deliveries that tell an endpoint a workspace's feed changed.
//!
//! What the features share, knowing none of them:
//! - [`reads`]: the read runtime: pool, migrations, connections, replicas, notifications.
//! - [`app`]: the state, each feature's own and what they share; background tasks.
//! - [`http`]: the shell: routes, operations, the query gate, the envelope, the server.
//! - [`error`]: the one error type of a request, and that of a command.
//! - [`signing`]: how cursors and sync tokens are signed.
//! - [`rate_limit`]: per-key and per-address token buckets.
//! - [`metric_names`]: every metric's name.
//! - [`query_values`]: how a query value parses and describes itself.
//! - [`cli`], [`config`], [`memory`], [`telemetry`]: the binary around it.

pub mod app;
pub mod cli;
pub mod config;
pub mod error;
pub mod feed;
pub mod http;
pub mod keys;
pub mod listing;
pub mod memory;
pub mod metric_names;
pub mod query_values;
pub mod rate_limit;
pub mod reads;
pub mod resources;
pub mod retrieve;
pub mod signing;
pub mod telemetry;
pub mod webhooks;
