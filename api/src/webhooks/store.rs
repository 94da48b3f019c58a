//! The webhook tables (`webhook_endpoints`, `webhook_deliveries`, `webhook_announced`):
//! every statement on them is here, so one file shows everything that reads or changes
//! them. First what the command line runs (endpoints as the operator registers them, the
//! delivery log); then what the [deliverer](super::deliverer) runs: leases, pending
//! deliveries, and the outcome of each attempt, which it records only while it holds the
//! endpoint's lease.

use std::time::Duration;

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
    /// Names the pepper the secrets are sealed under (`webhooks list` shows which of its
    /// peppers that is).
    #[serde(skip)]
    pub pepper_fingerprint: Vec<u8>,
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
pub async fn create_endpoint(
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
pub async fn list_endpoints(pool: &PgPool, workspace_id: Option<Uuid>) -> Result<Vec<EndpointSummary>, sqlx::Error> {
    sqlx::query_as(
        "select e.id, e.workspace_id, e.url, e.resources, e.enabled, e.disabled_by, e.disabled_reason, e.created_at, \
                case when e.previous_secret_until > now() then e.previous_secret_until end as previous_secret_until, \
                (select count(*) from webhook_deliveries d where d.endpoint_id = e.id and d.state = 'pending') \
                    as pending, \
                (select max(delivered_at) from webhook_deliveries d where d.endpoint_id = e.id) as last_delivered_at, \
                e.pepper_fingerprint \
         from webhook_endpoints e where $1::uuid is null or e.workspace_id = $1 \
         order by e.workspace_id, e.created_at, e.id",
    )
    .bind(workspace_id)
    .fetch_all(pool)
    .await
}

/// Disables (`reason` given) or enables an endpoint; false when there is none. Enabling
/// gives up any delivery that failed for good: what changed meanwhile is announced anew.
pub async fn set_endpoint_enabled(pool: &PgPool, id: Uuid, disabled: Option<&str>) -> Result<bool, sqlx::Error> {
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
    overlap: Duration,
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
pub async fn delete_endpoint(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("delete from webhook_endpoints where id = $1").bind(id).execute(pool).await?;
    Ok(deleted.rows_affected() == 1)
}

/// An endpoint's latest deliveries, newest first.
pub async fn latest_deliveries(
    pool: &PgPool,
    endpoint_id: Uuid,
    limit: i64,
) -> Result<Vec<DeliverySummary>, sqlx::Error> {
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

/// An endpoint whose lease a process holds.
#[derive(Debug, sqlx::FromRow)]
pub struct ClaimedEndpoint {
    pub id: Uuid,
    pub workspace_id: Uuid,
}

/// How the deliverers' lease connections are named in `pg_stat_activity` (with the
/// owner after a space): each process keeps one open, so counting the names counts the
/// processes delivering for this database.
pub const LEASES_APPLICATION: &str = "lectern-api-webhooks-leases";

/// Renews `owner`'s leases and holds its share of the enabled endpoints: the endpoints
/// divided by the processes delivering for this database (rounded up). A process holding
/// more gives the rest up (the process that lacks them takes them at its next claim); one
/// holding fewer takes endpoints nobody holds, up to its share. Returns every endpoint
/// `owner` now holds. Runs on the lease connection, whose name counts this process.
pub async fn hold_share(pool: &PgPool, owner: Uuid, lease: Duration) -> Result<Vec<ClaimedEndpoint>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let mut held: Vec<ClaimedEndpoint> = sqlx::query_as(
        "update webhook_endpoints set lease_until = now() + make_interval(secs => $2) \
         where enabled and lease_owner = $1 and lease_until >= now() returning id, workspace_id",
    )
    .bind(owner)
    .bind(lease.as_secs_f64())
    .fetch_all(&mut *transaction)
    .await?;
    let (enabled, processes): (i64, i64) = sqlx::query_as(
        "select (select count(*) from webhook_endpoints where enabled), \
                (select count(distinct application_name) from pg_stat_activity \
                 where datname = current_database() and application_name like $1 || ' %')",
    )
    .bind(LEASES_APPLICATION)
    .fetch_one(&mut *transaction)
    .await?;
    // At least this process, whose own session may not be counted yet.
    let share = usize::try_from((enabled + processes.max(1) - 1) / processes.max(1)).unwrap_or(usize::MAX);
    if held.len() > share {
        held.sort_by_key(|endpoint| endpoint.id);
        let given_up: Vec<Uuid> = held.split_off(share).into_iter().map(|endpoint| endpoint.id).collect();
        sqlx::query("update webhook_endpoints set lease_until = null where lease_owner = $1 and id = any($2)")
            .bind(owner)
            .bind(&given_up)
            .execute(&mut *transaction)
            .await?;
    } else if held.len() < share {
        let taken: Vec<ClaimedEndpoint> = sqlx::query_as(
            "with claimable as ( \
                 select id from webhook_endpoints \
                 where enabled and (lease_until is null or lease_until < now()) \
                 order by id limit $3 for update skip locked) \
             update webhook_endpoints e set lease_owner = $1, lease_until = now() + make_interval(secs => $2) \
             from claimable where e.id = claimable.id returning e.id, e.workspace_id",
        )
        .bind(owner)
        .bind(lease.as_secs_f64())
        .bind(i64::try_from(share - held.len()).unwrap_or(i64::MAX))
        .fetch_all(&mut *transaction)
        .await?;
        held.extend(taken);
    }
    transaction.commit().await?;
    Ok(held)
}

/// Gives up `owner`'s leases, so that another process takes its endpoints over at once
/// rather than when the leases lapse.
pub async fn release_leases(pool: &PgPool, owner: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("update webhook_endpoints set lease_until = null where lease_owner = $1")
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

/// The endpoints held by `owner` that have a pending delivery due.
pub async fn endpoints_with_due_deliveries(pool: &PgPool, owner: Uuid) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "select distinct d.endpoint_id from webhook_deliveries d \
         join webhook_endpoints e on e.id = d.endpoint_id \
         where d.state = 'pending' and d.next_attempt_at <= now() and e.lease_owner = $1",
    )
    .bind(owner)
    .fetch_all(pool)
    .await
}

/// An endpoint disabled because its deliveries failed for too long.
#[derive(Debug, sqlx::FromRow)]
pub struct FailingEndpoint {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub disabled_reason: Option<String>,
}

/// The first `shown` endpoints (by id) disabled because their deliveries failed for too long.
pub async fn endpoints_disabled_by_failures(pool: &PgPool, shown: i64) -> Result<Vec<FailingEndpoint>, sqlx::Error> {
    sqlx::query_as(
        "select id, workspace_id, disabled_reason from webhook_endpoints where disabled_by = 'failures' \
         order by id limit $1",
    )
    .bind(shown)
    .fetch_all(pool)
    .await
}

/// Enabled endpoints whose secrets are sealed under none of `fingerprints` (the peppers a
/// process has): it cannot sign for them. Their number, and the first `shown`.
pub async fn endpoints_sealed_under_other_peppers(
    pool: &PgPool,
    fingerprints: &[Vec<u8>],
    shown: i64,
) -> Result<(i64, Vec<(Uuid, Uuid)>), sqlx::Error> {
    let rows: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
        "select id, workspace_id, count(*) over () from webhook_endpoints \
         where enabled and pepper_fingerprint <> all($1) order by id limit $2",
    )
    .bind(fingerprints)
    .bind(shown)
    .fetch_all(pool)
    .await?;
    let count = rows.first().map_or(0, |row| row.2);
    Ok((count, rows.into_iter().map(|(id, workspace_id, _)| (id, workspace_id)).collect()))
}

