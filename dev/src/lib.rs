//! `lectern-dev`: Lectern on a newcomer's machine in one command. It runs the API and
//! the projector in one process against the machine's PostgreSQL and NATS, publishes
//! the demo workspace through JetStream as an upstream system would, and prints a fresh
//! key with ready curl lines. A convenience binary: it depends on the product crates,
//! never the other way round.
//!
//! # Layout
//! - [`cli`]: the command line (the stack; `publish-demo`).
//! - [`stack`]: migrate, project, publish, wait, issue a key, serve.
//! - [`publish`]: the demo's events through JetStream, each acknowledged, each once.
//! - [`error`]: the crate's error type.

pub mod cli;
pub mod error;
pub mod publish;
pub mod stack;
