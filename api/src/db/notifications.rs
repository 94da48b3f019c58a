//! Caches kept fresh by PostgreSQL notifications: one LISTEN connection, outside the
//! request pool, serves every cache of the process.
//!
//! A notification can be missed while the connection is down, so a cache is trusted
//! only while it is up: on every disconnect and every (re)connect each cache forgets
//! everything it holds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;

/// A cache that one notification channel invalidates.
pub trait Invalidated: Send + Sync {
    /// The channel whose payloads name what changed.
    fn channel(&self) -> &'static str;
    /// Drops what `payload` names.
    fn evict(&self, payload: &str);
    /// Drops every entry.
    fn forget_everything(&self);
    /// The cache's flag for "its channel is being listened to", which [`follow`] sets.
    fn listening(&self) -> &AtomicBool;

    /// Drops everything, and trusts the cache from now on only if `trusted`.
    fn reset(&self, trusted: bool) {
        self.forget_everything();
        self.listening().store(trusted, Ordering::Release);
    }

    /// Whether the cache may serve and keep entries.
    fn trusted(&self) -> bool {
        self.listening().load(Ordering::Acquire)
    }
}

/// Follows every cache's channel until the process ends, reconnecting with backoff.
pub async fn follow(pool: PgPool, caches: Vec<Arc<dyn Invalidated>>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match listen_until_disconnected(&pool, &caches).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(error) => tracing::warn!(
                %error,
                "change listener failed; keys and first pages are read from the database until it reconnects"
            ),
        }
        for cache in &caches {
            cache.reset(false);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn listen_until_disconnected(pool: &PgPool, caches: &[Arc<dyn Invalidated>]) -> Result<(), sqlx::Error> {
    // A listener holds its connection for good: it must not shrink the request pool.
    let own = PgPoolOptions::new().max_connections(1).connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await?;
    let channels: Vec<&str> = caches.iter().map(|cache| cache.channel()).collect();
    listener.listen_all(channels).await?;
    // Anything cached before this point may have missed a notification.
    for cache in caches {
        cache.reset(true);
    }
    tracing::debug!("listening for key and read-model changes");
    while let Some(notification) = listener.try_recv().await? {
        for cache in caches.iter().filter(|cache| cache.channel() == notification.channel()) {
            cache.evict(notification.payload());
        }
    }
    Ok(())
}
