//! Which history of the database the process is talking to, and what it forgets when that
//! changes under the same address.
//!
//! A history is what the read model registers the first time it is written on a server
//! history it has not been written in (`read_model_histories`: a failover's new timeline,
//! a restore into another server or database), with an id drawn at random. Behind a
//! stable address (a DNS name, a virtual IP, a proxy) the database can change without the
//! process being told: a failover, the old primary coming back, a restore. Every
//! connection the process opens to the primary, the change listener's included, reports
//! the history it found (registering it, as the first write there would), and so does every
//! sample of the feed's bound; when one differs
//! from the last, every follower is told ([`Follower::new_history`]) and drops what it
//! learnt from the other server: the feed's bound, heads and pages read ahead, the caches.
//! A read whose bound belongs to another history than the one now seen is read again
//! ([`ServerHistory::is`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sqlx::PgConnection;

use super::change::Follower;
use crate::metric_names::HISTORY_CHANGES;

/// PostgreSQL's `undefined_function`.
const UNDEFINED_FUNCTION: &str = "42883";

/// A registered history's id (never 0).
pub type HistoryId = i64;

/// Every history registered in the database behind `pool` (its own and those it was
/// forked from), with the history it is in now (`None` on a standby).
pub async fn registered(pool: &sqlx::PgPool) -> Result<(Vec<HistoryId>, Option<HistoryId>), sqlx::Error> {
    let (histories, here): (Option<Vec<HistoryId>>, Option<HistoryId>) =
        sqlx::query_as("select array_agg(history_id), read_model_server_history() from read_model_histories")
            .fetch_one(pool)
            .await?;
    Ok((histories.unwrap_or_default(), here))
}

/// What the process last saw, from which connection or sample.
#[derive(Default)]
pub struct ServerHistory {
    /// The history last seen; 0 before the first.
    current: AtomicI64,
    /// Whether anything was seen yet: the first look is not a change.
    seen: Mutex<bool>,
    /// Told of every change; weak, since they hold this.
    followers: Mutex<Vec<Weak<dyn Follower>>>,
}

impl ServerHistory {
    /// Tells `followers` of every change from now on.
    pub fn tell(&self, followers: &[Arc<dyn Follower>]) {
        let mut told = self.followers.lock().unwrap_or_else(PoisonError::into_inner);
        told.extend(followers.iter().map(Arc::downgrade));
    }

    /// The history last seen, if the server had one registered.
    pub fn current(&self) -> Option<HistoryId> {
        Some(self.current.load(Ordering::Acquire)).filter(|id| *id != 0)
    }

    /// Whether `history` is the one last seen: a read made under a bound of `history`
    /// came from the server that bound was sampled on.
    pub fn is(&self, history: HistoryId) -> bool {
        self.current.load(Ordering::Acquire) == history
    }

    /// Takes in the history a connection or a sample found; tells every follower when it is
    /// not the one seen before, and returns whether it changed. `None` (a standby, or a
    /// database without the schema) says nothing of the primary's history and changes
    /// nothing: a pooler that reached a standby now and then must not reset everything each
    /// time.
    pub fn saw(&self, history: Option<HistoryId>, where_seen: &str) -> bool {
        let Some(history) = history else { return false };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.current.swap(history, Ordering::AcqRel);
        let first = !*seen;
        *seen = true;
        if first || before == history {
            return false;
        }
        // Told while `seen` is held: two connections reporting two servers at once are
        // told in the order they swapped.
        metrics::counter!(HISTORY_CHANGES).increment(1);
        tracing::warn!(
            from = before,
            to = history,
            seen_by = where_seen,
            "the database is another history than before under the same address (a failover, the old primary \
             back, a restore); what was learnt of the other one is dropped"
        );
        let followers = self.followers.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for follower in followers.iter().filter_map(Weak::upgrade) {
            follower.new_history();
        }
        true
    }

    /// Asks the server `connection` is on for its registered history and takes it in;
    /// `where_seen` names the connection in the log.
    /// A database without the schema (not migrated yet) has no history to tell.
    pub async fn look(&self, connection: &mut PgConnection, where_seen: &str) -> Result<bool, sqlx::Error> {
        let history: Option<i64> =
            match sqlx::query_scalar("select read_model_server_history()").fetch_one(connection).await {
                Ok(history) => history,
                Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some(UNDEFINED_FUNCTION) => None,
                Err(error) => return Err(error),
            };
        Ok(self.saw(history, where_seen))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::reads::change::{Change, Channel};
    use crate::reads::freshness::Trust;

    #[derive(Default)]
    struct Counting {
        told: AtomicUsize,
        trust: Trust,
    }

    impl Follower for Counting {
        fn channel(&self) -> Channel {
            Channel::ReadModel
        }
        fn changed(&self, _: &Change) {}
        fn forget_everything(&self) {
            self.told.fetch_add(1, Ordering::Relaxed);
        }
        fn trust(&self) -> &Trust {
            &self.trust
        }
    }

    #[test]
    fn followers_are_told_of_a_change_of_history_and_only_of_a_change() {
        let history = ServerHistory::default();
        let follower = Arc::new(Counting::default());
        history.tell(&[follower.clone() as Arc<dyn Follower>]);
        assert!(!history.saw(Some(7), "test"), "the first look is not a change");
        assert!(!history.saw(Some(7), "test"));
        assert_eq!(follower.told.load(Ordering::Relaxed), 0);
        assert!(history.saw(Some(9), "test"));
        assert!(!history.saw(None, "test"), "a standby says nothing of the primary's history");
        assert!(!history.saw(Some(9), "test"));
        assert!(history.saw(Some(7), "test"));
        assert_eq!(follower.told.load(Ordering::Relaxed), 2);
        assert!(history.is(7) && !history.is(9));
        assert_eq!(history.current(), Some(7));
    }
}
