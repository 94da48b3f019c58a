//! Retrieves (`getContact`, `getItem`): one active record of the caller's workspace by
//! id, read in batches with the retrieves that arrive beside it ([`lookups`]).

pub mod lookups;

use std::sync::Arc;

use lectern_schema::json::{write_str, WriteJson};
use sqlx::postgres::PgRow;
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::reads::replicas::Reads;
use crate::resources::contacts::Contacts;
use crate::resources::items::Items;
use crate::resources::{Resource, RECORD_BYTES};
use lookups::Lookups;

/// Room for the body around the record: the request id.
const ENVELOPE_BYTES: usize = 192;

/// What retrieves need, shared by every request of a process: each resource's batches.
pub struct Retrieves {
    pub contacts: Arc<Lookups<Contacts>>,
    pub items: Arc<Lookups<Items>>,
}

impl Retrieves {
    pub fn new(pool: &PgPool, reads: &Arc<Reads>) -> Self {
        Self { contacts: Lookups::new(pool.clone(), reads.clone()), items: Lookups::new(pool.clone(), reads.clone()) }
    }

    /// The body of the active contact `id` of `workspace_id`, answering request
    /// `request_id`; `None` when there is no such contact.
    pub async fn contact(&self, workspace_id: Uuid, id: Uuid, request_id: &str) -> Result<Option<Vec<u8>>, ApiError> {
        retrieve(&self.contacts, workspace_id, id, request_id).await
    }

    /// As [`Retrieves::contact`], for an item.
    pub async fn item(&self, workspace_id: Uuid, id: Uuid, request_id: &str) -> Result<Option<Vec<u8>>, ApiError> {
        retrieve(&self.items, workspace_id, id, request_id).await
    }
}

async fn retrieve<R: Resource + 'static>(
    lookups: &Arc<Lookups<R>>,
    workspace_id: Uuid,
    id: Uuid,
    request_id: &str,
) -> Result<Option<Vec<u8>>, ApiError> {
    let row = lookups.find(workspace_id, id).await?;
    row.map(|row| record_body::<R>(&row, request_id)).transpose()
}

/// `{"data":…,"requestId":…}`: the body of a retrieve, documented as the resource's
/// envelope type.
fn record_body<R: Resource>(row: &PgRow, request_id: &str) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::with_capacity(RECORD_BYTES + ENVELOPE_BYTES);
    body.extend_from_slice(b"{\"data\":");
    R::record(row)?.write_json(&mut body)?;
    body.extend_from_slice(b",\"requestId\":");
    write_str(&mut body, request_id);
    body.push(b'}');
    Ok(body)
}
