//! The operator's tools for a read model that may be wrong: compare it with the stream,
//! build it again, and apply the dead letters once they pass. Each reads the stream from
//! its start ([`crate::history`]), apart from the running projectors ([`crate::daemon`]).
//!
//! # Layout
//! - [`verify`]: the read model against the stream (`verify`).
//! - [`rebuild`]: the read model built again from the stream and folded in (`rebuild`).
//! - [`dead_letters`]: the dead letters listed, and applied again (`dead-letters`).
//! - [`set_aside`]: what the projector set aside, which `verify` and `rebuild` leave out too.
//! - [`progress`]: a long command's progress, on a terminal or in its log.

pub mod dead_letters;
pub mod progress;
pub mod rebuild;
pub mod set_aside;
pub mod verify;
