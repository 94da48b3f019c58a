//! The `items` table, defined once: the columns the API reads and how it decodes them,
//! the columns a batch writes and how it fills them from [`ItemData`].
//!
//! Amounts travel as text both ways, so that `0.10` stays `0.10`: the API reads
//! `numeric` through a cast to text, and a batch sends text that the upsert casts.

use chrono::{DateTime, Utc};
use lectern_schema::events::ItemType;
use lectern_schema::item::ItemData;
use lectern_schema::money::{Money, MoneyRef};
use lectern_schema::ItemRef;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::values::{instant, optional_text, text};
use crate::{names, position, selected_columns, upsert_sql, AppliedSequences, Commit, Key, Keys, Written};

/// The table.
pub const TABLE: &str = "items";

selected_columns! {
    /// What the API selects of an item, read by name (at compile time) in [`decode`].
    "id", "name", "sku", "description", "type", "unit",
    "sale_price_amount" :: "text", "sale_price_currency",
    "purchase_price_amount" :: "text", "purchase_price_currency",
    "created_at"
}

/// The searchable columns (see [`crate::contacts::SEARCH_FIELDS`]).
pub const SEARCH_FIELDS: &[&str] = &["name", "sku", "description"];

/// A selected row as served, by position and unchecked (see [`crate::contacts::decode`]).
pub fn decode(row: &PgRow) -> Result<ItemRef<'_>, sqlx::Error> {
    const fn at(column: &str) -> usize {
        position(SELECTED, column)
    }
    let id: Uuid = row.try_get_unchecked(const { at("id") })?;
    let unservable = |field, problem| sqlx::Error::Decode(Box::new(UnservableItem { id, field, problem }));
    let kind: &str = row.try_get_unchecked(const { at("type") })?;
    let sale_price = money(row, const { at("sale_price_amount") }, const { at("sale_price_currency") }, |problem| {
        unservable("salePrice", problem)
    });
    let purchase_price =
        money(row, const { at("purchase_price_amount") }, const { at("purchase_price_currency") }, |problem| {
            unservable("purchasePrice", problem)
        });
    Ok(ItemRef {
        id,
        name: text(row, const { at("name") })?,
        sku: optional_text(row, const { at("sku") })?,
        description: optional_text(row, const { at("description") })?,
        kind: ItemType::parse(kind).ok_or_else(|| unservable("type", kind.to_owned()))?,
        unit: optional_text(row, const { at("unit") })?,
        sale_price: sale_price?,
        purchase_price: purchase_price?,
        created_at: instant(row, const { at("created_at") })?,
    })
}

/// Why a stored row cannot be served (the table's constraints should make this impossible).
#[derive(Debug, thiserror::Error)]
#[error("item {id} has an unservable {field}: {problem}")]
pub struct UnservableItem {
    id: Uuid,
    field: &'static str,
    problem: String,
}

/// The price in columns `amount` and `currency`. A column that cannot be read fails
/// with its own error, so that its cause stays its source; a pair the contract cannot
/// carry fails as `unservable` says.
fn money(
    row: &PgRow,
    amount: usize,
    currency: usize,
    unservable: impl FnOnce(String) -> sqlx::Error,
) -> Result<Option<MoneyRef<'_>>, sqlx::Error> {
    let text = |index| row.try_get_unchecked::<Option<&str>, _>(index);
    match (text(amount)?, text(currency)?) {
        (Some(amount), Some(currency)) => MoneyRef::new(amount, currency).map(Some).map_err(unservable),
        (None, None) => Ok(None),
        _ => Err(unservable("amount and currency must both be present or both absent".to_owned())),
    }
}

/// The columns a batch writes after the key, in the order [`Batch::write`] binds them.
const DATA_COLUMNS: &[Written] = &[
    Written::as_sent("name", "text"),
    Written::as_sent("sku", "text"),
    Written::as_sent("description", "text"),
    Written::as_sent("type", "text"),
    Written::as_sent("unit", "text"),
    Written::cast("sale_price_amount", "text", "numeric"),
    Written::as_sent("sale_price_currency", "text"),
    Written::cast("purchase_price_amount", "text", "numeric"),
    Written::as_sent("purchase_price_currency", "text"),
    Written::as_sent("created_at", "timestamptz"),
];

