//! Verifies presented keys against an in-process cache of key records.
//!
//! The hot path reads no table: records are cached after first use, and a
//! `LISTEN lectern_api_keys` connection evicts a record the moment its row changes
//! (every record at a `TRUNCATE`), which is how a revocation reaches every API process
//! within a second. While that connection is down, or not proved alive by its
//! heartbeat, the cache is bypassed, so a missed notification can never keep a revoked
//! key alive. Last-used times are collected here and flushed in batches.
//!
//! Lookups that reach the database are limited per client address only until the
//! key has been verified once: this process remembers each verified key's secret hash
//! (a fact, not a permission: the record is still read and checked every time), so a
//! real key is never refused by that limit, even while the cache is bypassed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

use super::store::{self, AuthRecord};
use super::{Environment, ParsedKey, Pepper, Scope};
use crate::error::ApiError;
use crate::metric_names::KEY_CACHE;
use crate::reads::change::{Change, Channel, Follower};
use crate::reads::freshness::{Freshness, Trust};

/// How often last-used times are written back.
const LAST_USED_FLUSH_EVERY: Duration = Duration::from_secs(5);

const MALFORMED: &str = "The X-API-Key header does not hold a Lectern API key (lk_<environment>_<key id>_<secret>).";
const INVALID: &str = "The API key is not valid.";
const REVOKED: &str = "The API key has been revoked.";
const EXPIRED: &str = "The API key has expired.";
const LIVE_ONLY: &str = "This is a test key; this deployment serves live keys only.";
const TEST_ONLY: &str = "This is a live key; this deployment serves test keys only.";

/// A request's view of key changes, from [`Authenticator::watch_keys`].
pub struct KeyChanges {
    receiver: watch::Receiver<u64>,
}

impl KeyChanges {
    /// Returns once a key's record has changed since this view was taken or last returned.
    pub async fn changed(&mut self) {
        if self.receiver.changed().await.is_err() {
            // The authenticator outlives every request; without it nothing changes.
            std::future::pending::<()>().await;
        }
    }
}

/// Who is calling: the workspace every query is confined to, and what they may read.
#[derive(Clone, Debug)]
pub struct Principal {
    pub key_id: String,
    pub workspace_id: Uuid,
    scopes: Vec<Scope>,
}

impl Principal {
    /// 403 unless the key carries `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("This API key lacks the `{scope}` scope required by this route.")))
        }
    }
}

pub struct Authenticator {
    pool: PgPool,
    pepper: Pepper,
    environment: Environment,
    cache: RwLock<HashMap<String, Arc<AuthRecord>>>,
    /// Per key id: a lookup that raced with a change of its key keeps nothing.
    freshness: Freshness<String>,
    /// The secret hash of every key verified by this process, by key id: a lookup of
    /// a key whose presented secret matches is not charged to its address.
    verified: RwLock<HashMap<String, Vec<u8>>>,
    last_used: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Moves on every eviction: requests that wait (a long poll) watch it, so that a key
    /// revoked meanwhile is refused at once rather than when the wait ends.
    evictions: watch::Sender<u64>,
}

impl Follower for Authenticator {
    fn channel(&self) -> Channel {
        Channel::Keys
    }

    fn changed(&self, change: &Change) {
        match change {
            Change::Key(key_id) => self.freshness.changed(key_id.clone(), || self.write_cache().remove(key_id)),
            _ => {
                self.write_verified().clear();
                return self.forget_everything();
            }
        };
        self.evictions.send_modify(|count| *count += 1);
    }

    fn forget_everything(&self) {
        self.freshness.everything_changed(|| self.write_cache().clear());
        self.evictions.send_modify(|count| *count += 1);
    }

    fn trust(&self) -> &Trust {
        self.freshness.trust()
    }
}

impl Authenticator {
    pub fn new(pool: PgPool, pepper: Pepper, environment: Environment) -> Self {
        Self {
            pool,
            pepper,
            environment,
            cache: RwLock::default(),
            freshness: Freshness::default(),
            verified: RwLock::default(),
            last_used: Mutex::default(),
            evictions: watch::Sender::new(0),
        }
    }

    /// Wakes when any key's record changes (or every record may have): a request holding a
    /// key for long then checks it again ([`Authenticator::still_valid`]).
    pub fn watch_keys(&self) -> KeyChanges {
        KeyChanges { receiver: self.evictions.subscribe() }
    }

