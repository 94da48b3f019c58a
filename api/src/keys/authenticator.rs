//! Verifies presented keys against an in-process cache of key records.
//!
//! The hot path reads no table: records are cached after first use, and a
//! `LISTEN lectern_api_keys` connection evicts a record the moment its row changes,
//! which is how a revocation reaches every API process within a second. While that
//! connection is down the cache is bypassed, so a missed notification can never keep a
//! revoked key alive. Last-used times are collected here and flushed in batches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::store::{self, AuthRecord};
use super::{Environment, ParsedKey, Pepper, Scope};
use crate::db::notifications::Invalidated;
use crate::error::ApiError;
use crate::operations::names::KEY_CACHE;

/// The channel `api_keys`' trigger notifies with the changed key id.
pub const KEY_CHANGES_CHANNEL: &str = "lectern_api_keys";
/// How often last-used times are written back.
const LAST_USED_FLUSH_EVERY: Duration = Duration::from_secs(5);

const MALFORMED: &str = "The X-API-Key header does not hold a Lectern API key (lk_<environment>_<key id>_<secret>).";
const INVALID: &str = "The API key is not valid.";
const REVOKED: &str = "The API key has been revoked.";
const EXPIRED: &str = "The API key has expired.";
const LIVE_ONLY: &str = "This is a test key; this deployment serves live keys only.";
const TEST_ONLY: &str = "This is a live key; this deployment serves test keys only.";

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
    /// Bumped on every eviction so a lookup that raced with one does not cache stale data.
    generation: AtomicU64,
    /// True only while the LISTEN connection is up; the cache is trusted only then.
    listening: AtomicBool,
    last_used: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl Invalidated for Authenticator {
    fn channel(&self) -> &'static str {
        KEY_CHANGES_CHANNEL
    }

    fn evict(&self, key_id: &str) {
        let mut cache = self.write_cache();
        cache.remove(key_id);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn forget_everything(&self) {
        let mut cache = self.write_cache();
        cache.clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn listening(&self) -> &AtomicBool {
        &self.listening
    }
}

impl Authenticator {
    pub fn new(pool: PgPool, pepper: Pepper, environment: Environment) -> Self {
        Self {
            pool,
            pepper,
            environment,
            cache: RwLock::default(),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            last_used: Mutex::default(),
        }
    }

    /// Checks a presented key: 401 for anything but a live, unexpired key of this
    /// deployment's environment whose secret matches; 503 if it cannot be looked up.
    /// `before_lookup` runs only when the key must be read from the database (not
    /// cached), and can refuse that lookup.
    pub async fn authenticate(
        &self,
        presented: &str,
        before_lookup: impl FnOnce() -> Result<(), ApiError>,
    ) -> Result<Principal, ApiError> {
        let key = ParsedKey::parse(presented).map_err(|_| ApiError::Unauthorized(MALFORMED))?;
        if key.environment != self.environment {
            return Err(ApiError::Unauthorized(match self.environment {
                Environment::Live => LIVE_ONLY,
                Environment::Test => TEST_ONLY,
            }));
        }
        let record = self.lookup(&key.key_id, before_lookup).await?.ok_or(ApiError::Unauthorized(INVALID))?;
        if !self.pepper.verify(&key, &record.secret_hmac) || record.environment() != Some(self.environment) {
            return Err(ApiError::Unauthorized(INVALID));
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

    async fn lookup(
        &self,
        key_id: &str,
        before_lookup: impl FnOnce() -> Result<(), ApiError>,
    ) -> Result<Option<Arc<AuthRecord>>, ApiError> {
        let trusted = self.trusted();
        if trusted {
            if let Some(hit) = self.read_cache().get(key_id) {
                metrics::counter!(KEY_CACHE, "result" => "hit").increment(1);
                return Ok(Some(hit.clone()));
            }
        }
        metrics::counter!(KEY_CACHE, "result" => if trusted { "miss" } else { "bypassed" }).increment(1);
        before_lookup()?;
        let generation = self.generation.load(Ordering::Acquire);
        let record = store::find_for_auth(&self.pool, key_id).await?.map(Arc::new);
        if let Some(record) = &record {
            let mut cache = self.write_cache();
            if trusted && self.generation.load(Ordering::Acquire) == generation {
                cache.insert(key_id.to_owned(), record.clone());
            }
        }
        Ok(record)
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
