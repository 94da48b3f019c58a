//! The `api_keys` table. Nothing here ever sees a key in clear: only key ids and
//! peppered hashes.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Environment, IssuedKey, Scope};

/// What the authenticator needs to decide on a key.
#[derive(Debug, sqlx::FromRow)]
pub struct AuthRecord {
    pub id: String,
    pub workspace_id: Uuid,
    pub scopes: Vec<String>,
    pub environment: String,
    pub secret_hmac: Vec<u8>,
    /// The fingerprint of the pepper `secret_hmac` was made under; `None` if unrecorded.
    pub pepper_fingerprint: Option<Vec<u8>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key as an operator sees it: everything but the secret's hash.
#[derive(Debug, sqlx::FromRow, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeySummary {
    pub id: String,
    pub workspace_id: Uuid,
    pub name: Option<String>,
    pub scopes: Vec<String>,
    pub environment: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    /// Which pepper the hash depends on, told by `keys list` from its fingerprint; the
    /// fingerprint itself is of no use to an operator.
    #[serde(skip)]
    pub pepper_fingerprint: Option<Vec<u8>>,
}

/// The attributes chosen when a key is created.
#[derive(Debug)]
pub struct NewKey<'a> {
    pub workspace_id: Uuid,
    pub name: Option<&'a str>,
    pub scopes: &'a [Scope],
    pub expires_at: Option<DateTime<Utc>>,
}

const SUMMARY_COLUMNS: &str =
    "id, workspace_id, name, scopes, environment, created_at, expires_at, revoked_at, last_used_at, pepper_fingerprint";

pub async fn insert(pool: &PgPool, issued: &IssuedKey, new: &NewKey<'_>) -> Result<KeySummary, sqlx::Error> {
    let mut scopes: Vec<&str> = new.scopes.iter().map(|scope| scope.as_str()).collect();
    scopes.sort_unstable();
    scopes.dedup();
    sqlx::query_as(&format!(
        "insert into api_keys (id, workspace_id, name, scopes, environment, secret_hmac, pepper_fingerprint, expires_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         returning {SUMMARY_COLUMNS}"
    ))
    .bind(&issued.key_id)
    .bind(new.workspace_id)
    .bind(new.name)
    .bind(&scopes)
    .bind(issued.environment.as_str())
    .bind(issued.secret_hmac.as_slice())
    .bind(issued.pepper_fingerprint.as_slice())
    .bind(new.expires_at)
    .fetch_one(pool)
    .await
}

/// The keys of `workspace_id`, or of every workspace.
pub async fn list(pool: &PgPool, workspace_id: Option<Uuid>) -> Result<Vec<KeySummary>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {SUMMARY_COLUMNS} from api_keys where $1::uuid is null or workspace_id = $1
         order by workspace_id, created_at, id"
    ))
    .bind(workspace_id)
    .fetch_all(pool)
    .await
}

/// What `keys revoke` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Revocation {
    Revoked(DateTime<Utc>),
    AlreadyRevoked(DateTime<Utc>),
    NoSuchKey,
}

pub async fn revoke(pool: &PgPool, key_id: &str) -> Result<Revocation, sqlx::Error> {
    // One statement, so two operators revoking at once both see a consistent answer.
    let row: Option<(DateTime<Utc>, bool)> = sqlx::query_as(
        "with target as (select id, revoked_at from api_keys where id = $1 for update),
              changed as (update api_keys set revoked_at = now()
                          where id = (select id from target where revoked_at is null)
                          returning revoked_at)
         select coalesce((select revoked_at from changed), (select revoked_at from target)),
                exists (select 1 from changed)
         from target",
    )
    .bind(key_id)
    .fetch_optional(pool)
    .await?;
    Ok(match row {
        None => Revocation::NoSuchKey,
        Some((at, true)) => Revocation::Revoked(at),
        Some((at, false)) => Revocation::AlreadyRevoked(at),
    })
}

pub async fn find_for_auth(pool: &PgPool, key_id: &str) -> Result<Option<AuthRecord>, sqlx::Error> {
    sqlx::query_as(
        "select id, workspace_id, scopes, environment, secret_hmac, pepper_fingerprint, expires_at, revoked_at
         from api_keys where id = $1",
    )
    .bind(key_id)
    .fetch_optional(pool)
    .await
}

/// One statement for a whole batch of last-used times; never moves a time backwards.
pub async fn record_last_used(pool: &PgPool, uses: &[(String, DateTime<Utc>)]) -> Result<(), sqlx::Error> {
    let (ids, times): (Vec<&str>, Vec<DateTime<Utc>>) = uses.iter().map(|(id, at)| (id.as_str(), *at)).unzip();
    sqlx::query(
        "update api_keys set last_used_at = greatest(last_used_at, used.at)
         from unnest($1::text[], $2::timestamptz[]) as used(id, at)
         where api_keys.id = used.id",
    )
    .bind(&ids)
    .bind(&times)
    .execute(pool)
    .await?;
    Ok(())
}

/// A key's hash made again under the current pepper, to be written in place of the one
/// its record held.
#[derive(Debug)]
pub struct Rehash {
    pub key_id: String,
    /// The hash the record held: the row is changed only if it still holds it.
    pub old_hmac: Vec<u8>,
    pub new_hmac: [u8; 32],
}

/// One statement for a whole batch of hashes made again under the pepper whose
/// fingerprint is `fingerprint`. A row whose hash changed meanwhile (another process
/// re-hashed it, an operator replaced the key) is left as it is. Returns the ids changed.
pub async fn record_rehashes(
    pool: &PgPool,
    rehashes: &[Rehash],
    fingerprint: &[u8],
) -> Result<Vec<String>, sqlx::Error> {
    let ids: Vec<&str> = rehashes.iter().map(|rehash| rehash.key_id.as_str()).collect();
    let old: Vec<&[u8]> = rehashes.iter().map(|rehash| rehash.old_hmac.as_slice()).collect();
    let new: Vec<&[u8]> = rehashes.iter().map(|rehash| rehash.new_hmac.as_slice()).collect();
    sqlx::query_scalar(
        "update api_keys set secret_hmac = hashed.new, pepper_fingerprint = $4
         from unnest($1::text[], $2::bytea[], $3::bytea[]) as hashed(id, old, new)
         where api_keys.id = hashed.id and api_keys.secret_hmac = hashed.old
         returning api_keys.id",
    )
    .bind(&ids)
    .bind(&old)
    .bind(&new)
    .bind(fingerprint)
    .fetch_all(pool)
    .await
}

impl AuthRecord {
    pub fn environment(&self) -> Option<Environment> {
        self.environment.parse().ok()
    }
}
