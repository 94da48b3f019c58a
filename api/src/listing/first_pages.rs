//! First pages that have not changed, served without a database round trip.
//!
//! Integrations poll the first page of a collection far more often than it changes.
//! Each page is kept as served (its records already written as JSON) per (resource,
//! workspace, type, sort, limit), so a hit copies and writes no record. It is evicted
//! when the read model announces a change of its workspace ([`crate::reads::change`]):
//! the read model's statement-level triggers announce every committed write, whoever
//! wrote it. The staleness guard ([`Freshness`]) keeps nothing read across a change or
//! a listener outage.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use uuid::Uuid;

use super::params::SortKey;
use crate::reads::change::{Change, Channel, Follower};
use crate::reads::freshness::{Freshness, Ticket, Trust};

/// Past this many bytes of pages the cache starts over: memory stays bounded whatever
/// the number of workspaces polled and the page sizes they ask for. A first page of 50
/// contacts takes about 17 KB, so this holds about 2,000 of them.
pub const DEFAULT_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// Which first page.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub resource: &'static str,
    pub workspace_id: Uuid,
    pub kind: &'static str,
    pub sort: SortKey,
    pub limit: u16,
}

/// The pages, with the bytes they hold.
struct Pages<Page> {
    by_key: HashMap<PageKey, (Arc<Page>, usize)>,
    bytes: usize,
}

impl<Page> Default for Pages<Page> {
    fn default() -> Self {
        Self { by_key: HashMap::new(), bytes: 0 }
    }
}

/// The cache of pages of type `Page`, shared by every request of a process.
pub struct FirstPages<Page> {
    pages: RwLock<Pages<Page>>,
    /// Bytes of pages held at most.
    budget_bytes: usize,
    /// Per workspace: a query that raced with a change of its workspace keeps nothing.
    freshness: Freshness<Uuid>,
}

impl<Page> Default for FirstPages<Page> {
    fn default() -> Self {
        Self::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

impl<Page: Send + Sync> Follower for FirstPages<Page> {
    fn channel(&self) -> Channel {
        Channel::ReadModel
    }

    fn changed(&self, change: &Change) {
        match change.workspace() {
            Some(workspace_id) => self.evict_workspace(workspace_id),
            None => self.forget_everything(),
        }
    }

    fn forget_everything(&self) {
        self.freshness.everything_changed(|| *self.write_pages() = Pages::default());
    }

    fn trust(&self) -> &Trust {
        self.freshness.trust()
    }
}

impl<Page> FirstPages<Page> {
    /// A cache holding at most `budget_bytes` of pages.
    pub fn with_budget(budget_bytes: usize) -> Self {
        Self { pages: RwLock::new(Pages::default()), budget_bytes, freshness: Freshness::default() }
    }

    /// The cached page of `key`, if trusted and present.
    pub fn get(&self, key: &PageKey) -> Option<Arc<Page>> {
        if !self.freshness.trusted() {
            return None;
        }
        Some(self.read_pages().by_key.get(key)?.0.clone())
    }

    /// Taken before querying, handed back to [`FirstPages::put`].
    pub fn ticket(&self, workspace_id: Uuid) -> Ticket {
        self.freshness.ticket(&workspace_id)
    }

    /// Caches `page`, which holds `bytes`, unless the workspace changed since `ticket`
    /// was taken.
    pub fn put(&self, key: PageKey, ticket: Ticket, page: Arc<Page>, bytes: usize) {
        let workspace_id = key.workspace_id;
        self.freshness.keep_if_unchanged(&workspace_id, ticket, || {
            let mut pages = self.write_pages();
            if pages.bytes + bytes > self.budget_bytes {
                *pages = Pages::default();
            }
            pages.bytes += bytes;
            if let Some((_, replaced)) = pages.by_key.insert(key, (page, bytes)) {
                pages.bytes -= replaced;
            }
        });
    }

    fn evict_workspace(&self, workspace_id: Uuid) {
        self.freshness.changed(workspace_id, || {
            let mut pages = self.write_pages();
            let mut freed = 0;
            pages.by_key.retain(|key, (_, bytes)| {
                let keep = key.workspace_id != workspace_id;
                if !keep {
                    freed += *bytes;
                }
                keep
            });
            pages.bytes -= freed;
        });
    }

    // A panic while holding this lock cannot leave the map inconsistent (single inserts
    // and removals), so a poisoned lock is still usable.
    fn read_pages(&self) -> std::sync::RwLockReadGuard<'_, Pages<Page>> {
        self.pages.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_pages(&self) -> std::sync::RwLockWriteGuard<'_, Pages<Page>> {
        self.pages.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(workspace_id: Uuid) -> PageKey {
        PageKey { resource: "contacts", workspace_id, kind: "all", sort: SortKey::CreatedAt, limit: 50 }
    }

    fn listening_cache() -> FirstPages<Vec<u8>> {
        let cache = FirstPages::default();
        cache.reset(true);
        cache
    }

    #[test]
    fn a_cached_page_is_served_until_its_workspace_changes() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        let ticket = cache.ticket(workspace);
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8, 2]), 2);
        assert_eq!(cache.get(&key(workspace)).as_deref(), Some(&vec![1, 2]));
        cache.evict_workspace(workspace);
        assert!(cache.get(&key(workspace)).is_none());
    }

    #[test]
    fn a_query_that_raced_with_a_change_is_not_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        let ticket = cache.ticket(workspace);
        cache.evict_workspace(workspace);
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8]), 1);
        assert!(cache.get(&key(workspace)).is_none());
    }

    #[test]
    fn a_query_that_began_before_a_listener_outage_is_not_cached_after_the_reconnect() {
        let cache = listening_cache();
        // A workspace the cache has never heard of: no generation of its own to bump.
        let workspace = Uuid::from_u128(7);
        let ticket = cache.ticket(workspace);
        cache.reset(false);
        cache.reset(true);
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8]), 1);
        assert!(cache.get(&key(workspace)).is_none(), "a page read before the outage was cached");
    }

    #[test]
    fn another_workspaces_change_leaves_a_page_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]), 1);
        cache.evict_workspace(Uuid::from_u128(2));
        assert!(cache.get(&key(workspace)).is_some());
    }

    #[test]
    fn nothing_is_cached_or_served_while_not_listening() {
        let cache = FirstPages::<Vec<u8>>::default();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]), 1);
        assert!(cache.get(&key(workspace)).is_none());
    }

    #[test]
    fn past_its_byte_budget_the_cache_starts_over() {
        let cache = FirstPages::<Vec<u8>>::with_budget(100);
        cache.reset(true);
        let (first, second, third) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 60);
        cache.put(key(second), cache.ticket(second), Arc::new(vec![2_u8]), 40);
        assert!(cache.get(&key(first)).is_some() && cache.get(&key(second)).is_some());

        cache.put(key(third), cache.ticket(third), Arc::new(vec![3_u8]), 1);

        assert!(cache.get(&key(first)).is_none() && cache.get(&key(second)).is_none());
        assert!(cache.get(&key(third)).is_some());
    }

    #[test]
    fn an_evicted_workspace_gives_its_bytes_back_to_the_budget() {
        let cache = FirstPages::<Vec<u8>>::with_budget(100);
        cache.reset(true);
        let (first, second) = (Uuid::from_u128(1), Uuid::from_u128(2));
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 60);
        cache.evict_workspace(first);

        cache.put(key(second), cache.ticket(second), Arc::new(vec![2_u8]), 30);
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 30);

        assert!(cache.get(&key(second)).is_some(), "the evicted page's 60 bytes still counted");
    }
}
