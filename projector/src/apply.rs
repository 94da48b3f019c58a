//! One batch of messages into the read model, in one transaction.
//!
//! Events are first reduced to the highest version per record (a batch may hold
//! several versions of one record), then written with one set-based upsert per table,
//! guarded by `version < excluded.version`: duplicates, redeliveries, out-of-order
//! arrival and racing projectors all converge on the highest version. Rows are written
//! in key order so two projectors never deadlock on each other.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use lectern_schema::events::{ChangeEvent, ChangeKind, EntityKind, RecordState};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::dead_letters::{self, Refused};
use crate::error::is_transient_database_error;

/// One message as received: where it came from and its raw bytes.
#[derive(Clone, Debug)]
pub struct Received {
    pub subject: String,
    pub stream_sequence: u64,
    pub payload: Vec<u8>,
}

/// What a batch did, for logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub events: usize,
    pub dead_letters: usize,
}

/// Whether a batch's commit waits for its WAL flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// The commit returns once flushed: the batch may be acknowledged straight after.
    Flushed,
    /// The commit returns before its flush (`synchronous_commit = off` for that
    /// transaction alone), so its rows are visible sooner; acknowledge only after a flush
    /// barrier ([`crate::durable_acks`]). A batch of one table's events with nothing
    /// refused, the usual kind, is then a single statement and one round trip.
    BeforeFlush,
}

impl CommitMode {
    fn begin(self) -> &'static str {
        match self {
            Self::Flushed => "begin",
            // One round trip, like a plain `begin`. Batches that need a transaction only.
            Self::BeforeFlush => "begin; set local synchronous_commit = off",
        }
    }
}

type Decoded<'a> = (&'a Received, ChangeEvent);

/// Decodes, applies and dead-letters `batch` in one transaction, committed as `mode`
/// says. An `Err` means nothing was committed, and the whole batch may be retried.
pub async fn apply_batch(pool: &PgPool, batch: &[Received], mode: CommitMode) -> Result<Applied, sqlx::Error> {
    let mut events: Vec<Decoded<'_>> = Vec::with_capacity(batch.len());
    let mut refused: Vec<Refused<'_>> = Vec::new();
    for message in batch {
        match ChangeEvent::decode_from(&message.subject, &message.payload) {
            Ok(event) => events.push((message, event)),
            Err(error) => refused.push((message, error.to_string())),
        }
    }
    let written = match (mode, refused.is_empty()) {
        (CommitMode::BeforeFlush, true) => write_in_one_statement(pool, &events).await,
        _ => write_in_a_transaction(pool, &events, &refused, mode).await,
    };
    match written {
        Ok(()) => {
            crate::metrics::record_committed(
                events.iter().map(|(_, event)| event),
                refused.iter().map(|(message, _)| message.subject.as_str()),
            );
            Ok(Applied { events: events.len(), dead_letters: refused.len() })
        }
        Err(error) if is_transient_database_error(&error) => Err(error),
        Err(error) => {
            // The database refused something the contract allowed (a limit such as an
            // enormous field, or a bug). Nothing was committed: find the culprits one by
            // one rather than block.
            tracing::warn!(%error, "batch refused by the database; applying its events one by one");
            apply_one_by_one(pool, events, refused, mode).await
        }
    }
}

