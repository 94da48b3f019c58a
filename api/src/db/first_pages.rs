//! First pages that have not changed, served without a database round trip.
//!
//! Integrations poll the first page of a collection far more often than it changes.
//! Each page is kept as served (its records already written as JSON) per (resource,
//! workspace, type, sort, limit), so a hit copies and writes no record. It is evicted
//! when PostgreSQL notifies `lectern_changes` with the workspace: the read model's
//! statement-level triggers send that for every committed write, whoever wrote it.
//! As with the key cache, nothing is trusted while the LISTEN connection is down, and
//! a query that raced with a change is never cached.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use uuid::Uuid;

use super::notifications::Invalidated;
use crate::listing::SortKey;

/// The channel the read model's triggers notify with a workspace id.
pub const CHANGES_CHANNEL: &str = "lectern_changes";
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

/// A page as the API serves it; its type is the HTTP layer's business.
type Page = Arc<dyn Any + Send + Sync>;

/// The pages, with the bytes they hold.
#[derive(Default)]
struct Pages {
    by_key: HashMap<PageKey, (Page, usize)>,
    bytes: usize,
}

/// The cache, shared by every request of a process.
pub struct FirstPages {
    pages: RwLock<Pages>,
    /// Bytes of pages held at most.
    budget_bytes: usize,
    /// Bumped per workspace on every notification, so a query that started before a
    /// change and finished after it does not cache what it read.
    generations: Mutex<HashMap<Uuid, u64>>,
    /// Bumped whenever everything is forgotten (every listener outage and reconnect):
    /// a workspace with no generation yet may have changed unnotified meanwhile, and
    /// a query that started before must not cache what it read.
    epoch: AtomicU64,
    /// True only while the LISTEN connection is up ([`super::notifications`]).
    listening: AtomicBool,
}

impl Default for FirstPages {
    fn default() -> Self {
        Self::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

/// Proof of the workspace's generation when a query started.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    generation: u64,
    epoch: u64,
    trusted: bool,
}

impl Invalidated for FirstPages {
    fn channel(&self) -> &'static str {
        CHANGES_CHANNEL
    }

    fn evict(&self, payload: &str) {
        // `<workspace> <table> <position>` from the read model's triggers; the workspace
        // is all a first page needs.
        let workspace = payload.split(' ').next().unwrap_or_default();
        match Uuid::try_parse(workspace) {
            Ok(workspace_id) => self.evict_workspace(workspace_id),
            Err(_) => self.forget_everything(),
        }
    }

    fn forget_everything(&self) {
        let mut generations = self.lock_generations();
        for generation in generations.values_mut() {
            *generation += 1;
        }
        // Under the generations' lock, which `put` holds while it checks the ticket.
        self.epoch.fetch_add(1, Ordering::AcqRel);
        *self.write_pages() = Pages::default();
    }

    fn listening(&self) -> &AtomicBool {
        &self.listening
    }
}

impl FirstPages {
    /// A cache holding at most `budget_bytes` of pages.
    pub fn with_budget(budget_bytes: usize) -> Self {
        Self {
            pages: RwLock::default(),
            budget_bytes,
            generations: Mutex::default(),
            epoch: AtomicU64::new(0),
            listening: AtomicBool::new(false),
        }
    }

