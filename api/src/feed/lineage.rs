//! The histories the database in hand descends from, and whether a token's history is
//! one of them.
//!
//! A history's row in `read_model_histories` is written in that history, so the table of
//! the database in hand lists its own history and every one it was forked from, and no
//! other: not a sibling forked from the same copy, not a history the database was forked
//! from and then went back before (the old primary back, a second restore of one backup).
//!
//! A token of the database's own history, or of one it descends from, is followed as it
//! is. Everything this history holds from an earlier one was committed there, at the same
//! position, before the fork; everything written since is above every position of the
//! earlier history (its offset); so following the token skips nothing. What the earlier
//! history had and this one lost comes again through the projector's ledger, at new
//! positions. A token of any other history may stand past changes this history holds below
//! it (a sibling's own commits, or commits its fork missed and this one kept) and is told
//! to start over.

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::PgPool;

use crate::reads::history::{self, HistoryId};

/// The histories of the database, as read in one of them. A history's ancestors never
/// change, so what was read in one stays true of it.
#[derive(Default)]
pub struct Lineage {
    known: Mutex<Option<(HistoryId, Arc<Vec<HistoryId>>)>>,
}

impl Lineage {
    /// Whether `token` is `current` or a history `current` descends from, as the database on
    /// `pool` lists them; `None` when that database is no longer in `current` (the caller
    /// samples which history it is in, and asks again).
    pub async fn descends(
        &self,
        pool: &PgPool,
        current: HistoryId,
        token: HistoryId,
    ) -> Result<Option<bool>, sqlx::Error> {
        if token == current {
            return Ok(Some(true));
        }
        if let Some((read_in, histories)) = self.lock().clone() {
            if read_in == current {
                return Ok(Some(histories.contains(&token)));
            }
        }
        let (histories, here) = history::registered(pool).await?;
        if here != Some(current) {
            return Ok(None);
        }
        let histories = Arc::new(histories);
        let descends = histories.contains(&token);
        *self.lock() = Some((current, histories));
        Ok(Some(descends))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(HistoryId, Arc<Vec<HistoryId>>)>> {
        // One assignment at a time: a poisoned lock still holds a whole value.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