/// The usual batch, events of one table and nothing refused, as a single statement that
/// is its own transaction and commits before its flush. A `begin` and a `commit` around
/// it were two more round trips per batch, each a chance for a busy host to schedule
/// the projector or PostgreSQL out (bench/history.md, 2026-11-25). A batch of contacts and items
/// both goes through [`write_in_a_transaction`], so that it stays atomic.
async fn write_in_one_statement(pool: &PgPool, events: &[Decoded<'_>]) -> Result<(), sqlx::Error> {
    let (contacts, items) = newest_by_record(events.iter().map(|(_, event)| event));
    match (contacts.is_empty(), items.is_empty()) {
        (false, true) => upsert_contacts(&mut *pool.acquire().await?, &contacts, Commit::OnItsOwnBeforeFlush).await,
        (true, false) => upsert_items(&mut *pool.acquire().await?, &items, Commit::OnItsOwnBeforeFlush).await,
        (false, false) => write_in_a_transaction(pool, events, &[], CommitMode::BeforeFlush).await,
        (true, true) => Ok(()),
    }
}

/// Every write of a batch in one transaction, committed as `mode` says; nothing is
/// committed if it fails.
async fn write_in_a_transaction(
    pool: &PgPool,
    events: &[Decoded<'_>],
    refused: &[Refused<'_>],
    mode: CommitMode,
) -> Result<(), sqlx::Error> {
    let mut transaction = pool.begin_with(mode.begin()).await?;
    write_events(&mut transaction, events.iter().map(|(_, event)| event)).await?;
    dead_letters::store(&mut transaction, refused).await?;
    transaction.commit().await
}

/// A batch the database refused: each event under a savepoint of its own, the refused
/// ones dead-lettered, and the dead letters stored one by one
/// ([`dead_letters::store_one_by_one`]), so that whatever the database refuses ends as a
/// dead letter instead of failing the batch again.
async fn apply_one_by_one<'a>(
    pool: &PgPool,
    events: Vec<Decoded<'a>>,
    mut refused: Vec<Refused<'a>>,
    mode: CommitMode,
) -> Result<Applied, sqlx::Error> {
    let mut transaction = pool.begin_with(mode.begin()).await?;
    let mut applied = Vec::with_capacity(events.len());
    for (message, event) in events {
        sqlx::query("savepoint one_event").execute(&mut *transaction).await?;
        match write_events(&mut transaction, std::iter::once(&event)).await {
            Ok(()) => applied.push(event),
            Err(error) if is_transient_database_error(&error) => return Err(error),
            Err(error) => {
                sqlx::query("rollback to savepoint one_event").execute(&mut *transaction).await?;
                tracing::warn!(%error, event_id = %event.event_id, "event refused by the database; dead-lettered");
                refused.push((message, format!("refused by the database: {error}")));
            }
        }
    }
    dead_letters::store_one_by_one(&mut transaction, &refused).await?;
    transaction.commit().await?;
    crate::metrics::record_committed(applied.iter(), refused.iter().map(|(message, _)| message.subject.as_str()));
    Ok(Applied { events: applied.len(), dead_letters: refused.len() })
}

/// Writes the newest event of each record, inside the caller's transaction.
pub async fn write_events<'e>(
    connection: &mut PgConnection,
    events: impl Iterator<Item = &'e ChangeEvent>,
) -> Result<(), sqlx::Error> {
    let (contacts, items) = newest_by_record(events);
    if !contacts.is_empty() {
        upsert_contacts(connection, &contacts, Commit::WithTheTransaction).await?;
    }
    if !items.is_empty() {
        upsert_items(connection, &items, Commit::WithTheTransaction).await?;
    }
    Ok(())
}

/// The newest event of each record, contacts and items apart, each in key order; older
/// ones in the batch could not win.
fn newest_by_record<'e>(events: impl Iterator<Item = &'e ChangeEvent>) -> (Vec<&'e ChangeEvent>, Vec<&'e ChangeEvent>) {
    let mut newest: BTreeMap<(EntityKind, Uuid, Uuid), &ChangeEvent> = BTreeMap::new();
    for event in events {
        let key = (event.event_type.entity, event.workspace_id, event.entity_id);
        let entry = newest.entry(key).or_insert(event);
        if event.version > entry.version {
            *entry = event;
        }
    }
    newest.into_values().partition(|event| event.event_type.entity == EntityKind::Contact)
}

/// How an upsert's writes are committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Commit {
    /// By the transaction the statement runs in.
    WithTheTransaction,
    /// The statement is its own transaction, committed without waiting for its flush.
    OnItsOwnBeforeFlush,
}