/// Every column a batch writes, the key's first: all the table's columns but the
/// generated ones.
pub fn written_columns() -> Vec<&'static str> {
    names(DATA_COLUMNS)
}

/// Rows to write, one array per column; a tombstone's data columns are null.
#[derive(Debug, Default)]
pub struct Batch {
    keys: Keys,
    name: Vec<Option<String>>,
    sku: Vec<Option<String>>,
    description: Vec<Option<String>>,
    kind: Vec<Option<&'static str>>,
    unit: Vec<Option<String>>,
    sale_price_amount: Vec<Option<String>>,
    sale_price_currency: Vec<Option<String>>,
    purchase_price_amount: Vec<Option<String>>,
    purchase_price_currency: Vec<Option<String>>,
    created_at: Vec<Option<DateTime<Utc>>>,
}

impl Batch {
    /// Adds the row `key` with `data` (`None` for a tombstone).
    pub fn push(&mut self, key: Key, data: Option<&ItemData>) {
        self.keys.push(key);
        let amount = |price: &Option<Money>| price.as_ref().map(|money| money.amount.as_str().to_owned());
        let currency = |price: &Option<Money>| price.as_ref().map(|money| money.currency.as_str().to_owned());
        // Destructured whole: a field added to the contract is a compile error here.
        match data {
            Some(ItemData { name, sku, description, kind, unit, sale_price, purchase_price, created_at }) => {
                self.name.push(Some(name.clone()));
                self.sku.push(sku.clone());
                self.description.push(description.clone());
                self.kind.push(Some(kind.as_str()));
                self.unit.push(unit.clone());
                self.sale_price_amount.push(amount(sale_price));
                self.sale_price_currency.push(currency(sale_price));
                self.purchase_price_amount.push(amount(purchase_price));
                self.purchase_price_currency.push(currency(purchase_price));
                self.created_at.push(Some(created_at.as_datetime()));
            }
            None => {
                self.name.push(None);
                self.sku.push(None);
                self.description.push(None);
                self.kind.push(None);
                self.unit.push(None);
                self.sale_price_amount.push(None);
                self.sale_price_currency.push(None);
                self.purchase_price_amount.push(None);
                self.purchase_price_currency.push(None);
                self.created_at.push(None);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Writes every row in one statement on `connection`, committed as `commit` says.
    pub async fn write(&self, connection: &mut PgConnection, commit: Commit) -> Result<(), sqlx::Error> {
        self.write_to(connection, TABLE, commit).await
    }

    /// Writes every row into `table`, a table of [`TABLE`]'s columns (a model built
    /// beside the live one: `verify`'s, `rebuild`'s), as [`Batch::write`] does.
    pub async fn write_to(
        &self,
        connection: &mut PgConnection,
        table: &str,
        commit: Commit,
    ) -> Result<(), sqlx::Error> {
        self.write_recording(connection, table, commit, None).await
    }

    /// Writes every row into `table`, as [`Batch::write_to`] does, and in the same
    /// statement records `applied`, the stream sequences the rows come from, as applied
    /// ([`crate::APPLIED`]).
    pub async fn write_recording(
        &self,
        connection: &mut PgConnection,
        table: &str,
        commit: Commit,
        applied: Option<AppliedSequences<'_>>,
    ) -> Result<(), sqlx::Error> {
        let sql = upsert_sql(table, DATA_COLUMNS, commit, applied.is_some());
        let query = self
            .keys
            .bound(&sql)
            .bind(&self.name)
            .bind(&self.sku)
            .bind(&self.description)
            .bind(&self.kind)
            .bind(&self.unit)
            .bind(&self.sale_price_amount)
            .bind(&self.sale_price_currency)
            .bind(&self.purchase_price_amount)
            .bind(&self.purchase_price_currency)
            .bind(&self.created_at);
        match applied {
            Some(applied) => query.bind(applied.sequences).bind(applied.stream).execute(connection).await?,
            None => query.execute(connection).await?,
        };
        Ok(())
    }
}
