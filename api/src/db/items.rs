//! The `items` table as the API reads it.

use chrono::{DateTime, Utc};
use lectern_schema::events::ItemType;
use lectern_schema::money::{Amount, Currency, Money};
use lectern_schema::Item;
use uuid::Uuid;

use super::listing::Resource;
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

/// One active item row. Amounts are read as text, so `0.10` stays `0.10`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ItemRow {
    pub id: Uuid,
    pub name: String,
    pub sku: Option<String>,
    pub description: Option<String>,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub unit: Option<String>,
    pub sale_price_amount: Option<String>,
    pub sale_price_currency: Option<String>,
    pub purchase_price_amount: Option<String>,
    pub purchase_price_currency: Option<String>,
    pub created_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, sku, description, type, unit, sale_price_amount::text as sale_price_amount, \
     sale_price_currency, purchase_price_amount::text as purchase_price_amount, purchase_price_currency, created_at";

pub struct Items;

impl Resource for Items {
    const NAME: &'static str = "items";
    const COLUMNS: &'static str = COLUMNS;
    const SEARCH_FIELDS: &'static [&'static str] = &["name", "sku", "description"];
    type Kind = ItemKind;
    type Row = ItemRow;
}

impl Keyed for ItemRow {
    fn position(&self, sort: SortKey) -> Position {
        match sort {
            SortKey::CreatedAt => Position::CreatedAt { at: self.created_at, id: self.id },
            SortKey::Name => Position::Name { name: self.name.clone(), id: self.id },
        }
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

fn money(
    id: Uuid,
    field: &'static str,
    amount: Option<String>,
    currency: Option<String>,
) -> Result<Option<Money>, UnservableItem> {
    let unservable = |problem: String| UnservableItem { id, field, problem };
    match (amount, currency) {
        (Some(amount), Some(currency)) => Ok(Some(Money {
            amount: Amount::parse(&amount).map_err(unservable)?,
            currency: Currency::parse(&currency).map_err(unservable)?,
        })),
        (None, None) => Ok(None),
        _ => Err(unservable("amount and currency must both be present or both absent".to_owned())),
    }
}

impl TryFrom<ItemRow> for Item {
    type Error = UnservableItem;

    fn try_from(row: ItemRow) -> Result<Self, UnservableItem> {
        let id = row.id;
        Ok(Self {
            id,
            kind: ItemType::parse(&row.kind).ok_or_else(|| UnservableItem {
                id,
                field: "type",
                problem: row.kind.clone(),
            })?,
            sale_price: money(id, "salePrice", row.sale_price_amount, row.sale_price_currency)?,
            purchase_price: money(id, "purchasePrice", row.purchase_price_amount, row.purchase_price_currency)?,
            name: row.name,
            sku: row.sku,
            description: row.description,
            unit: row.unit,
            created_at: row.created_at.into(),
        })
    }
}
