//! First pages that have not changed, served without a database round trip.
//!
//! Integrations poll the first page of a collection far more often than it changes.
//! Its rows are kept here per (resource, workspace, type, sort, limit) and evicted
//! when PostgreSQL notifies `lectern_changes` with the workspace: the read model's
//! statement-level triggers send that for every committed write, whoever wrote it.
//! As with the key cache, nothing is trusted while the LISTEN connection is down, and
//! a query that raced with a change is never cached.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use uuid::Uuid;

use super::notifications::Invalidated;
use crate::listing::SortKey;

/// The channel the read model's triggers notify with a workspace id.
pub const CHANGES_CHANNEL: &str = "lectern_changes";
/// Past this many pages the cache starts over: memory stays bounded whatever the
/// number of workspaces polled.
const MAX_PAGES: usize = 20_000;

/// Which first page.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub resource: &'static str,
    pub workspace_id: Uuid,
    pub kind: &'static str,
    pub sort: SortKey,
    pub limit: u16,
}

type Rows = Arc<dyn Any + Send + Sync>;

/// The cache, shared by every request of a process.
#[derive(Default)]
pub struct FirstPages {
    pages: RwLock<HashMap<PageKey, Rows>>,
    /// Bumped per workspace on every notification, so a query that started before a
    /// change and finished after it does not cache what it read.
    generations: Mutex<HashMap<Uuid, u64>>,
    /// True only while the LISTEN connection is up ([`super::notifications`]).
    listening: AtomicBool,
}

/// Proof of the workspace's generation when a query started.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    generation: u64,
    trusted: bool,
}

impl Invalidated for FirstPages {
    fn channel(&self) -> &'static str {
        CHANGES_CHANNEL
    }

    fn evict(&self, payload: &str) {
        match Uuid::try_parse(payload) {
            Ok(workspace_id) => self.evict_workspace(workspace_id),
            Err(_) => self.forget_everything(),
        }
    }

    fn forget_everything(&self) {
        let mut generations = self.lock_generations();
        for generation in generations.values_mut() {
            *generation += 1;
        }
        self.write_pages().clear();
    }

    fn listening(&self) -> &AtomicBool {
        &self.listening
    }
}

impl FirstPages {
    /// The cached rows of `key`, if trusted and present.
    pub fn get<Row: Clone + Send + Sync + 'static>(&self, key: &PageKey) -> Option<Arc<Vec<Row>>> {
        if !self.trusted() {
            return None;
        }
        let rows = self.read_pages().get(key)?.clone();
        rows.downcast::<Vec<Row>>().ok()
    }

    /// Taken before querying, handed back to [`FirstPages::put`].
    pub fn ticket(&self, workspace_id: Uuid) -> Ticket {
        let trusted = self.trusted();
        let generation = self.lock_generations().get(&workspace_id).copied().unwrap_or(0);
        Ticket { generation, trusted }
    }

    /// Caches `rows` unless the workspace changed since `ticket` was taken.
    pub fn put<Row: Clone + Send + Sync + 'static>(&self, key: PageKey, ticket: Ticket, rows: Arc<Vec<Row>>) {
        if !ticket.trusted || !self.trusted() {
            return;
        }
        let generations = self.lock_generations();
        if generations.get(&key.workspace_id).copied().unwrap_or(0) != ticket.generation {
            return;
        }
        let mut pages = self.write_pages();
        if pages.len() >= MAX_PAGES {
            pages.clear();
        }
        pages.insert(key, rows);
        // Held until here so an eviction cannot slip between the check and the insert.
        drop(generations);
    }

    fn evict_workspace(&self, workspace_id: Uuid) {
        let mut generations = self.lock_generations();
        *generations.entry(workspace_id).or_default() += 1;
        self.write_pages().retain(|key, _| key.workspace_id != workspace_id);
    }

    // A panic while holding these locks cannot leave the maps inconsistent (single
    // inserts and removals), so a poisoned lock is still usable.
    fn read_pages(&self) -> std::sync::RwLockReadGuard<'_, HashMap<PageKey, Rows>> {
        self.pages.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_pages(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<PageKey, Rows>> {
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
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8, 2]));
        assert_eq!(cache.get::<u8>(&key(workspace)).as_deref(), Some(&vec![1, 2]));
        cache.evict_workspace(workspace);
        assert!(cache.get::<u8>(&key(workspace)).is_none());
    }

    #[test]
    fn a_query_that_raced_with_a_change_is_not_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        let ticket = cache.ticket(workspace);
        cache.evict_workspace(workspace);
        cache.put(key(workspace), ticket, Arc::new(vec![1_u8]));
        assert!(cache.get::<u8>(&key(workspace)).is_none());
    }

    #[test]
    fn another_workspaces_change_leaves_a_page_cached() {
        let cache = listening_cache();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]));
        cache.evict_workspace(Uuid::from_u128(2));
        assert!(cache.get::<u8>(&key(workspace)).is_some());
    }

    #[test]
    fn nothing_is_cached_or_served_while_not_listening() {
        let cache = FirstPages::default();
        let workspace = Uuid::from_u128(1);
        cache.put(key(workspace), cache.ticket(workspace), Arc::new(vec![1_u8]));
        assert!(cache.get::<u8>(&key(workspace)).is_none());
    }
}
