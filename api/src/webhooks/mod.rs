//! Webhooks: a thin, signed push on top of the changes feed. An operator registers an
//! endpoint for a workspace and some of its resources (`lectern-api webhooks`); whenever
//! the feed of one of them has changes the endpoint was not told about, every
//! `lectern-api serve` process is ready to tell it, and exactly one does: a POST that says
//! only "this workspace's contacts changed" (Standard Webhooks 1.0, signed), after which
//! the receiver pulls the feed from its own token. No record travels in a delivery, so
//! deliveries may be late, repeated or lost without the receiver missing anything.
//!
//! # Layout
//! - [`secret`]: `whsec_` secrets, sealed at rest, and the signature.
//! - [`target`]: which URLs and addresses a delivery may go to.
//! - [`store`]: every statement on the endpoint and delivery tables, the command line's
//!   and the deliverer's.
//! - [`deliverer`]: leases, coalescing, attempts and retries in `serve`.
//! - [`attempt`]: one HTTP attempt.

pub mod attempt;
pub mod deliverer;
pub mod secret;
pub mod store;
pub mod target;

use std::time::Duration;

pub use deliverer::Deliverer;
pub use target::TargetPolicy;

/// A resource whose feed an endpoint follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Resource {
    Contacts,
    Items,
}

impl Resource {
    pub const ALL: [Self; 2] = [Self::Contacts, Self::Items];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Contacts => lectern_read_model::contacts::TABLE,
            Self::Items => lectern_read_model::items::TABLE,
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|resource| resource.as_str() == name)
    }

    /// The `type` of its deliveries.
    pub fn event_type(self) -> &'static str {
        match self {
            Self::Contacts => "contacts.changed",
            Self::Items => "items.changed",
        }
    }
}

/// How deliveries are made; `serve` reads them from its command line.
#[derive(Clone, Copy, Debug)]
pub struct WebhookSettings {
    pub policy: TargetPolicy,
    /// One attempt, from connecting to the response's status line.
    pub timeout: Duration,
    /// The wait before the first retry; each later one doubles it, up to an hour.
    pub first_retry: Duration,
    /// How long a delivery is retried before its endpoint is disabled.
    pub retry_for: Duration,
    /// How long a process's claim on an endpoint lasts without renewal: how soon another
    /// process takes over the deliveries of one that died.
    pub lease: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            policy: TargetPolicy::default(),
            timeout: Duration::from_secs(10),
            first_retry: Duration::from_secs(5),
            retry_for: Duration::from_secs(3 * 24 * 3600),
            lease: Duration::from_secs(15),
        }
    }
}
