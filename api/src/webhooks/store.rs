//! The webhook tables: endpoints as the operator registers them, and their deliveries.
//! Every statement the command line and the deliverer run on them is here.

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::secret::{SealError, SigningSecret};
use super::Resource;
use crate::keys::Peppers;

/// An endpoint as `webhooks list` shows it (never its secret).
#[derive(Debug, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSummary {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub url: String,
    pub resources: Vec<String>,
    pub enabled: bool,
    pub disabled_by: Option<String>,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Until when the secret before the last rotation still signs beside the current one.
    pub previous_secret_until: Option<DateTime<Utc>>,
    /// Deliveries waiting (at most one per resource).
    pub pending: i64,
    pub last_delivered_at: Option<DateTime<Utc>>,
}

/// A delivery as `webhooks deliveries` shows it.
#[derive(Debug, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct DeliverySummary {
    pub id: String,
    pub endpoint_id: Uuid,
    pub resource: String,
    pub state: String,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Registers an endpoint; returns its id and its secret, which is shown once.
pub async fn create(
    pool: &PgPool,
    peppers: &Peppers,
    workspace_id: Uuid,
    url: &str,
    resources: &[Resource],
) -> Result<(Uuid, SecretString), sqlx::Error> {
    let id = Uuid::new_v4();
    let secret = SigningSecret::generate();
    let pepper = peppers.current();
    let mut resources: Vec<&str> = resources.iter().map(|resource| resource.as_str()).collect();
    resources.sort_unstable();
    resources.dedup();
    sqlx::query(
        "insert into webhook_endpoints (id, workspace_id, url, resources, secret_sealed, pepper_fingerprint) \
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(workspace_id)
    .bind(url)
    .bind(&resources)
    .bind(secret.seal(pepper, id))
    .bind(pepper.fingerprint().as_slice())
    .execute(pool)
    .await?;
    Ok((id, secret.reveal()))
}

/// A workspace's endpoints, or every workspace's.
pub async fn list(pool: &PgPool, workspace_id: Option<Uuid>) -> Result<Vec<EndpointSummary>, sqlx::Error> {
    sqlx::query_as(
        "select e.id, e.workspace_id, e.url, e.resources, e.enabled, e.disabled_by, e.disabled_reason, e.created_at, \
                case when e.previous_secret_until > now() then e.previous_secret_until end as previous_secret_until, \
                (select count(*) from webhook_deliveries d where d.endpoint_id = e.id and d.state = 'pending') \
                    as pending, \
                (select max(delivered_at) from webhook_deliveries d where d.endpoint_id = e.id) as last_delivered_at \
         from webhook_endpoints e where $1::uuid is null or e.workspace_id = $1 \
         order by e.workspace_id, e.created_at, e.id",
    )
    .bind(workspace_id)
    .fetch_all(pool)
    .await
}

/// Disables (`reason` given) or enables an endpoint; false when there is none. Enabling
/// gives up any delivery that failed for good: what changed meanwhile is announced anew.
pub async fn set_enabled(pool: &PgPool, id: Uuid, disabled: Option<&str>) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "update webhook_endpoints set enabled = $2 is null, \
                disabled_by = case when $2 is null then null else 'operator' end, disabled_reason = $2 \
         where id = $1",
    )
    .bind(id)
    .bind(disabled)
    .execute(pool)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Gives an endpoint a new secret, the old one signing beside it for `overlap`; `None`
/// when there is no such endpoint.
pub async fn rotate_secret(
    pool: &PgPool,
    peppers: &Peppers,
    id: Uuid,
    overlap: std::time::Duration,
) -> Result<Option<SecretString>, RotateError> {
    let mut transaction = pool.begin().await?;
    let current: Option<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("select secret_sealed, pepper_fingerprint from webhook_endpoints where id = $1 for update")
            .bind(id)
            .fetch_optional(&mut *transaction)
            .await?;
    let Some((sealed, fingerprint)) = current else { return Ok(None) };
    // Sealed again under the current pepper, so both secrets open with the same one.
    let previous = SigningSecret::open(&sealed, &fingerprint, peppers, id)?;
    let pepper = peppers.current();
    let secret = SigningSecret::generate();
    sqlx::query(
        "update webhook_endpoints set secret_sealed = $2, previous_secret_sealed = $3, \
                previous_secret_until = now() + make_interval(secs => $4), pepper_fingerprint = $5 \
         where id = $1",
    )
    .bind(id)
    .bind(secret.seal(pepper, id))
    .bind(previous.seal(pepper, id))
    .bind(overlap.as_secs_f64())
    .bind(pepper.fingerprint().as_slice())
    .execute(&mut *transaction)
    .await?;
    transaction.commit().await?;
    Ok(Some(secret.reveal()))
}

/// Why a secret could not be rotated.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The current secret does not open, so it cannot keep signing beside the new one.
    #[error(transparent)]
    Secret(#[from] SealError),
}

/// Deletes an endpoint and its delivery log; false when there is none.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("delete from webhook_endpoints where id = $1").bind(id).execute(pool).await?;
    Ok(deleted.rows_affected() == 1)
}

/// An endpoint's latest deliveries, newest first.
pub async fn deliveries(pool: &PgPool, endpoint_id: Uuid, limit: i64) -> Result<Vec<DeliverySummary>, sqlx::Error> {
    sqlx::query_as(
        "select id, endpoint_id, resource, state, attempts, created_at, last_attempt_at, last_status, last_error, \
                case when state = 'pending' then next_attempt_at end as next_attempt_at, delivered_at \
         from webhook_deliveries where endpoint_id = $1 order by created_at desc, id desc limit $2",
    )
    .bind(endpoint_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// What `redeliver` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// The delivery is pending again, due now.
    Scheduled,
    NoSuchDelivery,
    /// Another delivery of its endpoint and resource is pending, and will announce the same.
    AlreadyPending(String),
}

/// Sends a delivery again (same `webhook-id`), now.
pub async fn redeliver(pool: &PgPool, delivery_id: &str) -> Result<Redelivery, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let found: Option<(Uuid, String)> =
        sqlx::query_as("select endpoint_id, resource from webhook_deliveries where id = $1 for update")
            .bind(delivery_id)
            .fetch_optional(&mut *transaction)
            .await?;
    let Some((endpoint_id, resource)) = found else { return Ok(Redelivery::NoSuchDelivery) };
    let pending: Option<String> = sqlx::query_scalar(
        "select id from webhook_deliveries where endpoint_id = $1 and resource = $2 and state = 'pending' and id <> $3",
    )
    .bind(endpoint_id)
    .bind(&resource)
    .bind(delivery_id)
    .fetch_optional(&mut *transaction)
    .await?;
    if let Some(pending) = pending {
        return Ok(Redelivery::AlreadyPending(pending));
    }
    sqlx::query(
        "update webhook_deliveries set state = 'pending', next_attempt_at = now(), attempts = 0, \
                first_attempt_at = null, delivered_at = null where id = $1",
    )
    .bind(delivery_id)
    .execute(&mut *transaction)
    .await?;
    transaction.commit().await?;
    Ok(Redelivery::Scheduled)
}
