//! What the layers of one request learn about its caller, for the response headers
//! and the log line: set by the security scheme (key id, rate-limit standing), read
//! by the envelope when the response leaves.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;

use crate::rate_limit::Standing;

/// The caller as far as the request got.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// The verified key's id (its public part, never the secret).
    pub key_id: Option<String>,
    /// The verified key's workspace.
    pub workspace_id: Option<uuid::Uuid>,
    /// Where the key stands against its rate limit, once counted.
    pub standing: Option<Standing>,
    /// Set when the client address made too many uncached key lookups.
    pub lookup_retry_after_secs: Option<u64>,
}

tokio::task_local! {
    static CALLER: Arc<Mutex<Caller>>;
}

/// Runs `future` with an empty record of its caller; returns what was recorded. Not an
/// `async fn`, which would hold `future` twice (see `RequestId::scope`).
pub fn scope<F: std::future::Future>(future: F) -> impl std::future::Future<Output = (F::Output, Caller)> {
    let slot = Arc::new(Mutex::new(Caller::default()));
    CALLER.scope(slot.clone(), future).map(move |output| {
        let caller = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (output, caller)
    })
}

/// The current request's verified workspace, once its key was checked.
pub fn workspace_id() -> Option<uuid::Uuid> {
    CALLER.try_with(|slot| slot.lock().unwrap_or_else(PoisonError::into_inner).workspace_id).ok().flatten()
}

/// Updates the current request's caller record (no-op outside a request).
pub fn record(update: impl FnOnce(&mut Caller)) {
    let _ = CALLER.try_with(|slot| update(&mut slot.lock().unwrap_or_else(PoisonError::into_inner)));
}