    /// The cached page of `key`, if trusted and present.
    pub fn get<Page: Send + Sync + 'static>(&self, key: &PageKey) -> Option<Arc<Page>> {
        if !self.trusted() {
            return None;
        }
        let page = self.read_pages().by_key.get(key)?.0.clone();
        page.downcast::<Page>().ok()
    }

    /// Taken before querying, handed back to [`FirstPages::put`].
    pub fn ticket(&self, workspace_id: Uuid) -> Ticket {
        let trusted = self.trusted();
        let generations = self.lock_generations();
        let generation = generations.get(&workspace_id).copied().unwrap_or(0);
        Ticket { generation, epoch: self.epoch.load(Ordering::Acquire), trusted }
    }

    /// Caches `page`, which holds `bytes`, unless the workspace changed since `ticket`
    /// was taken.
    pub fn put<Page: Send + Sync + 'static>(&self, key: PageKey, ticket: Ticket, page: Arc<Page>, bytes: usize) {
        if !ticket.trusted || !self.trusted() {
            return;
        }
        let generations = self.lock_generations();
        if generations.get(&key.workspace_id).copied().unwrap_or(0) != ticket.generation
            || self.epoch.load(Ordering::Acquire) != ticket.epoch
        {
            return;
        }
        let mut pages = self.write_pages();
        if pages.bytes + bytes > self.budget_bytes {
            *pages = Pages::default();
        }
        pages.bytes += bytes;
        if let Some((_, replaced)) = pages.by_key.insert(key, (page, bytes)) {
            pages.bytes -= replaced;
        }
        // Held until here so an eviction cannot slip between the check and the insert.
        drop(generations);
    }

    fn evict_workspace(&self, workspace_id: Uuid) {
        let mut generations = self.lock_generations();
        *generations.entry(workspace_id).or_default() += 1;
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
    }

    // A panic while holding these locks cannot leave the maps inconsistent (single
    // inserts and removals), so a poisoned lock is still usable.
    fn read_pages(&self) -> std::sync::RwLockReadGuard<'_, Pages> {
        self.pages.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_pages(&self) -> std::sync::RwLockWriteGuard<'_, Pages> {
        self.pages.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_generations(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, u64>> {
        self.generations.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(workspace_id: Uuid) -> PageKey {
        PageKey { resource: "contacts", workspace_id, kind: "all", sort: SortKey::CreatedAt, limit: 50 }
    }

    fn listening_cache() -> FirstPages {
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
        assert_eq!(cache.get::<Vec<u8>>(&key(workspace)).as_deref(), Some(&vec![1, 2]));
        cache.evict_workspace(workspace);
        assert!(cache.get::<Vec<u8>>(&key(workspace)).is_none());
    }

    #[test]
    fn a_query_that_raced_with_a_change_is_not_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        let ticket = cache.ticket(workspace);
        cache.evict_workspace(workspace);
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8]), 1);
        assert!(cache.get::<Vec<u8>>(&key(workspace)).is_none());
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
        assert!(cache.get::<Vec<u8>>(&key(workspace)).is_none(), "a page read before the outage was cached");
    }

    #[test]
    fn another_workspaces_change_leaves_a_page_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]), 1);
        cache.evict_workspace(Uuid::from_u128(2));
        assert!(cache.get::<Vec<u8>>(&key(workspace)).is_some());
    }

    #[test]
    fn nothing_is_cached_or_served_while_not_listening() {
        let cache = FirstPages::default();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]), 1);
        assert!(cache.get::<Vec<u8>>(&key(workspace)).is_none());
    }

    #[test]
    fn past_its_byte_budget_the_cache_starts_over() {
        let cache = FirstPages::with_budget(100);
        cache.reset(true);
        let (first, second, third) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 60);
        cache.put(key(second), cache.ticket(second), Arc::new(vec![2_u8]), 40);
        assert!(cache.get::<Vec<u8>>(&key(first)).is_some() && cache.get::<Vec<u8>>(&key(second)).is_some());

        cache.put(key(third), cache.ticket(third), Arc::new(vec![3_u8]), 1);

        assert!(cache.get::<Vec<u8>>(&key(first)).is_none() && cache.get::<Vec<u8>>(&key(second)).is_none());
        assert!(cache.get::<Vec<u8>>(&key(third)).is_some());
    }

    #[test]
    fn an_evicted_workspace_gives_its_bytes_back_to_the_budget() {
        let cache = FirstPages::with_budget(100);
        cache.reset(true);
        let (first, second) = (Uuid::from_u128(1), Uuid::from_u128(2));
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 60);
        cache.evict_workspace(first);

        cache.put(key(second), cache.ticket(second), Arc::new(vec![2_u8]), 30);
        cache.put(key(first), cache.ticket(first), Arc::new(vec![1_u8]), 30);

        assert!(cache.get::<Vec<u8>>(&key(second)).is_some(), "the evicted page's 60 bytes still counted");
    }
}
