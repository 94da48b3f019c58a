//! The one guard against serving stale data across a missed notification.
//!
//! A cache filled from a query may keep the answer only if no change it depends on was
//! announced while the query ran, and only if every change was being announced to it:
//! the listener was up, proved alive, when the query began and is still. So a query
//! takes a [`Ticket`] first, and the cache keeps its answer only if
//! [`Freshness::keep_if_unchanged`] finds the ticket current: trusted then and now, the
//! same epoch (no outage, reconnect or truncate since), and the same generation of the
//! key the answer belongs to (no change of it announced since).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Whether a follower's channel is listened to: set by the listener, true only while
/// the LISTEN connection is up and has proved itself alive.
#[derive(Debug, Default)]
pub struct Trust(AtomicBool);

impl Trust {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub fn set(&self, trusted: bool) {
        self.0.store(trusted, Ordering::Release);
    }
}

/// Proof of what was known when a query began.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    trusted: bool,
    epoch: u64,
    generation: u64,
}

impl Ticket {
    /// Whether the listener was up when the ticket was taken.
    pub fn trusted(self) -> bool {
        self.trusted
    }

    /// The epoch it was taken in: what a cache tags a fact learnt under it with.
    pub fn epoch(self) -> u64 {
        self.epoch
    }
}

/// A cache's staleness guard, per key of type `K`.
#[derive(Debug)]
pub struct Freshness<K> {
    trust: Trust,
    /// Bumped whenever everything is forgotten: a key that had no generation yet may
    /// have changed unannounced meanwhile.
    epoch: AtomicU64,
    /// Bumped per key by every change announced for it.
    generations: Mutex<HashMap<K, u64>>,
}

impl<K> Default for Freshness<K> {
    fn default() -> Self {
        Self { trust: Trust::default(), epoch: AtomicU64::new(0), generations: Mutex::new(HashMap::new()) }
    }
}

impl<K: Eq + Hash> Freshness<K> {
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// Whether the cache may serve what it holds now.
    pub fn trusted(&self) -> bool {
        self.trust.get()
    }

    /// The epoch now: what a cache tags the facts it keeps with, when they are not kept
    /// per key.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Taken before the query whose answer about `key` may be kept.
    pub fn ticket(&self, key: &K) -> Ticket {
        // Trust first: a ticket taken as the listener comes up is not trusted, never the
        // other way round.
        let trusted = self.trusted();
        let generations = self.lock();
        let generation = generations.get(key).copied().unwrap_or(0);
        Ticket { trusted, epoch: self.epoch(), generation }
    }

    /// Taken before a query whose answer is kept per epoch, not per key (so no key's
    /// generation is looked up): [`Freshness::trusted_since`] checks it.
    pub fn epoch_ticket(&self) -> Ticket {
        let trusted = self.trusted();
        Ticket { trusted, epoch: self.epoch(), generation: 0 }
    }

    /// Whether the listener has been up, without an outage, since `ticket` was taken.
    pub fn trusted_since(&self, ticket: Ticket) -> bool {
        ticket.trusted && self.trusted() && self.epoch() == ticket.epoch
    }

    /// Runs `keep` (which stores the answer about `key`) only if nothing `key` depends on
    /// changed since `ticket`; no change can slip in between the check and `keep`.
    pub fn keep_if_unchanged<T>(&self, key: &K, ticket: Ticket, keep: impl FnOnce() -> T) -> Option<T> {
        if !self.trusted_since(ticket) {
            return None;
        }
        let generations = self.lock();
        let current = generations.get(key).copied().unwrap_or(0) == ticket.generation && self.epoch() == ticket.epoch;
        // Held while keeping, so a change of `key` waits for it.
        current.then(keep)
    }

    /// Announces a change of `key`, running `drop` (which removes what the cache holds of
    /// it) under the guard.
    pub fn changed<T>(&self, key: K, drop: impl FnOnce() -> T) -> T {
        let mut generations = self.lock();
        *generations.entry(key).or_default() += 1;
        drop()
    }

    /// Announces that anything may have changed, running `drop` under the guard.
    pub fn everything_changed<T>(&self, drop: impl FnOnce() -> T) -> T {
        let _generations = self.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        drop()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, u64>> {
        // Single increments and reads: a poisoned lock still holds a consistent map.
        self.generations.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening() -> Freshness<u32> {
        let freshness = Freshness::default();
        freshness.trust().set(true);
        freshness
    }

    #[test]
    fn an_answer_is_kept_only_when_its_key_did_not_change_meanwhile() {
        let freshness = listening();
        let ticket = freshness.ticket(&1);
        freshness.changed(2, || ());
        assert!(freshness.keep_if_unchanged(&1, ticket, || ()).is_some(), "another key's change");
        freshness.changed(1, || ());
        assert!(freshness.keep_if_unchanged(&1, ticket, || ()).is_none(), "its own key's change");
    }

    #[test]
    fn a_ticket_taken_before_an_outage_is_not_trusted_after_it() {
        let freshness = listening();
        let ticket = freshness.ticket(&1);
        assert!(freshness.trusted_since(ticket));
        freshness.everything_changed(|| ());
        assert!(!freshness.trusted_since(ticket), "a fact read before the outage would be kept");
    }

    #[test]
    fn nothing_is_kept_across_an_outage_nor_while_not_listening() {
        let freshness = listening();
        let ticket = freshness.ticket(&1);
        freshness.everything_changed(|| ());
        assert!(freshness.keep_if_unchanged(&1, ticket, || ()).is_none(), "across an outage");
        freshness.trust().set(false);
        let ticket = freshness.ticket(&1);
        freshness.trust().set(true);
        assert!(freshness.keep_if_unchanged(&1, ticket, || ()).is_none(), "taken while not listening");
    }
}
