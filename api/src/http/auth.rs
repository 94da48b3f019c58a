//! The `WorkspaceApiKey` security scheme, one Rust type per scope.
//!
//! Each type's checker authenticates the key (401), then checks the route's scope
//! (403), so the type named in an operation's signature is what enforces its scope
//! (poem-openapi's `scope` attribute only documents). The checker runs before any
//! parameter is parsed, which gives the contract's order: 401 → 429 → 403 → 400.

use std::sync::Arc;

use poem::Request;
use poem_openapi::auth::ApiKey;
use poem_openapi::SecurityScheme;

use super::caller;
use crate::app::AppState;
use crate::error::ApiError;
use crate::keys::{ParsedKey, Principal, Scope};

/// The header the key travels in.
const KEY_HEADER: &str = "x-api-key";

/// A workspace API key with the `contacts:read` scope, sent in the `X-API-Key` header.
/// Keys look like `lk_live_<key id>_<secret>`; the workspace is the key's.
#[derive(Debug, SecurityScheme)]
#[oai(rename = "WorkspaceApiKey", ty = "api_key", key_name = "X-API-Key", key_in = "header", checker = "contacts_read")]
pub struct ContactsReader(pub Principal);

// Boxed: the key's lookup is a large future, and poem-openapi keeps a checker's future
// inside the operation's, which a long poll holds while it waits.
async fn contacts_read(request: &Request, key: ApiKey) -> poem::Result<Principal> {
    Box::pin(authorize(request, &key.key, Scope::ContactsRead)).await
}

/// A workspace API key with the `items:read` scope, sent in the `X-API-Key` header.
#[derive(Debug, SecurityScheme)]
#[oai(rename = "WorkspaceApiKey", ty = "api_key", key_name = "X-API-Key", key_in = "header", checker = "items_read")]
pub struct ItemsReader(pub Principal);

async fn items_read(request: &Request, key: ApiKey) -> poem::Result<Principal> {
    Box::pin(authorize(request, &key.key, Scope::ItemsRead)).await
}

/// The contract's order: authenticate (401), rate limit (429), scope (403).
async fn authorize(request: &Request, presented: &str, scope: Scope) -> poem::Result<Principal> {
    // poem-openapi hands over the first of several; which key was meant is unknowable.
    if request.headers().get_all(KEY_HEADER).iter().nth(1).is_some() {
        return Err(ApiError::Unauthorized("Send exactly one X-API-Key header.").into());
    }
    let state = request
        .data::<Arc<AppState>>()
        .ok_or_else(|| ApiError::Internal("application state is not attached to the request".into()))?;
    let address = request.remote_addr().as_socket_addr().map(|address| address.ip());
    let limit_lookups = || match address.map(|address| state.rate_limits.check_lookup(address)) {
        Some(Err(retry_after_secs)) => {
            caller::record(|caller| caller.lookup_retry_after_secs = Some(retry_after_secs));
            metrics::counter!(crate::metric_names::RATE_LIMITED, "limit" => "key_lookups_per_address").increment(1);
            Err(ApiError::RateLimited { retry_after_secs })
        }
        _ => Ok(()),
    };
    let count_failure = || {
        if let Some(address) = address {
            state.rate_limits.count_failed_lookup(address);
        }
    };
    let principal = match state.authenticator.authenticate(presented, limit_lookups, count_failure).await {
        Ok(principal) => principal,
        Err(refused) => {
            // The request's log line names the refused key by its public id (never its
            // secret), so an operator can tell which integration is locked out.
            if let Ok(key) = ParsedKey::parse(presented) {
                caller::record(|caller| caller.key_id = Some(key.key_id));
            }
            return Err(refused.into());
        }
    };
    let standing = state.rate_limits.check_key(&principal.key_id);
    caller::record(|caller| {
        caller.key_id = Some(principal.key_id.clone());
        caller.workspace_id = Some(principal.workspace_id);
        caller.standing = Some(standing);
    });
    if let Some(retry_after_secs) = standing.retry_after_secs {
        metrics::counter!(crate::metric_names::RATE_LIMITED, "limit" => "per_key").increment(1);
        return Err(ApiError::RateLimited { retry_after_secs }.into());
    }
    Ok(principal.authorized_for(scope)?)
}
