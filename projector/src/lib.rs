//! `lectern-projector`: consumes contact and item change events from NATS JetStream
//! into the PostgreSQL read model that `lectern-api` serves.
//!
//! This crate is a skeleton until the projector issue: the binary parses its command
//! line and says plainly that consuming is not built yet.
//!
//! # Layout
//! - [`cli`]: the command line.

pub mod cli;
