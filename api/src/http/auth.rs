//! The `WorkspaceApiKey` security scheme, one Rust type per scope.
//!
//! Each type's checker authenticates the key (401), then checks the route's scope
//! (403), so the type named in an operation's signature is what enforces its scope
//! (poem-openapi's `scope` attribute only documents). The checker runs before any
//! parameter is parsed, which gives the contract's order: 401 → 403 → 400.

use std::sync::Arc;

use poem::Request;
use poem_openapi::auth::ApiKey;
use poem_openapi::SecurityScheme;

use super::AppState;
use crate::error::ApiError;
use crate::keys::{Principal, Scope};

/// A workspace API key with the `contacts:read` scope, sent in the `X-API-Key` header.
/// Keys look like `lk_live_<key id>_<secret>`; the workspace is the key's.
#[derive(Debug, SecurityScheme)]
#[oai(rename = "WorkspaceApiKey", ty = "api_key", key_name = "X-API-Key", key_in = "header", checker = "contacts_read")]
pub struct ContactsReader(pub Principal);

async fn contacts_read(request: &Request, key: ApiKey) -> poem::Result<Principal> {
    authorize(request, &key.key, Scope::ContactsRead).await
}

/// A workspace API key with the `items:read` scope, sent in the `X-API-Key` header.
#[derive(Debug, SecurityScheme)]
#[oai(rename = "WorkspaceApiKey", ty = "api_key", key_name = "X-API-Key", key_in = "header", checker = "items_read")]
pub struct ItemsReader(pub Principal);

async fn items_read(request: &Request, key: ApiKey) -> poem::Result<Principal> {
    authorize(request, &key.key, Scope::ItemsRead).await
}

async fn authorize(request: &Request, presented: &str, scope: Scope) -> poem::Result<Principal> {
    let state = request
        .data::<Arc<AppState>>()
        .ok_or_else(|| ApiError::Internal("application state is not attached to the request".into()))?;
    let principal = state.authenticator.authenticate(presented).await?;
    principal.require(scope)?;
    Ok(principal)
}