    /// 401 if the key `principal` was authenticated with has been revoked, has expired or
    /// is gone since: for a request that held it while waiting. From the cache, which a
    /// revocation evicts within a second, or from the database.
    pub async fn still_valid(&self, principal: &Principal) -> Result<(), ApiError> {
        let cached = if self.freshness.trusted() { self.read_cache().get(&principal.key_id).cloned() } else { None };
        let record = match cached {
            Some(record) => Some(record),
            None => {
                let ticket = self.freshness.ticket(&principal.key_id);
                let record = store::find_for_auth(&self.pool, &principal.key_id).await?.map(Arc::new);
                if let Some(record) = &record {
                    self.freshness.keep_if_unchanged(&principal.key_id, ticket, || {
                        self.write_cache().insert(principal.key_id.clone(), record.clone())
                    });
                }
                record
            }
        };
        let Some(record) = record else { return Err(ApiError::Unauthorized(INVALID)) };
        let now = Utc::now();
        if record.revoked_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(REVOKED));
        }
        if record.expires_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(EXPIRED));
        }
        Ok(())
    }

    /// Checks a presented key: 401 for anything but a live, unexpired key of this
    /// deployment's environment whose secret matches; 503 if it cannot be looked up.
    /// `before_unverified_lookup` runs only when a key this process has not verified
    /// before must be read from the database, and can refuse that lookup;
    /// `after_failed_lookup` runs when such a read found no key or a wrong secret.
    pub async fn authenticate(
        &self,
        presented: &str,
        before_unverified_lookup: impl FnOnce() -> Result<(), ApiError>,
        after_failed_lookup: impl FnOnce(),
    ) -> Result<Principal, ApiError> {
        let key = ParsedKey::parse(presented).map_err(|_| ApiError::Unauthorized(MALFORMED))?;
        if key.environment != self.environment {
            return Err(ApiError::Unauthorized(match self.environment {
                Environment::Live => LIVE_ONLY,
                Environment::Test => TEST_ONLY,
            }));
        }
        let (record, read) = self.lookup(&key, before_unverified_lookup).await?;
        let Some(record) = record.filter(|record| {
            self.pepper.verify(&key, &record.secret_hmac) && record.environment() == Some(self.environment)
        }) else {
            if read {
                after_failed_lookup();
            }
            return Err(ApiError::Unauthorized(INVALID));
        };
        if read {
            self.write_verified().insert(record.id.clone(), record.secret_hmac.clone());
        }
        let now = Utc::now();
        if record.revoked_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(REVOKED));
        }
        if record.expires_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(EXPIRED));
        }
        self.lock_last_used().insert(record.id.clone(), now);
        Ok(Principal {
            key_id: record.id.clone(),
            workspace_id: record.workspace_id,
            scopes: record.scopes.iter().filter_map(|scope| Scope::parse(scope)).collect(),
        })
    }

    /// The key's record, from the cache or the database, and whether it was read from
    /// the database.
    async fn lookup(
        &self,
        key: &ParsedKey,
        before_unverified_lookup: impl FnOnce() -> Result<(), ApiError>,
    ) -> Result<(Option<Arc<AuthRecord>>, bool), ApiError> {
        let key_id = &key.key_id;
        let trusted = self.freshness.trusted();
        if trusted {
            if let Some(hit) = self.read_cache().get(key_id) {
                metrics::counter!(KEY_CACHE, "result" => "hit").increment(1);
                return Ok((Some(hit.clone()), false));
            }
        }
        metrics::counter!(KEY_CACHE, "result" => if trusted { "miss" } else { "bypassed" }).increment(1);
        if !self.verified_before(key) {
            before_unverified_lookup()?;
        }
        let ticket = self.freshness.ticket(key_id);
        let record = store::find_for_auth(&self.pool, key_id).await?.map(Arc::new);
        if let Some(record) = &record {
            self.freshness
                .keep_if_unchanged(key_id, ticket, || self.write_cache().insert(key_id.clone(), record.clone()));
        }
        Ok((record, true))
    }

    /// Whether `key`'s secret is the one this process verified for its id before.
    fn verified_before(&self, key: &ParsedKey) -> bool {
        let verified = self.verified.read().unwrap_or_else(PoisonError::into_inner);
        verified.get(&key.key_id).is_some_and(|secret_hmac| self.pepper.verify(key, secret_hmac))
    }

    fn write_verified(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Vec<u8>>> {
        self.verified.write().unwrap_or_else(PoisonError::into_inner)
    }

    // A panic while holding these locks cannot leave the maps inconsistent (each
    // operation is a single insert or remove), so a poisoned lock is still usable.
    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<AuthRecord>>> {
        self.cache.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_cache(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<AuthRecord>>> {
        self.cache.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_last_used(&self) -> std::sync::MutexGuard<'_, HashMap<String, DateTime<Utc>>> {
        self.last_used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes collected last-used times every few seconds until the process ends.
    pub async fn flush_last_used_periodically(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(LAST_USED_FLUSH_EVERY);
        loop {
            ticker.tick().await;
            self.flush_last_used().await;
        }
    }

    /// Writes the collected last-used times in one statement; on failure they are kept
    /// for the next attempt.
    pub async fn flush_last_used(&self) {
        let batch: Vec<(String, DateTime<Utc>)> = std::mem::take(&mut *self.lock_last_used()).into_iter().collect();
        if batch.is_empty() {
            return;
        }
        if let Err(error) = store::record_last_used(&self.pool, &batch).await {
            tracing::warn!(%error, keys = batch.len(), "could not record last-used times; will retry");
            let mut pending = self.lock_last_used();
            for (id, at) in batch {
                let entry = pending.entry(id).or_insert(at);
                *entry = (*entry).max(at);
            }
        }
    }
}