impl Commit {
    /// What goes before `insert`. `set local` has no effect outside a transaction
    /// block, but `set_config(…, true)` lasts until the end of the statement's own
    /// transaction, whose commit is the one that reads it; the session keeps the
    /// server's setting.
    fn preamble(self) -> &'static str {
        match self {
            Self::WithTheTransaction => "",
            Self::OnItsOwnBeforeFlush => {
                "with commit_before_flush as (select set_config('synchronous_commit', 'off', true)) "
            }
        }
    }

    /// What the upsert's rows are selected from besides its arrays: the setting's row,
    /// so that it is evaluated.
    fn source(self) -> &'static str {
        match self {
            Self::WithTheTransaction => "",
            Self::OnItsOwnBeforeFlush => "commit_before_flush, ",
        }
    }
}

fn status(change: ChangeKind) -> &'static str {
    match change {
        ChangeKind::Created | ChangeKind::Updated | ChangeKind::Restored => "active",
        ChangeKind::Archived => "archived",
        ChangeKind::Deleted => "deleted",
    }
}

/// Every column takes the winning event's value. Archived and deleted events carry no
/// data, so their tombstones hold none: the row is then a function of the highest
/// version alone, whatever order the events arrived in.
fn take_excluded(column: &str) -> String {
    format!("{column} = excluded.{column}")
}

async fn upsert_contacts(
    connection: &mut PgConnection,
    events: &[&ChangeEvent],
    commit: Commit,
) -> Result<(), sqlx::Error> {
    let mut columns = ContactColumns::default();
    for event in events {
        let data = match &event.state {
            Some(RecordState::Contact(data)) => Some(data),
            _ => None,
        };
        columns.workspace_id.push(event.workspace_id);
        columns.id.push(event.entity_id);
        columns.version.push(event.version);
        columns.status.push(status(event.event_type.change));
        columns.name.push(data.map(|d| d.name.clone()));
        columns.email.push(data.and_then(|d| d.email.clone()));
        columns.phone.push(data.and_then(|d| d.phone.clone()));
        columns.address.push(data.and_then(|d| d.address.clone()));
        columns.tin.push(data.and_then(|d| d.tin.clone()));
        columns.is_customer.push(data.map(|d| d.is_customer));
        columns.is_supplier.push(data.map(|d| d.is_supplier));
        columns.created_at.push(data.map(|d| d.created_at.as_datetime()));
    }
    let sql = format!(
        "{}insert into contacts as c (workspace_id, id, version, status, name, email, phone, address, tin,
                                    is_customer, is_supplier, created_at)
         select u.* from {}unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[],
                              $8::text[], $9::text[], $10::bool[], $11::bool[], $12::timestamptz[]) as u
         on conflict (workspace_id, id) do update set
             version = excluded.version, status = excluded.status, {}
         where c.version < excluded.version",
        commit.preamble(),
        commit.source(),
        ["name", "email", "phone", "address", "tin", "is_customer", "is_supplier", "created_at"]
            .map(take_excluded)
            .join(", ")
    );
    sqlx::query(&sql)
        .bind(&columns.workspace_id)
        .bind(&columns.id)
        .bind(&columns.version)
        .bind(&columns.status)
        .bind(&columns.name)
        .bind(&columns.email)
        .bind(&columns.phone)
        .bind(&columns.address)
        .bind(&columns.tin)
        .bind(&columns.is_customer)
        .bind(&columns.is_supplier)
        .bind(&columns.created_at)
        .execute(connection)
        .await?;
    Ok(())
}

#[derive(Default)]
struct ContactColumns {
    workspace_id: Vec<Uuid>,
    id: Vec<Uuid>,
    version: Vec<i64>,
    status: Vec<&'static str>,
    name: Vec<Option<String>>,
    email: Vec<Option<String>>,
    phone: Vec<Option<String>>,
    address: Vec<Option<String>>,
    tin: Vec<Option<String>>,
    is_customer: Vec<Option<bool>>,
    is_supplier: Vec<Option<bool>>,
    created_at: Vec<Option<DateTime<Utc>>>,
}