/// What an endpoint's secrets are sealed as: both secrets and the pepper's fingerprint.
pub struct Sealed<'a> {
    pub secret: &'a [u8],
    pub previous_secret: Option<&'a [u8]>,
    pub pepper_fingerprint: &'a [u8],
}

/// The endpoint's secrets sealed again as `now`, if they are still sealed as `was` (a
/// rotation or another process's reseal meanwhile wins).
pub async fn reseal(pool: &PgPool, id: Uuid, was: &Sealed<'_>, now: &Sealed<'_>) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "update webhook_endpoints set secret_sealed = $4, previous_secret_sealed = $5, pepper_fingerprint = $6 \
         where id = $1 and secret_sealed = $2 and pepper_fingerprint = $3",
    )
    .bind(id)
    .bind(was.secret)
    .bind(was.pepper_fingerprint)
    .bind(now.secret)
    .bind(now.previous_secret)
    .bind(now.pepper_fingerprint)
    .execute(pool)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// How many endpoints are disabled because their deliveries failed for too long.
pub async fn count_endpoints_disabled_by_failures(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from webhook_endpoints where disabled_by = 'failures'").fetch_one(pool).await
}

/// Deletes the delivered and failed deliveries created more than `kept_for` ago; pending
/// ones stay, however old.
pub async fn prune_delivery_log(pool: &PgPool, kept_for: Duration) -> Result<(), sqlx::Error> {
    sqlx::query(
        "delete from webhook_deliveries where state <> 'pending' and created_at < now() - make_interval(secs => $1)",
    )
    .bind(kept_for.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// An endpoint as the deliverer's look needs it.
#[derive(sqlx::FromRow)]
pub struct HeldEndpoint {
    pub workspace_id: Uuid,
    pub url: String,
    pub resources: Vec<String>,
    pub secret_sealed: Vec<u8>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub pepper_fingerprint: Vec<u8>,
}

/// The endpoint `id` if it is enabled and `owner` holds its lease.
pub async fn held_endpoint(pool: &PgPool, id: Uuid, owner: Uuid) -> Result<Option<HeldEndpoint>, sqlx::Error> {
    sqlx::query_as(
        "select workspace_id, url, resources, secret_sealed, previous_secret_sealed, previous_secret_until, \
                pepper_fingerprint \
         from webhook_endpoints where id = $1 and enabled and lease_owner = $2",
    )
    .bind(id)
    .bind(owner)
    .fetch_optional(pool)
    .await
}

/// Coalescing: when the feed transaction `through` is newer than what the endpoint was
/// last told about `resource`, creates its pending delivery of `resource`, or raises the
/// one already pending to `through`.
pub async fn raise_pending_delivery(
    pool: &PgPool,
    endpoint_id: Uuid,
    resource: Resource,
    through: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into webhook_deliveries (id, endpoint_id, resource, through) \
         select $1, $2, $3, $4 where $4 > coalesce( \
             (select through from webhook_announced where endpoint_id = $2 and resource = $3), 0) \
         on conflict (endpoint_id, resource) where state = 'pending' \
         do update set through = greatest(webhook_deliveries.through, excluded.through)",
    )
    .bind(new_delivery_id())
    .bind(endpoint_id)
    .bind(resource.as_str())
    .bind(through)
    .execute(pool)
    .await?;
    Ok(())
}

/// A new `webhook-id`.
fn new_delivery_id() -> String {
    format!("msg_{}", Uuid::new_v4().simple())
}

/// A pending delivery whose attempt is due.
#[derive(Debug, sqlx::FromRow)]
pub struct DueDelivery {
    pub id: String,
    pub resource: String,
    pub created_at: DateTime<Utc>,
}

/// At most `limit` of the endpoint's pending deliveries that are due, the longest due first.
pub async fn due_deliveries(pool: &PgPool, endpoint_id: Uuid, limit: i64) -> Result<Vec<DueDelivery>, sqlx::Error> {
    sqlx::query_as(
        "select id, resource, created_at from webhook_deliveries \
         where endpoint_id = $1 and state = 'pending' and next_attempt_at <= now() \
         order by next_attempt_at limit $2",
    )
    .bind(endpoint_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// How soon the endpoint's next pending delivery is due (zero when one is overdue); `None`
/// when none is pending.
pub async fn next_due_in(pool: &PgPool, endpoint_id: Uuid) -> Result<Option<Duration>, sqlx::Error> {
    let seconds: Option<f64> = sqlx::query_scalar(
        "select extract(epoch from min(next_attempt_at) - now())::float8 from webhook_deliveries \
         where endpoint_id = $1 and state = 'pending'",
    )
    .bind(endpoint_id)
    .fetch_one(pool)
    .await?;
    Ok(seconds.map(|seconds| Duration::from_secs_f64(seconds.max(0.0))))
}

/// Records that the receiver answered `status` (2xx) to the pending delivery
/// `delivery_id`, and raises what the endpoint was told about `resource` to what the
/// delivery announced, in one transaction. Returns the seconds from the delivery's
/// creation to now; `None`, recording nothing, unless the delivery is pending and `owner`
/// holds the endpoint's lease.
pub async fn record_delivered(
    pool: &PgPool,
    owner: Uuid,
    endpoint_id: Uuid,
    delivery_id: &str,
    resource: Resource,
    status: i32,
) -> Result<Option<f64>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let delivered: Option<(i64, f64)> = sqlx::query_as(
        "update webhook_deliveries d set state = 'delivered', delivered_at = now(), attempts = attempts + 1, \
                first_attempt_at = coalesce(first_attempt_at, now()), last_attempt_at = now(), \
                last_status = $2, last_error = null \
         from webhook_endpoints e \
         where d.id = $1 and d.state = 'pending' and e.id = d.endpoint_id and e.lease_owner = $3 \
         returning d.through, extract(epoch from now() - d.created_at)::float8",
    )
    .bind(delivery_id)
    .bind(status)
    .bind(owner)
    .fetch_optional(&mut *transaction)
    .await?;
    if let Some((through, _)) = delivered {
        sqlx::query(
            "insert into webhook_announced (endpoint_id, resource, through) values ($1, $2, $3) \
             on conflict (endpoint_id, resource) \
             do update set through = greatest(webhook_announced.through, excluded.through)",
        )
        .bind(endpoint_id)
        .bind(resource.as_str())
        .bind(through)
        .execute(&mut *transaction)
        .await?;
    }
    transaction.commit().await?;
    Ok(delivered.map(|(_, seconds)| seconds))
}

/// A failed attempt, as recorded.
#[derive(Debug, PartialEq, Eq)]
pub struct RecordedFailure {
    /// The delivery's attempts, this one included.
    pub attempts: i32,
    /// The retry period is over: the delivery failed for good.
    pub gave_up: bool,
}

/// Records a failed attempt of the pending delivery `delivery_id` (`status` when the
/// receiver answered), failing the delivery for good once `retry_for` has passed since its
/// first attempt. `None`, recording nothing, unless the delivery is pending and `owner`
/// holds the endpoint's lease.
pub async fn record_failed_attempt(
    pool: &PgPool,
    owner: Uuid,
    delivery_id: &str,
    status: Option<i32>,
    error: &str,
    retry_for: Duration,
) -> Result<Option<RecordedFailure>, sqlx::Error> {
    let recorded: Option<(i32, String)> = sqlx::query_as(
        "update webhook_deliveries d set attempts = attempts + 1, last_attempt_at = now(), \
                first_attempt_at = coalesce(first_attempt_at, now()), last_status = $2, last_error = $3, \
                state = case when coalesce(first_attempt_at, now()) + make_interval(secs => $4) <= now() \
                             then 'failed' else 'pending' end \
         from webhook_endpoints e \
         where d.id = $1 and d.state = 'pending' and e.id = d.endpoint_id and e.lease_owner = $5 \
         returning d.attempts, d.state",
    )
    .bind(delivery_id)
    .bind(status)
    .bind(error)
    .bind(retry_for.as_secs_f64())
    .bind(owner)
    .fetch_optional(pool)
    .await?;
    Ok(recorded.map(|(attempts, state)| RecordedFailure { attempts, gave_up: state == "failed" }))
}

/// Disables an endpoint whose deliveries failed for too long, saying why for `list` and
/// readiness.
pub async fn disable_after_failures(pool: &PgPool, endpoint_id: Uuid, reason: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update webhook_endpoints set enabled = false, disabled_by = 'failures', disabled_reason = $2 where id = $1",
    )
    .bind(endpoint_id)
    .bind(reason)
    .execute(pool)
    .await?;
    Ok(())
}

/// Makes the delivery due again `delay` from now.
pub async fn schedule_retry(pool: &PgPool, delivery_id: &str, delay: Duration) -> Result<(), sqlx::Error> {
    sqlx::query("update webhook_deliveries set next_attempt_at = now() + make_interval(secs => $2) where id = $1")
        .bind(delivery_id)
        .bind(delay.as_secs_f64())
        .execute(pool)
        .await?;
    Ok(())
}
