//! The `items` table as the API reads it.

use std::str::Utf8Error;

use lectern_schema::events::ItemType;
use lectern_schema::money::MoneyRef;
use lectern_schema::ItemRef;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::listing::Resource;
use super::values::{instant, optional_text, text};
use crate::listing::{query_enum, Keyed, KindFilter, Position, SortKey};

query_enum! {
    /// `type` of listItems: which items to list.
    ItemKind { All = "all", Product = "product", Service = "service" }
}

impl KindFilter for ItemKind {
    fn as_str(self) -> &'static str {
        ItemKind::as_str(self)
    }

    fn condition(self) -> Option<&'static str> {
        match self {
            Self::All => None,
            Self::Product => Some("type = 'product'"),
            Self::Service => Some("type = 'service'"),
        }
    }
}

/// Read by position in [`Items::record`]: keep the two in the same order. Amounts are
/// read as text, so `0.10` stays `0.10`.
const COLUMNS: &str = "id, name, sku, description, type, unit, sale_price_amount::text as sale_price_amount, \
     sale_price_currency, purchase_price_amount::text as purchase_price_amount, purchase_price_currency, created_at";

pub struct Items;

impl Resource for Items {
    const NAME: &'static str = "items";
    const COLUMNS: &'static str = COLUMNS;
    const SEARCH_FIELDS: &'static [&'static str] = &["name", "sku", "description"];
    type Kind = ItemKind;
    type Record<'r> = ItemRef<'r>;

    fn record(row: &PgRow) -> Result<ItemRef<'_>, sqlx::Error> {
        // By position and unchecked, as for contacts (see `Contacts::record`).
        let id: Uuid = row.try_get_unchecked(0)?;
        let unservable = |field, problem| sqlx::Error::Decode(Box::new(UnservableItem { id, field, problem }));
        let kind: &str = row.try_get_unchecked(4)?;
        Ok(ItemRef {
            id,
            name: text(row, 1)?,
            sku: optional_text(row, 2)?,
            description: optional_text(row, 3)?,
            kind: ItemType::parse(kind).ok_or_else(|| unservable("type", kind.to_owned()))?,
            unit: optional_text(row, 5)?,
            sale_price: money(row, 6, |problem| unservable("salePrice", problem))?,
            purchase_price: money(row, 8, |problem| unservable("purchasePrice", problem))?,
            created_at: instant(row, 10)?,
        })
    }
}

impl Keyed for ItemRef<'_> {
    fn position(&self, sort: SortKey) -> Result<Position, Utf8Error> {
        Ok(Position::of(sort, self.created_at.as_datetime(), self.name.as_str()?, self.id))
    }
}

/// Why a stored row cannot be served (the table's constraints should make this impossible).
#[derive(Debug, thiserror::Error)]
#[error("item {id} has an unservable {field}: {problem}")]
pub struct UnservableItem {
    id: Uuid,
    field: &'static str,
    problem: String,
}

/// The price whose amount is column `amount` and whose currency is the next one. A
/// column that cannot be read fails with its own error, so that its cause stays its
/// source; a pair the contract cannot carry fails as `unservable` says.
fn money(
    row: &PgRow,
    amount: usize,
    unservable: impl FnOnce(String) -> sqlx::Error,
) -> Result<Option<MoneyRef<'_>>, sqlx::Error> {
    let text = |index| row.try_get_unchecked::<Option<&str>, _>(index);
    match (text(amount)?, text(amount + 1)?) {
        (Some(amount), Some(currency)) => MoneyRef::new(amount, currency).map(Some).map_err(unservable),
        (None, None) => Ok(None),
        _ => Err(unservable("amount and currency must both be present or both absent".to_owned())),
    }
}
