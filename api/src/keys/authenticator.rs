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
//!
//! A key whose hash was made under a previous pepper (one being rotated out), or whose
//! pepper was never recorded, is hashed again under the current pepper when it is used,
//! and written back in the same batches as last-used times: the request path never
//! writes. The write changes `secret_hmac`, so the row's notification evicts the stale
//! record from every process; the verified hashes are kept under the current pepper
//! from the start, so they need no change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

use super::store::{self, AuthRecord, Rehash};
use super::{Environment, Made, ParsedKey, Peppers, Scope, FINGERPRINT_LEN};
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
    /// The scope the request was authorized with ([`Principal::authorized_for`]): a request
    /// that holds the key while it waits needs it still.
    authorized: Option<Scope>,
}

impl Principal {
    fn of(record: &AuthRecord) -> Self {
        Self {
            key_id: record.id.clone(),
            workspace_id: record.workspace_id,
            scopes: record.scopes.iter().filter_map(|scope| Scope::parse(scope)).collect(),
            authorized: None,
        }
    }

    /// 403 unless the key carries `scope`; the principal authorized for it otherwise.
    pub fn authorized_for(mut self, scope: Scope) -> Result<Self, ApiError> {
        if self.scopes.contains(&scope) {
            self.authorized = Some(scope);
            Ok(self)
        } else {
            Err(ApiError::Forbidden(format!("This API key lacks the `{scope}` scope required by this route.")))
        }
    }
}

pub struct Authenticator {
    pool: PgPool,
    peppers: Peppers,
    /// The current pepper's fingerprint, made once rather than on every request.
    current_fingerprint: [u8; FINGERPRINT_LEN],
    environment: Environment,
    cache: RwLock<HashMap<String, Arc<AuthRecord>>>,
    /// Per key id: a lookup that raced with a change of its key keeps nothing.
    freshness: Freshness<String>,
    /// The secret hash of every key verified by this process, under the current pepper
    /// whichever pepper its record was hashed under, by key id: a lookup of a key whose
    /// presented secret matches is not charged to its address.
    verified: RwLock<HashMap<String, [u8; 32]>>,
    last_used: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Keys used since the last flush whose record is not yet hashed under the current
    /// pepper with its fingerprint recorded, by key id.
    rehashes: Mutex<HashMap<String, Rehash>>,
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
    pub fn new(pool: PgPool, peppers: Peppers, environment: Environment) -> Self {
        Self {
            pool,
            current_fingerprint: peppers.current().fingerprint(),
            peppers,
            environment,
            cache: RwLock::default(),
            freshness: Freshness::default(),
            verified: RwLock::default(),
            last_used: Mutex::default(),
            rehashes: Mutex::default(),
            evictions: watch::Sender::new(0),
        }
    }

    /// Wakes when any key's record changes (or every record may have): a request holding a
    /// key for long then checks it again ([`Authenticator::still_valid`]).
    pub fn watch_keys(&self) -> KeyChanges {
        KeyChanges { receiver: self.evictions.subscribe() }
    }

    /// The key `principal` was authenticated with, as it is now: 401 if it has been
    /// revoked, has expired or is gone since, 403 if it lost the scope the request was
    /// authorized for; for a request that held it while waiting. Its workspace is the
    /// record's now, which the caller compares with the one it served. From the cache,
    /// which a change of the key evicts within a second, or from the database.
    pub async fn still_valid(&self, principal: &Principal) -> Result<Principal, ApiError> {
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
        let current = Principal::of(&record);
        match principal.authorized {
            Some(scope) => current.authorized_for(scope),
            None => Ok(current),
        }
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
        let verified = record.and_then(|record| {
            let made = self.peppers.verify(&key, &record.secret_hmac)?;
            (record.environment() == Some(self.environment)).then_some((record, made))
        });
        let Some((record, made)) = verified else {
            if read {
                after_failed_lookup();
            }
            return Err(ApiError::Unauthorized(INVALID));
        };
        // A record hashed under a previous pepper, or whose pepper is unrecorded, is
        // written again under the current one once the key has authenticated.
        let stale =
            made == Made::Previous || record.pepper_fingerprint.as_deref() != Some(self.current_fingerprint.as_slice());
        // The hash under the current pepper: what the verified map holds (so that it stays
        // right once the record is re-hashed), and what a stale record is re-hashed to.
        let under_current = (read || stale).then(|| key.secret_hmac(self.peppers.current()));
        if let (true, Some(secret_hmac)) = (read, under_current) {
            self.write_verified().insert(record.id.clone(), secret_hmac);
        }
        let now = Utc::now();
        if record.revoked_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(REVOKED));
        }
        if record.expires_at.is_some_and(|at| at <= now) {
            return Err(ApiError::Unauthorized(EXPIRED));
        }
        self.lock_last_used().insert(record.id.clone(), now);
        // Only a key that authenticates is re-hashed: a refused one needs no pepper.
        if let (true, Some(new_hmac)) = (stale, under_current) {
            let rehash = Rehash { key_id: record.id.clone(), old_hmac: record.secret_hmac.clone(), new_hmac };
            self.lock_rehashes().insert(record.id.clone(), rehash);
        }
        Ok(Principal::of(&record))
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
        verified.get(&key.key_id).is_some_and(|secret_hmac| self.peppers.current().verify(key, secret_hmac))
    }

    fn write_verified(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, [u8; 32]>> {
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

    fn lock_rehashes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Rehash>> {
        self.rehashes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes collected last-used times and re-hashed keys every few seconds until the
    /// process ends.
    pub async fn flush_periodically(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(LAST_USED_FLUSH_EVERY);
        loop {
            ticker.tick().await;
            self.flush().await;
        }
    }

    /// Writes what the requests collected: last-used times and re-hashed keys.
    pub async fn flush(&self) {
        self.flush_last_used().await;
        self.flush_rehashes().await;
    }

    /// Writes the keys hashed again under the current pepper in one statement, and drops
    /// their stale records from this process's cache at once (the row's notification does
    /// the same everywhere, a moment later); on failure they are kept for the next attempt.
    async fn flush_rehashes(&self) {
        let batch: Vec<Rehash> = std::mem::take(&mut *self.lock_rehashes()).into_values().collect();
        if batch.is_empty() {
            return;
        }
        match store::record_rehashes(&self.pool, &batch, &self.current_fingerprint).await {
            Ok(changed) => {
                for key_id in changed {
                    self.freshness.changed(key_id.clone(), || self.write_cache().remove(&key_id));
                }
            }
            Err(error) => {
                tracing::warn!(%error, keys = batch.len(), "could not hash keys again under the current pepper; will retry");
                let mut pending = self.lock_rehashes();
                for rehash in batch {
                    // A newer use's is as good: both hold the current pepper's hash.
                    pending.entry(rehash.key_id.clone()).or_insert(rehash);
                }
            }
        }
    }

    /// Writes the collected last-used times in one statement; on failure they are kept
    /// for the next attempt.
    async fn flush_last_used(&self) {
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
