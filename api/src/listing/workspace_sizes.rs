//! Which workspaces are small enough for a search to walk all of their rows.
//!
//! A search in a workspace of a few hundred records is cheapest as a walk through the
//! workspace's range of the createdAt order index, testing each entry's search document:
//! the same plan for every term, so PostgreSQL can keep one generic plan instead of
//! planning every execution for its pattern (about 0.2 ms of a 0.45 ms search). In a
//! large workspace a walk would read every entry for a rare term, so there a search
//! stays planned per execution and may take a trigram index.
//!
//! A workspace's size is counted once and remembered for a while (never more entries
//! than the threshold are counted). A workspace that grows meanwhile is walked a little
//! longer than it should be, which is slower, never wrong: both shapes return the same
//! records.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::Row;
use uuid::Uuid;

use super::query::SearchShape;
use super::request::ListRequest;
use crate::reads::connections::{PlanMode, ReadConnections, ReadError};
use crate::resources::Resource;

/// When searches walk a workspace.
#[derive(Clone, Copy, Debug)]
pub struct WalkSettings {
    /// Workspaces with fewer active records than this (of the resource searched) are
    /// walked; 0 walks none.
    pub below_rows: u32,
    /// How long a counted size is trusted.
    pub recount_after: Duration,
}

impl Default for WalkSettings {
    /// A walk that finds nothing reads 2,000 index entries in about a millisecond of
    /// PostgreSQL time: no worse than a planned search.
    fn default() -> Self {
        Self { below_rows: 2_000, recount_after: Duration::from_secs(60) }
    }
}

/// Sizes remembered at most; past it the expired ones go, and if none had, all.
const REMEMBERED: usize = 100_000;

/// Per (table, workspace): small or not, and when that was counted.
type Known = HashMap<(&'static str, Uuid), (bool, Instant)>;

/// The remembered answers.
pub struct WorkspaceSizes {
    settings: WalkSettings,
    known: Mutex<Known>,
}

impl WorkspaceSizes {
    pub fn new(settings: WalkSettings) -> Self {
        Self { settings, known: Mutex::new(HashMap::new()) }
    }

    /// How to search for `request`: a walk if it can be walked and its workspace holds
    /// fewer active records of `R` than the threshold (counted only then).
    pub async fn shape_for<R: Resource>(
        &self,
        connections: &ReadConnections,
        request: &ListRequest<R::Kind>,
    ) -> Result<SearchShape, ReadError> {
        // A term too short for trigrams is walked whatever the size: no need to count.
        let small = SearchShape::walkable(request)
            && !SearchShape::too_short_for_trigrams(request)
            && self.settings.below_rows > 0
            && self.is_small(connections, R::NAME, request.workspace_id).await?;
        Ok(SearchShape::choose(request, small))
    }

    /// Whether `workspace_id` holds fewer active rows of `table` than the threshold.
    async fn is_small(
        &self,
        connections: &ReadConnections,
        table: &'static str,
        workspace_id: Uuid,
    ) -> Result<bool, ReadError> {
        let key = (table, workspace_id);
        if let Some((small, counted)) = self.known().get(&key) {
            if counted.elapsed() < self.settings.recount_after {
                return Ok(*small);
            }
        }
        // An index-only range scan of the order index, stopped at the threshold.
        let count = format!(
            "select count(*) from (select from {table} where workspace_id = $1 and status = 'active' limit $2) as counted"
        );
        let query = sqlx::query(&count).bind(workspace_id).bind(i64::from(self.settings.below_rows));
        let rows = connections.fetch_for(workspace_id, PlanMode::Generic, query).await?;
        let counted: i64 =
            rows.first().map(|row| row.try_get(0)).transpose().map_err(ReadError::Database)?.unwrap_or(0);
        let small = counted < i64::from(self.settings.below_rows);
        let mut known = self.known();
        if known.len() >= REMEMBERED {
            let recount_after = self.settings.recount_after;
            known.retain(|_, (_, counted)| counted.elapsed() < recount_after);
            if known.len() >= REMEMBERED {
                known.clear();
            }
        }
        known.insert(key, (small, Instant::now()));
        Ok(small)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // Inserts and removals only: a panic elsewhere cannot leave the map inconsistent.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