async fn upsert_items(
    connection: &mut PgConnection,
    events: &[&ChangeEvent],
    commit: Commit,
) -> Result<(), sqlx::Error> {
    let mut columns = ItemColumns::default();
    for event in events {
        let data = match &event.state {
            Some(RecordState::Item(data)) => Some(data),
            _ => None,
        };
        let sale = data.and_then(|d| d.sale_price.as_ref());
        let purchase = data.and_then(|d| d.purchase_price.as_ref());
        columns.workspace_id.push(event.workspace_id);
        columns.id.push(event.entity_id);
        columns.version.push(event.version);
        columns.status.push(status(event.event_type.change));
        columns.name.push(data.map(|d| d.name.clone()));
        columns.sku.push(data.and_then(|d| d.sku.clone()));
        columns.description.push(data.and_then(|d| d.description.clone()));
        columns.kind.push(data.map(|d| d.kind.as_str()));
        columns.unit.push(data.and_then(|d| d.unit.clone()));
        columns.sale_amount.push(sale.map(|m| m.amount.as_str().to_owned()));
        columns.sale_currency.push(sale.map(|m| m.currency.as_str().to_owned()));
        columns.purchase_amount.push(purchase.map(|m| m.amount.as_str().to_owned()));
        columns.purchase_currency.push(purchase.map(|m| m.currency.as_str().to_owned()));
        columns.created_at.push(data.map(|d| d.created_at.as_datetime()));
    }
    let sql = format!(
        "{}insert into items as c (workspace_id, id, version, status, name, sku, description, type, unit,
                                 sale_price_amount, sale_price_currency, purchase_price_amount,
                                 purchase_price_currency, created_at)
         select workspace_id, id, version, status, name, sku, description, type, unit,
                sale_amount::numeric, sale_currency, purchase_amount::numeric, purchase_currency, created_at
         from {}unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
              as u(workspace_id, id, version, status, name, sku, description, type, unit,
                   sale_amount, sale_currency, purchase_amount, purchase_currency, created_at)
         on conflict (workspace_id, id) do update set
             version = excluded.version, status = excluded.status, {}
         where c.version < excluded.version",
        commit.preamble(),
        commit.source(),
        [
            "name",
            "sku",
            "description",
            "type",
            "unit",
            "sale_price_amount",
            "sale_price_currency",
            "purchase_price_amount",
            "purchase_price_currency",
            "created_at",
        ]
        .map(take_excluded)
        .join(", ")
    );
    sqlx::query(&sql)
        .bind(&columns.workspace_id)
        .bind(&columns.id)
        .bind(&columns.version)
        .bind(&columns.status)
        .bind(&columns.name)
        .bind(&columns.sku)
        .bind(&columns.description)
        .bind(&columns.kind)
        .bind(&columns.unit)
        .bind(&columns.sale_amount)
        .bind(&columns.sale_currency)
        .bind(&columns.purchase_amount)
        .bind(&columns.purchase_currency)
        .bind(&columns.created_at)
        .execute(connection)
        .await?;
    Ok(())
}

#[derive(Default)]
struct ItemColumns {
    workspace_id: Vec<Uuid>,
    id: Vec<Uuid>,
    version: Vec<i64>,
    status: Vec<&'static str>,
    name: Vec<Option<String>>,
    sku: Vec<Option<String>>,
    description: Vec<Option<String>>,
    kind: Vec<Option<&'static str>>,
    unit: Vec<Option<String>>,
    sale_amount: Vec<Option<String>>,
    sale_currency: Vec<Option<String>>,
    purchase_amount: Vec<Option<String>>,
    purchase_currency: Vec<Option<String>>,
    created_at: Vec<Option<DateTime<Utc>>>,
}
