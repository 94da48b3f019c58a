//! API keys: their format, their one-way storage, and the authenticator that checks
//! them on every request without touching the database on the hot path.
//!
//! A key reads `lk_<live|test>_<key id>_<secret>`. The key id is public and indexes the
//! key; the secret (43 base62 characters, 256 bits from the OS) is stored only as
//! HMAC-SHA256 under the server's pepper, beside the fingerprint of that pepper. A key
//! hashed under a previous pepper (one being rotated out) still verifies, and is hashed
//! again under the current one at its next use.

mod authenticator;
mod format;
pub mod store;

pub use authenticator::{Authenticator, KeyChanges, Principal};
pub use format::{
    Environment, IssuedKey, KeyError, Made, ParsedKey, Pepper, PepperDependency, Peppers, Scope, FINGERPRINT_LEN,
};
