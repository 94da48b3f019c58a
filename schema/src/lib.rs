//! The contracts Lectern's binaries share: the record types the API serves and the
//! projector writes, and (under `schema/`) the JSON and OpenAPI documents that other
//! teams consume.
//!
//! With the `openapi` feature the types also describe themselves to poem-openapi, so
//! the served OpenAPI document is derived from the same definitions as the JSON.
//!
//! # Layout
//! - [`timestamp`]: instants rendered exactly as the contract demands (`…SS.mmmZ`).
//! - [`contact`]: the Contact record.
//! - [`events`]: change events, as upstream systems publish them.
//! - [`item`]: the Item record.
//! - [`money`]: exact decimal amounts with their currency.
//! - [`json`]: the records' JSON, written by hand for the pages the API serves.

#[cfg(test)]
mod arbitrary;
pub mod contact;
pub mod events;
pub mod item;
pub mod json;
pub mod money;
pub mod timestamp;

pub use contact::{Contact, ContactRef};
pub use events::{ChangeEvent, EventError};
pub use item::{Item, ItemRef};
pub use timestamp::Timestamp;
