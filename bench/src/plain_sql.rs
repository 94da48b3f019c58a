//! The projector's baseline: the same rows, in the same batches of 1,000 events (each
//! sorted by key), written by the best plain SQL on one connection into a second empty
//! database: `insert … select from unnest(…) on conflict … do update … where
//! version < excluded.version`, one transaction per batch, each committed without
//! waiting for its flush and the whole load flushed once before the clock stops (the
//! projector's batches too commit before their flush and are acknowledged after a
//! flush barrier). Statements and their arguments are built before the clock starts,
//! so only PostgreSQL's work is timed.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use super::infra::{drop_database, Database};
use super::report::thousands;
use super::{Context, Result, Setup};
use lectern_fixtures::generator::plan::{Entity, Plan, Record};
use lectern_fixtures::generator::records::{contact, item, Contact, Item};

/// The projector's batch size.
const BATCH: usize = 1_000;

const UPSERT_CONTACTS: &str = "
insert into contacts as c (workspace_id, id, version, status, name, email, phone, address, tin,
                           is_customer, is_supplier, created_at)
select * from unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::text[], $10::bool[], $11::bool[], $12::timestamptz[])
on conflict (workspace_id, id) do update set
    version = excluded.version, status = excluded.status, name = excluded.name, email = excluded.email,
    phone = excluded.phone, address = excluded.address, tin = excluded.tin, is_customer = excluded.is_customer,
    is_supplier = excluded.is_supplier, created_at = excluded.created_at
where c.version < excluded.version";

const UPSERT_ITEMS: &str = "
insert into items as i (workspace_id, id, version, status, name, sku, description, type, unit,
                        sale_price_amount, sale_price_currency, purchase_price_amount, purchase_price_currency,
                        created_at)
select w, id, v, s, n, sku, d, t, u, sa::numeric, sc, pa::numeric, pc, c
from unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
            $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
     as u(w, id, v, s, n, sku, d, t, u, sa, sc, pa, pc, c)
on conflict (workspace_id, id) do update set
    version = excluded.version, status = excluded.status, name = excluded.name, sku = excluded.sku,
    description = excluded.description, type = excluded.type, unit = excluded.unit,
    sale_price_amount = excluded.sale_price_amount, sale_price_currency = excluded.sale_price_currency,
    purchase_price_amount = excluded.purchase_price_amount,
    purchase_price_currency = excluded.purchase_price_currency, created_at = excluded.created_at
where i.version < excluded.version";

pub struct Written {
    pub rows: u64,
    pub elapsed: Duration,
}

impl Written {
    pub fn per_second(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
}

/// One batch's statements, their arguments encoded before the clock starts.
struct Batch {
    contacts: Option<Query>,
    items: Option<Query>,
    rows: u64,
}

/// The plain-SQL baseline written into the run's second database, which is dropped
/// afterwards unless the run keeps its databases.
pub async fn write_into_second_database(setup: &Setup, plan: &Plan) -> Result<Written> {
    let plain = Database::create(&setup.databases.1).await?;
    let written = write_all(plan, &plain.url).await?;
    plain.pool.close().await;
    if !setup.options.keep {
        drop_database(&plain.name).await?;
    }
    eprintln!("      {:.1} s, {} rows/s", written.elapsed.as_secs_f64(), thousands(written.per_second()));
    Ok(written)
}

pub async fn write_all(plan: &Plan, url: &str) -> Result<Written> {
    let batches: Vec<Batch> = plan.creation_order().chunks(BATCH).map(|chunk| batch(plan, chunk)).collect();
    let mut connection = PgConnection::connect(url).await.context("connect to the baseline database")?;
    // Commits as the projector's do: without waiting for each flush, and the whole load
    // on disk (one synchronous commit) before the clock stops.
    sqlx::raw_sql("set synchronous_commit = off").execute(&mut connection).await?;
    let started = Instant::now();
    let mut rows = 0;
    for batch in batches {
        let mut transaction = connection.begin().await?;
        if let Some(query) = batch.contacts {
            query.execute(&mut *transaction).await.context("plain SQL contacts")?;
        }
        if let Some(query) = batch.items {
            query.execute(&mut *transaction).await.context("plain SQL items")?;
        }
        transaction.commit().await?;
        rows += batch.rows;
    }
    lectern_projector::daemon::durable_acks::flush_barrier(&mut connection)
        .await
        .context("flush the plain SQL load")?;
    Ok(Written { rows, elapsed: started.elapsed() })
}

fn batch(plan: &Plan, chunk: &[Record]) -> Batch {
    let mut contacts = Vec::new();
    let mut items = Vec::new();
    for record in chunk {
        match record.entity {
            Entity::Contact => contacts.push(contact(plan, *record)),
            Entity::Item => items.push(item(plan, *record)),
        }
    }
    // Key order, as the projector writes: fewer page splits, and no deadlocks.
    contacts.sort_by_key(|row| (row.workspace_id, row.id));
    items.sort_by_key(|row| (row.workspace_id, row.id));
    Batch {
        rows: (contacts.len() + items.len()) as u64,
        contacts: (!contacts.is_empty()).then(|| contacts_query(&contacts)),
        items: (!items.is_empty()).then(|| items_query(&items)),
    }
}

fn at(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or_default()
}

type Query = sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn contacts_query(rows: &[Contact]) -> Query {
    let column = |f: fn(&Contact) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    sqlx::query(UPSERT_CONTACTS)
        .bind(rows.iter().map(|row| row.workspace_id).collect::<Vec<Uuid>>())
        .bind(rows.iter().map(|row| row.id).collect::<Vec<Uuid>>())
        .bind(vec![1_i64; rows.len()])
        .bind(vec!["active"; rows.len()])
        .bind(column(|row| Some(row.name.clone())))
        .bind(column(|row| row.email.clone()))
        .bind(column(|row| row.phone.clone()))
        .bind(column(|row| row.address.clone()))
        .bind(column(|row| row.tin.clone()))
        .bind(rows.iter().map(|row| row.is_customer).collect::<Vec<_>>())
        .bind(rows.iter().map(|row| row.is_supplier).collect::<Vec<_>>())
        .bind(rows.iter().map(|row| at(row.created_at)).collect::<Vec<_>>())
}

fn items_query(rows: &[Item]) -> Query {
    let column = |f: fn(&Item) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    sqlx::query(UPSERT_ITEMS)
        .bind(rows.iter().map(|row| row.workspace_id).collect::<Vec<Uuid>>())
        .bind(rows.iter().map(|row| row.id).collect::<Vec<Uuid>>())
        .bind(vec![1_i64; rows.len()])
        .bind(vec!["active"; rows.len()])
        .bind(column(|row| Some(row.name.clone())))
        .bind(column(|row| row.sku.clone()))
        .bind(column(|row| row.description.clone()))
        .bind(column(|row| Some(row.kind.to_owned())))
        .bind(column(|row| row.unit.map(str::to_owned)))
        .bind(column(|row| row.sale.as_ref().map(|price| price.0.clone())))
        .bind(column(|row| row.sale.as_ref().map(|price| price.1.to_owned())))
        .bind(column(|row| row.purchase.as_ref().map(|price| price.0.clone())))
        .bind(column(|row| row.purchase.as_ref().map(|price| price.1.to_owned())))
        .bind(rows.iter().map(|row| at(row.created_at)).collect::<Vec<_>>())
}
